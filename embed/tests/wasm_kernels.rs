//! Wasm kernels on the CPU driver (CI): `examples/wasm_kernels.wat`'s vector
//! add and SAXPY written as Wasm functions, made kernels with `kernel_get`,
//! checked element by element by the guest; the sandbox (an out-of-bounds
//! store writes nothing, an endless loop ends out of fuel, the next launch
//! runs); the launch time limit (an endless loop and a loopless kernel
//! over a huge grid both stop, the next launch runs); the kernel cache;
//! `kernel_get`'s refusals; and kernels named by export
//! (`kernel_get_export`) or by function pointer (`kernel_get_table`).

use std::{sync::Arc, time::Duration};

use tensorwasm_core::{
    abi::Errno,
    quota::{QuotaLedger, TenantQuota},
};
use tensorwasm_cpu::CpuDriver;
use tensorwasm_embed::{
    runtime::{GuestRuntime, GuestState},
    tenant::TenantConfig,
    wasi_cuda::WasiCudaLimits,
};
use wasmtime::{Instance, Store};

#[path = "support/timed.rs"]
mod timed;

use timed::{BUSY, MARK, MARKS, SPIN, timed_run, timed_wat};

const WASM_KERNELS: &str = include_str!("../../examples/wasm_kernels.wat");

fn runtime(fuel: u64) -> GuestRuntime<CpuDriver> {
    let driver = CpuDriver::with_capacity(2 << 30).unwrap();
    let mut rt = GuestRuntime::new(driver, 256 << 20).unwrap();
    rt.set_limits(WasiCudaLimits {
        kernel_fuel: fuel,
        ..WasiCudaLimits::default()
    });
    rt
}

fn instantiate(
    rt: &GuestRuntime<CpuDriver>,
    wat: &str,
) -> (Store<GuestState<CpuDriver>>, Instance) {
    let module = rt.compile(wat).unwrap();
    let mut store = rt.store().unwrap();
    let instance = futures::executor::block_on(rt.instantiate(&mut store, &module)).unwrap();
    (store, instance)
}

#[test]
fn vector_add_and_saxpy_as_wasm_kernels() {
    let rt = runtime(1 << 20);
    let (mut store, instance) = instantiate(&rt, WASM_KERNELS);
    let run = instance
        .get_typed_func::<i32, i32>(&mut store, "run")
        .unwrap();
    for n in [1, 255, 256, 257, 100_003] {
        let status = futures::executor::block_on(run.call_async(&mut store, n)).unwrap();
        assert_eq!(status, 0, "run({n}): {}", store.data().cuda.last_error());
    }
    // Two kernels, lowered once each however often they are launched.
    assert_eq!(rt.kernel_cache().lowerings(), 2);
    // Another guest of the same module shares them.
    let (mut other, instance) = instantiate(&rt, WASM_KERNELS);
    let run = instance
        .get_typed_func::<i32, i32>(&mut other, "run")
        .unwrap();
    assert_eq!(
        futures::executor::block_on(run.call_async(&mut other, 4097)).unwrap(),
        0
    );
    assert_eq!(rt.kernel_cache().lowerings(), 2);
}

/// `kernel_get` makes the kernel's variant for aligned arguments only
/// (`docs/kernels.md`, "Kernel variants"); the first launch with an
/// argument it assumes aligned that is not makes the general variant
/// (once), and runs it: right results, no trap.
#[test]
fn a_misaligned_launch_makes_and_runs_the_general_variant_once() {
    let rt = runtime(1 << 20);
    let misaligned = WASM_KERNELS.replace(
        "(global $DATA i32 (i32.const 65536))",
        "(global $DATA i32 (i32.const 65537))",
    );
    assert_ne!(misaligned, WASM_KERNELS);
    let (mut store, instance) = instantiate(&rt, WASM_KERNELS);
    let run = instance
        .get_typed_func::<i32, i32>(&mut store, "run")
        .unwrap();
    assert_eq!(
        futures::executor::block_on(run.call_async(&mut store, 1000)).unwrap(),
        0
    );
    // vadd and saxpy: one variant each.
    assert_eq!(rt.kernel_cache().lowerings(), 2);
    let (mut other, instance) = instantiate(&rt, &misaligned);
    let run = instance
        .get_typed_func::<i32, i32>(&mut other, "run")
        .unwrap();
    for n in [1000, 4097] {
        let status = futures::executor::block_on(run.call_async(&mut other, n)).unwrap();
        assert_eq!(status, 0, "run({n}): {}", other.data().cuda.last_error());
        // Another module (its bytes differ): its two kernels, each in
        // both variants, made once.
        assert_eq!(rt.kernel_cache().lowerings(), 6, "after run({n})");
    }
}

#[test]
fn traps_end_the_thread_not_the_process_and_write_nothing_outside() {
    let rt = runtime(1 << 16);
    let (mut store, instance) = instantiate(&rt, WASM_KERNELS);
    let traps = instance
        .get_typed_func::<(), i32>(&mut store, "traps")
        .unwrap();
    let status = futures::executor::block_on(traps.call_async(&mut store, ())).unwrap();
    assert_eq!(status, 0, "traps(): {}", store.data().cuda.last_error());
    let text = store.data().cuda.last_error().to_string();
    assert!(
        text.starts_with("wait: ETRAP: kernel `kernel_10` trapped: out of fuel"),
        "{text}"
    );
    // The out-of-bounds kernel's stores (7 at memory.size * 64 KiB + 4i)
    // were refused by the bounds checks: on the CPU driver the reserved
    // bytes past the memory's end are mapped PROT_NONE, so a store that got
    // through would have killed this process. (The GPU test reads them.)
    let memory = instance.get_memory(&mut store, "memory").unwrap();
    assert!(memory.data_size(&store) >= 2 << 16);
}

#[test]
fn kernel_get_refuses_what_kernels_cannot_do() {
    let rt = runtime(1 << 16);
    let wat = r#"(module
        (import "wasi_cuda" "kernel_get" (func $kernel_get (param i32 i32) (result i32)))
        (import "wasi_cuda" "last_error" (func $last_error (param i32 i32 i32) (result i32)))
        (memory (export "memory") 1)
        (table 1 funcref)
        (type $t (func))
        (func $indirect (param i32) (call_indirect (type $t) (local.get 0)))
        (func $with_result (param i32) (result i32) (local.get 0))
        (func $grows (param i32) (drop (memory.grow (local.get 0))))
        (func (export "get") (param i32) (result i32)
            (call $kernel_get (local.get 0) (i32.const 64)))
        (func (export "error") (result i32)
            (drop (call $last_error (i32.const 1024) (i32.const 1024) (i32.const 128)))
            (i32.load (i32.const 128)))
        ;; The module changes its table, so `call_indirect` cannot be
        ;; dispatched over fixed contents.
        (func $mutates (table.set 0 (i32.const 0) (ref.null func))))"#;
    let (mut store, instance) = instantiate(&rt, wat);
    let get = instance
        .get_typed_func::<i32, i32>(&mut store, "get")
        .unwrap();
    let mut call =
        |index: i32| futures::executor::block_on(get.call_async(&mut store, index)).unwrap();
    let cases = [
        (2, Errno::ENOTSUP, "call_indirect"),
        (3, Errno::EINVAL, "result"),
        (4, Errno::ENOTSUP, "memory.grow"),
        (0, Errno::EINVAL, "import"),
        (99, Errno::EINVAL, ""),
    ];
    let mut texts = Vec::new();
    for (index, errno, needle) in cases {
        assert_eq!(call(index), errno.code(), "function {index}");
        texts.push((index, needle));
    }
    // Each refusal's text names what was refused.
    for (index, needle) in texts {
        let status = futures::executor::block_on(get.call_async(&mut store, index)).unwrap();
        assert_ne!(status, 0);
        let text = store.data().cuda.last_error().to_string();
        assert!(text.contains(needle), "function {index}: {text}");
    }
    // The last refusal's text, as the guest reads it, names the function.
    let error = instance
        .get_typed_func::<(), i32>(&mut store, "error")
        .unwrap();
    let len = futures::executor::block_on(error.call_async(&mut store, ())).unwrap();
    assert!(len > 0);
    let text = store.data().cuda.last_error().to_string();
    assert!(text.starts_with("kernel_get: EINVAL"), "{text}");
    assert_eq!(
        store.data().cuda.live_handles()[2],
        0,
        "no function handle issued"
    );
}

/// A guest of [`TIMED`] whose launches may run `limit` each (with fuel
/// that never runs out), through the context's limits.
fn timed_guest(limit: Duration) -> (Store<GuestState<CpuDriver>>, Instance) {
    let mut rt = runtime(u64::MAX);
    rt.set_limits(WasiCudaLimits {
        kernel_fuel: u64::MAX,
        launch_time_ns: limit.as_nanos() as u64,
        ..WasiCudaLimits::default()
    });
    instantiate(&rt, &timed_wat())
}

/// Blocks of the last `$busy` / `$mark` launch that did their work (and
/// clears the marks).
fn take_marks(store: &mut Store<GuestState<CpuDriver>>, instance: &Instance, grid: usize) -> usize {
    let memory = instance.get_memory(&mut *store, "memory").unwrap();
    let marks = &mut memory.data_mut(&mut *store)[MARKS..MARKS + grid];
    let done = marks.iter().filter(|&&b| b != 0).count();
    marks.fill(0);
    done
}

/// The launch ran out of time: `ETRAP` from `wait`, said in the last error,
/// no sooner than the limit and long before the fuel would end it.
fn assert_stopped(
    store: &Store<GuestState<CpuDriver>>,
    status: i32,
    took: Duration,
    limit: Duration,
) {
    let text = store.data().cuda.last_error().to_string();
    assert_eq!(status, Errno::ETRAP.code(), "{text}");
    assert!(
        text.starts_with("wait: ETRAP: kernel `kernel_") && text.contains("time limit"),
        "{text}"
    );
    assert!(
        took >= limit,
        "stopped after {took:?}, before the limit {limit:?}"
    );
    assert!(took < Duration::from_secs(5), "took {took:?}");
}

#[test]
fn an_endless_loop_ends_at_the_launch_time_limit_and_the_next_launch_runs() {
    let limit = Duration::from_millis(50);
    let (mut store, instance) = timed_guest(limit);
    let (status, took) = timed_run(&mut store, &instance, (SPIN, 4, 64));
    assert_stopped(&store, status, took, limit);
    assert!(store.data().cuda.last_error().contains("code 7"));
    // The slot's stop flag and start time were cleared: a cheap launch
    // runs whole, and another endless one gets its full time again.
    let (status, _) = timed_run(&mut store, &instance, (MARK, 1000, 32));
    assert_eq!(status, 0, "{}", store.data().cuda.last_error());
    assert_eq!(take_marks(&mut store, &instance, 1000), 1000);
    let (status, took) = timed_run(&mut store, &instance, (SPIN, 1, 1));
    assert_stopped(&store, status, took, limit);
    let (status, _) = timed_run(&mut store, &instance, (MARK, 1000, 32));
    assert_eq!(status, 0, "{}", store.data().cuda.last_error());
}

#[test]
fn a_loopless_kernel_over_a_huge_grid_stops_too() {
    // 2^17 blocks of 32 threads, each several µs of work: tens of seconds
    // without a limit. Thread 0 of each block checks the clock; once one
    // has stopped the launch, every later thread ends at its entry.
    let limit = Duration::from_millis(50);
    let (mut store, instance) = timed_guest(limit);
    let grid = 1 << 17;
    let (status, took) = timed_run(&mut store, &instance, (BUSY, grid as i32, 32));
    assert_stopped(&store, status, took, limit);
    let done = take_marks(&mut store, &instance, grid);
    eprintln!("stopped after {took:?}: {done} of {grid} blocks ran");
    assert!(done > 0 && done < grid / 2, "{done} of {grid} blocks ran");
    let (status, _) = timed_run(&mut store, &instance, (MARK, 1000, 32));
    assert_eq!(status, 0, "{}", store.data().cuda.last_error());
}

#[test]
fn the_tenant_quota_bounds_the_launch_time_too() {
    // The context's limit is none (the default); the tenant's quota is
    // 50 ms: the smaller one holds.
    assert_eq!(WasiCudaLimits::default().launch_time_ns, u64::MAX);
    let limit = Duration::from_millis(50);
    let mut rt = runtime(u64::MAX);
    rt.set_limits(WasiCudaLimits {
        kernel_fuel: u64::MAX,
        ..WasiCudaLimits::default()
    });
    let quota = TenantQuota::unlimited().with_launch_time_ns(limit.as_nanos() as u64);
    let ledger = Arc::new(QuotaLedger::new(quota));
    let mut store = rt
        .tenant_store(&TenantConfig::trusted("timed"), ledger)
        .unwrap();
    let module = rt.compile(timed_wat()).unwrap();
    let instance = futures::executor::block_on(rt.instantiate(&mut store, &module)).unwrap();
    let (status, took) = timed_run(&mut store, &instance, (SPIN, 2, 32));
    assert_stopped(&store, status, took, limit);
}

#[test]
fn without_a_time_limit_kernels_run_to_completion() {
    // The default limits: no time limit; fuel as usual.
    let (mut store, instance) = instantiate(&runtime(1 << 16), &timed_wat());
    let (status, took) = timed_run(&mut store, &instance, (BUSY, 256, 32));
    eprintln!("256 blocks of 32 busy threads: {took:?}");
    assert_eq!(status, 0, "{}", store.data().cuda.last_error());
    assert_eq!(take_marks(&mut store, &instance, 256), 256);
    // An endless loop still ends out of fuel, not by time.
    let (status, _) = timed_run(&mut store, &instance, (SPIN, 2, 32));
    assert_eq!(status, Errno::ETRAP.code());
    let text = store.data().cuda.last_error().to_string();
    assert!(text.contains("out of fuel"), "{text}");
}

/// `$where` writes, for every thread of a 3-D launch, its global linear
/// index (from all twelve intrinsics) as an i32 at that index: the test
/// checks each slot, so every virtual block ran exactly once with its own
/// block index. `run3` launches it over grid (5, 3, 2) of blocks (4, 2, 2).
const WHERE: &str = r#"(module
  (import "wasi_cuda" "kernel_get" (func $kernel_get (param i32 i32) (result i32)))
  (import "wasi_cuda" "launch" (func $launch (param i64 i32 i32 i32 i32 i32 i32 i32 i32 i32 i32) (result i32)))
  (import "wasi_cuda" "wait" (func $wait (param i64) (result i32)))
  (import "tensorwasm_kernel" "thread_idx_x" (func $tx (result i32)))
  (import "tensorwasm_kernel" "thread_idx_y" (func $ty (result i32)))
  (import "tensorwasm_kernel" "thread_idx_z" (func $tz (result i32)))
  (import "tensorwasm_kernel" "block_idx_x" (func $bx (result i32)))
  (import "tensorwasm_kernel" "block_idx_y" (func $by (result i32)))
  (import "tensorwasm_kernel" "block_idx_z" (func $bz (result i32)))
  (import "tensorwasm_kernel" "block_dim_x" (func $dx (result i32)))
  (import "tensorwasm_kernel" "block_dim_y" (func $dy (result i32)))
  (import "tensorwasm_kernel" "block_dim_z" (func $dz (result i32)))
  (import "tensorwasm_kernel" "grid_dim_x" (func $gx (result i32)))
  (import "tensorwasm_kernel" "grid_dim_y" (func $gy (result i32)))
  (import "tensorwasm_kernel" "grid_dim_z" (func $gz (result i32)))
  (memory (export "memory") 1)
  (func $where (local $x i32) (local $y i32) (local $z i32) (local $i i32)
    (local.set $x (i32.add (i32.mul (call $bx) (call $dx)) (call $tx)))
    (local.set $y (i32.add (i32.mul (call $by) (call $dy)) (call $ty)))
    (local.set $z (i32.add (i32.mul (call $bz) (call $dz)) (call $tz)))
    (local.set $i (i32.add (local.get $x)
      (i32.mul (i32.mul (call $gx) (call $dx))
        (i32.add (local.get $y) (i32.mul (i32.mul (call $gy) (call $dy)) (local.get $z))))))
    (i32.store offset=1024 (i32.shl (local.get $i) (i32.const 2))
      (i32.add (i32.load offset=1024 (i32.shl (local.get $i) (i32.const 2)))
        (i32.add (local.get $i) (i32.const 1)))))
  (func (export "run3") (result i32)
    (local $err i32)
    (local.set $err (call $kernel_get (i32.const 15) (i32.const 64)))
    (if (local.get $err) (then (return (local.get $err))))
    (local.set $err (call $launch (i64.load (i32.const 64))
      (i32.const 5) (i32.const 3) (i32.const 2)
      (i32.const 4) (i32.const 2) (i32.const 2)
      (i32.const 0) (i32.const 128) (i32.const 0) (i32.const 72)))
    (if (local.get $err) (then (return (local.get $err))))
    (call $wait (i64.load (i32.const 72)))))"#;

#[test]
fn a_grid_larger_than_the_launch_share_runs_every_virtual_block_once() {
    // The CPU driver's thread slots are its workers x 1024; a 1% share is
    // a few blocks of 16 threads, so each physical block takes many of the
    // grid's 30 virtual blocks. Every thread adds its index + 1 to its own
    // slot: a block run twice, or skipped, shows.
    for share in [1, 100] {
        let mut rt = runtime(1 << 16);
        rt.set_limits(WasiCudaLimits {
            launch_share_percent: share,
            ..WasiCudaLimits::default()
        });
        let (mut store, instance) = instantiate(&rt, WHERE);
        let run = instance
            .get_typed_func::<(), i32>(&mut store, "run3")
            .unwrap();
        let status = futures::executor::block_on(run.call_async(&mut store, ())).unwrap();
        assert_eq!(status, 0, "{}", store.data().cuda.last_error());
        let memory = instance.get_memory(&mut store, "memory").unwrap();
        let data = memory.data(&store);
        let threads = 5 * 3 * 2 * 4 * 2 * 2;
        for i in 0..threads {
            let at = 1024 + 4 * i;
            let got = u32::from_le_bytes(data[at..at + 4].try_into().unwrap());
            assert_eq!(got, i as u32 + 1, "share {share}%: thread {i}");
        }
        let past = 1024 + 4 * threads;
        assert_eq!(&data[past..past + 4], &[0; 4], "nothing past the grid");
    }
}

/// Kernels named by export and by function pointer: `$fill` (exported as
/// `fill`, in slot 1 of the table) stores `v` at `base + 4 * tid`, `$mark`
/// (slot 2, not exported) stores `v * 2 + tid`. Slot 0 is null, slot 3
/// holds a function with a result, so not a kernel. `ke`, `kt` and `run`
/// pass their arguments on to `kernel_get_export`, `kernel_get_table` and
/// a launch of 8 threads with two `i32` arguments (descriptors at 256),
/// waited for.
const NAMED: &str = r#"(module
  (import "wasi_cuda" "kernel_get_export" (func $by_export (param i32 i32 i32) (result i32)))
  (import "wasi_cuda" "kernel_get_table" (func $by_slot (param i32 i32) (result i32)))
  (import "wasi_cuda" "launch" (func $launch (param i64 i32 i32 i32 i32 i32 i32 i32 i32 i32 i32) (result i32)))
  (import "wasi_cuda" "wait" (func $wait (param i64) (result i32)))
  (import "tensorwasm_kernel" "thread_idx_x" (func $tid (result i32)))
  (memory (export "memory") 1)
  (table 4 funcref)
  (elem (i32.const 1) $fill $mark $answer)
  (export "reexported_import" (func $wait))
  (func $fill (export "fill") (param $base i32) (param $v i32)
    (i32.store (i32.add (local.get $base) (i32.shl (call $tid) (i32.const 2))) (local.get $v)))
  (func $mark (param $base i32) (param $v i32)
    (i32.store (i32.add (local.get $base) (i32.shl (call $tid) (i32.const 2)))
      (i32.add (i32.mul (local.get $v) (i32.const 2)) (call $tid))))
  (func $answer (export "answer") (param i32) (result i32) (i32.const 42))
  (func (export "ke") (param i32 i32 i32) (result i32)
    (call $by_export (local.get 0) (local.get 1) (local.get 2)))
  (func (export "kt") (param i32 i32) (result i32)
    (call $by_slot (local.get 0) (local.get 1)))
  (func (export "run") (param $handle_ptr i32) (result i32)
    (local $err i32)
    (local.set $err (call $launch (i64.load (local.get $handle_ptr))
      (i32.const 1) (i32.const 1) (i32.const 1) (i32.const 8) (i32.const 1) (i32.const 1)
      (i32.const 0) (i32.const 256) (i32.const 2) (i32.const 248)))
    (if (local.get $err) (then (return (local.get $err))))
    (call $wait (i64.load (i32.const 248)))))"#;

/// Where `NAMED`'s tests put a kernel name.
const NAME_AT: usize = 4096;

/// A guest of `NAMED` (or another module with the same exports) and
/// helpers to call it.
struct Named {
    store: Store<GuestState<CpuDriver>>,
    instance: Instance,
}

impl Named {
    fn new(rt: &GuestRuntime<CpuDriver>, wat: &str) -> Named {
        let (store, instance) = instantiate(rt, wat);
        Named { store, instance }
    }

    fn memory(&mut self) -> &mut [u8] {
        let memory = self.instance.get_memory(&mut self.store, "memory").unwrap();
        memory.data_mut(&mut self.store)
    }

    /// `kernel_get_export` of `name` (written at [`NAME_AT`]) into `out`.
    fn by_export(&mut self, name: &[u8], out: i32) -> i32 {
        self.memory()[NAME_AT..NAME_AT + name.len()].copy_from_slice(name);
        self.by_export_raw(NAME_AT as i32, name.len() as i32, out)
    }

    fn by_export_raw(&mut self, ptr: i32, len: i32, out: i32) -> i32 {
        let f = self
            .instance
            .get_typed_func::<(i32, i32, i32), i32>(&mut self.store, "ke")
            .unwrap();
        futures::executor::block_on(f.call_async(&mut self.store, (ptr, len, out))).unwrap()
    }

    /// `kernel_get_table` of `slot` into `out`.
    fn by_slot(&mut self, slot: i32, out: i32) -> i32 {
        let f = self
            .instance
            .get_typed_func::<(i32, i32), i32>(&mut self.store, "kt")
            .unwrap();
        futures::executor::block_on(f.call_async(&mut self.store, (slot, out))).unwrap()
    }

    /// Launches the kernel whose handle is at `handle_at` over 8 threads
    /// with arguments (`base`, `v`); the 8 `i32`s it wrote at `base`.
    fn run(&mut self, handle_at: i32, base: i32, v: i32) -> [i32; 8] {
        let mem = self.memory();
        mem[base as usize..base as usize + 32].fill(0);
        for (i, value) in [base, v].into_iter().enumerate() {
            let desc = &mut mem[256 + 24 * i..256 + 24 * (i + 1)];
            desc.fill(0);
            desc[8..12].copy_from_slice(&value.to_le_bytes());
        }
        let f = self
            .instance
            .get_typed_func::<i32, i32>(&mut self.store, "run")
            .unwrap();
        let status = futures::executor::block_on(f.call_async(&mut self.store, handle_at)).unwrap();
        assert_eq!(status, 0, "{}", self.last_error());
        let mem = self.memory();
        std::array::from_fn(|i| {
            let at = base as usize + 4 * i;
            i32::from_le_bytes(mem[at..at + 4].try_into().unwrap())
        })
    }

    fn last_error(&self) -> String {
        self.store.data().cuda.last_error().to_string()
    }

    fn live_functions(&self) -> usize {
        self.store.data().cuda.live_handles()[2]
    }

    /// Asserts that the last call failed with `errno`, that its text
    /// starts with `call: ERRNO` and holds `needle`.
    fn assert_refused(&self, status: i32, errno: Errno, call: &str, needle: &str) {
        let text = self.last_error();
        assert_eq!(status, errno.code(), "{text}");
        let prefix = format!("{call}: {errno:?}");
        assert!(text.starts_with(&prefix), "{prefix}: {text}");
        assert!(text.contains(needle), "{needle:?} in {text}");
    }
}

#[test]
fn kernels_named_by_export_and_by_function_pointer_run() {
    let rt = runtime(1 << 16);
    let mut g = Named::new(&rt, NAMED);
    assert_eq!(g.by_export(b"fill", 64), 0, "{}", g.last_error());
    assert_eq!(g.by_slot(1, 72), 0, "{}", g.last_error());
    assert_eq!(g.by_slot(2, 80), 0, "{}", g.last_error());
    assert_eq!(g.live_functions(), 3);
    // The export and slot 1 name the same function: one lowering for both.
    assert_eq!(rt.kernel_cache().lowerings(), 2);
    assert_eq!(g.run(64, 1024, 7), [7; 8]);
    assert_eq!(g.run(72, 2048, -5), [-5; 8]);
    assert_eq!(
        g.run(80, 3072, 100),
        std::array::from_fn(|i| 200 + i as i32)
    );
    // Asking again (the names are remembered) gives new handles, same kernels.
    assert_eq!(g.by_export(b"fill", 88), 0, "{}", g.last_error());
    assert_eq!(g.by_slot(2, 96), 0, "{}", g.last_error());
    assert_eq!(g.run(88, 1024, 9), [9; 8]);
    assert_eq!(g.run(96, 1024, 1), std::array::from_fn(|i| 2 + i as i32));
    assert_eq!(rt.kernel_cache().lowerings(), 2);
    assert_eq!(g.live_functions(), 5);
}

#[test]
fn kernel_get_export_refuses_bad_names_and_pointers() {
    let rt = runtime(1 << 16);
    let mut g = Named::new(&rt, NAMED);
    const CALL: &str = "kernel_get_export";
    let cases: [(&[u8], Errno, &str); 7] = [
        (
            b"nope",
            Errno::EINVAL,
            "the module exports no function `nope`",
        ),
        (
            b"memory",
            Errno::EINVAL,
            "the module exports no function `memory`",
        ),
        (b"fil", Errno::EINVAL, "no function `fil`"),
        (b"fill\0", Errno::EINVAL, "NUL"),
        (b"fi\xffl", Errno::EINVAL, "not UTF-8"),
        // An exported function that is not a kernel: an import, a result.
        (b"reexported_import", Errno::EINVAL, "import"),
        (b"answer", Errno::EINVAL, "result"),
    ];
    for (name, errno, needle) in cases {
        let status = g.by_export(name, 64);
        g.assert_refused(status, errno, CALL, needle);
    }
    let status = g.by_export_raw(NAME_AT as i32, 0, 64);
    g.assert_refused(status, Errno::EINVAL, CALL, "empty");
    // Longer than the cap (and inside memory): refused before it is read.
    let status = g.by_export_raw(NAME_AT as i32, 1025, 64);
    g.assert_refused(status, Errno::EINVAL, CALL, "1025 bytes long; at most 1024");
    let status = g.by_export(&[b'f'; 1024], 64);
    g.assert_refused(status, Errno::EINVAL, CALL, "exports no function");
    // The name's range outside memory, or past 4 GiB.
    let status = g.by_export_raw(65530, 8, 64);
    g.assert_refused(status, Errno::EFAULT, CALL, "");
    let status = g.by_export_raw(-16, 32, 64);
    g.assert_refused(status, Errno::EOVERFLOW, CALL, "");
    // A bad out-pointer, with a good name: nothing is made.
    g.memory()[NAME_AT..NAME_AT + 4].copy_from_slice(b"fill");
    let status = g.by_export_raw(NAME_AT as i32, 4, 65536);
    g.assert_refused(status, Errno::EFAULT, CALL, "");
    let status = g.by_export_raw(NAME_AT as i32, 4, 68);
    g.assert_refused(status, Errno::EALIGN, CALL, "");
    assert_eq!(g.live_functions(), 0, "no function handle issued");
    assert_eq!(rt.kernel_cache().lowerings(), 0, "nothing translated");
    // The out-pointer is written only on success.
    assert_eq!(&g.memory()[64..72], &[0; 8]);
}

#[test]
fn kernel_get_table_refuses_what_is_not_a_kernel_pointer() {
    let rt = runtime(1 << 16);
    let mut g = Named::new(&rt, NAMED);
    const CALL: &str = "kernel_get_table";
    let cases = [
        (0, Errno::EINVAL, "slot 0 of table 0 is null"),
        (
            4,
            Errno::EINVAL,
            "slot 4 is past the end of table 0 (4 slots)",
        ),
        (-1, Errno::EINVAL, "slot 4294967295 is past the end"),
        (3, Errno::EINVAL, "result"),
    ];
    for (slot, errno, needle) in cases {
        let status = g.by_slot(slot, 64);
        g.assert_refused(status, errno, CALL, needle);
    }
    let status = g.by_slot(1, 65536);
    g.assert_refused(status, Errno::EFAULT, CALL, "");
    let status = g.by_slot(1, 66);
    g.assert_refused(status, Errno::EALIGN, CALL, "");
    assert_eq!(g.live_functions(), 0, "no function handle issued");

    // No table, or one the module changes: no slot is a function pointer.
    let no_table = NAMED
        .replace("(table 4 funcref)", "")
        .replace("(elem (i32.const 1) $fill $mark $answer)", "");
    let mut g = Named::new(&rt, &no_table);
    let status = g.by_slot(1, 64);
    g.assert_refused(status, Errno::EINVAL, CALL, "no table 0");
    assert_eq!(g.by_export(b"fill", 64), 0, "{}", g.last_error());
    let changes_table = NAMED.replace(
        "(func $answer (export \"answer\") (param i32) (result i32) (i32.const 42))",
        "(func $answer (export \"answer\") (param i32) (result i32)
           (table.set (i32.const 1) (ref.func $mark)) (i32.const 42))",
    );
    assert_ne!(changes_table, NAMED);
    let mut g = Named::new(&rt, &changes_table);
    for slot in [1, 2] {
        let status = g.by_slot(slot, 64);
        g.assert_refused(
            status,
            Errno::EINVAL,
            CALL,
            "the module changes its tables (`table.set`",
        );
    }
    assert_eq!(g.live_functions(), 0);
}
