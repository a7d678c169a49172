//! The one place atomics and locks come from (tokio's pattern). Under
//! `cfg(loom)` these are loom's model types, so the loom tests in
//! `core/tests/` check the real code; otherwise `core`/`alloc` atomics and a
//! `spin` lock. Code elsewhere in core must not name `core::sync` or `spin`.

#[cfg(loom)]
pub use loom::sync::{Arc, atomic::*};

#[cfg(not(loom))]
pub use alloc::sync::Arc;
#[cfg(not(loom))]
pub use core::sync::atomic::*;

use core::fmt;
use core::ops::{Deref, DerefMut};

#[cfg(loom)]
type InnerMutex<T> = loom::sync::Mutex<T>;
#[cfg(loom)]
type InnerGuard<'a, T> = loom::sync::MutexGuard<'a, T>;

// `spin::mutex::SpinMutex` rather than `spin::Mutex`, so the lock in use does
// not change with whichever spin features another crate in the graph enables.
#[cfg(not(loom))]
type InnerMutex<T> = spin::mutex::SpinMutex<T>;
#[cfg(not(loom))]
type InnerGuard<'a, T> = spin::mutex::SpinMutexGuard<'a, T>;

/// A mutual-exclusion lock with the same API under `cfg(loom)` and without.
///
/// Without loom it spins, so a holder must keep the critical section short
/// and must not block in it. It never poisons: a panic while holding the
/// lock releases it and leaves the data as the panic left it.
pub struct Mutex<T> {
    inner: InnerMutex<T>,
}

/// Exclusive access to the data of a [`Mutex`]; the lock is released when
/// the guard is dropped.
pub struct MutexGuard<'a, T> {
    inner: InnerGuard<'a, T>,
}

impl<T> Mutex<T> {
    /// Creates an unlocked mutex holding `value`.
    pub fn new(value: T) -> Self {
        Mutex {
            inner: InnerMutex::new(value),
        }
    }

    /// Acquires the lock, waiting (spinning, without loom) while another
    /// holder has it.
    pub fn lock(&self) -> MutexGuard<'_, T> {
        #[cfg(loom)]
        let inner = self
            .inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        #[cfg(not(loom))]
        let inner = self.inner.lock();
        MutexGuard { inner }
    }
}

impl<T: Default> Default for Mutex<T> {
    fn default() -> Self {
        Mutex::new(T::default())
    }
}

impl<T> fmt::Debug for Mutex<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Locking here could deadlock a caller that already holds the lock.
        f.debug_struct("Mutex").finish_non_exhaustive()
    }
}

impl<T> Deref for MutexGuard<'_, T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.inner
    }
}

impl<T> DerefMut for MutexGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.inner
    }
}

impl<T: fmt::Debug> fmt::Debug for MutexGuard<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn lock_gives_exclusive_access_and_releases_on_drop() {
        let shared = Arc::new(Mutex::new(7_u32));
        {
            let mut guard = shared.lock();
            *guard += 5;
        }
        assert_eq!(*shared.lock(), 12);
    }
}
