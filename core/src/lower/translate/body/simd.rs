//! The SIMD proposal (`docs/kernels.md`, "SIMD"): a `v128` is four `i32`
//! CLIF values, its 32-bit words in memory order (lane 0 of an `i32x4` is
//! word 0, bytes 0 to 3 of an `i8x16` are word 0's low byte up). That is
//! the form it takes on the operand stack, in locals, block parameters and
//! call arguments, so control flow needs nothing new; each operator reads
//! the words as the lanes of its shape (`lanes`), computes every lane with
//! scalar CLIF that the op table lowers, and writes words back. The words
//! being the bits, every reinterpretation between shapes is exact. This
//! file holds the operators that are not lane by lane (constants, lane
//! access, shuffles, whole-vector tests, shifts, narrowing and widening);
//! `rules` the lane-wise ones, `memory` the loads and stores.

mod lanes;
mod memory;
mod rules;

use alloc::vec::Vec;

use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::types::{F32, F64, I32, I64};
use cranelift_codegen::ir::{InstBuilder, MemFlagsData, Value};
use wasmparser::Operator;

pub(in crate::lower::translate) use memory::simd_access;

pub(super) use lanes::Views;
use lanes::{Lanes, Shape, join, k32, narrow_lane, split, words_of};
use rules::{binary_rule, clamp, unary_rule};

use super::{FuncState, Translator, internal};
use crate::lower::LowerError;

/// The CLIF values of one `v128`.
pub(super) const LANES: usize = 4;

/// A `v128`'s words, word 0 first.
type Words = [Value; LANES];

/// Pops a `v128`.
fn pop_v128(st: &mut FuncState) -> Result<Words, LowerError> {
    let values = st.pop_n(LANES)?;
    Ok(words_of(&values))
}

impl Translator<'_, '_, '_> {
    /// Whether the `drop` or `select` being translated takes `v128`s.
    pub(super) fn v128_operand(&self) -> bool {
        let offset = u64::from(self.builder.srcloc().bits());
        self.module.v128_operand(offset)
    }

    /// The words of `v128.const` `bits`.
    pub(super) fn v128_const(&mut self, bits: u128) -> Words {
        core::array::from_fn(|k| k32(&mut self.builder, (bits >> (32 * k)) as u32))
    }

    /// Typed lanes a `v128` was packed from, if it was.
    fn cached(&self, words: Words, shape: Shape) -> Option<Vec<Value>> {
        self.views.get(words, shape)
    }

    /// Translates `op` when it is a SIMD operator; `false` when it is not.
    pub(super) fn simd(
        &mut self,
        st: &mut FuncState,
        op: &Operator<'_>,
    ) -> Result<bool, LowerError> {
        if let Some((memarg, access)) = simd_access(op) {
            self.simd_memory(st, memarg, access)?;
            return Ok(true);
        }
        if let Some(rule) = unary_rule(op) {
            let x = pop_v128(st)?;
            let lanes: Vec<Value> = self
                .lanes(x, rule.input)
                .into_iter()
                .map(|x| (rule.emit)(&mut self.builder, x))
                .collect();
            let words = self.pack_words(&lanes, rule.output);
            st.stack.extend(words);
            return Ok(true);
        }
        if let Some(rule) = binary_rule(op) {
            let y = pop_v128(st)?;
            let x = pop_v128(st)?;
            let xs = self.lanes(x, rule.input);
            let ys = self.lanes(y, rule.input);
            let lanes: Vec<Value> = xs
                .into_iter()
                .zip(ys)
                .map(|(x, y)| (rule.emit)(&mut self.builder, x, y))
                .collect();
            let words = self.pack_words(&lanes, rule.output);
            st.stack.extend(words);
            return Ok(true);
        }
        use Operator as O;
        let words = match *op {
            O::V128Const { value } => self.v128_const(u128::from_le_bytes(*value.bytes())),
            O::I8x16Splat | O::I16x8Splat | O::I32x4Splat | O::I64x2Splat => {
                let x = st.pop()?;
                let shape = match *op {
                    O::I8x16Splat => Shape::I8,
                    O::I16x8Splat => Shape::I16,
                    O::I32x4Splat => Shape::I32,
                    _ => Shape::I64,
                };
                self.splat(x, shape)
            }
            O::F32x4Splat | O::F64x2Splat => {
                let x = st.pop()?;
                let shape = match *op {
                    O::F32x4Splat => Shape::F32,
                    _ => Shape::F64,
                };
                let lanes = alloc::vec![x; shape.count()];
                self.pack_words(&lanes, shape)
            }
            O::I8x16ExtractLaneS { lane } | O::I8x16ExtractLaneU { lane } => {
                let words = pop_v128(st)?;
                let signed = matches!(*op, O::I8x16ExtractLaneS { .. });
                let k = usize::from(lane);
                let x = narrow_lane(&mut self.builder, words[k / 4], k, 8, signed);
                st.stack.push(x);
                return Ok(true);
            }
            O::I16x8ExtractLaneS { lane } | O::I16x8ExtractLaneU { lane } => {
                let words = pop_v128(st)?;
                let signed = matches!(*op, O::I16x8ExtractLaneS { .. });
                let k = usize::from(lane);
                let x = narrow_lane(&mut self.builder, words[k / 2], k, 16, signed);
                st.stack.push(x);
                return Ok(true);
            }
            O::I32x4ExtractLane { lane }
            | O::I64x2ExtractLane { lane }
            | O::F32x4ExtractLane { lane }
            | O::F64x2ExtractLane { lane } => {
                let words = pop_v128(st)?;
                let lanes = match *op {
                    O::I32x4ExtractLane { .. } => Lanes::I32,
                    O::I64x2ExtractLane { .. } => Lanes::I64,
                    O::F32x4ExtractLane { .. } => Lanes::F32,
                    _ => Lanes::F64,
                };
                let x = self.lanes(words, lanes)[usize::from(lane)];
                st.stack.push(x);
                return Ok(true);
            }
            O::I8x16ReplaceLane { lane }
            | O::I16x8ReplaceLane { lane }
            | O::I32x4ReplaceLane { lane }
            | O::I64x2ReplaceLane { lane }
            | O::F32x4ReplaceLane { lane }
            | O::F64x2ReplaceLane { lane } => {
                let x = st.pop()?;
                let words = pop_v128(st)?;
                let shape = match *op {
                    O::I8x16ReplaceLane { .. } => Shape::I8,
                    O::I16x8ReplaceLane { .. } => Shape::I16,
                    O::I32x4ReplaceLane { .. } => Shape::I32,
                    O::I64x2ReplaceLane { .. } => Shape::I64,
                    O::F32x4ReplaceLane { .. } => Shape::F32,
                    _ => Shape::F64,
                };
                self.replace_lane(words, shape, usize::from(lane), x)
            }
            O::I8x16Shuffle { lanes } => {
                let b = pop_v128(st)?;
                let a = pop_v128(st)?;
                self.shuffle(a, b, lanes)
            }
            O::I8x16Swizzle => {
                let s = pop_v128(st)?;
                let a = pop_v128(st)?;
                self.swizzle(a, s)
            }
            O::V128Bitselect => {
                let c = pop_v128(st)?;
                let y = pop_v128(st)?;
                let x = pop_v128(st)?;
                core::array::from_fn(|k| {
                    let b = &mut self.builder;
                    let from_x = b.ins().band(x[k], c[k]);
                    let not_c = b.ins().bnot(c[k]);
                    let from_y = b.ins().band(y[k], not_c);
                    b.ins().bor(from_x, from_y)
                })
            }
            O::V128AnyTrue
            | O::I8x16AllTrue
            | O::I16x8AllTrue
            | O::I32x4AllTrue
            | O::I64x2AllTrue
            | O::I8x16Bitmask
            | O::I16x8Bitmask
            | O::I32x4Bitmask
            | O::I64x2Bitmask => {
                let words = pop_v128(st)?;
                let x = self.test(op, words);
                st.stack.push(x);
                return Ok(true);
            }
            O::I8x16Shl
            | O::I8x16ShrS
            | O::I8x16ShrU
            | O::I16x8Shl
            | O::I16x8ShrS
            | O::I16x8ShrU
            | O::I32x4Shl
            | O::I32x4ShrS
            | O::I32x4ShrU
            | O::I64x2Shl
            | O::I64x2ShrS
            | O::I64x2ShrU => {
                let amount = st.pop()?;
                let words = pop_v128(st)?;
                self.shift(op, words, amount)?
            }
            O::I8x16NarrowI16x8S
            | O::I8x16NarrowI16x8U
            | O::I16x8NarrowI32x4S
            | O::I16x8NarrowI32x4U => {
                let b = pop_v128(st)?;
                let a = pop_v128(st)?;
                let (input, output, low, high) = match *op {
                    O::I8x16NarrowI16x8S => (Lanes::I16S, Shape::I8, -128, 127),
                    O::I8x16NarrowI16x8U => (Lanes::I16S, Shape::I8, 0, 255),
                    O::I16x8NarrowI32x4S => (Lanes::I32, Shape::I16, -32768, 32767),
                    _ => (Lanes::I32, Shape::I16, 0, 65535),
                };
                let mut lanes = self.lanes(a, input);
                lanes.extend(self.lanes(b, input));
                let lanes: Vec<Value> = lanes
                    .into_iter()
                    .map(|x| clamp(&mut self.builder, x, low, high))
                    .collect();
                self.pack_words(&lanes, output)
            }
            O::I16x8ExtendLowI8x16S
            | O::I16x8ExtendHighI8x16S
            | O::I16x8ExtendLowI8x16U
            | O::I16x8ExtendHighI8x16U
            | O::I32x4ExtendLowI16x8S
            | O::I32x4ExtendHighI16x8S
            | O::I32x4ExtendLowI16x8U
            | O::I32x4ExtendHighI16x8U
            | O::I64x2ExtendLowI32x4S
            | O::I64x2ExtendHighI32x4S
            | O::I64x2ExtendLowI32x4U
            | O::I64x2ExtendHighI32x4U => {
                let words = pop_v128(st)?;
                self.extend(op, words)
            }
            O::I16x8ExtAddPairwiseI8x16S
            | O::I16x8ExtAddPairwiseI8x16U
            | O::I32x4ExtAddPairwiseI16x8S
            | O::I32x4ExtAddPairwiseI16x8U => {
                let words = pop_v128(st)?;
                let (input, output) = match *op {
                    O::I16x8ExtAddPairwiseI8x16S => (Lanes::I8S, Shape::I16),
                    O::I16x8ExtAddPairwiseI8x16U => (Lanes::I8U, Shape::I16),
                    O::I32x4ExtAddPairwiseI16x8S => (Lanes::I16S, Shape::I32),
                    _ => (Lanes::I16U, Shape::I32),
                };
                let lanes = self.lanes(words, input);
                let sums: Vec<Value> = lanes
                    .chunks(2)
                    .map(|pair| self.builder.ins().iadd(pair[0], pair[1]))
                    .collect();
                self.pack_words(&sums, output)
            }
            O::I16x8ExtMulLowI8x16S
            | O::I16x8ExtMulHighI8x16S
            | O::I16x8ExtMulLowI8x16U
            | O::I16x8ExtMulHighI8x16U
            | O::I32x4ExtMulLowI16x8S
            | O::I32x4ExtMulHighI16x8S
            | O::I32x4ExtMulLowI16x8U
            | O::I32x4ExtMulHighI16x8U
            | O::I64x2ExtMulLowI32x4S
            | O::I64x2ExtMulHighI32x4S
            | O::I64x2ExtMulLowI32x4U
            | O::I64x2ExtMulHighI32x4U => {
                let y = pop_v128(st)?;
                let x = pop_v128(st)?;
                self.extmul(op, x, y)
            }
            O::I32x4DotI16x8S => {
                let y = pop_v128(st)?;
                let x = pop_v128(st)?;
                let xs = self.lanes(x, Lanes::I16S);
                let ys = self.lanes(y, Lanes::I16S);
                core::array::from_fn(|k| {
                    let b = &mut self.builder;
                    let even = b.ins().imul(xs[2 * k], ys[2 * k]);
                    let odd = b.ins().imul(xs[2 * k + 1], ys[2 * k + 1]);
                    b.ins().iadd(even, odd)
                })
            }
            O::I32x4TruncSatF64x2SZero | O::I32x4TruncSatF64x2UZero => {
                let words = pop_v128(st)?;
                let lanes = self.lanes(words, Lanes::F64);
                let zero = k32(&mut self.builder, 0);
                let signed = matches!(*op, O::I32x4TruncSatF64x2SZero);
                let [lo, hi] = [lanes[0], lanes[1]].map(|x| match signed {
                    true => self.builder.ins().fcvt_to_sint_sat(I32, x),
                    false => self.builder.ins().fcvt_to_uint_sat(I32, x),
                });
                [lo, hi, zero, zero]
            }
            O::F64x2ConvertLowI32x4S | O::F64x2ConvertLowI32x4U => {
                let words = pop_v128(st)?;
                let signed = matches!(*op, O::F64x2ConvertLowI32x4S);
                let lanes = [words[0], words[1]].map(|x| match signed {
                    true => self.builder.ins().fcvt_from_sint(F64, x),
                    false => self.builder.ins().fcvt_from_uint(F64, x),
                });
                self.pack_words(&lanes, Shape::F64)
            }
            O::F32x4DemoteF64x2Zero => {
                let words = pop_v128(st)?;
                let lanes = self.lanes(words, Lanes::F64);
                let zero = self.builder.ins().f32const(0.0);
                let lo = self.builder.ins().fdemote(F32, lanes[0]);
                let hi = self.builder.ins().fdemote(F32, lanes[1]);
                self.pack_words(&[lo, hi, zero, zero], Shape::F32)
            }
            O::F64x2PromoteLowF32x4 => {
                let words = pop_v128(st)?;
                let lanes = self.lanes(words, Lanes::F32);
                let lo = self.builder.ins().fpromote(F64, lanes[0]);
                let hi = self.builder.ins().fpromote(F64, lanes[1]);
                self.pack_words(&[lo, hi], Shape::F64)
            }
            _ => return Ok(false),
        };
        st.stack.extend(words);
        Ok(true)
    }

    /// A `v128` with `x` (a lane of `shape`: the low bits of an `i32` for
    /// narrow lanes) in every lane.
    fn splat(&mut self, x: Value, shape: Shape) -> Words {
        let b = &mut self.builder;
        match shape {
            Shape::I8 | Shape::I16 => {
                let (mask, spread) = match shape {
                    Shape::I8 => (0xff, 0x0101_0101),
                    _ => (0xffff, 0x0001_0001),
                };
                let lane = b.ins().band_imm_u(x, mask);
                let word = b.ins().imul_imm_u(lane, spread);
                [word; LANES]
            }
            Shape::I32 => [x; LANES],
            _ => {
                let lanes = alloc::vec![x; shape.count()];
                self.pack_words(&lanes, shape)
            }
        }
    }

    /// `words` with lane `lane` of `shape` replaced by `x`.
    fn replace_lane(&mut self, words: Words, shape: Shape, lane: usize, x: Value) -> Words {
        let mut words = words;
        let b = &mut self.builder;
        match shape {
            Shape::I8 | Shape::I16 => {
                let bits = shape.bits();
                let per = (32 / bits) as usize;
                let at = (lane % per) as u32 * bits;
                let field = ((1u64 << bits) - 1) << at;
                let word = &mut words[lane / per];
                let kept = b.ins().band_imm_u(*word, i64::from(!(field as u32)));
                let low = b.ins().band_imm_u(x, (1i64 << bits) - 1);
                let new = match at {
                    0 => low,
                    n => b.ins().ishl_imm_u(low, i64::from(n)),
                };
                *word = b.ins().bor(kept, new);
            }
            Shape::I32 => words[lane] = x,
            Shape::F32 => words[lane] = b.ins().bitcast(I32, MemFlagsData::new(), x),
            Shape::I64 | Shape::F64 => {
                let bits = match shape {
                    Shape::F64 => b.ins().bitcast(I64, MemFlagsData::new(), x),
                    _ => x,
                };
                let [lo, hi] = split(b, bits);
                words[2 * lane] = lo;
                words[2 * lane + 1] = hi;
            }
        }
        words
    }

    /// `i8x16.shuffle`: byte `j` of the result is byte `lanes[j]` of `a`
    /// (0 to 15) or `b` (16 to 31). Each result word is assembled from
    /// runs of bytes that come from one source word in order; a whole
    /// aligned word is taken as it is.
    fn shuffle(&mut self, a: Words, b: Words, lanes: [u8; 16]) -> Words {
        let source = [a[0], a[1], a[2], a[3], b[0], b[1], b[2], b[3]];
        core::array::from_fn(|k| {
            let bytes = &lanes[4 * k..4 * k + 4];
            let mut word: Option<Value> = None;
            let mut j = 0;
            while j < 4 {
                // The run from result byte j: source bytes in order, in
                // one source word.
                let first = usize::from(bytes[j] & 31);
                let mut n = 1;
                while j + n < 4
                    && usize::from(bytes[j + n] & 31) == first + n
                    && (first + n) % 4 != 0
                {
                    n += 1;
                }
                let w = source[first / 4];
                let from = (first % 4) as u32 * 8;
                let to = j as u32 * 8;
                let width = n as u32 * 8;
                let ins = &mut self.builder;
                let field = match from {
                    0 => w,
                    s => ins.ins().ushr_imm_u(w, i64::from(s)),
                };
                let field = if from + width == 32 || to + width == 32 {
                    field
                } else {
                    ins.ins().band_imm_u(field, (1i64 << width) - 1)
                };
                let field = match to {
                    0 => field,
                    s => ins.ins().ishl_imm_u(field, i64::from(s)),
                };
                word = Some(match word {
                    None => field,
                    Some(w) => ins.ins().bor(w, field),
                });
                j += n;
            }
            word.unwrap_or(source[0])
        })
    }

    /// `i8x16.swizzle`: byte `j` of the result is byte `s[j]` of `a`, or 0
    /// when `s[j]` is 16 or more. The byte is read from `a`'s 8-byte half
    /// that holds it, shifted by the index.
    fn swizzle(&mut self, a: Words, s: Words) -> Words {
        let lo = join(&mut self.builder, a[0], a[1]);
        let hi = join(&mut self.builder, a[2], a[3]);
        let indices = self.lanes(s, Lanes::I8U);
        let picked: Vec<Value> = indices
            .into_iter()
            .map(|index| {
                let b = &mut self.builder;
                let upper = b.ins().band_imm_u(index, 8);
                let half = b.ins().select(upper, hi, lo);
                let within = b.ins().band_imm_u(index, 7);
                let shift = b.ins().ishl_imm_u(within, 3);
                let byte = b.ins().ushr(half, shift);
                let byte = b.ins().ireduce(I32, byte);
                let inside = b.ins().icmp_imm_u(IntCC::UnsignedLessThan, index, 16);
                let zero = k32(b, 0);
                b.ins().select(inside, byte, zero)
            })
            .collect();
        self.pack_words(&picked, Shape::I8)
    }

    /// The `i32` of a whole-vector test: `any_true`, `all_true`,
    /// `bitmask`.
    fn test(&mut self, op: &Operator<'_>, w: Words) -> Value {
        use Operator as O;
        let b = &mut self.builder;
        match *op {
            O::V128AnyTrue => {
                let low = b.ins().bor(w[0], w[1]);
                let high = b.ins().bor(w[2], w[3]);
                let any = b.ins().bor(low, high);
                let nonzero = b.ins().icmp_imm_u(IntCC::NotEqual, any, 0);
                b.ins().uextend(I32, nonzero)
            }
            // A word has a zero lane exactly when `(w - ones) & !w & tops`
            // is not zero (the lowest zero lane borrows, and no lane above
            // a nonzero one sets its top bit falsely first).
            O::I8x16AllTrue | O::I16x8AllTrue => {
                let (ones, tops) = match *op {
                    O::I8x16AllTrue => (0x0101_0101, 0x8080_8080u32),
                    _ => (0x0001_0001, 0x8000_8000u32),
                };
                let mut zeros = None;
                for &word in &w {
                    let less = b.ins().iadd_imm_s(word, -ones);
                    let not = b.ins().bnot(word);
                    let z = b.ins().band(less, not);
                    let z = b.ins().band_imm_u(z, i64::from(tops));
                    zeros = Some(match zeros {
                        None => z,
                        Some(acc) => b.ins().bor(acc, z),
                    });
                }
                let zeros = zeros.unwrap_or(w[0]);
                let none = b.ins().icmp_imm_u(IntCC::Equal, zeros, 0);
                b.ins().uextend(I32, none)
            }
            O::I32x4AllTrue | O::I64x2AllTrue => {
                let lanes: Vec<Value> = match *op {
                    O::I32x4AllTrue => w.to_vec(),
                    _ => [(w[0], w[1]), (w[2], w[3])]
                        .map(|(lo, hi)| b.ins().bor(lo, hi))
                        .to_vec(),
                };
                let mut all = None;
                for lane in lanes {
                    let nonzero = b.ins().icmp_imm_u(IntCC::NotEqual, lane, 0);
                    all = Some(match all {
                        None => nonzero,
                        Some(acc) => b.ins().band(acc, nonzero),
                    });
                }
                let all = all.unwrap_or(w[0]);
                b.ins().uextend(I32, all)
            }
            _ => {
                // Each word's lane sign bits, gathered at the word's place
                // in the mask.
                let (per, bits_of): (
                    u32,
                    fn(&mut cranelift_frontend::FunctionBuilder<'_>, Value) -> Value,
                ) = match *op {
                    O::I8x16Bitmask => (4, byte_signs),
                    O::I16x8Bitmask => (2, half_signs),
                    O::I32x4Bitmask => (1, |b, w| b.ins().ushr_imm_u(w, 31)),
                    _ => (0, |b, w| b.ins().ushr_imm_u(w, 31)),
                };
                let mut mask = None;
                for (k, &word) in w.iter().enumerate() {
                    // An i64x2 mask reads the high words only.
                    if per == 0 && k % 2 == 0 {
                        continue;
                    }
                    let signs = bits_of(b, word);
                    let at = match per {
                        0 => k as u32 / 2,
                        _ => k as u32 * per,
                    };
                    let signs = match at {
                        0 => signs,
                        n => b.ins().ishl_imm_u(signs, i64::from(n)),
                    };
                    mask = Some(match mask {
                        None => signs,
                        Some(acc) => b.ins().bor(acc, signs),
                    });
                }
                mask.unwrap_or(w[0])
            }
        }
    }

    /// A lane shift by `amount` (an `i32`, taken modulo the lane width).
    /// `i32x4` and `i64x2` lanes shift as CLIF does (modulo the width);
    /// narrow lanes shift within their `i32`s, their own width masked.
    fn shift(&mut self, op: &Operator<'_>, w: Words, amount: Value) -> Result<Words, LowerError> {
        use Operator as O;
        let (lanes, output) = match *op {
            O::I8x16Shl | O::I8x16ShrU => (Lanes::I8U, Shape::I8),
            O::I8x16ShrS => (Lanes::I8S, Shape::I8),
            O::I16x8Shl | O::I16x8ShrU => (Lanes::I16U, Shape::I16),
            O::I16x8ShrS => (Lanes::I16S, Shape::I16),
            O::I32x4Shl | O::I32x4ShrS | O::I32x4ShrU => (Lanes::I32, Shape::I32),
            O::I64x2Shl | O::I64x2ShrS | O::I64x2ShrU => (Lanes::I64, Shape::I64),
            _ => return Err(internal("not a SIMD shift")),
        };
        let amount = match output {
            Shape::I8 | Shape::I16 => self
                .builder
                .ins()
                .band_imm_u(amount, i64::from(output.bits() - 1)),
            _ => amount,
        };
        let xs = self.lanes(w, lanes);
        let shifted: Vec<Value> = xs
            .into_iter()
            .map(|x| {
                let b = &mut self.builder;
                match *op {
                    O::I8x16Shl | O::I16x8Shl | O::I32x4Shl | O::I64x2Shl => {
                        b.ins().ishl(x, amount)
                    }
                    O::I8x16ShrS | O::I16x8ShrS | O::I32x4ShrS | O::I64x2ShrS => {
                        b.ins().sshr(x, amount)
                    }
                    _ => b.ins().ushr(x, amount),
                }
            })
            .collect();
        Ok(self.pack_words(&shifted, output))
    }

    /// `extend_low`, `extend_high`: half of the lanes, each widened to
    /// twice its width.
    fn extend(&mut self, op: &Operator<'_>, w: Words) -> Words {
        use Operator as O;
        let (input, output, high) = match *op {
            O::I16x8ExtendLowI8x16S => (Lanes::I8S, Shape::I16, false),
            O::I16x8ExtendHighI8x16S => (Lanes::I8S, Shape::I16, true),
            O::I16x8ExtendLowI8x16U => (Lanes::I8U, Shape::I16, false),
            O::I16x8ExtendHighI8x16U => (Lanes::I8U, Shape::I16, true),
            O::I32x4ExtendLowI16x8S => (Lanes::I16S, Shape::I32, false),
            O::I32x4ExtendHighI16x8S => (Lanes::I16S, Shape::I32, true),
            O::I32x4ExtendLowI16x8U => (Lanes::I16U, Shape::I32, false),
            O::I32x4ExtendHighI16x8U => (Lanes::I16U, Shape::I32, true),
            O::I64x2ExtendLowI32x4S | O::I64x2ExtendLowI32x4U => (Lanes::I32, Shape::I64, false),
            _ => (Lanes::I32, Shape::I64, true),
        };
        let lanes = self.half_lanes(w, input, high);
        let lanes = match output {
            Shape::I64 => {
                let signed = matches!(*op, O::I64x2ExtendLowI32x4S | O::I64x2ExtendHighI32x4S);
                self.widen_lanes(&lanes, signed)
            }
            _ => lanes,
        };
        self.pack_words(&lanes, output)
    }

    /// `extmul_low`, `extmul_high`: the products of half of the lanes,
    /// each widened to twice its width first.
    fn extmul(&mut self, op: &Operator<'_>, x: Words, y: Words) -> Words {
        use Operator as O;
        let (input, output, high) = match *op {
            O::I16x8ExtMulLowI8x16S => (Lanes::I8S, Shape::I16, false),
            O::I16x8ExtMulHighI8x16S => (Lanes::I8S, Shape::I16, true),
            O::I16x8ExtMulLowI8x16U => (Lanes::I8U, Shape::I16, false),
            O::I16x8ExtMulHighI8x16U => (Lanes::I8U, Shape::I16, true),
            O::I32x4ExtMulLowI16x8S => (Lanes::I16S, Shape::I32, false),
            O::I32x4ExtMulHighI16x8S => (Lanes::I16S, Shape::I32, true),
            O::I32x4ExtMulLowI16x8U => (Lanes::I16U, Shape::I32, false),
            O::I32x4ExtMulHighI16x8U => (Lanes::I16U, Shape::I32, true),
            O::I64x2ExtMulLowI32x4S | O::I64x2ExtMulLowI32x4U => (Lanes::I32, Shape::I64, false),
            _ => (Lanes::I32, Shape::I64, true),
        };
        let mut xs = self.half_lanes(x, input, high);
        let mut ys = self.half_lanes(y, input, high);
        if output == Shape::I64 {
            let signed = matches!(*op, O::I64x2ExtMulLowI32x4S | O::I64x2ExtMulHighI32x4S);
            xs = self.widen_lanes(&xs, signed);
            ys = self.widen_lanes(&ys, signed);
        }
        let products: Vec<Value> = xs
            .into_iter()
            .zip(ys)
            .map(|(x, y)| self.builder.ins().imul(x, y))
            .collect();
        self.pack_words(&products, output)
    }

    /// The low or high half of `w`'s lanes read as `lanes`.
    fn half_lanes(&mut self, w: Words, lanes: Lanes, high: bool) -> Vec<Value> {
        let mut all = self.lanes(w, lanes);
        let half = all.len() / 2;
        if high {
            all.split_off(half)
        } else {
            all.truncate(half);
            all
        }
    }

    /// `i32`s extended to `i64`s.
    fn widen_lanes(&mut self, lanes: &[Value], signed: bool) -> Vec<Value> {
        lanes
            .iter()
            .map(|&x| match signed {
                true => self.builder.ins().sextend(I64, x),
                false => self.builder.ins().uextend(I64, x),
            })
            .collect()
    }
}

/// The sign bits of a word's four bytes, as bits 0 to 3: each moved to
/// the bottom of its byte, then gathered into the top byte by one
/// multiplication (byte `i`'s bit lands at `24 + i`; the other partial
/// products fall below bit 24 or above bit 31).
fn byte_signs(b: &mut cranelift_frontend::FunctionBuilder<'_>, w: Value) -> Value {
    let bits = b.ins().ushr_imm_u(w, 7);
    let bits = b.ins().band_imm_u(bits, 0x0101_0101);
    let gathered = b.ins().imul_imm_u(bits, 0x0102_0408);
    b.ins().ushr_imm_u(gathered, 24)
}

/// The sign bits of a word's two 16-bit lanes, as bits 0 and 1.
fn half_signs(b: &mut cranelift_frontend::FunctionBuilder<'_>, w: Value) -> Value {
    let low = b.ins().ushr_imm_u(w, 15);
    let low = b.ins().band_imm_u(low, 1);
    let high = b.ins().ushr_imm_u(w, 30);
    let high = b.ins().band_imm_u(high, 2);
    b.ins().bor(low, high)
}
