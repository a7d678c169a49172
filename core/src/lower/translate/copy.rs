//! Copies of blocks: what loop versioning (`version`) and the kernel's
//! copy for aligned arguments (`specialize`) are made of. A copy has new
//! blocks, parameters, instructions and results; its branches between the
//! copied blocks go to the copies; every other value it uses stays.

use alloc::collections::BTreeMap;
use alloc::vec::Vec;

use cranelift_codegen::entity::EntityRef;
use cranelift_codegen::ir::{
    Block, BlockCall, Function, Inst, InstructionData, JumpTableData, Value,
};

/// What [`copy_blocks`] made: each value and instruction of the copied
/// blocks to its copy, and the new blocks in order.
pub(super) struct Copied {
    pub(super) values: BTreeMap<Value, Value>,
    pub(super) insts: BTreeMap<Inst, Inst>,
    pub(super) blocks: Vec<Block>,
}

impl Copied {
    /// `v`'s copy, or `v` when it was defined outside the blocks.
    pub(super) fn value(&self, v: Value) -> Value {
        self.values.get(&v).copied().unwrap_or(v)
    }
}

/// Copies `blocks` to the end of the layout: every parameter and result a
/// new value, branches between them to the copies, values from outside
/// unchanged but those `values` maps (to what the copy uses instead).
pub(super) fn copy_blocks(
    func: &mut Function,
    blocks: &[Block],
    values: BTreeMap<Value, Value>,
) -> Copied {
    let mut copied = Copied {
        values,
        insts: BTreeMap::new(),
        blocks: Vec::new(),
    };
    let mut block_map: BTreeMap<Block, Block> = BTreeMap::new();
    for &block in blocks {
        let copy = func.dfg.make_block();
        for p in func.dfg.block_params(block).to_vec() {
            let ty = func.dfg.value_type(p);
            let q = func.dfg.append_block_param(copy, ty);
            copied.values.insert(p, q);
        }
        func.layout.append_block(copy);
        block_map.insert(block, copy);
        copied.blocks.push(copy);
        let insts: Vec<Inst> = func.layout.block_insts(block).collect();
        for inst in insts {
            let new = func.dfg.clone_inst(inst);
            func.layout.append_inst(new, copy);
            func.set_srcloc(new, func.srcloc(inst));
            let (old, now) = (func.dfg.inst_results(inst), func.dfg.inst_results(new));
            for (&a, &b) in old.iter().zip(now) {
                copied.values.insert(a, b);
            }
            copied.insts.insert(inst, new);
        }
    }
    let resolved = resolved(func);
    for &new in copied.insts.values() {
        let dfg = &mut func.dfg;
        // A branch table's targets live in a table the copy must not share.
        if let InstructionData::BranchTable { table, .. } = dfg.insts[new] {
            let data = dfg.jump_tables[table].clone();
            let default = data.default_block().deep_clone(&mut dfg.value_lists);
            let targets: Vec<BlockCall> = data
                .as_slice()
                .iter()
                .map(|t| t.deep_clone(&mut dfg.value_lists))
                .collect();
            let fresh = dfg.jump_tables.push(JumpTableData::new(default, &targets));
            if let InstructionData::BranchTable { table, .. } = &mut dfg.insts[new] {
                *table = fresh;
            }
        }
        dfg.map_inst_values(new, |v| copied.value(resolved[v.index()]));
        let pool = &mut dfg.value_lists;
        for call in
            dfg.insts[new].branch_destination_mut(&mut dfg.jump_tables, &mut dfg.exception_tables)
        {
            if let Some(&to) = block_map.get(&call.block(pool)) {
                call.set_block(to, pool);
            }
        }
    }
    copied
}

/// Every value of `func` with its aliases resolved, by number.
pub(super) fn resolved(func: &Function) -> Vec<Value> {
    let dfg = &func.dfg;
    (0..dfg.num_values())
        .map(|i| dfg.resolve_aliases(Value::new(i)))
        .collect()
}
