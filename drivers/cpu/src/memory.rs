//! Memory bookkeeping and plain allocations: the ledger behind `mem_info`,
//! the table behind `pointer_info` and range checks, the RAII claims that
//! keep both in step, and the heap-backed device and managed buffers.
//! Reservations made with `mmap` live in `vm` and `region`.

use std::{
    alloc::{self, Layout},
    collections::BTreeMap,
    fmt,
    ptr::{self, NonNull},
};

use tensorwasm_core::{DeviceMemory, DevicePtr, ErrorKind, MemoryKind};

use crate::{
    device::CpuDevice,
    error::CpuError,
    sync::{Arc, AtomicU64, Mutex, Ordering, lock},
};

/// Alignment of every heap allocation, as CUDA's allocator gives.
const ALLOCATION_ALIGN: usize = 256;

/// Turns an address this driver handed out back into a host pointer.
pub(crate) fn host_ptr(address: DevicePtr) -> *mut u8 {
    // Every address the driver hands out had its provenance exposed when it
    // was allocated or mapped.
    ptr::with_exposed_provenance_mut(address.0 as usize)
}

/// Bytes of capacity and bytes taken.
pub(crate) struct MemoryLedger {
    capacity: u64,
    used: AtomicU64,
}

impl MemoryLedger {
    pub(crate) fn new(capacity: u64) -> Self {
        MemoryLedger {
            capacity,
            used: AtomicU64::new(0),
        }
    }

    pub(crate) fn capacity(&self) -> u64 {
        self.capacity
    }

    pub(crate) fn free(&self) -> u64 {
        self.capacity
            .saturating_sub(self.used.load(Ordering::Acquire))
    }

    fn try_take(&self, bytes: u64) -> bool {
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(bytes).filter(|&n| n <= self.capacity)
            })
            .is_ok()
    }

    fn give_back(&self, bytes: u64) {
        self.used.fetch_sub(bytes, Ordering::AcqRel);
    }
}

/// Bytes taken from the ledger; given back on drop.
pub(crate) struct Charge {
    device: Arc<CpuDevice>,
    bytes: u64,
}

impl Charge {
    /// Takes `bytes` of capacity, or fails with `OutOfMemory`.
    pub(crate) fn take(
        device: &Arc<CpuDevice>,
        op: &'static str,
        bytes: usize,
    ) -> Result<Charge, CpuError> {
        let wanted = u64::try_from(bytes).unwrap_or(u64::MAX);
        if device.ledger.try_take(wanted) {
            Ok(Charge {
                device: Arc::clone(device),
                bytes: wanted,
            })
        } else {
            Err(CpuError::new(
                op,
                ErrorKind::OutOfMemory,
                format!(
                    "{bytes} bytes requested but only {} of {} bytes are free",
                    device.ledger.free(),
                    device.ledger.capacity()
                ),
            ))
        }
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.device.ledger.give_back(self.bytes);
    }
}

/// A charge registered in the allocation table at `base`; dropping it
/// unregisters the span, then gives the bytes back.
pub(crate) struct Claim {
    charge: Charge,
    base: u64,
}

impl Claim {
    /// Registers `span` bytes at `base` as `kind` for `pointer_info`, of which
    /// the first `accessible` may be touched by copies.
    pub(crate) fn register(
        charge: Charge,
        base: u64,
        span: usize,
        accessible: usize,
        kind: MemoryKind,
    ) -> Claim {
        charge.device.table.insert(
            base,
            Span {
                len: span as u64,
                accessible: accessible as u64,
                kind,
            },
        );
        Claim { charge, base }
    }

    /// The device the claim was taken from.
    pub(crate) fn device(&self) -> &Arc<CpuDevice> {
        &self.charge.device
    }

    /// Changes how many bytes from the base copies may touch.
    pub(crate) fn set_accessible(&self, bytes: usize) {
        self.charge.device.table.set_accessible(self.base, bytes);
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        self.charge.device.table.remove(self.base);
    }
}

/// One registered allocation.
#[derive(Clone, Copy, Debug)]
struct Span {
    /// Bytes `pointer_info` attributes to the allocation.
    len: u64,
    /// Bytes from the base that copies may touch (less than `len` for a
    /// region that has not grown to its maximum).
    accessible: u64,
    kind: MemoryKind,
}

/// Every live allocation, by base address.
#[derive(Default)]
pub(crate) struct AllocationTable {
    spans: Mutex<BTreeMap<u64, Span>>,
}

impl AllocationTable {
    fn insert(&self, base: u64, span: Span) {
        lock(&self.spans).insert(base, span);
    }

    fn remove(&self, base: u64) {
        lock(&self.spans).remove(&base);
    }

    fn set_accessible(&self, base: u64, bytes: usize) {
        if let Some(span) = lock(&self.spans).get_mut(&base) {
            span.accessible = bytes as u64;
        }
    }

    /// The kind of memory at `address`: `Unknown` outside every allocation.
    pub(crate) fn kind_at(&self, address: u64) -> MemoryKind {
        let spans = lock(&self.spans);
        match spans.range(..=address).next_back() {
            Some((&base, span)) if address - base < span.len => span.kind,
            _ => MemoryKind::Unknown,
        }
    }

    /// Every byte of `address .. address + len` (len > 0) is accessible in a
    /// live allocation; the range may run across allocations that touch, as
    /// adjacent `vm_map` spans do.
    pub(crate) fn covers(&self, address: u64, len: usize) -> bool {
        let Some(end) = address.checked_add(len as u64) else {
            return false;
        };
        let spans = lock(&self.spans);
        let Some((&base, span)) = spans.range(..=address).next_back() else {
            return false;
        };
        if address - base >= span.accessible {
            return false;
        }
        let mut cursor = base + span.accessible;
        while cursor < end {
            match spans.range(cursor..).next() {
                Some((&next, span)) if next == cursor && span.accessible > 0 => {
                    cursor = next + span.accessible;
                }
                _ => return false,
            }
        }
        true
    }
}

/// A zeroed heap block with [`ALLOCATION_ALIGN`]; freed on drop.
struct HostBlock {
    ptr: NonNull<u8>,
    layout: Layout,
}

// SAFETY: the block is owned exclusively by its HostBlock; its bytes are only
// touched through raw pointers by driver work that the owner orders (freeing
// waits for every stream), never through references handed out by &self.
unsafe impl Send for HostBlock {}
// SAFETY: as for Send; &self gives out only the address.
unsafe impl Sync for HostBlock {}

impl HostBlock {
    /// At least one byte, so that a zero-length allocation still has a
    /// unique, registered address.
    fn alloc_zeroed(len: usize) -> Option<HostBlock> {
        let layout = Layout::from_size_align(len.max(1), ALLOCATION_ALIGN).ok()?;
        // SAFETY: the layout has a nonzero size, as alloc_zeroed requires.
        let ptr = NonNull::new(unsafe { alloc::alloc_zeroed(layout) })?;
        Some(HostBlock { ptr, layout })
    }
}

impl Drop for HostBlock {
    fn drop(&mut self) {
        // SAFETY: ptr came from alloc_zeroed with this layout and is freed
        // only here, once.
        unsafe { alloc::dealloc(self.ptr.as_ptr(), self.layout) };
    }
}

/// A registered, charged heap allocation. Dropping it waits for every stream
/// (queued work may still use it), then unregisters, uncharges and frees.
struct HostAllocation {
    // Field order is drop order: unregister and uncharge, then free.
    claim: Claim,
    _block: HostBlock,
    address: u64,
    len: usize,
}

impl HostAllocation {
    fn new(
        device: &Arc<CpuDevice>,
        op: &'static str,
        len: usize,
        kind: MemoryKind,
    ) -> Result<HostAllocation, CpuError> {
        let charge = Charge::take(device, op, len)?;
        let block = HostBlock::alloc_zeroed(len).ok_or_else(|| {
            CpuError::new(
                op,
                ErrorKind::OutOfMemory,
                format!("the host allocator refused {len} bytes"),
            )
        })?;
        let address = block.ptr.as_ptr().expose_provenance() as u64;
        let claim = Claim::register(charge, address, block.layout.size(), len, kind);
        Ok(HostAllocation {
            claim,
            _block: block,
            address,
            len,
        })
    }
}

impl Drop for HostAllocation {
    fn drop(&mut self) {
        self.claim.device().streams.drain();
    }
}

impl fmt::Debug for HostAllocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#x}, {} bytes", self.address, self.len)
    }
}

/// Device memory of the CPU driver: a zeroed, 256-byte aligned host
/// allocation. Dropping it waits for all queued work first.
pub struct CpuDeviceBuffer(HostAllocation);

/// Managed memory of the CPU driver: host memory, so the same address works
/// for host and kernels. Dropping it waits for all queued work first.
pub struct CpuManagedBuffer(HostAllocation);

impl CpuDeviceBuffer {
    pub(crate) fn new(device: &Arc<CpuDevice>, len: usize) -> Result<CpuDeviceBuffer, CpuError> {
        HostAllocation::new(device, "alloc_device", len, MemoryKind::Device).map(CpuDeviceBuffer)
    }
}

impl CpuManagedBuffer {
    pub(crate) fn new(device: &Arc<CpuDevice>, len: usize) -> Result<CpuManagedBuffer, CpuError> {
        HostAllocation::new(device, "alloc_managed", len, MemoryKind::Managed).map(CpuManagedBuffer)
    }
}

impl DeviceMemory for CpuDeviceBuffer {
    fn device_ptr(&self) -> DevicePtr {
        DevicePtr(self.0.address)
    }

    fn len(&self) -> usize {
        self.0.len
    }
}

impl DeviceMemory for CpuManagedBuffer {
    fn device_ptr(&self) -> DevicePtr {
        DevicePtr(self.0.address)
    }

    fn len(&self) -> usize {
        self.0.len
    }
}

impl fmt::Debug for CpuDeviceBuffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CpuDeviceBuffer({:?})", self.0)
    }
}

impl fmt::Debug for CpuManagedBuffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CpuManagedBuffer({:?})", self.0)
    }
}

#[cfg(test)]
mod tests {
    use tensorwasm_core::{DeviceMemory, DevicePtr, DriverError, ErrorKind, GpuDriver, MemoryKind};

    use crate::testing::{Rng, driver};

    fn kind_at(d: &crate::CpuDriver, address: DevicePtr) -> MemoryKind {
        d.pointer_info(address).unwrap().kind
    }

    #[test]
    fn pointer_info_knows_only_live_allocations() {
        let d = driver(1 << 20);
        let heap = Box::new([7u8; 64]);
        let heap_address = DevicePtr(std::ptr::from_ref(&*heap).addr() as u64);
        assert_eq!(kind_at(&d, heap_address), MemoryKind::Unknown);
        assert!(
            !d.pointer_info(heap_address)
                .unwrap()
                .is_device_addressable()
        );
        assert_eq!(kind_at(&d, DevicePtr::NULL), MemoryKind::Unknown);

        let device = d.alloc_device(1000).unwrap();
        let managed = d.alloc_managed(100).unwrap();
        for offset in [0, 1, 500, 999] {
            let address = device.device_ptr().checked_add(offset).unwrap();
            assert_eq!(kind_at(&d, address), MemoryKind::Device, "offset {offset}");
        }
        let past = device.device_ptr().checked_add(1000).unwrap();
        assert_eq!(kind_at(&d, past), MemoryKind::Unknown);
        let inside = managed.device_ptr().checked_add(99).unwrap();
        assert!(d.pointer_info(inside).unwrap().is_managed());
        assert_eq!(device.device_ptr().0 % 256, 0);

        let freed = device.device_ptr();
        drop(device);
        assert_eq!(kind_at(&d, freed), MemoryKind::Unknown);
    }

    #[test]
    fn memory_is_charged_and_given_back() {
        let d = driver(1 << 20);
        let info = d.mem_info().unwrap();
        assert_eq!((info.free, info.total), (1 << 20, 1 << 20));
        let a = d.alloc_device(4096).unwrap();
        let b = d.alloc_managed(100).unwrap();
        assert_eq!(d.mem_info().unwrap().free, (1 << 20) - 4196);
        drop(a);
        drop(b);
        assert_eq!(d.mem_info().unwrap().free, 1 << 20);
    }

    #[test]
    fn capacity_exhaustion_is_out_of_memory() {
        let d = driver(64 << 10);
        let most = d.alloc_device(60 << 10).unwrap();
        let err = d.alloc_device(8 << 10).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::OutOfMemory);
        assert_eq!(err.op(), "alloc_device");
        assert!(err.to_string().contains("8192 bytes requested"), "{err}");
        let err = d.alloc_managed(8 << 10).unwrap_err();
        assert_eq!(
            (err.kind(), err.op()),
            (ErrorKind::OutOfMemory, "alloc_managed")
        );
        assert_eq!(
            d.alloc_device(usize::MAX).unwrap_err().kind(),
            ErrorKind::OutOfMemory
        );
        drop(most);
        drop(d.alloc_device(64 << 10).unwrap());

        // Past the ledger, the host allocator's refusal is an error too.
        let unbounded = driver(u64::MAX);
        let err = unbounded.alloc_device(usize::MAX).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::OutOfMemory);
        assert_eq!(unbounded.mem_info().unwrap().free, u64::MAX);
    }

    #[test]
    fn zero_length_allocations_are_distinct_and_known() {
        let d = driver(1 << 20);
        let a = d.alloc_device(0).unwrap();
        let b = d.alloc_managed(0).unwrap();
        assert!(a.is_empty() && b.is_empty());
        assert_ne!(a.device_ptr(), b.device_ptr());
        assert_ne!(a.device_ptr(), DevicePtr::NULL);
        assert_eq!(kind_at(&d, a.device_ptr()), MemoryKind::Device);
        d.copy_to_device(a.full(), &[]).unwrap();
        d.copy_from_device(&mut [], b.full()).unwrap();
        d.memset(a.full(), 1).unwrap();
        assert_eq!(d.mem_info().unwrap().free, 1 << 20);
    }

    #[test]
    fn copies_round_trip_random_bytes() {
        let mut rng = Rng::from_env("copies_round_trip_random_bytes");
        let d = driver(1 << 20);
        let data = rng.bytes(4099);
        let device = d.alloc_device(data.len()).unwrap();
        let managed = d.alloc_managed(data.len()).unwrap();
        d.copy_to_device(device.full(), &data).unwrap();
        d.copy_device(managed.full(), device.full()).unwrap();
        let mut back = vec![0; data.len()];
        d.copy_from_device(&mut back, managed.full()).unwrap();
        assert_eq!(back, data);

        d.memset(managed.range(10, 20).unwrap(), 0xee).unwrap();
        d.copy_from_device(&mut back, managed.full()).unwrap();
        assert!(back[10..30].iter().all(|&b| b == 0xee));
        assert_eq!(back[..10], data[..10]);
        assert_eq!(back[30..], data[30..]);

        let err = d.copy_to_device(device.full(), &data[1..]).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidArgument);
        let err = d
            .copy_device(device.range(0, 8).unwrap(), managed.range(0, 9).unwrap())
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidArgument);
        let err = d
            .copy_from_device(&mut back[..5], device.range(0, 4).unwrap())
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidArgument);
    }

    #[test]
    fn ranges_of_another_driver_are_refused() {
        let ours = driver(1 << 20);
        let theirs = driver(1 << 20);
        let foreign = theirs.alloc_device(64).unwrap();
        let err = ours.copy_to_device(foreign.full(), &[1; 64]).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidArgument);
        assert!(
            err.to_string().contains("not inside a live allocation"),
            "{err}"
        );
        let err = ours.memset(foreign.full(), 1).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidArgument);
        let err = ours.advise(foreign.full(), tensorwasm_core::Advice::PreferHost);
        assert_eq!(err.unwrap_err().kind(), ErrorKind::InvalidArgument);
    }
}
