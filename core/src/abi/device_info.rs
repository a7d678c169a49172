//! The 128-byte record `device_info` writes into guest memory
//! (`docs/ABI.md`, "device_info"): fixed offsets, little-endian, the name
//! NUL-padded. Encoding only; the host function writes the first
//! `min(out_len, 128)` bytes.

use crate::device::{DeviceInfo, DriverKind};

/// Bytes in the whole record.
pub const DEVICE_INFO_SIZE: usize = 128;
/// Offset of the name field.
const NAME_OFFSET: usize = 64;
/// Bytes of the name field.
const NAME_LEN: usize = DEVICE_INFO_SIZE - NAME_OFFSET;

/// `flags` bit 0: host and device may touch managed memory at once.
pub const FLAG_CONCURRENT_MANAGED_ACCESS: u32 = 1 << 0;
/// `flags` bit 1: the guest's linear memory is device-addressable.
pub const FLAG_GUEST_MEMORY_ADDRESSABLE: u32 = 1 << 1;

/// The record's `driver` field.
const fn driver_code(driver: DriverKind) -> u32 {
    match driver {
        DriverKind::Cuda => 0,
        DriverKind::Cpu => 1,
    }
}

/// The longest prefix of `name` that fits `max` bytes and ends on a
/// character boundary.
fn truncated(name: &str, max: usize) -> &[u8] {
    let mut end = name.len().min(max);
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    name.as_bytes().get(..end).unwrap_or_default()
}

/// The record for `info`, from a driver of kind `driver` (what
/// `GpuDriver::kind` says; `DeviceInfo` does not carry it), for a guest
/// whose memory is (or is not) device-addressable.
pub fn encode_device_info(
    info: &DeviceInfo,
    driver: DriverKind,
    guest_memory_addressable: bool,
) -> [u8; DEVICE_INFO_SIZE] {
    let (major, minor) = info.compute_capability.unwrap_or((0, 0));
    let mut flags = 0;
    if info.concurrent_managed_access {
        flags |= FLAG_CONCURRENT_MANAGED_ACCESS;
    }
    if guest_memory_addressable {
        flags |= FLAG_GUEST_MEMORY_ADDRESSABLE;
    }
    let (bx, by, bz) = info.max_block_dim;
    let (gx, gy, gz) = info.max_grid_dim;
    // Offsets 0..16, then the u64 at 16, then 24..64: the record's table.
    let head = [driver_code(driver), major, minor, info.multiprocessor_count];
    let tail = [
        info.max_threads_per_block,
        bx,
        by,
        bz,
        gx,
        gy,
        gz,
        info.max_shared_memory_per_block,
        info.warp_size,
        flags,
    ];
    let mut out = [0u8; DEVICE_INFO_SIZE];
    let (fixed, name) = out.split_at_mut(NAME_OFFSET);
    let (head_bytes, rest) = fixed.split_at_mut(16);
    for (dst, v) in head_bytes.chunks_exact_mut(4).zip(head) {
        dst.copy_from_slice(&v.to_le_bytes());
    }
    let (memory, tail_bytes) = rest.split_at_mut(8);
    memory.copy_from_slice(&info.total_memory.to_le_bytes());
    for (dst, v) in tail_bytes.chunks_exact_mut(4).zip(tail) {
        dst.copy_from_slice(&v.to_le_bytes());
    }
    let text = truncated(&info.name, NAME_LEN);
    for (dst, src) in name.iter_mut().zip(text) {
        *dst = *src;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::String;

    fn info(name: &str) -> DeviceInfo {
        DeviceInfo {
            ordinal: 0,
            name: String::from(name),
            compute_capability: Some((9, 0)),
            multiprocessor_count: 132,
            max_threads_per_multiprocessor: 2048,
            clock_rate_khz: 1_980_000,
            total_memory: 0x0000_0013_fc00_0000,
            max_threads_per_block: 1024,
            max_block_dim: (1024, 1024, 64),
            max_grid_dim: (0x7fff_ffff, 65535, 65535),
            max_shared_memory_per_block: 49152,
            max_shared_memory_per_block_optin: 232448,
            warp_size: 32,
            concurrent_managed_access: true,
            vmm_supported: true,
            driver_version: Some((13, 0)),
        }
    }

    fn u32_at(r: &[u8; DEVICE_INFO_SIZE], at: usize) -> u32 {
        u32::from_le_bytes(r[at..at + 4].try_into().expect("4 bytes"))
    }

    #[test]
    fn fields_lie_at_the_documented_offsets() {
        let r = encode_device_info(&info("NVIDIA H100 80GB HBM3"), DriverKind::Cuda, true);
        assert_eq!(u32_at(&r, 0), 0);
        assert_eq!(u32_at(&r, 4), 9);
        assert_eq!(u32_at(&r, 8), 0);
        assert_eq!(u32_at(&r, 12), 132);
        assert_eq!(r[16..24], 0x0000_0013_fc00_0000u64.to_le_bytes());
        assert_eq!(u32_at(&r, 24), 1024);
        assert_eq!(
            [u32_at(&r, 28), u32_at(&r, 32), u32_at(&r, 36)],
            [1024, 1024, 64]
        );
        assert_eq!(
            [u32_at(&r, 40), u32_at(&r, 44), u32_at(&r, 48)],
            [0x7fff_ffff, 65535, 65535]
        );
        assert_eq!(u32_at(&r, 52), 49152);
        assert_eq!(u32_at(&r, 56), 32);
        assert_eq!(u32_at(&r, 60), 0b11);
        assert_eq!(&r[64..85], b"NVIDIA H100 80GB HBM3");
        assert!(r[85..].iter().all(|&b| b == 0));
    }

    #[test]
    fn cpu_driver_and_flags() {
        let mut d = info("cpu");
        d.compute_capability = None;
        d.concurrent_managed_access = false;
        let r = encode_device_info(&d, DriverKind::Cpu, false);
        assert_eq!([u32_at(&r, 0), u32_at(&r, 4), u32_at(&r, 8)], [1, 0, 0]);
        assert_eq!(u32_at(&r, 60), 0);
        let r = encode_device_info(&d, DriverKind::Cpu, true);
        assert_eq!(u32_at(&r, 60), FLAG_GUEST_MEMORY_ADDRESSABLE);
        d.concurrent_managed_access = true;
        let r = encode_device_info(&d, DriverKind::Cpu, false);
        assert_eq!(u32_at(&r, 60), FLAG_CONCURRENT_MANAGED_ACCESS);
    }

    #[test]
    fn names_are_cut_on_a_character_boundary() {
        let exact = "x".repeat(64);
        let r = encode_device_info(&info(&exact), DriverKind::Cuda, false);
        assert_eq!(&r[64..], exact.as_bytes());
        let long = "y".repeat(65);
        let r = encode_device_info(&info(&long), DriverKind::Cuda, false);
        assert_eq!(&r[64..], &long.as_bytes()[..64]);
        // 63 ASCII bytes then a 2-byte char: the char does not fit and is dropped.
        let split = alloc::format!("{}é", "z".repeat(63));
        let r = encode_device_info(&info(&split), DriverKind::Cuda, false);
        assert_eq!(&r[64..127], "z".repeat(63).as_bytes());
        assert_eq!(r[127], 0);
        // 4-byte chars: 16 fit exactly.
        let wide = "🦀".repeat(17);
        let r = encode_device_info(&info(&wide), DriverKind::Cuda, false);
        assert_eq!(&r[64..], "🦀".repeat(16).as_bytes());
        let r = encode_device_info(&info(""), DriverKind::Cuda, false);
        assert!(r[64..].iter().all(|&b| b == 0));
        assert!(core::str::from_utf8(&r[64..]).is_ok());
    }
}
