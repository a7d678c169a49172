//! The thin layer: one function per CUDA driver call, named exactly as the
//! exported symbol, turning its `CUresult` into a `Result` with a typed
//! error. No logic lives here; the safe layer above decides what to call.
//!
//! Safety contract of every `unsafe fn` here: handles (contexts, modules,
//! functions, streams, events, allocation handles) must be live and belong to
//! the context current on the calling thread; pointers and lengths must
//! describe memory valid for the access CUDA documents for that call.

#![allow(non_snake_case)]

use std::{
    ffi::{CStr, c_char, c_int, c_uint, c_void},
    ptr,
};

use crate::{error::CudaError, sys};

/// Calls a symbol of the loaded library, mapping a missing symbol and a
/// failing `CUresult` to typed errors.
macro_rules! call {
    ($lib:expr, $name:ident($($arg:expr),* $(,)?)) => {{
        let f = *$lib
            .$name
            .as_ref()
            .map_err(|_| CudaError::MissingSymbol { symbol: stringify!($name) })?;
        // SAFETY: `f` is the symbol bindgen declared from cuda.h, so the
        // signature matches; the caller of the enclosing function upholds the
        // module's contract for handles and pointers.
        let status = unsafe { f($($arg),*) };
        check($lib, stringify!($name), status)
    }};
}

fn check(lib: &sys::CudaLib, call: &'static str, status: sys::CUresult) -> Result<(), CudaError> {
    if status == sys::CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(driver_error(lib, call, status, None))
    }
}

/// Builds the error for a failed call, with the driver's name and text.
pub(crate) fn driver_error(
    lib: &sys::CudaLib,
    call: &'static str,
    status: sys::CUresult,
    log: Option<String>,
) -> CudaError {
    let text = |f: &Result<
        unsafe extern "C" fn(sys::CUresult, *mut *const c_char) -> sys::CUresult,
        libloading::Error,
    >| {
        let f = f.as_ref().ok()?;
        let mut s: *const c_char = ptr::null();
        // SAFETY: cuGetErrorName/cuGetErrorString write a pointer to a static
        // NUL-terminated string (or fail and leave it null).
        let ok = unsafe { f(status, &mut s) } == sys::CUresult::CUDA_SUCCESS && !s.is_null();
        // SAFETY: on success `s` points to a NUL-terminated static string.
        ok.then(|| unsafe { CStr::from_ptr(s) }.to_string_lossy().into_owned())
    };
    CudaError::Driver {
        call,
        code: status.0,
        name: text(&lib.cuGetErrorName).unwrap_or_else(|| format!("CUresult {}", status.0)),
        description: text(&lib.cuGetErrorString).unwrap_or_default(),
        log,
    }
}

pub(crate) fn cuInit(lib: &sys::CudaLib) -> Result<(), CudaError> {
    call!(lib, cuInit(0))
}

pub(crate) fn cuDriverGetVersion(lib: &sys::CudaLib) -> Result<c_int, CudaError> {
    let mut v = 0;
    call!(lib, cuDriverGetVersion(&mut v))?;
    Ok(v)
}

pub(crate) fn cuDeviceGetCount(lib: &sys::CudaLib) -> Result<c_int, CudaError> {
    let mut n = 0;
    call!(lib, cuDeviceGetCount(&mut n))?;
    Ok(n)
}

pub(crate) fn cuDeviceGet(lib: &sys::CudaLib, ordinal: c_int) -> Result<sys::CUdevice, CudaError> {
    let mut d = 0;
    call!(lib, cuDeviceGet(&mut d, ordinal))?;
    Ok(d)
}

pub(crate) fn cuDeviceGetName(lib: &sys::CudaLib, dev: sys::CUdevice) -> Result<String, CudaError> {
    let mut buf = [0 as c_char; 256];
    call!(
        lib,
        cuDeviceGetName(buf.as_mut_ptr(), buf.len() as c_int, dev)
    )?;
    // SAFETY: the driver wrote a NUL-terminated name into `buf` (which we
    // zeroed, so a NUL exists within it even if the name was cut off).
    Ok(unsafe { CStr::from_ptr(buf.as_ptr()) }
        .to_string_lossy()
        .into_owned())
}

pub(crate) fn cuDeviceGetAttribute(
    lib: &sys::CudaLib,
    attr: sys::CUdevice_attribute,
    dev: sys::CUdevice,
) -> Result<c_int, CudaError> {
    let mut v = 0;
    call!(lib, cuDeviceGetAttribute(&mut v, attr, dev))?;
    Ok(v)
}

pub(crate) fn cuDeviceTotalMem_v2(
    lib: &sys::CudaLib,
    dev: sys::CUdevice,
) -> Result<usize, CudaError> {
    let mut v = 0;
    call!(lib, cuDeviceTotalMem_v2(&mut v, dev))?;
    Ok(v)
}

pub(crate) fn cuDevicePrimaryCtxRetain(
    lib: &sys::CudaLib,
    dev: sys::CUdevice,
) -> Result<sys::CUcontext, CudaError> {
    let mut ctx = ptr::null_mut();
    call!(lib, cuDevicePrimaryCtxRetain(&mut ctx, dev))?;
    Ok(ctx)
}

pub(crate) fn cuDevicePrimaryCtxRelease_v2(
    lib: &sys::CudaLib,
    dev: sys::CUdevice,
) -> Result<(), CudaError> {
    call!(lib, cuDevicePrimaryCtxRelease_v2(dev))
}

pub(crate) fn cuCtxGetCurrent(lib: &sys::CudaLib) -> Result<sys::CUcontext, CudaError> {
    let mut ctx = ptr::null_mut();
    call!(lib, cuCtxGetCurrent(&mut ctx))?;
    Ok(ctx)
}

pub(crate) unsafe fn cuCtxSetCurrent(
    lib: &sys::CudaLib,
    ctx: sys::CUcontext,
) -> Result<(), CudaError> {
    call!(lib, cuCtxSetCurrent(ctx))
}

pub(crate) fn cuCtxSynchronize(lib: &sys::CudaLib) -> Result<(), CudaError> {
    call!(lib, cuCtxSynchronize())
}

pub(crate) fn cuMemGetInfo_v2(lib: &sys::CudaLib) -> Result<(usize, usize), CudaError> {
    let (mut free, mut total) = (0, 0);
    call!(lib, cuMemGetInfo_v2(&mut free, &mut total))?;
    Ok((free, total))
}

pub(crate) fn cuMemAlloc_v2(
    lib: &sys::CudaLib,
    bytes: usize,
) -> Result<sys::CUdeviceptr, CudaError> {
    let mut p = 0;
    call!(lib, cuMemAlloc_v2(&mut p, bytes))?;
    Ok(p)
}

pub(crate) fn cuMemAllocManaged(
    lib: &sys::CudaLib,
    bytes: usize,
    flags: c_uint,
) -> Result<sys::CUdeviceptr, CudaError> {
    let mut p = 0;
    call!(lib, cuMemAllocManaged(&mut p, bytes, flags))?;
    Ok(p)
}

pub(crate) unsafe fn cuMemFree_v2(
    lib: &sys::CudaLib,
    p: sys::CUdeviceptr,
) -> Result<(), CudaError> {
    call!(lib, cuMemFree_v2(p))
}

pub(crate) unsafe fn cuMemcpyHtoD_v2(
    lib: &sys::CudaLib,
    dst: sys::CUdeviceptr,
    src: *const c_void,
    bytes: usize,
) -> Result<(), CudaError> {
    call!(lib, cuMemcpyHtoD_v2(dst, src, bytes))
}

pub(crate) unsafe fn cuMemcpyDtoH_v2(
    lib: &sys::CudaLib,
    dst: *mut c_void,
    src: sys::CUdeviceptr,
    bytes: usize,
) -> Result<(), CudaError> {
    call!(lib, cuMemcpyDtoH_v2(dst, src, bytes))
}

pub(crate) unsafe fn cuMemcpyDtoD_v2(
    lib: &sys::CudaLib,
    dst: sys::CUdeviceptr,
    src: sys::CUdeviceptr,
    bytes: usize,
) -> Result<(), CudaError> {
    call!(lib, cuMemcpyDtoD_v2(dst, src, bytes))
}

pub(crate) unsafe fn cuMemcpy(
    lib: &sys::CudaLib,
    dst: sys::CUdeviceptr,
    src: sys::CUdeviceptr,
    bytes: usize,
) -> Result<(), CudaError> {
    call!(lib, cuMemcpy(dst, src, bytes))
}

pub(crate) unsafe fn cuMemcpyAsync(
    lib: &sys::CudaLib,
    dst: sys::CUdeviceptr,
    src: sys::CUdeviceptr,
    bytes: usize,
    stream: sys::CUstream,
) -> Result<(), CudaError> {
    call!(lib, cuMemcpyAsync(dst, src, bytes, stream))
}

pub(crate) unsafe fn cuMemsetD8_v2(
    lib: &sys::CudaLib,
    dst: sys::CUdeviceptr,
    value: u8,
    bytes: usize,
) -> Result<(), CudaError> {
    call!(lib, cuMemsetD8_v2(dst, value, bytes))
}

pub(crate) unsafe fn cuMemsetD8Async(
    lib: &sys::CudaLib,
    dst: sys::CUdeviceptr,
    value: u8,
    bytes: usize,
    stream: sys::CUstream,
) -> Result<(), CudaError> {
    call!(lib, cuMemsetD8Async(dst, value, bytes, stream))
}

pub(crate) unsafe fn cuMemAdvise_v2(
    lib: &sys::CudaLib,
    p: sys::CUdeviceptr,
    bytes: usize,
    advice: sys::CUmem_advise,
    location: sys::CUmemLocation,
) -> Result<(), CudaError> {
    call!(lib, cuMemAdvise_v2(p, bytes, advice, location))
}

pub(crate) unsafe fn cuMemPrefetchAsync_v2(
    lib: &sys::CudaLib,
    p: sys::CUdeviceptr,
    bytes: usize,
    location: sys::CUmemLocation,
    stream: sys::CUstream,
) -> Result<(), CudaError> {
    call!(lib, cuMemPrefetchAsync_v2(p, bytes, location, 0, stream))
}

/// Reads one pointer attribute into `T` (whose size must match the attribute).
pub(crate) unsafe fn cuPointerGetAttribute<T: Default>(
    lib: &sys::CudaLib,
    attribute: sys::CUpointer_attribute,
    p: sys::CUdeviceptr,
) -> Result<T, CudaError> {
    let mut v = T::default();
    call!(
        lib,
        cuPointerGetAttribute((&mut v as *mut T).cast(), attribute, p)
    )?;
    Ok(v)
}

/// `cuModuleLoadDataEx` with the JIT's error and info logs captured; on
/// failure the error carries the error log (or the info log if that is empty).
pub(crate) unsafe fn cuModuleLoadDataEx(
    lib: &sys::CudaLib,
    image: *const c_void,
) -> Result<sys::CUmodule, CudaError> {
    const LOG: usize = 16 * 1024;
    let mut error_log = vec![0u8; LOG];
    let mut info_log = vec![0u8; LOG];
    let mut options = [
        sys::CUjit_option::CU_JIT_ERROR_LOG_BUFFER,
        sys::CUjit_option::CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
        sys::CUjit_option::CU_JIT_INFO_LOG_BUFFER,
        sys::CUjit_option::CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES,
    ];
    // Size options are passed by value in the pointer slot, as cuda.h specifies.
    let mut values: [*mut c_void; 4] = [
        error_log.as_mut_ptr().cast(),
        LOG as *mut c_void,
        info_log.as_mut_ptr().cast(),
        LOG as *mut c_void,
    ];
    let f = *lib
        .cuModuleLoadDataEx
        .as_ref()
        .map_err(|_| CudaError::MissingSymbol {
            symbol: "cuModuleLoadDataEx",
        })?;
    let mut module = ptr::null_mut();
    // SAFETY: options/values hold 4 entries each; the log buffers are LOG
    // bytes and outlive the call; `image` is valid per the module contract.
    let status = unsafe {
        f(
            &mut module,
            image,
            options.len() as c_uint,
            options.as_mut_ptr(),
            values.as_mut_ptr(),
        )
    };
    if status == sys::CUresult::CUDA_SUCCESS {
        return Ok(module);
    }
    let mut log = log_text(&error_log);
    if log.is_empty() {
        log = log_text(&info_log);
    }
    Err(driver_error(lib, "cuModuleLoadDataEx", status, Some(log)))
}

/// The text of a JIT log buffer (NUL-terminated), trailing space trimmed.
pub(crate) fn log_text(buf: &[u8]) -> String {
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).trim_end().to_string()
}

/// Starts a JIT link with `options`/`values` (pairs, as `cuModuleLoadDataEx`
/// takes them); buffers they point to must outlive the state.
pub(crate) unsafe fn cuLinkCreate_v2(
    lib: &sys::CudaLib,
    options: &mut [sys::CUjit_option],
    values: &mut [*mut c_void],
) -> Result<sys::CUlinkState, CudaError> {
    debug_assert_eq!(options.len(), values.len());
    let mut state = ptr::null_mut();
    call!(
        lib,
        cuLinkCreate_v2(
            options.len() as c_uint,
            options.as_mut_ptr(),
            values.as_mut_ptr(),
            &mut state
        )
    )?;
    Ok(state)
}

/// Adds NUL-terminated PTX text, named `name` in the JIT's messages.
pub(crate) unsafe fn cuLinkAddData_v2(
    lib: &sys::CudaLib,
    state: sys::CUlinkState,
    ptx: &CStr,
    name: &CStr,
) -> Result<(), CudaError> {
    let bytes = ptx.to_bytes_with_nul();
    call!(
        lib,
        cuLinkAddData_v2(
            state,
            sys::CUjitInputType::CU_JIT_INPUT_PTX,
            bytes.as_ptr().cast_mut().cast(),
            bytes.len(),
            name.as_ptr(),
            0,
            ptr::null_mut(),
            ptr::null_mut(),
        )
    )
}

/// Completes the link: the cubin's address and size, owned by `state`
/// (valid until `cuLinkDestroy`).
pub(crate) unsafe fn cuLinkComplete(
    lib: &sys::CudaLib,
    state: sys::CUlinkState,
) -> Result<(*const c_void, usize), CudaError> {
    let mut cubin = ptr::null_mut();
    let mut size = 0usize;
    call!(lib, cuLinkComplete(state, &mut cubin, &mut size))?;
    Ok((cubin.cast_const(), size))
}

pub(crate) unsafe fn cuLinkDestroy(
    lib: &sys::CudaLib,
    state: sys::CUlinkState,
) -> Result<(), CudaError> {
    call!(lib, cuLinkDestroy(state))
}

pub(crate) unsafe fn cuModuleUnload(
    lib: &sys::CudaLib,
    module: sys::CUmodule,
) -> Result<(), CudaError> {
    call!(lib, cuModuleUnload(module))
}

pub(crate) unsafe fn cuModuleGetFunction(
    lib: &sys::CudaLib,
    module: sys::CUmodule,
    name: &CStr,
) -> Result<sys::CUfunction, CudaError> {
    let mut f = ptr::null_mut();
    call!(lib, cuModuleGetFunction(&mut f, module, name.as_ptr()))?;
    Ok(f)
}

/// The (offset, size) of parameter `index`; `CUDA_ERROR_INVALID_VALUE` past the last.
pub(crate) unsafe fn cuFuncGetParamInfo(
    lib: &sys::CudaLib,
    func: sys::CUfunction,
    index: usize,
) -> Result<(usize, usize), CudaError> {
    let (mut offset, mut size) = (0, 0);
    call!(lib, cuFuncGetParamInfo(func, index, &mut offset, &mut size))?;
    Ok((offset, size))
}

/// Sets one attribute of a kernel (e.g. `CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES`).
pub(crate) unsafe fn cuFuncSetAttribute(
    lib: &sys::CudaLib,
    func: sys::CUfunction,
    attribute: sys::CUfunction_attribute,
    value: c_int,
) -> Result<(), CudaError> {
    call!(lib, cuFuncSetAttribute(func, attribute, value))
}

/// Encodes a tiled TMA descriptor into `map`. `dims`, `box_dims` and
/// `element_strides` hold the rank's entries, `strides` one fewer (the
/// byte strides of dimensions 1..); the caller checks the lengths and
/// CUDA's documented constraints.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn cuTensorMapEncodeTiled(
    lib: &sys::CudaLib,
    map: &mut sys::CUtensorMap,
    data_type: sys::CUtensorMapDataType,
    base: sys::CUdeviceptr,
    dims: &[u64],
    strides: &[u64],
    box_dims: &[u32],
    element_strides: &[u32],
    interleave: sys::CUtensorMapInterleave,
    swizzle: sys::CUtensorMapSwizzle,
    l2_promotion: sys::CUtensorMapL2promotion,
    oob_fill: sys::CUtensorMapFloatOOBfill,
) -> Result<(), CudaError> {
    debug_assert!(
        box_dims.len() == dims.len()
            && element_strides.len() == dims.len()
            && strides.len() + 1 == dims.len()
    );
    call!(
        lib,
        cuTensorMapEncodeTiled(
            map,
            data_type,
            dims.len() as c_uint,
            base as *mut c_void,
            dims.as_ptr(),
            strides.as_ptr(),
            box_dims.as_ptr(),
            element_strides.as_ptr(),
            interleave,
            swizzle,
            l2_promotion,
            oob_fill,
        )
    )
}

#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn cuLaunchKernel(
    lib: &sys::CudaLib,
    f: sys::CUfunction,
    grid: (c_uint, c_uint, c_uint),
    block: (c_uint, c_uint, c_uint),
    shared_mem_bytes: c_uint,
    stream: sys::CUstream,
    params: *mut *mut c_void,
) -> Result<(), CudaError> {
    call!(
        lib,
        cuLaunchKernel(
            f,
            grid.0,
            grid.1,
            grid.2,
            block.0,
            block.1,
            block.2,
            shared_mem_bytes,
            stream,
            params,
            ptr::null_mut()
        )
    )
}

pub(crate) fn cuStreamCreate(
    lib: &sys::CudaLib,
    flags: c_uint,
) -> Result<sys::CUstream, CudaError> {
    let mut s = ptr::null_mut();
    call!(lib, cuStreamCreate(&mut s, flags))?;
    Ok(s)
}

pub(crate) unsafe fn cuStreamDestroy_v2(
    lib: &sys::CudaLib,
    s: sys::CUstream,
) -> Result<(), CudaError> {
    call!(lib, cuStreamDestroy_v2(s))
}

pub(crate) unsafe fn cuStreamSynchronize(
    lib: &sys::CudaLib,
    s: sys::CUstream,
) -> Result<(), CudaError> {
    call!(lib, cuStreamSynchronize(s))
}

/// `CUDA_ERROR_NOT_READY` comes back as an error like any other code; the
/// caller decides that it means "still running".
pub(crate) unsafe fn cuStreamQuery(lib: &sys::CudaLib, s: sys::CUstream) -> Result<(), CudaError> {
    call!(lib, cuStreamQuery(s))
}

pub(crate) unsafe fn cuStreamWaitEvent(
    lib: &sys::CudaLib,
    s: sys::CUstream,
    e: sys::CUevent,
) -> Result<(), CudaError> {
    call!(lib, cuStreamWaitEvent(s, e, 0))
}

pub(crate) fn cuEventCreate(lib: &sys::CudaLib, flags: c_uint) -> Result<sys::CUevent, CudaError> {
    let mut e = ptr::null_mut();
    call!(lib, cuEventCreate(&mut e, flags))?;
    Ok(e)
}

pub(crate) unsafe fn cuEventDestroy_v2(
    lib: &sys::CudaLib,
    e: sys::CUevent,
) -> Result<(), CudaError> {
    call!(lib, cuEventDestroy_v2(e))
}

pub(crate) unsafe fn cuEventRecord(
    lib: &sys::CudaLib,
    e: sys::CUevent,
    s: sys::CUstream,
) -> Result<(), CudaError> {
    call!(lib, cuEventRecord(e, s))
}

/// `Ok(true)` when complete, `Ok(false)` on `CUDA_ERROR_NOT_READY`.
pub(crate) unsafe fn cuEventQuery(lib: &sys::CudaLib, e: sys::CUevent) -> Result<bool, CudaError> {
    match call!(lib, cuEventQuery(e)) {
        Ok(()) => Ok(true),
        Err(err) if err.code() == Some(sys::CUresult::CUDA_ERROR_NOT_READY.0) => Ok(false),
        Err(err) => Err(err),
    }
}

pub(crate) unsafe fn cuEventSynchronize(
    lib: &sys::CudaLib,
    e: sys::CUevent,
) -> Result<(), CudaError> {
    call!(lib, cuEventSynchronize(e))
}

pub(crate) unsafe fn cuEventElapsedTime(
    lib: &sys::CudaLib,
    start: sys::CUevent,
    end: sys::CUevent,
) -> Result<f32, CudaError> {
    let mut ms = 0.0f32;
    call!(lib, cuEventElapsedTime(&mut ms, start, end))?;
    Ok(ms)
}

pub(crate) unsafe fn cuLaunchHostFunc(
    lib: &sys::CudaLib,
    s: sys::CUstream,
    f: sys::CUhostFn,
    data: *mut c_void,
) -> Result<(), CudaError> {
    call!(lib, cuLaunchHostFunc(s, f, data))
}

pub(crate) fn cuMemGetAllocationGranularity(
    lib: &sys::CudaLib,
    prop: &sys::CUmemAllocationProp,
) -> Result<usize, CudaError> {
    let mut g = 0;
    call!(
        lib,
        cuMemGetAllocationGranularity(
            &mut g,
            prop,
            sys::CUmemAllocationGranularity_flags::CU_MEM_ALLOC_GRANULARITY_MINIMUM
        )
    )?;
    Ok(g)
}

pub(crate) fn cuMemAddressReserve(
    lib: &sys::CudaLib,
    bytes: usize,
) -> Result<sys::CUdeviceptr, CudaError> {
    let mut p = 0;
    call!(lib, cuMemAddressReserve(&mut p, bytes, 0, 0, 0))?;
    Ok(p)
}

pub(crate) unsafe fn cuMemAddressFree(
    lib: &sys::CudaLib,
    p: sys::CUdeviceptr,
    bytes: usize,
) -> Result<(), CudaError> {
    call!(lib, cuMemAddressFree(p, bytes))
}

pub(crate) fn cuMemCreate(
    lib: &sys::CudaLib,
    bytes: usize,
    prop: &sys::CUmemAllocationProp,
) -> Result<sys::CUmemGenericAllocationHandle, CudaError> {
    let mut h = 0;
    call!(lib, cuMemCreate(&mut h, bytes, prop, 0))?;
    Ok(h)
}

pub(crate) unsafe fn cuMemRelease(
    lib: &sys::CudaLib,
    h: sys::CUmemGenericAllocationHandle,
) -> Result<(), CudaError> {
    call!(lib, cuMemRelease(h))
}

pub(crate) unsafe fn cuMemMap(
    lib: &sys::CudaLib,
    p: sys::CUdeviceptr,
    bytes: usize,
    h: sys::CUmemGenericAllocationHandle,
) -> Result<(), CudaError> {
    call!(lib, cuMemMap(p, bytes, 0, h, 0))
}

pub(crate) unsafe fn cuMemUnmap(
    lib: &sys::CudaLib,
    p: sys::CUdeviceptr,
    bytes: usize,
) -> Result<(), CudaError> {
    call!(lib, cuMemUnmap(p, bytes))
}

pub(crate) unsafe fn cuMemSetAccess(
    lib: &sys::CudaLib,
    p: sys::CUdeviceptr,
    bytes: usize,
    desc: &sys::CUmemAccessDesc,
) -> Result<(), CudaError> {
    call!(lib, cuMemSetAccess(p, bytes, desc, 1))
}
