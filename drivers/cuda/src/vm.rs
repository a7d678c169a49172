//! Virtual memory: reserve a span of device addresses
//! (`cuMemAddressReserve`), back parts of it with physical memory
//! (`cuMemCreate` + `cuMemMap` + `cuMemSetAccess`), unmap, and free it all on drop.

use std::sync::Arc;

use tensorwasm_core::{DevicePtr, DeviceRange, VirtualMemory};

use crate::{context::Context, error::CudaError, result, sys};

/// Pinned device memory on this context's device.
pub(crate) fn allocation_prop(ctx: &Context) -> sys::CUmemAllocationProp {
    sys::CUmemAllocationProp {
        type_: sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED,
        location: device_location(ctx),
        ..Default::default()
    }
}

/// This context's device as a `CUmemLocation`.
pub(crate) fn device_location(ctx: &Context) -> sys::CUmemLocation {
    sys::CUmemLocation {
        type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
        id: ctx.device,
    }
}

/// Host memory as a `CUmemLocation`.
pub(crate) fn host_location() -> sys::CUmemLocation {
    sys::CUmemLocation {
        type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_HOST,
        id: 0,
    }
}

struct Mapping {
    offset: usize,
    bytes: usize,
    handle: sys::CUmemGenericAllocationHandle,
}

/// A reserved span of device addresses with its mappings.
pub struct CudaVirtualRange {
    ctx: Arc<Context>,
    base: sys::CUdeviceptr,
    reserved: usize,
    mappings: Vec<Mapping>,
}

impl CudaVirtualRange {
    pub(crate) fn reserve(ctx: &Arc<Context>, bytes: usize) -> Result<Self, CudaError> {
        let g = granularity(ctx)?;
        if bytes == 0 || !bytes.is_multiple_of(g) {
            return Err(CudaError::invalid(
                "vm_reserve",
                format!("{bytes} bytes is not a nonzero multiple of the granularity {g}"),
            ));
        }
        ctx.bind()?;
        let base = result::cuMemAddressReserve(&ctx.lib, bytes)?;
        Ok(CudaVirtualRange {
            ctx: Arc::clone(ctx),
            base,
            reserved: bytes,
            mappings: Vec::new(),
        })
    }

    pub(crate) fn map(&mut self, offset: usize, bytes: usize) -> Result<(), CudaError> {
        let g = granularity(&self.ctx)?;
        let end = offset.checked_add(bytes);
        if bytes == 0
            || !offset.is_multiple_of(g)
            || !bytes.is_multiple_of(g)
            || end.is_none_or(|e| e > self.reserved)
        {
            return Err(CudaError::invalid(
                "vm_map",
                format!(
                    "span {offset}+{bytes} is not granularity-aligned ({g}) inside {} reserved bytes",
                    self.reserved
                ),
            ));
        }
        if self
            .mappings
            .iter()
            .any(|m| offset < m.offset + m.bytes && m.offset < offset + bytes)
        {
            return Err(CudaError::invalid(
                "vm_map",
                "span overlaps an existing mapping",
            ));
        }
        let ctx = &self.ctx;
        ctx.bind()?;
        let handle = result::cuMemCreate(&ctx.lib, bytes, &allocation_prop(ctx))?;
        let at = self.base + offset as u64;
        // SAFETY: `at .. at + bytes` lies inside our reservation and is not
        // mapped (checked above); `handle` holds exactly `bytes`.
        if let Err(e) = unsafe { result::cuMemMap(&ctx.lib, at, bytes, handle) } {
            // SAFETY: the handle was created above and is not mapped.
            let _ = unsafe { result::cuMemRelease(&ctx.lib, handle) };
            return Err(e);
        }
        let access = sys::CUmemAccessDesc {
            location: device_location(ctx),
            flags: sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
        };
        // SAFETY: the span was just mapped.
        if let Err(e) = unsafe { result::cuMemSetAccess(&ctx.lib, at, bytes, &access) } {
            // SAFETY: undo the mapping made above, then free its memory.
            let _ = unsafe { result::cuMemUnmap(&ctx.lib, at, bytes) };
            // SAFETY: as above.
            let _ = unsafe { result::cuMemRelease(&ctx.lib, handle) };
            return Err(e);
        }
        self.mappings.push(Mapping {
            offset,
            bytes,
            handle,
        });
        Ok(())
    }

    pub(crate) fn unmap(&mut self, offset: usize, bytes: usize) -> Result<(), CudaError> {
        let i = self
            .mappings
            .iter()
            .position(|m| m.offset == offset && m.bytes == bytes)
            .ok_or_else(|| {
                CudaError::invalid(
                    "vm_unmap",
                    format!("no mapping is exactly {offset}+{bytes}"),
                )
            })?;
        self.ctx.bind()?;
        // Work still using the span must finish before it disappears.
        result::cuCtxSynchronize(&self.ctx.lib)?;
        let m = self.mappings.swap_remove(i);
        // SAFETY: `m` was mapped by `map` in this reservation, unmapped once.
        unsafe { result::cuMemUnmap(&self.ctx.lib, self.base + m.offset as u64, m.bytes) }?;
        // SAFETY: its only mapping is gone; released once.
        unsafe { result::cuMemRelease(&self.ctx.lib, m.handle) }
    }
}

/// The minimum granularity of mappings on this device.
pub(crate) fn granularity(ctx: &Context) -> Result<usize, CudaError> {
    ctx.bind()?;
    result::cuMemGetAllocationGranularity(&ctx.lib, &allocation_prop(ctx))
}

// SAFETY: the range is plain addresses and allocation handles, usable from
// any thread with the context current; mutation needs `&mut self`.
unsafe impl Send for CudaVirtualRange {}
// SAFETY: `&self` methods only read.
unsafe impl Sync for CudaVirtualRange {}

impl VirtualMemory for CudaVirtualRange {
    fn base(&self) -> DevicePtr {
        DevicePtr(self.base)
    }

    fn reserved(&self) -> usize {
        self.reserved
    }

    fn mapped(&self, offset: usize, len: usize) -> Option<DeviceRange<'_>> {
        let end = offset.checked_add(len)?;
        // Mappings are disjoint: walk contiguous ones from `offset`.
        let mut at = offset;
        while at < end {
            let m = self
                .mappings
                .iter()
                .find(|m| m.offset <= at && at < m.offset + m.bytes)?;
            at = m.offset + m.bytes;
        }
        if len == 0 && end > self.reserved {
            return None;
        }
        // SAFETY: every byte of the span is mapped in this reservation, and
        // the range borrows `self`, so it cannot outlive the mappings.
        Some(unsafe { DeviceRange::from_raw(DevicePtr(self.base + offset as u64), len) })
    }
}

impl Drop for CudaVirtualRange {
    fn drop(&mut self) {
        if self.ctx.bind().is_err() {
            return;
        }
        let lib = &self.ctx.lib;
        let _ = result::cuCtxSynchronize(lib);
        for m in self.mappings.drain(..) {
            // SAFETY: each mapping was made by `map` and is undone once.
            let _ = unsafe { result::cuMemUnmap(lib, self.base + m.offset as u64, m.bytes) };
            // SAFETY: as above.
            let _ = unsafe { result::cuMemRelease(lib, m.handle) };
        }
        // SAFETY: reserved by `reserve`, freed once, with nothing mapped.
        let _ = unsafe { result::cuMemAddressFree(lib, self.base, self.reserved) };
    }
}
