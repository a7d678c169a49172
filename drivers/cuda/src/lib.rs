//! TensorWasm's CUDA driver: [`GpuDriver`](tensorwasm_core::GpuDriver) and
//! [`ManagedAllocator`](tensorwasm_core::ManagedAllocator) on an NVIDIA GPU.
//!
//! `libcuda` is opened at run time (`libcuda.so.1`, `nvcuda.dll`, or the path
//! in `TENSORWASM_LIBCUDA`), so this crate builds and its tests compile where
//! no CUDA is installed; there, [`CudaDriver::new`] returns a typed error.
//!
//! Three layers, as in cudarc: [`sys`] is bindgen output (never edited by
//! hand), `result` turns each call into a `Result` (one function per CUDA
//! call, same name), and the safe layer ([`CudaDriver`] and the resource
//! types) owns resources and frees them on drop.

pub mod error;
#[allow(
    missing_docs,
    non_camel_case_types,
    non_snake_case,
    non_upper_case_globals,
    dead_code,
    unsafe_op_in_unsafe_fn,
    clippy::all,
    clippy::undocumented_unsafe_blocks
)]
pub mod sys;

mod context;
mod driver;
mod jit;
mod managed;
mod memory;
mod module;
mod result;
mod stream;
mod tensor_map;
mod vm;

pub use context::{DEFAULT_LIBCUDA, LIBCUDA_ENV};
pub use driver::CudaDriver;
pub use error::{CudaError, MIN_DRIVER_VERSION};
pub use jit::{JIT_CACHE_ENV, JitCache};
pub use managed::CudaRegion;
pub use memory::CudaBuffer;
pub use module::{CudaFunction, CudaModule};
pub use stream::{CudaEvent, CudaStream};
pub use vm::CudaVirtualRange;
