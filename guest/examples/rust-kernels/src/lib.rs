//! Example TensorWasm guest: kernels written in Rust. Each kernel is an
//! ordinary `extern "C" fn` of this guest (modules `kernels`, `coop`), made
//! a GPU kernel by the host with [`Kernel::from_fn`] (by function pointer)
//! or [`Kernel::from_export`], launched over slices of the guest's own
//! memory, and checked element by element against the same Rust run on the
//! guest's CPU: the kernel's per-thread function (`kernels::*_at`) called in a loop
//! over thread ids, or for the cooperative kernels (`coop`: shared memory,
//! barriers, warp shuffles) a reference that does the same arithmetic in
//! the same order. Inputs are random (xorshift32, fixed seeds), never
//! zeros; outputs start as NaN, so an element no thread wrote shows.
//!
//! Exports, each `() -> i32`:
//!
//! | export | kernel | what Rust emits that the translator must take |
//! | --- | --- | --- |
//! | `run_saxpy_unchecked` | `kernels::saxpy_unchecked`, by export name and by function pointer | raw pointers only: no stack frame, no panic path |
//! | `run_saxpy` | `kernels::saxpy`, strided | slices and bounds checks (a panic path) |
//! | `run_matmul` | `kernels::matmul` | `/` and `%` with Rust's division-by-zero check |
//! | `run_row_sums` | `kernels::row_sums` | a local `[f32; 8]` indexed at run time: the shadow stack (`__stack_pointer`) |
//! | `run_pad_rows` | `kernels::pad_rows` | `copy_from_slice` and `fill`: `memory.copy`, `memory.fill` |
//! | `run_activations` | `kernels::activate`, once per activation | a `dyn Trait` call: `call_indirect` through the table |
//! | `run_histogram` | `kernels::histogram`, 256 bins | atomic adds on guest memory from many threads (`tensorwasm_guest::atomic`) |
//! | `run_atomic_dot` | `kernels::atomic_dot` | an `f32` atomic add and an `i32` one into single words |
//! | `run_block_reduce` | `coop::block_reduce`, 100,003 `f32`s in 391 blocks of 256 | shared memory, barriers in a loop, one global atomic add per block |
//! | `run_tiled_sgemm` | `coop::tiled_sgemm`, `[70, 83] @ [83, 45]` in 16 x 16 tiles | two shared arrays, 2D blocks, barriers around each tile |
//! | `run_shared_histogram` | `coop::shared_histogram`, 100,003 bytes, 256 bins | shared atomic adds, then global ones per block |
//! | `run_softmax` | `coop::softmax`, `[37, 1000]`, a warp per row | `shfl_xor` butterflies (max, sum), `libm::expf` |
//! | `run_inclusive_scan` | `coop::scan_blocks` twice, then `coop::add_block_offsets`, 60,001 `i32`s | `shfl_up` scans, warp totals in shared memory |
//! | `run_panicking_gather` | `kernels::gather`, one index out of range | a panic in a kernel: the `unreachable` trap (returns `-15`, `ETRAP`, when the kernel trapped and the other threads' elements are right) |
//!
//! Each returns 0 when every element matched bit for bit, `i + 1` for the
//! first element `i` that did not, or minus the errno when a `wasi_cuda`
//! call failed (`-8`, `ENOTSUP`, when the host cannot make the kernel;
//! `-15`, `ETRAP`, when a kernel thread trapped). The host reads
//! `last_error` for the text.
//!
//! `#![no_std]`: a kernel's panic path must stay a trap, not std's panic
//! machinery (`runtime`: the panic handler and the allocator).

#![cfg_attr(not(test), no_std)]

extern crate alloc;

// Private: a kernel is a safe `extern "C" fn` that trusts its pointer
// arguments, which only this crate's launches (slices of the lengths it
// passes) may give it.
mod coop;
mod kernels;
#[cfg(not(test))]
mod runtime;

use alloc::vec::Vec;

use coop::{AddBlockOffsets, BlockReduce, ScanBlocks, SharedHistogram, Softmax, TiledSgemm};
use kernels::{
    Activate, AtomicDot, Gather, Histogram, Matmul, PadRows, RowSums, Saxpy, SaxpyUnchecked,
};
use tensorwasm_guest::{Error, Kernel, warp};

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

    /// `n` values of [`Xorshift32::next_f32`].
    fn vec(&mut self, n: usize) -> Vec<f32> {
        (0..n).map(|_| self.next_f32()).collect()
    }
}

/// The export's return value: 0, the first mismatch `i + 1`, or `-errno`.
fn status(checked: Result<Option<usize>, Error>) -> i32 {
    match checked {
        Ok(None) => 0,
        Ok(Some(i)) => i32::try_from(i + 1).unwrap_or(i32::MAX),
        Err(e) => e.negative_errno(),
    }
}

/// The first `i` where `got[i]` is not bit for bit `want[i]`.
fn first_mismatch(got: &[f32], want: &[f32]) -> Option<usize> {
    if got.len() != want.len() {
        return Some(got.len().min(want.len()));
    }
    (0..got.len()).find(|&i| got[i].to_bits() != want[i].to_bits())
}

/// The first `i` where `got[i] != want[i]`.
fn first_unequal<T: PartialEq>(got: &[T], want: &[T]) -> Option<usize> {
    if got.len() != want.len() {
        return Some(got.len().min(want.len()));
    }
    (0..got.len()).find(|&i| got[i] != want[i])
}

/// Blocks of [`BLOCK`] threads covering `threads`.
fn grid(threads: u32) -> u32 {
    threads.div_ceil(BLOCK)
}

/// Contiguous SAXPY with raw pointers: the kernel named by its export,
/// then the same function named by its function pointer (one kernel on
/// the host); each launch checked. A mismatch of the second launch is
/// `n + i + 1`.
#[unsafe(no_mangle)]
pub extern "C" fn run_saxpy_unchecked() -> i32 {
    status(saxpy_unchecked(4099, 0x5eed_0001))
}

fn saxpy_unchecked(n: u32, seed: u32) -> Result<Option<usize>, Error> {
    let mut rng = Xorshift32(seed);
    let a = rng.next_f32();
    let x = rng.vec(n as usize);
    let by_export = Kernel::<SaxpyUnchecked>::from_export("saxpy_unchecked")?;
    let by_pointer = Kernel::<SaxpyUnchecked>::from_fn(kernels::saxpy_unchecked)?;
    for (launch, k) in [by_export, by_pointer].iter().enumerate() {
        let mut y = rng.vec(n as usize);
        let want: Vec<f32> = x.iter().zip(&y).map(|(x, y)| a * x + y).collect();
        k.launch(grid(n), BLOCK, (n, a, &x, &mut y)).run()?;
        if let Some(i) = first_mismatch(&y, &want) {
            return Ok(Some(launch * n as usize + i));
        }
    }
    Ok(None)
}

/// Strided SAXPY over slices. Elements of `y` between the strided ones
/// must stay as they were.
#[unsafe(no_mangle)]
pub extern "C" fn run_saxpy() -> i32 {
    status(saxpy(1000, 2, 3, 0x5eed_0002))
}

fn saxpy(n: u32, incx: u32, incy: u32, seed: u32) -> Result<Option<usize>, Error> {
    let mut rng = Xorshift32(seed);
    let a = rng.next_f32();
    let x = rng.vec((1 + (n - 1) * incx) as usize);
    let mut y = rng.vec((1 + (n - 1) * incy) as usize);
    let mut want = y.clone();
    for i in 0..n as usize {
        kernels::saxpy_at(i, a, &x, incx as usize, &mut want[i * incy as usize]);
    }
    let (x_len, y_len) = (x.len() as u32, y.len() as u32);
    let k = Kernel::<Saxpy>::from_fn(kernels::saxpy)?;
    k.launch(grid(n), BLOCK, (n, a, &x, x_len, incx, &mut y, y_len, incy))
        .run()?;
    Ok(first_mismatch(&y, &want))
}

/// Naive matmul, `[37, 19] @ [19, 23]`.
#[unsafe(no_mangle)]
pub extern "C" fn run_matmul() -> i32 {
    status(matmul(37, 19, 23, 0x5eed_0003))
}

fn matmul(m: u32, k: u32, n: u32, seed: u32) -> Result<Option<usize>, Error> {
    let mut rng = Xorshift32(seed);
    let a = rng.vec((m * k) as usize);
    let b = rng.vec((k * n) as usize);
    let want: Vec<f32> = (0..m * n)
        .map(|t| kernels::matmul_at(t, &a, &b, k, n))
        .collect();
    let mut c = alloc::vec![f32::NAN; (m * n) as usize];
    let kernel = Kernel::<Matmul>::from_fn(kernels::matmul)?;
    kernel
        .launch(grid(m * n), BLOCK, (&a, &b, &mut c, m, k, n))
        .run()?;
    Ok(first_mismatch(&c, &want))
}

/// Row sums of `[45, 77]` on a stack array of partial sums.
#[unsafe(no_mangle)]
pub extern "C" fn run_row_sums() -> i32 {
    status(row_sums(45, 77, 0x5eed_0004))
}

fn row_sums(rows: u32, cols: u32, seed: u32) -> Result<Option<usize>, Error> {
    let mut rng = Xorshift32(seed);
    let x = rng.vec((rows * cols) as usize);
    let want: Vec<f32> = (0..rows as usize)
        .map(|r| kernels::row_sum_at(r, &x, cols as usize))
        .collect();
    let mut out = alloc::vec![f32::NAN; rows as usize];
    let k = Kernel::<RowSums>::from_fn(kernels::row_sums)?;
    k.launch(grid(rows), BLOCK, (&x, rows, cols, &mut out))
        .run()?;
    Ok(first_mismatch(&out, &want))
}

/// A 256-bin histogram of random values, each bin an atomic counter; the
/// bins against a count on the CPU. A wrong bin `b` is `b + 1`.
#[unsafe(no_mangle)]
pub extern "C" fn run_histogram() -> i32 {
    status(histogram(100_003, 0x5eed_0007))
}

fn histogram(n: u32, seed: u32) -> Result<Option<usize>, Error> {
    let mut rng = Xorshift32(seed);
    // Skewed, so some bins are hot: the low bits of a product.
    let values: Vec<u32> = (0..n)
        .map(|_| rng.next_u32() % 1000 * (rng.next_u32() % 7))
        .collect();
    let mut want = alloc::vec![0u32; kernels::BINS as usize];
    for v in &values {
        want[(v % kernels::BINS) as usize] += 1;
    }
    // Not zeros: the kernel adds to what is there.
    let mut bins = alloc::vec![3u32; kernels::BINS as usize];
    let k = Kernel::<Histogram>::from_fn(kernels::histogram)?;
    k.launch(grid(n), BLOCK, (&values, n, &mut bins)).run()?;
    Ok((0..want.len()).find(|&b| bins[b] != want[b] + 3))
}

/// A dot product of small integers by atomic adds (exact in any order),
/// and the count of threads that added: 1 for a wrong sum, 2 for a wrong
/// count.
#[unsafe(no_mangle)]
pub extern "C" fn run_atomic_dot() -> i32 {
    status(atomic_dot(50_001, 0x5eed_0008))
}

fn atomic_dot(n: u32, seed: u32) -> Result<Option<usize>, Error> {
    let mut rng = Xorshift32(seed);
    let mut small = || (rng.next_u32() % 17) as f32 - 8.0;
    let x: Vec<f32> = (0..n).map(|_| small()).collect();
    let y: Vec<f32> = (0..n).map(|_| small()).collect();
    let want: f32 = x.iter().zip(&y).map(|(a, b)| a * b).sum::<f32>() + 0.5;
    let (mut out, mut count) = ([0.5f32], [-7i32]);
    let k = Kernel::<AtomicDot>::from_fn(kernels::atomic_dot)?;
    k.launch(grid(n), BLOCK, (&x, &y, n, &mut out[..], &mut count[..]))
        .run()?;
    Ok(if out[0].to_bits() != want.to_bits() {
        Some(0)
    } else if count[0] != n as i32 - 7 {
        Some(1)
    } else {
        None
    })
}

/// Rows of `[33, 13]` copied into `[33, 20]`, the rest zero-filled, and
/// the mask of data elements; a mismatch in the mask is `33 * 20 + i + 1`.
#[unsafe(no_mangle)]
pub extern "C" fn run_pad_rows() -> i32 {
    status(pad_rows(33, 13, 20, 0x5eed_0005))
}

fn pad_rows(rows: u32, src_cols: u32, dst_cols: u32, seed: u32) -> Result<Option<usize>, Error> {
    let mut rng = Xorshift32(seed);
    let src = rng.vec((rows * src_cols) as usize);
    let (sc, dc) = (src_cols as usize, dst_cols as usize);
    let len = rows as usize * dc;
    let mut want = alloc::vec![f32::NAN; len];
    let mut want_valid = alloc::vec![7u8; len];
    for (r, (row, valid)) in want
        .chunks_mut(dc)
        .zip(want_valid.chunks_mut(dc))
        .enumerate()
    {
        kernels::pad_row_at(r, &src, sc, row, valid);
    }
    // Not zeros and not NaN: a pad the kernel did not fill shows; 7 is
    // neither mark.
    let mut dst = rng.vec(len);
    let mut valid = alloc::vec![7u8; len];
    let k = Kernel::<PadRows>::from_fn(kernels::pad_rows)?;
    k.launch(
        grid(rows),
        BLOCK,
        (&src, rows, src_cols, &mut dst, dst_cols, &mut valid),
    )
    .run()?;
    if let Some(i) = first_mismatch(&dst, &want) {
        return Ok(Some(i));
    }
    // Past the data: the mask's elements count after the rows'.
    Ok((0..len)
        .find(|&i| valid[i] != want_valid[i])
        .map(|i| len + i))
}

/// Every activation of `kernels::ACTIVATIONS` over 999 elements, one
/// launch each; the first mismatch is counted over all launches.
#[unsafe(no_mangle)]
pub extern "C" fn run_activations() -> i32 {
    status(activations(999, 0x5eed_0006))
}

fn activations(n: u32, seed: u32) -> Result<Option<usize>, Error> {
    let mut rng = Xorshift32(seed);
    // Scaled to [-2, 2): both sides of every activation's bends.
    let x: Vec<f32> = rng.vec(n as usize).iter().map(|v| v * 2.0).collect();
    let k = Kernel::<Activate>::from_fn(kernels::activate)?;
    for (kind, act) in kernels::ACTIVATIONS.iter().enumerate() {
        let want: Vec<f32> = (0..n as usize)
            .map(|i| kernels::activate_at(i, *act, &x))
            .collect();
        let mut y = alloc::vec![f32::NAN; n as usize];
        k.launch(grid(n), BLOCK, (kind as u32, &x, &mut y, n))
            .run()?;
        if let Some(i) = first_mismatch(&y, &want) {
            return Ok(Some(kind * n as usize + i));
        }
    }
    Ok(None)
}

/// A gather whose index 77 is past `x`: thread 77 panics (the kernel traps
/// `unreachable`), every other thread's element must still be right.
/// Returns what `run` returned (`-15`, `ETRAP`, expected) when the others
/// match, else the first wrong element `i + 1`.
#[unsafe(no_mangle)]
pub extern "C" fn run_panicking_gather() -> i32 {
    let n = 200u32;
    let mut rng = Xorshift32(0x5eed_0007);
    let x = rng.vec(50);
    let mut idx: Vec<u32> = (0..n).map(|_| rng.next_u32() % 50).collect();
    idx[77] = 50;
    let mut out = alloc::vec![f32::NAN; n as usize];
    let launched = Kernel::<Gather>::from_fn(kernels::gather).and_then(|k| {
        k.launch(grid(n), BLOCK, (&x, x.len() as u32, &idx, &mut out, n))
            .run()
    });
    let wrong = (0..n as usize)
        .filter(|&i| i != 77)
        .find(|&i| out[i].to_bits() != x[idx[i] as usize].to_bits());
    match (wrong, launched) {
        (Some(i), _) => i32::try_from(i + 1).unwrap_or(i32::MAX),
        (None, Ok(())) => 0,
        (None, Err(e)) => e.negative_errno(),
    }
}

/// A block tree reduction of 100,003 `f32`s (391 blocks of 256, the last
/// one partial): each block's sum against the same tree on the CPU, then
/// the count of blocks done (one atomic add per block). A wrong sum of
/// block `b` is `b + 1`, a wrong count `392`.
#[unsafe(no_mangle)]
pub extern "C" fn run_block_reduce() -> i32 {
    status(block_reduce(100_003, 0x5eed_0009))
}

fn block_reduce(n: u32, seed: u32) -> Result<Option<usize>, Error> {
    let mut rng = Xorshift32(seed);
    let x = rng.vec(n as usize);
    let want = coop::reference_block_reduce(&x);
    let blocks = n.div_ceil(coop::BLOCK);
    let mut partials = alloc::vec![f32::NAN; blocks as usize];
    // Not zero: the kernel adds to what is there.
    let mut done = [-7i32];
    let k = Kernel::<BlockReduce>::from_fn(coop::block_reduce)?;
    k.launch(blocks, coop::BLOCK, (&x, n, &mut partials, &mut done[..]))
        .shared_mem(coop::BLOCK_REDUCE_SHARED)
        .run()?;
    if let Some(b) = first_mismatch(&partials, &want) {
        return Ok(Some(b));
    }
    Ok((done[0] != blocks as i32 - 7).then_some(blocks as usize))
}

/// `[70, 83] @ [83, 45]` in 16 x 16 tiles of shared memory: no size a
/// multiple of the tile, so every block of the last row and column of
/// tiles pads.
#[unsafe(no_mangle)]
pub extern "C" fn run_tiled_sgemm() -> i32 {
    status(tiled_sgemm(70, 83, 45, 0x5eed_000a))
}

fn tiled_sgemm(m: u32, k: u32, n: u32, seed: u32) -> Result<Option<usize>, Error> {
    let mut rng = Xorshift32(seed);
    let a = rng.vec((m * k) as usize);
    let b = rng.vec((k * n) as usize);
    let want = coop::reference_tiled_sgemm(&a, &b, m as usize, k as usize, n as usize);
    let mut c = alloc::vec![f32::NAN; (m * n) as usize];
    let tile = coop::TILE;
    let kernel = Kernel::<TiledSgemm>::from_fn(coop::tiled_sgemm)?;
    kernel
        .launch(
            (n.div_ceil(tile), m.div_ceil(tile)),
            (tile, tile),
            (&a, &b, &mut c, m, k, n),
        )
        .shared_mem(coop::TILED_SGEMM_SHARED)
        .run()?;
    Ok(first_mismatch(&c, &want))
}

/// A 256-bin histogram of 100,003 bytes by 24 blocks, each counting into
/// its own bins in shared memory first. A wrong bin `b` is `b + 1`.
#[unsafe(no_mangle)]
pub extern "C" fn run_shared_histogram() -> i32 {
    status(shared_histogram(100_003, 24, 0x5eed_000b))
}

fn shared_histogram(n: u32, blocks: u32, seed: u32) -> Result<Option<usize>, Error> {
    let mut rng = Xorshift32(seed);
    // Skewed to the low bins (the high byte of a product of two random
    // bytes), so some bins are hot and bin 255 stays empty.
    let values: Vec<u8> = (0..n)
        .map(|_| {
            let r = rng.next_u32();
            (((r & 0xff) * ((r >> 8) & 0xff)) >> 8) as u8
        })
        .collect();
    let want = coop::reference_histogram(&values);
    // Not zeros: the kernel adds to what is there.
    let mut bins = alloc::vec![3u32; kernels::BINS as usize];
    let k = Kernel::<SharedHistogram>::from_fn(coop::shared_histogram)?;
    k.launch(blocks, coop::BLOCK, (&values, n, &mut bins))
        .shared_mem(coop::SHARED_HISTOGRAM_SHARED)
        .run()?;
    Ok((0..want.len()).find(|&b| bins[b] != want[b] + 3))
}

/// Softmax over each row of `[37, 1000]`, one warp per row (eight rows per
/// block of 256), the row's maximum and sum by `shfl_xor` butterflies.
#[unsafe(no_mangle)]
pub extern "C" fn run_softmax() -> i32 {
    status(softmax(37, 1000, 0x5eed_000c))
}

fn softmax(rows: u32, cols: u32, seed: u32) -> Result<Option<usize>, Error> {
    let mut rng = Xorshift32(seed);
    // Scaled to [-8, 8): exponentials over seven orders of magnitude.
    let x: Vec<f32> = rng
        .vec((rows * cols) as usize)
        .iter()
        .map(|v| v * 8.0)
        .collect();
    let want = coop::reference_softmax(&x, cols as usize);
    let mut y = alloc::vec![f32::NAN; (rows * cols) as usize];
    let rows_per_block = coop::BLOCK / warp::WARP_SIZE;
    let k = Kernel::<Softmax>::from_fn(coop::softmax)?;
    k.launch(
        rows.div_ceil(rows_per_block),
        coop::BLOCK,
        (&x, rows, cols, &mut y),
    )
    .run()?;
    Ok(first_mismatch(&y, &want))
}

/// The inclusive prefix sums (wrapping) of 60,001 `i32`s: `scan_blocks`
/// over 235 blocks, `scan_blocks` again over their totals in one block,
/// `add_block_offsets`. A wrong sum `i` is `i + 1`; a wrong grand total
/// (the second scan's block total) `60_002`.
#[unsafe(no_mangle)]
pub extern "C" fn run_inclusive_scan() -> i32 {
    status(inclusive_scan(60_001, 0x5eed_000d))
}

fn inclusive_scan(n: u32, seed: u32) -> Result<Option<usize>, Error> {
    let mut rng = Xorshift32(seed);
    // Over the whole range, never 0: the sums wrap again and again.
    let x: Vec<i32> = (0..n)
        .map(|_| match rng.next_u32() as i32 {
            0 => 1,
            v => v,
        })
        .collect();
    let want = coop::reference_inclusive_scan(&x);
    let blocks = n.div_ceil(coop::BLOCK);
    // One block scans the blocks' totals.
    assert!(
        blocks <= coop::BLOCK,
        "too many blocks for a two-level scan"
    );
    // Not zeros: an element no thread wrote shows.
    let unwritten = i32::MIN + 1;
    let mut y = alloc::vec![unwritten; n as usize];
    let mut totals = alloc::vec![unwritten; blocks as usize];
    let mut scanned = alloc::vec![unwritten; blocks as usize];
    let mut grand_total = [unwritten];
    let scan = Kernel::<ScanBlocks>::from_fn(coop::scan_blocks)?;
    let add = Kernel::<AddBlockOffsets>::from_fn(coop::add_block_offsets)?;
    scan.launch(blocks, coop::BLOCK, (&x, n, &mut y, &mut totals))
        .shared_mem(coop::SCAN_SHARED)
        .run()?;
    scan.launch(
        1,
        coop::BLOCK,
        (&totals, blocks, &mut scanned, &mut grand_total[..]),
    )
    .shared_mem(coop::SCAN_SHARED)
    .run()?;
    add.launch(blocks, coop::BLOCK, (&mut y, n, &scanned, blocks))
        .run()?;
    if let Some(i) = first_unequal(&y, &want) {
        return Ok(Some(i));
    }
    Ok((want.last() != Some(&grand_total[0])).then_some(n as usize))
}
