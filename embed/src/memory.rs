//! Guest linear memory in the driver's managed memory: a wasmtime
//! [`MemoryCreator`] whose memories are [`ManagedAllocator`] regions, so a
//! kernel reads and writes guest data in place. Owns the engine settings this
//! needs ([`configure_engine`]), the registry that proves a memory is
//! device-addressable without a driver query, snapshot/restore, and
//! [`recording_memories`], which tells which memories an instantiation made
//! (a component's, whose memories no export reaches). It does not decide
//! quotas: it is handed a per-memory byte limit.

use std::{
    cell::RefCell,
    collections::HashMap,
    fmt,
    future::Future,
    pin::Pin,
    sync::{Arc, Mutex, PoisonError, Weak},
    task::{Context, Poll},
};

use tensorwasm_core::{
    DevicePtr, DriverError, ErrorKind, ManagedAllocator, ManagedRegion, MemorySnapshot,
};
use wasmtime::{AsContextMut, Config, LinearMemory, Memory, MemoryCreator, MemoryType};

/// Wasm pages are 64 KiB.
const WASM_PAGE: usize = 64 << 10;

/// Sets the engine knobs guest memory in managed memory needs, and installs
/// `creator` as the engine's memory creator.
pub fn configure_engine(config: &mut Config, creator: Arc<dyn MemoryCreator>) {
    config
        .with_host_memory(creator)
        // A managed allocation has no unmapped guard pages after it (the next
        // managed allocation may sit there), so compiled code must not elide
        // bounds checks: no reservation to lean on and no guard region means
        // every access is checked against the memory's current length.
        .memory_reservation(0)
        .memory_guard_size(0)
        .guard_before_linear_memory(false)
        // Memories are reserved at their maximum and grow in place, so the
        // base never moves; this lets Cranelift keep the base in a register
        // and makes a growth past the reservation fail instead of copying.
        .memory_may_move(false)
        .memory_reservation_for_growth(0)
        // Copy-on-write images map the module's data with mmap, which a
        // managed allocation is not.
        .memory_init_cow(false)
        // Launch descriptors carry 32-bit guest offsets.
        .wasm_memory64(false);
}

/// What the registry knows of one live guest memory.
#[derive(Clone)]
pub struct GuestRegionInfo {
    /// The memory's address on the device (equal to its host address for
    /// managed memory).
    pub device_base: DevicePtr,
    /// The memory's address in this process.
    pub host_base: usize,
    /// Bytes reserved for the memory: it never grows past this.
    pub capacity: usize,
    /// Whether a kernel can address the memory.
    pub device_addressable: bool,
    /// Keeps the region's allocation alive while a launch may still use it,
    /// even if wasmtime drops the memory first; it also tells the memory's
    /// current size.
    pub keep_alive: Arc<dyn LiveRegion>,
}

impl GuestRegionInfo {
    /// The memory's current size in bytes (it only grows).
    pub fn current_len(&self) -> usize {
        self.keep_alive.len()
    }

    /// The memory as launches and hints address it: its device address
    /// and current size.
    pub fn memory_ref(&self) -> tensorwasm_core::abi::GuestMemoryRef {
        tensorwasm_core::abi::GuestMemoryRef {
            base: self.device_base,
            len: self.current_len(),
            device_addressable: self.device_addressable,
        }
    }
}

/// A live guest memory's region, as a launch holds it.
pub trait LiveRegion: Send + Sync {
    /// The memory's current size in bytes.
    fn len(&self) -> usize;

    /// Whether it is empty (no pages).
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<A: ManagedAllocator> LiveRegion for GuestRegion<A>
where
    A::Region: Sync,
{
    fn len(&self) -> usize {
        lock(&self.region).len()
    }
}

thread_local! {
    /// The memories made on this thread while a [`recording_memories`]
    /// future is being polled (`None` outside one).
    static RECORDING: RefCell<Option<Vec<GuestRegionInfo>>> = const { RefCell::new(None) };
}

/// Runs `future` and also returns the memories this crate's creators made
/// while it was polled, in the order they were made. wasmtime's
/// [`MemoryCreator`] is not told which store asks for a memory; an
/// instantiation runs on the thread that polls it (its fiber is resumed
/// there), so marking the thread around each poll tells its memories
/// apart from other stores' (made on other threads or between polls).
pub async fn recording_memories<F: Future>(future: F) -> (F::Output, Vec<GuestRegionInfo>) {
    let mut recording = Recording {
        future: Box::pin(future),
        made: Vec::new(),
    };
    let output = std::future::poll_fn(|cx| recording.poll_once(cx)).await;
    (output, recording.made)
}

/// A future and the memories made while it was polled.
struct Recording<F: Future> {
    future: Pin<Box<F>>,
    made: Vec<GuestRegionInfo>,
}

impl<F: Future> Recording<F> {
    fn poll_once(&mut self, cx: &mut Context<'_>) -> Poll<F::Output> {
        // Nested recordings (a poll inside a poll) each keep their own.
        let outer = RECORDING.with(|r| r.borrow_mut().replace(Vec::new()));
        let polled = self.future.as_mut().poll(cx);
        let made = RECORDING.with(|r| std::mem::replace(&mut *r.borrow_mut(), outer));
        self.made.extend(made.unwrap_or_default());
        polled
    }
}

impl fmt::Debug for GuestRegionInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GuestRegionInfo")
            .field("device_base", &self.device_base)
            .field("capacity", &self.capacity)
            .field("device_addressable", &self.device_addressable)
            .finish()
    }
}

/// Finds the region behind a guest memory from its host base address. The
/// `wasi_cuda` context holds one to learn, per call and without asking the
/// driver, whether a guest's memory is device-addressable.
pub trait GuestMemoryLookup: Send + Sync {
    /// The region whose host base is `host_base`, if this registry made it.
    fn lookup(&self, host_base: usize) -> Option<GuestRegionInfo>;
}

/// Why a guest memory operation failed.
#[derive(Debug)]
pub enum GuestMemoryError {
    /// The memory was not made by this creator (so it is not managed memory).
    NotManaged,
    /// A restore would shrink the memory; Wasm memories never shrink.
    Shrink {
        /// The memory's current size.
        current: usize,
        /// The snapshot's size.
        snapshot: usize,
    },
    /// The snapshot's size is not a whole number of Wasm pages.
    NotPageSized(usize),
    /// Growing the memory to the snapshot's size failed.
    Grow(String),
    /// The allocator failed.
    Driver {
        /// The driver-independent kind.
        kind: ErrorKind,
        /// The driver's message.
        message: String,
    },
}

impl fmt::Display for GuestMemoryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GuestMemoryError::NotManaged => {
                f.write_str("this memory was not created by TensorWasm's managed allocator")
            }
            GuestMemoryError::Shrink { current, snapshot } => write!(
                f,
                "the snapshot holds {snapshot} bytes but the memory has {current}: \
                 a Wasm memory cannot shrink"
            ),
            GuestMemoryError::NotPageSized(len) => {
                write!(f, "the snapshot's {len} bytes are not whole 64 KiB pages")
            }
            GuestMemoryError::Grow(e) => write!(f, "growing the memory failed: {e}"),
            GuestMemoryError::Driver { kind, message } => write!(f, "{message} ({kind:?})"),
        }
    }
}

impl std::error::Error for GuestMemoryError {}

fn driver_error<E: DriverError>(e: E) -> GuestMemoryError {
    GuestMemoryError::Driver {
        kind: e.kind(),
        message: format!("{e:?}"),
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// One guest memory's region, shared by wasmtime's memory object, the
/// registry (weakly) and in-flight launches (as a keep-alive).
struct GuestRegion<A: ManagedAllocator> {
    region: Mutex<A::Region>,
    device_base: DevicePtr,
    host_base: usize,
    capacity: usize,
    device_addressable: bool,
}

impl<A: ManagedAllocator + 'static> GuestRegion<A>
where
    A::Region: Sync,
{
    /// What the registry tells of it, holding it alive.
    fn info(region: Arc<Self>) -> GuestRegionInfo {
        GuestRegionInfo {
            device_base: region.device_base,
            host_base: region.host_base,
            capacity: region.capacity,
            device_addressable: region.device_addressable,
            keep_alive: region,
        }
    }
}

/// The memories one creator made, by host base address.
struct Registry<A: ManagedAllocator> {
    regions: Mutex<HashMap<usize, Weak<GuestRegion<A>>>>,
}

impl<A: ManagedAllocator + 'static> GuestMemoryLookup for Registry<A>
where
    A::Region: Sync,
{
    fn lookup(&self, host_base: usize) -> Option<GuestRegionInfo> {
        let region = lock(&self.regions).get(&host_base)?.upgrade()?;
        Some(GuestRegion::info(region))
    }
}

/// Makes every linear memory of an engine a region of `A`'s managed memory.
/// Install it with [`configure_engine`]; keep a clone of the `Arc` for
/// [`ManagedMemoryCreator::lookup`], snapshots and restores.
pub struct ManagedMemoryCreator<A: ManagedAllocator> {
    allocator: A,
    limit: usize,
    registry: Arc<Registry<A>>,
}

impl<A> ManagedMemoryCreator<A>
where
    A: ManagedAllocator + Clone + 'static,
    A::Region: Sync,
{
    /// A creator whose memories reserve at most `limit` bytes each (the
    /// memory's declared maximum when smaller). A module whose minimum is
    /// above `limit` fails to instantiate; `memory.grow` past it returns -1.
    pub fn new(allocator: A, limit: usize) -> Arc<Self> {
        Arc::new(ManagedMemoryCreator {
            allocator,
            limit: limit - limit % WASM_PAGE,
            registry: Arc::new(Registry {
                regions: Mutex::default(),
            }),
        })
    }

    /// The per-memory limit in bytes (rounded down to whole pages).
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// The registry of this creator's memories, for the `wasi_cuda` context.
    pub fn lookup(&self) -> Arc<dyn GuestMemoryLookup> {
        self.registry.clone()
    }

    fn region_of(
        &self,
        store: &mut impl AsContextMut,
        memory: &Memory,
    ) -> Result<Arc<GuestRegion<A>>, GuestMemoryError> {
        let host_base = memory.data_ptr(&mut *store) as usize;
        lock(&self.registry.regions)
            .get(&host_base)
            .and_then(Weak::upgrade)
            .ok_or(GuestMemoryError::NotManaged)
    }

    /// Copies the memory's bytes out (after the driver's queued work).
    pub fn snapshot(
        &self,
        mut store: impl AsContextMut,
        memory: &Memory,
    ) -> Result<MemorySnapshot, GuestMemoryError> {
        let region = self.region_of(&mut store, memory)?;
        let guard = lock(&region.region);
        self.allocator.snapshot(&guard).map_err(driver_error)
    }

    /// Puts a snapshot's bytes and size back: grows the memory to the
    /// snapshot's size through wasmtime (so compiled code sees the new
    /// length), then writes the bytes through the allocator. A snapshot
    /// smaller than the memory is refused, since Wasm memories never shrink.
    pub fn restore(
        &self,
        mut store: impl AsContextMut,
        memory: &Memory,
        snapshot: &MemorySnapshot,
    ) -> Result<(), GuestMemoryError> {
        let region = self.region_of(&mut store, memory)?;
        let current = memory.data_size(&mut store);
        if snapshot.len() < current {
            return Err(GuestMemoryError::Shrink {
                current,
                snapshot: snapshot.len(),
            });
        }
        if !snapshot.len().is_multiple_of(WASM_PAGE) {
            return Err(GuestMemoryError::NotPageSized(snapshot.len()));
        }
        let delta = ((snapshot.len() - current) / WASM_PAGE) as u64;
        if delta > 0 {
            memory
                .grow(&mut store, delta)
                .map_err(|e| GuestMemoryError::Grow(e.to_string()))?;
        }
        let mut guard = lock(&region.region);
        self.allocator
            .restore(&mut guard, snapshot)
            .map_err(driver_error)
    }
}

// SAFETY: every memory returned is a region of the allocator that stays
// allocated (and at the same address) until wasmtime drops the
// `LinearMemory`; `byte_size` bytes from its base are accessible and zeroed
// when exposed; growth never moves it (see `GuestLinearMemory`). No guard
// region is promised, and `configure_engine` sets the guard size to 0 so
// wasmtime never relies on one.
unsafe impl<A> MemoryCreator for ManagedMemoryCreator<A>
where
    A: ManagedAllocator + Clone + 'static,
    A::Region: Sync,
{
    fn new_memory(
        &self,
        ty: MemoryType,
        minimum: usize,
        maximum: Option<usize>,
        _reserved_size_in_bytes: Option<usize>,
        guard_size_in_bytes: usize,
    ) -> Result<Box<dyn LinearMemory>, String> {
        if ty.is_64() {
            return Err("64-bit memories are not supported for guests".into());
        }
        if guard_size_in_bytes != 0 {
            return Err(format!(
                "the engine asks for a {guard_size_in_bytes}-byte guard region, which managed \
                 memory cannot provide: build it with tensorwasm_embed::memory::configure_engine"
            ));
        }
        let capacity = maximum.map_or(self.limit, |max| max.min(self.limit));
        if minimum > capacity {
            return Err(format!(
                "the module needs {minimum} bytes of memory but guests may have at most {}",
                self.limit
            ));
        }
        let region = self
            .allocator
            .reserve(capacity, minimum)
            .map_err(|e| format!("reserving {capacity} bytes of managed memory failed: {e:?}"))?;
        let guest = Arc::new(GuestRegion {
            device_base: region.base(),
            host_base: region.host_ptr() as usize,
            capacity: region.capacity(),
            device_addressable: region.device_addressable(),
            region: Mutex::new(region),
        });
        let mut regions = lock(&self.registry.regions);
        regions.retain(|_, weak| weak.strong_count() > 0);
        regions.insert(guest.host_base, Arc::downgrade(&guest));
        drop(regions);
        RECORDING.with(|r| {
            if let Some(made) = r.borrow_mut().as_mut() {
                made.push(GuestRegion::info(Arc::clone(&guest)));
            }
        });
        Ok(Box::new(GuestLinearMemory {
            allocator: self.allocator.clone(),
            region: guest,
        }))
    }
}

/// One guest's linear memory: a managed region reserved at the memory's
/// maximum, of which a prefix is exposed.
struct GuestLinearMemory<A: ManagedAllocator> {
    allocator: A,
    region: Arc<GuestRegion<A>>,
}

// SAFETY: `as_ptr` is the region's host base, valid for `byte_capacity`
// bytes for as long as this value (which holds an `Arc` of the region)
// lives; `grow_to` exposes more of the same allocation without moving it;
// `byte_size` bytes are always accessible.
unsafe impl<A> LinearMemory for GuestLinearMemory<A>
where
    A: ManagedAllocator + 'static,
    A::Region: Sync,
{
    fn byte_size(&self) -> usize {
        lock(&self.region.region).len()
    }

    fn byte_capacity(&self) -> usize {
        self.region.capacity
    }

    fn grow_to(&mut self, new_size: usize) -> wasmtime::Result<()> {
        let mut region = lock(&self.region.region);
        self.allocator
            .grow(&mut region, new_size)
            .map_err(|e| wasmtime::format_err!("growing guest memory to {new_size} bytes: {e:?}"))
    }

    fn as_ptr(&self) -> *mut u8 {
        self.region.host_base as *mut u8
    }
}
