//! What kernels written in Rust are worth on the GPU, side by side in one
//! process on device 0: the kernels of `guest/examples/kernel-bench`
//! (built for `wasm32-unknown-unknown`, release), translated from the Wasm
//! (by export name), lowered to PTX and launched over one device buffer
//! that stands for the guest's memory (its data segments copied in),
//! exactly as `kernel_get` and `launch` do it (the guest's arguments, the
//! launch values of the kernel's globals, then the hidden parameters).
//!
//! 1. Bandwidth of the Rust SAXPY (`y[i] = alpha * x[i] + y[i]` over
//!    slices: bounds checks, a panic path) against the hand-written
//!    `kernels/bench/saxpy.ptx` over the same memory: the target is
//!    0.9x.
//! 2. Kernels whose hot loop uses their stack frame against the same
//!    kernel written without one: the target is 0.8x. `gather_inline` is
//!    `gather_frame`'s source with its helper inlined, so LLVM keeps the
//!    accumulators in registers (the reference); `gather_regs` the same
//!    sums in eight scalar accumulators in a loop LLVM does not unroll
//!    (shown too: a different code shape). `gather_frame` keeps its eight
//!    accumulators in an array of its frame that a helper the compiler does
//!    not inline updates through a `&mut [f32; 8]` (constant offsets in the
//!    frame: the usual shape of Rust code passing structs and arrays by
//!    reference); `gather_stack` indexes its array with a value the
//!    compiler cannot know (in any GPU language that array lives in local
//!    memory, not registers).
//!
//! Every output is checked bit for bit against the same f32 arithmetic on
//! the CPU (inputs random, seeded). Warm-up launches first, then samples
//! of back-to-back launches ([`REPEATS`]), timed with CUDA events; medians
//! reported. Prints a table and writes every sample to
//! `$OUT/rust_kernels.json` (or `./rust_kernels.json`).
//!
//! Run with `cargo bench -p tensorwasm-embed --bench rust_kernels` after
//! building the guests (`scripts/test.sh` does, or `cd guest && cargo
//! build --release`). Environment: `RUST_KERNELS_WASM` (the kernels'
//! module; default `guest/target/wasm32-unknown-unknown/release/
//! kernel_bench.wasm`), `RUST_KERNELS_SEED` (the inputs' seed, printed
//! either way), `OUT`.

mod common;

use std::process::ExitCode;

use common::{
    BenchResult, NoDevice,
    check::first_wrong,
    inputs::{counter_bits, mix, seed},
    kernels::{GuestMemory, Launch, WasmKernel, kernel_bench_wasm, run_once},
    main_on_device,
    record::{device_sm, kernel_record},
    stats::median,
    timing::{Repeats, time},
    write_record,
};
use serde_json::json;
use tensorwasm_core::{Dim3, GpuDriver, KernelParam};
use tensorwasm_cuda::CudaDriver;

/// The hand-written SAXPY: `saxpy(alpha, x, y, n)`, no fma.
const SAXPY_PTX: &str = include_str!("../../kernels/bench/saxpy.ptx");
/// Elements of the SAXPY vectors (64 Mi floats: 256 MiB each).
const N: usize = 64 << 20;
/// Elements of the gather kernels' vectors (a power of two).
const GATHER_N: usize = 16 << 20;
/// Loads per thread of the gather kernels (`kernel_bench::STEPS`).
const STEPS: usize = 64;
/// Where the vectors start in the guest memory: past the stack (1 MiB by
/// default) and the windows below its pointer.
const DATA: usize = 2 << 20;
/// Threads per block.
const BLOCK: u32 = 256;
/// SAXPY's alpha.
const ALPHA: f32 = 1.5;
/// Launches per row: warm-up launches, then samples of back-to-back ones.
const REPEATS: Repeats = Repeats {
    warmup: 3,
    samples: 7,
    launches: 20,
};

fn main() -> ExitCode {
    main_on_device("rust_kernels", NoDevice::Fail, run)
}

/// A random finite f32 in [-2, 2), element `i` of vector `v`.
fn input(seed: u64, v: u64, i: usize) -> f32 {
    let bits = counter_bits(seed, v, i);
    ((bits >> 40) as f32 / (1u64 << 24) as f32) * 4.0 - 2.0
}

fn run(d: &CudaDriver) -> BenchResult<()> {
    let wasm = kernel_bench_wasm()?;
    let seed = seed("RUST_KERNELS_SEED")?;
    let info = d.device().clone();
    println!("rust_kernels on {}, seed {seed}", device_sm(&info));
    let stream = d.create_stream().map_err(|e| e.to_string())?;
    let guest = GuestMemory::new(d, DATA + 2 * N * 4, &wasm)?;
    let mut rows = Vec::new();

    // 1. SAXPY: hand PTX against the Rust kernel, same memory.
    let (x_at, y_at) = (DATA, DATA + N * 4);
    let x: Vec<f32> = (0..N).map(|i| input(seed, 0, i)).collect();
    let y: Vec<f32> = (0..N).map(|i| input(seed, 1, i)).collect();
    let want: Vec<f32> = x.iter().zip(&y).map(|(x, y)| ALPHA * x + y).collect();
    let hand_module = d.load_ptx(SAXPY_PTX).map_err(|e| e.to_string())?;
    let hand = d
        .function(&hand_module, "saxpy")
        .map_err(|e| e.to_string())?;
    let rust = WasmKernel::load(d, &wasm, "saxpy")?;
    let grid = Dim3::linear((N as u32).div_ceil(BLOCK));
    let hand_launch = Launch::linear(
        &hand,
        N,
        BLOCK,
        vec![
            KernelParam::F32(ALPHA),
            KernelParam::Ptr(guest.ptr(x_at)),
            KernelParam::Ptr(guest.ptr(y_at)),
            KernelParam::I32(N as i32),
        ],
    );
    let rust_launch = rust.launch(
        &guest,
        &[
            KernelParam::F32(ALPHA),
            KernelParam::I32(x_at as i32),
            KernelParam::I32(y_at as i32),
            KernelParam::I32(N as i32),
        ],
        grid,
        Dim3::linear(BLOCK),
        0,
    );
    let mut saxpy = Vec::new();
    for (name, launch) in [
        ("hand-written PTX", &hand_launch),
        ("Rust (Wasm -> PTX)", &rust_launch),
    ] {
        // One checked launch from fresh inputs, then the timed ones.
        guest.write_f32s(d, x_at, &x)?;
        guest.write_f32s(d, y_at, &y)?;
        run_once(d, &stream, launch)?;
        guest.check_status(d, name)?;
        let got = guest.read_f32s(d, y_at, N)?;
        if let Some(i) = first_wrong(&got, &want) {
            return Err(format!(
                "saxpy, {name}: y[{i}] = {}, want {}",
                got[i], want[i]
            ));
        }
        let samples = time(d, &stream, launch, REPEATS)?;
        guest.check_status(d, name)?;
        let ms = median(&samples);
        let gbs = 12.0 * N as f64 / (ms * 1e-3) / 1e9;
        saxpy.push((name, ms, gbs, samples));
    }
    let saxpy_ratio = saxpy[1].2 / saxpy[0].2;
    println!(
        "\nSAXPY, {N} elements, block {BLOCK} (median of {} x {} launches):",
        REPEATS.samples, REPEATS.launches
    );
    for (name, ms, gbs, _) in &saxpy {
        println!("  {name:<22} {ms:>8.4} ms  {gbs:>7.1} GB/s");
    }
    println!("  Rust / hand PTX: {saxpy_ratio:.3}x bandwidth (target 0.9x)");
    for (name, ms, gbs, samples) in &saxpy {
        rows.push(json!({
            "row": "saxpy", "kernel": name, "elements": N, "median_ms": ms,
            "gb_per_s": gbs, "samples_ms": samples,
        }));
    }

    // 2. The stack-frame loop against the same loop in registers.
    let gx: Vec<f32> = (0..GATHER_N).map(|i| input(seed, 2, i)).collect();
    let rot = (mix(seed ^ 0x5eed) % 8) as usize;
    let (gx_at, out_at) = (DATA, DATA + GATHER_N * 4);
    guest.write_f32s(d, gx_at, &gx)?;
    let index = |i: usize, j: usize| (i + j * 4099) & (GATHER_N - 1);
    let weight = |k: usize| ((k + rot) % 8 + 1) as f32;
    let mut want_stack = Vec::with_capacity(GATHER_N);
    let mut want_regs = Vec::with_capacity(GATHER_N);
    for i in 0..GATHER_N {
        let mut acc = [0.0f32; 8];
        for j in 0..STEPS {
            acc[j % 8] += gx[index(i, j)];
        }
        let mut sum = 0.0f32;
        for (k, a) in acc.iter().enumerate() {
            sum += a * weight(k);
        }
        want_stack.push(sum);
        let mut regs = acc[0] * weight(0);
        for (k, a) in acc.iter().enumerate().skip(1) {
            regs += a * weight(k);
        }
        want_regs.push(regs);
    }
    let grid = Dim3::linear((GATHER_N as u32).div_ceil(BLOCK));
    let args = [
        KernelParam::I32(gx_at as i32),
        KernelParam::I32(out_at as i32),
        KernelParam::I32(GATHER_N as i32),
        KernelParam::I32(rot as i32),
    ];
    // `gather_inline` also takes `x`'s length.
    let inline_args = [&args[..], &[KernelParam::I32(GATHER_N as i32)]].concat();
    let mut gather = Vec::new();
    for (name, want) in [
        ("gather_regs", &want_regs),
        ("gather_inline", &want_stack),
        ("gather_frame", &want_stack),
        ("gather_stack", &want_stack),
    ] {
        let kernel = WasmKernel::load(d, &wasm, name)?;
        let window = kernel.translated.stack_window.map_or(0, |w| w.bytes);
        let args = if name == "gather_inline" {
            &inline_args[..]
        } else {
            &args[..]
        };
        let launch = kernel.launch(&guest, args, grid, Dim3::linear(BLOCK), 0);
        guest.zero(d, out_at, GATHER_N * 4)?;
        let samples = time(d, &stream, &launch, REPEATS)?;
        guest.check_status(d, name)?;
        let got = guest.read_f32s(d, out_at, GATHER_N)?;
        if let Some(i) = first_wrong(&got, want) {
            return Err(format!("{name}: out[{i}] = {}, want {}", got[i], want[i]));
        }
        gather.push((name, window, median(&samples), samples));
    }
    let frame_ratio = gather[1].2 / gather[2].2;
    let frame_regs_ratio = gather[0].2 / gather[2].2;
    let stack_ratio = gather[1].2 / gather[3].2;
    println!(
        "\nGather-accumulate, {GATHER_N} threads x {STEPS} loads (median of {} x {}):",
        REPEATS.samples, REPEATS.launches
    );
    for (name, window, ms, _) in &gather {
        println!("  {name:<14} stack window {window:>3} B  {ms:>8.4} ms");
    }
    println!(
        "  frame at constant offsets / the same kernel without a frame: {frame_ratio:.3}x speed \
         (target 0.8x)"
    );
    println!(
        "  frame at constant offsets / eight scalar accumulators: {frame_regs_ratio:.3}x speed"
    );
    println!("  dynamically indexed frame array / without a frame: {stack_ratio:.3}x speed");
    for (name, window, ms, samples) in &gather {
        rows.push(json!({
            "row": "gather", "kernel": name, "threads": GATHER_N, "steps": STEPS,
            "stack_window_bytes": window, "median_ms": ms, "samples_ms": samples,
        }));
    }

    let mut record = kernel_record("rust_kernels", &info, seed, REPEATS);
    let ratios = json!({
        "saxpy_rust_over_hand_ptx_bandwidth": saxpy_ratio,
        "gather_frame_over_inline_speed": frame_ratio,
        "gather_frame_over_regs_speed": frame_regs_ratio,
        "gather_stack_over_inline_speed": stack_ratio,
    });
    record.insert("ratios".into(), ratios);
    record.insert("rows".into(), rows.into());
    let path = write_record("rust_kernels.json", &record)?;
    println!("\nwrote {}", path.display());
    Ok(())
}
