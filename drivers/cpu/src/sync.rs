//! The locks, condvars and atomics the driver shares between threads, in one
//! place (tokio's pattern) so a loom model could swap them without touching
//! the code that uses them. Poisoning is ignored: no user code (kernel or
//! callback) ever runs while one of these locks is held, so a poisoned lock
//! still guards consistent data.

pub(crate) use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
pub(crate) use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};

use std::sync::PoisonError;

/// Locks `mutex`, ignoring poisoning.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Waits on `condvar` while `condition` holds, ignoring poisoning.
pub(crate) fn wait_while<'a, T>(
    condvar: &Condvar,
    guard: MutexGuard<'a, T>,
    condition: impl FnMut(&mut T) -> bool,
) -> MutexGuard<'a, T> {
    condvar
        .wait_while(guard, condition)
        .unwrap_or_else(PoisonError::into_inner)
}
