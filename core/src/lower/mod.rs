//! Wasm kernels: a guest's Wasm function translated to Cranelift IR and
//! lowered to code for one target. `docs/kernels.md` is the contract
//! between the pieces: this file holds what they share (the kernel's
//! hidden parameters, trap codes, intrinsics, errors and the [`Lowerer`]
//! trait); it touches no driver.

pub mod ptx;
pub mod table;
pub mod translate;

use alloc::string::String;
use core::fmt;

use cranelift_codegen::ir::{Function, TrapCode};

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
    /// `INT_MIN / -1`.
    IntegerOverflow = 4,
    /// `trunc` of NaN or of a value out of the integer's range.
    BadConversionToInteger = 5,
    /// The thread's fuel ran out.
    OutOfFuel = 6,
}

impl KernelTrap {
    /// Every trap, in code order.
    pub const ALL: [KernelTrap; 6] = [
        KernelTrap::Unreachable,
        KernelTrap::HeapOutOfBounds,
        KernelTrap::IntegerDivideByZero,
        KernelTrap::IntegerOverflow,
        KernelTrap::BadConversionToInteger,
        KernelTrap::OutOfFuel,
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
        // `user` is `None` only for 0; every code here is 1..=6.
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
        if module != INTRINSIC_MODULE {
            return None;
        }
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
/// [`KernelAbi::STATUS`], [`KernelAbi::FUEL`] (all `i64`), then the twelve
/// intrinsics (`i32`, in [`Intrinsic::ALL`] order).
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
    /// Offset of the first intrinsic (`i32` each).
    pub const INTRINSICS: usize = 4;
    /// Hidden parameters in all.
    pub const HIDDEN_PARAMS: usize = 4 + 12;

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
    fn trap_codes_round_trip() {
        for t in KernelTrap::ALL {
            assert_eq!(KernelTrap::from_code(t.code()), Some(t));
            assert_eq!(KernelTrap::from_trap_code(t.trap_code()), Some(t));
        }
        assert_eq!(KernelTrap::from_code(0), None);
        assert_eq!(KernelTrap::from_code(7), None);
    }

    #[test]
    fn intrinsics_have_distinct_slots() {
        let abi = KernelAbi { wasm_params: 3 };
        for (i, which) in Intrinsic::ALL.into_iter().enumerate() {
            assert_eq!(abi.intrinsic(which), 3 + 4 + i);
            assert_eq!(
                Intrinsic::from_import(INTRINSIC_MODULE, which.import_name()),
                Some(which)
            );
        }
        assert_eq!(abi.total_params(), 3 + 16);
        assert_eq!(Intrinsic::from_import("env", "thread_idx_x"), None);
    }
}
