//! Affine addresses: guest accesses in a loop whose `i32` address `x` is,
//! on pass `t`, `X0 + t * S` (mod 2^32) with `X0` and `S` values the
//! loop's entry can compute. `x` qualifies when it is built from the
//! loop's induction variables (`loops`) and loop-invariant values by
//! `iadd`, `isub`, `imul` with an invariant, `ishl` by an invariant and
//! `ireduce` (an `i64` induction variable wrapped to `i32`): each keeps `x`
//! an invariant plus invariant multiples of the induction variables,
//! modulo 2^32, so `x(t + 1) - x(t)` is the same on every pass (`base + (i
//! * n + k) * 4` over `k`, a 2-D index from the thread's ids, a pointer
//! stepped by a run-time stride). `X0` is then `x` computed from the
//! entry's values, and `S` is `x` computed from those plus one step each,
//! less `X0`: the entry copies `x`'s computation twice (`loops::hoist`).
//!
//! On passes `0 ..= L` the address is `X0 + t * S` without wrapping
//! exactly when the line from `X0` to `E = X0 + L * S` (`S` read as
//! signed, `E` exact in 64 bits: `|L * S| < 2^62`) stays in `[0, 2^32)`,
//! and then its extremes are `X0` and `E`. So every one of those passes'
//! accesses is in bounds when `E >= 0` and `max(X0, E) + end <= mem_len`
//! (`end` the access's offset plus its size; `mem_len <= 2^32`).

use alloc::collections::BTreeMap;
use alloc::vec::Vec;

use cranelift_codegen::cursor::FuncCursor;
use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::types::{I32, I64};
use cranelift_codegen::ir::{
    Block, Function, Inst, InstBuilder, InstructionData, Opcode, Value, ValueDef,
};

use super::align::{compare_trap, constant, guest_access};
use super::loops::{Induction, LoopForm, hoist, invariant, pure};
use crate::lower::KernelTrap;

/// How deep an address's computation is read.
const MAX_DEPTH: usize = 12;

/// Whether `v` is affine in the induction variables `ivs` of `form`'s loop
/// (module docs): `Some(true)` when it depends on one, `Some(false)` when
/// it is invariant, `None` when it is neither.
pub(super) fn affine(
    func: &Function,
    form: &LoopForm,
    ivs: &[Option<Induction>],
    v: Value,
) -> Option<bool> {
    affine_within(func, form, ivs, v, 0)
}

fn affine_within(
    func: &Function,
    form: &LoopForm,
    ivs: &[Option<Induction>],
    v: Value,
    depth: usize,
) -> Option<bool> {
    let dfg = &func.dfg;
    let v = dfg.resolve_aliases(v);
    let inst = match dfg.value_def(v) {
        ValueDef::Param(block, i) if block == form.header => {
            return ivs.get(i)?.map(|_| true);
        }
        ValueDef::Param(block, _) => return (!form.contains(block)).then_some(false),
        ValueDef::Result(inst, _) => inst,
        ValueDef::Union(..) => return None,
    };
    if !form.contains(func.layout.inst_block(inst)?) {
        return Some(false);
    }
    if depth >= MAX_DEPTH {
        return None;
    }
    let of = |x: Value| affine_within(func, form, ivs, x, depth + 1);
    match dfg.insts[inst] {
        InstructionData::UnaryImm {
            opcode: Opcode::Iconst,
            ..
        } => Some(false),
        InstructionData::Binary {
            opcode: Opcode::Iadd | Opcode::Isub,
            args: [x, y],
        } => Some(of(x)? | of(y)?),
        InstructionData::Binary {
            opcode: Opcode::Imul,
            args: [x, y],
        } => match (of(x)?, of(y)?) {
            (true, true) => None,
            (a, b) => Some(a | b),
        },
        InstructionData::Binary {
            opcode: Opcode::Ishl,
            args: [x, y],
        } => match of(y)? {
            false => of(x),
            true => None,
        },
        InstructionData::Unary {
            opcode: Opcode::Ireduce,
            arg,
        } => of(arg),
        ref data if pure(data.opcode()) => {
            let args = dfg.inst_args(inst);
            args.iter().all(|&a| of(a) == Some(false)).then_some(false)
        }
        _ => None,
    }
}

/// A guest bounds test in a loop whose address is affine.
pub(super) struct AffineTest {
    /// The `trapnz`.
    pub(super) test: Inst,
    /// The `i32` address `x`, and whether it changes from pass to pass.
    pub(super) address: Value,
    pub(super) varies: bool,
    /// The test is `uextend(x) + offset + bytes > len`.
    pub(super) offset: i64,
    pub(super) bytes: i64,
    pub(super) len: Value,
    /// Whether it runs only after the loop's exit test in a pass (so not
    /// on the pass that leaves).
    pub(super) after_exit: bool,
    /// The loads and stores at `ea` of more than one byte, each with its
    /// size.
    pub(super) accesses: Vec<(Inst, i64)>,
}

/// The guest bounds tests of `form`'s loop at affine addresses, `len`
/// invariant; `after` the blocks that run after the exit test.
pub(super) fn affine_tests(
    func: &Function,
    form: &LoopForm,
    ivs: &[Option<Induction>],
    mem_base: Value,
    after: &[Block],
) -> Vec<AffineTest> {
    let mut tests = Vec::new();
    for &block in &form.blocks {
        for inst in func.layout.block_insts(block) {
            let Some((address, ea, offset, bytes, len)) = guest_bounds_test(func, inst) else {
                continue;
            };
            if !invariant(func, &form.blocks, len) {
                continue;
            }
            let Some(varies) = affine(func, form, ivs, address) else {
                continue;
            };
            tests.push(AffineTest {
                test: inst,
                address,
                varies,
                offset,
                bytes,
                len,
                after_exit: after.contains(&block),
                accesses: accesses_at(func, &form.blocks, mem_base, ea),
            });
        }
    }
    tests
}

/// `(x, ea, offset, bytes, len)` when `inst` is the translator's guest
/// bounds test `trapnz(icmp ugt (ea + bytes), len)`, `ea = uextend(x) [+
/// offset]`, `x` an `i32`.
fn guest_bounds_test(func: &Function, inst: Inst) -> Option<(Value, Value, i64, i64, Value)> {
    let dfg = &func.dfg;
    let (IntCC::UnsignedGreaterThan, end, len) =
        compare_trap(func, inst, KernelTrap::HeapOutOfBounds)?
    else {
        return None;
    };
    let (ea, bytes) = plus_constant(func, end)?;
    let (extended, offset) = plus_constant(func, ea).unwrap_or((ea, 0));
    let InstructionData::Unary {
        opcode: Opcode::Uextend,
        arg,
    } = dfg.insts[dfg.value_def(extended).inst()?]
    else {
        return None;
    };
    let address = dfg.resolve_aliases(arg);
    let fits = dfg.value_type(address) == I32 && (0..1 << 32).contains(&offset) && bytes > 0;
    fits.then_some((address, ea, offset, bytes, len))
}

/// `(x, k)` when `v` is `x + k`, `k` a constant.
fn plus_constant(func: &Function, v: Value) -> Option<(Value, i64)> {
    let dfg = &func.dfg;
    match dfg.insts[dfg.value_def(dfg.resolve_aliases(v)).inst()?] {
        InstructionData::Binary {
            opcode: Opcode::Iadd,
            args: [x, y],
        } => match (constant(func, x), constant(func, y)) {
            (_, Some(k)) => Some((dfg.resolve_aliases(x), k)),
            (Some(k), None) => Some((dfg.resolve_aliases(y), k)),
            (None, None) => None,
        },
        _ => None,
    }
}

/// The loads and stores of `blocks` at `mem_base + ea`, of more than one
/// byte, with their sizes.
fn accesses_at(func: &Function, blocks: &[Block], mem_base: Value, ea: Value) -> Vec<(Inst, i64)> {
    blocks
        .iter()
        .flat_map(|&block| func.layout.block_insts(block))
        .filter_map(|inst| match guest_access(func, inst, mem_base) {
            Some((at, bytes)) if at == ea => Some((inst, i64::from(bytes))),
            _ => None,
        })
        .collect()
}

/// What the entry computes addresses from: each induction variable's
/// header parameter given its entry value (`first`) and that plus one step
/// (`second`), with what each has hoisted so far.
pub(super) struct EntryValues {
    first: BTreeMap<Value, Value>,
    second: BTreeMap<Value, Value>,
    memo_first: BTreeMap<Value, Value>,
    memo_second: BTreeMap<Value, Value>,
}

impl EntryValues {
    /// The values at the cursor (before the loop's entry `jump`, whose
    /// arguments are `args`).
    pub(super) fn new(
        pos: &mut FuncCursor,
        form: &LoopForm,
        ivs: &[Option<Induction>],
        args: &[Value],
    ) -> EntryValues {
        let mut values = EntryValues {
            first: BTreeMap::new(),
            second: BTreeMap::new(),
            memo_first: BTreeMap::new(),
            memo_second: BTreeMap::new(),
        };
        let params = pos.func.dfg.block_params(form.header).to_vec();
        for ((&p, iv), &arg) in params.iter().zip(ivs).zip(args) {
            let Some(iv) = iv else { continue };
            values.first.insert(p, arg);
            let next = match iv.stride {
                None => arg,
                Some(s) => {
                    let s = hoist(
                        pos,
                        &form.blocks,
                        s,
                        &BTreeMap::new(),
                        &mut values.memo_first,
                    );
                    if iv.negated {
                        pos.ins().isub(arg, s)
                    } else {
                        pos.ins().iadd(arg, s)
                    }
                }
            };
            values.second.insert(p, next);
        }
        values
    }

    /// `(X0, S)` of affine `x` (both `i32`; no `S` when `x` does not
    /// vary).
    pub(super) fn first_and_step(
        &mut self,
        pos: &mut FuncCursor,
        form: &LoopForm,
        x: Value,
        varies: bool,
    ) -> (Value, Option<Value>) {
        let x0 = hoist(pos, &form.blocks, x, &self.first, &mut self.memo_first);
        if !varies {
            return (x0, None);
        }
        let x1 = hoist(pos, &form.blocks, x, &self.second, &mut self.memo_second);
        (x0, Some(pos.ins().isub(x1, x0)))
    }

    /// `v` (invariant) at the cursor.
    pub(super) fn invariant(&mut self, pos: &mut FuncCursor, form: &LoopForm, v: Value) -> Value {
        hoist(pos, &form.blocks, v, &self.first, &mut self.memo_first)
    }
}

/// An `i8`, nonzero when an access at `X0 + t * S` with end `end` (offset
/// plus size) is in bounds of `len` on every pass `t` in `0 ..= last` (module
/// docs); `last` an `i64` below 2^31.
pub(super) fn in_bounds(
    pos: &mut FuncCursor,
    x0: Value,
    step: Option<Value>,
    last: Value,
    end: i64,
    len: Value,
) -> Value {
    let first = pos.ins().uextend(I64, x0);
    let room = pos.ins().iadd_imm_s(len, -end);
    let Some(step) = step else {
        return pos.ins().icmp(IntCC::SignedLessThanOrEqual, first, room);
    };
    let step = pos.ins().sextend(I64, step);
    let span = pos.ins().imul(step, last);
    let e = pos.ins().iadd(first, span);
    let zero = pos.ins().iconst(I64, 0);
    let low = pos.ins().icmp(IntCC::SignedGreaterThanOrEqual, e, zero);
    let later = pos.ins().icmp(IntCC::SignedGreaterThan, e, first);
    let high = pos.ins().select(later, e, first);
    let fits = pos.ins().icmp(IntCC::SignedLessThanOrEqual, high, room);
    pos.ins().band(low, fits)
}
