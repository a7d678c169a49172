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
mod tests;
