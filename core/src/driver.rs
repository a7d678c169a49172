//! [`GpuDriver`]: everything TensorWasm asks of a device, in one trait that
//! the CUDA and CPU drivers implement. Resources are associated types that
//! free themselves on drop; this module holds no behaviour of its own.

use alloc::boxed::Box;

use crate::{
    device::{DeviceInfo, DriverKind, MemInfo, PointerInfo},
    error::DriverError,
    launch::{KernelParam, LaunchConfig},
    memory::{Advice, DevicePtr, DeviceRange, PrefetchOutcome, PrefetchTarget},
};

/// An allocation a kernel can address: device or managed memory.
pub trait DeviceMemory: Send + Sync {
    /// The allocation's first address.
    fn device_ptr(&self) -> DevicePtr;

    /// Its length in bytes.
    fn len(&self) -> usize;

    /// The allocation holds no bytes.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The whole allocation as a range.
    fn full(&self) -> DeviceRange<'_> {
        // SAFETY: the range is exactly this live allocation and borrows it.
        unsafe { DeviceRange::from_raw(self.device_ptr(), self.len()) }
    }

    /// The checked sub-range `offset .. offset + len`, or `None` if it leaves
    /// the allocation.
    fn range(&self, offset: usize, len: usize) -> Option<DeviceRange<'_>> {
        self.full().sub(offset, len)
    }
}

/// A reserved span of device virtual addresses, parts of which are backed by
/// physical memory (`vm_map`). Dropping it unmaps and frees everything.
pub trait VirtualMemory: Send + Sync {
    /// The first reserved address.
    fn base(&self) -> DevicePtr;

    /// Reserved bytes.
    fn reserved(&self) -> usize;

    /// `offset .. offset + len` as a range, if every byte of it is mapped.
    fn mapped(&self, offset: usize, len: usize) -> Option<DeviceRange<'_>>;
}

/// A completion callback: runs once, on a driver thread, after all earlier
/// work on its stream. It must not call back into the driver, and so must
/// not hold the last reference to a driver resource (dropping one calls the
/// driver); completing a future and waking its waker is what it is for.
/// Nor may it wait for another thread's driver call: while it runs, CUDA
/// can hold such calls up (a launch made while a callback blocked was seen
/// to hang), so the wait may never end.
pub type HostCallback = Box<dyn FnOnce() + Send + 'static>;

/// What a device offers: memory, copies, modules, launches, streams, events,
/// completion callbacks, pointer queries, managed-memory hints and virtual
/// memory. One value of the implementing type drives one device.
///
/// Synchronous copies and `memset` are ordered after all work already queued
/// on every stream of the driver (as CUDA's legacy default stream is).
/// Freeing an allocation waits for work that may still use it.
pub trait GpuDriver: Send + Sync {
    /// The driver's error: its code, name and failing call.
    type Error: DriverError;
    /// Device memory, freed on drop.
    type DeviceBuffer: DeviceMemory;
    /// Managed memory (host and device addressable), freed on drop.
    type ManagedBuffer: DeviceMemory;
    /// A loaded module, unloaded on drop.
    type Module: Send + Sync;
    /// A kernel function of a module; keeps its module loaded.
    type Function: Send + Sync + Clone;
    /// An in-order queue of work.
    type Stream: Send + Sync;
    /// A marker recorded on a stream.
    type Event: Send + Sync;
    /// A reserved virtual address range.
    type VirtualRange: VirtualMemory;

    /// Which driver this is.
    fn kind(&self) -> DriverKind;

    /// The device this driver value drives.
    fn device(&self) -> &DeviceInfo;

    /// Free and total memory of the device now.
    fn mem_info(&self) -> Result<MemInfo, Self::Error>;

    /// Waits for all work on all streams.
    fn synchronize(&self) -> Result<(), Self::Error>;

    /// Allocates `bytes` of device memory (contents undefined).
    fn alloc_device(&self, bytes: usize) -> Result<Self::DeviceBuffer, Self::Error>;

    /// Allocates `bytes` of managed memory, visible to host and device at the
    /// same address (contents undefined).
    fn alloc_managed(&self, bytes: usize) -> Result<Self::ManagedBuffer, Self::Error>;

    /// Copies host bytes to device memory; lengths must match.
    fn copy_to_device(&self, dst: DeviceRange<'_>, src: &[u8]) -> Result<(), Self::Error>;

    /// Copies device memory to host bytes; lengths must match.
    fn copy_from_device(&self, dst: &mut [u8], src: DeviceRange<'_>) -> Result<(), Self::Error>;

    /// Copies between two device-visible ranges; lengths must match.
    fn copy_device(&self, dst: DeviceRange<'_>, src: DeviceRange<'_>) -> Result<(), Self::Error>;

    /// Sets every byte of a range.
    fn memset(&self, dst: DeviceRange<'_>, value: u8) -> Result<(), Self::Error>;

    /// Queues a copy between two device-visible ranges on `stream`.
    fn copy_device_async(
        &self,
        stream: &Self::Stream,
        dst: DeviceRange<'_>,
        src: DeviceRange<'_>,
    ) -> Result<(), Self::Error>;

    /// Queues a memset on `stream`.
    fn memset_async(
        &self,
        stream: &Self::Stream,
        dst: DeviceRange<'_>,
        value: u8,
    ) -> Result<(), Self::Error>;

    /// Loads a module from PTX text; a rejected image's error carries the
    /// JIT's log.
    fn load_ptx(&self, ptx: &str) -> Result<Self::Module, Self::Error>;

    /// Loads a module from a cubin (or fatbin) image.
    fn load_cubin(&self, image: &[u8]) -> Result<Self::Module, Self::Error>;

    /// Looks up a kernel of a module by name.
    fn function(&self, module: &Self::Module, name: &str) -> Result<Self::Function, Self::Error>;

    /// Queues a kernel launch on `stream`. The configuration is checked
    /// against the device's limits and the parameters' count before the
    /// driver sees them.
    ///
    /// # Safety
    /// The kernel runs unchecked code: every address it touches must be
    /// memory the caller may write, alive until the launch completes (for a
    /// tensor map, the `extent_bytes` from its base), and `params` must
    /// match the kernel's signature.
    unsafe fn launch(
        &self,
        stream: &Self::Stream,
        function: &Self::Function,
        config: &LaunchConfig,
        params: &[KernelParam],
    ) -> Result<(), Self::Error>;

    /// Creates a stream.
    fn create_stream(&self) -> Result<Self::Stream, Self::Error>;

    /// Waits for all work queued on `stream`.
    fn stream_synchronize(&self, stream: &Self::Stream) -> Result<(), Self::Error>;

    /// Whether all work queued on `stream` so far has finished, without
    /// blocking: `Ok(true)` when it has, `Ok(false)` while some is still
    /// queued or running, and `Err` (kind `LaunchFailed` for a failed
    /// kernel) once work on the stream has failed.
    ///
    /// Never waits, so an async `wait` can call it from `poll` after its
    /// completion callback fired, to learn whether the work failed. The
    /// callback itself counts as work on the stream until it returns, so a
    /// query made right after it fired may still see `Ok(false)`; that
    /// means no failure has been reported so far. Failures are sticky, as
    /// for `stream_synchronize` (on CUDA a kernel fault poisons the whole
    /// context, so every stream reports it).
    fn stream_query(&self, stream: &Self::Stream) -> Result<bool, Self::Error>;

    /// Makes later work on `stream` wait for `event`'s latest record.
    fn stream_wait_event(
        &self,
        stream: &Self::Stream,
        event: &Self::Event,
    ) -> Result<(), Self::Error>;

    /// Creates an event (with timing).
    fn create_event(&self) -> Result<Self::Event, Self::Error>;

    /// Records `event` on `stream`: it completes when the work queued before
    /// it does.
    fn record_event(&self, event: &Self::Event, stream: &Self::Stream) -> Result<(), Self::Error>;

    /// `true` once the event's latest record has completed (or it was never
    /// recorded).
    fn event_query(&self, event: &Self::Event) -> Result<bool, Self::Error>;

    /// Waits for the event's latest record.
    fn event_synchronize(&self, event: &Self::Event) -> Result<(), Self::Error>;

    /// Milliseconds between two completed events.
    fn event_elapsed_ms(&self, start: &Self::Event, end: &Self::Event) -> Result<f32, Self::Error>;

    /// Queues `callback` on `stream`; it runs at most once, after the work
    /// before it, on a driver thread, and must not call into the driver.
    /// It runs unless that work fails in a way that loses the device (CUDA
    /// calls none once its context has an error): a waiter must not rely
    /// on it alone (`stream_query` tells the failure).
    fn on_complete(&self, stream: &Self::Stream, callback: HostCallback)
    -> Result<(), Self::Error>;

    /// What the driver knows about `address`.
    fn pointer_info(&self, address: DevicePtr) -> Result<PointerInfo, Self::Error>;

    /// Gives the driver a hint about a managed range.
    fn advise(&self, range: DeviceRange<'_>, advice: Advice) -> Result<(), Self::Error>;

    /// Queues migration of a managed range; an advisory no-op (reported in
    /// the outcome) where the device cannot take it.
    fn prefetch(
        &self,
        range: DeviceRange<'_>,
        target: PrefetchTarget,
        stream: &Self::Stream,
    ) -> Result<PrefetchOutcome, Self::Error>;

    /// The size and alignment unit of virtual-memory reservations and mappings.
    fn vm_granularity(&self) -> Result<usize, Self::Error>;

    /// Reserves `bytes` (a multiple of the granularity) of virtual addresses.
    fn vm_reserve(&self, bytes: usize) -> Result<Self::VirtualRange, Self::Error>;

    /// Backs `offset .. offset + bytes` of a reservation with new physical
    /// memory, readable and writable by the device. Both must be multiples of
    /// the granularity, inside the reservation, and not mapped yet.
    fn vm_map(
        &self,
        range: &mut Self::VirtualRange,
        offset: usize,
        bytes: usize,
    ) -> Result<(), Self::Error>;

    /// Unmaps and frees a span mapped earlier by one `vm_map` call.
    fn vm_unmap(
        &self,
        range: &mut Self::VirtualRange,
        offset: usize,
        bytes: usize,
    ) -> Result<(), Self::Error>;
}
