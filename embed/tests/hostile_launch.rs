//! A hostile tenant on the CPU driver (CI): an untrusted tenant with the
//! untrusted defaults, except kernel fuel that never runs out and a launch
//! time of 100 ms, submits the largest launch its quota allows (an endless
//! Wasm kernel over the device's largest grid x, 256 threads a block) again
//! and again on its own thread, while a quiet tenant launches small Wasm
//! kernels. Every hostile launch ends with the time-limit trap, soon after
//! its launch time; every quiet launch completes, whole. Latency is not
//! asserted here (the CPU driver's workers share the machine's cores with
//! both tenants and the test harness); `tests/gpu.rs` asserts it on a GPU.

use std::{
    sync::atomic::{AtomicBool, AtomicUsize, Ordering},
    time::{Duration, Instant},
};

use tensorwasm_core::{GpuDriver, abi::Errno, quota::TenantQuota};
use tensorwasm_cpu::CpuDriver;
use tensorwasm_embed::{
    kernel::GuestModule,
    runtime::GuestRuntime,
    tenant::{Tenant, TenantConfig},
    wasi_cuda::WasiCudaLimits,
};
use wasmtime::TypedFunc;

/// Both tenants' guest: `get(index)` makes a kernel of function `index`
/// (handle at 64), `launch(grid, block)` queues it over `grid` x `block`
/// threads (x only; handle at 72), `wait_last` waits for that launch.
/// Functions: the five imports, then `$spin` (5), which never ends, and
/// `$mark` (6), which sets byte `MARKS + blockIdx.x`. The intrinsic gives
/// `$spin`'s loop work of its own; the loop could not be dropped anyway,
/// since its header checks fuel and the clock.
const GUEST: &str = r#"(module
  (import "wasi_cuda" "kernel_get" (func $kernel_get (param i32 i32) (result i32)))
  (import "wasi_cuda" "launch" (func $launch (param i64 i32 i32 i32 i32 i32 i32 i32 i32 i32 i32) (result i32)))
  (import "wasi_cuda" "wait" (func $wait (param i64) (result i32)))
  (import "tensorwasm_kernel" "thread_idx_x" (func $tid (result i32)))
  (import "tensorwasm_kernel" "block_idx_x" (func $bid (result i32)))
  (memory (export "memory") 2)
  (func $spin (local $acc i32)
    (loop $forever
      (local.set $acc (i32.add (local.get $acc) (call $tid)))
      (br $forever)))
  (func $mark (i32.store8 (i32.add (i32.const 65536) (call $bid)) (i32.const 1)))
  (func (export "get") (param $index i32) (result i32)
    (call $kernel_get (local.get $index) (i32.const 64)))
  (func (export "launch") (param $grid i32) (param $block i32) (result i32)
    (call $launch (i64.load (i32.const 64))
      (local.get $grid) (i32.const 1) (i32.const 1)
      (local.get $block) (i32.const 1) (i32.const 1)
      (i32.const 0) (i32.const 128) (i32.const 0) (i32.const 72)))
  (func (export "wait_last") (result i32) (call $wait (i64.load (i32.const 72))))
)"#;

const SPIN: i32 = 5;
const MARK: i32 = 6;
/// Where `$mark` marks its blocks.
const MARKS: usize = 65536;
/// The quiet tenant's launches: blocks of 32 threads.
const QUIET_GRID: usize = 256;
/// The hostile tenant's threads a block.
const HOSTILE_BLOCK: u32 = 256;
/// How long after its launch time a hostile launch may take to come back:
/// ample for a machine whose cores the quiet tenant, the stream threads and
/// the harness share (the time limit itself is kept by the kernel's clock).
const SLACK: Duration = Duration::from_secs(5);

/// A tenant of [`GUEST`] with a kernel of function `index` made, and its
/// `launch` and `wait_last`.
struct Guest {
    tenant: Tenant<CpuDriver>,
    launch: TypedFunc<(i32, i32), i32>,
    wait: TypedFunc<(), i32>,
}

impl Guest {
    fn new(
        rt: &GuestRuntime<CpuDriver>,
        module: &GuestModule,
        config: &TenantConfig,
        index: i32,
    ) -> Self {
        let mut tenant = Tenant::new(rt, config).expect("tenant");
        let instance =
            futures::executor::block_on(tenant.instantiate(rt, module)).expect("instantiate");
        let get = instance
            .get_typed_func::<i32, i32>(tenant.store_mut(), "get")
            .unwrap();
        let e = futures::executor::block_on(get.call_async(tenant.store_mut(), index)).unwrap();
        assert_eq!(
            e,
            0,
            "{} kernel_get: {}",
            config.name,
            tenant.store().data().cuda.last_error()
        );
        Guest {
            launch: instance
                .get_typed_func(tenant.store_mut(), "launch")
                .unwrap(),
            wait: instance
                .get_typed_func(tenant.store_mut(), "wait_last")
                .unwrap(),
            tenant,
        }
    }

    fn last_error(&self) -> String {
        self.tenant.store().data().cuda.last_error().to_string()
    }

    /// Queues the kernel over `grid` (its bits: the ABI reads geometry as
    /// u32) x `block` threads: the errno.
    fn launch(&mut self, grid: u32, block: u32) -> i32 {
        let args = (grid as i32, block as i32);
        futures::executor::block_on(self.launch.call_async(self.tenant.store_mut(), args)).unwrap()
    }

    fn wait(&mut self) -> i32 {
        futures::executor::block_on(self.wait.call_async(self.tenant.store_mut(), ())).unwrap()
    }

    /// The quiet tenant's marks: how many blocks of the last `$mark` launch
    /// ran (and clears them).
    fn take_marks(&mut self) -> usize {
        let memory = self
            .tenant
            .instance()
            .unwrap()
            .get_memory(self.tenant.store_mut(), "memory")
            .unwrap();
        let marks = &mut memory.data_mut(self.tenant.store_mut())[MARKS..MARKS + QUIET_GRID];
        let done = marks.iter().filter(|&&b| b == 1).count();
        marks.fill(0);
        done
    }
}

#[test]
fn a_hostile_tenants_largest_launches_end_at_their_time_limit_while_a_quiet_tenant_runs() {
    let limit = Duration::from_millis(100);
    let driver = CpuDriver::with_capacity(1 << 30).unwrap();
    let mut rt = GuestRuntime::new(driver, 64 << 20).unwrap();
    // The runtime's own cap on kernel fuel (2^24 a thread by default)
    // would end the endless loop first; the tenants' quotas still bound it.
    rt.set_limits(WasiCudaLimits {
        kernel_fuel: u64::MAX,
        ..WasiCudaLimits::default()
    });
    let module = rt.compile(GUEST).unwrap();
    let grid = rt.driver().device().max_grid_dim.0;
    let hostile_config = TenantConfig {
        quota: TenantQuota::default()
            .with_kernel_fuel(u64::MAX)
            .with_launch_time_ns(limit.as_nanos() as u64),
        ..TenantConfig::untrusted("hostile")
    };
    let mut quiet = Guest::new(&rt, &module, &TenantConfig::untrusted("quiet"), MARK);

    let (flooding, stop) = (AtomicBool::new(false), AtomicBool::new(false));
    let hostile_ended = AtomicUsize::new(0);
    let (quiet_launches, quiet_slowest, hostile) = std::thread::scope(|s| {
        let hostile = s.spawn(|| {
            let mut guest = Guest::new(&rt, &module, &hostile_config, SPIN);
            // (status, last error, launch to wait's return) of each launch.
            let mut ends = Vec::new();
            while !stop.load(Ordering::SeqCst) {
                let t = Instant::now();
                let e = guest.launch(grid, HOSTILE_BLOCK);
                assert_eq!(e, 0, "hostile launch: {}", guest.last_error());
                flooding.store(true, Ordering::SeqCst);
                let e = guest.wait();
                ends.push((e, guest.last_error(), t.elapsed()));
                hostile_ended.fetch_add(1, Ordering::SeqCst);
            }
            ends
        });
        // The quiet tenant runs while the hostile one has a launch in
        // flight, until it has done 20 launches and the hostile tenant has
        // had 3 of its own ended (so the two really overlapped).
        let quiet_run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            while !flooding.load(Ordering::SeqCst) {
                assert!(!hostile.is_finished(), "the hostile tenant never launched");
                std::thread::sleep(Duration::from_millis(1));
            }
            let deadline = Instant::now() + Duration::from_secs(60);
            let (mut launches, mut slowest) = (0, Duration::ZERO);
            while launches < 20 || hostile_ended.load(Ordering::SeqCst) < 3 {
                assert!(
                    Instant::now() < deadline && !hostile.is_finished(),
                    "after {launches} quiet launches, {} hostile launches ended",
                    hostile_ended.load(Ordering::SeqCst)
                );
                let t = Instant::now();
                let e = quiet.launch(QUIET_GRID as u32, 32);
                assert_eq!(e, 0, "quiet launch {launches}: {}", quiet.last_error());
                let e = quiet.wait();
                assert_eq!(e, 0, "quiet wait {launches}: {}", quiet.last_error());
                slowest = slowest.max(t.elapsed());
                assert_eq!(
                    quiet.take_marks(),
                    QUIET_GRID,
                    "every block of quiet launch {launches} ran"
                );
                launches += 1;
            }
            (launches, slowest)
        }));
        // Stopped however the quiet tenant ended, so a failure there does
        // not leave the hostile thread launching for ever.
        stop.store(true, Ordering::SeqCst);
        // The hostile tenant's own failure, if any, explains the quiet one's.
        let ends = hostile
            .join()
            .unwrap_or_else(|e| std::panic::resume_unwind(e));
        let (launches, slowest) = quiet_run.unwrap_or_else(|e| std::panic::resume_unwind(e));
        (launches, slowest, ends)
    });

    let durations: Vec<Duration> = hostile.iter().map(|h| h.2).collect();
    eprintln!(
        "{quiet_launches} quiet launches (slowest {quiet_slowest:?}) while {} hostile launches \
         of {grid} x {HOSTILE_BLOCK} threads ended after {durations:?}",
        hostile.len()
    );
    assert!(hostile.len() >= 3);
    for (i, (status, text, took)) in hostile.iter().enumerate() {
        assert_eq!(*status, Errno::ETRAP.code(), "hostile launch {i}: {text}");
        assert!(
            text.starts_with("wait: ETRAP: kernel `kernel_") && text.contains("time limit"),
            "hostile launch {i}: {text}"
        );
        assert!(
            *took >= limit && *took < limit + SLACK,
            "hostile launch {i} took {took:?} with a launch time of {limit:?}"
        );
    }
    // And after the flood the quiet tenant's next launch runs whole.
    assert_eq!(quiet.launch(QUIET_GRID as u32, 32), 0);
    assert_eq!(quiet.wait(), 0, "{}", quiet.last_error());
    assert_eq!(quiet.take_marks(), QUIET_GRID);
}
