//! Unrolling a versioned loop's copy. The copy that loop versioning
//! (`version`) makes has no checks left but the time check, and runs a
//! count known at its entry; a small body run once per pass still makes
//! the GPU wait on each pass's loads before it can issue the next pass's
//! (ptxas left the matmul's copy, with its time check's branch to a trap
//! stub, not unrolled; nvcc unrolls the twin's loop by 16). So the copy
//! gets [`FACTOR`] more copies chained one after another (four links made
//! the benchmark's matmul 1.00x of nvcc on an H100, eight 1.06x):
//!
//! - a *dispatch* block with the header's parameters goes to the chain
//!   when the counter is at least [`FACTOR`], else to the copy (which then
//!   runs the last, fewer passes itself);
//! - each link's back edge but the last's becomes a `jump` to the next
//!   link's header (its counter is at least 1 there, so the `brif` would
//!   always have taken it); the last link's back edge goes to the dispatch
//!   block, its exit stays;
//! - only the first link reads the clock: the chain is [`FACTOR`] passes of
//!   a body without loops between two time checks, bounded work as a
//!   counted loop's passes are (`counted`).
//!
//! The loop versioning's entry test then branches to the dispatch block
//! instead of the copy's header.

use alloc::collections::BTreeMap;
use alloc::vec::Vec;

use cranelift_codegen::cursor::{Cursor, FuncCursor};
use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::{
    Block, BlockArg, Function, Inst, InstBuilder, InstructionData, Opcode, Value,
};

use super::copy::copy_blocks;
use super::counted::clock_chain;
use crate::lower::KernelTrap;

/// Passes per link of the chain.
const FACTOR: i64 = 8;

/// The most instructions a copy may have to be unrolled.
const MAX_BODY_INSTS: usize = 96;

/// Unrolls the versioned copy `blocks` (header `header`, back edge `latch`,
/// counter at header parameter `counter`; module docs); the dispatch block
/// to enter it by, or `None` when it is not unrolled (too large, or not
/// of the expected shape).
pub(super) fn unroll(
    func: &mut Function,
    blocks: &[Block],
    header: Block,
    latch: Inst,
    counter: usize,
) -> Option<Block> {
    let size: usize = blocks
        .iter()
        .map(|&b| func.layout.block_insts(b).count())
        .sum();
    if size > MAX_BODY_INSTS {
        return None;
    }
    let time_check = time_check(func, header)?;
    let InstructionData::Brif {
        blocks: [taken, _], ..
    } = func.dfg.insts[latch]
    else {
        return None;
    };
    if taken.block(&func.dfg.value_lists) != header {
        return None;
    }

    // The dispatch block: the chain when at least FACTOR passes are left.
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
    func.layout.append_block(dispatch);

    let links: Vec<_> = (0..FACTOR)
        .map(|_| copy_blocks(func, blocks, BTreeMap::new()))
        .collect();
    let header_index = blocks.iter().position(|&b| b == header)?;
    let link_header = |k: usize| links[k].blocks[header_index];

    let mut pos = FuncCursor::new(func).at_bottom(dispatch);
    let enough = pos
        .ins()
        .icmp_imm_u(IntCC::UnsignedGreaterThanOrEqual, params[counter], FACTOR);
    let args: Vec<BlockArg> = params.iter().map(|&v| v.into()).collect();
    pos.ins().brif(enough, link_header(0), &args, header, &args);

    for (k, link) in links.iter().enumerate() {
        let back = link.insts[&latch];
        if k + 1 < links.len() {
            // Not the last link: on to the next one's header.
            let InstructionData::Brif {
                blocks: [taken, _], ..
            } = func.dfg.insts[back]
            else {
                return None;
            };
            let args: Vec<BlockArg> = taken.args(&func.dfg.value_lists).collect();
            let srcloc = func.srcloc(back);
            let mut pos = FuncCursor::new(func).at_inst(back).with_srcloc(srcloc);
            pos.ins().jump(link_header(k + 1), &args);
            func.layout.remove_inst(back);
        } else {
            let dfg = &mut func.dfg;
            if let InstructionData::Brif { blocks, .. } = &mut dfg.insts[back] {
                blocks[0].set_block(dispatch, &mut dfg.value_lists);
            }
        }
        if k > 0 {
            for inst in time_check {
                func.layout.remove_inst(link.insts[&inst]);
            }
        }
    }
    Some(dispatch)
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
