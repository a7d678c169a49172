//! A warp's collective operations, for kernels written in Rust: the
//! thread's lane ([`lane_id`]), shuffles ([`shfl_idx`], [`shfl_up`],
//! [`shfl_down`], [`shfl_xor`]) and votes ([`ballot`], [`any`], [`all`]),
//! through the host's `tensorwasm_kernel` intrinsics (`docs/kernels.md`,
//! "Warp operations"). What a whole block shares is [`crate::block`].
//!
//! A warp is [`WARP_SIZE`] (32) consecutive threads of a block, on every
//! target. The lanes that take part in an operation are those of the warp
//! that execute it together: every live lane of the warp in code where all
//! of them follow the same path (since the kernel's start or the last
//! [`barrier`](crate::block::barrier)); in divergent code which lanes run
//! together is the device's choice, as in CUDA. A lane whose source lane is
//! out of range (`shfl_up` below lane 0, `shfl_down` past lane 31) or does
//! not take part gets its own `v` back. Nothing here ever waits for a lane
//! that is elsewhere, so a shuffle cannot hang.
//!
//! Only inside a launched kernel: in the guest's own code every function
//! here traps the guest. A CPU reference replays the lanes as plain Rust
//! (an array of 32 values, one step of the butterfly at a time).
//!
//! A warp's sum by a butterfly of `shfl_xor`s: after the five steps every
//! lane holds the same sum, added in the same order on every lane.
//!
//! ```no_run
//! use tensorwasm_guest::warp;
//!
//! /// The sum of `v` over the 32 lanes of the warp, on every lane.
//! fn warp_sum(mut v: f32) -> f32 {
//!     let mut mask = warp::WARP_SIZE / 2;
//!     while mask > 0 {
//!         v += warp::shfl_xor(v, mask);
//!         mask /= 2;
//!     }
//!     v
//! }
//! ```

use crate::sys;

/// Lanes per warp on every target, what [`warp_size`] returns.
pub const WARP_SIZE: u32 = 32;

/// This thread's lane in its warp, `0 .. 32` (`threadIdx.x % 32` for a
/// one-dimensional block). Only inside a kernel.
#[inline]
pub fn lane_id() -> u32 {
    // SAFETY: the import takes nothing and touches no memory; outside a
    // kernel the host traps, which is not undefined behaviour.
    unsafe { sys::lane_id() as u32 }
}

/// Lanes per warp: 32 ([`WARP_SIZE`]) on every target. Only inside a
/// kernel.
#[inline]
pub fn warp_size() -> u32 {
    // SAFETY: as for `lane_id`.
    unsafe { sys::warp_size() as u32 }
}

mod sealed {
    /// The four shuffles of one value type, with the intrinsics' operands.
    pub trait Lanes: Copy {
        fn idx(self, lane: i32) -> Self;
        fn up(self, delta: i32) -> Self;
        fn down(self, delta: i32) -> Self;
        fn xor(self, mask: i32) -> Self;
    }
}

/// A value a shuffle moves between lanes: `i32`, `u32`, `f32` (bits
/// unchanged). Sealed.
pub trait Shuffle: sealed::Lanes {}

macro_rules! shuffles {
    ($($t:ty as $wasm:ty => $idx:ident, $up:ident, $down:ident, $xor:ident;)*) => {$(
        impl sealed::Lanes for $t {
            #[inline]
            fn idx(self, lane: i32) -> $t {
                // SAFETY: the import exchanges values between lanes and
                // touches no memory; outside a kernel the host traps.
                unsafe { sys::$idx(self as $wasm, lane) as $t }
            }

            #[inline]
            fn up(self, delta: i32) -> $t {
                // SAFETY: as for `idx`.
                unsafe { sys::$up(self as $wasm, delta) as $t }
            }

            #[inline]
            fn down(self, delta: i32) -> $t {
                // SAFETY: as for `idx`.
                unsafe { sys::$down(self as $wasm, delta) as $t }
            }

            #[inline]
            fn xor(self, mask: i32) -> $t {
                // SAFETY: as for `idx`.
                unsafe { sys::$xor(self as $wasm, mask) as $t }
            }
        }

        impl Shuffle for $t {}
    )*};
}

shuffles! {
    i32 as i32 => shfl_idx_i32, shfl_up_i32, shfl_down_i32, shfl_xor_i32;
    u32 as i32 => shfl_idx_i32, shfl_up_i32, shfl_down_i32, shfl_xor_i32;
    f32 as f32 => shfl_idx_f32, shfl_up_f32, shfl_down_f32, shfl_xor_f32;
}

/// `v` of lane `lane % 32` (CUDA's `__shfl_sync`); this lane's own `v`
/// when that lane does not take part. Only inside a kernel.
#[inline]
pub fn shfl_idx<T: Shuffle>(v: T, lane: u32) -> T {
    v.idx(lane as i32)
}

/// `v` of lane `lane_id() - delta` (`__shfl_up_sync`); this lane's own `v`
/// below lane `delta` or when that lane does not take part. The step of an
/// inclusive scan. Only inside a kernel.
#[inline]
pub fn shfl_up<T: Shuffle>(v: T, delta: u32) -> T {
    v.up(delta as i32)
}

/// `v` of lane `lane_id() + delta` (`__shfl_down_sync`); this lane's own
/// `v` past lane 31 or when that lane does not take part. Only inside a
/// kernel.
#[inline]
pub fn shfl_down<T: Shuffle>(v: T, delta: u32) -> T {
    v.down(delta as i32)
}

/// `v` of lane `lane_id() ^ mask` (`__shfl_xor_sync`); this lane's own `v`
/// when that lane is past 31 or does not take part. The step of a
/// butterfly reduction. Only inside a kernel.
#[inline]
pub fn shfl_xor<T: Shuffle>(v: T, mask: u32) -> T {
    v.xor(mask as i32)
}

/// Bit `i` set when lane `i` takes part and its `pred` holds
/// (`__ballot_sync`). Only inside a kernel.
#[inline]
pub fn ballot(pred: bool) -> u32 {
    // SAFETY: the import exchanges values between lanes and touches no
    // memory; outside a kernel the host traps.
    unsafe { sys::ballot(pred.into()) as u32 }
}

/// Whether `pred` holds on some lane taking part (`__any_sync`). Only
/// inside a kernel.
#[inline]
pub fn any(pred: bool) -> bool {
    // SAFETY: as for `ballot`.
    unsafe { sys::any(pred.into()) != 0 }
}

/// Whether `pred` holds on every lane taking part (`__all_sync`). Only
/// inside a kernel.
#[inline]
pub fn all(pred: bool) -> bool {
    // SAFETY: as for `ballot`.
    unsafe { sys::all(pred.into()) != 0 }
}
