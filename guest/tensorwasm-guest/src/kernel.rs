//! Kernels written in Rust: a guest's own `extern "C" fn`, made a GPU
//! kernel by the host (`wasi_cuda.kernel_get_table` / `kernel_get_export`,
//! `docs/ABI.md`; the kernel model is `docs/kernels.md`).
//!
//! - Inside a kernel: where the thread is ([`thread_idx_x`] ... [`grid_dim_z`],
//!   CUDA's `threadIdx`, `blockIdx`, `blockDim`, `gridDim`, and
//!   [`global_id_x`] etc.). They are imports the host's translator turns
//!   into the thread's values; called anywhere else (the guest's own code in
//!   its runtime) the host traps the guest. What threads share and how they
//!   wait for each other is [`crate::block`] (shared memory, the barrier)
//!   and [`crate::warp`] (shuffles, votes).
//! - Outside: [`Kernel<F>`], a kernel whose parameter types are those of the
//!   fn pointer type `F`, checked at compile time: each launch argument must
//!   fill its parameter ([`KernelArg`]), and guest slices passed for pointer
//!   parameters stay borrowed until the launch has been waited for, exactly
//!   as for [`crate::Launch::arg_slice`] (the launch is a [`Launch`]).
//!
//! ```no_run
//! use tensorwasm_guest::kernel::{self, Kernel};
//! use tensorwasm_guest::Error;
//!
//! type Saxpy = extern "C" fn(f32, *const f32, *mut f32, u32);
//!
//! extern "C" fn saxpy(a: f32, x: *const f32, y: *mut f32, n: u32) {
//!     let i = kernel::global_id_x();
//!     if i < n {
//!         // SAFETY: the launch passes `x` and `y` as slices of `n` elements
//!         // each, `y` exclusively, and `i < n`.
//!         unsafe { *y.add(i as usize) += a * *x.add(i as usize) };
//!     }
//! }
//!
//! fn run(a: f32, x: &[f32], y: &mut [f32]) -> Result<(), Error> {
//!     assert_eq!(x.len(), y.len());
//!     let n = x.len() as u32;
//!     let k = Kernel::<Saxpy>::from_fn(saxpy)?;
//!     k.launch(n.div_ceil(256), 256, (a, x, y, n)).run()
//! }
//! ```
//!
//! An argument that does not fill its parameter is a compile error:
//!
//! ```compile_fail,E0277
//! # use tensorwasm_guest::kernel::Kernel;
//! # fn demo(k: Kernel<extern "C" fn(f32, *mut f32)>, y: &[f32]) {
//! // `*mut f32` needs a `&mut [f32]`: the kernel writes it.
//! let _ = k.launch(1, 32, (1.0f32, y));
//! # }
//! ```
//!
//! and so is a kernel type whose parameters are not kernel scalars:
//!
//! ```compile_fail,E0277
//! # use tensorwasm_guest::kernel::Kernel;
//! extern "C" fn k(_: &[f32]) {}
//! let _ = Kernel::<extern "C" fn(&[f32])>::from_fn(k);
//! ```
//!
//! The guest borrows what it passes until the launch is done:
//!
//! ```compile_fail,E0499
//! # use tensorwasm_guest::{scope, Error, kernel::Kernel};
//! # fn demo(k: Kernel<extern "C" fn(*mut f32, u32)>) -> Result<(), Error> {
//! let mut y = vec![0.0f32; 256];
//! scope(|s| {
//!     let pending = k.launch(1, 256, (&mut y[..], 256)).submit(s)?;
//!     y[0] = 1.0; // error: `y` is still borrowed by the launch
//!     pending.wait()
//! })
//! # }
//! ```
//!
//! What a kernel may do is `docs/kernels.md`; how to keep a Rust kernel
//! within it (`#![no_std]`, a panic handler that traps, no allocation) is
//! in `guest/README.md`.

use alloc::vec::Vec;
use core::marker::PhantomData;

use crate::error::Error;
use crate::launch::{Dim3, Launch};
use crate::result;
use crate::scalar::Scalar;
use crate::sys;

macro_rules! intrinsics {
    ($($(#[$doc:meta])* $name:ident;)*) => {$(
        $(#[$doc])*
        ///
        /// Only meaningful inside a launched kernel: anywhere else the host
        /// traps the guest.
        #[inline]
        pub fn $name() -> u32 {
            // SAFETY: the import takes nothing and touches no memory; outside
            // a kernel the host traps, which is not undefined behaviour.
            unsafe { sys::$name() as u32 }
        }
    )*};
}

intrinsics! {
    /// This thread's index in its block, x (`threadIdx.x`).
    thread_idx_x;
    /// This thread's index in its block, y (`threadIdx.y`).
    thread_idx_y;
    /// This thread's index in its block, z (`threadIdx.z`).
    thread_idx_z;
    /// This block's index in the grid, x (`blockIdx.x`).
    block_idx_x;
    /// This block's index in the grid, y (`blockIdx.y`).
    block_idx_y;
    /// This block's index in the grid, z (`blockIdx.z`).
    block_idx_z;
    /// Threads per block, x (`blockDim.x`).
    block_dim_x;
    /// Threads per block, y (`blockDim.y`).
    block_dim_y;
    /// Threads per block, z (`blockDim.z`).
    block_dim_z;
    /// Blocks in the grid, x (`gridDim.x`).
    grid_dim_x;
    /// Blocks in the grid, y (`gridDim.y`).
    grid_dim_y;
    /// Blocks in the grid, z (`gridDim.z`).
    grid_dim_z;
}

/// This thread's index in the whole grid, x: `blockIdx.x * blockDim.x +
/// threadIdx.x` (wrapping past `u32::MAX`, which only a grid of more than
/// 2^32 threads in x reaches; no panic path in the kernel).
#[inline]
pub fn global_id_x() -> u32 {
    block_idx_x()
        .wrapping_mul(block_dim_x())
        .wrapping_add(thread_idx_x())
}

/// This thread's index in the whole grid, y; as [`global_id_x`].
#[inline]
pub fn global_id_y() -> u32 {
    block_idx_y()
        .wrapping_mul(block_dim_y())
        .wrapping_add(thread_idx_y())
}

/// This thread's index in the whole grid, z; as [`global_id_x`].
#[inline]
pub fn global_id_z() -> u32 {
    block_idx_z()
        .wrapping_mul(block_dim_z())
        .wrapping_add(thread_idx_z())
}

/// Threads in the whole grid, x: `gridDim.x * blockDim.x` (wrapping), the
/// stride of a grid-stride loop.
#[inline]
pub fn global_size_x() -> u32 {
    grid_dim_x().wrapping_mul(block_dim_x())
}

mod sealed {
    pub trait Param {}
    pub trait Signature {}
}

/// A type a kernel parameter may have: `i32`, `u32`, `i64`, `u64`, `f32`,
/// `f64`, and pointers to [`Scalar`]s (`*const T`, `*mut T`: 32-bit guest
/// offsets on wasm32). These are exactly what the host passes a Wasm
/// kernel (`i32`/`i64`/`f32`/`f64` parameters). Sealed.
pub trait KernelParam: sealed::Param + Copy {}

macro_rules! params {
    ($($t:ty),*) => {$(
        impl sealed::Param for $t {}
        impl KernelParam for $t {}
    )*};
}

params!(i32, u32, i64, u64, f32, f64);
impl<T: Scalar> sealed::Param for *const T {}
impl<T: Scalar> KernelParam for *const T {}
impl<T: Scalar> sealed::Param for *mut T {}
impl<T: Scalar> KernelParam for *mut T {}

/// A kernel's type: `extern "C" fn(A, B, ...)` (up to 12 parameters, no
/// result), each parameter a [`KernelParam`]. Sealed.
pub trait KernelFn: sealed::Signature + Copy {
    /// The function's slot in table 0: the fn pointer's value on wasm32,
    /// where a function pointer is a 32-bit table index.
    fn table_slot(self) -> u32;
}

/// A launch argument that fills a kernel parameter of type `P`, borrowing
/// what it names for `'a`:
///
/// | parameter `P` | argument |
/// | --- | --- |
/// | `i32`, `u32`, `i64`, `u64`, `f32`, `f64` | a value of the same type |
/// | `*const T` | `&'a [T]`, `&'a mut [T]`, `&'a Vec<T>` (the kernel only reads it) |
/// | `*mut T` | `&'a mut [T]`, `&'a mut Vec<T>` (exclusively borrowed until the launch is waited for) |
///
/// A slice is passed as its guest address (the first element's). The
/// kernel must keep within it: pass its length too, and check it (the
/// host bounds every access only by the guest's whole memory).
pub trait KernelArg<'a, P: KernelParam> {
    /// Adds this argument to `launch`.
    fn push(self, launch: Launch<'a>) -> Launch<'a>;
}

macro_rules! value_args {
    ($($t:ty => $push:ident),*) => {$(
        impl<'a> KernelArg<'a, $t> for $t {
            fn push(self, launch: Launch<'a>) -> Launch<'a> {
                launch.$push(self)
            }
        }
    )*};
}

value_args!(i32 => arg_i32, u32 => arg_u32, i64 => arg_i64, u64 => arg_u64,
            f32 => arg_f32, f64 => arg_f64);

/// The guest offset of `ptr`, as the kernel's `i32` pointer parameter.
fn guest_offset<T>(ptr: *const T) -> u32 {
    // Exposed: the kernel reads and writes through this integer. Wasm32
    // addresses are 32 bits, so the cast loses nothing there.
    ptr.expose_provenance() as u32
}

impl<'a, T: Scalar> KernelArg<'a, *const T> for &'a [T] {
    fn push(self, launch: Launch<'a>) -> Launch<'a> {
        launch.arg_u32(guest_offset(self.as_ptr()))
    }
}

impl<'a, T: Scalar> KernelArg<'a, *const T> for &'a mut [T] {
    fn push(self, launch: Launch<'a>) -> Launch<'a> {
        launch.arg_u32(guest_offset(self.as_ptr()))
    }
}

impl<'a, T: Scalar> KernelArg<'a, *const T> for &'a Vec<T> {
    fn push(self, launch: Launch<'a>) -> Launch<'a> {
        self.as_slice().push(launch)
    }
}

impl<'a, T: Scalar> KernelArg<'a, *mut T> for &'a mut [T] {
    fn push(self, launch: Launch<'a>) -> Launch<'a> {
        launch.arg_u32(guest_offset(self.as_mut_ptr()))
    }
}

impl<'a, T: Scalar> KernelArg<'a, *mut T> for &'a mut Vec<T> {
    fn push(self, launch: Launch<'a>) -> Launch<'a> {
        KernelArg::<'a, *mut T>::push(self.as_mut_slice(), launch)
    }
}

/// A tuple of launch arguments for a kernel of type `F`: one
/// [`KernelArg`] per parameter, in order (`()` for no parameters; a
/// one-element tuple is `(x,)`).
pub trait KernelArgs<'a, F: KernelFn> {
    /// Adds every argument to `launch`, in order.
    fn push_all(self, launch: Launch<'a>) -> Launch<'a>;
}

macro_rules! signatures {
    ($(($($p:ident $a:ident),*))*) => {$(
        impl<$($p: KernelParam),*> sealed::Signature for extern "C" fn($($p),*) {}

        impl<$($p: KernelParam),*> KernelFn for extern "C" fn($($p),*) {
            fn table_slot(self) -> u32 {
                self as usize as u32
            }
        }

        impl<'a, $($p: KernelParam, $a: KernelArg<'a, $p>),*>
            KernelArgs<'a, extern "C" fn($($p),*)> for ($($a,)*)
        {
            #[allow(non_snake_case)]
            fn push_all(self, launch: Launch<'a>) -> Launch<'a> {
                let ($($a,)*) = self;
                $(let launch = $a.push(launch);)*
                launch
            }
        }
    )*};
}

signatures! {
    ()
    (P0 A0)
    (P0 A0, P1 A1)
    (P0 A0, P1 A1, P2 A2)
    (P0 A0, P1 A1, P2 A2, P3 A3)
    (P0 A0, P1 A1, P2 A2, P3 A3, P4 A4)
    (P0 A0, P1 A1, P2 A2, P3 A3, P4 A4, P5 A5)
    (P0 A0, P1 A1, P2 A2, P3 A3, P4 A4, P5 A5, P6 A6)
    (P0 A0, P1 A1, P2 A2, P3 A3, P4 A4, P5 A5, P6 A6, P7 A7)
    (P0 A0, P1 A1, P2 A2, P3 A3, P4 A4, P5 A5, P6 A6, P7 A7, P8 A8)
    (P0 A0, P1 A1, P2 A2, P3 A3, P4 A4, P5 A5, P6 A6, P7 A7, P8 A8, P9 A9)
    (P0 A0, P1 A1, P2 A2, P3 A3, P4 A4, P5 A5, P6 A6, P7 A7, P8 A8, P9 A9, P10 A10)
    (P0 A0, P1 A1, P2 A2, P3 A3, P4 A4, P5 A5, P6 A6, P7 A7, P8 A8, P9 A9, P10 A10, P11 A11)
}

/// A kernel made of one of the guest's own functions, of type `F` (an
/// `extern "C" fn(...)` of [`KernelParam`]s). Owns its function handle
/// (released on `Drop`; launches in flight keep the kernel alive on the
/// host). The host makes the kernel once per module and function, however
/// many `Kernel`s name it.
#[derive(Debug)]
pub struct Kernel<F: KernelFn> {
    handle: u64,
    signature: PhantomData<F>,
}

impl<F: KernelFn> Kernel<F> {
    /// The kernel of `f`, named by its function pointer
    /// (`wasi_cuda.kernel_get_table`). Name the type, so that a fn item
    /// becomes a pointer of it: `Kernel::<extern "C" fn(f32, *mut f32,
    /// u32)>::from_fn(scale)` (a type alias reads better). The compiler
    /// checks that `f` has that type; the host that its body is a kernel
    /// (`ENOTSUP` names what it cannot lower, `EQUOTA` a kernel too large).
    pub fn from_fn(f: F) -> Result<Kernel<F>, Error> {
        Ok(Kernel {
            handle: result::kernel_get_table(f.table_slot())?,
            signature: PhantomData,
        })
    }

    /// The kernel of the guest's function exported as `name`
    /// (`wasi_cuda.kernel_get_export`; `EINVAL` when there is none). Nothing
    /// checks that the export has type `F` until a launch: the host refuses
    /// arguments that do not match its parameters (`EINVAL`). Prefer
    /// [`Kernel::from_fn`] when the function is at hand.
    pub fn from_export(name: &str) -> Result<Kernel<F>, Error> {
        Ok(Kernel {
            handle: result::kernel_get_export(name)?,
            signature: PhantomData,
        })
    }

    /// Starts a launch over `grid` blocks of `block` threads (a `u32`, a
    /// pair or a triple) with `args`, one per parameter of `F`; then
    /// [`Launch::run`] or [`Launch::submit`] it. The slices among `args`
    /// stay borrowed (shared for `*const` parameters, exclusive for `*mut`)
    /// until the launch has been waited for.
    pub fn launch<'a>(
        &self,
        grid: impl Into<Dim3>,
        block: impl Into<Dim3>,
        args: impl KernelArgs<'a, F>,
    ) -> Launch<'a> {
        args.push_all(Launch::new(self.handle, grid.into(), block.into()))
    }

    /// The function handle, for the raw layers. Valid until `self` drops.
    pub const fn handle(&self) -> u64 {
        self.handle
    }
}

impl<F: KernelFn> Drop for Kernel<F> {
    fn drop(&mut self) {
        // Cannot fail for a handle we own.
        let _ = result::function_release(self.handle);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::ArgDescriptor;

    extern "C" fn saxpy(_: f32, _: *const f32, _: *mut f32, _: u32) {}

    #[test]
    fn typed_arguments_encode_as_the_wasm_parameters() {
        // Not made by the host (no host here): a handle of our own, forgotten.
        let kernel = core::mem::ManuallyDrop::new(Kernel::<
            extern "C" fn(f32, *const f32, *mut f32, u32, i64, f64),
        > {
            handle: 7,
            signature: PhantomData,
        });
        let x = [1.0f32, 2.0];
        let mut y = [0.0f32; 2];
        let y_addr = y.as_ptr().addr() as u32;
        let launch = kernel.launch(3, 32, (2.5f32, &x[..], &mut y[..], 2u32, -1i64, 0.5f64));
        let d = |tag, a| ArgDescriptor {
            tag,
            align: 0,
            a,
            b: 0,
        };
        assert_eq!(
            launch.args(),
            [
                d(sys::ARG_F32, 2.5f32.to_bits().into()),
                d(sys::ARG_I32, (x.as_ptr().addr() as u32).into()),
                d(sys::ARG_I32, y_addr.into()),
                d(sys::ARG_I32, 2),
                d(sys::ARG_I64, u64::MAX),
                d(sys::ARG_F64, 0.5f64.to_bits()),
            ]
        );
    }

    #[test]
    fn vectors_and_literals_fill_their_parameters() {
        let kernel =
            core::mem::ManuallyDrop::new(Kernel::<extern "C" fn(*const u8, *mut u8, f32)> {
                handle: 7,
                signature: PhantomData,
            });
        let a = alloc::vec![1u8, 2, 3];
        let mut b = alloc::vec![0u8; 3];
        let b_addr = b.as_ptr().addr() as u32;
        let launch = kernel.launch(1, 1, (&a, &mut b, 1.0));
        let offsets: Vec<u64> = launch.args().iter().map(|d| d.a).collect();
        assert_eq!(
            offsets,
            [
                u64::from(a.as_ptr().addr() as u32),
                u64::from(b_addr),
                u64::from(1.0f32.to_bits())
            ]
        );
    }

    #[test]
    fn a_fn_pointer_is_its_table_slot_on_wasm32() {
        let f: extern "C" fn(f32, *const f32, *mut f32, u32) = saxpy;
        assert_eq!(f.table_slot(), f as usize as u32);
    }
}
