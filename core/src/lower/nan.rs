//! Where the PTX lowerer makes a float result's NaN Wasm's canonical one.
//! PTX's float arithmetic returns its own NaN (`0x7FFFFFFF`), so the op
//! table's `canonical_nan` rules end with a fix-up (a NaN test and a
//! predicated move, [`table::nan_fixup`]). This module decides, by value,
//! where that fix-up is made so that every NaN a Wasm program can see has
//! Wasm's bits, and as few are made as that allows:
//!
//! - A use *sees* a value's bits unless it is *blind* (its result's NaN
//!   does not depend on the input NaN's bits: another `canonical_nan`
//!   rule, a comparison, a conversion to an integer) or a block argument.
//! - A `canonical_nan` result keeps its fix-up when a use that sees it is
//!   inside the innermost loop the result is computed in (or the result
//!   is in no loop): fixing it where it is made is then no dearer than
//!   where it is seen. Otherwise the result is *deferred*: it may hold
//!   PTX's NaN, and each instruction that sees it (all outside its loop)
//!   first makes it canonical, in place.
//! - A block parameter may hold PTX's NaN when some branch passes it such
//!   a value (a fixed point over the branches); each instruction that sees
//!   it first makes it canonical, in place.
//!
//! Fixing in place is sound: no use can tell PTX's NaN from the canonical
//! one but those that see bits, and they all want the canonical one. So a
//! loop's float accumulator (`acc = acc + a * b`, the sum passed back to
//! the loop's parameter or read after the loop) is fixed once, where it
//! is stored after the loop, not at every step.

use alloc::vec::Vec;

use cranelift_codegen::dominator_tree::DominatorTree;
use cranelift_codegen::flowgraph::ControlFlowGraph;
use cranelift_codegen::ir::{Function, Inst, Opcode, Value, ValueDef};
use cranelift_codegen::loop_analysis::LoopAnalysis;

use super::table::{self, RowIndex, Status};

/// By value number: which `canonical_nan` results keep their fix-up and
/// which values are made canonical before the uses that see them.
pub(super) struct NanPlan {
    /// A `canonical_nan` result fixed where it is made.
    keep: Vec<bool>,
    /// A value that may hold PTX's NaN and that some use sees.
    fix_before_use: Vec<bool>,
    /// The op table's rows by opcode (the emitter looks up through it too).
    pub(super) rows: RowIndex,
}

impl NanPlan {
    /// The plan for `func`'s values.
    pub(super) fn of(func: &Function) -> NanPlan {
        let rows = RowIndex::new();
        let dfg = &func.dfg;
        let n = dfg.num_values();
        let cfg = ControlFlowGraph::with_function(func);
        let domtree = DominatorTree::with_function(func, &cfg);
        let mut loops = LoopAnalysis::new();
        loops.compute(func, &cfg, &domtree);
        let mut seen = alloc::vec![false; n];
        let mut keep = alloc::vec![false; n];
        // (argument, parameter) of every branch edge.
        let mut edges: Vec<(Value, Value)> = Vec::new();
        for block in func.layout.blocks() {
            for inst in func.layout.block_insts(block) {
                if blind(&rows, func, inst) {
                    continue;
                }
                for &arg in dfg.inst_args(inst) {
                    let arg = dfg.resolve_aliases(arg);
                    seen[index(arg)] = true;
                    if let ValueDef::Result(def, 0) = dfg.value_def(arg)
                        && let Some(home) = func.layout.inst_block(def)
                    {
                        // Seen in the loop it is made in, or made in none.
                        keep[index(arg)] |= loops
                            .innermost_loop(home)
                            .is_none_or(|lp| loops.is_in_loop(block, lp));
                    }
                }
                let calls =
                    dfg.insts[inst].branch_destination(&dfg.jump_tables, &dfg.exception_tables);
                for call in calls {
                    let params = dfg.block_params(call.block(&dfg.value_lists));
                    for (arg, &param) in call.args(&dfg.value_lists).zip(params) {
                        // An argument that is not a value (a call's return)
                        // has no NaN of ours.
                        if let Some(v) = arg.as_value() {
                            edges.push((dfg.resolve_aliases(v), param));
                        }
                    }
                }
            }
        }
        // What may hold PTX's NaN: the deferred results, then the
        // parameters they reach (a worklist over the edges, sorted by
        // argument: each parameter is marked and followed once).
        let mut ptx_nan = alloc::vec![false; n];
        let mut work: Vec<Value> = Vec::new();
        for v in dfg.values() {
            if let ValueDef::Result(inst, 0) = dfg.value_def(v)
                && canonical_nan_rule(&rows, func, inst)
                && !keep[index(v)]
            {
                ptx_nan[index(v)] = true;
                work.push(v);
            }
        }
        edges.sort_unstable_by_key(|&(arg, _)| index(arg));
        while let Some(v) = work.pop() {
            let from = edges.partition_point(|&(arg, _)| index(arg) < index(v));
            for &(_, param) in edges[from..].iter().take_while(|&&(arg, _)| arg == v) {
                if !ptx_nan[index(param)] {
                    ptx_nan[index(param)] = true;
                    work.push(param);
                }
            }
        }
        // Indexed by value number (`values()` skips deleted values).
        let mut fix_before_use = alloc::vec![false; n];
        for v in dfg.values() {
            fix_before_use[index(v)] = ptx_nan[index(v)]
                && seen[index(v)]
                && table::nan_fixup(dfg.value_type(v)).is_some();
        }
        NanPlan {
            keep,
            fix_before_use,
            rows,
        }
    }

    /// Whether the `canonical_nan` rule defining `result` keeps its
    /// fix-up.
    pub(super) fn keeps_fixup(&self, result: Value) -> bool {
        self.keep.get(index(result)).copied().unwrap_or(true)
    }

    /// The values `inst` reads that it must first make canonical: those
    /// that may hold PTX's NaN, when `inst` sees their bits. Each once, in
    /// operand order.
    pub(super) fn fix_before(&self, func: &Function, inst: Inst) -> Vec<Value> {
        let mut out: Vec<Value> = Vec::new();
        if blind(&self.rows, func, inst) {
            return out;
        }
        for &arg in func.dfg.inst_args(inst) {
            let arg = func.dfg.resolve_aliases(arg);
            if self.fix_before_use.get(index(arg)) == Some(&true) && !out.contains(&arg) {
                out.push(arg);
            }
        }
        out
    }
}

fn index(v: Value) -> usize {
    v.as_u32() as usize
}

/// Whether `inst`'s rule ends with a NaN fix-up.
fn canonical_nan_rule(rows: &RowIndex, func: &Function, inst: Inst) -> bool {
    rows.row_for(func, inst).is_some_and(
        |row| matches!(row.status, Status::Ptx(rule) if rule.name == table::CANONICAL_NAN),
    )
}

/// Whether `inst`'s result cannot depend on an operand NaN's bits: a
/// `canonical_nan` rule (PTX's NaN result, whatever the input NaN),
/// a comparison, a conversion to an integer.
fn blind(rows: &RowIndex, func: &Function, inst: Inst) -> bool {
    matches!(
        func.dfg.insts[inst].opcode(),
        Opcode::Fcmp
            | Opcode::FcvtToSint
            | Opcode::FcvtToUint
            | Opcode::FcvtToSintSat
            | Opcode::FcvtToUintSat
    ) || canonical_nan_rule(rows, func, inst)
}
