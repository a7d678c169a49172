//! [`Device`] and [`DeviceInfo`]: which devices the guest may use and what
//! each offers, parsed from the 128-byte record of `device_info`.

use alloc::string::String;

use crate::error::Error;
use crate::result;
use crate::sys::DEVICE_INFO_LEN;

/// A device the guest may use, by its 0-based ordinal.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Device {
    ordinal: u32,
}

impl Device {
    /// How many devices this guest may use (1 today: the device its host
    /// picked).
    pub fn count() -> Result<u32, Error> {
        result::device_count()
    }

    /// Every device this guest may use, in ordinal order.
    pub fn all() -> Result<impl Iterator<Item = Device>, Error> {
        Ok((0..Device::count()?).map(Device::new))
    }

    /// The device with this ordinal. Nothing is checked until it is used:
    /// an ordinal not below [`Device::count`] gives `ENODEV` then.
    pub const fn new(ordinal: u32) -> Device {
        Device { ordinal }
    }

    /// The device's 0-based ordinal.
    pub const fn ordinal(self) -> u32 {
        self.ordinal
    }

    /// What the device offers.
    pub fn info(self) -> Result<DeviceInfo, Error> {
        let mut record = [0u8; DEVICE_INFO_LEN];
        result::device_info(self.ordinal, &mut record)?;
        Ok(DeviceInfo::from_record(&record))
    }
}

/// Which driver runs a device.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DriverKind {
    /// An NVIDIA GPU through CUDA.
    Cuda,
    /// The CPU driver, standing in where there is no GPU.
    Cpu,
    /// A driver code this library does not know (a newer host).
    Other(u32),
}

/// What a device offers: the `device_info` record of `docs/ABI.md`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceInfo {
    /// Which driver runs it.
    pub driver: DriverKind,
    /// Compute capability `(major, minor)`; `(0, 0)` on the CPU driver.
    pub compute_capability: (u32, u32),
    /// Multiprocessors (worker threads on the CPU driver).
    pub multiprocessor_count: u32,
    /// Total device memory, in bytes.
    pub total_memory: u64,
    /// The most threads one block may have.
    pub max_threads_per_block: u32,
    /// The largest block, per dimension `[x, y, z]`.
    pub max_block_dim: [u32; 3],
    /// The largest grid, per dimension `[x, y, z]`.
    pub max_grid_dim: [u32; 3],
    /// The most shared memory one block may use, in bytes.
    pub max_shared_memory_per_block: u32,
    /// Threads per warp.
    pub warp_size: u32,
    /// The raw flags word; see [`DeviceInfo::concurrent_managed_access`] and
    /// [`DeviceInfo::memory_device_addressable`].
    pub flags: u32,
    /// The device's name (the record's NUL padding removed).
    pub name: String,
}

impl DeviceInfo {
    /// Flags bit 0: the device and the host may touch managed memory at once.
    pub const FLAG_CONCURRENT_MANAGED_ACCESS: u32 = 1 << 0;
    /// Flags bit 1: kernels may take guest pointers (the guest's memory is
    /// device-addressable).
    pub const FLAG_MEMORY_DEVICE_ADDRESSABLE: u32 = 1 << 1;

    /// Parses the whole 128-byte record. A name that is not UTF-8 keeps its
    /// valid parts (invalid bytes become U+FFFD).
    pub fn from_record(record: &[u8; DEVICE_INFO_LEN]) -> DeviceInfo {
        let u32_at = |offset: usize| {
            let mut bytes = [0u8; 4];
            bytes.copy_from_slice(&record[offset..offset + 4]);
            u32::from_le_bytes(bytes)
        };
        let mut total_memory = [0u8; 8];
        total_memory.copy_from_slice(&record[16..24]);
        let name = &record[64..128];
        let name_len = name.iter().position(|&b| b == 0).unwrap_or(name.len());
        DeviceInfo {
            driver: match u32_at(0) {
                0 => DriverKind::Cuda,
                1 => DriverKind::Cpu,
                other => DriverKind::Other(other),
            },
            compute_capability: (u32_at(4), u32_at(8)),
            multiprocessor_count: u32_at(12),
            total_memory: u64::from_le_bytes(total_memory),
            max_threads_per_block: u32_at(24),
            max_block_dim: [u32_at(28), u32_at(32), u32_at(36)],
            max_grid_dim: [u32_at(40), u32_at(44), u32_at(48)],
            max_shared_memory_per_block: u32_at(52),
            warp_size: u32_at(56),
            flags: u32_at(60),
            name: String::from_utf8_lossy(&name[..name_len]).into_owned(),
        }
    }

    /// Whether the device and the host may touch managed memory at once.
    pub const fn concurrent_managed_access(&self) -> bool {
        self.flags & Self::FLAG_CONCURRENT_MANAGED_ACCESS != 0
    }

    /// Whether kernels may take guest pointers ([`crate::Launch::arg_slice`]);
    /// when not, such a launch fails with `ENOTADDR` and only buffers work.
    pub const fn memory_device_addressable(&self) -> bool {
        self.flags & Self::FLAG_MEMORY_DEVICE_ADDRESSABLE != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(record: &mut [u8; DEVICE_INFO_LEN], offset: usize, bytes: &[u8]) {
        record[offset..offset + bytes.len()].copy_from_slice(bytes);
    }

    #[test]
    fn every_field_is_read_from_its_offset() {
        let mut r = [0u8; DEVICE_INFO_LEN];
        put(&mut r, 0, &0u32.to_le_bytes());
        put(&mut r, 4, &9u32.to_le_bytes());
        put(&mut r, 8, &3u32.to_le_bytes());
        put(&mut r, 12, &132u32.to_le_bytes());
        put(&mut r, 16, &0x13_8000_0000u64.to_le_bytes());
        put(&mut r, 24, &1024u32.to_le_bytes());
        for (i, v) in [1024u32, 1024, 64, 0x7fff_ffff, 65535, 65535]
            .iter()
            .enumerate()
        {
            put(&mut r, 28 + 4 * i, &v.to_le_bytes());
        }
        put(&mut r, 52, &49152u32.to_le_bytes());
        put(&mut r, 56, &32u32.to_le_bytes());
        put(&mut r, 60, &3u32.to_le_bytes());
        put(&mut r, 64, b"NVIDIA H100 80GB HBM3");

        let info = DeviceInfo::from_record(&r);
        assert_eq!(info.driver, DriverKind::Cuda);
        assert_eq!(info.compute_capability, (9, 3));
        assert_eq!(info.multiprocessor_count, 132);
        assert_eq!(info.total_memory, 0x13_8000_0000);
        assert_eq!(info.max_threads_per_block, 1024);
        assert_eq!(info.max_block_dim, [1024, 1024, 64]);
        assert_eq!(info.max_grid_dim, [0x7fff_ffff, 65535, 65535]);
        assert_eq!(info.max_shared_memory_per_block, 49152);
        assert_eq!(info.warp_size, 32);
        assert!(info.concurrent_managed_access());
        assert!(info.memory_device_addressable());
        assert_eq!(info.name, "NVIDIA H100 80GB HBM3");
    }

    #[test]
    fn cpu_driver_unknown_driver_and_a_name_without_nul() {
        let mut r = [0u8; DEVICE_INFO_LEN];
        put(&mut r, 0, &1u32.to_le_bytes());
        put(&mut r, 60, &2u32.to_le_bytes());
        put(&mut r, 64, &[b'x'; 64]);
        let info = DeviceInfo::from_record(&r);
        assert_eq!(info.driver, DriverKind::Cpu);
        assert!(!info.concurrent_managed_access());
        assert!(info.memory_device_addressable());
        assert_eq!(info.name.len(), 64);

        put(&mut r, 0, &7u32.to_le_bytes());
        assert_eq!(DeviceInfo::from_record(&r).driver, DriverKind::Other(7));
    }
}
