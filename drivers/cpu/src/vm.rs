//! Virtual memory: a reservation is an inaccessible `mmap`; `vm_map` makes a
//! granularity-aligned span of it readable and writable (charged and
//! registered as device memory), `vm_unmap` gives one span back. The syscalls
//! themselves live in `os`.

use std::{collections::BTreeMap, fmt};

use tensorwasm_core::{DevicePtr, DeviceRange, MemoryKind, VirtualMemory};

use crate::{
    device::CpuDevice,
    error::CpuError,
    memory::{Charge, Claim},
    os::HostMapping,
    sync::Arc,
};

/// A reserved span of host address space, parts of which are mapped.
/// Dropping it waits for all queued work, then unmaps everything.
pub struct CpuVirtualRange {
    // Field order is drop order: unregister the spans, then unmap.
    mappings: BTreeMap<usize, MappedSpan>,
    reservation: HostMapping,
    device: Arc<CpuDevice>,
}

/// One `vm_map` call's span.
struct MappedSpan {
    len: usize,
    _claim: Claim,
}

impl CpuVirtualRange {
    pub(crate) fn reserve(device: &Arc<CpuDevice>, bytes: usize) -> Result<Self, CpuError> {
        const OP: &str = "vm_reserve";
        let granularity = device.vm_granularity;
        if bytes == 0 || !bytes.is_multiple_of(granularity) {
            return Err(CpuError::invalid(
                OP,
                format!(
                    "{bytes} bytes is not a nonzero multiple of the granularity ({granularity} bytes)"
                ),
            ));
        }
        let reservation = HostMapping::reserve(bytes, granularity)
            .map_err(|e| CpuError::os(OP, "mmap of the reservation", e))?;
        Ok(CpuVirtualRange {
            mappings: BTreeMap::new(),
            reservation,
            device: Arc::clone(device),
        })
    }

    pub(crate) fn map(
        &mut self,
        device: &Arc<CpuDevice>,
        offset: usize,
        bytes: usize,
    ) -> Result<(), CpuError> {
        const OP: &str = "vm_map";
        self.check_span(OP, device, offset, bytes)?;
        let end = offset + bytes;
        if let Some((&start, span)) = self.mappings.range(..end).next_back()
            && start + span.len > offset
        {
            return Err(CpuError::invalid(
                OP,
                format!(
                    "{offset:#x}..{end:#x} overlaps the span mapped at {start:#x}..{:#x}",
                    start + span.len
                ),
            ));
        }
        let charge = Charge::take(device, OP, bytes)?;
        self.reservation
            .commit(offset, bytes)
            .map_err(|e| CpuError::os(OP, "mprotect(PROT_READ | PROT_WRITE)", e))?;
        let base = self.reservation.addr() + offset as u64;
        let claim = Claim::register(charge, base, bytes, bytes, MemoryKind::Device);
        self.mappings.insert(
            offset,
            MappedSpan {
                len: bytes,
                _claim: claim,
            },
        );
        Ok(())
    }

    pub(crate) fn unmap(
        &mut self,
        device: &Arc<CpuDevice>,
        offset: usize,
        bytes: usize,
    ) -> Result<(), CpuError> {
        const OP: &str = "vm_unmap";
        self.check_span(OP, device, offset, bytes)?;
        match self.mappings.get(&offset) {
            Some(span) if span.len == bytes => {}
            Some(span) => {
                return Err(CpuError::invalid(
                    OP,
                    format!(
                        "the span mapped at {offset:#x} has {} bytes, not {bytes}: \
                         vm_unmap takes exactly the span of one vm_map",
                        span.len
                    ),
                ));
            }
            None => {
                return Err(CpuError::invalid(
                    OP,
                    format!("no span was mapped at offset {offset:#x} by vm_map"),
                ));
            }
        }
        self.device.streams.drain();
        // SAFETY: the span is one of this range's mappings; every DeviceRange
        // over it borrows `self`, which is now borrowed mutably, so none is
        // alive, and every stream has been drained, so no queued work touches it.
        unsafe { self.reservation.decommit(offset, bytes) }
            .map_err(|e| CpuError::os(OP, "mmap(MAP_FIXED, PROT_NONE)", e))?;
        self.mappings.remove(&offset);
        Ok(())
    }

    /// The range belongs to `device`, and `offset .. offset + bytes` is a
    /// nonzero, granularity-aligned span inside it.
    fn check_span(
        &self,
        op: &'static str,
        device: &Arc<CpuDevice>,
        offset: usize,
        bytes: usize,
    ) -> Result<(), CpuError> {
        if !Arc::ptr_eq(device, &self.device) {
            return Err(CpuError::invalid(
                op,
                "the range was reserved by another CpuDriver",
            ));
        }
        let granularity = self.device.vm_granularity;
        if bytes == 0 || !offset.is_multiple_of(granularity) || !bytes.is_multiple_of(granularity) {
            return Err(CpuError::invalid(
                op,
                format!(
                    "offset {offset:#x} and length {bytes:#x} must be multiples of the \
                     granularity ({granularity:#x}), and the length nonzero"
                ),
            ));
        }
        match offset.checked_add(bytes) {
            Some(end) if end <= self.reservation.len() => Ok(()),
            _ => Err(CpuError::invalid(
                op,
                format!(
                    "{offset:#x} + {bytes:#x} leaves the reservation of {:#x} bytes",
                    self.reservation.len()
                ),
            )),
        }
    }
}

impl VirtualMemory for CpuVirtualRange {
    fn base(&self) -> DevicePtr {
        DevicePtr(self.reservation.addr())
    }

    fn reserved(&self) -> usize {
        self.reservation.len()
    }

    fn mapped(&self, offset: usize, len: usize) -> Option<DeviceRange<'_>> {
        let end = offset.checked_add(len)?;
        if end > self.reservation.len() {
            return None;
        }
        if len > 0 {
            let (&start, span) = self.mappings.range(..=offset).next_back()?;
            let mut cursor = start + span.len;
            if cursor <= offset {
                return None;
            }
            while cursor < end {
                let span = self.mappings.get(&cursor)?;
                cursor += span.len;
            }
        }
        let ptr = self.base().checked_add(offset)?;
        // SAFETY: every byte of the range lies in spans of this reservation
        // that are mapped (checked above; an empty range touches nothing), and
        // the range borrows `self`, so no span can be unmapped while it lives.
        Some(unsafe { DeviceRange::from_raw(ptr, len) })
    }
}

impl Drop for CpuVirtualRange {
    fn drop(&mut self) {
        self.device.streams.drain();
        self.mappings.clear();
    }
}

impl fmt::Debug for CpuVirtualRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mapped: usize = self.mappings.values().map(|span| span.len).sum();
        write!(
            f,
            "CpuVirtualRange({:#x}, {} bytes reserved, {mapped} mapped)",
            self.reservation.addr(),
            self.reservation.len()
        )
    }
}

#[cfg(test)]
mod tests {
    use tensorwasm_core::{DriverError, ErrorKind, GpuDriver};

    use super::*;
    use crate::testing::{Rng, driver};

    #[test]
    fn misuse_of_map_and_unmap_is_refused() {
        let d = driver(16 << 20);
        let g = d.vm_granularity().unwrap();
        assert_eq!(g % (64 << 10), 0);
        for bytes in [0, g + 1, g / 2] {
            let err = d.vm_reserve(bytes).unwrap_err();
            assert_eq!(
                (err.kind(), err.op()),
                (ErrorKind::InvalidArgument, "vm_reserve")
            );
        }
        let mut range = d.vm_reserve(4 * g).unwrap();
        assert_eq!(range.base().0 % g as u64, 0);
        assert_eq!(range.reserved(), 4 * g);

        d.vm_map(&mut range, g, 2 * g).unwrap();
        let refused = [
            d.vm_map(&mut range, g, g),                  // already mapped
            d.vm_map(&mut range, 0, 2 * g),              // overlaps the start
            d.vm_map(&mut range, 2 * g, 2 * g),          // overlaps the end
            d.vm_map(&mut range, g / 2, g),              // misaligned offset
            d.vm_map(&mut range, 0, g / 2),              // misaligned length
            d.vm_map(&mut range, 0, 0),                  // empty
            d.vm_map(&mut range, 3 * g, 2 * g),          // leaves the reservation
            d.vm_map(&mut range, usize::MAX - g + 1, g), // overflows
            d.vm_unmap(&mut range, g, g),                // not one map's span
            d.vm_unmap(&mut range, 0, g),                // nothing mapped there
            d.vm_unmap(&mut range, 2 * g, g),            // inside a span
        ];
        for err in refused {
            assert_eq!(err.unwrap_err().kind(), ErrorKind::InvalidArgument);
        }
        let other = driver(16 << 20);
        let err = other.vm_map(&mut range, 0, g).unwrap_err();
        assert!(err.message().contains("another CpuDriver"), "{err}");
        d.vm_unmap(&mut range, g, 2 * g).unwrap();
        assert_eq!(
            d.vm_unmap(&mut range, g, 2 * g).unwrap_err().kind(),
            ErrorKind::InvalidArgument
        );
    }

    #[test]
    fn mapped_spans_are_charged_registered_and_zeroed() {
        let mut rng = Rng::from_env("mapped_spans_are_charged_registered_and_zeroed");
        let d = driver(16 << 20);
        let g = d.vm_granularity().unwrap();
        let capacity = 16u64 << 20;
        let mut range = d.vm_reserve(3 * g).unwrap();
        assert_eq!(d.mem_info().unwrap().free, capacity);
        assert!(range.mapped(0, 1).is_none());
        d.vm_map(&mut range, 0, g).unwrap();
        d.vm_map(&mut range, g, g).unwrap();
        assert_eq!(d.mem_info().unwrap().free, capacity - 2 * g as u64);
        assert!(range.mapped(0, 2 * g).is_some());
        assert!(range.mapped(g / 2, g).is_some());
        assert!(range.mapped(0, 2 * g + 1).is_none());
        assert!(range.mapped(2 * g, 1).is_none());
        assert!(range.mapped(3 * g, 1).is_none());
        let base = range.base();
        assert_eq!(d.pointer_info(base).unwrap().kind, MemoryKind::Device);
        let unmapped = base.checked_add(2 * g).unwrap();
        assert_eq!(d.pointer_info(unmapped).unwrap().kind, MemoryKind::Unknown);

        // A copy may run across two adjacent mappings.
        let data = rng.bytes(g);
        d.copy_to_device(range.mapped(g / 2, g).unwrap(), &data)
            .unwrap();
        let mut back = vec![0; g];
        d.copy_from_device(&mut back, range.mapped(g / 2, g).unwrap())
            .unwrap();
        assert_eq!(back, data);

        d.vm_unmap(&mut range, g, g).unwrap();
        assert!(range.mapped(0, g + 1).is_none());
        let second = base.checked_add(g).unwrap();
        assert_eq!(d.pointer_info(second).unwrap().kind, MemoryKind::Unknown);
        assert_eq!(d.mem_info().unwrap().free, capacity - g as u64);
        d.vm_map(&mut range, g, g).unwrap();
        d.copy_from_device(&mut back, range.mapped(g, g).unwrap())
            .unwrap();
        assert!(back.iter().all(|&b| b == 0));
        drop(range);
        assert_eq!(d.mem_info().unwrap().free, capacity);
        assert_eq!(d.pointer_info(base).unwrap().kind, MemoryKind::Unknown);
    }

    #[test]
    fn mapping_beyond_capacity_is_out_of_memory() {
        let probe = driver(0);
        let g = probe.vm_granularity().unwrap();
        let d = driver(2 * g as u64);
        let mut range = d.vm_reserve(4 * g).unwrap();
        d.vm_map(&mut range, 0, 2 * g).unwrap();
        let err = d.vm_map(&mut range, 2 * g, g).unwrap_err();
        assert_eq!((err.kind(), err.op()), (ErrorKind::OutOfMemory, "vm_map"));
        assert!(range.mapped(2 * g, 1).is_none());
        d.vm_unmap(&mut range, 0, 2 * g).unwrap();
        d.vm_map(&mut range, 2 * g, 2 * g).unwrap();
    }
}
