//! Thin wrappers over the unix calls behind virtual memory and managed
//! regions (`sysconf`, `mmap`, `mprotect`, `munmap`): each turns the C result
//! into an `io::Result`. No accounting, registration or policy lives here.

use std::{io, ptr::NonNull};

/// Linux reserves no swap for `MAP_NORESERVE` mappings; elsewhere the flag
/// does not exist and reservations are lazy anyway.
#[cfg(any(target_os = "linux", target_os = "android"))]
const NORESERVE: libc::c_int = libc::MAP_NORESERVE;
#[cfg(not(any(target_os = "linux", target_os = "android")))]
const NORESERVE: libc::c_int = 0;

/// The host's page size.
pub(crate) fn page_size() -> io::Result<usize> {
    // SAFETY: sysconf reads a constant of the system and has no preconditions.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(size)
        .ok()
        .filter(|&size| size > 0)
        .ok_or_else(io::Error::last_os_error)
}

/// An anonymous private mapping this value owns, inaccessible except where
/// [`commit`](HostMapping::commit)ted; unmapped on drop.
pub(crate) struct HostMapping {
    base: NonNull<u8>,
    len: usize,
}

// SAFETY: a HostMapping owns its address span exclusively (nothing else maps,
// protects or unmaps it); mmap/mprotect/munmap are thread-safe system calls,
// and the bytes are only touched through raw pointers by owners that order
// those accesses (streams drained, `&mut` borrows for resizing).
unsafe impl Send for HostMapping {}
// SAFETY: as for Send; `&self` methods only make pages accessible (commit),
// which cannot invalidate another thread's access.
unsafe impl Sync for HostMapping {}

impl HostMapping {
    /// Reserves `len` bytes (a nonzero multiple of the page size) of
    /// inaccessible address space whose base is a multiple of `align` (a
    /// power of two).
    pub(crate) fn reserve(len: usize, align: usize) -> io::Result<HostMapping> {
        if len == 0 || !align.is_power_of_two() {
            return Err(io::Error::from(io::ErrorKind::InvalidInput));
        }
        let page = page_size()?;
        // mmap only promises page alignment: over-reserve and trim.
        let slack = if align > page { align } else { 0 };
        let total = len
            .checked_add(slack)
            .ok_or_else(|| io::Error::from(io::ErrorKind::OutOfMemory))?;
        // SAFETY: a fresh anonymous mapping at an address of the kernel's
        // choosing cannot touch any existing memory.
        let raw = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                total,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | NORESERVE,
                -1,
                0,
            )
        };
        if raw == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let raw = raw.cast::<u8>();
        let head = if slack == 0 {
            0
        } else {
            raw.addr().next_multiple_of(align) - raw.addr()
        };
        let tail = slack - head;
        let base = raw.wrapping_add(head);
        // A failed trim leaves only inaccessible address space behind, so its
        // result is ignored.
        if head > 0 {
            // SAFETY: raw..raw+head is the unaligned head of the mapping just
            // made; nothing refers to it.
            unsafe { libc::munmap(raw.cast(), head) };
        }
        if tail > 0 {
            // SAFETY: base+len..base+len+tail is the tail of the mapping just
            // made, past the part kept; nothing refers to it.
            unsafe { libc::munmap(base.wrapping_add(len).cast(), tail) };
        }
        let base = NonNull::new(base).ok_or_else(|| io::Error::from(io::ErrorKind::Other))?;
        Ok(HostMapping { base, len })
    }

    /// The first byte.
    pub(crate) fn as_ptr(&self) -> *mut u8 {
        self.base.as_ptr()
    }

    /// The first byte's address, its provenance exposed so that a
    /// `DevicePtr` can be turned back into a pointer.
    pub(crate) fn addr(&self) -> u64 {
        self.base.as_ptr().expose_provenance() as u64
    }

    /// Bytes mapped.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Makes `offset .. offset + len` (page-aligned) readable and writable.
    /// Pages never touched, or decommitted since, read as zero.
    pub(crate) fn commit(&self, offset: usize, len: usize) -> io::Result<()> {
        if len == 0 {
            return Ok(());
        }
        self.check(offset, len)?;
        // SAFETY: the span lies inside this mapping (checked), which this
        // value owns; making pages accessible invalidates no other access.
        let rc = unsafe {
            libc::mprotect(
                self.base.as_ptr().wrapping_add(offset).cast(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
            )
        };
        if rc == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }

    /// Drops the contents of `offset .. offset + len` (page-aligned) and makes
    /// it inaccessible again; committed later, it reads as zero.
    ///
    /// This replaces the pages with a fresh `MAP_FIXED` inaccessible mapping
    /// rather than `madvise(MADV_DONTNEED)` + `mprotect`: one call, and the
    /// zero-fill holds on every unix (`MADV_DONTNEED` only zeroes on Linux).
    ///
    /// # Safety
    /// No reference, and no queued or running work, may touch the span.
    pub(crate) unsafe fn decommit(&self, offset: usize, len: usize) -> io::Result<()> {
        if len == 0 {
            return Ok(());
        }
        self.check(offset, len)?;
        // SAFETY: the span lies inside this mapping (checked), so MAP_FIXED
        // replaces only pages this value owns; the caller guarantees nothing
        // refers to them.
        let raw = unsafe {
            libc::mmap(
                self.base.as_ptr().wrapping_add(offset).cast(),
                len,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED | NORESERVE,
                -1,
                0,
            )
        };
        if raw == libc::MAP_FAILED {
            Err(io::Error::last_os_error())
        } else {
            Ok(())
        }
    }

    fn check(&self, offset: usize, len: usize) -> io::Result<()> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len => Ok(()),
            _ => Err(io::Error::from(io::ErrorKind::InvalidInput)),
        }
    }
}

impl Drop for HostMapping {
    fn drop(&mut self) {
        // SAFETY: base..base+len is exactly the mapping this value made and
        // owns; its owners drain every stream before dropping it, so nothing
        // touches it any more. A failure leaves only address space behind.
        unsafe { libc::munmap(self.base.as_ptr().cast(), self.len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reservations_are_aligned_and_decommit_zeroes() {
        let page = page_size().unwrap();
        let align = 1 << 20;
        let mapping = HostMapping::reserve(4 * page, align).unwrap();
        assert_eq!(mapping.as_ptr().addr() % align, 0);
        mapping.commit(0, 2 * page).unwrap();
        // SAFETY: the first two pages are committed and only this test uses them.
        unsafe { mapping.as_ptr().add(page + 3).write(0x5a) };
        // SAFETY: no reference into the mapping is alive.
        unsafe { mapping.decommit(page, page) }.unwrap();
        mapping.commit(page, page).unwrap();
        // SAFETY: the page is committed again.
        assert_eq!(unsafe { mapping.as_ptr().add(page + 3).read() }, 0);
        assert!(mapping.commit(3 * page, 2 * page).is_err());
        assert!(HostMapping::reserve(0, page).is_err());
    }
}
