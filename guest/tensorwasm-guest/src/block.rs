//! What the threads of one block share, for kernels written in Rust: the
//! block's shared memory ([`SharedArray`], [`shared_size`]) and its barrier
//! ([`barrier`], CUDA's `__syncthreads()`), through the host's
//! `tensorwasm_kernel` intrinsics (`docs/kernels.md`, "Shared memory",
//! "Barriers"). A warp's collective operations are [`crate::warp`].
//!
//! Shared memory is a byte array of each block, apart from the guest's
//! memory: as many bytes as the launch asks for with
//! [`Launch::shared_mem`](crate::Launch::shared_mem) (CUDA's dynamic shared
//! memory), rounded up to a multiple of 16, and **zeroed when each block
//! starts** (CUDA leaves it uninitialised). A kernel reaches it only through
//! byte offsets, which the host checks at every access: past
//! [`shared_size`] traps (out of bounds), an offset that is not a multiple
//! of the value's size traps (misaligned). No Rust reference can point into
//! it, so [`SharedArray`]'s accesses are safe: a wrong index is a trap,
//! never another thread's stack or the guest's memory.
//!
//! Only inside a launched kernel: in the guest's own code (its runtime, a
//! CPU reference) every function here traps the guest, unlike
//! [`crate::atomic`]. Write the CPU reference of a cooperative kernel as
//! plain Rust that does the same arithmetic in the same order.
//!
//! A block's sum by halving a tree in shared memory, between barriers:
//!
//! ```no_run
//! use tensorwasm_guest::block::{self, SharedArray};
//! use tensorwasm_guest::kernel::{self, Kernel};
//! use tensorwasm_guest::Error;
//!
//! type BlockSums = extern "C" fn(*const f32, u32, *mut f32);
//!
//! /// Threads per block: a power of two, so the tree halves evenly.
//! const BLOCK: u32 = 256;
//! /// One partial sum per thread, from byte 0 of shared memory.
//! const PARTIAL: SharedArray<f32> = SharedArray::new(0, BLOCK);
//!
//! /// `sums[b]` = the sum of block `b`'s elements of `x` (`n` of them).
//! extern "C" fn block_sums(x: *const f32, n: u32, sums: *mut f32) {
//!     let (t, i) = (kernel::thread_idx_x(), kernel::global_id_x());
//!     // SAFETY: the launch passes `n` elements of `x`, and `i < n`.
//!     PARTIAL.set(t, if i < n { unsafe { *x.add(i as usize) } } else { 0.0 });
//!     block::barrier();
//!     let mut half = BLOCK / 2;
//!     while half > 0 {
//!         if t < half {
//!             PARTIAL.set(t, PARTIAL.get(t) + PARTIAL.get(t + half));
//!         }
//!         block::barrier(); // every thread, also those that added nothing
//!         half /= 2;
//!     }
//!     if t == 0 {
//!         // SAFETY: the launch passes one sum per block, exclusively, and
//!         // thread 0 of block `b` alone writes `sums[b]`.
//!         unsafe { *sums.add(kernel::block_idx_x() as usize) = PARTIAL.get(0) };
//!     }
//! }
//!
//! fn run(x: &[f32]) -> Result<Vec<f32>, Error> {
//!     let n = x.len() as u32;
//!     let mut sums = vec![0.0f32; n.div_ceil(BLOCK) as usize];
//!     let k = Kernel::<BlockSums>::from_fn(block_sums)?;
//!     k.launch(n.div_ceil(BLOCK), BLOCK, (x, n, &mut sums))
//!         .shared_mem(PARTIAL.end())
//!         .run()?;
//!     Ok(sums)
//! }
//! ```

use core::marker::PhantomData;

use crate::sys;

/// The block's shared memory, in bytes: the launch's
/// [`shared_mem`](crate::Launch::shared_mem) rounded up to a multiple of
/// 16. Only inside a kernel (the host traps the guest elsewhere).
#[inline]
pub fn shared_size() -> u32 {
    // SAFETY: the import takes nothing and touches no memory; outside a
    // kernel the host traps, which is not undefined behaviour.
    unsafe { sys::shared_size() as u32 }
}

/// Waits until every thread of the block that has not ended arrives at a
/// barrier (CUDA's `__syncthreads()`); then the shared memory and guest
/// memory each of them wrote before it are visible to all of them.
///
/// Threads that returned from the kernel or trapped do not count, so a
/// barrier that some threads skip never hangs the block; but which of the
/// block's values are ready then is the kernel's business: call it where
/// every thread of the block passes, as in CUDA. Only inside a kernel.
#[inline]
pub fn barrier() {
    // SAFETY: the import touches no memory of the guest's that Rust sees;
    // it only orders the threads. Outside a kernel the host traps.
    unsafe { sys::barrier() }
}

mod sealed {
    /// Shared loads and stores of one element type, at byte offsets.
    pub trait Element: Copy {
        fn load(offset: i32) -> Self;
        fn store(offset: i32, v: Self);
    }
}

/// A type a [`SharedArray`] holds: `i32`, `u32`, `i64`, `u64`, `f32`,
/// `f64`. Sealed.
pub trait SharedScalar: sealed::Element {}

macro_rules! elements {
    ($($t:ty => $load:ident, $store:ident as $wasm:ty;)*) => {$(
        impl sealed::Element for $t {
            #[inline]
            fn load(offset: i32) -> $t {
                // SAFETY: the import reads the block's shared memory, which
                // no Rust reference points into; the host checks the bounds
                // and the alignment and traps on either.
                unsafe { sys::$load(offset) as $t }
            }

            #[inline]
            fn store(offset: i32, v: $t) {
                // SAFETY: as for `load`; the import writes shared memory only.
                unsafe { sys::$store(offset, v as $wasm) }
            }
        }

        impl SharedScalar for $t {}
    )*};
}

elements! {
    i32 => shared_load_i32, shared_store_i32 as i32;
    u32 => shared_load_i32, shared_store_i32 as i32;
    i64 => shared_load_i64, shared_store_i64 as i64;
    u64 => shared_load_i64, shared_store_i64 as i64;
    f32 => shared_load_f32, shared_store_f32 as f32;
    f64 => shared_load_f64, shared_store_f64 as f64;
}

/// A typed view of the block's shared memory: `len` elements of `T` from
/// byte offset `byte_offset`, CUDA's `__shared__ T a[len]`. A handle (two
/// integers, `Copy`), not a borrow: every thread makes the same one, often
/// a `const`, and [`SharedArray::end`] is the launch's
/// [`shared_mem`](crate::Launch::shared_mem) for the last array.
///
/// [`SharedArray::get`] and [`SharedArray::set`] check the index against
/// `len` (a panic, which in a kernel is a trap), and the host checks the
/// offset against the block's [`shared_size`]. Plain accesses by several
/// threads to one element race as in CUDA (the value is one of those
/// written, never undefined behaviour): order them with [`barrier`], or use
/// the atomics (`fetch_add`, ...; on `SharedArray<i32>`, `<u32>`, `<i64>`,
/// `<u64>`, `<f32>`). Only inside a kernel.
#[derive(Debug, PartialEq, Eq)]
pub struct SharedArray<T: SharedScalar> {
    byte_offset: u32,
    len: u32,
    element: PhantomData<fn() -> T>,
}

impl<T: SharedScalar> Clone for SharedArray<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T: SharedScalar> Copy for SharedArray<T> {}

impl<T: SharedScalar> SharedArray<T> {
    /// `len` elements from byte `byte_offset` of shared memory. Panics (at
    /// compile time in a `const`) when `byte_offset` is not a multiple of
    /// `size_of::<T>()` or the array ends past `i32::MAX`.
    #[inline]
    pub const fn new(byte_offset: u32, len: u32) -> SharedArray<T> {
        let size = size_of::<T>() as u32;
        assert!(
            byte_offset.is_multiple_of(size),
            "a shared array's offset must be a multiple of its element size"
        );
        let end = match len.checked_mul(size) {
            Some(bytes) => byte_offset.checked_add(bytes),
            None => None,
        };
        assert!(
            matches!(end, Some(end) if end <= i32::MAX as u32),
            "a shared array must end below 2^31 bytes"
        );
        SharedArray {
            byte_offset,
            len,
            element: PhantomData,
        }
    }

    /// The whole of the block's shared memory as `T`s (the last bytes, if
    /// fewer than a `T`, left out). Only inside a kernel.
    #[inline]
    pub fn whole() -> SharedArray<T> {
        SharedArray::new(0, shared_size() / size_of::<T>() as u32)
    }

    /// The array of `len` `U`s that starts where this one ends (rounded up
    /// to a multiple of `size_of::<U>()`): arrays laid out one after the
    /// other, the last one's [`end`](SharedArray::end) the launch's shared
    /// memory. Panics as [`SharedArray::new`].
    #[inline]
    pub const fn followed_by<U: SharedScalar>(self, len: u32) -> SharedArray<U> {
        SharedArray::new(self.end().next_multiple_of(size_of::<U>() as u32), len)
    }

    /// The number of elements.
    #[inline]
    pub const fn len(self) -> u32 {
        self.len
    }

    /// Whether the array has no elements.
    #[inline]
    pub const fn is_empty(self) -> bool {
        self.len == 0
    }

    /// The byte offset of element 0 in shared memory.
    #[inline]
    pub const fn byte_offset(self) -> u32 {
        self.byte_offset
    }

    /// The byte offset just past the last element: the shared memory a
    /// launch must give for this array (and any before it) to fit.
    #[inline]
    pub const fn end(self) -> u32 {
        self.byte_offset + self.len * size_of::<T>() as u32
    }

    /// The byte offset of element `i`; panics (traps) when `i >= len`.
    #[inline]
    fn offset(self, i: u32) -> i32 {
        assert!(i < self.len, "shared array index out of bounds");
        // No overflow: `new` keeps the array's end below 2^31.
        (self.byte_offset + i * size_of::<T>() as u32) as i32
    }

    /// Element `i`; panics (traps) when `i >= len`.
    #[inline]
    pub fn get(self, i: u32) -> T {
        T::load(self.offset(i))
    }

    /// Sets element `i` to `v`; panics (traps) when `i >= len`.
    #[inline]
    pub fn set(self, i: u32, v: T) {
        T::store(self.offset(i), v)
    }
}

macro_rules! shared_atomics {
    ($t:ty as $wasm:ty { $($(#[$doc:meta])* $name:ident => $sys:ident;)* }) => {
        impl SharedArray<$t> {$(
            $(#[$doc])*
            ///
            /// Relaxed, as CUDA's atomics: it orders nothing else. Panics
            /// (traps) when `i >= len`.
            #[inline]
            pub fn $name(self, i: u32, v: $t) -> $t {
                // SAFETY: the import updates shared memory only, atomically;
                // the host checks the bounds and the alignment.
                unsafe { sys::$sys(self.offset(i), v as $wasm) as $t }
            }
        )*}
    };
}

shared_atomics!(i32 as i32 {
    /// Element `i` `+= v` (wrapping); the value before.
    fetch_add => shared_atomic_add_i32;
    /// Element `i` `-= v` (wrapping); the value before.
    fetch_sub => shared_atomic_sub_i32;
    /// Element `i` `&= v`; the value before.
    fetch_and => shared_atomic_and_i32;
    /// Element `i` `|= v`; the value before.
    fetch_or => shared_atomic_or_i32;
    /// Element `i` `^= v`; the value before.
    fetch_xor => shared_atomic_xor_i32;
    /// Element `i` `= v`; the value before.
    swap => shared_atomic_xchg_i32;
    /// Element `i` `= min(element, v)`, signed; the value before.
    fetch_min => shared_atomic_min_i32;
    /// Element `i` `= max(element, v)`, signed; the value before.
    fetch_max => shared_atomic_max_i32;
});

shared_atomics!(u32 as i32 {
    /// Element `i` `+= v` (wrapping); the value before.
    fetch_add => shared_atomic_add_i32;
    /// Element `i` `-= v` (wrapping); the value before.
    fetch_sub => shared_atomic_sub_i32;
    /// Element `i` `&= v`; the value before.
    fetch_and => shared_atomic_and_i32;
    /// Element `i` `|= v`; the value before.
    fetch_or => shared_atomic_or_i32;
    /// Element `i` `^= v`; the value before.
    fetch_xor => shared_atomic_xor_i32;
    /// Element `i` `= v`; the value before.
    swap => shared_atomic_xchg_i32;
    /// Element `i` `= min(element, v)`, unsigned; the value before.
    fetch_min => shared_atomic_min_u32;
    /// Element `i` `= max(element, v)`, unsigned; the value before.
    fetch_max => shared_atomic_max_u32;
});

shared_atomics!(i64 as i64 {
    /// Element `i` `+= v` (wrapping); the value before.
    fetch_add => shared_atomic_add_i64;
});

shared_atomics!(u64 as i64 {
    /// Element `i` `+= v` (wrapping); the value before.
    fetch_add => shared_atomic_add_i64;
});

shared_atomics!(f32 as f32 {
    /// Element `i` `+= v` in `f32` (round to nearest even); the value
    /// before.
    fetch_add => shared_atomic_add_f32;
});

macro_rules! shared_cas {
    ($($t:ty as $wasm:ty => $sys:ident;)*) => {$(
        impl SharedArray<$t> {
            /// Element `i` `= new` if it holds `expected`; the value before
            /// (`expected` exactly when it swapped). Relaxed; panics (traps)
            /// when `i >= len`.
            #[inline]
            pub fn compare_exchange(self, i: u32, expected: $t, new: $t) -> $t {
                // SAFETY: as for `fetch_add`.
                unsafe { sys::$sys(self.offset(i), expected as $wasm, new as $wasm) as $t }
            }
        }
    )*};
}

shared_cas! {
    i32 as i32 => shared_atomic_cas_i32;
    u32 as i32 => shared_atomic_cas_i32;
    i64 as i64 => shared_atomic_cas_i64;
    u64 as i64 => shared_atomic_cas_i64;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arrays_lay_out_one_after_the_other() {
        const A: SharedArray<f32> = SharedArray::new(0, 3);
        const B: SharedArray<f64> = A.followed_by(2);
        const C: SharedArray<u32> = B.followed_by(5);
        assert_eq!((A.byte_offset(), A.end()), (0, 12));
        assert_eq!((B.byte_offset(), B.end()), (16, 32));
        assert_eq!((C.byte_offset(), C.end(), C.len()), (32, 52, 5));
        assert!(SharedArray::<i64>::new(8, 0).is_empty());
    }

    #[test]
    #[should_panic(expected = "multiple of its element size")]
    fn a_misaligned_array_is_refused() {
        let _ = SharedArray::<i32>::new(2, 1);
    }

    #[test]
    #[should_panic(expected = "below 2^31")]
    fn an_array_past_2_gib_is_refused() {
        let _ = SharedArray::<f64>::new(8, 1 << 28);
    }
}
