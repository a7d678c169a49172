//! Innermost loops as the loop passes (`counted`, `version`, `unroll`) see
//! them: the header, the loop's blocks, the edges in, the one back edge,
//! the branches that leave, and which header parameters are *induction
//! variables* (`p`, passed back as `p + s` or `p - s` with `s` the same on
//! every pass). The form is what the loop computes, not how a compiler
//! wrote it: counted up or down, tested at its top or its bottom, a loop
//! has the same form. This module finds and describes; it changes nothing
//! but what [`hoist`] adds before a loop's entry.

use alloc::collections::BTreeMap;
use alloc::vec::Vec;

use cranelift_codegen::cursor::{Cursor, FuncCursor};
use cranelift_codegen::dominator_tree::DominatorTree;
use cranelift_codegen::entity::EntityRef;
use cranelift_codegen::flowgraph::ControlFlowGraph;
use cranelift_codegen::ir::{
    Block, Function, Inst, InstructionData, Opcode, Type, Value, ValueDef,
};
use cranelift_codegen::loop_analysis::LoopAnalysis;

use super::align::constant;

/// How deep an invariant's computation inside the loop may be to be
/// recomputed at the entry.
const MAX_DEPTH: usize = 6;

/// `func`'s control flow graph, and its loops with no loop inside them:
/// each header with the loop's blocks in layout order.
pub(super) fn innermost_loops(func: &Function) -> (ControlFlowGraph, Vec<(Block, Vec<Block>)>) {
    let cfg = ControlFlowGraph::with_function(func);
    let domtree = DominatorTree::with_function(func, &cfg);
    let mut loops = LoopAnalysis::new();
    loops.compute(func, &cfg, &domtree);
    // Loops with a loop inside them (one pass: each marks its parent).
    let mut outer = alloc::vec![false; loops.loops().len()];
    for parent in loops.loops().filter_map(|lp| loops.loop_parent(lp)) {
        outer[parent.index()] = true;
    }
    let innermost = loops
        .loops()
        .filter(|lp| !outer[lp.index()])
        .map(|lp| {
            let blocks = func
                .layout
                .blocks()
                .filter(|&b| loops.is_in_loop(b, lp))
                .collect();
            (loops.loop_header(lp), blocks)
        })
        .collect();
    (cfg, innermost)
}

/// An innermost loop's edges.
pub(super) struct LoopForm {
    pub(super) header: Block,
    /// The loop's blocks, in layout order.
    pub(super) blocks: Vec<Block>,
    /// The edges in from outside: each a `jump header(..)`.
    pub(super) entries: Vec<Inst>,
    /// The one back edge: a `jump` or `brif` to the header.
    pub(super) latch: Inst,
    /// What the back edge passes the header's parameters.
    pub(super) back: Vec<Value>,
    /// The branches that leave the loop (a destination outside it).
    pub(super) exits: Vec<Inst>,
}

impl LoopForm {
    /// Whether `b` is one of the loop's blocks.
    pub(super) fn contains(&self, b: Block) -> bool {
        self.blocks.contains(&b)
    }
}

/// The loop at `header` (its blocks: `blocks`) if it has the form the loop
/// passes read: every edge in a `jump`, one back edge, and every block
/// ending in a branch or a trap.
pub(super) fn loop_form(
    func: &Function,
    cfg: &ControlFlowGraph,
    header: Block,
    blocks: Vec<Block>,
) -> Option<LoopForm> {
    let dfg = &func.dfg;
    let inside = |b: Block| blocks.contains(&b);
    let (mut entries, mut latch) = (Vec::new(), None);
    for pred in cfg.pred_iter(header) {
        if inside(pred.block) {
            if latch.replace(pred.inst).is_some() {
                return None;
            }
        } else if matches!(dfg.insts[pred.inst], InstructionData::Jump { .. }) {
            entries.push(pred.inst);
        } else {
            return None;
        }
    }
    let latch = latch?;
    let mut exits = Vec::new();
    for &block in &blocks {
        let last = func.layout.last_inst(block)?;
        let data = &dfg.insts[last];
        match data.opcode() {
            Opcode::Jump | Opcode::Brif | Opcode::BrTable => {
                let leaves = data
                    .branch_destination(&dfg.jump_tables, &dfg.exception_tables)
                    .iter()
                    .any(|call| !inside(call.block(&dfg.value_lists)));
                if leaves {
                    exits.push(last);
                }
            }
            Opcode::Trap => {}
            _ => return None,
        }
    }
    // What the back edge passes: one destination is the header.
    let calls = dfg.insts[latch].branch_destination(&dfg.jump_tables, &dfg.exception_tables);
    let mut to_header = calls
        .iter()
        .filter(|call| call.block(&dfg.value_lists) == header);
    let call = to_header.next()?;
    if to_header.next().is_some() {
        return None;
    }
    let back = call
        .args(&dfg.value_lists)
        .map(|a| a.as_value().map(|v| dfg.resolve_aliases(v)))
        .collect::<Option<Vec<Value>>>()?;
    Some(LoopForm {
        header,
        blocks,
        entries,
        latch,
        back,
        exits,
    })
}

/// The arguments an entry `jump` passes the header.
pub(super) fn entry_args(func: &Function, entry: Inst) -> Option<Vec<Value>> {
    let InstructionData::Jump { destination, .. } = func.dfg.insts[entry] else {
        return None;
    };
    destination
        .args(&func.dfg.value_lists)
        .map(|a| a.as_value())
        .collect()
}

/// How an induction variable steps: the back edge passes `p + s` (`p - s`
/// when `negated`), or `p` itself (`stride` `None`: a step of 0).
#[derive(Clone, Copy, Debug)]
pub(super) struct Induction {
    pub(super) stride: Option<Value>,
    pub(super) negated: bool,
    /// The step, when it is a constant: its bits in the parameter's width.
    pub(super) constant: Option<u64>,
}

/// The header parameters of `form` that are induction variables, by index:
/// `p` passed back as `p + s`, `s + p`, `p - s` or `p` (an `i32` or `i64`),
/// `s` loop-invariant ([`invariant`]).
pub(super) fn inductions(func: &Function, form: &LoopForm) -> Vec<Option<Induction>> {
    let dfg = &func.dfg;
    let params = dfg.block_params(form.header);
    params
        .iter()
        .zip(&form.back)
        .map(|(&p, &next)| {
            let ty = dfg.value_type(p);
            if !is_integer(ty) {
                return None;
            }
            if next == p {
                return Some(Induction {
                    stride: None,
                    negated: false,
                    constant: Some(0),
                });
            }
            let (stride, negated) = match dfg.insts[dfg.value_def(next).inst()?] {
                InstructionData::Binary {
                    opcode: Opcode::Iadd,
                    args: [x, y],
                } => {
                    let (x, y) = (dfg.resolve_aliases(x), dfg.resolve_aliases(y));
                    if x == p {
                        (y, false)
                    } else if y == p {
                        (x, false)
                    } else {
                        return None;
                    }
                }
                InstructionData::Binary {
                    opcode: Opcode::Isub,
                    args: [x, y],
                } if dfg.resolve_aliases(x) == p => (dfg.resolve_aliases(y), true),
                _ => return None,
            };
            if !invariant(func, &form.blocks, stride) {
                return None;
            }
            let constant = constant_bits(func, stride).map(|s| {
                let s = if negated { s.wrapping_neg() } else { s };
                s & mask(ty)
            });
            Some(Induction {
                stride: Some(stride),
                negated,
                constant,
            })
        })
        .collect()
}

/// Whether `ty` is a Wasm integer (`i32`, `i64`).
pub(super) fn is_integer(ty: Type) -> bool {
    ty == cranelift_codegen::ir::types::I32 || ty == cranelift_codegen::ir::types::I64
}

/// The bits a value of `ty` has: `2^bits - 1`.
pub(super) fn mask(ty: Type) -> u64 {
    u64::MAX >> (64 - ty.bits())
}

/// The value of an `iconst` in its type's width (an `i32`'s `-1` is
/// `0xffff_ffff`, however its immediate holds it).
pub(super) fn constant_bits(func: &Function, v: Value) -> Option<u64> {
    let ty = func.dfg.value_type(func.dfg.resolve_aliases(v));
    constant(func, v).map(|c| c as u64 & mask(ty))
}

/// Whether every pass that reaches the back edge runs block `x`: `x` is the
/// header or the latch's block, or the latch's block cannot be reached
/// from the header inside the loop without passing `x`.
pub(super) fn on_every_pass(func: &Function, form: &LoopForm, x: Block) -> bool {
    let Some(latch_block) = func.layout.inst_block(form.latch) else {
        return false;
    };
    if x == form.header || x == latch_block {
        return true;
    }
    !reach(func, form, form.header, |b| b != x).contains(&latch_block)
}

/// The blocks of the loop reachable from `from` (itself included) through
/// the loop's blocks that `enter` admits, never through the header again.
pub(super) fn reach(
    func: &Function,
    form: &LoopForm,
    from: Block,
    enter: impl Fn(Block) -> bool,
) -> Vec<Block> {
    let dfg = &func.dfg;
    let mut seen = alloc::vec![from];
    let mut work = alloc::vec![from];
    while let Some(b) = work.pop() {
        let Some(last) = func.layout.last_inst(b) else {
            continue;
        };
        for call in dfg.insts[last].branch_destination(&dfg.jump_tables, &dfg.exception_tables) {
            let next = call.block(&dfg.value_lists);
            if next != form.header && form.contains(next) && enter(next) && !seen.contains(&next) {
                seen.push(next);
                work.push(next);
            }
        }
    }
    seen
}

/// Whether `v` is the same on every pass through the loop of `blocks` and
/// can be computed before it: defined outside `blocks`, or by [`pure`]
/// arithmetic of such values.
pub(super) fn invariant(func: &Function, blocks: &[Block], v: Value) -> bool {
    invariant_within(func, blocks, v, 0)
}

fn invariant_within(func: &Function, blocks: &[Block], v: Value, depth: usize) -> bool {
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
                        .all(|&a| invariant_within(func, blocks, a, depth + 1)))
        }
        ValueDef::Union(..) => false,
    }
}

/// Integer arithmetic that cannot trap and has no effect: what an entry
/// test may recompute, and what a copy's unused results may drop.
pub(super) fn pure(opcode: Opcode) -> bool {
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

/// `v` at the cursor (before a loop's entry): `given[v]` where it has one
/// (a header parameter's value on some pass), itself when it is defined
/// outside `blocks`, else a copy of its computation from the loop (which
/// must be [`pure`], its operands in turn hoisted: [`invariant`] values,
/// or ones [`super::affine`] checked). `memo` holds what was made for the
/// same `given`.
pub(super) fn hoist(
    pos: &mut FuncCursor,
    blocks: &[Block],
    v: Value,
    given: &BTreeMap<Value, Value>,
    memo: &mut BTreeMap<Value, Value>,
) -> Value {
    let v = pos.func.dfg.resolve_aliases(v);
    if let Some(&at) = given.get(&v).or_else(|| memo.get(&v)) {
        return at;
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
        .map(|a| hoist(pos, blocks, a, given, memo))
        .collect();
    let copy = pos.func.dfg.clone_inst(inst);
    pos.func.dfg.overwrite_inst_values(copy, args.into_iter());
    pos.insert_inst(copy);
    let result = pos.func.dfg.first_result(copy);
    memo.insert(v, result);
    result
}
