//! Device buffers: `buffer_alloc`, `buffer_free`, `buffer_size`, the
//! copies and `memset_buffer`. Each buffer carries the quota charge that
//! pays for it ([`Charged`]), released when its last reference drops.

use std::sync::Arc;

use tensorwasm_core::{
    DeviceMemory, GpuDriver,
    abi::{self, AbiError, Errno, Handle},
    quota::{OwnedCharge, Resource},
};

use super::{
    ctx::{GuestMem, WasiCudaCtx, check_out_u64},
    errors::driver_error,
};

/// A resource with the quota charge that pays for it: the charge goes back
/// to the tenant's ledger when the last reference to the resource drops
/// (a launch in flight holds one), so freeing is releasing and nothing leaks.
pub(crate) struct Charged<T> {
    value: T,
    _charge: OwnedCharge,
}

impl<T> Charged<T> {
    /// `value`, paid by `charge`.
    pub(crate) fn new(value: T, charge: OwnedCharge) -> Self {
        Charged {
            value,
            _charge: charge,
        }
    }
}

impl<T> std::ops::Deref for Charged<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.value
    }
}

/// A guest's device buffer with the charge that pays for it.
pub(super) type GuestBuffer<D> = Arc<Charged<<D as GpuDriver>::DeviceBuffer>>;

impl<D: GpuDriver> WasiCudaCtx<D> {
    pub(crate) fn buffer_alloc(
        &mut self,
        mem: GuestMem<'_>,
        size: u64,
        out: u32,
    ) -> Result<(), AbiError> {
        check_out_u64(mem.bytes, out)?;
        let handle = self.alloc_buffer(size)?;
        abi::write_u64(mem.bytes, out, handle.0)
    }

    /// A new buffer of `size` bytes, charged to the tenant: `buffer_alloc`
    /// without the out-pointer (the component API's `buffer.alloc`).
    pub(crate) fn alloc_buffer(&mut self, size: u64) -> Result<Handle, AbiError> {
        if size == 0 {
            return Err(AbiError::new(Errno::EINVAL, "size is 0"));
        }
        let bytes = usize::try_from(size).map_err(|_| {
            AbiError::new(Errno::ENOMEM, format!("{size} bytes do not fit this host"))
        })?;
        if size > self.driver.device().total_memory {
            return Err(AbiError::new(
                Errno::ENOMEM,
                format!(
                    "{size} bytes exceed the device's {} bytes",
                    self.driver.device().total_memory
                ),
            ));
        }
        let charge = self.charge(Resource::DeviceBytes, size)?;
        let buffer = self
            .driver
            .alloc_device(bytes)
            .map_err(|e| driver_error("alloc_device", e))?;
        self.buffers.insert(Arc::new(Charged {
            value: buffer,
            _charge: charge,
        }))
    }

    pub(crate) fn buffer_free(&mut self, buffer: u64) -> Result<(), AbiError> {
        // In-flight launches hold their own `Arc`; the memory goes with the last.
        self.buffers.remove(Handle(buffer)).map(drop)
    }

    pub(crate) fn buffer_size(
        &mut self,
        mem: GuestMem<'_>,
        buffer: u64,
        out: u32,
    ) -> Result<(), AbiError> {
        check_out_u64(mem.bytes, out)?;
        let len = self.buffer_len(Handle(buffer))?;
        abi::write_u64(mem.bytes, out, len)
    }

    /// A buffer's size in bytes.
    pub(crate) fn buffer_len(&self, buffer: Handle) -> Result<u64, AbiError> {
        Ok(self.buffers.get(buffer)?.len() as u64)
    }

    /// `offset .. offset + len` of a buffer, checked.
    fn buffer_range(
        &self,
        buffer: u64,
        offset: u64,
        len: u64,
        what: &str,
    ) -> Result<(GuestBuffer<D>, usize, usize), AbiError> {
        let buf = Arc::clone(self.buffers.get(Handle(buffer))?);
        if len == 0 {
            return Err(AbiError::new(Errno::EINVAL, "len is 0"));
        }
        let end = offset.checked_add(len).ok_or_else(|| {
            AbiError::new(
                Errno::EOVERFLOW,
                format!("{what} offset {offset:#x} + len {len:#x} overflows"),
            )
        })?;
        if end > buf.len() as u64 {
            return Err(AbiError::new(
                Errno::EFAULT,
                format!(
                    "{what} range {offset:#x}..{end:#x} ends past the buffer's {:#x} bytes",
                    buf.len()
                ),
            ));
        }
        Ok((buf, offset as usize, len as usize))
    }

    pub(crate) fn copy_to_buffer(
        &mut self,
        mem: GuestMem<'_>,
        dst: u64,
        dst_offset: u64,
        src: u32,
        len: u32,
    ) -> Result<(), AbiError> {
        // The buffer's range first: its errors come before the guest's.
        self.buffer_range(dst, dst_offset, u64::from(len), "dst")?;
        let src = abi::guest_range(mem.bytes.len(), src, u64::from(len))?;
        self.write_buffer(dst, dst_offset, &mem.bytes[src])
    }

    /// Copies `bytes` into `dst` at `dst_offset` (the queue must be idle:
    /// the caller waited for the guest's launches).
    pub(crate) fn write_buffer(
        &mut self,
        dst: u64,
        dst_offset: u64,
        bytes: &[u8],
    ) -> Result<(), AbiError> {
        let (buf, offset, len) = self.buffer_range(dst, dst_offset, bytes.len() as u64, "dst")?;
        let dst = buf.range(offset, len).ok_or_else(out_of_buffer)?;
        self.driver
            .copy_to_device(dst, bytes)
            .map_err(|e| driver_error("copy_to_device", e))
    }

    pub(crate) fn copy_from_buffer(
        &mut self,
        mem: GuestMem<'_>,
        dst: u32,
        src: u64,
        src_offset: u64,
        len: u32,
    ) -> Result<(), AbiError> {
        self.buffer_range(src, src_offset, u64::from(len), "src")?;
        let dst = abi::guest_range(mem.bytes.len(), dst, u64::from(len))?;
        self.read_buffer(src, src_offset, &mut mem.bytes[dst])
    }

    /// Bytes `src_offset .. src_offset + len` of `src`, the range checked
    /// before anything is allocated (the component API's `buffer.read`;
    /// the queue must be idle, as for [`write_buffer`](Self::write_buffer)).
    pub(crate) fn read_buffer_to_vec(
        &mut self,
        src: u64,
        src_offset: u64,
        len: u32,
    ) -> Result<Vec<u8>, AbiError> {
        self.buffer_range(src, src_offset, u64::from(len), "src")?;
        let mut out = vec![0; len as usize];
        self.read_buffer(src, src_offset, &mut out)?;
        Ok(out)
    }

    /// Copies `out.len()` bytes of `src` from `src_offset` into `out` (the
    /// queue must be idle, as for [`write_buffer`](Self::write_buffer)).
    pub(crate) fn read_buffer(
        &mut self,
        src: u64,
        src_offset: u64,
        out: &mut [u8],
    ) -> Result<(), AbiError> {
        let (buf, offset, len) = self.buffer_range(src, src_offset, out.len() as u64, "src")?;
        let src = buf.range(offset, len).ok_or_else(out_of_buffer)?;
        self.driver
            .copy_from_device(out, src)
            .map_err(|e| driver_error("copy_from_device", e))
    }

    pub(crate) fn copy_buffer(
        &mut self,
        dst: u64,
        dst_offset: u64,
        src: u64,
        src_offset: u64,
        len: u64,
    ) -> Result<(), AbiError> {
        let (dbuf, doff, n) = self.buffer_range(dst, dst_offset, len, "dst")?;
        let (sbuf, soff, _) = self.buffer_range(src, src_offset, len, "src")?;
        let d = dbuf.range(doff, n).ok_or_else(out_of_buffer)?;
        let s = sbuf.range(soff, n).ok_or_else(out_of_buffer)?;
        let (dp, sp) = (d.ptr().0, s.ptr().0);
        if dp < sp + n as u64 && sp < dp + n as u64 {
            return Err(AbiError::new(
                Errno::EINVAL,
                "the source and destination ranges overlap",
            ));
        }
        self.driver
            .copy_device(d, s)
            .map_err(|e| driver_error("copy_device", e))
    }

    pub(crate) fn memset_buffer(
        &mut self,
        dst: u64,
        dst_offset: u64,
        value: u32,
        len: u64,
    ) -> Result<(), AbiError> {
        let (buf, offset, n) = self.buffer_range(dst, dst_offset, len, "dst")?;
        let value = u8::try_from(value).map_err(|_| {
            AbiError::new(
                Errno::EINVAL,
                format!("value {value} is not a byte (0..=255)"),
            )
        })?;
        let d = buf.range(offset, n).ok_or_else(out_of_buffer)?;
        self.driver
            .memset(d, value)
            .map_err(|e| driver_error("memset", e))
    }
}

fn out_of_buffer() -> AbiError {
    AbiError::new(Errno::EFAULT, "range outside the buffer")
}
