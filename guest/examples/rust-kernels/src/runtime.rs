//! What a `#![no_std]` guest brings itself: the global allocator and the
//! panic handler. Neither is used inside a kernel's fast path; the panic
//! handler is what a kernel's bounds checks and division checks reach.

use core::alloc::{GlobalAlloc, Layout};
use core::sync::atomic::{AtomicUsize, Ordering};

/// Wasm page size.
const PAGE: usize = 1 << 16;

/// A bump allocator over pages it grows the guest's memory by, which
/// starts over once every allocation has been freed. Each export of this
/// guest allocates its inputs and results, checks them and frees them all,
/// so memory is reused from one export to the next. Wasm32 guests have one
/// thread here, so the atomics are plain loads and stores.
struct Arena {
    /// The first byte the arena owns (0 until the first allocation).
    start: AtomicUsize,
    /// The next free byte.
    next: AtomicUsize,
    /// One past the last byte the arena owns.
    end: AtomicUsize,
    /// Allocations not yet freed.
    live: AtomicUsize,
}

#[global_allocator]
static ARENA: Arena = Arena {
    start: AtomicUsize::new(0),
    next: AtomicUsize::new(0),
    end: AtomicUsize::new(0),
    live: AtomicUsize::new(0),
};

impl Arena {
    /// Grows the arena (and the guest's memory) to reach `to`; `false`
    /// when the memory cannot grow.
    fn grow_to(&self, to: usize) -> bool {
        let end = self.end.load(Ordering::Relaxed);
        let pages = (to - end).div_ceil(PAGE);
        let previous = core::arch::wasm32::memory_grow(0, pages);
        // Nothing else grows the memory, so the new pages start at `end`.
        if previous == usize::MAX || previous * PAGE != end {
            return false;
        }
        self.end.store(end + pages * PAGE, Ordering::Relaxed);
        true
    }
}

// SAFETY: `alloc` hands out disjoint ranges of pages this arena grew the
// memory by and owns, aligned as asked; a range is reused only after every
// allocation was freed (`live` back to 0), when no block can be in use.
unsafe impl GlobalAlloc for Arena {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if self.start.load(Ordering::Relaxed) == 0 {
            let top = core::arch::wasm32::memory_size(0) * PAGE;
            self.start.store(top, Ordering::Relaxed);
            self.next.store(top, Ordering::Relaxed);
            self.end.store(top, Ordering::Relaxed);
        }
        let next = self.next.load(Ordering::Relaxed);
        let Some(at) = next.checked_next_multiple_of(layout.align()) else {
            return core::ptr::null_mut();
        };
        let Some(after) = at.checked_add(layout.size()) else {
            return core::ptr::null_mut();
        };
        if after > self.end.load(Ordering::Relaxed) && !self.grow_to(after) {
            return core::ptr::null_mut();
        }
        self.next.store(after, Ordering::Relaxed);
        self.live.fetch_add(1, Ordering::Relaxed);
        core::ptr::with_exposed_provenance_mut(at)
    }

    unsafe fn dealloc(&self, _ptr: *mut u8, _layout: Layout) {
        if self.live.fetch_sub(1, Ordering::Relaxed) == 1 {
            self.next
                .store(self.start.load(Ordering::Relaxed), Ordering::Relaxed);
        }
    }
}

/// A panic (a failed bounds or division check, in a kernel or not) is a
/// Wasm `unreachable` trap: in the guest's runtime the call traps; in a
/// kernel the thread ends with the `Unreachable` trap code and `wait`
/// returns `ETRAP`. Nothing is formatted, so a kernel's panic path stays a
/// few instructions.
#[panic_handler]
fn panic(_: &core::panic::PanicInfo<'_>) -> ! {
    core::arch::wasm32::unreachable()
}
