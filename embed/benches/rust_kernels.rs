//! What kernels written in Rust are worth on the GPU, side by side in one
//! process on device 0: the kernels of `guest/examples/kernel-bench`
//! (built for `wasm32-unknown-unknown`, release), translated from the Wasm
//! (by export name), lowered to PTX and launched over one device buffer
//! that stands for the guest's memory, exactly as `kernel_get` and
//! `launch` do it (the guest's arguments, the launch values of the
//! kernel's globals, then the hidden parameters).
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
//! the CPU (inputs random, seeded). Warm-up launches first, then
//! [`REPS`] samples of [`LAUNCHES`] back-to-back launches each, timed with
//! CUDA events; medians reported. Prints a table and writes every sample
//! to `$OUT/rust_kernels.json` (or `./rust_kernels.json`).
//!
//! Run with `cargo bench -p tensorwasm-embed --bench rust_kernels` after
//! building the guests (`scripts/test.sh` does, or `cd guest && cargo
//! build --release`). Environment: `RUST_KERNELS_WASM` (the kernels'
//! module; default `guest/target/wasm32-unknown-unknown/release/
//! kernel_bench.wasm`), `RUST_KERNELS_SEED` (the inputs' seed, printed
//! either way), `OUT`.

mod common;

use std::{path::PathBuf, process::ExitCode};

use common::{command_line, utc_timestamp};
use serde_json::json;
use tensorwasm_core::{
    DeviceMemory, DevicePtr, Dim3, GpuDriver, KernelParam, LaunchConfig,
    lower::{
        Lowerer, status,
        translate::{TranslatedKernel, WasmType, function_by_export, translate_kernel},
    },
};
use tensorwasm_cuda::CudaDriver;
use tensorwasm_embed::kernel::ptx_target;
use wasmparser::{Operator, Parser, Payload};

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
/// Launches per timed sample, samples per row, warm-up launches.
const LAUNCHES: usize = 20;
const REPS: usize = 7;
const WARMUP: usize = 3;
/// Each thread's fuel (`WasiCudaLimits::default().kernel_fuel`).
const FUEL: u64 = 1 << 24;

type BenchResult<T> = Result<T, String>;

fn main() -> ExitCode {
    let driver = match CudaDriver::new(0) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("rust_kernels: no CUDA device ({e}); nothing measured");
            return ExitCode::from(2);
        }
    };
    match run(&driver) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rust_kernels: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The kernels' module.
fn wasm() -> BenchResult<Vec<u8>> {
    let path = std::env::var_os("RUST_KERNELS_WASM").map_or_else(
        || {
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("../guest/target/wasm32-unknown-unknown/release/kernel_bench.wasm")
        },
        PathBuf::from,
    );
    std::fs::read(&path).map_err(|e| {
        format!(
            "{}: {e} (build the guests first: cd guest && cargo build --release)",
            path.display()
        )
    })
}

/// splitmix64.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A random finite f32 in [-2, 2), element `i` of vector `v`.
fn input(seed: u64, v: u64, i: usize) -> f32 {
    let bits = mix(seed ^ mix(v.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ i as u64));
    ((bits >> 40) as f32 / (1u64 << 24) as f32) * 4.0 - 2.0
}

fn f32s_to_bytes(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

fn bytes_to_f32s(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// The value global `index` starts with (an `i32.const` initializer).
fn global_init(wasm: &[u8], index: u32) -> BenchResult<i32> {
    for payload in Parser::new(0).parse_all(wasm) {
        if let Ok(Payload::GlobalSection(reader)) = payload {
            let global = reader
                .into_iter()
                .nth(index as usize)
                .ok_or("no such global")?
                .map_err(|e| e.to_string())?;
            let mut ops = global.init_expr.get_operators_reader();
            if let Ok(Operator::I32Const { value }) = ops.read() {
                return Ok(value);
            }
        }
    }
    Err(format!("global {index} has no i32.const initializer"))
}

/// A Rust kernel, lowered and loaded.
struct WasmKernel {
    translated: TranslatedKernel,
    function: <CudaDriver as GpuDriver>::Function,
    _module: <CudaDriver as GpuDriver>::Module,
    /// The launch values of its globals (their initial values: no guest
    /// code ran before it).
    globals: Vec<KernelParam>,
}

fn load_wasm_kernel(d: &CudaDriver, wasm: &[u8], name: &str) -> BenchResult<WasmKernel> {
    let index = function_by_export(wasm, name).map_err(|e| format!("{name}: {e}"))?;
    let translated = translate_kernel(wasm, index).map_err(|e| format!("{name}: {e}"))?;
    let lowerer = ptx_target(d.device()).map_err(|e| format!("{e:?}"))?;
    let ptx = lowerer
        .lower(&translated.name, &translated.function, translated.abi)
        .map_err(|e| format!("{name}: {e}"))?;
    let module = d.load_ptx(&ptx).map_err(|e| format!("{name}: {e}"))?;
    let function = d
        .function(&module, &translated.name)
        .map_err(|e| format!("{name}: {e}"))?;
    let globals = translated
        .globals
        .iter()
        .map(|g| match g.ty {
            WasmType::I32 => global_init(wasm, g.index).map(KernelParam::I32),
            other => Err(format!("{name}: global {} is {other:?}", g.index)),
        })
        .collect::<BenchResult<_>>()?;
    Ok(WasmKernel {
        translated,
        function,
        _module: module,
        globals,
    })
}

/// The guest memory and the status word.
struct Guest {
    memory: <CudaDriver as GpuDriver>::DeviceBuffer,
    status: <CudaDriver as GpuDriver>::DeviceBuffer,
}

impl Guest {
    fn write(&self, d: &CudaDriver, offset: usize, bytes: &[u8]) -> BenchResult<()> {
        let range = self.memory.range(offset, bytes.len()).ok_or("range")?;
        d.copy_to_device(range, bytes).map_err(|e| e.to_string())
    }

    fn read(&self, d: &CudaDriver, offset: usize, len: usize) -> BenchResult<Vec<u8>> {
        let mut out = vec![0; len];
        let range = self.memory.range(offset, len).ok_or("range")?;
        d.copy_from_device(&mut out, range)
            .map_err(|e| e.to_string())?;
        Ok(out)
    }

    fn ptr(&self, offset: usize) -> KernelParam {
        KernelParam::Ptr(DevicePtr(self.memory.device_ptr().0 + offset as u64))
    }

    /// A Wasm kernel's parameters: the guest's arguments, the globals'
    /// launch values, then the hidden ones (`docs/kernels.md`, "The
    /// launch"); no time limit (a trusted guest's), though every check
    /// runs.
    fn wasm_params(
        &self,
        kernel: &WasmKernel,
        args: &[KernelParam],
        grid: u32,
    ) -> Vec<KernelParam> {
        let mut params = args.to_vec();
        params.extend(kernel.globals.iter().copied());
        params.extend([
            KernelParam::Ptr(self.memory.device_ptr()),
            KernelParam::I64(self.memory.len() as i64),
            KernelParam::Ptr(self.status.device_ptr()),
            KernelParam::I64(FUEL as i64),
            KernelParam::I64(-1),
            KernelParam::I64(i64::from(grid)),
            KernelParam::I64(1),
            KernelParam::I64(1),
        ]);
        params
    }

    fn check_status(&self, d: &CudaDriver, what: &str) -> BenchResult<()> {
        let mut word = [0u8; status::BYTES];
        d.copy_from_device(&mut word, self.status.full())
            .map_err(|e| e.to_string())?;
        match u32::from_le_bytes([word[0], word[1], word[2], word[3]]) {
            0 => Ok(()),
            code => Err(format!("{what} trapped (code {code})")),
        }
    }
}

/// Times `LAUNCHES` launches per sample, `REPS` samples, after warm-up:
/// the milliseconds per launch of each sample.
fn time(
    d: &CudaDriver,
    stream: &<CudaDriver as GpuDriver>::Stream,
    function: &<CudaDriver as GpuDriver>::Function,
    config: &LaunchConfig,
    params: &[KernelParam],
) -> BenchResult<Vec<f64>> {
    let launch = || {
        // SAFETY: every pointer parameter is inside the guest buffer or the
        // status word, both alive until the synchronize below, and the
        // parameters follow the kernel's signature (the hand PTX's, or the
        // translated kernel's ABI).
        unsafe { d.launch(stream, function, config, params) }.map_err(|e| e.to_string())
    };
    for _ in 0..WARMUP {
        launch()?;
    }
    d.stream_synchronize(stream).map_err(|e| e.to_string())?;
    let (start, end) = (
        d.create_event().map_err(|e| e.to_string())?,
        d.create_event().map_err(|e| e.to_string())?,
    );
    let mut samples = Vec::with_capacity(REPS);
    for _ in 0..REPS {
        d.record_event(&start, stream).map_err(|e| e.to_string())?;
        for _ in 0..LAUNCHES {
            launch()?;
        }
        d.record_event(&end, stream).map_err(|e| e.to_string())?;
        d.event_synchronize(&end).map_err(|e| e.to_string())?;
        let ms = d
            .event_elapsed_ms(&start, &end)
            .map_err(|e| e.to_string())?;
        samples.push(f64::from(ms) / LAUNCHES as f64);
    }
    Ok(samples)
}

fn median(samples: &[f64]) -> f64 {
    let mut s = samples.to_vec();
    s.sort_by(f64::total_cmp);
    let mid = s.len() / 2;
    if s.len() % 2 == 1 {
        s[mid]
    } else {
        (s[mid - 1] + s[mid]) / 2.0
    }
}

/// The first element where `got` differs from `want` in bits.
fn first_wrong(got: &[f32], want: &[f32]) -> Option<usize> {
    got.iter()
        .zip(want)
        .position(|(g, w)| g.to_bits() != w.to_bits())
}

fn run(d: &CudaDriver) -> BenchResult<()> {
    let wasm = wasm()?;
    let seed = std::env::var("RUST_KERNELS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |t| t.as_nanos() as u64)
        });
    let info = d.device().clone();
    println!(
        "rust_kernels on {} (sm_{}{}), seed {seed}",
        info.name,
        info.compute_capability.map_or(0, |c| c.0),
        info.compute_capability.map_or(0, |c| c.1)
    );
    let stream = d.create_stream().map_err(|e| e.to_string())?;
    let bytes = DATA + 2 * N * 4;
    let guest = Guest {
        memory: d.alloc_device(bytes).map_err(|e| e.to_string())?,
        status: d.alloc_device(status::BYTES).map_err(|e| e.to_string())?,
    };
    d.memset(guest.status.full(), 0)
        .map_err(|e| e.to_string())?;
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
    let rust = load_wasm_kernel(d, &wasm, "saxpy")?;
    let grid = (N as u32).div_ceil(BLOCK);
    let config = LaunchConfig {
        grid: Dim3 {
            x: grid,
            y: 1,
            z: 1,
        },
        block: Dim3 {
            x: BLOCK,
            y: 1,
            z: 1,
        },
        shared_mem_bytes: 0,
    };
    let hand_params = [
        KernelParam::F32(ALPHA),
        guest.ptr(x_at),
        guest.ptr(y_at),
        KernelParam::I32(N as i32),
    ];
    let rust_params = guest.wasm_params(
        &rust,
        &[
            KernelParam::F32(ALPHA),
            KernelParam::I32(x_at as i32),
            KernelParam::I32(y_at as i32),
            KernelParam::I32(N as i32),
        ],
        grid,
    );
    let mut saxpy = Vec::new();
    for (name, function, params) in [
        ("hand-written PTX", &hand, &hand_params[..]),
        ("Rust (Wasm -> PTX)", &rust.function, &rust_params[..]),
    ] {
        // One checked launch from fresh inputs, then the timed ones.
        guest.write(d, x_at, &f32s_to_bytes(&x))?;
        guest.write(d, y_at, &f32s_to_bytes(&y))?;
        // SAFETY: as in `time`: pointers inside the guest buffer and status
        // word, alive past the synchronize; parameters match the kernel.
        unsafe { d.launch(&stream, function, &config, params) }.map_err(|e| e.to_string())?;
        d.stream_synchronize(&stream).map_err(|e| e.to_string())?;
        guest.check_status(d, name)?;
        let got = bytes_to_f32s(&guest.read(d, y_at, N * 4)?);
        if let Some(i) = first_wrong(&got, &want) {
            return Err(format!(
                "saxpy, {name}: y[{i}] = {}, want {}",
                got[i], want[i]
            ));
        }
        let samples = time(d, &stream, function, &config, params)?;
        guest.check_status(d, name)?;
        let ms = median(&samples);
        let gbs = 12.0 * N as f64 / (ms * 1e-3) / 1e9;
        saxpy.push((name, ms, gbs, samples));
    }
    let saxpy_ratio = saxpy[1].2 / saxpy[0].2;
    println!("\nSAXPY, {N} elements, block {BLOCK} (median of {REPS} x {LAUNCHES} launches):");
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
    guest.write(d, gx_at, &f32s_to_bytes(&gx))?;
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
    let grid = (GATHER_N as u32).div_ceil(BLOCK);
    let config = LaunchConfig {
        grid: Dim3 {
            x: grid,
            y: 1,
            z: 1,
        },
        ..config
    };
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
        let kernel = load_wasm_kernel(d, &wasm, name)?;
        let window = kernel.translated.stack_window.map_or(0, |w| w.bytes);
        let args = if name == "gather_inline" {
            &inline_args[..]
        } else {
            &args[..]
        };
        let params = guest.wasm_params(&kernel, args, grid);
        d.memset(guest.memory.range(out_at, GATHER_N * 4).ok_or("range")?, 0)
            .map_err(|e| e.to_string())?;
        let samples = time(d, &stream, &kernel.function, &config, &params)?;
        guest.check_status(d, name)?;
        let got = bytes_to_f32s(&guest.read(d, out_at, GATHER_N * 4)?);
        if let Some(i) = first_wrong(&got, want) {
            return Err(format!("{name}: out[{i}] = {}, want {}", got[i], want[i]));
        }
        gather.push((name, window, median(&samples), samples));
    }
    let frame_ratio = gather[1].2 / gather[2].2;
    let frame_regs_ratio = gather[0].2 / gather[2].2;
    let stack_ratio = gather[1].2 / gather[3].2;
    println!(
        "\nGather-accumulate, {GATHER_N} threads x {STEPS} loads (median of {REPS} x {LAUNCHES}):"
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

    let record = json!({
        "bench": "rust_kernels",
        "when": utc_timestamp(),
        "command": command_line(),
        "device": info.name,
        "compute_capability": info.compute_capability,
        "driver_version": info.driver_version,
        "seed": seed,
        "launches_per_sample": LAUNCHES,
        "samples": REPS,
        "ratios": {
            "saxpy_rust_over_hand_ptx_bandwidth": saxpy_ratio,
            "gather_frame_over_inline_speed": frame_ratio,
            "gather_frame_over_regs_speed": frame_regs_ratio,
            "gather_stack_over_inline_speed": stack_ratio,
        },
        "rows": rows,
    });
    let out = std::env::var_os("OUT").map_or_else(|| PathBuf::from("."), PathBuf::from);
    let path = out.join("rust_kernels.json");
    let text = serde_json::to_string_pretty(&record).map_err(|e| e.to_string())?;
    std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))?;
    println!("\nwrote {}", path.display());
    Ok(())
}
