//! Untrusted launch descriptors: `decode_launch_args` never panics, and every
//! guest pointer it yields lies, with the length its descriptor gives, inside
//! the guest's memory (checked here independently, with u128 arithmetic).
//!
//! Input: memory size (u32: the low 28 bits folded to at most 1 MiB, shifted
//! right by the top 4), device base (u64),
//! flags (bit 0 device-addressable; bit 1 guest.len shorter than the slice by
//! bits 2..7), args_ptr and args_count (u32; high bit clear folds them near
//! the memory and the limit), then memory bytes, repeated to the size.

#![no_main]

use libfuzzer_sys::fuzz_target;
use tensorwasm_core::abi::{GuestMemoryRef, LaunchArg, decode_launch_args};
use tensorwasm_core::{DevicePtr, KernelParam};

const MAX_MEMORY: u32 = 1 << 20;

fn take<const N: usize>(input: &mut &[u8]) -> [u8; N] {
    let mut out = [0u8; N];
    let n = input.len().min(N);
    out[..n].copy_from_slice(&input[..n]);
    *input = &input[n..];
    out
}

fn read(b: &[u8], at: u128, n: usize) -> u128 {
    let at = usize::try_from(at).unwrap();
    let mut v = 0u128;
    for (i, x) in b[at..at + n].iter().enumerate() {
        v |= u128::from(*x) << (8 * i);
    }
    v
}

fuzz_target!(|data: &[u8]| {
    let mut input = data;
    // Sizes spread over magnitudes (the top nibble shifts them down), so most
    // runs do not fill a whole MiB.
    let raw_size = u32::from_le_bytes(take(&mut input));
    let size = ((raw_size & 0x0fff_ffff) % (MAX_MEMORY + 1)) >> (raw_size >> 28);
    let base = u64::from_le_bytes(take(&mut input));
    let [flags] = take::<1>(&mut input);
    let raw_ptr = u32::from_le_bytes(take(&mut input));
    let raw_count = u32::from_le_bytes(take(&mut input));
    let args_ptr = if raw_ptr >> 31 == 0 {
        raw_ptr % (size + 64)
    } else {
        raw_ptr
    };
    let args_count = if raw_count >> 31 == 0 {
        raw_count % 70
    } else {
        raw_count
    };
    let size = size as usize;
    let mut memory = vec![0u8; size];
    if !input.is_empty() {
        for chunk in memory.chunks_mut(input.len()) {
            chunk.copy_from_slice(&input[..chunk.len()]);
        }
    }
    let guest_len = if flags & 2 != 0 {
        size.saturating_sub(usize::from(flags >> 2))
    } else {
        size
    };
    let guest = GuestMemoryRef {
        base: DevicePtr(base),
        len: guest_len,
        device_addressable: flags & 1 != 0,
    };

    let Ok(args) = decode_launch_args(&memory, &guest, args_ptr, args_count) else {
        return;
    };
    assert_eq!(args.len() as u64, u64::from(args_count), "argument count");
    assert!(args.len() <= 64);
    assert_eq!(args_ptr % 8, 0, "descriptor array not 8-aligned");
    let base = u128::from(base);
    let end = base + guest_len.min(memory.len()) as u128;
    for (i, arg) in args.iter().enumerate() {
        let at = u128::from(args_ptr) + 24 * i as u128;
        assert!(
            at + 24 <= memory.len() as u128,
            "descriptor {i} past the memory"
        );
        let (tag, align) = (read(&memory, at, 4), read(&memory, at + 4, 4));
        let (a, b) = (read(&memory, at + 8, 8), read(&memory, at + 16, 8));
        match *arg {
            LaunchArg::Param(KernelParam::Ptr(p)) => {
                let p = u128::from(p.0);
                assert_eq!(tag, 4, "argument {i}: pointer from tag {tag}");
                assert!(
                    guest.device_addressable,
                    "argument {i}: pointer to unaddressable memory"
                );
                assert!(
                    base <= p && p < end,
                    "argument {i}: {p:#x} outside {base:#x}..{end:#x}"
                );
                assert!(
                    b >= 1 && p + b <= end,
                    "argument {i}: {p:#x}+{b:#x} past {end:#x}"
                );
                assert_eq!(p - base, a, "argument {i}: address is not base + a");
                assert!(align == 0 || a % align == 0, "argument {i}: misaligned");
                assert!(
                    p + b <= u128::from(u64::MAX),
                    "argument {i}: end address overflows"
                );
            }
            LaunchArg::Param(param) => {
                assert!(tag <= 3, "argument {i}: scalar from tag {tag}");
                assert_eq!(align, 0);
                assert_eq!(b, 0);
                assert_eq!(
                    param.to_slot().map(u128::from),
                    Some(a),
                    "argument {i}: value changed"
                );
            }
            LaunchArg::Buffer { handle, offset } => {
                assert_eq!(tag, 5, "argument {i}: buffer from tag {tag}");
                assert_eq!(align, 0);
                assert_eq!(u128::from(handle.raw()), a);
                assert_eq!(u128::from(offset), b);
            }
        }
    }
});
