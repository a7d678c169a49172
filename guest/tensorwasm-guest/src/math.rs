//! Math functions for kernels written in Rust, computed by ordinary Wasm
//! arithmetic, so the GPU and CPU drivers give the same bits. None has a
//! stack frame or reads memory (no tables), so a kernel that calls them
//! keeps no shadow-stack window and its other accesses stay untested
//! (`docs/kernels.md`, "The shadow stack").

// `expf` is a port of `libm` 0.2.16's `src/math/expf.rs` (MIT OR Apache-2.0,
// https://github.com/rust-lang/libm), itself from FreeBSD's
// `lib/msun/src/e_expf.c` by way of musl, whose notice is kept:
//
// Conversion to float by Ian Lance Taylor, Cygnus Support, ian@cygnus.com.
// ====================================================
// Copyright (C) 1993 by Sun Microsystems, Inc. All rights reserved.
//
// Developed at SunPro, a Sun Microsystems, Inc. business.
// Permission to use, copy, modify, and distribute this
// software is freely granted, provided that this notice
// is preserved.
// ====================================================
//
// Changed from libm: the two `force_eval!`s are gone (they only raise FP
// exception flags, which Wasm does not have), the `HALF[sign]` table is a
// select, and `scalbnf` is inlined, reduced to the range of `k` here.

// The constants by their bits, as libm's comments give them: a decimal
// literal one digit short can name the next `f32`.
const LN2_HI: f32 = f32::from_bits(0x3f31_7200); // 6.9314575195e-01
const LN2_LO: f32 = f32::from_bits(0x35bf_be8e); // 1.4286067653e-06
const INV_LN2: f32 = f32::from_bits(0x3fb8_aa3b); // 1.4426950216e+00
// Domain [-0.34568, 0.34568], range ~[-4.278e-9, 4.447e-9]:
// |x*(exp(x)+1)/(exp(x)-1) - p(x)| < 2**-27.74
const P1: f32 = f32::from_bits(0x3e2a_aa8f); // 1.6666625440e-1 = 0xaaaa8f.0p-26
const P2: f32 = f32::from_bits(0xbb35_5215); // -2.7667332906e-3 = -0xb55215.0p-32

/// `e` raised to the power `x`, bit for bit what `libm::expf` (0.2.16)
/// returns, for every `x`.
#[inline]
pub fn expf(mut x: f32) -> f32 {
    let x1p127 = f32::from_bits(0x7f00_0000); // 2^127
    let hx = x.to_bits() & 0x7fff_ffff; // |x|
    let sign = x.is_sign_negative();

    // Special cases.
    if hx >= 0x42ae_ac50 {
        // |x| >= 87.33655 or NaN.
        if hx > 0x7f80_0000 {
            return x; // NaN
        }
        if hx >= 0x42b1_7218 && !sign {
            // x >= 88.722839: overflow.
            return x * x1p127;
        }
        if sign && hx >= 0x42cf_f1b5 {
            // x <= -103.972084: underflow.
            return 0.0;
        }
    }

    // Argument reduction: x = k ln2 + hi - lo.
    let k: i32;
    let hi: f32;
    let lo: f32;
    if hx > 0x3eb1_7218 {
        // |x| > 0.5 ln2.
        k = if hx > 0x3f85_1592 {
            // |x| > 1.5 ln2; libm's `HALF[sign]`.
            (INV_LN2 * x + if sign { -0.5 } else { 0.5 }) as i32
        } else if sign {
            -1
        } else {
            1
        };
        let kf = k as f32;
        hi = x - kf * LN2_HI; // k*ln2hi is exact here
        lo = kf * LN2_LO;
        x = hi - lo;
    } else if hx > 0x3900_0000 {
        // |x| > 2^-14.
        k = 0;
        hi = x;
        lo = 0.0;
    } else {
        return 1.0 + x;
    }

    // x is now in the primary range.
    let xx = x * x;
    let c = x - xx * (P1 + xx * P2);
    let y = 1.0 + (x * c / (2.0 - c) - lo + hi);
    if k == 0 { y } else { scale(y, k) }
}

/// `y * 2^k` for the `k` of [`expf`], `-150 <= k <= 128` (libm's `scalbnf`
/// with one prescaling step, all that range needs).
#[inline]
fn scale(mut y: f32, mut k: i32) -> f32 {
    if k > 127 {
        y *= f32::from_bits(0x7f00_0000); // 2^127
        k -= 127;
    } else if k < -126 {
        // 2^-126 * 2^24: the product stays normal, so there is one rounding.
        y *= f32::from_bits(0x0c80_0000); // 2^-102
        k += 102;
    }
    y * f32::from_bits(((0x7f + k) as u32) << 23)
}

// `expf_fast` follows Cephes' `expf` (Stephen L. Moshier's Cephes Math
// Library, as in Julien Pommier's sse_mathfun): the split of ln 2 and the
// degree-5 polynomial for (e^r - 1 - r) / r^2 on |r| <= ln2 / 2.
const FAST_LN2_HI: f32 = 0.693_359_4; // 0x3f31_8000: 9 bits, so k * hi is exact
const FAST_LN2_LO: f32 = -2.121_944_4e-4; // ln 2 - hi
const FAST_P: [f32; 6] = [
    1.987_569_1e-4,
    1.398_199_9e-3,
    8.333_452e-3,
    4.166_579_6e-2,
    1.666_666_5e-1,
    0.5, // Cephes' 5.0000001201e-1, which rounds to 0.5
];

/// `e` raised to the power `x`, with no branch, table or division, for
/// kernels whose speed `exp` decides (a softmax): about 27 Wasm
/// instructions (8 of them fused multiply-adds), where [`expf`] runs some 250 PTX instructions with a
/// dozen branches and a division. Use [`expf`] where the bits must be
/// libm's.
///
/// Within 1 ulp of `e^x` rounded to nearest, for every `x`: the bits of
/// the result are at most 1 from those of `(x as f64).exp() as f32`
/// (every one of the 2^32 inputs checked, in the ignored test
/// `expf_fast_within_1ulp_everywhere`). Of the inputs whose result is
/// normal and not 1, about 96.7% get the correctly rounded result (libm's
/// `expf`, 96.3%), and about 1.6% get a result 1 ulp from [`expf`]'s,
/// never more. The edges:
/// - `x` NaN: a NaN, by Wasm's rule for arithmetic (canonical unless `x`
///   is a NaN that is not; compiled for x86-64, `x` quieted).
/// - `x` = +-0: exactly 1.0.
/// - `x` >= 88.72284 (`0x42b1_7218`) and +inf: +inf; every `x` below
///   gives a finite result. `expf` overflows at the same `x`.
/// - `x` < -87.33655 (`e^x` subnormal): the last step rounds a value
///   already rounded once to a subnormal, so the result is within 1 ulp of
///   that subnormal, not always the correctly rounded one. `x` <=
///   -103.97208 (`0xc2cf_f1b5`) and -inf give +0, as `expf` does.
///
/// How: `k = round(x log2 e)` by adding and subtracting 1.5 * 2^23 (the
/// sum's low bits are `k`), `r = x - k ln2` with ln 2 in two parts, `e^r`
/// by Cephes' polynomial (the reduction and the polynomial in fused
/// multiply-adds, [`fma`]: one GPU instruction each where Wasm's `a * b +
/// c` is two), then `e^r * 2^k` as two multiplications by
/// powers of two (`k` is -150 to 128), exact unless the result is
/// subnormal or overflows. `x` is first clamped to [-104, 88.8], which
/// keeps `k` in that range and lets a NaN through.
#[inline]
pub fn expf_fast(x: f32) -> f32 {
    const SHIFT: f32 = 12_582_912.0; // 1.5 * 2^23
    // Comparisons and selects: `clamp` returns a NaN `x` as it is.
    let x = x.clamp(-104.0, 88.8);
    let t = fmadd(x, core::f32::consts::LOG2_E, SHIFT);
    let k = t - SHIFT;
    // `t`'s mantissa is 2^22 + k: its exponent is that of 1.5 * 2^23.
    let ki = (t.to_bits() as i32).wrapping_sub(SHIFT.to_bits() as i32);
    let r = fmadd(k, -FAST_LN2_LO, fmadd(k, -FAST_LN2_HI, x));
    let [p0, p1, p2, p3, p4, p5] = FAST_P;
    let p = fmadd(fmadd(fmadd(fmadd(p0, r, p1), r, p2), r, p3), r, p4);
    let p = fmadd(fmadd(p, r, p5), r * r, r) + 1.0;
    // 2^k as 2^k1 * 2^k2, both normal for k in [-150, 128].
    let k1 = ki >> 1;
    let k2 = ki.wrapping_sub(k1);
    p * f32::from_bits((k1.wrapping_add(127) as u32) << 23)
        * f32::from_bits((k2.wrapping_add(127) as u32) << 23)
}

/// [`fma`] for this module's functions: in unit tests on the build
/// machine, where no host defines the import, libm's.
#[inline]
fn fmadd(a: f32, b: f32, c: f32) -> f32 {
    #[cfg(all(test, not(target_family = "wasm")))]
    return libm::fmaf(a, b, c);
    #[cfg(not(all(test, not(target_family = "wasm"))))]
    fma(a, b, c)
}

/// `a * b + c` rounded once (IEEE 754 fusedMultiplyAdd, CUDA's `fmaf`):
/// one instruction on a GPU, where `a * b + c` in Wasm is two roundings
/// and two instructions. The `tensorwasm_kernel.fma_f32` intrinsic; in
/// the guest's own code the host computes the same value. A NaN result is
/// a NaN by Wasm's rule for arithmetic (canonical unless an operand is a
/// NaN that is not).
#[inline]
pub fn fma(a: f32, b: f32, c: f32) -> f32 {
    // SAFETY: the import reads and writes no memory; every host that runs
    // kernels defines it, inside kernels and out.
    unsafe { crate::sys::fma_f32(a, b, c) }
}

/// [`fma`] in `f64` (`tensorwasm_kernel.fma_f64`).
#[inline]
pub fn fma_f64(a: f64, b: f64, c: f64) -> f64 {
    // SAFETY: as `fma`'s.
    unsafe { crate::sys::fma_f64(a, b, c) }
}

#[cfg(test)]
mod tests {
    use super::{expf, expf_fast};

    /// `expf` agrees with `libm::expf` on `x`, bits and all.
    fn check(x: f32) {
        let (got, want) = (expf(x), libm::expf(x));
        assert_eq!(
            got.to_bits(),
            want.to_bits(),
            "expf({x:e} = {:#010x}): {got:e} ({:#010x}), libm {want:e} ({:#010x})",
            x.to_bits(),
            got.to_bits(),
            want.to_bits()
        );
    }

    #[test]
    fn expf_matches_libm_on_edges() {
        let edges = [
            0.0,
            -0.0,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::from_bits(0x7fc0_0000),
            f32::from_bits(0x7f80_0001),
            f32::from_bits(0x7fa5_a5a5),
            f32::from_bits(0xffc0_0001),
            f32::from_bits(0xff80_0001),
            f32::MIN_POSITIVE,
            -f32::MIN_POSITIVE,
            f32::from_bits(1),
            f32::from_bits(0x8000_0001),
            f32::MAX,
            f32::MIN,
            1.0,
            -1.0,
            88.722_83,
            88.722_84,
            88.722_85,
            -87.336_55,
            -87.336_56,
            -103.972_08,
            -103.972_084,
            -103.972_09,
            // 2^-14 and 2^-12, where the reduction starts.
            f32::from_bits(0x3900_0000),
            f32::from_bits(0x3900_0001),
            1.0 / 4096.0,
            -1.0 / 4096.0,
        ];
        for x in edges {
            check(x);
        }
        // Each threshold of |x|, its neighbours, both signs.
        for t in [
            0x42ae_ac50u32,
            0x42b1_7218,
            0x42cf_f1b5,
            0x3eb1_7218,
            0x3f85_1592,
            0x3900_0000,
        ] {
            for bits in t - 2..=t + 2 {
                check(f32::from_bits(bits));
                check(-f32::from_bits(bits));
            }
        }
    }

    /// Every 257th bit pattern, 16.7 million inputs (a prime stride, so
    /// every exponent and both signs are hit, with NaNs, infinities,
    /// subnormals and both ends). Dense enough to catch a polynomial
    /// coefficient off by a few ulps, which changes one result in thousands.
    #[test]
    fn expf_matches_libm_on_a_sweep() {
        for bits in (0..=u32::MAX).step_by(257) {
            check(f32::from_bits(bits));
        }
    }

    /// Every bit pattern: run it in release, `cargo test --release --
    /// --ignored`.
    #[test]
    #[ignore = "2^32 inputs: run in release"]
    fn expf_matches_libm_everywhere() {
        for bits in 0..=u32::MAX {
            check(f32::from_bits(bits));
        }
    }

    /// Bits from `expf_fast(x)` to `e^x` rounded to nearest, computed in
    /// `f64` (whose `exp` is good to well under an `f32` ulp, so the
    /// rounding is correct but where `e^x` is within 2^-29 ulp of a tie).
    /// Both are `+0 ..= +inf`, whose bits are in order.
    fn fast_ulps(x: f32) -> u32 {
        let (got, want) = (expf_fast(x), (x as f64).exp() as f32);
        assert!(
            !got.is_nan() && got.is_sign_positive(),
            "expf_fast({x:e} = {:#010x}) = {got:e} ({:#010x})",
            x.to_bits(),
            got.to_bits()
        );
        got.to_bits().abs_diff(want.to_bits())
    }

    /// What [`fast_sweep`] found.
    #[derive(Debug)]
    struct Sweep {
        /// The largest [`fast_ulps`], and an `x` that has it.
        worst: (u32, f32),
        /// Inputs whose `e^x` rounds to a normal number other than 1.
        normal: usize,
        /// Of those, how many `expf_fast` rounds wrongly (1 ulp off).
        misrounded: usize,
        /// Of those, how many [`expf`] gives other bits for.
        unlike_expf: usize,
    }

    /// `expf_fast` over the bit patterns `xs`, NaNs skipped.
    fn fast_sweep(xs: impl Iterator<Item = u32>) -> Sweep {
        let mut s = Sweep {
            worst: (0, 0.0),
            normal: 0,
            misrounded: 0,
            unlike_expf: 0,
        };
        for x in xs.map(f32::from_bits).filter(|x| !x.is_nan()) {
            let ulps = fast_ulps(x);
            if ulps > s.worst.0 {
                s.worst = (ulps, x);
            }
            let want = (x as f64).exp() as f32;
            if want.is_normal() && want != 1.0 {
                s.normal += 1;
                s.misrounded += usize::from(ulps != 0);
                s.unlike_expf += usize::from(expf_fast(x).to_bits() != expf(x).to_bits());
            }
        }
        s
    }

    /// `expf_fast` is within 1 ulp of `e^x` on every 257th bit pattern
    /// (each exponent, both signs, both ends), and rounds at most 3.6% of
    /// the normal results wrongly (3.33% now: the arithmetic is IEEE, so
    /// the count moves only if the code does). The coefficient of `r^3` in
    /// its polynomial off by 2e-6 relative breaks the bound, and off by
    /// 1e-5 makes a 2 ulp error; a change that moves results by well under
    /// an ulp (the coefficient of `r^7` off by 5%) goes unseen.
    #[test]
    fn expf_fast_within_1ulp_on_a_sweep() {
        let s = fast_sweep((0..=u32::MAX).step_by(257));
        println!("expf_fast on every 257th input: {s:?}");
        let (worst, at) = s.worst;
        assert!(worst <= 1, "expf_fast({at:e}): {worst} ulps");
        assert!(s.misrounded * 1000 <= s.normal * 36, "{s:?}");
    }

    /// Every `x` whose `e^x` is subnormal or rounds to 0 or the smallest
    /// normal, where the result is rounded twice.
    #[test]
    fn expf_fast_within_1ulp_on_subnormals() {
        // From -87.33655 (e^x = 2^-126) to -104.
        let (worst, at) = fast_sweep(0xc2ae_ac40..=0xc2d0_0000).worst;
        assert!(worst <= 1, "expf_fast({at:e}): {worst} ulps");
    }

    #[test]
    fn expf_fast_edges() {
        for x in [0.0, -0.0] {
            assert_eq!(expf_fast(x).to_bits(), 1.0f32.to_bits(), "{x:e}");
        }
        assert_eq!(expf_fast(f32::INFINITY), f32::INFINITY);
        assert_eq!(expf_fast(f32::NEG_INFINITY).to_bits(), 0);
        for bits in [
            0x7fc0_0000u32,
            0x7f80_0001,
            0x7fa5_a5a5,
            0xffc0_0001,
            0xff80_0001,
        ] {
            let got = expf_fast(f32::from_bits(bits));
            assert!(
                got.is_nan(),
                "{bits:#010x}: {got:e} ({:#010x})",
                got.to_bits()
            );
        }
        // Overflow where `expf` overflows: 88.72284 and above, and not
        // below.
        for bits in [
            0x42b1_7218u32,
            0x42b1_7219,
            0x42b1_8000,
            0x42b2_0000,
            0x42c0_0000,
        ] {
            assert_eq!(
                expf_fast(f32::from_bits(bits)),
                f32::INFINITY,
                "{bits:#010x}"
            );
        }
        assert_eq!(expf_fast(f32::MAX), f32::INFINITY);
        for bits in 0x42b1_7200u32..0x42b1_7218 {
            let x = f32::from_bits(bits);
            assert!(expf_fast(x).is_finite(), "{x:e}");
            assert!(fast_ulps(x) <= 1, "{x:e}");
        }
        // 0 from -103.97208 down, where `expf` returns 0.
        for bits in [
            0xc2cf_f1b5u32,
            0xc2cf_f1b6,
            0xc2d0_0000,
            0xc2d0_0001,
            0xc300_0000,
        ] {
            assert_eq!(expf_fast(f32::from_bits(bits)).to_bits(), 0, "{bits:#010x}");
        }
        assert_eq!(expf_fast(f32::MIN).to_bits(), 0);
        // Tiny `x`: 1 + x, rounded.
        for x in [
            f32::from_bits(1),
            f32::MIN_POSITIVE,
            1e-8,
            -1e-8,
            1e-30,
            -1e-30,
        ] {
            assert!(fast_ulps(x) <= 1, "{x:e}");
        }
    }

    /// Every bit pattern: run it in release, `cargo test --release --
    /// --ignored`.
    #[test]
    #[ignore = "2^32 inputs: run in release"]
    fn expf_fast_within_1ulp_everywhere() {
        let s = fast_sweep(0..=u32::MAX);
        println!("expf_fast on every input: {s:?}");
        let (worst, at) = s.worst;
        assert!(worst <= 1, "expf_fast({at:e}): {worst} ulps");
    }
}
