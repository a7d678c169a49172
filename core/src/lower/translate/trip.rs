//! Trip counts: how many times an innermost loop's header runs, worked out
//! from the values the loop is entered with. A loop ends at a branch that
//! leaves it; when that branch runs on every pass and its condition
//! compares an induction variable `p` (`loops`), plus a loop-invariant
//! offset, with a loop-invariant bound, the passes follow from `p`'s entry
//! value, its constant step and the compare, whichever way the loop counts
//! and wherever it tests (Rust's `c - 1 != 0` at the bottom, C's `i + 3 <
//! n` at the bottom, a hand-written `i >= n` exit at the top).
//!
//! With `x = p + offset` on pass `t` being `x0 + t * step` (mod `2^w`, `w`
//! the width), the loop goes on while `x cc b`. The first pass `N` whose
//! test leaves is found exactly, or not at all:
//!
//! - `x != b`: with `step = 2^k * odd`, the least `t` with `t * step = b -
//!   x0` (mod `2^w`) is `((b - x0) >> k) * odd^-1` (mod `2^(w-k)`), and
//!   there is one only when the low `k` bits of `b - x0` are zero (else the
//!   loop never leaves: no count);
//! - an order (`<`, `<=`, `>`, `>=`, signed or not): `x cc b` is `X <u B`
//!   with `X = x ^ flip`, `B = (b ^ flip) [+ 1]` (the sign bit flipped for
//!   a signed compare, every bit for `>` and `>=`, which turns the step
//!   around; `+ 1` for `<=` and `>=`), and `X` steps by `s` in `1 ..
//!   2^(w-1)` (a loop that steps away from its bound has no count). When
//!   `B <= 2^w - s` no `X` wraps before the first one at or past `B`, so
//!   `N = ceil((B - X0) / s)` if `X0 < B`, else 0; a larger `B` gives no
//!   count (the loop could wrap past it).
//!
//! The header then runs `N + 1` times (the last pass leaves at the test)
//! unless the loop traps first. The arithmetic is written once, over
//! [`Arith`]: the loop passes emit it as CLIF at a loop's entry ([`Emit`])
//! and `counted` folds it for constant entries ([`Fold`]), so the two
//! cannot disagree; the unit tests check it against running the loop.

use cranelift_codegen::cursor::FuncCursor;
use cranelift_codegen::ir::condcodes::{CondCode, IntCC};
use cranelift_codegen::ir::types::I8;
use cranelift_codegen::ir::{Function, Inst, InstBuilder, InstructionData, Opcode, Type, Value};

use super::align::constant;
use super::loops::{
    Induction, LoopForm, constant_bits, invariant, is_integer, mask, on_every_pass,
};

/// How deep the condition of an exit is read through `uextend`s and
/// compares with zero.
const MAX_DEPTH: usize = 8;

/// A value an entry test computes with: a constant (bits of its type) or a
/// value of the function.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Operand {
    Const(u64),
    Value(Value),
}

/// What ends a loop, and how its passes follow from the entry's values.
#[derive(Clone, Copy, Debug)]
pub(super) struct TripCount {
    /// The exiting `brif` (its block runs on every pass).
    pub(super) exit: Inst,
    /// Which of the `brif`'s destinations leaves: 0 (taken when the
    /// condition is nonzero) or 1.
    pub(super) leaving: usize,
    /// The induction variable: a header parameter's index, and its type.
    pub(super) iv: usize,
    pub(super) ty: Type,
    /// The compared value is `p + offset` (`p - offset` when the flag is
    /// set; a constant is held added); `None`: `p`.
    pub(super) offset: Option<(Operand, bool)>,
    /// The loop-invariant bound.
    pub(super) bound: Operand,
    pub(super) rule: Rule,
}

/// The compare a loop goes on by, normalized (module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Rule {
    /// While `x != b`; `x` steps by `step` (nonzero).
    NotEqual { step: u64 },
    /// While `x ^ flip <u (b ^ flip) [+ 1 when inclusive]`; `x ^ flip`
    /// steps by `step` in `1 .. 2^(w-1)`.
    Below {
        flip: u64,
        step: u64,
        inclusive: bool,
    },
}

impl Rule {
    /// The rule of `x cc b`, `x` stepping by `step` (bits of `ty`), or
    /// `None` when the loop has no count this way.
    pub(super) fn of(cc: IntCC, step: u64, ty: Type) -> Option<Rule> {
        let all = mask(ty);
        let sign = 1u64 << (ty.bits() - 1);
        let step = step & all;
        let back = step.wrapping_neg() & all;
        let (flip, s, inclusive) = match cc {
            IntCC::Equal => return None,
            IntCC::NotEqual => return (step != 0).then_some(Rule::NotEqual { step }),
            IntCC::UnsignedLessThan => (0, step, false),
            IntCC::UnsignedLessThanOrEqual => (0, step, true),
            IntCC::SignedLessThan => (sign, step, false),
            IntCC::SignedLessThanOrEqual => (sign, step, true),
            IntCC::UnsignedGreaterThan => (all, back, false),
            IntCC::UnsignedGreaterThanOrEqual => (all, back, true),
            IntCC::SignedGreaterThan => (all ^ sign, back, false),
            IntCC::SignedGreaterThanOrEqual => (all ^ sign, back, true),
        };
        (1..sign).contains(&s).then_some(Rule::Below {
            flip,
            step: s,
            inclusive,
        })
    }
}

/// The loop's trip count: its first exit that runs on every pass (a
/// `brif` with one destination inside) and whose condition compares `p +
/// offset` with a bound (`p` an induction variable of constant step, the
/// offset and bound invariant), as the loop goes on; `None` when no exit
/// is such.
pub(super) fn trip_count(
    func: &Function,
    form: &LoopForm,
    ivs: &[Option<Induction>],
) -> Option<TripCount> {
    form.exits
        .iter()
        .find_map(|&exit| exit_count(func, form, ivs, exit))
}

fn exit_count(
    func: &Function,
    form: &LoopForm,
    ivs: &[Option<Induction>],
    exit: Inst,
) -> Option<TripCount> {
    let dfg = &func.dfg;
    let InstructionData::Brif {
        arg,
        blocks: [taken, other],
        ..
    } = dfg.insts[exit]
    else {
        return None;
    };
    let inside =
        |call: cranelift_codegen::ir::BlockCall| form.contains(call.block(&dfg.value_lists));
    let leaving = match (inside(taken), inside(other)) {
        (false, true) => 0,
        (true, false) => 1,
        _ => return None,
    };
    let exit_block = func.layout.inst_block(exit)?;
    if !on_every_pass(func, form, exit_block) {
        return None;
    }
    let (cc, a, b) = compare_of(func, Operand::Value(dfg.resolve_aliases(arg)), 0)?;
    // The loop goes on while the condition is nonzero when it leaves from
    // the other destination.
    let cc = if leaving == 1 { cc } else { cc.complement() };
    let invariant = |o: Operand| match o {
        Operand::Const(_) => true,
        Operand::Value(v) => invariant(func, &form.blocks, v),
    };
    let (cc, (iv, offset), bound) = match (
        induction_of(func, form, ivs, a),
        induction_of(func, form, ivs, b),
    ) {
        (Some(x), _) if invariant(b) => (cc, x, b),
        (_, Some(x)) if invariant(a) => (cc.swap_args(), x, a),
        _ => return None,
    };
    let ty = dfg.value_type(dfg.block_params(form.header)[iv]);
    let step = ivs[iv]?.constant?;
    Some(TripCount {
        exit,
        leaving,
        iv,
        ty,
        offset,
        bound,
        rule: Rule::of(cc, step, ty)?,
    })
}

/// `(cc, a, b)` such that `v` is nonzero exactly when `a cc b`, read
/// through `uextend`s (which keep a value nonzero) and compares with zero
/// (`x != 0` is `x`'s own condition, `x == 0` its complement).
fn compare_of(func: &Function, v: Operand, depth: usize) -> Option<(IntCC, Operand, Operand)> {
    let dfg = &func.dfg;
    let Operand::Value(value) = v else {
        return None;
    };
    let operand = |x: Value| {
        let x = dfg.resolve_aliases(x);
        match constant_bits(func, x) {
            Some(c) => Operand::Const(c),
            None => Operand::Value(x),
        }
    };
    let plain = Some((IntCC::NotEqual, v, Operand::Const(0)));
    if depth >= MAX_DEPTH {
        return plain;
    }
    let Some(inst) = dfg.value_def(value).inst() else {
        return plain;
    };
    match dfg.insts[inst] {
        InstructionData::Unary {
            opcode: Opcode::Uextend,
            arg,
        } => compare_of(func, Operand::Value(dfg.resolve_aliases(arg)), depth + 1),
        InstructionData::IntCompare {
            opcode: Opcode::Icmp,
            cond,
            args: [x, y],
        } => {
            let (x, y) = (operand(x), operand(y));
            let with_zero = match (x, y) {
                (other, Operand::Const(0)) | (Operand::Const(0), other) => Some(other),
                _ => None,
            };
            match (cond, with_zero) {
                (IntCC::NotEqual, Some(other)) => {
                    compare_of(func, other, depth + 1).or(Some((cond, x, y)))
                }
                (IntCC::Equal, Some(other)) => compare_of(func, other, depth + 1)
                    .map(|(cc, a, b)| (cc.complement(), a, b))
                    .or(Some((cond, x, y))),
                _ => Some((cond, x, y)),
            }
        }
        _ => plain,
    }
}

/// `(iv, offset)` when `o` is `p`, `p + d`, `d + p` or `p - d`, `p` an
/// induction variable's header parameter and `d` invariant.
fn induction_of(
    func: &Function,
    form: &LoopForm,
    ivs: &[Option<Induction>],
    o: Operand,
) -> Option<(usize, Option<(Operand, bool)>)> {
    let dfg = &func.dfg;
    let Operand::Value(v) = o else {
        return None;
    };
    let params = dfg.block_params(form.header);
    let iv = |x: Value| {
        let x = dfg.resolve_aliases(x);
        params
            .iter()
            .position(|&p| p == x)
            .filter(|&i| ivs[i].is_some_and(|s| s.constant.is_some()))
    };
    if let Some(i) = iv(v) {
        return Some((i, None));
    }
    let offset = |d: Value, negated: bool| {
        let d = dfg.resolve_aliases(d);
        if let Some(c) = constant_bits(func, d) {
            let c = if negated { c.wrapping_neg() } else { c };
            Some((Operand::Const(c & mask(dfg.value_type(d))), false))
        } else if invariant(func, &form.blocks, d) {
            Some((Operand::Value(d), negated))
        } else {
            None
        }
    };
    match dfg.insts[dfg.value_def(v).inst()?] {
        InstructionData::Binary {
            opcode: Opcode::Iadd,
            args: [x, y],
        } => match (iv(x), iv(y)) {
            (Some(i), _) => Some((i, Some(offset(y, false)?))),
            (_, Some(i)) => Some((i, Some(offset(x, false)?))),
            _ => None,
        },
        InstructionData::Binary {
            opcode: Opcode::Isub,
            args: [x, y],
        } => Some((iv(x)?, Some(offset(y, true)?))),
        _ => None,
    }
}

/// Integer arithmetic on values of some [`Arith`]: the trip count's
/// formula is written once over it.
pub(super) trait Arith {
    type V: Copy;
    /// A constant of `ty` (its bits).
    fn konst(&mut self, ty: Type, bits: u64) -> Self::V;
    /// `iadd`, `isub`, `imul`, `band`, `bor`, `bxor`, `ushr` or `udiv`
    /// (by a nonzero value) of two values of one type.
    fn op(&mut self, op: Opcode, x: Self::V, y: Self::V) -> Self::V;
    /// `icmp`: an `i8`, 1 or 0.
    fn cmp(&mut self, cc: IntCC, x: Self::V, y: Self::V) -> Self::V;
    /// `c ? x : y`.
    fn select(&mut self, c: Self::V, x: Self::V, y: Self::V) -> Self::V;
}

/// `(ok, n)` for a loop of `rule` over values of `ty` entered with `x0`
/// (the compared value on the first pass) and bound `b`: when `ok` (an
/// `i8`; `None`: always) is nonzero, the loop's exit test leaves on pass
/// `n` (from 0) and on none before, so the header runs `n + 1` times.
pub(super) fn passes<A: Arith>(
    a: &mut A,
    rule: Rule,
    ty: Type,
    x0: A::V,
    b: A::V,
) -> (Option<A::V>, A::V) {
    let all = mask(ty);
    match rule {
        Rule::NotEqual { step } => {
            let k = step.trailing_zeros();
            let odd = step >> k;
            let inverse = inverse(odd) & all;
            let d = a.op(Opcode::Isub, b, x0);
            let mut n = d;
            let mut ok = None;
            if k > 0 {
                let shift = a.konst(ty, u64::from(k));
                n = a.op(Opcode::Ushr, n, shift);
            }
            if inverse != 1 {
                let inverse = a.konst(ty, inverse);
                n = a.op(Opcode::Imul, n, inverse);
            }
            if k > 0 {
                let high = a.konst(ty, all >> k);
                n = a.op(Opcode::Band, n, high);
                let low = a.konst(ty, (1 << k) - 1);
                let low = a.op(Opcode::Band, d, low);
                let zero = a.konst(ty, 0);
                ok = Some(a.cmp(IntCC::Equal, low, zero));
            }
            (ok, n)
        }
        Rule::Below {
            flip,
            step,
            inclusive,
        } => {
            let (mut x, mut b) = (x0, b);
            if flip != 0 {
                let flip = a.konst(ty, flip);
                x = a.op(Opcode::Bxor, x, flip);
                b = a.op(Opcode::Bxor, b, flip);
            }
            // The largest `B` (before `+ 1`) from which no `X` wraps.
            let limit = if inclusive {
                all - step
            } else {
                all - step + 1
            };
            let ok = (limit != all).then(|| {
                let limit = a.konst(ty, limit);
                a.cmp(IntCC::UnsignedLessThanOrEqual, b, limit)
            });
            if inclusive {
                let one = a.konst(ty, 1);
                b = a.op(Opcode::Iadd, b, one);
            }
            let more = a.cmp(IntCC::UnsignedLessThan, x, b);
            let mut n = a.op(Opcode::Isub, b, x);
            if step > 1 {
                let round = a.konst(ty, step - 1);
                n = a.op(Opcode::Iadd, n, round);
                n = if step.is_power_of_two() {
                    let shift = a.konst(ty, u64::from(step.trailing_zeros()));
                    a.op(Opcode::Ushr, n, shift)
                } else {
                    let step = a.konst(ty, step);
                    a.op(Opcode::Udiv, n, step)
                };
            }
            let zero = a.konst(ty, 0);
            (ok, a.select(more, n, zero))
        }
    }
}

/// The inverse of odd `x` modulo 2^64 (Newton's iteration: each step
/// doubles the bits that are right, from 3).
fn inverse(x: u64) -> u64 {
    let mut y = x;
    for _ in 0..5 {
        y = y.wrapping_mul(2u64.wrapping_sub(x.wrapping_mul(y)));
    }
    y
}

/// [`Arith`] as CLIF at a cursor.
pub(super) struct Emit<'c, 'f>(pub(super) &'c mut FuncCursor<'f>);

impl Arith for Emit<'_, '_> {
    type V = Value;

    fn konst(&mut self, ty: Type, bits: u64) -> Value {
        self.0.ins().iconst(ty, (bits & mask(ty)) as i64)
    }

    fn op(&mut self, op: Opcode, x: Value, y: Value) -> Value {
        let ins = self.0.ins();
        match op {
            Opcode::Iadd => ins.iadd(x, y),
            Opcode::Isub => ins.isub(x, y),
            Opcode::Imul => ins.imul(x, y),
            Opcode::Band => ins.band(x, y),
            Opcode::Bor => ins.bor(x, y),
            Opcode::Bxor => ins.bxor(x, y),
            Opcode::Ushr => ins.ushr(x, y),
            Opcode::Udiv => ins.udiv(x, y),
            other => unreachable!("no {other} in a trip count"),
        }
    }

    fn cmp(&mut self, cc: IntCC, x: Value, y: Value) -> Value {
        self.0.ins().icmp(cc, x, y)
    }

    fn select(&mut self, c: Value, x: Value, y: Value) -> Value {
        self.0.ins().select(c, x, y)
    }
}

/// [`Arith`] on constants: `(bits, type)`.
pub(super) struct Fold;

impl Arith for Fold {
    type V = (u64, Type);

    fn konst(&mut self, ty: Type, bits: u64) -> (u64, Type) {
        (bits & mask(ty), ty)
    }

    fn op(&mut self, op: Opcode, (x, ty): (u64, Type), (y, _): (u64, Type)) -> (u64, Type) {
        let bits = u64::from(ty.bits());
        let v = match op {
            Opcode::Iadd => x.wrapping_add(y),
            Opcode::Isub => x.wrapping_sub(y),
            Opcode::Imul => x.wrapping_mul(y),
            Opcode::Band => x & y,
            Opcode::Bor => x | y,
            Opcode::Bxor => x ^ y,
            Opcode::Ushr => x >> (y % bits),
            Opcode::Udiv => x.checked_div(y).unwrap_or(0),
            other => unreachable!("no {other} in a trip count"),
        };
        (v & mask(ty), ty)
    }

    fn cmp(&mut self, cc: IntCC, (x, ty): (u64, Type), (y, _): (u64, Type)) -> (u64, Type) {
        let shift = 64 - ty.bits();
        let (sx, sy) = (
            ((x << shift) as i64) >> shift,
            ((y << shift) as i64) >> shift,
        );
        let holds = match cc {
            IntCC::Equal => x == y,
            IntCC::NotEqual => x != y,
            IntCC::UnsignedLessThan => x < y,
            IntCC::UnsignedLessThanOrEqual => x <= y,
            IntCC::UnsignedGreaterThan => x > y,
            IntCC::UnsignedGreaterThanOrEqual => x >= y,
            IntCC::SignedLessThan => sx < sy,
            IntCC::SignedLessThanOrEqual => sx <= sy,
            IntCC::SignedGreaterThan => sx > sy,
            IntCC::SignedGreaterThanOrEqual => sx >= sy,
        };
        (u64::from(holds), I8)
    }

    fn select(&mut self, (c, _): (u64, Type), x: (u64, Type), y: (u64, Type)) -> (u64, Type) {
        if c != 0 { x } else { y }
    }
}

/// The compared value on the first pass, `p0 + offset`, on `a`'s values:
/// `p0` the induction variable's entry value, `offset` the trip count's
/// (each `None` when it is not one of `a`'s values).
pub(super) fn first<A: Arith>(
    a: &mut A,
    count: &TripCount,
    p0: A::V,
    offset: Option<A::V>,
) -> A::V {
    match (count.offset, offset) {
        (Some((Operand::Const(c), _)), _) => {
            let c = a.konst(count.ty, c);
            a.op(Opcode::Iadd, p0, c)
        }
        (Some((Operand::Value(_), negated)), Some(d)) => {
            let op = if negated { Opcode::Isub } else { Opcode::Iadd };
            a.op(op, p0, d)
        }
        _ => p0,
    }
}

/// The header's passes of a loop entered with constant values: `p0` the
/// induction variable's entry value; `None` when the offset or bound is
/// not a constant or the rule gives no count, or there are more than
/// `most`.
pub(super) fn constant_passes(
    func: &Function,
    count: &TripCount,
    p0: Value,
    most: u64,
) -> Option<u64> {
    let ty = count.ty;
    if !is_integer(ty) {
        return None;
    }
    let value = |o: Operand| match o {
        Operand::Const(c) => Some(c),
        Operand::Value(v) => constant_bits(func, v),
    };
    let mut fold = Fold;
    let p0 = (constant(func, p0)? as u64 & mask(ty), ty);
    let offset = match count.offset {
        Some((Operand::Value(v), _)) => Some((constant_bits(func, v)?, ty)),
        _ => None,
    };
    let x0 = first(&mut fold, count, p0, offset);
    let b = (value(count.bound)?, ty);
    let (ok, (n, _)) = passes(&mut fold, count.rule, ty, x0, b);
    if ok.is_some_and(|(ok, _)| ok == 0) || n >= most {
        return None;
    }
    Some(n + 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use cranelift_codegen::ir::types::{I16, I32, I64};

    const CCS: [IntCC; 10] = [
        IntCC::NotEqual,
        IntCC::UnsignedLessThan,
        IntCC::UnsignedLessThanOrEqual,
        IntCC::SignedLessThan,
        IntCC::SignedLessThanOrEqual,
        IntCC::UnsignedGreaterThan,
        IntCC::UnsignedGreaterThanOrEqual,
        IntCC::SignedGreaterThan,
        IntCC::SignedGreaterThanOrEqual,
        IntCC::Equal,
    ];

    fn holds(cc: IntCC, x: u64, b: u64, ty: Type) -> bool {
        Fold.cmp(cc, (x, ty), (b, ty)).0 != 0
    }

    /// The count [`passes`] gives, if `ok`.
    fn counted(rule: Rule, ty: Type, x0: u64, b: u64) -> Option<u64> {
        let (ok, (n, _)) = passes(&mut Fold, rule, ty, (x0, ty), (b, ty));
        ok.is_none_or(|(ok, _)| ok != 0).then_some(n)
    }

    /// The first pass whose test leaves, running the loop (at most `most`
    /// passes; `None`: it had not left by then).
    fn run(cc: IntCC, step: u64, ty: Type, x0: u64, b: u64, most: u64) -> Option<u64> {
        let mut x = x0;
        for t in 0..most {
            if !holds(cc, x, b, ty) {
                return Some(t);
            }
            x = x.wrapping_add(step) & mask(ty);
        }
        None
    }

    /// [`run`] for 8 bits, in native `u8`s (the exhaustive test runs 2^16
    /// loops a compare and step): an 8-bit loop that leaves does so within
    /// 256 passes.
    fn run8(cc: IntCC, step: u8, x0: u8, b: u8) -> Option<u64> {
        let holds = |x: u8| match cc {
            IntCC::Equal => x == b,
            IntCC::NotEqual => x != b,
            IntCC::UnsignedLessThan => x < b,
            IntCC::UnsignedLessThanOrEqual => x <= b,
            IntCC::UnsignedGreaterThan => x > b,
            IntCC::UnsignedGreaterThanOrEqual => x >= b,
            IntCC::SignedLessThan => (x as i8) < (b as i8),
            IntCC::SignedLessThanOrEqual => (x as i8) <= (b as i8),
            IntCC::SignedGreaterThan => (x as i8) > (b as i8),
            IntCC::SignedGreaterThanOrEqual => (x as i8) >= (b as i8),
        };
        let mut x = x0;
        for t in 0..=256 {
            if !holds(x) {
                return Some(t);
            }
            x = x.wrapping_add(step);
        }
        None
    }

    /// Every compare, every start and bound of 8 bits, steps of both
    /// directions (small, odd, even, near the half and the top): where the
    /// formula gives a count, the loop leaves on exactly that pass (a
    /// loop that never leaves, wraps around, or steps over its bound with
    /// `!=` must have no count); and a loop that steps towards its bound
    /// by less than it has room for is counted.
    #[test]
    fn the_count_is_where_the_loop_leaves() {
        let ty = I8;
        for cc in CCS {
            for step in [1u64, 2, 3, 4, 6, 127, 128, 129, 250, 253, 255] {
                let Some(rule) = Rule::of(cc, step, ty) else {
                    continue;
                };
                let mut counted_any = 0;
                for x0 in 0..256 {
                    for b in 0..256 {
                        let got = counted(rule, ty, x0, b);
                        let ran = run8(cc, step as u8, x0 as u8, b as u8);
                        if let Some(n) = got {
                            assert_eq!(ran, Some(n), "{cc} step {step} x0 {x0} b {b}");
                            counted_any += 1;
                        }
                        // Towards the bound with room: a count.
                        if let Rule::Below {
                            flip,
                            step: s,
                            inclusive,
                        } = rule
                        {
                            let bb = (b ^ flip) + u64::from(inclusive);
                            if bb + s <= 256 && got.is_none() {
                                panic!("{cc} step {step} x0 {x0} b {b}: no count");
                            }
                        }
                        if matches!(rule, Rule::NotEqual { .. }) && ran.is_some() {
                            assert_eq!(got, ran, "{cc} step {step} x0 {x0} b {b}");
                        }
                    }
                }
                assert!(counted_any > 0, "{cc} step {step}");
            }
        }
    }

    /// Steps that go away from the bound have no rule; `==` has none.
    #[test]
    fn loops_that_step_away_have_no_count() {
        assert_eq!(Rule::of(IntCC::UnsignedLessThan, 0xff, I8), None);
        assert_eq!(Rule::of(IntCC::SignedGreaterThan, 1, I32), None);
        assert_eq!(Rule::of(IntCC::Equal, 1, I32), None);
        assert_eq!(Rule::of(IntCC::NotEqual, 0, I64), None);
        assert_eq!(Rule::of(IntCC::UnsignedLessThan, 0x80, I8), None);
    }

    /// Wider types: random starts, bounds and steps, and edge values; the
    /// loop run where it leaves within 2^16 passes, else the count's pass
    /// and the one before it checked alone (`x0 + t * step` in closed
    /// form).
    #[test]
    fn wide_counts_match_the_closed_form() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for ty in [I16, I32, I64] {
            let all = mask(ty);
            let edges = [
                0,
                1,
                2,
                all,
                all - 1,
                all >> 1,
                (all >> 1) + 1,
                (all >> 1) - 1,
            ];
            for round in 0..20_000 {
                let pick = |r: u64, n: u64| {
                    if r.is_multiple_of(3) {
                        edges[(n % 8) as usize]
                    } else {
                        n & all
                    }
                };
                let (x0, b) = (pick(next(), next()), pick(next(), next()));
                let step = match round % 4 {
                    0 => 1 + next() % 8,
                    1 => (all - next() % 8) & all,
                    _ => next() & all,
                };
                let cc = CCS[(next() % 9) as usize];
                let Some(rule) = Rule::of(cc, step, ty) else {
                    continue;
                };
                let Some(n) = counted(rule, ty, x0, b) else {
                    continue;
                };
                let at = |t: u64| x0.wrapping_add(t.wrapping_mul(step)) & all;
                if n < 1 << 16 {
                    assert_eq!(
                        run(cc, step, ty, x0, b, 1 << 16),
                        Some(n),
                        "{ty} {cc} {step} {x0} {b}"
                    );
                } else {
                    assert!(
                        !holds(cc, at(n), b, ty),
                        "{ty} {cc} {step} {x0} {b}: stays at {n}"
                    );
                    assert!(
                        holds(cc, at(n - 1), b, ty),
                        "{ty} {cc} {step} {x0} {b}: left at {}",
                        n - 1
                    );
                    assert!(
                        holds(cc, at(next() % n), b, ty),
                        "{ty} {cc} {step} {x0} {b}"
                    );
                }
            }
        }
    }
}
