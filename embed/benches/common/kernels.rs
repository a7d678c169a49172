//! Kernels launched with the raw driver, as the runtime launches them: a
//! guest module's Wasm kernel (translated by export name, loaded through
//! the driver's [`KernelTarget`]) over one device buffer that stands for
//! the guest's memory, with the launch values of its globals and the
//! hidden parameters; a built-in kernel from the table's launch plan
//! (`tensorwasm_kernels::table::plan`). Then timing with events, medians,
//! and seeded inputs. Generic over the driver, so the same code runs on
//! the CPU driver where a bench wants to check it there; only
//! [`main_on_device`], a bench's `main` on CUDA device 0, and
//! [`kernel_bench_wasm`], the guest module the kernels come from, are not.

use std::{path::PathBuf, process::ExitCode};

use tensorwasm_core::{
    DeviceMemory, DevicePtr, Dim3, GpuDriver, KernelParam, LaunchConfig,
    abi::tensor::TensorOp,
    lower::{
        status,
        translate::{TranslatedKernel, WasmType, function_by_export, translate_kernel},
    },
};
use tensorwasm_cuda::CudaDriver;
use tensorwasm_embed::kernel::{
    KernelTarget,
    cpu::{HiddenParams, launch_params, one_block_each},
};
use tensorwasm_kernels::table::{self, LaunchPlan};
use wasmparser::{DataKind, Operator, Parser, Payload};

/// Each thread's fuel, as `wasi_cuda` gives it by default
/// (`WasiCudaLimits::default().kernel_fuel`).
pub const KERNEL_FUEL: u64 = 1 << 24;

/// What a bench does when device 0 does not open.
#[derive(Clone, Copy, Debug)]
pub enum NoDevice {
    /// Says so on stdout and exits 0: nothing to measure is no failure.
    Skip,
    /// Says so on stderr and exits 2, for a caller that needs the numbers.
    Fail,
}

/// A bench's `main`: `run` on CUDA device 0. Exits 0 when it succeeds, 1
/// with its error on stderr when it fails, and as `no_device` says when
/// there is no device; every message starts with `bench`.
pub fn main_on_device(
    bench: &str,
    no_device: NoDevice,
    run: impl FnOnce(&CudaDriver) -> Result<(), String>,
) -> ExitCode {
    let driver = match CudaDriver::new(0) {
        Ok(d) => d,
        Err(e) => {
            let message = format!("{bench}: no CUDA device ({e}); nothing measured");
            return match no_device {
                NoDevice::Skip => {
                    println!("{message}");
                    ExitCode::SUCCESS
                }
                NoDevice::Fail => {
                    eprintln!("{message}");
                    ExitCode::from(2)
                }
            };
        }
    };
    match run(&driver) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{bench}: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The bytes of `guest/examples/kernel-bench`'s module: the file in
/// `RUST_KERNELS_WASM`, else the release build in the guest workspace.
pub fn kernel_bench_wasm() -> Result<Vec<u8>, String> {
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

/// The guest's memory on the device, and the status word of its kernels'
/// launches (zeroed).
pub struct GuestMemory<D: GpuDriver> {
    memory: D::DeviceBuffer,
    status: D::DeviceBuffer,
}

impl<D: GpuDriver> GuestMemory<D> {
    /// `bytes` of guest memory, uninitialised but for `wasm`'s active data
    /// segments (its constants: a kernel may read them).
    pub fn new(d: &D, bytes: usize, wasm: &[u8]) -> Result<GuestMemory<D>, String> {
        let guest: GuestMemory<D> = GuestMemory {
            memory: d.alloc_device(bytes).map_err(|e| e.to_string())?,
            status: d.alloc_device(status::BYTES).map_err(|e| e.to_string())?,
        };
        d.memset(guest.status.full(), 0)
            .map_err(|e| e.to_string())?;
        for (at, bytes) in data_segments(wasm)? {
            guest.write(d, at, bytes)?;
        }
        Ok(guest)
    }

    /// Copies `bytes` to guest address `at`.
    pub fn write(&self, d: &D, at: usize, bytes: &[u8]) -> Result<(), String> {
        let range = self
            .memory
            .range(at, bytes.len())
            .ok_or_else(|| format!("{} bytes at {at}: past the guest memory", bytes.len()))?;
        d.copy_to_device(range, bytes).map_err(|e| e.to_string())
    }

    /// Copies `values` to guest address `at`.
    pub fn write_f32s(&self, d: &D, at: usize, values: &[f32]) -> Result<(), String> {
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        self.write(d, at, &bytes)
    }

    /// The `len` `f32`s at guest address `at`.
    pub fn read_f32s(&self, d: &D, at: usize, len: usize) -> Result<Vec<f32>, String> {
        let mut bytes = vec![0; len * 4];
        let range = self
            .memory
            .range(at, bytes.len())
            .ok_or_else(|| format!("{len} floats at {at}: past the guest memory"))?;
        d.copy_from_device(&mut bytes, range)
            .map_err(|e| e.to_string())?;
        Ok(bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect())
    }

    /// Sets `len` bytes at guest address `at` to 0.
    pub fn zero(&self, d: &D, at: usize, len: usize) -> Result<(), String> {
        let range = self
            .memory
            .range(at, len)
            .ok_or_else(|| format!("{len} bytes at {at}: past the guest memory"))?;
        d.memset(range, 0).map_err(|e| e.to_string())
    }

    /// The device address of guest address `at` (for a built-in kernel).
    pub fn ptr(&self, at: usize) -> DevicePtr {
        DevicePtr(self.memory.device_ptr().0 + at as u64)
    }

    /// Fails with `what` and the trap code if a kernel thread trapped
    /// since the status word was zeroed.
    pub fn check_status(&self, d: &D, what: &str) -> Result<(), String> {
        let mut word = [0u8; status::BYTES];
        d.copy_from_device(&mut word, self.status.full())
            .map_err(|e| e.to_string())?;
        match u32::from_le_bytes([word[0], word[1], word[2], word[3]]) {
            0 => Ok(()),
            code => Err(format!("{what} trapped (code {code})")),
        }
    }
}

/// `wasm`'s active data segments: (guest address, bytes).
fn data_segments(wasm: &[u8]) -> Result<Vec<(usize, &[u8])>, String> {
    let mut segments = Vec::new();
    for payload in Parser::new(0).parse_all(wasm) {
        let Payload::DataSection(reader) = payload.map_err(|e| e.to_string())? else {
            continue;
        };
        for data in reader {
            let data = data.map_err(|e| e.to_string())?;
            let DataKind::Active { offset_expr, .. } = data.kind else {
                continue;
            };
            match offset_expr.get_operators_reader().read() {
                Ok(Operator::I32Const { value }) => {
                    segments.push((value.cast_unsigned() as usize, data.data));
                }
                _ => return Err("a data segment's offset is not an i32.const".into()),
            }
        }
    }
    Ok(segments)
}

/// The value global `index` of `wasm` starts with (an `i32.const`).
fn global_init(wasm: &[u8], index: u32) -> Result<i32, String> {
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

/// One launch, ready to queue: a function, its geometry, its parameters.
pub struct Launch<'a, D: GpuDriver> {
    pub function: &'a D::Function,
    pub config: LaunchConfig,
    pub params: Vec<KernelParam>,
}

/// A Wasm kernel of a guest module, translated, lowered and loaded.
pub struct WasmKernel<D: GpuDriver> {
    pub translated: TranslatedKernel,
    function: D::Function,
    _module: D::Module,
    /// The launch values of its globals: their initial values (no guest
    /// code ran before the launch).
    globals: Vec<KernelParam>,
}

impl<D: KernelTarget> WasmKernel<D> {
    /// Export `name` of `wasm`, as `kernel_get` makes it.
    pub fn load(d: &D, wasm: &[u8], name: &str) -> Result<WasmKernel<D>, String> {
        let index = function_by_export(wasm, name).map_err(|e| format!("{name}: {e}"))?;
        let translated = translate_kernel(wasm, index).map_err(|e| format!("{name}: {e}"))?;
        let module = d
            .load_kernel(&translated)
            .map_err(|e| format!("{name}: {e}"))?;
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
            .collect::<Result<_, String>>()?;
        Ok(WasmKernel {
            translated,
            function,
            _module: module,
            globals,
        })
    }

    /// A launch of `grid` x `block` threads with `shared_bytes` of shared
    /// memory over `guest`, as `launch` queues it for a guest with the
    /// device to itself: one physical block per virtual block, the shared
    /// bytes rounded up to 16, the default fuel, no time limit (every check
    /// still runs).
    pub fn launch(
        &self,
        guest: &GuestMemory<D>,
        args: &[KernelParam],
        grid: Dim3,
        block: Dim3,
        shared_bytes: u32,
    ) -> Launch<'_, D> {
        let mut wasm_args = args.to_vec();
        wasm_args.extend(self.globals.iter().copied());
        let params = launch_params(
            &wasm_args,
            HiddenParams {
                mem_base: guest.memory.device_ptr(),
                mem_len: guest.memory.len() as u64,
                status: guest.status.device_ptr(),
                fuel: KERNEL_FUEL,
                time_limit: u64::MAX,
                grid: (grid.x, grid.y, grid.z),
            },
        );
        Launch {
            function: &self.function,
            config: LaunchConfig {
                grid: one_block_each(grid),
                block,
                shared_mem_bytes: shared_bytes.next_multiple_of(16),
            },
            params,
        }
    }
}

/// A built-in tensor kernel, loaded, with the launch the runtime plans
/// for one op.
pub struct Builtin<D: GpuDriver> {
    pub plan: LaunchPlan,
    function: D::Function,
    _module: D::Module,
}

impl<D: KernelTarget> Builtin<D> {
    /// The kernel and launch that run `op` on `d`'s device
    /// (`table::plan_on`, the build for its architecture).
    pub fn load(d: &D, op: &TensorOp) -> Result<Builtin<D>, String> {
        let info = d.device();
        let sm = info.compute_capability.map(|(a, b)| a * 10 + b);
        let plan = table::plan_on(op, sm, info.multiprocessor_count).map_err(|e| e.to_string())?;
        let module = d
            .load_builtins(plan.kernel.file)
            .map_err(|e| format!("{}: {e}", plan.kernel.entry))?;
        let function = d
            .function(&module, plan.kernel.entry)
            .map_err(|e| format!("{}: {e}", plan.kernel.entry))?;
        Ok(Builtin {
            plan,
            function,
            _module: module,
        })
    }

    /// The planned launch, with the plan's dynamic shared memory.
    pub fn launch(&self) -> Launch<'_, D> {
        Launch {
            function: &self.function,
            config: LaunchConfig {
                grid: self.plan.grid,
                block: self.plan.block,
                shared_mem_bytes: self.plan.shared_bytes,
            },
            params: self.plan.params.clone(),
        }
    }
}

/// Queues `launch` on `stream` and waits for it.
pub fn run_once<D: GpuDriver>(
    d: &D,
    stream: &D::Stream,
    launch: &Launch<'_, D>,
) -> Result<(), String> {
    // SAFETY: every pointer parameter is in a device buffer the caller
    // keeps alive (the guest memory, its status word), the synchronize
    // below waits for the launch, and the parameters follow the kernel's
    // signature (the translated kernel's ABI, or the table's plan).
    unsafe { d.launch(stream, launch.function, &launch.config, &launch.params) }
        .map_err(|e| e.to_string())?;
    d.stream_synchronize(stream).map_err(|e| e.to_string())
}

/// How many launches [`time`] makes.
#[derive(Clone, Copy, Debug)]
pub struct Repeats {
    /// Untimed launches first.
    pub warmup: usize,
    /// Samples.
    pub samples: usize,
    /// Back-to-back launches per sample.
    pub launches: usize,
}

/// The milliseconds per launch of each sample: `launches` back-to-back
/// launches between two events, after the warm-up.
pub fn time<D: GpuDriver>(
    d: &D,
    stream: &D::Stream,
    launch: &Launch<'_, D>,
    repeats: Repeats,
) -> Result<Vec<f64>, String> {
    let queue = || {
        // SAFETY: as in `run_once`; the event synchronize below waits for
        // every launch before the caller may free anything.
        unsafe { d.launch(stream, launch.function, &launch.config, &launch.params) }
            .map_err(|e| e.to_string())
    };
    for _ in 0..repeats.warmup {
        queue()?;
    }
    d.stream_synchronize(stream).map_err(|e| e.to_string())?;
    let (start, end) = (
        d.create_event().map_err(|e| e.to_string())?,
        d.create_event().map_err(|e| e.to_string())?,
    );
    let mut samples = Vec::with_capacity(repeats.samples);
    for _ in 0..repeats.samples {
        d.record_event(&start, stream).map_err(|e| e.to_string())?;
        for _ in 0..repeats.launches {
            queue()?;
        }
        d.record_event(&end, stream).map_err(|e| e.to_string())?;
        d.event_synchronize(&end).map_err(|e| e.to_string())?;
        let ms = d
            .event_elapsed_ms(&start, &end)
            .map_err(|e| e.to_string())?;
        samples.push(f64::from(ms) / repeats.launches as f64);
    }
    Ok(samples)
}

/// The median of `samples` (the mean of the middle two of an even count).
pub fn median(samples: &[f64]) -> f64 {
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
pub fn first_wrong(got: &[f32], want: &[f32]) -> Option<usize> {
    got.iter()
        .zip(want)
        .position(|(g, w)| g.to_bits() != w.to_bits())
}

/// splitmix64.
pub fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Element `i` of random vector `v` of `seed`: uniform in `[lo, hi)` on a
/// grid of 2^24 points, each in the middle of its step, so none is 0 when
/// `lo` is a whole number of steps from 0 (as for `[-2, 2)` or `[-1, 3)`).
pub fn uniform(seed: u64, v: u64, i: usize, lo: f64, hi: f64) -> f32 {
    let bits = mix(seed ^ mix(v.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ i as u64)) >> 40;
    (lo + (hi - lo) * (bits as f64 + 0.5) / (1u64 << 24) as f64) as f32
}

/// The seed in environment variable `var` (decimal), else one from the
/// clock; the caller prints it either way.
pub fn seed_from_env(var: &str) -> u64 {
    std::env::var(var)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |t| t.as_nanos() as u64)
        })
}
