//! The kernels, each an `extern "C" fn` the host makes a GPU kernel of,
//! and each a thin shell around a plain Rust function of one thread's work
//! (`*_at`). The kernel finds its thread ([`kernel::global_id_x`]) and turns
//! its pointer parameters into slices; the guest's CPU reference
//! (`lib.rs`) calls the same `*_at` function in a loop over thread ids, so
//! the two must agree bit for bit.
//!
//! Many threads run a kernel at once over the same slices: inputs are only
//! read (shared slices, [`input`]), and each thread takes a `&mut` only to
//! the output elements it alone writes ([`output`]).

use tensorwasm_guest::atomic::{self, AtomicF32, AtomicI32, AtomicU32};
use tensorwasm_guest::kernel;

/// A kernel's read-only view of `len` elements at `ptr`.
///
/// # Safety
///
/// `ptr .. ptr + len` holds initialised `T`s that nothing writes while the
/// kernel runs (the launch passed it from a shared slice of that length).
pub(crate) unsafe fn input<'a, T>(ptr: *const T, len: u32) -> &'a [T] {
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
pub(crate) unsafe fn output<'a, T>(
    ptr: *mut T,
    len: u32,
    start: usize,
    count: usize,
) -> &'a mut [T] {
    let end = start.checked_add(count).expect("range overflows");
    assert!(end <= len as usize, "output range past the slice");
    // SAFETY: the range is inside the slice (checked above), which the
    // launch borrows exclusively, and no other thread writes it.
    unsafe { core::slice::from_raw_parts_mut(ptr.add(start), count) }
}

/// The launch's type of [`saxpy`].
pub type Saxpy = extern "C" fn(u32, f32, *const f32, u32, u32, *mut f32, u32, u32);

/// Strided SAXPY, `y[i * incy] = a * x[i * incx] + y[i * incy]` for
/// `i < n` (BLAS's `saxpy`): thread `i` does element `i`. `x` has `x_len`
/// elements, `y` `y_len`; an index past either traps. `incy` 0 (every
/// thread would write one element) does nothing.
pub extern "C" fn saxpy(
    n: u32,
    a: f32,
    x: *const f32,
    x_len: u32,
    incx: u32,
    y: *mut f32,
    y_len: u32,
    incy: u32,
) {
    let i = kernel::global_id_x() as usize;
    if i >= n as usize || incy == 0 {
        return;
    }
    // SAFETY: the launch passes `x` from a shared slice of `x_len`
    // elements and `y` from an exclusive one of `y_len`; thread `i` alone
    // writes element `i * incy` (incy > 0 and distinct `i`).
    let (x, y) = unsafe { (input(x, x_len), output(y, y_len, i * incy as usize, 1)) };
    saxpy_at(i, a, x, incx as usize, &mut y[0]);
}

/// One thread of [`saxpy`]: `y += a * x[i * incx]` (`x` bounds-checked).
pub fn saxpy_at(i: usize, a: f32, x: &[f32], incx: usize, y: &mut f32) {
    *y += a * x[i * incx];
}

/// The launch's type of [`saxpy_unchecked`].
pub type SaxpyUnchecked = extern "C" fn(u32, f32, *const f32, *mut f32);

/// SAXPY over contiguous vectors with no check that can panic: the form
/// the translator takes without a shadow stack or a panic path. Exported,
/// so the guest names it by export name (`Kernel::from_export`).
///
/// The caller must pass `x` and `y` of at least `n` elements.
#[unsafe(no_mangle)]
pub extern "C" fn saxpy_unchecked(n: u32, a: f32, x: *const f32, y: *mut f32) {
    let i = kernel::global_id_x();
    if i < n {
        let i = i as usize;
        // SAFETY: `x` and `y` have at least `n > i` elements (the caller's
        // contract), `y` borrowed exclusively, and thread `i` alone writes
        // element `i`.
        unsafe { *y.add(i) = a * *x.add(i) + *y.add(i) };
    }
}

/// The launch's type of [`matmul`].
pub type Matmul = extern "C" fn(*const f32, *const f32, *mut f32, u32, u32, u32);

/// Naive `C [m, n] = A [m, k] @ B [k, n]`, row-major: thread `t` computes
/// `C[t / n][t % n]` (a division and a remainder by a parameter, so the
/// kernel carries Rust's division-by-zero check).
pub extern "C" fn matmul(a: *const f32, b: *const f32, c: *mut f32, m: u32, k: u32, n: u32) {
    let t = kernel::global_id_x();
    if t >= m.wrapping_mul(n) {
        return;
    }
    // SAFETY: the launch passes A (m * k elements) and B (k * n) from
    // shared slices, C (m * n) from an exclusive one; thread `t` alone
    // writes element `t`.
    let (a, b, c) = unsafe {
        (
            input(a, m * k),
            input(b, k * n),
            output(c, m * n, t as usize, 1),
        )
    };
    c[0] = matmul_at(t, a, b, k, n);
}

/// One element of [`matmul`]: `C[t / n][t % n]`, summed over `p` in order.
pub fn matmul_at(t: u32, a: &[f32], b: &[f32], k: u32, n: u32) -> f32 {
    let (row, col) = ((t / n) as usize, (t % n) as usize);
    let (k, n) = (k as usize, n as usize);
    let mut sum = 0.0f32;
    for p in 0..k {
        sum += a[row * k + p] * b[p * n + col];
    }
    sum
}

/// Partial sums per row in [`row_sums`].
pub const LANES: usize = 8;

/// The launch's type of [`row_sums`].
pub type RowSums = extern "C" fn(*const f32, u32, u32, *mut f32);

/// `out[r] = sum of row r` of `x [rows, cols]`: thread `r` sums row `r`
/// into [`LANES`] partial sums in a local array indexed by a value known
/// only at run time (so the array lives in the thread's stack frame), then
/// adds them pairwise.
pub extern "C" fn row_sums(x: *const f32, rows: u32, cols: u32, out: *mut f32) {
    let r = kernel::global_id_x();
    if r >= rows {
        return;
    }
    // SAFETY: the launch passes `x` (rows * cols elements) from a shared
    // slice and `out` (rows) from an exclusive one; thread `r` alone writes
    // element `r`.
    let (x, out) = unsafe { (input(x, rows * cols), output(out, rows, r as usize, 1)) };
    out[0] = row_sum_at(r as usize, x, cols as usize);
}

/// One row of [`row_sums`]: element `j` goes to lane `(j + r) % LANES`.
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

/// The launch's type of [`pad_rows`].
pub type PadRows = extern "C" fn(*const f32, u32, u32, *mut f32, u32, *mut u8);

/// Copies each row of `src [rows, src_cols]` into the start of the same
/// row of `dst [rows, dst_cols]` and zero-fills the rest of it, and marks
/// which elements are data in `valid [rows, dst_cols]` (1, else 0).
/// `copy_from_slice` is a Wasm `memory.copy`; `fill` on the `u8` mask is a
/// `memory.fill` (on the `f32` row rustc emits a store loop). Thread `r`
/// does row `r`; `dst_cols < src_cols` traps.
pub extern "C" fn pad_rows(
    src: *const f32,
    rows: u32,
    src_cols: u32,
    dst: *mut f32,
    dst_cols: u32,
    valid: *mut u8,
) {
    let r = kernel::global_id_x();
    if r >= rows {
        return;
    }
    let (ri, dc) = (r as usize, dst_cols as usize);
    // SAFETY: the launch passes `src` (rows * src_cols elements) from a
    // shared slice, `dst` and `valid` (rows * dst_cols each) from exclusive
    // ones; thread `r` alone writes row `r` of `dst` and of `valid`.
    let (src, dst_row, valid_row) = unsafe {
        (
            input(src, rows * src_cols),
            output(dst, rows * dst_cols, ri * dc, dc),
            output(valid, rows * dst_cols, ri * dc, dc),
        )
    };
    pad_row_at(ri, src, src_cols as usize, dst_row, valid_row);
}

/// One row of [`pad_rows`].
pub fn pad_row_at(
    r: usize,
    src: &[f32],
    src_cols: usize,
    dst_row: &mut [f32],
    valid_row: &mut [u8],
) {
    let from = &src[r * src_cols..(r + 1) * src_cols];
    dst_row[..src_cols].copy_from_slice(from);
    dst_row[src_cols..].fill(0.0);
    valid_row[..src_cols].fill(1);
    valid_row[src_cols..].fill(0);
}

/// An activation function, called through a `dyn` pointer.
pub trait Activation: Sync {
    /// The activation of `x`.
    fn apply(&self, x: f32) -> f32;
}

/// `max(x, 0)`.
struct Relu;

impl Activation for Relu {
    fn apply(&self, x: f32) -> f32 {
        if x > 0.0 { x } else { 0.0 }
    }
}

/// `x` above 0, `slope * x` below.
struct LeakyRelu {
    slope: f32,
}

impl Activation for LeakyRelu {
    fn apply(&self, x: f32) -> f32 {
        if x > 0.0 { x } else { self.slope * x }
    }
}

/// `x` clamped to `[lo, hi]`.
struct HardTanh {
    lo: f32,
    hi: f32,
}

impl Activation for HardTanh {
    fn apply(&self, x: f32) -> f32 {
        x.clamp(self.lo, self.hi)
    }
}

/// `x / (1 + |x|)`.
struct Softsign;

impl Activation for Softsign {
    fn apply(&self, x: f32) -> f32 {
        x / (1.0 + x.abs())
    }
}

/// The activations [`activate`] chooses from by its `kind` argument: a
/// table of trait objects in the guest's memory, so the call is a Wasm
/// `call_indirect` through the vtable.
pub static ACTIVATIONS: [&dyn Activation; 4] = [
    &Relu,
    &LeakyRelu { slope: 0.125 },
    &HardTanh { lo: -0.5, hi: 0.75 },
    &Softsign,
];

/// The launch's type of [`activate`].
pub type Activate = extern "C" fn(u32, *const f32, *mut f32, u32);

/// `y[i] = ACTIVATIONS[kind].apply(x[i])` for `i < n`; a `kind` past the
/// table traps.
pub extern "C" fn activate(kind: u32, x: *const f32, y: *mut f32, n: u32) {
    let i = kernel::global_id_x();
    if i >= n {
        return;
    }
    // SAFETY: the launch passes `x` (n elements) from a shared slice and
    // `y` (n) from an exclusive one; thread `i` alone writes element `i`.
    let (x, y) = unsafe { (input(x, n), output(y, n, i as usize, 1)) };
    y[0] = activate_at(i as usize, ACTIVATIONS[kind as usize], x);
}

/// One element of [`activate`].
pub fn activate_at(i: usize, act: &dyn Activation, x: &[f32]) -> f32 {
    act.apply(x[i])
}

/// The launch's type of [`gather`].
pub type Gather = extern "C" fn(*const f32, u32, *const u32, *mut f32, u32);

/// `out[i] = x[idx[i]]` for `i < n`, with Rust's bounds check on `x`: an
/// index past `x` panics, which in a kernel is the panic handler's
/// `unreachable`, a trap of the thread that reads it.
pub extern "C" fn gather(x: *const f32, x_len: u32, idx: *const u32, out: *mut f32, n: u32) {
    let i = kernel::global_id_x();
    if i >= n {
        return;
    }
    // SAFETY: the launch passes `x` (x_len elements) and `idx` (n) from
    // shared slices and `out` (n) from an exclusive one; thread `i` alone
    // writes element `i`.
    let (x, idx, out) = unsafe {
        (
            input(x, x_len),
            input(idx, n),
            output(out, n, i as usize, 1),
        )
    };
    out[0] = x[idx[i as usize] as usize];
}

/// A view of `len` elements at `ptr` that every thread of a launch updates
/// atomically.
///
/// # Safety
///
/// `ptr .. ptr + len` holds initialised `T`s borrowed exclusively by the
/// launch (passed from a `&mut` slice of that length), which its threads
/// touch only through `tensorwasm_guest::atomic` while it runs.
pub(crate) unsafe fn atomic_view<'a, T>(ptr: *mut T, len: u32) -> &'a [T] {
    // SAFETY: as the caller promises; `T` is an atomic type of the same
    // layout as the slice's elements.
    unsafe { core::slice::from_raw_parts(ptr.cast_const(), len as usize) }
}

/// The bins of [`histogram`].
pub const BINS: u32 = 256;

/// The launch's type of [`histogram`].
pub type Histogram = extern "C" fn(*const u32, u32, *mut u32);

/// `bins[values[i] % 256] += 1` for `i < n`, each an atomic add on the
/// guest's memory (many threads hit each bin).
pub extern "C" fn histogram(values: *const u32, n: u32, bins: *mut u32) {
    let i = kernel::global_id_x();
    if i >= n {
        return;
    }
    // SAFETY: the launch passes `values` (n) from a shared slice and `bins`
    // (BINS) from an exclusive one, updated only atomically here.
    let (values, bins) = unsafe {
        (
            input(values, n),
            atomic_view(bins.cast::<AtomicU32>(), BINS),
        )
    };
    atomic::fetch_add_u32(&bins[(values[i as usize] % BINS) as usize], 1);
}

/// The launch's type of [`atomic_dot`].
pub type AtomicDot = extern "C" fn(*const f32, *const f32, u32, *mut f32, *mut i32);

/// `out[0] += x[i] * y[i]` (an `f32` atomic add) and `count[0] += 1` for
/// `i < n`. The inputs are small integers, so every order of the adds
/// gives the same sum.
pub extern "C" fn atomic_dot(x: *const f32, y: *const f32, n: u32, out: *mut f32, count: *mut i32) {
    let i = kernel::global_id_x() as usize;
    if i >= n as usize {
        return;
    }
    // SAFETY: the launch passes `x` and `y` (n each) from shared slices and
    // `out` and `count` (1 each) from exclusive ones, updated only
    // atomically here.
    let (x, y, out, count) = unsafe {
        (
            input(x, n),
            input(y, n),
            atomic_view(out.cast::<AtomicF32>(), 1),
            atomic_view(count.cast::<AtomicI32>(), 1),
        )
    };
    out[0].fetch_add(x[i] * y[i]);
    atomic::fetch_add_i32(&count[0], 1);
}
