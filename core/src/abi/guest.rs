//! Reads and writes of guest linear memory on the guest's terms: `u32`
//! offsets, ranges checked for overflow and bounds, out-pointers checked for
//! alignment, integers little-endian. The memory is the guest's whole linear
//! memory as a byte slice; nothing here keeps it.
//!
//! Check order, everywhere: alignment (`EALIGN`), then overflow
//! (`EOVERFLOW`), then bounds (`EFAULT`), then contents (`EINVAL`).

use alloc::format;
use core::ops::Range;

use super::errno::AbiError;

/// One past the last offset a memory32 guest can name.
const MEMORY32_END: u64 = 1 << 32;

/// A guest `i32` parameter as the ABI reads it: its bits, as `u32`.
pub const fn param_u32(value: i32) -> u32 {
    value as u32
}

/// A guest `i64` parameter as the ABI reads it: its bits, as `u64`.
pub const fn param_u64(value: i64) -> u64 {
    value as u64
}

/// A guest `i32` that must not be negative (a buffer length, say):
/// [`Errno::EINVAL`](super::Errno::EINVAL) naming `what` when it is.
pub fn non_negative(what: &'static str, value: i32) -> Result<u32, AbiError> {
    u32::try_from(value).map_err(|_| AbiError::invalid(format!("{what} is negative ({value})")))
}

/// `usize` to `u64`: lossless on every target Rust supports; saturates
/// rather than panics if one ever is not.
pub(crate) fn len_u64(len: usize) -> u64 {
    u64::try_from(len).unwrap_or(u64::MAX)
}

/// The host indices of `ptr .. ptr + len` in a memory of `mem_len` bytes.
///
/// `EOVERFLOW` when the end does not fit in the 32-bit address space of a
/// memory32 guest (past 2^32), `EFAULT` when it lies past `mem_len`. An
/// empty range is fine anywhere up to and including `mem_len`.
pub fn guest_range(mem_len: usize, ptr: u32, len: u64) -> Result<Range<usize>, AbiError> {
    let start = u64::from(ptr);
    let Some(end) = start.checked_add(len).filter(|&end| end <= MEMORY32_END) else {
        return Err(AbiError::overflow(format!(
            "guest range {start:#x}+{len:#x} does not fit in 32-bit guest memory"
        )));
    };
    let mem = len_u64(mem_len);
    if end > mem {
        return Err(AbiError::fault(format!(
            "guest range {start:#x}+{len:#x} ends past memory of {mem:#x} bytes"
        )));
    }
    match (usize::try_from(start), usize::try_from(end)) {
        (Ok(start), Ok(end)) => Ok(start..end),
        _ => Err(AbiError::fault(format!(
            "guest range {start:#x}+{len:#x} is not addressable on this host"
        ))),
    }
}

/// The bytes of `ptr .. ptr + len`; errors as [`guest_range`].
pub fn guest_slice(mem: &[u8], ptr: u32, len: u64) -> Result<&[u8], AbiError> {
    let range = guest_range(mem.len(), ptr, len)?;
    mem.get(range)
        .ok_or_else(|| AbiError::fault(format!("guest range {ptr:#x}+{len:#x} is out of bounds")))
}

/// The bytes of `ptr .. ptr + len`, writable; errors as [`guest_range`].
pub fn guest_slice_mut(mem: &mut [u8], ptr: u32, len: u64) -> Result<&mut [u8], AbiError> {
    let range = guest_range(mem.len(), ptr, len)?;
    mem.get_mut(range)
        .ok_or_else(|| AbiError::fault(format!("guest range {ptr:#x}+{len:#x} is out of bounds")))
}

/// `EALIGN` unless `ptr` is a multiple of `N` (the size of the value there).
fn check_aligned<const N: usize>(ptr: u32) -> Result<(), AbiError> {
    let align = u32::try_from(N).unwrap_or(1);
    if ptr.checked_rem(align).unwrap_or(0) != 0 {
        return Err(AbiError::misaligned(format!(
            "guest pointer {ptr:#x} to a {}-byte value is not {align}-aligned",
            N
        )));
    }
    Ok(())
}

/// The `N` bytes at `ptr`, which must be `N`-aligned.
fn read_array<const N: usize>(mem: &[u8], ptr: u32) -> Result<[u8; N], AbiError> {
    check_aligned::<N>(ptr)?;
    let bytes = guest_slice(mem, ptr, len_u64(N))?;
    bytes
        .first_chunk::<N>()
        .copied()
        .ok_or_else(|| AbiError::fault(format!("guest pointer {ptr:#x} is out of bounds")))
}

/// Writes `N` bytes at `ptr`, which must be `N`-aligned; on error nothing
/// is written.
fn write_array<const N: usize>(mem: &mut [u8], ptr: u32, bytes: [u8; N]) -> Result<(), AbiError> {
    check_aligned::<N>(ptr)?;
    let dst = guest_slice_mut(mem, ptr, len_u64(N))?;
    dst.copy_from_slice(&bytes);
    Ok(())
}

/// The little-endian `u32` at `ptr` (4-aligned).
pub fn read_u32(mem: &[u8], ptr: u32) -> Result<u32, AbiError> {
    read_array(mem, ptr).map(u32::from_le_bytes)
}

/// The little-endian `u64` at `ptr` (8-aligned).
pub fn read_u64(mem: &[u8], ptr: u32) -> Result<u64, AbiError> {
    read_array(mem, ptr).map(u64::from_le_bytes)
}

/// Writes `value` little-endian at `ptr` (4-aligned): a `u32` out-pointer.
pub fn write_u32(mem: &mut [u8], ptr: u32, value: u32) -> Result<(), AbiError> {
    write_array(mem, ptr, value.to_le_bytes())
}

/// Writes `value` little-endian at `ptr` (8-aligned): a `u64` out-pointer.
pub fn write_u64(mem: &mut [u8], ptr: u32, value: u64) -> Result<(), AbiError> {
    write_array(mem, ptr, value.to_le_bytes())
}

/// Copies `bytes` to `ptr .. ptr + bytes.len()` (no alignment needed); on
/// error nothing is written.
pub fn write_bytes(mem: &mut [u8], ptr: u32, bytes: &[u8]) -> Result<(), AbiError> {
    let dst = guest_slice_mut(mem, ptr, len_u64(bytes.len()))?;
    dst.copy_from_slice(bytes);
    Ok(())
}

/// The text at `ptr .. ptr + len`: range errors as [`guest_range`], then
/// `EINVAL` when it is empty, holds a NUL or is not UTF-8.
pub fn read_str(mem: &[u8], ptr: u32, len: u32) -> Result<&str, AbiError> {
    let bytes = guest_slice(mem, ptr, u64::from(len))?;
    if bytes.is_empty() {
        return Err(AbiError::invalid(format!("text at {ptr:#x} is empty")));
    }
    if let Some(at) = bytes.iter().position(|&b| b == 0) {
        return Err(AbiError::invalid(format!(
            "text at {ptr:#x} holds a NUL at byte {at}"
        )));
    }
    core::str::from_utf8(bytes).map_err(|e| {
        AbiError::invalid(format!(
            "text at {ptr:#x} is not UTF-8 (bad byte at {})",
            e.valid_up_to()
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::abi::Errno;
    use alloc::vec;

    fn errno<T: core::fmt::Debug>(r: Result<T, AbiError>) -> Errno {
        match r {
            Err(e) => e.errno,
            Ok(v) => panic!("expected an error, got {v:?}"),
        }
    }

    #[test]
    fn ranges_at_the_edges() {
        let len = 0x18usize;
        assert_eq!(guest_range(len, 0, 0), Ok(0..0));
        assert_eq!(guest_range(len, 0, 0x18), Ok(0..0x18));
        assert_eq!(guest_range(len, 0x17, 1), Ok(0x17..0x18));
        assert_eq!(guest_range(len, 0x18, 0), Ok(0x18..0x18));
        assert_eq!(errno(guest_range(len, 0x18, 1)), Errno::EFAULT);
        assert_eq!(errno(guest_range(len, 0x19, 0)), Errno::EFAULT);
        assert_eq!(errno(guest_range(len, 0, 0x19)), Errno::EFAULT);
        assert_eq!(errno(guest_range(len, 0x17, 2)), Errno::EFAULT);
        assert_eq!(errno(guest_range(0, 0, 1)), Errno::EFAULT);
        assert_eq!(guest_range(0, 0, 0), Ok(0..0));
        let e = guest_range(len, 0x10, 0x20).expect_err("past the end");
        assert_eq!(
            alloc::string::ToString::to_string(&e),
            "EFAULT: guest range 0x10+0x20 ends past memory of 0x18 bytes"
        );
        // A memory32 range may end at 2^32 but not past it.
        assert_eq!(errno(guest_range(len, u32::MAX, 1)), Errno::EFAULT);
        assert_eq!(errno(guest_range(len, u32::MAX, 2)), Errno::EOVERFLOW);
        assert_eq!(
            errno(guest_range(len, 1, u64::from(u32::MAX))),
            Errno::EFAULT
        );
        assert_eq!(
            errno(guest_range(len, 1, u64::from(u32::MAX) + 1)),
            Errno::EOVERFLOW
        );
        assert_eq!(errno(guest_range(len, 0, u64::MAX)), Errno::EOVERFLOW);
        assert_eq!(
            errno(guest_range(len, u32::MAX, u64::MAX)),
            Errno::EOVERFLOW
        );
        assert_eq!(
            errno(guest_range(usize::MAX, u32::MAX, 2)),
            Errno::EOVERFLOW
        );
        assert_eq!(
            guest_range(usize::MAX, u32::MAX, 1),
            Ok(u32::MAX as usize..(1usize << 32))
        );
    }

    #[test]
    fn integers_are_little_endian_aligned_and_bounded() {
        let mut mem = vec![0xa5u8; 16];
        write_u32(&mut mem, 4, 0x0102_0304).expect("in bounds");
        assert_eq!(mem[4..8], [4, 3, 2, 1]);
        assert_eq!(read_u32(&mem, 4), Ok(0x0102_0304));
        write_u64(&mut mem, 8, 0x0102_0304_0506_0708).expect("in bounds");
        assert_eq!(mem[8..16], [8, 7, 6, 5, 4, 3, 2, 1]);
        assert_eq!(read_u64(&mem, 8), Ok(0x0102_0304_0506_0708));
        write_u32(&mut mem, 12, u32::MAX).expect("last word");
        assert_eq!(read_u32(&mem, 12), Ok(u32::MAX));
        let before = mem.clone();
        for ptr in [1, 2, 3, 13, 15, u32::MAX] {
            assert_eq!(errno(read_u32(&mem, ptr)), Errno::EALIGN, "{ptr}");
            assert_eq!(errno(write_u32(&mut mem, ptr, 7)), Errno::EALIGN, "{ptr}");
        }
        for ptr in [4, 12, 1, 7, u32::MAX - 3] {
            assert_eq!(errno(read_u64(&mem, ptr)), Errno::EALIGN, "{ptr}");
            assert_eq!(errno(write_u64(&mut mem, ptr, 7)), Errno::EALIGN, "{ptr}");
        }
        for ptr in [16, 20, u32::MAX - 3] {
            assert_eq!(errno(read_u32(&mem, ptr)), Errno::EFAULT, "{ptr}");
            assert_eq!(errno(write_u32(&mut mem, ptr, 7)), Errno::EFAULT, "{ptr}");
        }
        for ptr in [16, 24, u32::MAX - 7] {
            assert_eq!(errno(read_u64(&mem, ptr)), Errno::EFAULT, "{ptr}");
            assert_eq!(errno(write_u64(&mut mem, ptr, 7)), Errno::EFAULT, "{ptr}");
        }
        assert_eq!(mem, before, "a failed write wrote");
        assert_eq!(errno(read_u32(&[], 0)), Errno::EFAULT);
        assert_eq!(errno(read_u32(&[1, 2, 3], 0)), Errno::EFAULT);
    }

    #[test]
    fn byte_writes_are_all_or_nothing() {
        let mut mem = vec![0x5au8; 8];
        write_bytes(&mut mem, 5, &[1, 2, 3]).expect("fits");
        assert_eq!(mem[5..], [1, 2, 3]);
        assert_eq!(errno(write_bytes(&mut mem, 6, &[9, 9, 9])), Errno::EFAULT);
        assert_eq!(
            errno(write_bytes(&mut mem, u32::MAX, &[9, 9])),
            Errno::EOVERFLOW
        );
        assert_eq!(mem[5..], [1, 2, 3]);
        write_bytes(&mut mem, 8, &[]).expect("empty at the end");
        assert_eq!(errno(write_bytes(&mut mem, 9, &[])), Errno::EFAULT);
        assert_eq!(guest_slice(&mem, 5, 3), Ok(&[1u8, 2, 3][..]));
    }

    #[test]
    fn strings_are_nonempty_utf8_without_nul() {
        let mut mem = vec![0u8; 32];
        mem[..7].copy_from_slice(b"vadd\xc3\xa9x");
        assert_eq!(read_str(&mem, 0, 4), Ok("vadd"));
        assert_eq!(read_str(&mem, 0, 7), Ok("vadd\u{e9}x"));
        assert_eq!(errno(read_str(&mem, 0, 5)), Errno::EINVAL, "cut in a char");
        assert_eq!(
            errno(read_str(&mem, 5, 1)),
            Errno::EINVAL,
            "continuation byte"
        );
        assert_eq!(errno(read_str(&mem, 0, 8)), Errno::EINVAL, "holds a NUL");
        assert_eq!(errno(read_str(&mem, 3, 0)), Errno::EINVAL, "empty");
        assert_eq!(errno(read_str(&mem, 33, 0)), Errno::EFAULT);
        assert_eq!(errno(read_str(&mem, 30, 3)), Errno::EFAULT);
        assert_eq!(errno(read_str(&mem, u32::MAX, u32::MAX)), Errno::EOVERFLOW);
        let e = read_str(&mem, 0, 8).expect_err("NUL");
        assert!(e.reason.contains("NUL at byte 7"), "{e}");
    }

    #[test]
    fn guest_integers_are_read_as_unsigned() {
        assert_eq!(param_u32(-1), u32::MAX);
        assert_eq!(param_u32(i32::MIN), 0x8000_0000);
        assert_eq!(param_u64(-1), u64::MAX);
        assert_eq!(non_negative("out_len", 0), Ok(0));
        assert_eq!(non_negative("out_len", i32::MAX), Ok(i32::MAX as u32));
        assert_eq!(errno(non_negative("out_len", -1)), Errno::EINVAL);
        assert_eq!(errno(non_negative("out_len", i32::MIN)), Errno::EINVAL);
    }
}
