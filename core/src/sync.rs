//! The one place atomics and locks come from (tokio's pattern). Under
//! `cfg(loom)` these are loom's model types, so the loom tests in
//! `core/tests/` check the real code; otherwise `core`/`alloc` atomics and a
//! `spin` lock. Code elsewhere in core must not name `core::sync` or `spin`.
//! On targets without 64-bit atomics, `AtomicU64` is a locked `u64` here.

#[cfg(loom)]
pub use loom::sync::{Arc, atomic::*};

#[cfg(not(loom))]
pub use alloc::sync::Arc;
#[cfg(not(loom))]
pub use core::sync::atomic::*;

// Targets without 64-bit atomics (thumbv7em) get a locked `u64` in its place,
// so code that counts in `u64` (the quota ledger) builds everywhere.
#[cfg(all(not(loom), not(target_has_atomic = "64")))]
pub use locked_u64::AtomicU64;

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

/// `AtomicU64` for targets that have no 64-bit atomics: the value behind a
/// [`Mutex`] (a spin lock, which needs only 32-bit atomics). Built for tests
/// on every target, so the host's unit tests check it too.
#[cfg(all(not(loom), any(test, not(target_has_atomic = "64"))))]
mod locked_u64 {
    use super::{Mutex, Ordering};

    /// A `u64` with the part of `core::sync::atomic::AtomicU64`'s API that
    /// core uses, each operation done under a lock.
    ///
    /// Every operation is one critical section, so read-modify-writes are
    /// atomic and each acts as at least `AcqRel` (the lock's acquire and
    /// release), whatever `Ordering` is passed; the orderings are accepted
    /// only so callers read the same as with the real atomic.
    #[derive(Debug, Default)]
    pub struct AtomicU64 {
        value: Mutex<u64>,
    }

    impl AtomicU64 {
        /// A counter holding `value`.
        pub fn new(value: u64) -> Self {
            AtomicU64 {
                value: Mutex::new(value),
            }
        }

        /// The value now.
        pub fn load(&self, _order: Ordering) -> u64 {
            *self.value.lock()
        }

        /// Replaces the value.
        pub fn store(&self, value: u64, _order: Ordering) {
            *self.value.lock() = value;
        }

        /// Stores `new` if the value is `current`; returns the value before,
        /// `Ok` if it was `current`, `Err` (and nothing stored) otherwise.
        pub fn compare_exchange(
            &self,
            current: u64,
            new: u64,
            _success: Ordering,
            _failure: Ordering,
        ) -> Result<u64, u64> {
            let mut value = self.value.lock();
            if *value == current {
                *value = new;
                Ok(current)
            } else {
                Err(*value)
            }
        }

        /// As [`compare_exchange`](Self::compare_exchange); a lock never
        /// fails spuriously.
        pub fn compare_exchange_weak(
            &self,
            current: u64,
            new: u64,
            success: Ordering,
            failure: Ordering,
        ) -> Result<u64, u64> {
            self.compare_exchange(current, new, success, failure)
        }

        /// Adds `delta` (wrapping, as the atomic does); returns the value
        /// before.
        pub fn fetch_add(&self, delta: u64, _order: Ordering) -> u64 {
            let mut value = self.value.lock();
            let before = *value;
            *value = before.wrapping_add(delta);
            before
        }

        /// Subtracts `delta` (wrapping, as the atomic does); returns the
        /// value before.
        pub fn fetch_sub(&self, delta: u64, _order: Ordering) -> u64 {
            let mut value = self.value.lock();
            let before = *value;
            *value = before.wrapping_sub(delta);
            before
        }
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

    #[test]
    fn locked_u64_behaves_as_the_atomic() {
        let locked = locked_u64::AtomicU64::new(5);
        let real = AtomicU64::new(5);
        let o = Ordering::SeqCst;
        assert_eq!(locked.fetch_add(7, o), real.fetch_add(7, o));
        assert_eq!(locked.fetch_sub(u64::MAX, o), real.fetch_sub(u64::MAX, o));
        assert_eq!(locked.load(o), real.load(o));
        assert_eq!(
            locked.compare_exchange(1, 2, o, o),
            real.compare_exchange(1, 2, o, o)
        );
        let now = real.load(o);
        assert_eq!(
            locked.compare_exchange_weak(now, 9, o, o),
            Ok(now),
            "a lock never fails spuriously"
        );
        locked.store(u64::MAX, o);
        assert_eq!(locked.fetch_add(1, o), u64::MAX);
        assert_eq!(locked.load(o), 0);
    }
}
