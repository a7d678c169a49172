//! Example guest: kernels built for Wasm SIMD. Each export runs one of
//! the guest's own `extern "C" fn`s (`kernels`, compiled with `simd128`
//! at opt-level 3, so LLVM turned its loop into `v128` code) as a kernel
//! over random rows and checks every element against the same Rust built
//! without SIMD, run on the guest's CPU:
//!
//! | export | kernel | SIMD it is made of |
//! | --- | --- | --- |
//! | `run_simd_kernels` | `saxpy_rows`, `growth_rows`, `xorshift_rows`, `byte_sums`, `row_sums` | `f32x4` mul/add, `f64x2` mul/add/div, `i32x4` shifts and xors, byte lanes widened and added; v128 loads and stores, in the thread's stack frame too (`row_sums`' array of partial sums) |
//!
//! It returns 0 when every element matched bit for bit, `1_000_000 * k +
//! i + 1` for the first element `i` of kernel `k` that did not, or minus
//! the errno when a `wasi_cuda` call failed.

#![cfg_attr(not(test), no_std)]

extern crate alloc;

mod kernels;
#[cfg(not(test))]
#[path = "../../rust-kernels/src/runtime.rs"]
mod runtime;

use alloc::vec::Vec;

use tensorwasm_guest::{Error, Kernel};

/// Threads per block.
const BLOCK: u32 = 64;

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

    /// Uniform in `[-1, 1)`, never 0.
    fn next_f32(&mut self) -> f32 {
        let v = (self.next_u32() >> 8) as f32 / (1 << 23) as f32 - 1.0;
        if v == 0.0 { 0.5 } else { v }
    }
}

fn grid(threads: u32) -> u32 {
    threads.div_ceil(BLOCK)
}

/// The first `i` where `got[i]` is not bit for bit `want[i]`.
fn first_mismatch<T: Copy + PartialEq>(got: &[T], want: &[T], bits: fn(T) -> u64) -> Option<usize> {
    if got.len() != want.len() {
        return Some(got.len().min(want.len()));
    }
    (0..got.len()).find(|&i| bits(got[i]) != bits(want[i]))
}

/// One kernel's check, from its seed: the first mismatch, if any.
type Check = fn(u32) -> Result<Option<usize>, Error>;

/// Every kernel of `kernels`, checked in turn.
#[unsafe(no_mangle)]
pub extern "C" fn run_simd_kernels() -> i32 {
    let checks: [Check; 5] = [saxpy, growth, xorshift, byte_sums, row_sums];
    for (k, check) in checks.into_iter().enumerate() {
        match check(0x5eed_0100 + k as u32) {
            Ok(None) => {}
            Ok(Some(i)) => return i32::try_from(1_000_000 * k + i + 1).unwrap_or(i32::MAX),
            Err(e) => return e.negative_errno(),
        }
    }
    0
}

/// `f32` SAXPY over `[29, 67]`.
fn saxpy(seed: u32) -> Result<Option<usize>, Error> {
    let (rows, cols) = (29u32, 67u32);
    let mut rng = Xorshift32(seed);
    let a = rng.next_f32();
    let x: Vec<f32> = (0..rows * cols).map(|_| rng.next_f32()).collect();
    let mut y: Vec<f32> = (0..rows * cols).map(|_| rng.next_f32()).collect();
    let mut want = y.clone();
    for r in 0..rows as usize {
        let row = r * cols as usize..(r + 1) * cols as usize;
        kernels::saxpy_row(a, &x[row.clone()], &mut want[row]);
    }
    let k = Kernel::<kernels::SaxpyRows>::from_fn(kernels::saxpy_rows)?;
    k.launch(grid(rows), BLOCK, (a, &x, &mut y, rows, cols))
        .run()?;
    Ok(first_mismatch(&y, &want, |v| u64::from(v.to_bits())))
}

/// An `f64` Black-Scholes step over `[23, 41]`.
fn growth(seed: u32) -> Result<Option<usize>, Error> {
    let (rows, cols) = (23u32, 41u32);
    let mut rng = Xorshift32(seed);
    let z: Vec<f64> = (0..rows * cols)
        .map(|_| f64::from(rng.next_f32()))
        .collect();
    let mut s: Vec<f64> = (0..rows * cols)
        .map(|_| 100.0 + 10.0 * f64::from(rng.next_f32()))
        .collect();
    let (drift, vol, discount) = (1.0001, 0.02, 1.00003);
    let mut want = s.clone();
    for r in 0..rows as usize {
        let row = r * cols as usize..(r + 1) * cols as usize;
        kernels::growth_row(drift, vol, discount, &z[row.clone()], &mut want[row]);
    }
    let k = Kernel::<kernels::GrowthRows>::from_fn(kernels::growth_rows)?;
    k.launch(
        grid(rows),
        BLOCK,
        (drift, vol, discount, &z, &mut s, rows, cols),
    )
    .run()?;
    Ok(first_mismatch(&s, &want, f64::to_bits))
}

/// Seven xorshift rounds on `[31, 53]` states.
fn xorshift(seed: u32) -> Result<Option<usize>, Error> {
    let (rows, cols, rounds) = (31u32, 53u32, 7u32);
    let mut rng = Xorshift32(seed);
    let mut state: Vec<u32> = (0..rows * cols).map(|_| rng.next_u32()).collect();
    let mut want = state.clone();
    for r in 0..rows as usize {
        kernels::xorshift_row(
            &mut want[r * cols as usize..(r + 1) * cols as usize],
            rounds,
        );
    }
    let k = Kernel::<kernels::XorshiftRows>::from_fn(kernels::xorshift_rows)?;
    k.launch(grid(rows), BLOCK, (&mut state, rows, cols, rounds))
        .run()?;
    Ok(first_mismatch(&state, &want, u64::from))
}

/// Byte sums of `[27, 259]`.
fn byte_sums(seed: u32) -> Result<Option<usize>, Error> {
    let (rows, cols) = (27u32, 259u32);
    let mut rng = Xorshift32(seed);
    let x: Vec<u8> = (0..rows * cols).map(|_| rng.next_u32() as u8).collect();
    let want: Vec<u32> = (0..rows as usize)
        .map(|r| kernels::byte_sum(&x[r * cols as usize..(r + 1) * cols as usize]))
        .collect();
    let mut out = alloc::vec![u32::MAX; rows as usize];
    let k = Kernel::<kernels::ByteSums>::from_fn(kernels::byte_sums)?;
    k.launch(grid(rows), BLOCK, (&x, rows, cols, &mut out))
        .run()?;
    Ok(first_mismatch(&out, &want, u64::from))
}

/// Row sums of `[45, 77]` on a stack array of partial sums.
fn row_sums(seed: u32) -> Result<Option<usize>, Error> {
    let (rows, cols) = (45u32, 77u32);
    let mut rng = Xorshift32(seed);
    let x: Vec<f32> = (0..rows * cols).map(|_| rng.next_f32()).collect();
    let want: Vec<f32> = (0..rows as usize)
        .map(|r| kernels::row_sum_at(r, &x, cols as usize))
        .collect();
    let mut out = alloc::vec![f32::NAN; rows as usize];
    let k = Kernel::<kernels::RowSums>::from_fn(kernels::row_sums)?;
    k.launch(grid(rows), BLOCK, (&x, rows, cols, &mut out))
        .run()?;
    Ok(first_mismatch(&out, &want, |v| u64::from(v.to_bits())))
}
