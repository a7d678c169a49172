//! Float64 reference oracles of every built-in op (docs/tensor-ops.md), the
//! dtype conversions the kernels and their tests share (bf16, f16, TF32), and
//! the tolerance checks that compare a kernel's f32 output with an oracle.
//! Both drivers' tests use this module; it runs nothing on a device and must
//! stay free of any driver.
//!
//! Every oracle takes `f64` slices (see [`widen`]) and returns a dense,
//! row-major `Vec<f64>`. Sizes are `usize`; a slice too short for its sizes
//! panics, since that is a bug in the test that called it.

pub use tensorwasm_core::abi::tensor::GemmPrecision;

use std::f64::consts::{FRAC_1_SQRT_2, FRAC_2_SQRT_PI, PI};

/// The unit roundoff of f32 (half an ulp of 1.0): 2^-24.
pub const F32_UNIT_ROUNDOFF: f64 = 1.0 / (1u64 << 24) as f64;

/// Relative error TF32 rounding adds to one product `a * b`: each input is
/// rounded to 10 mantissa bits (at most 2^-11 relative), so the product is
/// off by at most about 2^-10.
pub const TF32_PRODUCT_RTOL: f64 = 1.0 / 1024.0;

/// An f32 slice as f64, for the oracles.
pub fn widen(x: &[f32]) -> Vec<f64> {
    x.iter().map(|&v| f64::from(v)).collect()
}

// ---------------------------------------------------------------------------
// Ops
// ---------------------------------------------------------------------------

/// One batch of `C = alpha * A @ B + beta * C_in`: A is `m x k` with row
/// stride `lda`, B is `k x n` with row stride `ldb`, C_in is `m x n` with row
/// stride `ldc` (not read when `beta == 0`, as the kernels do). The result is
/// dense `m x n` (row stride `n`), whatever `ldc` is.
#[allow(clippy::too_many_arguments)]
pub fn gemm(
    a: &[f64],
    b: &[f64],
    c_in: &[f64],
    m: usize,
    n: usize,
    k: usize,
    lda: usize,
    ldb: usize,
    ldc: usize,
    alpha: f64,
    beta: f64,
) -> Vec<f64> {
    gemm_with(a, b, c_in, [m, n, k], [lda, ldb, ldc], alpha, beta, |v| v)
}

/// The magnitudes a GEMM's rounding error scales with: `|alpha| * sum_k
/// |a_ik| |b_kj| + |beta| * |c_ij|` (the C term only when `beta != 0`),
/// dense `m x n`. Pass it to [`check_close_scaled`] with
/// [`gemm_rtol`].
#[allow(clippy::too_many_arguments)]
pub fn gemm_abs(
    a: &[f64],
    b: &[f64],
    c_in: &[f64],
    m: usize,
    n: usize,
    k: usize,
    lda: usize,
    ldb: usize,
    ldc: usize,
    alpha: f64,
    beta: f64,
) -> Vec<f64> {
    gemm_with(
        a,
        b,
        c_in,
        [m, n, k],
        [lda, ldb, ldc],
        alpha.abs(),
        beta.abs(),
        f64::abs,
    )
}

#[allow(clippy::too_many_arguments)]
fn gemm_with(
    a: &[f64],
    b: &[f64],
    c_in: &[f64],
    [m, n, k]: [usize; 3],
    [lda, ldb, ldc]: [usize; 3],
    alpha: f64,
    beta: f64,
    map: impl Fn(f64) -> f64,
) -> Vec<f64> {
    assert!(
        lda >= k && ldb >= n && ldc >= n,
        "gemm: a leading dimension is shorter than its row"
    );
    let need =
        |rows: usize, ld: usize, cols: usize| if rows == 0 { 0 } else { (rows - 1) * ld + cols };
    assert!(
        a.len() >= need(m, lda, k),
        "gemm: A holds {} elements, needs {}",
        a.len(),
        need(m, lda, k)
    );
    assert!(
        b.len() >= need(k, ldb, n),
        "gemm: B holds {} elements, needs {}",
        b.len(),
        need(k, ldb, n)
    );
    if beta != 0.0 {
        assert!(
            c_in.len() >= need(m, ldc, n),
            "gemm: C holds {} elements, needs {}",
            c_in.len(),
            need(m, ldc, n)
        );
    }
    let mut c = vec![0.0; m * n];
    for i in 0..m {
        let row = &mut c[i * n..(i + 1) * n];
        for p in 0..k {
            let aip = map(a[i * lda + p]);
            for (j, out) in row.iter_mut().enumerate() {
                *out += aip * map(b[p * ldb + j]);
            }
        }
        for (j, out) in row.iter_mut().enumerate() {
            *out *= alpha;
            if beta != 0.0 {
                *out += beta * map(c_in[i * ldc + j]);
            }
        }
    }
    c
}

/// Which reduction [`reduce`] computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    /// The sum.
    Sum,
    /// The largest element; NaN elements are skipped, as CUDA's `fmaxf`
    /// skips them (NaN only if every element is NaN).
    Max,
    /// The sum divided by the count.
    Mean,
}

/// Reduces the middle axis of `x`, viewed as `[outer, n, inner]`, giving
/// `[outer, inner]`: `y[o * inner + i] = op over j of x[(o * n + j) * inner + i]`.
pub fn reduce(x: &[f64], outer: usize, n: usize, inner: usize, op: ReduceOp) -> Vec<f64> {
    assert!(n >= 1, "reduce: nothing to reduce (n == 0)");
    assert_eq!(
        x.len(),
        outer * n * inner,
        "reduce: x is not [outer, n, inner]"
    );
    let mut y = Vec::with_capacity(outer * inner);
    for o in 0..outer {
        for i in 0..inner {
            let items = (0..n).map(|j| x[(o * n + j) * inner + i]);
            y.push(match op {
                ReduceOp::Sum => items.sum(),
                ReduceOp::Mean => items.sum::<f64>() / n as f64,
                ReduceOp::Max => items.fold(f64::NAN, f64::max),
            });
        }
    }
    y
}

/// Softmax of each row of `x` (`rows x cols`), over the last axis.
pub fn softmax(x: &[f64], rows: usize, cols: usize) -> Vec<f64> {
    assert_eq!(x.len(), rows * cols, "softmax: x is not [rows, cols]");
    let mut y = Vec::with_capacity(x.len());
    for row in x.chunks_exact(cols.max(1)) {
        let max = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let exps: Vec<f64> = row.iter().map(|&v| (v - max).exp()).collect();
        let sum: f64 = exps.iter().sum();
        y.extend(exps.iter().map(|&e| e / sum));
    }
    y
}

/// A row's mean and `1 / sqrt(biased variance + eps)`, two-pass.
fn row_mean_rstd(row: &[f64], eps: f64) -> (f64, f64) {
    let n = row.len() as f64;
    let mean = row.iter().sum::<f64>() / n;
    let var = row.iter().map(|&v| (v - mean) * (v - mean)).sum::<f64>() / n;
    (mean, 1.0 / (var + eps).sqrt())
}

/// Layer normalisation of each row of `x` (`rows x cols`) over the last
/// axis: `(x - mean) / sqrt(var + eps) * gamma + beta`, biased variance.
pub fn layernorm(
    x: &[f64],
    gamma: &[f64],
    beta: &[f64],
    rows: usize,
    cols: usize,
    eps: f64,
) -> Vec<f64> {
    assert_eq!(x.len(), rows * cols, "layernorm: x is not [rows, cols]");
    assert!(
        gamma.len() == cols && beta.len() == cols,
        "layernorm: gamma and beta need cols elements"
    );
    let mut y = Vec::with_capacity(x.len());
    for row in x.chunks_exact(cols.max(1)) {
        let (mean, rstd) = row_mean_rstd(row, eps);
        y.extend(
            row.iter()
                .zip(gamma.iter().zip(beta))
                .map(|(&v, (&g, &b))| (v - mean) * rstd * g + b),
        );
    }
    y
}

/// `y[i] = a[i] + b[i % b_period]`.
pub fn add(a: &[f64], b: &[f64], b_period: usize) -> Vec<f64> {
    broadcast(a, b, b_period, |x, y| x + y)
}

/// `y[i] = a[i] * b[i % b_period]`.
pub fn mul(a: &[f64], b: &[f64], b_period: usize) -> Vec<f64> {
    broadcast(a, b, b_period, |x, y| x * y)
}

fn broadcast(a: &[f64], b: &[f64], b_period: usize, op: impl Fn(f64, f64) -> f64) -> Vec<f64> {
    assert!(
        b_period >= 1 && b.len() >= b_period,
        "broadcast: b needs b_period >= 1 elements"
    );
    a.iter()
        .enumerate()
        .map(|(i, &x)| op(x, b[i % b_period]))
        .collect()
}

/// `max(x, 0)`; NaN gives 0, as CUDA's `fmaxf(x, 0)` does.
pub fn relu(x: &[f64]) -> Vec<f64> {
    x.iter().map(|&v| v.max(0.0)).collect()
}

/// The exact GELU, `0.5 x (1 + erf(x / sqrt 2))`, computed as
/// `0.5 x erfc(-x / sqrt 2)` so that large negative `x` keeps its digits.
pub fn gelu(x: &[f64]) -> Vec<f64> {
    x.iter().map(|&v| gelu_one(v)).collect()
}

/// [`gelu`] of one value.
pub fn gelu_one(x: f64) -> f64 {
    0.5 * x * erfc(-x * FRAC_1_SQRT_2)
}

/// Transposes each `rows x cols` matrix of `x` (any number of them, back to
/// back) into `cols x rows`.
pub fn transpose(x: &[f64], rows: usize, cols: usize) -> Vec<f64> {
    let size = rows * cols;
    assert!(
        size > 0 && x.len().is_multiple_of(size),
        "transpose: x is not [batch, rows, cols]"
    );
    let mut y = vec![0.0; x.len()];
    for (xb, yb) in x.chunks_exact(size).zip(y.chunks_exact_mut(size)) {
        for r in 0..rows {
            for c in 0..cols {
                yb[c * rows + r] = xb[r * cols + c];
            }
        }
    }
    y
}

// ---------------------------------------------------------------------------
// erf
// ---------------------------------------------------------------------------

/// Below this |x|, [`erf`] sums its Taylor-like series; at and above it,
/// `1 - erfc(|x|)` from the continued fraction (at most ~60 terms there).
const ERF_SERIES_LIMIT: f64 = 2.0;
/// Below this x, [`erfc`] is `1 - erf(x)` (erfc(1) = 0.157, so that loses
/// under a bit); at and above it the continued fraction (at most ~190 terms).
const ERFC_FRACTION_LIMIT: f64 = 1.0;

/// The error function, to about 1e-15 relative over the whole line.
pub fn erf(x: f64) -> f64 {
    if x.is_nan() {
        return x;
    }
    let z = x.abs();
    let r = if z < ERF_SERIES_LIMIT {
        erf_series(z)
    } else {
        1.0 - erfc_fraction(z)
    };
    r.copysign(x)
}

/// The complementary error function `1 - erf(x)`, to about 1e-15 relative
/// (it keeps its digits where `1 - erf` would cancel).
pub fn erfc(x: f64) -> f64 {
    if x.is_nan() {
        x
    } else if x >= ERFC_FRACTION_LIMIT {
        erfc_fraction(x)
    } else if x > -ERF_SERIES_LIMIT {
        1.0 - erf(x)
    } else {
        2.0 - erfc_fraction(-x)
    }
}

/// `e^(-z^2)` with the rounding of `z^2` put back (z^2 = hi + lo exactly),
/// so that large `z` does not lose digits to the square.
fn exp_minus_square(z: f64) -> f64 {
    let hi = z * z;
    let lo = z.mul_add(z, -hi);
    (-hi).exp() * (1.0 - lo)
}

/// `erf(z) = 2/sqrt(pi) e^(-z^2) sum_n 2^n z^(2n+1) / (1 * 3 * .. * (2n+1))`
/// for `0 <= z < 2`: every term is positive, so nothing cancels.
fn erf_series(z: f64) -> f64 {
    let square2 = 2.0 * z * z;
    let (mut term, mut sum) = (z, z);
    let mut odd = 3.0;
    while term > sum * 1e-17 {
        term *= square2 / odd;
        sum += term;
        odd += 2.0;
    }
    FRAC_2_SQRT_PI * exp_minus_square(z) * sum
}

/// Laplace's continued fraction `erfc(z) = e^(-z^2) / (sqrt(pi) f)` with
/// `f = z + (1/2) / (z + 1 / (z + (3/2) / (z + ...)))`, by the modified
/// Lentz method, for `z >= 1`.
fn erfc_fraction(z: f64) -> f64 {
    const TINY: f64 = 1e-300;
    // erfc(27.3) is below the smallest subnormal (and infinity would make
    // the fraction inf * 0).
    if z > 27.3 {
        return 0.0;
    }
    let mut f = z;
    let (mut c, mut d) = (z, 0.0);
    for n in 1..10_000 {
        let a = f64::from(n) * 0.5;
        d = z + a * d;
        if d == 0.0 {
            d = TINY;
        }
        c = z + a / c;
        if c == 0.0 {
            c = TINY;
        }
        d = 1.0 / d;
        let delta = c * d;
        f *= delta;
        if (delta - 1.0).abs() < 1e-16 {
            break;
        }
    }
    exp_minus_square(z) / (PI.sqrt() * f)
}

// ---------------------------------------------------------------------------
// Dtypes
// ---------------------------------------------------------------------------

/// A bfloat16 bit pattern as f32 (exact).
pub fn bf16_to_f32(bits: u16) -> f32 {
    f32::from_bits(u32::from(bits) << 16)
}

/// An f32 as a bfloat16 bit pattern, rounded to nearest even; overflow
/// gives infinity, NaN stays NaN (quiet, with its sign and top payload bits).
pub fn f32_to_bf16(x: f32) -> u16 {
    let bits = x.to_bits();
    if x.is_nan() {
        return ((bits >> 16) as u16) | 0x0040;
    }
    let round = 0x7fff + ((bits >> 16) & 1);
    (bits.wrapping_add(round) >> 16) as u16
}

/// An IEEE binary16 bit pattern as f32 (exact, subnormals included).
pub fn f16_to_f32(bits: u16) -> f32 {
    let sign = u32::from(bits & 0x8000) << 16;
    let exp = u32::from(bits >> 10) & 0x1f;
    let mant = u32::from(bits) & 0x3ff;
    let magnitude = match exp {
        // Zero or subnormal: mant * 2^-24, exact in f32.
        0 => (mant as f32 * (1.0 / (1u32 << 24) as f32)).to_bits(),
        0x1f => 0x7f80_0000 | (mant << 13),
        _ => ((exp + 127 - 15) << 23) | (mant << 13),
    };
    f32::from_bits(sign | magnitude)
}

/// An f32 as an IEEE binary16 bit pattern, rounded to nearest even:
/// subnormal results, overflow to infinity (from 65520 up), NaN stays NaN
/// (quiet, with its sign and top payload bits).
pub fn f32_to_f16(x: f32) -> u16 {
    let bits = x.to_bits();
    let sign = ((bits >> 16) & 0x8000) as u16;
    let abs = bits & 0x7fff_ffff;
    let magnitude: u32 = if abs > 0x7f80_0000 {
        0x7e00 | ((abs >> 13) & 0x3ff)
    } else if abs >= 0x477f_f000 {
        // 65520 and up (infinity too) round to infinity.
        0x7c00
    } else if abs >= 0x3880_0000 {
        // Normal: rebias the exponent, round off 13 mantissa bits (a carry
        // into the exponent is the right answer).
        let v = abs - 0x3800_0000;
        (v + 0x0fff + ((v >> 13) & 1)) >> 13
    } else if abs <= 0x3300_0000 {
        // At most 2^-25, half the smallest subnormal: ties to even, zero.
        0
    } else {
        // Subnormal: round(value * 2^24) = round(m * 2^(e - 126)).
        let e = abs >> 23;
        let m = (abs & 0x007f_ffff) | 0x0080_0000;
        let shift = 126 - e;
        let (q, rem, half) = (m >> shift, m & ((1 << shift) - 1), 1 << (shift - 1));
        q + u32::from(rem > half || (rem == half && q & 1 == 1))
    };
    sign | magnitude as u16
}

/// Rounds an f32 to TF32 (10 fraction bits, the low 13 bits zero) to
/// nearest with ties to even, as every TF32 GEMM rounds its inputs (the
/// TMA unit through a TFLOAT32 tensor map, `to_tf32` in gemm.cu elsewhere).
/// Subnormals round like the rest (no flush to zero); a finite value past
/// TF32's largest rounds to infinity; infinities stay; a NaN becomes
/// `0x7fffe000`, the NaN the TMA unit makes (clearing a NaN's low bits
/// could leave an infinity).
pub fn tf32_round(x: f32) -> f32 {
    if x.is_nan() {
        return f32::from_bits(TF32_NAN);
    }
    // Adding 0xfff plus the lowest kept bit carries into the kept bits
    // exactly when the dropped bits are above half, or half with the kept
    // bits odd. At most 0xff80_0000 + 0x1000: no wrap.
    let bits = x.to_bits();
    f32::from_bits((bits + 0xfff + ((bits >> 13) & 1)) & !0x1fff)
}

/// The NaN [`tf32_round`] makes of every NaN.
pub const TF32_NAN: u32 = 0x7fff_e000;

// ---------------------------------------------------------------------------
// Tolerances
// ---------------------------------------------------------------------------

/// The `rtol` for [`check_close_scaled`] with [`gemm_abs`] magnitudes, for
/// a GEMM of `precision` over `k` products: a worst-case bound on f32
/// accumulation in any order plus the alpha and beta steps, `(k + 3) u`,
/// and for TF32 the input rounding too (the oracle gets the unrounded
/// inputs). bf16 and f16 products are exact in f32 (the oracle gets the
/// inputs' exact values).
pub fn gemm_rtol(precision: GemmPrecision, k: usize) -> f64 {
    let accumulate = (k as f64 + 3.0) * F32_UNIT_ROUNDOFF;
    match precision {
        GemmPrecision::Tf32 => accumulate + TF32_PRODUCT_RTOL,
        GemmPrecision::F32 | GemmPrecision::Bf16 | GemmPrecision::F16 => accumulate,
    }
}

/// The `rtol` for a value an f32 kernel sums from `terms` f32 terms (in any
/// order) and then scales once, checked with [`check_close_scaled`] against
/// the sum of the terms' magnitudes (`reduce` of `|x|`).
pub fn f32_sum_rtol(terms: usize) -> f64 {
    (terms as f64 + 2.0) * F32_UNIT_ROUNDOFF
}

/// The `rtol` for ops that round once in f32 (`add`, `mul`); `relu`,
/// `transpose` and `reduce_max` are exact (0).
pub const F32_ROUNDED_RTOL: f64 = F32_UNIT_ROUNDOFF;

/// `(rtol, atol)` for GELU with [`check_close`]. The atol is for the
/// negative tail: `1 + erff(x / sqrt 2)` in f32 cancels there, leaving an
/// absolute error of about `|x| * 1e-7`.
pub const GELU_TOLERANCE: (f64, f64) = (1e-5, 1e-6);

/// `(rtol, atol)` for softmax over rows of `cols` with [`check_close`]: the
/// row sum's rounding, plus 1e-5 for `x - max` rounding and the exp (a fast
/// `__expf` is off by a few ulp per unit of `|x - max|`); the atol lets
/// results below f32's normal range flush to zero.
pub fn softmax_tolerance(cols: usize) -> (f64, f64) {
    (f32_sum_rtol(cols) + 1e-5, 1e-37)
}

/// The magnitudes layer norm's rounding error scales with, for
/// [`check_close_scaled`] with [`layernorm_rtol`]: `(|x - mean| +
/// mean(|x|)) * rstd * |gamma| + |beta|` (the mean's and the variance's
/// errors scale with the row's magnitude, not with `x - mean`).
pub fn layernorm_magnitude(
    x: &[f64],
    gamma: &[f64],
    beta: &[f64],
    rows: usize,
    cols: usize,
    eps: f64,
) -> Vec<f64> {
    assert_eq!(x.len(), rows * cols, "layernorm: x is not [rows, cols]");
    assert!(
        gamma.len() == cols && beta.len() == cols,
        "layernorm: gamma and beta need cols elements"
    );
    let mut m = Vec::with_capacity(x.len());
    for row in x.chunks_exact(cols.max(1)) {
        let (mean, rstd) = row_mean_rstd(row, eps);
        let mean_abs = row.iter().map(|v| v.abs()).sum::<f64>() / cols as f64;
        m.extend(
            row.iter()
                .zip(gamma.iter().zip(beta))
                .map(|(&v, (&g, &b))| ((v - mean).abs() + mean_abs) * rstd * g.abs() + b.abs()),
        );
    }
    m
}

/// The `rtol` for layer norm over rows of `cols`, with
/// [`layernorm_magnitude`]: the mean's and the variance's sums (the
/// variance's error halves through the square root), and a few roundings
/// for the subtraction, `rsqrt` (2 ulp on the GPU) and the affine step.
pub fn layernorm_rtol(cols: usize) -> f64 {
    2.0 * f32_sum_rtol(cols) + 16.0 * F32_UNIT_ROUNDOFF
}

/// Checks `|got[i] - want[i]| <= atol + rtol * |want[i]|` for every element
/// (NaN must meet NaN, infinity the same infinity). The error names how many
/// elements failed and the worst one (index, got, want).
pub fn check_close(got: &[f32], want: &[f64], rtol: f64, atol: f64) -> Result<(), String> {
    compare(got, want, rtol, atol, |i| want[i].abs())
}

/// Like [`check_close`], but element `i` may be off by `rtol *
/// magnitude[i]`: for results whose rounding error scales with the sizes of
/// what was summed rather than with the result, which may cancel to near
/// zero. GEMM: `magnitude` from [`gemm_abs`], `rtol` from
/// [`gemm_rtol`]; sums: `reduce` of `|x|` and [`f32_sum_rtol`].
pub fn check_close_scaled(
    got: &[f32],
    want: &[f64],
    magnitude: &[f64],
    rtol: f64,
) -> Result<(), String> {
    if magnitude.len() != want.len() {
        return Err(format!(
            "{} magnitudes for {} elements",
            magnitude.len(),
            want.len()
        ));
    }
    compare(got, want, rtol, 0.0, |i| magnitude[i].abs())
}

fn compare(
    got: &[f32],
    want: &[f64],
    rtol: f64,
    atol: f64,
    scale: impl Fn(usize) -> f64,
) -> Result<(), String> {
    if got.len() != want.len() {
        return Err(format!("got {} elements, want {}", got.len(), want.len()));
    }
    // (excess ratio, index, tolerance) of the worst element so far.
    let mut worst: Option<(f64, usize, f64)> = None;
    let mut failed = 0usize;
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let g = f64::from(g);
        let tol = atol + rtol * scale(i);
        let ok = if w.is_nan() {
            g.is_nan()
        } else if w.is_infinite() {
            g == w
        } else {
            (g - w).abs() <= tol
        };
        if ok {
            continue;
        }
        failed += 1;
        let diff = (g - w).abs();
        let ratio = if diff.is_nan() || tol <= 0.0 {
            f64::INFINITY
        } else {
            diff / tol
        };
        if worst.is_none_or(|(r, _, _)| ratio > r) {
            worst = Some((ratio, i, tol));
        }
    }
    match worst {
        None => Ok(()),
        Some((_, i, tol)) => Err(format!(
            "{failed} of {} elements out of tolerance (rtol {rtol:e}, atol {atol:e}); worst at \
             index {i}: got {}, want {}, |diff| {:e} > {tol:e}",
            got.len(),
            got[i],
            want[i],
            (f64::from(got[i]) - want[i]).abs(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_rel(got: f64, want: f64, rel: f64, what: &str) {
        let err = if want == 0.0 {
            got.abs()
        } else {
            ((got - want) / want).abs()
        };
        assert!(
            err <= rel,
            "{what}: got {got:e}, want {want:e}, relative error {err:e}"
        );
    }

    #[test]
    fn erf_matches_known_values() {
        // Reference values: CPython's math.erf / math.erfc (correctly
        // rounded to within an ulp).
        let table = [
            (1e-10, 1.1283791670955126e-10, 0.999999999887162),
            (0.1, 0.1124629160182849, 0.8875370839817152),
            (0.5, 0.5204998778130465, 0.4795001221869535),
            (1.0, 0.8427007929497149, 0.15729920705028513),
            (1.5, 0.9661051464753108, 0.033894853524689274),
            (2.0, 0.9953222650189527, 0.004677734981047265),
            (2.5, 0.999593047982555, 0.0004069520174449589),
            (3.0, 0.9999779095030014, 2.2090496998585438e-05),
            (4.0, 0.9999999845827421, 1.541725790028002e-08),
            (5.0, 0.9999999999984626, 1.5374597944280351e-12),
            (6.0, 1.0, 2.1519736712498916e-17),
        ];
        for (x, e, c) in table {
            assert_rel(erf(x), e, 2e-15, &format!("erf({x})"));
            assert_rel(erf(-x), -e, 2e-15, &format!("erf(-{x})"));
            assert_rel(erfc(x), c, 3e-15, &format!("erfc({x})"));
            assert_rel(erfc(-x), 2.0 - c, 2e-15, &format!("erfc(-{x})"));
        }
        assert_rel(erfc(10.0), 2.088487583762545e-45, 3e-15, "erfc(10)");
        assert_rel(erfc(26.0), 5.663192408856143e-296, 1e-13, "erfc(26)");
        assert_eq!(erf(0.0), 0.0);
        assert!(erf(-0.0).is_sign_negative());
        assert_eq!(erf(f64::INFINITY), 1.0);
        assert_eq!(erf(f64::NEG_INFINITY), -1.0);
        assert_eq!(erfc(f64::INFINITY), 0.0);
        assert_eq!(erfc(f64::NEG_INFINITY), 2.0);
        assert!(erf(f64::NAN).is_nan() && erfc(f64::NAN).is_nan());
        // Both sides of each switch-over agree.
        for edge in [ERF_SERIES_LIMIT, ERFC_FRACTION_LIMIT] {
            let below = f64::from_bits(edge.to_bits() - 1);
            assert_rel(erf(below), erf(edge), 1e-15, "erf across a switch");
            assert_rel(erfc(below), erfc(edge), 3e-15, "erfc across a switch");
        }
    }

    #[test]
    fn gelu_matches_known_values() {
        // 0.5 x (1 + erf(x / sqrt 2)) from the table's reference erf values.
        assert_eq!(gelu_one(0.0), 0.0);
        assert_rel(
            gelu_one(2.0f64.sqrt()),
            0.5 * 2.0f64.sqrt() * (1.0 + 0.8427007929497149),
            2e-15,
            "gelu(sqrt 2)",
        );
        assert_rel(
            gelu_one(-(2.0f64.sqrt())),
            -0.5 * 2.0f64.sqrt() * 0.15729920705028513,
            3e-15,
            "gelu(-sqrt 2)",
        );
        // Deep in the negative tail 1 + erf would cancel; erfc keeps it.
        // (x / sqrt 2 rounds by an ulp, and erfc(5) moves 2 * 5^2 times
        // that: ~5e-15 is the conditioning, not the method.)
        let x = -5.0 * 2.0f64.sqrt();
        assert_rel(
            gelu_one(x),
            0.5 * x * 1.5374597944280351e-12,
            2e-14,
            "gelu(-5 sqrt 2)",
        );
        assert_eq!(gelu(&[1.0, -1.0]).len(), 2);
        assert_rel(gelu(&[1.0])[0], 0.8413447460685429, 2e-15, "gelu(1)");
    }

    #[test]
    fn gemm_by_hand() {
        // A = [[1, 2, 3], [4, 5, 6]] with lda 4 (a pad column of 99),
        // B = [[7, 8], [9, 10], [11, 12]], C_in = [[1, 1], [1, 1]] (ldc 3).
        let a = [1.0, 2.0, 3.0, 99.0, 4.0, 5.0, 6.0];
        let b = [7.0, 8.0, 9.0, 10.0, 11.0, 12.0];
        let c = [1.0, 1.0, 99.0, 1.0, 1.0];
        let ab = [58.0, 64.0, 139.0, 154.0];
        assert_eq!(gemm(&a, &b, &c, 2, 2, 3, 4, 2, 3, 1.0, 0.0), ab);
        let scaled: Vec<f64> = ab.iter().map(|v| 2.0 * v - 1.0).collect();
        assert_eq!(gemm(&a, &b, &c, 2, 2, 3, 4, 2, 3, 2.0, -1.0), scaled);
        // beta == 0 never reads C: NaN there stays out of the result.
        assert_eq!(gemm(&a, &b, &[f64::NAN; 5], 2, 2, 3, 4, 2, 3, 1.0, 0.0), ab);
        let neg_a: Vec<f64> = a.iter().map(|v| -v).collect();
        let abs = gemm_abs(&neg_a, &b, &c, 2, 2, 3, 4, 2, 3, -1.0, -2.0);
        assert_eq!(abs, [60.0, 66.0, 141.0, 156.0]);
    }

    #[test]
    fn reductions_softmax_layernorm() {
        // x is [2, 3, 2].
        let x: Vec<f64> = (1..=12).map(f64::from).collect();
        assert_eq!(reduce(&x, 2, 3, 2, ReduceOp::Sum), [9.0, 12.0, 27.0, 30.0]);
        assert_eq!(reduce(&x, 2, 3, 2, ReduceOp::Max), [5.0, 6.0, 11.0, 12.0]);
        assert_eq!(reduce(&x, 2, 3, 2, ReduceOp::Mean), [3.0, 4.0, 9.0, 10.0]);
        assert_eq!(reduce(&x, 1, 12, 1, ReduceOp::Sum), [78.0]);
        assert_eq!(reduce(&[f64::NAN, 2.0, 1.0], 1, 3, 1, ReduceOp::Max), [2.0]);

        // The second row would overflow exp without the max taken out
        // (1000 + ln 2 itself rounds by an ulp of 1000: hence 1e-13).
        let s = softmax(&[0.0, 0.0, 1000.0, 1000.0 + 2f64.ln()], 2, 2);
        assert_eq!(&s[..2], [0.5, 0.5]);
        assert_rel(s[2], 1.0 / 3.0, 1e-13, "softmax");
        assert_rel(s[3], 2.0 / 3.0, 1e-13, "softmax");

        // Row [1, 2, 3]: mean 2, biased variance 2/3.
        let y = layernorm(
            &[1.0, 2.0, 3.0],
            &[1.0, 2.0, 1.0],
            &[0.0, 0.5, -1.0],
            1,
            3,
            0.0,
        );
        let r = (1.5f64).sqrt();
        assert_rel(y[0], -r, 1e-15, "layernorm");
        assert_eq!(y[1], 0.5);
        assert_rel(y[2], r - 1.0, 1e-15, "layernorm");
        // Magnitudes: (|x - mean| + mean |x|) * rstd * |gamma| + |beta|.
        let m = layernorm_magnitude(
            &[1.0, 2.0, 3.0],
            &[1.0, -2.0, 1.0],
            &[0.0, 0.5, -1.0],
            1,
            3,
            0.0,
        );
        assert_rel(m[0], 3.0 * r, 1e-15, "layernorm magnitude");
        assert_rel(m[1], 4.0 * r + 0.5, 1e-15, "layernorm magnitude");
        assert_rel(m[2], 3.0 * r + 1.0, 1e-15, "layernorm magnitude");
    }

    #[test]
    fn elementwise_and_transpose() {
        let a = [1.0, 2.0, 3.0, 4.0, 5.0];
        assert_eq!(add(&a, &[10.0, 20.0], 2), [11.0, 22.0, 13.0, 24.0, 15.0]);
        assert_eq!(mul(&a, &[2.0], 1), [2.0, 4.0, 6.0, 8.0, 10.0]);
        assert_eq!(mul(&a, &a, 5), [1.0, 4.0, 9.0, 16.0, 25.0]);
        assert_eq!(relu(&[-1.0, 0.5, f64::NAN]), [0.0, 0.5, 0.0]);
        // Two batches of [2, 3].
        let x: Vec<f64> = (0..12).map(f64::from).collect();
        assert_eq!(
            transpose(&x, 2, 3),
            [0.0, 3.0, 1.0, 4.0, 2.0, 5.0, 6.0, 9.0, 7.0, 10.0, 8.0, 11.0]
        );
    }

    #[test]
    fn bf16_rounds_to_nearest_even() {
        assert_eq!(f32_to_bf16(1.0), 0x3f80);
        assert_eq!(bf16_to_f32(0x3f80), 1.0);
        assert_eq!(bf16_to_f32(0xc049), -3.140625);
        // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: even (1) wins; a hair
        // above rounds up; 1 + 3 * 2^-8 is halfway and rounds up to even.
        assert_eq!(f32_to_bf16(1.0 + 1.0 / 256.0), 0x3f80);
        assert_eq!(f32_to_bf16(f32::from_bits(0x3f80_8001)), 0x3f81);
        assert_eq!(f32_to_bf16(1.0 + 3.0 / 256.0), 0x3f82);
        assert_eq!(f32_to_bf16(f32::MAX), 0x7f80, "overflow rounds to infinity");
        assert_eq!(f32_to_bf16(f32::INFINITY), 0x7f80);
        assert_eq!(f32_to_bf16(f32::NEG_INFINITY), 0xff80);
        assert_eq!(f32_to_bf16(-0.0), 0x8000);
        assert_eq!(
            f32_to_bf16(f32::from_bits(1)),
            0,
            "tiny subnormal rounds to zero"
        );
        assert_eq!(f32_to_bf16(f32::from_bits(0x0001_8000)), 0x0002);
        // NaN stays NaN, even one whose payload sits only in the low bits.
        for nan in [
            f32::NAN,
            f32::from_bits(0x7f80_0001),
            f32::from_bits(0xff80_0001),
        ] {
            let b = f32_to_bf16(nan);
            assert!(bf16_to_f32(b).is_nan(), "{nan:?} -> {b:#06x}");
            assert_eq!(b & 0x8000, ((nan.to_bits() >> 16) as u16) & 0x8000);
        }
        // Every non-NaN bf16 survives the round trip bit for bit.
        for bits in 0..=u16::MAX {
            let x = bf16_to_f32(bits);
            if !x.is_nan() {
                assert_eq!(f32_to_bf16(x), bits, "{bits:#06x}");
            }
        }
    }

    #[test]
    fn f16_rounds_to_nearest_even() {
        assert_eq!(f32_to_f16(1.0), 0x3c00);
        assert_eq!(f32_to_f16(-2.0), 0xc000);
        assert_eq!(f32_to_f16(65504.0), 0x7bff);
        assert_eq!(f32_to_f16(65519.99), 0x7bff);
        assert_eq!(
            f32_to_f16(65520.0),
            0x7c00,
            "halfway to 65536 rounds to infinity"
        );
        assert_eq!(f32_to_f16(1e10), 0x7c00);
        assert_eq!(f32_to_f16(f32::NEG_INFINITY), 0xfc00);
        assert_eq!(f16_to_f32(0x7c00), f32::INFINITY);
        // 1 + 2^-11 is halfway between 1 and 1 + 2^-10: even (1) wins.
        assert_eq!(f32_to_f16(1.0 + 1.0 / 2048.0), 0x3c00);
        assert_eq!(f32_to_f16(1.0 + 3.0 / 2048.0), 0x3c02);
        // Subnormals: 2^-24 is the smallest; 2^-25 is halfway to it (zero
        // wins), a hair above rounds up; 3 * 2^-25 rounds to even (2).
        let tiny = 2f32.powi(-24);
        assert_eq!(f16_to_f32(0x0001), tiny);
        assert_eq!(f16_to_f32(0x03ff), 1023.0 * tiny);
        assert_eq!(f16_to_f32(0x8001), -tiny);
        assert_eq!(f32_to_f16(tiny), 0x0001);
        assert_eq!(f32_to_f16(tiny / 2.0), 0x0000);
        assert_eq!(f32_to_f16(-tiny / 2.0), 0x8000);
        assert_eq!(
            f32_to_f16(f32::from_bits((tiny / 2.0).to_bits() + 1)),
            0x0001
        );
        assert_eq!(f32_to_f16(1.5 * tiny), 0x0002);
        assert_eq!(f32_to_f16(2.5 * tiny), 0x0002);
        assert_eq!(
            f32_to_f16(1023.5 * tiny),
            0x0400,
            "rounds up into the normals"
        );
        assert_eq!(f32_to_f16(1e-30), 0);
        assert_eq!(f32_to_f16(-0.0), 0x8000);
        for nan in [
            f32::NAN,
            f32::from_bits(0x7f80_0001),
            f32::from_bits(0xffc0_1234),
        ] {
            let h = f32_to_f16(nan);
            assert!(f16_to_f32(h).is_nan(), "{nan:?} -> {h:#06x}");
            assert_eq!(h & 0x8000, ((nan.to_bits() >> 16) as u16) & 0x8000);
        }
        // Every non-NaN f16 survives the round trip bit for bit, and every
        // value between two neighbours rounds to the nearer one.
        for bits in 0..=u16::MAX {
            let x = f16_to_f32(bits);
            if x.is_nan() {
                continue;
            }
            assert_eq!(f32_to_f16(x), bits, "{bits:#06x}");
            let next = f16_to_f32(bits.wrapping_add(1));
            if bits & 0x7fff < 0x7bff && x.is_finite() && next.is_finite() {
                let lo = f64::from(x);
                let hi = f64::from(next);
                let quarter = (lo + (hi - lo) * 0.25) as f32;
                let three_quarters = (lo + (hi - lo) * 0.75) as f32;
                assert_eq!(f32_to_f16(quarter), bits, "{bits:#06x} + 1/4");
                assert_eq!(f32_to_f16(three_quarters), bits + 1, "{bits:#06x} + 3/4");
            }
        }
    }

    #[test]
    fn tf32_rounds_ties_to_even() {
        let ulp = 2f32.powi(-10);
        assert_eq!(tf32_round(1.0), 1.0);
        assert_eq!(tf32_round(1.0 + ulp), 1.0 + ulp);
        // Halfway: to the even neighbour, down from an even one, up from an
        // odd one, the same for negative values.
        assert_eq!(tf32_round(1.0 + ulp / 2.0), 1.0);
        assert_eq!(tf32_round(1.0 + 1.5 * ulp), 1.0 + 2.0 * ulp);
        assert_eq!(tf32_round(-(1.0 + ulp / 2.0)), -1.0);
        assert_eq!(tf32_round(-(1.0 + 1.5 * ulp)), -(1.0 + 2.0 * ulp));
        for (x, want) in [
            (0x3f80_1000u32, 0x3f80_0000u32), // tie, kept bits even: down
            (0x3f80_3000, 0x3f80_4000),       // tie, kept bits odd: up
            (0x3f80_1001, 0x3f80_2000),       // just above half: up
            (0x3f80_0fff, 0x3f80_0000),       // just below half: down
            (0x3f80_2fff, 0x3f80_2000),
            (0x3fff_f000, 0x4000_0000), // a tie carries into the exponent
            (0xbf80_1000, 0xbf80_0000),
            (0xbf80_3000, 0xbf80_4000),
            (0x7f7f_e000, 0x7f7f_e000), // the largest tf32 stays
            (0x7f7f_efff, 0x7f7f_e000),
            (0x7f7f_f000, 0x7f80_0000), // a tie past it, odd: infinity
            (0xff7f_ffff, 0xff80_0000),
            (0x0000_0000, 0x0000_0000),
            (0x8000_0000, 0x8000_0000), // -0 keeps its sign
        ] {
            assert_eq!(tf32_round(f32::from_bits(x)).to_bits(), want, "{x:#010x}");
        }
        assert_eq!(tf32_round(0.1).to_bits() & 0x1fff, 0);
        assert!(((tf32_round(0.1) - 0.1) / 0.1).abs() <= 2f32.powi(-11));
    }

    #[test]
    fn tf32_keeps_subnormals() {
        for (x, want) in [
            (0x0000_2000u32, 0x0000_2000u32), // the smallest tf32 subnormal
            (0x0000_1000, 0x0000_0000),       // half of it: to even (0)
            (0x0000_1001, 0x0000_2000),
            (0x0000_3000, 0x0000_4000), // tie, odd: up
            (0x0000_5000, 0x0000_4000), // tie, even: down
            (0x0000_0001, 0x0000_0000),
            (0x007f_f000, 0x0080_0000), // up into the normal range
            (0x007f_e000, 0x007f_e000),
            (0x8000_3000, 0x8000_4000),
            (0x8000_1000, 0x8000_0000),
        ] {
            assert_eq!(tf32_round(f32::from_bits(x)).to_bits(), want, "{x:#010x}");
        }
    }

    #[test]
    fn tf32_keeps_infinities_and_nan() {
        assert_eq!(tf32_round(f32::INFINITY), f32::INFINITY);
        assert_eq!(tf32_round(f32::NEG_INFINITY), f32::NEG_INFINITY);
        assert_eq!(tf32_round(f32::MAX), f32::INFINITY);
        assert_eq!(tf32_round(f32::MIN), f32::NEG_INFINITY);
        // Every NaN, even one whose payload lies only in the dropped bits
        // (clearing them would leave an infinity), becomes the one NaN.
        for nan in [
            0x7fc0_0000u32,
            0x7f80_0001,
            0x7f80_1fff,
            0xffc0_0000,
            0xff80_0001,
            0xffff_ffff,
        ] {
            let r = tf32_round(f32::from_bits(nan));
            assert!(r.is_nan(), "{nan:#010x}");
            assert_eq!(r.to_bits(), TF32_NAN, "{nan:#010x}");
        }
    }

    /// Against round-half-even in f64 on the grid of tf32 values around x:
    /// every 4099th bit pattern (all exponents, both signs) and every
    /// dropped-bit pattern under a few kept ones.
    #[test]
    fn tf32_round_matches_round_half_even_in_f64() {
        let reference = |x: f32| -> f32 {
            let e = (x.to_bits() >> 23) & 0xff;
            // Spacing of tf32 values at x: 2^(e - 137), subnormals as e = 1.
            let ulp = 2f64.powi(e.max(1) as i32 - 137);
            ((f64::from(x) / ulp).round_ties_even() * ulp) as f32
        };
        let kept = [
            0x3f80_0000u32,
            0x3f80_2000,
            0x0000_0000,
            0x8000_6000,
            0x7f7f_c000,
        ];
        let patterns = (0..=u32::MAX)
            .step_by(4099)
            .chain(kept.iter().flat_map(|&k| (0..0x2000).map(move |d| k | d)));
        for bits in patterns {
            let x = f32::from_bits(bits);
            if x.is_nan() {
                continue;
            }
            let (got, want) = (tf32_round(x), reference(x));
            assert_eq!(got.to_bits(), want.to_bits(), "{bits:#010x}");
        }
    }

    #[test]
    fn check_close_reports_the_worst_element() {
        assert_eq!(check_close(&[1.0, 2.0], &[1.0, 2.0], 0.0, 0.0), Ok(()));
        assert!(
            check_close(&[1.0], &[1.0, 2.0], 1.0, 1.0)
                .unwrap_err()
                .contains("got 1 elements, want 2")
        );
        let err =
            check_close(&[1.0, 2.5, 3.01, 4.0], &[1.0, 2.0, 3.0, 4.0], 1e-3, 0.0).unwrap_err();
        assert!(err.starts_with("2 of 4 elements out of tolerance"), "{err}");
        assert!(err.contains("worst at index 1: got 2.5, want 2"), "{err}");
        assert_eq!(check_close(&[1.001], &[1.0], 1e-3, 1e-6), Ok(()));
        // NaN meets NaN only; infinity the same infinity.
        assert_eq!(
            check_close(
                &[f32::NAN, f32::INFINITY],
                &[f64::NAN, f64::INFINITY],
                0.0,
                0.0
            ),
            Ok(())
        );
        assert!(check_close(&[1.0], &[f64::NAN], 1.0, 1.0).is_err());
        assert!(
            check_close(&[f32::NAN], &[1.0], 1.0, 1.0)
                .unwrap_err()
                .contains("got NaN")
        );
        assert!(check_close(&[f32::INFINITY], &[f64::NEG_INFINITY], 1.0, 1.0).is_err());
        // Scaled: a result that cancels to ~0 is judged by its magnitude.
        assert!(check_close(&[1e-7], &[0.0], 1e-6, 0.0).is_err());
        assert_eq!(check_close_scaled(&[1e-7], &[0.0], &[1.0], 1e-6), Ok(()));
        let err = check_close_scaled(&[1e-7, 1e-3], &[0.0, 0.0], &[1.0, 2.0], 1e-6).unwrap_err();
        assert!(err.contains("worst at index 1"), "{err}");
        assert!(check_close_scaled(&[0.0], &[0.0], &[], 1.0).is_err());
    }

    #[test]
    fn gemm_tolerance_covers_f32_rounding() {
        // An f32 dot product of 1000 terms, summed naively, stays inside
        // the bound; the bound is far below the size of a real mistake.
        let k = 1000;
        let a: Vec<f32> = (0..k)
            .map(|i| ((i * 7919) % 1000) as f32 / 999.0 - 0.5)
            .collect();
        let b: Vec<f32> = (0..k)
            .map(|i| ((i * 104_729) % 997) as f32 / 996.0 - 0.5)
            .collect();
        let got = a.iter().zip(&b).fold(0.0f32, |s, (x, y)| s + x * y);
        let (aw, bw) = (widen(&a), widen(&b));
        let want = gemm(&aw, &bw, &[], 1, 1, k, k, 1, 1, 1.0, 0.0);
        let mag = gemm_abs(&aw, &bw, &[], 1, 1, k, k, 1, 1, 1.0, 0.0);
        let rtol = gemm_rtol(GemmPrecision::F32, k);
        assert_eq!(check_close_scaled(&[got], &want, &mag, rtol), Ok(()));
        assert!(check_close_scaled(&[got + 0.01], &want, &mag, rtol).is_err());
        assert!(gemm_rtol(GemmPrecision::Tf32, k) > TF32_PRODUCT_RTOL);
        assert_eq!(
            gemm_rtol(GemmPrecision::Bf16, k),
            gemm_rtol(GemmPrecision::F32, k)
        );
        assert_eq!(f32_sum_rtol(0), 2.0 * F32_UNIT_ROUNDOFF);
    }
}
