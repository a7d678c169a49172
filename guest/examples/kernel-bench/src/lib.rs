//! The Rust kernels `embed/benches/rust_kernels.rs` measures, written as a
//! guest would write them: `extern "C"` functions over guest pointers,
//! slices with bounds checks (so panic paths), the thread's position from
//! the `tensorwasm_kernel` intrinsics. No host code: the benchmark
//! translates each kernel (by export name), lowers it to PTX and launches
//! it over device memory, beside hand-written PTX.
//!
//! - `saxpy(alpha, x, y, n)`: `y[i] = alpha * x[i] + y[i]` over slices,
//!   against `kernels/bench/saxpy.ptx`.
//! - `gather_stack(x, out, n, rot)` and `gather_regs(x, out, n, rot)`: the
//!   same gather-and-accumulate, [`STEPS`] loads per thread into eight
//!   accumulators; `gather_stack` indexes its accumulator array with a
//!   value the compiler cannot know, so the array lives in a stack frame
//!   (the shadow stack) and every step reads and writes it; `gather_regs`
//!   unrolls by eight so every index is a constant and the array lives in
//!   registers. Both compute the same bits.
//! - `gather_frame(x, out, n, rot)`: the same sums again, the eight
//!   accumulators an array in the kernel's frame that a helper the compiler
//!   does not inline (`accumulate`) updates through a `&mut [f32; 8]`: a
//!   stack frame at constant offsets, the usual shape of Rust code that
//!   passes structs and arrays by reference.
//! - `gather_inline(x, out, n, rot, len)`: `gather_frame` with the helper
//!   inlined (`accumulate_inline`), so LLVM keeps the accumulators in
//!   registers: the same kernel written without a frame, the reference
//!   `gather_frame` is measured against (`x`'s length a separate argument
//!   so that it keeps `gather_frame`'s bounds checks).
//!
//! [`coop`] holds the cooperative kernels `embed/benches/coop_kernels.rs`
//! measures against the built-in CUDA kernels (shared memory, barriers,
//! warp shuffles, a float atomic): `block_reduce_f32`, `softmax_rows`,
//! `sgemm_tiled`.

#![cfg_attr(not(test), no_std)]

pub mod coop;

#[link(wasm_import_module = "tensorwasm_kernel")]
unsafe extern "C" {
    fn thread_idx_x() -> i32;
    fn block_idx_x() -> i32;
    fn block_dim_x() -> i32;
}

/// Loads per thread of the gather kernels.
pub const STEPS: usize = 64;

/// The thread's global index along x.
fn global_id() -> usize {
    // SAFETY: the intrinsics take nothing and only read the thread's
    // position (inside a kernel; the host traps them elsewhere).
    let (t, b, d) = unsafe { (thread_idx_x(), block_idx_x(), block_dim_x()) };
    (b as usize) * (d as usize) + t as usize
}

#[cfg(not(test))]
#[panic_handler]
fn panic(_: &core::panic::PanicInfo<'_>) -> ! {
    core::arch::wasm32::unreachable()
}

/// No heap: the kernels allocate nothing, but `tensorwasm_guest` links
/// `alloc`, which wants a global allocator. Every allocation fails.
#[cfg(not(test))]
struct NoHeap;

// SAFETY: `alloc` never hands out memory (null is "failed"), so nothing
// can be freed or used wrongly.
#[cfg(not(test))]
unsafe impl core::alloc::GlobalAlloc for NoHeap {
    unsafe fn alloc(&self, _: core::alloc::Layout) -> *mut u8 {
        core::ptr::null_mut()
    }

    unsafe fn dealloc(&self, _: *mut u8, _: core::alloc::Layout) {}
}

#[cfg(not(test))]
#[global_allocator]
static HEAP: NoHeap = NoHeap;

/// `y[i] = alpha * x[i] + y[i]` for the thread's `i < n`.
///
/// # Safety
/// `x` and `y` point at `n` `f32`s of guest memory.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn saxpy(alpha: f32, x: *const f32, y: *mut f32, n: usize) {
    // SAFETY: the caller's promise.
    let (x, y) = unsafe {
        (
            core::slice::from_raw_parts(x, n),
            core::slice::from_raw_parts_mut(y, n),
        )
    };
    let i = global_id();
    if i < n {
        y[i] += alpha * x[i];
    }
}

/// The element of `x` that step `j` of thread `i` reads (`n` is a power
/// of two).
fn gather_index(i: usize, j: usize, n: usize) -> usize {
    (i + j * 4099) & (n - 1)
}

/// The weighted sum the gather kernels write: accumulator `k` holds the
/// steps `j` with `j % 8 == k`, and is weighted by `(k + rot) % 8 + 1`.
fn weigh(acc: &[f32; 8], rot: usize) -> f32 {
    let mut sum = 0.0;
    for (k, a) in acc.iter().enumerate() {
        sum += a * ((k + rot) % 8 + 1) as f32;
    }
    sum
}

/// Eight accumulators in a stack frame, indexed by `(j + rot) % 8`.
///
/// # Safety
/// `x` points at `n` `f32`s, `out` at `n`; `n` is a power of two.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gather_stack(x: *const f32, out: *mut f32, n: usize, rot: usize) {
    // SAFETY: the caller's promise.
    let (x, out) = unsafe {
        (
            core::slice::from_raw_parts(x, n),
            core::slice::from_raw_parts_mut(out, n),
        )
    };
    let i = global_id();
    if i >= n {
        return;
    }
    let mut rotated = [0.0f32; 8];
    for j in 0..STEPS {
        rotated[(j + rot) % 8] += x[gather_index(i, j, n)];
    }
    // Accumulator k of the unrotated order is rotated[(k + rot) % 8].
    let mut acc = [0.0f32; 8];
    for (k, a) in acc.iter_mut().enumerate() {
        *a = rotated[(k + rot) % 8];
    }
    out[i] = weigh(&acc, rot);
}

/// The same sums in eight scalar accumulators (registers: no frame).
///
/// # Safety
/// `x` points at `n` `f32`s, `out` at `n`; `n` is a power of two.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gather_regs(x: *const f32, out: *mut f32, n: usize, rot: usize) {
    // SAFETY: the caller's promise.
    let (x, out) = unsafe {
        (
            core::slice::from_raw_parts(x, n),
            core::slice::from_raw_parts_mut(out, n),
        )
    };
    let i = global_id();
    if i >= n {
        return;
    }
    let (mut a0, mut a1, mut a2, mut a3) = (0.0f32, 0.0f32, 0.0f32, 0.0f32);
    let (mut a4, mut a5, mut a6, mut a7) = (0.0f32, 0.0f32, 0.0f32, 0.0f32);
    let mut j = 0;
    while j < STEPS {
        a0 += x[gather_index(i, j, n)];
        a1 += x[gather_index(i, j + 1, n)];
        a2 += x[gather_index(i, j + 2, n)];
        a3 += x[gather_index(i, j + 3, n)];
        a4 += x[gather_index(i, j + 4, n)];
        a5 += x[gather_index(i, j + 5, n)];
        a6 += x[gather_index(i, j + 6, n)];
        a7 += x[gather_index(i, j + 7, n)];
        j += 8;
    }
    let w = |k: usize| ((k + rot) % 8 + 1) as f32;
    out[i] = a0 * w(0)
        + a1 * w(1)
        + a2 * w(2)
        + a3 * w(3)
        + a4 * w(4)
        + a5 * w(5)
        + a6 * w(6)
        + a7 * w(7);
}

/// Adds the eight elements of step group `j` to `acc`. Not inlined, so
/// `acc` is a pointer into the caller's stack frame.
#[inline(never)]
fn accumulate(acc: &mut [f32; 8], x: &[f32], i: usize, j: usize, n: usize) {
    for (k, a) in acc.iter_mut().enumerate() {
        *a += x[gather_index(i, j + k, n)];
    }
}

/// The same sums, the accumulators in a stack frame at constant offsets.
///
/// # Safety
/// `x` points at `n` `f32`s, `out` at `n`; `n` is a power of two.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gather_frame(x: *const f32, out: *mut f32, n: usize, rot: usize) {
    // SAFETY: the caller's promise.
    let (x, out) = unsafe {
        (
            core::slice::from_raw_parts(x, n),
            core::slice::from_raw_parts_mut(out, n),
        )
    };
    let i = global_id();
    if i >= n {
        return;
    }
    let mut acc = [0.0f32; 8];
    let mut j = 0;
    while j < STEPS {
        accumulate(&mut acc, x, i, j, n);
        j += 8;
    }
    out[i] = weigh(&acc, rot);
}

/// [`accumulate`], inlined into its caller: the caller's `acc` then lives
/// in registers, not in a frame.
#[inline(always)]
fn accumulate_inline(acc: &mut [f32; 8], x: &[f32], i: usize, j: usize, n: usize) {
    for (k, a) in acc.iter_mut().enumerate() {
        *a += x[gather_index(i, j + k, n)];
    }
}

/// `gather_frame` without a frame: the same source with the helper
/// inlined, its loop of eight calls ([`STEPS`] loads) unrolled as LLVM
/// unrolls `gather_frame`'s. `x`'s length comes as its own argument `len` (equal to `n`),
/// as the helper sees it in `gather_frame`: LLVM cannot prove the indices
/// in bounds, so both kernels keep the same 64 bounds checks per thread
/// and differ only in the frame.
///
/// # Safety
/// `x` points at `len` `f32`s, `out` at `n`; `n` is a power of two no
/// larger than `len`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gather_inline(
    x: *const f32,
    out: *mut f32,
    n: usize,
    rot: usize,
    len: usize,
) {
    // SAFETY: the caller's promise.
    let (x, out) = unsafe {
        (
            core::slice::from_raw_parts(x, len),
            core::slice::from_raw_parts_mut(out, n),
        )
    };
    let i = global_id();
    if i >= n {
        return;
    }
    let mut acc = [0.0f32; 8];
    // Unrolled as LLVM unrolls `gather_frame`'s loop of calls.
    accumulate_inline(&mut acc, x, i, 0, n);
    accumulate_inline(&mut acc, x, i, 8, n);
    accumulate_inline(&mut acc, x, i, 16, n);
    accumulate_inline(&mut acc, x, i, 24, n);
    accumulate_inline(&mut acc, x, i, 32, n);
    accumulate_inline(&mut acc, x, i, 40, n);
    accumulate_inline(&mut acc, x, i, 48, n);
    accumulate_inline(&mut acc, x, i, 56, n);
    out[i] = weigh(&acc, rot);
}
