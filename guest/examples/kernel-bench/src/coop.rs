//! The cooperative kernels `embed/benches/coop_kernels.rs` measures against
//! the built-in CUDA kernels: a block reduction, a row softmax and a tiled
//! SGEMM written with `tensorwasm_guest::{block, warp, atomic}` (shared
//! memory, barriers, shuffles, a float atomic), each as fast as ordinary
//! Rust gets them. The host checks every shared access (alignment and
//! bounds), so the kernels make few, wide ones: the SGEMM reads its tiles
//! eight bytes at a time.
//!
//! Each kernel's block shape, grid and shared memory are the constants
//! next to it; the bench launches them so.

use core::slice;

use tensorwasm_guest::atomic::AtomicF32;
use tensorwasm_guest::block::{self, SharedArray};
use tensorwasm_guest::kernel;
use tensorwasm_guest::math;
use tensorwasm_guest::warp::{self, WARP_SIZE};

/// `$body` once for each index, `$i` bound to it (a `usize`): a loop
/// unrolled by hand (CUDA's `#pragma unroll`), so that the arrays it
/// indexes by `$i` live in registers. LLVM does not unroll loops whose
/// bodies are this long, and an array indexed at run time lives in the
/// thread's stack frame.
macro_rules! unrolled {
    ($i:ident in 4 $body:block) => {
        unrolled!($i in [0, 1, 2, 3] $body)
    };
    ($i:ident in 8 $body:block) => {
        unrolled!($i in [0, 1, 2, 3, 4, 5, 6, 7] $body)
    };
    ($i:ident in 32 $body:block) => {
        unrolled!($i in [
            0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15,
            16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31
        ] $body)
    };
    ($i:ident in [$($n:literal),*] $body:block) => {
        $({
            let $i: usize = $n;
            $body
        })*
    };
}

/// The sum of `v` over the warp's 32 lanes, on every lane (a butterfly).
#[inline(always)]
fn warp_sum(mut v: f32) -> f32 {
    for mask in [16, 8, 4, 2, 1] {
        v += warp::shfl_xor(v, mask);
    }
    v
}

/// The largest `v` of the warp's 32 lanes, on every lane.
#[inline(always)]
fn warp_max(mut v: f32) -> f32 {
    for mask in [16, 8, 4, 2, 1] {
        v = larger(v, warp::shfl_xor(v, mask));
    }
    v
}

/// `b` if it is larger than `a`, else `a` (no NaNs here).
#[inline(always)]
fn larger(a: f32, b: f32) -> f32 {
    if b > a { b } else { a }
}

/// Threads per block of [`block_reduce_f32`] and [`softmax_rows`].
pub const BLOCK: u32 = 256;

/// One partial sum per warp of a [`block_reduce_f32`] block (up to 1024
/// threads).
const WARP_SUMS: SharedArray<f32> = SharedArray::new(0, 32);

/// The shared memory of a [`block_reduce_f32`] launch, in bytes.
pub const BLOCK_REDUCE_SHARED: u32 = WARP_SUMS.end();

/// `out[0] += sum(x[..n])`: a grid-stride loop (any 1-D grid; launch as
/// many blocks as the device holds at once) with four independent
/// accumulators, so four loads per thread are in flight; the warp's sum by
/// `shfl_xor`, the warps' sums through shared memory, then one float
/// atomic add per block.
///
/// # Safety
/// `x` points at `n` `f32`s and `out` at one, of guest memory.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn block_reduce_f32(x: *const f32, n: u32, out: *mut f32) {
    // SAFETY: the caller's promise; `out` is only added to atomically.
    let (x, out) = unsafe {
        (
            slice::from_raw_parts(x, n as usize),
            &*out.cast_const().cast::<AtomicF32>(),
        )
    };
    let stride = kernel::global_size_x() as usize;
    let mut i = kernel::global_id_x() as usize;
    let (mut a0, mut a1, mut a2, mut a3) = (0.0f32, 0.0f32, 0.0f32, 0.0f32);
    // Whole rounds of four strides; the last round's loads are in bounds.
    let rounds_end = x.len().saturating_sub(3 * stride);
    while i < rounds_end {
        // SAFETY: `i + 3 * stride < x.len()` (no overflow: the sum is below
        // the length), so all four are in bounds.
        unsafe {
            a0 += x.get_unchecked(i);
            a1 += x.get_unchecked(i + stride);
            a2 += x.get_unchecked(i + 2 * stride);
            a3 += x.get_unchecked(i + 3 * stride);
        }
        i += 4 * stride;
    }
    while i < x.len() {
        a0 += x[i];
        i += stride;
    }
    let v = warp_sum((a0 + a1) + (a2 + a3));
    let t = kernel::thread_idx_x();
    let (lane, w) = (t % WARP_SIZE, t / WARP_SIZE);
    if lane == 0 {
        WARP_SUMS.set(w, v);
    }
    block::barrier();
    if w == 0 {
        let warps = kernel::block_dim_x().div_ceil(WARP_SIZE);
        let s = warp_sum(if lane < warps {
            WARP_SUMS.get(lane)
        } else {
            0.0
        });
        if lane == 0 {
            out.fetch_add(s);
        }
    }
}

/// Elements of a row each lane keeps in registers: rows of up to
/// `32 * ROW_CACHE` columns are read once and written once.
const ROW_CACHE: usize = 32;

/// `y[r] = softmax(x[r])` over each row `r` of `x [rows, cols]`: warp `r`
/// of the grid (blocks of [`BLOCK`] threads: eight rows a block) does row
/// `r`, lane `l` its columns `l, l + 32, ...`. Rows of up to 1024 columns
/// stay in registers: the maximum, then `exp(x - max)` and its sum, each
/// combined over the warp by `shfl_xor`, then `y = e * (1 / sum)`. Longer
/// rows take two passes over `x`: an online maximum and sum (the sum
/// rescaled when the maximum grows), then `exp(x - max) / sum`. `exp` is
/// [`math::expf_fast`]: no branch, table or division, about 27 Wasm
/// instructions, within 1 ulp. libm's bits ([`math::expf`], some 250 PTX
/// instructions with a dozen branches and a division) made the kernel
/// compute-bound, and the built-in kernel's CUDA `expf` is not exact
/// either (2 ulp, as CUDA documents it). Neither has a stack frame: the
/// kernel keeps no shadow-stack window, so its loads and stores of `x` and
/// `y` are not tested for one.
///
/// # Safety
/// `x` and `y` point at `rows * cols` `f32`s of guest memory, apart.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn softmax_rows(x: *const f32, y: *mut f32, rows: u32, cols: u32) {
    let r = kernel::global_id_x() / WARP_SIZE;
    // Whole warps leave: blocks are whole warps. Rows of no columns have
    // nothing to write.
    if r >= rows || cols == 0 {
        return;
    }
    let lane = (kernel::thread_idx_x() % WARP_SIZE) as usize;
    let cols = cols as usize;
    let start = r as usize * cols;
    // SAFETY: the caller's promise: row `r < rows` is inside both, and warp
    // `r` alone writes its row of `y`.
    let (x, y) = unsafe {
        (
            slice::from_raw_parts(x.add(start), cols),
            slice::from_raw_parts_mut(y.add(start), cols),
        )
    };
    if cols <= ROW_CACHE * WARP_SIZE as usize {
        // Columns past the row's end read its last element (no branch
        // around the load) and count as -inf.
        let mut v = [f32::NEG_INFINITY; ROW_CACHE];
        let last = cols - 1;
        unrolled!(u in 32 {
            let j = lane + u * WARP_SIZE as usize;
            // SAFETY: `min(j, last) <= cols - 1` (`cols >= 1`, above).
            let e = unsafe { *x.get_unchecked(j.min(last)) };
            v[u] = if j < cols { e } else { f32::NEG_INFINITY };
        });
        let mut max = f32::NEG_INFINITY;
        unrolled!(u in 32 {
            max = larger(max, v[u]);
        });
        let max = warp_max(max);
        // exp(-inf - max) is 0: the columns past the end add nothing.
        let mut sum = 0.0f32;
        unrolled!(u in 32 {
            v[u] = math::expf_fast(v[u] - max);
            sum += v[u];
        });
        let inv = 1.0 / warp_sum(sum);
        unrolled!(u in 32 {
            if let Some(e) = y.get_mut(lane + u * WARP_SIZE as usize) {
                *e = v[u] * inv;
            }
        });
    } else {
        let (mut max, mut sum) = (f32::NEG_INFINITY, 0.0f32);
        for j in (lane..cols).step_by(WARP_SIZE as usize) {
            let e = x[j];
            if e > max {
                sum *= math::expf_fast(max - e);
                max = e;
            }
            sum += math::expf_fast(e - max);
        }
        let row_max = warp_max(max);
        let inv = 1.0 / warp_sum(sum * math::expf_fast(max - row_max));
        for j in (lane..cols).step_by(WARP_SIZE as usize) {
            y[j] = math::expf_fast(x[j] - row_max) * inv;
        }
    }
}

/// Rows and columns of C a [`sgemm_tiled`] block computes.
pub const SGEMM_TILE: u32 = 128;
/// The depth of the tiles of A and B in shared memory.
const BK: u32 = 8;
/// Threads of a [`sgemm_tiled`] block (1-D): 16 x 16, each 8 x 8 of C.
pub const SGEMM_BLOCK: u32 = 256;
/// A shared row of A's tile (one `k`), in `f32`s: 128 plus 4 of padding,
/// so that the two halves of a warp store to different banks.
const A_ROW: u32 = SGEMM_TILE + 4;
/// One stage: A's tile, transposed (`[BK][A_ROW]`), then B's (`[BK][128]`).
const STAGE: u32 = BK * A_ROW + BK * SGEMM_TILE;
/// Two stages: the next tiles are stored while the current ones are read.
const TILES: SharedArray<f32> = SharedArray::new(0, 2 * STAGE);
/// The same memory as `u64`s: two neighbouring `f32`s a read.
const TILES2: SharedArray<u64> = SharedArray::new(0, STAGE);

/// The shared memory of a [`sgemm_tiled`] launch, in bytes.
pub const SGEMM_SHARED: u32 = TILES.end();

/// The two `f32`s of a shared `u64` (little endian: the first is low).
#[inline(always)]
fn pair(v: u64) -> (f32, f32) {
    (f32::from_bits(v as u32), f32::from_bits((v >> 32) as u32))
}

/// What one [`sgemm_tiled`] thread loads of each pair of tiles: four
/// elements of A's row `a_row`, at depths `a_k .. a_k + 4` of the step;
/// four of B's depth `b_k` of the step, at columns `b_col + 32 i`.
/// `inside`: the block's 128 x 128 tile of C lies inside C, so only the
/// depth can run past A's and B's edges.
struct Tiles<'a> {
    a: &'a [f32],
    b: &'a [f32],
    m: usize,
    n: usize,
    k: usize,
    a_row: usize,
    a_k: usize,
    b_k: usize,
    b_col: usize,
    inside: bool,
}

impl Tiles<'_> {
    /// This thread's elements of the step at depth `k0` (0.0 past the
    /// matrices' edges).
    #[inline(always)]
    fn load(&self, k0: usize) -> [f32; 8] {
        if self.inside && k0 + BK as usize <= self.k {
            // A whole step of an inner tile (every block's but the last
            // row's and column's): no edge to test, one address for the
            // four of A and one for the four of B (the loads' offsets are
            // constants, so the sandbox tests each group once).
            // SAFETY: `a_row < m` and `k0 + a_k + 3 < k0 + BK <= k`, so
            // the four of A are in `a`; `k0 + b_k < k` and `b_col + 96 <
            // col0 + 128 <= n`, so the four of B are in `b`.
            unsafe {
                let a = self.a.as_ptr().add(self.a_row * self.k + k0 + self.a_k);
                let b = self.b.as_ptr().add((k0 + self.b_k) * self.n + self.b_col);
                return [
                    *a,
                    *a.add(1),
                    *a.add(2),
                    *a.add(3),
                    *b,
                    *b.add(32),
                    *b.add(64),
                    *b.add(96),
                ];
            }
        }
        let mut v = [0.0f32; 8];
        for (i, v) in v[..4].iter_mut().enumerate() {
            let kk = k0 + self.a_k + i;
            if self.a_row < self.m && kk < self.k {
                *v = self.a[self.a_row * self.k + kk];
            }
        }
        let kk = k0 + self.b_k;
        for (i, v) in v[4..].iter_mut().enumerate() {
            let col = self.b_col + 32 * i;
            if kk < self.k && col < self.n {
                *v = self.b[kk * self.n + col];
            }
        }
        v
    }

    /// Stores what [`Tiles::load`] gave into shared stage `stage`, A
    /// transposed. `t` is the thread's index in the block.
    #[inline(always)]
    fn store(&self, stage: u32, v: [f32; 8], t: u32) {
        let base = stage * STAGE;
        let (a_row, a_k) = (t / 2, (t % 2) * 4);
        for (i, &v) in v[..4].iter().enumerate() {
            TILES.set(base + (a_k + i as u32) * A_ROW + a_row, v);
        }
        let b_base = base + BK * A_ROW + (t / 32) * SGEMM_TILE + t % 32;
        for (i, &v) in v[4..].iter().enumerate() {
            TILES.set(b_base + 32 * i as u32, v);
        }
    }
}

/// `C [m, n] = A [m, k] @ B [k, n]`, row-major `f32`. Block `(bx, by)` of a
/// `(ceil(n / 128), ceil(m / 128))` grid of [`SGEMM_BLOCK`] threads
/// computes C's 128 x 128 tile at rows `by * 128`, columns `bx * 128`, in
/// steps of 8 along `k`, one barrier a step: while the block multiplies
/// the tiles of one shared stage, each thread loads its four elements of
/// the next step's 128 x 8 tile of A and four of B's 8 x 128 into
/// registers, then stores them (A transposed) into the other stage. The
/// eight depths of a step stay a loop: unrolled, ptxas hoists their shared
/// reads and takes 249 registers (one block a multiprocessor); rolled, 127
/// (two). Thread `(tx, ty)` (`t % 16`, `t /
/// 16`) owns the 8 x 8 elements at rows `2 ty + {0, 1} + 32 q` and columns
/// `2 tx + {0, 1} + 32 p` (`p, q < 4`): every shared read is a `u64` (two
/// columns or two rows), a half warp's `u64`s of B are 128 contiguous
/// bytes and its A reads are one broadcast. `acc = fma(a, b, acc)`, one
/// rounding and one instruction ([`math::fma`]; Wasm's own `a * b + c` is
/// two of each). Elements past A's and B's edges
/// load as 0.0; elements past C's are not written.
///
/// # Safety
/// `a`, `b` and `c` point at `m * k`, `k * n` and `m * n` `f32`s of guest
/// memory, `c` apart from the others.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn sgemm_tiled(
    a: *const f32,
    b: *const f32,
    c: *mut f32,
    m: u32,
    n: u32,
    k: u32,
) {
    let (m, n, k) = (m as usize, n as usize, k as usize);
    // SAFETY: the caller's promise; every thread writes only its own
    // elements of C.
    let (a, b, c) = unsafe {
        (
            slice::from_raw_parts(a, m * k),
            slice::from_raw_parts(b, k * n),
            slice::from_raw_parts_mut(c, m * n),
        )
    };
    let t = kernel::thread_idx_x() % SGEMM_BLOCK;
    let (tx, ty) = (t % 16, t / 16);
    let tile = SGEMM_TILE as usize;
    let (row0, col0) = (
        kernel::block_idx_y() as usize * tile,
        kernel::block_idx_x() as usize * tile,
    );
    let tiles = Tiles {
        a,
        b,
        m,
        n,
        k,
        a_row: row0 + (t / 2) as usize,
        a_k: ((t % 2) * 4) as usize,
        b_k: (t / 32) as usize,
        b_col: col0 + (t % 32) as usize,
        inside: row0 + tile <= m && col0 + tile <= n,
    };
    let mut acc = [[0.0f32; 8]; 8];
    let mut held = tiles.load(0);
    tiles.store(0, held, t);
    block::barrier();
    let steps = k.div_ceil(BK as usize);
    for step in 0..steps {
        let stage = (step % 2) as u32;
        let more = step + 1 < steps;
        if more {
            held = tiles.load((step + 1) * BK as usize);
        }
        // `u64` indices of this thread's A and B pairs, depth by depth.
        let mut a_at = stage * (STAGE / 2) + ty;
        let mut b_at = stage * (STAGE / 2) + BK * A_ROW / 2 + tx;
        for _ in 0..BK {
            let mut af = [0.0f32; 8];
            let mut bf = [0.0f32; 8];
            unrolled!(q in 4 {
                (af[2 * q], af[2 * q + 1]) = pair(TILES2.get(a_at + 16 * q as u32));
                (bf[2 * q], bf[2 * q + 1]) = pair(TILES2.get(b_at + 16 * q as u32));
            });
            a_at += A_ROW / 2;
            b_at += SGEMM_TILE / 2;
            // Unrolled by hand: LLVM does not unroll loops around an
            // import's call, and `acc` indexed at run time would live in
            // the stack frame.
            unrolled!(i in 8 {
                unrolled!(j in 8 {
                    acc[i][j] = math::fma(af[i], bf[j], acc[i][j]);
                });
            });
        }
        if more {
            tiles.store(1 - stage, held, t);
        }
        block::barrier();
    }
    unrolled!(i in 8 {
        let row = row0 + 2 * ty as usize + i % 2 + 32 * (i / 2);
        if row < m {
            unrolled!(j in 8 {
                let col = col0 + 2 * tx as usize + j % 2 + 32 * (j / 2);
                if col < n {
                    c[row * n + col] = acc[i][j];
                }
            });
        }
    });
}
