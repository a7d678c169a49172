//! The raw side of the comparisons: device 0's primary context driven
//! through `tensorwasm_cuda::sys` with no layer in between, as a C program
//! would (load PTX, launch, wait, `cuMemAlloc` buffers). Nothing of the
//! runtime under test is used here.

use std::{
    ffi::{CStr, CString, c_char, c_void},
    ptr,
};

use tensorwasm_cuda::{DEFAULT_LIBCUDA, LIBCUDA_ENV, sys};

use super::BenchResult;

/// Device 0's primary context, one stream and one event, driven through
/// `tensorwasm_cuda::sys` with no layer in between.
pub struct RawCuda {
    lib: sys::CudaLib,
    device: sys::CUdevice,
    ctx: sys::CUcontext,
    stream: sys::CUstream,
    event: sys::CUevent,
    modules: Vec<sys::CUmodule>,
}

/// A kernel of the raw side and its parameters, packed as `cuLaunchKernel`
/// reads them: one 8-byte slot per parameter, and an array of pointers to
/// the slots.
pub struct RawKernel {
    function: sys::CUfunction,
    _slots: Box<[u64]>,
    ptrs: Box<[*mut c_void]>,
}

impl RawKernel {
    pub fn new(function: sys::CUfunction, params: &[u64]) -> RawKernel {
        let mut slots: Box<[u64]> = params.into();
        // The slots live on the heap, so the pointers stay valid when the
        // box moves into the struct. A 4-byte parameter is read from the low
        // (first, little-endian) half of its slot.
        let ptrs = slots
            .iter_mut()
            .map(|s| ptr::from_mut(s).cast::<c_void>())
            .collect();
        RawKernel {
            function,
            _slots: slots,
            ptrs,
        }
    }

    /// `kernelParams` for `cuLaunchKernel`: null for a kernel without any.
    fn params(&mut self) -> *mut *mut c_void {
        if self.ptrs.is_empty() {
            ptr::null_mut()
        } else {
            self.ptrs.as_mut_ptr()
        }
    }
}

/// A `cuMemAlloc` buffer, freed on drop.
pub struct RawBuffer<'a> {
    raw: &'a RawCuda,
    /// Its device address.
    pub ptr: sys::CUdeviceptr,
    bytes: usize,
}

impl Drop for RawBuffer<'_> {
    fn drop(&mut self) {
        // SAFETY: allocated by `RawCuda::alloc`, freed once; the stream was
        // synchronized after the last kernel that used it.
        let _ = unsafe { self.raw.lib.cuMemFree_v2(self.ptr) };
    }
}

/// A completion callback that does nothing: the raw side's stand-in for the
/// one the guest's launch queues. It must not call into CUDA.
unsafe extern "C" fn noop_callback(_user_data: *mut c_void) {}

impl RawCuda {
    /// Loads the driver library as `tensorwasm_cuda` does, retains device 0's
    /// primary context (the one `CudaDriver::new(0)` uses), makes it current
    /// and creates a stream (blocking, like the guest's) and an event without
    /// timing.
    pub fn open() -> BenchResult<RawCuda> {
        let library = std::env::var(LIBCUDA_ENV).unwrap_or_else(|_| DEFAULT_LIBCUDA.to_string());
        // SAFETY: loading libcuda runs its initialisers, which have no
        // preconditions; symbols are resolved into Results (checked below).
        let lib = unsafe { sys::CudaLib::new(&library) }
            .map_err(|e| format!("loading {library}: {e}"))?;
        let symbols = [
            ("cuGetErrorName", lib.cuGetErrorName.is_ok()),
            ("cuInit", lib.cuInit.is_ok()),
            ("cuDeviceGet", lib.cuDeviceGet.is_ok()),
            (
                "cuDevicePrimaryCtxRetain",
                lib.cuDevicePrimaryCtxRetain.is_ok(),
            ),
            (
                "cuDevicePrimaryCtxRelease_v2",
                lib.cuDevicePrimaryCtxRelease_v2.is_ok(),
            ),
            ("cuCtxSetCurrent", lib.cuCtxSetCurrent.is_ok()),
            ("cuModuleLoadDataEx", lib.cuModuleLoadDataEx.is_ok()),
            ("cuModuleGetFunction", lib.cuModuleGetFunction.is_ok()),
            ("cuModuleUnload", lib.cuModuleUnload.is_ok()),
            ("cuStreamCreate", lib.cuStreamCreate.is_ok()),
            ("cuStreamSynchronize", lib.cuStreamSynchronize.is_ok()),
            ("cuStreamDestroy_v2", lib.cuStreamDestroy_v2.is_ok()),
            ("cuEventCreate", lib.cuEventCreate.is_ok()),
            ("cuEventRecord", lib.cuEventRecord.is_ok()),
            ("cuEventQuery", lib.cuEventQuery.is_ok()),
            ("cuEventDestroy_v2", lib.cuEventDestroy_v2.is_ok()),
            ("cuLaunchKernel", lib.cuLaunchKernel.is_ok()),
            ("cuLaunchHostFunc", lib.cuLaunchHostFunc.is_ok()),
            ("cuMemAlloc_v2", lib.cuMemAlloc_v2.is_ok()),
            ("cuMemFree_v2", lib.cuMemFree_v2.is_ok()),
            ("cuMemcpyHtoD_v2", lib.cuMemcpyHtoD_v2.is_ok()),
            ("cuMemcpyDtoH_v2", lib.cuMemcpyDtoH_v2.is_ok()),
        ];
        let missing: Vec<&str> = symbols
            .iter()
            .filter(|(_, ok)| !ok)
            .map(|(name, _)| *name)
            .collect();
        if !missing.is_empty() {
            return Err(format!("{library} lacks {}", missing.join(", ")));
        }
        let mut raw = RawCuda {
            lib,
            device: 0,
            ctx: ptr::null_mut(),
            stream: ptr::null_mut(),
            event: ptr::null_mut(),
            modules: Vec::new(),
        };
        // SAFETY: cuInit takes only its flags, which must be 0.
        raw.check("cuInit", unsafe { raw.lib.cuInit(0) })?;
        let mut device = 0;
        // SAFETY: the out-pointer is a live local.
        raw.check("cuDeviceGet", unsafe {
            raw.lib.cuDeviceGet(&mut device, 0)
        })?;
        raw.device = device;
        let mut ctx = ptr::null_mut();
        // SAFETY: the out-pointer is a live local; `device` came from the driver.
        let status = unsafe { raw.lib.cuDevicePrimaryCtxRetain(&mut ctx, device) };
        raw.check("cuDevicePrimaryCtxRetain", status)?;
        raw.ctx = ctx;
        // SAFETY: `ctx` is retained until `raw` drops.
        raw.check("cuCtxSetCurrent", unsafe { raw.lib.cuCtxSetCurrent(ctx) })?;
        let mut stream = ptr::null_mut();
        let flags = sys::CUstream_flags_enum::CU_STREAM_DEFAULT.0;
        // SAFETY: the out-pointer is a live local; the context is current.
        let status = unsafe { raw.lib.cuStreamCreate(&mut stream, flags) };
        raw.check("cuStreamCreate", status)?;
        raw.stream = stream;
        let mut event = ptr::null_mut();
        let flags = sys::CUevent_flags_enum::CU_EVENT_DISABLE_TIMING.0;
        // SAFETY: as for the stream.
        let status = unsafe { raw.lib.cuEventCreate(&mut event, flags) };
        raw.check("cuEventCreate", status)?;
        raw.event = event;
        Ok(raw)
    }

    /// `Ok` for `CUDA_SUCCESS`, else the call's name and the error's.
    fn check(&self, call: &str, status: sys::CUresult) -> BenchResult<()> {
        if status == sys::CUresult::CUDA_SUCCESS {
            return Ok(());
        }
        let mut name: *const c_char = ptr::null();
        // SAFETY: cuGetErrorName takes any code and writes a pointer to a
        // static string, or fails and leaves `name` null.
        let named = unsafe { self.lib.cuGetErrorName(status, &mut name) };
        let name = if named == sys::CUresult::CUDA_SUCCESS && !name.is_null() {
            // SAFETY: the driver's static, NUL-terminated error name.
            unsafe { CStr::from_ptr(name) }
                .to_string_lossy()
                .into_owned()
        } else {
            "an unknown error".to_string()
        };
        Err(format!("{call} failed: {name} ({})", status.0))
    }

    /// Loads PTX text (the driver JIT-compiles it) and looks up one kernel
    /// (`cuModuleLoadDataEx` without JIT options: `sys.rs` has no
    /// `cuModuleLoadData`, and this is the same call with zero options).
    pub fn load(&mut self, ptx: &str, name: &str) -> BenchResult<sys::CUfunction> {
        let image = CString::new(ptx).map_err(|e| format!("PTX of `{name}`: {e}"))?;
        let mut module = ptr::null_mut();
        // SAFETY: `image` is NUL-terminated PTX text that outlives the call;
        // no options are passed (count 0, null arrays).
        let status = unsafe {
            self.lib.cuModuleLoadDataEx(
                &mut module,
                image.as_ptr().cast(),
                0,
                ptr::null_mut(),
                ptr::null_mut(),
            )
        };
        self.check("cuModuleLoadDataEx", status)?;
        self.modules.push(module);
        let cname = CString::new(name).map_err(|e| format!("kernel name {name:?}: {e}"))?;
        let mut function = ptr::null_mut();
        // SAFETY: `module` was loaded above; `cname` is NUL-terminated.
        let status = unsafe {
            self.lib
                .cuModuleGetFunction(&mut function, module, cname.as_ptr())
        };
        self.check("cuModuleGetFunction", status)?;
        Ok(function)
    }

    /// Queues `kernel` on the stream, 1-D.
    ///
    /// # Safety
    /// What the kernel's parameters point at must stay allocated until it
    /// has finished.
    #[inline]
    pub unsafe fn launch(&self, kernel: &mut RawKernel, grid: u32, block: u32) -> BenchResult<()> {
        // SAFETY: the stream and function are live; `params` holds one
        // pointer per kernel parameter to a slot that outlives the call (the
        // driver copies them); what the kernel touches is the caller's.
        let status = unsafe {
            self.lib.cuLaunchKernel(
                kernel.function,
                grid,
                1,
                1,
                block,
                1,
                1,
                0,
                self.stream,
                kernel.params(),
                ptr::null_mut(),
            )
        };
        self.check("cuLaunchKernel", status)
    }

    /// Queues [`noop_callback`] after the work queued so far.
    #[inline]
    pub fn host_func(&self) -> BenchResult<()> {
        // SAFETY: the stream is live; the callback ignores its (null)
        // argument and never calls into CUDA.
        let status = unsafe {
            self.lib
                .cuLaunchHostFunc(self.stream, Some(noop_callback), ptr::null_mut())
        };
        self.check("cuLaunchHostFunc", status)
    }

    /// Records the event after the work queued so far.
    #[inline]
    pub fn record(&self) -> BenchResult<()> {
        // SAFETY: the event and stream are live and of the current context.
        let status = unsafe { self.lib.cuEventRecord(self.event, self.stream) };
        self.check("cuEventRecord", status)
    }

    /// Whether the work before the last `record` has finished.
    #[inline]
    pub fn query(&self) -> BenchResult<bool> {
        // SAFETY: the event is live.
        let status = unsafe { self.lib.cuEventQuery(self.event) };
        if status == sys::CUresult::CUDA_ERROR_NOT_READY {
            return Ok(false);
        }
        self.check("cuEventQuery", status).map(|()| true)
    }

    /// Blocks until the stream is idle.
    #[inline]
    pub fn synchronize(&self) -> BenchResult<()> {
        // SAFETY: the stream is live.
        let status = unsafe { self.lib.cuStreamSynchronize(self.stream) };
        self.check("cuStreamSynchronize", status)
    }

    pub fn alloc(&self, bytes: usize) -> BenchResult<RawBuffer<'_>> {
        let mut dptr = 0;
        // SAFETY: the out-pointer is a live local; the context is current.
        let status = unsafe { self.lib.cuMemAlloc_v2(&mut dptr, bytes) };
        self.check("cuMemAlloc_v2", status)?;
        Ok(RawBuffer {
            raw: self,
            ptr: dptr,
            bytes,
        })
    }

    pub fn copy_to(&self, dst: &RawBuffer<'_>, src: &[u8]) -> BenchResult<()> {
        if src.len() != dst.bytes {
            return Err(format!("copying {} bytes into {}", src.len(), dst.bytes));
        }
        // SAFETY: `dst` is a live allocation of `src.len()` bytes; `src` is
        // readable for that long.
        let status = unsafe {
            self.lib
                .cuMemcpyHtoD_v2(dst.ptr, src.as_ptr().cast(), src.len())
        };
        self.check("cuMemcpyHtoD_v2", status)
    }

    pub fn copy_from(&self, dst: &mut [u8], src: &RawBuffer<'_>) -> BenchResult<()> {
        if dst.len() != src.bytes {
            return Err(format!("copying {} bytes out of {}", src.bytes, dst.len()));
        }
        // SAFETY: `src` is a live allocation of `dst.len()` bytes; `dst` is
        // writable for that long.
        let status = unsafe {
            self.lib
                .cuMemcpyDtoH_v2(dst.as_mut_ptr().cast(), src.ptr, dst.len())
        };
        self.check("cuMemcpyDtoH_v2", status)
    }
}

impl Drop for RawCuda {
    fn drop(&mut self) {
        if self.ctx.is_null() {
            return;
        }
        // SAFETY: `ctx` is still retained (released last, below).
        let _ = unsafe { self.lib.cuCtxSetCurrent(self.ctx) };
        if !self.stream.is_null() {
            // Nothing may still run when the modules go.
            let _ = self.synchronize();
        }
        if !self.event.is_null() {
            // SAFETY: created in `open`, destroyed once.
            let _ = unsafe { self.lib.cuEventDestroy_v2(self.event) };
        }
        if !self.stream.is_null() {
            // SAFETY: created in `open`, destroyed once, idle.
            let _ = unsafe { self.lib.cuStreamDestroy_v2(self.stream) };
        }
        for module in self.modules.drain(..) {
            // SAFETY: loaded by `load`, unloaded once; no kernel is running.
            let _ = unsafe { self.lib.cuModuleUnload(module) };
        }
        // SAFETY: retained once in `open`, released once.
        let _ = unsafe { self.lib.cuDevicePrimaryCtxRelease_v2(self.device) };
    }
}
