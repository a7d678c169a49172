//! Wasm kernels: a guest's Wasm function translated to Cranelift IR and
//! lowered to code for one target. `docs/kernels.md` is the contract
//! between the pieces: this file holds what they share (the kernel's
//! hidden parameters, trap codes, intrinsics, the runtime checks of the
//! launch's time limit, the status word's layout, errors and the
//! [`Lowerer`] trait); it touches no driver.

pub mod atomic;
pub mod cooperative;
pub mod math;
mod nan;
pub mod ptx;
pub mod table;
pub mod translate;

use alloc::string::String;
use core::fmt;

use cranelift_codegen::ir::types::{F32, I32, I64};
use cranelift_codegen::ir::{
    AbiParam, ExternalName, Function, Inst, InstructionData, Opcode, Signature, TrapCode, Type,
    UserExternalName,
};
use cranelift_codegen::isa::CallConv;

/// Why a kernel trapped: the code in its status word (0 is no trap).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum KernelTrap {
    /// `unreachable` executed.
    Unreachable = 1,
    /// A load or store outside the guest's memory.
    HeapOutOfBounds = 2,
    /// Integer division or remainder by zero.
    IntegerDivideByZero = 3,
    /// `INT_MIN / -1`, or a trapping `trunc` of a value outside the
    /// integer's range.
    IntegerOverflow = 4,
    /// `trunc` of NaN (an out-of-range value is [`IntegerOverflow`](Self::IntegerOverflow),
    /// as Wasm names it).
    BadConversionToInteger = 5,
    /// The thread's fuel ran out.
    OutOfFuel = 6,
    /// The launch ran past its time limit (`time_limit`, a hidden
    /// parameter): a thread found the time up, or saw that another thread
    /// (or the host) had stopped the launch.
    TimeLimit = 7,
    /// `call_indirect` with an index past the table's end.
    TableOutOfBounds = 8,
    /// `call_indirect` through a null table slot.
    IndirectCallToNull = 9,
    /// `call_indirect` of a function whose type is not the one the call
    /// names.
    BadSignature = 10,
    /// The shadow stack grew past the thread's stack window
    /// (`docs/kernels.md`, "Globals and the shadow stack").
    StackOverflow = 11,
    /// An atomic access at an address that is not a multiple of its size
    /// (`docs/kernels.md`, "Atomics").
    HeapMisaligned = 12,
    /// The host launched a kernel variant under an assumption the launch
    /// does not meet ([`translate::KernelVariant`]). Reserved: the kernels
    /// the translator makes no longer test their variant's assumption
    /// (the host picks the variant from the launch, and a test on every
    /// thread cost memory-bound kernels 5-7% on an H200), so none raises
    /// it; the code keeps its meaning in the status word.
    LaunchMismatch = 13,
}

impl KernelTrap {
    /// Every trap, in code order.
    pub const ALL: [KernelTrap; 13] = [
        KernelTrap::Unreachable,
        KernelTrap::HeapOutOfBounds,
        KernelTrap::IntegerDivideByZero,
        KernelTrap::IntegerOverflow,
        KernelTrap::BadConversionToInteger,
        KernelTrap::OutOfFuel,
        KernelTrap::TimeLimit,
        KernelTrap::TableOutOfBounds,
        KernelTrap::IndirectCallToNull,
        KernelTrap::BadSignature,
        KernelTrap::StackOverflow,
        KernelTrap::HeapMisaligned,
        KernelTrap::LaunchMismatch,
    ];

    /// The status-word code.
    pub const fn code(self) -> u32 {
        self as u32
    }

    /// The trap of a status-word code.
    pub fn from_code(code: u32) -> Option<KernelTrap> {
        KernelTrap::ALL.into_iter().find(|t| t.code() == code)
    }

    /// The CLIF trap code the translator emits for it.
    pub fn trap_code(self) -> TrapCode {
        // `user` is `None` only for 0; every code here is 1..=13.
        TrapCode::user(self as u8).unwrap_or(TrapCode::HEAP_OUT_OF_BOUNDS)
    }

    /// The trap behind a CLIF trap code, if it is one of ours.
    pub fn from_trap_code(code: TrapCode) -> Option<KernelTrap> {
        KernelTrap::ALL.into_iter().find(|t| t.trap_code() == code)
    }

    /// What a person reads.
    pub const fn description(self) -> &'static str {
        match self {
            KernelTrap::Unreachable => "unreachable executed",
            KernelTrap::HeapOutOfBounds => "out-of-bounds memory access",
            KernelTrap::IntegerDivideByZero => "integer divide by zero",
            KernelTrap::IntegerOverflow => "integer overflow",
            KernelTrap::BadConversionToInteger => "invalid conversion to integer",
            KernelTrap::OutOfFuel => "out of fuel",
            KernelTrap::TimeLimit => "launch time limit exceeded",
            KernelTrap::TableOutOfBounds => "undefined element: out of bounds table access",
            KernelTrap::IndirectCallToNull => "uninitialized element",
            KernelTrap::BadSignature => "indirect call type mismatch",
            KernelTrap::StackOverflow => "call stack exhausted",
            KernelTrap::HeapMisaligned => "unaligned atomic",
            KernelTrap::LaunchMismatch => {
                "kernel variant launched against its assumption (a host bug)"
            }
        }
    }
}

impl fmt::Display for KernelTrap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.description())
    }
}

/// A kernel's position and size intrinsics: imports of module
/// [`INTRINSIC_MODULE`], each `() -> i32`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Intrinsic {
    /// `threadIdx.x`
    ThreadIdxX,
    /// `threadIdx.y`
    ThreadIdxY,
    /// `threadIdx.z`
    ThreadIdxZ,
    /// `blockIdx.x`
    BlockIdxX,
    /// `blockIdx.y`
    BlockIdxY,
    /// `blockIdx.z`
    BlockIdxZ,
    /// `blockDim.x`
    BlockDimX,
    /// `blockDim.y`
    BlockDimY,
    /// `blockDim.z`
    BlockDimZ,
    /// `gridDim.x`
    GridDimX,
    /// `gridDim.y`
    GridDimY,
    /// `gridDim.z`
    GridDimZ,
}

/// The import module of the intrinsics.
pub const INTRINSIC_MODULE: &str = "tensorwasm_kernel";

/// The WIT interface of the intrinsics for components (`wit/gpu.wit`,
/// `kernel-intrinsics`), up to its version: a component's core module
/// imports each intrinsic from `tensorwasm:gpu/kernel-intrinsics@<version>`
/// under its kebab-case name (`thread-idx-x` for `thread_idx_x`).
pub const INTRINSIC_INTERFACE: &str = "tensorwasm:gpu/kernel-intrinsics@";

/// The intrinsic field name an import names, whichever way it is imported:
/// `name` itself from [`INTRINSIC_MODULE`], or from the component interface
/// ([`INTRINSIC_INTERFACE`], any version) with its `-` read as `_` (into
/// `buf`). `None` for any other module or a name longer than `buf`.
pub fn intrinsic_field<'a>(module: &str, name: &'a str, buf: &'a mut [u8; 64]) -> Option<&'a str> {
    if module == INTRINSIC_MODULE {
        return Some(name);
    }
    module.strip_prefix(INTRINSIC_INTERFACE)?;
    let out = buf.get_mut(..name.len())?;
    for (o, b) in out.iter_mut().zip(name.bytes()) {
        // Intrinsic names are lower-case ASCII, digits and `_`: a `_` in a
        // kebab name is no intrinsic's.
        *o = match b {
            b'-' => b'_',
            b'_' => return None,
            b => b,
        };
    }
    core::str::from_utf8(out).ok()
}

impl Intrinsic {
    /// Every intrinsic, in hidden-parameter order.
    pub const ALL: [Intrinsic; 12] = [
        Intrinsic::ThreadIdxX,
        Intrinsic::ThreadIdxY,
        Intrinsic::ThreadIdxZ,
        Intrinsic::BlockIdxX,
        Intrinsic::BlockIdxY,
        Intrinsic::BlockIdxZ,
        Intrinsic::BlockDimX,
        Intrinsic::BlockDimY,
        Intrinsic::BlockDimZ,
        Intrinsic::GridDimX,
        Intrinsic::GridDimY,
        Intrinsic::GridDimZ,
    ];

    /// The import's field name.
    pub const fn import_name(self) -> &'static str {
        match self {
            Intrinsic::ThreadIdxX => "thread_idx_x",
            Intrinsic::ThreadIdxY => "thread_idx_y",
            Intrinsic::ThreadIdxZ => "thread_idx_z",
            Intrinsic::BlockIdxX => "block_idx_x",
            Intrinsic::BlockIdxY => "block_idx_y",
            Intrinsic::BlockIdxZ => "block_idx_z",
            Intrinsic::BlockDimX => "block_dim_x",
            Intrinsic::BlockDimY => "block_dim_y",
            Intrinsic::BlockDimZ => "block_dim_z",
            Intrinsic::GridDimX => "grid_dim_x",
            Intrinsic::GridDimY => "grid_dim_y",
            Intrinsic::GridDimZ => "grid_dim_z",
        }
    }

    /// The intrinsic an import names.
    pub fn from_import(module: &str, name: &str) -> Option<Intrinsic> {
        let mut buf = [0; 64];
        let name = intrinsic_field(module, name, &mut buf)?;
        Intrinsic::ALL.into_iter().find(|i| i.import_name() == name)
    }

    /// The PTX special register it reads.
    pub const fn ptx_register(self) -> &'static str {
        match self {
            Intrinsic::ThreadIdxX => "%tid.x",
            Intrinsic::ThreadIdxY => "%tid.y",
            Intrinsic::ThreadIdxZ => "%tid.z",
            Intrinsic::BlockIdxX => "%ctaid.x",
            Intrinsic::BlockIdxY => "%ctaid.y",
            Intrinsic::BlockIdxZ => "%ctaid.z",
            Intrinsic::BlockDimX => "%ntid.x",
            Intrinsic::BlockDimY => "%ntid.y",
            Intrinsic::BlockDimZ => "%ntid.z",
            Intrinsic::GridDimX => "%nctaid.x",
            Intrinsic::GridDimY => "%nctaid.y",
            Intrinsic::GridDimZ => "%nctaid.z",
        }
    }

    /// Its index among the hidden parameters' intrinsic block.
    pub fn index(self) -> usize {
        Intrinsic::ALL
            .iter()
            .position(|i| *i == self)
            .unwrap_or_default()
    }
}

/// Where the hidden parameters sit in a kernel's CLIF signature: after the
/// Wasm parameters come [`KernelAbi::MEM_BASE`], [`KernelAbi::MEM_LEN`],
/// [`KernelAbi::STATUS`], [`KernelAbi::FUEL`], [`KernelAbi::TIME_LIMIT`],
/// [`KernelAbi::GRID_X`], [`KernelAbi::GRID_Y`], [`KernelAbi::GRID_Z`] (all
/// `i64`), then the twelve intrinsics (`i32`, in [`Intrinsic::ALL`] order).
/// The block-index and grid-size intrinsics are the *physical* launch's
/// (a 1-D grid); the translator derives the virtual ones the kernel sees.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KernelAbi {
    /// How many Wasm parameters come first.
    pub wasm_params: usize,
}

impl KernelAbi {
    /// Offset of the guest memory's base address (`i64`).
    pub const MEM_BASE: usize = 0;
    /// Offset of the guest memory's current length in bytes (`i64`).
    pub const MEM_LEN: usize = 1;
    /// Offset of the status word's address (`i64`).
    pub const STATUS: usize = 2;
    /// Offset of the thread's fuel (`i64`).
    pub const FUEL: usize = 3;
    /// Offset of the launch's time limit in nanoseconds (`i64`, read as a
    /// `u64`; `u64::MAX` is no limit).
    pub const TIME_LIMIT: usize = 4;
    /// Offset of the x extent of the grid the guest launched (`i64`: the
    /// extent, at least 1, in the low 32 bits; the loop's stride digit in
    /// the high ones, [`KernelAbi::grid_params`]): the kernel runs it as
    /// virtual blocks over the physical grid (`docs/kernels.md`, "Virtual
    /// blocks").
    pub const GRID_X: usize = 5;
    /// Offset of the grid's y extent (as [`KernelAbi::GRID_X`]).
    pub const GRID_Y: usize = 6;
    /// Offset of the grid's z extent (as [`KernelAbi::GRID_X`]).
    pub const GRID_Z: usize = 7;
    /// Offset of the first intrinsic (`i32` each).
    pub const INTRINSICS: usize = 8;
    /// Hidden parameters in all.
    pub const HIDDEN_PARAMS: usize = 8 + 12;

    /// The three grid parameters ([`KernelAbi::GRID_X`] ..) of a launch of
    /// the guest's `grid` (each extent at least 1) on a 1-D physical grid
    /// of `physical` blocks: each extent in the low 32 bits, and in the
    /// high 32 bits the stride's digit in that dimension, `(p % gx, p / gx
    /// % gy, p / (gx * gy))`, with which each thread advances its virtual
    /// block index without dividing. A launch of the grid itself (or one
    /// physical block per virtual block) never advances: any `physical`.
    pub fn grid_params(grid: [u32; 3], physical: u64) -> [i64; 3] {
        let [gx, gy, _] = grid.map(|g| u64::from(g.max(1)));
        let digits = [
            physical % gx,
            physical / gx % gy,
            (physical / (gx * gy)).min(u64::from(u32::MAX)),
        ];
        let mut params = [0i64; 3];
        for (param, (extent, digit)) in params.iter_mut().zip(grid.into_iter().zip(digits)) {
            *param = ((digit << 32) | u64::from(extent)) as i64;
        }
        params
    }

    /// The high 32 bits of [`KernelAbi::GRID_X`] from a host that launched
    /// the guest's grid itself ([`KernelAbi::own_grid_params`]). No stride
    /// digit is `u32::MAX` (a digit is below its extent).
    pub const OWN_GRID: u32 = u32::MAX;

    /// The three grid parameters of a launch whose physical grid is the
    /// guest's `grid` itself (each extent at least 1): the extents, and
    /// [`KernelAbi::OWN_GRID`] in `grid_x`'s high bits. Each thread then
    /// takes its block index from `ctaid` and runs that one virtual block
    /// after one test of this launch-wide value (the kernel does not
    /// compare `nctaid` with the grid, nor enter the loop over virtual
    /// blocks). A host that passes it must launch exactly `grid`.
    pub fn own_grid_params(grid: [u32; 3]) -> [i64; 3] {
        let mut params = grid.map(|g| i64::from(g.max(1)));
        params[0] |= (u64::from(Self::OWN_GRID) << 32) as i64;
        params
    }

    /// The CLIF parameter index of hidden parameter `offset`.
    pub const fn hidden(self, offset: usize) -> usize {
        self.wasm_params + offset
    }

    /// The CLIF parameter index of an intrinsic.
    pub fn intrinsic(self, which: Intrinsic) -> usize {
        self.wasm_params + Self::INTRINSICS + which.index()
    }

    /// Parameters in all.
    pub const fn total_params(self) -> usize {
        self.wasm_params + Self::HIDDEN_PARAMS
    }

    /// The ABI of a kernel's CLIF, read off its signature (`None` when it
    /// has fewer parameters than the hidden ones).
    pub fn of(func: &Function) -> Option<KernelAbi> {
        let wasm_params = func
            .signature
            .params
            .len()
            .checked_sub(Self::HIDDEN_PARAMS)?;
        Some(KernelAbi { wasm_params })
    }
}

/// The runtime functions a kernel's CLIF calls: the launch's clock
/// (`docs/kernels.md`, "Time limit") and the block's cooperative
/// operations (shared memory, barriers, warps: "The GPU programming
/// model"). The only calls in a kernel. The translator emits them as CLIF
/// `call`s of imported functions named `UserExternalName { namespace:
/// RuntimeCheck::NAMESPACE, index }`; each lowerer implements them itself
/// (PTX inline, the CPU target as host functions). None touches the
/// guest's memory, and the clock touches no memory at all: a check every
/// thread makes must not make every thread read one shared word (on an
/// H100 that tripled a vector add's time).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RuntimeCheck {
    /// `clock() -> i64`: the thread's clock, in the launch's ticks (the
    /// unit of `time_limit`): PTX reads `%clock64`, its multiprocessor's
    /// cycle counter (the host converts the limit at the device's clock
    /// rate); the CPU target reads nanoseconds of a monotonic host clock.
    /// Monotonic for the thread.
    Clock = 0,
    /// `shared_base() -> i64`: the address of byte 0 of the block's shared
    /// memory (PTX: the generic address of `__shmem`; CPU: the host address
    /// of the block's buffer). The translator adds checked offsets to it.
    SharedBase = 1,
    /// `shared_size() -> i64`: the block's shared bytes (a multiple of 16).
    SharedSize = 2,
    /// `barrier()`: waits until every thread of the block that has not
    /// ended is at a barrier or done with its virtual block.
    Barrier = 3,
    /// `block_begin()`: the start of a virtual block, every live thread of
    /// the block together: zeroes the shared memory (PTX; the CPU runner
    /// zeroes it itself) and waits for the block.
    BlockBegin = 4,
    /// `block_done()`: the end of the thread's call for a virtual block:
    /// arrives at the block's barriers as "done" until every live thread
    /// of the block is done.
    BlockDone = 5,
    /// `lane_id() -> i32`: the thread's lane in its warp (0 ..= 31).
    LaneId = 6,
    /// `shfl_idx(v: i32, lane: i32, site: i32) -> i32`: `v` of lane
    /// `lane & 31`. `site` (a constant) names the call site: the CPU target
    /// groups a warp's lanes by it; PTX ignores it.
    ShflIdx = 7,
    /// `shfl_up(v, delta, site) -> i32`: `v` of lane `lane_id - delta`.
    ShflUp = 8,
    /// `shfl_down(v, delta, site) -> i32`: `v` of lane `lane_id + delta`.
    ShflDown = 9,
    /// `shfl_xor(v, mask, site) -> i32`: `v` of lane `lane_id ^ mask`.
    ShflXor = 10,
    /// `ballot(pred: i32, site: i32) -> i32`: bit `i` set when lane `i`
    /// takes part with a nonzero `pred`.
    Ballot = 11,
    /// `vote_any(pred, site) -> i32`: 1 when some lane that takes part has
    /// a nonzero `pred`.
    VoteAny = 12,
    /// `vote_all(pred, site) -> i32`: 1 when every lane that takes part
    /// has a nonzero `pred`.
    VoteAll = 13,
    /// `atomic_add_f32(addr: i64, v: f32, global: i32) -> f32`: the
    /// device's float atomic add at host address `addr` (checked,
    /// 4-aligned), the old value: in the guest's memory (`global` 1)
    /// [`atomic::add_f32_bits`]'s arithmetic (subnormals flushed, as
    /// CUDA's `atomicAdd` on global memory), in shared memory (`global` 0)
    /// IEEE's (the H100's `atom.shared.add.f32` keeps subnormals). PTX
    /// `atom.add.f32` in the address's space (`global` is for the CPU
    /// target); the CPU target a compare-and-swap loop.
    AtomicAddF32 = 14,
}

impl RuntimeCheck {
    /// The namespace of the checks' [`UserExternalName`]s; the index is the
    /// check's discriminant.
    pub const NAMESPACE: u32 = 1;

    /// Every check, by index.
    pub const ALL: [RuntimeCheck; 15] = [
        RuntimeCheck::Clock,
        RuntimeCheck::SharedBase,
        RuntimeCheck::SharedSize,
        RuntimeCheck::Barrier,
        RuntimeCheck::BlockBegin,
        RuntimeCheck::BlockDone,
        RuntimeCheck::LaneId,
        RuntimeCheck::ShflIdx,
        RuntimeCheck::ShflUp,
        RuntimeCheck::ShflDown,
        RuntimeCheck::ShflXor,
        RuntimeCheck::Ballot,
        RuntimeCheck::VoteAny,
        RuntimeCheck::VoteAll,
        RuntimeCheck::AtomicAddF32,
    ];

    /// The name the translator's CLIF imports it under.
    pub const fn external_name(self) -> UserExternalName {
        UserExternalName {
            namespace: Self::NAMESPACE,
            index: self as u32,
        }
    }

    /// The check an imported name stands for.
    pub fn from_external_name(name: &UserExternalName) -> Option<RuntimeCheck> {
        RuntimeCheck::ALL
            .into_iter()
            .find(|c| c.external_name() == *name)
    }

    /// Its name, as docs and host symbols spell it.
    pub const fn name(self) -> &'static str {
        match self {
            RuntimeCheck::Clock => "clock",
            RuntimeCheck::SharedBase => "shared_base",
            RuntimeCheck::SharedSize => "shared_size",
            RuntimeCheck::Barrier => "barrier",
            RuntimeCheck::BlockBegin => "block_begin",
            RuntimeCheck::BlockDone => "block_done",
            RuntimeCheck::LaneId => "lane_id",
            RuntimeCheck::ShflIdx => "shfl_idx",
            RuntimeCheck::ShflUp => "shfl_up",
            RuntimeCheck::ShflDown => "shfl_down",
            RuntimeCheck::ShflXor => "shfl_xor",
            RuntimeCheck::Ballot => "ballot",
            RuntimeCheck::VoteAny => "vote_any",
            RuntimeCheck::VoteAll => "vote_all",
            RuntimeCheck::AtomicAddF32 => "atomic_add_f32",
        }
    }

    /// Its parameters' and results' CLIF types.
    pub const fn types(self) -> (&'static [Type], &'static [Type]) {
        match self {
            RuntimeCheck::Clock | RuntimeCheck::SharedBase | RuntimeCheck::SharedSize => {
                (&[], &[I64])
            }
            RuntimeCheck::Barrier | RuntimeCheck::BlockBegin | RuntimeCheck::BlockDone => {
                (&[], &[])
            }
            RuntimeCheck::LaneId => (&[], &[I32]),
            RuntimeCheck::ShflIdx
            | RuntimeCheck::ShflUp
            | RuntimeCheck::ShflDown
            | RuntimeCheck::ShflXor => (&[I32, I32, I32], &[I32]),
            RuntimeCheck::Ballot | RuntimeCheck::VoteAny | RuntimeCheck::VoteAll => {
                (&[I32, I32], &[I32])
            }
            RuntimeCheck::AtomicAddF32 => (&[I64, F32, I32], &[F32]),
        }
    }

    /// Whether it is one of the block's cooperative operations (every
    /// check but the clock and the float atomic): a kernel that calls one
    /// runs its blocks' threads together (`docs/kernels.md`, "Barriers").
    pub const fn is_cooperative(self) -> bool {
        !matches!(self, RuntimeCheck::Clock | RuntimeCheck::AtomicAddF32)
    }

    /// Its CLIF signature ([`types`](Self::types); call conv `SystemV` as
    /// the kernel's, which a lowerer may change to its own).
    pub fn signature(self) -> Signature {
        let mut sig = Signature::new(CallConv::SystemV);
        let (params, returns) = self.types();
        sig.params.extend(params.iter().map(|&t| AbiParam::new(t)));
        sig.returns
            .extend(returns.iter().map(|&t| AbiParam::new(t)));
        sig
    }

    /// The check `inst` of `func` calls, if it is a `call` of one that a
    /// lowerer may implement: the callee is imported under the check's name
    /// with its signature, and the call passes one argument per parameter.
    /// Every other `call` is `None`.
    pub fn called_by(func: &Function, inst: Inst) -> Option<RuntimeCheck> {
        let InstructionData::Call {
            opcode: Opcode::Call,
            func_ref,
            ..
        } = func.dfg.insts[inst]
        else {
            return None;
        };
        let ext = func.dfg.ext_funcs.get(func_ref)?;
        let ExternalName::User(name) = ext.name else {
            return None;
        };
        let check = Self::from_external_name(func.params.user_named_funcs().get(name)?)?;
        let sig = func.dfg.signatures.get(ext.signature)?;
        let (params, returns) = check.types();
        let types_match = |a: &[AbiParam], b: &[Type]| {
            a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.value_type == *y)
        };
        let args = func.dfg.inst_args(inst);
        let args_ok = args.len() == params.len()
            && args
                .iter()
                .zip(params)
                .all(|(&a, &t)| func.dfg.value_type(a) == t);
        (types_match(&sig.params, params) && types_match(&sig.returns, returns) && args_ok)
            .then_some(check)
    }
}

/// The status word of one launch (`docs/kernels.md`): bytes, and where each
/// field sits. Host memory, device memory and both lowerers use this layout.
pub mod status {
    /// Bytes in all.
    pub const BYTES: usize = 32;
    /// `u32` trap code (0: none), written once by the first trapping thread.
    pub const CODE: usize = 0;
    /// `u32` stop flag (CPU target): nonzero once a thread of the launch
    /// ran out of time; the block runner then starts no more threads.
    pub const STOP: usize = 4;
    /// `u64` Wasm byte offset of the first trap.
    pub const OFFSET: usize = 8;
    /// Two `u64`s, reserved (0; the host clears them with the rest). The
    /// CPU target's block runners keep the launch's start in the first.
    pub const RESERVED: usize = 16;
}

/// A kernel (or a function it calls) uses something the kernel path does
/// not support; the whole kernel is refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnsupportedOp {
    /// The operation (a Wasm operator, or a CLIF opcode and type).
    pub op: String,
    /// Its byte offset in the module (0 when it has none).
    pub offset: u64,
    /// Why it is refused.
    pub reason: String,
}

impl fmt::Display for UnsupportedOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unsupported in a kernel: `{}` at offset {:#x}: {}",
            self.op, self.offset, self.reason
        )
    }
}

/// Why a kernel could not be produced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LowerError {
    /// The kernel uses something unsupported.
    Unsupported(UnsupportedOp),
    /// The module or function is malformed (or not a kernel: wrong
    /// signature, no such function).
    Invalid(String),
    /// The kernel is larger than its limits allow
    /// ([`translate::KernelLimits`]): the operator at which it passed one,
    /// and which.
    TooLarge(UnsupportedOp),
}

impl fmt::Display for LowerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LowerError::Unsupported(op) => op.fmt(f),
            LowerError::Invalid(why) => write!(f, "not a valid kernel: {why}"),
            LowerError::TooLarge(at) => write!(
                f,
                "kernel too large: {} (at `{}`, offset {:#x})",
                at.reason, at.op, at.offset
            ),
        }
    }
}

impl From<UnsupportedOp> for LowerError {
    fn from(op: UnsupportedOp) -> Self {
        LowerError::Unsupported(op)
    }
}

/// Turns a kernel's CLIF into code for one target.
pub trait Lowerer {
    /// What it produces (PTX text, native code, ...).
    type Output;

    /// Lowers `kernel` (made by the translator, following
    /// `docs/kernels.md`), whose symbol is `name`.
    fn lower(
        &self,
        name: &str,
        kernel: &Function,
        abi: KernelAbi,
    ) -> Result<Self::Output, LowerError>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn component_imports_name_the_same_intrinsics_in_kebab_case() {
        use alloc::string::String;
        let wit = "tensorwasm:gpu/kernel-intrinsics@0.1.1";
        for i in Intrinsic::ALL {
            let kebab: String = i.import_name().replace('_', "-");
            assert_eq!(Intrinsic::from_import(wit, &kebab), Some(i));
            assert_eq!(
                Intrinsic::from_import(INTRINSIC_MODULE, i.import_name()),
                Some(i)
            );
            // Each spelling belongs to its own module only.
            assert_eq!(Intrinsic::from_import(wit, i.import_name()), None);
            assert_eq!(Intrinsic::from_import(INTRINSIC_MODULE, &kebab), None);
            assert_eq!(
                Intrinsic::from_import("tensorwasm:gpu/kernels@0.1.1", &kebab),
                None
            );
        }
        for a in atomic::AtomicIntrinsic::ALL {
            let kebab: String = a.import_name().replace('_', "-");
            assert_eq!(atomic::AtomicIntrinsic::from_import(wit, &kebab), Some(a));
        }
        let long = "a".repeat(65);
        assert_eq!(intrinsic_field(wit, &long, &mut [0; 64]), None);
    }

    #[test]
    fn trap_codes_round_trip() {
        for t in KernelTrap::ALL {
            assert_eq!(KernelTrap::from_code(t.code()), Some(t));
            assert_eq!(KernelTrap::from_trap_code(t.trap_code()), Some(t));
        }
        assert_eq!(KernelTrap::from_code(0), None);
        assert_eq!(KernelTrap::from_code(7), Some(KernelTrap::TimeLimit));
        assert_eq!(KernelTrap::from_code(11), Some(KernelTrap::StackOverflow));
        assert_eq!(KernelTrap::from_code(12), Some(KernelTrap::HeapMisaligned));
        assert_eq!(KernelTrap::from_code(13), Some(KernelTrap::LaunchMismatch));
        assert_eq!(KernelTrap::from_code(14), None);
    }

    #[test]
    fn intrinsics_have_distinct_slots() {
        let abi = KernelAbi { wasm_params: 3 };
        for (i, which) in Intrinsic::ALL.into_iter().enumerate() {
            assert_eq!(abi.intrinsic(which), 3 + 8 + i);
            assert_eq!(
                Intrinsic::from_import(INTRINSIC_MODULE, which.import_name()),
                Some(which)
            );
        }
        assert_eq!(abi.total_params(), 3 + 20);
        assert_eq!(Intrinsic::from_import("env", "thread_idx_x"), None);
    }

    #[test]
    fn runtime_checks_are_named_by_index_in_their_namespace() {
        for (i, check) in RuntimeCheck::ALL.into_iter().enumerate() {
            let name = check.external_name();
            assert_eq!(
                (name.namespace, name.index),
                (RuntimeCheck::NAMESPACE, i as u32)
            );
            assert_eq!(RuntimeCheck::from_external_name(&name), Some(check));
            assert_eq!(check.signature().params.len(), check.types().0.len());
        }
        // Namespace 0 is cranelift-module's functions: never a check.
        let function = UserExternalName {
            namespace: 0,
            index: 0,
        };
        assert_eq!(RuntimeCheck::from_external_name(&function), None);
        assert_eq!(status::BYTES, status::RESERVED + 16);
    }
}
