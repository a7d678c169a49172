//! [`ManagedAllocator`] on CUDA: a guest memory's maximum is one
//! `cuMemAllocManaged` (populated lazily, so reserving is cheap), of which a
//! prefix is exposed; growth zeroes the new bytes and never moves the base.

use tensorwasm_core::{
    Advice, DevicePtr, DeviceRange, ManagedRegion, MemoryKind, MemorySnapshot, PrefetchOutcome,
    PrefetchTarget, RegionError,
};

use crate::{CudaDriver, context::Context, error::CudaError, memory::CudaBuffer, result};

/// A reserved region of managed memory backing one guest memory.
pub struct CudaRegion {
    buffer: CudaBuffer,
    len: usize,
}

impl ManagedRegion for CudaRegion {
    fn base(&self) -> DevicePtr {
        tensorwasm_core::DeviceMemory::device_ptr(&self.buffer)
    }

    fn host_ptr(&self) -> *mut u8 {
        self.base().0 as *mut u8
    }

    fn len(&self) -> usize {
        self.len
    }

    fn capacity(&self) -> usize {
        tensorwasm_core::DeviceMemory::len(&self.buffer)
    }

    fn device_addressable(&self) -> bool {
        true
    }
}

fn region_error(op: &'static str, e: RegionError) -> CudaError {
    CudaError::invalid(op, e.to_string())
}

impl CudaRegion {
    /// `offset .. offset + len` of the exposed bytes.
    fn exposed(
        &self,
        op: &'static str,
        offset: usize,
        len: usize,
    ) -> Result<DeviceRange<'_>, CudaError> {
        RegionError::check_range(self.len, offset, len).map_err(|e| region_error(op, e))?;
        tensorwasm_core::DeviceMemory::range(&self.buffer, offset, len)
            .ok_or_else(|| region_error(op, RegionError::OutOfBounds))
    }
}

/// Zeroes `from .. to` of the region and waits, so the host sees zeros too.
fn zero(ctx: &Context, region: &CudaRegion, from: usize, to: usize) -> Result<(), CudaError> {
    if to > from {
        ctx.bind()?;
        // SAFETY: `from .. to` lies inside the region's allocation (callers
        // check against its capacity), which `region` keeps alive.
        unsafe { result::cuMemsetD8_v2(&ctx.lib, region.base().0 + from as u64, 0, to - from) }?;
        result::cuCtxSynchronize(&ctx.lib)?;
    }
    Ok(())
}

impl tensorwasm_core::ManagedAllocator for CudaDriver {
    type Error = CudaError;
    type Region = CudaRegion;

    fn reserve(&self, maximum: usize, initial: usize) -> Result<CudaRegion, CudaError> {
        if initial > maximum {
            return Err(region_error("reserve", RegionError::InitialAboveMaximum));
        }
        // `CudaBuffer::alloc` refuses a maximum above the free memory.
        let buffer = CudaBuffer::alloc(&self.ctx, maximum, MemoryKind::Managed)?;
        let region = CudaRegion {
            buffer,
            len: initial,
        };
        zero(&self.ctx, &region, 0, initial)?;
        Ok(region)
    }

    fn grow(&self, region: &mut CudaRegion, new_len: usize) -> Result<(), CudaError> {
        RegionError::check_grow(region.len, new_len, region.capacity())
            .map_err(|e| region_error("grow", e))?;
        zero(&self.ctx, region, region.len, new_len)?;
        region.len = new_len;
        Ok(())
    }

    fn advise(
        &self,
        region: &CudaRegion,
        offset: usize,
        len: usize,
        advice: Advice,
    ) -> Result<(), CudaError> {
        let range = region.exposed("advise", offset, len)?;
        self.advise_range(range, advice)
    }

    fn prefetch(
        &self,
        region: &CudaRegion,
        offset: usize,
        len: usize,
        target: PrefetchTarget,
    ) -> Result<PrefetchOutcome, CudaError> {
        let range = region.exposed("prefetch", offset, len)?;
        // The legacy default stream: ordered before later synchronous work.
        self.prefetch_range(range, target, std::ptr::null_mut())
    }

    fn snapshot(&self, region: &CudaRegion) -> Result<MemorySnapshot, CudaError> {
        let mut bytes = vec![0u8; region.len];
        self.ctx.bind()?;
        result::cuCtxSynchronize(&self.ctx.lib)?;
        if !bytes.is_empty() {
            // SAFETY: `bytes` holds len bytes; the region exposes len bytes.
            // With unified addressing cuMemcpy takes host pointers as-is.
            unsafe {
                result::cuMemcpy(
                    &self.ctx.lib,
                    bytes.as_mut_ptr() as u64,
                    region.base().0,
                    region.len,
                )
            }?;
        }
        Ok(MemorySnapshot { bytes })
    }

    fn restore(&self, region: &mut CudaRegion, snapshot: &MemorySnapshot) -> Result<(), CudaError> {
        if snapshot.len() > region.capacity() {
            return Err(region_error("restore", RegionError::BeyondCapacity));
        }
        self.ctx.bind()?;
        result::cuCtxSynchronize(&self.ctx.lib)?;
        if !snapshot.is_empty() {
            // SAFETY: the snapshot fits the region's allocation (checked).
            unsafe {
                result::cuMemcpy(
                    &self.ctx.lib,
                    region.base().0,
                    snapshot.bytes.as_ptr() as u64,
                    snapshot.len(),
                )
            }?;
        }
        // Bytes past the new size are zeroed when `grow` exposes them again.
        region.len = snapshot.len();
        Ok(())
    }
}

impl std::fmt::Debug for CudaRegion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "CudaRegion({}, {} of {} bytes)",
            self.base(),
            self.len,
            self.capacity()
        )
    }
}
