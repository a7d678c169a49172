//! Guarded stores. A kernel writes its outputs under guards: `if (i < n)
//! y[i] = v;`, and an unrolled row loop (a softmax's 32 columns a lane)
//! makes a chain of them, `if (j < cols) y[j] = e * inv;` per column. The
//! translator gives each guard a block of its own that computes the
//! address and the value, tests the address (`trapnz`), stores and jumps
//! back, and ptxas turns each such block into a divergent region of its
//! own (a convergence barrier before and after, the memory descriptor
//! loaded again inside): 17 instructions a guarded store on an H200
//! where the store and its test need 4.
//!
//! This pass moves the guarded block's arithmetic and tests above the
//! guard, so that only the store stays behind the branch, which ptxas
//! then predicates. An *arm* qualifies when it is a successor `S` of a
//! block `B` that ends in `brif c`, `B` is its only way in, it jumps on to
//! `B`'s other successor with no arguments (a triangle), and it holds, in
//! order, only arithmetic that cannot trap or touch memory, `trapnz`
//! tests, and at last one plain store. Then:
//!
//! - its arithmetic moves before `B`'s `brif`: it computes what it would
//!   have computed (its operands are defined on every path to `B`: `B` is
//!   `S`'s only way in), and nothing can observe a value no one reads;
//! - each `trapnz x` becomes `trapnz (x != 0) & g` before the `brif`, `g`
//!   the condition under which `S` runs (`c != 0`, or `c == 0` for the
//!   else arm), with the test's trap code and source location. It traps
//!   exactly when the kernel would have trapped there, and the order of
//!   the arm's tests, and of them and the store, is kept; between the
//!   `brif` and the arm's first test nothing had an effect.
//!
//! An arm of more than [`MAX_MOVED`] instructions stays as it is (the
//! moved arithmetic runs whether or not the guard holds).

use alloc::vec::Vec;

use cranelift_codegen::cursor::{Cursor, FuncCursor};
use cranelift_codegen::flowgraph::ControlFlowGraph;
use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::types::{I8, I32, I64};
use cranelift_codegen::ir::{Block, Function, Inst, InstBuilder, InstructionData, Opcode, Value};

use super::loops::pure;

/// The most instructions an arm may move above its guard.
const MAX_MOVED: usize = 32;

/// Moves the arithmetic and tests of every guarded store's arm above its
/// guard (module docs).
pub(super) fn hoist_guarded_stores(func: &mut Function) {
    let cfg = ControlFlowGraph::with_function(func);
    let blocks: Vec<Block> = func.layout.blocks().collect();
    for block in blocks {
        let Some(brif) = func.layout.last_inst(block) else {
            continue;
        };
        let InstructionData::Brif {
            arg: c,
            blocks: [then_call, else_call],
            ..
        } = func.dfg.insts[brif]
        else {
            continue;
        };
        let pool = &func.dfg.value_lists;
        if then_call.args(pool).next().is_some() || else_call.args(pool).next().is_some() {
            continue;
        }
        let (then_block, else_block) = (then_call.block(pool), else_call.block(pool));
        for (arm, other, runs_when_set) in [
            (then_block, else_block, true),
            (else_block, then_block, false),
        ] {
            if arm == block || arm == other || cfg.pred_iter(arm).count() != 1 {
                continue;
            }
            let Some(moved) = movable_arm(func, arm, other) else {
                continue;
            };
            // The lowering compares `i32`s and `i64`s: a guard or a test of
            // another type (not a comparison's `i8`) stays as it is.
            let wide = |v: Value| matches!(func.dfg.value_type(v), I32 | I64);
            let tests_fit = moved.iter().all(|&inst| {
                func.dfg.insts[inst].opcode() != Opcode::Trapnz || {
                    let x = func.dfg.inst_args(inst)[0];
                    wide(x) || compared(func, x)
                }
            });
            if !wide(c) || !tests_fit {
                continue;
            }
            hoist(func, brif, c, runs_when_set, &moved);
            // One arm a block: the other, if it qualified too, would need
            // its own guard after this one's moved tests.
            break;
        }
    }
}

/// The instructions of `arm` to move above its guard (all but its store
/// and its jump), when `arm` is a guarded store's arm that jumps on to
/// `other` (module docs).
fn movable_arm(func: &Function, arm: Block, other: Block) -> Option<Vec<Inst>> {
    if !func.dfg.block_params(arm).is_empty() {
        return None;
    }
    let insts: Vec<Inst> = func.layout.block_insts(arm).collect();
    let [body @ .., store, jump] = &insts[..] else {
        return None;
    };
    let InstructionData::Jump { destination, .. } = func.dfg.insts[*jump] else {
        return None;
    };
    let pool = &func.dfg.value_lists;
    if destination.block(pool) != other || destination.args(pool).next().is_some() {
        return None;
    }
    if !matches!(
        func.dfg.insts[*store].opcode(),
        Opcode::Store | Opcode::Istore8 | Opcode::Istore16 | Opcode::Istore32
    ) {
        return None;
    }
    if body.is_empty() || body.len() > MAX_MOVED {
        return None;
    }
    body.iter()
        .all(|&inst| {
            let op = func.dfg.insts[inst].opcode();
            op == Opcode::Trapnz || quiet_arithmetic(op)
        })
        .then(|| body.to_vec())
}

/// Arithmetic that cannot trap, touch memory or have any other effect:
/// integer ([`pure`]) and floating point (no Wasm float operator traps
/// but the conversions to integers, which are not here).
fn quiet_arithmetic(op: Opcode) -> bool {
    pure(op)
        || matches!(
            op,
            Opcode::F32const
                | Opcode::F64const
                | Opcode::Fadd
                | Opcode::Fsub
                | Opcode::Fmul
                | Opcode::Fdiv
                | Opcode::Fneg
                | Opcode::Fabs
                | Opcode::Fcopysign
                | Opcode::Fmin
                | Opcode::Fmax
                | Opcode::Sqrt
                | Opcode::Ceil
                | Opcode::Floor
                | Opcode::Trunc
                | Opcode::Nearest
                | Opcode::Fpromote
                | Opcode::Fdemote
                | Opcode::Fcmp
                | Opcode::Bitcast
                | Opcode::FcvtFromUint
                | Opcode::FcvtFromSint
        )
}

/// Whether `v` is a comparison's `i8` result (0 or 1).
fn compared(func: &Function, v: Value) -> bool {
    func.dfg.value_type(v) == I8
        && func
            .dfg
            .value_def(v)
            .inst()
            .is_some_and(|d| matches!(func.dfg.insts[d].opcode(), Opcode::Icmp | Opcode::Fcmp))
}

/// Moves `moved` (in order) before `brif`, each `trapnz x` as `trapnz (x
/// != 0) & g` (module docs), `g` whether `brif`'s condition `c` sends
/// control to the arm.
fn hoist(func: &mut Function, brif: Inst, c: Value, runs_when_set: bool, moved: &[Inst]) {
    let mut guard = None;
    for &inst in moved {
        func.layout.remove_inst(inst);
        if func.dfg.insts[inst].opcode() == Opcode::Trapnz {
            let srcloc = func.srcloc(inst);
            let mut pos = FuncCursor::new(func).at_inst(brif);
            pos.set_srcloc(srcloc);
            let g = *guard.get_or_insert_with(|| {
                let cc = if runs_when_set {
                    IntCC::NotEqual
                } else {
                    IntCC::Equal
                };
                let ty = pos.func.dfg.value_type(c);
                let zero = pos.ins().iconst(ty, 0);
                pos.ins().icmp(cc, c, zero)
            });
            let x = pos.func.dfg.inst_args(inst)[0];
            // A comparison's result is 0 or 1 already; any other value (an
            // `i32` or `i64`: checked above) is made one.
            let x = if compared(pos.func, x) {
                x
            } else {
                let ty = pos.func.dfg.value_type(x);
                let zero = pos.ins().iconst(ty, 0);
                pos.ins().icmp(IntCC::NotEqual, x, zero)
            };
            let both = pos.ins().band(x, g);
            pos.func.dfg.inst_args_mut(inst)[0] = both;
        }
        func.layout.insert_inst(inst, brif);
    }
}
