//! The PTX lowerer: a kernel's CLIF (`docs/kernels.md`) to PTX text, one
//! `.visible .entry` per kernel. What each instruction becomes is the op
//! table's business (`table`, `docs/op-table.md`); this module owns only
//! the walk: registers, parameters, block arguments, branches and trap
//! sites. It touches no driver and does not load what it emits.
//!
//! # The kernel's shape
//!
//! - **Parameters.** `.param`s are the Wasm parameters (`NAME_p0`, ...,
//!   `.u32`/`.u64`/`.f32`/`.f64`) then `NAME_mem_base`, `NAME_mem_len`,
//!   `NAME_status`, `NAME_fuel`, `NAME_time_limit` (`.u64`), in that
//!   order. The twelve intrinsic parameters are not `.param`s: each reads
//!   its special register ([`Intrinsic::ptx_register`], `%tid.x`, ...).
//!   `mem_base` and `status` are converted to global addresses
//!   (`cvta.to.global`) once, so every access can be `ld.global` /
//!   `st.global`.
//! - **Registers.** One virtual register per CLIF value, named after it:
//!   `v7` is `%r7` (`i8`/`i16`/`i32`, `.b32`), `%rd7` (`i64`), `%f7` (`f32`)
//!   or `%fd7` (`f64`), so the PTX reads against the CLIF printed above each
//!   instruction as a comment. Rules' scratch registers are `%tr`, `%trd`,
//!   `%tf`, `%tfd`, `%tp` (predicates): ptxas allocates the real ones.
//! - **Blocks** are labels `BLOCKn`, in layout order. Block parameters are
//!   registers like any value; a branch assigns them. An unconditional
//!   `jump` moves its arguments in place, then branches; a conditional edge
//!   with arguments (`brif`, `br_table`) branches to a stub `EDGEi_k` that
//!   moves them and branches on. The moves are parallel: a source that is
//!   also a destination (`jump b(v2, v1)` into `b(v1, v2)`) is copied to a
//!   scratch register before any move writes, and its move reads the copy,
//!   so no move reads a register another already wrote.
//! - **`br_table`** bounds-checks the index against the table's length
//!   (out of range: the default) and then `brx.idx`es into a
//!   `.branchtargets` list (PTX ISA 6.0); an empty table is a `bra` to the
//!   default.
//! - **Traps.** Each `trap` / `trapz` / `trapnz` branches to a stub of its
//!   own (`TRAPk`, after the last block) that sets `%trapcode` and
//!   `%trapoffset` and branches to the kernel's one `TRAP` (sites with the
//!   same code and offset share a stub): a thread that reads a code
//!   already there returns at once; else `atom.global.cas.b32` puts the
//!   [`KernelTrap`] code into the status word if it was still 0; the thread
//!   whose CAS won writes the instruction's source location (the Wasm byte
//!   offset) as the `u64` at status + 8; then the thread returns. Never
//!   PTX `trap`, which would poison the context: other threads run on.
//! - **The shadow stack.** A kernel with a shadow-stack window (the
//!   translator's one stack slot, `docs/kernels.md`) declares it as
//!   `.local .align 16 .b8 __stack[N]`; `stack_addr` is its generic address
//!   (`cvta.local`). Such a kernel keeps `mem_base` generic, and picks each
//!   access's space by where its address comes from: a whole value at an
//!   aligned constant offset of the slot is `ld.local` / `st.local` of
//!   `__stack` (no alignment check); an address that is `mem_base` plus
//!   offsets only (the translator computes every host address just before
//!   its access, so block parameters and loaded values are offsets) is
//!   converted once (`cvta.to.global`) and used by the rule as written;
//!   any other (the window-or-memory `select`) is generic, the rule's
//!   `.global` dropped. The status word stays global.
//! - **Cold blocks** (the translator's rarely taken paths) are emitted
//!   after the others.
//! - **Shared memory.** A kernel that calls a cooperative runtime check
//!   declares `.extern .shared .align 16 .b8 __shmem[]` (sized by the
//!   launch). One that reads `shared_base` (the generic address of
//!   `__shmem`) keeps `mem_base` generic like a kernel with a stack slot,
//!   and an access whose address is that base plus offsets goes to shared
//!   memory: a whole value at the base plus an `i32` offset is one
//!   `ld.shared` / `st.shared` at the 32-bit address `__shmem + offset`
//!   (the translator checked alignment and bounds; ptxas folds the
//!   offset's constants into the access), any other access (atomics, their
//!   compare-and-swap loops) is converted once (`cvta.to.shared`) and is
//!   the rule with `.global.` made `.shared.`.
//! - **NaNs.** PTX's float arithmetic returns its own NaN (`0x7FFFFFFF`),
//!   not Wasm's canonical one, so the rules of the float arithmetic end by
//!   replacing a NaN result (`table::CANONICAL_NAN`: two instructions,
//!   `table::nan_fixup`). The lowerer makes that replacement only where a
//!   use can see the NaN's bits, and as few times as it can (`NanPlan`,
//!   `nan.rs`): a result whose uses are other such rules, comparisons,
//!   conversions to integers and block arguments loses it; so does one
//!   seen only outside the loop it is made in. Such a value, and a block
//!   parameter it may reach, is made canonical in place before each
//!   instruction that sees its bits (a store, a reinterpretation, a sign
//!   operation, `select`, a call). A loop's float accumulator is fixed
//!   once, where it is stored. The bits a Wasm program can see are
//!   unchanged.
//! - **Runtime checks.** The only `call`s lowered are the runtime checks
//!   ([`super::RuntimeCheck`]), inline, each by its rule in
//!   the table (`table::runtime_row`): the launch's clock (`mov.u64 %rd,
//!   %clock64;`, the SM's cycle counter; no memory), the shared base and
//!   size, barriers (`barrier.red.and.pred`), the virtual block's begin and
//!   end, lane ids, shuffles and votes. Any other call is refused.
//!
//! # The rules, and why they are right
//!
//! The table has the text of every rule; in short:
//!
//! - Integer arithmetic wraps (`add.s32`, `mul.lo`); division and
//!   remainder map to `div` / `rem` because the translator traps on a zero
//!   divisor and on `INT_MIN / -1` before them. `srem` selects 0 when the
//!   divisor is -1, since Wasm defines `INT_MIN % -1 = 0` without a trap.
//! - Shifts mask their amount (`and 31` / `and 63`): Wasm takes it modulo
//!   the width, PTX would clamp it. 32-bit rotates are funnel shifts of the
//!   value with itself (`shf.l.wrap`, whose `.wrap` takes the amount mod
//!   32); 64-bit rotates are `(a << n) | (a >> (-n & 63))`.
//! - `clz` is PTX `clz` (32 / 64 for 0, as Wasm), `ctz` is `clz` of the
//!   bit-reversed value (`brev`), `popcnt` is `popc`.
//! - Comparisons `setp` then `selp 1, 0`: `i8` results are 0 / 1 in a
//!   `.b32`. CLIF's unordered float conditions (`ne`, `ult`, ...) are PTX's
//!   `neu`, `ltu`, ...; PTX `ne` is CLIF's ordered `one`.
//! - Float arithmetic always names its rounding (`add.rn`, `mul.rn`,
//!   `div.rn`, `sqrt.rn`): ptxas never contracts an `.rn` add and multiply
//!   into an `fma`, and Wasm rounds every operation. No `.ftz`: subnormals
//!   are kept.
//! - `fneg`, `fabs`, `fcopysign` are bit operations on the sign bit, so NaN
//!   payloads pass through unchanged as Wasm requires.
//! - `fmin` / `fmax`: PTX `min` / `max` return the other input when one is
//!   NaN (IEEE minNum); Wasm wants NaN. The rule selects the canonical NaN
//!   when `setp.nan` says either input is NaN, and for equal inputs (which
//!   is how `-0` and `+0` compare) ORs (min) or ANDs (max) their bits, so
//!   `min(-0, +0) = -0` and `max(-0, +0) = +0`. On sm_80 and up `.f32` uses
//!   `min.NaN` / `max.NaN` (canonical NaN when either input is NaN), keeping
//!   only the signed-zero fix.
//! - `ceil`, `floor`, `trunc`, `nearest` are `cvt.rpi`, `cvt.rmi`,
//!   `cvt.rzi`, `cvt.rni` (round to integral; `rni` is ties-to-even).
//! - Float to integer: PTX `cvt.rzi` saturates to the integer's range and
//!   turns NaN into 0, which is exactly Wasm's `trunc_sat`; the trapping
//!   `trunc` gets the same instruction because the translator has already
//!   trapped on NaN and out-of-range inputs. Integer to float is `cvt.rn`;
//!   `fpromote` is the exact `cvt.f64.f32`, `fdemote` `cvt.rn.f32.f64`.
//! - Memory: the address `mem_base + ea` carries no alignment promise, and
//!   a misaligned `ld.global` faults. An access of N > 1 bytes checks
//!   `addr & (N - 1)`: aligned, one `ld.global` / `st.global`; otherwise N
//!   byte accesses assembled little endian with shifts (`mov.b64 {lo, hi}`
//!   packs or splits 64-bit values). Narrow loads zero- or sign-extend as
//!   their opcode says.

use alloc::collections::{BTreeMap, VecDeque};
use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use core::fmt::Write;

use cranelift_codegen::dominator_tree::DominatorTree;
use cranelift_codegen::flowgraph::ControlFlowGraph;
use cranelift_codegen::ir::types::{F32, F64, I8, I16, I32, I64};
use cranelift_codegen::ir::{
    Block, BlockCall, Function, Inst, InstructionData, Opcode, Type, Value,
};
use cranelift_codegen::loop_analysis::LoopAnalysis;

use super::nan::NanPlan;
use super::table::{self, Status, TRAP_SITE};
use super::{Intrinsic, KernelAbi, KernelTrap, LowerError, Lowerer, RuntimeCheck};

/// Lowers kernels to PTX text for one GPU generation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PtxLowerer {
    /// The compute capability to target, `(8, 0)` for `sm_80`.
    pub sm: (u32, u32),
    /// The PTX ISA version to declare (one the driver accepts), `(8, 0)`.
    pub isa: (u32, u32),
}

/// A version pair: a compute capability or a PTX ISA version.
type Version = (u32, u32);

/// The oldest PTX ISA version that knows each target.
const MIN_ISA: &[(Version, Version)] = &[
    ((7, 0), (6, 0)),
    ((7, 2), (6, 1)),
    ((7, 5), (6, 3)),
    ((8, 0), (7, 0)),
    ((8, 6), (7, 1)),
    ((8, 7), (7, 4)),
    ((8, 9), (7, 8)),
    ((9, 0), (7, 8)),
    ((10, 0), (8, 6)),
    ((10, 1), (8, 6)),
    ((10, 3), (8, 8)),
    ((12, 0), (8, 7)),
    ((12, 1), (8, 8)),
];

impl PtxLowerer {
    /// The oldest PTX ISA version that can target compute capability `sm`
    /// (`None`: a target this lowerer does not know).
    pub fn min_isa(sm: (u32, u32)) -> Option<(u32, u32)> {
        MIN_ISA.iter().find(|(s, _)| *s == sm).map(|&(_, isa)| isa)
    }

    /// The compute capability as `10 * major + minor` (80 for sm_80), as
    /// the op table's [`Alt`](table::Alt) rules name it.
    pub fn sm_number(&self) -> u32 {
        self.sm.0 * 10 + self.sm.1
    }

    fn check_target(&self) -> Result<(), LowerError> {
        let (major, minor) = self.sm;
        let Some(min) = Self::min_isa(self.sm) else {
            return Err(LowerError::Invalid(format!(
                "unknown PTX target sm_{major}{minor}: the PTX lowerer knows sm_70 to sm_121"
            )));
        };
        if self.isa < min {
            return Err(LowerError::Invalid(format!(
                "PTX ISA {}.{} cannot target sm_{major}{minor}; it needs {}.{} or later",
                self.isa.0, self.isa.1, min.0, min.1
            )));
        }
        Ok(())
    }
}

impl Lowerer for PtxLowerer {
    type Output = String;

    /// The PTX, with no comments but the header's (what the runtime loads:
    /// a third smaller and faster to make than [`PtxLowerer::lower_annotated`]).
    fn lower(&self, name: &str, kernel: &Function, abi: KernelAbi) -> Result<String, LowerError> {
        self.lower_with(name, kernel, abi, false)
    }
}

impl PtxLowerer {
    /// [`Lowerer::lower`]'s PTX with each CLIF instruction written as a
    /// comment above its PTX, for reading and debugging.
    pub fn lower_annotated(
        &self,
        name: &str,
        kernel: &Function,
        abi: KernelAbi,
    ) -> Result<String, LowerError> {
        self.lower_with(name, kernel, abi, true)
    }

    fn lower_with(
        &self,
        name: &str,
        kernel: &Function,
        abi: KernelAbi,
        annotate: bool,
    ) -> Result<String, LowerError> {
        self.check_target()?;
        check_name(name)?;
        check_signature(kernel, abi)?;
        table::check(kernel)?;
        let stack = stack_bytes(kernel)?;
        let mem_base = kernel
            .layout
            .entry_block()
            .and_then(|entry| {
                kernel
                    .dfg
                    .block_params(entry)
                    .get(abi.hidden(KernelAbi::MEM_BASE))
            })
            .copied();
        let nan = NanPlan::of(kernel);
        let calls = runtime_calls(kernel);
        let shared_base = calls.iter().any(|&(c, _)| c == RuntimeCheck::SharedBase);
        let mut emitter = Emitter {
            target: self,
            func: kernel,
            annotate,
            name,
            stack,
            root_memo: alloc::vec![None; kernel.dfg.num_values()],
            nan,
            generic: stack > 0 || shared_base,
            cooperative: calls.iter().any(|&(c, _)| c.is_cooperative()),
            shared_bases: calls
                .iter()
                .filter(|&&(c, _)| c == RuntimeCheck::SharedBase)
                .filter_map(|&(_, v)| v)
                .collect(),
            mem_base,
            body: String::new(),
            values: [0; 4],
            scratch: [0; 4],
            preds: 0,
            traps: Vec::new(),
            has_traps: false,
        };
        emitter.prologue(abi)?;
        // Cold blocks (the translator's rarely taken paths) go last, out of
        // the hot code's way; every block ends in a branch or `ret`, so
        // the order is free.
        let blocks = kernel.layout.blocks();
        let (hot, cold): (Vec<Block>, Vec<Block>) =
            blocks.partition(|&b| !kernel.layout.is_cold(b));
        let cfg = ControlFlowGraph::with_function(kernel);
        let domtree = DominatorTree::with_function(kernel, &cfg);
        let mut loops = LoopAnalysis::new();
        loops.compute(kernel, &cfg, &domtree);
        for block in hot.into_iter().chain(cold) {
            let _ = writeln!(emitter.body, "{}:", block_label(block));
            // Inside a loop of the kernel's own (the virtual-block loop is
            // the outermost), a pass's loads may all run ahead.
            let window = if loops.loop_level(block).level() >= 2 {
                usize::MAX
            } else {
                LOAD_WINDOW
            };
            for inst in schedule(kernel, block, window) {
                emitter.inst(inst)?;
            }
        }
        emitter.trap_sites()?;
        Ok(emitter.finish(abi))
    }
}

/// The kernel's runtime calls, each with its first result (the shared
/// base's value is what [`Emitter::roots`] recognises).
fn runtime_calls(func: &Function) -> Vec<(RuntimeCheck, Option<Value>)> {
    let mut calls = Vec::new();
    for block in func.layout.blocks() {
        for inst in func.layout.block_insts(block) {
            if let Some(check) = RuntimeCheck::called_by(func, inst) {
                calls.push((check, func.dfg.inst_results(inst).first().copied()));
            }
        }
    }
    calls
}

/// The order a block's instructions are emitted in: the CLIF order, except
/// that pure arithmetic (no memory access, no trap, no other effect) is
/// emitted just before its first use in the block (and the rest before the
/// block's terminator). A GPU warp stalls at the first instruction that
/// needs a pending load; sinking `x * alpha` below the next load lets both
/// loads be in flight at once (SAXPY). Outside the kernel's loops it
/// waits for at most `window` loads ([`LOAD_WINDOW`]), so that a long
/// block of loads run once per thread does not hold every loaded value at
/// once (registers, so occupancy); inside them the whole block's loads go
/// first (a pass of an unrolled chain, whose thread runs it many times:
/// a triangular solve's 32 loads). Only effect-free instructions move,
/// and never above an operand's definition, so the result and every trap
/// (with its order) are unchanged.
fn schedule(func: &Function, block: Block, window: usize) -> Vec<Inst> {
    let insts: Vec<Inst> = func.layout.block_insts(block).collect();
    let pure = |inst: Inst| {
        let op = func.dfg.insts[inst].opcode();
        !(op.is_terminator()
            || op.is_branch()
            || op.can_load()
            || op.can_store()
            || op.can_trap()
            || op.is_call()
            || op.other_side_effects()
            || func.dfg.inst_results(inst).is_empty())
    };
    let mut order = Vec::with_capacity(insts.len());
    let mut deferred: VecDeque<Inst> = VecDeque::new();
    // How many loads had been emitted when each deferred instruction was
    // deferred.
    let mut deferred_at: BTreeMap<Inst, usize> = BTreeMap::new();
    let mut loads = 0;
    for inst in insts {
        if pure(inst) {
            deferred.push_back(inst);
            deferred_at.insert(inst, loads);
            continue;
        }
        let op = func.dfg.insts[inst].opcode();
        if op.is_terminator() {
            // Everything still deferred may be used in other blocks.
            order.extend(deferred.drain(..));
        } else {
            release_operands(func, inst, &mut deferred, &mut order);
        }
        order.push(inst);
        if op.can_load() {
            loads += 1;
            // Arithmetic waits for at most `window` later loads: a
            // block of 64 gathered loads, each loaded value held until
            // the end, took 146 registers (ptxas kept the order), 63 so.
            while let Some(&oldest) = deferred.front() {
                if loads - deferred_at.get(&oldest).copied().unwrap_or(loads) < window {
                    break;
                }
                deferred.pop_front();
                release_operands(func, oldest, &mut deferred, &mut order);
                order.push(oldest);
            }
        }
    }
    order.extend(deferred.drain(..));
    order
}

/// The most loads [`schedule`] emits ahead of the arithmetic deferred
/// before them (16: what nvcc's unrolled loops keep in flight).
const LOAD_WINDOW: usize = 16;

/// Moves the deferred instructions that define `inst`'s operands (and,
/// first, those their own operands need) into `order`.
fn release_operands(
    func: &Function,
    inst: Inst,
    deferred: &mut VecDeque<Inst>,
    order: &mut Vec<Inst>,
) {
    for &arg in func.dfg.inst_args(inst) {
        let Some(def) = func.dfg.value_def(arg).inst() else {
            continue;
        };
        if let Some(at) = deferred.iter().position(|d| *d == def) {
            deferred.remove(at);
            release_operands(func, def, deferred, order);
            order.push(def);
        }
    }
}

/// PTX identifiers: a letter or `_`, then letters, digits, `_`.
fn check_name(name: &str) -> Result<(), LowerError> {
    let mut chars = name.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
    if first_ok && chars.all(|c| c.is_ascii_alphanumeric() || c == '_') {
        Ok(())
    } else {
        Err(LowerError::Invalid(format!(
            "`{name}` is not a PTX entry name (a letter or _, then letters, digits, _)"
        )))
    }
}

/// The bytes of the kernel's stack slot: none, or one sized explicit slot
/// (the translator's shadow-stack window), which becomes `.local __stack`.
fn stack_bytes(func: &Function) -> Result<u32, LowerError> {
    if !func.dynamic_stack_slots.is_empty() {
        return Err(LowerError::Invalid(String::from(
            "the kernel has a dynamic stack slot; PTX kernels have one sized slot at most",
        )));
    }
    let mut slots = func.sized_stack_slots.values();
    match (slots.next(), slots.next()) {
        (None, _) => Ok(0),
        (Some(slot), None) if slot.align_shift <= 4 => Ok(slot.size),
        _ => Err(LowerError::Invalid(String::from(
            "the kernel has more than one stack slot, or one aligned past 16 bytes; PTX \
             kernels have one (the shadow-stack window)",
        ))),
    }
}

/// The kernel's CLIF signature must be `docs/kernels.md`'s.
fn check_signature(func: &Function, abi: KernelAbi) -> Result<(), LowerError> {
    let params = &func.signature.params;
    if params.len() != abi.total_params() || !func.signature.returns.is_empty() {
        return Err(LowerError::Invalid(format!(
            "the kernel's signature has {} parameters and {} results; the kernel ABI wants {} \
             ({} Wasm + {} hidden) and none",
            params.len(),
            func.signature.returns.len(),
            abi.total_params(),
            abi.wasm_params,
            KernelAbi::HIDDEN_PARAMS
        )));
    }
    for (i, param) in params.iter().enumerate() {
        let ty = param.value_type;
        let want_ok = if i < abi.wasm_params {
            [I32, I64, F32, F64].contains(&ty)
        } else if i < abi.hidden(KernelAbi::INTRINSICS) {
            ty == I64
        } else {
            ty == I32
        };
        if !want_ok {
            return Err(LowerError::Invalid(format!(
                "kernel parameter {i} has type {ty}, which the kernel ABI does not allow there"
            )));
        }
    }
    let entry = func
        .layout
        .entry_block()
        .ok_or_else(|| LowerError::Invalid(String::from("the kernel has no blocks")))?;
    if func.dfg.block_params(entry).len() != params.len() {
        return Err(LowerError::Invalid(String::from(
            "the entry block's parameters do not match the signature",
        )));
    }
    Ok(())
}

fn block_label(block: Block) -> String {
    format!("BLOCK{}", block.as_u32())
}

/// The register files values live in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Class {
    B32,
    B64,
    F32,
    F64,
}

impl Class {
    const ALL: [Class; 4] = [Class::B32, Class::B64, Class::F32, Class::F64];

    fn of(ty: Type) -> Option<Class> {
        match ty {
            I8 | I16 | I32 => Some(Class::B32),
            I64 => Some(Class::B64),
            F32 => Some(Class::F32),
            F64 => Some(Class::F64),
            _ => None,
        }
    }

    fn index(self) -> usize {
        self as usize
    }

    /// Value registers: `%r7` is `v7`.
    fn value_prefix(self) -> &'static str {
        ["%r", "%rd", "%f", "%fd"][self.index()]
    }

    /// Scratch registers of rules and parallel moves.
    fn scratch_prefix(self) -> &'static str {
        ["%tr", "%trd", "%tf", "%tfd"][self.index()]
    }

    fn decl(self) -> &'static str {
        [".b32", ".b64", ".f32", ".f64"][self.index()]
    }

    fn mov(self) -> &'static str {
        ["mov.b32", "mov.b64", "mov.f32", "mov.f64"][self.index()]
    }

    fn param(self) -> &'static str {
        [".u32", ".u64", ".f32", ".f64"][self.index()]
    }
}

/// Where an address points ([`Emitter::roots`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Root {
    /// The guest's memory.
    Global,
    /// The block's shared memory.
    Shared,
    /// No address: an integer offset.
    Offset,
    /// Could be anywhere (generic).
    Unknown,
}

struct TrapSite {
    label: String,
    trap: KernelTrap,
    offset: u32,
}

struct Emitter<'a> {
    target: &'a PtxLowerer,
    func: &'a Function,
    /// Whether each instruction's CLIF goes above its PTX as a comment.
    annotate: bool,
    name: &'a str,
    /// Bytes of the kernel's stack slot (`.local __stack`), 0 without one.
    stack: u32,
    /// Whether `mem_base` stays a generic address and each access picks
    /// its space by where its address comes from (a stack slot or shared
    /// memory: see the module docs, "The shadow stack", "Shared memory").
    generic: bool,
    /// Whether the kernel calls a cooperative runtime check (it then
    /// declares `__shmem`).
    cooperative: bool,
    /// The values of its `shared_base` calls.
    shared_bases: Vec<Value>,
    /// Where NaN results are made canonical ([`NanPlan`]).
    nan: NanPlan,
    /// By value number: where it points, once worked out ([`Self::roots`]).
    root_memo: Vec<Option<Root>>,
    /// The `mem_base` parameter's value.
    mem_base: Option<Value>,
    body: String,
    /// Value registers to declare per class (highest value number + 1).
    values: [u32; 4],
    /// Scratch registers to declare per class.
    scratch: [u32; 4],
    /// Scratch predicates to declare.
    preds: u32,
    traps: Vec<TrapSite>,
    /// Whether the kernel has trap sites (and so the trap registers).
    has_traps: bool,
}

/// The scratch `.b64` register that holds a global access's address in a
/// kernel with a stack window (above every rule's own scratch registers).
const GLOBAL_ADDRESS: u32 = 15;

/// The scratch `.b32` register that holds a whole-value shared access's
/// 32-bit shared address (likewise above the rules' own).
const SHARED_ADDRESS: u32 = 15;

/// The hidden parameters' `.param` names, in [`KernelAbi`] order.
const HIDDEN: [&str; KernelAbi::INTRINSICS] = [
    "mem_base",
    "mem_len",
    "status",
    "fuel",
    "time_limit",
    "grid_x",
    "grid_y",
    "grid_z",
];

impl Emitter<'_> {
    fn reg(&mut self, value: Value) -> Result<String, LowerError> {
        let dfg = &self.func.dfg;
        let value = dfg.resolve_aliases(value);
        let ty = dfg.value_type(value);
        let class = Class::of(ty).ok_or_else(|| {
            LowerError::Invalid(format!(
                "{value} has type {ty}, which no PTX register holds"
            ))
        })?;
        let n = value.as_u32();
        let count = &mut self.values[class.index()];
        *count = (*count).max(n + 1);
        Ok(format!("{}{n}", class.value_prefix()))
    }

    fn scratch_reg(&mut self, class: Class, n: u32) -> String {
        let count = &mut self.scratch[class.index()];
        *count = (*count).max(n + 1);
        format!("{}{n}", class.scratch_prefix())
    }

    fn line(&mut self, line: &str) {
        let is_label = line
            .split_whitespace()
            .next()
            .is_some_and(|t| t.ends_with(':'));
        if is_label {
            let _ = writeln!(self.body, "{line}");
        } else {
            let _ = writeln!(self.body, "    {line}");
        }
    }

    /// Loads the parameters into the entry block's parameter registers.
    fn prologue(&mut self, abi: KernelAbi) -> Result<(), LowerError> {
        let func = self.func;
        let entry = func
            .layout
            .entry_block()
            .ok_or_else(|| LowerError::Invalid(String::from("the kernel has no blocks")))?;
        let params = func.dfg.block_params(entry);
        let name = self.name;
        for (i, &v) in params.iter().enumerate().take(abi.wasm_params) {
            let class = Class::of(func.dfg.value_type(v))
                .ok_or_else(|| LowerError::Invalid(format!("parameter {i} has no PTX type")))?;
            let reg = self.reg(v)?;
            let kind = class.param();
            self.line(&format!("ld.param{kind} {reg}, [{name}_p{i}];"));
        }
        for (k, hidden) in HIDDEN.iter().enumerate() {
            let reg = self.reg(params[abi.hidden(k)])?;
            if k == KernelAbi::STATUS {
                // The trap sites use %status; the CLIF value gets a copy.
                self.line(&format!("ld.param.u64 %status, [{name}_{hidden}];"));
                self.line("cvta.to.global.u64 %status, %status;");
                self.line(&format!("mov.b64 {reg}, %status;"));
            } else {
                self.line(&format!("ld.param.u64 {reg}, [{name}_{hidden}];"));
                if k == KernelAbi::MEM_BASE && !self.generic {
                    self.line(&format!("cvta.to.global.u64 {reg}, {reg};"));
                }
            }
        }
        for which in Intrinsic::ALL {
            let reg = self.reg(params[abi.intrinsic(which)])?;
            self.line(&format!("mov.u32 {reg}, {};", which.ptx_register()));
        }
        Ok(())
    }

    /// Moves `srcs` into `dsts` as if all at once (see the module docs).
    fn parallel_move(&mut self, dsts: &[Value], srcs: &[Value]) -> Result<Vec<String>, LowerError> {
        let mut moves = Vec::new();
        for (&d, &s) in dsts.iter().zip(srcs) {
            let class = Class::of(self.func.dfg.value_type(d)).ok_or_else(|| {
                LowerError::Invalid(format!("block parameter {d} has no PTX type"))
            })?;
            let (dr, sr) = (self.reg(d)?, self.reg(s)?);
            if dr != sr {
                moves.push((dr, sr, class));
            }
        }
        // A source that is also a destination is copied to a scratch
        // register before any move writes; every other source is never
        // written by these moves, so it can be read in place.
        let mut lines = Vec::new();
        let mut used = [0u32; 4];
        let mut saved: Vec<(String, String)> = Vec::new();
        for (_, s, class) in &moves {
            let clobbered = moves.iter().any(|(d, _, _)| d == s);
            if clobbered && !saved.iter().any(|(src, _)| src == s) {
                let t = self.scratch_reg(*class, used[class.index()]);
                used[class.index()] += 1;
                lines.push(format!("{} {t}, {s};", class.mov()));
                saved.push((s.clone(), t));
            }
        }
        for (d, s, class) in &moves {
            let from = saved.iter().find(|(src, _)| src == s).map_or(s, |(_, t)| t);
            lines.push(format!("{} {d}, {from};", class.mov()));
        }
        Ok(lines)
    }

    /// The moves an edge makes, and its target block.
    fn edge(&mut self, call: BlockCall) -> Result<(Block, Vec<String>), LowerError> {
        let dfg = &self.func.dfg;
        let block = call.block(&dfg.value_lists);
        let params = dfg.block_params(block).to_vec();
        let mut args = Vec::new();
        for arg in call.args(&dfg.value_lists) {
            args.push(arg.as_value().ok_or_else(|| {
                LowerError::Invalid(String::from(
                    "a block argument that is not a value (try_call)",
                ))
            })?);
        }
        if args.len() != params.len() {
            return Err(LowerError::Invalid(format!(
                "a branch passes {} arguments to {block}, which has {} parameters",
                args.len(),
                params.len()
            )));
        }
        let moves = self.parallel_move(&params, &args)?;
        Ok((block, moves))
    }

    /// A conditional edge's label: the block's, or a stub (appended to
    /// `stubs`) that moves the arguments first.
    fn edge_target(
        &mut self,
        call: BlockCall,
        stub: String,
        stubs: &mut Vec<String>,
    ) -> Result<String, LowerError> {
        let (block, moves) = self.edge(call)?;
        if moves.is_empty() {
            return Ok(block_label(block));
        }
        stubs.push(format!("{stub}:"));
        stubs.extend(moves);
        stubs.push(format!("bra {};", block_label(block)));
        Ok(stub)
    }

    fn inst(&mut self, inst: Inst) -> Result<(), LowerError> {
        let func = self.func;
        let dfg = &func.dfg;
        let key = table::Key::of(dfg, inst);
        let rule = match self.nan.rows.row_for(func, inst).map(|r| r.status) {
            Some(Status::Ptx(rule)) => rule,
            _ => {
                return Err(LowerError::Invalid(format!(
                    "{} has no PTX rule (table::check should have refused it)",
                    key.name()
                )));
            }
        };
        if self.annotate {
            let _ = writeln!(self.body, "    // {}", dfg.display_inst(inst));
        }
        for value in self.nan.fix_before(func, inst) {
            // A value that may hold PTX's NaN, seen here: made canonical
            // in place first (module docs, "NaNs").
            let fixup = table::nan_fixup(dfg.value_type(value)).ok_or_else(|| {
                LowerError::Invalid(format!("{value} is not a float but may hold a NaN"))
            })?;
            let slots = [("d", self.reg(value)?)];
            self.expand(fixup, &slots, &format!("N{}", inst.as_u32()))?;
        }
        let i = inst.as_u32();
        let mut slots: Vec<(&str, String)> = Vec::new();
        if let Some(&result) = dfg.inst_results(inst).first() {
            slots.push(("d", self.reg(result)?));
        }
        for (name, &arg) in ["a", "b", "c"].into_iter().zip(dfg.inst_args(inst)) {
            slots.push((name, self.reg(arg)?));
        }
        let mut stubs = Vec::new();
        match dfg.insts[inst] {
            InstructionData::UnaryImm { imm, .. } => {
                slots.push(("imm", int_literal(imm.bits(), key.ty)));
            }
            InstructionData::UnaryIeee32 { imm, .. } => {
                slots.push(("imm", format!("0f{:08X}", imm.bits())));
            }
            InstructionData::UnaryIeee64 { imm, .. } => {
                slots.push(("imm", format!("0d{:016X}", imm.bits())));
            }
            InstructionData::Load { offset, .. } | InstructionData::Store { offset, .. } => {
                slots.push(("off", i32::from(offset).to_string()));
            }
            InstructionData::StackAddr { offset, .. } => {
                // `stack_bytes` allowed one slot only: this is `__stack`.
                slots.push(("off", i32::from(offset).to_string()));
            }
            InstructionData::Jump { destination, .. } => {
                let (block, moves) = self.edge(destination)?;
                for line in moves {
                    self.line(&line);
                }
                slots.push(("dest", block_label(block)));
            }
            InstructionData::Brif { blocks, .. } => {
                for (k, (name, call)) in ["then", "else"].into_iter().zip(blocks).enumerate() {
                    let label = self.edge_target(call, format!("EDGE{i}_{k}"), &mut stubs)?;
                    slots.push((name, label));
                }
            }
            InstructionData::BranchTable { table, .. } => {
                let jt = &dfg.jump_tables[table];
                let default =
                    self.edge_target(jt.default_block(), format!("EDGE{i}_d"), &mut stubs)?;
                if jt.as_slice().is_empty() {
                    self.line(&format!("bra {default};"));
                    for line in stubs {
                        self.line(&line);
                    }
                    return Ok(());
                }
                let mut targets = Vec::new();
                for (k, &call) in jt.as_slice().iter().enumerate() {
                    targets.push(self.edge_target(call, format!("EDGE{i}_{k}"), &mut stubs)?);
                }
                slots.push(("default", default));
                slots.push(("n", jt.as_slice().len().to_string()));
                slots.push(("table", format!("TABLE{i}")));
                slots.push(("targets", targets.join(", ")));
            }
            InstructionData::Trap { code, .. } | InstructionData::CondTrap { code, .. } => {
                let loc = func.srcloc(inst);
                let offset = if loc.is_default() { 0 } else { loc.bits() };
                let trap = KernelTrap::from_trap_code(code).ok_or_else(|| {
                    LowerError::Invalid(format!(
                        "trap code {code} at offset {offset:#x} is not a KernelTrap (docs/kernels.md)"
                    ))
                })?;
                let label = format!("TRAP{}", self.traps.len());
                self.traps.push(TrapSite {
                    label: label.clone(),
                    trap,
                    offset,
                });
                slots.push(("trap", label));
            }
            _ => {}
        }
        let mut template = rule.template(self.target.sm_number());
        if rule.name == table::CANONICAL_NAN
            && let Some(&result) = dfg.inst_results(inst).first()
            && !self.nan.keeps_fixup(result)
            && let Some(fixup) = table::nan_fixup(dfg.value_type(result))
            && let Some(compute) = template.strip_suffix(fixup)
        {
            // No use can see this NaN's bits (module docs, "NaNs").
            template = compute;
        }
        let op = dfg.insts[inst].opcode();
        let address = match (op.can_load(), op.can_store(), dfg.inst_args(inst)) {
            (true, _, &[addr, ..]) => Some(("a", addr)),
            (_, true, &[_, addr, ..]) => Some(("b", addr)),
            // The float atomic's address is placed like an access's.
            (_, _, &[addr, _, _])
                if RuntimeCheck::called_by(func, inst) == Some(RuntimeCheck::AtomicAddF32) =>
            {
                Some(("a", addr))
            }
            _ => None,
        };
        // Only a generic kernel picks spaces by root (the others' addresses
        // are all global).
        let root = match address {
            Some((_, addr)) if self.generic => Some(self.roots(addr)),
            _ => None,
        };
        if let Some(line) = self.local_access(inst)? {
            // A whole value at a constant, aligned offset of the stack
            // slot: local memory, no alignment check.
            self.line(&line);
        } else if let (Some((_, addr)), Some(Root::Shared)) = (address, root)
            && let Some(offset) = self.shared_offset32(addr)
            && self.shared_access(inst, "")?.is_some()
        {
            // A whole value at the shared base plus a 32-bit offset (the
            // translator checked bounds and alignment): a 32-bit shared
            // address, `__shmem`'s plus the offset, so ptxas folds the
            // offset's constants into the access.
            let shared = self.scratch_reg(Class::B32, SHARED_ADDRESS);
            let offset = self.reg(offset)?;
            self.line(&format!("mov.u32 {shared}, __shmem;"));
            self.line(&format!("add.u32 {shared}, {shared}, {offset};"));
            if let Some(line) = self.shared_access(inst, &shared)? {
                self.line(&line);
            }
        } else if let (Some((slot, addr)), Some(Root::Shared)) = (address, root) {
            // Shared memory: the translator checked bounds and alignment.
            let shared = self.scratch_reg(Class::B64, GLOBAL_ADDRESS);
            let generic = self.reg(addr)?;
            self.line(&format!("cvta.to.shared.u64 {shared}, {generic};"));
            if let Some(line) = self.shared_access(inst, &shared)? {
                self.line(&line);
            } else {
                for (name, value) in &mut slots {
                    if *name == slot {
                        value.clone_from(&shared);
                    }
                }
                let spaced: Vec<String> = template
                    .iter()
                    .map(|line| line.replace(".global.", ".shared."))
                    .collect();
                let spaced: Vec<&str> = spaced.iter().map(String::as_str).collect();
                self.expand(&spaced, &slots, &format!("L{i}"))?;
            }
        } else if self.generic
            && let Some((slot, addr)) = address
            && root == Some(Root::Global)
        {
            // An address of the guest's memory only: a global access,
            // through the generic address converted once.
            let global = self.scratch_reg(Class::B64, GLOBAL_ADDRESS);
            let generic = self.reg(addr)?;
            self.line(&format!("cvta.to.global.u64 {global}, {generic};"));
            if let Some(line) = self.aligned_access(inst, &global)? {
                self.line(&line);
            } else {
                for (name, value) in &mut slots {
                    if *name == slot {
                        value.clone_from(&global);
                    }
                }
                self.expand(template, &slots, &format!("L{i}"))?;
            }
        } else if self.generic && address.is_some() {
            // An address may be the thread's stack window (local memory),
            // shared memory or the guest's memory: generic accesses reach
            // all three.
            let generic: Vec<String> = template
                .iter()
                .map(|line| line.replace(".global.", "."))
                .collect();
            let generic: Vec<&str> = generic.iter().map(String::as_str).collect();
            self.expand(&generic, &slots, &format!("L{i}"))?;
        } else if let Some((_, addr)) = address
            && !self.generic
            && let Some(line) = {
                let global = self.reg(addr)?;
                self.aligned_access(inst, &global)?
            }
        {
            // An access the translator proved aligned (flag `aligned`):
            // one `ld.global` / `st.global`, no alignment test.
            self.line(&line);
        } else {
            self.expand(template, &slots, &format!("L{i}"))?;
        }
        for line in stubs {
            self.line(&line);
        }
        Ok(())
    }

    /// A `load` or `store` of a whole `i32`/`i64`/`f32`/`f64` whose address
    /// is `stack_addr` at an offset its size divides (the slot is 16-byte
    /// aligned): one `ld.local` / `st.local` of `__stack`.
    fn local_access(&mut self, inst: Inst) -> Result<Option<String>, LowerError> {
        let dfg = &self.func.dfg;
        let (opcode, args) = (dfg.insts[inst].opcode(), dfg.inst_args(inst));
        let (value, addr, load) = match (opcode, args) {
            (Opcode::Load, &[addr]) => (dfg.first_result(inst), addr, true),
            (Opcode::Store, &[value, addr]) => (value, addr, false),
            _ => return Ok(None),
        };
        let (InstructionData::Load { offset, .. } | InstructionData::Store { offset, .. }) =
            dfg.insts[inst]
        else {
            return Ok(None);
        };
        let Some(def) = dfg.value_def(dfg.resolve_aliases(addr)).inst() else {
            return Ok(None);
        };
        let InstructionData::StackAddr {
            offset: slot_offset,
            ..
        } = dfg.insts[def]
        else {
            return Ok(None);
        };
        let ty = dfg.value_type(value);
        let at = i64::from(i32::from(slot_offset)) + i64::from(i32::from(offset));
        let kind = match ty {
            I32 => "u32",
            I64 => "u64",
            F32 => "f32",
            F64 => "f64",
            _ => return Ok(None),
        };
        let size = i64::from(ty.bytes());
        if at < 0 || at % size != 0 || at + size > i64::from(self.stack) {
            return Ok(None);
        }
        let reg = self.reg(value)?;
        Ok(Some(if load {
            format!("ld.local.{kind} {reg}, [__stack+{at}];")
        } else {
            format!("st.local.{kind} [__stack+{at}], {reg};")
        }))
    }

    /// A `load` or `store` of a whole `i32`/`i64`/`f32`/`f64` flagged
    /// `aligned` (the translator proved its address a multiple of its size:
    /// `docs/kernels.md`) at global address `global`: one `ld.global` /
    /// `st.global`. `None` for any other access.
    fn aligned_access(&mut self, inst: Inst, global: &str) -> Result<Option<String>, LowerError> {
        let dfg = &self.func.dfg;
        let aligned = dfg.insts[inst]
            .memflags_data(dfg)
            .is_some_and(|flags| flags.aligned());
        if !aligned {
            return Ok(None);
        }
        self.whole_access(inst, "global", global)
    }

    /// A plain `load` or `store` of a whole `i32`/`i64`/`f32`/`f64` at
    /// shared address `shared` (converted from the generic one): one
    /// `ld.shared` / `st.shared` (the translator trapped on misaligned
    /// shared offsets).
    fn shared_access(&mut self, inst: Inst, shared: &str) -> Result<Option<String>, LowerError> {
        self.whole_access(inst, "shared", shared)
    }

    /// `inst` as one `ld.{space}` / `st.{space}` at `address` plus its
    /// offset, if it is a plain `load` or `store` of a whole
    /// `i32`/`i64`/`f32`/`f64`.
    fn whole_access(
        &mut self,
        inst: Inst,
        space: &str,
        address: &str,
    ) -> Result<Option<String>, LowerError> {
        let dfg = &self.func.dfg;
        let (opcode, args) = (dfg.insts[inst].opcode(), dfg.inst_args(inst));
        let (value, load) = match (opcode, args) {
            (Opcode::Load, &[_]) => (dfg.first_result(inst), true),
            (Opcode::Store, &[value, _]) => (value, false),
            _ => return Ok(None),
        };
        let (InstructionData::Load { offset, .. } | InstructionData::Store { offset, .. }) =
            dfg.insts[inst]
        else {
            return Ok(None);
        };
        let kind = match dfg.value_type(value) {
            I32 => "u32",
            I64 => "u64",
            F32 => "f32",
            F64 => "f64",
            _ => return Ok(None),
        };
        let off = i32::from(offset);
        let reg = self.reg(value)?;
        Ok(Some(if load {
            format!("ld.{space}.{kind} {reg}, [{address}+{off}];")
        } else {
            format!("st.{space}.{kind} [{address}+{off}], {reg};")
        }))
    }

    /// The 32-bit offset `x` of an address `shared_base + uextend(x)` (in
    /// either order), as the translator computes every shared access's.
    fn shared_offset32(&self, addr: Value) -> Option<Value> {
        let dfg = &self.func.dfg;
        let def = dfg.value_def(dfg.resolve_aliases(addr)).inst()?;
        let (Opcode::Iadd, &[a, b]) = (dfg.insts[def].opcode(), dfg.inst_args(def)) else {
            return None;
        };
        let (a, b) = (dfg.resolve_aliases(a), dfg.resolve_aliases(b));
        let extended = if self.shared_bases.contains(&a) {
            b
        } else if self.shared_bases.contains(&b) {
            a
        } else {
            return None;
        };
        let ext = dfg.value_def(extended).inst()?;
        match (dfg.insts[ext].opcode(), dfg.inst_args(ext)) {
            (Opcode::Uextend, &[x]) if dfg.value_type(x) == I32 => Some(x),
            _ => None,
        }
    }

    /// Where an address points, by the values it is computed from:
    /// [`Root::Global`] for `mem_base` plus offsets (integers that hold no
    /// address), [`Root::Shared`] for a `shared_base` plus offsets,
    /// [`Root::Offset`] for an integer computed from no address,
    /// [`Root::Unknown`] for anything else (a `select`, `stack_addr`, two
    /// addresses added). Block parameters and loaded values are offsets:
    /// the translator computes each host address just before its access,
    /// and no Wasm value (locals, globals, memory) ever holds one. (A
    /// versioned loop's 64-bit pointers are block parameters that do: an
    /// access at one is taken for generic in a generic kernel, which is
    /// right for every space, and is global in the others.) Each
    /// value's root is worked out once (`root_memo`), by an explicit stack:
    /// a guest's `x = x + x` chains share operands, and a walk that did not
    /// remember them would take time exponential in the chain.
    fn roots(&mut self, value: Value) -> Root {
        let dfg = &self.func.dfg;
        let mut stack = alloc::vec![(dfg.resolve_aliases(value), false)];
        while let Some((v, operands_done)) = stack.pop() {
            let slot = v.as_u32() as usize;
            if self.root_memo.get(slot).copied().flatten().is_some() {
                continue;
            }
            let root = if Some(v) == self.mem_base {
                Some(Root::Global)
            } else if self.shared_bases.contains(&v) {
                Some(Root::Shared)
            } else {
                match dfg.value_def(v).inst() {
                    None => Some(Root::Offset),
                    Some(inst) => {
                        let opcode = dfg.insts[inst].opcode();
                        let args = dfg.inst_args(inst);
                        let leaf = matches!(opcode, Opcode::StackAddr | Opcode::Select)
                            || opcode.can_load()
                            || opcode == Opcode::Call
                            || (opcode == Opcode::Iadd && args.len() != 2);
                        if leaf || operands_done {
                            Some(self.combine_roots(opcode, args))
                        } else {
                            stack.push((v, true));
                            stack.extend(args.iter().map(|&a| (dfg.resolve_aliases(a), false)));
                            None
                        }
                    }
                }
            };
            if let (Some(root), Some(memo)) = (root, self.root_memo.get_mut(slot)) {
                *memo = Some(root);
            }
        }
        self.root_memo
            .get(dfg.resolve_aliases(value).as_u32() as usize)
            .copied()
            .flatten()
            .unwrap_or(Root::Unknown)
    }

    /// The root of an instruction's result from its operands' (already in
    /// `root_memo`).
    fn combine_roots(&self, opcode: Opcode, args: &[Value]) -> Root {
        let dfg = &self.func.dfg;
        let root = |a: Value| {
            self.root_memo
                .get(dfg.resolve_aliases(a).as_u32() as usize)
                .copied()
                .flatten()
                .unwrap_or(Root::Unknown)
        };
        match opcode {
            Opcode::StackAddr | Opcode::Select => Root::Unknown,
            Opcode::Iadd => match args {
                &[a, b] => match (root(a), root(b)) {
                    (Root::Offset, r) | (r, Root::Offset) => r,
                    _ => Root::Unknown,
                },
                _ => Root::Unknown,
            },
            op if op.can_load() => Root::Offset,
            // Calls' results (the clock, lane ids, votes) hold no address;
            // `shared_base`'s is matched before.
            Opcode::Call => Root::Offset,
            // Integer arithmetic on offsets: every operand an offset.
            _ if args.iter().all(|&a| root(a) == Root::Offset) => Root::Offset,
            _ => Root::Unknown,
        }
    }

    /// Each trap site's stub sets the trap's code and offset and branches
    /// to the one [`TRAP_SITE`] of the kernel; sites with the same trap at
    /// the same offset (a copy of the body for aligned arguments, a
    /// versioned loop) share a stub.
    fn trap_sites(&mut self) -> Result<(), LowerError> {
        let sites = core::mem::take(&mut self.traps);
        if sites.is_empty() {
            return Ok(());
        }
        let mut stubs: Vec<(KernelTrap, u32, &str)> = Vec::new();
        for site in &sites {
            if let Some((_, _, first)) = stubs
                .iter()
                .find(|(trap, offset, _)| *trap == site.trap && *offset == site.offset)
            {
                // Same code and offset: the first site's stub does.
                let _ = writeln!(self.body, "{}:", site.label);
                let _ = writeln!(self.body, "    bra {first};");
                continue;
            }
            stubs.push((site.trap, site.offset, &site.label));
            let _ = writeln!(self.body, "{}:", site.label);
            let _ = writeln!(
                self.body,
                "    // {} at offset {:#x}",
                site.trap, site.offset
            );
            let _ = writeln!(self.body, "    mov.b32 %trapcode, {};", site.trap.code());
            let _ = writeln!(self.body, "    mov.b64 %trapoffset, {};", site.offset);
            let _ = writeln!(self.body, "    bra TRAP;");
        }
        let _ = writeln!(self.body, "TRAP:");
        let slots = [
            ("status", String::from("%status")),
            ("code", String::from("%trapcode")),
            ("offset", String::from("%trapoffset")),
        ];
        self.expand(TRAP_SITE, &slots, "T")?;
        self.has_traps = true;
        Ok(())
    }

    /// Writes a template with its placeholders filled (see `table`).
    fn expand(
        &mut self,
        template: &[&str],
        slots: &[(&str, String)],
        scope: &str,
    ) -> Result<(), LowerError> {
        for line in template {
            let mut out = String::new();
            let mut rest = *line;
            while let Some(open) = rest.find('{') {
                out.push_str(&rest[..open]);
                let after = &rest[open + 1..];
                let name = after.find('}').map(|close| &after[..close]).filter(|n| {
                    !n.is_empty() && n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                });
                match name {
                    Some(name) => {
                        out.push_str(&self.fill(name, slots, scope)?);
                        rest = &after[name.len() + 1..];
                    }
                    None => {
                        out.push('{');
                        rest = after;
                    }
                }
            }
            out.push_str(rest);
            self.line(&out);
        }
        Ok(())
    }

    fn fill(
        &mut self,
        name: &str,
        slots: &[(&str, String)],
        scope: &str,
    ) -> Result<String, LowerError> {
        if let Some((_, value)) = slots.iter().find(|(slot, _)| *slot == name) {
            return Ok(value.clone());
        }
        let digits = name.find(|c: char| c.is_ascii_digit());
        let numbered = digits.and_then(|at| Some((&name[..at], name[at..].parse::<u32>().ok()?)));
        match numbered {
            Some(("r", n)) => Ok(self.scratch_reg(Class::B32, n)),
            Some(("rd", n)) => Ok(self.scratch_reg(Class::B64, n)),
            Some(("f", n)) => Ok(self.scratch_reg(Class::F32, n)),
            Some(("fd", n)) => Ok(self.scratch_reg(Class::F64, n)),
            Some(("p", n)) => {
                self.preds = self.preds.max(n + 1);
                Ok(format!("%tp{n}"))
            }
            Some(("L", n)) => Ok(format!("{scope}_{n}")),
            _ => Err(LowerError::Invalid(format!(
                "op table template placeholder {{{name}}} has nothing to fill it here"
            ))),
        }
    }

    fn finish(self, abi: KernelAbi) -> String {
        let name = self.name;
        let (major, minor) = self.target.sm;
        let (isa_major, isa_minor) = self.target.isa;
        let mut out = String::new();
        let _ = write!(
            out,
            "// Generated by tensorwasm-core's PtxLowerer (core/src/lower/ptx.rs) from the\n\
             // kernel's CLIF: docs/kernels.md is the contract, docs/op-table.md the rules.\n\
             // Parameters: the Wasm parameters, then mem_base, mem_len, status, fuel,\n\
             // time_limit.\n\n\
             .version {isa_major}.{isa_minor}\n\
             .target sm_{major}{minor}\n\
             .address_size 64\n\n"
        );
        if self.cooperative {
            // The block's dynamic shared memory, sized by the launch.
            out.push_str(".extern .shared .align 16 .b8 __shmem[];\n\n");
        }
        let _ = writeln!(out, ".visible .entry {name}(");
        let mut params = Vec::new();
        for (i, param) in self
            .func
            .signature
            .params
            .iter()
            .take(abi.wasm_params)
            .enumerate()
        {
            let kind = Class::of(param.value_type).map_or(".u64", Class::param);
            params.push(format!("    .param {kind} {name}_p{i}"));
        }
        for hidden in HIDDEN {
            params.push(format!("    .param .u64 {name}_{hidden}"));
        }
        let _ = write!(out, "{}\n)\n{{\n", params.join(",\n"));
        if self.stack > 0 {
            let _ = writeln!(out, "    .local .align 16 .b8 __stack[{}];", self.stack);
        }
        if self.preds > 0 {
            let _ = writeln!(out, "    .reg .pred  %tp<{}>;", self.preds);
        }
        for class in Class::ALL {
            let i = class.index();
            if self.values[i] > 0 {
                let _ = writeln!(
                    out,
                    "    .reg {}   {}<{}>;",
                    class.decl(),
                    class.value_prefix(),
                    self.values[i]
                );
            }
            if self.scratch[i] > 0 {
                let _ = writeln!(
                    out,
                    "    .reg {}   {}<{}>;",
                    class.decl(),
                    class.scratch_prefix(),
                    self.scratch[i]
                );
            }
        }
        out.push_str("    .reg .b64   %status;\n");
        if self.has_traps {
            out.push_str("    .reg .b32   %trapcode;\n    .reg .b64   %trapoffset;\n");
        }
        out.push('\n');
        out.push_str(&self.body);
        out.push_str("}\n");
        out
    }
}

/// An integer constant as PTX hex, its bits masked to the type's width.
fn int_literal(bits: i64, ty: Type) -> String {
    let bits = bits as u64;
    match ty.bits() {
        8 => format!("0x{:02X}", bits & 0xFF),
        16 => format!("0x{:04X}", bits & 0xFFFF),
        32 => format!("0x{:08X}", bits & 0xFFFF_FFFF),
        _ => format!("0x{bits:016X}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals_are_masked_hex() {
        assert_eq!(int_literal(-1, I32), "0xFFFFFFFF");
        assert_eq!(int_literal(-1, I64), "0xFFFFFFFFFFFFFFFF");
        assert_eq!(int_literal(42, I32), "0x0000002A");
    }

    #[test]
    fn targets_need_their_isa() {
        let ok = PtxLowerer {
            sm: (9, 0),
            isa: (7, 8),
        };
        assert!(ok.check_target().is_ok());
        let old = PtxLowerer {
            sm: (9, 0),
            isa: (7, 0),
        };
        assert!(matches!(old.check_target(), Err(LowerError::Invalid(_))));
        let unknown = PtxLowerer {
            sm: (6, 1),
            isa: (8, 0),
        };
        assert!(matches!(
            unknown.check_target(),
            Err(LowerError::Invalid(_))
        ));
    }

    #[test]
    fn names_are_ptx_identifiers() {
        assert!(check_name("vector_add").is_ok());
        assert!(check_name("_k2").is_ok());
        assert!(check_name("2k").is_err());
        assert!(check_name("a-b").is_err());
        assert!(check_name("").is_err());
    }
}
