//! [`Buffer`]: device memory the guest owns, freed when the value drops, and
//! the copies between it and guest memory.

use crate::error::Error;
use crate::result;
use crate::scalar::{self, Scalar};

/// Device memory, owned: `Drop` frees it. Copies are synchronous (they wait
/// for the guest's earlier launches, then return with the bytes in place),
/// so they take `&self`. All offsets and lengths are in bytes. Once a kernel
/// of the guest has failed, every copy and fill returns `ELAUNCH`: failures
/// are sticky per stream (`docs/ABI.md`, `wait`).
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct Buffer {
    handle: u64,
    size: u64,
}

impl Buffer {
    /// Allocates `size` bytes of device memory; its contents are undefined.
    /// `EINVAL` for 0, `ENOMEM` when the device has no room, `ELIMIT` when
    /// the guest holds the most buffers it may.
    pub fn alloc(size: u64) -> Result<Buffer, Error> {
        let handle = result::buffer_alloc(size)?;
        Ok(Buffer { handle, size })
    }

    /// A buffer of exactly `data`'s size holding a copy of it.
    pub fn from_slice<T: Scalar>(data: &[T]) -> Result<Buffer, Error> {
        let buffer = Buffer::alloc(size_of_val(data) as u64)?;
        buffer.copy_from_slice(0, data)?;
        Ok(buffer)
    }

    /// The buffer's size in bytes (known since it was allocated; the host's
    /// `buffer_size` would say the same).
    pub const fn size(&self) -> u64 {
        self.size
    }

    /// The buffer's handle, for the raw layers ([`crate::result`],
    /// [`crate::sys`]). It stays valid until the buffer drops.
    pub const fn handle(&self) -> u64 {
        self.handle
    }

    /// Copies `src` into the buffer at byte `offset`. An empty `src` copies
    /// nothing and succeeds. `EFAULT` when the range passes the buffer's end.
    pub fn copy_from_slice<T: Scalar>(&self, offset: u64, src: &[T]) -> Result<(), Error> {
        if src.is_empty() {
            return Ok(());
        }
        result::copy_to_buffer(self.handle, offset, scalar::as_bytes(src))
    }

    /// Copies the buffer from byte `offset` into all of `dst`. An empty `dst`
    /// copies nothing and succeeds. `EFAULT` when the range passes the
    /// buffer's end.
    pub fn copy_to_slice<T: Scalar>(&self, offset: u64, dst: &mut [T]) -> Result<(), Error> {
        if dst.is_empty() {
            return Ok(());
        }
        result::copy_from_buffer(scalar::as_bytes_mut(dst), self.handle, offset)
    }

    /// Copies `len` bytes of `src` from `src_offset` into this buffer at
    /// `offset`. `src` may be this buffer, but the ranges must not overlap
    /// (`EINVAL`). `len` 0 copies nothing and succeeds.
    pub fn copy_from_buffer(
        &self,
        offset: u64,
        src: &Buffer,
        src_offset: u64,
        len: u64,
    ) -> Result<(), Error> {
        if len == 0 {
            return Ok(());
        }
        result::copy_buffer(self.handle, offset, src.handle, src_offset, len)
    }

    /// Sets `len` bytes from `offset` to `value`. `len` 0 sets nothing and
    /// succeeds.
    pub fn fill(&self, offset: u64, value: u8, len: u64) -> Result<(), Error> {
        if len == 0 {
            return Ok(());
        }
        result::memset_buffer(self.handle, offset, value, len)
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        // Cannot fail for a handle we own; launches still in flight keep the
        // memory alive on the host side.
        let _ = result::buffer_free(self.handle);
    }
}
