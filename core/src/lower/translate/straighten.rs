//! Straight code in one block. The translator's passes leave chains of
//! blocks joined by plain jumps: blocks that only jump on (an `if`'s empty
//! arm, a loop exit's landing), and, above all, the links of an unrolled
//! loop copy (`unroll`), each its own block. The PTX lowerer schedules
//! within a block only (`ptx::schedule`: arithmetic sinks to its first
//! use, so the loads ahead of it issue together), and ptxas did not move
//! the loads of one link above the arithmetic of the one before it (a
//! triangular solve's chain kept about four of its 32 loads in flight;
//! nvcc's unrolled twin all of them). This pass, the translator's last:
//!
//! - *threads* a block that holds nothing but a `jump` without block
//!   parameters of its own: every edge into it but a jump table's goes
//!   straight to its
//!   destination, with its arguments (they are defined on every path to
//!   the block, so on every path to each of its predecessors' branches);
//! - *merges* a block into its predecessor when a `jump` is its only way
//!   in: its parameters become the jump's arguments, its instructions
//!   follow the predecessor's.
//!
//! Neither changes what any instruction computes or the order of any two
//! effects; the PTX gets fewer labels and branches, and the links of a
//! chain become one block.

use alloc::collections::{BTreeMap, BTreeSet};
use alloc::vec::Vec;

use cranelift_codegen::ir::{Block, BlockArg, Function, Inst, InstructionData};

/// Threads jump-only blocks and merges single-predecessor jump targets
/// into their predecessors (module docs).
pub(super) fn straighten(func: &mut Function) {
    thread_empty_blocks(func);
    merge_jump_targets(func);
    func.dfg.resolve_all_aliases();
}

/// The edges into each block: per destination, how many branch
/// destinations (jump-table entries included) name it.
fn edges_into(func: &Function) -> BTreeMap<Block, usize> {
    let mut into = BTreeMap::new();
    for block in func.layout.blocks() {
        let Some(last) = func.layout.last_inst(block) else {
            continue;
        };
        let dfg = &func.dfg;
        for call in dfg.insts[last].branch_destination(&dfg.jump_tables, &dfg.exception_tables) {
            *into.entry(call.block(&dfg.value_lists)).or_insert(0) += 1;
        }
    }
    into
}

/// `Some((destination, arguments))` when `block` holds only a `jump` and
/// has no parameters.
fn jump_only(func: &Function, block: Block) -> Option<(Block, Vec<BlockArg>)> {
    if !func.dfg.block_params(block).is_empty() {
        return None;
    }
    let first = func.layout.first_inst(block)?;
    if func.layout.last_inst(block) != Some(first) {
        return None;
    }
    let InstructionData::Jump { destination, .. } = func.dfg.insts[first] else {
        return None;
    };
    let to = destination.block(&func.dfg.value_lists);
    let args = destination.args(&func.dfg.value_lists).collect();
    (to != block).then_some((to, args))
}

/// Every edge into a jump-only block goes to its destination instead; the
/// block, then unreached, leaves the layout.
fn thread_empty_blocks(func: &mut Function) {
    let Some(entry) = func.layout.entry_block() else {
        return;
    };
    let empty: BTreeMap<Block, (Block, Vec<BlockArg>)> = func
        .layout
        .blocks()
        .filter(|&b| b != entry)
        .filter_map(|b| jump_only(func, b).map(|j| (b, j)))
        .collect();
    if empty.is_empty() {
        return;
    }
    // Where an edge into each jump-only block ends up: past every
    // jump-only block (an edge into one has no arguments, as it has no
    // parameters), unless they make a cycle (code that never ends stays
    // as it is: `None`). Each chain is walked once (a kernel of thousands
    // of nested `block`s makes chains of thousands).
    let mut resolved: BTreeMap<Block, Option<(Block, Vec<BlockArg>)>> = BTreeMap::new();
    for &first in empty.keys() {
        let mut path: Vec<Block> = Vec::new();
        let mut on_path: BTreeSet<Block> = BTreeSet::new();
        let mut at = first;
        let end = loop {
            if let Some(known) = resolved.get(&at) {
                break known.clone();
            }
            if !on_path.insert(at) {
                break None;
            }
            path.push(at);
            let (to, args) = &empty[&at];
            if !empty.contains_key(to) {
                break Some((*to, args.clone()));
            }
            at = *to;
        };
        for block in path {
            resolved.insert(block, end.clone());
        }
    }
    let resolve = |block: Block| resolved.get(&block).cloned().flatten();
    let blocks: Vec<Block> = func.layout.blocks().collect();
    for block in blocks {
        let Some(last) = func.layout.last_inst(block) else {
            continue;
        };
        // A jump table's edges keep going through the block: the
        // translator gives them no arguments, and what reads its CLIF
        // relies on that.
        if matches!(func.dfg.insts[last], InstructionData::BranchTable { .. }) {
            continue;
        }
        let dfg = &mut func.dfg;
        for call in
            dfg.insts[last].branch_destination_mut(&mut dfg.jump_tables, &mut dfg.exception_tables)
        {
            let from = call.block(&dfg.value_lists);
            if call.args(&dfg.value_lists).next().is_some() {
                // An edge with arguments names a block with parameters,
                // which is never jump-only.
                continue;
            }
            if let Some((to, args)) = resolve(from) {
                call.set_block(to, &mut dfg.value_lists);
                for arg in args {
                    call.append_argument(arg, &mut dfg.value_lists);
                }
            }
        }
    }
    let into = edges_into(func);
    for block in empty.keys() {
        if !into.contains_key(block) {
            if let Some(jump) = func.layout.first_inst(*block) {
                func.layout.remove_inst(jump);
            }
            func.layout.remove_block(*block);
        }
    }
}

/// Merges each block whose only way in is a `jump` into the block that
/// jumps (module docs).
fn merge_jump_targets(func: &mut Function) {
    let Some(entry) = func.layout.entry_block() else {
        return;
    };
    let into = edges_into(func);
    let blocks: Vec<Block> = func.layout.blocks().collect();
    for block in blocks {
        if !func.layout.is_block_inserted(block) {
            continue;
        }
        // The merged block may end in another such jump: go on.
        while let Some(next) = mergeable(func, block, entry, &into) {
            merge(func, block, next);
        }
    }
}

/// The block `block`'s last instruction jumps to, when that jump is its
/// only way in and it may be merged into `block`.
fn mergeable(
    func: &Function,
    block: Block,
    entry: Block,
    into: &BTreeMap<Block, usize>,
) -> Option<Block> {
    let last = func.layout.last_inst(block)?;
    let InstructionData::Jump { destination, .. } = func.dfg.insts[last] else {
        return None;
    };
    let next = destination.block(&func.dfg.value_lists);
    let params = func.dfg.block_params(next);
    let reads_own_param = destination
        .args(&func.dfg.value_lists)
        .filter_map(|a| a.as_value())
        .any(|v| params.contains(&func.dfg.resolve_aliases(v)));
    (next != block
        && next != entry
        && into.get(&next) == Some(&1)
        && func.layout.is_cold(next) == func.layout.is_cold(block)
        && !reads_own_param)
        .then_some(next)
}

/// Appends `next`'s instructions to `block` in place of its jump.
fn merge(func: &mut Function, block: Block, next: Block) {
    let jump: Inst = func.layout.last_inst(block).expect("a jump");
    let InstructionData::Jump { destination, .. } = func.dfg.insts[jump] else {
        return;
    };
    let args: Vec<_> = destination
        .args(&func.dfg.value_lists)
        .filter_map(|a| a.as_value())
        .collect();
    let params = func.dfg.detach_block_params(next);
    let params: Vec<_> = params.as_slice(&func.dfg.value_lists).to_vec();
    debug_assert_eq!(params.len(), args.len());
    for (param, arg) in params.into_iter().zip(args) {
        func.dfg.change_to_alias(param, arg);
    }
    func.layout.remove_inst(jump);
    while let Some(inst) = func.layout.first_inst(next) {
        func.layout.remove_inst(inst);
        func.layout.append_inst(inst, block);
    }
    func.layout.remove_block(next);
}

/// Removes the blocks no path from the entry reaches (a variant's entry
/// that no longer branches to the other variant's body leaves it behind).
pub(super) fn remove_unreachable(func: &mut Function) {
    let Some(entry) = func.layout.entry_block() else {
        return;
    };
    let mut seen = BTreeSet::new();
    let mut work = alloc::vec![entry];
    seen.insert(entry);
    while let Some(block) = work.pop() {
        let Some(last) = func.layout.last_inst(block) else {
            continue;
        };
        let dfg = &func.dfg;
        for call in dfg.insts[last].branch_destination(&dfg.jump_tables, &dfg.exception_tables) {
            let to = call.block(&dfg.value_lists);
            if seen.insert(to) {
                work.push(to);
            }
        }
    }
    let dead: Vec<Block> = func.layout.blocks().filter(|b| !seen.contains(b)).collect();
    for block in dead {
        while let Some(inst) = func.layout.first_inst(block) {
            func.layout.remove_inst(inst);
        }
        func.layout.remove_block(block);
    }
}

#[cfg(test)]
mod tests {
    use alloc::vec::Vec;

    use cranelift_codegen::ir::types::I32;
    use cranelift_codegen::ir::{
        AbiParam, Function, InstBuilder, InstructionData, Signature, UserFuncName,
    };
    use cranelift_codegen::isa::CallConv;
    use cranelift_codegen::settings::{self, Flags};
    use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext};

    use super::straighten;

    fn function() -> Function {
        let mut signature = Signature::new(CallConv::SystemV);
        signature.params.push(AbiParam::new(I32));
        signature.returns.push(AbiParam::new(I32));
        Function::with_name_signature(UserFuncName::user(0, 0), signature)
    }

    fn verified(func: &Function) {
        let flags = Flags::new(settings::builder());
        if let Err(e) = cranelift_codegen::verifier::verify_function(func, &flags) {
            panic!("invalid after straighten: {e}\n{func}");
        }
    }

    #[test]
    fn a_chain_of_jumps_becomes_one_block_that_computes_the_same() {
        // block0(x): jump block1(x + 1); block1(p): jump block2(p * p);
        // block2(q): return q
        let mut func = function();
        let mut context = FunctionBuilderContext::new();
        let mut b = FunctionBuilder::new(&mut func, &mut context);
        let [b0, b1, b2] = [(); 3].map(|_| b.create_block());
        b.append_block_params_for_function_params(b0);
        let p = b.append_block_param(b1, I32);
        let q = b.append_block_param(b2, I32);
        b.switch_to_block(b0);
        let x = b.block_params(b0)[0];
        let x1 = b.ins().iadd_imm_s(x, 1);
        b.ins().jump(b1, &[x1.into()]);
        b.switch_to_block(b1);
        let pp = b.ins().imul(p, p);
        b.ins().jump(b2, &[pp.into()]);
        b.switch_to_block(b2);
        b.ins().return_(&[q]);
        b.seal_all_blocks();

        straighten(&mut func);
        verified(&func);
        let blocks: Vec<_> = func.layout.blocks().collect();
        assert_eq!(blocks, [b0]);
        let insts: Vec<_> = func.layout.block_insts(b0).collect();
        // iconst, iadd, imul, return: the multiply reads the add's
        // result, the return the multiply's.
        assert_eq!(insts.len(), 4, "{func}");
        assert_eq!(func.dfg.inst_args(insts[2]), [x1, x1]);
        assert_eq!(func.dfg.inst_args(insts[3]), [pp]);
    }

    #[test]
    fn a_block_with_two_ways_in_is_kept_and_an_empty_one_is_passed_by() {
        // block0(x): brif x, block1, block2; block1: jump block3(x);
        // block2: jump block3(1); block3(r): return r. block1 and block2
        // hold only jumps with arguments (they have no parameters): both
        // edges of the brif go to block3 directly; block3 keeps its two
        // ways in and is not merged.
        let mut func = function();
        let mut context = FunctionBuilderContext::new();
        let mut b = FunctionBuilder::new(&mut func, &mut context);
        let [b0, b1, b2, b3] = [(); 4].map(|_| b.create_block());
        b.append_block_params_for_function_params(b0);
        let r = b.append_block_param(b3, I32);
        b.switch_to_block(b0);
        let x = b.block_params(b0)[0];
        b.ins().brif(x, b1, &[], b2, &[]);
        b.switch_to_block(b1);
        b.ins().jump(b3, &[x.into()]);
        b.switch_to_block(b2);
        let one = b.ins().iconst(I32, 1);
        b.ins().jump(b3, &[one.into()]);
        b.switch_to_block(b3);
        b.ins().return_(&[r]);
        b.seal_all_blocks();

        straighten(&mut func);
        verified(&func);
        // block2 computes the constant: it is not jump-only and stays.
        let blocks: Vec<_> = func.layout.blocks().collect();
        assert_eq!(blocks, [b0, b2, b3], "{func}");
        let brif = func.layout.last_inst(b0).expect("a branch");
        let InstructionData::Brif { blocks: to, .. } = func.dfg.insts[brif] else {
            panic!("{func}");
        };
        assert_eq!(to[0].block(&func.dfg.value_lists), b3);
        assert_eq!(to[1].block(&func.dfg.value_lists), b2);
        assert_eq!(func.dfg.block_params(b3), [r]);
    }

    #[test]
    fn jump_only_blocks_in_a_cycle_stay() {
        // block0: brif x, block1, block3; block1: jump block2;
        // block2: jump block1 (a loop that never ends); block3: return.
        let mut func = function();
        let mut context = FunctionBuilderContext::new();
        let mut b = FunctionBuilder::new(&mut func, &mut context);
        let [b0, b1, b2, b3] = [(); 4].map(|_| b.create_block());
        b.append_block_params_for_function_params(b0);
        b.switch_to_block(b0);
        let x = b.block_params(b0)[0];
        b.ins().brif(x, b1, &[], b3, &[]);
        b.switch_to_block(b1);
        b.ins().jump(b2, &[]);
        b.switch_to_block(b2);
        b.ins().jump(b1, &[]);
        b.switch_to_block(b3);
        b.ins().return_(&[x]);
        b.seal_all_blocks();

        straighten(&mut func);
        verified(&func);
        let brif = func.layout.last_inst(b0).expect("a branch");
        let InstructionData::Brif { blocks: to, .. } = func.dfg.insts[brif] else {
            panic!("{func}");
        };
        let into = to[0].block(&func.dfg.value_lists);
        assert!(into == b1 || into == b2, "{func}");
        assert!(func.layout.is_block_inserted(into), "{func}");
    }
}
