//! Addresses and ranges of device-visible memory, and the hints a driver
//! takes about them. Ranges are checked when they are made, so a driver never
//! sees an offset or length that leaves its allocation.

use core::{fmt, marker::PhantomData};

/// An address in the device's (unified) address space.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct DevicePtr(pub u64);

impl DevicePtr {
    /// The null address.
    pub const NULL: DevicePtr = DevicePtr(0);

    /// The address `bytes` further on, or `None` on overflow.
    pub fn checked_add(self, bytes: usize) -> Option<DevicePtr> {
        self.0
            .checked_add(u64::try_from(bytes).ok()?)
            .map(DevicePtr)
    }
}

impl fmt::Debug for DevicePtr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DevicePtr({:#x})", self.0)
    }
}

impl fmt::Display for DevicePtr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#x}", self.0)
    }
}

/// A checked range of device-visible memory, borrowed from the allocation
/// that owns it, so it cannot outlive that allocation.
///
/// Made by [`DeviceMemory::range`](crate::DeviceMemory::range), which checks
/// the offset and length, or by a driver with [`DeviceRange::from_raw`].
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct DeviceRange<'a> {
    ptr: DevicePtr,
    len: usize,
    _owner: PhantomData<&'a ()>,
}

impl<'a> DeviceRange<'a> {
    /// A range over `len` bytes at `ptr`.
    ///
    /// # Safety
    /// `ptr .. ptr + len` must lie inside one live allocation of the driver
    /// that will use the range, and that allocation must outlive `'a`.
    pub unsafe fn from_raw(ptr: DevicePtr, len: usize) -> Self {
        DeviceRange {
            ptr,
            len,
            _owner: PhantomData,
        }
    }

    /// The first address.
    pub fn ptr(&self) -> DevicePtr {
        self.ptr
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// The range holds no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The sub-range `offset .. offset + len`, or `None` if it does not fit.
    pub fn sub(&self, offset: usize, len: usize) -> Option<DeviceRange<'a>> {
        let end = offset.checked_add(len)?;
        if end > self.len {
            return None;
        }
        Some(DeviceRange {
            ptr: self.ptr.checked_add(offset)?,
            len,
            _owner: PhantomData,
        })
    }
}

impl fmt::Debug for DeviceRange<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DeviceRange({:#x}, {} bytes)", self.ptr.0, self.len)
    }
}

#[cfg(feature = "defmt")]
impl defmt::Format for DeviceRange<'_> {
    fn format(&self, f: defmt::Formatter<'_>) {
        defmt::write!(
            f,
            "DeviceRange({=u64:#x}, {=usize} bytes)",
            self.ptr.0,
            self.len
        )
    }
}

/// A hint about how managed memory will be used (`cuMemAdvise`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum Advice {
    /// Mostly read: the driver may keep read-only copies on several processors.
    SetReadMostly,
    /// Undo [`Advice::SetReadMostly`].
    UnsetReadMostly,
    /// Prefer to keep the pages on the device.
    PreferDevice,
    /// Prefer to keep the pages on the host.
    PreferHost,
    /// Undo a preferred location.
    UnsetPreferredLocation,
    /// The device will access the range: keep it mapped there.
    AccessedByDevice,
    /// Undo [`Advice::AccessedByDevice`].
    UnsetAccessedByDevice,
}

/// Where to move managed pages ahead of use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum PrefetchTarget {
    /// The driver's device.
    Device,
    /// Host memory.
    Host,
}

/// What a prefetch did. A prefetch is advice: when the device cannot take it,
/// it is skipped, and the caller can see that it was.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum PrefetchOutcome {
    /// The migration was queued on the stream.
    Issued,
    /// Skipped: the device lacks `concurrentManagedAccess`.
    SkippedNoConcurrentManagedAccess,
    /// Skipped: the memory is host memory already (the CPU driver).
    SkippedHostMemory,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sub_ranges_are_checked() {
        // SAFETY: the range is never handed to a driver.
        let r = unsafe { DeviceRange::from_raw(DevicePtr(0x1000), 256) };
        assert_eq!(r.sub(0, 256).map(|s| s.len()), Some(256));
        assert_eq!(r.sub(255, 1).map(|s| s.ptr()), Some(DevicePtr(0x10ff)));
        assert!(r.sub(256, 1).is_none());
        assert!(r.sub(1, 256).is_none());
        assert!(r.sub(usize::MAX, 2).is_none());
        assert_eq!(r.sub(256, 0).map(|s| s.len()), Some(0));
    }

    #[test]
    fn pointer_overflow_is_none() {
        assert_eq!(DevicePtr(u64::MAX).checked_add(1), None);
        assert_eq!(DevicePtr(1).checked_add(2), Some(DevicePtr(3)));
    }
}
