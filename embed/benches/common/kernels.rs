//! Kernels launched with the raw driver, as the runtime launches them: a
//! guest module's Wasm kernel (translated by export name, loaded through
//! the driver's [`KernelTarget`]) over one device buffer that stands for
//! the guest's memory, with the launch values of its globals and the
//! hidden parameters; a built-in kernel from the table's launch plan
//! (`tensorwasm_kernels::table::plan`); `timing::time` times them. Generic
//! over the driver, so the same code runs on the CPU driver where a bench
//! wants to check it there.

use std::path::PathBuf;

use tensorwasm_core::{
    DeviceMemory, DevicePtr, Dim3, GpuDriver, KernelParam, LaunchConfig,
    abi::tensor::TensorOp,
    lower::{
        status,
        translate::{
            KernelLimits, KernelVariant, TranslatedKernel, WasmType, function_by_export,
            translate_kernel_variant,
        },
    },
};
use tensorwasm_embed::kernel::{
    KernelTarget,
    cpu::{HiddenParams, own_grid_launch_params},
};
use tensorwasm_kernels::table::{self, LaunchPlan};
use wasmparser::{DataKind, Operator, Parser, Payload};

use super::inputs::{f32_bytes, f32s};

/// Each thread's fuel, as `wasi_cuda` gives it by default
/// (`WasiCudaLimits::default().kernel_fuel`).
pub const KERNEL_FUEL: u64 = 1 << 24;

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
        self.write(d, at, &f32_bytes(values))
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
        Ok(f32s(&bytes))
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

impl<'a, D: GpuDriver> Launch<'a, D> {
    /// A 1-D launch of `function` over `threads` threads (rounded up to
    /// whole blocks of `block`), without shared memory.
    pub fn linear(
        function: &'a D::Function,
        threads: usize,
        block: u32,
        params: Vec<KernelParam>,
    ) -> Launch<'a, D> {
        Launch {
            function,
            config: LaunchConfig {
                grid: Dim3::linear((threads as u32).div_ceil(block)),
                block: Dim3::linear(block),
                shared_mem_bytes: 0,
            },
            params,
        }
    }
}

/// The variant `kernel_get` makes for a guest with the device to itself
/// (a full share, no time limit), which is how the benches launch.
pub const KERNEL_GET_VARIANT: KernelVariant = KernelVariant::OWN_ALIGNED;

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
    /// Export `name` of `wasm`, as `kernel_get` makes it for a guest with
    /// the device to itself: the variant for launches of the guest's own
    /// grid with aligned arguments ([`KERNEL_GET_VARIANT`]).
    pub fn load(d: &D, wasm: &[u8], name: &str) -> Result<WasmKernel<D>, String> {
        let index = function_by_export(wasm, name).map_err(|e| format!("{name}: {e}"))?;
        let translated =
            translate_kernel_variant(wasm, index, KernelLimits::HOST, KERNEL_GET_VARIANT)
                .map_err(|e| format!("{name}: {e}"))?;
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
    /// device to itself: the virtual grid launched as the physical one, the shared
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
        let arg = |i: usize| match wasm_args.get(i) {
            Some(KernelParam::I32(v)) => Some(*v as u32),
            _ => None,
        };
        assert!(
            self.translated
                .admits_aligned(arg, guest.memory.len() as u64),
            "{}: the benches launch the aligned variant with aligned arguments",
            self.translated.name
        );
        let params = own_grid_launch_params(
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
                grid,
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
