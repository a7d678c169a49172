//! TensorWasm guest library: safe Rust over the `wasi_cuda` imports that a
//! TensorWasm host gives a Wasm guest (`docs/ABI.md`). `no_std` + `alloc`:
//! the guest brings the global allocator (Rust's std brings one on
//! `wasm32-unknown-unknown`, and imports nothing for it).
//!
//! Three layers, as the host's driver crates have them:
//! - [`sys`]: the raw imports, one per ABI function, and the records they
//!   read and write.
//! - [`result`]: one safe function per import, same name, returning
//!   `Result<_, Error>`; handles are plain `u64`.
//! - the crate root: types that own what they name and free it on `Drop`
//!   ([`Buffer`], [`Module`]), [`Device`], and kernel launches ([`Launch`],
//!   [`scope`], [`PendingLaunch`]) whose borrows keep guest slices alive and
//!   untouched while a kernel uses them.
//! - [`kernel`]: kernels written in Rust. Inside a kernel, where the thread
//!   is ([`kernel::thread_idx_x`], [`kernel::global_id_x`], ...); outside,
//!   [`Kernel<F>`], a guest function of type `F` (`extern "C" fn(...)`)
//!   made a kernel by function pointer or export name, launched with
//!   arguments checked against `F` at compile time; [`atomic`], the
//!   atomic read-modify-writes kernel threads share guest memory with;
//!   [`block`], a block's shared memory ([`block::SharedArray`]) and
//!   barrier; [`warp`], a warp's shuffles and votes.
//! - [`tensor`]: the host's built-in tensor ops (GEMM, reductions, softmax,
//!   layer norm, elementwise ops, transpose) on typed views of guest slices
//!   or buffers, launched and waited for like kernels.
//! - [`math`]: math functions for kernels (`expf`), Wasm arithmetic with no
//!   stack frame or table, so the GPU and CPU give the same bits.
//!
//! Every [`Error`] carries the host's `last_error` text for the failed call.
//!
//! ```no_run
//! use tensorwasm_guest::{Error, Module};
//!
//! fn add(a: &[f32], b: &[f32]) -> Result<Vec<f32>, Error> {
//!     let module = Module::load_ptx(include_str!("../../../kernels/test/vector_add.ptx"))?;
//!     let vadd = module.function("vadd")?;
//!     let mut c = vec![0.0f32; a.len()];
//!     let n = a.len() as u32;
//!     vadd.launch(n.div_ceil(256), 256)
//!         .arg_slice(a)
//!         .arg_slice(b)
//!         .arg_slice_mut(&mut c)
//!         .arg_u32(n)
//!         .run()?;
//!     Ok(c)
//! }
//! ```

#![cfg_attr(not(test), no_std)]
#![deny(missing_docs)]

extern crate alloc;

pub mod atomic;
pub mod block;
pub mod kernel;
pub mod math;
pub mod result;
pub mod sys;
pub mod tensor;
pub mod warp;

mod buffer;
mod device;
mod error;
mod launch;
mod memory;
mod module;
mod scalar;

use alloc::string::String;

pub use buffer::Buffer;
pub use device::{Device, DeviceInfo, DriverKind};
pub use error::{Errno, Error};
pub use kernel::Kernel;
pub use launch::{Dim3, Launch, PendingLaunch, Scope, scope, sync};
pub use memory::{Advice, Target, advise, prefetch};
pub use module::{Function, Module};
pub use scalar::Scalar;

/// The text of the guest's most recent failed call (empty when none has
/// failed). Reading it does not clear it. Every [`Error`] already holds the
/// text of its own call.
pub fn last_error() -> String {
    result::last_error_text()
}
