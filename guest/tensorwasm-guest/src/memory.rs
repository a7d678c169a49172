//! Hints about the guest's own memory: [`prefetch`] and [`advise`]. Both
//! are about where pages live, never what they hold, so they take any slice.

use crate::error::Error;
use crate::result;

/// Where [`prefetch`] moves memory to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Target {
    /// The device the guest uses.
    Device = 0,
    /// The host.
    Host = 1,
}

/// A hint for [`advise`] (the driver's memory advice, by ABI code).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Advice {
    /// Mostly read: the driver may keep read-only copies near each reader.
    SetReadMostly = 0,
    /// Undoes [`Advice::SetReadMostly`].
    UnsetReadMostly = 1,
    /// Prefer to keep the pages on the device.
    PreferDevice = 2,
    /// Prefer to keep the pages on the host.
    PreferHost = 3,
    /// Undoes [`Advice::PreferDevice`] and [`Advice::PreferHost`].
    UnsetPreferredLocation = 4,
    /// The device will access the pages: keep them mapped for it.
    AccessedByDevice = 5,
    /// Undoes [`Advice::AccessedByDevice`].
    UnsetAccessedByDevice = 6,
}

/// The guest address and byte length of `data`.
fn range<T>(data: &[T]) -> (u32, u32) {
    // Wasm32 addresses and slice sizes fit in 32 bits.
    (
        data.as_ptr().expose_provenance() as u32,
        size_of_val(data) as u32,
    )
}

/// Asks the driver to migrate the pages of `data` to `target`, ordered on
/// the guest's stream. Advisory: where the device cannot, it is skipped and
/// still `Ok`. An empty slice does nothing. `ENOTADDR` when the guest's
/// memory is not managed memory.
pub fn prefetch<T>(data: &[T], target: Target) -> Result<(), Error> {
    if size_of_val(data) == 0 {
        return Ok(());
    }
    let (ptr, len) = range(data);
    result::prefetch(ptr, len, target as u32)
}

/// Gives the driver a hint about the pages of `data`. An empty slice does
/// nothing. `ENOTADDR` when the guest's memory is not managed memory.
pub fn advise<T>(data: &[T], advice: Advice) -> Result<(), Error> {
    if size_of_val(data) == 0 {
        return Ok(());
    }
    let (ptr, len) = range(data);
    result::advise(ptr, len, advice as u32)
}
