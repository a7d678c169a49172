//! What a guest's own Wasm functions are worth as GPU kernels, measured side
//! by side in one process on device 0's primary context. Every Wasm kernel
//! checks its thread's time (docs/kernels.md, "Time limit"): it reads the
//! SM's cycle counter when the thread starts, at each virtual block's start
//! and at each loop header (after the fuel check), and traps once past the
//! limit; and it runs the guest's grid as virtual blocks over a 1-D
//! physical grid ("Virtual blocks"). The hand-written PTX does neither, so
//! the rows below hold both costs:
//!
//! 1. bandwidth of a vector add and a SAXPY written in Wasm, lowered to PTX
//!    by `kernel_get` and launched over the guest's linear memory (managed
//!    memory, prefetched to the device), against the same operations as
//!    hand-written PTX launched raw over `cuMemAlloc` buffers, and that same
//!    PTX launched by the guest over its memory (which separates what the
//!    lowering costs from what managed memory costs). Memory-bound: what
//!    the checks add is two cycle-counter reads and a compare per thread,
//!    and the virtual-block loop around the body;
//! 2. the same for a compute-bound loop, `x = x * a + b` (a rounded
//!    multiply, then a rounded add) taken [`LOOP_ITERS`] times by each
//!    thread over one f32, in G iterations/s: the hand PTX's loop has no
//!    checks, the Wasm kernel's loop goes through the loop-header check on
//!    every iteration, so its ratio to the hand PTX is what the lowered
//!    loop costs, the check included (with the lowering's other code in the
//!    loop body: each f32 result is also tested for NaN and made the
//!    canonical one, which the hand PTX does not do either);
//! 3. the Wasm kernels of (1) and (2) launched by an untrusted tenant's
//!    guest ([`tenant_config`]: the default quota, so a launch holds at most
//!    50% of the device's thread slots and runs at most 1 s), over its own
//!    memory: a trusted guest's launch has one physical block per virtual
//!    block, the tenant's as many as fit in its share, each running every
//!    n-th virtual block; their ratio to the trusted guest's Wasm kernel is
//!    what the share costs a launch that has the device to itself;
//! 4. the vector add and SAXPY as plain Wasm exports that wasmtime runs on
//!    one CPU core, and the GPU kernels' speedup over them (not the loop,
//!    whose 2^34 dependent steps would take most of a minute there);
//! 5. the time of a guest's first `kernel_get` of each Wasm kernel
//!    (translate, lower, JIT-load; the driver without its JIT cache) and of
//!    a later one that the runtime's kernel cache answers, with the first
//!    one's steps timed by hand beside it; and the first `kernel_get` of a
//!    fresh runtime whose driver's JIT cache holds the kernel (what a new
//!    process pays the second time: translate, lower, load the cubin).
//!
//! Every output is checked bit for bit against the same f32 arithmetic on
//! the CPU. The raw side calls `tensorwasm_cuda::sys` directly, as a C
//! program would; the guest side runs `wasm_kernels.wat` through
//! [`GuestRuntime`]. Prints a table and writes every sample to
//! `$OUT/wasm_kernels.json` (or `./wasm_kernels.json`). Run with
//! `cargo bench -p tensorwasm-embed --bench wasm_kernels`; see
//! `docs/benchmarks/README.md`.
//!
//! Environment: `OUT` (where the JSON goes), `WASM_KERNELS_SEED` (the seed
//! of the random inputs, decimal or `0x` hex; printed either way),
//! `TENSORWASM_LIBCUDA` (the driver library, for both sides),
//! `CUDA_CACHE_DISABLE` (the driver's on-disk JIT cache; the bench sets it
//! to 1 when it is unset, so that every first `kernel_get` really compiles).

mod common;

use common::{DeviceRecord, Target, command_line, driver_version, round, rounded, utc_timestamp};
use serde::Serialize;
use std::{
    ffi::{CStr, CString, c_char, c_void},
    fmt::Write as _,
    num::NonZero,
    process::ExitCode,
    ptr,
    sync::Arc,
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use tensorwasm_core::{
    DeviceInfo, GpuDriver,
    abi::{ArgDescriptor, encode_args},
    lower::{Lowerer, translate::translate_kernel},
    quota::{QuotaLedger, TenantQuota},
};
use tensorwasm_cuda::{CudaDriver, DEFAULT_LIBCUDA, JitCache, LIBCUDA_ENV, sys};
use tensorwasm_embed::{
    kernel::{GuestModule, ptx_target},
    runtime::{GuestRuntime, GuestState},
    tenant::TenantConfig,
};
use wasmtime::{Memory, Store, TypedFunc};

/// The bench guest: the Wasm kernels, the CPU loops, thin exports over the
/// `wasi_cuda` imports.
const GUEST_WAT: &str = include_str!("wasm_kernels.wat");
/// `vadd(a, b, c, n)`: `c[i] = a[i] + b[i]`.
const VADD_PTX: &str = include_str!("../../kernels/test/vector_add.ptx");
/// `saxpy(alpha, x, y, n)`: `y[i] = alpha * x[i] + y[i]`, no fma.
const SAXPY_PTX: &str = include_str!("../../kernels/bench/saxpy.ptx");
/// `mul_add_loop(a, b, x, y, n, iters)`: `y[i]` is `x[i]` after `iters`
/// steps of `x = x * a + b`, no fma.
const LOOP_PTX: &str = include_str!("../../kernels/bench/mul_add_loop.ptx");
/// `$vadd_kernel`'s index in the guest's function index space.
const VADD_KERNEL: u32 = 10;
/// `$saxpy_kernel`'s index in the guest's function index space.
const SAXPY_KERNEL: u32 = 11;
/// `$loop_kernel`'s index in the guest's function index space.
const LOOP_KERNEL: u32 = 12;

/// Elements per vector (64 Mi floats: 256 MiB a vector).
const N: usize = 64 << 20;
/// Bytes each element moves: two reads and a write, for both operations.
const BYTES_PER_ELEMENT: f64 = 12.0;
/// SAXPY's `alpha`.
const ALPHA: f32 = 1.5;
/// Elements (threads) of the loop kernel: about 15.5 per thread slot of an
/// H100 (132 x 2048), so a launch runs many waves of full blocks.
const LOOP_N: usize = 4 << 20;
/// Steps of `x = x * a + b` each thread of the loop kernel takes: 4096
/// steps for 8 bytes of memory traffic, so the kernel is compute-bound
/// (and every step passes the Wasm loop header's fuel and clock checks).
const LOOP_ITERS: u32 = 4096;
/// The loop's `a` and `b`: `a` just below 1 and `b` small, so every value
/// stays finite (no NaN, whose bits Wasm leaves open) and moves towards
/// `b / (1 - a)`, about 1, by a factor of only 0.9999^4096 (about 0.66):
/// the outputs still differ with the inputs, and every step rounds.
const LOOP_A: f32 = 0.9999;
const LOOP_B: f32 = 1.0e-4;
/// Threads per block on the GPU.
const BLOCK: u32 = 256;
/// Timed launches per GPU sample (then one synchronize, also timed).
const LAUNCHES: usize = 20;
/// GPU samples per method; the median is reported.
const REPS: usize = 5;
/// Timed CPU passes per operation (after one untimed pass).
const CPU_REPS: usize = 5;
/// Untimed `kernel_get` repetitions before the timed ones.
const KERNEL_GET_WARMUP: usize = 1;
/// Timed `kernel_get` repetitions, each with a fresh runtime.
const KERNEL_GET_REPS: usize = 7;
/// The GPU guests' memory limit: the trusted guest's four vectors, two loop
/// vectors and the 64 KiB below them, in managed memory reserved lazily
/// (the tenant's guest needs less).
const GUEST_MEMORY_LIMIT: usize = 5 << 28;
/// The memory limit of the `kernel_get` guests, which hold no data.
const SMALL_GUEST_MEMORY_LIMIT: usize = 16 << 20;
/// The device's JIT cache switch, read by the driver in `cuInit`.
const JIT_CACHE_ENV: &str = "CUDA_CACHE_DISABLE";

/// Guest memory layout (the guest keeps its out-slots below 64). Each
/// kernel's argument descriptors get 256 bytes from `GUEST_ARGS` on
/// ([`args_at`]; 24 bytes a descriptor, the loop's six take 144).
const GUEST_NAME: u32 = 512;
const GUEST_ARGS: u32 = 1024;
const GUEST_PTX: u32 = 4096;
const GUEST_DATA: u32 = 65536;
const WASM_PAGE: usize = 65536;

/// Inputs at the start of both vectors, before the random ones: subnormals
/// (the smallest, whose 1.5x rounds), a value whose sum overflows, the
/// extremes, inexact fractions. Both vectors hold the same value at each
/// index, so every sum and every SAXPY step keeps one sign: no inf - inf,
/// hence no NaN, whose bits Wasm leaves open.
const EDGE_VALUES: [f32; 10] = [
    f32::from_bits(0x0000_0001),
    f32::from_bits(0x8040_0000),
    f32::MIN_POSITIVE,
    -1.0,
    3.0e38,
    f32::MAX,
    -f32::MAX,
    1.0e-30,
    0.1,
    -7.5e-3,
];

type BenchResult<T> = Result<T, String>;

fn main() -> ExitCode {
    let jit_cache = disable_jit_cache();
    let driver = match CudaDriver::new(0) {
        Ok(d) => d,
        Err(e) => {
            eprintln!(
                "wasm_kernels: needs a CUDA device, and none is usable here; nothing measured.\n\
                 CudaDriver::new(0): {e}"
            );
            return ExitCode::from(2);
        }
    };
    match run(driver, &jit_cache) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("wasm_kernels: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Turns the driver's on-disk JIT cache off unless the environment says
/// otherwise: with it on, every first `kernel_get` after the first would
/// find the same PTX compiled on disk. Says which it is.
fn disable_jit_cache() -> String {
    match std::env::var_os(JIT_CACHE_ENV) {
        Some(value) => format!(
            "{JIT_CACHE_ENV}={} (from the environment)",
            value.to_string_lossy()
        ),
        None => {
            // SAFETY: called first thing in `main`, before any thread is
            // spawned and before the CUDA driver (which reads the variable
            // in cuInit) is loaded: nothing reads the environment meanwhile.
            unsafe { std::env::set_var(JIT_CACHE_ENV, "1") };
            format!("{JIT_CACHE_ENV}=1 (set by the bench)")
        }
    }
}

fn run(driver: CudaDriver, jit_cache: &str) -> BenchResult<()> {
    let seed = seed()?;
    let info = driver.device().clone();
    let command = command_line();
    let date = utc_timestamp();
    let driver_version = driver_version(&info);
    println!(
        "wasm_kernels on {} (driver {driver_version}), {date}",
        info.name
    );
    println!("command: {command}");
    println!("seed of the random inputs: {seed:#x} (set WASM_KERNELS_SEED to repeat)");
    println!("JIT cache: {jit_cache}");
    let share = tenant_config().quota.launch_share_percent();
    let (slots, tenant_blocks) = tenant_blocks(&info, share);
    println!(
        "tenant launches: {share}% of {slots} thread slots, {tenant_blocks} physical blocks of \
         {BLOCK} threads"
    );

    let mut raw = RawCuda::open()?;
    let (mut rows, kernel_get_rows, lowered_ptx) = futures::executor::block_on(async {
        println!(
            "measuring GPU throughput (raw PTX, guest PTX, guest Wasm kernels, tenant Wasm \
             kernels)..."
        );
        let mut rows = {
            let runtime = GuestRuntime::new(driver.clone(), GUEST_MEMORY_LIMIT)
                .map_err(wasm_error("building the guest runtime"))?;
            let module = runtime
                .compile(GUEST_WAT)
                .map_err(wasm_error("compiling wasm_kernels.wat"))?;
            gpu_throughput(&mut raw, &runtime, &module, seed).await?
            // The guests (their memory, modules, streams) and the raw
            // buffers are gone here.
        };
        println!("measuring the vector add and SAXPY in wasmtime on one CPU core...");
        let cpu = cpu_bandwidth(&driver, seed, &rows).await?;
        rows.extend(cpu);
        println!("measuring kernel_get (translate, lower, load) and its cache...");
        let (kernel_get_rows, lowered_ptx) = kernel_get_time(&mut raw, &driver).await?;
        BenchResult::Ok((rows, kernel_get_rows, lowered_ptx))
    })?;
    drop(raw);
    // One operation after the other: raw, guest PTX, guest Wasm, tenant
    // Wasm, wasmtime.
    rows.sort_by_key(|r| OPS.iter().position(|op| r.id.starts_with(op.id())));
    rows.extend(kernel_get_rows);

    println!();
    print!("{}", table(&rows));
    let tenant = TenantRecord {
        share,
        slots,
        blocks: tenant_blocks,
        launch_time_ns: tenant_config().quota.launch_time_ns(),
    };
    let record = Record::new(
        &rows,
        &info,
        date,
        command,
        seed,
        jit_cache,
        &lowered_ptx,
        &tenant,
    );
    let path = common::write_record("wasm_kernels.json", &record)?;
    println!("raw numbers: {}", path.display());
    Ok(())
}

// ---------------------------------------------------------------------------
// What is measured.

/// An operation, on every side.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    /// `c = a + b`.
    Vadd,
    /// `y = alpha * x + y`, a multiply then an add.
    Saxpy,
    /// `y = x` after [`LOOP_ITERS`] steps of `x = x * a + b`, each a
    /// multiply then an add.
    Loop,
}

const OPS: [Op; 3] = [Op::Vadd, Op::Saxpy, Op::Loop];

/// The operations wasmtime also runs on one CPU core: not the loop, whose
/// `LOOP_N * LOOP_ITERS` (2^34) dependent steps would take most of a minute
/// there.
const CPU_OPS: [Op; 2] = [Op::Vadd, Op::Saxpy];

impl Op {
    fn id(self) -> &'static str {
        match self {
            Op::Vadd => "vadd",
            Op::Saxpy => "saxpy",
            Op::Loop => "loop",
        }
    }

    fn label(self) -> &'static str {
        match self {
            Op::Vadd => "vector add",
            Op::Saxpy => "SAXPY",
            Op::Loop => "mul-add loop",
        }
    }

    /// Elements of its vectors, one thread each.
    fn elements(self) -> usize {
        match self {
            Op::Vadd | Op::Saxpy => N,
            Op::Loop => LOOP_N,
        }
    }

    fn unit(self) -> &'static str {
        match self {
            Op::Vadd | Op::Saxpy => "GB/s",
            Op::Loop => "Giter/s",
        }
    }

    /// The throughput of `launches` launches (or passes) in `d`: GB/s
    /// moved for the vector add and SAXPY, G iterations/s of `x * a + b`
    /// (a multiply and an add each) for the loop.
    fn throughput(self, launches: usize, d: Duration) -> f64 {
        let per_launch = match self {
            Op::Vadd | Op::Saxpy => BYTES_PER_ELEMENT * N as f64,
            Op::Loop => f64::from(LOOP_ITERS) * LOOP_N as f64,
        };
        per_launch * launches as f64 / d.as_secs_f64() / 1e9
    }

    /// The Wasm kernel's function index in the bench guest.
    fn kernel_index(self) -> u32 {
        match self {
            Op::Vadd => VADD_KERNEL,
            Op::Saxpy => SAXPY_KERNEL,
            Op::Loop => LOOP_KERNEL,
        }
    }

    /// The hand-written PTX and its kernel's name.
    fn ptx(self) -> (&'static str, &'static str) {
        match self {
            Op::Vadd => (VADD_PTX, "vadd"),
            Op::Saxpy => (SAXPY_PTX, "saxpy"),
            Op::Loop => (LOOP_PTX, "mul_add_loop"),
        }
    }
}

/// Who runs an operation on the GPU, in the order of a sample's array.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Method {
    /// The lowered Wasm kernel, launched by the trusted guest over its
    /// memory: one physical block per virtual block.
    GuestWasm,
    /// The hand-written PTX, launched by the trusted guest over its memory.
    GuestPtx,
    /// The hand-written PTX, launched with `cuLaunchKernel` over
    /// `cuMemAlloc` buffers.
    Raw,
    /// The lowered Wasm kernel, launched by the tenant's guest
    /// ([`tenant_config`]) over its own memory: at most its share of the
    /// device's thread slots as physical blocks, the guest's grid run over
    /// them as virtual blocks.
    TenantWasm,
}

const METHODS: [Method; 4] = [
    Method::GuestWasm,
    Method::GuestPtx,
    Method::Raw,
    Method::TenantWasm,
];

/// The tenant whose guest launches the tenant rows' kernels: untrusted,
/// with the default quota (so a Wasm-kernel launch holds at most 50% of the
/// device's thread slots and runs at most 1 s, each thread has 2^24 fuel),
/// except that its guest memory may grow to the runtime's own per-guest cap,
/// so that the memory quota is never what refuses the bench's vectors. Its
/// device-buffer quota stays the default: it allocates no buffer.
fn tenant_config() -> TenantConfig {
    TenantConfig {
        quota: TenantQuota::default().with_guest_memory_bytes(GUEST_MEMORY_LIMIT as u64),
        ..TenantConfig::untrusted("wasm_kernels tenant")
    }
}

/// The device's thread slots, and how many blocks of [`BLOCK`] threads a
/// tenant's Wasm-kernel launch with `share_percent` gets: the physical
/// grid `WasiCudaCtx` launches (docs/tenants.md, "Launch share"), worked
/// out again here for the table and the JSON, since the guest never sees
/// it.
fn tenant_blocks(info: &DeviceInfo, share_percent: u64) -> (u64, u64) {
    let slots =
        u64::from(info.multiprocessor_count) * u64::from(info.max_threads_per_multiprocessor);
    let blocks = slots * share_percent / 100 / u64::from(BLOCK);
    (slots, blocks.max(1))
}

/// Where a guest writes the argument descriptors of `op`'s Wasm kernel, or
/// of its hand PTX: 256 bytes each from [`GUEST_ARGS`].
fn args_at(op: Op, hand_ptx: bool) -> u32 {
    GUEST_ARGS + 256 * (2 * op as u32 + u32::from(hand_ptx))
}

/// `op`'s arguments for a guest's launch over the input vectors at `a` and
/// `b` and the output vector at `out` (the SAXPY and the loop take `a` as x
/// and `out` as y, and do not read `b`). `vector` makes a vector argument
/// from its offset and its length in bytes: an `i32` offset for a Wasm
/// kernel, a guest pointer for hand PTX.
fn guest_args(
    op: Op,
    [a, b, out]: [u32; 3],
    vector: impl Fn(u32, u64) -> ArgDescriptor,
) -> Vec<ArgDescriptor> {
    let len = (op.elements() * 4) as u64;
    let n = ArgDescriptor::i32(op.elements() as i32);
    match op {
        Op::Vadd => vec![vector(a, len), vector(b, len), vector(out, len), n],
        Op::Saxpy => vec![
            ArgDescriptor::f32(ALPHA),
            vector(a, len),
            vector(out, len),
            n,
        ],
        Op::Loop => vec![
            ArgDescriptor::f32(LOOP_A),
            ArgDescriptor::f32(LOOP_B),
            vector(a, len),
            vector(out, len),
            n,
            ArgDescriptor::i32(LOOP_ITERS as i32),
        ],
    }
}

/// `op`'s parameters for a raw launch over the `cuMemAlloc` buffers `a`,
/// `b` and `out`, as [`guest_args`] has them.
fn raw_params(op: Op, [a, b, out]: [sys::CUdeviceptr; 3]) -> Vec<u64> {
    let n = op.elements() as u64;
    match op {
        Op::Vadd => vec![a, b, out, n],
        Op::Saxpy => vec![u64::from(ALPHA.to_bits()), a, out, n],
        Op::Loop => vec![
            u64::from(LOOP_A.to_bits()),
            u64::from(LOOP_B.to_bits()),
            a,
            out,
            n,
            u64::from(LOOP_ITERS),
        ],
    }
}

/// (1)-(3) GPU throughput of every operation, four methods each; the
/// methods take turns within a repetition, the first of them rotating. The
/// vector add runs first; the SAXPY then runs over its output (`y = a + b`,
/// x = a); the loop reads `a` and writes a vector of its own.
async fn gpu_throughput(
    raw: &mut RawCuda,
    runtime: &GuestRuntime<CudaDriver>,
    module: &GuestModule,
    seed: u64,
) -> BenchResult<Vec<Row>> {
    let (bytes, loop_bytes) = (N * 4, LOOP_N * 4);
    let vector_at = |k: usize| GUEST_DATA + (k * bytes) as u32;
    // The trusted guest: a, b, the Wasm kernel's and the hand PTX's c, then
    // their loop outputs.
    let (ga, gb, gc_wasm, gc_ptx) = (vector_at(0), vector_at(1), vector_at(2), vector_at(3));
    let (gy_wasm, gy_ptx) = (vector_at(4), vector_at(4) + loop_bytes as u32);
    let guest_span = 4 * bytes + 2 * loop_bytes;
    // The tenant's guest: a, b, c, the loop output.
    let (ta, tb, tc, ty) = (vector_at(0), vector_at(1), vector_at(2), vector_at(3));
    let tenant_span = 3 * bytes + loop_bytes;

    let tenant_config = tenant_config();
    let share = tenant_config.quota.launch_share_percent();
    let mut guest = Guest::new(runtime, module).await?;
    let mut tenant = Guest::tenant(runtime, module, &tenant_config).await?;
    guest.ensure(GUEST_DATA as usize + guest_span)?;
    tenant.ensure(GUEST_DATA as usize + tenant_span)?;
    let offset = |at: u32, _: u64| ArgDescriptor::i32(at as i32);
    let pointer = |at: u32, len: u64| ArgDescriptor::guest_aligned(at.into(), len, 4);

    // Every raw module is loaded before the buffers borrow `raw`.
    let mut raw_functions = Vec::new();
    for op in OPS {
        let (ptx, name) = op.ptx();
        raw_functions.push(raw.load(ptx, name)?);
    }
    let raw: &RawCuda = raw;
    let (da, db, dc, dy) = (
        raw.alloc(bytes)?,
        raw.alloc(bytes)?,
        raw.alloc(bytes)?,
        raw.alloc(loop_bytes)?,
    );
    let mut staging = vec![0u8; bytes];
    for (vector, (device, g, t)) in [(&da, ga, ta), (&db, gb, tb)].into_iter().enumerate() {
        fill_inputs(seed, vector, &mut staging);
        raw.copy_to(device, &staging)?;
        guest.write(g, &staging)?;
        tenant.write(t, &staging)?;
    }

    let mut rows = Vec::new();
    for (op, raw_function) in OPS.into_iter().zip(raw_functions) {
        let (wasm_out, ptx_out, tenant_out, raw_out) = match op {
            Op::Vadd | Op::Saxpy => (gc_wasm, gc_ptx, tc, &dc),
            Op::Loop => (gy_wasm, gy_ptx, ty, &dy),
        };
        let index = op.kernel_index();
        let (ptx, name) = op.ptx();
        let args = guest_args(op, [ga, gb, wasm_out], offset);
        let wasm = guest.kernel(index, args_at(op, false), &args).await?;
        let args = guest_args(op, [ga, gb, ptx_out], pointer);
        let hand = guest.load(ptx, name, args_at(op, true), &args).await?;
        let args = guest_args(op, [ta, tb, tenant_out], offset);
        let tenant_wasm = tenant.kernel(index, args_at(op, false), &args).await?;
        let params = raw_params(op, [da.ptr, db.ptr, raw_out.ptr]);
        let mut raw_kernel = RawKernel::new(raw_function, &params);
        let grid = op.elements().div_ceil(BLOCK as usize) as u32;

        guest
            .prefetch(GUEST_DATA, guest_span, PrefetchTo::Device)
            .await?;
        tenant
            .prefetch(GUEST_DATA, tenant_span, PrefetchTo::Device)
            .await?;
        // Warm-up: one launch each (a guest's first also waits for its
        // prefetch).
        guest.run(wasm, 1, grid).await?;
        guest.run(hand, 1, grid).await?;
        tenant.run(tenant_wasm, 1, grid).await?;
        // SAFETY: the kernel's buffers hold what its parameters say and
        // outlive it (every launch here is followed by a synchronize before
        // they go).
        unsafe { raw.launch(&mut raw_kernel, grid, BLOCK) }?;
        raw.synchronize()?;

        let mut samples: [Vec<f64>; 4] = Default::default();
        for rep in 0..REPS {
            for turn in 0..METHODS.len() {
                let m = (rep + turn) % METHODS.len();
                let start = Instant::now();
                match METHODS[m] {
                    Method::GuestWasm => guest.run(wasm, LAUNCHES, grid).await?,
                    Method::GuestPtx => guest.run(hand, LAUNCHES, grid).await?,
                    Method::TenantWasm => tenant.run(tenant_wasm, LAUNCHES, grid).await?,
                    Method::Raw => {
                        for _ in 0..LAUNCHES {
                            // SAFETY: as for the warm-up launch.
                            unsafe { raw.launch(&mut raw_kernel, grid, BLOCK) }?;
                        }
                        raw.synchronize()?;
                    }
                }
                samples[m].push(op.throughput(LAUNCHES, start.elapsed()));
            }
        }

        // Check every output (untimed). The guests' outputs (the inputs are
        // made again, not read back) come back to the host in one migration
        // each rather than page fault by page fault.
        let out_bytes = op.elements() * 4;
        guest
            .prefetch(wasm_out, out_bytes, PrefetchTo::Host)
            .await?;
        guest.prefetch(ptx_out, out_bytes, PrefetchTo::Host).await?;
        guest.sync().await?;
        tenant
            .prefetch(tenant_out, out_bytes, PrefetchTo::Host)
            .await?;
        tenant.sync().await?;
        raw.copy_from(&mut staging[..out_bytes], raw_out)?;
        let outputs = [
            ("raw", &staging[..out_bytes]),
            ("guest Wasm kernel", guest.bytes(wasm_out, out_bytes)?),
            ("guest hand PTX", guest.bytes(ptx_out, out_bytes)?),
            ("tenant Wasm kernel", tenant.bytes(tenant_out, out_bytes)?),
        ];
        check_outputs(op, seed, 1 + REPS * LAUNCHES, &outputs)?;

        let [wasm_samples, ptx_samples, raw_samples, tenant_samples] = samples;
        let (id, label, unit) = (op.id(), op.label(), op.unit());
        let raw_id = format!("{id}.raw");
        let ptx_id = format!("{id}.guest_ptx");
        let wasm_id = format!("{id}.guest_wasm");
        let raw_median = median(&raw_samples);
        let ptx_median = median(&ptx_samples);
        let wasm_median = median(&wasm_samples);
        rows.push(Row::new(
            raw_id.clone(),
            format!("{label}: hand PTX, raw, cuMemAlloc buffers"),
            unit,
            raw_samples,
        ));
        rows.push(
            Row::new(
                ptx_id.clone(),
                format!("{label}: hand PTX, guest memory"),
                unit,
                ptx_samples,
            )
            .ratio_to(&raw_id, raw_median),
        );
        let wasm_row = Row::new(
            wasm_id.clone(),
            format!("{label}: Wasm kernel, guest memory"),
            unit,
            wasm_samples,
        )
        .ratio_to(&raw_id, raw_median)
        .ratio_to(&ptx_id, ptx_median);
        // The memory-bound kernels' goal. The loop's row measures what the
        // loop-header check costs a tight loop; no goal is set for that.
        rows.push(match op {
            Op::Vadd | Op::Saxpy => {
                let ratio = wasm_median / raw_median;
                wasm_row.target(">= 0.9x raw", ratio >= 0.9)
            }
            Op::Loop => wasm_row,
        });
        rows.push(
            Row::new(
                format!("{id}.tenant_wasm"),
                format!("{label}: Wasm kernel, tenant, {share}% share"),
                unit,
                tenant_samples,
            )
            .ratio_to(&wasm_id, wasm_median)
            .ratio_to(&raw_id, raw_median),
        );
    }
    Ok(rows)
}

/// (4) The vector add and SAXPY as plain Wasm in wasmtime on this thread:
/// one export call is one pass over the vectors. The guest has wasmtime's
/// own memory and default configuration (guard pages, so no explicit bounds
/// checks), as a plain wasmtime host would run it.
async fn cpu_bandwidth(driver: &CudaDriver, seed: u64, gpu_rows: &[Row]) -> BenchResult<Vec<Row>> {
    let runtime = GuestRuntime::with_host_memory(driver.clone())
        .map_err(wasm_error("building the host-memory runtime"))?;
    let module = runtime
        .compile(GUEST_WAT)
        .map_err(wasm_error("compiling wasm_kernels.wat"))?;
    let mut guest = Guest::new(&runtime, &module).await?;
    let bytes = N * 4;
    let (a, b, c) = (
        GUEST_DATA,
        GUEST_DATA + bytes as u32,
        GUEST_DATA + 2 * bytes as u32,
    );
    guest.ensure(GUEST_DATA as usize + 3 * bytes)?;
    fill_inputs(seed, 0, guest.bytes_mut(a, bytes)?);
    fill_inputs(seed, 1, guest.bytes_mut(b, bytes)?);

    let mut rows = Vec::new();
    for op in CPU_OPS {
        let mut samples = Vec::new();
        for pass in 0..1 + CPU_REPS {
            let elapsed = match op {
                Op::Vadd => guest.vadd_loop(a, b, c).await?,
                // Over the vector add's output, as on the GPU.
                Op::Saxpy => guest.saxpy_loop(a, c).await?,
                Op::Loop => unreachable!("CPU_OPS holds no loop"),
            };
            if pass > 0 {
                samples.push(op.throughput(1, elapsed));
            }
        }
        let outputs = [("wasmtime", guest.bytes(c, bytes)?)];
        check_outputs(op, seed, 1 + CPU_REPS, &outputs)?;
        let gpu_id = format!("{}.guest_wasm", op.id());
        let gpu_median = gpu_rows
            .iter()
            .find(|r| r.id == gpu_id)
            .map_or(f64::NAN, |r| median(&r.samples));
        rows.push(
            Row::new(
                format!("{}.wasmtime", op.id()),
                format!("{}: wasmtime, one CPU core, scalar loop", op.label()),
                op.unit(),
                samples,
            )
            .speedup_of(&gpu_id, gpu_median),
        );
    }
    Ok(rows)
}

/// Samples of one operation's `kernel_get` measurement.
#[derive(Default)]
struct KernelGetSamples {
    first_ms: Vec<f64>,
    warm_jit_ms: Vec<f64>,
    cached_us: Vec<f64>,
    empty_call_us: Vec<f64>,
    first_touch_us: Vec<f64>,
    translate_us: Vec<f64>,
    lower_us: Vec<f64>,
    jit_lowered_ms: Vec<f64>,
    jit_hand_ms: Vec<f64>,
}

/// (5) `kernel_get`, first and cached: each repetition builds a fresh
/// runtime (its kernel cache starts empty) and times the guest's first
/// `kernel_get` of the function, then one from a second store of the same
/// runtime, and, for scale, an empty export call and the first host write
/// to that store's memory (each store's first touch, kept out of the
/// `kernel_get` times). Then, by hand and outside the guest, the first
/// one's steps: translation, lowering, and loading the lowered PTX (and,
/// for scale, the hand-written PTX). Returns the rows and each kernel's
/// lowered PTX.
async fn kernel_get_time(
    raw: &mut RawCuda,
    driver: &CudaDriver,
) -> BenchResult<(Vec<Row>, Vec<(Op, String)>)> {
    let lowerer = ptx_target(driver.device()).map_err(|e| format!("the PTX target: {e}"))?;
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    let mut rows = Vec::new();
    let mut lowered_ptx = Vec::new();
    // The first `kernel_get`s compile (no JIT cache); the warm ones load
    // from a JIT cache of their own, filled by the warm-up repetition.
    let cold = driver.clone().with_jit_cache(None);
    let jit_dir = std::env::temp_dir().join(format!("tensorwasm-bench-jit-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&jit_dir);
    let warm = driver.clone().with_jit_cache(Some(JitCache::at(&jit_dir)));
    for op in OPS {
        let index = op.kernel_index();
        let mut s = KernelGetSamples::default();
        for rep in 0..KERNEL_GET_WARMUP + KERNEL_GET_REPS {
            let runtime = GuestRuntime::new(cold.clone(), SMALL_GUEST_MEMORY_LIMIT)
                .map_err(wasm_error("building a guest runtime"))?;
            let module = runtime
                .compile(GUEST_WAT)
                .map_err(wasm_error("compiling wasm_kernels.wat"))?;
            // Each store's first call sets up its fiber stack, and the first
            // touch of its memory (managed: a page fault the driver serves)
            // is the store's cost, not kernel_get's: neither is in the
            // kernel_get times.
            let mut first = Guest::new(&runtime, &module).await?;
            first.nop().await?;
            first.touch_out_slots()?;
            let first_time = first.get_kernel_timed(index).await?;
            let mut second = Guest::new(&runtime, &module).await?;
            second.nop().await?;
            let first_touch_time = second.touch_out_slots()?;
            let empty_call_time = second.nop().await?;
            let cached_time = second.get_kernel_timed(index).await?;
            let lowerings = runtime.kernel_cache().lowerings();
            if lowerings != 1 {
                return Err(format!(
                    "two kernel_get calls of function {index} in one runtime lowered it \
                     {lowerings} times, not once"
                ));
            }

            let warm_runtime = GuestRuntime::new(warm.clone(), SMALL_GUEST_MEMORY_LIMIT)
                .map_err(wasm_error("building a guest runtime"))?;
            let warm_module = warm_runtime
                .compile(GUEST_WAT)
                .map_err(wasm_error("compiling wasm_kernels.wat"))?;
            let mut fresh = Guest::new(&warm_runtime, &warm_module).await?;
            fresh.nop().await?;
            fresh.touch_out_slots()?;
            let warm_jit_time = fresh.get_kernel_timed(index).await?;

            let start = Instant::now();
            let translated = translate_kernel(module.source().wasm(), index)
                .map_err(|e| format!("translating function {index}: {e}"))?;
            let translate_time = start.elapsed();
            let start = Instant::now();
            let ptx = lowerer
                .lower(&translated.name, &translated.function, translated.abi)
                .map_err(|e| format!("lowering function {index}: {e}"))?;
            let lower_time = start.elapsed();
            let start = Instant::now();
            raw.load(&ptx, &translated.name)?;
            let jit_lowered_time = start.elapsed();
            let (hand_ptx, hand_name) = op.ptx();
            let start = Instant::now();
            raw.load(hand_ptx, hand_name)?;
            let jit_hand_time = start.elapsed();

            if rep == 0 {
                lowered_ptx.push((op, ptx));
            }
            if rep >= KERNEL_GET_WARMUP {
                s.first_ms.push(ms(first_time));
                s.warm_jit_ms.push(ms(warm_jit_time));
                s.cached_us.push(us(cached_time));
                s.empty_call_us.push(us(empty_call_time));
                s.first_touch_us.push(us(first_touch_time));
                s.translate_us.push(us(translate_time));
                s.lower_us.push(us(lower_time));
                s.jit_lowered_ms.push(ms(jit_lowered_time));
                s.jit_hand_ms.push(ms(jit_hand_time));
            }
        }
        let (id, label) = (op.id(), op.label());
        let row = |what: &str, text: &str, unit, samples| {
            Row::new(
                format!("kernel_get.{id}.{what}"),
                format!("kernel_get {label}: {text}"),
                unit,
                samples,
            )
        };
        rows.extend([
            row("first", "first (translate, lower, JIT)", "ms", s.first_ms),
            {
                let met = median(&s.warm_jit_ms) <= 2.0;
                row(
                    "first_warm_jit",
                    "first in a fresh runtime, JIT cache warm",
                    "ms",
                    s.warm_jit_ms,
                )
                .target("<= 2 ms", met)
            },
            row("cached", "cached, from another store", "us", s.cached_us),
            row(
                "empty_call",
                "call_async of an empty export there",
                "us",
                s.empty_call_us,
            ),
            row(
                "first_touch",
                "first host write to that store's memory",
                "us",
                s.first_touch_us,
            ),
            row("translate", "by hand: translate", "us", s.translate_us),
            row("lower", "by hand: lower to PTX", "us", s.lower_us),
            row(
                "jit_lowered",
                "by hand: load lowered PTX",
                "ms",
                s.jit_lowered_ms,
            ),
            row(
                "jit_hand",
                "by hand: load hand-written PTX",
                "ms",
                s.jit_hand_ms,
            ),
        ]);
    }
    let _ = std::fs::remove_dir_all(&jit_dir);
    Ok((rows, lowered_ptx))
}

// ---------------------------------------------------------------------------
// Inputs and checks.

/// The SplitMix64 finaliser.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// SplitMix64's increment.
const GOLDEN_GAMMA: u64 = 0x9e37_79b9_7f4a_7c15;

/// Element `i` of input vector `vector` (0: a, also x; 1: b): an edge value
/// at the start, then random floats in [1, 2) (never zero), the
/// `vector * N + i`-th output of SplitMix64 from `seed`, so any element can
/// be made again without the ones before it.
fn input(seed: u64, vector: usize, i: usize) -> f32 {
    if let Some(&edge) = EDGE_VALUES.get(i) {
        return edge;
    }
    let step = (vector * N + i) as u64 + 1;
    let z = mix(seed.wrapping_add(step.wrapping_mul(GOLDEN_GAMMA)));
    f32::from_bits(0x3f80_0000 | (z >> 41) as u32)
}

/// Writes input vector `vector` as little-endian floats.
fn fill_inputs(seed: u64, vector: usize, out: &mut [u8]) {
    for (i, chunk) in out.chunks_exact_mut(4).enumerate() {
        chunk.copy_from_slice(&input(seed, vector, i).to_le_bytes());
    }
}

fn f32_at(bytes: &[u8], i: usize) -> f32 {
    let at = 4 * i;
    f32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
}

/// Elements `start..start + want.len()` of `op`'s output, computed in f32
/// on the CPU: `a + b` for the vector add; for the SAXPY (which runs over
/// the vector add's output), `applications` steps of `y = alpha * x + y`
/// from `y = a + b`; for the loop, [`LOOP_ITERS`] steps of `x = x * a + b`
/// from `x = a` (whatever `applications`: every launch starts again from
/// `a`). Each step is a multiply then an add (Rust never contracts them
/// into an fma). `x` is scratch of the same length.
fn expected(op: Op, seed: u64, applications: usize, start: usize, want: &mut [f32], x: &mut [f32]) {
    if op == Op::Loop {
        for (j, w) in want.iter_mut().enumerate() {
            *w = input(seed, 0, start + j);
        }
        // Step by step over the whole chunk, so the compiler can run the
        // elements' independent chains side by side.
        for _ in 0..LOOP_ITERS {
            for w in want.iter_mut() {
                let product = *w * LOOP_A;
                *w = product + LOOP_B;
            }
        }
        return;
    }
    for (j, (w, x)) in want.iter_mut().zip(x.iter_mut()).enumerate() {
        let (a, b) = (input(seed, 0, start + j), input(seed, 1, start + j));
        *w = a + b;
        *x = a;
    }
    if op == Op::Saxpy {
        for _ in 0..applications {
            for (y, &x) in want.iter_mut().zip(x.iter()) {
                let product = ALPHA * x;
                *y += product;
            }
        }
    }
}

/// The first element found wrong, and in which output.
struct Wrong {
    output: usize,
    element: usize,
    want: f32,
    got: f32,
}

/// Elements made at once per thread by [`check_outputs`].
const CHECK_CHUNK: usize = 16 << 10;

/// Checks every element of each output (`op.elements()` little-endian
/// floats) against [`expected`], bit for bit, on all cores.
fn check_outputs(
    op: Op,
    seed: u64,
    applications: usize,
    outputs: &[(&str, &[u8])],
) -> BenchResult<()> {
    let n = op.elements();
    if let Some((side, out)) = outputs.iter().find(|(_, out)| out.len() != n * 4) {
        return Err(format!(
            "{side}: {} bytes to check, not {}",
            out.len(),
            n * 4
        ));
    }
    let threads = std::thread::available_parallelism().map_or(1, NonZero::get);
    let per_thread = n.div_ceil(threads);
    let found: Vec<Option<Wrong>> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                scope.spawn(move || {
                    let (mut at, end) = (t * per_thread, ((t + 1) * per_thread).min(n));
                    let (mut want, mut x) = (vec![0f32; CHECK_CHUNK], vec![0f32; CHECK_CHUNK]);
                    while at < end {
                        let len = CHECK_CHUNK.min(end - at);
                        let want = &mut want[..len];
                        expected(op, seed, applications, at, want, &mut x[..len]);
                        for (output, (_, out)) in outputs.iter().enumerate() {
                            for (j, w) in want.iter().enumerate() {
                                let got = f32_at(out, at + j);
                                if got.to_bits() != w.to_bits() {
                                    let (want, element) = (*w, at + j);
                                    return Some(Wrong {
                                        output,
                                        element,
                                        want,
                                        got,
                                    });
                                }
                            }
                        }
                        at += len;
                    }
                    None
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| {
                w.join()
                    .map_err(|_| "a checking thread panicked".to_string())
            })
            .collect::<BenchResult<_>>()
    })?;
    match found.into_iter().flatten().min_by_key(|w| w.element) {
        None => Ok(()),
        Some(w) => {
            let (x, y) = (input(seed, 0, w.element), input(seed, 1, w.element));
            let inputs = match op {
                Op::Vadd => format!("inputs {x:e} and {y:e}"),
                Op::Saxpy => format!("inputs {x:e} and {y:e}, {applications} steps"),
                Op::Loop => format!("input {x:e}, {LOOP_ITERS} steps"),
            };
            Err(format!(
                "{} {} is wrong at element {} ({inputs}): want {:e} ({:#010x}), got {:e} \
                 ({:#010x})",
                outputs[w.output].0,
                op.label(),
                w.element,
                w.want,
                w.want.to_bits(),
                w.got,
                w.got.to_bits(),
            ))
        }
    }
}

// ---------------------------------------------------------------------------
// The raw side.

/// Device 0's primary context and one stream, driven through
/// `tensorwasm_cuda::sys` with no layer in between.
struct RawCuda {
    lib: sys::CudaLib,
    device: sys::CUdevice,
    ctx: sys::CUcontext,
    stream: sys::CUstream,
    modules: Vec<sys::CUmodule>,
}

/// A kernel of the raw side and its parameters, packed as `cuLaunchKernel`
/// reads them: one 8-byte slot per parameter, and an array of pointers to
/// the slots.
struct RawKernel {
    function: sys::CUfunction,
    _slots: Box<[u64]>,
    ptrs: Box<[*mut c_void]>,
}

impl RawKernel {
    fn new(function: sys::CUfunction, params: &[u64]) -> RawKernel {
        let mut slots: Box<[u64]> = params.into();
        // The slots live on the heap, so the pointers stay valid when the
        // box moves into the struct. A 4-byte parameter is read from the low
        // (first, little-endian) half of its slot.
        let ptrs = slots
            .iter_mut()
            .map(|s| ptr::from_mut(s).cast::<c_void>())
            .collect();
        RawKernel {
            function,
            _slots: slots,
            ptrs,
        }
    }
}

/// A `cuMemAlloc` buffer, freed on drop.
struct RawBuffer<'a> {
    raw: &'a RawCuda,
    ptr: sys::CUdeviceptr,
    bytes: usize,
}

impl Drop for RawBuffer<'_> {
    fn drop(&mut self) {
        // SAFETY: allocated by `RawCuda::alloc`, freed once; the stream was
        // synchronized after the last kernel that used it.
        let _ = unsafe { self.raw.lib.cuMemFree_v2(self.ptr) };
    }
}

impl RawCuda {
    /// Loads the driver library as `tensorwasm_cuda` does, retains device 0's
    /// primary context (the one `CudaDriver::new(0)` uses), makes it current
    /// and creates a stream (blocking, like the guest's).
    fn open() -> BenchResult<RawCuda> {
        let library = std::env::var(LIBCUDA_ENV).unwrap_or_else(|_| DEFAULT_LIBCUDA.to_string());
        // SAFETY: loading libcuda runs its initialisers, which have no
        // preconditions; symbols are resolved into Results (checked below).
        let lib = unsafe { sys::CudaLib::new(&library) }
            .map_err(|e| format!("loading {library}: {e}"))?;
        let symbols = [
            ("cuGetErrorName", lib.cuGetErrorName.is_ok()),
            ("cuInit", lib.cuInit.is_ok()),
            ("cuDeviceGet", lib.cuDeviceGet.is_ok()),
            (
                "cuDevicePrimaryCtxRetain",
                lib.cuDevicePrimaryCtxRetain.is_ok(),
            ),
            (
                "cuDevicePrimaryCtxRelease_v2",
                lib.cuDevicePrimaryCtxRelease_v2.is_ok(),
            ),
            ("cuCtxSetCurrent", lib.cuCtxSetCurrent.is_ok()),
            ("cuModuleLoadDataEx", lib.cuModuleLoadDataEx.is_ok()),
            ("cuModuleGetFunction", lib.cuModuleGetFunction.is_ok()),
            ("cuModuleUnload", lib.cuModuleUnload.is_ok()),
            ("cuStreamCreate", lib.cuStreamCreate.is_ok()),
            ("cuStreamSynchronize", lib.cuStreamSynchronize.is_ok()),
            ("cuStreamDestroy_v2", lib.cuStreamDestroy_v2.is_ok()),
            ("cuLaunchKernel", lib.cuLaunchKernel.is_ok()),
            ("cuMemAlloc_v2", lib.cuMemAlloc_v2.is_ok()),
            ("cuMemFree_v2", lib.cuMemFree_v2.is_ok()),
            ("cuMemcpyHtoD_v2", lib.cuMemcpyHtoD_v2.is_ok()),
            ("cuMemcpyDtoH_v2", lib.cuMemcpyDtoH_v2.is_ok()),
        ];
        let missing: Vec<&str> = symbols
            .iter()
            .filter(|(_, ok)| !ok)
            .map(|(name, _)| *name)
            .collect();
        if !missing.is_empty() {
            return Err(format!("{library} lacks {}", missing.join(", ")));
        }
        let mut raw = RawCuda {
            lib,
            device: 0,
            ctx: ptr::null_mut(),
            stream: ptr::null_mut(),
            modules: Vec::new(),
        };
        // SAFETY: cuInit takes only its flags, which must be 0.
        raw.check("cuInit", unsafe { raw.lib.cuInit(0) })?;
        let mut device = 0;
        // SAFETY: the out-pointer is a live local.
        raw.check("cuDeviceGet", unsafe {
            raw.lib.cuDeviceGet(&mut device, 0)
        })?;
        raw.device = device;
        let mut ctx = ptr::null_mut();
        // SAFETY: the out-pointer is a live local; `device` came from the driver.
        let status = unsafe { raw.lib.cuDevicePrimaryCtxRetain(&mut ctx, device) };
        raw.check("cuDevicePrimaryCtxRetain", status)?;
        raw.ctx = ctx;
        // SAFETY: `ctx` is retained until `raw` drops.
        raw.check("cuCtxSetCurrent", unsafe { raw.lib.cuCtxSetCurrent(ctx) })?;
        let mut stream = ptr::null_mut();
        let flags = sys::CUstream_flags_enum::CU_STREAM_DEFAULT.0;
        // SAFETY: the out-pointer is a live local; the context is current.
        let status = unsafe { raw.lib.cuStreamCreate(&mut stream, flags) };
        raw.check("cuStreamCreate", status)?;
        raw.stream = stream;
        Ok(raw)
    }

    /// `Ok` for `CUDA_SUCCESS`, else the call's name and the error's.
    fn check(&self, call: &str, status: sys::CUresult) -> BenchResult<()> {
        if status == sys::CUresult::CUDA_SUCCESS {
            return Ok(());
        }
        let mut name: *const c_char = ptr::null();
        // SAFETY: cuGetErrorName takes any code and writes a pointer to a
        // static string, or fails and leaves `name` null.
        let named = unsafe { self.lib.cuGetErrorName(status, &mut name) };
        let name = if named == sys::CUresult::CUDA_SUCCESS && !name.is_null() {
            // SAFETY: the driver's static, NUL-terminated error name.
            unsafe { CStr::from_ptr(name) }
                .to_string_lossy()
                .into_owned()
        } else {
            "an unknown error".to_string()
        };
        Err(format!("{call} failed: {name} ({})", status.0))
    }

    /// Loads PTX text (the driver JIT-compiles it) and looks up one kernel
    /// (`cuModuleLoadDataEx` without JIT options: `sys.rs` has no
    /// `cuModuleLoadData`, and this is the same call with zero options).
    fn load(&mut self, ptx: &str, name: &str) -> BenchResult<sys::CUfunction> {
        let image = CString::new(ptx).map_err(|e| format!("PTX of `{name}`: {e}"))?;
        let mut module = ptr::null_mut();
        // SAFETY: `image` is NUL-terminated PTX text that outlives the call;
        // no options are passed (count 0, null arrays).
        let status = unsafe {
            self.lib.cuModuleLoadDataEx(
                &mut module,
                image.as_ptr().cast(),
                0,
                ptr::null_mut(),
                ptr::null_mut(),
            )
        };
        self.check("cuModuleLoadDataEx", status)?;
        self.modules.push(module);
        let cname = CString::new(name).map_err(|e| format!("kernel name {name:?}: {e}"))?;
        let mut function = ptr::null_mut();
        // SAFETY: `module` was loaded above; `cname` is NUL-terminated.
        let status = unsafe {
            self.lib
                .cuModuleGetFunction(&mut function, module, cname.as_ptr())
        };
        self.check("cuModuleGetFunction", status)?;
        Ok(function)
    }

    /// Queues `kernel` on the stream, 1-D.
    ///
    /// # Safety
    /// What the kernel's parameters point at must stay allocated until it
    /// has finished.
    #[inline]
    unsafe fn launch(&self, kernel: &mut RawKernel, grid: u32, block: u32) -> BenchResult<()> {
        // SAFETY: the stream and function are live; `ptrs` holds one
        // pointer per kernel parameter to a slot that outlives the call (the
        // driver copies them); what the kernel touches is the caller's.
        let status = unsafe {
            self.lib.cuLaunchKernel(
                kernel.function,
                grid,
                1,
                1,
                block,
                1,
                1,
                0,
                self.stream,
                kernel.ptrs.as_mut_ptr(),
                ptr::null_mut(),
            )
        };
        self.check("cuLaunchKernel", status)
    }

    /// Blocks until the stream is idle.
    #[inline]
    fn synchronize(&self) -> BenchResult<()> {
        // SAFETY: the stream is live.
        let status = unsafe { self.lib.cuStreamSynchronize(self.stream) };
        self.check("cuStreamSynchronize", status)
    }

    fn alloc(&self, bytes: usize) -> BenchResult<RawBuffer<'_>> {
        let mut dptr = 0;
        // SAFETY: the out-pointer is a live local; the context is current.
        let status = unsafe { self.lib.cuMemAlloc_v2(&mut dptr, bytes) };
        self.check("cuMemAlloc_v2", status)?;
        Ok(RawBuffer {
            raw: self,
            ptr: dptr,
            bytes,
        })
    }

    fn copy_to(&self, dst: &RawBuffer<'_>, src: &[u8]) -> BenchResult<()> {
        if src.len() != dst.bytes {
            return Err(format!("copying {} bytes into {}", src.len(), dst.bytes));
        }
        // SAFETY: `dst` is a live allocation of `src.len()` bytes; `src` is
        // readable for that long.
        let status = unsafe {
            self.lib
                .cuMemcpyHtoD_v2(dst.ptr, src.as_ptr().cast(), src.len())
        };
        self.check("cuMemcpyHtoD_v2", status)
    }

    fn copy_from(&self, dst: &mut [u8], src: &RawBuffer<'_>) -> BenchResult<()> {
        if dst.len() != src.bytes {
            return Err(format!("copying {} bytes out of {}", src.bytes, dst.len()));
        }
        // SAFETY: `src` is a live allocation of `dst.len()` bytes; `dst` is
        // writable for that long.
        let status = unsafe {
            self.lib
                .cuMemcpyDtoH_v2(dst.as_mut_ptr().cast(), src.ptr, dst.len())
        };
        self.check("cuMemcpyDtoH_v2", status)
    }
}

impl Drop for RawCuda {
    fn drop(&mut self) {
        if self.ctx.is_null() {
            return;
        }
        // SAFETY: `ctx` is still retained (released last, below).
        let _ = unsafe { self.lib.cuCtxSetCurrent(self.ctx) };
        if !self.stream.is_null() {
            // Nothing may still run when the modules go.
            let _ = self.synchronize();
            // SAFETY: created in `open`, destroyed once, idle.
            let _ = unsafe { self.lib.cuStreamDestroy_v2(self.stream) };
        }
        for module in self.modules.drain(..) {
            // SAFETY: loaded by `load`, unloaded once; no kernel is running.
            let _ = unsafe { self.lib.cuModuleUnload(module) };
        }
        // SAFETY: retained once in `open`, released once.
        let _ = unsafe { self.lib.cuDevicePrimaryCtxRelease_v2(self.device) };
    }
}

// ---------------------------------------------------------------------------
// The guest side.

/// A kernel of the guest side: its function handle and where its argument
/// descriptors are in guest memory.
#[derive(Clone, Copy)]
struct GuestKernel {
    function: i64,
    args_ptr: u32,
    args_count: u32,
}

/// Where the guest's `prefetch` sends memory.
#[derive(Clone, Copy)]
enum PrefetchTo {
    Device = 0,
    Host = 1,
}

/// One instance of `wasm_kernels.wat` and its exports.
struct Guest {
    store: Store<GuestState<CudaDriver>>,
    memory: Memory,
    nop: TypedFunc<(), ()>,
    get_kernel: TypedFunc<i32, i64>,
    load_function: TypedFunc<(i32, i32, i32, i32), i64>,
    launch_many: TypedFunc<(i64, i32, i32, i32, i32, i32), i32>,
    sync: TypedFunc<(), i32>,
    prefetch: TypedFunc<(i32, i32, i32), i32>,
    vadd_loop: TypedFunc<(i32, i32, i32, i32), ()>,
    saxpy_loop: TypedFunc<(f32, i32, i32, i32), ()>,
}

fn wasm_error(what: &str) -> impl FnOnce(wasmtime::Error) -> String + '_ {
    move |e| format!("{what}: {e:#}")
}

fn guest_i32(value: usize, what: &str) -> BenchResult<i32> {
    i32::try_from(value).map_err(|_| format!("{what} {value} does not fit an i32"))
}

impl Guest {
    /// A trusted guest: no quota, one physical block per virtual block.
    async fn new(runtime: &GuestRuntime<CudaDriver>, module: &GuestModule) -> BenchResult<Guest> {
        let store = runtime.store().map_err(wasm_error("creating the store"))?;
        Guest::instantiate(runtime, module, store).await
    }

    /// A guest in the context of the tenant `config`, with a ledger of its
    /// own, as `Tenant::new` makes it.
    async fn tenant(
        runtime: &GuestRuntime<CudaDriver>,
        module: &GuestModule,
        config: &TenantConfig,
    ) -> BenchResult<Guest> {
        let ledger = Arc::new(QuotaLedger::new(config.quota));
        let store = runtime
            .tenant_store(config, ledger)
            .map_err(wasm_error("creating the tenant's store"))?;
        Guest::instantiate(runtime, module, store).await
    }

    async fn instantiate(
        runtime: &GuestRuntime<CudaDriver>,
        module: &GuestModule,
        mut store: Store<GuestState<CudaDriver>>,
    ) -> BenchResult<Guest> {
        let instance = runtime
            .instantiate(&mut store, module)
            .await
            .map_err(wasm_error("instantiating wasm_kernels.wat"))?;
        let memory = instance
            .get_memory(&mut store, "memory")
            .ok_or("the guest exports no memory")?;
        macro_rules! export {
            ($name:literal) => {
                instance
                    .get_typed_func(&mut store, $name)
                    .map_err(wasm_error(concat!("guest export `", $name, "`")))?
            };
        }
        Ok(Guest {
            nop: export!("nop"),
            get_kernel: export!("get_kernel"),
            load_function: export!("load_function"),
            launch_many: export!("launch_many"),
            sync: export!("sync"),
            prefetch: export!("prefetch"),
            vadd_loop: export!("vadd_loop"),
            saxpy_loop: export!("saxpy_loop"),
            store,
            memory,
        })
    }

    /// An export's result: `Ok` for errno 0, else the guest's last error.
    fn check(&self, call: &str, result: wasmtime::Result<i32>) -> BenchResult<()> {
        match result {
            Ok(0) => Ok(()),
            Ok(errno) => Err(format!(
                "guest `{call}` returned errno {errno}: {}",
                self.store.data().cuda.last_error()
            )),
            Err(e) => Err(format!("guest `{call}` trapped: {e:#}")),
        }
    }

    /// A handle-returning export's result: the handle, else the guest's
    /// last error.
    fn handle(&self, call: &str, result: wasmtime::Result<i64>) -> BenchResult<i64> {
        match result {
            Ok(handle) if handle >= 0 => Ok(handle),
            Ok(errno) => Err(format!(
                "guest `{call}` returned errno {}: {}",
                -errno,
                self.store.data().cuda.last_error()
            )),
            Err(e) => Err(format!("guest `{call}` trapped: {e:#}")),
        }
    }

    fn write(&mut self, at: u32, bytes: &[u8]) -> BenchResult<()> {
        self.memory
            .write(&mut self.store, at as usize, bytes)
            .map_err(|e| format!("writing {} bytes of guest memory at {at}: {e}", bytes.len()))
    }

    /// `len` bytes of guest memory at `at`.
    fn bytes(&self, at: u32, len: usize) -> BenchResult<&[u8]> {
        self.memory
            .data(&self.store)
            .get(at as usize..at as usize + len)
            .ok_or_else(|| format!("guest memory has no {len} bytes at {at}"))
    }

    /// `len` bytes of guest memory at `at`, writable.
    fn bytes_mut(&mut self, at: u32, len: usize) -> BenchResult<&mut [u8]> {
        self.memory
            .data_mut(&mut self.store)
            .get_mut(at as usize..at as usize + len)
            .ok_or_else(|| format!("guest memory has no {len} bytes at {at}"))
    }

    /// Grows the guest's memory to at least `bytes`.
    fn ensure(&mut self, bytes: usize) -> BenchResult<()> {
        let have = self.memory.data_size(&self.store);
        if bytes > have {
            let pages = (bytes - have).div_ceil(WASM_PAGE) as u64;
            self.memory
                .grow(&mut self.store, pages)
                .map_err(wasm_error("growing guest memory"))?;
        }
        Ok(())
    }

    /// The Wasm kernel of the guest's function `index` (`kernel_get`), with
    /// `args` for it written at `args_ptr`.
    async fn kernel(
        &mut self,
        index: u32,
        args_ptr: u32,
        args: &[ArgDescriptor],
    ) -> BenchResult<GuestKernel> {
        self.write(args_ptr, &encode_args(args))?;
        let result = self
            .get_kernel
            .call_async(&mut self.store, index as i32)
            .await;
        Ok(GuestKernel {
            function: self.handle("get_kernel", result)?,
            args_ptr,
            args_count: args.len() as u32,
        })
    }

    /// Writes zeros over the out-slots (the first 64 bytes), the first
    /// touch of a new store's memory; the write's time.
    fn touch_out_slots(&mut self) -> BenchResult<Duration> {
        let start = Instant::now();
        self.write(0, &[0; 64])?;
        Ok(start.elapsed())
    }

    /// One call of the `nop` export; the call's time.
    async fn nop(&mut self) -> BenchResult<Duration> {
        let start = Instant::now();
        let result = self.nop.call_async(&mut self.store, ()).await;
        let elapsed = start.elapsed();
        result.map_err(wasm_error("guest `nop`"))?;
        Ok(elapsed)
    }

    /// One `get_kernel` export call of function `index` (the import and
    /// nothing else); the call's time.
    async fn get_kernel_timed(&mut self, index: u32) -> BenchResult<Duration> {
        let start = Instant::now();
        let result = self
            .get_kernel
            .call_async(&mut self.store, index as i32)
            .await;
        let elapsed = start.elapsed();
        self.handle("get_kernel", result)?;
        Ok(elapsed)
    }

    /// Loads `ptx` through the guest, looks up `name`, and writes `args` for
    /// it at `args_ptr`.
    async fn load(
        &mut self,
        ptx: &str,
        name: &str,
        args_ptr: u32,
        args: &[ArgDescriptor],
    ) -> BenchResult<GuestKernel> {
        self.write(GUEST_PTX, ptx.as_bytes())?;
        self.write(GUEST_NAME, name.as_bytes())?;
        self.write(args_ptr, &encode_args(args))?;
        let params = (
            GUEST_PTX as i32,
            guest_i32(ptx.len(), "PTX length")?,
            GUEST_NAME as i32,
            guest_i32(name.len(), "name length")?,
        );
        let result = self.load_function.call_async(&mut self.store, params).await;
        Ok(GuestKernel {
            function: self.handle("load_function", result)?,
            args_ptr,
            args_count: args.len() as u32,
        })
    }

    /// `k` launches of `kernel` on `grid` blocks of [`BLOCK`] threads, in
    /// one export call, none waited for.
    async fn launch_many(&mut self, kernel: GuestKernel, k: usize, grid: u32) -> BenchResult<()> {
        let params = (
            kernel.function,
            guest_i32(k, "launch count")?,
            grid as i32,
            BLOCK as i32,
            kernel.args_ptr as i32,
            kernel.args_count as i32,
        );
        let result = self.launch_many.call_async(&mut self.store, params).await;
        self.check("launch_many", result)
    }

    /// `k` launches of `kernel` on `grid` blocks, then the guest's `sync`.
    async fn run(&mut self, kernel: GuestKernel, k: usize, grid: u32) -> BenchResult<()> {
        self.launch_many(kernel, k, grid).await?;
        self.sync().await
    }

    async fn sync(&mut self) -> BenchResult<()> {
        let result = self.sync.call_async(&mut self.store, ()).await;
        self.check("sync", result)
    }

    async fn prefetch(&mut self, at: u32, len: usize, to: PrefetchTo) -> BenchResult<()> {
        let params = (at as i32, guest_i32(len, "prefetch length")?, to as i32);
        let result = self.prefetch.call_async(&mut self.store, params).await;
        self.check("prefetch", result)
    }

    /// One pass of the CPU vector add, `c = a + b`; the call's time.
    async fn vadd_loop(&mut self, a: u32, b: u32, c: u32) -> BenchResult<Duration> {
        let params = (a as i32, b as i32, c as i32, N as i32);
        let start = Instant::now();
        let result = self.vadd_loop.call_async(&mut self.store, params).await;
        let elapsed = start.elapsed();
        result.map_err(wasm_error("guest `vadd_loop`"))?;
        Ok(elapsed)
    }

    /// One pass of the CPU SAXPY, `y = alpha * x + y`; the call's time.
    async fn saxpy_loop(&mut self, x: u32, y: u32) -> BenchResult<Duration> {
        let params = (ALPHA, x as i32, y as i32, N as i32);
        let start = Instant::now();
        let result = self.saxpy_loop.call_async(&mut self.store, params).await;
        let elapsed = start.elapsed();
        result.map_err(wasm_error("guest `saxpy_loop`"))?;
        Ok(elapsed)
    }
}

// ---------------------------------------------------------------------------
// Statistics, rows, the table and the JSON record.

fn sorted(samples: &[f64]) -> Vec<f64> {
    let mut s = samples.to_vec();
    s.sort_by(f64::total_cmp);
    s
}

fn median(samples: &[f64]) -> f64 {
    let s = sorted(samples);
    match s.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => s[n / 2],
        n => (s[n / 2 - 1] + s[n / 2]) / 2.0,
    }
}

fn min(samples: &[f64]) -> f64 {
    sorted(samples).first().copied().unwrap_or(f64::NAN)
}

fn max(samples: &[f64]) -> f64 {
    sorted(samples).last().copied().unwrap_or(f64::NAN)
}

/// One row's median over another's: `of` over `over` (row ids).
struct Ratio {
    of: String,
    over: String,
    value: f64,
}

/// One measurement: its samples and what is reported about them. The table
/// shows the first ratio; the JSON has them all.
struct Row {
    id: String,
    name: String,
    unit: &'static str,
    samples: Vec<f64>,
    ratios: Vec<Ratio>,
    targets: Vec<Target>,
}

impl Row {
    fn new(
        id: impl Into<String>,
        name: impl Into<String>,
        unit: &'static str,
        samples: Vec<f64>,
    ) -> Row {
        Row {
            id: id.into(),
            name: name.into(),
            unit,
            samples,
            ratios: Vec::new(),
            targets: Vec::new(),
        }
    }

    /// This row's median over row `over`'s.
    fn ratio_to(mut self, over: &str, over_median: f64) -> Row {
        self.ratios.push(Ratio {
            of: self.id.clone(),
            over: over.to_string(),
            value: median(&self.samples) / over_median,
        });
        self
    }

    /// Row `of`'s median over this row's: how many times faster `of` is.
    fn speedup_of(mut self, of: &str, of_median: f64) -> Row {
        self.ratios.push(Ratio {
            of: of.to_string(),
            over: self.id.clone(),
            value: of_median / median(&self.samples),
        });
        self
    }

    fn target(mut self, text: &'static str, met: bool) -> Row {
        self.targets.push(Target { text, met });
        self
    }
}

fn table(rows: &[Row]) -> String {
    let name_width = rows.iter().map(|r| r.name.len()).max().unwrap_or(0);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<name_width$}  {:>16}  {:>16}  {:>16}  {:>8}  target (met?)",
        "measurement", "median", "min", "max", "ratio"
    );
    for r in rows {
        let value = |x: f64| format!("{x:.2} {}", r.unit);
        let ratio = r
            .ratios
            .first()
            .map_or("-".into(), |q| format!("{:.2}x", q.value));
        let targets: Vec<String> = r
            .targets
            .iter()
            .map(|t| format!("{} ({})", t.text, if t.met { "met" } else { "MISSED" }))
            .collect();
        let line = format!(
            "{:<name_width$}  {:>16}  {:>16}  {:>16}  {ratio:>8}  {}",
            r.name,
            value(median(&r.samples)),
            value(min(&r.samples)),
            value(max(&r.samples)),
            targets.join(", ")
        );
        let _ = writeln!(out, "{}", line.trim_end());
    }
    out.push_str(
        "ratio: GPU rows, this row's median over the raw row's (the JSON also has the Wasm \
         kernel over the guest's hand PTX);\n       tenant rows, over the trusted guest's Wasm \
         kernel row (what the launch share costs);\n       wasmtime rows, the guest Wasm \
         kernel's median over this row's (its speedup over one CPU core)\n",
    );
    out
}

/// How the tenant's launches were sized.
struct TenantRecord {
    /// Its `launch_share_percent`.
    share: u64,
    /// The device's thread slots.
    slots: u64,
    /// Physical blocks of [`BLOCK`] threads in each of its Wasm-kernel
    /// launches.
    blocks: u64,
    /// Its `launch_time_ns`.
    launch_time_ns: u64,
}

/// The JSON record: every sample, and what produced it.
#[derive(Serialize)]
struct Record<'a> {
    benchmark: &'static str,
    date_utc: String,
    command: String,
    seed: u64,
    jit_cache: &'a str,
    device: DeviceRecord,
    config: Config,
    notes: [&'static str; 10],
    /// Each operation's lowered Wasm kernel, by [`Op::id`], in [`OPS`] order.
    #[serde(serialize_with = "common::ordered_object")]
    lowered_ptx: Vec<(&'static str, &'a str)>,
    rows: Vec<RowRecord<'a>>,
}

/// The settings the record was measured with; f32 values as their bits.
#[derive(Serialize)]
struct Config {
    n: usize,
    block: u32,
    launches: usize,
    reps: usize,
    cpu_reps: usize,
    kernel_get_warmup: usize,
    kernel_get_reps: usize,
    alpha: f32,
    bytes_per_element: f64,
    loop_n: usize,
    loop_iters: u32,
    loop_a_bits: String,
    loop_b_bits: String,
    guest_memory_limit_bytes: usize,
    kernel_get_guest_memory_limit_bytes: usize,
    vadd_kernel_index: u32,
    saxpy_kernel_index: u32,
    loop_kernel_index: u32,
    tenant_launch_share_percent: u64,
    tenant_launch_time_ns: u64,
    thread_slots: u64,
    tenant_physical_blocks: u64,
    edge_value_bits: Vec<String>,
}

/// One row in the record; numbers to 4 decimals, a non-finite one `null`.
#[derive(Serialize)]
struct RowRecord<'a> {
    id: &'a str,
    name: &'a str,
    unit: &'static str,
    median: f64,
    min: f64,
    max: f64,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    ratios: Vec<RatioRecord<'a>>,
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    targets: &'a [Target],
    samples: Vec<f64>,
}

/// A [`Ratio`] in the record.
#[derive(Serialize)]
struct RatioRecord<'a> {
    of: &'a str,
    over: &'a str,
    value: f64,
}

/// An f32's bits as the record writes them, `0x` and eight hex digits.
fn f32_bits(x: f32) -> String {
    format!("{:#010x}", x.to_bits())
}

impl<'a> Record<'a> {
    #[allow(clippy::too_many_arguments)]
    fn new(
        rows: &'a [Row],
        info: &DeviceInfo,
        date_utc: String,
        command: String,
        seed: u64,
        jit_cache: &'a str,
        lowered_ptx: &'a [(Op, String)],
        tenant: &TenantRecord,
    ) -> Record<'a> {
        Record {
            benchmark: "wasm_kernels",
            date_utc,
            command,
            seed,
            jit_cache,
            device: DeviceRecord::new(info),
            config: Config {
                n: N,
                block: BLOCK,
                launches: LAUNCHES,
                reps: REPS,
                cpu_reps: CPU_REPS,
                kernel_get_warmup: KERNEL_GET_WARMUP,
                kernel_get_reps: KERNEL_GET_REPS,
                alpha: ALPHA,
                bytes_per_element: BYTES_PER_ELEMENT,
                loop_n: LOOP_N,
                loop_iters: LOOP_ITERS,
                loop_a_bits: f32_bits(LOOP_A),
                loop_b_bits: f32_bits(LOOP_B),
                guest_memory_limit_bytes: GUEST_MEMORY_LIMIT,
                kernel_get_guest_memory_limit_bytes: SMALL_GUEST_MEMORY_LIMIT,
                vadd_kernel_index: VADD_KERNEL,
                saxpy_kernel_index: SAXPY_KERNEL,
                loop_kernel_index: LOOP_KERNEL,
                tenant_launch_share_percent: tenant.share,
                tenant_launch_time_ns: tenant.launch_time_ns,
                thread_slots: tenant.slots,
                tenant_physical_blocks: tenant.blocks,
                edge_value_bits: EDGE_VALUES.iter().map(|&e| f32_bits(e)).collect(),
            },
            notes: [
                "GPU rows: one sample per repetition of launches launches, then one synchronize \
                 (for a guest its `sync` export, whose completion callback is in the window); vadd \
                 and saxpy in GB/s = bytes_per_element * n * launches / seconds, loop in Giter/s = \
                 loop_iters * loop_n * launches / seconds (an iteration is one f32 multiply and one \
                 f32 add, so GFLOP/s is twice it); the four methods take turns within a \
                 repetition, the first rotating; one untimed launch each before",
                "guest rows run over the guest's linear memory (managed memory, prefetched to the \
                 device with the guest's `prefetch` import before the warm-up); raw rows over \
                 cuMemAlloc buffers; `guest hand PTX` launches the raw row's PTX through the guest \
                 (module_load_ptx, function_get, launch with guest pointers), so Wasm kernel over \
                 guest hand PTX is the lowering alone",
                "Wasm kernels: $vadd_kernel, $saxpy_kernel and $loop_kernel of wasm_kernels.wat \
                 (function indices in config), made by the guest's kernel_get and launched with \
                 eight hidden parameters (memory base and length, status word, fuel, time limit, \
                 the guest's grid); the lowered code checks every access against the memory's \
                 length, reads the SM's cycle counter when a thread starts, at each virtual \
                 block's start and at each loop header (after spending fuel), trapping past the \
                 launch's time limit (lowered_ptx below); the hand PTX does none of this",
                "loop: y = x after loop_iters steps of x = x * a + b (a = loop_a_bits, b = \
                 loop_b_bits as f32), x the first loop_n elements of vector a, y a vector of each \
                 method's own; every launch starts again from x, so the output does not depend on \
                 the launch count; the hand PTX (kernels/bench/mul_add_loop.ptx) has the Wasm \
                 loop's shape with mul.rn.f32 and add.rn.f32, which ptxas may unroll, while the Wasm \
                 kernel's loop header carries the fuel and clock check on every iteration, and its \
                 body a NaN test and canonicalization after each f32 operation",
                "tenant rows: the same Wasm kernels launched by a second guest of the same runtime \
                 whose store is an untrusted tenant's (GuestRuntime::tenant_store with \
                 TenantConfig::untrusted, the default TenantQuota but guest memory up to \
                 guest_memory_limit_bytes), over its own copy of the inputs: each launch runs on \
                 tenant_physical_blocks physical blocks (tenant_launch_share_percent of \
                 thread_slots, over block threads), each running every tenant_physical_blocks-th \
                 of the guest's blocks as virtual blocks, with a time limit of \
                 tenant_launch_time_ns; the trusted guest's launches have one physical block per \
                 virtual block and no time limit (the checks still run); the first ratio is the \
                 tenant row over the trusted guest's Wasm kernel row",
                "checks: every output element of every method (raw, guest Wasm kernel, guest hand \
                 PTX, tenant Wasm kernel, wasmtime) is compared bit for bit with f32 arithmetic on \
                 the CPU after the timed runs; a mismatch ends the run before this file is written",
                "SAXPY runs over the vector add's output: x = a, y starts as a + b, alpha = 1.5; \
                 after k launches y has taken k steps of y = alpha * x + y (k = 1 + reps * \
                 launches on the GPU, 1 + cpu_reps on the CPU), which the check replays in f32 on \
                 the CPU, mul then add",
                "wasmtime rows (vadd and saxpy only: the loop's loop_n * loop_iters dependent \
                 steps would take most of a minute on one core): one export call is one pass over \
                 n elements on the calling thread (a scalar f32 loop), in a runtime with \
                 wasmtime's own memory and default configuration \
                 (GuestRuntime::with_host_memory: guard pages, no explicit bounds checks); one \
                 untimed pass first; their ratio is the guest Wasm kernel's median over theirs",
                "kernel_get rows: call_async of an export that calls kernel_get and loads the \
                 handle; `first` in a fresh GuestRuntime (empty kernel cache: translate, lower, \
                 cuModuleLoadData JIT, cuModuleGetFunction), `cached` from a second store of the \
                 same runtime, `empty_call` an export that does nothing, in that store, \
                 `first_touch` the host's first write to that store's memory (64 bytes at 0; \
                 managed memory, so the driver serves a page fault); building the runtime, \
                 compiling the module, instantiating, each store's first call (which sets up its \
                 fiber stack) and first touch of its memory are not in the kernel_get times; `by \
                 hand` rows time translate_kernel, PtxLowerer::lower and cuModuleLoadDataEx + \
                 cuModuleGetFunction outside the guest, after the guest's calls, in the same \
                 repetition",
                "raw modules are loaded with cuModuleLoadDataEx and no options: sys.rs has no \
                 cuModuleLoadData",
            ],
            lowered_ptx: lowered_ptx
                .iter()
                .map(|(op, text)| (op.id(), text.as_str()))
                .collect(),
            rows: rows.iter().map(RowRecord::new).collect(),
        }
    }
}

impl<'a> RowRecord<'a> {
    fn new(r: &'a Row) -> RowRecord<'a> {
        RowRecord {
            id: &r.id,
            name: &r.name,
            unit: r.unit,
            median: round(median(&r.samples), 4),
            min: round(min(&r.samples), 4),
            max: round(max(&r.samples), 4),
            ratios: r
                .ratios
                .iter()
                .map(|q| RatioRecord {
                    of: &q.of,
                    over: &q.over,
                    value: round(q.value, 4),
                })
                .collect(),
            targets: &r.targets,
            samples: rounded(&r.samples, 4),
        }
    }
}

// ---------------------------------------------------------------------------
// The process: seed, command line, date.

/// `WASM_KERNELS_SEED`, or one made from the clock and the process id.
fn seed() -> BenchResult<u64> {
    match std::env::var("WASM_KERNELS_SEED") {
        Ok(text) => {
            let t = text.trim();
            let parsed = match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
                Some(hex) => u64::from_str_radix(hex, 16),
                None => t.parse(),
            };
            parsed.map_err(|e| format!("WASM_KERNELS_SEED={text:?} is not a u64: {e}"))
        }
        Err(_) => {
            let nanos = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64);
            Ok(mix(
                (nanos ^ u64::from(std::process::id()) << 32).wrapping_add(GOLDEN_GAMMA)
            ))
        }
    }
}
