//! Example TensorWasm guest: a small MLP's forward pass on the built-in
//! tensor ops (`wasi_cuda.tensor_op`, `docs/tensor-ops.md`), checked against
//! the same forward pass done in plain scalar `f32` Rust in the guest.
//!
//! ```text
//! x [batch, 256]
//!   -> layernorm (gamma, beta [256], eps 1e-5)          h0 [batch, 256]
//!   -> h0 @ W1 [256, 512], + b1 [512] (a bias row)      a1 [batch, 512]
//!   -> gelu (the exact erf form)                        g  [batch, 512]
//!   -> g @ W2 [512, 10], + b2 [10]                      logits [batch, 10]
//!   -> softmax over the 10 classes                      p  [batch, 10]
//! ```
//!
//! Every tensor lives in the guest's own memory and is borrowed by one op at
//! a time; each op is run (queued and waited for) before the next reads its
//! output. Weights and inputs come from a xorshift32 with fixed seeds: all
//! non-zero, uniform in (-1, 1) scaled so that each layer keeps unit
//! variance (`W` by `sqrt(3 / fan_in)`).
//!
//! Exports:
//! - `run(batch)`: f32 GEMMs. Passes when every probability is within
//!   [`TOL_F32`] (1e-4) of the scalar reference.
//! - `run_bf16(batch)`: the GEMM inputs (h0, W1, g, W2) are rounded to bf16
//!   in the guest, the GEMMs accumulate and write f32; passes within
//!   [`TOL_BF16`] (2e-2) of the same f32 reference.
//! - `max_error() -> f32`: the largest absolute difference from the
//!   reference that the last `run` or `run_bf16` saw (NaN before any).
//!
//! Both runs also check that every row of probabilities sums to 1 within
//! [`TOL_ROW_SUM`] (1e-5). They return:
//!
//! | code | meaning |
//! | ---: | --- |
//! | 0 | every check passed |
//! | 1 | a probability differs from the reference by more than the tolerance |
//! | 2 | a row's probabilities do not sum to 1 within 1e-5 |
//! | 3 | an output is not finite (NaN marks an element no op wrote) |
//! | 4 | `batch` is outside 1..=4096 |
//! | < 0 | a `wasi_cuda` call failed: minus its errno (`-11` is `ELAUNCH`) |
//!
//! Prints nothing (the guest library has no way to); the host sees
//! `max_error()` and, on a failed call, `last_error`.

use std::borrow::Cow;
use std::sync::atomic::{AtomicU32, Ordering};

use tensorwasm_guest::Error;
use tensorwasm_guest::tensor::{self, Bf16, Element, Tensor, TensorMut};

/// Features of an input row.
const D_IN: usize = 256;
/// Hidden units.
const D_HIDDEN: usize = 512;
/// Classes.
const D_OUT: usize = 10;
/// Layer norm's epsilon.
const EPS: f32 = 1e-5;
/// The largest batch `run` takes (the intermediates stay a few MiB).
const MAX_BATCH: usize = 4096;

/// f32 GEMMs: the most a probability may differ from the reference.
pub const TOL_F32: f32 = 1e-4;
/// bf16 GEMMs: the most a probability may differ from the f32 reference.
pub const TOL_BF16: f32 = 2e-2;
/// The most a row's probabilities may sum away from 1.
pub const TOL_ROW_SUM: f64 = 1e-5;

/// The seed of the weights; fixed, so every run checks the same model.
const WEIGHT_SEED: u32 = 0x2545_f491;
/// The seed of the inputs.
const INPUT_SEED: u32 = 0x9e37_79b9;

/// `max_error()`'s value, as `f32` bits (NaN until a run has compared).
static MAX_ERROR: AtomicU32 = AtomicU32::new(0x7fc0_0000);

/// Why a run failed; [`Failure::code`] is the export's return value.
#[derive(Debug)]
enum Failure {
    /// A probability is further than the tolerance from the reference.
    Tolerance,
    /// A row's probabilities do not sum to 1.
    RowSum,
    /// An output is NaN or infinite.
    NotFinite,
    /// `batch` is outside 1..=[`MAX_BATCH`].
    Batch,
    /// A `wasi_cuda` call failed.
    Wasi(Error),
}

impl Failure {
    fn code(&self) -> i32 {
        match self {
            Failure::Tolerance => 1,
            Failure::RowSum => 2,
            Failure::NotFinite => 3,
            Failure::Batch => 4,
            Failure::Wasi(e) => e.negative_errno(),
        }
    }
}

impl From<Error> for Failure {
    fn from(e: Error) -> Failure {
        Failure::Wasi(e)
    }
}

/// Xorshift32 (Marsaglia): small, and the same numbers on every host.
struct Xorshift32(u32);

impl Xorshift32 {
    fn next_u32(&mut self) -> u32 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        self.0 = x;
        x
    }

    /// Uniform in (-1, 1), never 0: `(k + 0.5) / 2^22 - 1` for a 23-bit
    /// `k`, exact in `f32`.
    fn next_unit(&mut self) -> f32 {
        let k = (self.next_u32() >> 9) as f32;
        (k + 0.5) / 4_194_304.0 - 1.0
    }

    /// `n` values `offset + scale * next_unit()`.
    fn fill(&mut self, n: usize, offset: f32, scale: f32) -> Vec<f32> {
        (0..n).map(|_| offset + scale * self.next_unit()).collect()
    }
}

/// The MLP's parameters, row-major; the GEMMs' weights in the GEMMs'
/// input type `T`.
struct Model<T> {
    gamma: Vec<f32>,
    beta: Vec<f32>,
    /// `[D_IN, D_HIDDEN]`.
    w1: Vec<T>,
    b1: Vec<f32>,
    /// `[D_HIDDEN, D_OUT]`.
    w2: Vec<T>,
    b2: Vec<f32>,
}

impl Model<f32> {
    fn new() -> Model<f32> {
        let mut rng = Xorshift32(WEIGHT_SEED);
        let gamma = rng.fill(D_IN, 1.0, 0.25);
        let beta = rng.fill(D_IN, 0.0, 0.1);
        let w1 = rng.fill(D_IN * D_HIDDEN, 0.0, (3.0 / D_IN as f32).sqrt());
        let b1 = rng.fill(D_HIDDEN, 0.0, 0.1);
        let w2 = rng.fill(D_HIDDEN * D_OUT, 0.0, (3.0 / D_HIDDEN as f32).sqrt());
        let b2 = rng.fill(D_OUT, 0.0, 0.1);
        Model {
            gamma,
            beta,
            w1,
            b1,
            w2,
            b2,
        }
    }

    /// The same model with the GEMM weights in `T`.
    fn to<T: GemmInput>(&self) -> Model<T> {
        Model {
            gamma: self.gamma.clone(),
            beta: self.beta.clone(),
            w1: T::convert(&self.w1).into_owned(),
            b1: self.b1.clone(),
            w2: T::convert(&self.w2).into_owned(),
            b2: self.b2.clone(),
        }
    }
}

/// `batch` input rows, with a mean and spread of their own (layer norm has
/// something to remove).
fn inputs(batch: usize) -> Vec<f32> {
    let mut rng = Xorshift32(INPUT_SEED);
    rng.fill(batch * D_IN, 0.5, 2.0)
}

/// A GEMM input type, and how the guest turns `f32`s into it.
trait GemmInput: Element + Clone {
    /// `values` in this type: borrowed when it is `f32`, rounded otherwise.
    fn convert(values: &[f32]) -> Cow<'_, [Self]>;
}

impl GemmInput for f32 {
    fn convert(values: &[f32]) -> Cow<'_, [f32]> {
        Cow::Borrowed(values)
    }
}

impl GemmInput for Bf16 {
    fn convert(values: &[f32]) -> Cow<'_, [Bf16]> {
        Cow::Owned(values.iter().map(|&v| Bf16::from_f32(v)).collect())
    }
}

/// The forward pass on the built-in ops, GEMM inputs in `T`; the
/// probabilities `[batch, D_OUT]`.
fn forward<T: GemmInput>(model: &Model<T>, x: &[f32], batch: usize) -> Result<Vec<f32>, Error> {
    // NaN in every output: an element an op did not write fails the check.
    let out = |n: usize| vec![f32::NAN; batch * n];

    let mut h0 = out(D_IN);
    tensor::layernorm(
        Tensor::new(x, &[batch, D_IN])?,
        Tensor::new(&model.gamma, &[D_IN])?,
        Tensor::new(&model.beta, &[D_IN])?,
        TensorMut::new(&mut h0, &[batch, D_IN])?,
        EPS,
    )
    .run()?;

    let h0 = T::convert(&h0);
    let mut z1 = out(D_HIDDEN);
    tensor::gemm(
        Tensor::new(&h0, &[batch, D_IN])?,
        Tensor::new(&model.w1, &[D_IN, D_HIDDEN])?,
        TensorMut::new(&mut z1, &[batch, D_HIDDEN])?,
    )
    .run()?;
    let mut a1 = out(D_HIDDEN);
    tensor::add(
        Tensor::new(&z1, &[batch, D_HIDDEN])?,
        Tensor::new(&model.b1, &[D_HIDDEN])?,
        TensorMut::new(&mut a1, &[batch, D_HIDDEN])?,
    )
    .run()?;
    let mut g = out(D_HIDDEN);
    tensor::gelu(
        Tensor::new(&a1, &[batch, D_HIDDEN])?,
        TensorMut::new(&mut g, &[batch, D_HIDDEN])?,
    )
    .run()?;

    let g = T::convert(&g);
    let mut z2 = out(D_OUT);
    tensor::gemm(
        Tensor::new(&g, &[batch, D_HIDDEN])?,
        Tensor::new(&model.w2, &[D_HIDDEN, D_OUT])?,
        TensorMut::new(&mut z2, &[batch, D_OUT])?,
    )
    .run()?;
    let mut logits = out(D_OUT);
    tensor::add(
        Tensor::new(&z2, &[batch, D_OUT])?,
        Tensor::new(&model.b2, &[D_OUT])?,
        TensorMut::new(&mut logits, &[batch, D_OUT])?,
    )
    .run()?;
    let mut p = out(D_OUT);
    tensor::softmax(
        Tensor::new(&logits, &[batch, D_OUT])?,
        TensorMut::new(&mut p, &[batch, D_OUT])?,
    )
    .run()?;
    Ok(p)
}

/// `erf` in `f32` (Abramowitz and Stegun 7.1.26, absolute error below
/// 1.5e-7: far inside the tolerances): Rust's std has no `erf`.
fn erf(x: f32) -> f32 {
    const P: f32 = 0.327_591_1;
    const A: [f32; 5] = [
        0.254_829_6,
        -0.284_496_74,
        1.421_413_7,
        -1.453_152,
        1.061_405_4,
    ];
    let t = 1.0 / (1.0 + P * x.abs());
    let poly = t * (A[0] + t * (A[1] + t * (A[2] + t * (A[3] + t * A[4]))));
    let y = 1.0 - poly * (-x * x).exp();
    if x < 0.0 { -y } else { y }
}

/// The exact GELU, `0.5 x (1 + erf(x / sqrt 2))`, as the op computes it.
fn gelu(x: f32) -> f32 {
    0.5 * x * (1.0 + erf(x * core::f32::consts::FRAC_1_SQRT_2))
}

/// The forward pass in plain scalar `f32`, row by row; the probabilities.
fn reference(model: &Model<f32>, x: &[f32], batch: usize) -> Vec<f32> {
    let mut p = vec![0.0f32; batch * D_OUT];
    let mut h0 = [0.0f32; D_IN];
    let mut g = [0.0f32; D_HIDDEN];
    for (row, x) in x.chunks_exact(D_IN).take(batch).enumerate() {
        let mean = x.iter().sum::<f32>() / D_IN as f32;
        let var = x.iter().map(|&v| (v - mean) * (v - mean)).sum::<f32>() / D_IN as f32;
        let inv = 1.0 / (var + EPS).sqrt();
        for k in 0..D_IN {
            h0[k] = (x[k] - mean) * inv * model.gamma[k] + model.beta[k];
        }

        g.copy_from_slice(&model.b1);
        for (k, w) in model.w1.chunks_exact(D_HIDDEN).enumerate() {
            for (acc, &w) in g.iter_mut().zip(w) {
                *acc += h0[k] * w;
            }
        }
        for v in &mut g {
            *v = gelu(*v);
        }

        let mut logits = [0.0f32; D_OUT];
        logits.copy_from_slice(&model.b2);
        for (j, w) in model.w2.chunks_exact(D_OUT).enumerate() {
            for (acc, &w) in logits.iter_mut().zip(w) {
                *acc += g[j] * w;
            }
        }
        let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let mut sum = 0.0f32;
        for v in &mut logits {
            *v = (*v - max).exp();
            sum += *v;
        }
        for (out, v) in p[row * D_OUT..(row + 1) * D_OUT].iter_mut().zip(logits) {
            *out = v / sum;
        }
    }
    p
}

/// Compares the op's probabilities with the reference's; records the
/// largest difference for `max_error()`.
fn check(got: &[f32], want: &[f32], tolerance: f32) -> Result<(), Failure> {
    if !got.iter().all(|v| v.is_finite()) {
        return Err(Failure::NotFinite);
    }
    let max_error = got
        .iter()
        .zip(want)
        .map(|(g, w)| (g - w).abs())
        .fold(0.0f32, f32::max);
    MAX_ERROR.store(max_error.to_bits(), Ordering::Relaxed);
    if max_error > tolerance {
        return Err(Failure::Tolerance);
    }
    let row_sum_ok = got
        .chunks_exact(D_OUT)
        .all(|row| (row.iter().map(|&v| f64::from(v)).sum::<f64>() - 1.0).abs() <= TOL_ROW_SUM);
    if !row_sum_ok {
        return Err(Failure::RowSum);
    }
    Ok(())
}

/// One run: the forward pass with GEMM inputs in `T`, checked.
fn run_with<T: GemmInput>(batch: i32, tolerance: f32) -> Result<(), Failure> {
    let batch = usize::try_from(batch)
        .ok()
        .filter(|b| (1..=MAX_BATCH).contains(b))
        .ok_or(Failure::Batch)?;
    let model = Model::new();
    let x = inputs(batch);
    let got = forward(&model.to::<T>(), &x, batch)?;
    let want = reference(&model, &x, batch);
    check(&got, &want, tolerance)
}

fn status(result: Result<(), Failure>) -> i32 {
    result.map_or_else(|f| f.code(), |()| 0)
}

/// The forward pass with f32 GEMMs, checked. See the crate docs.
#[unsafe(no_mangle)]
pub extern "C" fn run(batch: i32) -> i32 {
    status(run_with::<f32>(batch, TOL_F32))
}

/// The forward pass with bf16 GEMM inputs, checked against the f32
/// reference. See the crate docs.
#[unsafe(no_mangle)]
pub extern "C" fn run_bf16(batch: i32) -> i32 {
    status(run_with::<Bf16>(batch, TOL_BF16))
}

/// The largest absolute difference from the reference that the last run
/// saw; NaN before any run has compared.
#[unsafe(no_mangle)]
pub extern "C" fn max_error() -> f32 {
    f32::from_bits(MAX_ERROR.load(Ordering::Relaxed))
}
