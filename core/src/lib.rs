//! TensorWasm core: the traits every driver implements, and the policy that
//! sits above them. `no_std` + `alloc`, so a custom host (or a microcontroller
//! build) can link it without wasmtime and without a driver.
//!
//! - [`driver`]: [`GpuDriver`], what a device offers.
//! - [`managed`]: [`ManagedAllocator`], the backing of guest linear memory.
//! - [`error`]: the driver-independent [`ErrorKind`] every driver error maps to.
//! - [`device`], [`memory`], [`launch`]: the plain types those traits speak in.
//! - [`image`]: checks on untrusted cubin/fatbin images before a driver reads them.
//! - [`abi`]: the `wasi_cuda` guest ABI's checks: errnos, handle tables,
//!   guest-memory access and the launch-argument decoder (`docs/ABI.md`).
//! - [`dispatch`](mod@dispatch): [`Completer`] and [`DispatchFuture`], the
//!   completion state machine behind launch waits.
//! - [`quota`]: per-tenant quota accounting: [`TenantQuota`], the
//!   [`QuotaLedger`] and the RAII [`Charge`]s that hold a share of it.
//! - [`sync`]: where atomics and locks come from (loom's under `cfg(loom)`).
//! - `lower` (feature `lower`): Wasm kernels — a guest function translated
//!   to Cranelift IR and lowered to PTX (`docs/kernels.md`).

#![no_std]
#![cfg_attr(docsrs, feature(doc_cfg))]

extern crate alloc;
// Only the loom models (`--cfg loom`) link std: loom's types need it.
#[cfg(loom)]
extern crate std;

pub mod abi;
pub mod device;
pub mod dispatch;
pub mod driver;
pub mod error;
pub mod image;
pub mod launch;
#[cfg(feature = "lower")]
pub mod lower;
pub mod managed;
pub mod memory;
pub mod quota;
pub mod sync;

pub use device::{DeviceInfo, DriverKind, MemInfo, MemoryKind, PointerInfo};
pub use dispatch::{AlreadyCompleted, Completer, DispatchFuture, dispatch};
pub use driver::{DeviceMemory, GpuDriver, VirtualMemory};
pub use error::{DriverError, ErrorKind};
pub use launch::{
    Dim3, KernelParam, LaunchConfig, LaunchConfigError, MAX_KERNEL_PARAMS, TensorMapDtype,
    TensorMapError, TensorMapSpec, TensorMapSwizzle,
};
pub use managed::{ManagedAllocator, ManagedRegion, MemorySnapshot, RegionError};
pub use memory::{Advice, DevicePtr, DeviceRange, PrefetchOutcome, PrefetchTarget};
pub use quota::{
    Charge, OwnedCharge, OwnedReservation, QuotaError, QuotaLedger, QuotaSnapshot, Reservation,
    Resource, TenantQuota,
};
