//! [`CpuDriver`] and its [`GpuDriver`] implementation. Each method checks
//! its arguments, applies the ordering rules (synchronous operations and
//! frees wait for every stream), and hands the work to the module that owns
//! it: memory, streams, events, kernels or virtual memory.

use std::{fmt, ptr};

use tensorwasm_core::{
    Advice, DeviceInfo, DevicePtr, DeviceRange, DriverKind, ErrorKind, GpuDriver, KernelParam,
    LaunchConfig, MemInfo, PointerInfo, PrefetchOutcome, PrefetchTarget, driver::HostCallback,
};

use crate::{
    device::{self, CpuDevice},
    error::CpuError,
    event::CpuEvent,
    kernel::{CpuFunction, CpuModule, GridLaunch, HostKernelFn},
    memory::{CpuDeviceBuffer, CpuManagedBuffer, host_ptr},
    stream::{CpuStream, StreamWork},
    sync::{Arc, Weak, lock},
    vm::CpuVirtualRange,
};

/// The CPU driver: host memory and worker threads standing in for a GPU.
///
/// Cheap to clone and to share between threads: clones drive the same
/// device (same memory ledger, allocations and streams).
#[derive(Clone)]
pub struct CpuDriver {
    pub(crate) device: Arc<CpuDevice>,
}

impl CpuDriver {
    /// A driver whose capacity is the host's `MemAvailable` (8 GiB when
    /// `/proc/meminfo` cannot be read), with one launch worker per available
    /// hardware thread.
    pub fn new() -> Result<CpuDriver, CpuError> {
        let capacity = device::available_memory().unwrap_or(device::FALLBACK_CAPACITY);
        CpuDriver::build("new", capacity)
    }

    /// A driver that lets at most `bytes` be allocated at once (device,
    /// managed, mapped and region-reserved bytes together).
    pub fn with_capacity(bytes: u64) -> Result<CpuDriver, CpuError> {
        CpuDriver::build("with_capacity", bytes)
    }

    fn build(op: &'static str, capacity: u64) -> Result<CpuDriver, CpuError> {
        Ok(CpuDriver {
            device: Arc::new(CpuDevice::new(op, capacity)?),
        })
    }

    /// A module of host kernels, found by name with
    /// [`GpuDriver::function`]. A later kernel of the same name replaces an
    /// earlier one.
    pub fn host_module<'a>(
        &self,
        kernels: impl IntoIterator<Item = (&'a str, Arc<HostKernelFn>)>,
    ) -> CpuModule {
        CpuModule::new(kernels)
    }

    /// Whether `address .. address + len` lies in live memory of this driver
    /// that copies may touch: device and managed buffers, the exposed part
    /// of managed regions, mapped virtual memory. Host kernels whose sizes
    /// come from untrusted parameters check their ranges with it first.
    pub fn covers(&self, address: DevicePtr, len: usize) -> bool {
        self.device.table.covers(address.0, len)
    }

    /// A handle that does not keep the driver alive, for host kernels that
    /// the driver itself holds (a strong clone there would never be freed).
    pub fn downgrade(&self) -> WeakCpuDriver {
        WeakCpuDriver(Arc::downgrade(&self.device))
    }

    /// Registers host kernels that stand in for one PTX text: a later
    /// [`GpuDriver::load_ptx`] of exactly these bytes returns a module of
    /// `kernels` (the CPU driver cannot run PTX itself). The match is on the
    /// whole text, so a guest that ships other PTX still gets `NotSupported`;
    /// the twin must compute what the PTX computes, which the embedder
    /// vouches for (TensorWasm's tests compare the two on the GPU). A later
    /// registration of the same text replaces an earlier one.
    pub fn register_ptx_twin<'a>(
        &self,
        ptx: &str,
        kernels: impl IntoIterator<Item = (&'a str, Arc<HostKernelFn>)>,
    ) {
        lock(&self.device.ptx_twins).insert(ptx.to_owned(), CpuModule::new(kernels));
    }

    /// With `true`, a kernel that fails (panics) loses the whole device, as
    /// a faulting kernel loses the CUDA context: every later call on any
    /// stream fails with `ErrorKind::DeviceLost` (frees and unmaps still
    /// work). The default, `false`, fails only the kernel's stream.
    pub fn set_faults_lose_device(&self, lose: bool) {
        self.device
            .faults_lose_device
            .store(lose, std::sync::atomic::Ordering::Relaxed);
    }

    /// Streams of another driver are refused: this driver's frees and
    /// synchronous copies only wait for its own streams.
    fn own_stream(&self, op: &'static str, stream: &CpuStream) -> Result<(), CpuError> {
        if Arc::ptr_eq(stream.owner(), &self.device) {
            Ok(())
        } else {
            Err(CpuError::invalid(
                op,
                format!("stream {} was created by another CpuDriver", stream.id()),
            ))
        }
    }

    fn enqueue(
        &self,
        op: &'static str,
        stream: &CpuStream,
        work: StreamWork,
    ) -> Result<(), CpuError> {
        stream
            .enqueue(work)
            .map_err(|message| CpuError::new(op, ErrorKind::Other, message))
    }
}

/// A [`CpuDriver`] that does not keep it alive; see [`CpuDriver::downgrade`].
#[derive(Clone)]
pub struct WeakCpuDriver(Weak<CpuDevice>);

impl WeakCpuDriver {
    /// The driver, if it is still alive.
    pub fn upgrade(&self) -> Option<CpuDriver> {
        self.0.upgrade().map(|device| CpuDriver { device })
    }
}

impl fmt::Debug for CpuDriver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "CpuDriver({}, {} of {} bytes free)",
            self.device.info.name,
            self.device.ledger.free(),
            self.device.ledger.capacity()
        )
    }
}

fn check_lengths(op: &'static str, dst: usize, src: usize) -> Result<(), CpuError> {
    if dst == src {
        Ok(())
    } else {
        Err(CpuError::invalid(
            op,
            format!("the destination has {dst} bytes but the source has {src}"),
        ))
    }
}

/// Copies `len` bytes between checked ranges.
///
/// # Safety
/// Both ranges must lie in live allocations of the driver (or a host slice
/// for one of them) and stay alive for the call.
unsafe fn copy_bytes(from: *const u8, to: *mut u8, len: usize) {
    // SAFETY: the caller guarantees both spans are valid; ptr::copy tolerates
    // overlap, which CUDA leaves undefined.
    unsafe { ptr::copy(from, to, len) }
}

impl GpuDriver for CpuDriver {
    type Error = CpuError;
    type DeviceBuffer = CpuDeviceBuffer;
    type ManagedBuffer = CpuManagedBuffer;
    type Module = CpuModule;
    type Function = CpuFunction;
    type Stream = CpuStream;
    type Event = CpuEvent;
    type VirtualRange = CpuVirtualRange;

    fn kind(&self) -> DriverKind {
        DriverKind::Cpu
    }

    fn device(&self) -> &DeviceInfo {
        &self.device.info
    }

    fn mem_info(&self) -> Result<MemInfo, CpuError> {
        self.device.alive("mem_info")?;
        Ok(MemInfo {
            free: self.device.ledger.free(),
            total: self.device.ledger.capacity(),
        })
    }

    /// Waits for every stream; fails with `LaunchFailed` while a stream that
    /// saw a kernel or callback panic is alive.
    fn synchronize(&self) -> Result<(), CpuError> {
        self.device.alive("synchronize")?;
        match self.device.streams.synchronize() {
            None => Ok(()),
            Some(failure) => {
                self.device.alive("synchronize")?;
                Err(CpuError::new(
                    "synchronize",
                    ErrorKind::LaunchFailed,
                    failure,
                ))
            }
        }
    }

    fn alloc_device(&self, bytes: usize) -> Result<CpuDeviceBuffer, CpuError> {
        self.device.alive("alloc_device")?;
        CpuDeviceBuffer::new(&self.device, bytes)
    }

    fn alloc_managed(&self, bytes: usize) -> Result<CpuManagedBuffer, CpuError> {
        self.device.alive("alloc_managed")?;
        CpuManagedBuffer::new(&self.device, bytes)
    }

    fn copy_to_device(&self, dst: DeviceRange<'_>, src: &[u8]) -> Result<(), CpuError> {
        self.device.alive("copy_to_device")?;
        const OP: &str = "copy_to_device";
        check_lengths(OP, dst.len(), src.len())?;
        self.device.check_range(OP, "destination", &dst)?;
        if src.is_empty() {
            return Ok(());
        }
        self.device.streams.drain();
        // SAFETY: dst lies in a live allocation of this driver (checked) that
        // the range borrows; src is a slice of the same length.
        unsafe { copy_bytes(src.as_ptr(), host_ptr(dst.ptr()), src.len()) };
        Ok(())
    }

    fn copy_from_device(&self, dst: &mut [u8], src: DeviceRange<'_>) -> Result<(), CpuError> {
        self.device.alive("copy_from_device")?;
        const OP: &str = "copy_from_device";
        check_lengths(OP, dst.len(), src.len())?;
        self.device.check_range(OP, "source", &src)?;
        if dst.is_empty() {
            return Ok(());
        }
        self.device.streams.drain();
        // SAFETY: src lies in a live allocation of this driver (checked) that
        // the range borrows; dst is a slice of the same length.
        unsafe { copy_bytes(host_ptr(src.ptr()), dst.as_mut_ptr(), dst.len()) };
        Ok(())
    }

    fn copy_device(&self, dst: DeviceRange<'_>, src: DeviceRange<'_>) -> Result<(), CpuError> {
        self.device.alive("copy_device")?;
        const OP: &str = "copy_device";
        check_lengths(OP, dst.len(), src.len())?;
        self.device.check_range(OP, "destination", &dst)?;
        self.device.check_range(OP, "source", &src)?;
        if dst.is_empty() {
            return Ok(());
        }
        self.device.streams.drain();
        // SAFETY: both ranges lie in live allocations of this driver (checked)
        // that they borrow.
        unsafe { copy_bytes(host_ptr(src.ptr()), host_ptr(dst.ptr()), dst.len()) };
        Ok(())
    }

    fn memset(&self, dst: DeviceRange<'_>, value: u8) -> Result<(), CpuError> {
        self.device.alive("memset")?;
        const OP: &str = "memset";
        self.device.check_range(OP, "destination", &dst)?;
        if dst.is_empty() {
            return Ok(());
        }
        self.device.streams.drain();
        // SAFETY: dst lies in a live allocation of this driver (checked) that
        // the range borrows.
        unsafe { ptr::write_bytes(host_ptr(dst.ptr()), value, dst.len()) };
        Ok(())
    }

    fn copy_device_async(
        &self,
        stream: &CpuStream,
        dst: DeviceRange<'_>,
        src: DeviceRange<'_>,
    ) -> Result<(), CpuError> {
        self.device.alive("copy_device_async")?;
        const OP: &str = "copy_device_async";
        self.own_stream(OP, stream)?;
        check_lengths(OP, dst.len(), src.len())?;
        self.device.check_range(OP, "destination", &dst)?;
        self.device.check_range(OP, "source", &src)?;
        let (to, from, len) = (dst.ptr(), src.ptr(), dst.len());
        self.enqueue(
            OP,
            stream,
            Box::new(move || {
                if len > 0 {
                    // SAFETY: both ranges were checked to lie in live
                    // allocations of this driver when queued, and freeing any
                    // of them first drains every stream of the driver, this
                    // one included, so they are still alive now.
                    unsafe { copy_bytes(host_ptr(from), host_ptr(to), len) };
                }
                Ok(())
            }),
        )
    }

    fn memset_async(
        &self,
        stream: &CpuStream,
        dst: DeviceRange<'_>,
        value: u8,
    ) -> Result<(), CpuError> {
        self.device.alive("memset_async")?;
        const OP: &str = "memset_async";
        self.own_stream(OP, stream)?;
        self.device.check_range(OP, "destination", &dst)?;
        let (to, len) = (dst.ptr(), dst.len());
        self.enqueue(
            OP,
            stream,
            Box::new(move || {
                if len > 0 {
                    // SAFETY: as for copy_device_async: checked when queued,
                    // and kept alive because frees drain this stream first.
                    unsafe { ptr::write_bytes(host_ptr(to), value, len) };
                }
                Ok(())
            }),
        )
    }

    fn load_ptx(&self, ptx: &str) -> Result<CpuModule, CpuError> {
        self.device.alive("load_ptx")?;
        lock(&self.device.ptx_twins)
            .get(ptx)
            .cloned()
            .ok_or_else(|| {
                CpuError::new(
                    "load_ptx",
                    ErrorKind::NotSupported,
                    "running PTX needs the CUDA driver (this is the CPU driver, and no host \
                     twin is registered for this PTX text)",
                )
            })
    }

    fn load_cubin(&self, _image: &[u8]) -> Result<CpuModule, CpuError> {
        self.device.alive("load_cubin")?;
        Err(CpuError::new(
            "load_cubin",
            ErrorKind::NotSupported,
            "loading a cubin needs the CUDA driver (this is the CPU driver)",
        ))
    }

    fn function(&self, module: &CpuModule, name: &str) -> Result<CpuFunction, CpuError> {
        self.device.alive("function")?;
        module.function(name).ok_or_else(|| {
            let known: Vec<&str> = module.names().collect();
            CpuError::new(
                "function",
                ErrorKind::NotFound,
                format!(
                    "no kernel named `{name}` in this module (it has: {})",
                    known.join(", ")
                ),
            )
        })
    }

    /// Queues the grid on `stream`; its blocks run on up to
    /// `multiprocessor_count` threads. A kernel panic stops the grid and makes
    /// the stream fail with `LaunchFailed` (see [`CpuStream`]).
    unsafe fn launch(
        &self,
        stream: &CpuStream,
        function: &CpuFunction,
        config: &LaunchConfig,
        params: &[KernelParam],
    ) -> Result<(), CpuError> {
        self.device.alive("launch")?;
        const OP: &str = "launch";
        self.own_stream(OP, stream)?;
        config
            .validate_launch(&self.device.info, params)
            .map_err(|why| {
                CpuError::invalid(
                    OP,
                    format!("{why}: {config:?}, {} parameters", params.len()),
                )
            })?;
        // Host kernels read parameters as values; there is no TMA to encode for.
        if let Some(i) = params
            .iter()
            .position(|p| matches!(p, KernelParam::TensorMap(_)))
        {
            return Err(CpuError::new(
                OP,
                ErrorKind::NotSupported,
                format!(
                    "kernel `{}` parameter {i} is a tensor map: the CPU driver has no TMA",
                    function.name()
                ),
            ));
        }
        let grid = GridLaunch::new(function, config, params);
        let workers = self.device.workers;
        let device = Arc::downgrade(&self.device);
        let work = move || {
            let ran = grid.run(workers);
            if let (Err(failure), Some(device)) = (&ran, device.upgrade()) {
                device.kernel_failed(failure);
            }
            ran
        };
        self.enqueue(OP, stream, Box::new(work))
    }

    fn create_stream(&self) -> Result<CpuStream, CpuError> {
        self.device.alive("create_stream")?;
        CpuStream::spawn(&self.device)
            .map_err(|e| CpuError::os("create_stream", "spawning the stream's thread", e))
    }

    /// Waits for the stream's queued work; fails with `LaunchFailed`, every
    /// time, once a kernel or callback on it has panicked (`DeviceLost` when
    /// [faults lose the device](CpuDriver::set_faults_lose_device)).
    fn stream_synchronize(&self, stream: &CpuStream) -> Result<(), CpuError> {
        self.device.alive("stream_synchronize")?;
        const OP: &str = "stream_synchronize";
        self.own_stream(OP, stream)?;
        match stream.core().wait_idle() {
            None => Ok(()),
            Some(failure) => {
                // The failure may have lost the device while this waited.
                self.device.alive(OP)?;
                Err(CpuError::new(OP, ErrorKind::LaunchFailed, failure))
            }
        }
    }

    /// Reads the stream's counters without waiting; fails with
    /// `LaunchFailed`, every time, once a kernel or callback on it has
    /// panicked (even while later work on it still runs).
    fn stream_query(&self, stream: &CpuStream) -> Result<bool, CpuError> {
        self.device.alive("stream_query")?;
        const OP: &str = "stream_query";
        self.own_stream(OP, stream)?;
        stream.core().query().map_err(|failure| {
            self.device
                .alive(OP)
                .err()
                .unwrap_or_else(|| CpuError::new(OP, ErrorKind::LaunchFailed, failure))
        })
    }

    fn stream_wait_event(&self, stream: &CpuStream, event: &CpuEvent) -> Result<(), CpuError> {
        self.device.alive("stream_wait_event")?;
        const OP: &str = "stream_wait_event";
        self.own_stream(OP, stream)?;
        let generation = event.latest();
        if event.is_complete() {
            return Ok(());
        }
        let marks = Arc::clone(event.marks());
        self.enqueue(
            OP,
            stream,
            Box::new(move || {
                marks.wait_for(generation);
                Ok(())
            }),
        )
    }

    fn create_event(&self) -> Result<CpuEvent, CpuError> {
        self.device.alive("create_event")?;
        Ok(CpuEvent::new())
    }

    fn record_event(&self, event: &CpuEvent, stream: &CpuStream) -> Result<(), CpuError> {
        self.device.alive("record_event")?;
        const OP: &str = "record_event";
        self.own_stream(OP, stream)?;
        let generation = event.begin_record();
        let marks = Arc::clone(event.marks());
        let queued = self.enqueue(
            OP,
            stream,
            Box::new(move || {
                marks.complete(generation);
                Ok(())
            }),
        );
        if queued.is_err() {
            // Nothing will complete this record: do it now so waiters return.
            event.marks().complete(generation);
        }
        queued
    }

    fn event_query(&self, event: &CpuEvent) -> Result<bool, CpuError> {
        self.device.alive("event_query")?;
        Ok(event.is_complete())
    }

    fn event_synchronize(&self, event: &CpuEvent) -> Result<(), CpuError> {
        self.device.alive("event_synchronize")?;
        event.wait();
        Ok(())
    }

    fn event_elapsed_ms(&self, start: &CpuEvent, end: &CpuEvent) -> Result<f32, CpuError> {
        self.device.alive("event_elapsed_ms")?;
        let (Some(from), Some(to)) = (start.completed_at(), end.completed_at()) else {
            return Err(CpuError::invalid(
                "event_elapsed_ms",
                "both events must have been recorded and their latest records completed",
            ));
        };
        let ms = match to.checked_duration_since(from) {
            Some(forward) => forward.as_secs_f64() * 1e3,
            None => -(from.duration_since(to).as_secs_f64() * 1e3),
        };
        Ok(ms as f32)
    }

    /// Queues `callback` on the stream's worker thread. A panicking callback
    /// makes the stream fail like a panicking kernel.
    fn on_complete(&self, stream: &CpuStream, callback: HostCallback) -> Result<(), CpuError> {
        self.device.alive("on_complete")?;
        const OP: &str = "on_complete";
        self.own_stream(OP, stream)?;
        self.enqueue(
            OP,
            stream,
            Box::new(move || {
                callback();
                Ok(())
            }),
        )
    }

    fn pointer_info(&self, address: DevicePtr) -> Result<PointerInfo, CpuError> {
        self.device.alive("pointer_info")?;
        Ok(PointerInfo {
            address,
            kind: self.device.table.kind_at(address.0),
        })
    }

    /// Accepted, and ignored, for any range inside live allocations.
    fn advise(&self, range: DeviceRange<'_>, _advice: Advice) -> Result<(), CpuError> {
        self.device.alive("advise")?;
        self.device.check_range("advise", "range", &range)
    }

    /// Always skipped: the memory is host memory already.
    fn prefetch(
        &self,
        range: DeviceRange<'_>,
        _target: PrefetchTarget,
        stream: &CpuStream,
    ) -> Result<PrefetchOutcome, CpuError> {
        self.device.alive("prefetch")?;
        const OP: &str = "prefetch";
        self.own_stream(OP, stream)?;
        self.device.check_range(OP, "range", &range)?;
        Ok(PrefetchOutcome::SkippedHostMemory)
    }

    /// The page size rounded up to 64 KiB.
    fn vm_granularity(&self) -> Result<usize, CpuError> {
        Ok(self.device.vm_granularity)
    }

    fn vm_reserve(&self, bytes: usize) -> Result<CpuVirtualRange, CpuError> {
        self.device.alive("vm_reserve")?;
        CpuVirtualRange::reserve(&self.device, bytes)
    }

    fn vm_map(
        &self,
        range: &mut CpuVirtualRange,
        offset: usize,
        bytes: usize,
    ) -> Result<(), CpuError> {
        self.device.alive("vm_map")?;
        range.map(&self.device, offset, bytes)
    }

    fn vm_unmap(
        &self,
        range: &mut CpuVirtualRange,
        offset: usize,
        bytes: usize,
    ) -> Result<(), CpuError> {
        range.unmap(&self.device, offset, bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_device_describes_the_host() {
        let d = CpuDriver::new().unwrap();
        let info = d.device();
        assert_eq!(d.kind(), DriverKind::Cpu);
        assert_eq!(info.ordinal, 0);
        assert_eq!(
            info.name,
            format!("CPU ({} threads)", info.multiprocessor_count)
        );
        assert!(info.multiprocessor_count >= 1);
        assert_eq!(info.compute_capability, None);
        assert_eq!(info.driver_version, None);
        assert_eq!(info.max_grid_dim, (i32::MAX as u32, 65535, 65535));
        assert!(info.vmm_supported && info.concurrent_managed_access);
        let mem = d.mem_info().unwrap();
        assert_eq!(mem.total, info.total_memory);
        assert!(mem.total > 0 && mem.free == mem.total);

        fn shared<T: Send + Sync + Clone>(_: &T) {}
        shared(&d);
    }
}
