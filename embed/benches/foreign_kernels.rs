//! Kernels nobody shaped for the translator, each beside its CUDA C twin
//! (issue 30, items 2 to 5), on device 0:
//!
//! - C kernels written as CUDA C is written (PolyBench/GPU's FDTD-2D,
//!   Jacobi-2D, Heat-3D on a 3-D grid, 2-D and 3-D convolutions, LU with
//!   2n small launches, a triangular solve, ATAX's, BICG's, MVT's and
//!   GESUMMV's matrix-vector products, the naive GEMM, 2MM, 3MM, SYRK,
//!   SYR2K, Gram-Schmidt with 3n launches, DOITGEN, Jacobi-1D, covariance,
//!   correlation: `kernels/bench/foreign/`),
//!   compiled to Wasm by zig cc -O3; hand-written WAT kernels whose loops
//!   count up and down with the exit test at the top or the bottom
//!   (`foreign_kernels.wat`); two Rust kernels (`guest/examples/kernel-bench`:
//!   `saxpy`, `gather_regs`). Each Wasm kernel is translated by export name,
//!   lowered and launched over one device buffer that stands for the
//!   guest's memory, exactly as `kernel_get` and `launch` do it (every
//!   check on), with its twin's grid and launch sequence; the twin
//!   (`kernels/bench/foreign/twins.cu`, nvcc 13.0) is launched raw over the
//!   same memory.
//! - Checked: each program's outputs from the Wasm kernels are the bits of
//!   the twin built with `-fmad=false` (every operation rounded once, as
//!   Wasm rounds it); timed: against the twin with nvcc's default flags
//!   (fused multiply-adds). Seeded random inputs (the seed printed), a
//!   warm-up run, samples of whole runs between events (inputs written
//!   before each, untimed), medians; a table of ours / nvcc time and the
//!   geometric mean.
//! - Item 2: thousands of launches of one small kernel (FDTD's third step
//!   on 64 x 64), launch to completion, the Wasm kernel against its twin
//!   launched raw: back to back (one synchronize at the end) and each
//!   waited for.
//! - Item 3: the first `kernel_get`'s work with no JIT cache (translate,
//!   lower, JIT the PTX: `WasmKernel::load` on a driver without
//!   `TENSORWASM_JIT_CACHE`, and `CUDA_CACHE_DISABLE=1` unless set) for
//!   every kernel, against `module_load_ptx` of nvcc's PTX of all twins.
//!
//! Writes `$OUT/foreign_kernels.json` (or `./foreign_kernels.json`);
//! exits 1 when any output check fails (after measuring the rest).
//!
//! ```sh
//! scripts/build-foreign-kernels.sh --wasm    # guest/target/c/foreign_kernels.wasm
//! (cd guest && cargo build --release)        # kernel_bench.wasm, for the Rust rows
//! cargo bench -p tensorwasm-embed --bench foreign_kernels
//! cargo bench -p tensorwasm-embed --bench foreign_kernels -- --cpu   # small sizes,
//!     # CPU driver, checked against wasmtime running the same Wasm per thread
//! ```
//!
//! Environment: `FOREIGN_KERNELS_SEED`, `FOREIGN_KERNELS_WASM` (the C
//! module), `RUST_KERNELS_WASM` (kernel-bench's module), `OUT`.

mod common;
#[path = "common/launch_sequence.rs"]
mod launch_sequence;
#[path = "foreign_kernels/measure.rs"]
mod measure;
#[path = "foreign_kernels/programs.rs"]
mod programs;
#[path = "common/wasm_reference.rs"]
mod wasm_reference;

use std::{collections::HashMap, path::PathBuf, process::ExitCode};

use common::kernels::{GuestMemory, WasmKernel, kernel_bench_wasm};
use programs::{Arg, Program, Size, Source};
use tensorwasm_core::{GpuDriver, KernelParam};
use tensorwasm_cpu::CpuDriver;
use tensorwasm_embed::kernel::KernelTarget;

/// The hand-written WAT kernels.
const WAT: &str = include_str!("foreign_kernels.wat");

type BenchResult<T> = Result<T, String>;

fn main() -> ExitCode {
    if std::env::args().any(|a| a == "--cpu") {
        return match check_on_cpu() {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("foreign_kernels --cpu: {e}");
                ExitCode::FAILURE
            }
        };
    }
    if std::env::var_os("CUDA_CACHE_DISABLE").is_none() {
        // SAFETY: no other thread exists yet (the driver starts none
        // before `cuInit`, which reads this).
        unsafe { std::env::set_var("CUDA_CACHE_DISABLE", "1") };
    }
    common::main_on_device("foreign_kernels", common::NoDevice::Fail, |d| {
        measure::on_gpu(d)
    })
}

/// Each source's guest module, the Wasm bytes.
pub type Modules = Vec<(Source, Vec<u8>)>;

/// The three guest modules, and why any is missing (only kernel-bench's
/// may be: its rows are then skipped).
pub fn modules() -> BenchResult<(Modules, Vec<String>)> {
    let path = std::env::var_os("FOREIGN_KERNELS_WASM").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../guest/target/c/foreign_kernels.wasm"),
        PathBuf::from,
    );
    let c = std::fs::read(&path).map_err(|e| {
        format!(
            "{}: {e} (build it first: scripts/build-foreign-kernels.sh --wasm)",
            path.display()
        )
    })?;
    let wat = wat::parse_str(WAT).map_err(|e| e.to_string())?;
    let mut modules = vec![(Source::C, c), (Source::Wat, wat)];
    let mut missing = Vec::new();
    match kernel_bench_wasm() {
        Ok(rust) => modules.push((Source::Rust, rust)),
        Err(e) => missing.push(format!("Rust kernels skipped: {e}")),
    }
    Ok((modules, missing))
}

/// The Wasm kernel's parameters for `args`: guest addresses as `i32`.
pub fn wasm_params(args: &[Arg]) -> Vec<KernelParam> {
    args.iter()
        .map(|a| match *a {
            Arg::Ptr(at) => KernelParam::I32(at as i32),
            Arg::I32(v) => KernelParam::I32(v),
            Arg::F32(v) => KernelParam::F32(v),
        })
        .collect()
}

/// Every Wasm kernel the programs of `source` launch, loaded on `d`.
pub fn load_kernels<'p, D: KernelTarget>(
    d: &D,
    wasm: &[u8],
    programs: impl IntoIterator<Item = &'p Program>,
) -> BenchResult<HashMap<&'static str, WasmKernel<D>>> {
    let mut kernels = HashMap::new();
    for p in programs {
        for step in &p.steps {
            if !kernels.contains_key(step.kernel) {
                kernels.insert(step.kernel, WasmKernel::load(d, wasm, step.kernel)?);
            }
        }
    }
    Ok(kernels)
}

/// Writes `p`'s inputs and zeroes its scratch arrays in `guest`.
pub fn reset<D: GpuDriver>(d: &D, guest: &GuestMemory<D>, p: &Program) -> BenchResult<()> {
    for (at, values) in &p.inputs {
        guest.write_f32s(d, *at, values)?;
    }
    for &(at, n) in &p.zeroed {
        guest.zero(d, at, n * 4)?;
    }
    Ok(())
}

/// `p`'s outputs in `guest`, one vector per output array.
pub fn outputs<D: GpuDriver>(
    d: &D,
    guest: &GuestMemory<D>,
    p: &Program,
) -> BenchResult<Vec<Vec<f32>>> {
    p.outputs
        .iter()
        .map(|&(at, n)| guest.read_f32s(d, at, n))
        .collect()
}

/// The first output element whose bits differ, as a sentence.
pub fn first_difference(
    p: &Program,
    got: &[Vec<f32>],
    want: &[Vec<f32>],
    what: &str,
) -> Option<String> {
    for (k, (g, w)) in got.iter().zip(want).enumerate() {
        if let Some(i) = common::check::first_wrong(g, w) {
            return Some(format!(
                "{}: output array {k}, element {i}: {} ({:#010x}) from the Wasm kernels, {} \
                 ({:#010x}) from {what}",
                p.name,
                g[i],
                g[i].to_bits(),
                w[i],
                w[i].to_bits()
            ));
        }
    }
    None
}

/// `--cpu`: every program at small sizes on the CPU driver, its outputs
/// checked bit for bit against wasmtime running the same Wasm function
/// once per thread (`common/wasm_reference.rs`). Nothing is timed.
fn check_on_cpu() -> BenchResult<()> {
    let seed = common::inputs::seed("FOREIGN_KERNELS_SEED")?;
    println!("foreign_kernels --cpu: small sizes on the CPU driver, seed {seed}");
    let d = CpuDriver::with_capacity(1 << 30).map_err(|e| e.to_string())?;
    let stream = d.create_stream().map_err(|e| e.to_string())?;
    let (modules, missing) = modules()?;
    for m in &missing {
        println!("  {m}");
    }
    let programs = programs::programs(Size::Small, seed);
    let mut failures = Vec::new();
    println!(
        "\n{:<20} {:<5} {:<34} {:>8}  check",
        "program", "from", "shape", "launches"
    );
    for (source, wasm) in &modules {
        let mine: Vec<&Program> = programs.iter().filter(|p| p.source == *source).collect();
        let bytes = mine.iter().map(|p| p.end).max().unwrap_or(programs::DATA);
        let guest = GuestMemory::new(&d, bytes, wasm)?;
        let kernels = load_kernels(&d, wasm, mine.iter().copied())?;
        let mut reference = wasm_reference::WasmReference::new(wasm, bytes)?;
        for p in mine {
            reset(&d, &guest, p)?;
            let before = outputs(&d, &guest, p)?;
            let sequence: Vec<_> = p
                .steps
                .iter()
                .map(|s| {
                    kernels[s.kernel].launch(&guest, &wasm_params(&s.args), s.grid, s.block, 0)
                })
                .collect();
            launch_sequence::run(&d, &stream, &sequence)?;
            guest.check_status(&d, p.name)?;
            let got = outputs(&d, &guest, p)?;
            for (at, values) in &p.inputs {
                reference.write_f32s(*at, values)?;
            }
            for &(at, n) in &p.zeroed {
                reference.zero(at, n * 4)?;
            }
            for s in &p.steps {
                let args: Vec<_> = s
                    .args
                    .iter()
                    .map(|a| match *a {
                        Arg::Ptr(at) => wasm_reference::RefArg::I32(at as i32),
                        Arg::I32(v) => wasm_reference::RefArg::I32(v),
                        Arg::F32(v) => wasm_reference::RefArg::F32(v),
                    })
                    .collect();
                reference.launch(s.kernel, &args, s.grid, s.block)?;
            }
            let want: Vec<Vec<f32>> = p
                .outputs
                .iter()
                .map(|&(at, n)| reference.read_f32s(at, n))
                .collect::<BenchResult<_>>()?;
            let check = match first_difference(p, &got, &want, "wasmtime") {
                None if got == before => {
                    failures.push(format!("{}: the run changed no output", p.name));
                    "NO OUTPUT".to_string()
                }
                None => "same bits as wasmtime".to_string(),
                Some(why) => {
                    failures.push(why);
                    "DIFFERS".to_string()
                }
            };
            println!(
                "{:<20} {:<5} {:<34} {:>8}  {check}",
                p.name,
                source.label(),
                p.shape,
                p.steps.len()
            );
        }
    }
    if failures.is_empty() {
        println!("\nall outputs match");
        Ok(())
    } else {
        Err(failures.join("\n"))
    }
}
