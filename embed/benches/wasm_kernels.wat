;; The guest of embed/benches/wasm_kernels.rs. It holds the vector add and
;; SAXPY of examples/wasm_kernels.wat and a compute-bound loop as Wasm
;; functions that the host has made into GPU kernels (`kernel_get`), the
;; vector add and SAXPY as plain loops that wasmtime runs on the CPU, and
;; thin exports over the wasi_cuda imports, so the host can time exactly
;; what a guest pays. The bench runs it both as a trusted guest and as an
;; untrusted tenant's. The host writes
;; the PTX text, kernel names, argument descriptors and data into this memory
;; itself, and grows it; the guest keeps only its out-slots in the first 64
;; bytes.
;;
;; `get_kernel` and `load_function` return a function handle, or -errno when
;; a call fails; the other wasi_cuda exports return an errno (0 on success).
(module
  ;; Function indices (imports come first): 0 kernel_get, 1 module_load_ptx,
  ;; 2 function_get, 3 launch, 4 sync, 5 prefetch, 6 thread_idx_x,
  ;; 7 block_idx_x, 8 block_dim_x, then 9 $global_id, 10 $vadd_kernel,
  ;; 11 $saxpy_kernel and 12 $loop_kernel (VADD_KERNEL, SAXPY_KERNEL and
  ;; LOOP_KERNEL in the bench).
  (import "wasi_cuda" "kernel_get" (func $kernel_get (param i32 i32) (result i32)))
  (import "wasi_cuda" "module_load_ptx" (func $module_load_ptx (param i32 i32 i32) (result i32)))
  (import "wasi_cuda" "function_get" (func $function_get (param i64 i32 i32 i32) (result i32)))
  (import "wasi_cuda" "launch" (func $launch (param i64 i32 i32 i32 i32 i32 i32 i32 i32 i32 i32) (result i32)))
  (import "wasi_cuda" "sync" (func $sync (result i32)))
  (import "wasi_cuda" "prefetch" (func $prefetch (param i32 i32 i32) (result i32)))
  (import "tensorwasm_kernel" "thread_idx_x" (func $thread_idx_x (result i32)))
  (import "tensorwasm_kernel" "block_idx_x" (func $block_idx_x (result i32)))
  (import "tensorwasm_kernel" "block_dim_x" (func $block_dim_x (result i32)))

  (memory (export "memory") 1)

  ;; Out-slots (8-aligned); the host writes nothing below 64.
  (global $OUT_MODULE i32 (i32.const 8))
  (global $OUT_FUNCTION i32 (i32.const 16))
  (global $OUT_LAUNCH i32 (i32.const 24))

  ;; ---- kernels (run on the device); the first three as in
  ;; examples/wasm_kernels.wat ----

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

  ;; y[i] = x[i] after iters steps of v = v * a + b, for i < n (a multiply,
  ;; then an add: no fma), the shape of kernels/bench/mul_add_loop.ptx.
  ;; Compute-bound: its time is the loop's, and the lowered loop's header is
  ;; where the kernel spends a unit of fuel and checks its thread's time
  ;; (the SM's cycle counter), which the hand PTX does not.
  (func $loop_kernel (param $a f32) (param $b f32) (param $x i32) (param $y i32)
                     (param $n i32) (param $iters i32)
    (local $i i32) (local $v f32)
    (local.set $i (call $global_id))
    (if (i32.lt_u (local.get $i) (local.get $n))
      (then
        (local.set $v (f32.load (i32.add (local.get $x) (i32.shl (local.get $i) (i32.const 2)))))
        (if (local.get $iters)
          (then
            (loop $next
              (local.set $v (f32.add (f32.mul (local.get $v) (local.get $a)) (local.get $b)))
              (br_if $next (local.tee $iters (i32.sub (local.get $iters) (i32.const 1)))))))
        (f32.store (i32.add (local.get $y) (i32.shl (local.get $i) (i32.const 2)))
          (local.get $v)))))

  ;; ---- the vector add and SAXPY on the CPU (wasmtime), one call a pass ----

  ;; c[i] = a[i] + b[i] for i < n.
  (func (export "vadd_loop") (param $a i32) (param $b i32) (param $c i32) (param $n i32)
    (local $end i32)
    (local.set $end (i32.add (local.get $c) (i32.shl (local.get $n) (i32.const 2))))
    (block $done
      (loop $next
        (br_if $done (i32.ge_u (local.get $c) (local.get $end)))
        (f32.store (local.get $c)
          (f32.add (f32.load (local.get $a)) (f32.load (local.get $b))))
        (local.set $a (i32.add (local.get $a) (i32.const 4)))
        (local.set $b (i32.add (local.get $b) (i32.const 4)))
        (local.set $c (i32.add (local.get $c) (i32.const 4)))
        (br $next))))

  ;; y[i] = alpha * x[i] + y[i] for i < n.
  (func (export "saxpy_loop") (param $alpha f32) (param $x i32) (param $y i32) (param $n i32)
    (local $end i32)
    (local.set $end (i32.add (local.get $y) (i32.shl (local.get $n) (i32.const 2))))
    (block $done
      (loop $next
        (br_if $done (i32.ge_u (local.get $y) (local.get $end)))
        (f32.store (local.get $y)
          (f32.add (f32.mul (local.get $alpha) (f32.load (local.get $x)))
                   (f32.load (local.get $y))))
        (local.set $x (i32.add (local.get $x) (i32.const 4)))
        (local.set $y (i32.add (local.get $y) (i32.const 4)))
        (br $next))))

  ;; ---- thin exports over the wasi_cuda imports ----

  ;; Does nothing: the host calls it once in a new store before it times
  ;; anything there (the first async call of a store sets up its fiber
  ;; stack), and times it as the floor of an export call.
  (func (export "nop"))

  ;; Makes a kernel of this module's function `index`; returns its function
  ;; handle, or -errno. Nothing else, so the host can time `kernel_get`.
  (func (export "get_kernel") (param $index i32) (result i64)
    (local $err i32)
    (local.set $err (call $kernel_get (local.get $index) (global.get $OUT_FUNCTION)))
    (if (local.get $err) (then (return (i64.sub (i64.const 0) (i64.extend_i32_u (local.get $err))))))
    (i64.load (global.get $OUT_FUNCTION)))

  ;; Loads the PTX text at ptx (ptx_len bytes) and looks up the kernel whose
  ;; name is at name; returns the function handle, or -errno.
  (func (export "load_function")
        (param $ptx i32) (param $ptx_len i32) (param $name i32) (param $name_len i32)
        (result i64)
    (local $err i32)
    (local.set $err (call $module_load_ptx (local.get $ptx) (local.get $ptx_len) (global.get $OUT_MODULE)))
    (if (local.get $err) (then (return (i64.sub (i64.const 0) (i64.extend_i32_u (local.get $err))))))
    (local.set $err (call $function_get (i64.load (global.get $OUT_MODULE))
                                        (local.get $name) (local.get $name_len) (global.get $OUT_FUNCTION)))
    (if (local.get $err) (then (return (i64.sub (i64.const 0) (i64.extend_i32_u (local.get $err))))))
    (i64.load (global.get $OUT_FUNCTION)))

  ;; k launches of fn on a 1-D grid, none waited for (`sync` releases them).
  (func (export "launch_many")
        (param $fn i64) (param $k i32) (param $grid i32) (param $block i32)
        (param $args i32) (param $args_count i32) (result i32)
    (local $i i32) (local $err i32)
    (block $done
      (loop $next
        (br_if $done (i32.ge_u (local.get $i) (local.get $k)))
        (local.set $err (call $launch (local.get $fn)
          (local.get $grid) (i32.const 1) (i32.const 1)
          (local.get $block) (i32.const 1) (i32.const 1)
          (i32.const 0) (local.get $args) (local.get $args_count) (global.get $OUT_LAUNCH)))
        (if (local.get $err) (then (return (local.get $err))))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $next)))
    (i32.const 0))

  ;; Waits for every launch (ETRAP if a Wasm kernel trapped) and releases
  ;; their handles.
  (func (export "sync") (result i32)
    (call $sync))

  ;; Migrates ptr .. ptr + len to the device (target 0) or the host (1).
  (func (export "prefetch") (param $ptr i32) (param $len i32) (param $target i32) (result i32)
    (call $prefetch (local.get $ptr) (local.get $len) (local.get $target)))
)
