//! Managed regions, the backing of guest linear memory: one inaccessible
//! `mmap` of the maximum (charged in full), of which a page-rounded prefix is
//! committed. Growth commits more pages and never moves the base; a restore
//! that shrinks decommits the cut-off pages so they read zero when exposed
//! again.

use std::{fmt, io, ptr};

use tensorwasm_core::{
    Advice, DevicePtr, ErrorKind, ManagedAllocator, ManagedRegion, MemoryKind, MemorySnapshot,
    PrefetchOutcome, PrefetchTarget, RegionError,
};

use crate::{
    driver::CpuDriver,
    error::CpuError,
    memory::{Charge, Claim},
    os::HostMapping,
    sync::Arc,
};

/// A reserved region of host memory, addressable by host and kernels at the
/// same base. Dropping it waits for all queued work, then unmaps it.
pub struct CpuRegion {
    // Field order is drop order: unregister and uncharge, then unmap.
    claim: Claim,
    mapping: HostMapping,
    /// Bytes exposed.
    len: usize,
    /// The reserved maximum.
    capacity: usize,
    /// Bytes readable and writable: `len` rounded up to a page.
    committed: usize,
}

impl CpuRegion {
    fn page_size(&self) -> usize {
        self.claim.device().page_size
    }

    /// Exposes `new_len >= len` bytes; the new bytes read as zero.
    fn grow_to(&mut self, new_len: usize) -> io::Result<()> {
        let committed = new_len.next_multiple_of(self.page_size());
        if committed > self.committed {
            self.mapping
                .commit(self.committed, committed - self.committed)?;
        }
        // Pages past the old commit are fresh (zero); bytes between the old
        // length and the old commit are zero unless a kernel wrote out of
        // bounds, so they are cleared to keep the promise regardless.
        let stale_end = new_len.min(self.committed);
        if stale_end > self.len {
            // SAFETY: len..stale_end lies in committed pages of the mapping
            // this region owns, outside the exposed bytes, so nothing else
            // may refer to it.
            unsafe {
                ptr::write_bytes(self.mapping.as_ptr().add(self.len), 0, stale_end - self.len)
            };
        }
        self.committed = self.committed.max(committed);
        self.len = new_len;
        self.claim.set_accessible(new_len);
        Ok(())
    }

    /// Makes the exposed bytes exactly `bytes` (at most the capacity); pages
    /// past them are decommitted and the rest of the last page zeroed. The
    /// caller has drained every stream.
    fn reset_to(&mut self, bytes: &[u8]) -> io::Result<()> {
        let new_len = bytes.len();
        let committed = new_len.next_multiple_of(self.page_size());
        // Copies may not reach bytes about to disappear.
        self.claim.set_accessible(new_len.min(self.len));
        let resized = if committed > self.committed {
            self.mapping
                .commit(self.committed, committed - self.committed)
        } else {
            // SAFETY: every stream is drained and the region is borrowed
            // mutably, so nothing touches the pages past the new length.
            unsafe { self.mapping.decommit(committed, self.committed - committed) }
        };
        if let Err(err) = resized {
            self.claim.set_accessible(self.len);
            return Err(err);
        }
        self.committed = committed;
        let base = self.mapping.as_ptr();
        // SAFETY: 0..committed is committed in the mapping this region owns,
        // borrowed mutably with every stream drained; `bytes` is a separate
        // heap buffer (ptr::copy would tolerate overlap anyway).
        unsafe {
            ptr::copy(bytes.as_ptr(), base, new_len);
            ptr::write_bytes(base.add(new_len), 0, committed - new_len);
        }
        self.len = new_len;
        self.claim.set_accessible(new_len);
        Ok(())
    }
}

impl ManagedRegion for CpuRegion {
    fn base(&self) -> DevicePtr {
        DevicePtr(self.mapping.addr())
    }

    fn host_ptr(&self) -> *mut u8 {
        self.mapping.as_ptr()
    }

    fn len(&self) -> usize {
        self.len
    }

    fn capacity(&self) -> usize {
        self.capacity
    }

    fn device_addressable(&self) -> bool {
        true
    }
}

impl Drop for CpuRegion {
    fn drop(&mut self) {
        self.claim.device().streams.drain();
    }
}

impl fmt::Debug for CpuRegion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "CpuRegion({:#x}, {} of {} bytes)",
            self.mapping.addr(),
            self.len,
            self.capacity
        )
    }
}

fn refused(op: &'static str, why: RegionError, detail: String) -> CpuError {
    let kind = match why {
        RegionError::ExceedsFreeMemory => ErrorKind::OutOfMemory,
        _ => ErrorKind::InvalidArgument,
    };
    CpuError::new(op, kind, format!("{why} ({detail})"))
}

impl CpuDriver {
    fn own_region(&self, op: &'static str, region: &CpuRegion) -> Result<(), CpuError> {
        if Arc::ptr_eq(region.claim.device(), &self.device) {
            Ok(())
        } else {
            Err(CpuError::invalid(
                op,
                "the region was reserved by another CpuDriver",
            ))
        }
    }

    fn check_region_range(
        &self,
        op: &'static str,
        region: &CpuRegion,
        offset: usize,
        len: usize,
    ) -> Result<(), CpuError> {
        self.own_region(op, region)?;
        RegionError::check_range(region.len, offset, len).map_err(|why| {
            refused(
                op,
                why,
                format!("{offset} + {len} bytes of {} exposed", region.len),
            )
        })
    }
}

/// Regions are host memory: the whole maximum is charged to the ledger when
/// reserved, registered as `Managed`, and `prefetch` is always skipped.
impl ManagedAllocator for CpuDriver {
    type Error = CpuError;
    type Region = CpuRegion;

    fn reserve(&self, maximum: usize, initial: usize) -> Result<CpuRegion, CpuError> {
        const OP: &str = "reserve";
        let device = &self.device;
        if initial > maximum {
            return Err(refused(
                OP,
                RegionError::InitialAboveMaximum,
                format!("{initial} > {maximum} bytes"),
            ));
        }
        let free = device.ledger.free();
        if u64::try_from(maximum).map_or(true, |maximum| maximum > free) {
            return Err(refused(
                OP,
                RegionError::ExceedsFreeMemory,
                format!("{maximum} bytes asked, {free} free"),
            ));
        }
        let charge = Charge::take(device, OP, maximum)?;
        let mapped = maximum
            .max(1)
            .checked_next_multiple_of(device.page_size)
            .ok_or_else(|| CpuError::new(OP, ErrorKind::OutOfMemory, "maximum too large"))?;
        let mapping = HostMapping::reserve(mapped, device.page_size)
            .map_err(|e| CpuError::os(OP, "mmap of the region's maximum", e))?;
        let committed = initial.next_multiple_of(device.page_size);
        mapping
            .commit(0, committed)
            .map_err(|e| CpuError::os(OP, "mprotect(PROT_READ | PROT_WRITE)", e))?;
        let claim = Claim::register(
            charge,
            mapping.addr(),
            maximum.max(1),
            initial,
            MemoryKind::Managed,
        );
        Ok(CpuRegion {
            claim,
            mapping,
            len: initial,
            capacity: maximum,
            committed,
        })
    }

    fn grow(&self, region: &mut CpuRegion, new_len: usize) -> Result<(), CpuError> {
        const OP: &str = "grow";
        self.own_region(OP, region)?;
        RegionError::check_grow(region.len, new_len, region.capacity).map_err(|why| {
            refused(
                OP,
                why,
                format!(
                    "{} -> {new_len} bytes, {} reserved",
                    region.len, region.capacity
                ),
            )
        })?;
        region
            .grow_to(new_len)
            .map_err(|e| CpuError::os(OP, "mprotect(PROT_READ | PROT_WRITE)", e))
    }

    fn advise(
        &self,
        region: &CpuRegion,
        offset: usize,
        len: usize,
        _advice: Advice,
    ) -> Result<(), CpuError> {
        self.check_region_range("advise", region, offset, len)
    }

    fn prefetch(
        &self,
        region: &CpuRegion,
        offset: usize,
        len: usize,
        _target: PrefetchTarget,
    ) -> Result<PrefetchOutcome, CpuError> {
        self.check_region_range("prefetch", region, offset, len)?;
        Ok(PrefetchOutcome::SkippedHostMemory)
    }

    fn snapshot(&self, region: &CpuRegion) -> Result<MemorySnapshot, CpuError> {
        self.own_region("snapshot", region)?;
        self.device.streams.drain();
        let mut bytes = vec![0; region.len];
        // SAFETY: the first len bytes are committed in the region's mapping,
        // which outlives this borrow; the region cannot resize while borrowed,
        // every stream is drained, and `bytes` is a separate buffer.
        unsafe {
            ptr::copy_nonoverlapping(region.mapping.as_ptr(), bytes.as_mut_ptr(), region.len)
        };
        Ok(MemorySnapshot { bytes })
    }

    fn restore(&self, region: &mut CpuRegion, snapshot: &MemorySnapshot) -> Result<(), CpuError> {
        const OP: &str = "restore";
        self.own_region(OP, region)?;
        if snapshot.len() > region.capacity {
            return Err(refused(
                OP,
                RegionError::BeyondCapacity,
                format!(
                    "snapshot of {} bytes, {} reserved",
                    snapshot.len(),
                    region.capacity
                ),
            ));
        }
        self.device.streams.drain();
        region
            .reset_to(&snapshot.bytes)
            .map_err(|e| CpuError::os(OP, "resizing the region", e))
    }
}

#[cfg(test)]
mod tests {
    use tensorwasm_core::{DeviceRange, DriverError, GpuDriver};

    use super::*;
    use crate::testing::{Rng, driver};

    fn exposed(region: &CpuRegion) -> &[u8] {
        // SAFETY: the first len bytes are committed and no work is queued.
        unsafe { std::slice::from_raw_parts(region.host_ptr(), region.len()) }
    }

    fn fill(region: &mut CpuRegion, bytes: &[u8]) {
        assert!(bytes.len() <= region.len());
        // SAFETY: the bytes fit in the exposed, committed prefix.
        unsafe { ptr::copy_nonoverlapping(bytes.as_ptr(), region.host_ptr(), bytes.len()) };
    }

    #[test]
    fn growth_keeps_the_base_and_exposes_zeros() {
        let mut rng = Rng::from_env("growth_keeps_the_base_and_exposes_zeros");
        let d = driver(4 << 20);
        let mut region = d.reserve(1 << 20, 10_000).unwrap();
        assert_eq!((region.len(), region.capacity()), (10_000, 1 << 20));
        assert!(region.device_addressable());
        assert_eq!(d.mem_info().unwrap().free, 3 << 20);
        let data = rng.bytes(10_000);
        fill(&mut region, &data);
        let base = region.base();
        d.grow(&mut region, 300_001).unwrap();
        assert_eq!(region.base(), base);
        assert_eq!(region.len(), 300_001);
        assert_eq!(&exposed(&region)[..10_000], &data[..]);
        assert!(exposed(&region)[10_000..].iter().all(|&b| b == 0));
        d.grow(&mut region, 300_001).unwrap();
        d.grow(&mut region, 1 << 20).unwrap();
        assert!(exposed(&region)[300_001..].iter().all(|&b| b == 0));

        let shrink = d.grow(&mut region, 5).unwrap_err();
        assert_eq!(
            (shrink.kind(), shrink.op()),
            (ErrorKind::InvalidArgument, "grow")
        );
        let beyond = d.grow(&mut region, (1 << 20) + 1).unwrap_err();
        assert_eq!(beyond.kind(), ErrorKind::InvalidArgument);
        assert!(
            beyond.message().contains("beyond the reserved maximum"),
            "{beyond}"
        );
        drop(region);
        assert_eq!(d.mem_info().unwrap().free, 4 << 20);
    }

    #[test]
    fn out_of_bounds_bytes_are_cleared_by_growth() {
        let d = driver(1 << 20);
        let mut region = d.reserve(64 << 10, 100).unwrap();
        // A stray write past the exposed bytes, inside the committed page.
        // SAFETY: byte 200 lies in the first page, which is committed.
        unsafe { region.host_ptr().add(200).write(0xab) };
        d.grow(&mut region, 300).unwrap();
        assert_eq!(exposed(&region)[200], 0);
    }

    #[test]
    fn snapshots_restore_random_bytes() {
        let mut rng = Rng::from_env("snapshots_restore_random_bytes");
        let d = driver(4 << 20);
        let mut region = d.reserve(1 << 20, 70_000).unwrap();
        let data = rng.bytes(70_000);
        fill(&mut region, &data);
        let snapshot = d.snapshot(&region).unwrap();
        assert_eq!(snapshot.len(), 70_000);
        assert_eq!(snapshot.bytes, data);
        fill(&mut region, &rng.bytes(70_000));
        d.grow(&mut region, 500_000).unwrap();
        fill(&mut region, &rng.bytes(500_000));
        d.restore(&mut region, &snapshot).unwrap();
        assert_eq!(region.len(), 70_000);
        assert_eq!(exposed(&region), &data[..]);
        assert_eq!(d.snapshot(&region).unwrap(), snapshot);
    }

    #[test]
    fn restoring_smaller_then_growing_reads_zeros() {
        let mut rng = Rng::from_env("restoring_smaller_then_growing_reads_zeros");
        let d = driver(4 << 20);
        let mut region = d.reserve(1 << 20, 5_000).unwrap();
        let small = rng.bytes(5_000);
        fill(&mut region, &small);
        let snapshot = d.snapshot(&region).unwrap();
        d.grow(&mut region, 200_000).unwrap();
        fill(&mut region, &rng.bytes(200_000));
        d.restore(&mut region, &snapshot).unwrap();
        assert_eq!(exposed(&region), &small[..]);
        d.grow(&mut region, 200_000).unwrap();
        assert_eq!(&exposed(&region)[..5_000], &small[..]);
        assert!(exposed(&region)[5_000..].iter().all(|&b| b == 0));

        // Restoring to more bytes than are exposed works too.
        let large = MemorySnapshot {
            bytes: rng.bytes(300_000),
        };
        d.restore(&mut region, &large).unwrap();
        assert_eq!(exposed(&region), &large.bytes[..]);
        let too_large = MemorySnapshot {
            bytes: vec![1; (1 << 20) + 1],
        };
        let err = d.restore(&mut region, &too_large).unwrap_err();
        assert_eq!(
            (err.kind(), err.op()),
            (ErrorKind::InvalidArgument, "restore")
        );
        let empty = MemorySnapshot { bytes: Vec::new() };
        d.restore(&mut region, &empty).unwrap();
        assert!(region.is_empty());
        d.grow(&mut region, 4096).unwrap();
        assert!(exposed(&region).iter().all(|&b| b == 0));
    }

    #[test]
    fn reservations_are_checked_and_charged_in_full() {
        let d = driver(1 << 20);
        let err = d.reserve(100, 101).unwrap_err();
        assert_eq!(
            (err.kind(), err.op()),
            (ErrorKind::InvalidArgument, "reserve")
        );
        assert!(
            err.message().contains("initial size above the maximum"),
            "{err}"
        );
        let err = d.reserve((1 << 20) + 1, 0).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::OutOfMemory);
        assert!(
            err.message().contains("exceeds the device's free memory"),
            "{err}"
        );
        let first = d.reserve(600 << 10, 0).unwrap();
        assert_eq!(
            d.reserve(600 << 10, 0).unwrap_err().kind(),
            ErrorKind::OutOfMemory
        );
        assert_eq!(
            d.alloc_device(500 << 10).unwrap_err().kind(),
            ErrorKind::OutOfMemory
        );
        drop(first);
        let empty = d.reserve(0, 0).unwrap();
        assert!(empty.is_empty());
        assert_eq!(d.snapshot(&empty).unwrap().len(), 0);
    }

    #[test]
    fn regions_are_managed_memory_to_the_driver() {
        let mut rng = Rng::from_env("regions_are_managed_memory_to_the_driver");
        let d = driver(1 << 20);
        let region = d.reserve(256 << 10, 8192).unwrap();
        let base = region.base();
        assert!(d.pointer_info(base).unwrap().is_managed());
        let last = base.checked_add((256 << 10) - 1).unwrap();
        assert!(d.pointer_info(last).unwrap().is_managed());
        let past = base.checked_add(256 << 10).unwrap();
        assert_eq!(d.pointer_info(past).unwrap().kind, MemoryKind::Unknown);

        // Copies reach the exposed bytes, and no further.
        let data = rng.bytes(8192);
        // SAFETY: the range covers the region's exposed bytes, which outlive it.
        let inside = unsafe { DeviceRange::from_raw(base, 8192) };
        d.copy_to_device(inside, &data).unwrap();
        assert_eq!(exposed(&region), &data[..]);
        // SAFETY: the driver is expected to refuse this range without touching it.
        let beyond = unsafe { DeviceRange::from_raw(base, 8193) };
        let err = d.memset(beyond, 0).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidArgument);

        ManagedAllocator::advise(&d, &region, 0, 8192, Advice::SetReadMostly).unwrap();
        let err = ManagedAllocator::advise(&d, &region, 1, 8192, Advice::SetReadMostly);
        assert_eq!(err.unwrap_err().kind(), ErrorKind::InvalidArgument);
        let outcome = ManagedAllocator::prefetch(&d, &region, 0, 100, PrefetchTarget::Device);
        assert_eq!(outcome.unwrap(), PrefetchOutcome::SkippedHostMemory);
        let err = ManagedAllocator::prefetch(&d, &region, usize::MAX, 2, PrefetchTarget::Host);
        assert_eq!(err.unwrap_err().kind(), ErrorKind::InvalidArgument);

        let other = driver(1 << 20);
        let err = other.snapshot(&region).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidArgument);
        drop(region);
        assert_eq!(d.pointer_info(base).unwrap().kind, MemoryKind::Unknown);
    }
}
