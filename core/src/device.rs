//! Plain descriptions of a device, its memory and a pointer, as a driver
//! reports them. No behaviour lives here.

use alloc::string::String;

use crate::memory::DevicePtr;

/// Which driver implements a [`GpuDriver`](crate::GpuDriver).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum DriverKind {
    /// NVIDIA GPUs through `libcuda`.
    Cuda,
    /// Host threads and host memory standing in for a device.
    Cpu,
}

impl DriverKind {
    /// The name used on the command line (`--driver cuda|cpu`).
    pub const fn as_str(self) -> &'static str {
        match self {
            DriverKind::Cuda => "cuda",
            DriverKind::Cpu => "cpu",
        }
    }
}

/// What a device is and what it supports.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct DeviceInfo {
    /// The driver's index of the device.
    pub ordinal: u32,
    /// The device's name, as the driver reports it.
    pub name: String,
    /// Compute capability (major, minor); `None` for devices that are not GPUs.
    pub compute_capability: Option<(u32, u32)>,
    /// Streaming multiprocessors (GPU) or worker threads (CPU).
    pub multiprocessor_count: u32,
    /// The multiprocessors' peak clock in kHz: the rate of the cycle
    /// counter a Wasm kernel's time checks read (the CPU driver reports
    /// 1 GHz: its kernels' clock counts nanoseconds).
    pub clock_rate_khz: u32,
    /// Most threads resident on one multiprocessor at once (2048 on the
    /// H100); with `multiprocessor_count`, the device's thread slots.
    pub max_threads_per_multiprocessor: u32,
    /// Total device memory in bytes.
    pub total_memory: u64,
    /// Largest number of threads in one block.
    pub max_threads_per_block: u32,
    /// Largest block dimensions (x, y, z).
    pub max_block_dim: (u32, u32, u32),
    /// Largest grid dimensions (x, y, z).
    pub max_grid_dim: (u32, u32, u32),
    /// Largest dynamic shared memory per block without opting in, in bytes.
    pub max_shared_memory_per_block: u32,
    /// Largest dynamic shared memory per block a kernel may opt in to, in
    /// bytes (CUDA's `MAX_SHARED_MEMORY_PER_BLOCK_OPTIN`: 227 KiB on the
    /// H100; the CPU driver has no opt-in and reports its plain maximum).
    /// Host-side only: the guest's `device_info` record does not carry it.
    pub max_shared_memory_per_block_optin: u32,
    /// Threads per warp.
    pub warp_size: u32,
    /// Host and device may touch managed memory at the same time; without
    /// it, prefetch is an advisory no-op.
    pub concurrent_managed_access: bool,
    /// Virtual-memory reserve/map/unmap is available.
    pub vmm_supported: bool,
    /// The driver's version as (major, minor), e.g. (13, 0); `None` for the CPU driver.
    pub driver_version: Option<(u32, u32)>,
}

/// Free and total device memory, in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct MemInfo {
    /// Bytes not allocated.
    pub free: u64,
    /// Bytes in all.
    pub total: u64,
}

/// Where the memory behind an address lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum MemoryKind {
    /// Device memory (`cuMemAlloc`, or a mapped virtual range).
    Device,
    /// Managed (unified) memory, migrated on demand.
    Managed,
    /// Host memory the driver knows about (pinned or registered).
    PinnedHost,
    /// Memory the driver does not know: a host heap or stack address.
    Unknown,
}

/// What a driver knows about an address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct PointerInfo {
    /// The address asked about.
    pub address: DevicePtr,
    /// Where its memory lives.
    pub kind: MemoryKind,
}

impl PointerInfo {
    /// The address is managed (unified) memory.
    pub fn is_managed(&self) -> bool {
        self.kind == MemoryKind::Managed
    }

    /// A kernel may dereference the address. Only memory the driver allocated
    /// or registered counts: pageable host memory that a device could reach
    /// through HMM is deliberately reported as not addressable.
    pub fn is_device_addressable(&self) -> bool {
        self.kind != MemoryKind::Unknown
    }
}
