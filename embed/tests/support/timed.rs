//! The guest of the launch-time-limit tests, shared by `wasm_kernels.rs`
//! (CPU driver) and `gpu.rs` (CUDA): included with `#[path]`, so each test
//! file compiles it on its own.

use std::time::{Duration, Instant};

use tensorwasm_core::GpuDriver;
use tensorwasm_embed::runtime::GuestState;
use wasmtime::{Instance, Store};

/// Kernels for the launch time limit; `get(index)`, which makes a kernel of
/// function `index`, and `run(grid, block)`, which launches it over `grid`
/// blocks of `block` threads (x only) and waits: 0 or the errno. Function
/// indices:
/// the four imports, then `$spin` (4), `$busy` (5), `$mark` (6). `$busy`
/// and `$mark` set byte `MARKS + blockIdx.x` (nonzero) once their block
/// has done its work; `$busy` first does {BUSY} dependent float operations
/// per thread, with no loop.
pub const TIMED: &str = r#"(module
  (import "wasi_cuda" "kernel_get" (func $kernel_get (param i32 i32) (result i32)))
  (import "wasi_cuda" "launch" (func $launch (param i64 i32 i32 i32 i32 i32 i32 i32 i32 i32 i32) (result i32)))
  (import "wasi_cuda" "wait" (func $wait (param i64) (result i32)))
  (import "tensorwasm_kernel" "block_idx_x" (func $bid (result i32)))
  (memory (export "memory") 17)
  (func $spin (loop $forever (br $forever)))
  (func $busy (local $x f32)
    (local.set $x (f32.convert_i32_u (call $bid)))
    {CHAIN}
    (i32.store8 (i32.add (i32.const 65536) (call $bid))
      (i32.or (i32.const 1) (i32.reinterpret_f32 (local.get $x)))))
  (func $mark (i32.store8 (i32.add (i32.const 65536) (call $bid)) (i32.const 1)))
  (func (export "get") (param $index i32) (result i32)
    (call $kernel_get (local.get $index) (i32.const 64)))
  (func (export "run") (param $grid i32) (param $block i32) (result i32)
    (local $err i32)
    (local.set $err (call $launch (i64.load (i32.const 64))
      (local.get $grid) (i32.const 1) (i32.const 1)
      (local.get $block) (i32.const 1) (i32.const 1)
      (i32.const 0) (i32.const 128) (i32.const 0) (i32.const 72)))
    (if (local.get $err) (then (return (local.get $err))))
    (call $wait (i64.load (i32.const 72)))))"#;

/// Where `$busy` and `$mark` mark their blocks; room for 2^20 of them.
pub const MARKS: usize = 65536;
pub const SPIN: i32 = 4;
pub const BUSY: i32 = 5;
pub const MARK: i32 = 6;
/// `$busy`'s float operations per thread: several µs of work, so that a
/// thread's work dwarfs what a stopped thread costs (its entry check).
pub const BUSY_OPS: usize = 8000;

pub fn timed_wat() -> String {
    let step =
        "(local.set $x (f32.add (f32.mul (local.get $x) (f32.const 1.0001)) (f32.const 0.5)))\n";
    TIMED
        .replace("{CHAIN}", &step.repeat(BUSY_OPS / 2))
        .replace("{BUSY}", &BUSY_OPS.to_string())
}

/// Makes a kernel of function `index` (not timed: the first time, that
/// includes its compile), then runs `run(grid, block)`: its result and how
/// long the launch took, waiting included.
pub fn timed_run<D: GpuDriver>(
    store: &mut Store<GuestState<D>>,
    instance: &Instance,
    (index, grid, block): (i32, i32, i32),
) -> (i32, Duration) {
    let get = instance
        .get_typed_func::<i32, i32>(&mut *store, "get")
        .unwrap();
    let made = futures::executor::block_on(get.call_async(&mut *store, index)).unwrap();
    assert_eq!(made, 0, "{}", store.data().cuda.last_error());
    let run = instance
        .get_typed_func::<(i32, i32), i32>(&mut *store, "run")
        .unwrap();
    let started = Instant::now();
    let status = futures::executor::block_on(run.call_async(&mut *store, (grid, block))).unwrap();
    (status, started.elapsed())
}
