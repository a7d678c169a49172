//! [`CudaDriver`]: the safe layer, implementing [`GpuDriver`] on one device.
//! Every method binds the primary context to the calling thread, checks its
//! arguments, then makes the thin-layer calls.

use std::{
    ffi::{CString, c_uint, c_void},
    sync::Arc,
};

use tensorwasm_core::{
    Advice, DeviceInfo, DeviceRange, DriverKind, GpuDriver, KernelParam, LaunchConfig,
    MAX_KERNEL_PARAMS, MemInfo, MemoryKind, PointerInfo, PrefetchOutcome, PrefetchTarget,
    driver::HostCallback,
};

use crate::{
    context::{self, Context},
    error::CudaError,
    jit::{self, JitCache},
    memory::{self, CudaBuffer},
    module::{CudaFunction, CudaModule},
    result,
    stream::{CudaEvent, CudaStream},
    sys, tensor_map,
    vm::{self, CudaVirtualRange},
};

/// The CUDA driver bound to one device. Cheap to clone; usable from many
/// threads at once (the primary context is made current on each).
#[derive(Clone)]
pub struct CudaDriver {
    pub(crate) ctx: Arc<Context>,
    /// Where [`GpuDriver::load_ptx`] keeps compiled PTX (`jit.rs`).
    jit_cache: Option<JitCache>,
}

impl std::fmt::Debug for CudaDriver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaDriver")
            .field("device", &self.ctx.info)
            .finish()
    }
}

impl CudaDriver {
    /// Loads `libcuda` and retains device `ordinal`'s primary context. PTX
    /// it loads is compiled once and kept in the JIT cache the environment
    /// names ([`JitCache::from_env`]; [`CudaDriver::with_jit_cache`] picks
    /// another or none).
    pub fn new(ordinal: u32) -> Result<CudaDriver, CudaError> {
        Ok(CudaDriver {
            ctx: Context::open(ordinal)?,
            jit_cache: JitCache::from_env(),
        })
    }

    /// This driver with `cache` as its JIT cache (`None`: every PTX load
    /// compiles).
    pub fn with_jit_cache(mut self, cache: Option<JitCache>) -> CudaDriver {
        self.jit_cache = cache;
        self
    }

    /// The JIT cache, if any.
    pub fn jit_cache(&self) -> Option<&JitCache> {
        self.jit_cache.as_ref()
    }

    /// Lists every CUDA device without retaining any context: the typed error
    /// says why CUDA is unavailable.
    pub fn probe() -> Result<Vec<DeviceInfo>, CudaError> {
        let (lib, version) = context::load()?;
        let count = result::cuDeviceGetCount(&lib)?.max(0) as u32;
        (0..count)
            .map(|i| context::query_device(&lib, i, version))
            .collect()
    }

    fn same_len(op: &'static str, dst: usize, src: usize) -> Result<(), CudaError> {
        if dst == src {
            Ok(())
        } else {
            Err(CudaError::invalid(
                op,
                format!("destination is {dst} bytes, source {src}"),
            ))
        }
    }

    pub(crate) fn advise_range(
        &self,
        range: DeviceRange<'_>,
        advice: Advice,
    ) -> Result<(), CudaError> {
        use sys::CUmem_advise as A;
        let device = vm::device_location(&self.ctx);
        let host = vm::host_location();
        let (advice, location) = match advice {
            Advice::SetReadMostly => (A::CU_MEM_ADVISE_SET_READ_MOSTLY, device),
            Advice::UnsetReadMostly => (A::CU_MEM_ADVISE_UNSET_READ_MOSTLY, device),
            Advice::PreferDevice => (A::CU_MEM_ADVISE_SET_PREFERRED_LOCATION, device),
            Advice::PreferHost => (A::CU_MEM_ADVISE_SET_PREFERRED_LOCATION, host),
            Advice::UnsetPreferredLocation => (A::CU_MEM_ADVISE_UNSET_PREFERRED_LOCATION, device),
            Advice::AccessedByDevice => (A::CU_MEM_ADVISE_SET_ACCESSED_BY, device),
            Advice::UnsetAccessedByDevice => (A::CU_MEM_ADVISE_UNSET_ACCESSED_BY, device),
        };
        if range.is_empty() {
            return Ok(());
        }
        self.ctx.bind()?;
        // SAFETY: the range is a checked span of a live allocation.
        unsafe {
            result::cuMemAdvise_v2(&self.ctx.lib, range.ptr().0, range.len(), advice, location)
        }
    }

    pub(crate) fn prefetch_range(
        &self,
        range: DeviceRange<'_>,
        target: PrefetchTarget,
        stream: sys::CUstream,
    ) -> Result<PrefetchOutcome, CudaError> {
        if !self.ctx.info.concurrent_managed_access {
            return Ok(PrefetchOutcome::SkippedNoConcurrentManagedAccess);
        }
        if range.is_empty() {
            return Ok(PrefetchOutcome::Issued);
        }
        let location = match target {
            PrefetchTarget::Device => vm::device_location(&self.ctx),
            PrefetchTarget::Host => vm::host_location(),
        };
        self.ctx.bind()?;
        // SAFETY: the range is a checked span of a live allocation; `stream`
        // is a live stream of this context or the legacy default (null).
        unsafe {
            result::cuMemPrefetchAsync_v2(
                &self.ctx.lib,
                range.ptr().0,
                range.len(),
                location,
                stream,
            )
        }?;
        Ok(PrefetchOutcome::Issued)
    }
}

/// A launch's parameters as `cuLaunchKernel` reads them: scalars and
/// pointers in 8-byte slots, tensor maps encoded (64-byte aligned), in the
/// order the parameters come.
struct PackedParams {
    slots: [u64; MAX_KERNEL_PARAMS],
    /// One per `KernelParam::TensorMap`, in order; empty (no allocation)
    /// for a launch without one.
    maps: Vec<sys::CUtensorMap>,
}

impl PackedParams {
    /// One pointer per parameter, into `self`: valid while `self` is
    /// neither moved nor dropped.
    fn pointers(
        &mut self,
        params: &[KernelParam],
    ) -> Result<[*mut c_void; MAX_KERNEL_PARAMS], CudaError> {
        let mut ptrs = [std::ptr::null_mut::<c_void>(); MAX_KERNEL_PARAMS];
        let mut maps = self.maps.iter_mut();
        for ((ptr, slot), p) in ptrs.iter_mut().zip(self.slots.iter_mut()).zip(params) {
            *ptr = match p {
                KernelParam::TensorMap(_) => {
                    let map = maps.next().ok_or_else(|| {
                        CudaError::invalid("launch", "a tensor map was not encoded")
                    })?;
                    (map as *mut sys::CUtensorMap).cast()
                }
                _ => (slot as *mut u64).cast(),
            };
        }
        Ok(ptrs)
    }
}

/// Checks a launch's geometry and parameters before the driver sees them,
/// and packs the parameters: scalars into 8-byte slots, tensor maps
/// checked and encoded (`tensor_map.rs`; the context must be current).
fn check_launch(
    ctx: &Context,
    function: &CudaFunction,
    config: &LaunchConfig,
    params: &[KernelParam],
) -> Result<PackedParams, CudaError> {
    config.validate_launch(&ctx.info, params).map_err(|e| {
        CudaError::invalid(
            "launch",
            format!(
                "kernel `{}`: {e} ({} parameters)",
                function.name(),
                params.len()
            ),
        )
    })?;
    if let Some(sizes) = function.param_sizes() {
        if sizes.len() != params.len() {
            return Err(CudaError::invalid(
                "launch",
                format!(
                    "kernel `{}` takes {} parameters, {} given",
                    function.name(),
                    sizes.len(),
                    params.len()
                ),
            ));
        }
        for (i, (size, p)) in sizes.iter().zip(params).enumerate() {
            let given = p.size_bytes();
            if *size != given {
                return Err(CudaError::invalid(
                    "launch",
                    format!(
                        "kernel `{}` parameter {i} is {size} bytes, {p:?} is {given}",
                        function.name()
                    ),
                ));
            }
        }
    }
    let mut packed = PackedParams {
        slots: [0u64; MAX_KERNEL_PARAMS],
        maps: Vec::new(),
    };
    for (i, (slot, p)) in packed.slots.iter_mut().zip(params).enumerate() {
        match p {
            KernelParam::TensorMap(spec) => {
                packed
                    .maps
                    .push(tensor_map::encode(ctx, function.name(), i, spec)?);
            }
            _ => *slot = p.to_slot().unwrap_or_default(),
        }
    }
    Ok(packed)
}

impl GpuDriver for CudaDriver {
    type Error = CudaError;
    type DeviceBuffer = CudaBuffer;
    type ManagedBuffer = CudaBuffer;
    type Module = CudaModule;
    type Function = CudaFunction;
    type Stream = CudaStream;
    type Event = CudaEvent;
    type VirtualRange = CudaVirtualRange;

    fn kind(&self) -> DriverKind {
        DriverKind::Cuda
    }

    fn device(&self) -> &DeviceInfo {
        &self.ctx.info
    }

    fn mem_info(&self) -> Result<MemInfo, CudaError> {
        self.ctx.bind()?;
        let (free, total) = result::cuMemGetInfo_v2(&self.ctx.lib)?;
        Ok(MemInfo {
            free: free as u64,
            total: total as u64,
        })
    }

    fn synchronize(&self) -> Result<(), CudaError> {
        self.ctx.bind()?;
        result::cuCtxSynchronize(&self.ctx.lib)
    }

    fn alloc_device(&self, bytes: usize) -> Result<CudaBuffer, CudaError> {
        CudaBuffer::alloc(&self.ctx, bytes, MemoryKind::Device)
    }

    fn alloc_managed(&self, bytes: usize) -> Result<CudaBuffer, CudaError> {
        CudaBuffer::alloc(&self.ctx, bytes, MemoryKind::Managed)
    }

    fn copy_to_device(&self, dst: DeviceRange<'_>, src: &[u8]) -> Result<(), CudaError> {
        Self::same_len("copy_to_device", dst.len(), src.len())?;
        if src.is_empty() {
            return Ok(());
        }
        self.ctx.bind()?;
        // SAFETY: `dst` is a checked span of a live allocation of the same
        // length as `src`, which is valid for reads.
        unsafe {
            result::cuMemcpyHtoD_v2(&self.ctx.lib, dst.ptr().0, src.as_ptr().cast(), src.len())
        }
    }

    fn copy_from_device(&self, dst: &mut [u8], src: DeviceRange<'_>) -> Result<(), CudaError> {
        Self::same_len("copy_from_device", dst.len(), src.len())?;
        if dst.is_empty() {
            return Ok(());
        }
        self.ctx.bind()?;
        // SAFETY: `src` is a checked span of a live allocation of the same
        // length as `dst`, which is valid for writes.
        unsafe {
            result::cuMemcpyDtoH_v2(
                &self.ctx.lib,
                dst.as_mut_ptr().cast(),
                src.ptr().0,
                dst.len(),
            )
        }
    }

    fn copy_device(&self, dst: DeviceRange<'_>, src: DeviceRange<'_>) -> Result<(), CudaError> {
        Self::same_len("copy_device", dst.len(), src.len())?;
        if dst.is_empty() {
            return Ok(());
        }
        self.ctx.bind()?;
        // SAFETY: both are checked spans of live allocations, equal lengths.
        unsafe { result::cuMemcpyDtoD_v2(&self.ctx.lib, dst.ptr().0, src.ptr().0, dst.len()) }
    }

    fn memset(&self, dst: DeviceRange<'_>, value: u8) -> Result<(), CudaError> {
        if dst.is_empty() {
            return Ok(());
        }
        self.ctx.bind()?;
        // SAFETY: `dst` is a checked span of a live allocation.
        unsafe { result::cuMemsetD8_v2(&self.ctx.lib, dst.ptr().0, value, dst.len()) }
    }

    fn copy_device_async(
        &self,
        stream: &CudaStream,
        dst: DeviceRange<'_>,
        src: DeviceRange<'_>,
    ) -> Result<(), CudaError> {
        Self::same_len("copy_device_async", dst.len(), src.len())?;
        if dst.is_empty() {
            return Ok(());
        }
        self.ctx.bind()?;
        // SAFETY: checked spans of live allocations (freeing one waits for
        // the copy); `stream` is live.
        unsafe {
            result::cuMemcpyAsync(
                &self.ctx.lib,
                dst.ptr().0,
                src.ptr().0,
                dst.len(),
                stream.raw,
            )
        }
    }

    fn memset_async(
        &self,
        stream: &CudaStream,
        dst: DeviceRange<'_>,
        value: u8,
    ) -> Result<(), CudaError> {
        if dst.is_empty() {
            return Ok(());
        }
        self.ctx.bind()?;
        // SAFETY: as for copy_device_async.
        unsafe { result::cuMemsetD8Async(&self.ctx.lib, dst.ptr().0, value, dst.len(), stream.raw) }
    }

    fn load_ptx(&self, ptx: &str) -> Result<CudaModule, CudaError> {
        let text = CString::new(ptx)
            .map_err(|_| CudaError::invalid("load_ptx", "PTX text contains a NUL byte"))?;
        // Without a cache nothing needs the cubin: the driver's JIT compiles
        // the PTX as a whole program, where its linker compiles it as
        // relocatable code and may give slower kernels
        // (docs/cuda-driver.md, "The JIT cache").
        let Some(cache) = self.jit_cache.as_ref() else {
            return CudaModule::from_ptx(&self.ctx, &text);
        };
        match jit::cubin(&self.ctx, Some(cache), &text) {
            Ok(cubin) => CudaModule::from_cubin(&self.ctx, &cubin),
            // A driver without the linker's calls compiles as it loads.
            Err(CudaError::MissingSymbol { .. }) => CudaModule::from_ptx(&self.ctx, &text),
            Err(e) => Err(e),
        }
    }

    fn load_cubin(&self, image: &[u8]) -> Result<CudaModule, CudaError> {
        CudaModule::from_cubin(&self.ctx, image)
    }

    fn function(&self, module: &CudaModule, name: &str) -> Result<CudaFunction, CudaError> {
        module.function(name)
    }

    unsafe fn launch(
        &self,
        stream: &CudaStream,
        function: &CudaFunction,
        config: &LaunchConfig,
        params: &[KernelParam],
    ) -> Result<(), CudaError> {
        if !Arc::ptr_eq(function.ctx(), &self.ctx) || !Arc::ptr_eq(&stream.ctx, &self.ctx) {
            return Err(CudaError::invalid(
                "launch",
                "function or stream of another driver",
            ));
        }
        self.ctx.bind()?;
        let mut packed = check_launch(&self.ctx, function, config, params)?;
        let mut ptrs = packed.pointers(params)?;
        if config.shared_mem_bytes > 0 {
            function.allow_dynamic_shared(config.shared_mem_bytes)?;
        }
        let (g, b) = (config.grid, config.block);
        // SAFETY: geometry, dynamic shared memory and parameter count/sizes
        // were checked against the device and the kernel (and the kernel
        // allowed the shared memory); each parameter pointer points at an
        // 8-byte slot or an encoded 128-byte tensor map in `packed`, which
        // lives across the call (the driver copies them at launch). What
        // the kernel touches is the caller's contract.
        unsafe {
            result::cuLaunchKernel(
                &self.ctx.lib,
                function.raw(),
                (g.x as c_uint, g.y as c_uint, g.z as c_uint),
                (b.x as c_uint, b.y as c_uint, b.z as c_uint),
                config.shared_mem_bytes as c_uint,
                stream.raw,
                ptrs.as_mut_ptr(),
            )
        }
    }

    fn create_stream(&self) -> Result<CudaStream, CudaError> {
        CudaStream::new(&self.ctx)
    }

    fn stream_synchronize(&self, stream: &CudaStream) -> Result<(), CudaError> {
        self.ctx.bind()?;
        // SAFETY: the stream is live (borrowed).
        unsafe { result::cuStreamSynchronize(&self.ctx.lib, stream.raw) }
    }

    /// `cuStreamQuery`: `CUDA_ERROR_NOT_READY` is `Ok(false)`; any other
    /// failure, a sticky kernel fault included, is the error (kind
    /// `LaunchFailed` for the launch and kernel failures).
    fn stream_query(&self, stream: &CudaStream) -> Result<bool, CudaError> {
        self.ctx.bind()?;
        // SAFETY: the stream is live (borrowed).
        match unsafe { result::cuStreamQuery(&self.ctx.lib, stream.raw) } {
            Ok(()) => Ok(true),
            Err(e) if e.code() == Some(sys::CUresult::CUDA_ERROR_NOT_READY.0) => Ok(false),
            Err(e) => Err(e),
        }
    }

    fn stream_wait_event(&self, stream: &CudaStream, event: &CudaEvent) -> Result<(), CudaError> {
        self.ctx.bind()?;
        // SAFETY: both are live (borrowed) and of this context.
        unsafe { result::cuStreamWaitEvent(&self.ctx.lib, stream.raw, event.raw) }
    }

    fn create_event(&self) -> Result<CudaEvent, CudaError> {
        CudaEvent::new(&self.ctx)
    }

    fn record_event(&self, event: &CudaEvent, stream: &CudaStream) -> Result<(), CudaError> {
        self.ctx.bind()?;
        // SAFETY: both are live (borrowed) and of this context.
        unsafe { result::cuEventRecord(&self.ctx.lib, event.raw, stream.raw) }
    }

    fn event_query(&self, event: &CudaEvent) -> Result<bool, CudaError> {
        self.ctx.bind()?;
        // SAFETY: the event is live (borrowed).
        unsafe { result::cuEventQuery(&self.ctx.lib, event.raw) }
    }

    fn event_synchronize(&self, event: &CudaEvent) -> Result<(), CudaError> {
        self.ctx.bind()?;
        // SAFETY: the event is live (borrowed).
        unsafe { result::cuEventSynchronize(&self.ctx.lib, event.raw) }
    }

    fn event_elapsed_ms(&self, start: &CudaEvent, end: &CudaEvent) -> Result<f32, CudaError> {
        self.ctx.bind()?;
        // SAFETY: both events are live (borrowed).
        unsafe { result::cuEventElapsedTime(&self.ctx.lib, start.raw, end.raw) }
    }

    fn on_complete(&self, stream: &CudaStream, callback: HostCallback) -> Result<(), CudaError> {
        stream.on_complete(callback)
    }

    fn pointer_info(&self, address: tensorwasm_core::DevicePtr) -> Result<PointerInfo, CudaError> {
        memory::pointer_info(&self.ctx, address)
    }

    fn advise(&self, range: DeviceRange<'_>, advice: Advice) -> Result<(), CudaError> {
        self.advise_range(range, advice)
    }

    fn prefetch(
        &self,
        range: DeviceRange<'_>,
        target: PrefetchTarget,
        stream: &CudaStream,
    ) -> Result<PrefetchOutcome, CudaError> {
        self.prefetch_range(range, target, stream.raw)
    }

    fn vm_granularity(&self) -> Result<usize, CudaError> {
        vm::granularity(&self.ctx)
    }

    fn vm_reserve(&self, bytes: usize) -> Result<CudaVirtualRange, CudaError> {
        CudaVirtualRange::reserve(&self.ctx, bytes)
    }

    fn vm_map(
        &self,
        range: &mut CudaVirtualRange,
        offset: usize,
        bytes: usize,
    ) -> Result<(), CudaError> {
        range.map(offset, bytes)
    }

    fn vm_unmap(
        &self,
        range: &mut CudaVirtualRange,
        offset: usize,
        bytes: usize,
    ) -> Result<(), CudaError> {
        range.unmap(offset, bytes)
    }
}
