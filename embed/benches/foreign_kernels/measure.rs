//! The bench on CUDA: each program checked against the `-fmad=false` twin
//! and timed against the default twin; the small kernel's launch rate; the
//! first `kernel_get`'s work against loading nvcc's PTX. Prints the tables
//! and writes the record.

use std::{collections::HashMap, time::Instant};

use serde_json::{Value, json};
use tensorwasm_core::{
    GpuDriver, KernelParam, LaunchConfig,
    lower::{
        Lowerer,
        translate::{KernelLimits, function_by_export, translate_kernel_variant},
    },
};
use tensorwasm_cuda::CudaDriver;
use tensorwasm_embed::kernel::{KernelTarget, ptx_target};

use crate::common::{
    DeviceRecord, command_line,
    kernels::{GuestMemory, KERNEL_GET_VARIANT, Launch, WasmKernel},
    stats::median,
    utc_timestamp, write_record,
};
use crate::launch_sequence::{self, SequenceRepeats, geometric_mean, launch_rate};
use crate::programs::{self, Arg, Program, Size, Source, Step};
use crate::{BenchResult, first_difference, load_kernels, modules, outputs, reset, wasm_params};

/// nvcc's PTX of the twins, default flags (timed).
const TWINS_PTX: &str = include_str!("../../../kernels/bench/foreign/twins.ptx");
/// The same with `-fmad=false` (checked bit for bit).
const TWINS_NOFMA_PTX: &str = include_str!("../../../kernels/bench/foreign/twins.nofma.ptx");

/// Runs per program: one untimed, then samples of whole runs.
const REPEATS: SequenceRepeats = SequenceRepeats {
    warmup: 1,
    samples: 5,
    runs: 1,
};
/// Launches of the small kernel per launch-rate sample, and samples.
const RATE_LAUNCHES: usize = 5000;
const RATE_SAMPLES: usize = 5;
/// First-load repetitions per kernel (each on a driver with no JIT cache).
const LOAD_REPS: usize = 3;

/// Each twin entry of one PTX module, by name.
struct Twins<D: GpuDriver> {
    functions: HashMap<&'static str, D::Function>,
    _module: D::Module,
}

impl<D: GpuDriver> Twins<D> {
    fn load(d: &D, ptx: &str, names: &[&'static str]) -> BenchResult<Twins<D>> {
        let module = d.load_ptx(ptx).map_err(|e| e.to_string())?;
        let mut functions = HashMap::new();
        for &name in names {
            let f = d
                .function(&module, name)
                .map_err(|e| format!("twin {name}: {e}"))?;
            functions.insert(name, f);
        }
        Ok(Twins {
            functions,
            _module: module,
        })
    }

    /// `steps` as raw launches of the twins over `guest`.
    fn sequence(&self, guest: &GuestMemory<D>, steps: &[Step]) -> Vec<Launch<'_, D>> {
        steps
            .iter()
            .map(|s| Launch {
                function: &self.functions[s.kernel],
                config: LaunchConfig {
                    grid: s.grid,
                    block: s.block,
                    shared_mem_bytes: 0,
                },
                params: s
                    .args
                    .iter()
                    .map(|a| match *a {
                        Arg::Ptr(at) => KernelParam::Ptr(guest.ptr(at)),
                        Arg::I32(v) => KernelParam::I32(v),
                        Arg::F32(v) => KernelParam::F32(v),
                    })
                    .collect(),
            })
            .collect()
    }
}

/// The Wasm side of `steps` over `guest`.
fn wasm_sequence<'k, D: KernelTarget>(
    kernels: &'k HashMap<&'static str, WasmKernel<D>>,
    guest: &GuestMemory<D>,
    steps: &[Step],
) -> Vec<Launch<'k, D>> {
    steps
        .iter()
        .map(|s| kernels[s.kernel].launch(guest, &wasm_params(&s.args), s.grid, s.block, 0))
        .collect()
}

/// The largest |a - b| over every output (NaNs ignored).
fn max_abs_diff(a: &[Vec<f32>], b: &[Vec<f32>]) -> f64 {
    a.iter()
        .flatten()
        .zip(b.iter().flatten())
        .map(|(x, y)| (f64::from(*x) - f64::from(*y)).abs())
        .fold(0.0, f64::max)
}

pub fn on_gpu(d: &CudaDriver) -> BenchResult<()> {
    let seed = crate::common::inputs::seed("FOREIGN_KERNELS_SEED")?;
    let info = d.device().clone();
    println!(
        "foreign_kernels on {} (sm_{}{}), seed {seed}",
        info.name,
        info.compute_capability.map_or(0, |c| c.0),
        info.compute_capability.map_or(0, |c| c.1)
    );
    let stream = d.create_stream().map_err(|e| e.to_string())?;
    let (modules, missing) = modules()?;
    for m in &missing {
        println!("  {m}");
    }
    let programs = programs::programs(Size::Full, seed);
    let mut names: Vec<&'static str> = programs
        .iter()
        .filter(|p| modules.iter().any(|(s, _)| *s == p.source))
        .flat_map(|p| p.steps.iter().map(|s| s.kernel))
        .collect();
    names.sort_unstable();
    names.dedup();
    let fast = Twins::load(d, TWINS_PTX, &names)?;
    let exact = Twins::load(d, TWINS_NOFMA_PTX, &names)?;

    let mut rows = Vec::new();
    let mut failures = Vec::new();
    let mut ratios = Vec::new();
    let mut rate = Value::Null;
    println!(
        "\n{:<20} {:<5} {:<34} {:>8} {:>11} {:>11} {:>10}  check",
        "program", "from", "shape", "launches", "nvcc ms", "ours ms", "ours/nvcc"
    );
    for (source, wasm) in &modules {
        let mine: Vec<&Program> = programs.iter().filter(|p| p.source == *source).collect();
        let bytes = mine.iter().map(|p| p.end).max().unwrap_or(programs::DATA);
        let guest = GuestMemory::new(d, bytes, wasm)?;
        let kernels = load_kernels(d, wasm, mine.iter().copied())?;
        for p in mine {
            let row = measure(
                d,
                &stream,
                &guest,
                &kernels,
                &fast,
                &exact,
                p,
                &mut failures,
            )?;
            if let Some(r) = row["ours_over_nvcc"].as_f64() {
                ratios.push(r);
            }
            rows.push(row);
            if p.name == "fdtd-2d" {
                rate = small_launches(d, &stream, &guest, &kernels, &fast, p)?;
            }
        }
    }
    let geomean = geometric_mean(&ratios);
    println!(
        "\ngeometric mean of ours / nvcc time over {} programs: {geomean:.3}",
        ratios.len()
    );

    let first_load = first_loads(d, &modules, &programs, &names)?;
    let record = json!({
        "bench": "foreign_kernels",
        "when": utc_timestamp(),
        "command": command_line(),
        "device": DeviceRecord::new(&info),
        "seed": seed,
        "repeats": {"warmup_runs": REPEATS.warmup, "samples": REPEATS.samples},
        "twins": "kernels/bench/foreign/twins.cu by nvcc 13.0 -O3 -arch=sm_90: twins.ptx timed, twins.nofma.ptx (-fmad=false) checked bit for bit",
        "wasm": "kernels/bench/foreign/wasm.c by zig cc 0.15.1 -O3 (scripts/build-foreign-kernels.sh); embed/benches/foreign_kernels.wat; guest/examples/kernel-bench",
        "skipped": missing,
        "programs": rows,
        "geomean_ours_over_nvcc_time": geomean,
        "small_kernel_launches": rate,
        "first_kernel_get_cold": first_load,
        "failures": failures,
    });
    let path = write_record("foreign_kernels.json", &record)?;
    println!("\nwrote {}", path.display());
    if failures.is_empty() {
        Ok(())
    } else {
        Err(format!("output checks failed:\n{}", failures.join("\n")))
    }
}

/// Checks `p` (Wasm against the exact twin, bit for bit), then times the
/// fast twin and the Wasm kernels; prints the row and returns its record.
#[allow(clippy::too_many_arguments)]
fn measure(
    d: &CudaDriver,
    stream: &<CudaDriver as GpuDriver>::Stream,
    guest: &GuestMemory<CudaDriver>,
    kernels: &HashMap<&'static str, WasmKernel<CudaDriver>>,
    fast: &Twins<CudaDriver>,
    exact: &Twins<CudaDriver>,
    p: &Program,
    failures: &mut Vec<String>,
) -> BenchResult<Value> {
    let ours = wasm_sequence(kernels, guest, &p.steps);
    let nvcc = fast.sequence(guest, &p.steps);
    let nvcc_exact = exact.sequence(guest, &p.steps);
    let run = |sequence: &[Launch<'_, CudaDriver>], what: &str| -> BenchResult<Vec<Vec<f32>>> {
        reset(d, guest, p)?;
        launch_sequence::run(d, stream, sequence)?;
        guest.check_status(d, what)?;
        outputs(d, guest, p)
    };
    reset(d, guest, p)?;
    let before = outputs(d, guest, p)?;
    let want = run(&nvcc_exact, "the -fmad=false twin")?;
    let got = run(&ours, "the Wasm kernels")?;
    let fused = run(&nvcc, "the twin")?;
    let check = match first_difference(p, &got, &want, "nvcc -fmad=false") {
        None if got == before => {
            let why = format!("{}: the run changed no output", p.name);
            failures.push(why.clone());
            format!("FAILED: {why}")
        }
        None => "bit-identical to nvcc -fmad=false".to_string(),
        Some(why) => {
            failures.push(why.clone());
            format!("FAILED: {why}")
        }
    };
    let repeats = SequenceRepeats {
        runs: p.runs_per_sample,
        ..REPEATS
    };
    let nvcc_ms = launch_sequence::time(d, stream, &nvcc, repeats, || reset(d, guest, p))?;
    let ours_ms = launch_sequence::time(d, stream, &ours, repeats, || reset(d, guest, p))?;
    guest.check_status(d, p.name)?;
    let (nvcc_median, ours_median) = (median(&nvcc_ms), median(&ours_ms));
    let ratio = ours_median / nvcc_median;
    println!(
        "{:<20} {:<5} {:<34} {:>8} {nvcc_median:>11.3} {ours_median:>11.3} {ratio:>9.3}x  {}",
        p.name,
        p.source.label(),
        p.shape,
        p.steps.len(),
        if check.starts_with("FAILED") {
            "FAILED"
        } else {
            "same bits"
        }
    );
    Ok(json!({
        "program": p.name,
        "source": p.source.label(),
        "shape": p.shape,
        "launches": p.steps.len(),
        "runs_per_sample": p.runs_per_sample,
        "check": check,
        "fused_twin_max_abs_diff": max_abs_diff(&fused, &want),
        "nvcc_ms": nvcc_median,
        "ours_ms": ours_median,
        "ours_over_nvcc": ratio,
        "nvcc_ms_samples": nvcc_ms,
        "ours_ms_samples": ours_ms,
    }))
}

/// Item 2: FDTD's third step on 64 x 64, launched many times, ours and
/// the twin, launch to completion; prints and returns the record.
fn small_launches(
    d: &CudaDriver,
    stream: &<CudaDriver as GpuDriver>::Stream,
    guest: &GuestMemory<CudaDriver>,
    kernels: &HashMap<&'static str, WasmKernel<CudaDriver>>,
    fast: &Twins<CudaDriver>,
    fdtd: &Program,
) -> BenchResult<Value> {
    let step = programs::small_kernel(fdtd);
    reset(d, guest, fdtd)?;
    let steps = std::slice::from_ref(&step);
    let ours = &wasm_sequence(kernels, guest, steps)[0];
    let nvcc = &fast.sequence(guest, steps)[0];
    let nvcc_rate = launch_rate(d, stream, nvcc, RATE_LAUNCHES, RATE_SAMPLES)?;
    let ours_rate = launch_rate(d, stream, ours, RATE_LAUNCHES, RATE_SAMPLES)?;
    guest.check_status(d, "the small kernel")?;
    let (nb, ob) = (
        median(&nvcc_rate.back_to_back_us),
        median(&ours_rate.back_to_back_us),
    );
    let (nw, ow) = (
        median(&nvcc_rate.each_waited_us),
        median(&ours_rate.each_waited_us),
    );
    println!(
        "\n{RATE_LAUNCHES} launches of {} on 64 x 64 (16 blocks of 32 x 8), us per launch:",
        step.kernel
    );
    println!(
        "  {:<34} {:>9} {:>9} {:>10}",
        "", "nvcc", "ours", "ours/nvcc"
    );
    println!(
        "  {:<34} {nb:>9.2} {ob:>9.2} {:>9.3}x",
        "back to back, one synchronize",
        ob / nb
    );
    println!(
        "  {:<34} {nw:>9.2} {ow:>9.2} {:>9.3}x",
        "each launch waited for",
        ow / nw
    );
    Ok(json!({
        "kernel": step.kernel,
        "grid": "64 x 64 threads, blocks of 32 x 8",
        "launches_per_sample": RATE_LAUNCHES,
        "note": "raw driver launches on one stream, host wall clock; the Wasm kernel's launch carries its hidden parameters (memory, status word, fuel, time limit, grid) but not wasi_cuda's decoding",
        "back_to_back_us": {"nvcc": nb, "ours": ob, "ours_over_nvcc": ob / nb,
            "nvcc_samples": nvcc_rate.back_to_back_us, "ours_samples": ours_rate.back_to_back_us},
        "each_waited_us": {"nvcc": nw, "ours": ow, "ours_over_nvcc": ow / nw,
            "nvcc_samples": nvcc_rate.each_waited_us, "ours_samples": ours_rate.each_waited_us},
    }))
}

/// Item 3: each Wasm kernel's first load with no JIT cache (translate,
/// lower, JIT the variant `kernel_get` makes), its translation and
/// lowering timed alone too, against loading nvcc's PTX of the same
/// kernel alone (its entry cut out of the twins' PTX: one module a
/// kernel, as ours are), and of every twin as one module, with no JIT
/// cache.
fn first_loads(
    d: &CudaDriver,
    modules: &[(Source, Vec<u8>)],
    programs: &[Program],
    twin_names: &[&'static str],
) -> BenchResult<Value> {
    let cold = d.clone().with_jit_cache(None);
    let lowerer = ptx_target(d.device()).map_err(|e| e.to_string())?;
    let ms = |t: Instant| t.elapsed().as_secs_f64() * 1e3;
    let mut kernels = Vec::new();
    let (mut total, mut nvcc_each_total) = (0.0, 0.0);
    for (source, wasm) in modules {
        let mut names: Vec<&'static str> = programs
            .iter()
            .filter(|p| p.source == *source)
            .flat_map(|p| p.steps.iter().map(|s| s.kernel))
            .collect();
        names.sort_unstable();
        names.dedup();
        for name in names {
            let (mut load_ms, mut translate_ms, mut lower_ms) =
                (Vec::new(), Vec::new(), Vec::new());
            let mut ptx_lines = 0;
            for _ in 0..LOAD_REPS {
                let start = Instant::now();
                let index = function_by_export(wasm, name).map_err(|e| e.to_string())?;
                let translated =
                    translate_kernel_variant(wasm, index, KernelLimits::HOST, KERNEL_GET_VARIANT)
                        .map_err(|e| e.to_string())?;
                translate_ms.push(ms(start));
                let start = Instant::now();
                let ptx = lowerer
                    .lower(&translated.name, &translated.function, translated.abi)
                    .map_err(|e| e.to_string())?;
                lower_ms.push(ms(start));
                ptx_lines = ptx.lines().count();
                let start = Instant::now();
                drop(WasmKernel::load(&cold, wasm, name)?);
                load_ms.push(ms(start));
            }
            let alone = twin_ptx_alone(TWINS_PTX, name)?;
            let mut twin_ms = Vec::new();
            for _ in 0..LOAD_REPS {
                let start = Instant::now();
                drop(Twins::load(&cold, &alone, &[name])?);
                twin_ms.push(ms(start));
            }
            total += median(&load_ms);
            nvcc_each_total += median(&twin_ms);
            kernels.push(json!({
                "kernel": name, "source": source.label(),
                "first_load_ms": median(&load_ms), "translate_ms": median(&translate_ms),
                "lower_ms": median(&lower_ms), "first_load_ms_samples": load_ms,
                "nvcc_alone_ms": median(&twin_ms), "nvcc_alone_ms_samples": twin_ms,
                "ours_over_nvcc_alone": median(&load_ms) / median(&twin_ms),
                "ptx_lines": ptx_lines, "nvcc_ptx_lines": alone.lines().count(),
            }));
        }
    }
    let mut nvcc_ms = Vec::new();
    for _ in 0..LOAD_REPS {
        let start = Instant::now();
        drop(Twins::load(&cold, TWINS_PTX, twin_names)?);
        nvcc_ms.push(ms(start));
    }
    let nvcc = median(&nvcc_ms);
    println!(
        "\nfirst kernel_get, no JIT cache (translate, lower, JIT), {} kernels: {total:.1} ms in all \
         ({:.2} ms each on average); module_load_ptx of nvcc's PTX of each kernel alone: \
         {nvcc_each_total:.1} ms in all ({:.2}x); of all {} twins as one module: {nvcc:.1} ms \
         ({:.2}x)",
        kernels.len(),
        total / kernels.len().max(1) as f64,
        total / nvcc_each_total,
        twin_names.len(),
        total / nvcc
    );
    Ok(json!({
        "jit_cache": "none: a driver without TENSORWASM_JIT_CACHE's cache for these loads",
        "cuda_cache_disable": std::env::var("CUDA_CACHE_DISABLE").ok(),
        "variant": format!("{KERNEL_GET_VARIANT:?}"),
        "ours_total_ms": total,
        "nvcc_alone_total_ms": nvcc_each_total,
        "ours_over_nvcc_alone": total / nvcc_each_total,
        "nvcc_module_load_ms": nvcc,
        "nvcc_module_load_ms_samples": nvcc_ms,
        "ours_over_nvcc": total / nvcc,
        "kernels": kernels,
    }))
}

/// nvcc's PTX of the twin `name` alone: the module's header (everything
/// before the first `// .globl`) and that entry's part.
fn twin_ptx_alone(ptx: &str, name: &str) -> BenchResult<String> {
    let first = ptx
        .find("// .globl")
        .ok_or("the twins' PTX has no `// .globl` entries")?;
    let header = &ptx[..first];
    let entry = format!(".entry {name}(");
    let part = ptx[first..]
        .split_inclusive('\n')
        .fold(Vec::<String>::new(), |mut parts, line| {
            if line.trim_start().starts_with("// .globl") || parts.is_empty() {
                parts.push(String::new());
            }
            if let Some(last) = parts.last_mut() {
                last.push_str(line);
            }
            parts
        })
        .into_iter()
        .find(|p| p.contains(&entry))
        .ok_or_else(|| format!("the twins' PTX has no entry {name}"))?;
    Ok(format!("{header}{part}"))
}
