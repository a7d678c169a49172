//! What a guest's `wasi_cuda` context counts for a host that reports it
//! (`tensorwasm serve`'s metrics): launches queued (raw, Wasm-kernel and
//! built-in alike), waits ended, the time guests spent waiting for their
//! GPU work, the GPU time of its launches, calls refused by the quota,
//! kernel traps, and calls that found the device lost. The counters are
//! shared handles (clones count into the same total), so every context of
//! one tenant counts into one set; the host reads them and exports them in
//! whatever format it serves (the library depends on no metrics crate).

use std::sync::{
    Arc,
    atomic::{AtomicU64, Ordering},
};

/// A monotonic count shared by its clones.
#[derive(Clone, Debug, Default)]
pub struct Count(Arc<AtomicU64>);

impl Count {
    /// Adds one.
    pub fn inc(&self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }

    /// Adds `n`.
    pub fn inc_by(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }

    /// The total so far.
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// A monotonic sum of seconds (an `f64` kept as its bits) shared by its
/// clones.
#[derive(Clone, Debug, Default)]
pub struct Seconds(Arc<AtomicU64>);

impl Seconds {
    /// Adds `s` seconds (negative or NaN amounts are ignored: the sum only
    /// grows).
    pub fn inc_by(&self, s: f64) {
        if s.is_nan() || s <= 0.0 {
            return;
        }
        // A failed exchange means another clone added meanwhile: retry on
        // what it left.
        let _ = self
            .0
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |bits| {
                Some((f64::from_bits(bits) + s).to_bits())
            });
    }

    /// The sum so far.
    pub fn get(&self) -> f64 {
        f64::from_bits(self.0.load(Ordering::Relaxed))
    }
}

/// One tenant's counters.
#[derive(Clone, Debug, Default)]
pub struct GuestStats {
    /// Launches queued.
    pub launches: Count,
    /// Waits (`wait`, `sync`) that ended.
    pub waits: Count,
    /// Seconds spent in those waits.
    pub wait_seconds: Seconds,
    /// Calls refused with `EQUOTA`.
    pub quota_refusals: Count,
    /// Wasm-kernel launches that ended in a trap (`ETRAP`).
    pub kernel_traps: Count,
    /// Calls that found the device's context lost (`EDEVLOST`).
    pub device_lost: Count,
    /// Seconds the tenant's launches kept its streams busy on the GPU
    /// (events around each launch, `gpu_time.rs`).
    pub gpu_seconds: Seconds,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clones_count_into_one_total() {
        let a = GuestStats::default();
        let b = a.clone();
        a.launches.inc();
        b.launches.inc_by(2);
        assert_eq!(a.launches.get(), 3);
        a.wait_seconds.inc_by(0.25);
        b.wait_seconds.inc_by(0.5);
        b.wait_seconds.inc_by(-1.0);
        b.wait_seconds.inc_by(f64::NAN);
        assert_eq!(a.wait_seconds.get(), 0.75);
    }
}
