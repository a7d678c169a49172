//! The lane-wise SIMD operators, one row each: how the operands' lanes
//! are read, the shape of the result, and the scalar CLIF that computes
//! one result lane from the operands' lanes at the same position. Some
//! rows read whole 32-bit words where that is exact (bitwise operators,
//! `i8x16.add` without carries between bytes). Every rule has Wasm's
//! semantics for one lane: integer lanes wrap, saturating ones clamp,
//! float lanes are the scalar float operators (their NaN rules too).

use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::types::{F32, I32, I64};
use cranelift_codegen::ir::{InstBuilder, Type, Value};
use cranelift_frontend::FunctionBuilder;
use wasmparser::Operator;

use super::lanes::{Lanes, Shape, k32};
use crate::lower::translate::body::{BinaryFn, UnaryFn};

/// A lane-wise operator: operands read as `input`, result lanes of
/// `output`, `emit` per lane.
pub(super) struct Rule<F> {
    pub input: Lanes,
    pub output: Shape,
    pub emit: F,
}

const fn rule<F>(input: Lanes, output: Shape, emit: F) -> Rule<F> {
    Rule {
        input,
        output,
        emit,
    }
}

/// The rule of each one-operand lane-wise operator.
pub(super) fn unary_rule(op: &Operator<'_>) -> Option<Rule<UnaryFn>> {
    use Lanes as L;
    use Operator as O;
    use Shape as S;
    Some(match op {
        O::V128Not => rule(L::I32, S::I32, |b, x| b.ins().bnot(x)),
        // Whole words: each byte's negation is `0 - byte`, and the
        // subtraction of `sub_bytes` keeps borrows inside the bytes.
        O::I8x16Neg => rule(L::I32, S::I32, |b, x| {
            let zero = k32(b, 0);
            sub_lanes(b, zero, x, 0x8080_8080)
        }),
        O::I16x8Neg => rule(L::I32, S::I32, |b, x| {
            let zero = k32(b, 0);
            sub_lanes(b, zero, x, 0x8000_8000)
        }),
        O::I32x4Neg => rule(L::I32, S::I32, neg),
        O::I64x2Neg => rule(L::I64, S::I64, neg),
        O::I8x16Abs => rule(L::I8S, S::I8, abs),
        O::I16x8Abs => rule(L::I16S, S::I16, abs),
        O::I32x4Abs => rule(L::I32, S::I32, abs),
        O::I64x2Abs => rule(L::I64, S::I64, abs),
        O::I8x16Popcnt => rule(L::I32, S::I32, popcnt_bytes),
        // `abs` and `neg` of floats are bit operations (the sign bit), NaNs
        // included.
        O::F32x4Abs => rule(L::I32, S::I32, |b, x| b.ins().band_imm_u(x, 0x7fff_ffff)),
        O::F32x4Neg => rule(L::I32, S::I32, |b, x| b.ins().bxor_imm_u(x, 0x8000_0000)),
        O::F64x2Abs => rule(L::I64, S::I64, |b, x| {
            b.ins().band_imm_u(x, 0x7fff_ffff_ffff_ffff)
        }),
        O::F64x2Neg => rule(L::I64, S::I64, |b, x| b.ins().bxor_imm_s(x, i64::MIN)),
        O::F32x4Sqrt => rule(L::F32, S::F32, |b, x| b.ins().sqrt(x)),
        O::F32x4Ceil => rule(L::F32, S::F32, |b, x| b.ins().ceil(x)),
        O::F32x4Floor => rule(L::F32, S::F32, |b, x| b.ins().floor(x)),
        O::F32x4Trunc => rule(L::F32, S::F32, |b, x| b.ins().trunc(x)),
        O::F32x4Nearest => rule(L::F32, S::F32, |b, x| b.ins().nearest(x)),
        O::F64x2Sqrt => rule(L::F64, S::F64, |b, x| b.ins().sqrt(x)),
        O::F64x2Ceil => rule(L::F64, S::F64, |b, x| b.ins().ceil(x)),
        O::F64x2Floor => rule(L::F64, S::F64, |b, x| b.ins().floor(x)),
        O::F64x2Trunc => rule(L::F64, S::F64, |b, x| b.ins().trunc(x)),
        O::F64x2Nearest => rule(L::F64, S::F64, |b, x| b.ins().nearest(x)),
        O::I32x4TruncSatF32x4S => rule(L::F32, S::I32, |b, x| b.ins().fcvt_to_sint_sat(I32, x)),
        O::I32x4TruncSatF32x4U => rule(L::F32, S::I32, |b, x| b.ins().fcvt_to_uint_sat(I32, x)),
        O::F32x4ConvertI32x4S => rule(L::I32, S::F32, |b, x| b.ins().fcvt_from_sint(F32, x)),
        O::F32x4ConvertI32x4U => rule(L::I32, S::F32, |b, x| b.ins().fcvt_from_uint(F32, x)),
        _ => return None,
    })
}

/// The rule of each two-operand lane-wise operator.
pub(super) fn binary_rule(op: &Operator<'_>) -> Option<Rule<BinaryFn>> {
    use IntCC as C;
    use Lanes as L;
    use Operator as O;
    use Shape as S;
    Some(match op {
        O::V128And => rule(L::I32, S::I32, |b, x, y| b.ins().band(x, y)),
        O::V128Or => rule(L::I32, S::I32, |b, x, y| b.ins().bor(x, y)),
        O::V128Xor => rule(L::I32, S::I32, |b, x, y| b.ins().bxor(x, y)),
        O::V128AndNot => rule(L::I32, S::I32, |b, x, y| {
            let not_y = b.ins().bnot(y);
            b.ins().band(x, not_y)
        }),

        O::I8x16Add => rule(L::I32, S::I32, |b, x, y| add_lanes(b, x, y, 0x8080_8080)),
        O::I16x8Add => rule(L::I32, S::I32, |b, x, y| add_lanes(b, x, y, 0x8000_8000)),
        O::I32x4Add => rule(L::I32, S::I32, |b, x, y| b.ins().iadd(x, y)),
        O::I64x2Add => rule(L::I64, S::I64, |b, x, y| b.ins().iadd(x, y)),
        O::I8x16Sub => rule(L::I32, S::I32, |b, x, y| sub_lanes(b, x, y, 0x8080_8080)),
        O::I16x8Sub => rule(L::I32, S::I32, |b, x, y| sub_lanes(b, x, y, 0x8000_8000)),
        O::I32x4Sub => rule(L::I32, S::I32, |b, x, y| b.ins().isub(x, y)),
        O::I64x2Sub => rule(L::I64, S::I64, |b, x, y| b.ins().isub(x, y)),
        // The low 16 bits of a product depend only on the factors' low 16.
        O::I16x8Mul => rule(L::I16U, S::I16, |b, x, y| b.ins().imul(x, y)),
        O::I32x4Mul => rule(L::I32, S::I32, |b, x, y| b.ins().imul(x, y)),
        O::I64x2Mul => rule(L::I64, S::I64, |b, x, y| b.ins().imul(x, y)),

        O::I8x16AddSatS => rule(L::I8S, S::I8, |b, x, y| {
            let sum = b.ins().iadd(x, y);
            clamp(b, sum, -128, 127)
        }),
        O::I8x16AddSatU => rule(L::I8U, S::I8, |b, x, y| {
            let sum = b.ins().iadd(x, y);
            clamp(b, sum, 0, 255)
        }),
        O::I8x16SubSatS => rule(L::I8S, S::I8, |b, x, y| {
            let diff = b.ins().isub(x, y);
            clamp(b, diff, -128, 127)
        }),
        O::I8x16SubSatU => rule(L::I8U, S::I8, |b, x, y| {
            let diff = b.ins().isub(x, y);
            clamp(b, diff, 0, 255)
        }),
        O::I16x8AddSatS => rule(L::I16S, S::I16, |b, x, y| {
            let sum = b.ins().iadd(x, y);
            clamp(b, sum, -32768, 32767)
        }),
        O::I16x8AddSatU => rule(L::I16U, S::I16, |b, x, y| {
            let sum = b.ins().iadd(x, y);
            clamp(b, sum, 0, 65535)
        }),
        O::I16x8SubSatS => rule(L::I16S, S::I16, |b, x, y| {
            let diff = b.ins().isub(x, y);
            clamp(b, diff, -32768, 32767)
        }),
        O::I16x8SubSatU => rule(L::I16U, S::I16, |b, x, y| {
            let diff = b.ins().isub(x, y);
            clamp(b, diff, 0, 65535)
        }),
        // (x * y + 2^14) >> 15, rounded and saturated: only
        // -32768 * -32768 leaves the range.
        O::I16x8Q15MulrSatS => rule(L::I16S, S::I16, |b, x, y| {
            let product = b.ins().imul(x, y);
            let rounded = b.ins().iadd_imm_s(product, 1 << 14);
            let q = b.ins().sshr_imm_u(rounded, 15);
            clamp(b, q, -32768, 32767)
        }),

        O::I8x16MinS | O::I16x8MinS | O::I32x4MinS => pick(op, C::SignedLessThan),
        O::I8x16MinU | O::I16x8MinU | O::I32x4MinU => pick(op, C::UnsignedLessThan),
        O::I8x16MaxS | O::I16x8MaxS | O::I32x4MaxS => pick(op, C::SignedGreaterThan),
        O::I8x16MaxU | O::I16x8MaxU | O::I32x4MaxU => pick(op, C::UnsignedGreaterThan),
        // The rounding average `(x + y + 1) >> 1` of every byte (16-bit
        // lane) at once: `(x | y) - ((x ^ y) >> 1)`, never borrowing
        // across lanes.
        O::I8x16AvgrU => rule(L::I32, S::I32, |b, x, y| avgr_lanes(b, x, y, 0x7f7f_7f7f)),
        O::I16x8AvgrU => rule(L::I32, S::I32, |b, x, y| avgr_lanes(b, x, y, 0x7fff_7fff)),

        O::I8x16Eq | O::I16x8Eq | O::I32x4Eq | O::I64x2Eq => compare(op, C::Equal),
        O::I8x16Ne | O::I16x8Ne | O::I32x4Ne | O::I64x2Ne => compare(op, C::NotEqual),
        O::I8x16LtS | O::I16x8LtS | O::I32x4LtS | O::I64x2LtS => compare(op, C::SignedLessThan),
        O::I8x16LtU | O::I16x8LtU | O::I32x4LtU => compare(op, C::UnsignedLessThan),
        O::I8x16GtS | O::I16x8GtS | O::I32x4GtS | O::I64x2GtS => compare(op, C::SignedGreaterThan),
        O::I8x16GtU | O::I16x8GtU | O::I32x4GtU => compare(op, C::UnsignedGreaterThan),
        O::I8x16LeS | O::I16x8LeS | O::I32x4LeS | O::I64x2LeS => {
            compare(op, C::SignedLessThanOrEqual)
        }
        O::I8x16LeU | O::I16x8LeU | O::I32x4LeU => compare(op, C::UnsignedLessThanOrEqual),
        O::I8x16GeS | O::I16x8GeS | O::I32x4GeS | O::I64x2GeS => {
            compare(op, C::SignedGreaterThanOrEqual)
        }
        O::I8x16GeU | O::I16x8GeU | O::I32x4GeU => compare(op, C::UnsignedGreaterThanOrEqual),

        O::F32x4Add => rule(L::F32, S::F32, |b, x, y| b.ins().fadd(x, y)),
        O::F32x4Sub => rule(L::F32, S::F32, |b, x, y| b.ins().fsub(x, y)),
        O::F32x4Mul => rule(L::F32, S::F32, |b, x, y| b.ins().fmul(x, y)),
        O::F32x4Div => rule(L::F32, S::F32, |b, x, y| b.ins().fdiv(x, y)),
        O::F32x4Min => rule(L::F32, S::F32, |b, x, y| b.ins().fmin(x, y)),
        O::F32x4Max => rule(L::F32, S::F32, |b, x, y| b.ins().fmax(x, y)),
        O::F32x4PMin => rule(L::F32, S::F32, pmin),
        O::F32x4PMax => rule(L::F32, S::F32, pmax),
        O::F64x2Add => rule(L::F64, S::F64, |b, x, y| b.ins().fadd(x, y)),
        O::F64x2Sub => rule(L::F64, S::F64, |b, x, y| b.ins().fsub(x, y)),
        O::F64x2Mul => rule(L::F64, S::F64, |b, x, y| b.ins().fmul(x, y)),
        O::F64x2Div => rule(L::F64, S::F64, |b, x, y| b.ins().fdiv(x, y)),
        O::F64x2Min => rule(L::F64, S::F64, |b, x, y| b.ins().fmin(x, y)),
        O::F64x2Max => rule(L::F64, S::F64, |b, x, y| b.ins().fmax(x, y)),
        O::F64x2PMin => rule(L::F64, S::F64, pmin),
        O::F64x2PMax => rule(L::F64, S::F64, pmax),

        O::F32x4Eq | O::F64x2Eq => float_compare(op, FloatCC::Equal),
        O::F32x4Ne | O::F64x2Ne => float_compare(op, FloatCC::NotEqual),
        O::F32x4Lt | O::F64x2Lt => float_compare(op, FloatCC::LessThan),
        O::F32x4Gt | O::F64x2Gt => float_compare(op, FloatCC::GreaterThan),
        O::F32x4Le | O::F64x2Le => float_compare(op, FloatCC::LessThanOrEqual),
        O::F32x4Ge | O::F64x2Ge => float_compare(op, FloatCC::GreaterThanOrEqual),
        _ => return None,
    })
}

/// The integer shape an operator's name starts with (`i8x16.eq`: `I8`).
fn int_shape(op: &Operator<'_>) -> Shape {
    use Operator as O;
    match op {
        O::I8x16Eq
        | O::I8x16Ne
        | O::I8x16LtS
        | O::I8x16LtU
        | O::I8x16GtS
        | O::I8x16GtU
        | O::I8x16LeS
        | O::I8x16LeU
        | O::I8x16GeS
        | O::I8x16GeU
        | O::I8x16MinS
        | O::I8x16MinU
        | O::I8x16MaxS
        | O::I8x16MaxU => Shape::I8,
        O::I16x8Eq
        | O::I16x8Ne
        | O::I16x8LtS
        | O::I16x8LtU
        | O::I16x8GtS
        | O::I16x8GtU
        | O::I16x8LeS
        | O::I16x8LeU
        | O::I16x8GeS
        | O::I16x8GeU
        | O::I16x8MinS
        | O::I16x8MinU
        | O::I16x8MaxS
        | O::I16x8MaxU => Shape::I16,
        O::I64x2Eq | O::I64x2Ne | O::I64x2LtS | O::I64x2GtS | O::I64x2LeS | O::I64x2GeS => {
            Shape::I64
        }
        _ => Shape::I32,
    }
}

/// How lanes of integer `shape` are read for a comparison `cc`: narrow
/// lanes widened with the comparison's signedness keep its order.
fn int_lanes(shape: Shape, cc: IntCC) -> Lanes {
    let signed = matches!(
        cc,
        IntCC::SignedLessThan
            | IntCC::SignedGreaterThan
            | IntCC::SignedLessThanOrEqual
            | IntCC::SignedGreaterThanOrEqual
    );
    match (shape, signed) {
        (Shape::I8, true) => Lanes::I8S,
        (Shape::I8, false) => Lanes::I8U,
        (Shape::I16, true) => Lanes::I16S,
        (Shape::I16, false) => Lanes::I16U,
        (Shape::I64, _) => Lanes::I64,
        _ => Lanes::I32,
    }
}

macro_rules! by_cc {
    ($cc:expr, |$b:ident, $x:ident, $y:ident, $c:ident| $body:expr) => {
        match $cc {
            IntCC::Equal => |$b: &mut FunctionBuilder<'_>, $x, $y| {
                let $c = IntCC::Equal;
                $body
            },
            IntCC::NotEqual => |$b: &mut FunctionBuilder<'_>, $x, $y| {
                let $c = IntCC::NotEqual;
                $body
            },
            IntCC::SignedLessThan => |$b: &mut FunctionBuilder<'_>, $x, $y| {
                let $c = IntCC::SignedLessThan;
                $body
            },
            IntCC::UnsignedLessThan => |$b: &mut FunctionBuilder<'_>, $x, $y| {
                let $c = IntCC::UnsignedLessThan;
                $body
            },
            IntCC::SignedGreaterThan => |$b: &mut FunctionBuilder<'_>, $x, $y| {
                let $c = IntCC::SignedGreaterThan;
                $body
            },
            IntCC::UnsignedGreaterThan => |$b: &mut FunctionBuilder<'_>, $x, $y| {
                let $c = IntCC::UnsignedGreaterThan;
                $body
            },
            IntCC::SignedLessThanOrEqual => |$b: &mut FunctionBuilder<'_>, $x, $y| {
                let $c = IntCC::SignedLessThanOrEqual;
                $body
            },
            IntCC::UnsignedLessThanOrEqual => |$b: &mut FunctionBuilder<'_>, $x, $y| {
                let $c = IntCC::UnsignedLessThanOrEqual;
                $body
            },
            IntCC::SignedGreaterThanOrEqual => |$b: &mut FunctionBuilder<'_>, $x, $y| {
                let $c = IntCC::SignedGreaterThanOrEqual;
                $body
            },
            IntCC::UnsignedGreaterThanOrEqual => |$b: &mut FunctionBuilder<'_>, $x, $y| {
                let $c = IntCC::UnsignedGreaterThanOrEqual;
                $body
            },
        }
    };
}

/// An integer comparison: each result lane all ones when `cc` holds.
fn compare(op: &Operator<'_>, cc: IntCC) -> Rule<BinaryFn> {
    let shape = int_shape(op);
    let emit: BinaryFn = by_cc!(cc, |b, x, y, c| {
        let flag = b.ins().icmp(c, x, y);
        let ty = b.func.dfg.value_type(x);
        mask(b, flag, ty)
    });
    rule(int_lanes(shape, cc), shape, emit)
}

/// `min` or `max`: the lane for which `cc(x, y)` holds, else `y`.
fn pick(op: &Operator<'_>, cc: IntCC) -> Rule<BinaryFn> {
    let shape = int_shape(op);
    let emit: BinaryFn = by_cc!(cc, |b, x, y, c| {
        let first = b.ins().icmp(c, x, y);
        b.ins().select(first, x, y)
    });
    rule(int_lanes(shape, cc), shape, emit)
}

/// A float comparison: each result lane (an `i32` or `i64`) all ones when
/// `cc` holds.
fn float_compare(op: &Operator<'_>, cc: FloatCC) -> Rule<BinaryFn> {
    let f64x2 = matches!(
        op,
        Operator::F64x2Eq
            | Operator::F64x2Ne
            | Operator::F64x2Lt
            | Operator::F64x2Gt
            | Operator::F64x2Le
            | Operator::F64x2Ge
    );
    macro_rules! fcmp_rule {
        ($cc:expr, $ty:expr) => {
            |b: &mut FunctionBuilder<'_>, x, y| {
                let flag = b.ins().fcmp($cc, x, y);
                mask(b, flag, $ty)
            }
        };
    }
    let emit: BinaryFn = match (cc, f64x2) {
        (FloatCC::Equal, false) => fcmp_rule!(FloatCC::Equal, I32),
        (FloatCC::NotEqual, false) => fcmp_rule!(FloatCC::NotEqual, I32),
        (FloatCC::LessThan, false) => fcmp_rule!(FloatCC::LessThan, I32),
        (FloatCC::GreaterThan, false) => fcmp_rule!(FloatCC::GreaterThan, I32),
        (FloatCC::LessThanOrEqual, false) => fcmp_rule!(FloatCC::LessThanOrEqual, I32),
        (FloatCC::Equal, true) => fcmp_rule!(FloatCC::Equal, I64),
        (FloatCC::NotEqual, true) => fcmp_rule!(FloatCC::NotEqual, I64),
        (FloatCC::LessThan, true) => fcmp_rule!(FloatCC::LessThan, I64),
        (FloatCC::GreaterThan, true) => fcmp_rule!(FloatCC::GreaterThan, I64),
        (FloatCC::LessThanOrEqual, true) => fcmp_rule!(FloatCC::LessThanOrEqual, I64),
        (_, false) => fcmp_rule!(FloatCC::GreaterThanOrEqual, I32),
        (_, true) => fcmp_rule!(FloatCC::GreaterThanOrEqual, I64),
    };
    if f64x2 {
        rule(Lanes::F64, Shape::I64, emit)
    } else {
        rule(Lanes::F32, Shape::I32, emit)
    }
}

/// A comparison's flag (`i8` 0/1) as a lane of `ty`: all ones or zero.
pub(super) fn mask(b: &mut FunctionBuilder<'_>, flag: Value, ty: Type) -> Value {
    let one = b.ins().uextend(ty, flag);
    let zero = b.ins().iconst(ty, 0);
    b.ins().isub(zero, one)
}

/// `-x` (CLIF's `ineg` has no PTX rule: `0 - x`).
fn neg(b: &mut FunctionBuilder<'_>, x: Value) -> Value {
    let ty = b.func.dfg.value_type(x);
    let zero = b.ins().iconst(ty, 0);
    b.ins().isub(zero, x)
}

/// `|x|`, wrapping (the most negative value is its own).
fn abs(b: &mut FunctionBuilder<'_>, x: Value) -> Value {
    let negative = b.ins().icmp_imm_s(IntCC::SignedLessThan, x, 0);
    let minus = neg(b, x);
    b.ins().select(negative, minus, x)
}

/// `x` clamped to `[low, high]` (signed).
pub(super) fn clamp(b: &mut FunctionBuilder<'_>, x: Value, low: i64, high: i64) -> Value {
    let below = b.ins().icmp_imm_s(IntCC::SignedLessThan, x, low);
    let low = b.ins().iconst(I32, low);
    let x = b.ins().select(below, low, x);
    let above = b.ins().icmp_imm_s(IntCC::SignedGreaterThan, x, high);
    let high = b.ins().iconst(I32, high);
    b.ins().select(above, high, x)
}

/// Wasm's `pmin`: `y < x ? y : x` (either operand's bits, NaNs included).
fn pmin(b: &mut FunctionBuilder<'_>, x: Value, y: Value) -> Value {
    let less = b.ins().fcmp(FloatCC::LessThan, y, x);
    b.ins().select(less, y, x)
}

/// Wasm's `pmax`: `x < y ? y : x`.
fn pmax(b: &mut FunctionBuilder<'_>, x: Value, y: Value) -> Value {
    let less = b.ins().fcmp(FloatCC::LessThan, x, y);
    b.ins().select(less, y, x)
}

/// Lane-wise `x + y` on a word of lanes whose top bits are `high`: the
/// lanes' low bits add without carrying out of a lane, the top bit is the
/// sum's bit of the two operands' top bits and that carry.
fn add_lanes(b: &mut FunctionBuilder<'_>, x: Value, y: Value, high: u32) -> Value {
    let low = !high;
    let xl = b.ins().band_imm_u(x, i64::from(low));
    let yl = b.ins().band_imm_u(y, i64::from(low));
    let sum = b.ins().iadd(xl, yl);
    let tops = b.ins().bxor(x, y);
    let tops = b.ins().band_imm_u(tops, i64::from(high));
    b.ins().bxor(sum, tops)
}

/// Lane-wise `x - y`: each lane's top bit set in `x` first, so no lane
/// borrows from the next, then the top bit put right.
pub(super) fn sub_lanes(b: &mut FunctionBuilder<'_>, x: Value, y: Value, high: u32) -> Value {
    let low = !high;
    let xh = b.ins().bor_imm_u(x, i64::from(high));
    let yl = b.ins().band_imm_u(y, i64::from(low));
    let diff = b.ins().isub(xh, yl);
    let not_y = b.ins().bnot(y);
    let tops = b.ins().bxor(x, not_y);
    let tops = b.ins().band_imm_u(tops, i64::from(high));
    b.ins().bxor(diff, tops)
}

/// Lane-wise rounding average of unsigned lanes (`low`: each lane's bits
/// but its top one).
fn avgr_lanes(b: &mut FunctionBuilder<'_>, x: Value, y: Value, low: u32) -> Value {
    let or = b.ins().bor(x, y);
    let xor = b.ins().bxor(x, y);
    let half = b.ins().ushr_imm_u(xor, 1);
    let half = b.ins().band_imm_u(half, i64::from(low));
    b.ins().isub(or, half)
}

/// The population count of each byte of a word (the classic bit-parallel
/// count, stopped at bytes).
fn popcnt_bytes(b: &mut FunctionBuilder<'_>, x: Value) -> Value {
    let pairs = b.ins().ushr_imm_u(x, 1);
    let pairs = b.ins().band_imm_u(pairs, 0x5555_5555);
    let x = b.ins().isub(x, pairs);
    let low = b.ins().band_imm_u(x, 0x3333_3333);
    let high = b.ins().ushr_imm_u(x, 2);
    let high = b.ins().band_imm_u(high, 0x3333_3333);
    let nibbles = b.ins().iadd(low, high);
    let shifted = b.ins().ushr_imm_u(nibbles, 4);
    let bytes = b.ins().iadd(nibbles, shifted);
    b.ins().band_imm_u(bytes, 0x0f0f_0f0f)
}
