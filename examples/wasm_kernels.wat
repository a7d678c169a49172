;; Kernels written in Wasm: `vadd_kernel` and `saxpy_kernel` are ordinary
;; functions of this module; the guest asks the host to make GPU kernels of
;; them (`kernel_get`), launches them over its own linear memory and checks
;; every element against the same arithmetic done here in Wasm. `traps`
;; shows the sandbox: an out-of-bounds store and an endless loop both end
;; with ETRAP, and the next launch runs.
;;
;;   tensorwasm run examples/wasm_kernels.wat 1048576              # run(n)
;;   tensorwasm run examples/wasm_kernels.wat --invoke traps
;;
;; run(n) and traps() return 0 when all is as expected; see each export for
;; its other return values.
(module
  ;; Function indices (imports come first): 0 kernel_get, 1 launch, 2 wait,
  ;; 3 thread_idx_x, 4 block_idx_x, 5 block_dim_x, then 6 $global_id,
  ;; 7 $vadd_kernel, 8 $saxpy_kernel, 9 $oob_kernel, 10 $spin_kernel.
  (import "wasi_cuda" "kernel_get" (func $kernel_get (param i32 i32) (result i32)))
  (import "wasi_cuda" "launch" (func $launch (param i64 i32 i32 i32 i32 i32 i32 i32 i32 i32 i32) (result i32)))
  (import "wasi_cuda" "wait" (func $wait (param i64) (result i32)))
  (import "tensorwasm_kernel" "thread_idx_x" (func $thread_idx_x (result i32)))
  (import "tensorwasm_kernel" "block_idx_x" (func $block_idx_x (result i32)))
  (import "tensorwasm_kernel" "block_dim_x" (func $block_dim_x (result i32)))
  (memory (export "memory") 1)

  (global $seed (mut i32) (i32.const 0x6a09e667))
  (global $OUT_FUNCTION i32 (i32.const 64))
  (global $OUT_LAUNCH i32 (i32.const 72))
  (global $ARGS i32 (i32.const 128))
  (global $DATA i32 (i32.const 65536))

  ;; ---- kernels (run on the device) ----

  ;; This thread's element: blockIdx.x * blockDim.x + threadIdx.x.
  (func $global_id (result i32)
    (i32.add (i32.mul (call $block_idx_x) (call $block_dim_x)) (call $thread_idx_x)))

  ;; c[i] = a[i] + b[i] for i < n (a, b, c: offsets of f32 arrays).
  (func $vadd_kernel (param $a i32) (param $b i32) (param $c i32) (param $n i32)
    (local $i i32) (local $at i32)
    (local.set $i (call $global_id))
    (if (i32.lt_u (local.get $i) (local.get $n))
      (then
        (local.set $at (i32.shl (local.get $i) (i32.const 2)))
        (f32.store (i32.add (local.get $c) (local.get $at))
          (f32.add (f32.load (i32.add (local.get $a) (local.get $at)))
                   (f32.load (i32.add (local.get $b) (local.get $at))))))))

  ;; y[i] = alpha * x[i] + y[i] for i < n (a multiply, then an add: no fma).
  (func $saxpy_kernel (param $alpha f32) (param $x i32) (param $y i32) (param $n i32)
    (local $i i32) (local $at i32)
    (local.set $i (call $global_id))
    (if (i32.lt_u (local.get $i) (local.get $n))
      (then
        (local.set $at (i32.add (local.get $y) (i32.shl (local.get $i) (i32.const 2))))
        (f32.store (local.get $at)
          (f32.add (f32.mul (local.get $alpha)
                            (f32.load (i32.add (local.get $x) (i32.shl (local.get $i) (i32.const 2)))))
                   (f32.load (local.get $at)))))))

  ;; Stores one word per thread just past the end of memory: every thread traps.
  (func $oob_kernel (param $n i32)
    (i32.store (i32.add (i32.shl (memory.size) (i32.const 16)) (i32.shl (call $global_id) (i32.const 2)))
               (local.get $n)))

  ;; Never ends on its own: fuel ends it.
  (func $spin_kernel (param $n i32)
    (loop $forever (br $forever)))

  ;; ---- the host side of the guest (runs in wasmtime) ----

  (func $random_float (result f32)
    (local $x i32)
    (local.set $x (global.get $seed))
    (local.set $x (i32.xor (local.get $x) (i32.shl (local.get $x) (i32.const 13))))
    (local.set $x (i32.xor (local.get $x) (i32.shr_u (local.get $x) (i32.const 17))))
    (local.set $x (i32.xor (local.get $x) (i32.shl (local.get $x) (i32.const 5))))
    (global.set $seed (local.get $x))
    (f32.reinterpret_i32
      (i32.or (i32.const 0x3f800000) (i32.and (local.get $x) (i32.const 0x7fffff)))))

  (func $fill (param $ptr i32) (param $n i32)
    (local $i i32)
    (block $done
      (loop $next
        (br_if $done (i32.ge_u (local.get $i) (local.get $n)))
        (f32.store (i32.add (local.get $ptr) (i32.shl (local.get $i) (i32.const 2)))
                   (call $random_float))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $next))))

  ;; Grows memory to at least `bytes`; 0, or -100 when it cannot.
  (func $ensure (param $bytes i64) (result i32)
    (local $pages i64)
    (local.set $pages (i64.shr_u (i64.add (local.get $bytes) (i64.const 65535)) (i64.const 16)))
    (if (i64.gt_u (local.get $pages) (i64.extend_i32_u (memory.size)))
      (then
        (if (i64.gt_u (local.get $pages) (i64.const 65536)) (then (return (i32.const -100))))
        (if (i32.eq (memory.grow (i32.sub (i32.wrap_i64 (local.get $pages)) (memory.size)))
                    (i32.const -1))
          (then (return (i32.const -100))))))
    (i32.const 0))

  ;; Descriptor `index`: tag 0 (i32) or 2 (f32 bits), value in `a`.
  (func $arg (param $index i32) (param $tag i32) (param $a i64)
    (local $at i32)
    (local.set $at (i32.add (global.get $ARGS) (i32.mul (local.get $index) (i32.const 24))))
    (i32.store (local.get $at) (local.get $tag))
    (i32.store offset=4 (local.get $at) (i32.const 0))
    (i64.store offset=8 (local.get $at) (local.get $a))
    (i64.store offset=16 (local.get $at) (i64.const 0)))

  ;; Makes a kernel of function `index`, launches it over n threads with
  ;; `count` prepared arguments and waits: 0, or the errno.
  (func $launch_wait (param $index i32) (param $n i32) (param $count i32) (result i32)
    (local $err i32)
    (local.set $err (call $kernel_get (local.get $index) (global.get $OUT_FUNCTION)))
    (if (local.get $err) (then (return (local.get $err))))
    (local.set $err (call $launch (i64.load (global.get $OUT_FUNCTION))
      (i32.div_u (i32.add (local.get $n) (i32.const 255)) (i32.const 256)) (i32.const 1) (i32.const 1)
      (i32.const 256) (i32.const 1) (i32.const 1)
      (i32.const 0) (global.get $ARGS) (local.get $count) (global.get $OUT_LAUNCH)))
    (if (local.get $err) (then (return (local.get $err))))
    (call $wait (i64.load (global.get $OUT_LAUNCH))))

  ;; run(n): vadd then saxpy (alpha = 1.5) on n random floats. Returns 0 when
  ;; every element matches; -errno when a call fails; -100 when memory
  ;; cannot grow; i + 1 for the first wrong vadd element and
  ;; 0x40000000 + i for the first wrong saxpy element.
  (func $run (export "run") (param $n i32) (result i32)
    (local $a i32) (local $b i32) (local $c i32) (local $bytes i32)
    (local $err i32) (local $i i32) (local $at i32) (local $want f32)
    (if (i32.le_s (local.get $n) (i32.const 0)) (then (return (i32.const -1))))
    (local.set $bytes (i32.shl (local.get $n) (i32.const 2)))
    (local.set $a (global.get $DATA))
    (local.set $b (i32.add (local.get $a) (local.get $bytes)))
    (local.set $c (i32.add (local.get $b) (local.get $bytes)))
    (local.set $err (call $ensure
      (i64.add (i64.extend_i32_u (local.get $c)) (i64.extend_i32_u (local.get $bytes)))))
    (if (local.get $err) (then (return (local.get $err))))
    (call $fill (local.get $a) (local.get $n))
    (call $fill (local.get $b) (local.get $n))

    ;; vadd_kernel(a, b, c, n) is function 7.
    (call $arg (i32.const 0) (i32.const 0) (i64.extend_i32_u (local.get $a)))
    (call $arg (i32.const 1) (i32.const 0) (i64.extend_i32_u (local.get $b)))
    (call $arg (i32.const 2) (i32.const 0) (i64.extend_i32_u (local.get $c)))
    (call $arg (i32.const 3) (i32.const 0) (i64.extend_i32_u (local.get $n)))
    (local.set $err (call $launch_wait (i32.const 7) (local.get $n) (i32.const 4)))
    (if (local.get $err) (then (return (i32.sub (i32.const 0) (local.get $err)))))
    (block $done
      (loop $next
        (br_if $done (i32.ge_u (local.get $i) (local.get $n)))
        (local.set $at (i32.shl (local.get $i) (i32.const 2)))
        (if (i32.ne
              (i32.reinterpret_f32 (f32.load (i32.add (local.get $c) (local.get $at))))
              (i32.reinterpret_f32 (f32.add (f32.load (i32.add (local.get $a) (local.get $at)))
                                            (f32.load (i32.add (local.get $b) (local.get $at))))))
          (then (return (i32.add (local.get $i) (i32.const 1)))))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $next)))

    ;; saxpy_kernel(1.5, a, b, n) is function 8: b becomes 1.5 * a + b.
    ;; Keep the old b in c to check against.
    (local.set $i (i32.const 0))
    (block $copied
      (loop $copy
        (br_if $copied (i32.ge_u (local.get $i) (local.get $n)))
        (local.set $at (i32.shl (local.get $i) (i32.const 2)))
        (f32.store (i32.add (local.get $c) (local.get $at)) (f32.load (i32.add (local.get $b) (local.get $at))))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $copy)))
    (call $arg (i32.const 0) (i32.const 2) (i64.extend_i32_u (i32.reinterpret_f32 (f32.const 1.5))))
    (call $arg (i32.const 1) (i32.const 0) (i64.extend_i32_u (local.get $a)))
    (call $arg (i32.const 2) (i32.const 0) (i64.extend_i32_u (local.get $b)))
    (call $arg (i32.const 3) (i32.const 0) (i64.extend_i32_u (local.get $n)))
    (local.set $err (call $launch_wait (i32.const 8) (local.get $n) (i32.const 4)))
    (if (local.get $err) (then (return (i32.sub (i32.const 0) (local.get $err)))))
    (local.set $i (i32.const 0))
    (block $checked
      (loop $check
        (br_if $checked (i32.ge_u (local.get $i) (local.get $n)))
        (local.set $at (i32.shl (local.get $i) (i32.const 2)))
        (local.set $want (f32.add (f32.mul (f32.const 1.5) (f32.load (i32.add (local.get $a) (local.get $at))))
                                  (f32.load (i32.add (local.get $c) (local.get $at)))))
        (if (i32.ne (i32.reinterpret_f32 (f32.load (i32.add (local.get $b) (local.get $at))))
                    (i32.reinterpret_f32 (local.get $want)))
          (then (return (i32.add (local.get $i) (i32.const 0x40000000)))))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $check)))
    (i32.const 0))

  ;; traps(): the out-of-bounds kernel and the endless loop each end with
  ;; ETRAP (15) from wait, and a vadd launched after them is right.
  ;; Returns 0, or 1 / 2 when a trap was not reported (with the errno got
  ;; in the high bits), or run(1000)'s result + 3 when the launch after fails.
  (func (export "traps") (result i32)
    (local $err i32)
    (call $arg (i32.const 0) (i32.const 0) (i64.const 7))
    (local.set $err (call $launch_wait (i32.const 9) (i32.const 1024) (i32.const 1)))
    (if (i32.ne (local.get $err) (i32.const 15))
      (then (return (i32.or (i32.const 1) (i32.shl (local.get $err) (i32.const 8))))))
    (local.set $err (call $launch_wait (i32.const 10) (i32.const 256) (i32.const 1)))
    (if (i32.ne (local.get $err) (i32.const 15))
      (then (return (i32.or (i32.const 2) (i32.shl (local.get $err) (i32.const 8))))))
    (local.set $err (call $run (i32.const 1000)))
    (if (local.get $err) (then (return (i32.add (local.get $err) (i32.const 3)))))
    (i32.const 0))
)
