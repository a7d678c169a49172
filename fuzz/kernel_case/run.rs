//! Running a case: its launch geometry and arguments, the reference run on
//! wasmtime (with the cooperative intrinsics as host functions, as the
//! block's only live thread sees them), and the kernel's launch on a driver
//! (the CPU driver or CUDA, through the same `GpuDriver` calls).

use arbitrary::{Result as ArbitraryResult, Unstructured};
use tensorwasm_core::{
    DeviceMemory, Dim3, GpuDriver, KernelParam, LaunchConfig,
    lower::{
        INTRINSIC_MODULE, Intrinsic, KernelTrap,
        cooperative::{CoopIntrinsic, Vote},
        math::MathIntrinsic,
        translate::{GridVariant, WasmType},
    },
};
use tensorwasm_embed::kernel::cpu::{
    HiddenParams, STATUS_BYTES, launch_params, one_block_each, own_grid_launch_params,
};
use wasmparser::ValType;

use super::facts::{Facts, coop_tracked};
use super::{KERNEL_EXPORT, KERNEL_FUEL, MAX_DIM, WASMTIME_FUEL};

/// Bytes past guest memory, filled with a pattern the kernel must not touch.
const CANARY: usize = 4096;
const CANARY_BYTE: u8 = 0xa5;

/// Shared bytes per block a launch may ask for (multiples of 16, as the
/// host rounds them), when the module imports a shared-memory intrinsic.
const SHARED_BYTES: [u32; 5] = [0, 16, 64, 256, 4096];

/// Lanes in a warp (`docs/kernels.md`, "Warp operations").
const WARP: u32 = 32;

/// The grid, the block, the one thread (block index, thread index) that
/// does the work, and the block's shared bytes. A grid axis is longer than
/// 1 only if the module imports its index intrinsic, a block axis only if
/// it imports its index intrinsic or `lane_id`, so the kernel's check can
/// tell that thread apart.
#[derive(Debug)]
pub struct Launch {
    pub grid: Dim3,
    pub block: Dim3,
    pub block_idx: Dim3,
    pub thread_idx: Dim3,
    pub shared_bytes: u32,
}

impl Launch {
    pub fn arbitrary(u: &mut Unstructured<'_>, facts: &Facts) -> ArbitraryResult<Launch> {
        let lane_id = facts.coop(CoopIntrinsic::LaneId).is_some();
        let mut axis = |index: Intrinsic, or_lane_id: bool| -> ArbitraryResult<(u32, u32)> {
            if facts.intrinsic(index).is_none() && !or_lane_id {
                return Ok((1, 0));
            }
            let extent = u.int_in_range(1..=MAX_DIM)?;
            Ok((extent, u.int_in_range(0..=extent - 1)?))
        };
        let (gx, bx) = axis(Intrinsic::BlockIdxX, false)?;
        let (gy, by) = axis(Intrinsic::BlockIdxY, false)?;
        let (gz, bz) = axis(Intrinsic::BlockIdxZ, false)?;
        let (nx, tx) = axis(Intrinsic::ThreadIdxX, lane_id)?;
        let (ny, ty) = axis(Intrinsic::ThreadIdxY, lane_id)?;
        let (nz, tz) = axis(Intrinsic::ThreadIdxZ, lane_id)?;
        let shared_bytes = if facts.imports_shared_memory() {
            *u.choose(&SHARED_BYTES)?
        } else {
            0
        };
        let dim = |x, y, z| Dim3 { x, y, z };
        Ok(Launch {
            grid: dim(gx, gy, gz),
            block: dim(nx, ny, nz),
            block_idx: dim(bx, by, bz),
            thread_idx: dim(tx, ty, tz),
            shared_bytes,
        })
    }

    /// The working thread's lane: its linear id in the block
    /// (`x + nx * (y + ny * z)`) modulo 32.
    pub fn lane(&self) -> u32 {
        let (t, n) = (self.thread_idx, self.block);
        (t.x + n.x * (t.y + n.y * t.z)) % WARP
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
    store: wasmtime::Store<Block>,
    instance: wasmtime::Instance,
    memory: wasmtime::Memory,
    kernel: wasmtime::Func,
}

impl Reference {
    /// `None` where instantiation fails (a data or element segment out of
    /// bounds).
    pub fn instantiate(module: &wasmtime::Module, launch: &Launch) -> Option<Reference> {
        let mut linker = wasmtime::Linker::<Block>::new(engine());
        for which in Intrinsic::ALL {
            let value = launch.intrinsic(which) as i32;
            linker
                .func_wrap(INTRINSIC_MODULE, which.import_name(), move || value)
                .expect("an intrinsic");
        }
        for which in CoopIntrinsic::all() {
            let mut name = String::new();
            which.import_name(&mut name);
            let ty = wasmtime::FuncType::new(
                engine(),
                which.params().into_iter().map(wasmtime_type),
                which.result().map(wasmtime_type),
            );
            linker
                .func_new(
                    INTRINSIC_MODULE,
                    &name,
                    ty,
                    move |mut caller, args, results| {
                        if let Some(result) = caller.data_mut().call(which, args)? {
                            results[0] = result;
                        }
                        Ok(())
                    },
                )
                .expect("a cooperative intrinsic");
        }
        // The fused multiply-adds, as the host computes them in a guest's
        // own code.
        linker
            .func_wrap(
                INTRINSIC_MODULE,
                MathIntrinsic::FmaF32.import_name(),
                f32::mul_add,
            )
            .expect("fma_f32");
        linker
            .func_wrap(
                INTRINSIC_MODULE,
                MathIntrinsic::FmaF64.import_name(),
                f64::mul_add,
            )
            .expect("fma_f64");
        let block = Block {
            shared: vec![0; launch.shared_bytes as usize],
            lane: launch.lane(),
            ran: Vec::new(),
            shared_trap: false,
        };
        let mut store = wasmtime::Store::new(engine(), block);
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

    /// The cooperative constructs the run called (`TRACKED`'s names;
    /// `lane_id` left out), and whether it trapped in a shared access.
    pub fn cooperation(&self) -> (Vec<&'static str>, bool) {
        let block = self.store.data();
        let mut ran = block.ran.clone();
        ran.sort_unstable();
        ran.dedup();
        (ran, block.shared_trap)
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

/// The block as the reference's cooperative intrinsics see it: the working
/// thread is its only live thread (the kernel's check returns in every
/// other), so `docs/kernels.md`'s semantics ("The GPU programming model")
/// reduce to one thread's: a barrier returns at once, a shuffle reads the
/// thread's own value (no other lane takes part), a vote is over its own
/// predicate.
struct Block {
    /// The block's shared memory, zeroed at launch.
    shared: Vec<u8>,
    /// The working thread's lane.
    lane: u32,
    /// The cooperative constructs called (`TRACKED`'s names, repeated),
    /// `lane_id` left out.
    ran: Vec<&'static str>,
    /// Whether a shared access trapped.
    shared_trap: bool,
}

impl Block {
    /// Cooperative intrinsic `which` with `args`: its result, or the trap
    /// (wasmtime attributes a host function's error to its `call`).
    fn call(
        &mut self,
        which: CoopIntrinsic,
        args: &[wasmtime::Val],
    ) -> wasmtime::Result<Option<wasmtime::Val>> {
        // Not `lane_id`: the kernel's check calls it in every run.
        if which != CoopIntrinsic::LaneId {
            self.ran.extend(coop_tracked(which));
        }
        let arg = |i: usize| Arg::from_val(args[i]).1;
        let i32_result = |v: u32| Some(Arg(ValType::I32, u64::from(v)).val());
        Ok(match which {
            CoopIntrinsic::SharedSize => i32_result(self.shared.len() as u32),
            CoopIntrinsic::SharedLoad(ty) => {
                let at = self.access(arg(0), size_of(ty))?;
                Some(Arg(value_type(ty), self.read(at, size_of(ty))).val())
            }
            CoopIntrinsic::SharedStore(ty) => {
                let at = self.access(arg(0), size_of(ty))?;
                self.write(at, size_of(ty), arg(1));
                None
            }
            CoopIntrinsic::SharedAtomic(a) => {
                let ty = a.value_type();
                let at = self.access(arg(0), size_of(ty))?;
                let old = self.read(at, size_of(ty));
                let operands: Vec<u64> = (1..args.len()).map(arg).collect();
                self.write(at, size_of(ty), a.new_value(old, &operands, f32_add));
                Some(Arg(value_type(ty), old).val())
            }
            CoopIntrinsic::Barrier => None,
            CoopIntrinsic::LaneId => i32_result(self.lane),
            CoopIntrinsic::WarpSize => i32_result(WARP),
            CoopIntrinsic::Shuffle(..) => Some(args[0]),
            CoopIntrinsic::Vote(vote) => {
                let pred = u32::from(arg(0) != 0);
                i32_result(match vote {
                    Vote::Ballot => pred << self.lane,
                    Vote::Any | Vote::All => pred,
                })
            }
        })
    }

    /// Where a shared access of `bytes` at `offset` (an `i32`'s bits,
    /// unsigned) reads: traps `HeapMisaligned` (wasmtime's "unaligned
    /// atomic") unless `bytes` divides `offset`, then out of bounds unless
    /// `offset + bytes <= shared_size`.
    fn access(&mut self, offset: u64, bytes: usize) -> wasmtime::Result<usize> {
        let at = offset as usize;
        let trap = if !at.is_multiple_of(bytes) {
            wasmtime::Trap::HeapMisaligned
        } else if at + bytes > self.shared.len() {
            wasmtime::Trap::MemoryOutOfBounds
        } else {
            return Ok(at);
        };
        self.shared_trap = true;
        Err(trap.into())
    }

    fn read(&self, at: usize, bytes: usize) -> u64 {
        let mut le = [0; 8];
        le[..bytes].copy_from_slice(&self.shared[at..at + bytes]);
        u64::from_le_bytes(le)
    }

    fn write(&mut self, at: usize, bytes: usize, bits: u64) {
        self.shared[at..at + bytes].copy_from_slice(&bits.to_le_bytes()[..bytes]);
    }
}

/// `old + v` as x86's `addss old, v` computes it, the CPU kernel's `fadd`
/// and wasmtime's `f32.add` alike: a NaN operand, the first one if both
/// are, quieted; inf - inf the default NaN. (On CUDA the NaN is the
/// device's.)
fn f32_add(old: u32, v: u32) -> u32 {
    const QUIET: u32 = 0x0040_0000;
    let (x, y) = (f32::from_bits(old), f32::from_bits(v));
    if x.is_nan() {
        old | QUIET
    } else if y.is_nan() {
        v | QUIET
    } else {
        (x + y).to_bits()
    }
}

fn size_of(ty: WasmType) -> usize {
    match ty {
        WasmType::I32 | WasmType::F32 => 4,
        WasmType::I64 | WasmType::F64 => 8,
    }
}

fn value_type(ty: WasmType) -> ValType {
    match ty {
        WasmType::I32 => ValType::I32,
        WasmType::I64 => ValType::I64,
        WasmType::F32 => ValType::F32,
        WasmType::F64 => ValType::F64,
    }
}

fn wasmtime_type(ty: WasmType) -> wasmtime::ValType {
    match ty {
        WasmType::I32 => wasmtime::ValType::I32,
        WasmType::I64 => wasmtime::ValType::I64,
        WasmType::F32 => wasmtime::ValType::F32,
        WasmType::F64 => wasmtime::ValType::F64,
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
/// arguments and then the globals' launch values, on the physical grid a
/// kernel made for `grid` runs on: for [`GridVariant::Any`], one 1-D
/// block per virtual block (`one_block_each`), the grid passed as virtual
/// blocks (`launch_params`); for [`GridVariant::Own`], the guest's grid
/// itself, marked so (`own_grid_launch_params`), as the runtime launches
/// the own-grid variant (each thread's block index is then `ctaid`, so
/// the physical grid must have the guest's shape). `Err` where the driver
/// fails (on CUDA, a launch that faulted).
pub fn launch_on<D: GpuDriver>(
    d: &D,
    stream: &D::Stream,
    function: &D::Function,
    launch: &Launch,
    grid: GridVariant,
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
    let hidden = HiddenParams {
        mem_base: memory.device_ptr(),
        mem_len: image.len() as u64,
        status: status.device_ptr(),
        fuel: KERNEL_FUEL,
        // Fuel, not time, bounds these kernels: the runs must be
        // deterministic (and the own-grid variant is for launches without
        // a time limit).
        time_limit: u64::MAX,
        grid: (launch.grid.x, launch.grid.y, launch.grid.z),
    };
    let (params, physical) = match grid {
        GridVariant::Any => (
            launch_params(&wasm_args, hidden),
            one_block_each(launch.grid),
        ),
        GridVariant::Own => (own_grid_launch_params(&wasm_args, hidden), launch.grid),
    };
    let config = LaunchConfig {
        grid: physical,
        block: launch.block,
        shared_mem_bytes: launch.shared_bytes,
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
