//! The op table: one row per (CLIF opcode, controlling type) a kernel's CLIF
//! can hold, saying what PTX it becomes or why the kernel path refuses it.
//! It is data, grouped in sections of sibling rows the way Cranelift's ISLE
//! rules are; [`check`] (the detector's CLIF half) and the PTX lowerer
//! (`ptx`) both read it, and `docs/op-table.md` is rendered from it
//! ([`render_markdown`]). It touches no driver and emits nothing itself.
//!
//! # Keys
//!
//! A row matches an instruction by opcode, controlling type (for
//! instructions that are not polymorphic: the type of their first result,
//! or none, shown `—`), and where the opcode needs it:
//!
//! - the type of one *free operand* the controlling type does not fix
//!   ([`free_operand`]): the source of a conversion (`uextend.i64` from
//!   `i32`), the condition of `select`, the amount of a shift or rotate;
//! - the condition code of `icmp` / `fcmp`.
//!
//! A row whose `ty` is [`INVALID`] matches any type; a row without
//! an operand type or condition matches any. Only boundary rows (refusals)
//! use the wildcards, and never next to specific rows of the same opcode.
//!
//! # Templates
//!
//! A [`Rule`] is PTX text, one instruction (or label) a line, with
//! placeholders the lowerer fills:
//!
//! | placeholder | meaning |
//! | --- | --- |
//! | `{d}` | the result's register |
//! | `{a}` `{b}` `{c}` | the registers of the instruction's operands 0, 1, 2 |
//! | `{imm}` | the constant of `iconst` (hex), `f32const` (`0fXXXXXXXX`), `f64const` (`0dXXXXXXXXXXXXXXXX`): bit-exact |
//! | `{off}` | the immediate offset of a load or store |
//! | `{r0}` `{rd0}` `{f0}` `{fd0}` `{p0}` ... | scratch registers (`.b32`, `.b64`, `.f32`, `.f64`, `.pred`), live only inside one instruction's template |
//! | `{L0}` `{L1}` | labels local to one instruction's template |
//! | `{dest}` `{then}` `{else}` `{default}` | branch targets: a block's label, or a stub that first moves the block arguments into the block's parameters |
//! | `{n}` `{table}` `{targets}` | `br_table`: the table's length, its `.branchtargets` label and its targets |
//! | `{trap}` | this trap site's stub ([`TRAP_SITE`]) |
//!
//! # Calls
//!
//! The only `call`s a kernel's CLIF holds are the runtime checks
//! ([`RuntimeCheck`], `docs/kernels.md`, "Time limit"). A row's key cannot
//! tell one callee from another, so their rules are not rows of the table:
//! [`row_for`] and [`check`] give a call the rule of its check
//! ([`runtime_row`]) when [`RuntimeCheck::called_by`] accepts it, and the
//! `call` row (rejected) otherwise.
//!
//! # Invariants the rules rely on
//!
//! - Registers by type: `i8`, `i16`, `i32` live in `.b32` registers,
//!   `i64` in `.b64`, `f32` in `.f32`, `f64` in `.f64`. Narrow integers
//!   (`i8` comparison results, `i16`/`i8` from `ireduce`) are kept
//!   zero-extended: every rule that makes one clears the bits above it, so
//!   `uextend` of one is a move.
//! - Arithmetic never traps in PTX, and the translator guards every input on
//!   which Wasm traps (`docs/kernels.md`); the rules compute exact Wasm
//!   results for every other input.
//! - Memory addresses are `mem_base + ea` with no alignment promise: every
//!   access wider than a byte checks the address and falls back to byte
//!   accesses, little endian.

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt::Write;

use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::types::{
    F16, F32, F32X4, F64, F128, I8, I8X16, I16, I32, I32X4, I64, I128, INVALID,
};
use cranelift_codegen::ir::{
    AtomicRmwOp, DataFlowGraph, Endianness, Function, Inst, InstructionData, Opcode, Type,
};

use super::{RuntimeCheck, UnsupportedOp};

/// One row: an (opcode, type) the kernel path meets, and what becomes of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Row {
    /// The CLIF opcode.
    pub opcode: Opcode,
    /// The controlling type ([`INVALID`]: any, or none).
    pub ty: Type,
    /// The type of the opcode's free operand ([`free_operand`]), if the row
    /// is for one.
    pub operand: Option<Type>,
    /// The condition code of `icmp` / `fcmp`, if the row is for one.
    pub cond: Option<Cond>,
    /// What the kernel path does with it.
    pub status: Status,
    /// Why the rule is right (or what to know), for the docs page.
    pub note: &'static str,
}

/// A comparison's condition code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cond {
    /// `icmp`'s.
    Int(IntCC),
    /// `fcmp`'s.
    Float(FloatCC),
    /// `atomic_rmw`'s operation.
    Rmw(AtomicRmwOp),
}

/// What the kernel path does with a row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    /// Lowered to PTX by this rule.
    Ptx(Rule),
    /// Not supported yet, though it could be; the kernel is refused.
    Deferred(&'static str),
    /// Outside the kernel model; the kernel is refused.
    Rejected(&'static str),
}

/// The PTX an instruction becomes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rule {
    /// The rule's name (empty for a single plain instruction).
    pub name: &'static str,
    /// The template, one PTX line each (see the module docs).
    pub ptx: &'static [&'static str],
    /// A better template for newer GPUs, if there is one.
    pub alt: Option<Alt>,
}

/// A template for GPUs of a compute capability and up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Alt {
    /// The lowest compute capability, as `10 * major + minor` (80: sm_80).
    pub min_sm: u32,
    /// The template.
    pub ptx: &'static [&'static str],
}

impl Rule {
    /// The template for compute capability `sm` (`10 * major + minor`).
    pub fn template(&self, sm: u32) -> &'static [&'static str] {
        match self.alt {
            Some(alt) if sm >= alt.min_sm => alt.ptx,
            _ => self.ptx,
        }
    }
}

/// The stub a trap site branches to: the first trapping thread's code goes
/// into the status word (`atom.global.cas`: only if it was still 0), and
/// the thread that won writes the Wasm byte offset after it; every trapping
/// thread then returns. Never PTX `trap`, which would poison the context.
/// A thread first reads the code (volatile) and returns at once if a trap
/// is already recorded: its compare-and-swap would fail anyway, and when
/// every thread of a huge grid traps (a stopped launch, measured on an
/// H100: 2^28 threads) one atomic per thread on one address costs more
/// than the kernel's work, while the warp's loads are one transaction.
/// `{status}` is the status word's (global) address, `{code}` the
/// [`KernelTrap`](super::KernelTrap) code (a `.b32` register), `{offset}`
/// the offset (a `.b64` register): one copy of this stub serves every trap
/// site of a kernel, each site setting the two registers and branching
/// here (the PTX stays small, and so does the driver's JIT time).
pub const TRAP_SITE: &[&str] = &[
    "ld.volatile.global.u32 {r0}, [{status}];",
    "setp.ne.b32 {p0}, {r0}, 0;",
    "@{p0} ret;",
    "atom.global.cas.b32 {r0}, [{status}], 0, {code};",
    "setp.ne.b32 {p0}, {r0}, 0;",
    "@{p0} ret;",
    "st.global.u64 [{status}+8], {offset};",
    "ret;",
];

/// [`RuntimeCheck::Clock`] inline: `{d}` is the multiprocessor's cycle
/// counter (`%clock64`: one instruction, no memory), the ticks the host
/// converts the launch's time limit into.
pub const CLOCK: &[&str] = &["mov.u64 {d}, %clock64;"];

/// [`RuntimeCheck::SharedBase`]: the generic address of the block's
/// dynamic shared memory (`__shmem`, declared by the lowerer), so an access
/// the lowerer cannot place is still right as a generic one.
pub const SHARED_BASE: &[&str] = &["mov.u64 {d}, __shmem;", "cvta.shared.u64 {d}, {d};"];

/// [`RuntimeCheck::SharedSize`]: the launch's dynamic shared bytes.
pub const SHARED_SIZE: &[&str] = &[
    "mov.u32 {r0}, %dynamic_smem_size;",
    "cvt.u64.u32 {d}, {r0};",
];

/// [`RuntimeCheck::Barrier`]: arrive "not done" at barrier 0 (the
/// non-`.aligned` form: threads of a warp may arrive at different
/// barriers). The phase ends when every thread of the block that has not
/// exited has arrived, here or at a `block_done` (`docs/kernels.md`,
/// "Barriers").
pub const BARRIER: &[&str] = &["barrier.red.and.pred {p0}, 0, 0;"];

/// [`RuntimeCheck::BlockDone`]: arrive "done" at barrier 0 until a phase
/// in which every arriving thread was done.
pub const BLOCK_DONE: &[&str] = &[
    "{L0}:",
    "barrier.red.and.pred {p0}, 0, 1;",
    "@!{p0} bra {L0};",
];

/// [`RuntimeCheck::BlockBegin`]: every live thread of the block zeroes a
/// share of the shared memory (16 bytes at a time, strided by the block's
/// size; the host makes the size a multiple of 16), then waits for the
/// block. All of them arrive here together (after a `block_done` phase or
/// at the kernel's start), so the `.aligned` `bar.sync` is right.
pub const BLOCK_BEGIN: &[&str] = &[
    "mov.u32 {r0}, %dynamic_smem_size;",
    "mov.u32 {r1}, %tid.z;",
    "mov.u32 {r2}, %ntid.y;",
    "mov.u32 {r3}, %tid.y;",
    "mad.lo.u32 {r1}, {r1}, {r2}, {r3};",
    "mov.u32 {r2}, %ntid.x;",
    "mov.u32 {r3}, %tid.x;",
    "mad.lo.u32 {r1}, {r1}, {r2}, {r3};",
    "shl.b32 {r1}, {r1}, 4;",
    "mov.u32 {r3}, %ntid.y;",
    "mul.lo.u32 {r2}, {r2}, {r3};",
    "mov.u32 {r3}, %ntid.z;",
    "mul.lo.u32 {r2}, {r2}, {r3};",
    "shl.b32 {r2}, {r2}, 4;",
    "mov.u32 {r3}, __shmem;",
    "mov.u32 {r4}, 0;",
    "{L0}:",
    "setp.ge.u32 {p0}, {r1}, {r0};",
    "@{p0} bra {L1};",
    "add.u32 {r5}, {r3}, {r1};",
    "st.shared.v4.b32 [{r5}], {{r4}, {r4}, {r4}, {r4}};",
    "add.u32 {r1}, {r1}, {r2};",
    "bra {L0};",
    "{L1}:",
    "bar.sync 0;",
];

/// [`RuntimeCheck::LaneId`].
pub const LANE_ID: &[&str] = &["mov.u32 {d}, %laneid;"];

/// The end of every shuffle: `{r3}` holds the source lane (0 ..= 31) and
/// `{p0}` whether it is in range; the lanes taking part are those running
/// together (`activemask`); a lane whose source is out of range or not
/// taking part gets its own value (`shfl.sync` leaves it undefined).
macro_rules! shuffle {
    ($($line:literal),+ $(,)?) => {
        &[
            "mov.u32 {r1}, %laneid;",
            $($line,)+
            "activemask.b32 {r0};",
            "shfl.sync.idx.b32 {r4}, {a}, {r3}, 31, {r0};",
            "shr.b32 {r5}, {r0}, {r3};",
            "and.b32 {r5}, {r5}, 1;",
            "setp.ne.u32 {p1}, {r5}, 0;",
            "and.pred {p0}, {p0}, {p1};",
            "selp.b32 {d}, {r4}, {a}, {p0};",
        ]
    };
}

/// [`RuntimeCheck::ShflIdx`]: lane `b & 31`.
pub const SHFL_IDX: &[&str] = shuffle!("and.b32 {r3}, {b}, 31;", "setp.eq.u32 {p0}, {r3}, {r3};");
/// [`RuntimeCheck::ShflUp`]: lane `lane - b`, if `b <= lane`.
pub const SHFL_UP: &[&str] = shuffle!(
    "setp.le.u32 {p0}, {b}, {r1};",
    "sub.u32 {r3}, {r1}, {b};",
    "and.b32 {r3}, {r3}, 31;",
);
/// [`RuntimeCheck::ShflDown`]: lane `lane + b`, if `b <= 31 - lane`.
pub const SHFL_DOWN: &[&str] = shuffle!(
    "sub.u32 {r2}, 31, {r1};",
    "setp.le.u32 {p0}, {b}, {r2};",
    "add.u32 {r3}, {r1}, {b};",
    "and.b32 {r3}, {r3}, 31;",
);
/// [`RuntimeCheck::ShflXor`]: lane `lane ^ b`, if `b < 32`.
pub const SHFL_XOR: &[&str] = shuffle!(
    "setp.lt.u32 {p0}, {b}, 32;",
    "xor.b32 {r3}, {r1}, {b};",
    "and.b32 {r3}, {r3}, 31;",
);

/// [`RuntimeCheck::Ballot`]: the running lanes' predicates.
pub const BALLOT: &[&str] = &[
    "activemask.b32 {r0};",
    "setp.ne.u32 {p0}, {a}, 0;",
    "vote.sync.ballot.b32 {d}, {p0}, {r0};",
];
/// [`RuntimeCheck::VoteAny`].
pub const VOTE_ANY: &[&str] = &[
    "activemask.b32 {r0};",
    "setp.ne.u32 {p0}, {a}, 0;",
    "vote.sync.any.pred {p1}, {p0}, {r0};",
    "selp.u32 {d}, 1, 0, {p1};",
];
/// [`RuntimeCheck::VoteAll`].
pub const VOTE_ALL: &[&str] = &[
    "activemask.b32 {r0};",
    "setp.ne.u32 {p0}, {a}, 0;",
    "vote.sync.all.pred {p1}, {p0}, {r0};",
    "selp.u32 {d}, 1, 0, {p1};",
];

/// [`RuntimeCheck::AtomicAddF32`]: the device's float atomic add (round to
/// nearest even; subnormals flushed in global memory, kept in shared
/// memory, measured on the H100). The lowerer places `{a}` in its space
/// like a memory access's address (global, shared, or generic with
/// `.global.` dropped); `{c}`, which space the translator meant, is for the
/// CPU target.
pub const ATOMIC_ADD_F32: &[&str] = &["atom.global.add.f32 {d}, [{a}], {b};"];

/// The rules of the runtime checks, in [`RuntimeCheck::ALL`] order: not in
/// [`rows`] (see the module docs, "Calls").
static RUNTIME_ROWS: [Row; 15] = [
    ptx(Opcode::Call, I64, "clock", CLOCK).note(
        "the thread's clock for the launch time limit (docs/kernels.md, \"Time limit\"), inline",
    ),
    ptx(Opcode::Call, I64, "shared_base", SHARED_BASE).note(
        "the generic address of the block's shared memory; the translator adds checked offsets",
    ),
    ptx(Opcode::Call, I64, "shared_size", SHARED_SIZE)
        .note("the launch's dynamic shared bytes (a multiple of 16)"),
    ptx(Opcode::Call, INVALID, "barrier", BARRIER)
        .note("__syncthreads(); exited threads do not count (docs/kernels.md, \"Barriers\")"),
    ptx(Opcode::Call, INVALID, "block_begin", BLOCK_BEGIN)
        .note("a virtual block's start: shared memory zeroed by the whole block"),
    ptx(Opcode::Call, INVALID, "block_done", BLOCK_DONE)
        .note("a virtual block's end: arrive done until every live thread is"),
    ptx(Opcode::Call, I32, "lane_id", LANE_ID).note("the lane in the warp"),
    ptx(Opcode::Call, I32, "shfl_idx", SHFL_IDX)
        .note("own value when the source lane is not running"),
    ptx(Opcode::Call, I32, "shfl_up", SHFL_UP)
        .note("own value below lane 0 or when the source is not running"),
    ptx(Opcode::Call, I32, "shfl_down", SHFL_DOWN)
        .note("own value past lane 31 or when the source is not running"),
    ptx(Opcode::Call, I32, "shfl_xor", SHFL_XOR)
        .note("own value past lane 31 or when the source is not running"),
    ptx(Opcode::Call, I32, "ballot", BALLOT).note("over the lanes running together (activemask)"),
    ptx(Opcode::Call, I32, "vote_any", VOTE_ANY)
        .note("over the lanes running together (activemask)"),
    ptx(Opcode::Call, I32, "vote_all", VOTE_ALL)
        .note("over the lanes running together (activemask)"),
    ptx(Opcode::Call, F32, "atomic_add_f32", ATOMIC_ADD_F32)
        .note("the float atomic add: round to nearest even, subnormals flushed in global memory (CUDA's atomicAdd), kept in shared memory"),
];

/// The rule of a runtime check's call.
pub fn runtime_row(check: RuntimeCheck) -> &'static Row {
    &RUNTIME_ROWS[check as usize]
}

// Row builders, so each row of the table reads as one line.

const fn ptx(opcode: Opcode, ty: Type, name: &'static str, ptx: &'static [&'static str]) -> Row {
    Row {
        opcode,
        ty,
        operand: None,
        cond: None,
        status: Status::Ptx(Rule {
            name,
            ptx,
            alt: None,
        }),
        note: "",
    }
}

const fn deferred(opcode: Opcode, ty: Type, why: &'static str) -> Row {
    Row {
        opcode,
        ty,
        operand: None,
        cond: None,
        status: Status::Deferred(why),
        note: "",
    }
}

const fn rejected(opcode: Opcode, ty: Type, why: &'static str) -> Row {
    Row {
        opcode,
        ty,
        operand: None,
        cond: None,
        status: Status::Rejected(why),
        note: "",
    }
}

impl Row {
    const fn from(mut self, operand: Type) -> Row {
        self.operand = Some(operand);
        self
    }

    const fn icc(mut self, cc: IntCC) -> Row {
        self.cond = Some(Cond::Int(cc));
        self
    }

    const fn fcc(mut self, cc: FloatCC) -> Row {
        self.cond = Some(Cond::Float(cc));
        self
    }

    const fn rmw(mut self, op: AtomicRmwOp) -> Row {
        self.cond = Some(Cond::Rmw(op));
        self
    }

    const fn note(mut self, note: &'static str) -> Row {
        self.note = note;
        self
    }

    /// A variant of the rule for `min_sm` and newer targets. No row has
    /// one today (`min.NaN` was one, until the H100 showed it returns
    /// PTX's NaN, not Wasm's); kept, with its test, for the next one.
    #[cfg_attr(not(test), allow(dead_code))]
    const fn alt(mut self, min_sm: u32, alt: &'static [&'static str]) -> Row {
        if let Status::Ptx(rule) = &mut self.status {
            rule.alt = Some(Alt { min_sm, ptx: alt });
        }
        self
    }
}

/// Opcodes with a free operand: its index and what the docs call it.
pub const FREE_OPERANDS: &[(Opcode, usize, &str)] = &[
    (Opcode::Uextend, 0, "from"),
    (Opcode::Sextend, 0, "from"),
    (Opcode::Ireduce, 0, "from"),
    (Opcode::Fpromote, 0, "from"),
    (Opcode::Fdemote, 0, "from"),
    (Opcode::FcvtToSint, 0, "from"),
    (Opcode::FcvtToUint, 0, "from"),
    (Opcode::FcvtToSintSat, 0, "from"),
    (Opcode::FcvtToUintSat, 0, "from"),
    (Opcode::FcvtFromSint, 0, "from"),
    (Opcode::FcvtFromUint, 0, "from"),
    (Opcode::Bitcast, 0, "from"),
    (Opcode::Select, 0, "cond"),
    (Opcode::Ishl, 1, "amount"),
    (Opcode::Ushr, 1, "amount"),
    (Opcode::Sshr, 1, "amount"),
    (Opcode::Rotl, 1, "amount"),
    (Opcode::Rotr, 1, "amount"),
];

/// The free operand of `opcode` (its index and role), if it has one.
pub fn free_operand(opcode: Opcode) -> Option<(usize, &'static str)> {
    FREE_OPERANDS
        .iter()
        .find(|(op, _, _)| *op == opcode)
        .map(|&(_, index, role)| (index, role))
}

// ---------------------------------------------------------------------------
// The table, section by section.
// ---------------------------------------------------------------------------

const CONSTANTS: &[Row] = &[
    ptx(Opcode::Iconst, I8, "", &["mov.b32 {d}, {imm};"])
        .note("the constant masked to 8 bits: zero-extended"),
    ptx(Opcode::Iconst, I32, "", &["mov.b32 {d}, {imm};"]),
    ptx(Opcode::Iconst, I64, "", &["mov.b64 {d}, {imm};"]),
    ptx(Opcode::F32const, F32, "", &["mov.f32 {d}, {imm};"])
        .note("hex float literal: every bit kept, NaN payloads included"),
    ptx(Opcode::F64const, F64, "", &["mov.f64 {d}, {imm};"])
        .note("hex float literal: every bit kept, NaN payloads included"),
];

/// Integer arithmetic and bitwise rows for one width.
macro_rules! int_rows {
    ($ty:ident, $b:literal, $s:literal, $u:literal, $x:literal) => {
        &[
            ptx(Opcode::Iadd, $ty, "", &[concat!("add.", $s, " {d}, {a}, {b};")])
                .note("wraps, as Wasm does"),
            ptx(Opcode::Isub, $ty, "", &[concat!("sub.", $s, " {d}, {a}, {b};")])
                .note("wraps, as Wasm does"),
            ptx(Opcode::Imul, $ty, "", &[concat!("mul.lo.", $s, " {d}, {a}, {b};")])
                .note("low half of the product: wraps, as Wasm does"),
            ptx(Opcode::Udiv, $ty, "", &[concat!("div.", $u, " {d}, {a}, {b};")])
                .note("the translator traps on a zero divisor first"),
            ptx(Opcode::Sdiv, $ty, "", &[concat!("div.", $s, " {d}, {a}, {b};")])
                .note("the translator traps on a zero divisor and on INT_MIN / -1 first"),
            ptx(Opcode::Urem, $ty, "", &[concat!("rem.", $u, " {d}, {a}, {b};")])
                .note("the translator traps on a zero divisor first"),
            ptx(
                Opcode::Srem,
                $ty,
                "srem_minus_one",
                &[
                    concat!("rem.", $s, " {", $x, "0}, {a}, {b};"),
                    concat!("setp.eq.", $s, " {p0}, {b}, -1;"),
                    concat!("selp.b", $b, " {d}, 0, {", $x, "0}, {p0};"),
                ],
            )
            .note("x % -1 is 0 in Wasm (INT_MIN % -1 too, which does not trap): selected, not left to rem"),
            ptx(Opcode::Band, $ty, "", &[concat!("and.b", $b, " {d}, {a}, {b};")]),
            ptx(Opcode::Bor, $ty, "", &[concat!("or.b", $b, " {d}, {a}, {b};")]),
            ptx(Opcode::Bxor, $ty, "", &[concat!("xor.b", $b, " {d}, {a}, {b};")]),
            ptx(Opcode::Bnot, $ty, "", &[concat!("not.b", $b, " {d}, {a};")]),
        ]
    };
}

const INT_32: &[Row] = int_rows!(I32, "32", "s32", "u32", "r");
const INT_64: &[Row] = int_rows!(I64, "64", "s64", "u64", "rd");

/// Bitwise logic on comparison results (`i8` 0 / 1): the translator's
/// guards combine them (`INT_MIN / -1` is `band` of two `icmp`s).
const INT_8: &[Row] = &[
    ptx(Opcode::Band, I8, "", &["and.b32 {d}, {a}, {b};"])
        .note("zero-extended inputs give a zero-extended result"),
    ptx(Opcode::Bor, I8, "", &["or.b32 {d}, {a}, {b};"]),
    ptx(Opcode::Bxor, I8, "", &["xor.b32 {d}, {a}, {b};"]),
    ptx(
        Opcode::Bnot,
        I8,
        "not_narrow",
        &["not.b32 {d}, {a};", "and.b32 {d}, {d}, 0xFF;"],
    )
    .note("clears the bits above the i8 again"),
];

const SHIFTS: &[Row] = &[
    // 32-bit values, 32-bit amount.
    ptx(
        Opcode::Ishl,
        I32,
        "shift_masked",
        &["and.b32 {r0}, {b}, 31;", "shl.b32 {d}, {a}, {r0};"],
    )
    .from(I32)
    .note("Wasm takes the amount mod 32; PTX shl would clamp it to 32 (result 0)"),
    ptx(
        Opcode::Ushr,
        I32,
        "shift_masked",
        &["and.b32 {r0}, {b}, 31;", "shr.u32 {d}, {a}, {r0};"],
    )
    .from(I32)
    .note("amount mod 32"),
    ptx(
        Opcode::Sshr,
        I32,
        "shift_masked",
        &["and.b32 {r0}, {b}, 31;", "shr.s32 {d}, {a}, {r0};"],
    )
    .from(I32)
    .note("amount mod 32; arithmetic shift"),
    ptx(
        Opcode::Rotl,
        I32,
        "rotate_funnel",
        &["shf.l.wrap.b32 {d}, {a}, {a}, {b};"],
    )
    .from(I32)
    .note("funnel shift of a:a; .wrap takes the amount mod 32"),
    ptx(
        Opcode::Rotr,
        I32,
        "rotate_funnel",
        &["shf.r.wrap.b32 {d}, {a}, {a}, {b};"],
    )
    .from(I32)
    .note("funnel shift of a:a; .wrap takes the amount mod 32"),
    // 32-bit values, 64-bit amount: narrowed first (only its low bits count).
    ptx(
        Opcode::Ishl,
        I32,
        "shift_masked",
        &[
            "cvt.u32.u64 {r0}, {b};",
            "and.b32 {r0}, {r0}, 31;",
            "shl.b32 {d}, {a}, {r0};",
        ],
    )
    .from(I64)
    .note("amount mod 32"),
    ptx(
        Opcode::Ushr,
        I32,
        "shift_masked",
        &[
            "cvt.u32.u64 {r0}, {b};",
            "and.b32 {r0}, {r0}, 31;",
            "shr.u32 {d}, {a}, {r0};",
        ],
    )
    .from(I64)
    .note("amount mod 32"),
    ptx(
        Opcode::Sshr,
        I32,
        "shift_masked",
        &[
            "cvt.u32.u64 {r0}, {b};",
            "and.b32 {r0}, {r0}, 31;",
            "shr.s32 {d}, {a}, {r0};",
        ],
    )
    .from(I64)
    .note("amount mod 32"),
    ptx(
        Opcode::Rotl,
        I32,
        "rotate_funnel",
        &[
            "cvt.u32.u64 {r0}, {b};",
            "shf.l.wrap.b32 {d}, {a}, {a}, {r0};",
        ],
    )
    .from(I64)
    .note(".wrap takes the amount mod 32"),
    ptx(
        Opcode::Rotr,
        I32,
        "rotate_funnel",
        &[
            "cvt.u32.u64 {r0}, {b};",
            "shf.r.wrap.b32 {d}, {a}, {a}, {r0};",
        ],
    )
    .from(I64)
    .note(".wrap takes the amount mod 32"),
    // 64-bit values, 64-bit amount.
    ptx(
        Opcode::Ishl,
        I64,
        "shift_masked",
        &[
            "cvt.u32.u64 {r0}, {b};",
            "and.b32 {r0}, {r0}, 63;",
            "shl.b64 {d}, {a}, {r0};",
        ],
    )
    .from(I64)
    .note("amount mod 64 (PTX takes a .u32 amount)"),
    ptx(
        Opcode::Ushr,
        I64,
        "shift_masked",
        &[
            "cvt.u32.u64 {r0}, {b};",
            "and.b32 {r0}, {r0}, 63;",
            "shr.u64 {d}, {a}, {r0};",
        ],
    )
    .from(I64)
    .note("amount mod 64"),
    ptx(
        Opcode::Sshr,
        I64,
        "shift_masked",
        &[
            "cvt.u32.u64 {r0}, {b};",
            "and.b32 {r0}, {r0}, 63;",
            "shr.s64 {d}, {a}, {r0};",
        ],
    )
    .from(I64)
    .note("amount mod 64"),
    ptx(
        Opcode::Rotl,
        I64,
        "rotate64",
        &[
            "cvt.u32.u64 {r0}, {b};",
            "and.b32 {r0}, {r0}, 63;",
            "neg.s32 {r1}, {r0};",
            "and.b32 {r1}, {r1}, 63;",
            "shl.b64 {rd0}, {a}, {r0};",
            "shr.u64 {rd1}, {a}, {r1};",
            "or.b64 {d}, {rd0}, {rd1};",
        ],
    )
    .from(I64)
    .note("(a << n) | (a >> (-n mod 64)), n = amount mod 64; n = 0 gives a | a"),
    ptx(
        Opcode::Rotr,
        I64,
        "rotate64",
        &[
            "cvt.u32.u64 {r0}, {b};",
            "and.b32 {r0}, {r0}, 63;",
            "neg.s32 {r1}, {r0};",
            "and.b32 {r1}, {r1}, 63;",
            "shr.u64 {rd0}, {a}, {r0};",
            "shl.b64 {rd1}, {a}, {r1};",
            "or.b64 {d}, {rd0}, {rd1};",
        ],
    )
    .from(I64)
    .note("(a >> n) | (a << (-n mod 64)), n = amount mod 64"),
    // 64-bit values, 32-bit amount.
    ptx(
        Opcode::Ishl,
        I64,
        "shift_masked",
        &["and.b32 {r0}, {b}, 63;", "shl.b64 {d}, {a}, {r0};"],
    )
    .from(I32)
    .note("amount mod 64"),
    ptx(
        Opcode::Ushr,
        I64,
        "shift_masked",
        &["and.b32 {r0}, {b}, 63;", "shr.u64 {d}, {a}, {r0};"],
    )
    .from(I32)
    .note("amount mod 64"),
    ptx(
        Opcode::Sshr,
        I64,
        "shift_masked",
        &["and.b32 {r0}, {b}, 63;", "shr.s64 {d}, {a}, {r0};"],
    )
    .from(I32)
    .note("amount mod 64"),
    ptx(
        Opcode::Rotl,
        I64,
        "rotate64",
        &[
            "and.b32 {r0}, {b}, 63;",
            "neg.s32 {r1}, {r0};",
            "and.b32 {r1}, {r1}, 63;",
            "shl.b64 {rd0}, {a}, {r0};",
            "shr.u64 {rd1}, {a}, {r1};",
            "or.b64 {d}, {rd0}, {rd1};",
        ],
    )
    .from(I32)
    .note("(a << n) | (a >> (-n mod 64)), n = amount mod 64"),
    ptx(
        Opcode::Rotr,
        I64,
        "rotate64",
        &[
            "and.b32 {r0}, {b}, 63;",
            "neg.s32 {r1}, {r0};",
            "and.b32 {r1}, {r1}, 63;",
            "shr.u64 {rd0}, {a}, {r0};",
            "shl.b64 {rd1}, {a}, {r1};",
            "or.b64 {d}, {rd0}, {rd1};",
        ],
    )
    .from(I32)
    .note("(a >> n) | (a << (-n mod 64)), n = amount mod 64"),
];

const BIT_COUNTS: &[Row] = &[
    ptx(Opcode::Clz, I32, "", &["clz.b32 {d}, {a};"]).note("clz(0) = 32, as Wasm"),
    ptx(
        Opcode::Clz,
        I64,
        "count64",
        &["clz.b64 {r0}, {a};", "cvt.u64.u32 {d}, {r0};"],
    )
    .note("clz(0) = 64; PTX counts into a .u32"),
    ptx(
        Opcode::Ctz,
        I32,
        "ctz_brev",
        &["brev.b32 {r0}, {a};", "clz.b32 {d}, {r0};"],
    )
    .note("trailing zeros are the leading zeros of the bit-reversed value; ctz(0) = 32"),
    ptx(
        Opcode::Ctz,
        I64,
        "ctz_brev",
        &[
            "brev.b64 {rd0}, {a};",
            "clz.b64 {r0}, {rd0};",
            "cvt.u64.u32 {d}, {r0};",
        ],
    )
    .note("ctz(0) = 64"),
    ptx(Opcode::Popcnt, I32, "", &["popc.b32 {d}, {a};"]),
    ptx(
        Opcode::Popcnt,
        I64,
        "count64",
        &["popc.b64 {r0}, {a};", "cvt.u64.u32 {d}, {r0};"],
    )
    .note("PTX counts into a .u32"),
];

/// `icmp` rows for one width: setp, then 0/1 into a `.b32` (the `i8`).
macro_rules! icmp_rows {
    ($ty:ident, $s:literal, $u:literal) => {
        &[
            icmp!($ty, Equal, "eq", $s),
            icmp!($ty, NotEqual, "ne", $s),
            icmp!($ty, SignedLessThan, "lt", $s),
            icmp!($ty, SignedGreaterThanOrEqual, "ge", $s),
            icmp!($ty, SignedGreaterThan, "gt", $s),
            icmp!($ty, SignedLessThanOrEqual, "le", $s),
            icmp!($ty, UnsignedLessThan, "lt", $u),
            icmp!($ty, UnsignedGreaterThanOrEqual, "ge", $u),
            icmp!($ty, UnsignedGreaterThan, "gt", $u),
            icmp!($ty, UnsignedLessThanOrEqual, "le", $u),
        ]
    };
}

macro_rules! icmp {
    ($ty:ident, $cc:ident, $op:literal, $t:literal) => {
        ptx(
            Opcode::Icmp,
            $ty,
            "compare",
            &[
                concat!("setp.", $op, ".", $t, " {p0}, {a}, {b};"),
                "selp.u32 {d}, 1, 0, {p0};",
            ],
        )
        .icc(IntCC::$cc)
    };
}

const ICMP_32: &[Row] = icmp_rows!(I32, "s32", "u32");
const ICMP_64: &[Row] = icmp_rows!(I64, "s64", "u64");

/// `fcmp` rows for one width. CLIF's `ne` and `u*` conditions are true on
/// NaN: PTX's `neu`, `equ`, `ltu`, ...; its `eq`, `lt`, ... and `ne` (CLIF
/// `one`) are ordered.
macro_rules! fcmp_rows {
    ($ty:ident, $f:literal) => {
        &[
            fcmp!($ty, Ordered, "num", $f),
            fcmp!($ty, Unordered, "nan", $f),
            fcmp!($ty, Equal, "eq", $f),
            fcmp!($ty, NotEqual, "neu", $f)
                .note("CLIF ne is true on NaN: PTX neu (PTX ne is ordered)"),
            fcmp!($ty, OrderedNotEqual, "ne", $f),
            fcmp!($ty, UnorderedOrEqual, "equ", $f),
            fcmp!($ty, LessThan, "lt", $f),
            fcmp!($ty, LessThanOrEqual, "le", $f),
            fcmp!($ty, GreaterThan, "gt", $f),
            fcmp!($ty, GreaterThanOrEqual, "ge", $f),
            fcmp!($ty, UnorderedOrLessThan, "ltu", $f),
            fcmp!($ty, UnorderedOrLessThanOrEqual, "leu", $f),
            fcmp!($ty, UnorderedOrGreaterThan, "gtu", $f),
            fcmp!($ty, UnorderedOrGreaterThanOrEqual, "geu", $f),
        ]
    };
}

macro_rules! fcmp {
    ($ty:ident, $cc:ident, $op:literal, $f:literal) => {
        ptx(
            Opcode::Fcmp,
            $ty,
            "compare",
            &[
                concat!("setp.", $op, ".", $f, " {p0}, {a}, {b};"),
                "selp.u32 {d}, 1, 0, {p0};",
            ],
        )
        .fcc(FloatCC::$cc)
    };
}

const FCMP_32: &[Row] = fcmp_rows!(F32, "f32");
const FCMP_64: &[Row] = fcmp_rows!(F64, "f64");

/// The name of the rules that end by making a NaN result Wasm's canonical
/// NaN (their last two lines, `setp.nan` of the result with itself and the
/// predicated move: two SASS instructions, `FSETP.NAN` and `FSEL`, where
/// `testp.notanumber` was three);
/// the lowerer leaves those two lines out where no use can see the NaN's
/// bits (`ptx.rs`, "NaNs").
pub const CANONICAL_NAN: &str = "canonical_nan";

/// The two lines that end every `canonical_nan` rule of a float type:
/// a NaN in `{d}` becomes Wasm's canonical NaN. The lowerer also makes
/// them (in place) before a use that sees a block parameter that may hold
/// PTX's NaN (`nan.rs`). `None` for a type that is not a float.
pub fn nan_fixup(ty: Type) -> Option<&'static [&'static str]> {
    match ty {
        F32 => Some(&[
            "setp.nan.f32 {p0}, {d}, {d};",
            "@{p0} mov.f32 {d}, 0f7FC00000;",
        ]),
        F64 => Some(&[
            "setp.nan.f64 {p0}, {d}, {d};",
            "@{p0} mov.f64 {d}, 0d7FF8000000000000;",
        ]),
        _ => None,
    }
}

/// Float arithmetic rows for one width. `$x` names the scratch registers
/// of the width's bits (`r` / `rd`), `$fx` the float scratch (`f` / `fd`).
macro_rules! float_rows {
    ($ty:ident, $f:literal, $b:literal, $x:literal, $fx:literal, $sign:literal, $mag:literal, $nan:literal) => {
        &[
            ptx(
                Opcode::Fadd,
                $ty,
                CANONICAL_NAN,
                &[
                    concat!("add.rn.", $f, " {d}, {a}, {b};"),
                    concat!("setp.nan.", $f, " {p0}, {d}, {d};"),
                    concat!("@{p0} mov.", $f, " {d}, ", $nan, ";"),
                ],
            )
            .note("explicit .rn: ptxas never fuses it into an fma (Wasm rounds each op)"),
            ptx(
                Opcode::Fsub,
                $ty,
                CANONICAL_NAN,
                &[
                    concat!("sub.rn.", $f, " {d}, {a}, {b};"),
                    concat!("setp.nan.", $f, " {p0}, {d}, {d};"),
                    concat!("@{p0} mov.", $f, " {d}, ", $nan, ";"),
                ],
            )
            .note("explicit .rn: never fused"),
            ptx(
                Opcode::Fmul,
                $ty,
                CANONICAL_NAN,
                &[
                    concat!("mul.rn.", $f, " {d}, {a}, {b};"),
                    concat!("setp.nan.", $f, " {p0}, {d}, {d};"),
                    concat!("@{p0} mov.", $f, " {d}, ", $nan, ";"),
                ],
            )
            .note("explicit .rn: never fused"),
            ptx(
                Opcode::Fma,
                $ty,
                CANONICAL_NAN,
                &[
                    concat!("fma.rn.", $f, " {d}, {a}, {b}, {c};"),
                    concat!("setp.nan.", $f, " {p0}, {d}, {d};"),
                    concat!("@{p0} mov.", $f, " {d}, ", $nan, ";"),
                ],
            )
            .note("the fma_* intrinsics: a * b + c rounded once (IEEE fusedMultiplyAdd)"),
            ptx(
                Opcode::Fdiv,
                $ty,
                CANONICAL_NAN,
                &[
                    concat!("div.rn.", $f, " {d}, {a}, {b};"),
                    concat!("setp.nan.", $f, " {p0}, {d}, {d};"),
                    concat!("@{p0} mov.", $f, " {d}, ", $nan, ";"),
                ],
            )
            .note("IEEE division, correctly rounded (not div.approx / div.full)"),
            ptx(
                Opcode::Sqrt,
                $ty,
                CANONICAL_NAN,
                &[
                    concat!("sqrt.rn.", $f, " {d}, {a};"),
                    concat!("setp.nan.", $f, " {p0}, {d}, {d};"),
                    concat!("@{p0} mov.", $f, " {d}, ", $nan, ";"),
                ],
            )
            .note("IEEE square root, correctly rounded"),
            ptx(
                Opcode::Fneg,
                $ty,
                "",
                &[concat!("xor.b", $b, " {d}, {a}, ", $sign, ";")],
            )
            .note("flips the sign bit only: bit-exact on NaN, as Wasm requires"),
            ptx(
                Opcode::Fabs,
                $ty,
                "",
                &[concat!("and.b", $b, " {d}, {a}, ", $mag, ";")],
            )
            .note("clears the sign bit only: bit-exact on NaN"),
            ptx(
                Opcode::Fcopysign,
                $ty,
                "copysign_bits",
                &[
                    concat!("and.b", $b, " {", $x, "0}, {a}, ", $mag, ";"),
                    concat!("and.b", $b, " {", $x, "1}, {b}, ", $sign, ";"),
                    concat!("or.b", $b, " {d}, {", $x, "0}, {", $x, "1};"),
                ],
            )
            .note("magnitude bits of a, sign bit of b: bit-exact on NaN"),
            ptx(
                Opcode::Ceil,
                $ty,
                CANONICAL_NAN,
                &[
                    concat!("cvt.rpi.", $f, ".", $f, " {d}, {a};"),
                    concat!("setp.nan.", $f, " {p0}, {d}, {d};"),
                    concat!("@{p0} mov.", $f, " {d}, ", $nan, ";"),
                ],
            )
            .note("round to integral toward +inf; keeps the sign of zero, NaN stays NaN"),
            ptx(
                Opcode::Floor,
                $ty,
                CANONICAL_NAN,
                &[
                    concat!("cvt.rmi.", $f, ".", $f, " {d}, {a};"),
                    concat!("setp.nan.", $f, " {p0}, {d}, {d};"),
                    concat!("@{p0} mov.", $f, " {d}, ", $nan, ";"),
                ],
            )
            .note("round to integral toward -inf"),
            ptx(
                Opcode::Trunc,
                $ty,
                CANONICAL_NAN,
                &[
                    concat!("cvt.rzi.", $f, ".", $f, " {d}, {a};"),
                    concat!("setp.nan.", $f, " {p0}, {d}, {d};"),
                    concat!("@{p0} mov.", $f, " {d}, ", $nan, ";"),
                ],
            )
            .note("round to integral toward zero"),
            ptx(
                Opcode::Nearest,
                $ty,
                CANONICAL_NAN,
                &[
                    concat!("cvt.rni.", $f, ".", $f, " {d}, {a};"),
                    concat!("setp.nan.", $f, " {p0}, {d}, {d};"),
                    concat!("@{p0} mov.", $f, " {d}, ", $nan, ";"),
                ],
            )
            .note("round to integral, ties to even (Wasm nearest)"),
        ]
    };
}

const FLOAT_32: &[Row] = float_rows!(
    F32,
    "f32",
    "32",
    "r",
    "f",
    "0x80000000",
    "0x7FFFFFFF",
    "0f7FC00000"
);
const FLOAT_64: &[Row] = float_rows!(
    F64,
    "f64",
    "64",
    "rd",
    "fd",
    "0x8000000000000000",
    "0x7FFFFFFFFFFFFFFF",
    "0d7FF8000000000000"
);

/// Wasm `fmin` / `fmax` for one width: PTX `min` / `max` are IEEE minNum
/// / maxNum (a NaN input yields the other input) and may pick either zero,
/// so NaN inputs select the canonical NaN and equal inputs (`-0 == +0`)
/// combine their bits: OR for min (`-0` wins), AND for max (`+0` wins).
macro_rules! fminmax {
    ($op:ident, $ty:ident, $name:literal, $minmax:literal, $bits:literal, $f:literal, $b:literal, $fx:literal, $nan:literal) => {
        ptx(
            Opcode::$op,
            $ty,
            $name,
            &[
                concat!("setp.nan.", $f, " {p0}, {a}, {b};"),
                concat!("setp.eq.", $f, " {p1}, {a}, {b};"),
                concat!($minmax, ".", $f, " {", $fx, "0}, {a}, {b};"),
                concat!($bits, ".b", $b, " {", $fx, "1}, {a}, {b};"),
                concat!(
                    "selp.",
                    $f,
                    " {",
                    $fx,
                    "0}, {",
                    $fx,
                    "1}, {",
                    $fx,
                    "0}, {p1};"
                ),
                concat!("selp.", $f, " {d}, ", $nan, ", {", $fx, "0}, {p0};"),
            ],
        )
    };
}

/// Every target uses the same rule: `min.NaN` / `max.NaN` (sm_80+) return
/// PTX's canonical NaN, `0x7FFFFFFF`, not Wasm's `0x7FC00000`, so they are
/// not used (measured on an H100).
const FMIN_FMAX: &[Row] = &[
    fminmax!(
        Fmin,
        F32,
        "wasm_fmin",
        "min",
        "or",
        "f32",
        "32",
        "f",
        "0f7FC00000"
    )
    .note("NaN in: canonical NaN; min(-0, +0) = -0 (equal inputs OR their bits)"),
    fminmax!(
        Fmax,
        F32,
        "wasm_fmax",
        "max",
        "and",
        "f32",
        "32",
        "f",
        "0f7FC00000"
    )
    .note("NaN in: canonical NaN; max(-0, +0) = +0 (equal inputs AND their bits)"),
    fminmax!(
        Fmin,
        F64,
        "wasm_fmin",
        "min",
        "or",
        "f64",
        "64",
        "fd",
        "0d7FF8000000000000"
    )
    .note("no min.NaN.f64 in PTX: setp.nan selects the canonical NaN on every target"),
    fminmax!(
        Fmax,
        F64,
        "wasm_fmax",
        "max",
        "and",
        "f64",
        "64",
        "fd",
        "0d7FF8000000000000"
    )
    .note("no max.NaN.f64 in PTX"),
];

const CONVERSIONS: &[Row] = &[
    // Integer widths. Narrow values are zero-extended in their .b32.
    ptx(Opcode::Uextend, I32, "", &["mov.b32 {d}, {a};"])
        .from(I8)
        .note("the i8 is already zero-extended in its .b32"),
    ptx(Opcode::Uextend, I32, "", &["mov.b32 {d}, {a};"])
        .from(I16)
        .note("the i16 is already zero-extended in its .b32"),
    ptx(Opcode::Uextend, I64, "", &["cvt.u64.u32 {d}, {a};"]).from(I8),
    ptx(Opcode::Uextend, I64, "", &["cvt.u64.u32 {d}, {a};"]).from(I16),
    ptx(Opcode::Uextend, I64, "", &["cvt.u64.u32 {d}, {a};"]).from(I32),
    ptx(Opcode::Sextend, I32, "", &["cvt.s32.s8 {d}, {a};"])
        .from(I8)
        .note("sign of bit 7 into bits 8..32"),
    ptx(Opcode::Sextend, I32, "", &["cvt.s32.s16 {d}, {a};"]).from(I16),
    ptx(Opcode::Sextend, I64, "", &["cvt.s64.s8 {d}, {a};"]).from(I8),
    ptx(Opcode::Sextend, I64, "", &["cvt.s64.s16 {d}, {a};"]).from(I16),
    ptx(Opcode::Sextend, I64, "", &["cvt.s64.s32 {d}, {a};"]).from(I32),
    ptx(Opcode::Ireduce, I8, "", &["and.b32 {d}, {a}, 0xFF;"])
        .from(I32)
        .note("keeps narrow values zero-extended"),
    ptx(
        Opcode::Ireduce,
        I8,
        "reduce_narrow",
        &["cvt.u32.u64 {r0}, {a};", "and.b32 {d}, {r0}, 0xFF;"],
    )
    .from(I64),
    ptx(Opcode::Ireduce, I16, "", &["and.b32 {d}, {a}, 0xFFFF;"]).from(I32),
    ptx(
        Opcode::Ireduce,
        I16,
        "reduce_narrow",
        &["cvt.u32.u64 {r0}, {a};", "and.b32 {d}, {r0}, 0xFFFF;"],
    )
    .from(I64),
    ptx(Opcode::Ireduce, I32, "", &["cvt.u32.u64 {d}, {a};"])
        .from(I64)
        .note("low 32 bits"),
    // Float widths.
    ptx(
        Opcode::Fpromote,
        F64,
        CANONICAL_NAN,
        &[
            "cvt.f64.f32 {d}, {a};",
            "setp.nan.f64 {p0}, {d}, {d};",
            "@{p0} mov.f64 {d}, 0d7FF8000000000000;",
        ],
    )
    .from(F32)
    .note("exact; subnormals kept (no .ftz); a NaN becomes Wasm's canonical NaN"),
    ptx(
        Opcode::Fdemote,
        F32,
        CANONICAL_NAN,
        &[
            "cvt.rn.f32.f64 {d}, {a};",
            "setp.nan.f32 {p0}, {d}, {d};",
            "@{p0} mov.f32 {d}, 0f7FC00000;",
        ],
    )
    .from(F64)
    .note("round to nearest even; a NaN becomes Wasm's canonical NaN"),
    // Float to integer. PTX float-to-int cvt saturates; NaN is not 0 for
    // every width on sm_90 (measured), so the saturating forms set it; the
    // trapping forms are range- and NaN-checked by the translator first.
    ptx(Opcode::FcvtToSint, I32, "", &["cvt.rzi.s32.f32 {d}, {a};"])
        .from(F32)
        .note("NaN and out-of-range inputs trapped by the translator first"),
    ptx(Opcode::FcvtToSint, I32, "", &["cvt.rzi.s32.f64 {d}, {a};"]).from(F64),
    ptx(Opcode::FcvtToSint, I64, "", &["cvt.rzi.s64.f32 {d}, {a};"]).from(F32),
    ptx(Opcode::FcvtToSint, I64, "", &["cvt.rzi.s64.f64 {d}, {a};"]).from(F64),
    ptx(Opcode::FcvtToUint, I32, "", &["cvt.rzi.u32.f32 {d}, {a};"])
        .from(F32)
        .note("NaN and out-of-range inputs trapped by the translator first"),
    ptx(Opcode::FcvtToUint, I32, "", &["cvt.rzi.u32.f64 {d}, {a};"]).from(F64),
    ptx(Opcode::FcvtToUint, I64, "", &["cvt.rzi.u64.f32 {d}, {a};"]).from(F32),
    ptx(Opcode::FcvtToUint, I64, "", &["cvt.rzi.u64.f64 {d}, {a};"]).from(F64),
    ptx(
        Opcode::FcvtToSintSat,
        I32,
        "sat_nan_zero",
        &[
            "setp.nan.f32 {p0}, {a}, {a};",
            "cvt.rzi.s32.f32 {d}, {a};",
            "@{p0} mov.b32 {d}, 0;",
        ],
    )
    .from(F32)
    .note("PTX cvt clamps to the range; NaN is set to 0 explicitly (on sm_90 cvt.rzi of NaN gives 0 only for f32 to 32-bit, INT_MIN otherwise): Wasm trunc_sat"),
    ptx(
        Opcode::FcvtToSintSat,
        I32,
        "sat_nan_zero",
        &[
            "setp.nan.f64 {p0}, {a}, {a};",
            "cvt.rzi.s32.f64 {d}, {a};",
            "@{p0} mov.b32 {d}, 0;",
        ],
    )
    .from(F64),
    ptx(
        Opcode::FcvtToSintSat,
        I64,
        "sat_nan_zero",
        &[
            "setp.nan.f32 {p0}, {a}, {a};",
            "cvt.rzi.s64.f32 {d}, {a};",
            "@{p0} mov.b64 {d}, 0;",
        ],
    )
    .from(F32),
    ptx(
        Opcode::FcvtToSintSat,
        I64,
        "sat_nan_zero",
        &[
            "setp.nan.f64 {p0}, {a}, {a};",
            "cvt.rzi.s64.f64 {d}, {a};",
            "@{p0} mov.b64 {d}, 0;",
        ],
    )
    .from(F64),
    ptx(
        Opcode::FcvtToUintSat,
        I32,
        "sat_nan_zero",
        &[
            "setp.nan.f32 {p0}, {a}, {a};",
            "cvt.rzi.u32.f32 {d}, {a};",
            "@{p0} mov.b32 {d}, 0;",
        ],
    )
    .from(F32)
    .note("clamps (negative to 0); NaN set to 0 explicitly"),
    ptx(
        Opcode::FcvtToUintSat,
        I32,
        "sat_nan_zero",
        &[
            "setp.nan.f64 {p0}, {a}, {a};",
            "cvt.rzi.u32.f64 {d}, {a};",
            "@{p0} mov.b32 {d}, 0;",
        ],
    )
    .from(F64),
    ptx(
        Opcode::FcvtToUintSat,
        I64,
        "sat_nan_zero",
        &[
            "setp.nan.f32 {p0}, {a}, {a};",
            "cvt.rzi.u64.f32 {d}, {a};",
            "@{p0} mov.b64 {d}, 0;",
        ],
    )
    .from(F32),
    ptx(
        Opcode::FcvtToUintSat,
        I64,
        "sat_nan_zero",
        &[
            "setp.nan.f64 {p0}, {a}, {a};",
            "cvt.rzi.u64.f64 {d}, {a};",
            "@{p0} mov.b64 {d}, 0;",
        ],
    )
    .from(F64),
    // Integer to float: round to nearest even.
    ptx(Opcode::FcvtFromSint, F32, "", &["cvt.rn.f32.s32 {d}, {a};"]).from(I32),
    ptx(Opcode::FcvtFromSint, F32, "", &["cvt.rn.f32.s64 {d}, {a};"]).from(I64),
    ptx(Opcode::FcvtFromSint, F64, "", &["cvt.rn.f64.s32 {d}, {a};"])
        .from(I32)
        .note("exact"),
    ptx(Opcode::FcvtFromSint, F64, "", &["cvt.rn.f64.s64 {d}, {a};"]).from(I64),
    ptx(Opcode::FcvtFromUint, F32, "", &["cvt.rn.f32.u32 {d}, {a};"]).from(I32),
    ptx(Opcode::FcvtFromUint, F32, "", &["cvt.rn.f32.u64 {d}, {a};"]).from(I64),
    ptx(Opcode::FcvtFromUint, F64, "", &["cvt.rn.f64.u32 {d}, {a};"])
        .from(I32)
        .note("exact"),
    ptx(Opcode::FcvtFromUint, F64, "", &["cvt.rn.f64.u64 {d}, {a};"]).from(I64),
    // Reinterpretation: the same bits in the other register file.
    ptx(Opcode::Bitcast, I32, "", &["mov.b32 {d}, {a};"])
        .from(F32)
        .note("bit-exact"),
    ptx(Opcode::Bitcast, F32, "", &["mov.b32 {d}, {a};"])
        .from(I32)
        .note("bit-exact"),
    ptx(Opcode::Bitcast, I64, "", &["mov.b64 {d}, {a};"])
        .from(F64)
        .note("bit-exact"),
    ptx(Opcode::Bitcast, F64, "", &["mov.b64 {d}, {a};"])
        .from(I64)
        .note("bit-exact"),
];

/// `select c, x, y`: `x` when `c` is not 0.
macro_rules! select_rows {
    ($ty:ident, $sel:literal) => {
        &[
            ptx(
                Opcode::Select,
                $ty,
                "select",
                &[
                    "setp.ne.b32 {p0}, {a}, 0;",
                    concat!("selp.", $sel, " {d}, {b}, {c}, {p0};"),
                ],
            )
            .from(I8),
            ptx(
                Opcode::Select,
                $ty,
                "select",
                &[
                    "setp.ne.b32 {p0}, {a}, 0;",
                    concat!("selp.", $sel, " {d}, {b}, {c}, {p0};"),
                ],
            )
            .from(I32),
            ptx(
                Opcode::Select,
                $ty,
                "select",
                &[
                    "setp.ne.b64 {p0}, {a}, 0;",
                    concat!("selp.", $sel, " {d}, {b}, {c}, {p0};"),
                ],
            )
            .from(I64),
        ]
    };
}

const SELECT_I32: &[Row] = select_rows!(I32, "b32");
const SELECT_I64: &[Row] = select_rows!(I64, "b64");
const SELECT_F32: &[Row] = select_rows!(F32, "f32");
const SELECT_F64: &[Row] = select_rows!(F64, "f64");

/// An access of `mask + 1` bytes at `addr + off`, whose alignment nothing
/// promises: the aligned instruction when `(addr + off) & mask == 0`, byte
/// accesses otherwise (a misaligned `ld.global` / `st.global` faults and
/// poisons the context).
macro_rules! checked {
    ($addr:literal, $mask:literal, [$($aligned:literal),* $(,)?], [$($bytes:literal),* $(,)?]) => {
        &[
            concat!("add.s64 {rd0}, ", $addr, ", {off};"),
            concat!("and.b64 {rd1}, {rd0}, ", $mask, ";"),
            "setp.ne.b64 {p0}, {rd1}, 0;",
            "@{p0} bra {L0};",
            $($aligned,)*
            "bra {L1};",
            "{L0}:",
            $($bytes,)*
            "{L1}:",
        ]
    };
}

/// A 2-byte load: bytes little endian into `{r0}`, then `$finish`.
macro_rules! load16 {
    ($aligned:literal, $finish:literal) => {
        checked!(
            "{a}",
            1,
            [$aligned],
            [
                "ld.global.u8 {r0}, [{rd0}];",
                "ld.global.u8 {r1}, [{rd0}+1];",
                "shl.b32 {r1}, {r1}, 8;",
                "or.b32 {r0}, {r0}, {r1};",
                $finish,
            ]
        )
    };
}

/// A 4-byte load: bytes little endian into `{r0}`, then `$finish`.
macro_rules! load32 {
    ($aligned:literal, $finish:literal) => {
        checked!(
            "{a}",
            3,
            [$aligned],
            [
                "ld.global.u8 {r0}, [{rd0}];",
                "ld.global.u8 {r1}, [{rd0}+1];",
                "ld.global.u8 {r2}, [{rd0}+2];",
                "ld.global.u8 {r3}, [{rd0}+3];",
                "shl.b32 {r1}, {r1}, 8;",
                "shl.b32 {r2}, {r2}, 16;",
                "shl.b32 {r3}, {r3}, 24;",
                "or.b32 {r0}, {r0}, {r1};",
                "or.b32 {r2}, {r2}, {r3};",
                "or.b32 {r0}, {r0}, {r2};",
                $finish,
            ]
        )
    };
}

/// An 8-byte load: bytes 0..4 into `{r0}`, 4..8 into `{r4}` (little
/// endian), then `$finish` packs them.
macro_rules! load64 {
    ($aligned:literal, $finish:literal) => {
        checked!(
            "{a}",
            7,
            [$aligned],
            [
                "ld.global.u8 {r0}, [{rd0}];",
                "ld.global.u8 {r1}, [{rd0}+1];",
                "ld.global.u8 {r2}, [{rd0}+2];",
                "ld.global.u8 {r3}, [{rd0}+3];",
                "shl.b32 {r1}, {r1}, 8;",
                "shl.b32 {r2}, {r2}, 16;",
                "shl.b32 {r3}, {r3}, 24;",
                "or.b32 {r0}, {r0}, {r1};",
                "or.b32 {r2}, {r2}, {r3};",
                "or.b32 {r0}, {r0}, {r2};",
                "ld.global.u8 {r4}, [{rd0}+4];",
                "ld.global.u8 {r5}, [{rd0}+5];",
                "ld.global.u8 {r6}, [{rd0}+6];",
                "ld.global.u8 {r7}, [{rd0}+7];",
                "shl.b32 {r5}, {r5}, 8;",
                "shl.b32 {r6}, {r6}, 16;",
                "shl.b32 {r7}, {r7}, 24;",
                "or.b32 {r4}, {r4}, {r5};",
                "or.b32 {r6}, {r6}, {r7};",
                "or.b32 {r4}, {r4}, {r6};",
                $finish,
            ]
        )
    };
}

/// A 2-byte store of `{a}`: `$bits` puts its low 32 bits into `{r0}`, and
/// the bytes go out little endian.
macro_rules! store16 {
    ($aligned:literal, $bits:literal) => {
        checked!(
            "{b}",
            1,
            [$aligned],
            [
                $bits,
                "st.global.u8 [{rd0}], {r0};",
                "shr.b32 {r1}, {r0}, 8;",
                "st.global.u8 [{rd0}+1], {r1};",
            ]
        )
    };
}

/// A 4-byte store of `{a}`: `$bits` puts its low 32 bits into `{r0}`.
macro_rules! store32 {
    ($aligned:literal, $bits:literal) => {
        checked!(
            "{b}",
            3,
            [$aligned],
            [
                $bits,
                "st.global.u8 [{rd0}], {r0};",
                "shr.b32 {r1}, {r0}, 8;",
                "st.global.u8 [{rd0}+1], {r1};",
                "shr.b32 {r1}, {r0}, 16;",
                "st.global.u8 [{rd0}+2], {r1};",
                "shr.b32 {r1}, {r0}, 24;",
                "st.global.u8 [{rd0}+3], {r1};",
            ]
        )
    };
}

/// An 8-byte store of `{a}`: low word into `{r0}`, high word into `{r2}`.
macro_rules! store64 {
    ($aligned:literal) => {
        checked!(
            "{b}",
            7,
            [$aligned],
            [
                "mov.b64 {{r0}, {r2}}, {a};",
                "st.global.u8 [{rd0}], {r0};",
                "shr.b32 {r1}, {r0}, 8;",
                "st.global.u8 [{rd0}+1], {r1};",
                "shr.b32 {r1}, {r0}, 16;",
                "st.global.u8 [{rd0}+2], {r1};",
                "shr.b32 {r1}, {r0}, 24;",
                "st.global.u8 [{rd0}+3], {r1};",
                "st.global.u8 [{rd0}+4], {r2};",
                "shr.b32 {r1}, {r2}, 8;",
                "st.global.u8 [{rd0}+5], {r1};",
                "shr.b32 {r1}, {r2}, 16;",
                "st.global.u8 [{rd0}+6], {r1};",
                "shr.b32 {r1}, {r2}, 24;",
                "st.global.u8 [{rd0}+7], {r1};",
            ]
        )
    };
}

const MEMORY: &[Row] = &[
    // Full-width loads.
    ptx(
        Opcode::Load,
        I32,
        "load_checked",
        load32!("ld.global.u32 {d}, [{rd0}];", "mov.b32 {d}, {r0};"),
    )
    .note("alignment checked: aligned ld.global or four byte loads, little endian"),
    ptx(
        Opcode::Load,
        I64,
        "load_checked",
        load64!("ld.global.u64 {d}, [{rd0}];", "mov.b64 {d}, {{r0}, {r4}};"),
    )
    .note("alignment checked: aligned ld.global or eight byte loads; mov.b64 {lo, hi} packs them"),
    ptx(
        Opcode::Load,
        F32,
        "load_checked",
        load32!("ld.global.f32 {d}, [{rd0}];", "mov.b32 {d}, {r0};"),
    )
    .note("bit-exact (NaN payloads kept)"),
    ptx(
        Opcode::Load,
        F64,
        "load_checked",
        load64!("ld.global.f64 {d}, [{rd0}];", "mov.b64 {d}, {{r0}, {r4}};"),
    )
    .note("bit-exact"),
    // Narrow loads.
    ptx(
        Opcode::Uload8,
        I32,
        "load_byte",
        &["add.s64 {rd0}, {a}, {off};", "ld.global.u8 {d}, [{rd0}];"],
    )
    .note("a byte is always aligned; zero-extended into the register"),
    ptx(
        Opcode::Uload8,
        I64,
        "load_byte",
        &["add.s64 {rd0}, {a}, {off};", "ld.global.u8 {d}, [{rd0}];"],
    )
    .note("zero-extended into the register"),
    ptx(
        Opcode::Sload8,
        I32,
        "load_byte",
        &["add.s64 {rd0}, {a}, {off};", "ld.global.s8 {d}, [{rd0}];"],
    )
    .note("sign-extended into the register"),
    ptx(
        Opcode::Sload8,
        I64,
        "load_byte",
        &["add.s64 {rd0}, {a}, {off};", "ld.global.s8 {d}, [{rd0}];"],
    )
    .note("sign-extended into the register"),
    ptx(
        Opcode::Uload16,
        I32,
        "load_checked",
        load16!("ld.global.u16 {d}, [{rd0}];", "mov.b32 {d}, {r0};"),
    ),
    ptx(
        Opcode::Uload16,
        I64,
        "load_checked",
        load16!("ld.global.u16 {d}, [{rd0}];", "cvt.u64.u32 {d}, {r0};"),
    ),
    ptx(
        Opcode::Sload16,
        I32,
        "load_checked",
        load16!("ld.global.s16 {d}, [{rd0}];", "cvt.s32.s16 {d}, {r0};"),
    )
    .note("byte path sign-extends bit 15"),
    ptx(
        Opcode::Sload16,
        I64,
        "load_checked",
        load16!("ld.global.s16 {d}, [{rd0}];", "cvt.s64.s16 {d}, {r0};"),
    ),
    ptx(
        Opcode::Uload32,
        I64,
        "load_checked",
        load32!("ld.global.u32 {d}, [{rd0}];", "cvt.u64.u32 {d}, {r0};"),
    )
    .note("the type is the address's (the result is i64)"),
    ptx(
        Opcode::Sload32,
        I64,
        "load_checked",
        load32!("ld.global.s32 {d}, [{rd0}];", "cvt.s64.s32 {d}, {r0};"),
    )
    .note("the type is the address's (the result is i64)"),
    // Stores (operand a is the value, b the address).
    ptx(
        Opcode::Store,
        I32,
        "store_checked",
        store32!("st.global.u32 [{rd0}], {a};", "mov.b32 {r0}, {a};"),
    )
    .note("alignment checked: aligned st.global or four byte stores, little endian"),
    ptx(
        Opcode::Store,
        I64,
        "store_checked",
        store64!("st.global.u64 [{rd0}], {a};"),
    )
    .note("mov.b64 {lo, hi} splits the value"),
    ptx(
        Opcode::Store,
        F32,
        "store_checked",
        store32!("st.global.f32 [{rd0}], {a};", "mov.b32 {r0}, {a};"),
    )
    .note("bit-exact"),
    ptx(
        Opcode::Store,
        F64,
        "store_checked",
        store64!("st.global.f64 [{rd0}], {a};"),
    )
    .note("bit-exact"),
    ptx(
        Opcode::Istore8,
        I32,
        "store_byte",
        &["add.s64 {rd0}, {b}, {off};", "st.global.u8 [{rd0}], {a};"],
    )
    .note("stores the low byte"),
    ptx(
        Opcode::Istore8,
        I64,
        "store_byte",
        &["add.s64 {rd0}, {b}, {off};", "st.global.u8 [{rd0}], {a};"],
    )
    .note("stores the low byte"),
    ptx(
        Opcode::Istore16,
        I32,
        "store_checked",
        store16!("st.global.u16 [{rd0}], {a};", "mov.b32 {r0}, {a};"),
    ),
    ptx(
        Opcode::Istore16,
        I64,
        "store_checked",
        store16!("st.global.u16 [{rd0}], {a};", "cvt.u32.u64 {r0}, {a};"),
    ),
    ptx(
        Opcode::Istore32,
        I64,
        "store_checked",
        store32!("st.global.u32 [{rd0}], {a};", "cvt.u32.u64 {r0}, {a};"),
    )
    .note("stores the low word"),
];

/// One `atomic_rmw` row: PTX `atom` on the guest's memory, relaxed at
/// `gpu` scope (CUDA's `atomicAdd`); the translator brackets the Wasm
/// threads operators with `fence`s for their sequential consistency.
macro_rules! rmw {
    ($ty:ident, $op:ident, [$($line:literal),+ $(,)?]) => {
        ptx(Opcode::AtomicRmw, $ty, "atomic", &[$($line),+]).rmw(AtomicRmwOp::$op)
    };
}

/// Atomics (`docs/kernels.md`, "Atomics"): the translator checks bounds
/// and natural alignment first (a misaligned `atom` faults), keeps 8- and
/// 16-bit forms as compare-and-swap loops on the containing word, and
/// sends accesses in a thread's stack window to plain loads and stores.
const ATOMICS: &[Row] = &[
    rmw!(I32, Add, ["atom.global.add.u32 {d}, [{a}], {b};"]),
    rmw!(
        I32,
        Sub,
        [
            "neg.s32 {r0}, {b};",
            "atom.global.add.u32 {d}, [{a}], {r0};"
        ]
    ),
    rmw!(I32, And, ["atom.global.and.b32 {d}, [{a}], {b};"]),
    rmw!(I32, Or, ["atom.global.or.b32 {d}, [{a}], {b};"]),
    rmw!(I32, Xor, ["atom.global.xor.b32 {d}, [{a}], {b};"]),
    rmw!(I32, Xchg, ["atom.global.exch.b32 {d}, [{a}], {b};"]),
    rmw!(I32, Smin, ["atom.global.min.s32 {d}, [{a}], {b};"]),
    rmw!(I32, Smax, ["atom.global.max.s32 {d}, [{a}], {b};"]),
    rmw!(I32, Umin, ["atom.global.min.u32 {d}, [{a}], {b};"]),
    rmw!(I32, Umax, ["atom.global.max.u32 {d}, [{a}], {b};"]),
    rmw!(I64, Add, ["atom.global.add.u64 {d}, [{a}], {b};"]),
    rmw!(
        I64,
        Sub,
        [
            "neg.s64 {rd0}, {b};",
            "atom.global.add.u64 {d}, [{a}], {rd0};"
        ]
    ),
    rmw!(I64, And, ["atom.global.and.b64 {d}, [{a}], {b};"]),
    rmw!(I64, Or, ["atom.global.or.b64 {d}, [{a}], {b};"]),
    rmw!(I64, Xor, ["atom.global.xor.b64 {d}, [{a}], {b};"]),
    rmw!(I64, Xchg, ["atom.global.exch.b64 {d}, [{a}], {b};"]),
    ptx(
        Opcode::AtomicCas,
        I32,
        "atomic",
        &["atom.global.cas.b32 {d}, [{a}], {b}, {c};"],
    ),
    ptx(
        Opcode::AtomicCas,
        I64,
        "atomic",
        &["atom.global.cas.b64 {d}, [{a}], {b}, {c};"],
    ),
    ptx(
        Opcode::AtomicLoad,
        I32,
        "atomic",
        &["ld.relaxed.gpu.global.u32 {d}, [{a}];"],
    ),
    ptx(
        Opcode::AtomicLoad,
        I64,
        "atomic",
        &["ld.relaxed.gpu.global.u64 {d}, [{a}];"],
    ),
    ptx(
        Opcode::AtomicStore,
        I32,
        "atomic",
        &["st.relaxed.gpu.global.u32 [{b}], {a};"],
    ),
    ptx(
        Opcode::AtomicStore,
        I64,
        "atomic",
        &["st.relaxed.gpu.global.u64 [{b}], {a};"],
    ),
    ptx(Opcode::Fence, INVALID, "fence", &["fence.sc.gpu;"])
        .note("Wasm's atomics are sequentially consistent: a fence before and after each"),
];

const CONTROL: &[Row] = &[
    ptx(Opcode::Jump, INVALID, "", &["bra {dest};"])
        .note("block arguments are moved into the target's parameters first (parallel move: through scratch registers when they overlap)"),
    ptx(Opcode::Brif, I8, "branch", &["setp.ne.b32 {p0}, {a}, 0;", "@{p0} bra {then};", "bra {else};"])
        .note("an edge with block arguments goes through a stub that moves them, then branches"),
    ptx(Opcode::Brif, I32, "branch", &["setp.ne.b32 {p0}, {a}, 0;", "@{p0} bra {then};", "bra {else};"]),
    ptx(Opcode::Brif, I64, "branch", &["setp.ne.b64 {p0}, {a}, 0;", "@{p0} bra {then};", "bra {else};"]),
    ptx(
        Opcode::BrTable,
        INVALID,
        "jump_table",
        &[
            "setp.ge.u32 {p0}, {a}, {n};",
            "@{p0} bra {default};",
            "{table}: .branchtargets {targets};",
            "brx.idx {a}, {table};",
        ],
    )
    .note("out-of-range indices take the default first (brx.idx needs an index in range); an empty table is a plain bra {default}"),
    ptx(Opcode::Return, INVALID, "", &["ret;"]).note("kernels return nothing"),
    ptx(Opcode::Trap, INVALID, "", &["bra {trap};"])
        .note("the trap site's stub records the code and offset, then returns (never PTX trap)"),
    ptx(Opcode::Trapz, I8, "trap_if", &["setp.eq.b32 {p0}, {a}, 0;", "@{p0} bra {trap};"]),
    ptx(Opcode::Trapz, I32, "trap_if", &["setp.eq.b32 {p0}, {a}, 0;", "@{p0} bra {trap};"]),
    ptx(Opcode::Trapz, I64, "trap_if", &["setp.eq.b64 {p0}, {a}, 0;", "@{p0} bra {trap};"]),
    ptx(Opcode::Trapnz, I8, "trap_if", &["setp.ne.b32 {p0}, {a}, 0;", "@{p0} bra {trap};"]),
    ptx(Opcode::Trapnz, I32, "trap_if", &["setp.ne.b32 {p0}, {a}, 0;", "@{p0} bra {trap};"]),
    ptx(Opcode::Trapnz, I64, "trap_if", &["setp.ne.b64 {p0}, {a}, 0;", "@{p0} bra {trap};"]),
];

const CALLS: &str = "the translator inlines every callee; a call left in a kernel's CLIF \
                     means recursion, call_indirect or an import (docs/kernels.md); only the \
                     runtime check `clock` is called";
const SIMD: &str = "Wasm SIMD is refused by the detector; lanes would map to PTX vector \
                    registers or be scalarized";
const HOST: &str = "host-runtime machinery with no meaning in a kernel";

/// What the kernel path does not do: refusals, so the table shows the
/// boundary.
const BOUNDARY: &[Row] = &[
    // Calls.
    rejected(Opcode::Call, INVALID, CALLS),
    rejected(Opcode::CallIndirect, INVALID, CALLS),
    rejected(Opcode::ReturnCall, INVALID, CALLS),
    rejected(Opcode::ReturnCallIndirect, INVALID, CALLS),
    rejected(Opcode::TryCall, INVALID, CALLS),
    rejected(Opcode::TryCallIndirect, INVALID, CALLS),
    rejected(Opcode::FuncAddr, INVALID, CALLS),
    // Stack and runtime state.
    ptx(
        Opcode::StackAddr,
        I64,
        "stack_addr",
        &["cvta.local.u64 {d}, __stack;", "add.s64 {d}, {d}, {off};"],
    )
    .note(
        "the one slot is the thread's shadow-stack window, `.local .align 16 .b8 __stack[N]`; \
         its generic address, so generic ld/st reach it",
    ),
    rejected(
        Opcode::DynamicStackAddr,
        INVALID,
        "no stack slots: a kernel's state lives in registers and guest memory",
    ),
    rejected(Opcode::SymbolValue, INVALID, HOST),
    rejected(Opcode::TlsValue, INVALID, HOST),
    rejected(Opcode::GetPinnedReg, INVALID, HOST),
    rejected(Opcode::SetPinnedReg, INVALID, HOST),
    rejected(Opcode::GetFramePointer, INVALID, HOST),
    rejected(Opcode::GetStackPointer, INVALID, HOST),
    rejected(Opcode::GetReturnAddress, INVALID, HOST),
    rejected(Opcode::GetExceptionHandlerAddress, INVALID, HOST),
    rejected(Opcode::StackSwitch, INVALID, HOST),
    rejected(Opcode::Debugtrap, INVALID, "no debugger on the kernel path"),
    // Wide integers.
    rejected(
        Opcode::Iadd,
        I128,
        "no scalar Wasm source for i128; PTX has no 128-bit integer arithmetic",
    ),
    rejected(Opcode::Imul, I128, "no scalar Wasm source for i128"),
    rejected(
        Opcode::Iconcat,
        INVALID,
        "i128 halves: no scalar Wasm source",
    ),
    rejected(
        Opcode::Isplit,
        INVALID,
        "i128 halves: no scalar Wasm source",
    ),
    // Other float widths.
    deferred(
        Opcode::F16const,
        INVALID,
        "f16 is a Wasm proposal, not MVP; PTX has .f16",
    ),
    deferred(
        Opcode::Fadd,
        F16,
        "f16 is a Wasm proposal, not MVP; PTX has add.f16",
    ),
    rejected(
        Opcode::F128const,
        INVALID,
        "no Wasm source; PTX has no f128",
    ),
    rejected(Opcode::Fadd, F128, "no Wasm source; PTX has no f128"),
    // SIMD.
    deferred(Opcode::Iadd, I32X4, SIMD),
    deferred(Opcode::Fadd, F32X4, SIMD),
    deferred(Opcode::Load, I8X16, SIMD),
    deferred(Opcode::Store, I8X16, SIMD),
    deferred(Opcode::Vconst, INVALID, SIMD),
    deferred(Opcode::Splat, INVALID, SIMD),
    deferred(Opcode::Shuffle, INVALID, SIMD),
    deferred(Opcode::Swizzle, INVALID, SIMD),
    deferred(Opcode::Extractlane, INVALID, SIMD),
    deferred(Opcode::Insertlane, INVALID, SIMD),
    deferred(Opcode::Bitselect, INVALID, SIMD),
    // Scalar opcodes the translator does not emit for Wasm MVP.
    deferred(
        Opcode::UaddOverflowTrap,
        INVALID,
        "the translator emits explicit bounds checks (docs/kernels.md)",
    ),
    deferred(
        Opcode::SelectSpectreGuard,
        INVALID,
        "no Spectre mitigation on the kernel path; would be selp",
    ),
    deferred(
        Opcode::Ineg,
        INVALID,
        "not emitted for scalar Wasm; would be neg.s32/.s64",
    ),
    deferred(
        Opcode::Iabs,
        INVALID,
        "not emitted for scalar Wasm; would be abs.s32/.s64",
    ),
    deferred(
        Opcode::Smin,
        INVALID,
        "not emitted for scalar Wasm; would be min.s32/.s64",
    ),
    deferred(
        Opcode::Umin,
        INVALID,
        "not emitted for scalar Wasm; would be min.u32/.u64",
    ),
    deferred(
        Opcode::Smax,
        INVALID,
        "not emitted for scalar Wasm; would be max.s32/.s64",
    ),
    deferred(
        Opcode::Umax,
        INVALID,
        "not emitted for scalar Wasm; would be max.u32/.u64",
    ),
    deferred(
        Opcode::Umulhi,
        INVALID,
        "not emitted for scalar Wasm; would be mul.hi.u32/.u64",
    ),
    deferred(
        Opcode::Smulhi,
        INVALID,
        "not emitted for scalar Wasm; would be mul.hi.s32/.s64",
    ),
    deferred(
        Opcode::Bitrev,
        INVALID,
        "not emitted for scalar Wasm; would be brev",
    ),
    deferred(
        Opcode::Bswap,
        INVALID,
        "not emitted for scalar Wasm; would be prmt",
    ),
    deferred(Opcode::Cls, INVALID, "not emitted for scalar Wasm"),
    deferred(Opcode::Bmask, INVALID, "not emitted for scalar Wasm"),
    deferred(
        Opcode::UaddOverflow,
        INVALID,
        "not emitted for scalar Wasm; would be add.cc",
    ),
    deferred(Opcode::SaddOverflow, INVALID, "not emitted for scalar Wasm"),
    deferred(
        Opcode::UsubOverflow,
        INVALID,
        "not emitted for scalar Wasm; would be sub.cc",
    ),
    deferred(Opcode::SsubOverflow, INVALID, "not emitted for scalar Wasm"),
    deferred(Opcode::UmulOverflow, INVALID, "not emitted for scalar Wasm"),
    deferred(Opcode::SmulOverflow, INVALID, "not emitted for scalar Wasm"),
    deferred(Opcode::Nop, INVALID, "not emitted by the translator"),
];

/// Every section, in the docs page's order.
pub const SECTIONS: &[(&str, &[Row])] = &[
    ("Constants", CONSTANTS),
    ("Integer arithmetic, i32", INT_32),
    ("Integer arithmetic, i64", INT_64),
    ("Bitwise logic, i8", INT_8),
    ("Shifts and rotates", SHIFTS),
    ("Bit counts", BIT_COUNTS),
    ("Integer comparisons, i32", ICMP_32),
    ("Integer comparisons, i64", ICMP_64),
    ("Float comparisons, f32", FCMP_32),
    ("Float comparisons, f64", FCMP_64),
    ("Float arithmetic, f32", FLOAT_32),
    ("Float arithmetic, f64", FLOAT_64),
    ("Float min and max", FMIN_FMAX),
    ("Conversions", CONVERSIONS),
    ("Select", SELECT_I32),
    ("Select", SELECT_I64),
    ("Select", SELECT_F32),
    ("Select", SELECT_F64),
    ("Memory", MEMORY),
    ("Atomics", ATOMICS),
    ("Control flow and traps", CONTROL),
    ("Not supported", BOUNDARY),
];

/// Every row, section by section.
pub fn rows() -> impl Iterator<Item = &'static Row> {
    SECTIONS.iter().flat_map(|(_, rows)| rows.iter())
}

/// An instruction's key: what [`Row`]s match on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Key {
    /// Its opcode.
    pub opcode: Opcode,
    /// Its controlling type, or the type of its first result when it is
    /// not polymorphic ([`INVALID`]: none).
    pub ty: Type,
    /// The type of its free operand ([`free_operand`]).
    pub operand: Option<Type>,
    /// Its condition code (`icmp`, `fcmp`).
    pub cond: Option<Cond>,
}

impl Key {
    /// The key of `inst`.
    pub fn of(dfg: &DataFlowGraph, inst: Inst) -> Key {
        let data = &dfg.insts[inst];
        let opcode = data.opcode();
        let mut ty = dfg.ctrl_typevar(inst);
        if ty == INVALID
            && let Some(&first) = dfg.inst_results(inst).first()
        {
            ty = dfg.value_type(first);
        }
        let operand = free_operand(opcode)
            .and_then(|(index, _)| dfg.inst_args(inst).get(index).copied())
            .map(|v| dfg.value_type(v));
        let cond = match (data, data.cond_code(), data.fp_cond_code()) {
            (InstructionData::AtomicRmw { op, .. }, _, _) => Some(Cond::Rmw(*op)),
            (_, Some(cc), _) => Some(Cond::Int(cc)),
            (_, _, Some(cc)) => Some(Cond::Float(cc)),
            _ => None,
        };
        Key {
            opcode,
            ty,
            operand,
            cond,
        }
    }

    /// `opcode.type` (or `opcode` when it has no type), as errors name it.
    pub fn name(&self) -> String {
        if self.ty == INVALID {
            format!("{}", self.opcode)
        } else {
            format!("{}.{}", self.opcode, self.ty)
        }
    }
}

impl Row {
    /// Whether the row is for `key`.
    pub fn matches(&self, key: &Key) -> bool {
        self.opcode == key.opcode
            && (self.ty == INVALID || self.ty == key.ty)
            && (self.operand.is_none() || self.operand == key.operand)
            && (self.cond.is_none() || self.cond == key.cond)
    }
}

/// The first row for `opcode` with controlling type `ty`, whatever its
/// operand type or condition (a row for any type matches every `ty`).
pub fn lookup(opcode: Opcode, ty: Type) -> Option<&'static Row> {
    rows().find(|r| r.opcode == opcode && (r.ty == INVALID || r.ty == ty))
}

/// The row for one instruction, matched on its whole [`Key`]; for a call
/// of a runtime check, that check's rule ([`runtime_row`]).
pub fn row_for(func: &Function, inst: Inst) -> Option<&'static Row> {
    if let Some(check) = RuntimeCheck::called_by(func, inst) {
        return Some(runtime_row(check));
    }
    let key = Key::of(&func.dfg, inst);
    rows().find(|r| r.matches(&key))
}

/// [`row_for`] with the rows bucketed by opcode once, so a lookup scans
/// only its opcode's rows (the lowerer looks up every instruction three
/// times: the check, the NaN plan, the emitter).
pub struct RowIndex {
    buckets: Vec<Vec<&'static Row>>,
}

impl Default for RowIndex {
    fn default() -> Self {
        let mut buckets: Vec<Vec<&'static Row>> = Vec::new();
        for row in rows() {
            let i = row.opcode as usize;
            if buckets.len() <= i {
                buckets.resize_with(i + 1, Vec::new);
            }
            buckets[i].push(row);
        }
        RowIndex { buckets }
    }
}

impl RowIndex {
    /// The index of every row.
    pub fn new() -> Self {
        Self::default()
    }

    /// [`row_for`]: the same row.
    pub fn row_for(&self, func: &Function, inst: Inst) -> Option<&'static Row> {
        if let Some(check) = RuntimeCheck::called_by(func, inst) {
            return Some(runtime_row(check));
        }
        let key = Key::of(&func.dfg, inst);
        self.buckets
            .get(key.opcode as usize)?
            .iter()
            .copied()
            .find(|r| r.matches(&key))
    }
}

/// The detector's CLIF half: every instruction of `func` must have a row
/// with a PTX rule ([`row_for`]: a call only if it is a runtime check's),
/// and every memory access must be little endian (or of unstated
/// endianness: the GPU is little endian). The first that is not
/// refuses the kernel, named `opcode.type`, at its source location (the
/// Wasm byte offset).
pub fn check(func: &Function) -> Result<(), UnsupportedOp> {
    let index = RowIndex::new();
    for block in func.layout.blocks() {
        for inst in func.layout.block_insts(block) {
            let key = Key::of(&func.dfg, inst);
            let loc = func.srcloc(inst);
            let refuse = |reason: String| UnsupportedOp {
                op: key.name(),
                offset: if loc.is_default() {
                    0
                } else {
                    u64::from(loc.bits())
                },
                reason,
            };
            match index.row_for(func, inst).map(|r| r.status) {
                Some(Status::Ptx(_)) => {}
                Some(Status::Deferred(why)) => {
                    return Err(refuse(format!("not supported yet: {why}")));
                }
                Some(Status::Rejected(why)) => return Err(refuse(String::from(why))),
                None => {
                    return Err(refuse(String::from(
                        "no row in the op table (docs/op-table.md)",
                    )));
                }
            }
            let data = &func.dfg.insts[inst];
            if data.opcode().can_load() || data.opcode().can_store() {
                let big = data
                    .memflags_data(&func.dfg)
                    .and_then(|f| f.explicit_endianness())
                    == Some(Endianness::Big);
                if big {
                    return Err(refuse(String::from(
                        "big-endian memory access: Wasm memory is little endian",
                    )));
                }
            }
        }
    }
    Ok(())
}

/// How many rows of each status: (PTX, deferred, rejected).
pub fn counts() -> (usize, usize, usize) {
    rows().fold((0, 0, 0), |(p, d, r), row| match row.status {
        Status::Ptx(_) => (p + 1, d, r),
        Status::Deferred(_) => (p, d + 1, r),
        Status::Rejected(_) => (p, d, r + 1),
    })
}

/// The command that regenerates `docs/op-table.md`.
pub const BLESS_COMMAND: &str =
    "TENSORWASM_BLESS=1 cargo test -p tensorwasm-core --features lower --lib lower::table";

/// Renders `docs/op-table.md` from the table.
pub fn render_markdown() -> String {
    let mut out = String::new();
    let (p, d, r) = counts();
    let _ = write!(
        out,
        "<!-- Generated from core/src/lower/table.rs (cranelift-codegen 0.135.8) by\n     \
         {BLESS_COMMAND}\n     Do not edit by hand: a test fails when this file and the table differ. -->\n\n\
         # The op table: kernel CLIF to PTX\n\n\
         One row per (CLIF opcode, controlling type) a kernel's CLIF can hold \
         (`docs/kernels.md`): the PTX it becomes, or why the kernel is refused. \
         {} rows: {p} lowered to PTX, {d} deferred, {r} rejected. The detector \
         (`table::check`) refuses any instruction without a PTX row, naming it \
         `opcode.type` at its Wasm byte offset.\n\n\
         Placeholders: `{{d}}` is the result's register; `{{a}}`, `{{b}}`, `{{c}}` the \
         operands'; `{{imm}}` a constant (bit-exact hex); `{{off}}` a load or store's \
         offset; `{{r0}}`, `{{rd0}}`, `{{f0}}`, `{{fd0}}`, `{{p0}}` scratch registers \
         (`.b32`, `.b64`, `.f32`, `.f64`, `.pred`) and `{{L0}}` labels, local to one \
         instruction; `{{dest}}`, `{{then}}`, `{{else}}`, `{{default}}` branch targets \
         (a block, or a stub moving block arguments first); `{{trap}}` the trap site's \
         stub. `i8`, `i16` and `i32` live in `.b32` registers, narrow ones \
         zero-extended; `i64` in `.b64`; `f32`, `f64` in `.f32`, `.f64`. \
         Rules of more than three instructions are written out below the table. \
         A *canonical_nan* rule's last two lines (a NaN result made Wasm's canonical \
         NaN) are made only where a use can see the NaN's bits: they are left out \
         when every use is another canonical_nan rule, a comparison, a conversion to \
         an integer or a block argument, and moved (in place, before the use) when \
         the uses that see the bits are all outside the loop the result is made in; \
         a block parameter that may receive such a NaN is fixed before the uses that \
         see it (`core/src/lower/nan.rs`).\n",
        p + d + r
    );
    let mut long = String::new();
    let mut last = "";
    for (title, section) in SECTIONS {
        if *title != last {
            let _ = write!(
                out,
                "\n## {title}\n\n| opcode | type | PTX / status | notes |\n| --- | --- | --- | --- |\n"
            );
            last = title;
        }
        for row in section.iter() {
            let ty = type_cell(row);
            let (cell, note) = match row.status {
                Status::Ptx(rule) => {
                    let cell = rule_cell(row, &rule, &ty, &mut long);
                    (cell, String::from(row.note))
                }
                Status::Deferred(why) => (String::from("deferred"), String::from(why)),
                Status::Rejected(why) => (String::from("rejected"), String::from(why)),
            };
            let _ = writeln!(out, "| `{}` | {ty} | {cell} | {note} |", row.opcode);
        }
    }
    let _ = write!(
        out,
        "\n## Trap sites\n\nEach `trap`, `trapz` and `trapnz` branches to a stub of its own \
         (`{{status}}`: the status word's global address; `{{code}}`: the `KernelTrap` \
         code; `{{offset}}`: the instruction's Wasm byte offset). The first trapping \
         thread's code wins; every trapping thread returns (at once if a code is \
         already recorded: the threads of a grid that all trap do not each make an \
         atomic on one address). Never PTX `trap`, which would poison the CUDA \
         context.\n\n```ptx\n"
    );
    for line in TRAP_SITE {
        let _ = writeln!(out, "{line}");
    }
    let _ = write!(
        out,
        "```\n\n## Runtime checks\n\nThe only `call`s a kernel's CLIF may hold: the \
         launch's clock (`docs/kernels.md`, \"Time limit\") and the block's cooperative \
         operations (\"The GPU programming model\"), imported as \
         `UserExternalName {{ namespace: {}, index }}`, lowered inline (`{{a}}`, `{{b}}`: \
         the call's arguments; `{{d}}`: its result; a shuffle's or vote's last argument, \
         the call site's number, is for the CPU target only). Any other call is refused. \
         A kernel that calls a cooperative one declares \
         `.extern .shared .align 16 .b8 __shmem[]`.\n",
        RuntimeCheck::NAMESPACE
    );
    for check in RuntimeCheck::ALL {
        let row = runtime_row(check);
        let Status::Ptx(rule) = row.status else {
            continue;
        };
        let _ = write!(
            out,
            "\n### `{}` (index {}): {}\n\n```ptx\n",
            check.name(),
            check as u32,
            row.note
        );
        for line in rule.ptx {
            let _ = writeln!(out, "{line}");
        }
        out.push_str("```\n");
    }
    let _ = write!(out, "\n## Long rules\n{long}");
    out
}

fn type_cell(row: &Row) -> String {
    let mut ty = if row.ty != INVALID {
        format!("{}", row.ty)
    } else if row.opcode.constraints().is_polymorphic() {
        String::from("any")
    } else {
        String::from("—")
    };
    if let (Some(operand), Some((_, role))) = (row.operand, free_operand(row.opcode)) {
        let _ = write!(ty, ", {role} {operand}");
    }
    match row.cond {
        Some(Cond::Int(cc)) => {
            let _ = write!(ty, " `{cc}`");
        }
        Some(Cond::Float(cc)) => {
            let _ = write!(ty, " `{cc}`");
        }
        Some(Cond::Rmw(op)) => {
            let _ = write!(ty, " `{op}`");
        }
        None => {}
    }
    ty
}

fn rule_cell(row: &Row, rule: &Rule, ty: &str, long: &mut String) -> String {
    let anchor = |ptx: &[&str]| ptx.len() > 3;
    let mut cell = String::new();
    if !rule.name.is_empty() {
        let _ = write!(cell, "*{}*: ", rule.name);
    }
    let inline = |ptx: &[&str]| {
        ptx.iter()
            .map(|l| format!("`{l}`"))
            .collect::<alloc::vec::Vec<_>>()
            .join("<br>")
    };
    let section = |which: &str, ptx: &[&str], long: &mut String| {
        let _ = write!(
            long,
            "\n### `{}` {ty}{which}: {}\n\n```ptx\n",
            row.opcode, rule.name
        );
        for line in ptx {
            let _ = writeln!(long, "{line}");
        }
        long.push_str("```\n");
        String::from("see *Long rules*")
    };
    if anchor(rule.ptx) {
        cell.push_str(&section("", rule.ptx, long));
    } else {
        cell.push_str(&inline(rule.ptx));
    }
    if let Some(alt) = rule.alt {
        let _ = write!(cell, "<br>sm_{} and up: ", alt.min_sm);
        if anchor(alt.ptx) {
            let which = format!(", sm_{} and up", alt.min_sm);
            cell.push_str(&section(&which, alt.ptx, long));
        } else {
            cell.push_str(&inline(alt.ptx));
        }
    }
    cell
}

#[cfg(test)]
mod tests {
    extern crate std;

    use super::*;
    use alloc::vec::Vec;

    /// Placeholders a template may use, besides numbered scratch registers
    /// and labels.
    const NAMED: &[&str] = &[
        "d", "a", "b", "c", "imm", "off", "dest", "then", "else", "default", "n", "table",
        "targets", "trap", "status", "code", "offset",
    ];

    fn placeholders(line: &str) -> Vec<&str> {
        let mut found = Vec::new();
        let mut rest = line;
        while let Some(open) = rest.find('{') {
            let after = &rest[open + 1..];
            match after.find('}') {
                Some(close)
                    if after[..close]
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '_')
                        && close > 0 =>
                {
                    found.push(&after[..close]);
                    rest = &after[close + 1..];
                }
                _ => rest = after,
            }
        }
        found
    }

    fn known(name: &str) -> bool {
        if NAMED.contains(&name) {
            return true;
        }
        ["rd", "fd", "r", "f", "p", "L"].iter().any(|prefix| {
            name.strip_prefix(prefix)
                .is_some_and(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()))
        })
    }

    /// Every `canonical_nan` rule (each alternative too) ends with its
    /// type's fix-up, which the lowerer strips or moves (`nan.rs`).
    #[test]
    fn canonical_nan_rules_end_with_the_fixup() {
        let mut count = 0;
        for row in rows() {
            let Status::Ptx(rule) = row.status else {
                continue;
            };
            if rule.name != CANONICAL_NAN {
                continue;
            }
            let fixup = nan_fixup(row.ty).expect("a float result");
            for template in [Some(rule.ptx), rule.alt.map(|a| a.ptx)]
                .into_iter()
                .flatten()
            {
                assert!(template.ends_with(fixup), "{row:?}");
                assert!(template.len() > fixup.len(), "{row:?}");
            }
            count += 1;
        }
        assert!(count >= 20, "{count} canonical_nan rules");
    }

    #[test]
    fn templates_use_known_placeholders() {
        let mut all: Vec<&str> = TRAP_SITE.to_vec();
        for row in rows().chain(RUNTIME_ROWS.iter()) {
            if let Status::Ptx(rule) = row.status {
                assert!(!rule.ptx.is_empty(), "{:?} has an empty template", row);
                all.extend(rule.ptx);
                if let Some(alt) = rule.alt {
                    all.extend(alt.ptx);
                }
                if rule.ptx.len() > 1 {
                    assert!(
                        !rule.name.is_empty(),
                        "{row:?}: a multi-instruction rule needs a name"
                    );
                }
            }
        }
        for line in all {
            for p in placeholders(line) {
                assert!(known(p), "unknown placeholder {{{p}}} in `{line}`");
            }
        }
    }

    #[test]
    fn keys_are_unique_and_wildcards_stand_alone() {
        let rows: Vec<&Row> = rows().collect();
        for (i, a) in rows.iter().enumerate() {
            for b in &rows[i + 1..] {
                let same = a.opcode == b.opcode
                    && a.ty == b.ty
                    && a.operand == b.operand
                    && a.cond == b.cond;
                assert!(!same, "duplicate row {a:?}");
                if a.opcode == b.opcode {
                    assert!(
                        a.ty != INVALID && b.ty != INVALID,
                        "a row for any type shares {} with another row",
                        a.opcode
                    );
                    assert_eq!(a.operand.is_some(), b.operand.is_some(), "{a:?} / {b:?}");
                    assert_eq!(a.cond.is_some(), b.cond.is_some(), "{a:?} / {b:?}");
                }
            }
            // Rows of opcodes with a free operand name its type (PTX rows).
            if let (Status::Ptx(_), Some(_)) = (a.status, free_operand(a.opcode)) {
                assert!(a.operand.is_some(), "{a:?} should name its operand type");
            }
            if matches!(a.status, Status::Ptx(_)) && matches!(a.opcode, Opcode::Icmp | Opcode::Fcmp)
            {
                assert!(a.cond.is_some(), "{a:?} should name its condition");
            }
        }
    }

    #[test]
    fn an_alt_rule_applies_from_its_target_on() {
        let row = ptx(Opcode::Fadd, F32, "plain", &["add.rn.f32 {d}, {a}, {b};"])
            .alt(80, &["add.rn.ftz.f32 {d}, {a}, {b};"]);
        let Status::Ptx(rule) = row.status else {
            panic!("a PTX row")
        };
        assert_eq!(rule.template(75), rule.ptx);
        assert_eq!(rule.template(80), ["add.rn.ftz.f32 {d}, {a}, {b};"]);
        assert_eq!(rule.template(90), ["add.rn.ftz.f32 {d}, {a}, {b};"]);
    }

    #[test]
    fn no_sm80_templates_since_min_nan_is_not_wasm_nan() {
        // min.NaN / max.NaN give PTX's canonical NaN (0x7FFFFFFF), not
        // Wasm's: every target uses the setp.nan rule.
        let alts = rows()
            .filter(|r| matches!(r.status, Status::Ptx(Rule { alt: Some(_), .. })))
            .count();
        assert_eq!(alts, 0);
    }

    #[test]
    fn covers_the_scalar_mvp() {
        use Opcode::*;
        let needed = [
            Iconst,
            F32const,
            F64const,
            Iadd,
            Isub,
            Imul,
            Udiv,
            Sdiv,
            Urem,
            Srem,
            Band,
            Bor,
            Bxor,
            Bnot,
            Ishl,
            Ushr,
            Sshr,
            Rotl,
            Rotr,
            Clz,
            Ctz,
            Popcnt,
            Icmp,
            Fcmp,
            Uextend,
            Sextend,
            Ireduce,
            Fadd,
            Fsub,
            Fmul,
            Fdiv,
            Fmin,
            Fmax,
            Fneg,
            Fabs,
            Fcopysign,
            Sqrt,
            Ceil,
            Floor,
            Trunc,
            Nearest,
            Fpromote,
            Fdemote,
            FcvtToSint,
            FcvtToUint,
            FcvtToSintSat,
            FcvtToUintSat,
            FcvtFromSint,
            FcvtFromUint,
            Bitcast,
            Select,
            Load,
            Store,
            Uload8,
            Sload8,
            Uload16,
            Sload16,
            Uload32,
            Sload32,
            Istore8,
            Istore16,
            Istore32,
            Jump,
            Brif,
            BrTable,
            Return,
            Trap,
            Trapz,
            Trapnz,
        ];
        for op in needed {
            assert!(
                rows().any(|r| r.opcode == op && matches!(r.status, Status::Ptx(_))),
                "{op} has no PTX row"
            );
        }
        for cc in IntCC::all() {
            for ty in [I32, I64] {
                let key = Key {
                    opcode: Icmp,
                    ty,
                    operand: None,
                    cond: Some(Cond::Int(*cc)),
                };
                assert!(rows().any(|r| r.matches(&key)), "icmp {cc} {ty}");
            }
        }
        for cc in FloatCC::all() {
            for ty in [F32, F64] {
                let key = Key {
                    opcode: Fcmp,
                    ty,
                    operand: None,
                    cond: Some(Cond::Float(*cc)),
                };
                assert!(rows().any(|r| r.matches(&key)), "fcmp {cc} {ty}");
            }
        }
    }

    #[test]
    fn docs_page_is_current() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/op-table.md");
        let rendered = render_markdown();
        if std::env::var_os("TENSORWASM_BLESS").is_some() {
            std::fs::write(&path, &rendered).expect("write docs/op-table.md");
            return;
        }
        let on_disk = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            on_disk == rendered,
            "docs/op-table.md differs from the op table; regenerate it with\n    {BLESS_COMMAND}"
        );
    }
}
