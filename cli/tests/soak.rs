//! The soak (issue 16): 32 tenants under a supervisor, for a while, doing
//! random work — Wasm kernels (`inc`), kernels that trap, requests past
//! their quota, copies through a buffer, checks of their data — while a
//! trusted tenant loses the device at a fixed period. After each loss every
//! tenant is restored and goes on; at the end every tenant's data is what
//! its calls made it, every ledger is back to zero, and the worker's
//! memory and the device's stayed flat. Per period it prints the quiet
//! tenants' launch+wait latency (measured in the guest: p50, p99, max), the
//! work done, and memory samples.
//!
//! `TW_SOAK_SECS` (default 6) and `TW_SOAK_FAULT_SECS` (default 2) set the
//! length and the fault period; the GPU run of issue 16 is 300 and 60.

#[path = "support/bin.rs"]
mod bin;
#[path = "support/supervised_guest.rs"]
mod supervised_guest;

use std::time::{Duration, Instant};

use supervised_guest::{
    N, TRUSTED, UNTRUSTED, filled_sum, float, guest, int, long, ok, scratch, supervisor,
};
use tensorwasm_core::abi::Errno;
use tensorwasm_embed::supervise::{Supervisor, SupervisorError, protocol::WasmValue};

/// Tenants in all: one trusted, the rest quiet.
const TENANTS: usize = 32;

fn seconds(var: &str, default: u64) -> Duration {
    Duration::from_secs(
        std::env::var(var)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default),
    )
}

/// xorshift64*: the soak's choices, reproducible.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

/// One period's record.
#[derive(Default)]
struct Period {
    latencies: Vec<u64>,
    traps: u64,
    refusals: u64,
    checks: u64,
    copies: u64,
}

impl Period {
    fn report(&mut self, index: usize, s: &mut Supervisor, started: Instant) -> (u64, u64) {
        self.latencies.sort_unstable();
        let at = |q: f64| {
            let n = self.latencies.len();
            if n == 0 {
                0
            } else {
                self.latencies[((n - 1) as f64 * q).round() as usize]
            }
        };
        let status = s.status().expect("status");
        let used = status.device_total - status.device_free;
        eprintln!(
            "period {index} at {:>6.1} s: {} launches, launch+wait p50 {:.1} µs, p99 {:.1} µs, \
             max {:.1} µs; {} traps, {} quota refusals, {} checks, {} copies; worker RSS {} MiB, \
             device used {} MiB, worker pid {}",
            started.elapsed().as_secs_f64(),
            self.latencies.len(),
            at(0.5) as f64 / 1e3,
            at(0.99) as f64 / 1e3,
            at(1.0) as f64 / 1e3,
            self.traps,
            self.refusals,
            self.checks,
            self.copies,
            status.rss_bytes >> 20,
            used >> 20,
            s.worker_pid(),
        );
        *self = Period::default();
        (status.rss_bytes, used)
    }
}

fn soak(driver_args: &[&str], length: Duration, fault_every: Duration) {
    let dir = scratch("soak");
    let module = dir.join("guest.wat");
    std::fs::write(&module, guest()).unwrap();
    let mut s = supervisor(&dir, driver_args, true);
    let quiet: Vec<String> = (1..TENANTS).map(|i| format!("q{i}")).collect();
    let mut expected = Vec::new();
    for (i, name) in quiet.iter().enumerate() {
        s.add_tenant(name, UNTRUSTED, &module).expect("add");
        assert_eq!(int(ok(&mut s, name, "setup", &[])), 0, "{name}: setup");
        let seed = i as i32 + 1;
        ok(&mut s, name, "fill", &[WasmValue::I32(seed)]);
        expected.push(filled_sum(seed));
    }
    s.add_tenant("raw", TRUSTED, &module).expect("add");
    assert_eq!(int(ok(&mut s, "raw", "load_vadd", &[])), 0);

    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let started = Instant::now();
    let mut period = Period::default();
    let mut samples = Vec::new();
    let mut recoveries = Vec::new();
    let mut next_fault = fault_every;
    let (etrap, equota) = (i64::from(Errno::ETRAP.code()), Errno::EQUOTA.code());
    while started.elapsed() < length {
        if started.elapsed() >= next_fault {
            samples.push(period.report(samples.len(), &mut s, started));
            next_fault += fault_every;
            match s.call("raw", "fault", &[]) {
                Err(SupervisorError::DeviceLost(r)) => {
                    assert!(r.ended.is_empty(), "tenants ended: {:?}", r.ended);
                    assert_eq!(r.restored.len(), TENANTS);
                    eprintln!(
                        "device lost; serving again after {:?} (the worker ready after {:?})",
                        r.took, r.worker_ready
                    );
                    recoveries.push(r.took);
                }
                other => panic!("the fault: expected DeviceLost, got {other:?}"),
            }
            continue;
        }
        let t = (rng.next() % quiet.len() as u64) as usize;
        let name = quiet[t].as_str();
        match rng.next() % 100 {
            0..80 => {
                let took = long(ok(&mut s, name, "inc", &[]));
                assert!(took >= 0, "{name}: inc failed with errno {}", -took);
                period.latencies.push(took as u64);
                expected[t] += f64::from(N);
            }
            80..88 => {
                assert_eq!(
                    i64::from(int(ok(&mut s, name, "boom", &[]))),
                    etrap,
                    "{name}: boom"
                );
                period.traps += 1;
            }
            88..94 => {
                assert_eq!(int(ok(&mut s, name, "hog", &[])), equota, "{name}: hog");
                period.refusals += 1;
            }
            94..97 => {
                assert_eq!(
                    float(ok(&mut s, name, "sum", &[])),
                    expected[t],
                    "{name}: data"
                );
                period.checks += 1;
            }
            _ => {
                assert_eq!(int(ok(&mut s, name, "save", &[])), 0);
                assert_eq!(int(ok(&mut s, name, "restore_y", &[])), 0);
                let copy = float(ok(&mut s, name, "sum_y", &[]));
                assert_eq!(copy, expected[t], "{name}: buffer");
                period.copies += 1;
            }
        }
    }
    samples.push(period.report(samples.len(), &mut s, started));
    for (name, want) in quiet.iter().zip(&expected) {
        assert_eq!(
            float(ok(&mut s, name, "sum", &[])),
            *want,
            "{name}: final data"
        );
    }
    for name in quiet.iter().map(String::as_str).chain(["raw"]) {
        let held = s.remove_tenant(name).expect("remove");
        assert!(held.is_empty(), "{name}'s ledger still held {held:?}");
    }
    let end = s.status().expect("status");
    eprintln!(
        "end: {} recoveries ({recoveries:?}); no tenant left; worker RSS {} MiB, device used {} MiB",
        recoveries.len(),
        end.rss_bytes >> 20,
        (end.device_total - end.device_free) >> 20
    );
    assert_eq!(
        recoveries.len() as u64,
        (length.as_secs() - 1) / fault_every.as_secs().max(1),
        "one fault per period"
    );
    // Flat: no period's sample far above the first's (each recovery starts
    // a new worker, so this is per worker lifetime and across them).
    let (rss0, dev0) = samples[0];
    for (i, &(rss, dev)) in samples.iter().enumerate() {
        assert!(
            rss < rss0 + (64 << 20),
            "period {i}: worker RSS {rss} vs {rss0}"
        );
        assert!(
            dev < dev0 + (256 << 20),
            "period {i}: device used {dev} vs {dev0}"
        );
    }
    drop(s);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn tenants_soak_through_lost_devices_on_the_cpu_driver() {
    soak(
        &[
            "--driver",
            "cpu",
            "--cpu-faults-lose-device",
            "--memory-limit",
            "16777216",
        ],
        seconds("TW_SOAK_SECS", 6),
        seconds("TW_SOAK_FAULT_SECS", 2),
    );
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn tenants_soak_through_lost_gpu_contexts() {
    soak(
        &["--driver", "cuda", "--memory-limit", "16777216"],
        seconds("TW_SOAK_SECS", 300),
        seconds("TW_SOAK_FAULT_SECS", 60),
    );
}
