//! Cooperative kernels: threads of a block that share memory and wait for
//! each other (`tensorwasm_guest::block`), lanes of a warp that exchange
//! values (`tensorwasm_guest::warp`). A thread's result here depends on
//! its neighbours', so no per-thread function can be replayed on the CPU
//! as in `kernels`: next to each kernel is its CPU reference
//! (`reference_*`), plain Rust that does the same arithmetic in the same
//! order (the same tree, the same butterfly, the same `k` order), so that
//! the two agree bit for bit. The intrinsics trap outside a kernel, so a
//! reference calls none of them.
//!
//! Every kernel runs [`BLOCK`] threads per block and calls the barrier
//! where every thread of its block passes, the warp operations where every
//! lane of its warp does.

use alloc::vec::Vec;

use tensorwasm_guest::atomic::{self, AtomicI32, AtomicU32};
use tensorwasm_guest::block::{self, SharedArray};
use tensorwasm_guest::kernel;
use tensorwasm_guest::warp::{self, WARP_SIZE};

use crate::kernels::{BINS, atomic_view, input, output};

/// Threads per block of every kernel here: eight warps, and a power of two
/// (the tree reduction halves it).
pub const BLOCK: u32 = 256;

/// One partial sum per thread of a [`block_reduce`] block.
const PARTIALS: SharedArray<f32> = SharedArray::new(0, BLOCK);

/// The shared memory of a [`block_reduce`] launch, in bytes.
pub const BLOCK_REDUCE_SHARED: u32 = PARTIALS.end();

/// The launch's type of [`block_reduce`].
pub type BlockReduce = extern "C" fn(*const f32, u32, *mut f32, *mut i32);

/// `partials[b]` = the sum of block `b`'s [`BLOCK`] elements of `x` (0.0
/// past `n`), by halving a tree in shared memory between barriers; thread 0
/// of each block then counts the block done, one atomic add per block on
/// `blocks_done[0]`. `partials` has one element per block of the grid.
pub extern "C" fn block_reduce(x: *const f32, n: u32, partials: *mut f32, blocks_done: *mut i32) {
    let (t, i) = (kernel::thread_idx_x(), kernel::global_id_x());
    // SAFETY: the launch passes `x` (n elements) from a shared slice.
    let x = unsafe { input(x, n) };
    PARTIALS.set(t, if i < n { x[i as usize] } else { 0.0 });
    block::barrier();
    let mut half = BLOCK / 2;
    while half > 0 {
        if t < half {
            PARTIALS.set(t, PARTIALS.get(t) + PARTIALS.get(t + half));
        }
        block::barrier();
        half /= 2;
    }
    if t == 0 {
        let b = kernel::block_idx_x() as usize;
        // SAFETY: the launch passes `partials` (one per block) and
        // `blocks_done` (1) from exclusive slices; thread 0 of block `b`
        // alone writes `partials[b]`, and every thread touches
        // `blocks_done` only atomically.
        let (partial, done) = unsafe {
            (
                output(partials, kernel::grid_dim_x(), b, 1),
                atomic_view(blocks_done.cast::<AtomicI32>(), 1),
            )
        };
        partial[0] = PARTIALS.get(0);
        atomic::fetch_add_i32(&done[0], 1);
    }
}

/// [`block_reduce`]'s partial sums on the CPU: the same tree per block.
pub fn reference_block_reduce(x: &[f32]) -> Vec<f32> {
    x.chunks(BLOCK as usize)
        .map(|chunk| {
            let mut tree = [0.0f32; BLOCK as usize];
            tree[..chunk.len()].copy_from_slice(chunk);
            let mut half = BLOCK as usize / 2;
            while half > 0 {
                for t in 0..half {
                    tree[t] += tree[t + half];
                }
                half /= 2;
            }
            tree[0]
        })
        .collect()
}

/// The side of a [`tiled_sgemm`] tile; blocks are `TILE x TILE` threads.
pub const TILE: u32 = 16;

/// The tile of `A` a block works on: `[TILE, TILE]`, row-major.
const A_TILE: SharedArray<f32> = SharedArray::new(0, TILE * TILE);

/// The tile of `B`, after [`A_TILE`].
const B_TILE: SharedArray<f32> = A_TILE.followed_by(TILE * TILE);

/// The shared memory of a [`tiled_sgemm`] launch, in bytes.
pub const TILED_SGEMM_SHARED: u32 = B_TILE.end();

/// The launch's type of [`tiled_sgemm`].
pub type TiledSgemm = extern "C" fn(*const f32, *const f32, *mut f32, u32, u32, u32);

/// `C [m, n] = A [m, k] @ B [k, n]`, row-major, over `TILE x TILE` tiles in
/// shared memory: block `(bx, by)` computes the tile of `C` at rows
/// `by * TILE ..` and columns `bx * TILE ..`; each step loads one tile of
/// `A` and one of `B` (0.0 past the matrices' edges), waits, and adds
/// their products to each thread's `acc += a * b` in `k` order (a
/// product, then an add: Wasm has no fused multiply-add). Threads
/// past `C`'s edges load and wait with the others but write nothing.
pub extern "C" fn tiled_sgemm(a: *const f32, b: *const f32, c: *mut f32, m: u32, k: u32, n: u32) {
    let (tx, ty) = (kernel::thread_idx_x(), kernel::thread_idx_y());
    let row = kernel::block_idx_y() * TILE + ty;
    let col = kernel::block_idx_x() * TILE + tx;
    // SAFETY: the launch passes A (m * k elements) and B (k * n) from
    // shared slices.
    let (a, b) = unsafe { (input(a, m * k), input(b, k * n)) };
    let mut acc = 0.0f32;
    let mut k0 = 0;
    while k0 < k {
        let (a_col, b_row) = (k0 + tx, k0 + ty);
        let a_v = if row < m && a_col < k {
            a[(row * k + a_col) as usize]
        } else {
            0.0
        };
        let b_v = if b_row < k && col < n {
            b[(b_row * n + col) as usize]
        } else {
            0.0
        };
        A_TILE.set(ty * TILE + tx, a_v);
        B_TILE.set(ty * TILE + tx, b_v);
        block::barrier();
        for kk in 0..TILE {
            acc += A_TILE.get(ty * TILE + kk) * B_TILE.get(kk * TILE + tx);
        }
        // Every thread has read the tiles before any overwrites them.
        block::barrier();
        k0 += TILE;
    }
    if row < m && col < n {
        // SAFETY: the launch passes C (m * n elements) from an exclusive
        // slice; thread (row, col) alone writes its element.
        let c = unsafe { output(c, m * n, (row * n + col) as usize, 1) };
        c[0] = acc;
    }
}

/// [`tiled_sgemm`] on the CPU: per element, `acc += a * b` over `k`
/// rounded up to whole tiles, the padding's products (0.0) included.
pub fn reference_tiled_sgemm(a: &[f32], b: &[f32], m: usize, k: usize, n: usize) -> Vec<f32> {
    let padded = k.div_ceil(TILE as usize) * TILE as usize;
    let mut c = Vec::with_capacity(m * n);
    for row in 0..m {
        for col in 0..n {
            let mut acc = 0.0f32;
            for p in 0..padded {
                let (a_v, b_v) = if p < k {
                    (a[row * k + p], b[p * n + col])
                } else {
                    (0.0, 0.0)
                };
                acc += a_v * b_v;
            }
            c.push(acc);
        }
    }
    c
}

/// A block's own histogram, in shared memory.
const BLOCK_BINS: SharedArray<u32> = SharedArray::new(0, BINS);

/// The shared memory of a [`shared_histogram`] launch, in bytes.
pub const SHARED_HISTOGRAM_SHARED: u32 = BLOCK_BINS.end();

/// The launch's type of [`shared_histogram`].
pub type SharedHistogram = extern "C" fn(*const u8, u32, *mut u32);

/// `bins[v] += 1` for each of the `n` bytes `v` of `values`: each block
/// counts its share (a grid-stride loop) into its own 256 bins in shared
/// memory with shared atomic adds, then adds each bin it saw to the global
/// one, one global atomic add per block and bin. The shared bins start at
/// zero: the host zeroes shared memory when each block starts.
pub extern "C" fn shared_histogram(values: *const u8, n: u32, bins: *mut u32) {
    // SAFETY: the launch passes `values` (n) from a shared slice and `bins`
    // (BINS) from an exclusive one, updated only atomically here.
    let (values, bins) = unsafe {
        (
            input(values, n),
            atomic_view(bins.cast::<AtomicU32>(), BINS),
        )
    };
    let stride = kernel::global_size_x() as usize;
    for i in (kernel::global_id_x() as usize..values.len()).step_by(stride) {
        BLOCK_BINS.fetch_add(u32::from(values[i]), 1);
    }
    block::barrier();
    for bin in (kernel::thread_idx_x()..BINS).step_by(kernel::block_dim_x() as usize) {
        let count = BLOCK_BINS.get(bin);
        if count != 0 {
            atomic::fetch_add_u32(&bins[bin as usize], count);
        }
    }
}

/// [`shared_histogram`] on the CPU: a count per byte value (integers, so
/// the order of the adds does not matter).
pub fn reference_histogram(values: &[u8]) -> Vec<u32> {
    let mut bins = alloc::vec![0u32; BINS as usize];
    for &v in values {
        bins[usize::from(v)] += 1;
    }
    bins
}

/// The launch's type of [`softmax`].
pub type Softmax = extern "C" fn(*const f32, u32, u32, *mut f32);

/// `y[r] = softmax(x[r])` for each row `r` of `x [rows, cols]`: warp `r` of
/// the grid does row `r`, lane `l` its elements `l, l + 32, ...`. Each lane
/// takes the maximum and the sum of `exp(x - max)` of its elements, in
/// order; a butterfly of `shfl_xor`s (masks 16, 8, 4, 2, 1) combines the 32
/// lanes' values, so every lane holds the row's; then each lane writes
/// `exp(x - max) / sum` for its elements. `exp` is `libm::expf`.
pub extern "C" fn softmax(x: *const f32, rows: u32, cols: u32, y: *mut f32) {
    let r = kernel::global_id_x() / WARP_SIZE;
    // Whole warps leave: BLOCK is a multiple of the warp size.
    if r >= rows {
        return;
    }
    let lane = warp::lane_id() as usize;
    let start = (r * cols) as usize;
    // SAFETY: the launch passes `x` (rows * cols elements) from a shared
    // slice.
    let x = unsafe { input(x, rows * cols) };
    let row = &x[start..start + cols as usize];
    let mine = || (lane..row.len()).step_by(WARP_SIZE as usize);
    let mut max = f32::NEG_INFINITY;
    for j in mine() {
        max = larger(max, row[j]);
    }
    let mut mask = WARP_SIZE / 2;
    while mask > 0 {
        max = larger(max, warp::shfl_xor(max, mask));
        mask /= 2;
    }
    let mut sum = 0.0f32;
    for j in mine() {
        sum += libm::expf(row[j] - max);
    }
    let mut mask = WARP_SIZE / 2;
    while mask > 0 {
        sum += warp::shfl_xor(sum, mask);
        mask /= 2;
    }
    for j in mine() {
        // SAFETY: the launch passes `y` (rows * cols elements) from an
        // exclusive slice; `start + j` is in row `r < rows` (`j < cols`),
        // and lane `lane` of warp `r` alone writes it.
        unsafe { *y.add(start + j) = libm::expf(row[j] - max) / sum };
    }
}

/// `b` if it is larger than `a`, else `a`: exact, so the butterfly's order
/// does not matter for the maximum (there are no NaNs and no zeros).
fn larger(a: f32, b: f32) -> f32 {
    if b > a { b } else { a }
}

/// [`softmax`] on the CPU: the 32 lanes' values of a row, each in its
/// lane's order, combined by the same butterfly (lane `l` adds lane
/// `l ^ mask`'s value to its own).
pub fn reference_softmax(x: &[f32], cols: usize) -> Vec<f32> {
    let lanes = WARP_SIZE as usize;
    let butterfly = |mut v: [f32; 32], op: fn(f32, f32) -> f32| {
        let mut mask = lanes / 2;
        while mask > 0 {
            let before = v;
            for (l, value) in v.iter_mut().enumerate() {
                *value = op(before[l], before[l ^ mask]);
            }
            mask /= 2;
        }
        v[0]
    };
    let mut y = Vec::with_capacity(x.len());
    for row in x.chunks(cols) {
        let mut max = [f32::NEG_INFINITY; 32];
        for (j, &v) in row.iter().enumerate() {
            max[j % lanes] = larger(max[j % lanes], v);
        }
        let max = butterfly(max, larger);
        let mut sum = [0.0f32; 32];
        for (j, &v) in row.iter().enumerate() {
            sum[j % lanes] += libm::expf(v - max);
        }
        let sum = butterfly(sum, |a, b| a + b);
        y.extend(row.iter().map(|&v| libm::expf(v - max) / sum));
    }
    y
}

/// Each warp's running total, for [`scan_blocks`].
const WARP_TOTALS: SharedArray<i32> = SharedArray::new(0, BLOCK / WARP_SIZE);

/// The shared memory of a [`scan_blocks`] launch, in bytes.
pub const SCAN_SHARED: u32 = WARP_TOTALS.end();

/// The launch's type of [`scan_blocks`].
pub type ScanBlocks = extern "C" fn(*const i32, u32, *mut i32, *mut i32);

/// The inclusive prefix sums (wrapping) of `x` within each block of
/// [`BLOCK`] elements into `y`, and each block's total into `totals[b]`
/// (one per block of the grid; 0 for elements past `n`). Each warp scans
/// its 32 values by `shfl_up` (Hillis-Steele: deltas 1, 2, 4, 8, 16); lane
/// 31 puts the warp's total in shared memory; after a barrier warp 0 scans
/// the eight totals the same way; after another, each warp adds the totals
/// of the warps before it.
pub extern "C" fn scan_blocks(x: *const i32, n: u32, y: *mut i32, totals: *mut i32) {
    let (t, i) = (kernel::thread_idx_x(), kernel::global_id_x());
    let (lane, w) = (warp::lane_id(), t / WARP_SIZE);
    // SAFETY: the launch passes `x` (n elements) from a shared slice.
    let x = unsafe { input(x, n) };
    let mut v = warp_scan(if i < n { x[i as usize] } else { 0 }, lane);
    if lane == WARP_SIZE - 1 {
        WARP_TOTALS.set(w, v);
    }
    block::barrier();
    if w == 0 {
        let warps = WARP_TOTALS.len();
        let total = warp_scan(
            if lane < warps {
                WARP_TOTALS.get(lane)
            } else {
                0
            },
            lane,
        );
        if lane < warps {
            WARP_TOTALS.set(lane, total);
        }
    }
    block::barrier();
    if w > 0 {
        v = v.wrapping_add(WARP_TOTALS.get(w - 1));
    }
    if i < n {
        // SAFETY: the launch passes `y` (n elements) from an exclusive
        // slice; thread `i` alone writes element `i`.
        unsafe { output(y, n, i as usize, 1)[0] = v };
    }
    if t == BLOCK - 1 {
        let b = kernel::block_idx_x() as usize;
        // SAFETY: the launch passes `totals` (one per block) from an
        // exclusive slice; the last thread of block `b` alone writes
        // element `b`.
        unsafe { output(totals, kernel::grid_dim_x(), b, 1)[0] = v };
    }
}

/// The inclusive prefix sum (wrapping) of `v` over the lanes of the warp:
/// lane `l` gets the sum of lanes `0 ..= l`. Every lane of the warp calls
/// every shuffle; only lanes at or past `delta` add what came.
fn warp_scan(mut v: i32, lane: u32) -> i32 {
    let mut delta = 1;
    while delta < WARP_SIZE {
        let below = warp::shfl_up(v, delta);
        if lane >= delta {
            v = v.wrapping_add(below);
        }
        delta *= 2;
    }
    v
}

/// The launch's type of [`add_block_offsets`].
pub type AddBlockOffsets = extern "C" fn(*mut i32, u32, *const i32, u32);

/// `y[i] += scanned[b - 1]` (wrapping) for each element `i < n` of block
/// `b > 0`: with `scanned` the inclusive scan of [`scan_blocks`]'s
/// `blocks` totals, this turns its per-block scans into the scan of the
/// whole array. Launch with the same blocks of [`BLOCK`] threads.
pub extern "C" fn add_block_offsets(y: *mut i32, n: u32, scanned: *const i32, blocks: u32) {
    let (i, b) = (kernel::global_id_x(), kernel::block_idx_x());
    if i >= n || b == 0 {
        return;
    }
    // SAFETY: the launch passes `y` (n elements) from an exclusive slice
    // and `scanned` (blocks) from a shared one; thread `i` alone writes
    // element `i`.
    let (y, scanned) = unsafe { (output(y, n, i as usize, 1), input(scanned, blocks)) };
    y[0] = y[0].wrapping_add(scanned[b as usize - 1]);
}

/// The inclusive prefix sums (wrapping) of `x` on the CPU. Integer adds
/// that wrap are associative, so the sequential order gives what the
/// kernels' tree gives.
pub fn reference_inclusive_scan(x: &[i32]) -> Vec<i32> {
    x.iter()
        .scan(0i32, |sum, &v| {
            *sum = sum.wrapping_add(v);
            Some(*sum)
        })
        .collect()
}
