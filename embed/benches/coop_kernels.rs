//! Cooperative kernels written in Rust against the built-in CUDA kernels,
//! side by side in one process on device 0: the kernels of
//! `guest/examples/kernel-bench/src/coop.rs` (shared memory, barriers,
//! warp shuffles, a float atomic), translated from the Wasm by export name,
//! lowered to PTX and launched over one device buffer that stands for the
//! guest's memory (its data segments copied in), exactly as `kernel_get`
//! and `launch` do it; the built-ins launched with the runtime's plan
//! (`tensorwasm_kernels::table::plan`) over the same memory.
//!
//! 1. Reduction bandwidth over [`REDUCE_N`] floats: `block_reduce_f32` (a
//!    grid-stride loop over as many blocks as the device holds at once,
//!    shuffles, one float atomic per block) against `reduce_sum` of the
//!    same floats as `[4096, 16384]` over the last axis (one block per
//!    row: the built-in's grid needs many outputs to fill the device);
//!    `reduce_sum` to one output (one block) is shown too. Target 0.85x.
//! 2. Row softmax: `softmax_rows` (a warp per row) against `softmax` (the
//!    table's entry for the row length: at 1024 columns also a warp per
//!    row) at 65536 x 1024, in GB/s of reads and writes; target
//!    0.8x. 16384 x 4096 is shown too (longer rows take the Rust kernel's
//!    two-pass path).
//! 3. SGEMM at 4096³: `sgemm_tiled` (128 x 128 tiles in shared memory, 8 x
//!    8 outputs a thread, fused multiply-adds: `tensorwasm_guest::math::fma`)
//!    against the built-in f32 GEMM, in TFLOP/s (a fused multiply-add is
//!    two operations); target 0.5x.
//!
//! Inputs are random (seeded, never 0). Every output is checked against
//! float64 on the CPU: the sums within 1e-5 of the sum of magnitudes
//! (docs/tensor-ops.md's bound), softmax elementwise within 1e-5 relative,
//! SGEMM's relative Frobenius error within 1e-5 over 4096 sampled entries.
//! Warm-up launches, then samples of back-to-back launches timed with
//! events; medians reported. Prints a table and writes every sample to
//! `$OUT/coop_kernels.json` (or `./coop_kernels.json`).
//!
//! Built with `--features bench-unsandboxed` (never for production), the
//! Wasm kernels run without the sandbox's memory checks and fuel; the
//! bench then says `sandbox off` and writes
//! `coop_kernels_unsandboxed.json`, so the two builds' runs sit side by
//! side.
//!
//! Run with `cargo bench -p tensorwasm-embed --bench coop_kernels` after
//! building the guests (`cd guest && cargo build --release`).
//! Environment: `RUST_KERNELS_WASM` (the kernels' module; default
//! `guest/target/wasm32-unknown-unknown/release/kernel_bench.wasm`),
//! `COOP_KERNELS_SEED` (the inputs' seed, printed either way), `OUT`.

mod common;

use std::process::ExitCode;

use common::{
    BenchResult, DeviceRecord, NoDevice,
    check::over_cores,
    command_line,
    inputs::{mix, seed, uniform},
    kernels::{Builtin, GuestMemory, Launch, WasmKernel, kernel_bench_wasm, run_once},
    main_on_device,
    record::device_sm,
    stats::median,
    timing::{Repeats, time},
    utc_timestamp,
};
use serde_json::{Value, json};
use tensorwasm_core::{
    Dim3, GpuDriver, KernelParam,
    abi::tensor::{Gemm, GemmPrecision, ReduceOp, TensorOp},
};
use tensorwasm_cuda::CudaDriver;

/// Floats the reductions read (256 MiB).
const REDUCE_N: usize = 1 << 26;
/// The built-in's shape for them: one block per row.
const REDUCE_ROWS: usize = 4096;
/// Softmax shapes, `(rows, cols)`; the first is held to the target.
const SOFTMAX: [(usize, usize); 2] = [(65536, 1024), (16384, 4096)];
/// M = N = K of the SGEMMs.
const GEMM: usize = 4096;
/// Entries of C checked against float64.
const GEMM_CHECKED: usize = 4096;
/// Where the data starts in the guest memory: past the 1 MiB stack and
/// the data segments (the kernels' constants) after it.
const DATA: usize = 2 << 20;
/// Guest memory: the largest section (softmax: x and y, 512 MiB).
const GUEST_BYTES: usize = DATA + (512 << 20) + (64 << 10);
/// Threads per block of `block_reduce_f32` and `softmax_rows`
/// (`kernel_bench::coop::BLOCK`), and of `sgemm_tiled`
/// (`SGEMM_BLOCK`).
const BLOCK: u32 = 256;
/// `kernel_bench::coop::BLOCK_REDUCE_SHARED`: one float per warp.
const BLOCK_REDUCE_SHARED: u32 = 32 * 4;
/// `kernel_bench::coop::SGEMM_TILE`: C's rows and columns per block.
const SGEMM_TILE: u32 = 128;
/// `kernel_bench::coop::SGEMM_SHARED`: two stages of A's tile (8 x 132
/// with padding) and B's (8 x 128).
const SGEMM_SHARED: u32 = 2 * (8 * 132 + 8 * 128) * 4;
/// Launches per row.
const REPEATS: Repeats = Repeats {
    warmup: 3,
    samples: 7,
    launches: 20,
};
/// The SGEMMs take milliseconds each.
const GEMM_REPEATS: Repeats = Repeats {
    warmup: 2,
    samples: 7,
    launches: 5,
};
/// Relative error allowed everywhere.
const TOLERANCE: f64 = 1e-5;

fn main() -> ExitCode {
    main_on_device("coop_kernels", NoDevice::Skip, run)
}

/// What a bench run shares: the driver, its stream, the guest memory, the
/// kernels' module, the seed; and the rows measured so far.
struct Bench<'a> {
    d: &'a CudaDriver,
    stream: <CudaDriver as GpuDriver>::Stream,
    guest: GuestMemory<CudaDriver>,
    wasm: Vec<u8>,
    seed: u64,
    rows: Vec<Value>,
}

/// A measured kernel: its name, its median (ms per launch) and its rate
/// there (GB/s or TFLOP/s); the samples go to the record.
struct Measured {
    kernel: String,
    ms: f64,
    rate: f64,
}

/// A row's unit, and how a launch's milliseconds turn into it.
type Rate<'r> = (&'static str, &'r dyn Fn(f64) -> f64);

impl Bench<'_> {
    fn wasm_kernel(&self, name: &str) -> BenchResult<WasmKernel<CudaDriver>> {
        WasmKernel::load(self.d, &self.wasm, name)
    }

    /// One checked launch, then the timed ones (`check` reads the output);
    /// `rate` turns milliseconds into the row's unit. Traps fail the row.
    fn measure(
        &mut self,
        section: &str,
        kernel: &str,
        launch: &Launch<'_, CudaDriver>,
        repeats: Repeats,
        check: impl FnOnce(&Self) -> BenchResult<f64>,
        (unit, rate): Rate<'_>,
    ) -> BenchResult<Measured> {
        let what = format!("{section}, {kernel}");
        run_once(self.d, &self.stream, launch)?;
        self.guest.check_status(self.d, &what)?;
        let error = check(self).map_err(|e| format!("{what}: {e}"))?;
        let samples = time(self.d, &self.stream, launch, repeats)?;
        self.guest.check_status(self.d, &what)?;
        let ms = median(&samples);
        let c = &launch.config;
        self.rows.push(json!({
            "section": section, "kernel": kernel,
            "grid": [c.grid.x, c.grid.y, c.grid.z], "block": [c.block.x, c.block.y, c.block.z],
            "shared_bytes": c.shared_mem_bytes,
            "median_ms": ms, "unit": unit, "rate": rate(ms), "max_error": error,
            "samples_ms": samples,
        }));
        Ok(Measured {
            kernel: kernel.to_string(),
            ms,
            rate: rate(ms),
        })
    }
}

fn run(d: &CudaDriver) -> BenchResult<()> {
    let wasm = kernel_bench_wasm()?;
    let seed = seed("COOP_KERNELS_SEED")?;
    let info = d.device().clone();
    let sandbox = if cfg!(feature = "bench-unsandboxed") {
        "off"
    } else {
        "on"
    };
    println!(
        "coop_kernels on {}, seed {seed}, sandbox {sandbox}{}",
        device_sm(&info),
        if sandbox == "off" {
            " (bench-unsandboxed: no memory checks, no fuel)"
        } else {
            ""
        }
    );
    println!(
        "medians of {} samples of {} launches ({} for the SGEMMs), after warm-up",
        REPEATS.samples, REPEATS.launches, GEMM_REPEATS.launches
    );
    let guest = GuestMemory::new(d, GUEST_BYTES, &wasm)?;
    let mut bench = Bench {
        d,
        stream: d.create_stream().map_err(|e| e.to_string())?,
        guest,
        wasm,
        seed,
        rows: Vec::new(),
    };
    let mut ratios = Vec::new();
    ratios.push(reduction(&mut bench)?);
    ratios.extend(softmax(&mut bench)?);
    ratios.push(sgemm(&mut bench)?);

    println!("\n| comparison | Rust / built-in | target | met |");
    println!("| --- | ---: | ---: | --- |");
    for r in &ratios {
        println!(
            "| {} | {:.3}x | {} | {} |",
            r["comparison"].as_str().unwrap_or(""),
            r["ratio"].as_f64().unwrap_or(f64::NAN),
            r["target"].as_f64().map_or("-".into(), |t| format!("{t}x")),
            r["met"]
                .as_bool()
                .map_or("-", |m| if m { "yes" } else { "no" })
        );
    }
    let record = json!({
        "bench": "coop_kernels",
        "when": utc_timestamp(),
        "command": command_line(),
        "device": DeviceRecord::new(&info),
        "sandbox": sandbox,
        "seed": seed,
        "warmup": REPEATS.warmup,
        "samples": REPEATS.samples,
        "launches_per_sample": REPEATS.launches,
        "gemm_launches_per_sample": GEMM_REPEATS.launches,
        "ratios": ratios,
        "rows": bench.rows,
    });
    let file = if sandbox == "off" {
        "coop_kernels_unsandboxed.json"
    } else {
        "coop_kernels.json"
    };
    let path = common::write_record(file, &record)?;
    println!("\nwrote {}", path.display());
    Ok(())
}

/// A ratio of the summary: `rust / builtin` of the rates, held to
/// `target` when there is one.
fn ratio(comparison: &str, rust: &Measured, builtin: &Measured, target: Option<f64>) -> Value {
    let ratio = rust.rate / builtin.rate;
    json!({
        "comparison": comparison, "rust": rust.kernel, "builtin": builtin.kernel,
        "ratio": ratio, "target": target, "met": target.map(|t| ratio >= t),
    })
}

fn print_rows(title: &str, unit: &str, rows: &[&Measured]) {
    println!("\n{title}:");
    for m in rows {
        println!(
            "  {:<48} {:>9.4} ms  {:>8.1} {unit}",
            m.kernel, m.ms, m.rate
        );
    }
}

fn target_line(what: &str, r: &Value) {
    let ratio = r["ratio"].as_f64().unwrap_or(f64::NAN);
    match (r["target"].as_f64(), r["met"].as_bool()) {
        (Some(t), Some(met)) => println!(
            "  {what}: {ratio:.3}x (target {t}x: {})",
            if met { "met" } else { "not met" }
        ),
        _ => println!("  {what}: {ratio:.3}x"),
    }
}

/// The worst of `check(i)` over `0..n`, split over the host's cores.
fn worst_over(n: usize, check: impl Fn(usize) -> BenchResult<f64> + Sync) -> BenchResult<f64> {
    let parts = over_cores(n, |part| {
        part.into_iter()
            .try_fold(0.0f64, |w, i| Ok::<_, String>(w.max(check(i)?)))
    })?;
    parts
        .into_iter()
        .try_fold(0.0f64, |w, part| Ok(w.max(part?)))
}

/// `|got - want|` over `scale`; past [`TOLERANCE`], an error naming the
/// value `what()`.
fn relative(what: impl FnOnce() -> String, got: f32, want: f64, scale: f64) -> BenchResult<f64> {
    let error = (f64::from(got) - want).abs() / scale;
    if error <= TOLERANCE {
        Ok(error)
    } else {
        Err(format!(
            "{} = {got}, want {want} (error {error:.2e} of {scale:.4e})",
            what()
        ))
    }
}

fn reduction(b: &mut Bench<'_>) -> BenchResult<Value> {
    let (x_at, y_at) = (DATA, DATA + REDUCE_N * 4);
    let out_at = y_at + REDUCE_ROWS * 4;
    let cols = REDUCE_N / REDUCE_ROWS;
    let x: Vec<f32> = (0..REDUCE_N)
        .map(|i| uniform(b.seed, 0, i, -1.0, 3.0))
        .collect();
    b.guest.write_f32s(b.d, x_at, &x)?;
    let row_sums: Vec<(f64, f64)> = x
        .chunks(cols)
        .map(|r| {
            r.iter().fold((0.0, 0.0), |(s, m), &v| {
                (s + f64::from(v), m + f64::from(v).abs())
            })
        })
        .collect();
    let total = row_sums.iter().map(|r| r.0).sum::<f64>();
    let magnitude = row_sums.iter().map(|r| r.1).sum::<f64>();
    let gbs = |ms: f64| (REDUCE_N * 4) as f64 / (ms * 1e-3) / 1e9;
    let section = "reduction";

    let op = |outer: usize, n: usize| TensorOp::Reduce {
        op: ReduceOp::Sum,
        x: b.guest.ptr(x_at),
        y: b.guest.ptr(y_at),
        outer: outer as u64,
        n: n as u64,
        inner: 1,
    };
    let rows_op = op(REDUCE_ROWS, cols);
    let one_op = op(1, REDUCE_N);
    let rows_kernel = Builtin::load(b.d, &rows_op)?;
    let rows = b.measure(
        section,
        &format!("built-in reduce_sum [{REDUCE_ROWS}, {cols}], last axis"),
        &rows_kernel.launch(),
        REPEATS,
        |b| {
            let got = b.guest.read_f32s(b.d, y_at, REDUCE_ROWS)?;
            worst_over(REDUCE_ROWS, |r| {
                relative(|| format!("y[{r}]"), got[r], row_sums[r].0, row_sums[r].1)
            })
        },
        ("GB/s", &gbs),
    )?;
    let one_kernel = Builtin::load(b.d, &one_op)?;
    let one = b.measure(
        section,
        &format!("built-in reduce_sum [{REDUCE_N}] -> 1 (one block)"),
        &one_kernel.launch(),
        REPEATS,
        |b| {
            let got = b.guest.read_f32s(b.d, y_at, 1)?;
            relative(|| "y[0]".into(), got[0], total, magnitude)
        },
        ("GB/s", &gbs),
    )?;

    let kernel = b.wasm_kernel("block_reduce_f32")?;
    let info = b.d.device();
    let blocks = info.multiprocessor_count * (info.max_threads_per_multiprocessor / BLOCK).max(1);
    let launch = kernel.launch(
        &b.guest,
        &[
            KernelParam::I32(x_at as i32),
            KernelParam::I32(REDUCE_N as i32),
            KernelParam::I32(out_at as i32),
        ],
        Dim3::linear(blocks),
        Dim3::linear(BLOCK),
        BLOCK_REDUCE_SHARED,
    );
    b.guest.zero(b.d, out_at, 4)?;
    let rust = b.measure(
        section,
        &format!("Rust block_reduce_f32, {blocks} x {BLOCK} (grid-stride)"),
        &launch,
        REPEATS,
        |b| {
            let got = b.guest.read_f32s(b.d, out_at, 1)?;
            relative(|| "out[0]".into(), got[0], total, magnitude)
        },
        ("GB/s", &gbs),
    )?;
    print_rows(
        &format!("Reduction of {REDUCE_N} f32 ({} MiB)", (REDUCE_N * 4) >> 20),
        "GB/s",
        &[&rows, &one, &rust],
    );
    let r = ratio("reduction bandwidth", &rust, &rows, Some(0.85));
    target_line("Rust / built-in rows, bandwidth", &r);
    Ok(r)
}

fn softmax(b: &mut Bench<'_>) -> BenchResult<Vec<Value>> {
    let kernel = b.wasm_kernel("softmax_rows")?;
    let window = kernel.translated.stack_window.map_or(0, |w| w.bytes);
    let mut ratios = Vec::new();
    for (shape, (rows, cols)) in SOFTMAX.into_iter().enumerate() {
        let (x_at, y_at) = (DATA, DATA + rows * cols * 4);
        let x: Vec<f32> = (0..rows * cols)
            .map(|i| uniform(b.seed, 1 + shape as u64, i, -2.0, 2.0))
            .collect();
        b.guest.write_f32s(b.d, x_at, &x)?;
        let gbs = |ms: f64| (rows * cols * 8) as f64 / (ms * 1e-3) / 1e9;
        let section = format!("softmax {rows}x{cols}");
        let check = |b: &Bench<'_>| {
            let got = b.guest.read_f32s(b.d, y_at, rows * cols)?;
            worst_over(rows, |r| {
                let (x, y) = (&x[r * cols..][..cols], &got[r * cols..][..cols]);
                let max = x
                    .iter()
                    .fold(f64::NEG_INFINITY, |m, &v| m.max(f64::from(v)));
                let sum: f64 = x.iter().map(|&v| (f64::from(v) - max).exp()).sum();
                x.iter()
                    .zip(y)
                    .enumerate()
                    .try_fold(0.0f64, |w, (j, (&v, &g))| {
                        let want = (f64::from(v) - max).exp() / sum;
                        let e = relative(|| format!("y[{r}][{j}]"), g, want, want)?;
                        Ok::<_, String>(w.max(e))
                    })
            })
        };
        let builtin_kernel = Builtin::load(
            b.d,
            &TensorOp::Softmax {
                x: b.guest.ptr(x_at),
                y: b.guest.ptr(y_at),
                rows: rows as u64,
                cols: cols as u64,
            },
        )?;
        b.guest.zero(b.d, y_at, rows * cols * 4)?;
        let builtin = b.measure(
            &section,
            &format!("built-in softmax ({})", builtin_kernel.plan.kernel.entry),
            &builtin_kernel.launch(),
            REPEATS,
            check,
            ("GB/s", &gbs),
        )?;
        let warps_per_block = BLOCK / 32;
        let launch = kernel.launch(
            &b.guest,
            &[
                KernelParam::I32(x_at as i32),
                KernelParam::I32(y_at as i32),
                KernelParam::I32(rows as i32),
                KernelParam::I32(cols as i32),
            ],
            Dim3::linear((rows as u32).div_ceil(warps_per_block)),
            Dim3::linear(BLOCK),
            0,
        );
        b.guest.zero(b.d, y_at, rows * cols * 4)?;
        let rust = b.measure(
            &section,
            &format!(
                "Rust softmax_rows (a warp per row{})",
                if cols <= 1024 { "" } else { ", two passes" }
            ),
            &launch,
            REPEATS,
            check,
            ("GB/s", &gbs),
        )?;
        print_rows(
            &format!("Row softmax {rows} x {cols} f32 (GB/s of x read and y written)"),
            "GB/s",
            &[&builtin, &rust],
        );
        let r = ratio(
            &format!("softmax {rows}x{cols} bandwidth"),
            &rust,
            &builtin,
            (shape == 0).then_some(0.8),
        );
        target_line("Rust / built-in, bandwidth", &r);
        ratios.push(r);
    }
    println!("  (softmax_rows' stack window: {window} bytes; 0: every access is a global one)");
    Ok(ratios)
}

/// `len` random `f32`s in `[-1, 1)` (stream `stream` of the bench's seed),
/// written to the guest's memory at `at`.
fn random_f32s(b: &Bench<'_>, at: usize, len: usize, stream: u64) -> BenchResult<Vec<f32>> {
    let v: Vec<f32> = (0..len)
        .map(|i| uniform(b.seed, stream, i, -1.0, 1.0))
        .collect();
    b.guest.write_f32s(b.d, at, &v)?;
    Ok(v)
}

/// `sgemm_tiled`'s launch for `C [m, n] = A [m, k] @ B [k, n]` at guest
/// addresses `[a, b, c]`: a block per 128 x 128 tile of C.
fn sgemm_launch<'k>(
    b: &Bench<'_>,
    kernel: &'k WasmKernel<CudaDriver>,
    at: [usize; 3],
    [m, n, k]: [usize; 3],
) -> Launch<'k, CudaDriver> {
    let [a_at, b_at, c_at] = at;
    kernel.launch(
        &b.guest,
        &[a_at, b_at, c_at, m, n, k].map(|v| KernelParam::I32(v as i32)),
        Dim3 {
            x: (n as u32).div_ceil(SGEMM_TILE),
            y: (m as u32).div_ceil(SGEMM_TILE),
            z: 1,
        },
        Dim3::linear(BLOCK),
        SGEMM_SHARED,
    )
}

/// `sgemm_tiled` at a shape that is no multiple of its tiles, each entry
/// of C checked (the timed shape takes only the inner tiles' path):
/// blocks inside C and past its edges, and a depth that ends within a
/// step. Its matrices lie where the timed ones go: run it first.
fn sgemm_edges(b: &Bench<'_>, kernel: &WasmKernel<CudaDriver>) -> BenchResult<()> {
    let (m, n, k) = (300, 280, 44);
    let (a_at, b_at, c_at) = (DATA, DATA + m * k * 4, DATA + (m * k + k * n) * 4);
    let a = random_f32s(b, a_at, m * k, 12)?;
    let bm = random_f32s(b, b_at, k * n, 13)?;
    // C's words past its end are checked too: none may be written.
    let c_words = m * n + 64;
    b.guest.write_f32s(b.d, c_at, &vec![-7.0; c_words])?;
    let launch = sgemm_launch(b, kernel, [a_at, b_at, c_at], [m, n, k]);
    run_once(b.d, &b.stream, &launch)?;
    b.guest.check_status(b.d, "sgemm_tiled 300x280x44")?;
    let c = b.guest.read_f32s(b.d, c_at, c_words)?;
    for i in 0..m {
        for j in 0..n {
            let want: f64 = (0..k)
                .map(|l| f64::from(a[i * k + l]) * f64::from(bm[l * n + j]))
                .sum();
            let got = f64::from(c[i * n + j]);
            if (got - want).abs() > 1e-4 {
                return Err(format!(
                    "sgemm_tiled 300x280x44: C[{i}][{j}] = {got}, not {want}"
                ));
            }
        }
    }
    if c[m * n..].iter().any(|&v| v != -7.0) {
        return Err("sgemm_tiled 300x280x44 wrote past C".into());
    }
    println!("  sgemm_tiled at 300 x 280 x 44 (edges): every entry within 1e-4");
    Ok(())
}

fn sgemm(b: &mut Bench<'_>) -> BenchResult<Value> {
    // First: its matrices take the place of the timed ones.
    let kernel = b.wasm_kernel("sgemm_tiled")?;
    sgemm_edges(b, &kernel)?;
    let n = GEMM;
    let (a_at, b_at, c_at) = (DATA, DATA + n * n * 4, DATA + 2 * n * n * 4);
    let a = random_f32s(b, a_at, n * n, 10)?;
    let bm = random_f32s(b, b_at, n * n, 11)?;
    let picks: Vec<(usize, usize)> = (0..GEMM_CHECKED)
        .map(|s| {
            let r = mix(b.seed ^ mix(0xc0de ^ s as u64));
            ((r % n as u64) as usize, ((r >> 32) % n as u64) as usize)
        })
        .collect();
    let want: Vec<f64> = picks
        .iter()
        .map(|&(i, j)| {
            (0..n)
                .map(|k| f64::from(a[i * n + k]) * f64::from(bm[k * n + j]))
                .sum()
        })
        .collect();
    let norm = want.iter().map(|w| w * w).sum::<f64>().sqrt();
    let check = |b: &Bench<'_>| {
        let c = b.guest.read_f32s(b.d, c_at, n * n)?;
        let diff = picks
            .iter()
            .zip(&want)
            .map(|(&(i, j), w)| (f64::from(c[i * n + j]) - w).powi(2))
            .sum::<f64>()
            .sqrt();
        let error = diff / norm;
        if error <= TOLERANCE {
            Ok(error)
        } else {
            Err(format!(
                "relative Frobenius error {error:.2e} over {GEMM_CHECKED} sampled entries"
            ))
        }
    };
    let tflops = |ms: f64| 2.0 * (n * n * n) as f64 / (ms * 1e-3) / 1e12;
    let section = format!("sgemm {n}x{n}x{n}");
    let builtin_kernel = Builtin::load(
        b.d,
        &TensorOp::Gemm(Gemm {
            precision: GemmPrecision::F32,
            batch: 1,
            m: n as u64,
            n: n as u64,
            k: n as u64,
            a: b.guest.ptr(a_at),
            b: b.guest.ptr(b_at),
            c: b.guest.ptr(c_at),
            lda: n as u64,
            ldb: n as u64,
            ldc: n as u64,
            stride_a: 0,
            stride_b: 0,
            stride_c: (n * n) as u64,
            alpha: 1.0,
            beta: 0.0,
        }),
    )?;
    b.guest.zero(b.d, c_at, n * n * 4)?;
    let builtin = b.measure(
        &section,
        &format!("built-in {} (f32)", builtin_kernel.plan.kernel.entry),
        &builtin_kernel.launch(),
        GEMM_REPEATS,
        check,
        ("TFLOP/s", &tflops),
    )?;
    let launch = sgemm_launch(b, &kernel, [a_at, b_at, c_at], [n, n, n]);
    b.guest.zero(b.d, c_at, n * n * 4)?;
    let rust = b.measure(
        &section,
        "Rust sgemm_tiled (128 x 128 tiles, 8 x 8 a thread)",
        &launch,
        GEMM_REPEATS,
        check,
        ("TFLOP/s", &tflops),
    )?;
    print_rows(
        &format!("SGEMM {n} x {n} x {n}, f32 (TFLOP/s)"),
        "TFLOP/s",
        &[&builtin, &rust],
    );
    let r = ratio("sgemm 4096^3 TFLOP/s", &rust, &builtin, Some(0.5));
    target_line("Rust / built-in, TFLOP/s", &r);
    Ok(r)
}
