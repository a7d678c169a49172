//! What a WASI 0.2 component pays for the GPU (issue 31's figures),
//! measured side by side in one process on device 0:
//!
//! 1. vector-add bandwidth: the component's own function `tw_vadd`
//!    (`guest/examples/gpu-bench`), launched as a Wasm kernel over three
//!    arrays of [`VADD_N`] floats in the component's own memory (managed
//!    memory, no copy; one host call of its export `vadd`: the launch and
//!    its wait), against `vector_add.ptx` launched raw over three
//!    `cuMemAlloc` buffers and synchronized, for each of [`VADD_CASES`]
//!    (untrusted or trusted tenant, arrays where the allocator puts them
//!    or 2 MiB-aligned, prefetched with `kernels.prefetch` or not); goal:
//!    the trusted tenant's prefetched arrays at 0.9x the raw bandwidth or
//!    more;
//! 2. a built-in f32 GEMM from launch to result, small ([`SMALL`]³) and
//!    large ([`LARGE`]³): the component's export `gemm` (the op on three
//!    device buffers and its wait) against a core module doing the same in
//!    one export call (`tensor_op` and `wait`, the tenants bench's guest);
//!    goal: the component at 1.2x the core module's time or less.
//!
//! The GEMM's guests are untrusted tenants (`TenantConfig::untrusted`, the
//! component without a guest-fuel bound: it makes its own random inputs) of
//! one [`GuestRuntime`]. Every sample is one host call, timed from before
//! it to its return; the methods take turns sample by sample. Results are
//! checked after timing: the vector add element for element (in the
//! component, which reads its own memory), the GEMMs on sampled entries
//! against float64. Prints a table and writes every sample to
//! `$OUT/components.json` (or `./components.json`). Run with
//! `cargo bench -p tensorwasm-embed --bench components`, the component
//! built first (`cd guest/examples/gpu-bench && cargo build --release`, or
//! `GPU_BENCH_GUEST_WASM`); exits 2 when no CUDA device is usable.

mod common;

#[path = "tenants/guests.rs"]
#[allow(dead_code)]
mod guests;

use std::{
    path::PathBuf,
    process::ExitCode,
    sync::Arc,
    time::{Duration, Instant},
};

use common::{
    BenchResult, DeviceRecord, NoDevice,
    baseline::{RawCuda, RawKernel},
    command_line, driver_version,
    inputs::{f32_bytes, seed},
    main_on_device,
    rows::{Column, Row, RowFields, RowRecord},
    stats::median,
    timing::us,
    utc_timestamp,
};
use guests::{BenchGuest, Floats, GUEST_WAT, block};
use serde::Serialize;
use tensorwasm_core::{
    GpuDriver,
    abi::tensor::{DType, OperandDescriptor, TensorHeader, TensorOpKind},
    quota::QuotaLedger,
};
use tensorwasm_cuda::CudaDriver;
use tensorwasm_embed::{
    component::{ComponentInstance, compile_component},
    runtime::GuestRuntime,
    tenant::TenantConfig,
    wasmtime::component::Val,
};

/// `vadd(a, b, c, n)`: `c[i] = a[i] + b[i]`, the raw side.
const VADD_PTX: &str = include_str!("../../kernels/test/vector_add.ptx");
/// Floats per vector-add array: 3 x 256 MiB, which fits the untrusted
/// tenant's 1 GiB of guest memory beside the component's own data.
const VADD_N: u32 = 1 << 26;
/// Threads per block of both vector adds.
const VADD_BLOCK: u32 = 256;
/// Timed vector adds per method.
const VADD_REPS: usize = 50;
/// Launches per bandwidth sample, queued one after another and then
/// waited for (the raw side: then synchronized), as the `wasm_kernels`
/// bench times its element-wise kernels: what a program that runs kernels
/// back to back gets. The single-launch rows time one launch and its wait
/// a call instead (latency included).
const VADD_LAUNCHES: u32 = 20;
/// The cases also timed one launch a call.
const SINGLE_CASES: [&str; 3] = ["trusted", "trusted.aligned", "trusted.host-side"];
/// Untimed ones before them (the first moves the component's pages to the
/// device).
const VADD_WARMUP: usize = 5;
/// The small and the large GEMM's m = n = k.
const SMALL: u32 = 64;
const LARGE: u32 = 2048;
/// Timed GEMMs per method and size, and untimed ones before them.
const GEMM_REPS: [usize; 2] = [500, 50];
const GEMM_WARMUP: usize = 10;
/// Sampled entries each GEMM's check compares with float64.
const GEMM_SAMPLES: u32 = 64;
/// Each guest memory's limit (the tenant quota is 1 GiB).
const GUEST_MEMORY_LIMIT: usize = 2 << 30;

/// Where `guests.rs` keeps the core module's launch handle, its op
/// descriptor and its data.
const OUT: u32 = 64;
const DESC: u32 = 256;
const DATA: u32 = 65536;
/// `guests.rs`'s heavy GEMM (not run here).
const HEAVY: u64 = 1024;

fn main() -> ExitCode {
    main_on_device("components", NoDevice::Fail, run)
}

fn run(driver: &CudaDriver) -> BenchResult<()> {
    let seed = seed("COMPONENTS_SEED")?;
    let info = driver.device().clone();
    let (command, date) = (command_line(), utc_timestamp());
    println!(
        "components on {} (driver {}), {date}",
        info.name,
        driver_version(&info)
    );
    println!("command: {command}");
    println!("seed of the random inputs: {seed:#x} (set COMPONENTS_SEED to repeat)");
    let wasm_path = guest_path();
    let wasm = std::fs::read(&wasm_path).map_err(|e| {
        format!(
            "{}: {e} (build it: cd guest/examples/gpu-bench && cargo build --release)",
            wasm_path.display()
        )
    })?;
    let runtime = GuestRuntime::new(driver.clone(), GUEST_MEMORY_LIMIT)
        .map_err(|e| format!("building the guest runtime: {e:#}"))?;
    let mut raw = RawCuda::open()?;
    let mut rows = Vec::new();
    println!("measuring vector-add bandwidth...");
    rows.extend(bandwidth(&mut raw, &runtime, &wasm, seed)?);
    drop(raw);
    let mut component = Component::new(&runtime, &wasm, false)?;
    let module = runtime
        .compile(GUEST_WAT)
        .map_err(|e| format!("compiling the core-module guest: {e:#}"))?;
    let mut core = BenchGuest::new(&runtime, &module, "core-module")?;
    for (size, reps) in [SMALL, LARGE].into_iter().zip(GEMM_REPS) {
        println!("measuring the {size}^3 GEMM...");
        rows.extend(gemm(&mut component, &mut core, size, reps, seed)?);
    }
    println!();
    print!("{}", table(&rows));
    let path = common::write_record(
        "components.json",
        &Record::new(&rows, &info, date, command, seed),
    )?;
    println!("raw numbers: {}", path.display());
    Ok(())
}

/// The packed or built component.
fn guest_path() -> PathBuf {
    std::env::var_os("GPU_BENCH_GUEST_WASM")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("../guest/target/wasm32-wasip2/release/gpu_bench.wasm")
        })
}

/// The vector add's cases: (row id, what the row says, the component's
/// tenant trusted, its arrays' alignment in bytes, the component prefetches
/// them to the device with `kernels.prefetch`). An untrusted tenant's
/// launches hold at most half the device (its launch share) and carry a
/// time limit, so its kernels run over virtual blocks with time checks;
/// a trusted one's run the guest's own grid, as the core-module rows of
/// the `wasm_kernels` bench do. Arrays 2 MiB-aligned (as
/// `cudaMallocManaged` places large allocations) or where Rust's allocator
/// puts them; `host-side`: the memory below the arrays (the component's
/// stack and data) advised `prefer-host`.
const VADD_CASES: [(&str, &str, bool, u32, bool); 6] = [
    ("untrusted", "untrusted tenant, prefetched", false, 0, true),
    (
        "trusted.faulted",
        "trusted tenant, not prefetched",
        true,
        0,
        false,
    ),
    (
        "trusted.aligned.faulted",
        "trusted tenant, 2 MiB-aligned, not prefetched",
        true,
        2 << 20,
        false,
    ),
    ("trusted", "trusted tenant, prefetched", true, 0, true),
    (
        "trusted.host-side",
        "trusted tenant, prefetched, memory below the arrays prefer-host",
        true,
        0,
        true,
    ),
    (
        "trusted.aligned",
        "trusted tenant, 2 MiB-aligned, prefetched",
        true,
        2 << 20,
        true,
    ),
];

/// One instance of the component, a tenant's.
struct Component {
    instance: ComponentInstance<CudaDriver>,
}

impl Component {
    /// An instance for an untrusted tenant (its quotas; no guest-fuel bound:
    /// the component makes its own random inputs), or a trusted one.
    fn new(
        runtime: &GuestRuntime<CudaDriver>,
        wasm: &[u8],
        trusted: bool,
    ) -> BenchResult<Component> {
        let compiled = compile_component(runtime.engine(), wasm, "gpu_bench.wasm")
            .map_err(|e| format!("{e:?}"))?;
        let base = if trusted {
            TenantConfig::trusted("component")
        } else {
            TenantConfig::untrusted("component")
        };
        let config = TenantConfig {
            guest_fuel: None,
            ..base
        };
        let ledger = Arc::new(QuotaLedger::new(config.quota));
        let instance = futures::executor::block_on(ComponentInstance::new(
            runtime,
            &compiled,
            "gpu_bench.wasm",
            &config,
            ledger,
            None,
        ))
        .map_err(|e| format!("{e:?}"))?;
        Ok(Component { instance })
    }

    /// Calls `export` with `args`; its one result, the `ok` of a
    /// `result<T, string>` (the `err`'s text as the error), and the call's
    /// time.
    fn call(&mut self, export: &str, args: &[Val]) -> BenchResult<(Option<Val>, Duration)> {
        let func = self
            .instance
            .func(export)
            .ok_or_else(|| format!("the component exports no `{export}`"))?;
        let start = Instant::now();
        let results = block(self.instance.call(func, args))?;
        let elapsed = start.elapsed();
        match results.into_iter().next() {
            Some(Val::Result(Ok(value))) => Ok((value.map(|v| *v), elapsed)),
            Some(Val::Result(Err(Some(e)))) => match *e {
                Val::String(text) => Err(format!("{export}: {text}")),
                other => Err(format!("{export}: {other:?}")),
            },
            other => Err(format!("{export} returned {other:?}")),
        }
    }
}

/// (1) The component's Wasm kernel over its own memory against the raw
/// driver over `cuMemAlloc` buffers, GB/s of one launch and its wait, for
/// each of [`VADD_CASES`] (one instance each).
fn bandwidth(
    raw: &mut RawCuda,
    runtime: &GuestRuntime<CudaDriver>,
    wasm: &[u8],
    seed: u64,
) -> BenchResult<Vec<Row>> {
    let n = VADD_N as usize;
    let gbps =
        |d: Duration, launches: u32| 12.0 * n as f64 * f64::from(launches) / d.as_secs_f64() / 1e9;
    let grid = VADD_N.div_ceil(VADD_BLOCK);
    let mut floats = Floats(seed | 1);
    let (a, b) = (floats.take(n), floats.take(n));
    let vadd = raw.load(VADD_PTX, "vadd")?;
    let (da, db, dc) = (raw.alloc(4 * n)?, raw.alloc(4 * n)?, raw.alloc(4 * n)?);
    raw.copy_to(&da, &f32_bytes(&a))?;
    raw.copy_to(&db, &f32_bytes(&b))?;
    let mut raw_vadd = RawKernel::new(vadd, &[da.ptr, db.ptr, dc.ptr, u64::from(VADD_N)]);
    let mut components = Vec::new();
    for (id, _, trusted, align, prefetch) in VADD_CASES {
        let mut component = Component::new(runtime, wasm, trusted)?;
        component.call(
            "vadd-setup",
            &[
                Val::U32(VADD_N),
                Val::U64(seed),
                Val::U32(align),
                Val::Bool(prefetch),
            ],
        )?;
        if id.ends_with("host-side") {
            component.call("vadd-host-side", &[])?;
        }
        components.push(component);
    }

    // The samples: raw and each case with VADD_LAUNCHES launches a call,
    // then raw and the cases of SINGLE_CASES with one.
    let singles: Vec<usize> = SINGLE_CASES
        .iter()
        .map(|id| VADD_CASES.iter().position(|c| c.0 == *id).expect("a case"))
        .collect();
    let (mut raw_gbps, mut raw_single_gbps) = (Vec::new(), Vec::new());
    let mut single_gbps = vec![Vec::new(); SINGLE_CASES.len()];
    let mut component_gbps = vec![Vec::new(); VADD_CASES.len()];
    let mut raw_launches = |launches: u32| -> BenchResult<Duration> {
        let start = Instant::now();
        for _ in 0..launches {
            // SAFETY: the three buffers hold `VADD_N` floats each and
            // outlive the kernel (every sample ends in a synchronize).
            unsafe { raw.launch(&mut raw_vadd, grid, VADD_BLOCK) }?;
        }
        raw.synchronize()?;
        Ok(start.elapsed())
    };
    for rep in 0..VADD_WARMUP + VADD_REPS {
        let timed = rep >= VADD_WARMUP;
        let raw_time = raw_launches(VADD_LAUNCHES)?;
        if timed {
            raw_gbps.push(gbps(raw_time, VADD_LAUNCHES));
        }
        for (component, samples) in components.iter_mut().zip(&mut component_gbps) {
            let (_, time) = component.call("vadd", &[Val::U32(VADD_LAUNCHES)])?;
            if timed {
                samples.push(gbps(time, VADD_LAUNCHES));
            }
        }
        let raw_time = raw_launches(1)?;
        if timed {
            raw_single_gbps.push(gbps(raw_time, 1));
        }
        for (&case, samples) in singles.iter().zip(&mut single_gbps) {
            let (_, time) = components[case].call("vadd", &[Val::U32(1)])?;
            if timed {
                samples.push(gbps(time, 1));
            }
        }
    }
    // Checked after timing: reading the arrays moves them to the host.
    let mut c = vec![0u8; 4 * n];
    raw.copy_from(&mut c, &dc)?;
    for (i, ((x, y), z)) in a.iter().zip(&b).zip(c.chunks_exact(4)).enumerate() {
        let z = f32::from_le_bytes(z.try_into().expect("4 bytes"));
        if x + y != z {
            return Err(format!("raw vector add: c[{i}] is {z}, not {x} + {y}"));
        }
    }
    for component in &mut components {
        component.call("vadd-check", &[])?;
    }
    let raw_median = median(&raw_gbps);
    let raw_single_median = median(&raw_single_gbps);
    let mut rows = vec![
        Row::new(
            "vadd.raw",
            format!("vector add: raw, 3 cuMemAlloc buffers, {VADD_LAUNCHES} launches a sample"),
            "GB/s",
            raw_gbps,
        ),
        Row::new(
            "vadd.raw.single",
            "vector add: raw, one launch and its synchronize a sample",
            "GB/s",
            raw_single_gbps,
        ),
    ];
    for (&case, samples) in singles.iter().zip(single_gbps) {
        let (id, says, ..) = VADD_CASES[case];
        rows.push(
            Row::new(
                format!("vadd.component.{id}.single"),
                format!("vector add: component, {says}, one launch and its wait a call"),
                "GB/s",
                samples,
            )
            .ratio_to("vadd.raw.single", raw_single_median),
        );
    }
    for ((id, says, trusted, _, prefetch), samples) in VADD_CASES.into_iter().zip(component_gbps) {
        let met = median(&samples) >= 0.9 * raw_median;
        let row = Row::new(
            format!("vadd.component.{id}"),
            format!("vector add: component's Wasm kernel, own memory, {says}"),
            "GB/s",
            samples,
        )
        .ratio_to("vadd.raw", raw_median);
        // The goal is the trusted tenant's over prefetched memory, as for
        // core modules (the `wasm_kernels` bench prefetches too): an
        // untrusted one's launch share is policy, not overhead.
        rows.push(if trusted && prefetch {
            row.target(">= 0.9x raw", met)
        } else {
            row
        });
    }
    Ok(rows)
}

/// (2) One `size`³ f32 GEMM from launch to result: the core module's
/// `launch_wait` and the component's `gemm`, each checked afterwards.
fn gemm(
    component: &mut Component,
    core: &mut BenchGuest,
    size: u32,
    reps: usize,
    seed: u64,
) -> BenchResult<Vec<Row>> {
    let n = size as usize;
    let mut floats = Floats(seed ^ u64::from(size) | 1);
    let (a, b) = (floats.take(n * n), floats.take(n * n));
    let bytes = (4 * n * n) as u64;
    let ab = core.buffer(bytes, &f32_bytes(&a))?;
    let bb = core.buffer(bytes, &f32_bytes(&b))?;
    let cb = core.buffer(bytes, &[])?;
    let mut header = TensorHeader::new(TensorOpKind::Gemm);
    header.alpha = 1.0;
    let shape = [u64::from(size), u64::from(size)];
    core.set_op(
        &header,
        &[
            OperandDescriptor::buffer(ab, 0, DType::F32, &shape),
            OperandDescriptor::buffer(bb, 0, DType::F32, &shape),
            OperandDescriptor::buffer(cb, 0, DType::F32, &shape),
        ],
    )?;
    let dims = Val::U32(size);
    component.call(
        "gemm-setup",
        &[dims.clone(), dims.clone(), dims, Val::U64(seed)],
    )?;

    let (mut core_us, mut component_us) = (Vec::new(), Vec::new());
    for rep in 0..GEMM_WARMUP + reps {
        let start = Instant::now();
        core.launch_wait()?;
        let core_time = start.elapsed();
        let (_, component_time) = component.call("gemm", &[])?;
        if rep >= GEMM_WARMUP {
            core_us.push(us(core_time));
            component_us.push(us(component_time));
        }
    }
    check_core_gemm(core, cb, &a, &b, n)?;
    match component.call("gemm-check", &[Val::U32(GEMM_SAMPLES)])? {
        (Some(Val::Float64(error)), _) if error < 1e-5 => {}
        (other, _) => return Err(format!("the component's {size}^3 GEMM: error {other:?}")),
    }
    let core_median = median(&core_us);
    let id = |side: &str| format!("gemm{size}.{side}");
    Ok(vec![
        Row::new(
            id("core"),
            format!("GEMM {size}^3 f32, launch to result: core module"),
            "us",
            core_us,
        ),
        Row::new(
            id("component"),
            format!("GEMM {size}^3 f32, launch to result: component"),
            "us",
            component_us.clone(),
        )
        .ratio_to(&id("core"), core_median)
        .target(
            "<= 1.2x core module",
            median(&component_us) <= 1.2 * core_median,
        ),
    ])
}

/// The core module's GEMM result on sampled entries against float64.
fn check_core_gemm(
    core: &mut BenchGuest,
    c: tensorwasm_core::abi::Handle,
    a: &[f32],
    b: &[f32],
    n: usize,
) -> BenchResult<()> {
    let got = core.read_buffer(c, n * n)?;
    let mut picks = Floats(0x5eed);
    for p in picks.take(GEMM_SAMPLES as usize) {
        let at = (p.to_bits() as usize) % (n * n);
        let (i, j) = (at / n, at % n);
        let terms = (0..n).map(|k| f64::from(a[i * n + k]) * f64::from(b[k * n + j]));
        let want: f64 = terms.clone().sum();
        let scale: f64 = terms.map(f64::abs).sum();
        let error = (f64::from(got[at]) - want).abs() / scale;
        if error >= 1e-5 {
            return Err(format!(
                "the core module's {n}^3 GEMM: c[{i}][{j}] is {}, float64 says {want}",
                got[at]
            ));
        }
    }
    Ok(())
}

fn table(rows: &[Row]) -> String {
    let columns = [
        Column::median(14),
        Column::min(12),
        Column::max(12),
        Column::ratio(6),
    ];
    common::rows::table(
        rows,
        &columns,
        "ratio: this row's median over the row it is compared with (see the JSON)\n",
    )
}

/// The JSON record: every sample, and what produced it.
#[derive(Serialize)]
struct Record<'a> {
    benchmark: &'static str,
    date_utc: String,
    command: String,
    seed: u64,
    device: DeviceRecord,
    config: Config,
    notes: [&'static str; 3],
    rows: Vec<RowRecord<'a>>,
}

/// The settings the record was measured with.
#[derive(Serialize)]
struct Config {
    vadd_n: u32,
    vadd_block: u32,
    vadd_reps: usize,
    vadd_warmup: usize,
    gemm_sizes: [u32; 2],
    gemm_reps: [usize; 2],
    gemm_warmup: usize,
    guest_memory_limit_bytes: usize,
}

impl<'a> Record<'a> {
    fn new(
        rows: &'a [Row],
        info: &tensorwasm_core::DeviceInfo,
        date_utc: String,
        command: String,
        seed: u64,
    ) -> Record<'a> {
        Record {
            benchmark: "components",
            date_utc,
            command,
            seed,
            device: DeviceRecord::new(info),
            config: Config {
                vadd_n: VADD_N,
                vadd_block: VADD_BLOCK,
                vadd_reps: VADD_REPS,
                vadd_warmup: VADD_WARMUP,
                gemm_sizes: [SMALL, LARGE],
                gemm_reps: GEMM_REPS,
                gemm_warmup: GEMM_WARMUP,
                guest_memory_limit_bytes: GUEST_MEMORY_LIMIT,
            },
            notes: [
                "every sample is one host call timed from before it to its return: the \
                 component's export (launch and wait inside), the core module's export \
                 (tensor_op and wait inside), or the raw launch and cuStreamSynchronize",
                "vadd rows: GB/s = 12 * vadd_n / seconds of one sample",
                "gemm rows: microseconds of one sample",
            ],
            rows: rows
                .iter()
                .map(|r| RowRecord::new(r, RowFields::Range))
                .collect(),
        }
    }
}
