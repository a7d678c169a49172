//! A full launch queue (docs/ABI.md, `launch`; docs/tenants.md, "Launches
//! in flight"): a guest that queues more launches than its tenant's
//! launches-in-flight quota (or its own launch limit) admits, as CUDA
//! programs do, is suspended until its oldest launches have finished and
//! goes on; every launch runs, in order, with its result; each finished
//! launch's handle keeps its result (a Wasm kernel's trap included) until
//! the guest waits for it, through a snapshot too. A guest with nothing of
//! its own in flight still gets `EQUOTA` at once, and waiting spends no
//! guest fuel and no CPU of the guest's thread. The CPU driver here; the
//! same scenarios on a GPU are `#[ignore]`d.

#[allow(dead_code)] // the seeded generator; the rest is for other suites
mod common;
#[allow(dead_code)] // the shared test guest; this suite has its own
#[path = "support/tenant_guest.rs"]
mod tenant_guest;

use common::Rng;
use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use futures::future::Either;
use tenant_guest::{Device, call, last_error, read, read_u64, write};
use tensorwasm_core::{
    abi::{
        ArgDescriptor, Errno, encode_args,
        tensor::{DType, OperandDescriptor, TensorHeader, TensorOpKind, encode_tensor_op},
    },
    quota::{QuotaLedger, Resource, TenantQuota},
};
use tensorwasm_cpu::CpuDriver;
use tensorwasm_embed::{
    kernel::GuestModule,
    runtime::GuestRuntime,
    snapshot::TenantSnapshot,
    tenant::{Tenant, TenantConfig},
    twins,
    wasi_cuda::WasiCudaLimits,
};
use wasmtime::Val;

/// Where `burst` notes the index of a launch that failed.
const FAILED_AT: u32 = 0x48;
/// `$chain`'s four argument descriptors; `burst` writes each launch's row
/// into the first one's value (at `ARGS + 8`).
const ARGS: u32 = 0x100;
/// The ReLU's tensor-op descriptor.
const DESC: u32 = 0x200;
/// Launch handles, one `u64` per launch of a burst.
const HANDLES: u32 = 0x400;
/// The ReLU's input and output: `ELEMS` floats each.
const X: u32 = 0x2000;
const Y: u32 = 0x3000;
const ELEMS: usize = 1024;
/// Rows of `COLS` words: row 0 is the input, launch `r` reads row `r` and
/// writes row `r + 1`.
const ROWS: u32 = 0x1_0000;
const COLS: usize = 256;
/// Rows a test may write (the guest's 4 pages hold them).
const MAX_ROWS: usize = 128;

/// The guest. `$chain` (function 8) is the Wasm kernel: thread `t` of a
/// launch for row `r` traps if `r` is `trap_a` or `trap_b`, spins `spin`
/// rounds (to make the launch slow; what it computes goes to a scratch
/// word), then writes `row[r + 1][t] = row[r][t] * 3 + r`. So every row
/// depends on the launch before it: launches that ran out of order, or not
/// at all, leave wrong rows. `burst(first, count, relu_every, desc_len)`
/// queues `count` launches, rows `first ..`, without waiting: every
/// `relu_every`-th (by row, when not 0) is the tensor op at `DESC`
/// instead; launch `j`'s handle goes to `HANDLES + 8 j`. It returns 0, or
/// the first errno, with that launch's `j` at `FAILED_AT`. The kernel's
/// function handle is at 0x40; its launches are 4 blocks of 64 threads.
const GUEST: &str = r#"(module
  (import "wasi_cuda" "kernel_get" (func $kernel_get (param i32 i32) (result i32)))
  (import "wasi_cuda" "launch" (func $launch (param i64 i32 i32 i32 i32 i32 i32 i32 i32 i32 i32) (result i32)))
  (import "wasi_cuda" "tensor_op" (func $tensor_op (param i32 i32 i32) (result i32)))
  (import "wasi_cuda" "wait" (func $wait (param i64) (result i32)))
  (import "wasi_cuda" "sync" (func $sync (result i32)))
  (import "tensorwasm_kernel" "thread_idx_x" (func $tid (result i32)))
  (import "tensorwasm_kernel" "block_idx_x" (func $bid (result i32)))
  (import "tensorwasm_kernel" "block_dim_x" (func $bdim (result i32)))
  (memory (export "memory") 4)
  (func $chain (param $row i32) (param $trap_a i32) (param $trap_b i32) (param $spin i32)
    (local $t i32) (local $k i32) (local $acc i32) (local $at i32)
    (local.set $t (i32.add (i32.mul (call $bid) (call $bdim)) (call $tid)))
    (if (i32.lt_u (local.get $t) (i32.const 256)) (then
      (if (i32.or (i32.eq (local.get $row) (local.get $trap_a))
                  (i32.eq (local.get $row) (local.get $trap_b)))
        (then unreachable))
      (block $done (loop $again
        (br_if $done (i32.ge_u (local.get $k) (local.get $spin)))
        (local.set $acc (i32.add (i32.mul (local.get $acc) (i32.const 31)) (local.get $k)))
        (local.set $k (i32.add (local.get $k) (i32.const 1)))
        (br $again)))
      (i32.store (i32.add (i32.const 0x1000) (i32.shl (local.get $t) (i32.const 2)))
        (local.get $acc))
      (local.set $at (i32.add (i32.const 0x10000)
        (i32.shl (i32.add (i32.mul (local.get $row) (i32.const 256)) (local.get $t))
          (i32.const 2))))
      (i32.store offset=1024 (local.get $at)
        (i32.add (i32.mul (i32.load (local.get $at)) (i32.const 3)) (local.get $row))))))
  (func (export "get") (result i32)
    (call $kernel_get (i32.const 8) (i32.const 0x40)))
  (func (export "burst") (param $first i32) (param $count i32) (param $relu_every i32)
    (param $desc_len i32) (result i32)
    (local $j i32) (local $row i32) (local $e i32) (local $out i32) (local $relu i32)
    (block $end (loop $next
      (br_if $end (i32.ge_u (local.get $j) (local.get $count)))
      (local.set $row (i32.add (local.get $first) (local.get $j)))
      (local.set $out (i32.add (i32.const 0x400) (i32.shl (local.get $j) (i32.const 3))))
      (local.set $relu (i32.const 0))
      (if (local.get $relu_every) (then
        (local.set $relu (i32.eq (i32.rem_u (local.get $row) (local.get $relu_every))
          (i32.sub (local.get $relu_every) (i32.const 1))))))
      (if (local.get $relu)
        (then
          (local.set $e (call $tensor_op (i32.const 0x200) (local.get $desc_len) (local.get $out))))
        (else
          (i64.store (i32.const 0x108) (i64.extend_i32_u (local.get $row)))
          (local.set $e (call $launch (i64.load (i32.const 0x40))
            (i32.const 4) (i32.const 1) (i32.const 1) (i32.const 64) (i32.const 1) (i32.const 1)
            (i32.const 0) (i32.const 0x100) (i32.const 4) (local.get $out)))))
      (if (local.get $e) (then
        (i32.store (i32.const 0x48) (local.get $j))
        (return (local.get $e))))
      (local.set $j (i32.add (local.get $j) (i32.const 1)))
      (br $next)))
    (i32.const 0))
  (func (export "wait") (param i64) (result i32) (call $wait (local.get 0)))
  (func (export "sync") (result i32) (call $sync)))"#;

/// A row that never traps.
const NO_ROW: i32 = -1;

/// `n` random words.
fn words(rng: &mut Rng, n: usize) -> Vec<u32> {
    (0..n).map(|_| rng.next_u64() as u32).collect()
}

/// `items` in a random order.
fn shuffle<T>(rng: &mut Rng, items: &mut [T]) {
    for i in (1..items.len()).rev() {
        items.swap(i, rng.below(i as u64 + 1) as usize);
    }
}

fn le_words(words: &[u32]) -> Vec<u8> {
    words.iter().flat_map(|w| w.to_le_bytes()).collect()
}

fn words_of(bytes: &[u8]) -> Vec<u32> {
    bytes
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

/// A runtime on `driver` (kernel fuel unbounded by the host: the tenants'
/// quotas bound it) and the guest compiled for it.
fn world<D: Device>(driver: D, limits: WasiCudaLimits) -> (GuestRuntime<D>, GuestModule) {
    let mut rt = GuestRuntime::new(driver, 16 << 20).expect("runtime");
    rt.set_limits(limits);
    let module = rt.compile(GUEST).expect("compile");
    (rt, module)
}

fn cpu() -> CpuDriver {
    let driver = CpuDriver::with_capacity(256 << 20).expect("CPU driver");
    twins::register(&driver);
    driver
}

fn cuda() -> tensorwasm_cuda::CudaDriver {
    tensorwasm_cuda::CudaDriver::new(0).expect("a CUDA device")
}

/// An untrusted tenant with `quota`, charging `ledger`, its kernel made.
fn tenant<D: Device>(
    rt: &GuestRuntime<D>,
    module: &GuestModule,
    quota: TenantQuota,
    ledger: Option<Arc<QuotaLedger>>,
) -> Tenant<D> {
    let config = TenantConfig {
        quota,
        ..TenantConfig::untrusted("queue")
    };
    let ledger = ledger.unwrap_or_else(|| Arc::new(QuotaLedger::new(quota)));
    let mut t = Tenant::with_ledger(rt, &config, ledger).expect("tenant");
    futures::executor::block_on(t.instantiate(rt, module)).expect("instantiate");
    assert_eq!(
        call(&mut t, "get", &[]),
        0,
        "kernel_get: {}",
        last_error(&t)
    );
    t
}

/// What a burst of launches should leave: the rows, the ReLU's output, and
/// which launches trap.
struct Burst {
    traps: [i32; 2],
    relu_every: u32,
    /// Row 0 and the random contents of the rows not yet written.
    rows: Vec<Vec<u32>>,
    x: Vec<f32>,
    desc_len: i32,
}

impl Burst {
    /// Writes a burst's inputs (random rows, random ReLU input, a NaN
    /// output) and `$chain`'s arguments into the guest.
    fn prepare<D: Device>(
        t: &mut Tenant<D>,
        rng: &mut Rng,
        traps: [i32; 2],
        relu_every: u32,
        spin: u32,
    ) -> Burst {
        let rows: Vec<Vec<u32>> = (0..MAX_ROWS).map(|_| words(rng, COLS)).collect();
        write(t, ROWS, &le_words(&rows.concat()));
        let x = rng.floats(ELEMS);
        write(
            t,
            X,
            &x.iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<_>>(),
        );
        write(t, Y, &le_words(&vec![f32::NAN.to_bits(); ELEMS]));
        let desc = encode_tensor_op(
            &TensorHeader::new(TensorOpKind::Relu),
            &[
                OperandDescriptor::guest(X, DType::F32, &[ELEMS as u64]),
                OperandDescriptor::guest(Y, DType::F32, &[ELEMS as u64]),
            ],
        );
        write(t, DESC, &desc);
        let args = [
            ArgDescriptor::i32(0),
            ArgDescriptor::i32(traps[0]),
            ArgDescriptor::i32(traps[1]),
            ArgDescriptor::i32(spin as i32),
        ];
        write(t, ARGS, &encode_args(&args));
        Burst {
            traps,
            relu_every,
            rows,
            x,
            desc_len: desc.len() as i32,
        }
    }

    fn is_relu(&self, row: usize) -> bool {
        self.relu_every != 0 && row as u32 % self.relu_every == self.relu_every - 1
    }

    fn traps(&self, row: usize) -> bool {
        self.traps.contains(&(row as i32)) && !self.is_relu(row)
    }

    /// Queues launches for rows `first .. first + count` without waiting:
    /// the guest's errno.
    fn queue<D: Device>(&self, t: &mut Tenant<D>, first: usize, count: usize) -> i32 {
        assert!(first + count < MAX_ROWS);
        let args = [
            Val::I32(first as i32),
            Val::I32(count as i32),
            Val::I32(self.relu_every as i32),
            Val::I32(self.desc_len),
        ];
        call(t, "burst", &args)
    }

    /// Rows `0 ..= last` as the launches for rows `0 .. last` leave them.
    fn expected_rows(&self, last: usize) -> Vec<Vec<u32>> {
        let mut rows = self.rows[..=last].to_vec();
        for r in 0..last {
            if !self.is_relu(r) && !self.traps(r) {
                rows[r + 1] = rows[r]
                    .iter()
                    .map(|v| v.wrapping_mul(3).wrapping_add(r as u32))
                    .collect();
            }
        }
        rows
    }

    /// Checks rows `0 ..= last` and, if any ReLU ran, its output.
    fn check<D: Device>(&self, t: &mut Tenant<D>, last: usize) {
        let want = self.expected_rows(last);
        let got = words_of(&read(t, ROWS, (last + 1) * COLS * 4));
        for (r, want) in want.iter().enumerate() {
            let got = &got[r * COLS..(r + 1) * COLS];
            assert_eq!(
                got,
                &want[..],
                "row {r} (written by launch {})",
                r as i64 - 1
            );
        }
        if (0..last).any(|r| self.is_relu(r)) {
            let y: Vec<f32> = words_of(&read(t, Y, ELEMS * 4))
                .into_iter()
                .map(f32::from_bits)
                .collect();
            let want: Vec<f32> = self.x.iter().map(|v| v.max(0.0)).collect();
            assert_eq!(y, want, "the ReLU's output");
        }
    }
}

/// The burst's launch handles `0 .. count`.
fn handles<D: Device>(t: &mut Tenant<D>, count: usize) -> Vec<u64> {
    (0..count)
        .map(|j| read_u64(t, HANDLES + 8 * j as u32))
        .collect()
}

fn wait<D: Device>(t: &mut Tenant<D>, handle: u64) -> i32 {
    call(t, "wait", &[Val::I64(handle as i64)])
}

/// Waits for every handle of a burst of rows `0 .. handles.len()`, in a
/// random order (an early one first): each gives its own launch's result,
/// `ETRAP` with the trap for a trapping kernel.
fn wait_all<D: Device>(t: &mut Tenant<D>, burst: &Burst, handles: &[u64], rng: &mut Rng) {
    let mut order: Vec<usize> = (1..handles.len()).collect();
    shuffle(rng, &mut order);
    order.insert(0, 0);
    for r in order {
        let e = wait(t, handles[r]);
        if burst.traps(r) {
            assert_eq!(e, Errno::ETRAP.code(), "wait for launch {r}");
            let text = last_error(t);
            assert!(
                text.starts_with("wait: ETRAP: kernel ")
                    && text.contains("trapped: ")
                    && text.contains("(code 1)"),
                "launch {r}: {text}"
            );
        } else {
            assert_eq!(e, 0, "wait for launch {r}: {}", last_error(t));
        }
    }
}

/// Rounds of `$chain`'s spin loop that make a launch last a while: on the
/// CPU driver (whose workers run a launch's 256 threads a few at a time)
/// some milliseconds, and on a GPU.
const CPU_SPIN: u32 = 20_000;
const GPU_SPIN: u32 = 2_000_000;

/// A guest under a quota of `n` launches in flight queues `4 n` (launches
/// and tensor ops, slow ones, two of them trapping: an early one and the
/// last) without waiting: every launch runs, in order, the ledger never
/// holds more than `n`, and each handle's wait gives its own result (the
/// early trap's too, long after its slot went to a later launch).
fn four_times_the_quota<D: Device>(driver: D, n: usize, spin: u32) {
    let (rt, module) = world(driver, WasiCudaLimits::default());
    let quota = TenantQuota::default().with_launches_in_flight(n as u64);
    let mut t = tenant(&rt, &module, quota, None);
    let mut rng = Rng::new("four times the quota");
    let count = 4 * n;
    let traps = [1, count as i32 - 1];
    let burst = Burst::prepare(&mut t, &mut rng, traps, 5, spin);
    let e = burst.queue(&mut t, 0, count);
    assert_eq!(
        e,
        0,
        "launch {} of {count} under a quota of {n}: {}",
        read(&mut t, FAILED_AT, 1)[0],
        last_error(&t)
    );
    let held = t.usage().in_use(Resource::LaunchesInFlight);
    assert!(held <= n as u64, "{held} launches charged, quota {n}");
    let handles = handles(&mut t, count);
    wait_all(&mut t, &burst, &handles, &mut rng);
    burst.check(&mut t, count);
    assert_eq!(t.usage().in_use(Resource::LaunchesInFlight), 0);
    assert_eq!(t.store().data().cuda.live_handles()[3], 0);
}

#[test]
fn a_guest_queues_four_times_its_launch_quota_without_waiting() {
    four_times_the_quota(cpu(), 4, CPU_SPIN);
    four_times_the_quota(cpu(), 1, CPU_SPIN);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn gpu_a_guest_queues_four_times_its_launch_quota_without_waiting() {
    four_times_the_quota(cuda(), 4, GPU_SPIN);
    four_times_the_quota(cuda(), 1, GPU_SPIN);
}

/// The guest's own launch limit (`WasiCudaLimits::launches`, `ELIMIT`
/// before) waits the same way, with no quota in the way.
fn four_times_the_limit<D: Device>(driver: D, spin: u32) {
    let n = 3;
    let limits = WasiCudaLimits {
        launches: n,
        ..WasiCudaLimits::default()
    };
    let (rt, module) = world(driver, limits);
    let mut t = tenant(&rt, &module, TenantQuota::unlimited(), None);
    let mut rng = Rng::new("four times the limit");
    let count = 4 * n;
    let burst = Burst::prepare(&mut t, &mut rng, [2, NO_ROW], 0, spin);
    let e = burst.queue(&mut t, 0, count);
    assert_eq!(e, 0, "a launch past the limit: {}", last_error(&t));
    let handles = handles(&mut t, count);
    wait_all(&mut t, &burst, &handles, &mut rng);
    burst.check(&mut t, count);
}

#[test]
fn a_guest_queues_four_times_its_launch_limit_without_waiting() {
    four_times_the_limit(cpu(), CPU_SPIN);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn gpu_a_guest_queues_four_times_its_launch_limit_without_waiting() {
    four_times_the_limit(cuda(), GPU_SPIN);
}

/// Calls `name` and gives up after `limit` (a call that suspends for
/// longer is dropped): the errno and how long it took, or `None`.
fn call_within<D: Device>(
    t: &mut Tenant<D>,
    name: &str,
    args: &[Val],
    limit: Duration,
) -> Option<(i32, Duration)> {
    let instance = t.instance().expect("instantiated");
    let func = instance.get_func(t.store_mut(), name).expect("export");
    let (give_up, timer) = futures::channel::oneshot::channel::<()>();
    std::thread::spawn(move || {
        std::thread::sleep(limit);
        let _ = give_up.send(());
    });
    let start = Instant::now();
    let mut results = [Val::I32(0)];
    let called = {
        let call = Box::pin(func.call_async(t.store_mut(), args, &mut results));
        match futures::executor::block_on(futures::future::select(call, timer)) {
            Either::Left((r, _)) => Some(r),
            Either::Right(_) => None,
        }
    };
    let r = called?;
    r.unwrap_or_else(|e| panic!("{name} trapped: {e:#}"));
    Some((results[0].unwrap_i32(), start.elapsed()))
}

/// Two guests of one tenant share a quota of 2: while A holds both slots,
/// B (nothing of its own in flight: waiting could only wait for A, which
/// may never wait) gets `EQUOTA` at once; A's own third launch waits for
/// A's first; a tenant with a quota of 0 gets `EQUOTA` at once.
fn equota_with_nothing_in_flight<D: Device>(driver: D, spin: u32) {
    let (rt, module) = world(driver, WasiCudaLimits::default());
    let quota = TenantQuota::default().with_launches_in_flight(2);
    let ledger = Arc::new(QuotaLedger::new(quota));
    let mut a = tenant(&rt, &module, quota, Some(Arc::clone(&ledger)));
    let mut b = tenant(&rt, &module, quota, Some(Arc::clone(&ledger)));
    let mut rng = Rng::new("EQUOTA with nothing in flight");
    let burst_a = Burst::prepare(&mut a, &mut rng, [NO_ROW; 2], 0, spin);
    let burst_b = Burst::prepare(&mut b, &mut rng, [NO_ROW; 2], 0, 0);
    assert_eq!(burst_a.queue(&mut a, 0, 2), 0, "{}", last_error(&a));
    assert_eq!(ledger.in_use(Resource::LaunchesInFlight), 2);

    let refused = |b: &mut Tenant<D>, burst: &Burst, what: &str| {
        let args = [
            Val::I32(0),
            Val::I32(1),
            Val::I32(0),
            Val::I32(burst.desc_len),
        ];
        let (e, took) = call_within(b, "burst", &args, Duration::from_secs(30))
            .unwrap_or_else(|| panic!("{what}: the launch waited for slots it can never free"));
        assert_eq!(e, Errno::EQUOTA.code(), "{what}: {}", last_error(b));
        let text = last_error(b);
        assert!(
            text.starts_with("launch: EQUOTA: launches in flight quota exceeded"),
            "{what}: {text}"
        );
        assert!(took < Duration::from_secs(10), "{what}: {took:?}");
    };
    refused(&mut b, &burst_b, "B while A holds the quota");
    // A's own launch past the quota waits for A's oldest and goes on.
    assert_eq!(burst_a.queue(&mut a, 2, 1), 0, "{}", last_error(&a));
    let held = ledger.in_use(Resource::LaunchesInFlight);
    assert!((1..=2).contains(&held), "{held} charged");
    if held == 2 {
        refused(&mut b, &burst_b, "B after A's third launch");
    }
    let none = TenantQuota::default().with_launches_in_flight(0);
    let mut z = tenant(&rt, &module, none, None);
    let burst_z = Burst::prepare(&mut z, &mut rng, [NO_ROW; 2], 0, 0);
    refused(&mut z, &burst_z, "a quota of 0");

    assert_eq!(call(&mut a, "sync", &[]), 0, "{}", last_error(&a));
    burst_a.check(&mut a, 3);
    assert_eq!(ledger.in_use(Resource::LaunchesInFlight), 0);
    assert_eq!(burst_b.queue(&mut b, 0, 1), 0, "{}", last_error(&b));
    assert_eq!(call(&mut b, "sync", &[]), 0);
    burst_b.check(&mut b, 1);
}

#[test]
fn a_guest_with_nothing_in_flight_gets_equota_at_once() {
    equota_with_nothing_in_flight(cpu(), CPU_SPIN);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn gpu_a_guest_with_nothing_in_flight_gets_equota_at_once() {
    equota_with_nothing_in_flight(cuda(), GPU_SPIN);
}

/// CPU time of the calling thread.
fn thread_cpu_time() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec to write; the clock id is a
    // constant Linux defines.
    let r = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(r, 0, "clock_gettime");
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// Fuel and time of a burst of `count` slow launches under `quota`:
/// (fuel spent, the calling thread's CPU time, wall time).
fn fuel_of_a_burst<D: Device>(
    rt: &GuestRuntime<D>,
    module: &GuestModule,
    quota: TenantQuota,
    count: usize,
    spin: u32,
) -> (u64, Duration, Duration) {
    let mut t = tenant(rt, module, quota, None);
    let mut rng = Rng::new("fuel");
    let burst = Burst::prepare(&mut t, &mut rng, [NO_ROW; 2], 0, spin * 4);
    let fuel = t.store().get_fuel().expect("fuel is on");
    let (cpu, wall) = (thread_cpu_time(), Instant::now());
    let e = burst.queue(&mut t, 0, count);
    let (cpu, wall) = (thread_cpu_time() - cpu, wall.elapsed());
    assert_eq!(e, 0, "{}", last_error(&t));
    let spent = fuel - t.store().get_fuel().unwrap();
    assert_eq!(call(&mut t, "sync", &[]), 0, "{}", last_error(&t));
    burst.check(&mut t, count);
    (spent, cpu, wall)
}

/// A guest suspended for a launch slot spends no fuel (the same burst
/// under no quota spends exactly as much) and no CPU time of its thread
/// (it is suspended, not spinning).
fn no_fuel_while_suspended<D: Device>(driver: D, spin: u32) {
    let (rt, module) = world(driver, WasiCudaLimits::default());
    let count = 8;
    let unlimited = TenantQuota::default().with_launches_in_flight(u64::MAX);
    let (free, _, _) = fuel_of_a_burst(&rt, &module, unlimited, count, spin);
    let one = TenantQuota::default().with_launches_in_flight(1);
    let (queued, cpu, wall) = fuel_of_a_burst(&rt, &module, one, count, spin);
    assert_eq!(
        queued, free,
        "fuel of the burst with one slot, and with no limit"
    );
    eprintln!("one slot: {count} launches in {wall:?}, {cpu:?} of the guest thread's CPU");
    assert!(
        cpu * 3 < wall,
        "the guest's thread ran {cpu:?} of the {wall:?} it waited for slots"
    );
}

#[test]
fn a_guest_waiting_for_a_launch_slot_spends_no_fuel() {
    no_fuel_while_suspended(cpu(), CPU_SPIN);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn gpu_a_guest_waiting_for_a_launch_slot_spends_no_fuel() {
    no_fuel_while_suspended(cuda(), GPU_SPIN);
}

/// Finished launches not yet waited for survive a snapshot: a burst of 6
/// under a quota of 2, the last launch waited for (so every launch has
/// finished), then a snapshot restored into a fresh tenant on another
/// driver: each handle's wait gives its launch's result there, the early
/// trap's included, and the waited handle stays freed.
fn finished_launches_in_a_snapshot<D: Device>(first: D, second: D, spin: u32) {
    let quota = TenantQuota::default().with_launches_in_flight(2);
    let count = 6;
    let mut rng = Rng::new("snapshot");
    let (snapshot, burst, handles) = {
        let (rt, module) = world(first, WasiCudaLimits::default());
        let mut t = tenant(&rt, &module, quota, None);
        let burst = Burst::prepare(&mut t, &mut rng, [1, NO_ROW], 0, spin);
        assert_eq!(burst.queue(&mut t, 0, count), 0, "{}", last_error(&t));
        let handles = handles(&mut t, count);
        assert_eq!(wait(&mut t, handles[count - 1]), 0, "{}", last_error(&t));
        assert_eq!(t.usage().in_use(Resource::LaunchesInFlight), 0);
        let snapshot = t.snapshot().expect("snapshot");
        (snapshot, burst, handles)
    };
    let path = std::env::temp_dir().join(format!("tw-launch-queue-{}.twsnap", std::process::id()));
    snapshot.save(&path).expect("save");
    let snapshot = TenantSnapshot::load(&path).expect("load");
    std::fs::remove_file(&path).unwrap();

    let (rt, module) = world(second, WasiCudaLimits::default());
    let config = TenantConfig {
        quota,
        ..TenantConfig::untrusted("queue")
    };
    let mut t = Tenant::new(&rt, &config).expect("tenant");
    futures::executor::block_on(t.instantiate(&rt, &module)).expect("instantiate");
    t.restore(&snapshot).expect("restore");
    assert_eq!(t.store().data().cuda.live_handles()[3], count - 1);
    assert_eq!(t.usage().in_use(Resource::LaunchesInFlight), 0);
    wait_all(&mut t, &burst, &handles[..count - 1], &mut rng);
    assert_eq!(wait(&mut t, handles[count - 1]), Errno::EBADH.code());
    burst.check(&mut t, count);
}

#[test]
fn finished_launches_not_waited_for_survive_a_snapshot() {
    finished_launches_in_a_snapshot(cpu(), cpu(), CPU_SPIN);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn gpu_finished_launches_not_waited_for_survive_a_snapshot() {
    finished_launches_in_a_snapshot(cuda(), cuda(), GPU_SPIN);
}
