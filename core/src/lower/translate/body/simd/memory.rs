//! The SIMD proposal's loads and stores, as scalar accesses of the same
//! bytes: a `v128` is read and written as two 8-byte halves, the narrower
//! forms as one access. Each access goes through the translator's own
//! load and store paths (bounds test, stack window, promoted window), so
//! everything `docs/kernels.md` says of a load or store holds. A 16-byte
//! access tests its upper half first: when that half is in bounds so is
//! the lower, and when it is not the access traps before either half is
//! read or written (Wasm writes nothing of a store that traps).

use alloc::vec::Vec;

use cranelift_codegen::ir::types::{I32, I64};
use cranelift_codegen::ir::{InstBuilder, Type, Value};
use wasmparser::{MemArg, Operator};

use super::lanes::{Lanes, Shape, k32, narrow_lane, split};
use super::{Words, pop_v128};
use crate::lower::LowerError;
use crate::lower::translate::body::{FuncState, Load, Store, Translator, emit_load, emit_store};

/// What a SIMD load or store reads or writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::lower::translate) enum SimdAccess {
    /// `v128.load`: 16 bytes.
    Load,
    /// `v128.store`: 16 bytes.
    Store,
    /// `v128.loadNxM_s/u`: 8 bytes of lanes of `from`, each extended to
    /// twice its width.
    LoadExtend { from: Shape, signed: bool },
    /// `v128.loadN_splat`: one lane of `Shape`, in every lane.
    LoadSplat(Shape),
    /// `v128.load32_zero`, `v128.load64_zero`: lane 0, the rest zero.
    LoadZero(Shape),
    /// `v128.loadN_lane`: one lane replaced.
    LoadLane(Shape, u8),
    /// `v128.storeN_lane`: one lane written.
    StoreLane(Shape, u8),
}

impl SimdAccess {
    /// The scalar accesses it makes (each a bounds test).
    pub(in crate::lower::translate) fn accesses(self) -> u32 {
        match self {
            SimdAccess::Load | SimdAccess::Store => 2,
            _ => 1,
        }
    }
}

/// The rule for each SIMD load and store, one row per operator.
pub(in crate::lower::translate) fn simd_access<'o>(
    op: &'o Operator<'_>,
) -> Option<(&'o MemArg, SimdAccess)> {
    use Operator as O;
    use Shape as S;
    use SimdAccess as A;
    let extend = |from, signed| A::LoadExtend { from, signed };
    Some(match op {
        O::V128Load { memarg } => (memarg, A::Load),
        O::V128Store { memarg } => (memarg, A::Store),
        O::V128Load8x8S { memarg } => (memarg, extend(S::I8, true)),
        O::V128Load8x8U { memarg } => (memarg, extend(S::I8, false)),
        O::V128Load16x4S { memarg } => (memarg, extend(S::I16, true)),
        O::V128Load16x4U { memarg } => (memarg, extend(S::I16, false)),
        O::V128Load32x2S { memarg } => (memarg, extend(S::I32, true)),
        O::V128Load32x2U { memarg } => (memarg, extend(S::I32, false)),
        O::V128Load8Splat { memarg } => (memarg, A::LoadSplat(S::I8)),
        O::V128Load16Splat { memarg } => (memarg, A::LoadSplat(S::I16)),
        O::V128Load32Splat { memarg } => (memarg, A::LoadSplat(S::I32)),
        O::V128Load64Splat { memarg } => (memarg, A::LoadSplat(S::I64)),
        O::V128Load32Zero { memarg } => (memarg, A::LoadZero(S::I32)),
        O::V128Load64Zero { memarg } => (memarg, A::LoadZero(S::I64)),
        O::V128Load8Lane { memarg, lane } => (memarg, A::LoadLane(S::I8, *lane)),
        O::V128Load16Lane { memarg, lane } => (memarg, A::LoadLane(S::I16, *lane)),
        O::V128Load32Lane { memarg, lane } => (memarg, A::LoadLane(S::I32, *lane)),
        O::V128Load64Lane { memarg, lane } => (memarg, A::LoadLane(S::I64, *lane)),
        O::V128Store8Lane { memarg, lane } => (memarg, A::StoreLane(S::I8, *lane)),
        O::V128Store16Lane { memarg, lane } => (memarg, A::StoreLane(S::I16, *lane)),
        O::V128Store32Lane { memarg, lane } => (memarg, A::StoreLane(S::I32, *lane)),
        O::V128Store64Lane { memarg, lane } => (memarg, A::StoreLane(S::I64, *lane)),
        _ => return None,
    })
}

/// How one lane of `shape` is loaded: the bytes, the load, the type.
fn lane_load(shape: Shape) -> (u32, Load, Type) {
    match shape {
        Shape::I8 => (1, Load::U8, I32),
        Shape::I16 => (2, Load::U16, I32),
        Shape::I32 | Shape::F32 => (4, Load::Full, I32),
        Shape::I64 | Shape::F64 => (8, Load::Full, I64),
    }
}

impl Translator<'_, '_, '_> {
    /// A SIMD load or store (the detector checked the memory).
    pub(super) fn simd_memory(
        &mut self,
        st: &mut FuncState,
        memarg: &MemArg,
        access: SimdAccess,
    ) -> Result<(), LowerError> {
        let offset = memarg.offset;
        match access {
            SimdAccess::Load => {
                let index = st.pop()?;
                let halves = [(8, 8, Load::Full, I64), (0, 8, Load::Full, I64)];
                let [hi, lo] = self.load_parts(index, offset, &halves)?;
                let words = self.pack_words(&[lo, hi], Shape::I64);
                st.stack.extend(words);
            }
            SimdAccess::Store => {
                let words = pop_v128(st)?;
                let index = st.pop()?;
                let (lo, hi) = self.halves(words);
                let halves = [(8, 8, Store::Full, hi), (0, 8, Store::Full, lo)];
                self.store_parts(index, offset, &halves)?;
            }
            SimdAccess::LoadExtend { from, signed } => {
                let index = st.pop()?;
                let [x] = self.load_parts(index, offset, &[(0, 8, Load::Full, I64)])?;
                let half = split(&mut self.builder, x);
                let words = match from {
                    Shape::I8 | Shape::I16 => {
                        let bits = from.bits();
                        let per = (32 / bits) as usize;
                        let lanes: Vec<Value> = (0..64 / bits as usize)
                            .map(|k| narrow_lane(&mut self.builder, half[k / per], k, bits, signed))
                            .collect();
                        let wide = if from == Shape::I8 {
                            Shape::I16
                        } else {
                            Shape::I32
                        };
                        self.pack_words(&lanes, wide)
                    }
                    _ => {
                        let lanes = half.map(|w| match signed {
                            true => self.builder.ins().sextend(I64, w),
                            false => self.builder.ins().uextend(I64, w),
                        });
                        self.pack_words(&lanes, Shape::I64)
                    }
                };
                st.stack.extend(words);
            }
            SimdAccess::LoadSplat(shape) => {
                let index = st.pop()?;
                let (bytes, kind, ty) = lane_load(shape);
                let [x] = self.load_parts(index, offset, &[(0, bytes, kind, ty)])?;
                let words = self.splat(x, shape);
                st.stack.extend(words);
            }
            SimdAccess::LoadZero(shape) => {
                let index = st.pop()?;
                let (bytes, kind, ty) = lane_load(shape);
                let [x] = self.load_parts(index, offset, &[(0, bytes, kind, ty)])?;
                let zero = k32(&mut self.builder, 0);
                let words = match shape {
                    Shape::I64 => {
                        let [lo, hi] = split(&mut self.builder, x);
                        [lo, hi, zero, zero]
                    }
                    _ => [x, zero, zero, zero],
                };
                st.stack.extend(words);
            }
            SimdAccess::LoadLane(shape, lane) => {
                let words = pop_v128(st)?;
                let index = st.pop()?;
                let (bytes, kind, ty) = lane_load(shape);
                let [x] = self.load_parts(index, offset, &[(0, bytes, kind, ty)])?;
                let words = self.replace_lane(words, shape, usize::from(lane), x);
                st.stack.extend(words);
            }
            SimdAccess::StoreLane(shape, lane) => {
                let words = pop_v128(st)?;
                let index = st.pop()?;
                let lane = usize::from(lane);
                let (bytes, kind, value) = match shape {
                    Shape::I8 | Shape::I16 => {
                        let bits = shape.bits();
                        let per = (32 / bits) as usize;
                        let word = words[lane / per];
                        let at = (lane % per) as u32 * bits;
                        let field = match at {
                            0 => word,
                            n => self.builder.ins().ushr_imm_u(word, i64::from(n)),
                        };
                        let kind = match shape {
                            Shape::I8 => Store::Low8,
                            _ => Store::Low16,
                        };
                        (bits / 8, kind, field)
                    }
                    Shape::I32 | Shape::F32 => (4, Store::Full, words[lane]),
                    Shape::I64 | Shape::F64 => {
                        let (lo, hi) = self.halves(words);
                        (8, Store::Full, if lane == 0 { lo } else { hi })
                    }
                };
                self.store_parts(index, offset, &[(0, bytes, kind, value)])?;
            }
        }
        Ok(())
    }

    /// A `v128`'s two 8-byte halves (`f64`s or `i64`s, as the value was
    /// made; stores of either are bit-exact).
    fn halves(&mut self, words: Words) -> (Value, Value) {
        let lanes = match self.cached(words, Shape::F64) {
            Some(lanes) => lanes,
            None => self.lanes(words, Lanes::I64),
        };
        (lanes[0], lanes[1])
    }

    /// Loads the `parts` of one Wasm access at `index + offset`, each
    /// `(offset in the access, bytes, load, type)`: all bounds tests
    /// first, in `parts`' order, then the loads.
    fn load_parts<const N: usize>(
        &mut self,
        index: Value,
        offset: u64,
        parts: &[(u64, u32, Load, Type); N],
    ) -> Result<[Value; N], LowerError> {
        let mut values = [Value::from_u32(0); N];
        if self.window_promoted() {
            for (value, &(at, bytes, kind, ty)) in values.iter_mut().zip(parts) {
                *value = self.promoted_load(index, offset + at, bytes, kind, ty)?;
            }
        } else {
            let addrs = parts.map(|(at, bytes, ..)| self.address(index, offset + at, bytes));
            for ((value, &(_, _, kind, ty)), addr) in values.iter_mut().zip(parts).zip(addrs) {
                *value = emit_load(&mut self.builder, kind, ty, addr);
            }
        }
        Ok(values)
    }

    /// Stores the `parts` of one Wasm access at `index + offset`, each
    /// `(offset in the access, bytes, store, value)`: all bounds tests
    /// first, in `parts`' order (the first must cover the others: then a
    /// trap leaves memory unwritten), then the stores.
    fn store_parts(
        &mut self,
        index: Value,
        offset: u64,
        parts: &[(u64, u32, Store, Value)],
    ) -> Result<(), LowerError> {
        if self.window_promoted() {
            for &(at, bytes, kind, value) in parts {
                self.promoted_store(index, offset + at, bytes, kind, value)?;
            }
        } else {
            let addrs: Vec<Value> = parts
                .iter()
                .map(|&(at, bytes, ..)| self.address(index, offset + at, bytes))
                .collect();
            for (&(_, _, kind, value), addr) in parts.iter().zip(addrs) {
                emit_store(&mut self.builder, kind, value, addr);
            }
        }
        Ok(())
    }
}
