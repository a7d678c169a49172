//! Device and managed allocations (`cuMemAlloc`, `cuMemAllocManaged`),
//! freed on drop, and pointer queries.

use std::sync::Arc;

use tensorwasm_core::{DeviceMemory, DevicePtr, MemoryKind, PointerInfo};

use crate::{context::Context, error::CudaError, result, sys};

/// A device or managed allocation, freed (`cuMemFree`) on drop.
///
/// `cuMemFree` waits for work that may still use the memory, so dropping a
/// buffer with kernels in flight is safe.
pub struct CudaBuffer {
    pub(crate) ctx: Arc<Context>,
    ptr: sys::CUdeviceptr,
    len: usize,
    kind: MemoryKind,
}

impl CudaBuffer {
    pub(crate) fn alloc(
        ctx: &Arc<Context>,
        bytes: usize,
        kind: MemoryKind,
    ) -> Result<Self, CudaError> {
        ctx.bind()?;
        let ptr = match (bytes, kind) {
            // The driver refuses zero-byte allocations; an empty buffer needs none.
            (0, _) => 0,
            (_, MemoryKind::Managed) => {
                // Managed memory is populated lazily, yet asking for more than
                // the device has free can hang the GPU: refuse it here.
                let (free, _) = result::cuMemGetInfo_v2(&ctx.lib)?;
                if bytes > free {
                    return Err(CudaError::Driver {
                        call: "cuMemAllocManaged",
                        code: sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY.0,
                        name: "CUDA_ERROR_OUT_OF_MEMORY".into(),
                        description: format!(
                            "refused before the call: {bytes} bytes of managed memory asked, {free} free"
                        ),
                        log: None,
                    });
                }
                let flags = sys::CUmemAttach_flags_enum::CU_MEM_ATTACH_GLOBAL.0;
                result::cuMemAllocManaged(&ctx.lib, bytes, flags)?
            }
            _ => result::cuMemAlloc_v2(&ctx.lib, bytes)?,
        };
        Ok(CudaBuffer {
            ctx: Arc::clone(ctx),
            ptr,
            len: bytes,
            kind,
        })
    }

    /// Device or managed memory.
    pub fn memory_kind(&self) -> MemoryKind {
        self.kind
    }
}

impl DeviceMemory for CudaBuffer {
    fn device_ptr(&self) -> DevicePtr {
        DevicePtr(self.ptr)
    }

    fn len(&self) -> usize {
        self.len
    }
}

impl Drop for CudaBuffer {
    fn drop(&mut self) {
        if self.ptr != 0 && self.ctx.bind().is_ok() {
            // SAFETY: `ptr` came from cuMemAlloc/cuMemAllocManaged in this
            // context and is freed once, here.
            let _ = unsafe { result::cuMemFree_v2(&self.ctx.lib, self.ptr) };
        }
    }
}

impl std::fmt::Debug for CudaBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "CudaBuffer({:?}, {:#x}, {} bytes)",
            self.kind, self.ptr, self.len
        )
    }
}

/// What the driver knows about `address`. An address the driver never
/// allocated or registered (a host heap pointer) is `MemoryKind::Unknown`.
pub(crate) fn pointer_info(ctx: &Context, address: DevicePtr) -> Result<PointerInfo, CudaError> {
    ctx.bind()?;
    let unknown = PointerInfo {
        address,
        kind: MemoryKind::Unknown,
    };
    // SAFETY: IS_MANAGED writes an unsigned int, the size of `u32`.
    let managed = unsafe {
        result::cuPointerGetAttribute::<u32>(
            &ctx.lib,
            sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_IS_MANAGED,
            address.0,
        )
    };
    match managed {
        Ok(0) => {}
        Ok(_) => {
            return Ok(PointerInfo {
                address,
                kind: MemoryKind::Managed,
            });
        }
        Err(e) if e.code() == Some(sys::CUresult::CUDA_ERROR_INVALID_VALUE.0) => {
            return Ok(unknown);
        }
        Err(e) => return Err(e),
    }
    // SAFETY: MEMORY_TYPE writes a CUmemorytype (an unsigned int).
    let ty = unsafe {
        result::cuPointerGetAttribute::<u32>(
            &ctx.lib,
            sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
            address.0,
        )
    };
    let kind = match ty {
        Ok(t) if t == sys::CUmemorytype_enum::CU_MEMORYTYPE_DEVICE.0 => MemoryKind::Device,
        Ok(t) if t == sys::CUmemorytype_enum::CU_MEMORYTYPE_HOST.0 => MemoryKind::PinnedHost,
        Ok(t) if t == sys::CUmemorytype_enum::CU_MEMORYTYPE_UNIFIED.0 => MemoryKind::Managed,
        Ok(_) => MemoryKind::Unknown,
        Err(e) if e.code() == Some(sys::CUresult::CUDA_ERROR_INVALID_VALUE.0) => {
            MemoryKind::Unknown
        }
        Err(e) => return Err(e),
    };
    Ok(PointerInfo { address, kind })
}
