//! The atomic read-modify-writes a kernel calls as imports of
//! [`super::INTRINSIC_MODULE`] (`docs/kernels.md`,
//! "Atomics"): what the Rust SDK uses, since Rust's own atomics compile to
//! plain loads and stores on `wasm32-unknown-unknown` without the `atomics`
//! target feature. The translator lowers them as it lowers the Wasm threads
//! operators, minus their fences (relaxed, as CUDA's `atomicAdd`). This file
//! is the table of names and signatures; it emits nothing.

use cranelift_codegen::ir::AtomicRmwOp;

use super::intrinsic_field;
use super::translate::WasmType;

/// An atomic intrinsic: `(addr: i32, operands...) -> old value`, on the
/// guest's memory at `addr` (bounds- and alignment-checked).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AtomicIntrinsic {
    /// `atomic_add_i32(addr, v) -> i32`
    AddI32,
    /// `atomic_sub_i32(addr, v) -> i32`
    SubI32,
    /// `atomic_and_i32(addr, v) -> i32`
    AndI32,
    /// `atomic_or_i32(addr, v) -> i32`
    OrI32,
    /// `atomic_xor_i32(addr, v) -> i32`
    XorI32,
    /// `atomic_xchg_i32(addr, v) -> i32`
    XchgI32,
    /// `atomic_min_i32(addr, v) -> i32` (signed)
    MinI32,
    /// `atomic_max_i32(addr, v) -> i32` (signed)
    MaxI32,
    /// `atomic_min_u32(addr, v) -> i32` (unsigned)
    MinU32,
    /// `atomic_max_u32(addr, v) -> i32` (unsigned)
    MaxU32,
    /// `atomic_cas_i32(addr, expected, replacement) -> i32`
    CasI32,
    /// `atomic_add_i64(addr, v) -> i64`
    AddI64,
    /// `atomic_cas_i64(addr, expected, replacement) -> i64`
    CasI64,
    /// `atomic_add_f32(addr, v) -> f32`: float add, which Wasm lacks.
    AddF32,
}

/// What an atomic does to the value in memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AtomicOp {
    /// Read it.
    Load,
    /// Write the operand.
    Store,
    /// Combine it with the operand; the result is the old value.
    Rmw(AtomicRmwOp),
    /// Replace it when it equals the first operand; the result is the old
    /// value.
    Cmpxchg,
    /// Add the `f32` operand (round to nearest even); the result is the old
    /// value.
    FloatAdd,
}

impl AtomicIntrinsic {
    /// Every atomic intrinsic.
    pub const ALL: [AtomicIntrinsic; 14] = [
        AtomicIntrinsic::AddI32,
        AtomicIntrinsic::SubI32,
        AtomicIntrinsic::AndI32,
        AtomicIntrinsic::OrI32,
        AtomicIntrinsic::XorI32,
        AtomicIntrinsic::XchgI32,
        AtomicIntrinsic::MinI32,
        AtomicIntrinsic::MaxI32,
        AtomicIntrinsic::MinU32,
        AtomicIntrinsic::MaxU32,
        AtomicIntrinsic::CasI32,
        AtomicIntrinsic::AddI64,
        AtomicIntrinsic::CasI64,
        AtomicIntrinsic::AddF32,
    ];

    /// The import's name.
    pub const fn import_name(self) -> &'static str {
        match self {
            AtomicIntrinsic::AddI32 => "atomic_add_i32",
            AtomicIntrinsic::SubI32 => "atomic_sub_i32",
            AtomicIntrinsic::AndI32 => "atomic_and_i32",
            AtomicIntrinsic::OrI32 => "atomic_or_i32",
            AtomicIntrinsic::XorI32 => "atomic_xor_i32",
            AtomicIntrinsic::XchgI32 => "atomic_xchg_i32",
            AtomicIntrinsic::MinI32 => "atomic_min_i32",
            AtomicIntrinsic::MaxI32 => "atomic_max_i32",
            AtomicIntrinsic::MinU32 => "atomic_min_u32",
            AtomicIntrinsic::MaxU32 => "atomic_max_u32",
            AtomicIntrinsic::CasI32 => "atomic_cas_i32",
            AtomicIntrinsic::AddI64 => "atomic_add_i64",
            AtomicIntrinsic::CasI64 => "atomic_cas_i64",
            AtomicIntrinsic::AddF32 => "atomic_add_f32",
        }
    }

    /// The intrinsic an import names.
    pub fn from_import(module: &str, name: &str) -> Option<AtomicIntrinsic> {
        let mut buf = [0; 64];
        let name = intrinsic_field(module, name, &mut buf)?;
        AtomicIntrinsic::ALL
            .into_iter()
            .find(|a| a.import_name() == name)
    }

    /// What it does.
    pub const fn op(self) -> AtomicOp {
        match self {
            AtomicIntrinsic::AddI32 | AtomicIntrinsic::AddI64 => AtomicOp::Rmw(AtomicRmwOp::Add),
            AtomicIntrinsic::SubI32 => AtomicOp::Rmw(AtomicRmwOp::Sub),
            AtomicIntrinsic::AndI32 => AtomicOp::Rmw(AtomicRmwOp::And),
            AtomicIntrinsic::OrI32 => AtomicOp::Rmw(AtomicRmwOp::Or),
            AtomicIntrinsic::XorI32 => AtomicOp::Rmw(AtomicRmwOp::Xor),
            AtomicIntrinsic::XchgI32 => AtomicOp::Rmw(AtomicRmwOp::Xchg),
            AtomicIntrinsic::MinI32 => AtomicOp::Rmw(AtomicRmwOp::Smin),
            AtomicIntrinsic::MaxI32 => AtomicOp::Rmw(AtomicRmwOp::Smax),
            AtomicIntrinsic::MinU32 => AtomicOp::Rmw(AtomicRmwOp::Umin),
            AtomicIntrinsic::MaxU32 => AtomicOp::Rmw(AtomicRmwOp::Umax),
            AtomicIntrinsic::CasI32 | AtomicIntrinsic::CasI64 => AtomicOp::Cmpxchg,
            AtomicIntrinsic::AddF32 => AtomicOp::FloatAdd,
        }
    }

    /// The value it leaves in memory in place of `old` (the word's bits,
    /// zero-extended), given its value operands (the value, or a
    /// compare-and-swap's expected value and replacement); `add_f32` is
    /// the float add of the memory it acts on ([`add_f32_bits`] for the
    /// guest's memory). What every reference of the intrinsics computes.
    pub fn new_value(self, old: u64, operands: &[u64], add_f32: impl Fn(u32, u32) -> u32) -> u64 {
        use AtomicIntrinsic as A;
        let v = operands.first().copied().unwrap_or(0);
        let (old32, v32) = (old as u32, v as u32);
        let new32 = match self {
            A::AddI32 => old32.wrapping_add(v32),
            A::SubI32 => old32.wrapping_sub(v32),
            A::AndI32 => old32 & v32,
            A::OrI32 => old32 | v32,
            A::XorI32 => old32 ^ v32,
            A::XchgI32 => v32,
            A::MinI32 => (old32 as i32).min(v32 as i32) as u32,
            A::MaxI32 => (old32 as i32).max(v32 as i32) as u32,
            A::MinU32 => old32.min(v32),
            A::MaxU32 => old32.max(v32),
            A::CasI32 if old32 == v32 => operands.get(1).copied().unwrap_or(0) as u32,
            A::CasI32 => old32,
            A::AddF32 => add_f32(old32, v32),
            A::AddI64 => return old.wrapping_add(v),
            A::CasI64 if old == v => return operands.get(1).copied().unwrap_or(0),
            A::CasI64 => return old,
        };
        u64::from(new32)
    }

    /// The type of its value operands and result.
    pub const fn value_type(self) -> WasmType {
        match self {
            AtomicIntrinsic::AddI64 | AtomicIntrinsic::CasI64 => WasmType::I64,
            AtomicIntrinsic::AddF32 => WasmType::F32,
            _ => WasmType::I32,
        }
    }

    /// Its parameters: the address (`i32`), then one value, or two for a
    /// compare-and-swap.
    pub fn params(self) -> impl Iterator<Item = WasmType> {
        let values = match self.op() {
            AtomicOp::Cmpxchg => 2,
            _ => 1,
        };
        core::iter::once(WasmType::I32).chain(core::iter::repeat_n(self.value_type(), values))
    }
}

/// `atomic_add_f32`'s arithmetic on the bits of the old value and the
/// operand (on the guest's memory): IEEE single-precision add, rounded to
/// nearest even, with subnormal inputs and a subnormal result flushed to
/// zero of the same sign, as the GPU's float atomic add on global memory
/// (`atom.global.add.f32`, CUDA's `atomicAdd`) computes it; every target
/// and the host's reference use this. (`shared_atomic_add_f32` keeps
/// subnormals, as `atom.shared.add.f32` does.) A NaN result's bits are the
/// target's own (Wasm leaves them open too).
pub fn add_f32_bits(old: u32, v: u32) -> u32 {
    let sum = f32::from_bits(flush(old)) + f32::from_bits(flush(v));
    flush(sum.to_bits())
}

/// `bits` with a subnormal value replaced by zero of its sign.
fn flush(bits: u32) -> u32 {
    if bits & 0x7f80_0000 == 0 {
        bits & 0x8000_0000
    } else {
        bits
    }
}

#[cfg(test)]
mod tests {
    use super::{AtomicIntrinsic as A, add_f32_bits};

    #[test]
    fn new_values_are_the_operations_on_the_word() {
        let minus_one = u64::from(u32::MAX);
        assert_eq!(
            A::MinI32.new_value(3, &[minus_one], add_f32_bits),
            minus_one
        );
        assert_eq!(A::MinU32.new_value(3, &[minus_one], add_f32_bits), 3);
        assert_eq!(A::AddI32.new_value(minus_one, &[2], add_f32_bits), 1);
        assert_eq!(A::CasI32.new_value(5, &[5, 9], add_f32_bits), 9);
        assert_eq!(A::CasI32.new_value(5, &[6, 9], add_f32_bits), 5);
        assert_eq!(
            A::CasI64.new_value(u64::MAX, &[u64::MAX, 1], add_f32_bits),
            1
        );
        assert_eq!(A::AddI64.new_value(u64::MAX, &[2], add_f32_bits), 1);
        let (one, half) = (u64::from(1f32.to_bits()), u64::from(0.5f32.to_bits()));
        assert_eq!(
            A::AddF32.new_value(one, &[half], add_f32_bits),
            u64::from(1.5f32.to_bits())
        );
    }

    #[test]
    fn float_add_flushes_subnormals() {
        let tiny = 1e-40f32.to_bits();
        assert_eq!(add_f32_bits(0, tiny), 0);
        assert_eq!(add_f32_bits((-1e-40f32).to_bits(), 0), 0);
        assert_eq!(
            add_f32_bits(0x8000_0000, (-1e-40f32).to_bits()),
            0x8000_0000
        );
        // A normal sum whose exact value is subnormal is flushed too.
        let a = f32::MIN_POSITIVE.to_bits();
        let b = (-f32::MIN_POSITIVE * 1.5).to_bits();
        assert_eq!(add_f32_bits(a, b), 0x8000_0000);
        assert_eq!(
            add_f32_bits(1.5f32.to_bits(), 2.25f32.to_bits()),
            3.75f32.to_bits()
        );
    }
}
