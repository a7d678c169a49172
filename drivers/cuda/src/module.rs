//! Modules (`cuModuleLoadDataEx` of a cubin or fatbin; PTX is compiled to
//! a cubin first, `jit.rs`, where the driver can) and their kernel
//! functions, with each kernel's parameter layout read from the driver so a
//! launch with the wrong parameters is refused instead of run.

use std::{
    ffi::{CStr, CString, c_int, c_void},
    sync::{
        Arc, Mutex,
        atomic::{AtomicU32, Ordering},
    },
};

use tensorwasm_core::image::check_module_image;

use crate::{context::Context, error::CudaError, result, sys};

struct ModuleHandle {
    ctx: Arc<Context>,
    module: sys::CUmodule,
}

// SAFETY: a CUmodule may be used from any thread with its context current
// (the driver API is thread-safe); the handle itself is immutable.
unsafe impl Send for ModuleHandle {}
// SAFETY: as for Send.
unsafe impl Sync for ModuleHandle {}

impl Drop for ModuleHandle {
    fn drop(&mut self) {
        if self.ctx.bind().is_ok() {
            // SAFETY: loaded once in this context, unloaded once, here; every
            // function of it holds this handle, so none outlives it.
            let _ = unsafe { result::cuModuleUnload(&self.ctx.lib, self.module) };
        }
    }
}

/// A loaded module; unloaded when it and all its functions are dropped.
#[derive(Clone)]
pub struct CudaModule(Arc<ModuleHandle>);

impl CudaModule {
    /// Loads PTX text, compiled by the driver as it loads it (the fallback
    /// of a driver without the linker's calls); the error of a rejected
    /// image carries the JIT log.
    pub(crate) fn from_ptx(ctx: &Arc<Context>, ptx: &CStr) -> Result<Self, CudaError> {
        // SAFETY: `ptx` is NUL-terminated and lives across the call.
        unsafe { Self::load(ctx, ptx.as_ptr().cast()) }
    }

    /// Loads a cubin or fatbin image after checking that every table it
    /// declares lies inside `image` (the driver trusts those sizes).
    pub(crate) fn from_cubin(ctx: &Arc<Context>, image: &[u8]) -> Result<Self, CudaError> {
        check_module_image(image).map_err(|e| CudaError::invalid("load_cubin", e.to_string()))?;
        // An 8-byte aligned copy: the driver reads ELF headers in place.
        let mut aligned = vec![0u64; image.len().div_ceil(8)];
        // SAFETY: `aligned` holds at least image.len() bytes; they do not overlap.
        unsafe {
            std::ptr::copy_nonoverlapping(image.as_ptr(), aligned.as_mut_ptr().cast(), image.len())
        };
        // SAFETY: the image's declared extents were checked to lie inside it.
        unsafe { Self::load(ctx, aligned.as_ptr().cast()) }
    }

    /// # Safety
    /// `image` must point to a NUL-terminated PTX text or a self-consistent
    /// cubin/fatbin that stays valid for the call.
    unsafe fn load(ctx: &Arc<Context>, image: *const c_void) -> Result<Self, CudaError> {
        ctx.bind()?;
        // SAFETY: forwarded from this function's contract.
        let module = unsafe { result::cuModuleLoadDataEx(&ctx.lib, image) }?;
        Ok(CudaModule(Arc::new(ModuleHandle {
            ctx: Arc::clone(ctx),
            module,
        })))
    }

    /// Looks up a kernel and reads its parameter sizes.
    pub(crate) fn function(&self, name: &str) -> Result<CudaFunction, CudaError> {
        let m = &self.0;
        let cname = CString::new(name)
            .map_err(|_| CudaError::invalid("function", "kernel name contains a NUL byte"))?;
        m.ctx.bind()?;
        // SAFETY: the module is loaded (held by `self`); `cname` is a C string.
        let func = unsafe { result::cuModuleGetFunction(&m.ctx.lib, m.module, &cname) }?;
        let param_sizes = param_sizes(&m.ctx, func)?;
        Ok(CudaFunction(Arc::new(FunctionInner {
            module: Arc::clone(&self.0),
            func,
            name: name.to_string(),
            param_sizes,
            dynamic_shared: AtomicU32::new(0),
            raising_dynamic_shared: Mutex::new(()),
        })))
    }
}

/// Sizes of a kernel's parameters, or `None` where the driver cannot say
/// (`cuFuncGetParamInfo` needs driver 12.4).
fn param_sizes(ctx: &Context, func: sys::CUfunction) -> Result<Option<Vec<usize>>, CudaError> {
    let mut sizes = Vec::new();
    loop {
        // SAFETY: `func` belongs to a loaded module of this context.
        match unsafe { result::cuFuncGetParamInfo(&ctx.lib, func, sizes.len()) } {
            Ok((_, size)) => sizes.push(size),
            Err(CudaError::MissingSymbol { .. }) => return Ok(None),
            Err(e) if e.code() == Some(sys::CUresult::CUDA_ERROR_INVALID_VALUE.0) => {
                return Ok(Some(sizes));
            }
            Err(e) => return Err(e),
        }
    }
}

struct FunctionInner {
    module: Arc<ModuleHandle>,
    func: sys::CUfunction,
    name: String,
    param_sizes: Option<Vec<usize>>,
    /// The most dynamic shared memory this kernel has been allowed through
    /// `cuFuncSetAttribute` (0: never set; the driver's default then holds).
    /// Only grows, so a launch that fits it needs no call.
    dynamic_shared: AtomicU32,
    /// Held while raising `dynamic_shared`: two launches raising it at once
    /// must not leave the attribute at the smaller of their values.
    raising_dynamic_shared: Mutex<()>,
}

// SAFETY: a CUfunction may be launched from any thread with its context
// current; the handle and the rest of the struct are immutable, apart from
// the atomic and the lock, which are Send and Sync themselves.
unsafe impl Send for FunctionInner {}
// SAFETY: as for Send.
unsafe impl Sync for FunctionInner {}

/// A kernel of a loaded module; keeps the module loaded.
#[derive(Clone)]
pub struct CudaFunction(Arc<FunctionInner>);

impl CudaFunction {
    /// The kernel's name.
    pub fn name(&self) -> &str {
        &self.0.name
    }

    /// The size in bytes of each parameter, if the driver reports them.
    pub fn param_sizes(&self) -> Option<&[usize]> {
        self.0.param_sizes.as_deref()
    }

    pub(crate) fn raw(&self) -> sys::CUfunction {
        self.0.func
    }

    /// Lets the kernel use `bytes` of dynamic shared memory: one
    /// `cuFuncSetAttribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES)`
    /// the first time a launch asks for more than any before it, none
    /// otherwise. Beyond 48 KiB this is CUDA's opt-in, which the launch
    /// needs; below it the call matches what the driver allows anyway. The
    /// context must be current; `bytes` must have passed
    /// `LaunchConfig::validate` (at most the device's opt-in maximum).
    pub(crate) fn allow_dynamic_shared(&self, bytes: u32) -> Result<(), CudaError> {
        let inner = &self.0;
        if bytes <= inner.dynamic_shared.load(Ordering::Acquire) {
            return Ok(());
        }
        // A poisoned lock guards no data: the atomic below is the state.
        let _raising = inner
            .raising_dynamic_shared
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if bytes <= inner.dynamic_shared.load(Ordering::Acquire) {
            return Ok(());
        }
        let value = c_int::try_from(bytes).map_err(|_| {
            CudaError::invalid(
                "launch",
                format!("kernel `{}`: {bytes} bytes of shared memory", inner.name),
            )
        })?;
        // SAFETY: the function belongs to a loaded module of the current
        // context (held by `self`); the attribute takes a byte count.
        unsafe {
            result::cuFuncSetAttribute(
                &inner.module.ctx.lib,
                inner.func,
                sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                value,
            )
        }?;
        inner.dynamic_shared.store(bytes, Ordering::Release);
        Ok(())
    }

    /// The most dynamic shared memory the kernel has been allowed so far
    /// (0 until a launch asked for any).
    pub fn dynamic_shared_allowed(&self) -> u32 {
        self.0.dynamic_shared.load(Ordering::Acquire)
    }

    pub(crate) fn ctx(&self) -> &Arc<Context> {
        &self.0.module.ctx
    }
}

impl std::fmt::Debug for CudaFunction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "CudaFunction({}, params {:?})",
            self.0.name, self.0.param_sizes
        )
    }
}
