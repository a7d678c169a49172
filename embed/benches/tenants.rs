//! Fairness between tenants of one GPU: how long a quiet tenant's small
//! launch takes, from the guest's `tensor_op` to the return of its `wait`,
//! while other tenants flood the device.
//!
//! 1. The quiet tenant launches a built-in ReLU over 64K floats (device
//!    buffers) and waits, 2000 times (after 100 untimed), alone, then while
//!    1 and then 4 noisy tenants, each on its own thread, flood: each
//!    queues bf16 GEMMs of 1024 x 1024 x 1024 (the heavy kernel: 2.1 GFLOP
//!    in 64 blocks of 128 x 128) until its launches-in-flight quota (the
//!    untrusted default, 256) says `EQUOTA`, then waits its oldest launch
//!    and continues. `wait` waits for the tenant's whole stream, so waiting
//!    the oldest drains the queue; the handles left are then waited too
//!    (they return at once) and the tenant fills the queue again.
//! 2. The aggregate launch rate of 32 tenants each doing 992 small
//!    launches (ReLU over 4K floats, 16 queued, then `sync`), next to one
//!    tenant doing the same.
//! 3. A hostile tenant: the quiet tenant's launches alone, then while an
//!    untrusted tenant, on its own thread, submits the largest launch its
//!    quota allows, again and again: a Wasm kernel that never ends
//!    (`loop ... br 0`) over the device's largest grid x (2^31 - 1 blocks
//!    on an H100) of 256 threads, with fuel that never runs out, so only
//!    the launch time limit ends it (200 ms, or `--hostile-launch-ms N`).
//!    Each launch is waited and must end with `ETRAP`, "launch time limit
//!    exceeded". Both quiet runs spread their timed launches over 10
//!    hostile launch times, so they sample every part of a hostile launch
//!    (its blocks arriving, running, stopping) and are paced alike.
//! 4. The 4-noisy scenario again in a child process of this binary with
//!    `CUDA_DEVICE_MAX_CONNECTIONS` removed from its environment (the
//!    driver's default: 8 hardware queues), against 32 here.
//!
//! Every tenant is untrusted (`TenantConfig::untrusted`; the hostile one
//! with unlimited kernel fuel and its own launch time), on one
//! [`GuestRuntime`] shared by every thread. The quiet tenant's last output
//! and one noisy GEMM (64 sampled elements) are checked against float64
//! references. Prints markdown tables and writes every latency to
//! `$OUT/tenants.json` (or `./tenants.json`) with the command line. Run with
//! `cargo bench -p tensorwasm-embed --bench tenants`; exits 2 when no CUDA
//! device is usable.

mod common;

use common::{
    DeviceRecord, command_line, driver_version, max_of, percentile, round, rounded, utc_timestamp,
};
use serde::Serialize;
use std::{
    collections::VecDeque,
    fmt::Write as _,
    process::ExitCode,
    sync::atomic::{AtomicBool, AtomicUsize, Ordering},
    time::{Duration, Instant},
};

use tensorwasm_core::{
    GpuDriver,
    abi::{
        Errno, Handle,
        tensor::{DType, OperandDescriptor, TensorHeader, TensorOpKind, encode_tensor_op},
    },
    quota::TenantQuota,
};
use tensorwasm_cuda::CudaDriver;
use tensorwasm_embed::{
    kernel::GuestModule,
    runtime::GuestRuntime,
    tenant::{Tenant, TenantConfig},
    wasi_cuda::WasiCudaLimits,
};
use tensorwasm_kernels::oracle;
use wasmtime::{Memory, TypedFunc};

/// The bench guest: thin exports over the imports it needs, and
/// `launch_wait`, a launch and its wait in one guest call.
const GUEST_WAT: &str = r#"(module
  (import "wasi_cuda" "buffer_alloc" (func $buffer_alloc (param i64 i32) (result i32)))
  (import "wasi_cuda" "copy_to_buffer" (func $copy_to_buffer (param i64 i64 i32 i32) (result i32)))
  (import "wasi_cuda" "copy_from_buffer" (func $copy_from_buffer (param i32 i64 i64 i32) (result i32)))
  (import "wasi_cuda" "tensor_op" (func $tensor_op (param i32 i32 i32) (result i32)))
  (import "wasi_cuda" "wait" (func $wait (param i64) (result i32)))
  (import "wasi_cuda" "sync" (func $sync (result i32)))
  (memory (export "memory") 1)
  (func (export "buffer_alloc") (param i64 i32) (result i32)
    (call $buffer_alloc (local.get 0) (local.get 1)))
  (func (export "copy_to_buffer") (param i64 i32 i32) (result i32)
    (call $copy_to_buffer (local.get 0) (i64.const 0) (local.get 1) (local.get 2)))
  (func (export "copy_from_buffer") (param i32 i64 i32) (result i32)
    (call $copy_from_buffer (local.get 0) (local.get 1) (i64.const 0) (local.get 2)))
  (func (export "launch") (param i32 i32 i32) (result i32)
    (call $tensor_op (local.get 0) (local.get 1) (local.get 2)))
  (func (export "wait") (param i64) (result i32) (call $wait (local.get 0)))
  (func (export "sync") (result i32) (call $sync))
  (func (export "launch_wait") (param $desc i32) (param $len i32) (result i32)
    (local $e i32)
    (local.set $e (call $tensor_op (local.get $desc) (local.get $len) (i32.const 64)))
    (if (local.get $e) (then (return (local.get $e))))
    (call $wait (i64.load (i32.const 64))))
)
"#;

/// The hostile tenant's guest: `$spin`, function 4 (after the four
/// imports), a kernel that never ends; `get` makes it a kernel (handle at
/// 64), `launch(grid, block)` queues it over `grid` x `block` threads (x
/// only; handle at 72) and `wait_last` waits for that launch. The
/// intrinsic gives the loop work of its own; the loop could not be dropped
/// anyway, since its header checks fuel and the clock.
const HOSTILE_WAT: &str = r#"(module
  (import "wasi_cuda" "kernel_get" (func $kernel_get (param i32 i32) (result i32)))
  (import "wasi_cuda" "launch" (func $launch (param i64 i32 i32 i32 i32 i32 i32 i32 i32 i32 i32) (result i32)))
  (import "wasi_cuda" "wait" (func $wait (param i64) (result i32)))
  (import "tensorwasm_kernel" "thread_idx_x" (func $tid (result i32)))
  (memory (export "memory") 1)
  (func $spin (local $acc i32)
    (loop $forever
      (local.set $acc (i32.add (local.get $acc) (call $tid)))
      (br $forever)))
  (func (export "get") (result i32) (call $kernel_get (i32.const 4) (i32.const 64)))
  (func (export "launch") (param $grid i32) (param $block i32) (result i32)
    (call $launch (i64.load (i32.const 64))
      (local.get $grid) (i32.const 1) (i32.const 1)
      (local.get $block) (i32.const 1) (i32.const 1)
      (i32.const 0) (i32.const 128) (i32.const 0) (i32.const 72)))
  (func (export "wait_last") (result i32) (call $wait (i64.load (i32.const 72))))
)
"#;

/// The environment variable the CUDA driver reads in `cuInit`: how many
/// hardware work queues the streams of a context spread over.
const CONNECTIONS_ENV: &str = "CUDA_DEVICE_MAX_CONNECTIONS";
/// What this bench sets it to: one queue per stream of up to 32 tenants.
const CONNECTIONS: &str = "32";
/// Runs only the 4-noisy scenario and prints its result line (the parent
/// starts the child with `CONNECTIONS_ENV` removed).
const CHILD_FLAG: &str = "--connections-unset-child";
/// The child's result line starts with this.
const CHILD_PREFIX: &str = "tenants-child-result:";

/// The quiet tenant's ReLU: 64K floats.
const QUIET_ELEMS: u64 = 64 << 10;
/// Timed quiet launches per scenario.
const QUIET_LAUNCHES: usize = 2000;
/// Untimed quiet launches before them.
const QUIET_WARMUP: usize = 100;
/// Noisy tenants per scenario.
const NOISY: [usize; 3] = [0, 1, 4];
/// The noisy tenants' bf16 GEMM: M = N = K.
const HEAVY: u64 = 1024;
/// The aggregate run's ReLU: 4K floats.
const SMALL_ELEMS: u64 = 4 << 10;
/// Tenants of the aggregate run.
const AGGREGATE_TENANTS: usize = 32;
/// Launches per tenant in the aggregate run (62 windows).
const AGGREGATE_LAUNCHES: usize = 992;
/// Launches queued before each `sync` in the aggregate run.
const AGGREGATE_WINDOW: usize = 16;
const _: () = assert!(AGGREGATE_LAUNCHES.is_multiple_of(AGGREGATE_WINDOW));
/// Each guest memory's reservation (managed memory, populated lazily).
const GUEST_MEMORY_LIMIT: usize = 16 << 20;
/// Sets the hostile tenant's launch time, in milliseconds.
const HOSTILE_FLAG: &str = "--hostile-launch-ms";
/// The hostile tenant's launch time without the flag: long enough that a
/// launch has all its blocks resident for most of its life, short enough
/// that the scenario takes seconds.
const HOSTILE_LAUNCH_MS: u64 = 200;
/// Threads per block of the hostile launch.
const HOSTILE_BLOCK: u32 = 256;
/// The quiet tenant's timed launches are spread over this many hostile
/// launch times (alone and under the flood alike).
const HOSTILE_SPAN: u32 = 10;

/// Guest memory layout.
const OUT: u32 = 64;
const DESC: u32 = 256;
const DATA: u32 = 65536;

type BenchResult<T> = Result<T, String>;

fn main() -> ExitCode {
    let child = std::env::args().any(|a| a == CHILD_FLAG);
    let hostile_ms = match hostile_launch_ms() {
        Ok(ms) => ms,
        Err(e) => {
            eprintln!("tenants: {e}");
            return ExitCode::FAILURE;
        }
    };
    let connections = if child {
        format!("{CONNECTIONS_ENV} unset (the driver's default, 8)")
    } else {
        // SAFETY: the first thing `main` does: no other thread exists yet
        // (nothing has spawned one, and the CUDA driver, which reads the
        // variable in cuInit, is not loaded), so nothing reads or writes the
        // environment at the same time.
        unsafe { std::env::set_var(CONNECTIONS_ENV, CONNECTIONS) };
        format!("{CONNECTIONS_ENV}={CONNECTIONS} (set by the bench)")
    };
    let driver = match CudaDriver::new(0) {
        Ok(d) => d,
        Err(e) => {
            eprintln!(
                "tenants: needs a CUDA device, and none is usable here; nothing measured.\n\
                 CudaDriver::new(0): {e}"
            );
            return ExitCode::from(2);
        }
    };
    let result = if child {
        run_child(driver)
    } else {
        run(driver, &connections, hostile_ms)
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tenants: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The hostile tenant's launch time: `--hostile-launch-ms N` (or `=N`),
/// else [`HOSTILE_LAUNCH_MS`].
fn hostile_launch_ms() -> BenchResult<u64> {
    let args: Vec<String> = std::env::args().collect();
    let mut value = None;
    for (i, a) in args.iter().enumerate() {
        if a == HOSTILE_FLAG {
            value = Some(args.get(i + 1).map_or("", String::as_str));
        } else if let Some(v) = a
            .strip_prefix(HOSTILE_FLAG)
            .and_then(|v| v.strip_prefix('='))
        {
            value = Some(v);
        }
    }
    match value {
        None => Ok(HOSTILE_LAUNCH_MS),
        Some(v) => v
            .parse()
            .ok()
            .filter(|&ms| ms >= 1)
            .ok_or_else(|| format!("{HOSTILE_FLAG} wants milliseconds, at least 1; got {v:?}")),
    }
}

fn wasm_error(what: &'static str) -> impl Fn(wasmtime::Error) -> String {
    move |e| format!("{what}: {e:#}")
}

// ---------------------------------------------------------------------------
// One tenant's guest.

struct BenchGuest {
    tenant: Tenant<CudaDriver>,
    memory: Memory,
    buffer_alloc: TypedFunc<(i64, i32), i32>,
    copy_to_buffer: TypedFunc<(i64, i32, i32), i32>,
    copy_from_buffer: TypedFunc<(i32, i64, i32), i32>,
    launch: TypedFunc<(i32, i32, i32), i32>,
    wait: TypedFunc<i64, i32>,
    sync: TypedFunc<(), i32>,
    launch_wait: TypedFunc<(i32, i32), i32>,
    /// The descriptor's length at [`DESC`].
    desc_len: i32,
}

impl BenchGuest {
    fn new(
        runtime: &GuestRuntime<CudaDriver>,
        module: &GuestModule,
        name: &str,
    ) -> BenchResult<Self> {
        let config = TenantConfig::untrusted(name);
        let mut tenant = Tenant::new(runtime, &config).map_err(wasm_error("a tenant"))?;
        let instance = futures::executor::block_on(tenant.instantiate(runtime, module))
            .map_err(wasm_error("instantiating the bench guest"))?;
        let store = tenant.store_mut();
        let memory = instance
            .get_memory(&mut *store, "memory")
            .ok_or("the bench guest exports no memory")?;
        macro_rules! typed {
            ($name:literal) => {
                instance
                    .get_typed_func(&mut *store, $name)
                    .map_err(wasm_error(concat!("the export ", $name)))?
            };
        }
        Ok(BenchGuest {
            buffer_alloc: typed!("buffer_alloc"),
            copy_to_buffer: typed!("copy_to_buffer"),
            copy_from_buffer: typed!("copy_from_buffer"),
            launch: typed!("launch"),
            wait: typed!("wait"),
            sync: typed!("sync"),
            launch_wait: typed!("launch_wait"),
            tenant,
            memory,
            desc_len: 0,
        })
    }

    fn last_error(&self) -> String {
        self.tenant.store().data().cuda.last_error().to_string()
    }

    fn ok(&self, what: &str, errno: i32) -> BenchResult<()> {
        if errno == 0 {
            Ok(())
        } else {
            Err(format!(
                "{} {what}: errno {errno}: {}",
                self.tenant.name(),
                self.last_error()
            ))
        }
    }

    fn write(&mut self, at: u32, bytes: &[u8]) -> BenchResult<()> {
        let end = at as usize + bytes.len();
        let size = self.memory.data_size(self.tenant.store());
        if end > size {
            let pages = (end - size).div_ceil(65536) as u64;
            self.memory
                .grow(self.tenant.store_mut(), pages)
                .map_err(wasm_error("growing the guest's memory"))?;
        }
        self.memory.data_mut(self.tenant.store_mut())[at as usize..end].copy_from_slice(bytes);
        Ok(())
    }

    fn read(&self, at: u32, len: usize) -> &[u8] {
        &self.memory.data(self.tenant.store())[at as usize..at as usize + len]
    }

    /// A device buffer of `len` bytes, holding `bytes` at its start.
    fn buffer(&mut self, len: u64, bytes: &[u8]) -> BenchResult<Handle> {
        let e = block(
            self.buffer_alloc
                .call_async(self.tenant.store_mut(), (len as i64, OUT as i32)),
        )?;
        self.ok("buffer_alloc", e)?;
        let handle = u64::from_le_bytes(self.read(OUT, 8).try_into().expect("8 bytes"));
        if !bytes.is_empty() {
            self.write(DATA, bytes)?;
            let args = (handle as i64, DATA as i32, bytes.len() as i32);
            let e = block(
                self.copy_to_buffer
                    .call_async(self.tenant.store_mut(), args),
            )?;
            self.ok("copy_to_buffer", e)?;
        }
        Ok(Handle(handle))
    }

    /// `n` floats of `buffer`.
    fn read_buffer(&mut self, buffer: Handle, n: usize) -> BenchResult<Vec<f32>> {
        self.write(DATA, &vec![0; n * 4])?;
        let args = (DATA as i32, buffer.0 as i64, (n * 4) as i32);
        let e = block(
            self.copy_from_buffer
                .call_async(self.tenant.store_mut(), args),
        )?;
        self.ok("copy_from_buffer", e)?;
        Ok(self
            .read(DATA, n * 4)
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().expect("4 bytes")))
            .collect())
    }

    /// Puts the op's descriptor at [`DESC`]: every launch runs it.
    fn set_op(&mut self, header: &TensorHeader, operands: &[OperandDescriptor]) -> BenchResult<()> {
        let desc = encode_tensor_op(header, operands);
        self.desc_len = desc.len() as i32;
        self.write(DESC, &desc)
    }

    /// Queues the op: the errno; the handle at [`OUT`].
    fn launch(&mut self) -> BenchResult<i32> {
        let args = (DESC as i32, self.desc_len, OUT as i32);
        block(self.launch.call_async(self.tenant.store_mut(), args))
    }

    fn handle(&self) -> u64 {
        u64::from_le_bytes(self.read(OUT, 8).try_into().expect("8 bytes"))
    }

    fn wait(&mut self, launch: u64) -> BenchResult<()> {
        let e = block(self.wait.call_async(self.tenant.store_mut(), launch as i64))?;
        self.ok("wait", e)
    }

    fn sync(&mut self) -> BenchResult<()> {
        let e = block(self.sync.call_async(self.tenant.store_mut(), ()))?;
        self.ok("sync", e)
    }

    /// Queues the op and waits for it, in one guest call.
    fn launch_wait(&mut self) -> BenchResult<()> {
        let args = (DESC as i32, self.desc_len);
        let e = block(self.launch_wait.call_async(self.tenant.store_mut(), args))?;
        self.ok("launch_wait", e)
    }
}

fn block<T>(f: impl Future<Output = wasmtime::Result<T>>) -> BenchResult<T> {
    futures::executor::block_on(f).map_err(|e| format!("the guest trapped: {e:#}"))
}

/// xorshift64* floats of magnitude in [1, 2), either sign.
struct Floats(u64);

impl Floats {
    fn take(&mut self, n: usize) -> Vec<f32> {
        (0..n)
            .map(|_| {
                let mut x = self.0;
                x ^= x >> 12;
                x ^= x << 25;
                x ^= x >> 27;
                self.0 = x;
                let x = x.wrapping_mul(0x2545_f491_4f6c_dd1d);
                f32::from_bits(((x >> 63) as u32) << 31 | 0x3f80_0000 | (x as u32 & 0x7f_ffff))
            })
            .collect()
    }
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// A ReLU over `n` floats in buffers, set as the guest's op; its input.
fn relu_tenant(guest: &mut BenchGuest, n: u64, seed: u64) -> BenchResult<(Vec<f32>, Handle)> {
    let x = Floats(seed | 1).take(n as usize);
    let xb = guest.buffer(n * 4, &f32_bytes(&x))?;
    let yb = guest.buffer(n * 4, &[])?;
    guest.set_op(
        &TensorHeader::new(TensorOpKind::Relu),
        &[
            OperandDescriptor::buffer(xb, 0, DType::F32, &[n]),
            OperandDescriptor::buffer(yb, 0, DType::F32, &[n]),
        ],
    )?;
    Ok((x, yb))
}

/// The heavy GEMM (bf16 inputs, f32 output, alpha 1, beta 0) in buffers,
/// set as the guest's op; the first one is run and 64 of its elements
/// checked.
fn gemm_tenant(guest: &mut BenchGuest, seed: u64) -> BenchResult<()> {
    let n = HEAVY as usize;
    let mut floats = Floats(seed | 1);
    let to_bf16 = |v: Vec<f32>| -> Vec<u16> { v.iter().map(|&x| oracle::f32_to_bf16(x)).collect() };
    let a = to_bf16(floats.take(n * n));
    let b = to_bf16(floats.take(n * n));
    let bytes = |v: &[u16]| -> Vec<u8> { v.iter().flat_map(|x| x.to_le_bytes()).collect() };
    let ab = guest.buffer((n * n * 2) as u64, &bytes(&a))?;
    let bb = guest.buffer((n * n * 2) as u64, &bytes(&b))?;
    let cb = guest.buffer((n * n * 4) as u64, &[])?;
    let mut header = TensorHeader::new(TensorOpKind::Gemm);
    header.alpha = 1.0;
    guest.set_op(
        &header,
        &[
            OperandDescriptor::buffer(ab, 0, DType::Bf16, &[HEAVY, HEAVY]),
            OperandDescriptor::buffer(bb, 0, DType::Bf16, &[HEAVY, HEAVY]),
            OperandDescriptor::buffer(cb, 0, DType::F32, &[HEAVY, HEAVY]),
        ],
    )?;
    guest.launch_wait()?;
    let c = guest.read_buffer(cb, n * n)?;
    let value = |bits: u16| f64::from(oracle::bf16_to_f32(bits));
    let mut picks = Floats(seed ^ 0x5eed);
    let (mut got, mut want, mut scale) = (Vec::new(), Vec::new(), Vec::new());
    for p in picks.take(64) {
        let at = (p.to_bits() as usize) % (n * n);
        let (i, j) = (at / n, at % n);
        let terms = (0..n).map(|k| value(a[i * n + k]) * value(b[k * n + j]));
        want.push(terms.clone().sum::<f64>());
        scale.push(terms.map(f64::abs).sum::<f64>());
        got.push(c[at]);
    }
    let rtol = oracle::gemm_rtol(oracle::GemmPrecision::Bf16, n);
    oracle::check_close_scaled(&got, &want, &scale, rtol)
        .map_err(|e| format!("the heavy GEMM's sampled elements: {e}"))
}

// ---------------------------------------------------------------------------
// Scenarios.

/// What one fairness scenario measured.
struct Scenario {
    noisy: usize,
    connections: String,
    /// The quiet tenant's launch-to-wait-return latencies, microseconds.
    latencies_us: Vec<f64>,
    /// Noisy launches completed, and the seconds from the first to the
    /// end of the last one.
    noisy_launches: u64,
    noisy_secs: f64,
}

impl Scenario {
    fn noisy_rate(&self) -> f64 {
        if self.noisy_secs > 0.0 {
            self.noisy_launches as f64 / self.noisy_secs
        } else {
            0.0
        }
    }

    fn percentile(&self, p: f64) -> f64 {
        percentile(&self.latencies_us, p)
    }

    fn max(&self) -> f64 {
        max_of(&self.latencies_us)
    }
}

/// A noisy tenant: floods until `stop`, then drains. Launches completed and
/// the seconds they took.
fn flood(
    runtime: &GuestRuntime<CudaDriver>,
    module: &GuestModule,
    index: usize,
    ready: &AtomicUsize,
    stop: &AtomicBool,
) -> BenchResult<(u64, f64)> {
    let prepared = (|| {
        let mut guest = BenchGuest::new(runtime, module, &format!("noisy {index}"))?;
        gemm_tenant(&mut guest, 0x6e6f_6973_7900 + index as u64)?;
        BenchResult::Ok(guest)
    })();
    // Counted even when it failed: the quiet tenant waits for every one.
    ready.fetch_add(1, Ordering::SeqCst);
    let mut guest = prepared?;
    let equota = Errno::EQUOTA.code();
    let mut queue = VecDeque::new();
    let mut launches = 0u64;
    let start = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        let e = guest.launch()?;
        if e == 0 {
            queue.push_back(guest.handle());
            launches += 1;
        } else if e == equota {
            // The oldest: `wait` waits for the whole stream, so the others
            // have finished too and their waits return at once.
            while let Some(h) = queue.pop_front() {
                guest.wait(h)?;
            }
        } else {
            guest.ok("launch (heavy GEMM)", e)?;
        }
    }
    guest.sync()?;
    Ok((launches, start.elapsed().as_secs_f64()))
}

/// The quiet tenant's latencies while `noisy` tenants flood.
fn scenario(
    runtime: &GuestRuntime<CudaDriver>,
    module: &GuestModule,
    noisy: usize,
    connections: &str,
) -> BenchResult<Scenario> {
    let ready = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let floods: Vec<_> = (0..noisy)
            .map(|i| {
                let (ready, stop) = (&ready, &stop);
                s.spawn(move || flood(runtime, module, i, ready, stop))
            })
            .collect();
        let quiet = (|| {
            let mut guest = BenchGuest::new(runtime, module, "quiet")?;
            let (x, yb) = relu_tenant(&mut guest, QUIET_ELEMS, 0x0071_7569_6574)?;
            while ready.load(Ordering::SeqCst) < noisy {
                std::thread::sleep(Duration::from_millis(1));
            }
            // Let the floods fill their queues.
            std::thread::sleep(Duration::from_millis(if noisy > 0 { 200 } else { 0 }));
            for _ in 0..QUIET_WARMUP {
                guest.launch_wait()?;
            }
            let mut latencies_us = Vec::with_capacity(QUIET_LAUNCHES);
            for _ in 0..QUIET_LAUNCHES {
                let t = Instant::now();
                guest.launch_wait()?;
                latencies_us.push(t.elapsed().as_secs_f64() * 1e6);
            }
            let y = guest.read_buffer(yb, x.len())?;
            oracle::check_close(&y, &oracle::relu(&oracle::widen(&x)), 0.0, 0.0)
                .map_err(|e| format!("the quiet tenant's ReLU: {e}"))?;
            BenchResult::Ok(latencies_us)
        })();
        stop.store(true, Ordering::SeqCst);
        let mut noisy_launches = 0;
        let mut noisy_secs: f64 = 0.0;
        for f in floods {
            let (n, secs) = f.join().map_err(|_| "a noisy tenant panicked")??;
            noisy_launches += n;
            noisy_secs = noisy_secs.max(secs);
        }
        Ok(Scenario {
            noisy,
            connections: connections.to_string(),
            latencies_us: quiet?,
            noisy_launches,
            noisy_secs,
        })
    })
}

/// What an aggregate run measured.
struct Aggregate {
    tenants: usize,
    launches: u64,
    secs: f64,
}

/// `tenants` tenants, each `AGGREGATE_LAUNCHES` small ReLUs, 16 queued
/// before each `sync`; all start together.
fn aggregate(
    runtime: &GuestRuntime<CudaDriver>,
    module: &GuestModule,
    tenants: usize,
) -> BenchResult<Aggregate> {
    let ready = AtomicUsize::new(0);
    let go = AtomicBool::new(false);
    let mut start = Instant::now();
    let launches = std::thread::scope(|s| {
        let threads: Vec<_> = (0..tenants)
            .map(|i| {
                let (ready, go) = (&ready, &go);
                s.spawn(move || {
                    let prepared = (|| {
                        let mut guest = BenchGuest::new(runtime, module, &format!("small {i}"))?;
                        let (x, yb) =
                            relu_tenant(&mut guest, SMALL_ELEMS, 0x736d_616c_6c00 + i as u64)?;
                        guest.launch_wait()?;
                        BenchResult::Ok((guest, x, yb))
                    })();
                    ready.fetch_add(1, Ordering::SeqCst);
                    let (mut guest, x, yb) = prepared?;
                    while !go.load(Ordering::Acquire) {
                        std::hint::spin_loop();
                    }
                    for _ in 0..AGGREGATE_LAUNCHES / AGGREGATE_WINDOW {
                        for _ in 0..AGGREGATE_WINDOW {
                            let e = guest.launch()?;
                            guest.ok("launch (small ReLU)", e)?;
                        }
                        guest.sync()?;
                    }
                    let y = guest.read_buffer(yb, x.len())?;
                    oracle::check_close(&y, &oracle::relu(&oracle::widen(&x)), 0.0, 0.0)
                        .map_err(|e| format!("a small ReLU: {e}"))?;
                    BenchResult::Ok(AGGREGATE_LAUNCHES as u64)
                })
            })
            .collect();
        while ready.load(Ordering::SeqCst) < tenants {
            std::thread::sleep(Duration::from_millis(1));
        }
        start = Instant::now();
        go.store(true, Ordering::Release);
        let mut total = 0;
        for t in threads {
            total += t.join().map_err(|_| "a tenant panicked")??;
        }
        BenchResult::Ok(total)
    })?;
    Ok(Aggregate {
        tenants,
        launches,
        secs: start.elapsed().as_secs_f64(),
    })
}

// ---------------------------------------------------------------------------
// The hostile tenant.

/// The hostile tenant's quota: the untrusted defaults (launches in flight,
/// the device share of one launch, ...), except fuel that never runs out,
/// so that only `launch_time` ends its kernel.
fn hostile_quota(launch_time: Duration) -> TenantQuota {
    TenantQuota::default()
        .with_kernel_fuel(u64::MAX)
        .with_launch_time_ns(u64::try_from(launch_time.as_nanos()).unwrap_or(u64::MAX))
}

/// The hostile tenant's guest ([`HOSTILE_WAT`]).
struct HostileGuest {
    tenant: Tenant<CudaDriver>,
    get: TypedFunc<(), i32>,
    launch: TypedFunc<(i32, i32), i32>,
    wait_last: TypedFunc<(), i32>,
}

impl HostileGuest {
    fn new(
        runtime: &GuestRuntime<CudaDriver>,
        module: &GuestModule,
        launch_time: Duration,
    ) -> BenchResult<Self> {
        let config = TenantConfig {
            quota: hostile_quota(launch_time),
            ..TenantConfig::untrusted("hostile")
        };
        let mut tenant = Tenant::new(runtime, &config).map_err(wasm_error("the hostile tenant"))?;
        let instance = futures::executor::block_on(tenant.instantiate(runtime, module))
            .map_err(wasm_error("instantiating the hostile guest"))?;
        let store = tenant.store_mut();
        macro_rules! typed {
            ($name:literal) => {
                instance
                    .get_typed_func(&mut *store, $name)
                    .map_err(wasm_error(concat!("the hostile export ", $name)))?
            };
        }
        Ok(HostileGuest {
            get: typed!("get"),
            launch: typed!("launch"),
            wait_last: typed!("wait_last"),
            tenant,
        })
    }

    fn last_error(&self) -> String {
        self.tenant.store().data().cuda.last_error().to_string()
    }

    fn ok(&self, what: &str, errno: i32) -> BenchResult<()> {
        if errno == 0 {
            Ok(())
        } else {
            Err(format!(
                "hostile {what}: errno {errno}: {}",
                self.last_error()
            ))
        }
    }
}

/// How the hostile tenant's launches ended.
#[derive(Default)]
struct HostileLaunches {
    /// Each launch's wall time, from its `launch` to the return of its
    /// `wait`, in milliseconds.
    durations_ms: Vec<f64>,
    /// Launches whose `wait` returned `ETRAP` with "time limit" in the last
    /// error.
    time_limit_traps: usize,
    /// The first launch that ended otherwise: its errno and last error.
    other: Option<String>,
}

/// The hostile tenant: makes its kernel, says `ready`, waits for `go`,
/// then launches the endless kernel over `grid` x [`HOSTILE_BLOCK`] and
/// waits for it, again and again until `stop` (`flooding` once its first
/// launch is queued).
fn hostile_flood(
    runtime: &GuestRuntime<CudaDriver>,
    module: &GuestModule,
    launch_time: Duration,
    grid: u32,
    [ready, go, flooding, stop]: [&AtomicBool; 4],
) -> BenchResult<HostileLaunches> {
    let prepared = (|| {
        let mut guest = HostileGuest::new(runtime, module, launch_time)?;
        let e = block(guest.get.call_async(guest.tenant.store_mut(), ()))?;
        guest.ok("kernel_get", e)?;
        BenchResult::Ok(guest)
    })();
    // Said even when it failed: the quiet tenant waits for it.
    ready.store(true, Ordering::SeqCst);
    let mut guest = prepared?;
    let mut out = HostileLaunches::default();
    while !go.load(Ordering::SeqCst) {
        if stop.load(Ordering::SeqCst) {
            return Ok(out);
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    // The grid's bits: the ABI reads geometry as u32.
    let args = (grid as i32, HOSTILE_BLOCK as i32);
    while !stop.load(Ordering::SeqCst) {
        let t = Instant::now();
        let e = block(guest.launch.call_async(guest.tenant.store_mut(), args))?;
        guest.ok("launch", e)?;
        flooding.store(true, Ordering::SeqCst);
        let e = block(guest.wait_last.call_async(guest.tenant.store_mut(), ()))?;
        out.durations_ms.push(t.elapsed().as_secs_f64() * 1e3);
        let text = guest.last_error();
        if e == Errno::ETRAP.code() && text.contains("time limit") {
            out.time_limit_traps += 1;
        } else if out.other.is_none() {
            out.other = Some(format!("wait returned errno {e}; last error: {text}"));
        }
    }
    Ok(out)
}

/// The quiet tenant's latencies, microseconds: [`QUIET_WARMUP`] untimed
/// launches, then [`QUIET_LAUNCHES`] timed ones, started `interval` apart
/// (at once when one ran late). The gaps are spun, not slept: a thread
/// woken from a sleep before each launch measures its own wake-up too.
fn paced_latencies(guest: &mut BenchGuest, interval: Duration) -> BenchResult<Vec<f64>> {
    for _ in 0..QUIET_WARMUP {
        guest.launch_wait()?;
    }
    let mut latencies_us = Vec::with_capacity(QUIET_LAUNCHES);
    let start = Instant::now();
    for i in 0..QUIET_LAUNCHES {
        let at = start + interval * i as u32;
        while Instant::now() < at {
            std::hint::spin_loop();
        }
        let t = Instant::now();
        guest.launch_wait()?;
        latencies_us.push(t.elapsed().as_secs_f64() * 1e6);
    }
    Ok(latencies_us)
}

/// What the hostile scenario measured.
struct Hostile {
    launch_ms: u64,
    grid: u32,
    /// The hostile quota's share of the device one launch may hold.
    share_percent: u64,
    /// Between the starts of the quiet tenant's timed launches.
    interval: Duration,
    /// The quiet tenant's latencies alone and under the hostile tenant,
    /// microseconds.
    alone_us: Vec<f64>,
    flooded_us: Vec<f64>,
    launches: HostileLaunches,
}

impl Hostile {
    fn all_time_limit(&self) -> bool {
        !self.launches.durations_ms.is_empty()
            && self.launches.time_limit_traps == self.launches.durations_ms.len()
    }
}

/// The quiet tenant alone, then while the hostile tenant floods with its
/// largest launch (its launches `launch_ms` each).
fn hostile_scenario(
    runtime: &GuestRuntime<CudaDriver>,
    module: &GuestModule,
    launch_ms: u64,
) -> BenchResult<Hostile> {
    let hostile_module = runtime
        .compile(HOSTILE_WAT)
        .map_err(wasm_error("compiling the hostile guest"))?;
    let launch_time = Duration::from_millis(launch_ms);
    let grid = runtime.driver().device().max_grid_dim.0;
    let interval = launch_time * HOSTILE_SPAN / QUIET_LAUNCHES as u32;
    let flags = [(); 4].map(|()| AtomicBool::new(false));
    let [ready, go, flooding, stop] = &flags;
    std::thread::scope(|s| {
        let hostile = s.spawn(|| {
            let flags = [ready, go, flooding, stop];
            hostile_flood(runtime, &hostile_module, launch_time, grid, flags)
        });
        // False when the hostile tenant ended (failed) first.
        let wait_for = |flag: &AtomicBool| {
            while !flag.load(Ordering::SeqCst) && !hostile.is_finished() {
                std::thread::sleep(Duration::from_millis(1));
            }
            flag.load(Ordering::SeqCst)
        };
        let quiet = (|| {
            let mut guest = BenchGuest::new(runtime, module, "quiet")?;
            let (x, yb) = relu_tenant(&mut guest, QUIET_ELEMS, 0x0071_7569_6574)?;
            if !wait_for(ready) {
                return Err("the hostile tenant ended before it was ready".to_string());
            }
            let alone = paced_latencies(&mut guest, interval)?;
            go.store(true, Ordering::SeqCst);
            if !wait_for(flooding) {
                return Err("the hostile tenant ended before its first launch".to_string());
            }
            let flooded = paced_latencies(&mut guest, interval)?;
            let y = guest.read_buffer(yb, x.len())?;
            oracle::check_close(&y, &oracle::relu(&oracle::widen(&x)), 0.0, 0.0)
                .map_err(|e| format!("the quiet tenant's ReLU: {e}"))?;
            BenchResult::Ok((alone, flooded))
        })();
        stop.store(true, Ordering::SeqCst);
        // The hostile tenant's own failure explains the quiet one's.
        let launches = hostile
            .join()
            .map_err(|_| "the hostile tenant panicked")??;
        let (alone_us, flooded_us) = quiet?;
        Ok(Hostile {
            launch_ms,
            grid,
            share_percent: hostile_quota(launch_time).launch_share_percent(),
            interval,
            alone_us,
            flooded_us,
            launches,
        })
    })
}

fn setup(driver: CudaDriver) -> BenchResult<(GuestRuntime<CudaDriver>, GuestModule)> {
    let mut runtime =
        GuestRuntime::new(driver, GUEST_MEMORY_LIMIT).map_err(wasm_error("the guest runtime"))?;
    // The runtime's own cap on kernel fuel (2^24 a thread by default) would
    // end the hostile tenant's loop before its launch time does. Every
    // tenant here is untrusted, so its quota's fuel still bounds it.
    runtime.set_limits(WasiCudaLimits {
        kernel_fuel: u64::MAX,
        ..WasiCudaLimits::default()
    });
    let module = runtime
        .compile(GUEST_WAT)
        .map_err(wasm_error("compiling the bench guest"))?;
    Ok((runtime, module))
}

/// The child: the 4-noisy scenario without `CUDA_DEVICE_MAX_CONNECTIONS`;
/// one result line on stdout.
fn run_child(driver: CudaDriver) -> BenchResult<()> {
    let (runtime, module) = setup(driver)?;
    let noisy = NOISY[NOISY.len() - 1];
    let s = scenario(&runtime, &module, noisy, "unset")?;
    let samples: Vec<String> = s.latencies_us.iter().map(|x| format!("{x:.2}")).collect();
    println!(
        "{CHILD_PREFIX} {} {} {} {}",
        s.noisy_launches,
        s.noisy_secs,
        noisy,
        samples.join(",")
    );
    Ok(())
}

/// Runs the child and reads its scenario back.
fn scenario_in_child() -> BenchResult<Scenario> {
    let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
    let out = std::process::Command::new(&exe)
        .arg(CHILD_FLAG)
        .env_remove(CONNECTIONS_ENV)
        .output()
        .map_err(|e| format!("running {}: {e}", exe.display()))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        return Err(format!(
            "the child ({}) failed: {}{}",
            out.status,
            stdout,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix(CHILD_PREFIX))
        .ok_or_else(|| format!("the child printed no result: {stdout}"))?;
    let fields: Vec<&str> = line.split_whitespace().collect();
    let bad = |what: &str| format!("the child's result line {line:?}: bad {what}");
    let [launches, secs, noisy, samples] = fields[..] else {
        return Err(bad("field count"));
    };
    Ok(Scenario {
        noisy: noisy.parse().map_err(|_| bad("noisy"))?,
        connections: "unset".into(),
        latencies_us: samples
            .split(',')
            .map(|x| x.parse().map_err(|_| bad("sample")))
            .collect::<BenchResult<_>>()?,
        noisy_launches: launches.parse().map_err(|_| bad("launches"))?,
        noisy_secs: secs.parse().map_err(|_| bad("seconds"))?,
    })
}

fn run(driver: CudaDriver, connections: &str, hostile_ms: u64) -> BenchResult<()> {
    let info = driver.device().clone();
    let command = command_line();
    let date = utc_timestamp();
    let driver_version = driver_version(&info);
    println!("tenants on {} (driver {driver_version}), {date}", info.name);
    println!("command: {command}");
    println!("{connections}");
    let (runtime, module) = setup(driver)?;

    let mut scenarios = Vec::new();
    for noisy in NOISY {
        println!("quiet tenant with {noisy} noisy tenant(s)...");
        scenarios.push(scenario(&runtime, &module, noisy, CONNECTIONS)?);
    }
    let mut aggregates = Vec::new();
    for tenants in [1, AGGREGATE_TENANTS] {
        println!("{tenants} tenant(s) of small launches...");
        aggregates.push(aggregate(&runtime, &module, tenants)?);
    }
    println!(
        "the quiet tenant alone, then under a hostile tenant's largest launches \
         ({hostile_ms} ms each)..."
    );
    let hostile = hostile_scenario(&runtime, &module, hostile_ms);
    if let Err(e) = &hostile {
        println!("(the hostile scenario failed: {e})");
    }
    drop(module);
    drop(runtime);
    println!("the 4-noisy scenario again in a child without {CONNECTIONS_ENV}...");
    let child_error = match scenario_in_child() {
        Ok(s) => {
            scenarios.push(s);
            None
        }
        Err(e) => {
            println!("(not measured: {e})");
            Some(e)
        }
    };

    println!();
    print!("{}", table(&scenarios, &aggregates));
    if let Ok(h) = &hostile {
        print!("{}", hostile_table(h));
    }
    let record = Record::new(
        &info,
        date,
        command,
        child_error.as_deref(),
        &scenarios,
        &aggregates,
        hostile.as_ref(),
    );
    let path = common::write_record("tenants.json", &record)?;
    println!("raw numbers: {}", path.display());
    // The other numbers are written; a failed hostile run still fails the
    // bench, since it means a launch the sandbox must take went wrong.
    hostile
        .map(drop)
        .map_err(|e| format!("the hostile scenario: {e}"))
}

// ---------------------------------------------------------------------------
// Output.

fn table(scenarios: &[Scenario], aggregates: &[Aggregate]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Quiet tenant: ReLU over {QUIET_ELEMS} floats, launch + wait, {QUIET_LAUNCHES} timed; \
         noisy tenants: bf16 GEMM {HEAVY}^3, up to 256 in flight each.\n"
    );
    out.push_str(
        "| noisy tenants | CUDA_DEVICE_MAX_CONNECTIONS | quiet p50 (us) | quiet p99 (us) | quiet \
         max (us) | noisy launches/s (all) | noisy launches |\n\
         | ---: | --- | ---: | ---: | ---: | ---: | ---: |\n",
    );
    for s in scenarios {
        let _ = writeln!(
            out,
            "| {} | {} | {:.1} | {:.1} | {:.1} | {:.1} | {} |",
            s.noisy,
            s.connections,
            s.percentile(50.0),
            s.percentile(99.0),
            s.max(),
            s.noisy_rate(),
            s.noisy_launches
        );
    }
    let _ = writeln!(
        out,
        "\nSmall launches: ReLU over {SMALL_ELEMS} floats, {AGGREGATE_LAUNCHES} per tenant, \
         {AGGREGATE_WINDOW} queued per sync.\n"
    );
    out.push_str(
        "| tenants | launches | seconds | launches/s (all) |\n| ---: | ---: | ---: | ---: |\n",
    );
    for a in aggregates {
        let _ = writeln!(
            out,
            "| {} | {} | {:.3} | {:.0} |",
            a.tenants,
            a.launches,
            a.secs,
            a.launches as f64 / a.secs
        );
    }
    out
}

/// The hostile scenario's tables.
fn hostile_table(h: &Hostile) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\nHostile tenant: a Wasm kernel that never ends, grid {} x {HOSTILE_BLOCK} threads, \
         unlimited kernel fuel, launch time {} ms, at most {}% of the device's thread slots at \
         once (the untrusted default); each launch waited. The quiet tenant's {QUIET_LAUNCHES} \
         timed launches start {:.0} us apart ({HOSTILE_SPAN} hostile launch times).\n",
        h.grid,
        h.launch_ms,
        h.share_percent,
        h.interval.as_secs_f64() * 1e6
    );
    out.push_str(
        "| quiet tenant | p50 (us) | p99 (us) | max (us) |\n| --- | ---: | ---: | ---: |\n",
    );
    for (what, xs) in [
        ("alone", &h.alone_us),
        ("under the hostile tenant", &h.flooded_us),
    ] {
        let _ = writeln!(
            out,
            "| {what} | {:.1} | {:.1} | {:.1} |",
            percentile(xs, 50.0),
            percentile(xs, 99.0),
            max_of(xs)
        );
    }
    let l = &h.launches;
    let ended = if h.all_time_limit() {
        format!("all {}", l.time_limit_traps)
    } else {
        format!(
            "{} of {} (first other: {})",
            l.time_limit_traps,
            l.durations_ms.len(),
            l.other.as_deref().unwrap_or("none")
        )
    };
    let _ = writeln!(
        out,
        "\n| hostile launches | ended by the time-limit trap | median (ms) | max (ms) |\n\
         | ---: | --- | ---: | ---: |\n| {} | {ended} | {:.1} | {:.1} |",
        l.durations_ms.len(),
        percentile(&l.durations_ms, 50.0),
        max_of(&l.durations_ms)
    );
    out
}

/// The JSON record: every latency, and what produced it. Latencies and
/// percentiles to 2 decimals; a non-finite number (a percentile of no
/// samples) is `null`.
#[derive(Serialize)]
struct Record<'a> {
    benchmark: &'static str,
    date_utc: String,
    command: String,
    device: DeviceRecord,
    config: Config,
    notes: [&'static str; 4],
    #[serde(skip_serializing_if = "Option::is_none")]
    child_error: Option<&'a str>,
    scenarios: Vec<ScenarioRecord<'a>>,
    aggregates: Vec<AggregateRecord>,
    #[serde(skip_serializing_if = "Option::is_none")]
    hostile: Option<HostileRecord<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    hostile_error: Option<&'a str>,
}

/// The settings the record was measured with.
#[derive(Serialize)]
struct Config {
    quiet_elems: u64,
    quiet_launches: usize,
    quiet_warmup: usize,
    heavy_gemm_bf16_mnk: u64,
    small_elems: u64,
    aggregate_launches_per_tenant: usize,
    aggregate_window: usize,
    launches_in_flight_quota: u32,
    connections: u32,
}

/// One fairness scenario in the record.
#[derive(Serialize)]
struct ScenarioRecord<'a> {
    noisy_tenants: usize,
    connections: &'a str,
    quiet_p50_us: f64,
    quiet_p99_us: f64,
    quiet_max_us: f64,
    noisy_launches: u64,
    noisy_seconds: f64,
    noisy_launches_per_s: f64,
    quiet_latencies_us: Vec<f64>,
}

/// One aggregate run in the record.
#[derive(Serialize)]
struct AggregateRecord {
    tenants: usize,
    launches: u64,
    seconds: f64,
    launches_per_s: f64,
}

/// The hostile scenario in the record.
#[derive(Serialize)]
struct HostileRecord<'a> {
    launch_time_ms: u64,
    grid_x: u32,
    block_x: u32,
    kernel_fuel: &'static str,
    launch_share_percent: u64,
    quiet_interval_us: f64,
    quiet_alone_p50_us: f64,
    quiet_alone_p99_us: f64,
    quiet_alone_max_us: f64,
    quiet_hostile_p50_us: f64,
    quiet_hostile_p99_us: f64,
    quiet_hostile_max_us: f64,
    hostile_launches: usize,
    hostile_time_limit_traps: usize,
    hostile_all_time_limit: bool,
    hostile_median_ms: f64,
    hostile_max_ms: f64,
    hostile_other_outcome: Option<&'a str>,
    hostile_durations_ms: Vec<f64>,
    quiet_alone_latencies_us: Vec<f64>,
    quiet_hostile_latencies_us: Vec<f64>,
}

impl<'a> Record<'a> {
    fn new(
        info: &tensorwasm_core::DeviceInfo,
        date_utc: String,
        command: String,
        child_error: Option<&'a str>,
        scenarios: &'a [Scenario],
        aggregates: &[Aggregate],
        hostile: Result<&'a Hostile, &'a String>,
    ) -> Record<'a> {
        Record {
            benchmark: "tenants",
            date_utc,
            command,
            device: DeviceRecord::new(info),
            config: Config {
                quiet_elems: QUIET_ELEMS,
                quiet_launches: QUIET_LAUNCHES,
                quiet_warmup: QUIET_WARMUP,
                heavy_gemm_bf16_mnk: HEAVY,
                small_elems: SMALL_ELEMS,
                aggregate_launches_per_tenant: AGGREGATE_LAUNCHES,
                aggregate_window: AGGREGATE_WINDOW,
                launches_in_flight_quota: 256,
                connections: CONNECTIONS.parse().expect("CONNECTIONS is a number"),
            },
            notes: [
                "quiet latency: host time around one call of the guest's launch_wait export \
                 (tensor_op, then wait on its handle), so it includes wasmtime's call_async and \
                 the fiber switch; the first 100 launches are untimed",
                "noisy tenants queue the GEMM until EQUOTA, then wait the oldest handle (wait \
                 waits for the tenant's whole stream) and the rest (finished by then), and fill \
                 again; their rate is launches completed over the time from their first launch \
                 to the end of their final sync",
                "the unset row is a child process of this binary with CUDA_DEVICE_MAX_CONNECTIONS \
                 removed from its environment",
                "hostile: the quiet tenant's launches are paced (started quiet_interval_us apart, \
                 spinning in between, alone and under the hostile tenant alike, after 100 \
                 unpaced untimed ones); each hostile launch's duration is host time from its \
                 launch call to the return of its wait; a launch counts as ended by the time \
                 limit when wait returned ETRAP and the last error says time limit",
            ],
            child_error,
            scenarios: scenarios.iter().map(ScenarioRecord::new).collect(),
            aggregates: aggregates.iter().map(AggregateRecord::new).collect(),
            hostile: hostile.ok().map(HostileRecord::new),
            hostile_error: hostile.err().map(String::as_str),
        }
    }
}

impl<'a> ScenarioRecord<'a> {
    fn new(s: &'a Scenario) -> ScenarioRecord<'a> {
        ScenarioRecord {
            noisy_tenants: s.noisy,
            connections: &s.connections,
            quiet_p50_us: round(s.percentile(50.0), 2),
            quiet_p99_us: round(s.percentile(99.0), 2),
            quiet_max_us: round(s.max(), 2),
            noisy_launches: s.noisy_launches,
            noisy_seconds: round(s.noisy_secs, 4),
            noisy_launches_per_s: round(s.noisy_rate(), 2),
            quiet_latencies_us: rounded(&s.latencies_us, 2),
        }
    }
}

impl AggregateRecord {
    fn new(a: &Aggregate) -> AggregateRecord {
        AggregateRecord {
            tenants: a.tenants,
            launches: a.launches,
            seconds: round(a.secs, 4),
            launches_per_s: round(a.launches as f64 / a.secs, 1),
        }
    }
}

impl<'a> HostileRecord<'a> {
    fn new(h: &'a Hostile) -> HostileRecord<'a> {
        let l = &h.launches;
        HostileRecord {
            launch_time_ms: h.launch_ms,
            grid_x: h.grid,
            block_x: HOSTILE_BLOCK,
            kernel_fuel: "unlimited",
            launch_share_percent: h.share_percent,
            quiet_interval_us: round(h.interval.as_secs_f64() * 1e6, 1),
            quiet_alone_p50_us: round(percentile(&h.alone_us, 50.0), 2),
            quiet_alone_p99_us: round(percentile(&h.alone_us, 99.0), 2),
            quiet_alone_max_us: round(max_of(&h.alone_us), 2),
            quiet_hostile_p50_us: round(percentile(&h.flooded_us, 50.0), 2),
            quiet_hostile_p99_us: round(percentile(&h.flooded_us, 99.0), 2),
            quiet_hostile_max_us: round(max_of(&h.flooded_us), 2),
            hostile_launches: l.durations_ms.len(),
            hostile_time_limit_traps: l.time_limit_traps,
            hostile_all_time_limit: h.all_time_limit(),
            hostile_median_ms: round(percentile(&l.durations_ms, 50.0), 2),
            hostile_max_ms: round(max_of(&l.durations_ms), 2),
            hostile_other_outcome: l.other.as_deref(),
            hostile_durations_ms: rounded(&l.durations_ms, 2),
            quiet_alone_latencies_us: rounded(&h.alone_us, 2),
            quiet_hostile_latencies_us: rounded(&h.flooded_us, 2),
        }
    }
}
