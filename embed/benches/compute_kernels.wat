;; The Wasm kernels of embed/benches/compute_kernels.rs (issue 15 goal 4):
;; compute-bound loops written as a compiler (or a person) writes Wasm, each
;; beside its CUDA C twin in kernels/bench/compute_twins.cu, which does the
;; same arithmetic in the same order (a multiply, then an add: Wasm has no
;; fused multiply-add). Addresses are byte offsets in this memory; the host
;; writes the data and launches the exports as kernels.
(module
  (import "tensorwasm_kernel" "thread_idx_x" (func $thread_idx_x (result i32)))
  (import "tensorwasm_kernel" "block_idx_x" (func $block_idx_x (result i32)))
  (import "tensorwasm_kernel" "block_dim_x" (func $block_dim_x (result i32)))

  (memory (export "memory") 1)

  ;; This thread's index: blockIdx.x * blockDim.x + threadIdx.x.
  (func $global_id (result i32)
    (i32.add (i32.mul (call $block_idx_x) (call $block_dim_x)) (call $thread_idx_x)))

  ;; c[i][j] = sum over k of a[i][k] * b[k][j] (n x n f32, row-major), one
  ;; thread per output, k in order: the naive matmul.
  (func (export "matmul") (param $a i32) (param $b i32) (param $c i32) (param $n i32)
    (local $t i32) (local $pa i32) (local $pb i32) (local $k i32) (local $acc f32)
    (local.set $t (call $global_id))
    (if (i32.lt_u (local.get $t) (i32.mul (local.get $n) (local.get $n)))
      (then
        (local.set $pa (i32.add (local.get $a)
          (i32.shl (i32.mul (i32.div_u (local.get $t) (local.get $n)) (local.get $n)) (i32.const 2))))
        (local.set $pb (i32.add (local.get $b)
          (i32.shl (i32.rem_u (local.get $t) (local.get $n)) (i32.const 2))))
        (local.set $k (local.get $n))
        (loop $next
          (local.set $acc (f32.add (local.get $acc)
            (f32.mul (f32.load (local.get $pa)) (f32.load (local.get $pb)))))
          (local.set $pa (i32.add (local.get $pa) (i32.const 4)))
          (local.set $pb (i32.add (local.get $pb) (i32.shl (local.get $n) (i32.const 2))))
          (br_if $next (local.tee $k (i32.sub (local.get $k) (i32.const 1)))))
        (f32.store (i32.add (local.get $c) (i32.shl (local.get $t) (i32.const 2)))
          (local.get $acc)))))

  ;; One step of a 9-point stencil on an n x n f32 grid: the border copied,
  ;; an inner point w0 * centre + w1 * (N + S + W + E) + w2 * (NW + NE + SW
  ;; + SE), summed in that order.
  (func (export "stencil") (param $in i32) (param $out i32) (param $n i32)
                           (param $w0 f32) (param $w1 f32) (param $w2 f32)
    (local $t i32) (local $i i32) (local $j i32) (local $p i32) (local $row i32)
    (local $up i32) (local $down i32) (local $edge f32) (local $corner f32)
    (local.set $t (call $global_id))
    (if (i32.ge_u (local.get $t) (i32.mul (local.get $n) (local.get $n)))
      (then (return)))
    (local.set $i (i32.div_u (local.get $t) (local.get $n)))
    (local.set $j (i32.rem_u (local.get $t) (local.get $n)))
    (local.set $p (i32.add (local.get $in) (i32.shl (local.get $t) (i32.const 2))))
    (if (i32.or
          (i32.or (i32.eqz (local.get $i)) (i32.eqz (local.get $j)))
          (i32.or (i32.eq (local.get $i) (i32.sub (local.get $n) (i32.const 1)))
                  (i32.eq (local.get $j) (i32.sub (local.get $n) (i32.const 1)))))
      (then
        (f32.store (i32.add (local.get $out) (i32.shl (local.get $t) (i32.const 2)))
          (f32.load (local.get $p)))
        (return)))
    (local.set $row (i32.shl (local.get $n) (i32.const 2)))
    (local.set $up (i32.sub (local.get $p) (local.get $row)))
    (local.set $down (i32.add (local.get $p) (local.get $row)))
    (local.set $edge
      (f32.add (f32.add (f32.add (f32.load (local.get $up)) (f32.load (local.get $down)))
                        (f32.load (i32.sub (local.get $p) (i32.const 4))))
               (f32.load offset=4 (local.get $p))))
    (local.set $corner
      (f32.add (f32.add (f32.add (f32.load (i32.sub (local.get $up) (i32.const 4)))
                                 (f32.load offset=4 (local.get $up)))
                        (f32.load (i32.sub (local.get $down) (i32.const 4))))
               (f32.load offset=4 (local.get $down))))
    (f32.store (i32.add (local.get $out) (i32.shl (local.get $t) (i32.const 2)))
      (f32.add (f32.add (f32.mul (local.get $w0) (f32.load (local.get $p)))
                        (f32.mul (local.get $w1) (local.get $edge)))
               (f32.mul (local.get $w2) (local.get $corner)))))

  ;; One N-body step's accelerations: body i at pos + 16 i = (x, y, z,
  ;; mass) gets acc + 16 i = sum over every j of m_j d / |d|^3, d = p_j -
  ;; p_i softened by eps2, j in order.
  (func (export "nbody") (param $pos i32) (param $acc i32) (param $n i32) (param $eps2 f32)
    (local $i i32) (local $p i32) (local $k i32)
    (local $xi f32) (local $yi f32) (local $zi f32) (local $ax f32) (local $ay f32) (local $az f32)
    (local $dx f32) (local $dy f32) (local $dz f32) (local $inv f32) (local $s f32)
    (local.set $i (call $global_id))
    (if (i32.ge_u (local.get $i) (local.get $n))
      (then (return)))
    (local.set $p (i32.add (local.get $pos) (i32.shl (local.get $i) (i32.const 4))))
    (local.set $xi (f32.load (local.get $p)))
    (local.set $yi (f32.load offset=4 (local.get $p)))
    (local.set $zi (f32.load offset=8 (local.get $p)))
    (local.set $p (local.get $pos))
    (local.set $k (local.get $n))
    (loop $next
      (local.set $dx (f32.sub (f32.load (local.get $p)) (local.get $xi)))
      (local.set $dy (f32.sub (f32.load offset=4 (local.get $p)) (local.get $yi)))
      (local.set $dz (f32.sub (f32.load offset=8 (local.get $p)) (local.get $zi)))
      (local.set $inv (f32.div (f32.const 1)
        (f32.sqrt (f32.add
          (f32.add (f32.add (f32.mul (local.get $dx) (local.get $dx))
                            (f32.mul (local.get $dy) (local.get $dy)))
                   (f32.mul (local.get $dz) (local.get $dz)))
          (local.get $eps2)))))
      (local.set $s (f32.mul (f32.mul (f32.mul (local.get $inv) (local.get $inv)) (local.get $inv))
                             (f32.load offset=12 (local.get $p))))
      (local.set $ax (f32.add (local.get $ax) (f32.mul (local.get $dx) (local.get $s))))
      (local.set $ay (f32.add (local.get $ay) (f32.mul (local.get $dy) (local.get $s))))
      (local.set $az (f32.add (local.get $az) (f32.mul (local.get $dz) (local.get $s))))
      (local.set $p (i32.add (local.get $p) (i32.const 16)))
      (br_if $next (local.tee $k (i32.sub (local.get $k) (i32.const 1)))))
    (local.set $p (i32.add (local.get $acc) (i32.shl (local.get $i) (i32.const 4))))
    (f32.store (local.get $p) (local.get $ax))
    (f32.store offset=4 (local.get $p) (local.get $ay))
    (f32.store offset=8 (local.get $p) (local.get $az)))
)
