//! Wasm kernels with what compilers emit, through the whole runtime
//! (`kernel_get`, `launch`, `wait`): every thread gets its own shadow-stack
//! window and its own copies of the mutable globals, starting from their
//! values at launch. The kernel read-modify-writes a 32-word array in its
//! stack frame for several rounds (threads sharing the frame would clobber
//! each other's words), bumps its copy of a global and reads it back; the
//! guest checks every thread's result, that the global it set before the
//! launch is unchanged after it, and that its own bytes where the windows
//! lie are untouched. CPU driver here (CI); the GPU twin is in gpu.rs's
//! company, ignored without a device.

use tensorwasm_core::ManagedAllocator;
use tensorwasm_cpu::CpuDriver;
use tensorwasm_cuda::CudaDriver;
use tensorwasm_embed::{kernel::KernelTarget, runtime::GuestRuntime};

/// The guest. Function indices: 0 kernel_get, 1 launch, 2 wait, 3-5 the
/// intrinsics, 6 `$kernel`. `$__stack_pointer` is global 1 (found by its
/// name, not by wasm-ld's habit of putting it first).
pub const STACK_GUEST: &str = r#"(module
  (import "wasi_cuda" "kernel_get" (func $kernel_get (param i32 i32) (result i32)))
  (import "wasi_cuda" "launch" (func $launch (param i64 i32 i32 i32 i32 i32 i32 i32 i32 i32 i32) (result i32)))
  (import "wasi_cuda" "wait" (func $wait (param i64) (result i32)))
  (import "tensorwasm_kernel" "thread_idx_x" (func $tid (result i32)))
  (import "tensorwasm_kernel" "block_idx_x" (func $bid (result i32)))
  (import "tensorwasm_kernel" "block_dim_x" (func $bdim (result i32)))
  (memory (export "memory") 4)
  (global $scale (mut i32) (i32.const 1))
  (global $__stack_pointer (mut i32) (i32.const 65536))

  ;; out[g] = (sum of the frame's 32 words after `rounds` rounds of
  ;; frame[i] += g * (i + 1)) * scale at launch
  (func $kernel (param $out i32) (param $rounds i32)
    (local $sp i32) (local $g i32) (local $i i32) (local $r i32) (local $sum i32) (local $p i32)
    (global.set $__stack_pointer
      (local.tee $sp (i32.sub (global.get $__stack_pointer) (i32.const 128))))
    (local.set $g (i32.add (i32.mul (call $bid) (call $bdim)) (call $tid)))
    (memory.fill (local.get $sp) (i32.const 0) (i32.const 128))
    (block $rounds_done (loop $round
      (br_if $rounds_done (i32.ge_u (local.get $r) (local.get $rounds)))
      (local.set $i (i32.const 0))
      (block $words_done (loop $word
        (br_if $words_done (i32.ge_u (local.get $i) (i32.const 32)))
        (local.set $p (i32.add (local.get $sp) (i32.shl (local.get $i) (i32.const 2))))
        (i32.store (local.get $p)
          (i32.add (i32.load (local.get $p))
                   (i32.mul (local.get $g) (i32.add (local.get $i) (i32.const 1)))))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br $word)))
      (local.set $r (i32.add (local.get $r) (i32.const 1)))
      (br $round)))
    (global.set $scale (i32.add (global.get $scale) (local.get $g)))
    (local.set $i (i32.const 0))
    (block $sum_done (loop $add
      (br_if $sum_done (i32.ge_u (local.get $i) (i32.const 32)))
      (local.set $sum (i32.add (local.get $sum)
        (i32.load (i32.add (local.get $sp) (i32.shl (local.get $i) (i32.const 2))))))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br $add)))
    (i32.store (i32.add (local.get $out) (i32.shl (local.get $g) (i32.const 2)))
      (i32.mul (local.get $sum) (i32.sub (global.get $scale) (local.get $g))))
    (global.set $__stack_pointer (i32.add (local.get $sp) (i32.const 128))))

  ;; run(blocks, rounds, scale): 0 when every thread's word is right, the
  ;; global and the bytes below the stack pointer unchanged; g + 1 for the
  ;; first wrong thread; -1 for a changed global, -2 for changed bytes;
  ;; -1000 - errno for a failed call.
  (func (export "run") (param $blocks i32) (param $rounds i32) (param $scale i32) (result i32)
    (local $err i32) (local $g i32) (local $want i32)
    (global.set $scale (local.get $scale))
    (memory.fill (i32.const 61440) (i32.const 0xab) (i32.const 4096))
    (local.set $err (call $kernel_get (i32.const 6) (i32.const 64)))
    (if (local.get $err) (then (return (i32.sub (i32.const -1000) (local.get $err)))))
    ;; Two i32 arguments: out = 131072, rounds.
    (i32.store (i32.const 128) (i32.const 0))
    (i64.store (i32.const 136) (i64.const 131072))
    (i32.store (i32.const 152) (i32.const 0))
    (i64.store (i32.const 160) (i64.extend_i32_u (local.get $rounds)))
    (local.set $err (call $launch (i64.load (i32.const 64))
      (local.get $blocks) (i32.const 1) (i32.const 1) (i32.const 128) (i32.const 1) (i32.const 1)
      (i32.const 0) (i32.const 128) (i32.const 2) (i32.const 72)))
    (if (local.get $err) (then (return (i32.sub (i32.const -1000) (local.get $err)))))
    (local.set $err (call $wait (i64.load (i32.const 72))))
    (if (local.get $err) (then (return (i32.sub (i32.const -1000) (local.get $err)))))
    (if (i32.ne (global.get $scale) (local.get $scale)) (then (return (i32.const -1))))
    (block $done (loop $check
      (br_if $done (i32.ge_u (local.get $g) (i32.mul (local.get $blocks) (i32.const 128))))
      (local.set $want (i32.mul (i32.mul (i32.mul (local.get $rounds) (local.get $g)) (i32.const 528))
                                (local.get $scale)))
      (if (i32.ne (i32.load (i32.add (i32.const 131072) (i32.shl (local.get $g) (i32.const 2))))
                  (local.get $want))
        (then (return (i32.add (local.get $g) (i32.const 1)))))
      (local.set $g (i32.add (local.get $g) (i32.const 1)))
      (br $check)))
    (local.set $g (i32.const 61440))
    (block $clean (loop $bytes
      (br_if $clean (i32.ge_u (local.get $g) (i32.const 65536)))
      (if (i32.ne (i32.load8_u (local.get $g)) (i32.const 0xab)) (then (return (i32.const -2))))
      (local.set $g (i32.add (local.get $g) (i32.const 1)))
      (br $bytes)))
    (i32.const 0))

  ;; stack_at(sp): launches with the stack pointer at $sp (64: below the
  ;; kernel's 128-byte window; past the 4-page memory's end); returns the
  ;; errno (EINVAL expected) and puts the stack pointer back.
  (func (export "stack_at") (param $sp i32) (result i32)
    (local $err i32)
    (local.set $err (call $kernel_get (i32.const 6) (i32.const 64)))
    (if (local.get $err) (then (return (i32.sub (i32.const -1000) (local.get $err)))))
    (i32.store (i32.const 128) (i32.const 0))
    (i64.store (i32.const 136) (i64.const 131072))
    (i32.store (i32.const 152) (i32.const 0))
    (i64.store (i32.const 160) (i64.const 1))
    (global.set $__stack_pointer (local.get $sp))
    (local.set $err (call $launch (i64.load (i32.const 64))
      (i32.const 1) (i32.const 1) (i32.const 1) (i32.const 128) (i32.const 1) (i32.const 1)
      (i32.const 0) (i32.const 128) (i32.const 2) (i32.const 72)))
    (global.set $__stack_pointer (i32.const 65536))
    (local.get $err)))"#;

/// Runs the guest on `rt`: 128 blocks of 128 threads, 8 rounds.
fn threads_keep_their_own_frames<D>(rt: &GuestRuntime<D>)
where
    D: KernelTarget + ManagedAllocator + Clone + 'static,
    <D as ManagedAllocator>::Region: Sync,
{
    let module = rt.compile(STACK_GUEST).expect("compile");
    let mut store = rt.store().expect("store");
    let instance =
        futures::executor::block_on(rt.instantiate(&mut store, &module)).expect("instantiate");
    let run = instance
        .get_typed_func::<(i32, i32, i32), i32>(&mut store, "run")
        .expect("run");
    for (blocks, rounds, scale) in [(1, 1, 3), (128, 8, 0x2545_f491), (7, 64, -5)] {
        let status =
            futures::executor::block_on(run.call_async(&mut store, (blocks, rounds, scale)))
                .expect("run");
        assert_eq!(
            status,
            0,
            "run({blocks}, {rounds}, {scale}): {}",
            store.data().cuda.last_error()
        );
    }
    // A stack pointer below the window, or past the memory's end (the
    // window would not lie in the memory): refused before anything runs.
    let stack_at = instance
        .get_typed_func::<i32, i32>(&mut store, "stack_at")
        .expect("stack_at");
    for (sp, why) in [(64, "below address 0"), (4 * 65536 + 16, "past the end")] {
        let errno =
            futures::executor::block_on(stack_at.call_async(&mut store, sp)).expect("stack_at");
        let text = store.data().cuda.last_error().to_string();
        assert_eq!(errno, tensorwasm_core::abi::Errno::EINVAL.code(), "{text}");
        assert!(text.contains(why), "{text}");
    }
}

#[test]
fn threads_keep_their_own_frames_on_the_cpu_driver() {
    let driver = CpuDriver::with_capacity(1 << 30).unwrap();
    threads_keep_their_own_frames(&GuestRuntime::new(driver, 64 << 20).unwrap());
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn threads_keep_their_own_frames_on_the_gpu() {
    let driver = CudaDriver::new(0).expect("a CUDA device");
    threads_keep_their_own_frames(&GuestRuntime::new(driver, 64 << 20).unwrap());
}
