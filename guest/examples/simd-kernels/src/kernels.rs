//! The kernels, each compiled with `#[target_feature(enable =
//! "simd128")]` (as a whole crate is with `-C target-feature=+simd128`)
//! at opt-level 3, so LLVM vectorises its loop over one row into `v128`
//! code (`f32x4`, `f64x2`, `i32x4` lanes, byte lanes widened), which the
//! host lowers lane by lane (`docs/kernels.md`, "SIMD"). Thread `r` does
//! row `r`. The CPU reference (`lib.rs`) runs the same per-row function
//! built without the feature (scalar code); every element is computed by
//! the same arithmetic either way (the loops have no float reduction for
//! LLVM to reorder), so the two agree bit for bit.

use tensorwasm_guest::kernel;

/// A kernel's read-only view of `len` elements at `ptr`.
///
/// # Safety
///
/// `ptr .. ptr + len` holds initialised `T`s that nothing writes while the
/// kernel runs (the launch passed it from a shared slice of that length).
unsafe fn input<'a, T>(ptr: *const T, len: u32) -> &'a [T] {
    // SAFETY: as the caller promises.
    unsafe { core::slice::from_raw_parts(ptr, len as usize) }
}

/// Elements `start .. start + count` of the `len` elements at `ptr`, for
/// this thread alone to write. Panics (a trap in a kernel) when they do not
/// fit in `len`.
///
/// # Safety
///
/// `ptr .. ptr + len` holds initialised `T`s borrowed exclusively by the
/// launch (passed from a `&mut` slice of that length), and no other thread
/// of the launch takes an overlapping range.
unsafe fn output<'a, T>(ptr: *mut T, len: u32, start: usize, count: usize) -> &'a mut [T] {
    let end = start.checked_add(count).expect("range overflows");
    assert!(end <= len as usize, "output range past the slice");
    // SAFETY: the range is inside the slice (checked above), which the
    // launch borrows exclusively, and no other thread writes it.
    unsafe { core::slice::from_raw_parts_mut(ptr.add(start), count) }
}

/// The launch's type of [`saxpy_rows`].
pub type SaxpyRows = extern "C" fn(f32, *const f32, *mut f32, u32, u32);

/// `y[r, j] = a * x[r, j] + y[r, j]` for the `cols` elements of row `r`.
#[target_feature(enable = "simd128")]
pub extern "C" fn saxpy_rows(a: f32, x: *const f32, y: *mut f32, rows: u32, cols: u32) {
    let r = kernel::global_id_x();
    if r >= rows {
        return;
    }
    let at = (r * cols) as usize;
    // SAFETY: the launch passes `x` and `y` (rows * cols elements each)
    // from a shared and an exclusive slice; thread `r` alone writes row r.
    let (x, y) = unsafe {
        (
            input(x, rows * cols),
            output(y, rows * cols, at, cols as usize),
        )
    };
    saxpy_row(a, &x[at..at + cols as usize], y);
}

/// One row of [`saxpy_rows`].
#[inline(always)]
pub fn saxpy_row(a: f32, x: &[f32], y: &mut [f32]) {
    for (y, x) in y.iter_mut().zip(x) {
        *y += a * x;
    }
}

/// The launch's type of [`growth_rows`].
pub type GrowthRows = extern "C" fn(f64, f64, f64, *const f64, *mut f64, u32, u32);

/// One step of a geometric Brownian motion in `f64` (a Black-Scholes
/// path), discounted: `s[r, j] = s[r, j] * (drift + vol * z[r, j]) /
/// discount`.
#[target_feature(enable = "simd128")]
pub extern "C" fn growth_rows(
    drift: f64,
    vol: f64,
    discount: f64,
    z: *const f64,
    s: *mut f64,
    rows: u32,
    cols: u32,
) {
    let r = kernel::global_id_x();
    if r >= rows {
        return;
    }
    let at = (r * cols) as usize;
    // SAFETY: as in `saxpy_rows`.
    let (z, s) = unsafe {
        (
            input(z, rows * cols),
            output(s, rows * cols, at, cols as usize),
        )
    };
    growth_row(drift, vol, discount, &z[at..at + cols as usize], s);
}

/// One row of [`growth_rows`].
#[inline(always)]
pub fn growth_row(drift: f64, vol: f64, discount: f64, z: &[f64], s: &mut [f64]) {
    for (s, z) in s.iter_mut().zip(z) {
        *s = *s * (drift + vol * z) / discount;
    }
}

/// The launch's type of [`xorshift_rows`].
pub type XorshiftRows = extern "C" fn(*mut u32, u32, u32, u32);

/// `rounds` xorshift32 steps on every element of row `r` (each element
/// its own generator's state).
#[target_feature(enable = "simd128")]
pub extern "C" fn xorshift_rows(state: *mut u32, rows: u32, cols: u32, rounds: u32) {
    let r = kernel::global_id_x();
    if r >= rows {
        return;
    }
    let at = (r * cols) as usize;
    // SAFETY: the launch passes `state` (rows * cols) from an exclusive
    // slice; thread `r` alone writes row r.
    let state = unsafe { output(state, rows * cols, at, cols as usize) };
    xorshift_row(state, rounds);
}

/// One row of [`xorshift_rows`].
#[inline(always)]
pub fn xorshift_row(state: &mut [u32], rounds: u32) {
    // Rounds outside, elements inside: the inner loop is the one LLVM
    // vectorises.
    for _ in 0..rounds {
        for x in state.iter_mut() {
            *x ^= *x << 13;
            *x ^= *x >> 17;
            *x ^= *x << 5;
        }
    }
}

/// The launch's type of [`byte_sums`].
pub type ByteSums = extern "C" fn(*const u8, u32, u32, *mut u32);

/// `out[r]` = the sum of the `cols` bytes of row `r` (an integer
/// reduction LLVM vectorises with widening lanes).
#[target_feature(enable = "simd128")]
pub extern "C" fn byte_sums(x: *const u8, rows: u32, cols: u32, out: *mut u32) {
    let r = kernel::global_id_x();
    if r >= rows {
        return;
    }
    let at = (r * cols) as usize;
    // SAFETY: the launch passes `x` (rows * cols) from a shared slice and
    // `out` (rows) from an exclusive one; thread `r` alone writes out[r].
    let (x, out) = unsafe { (input(x, rows * cols), output(out, rows, r as usize, 1)) };
    out[0] = byte_sum(&x[at..at + cols as usize]);
}

/// One row of [`byte_sums`].
#[inline(always)]
pub fn byte_sum(row: &[u8]) -> u32 {
    row.iter().map(|&b| u32::from(b)).sum()
}

/// Partial sums per row in [`row_sums`].
pub const LANES: usize = 8;

/// The launch's type of [`row_sums`].
pub type RowSums = extern "C" fn(*const f32, u32, u32, *mut f32);

/// `out[r]` = the sum of row `r`, into [`LANES`] partial sums in a local
/// array indexed by a value known only at run time (so the array lives in
/// the thread's stack frame), then added pairwise: the array is cleared
/// and the halves added with `v128` loads and stores in the frame.
#[target_feature(enable = "simd128")]
pub extern "C" fn row_sums(x: *const f32, rows: u32, cols: u32, out: *mut f32) {
    let r = kernel::global_id_x();
    if r >= rows {
        return;
    }
    // SAFETY: the launch passes `x` (rows * cols) from a shared slice and
    // `out` (rows) from an exclusive one; thread `r` alone writes out[r].
    let (x, out) = unsafe { (input(x, rows * cols), output(out, rows, r as usize, 1)) };
    out[0] = row_sum_at(r as usize, x, cols as usize);
}

/// One row of [`row_sums`]: element `j` goes to lane `(j + r) % LANES`.
#[inline(always)]
pub fn row_sum_at(r: usize, x: &[f32], cols: usize) -> f32 {
    let row = &x[r * cols..(r + 1) * cols];
    let mut lanes = [0.0f32; LANES];
    for (j, v) in row.iter().enumerate() {
        lanes[(j + r) % LANES] += v;
    }
    let mut width = LANES;
    while width > 1 {
        width /= 2;
        for l in 0..width {
            lanes[l] += lanes[l + width];
        }
    }
    lanes[0]
}
