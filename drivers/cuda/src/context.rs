//! The loaded library and the device's primary context: loaded and retained
//! once per [`CudaDriver`](crate::CudaDriver), made current on whichever
//! thread calls in, released when the last resource is dropped.

use std::{ffi::c_int, sync::Arc};

use tensorwasm_core::DeviceInfo;

use crate::{
    error::{CudaError, MIN_DRIVER_VERSION},
    result, sys,
};

/// Environment variable naming the driver library to load instead of the default.
pub const LIBCUDA_ENV: &str = "TENSORWASM_LIBCUDA";

/// The library the loader looks for when [`LIBCUDA_ENV`] is unset.
#[cfg(windows)]
pub const DEFAULT_LIBCUDA: &str = "nvcuda.dll";
/// The library the loader looks for when [`LIBCUDA_ENV`] is unset.
#[cfg(not(windows))]
pub const DEFAULT_LIBCUDA: &str = "libcuda.so.1";

/// Opens the driver library and initialises it; checks the driver's version.
pub(crate) fn load() -> Result<(sys::CudaLib, (u32, u32)), CudaError> {
    let library = std::env::var(LIBCUDA_ENV).unwrap_or_else(|_| DEFAULT_LIBCUDA.to_string());
    // SAFETY: loading libcuda runs its initialisers, which have no
    // preconditions; bindgen's loader resolves symbols lazily into Results,
    // so a missing symbol is an error at call time, not here.
    let lib = unsafe { sys::CudaLib::new(&library) }.map_err(|e| CudaError::LibraryNotFound {
        library: library.clone(),
        reason: e.to_string(),
    })?;
    result::cuInit(&lib)?;
    let v = result::cuDriverGetVersion(&lib)?;
    let version = (v as u32 / 1000, (v as u32 % 1000) / 10);
    if version < MIN_DRIVER_VERSION {
        return Err(CudaError::DriverTooOld {
            found: version,
            required: MIN_DRIVER_VERSION,
        });
    }
    Ok((lib, version))
}

/// Reads what TensorWasm needs to know about a device.
pub(crate) fn query_device(
    lib: &sys::CudaLib,
    ordinal: u32,
    version: (u32, u32),
) -> Result<DeviceInfo, CudaError> {
    use sys::CUdevice_attribute as A;
    let dev = result::cuDeviceGet(lib, ordinal as c_int)?;
    let attr = |a| result::cuDeviceGetAttribute(lib, a, dev).map(|v| v.max(0) as u32);
    Ok(DeviceInfo {
        ordinal,
        name: result::cuDeviceGetName(lib, dev)?,
        compute_capability: Some((
            attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?,
            attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?,
        )),
        multiprocessor_count: attr(A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?,
        clock_rate_khz: attr(A::CU_DEVICE_ATTRIBUTE_CLOCK_RATE)?,
        max_threads_per_multiprocessor: attr(
            A::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR,
        )?,
        total_memory: result::cuDeviceTotalMem_v2(lib, dev)? as u64,
        max_threads_per_block: attr(A::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK)?,
        max_block_dim: (
            attr(A::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X)?,
            attr(A::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y)?,
            attr(A::CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z)?,
        ),
        max_grid_dim: (
            attr(A::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X)?,
            attr(A::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y)?,
            attr(A::CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z)?,
        ),
        max_shared_memory_per_block: attr(A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK)?,
        max_shared_memory_per_block_optin: attr(
            A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
        )?,
        warp_size: attr(A::CU_DEVICE_ATTRIBUTE_WARP_SIZE)?,
        concurrent_managed_access: attr(A::CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS)? != 0,
        vmm_supported: attr(A::CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED)? != 0,
        driver_version: Some(version),
    })
}

/// The library, one device and its retained primary context. Every resource
/// holds an `Arc` of it, so the context outlives everything made in it.
pub(crate) struct Context {
    pub(crate) lib: sys::CudaLib,
    pub(crate) device: sys::CUdevice,
    ctx: sys::CUcontext,
    pub(crate) info: DeviceInfo,
}

// SAFETY: the CUDA driver API is thread-safe: a context handle may be made
// current and used on any thread (cuCtxSetCurrent is per thread, and `bind`
// does it before every call). `CudaLib` holds only function pointers and the
// library handle, which are immutable after loading.
unsafe impl Send for Context {}
// SAFETY: as for Send; no method takes `&mut self` or mutates shared state.
unsafe impl Sync for Context {}

impl Context {
    /// Loads the driver and retains device `ordinal`'s primary context.
    pub(crate) fn open(ordinal: u32) -> Result<Arc<Context>, CudaError> {
        let (lib, version) = load()?;
        let count = result::cuDeviceGetCount(&lib)?.max(0) as u32;
        if ordinal >= count {
            return Err(CudaError::NoDevice { ordinal, count });
        }
        let info = query_device(&lib, ordinal, version)?;
        let device = result::cuDeviceGet(&lib, ordinal as c_int)?;
        let ctx = result::cuDevicePrimaryCtxRetain(&lib, device)?;
        let context = Context {
            lib,
            device,
            ctx,
            info,
        };
        context.bind()?;
        Ok(Arc::new(context))
    }

    /// Makes the primary context current on the calling thread if it is not
    /// already (the driver keeps the current context per thread).
    pub(crate) fn bind(&self) -> Result<(), CudaError> {
        if result::cuCtxGetCurrent(&self.lib)? != self.ctx {
            // SAFETY: `ctx` is retained until `self` drops.
            unsafe { result::cuCtxSetCurrent(&self.lib, self.ctx) }?;
        }
        Ok(())
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        // Nothing made in this context is alive any more (each holds an Arc).
        let _ = result::cuDevicePrimaryCtxRelease_v2(&self.lib, self.device);
    }
}
