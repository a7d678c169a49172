//! The built-in tensor kernels (docs/tensor-ops.md) as host kernels for the
//! CPU driver: one function per PTX entry, taking that entry's exact
//! parameters and computing exactly the part of the output that the CUDA
//! block with the same `blockIdx` computes (the elementwise kernels: the
//! partition below). Arithmetic is f32 with f32
//! accumulation, as on the GPU (GELU alone evaluates its erf in f64, with
//! the oracle's: std has no f32 erf), so both drivers meet the same
//! tolerances (`tensorwasm_kernels::oracle`).
//!
//! Memory is touched only through [`Operand`]: each kernel first works out,
//! with checked arithmetic, the exact elements its block reads or writes of
//! each operand, and the driver must cover them (`CpuDriver::covers`), so
//! bad sizes fail the launch instead of touching host memory nobody owns.
//! Reads and writes are raw, unaligned copies: operands may be aligned only
//! to their element size (or less), and no reference into device memory is
//! ever made, so operands that overlap give wrong numbers (as they would on
//! the GPU) but nothing worse. Choosing kernels and geometry is
//! `tensorwasm_kernels::table`'s job; this file only runs blocks.
//!
//! Grids: 1-D kernels (reduce, softmax, layer norm, elementwise) work in
//! blocks with `blockIdx.y == blockIdx.z == 0` only; other blocks return.
//! A block of the `_rows` softmax and layer norm computes 8 consecutive
//! rows (a warp per row on the GPU), one of the `_cols` reductions a strip
//! of 32 neighbouring outputs.
//! The elementwise kernels split `n` into `gridDim.x` contiguous runs of
//! `ceil(n / gridDim.x)` elements, block `x` taking run `x` (see
//! [`elementwise_run`]): every element once, for any grid.

use std::{marker::PhantomData, mem::size_of, sync::Arc};

use tensorwasm_core::{DevicePtr, KernelParam};
use tensorwasm_cpu::{BlockContext, CpuDriver, HostKernelFn};
use tensorwasm_kernels::oracle::{bf16_to_f32, f16_to_f32, gelu_one, tf32_round};

/// A built-in's body: one block of one launch.
type BlockFn = fn(&Call<'_>, &BlockContext);

/// Every PTX entry point of docs/tensor-ops.md and its host kernel.
const KERNELS: [(&str, BlockFn); 21] = [
    ("tw_gemm_f32", gemm::<F32Input>),
    ("tw_gemm_tf32", gemm::<Tf32Input>),
    ("tw_gemm_bf16", gemm::<Bf16Input>),
    ("tw_gemm_f16", gemm::<F16Input>),
    ("tw_reduce_sum_f32", reduce::<SumReduce>),
    ("tw_reduce_max_f32", reduce::<MaxReduce>),
    ("tw_reduce_mean_f32", reduce::<MeanReduce>),
    ("tw_reduce_sum_cols_f32", reduce_cols::<SumReduce>),
    ("tw_reduce_max_cols_f32", reduce_cols::<MaxReduce>),
    ("tw_reduce_mean_cols_f32", reduce_cols::<MeanReduce>),
    ("tw_softmax_rows_f32", softmax::<ROWS_PER_BLOCK>),
    ("tw_softmax_f32", softmax::<1>),
    ("tw_softmax_wide_f32", softmax::<1>),
    ("tw_layernorm_rows_f32", layernorm::<ROWS_PER_BLOCK>),
    ("tw_layernorm_f32", layernorm::<1>),
    ("tw_layernorm_wide_f32", layernorm::<1>),
    ("tw_add_f32", broadcast::<AddOp>),
    ("tw_mul_f32", broadcast::<MulOp>),
    ("tw_relu_f32", unary::<ReluOp>),
    ("tw_gelu_f32", unary::<GeluOp>),
    ("tw_transpose_f32", transpose),
];

/// The built-in kernels for `driver`'s [`CpuDriver::host_module`], named by
/// their PTX entry points. Each holds the driver weakly (the driver keeps
/// its modules), so a launch after the driver is gone fails.
pub(crate) fn host_kernels(driver: &CpuDriver) -> Vec<(&'static str, Arc<HostKernelFn>)> {
    KERNELS
        .iter()
        .map(|&(name, body)| {
            let weak = driver.downgrade();
            let kernel: Arc<HostKernelFn> = Arc::new(move |block, params| {
                let Some(driver) = weak.upgrade() else {
                    panic!("{name}: the CPU driver is gone");
                };
                body(
                    &Call {
                        driver: &driver,
                        kernel: name,
                        params,
                    },
                    block,
                );
            });
            (name, kernel)
        })
        .collect()
}

// ---------------------------------------------------------------------------
// Parameters and operands
// ---------------------------------------------------------------------------

/// One block's call of a built-in: the driver, the entry's name (for
/// messages) and the launch's parameters.
struct Call<'a> {
    driver: &'a CpuDriver,
    kernel: &'static str,
    params: &'a [KernelParam],
}

impl Call<'_> {
    /// Checks the parameter count against the PTX signature.
    fn expect_params(&self, count: usize) {
        if self.params.len() != count {
            panic!(
                "{}: takes {count} parameters, got {}",
                self.kernel,
                self.params.len()
            );
        }
    }

    fn param(&self, n: usize) -> KernelParam {
        match self.params.get(n) {
            Some(&p) => p,
            None => panic!("{}: parameter {n} is missing", self.kernel),
        }
    }

    /// Parameter `n`, a pointer.
    fn ptr(&self, n: usize, name: &str) -> u64 {
        match self.param(n) {
            KernelParam::Ptr(p) => p.0,
            other => panic!("{}: {name} must be a pointer, got {other:?}", self.kernel),
        }
    }

    /// Parameter `n`, an `int`.
    fn int(&self, n: usize, name: &str) -> i32 {
        match self.param(n) {
            KernelParam::I32(v) => v,
            other => panic!("{}: {name} must be an int, got {other:?}", self.kernel),
        }
    }

    /// Parameter `n`, a `long long`.
    fn long(&self, n: usize, name: &str) -> i64 {
        match self.param(n) {
            KernelParam::I64(v) => v,
            other => panic!("{}: {name} must be a long long, got {other:?}", self.kernel),
        }
    }

    /// Parameter `n`, a `float`.
    fn float(&self, n: usize, name: &str) -> f32 {
        match self.param(n) {
            KernelParam::F32(v) => v,
            other => panic!("{}: {name} must be a float, got {other:?}", self.kernel),
        }
    }

    /// A size: at least 1.
    fn positive(&self, value: i64, name: &str) -> usize {
        match usize::try_from(value) {
            Ok(v) if v > 0 => v,
            _ => panic!("{}: {name} must be positive, got {value}", self.kernel),
        }
    }

    /// `int` parameter `n` as a size.
    fn dim(&self, n: usize, name: &str) -> usize {
        self.positive(i64::from(self.int(n, name)), name)
    }

    /// `long long` parameter `n` as a size.
    fn long_dim(&self, n: usize, name: &str) -> usize {
        self.positive(self.long(n, name), name)
    }

    /// An element count or index as an i64 offset.
    fn offset(&self, value: usize, what: &str) -> i64 {
        self.fits(i64::try_from(value).ok(), what)
    }

    /// A checked result, or a panic that names the kernel and what overflowed.
    fn fits<T>(&self, value: Option<T>, what: &str) -> T {
        match value {
            Some(v) => v,
            None => panic!("{}: {what} overflows", self.kernel),
        }
    }

    /// Elements `first .. first + count` of operand `name` at `base`,
    /// checked against the driver's live memory. `first` may be negative
    /// (a negative batch stride); the bytes must still be covered.
    fn operand<T: Element>(
        &self,
        name: &'static str,
        base: u64,
        first: i64,
        count: usize,
    ) -> Operand<T> {
        let size = size_of::<T>();
        let offset = first.checked_mul(size as i64);
        let start = offset.and_then(|o| base.checked_add_signed(o));
        let Some(start) = start.and_then(|s| usize::try_from(s).ok()) else {
            panic!("{}: {name}'s byte offset overflows", self.kernel);
        };
        let Some(bytes) = count.checked_mul(size) else {
            panic!("{}: {name}'s byte count overflows", self.kernel);
        };
        if count == 0 || !self.driver.covers(DevicePtr(start as u64), bytes) {
            panic!(
                "{}: {name}: {bytes} bytes at {start:#x} are outside the driver's live memory",
                self.kernel
            );
        }
        Operand {
            start,
            len: count,
            name,
            kernel: self.kernel,
            _element: PhantomData,
        }
    }
}

/// `rows` rows of `cols` elements, `ld` apart: the elements from the first
/// row's first to the last row's last.
fn rows_span(rows: usize, ld: usize, cols: usize) -> Option<usize> {
    (rows - 1).checked_mul(ld)?.checked_add(cols)
}

/// `a * b + c` in i64 with every step checked.
fn mul_add(a: i64, b: i64, c: i64) -> Option<i64> {
    a.checked_mul(b)?.checked_add(c)
}

/// An element type kernels copy to and from device memory.
///
/// # Safety
/// Every bit pattern of `size_of::<Self>()` bytes must be a valid value.
unsafe trait Element: Copy + Default {}

// SAFETY: every 32-bit pattern is an f32 (NaNs included).
unsafe impl Element for f32 {}
// SAFETY: every 16-bit pattern is a u16 (bf16 and f16 travel as u16 bits).
unsafe impl Element for u16 {}

/// Elements `0 .. len` of one operand as this block sees it, at host
/// address `start`. Made only by [`Call::operand`], after the driver
/// confirmed that all `len` elements lie in its live memory; every access
/// checks its index against `len`.
struct Operand<T> {
    start: usize,
    len: usize,
    name: &'static str,
    kernel: &'static str,
    _element: PhantomData<T>,
}

impl<T: Element> Operand<T> {
    /// The host address of element `at`, after checking that `at .. at +
    /// count` lies in the operand.
    fn address(&self, at: usize, count: usize) -> usize {
        match at.checked_add(count) {
            Some(end) if end <= self.len => self.start + at * size_of::<T>(),
            _ => panic!(
                "{}: {}: elements {at}..+{count} are past the {} checked",
                self.kernel, self.name, self.len
            ),
        }
    }

    /// Copies elements `at .. at + out.len()` into `out`.
    fn read(&self, at: usize, out: &mut [T]) {
        let from = self.address(at, out.len());
        // SAFETY: `from .. from + size_of_val(out)` lies in the operand,
        // which the driver confirmed is live memory that no one may free
        // while the launch runs (frees wait for the driver's streams). `out`
        // is this kernel's own buffer, so the two cannot overlap; the copy
        // is bytewise, so `from` needs no alignment, and any bytes make a
        // valid `T` (`Element`).
        unsafe {
            std::ptr::copy_nonoverlapping(
                std::ptr::with_exposed_provenance::<u8>(from),
                out.as_mut_ptr().cast::<u8>(),
                std::mem::size_of_val(out),
            );
        }
    }

    /// Element `at`.
    fn get(&self, at: usize) -> T {
        let from = self.address(at, 1);
        // SAFETY: as in `read`: element `at` lies in the checked, live
        // operand; the read is unaligned and any bytes make a valid `T`.
        unsafe { std::ptr::with_exposed_provenance::<T>(from).read_unaligned() }
    }

    /// Copies `data` to elements `at .. at + data.len()`.
    fn write(&self, at: usize, data: &[T]) {
        let to = self.address(at, data.len());
        // SAFETY: as in `read`: the destination lies in the checked, live
        // operand, `data` is this kernel's own buffer (no overlap), and the
        // copy is bytewise (no alignment needed). No reference into device
        // memory is made, so a guest that aliases operands gets wrong
        // numbers, as on the GPU, and nothing else.
        unsafe {
            std::ptr::copy_nonoverlapping(
                data.as_ptr().cast::<u8>(),
                std::ptr::with_exposed_provenance_mut::<u8>(to),
                std::mem::size_of_val(data),
            );
        }
    }
}

/// Whether a 1-D kernel's block is on the x axis (the grid rules of
/// docs/tensor-ops.md are 1-D; extra y or z blocks do nothing).
fn on_x_axis(block: &BlockContext) -> bool {
    block.block_idx.y == 0 && block.block_idx.z == 0
}

// ---------------------------------------------------------------------------
// GEMM
// ---------------------------------------------------------------------------

/// Rows and columns of C per block (`BM`, `BN` in gemm.cu).
const GEMM_TILE: usize = 128;
/// K per step of the tile loop: a 128 x 128 f32 panel of B is 64 KiB.
const GEMM_K_STEP: usize = 128;

/// How a GEMM's stored A and B elements become the f32s it multiplies.
trait GemmInput {
    /// The stored element.
    type Stored: Element;
    /// Its value as the multiply sees it.
    fn value(stored: Self::Stored) -> f32;
}

/// `tw_gemm_f32`: f32 as stored.
struct F32Input;
impl GemmInput for F32Input {
    type Stored = f32;
    fn value(stored: f32) -> f32 {
        stored
    }
}

/// `tw_gemm_tf32`: f32 rounded to tf32 as the CUDA kernels round it (to
/// nearest, ties to even; a NaN stays a NaN).
struct Tf32Input;
impl GemmInput for Tf32Input {
    type Stored = f32;
    fn value(stored: f32) -> f32 {
        tf32_round(stored)
    }
}

/// `tw_gemm_bf16`: `__nv_bfloat16` bits.
struct Bf16Input;
impl GemmInput for Bf16Input {
    type Stored = u16;
    fn value(stored: u16) -> f32 {
        bf16_to_f32(stored)
    }
}

/// `tw_gemm_f16`: `__half` bits.
struct F16Input;
impl GemmInput for F16Input {
    type Stored = u16;
    fn value(stored: u16) -> f32 {
        f16_to_f32(stored)
    }
}

/// `tw_gemm_*(A, B, C, M, N, K, lda, ldb, ldc, sA, sB, sC, alpha, beta)`:
/// block (bx, by, bz) computes rows `by * 128 ..` and columns `bx * 128 ..`
/// of C's batch `bz`, clipped to M x N.
fn gemm<I: GemmInput>(call: &Call<'_>, block: &BlockContext) {
    call.expect_params(14);
    let (a, b, c) = (call.ptr(0, "A"), call.ptr(1, "B"), call.ptr(2, "C"));
    let (m, n, k) = (call.dim(3, "M"), call.dim(4, "N"), call.dim(5, "K"));
    let lda = call.long_dim(6, "lda");
    let ldb = call.long_dim(7, "ldb");
    let ldc = call.long_dim(8, "ldc");
    let (sa, sb, sc) = (call.long(9, "sA"), call.long(10, "sB"), call.long(11, "sC"));
    let (alpha, beta) = (call.float(12, "alpha"), call.float(13, "beta"));
    for (ld, row, name) in [(lda, k, "lda"), (ldb, n, "ldb"), (ldc, n, "ldc")] {
        if ld < row {
            panic!(
                "{}: {name} = {ld} is shorter than its row ({row})",
                call.kernel
            );
        }
    }
    // C's batches must not overlap: blocks of two batches would write the
    // same elements at once.
    let c_batch = call.fits(rows_span(m, ldc, n), "C's extent");
    if block.grid_dim.z > 1 && sc.unsigned_abs() < c_batch as u64 {
        panic!(
            "{}: sC = {sc} makes C's batches ({c_batch} elements each) overlap",
            call.kernel
        );
    }

    let row0 = block.block_idx.y as usize * GEMM_TILE;
    let col0 = block.block_idx.x as usize * GEMM_TILE;
    if row0 >= m || col0 >= n {
        return;
    }
    let rows = GEMM_TILE.min(m - row0);
    let cols = GEMM_TILE.min(n - col0);
    let batch = i64::from(block.block_idx.z);
    // Every size below is at most i32::MAX or a checked product, and usize
    // is 64 bits on every host the CPU driver runs on.
    let (row0_i, col0_i) = (row0 as i64, col0 as i64);
    let a_first = mul_add(batch, sa, 0).and_then(|o| mul_add(row0_i, lda as i64, o));
    let b_first = mul_add(batch, sb, col0_i);
    let c_first = mul_add(batch, sc, col0_i).and_then(|o| mul_add(row0_i, ldc as i64, o));
    let a_op: Operand<I::Stored> = call.operand(
        "A",
        a,
        call.fits(a_first, "A's offset"),
        call.fits(rows_span(rows, lda, k), "A's extent"),
    );
    let b_op: Operand<I::Stored> = call.operand(
        "B",
        b,
        call.fits(b_first, "B's offset"),
        call.fits(rows_span(k, ldb, cols), "B's extent"),
    );
    let c_op: Operand<f32> = call.operand(
        "C",
        c,
        call.fits(c_first, "C's offset"),
        call.fits(rows_span(rows, ldc, cols), "C's extent"),
    );

    // acc[i * cols + j] += A[i, p] * B[p, j], one K step at a time: the
    // step's B panel and A columns converted to f32 once, then an i-k-j
    // loop whose inner loop runs along a row of B and of acc, four rows of
    // A at a time so that each B element loaded serves four.
    let mut acc = vec![0.0f32; rows * cols];
    let mut b_panel = vec![0.0f32; GEMM_K_STEP * cols];
    let mut a_panel = vec![0.0f32; rows * GEMM_K_STEP];
    let mut stored = vec![I::Stored::default(); GEMM_K_STEP.max(cols)];
    for k0 in (0..k).step_by(GEMM_K_STEP) {
        let steps = GEMM_K_STEP.min(k - k0);
        for p in 0..steps {
            let raw = &mut stored[..cols];
            b_op.read((k0 + p) * ldb, raw);
            for (out, &s) in b_panel[p * cols..(p + 1) * cols].iter_mut().zip(raw.iter()) {
                *out = I::value(s);
            }
        }
        for i in 0..rows {
            let raw = &mut stored[..steps];
            a_op.read(i * lda + k0, raw);
            for (out, &s) in a_panel[i * steps..(i + 1) * steps]
                .iter_mut()
                .zip(raw.iter())
            {
                *out = I::value(s);
            }
        }
        let b_panel = &b_panel[..steps * cols];
        let mut i = 0;
        while i + 4 <= rows {
            let quad = &mut acc[i * cols..(i + 4) * cols];
            let (c01, c23) = quad.split_at_mut(2 * cols);
            let (c0, c1) = c01.split_at_mut(cols);
            let (c2, c3) = c23.split_at_mut(cols);
            let a_row = |r: usize| &a_panel[(i + r) * steps..(i + r + 1) * steps];
            let (a0, a1, a2, a3) = (a_row(0), a_row(1), a_row(2), a_row(3));
            for (p, b_row) in b_panel.chunks_exact(cols).enumerate() {
                let (x0, x1, x2, x3) = (a0[p], a1[p], a2[p], a3[p]);
                let quad = c0
                    .iter_mut()
                    .zip(c1.iter_mut())
                    .zip(c2.iter_mut())
                    .zip(c3.iter_mut());
                for ((((o0, o1), o2), o3), &bv) in quad.zip(b_row) {
                    *o0 += x0 * bv;
                    *o1 += x1 * bv;
                    *o2 += x2 * bv;
                    *o3 += x3 * bv;
                }
            }
            i += 4;
        }
        for i in i..rows {
            let c_row = &mut acc[i * cols..(i + 1) * cols];
            let a_row = &a_panel[i * steps..(i + 1) * steps];
            for (&x, b_row) in a_row.iter().zip(b_panel.chunks_exact(cols)) {
                for (out, &bv) in c_row.iter_mut().zip(b_row) {
                    *out += x * bv;
                }
            }
        }
    }

    // C = alpha * acc + beta * C, C read only when beta != 0.
    let mut c_row = vec![0.0f32; cols];
    for (i, acc_row) in acc.chunks_exact(cols).enumerate() {
        if beta == 0.0 {
            for (out, &v) in c_row.iter_mut().zip(acc_row) {
                *out = alpha * v;
            }
        } else {
            c_op.read(i * ldc, &mut c_row);
            for (out, &v) in c_row.iter_mut().zip(acc_row) {
                *out = alpha * v + beta * *out;
            }
        }
        c_op.write(i * ldc, &c_row);
    }
}

// ---------------------------------------------------------------------------
// Reductions, softmax, layer norm
// ---------------------------------------------------------------------------

/// Elements read from device memory at a time by the row kernels.
const PIECE: usize = 4096;
/// Independent partial results: a shorter rounding chain than one running
/// sum (as a GPU's tree has), and room for the compiler to vectorise.
const LANES: usize = 8;

/// One of the reductions: how partial results start, combine and finish.
trait Reduction {
    const START: f32;
    fn combine(acc: f32, x: f32) -> f32;
    fn finish(acc: f32, n: usize) -> f32;
}

struct SumReduce;
impl Reduction for SumReduce {
    const START: f32 = 0.0;
    fn combine(acc: f32, x: f32) -> f32 {
        acc + x
    }
    fn finish(acc: f32, _: usize) -> f32 {
        acc
    }
}

/// NaN elements are skipped (`f32::max`, like CUDA's `fmaxf`); NaN only if
/// all are NaN.
struct MaxReduce;
impl Reduction for MaxReduce {
    const START: f32 = f32::NAN;
    fn combine(acc: f32, x: f32) -> f32 {
        acc.max(x)
    }
    fn finish(acc: f32, _: usize) -> f32 {
        acc
    }
}

struct MeanReduce;
impl Reduction for MeanReduce {
    const START: f32 = 0.0;
    fn combine(acc: f32, x: f32) -> f32 {
        acc + x
    }
    fn finish(acc: f32, n: usize) -> f32 {
        acc / n as f32
    }
}

/// Folds `xs` into [`LANES`] partial results, element `j` into lane `j % LANES`.
fn fold_lanes<R: Reduction>(lanes: &mut [f32; LANES], xs: &[f32]) {
    let mut chunks = xs.chunks_exact(LANES);
    for chunk in &mut chunks {
        for (lane, &x) in lanes.iter_mut().zip(chunk) {
            *lane = R::combine(*lane, x);
        }
    }
    for (lane, &x) in lanes.iter_mut().zip(chunks.remainder()) {
        *lane = R::combine(*lane, x);
    }
}

fn finish_lanes<R: Reduction>(lanes: &[f32; LANES]) -> f32 {
    lanes.iter().fold(R::START, |acc, &x| R::combine(acc, x))
}

/// The parameters every reduction entry takes, `(x, y, outer, n, inner)`,
/// checked: sizes that fit, and `outer * n * inner` an offset; with the
/// count of outputs, `outer * inner`.
fn reduce_params(call: &Call<'_>) -> (u64, u64, usize, usize, usize, usize) {
    call.expect_params(5);
    let (x, y) = (call.ptr(0, "x"), call.ptr(1, "y"));
    let (outer, n, inner) = (call.dim(2, "outer"), call.dim(3, "n"), call.dim(4, "inner"));
    let outputs = call.fits(outer.checked_mul(inner), "outer * inner");
    let total = call.fits(outputs.checked_mul(n), "outer * n * inner");
    call.offset(total, "outer * n * inner");
    (x, y, outer, n, inner, outputs)
}

/// `tw_reduce_*_f32(x, y, outer, n, inner)`: block x computes `y[x]`,
/// reducing `x[o, 0..n, i]` for `o = x / inner`, `i = x % inner`.
fn reduce<R: Reduction>(call: &Call<'_>, block: &BlockContext) {
    let (x, y, _, n, inner, outputs) = reduce_params(call);
    let id = block.block_idx.x as usize;
    if !on_x_axis(block) || id >= outputs {
        return;
    }
    let (o, i) = (id / inner, id % inner);
    // o * n * inner + i < outer * n * inner, which fits (checked above).
    let first = call.offset(o * n * inner + i, "x's offset");
    let x_op: Operand<f32> = call.operand("x", x, first, (n - 1) * inner + 1);
    let y_op: Operand<f32> = call.operand("y", y, id as i64, 1);
    let mut lanes = [R::START; LANES];
    let mut piece = vec![0.0f32; PIECE.min(n)];
    for j0 in (0..n).step_by(PIECE) {
        let count = PIECE.min(n - j0);
        let buf = &mut piece[..count];
        if inner == 1 {
            x_op.read(j0, buf);
        } else {
            for (t, slot) in buf.iter_mut().enumerate() {
                *slot = x_op.get((j0 + t) * inner);
            }
        }
        fold_lanes::<R>(&mut lanes, buf);
    }
    y_op.write(0, &[R::finish(finish_lanes::<R>(&lanes), n)]);
}

/// Outputs per block of the `_cols` reductions (`STRIP` in reduce.cu).
const STRIP: usize = 32;

/// `tw_reduce_*_cols_f32(x, y, outer, n, inner)`: block x computes the
/// strip `y[o, j0 .. j0 + 32]` (cut at `inner`), reducing `x[o, 0..n, j]`
/// for each of its `j`, where `strips = ceil(inner / 32)`, `o = x / strips`
/// and `j0 = 32 (x % strips)`.
fn reduce_cols<R: Reduction>(call: &Call<'_>, block: &BlockContext) {
    let (x, y, outer, n, inner, _) = reduce_params(call);
    let strips = inner.div_ceil(STRIP);
    let id = block.block_idx.x as usize;
    // outer * strips <= outer * inner, which fits (checked above).
    if !on_x_axis(block) || id >= outer * strips {
        return;
    }
    let (o, j0) = (id / strips, (id % strips) * STRIP);
    let width = STRIP.min(inner - j0);
    // Both offsets are below outer * n * inner.
    let first = call.offset(o * n * inner + j0, "x's offset");
    let x_op: Operand<f32> = call.operand("x", x, first, (n - 1) * inner + width);
    let y_op: Operand<f32> = call.operand("y", y, call.offset(o * inner + j0, "y's offset"), width);
    // Row i of each column goes to lane i % LANES, as fold_lanes does.
    let mut lanes = [[R::START; LANES]; STRIP];
    let mut row = [0.0f32; STRIP];
    for i in 0..n {
        x_op.read(i * inner, &mut row[..width]);
        for (column, &v) in lanes.iter_mut().zip(&row[..width]) {
            column[i % LANES] = R::combine(column[i % LANES], v);
        }
    }
    let out: Vec<f32> = lanes[..width]
        .iter()
        .map(|column| R::finish(finish_lanes::<R>(column), n))
        .collect();
    y_op.write(0, &out);
}

/// Rows per block of the `_rows` softmax and layer norm (a warp per row,
/// 8 warps, on the GPU).
const ROWS_PER_BLOCK: usize = 8;

/// The rows a block of `ROWS` rows per block computes (none off the x axis).
fn block_rows<const ROWS: usize>(block: &BlockContext, rows: usize) -> std::ops::Range<usize> {
    if !on_x_axis(block) {
        return 0..0;
    }
    let start = (block.block_idx.x as usize).saturating_mul(ROWS).min(rows);
    start..start.saturating_add(ROWS).min(rows)
}

/// Sum of `xs` in [`LANES`] partial sums.
fn lane_sum(xs: &[f32]) -> f32 {
    let mut lanes = [0.0f32; LANES];
    fold_lanes::<SumReduce>(&mut lanes, xs);
    finish_lanes::<SumReduce>(&lanes)
}

/// `tw_softmax{_rows,,_wide}_f32(x, y, rows, cols)`: block x computes rows
/// `x * ROWS ..` (`ROWS` of them, cut at `rows`).
fn softmax<const ROWS: usize>(call: &Call<'_>, block: &BlockContext) {
    call.expect_params(4);
    let (x, y) = (call.ptr(0, "x"), call.ptr(1, "y"));
    let (rows, cols) = (call.dim(2, "rows"), call.dim(3, "cols"));
    let mine = block_rows::<ROWS>(block, rows);
    if mine.is_empty() {
        return;
    }
    let first = call.offset(mine.start * cols, "row offset");
    let count = call.fits(mine.len().checked_mul(cols), "the block's elements");
    let x_op: Operand<f32> = call.operand("x", x, first, count);
    let y_op: Operand<f32> = call.operand("y", y, first, count);
    let mut v = vec![0.0f32; cols];
    for r in 0..mine.len() {
        x_op.read(r * cols, &mut v);
        let max = v.iter().fold(f32::NEG_INFINITY, |m, &e| m.max(e));
        for e in v.iter_mut() {
            *e = (*e - max).exp();
        }
        let sum = lane_sum(&v);
        for e in v.iter_mut() {
            *e /= sum;
        }
        y_op.write(r * cols, &v);
    }
}

/// `tw_layernorm{_rows,,_wide}_f32(x, gamma, beta, y, rows, cols, eps)`:
/// block x computes rows `x * ROWS ..` (`ROWS` of them, cut at `rows`),
/// `(x - mean) / sqrt(var + eps) * gamma + beta` with the biased variance
/// (two passes).
fn layernorm<const ROWS: usize>(call: &Call<'_>, block: &BlockContext) {
    call.expect_params(7);
    let (x, gamma, beta, y) = (
        call.ptr(0, "x"),
        call.ptr(1, "gamma"),
        call.ptr(2, "beta"),
        call.ptr(3, "y"),
    );
    let (rows, cols) = (call.dim(4, "rows"), call.dim(5, "cols"));
    let eps = call.float(6, "eps");
    let mine = block_rows::<ROWS>(block, rows);
    if mine.is_empty() {
        return;
    }
    let first = call.offset(mine.start * cols, "row offset");
    let count = call.fits(mine.len().checked_mul(cols), "the block's elements");
    let x_op: Operand<f32> = call.operand("x", x, first, count);
    let gamma_op: Operand<f32> = call.operand("gamma", gamma, 0, cols);
    let beta_op: Operand<f32> = call.operand("beta", beta, 0, cols);
    let y_op: Operand<f32> = call.operand("y", y, first, count);
    let mut v = vec![0.0f32; cols];
    let (mut g, mut b) = (vec![0.0f32; cols], vec![0.0f32; cols]);
    gamma_op.read(0, &mut g);
    beta_op.read(0, &mut b);
    let mut squares = vec![0.0f32; cols];
    for r in 0..mine.len() {
        x_op.read(r * cols, &mut v);
        let mean = lane_sum(&v) / cols as f32;
        for (e, sq) in v.iter_mut().zip(squares.iter_mut()) {
            *e -= mean;
            *sq = *e * *e;
        }
        let var = lane_sum(&squares) / cols as f32;
        let rstd = 1.0 / (var + eps).sqrt();
        for ((e, &g), &b) in v.iter_mut().zip(&g).zip(&b) {
            *e = *e * rstd * g + b;
        }
        y_op.write(r * cols, &v);
    }
}

// ---------------------------------------------------------------------------
// Elementwise, transpose
// ---------------------------------------------------------------------------

/// The elements block `block.x` of `grid.x` handles out of `n`: run `x` of
/// `ceil(n / grid.x)` contiguous elements (empty past the end). Any grid
/// covers every element exactly once; the contract's grid,
/// `clamp(ceil(n / 1024), 1, 65536)`, gives about 1024 per block.
fn elementwise_run(block: &BlockContext, n: usize) -> std::ops::Range<usize> {
    let grid = block.grid_dim.x.max(1) as usize;
    let per_block = n.div_ceil(grid);
    let start = (block.block_idx.x as usize)
        .saturating_mul(per_block)
        .min(n);
    start..start.saturating_add(per_block).min(n)
}

/// `add` or `mul`.
trait BinaryOp {
    fn apply(a: f32, b: f32) -> f32;
}

struct AddOp;
impl BinaryOp for AddOp {
    fn apply(a: f32, b: f32) -> f32 {
        a + b
    }
}

struct MulOp;
impl BinaryOp for MulOp {
    fn apply(a: f32, b: f32) -> f32 {
        a * b
    }
}

/// `tw_add_f32` / `tw_mul_f32(a, b, y, n, b_period)`: `y[i] = a[i] op b[i %
/// b_period]` over this block's [`elementwise_run`].
fn broadcast<Op: BinaryOp>(call: &Call<'_>, block: &BlockContext) {
    call.expect_params(5);
    let (a, b, y) = (call.ptr(0, "a"), call.ptr(1, "b"), call.ptr(2, "y"));
    let n = call.long_dim(3, "n");
    let period = call.long_dim(4, "b_period");
    let run = elementwise_run(block, n);
    if !on_x_axis(block) || run.is_empty() {
        return;
    }
    let a_op: Operand<f32> = call.operand("a", a, run.start as i64, run.len());
    let y_op: Operand<f32> = call.operand("y", y, run.start as i64, run.len());
    // B: the whole period when it is short (read once, indexed by i %
    // period), or when the run wraps around it; else just the run's part.
    let (b_first, wraps) = (run.start % period, run.start % period + run.len() > period);
    let small = period <= PIECE;
    let b_op: Operand<f32> = if small || wraps {
        call.operand("b", b, 0, period)
    } else {
        call.operand("b", b, b_first as i64, run.len())
    };
    let b_base = if small || wraps { 0 } else { b_first };
    let whole_b = small.then(|| {
        let mut v = vec![0.0f32; period];
        b_op.read(0, &mut v);
        v
    });
    let mut av = vec![0.0f32; PIECE.min(run.len())];
    let mut bv = av.clone();
    for s in run.clone().step_by(PIECE) {
        let count = PIECE.min(run.end - s);
        let (av, bv) = (&mut av[..count], &mut bv[..count]);
        a_op.read(s - run.start, av);
        match &whole_b {
            Some(whole) => {
                for (t, slot) in bv.iter_mut().enumerate() {
                    *slot = whole[(s + t) % period];
                }
            }
            None => {
                // Runs of B as contiguous as the period allows.
                let mut done = 0;
                while done < count {
                    let j = (s + done) % period;
                    let len = (count - done).min(period - j);
                    b_op.read(j - b_base, &mut bv[done..done + len]);
                    done += len;
                }
            }
        }
        for (x, &w) in av.iter_mut().zip(bv.iter()) {
            *x = Op::apply(*x, w);
        }
        y_op.write(s - run.start, av);
    }
}

/// `relu` or `gelu`.
trait UnaryOp {
    fn apply(x: f32) -> f32;
}

/// `fmaxf(x, 0)`: NaN gives 0.
struct ReluOp;
impl UnaryOp for ReluOp {
    fn apply(x: f32) -> f32 {
        x.max(0.0)
    }
}

/// The exact (erf) GELU, evaluated in f64 and rounded once.
struct GeluOp;
impl UnaryOp for GeluOp {
    fn apply(x: f32) -> f32 {
        gelu_one(f64::from(x)) as f32
    }
}

/// `tw_relu_f32` / `tw_gelu_f32(x, y, n)` over this block's
/// [`elementwise_run`].
fn unary<Op: UnaryOp>(call: &Call<'_>, block: &BlockContext) {
    call.expect_params(3);
    let (x, y) = (call.ptr(0, "x"), call.ptr(1, "y"));
    let n = call.long_dim(2, "n");
    let run = elementwise_run(block, n);
    if !on_x_axis(block) || run.is_empty() {
        return;
    }
    let x_op: Operand<f32> = call.operand("x", x, run.start as i64, run.len());
    let y_op: Operand<f32> = call.operand("y", y, run.start as i64, run.len());
    let mut v = vec![0.0f32; PIECE.min(run.len())];
    for s in run.clone().step_by(PIECE) {
        let v = &mut v[..PIECE.min(run.end - s)];
        x_op.read(s - run.start, v);
        for e in v.iter_mut() {
            *e = Op::apply(*e);
        }
        y_op.write(s - run.start, v);
    }
}

/// Rows and columns of a transpose tile.
const TRANSPOSE_TILE: usize = 32;

/// `tw_transpose_f32(x, y, rows, cols)`: block (bx, by, bz) moves the
/// 32 x 32 tile at rows `by * 32 ..`, columns `bx * 32 ..` of x's batch
/// `bz` (batch stride `rows * cols`), clipped, to y.
fn transpose(call: &Call<'_>, block: &BlockContext) {
    call.expect_params(4);
    let (x, y) = (call.ptr(0, "x"), call.ptr(1, "y"));
    let (rows, cols) = (call.dim(2, "rows"), call.dim(3, "cols"));
    let row0 = block.block_idx.y as usize * TRANSPOSE_TILE;
    let col0 = block.block_idx.x as usize * TRANSPOSE_TILE;
    if row0 >= rows || col0 >= cols {
        return;
    }
    let (tr, tc) = (
        TRANSPOSE_TILE.min(rows - row0),
        TRANSPOSE_TILE.min(cols - col0),
    );
    // Products of two ints (< 2^62) cannot overflow below.
    let plane = call.offset(rows * cols, "rows * cols");
    let batch = call.fits(
        i64::from(block.block_idx.z).checked_mul(plane),
        "batch offset",
    );
    let x_first = mul_add(row0 as i64, cols as i64, batch).and_then(|o| o.checked_add(col0 as i64));
    let y_first = mul_add(col0 as i64, rows as i64, batch).and_then(|o| o.checked_add(row0 as i64));
    let x_op: Operand<f32> = call.operand(
        "x",
        x,
        call.fits(x_first, "x's offset"),
        call.fits(rows_span(tr, cols, tc), "x's extent"),
    );
    let y_op: Operand<f32> = call.operand(
        "y",
        y,
        call.fits(y_first, "y's offset"),
        call.fits(rows_span(tc, rows, tr), "y's extent"),
    );
    let mut tile = [0.0f32; TRANSPOSE_TILE * TRANSPOSE_TILE];
    for r in 0..tr {
        x_op.read(r * cols, &mut tile[r * tc..(r + 1) * tc]);
    }
    let mut out = [0.0f32; TRANSPOSE_TILE];
    for c in 0..tc {
        for (r, slot) in out[..tr].iter_mut().enumerate() {
            *slot = tile[r * tc + c];
        }
        y_op.write(c * rows, &out[..tr]);
    }
}

#[cfg(test)]
mod tests {
    use std::time::{SystemTime, UNIX_EPOCH};

    use tensorwasm_core::{DeviceMemory, Dim3, DriverError, ErrorKind, GpuDriver, LaunchConfig};
    use tensorwasm_cpu::{CpuError, CpuModule};
    use tensorwasm_kernels::{
        oracle::{
            self, F32_ROUNDED_RTOL, F32_UNIT_ROUNDOFF, GELU_TOLERANCE, GemmPrecision, ReduceOp,
        },
        table::{self, Geometry},
    };

    use super::*;

    /// xorshift64* with a printed seed; `TENSORWASM_SEED` replays a run.
    struct Rng(u64);

    impl Rng {
        fn new(test: &str) -> Rng {
            let seed = std::env::var("TENSORWASM_SEED")
                .ok()
                .and_then(|s| s.parse().ok())
                .unwrap_or_else(|| {
                    SystemTime::now()
                        .duration_since(UNIX_EPOCH)
                        .map_or(0x9e37_79b9, |d| d.as_nanos() as u64)
                });
            println!("{test}: TENSORWASM_SEED={seed}");
            Rng(seed ^ 0x2545_f491_4f6c_dd1d | 1)
        }

        fn next_u64(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }

        /// Uniform in [-scale, scale), never zero.
        fn value(&mut self, scale: f32) -> f32 {
            let unit = (self.next_u64() >> 40) as f32 / (1u32 << 24) as f32;
            let v = (unit * 2.0 - 1.0) * scale;
            if v == 0.0 { scale / 3.0 } else { v }
        }

        fn values(&mut self, len: usize, scale: f32) -> Vec<f32> {
            (0..len).map(|_| self.value(scale)).collect()
        }
    }

    /// A device buffer whose operand starts `offset` bytes in: an offset
    /// that is not a multiple of the element size makes an unaligned
    /// operand. The bytes before it are filler.
    struct Buffer<M> {
        memory: M,
        offset: usize,
    }

    impl<M: DeviceMemory> Buffer<M> {
        fn param(&self) -> KernelParam {
            KernelParam::Ptr(DevicePtr(self.memory.device_ptr().0 + self.offset as u64))
        }
    }

    /// A driver and its built-in kernels.
    struct Rig {
        driver: CpuDriver,
        module: CpuModule,
    }

    impl Rig {
        fn new() -> Rig {
            let driver = CpuDriver::with_capacity(1 << 30).expect("a CPU driver");
            let module = driver.host_module(host_kernels(&driver));
            Rig { driver, module }
        }

        fn bytes(&self, payload: &[u8], offset: usize) -> Buffer<tensorwasm_cpu::CpuDeviceBuffer> {
            let memory = self.driver.alloc_device(offset + payload.len()).unwrap();
            let mut bytes = vec![0xa5; offset];
            bytes.extend_from_slice(payload);
            self.driver.copy_to_device(memory.full(), &bytes).unwrap();
            Buffer { memory, offset }
        }

        fn f32s(&self, data: &[f32], offset: usize) -> Buffer<tensorwasm_cpu::CpuDeviceBuffer> {
            let payload: Vec<u8> = data.iter().flat_map(|v| v.to_le_bytes()).collect();
            self.bytes(&payload, offset)
        }

        fn u16s(&self, data: &[u16], offset: usize) -> Buffer<tensorwasm_cpu::CpuDeviceBuffer> {
            let payload: Vec<u8> = data.iter().flat_map(|v| v.to_le_bytes()).collect();
            self.bytes(&payload, offset)
        }

        fn read<M: DeviceMemory>(&self, buffer: &Buffer<M>, count: usize) -> Vec<f32> {
            let len = buffer.offset + count * 4;
            let mut bytes = vec![0; len];
            self.driver
                .copy_from_device(&mut bytes, buffer.memory.range(0, len).unwrap())
                .unwrap();
            bytes[buffer.offset..]
                .chunks_exact(4)
                .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
                .collect()
        }

        fn launch(
            &self,
            name: &str,
            grid: Dim3,
            block: Dim3,
            params: &[KernelParam],
        ) -> Result<(), CpuError> {
            // A stream per launch: a failed launch leaves its stream failed.
            let stream = self.driver.create_stream().unwrap();
            let function = self.driver.function(&self.module, name).unwrap();
            let config = LaunchConfig {
                grid,
                block,
                shared_mem_bytes: 0,
            };
            // SAFETY: the built-ins check every operand against the
            // driver's live memory, and the tests' buffers outlive the
            // synchronize below.
            unsafe { self.driver.launch(&stream, &function, &config, params) }?;
            self.driver.stream_synchronize(&stream)
        }
    }

    fn i32p(v: usize) -> KernelParam {
        KernelParam::I32(i32::try_from(v).unwrap())
    }

    fn i64p(v: i64) -> KernelParam {
        KernelParam::I64(v)
    }

    /// The contract's grid for the elementwise kernels.
    fn elementwise_grid(n: usize) -> Dim3 {
        Dim3::linear(n.div_ceil(1024).clamp(1, 65536) as u32)
    }

    const BLOCK_256: Dim3 = Dim3 { x: 256, y: 1, z: 1 };

    #[test]
    fn every_entry_point_of_the_contract_is_there() {
        let rig = Rig::new();
        let names: Vec<&str> = rig.module.names().collect();
        let mut want = vec![
            "tw_gemm_f32",
            "tw_gemm_tf32",
            "tw_gemm_bf16",
            "tw_gemm_f16",
            "tw_reduce_sum_f32",
            "tw_reduce_max_f32",
            "tw_reduce_mean_f32",
            "tw_reduce_sum_cols_f32",
            "tw_reduce_max_cols_f32",
            "tw_reduce_mean_cols_f32",
            "tw_softmax_rows_f32",
            "tw_softmax_f32",
            "tw_softmax_wide_f32",
            "tw_layernorm_rows_f32",
            "tw_layernorm_f32",
            "tw_layernorm_wide_f32",
            "tw_add_f32",
            "tw_mul_f32",
            "tw_relu_f32",
            "tw_gelu_f32",
            "tw_transpose_f32",
        ];
        want.sort_unstable();
        assert_eq!(names, want);
    }

    #[test]
    fn the_elementwise_partition_covers_each_element_once() {
        for n in [1usize, 5, 1000, 1023, 1025, 100_003] {
            for grid in [1u32, 3, 7, n.div_ceil(1024) as u32, 65536] {
                let mut seen = vec![0u8; n];
                for x in 0..grid {
                    let block = BlockContext {
                        block_idx: Dim3::linear(x),
                        block_dim: BLOCK_256,
                        grid_dim: Dim3::linear(grid),
                        shared_mem_bytes: 0,
                    };
                    for i in elementwise_run(&block, n) {
                        seen[i] += 1;
                    }
                }
                assert!(seen.iter().all(|&s| s == 1), "n {n}, grid {grid}");
            }
        }
    }

    // -----------------------------------------------------------------------
    // GEMM
    // -----------------------------------------------------------------------

    /// One GEMM launch: sizes, leading dimensions, batch strides (elements)
    /// and each operand's byte offset in its buffer.
    #[derive(Clone, Copy, Debug)]
    struct GemmCase {
        m: usize,
        n: usize,
        k: usize,
        ld: [usize; 3],
        batch: usize,
        strides: [i64; 3],
        alpha: f32,
        beta: f32,
        offsets: [usize; 3],
    }

    impl GemmCase {
        fn dense(m: usize, n: usize, k: usize) -> GemmCase {
            GemmCase {
                m,
                n,
                k,
                ld: [k, n, n],
                batch: 1,
                strides: [0; 3],
                alpha: 1.0,
                beta: 0.0,
                offsets: [0; 3],
            }
        }

        /// For each operand: elements in its buffer and where batch 0
        /// starts (past earlier batches of a negative stride).
        fn layout(&self, which: usize) -> (usize, usize) {
            let (rows, cols) = [(self.m, self.k), (self.k, self.n), (self.m, self.n)][which];
            let span = (rows - 1) * self.ld[which] + cols;
            let last = (self.batch as i64 - 1) * self.strides[which];
            let low = last.min(0).unsigned_abs() as usize;
            let high = last.max(0) as usize;
            (low + high + span, low)
        }
    }

    fn run_gemm(rig: &Rig, rng: &mut Rng, entry: &str, precision: GemmPrecision, case: GemmCase) {
        let GemmCase {
            m,
            n,
            k,
            ld: [lda, ldb, ldc],
            batch,
            strides: [sa, sb, sc],
            alpha,
            beta,
            offsets,
        } = case;
        let (a_len, a0) = case.layout(0);
        let (b_len, b0) = case.layout(1);
        let (c_len, c0) = case.layout(2);
        let narrow = |v: &[f32]| -> (Vec<u16>, Vec<f64>) {
            let to_bits = if precision == GemmPrecision::Bf16 {
                oracle::f32_to_bf16
            } else {
                oracle::f32_to_f16
            };
            let from_bits = if precision == GemmPrecision::Bf16 {
                oracle::bf16_to_f32
            } else {
                oracle::f16_to_f32
            };
            let bits: Vec<u16> = v.iter().map(|&x| to_bits(x)).collect();
            let values = bits.iter().map(|&b| f64::from(from_bits(b))).collect();
            (bits, values)
        };
        let (a_raw, b_raw) = (rng.values(a_len, 1.0), rng.values(b_len, 1.0));
        let (a_buf, b_buf, a, b) = match precision {
            GemmPrecision::F32 | GemmPrecision::Tf32 => (
                rig.f32s(&a_raw, offsets[0]),
                rig.f32s(&b_raw, offsets[1]),
                oracle::widen(&a_raw),
                oracle::widen(&b_raw),
            ),
            GemmPrecision::Bf16 | GemmPrecision::F16 => {
                let ((a_bits, a), (b_bits, b)) = (narrow(&a_raw), narrow(&b_raw));
                (
                    rig.u16s(&a_bits, offsets[0]),
                    rig.u16s(&b_bits, offsets[1]),
                    a,
                    b,
                )
            }
        };
        // beta == 0 must not read C: fill it with NaN then.
        let c_init = if beta == 0.0 {
            vec![f32::NAN; c_len]
        } else {
            rng.values(c_len, 1.0)
        };
        let c_buf = rig.f32s(&c_init, offsets[2]);
        let c_wide = oracle::widen(&c_init);
        let ptr_at = |buf: &Buffer<_>, first: usize, size: usize| match buf.param() {
            KernelParam::Ptr(p) => KernelParam::Ptr(DevicePtr(p.0 + (first * size) as u64)),
            _ => unreachable!(),
        };
        let size = if matches!(precision, GemmPrecision::F32 | GemmPrecision::Tf32) {
            4
        } else {
            2
        };
        let params = [
            ptr_at(&a_buf, a0, size),
            ptr_at(&b_buf, b0, size),
            ptr_at(&c_buf, c0, 4),
            i32p(m),
            i32p(n),
            i32p(k),
            i64p(lda as i64),
            i64p(ldb as i64),
            i64p(ldc as i64),
            i64p(sa),
            i64p(sb),
            i64p(sc),
            KernelParam::F32(alpha),
            KernelParam::F32(beta),
        ];
        let grid = Dim3 {
            x: n.div_ceil(128) as u32,
            y: m.div_ceil(128) as u32,
            z: batch as u32,
        };
        rig.launch(entry, grid, BLOCK_256, &params).unwrap();
        let c_out = rig.read(&c_buf, c_len);
        let mut written = vec![false; c_len];
        let (alpha, beta) = (f64::from(alpha), f64::from(beta));
        for z in 0..batch {
            let at = |base: usize, stride: i64| (base as i64 + z as i64 * stride) as usize;
            let (az, bz, cz) = (at(a0, sa), at(b0, sb), at(c0, sc));
            let (a, b, c) = (&a[az..], &b[bz..], &c_wide[cz..]);
            let want = oracle::gemm(a, b, c, m, n, k, lda, ldb, ldc, alpha, beta);
            let magnitude = oracle::gemm_abs(a, b, c, m, n, k, lda, ldb, ldc, alpha, beta);
            let mut got = Vec::with_capacity(m * n);
            for i in 0..m {
                for j in 0..n {
                    got.push(c_out[cz + i * ldc + j]);
                    written[cz + i * ldc + j] = true;
                }
            }
            oracle::check_close_scaled(&got, &want, &magnitude, oracle::gemm_rtol(precision, k))
                .unwrap_or_else(|e| panic!("{entry} {case:?}, batch {z}: {e}"));
            if precision == GemmPrecision::Tf32 {
                // Against the rounded inputs it is an f32 GEMM: the kernel
                // did round.
                let round = |v: &[f64]| -> Vec<f64> {
                    v.iter()
                        .map(|&x| f64::from(oracle::tf32_round(x as f32)))
                        .collect()
                };
                let (ar, br) = (round(a), round(b));
                let want = oracle::gemm(&ar, &br, c, m, n, k, lda, ldb, ldc, alpha, beta);
                oracle::check_close_scaled(
                    &got,
                    &want,
                    &magnitude,
                    oracle::gemm_rtol(GemmPrecision::F32, k),
                )
                .unwrap_or_else(|e| {
                    panic!("{entry} {case:?} against rounded inputs, batch {z}: {e}")
                });
            }
        }
        // Nothing outside the batches' M x N elements changed.
        for (i, (&before, &after)) in c_init.iter().zip(&c_out).enumerate() {
            if !written[i] {
                assert_eq!(
                    before.to_bits(),
                    after.to_bits(),
                    "{entry} {case:?}: C[{i}] outside the result changed"
                );
            }
        }
    }

    /// Shapes every GEMM entry runs: single elements, odd sizes, partial
    /// tiles with padded leading dimensions, a broadcast A, a negative B
    /// stride, operands at odd element offsets.
    fn gemm_cases(element: usize) -> Vec<GemmCase> {
        let mut padded = GemmCase::dense(130, 257, 129);
        padded.ld = [132, 260, 259];
        padded.alpha = 1.5;
        padded.beta = -0.5;
        let mut batched = GemmCase::dense(70, 200, 31);
        batched.ld = [33, 203, 201];
        batched.batch = 3;
        batched.strides = [0, -(31 * 203 + 5), 70 * 201 + 7];
        batched.offsets = [element, 3 * element, 4];
        batched.beta = 2.0;
        let mut long_k = GemmCase::dense(33, 65, 1000);
        long_k.ld = [1001, 65, 67];
        long_k.alpha = -0.75;
        vec![
            GemmCase::dense(1, 1, 1),
            GemmCase::dense(17, 3, 5),
            padded,
            batched,
            long_k,
        ]
    }

    #[test]
    fn gemm_f32_matches_the_oracle() {
        let (rig, mut rng) = (Rig::new(), Rng::new("gemm_f32"));
        for case in gemm_cases(4) {
            run_gemm(&rig, &mut rng, "tw_gemm_f32", GemmPrecision::F32, case);
        }
        // Beyond the contract: operands not even aligned to their element.
        let mut odd = GemmCase::dense(9, 140, 7);
        odd.offsets = [1, 2, 3];
        odd.beta = 1.0;
        run_gemm(&rig, &mut rng, "tw_gemm_f32", GemmPrecision::F32, odd);
    }

    #[test]
    fn gemm_tf32_rounds_its_inputs() {
        let (rig, mut rng) = (Rig::new(), Rng::new("gemm_tf32"));
        for case in gemm_cases(4) {
            run_gemm(&rig, &mut rng, "tw_gemm_tf32", GemmPrecision::Tf32, case);
        }
    }

    /// A GEMM's parameters over dense row-major `[a, b, c]` of one batch:
    /// `C = A @ B` (unit alpha, zero beta).
    fn dense_gemm_params<M: DeviceMemory>(
        abc: [&Buffer<M>; 3],
        m: usize,
        n: usize,
        k: usize,
    ) -> [KernelParam; 14] {
        let [a, b, c] = abc;
        [
            a.param(),
            b.param(),
            c.param(),
            i32p(m),
            i32p(n),
            i32p(k),
            i64p(k as i64),
            i64p(n as i64),
            i64p(n as i64),
            i64p(0),
            i64p(0),
            i64p(0),
            KernelParam::F32(1.0),
            KernelParam::F32(0.0),
        ]
    }

    /// `tw_gemm_tf32` of one block, unit alpha, zero beta, dense operands.
    fn gemm_tf32_once(rig: &Rig, a: &[f32], b: &[f32], m: usize, n: usize, k: usize) -> Vec<f32> {
        let (a_buf, b_buf) = (rig.f32s(a, 0), rig.f32s(b, 0));
        let c_buf = rig.f32s(&vec![f32::NAN; m * n], 0);
        let params = dense_gemm_params([&a_buf, &b_buf, &c_buf], m, n, k);
        let grid = Dim3 {
            x: n.div_ceil(128) as u32,
            y: m.div_ceil(128) as u32,
            z: 1,
        };
        rig.launch("tw_gemm_tf32", grid, BLOCK_256, &params)
            .unwrap();
        rig.read(&c_buf, m * n)
    }

    /// Halfway cases with an even and an odd last kept bit and either side
    /// of them, normal and subnormal, both signs, times an identity (and an
    /// identity times them): C is the rounded input, bit for bit (zeros up
    /// to sign). A NaN in A or B makes its row or column of C NaN.
    #[test]
    fn gemm_tf32_rounds_ties_to_even_bit_for_bit() {
        let rig = Rig::new();
        let mut words = Vec::new();
        for sign in [0, 0x8000_0000u32] {
            for exponent in [0, 0x0080_0000, 0x3f80_0000, 0x7e80_0000] {
                for kept in [0, 0x2000, 0x7f_e000] {
                    for dropped in [0x1000, 0xfff, 0x1001, 0x1fff] {
                        words.push(sign | exponent | kept | dropped);
                    }
                }
            }
        }
        let x: Vec<f32> = words.iter().map(|&w| f32::from_bits(w)).collect();
        let (rows, k) = (6, 16);
        assert_eq!(x.len(), rows * k);
        let eye: Vec<f32> = (0..k * k)
            .map(|i| if i / k == i % k { 1.0 } else { 0.0 })
            .collect();
        for (c, what) in [
            (gemm_tf32_once(&rig, &x, &eye, rows, k, k), "A"),
            (gemm_tf32_once(&rig, &eye, &x, k, rows, k), "B"),
        ] {
            for (i, (&got, &input)) in c.iter().zip(&x).enumerate() {
                let want = tf32_round(input);
                assert!(
                    got == want,
                    "{what}[{i}] = {:#010x}: got {:#010x}, want {:#010x}",
                    input.to_bits(),
                    got.to_bits(),
                    want.to_bits()
                );
            }
        }
        // Ties go both ways: some round down, some up.
        let ties = words.iter().filter(|&&w| w & 0x1fff == 0x1000);
        let up = ties
            .clone()
            .filter(|&&w| tf32_round(f32::from_bits(w)).to_bits() > w)
            .count();
        assert!(up > 0 && up < ties.count());

        let (m, n, k) = (5, 7, 3);
        let mut a = vec![0.5f32; m * k];
        let mut b = vec![0.25f32; k * n];
        a[2 * k + 1] = f32::NAN;
        b[n + 4] = f32::NAN;
        let c = gemm_tf32_once(&rig, &a, &b, m, n, k);
        for (i, v) in c.iter().enumerate() {
            let (row, col) = (i / n, i % n);
            assert_eq!(v.is_nan(), row == 2 || col == 4, "C[{row}][{col}] = {v}");
        }
    }

    #[test]
    fn gemm_bf16_and_f16_match_the_oracle() {
        let (rig, mut rng) = (Rig::new(), Rng::new("gemm_bf16_f16"));
        for case in gemm_cases(2) {
            run_gemm(&rig, &mut rng, "tw_gemm_bf16", GemmPrecision::Bf16, case);
            run_gemm(&rig, &mut rng, "tw_gemm_f16", GemmPrecision::F16, case);
        }
    }

    // -----------------------------------------------------------------------
    // Reductions, softmax, layer norm
    // -----------------------------------------------------------------------

    /// The grid and block of `entry` for `outer` x `inner` outputs of a
    /// reduction, or `outer` rows of a row op, from the table's geometry.
    fn table_launch(entry: &str, outer: usize, inner: usize) -> (Dim3, Dim3) {
        let k = table::kernel(entry).unwrap_or_else(|| panic!("{entry} is not in the table"));
        let blocks = match k.geometry {
            Geometry::PerOutput => outer * inner,
            Geometry::ColumnStrips { width } => outer * inner.div_ceil(width as usize),
            Geometry::Rows { per_block } => outer.div_ceil(per_block as usize),
            other => panic!("{entry}: {other:?}"),
        };
        (Dim3::linear(u32::try_from(blocks).unwrap()), k.block)
    }

    const REDUCTIONS: [(&str, ReduceOp); 6] = [
        ("tw_reduce_sum_f32", ReduceOp::Sum),
        ("tw_reduce_max_f32", ReduceOp::Max),
        ("tw_reduce_mean_f32", ReduceOp::Mean),
        ("tw_reduce_sum_cols_f32", ReduceOp::Sum),
        ("tw_reduce_max_cols_f32", ReduceOp::Max),
        ("tw_reduce_mean_cols_f32", ReduceOp::Mean),
    ];
    const SOFTMAX: [&str; 3] = [
        "tw_softmax_rows_f32",
        "tw_softmax_f32",
        "tw_softmax_wide_f32",
    ];
    const LAYERNORM: [&str; 3] = [
        "tw_layernorm_rows_f32",
        "tw_layernorm_f32",
        "tw_layernorm_wide_f32",
    ];

    /// Every reduction entry on every shape (each entry is correct for any
    /// size; the table picks by `inner`), x one element off alignment.
    #[test]
    fn reductions_match_the_oracle() {
        let (rig, mut rng) = (Rig::new(), Rng::new("reduce"));
        let shapes = [
            (1, 1, 1),
            (1, 17, 1),
            (3, 1000, 1),
            (4, 17, 5),
            (2, 1000, 3),
            (5, 1, 7),
            (1, 100_003, 1),
            // Strips: inner a multiple of 32, not one, and past one strip;
            // n past the GPU's 16 x 32 rows per trip.
            (1, 600, 64),
            (2, 333, 65),
            (1, 1100, 40),
            (3, 2, 31),
        ];
        for (outer, n, inner) in shapes {
            let x = rng.values(outer * n * inner, 1.0);
            let x_buf = rig.f32s(&x, 4);
            let xw = oracle::widen(&x);
            let abs: Vec<f64> = xw.iter().map(|v| v.abs()).collect();
            for (entry, op) in REDUCTIONS {
                let y_buf = rig.f32s(&vec![f32::NAN; outer * inner], 0);
                let params = [
                    x_buf.param(),
                    y_buf.param(),
                    i32p(outer),
                    i32p(n),
                    i32p(inner),
                ];
                let (grid, block) = table_launch(entry, outer, inner);
                rig.launch(entry, grid, block, &params).unwrap();
                let got = rig.read(&y_buf, outer * inner);
                let want = oracle::reduce(&xw, outer, n, inner, op);
                let checked = match op {
                    ReduceOp::Max => oracle::check_close(&got, &want, 0.0, 0.0),
                    ReduceOp::Sum | ReduceOp::Mean => {
                        let magnitude = oracle::reduce(&abs, outer, n, inner, op);
                        oracle::check_close_scaled(&got, &want, &magnitude, oracle::f32_sum_rtol(n))
                    }
                };
                checked.unwrap_or_else(|e| panic!("{entry} [{outer}, {n}, {inner}]: {e}"));
            }
        }
    }

    /// Every softmax entry on rows short and long for it (held in
    /// registers or not on the GPU), odd row counts and lengths, x one
    /// element off alignment for some.
    #[test]
    fn softmax_matches_the_oracle() {
        let (rig, mut rng) = (Rig::new(), Rng::new("softmax"));
        for (rows, cols, scale, skew) in [
            (1, 1, 1.0, 4),
            (3, 17, 1.0, 4),
            (4, 1000, 10.0, 4),
            (13, 1024, 10.0, 0),
            (9, 1023, 10.0, 0),
            (2, 5000, 30.0, 4),
            (3, 8193, 10.0, 0),
            (2, 16384, 10.0, 4),
            (1, 16388, 10.0, 0),
        ] {
            let x = rng.values(rows * cols, scale);
            let x_buf = rig.f32s(&x, skew);
            let want = oracle::softmax(&oracle::widen(&x), rows, cols);
            let (rtol, atol) = oracle::softmax_tolerance(cols);
            for entry in SOFTMAX {
                let y_buf = rig.f32s(&vec![f32::NAN; rows * cols], 0);
                let params = [x_buf.param(), y_buf.param(), i32p(rows), i32p(cols)];
                let (grid, block) = table_launch(entry, rows, 1);
                rig.launch(entry, grid, block, &params).unwrap();
                let got = rig.read(&y_buf, rows * cols);
                oracle::check_close(&got, &want, rtol, atol)
                    .unwrap_or_else(|e| panic!("{entry} [{rows}, {cols}]: {e}"));
            }
        }
    }

    #[test]
    fn layernorm_matches_the_oracle() {
        let (rig, mut rng) = (Rig::new(), Rng::new("layernorm"));
        for (rows, cols, shift) in [
            (1, 1, 0.0),
            (3, 17, 0.0),
            (4, 1000, 0.0),
            (2, 3000, 5.0),
            (13, 1024, 100.0),
            (9, 1023, 0.0),
            (3, 8193, 5.0),
            (2, 16384, 0.0),
        ] {
            let x: Vec<f32> = rng
                .values(rows * cols, 1.0)
                .iter()
                .map(|v| v + shift)
                .collect();
            let (gamma, beta) = (rng.values(cols, 2.0), rng.values(cols, 1.0));
            let eps = 1e-5f32;
            let bufs = [rig.f32s(&x, 0), rig.f32s(&gamma, 4), rig.f32s(&beta, 8)];
            let (xw, gw, bw) = (
                oracle::widen(&x),
                oracle::widen(&gamma),
                oracle::widen(&beta),
            );
            let eps64 = f64::from(eps);
            let want = oracle::layernorm(&xw, &gw, &bw, rows, cols, eps64);
            let magnitude = oracle::layernorm_magnitude(&xw, &gw, &bw, rows, cols, eps64);
            for entry in LAYERNORM {
                let y_buf = rig.f32s(&vec![f32::NAN; rows * cols], 4);
                let params = [
                    bufs[0].param(),
                    bufs[1].param(),
                    bufs[2].param(),
                    y_buf.param(),
                    i32p(rows),
                    i32p(cols),
                    KernelParam::F32(eps),
                ];
                let (grid, block) = table_launch(entry, rows, 1);
                rig.launch(entry, grid, block, &params).unwrap();
                let got = rig.read(&y_buf, rows * cols);
                oracle::check_close_scaled(&got, &want, &magnitude, oracle::layernorm_rtol(cols))
                    .unwrap_or_else(|e| panic!("{entry} [{rows}, {cols}]: {e}"));
            }
        }
    }

    /// A block computes its own share and nothing else: a grid one block
    /// short of the contract's leaves exactly the last block's rows (8 per
    /// block of a `_rows` op) or strip (32 outputs of a `_cols` reduction)
    /// unwritten.
    #[test]
    fn row_and_strip_blocks_write_only_their_share() {
        let rig = Rig::new();
        let (rows, cols) = (20, 5);
        let x = rig.f32s(&vec![1.0; rows * cols], 0);
        let ones = rig.f32s(&vec![1.0; cols], 0);
        for entry in [SOFTMAX[0], LAYERNORM[0]] {
            let y = rig.f32s(&vec![f32::NAN; rows * cols], 0);
            let mut params = vec![x.param(), y.param(), i32p(rows), i32p(cols)];
            if entry == LAYERNORM[0] {
                params.splice(1..1, [ones.param(), ones.param()]);
                params.push(KernelParam::F32(1e-5));
            }
            rig.launch(entry, Dim3::linear(2), BLOCK_256, &params)
                .unwrap();
            let got = rig.read(&y, rows * cols);
            for (r, row) in got.chunks(cols).enumerate() {
                assert_eq!(row.iter().all(|v| !v.is_nan()), r < 16, "{entry} row {r}");
            }
        }
        let (outer, n, inner) = (2, 3, 70);
        let x = rig.f32s(&vec![1.0; outer * n * inner], 0);
        let y = rig.f32s(&vec![f32::NAN; outer * inner], 0);
        let params = [x.param(), y.param(), i32p(outer), i32p(n), i32p(inner)];
        // Strips of 32: blocks 0..3 are outer index 0, 3..6 outer index 1;
        // block 5 (y[1, 64..70]) does not run.
        rig.launch(
            "tw_reduce_sum_cols_f32",
            Dim3::linear(5),
            BLOCK_256,
            &params,
        )
        .unwrap();
        let got = rig.read(&y, outer * inner);
        for (i, v) in got.iter().enumerate() {
            let written = i < inner + 64;
            assert_eq!(!v.is_nan(), written, "y[{i}]");
            if written {
                assert_eq!(*v, 3.0, "y[{i}]");
            }
        }
    }

    // -----------------------------------------------------------------------
    // Elementwise, transpose
    // -----------------------------------------------------------------------

    #[test]
    fn add_and_mul_broadcast_b() {
        let (rig, mut rng) = (Rig::new(), Rng::new("add_mul"));
        // (n, b_period, grid): the contract's grid unless given; 20000 with
        // period 5000 has runs that wrap around B and runs that do not.
        let cases = [
            (1, 1, None),
            (17, 17, None),
            (17, 1, None),
            (1000, 17, None),
            (1000, 1000, None),
            (20_000, 5000, None),
            (100_003, 100_003, Some(3)),
            (100_003, 7, None),
            (5, 5, Some(7)),
        ];
        for (n, period, grid) in cases {
            let (a, b) = (rng.values(n, 4.0), rng.values(period, 4.0));
            let (a_buf, b_buf) = (rig.f32s(&a, 4), rig.f32s(&b, 1));
            let grid = grid.map_or_else(|| elementwise_grid(n), Dim3::linear);
            for (entry, want) in [
                (
                    "tw_add_f32",
                    oracle::add(&oracle::widen(&a), &oracle::widen(&b), period),
                ),
                (
                    "tw_mul_f32",
                    oracle::mul(&oracle::widen(&a), &oracle::widen(&b), period),
                ),
            ] {
                let y_buf = rig.f32s(&vec![f32::NAN; n], 12);
                let params = [
                    a_buf.param(),
                    b_buf.param(),
                    y_buf.param(),
                    i64p(n as i64),
                    i64p(period as i64),
                ];
                rig.launch(entry, grid, BLOCK_256, &params).unwrap();
                let got = rig.read(&y_buf, n);
                oracle::check_close(&got, &want, F32_ROUNDED_RTOL, 0.0).unwrap_or_else(|e| {
                    panic!("{entry} n {n}, period {period}, grid {grid:?}: {e}")
                });
            }
        }
    }

    #[test]
    fn relu_and_gelu_match_the_oracle() {
        let (rig, mut rng) = (Rig::new(), Rng::new("relu_gelu"));
        for n in [1usize, 17, 1000, 100_003] {
            let mut x = rng.values(n, 8.0);
            // Edge values (GELU of -inf is NaN on the GPU, 0 * inf).
            let edges = [-0.0, 1e-30, -1e-30, 20.0, -20.0, f32::NAN];
            for (slot, edge) in x.iter_mut().zip(edges) {
                *slot = edge;
            }
            // Managed memory for the input: the kernels take any live memory.
            let x_buf = {
                let memory = rig.driver.alloc_managed(4 * n + 4).unwrap();
                let mut bytes = vec![0xa5; 4];
                bytes.extend(x.iter().flat_map(|v| v.to_le_bytes()));
                rig.driver.copy_to_device(memory.full(), &bytes).unwrap();
                Buffer { memory, offset: 4 }
            };
            let xw = oracle::widen(&x);
            for (entry, want, (rtol, atol)) in [
                ("tw_relu_f32", oracle::relu(&xw), (0.0, 0.0)),
                ("tw_gelu_f32", oracle::gelu(&xw), GELU_TOLERANCE),
            ] {
                let y_buf = rig.f32s(&vec![f32::NAN; n], 2);
                let params = [x_buf.param(), y_buf.param(), i64p(n as i64)];
                rig.launch(entry, elementwise_grid(n), BLOCK_256, &params)
                    .unwrap();
                let got = rig.read(&y_buf, n);
                oracle::check_close(&got, &want, rtol, atol)
                    .unwrap_or_else(|e| panic!("{entry} n {n}: {e}"));
                if entry == "tw_gelu_f32" {
                    // Rounded once from f64: within an ulp, far inside the
                    // tolerance the GPU needs.
                    oracle::check_close(&got, &want, F32_UNIT_ROUNDOFF, 1e-45)
                        .unwrap_or_else(|e| panic!("{entry} n {n}: {e}"));
                }
            }
        }
    }

    #[test]
    fn transpose_moves_every_tile() {
        let (rig, mut rng) = (Rig::new(), Rng::new("transpose"));
        for (batch, rows, cols) in [
            (1, 1, 1),
            (2, 17, 33),
            (3, 100, 37),
            (1, 1000, 3),
            (1, 3, 1000),
        ] {
            let x = rng.values(batch * rows * cols, 1.0);
            let x_buf = rig.f32s(&x, 4);
            let y_buf = rig.f32s(&vec![f32::NAN; x.len()], 0);
            let grid = Dim3 {
                x: cols.div_ceil(32) as u32,
                y: rows.div_ceil(32) as u32,
                z: batch as u32,
            };
            let params = [x_buf.param(), y_buf.param(), i32p(rows), i32p(cols)];
            rig.launch(
                "tw_transpose_f32",
                grid,
                Dim3 { x: 32, y: 8, z: 1 },
                &params,
            )
            .unwrap();
            let got = rig.read(&y_buf, x.len());
            let want = oracle::transpose(&oracle::widen(&x), rows, cols);
            oracle::check_close(&got, &want, 0.0, 0.0)
                .unwrap_or_else(|e| panic!("transpose [{batch}, {rows}, {cols}]: {e}"));
        }
    }

    // -----------------------------------------------------------------------
    // Refusals
    // -----------------------------------------------------------------------

    /// The launch fails at synchronize, with `what` in its message.
    fn assert_fails(result: Result<(), CpuError>, what: &str) {
        let err = result.expect_err("the launch should fail");
        assert_eq!(err.kind(), ErrorKind::LaunchFailed, "{err}");
        assert!(err.to_string().contains(what), "{err}");
    }

    #[test]
    fn an_operand_past_its_allocation_fails_the_launch_untouched() {
        let mut rng = Rng::new("past_allocation");
        let (m, n, k) = (100, 50, 20);
        // A is one element short of M rows.
        let rig = Rig::new();
        let a = rig.f32s(&rng.values(m * k - 1, 1.0), 0);
        let b = rig.f32s(&rng.values(k * n, 1.0), 0);
        let c_init = rng.values(m * n, 1.0);
        let c = rig.f32s(&c_init, 0);
        let params = dense_gemm_params([&a, &b, &c], m, n, k);
        let result = rig.launch("tw_gemm_f32", Dim3::linear(1), BLOCK_256, &params);
        assert_fails(result, "tw_gemm_f32: A: 8000 bytes at");
        assert_eq!(rig.read(&c, m * n), c_init, "C was written");

        // y one element short: the last block's run leaves it.
        let n = 5000;
        let (x, y) = (
            rig.f32s(&rng.values(n, 1.0), 0),
            rig.f32s(&vec![0.5; n - 1], 0),
        );
        let params = [x.param(), y.param(), i64p(n as i64)];
        let result = rig.launch("tw_relu_f32", elementwise_grid(n), BLOCK_256, &params);
        assert_fails(result, "outside the driver's live memory");

        // B's batch stride walks off B.
        let (a, b, c) = (
            rig.f32s(&[1.0; 4], 0),
            rig.f32s(&[1.0; 4], 0),
            rig.f32s(&[1.0; 8], 0),
        );
        let mut params = [
            a.param(),
            b.param(),
            c.param(),
            i32p(2),
            i32p(2),
            i32p(2),
            i64p(2),
            i64p(2),
            i64p(2),
            i64p(0),
            i64p(4),
            i64p(4),
            KernelParam::F32(1.0),
            KernelParam::F32(0.0),
        ];
        let result = rig.launch("tw_gemm_f32", Dim3 { x: 1, y: 1, z: 2 }, BLOCK_256, &params);
        assert_fails(result, "B: 16 bytes at");
        // A batch stride whose offsets overflow (in elements for batch 2,
        // in bytes for batch 1).
        params[9] = i64p(i64::MAX);
        let result = rig.launch("tw_gemm_f32", Dim3 { x: 1, y: 1, z: 3 }, BLOCK_256, &params);
        assert_fails(result, "offset overflows");
    }

    #[test]
    fn bad_parameters_fail_the_launch() {
        let rig = Rig::new();
        let (x, y) = (rig.f32s(&[1.0; 16], 0), rig.f32s(&[1.0; 16], 0));
        let cases: [(&str, Vec<KernelParam>, &str); 5] = [
            (
                "tw_relu_f32",
                vec![x.param(), y.param(), i64p(0)],
                "tw_relu_f32: n must be positive, got 0",
            ),
            (
                "tw_relu_f32",
                vec![x.param(), y.param()],
                "tw_relu_f32: takes 3 parameters, got 2",
            ),
            (
                "tw_relu_f32",
                vec![x.param(), i64p(1), i64p(1)],
                "tw_relu_f32: y must be a pointer",
            ),
            (
                "tw_softmax_f32",
                vec![x.param(), y.param(), i32p(4), KernelParam::I32(-4)],
                "cols must be positive, got -4",
            ),
            (
                "tw_add_f32",
                vec![
                    x.param(),
                    x.param(),
                    y.param(),
                    KernelParam::I32(16),
                    i64p(1),
                ],
                "n must be a long long",
            ),
        ];
        for (entry, params, what) in cases {
            assert_fails(rig.launch(entry, Dim3::linear(1), BLOCK_256, &params), what);
        }
        // C's batches may not overlap (two blocks would write one element).
        let (a, b, c) = (
            rig.f32s(&[1.0; 4], 0),
            rig.f32s(&[1.0; 4], 0),
            rig.f32s(&[1.0; 8], 0),
        );
        let params = [
            a.param(),
            b.param(),
            c.param(),
            i32p(2),
            i32p(2),
            i32p(2),
            i64p(2),
            i64p(2),
            i64p(2),
            i64p(0),
            i64p(0),
            i64p(3),
            KernelParam::F32(1.0),
            KernelParam::F32(0.0),
        ];
        let result = rig.launch("tw_gemm_f32", Dim3 { x: 1, y: 1, z: 2 }, BLOCK_256, &params);
        assert_fails(result, "sC = 3 makes C's batches (4 elements each) overlap");
    }
}
