//! A driver that fails on purpose (test-only): [`Faulty`] wraps any driver
//! and makes the `n`-th fallible call (of one name, or of any) (of `GpuDriver`,
//! `ManagedAllocator` and `KernelTarget`: allocations, copies, loads,
//! launches, streams, events, callbacks, regions) fail with a chosen
//! `ErrorKind`, as if the driver had returned it; every other call goes to
//! the wrapped driver. `embed/tests/faults.rs` runs the runtime under it
//! for every `n` of a workload. Included with `#[path]`.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tensorwasm_core::{
    Advice, DeviceInfo, DevicePtr, DeviceRange, DriverError, DriverKind, ErrorKind, GpuDriver,
    KernelParam, LaunchConfig, ManagedAllocator, MemInfo, MemorySnapshot, PointerInfo,
    PrefetchOutcome, PrefetchTarget, driver::HostCallback, lower::translate::TranslatedKernel,
};
use tensorwasm_embed::kernel::{KernelError, KernelTarget};
use tensorwasm_kernels::ptx::PtxFile;

/// Never: the plan of a driver that fails no call.
const NEVER: u64 = u64::MAX;

/// Which call fails, and what happened.
struct Plan {
    /// The call (1-based, of those named `only` if set) that fails;
    /// [`NEVER`] for none.
    fail_at: AtomicU64,
    /// The name of the calls counted toward `fail_at`, if only one.
    only: Mutex<Option<&'static str>>,
    /// Calls counted toward `fail_at`.
    counted: AtomicU64,
    /// The error it fails with.
    kind: Mutex<ErrorKind>,
    /// The call that failed, once it has.
    failed: Mutex<Option<&'static str>>,
    /// Calls since the plan was armed, by name.
    made: Mutex<BTreeMap<&'static str, u64>>,
    /// Whether `on_complete` takes callbacks and never calls them (as CUDA
    /// does with `cuLaunchHostFunc` once the context has an error).
    swallow: AtomicBool,
    /// `stream_query` calls still to answer "not done" without asking.
    not_done: AtomicU64,
}

/// `D`, failing its `n`-th call when armed (module docs). Clones share the
/// plan.
#[derive(Clone)]
pub struct Faulty<D> {
    inner: D,
    plan: Arc<Plan>,
}

impl<D> Faulty<D> {
    /// `inner`, failing nothing until [`Faulty::arm`].
    pub fn new(inner: D) -> Self {
        Self {
            inner,
            plan: Arc::new(Plan {
                fail_at: AtomicU64::new(NEVER),
                only: Mutex::new(None),
                counted: AtomicU64::new(0),
                kind: Mutex::new(ErrorKind::Other),
                failed: Mutex::new(None),
                made: Mutex::new(BTreeMap::new()),
                swallow: AtomicBool::new(false),
                not_done: AtomicU64::new(0),
            }),
        }
    }

    /// The wrapped driver.
    pub fn inner(&self) -> &D {
        &self.inner
    }

    /// Counts calls from zero again and makes call `n` (1-based) fail with
    /// `kind`: the `n`-th call of any name, or, with `only`, the `n`-th
    /// call of that name (a driver's polling makes the count of all calls
    /// vary from run to run). `n = 0` fails none.
    pub fn arm(&self, only: Option<&'static str>, n: u64, kind: ErrorKind) {
        *self.plan.kind.lock().expect("plan") = kind;
        *self.plan.failed.lock().expect("plan") = None;
        *self.plan.only.lock().expect("plan") = only;
        self.plan.made.lock().expect("plan").clear();
        self.plan.counted.store(0, Ordering::SeqCst);
        self.plan
            .fail_at
            .store(if n == 0 { NEVER } else { n }, Ordering::SeqCst);
    }

    /// From now on, `on_complete` takes each callback and never calls it
    /// (`on`), or passes them on again.
    pub fn swallow_callbacks(&self, on: bool) {
        self.plan.swallow.store(on, Ordering::SeqCst);
    }

    /// The next `n` `stream_query` calls answer "not done" without asking
    /// the wrapped driver (a wait then suspends on its callback).
    pub fn not_done(&self, n: u64) {
        self.plan.not_done.store(n, Ordering::SeqCst);
    }

    /// The calls since the last [`Faulty::arm`], by name.
    pub fn made(&self) -> BTreeMap<&'static str, u64> {
        self.plan.made.lock().expect("plan").clone()
    }

    /// The call that failed since the last [`Faulty::arm`], if one did.
    pub fn failed(&self) -> Option<&'static str> {
        *self.plan.failed.lock().expect("plan")
    }

    /// Counts a call named `call`: the injected error if it is the one
    /// that fails.
    fn tick<E>(&self, call: &'static str) -> Result<(), FaultyError<E>> {
        *self
            .plan
            .made
            .lock()
            .expect("plan")
            .entry(call)
            .or_default() += 1;
        let only = *self.plan.only.lock().expect("plan");
        if only.is_some_and(|name| name != call) {
            return Ok(());
        }
        let n = self.plan.counted.fetch_add(1, Ordering::SeqCst) + 1;
        if n == self.plan.fail_at.load(Ordering::SeqCst) {
            *self.plan.failed.lock().expect("plan") = Some(call);
            let kind = *self.plan.kind.lock().expect("plan");
            return Err(FaultyError::Injected { kind, call });
        }
        Ok(())
    }
}

/// The wrapped driver's error, or the injected one.
#[derive(Debug)]
pub enum FaultyError<E> {
    /// The wrapped driver failed.
    Real(E),
    /// The plan made this call fail.
    Injected {
        /// The error it failed with.
        kind: ErrorKind,
        /// The call.
        call: &'static str,
    },
}

impl<E: fmt::Display> fmt::Display for FaultyError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FaultyError::Real(e) => e.fmt(f),
            FaultyError::Injected { kind, call } => write!(f, "{call}: injected failure ({kind})"),
        }
    }
}

impl<E: DriverError> DriverError for FaultyError<E> {
    fn kind(&self) -> ErrorKind {
        match self {
            FaultyError::Real(e) => e.kind(),
            FaultyError::Injected { kind, .. } => *kind,
        }
    }
}

/// Counts the call, then makes it on the wrapped driver.
macro_rules! forward {
    ($self:ident, $name:literal, $call:expr) => {{
        $self.tick($name)?;
        $call.map_err(FaultyError::Real)
    }};
}

impl<D: GpuDriver> GpuDriver for Faulty<D> {
    type Error = FaultyError<D::Error>;
    type DeviceBuffer = D::DeviceBuffer;
    type ManagedBuffer = D::ManagedBuffer;
    type Module = D::Module;
    type Function = D::Function;
    type Stream = D::Stream;
    type Event = D::Event;
    type VirtualRange = D::VirtualRange;

    fn kind(&self) -> DriverKind {
        self.inner.kind()
    }

    fn device(&self) -> &DeviceInfo {
        self.inner.device()
    }

    fn mem_info(&self) -> Result<MemInfo, Self::Error> {
        forward!(self, "mem_info", self.inner.mem_info())
    }

    fn synchronize(&self) -> Result<(), Self::Error> {
        forward!(self, "synchronize", self.inner.synchronize())
    }

    fn alloc_device(&self, bytes: usize) -> Result<Self::DeviceBuffer, Self::Error> {
        forward!(self, "alloc_device", self.inner.alloc_device(bytes))
    }

    fn alloc_managed(&self, bytes: usize) -> Result<Self::ManagedBuffer, Self::Error> {
        forward!(self, "alloc_managed", self.inner.alloc_managed(bytes))
    }

    fn copy_to_device(&self, dst: DeviceRange<'_>, src: &[u8]) -> Result<(), Self::Error> {
        forward!(self, "copy_to_device", self.inner.copy_to_device(dst, src))
    }

    fn copy_from_device(&self, dst: &mut [u8], src: DeviceRange<'_>) -> Result<(), Self::Error> {
        forward!(
            self,
            "copy_from_device",
            self.inner.copy_from_device(dst, src)
        )
    }

    fn copy_device(&self, dst: DeviceRange<'_>, src: DeviceRange<'_>) -> Result<(), Self::Error> {
        forward!(self, "copy_device", self.inner.copy_device(dst, src))
    }

    fn memset(&self, dst: DeviceRange<'_>, value: u8) -> Result<(), Self::Error> {
        forward!(self, "memset", self.inner.memset(dst, value))
    }

    fn copy_device_async(
        &self,
        stream: &Self::Stream,
        dst: DeviceRange<'_>,
        src: DeviceRange<'_>,
    ) -> Result<(), Self::Error> {
        forward!(
            self,
            "copy_device_async",
            self.inner.copy_device_async(stream, dst, src)
        )
    }

    fn memset_async(
        &self,
        stream: &Self::Stream,
        dst: DeviceRange<'_>,
        value: u8,
    ) -> Result<(), Self::Error> {
        forward!(
            self,
            "memset_async",
            self.inner.memset_async(stream, dst, value)
        )
    }

    fn load_ptx(&self, ptx: &str) -> Result<Self::Module, Self::Error> {
        forward!(self, "load_ptx", self.inner.load_ptx(ptx))
    }

    fn load_cubin(&self, image: &[u8]) -> Result<Self::Module, Self::Error> {
        forward!(self, "load_cubin", self.inner.load_cubin(image))
    }

    fn function(&self, module: &Self::Module, name: &str) -> Result<Self::Function, Self::Error> {
        forward!(self, "function", self.inner.function(module, name))
    }

    unsafe fn launch(
        &self,
        stream: &Self::Stream,
        function: &Self::Function,
        config: &LaunchConfig,
        params: &[KernelParam],
    ) -> Result<(), Self::Error> {
        // SAFETY: the caller upholds `GpuDriver::launch`'s contract for
        // this call, which goes unchanged to the wrapped driver.
        forward!(self, "launch", unsafe {
            self.inner.launch(stream, function, config, params)
        })
    }

    fn create_stream(&self) -> Result<Self::Stream, Self::Error> {
        forward!(self, "create_stream", self.inner.create_stream())
    }

    fn stream_synchronize(&self, stream: &Self::Stream) -> Result<(), Self::Error> {
        forward!(
            self,
            "stream_synchronize",
            self.inner.stream_synchronize(stream)
        )
    }

    fn stream_query(&self, stream: &Self::Stream) -> Result<bool, Self::Error> {
        self.tick("stream_query")?;
        let not_done = &self.plan.not_done;
        if not_done
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
        {
            return Ok(false);
        }
        self.inner.stream_query(stream).map_err(FaultyError::Real)
    }

    fn stream_wait_event(
        &self,
        stream: &Self::Stream,
        event: &Self::Event,
    ) -> Result<(), Self::Error> {
        forward!(
            self,
            "stream_wait_event",
            self.inner.stream_wait_event(stream, event)
        )
    }

    fn create_event(&self) -> Result<Self::Event, Self::Error> {
        forward!(self, "create_event", self.inner.create_event())
    }

    fn record_event(&self, event: &Self::Event, stream: &Self::Stream) -> Result<(), Self::Error> {
        forward!(self, "record_event", self.inner.record_event(event, stream))
    }

    fn event_query(&self, event: &Self::Event) -> Result<bool, Self::Error> {
        forward!(self, "event_query", self.inner.event_query(event))
    }

    fn event_synchronize(&self, event: &Self::Event) -> Result<(), Self::Error> {
        forward!(
            self,
            "event_synchronize",
            self.inner.event_synchronize(event)
        )
    }

    fn event_elapsed_ms(&self, start: &Self::Event, end: &Self::Event) -> Result<f32, Self::Error> {
        forward!(
            self,
            "event_elapsed_ms",
            self.inner.event_elapsed_ms(start, end)
        )
    }

    fn on_complete(
        &self,
        stream: &Self::Stream,
        callback: HostCallback,
    ) -> Result<(), Self::Error> {
        self.tick("on_complete")?;
        if self.plan.swallow.load(Ordering::SeqCst) {
            drop(callback);
            return Ok(());
        }
        self.inner
            .on_complete(stream, callback)
            .map_err(FaultyError::Real)
    }

    fn pointer_info(&self, address: DevicePtr) -> Result<PointerInfo, Self::Error> {
        forward!(self, "pointer_info", self.inner.pointer_info(address))
    }

    fn advise(&self, range: DeviceRange<'_>, advice: Advice) -> Result<(), Self::Error> {
        forward!(
            self,
            "advise",
            GpuDriver::advise(&self.inner, range, advice)
        )
    }

    fn prefetch(
        &self,
        range: DeviceRange<'_>,
        target: PrefetchTarget,
        stream: &Self::Stream,
    ) -> Result<PrefetchOutcome, Self::Error> {
        forward!(
            self,
            "prefetch",
            GpuDriver::prefetch(&self.inner, range, target, stream)
        )
    }

    fn vm_granularity(&self) -> Result<usize, Self::Error> {
        forward!(self, "vm_granularity", self.inner.vm_granularity())
    }

    fn vm_reserve(&self, bytes: usize) -> Result<Self::VirtualRange, Self::Error> {
        forward!(self, "vm_reserve", self.inner.vm_reserve(bytes))
    }

    fn vm_map(
        &self,
        range: &mut Self::VirtualRange,
        offset: usize,
        bytes: usize,
    ) -> Result<(), Self::Error> {
        forward!(self, "vm_map", self.inner.vm_map(range, offset, bytes))
    }

    fn vm_unmap(
        &self,
        range: &mut Self::VirtualRange,
        offset: usize,
        bytes: usize,
    ) -> Result<(), Self::Error> {
        forward!(self, "vm_unmap", self.inner.vm_unmap(range, offset, bytes))
    }
}

impl<D: ManagedAllocator> ManagedAllocator for Faulty<D> {
    type Error = FaultyError<<D as ManagedAllocator>::Error>;
    type Region = D::Region;

    fn reserve(&self, maximum: usize, initial: usize) -> Result<Self::Region, Self::Error> {
        forward!(self, "reserve", self.inner.reserve(maximum, initial))
    }

    fn grow(&self, region: &mut Self::Region, new_len: usize) -> Result<(), Self::Error> {
        forward!(self, "grow", self.inner.grow(region, new_len))
    }

    fn advise(
        &self,
        region: &Self::Region,
        offset: usize,
        len: usize,
        advice: Advice,
    ) -> Result<(), Self::Error> {
        forward!(
            self,
            "region_advise",
            ManagedAllocator::advise(&self.inner, region, offset, len, advice)
        )
    }

    fn prefetch(
        &self,
        region: &Self::Region,
        offset: usize,
        len: usize,
        target: PrefetchTarget,
    ) -> Result<PrefetchOutcome, Self::Error> {
        forward!(
            self,
            "region_prefetch",
            ManagedAllocator::prefetch(&self.inner, region, offset, len, target)
        )
    }

    fn snapshot(&self, region: &Self::Region) -> Result<MemorySnapshot, Self::Error> {
        forward!(self, "snapshot", self.inner.snapshot(region))
    }

    fn restore(
        &self,
        region: &mut Self::Region,
        snapshot: &MemorySnapshot,
    ) -> Result<(), Self::Error> {
        forward!(self, "restore", self.inner.restore(region, snapshot))
    }
}

impl<D: KernelTarget> KernelTarget for Faulty<D> {
    fn load_kernel(&self, kernel: &TranslatedKernel) -> Result<Self::Module, KernelError> {
        self.tick::<()>("load_kernel").map_err(injected)?;
        self.inner.load_kernel(kernel)
    }

    fn load_builtins(&self, file: PtxFile) -> Result<Self::Module, KernelError> {
        self.tick::<()>("load_builtins").map_err(injected)?;
        self.inner.load_builtins(file)
    }
}

/// An injected failure as a kernel load's error.
fn injected(e: FaultyError<()>) -> KernelError {
    match e {
        FaultyError::Injected { kind, call } => KernelError::Driver {
            kind,
            message: format!("{call}: injected failure ({kind})"),
        },
        FaultyError::Real(()) => KernelError::Driver {
            kind: ErrorKind::Other,
            message: String::from("no error"),
        },
    }
}
