;; The guest of embed/benches/guest_overhead.rs: thin exports over the
;; wasi_cuda imports (docs/ABI.md), so the host can time exactly what a guest
;; pays for a launch, a wait and a sync. The host writes the PTX text, kernel
;; names, argument descriptors and data into this memory itself, and grows
;; it; the guest keeps only its out-slots in the first 64 bytes.
;;
;; Every export returns an errno (0 on success) except `load_function`,
;; which returns the function handle, or -errno when a call fails.
(module
  (import "wasi_cuda" "device_count" (func $device_count (param i32) (result i32)))
  (import "wasi_cuda" "module_load_ptx" (func $module_load_ptx (param i32 i32 i32) (result i32)))
  (import "wasi_cuda" "function_get" (func $function_get (param i64 i32 i32 i32) (result i32)))
  (import "wasi_cuda" "launch" (func $launch (param i64 i32 i32 i32 i32 i32 i32 i32 i32 i32 i32) (result i32)))
  (import "wasi_cuda" "wait" (func $wait (param i64) (result i32)))
  (import "wasi_cuda" "sync" (func $sync (result i32)))
  (import "wasi_cuda" "prefetch" (func $prefetch (param i32 i32 i32) (result i32)))

  (memory (export "memory") 1)

  ;; Out-slots (8-aligned); the host writes nothing below 64.
  (global $OUT_MODULE i32 (i32.const 8))
  (global $OUT_FUNCTION i32 (i32.const 16))
  (global $OUT_LAUNCH i32 (i32.const 24))
  (global $OUT_COUNT i32 (i32.const 32))

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

  ;; One launch of fn, then waits for it.
  (func (export "launch_wait")
        (param $fn i64) (param $grid i32) (param $block i32)
        (param $args i32) (param $args_count i32) (result i32)
    (local $err i32)
    (local.set $err (call $launch (local.get $fn)
      (local.get $grid) (i32.const 1) (i32.const 1)
      (local.get $block) (i32.const 1) (i32.const 1)
      (i32.const 0) (local.get $args) (local.get $args_count) (global.get $OUT_LAUNCH)))
    (if (local.get $err) (then (return (local.get $err))))
    (call $wait (i64.load (global.get $OUT_LAUNCH))))

  ;; Waits for every launch and releases their handles.
  (func (export "sync") (result i32)
    (call $sync))

  ;; Migrates ptr .. ptr + len to the device (target 0) or the host (1).
  (func (export "prefetch") (param $ptr i32) (param $len i32) (param $target i32) (result i32)
    (call $prefetch (local.get $ptr) (local.get $len) (local.get $target)))

  ;; k calls of the cheapest import (device_count): the cost of crossing
  ;; from Wasm into a wasi_cuda host function and back, with nothing done.
  (func (export "host_calls") (param $k i32) (result i32)
    (local $i i32) (local $err i32)
    (block $done
      (loop $next
        (br_if $done (i32.ge_u (local.get $i) (local.get $k)))
        (local.set $err (call $device_count (global.get $OUT_COUNT)))
        (if (local.get $err) (then (return (local.get $err))))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $next)))
    (i32.const 0))
)
