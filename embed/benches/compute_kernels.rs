//! Compute-bound Wasm kernels against the same kernels written in CUDA C
//! (issue 15 goal 4), side by side in one process on device 0: the naive
//! matmul, the 9-point stencil and the N-body step of
//! `compute_kernels.wat`, translated by export name, lowered to PTX and
//! launched over one device buffer that stands for the guest's memory,
//! exactly as `kernel_get` and `launch` do it (every check on: bounds, fuel,
//! the thread's time), against their twins in
//! `kernels/bench/compute_twins.cu` (nvcc -O3, the same arithmetic in the
//! same order, built by `scripts/build-kernels.sh`) launched raw over the
//! same memory. The target is 0.8x of the twin's speed.
//!
//! Both write bit-identical outputs, which the bench checks, and a sample
//! of outputs is checked against the same f32 arithmetic on the CPU (the
//! stencil in full). Inputs random, seeded. Warm-up launches first, then
//! samples of back-to-back launches, timed with CUDA events; medians
//! reported. Prints a table and writes every sample to
//! `$OUT/compute_kernels.json` (or `./compute_kernels.json`).
//!
//! Run with `cargo bench -p tensorwasm-embed --bench compute_kernels`.
//! Environment: `COMPUTE_KERNELS_SEED` (the inputs' seed, printed either
//! way), `OUT`.

mod common;

use std::process::ExitCode;

use common::{
    BenchResult, NoDevice,
    check::first_wrong,
    inputs::{mix, seed, uniform},
    kernels::{GuestMemory, Launch, WasmKernel, run_once},
    main_on_device,
    record::{device_sm, kernel_record},
    stats::median,
    timing::{Repeats, time},
    write_record,
};
use serde_json::json;
use tensorwasm_core::{Dim3, GpuDriver, KernelParam};
use tensorwasm_cuda::CudaDriver;

/// The CUDA C twins, compiled to PTX.
const TWINS_PTX: &str = include_str!("../../kernels/bench/compute_twins.ptx");
/// The Wasm kernels.
const WAT: &str = include_str!("compute_kernels.wat");
/// The matmul's n (n x n x n).
const MATMUL_N: usize = 2048;
/// The stencil's grid edge.
const STENCIL_N: usize = 4096;
/// Bodies of the N-body step.
const BODIES: usize = 16384;
/// Where the data starts in the guest memory.
const DATA: usize = 1 << 20;
/// Threads per block.
const BLOCK: u32 = 256;
/// Outputs of the matmul and the N-body step checked on the CPU.
const SPOT_CHECKS: usize = 64;
/// Launches per row: warm-up launches, then samples of back-to-back ones.
const REPEATS: Repeats = Repeats {
    warmup: 2,
    samples: 7,
    launches: 5,
};

fn main() -> ExitCode {
    main_on_device("compute_kernels", NoDevice::Fail, run)
}

/// One kernel's two launches and how to check their output.
struct Case<'a> {
    name: &'static str,
    /// Work per launch, for the throughput column.
    work: f64,
    unit: &'static str,
    wasm: Launch<'a, CudaDriver>,
    twin: Launch<'a, CudaDriver>,
    /// Output: where and how many f32.
    out_at: usize,
    out_len: usize,
    /// (index, expected) pairs computed on the CPU.
    expected: Vec<(usize, f32)>,
}

fn run(d: &CudaDriver) -> BenchResult<()> {
    let wasm = wat::parse_str(WAT).map_err(|e| e.to_string())?;
    let seed = seed("COMPUTE_KERNELS_SEED")?;
    let info = d.device().clone();
    println!("compute_kernels on {}, seed {seed}", device_sm(&info));
    let stream = d.create_stream().map_err(|e| e.to_string())?;
    let matmul_bytes = 3 * MATMUL_N * MATMUL_N * 4;
    let stencil_bytes = 2 * STENCIL_N * STENCIL_N * 4;
    let guest = GuestMemory::new(d, DATA + matmul_bytes.max(stencil_bytes), &wasm)?;
    let twins = d.load_ptx(TWINS_PTX).map_err(|e| e.to_string())?;
    let twin = |name: &str| d.function(&twins, name).map_err(|e| e.to_string());
    let (f_matmul, f_stencil, f_nbody) = (twin("matmul")?, twin("stencil")?, twin("nbody")?);
    let (k_matmul, k_stencil, k_nbody) = (
        WasmKernel::load(d, &wasm, "matmul")?,
        WasmKernel::load(d, &wasm, "stencil")?,
        WasmKernel::load(d, &wasm, "nbody")?,
    );
    let raw = |function, threads: usize, params| Launch::linear(function, threads, BLOCK, params);
    let grid = |threads: usize| Dim3::linear((threads as u32).div_ceil(BLOCK));
    let i32p = |v: usize| KernelParam::I32(v as i32);
    let mut rows = Vec::new();
    let mut ratios = serde_json::Map::new();

    // The naive matmul.
    let n = MATMUL_N;
    let (a_at, b_at, c_at) = (DATA, DATA + n * n * 4, DATA + 2 * n * n * 4);
    let a: Vec<f32> = (0..n * n).map(|i| uniform(seed, 0, i, -1.0, 1.0)).collect();
    let b: Vec<f32> = (0..n * n).map(|i| uniform(seed, 1, i, -1.0, 1.0)).collect();
    let picks = (0..SPOT_CHECKS).map(|s| (mix(seed ^ s as u64) % (n * n) as u64) as usize);
    let expected = picks
        .map(|t| {
            let (i, j) = (t / n, t % n);
            let acc = (0..n).fold(0.0f32, |acc, k| acc + a[i * n + k] * b[k * n + j]);
            (t, acc)
        })
        .collect();
    let matmul = Case {
        name: "matmul",
        work: 2.0 * (n * n * n) as f64,
        unit: "GFLOP/s",
        wasm: k_matmul.launch(
            &guest,
            &[i32p(a_at), i32p(b_at), i32p(c_at), i32p(n)],
            grid(n * n),
            Dim3::linear(BLOCK),
            0,
        ),
        twin: raw(
            &f_matmul,
            n * n,
            vec![
                KernelParam::Ptr(guest.ptr(a_at)),
                KernelParam::Ptr(guest.ptr(b_at)),
                KernelParam::Ptr(guest.ptr(c_at)),
                i32p(n),
            ],
        ),
        out_at: c_at,
        out_len: n * n,
        expected,
    };
    measure(
        d,
        &stream,
        &guest,
        &matmul,
        &[(a_at, &a), (b_at, &b)],
        &mut rows,
        &mut ratios,
    )?;

    // The stencil.
    let n = STENCIL_N;
    let (w0, w1, w2) = (0.5f32, 0.1f32, 0.025f32);
    let (in_at, out_at) = (DATA, DATA + n * n * 4);
    let grid_in: Vec<f32> = (0..n * n).map(|i| uniform(seed, 2, i, -1.0, 1.0)).collect();
    let expected = (0..n * n)
        .map(|t| {
            let (i, j) = (t / n, t % n);
            let g = |r: usize, c: usize| grid_in[r * n + c];
            let v = if i == 0 || j == 0 || i == n - 1 || j == n - 1 {
                g(i, j)
            } else {
                let edge = g(i - 1, j) + g(i + 1, j) + g(i, j - 1) + g(i, j + 1);
                let corner = g(i - 1, j - 1) + g(i - 1, j + 1) + g(i + 1, j - 1) + g(i + 1, j + 1);
                w0 * g(i, j) + w1 * edge + w2 * corner
            };
            (t, v)
        })
        .collect();
    let floats = |w: f32| KernelParam::F32(w);
    let stencil = Case {
        name: "stencil",
        work: (n * n) as f64,
        unit: "Gpoint/s",
        wasm: k_stencil.launch(
            &guest,
            &[
                i32p(in_at),
                i32p(out_at),
                i32p(n),
                floats(w0),
                floats(w1),
                floats(w2),
            ],
            grid(n * n),
            Dim3::linear(BLOCK),
            0,
        ),
        twin: raw(
            &f_stencil,
            n * n,
            vec![
                KernelParam::Ptr(guest.ptr(in_at)),
                KernelParam::Ptr(guest.ptr(out_at)),
                i32p(n),
                floats(w0),
                floats(w1),
                floats(w2),
            ],
        ),
        out_at,
        out_len: n * n,
        expected,
    };
    measure(
        d,
        &stream,
        &guest,
        &stencil,
        &[(in_at, &grid_in)],
        &mut rows,
        &mut ratios,
    )?;

    // The N-body step.
    let n = BODIES;
    let eps2 = 1e-3f32;
    let (pos_at, acc_at) = (DATA, DATA + n * 16);
    let pos: Vec<f32> = (0..n * 4)
        .map(|i| {
            if i % 4 == 3 {
                uniform(seed, 3, i, 0.5, 1.0)
            } else {
                uniform(seed, 3, i, -1.0, 1.0)
            }
        })
        .collect();
    let picks = (0..SPOT_CHECKS).map(|s| (mix(seed ^ 0xb0d1e5 ^ s as u64) % n as u64) as usize);
    let mut expected = Vec::new();
    for i in picks {
        let (xi, yi, zi) = (pos[4 * i], pos[4 * i + 1], pos[4 * i + 2]);
        let (mut ax, mut ay, mut az) = (0.0f32, 0.0f32, 0.0f32);
        for p in pos.chunks_exact(4) {
            let (dx, dy, dz) = (p[0] - xi, p[1] - yi, p[2] - zi);
            let inv = 1.0 / (dx * dx + dy * dy + dz * dz + eps2).sqrt();
            let s = inv * inv * inv * p[3];
            ax += dx * s;
            ay += dy * s;
            az += dz * s;
        }
        expected.extend([(4 * i, ax), (4 * i + 1, ay), (4 * i + 2, az)]);
    }
    let nbody = Case {
        name: "nbody",
        work: (n * n) as f64,
        unit: "Ginteractions/s",
        wasm: k_nbody.launch(
            &guest,
            &[i32p(pos_at), i32p(acc_at), i32p(n), floats(eps2)],
            grid(n),
            Dim3::linear(BLOCK),
            0,
        ),
        twin: raw(
            &f_nbody,
            n,
            vec![
                KernelParam::Ptr(guest.ptr(pos_at)),
                KernelParam::Ptr(guest.ptr(acc_at)),
                i32p(n),
                floats(eps2),
            ],
        ),
        out_at: acc_at,
        out_len: n * 4,
        expected,
    };
    measure(
        d,
        &stream,
        &guest,
        &nbody,
        &[(pos_at, &pos)],
        &mut rows,
        &mut ratios,
    )?;

    let mut record = kernel_record("compute_kernels", &info, seed, REPEATS);
    record.insert(
        "target".into(),
        json!("Wasm kernel >= 0.8x of its CUDA C twin's speed"),
    );
    record.insert("ratios".into(), ratios.into());
    record.insert("rows".into(), rows.into());
    let path = write_record("compute_kernels.json", &record)?;
    println!("\nwrote {}", path.display());
    Ok(())
}

/// Runs the twin, then the Wasm kernel, each once from fresh inputs
/// (checked: the same bits, and the CPU's values where computed) and then
/// timed; prints the row and records it.
fn measure(
    d: &CudaDriver,
    stream: &<CudaDriver as GpuDriver>::Stream,
    guest: &GuestMemory<CudaDriver>,
    case: &Case<'_>,
    inputs: &[(usize, &Vec<f32>)],
    rows: &mut Vec<serde_json::Value>,
    ratios: &mut serde_json::Map<String, serde_json::Value>,
) -> BenchResult<()> {
    let mut outputs = Vec::new();
    let mut timed = Vec::new();
    for (side, launch) in [
        ("CUDA C (nvcc -O3)", &case.twin),
        ("Wasm (lowered)", &case.wasm),
    ] {
        for (at, values) in inputs {
            guest.write_f32s(d, *at, values)?;
        }
        guest.zero(d, case.out_at, case.out_len * 4)?;
        run_once(d, stream, launch)?;
        guest.check_status(d, side)?;
        let got = guest.read_f32s(d, case.out_at, case.out_len)?;
        for &(i, want) in &case.expected {
            if got[i].to_bits() != want.to_bits() {
                return Err(format!(
                    "{}, {side}: output {i} is {}, the CPU says {want}",
                    case.name, got[i]
                ));
            }
        }
        outputs.push(got);
        let samples = time(d, stream, launch, REPEATS)?;
        guest.check_status(d, side)?;
        timed.push((side, median(&samples), samples));
    }
    if let Some(i) = first_wrong(&outputs[1], &outputs[0]) {
        return Err(format!(
            "{}: output {i} is {} from the Wasm kernel, {} from CUDA C",
            case.name, outputs[1][i], outputs[0][i]
        ));
    }
    let ratio = timed[0].1 / timed[1].1;
    println!(
        "\n{} (median of {} x {} launches):",
        case.name, REPEATS.samples, REPEATS.launches
    );
    for (side, ms, _) in &timed {
        let rate = case.work / (ms * 1e-3) / 1e9;
        println!("  {side:<20} {ms:>9.3} ms  {rate:>9.1} {}", case.unit);
    }
    println!("  Wasm / CUDA C: {ratio:.3}x speed (target 0.8x)");
    ratios.insert(
        format!("{}_wasm_over_cuda_c_speed", case.name),
        json!(ratio),
    );
    for (side, ms, samples) in timed {
        rows.push(json!({
            "kernel": case.name, "side": side, "median_ms": ms,
            "rate": case.work / (ms * 1e-3) / 1e9, "unit": case.unit, "samples_ms": samples,
        }));
    }
    Ok(())
}
