//! TensorWasm's CPU driver: the default where no GPU is found. Host memory
//! stands in for device and managed memory, each stream is a worker thread
//! that runs its queue in order, and kernels are host closures
//! ([`HostKernelFn`]) called once per block, with a launch's blocks spread
//! over scoped worker threads.
//!
//! The crate owns host allocations, `mmap` reservations (virtual memory and
//! managed regions) and its stream threads. It implements
//! [`GpuDriver`](tensorwasm_core::GpuDriver) and
//! [`ManagedAllocator`](tensorwasm_core::ManagedAllocator) and adds only host
//! kernels ([`CpuDriver::host_module`]) to their contract. PTX and cubin
//! images need the CUDA driver and are refused with `ErrorKind::NotSupported`.

#[cfg(not(unix))]
compile_error!("tensorwasm-cpu needs a unix host: virtual memory and managed regions use mmap");

mod device;
mod driver;
mod error;
mod event;
mod kernel;
mod memory;
mod os;
mod region;
mod stream;
mod sync;
#[cfg(test)]
mod testing;
mod vm;

pub use driver::{CpuDriver, WeakCpuDriver};
pub use error::CpuError;
pub use event::CpuEvent;
pub use kernel::{BlockContext, CpuFunction, CpuModule, HostKernelFn};
pub use memory::{CpuDeviceBuffer, CpuManagedBuffer};
pub use region::CpuRegion;
pub use stream::CpuStream;
pub use vm::CpuVirtualRange;
