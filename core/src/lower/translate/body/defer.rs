//! Bounds tests of shared loads, moved later. A shared load is made at a
//! safe offset (its own when in bounds, 0 when not: the block's shared
//! memory is never smaller than 16 bytes, so offset 0 holds any value) and
//! its bounds test follows it. This pass moves each such test further down
//! its block, past instructions that have no effect and cannot trap (pure
//! arithmetic, other safe shared loads), to just before the next one that
//! may (a store, a call, a branch, any other trap). Nothing the kernel
//! does between the test's old place and its new one can be seen, and the
//! tests keep their order, so the first failing test still traps with its
//! own code and offset. What the GPU gains: a block's shared loads are no
//! longer separated by branches, so they are all in flight at once.

use alloc::vec::Vec;

use cranelift_codegen::ir::{Function, Inst};

/// A shared load made at a safe offset, and its bounds test (`trapnz`).
#[derive(Clone, Copy)]
pub(super) struct Deferred {
    /// The load.
    pub(super) load: Inst,
    /// Its bounds test.
    pub(super) test: Inst,
}

/// Moves each of `deferred`'s tests to just before the next instruction of
/// its block that has an effect or may trap.
pub(super) fn defer_bounds_tests(func: &mut Function, deferred: &[Deferred]) {
    if deferred.is_empty() {
        return;
    }
    let tests: Vec<Inst> = deferred.iter().map(|d| d.test).collect();
    let loads: Vec<Inst> = deferred.iter().map(|d| d.load).collect();
    let blocks: Vec<_> = func.layout.blocks().collect();
    for block in blocks {
        let insts: Vec<Inst> = func.layout.block_insts(block).collect();
        let mut pending: Vec<Inst> = Vec::new();
        for inst in insts {
            if tests.contains(&inst) {
                pending.push(inst);
                continue;
            }
            if loads.contains(&inst) || harmless(func, inst) {
                continue;
            }
            for test in pending.drain(..) {
                func.layout.remove_inst(test);
                func.layout.insert_inst(test, inst);
            }
        }
        // Every block ends in a branch, which is not harmless: nothing is
        // left pending.
        debug_assert!(pending.is_empty());
    }
}

/// Whether `inst` has no effect and cannot trap: it may run before a test
/// that fails without anything being seen.
fn harmless(func: &Function, inst: Inst) -> bool {
    let op = func.dfg.insts[inst].opcode();
    !(op.is_call()
        || op.is_branch()
        || op.is_terminator()
        || op.can_trap()
        || op.can_load()
        || op.can_store()
        || op.other_side_effects())
}
