//! Unrolling a versioned loop's copy. The copy that loop versioning
//! (`version`) makes has no checks left but the time check, and runs a
//! count known at its entry; a small body run once per pass still makes
//! the GPU wait on each pass's loads before it can issue the next pass's
//! (ptxas left the matmul's copy, with its time check's branch to a trap
//! stub, not unrolled; nvcc unrolls the twin's loop by 16). So the copy of
//! a body of at most [`NARROW_LOADS`] loads and [`MAX_BODY_INSTS`]
//! instructions gets more copies chained one after another, the *links*:
//! [`FACTOR`] (a column sum's one load a pass kept eight loads in flight
//! with eight links where nvcc's twin, unrolled four times by NVVM and four
//! by ptxas, kept sixteen). Wider bodies are left to ptxas: chained, a
//! triangular solve's four loads a pass (a C loop LLVM had unrolled twice)
//! ran 1.5x slower with eight links and 2x with four on an H200 than not
//! chained at all, which ptxas unrolled and scheduled itself (at nvcc's
//! speed):
//!
//! - a *dispatch* block with the header's parameters (and, where no
//!   header parameter counts the passes left, one more: the passes left)
//!   goes to the chain when at least as many passes as links are left, else to
//!   the copy (which then runs the last, fewer passes itself);
//! - in each link but the last, the exit test cannot leave (at least one
//!   more pass follows it), so it becomes a `jump` to where the loop goes
//!   on, and the back edge a `jump` to the next link's header; the last
//!   link's back edge goes to the dispatch block (with the passes left
//!   less the links), its exit stays;
//! - only the first link reads the clock (a kernel for launches without a
//!   time limit has no time checks): the chain is a few passes of a body
//!   without loops between two time checks, bounded work as a counted
//!   loop's passes are (`counted`).
//!
//! The loop versioning's entry test then branches to the dispatch block
//! instead of the copy's header.

use alloc::collections::BTreeMap;
use alloc::vec::Vec;

use cranelift_codegen::cursor::{Cursor, FuncCursor};
use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::types::I32;
use cranelift_codegen::ir::{
    Block, BlockArg, Function, Inst, InstBuilder, InstructionData, Opcode, Value,
};

use super::copy::copy_blocks;
use super::counted::clock_chain;
use crate::lower::KernelTrap;

/// Links of a chain.
const FACTOR: i64 = 16;

/// The most loads of a body that is chained.
const NARROW_LOADS: usize = 2;

/// The most instructions a copy may have to be unrolled.
const MAX_BODY_INSTS: usize = 48;

/// What tells the dispatch block how many passes are left.
#[derive(Clone, Copy, Debug)]
pub(super) enum Remaining {
    /// The header parameter of this index: it is the passes left on every
    /// pass (a loop counted down to zero).
    Param(usize),
    /// A parameter of the dispatch block's own (an `i32`, after the
    /// header's): the loop is entered with its trip count.
    Count,
}

/// Unrolls the versioned copy `blocks` (header `header`, back edge `latch`,
/// exit test `exit`, a `brif` whose destination `leaving` leaves the loop;
/// module docs); the dispatch block to enter it by, or `None` when it is
/// not unrolled (too large, too many loads, or not of the expected shape).
pub(super) fn unroll(
    func: &mut Function,
    blocks: &[Block],
    header: Block,
    latch: Inst,
    exit: Inst,
    leaving: usize,
    remaining: Remaining,
) -> Option<Block> {
    let size: usize = blocks
        .iter()
        .map(|&b| func.layout.block_insts(b).count())
        .sum();
    if size > MAX_BODY_INSTS {
        return None;
    }
    let loads = blocks
        .iter()
        .flat_map(|&b| func.layout.block_insts(b))
        .filter(|&i| func.dfg.insts[i].opcode().can_load())
        .count();
    if loads > NARROW_LOADS {
        return None;
    }
    let factor = FACTOR;
    // None in a kernel for launches without a time limit.
    let time_check = time_check(func, header);
    if !matches!(func.dfg.insts[exit], InstructionData::Brif { .. }) {
        return None;
    }
    let header_index = blocks.iter().position(|&b| b == header)?;

    // The dispatch block: the chain when at least `factor` passes are left.
    let dispatch = func.dfg.make_block();
    let params: Vec<Value> = func
        .dfg
        .block_params(header)
        .to_vec()
        .into_iter()
        .map(|p| {
            let ty = func.dfg.value_type(p);
            func.dfg.append_block_param(dispatch, ty)
        })
        .collect();
    let left = match remaining {
        Remaining::Param(counter) => *params.get(counter)?,
        Remaining::Count => func.dfg.append_block_param(dispatch, I32),
    };
    func.layout.append_block(dispatch);

    let links: Vec<_> = (0..factor)
        .map(|_| copy_blocks(func, blocks, BTreeMap::new()))
        .collect();
    let link_header = |k: usize| links[k].blocks[header_index];

    let mut pos = FuncCursor::new(func).at_bottom(dispatch);
    let enough = pos
        .ins()
        .icmp_imm_u(IntCC::UnsignedGreaterThanOrEqual, left, factor);
    let args: Vec<BlockArg> = params.iter().map(|&v| v.into()).collect();
    pos.ins().brif(enough, link_header(0), &args, header, &args);

    for (k, link) in links.iter().enumerate() {
        let back = link.insts[&latch];
        let test = link.insts[&exit];
        let here = link_header(k);
        if k + 1 < links.len() {
            let next = link_header(k + 1);
            // Not the last link: the exit test goes on, and the back edge
            // (a `jump`, or the exit test itself) to the next link's header.
            if test != back {
                go_on(func, test, 1 - leaving);
            }
            let back = if test == back {
                let block = func.layout.inst_block(back)?;
                let to_header = destinations(func, back).iter().position(|&b| b == here)?;
                go_on(func, back, to_header);
                func.layout.last_inst(block)?
            } else {
                back
            };
            retarget(func, back, here, next, None);
        } else {
            let extra = match remaining {
                Remaining::Count => {
                    let mut pos = FuncCursor::new(func).at_inst(back);
                    Some(pos.ins().iadd_imm_s(left, -factor))
                }
                Remaining::Param(_) => None,
            };
            retarget(func, back, here, dispatch, extra);
        }
        if k > 0 {
            for inst in time_check.into_iter().flatten() {
                func.layout.remove_inst(link.insts[&inst]);
            }
        }
    }
    Some(dispatch)
}

/// The blocks `branch` goes to, in order.
fn destinations(func: &Function, branch: Inst) -> Vec<Block> {
    let dfg = &func.dfg;
    dfg.insts[branch]
        .branch_destination(&dfg.jump_tables, &dfg.exception_tables)
        .iter()
        .map(|call| call.block(&dfg.value_lists))
        .collect()
}

/// Replaces the `brif` `branch` by a `jump` to its destination `to`, with
/// its arguments.
fn go_on(func: &mut Function, branch: Inst, to: usize) {
    let InstructionData::Brif { blocks, .. } = func.dfg.insts[branch] else {
        return;
    };
    let block = blocks[to].block(&func.dfg.value_lists);
    let args: Vec<BlockArg> = blocks[to].args(&func.dfg.value_lists).collect();
    let srcloc = func.srcloc(branch);
    let mut pos = FuncCursor::new(func).at_inst(branch).with_srcloc(srcloc);
    pos.ins().jump(block, &args);
    func.layout.remove_inst(branch);
}

/// Sends `branch`'s destination `from` to `to` instead, with `extra`
/// appended to its arguments.
fn retarget(func: &mut Function, branch: Inst, from: Block, to: Block, extra: Option<Value>) {
    let dfg = &mut func.dfg;
    for call in
        dfg.insts[branch].branch_destination_mut(&mut dfg.jump_tables, &mut dfg.exception_tables)
    {
        if call.block(&dfg.value_lists) == from {
            call.set_block(to, &mut dfg.value_lists);
            if let Some(v) = extra {
                call.append_argument(v, &mut dfg.value_lists);
            }
        }
    }
}

/// The header's time check: its `trapnz` and what computes it.
fn time_check(func: &Function, header: Block) -> Option<[Inst; 4]> {
    func.layout
        .block_insts(header)
        .find_map(|inst| match func.dfg.insts[inst] {
            InstructionData::CondTrap {
                opcode: Opcode::Trapnz,
                arg,
                code,
            } if KernelTrap::from_trap_code(code) == Some(KernelTrap::TimeLimit) => {
                clock_chain(func, inst, arg)
            }
            _ => None,
        })
}
