//! Atomics for kernels written in Rust (`docs/kernels.md`, "Atomics"):
//! read-modify-writes of guest memory that many kernel threads may make at
//! once, through the host's `tensorwasm_kernel.atomic_*` intrinsics.
//! Rust's own `core::sync::atomic` operations compile to plain loads and
//! stores on `wasm32-unknown-unknown` (no `atomics` target feature), so a
//! kernel must use these instead; they take the same types, so the storage
//! is an ordinary [`AtomicI32`], [`AtomicU32`], [`AtomicI64`] or
//! [`AtomicF32`].
//!
//! Every operation returns the value before it and is *relaxed*, as CUDA's
//! `atomicAdd`: it orders nothing else. Outside a kernel (the guest's own
//! code, one thread) the host performs the same operation plainly, so a
//! kernel's body runs unchanged as a CPU reference.
//!
//! ```no_run
//! use core::sync::atomic::AtomicU32;
//! use tensorwasm_guest::{atomic, kernel};
//!
//! /// `bins[v % 256] += 1` for each of the `n` values.
//! extern "C" fn histogram(values: *const u32, bins: *mut u32, n: u32) {
//!     let i = kernel::global_id_x();
//!     if i < n {
//!         // SAFETY: the launch passes `n` values and 256 bins; the bins are
//!         // only touched atomically while the kernel runs.
//!         let (v, bins) = unsafe {
//!             (*values.add(i as usize), core::slice::from_raw_parts(bins as *const AtomicU32, 256))
//!         };
//!         atomic::fetch_add_u32(&bins[(v % 256) as usize], 1);
//!     }
//! }
//! ```

pub use core::sync::atomic::{AtomicI32, AtomicI64, AtomicU32};

use core::cell::UnsafeCell;

use crate::sys;

/// An `f32` that kernel threads add to atomically ([`AtomicF32::fetch_add`]).
#[repr(transparent)]
#[derive(Debug, Default)]
pub struct AtomicF32(UnsafeCell<f32>);

// SAFETY: every access goes through the host's atomic intrinsics (or, in a
// single-threaded guest, plain accesses): the value is never read or
// written non-atomically by two threads at once.
unsafe impl Sync for AtomicF32 {}

impl AtomicF32 {
    /// A new value.
    pub const fn new(v: f32) -> AtomicF32 {
        AtomicF32(UnsafeCell::new(v))
    }

    /// Adds `v` (round to nearest even); returns the value before.
    pub fn fetch_add(&self, v: f32) -> f32 {
        // SAFETY: `self` is a live, 4-aligned f32 of guest memory; the host
        // checks bounds and alignment anyway.
        unsafe { sys::atomic_add_f32(self.0.get(), v) }
    }

    /// The value (an atomic add of zero, so it never tears).
    pub fn load(&self) -> f32 {
        self.fetch_add(0.0)
    }

    /// The value, from exclusive access.
    pub fn into_inner(self) -> f32 {
        self.0.into_inner()
    }
}

macro_rules! rmw32 {
    ($($(#[$doc:meta])* $name:ident($ty:ty, $v:ty) => $sys:ident;)*) => {$(
        $(#[$doc])*
        #[inline]
        pub fn $name(target: &$ty, v: $v) -> $v {
            // SAFETY: `target` is a live, aligned atomic of guest memory,
            // whose pointer the intrinsic reads and writes atomically.
            unsafe { sys::$sys(target.as_ptr().cast(), v as i32) as $v }
        }
    )*};
}

rmw32! {
    /// `*target += v` (wrapping); the value before.
    fetch_add_i32(AtomicI32, i32) => atomic_add_i32;
    /// `*target -= v` (wrapping); the value before.
    fetch_sub_i32(AtomicI32, i32) => atomic_sub_i32;
    /// `*target &= v`; the value before.
    fetch_and_i32(AtomicI32, i32) => atomic_and_i32;
    /// `*target |= v`; the value before.
    fetch_or_i32(AtomicI32, i32) => atomic_or_i32;
    /// `*target ^= v`; the value before.
    fetch_xor_i32(AtomicI32, i32) => atomic_xor_i32;
    /// `*target = v`; the value before.
    swap_i32(AtomicI32, i32) => atomic_xchg_i32;
    /// `*target = min(*target, v)`; the value before.
    fetch_min_i32(AtomicI32, i32) => atomic_min_i32;
    /// `*target = max(*target, v)`; the value before.
    fetch_max_i32(AtomicI32, i32) => atomic_max_i32;
    /// `*target += v` (wrapping); the value before.
    fetch_add_u32(AtomicU32, u32) => atomic_add_i32;
    /// `*target |= v`; the value before.
    fetch_or_u32(AtomicU32, u32) => atomic_or_i32;
    /// `*target = min(*target, v)` (unsigned); the value before.
    fetch_min_u32(AtomicU32, u32) => atomic_min_u32;
    /// `*target = max(*target, v)` (unsigned); the value before.
    fetch_max_u32(AtomicU32, u32) => atomic_max_u32;
}

/// `*target = new` if it holds `expected`; the value before (`expected`
/// exactly when it swapped).
#[inline]
pub fn compare_exchange_i32(target: &AtomicI32, expected: i32, new: i32) -> i32 {
    // SAFETY: as for `fetch_add_i32`.
    unsafe { sys::atomic_cas_i32(target.as_ptr(), expected, new) }
}

/// `*target += v` (wrapping); the value before.
#[inline]
pub fn fetch_add_i64(target: &AtomicI64, v: i64) -> i64 {
    // SAFETY: as for `fetch_add_i32`.
    unsafe { sys::atomic_add_i64(target.as_ptr(), v) }
}

/// `*target = new` if it holds `expected`; the value before.
#[inline]
pub fn compare_exchange_i64(target: &AtomicI64, expected: i64, new: i64) -> i64 {
    // SAFETY: as for `fetch_add_i32`.
    unsafe { sys::atomic_cas_i64(target.as_ptr(), expected, new) }
}
