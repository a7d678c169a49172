//! Guest bounds tests in 32 bits. The translator tests a guest access at
//! `i32` address `x` with end `k` (its offset plus its size) as
//! `uextend(x) + k > mem_len` in 64 bits, which costs the GPU four
//! instructions (a 64-bit add and a 64-bit compare, two each). With
//! `lim_k = min(max(mem_len - k + 1, 0), 2^32 - 1)`, worked out once in
//! the entry block for each `k`, the test is `x >= lim_k` (unsigned,
//! `i32`): one instruction.
//!
//! The two are the same test for every `k >= 2` (`mem_len <= 2^32`, so
//! `mem_len - k + 1` fits in 32 bits; when it is negative no address is in
//! bounds and `lim_k = 0` fails every `x`). For `k = 1` they differ at one
//! point: the last byte of a full 4 GiB memory, which `lim_1 = 2^32 - 1`
//! refuses; a test of its own keeps the 64-bit form there
//! ([`narrow_guest_tests`]), and a merged test (`merge`), which needs only
//! to pass no address the exact tests would refuse, may use `lim_1`.
//!
//! A test that passes `x < lim_k` also proves `x + d` does not wrap for
//! every `d < k` (`x + k <= mem_len <= 2^32`), which `merge` uses to test
//! several addresses `x + d` at once.

use alloc::collections::BTreeSet;
use alloc::vec::Vec;

use cranelift_codegen::cursor::{Cursor, FuncCursor};
use cranelift_codegen::flowgraph::ControlFlowGraph;
use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::types::{I32, I64};
use cranelift_codegen::ir::{
    Block, Function, Inst, InstBuilder, InstructionData, Opcode, Value, ValueDef,
};

use super::align::{compare_trap, constant};
use super::specialize::BOUNDED_MIN_LEN;
use crate::lower::KernelTrap;

/// The most limits a kernel keeps (each holds a register for the whole
/// kernel); a test of another end keeps its 64-bit form.
const MAX_LIMITS: usize = 12;

/// The deepest nest of constant `iadd`s a test's end is summed through.
const MAX_DEPTH: usize = 8;

/// The kernel's `lim_k`s (module docs), made in the entry block on first
/// use, and which of its blocks are *bounded*: they run only on memories
/// of [`BOUNDED_MIN_LEN`] to
/// [`BOUNDED_LEN`](super::specialize::BOUNDED_LEN) bytes (the copy for aligned
/// arguments, `specialize`), where `lim_k = len - k + 1` for every `k <=
/// BOUNDED_MIN_LEN + 1`, one 32-bit subtraction, is exact (`k = 1`
/// included) and needs no clamp.
pub(super) struct GuestLimits {
    entry: Block,
    /// `(len, end, bounded, lim)`.
    made: Vec<(Value, i64, bool, Value)>,
    /// `(len, ireduce(len))`.
    narrow: Vec<(Value, Value)>,
    /// The blocks that are not bounded; `None`: no block is.
    unbounded: Option<BTreeSet<Block>>,
}

impl GuestLimits {
    /// No limits yet; `func`'s entry block will hold them. `specialized`:
    /// whether the kernel has a copy for aligned arguments, whose entry
    /// block ends in `brif ok, copy, body`: every block reachable from
    /// `body` is not bounded, every other but the entry is; or, the copy
    /// alone (`BodyVariant::Aligned`), in a jump to the copy: every block
    /// but the entry is.
    pub(super) fn new(func: &Function, specialized: bool) -> Option<Self> {
        let entry = func.layout.entry_block()?;
        let unbounded = if specialized {
            let last = func.layout.last_inst(entry)?;
            let blocks = match func.dfg.insts[last] {
                InstructionData::Brif { blocks, .. } => blocks,
                InstructionData::Jump { .. } => {
                    return Some(Self {
                        entry,
                        made: Vec::new(),
                        narrow: Vec::new(),
                        unbounded: Some(BTreeSet::new()),
                    });
                }
                _ => return None,
            };
            let body = blocks[1].block(&func.dfg.value_lists);
            let cfg = ControlFlowGraph::with_function(func);
            let mut reached = BTreeSet::from([body]);
            let mut work = alloc::vec![body];
            while let Some(b) = work.pop() {
                for next in cfg.succ_iter(b) {
                    if reached.insert(next) {
                        work.push(next);
                    }
                }
            }
            Some(reached)
        } else {
            None
        };
        Some(Self {
            entry,
            made: Vec::new(),
            narrow: Vec::new(),
            unbounded,
        })
    }

    /// Whether `block` is bounded (type docs).
    pub(super) fn bounded(&self, block: Block) -> bool {
        self.unbounded
            .as_ref()
            .is_some_and(|u| block != self.entry && !u.contains(&block))
    }

    /// `new` was split from `from` (or runs only from it): it is bounded
    /// where `from` is.
    pub(super) fn inherit(&mut self, from: Block, new: Block) {
        if let Some(u) = self.unbounded.as_mut()
            && u.contains(&from)
        {
            u.insert(new);
        }
    }

    /// `lim_end` of memory length `len` (a parameter of the entry block),
    /// made at the top of the entry block the first time; its bounded form
    /// (type docs) when `bounded` and `end` allows. `None` past
    /// [`MAX_LIMITS`] or when `len` is not made in the entry block (a
    /// parameter, or [`clamp_memory_length`]'s value).
    pub(super) fn limit(
        &mut self,
        func: &mut Function,
        len: Value,
        end: i64,
        bounded: bool,
    ) -> Option<Value> {
        let bounded = bounded && (1..=BOUNDED_MIN_LEN + 1).contains(&end);
        if let Some(&(.., v)) = self
            .made
            .iter()
            .find(|m| m.0 == len && m.1 == end && m.2 == bounded)
        {
            return Some(v);
        }
        // Where the entry block has `len`: its top, or after its definition.
        let first = match func.dfg.value_def(len) {
            ValueDef::Param(b, _) if b == self.entry => func.layout.first_inst(self.entry)?,
            ValueDef::Result(def, _) if func.layout.inst_block(def) == Some(self.entry) => {
                func.layout.next_inst(def)?
            }
            _ => return None,
        };
        if self.made.len() >= MAX_LIMITS {
            return None;
        }
        let v = if bounded {
            let narrow = match self.narrow.iter().find(|n| n.0 == len) {
                Some(&(_, n)) => n,
                None => {
                    let mut pos = FuncCursor::new(func).at_inst(first);
                    let n = pos.ins().ireduce(I32, len);
                    self.narrow.push((len, n));
                    n
                }
            };
            // After `narrow`, where the entry block has `len`.
            let def = func.dfg.value_def(narrow).inst()?;
            let mut pos = FuncCursor::new(func).after_inst(def);
            pos.ins().iadd_imm_s(narrow, 1 - end)
        } else {
            let mut pos = FuncCursor::new(func).at_inst(first);
            // `len - end + 1` is exact in `i64` (`len <= 2^32`, `end < 2^34`).
            let less = pos.ins().iadd_imm_s(len, 1 - end);
            let zero = pos.ins().iconst(I64, 0);
            let negative = pos.ins().icmp(IntCC::SignedLessThan, less, zero);
            let floor = pos.ins().select(negative, zero, less);
            if end >= 2 {
                // `len - end + 1 < 2^32`: no upper clamp.
                pos.ins().ireduce(I32, floor)
            } else {
                let top = pos.ins().iconst(I64, i64::from(u32::MAX));
                let over = pos.ins().icmp(IntCC::UnsignedGreaterThan, floor, top);
                let clamped = pos.ins().select(over, top, floor);
                pos.ins().ireduce(I32, clamped)
            }
        };
        self.made.push((len, end, bounded, v));
        Some(v)
    }

    /// The exact test of a guest access (or group) of end `end` in a block
    /// bounded or not: against its limit where that is exact (a bounded
    /// block's, or `end >= 2`), else in 64 bits.
    pub(super) fn exact(
        &mut self,
        func: &mut Function,
        len: Value,
        end: i64,
        bounded: bool,
    ) -> Exact {
        let bounded_end = bounded && (1..=BOUNDED_MIN_LEN + 1).contains(&end);
        match self.limit(func, len, end, bounded) {
            Some(limit) if end >= 2 || bounded_end => Exact::Below(limit),
            _ => Exact::Past,
        }
    }
}

/// Makes every use of the memory's length `len` (an entry parameter) use
/// `min(len, bound)` instead, worked out at the top of the entry block,
/// and returns that value. `bound` is the most any launch of the kernel
/// may pass: 4 GiB for a wasm32 memory, [`BOUNDED_LEN`](super::specialize::BOUNDED_LEN) for the aligned
/// copy alone (`specialize`). No launch the host makes changes, but ptxas
/// then knows the range, which it otherwise learns only from a branch on
/// it: without one, the aligned copy of a triangular solve (a loop nest
/// whose bounds tests are proved per loop against the length) ran 25%
/// slower on an H200 (7.47 ms against 5.91 ms with the clamp). Where a
/// length past `bound` did come, every test is against `bound` (none
/// passes an address the memory does not hold), and the copy's 32-bit
/// limits (`GuestLimits`) keep from wrapping.
pub(super) fn clamp_memory_length(func: &mut Function, len: Value, bound: i64) -> Option<Value> {
    let entry = func.layout.entry_block()?;
    let first = func.layout.first_inst(entry)?;
    let mut pos = FuncCursor::new(func).at_inst(first);
    let over = pos.ins().icmp_imm_u(IntCC::UnsignedGreaterThan, len, bound);
    let top = pos.ins().iconst(I64, bound);
    let clamped = pos.ins().select(over, top, len);
    let made: Vec<Inst> = [over, top, clamped]
        .iter()
        .filter_map(|&v| func.dfg.value_def(v).inst())
        .collect();
    let blocks: Vec<Block> = func.layout.blocks().collect();
    for block in blocks {
        let insts: Vec<Inst> = func.layout.block_insts(block).collect();
        for inst in insts {
            if !made.contains(&inst) {
                func.dfg
                    .map_inst_values(inst, |v| if v == len { clamped } else { v });
            }
        }
    }
    Some(clamped)
}

/// How [`GuestLimits::exact`] tests an access.
pub(super) enum Exact {
    /// Out when the `i32` address `>=` the limit.
    Below(Value),
    /// Out when `uextend(address) + end > len` (64 bits).
    Past,
}

/// A guest bounds test: `trapnz(icmp ugt (uextend(address) + k...),
/// len)`.
pub(super) struct GuestTest {
    /// The `i32` address.
    pub(super) address: Value,
    /// `uextend(address)`, which the access itself uses too.
    pub(super) extended: Value,
    /// The sum of the `k`s: the access's offset and size.
    pub(super) end: i64,
    /// The memory's length.
    pub(super) len: Value,
}

/// The guest bounds test `inst` is: `trapnz(icmp ugt (uextend(x) +
/// k...), len)` with code `HeapOutOfBounds`, `x` an `i32` and the `k`s
/// constants summing to `k < 2^33`.
pub(super) fn guest_test(func: &Function, inst: Inst) -> Option<GuestTest> {
    let dfg = &func.dfg;
    let (cond, x, len) = compare_trap(func, inst, KernelTrap::HeapOutOfBounds)?;
    if cond != IntCC::UnsignedGreaterThan {
        return None;
    }
    let (mut at, mut end) = (x, 0i64);
    for _ in 0..=MAX_DEPTH {
        let def = dfg.value_def(at).inst()?;
        match dfg.insts[def] {
            InstructionData::Binary {
                opcode: Opcode::Iadd,
                args: [a, b],
            } => {
                let k = constant(func, b)?;
                end = end.checked_add(k).filter(|e| (0..1 << 33).contains(e))?;
                at = dfg.resolve_aliases(a);
            }
            InstructionData::Unary {
                opcode: Opcode::Uextend,
                arg,
            } if dfg.value_type(at) == I64 => {
                return (dfg.value_type(arg) == I32).then(|| GuestTest {
                    address: dfg.resolve_aliases(arg),
                    extended: at,
                    end,
                    len,
                });
            }
            _ => return None,
        }
    }
    None
}

/// Rewrites every guest bounds test of `func` that has an exact limit
/// ([`GuestLimits::exact`]: end `k >= 2`, or any `k` in a bounded block)
/// as `x >= lim_k` (module docs): the same test in one instruction.
/// Returns how many it rewrote.
pub(super) fn narrow_guest_tests(func: &mut Function, limits: &mut GuestLimits) -> usize {
    let mut tests = Vec::new();
    for block in func.layout.blocks() {
        for inst in func.layout.block_insts(block) {
            if let Some(t) = guest_test(func, inst) {
                tests.push((inst, t.address, t.end, t.len, limits.bounded(block)));
            }
        }
    }
    let mut narrowed = 0;
    for (inst, x, end, len, bounded) in tests {
        let Exact::Below(limit) = limits.exact(func, len, end, bounded) else {
            continue;
        };
        let srcloc = func.srcloc(inst);
        let mut pos = FuncCursor::new(func).at_inst(inst).with_srcloc(srcloc);
        let out = pos.ins().icmp(IntCC::UnsignedGreaterThanOrEqual, x, limit);
        if let InstructionData::CondTrap { arg, .. } = &mut pos.func.dfg.insts[inst] {
            *arg = out;
            narrowed += 1;
        }
    }
    narrowed
}
