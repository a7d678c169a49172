//! Loop versioning: an innermost loop that counts down from a run-time
//! count gets a second copy without its per-iteration checks, taken when
//! one test at the loop's entry shows that none of those checks could
//! fail. Every iteration of a translated loop tests its fuel, and every
//! guest access tests its bounds (and the PTX lowerer tests its
//! alignment); in a loop that walks arrays by a fixed stride all of that
//! is known before the first iteration.
//!
//! A loop qualifies when
//!
//! - it has no loop inside it, one entry edge (a `jump` to its header from
//!   outside) and one back edge: `brif c - 1, header(..), exit(..)`,
//!   passing `c - 1` as the header's *counter* `c` (how LLVM and
//!   hand-written Wasm count a loop down); every other branch of the loop
//!   stays in it (a trap may end it). So each pass through the header is
//!   followed by one pass through the back edge, and a loop entered with
//!   `c = k != 0` runs its header exactly `k` times;
//! - its fuel, if the header tests it, goes down by one a pass (the
//!   translator's `trapz fuel` then `fuel - 1`);
//! - it makes no warp collective (shuffle, ballot, vote): the entry test
//!   reads each thread's own values, so lanes of one warp may take
//!   different copies, and a collective must meet its warp at one site
//!   (barriers are the non-`.aligned` kind and may);
//! - its header tests fuel, or at least one guest access is at an
//!   *induction* address: `uextend(p [+ q]) [+ offset]`, `p` a header
//!   parameter the back edge passes as `p + s` (`i32`, wrapping), with `q`
//!   and the stride `s` loop-invariant (defined outside the loop, or
//!   computed in it from such values by arithmetic that cannot trap, which
//!   the entry test recomputes).
//!
//! At the entry the pass computes, from the entry's arguments, `k` (as
//! `u64`) and for each induction access its first address `A0 =
//! uextend(p0 + q) + offset` and stride `S = uextend(s)`; the loop takes
//! the copy when `k != 0`, `k <= 2^31`, the fuel is at least `k`, and for
//! every induction access `A0 + S * (k - 1) + bytes <= mem_len` (and, for
//! an access of `n > 1` bytes, `(A0 | S) % n == 0`). The last sum cannot
//! wrap (`S < 2^32`, `k - 1 < 2^31`, `A0 < 2^33`), and it bounds every
//! iteration's address: iteration `i` accesses `A0 + S * i` exactly as
//! long as no `i32` sum wrapped, and none does while that is below 2^32,
//! which `mem_len <= 2^32` ensures. So in the copy the induction accesses'
//! bounds tests and the fuel test are removed (the fuel still goes down by
//! one a pass: the fuel the loop leaves is unchanged) and their loads and
//! stores are flagged `aligned` (the memory's base is 16-byte aligned:
//! `docs/kernels.md`). When the test fails the original loop runs and traps
//! where it always did. The time check stays in both.
//!
//! Both loops leave through one new block that passes on the exit's
//! arguments and every value of the loop used after it, so the code after
//! the loop sees the same values whichever copy ran.

use alloc::collections::{BTreeMap, BTreeSet};
use alloc::vec::Vec;

use cranelift_codegen::cursor::{Cursor, FuncCursor};
use cranelift_codegen::entity::EntityRef;
use cranelift_codegen::flowgraph::ControlFlowGraph;
use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::types::{I8, I16, I32, I64};
use cranelift_codegen::ir::{
    Block, BlockArg, BlockCall, Function, Inst, InstBuilder, InstructionData, Opcode, Value,
    ValueDef,
};

use super::align::{compare_trap, constant, guest_access};
use super::copy::{Copied, copy_blocks, resolved};
use super::counted::{innermost_loops, minus_one};
use super::unroll::unroll;
use crate::lower::{KernelTrap, RuntimeCheck};

/// The most instructions a loop may have to be copied.
const MAX_LOOP_INSTS: usize = 2048;

/// The most loops one kernel has copied (each copy adds a loop).
const MAX_VERSIONED: usize = 32;

/// No loop is copied once the kernel has this many instructions: the
/// copies and their chains are lowered and compiled on every first
/// `kernel_get`, so a kernel of many small loops must not multiply.
const MAX_KERNEL_INSTS: usize = 16384;

/// The largest trip count the copy takes (keeps the entry test's sums
/// below 2^64).
const MAX_TRIPS: i64 = 1 << 31;

/// How deep an invariant's computation inside the loop may be to be
/// recomputed at the entry.
const MAX_DEPTH: usize = 6;

/// A loop that qualifies, and what its copy drops.
struct Candidate {
    header: Block,
    /// The loop's blocks, in layout order.
    blocks: Vec<Block>,
    /// The entry `jump`.
    entry: Inst,
    /// The back edge `brif`.
    latch: Inst,
    /// The header parameter that counts down.
    counter: usize,
    /// The header's fuel test and the fuel's parameter, if it has one.
    fuel_test: Option<(Inst, usize)>,
    tests: Vec<InductionTest>,
}

/// A bounds test of an access at an induction address.
struct InductionTest {
    /// The `trapnz`.
    test: Inst,
    /// The header parameter `p`, and its stride.
    param: usize,
    stride: Value,
    /// `q`, if the address is `p + q`.
    plus: Option<Value>,
    /// `ea = uextend(p [+ q]) + offset`; the test is `ea + bytes > len`.
    ea: Value,
    offset: i64,
    bytes: i64,
    len: Value,
    /// The loads and stores at `ea` of more than one byte, each with its
    /// size, to flag aligned in the copy.
    accesses: Vec<(Inst, i64)>,
}

/// Versions `func`'s qualifying loops (module docs) but those whose header
/// is in `skip`; how many. `mem_base` is the kernel's guest memory base
/// (accesses are at `mem_base + ea`).
pub(super) fn version_loops(func: &mut Function, mem_base: Value, skip: &[Block]) -> usize {
    // The innermost loops, found once: versioning one loop adds blocks
    // around it but changes no other loop's blocks (its entry and exit
    // edges are read again from a fresh control flow graph each time).
    let (_, innermost) = innermost_loops(func);
    let mut versioned = 0;
    for (header, blocks) in innermost {
        if versioned >= MAX_VERSIONED || instructions(func) >= MAX_KERNEL_INSTS {
            break;
        }
        if skip.contains(&header) {
            continue;
        }
        let cfg = ControlFlowGraph::with_function(func);
        let Some(candidate) = candidate(func, &cfg, header, blocks, mem_base) else {
            continue;
        };
        if version(func, &candidate, mem_base).is_some() {
            versioned += 1;
        }
    }
    versioned
}

/// How many instructions `func` has.
fn instructions(func: &Function) -> usize {
    func.layout
        .blocks()
        .map(|b| func.layout.block_insts(b).count())
        .sum()
}

/// The loop at `header` (its blocks: `blocks`) if it qualifies.
fn candidate(
    func: &Function,
    cfg: &ControlFlowGraph,
    header: Block,
    blocks: Vec<Block>,
    mem_base: Value,
) -> Option<Candidate> {
    let dfg = &func.dfg;
    let inside = |b: Block| blocks.contains(&b);
    let size: usize = blocks
        .iter()
        .map(|&b| func.layout.block_insts(b).count())
        .sum();
    if size > MAX_LOOP_INSTS {
        return None;
    }
    // One entry (a `jump`) and one back edge (a `brif` to the header,
    // else out of the loop).
    let (mut entry, mut latch) = (None, None);
    for pred in cfg.pred_iter(header) {
        let slot = if inside(pred.block) {
            &mut latch
        } else {
            &mut entry
        };
        if slot.replace(pred.inst).is_some() {
            return None;
        }
    }
    let (entry, latch) = (entry?, latch?);
    if !matches!(dfg.insts[entry], InstructionData::Jump { .. }) {
        return None;
    }
    let InstructionData::Brif {
        arg: condition,
        blocks: [taken, other],
        ..
    } = dfg.insts[latch]
    else {
        return None;
    };
    if taken.block(&dfg.value_lists) != header || inside(other.block(&dfg.value_lists)) {
        return None;
    }
    // No warp collective inside: threads of one warp may take different
    // copies (the entry test reads each thread's own values), and a
    // shuffle or vote must meet its warp at one call site.
    let collective = blocks
        .iter()
        .flat_map(|&b| func.layout.block_insts(b))
        .any(|inst| {
            RuntimeCheck::called_by(func, inst).is_some_and(|check| {
                matches!(
                    check,
                    RuntimeCheck::ShflIdx
                        | RuntimeCheck::ShflUp
                        | RuntimeCheck::ShflDown
                        | RuntimeCheck::ShflXor
                        | RuntimeCheck::Ballot
                        | RuntimeCheck::VoteAny
                        | RuntimeCheck::VoteAll
                )
            })
        });
    if collective {
        return None;
    }
    // No other way out: every branch stays inside, or traps.
    for &block in &blocks {
        let last = func.layout.last_inst(block)?;
        let data = &dfg.insts[last];
        match data.opcode() {
            Opcode::Jump | Opcode::Brif | Opcode::BrTable => {
                let stays = data
                    .branch_destination(&dfg.jump_tables, &dfg.exception_tables)
                    .iter()
                    .all(|call| inside(call.block(&dfg.value_lists)));
                if !stays && last != latch {
                    return None;
                }
            }
            Opcode::Trap => {}
            _ => return None,
        }
    }
    let params = dfg.block_params(header);
    let back: Vec<Value> = taken
        .args(&dfg.value_lists)
        .map(|a| a.as_value().map(|v| dfg.resolve_aliases(v)))
        .collect::<Option<_>>()?;
    let condition = dfg.resolve_aliases(condition);
    let counter = back.iter().position(|&a| a == condition)?;
    if minus_one(func, condition) != Some(params[counter]) {
        return None;
    }
    let fuel_test = fuel_test(func, header, &back)?;
    if fuel_test.is_some_and(|(_, fuel)| fuel == counter) {
        return None;
    }

    // The induction parameters: `p` passed back as `p + s`.
    let invariant = |v: Value| invariant(func, &blocks, v, 0);
    let stride = |param: usize| -> Option<Value> {
        let p = params[param];
        let (x, y) = binary(func, back[param], Opcode::Iadd)?;
        let s = if x == p {
            y
        } else if y == p {
            x
        } else {
            return None;
        };
        (dfg.value_type(p) == I32 && invariant(s)).then_some(s)
    };
    let mut tests = Vec::new();
    for &block in &blocks {
        for inst in func.layout.block_insts(block) {
            let Some(test) = induction_test(func, inst, params, &invariant, &stride) else {
                continue;
            };
            tests.push(InductionTest {
                accesses: accesses_at(func, &blocks, mem_base, test.ea),
                ..test
            });
        }
    }
    // Nothing to drop: no copy.
    if tests.is_empty() && fuel_test.is_none() {
        return None;
    }
    Some(Candidate {
        header,
        blocks,
        entry,
        latch,
        counter,
        fuel_test,
        tests,
    })
}

/// The header's fuel test and the fuel's parameter: `Some(None)` when the
/// header tests no fuel, `None` when it does but the back edge does not
/// pass `fuel - 1` (the loop does not qualify).
fn fuel_test(func: &Function, header: Block, back: &[Value]) -> Option<Option<(Inst, usize)>> {
    let dfg = &func.dfg;
    let params = dfg.block_params(header);
    for inst in func.layout.block_insts(header) {
        if let InstructionData::CondTrap {
            opcode: Opcode::Trapz,
            arg,
            code,
        } = dfg.insts[inst]
            && KernelTrap::from_trap_code(code) == Some(KernelTrap::OutOfFuel)
        {
            let fuel = params.iter().position(|&p| p == dfg.resolve_aliases(arg))?;
            return (minus_one(func, back[fuel]) == Some(params[fuel]))
                .then_some(Some((inst, fuel)));
        }
    }
    Some(None)
}

/// `inst` as a bounds test of an access at an induction address, its
/// accesses not yet found.
fn induction_test(
    func: &Function,
    inst: Inst,
    params: &[Value],
    invariant: &impl Fn(Value) -> bool,
    stride: &impl Fn(usize) -> Option<Value>,
) -> Option<InductionTest> {
    let dfg = &func.dfg;
    let (IntCC::UnsignedGreaterThan, end, len) =
        compare_trap(func, inst, KernelTrap::HeapOutOfBounds)?
    else {
        return None;
    };
    if !invariant(len) {
        return None;
    }
    let (ea, bytes) = plus_constant(func, end)?;
    let (extended, offset) = match plus_constant(func, ea) {
        Some((x, k)) => (x, k),
        None => (ea, 0),
    };
    let def = dfg.value_def(extended).inst()?;
    let InstructionData::Unary {
        opcode: Opcode::Uextend,
        arg,
    } = dfg.insts[def]
    else {
        return None;
    };
    let address = dfg.resolve_aliases(arg);
    if dfg.value_type(address) != I32 || !(0..1 << 32).contains(&offset) || bytes <= 0 {
        return None;
    }
    let as_param = |v: Value| params.iter().position(|&p| p == v);
    let (param, plus) = match as_param(address) {
        Some(param) => (param, None),
        None => {
            let (x, y) = binary(func, address, Opcode::Iadd)?;
            match (as_param(x), as_param(y)) {
                (Some(param), _) if invariant(y) => (param, Some(y)),
                (_, Some(param)) if invariant(x) => (param, Some(x)),
                _ => return None,
            }
        }
    };
    Some(InductionTest {
        test: inst,
        param,
        stride: stride(param)?,
        plus,
        ea,
        offset,
        bytes,
        len,
        accesses: Vec::new(),
    })
}

/// The loads and stores of the loop at `mem_base + ea`, of more than one
/// byte, with their sizes.
fn accesses_at(func: &Function, blocks: &[Block], mem_base: Value, ea: Value) -> Vec<(Inst, i64)> {
    blocks
        .iter()
        .flat_map(|&block| func.layout.block_insts(block))
        .filter_map(|inst| match guest_access(func, inst, mem_base) {
            Some((at, bytes)) if at == ea => Some((inst, i64::from(bytes))),
            _ => None,
        })
        .collect()
}

/// `(x, k)` when `v` is `x + k`, `k` a constant.
fn plus_constant(func: &Function, v: Value) -> Option<(Value, i64)> {
    let dfg = &func.dfg;
    match dfg.insts[dfg.value_def(dfg.resolve_aliases(v)).inst()?] {
        InstructionData::Binary {
            opcode: Opcode::Iadd,
            args: [x, y],
        } => match (constant(func, x), constant(func, y)) {
            (_, Some(k)) => Some((dfg.resolve_aliases(x), k)),
            (Some(k), None) => Some((dfg.resolve_aliases(y), k)),
            (None, None) => None,
        },
        _ => None,
    }
}

/// The operands of `v` when an `opcode` instruction defines it.
fn binary(func: &Function, v: Value, opcode: Opcode) -> Option<(Value, Value)> {
    let dfg = &func.dfg;
    match dfg.insts[dfg.value_def(dfg.resolve_aliases(v)).inst()?] {
        InstructionData::Binary {
            opcode: o,
            args: [x, y],
        } if o == opcode => Some((dfg.resolve_aliases(x), dfg.resolve_aliases(y))),
        _ => None,
    }
}

/// Whether `v` is the same on every pass through the loop and can be
/// computed before it: defined outside `blocks`, or by [`pure`] arithmetic
/// of such values.
fn invariant(func: &Function, blocks: &[Block], v: Value, depth: usize) -> bool {
    let dfg = &func.dfg;
    let v = dfg.resolve_aliases(v);
    match dfg.value_def(v) {
        ValueDef::Param(block, _) => !blocks.contains(&block),
        ValueDef::Result(inst, _) => {
            let Some(block) = func.layout.inst_block(inst) else {
                return false;
            };
            !blocks.contains(&block)
                || (depth < MAX_DEPTH
                    && pure(dfg.insts[inst].opcode())
                    && dfg
                        .inst_args(inst)
                        .iter()
                        .all(|&a| invariant(func, blocks, a, depth + 1)))
        }
        ValueDef::Union(..) => false,
    }
}

/// Integer arithmetic that cannot trap and has no effect: what the entry
/// test may recompute, and what the copy's unused results may drop.
fn pure(opcode: Opcode) -> bool {
    matches!(
        opcode,
        Opcode::Iconst
            | Opcode::Iadd
            | Opcode::Isub
            | Opcode::Imul
            | Opcode::Ishl
            | Opcode::Ushr
            | Opcode::Sshr
            | Opcode::Band
            | Opcode::Bor
            | Opcode::Bxor
            | Opcode::Bnot
            | Opcode::Uextend
            | Opcode::Sextend
            | Opcode::Ireduce
            | Opcode::Icmp
            | Opcode::Select
    )
}

/// `v` at the cursor: itself when it is defined outside `blocks`, else a
/// copy of its computation (`invariant` said there is one).
fn hoist(
    pos: &mut FuncCursor,
    blocks: &[Block],
    v: Value,
    memo: &mut BTreeMap<Value, Value>,
) -> Value {
    let v = pos.func.dfg.resolve_aliases(v);
    if let Some(&done) = memo.get(&v) {
        return done;
    }
    let ValueDef::Result(inst, _) = pos.func.dfg.value_def(v) else {
        return v;
    };
    if pos
        .func
        .layout
        .inst_block(inst)
        .is_none_or(|b| !blocks.contains(&b))
    {
        return v;
    }
    let args: Vec<Value> = pos.func.dfg.inst_args(inst).to_vec();
    let args: Vec<Value> = args
        .into_iter()
        .map(|a| hoist(pos, blocks, a, memo))
        .collect();
    let copy = pos.func.dfg.clone_inst(inst);
    pos.func.dfg.overwrite_inst_values(copy, args.into_iter());
    pos.insert_inst(copy);
    let result = pos.func.dfg.first_result(copy);
    memo.insert(v, result);
    result
}

/// Makes the copy of `c`'s loop and the entry test that picks it; the
/// copy's header, or `None` if the loop's exit could not be routed.
fn version(func: &mut Function, c: &Candidate, mem_base: Value) -> Option<Block> {
    let InstructionData::Brif {
        blocks: [_, exit], ..
    } = func.dfg.insts[c.latch]
    else {
        return None;
    };
    let exit_block = exit.block(&func.dfg.value_lists);
    let exit_args: Vec<Value> = exit
        .args(&func.dfg.value_lists)
        .map(|a| a.as_value().map(|v| func.dfg.resolve_aliases(v)))
        .collect::<Option<_>>()?;
    let outs = live_outs(func, &c.blocks);
    let copy = copy_blocks(func, &c.blocks, BTreeMap::new());
    let copy_header = copy.blocks[c.blocks.iter().position(|&b| b == c.header)?];

    // One way out for both loops: `join(exit args.., live-outs..)`, which
    // goes on to the exit.
    let join = func.dfg.make_block();
    let leaving: Vec<Value> = exit_args.iter().chain(&outs).copied().collect();
    let join_params: Vec<Value> = leaving
        .iter()
        .map(|&v| {
            let ty = func.dfg.value_type(v);
            func.dfg.append_block_param(join, ty)
        })
        .collect();
    func.layout.append_block(join);
    let to_exit: Vec<BlockArg> = join_params[..exit_args.len()]
        .iter()
        .map(|&v| v.into())
        .collect();
    FuncCursor::new(func)
        .at_bottom(join)
        .ins()
        .jump(exit_block, &to_exit);
    for (latch, values) in [
        (c.latch, leaving.clone()),
        (
            copy.insts[&c.latch],
            leaving.iter().map(|&v| copy.value(v)).collect(),
        ),
    ] {
        let dfg = &mut func.dfg;
        let args: Vec<BlockArg> = values.into_iter().map(BlockArg::from).collect();
        let call = BlockCall::new(join, args, &mut dfg.value_lists);
        if let InstructionData::Brif { blocks, .. } = &mut dfg.insts[latch] {
            blocks[1] = call;
        }
    }

    // Code after the loops reads the join's parameters.
    let renamed: BTreeMap<Value, Value> = outs
        .iter()
        .copied()
        .zip(join_params[exit_args.len()..].iter().copied())
        .collect();
    let inside: BTreeSet<Block> = c
        .blocks
        .iter()
        .chain(&copy.blocks)
        .copied()
        .chain([join])
        .collect();
    rename(func, &inside, &renamed);

    // The copy drops the checks the entry test makes.
    if let Some((test, _)) = c.fuel_test {
        func.layout.remove_inst(copy.insts[&test]);
    }
    for t in &c.tests {
        func.layout.remove_inst(copy.insts[&t.test]);
        for &(access, _) in &t.accesses {
            set_trusted(func, copy.insts[&access]);
        }
    }
    let pointers = host_pointers(func, c, &copy);
    drop_unused(func, &copy.blocks);
    let enter = unroll(
        func,
        &copy.blocks,
        copy_header,
        copy.insts[&c.latch],
        c.counter,
    )
    .unwrap_or(copy_header);
    entry_test(func, c, enter, &pointers, mem_base);
    Some(copy_header)
}

/// Gives the copy a 64-bit host pointer per induction parameter `p` that
/// some access uses directly (at `uextend(p) + offset`): a new header
/// parameter `P`, `mem_base + uextend(p)` on entry and `P + uextend(s)` on
/// the back edge, and those accesses at `P + offset`. In the copy no `i32`
/// address wraps (the entry test), so `P` is `mem_base + uextend(p)` on
/// every pass that accesses memory, and the offsets fold into the
/// accesses (`ld.global [P+8]`) where each address was a 32-bit add, a
/// widening and a 64-bit add. Returns the parameters given one, in the
/// order of the new header parameters.
fn host_pointers(func: &mut Function, c: &Candidate, copy: &Copied) -> Vec<usize> {
    let mut params: Vec<usize> = c
        .tests
        .iter()
        .filter(|t| t.plus.is_none())
        .map(|t| t.param)
        .collect();
    params.sort_unstable();
    params.dedup();
    let header = copy.blocks[c.blocks.iter().position(|&b| b == c.header).unwrap_or(0)];
    let latch = copy.insts[&c.latch];
    for &param in &params {
        let pointer = func.dfg.append_block_param(header, I64);
        // The back edge passes `P + uextend(s)`.
        let stride = c
            .tests
            .iter()
            .find(|t| t.param == param)
            .map(|t| copy.value(t.stride));
        let Some(stride) = stride else { continue };
        let mut pos = FuncCursor::new(func).at_inst(latch);
        let wide = pos.ins().uextend(I64, stride);
        let next = pos.ins().iadd(pointer, wide);
        let dfg = &mut func.dfg;
        if let InstructionData::Brif { blocks, .. } = &mut dfg.insts[latch] {
            blocks[0].append_argument(next, &mut dfg.value_lists);
        }
        // Each access at `uextend(p) + offset`: at `P + offset`.
        for t in c
            .tests
            .iter()
            .filter(|t| t.param == param && t.plus.is_none())
        {
            for &(access, _) in &t.accesses {
                let access = copy.insts[&access];
                let mut pos = FuncCursor::new(func).at_inst(access);
                let address = pos.ins().iadd_imm_u(pointer, t.offset);
                let dfg = &mut pos.func.dfg;
                let at = usize::from(dfg.insts[access].opcode().can_store());
                dfg.inst_args_mut(access)[at] = address;
            }
        }
    }
    params
}

/// Replaces, in every block but `skip`, each use of a key of `renamed`
/// (or of an alias of one) by its value.
fn rename(func: &mut Function, skip: &BTreeSet<Block>, renamed: &BTreeMap<Value, Value>) {
    let resolved = resolved(func);
    let blocks: Vec<Block> = func.layout.blocks().filter(|b| !skip.contains(b)).collect();
    for block in blocks {
        let insts: Vec<Inst> = func.layout.block_insts(block).collect();
        for inst in insts {
            func.dfg.map_inst_values(inst, |v| {
                renamed.get(&resolved[v.index()]).copied().unwrap_or(v)
            });
        }
    }
}

/// Removes, from `blocks`, [`pure`] instructions whose results nothing
/// uses (the copy's dropped tests leave their comparisons behind; so do
/// merged and narrowed bounds tests). Linear in the function's size.
pub(super) fn drop_unused(func: &mut Function, blocks: &[Block]) {
    let resolved = resolved(func);
    let mut uses = alloc::vec![0usize; resolved.len()];
    for block in func.layout.blocks() {
        for inst in func.layout.block_insts(block) {
            for v in func.dfg.inst_values(inst) {
                uses[resolved[v.index()].index()] += 1;
            }
        }
    }
    // Instructions of `blocks` (then: removed), by index.
    let mut inside = alloc::vec![false; func.dfg.num_insts()];
    let mut removed = alloc::vec![false; func.dfg.num_insts()];
    for &b in blocks {
        for inst in func.layout.block_insts(b) {
            inside[inst.index()] = true;
        }
    }
    let dead = |func: &Function, uses: &[usize], inst: Inst| {
        pure(func.dfg.insts[inst].opcode())
            && func
                .dfg
                .inst_results(inst)
                .iter()
                .all(|r| uses[r.index()] == 0)
    };
    let mut work: Vec<Inst> = blocks
        .iter()
        .flat_map(|&b| func.layout.block_insts(b))
        .filter(|&i| dead(func, &uses, i))
        .collect();
    while let Some(inst) = work.pop() {
        if removed[inst.index()] {
            continue;
        }
        removed[inst.index()] = true;
        let args: Vec<Value> = func
            .dfg
            .inst_values(inst)
            .map(|v| resolved[v.index()])
            .collect();
        func.layout.remove_inst(inst);
        for arg in args {
            uses[arg.index()] -= 1;
            if let ValueDef::Result(def, _) = func.dfg.value_def(arg)
                && inside[def.index()]
                && !removed[def.index()]
                && dead(func, &uses, def)
            {
                work.push(def);
            }
        }
    }
}

/// Replaces the loop's entry `jump header(args)` by `brif ok,
/// copy(args), header(args)`, `ok` the module docs' entry test, `copy`
/// the copy's header or its unrolled chain's dispatch block (`unroll`).
fn entry_test(
    func: &mut Function,
    c: &Candidate,
    copy_header: Block,
    pointers: &[usize],
    mem_base: Value,
) {
    let srcloc = func.srcloc(c.entry);
    let args: Vec<Value> = match func.dfg.insts[c.entry] {
        InstructionData::Jump { destination, .. } => destination
            .args(&func.dfg.value_lists)
            .filter_map(|a| a.as_value())
            .collect(),
        _ => return,
    };
    let mut pos = FuncCursor::new(func).at_inst(c.entry).with_srcloc(srcloc);
    let mut memo = BTreeMap::new();
    let count = args[c.counter];
    let trips = match pos.func.dfg.value_type(count) {
        I64 => count,
        ty => {
            let wide = pos.ins().uextend(I64, count);
            debug_assert!(ty == I32 || ty == I16 || ty == I8);
            wide
        }
    };
    let mut ok = pos.ins().icmp_imm_u(IntCC::NotEqual, trips, 0);
    let last = pos.ins().iadd_imm_s(trips, -1);
    let small = pos
        .ins()
        .icmp_imm_u(IntCC::UnsignedLessThan, last, MAX_TRIPS);
    ok = pos.ins().band(ok, small);
    if let Some((_, fuel)) = c.fuel_test {
        let enough = pos
            .ins()
            .icmp(IntCC::UnsignedGreaterThanOrEqual, args[fuel], trips);
        ok = pos.ins().band(ok, enough);
    }
    for t in &c.tests {
        let mut first = args[t.param];
        if let Some(q) = t.plus {
            let q = hoist(&mut pos, &c.blocks, q, &mut memo);
            first = pos.ins().iadd(first, q);
        }
        let first = pos.ins().uextend(I64, first);
        let first = pos.ins().iadd_imm_u(first, t.offset);
        let stride = hoist(&mut pos, &c.blocks, t.stride, &mut memo);
        let stride = pos.ins().uextend(I64, stride);
        let span = pos.ins().imul(stride, last);
        let end = pos.ins().iadd(first, span);
        let end = pos.ins().iadd_imm_u(end, t.bytes);
        let inside = pos.ins().icmp(IntCC::UnsignedLessThanOrEqual, end, t.len);
        ok = pos.ins().band(ok, inside);
        if let Some(size) = t.accesses.iter().map(|&(_, n)| n).max() {
            let bits = pos.ins().bor(first, stride);
            let low = pos.ins().band_imm_u(bits, size - 1);
            let aligned = pos.ins().icmp_imm_u(IntCC::Equal, low, 0);
            ok = pos.ins().band(ok, aligned);
        }
    }
    let block_args: Vec<BlockArg> = args.iter().map(|&v| v.into()).collect();
    let mut copy_args = block_args.clone();
    for &param in pointers {
        let first = pos.ins().uextend(I64, args[param]);
        copy_args.push(pos.ins().iadd(mem_base, first).into());
    }
    pos.ins()
        .brif(ok, copy_header, &copy_args, c.header, &block_args);
    pos.func.layout.remove_inst(c.entry);
}

/// Flags a load or store `aligned` and `notrap`: proven in bounds and
/// aligned (as the translator flags shared accesses).
fn set_trusted(func: &mut Function, inst: Inst) {
    let dfg = &mut func.dfg;
    let Some(flags) = dfg.insts[inst].memflags_data(dfg) else {
        return;
    };
    let Ok(flags) = dfg.mem_flags.insert(flags.with_aligned().with_notrap()) else {
        return;
    };
    if let Some(slot) = dfg.insts[inst].memflags_mut() {
        *slot = flags;
    }
}

/// The values defined in `blocks` that code outside them uses.
fn live_outs(func: &Function, blocks: &[Block]) -> Vec<Value> {
    let dfg = &func.dfg;
    let defined = |v: Value| match dfg.value_def(v) {
        ValueDef::Param(b, _) => blocks.contains(&b),
        ValueDef::Result(i, _) => func
            .layout
            .inst_block(i)
            .is_some_and(|b| blocks.contains(&b)),
        ValueDef::Union(..) => false,
    };
    let mut outs = Vec::new();
    for block in func.layout.blocks().filter(|b| !blocks.contains(b)) {
        for inst in func.layout.block_insts(block) {
            for v in dfg.inst_values(inst) {
                let v = dfg.resolve_aliases(v);
                if defined(v) && !outs.contains(&v) {
                    outs.push(v);
                }
            }
        }
    }
    outs
}
