//! The server's Prometheus metrics (prometheus-client): per tenant, calls
//! made, calls that trapped or failed in the guest, requests refused at a
//! limit (429), kernel launches, waits and the time spent waiting, the GPU
//! time of the launches, calls that found the device lost (counted by the
//! guests' contexts, [`GuestStats`], whose library counters are exported
//! here as Prometheus counters); at each scrape, what each tenant's
//! quota ledger holds, and each device's free memory and whether it is
//! lost.

use prometheus_client::{
    encoding::{EncodeMetric, MetricEncoder, NoLabelSet, text::encode},
    metrics::{MetricType, TypedMetric, counter::Counter, family::Family, gauge::Gauge},
    registry::Registry,
};

use tensorwasm_embed::wasi_cuda::{Count, GuestStats, Seconds};

/// A guest context's count ([`Count`]) exported as a Prometheus counter.
#[derive(Clone, Debug, Default)]
struct GuestCount(Count);

/// A guest context's seconds ([`Seconds`]) exported as a Prometheus counter.
#[derive(Clone, Debug, Default)]
struct GuestSeconds(Seconds);

impl TypedMetric for GuestCount {
    const TYPE: MetricType = MetricType::Counter;
}

impl TypedMetric for GuestSeconds {
    const TYPE: MetricType = MetricType::Counter;
}

impl EncodeMetric for GuestCount {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        encoder.encode_counter::<NoLabelSet, _, u64>(&self.0.get(), None)
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}

impl EncodeMetric for GuestSeconds {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        encoder.encode_counter::<NoLabelSet, _, u64>(&self.0.get(), None)
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}

type Labels = [(&'static str, String); 1];
type Labels2 = [(&'static str, String); 2];

/// The counters and gauges; [`Metrics::render`] writes the text format.
pub struct Metrics {
    registry: Registry,
    calls: Family<Labels, Counter>,
    traps: Family<Labels, Counter>,
    refused: Family<Labels, Counter>,
    in_use: Family<Labels2, Gauge>,
    device_free: Family<Labels, Gauge>,
    launches: Family<Labels, GuestCount>,
    waits: Family<Labels, GuestCount>,
    wait_seconds: Family<Labels, GuestSeconds>,
    quota_refusals: Family<Labels, GuestCount>,
    kernel_traps: Family<Labels, GuestCount>,
    gpu_seconds: Family<Labels, GuestSeconds>,
    device_lost_calls: Family<Labels, GuestCount>,
    device_lost: Family<Labels, Gauge>,
}

fn tenant(name: &str) -> Labels {
    [("tenant", name.to_string())]
}

impl Metrics {
    /// Metrics for `tenants` (each starts at zero, so it is listed before
    /// its first call).
    pub fn new<'a>(tenants: impl Iterator<Item = &'a str>) -> Self {
        let mut registry = Registry::with_prefix("tensorwasm");
        let calls = Family::<Labels, Counter>::default();
        let traps = Family::<Labels, Counter>::default();
        let refused = Family::<Labels, Counter>::default();
        let in_use = Family::<Labels2, Gauge>::default();
        let device_free = Family::<Labels, Gauge>::default();
        let launches = Family::<Labels, GuestCount>::default();
        let waits = Family::<Labels, GuestCount>::default();
        let wait_seconds = Family::<Labels, GuestSeconds>::default();
        registry.register(
            "launches",
            "Kernel launches queued (raw, Wasm kernels, built-ins)",
            launches.clone(),
        );
        registry.register("waits", "Waits for GPU work that ended", waits.clone());
        registry.register(
            "wait_seconds",
            "Time guests spent waiting for their GPU work",
            wait_seconds.clone(),
        );
        let quota_refusals = Family::<Labels, GuestCount>::default();
        let kernel_traps = Family::<Labels, GuestCount>::default();
        registry.register(
            "quota_refusals",
            "Guest calls refused by the tenant's quota (EQUOTA)",
            quota_refusals.clone(),
        );
        registry.register(
            "kernel_traps",
            "Wasm-kernel launches that trapped (ETRAP)",
            kernel_traps.clone(),
        );
        let gpu_seconds = Family::<Labels, GuestSeconds>::default();
        registry.register(
            "gpu_seconds",
            "GPU time of a tenant's launches: how long they kept its streams busy",
            gpu_seconds.clone(),
        );
        let device_lost_calls = Family::<Labels, GuestCount>::default();
        registry.register(
            "device_lost_calls",
            "Guest calls that found the tenant's device lost (EDEVLOST)",
            device_lost_calls.clone(),
        );
        let device_lost = Family::<Labels, Gauge>::default();
        registry.register(
            "device_lost",
            "1 once a device's context is lost (a kernel faulted): the server must restart",
            device_lost.clone(),
        );
        registry.register("calls", "Guest calls made (invoke and run)", calls.clone());
        registry.register(
            "traps",
            "Guest calls that trapped or failed in the guest",
            traps.clone(),
        );
        registry.register(
            "refused",
            "Requests refused at a tenant's limit (HTTP 429)",
            refused.clone(),
        );
        registry.register(
            "quota_in_use",
            "What a tenant's quota ledger holds, by resource",
            in_use.clone(),
        );
        registry.register(
            "device_free_bytes",
            "A device's free memory",
            device_free.clone(),
        );
        for t in tenants {
            let _ = calls.get_or_create(&tenant(t));
            let _ = traps.get_or_create(&tenant(t));
            let _ = refused.get_or_create(&tenant(t));
            let _ = launches.get_or_create(&tenant(t));
            let _ = waits.get_or_create(&tenant(t));
            let _ = wait_seconds.get_or_create(&tenant(t));
            let _ = quota_refusals.get_or_create(&tenant(t));
            let _ = kernel_traps.get_or_create(&tenant(t));
            let _ = gpu_seconds.get_or_create(&tenant(t));
            let _ = device_lost_calls.get_or_create(&tenant(t));
        }
        Metrics {
            registry,
            calls,
            traps,
            refused,
            in_use,
            device_free,
            launches,
            waits,
            wait_seconds,
            quota_refusals,
            kernel_traps,
            gpu_seconds,
            device_lost_calls,
            device_lost,
        }
    }

    /// The counters a guest of `t` counts into (`WasiCudaCtx::set_stats`).
    pub fn guest_stats(&self, t: &str) -> GuestStats {
        GuestStats {
            launches: self.launches.get_or_create(&tenant(t)).0.clone(),
            waits: self.waits.get_or_create(&tenant(t)).0.clone(),
            wait_seconds: self.wait_seconds.get_or_create(&tenant(t)).0.clone(),
            quota_refusals: self.quota_refusals.get_or_create(&tenant(t)).0.clone(),
            kernel_traps: self.kernel_traps.get_or_create(&tenant(t)).0.clone(),
            gpu_seconds: self.gpu_seconds.get_or_create(&tenant(t)).0.clone(),
            device_lost: self.device_lost_calls.get_or_create(&tenant(t)).0.clone(),
        }
    }

    /// A call of `t`.
    pub fn call(&self, t: &str) {
        self.calls.get_or_create(&tenant(t)).inc();
    }

    /// A call of `t` that trapped.
    pub fn trap(&self, t: &str) {
        self.traps.get_or_create(&tenant(t)).inc();
    }

    /// Guest calls of `t` that found the device lost so far.
    pub fn device_lost_calls(&self, t: &str) -> u64 {
        self.device_lost_calls.get_or_create(&tenant(t)).0.get()
    }

    /// A request of `t` refused at a limit.
    pub fn refused(&self, t: &str) {
        self.refused.get_or_create(&tenant(t)).inc();
    }

    /// Sets what `t`'s ledger holds of `resource`.
    pub fn set_in_use(&self, t: &str, resource: &str, amount: u64) {
        let labels = [
            ("tenant", t.to_string()),
            ("resource", resource.to_string()),
        ];
        self.in_use
            .get_or_create(&labels)
            .set(i64::try_from(amount).unwrap_or(i64::MAX));
    }

    /// Sets whether device `ordinal` is lost.
    pub fn set_device_lost(&self, ordinal: u32, lost: bool) {
        self.device_lost
            .get_or_create(&[("device", ordinal.to_string())])
            .set(i64::from(lost));
    }

    /// Sets device `ordinal`'s free memory.
    pub fn set_device_free(&self, ordinal: u32, bytes: u64) {
        self.device_free
            .get_or_create(&[("device", ordinal.to_string())])
            .set(i64::try_from(bytes).unwrap_or(i64::MAX));
    }

    /// The text exposition format.
    pub fn render(&self) -> String {
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = encode(&mut out, &self.registry);
        out
    }
}
