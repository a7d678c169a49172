//! What a tenant keeps on the server, and how: its modules and instances
//! counted against their limits from the moment one is reserved
//! ([`reserve`]), and tenant stores that are leaked rather than torn down
//! once their device is lost ([`Leaky`]).

use std::{
    collections::BTreeMap,
    ops::{Deref, DerefMut},
    sync::{Arc, Mutex, OnceLock},
};

use super::lock;

/// A tenant's modules or instances: those kept, by id, and how many are
/// being made (each counts against the limit from the moment it is
/// reserved, so concurrent requests cannot overshoot it).
pub(super) struct Kept<T> {
    pub(super) map: BTreeMap<u64, Arc<T>>,
    pending: usize,
}

impl<T> Default for Kept<T> {
    fn default() -> Self {
        Kept {
            map: BTreeMap::new(),
            pending: 0,
        }
    }
}

/// A place reserved in a [`Kept`]; given back when dropped unfilled.
pub(super) struct Reserved<'a, T> {
    kept: &'a Mutex<Kept<T>>,
    filled: bool,
}

impl<T> Reserved<'_, T> {
    /// Keeps `value` as `id` in the reserved place.
    pub(super) fn fill(mut self, id: u64, value: Arc<T>) {
        let mut kept = lock(self.kept);
        kept.pending -= 1;
        kept.map.insert(id, value);
        self.filled = true;
    }
}

impl<T> Drop for Reserved<'_, T> {
    fn drop(&mut self) {
        if !self.filled {
            lock(self.kept).pending -= 1;
        }
    }
}

/// Reserves a place in `kept` if fewer than `limit` are kept or being made.
pub(super) fn reserve<'a, T>(kept: &'a Mutex<Kept<T>>, limit: usize) -> Option<Reserved<'a, T>> {
    let mut k = lock(kept);
    if k.map.len() + k.pending >= limit {
        return None;
    }
    k.pending += 1;
    Some(Reserved {
        kept,
        filled: false,
    })
}

/// A tenant store that is leaked instead of dropped once its device is
/// lost: after a fault the guest's managed memory cannot be touched from
/// the host, and tearing the store down would.
pub(super) struct Leaky<T> {
    pub(super) value: Option<T>,
    pub(super) lost: Arc<OnceLock<String>>,
}

impl<T> Deref for Leaky<T> {
    type Target = T;
    fn deref(&self) -> &T {
        self.value
            .as_ref()
            .expect("a Leaky holds its value until dropped")
    }
}

impl<T> DerefMut for Leaky<T> {
    fn deref_mut(&mut self) -> &mut T {
        self.value
            .as_mut()
            .expect("a Leaky holds its value until dropped")
    }
}

impl<T> Drop for Leaky<T> {
    fn drop(&mut self) {
        if let Some(value) = self.value.take()
            && self.lost.get().is_some()
        {
            std::mem::forget(value);
        }
    }
}
