//! Loop versioning: an innermost loop whose trip count and guest addresses
//! are known at its entry gets a second copy without its per-iteration
//! checks, taken when one test at the loop's entry shows that none of
//! those checks could fail. Every iteration of a translated loop tests its
//! fuel, and every guest access tests its bounds (and the PTX lowerer
//! tests its alignment); in a loop that walks arrays by fixed strides all
//! of that is known before the first iteration.
//!
//! A loop qualifies when
//!
//! - it has no loop inside it, one entry edge (a `jump` to its header from
//!   outside), one back edge, and one branch that leaves it, whose
//!   condition gives the loop's trip count (`trip`: an induction variable
//!   of constant step, plus an invariant offset, compared with a
//!   loop-invariant bound by `!=` or an order, signed or not, `i32` or
//!   `i64`; counted up or down; tested at the top, the bottom or between,
//!   on every pass); every other branch stays in the loop (a trap may end
//!   it);
//! - its fuel, if the header tests it, goes down by one a pass (the
//!   translator's `trapz fuel` then `fuel - 1`);
//! - it makes no warp collective (shuffle, ballot, vote): the entry test
//!   reads each thread's own values, so lanes of one warp may take
//!   different copies, and a collective must meet its warp at one site
//!   (barriers are the non-`.aligned` kind and may);
//! - its header tests fuel, or at least one guest access is at an
//!   *affine* address (`affine`: built from induction variables and
//!   loop-invariant values, so it moves by the same `S` every pass).
//!
//! At the entry the pass computes the header's passes `T = N + 1`
//! (`trip`) and, for each affine address, its first value `X0` and step
//! `S` (`affine`); the loop takes the copy when the count is known, `T <=
//! 2^31`, the fuel is at least `T`, every affine access is in bounds on
//! every pass that can run it (passes `0 ..= N`, or `0 ..= N - 1` for one
//! after the exit test; `affine::in_bounds`), and, for an access of `n >
//! 1` bytes, `X0 + offset` and `S` are multiples of `n`. So in the copy
//! those accesses' bounds tests and the fuel test are removed (the fuel
//! still goes down by one a pass: the fuel the loop leaves is unchanged),
//! and the accesses are flagged `aligned` and `notrap` (the memory's base
//! is 16-byte aligned: `docs/kernels.md`). When the test fails the
//! original loop runs and traps where it always did, after the same side
//! effects. The time check stays in both.
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
use cranelift_codegen::ir::types::{I32, I64};
use cranelift_codegen::ir::{
    Block, BlockArg, BlockCall, Function, Inst, InstBuilder, InstructionData, Opcode, Value,
    ValueDef,
};

use super::affine::{AffineTest, EntryValues, affine_tests, in_bounds};
use super::copy::{Copied, copy_blocks, resolved};
use super::counted::minus_one;
use super::loops::{
    Induction, LoopForm, entry_args, inductions, innermost_loops, loop_form, mask, pure, reach,
};
use super::trip::{Arith, Emit, Operand, Rule, TripCount, first, passes, trip_count};
use super::unroll::{Remaining, unroll};
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
/// below 2^63).
const MAX_TRIPS: i64 = 1 << 31;

/// The most host pointers a copy gets (each holds a 64-bit register for
/// the loop).
const MAX_POINTERS: usize = 8;

/// A loop that qualifies, and what its copy drops.
struct Candidate {
    form: LoopForm,
    ivs: Vec<Option<Induction>>,
    trip: TripCount,
    /// The header's fuel test and the fuel's parameter, if it has one.
    fuel_test: Option<(Inst, usize)>,
    tests: Vec<AffineTest>,
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
    let size: usize = blocks
        .iter()
        .map(|&b| func.layout.block_insts(b).count())
        .sum();
    if size > MAX_LOOP_INSTS {
        return None;
    }
    let form = loop_form(func, cfg, header, blocks)?;
    if form.entries.len() != 1 || form.exits.len() != 1 {
        return None;
    }
    // No warp collective inside: threads of one warp may take different
    // copies (the entry test reads each thread's own values), and a
    // shuffle or vote must meet its warp at one call site.
    let collective = form
        .blocks
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
    let ivs = inductions(func, &form);
    let trip = trip_count(func, &form, &ivs)?;
    let fuel_test = fuel_test(func, header, &form.back)?;
    if fuel_test.is_some_and(|(_, fuel)| fuel == trip.iv) {
        return None;
    }
    // The blocks that run after the exit test in a pass.
    let dfg = &func.dfg;
    let InstructionData::Brif {
        blocks: exit_to, ..
    } = dfg.insts[trip.exit]
    else {
        return None;
    };
    let stay = exit_to[1 - trip.leaving].block(&dfg.value_lists);
    let after = if stay == header {
        Vec::new()
    } else {
        reach(func, &form, stay, |_| true)
    };
    let tests = affine_tests(func, &form, &ivs, mem_base, &after);
    // Nothing to drop: no copy.
    if tests.is_empty() && fuel_test.is_none() {
        return None;
    }
    Some(Candidate {
        form,
        ivs,
        trip,
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

/// What the entry computes for the copy: the test, the trip count (an
/// `i32`, for the unrolled chain) and, per host pointer, its address and
/// first value and step.
struct Entry {
    ok: Value,
    trips: Value,
    pointers: Vec<Pointer>,
}

/// A host pointer of the copy (`host_pointers`).
struct Pointer {
    address: Value,
    /// `mem_base + uextend(X0)`, and `sextend(S)` (`i64`).
    first: Value,
    step: Value,
}

/// Makes the copy of `c`'s loop and the entry test that picks it; `None`
/// if the loop's exit could not be routed.
fn version(func: &mut Function, c: &Candidate, mem_base: Value) -> Option<()> {
    let exit = c.trip.exit;
    let InstructionData::Brif {
        blocks: exit_to, ..
    } = func.dfg.insts[exit]
    else {
        return None;
    };
    let leaving_call = exit_to[c.trip.leaving];
    let exit_block = leaving_call.block(&func.dfg.value_lists);
    let exit_args: Vec<Value> = leaving_call
        .args(&func.dfg.value_lists)
        .map(|a| a.as_value().map(|v| func.dfg.resolve_aliases(v)))
        .collect::<Option<_>>()?;
    let entry = c.form.entries[0];
    let args = entry_args(func, entry)?;
    let outs = live_outs(func, &c.form.blocks);
    let copy = copy_blocks(func, &c.form.blocks, BTreeMap::new());
    let copy_header = copy.blocks[c.form.blocks.iter().position(|&b| b == c.form.header)?];

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
    for (branch, values) in [
        (exit, leaving.clone()),
        (
            copy.insts[&exit],
            leaving.iter().map(|&v| copy.value(v)).collect(),
        ),
    ] {
        let dfg = &mut func.dfg;
        let args: Vec<BlockArg> = values.into_iter().map(BlockArg::from).collect();
        let call = BlockCall::new(join, args, &mut dfg.value_lists);
        if let InstructionData::Brif { blocks, .. } = &mut dfg.insts[branch] {
            blocks[c.trip.leaving] = call;
        }
    }

    // Code after the loops reads the join's parameters.
    let renamed: BTreeMap<Value, Value> = outs
        .iter()
        .copied()
        .zip(join_params[exit_args.len()..].iter().copied())
        .collect();
    let inside: BTreeSet<Block> = c
        .form
        .blocks
        .iter()
        .chain(&copy.blocks)
        .copied()
        .chain([join])
        .collect();
    rename(func, &inside, &renamed);

    let computed = entry_test(func, c, entry, &args, mem_base);

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
    host_pointers(func, c, &copy, &computed.pointers);
    drop_unused(func, &copy.blocks);
    let remaining = if counts_down(&c.trip) {
        Remaining::Param(c.trip.iv)
    } else {
        Remaining::Count
    };
    let chain = unroll(
        func,
        &copy.blocks,
        copy_header,
        copy.insts[&c.form.latch],
        copy.insts[&exit],
        c.trip.leaving,
        remaining,
    );

    // The entry: `brif ok, copy(args.., pointers.. [, trips]), header(args..)`.
    let mut copy_args: Vec<BlockArg> = args.iter().map(|&v| v.into()).collect();
    copy_args.extend(computed.pointers.iter().map(|p| BlockArg::from(p.first)));
    let enter = match chain {
        Some(dispatch) => {
            if matches!(remaining, Remaining::Count) {
                copy_args.push(computed.trips.into());
            }
            dispatch
        }
        None => copy_header,
    };
    let block_args: Vec<BlockArg> = args.iter().map(|&v| v.into()).collect();
    let srcloc = func.srcloc(entry);
    let mut pos = FuncCursor::new(func).at_inst(entry).with_srcloc(srcloc);
    pos.ins()
        .brif(computed.ok, enter, &copy_args, c.form.header, &block_args);
    pos.func.layout.remove_inst(entry);
    Some(())
}

/// Whether the loop's counter is its own remaining passes: `p - 1 != 0`
/// with `p` stepping by -1 (how LLVM counts a loop down), so `p` is `T -
/// t` on pass `t`.
fn counts_down(trip: &TripCount) -> bool {
    let all = mask(trip.ty);
    trip.rule == Rule::NotEqual { step: all }
        && trip.offset == Some((Operand::Const(all), false))
        && trip.bound == Operand::Const(0)
}

/// Emits the entry test of `c` (module docs) before the loop's entry
/// `jump` (whose arguments are `args`), and what the copy is entered with.
fn entry_test(
    func: &mut Function,
    c: &Candidate,
    entry: Inst,
    args: &[Value],
    mem_base: Value,
) -> Entry {
    let srcloc = func.srcloc(entry);
    let mut pos = FuncCursor::new(func).at_inst(entry).with_srcloc(srcloc);
    let form = &c.form;
    let mut values = EntryValues::new(&mut pos, form, &c.ivs, args);

    // The trip count.
    let ty = c.trip.ty;
    let offset = match c.trip.offset {
        Some((Operand::Value(v), _)) => Some(values.invariant(&mut pos, form, v)),
        _ => None,
    };
    let bound = match c.trip.bound {
        Operand::Value(v) => values.invariant(&mut pos, form, v),
        Operand::Const(b) => Emit(&mut pos).konst(ty, b),
    };
    let x0 = first(&mut Emit(&mut pos), &c.trip, args[c.trip.iv], offset);
    let (counted, n) = passes(&mut Emit(&mut pos), c.trip.rule, ty, x0, bound);
    let n = if ty == I64 {
        n
    } else {
        pos.ins().uextend(I64, n)
    };
    let mut ok = pos.ins().icmp_imm_u(IntCC::UnsignedLessThan, n, MAX_TRIPS);
    if let Some(counted) = counted {
        ok = pos.ins().band(ok, counted);
    }
    let trips = pos.ins().iadd_imm_s(n, 1);
    if let Some((_, fuel)) = c.fuel_test {
        let enough = pos
            .ins()
            .icmp(IntCC::UnsignedGreaterThanOrEqual, args[fuel], trips);
        ok = pos.ins().band(ok, enough);
    }
    // The last pass of an access after the exit test: `N - 1` (none when
    // `N` is 0; its first pass is tested then, which can only refuse the
    // copy).
    let zero = pos.ins().iconst(I64, 0);
    let none_after = pos.ins().icmp_imm_u(IntCC::Equal, n, 0);
    let before_n = pos.ins().iadd_imm_s(n, -1);
    let last_after = pos.ins().select(none_after, zero, before_n);

    // Each affine address: in bounds on its passes, and its accesses
    // aligned.
    let mut addresses: Vec<Value> = Vec::new();
    for t in &c.tests {
        if !addresses.contains(&t.address) {
            addresses.push(t.address);
        }
    }
    let mut pointers = Vec::new();
    for &x in &addresses {
        let tests: Vec<&AffineTest> = c.tests.iter().filter(|t| t.address == x).collect();
        let varies = tests[0].varies;
        let (x0, step) = values.first_and_step(&mut pos, form, x, varies);
        let end = tests.iter().map(|t| t.offset + t.bytes).max().unwrap_or(0);
        let len = values.invariant(&mut pos, form, tests[0].len);
        let last = if tests.iter().all(|t| t.after_exit) {
            last_after
        } else {
            n
        };
        let inside = in_bounds(&mut pos, x0, step, last, end, len);
        ok = pos.ins().band(ok, inside);
        let mut aligned: Vec<(i64, i64)> = Vec::new();
        for t in &tests {
            for &(_, size) in &t.accesses {
                if size > 1 && !aligned.contains(&(t.offset, size)) {
                    aligned.push((t.offset, size));
                }
            }
        }
        for (offset, size) in aligned {
            let at = pos.ins().iadd_imm_u(x0, offset);
            let bits = match step {
                Some(s) => pos.ins().bor(at, s),
                None => at,
            };
            let low = pos.ins().band_imm_u(bits, size - 1);
            let fits = pos.ins().icmp_imm_u(IntCC::Equal, low, 0);
            ok = pos.ins().band(ok, fits);
        }
        let accessed = tests.iter().any(|t| !t.accesses.is_empty());
        if let Some(s) = step
            && accessed
            && pointers.len() < MAX_POINTERS
        {
            let wide = pos.ins().uextend(I64, x0);
            let first = pos.ins().iadd(mem_base, wide);
            let step = pos.ins().sextend(I64, s);
            pointers.push(Pointer {
                address: x,
                first,
                step,
            });
        }
    }
    let trips = pos.ins().ireduce(I32, trips);
    Entry {
        ok,
        trips,
        pointers,
    }
}

/// Gives the copy a 64-bit host pointer per affine address `x` of
/// `pointers` (`mem_base + uextend(x)`): a new header parameter `P`,
/// `mem_base + uextend(X0)` on entry and `P + sextend(S)` on the back
/// edge, and the accesses at `uextend(x) + offset` at `P + offset`. In the
/// copy no access's `i32` address wraps on a pass that runs it (the entry
/// test), so `P` is its host address less the offset there, and the
/// offsets fold into the accesses (`ld.global [P+8]`) where each address
/// was its own computation, a widening and a 64-bit add.
fn host_pointers(func: &mut Function, c: &Candidate, copy: &Copied, pointers: &[Pointer]) {
    let header = copy.blocks[c
        .form
        .blocks
        .iter()
        .position(|&b| b == c.form.header)
        .unwrap_or(0)];
    let latch = copy.insts[&c.form.latch];
    for p in pointers {
        let pointer = func.dfg.append_block_param(header, I64);
        let mut pos = FuncCursor::new(func).at_inst(latch);
        let next = pos.ins().iadd(pointer, p.step);
        let dfg = &mut func.dfg;
        for call in
            dfg.insts[latch].branch_destination_mut(&mut dfg.jump_tables, &mut dfg.exception_tables)
        {
            if call.block(&dfg.value_lists) == header {
                call.append_argument(next, &mut dfg.value_lists);
            }
        }
        for t in c.tests.iter().filter(|t| t.address == p.address) {
            for &(access, _) in &t.accesses {
                let access = copy.insts[&access];
                let mut pos = FuncCursor::new(func).at_inst(access);
                let address = match t.offset {
                    0 => pointer,
                    offset => pos.ins().iadd_imm_u(pointer, offset),
                };
                let dfg = &mut pos.func.dfg;
                let at = usize::from(dfg.insts[access].opcode().can_store());
                dfg.inst_args_mut(access)[at] = address;
            }
        }
    }
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
