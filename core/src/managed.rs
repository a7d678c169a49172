//! [`ManagedAllocator`]: the backing of a guest's linear memory. A region
//! reserves the memory's maximum once and exposes a growing prefix of it, so
//! growth never moves the base address and kernels keep valid pointers.

use alloc::vec::Vec;
use core::fmt;

use crate::{
    error::DriverError,
    memory::{Advice, DevicePtr, PrefetchOutcome, PrefetchTarget},
};

/// A reserved region: `len()` bytes exposed out of `capacity()` reserved,
/// at a fixed base address that host and device share.
pub trait ManagedRegion: Send {
    /// The base address (the same for host and device).
    fn base(&self) -> DevicePtr;

    /// The base as a host pointer.
    fn host_ptr(&self) -> *mut u8;

    /// Bytes exposed now.
    fn len(&self) -> usize;

    /// No byte is exposed.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes reserved: the most `len()` can grow to.
    fn capacity(&self) -> usize;

    /// A kernel may dereference addresses inside the region.
    fn device_addressable(&self) -> bool;
}

/// The bytes and size of a region at one moment.
#[derive(Clone, PartialEq, Eq)]
pub struct MemorySnapshot {
    /// The exposed bytes, `len` of them.
    pub bytes: Vec<u8>,
}

impl MemorySnapshot {
    /// The exposed size when the snapshot was taken.
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    /// The snapshot holds no bytes.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }
}

impl fmt::Debug for MemorySnapshot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "MemorySnapshot({} bytes)", self.bytes.len())
    }
}

/// Why a region operation was refused before the driver was asked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum RegionError {
    /// The initial size exceeds the maximum.
    InitialAboveMaximum,
    /// Growth past the reserved capacity.
    BeyondCapacity,
    /// Shrinking is not growing.
    Shrink,
    /// An offset/length outside the exposed bytes.
    OutOfBounds,
    /// The maximum exceeds what the device has free.
    ExceedsFreeMemory,
}

impl fmt::Display for RegionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RegionError::InitialAboveMaximum => "initial size above the maximum",
            RegionError::BeyondCapacity => "growth beyond the reserved maximum",
            RegionError::Shrink => "a region cannot shrink by growing",
            RegionError::OutOfBounds => "range outside the exposed region",
            RegionError::ExceedsFreeMemory => "maximum exceeds the device's free memory",
        })
    }
}

impl RegionError {
    /// Checks `offset .. offset + len` against `exposed` bytes.
    pub fn check_range(exposed: usize, offset: usize, len: usize) -> Result<(), RegionError> {
        match offset.checked_add(len) {
            Some(end) if end <= exposed => Ok(()),
            _ => Err(RegionError::OutOfBounds),
        }
    }

    /// Checks growth from `current` to `new_len` within `capacity`.
    pub fn check_grow(current: usize, new_len: usize, capacity: usize) -> Result<(), RegionError> {
        if new_len < current {
            Err(RegionError::Shrink)
        } else if new_len > capacity {
            Err(RegionError::BeyondCapacity)
        } else {
            Ok(())
        }
    }
}

/// Allocates and manages the regions behind guest linear memories.
///
/// New bytes (the initial prefix, growth, the tail cut off by a restore) read
/// as zero, as Wasm requires.
pub trait ManagedAllocator: Send + Sync {
    /// The driver's error.
    type Error: DriverError;
    /// A reserved region, released on drop.
    type Region: ManagedRegion;

    /// Reserves `maximum` bytes and exposes the first `initial` of them.
    /// Refused if `maximum` exceeds the device's free memory.
    fn reserve(&self, maximum: usize, initial: usize) -> Result<Self::Region, Self::Error>;

    /// Exposes the first `new_len` bytes; the base address does not change.
    fn grow(&self, region: &mut Self::Region, new_len: usize) -> Result<(), Self::Error>;

    /// Gives the driver a hint about `offset .. offset + len` of the region.
    fn advise(
        &self,
        region: &Self::Region,
        offset: usize,
        len: usize,
        advice: Advice,
    ) -> Result<(), Self::Error>;

    /// Queues migration of `offset .. offset + len` of the region.
    fn prefetch(
        &self,
        region: &Self::Region,
        offset: usize,
        len: usize,
        target: PrefetchTarget,
    ) -> Result<PrefetchOutcome, Self::Error>;

    /// Copies the exposed bytes out, after all queued work has finished.
    fn snapshot(&self, region: &Self::Region) -> Result<MemorySnapshot, Self::Error>;

    /// Puts a snapshot's bytes and size back (after queued work has
    /// finished); bytes past the snapshot's size read as zero when exposed
    /// again.
    fn restore(
        &self,
        region: &mut Self::Region,
        snapshot: &MemorySnapshot,
    ) -> Result<(), Self::Error>;
}
