//! Launch arguments: the 24-byte descriptors a guest passes to `launch`,
//! decoded into kernel parameters with every guest pointer checked against
//! the guest's memory. The decoder never yields an address outside the
//! guest's memory; buffer arguments come back undecoded (a handle and an
//! offset) for the caller to resolve against its buffer table with
//! [`resolve_buffer_pointer`].
//!
//! Descriptor (`docs/ABI.md`): `u32 tag`, `u32 align`, `u64 a`, `u64 b`,
//! little-endian.

use alloc::{format, vec::Vec};
use core::fmt;

use super::errno::{AbiError, Errno};
use super::guest::{guest_range, len_u64};
use super::handle::Handle;
use crate::launch::{KernelParam, MAX_KERNEL_PARAMS};
use crate::memory::DevicePtr;

/// Bytes in one argument descriptor.
pub const ARG_DESCRIPTOR_SIZE: usize = 24;
/// The largest `align` a guest pointer may ask for.
pub const MAX_ARG_ALIGN: u32 = 4096;
/// Required alignment of the descriptor array in guest memory.
const DESCRIPTOR_ALIGN: u32 = 8;

/// The kind of an argument descriptor: its `tag` field.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[repr(u32)]
pub enum ArgTag {
    /// An `i32`, in the low 32 bits of `a`.
    I32 = 0,
    /// An `i64` in `a`.
    I64 = 1,
    /// An `f32`'s bits, in the low 32 bits of `a`.
    F32 = 2,
    /// An `f64`'s bits in `a`.
    F64 = 3,
    /// A guest range: offset `a`, length `b`, alignment `align`.
    GuestPtr = 4,
    /// A buffer: handle `a`, byte offset `b`.
    BufferPtr = 5,
}

impl ArgTag {
    /// The tag with this value, or `None` for an unknown one.
    pub const fn from_u32(tag: u32) -> Option<ArgTag> {
        match tag {
            0 => Some(ArgTag::I32),
            1 => Some(ArgTag::I64),
            2 => Some(ArgTag::F32),
            3 => Some(ArgTag::F64),
            4 => Some(ArgTag::GuestPtr),
            5 => Some(ArgTag::BufferPtr),
            _ => None,
        }
    }

    /// The tag's value in a descriptor.
    pub const fn to_u32(self) -> u32 {
        self as u32
    }

    /// The tag's name in error text.
    pub const fn name(self) -> &'static str {
        match self {
            ArgTag::I32 => "i32",
            ArgTag::I64 => "i64",
            ArgTag::F32 => "f32",
            ArgTag::F64 => "f64",
            ArgTag::GuestPtr => "guest pointer",
            ArgTag::BufferPtr => "buffer pointer",
        }
    }
}

impl fmt::Display for ArgTag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One argument descriptor, field by field, as it lies in guest memory.
/// Any bit pattern is a descriptor; [`decode_launch_args`] decides whether
/// it is a valid one. The constructors build valid ones (for tests and the
/// host's test guests).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct ArgDescriptor {
    /// The kind, an [`ArgTag`] value.
    pub tag: u32,
    /// A guest pointer's required alignment (0 or a power of two up to
    /// [`MAX_ARG_ALIGN`]); 0 for every other tag.
    pub align: u32,
    /// The value, offset or handle.
    pub a: u64,
    /// A guest pointer's length or a buffer's offset; 0 for scalars.
    pub b: u64,
}

impl ArgDescriptor {
    const fn scalar(tag: ArgTag, a: u64) -> Self {
        ArgDescriptor {
            tag: tag.to_u32(),
            align: 0,
            a,
            b: 0,
        }
    }

    /// An `i32` argument.
    pub const fn i32(value: i32) -> Self {
        ArgDescriptor::scalar(ArgTag::I32, value as u32 as u64)
    }

    /// An `i64` argument.
    pub const fn i64(value: i64) -> Self {
        ArgDescriptor::scalar(ArgTag::I64, value as u64)
    }

    /// An `f32` argument.
    pub const fn f32(value: f32) -> Self {
        ArgDescriptor::scalar(ArgTag::F32, value.to_bits() as u64)
    }

    /// An `f64` argument.
    pub const fn f64(value: f64) -> Self {
        ArgDescriptor::scalar(ArgTag::F64, value.to_bits())
    }

    /// A pointer to `len` bytes of guest memory at `offset`, any alignment.
    pub const fn guest(offset: u64, len: u64) -> Self {
        ArgDescriptor::guest_aligned(offset, len, 0)
    }

    /// A pointer to `len` bytes of guest memory at `offset`, which must be
    /// a multiple of `align`.
    pub const fn guest_aligned(offset: u64, len: u64, align: u32) -> Self {
        ArgDescriptor {
            tag: ArgTag::GuestPtr.to_u32(),
            align,
            a: offset,
            b: len,
        }
    }

    /// A pointer `offset` bytes into the buffer `handle` names.
    pub const fn buffer(handle: Handle, offset: u64) -> Self {
        ArgDescriptor {
            tag: ArgTag::BufferPtr.to_u32(),
            align: 0,
            a: handle.raw(),
            b: offset,
        }
    }

    /// The descriptor's 24 bytes, little-endian.
    pub fn to_bytes(&self) -> [u8; ARG_DESCRIPTOR_SIZE] {
        let mut out = [0u8; ARG_DESCRIPTOR_SIZE];
        let (tag, rest) = out.split_at_mut(4);
        tag.copy_from_slice(&self.tag.to_le_bytes());
        let (align, rest) = rest.split_at_mut(4);
        align.copy_from_slice(&self.align.to_le_bytes());
        let (a, b) = rest.split_at_mut(8);
        a.copy_from_slice(&self.a.to_le_bytes());
        b.copy_from_slice(&self.b.to_le_bytes());
        out
    }

    /// The descriptor these 24 bytes hold.
    pub fn from_bytes(bytes: &[u8; ARG_DESCRIPTOR_SIZE]) -> Self {
        let [t0, t1, t2, t3, l0, l1, l2, l3, rest @ ..] = *bytes;
        let [a0, a1, a2, a3, a4, a5, a6, a7, b @ ..] = rest;
        ArgDescriptor {
            tag: u32::from_le_bytes([t0, t1, t2, t3]),
            align: u32::from_le_bytes([l0, l1, l2, l3]),
            a: u64::from_le_bytes([a0, a1, a2, a3, a4, a5, a6, a7]),
            b: u64::from_le_bytes(b),
        }
    }
}

/// Descriptors laid end to end, as a guest puts them in its memory.
pub fn encode_args(args: &[ArgDescriptor]) -> Vec<u8> {
    args.iter().flat_map(ArgDescriptor::to_bytes).collect()
}

/// Where the guest's linear memory is for the device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub struct GuestMemoryRef {
    /// The device address of the memory's first byte.
    pub base: DevicePtr,
    /// The memory's current size in bytes.
    pub len: usize,
    /// A kernel may dereference the memory (it came from the managed
    /// allocator).
    pub device_addressable: bool,
}

/// One decoded launch argument.
#[derive(Clone, Copy, Debug, PartialEq)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
pub enum LaunchArg {
    /// A parameter ready for the driver: a scalar, or the device address of
    /// a checked range of guest memory.
    Param(KernelParam),
    /// A buffer pointer, still to be resolved against the caller's buffer
    /// table (with [`resolve_buffer_pointer`]).
    Buffer {
        /// The buffer's handle, as the guest gave it (unchecked).
        handle: Handle,
        /// The byte offset into the buffer (unchecked).
        offset: u64,
    },
}

/// Decodes `args_count` descriptors at `args_ptr` in the guest's `memory`.
///
/// Checks, in this order, each failure ending the decode:
/// 1. `args_count` above [`MAX_KERNEL_PARAMS`]: `ELIMIT`;
/// 2. `args_ptr` not 8-aligned: `EALIGN`;
/// 3. `args_ptr + 24 * args_count` past 2^32: `EOVERFLOW`;
/// 4. that range past `memory.len()`: `EFAULT`;
/// 5. then each descriptor in turn: an unknown tag, `align` set on a tag
///    other than 4, high bits of an `i32`/`f32` set, `b` set on a scalar, a
///    zero-length guest pointer, or an `align` that is not 0 or a power of
///    two up to 4096: `EINVAL`; for a guest pointer, `a + b` overflowing:
///    `EOVERFLOW`; `a + b` past the memory (the smaller of `memory.len()`
///    and `guest.len`): `EFAULT`; `a` not a multiple of `align`: `EALIGN`;
///    memory the device cannot address: `ENOTADDR`; `guest.base + a + b`
///    overflowing: `EOVERFLOW`.
///
/// Errors name the argument, e.g. `argument 3: guest range 0x10+0x20 ends
/// past memory of 0x18 bytes`.
pub fn decode_launch_args(
    memory: &[u8],
    guest: &GuestMemoryRef,
    args_ptr: u32,
    args_count: u32,
) -> Result<Vec<LaunchArg>, AbiError> {
    let count = usize::try_from(args_count).unwrap_or(usize::MAX);
    if count > MAX_KERNEL_PARAMS {
        return Err(AbiError::limit(format!(
            "{args_count} launch arguments, more than {MAX_KERNEL_PARAMS}"
        )));
    }
    if !args_ptr.is_multiple_of(DESCRIPTOR_ALIGN) {
        return Err(AbiError::misaligned(format!(
            "argument descriptors at {args_ptr:#x} are not {DESCRIPTOR_ALIGN}-aligned"
        )));
    }
    // count <= 64, so the product is at most 1536.
    let bytes = len_u64(ARG_DESCRIPTOR_SIZE).saturating_mul(u64::from(args_count));
    let range = guest_range(memory.len(), args_ptr, bytes)
        .map_err(|e| e.context("argument descriptors"))?;
    let array = memory.get(range).ok_or_else(|| {
        AbiError::fault(format!(
            "argument descriptors at {args_ptr:#x} are out of bounds"
        ))
    })?;
    let (descriptors, _) = array.as_chunks::<ARG_DESCRIPTOR_SIZE>();
    let mem_len = len_u64(memory.len().min(guest.len));
    let mut args = Vec::with_capacity(count);
    for (index, bytes) in descriptors.iter().enumerate() {
        let descriptor = ArgDescriptor::from_bytes(bytes);
        let arg = decode_one(&descriptor, guest, mem_len)
            .map_err(|e| e.context(format_args!("argument {index}")))?;
        args.push(arg);
    }
    Ok(args)
}

/// One descriptor's checks (see [`decode_launch_args`]), against a memory
/// of `mem_len` bytes.
fn decode_one(
    d: &ArgDescriptor,
    guest: &GuestMemoryRef,
    mem_len: u64,
) -> Result<LaunchArg, AbiError> {
    let Some(tag) = ArgTag::from_u32(d.tag) else {
        return Err(AbiError::invalid(format!("unknown tag {}", d.tag)));
    };
    if tag != ArgTag::GuestPtr && d.align != 0 {
        return Err(AbiError::invalid(format!(
            "align {} set on a {tag} argument (must be 0)",
            d.align
        )));
    }
    let param = match tag {
        ArgTag::I32 | ArgTag::F32 if d.a > u64::from(u32::MAX) => {
            return Err(AbiError::invalid(format!(
                "{tag} value {:#x} has its high 32 bits set",
                d.a
            )));
        }
        ArgTag::I32 | ArgTag::I64 | ArgTag::F32 | ArgTag::F64 if d.b != 0 => {
            return Err(AbiError::invalid(format!(
                "b is {:#x} on a {tag} argument (must be 0)",
                d.b
            )));
        }
        ArgTag::I32 => KernelParam::I32(low_u32(d.a) as i32),
        ArgTag::I64 => KernelParam::I64(d.a as i64),
        ArgTag::F32 => KernelParam::F32(f32::from_bits(low_u32(d.a))),
        ArgTag::F64 => KernelParam::F64(f64::from_bits(d.a)),
        ArgTag::GuestPtr => KernelParam::Ptr(guest_pointer(d, guest, mem_len)?),
        ArgTag::BufferPtr => {
            return Ok(LaunchArg::Buffer {
                handle: Handle(d.a),
                offset: d.b,
            });
        }
    };
    Ok(LaunchArg::Param(param))
}

/// The low 32 bits (the caller has checked the high ones are 0).
fn low_u32(v: u64) -> u32 {
    u32::try_from(v & u64::from(u32::MAX)).unwrap_or(0)
}

/// The device address of a guest-pointer descriptor's range, checked.
fn guest_pointer(
    d: &ArgDescriptor,
    guest: &GuestMemoryRef,
    mem_len: u64,
) -> Result<DevicePtr, AbiError> {
    let (offset, len, align) = (d.a, d.b, d.align);
    if len == 0 {
        return Err(AbiError::invalid(format!(
            "guest pointer {offset:#x} has length 0"
        )));
    }
    if align != 0 && (!align.is_power_of_two() || align > MAX_ARG_ALIGN) {
        return Err(AbiError::invalid(format!(
            "align {align} is not 0 or a power of two up to {MAX_ARG_ALIGN}"
        )));
    }
    let Some(end) = offset.checked_add(len) else {
        return Err(AbiError::overflow(format!(
            "guest range {offset:#x}+{len:#x} overflows 64 bits"
        )));
    };
    if end > mem_len {
        return Err(AbiError::fault(format!(
            "guest range {offset:#x}+{len:#x} ends past memory of {mem_len:#x} bytes"
        )));
    }
    if align != 0 && !offset.is_multiple_of(u64::from(align)) {
        return Err(AbiError::misaligned(format!(
            "guest pointer {offset:#x} is not {align}-aligned"
        )));
    }
    if !guest.device_addressable {
        return Err(AbiError::new(
            Errno::ENOTADDR,
            "guest memory is not device-addressable (not from the managed allocator)",
        ));
    }
    let base = guest.base.0;
    match base.checked_add(end) {
        Some(_) => Ok(DevicePtr(base.wrapping_add(offset))),
        None => Err(AbiError::overflow(format!(
            "device address {base:#x}+{end:#x} overflows 64 bits"
        ))),
    }
}

/// The device address `offset` bytes into a buffer at `buffer_base` of
/// `buffer_len` bytes: `EFAULT` unless `offset < buffer_len`, `EOVERFLOW`
/// if the address does not fit.
pub fn resolve_buffer_pointer(
    buffer_base: DevicePtr,
    buffer_len: usize,
    offset: u64,
) -> Result<KernelParam, AbiError> {
    let len = len_u64(buffer_len);
    if offset >= len {
        return Err(AbiError::fault(format!(
            "buffer offset {offset:#x} is not below the buffer's size {len:#x}"
        )));
    }
    buffer_base
        .0
        .checked_add(offset)
        .map(|p| KernelParam::Ptr(DevicePtr(p)))
        .ok_or_else(|| {
            AbiError::overflow(format!(
                "device address {buffer_base}+{offset:#x} overflows 64 bits"
            ))
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::abi::handle::{HandleKind, OwnerId};
    use crate::abi::tests::Rng;
    use alloc::string::ToString;
    use alloc::vec;

    const BASE: DevicePtr = DevicePtr(0x7f00_0000_0000);

    fn guest(len: usize) -> GuestMemoryRef {
        GuestMemoryRef {
            base: BASE,
            len,
            device_addressable: true,
        }
    }

    /// `len` bytes of memory with `args` at `ptr`.
    fn memory_with(len: usize, ptr: usize, args: &[ArgDescriptor]) -> Vec<u8> {
        let mut mem = vec![0xa5u8; len];
        let bytes = encode_args(args);
        mem[ptr..ptr + bytes.len()].copy_from_slice(&bytes);
        mem
    }

    /// Decodes `args` placed at 0 in a memory of `len` bytes.
    fn decode(len: usize, args: &[ArgDescriptor]) -> Result<Vec<LaunchArg>, AbiError> {
        let mem = memory_with(len.max(24 * args.len()), 0, args);
        let g = guest(len.max(24 * args.len()));
        decode_launch_args(&mem, &g, 0, args.len() as u32)
    }

    fn errno(r: Result<Vec<LaunchArg>, AbiError>) -> Errno {
        match r {
            Err(e) => e.errno,
            Ok(v) => panic!("expected an error, got {v:?}"),
        }
    }

    fn one_errno(len: usize, d: ArgDescriptor) -> Errno {
        let mem = memory_with(len.max(24), 0, &[d]);
        errno(decode_launch_args(&mem, &guest(len), 0, 1))
    }

    #[test]
    fn descriptor_layout() {
        let d = ArgDescriptor {
            tag: 0x0403_0201,
            align: 0x0807_0605,
            a: 0x100f_0e0d_0c0b_0a09,
            b: 0x1817_1615_1413_1211,
        };
        let bytes = d.to_bytes();
        let expected: Vec<u8> = (1..=24).collect();
        assert_eq!(bytes[..], expected[..]);
        assert_eq!(ArgDescriptor::from_bytes(&bytes), d);
        assert_eq!(
            ArgDescriptor::i32(-1).to_bytes()[8..16],
            [0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0]
        );
        assert_eq!(
            ArgDescriptor::guest_aligned(8, 16, 8).to_bytes()[..8],
            [4, 0, 0, 0, 8, 0, 0, 0]
        );
    }

    #[test]
    fn scalars_decode() {
        let args = [
            ArgDescriptor::i32(-7),
            ArgDescriptor::i32(i32::MIN),
            ArgDescriptor::i64(i64::MIN),
            ArgDescriptor::f32(-1.5),
            ArgDescriptor::f64(f64::MAX),
            ArgDescriptor {
                tag: 0,
                align: 0,
                a: u64::from(u32::MAX),
                b: 0,
            },
        ];
        let decoded = decode(0, &args).expect("valid");
        assert_eq!(
            decoded,
            [
                LaunchArg::Param(KernelParam::I32(-7)),
                LaunchArg::Param(KernelParam::I32(i32::MIN)),
                LaunchArg::Param(KernelParam::I64(i64::MIN)),
                LaunchArg::Param(KernelParam::F32(-1.5)),
                LaunchArg::Param(KernelParam::F64(f64::MAX)),
                LaunchArg::Param(KernelParam::I32(-1)),
            ]
        );
    }

    #[test]
    fn argument_counts() {
        let mem = vec![0u8; 24 * 65];
        let g = guest(mem.len());
        assert_eq!(decode_launch_args(&mem, &g, 0, 0), Ok(vec![]));
        assert_eq!(decode_launch_args(&[], &guest(0), 0, 0), Ok(vec![]));
        let zeros = decode_launch_args(&mem, &g, 0, 64).expect("64 zero descriptors are i32 0");
        assert_eq!(zeros.len(), 64);
        assert!(
            zeros
                .iter()
                .all(|a| *a == LaunchArg::Param(KernelParam::I32(0)))
        );
        for count in [65, 1000, u32::MAX] {
            assert_eq!(errno(decode_launch_args(&mem, &g, 0, count)), Errno::ELIMIT);
            // The count is checked before the pointer.
            assert_eq!(errno(decode_launch_args(&mem, &g, 3, count)), Errno::ELIMIT);
        }
    }

    #[test]
    fn descriptor_array_checks_in_order() {
        let mem = vec![0u8; 48];
        let g = guest(48);
        for ptr in [1, 4, 7, u32::MAX] {
            assert_eq!(
                errno(decode_launch_args(&mem, &g, ptr, 1)),
                Errno::EALIGN,
                "{ptr}"
            );
            assert_eq!(
                errno(decode_launch_args(&mem, &g, ptr, 0)),
                Errno::EALIGN,
                "{ptr}"
            );
        }
        // Past 2^32 is overflow for a memory32 guest, before bounds.
        assert_eq!(
            errno(decode_launch_args(&mem, &g, 0xffff_fff8, 1)),
            Errno::EOVERFLOW
        );
        assert_eq!(
            errno(decode_launch_args(&mem, &g, 0xffff_ff00, 64)),
            Errno::EOVERFLOW
        );
        assert_eq!(
            errno(decode_launch_args(&mem, &g, 0xffff_fff8, 0)),
            Errno::EFAULT
        );
        assert_eq!(decode_launch_args(&mem, &g, 24, 1).map(|v| v.len()), Ok(1));
        assert_eq!(decode_launch_args(&mem, &g, 0, 2).map(|v| v.len()), Ok(2));
        assert_eq!(errno(decode_launch_args(&mem, &g, 0, 3)), Errno::EFAULT);
        assert_eq!(errno(decode_launch_args(&mem, &g, 32, 1)), Errno::EFAULT);
        assert_eq!(decode_launch_args(&mem, &g, 48, 0), Ok(vec![]));
        assert_eq!(errno(decode_launch_args(&mem, &g, 56, 0)), Errno::EFAULT);
        // The memory slice is the authority for the array, not guest.len.
        assert_eq!(
            errno(decode_launch_args(&mem[..40], &g, 24, 1)),
            Errno::EFAULT
        );
    }

    #[test]
    fn bad_tags_and_reserved_fields_are_einval() {
        for tag in [6, 7, 0x100, u32::MAX] {
            let d = ArgDescriptor {
                tag,
                align: 0,
                a: 0,
                b: 0,
            };
            assert_eq!(one_errno(64, d), Errno::EINVAL, "tag {tag}");
        }
        for tag in [0, 1, 2, 3, 5] {
            for align in [1, 4, 4096, u32::MAX] {
                let d = ArgDescriptor {
                    tag,
                    align,
                    a: 0,
                    b: 0,
                };
                assert_eq!(one_errno(64, d), Errno::EINVAL, "tag {tag} align {align}");
            }
        }
        for tag in [0, 2] {
            for a in [1u64 << 32, u64::MAX, 0x8000_0000_0000_0000] {
                let d = ArgDescriptor {
                    tag,
                    align: 0,
                    a,
                    b: 0,
                };
                assert_eq!(one_errno(64, d), Errno::EINVAL, "tag {tag} a {a:#x}");
            }
        }
        for tag in [0, 1, 2, 3] {
            for b in [1, u64::MAX] {
                let d = ArgDescriptor {
                    tag,
                    align: 0,
                    a: 1,
                    b,
                };
                assert_eq!(one_errno(64, d), Errno::EINVAL, "tag {tag} b {b:#x}");
            }
        }
        let e = decode(
            64,
            &[
                ArgDescriptor::i32(1),
                ArgDescriptor {
                    tag: 9,
                    align: 0,
                    a: 0,
                    b: 0,
                },
            ],
        )
        .expect_err("tag 9");
        assert_eq!(e.to_string(), "EINVAL: argument 1: unknown tag 9");
    }

    #[test]
    fn guest_pointer_bounds() {
        let len = 0x18;
        let ok = |d: ArgDescriptor| {
            let mem = memory_with(64, 0, &[d]);
            decode_launch_args(&mem, &guest(len), 0, 1)
        };
        assert_eq!(
            ok(ArgDescriptor::guest(0, 0x18)),
            Ok(vec![LaunchArg::Param(KernelParam::Ptr(BASE))])
        );
        assert_eq!(
            ok(ArgDescriptor::guest(0x17, 1)),
            Ok(vec![LaunchArg::Param(KernelParam::Ptr(DevicePtr(
                BASE.0 + 0x17
            )))])
        );
        assert_eq!(one_errno(len, ArgDescriptor::guest(0x18, 1)), Errno::EFAULT);
        assert_eq!(one_errno(len, ArgDescriptor::guest(0x19, 1)), Errno::EFAULT);
        assert_eq!(one_errno(len, ArgDescriptor::guest(0, 0x19)), Errno::EFAULT);
        assert_eq!(one_errno(len, ArgDescriptor::guest(0x17, 2)), Errno::EFAULT);
        assert_eq!(
            one_errno(len, ArgDescriptor::guest(u64::from(u32::MAX), 1)),
            Errno::EFAULT
        );
        assert_eq!(
            one_errno(len, ArgDescriptor::guest(u64::MAX - 1, 1)),
            Errno::EFAULT
        );
        assert_eq!(
            one_errno(len, ArgDescriptor::guest(u64::MAX, 1)),
            Errno::EOVERFLOW
        );
        assert_eq!(
            one_errno(len, ArgDescriptor::guest(1, u64::MAX)),
            Errno::EOVERFLOW
        );
        assert_eq!(one_errno(len, ArgDescriptor::guest(0, 0)), Errno::EINVAL);
        assert_eq!(
            one_errno(len, ArgDescriptor::guest(u64::MAX, 0)),
            Errno::EINVAL
        );
        let mem = memory_with(
            96,
            8,
            &[
                ArgDescriptor::i32(0),
                ArgDescriptor::i32(0),
                ArgDescriptor::guest(0x10, 0x20),
            ],
        );
        let e = decode_launch_args(&mem, &guest(len), 8, 3).expect_err("past the end");
        assert_eq!(
            e.to_string(),
            "EFAULT: argument 2: guest range 0x10+0x20 ends past memory of 0x18 bytes"
        );
    }

    #[test]
    fn guest_pointer_uses_the_smaller_memory_size() {
        let mem = memory_with(64, 0, &[ArgDescriptor::guest(32, 32)]);
        assert!(decode_launch_args(&mem, &guest(64), 0, 1).is_ok());
        // guest.len smaller than the slice.
        assert_eq!(
            errno(decode_launch_args(&mem, &guest(63), 0, 1)),
            Errno::EFAULT
        );
        // The slice smaller than guest.len.
        assert_eq!(
            errno(decode_launch_args(&mem[..63], &guest(64), 0, 1)),
            Errno::EFAULT
        );
    }

    #[test]
    fn guest_pointer_alignment() {
        let len = 16 * 1024;
        let ok = |d: ArgDescriptor| {
            let mem = memory_with(len, 0, &[d]);
            decode_launch_args(&mem, &guest(len), 0, 1).map(|v| v.len())
        };
        for align in [0, 1, 2, 8, 4096] {
            assert_eq!(
                ok(ArgDescriptor::guest_aligned(8192, 8, align)),
                Ok(1),
                "align {align}"
            );
        }
        for align in [3, 6, 4097, 8192, 0x8000_0000, u32::MAX] {
            assert_eq!(
                one_errno(len, ArgDescriptor::guest_aligned(8192, 8, align)),
                Errno::EINVAL,
                "align {align}"
            );
        }
        assert_eq!(
            one_errno(len, ArgDescriptor::guest_aligned(4, 8, 8)),
            Errno::EALIGN
        );
        assert_eq!(
            one_errno(len, ArgDescriptor::guest_aligned(2048, 8, 4096)),
            Errno::EALIGN
        );
        assert_eq!(
            one_errno(len, ArgDescriptor::guest_aligned(1, 1, 2)),
            Errno::EALIGN
        );
        // Bounds are checked before alignment.
        assert_eq!(
            one_errno(len, ArgDescriptor::guest_aligned(len as u64 + 1, 1, 2)),
            Errno::EFAULT
        );
        // A zero length is refused before a bad align.
        assert_eq!(
            one_errno(len, ArgDescriptor::guest_aligned(1, 0, 3)),
            Errno::EINVAL
        );
    }

    #[test]
    fn unaddressable_memory_is_enotaddr() {
        let mem = memory_with(64, 0, &[ArgDescriptor::i32(1), ArgDescriptor::guest(8, 8)]);
        let g = GuestMemoryRef {
            device_addressable: false,
            ..guest(64)
        };
        let e = decode_launch_args(&mem, &g, 0, 2).expect_err("not addressable");
        assert_eq!(e.errno, Errno::ENOTADDR);
        assert!(e.reason.starts_with("argument 1: "), "{e}");
        // Scalars and buffers need no addressable memory.
        let h = Handle(0x0000_0110_0000_0000);
        let mem = memory_with(64, 0, &[ArgDescriptor::i32(1), ArgDescriptor::buffer(h, 3)]);
        assert_eq!(
            decode_launch_args(&mem, &g, 0, 2),
            Ok(vec![
                LaunchArg::Param(KernelParam::I32(1)),
                LaunchArg::Buffer {
                    handle: h,
                    offset: 3
                }
            ])
        );
        // Bounds and alignment come first.
        let mem = memory_with(64, 0, &[ArgDescriptor::guest(60, 8)]);
        assert_eq!(errno(decode_launch_args(&mem, &g, 0, 1)), Errno::EFAULT);
        let mem = memory_with(64, 0, &[ArgDescriptor::guest_aligned(4, 8, 8)]);
        assert_eq!(errno(decode_launch_args(&mem, &g, 0, 1)), Errno::EALIGN);
    }

    #[test]
    fn device_address_overflow() {
        let mem = memory_with(64, 0, &[ArgDescriptor::guest(8, 8)]);
        let top = |base: u64| GuestMemoryRef {
            base: DevicePtr(base),
            ..guest(64)
        };
        assert_eq!(
            errno(decode_launch_args(&mem, &top(u64::MAX - 15), 0, 1)),
            Errno::EOVERFLOW
        );
        assert_eq!(
            errno(decode_launch_args(&mem, &top(u64::MAX), 0, 1)),
            Errno::EOVERFLOW
        );
        assert_eq!(
            decode_launch_args(&mem, &top(u64::MAX - 16), 0, 1),
            Ok(vec![LaunchArg::Param(KernelParam::Ptr(DevicePtr(
                u64::MAX - 8
            )))])
        );
    }

    #[test]
    fn buffer_arguments_are_left_to_the_caller() {
        let owner = OwnerId::from_raw(3).expect("in range");
        let mut t = crate::abi::HandleTable::new(owner, HandleKind::Buffer, 4);
        let h = t.insert(()).expect("room");
        let args = [
            ArgDescriptor::buffer(h, 0),
            ArgDescriptor::buffer(Handle(0), u64::MAX),
        ];
        assert_eq!(
            decode(0, &args),
            Ok(vec![
                LaunchArg::Buffer {
                    handle: h,
                    offset: 0
                },
                LaunchArg::Buffer {
                    handle: Handle(0),
                    offset: u64::MAX
                },
            ])
        );
        let base = DevicePtr(0x1000);
        assert_eq!(
            resolve_buffer_pointer(base, 256, 0),
            Ok(KernelParam::Ptr(base))
        );
        assert_eq!(
            resolve_buffer_pointer(base, 256, 255),
            Ok(KernelParam::Ptr(DevicePtr(0x10ff)))
        );
        for offset in [256, 257, u64::MAX] {
            let e = resolve_buffer_pointer(base, 256, offset).expect_err("past the end");
            assert_eq!(e.errno, Errno::EFAULT, "{offset}");
        }
        assert_eq!(
            resolve_buffer_pointer(base, 0, 0).map_err(|e| e.errno),
            Err(Errno::EFAULT)
        );
        assert_eq!(
            resolve_buffer_pointer(DevicePtr(u64::MAX), 16, 1).map_err(|e| e.errno),
            Err(Errno::EOVERFLOW)
        );
        assert_eq!(
            resolve_buffer_pointer(DevicePtr(u64::MAX - 1), 16, 1),
            Ok(KernelParam::Ptr(DevicePtr(u64::MAX)))
        );
    }

    /// A random valid descriptor for a memory of `len` (>= 4096) bytes, and
    /// what it decodes to at `base`.
    fn random_valid(rng: &mut Rng, len: u64, base: u64) -> (ArgDescriptor, LaunchArg) {
        match rng.below(6) {
            0 => {
                let v = rng.next_u64() as i32;
                (ArgDescriptor::i32(v), LaunchArg::Param(KernelParam::I32(v)))
            }
            1 => {
                let v = rng.next_u64() as i64;
                (ArgDescriptor::i64(v), LaunchArg::Param(KernelParam::I64(v)))
            }
            2 => {
                let v = f32::from_bits(rng.next_u64() as u32);
                (ArgDescriptor::f32(v), LaunchArg::Param(KernelParam::F32(v)))
            }
            3 => {
                let v = f64::from_bits(rng.next_u64());
                (ArgDescriptor::f64(v), LaunchArg::Param(KernelParam::F64(v)))
            }
            4 => {
                let align = [0u32, 1, 2, 4, 8, 256, 4096][rng.below(7) as usize];
                let step = u64::from(align.max(1));
                let offset = rng.below(len / step) * step;
                let size = 1 + rng.below(len - offset);
                (
                    ArgDescriptor::guest_aligned(offset, size, align),
                    LaunchArg::Param(KernelParam::Ptr(DevicePtr(base + offset))),
                )
            }
            _ => {
                let (handle, offset) = (Handle(rng.next_u64()), rng.next_u64());
                (
                    ArgDescriptor::buffer(handle, offset),
                    LaunchArg::Buffer { handle, offset },
                )
            }
        }
    }

    fn same(a: &LaunchArg, b: &LaunchArg) -> bool {
        match (a, b) {
            (LaunchArg::Param(x), LaunchArg::Param(y)) => {
                x.to_slot() == y.to_slot()
                    && core::mem::discriminant(x) == core::mem::discriminant(y)
            }
            _ => a == b,
        }
    }

    #[test]
    fn random_round_trip() {
        let mut rng = Rng::from_env("launch args round trip");
        for _ in 0..2000 {
            let len = 4096 + rng.below(1 << 16) as usize;
            let base = rng.next_u64() >> 1;
            let count = rng.below(MAX_KERNEL_PARAMS as u64 + 1) as usize;
            let (descriptors, expected): (Vec<_>, Vec<_>) = (0..count)
                .map(|_| random_valid(&mut rng, len as u64, base))
                .unzip();
            let ptr = (rng.below((len - 24 * count) as u64 / 8) * 8) as usize;
            let mem = memory_with(len, ptr, &descriptors);
            let g = GuestMemoryRef {
                base: DevicePtr(base),
                len,
                device_addressable: true,
            };
            let decoded = decode_launch_args(&mem, &g, ptr as u32, count as u32)
                .unwrap_or_else(|e| panic!("{e} for {descriptors:?}"));
            assert_eq!(decoded.len(), count);
            for (d, e) in decoded.iter().zip(&expected) {
                assert!(same(d, e), "{d:?} != {e:?}");
            }
        }
    }

    #[test]
    fn random_bytes_never_escape_memory() {
        let mut rng = Rng::from_env("launch args random bytes");
        for _ in 0..5000 {
            let len = rng.below(2048) as usize;
            let mut mem: Vec<u8> = (0..len).map(|_| rng.next_u64() as u8).collect();
            // Small tags and offsets, so that some descriptors are valid.
            for chunk in mem.chunks_mut(24) {
                if rng.below(2) == 0 {
                    if let Some(tag) = chunk.first_mut() {
                        *tag = rng.below(6) as u8;
                    }
                    for byte in chunk.iter_mut().skip(1).take(3) {
                        *byte = 0;
                    }
                }
            }
            let g = GuestMemoryRef {
                base: DevicePtr(rng.next_u64()),
                len: len.saturating_sub(rng.below(16) as usize),
                device_addressable: rng.below(4) != 0,
            };
            let ptr = rng.below(len as u64 + 16) as u32 & !7;
            let count = rng.below(70) as u32;
            if let Ok(args) = decode_launch_args(&mem, &g, ptr, count) {
                assert_eq!(args.len(), count as usize);
                let limit = u128::from(g.base.0) + g.len.min(len) as u128;
                for arg in args {
                    if let LaunchArg::Param(KernelParam::Ptr(p)) = arg {
                        assert!(u128::from(g.base.0) <= u128::from(p.0));
                        assert!(u128::from(p.0) < limit);
                    }
                }
            }
        }
    }
}
