;; Hand-written Wasm kernels of embed/benches/foreign_kernels.rs: loops as a
;; person writes them in WAT, not as LLVM emits them. Each has a CUDA C
;; twin in kernels/bench/foreign/twins.cu (the same arithmetic in the same
;; order). 1-D grids, a thread per output.
;;
;; - wat_matmul(a, b, c, n): c = a b (n x n, row-major), k counting up
;;   from 0 with the exit test at the top of the loop (block/loop/br_if).
;; - wat_matmul_down(a, b, c, n): the same product with k counting down
;;   from n - 1 to 0, the test at the bottom (n >= 1).
;; - wat_matmul_up_bottom, wat_matmul_down_top: the other two shapes of the
;;   same loops (k up with the test at the bottom, n >= 1; k down from n
;;   with the test at the top), summing in the order of wat_matmul and
;;   wat_matmul_down.
;; - wat_column_sums(x, out, rows, cols): out[j] = sum of column j, a
;;   pointer walking down the column while a counter counts the rows down
;;   to 0, the test at the bottom (rows >= 1).
(module
  (import "tensorwasm_kernel" "thread_idx_x" (func $thread_idx_x (result i32)))
  (import "tensorwasm_kernel" "block_idx_x" (func $block_idx_x (result i32)))
  (import "tensorwasm_kernel" "block_dim_x" (func $block_dim_x (result i32)))
  (memory (export "memory") 1)

  ;; blockIdx.x * blockDim.x + threadIdx.x
  (func $global_id (result i32)
    (i32.add (i32.mul (call $block_idx_x) (call $block_dim_x)) (call $thread_idx_x)))

  ;; f32 element `index` of the array at `base`.
  (func $at (param $base i32) (param $index i32) (result f32)
    (f32.load (i32.add (local.get $base) (i32.shl (local.get $index) (i32.const 2)))))

  (func (export "wat_matmul") (param $a i32) (param $b i32) (param $c i32) (param $n i32)
    (local $t i32) (local $i i32) (local $j i32) (local $k i32) (local $acc f32)
    (local.set $t (call $global_id))
    (if (i32.ge_u (local.get $t) (i32.mul (local.get $n) (local.get $n)))
      (then (return)))
    (local.set $i (i32.div_u (local.get $t) (local.get $n)))
    (local.set $j (i32.rem_u (local.get $t) (local.get $n)))
    (block $done
      (loop $next
        (br_if $done (i32.ge_s (local.get $k) (local.get $n)))
        (local.set $acc
          (f32.add (local.get $acc)
            (f32.mul
              (call $at (local.get $a) (i32.add (i32.mul (local.get $i) (local.get $n)) (local.get $k)))
              (call $at (local.get $b) (i32.add (i32.mul (local.get $k) (local.get $n)) (local.get $j))))))
        (local.set $k (i32.add (local.get $k) (i32.const 1)))
        (br $next)))
    (f32.store (i32.add (local.get $c) (i32.shl (local.get $t) (i32.const 2))) (local.get $acc)))

  (func (export "wat_matmul_down") (param $a i32) (param $b i32) (param $c i32) (param $n i32)
    (local $t i32) (local $i i32) (local $j i32) (local $k i32) (local $acc f32)
    (local.set $t (call $global_id))
    (if (i32.ge_u (local.get $t) (i32.mul (local.get $n) (local.get $n)))
      (then (return)))
    (local.set $i (i32.div_u (local.get $t) (local.get $n)))
    (local.set $j (i32.rem_u (local.get $t) (local.get $n)))
    (local.set $k (i32.sub (local.get $n) (i32.const 1)))
    (loop $next
      (local.set $acc
        (f32.add (local.get $acc)
          (f32.mul
            (call $at (local.get $a) (i32.add (i32.mul (local.get $i) (local.get $n)) (local.get $k)))
            (call $at (local.get $b) (i32.add (i32.mul (local.get $k) (local.get $n)) (local.get $j))))))
      (local.set $k (i32.sub (local.get $k) (i32.const 1)))
      (br_if $next (i32.ge_s (local.get $k) (i32.const 0))))
    (f32.store (i32.add (local.get $c) (i32.shl (local.get $t) (i32.const 2))) (local.get $acc)))

  (func (export "wat_matmul_up_bottom") (param $a i32) (param $b i32) (param $c i32) (param $n i32)
    (local $t i32) (local $i i32) (local $j i32) (local $k i32) (local $acc f32)
    (local.set $t (call $global_id))
    (if (i32.ge_u (local.get $t) (i32.mul (local.get $n) (local.get $n)))
      (then (return)))
    (local.set $i (i32.div_u (local.get $t) (local.get $n)))
    (local.set $j (i32.rem_u (local.get $t) (local.get $n)))
    (loop $next
      (local.set $acc
        (f32.add (local.get $acc)
          (f32.mul
            (call $at (local.get $a) (i32.add (i32.mul (local.get $i) (local.get $n)) (local.get $k)))
            (call $at (local.get $b) (i32.add (i32.mul (local.get $k) (local.get $n)) (local.get $j))))))
      (local.set $k (i32.add (local.get $k) (i32.const 1)))
      (br_if $next (i32.lt_s (local.get $k) (local.get $n))))
    (f32.store (i32.add (local.get $c) (i32.shl (local.get $t) (i32.const 2))) (local.get $acc)))

  (func (export "wat_matmul_down_top") (param $a i32) (param $b i32) (param $c i32) (param $n i32)
    (local $t i32) (local $i i32) (local $j i32) (local $k i32) (local $acc f32)
    (local.set $t (call $global_id))
    (if (i32.ge_u (local.get $t) (i32.mul (local.get $n) (local.get $n)))
      (then (return)))
    (local.set $i (i32.div_u (local.get $t) (local.get $n)))
    (local.set $j (i32.rem_u (local.get $t) (local.get $n)))
    (local.set $k (local.get $n))
    (block $done
      (loop $next
        (br_if $done (i32.eqz (local.get $k)))
        (local.set $k (i32.sub (local.get $k) (i32.const 1)))
        (local.set $acc
          (f32.add (local.get $acc)
            (f32.mul
              (call $at (local.get $a) (i32.add (i32.mul (local.get $i) (local.get $n)) (local.get $k)))
              (call $at (local.get $b) (i32.add (i32.mul (local.get $k) (local.get $n)) (local.get $j))))))
        (br $next)))
    (f32.store (i32.add (local.get $c) (i32.shl (local.get $t) (i32.const 2))) (local.get $acc)))

  (func (export "wat_column_sums") (param $x i32) (param $out i32) (param $rows i32) (param $cols i32)
    (local $j i32) (local $p i32) (local $left i32) (local $stride i32) (local $s f32)
    (local.set $j (call $global_id))
    (if (i32.ge_s (local.get $j) (local.get $cols))
      (then (return)))
    (local.set $p (i32.add (local.get $x) (i32.shl (local.get $j) (i32.const 2))))
    (local.set $stride (i32.shl (local.get $cols) (i32.const 2)))
    (local.set $left (local.get $rows))
    (loop $next
      (local.set $s (f32.add (local.get $s) (f32.load (local.get $p))))
      (local.set $p (i32.add (local.get $p) (local.get $stride)))
      (local.set $left (i32.sub (local.get $left) (i32.const 1)))
      (br_if $next (local.get $left)))
    (f32.store (i32.add (local.get $out) (i32.shl (local.get $j) (i32.const 2))) (local.get $s)))
)
