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
//!
//! This file is what is measured; `wasm_kernels/` holds the bench's guest
//! (`guest.rs`), its inputs and output checks (`check.rs`) and its table
//! and record (`record.rs`); the harness is `common/`.

#[path = "wasm_kernels/check.rs"]
mod check;
mod common;
#[path = "wasm_kernels/guest.rs"]
mod guest;
#[path = "wasm_kernels/record.rs"]
mod record;

use common::{
    BenchResult, NoDevice,
    baseline::{RawCuda, RawKernel},
    command_line, driver_version,
    guest::{GUEST_DATA, PrefetchTo, wasm_error},
    inputs::seed,
    main_on_device,
    rows::Row,
    stats::median,
    timing::{ms, us},
    utc_timestamp,
};
use std::{
    process::ExitCode,
    time::{Duration, Instant},
};

use check::{check_outputs, fill_inputs};
use guest::Guest;
use record::{Record, TenantRecord, table};
use tensorwasm_core::{
    DeviceInfo, GpuDriver,
    abi::ArgDescriptor,
    lower::{Lowerer, translate::translate_kernel},
    quota::TenantQuota,
};
use tensorwasm_cuda::{CudaDriver, JitCache, sys};
use tensorwasm_embed::{
    kernel::{GuestModule, ptx_target},
    runtime::GuestRuntime,
    tenant::TenantConfig,
};

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
/// GPU samples per method; the median is reported. The methods over guest
/// memory vary by 3-4% from sample to sample on an H200 (the raw ones by
/// 0.3%): 5 samples moved the element-wise ratios by as much between runs.
const REPS: usize = 15;
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

/// Where the kernels' argument descriptors go in guest memory (between
/// `common::guest`'s name and PTX): 256 bytes each from here on
/// ([`args_at`]; 24 bytes a descriptor, the loop's six take 144).
const GUEST_ARGS: u32 = 1024;

fn main() -> ExitCode {
    let jit_cache = disable_jit_cache();
    main_on_device("wasm_kernels", NoDevice::Fail, |d| run(d, &jit_cache))
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

fn run(driver: &CudaDriver, jit_cache: &str) -> BenchResult<()> {
    let seed = seed("WASM_KERNELS_SEED")?;
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
            let (runtime, module) = guest_runtime(driver.clone(), GUEST_MEMORY_LIMIT)?;
            gpu_throughput(&mut raw, &runtime, &module, seed).await?
            // The guests (their memory, modules, streams) and the raw
            // buffers are gone here.
        };
        println!("measuring the vector add and SAXPY in wasmtime on one CPU core...");
        let cpu = cpu_bandwidth(driver, seed, &rows).await?;
        rows.extend(cpu);
        println!("measuring kernel_get (translate, lower, load) and its cache...");
        let (kernel_get_rows, lowered_ptx) = kernel_get_time(&mut raw, driver).await?;
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

/// A runtime on `driver` whose guests' memory may grow to `limit`, and
/// the bench guest compiled for it.
fn guest_runtime(
    driver: CudaDriver,
    limit: usize,
) -> BenchResult<(GuestRuntime<CudaDriver>, GuestModule)> {
    let runtime =
        GuestRuntime::new(driver, limit).map_err(wasm_error("building a guest runtime"))?;
    let module = runtime
        .compile(GUEST_WAT)
        .map_err(wasm_error("compiling wasm_kernels.wat"))?;
    Ok((runtime, module))
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
            let (runtime, module) = guest_runtime(cold.clone(), SMALL_GUEST_MEMORY_LIMIT)?;
            // Each store's first call sets up its fiber stack, and the first
            // touch of its memory (managed: a page fault the driver serves)
            // is the store's cost, not kernel_get's: neither is in the
            // kernel_get times.
            let mut first = Guest::new(&runtime, &module).await?;
            first.nop().await?;
            first.touch_out_slots()?;
            let first_time = first.get_kernel(index).await?.1;
            let mut second = Guest::new(&runtime, &module).await?;
            second.nop().await?;
            let first_touch_time = second.touch_out_slots()?;
            let empty_call_time = second.nop().await?;
            let cached_time = second.get_kernel(index).await?.1;
            let lowerings = runtime.kernel_cache().lowerings();
            if lowerings != 1 {
                return Err(format!(
                    "two kernel_get calls of function {index} in one runtime lowered it \
                     {lowerings} times, not once"
                ));
            }

            let (warm_runtime, warm_module) =
                guest_runtime(warm.clone(), SMALL_GUEST_MEMORY_LIMIT)?;
            let mut fresh = Guest::new(&warm_runtime, &warm_module).await?;
            fresh.nop().await?;
            fresh.touch_out_slots()?;
            let warm_jit_time = fresh.get_kernel(index).await?.1;

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
