//! The arithmetic intrinsics a kernel calls as imports of
//! [`super::INTRINSIC_MODULE`] (`docs/kernels.md`,
//! "Fused multiply-add"): operations Wasm's scalar instructions lack and a
//! GPU does in one instruction. Each has one exact result, the same on
//! every target. This file is the table of names and signatures; the
//! translator emits the CLIF op, the op table says what it becomes.

use super::intrinsic_field;
use super::translate::WasmType;

/// An arithmetic intrinsic.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MathIntrinsic {
    /// `fma_f32(a, b, c) -> f32`: `a * b + c` rounded once (IEEE 754
    /// fusedMultiplyAdd, round to nearest even); a NaN result is a
    /// canonical NaN.
    FmaF32,
    /// `fma_f64(a, b, c) -> f64`: as `fma_f32`, in `f64`.
    FmaF64,
}

impl MathIntrinsic {
    /// Every arithmetic intrinsic.
    pub const ALL: [MathIntrinsic; 2] = [MathIntrinsic::FmaF32, MathIntrinsic::FmaF64];

    /// The import's name.
    pub const fn import_name(self) -> &'static str {
        match self {
            MathIntrinsic::FmaF32 => "fma_f32",
            MathIntrinsic::FmaF64 => "fma_f64",
        }
    }

    /// The intrinsic an import names.
    pub fn from_import(module: &str, name: &str) -> Option<MathIntrinsic> {
        let mut buf = [0; 64];
        let name = intrinsic_field(module, name, &mut buf)?;
        MathIntrinsic::ALL
            .into_iter()
            .find(|m| m.import_name() == name)
    }

    /// The type of its operands and result.
    pub const fn value_type(self) -> WasmType {
        match self {
            MathIntrinsic::FmaF32 => WasmType::F32,
            MathIntrinsic::FmaF64 => WasmType::F64,
        }
    }

    /// How many operands it takes (all of [`Self::value_type`]).
    pub const fn arity(self) -> usize {
        3
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lower::INTRINSIC_MODULE;
    use crate::lower::atomic::AtomicIntrinsic;
    use crate::lower::cooperative::CoopIntrinsic;

    #[test]
    fn names_round_trip_and_belong_to_no_other_intrinsic() {
        for m in MathIntrinsic::ALL {
            let name = m.import_name();
            assert_eq!(MathIntrinsic::from_import(INTRINSIC_MODULE, name), Some(m));
            assert_eq!(MathIntrinsic::from_import("env", name), None);
            assert!(AtomicIntrinsic::from_import(INTRINSIC_MODULE, name).is_none());
            assert!(CoopIntrinsic::from_import(INTRINSIC_MODULE, name).is_none());
            assert!(crate::lower::Intrinsic::from_import(INTRINSIC_MODULE, name).is_none());
        }
    }
}
