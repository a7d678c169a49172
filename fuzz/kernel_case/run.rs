//! Running a case: its launch geometry and arguments, the reference run on
//! wasmtime, and the kernel's launch on a driver (the CPU driver or CUDA,
//! through the same `GpuDriver` calls).

use arbitrary::{Result as ArbitraryResult, Unstructured};
use tensorwasm_core::{
    DeviceMemory, Dim3, GpuDriver, KernelParam, LaunchConfig,
    lower::{INTRINSIC_MODULE, Intrinsic, KernelTrap},
};
use tensorwasm_embed::kernel::cpu::{HiddenParams, STATUS_BYTES, launch_params, one_block_each};
use wasmparser::ValType;

use super::facts::Facts;
use super::{KERNEL_EXPORT, KERNEL_FUEL, MAX_DIM, WASMTIME_FUEL};

/// Bytes past guest memory, filled with a pattern the kernel must not touch.
const CANARY: usize = 4096;
const CANARY_BYTE: u8 = 0xa5;

/// The grid, the block, and the one thread (block index, thread index) that
/// does the work. An axis is longer than 1 only if the module imports its
/// index intrinsic, so the kernel's check can tell that thread apart.
#[derive(Debug)]
pub struct Launch {
    pub grid: Dim3,
    pub block: Dim3,
    pub block_idx: Dim3,
    pub thread_idx: Dim3,
}

impl Launch {
    pub fn arbitrary(u: &mut Unstructured<'_>, facts: &Facts) -> ArbitraryResult<Launch> {
        let mut axis = |index: Intrinsic| -> ArbitraryResult<(u32, u32)> {
            if facts.intrinsic(index).is_none() {
                return Ok((1, 0));
            }
            let extent = u.int_in_range(1..=MAX_DIM)?;
            Ok((extent, u.int_in_range(0..=extent - 1)?))
        };
        let (gx, bx) = axis(Intrinsic::BlockIdxX)?;
        let (gy, by) = axis(Intrinsic::BlockIdxY)?;
        let (gz, bz) = axis(Intrinsic::BlockIdxZ)?;
        let (nx, tx) = axis(Intrinsic::ThreadIdxX)?;
        let (ny, ty) = axis(Intrinsic::ThreadIdxY)?;
        let (nz, tz) = axis(Intrinsic::ThreadIdxZ)?;
        let dim = |x, y, z| Dim3 { x, y, z };
        Ok(Launch {
            grid: dim(gx, gy, gz),
            block: dim(nx, ny, nz),
            block_idx: dim(bx, by, bz),
            thread_idx: dim(tx, ty, tz),
        })
    }

    /// What `which` returns in the working thread.
    pub fn intrinsic(&self, which: Intrinsic) -> u32 {
        match which {
            Intrinsic::ThreadIdxX => self.thread_idx.x,
            Intrinsic::ThreadIdxY => self.thread_idx.y,
            Intrinsic::ThreadIdxZ => self.thread_idx.z,
            Intrinsic::BlockIdxX => self.block_idx.x,
            Intrinsic::BlockIdxY => self.block_idx.y,
            Intrinsic::BlockIdxZ => self.block_idx.z,
            Intrinsic::BlockDimX => self.block.x,
            Intrinsic::BlockDimY => self.block.y,
            Intrinsic::BlockDimZ => self.block.z,
            Intrinsic::GridDimX => self.grid.x,
            Intrinsic::GridDimY => self.grid.y,
            Intrinsic::GridDimZ => self.grid.z,
        }
    }
}

/// A Wasm value: its type and bits.
#[derive(Clone, Copy)]
pub struct Arg(pub ValType, pub u64);

impl std::fmt::Debug for Arg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            ValType::I32 => write!(f, "i32 {:#x}", self.1),
            ValType::I64 => write!(f, "i64 {:#x}", self.1),
            ValType::F32 => write!(f, "f32 {:#x} ({})", self.1, f32::from_bits(self.1 as u32)),
            _ => write!(f, "f64 {:#x} ({})", self.1, f64::from_bits(self.1)),
        }
    }
}

impl Arg {
    fn val(self) -> wasmtime::Val {
        match self.0 {
            ValType::I32 => wasmtime::Val::I32(self.1 as u32 as i32),
            ValType::I64 => wasmtime::Val::I64(self.1 as i64),
            ValType::F32 => wasmtime::Val::F32(self.1 as u32),
            _ => wasmtime::Val::F64(self.1),
        }
    }

    fn from_val(val: wasmtime::Val) -> Arg {
        match val {
            wasmtime::Val::I32(v) => Arg(ValType::I32, u64::from(v as u32)),
            wasmtime::Val::I64(v) => Arg(ValType::I64, v as u64),
            wasmtime::Val::F32(v) => Arg(ValType::F32, u64::from(v)),
            wasmtime::Val::F64(v) => Arg(ValType::F64, v),
            _ => panic!("a kernel global of a non-scalar type"),
        }
    }

    pub fn param(self) -> KernelParam {
        match self.0 {
            ValType::I32 => KernelParam::I32(self.1 as u32 as i32),
            ValType::I64 => KernelParam::I64(self.1 as i64),
            ValType::F32 => KernelParam::F32(f32::from_bits(self.1 as u32)),
            _ => KernelParam::F64(f64::from_bits(self.1)),
        }
    }
}

/// An argument: an address near or in memory, an edge value, or any bits.
pub fn arbitrary_arg(u: &mut Unstructured<'_>, ty: ValType, mem_len: u64) -> ArbitraryResult<Arg> {
    const INTS: [i64; 10] = [
        0,
        1,
        -1,
        2,
        i32::MIN as i64,
        i32::MAX as i64,
        i64::MIN,
        i64::MAX,
        31,
        64,
    ];
    const F32S: [u32; 8] = [
        0x0000_0000,
        0x8000_0000,
        0x3f80_0000,
        0x7f80_0000,
        0x4f00_0000,
        0xcf00_0000,
        0x7fc0_0000,
        0x7fa0_0001,
    ];
    const F64S: [u64; 8] = [
        0,
        0x8000_0000_0000_0000,
        0x3ff0_0000_0000_0000,
        0x7ff0_0000_0000_0000,
        0x41e0_0000_0000_0000,
        0xc3e0_0000_0000_0000,
        0x7ff8_0000_0000_0000,
        0x7ff4_0000_0000_0001,
    ];
    let bits = match (u.int_in_range(0..=3u8)?, ty) {
        (0, ValType::I32 | ValType::I64) => u.int_in_range(0..=mem_len + 16)?,
        (1, ValType::I32 | ValType::I64) => *u.choose(&INTS)? as u64,
        (0 | 1, ValType::F32) => u64::from(*u.choose(&F32S)?),
        (0 | 1, _) => *u.choose(&F64S)?,
        _ => u.arbitrary()?,
    };
    Ok(match ty {
        ValType::I32 | ValType::F32 => Arg(ty, bits & 0xffff_ffff),
        _ => Arg(ty, bits),
    })
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Returned,
    Trapped {
        trap: KernelTrap,
        offset: u32,
    },
    OutOfFuel,
    /// wasmtime only.
    StackOverflow,
}

/// The reference engine: no optimization (a trap keeps its operator's
/// offset), fuel, explicit checks instead of signal handlers (libFuzzer
/// and AddressSanitizer own those), and no NaN canonicalization: the module
/// canonicalizes its own arithmetic NaNs, and wasmtime's would also
/// canonicalize `f32.demote_f64`/`f64.promote_f32`, which Wasm lets keep
/// the payload and the kernels do.
pub fn engine() -> &'static wasmtime::Engine {
    static ENGINE: std::sync::OnceLock<wasmtime::Engine> = std::sync::OnceLock::new();
    ENGINE.get_or_init(|| {
        let mut config = wasmtime::Config::new();
        config
            .cranelift_opt_level(wasmtime::OptLevel::None)
            .consume_fuel(true)
            .signals_based_traps(false)
            .parallel_compilation(false)
            .cranelift_nan_canonicalization(false)
            .wasm_threads(true);
        wasmtime::Engine::new(&config).expect("the reference engine")
    })
}

pub struct Reference {
    store: wasmtime::Store<()>,
    instance: wasmtime::Instance,
    memory: wasmtime::Memory,
    kernel: wasmtime::Func,
}

impl Reference {
    /// `None` where instantiation fails (a data or element segment out of
    /// bounds).
    pub fn instantiate(module: &wasmtime::Module, launch: &Launch) -> Option<Reference> {
        let mut linker = wasmtime::Linker::new(engine());
        for which in Intrinsic::ALL {
            let value = launch.intrinsic(which) as i32;
            linker
                .func_wrap(INTRINSIC_MODULE, which.import_name(), move || value)
                .expect("an intrinsic");
        }
        let mut store = wasmtime::Store::new(engine(), ());
        store.set_fuel(WASMTIME_FUEL).expect("fuel");
        let instance = linker.instantiate(&mut store, module).ok()?;
        let memory = instance
            .get_memory(&mut store, "memory")
            .expect("memory 0, exported");
        let kernel = instance
            .get_func(&mut store, KERNEL_EXPORT)
            .expect("the kernel, exported");
        Some(Reference {
            store,
            instance,
            memory,
            kernel,
        })
    }

    /// Global `index`'s value now (the module exports it as `g<index>`).
    pub fn global(&mut self, index: u32) -> Arg {
        let global = self
            .instance
            .get_global(&mut self.store, &format!("g{index}"))
            .unwrap_or_else(|| panic!("global {index}, exported"));
        Arg::from_val(global.get(&mut self.store))
    }

    pub fn memory(&mut self) -> &mut [u8] {
        self.memory.data_mut(&mut self.store)
    }

    /// Calls the kernel; its outcome and memory afterwards.
    pub fn call(&mut self, args: &[Arg]) -> (Outcome, Vec<u8>) {
        let args: Vec<wasmtime::Val> = args.iter().map(|a| a.val()).collect();
        let result = self.kernel.call(&mut self.store, &args, &mut []);
        let memory = self.memory.data(&self.store).to_vec();
        let Err(error) = result else {
            return (Outcome::Returned, memory);
        };
        let trap = *error
            .downcast_ref::<wasmtime::Trap>()
            .unwrap_or_else(|| panic!("wasmtime failed without a trap: {error:?}"));
        let offset = error
            .downcast_ref::<wasmtime::WasmBacktrace>()
            .and_then(|bt| bt.frames().first().and_then(|f| f.module_offset()))
            .map(|o| o as u32);
        let trap = match trap {
            wasmtime::Trap::OutOfFuel => return (Outcome::OutOfFuel, memory),
            wasmtime::Trap::StackOverflow => return (Outcome::StackOverflow, memory),
            wasmtime::Trap::UnreachableCodeReached => KernelTrap::Unreachable,
            wasmtime::Trap::MemoryOutOfBounds => KernelTrap::HeapOutOfBounds,
            wasmtime::Trap::IntegerDivisionByZero => KernelTrap::IntegerDivideByZero,
            wasmtime::Trap::BadConversionToInteger => KernelTrap::BadConversionToInteger,
            wasmtime::Trap::IntegerOverflow => KernelTrap::IntegerOverflow,
            wasmtime::Trap::TableOutOfBounds => KernelTrap::TableOutOfBounds,
            wasmtime::Trap::IndirectCallToNull => KernelTrap::IndirectCallToNull,
            wasmtime::Trap::BadSignature => KernelTrap::BadSignature,
            wasmtime::Trap::HeapMisaligned => KernelTrap::HeapMisaligned,
            other => panic!("unexpected wasmtime trap {other:?}"),
        };
        let offset = offset.expect("a backtrace with the trapping offset");
        (Outcome::Trapped { trap, offset }, memory)
    }
}

/// What a launch on a driver left behind.
pub struct Launched {
    pub outcome: Outcome,
    /// Guest memory afterwards.
    pub memory: Vec<u8>,
    /// The first byte past guest memory that the kernel changed.
    pub canary: Option<usize>,
}

/// Launches `function` (a translated kernel, loaded) over a copy of
/// `image` in managed memory (canary bytes after it), with the Wasm
/// arguments and then the globals' launch values. `Err` where the driver
/// fails (on CUDA, a launch that faulted).
pub fn launch_on<D: GpuDriver>(
    d: &D,
    stream: &D::Stream,
    function: &D::Function,
    launch: &Launch,
    args: &[Arg],
    image: &[u8],
) -> Result<Launched, String> {
    let fail = |what: &'static str| move |e: D::Error| format!("{what}: {e}");
    let canary = [CANARY_BYTE; CANARY];
    let memory = d
        .alloc_managed(image.len() + CANARY)
        .map_err(fail("guest memory"))?;
    let status = d
        .alloc_device(STATUS_BYTES)
        .map_err(fail("the status word"))?;
    d.copy_to_device(memory.range(0, image.len()).expect("range"), image)
        .map_err(fail("write guest memory"))?;
    d.copy_to_device(memory.range(image.len(), CANARY).expect("range"), &canary)
        .map_err(fail("write the canary"))?;
    d.memset(status.full(), 0)
        .map_err(fail("zero the status word"))?;
    let wasm_args: Vec<KernelParam> = args.iter().map(|a| a.param()).collect();
    let params = launch_params(
        &wasm_args,
        HiddenParams {
            mem_base: memory.device_ptr(),
            mem_len: image.len() as u64,
            status: status.device_ptr(),
            fuel: KERNEL_FUEL,
            // Fuel, not time, bounds these kernels: the runs must be
            // deterministic.
            time_limit: u64::MAX,
            grid: (launch.grid.x, launch.grid.y, launch.grid.z),
        },
    );
    let config = LaunchConfig {
        grid: one_block_each(launch.grid),
        block: launch.block,
        shared_mem_bytes: 0,
    };
    // SAFETY: guest memory is the first `image.len()` bytes of `memory`
    // and the status word is `status`, as the hidden parameters say; both
    // outlive the launch: the synchronize below waits for it, and where
    // that fails the kernel has stopped (a faulted CUDA context runs
    // nothing more) before the buffers are dropped.
    unsafe { d.launch(stream, function, &config, &params) }.map_err(fail("launch"))?;
    d.stream_synchronize(stream)
        .map_err(fail("the kernel's launch failed"))?;

    let mut after = vec![0; image.len() + CANARY];
    d.copy_from_device(&mut after, memory.full())
        .map_err(fail("read guest memory"))?;
    let mut word = [0u8; STATUS_BYTES];
    d.copy_from_device(&mut word, status.full())
        .map_err(fail("read the status word"))?;
    let code = u32::from_le_bytes(word[..4].try_into().expect("4 bytes"));
    let offset = u64::from_le_bytes(word[8..16].try_into().expect("8 bytes"));
    let outcome = match code {
        0 => Outcome::Returned,
        _ => match KernelTrap::from_code(code) {
            Some(KernelTrap::OutOfFuel) => Outcome::OutOfFuel,
            Some(trap) => Outcome::Trapped {
                trap,
                offset: offset as u32,
            },
            None => return Err(format!("status code {code} is no KernelTrap")),
        },
    };
    let past = after.split_off(image.len());
    let changed = (past != canary)
        .then(|| past.iter().position(|&b| b != CANARY_BYTE))
        .flatten();
    Ok(Launched {
        outcome,
        memory: after,
        canary: changed,
    })
}
