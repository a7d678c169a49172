//! The tenants bench's output: its markdown tables and its JSON record,
//! with the settings it was measured with and notes on how to read it.

use std::fmt::Write as _;

use serde::Serialize;

use crate::common::{DeviceRecord, max_of, percentile, round, rounded};

use super::{
    AGGREGATE_LAUNCHES, AGGREGATE_WINDOW, Aggregate, CONNECTIONS, HEAVY, HOSTILE_BLOCK,
    HOSTILE_SPAN, Hostile, QUIET_ELEMS, QUIET_LAUNCHES, QUIET_WARMUP, SMALL_ELEMS, Scenario,
};

pub fn table(scenarios: &[Scenario], aggregates: &[Aggregate]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Quiet tenant: ReLU over {QUIET_ELEMS} floats, launch + wait, {QUIET_LAUNCHES} timed; \
         noisy tenants: bf16 GEMM {HEAVY}^3, up to 256 in flight each.\n"
    );
    out.push_str(
        "| noisy tenants | CUDA_DEVICE_MAX_CONNECTIONS | quiet p50 (us) | quiet p99 (us) | quiet \
         max (us) | noisy launches/s (all) | noisy launches |\n\
         | ---: | --- | ---: | ---: | ---: | ---: | ---: |\n",
    );
    for s in scenarios {
        let _ = writeln!(
            out,
            "| {} | {} | {:.1} | {:.1} | {:.1} | {:.1} | {} |",
            s.noisy,
            s.connections,
            s.percentile(50.0),
            s.percentile(99.0),
            s.max(),
            s.noisy_rate(),
            s.noisy_launches
        );
    }
    let _ = writeln!(
        out,
        "\nSmall launches: ReLU over {SMALL_ELEMS} floats, {AGGREGATE_LAUNCHES} per tenant, \
         {AGGREGATE_WINDOW} queued per sync.\n"
    );
    out.push_str(
        "| tenants | launches | seconds | launches/s (all) |\n| ---: | ---: | ---: | ---: |\n",
    );
    for a in aggregates {
        let _ = writeln!(
            out,
            "| {} | {} | {:.3} | {:.0} |",
            a.tenants,
            a.launches,
            a.secs,
            a.launches as f64 / a.secs
        );
    }
    out
}

/// The hostile scenario's tables.
pub fn hostile_table(h: &Hostile) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\nHostile tenant: a Wasm kernel that never ends, grid {} x {HOSTILE_BLOCK} threads, \
         unlimited kernel fuel, launch time {} ms, at most {}% of the device's thread slots at \
         once (the untrusted default); each launch waited. The quiet tenant's {QUIET_LAUNCHES} \
         timed launches start {:.0} us apart ({HOSTILE_SPAN} hostile launch times).\n",
        h.grid,
        h.launch_ms,
        h.share_percent,
        h.interval.as_secs_f64() * 1e6
    );
    out.push_str(
        "| quiet tenant | p50 (us) | p99 (us) | max (us) |\n| --- | ---: | ---: | ---: |\n",
    );
    for (what, xs) in [
        ("alone", &h.alone_us),
        ("under the hostile tenant", &h.flooded_us),
    ] {
        let _ = writeln!(
            out,
            "| {what} | {:.1} | {:.1} | {:.1} |",
            percentile(xs, 50.0),
            percentile(xs, 99.0),
            max_of(xs)
        );
    }
    let l = &h.launches;
    let ended = if h.all_time_limit() {
        format!("all {}", l.time_limit_traps)
    } else {
        format!(
            "{} of {} (first other: {})",
            l.time_limit_traps,
            l.durations_ms.len(),
            l.other.as_deref().unwrap_or("none")
        )
    };
    let _ = writeln!(
        out,
        "\n| hostile launches | ended by the time-limit trap | median (ms) | max (ms) |\n\
         | ---: | --- | ---: | ---: |\n| {} | {ended} | {:.1} | {:.1} |",
        l.durations_ms.len(),
        percentile(&l.durations_ms, 50.0),
        max_of(&l.durations_ms)
    );
    out
}

/// The JSON record: every latency, and what produced it. Latencies and
/// percentiles to 2 decimals; a non-finite number (a percentile of no
/// samples) is `null`.
#[derive(Serialize)]
pub struct Record<'a> {
    benchmark: &'static str,
    date_utc: String,
    command: String,
    device: DeviceRecord,
    config: Config,
    notes: [&'static str; 4],
    #[serde(skip_serializing_if = "Option::is_none")]
    child_error: Option<&'a str>,
    scenarios: Vec<ScenarioRecord<'a>>,
    aggregates: Vec<AggregateRecord>,
    #[serde(skip_serializing_if = "Option::is_none")]
    hostile: Option<HostileRecord<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    hostile_error: Option<&'a str>,
}

/// The settings the record was measured with.
#[derive(Serialize)]
struct Config {
    quiet_elems: u64,
    quiet_launches: usize,
    quiet_warmup: usize,
    heavy_gemm_bf16_mnk: u64,
    small_elems: u64,
    aggregate_launches_per_tenant: usize,
    aggregate_window: usize,
    launches_in_flight_quota: u32,
    connections: u32,
}

/// One fairness scenario in the record.
#[derive(Serialize)]
struct ScenarioRecord<'a> {
    noisy_tenants: usize,
    connections: &'a str,
    quiet_p50_us: f64,
    quiet_p99_us: f64,
    quiet_max_us: f64,
    noisy_launches: u64,
    noisy_seconds: f64,
    noisy_launches_per_s: f64,
    quiet_latencies_us: Vec<f64>,
}

/// One aggregate run in the record.
#[derive(Serialize)]
struct AggregateRecord {
    tenants: usize,
    launches: u64,
    seconds: f64,
    launches_per_s: f64,
}

/// The hostile scenario in the record.
#[derive(Serialize)]
struct HostileRecord<'a> {
    launch_time_ms: u64,
    grid_x: u32,
    block_x: u32,
    kernel_fuel: &'static str,
    launch_share_percent: u64,
    quiet_interval_us: f64,
    quiet_alone_p50_us: f64,
    quiet_alone_p99_us: f64,
    quiet_alone_max_us: f64,
    quiet_hostile_p50_us: f64,
    quiet_hostile_p99_us: f64,
    quiet_hostile_max_us: f64,
    hostile_launches: usize,
    hostile_time_limit_traps: usize,
    hostile_all_time_limit: bool,
    hostile_median_ms: f64,
    hostile_max_ms: f64,
    hostile_other_outcome: Option<&'a str>,
    hostile_durations_ms: Vec<f64>,
    quiet_alone_latencies_us: Vec<f64>,
    quiet_hostile_latencies_us: Vec<f64>,
}

impl<'a> Record<'a> {
    pub fn new(
        info: &tensorwasm_core::DeviceInfo,
        date_utc: String,
        command: String,
        child_error: Option<&'a str>,
        scenarios: &'a [Scenario],
        aggregates: &[Aggregate],
        hostile: Result<&'a Hostile, &'a String>,
    ) -> Record<'a> {
        Record {
            benchmark: "tenants",
            date_utc,
            command,
            device: DeviceRecord::new(info),
            config: Config {
                quiet_elems: QUIET_ELEMS,
                quiet_launches: QUIET_LAUNCHES,
                quiet_warmup: QUIET_WARMUP,
                heavy_gemm_bf16_mnk: HEAVY,
                small_elems: SMALL_ELEMS,
                aggregate_launches_per_tenant: AGGREGATE_LAUNCHES,
                aggregate_window: AGGREGATE_WINDOW,
                launches_in_flight_quota: 256,
                connections: CONNECTIONS.parse().expect("CONNECTIONS is a number"),
            },
            notes: [
                "quiet latency: host time around one call of the guest's launch_wait export \
                 (tensor_op, then wait on its handle), so it includes wasmtime's call_async and \
                 the fiber switch; the first 100 launches are untimed",
                "noisy tenants queue the GEMM until EQUOTA, then wait the oldest handle (wait \
                 waits for the tenant's whole stream) and the rest (finished by then), and fill \
                 again; their rate is launches completed over the time from their first launch \
                 to the end of their final sync",
                "the unset row is a child process of this binary with CUDA_DEVICE_MAX_CONNECTIONS \
                 removed from its environment",
                "hostile: the quiet tenant's launches are paced (started quiet_interval_us apart, \
                 spinning in between, alone and under the hostile tenant alike, after 100 \
                 unpaced untimed ones); each hostile launch's duration is host time from its \
                 launch call to the return of its wait; a launch counts as ended by the time \
                 limit when wait returned ETRAP and the last error says time limit",
            ],
            child_error,
            scenarios: scenarios.iter().map(ScenarioRecord::new).collect(),
            aggregates: aggregates.iter().map(AggregateRecord::new).collect(),
            hostile: hostile.ok().map(HostileRecord::new),
            hostile_error: hostile.err().map(String::as_str),
        }
    }
}

impl<'a> ScenarioRecord<'a> {
    fn new(s: &'a Scenario) -> ScenarioRecord<'a> {
        ScenarioRecord {
            noisy_tenants: s.noisy,
            connections: &s.connections,
            quiet_p50_us: round(s.percentile(50.0), 2),
            quiet_p99_us: round(s.percentile(99.0), 2),
            quiet_max_us: round(s.max(), 2),
            noisy_launches: s.noisy_launches,
            noisy_seconds: round(s.noisy_secs, 4),
            noisy_launches_per_s: round(s.noisy_rate(), 2),
            quiet_latencies_us: rounded(&s.latencies_us, 2),
        }
    }
}

impl AggregateRecord {
    fn new(a: &Aggregate) -> AggregateRecord {
        AggregateRecord {
            tenants: a.tenants,
            launches: a.launches,
            seconds: round(a.secs, 4),
            launches_per_s: round(a.launches as f64 / a.secs, 1),
        }
    }
}

impl<'a> HostileRecord<'a> {
    fn new(h: &'a Hostile) -> HostileRecord<'a> {
        let l = &h.launches;
        HostileRecord {
            launch_time_ms: h.launch_ms,
            grid_x: h.grid,
            block_x: HOSTILE_BLOCK,
            kernel_fuel: "unlimited",
            launch_share_percent: h.share_percent,
            quiet_interval_us: round(h.interval.as_secs_f64() * 1e6, 1),
            quiet_alone_p50_us: round(percentile(&h.alone_us, 50.0), 2),
            quiet_alone_p99_us: round(percentile(&h.alone_us, 99.0), 2),
            quiet_alone_max_us: round(max_of(&h.alone_us), 2),
            quiet_hostile_p50_us: round(percentile(&h.flooded_us, 50.0), 2),
            quiet_hostile_p99_us: round(percentile(&h.flooded_us, 99.0), 2),
            quiet_hostile_max_us: round(max_of(&h.flooded_us), 2),
            hostile_launches: l.durations_ms.len(),
            hostile_time_limit_traps: l.time_limit_traps,
            hostile_all_time_limit: h.all_time_limit(),
            hostile_median_ms: round(percentile(&l.durations_ms, 50.0), 2),
            hostile_max_ms: round(max_of(&l.durations_ms), 2),
            hostile_other_outcome: l.other.as_deref(),
            hostile_durations_ms: rounded(&l.durations_ms, 2),
            quiet_alone_latencies_us: rounded(&h.alone_us, 2),
            quiet_hostile_latencies_us: rounded(&h.flooded_us, 2),
        }
    }
}
