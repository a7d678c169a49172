//! [`CpuDevice`]: the state one driver shares with everything it hands out:
//! what the device reports, the memory ledger, the allocation table and the
//! set of live streams. It performs no copies or launches itself.

use std::{
    collections::HashMap,
    fs,
    num::NonZeroUsize,
    sync::atomic::{AtomicBool, Ordering},
    thread,
};

use tensorwasm_core::{DeviceInfo, DeviceRange, ErrorKind};

use crate::{
    error::CpuError,
    kernel::CpuModule,
    memory::{AllocationTable, MemoryLedger},
    os,
    stream::StreamSet,
    sync::{Mutex, lock},
};

/// Capacity when `/proc/meminfo` cannot be read.
pub(crate) const FALLBACK_CAPACITY: u64 = 8 << 30;

/// The smallest virtual-memory granularity; the page size where larger.
const MIN_VM_GRANULARITY: usize = 64 << 10;

/// The shared state behind a [`CpuDriver`](crate::CpuDriver).
pub(crate) struct CpuDevice {
    pub(crate) info: DeviceInfo,
    /// Threads a launch spreads its blocks over.
    pub(crate) workers: usize,
    pub(crate) page_size: usize,
    pub(crate) vm_granularity: usize,
    pub(crate) ledger: MemoryLedger,
    pub(crate) table: AllocationTable,
    pub(crate) streams: StreamSet,
    /// Host twins of PTX texts, by exact text: see
    /// [`CpuDriver::register_ptx_twin`](crate::CpuDriver::register_ptx_twin).
    pub(crate) ptx_twins: Mutex<HashMap<String, CpuModule>>,
    /// Whether a kernel fault loses the whole device, as on CUDA
    /// ([`CpuDriver::set_faults_lose_device`](crate::CpuDriver::set_faults_lose_device)).
    pub(crate) faults_lose_device: AtomicBool,
    /// Why the device was lost, once it was.
    lost: Mutex<Option<String>>,
    /// Set once `lost` holds a reason: every driver call reads this, not
    /// the lock.
    is_lost: AtomicBool,
}

impl CpuDevice {
    pub(crate) fn new(op: &'static str, capacity: u64) -> Result<CpuDevice, CpuError> {
        let page_size =
            os::page_size().map_err(|e| CpuError::os(op, "sysconf(_SC_PAGESIZE)", e))?;
        let vm_granularity = MIN_VM_GRANULARITY
            .checked_next_multiple_of(page_size)
            .ok_or_else(|| {
                CpuError::new(op, ErrorKind::Unavailable, format!("page size {page_size}"))
            })?;
        let workers = thread::available_parallelism().map_or(1, NonZeroUsize::get);
        let threads = u32::try_from(workers).unwrap_or(u32::MAX);
        Ok(CpuDevice {
            info: device_info(threads, capacity),
            workers,
            page_size,
            vm_granularity,
            ledger: MemoryLedger::new(capacity),
            table: AllocationTable::default(),
            streams: StreamSet::default(),
            ptx_twins: Mutex::default(),
            faults_lose_device: AtomicBool::new(false),
            lost: Mutex::default(),
            is_lost: AtomicBool::new(false),
        })
    }

    /// `DeviceLost` once the device is lost (every call but teardown).
    pub(crate) fn alive(&self, op: &'static str) -> Result<(), CpuError> {
        if !self.is_lost.load(Ordering::Acquire) {
            return Ok(());
        }
        match lock(&self.lost).as_deref() {
            None => Ok(()),
            Some(why) => Err(CpuError::new(
                op,
                ErrorKind::DeviceLost,
                format!("the device was lost: {why}"),
            )),
        }
    }

    /// A kernel failed with `failure`: the device is lost if faults lose it.
    pub(crate) fn kernel_failed(&self, failure: &str) {
        if self.faults_lose_device.load(Ordering::Relaxed) {
            lock(&self.lost).get_or_insert_with(|| failure.to_owned());
            self.is_lost.store(true, Ordering::Release);
        }
    }

    /// Refuses a range that is not inside live allocations of this driver, so
    /// that a range of another driver (or a stale one) is never touched.
    /// Empty ranges touch nothing and pass.
    pub(crate) fn check_range(
        &self,
        op: &'static str,
        what: &str,
        range: &DeviceRange<'_>,
    ) -> Result<(), CpuError> {
        if range.is_empty() || self.table.covers(range.ptr().0, range.len()) {
            Ok(())
        } else {
            Err(CpuError::invalid(
                op,
                format!("the {what} {range:?} is not inside a live allocation of this driver"),
            ))
        }
    }
}

fn device_info(threads: u32, capacity: u64) -> DeviceInfo {
    DeviceInfo {
        ordinal: 0,
        name: format!("CPU ({threads} threads)"),
        compute_capability: None,
        multiprocessor_count: threads,
        // A worker runs a block's threads one after another; 1024 is the
        // largest block, so each worker "holds" one.
        max_threads_per_multiprocessor: 1024,
        clock_rate_khz: 1_000_000,
        total_memory: capacity,
        max_threads_per_block: 1024,
        max_block_dim: (1024, 1024, 64),
        max_grid_dim: (i32::MAX as u32, 65535, 65535),
        max_shared_memory_per_block: 48 * 1024,
        // No opt-in: a block's shared memory is a host allocation.
        max_shared_memory_per_block_optin: 48 * 1024,
        warp_size: 32,
        concurrent_managed_access: true,
        vmm_supported: true,
        driver_version: None,
    }
}

/// `MemAvailable` from `/proc/meminfo`, in bytes.
pub(crate) fn available_memory() -> Option<u64> {
    parse_mem_available(&fs::read_to_string("/proc/meminfo").ok()?)
}

fn parse_mem_available(meminfo: &str) -> Option<u64> {
    let value = meminfo
        .lines()
        .find_map(|line| line.strip_prefix("MemAvailable:"))?;
    let kib: u64 = value.trim().strip_suffix("kB")?.trim().parse().ok()?;
    kib.checked_mul(1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mem_available_is_parsed_in_bytes() {
        let text = "MemTotal:       16318480 kB\nMemFree:  1 kB\nMemAvailable:   12000000 kB\n";
        assert_eq!(parse_mem_available(text), Some(12_000_000 * 1024));
        assert_eq!(parse_mem_available("MemTotal: 5 kB\n"), None);
        assert_eq!(parse_mem_available("MemAvailable: lots\n"), None);
    }
}
