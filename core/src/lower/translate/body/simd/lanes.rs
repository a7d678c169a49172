//! A `v128`'s lanes: how its four 32-bit words (the form every `v128`
//! takes on the operand stack, in locals and across blocks) are read as
//! lanes of one shape and written back. Narrow lanes (`i8x16`, `i16x8`)
//! are read into `i32`s, sign- or zero-extended as a rule asks, and only
//! their low bits are written back; `i64x2` and `f64x2` lanes join two
//! words. It emits only scalar CLIF that the op table lowers.

use alloc::collections::BTreeMap;
use alloc::vec::Vec;

use cranelift_codegen::ir::types::{F32, F64, I32, I64};
use cranelift_codegen::ir::{InstBuilder, MemFlagsData, Value};
use cranelift_frontend::FunctionBuilder;

use super::{LANES, Words};
use crate::lower::translate::body::Translator;

/// A lane shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(in crate::lower::translate) enum Shape {
    I8,
    I16,
    I32,
    I64,
    F32,
    F64,
}

impl Shape {
    /// Lanes in a `v128`.
    pub(super) const fn count(self) -> usize {
        match self {
            Shape::I8 => 16,
            Shape::I16 => 8,
            Shape::I32 | Shape::F32 => 4,
            Shape::I64 | Shape::F64 => 2,
        }
    }

    /// A lane's width in bits.
    pub(super) const fn bits(self) -> u32 {
        (128 / self.count()) as u32
    }
}

/// How a rule reads lanes: the shape, and for narrow lanes how they are
/// widened to `i32`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::lower::translate::body) enum Lanes {
    I8S,
    I8U,
    I16S,
    I16U,
    I32,
    I64,
    F32,
    F64,
}

impl Lanes {
    pub(super) const fn shape(self) -> Shape {
        match self {
            Lanes::I8S | Lanes::I8U => Shape::I8,
            Lanes::I16S | Lanes::I16U => Shape::I16,
            Lanes::I32 => Shape::I32,
            Lanes::I64 => Shape::I64,
            Lanes::F32 => Shape::F32,
            Lanes::F64 => Shape::F64,
        }
    }
}

/// For each `v128` packed from typed lanes (`i64`, `f32`, `f64`), those
/// lanes, so that the next operator on the same shape reads them instead
/// of rebuilding them from the words. Sound in SSA: the words are made
/// right after the lanes, so wherever the words are available the lanes
/// are too.
#[derive(Default)]
pub(in crate::lower::translate::body) struct Views {
    typed: BTreeMap<(Words, Shape), Vec<Value>>,
}

impl Views {
    /// The lanes of `shape` that `words` were packed from, if they were.
    pub(super) fn get(&self, words: Words, shape: Shape) -> Option<Vec<Value>> {
        self.typed.get(&(words, shape)).cloned()
    }
}

/// `i32` constant `v`.
pub(super) fn k32(b: &mut FunctionBuilder<'_>, v: u32) -> Value {
    b.ins().iconst(I32, i64::from(v))
}

/// `lo | hi << 32` as an `i64`.
pub(super) fn join(b: &mut FunctionBuilder<'_>, lo: Value, hi: Value) -> Value {
    let lo = b.ins().uextend(I64, lo);
    let hi = b.ins().uextend(I64, hi);
    let hi = b.ins().ishl_imm_u(hi, 32);
    b.ins().bor(lo, hi)
}

/// An `i64`'s low and high words.
pub(super) fn split(b: &mut FunctionBuilder<'_>, x: Value) -> [Value; 2] {
    let lo = b.ins().ireduce(I32, x);
    let hi = b.ins().ushr_imm_u(x, 32);
    let hi = b.ins().ireduce(I32, hi);
    [lo, hi]
}

/// Lane `k` of width `bits` (8 or 16) of word `w`, widened to `i32`.
pub(super) fn narrow_lane(
    b: &mut FunctionBuilder<'_>,
    w: Value,
    k: usize,
    bits: u32,
    signed: bool,
) -> Value {
    let at = (k as u32 % (32 / bits)) * bits;
    if signed {
        let top = 32 - bits;
        let up = match top - at {
            0 => w,
            n => b.ins().ishl_imm_u(w, i64::from(n)),
        };
        b.ins().sshr_imm_u(up, i64::from(top))
    } else if at + bits == 32 {
        b.ins().ushr_imm_u(w, i64::from(at))
    } else {
        let down = match at {
            0 => w,
            n => b.ins().ushr_imm_u(w, i64::from(n)),
        };
        b.ins().band_imm_u(down, (1i64 << bits) - 1)
    }
}

/// Reads `words` as `lanes`, without the cache.
fn unpack(b: &mut FunctionBuilder<'_>, words: Words, lanes: Lanes) -> Vec<Value> {
    let narrow = |b: &mut FunctionBuilder<'_>, bits: u32, signed: bool| {
        let per = 32 / bits as usize;
        (0..128 / bits as usize)
            .map(|k| narrow_lane(b, words[k / per], k, bits, signed))
            .collect()
    };
    match lanes {
        Lanes::I8S => narrow(b, 8, true),
        Lanes::I8U => narrow(b, 8, false),
        Lanes::I16S => narrow(b, 16, true),
        Lanes::I16U => narrow(b, 16, false),
        Lanes::I32 => words.to_vec(),
        Lanes::F32 => words
            .iter()
            .map(|&w| b.ins().bitcast(F32, MemFlagsData::new(), w))
            .collect(),
        Lanes::I64 | Lanes::F64 => (0..2)
            .map(|k| {
                let x = join(b, words[2 * k], words[2 * k + 1]);
                match lanes {
                    Lanes::F64 => b.ins().bitcast(F64, MemFlagsData::new(), x),
                    _ => x,
                }
            })
            .collect(),
    }
}

/// Writes `lanes` of `shape` (narrow lanes: the low bits of `i32`s) as
/// words.
fn pack(b: &mut FunctionBuilder<'_>, lanes: &[Value], shape: Shape) -> Words {
    debug_assert_eq!(lanes.len(), shape.count());
    let mut words = Vec::with_capacity(LANES);
    match shape {
        Shape::I8 | Shape::I16 => {
            let bits = shape.bits();
            let per = (32 / bits) as usize;
            for chunk in lanes.chunks(per) {
                let mut word = None;
                for (j, &lane) in chunk.iter().enumerate() {
                    let at = j as u32 * bits;
                    let field = if at + bits == 32 {
                        lane
                    } else {
                        b.ins().band_imm_u(lane, (1i64 << bits) - 1)
                    };
                    let field = match at {
                        0 => field,
                        n => b.ins().ishl_imm_u(field, i64::from(n)),
                    };
                    word = Some(match word {
                        None => field,
                        Some(w) => b.ins().bor(w, field),
                    });
                }
                words.extend(word);
            }
        }
        Shape::I32 => words.extend_from_slice(lanes),
        Shape::F32 => {
            for &lane in lanes {
                words.push(b.ins().bitcast(I32, MemFlagsData::new(), lane));
            }
        }
        Shape::I64 | Shape::F64 => {
            for &lane in lanes {
                let x = match shape {
                    Shape::F64 => b.ins().bitcast(I64, MemFlagsData::new(), lane),
                    _ => lane,
                };
                words.extend(split(b, x));
            }
        }
    }
    words_of(&words)
}

/// The first four values as words.
pub(super) fn words_of(values: &[Value]) -> Words {
    core::array::from_fn(|k| values[k])
}

impl Translator<'_, '_, '_> {
    /// `words` read as `lanes`; typed lanes a `v128` was packed from are
    /// read back as they were.
    pub(super) fn lanes(&mut self, words: Words, lanes: Lanes) -> Vec<Value> {
        if let Some(typed) = self.views.typed.get(&(words, lanes.shape())) {
            return typed.clone();
        }
        unpack(&mut self.builder, words, lanes)
    }

    /// `lanes` of `shape` written as a `v128`'s words.
    pub(super) fn pack_words(&mut self, lanes: &[Value], shape: Shape) -> Words {
        let words = pack(&mut self.builder, lanes, shape);
        if matches!(shape, Shape::I64 | Shape::F32 | Shape::F64) {
            self.views.typed.insert((words, shape), lanes.to_vec());
        }
        words
    }
}
