//! What a guest's `wasi_cuda` context counts for a host that reports it
//! (`tensorwasm serve`'s metrics): launches queued (raw, Wasm-kernel and
//! built-in alike), waits ended, the time guests spent waiting for their
//! GPU work, the GPU time of its launches, calls refused by the quota,
//! kernel traps, and calls that found the device lost. The counters are Prometheus counters, shared by every
//! context of one tenant.

use prometheus_client::metrics::counter::Counter;
use std::sync::atomic::AtomicU64;

/// One tenant's counters.
#[derive(Clone, Debug, Default)]
pub struct GuestStats {
    /// Launches queued.
    pub launches: Counter,
    /// Waits (`wait`, `sync`) that ended.
    pub waits: Counter,
    /// Seconds spent in those waits.
    pub wait_seconds: Counter<f64, AtomicU64>,
    /// Calls refused with `EQUOTA`.
    pub quota_refusals: Counter,
    /// Wasm-kernel launches that ended in a trap (`ETRAP`).
    pub kernel_traps: Counter,
    /// Calls that found the device's context lost (`EDEVLOST`).
    pub device_lost: Counter,
    /// Seconds the tenant's launches kept its streams busy on the GPU
    /// (events around each launch, `gpu_time.rs`).
    pub gpu_seconds: Counter<f64, AtomicU64>,
}
