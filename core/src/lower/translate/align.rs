//! Alignment tests the translator can prove pass. A shared access (and an
//! atomic) first traps `HeapMisaligned` unless its offset is a multiple of
//! its size: `trapnz(icmp ne (band ea, size - 1), 0)`. Most
//! offsets are visibly such multiples: the SDK computes `i << 3` for a
//! `u64` array, and a loop's offsets step by multiples of the size. This
//! pass works out, for every integer value of the finished function, how
//! many of its low bits are known to be zero, and removes the tests whose
//! offset has enough of them.
//!
//! The known zeros are a fixed point over the whole function: they start
//! at "all" for every value but the entry block's parameters (the kernel's
//! arguments: none known), and each round lowers a value's count to what
//! its definition gives (constants, sums, products, shifts by constants,
//! masks, extensions, `select`; anything else: none) and a block
//! parameter's to the least of what the branches pass it, until nothing
//! changes. Each round only lowers counts, so it ends; and what it ends on
//! holds of every value any run computes (by induction over the run: the
//! arguments know nothing, and every definition and branch keeps the
//! counts), so a removed test could never have trapped. A round is one
//! pass over the kernel, and a guest's loops could make the rounds many:
//! after [`MAX_ROUNDS`] without an end the pass removes nothing (every test
//! stays, which is always sound).

use alloc::vec::Vec;

use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::{Function, Inst, InstructionData, Opcode, Value};

use crate::lower::KernelTrap;

/// Removes every `HeapMisaligned` test of `func` whose offset is known to
/// be aligned; how many it removed.
pub(super) fn drop_proven_alignment_tests(func: &mut Function) -> usize {
    let Some(zeros) = known_zeros(func, &[]) else {
        return 0;
    };
    let mut proven: Vec<Inst> = Vec::new();
    for block in func.layout.blocks() {
        for inst in func.layout.block_insts(block) {
            if misalignment_test(func, inst).is_some_and(|(ea, bits)| zeros[index(ea)] >= bits) {
                proven.push(inst);
            }
        }
    }
    for &inst in &proven {
        func.layout.remove_inst(inst);
    }
    proven.len()
}

/// `(cond, x, y)` when `inst` is `trapnz(icmp cond x, y)` with code
/// `trap` (the shape of the translator's memory tests).
pub(in crate::lower::translate) fn compare_trap(
    func: &Function,
    inst: Inst,
    trap: KernelTrap,
) -> Option<(IntCC, Value, Value)> {
    let dfg = &func.dfg;
    let InstructionData::CondTrap {
        opcode: Opcode::Trapnz,
        arg,
        code,
    } = dfg.insts[inst]
    else {
        return None;
    };
    if KernelTrap::from_trap_code(code) != Some(trap) {
        return None;
    }
    let compare = dfg.value_def(dfg.resolve_aliases(arg)).inst()?;
    let InstructionData::IntCompare {
        opcode: Opcode::Icmp,
        cond,
        args: [x, y],
    } = dfg.insts[compare]
    else {
        return None;
    };
    Some((cond, dfg.resolve_aliases(x), dfg.resolve_aliases(y)))
}

/// `(ea, k)` when `inst` is `trapnz(icmp ne (band ea, 2^k - 1), 0)`
/// with code `HeapMisaligned`.
fn misalignment_test(func: &Function, inst: Inst) -> Option<(Value, u32)> {
    let dfg = &func.dfg;
    let (IntCC::NotEqual, low, zero) = compare_trap(func, inst, KernelTrap::HeapMisaligned)? else {
        return None;
    };
    if constant(func, zero) != Some(0) {
        return None;
    }
    let mask_inst = dfg.value_def(dfg.resolve_aliases(low)).inst()?;
    let InstructionData::Binary {
        opcode: Opcode::Band,
        args: [x, y],
    } = dfg.insts[mask_inst]
    else {
        return None;
    };
    let (ea, mask) = match (constant(func, x), constant(func, y)) {
        (_, Some(m)) => (x, m),
        (Some(m), None) => (y, m),
        (None, None) => return None,
    };
    let mask = mask as u64;
    // Only masks of low bits (2^k - 1) test alignment.
    if mask == 0 || mask.wrapping_add(1) & mask != 0 {
        return None;
    }
    Some((dfg.resolve_aliases(ea), mask.count_ones()))
}

/// The guest accesses of `func` of more than one byte not flagged
/// `aligned`: each with its `ea` (the access is at `mem_base + ea`) and the
/// low zero bits its size needs.
pub(in crate::lower::translate) fn guest_accesses(
    func: &Function,
    mem_base: Value,
) -> Vec<(Inst, Value, u32)> {
    let dfg = &func.dfg;
    func.layout
        .blocks()
        .flat_map(|block| func.layout.block_insts(block))
        .filter(|&inst| {
            !dfg.insts[inst]
                .memflags_data(dfg)
                .is_some_and(|f| f.aligned())
        })
        .filter_map(|inst| {
            let (ea, bytes) = guest_access(func, inst, mem_base)?;
            Some((inst, ea, bytes.trailing_zeros()))
        })
        .collect()
}

/// `(ea, bytes)` when `inst` loads or stores `bytes > 1` bytes at
/// `mem_base + ea` (the translator's guest access, its offset in `ea`).
pub(in crate::lower::translate) fn guest_access(
    func: &Function,
    inst: Inst,
    mem_base: Value,
) -> Option<(Value, u32)> {
    let dfg = &func.dfg;
    let data = &dfg.insts[inst];
    let (address, bytes) = match (data.opcode(), dfg.inst_args(inst)) {
        (Opcode::Load, &[a]) => (a, dfg.value_type(dfg.first_result(inst)).bytes()),
        (Opcode::Store, &[v, a]) => (a, dfg.value_type(v).bytes()),
        (Opcode::Uload16 | Opcode::Sload16, &[a]) | (Opcode::Istore16, &[_, a]) => (a, 2),
        (Opcode::Uload32 | Opcode::Sload32, &[a]) | (Opcode::Istore32, &[_, a]) => (a, 4),
        _ => return None,
    };
    let whole = matches!(data, InstructionData::Load { offset, .. } | InstructionData::Store { offset, .. } if i32::from(*offset) == 0);
    if bytes < 2 || !whole {
        return None;
    }
    let def = dfg.value_def(dfg.resolve_aliases(address)).inst()?;
    let InstructionData::Binary {
        opcode: Opcode::Iadd,
        args: [x, y],
    } = dfg.insts[def]
    else {
        return None;
    };
    let (x, y) = (dfg.resolve_aliases(x), dfg.resolve_aliases(y));
    match (x == mem_base, y == mem_base) {
        (true, false) => Some((y, bytes)),
        (false, true) => Some((x, bytes)),
        _ => None,
    }
}

/// How many of `func`'s [`guest_accesses`] are not known aligned when the
/// `assumed` arguments have their low bits zero (`usize::MAX` when the
/// analysis gives up).
pub(in crate::lower::translate) fn unproven_accesses(
    func: &Function,
    mem_base: Value,
    assumed: &[(Value, u32)],
) -> usize {
    let Some(zeros) = known_zeros(func, assumed) else {
        return usize::MAX;
    };
    guest_accesses(func, mem_base)
        .into_iter()
        .filter(|&(_, ea, bits)| zeros[index(ea)] < bits)
        .count()
}

/// Flags `aligned` every guest access whose `ea` is known to be a multiple
/// of its size (`mem_base` is 16-byte aligned, `docs/kernels.md`), so the
/// PTX lowerer makes it one access with no alignment test; how many.
pub(super) fn flag_aligned_accesses(func: &mut Function, mem_base: Value) -> usize {
    let Some(zeros) = known_zeros(func, &[]) else {
        return 0;
    };
    let proven: Vec<Inst> = guest_accesses(func, mem_base)
        .into_iter()
        .filter(|&(_, ea, bits)| zeros[index(ea)] >= bits)
        .map(|(inst, _, _)| inst)
        .collect();
    for &inst in &proven {
        let dfg = &mut func.dfg;
        let Some(flags) = dfg.insts[inst].memflags_data(dfg) else {
            continue;
        };
        let Ok(flags) = dfg.mem_flags.insert(flags.with_aligned()) else {
            continue;
        };
        if let Some(slot) = dfg.insts[inst].memflags_mut() {
            *slot = flags;
        }
    }
    proven.len()
}

fn index(v: Value) -> usize {
    v.as_u32() as usize
}

/// Rounds [`known_zeros`] makes before it gives up: straight code and a
/// loop nest settle in a few (a count falls through a loop's parameter
/// once a round).
const MAX_ROUNDS: usize = 32;

/// By value number, how many low bits are known to be zero, the kernel's
/// arguments knowing none but the `assumed` ones (an argument and its
/// count); `None` when the fixed point takes more than [`MAX_ROUNDS`]
/// rounds.
fn known_zeros(func: &Function, assumed: &[(Value, u32)]) -> Option<Vec<u32>> {
    let dfg = &func.dfg;
    // Indexed by value number (`values()` skips deleted values).
    let mut zeros: Vec<u32> = alloc::vec![0; dfg.num_values()];
    for v in dfg.values() {
        zeros[index(v)] = dfg.value_type(v).bits();
    }
    if let Some(entry) = func.layout.entry_block() {
        for &p in dfg.block_params(entry) {
            zeros[index(p)] = assumed
                .iter()
                .find(|&&(a, _)| a == p)
                .map_or(0, |&(_, bits)| bits);
        }
    }
    for _ in 0..MAX_ROUNDS {
        let mut changed = false;
        let mut lower = |zeros: &mut Vec<u32>, v: Value, to: u32| {
            let slot = &mut zeros[index(v)];
            if to < *slot {
                *slot = to;
                changed = true;
            }
        };
        for block in func.layout.blocks() {
            for inst in func.layout.block_insts(block) {
                for &result in dfg.inst_results(inst) {
                    let width = dfg.value_type(result).bits();
                    let known = defined_zeros(func, inst, &zeros).min(width);
                    lower(&mut zeros, result, known);
                }
                let calls =
                    dfg.insts[inst].branch_destination(&dfg.jump_tables, &dfg.exception_tables);
                for call in calls {
                    let params = dfg.block_params(call.block(&dfg.value_lists));
                    for (arg, &param) in call.args(&dfg.value_lists).zip(params) {
                        let known = arg
                            .as_value()
                            .map_or(0, |a| zeros[index(dfg.resolve_aliases(a))]);
                        lower(&mut zeros, param, known);
                    }
                }
            }
        }
        if !changed {
            return Some(zeros);
        }
    }
    None
}

/// The low zero bits `inst`'s (first) result has, given its operands'.
fn defined_zeros(func: &Function, inst: Inst, zeros: &[u32]) -> u32 {
    let dfg = &func.dfg;
    if dfg.inst_results(inst).len() != 1 {
        return 0;
    }
    let z = |v: Value| zeros[index(dfg.resolve_aliases(v))];
    let of_imm = |bits: i64| if bits == 0 { 64 } else { bits.trailing_zeros() };
    let width = dfg.value_type(dfg.first_result(inst)).bits();
    match dfg.insts[inst] {
        InstructionData::UnaryImm {
            opcode: Opcode::Iconst,
            imm,
        } => of_imm(imm.bits()),
        InstructionData::Binary {
            opcode,
            args: [x, y],
        } => match opcode {
            Opcode::Iadd | Opcode::Isub | Opcode::Bor | Opcode::Bxor => z(x).min(z(y)),
            Opcode::Band => z(x).max(z(y)),
            Opcode::Imul => z(x).saturating_add(z(y)),
            Opcode::Ishl => match constant(func, y) {
                Some(k) => z(x).saturating_add((k as u64 % u64::from(width)) as u32),
                None => 0,
            },
            _ => 0,
        },
        InstructionData::Unary {
            opcode: Opcode::Uextend | Opcode::Sextend | Opcode::Ireduce,
            arg,
        } => z(arg),
        InstructionData::Ternary {
            opcode: Opcode::Select,
            args: [_, a, b],
        } => z(a).min(z(b)),
        _ => 0,
    }
}

/// The value of an `iconst`, if `v` is one (as its immediate holds it).
pub(in crate::lower::translate) fn constant(func: &Function, v: Value) -> Option<i64> {
    let dfg = &func.dfg;
    match dfg.insts[dfg.value_def(dfg.resolve_aliases(v)).inst()?] {
        InstructionData::UnaryImm {
            opcode: Opcode::Iconst,
            imm,
        } => Some(imm.bits()),
        _ => None,
    }
}
