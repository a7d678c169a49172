//! Fairness between tenants of one GPU: how long a quiet tenant's small
//! launch takes, from the guest's `tensor_op` to the return of its `wait`,
//! while other tenants flood the device.
//!
//! 1. The quiet tenant launches a built-in ReLU over 64K floats (device
//!    buffers) and waits, 2000 times (after 100 untimed), alone, then while
//!    1 and then 4 noisy tenants, each on its own thread, flood: each
//!    queues bf16 GEMMs of 1024 x 1024 x 1024 (the heavy kernel: 2.1 GFLOP
//!    in 64 blocks of 128 x 128) until its launches-in-flight quota (the
//!    untrusted default, 256) says `EQUOTA`, then waits its oldest launch
//!    and continues. `wait` waits for the tenant's whole stream, so waiting
//!    the oldest drains the queue; the handles left are then waited too
//!    (they return at once) and the tenant fills the queue again.
//! 2. The aggregate launch rate of 32 tenants each doing 992 small
//!    launches (ReLU over 4K floats, 16 queued, then `sync`), next to one
//!    tenant doing the same.
//! 3. A hostile tenant: the quiet tenant's launches alone, then while an
//!    untrusted tenant, on its own thread, submits the largest launch its
//!    quota allows, again and again: a Wasm kernel that never ends
//!    (`loop ... br 0`) over the device's largest grid x (2^31 - 1 blocks
//!    on an H100) of 256 threads, with fuel that never runs out, so only
//!    the launch time limit ends it (200 ms, or `--hostile-launch-ms N`).
//!    Each launch is waited and must end with `ETRAP`, "launch time limit
//!    exceeded". Both quiet runs spread their timed launches over 10
//!    hostile launch times, so they sample every part of a hostile launch
//!    (its blocks arriving, running, stopping) and are paced alike.
//! 4. The 4-noisy scenario again in a child process of this binary with
//!    `CUDA_DEVICE_MAX_CONNECTIONS` removed from its environment (the
//!    driver's default: 8 hardware queues), against 32 here.
//!
//! Every tenant is untrusted (`TenantConfig::untrusted`; the hostile one
//! with unlimited kernel fuel and its own launch time), on one
//! [`GuestRuntime`] shared by every thread. The quiet tenant's last output
//! and one noisy GEMM (64 sampled elements) are checked against float64
//! references. Prints markdown tables and writes every latency to
//! `$OUT/tenants.json` (or `./tenants.json`) with the command line. Run with
//! `cargo bench -p tensorwasm-embed --bench tenants`; exits 2 when no CUDA
//! device is usable.
//!
//! This file is what is measured; `tenants/` holds the tenants' guests and
//! the ops they run (`guests.rs`) and the tables and record (`record.rs`);
//! the harness is `common/`.

mod common;

#[path = "tenants/guests.rs"]
mod guests;
#[path = "tenants/record.rs"]
mod record;

use common::{
    BenchResult, NoDevice, command_line, driver_version,
    guest::wasm_error,
    main_on_device, max_of, percentile,
    timing::{ms, us},
    utc_timestamp,
};
use std::{
    collections::VecDeque,
    process::ExitCode,
    sync::atomic::{AtomicBool, AtomicUsize, Ordering},
    time::{Duration, Instant},
};

use guests::{
    BenchGuest, GUEST_WAT, HOSTILE_WAT, HostileGuest, gemm_tenant, hostile_quota, relu_tenant,
};
use record::{Record, hostile_table, table};
use tensorwasm_core::{GpuDriver, abi::Errno};
use tensorwasm_cuda::CudaDriver;
use tensorwasm_embed::{kernel::GuestModule, runtime::GuestRuntime, wasi_cuda::WasiCudaLimits};
use tensorwasm_kernels::oracle;

/// The environment variable the CUDA driver reads in `cuInit`: how many
/// hardware work queues the streams of a context spread over.
const CONNECTIONS_ENV: &str = "CUDA_DEVICE_MAX_CONNECTIONS";
/// What this bench sets it to: one queue per stream of up to 32 tenants.
const CONNECTIONS: &str = "32";
/// Runs only the 4-noisy scenario and prints its result line (the parent
/// starts the child with `CONNECTIONS_ENV` removed).
const CHILD_FLAG: &str = "--connections-unset-child";
/// The child's result line starts with this.
const CHILD_PREFIX: &str = "tenants-child-result:";

/// The quiet tenant's ReLU: 64K floats.
const QUIET_ELEMS: u64 = 64 << 10;
/// Timed quiet launches per scenario.
const QUIET_LAUNCHES: usize = 2000;
/// Untimed quiet launches before them.
const QUIET_WARMUP: usize = 100;
/// Noisy tenants per scenario.
const NOISY: [usize; 3] = [0, 1, 4];
/// The noisy tenants' bf16 GEMM: M = N = K.
const HEAVY: u64 = 1024;
/// The aggregate run's ReLU: 4K floats.
const SMALL_ELEMS: u64 = 4 << 10;
/// Tenants of the aggregate run.
const AGGREGATE_TENANTS: usize = 32;
/// Launches per tenant in the aggregate run (62 windows).
const AGGREGATE_LAUNCHES: usize = 992;
/// Launches queued before each `sync` in the aggregate run.
const AGGREGATE_WINDOW: usize = 16;
const _: () = assert!(AGGREGATE_LAUNCHES.is_multiple_of(AGGREGATE_WINDOW));
/// Each guest memory's reservation (managed memory, populated lazily).
const GUEST_MEMORY_LIMIT: usize = 16 << 20;
/// Sets the hostile tenant's launch time, in milliseconds.
const HOSTILE_FLAG: &str = "--hostile-launch-ms";
/// The hostile tenant's launch time without the flag: long enough that a
/// launch has all its blocks resident for most of its life, short enough
/// that the scenario takes seconds.
const HOSTILE_LAUNCH_MS: u64 = 200;
/// Threads per block of the hostile launch.
const HOSTILE_BLOCK: u32 = 256;
/// The quiet tenant's timed launches are spread over this many hostile
/// launch times (alone and under the flood alike).
const HOSTILE_SPAN: u32 = 10;

/// Guest memory layout: where exports put a handle, where the tensor op's
/// descriptor goes, where data goes.
const OUT: u32 = 64;
const DESC: u32 = 256;
const DATA: u32 = 65536;

fn main() -> ExitCode {
    let child = std::env::args().any(|a| a == CHILD_FLAG);
    let hostile_ms = match hostile_launch_ms() {
        Ok(ms) => ms,
        Err(e) => {
            eprintln!("tenants: {e}");
            return ExitCode::FAILURE;
        }
    };
    let connections = if child {
        format!("{CONNECTIONS_ENV} unset (the driver's default, 8)")
    } else {
        // SAFETY: the first thing `main` does: no other thread exists yet
        // (nothing has spawned one, and the CUDA driver, which reads the
        // variable in cuInit, is not loaded), so nothing reads or writes the
        // environment at the same time.
        unsafe { std::env::set_var(CONNECTIONS_ENV, CONNECTIONS) };
        format!("{CONNECTIONS_ENV}={CONNECTIONS} (set by the bench)")
    };
    main_on_device("tenants", NoDevice::Fail, |d| {
        if child {
            run_child(d.clone())
        } else {
            run(d.clone(), &connections, hostile_ms)
        }
    })
}

/// The hostile tenant's launch time: `--hostile-launch-ms N` (or `=N`),
/// else [`HOSTILE_LAUNCH_MS`].
fn hostile_launch_ms() -> BenchResult<u64> {
    let args: Vec<String> = std::env::args().collect();
    let mut value = None;
    for (i, a) in args.iter().enumerate() {
        if a == HOSTILE_FLAG {
            value = Some(args.get(i + 1).map_or("", String::as_str));
        } else if let Some(v) = a
            .strip_prefix(HOSTILE_FLAG)
            .and_then(|v| v.strip_prefix('='))
        {
            value = Some(v);
        }
    }
    match value {
        None => Ok(HOSTILE_LAUNCH_MS),
        Some(v) => v
            .parse()
            .ok()
            .filter(|&ms| ms >= 1)
            .ok_or_else(|| format!("{HOSTILE_FLAG} wants milliseconds, at least 1; got {v:?}")),
    }
}

// ---------------------------------------------------------------------------
// Scenarios.

/// What one fairness scenario measured.
struct Scenario {
    noisy: usize,
    connections: String,
    /// The quiet tenant's launch-to-wait-return latencies, microseconds.
    latencies_us: Vec<f64>,
    /// Noisy launches completed, and the seconds from the first to the
    /// end of the last one.
    noisy_launches: u64,
    noisy_secs: f64,
}

impl Scenario {
    fn noisy_rate(&self) -> f64 {
        if self.noisy_secs > 0.0 {
            self.noisy_launches as f64 / self.noisy_secs
        } else {
            0.0
        }
    }

    fn percentile(&self, p: f64) -> f64 {
        percentile(&self.latencies_us, p)
    }

    fn max(&self) -> f64 {
        max_of(&self.latencies_us)
    }
}

/// A noisy tenant: floods until `stop`, then drains. Launches completed and
/// the seconds they took.
fn flood(
    runtime: &GuestRuntime<CudaDriver>,
    module: &GuestModule,
    index: usize,
    ready: &AtomicUsize,
    stop: &AtomicBool,
) -> BenchResult<(u64, f64)> {
    let prepared = (|| {
        let mut guest = BenchGuest::new(runtime, module, &format!("noisy {index}"))?;
        gemm_tenant(&mut guest, 0x6e6f_6973_7900 + index as u64)?;
        BenchResult::Ok(guest)
    })();
    // Counted even when it failed: the quiet tenant waits for every one.
    ready.fetch_add(1, Ordering::SeqCst);
    let mut guest = prepared?;
    let equota = Errno::EQUOTA.code();
    let mut queue = VecDeque::new();
    let mut launches = 0u64;
    let start = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        let e = guest.launch()?;
        if e == 0 {
            queue.push_back(guest.handle());
            launches += 1;
        } else if e == equota {
            // The oldest: `wait` waits for the whole stream, so the others
            // have finished too and their waits return at once.
            while let Some(h) = queue.pop_front() {
                guest.wait(h)?;
            }
        } else {
            guest.ok("launch (heavy GEMM)", e)?;
        }
    }
    guest.sync()?;
    Ok((launches, start.elapsed().as_secs_f64()))
}

/// The quiet tenant's latencies while `noisy` tenants flood.
fn scenario(
    runtime: &GuestRuntime<CudaDriver>,
    module: &GuestModule,
    noisy: usize,
    connections: &str,
) -> BenchResult<Scenario> {
    let ready = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let floods: Vec<_> = (0..noisy)
            .map(|i| {
                let (ready, stop) = (&ready, &stop);
                s.spawn(move || flood(runtime, module, i, ready, stop))
            })
            .collect();
        let quiet = (|| {
            let mut guest = BenchGuest::new(runtime, module, "quiet")?;
            let (x, yb) = relu_tenant(&mut guest, QUIET_ELEMS, 0x0071_7569_6574)?;
            while ready.load(Ordering::SeqCst) < noisy {
                std::thread::sleep(Duration::from_millis(1));
            }
            // Let the floods fill their queues.
            std::thread::sleep(Duration::from_millis(if noisy > 0 { 200 } else { 0 }));
            for _ in 0..QUIET_WARMUP {
                guest.launch_wait()?;
            }
            let mut latencies_us = Vec::with_capacity(QUIET_LAUNCHES);
            for _ in 0..QUIET_LAUNCHES {
                let t = Instant::now();
                guest.launch_wait()?;
                latencies_us.push(us(t.elapsed()));
            }
            let y = guest.read_buffer(yb, x.len())?;
            oracle::check_close(&y, &oracle::relu(&oracle::widen(&x)), 0.0, 0.0)
                .map_err(|e| format!("the quiet tenant's ReLU: {e}"))?;
            BenchResult::Ok(latencies_us)
        })();
        stop.store(true, Ordering::SeqCst);
        let mut noisy_launches = 0;
        let mut noisy_secs: f64 = 0.0;
        for f in floods {
            let (n, secs) = f.join().map_err(|_| "a noisy tenant panicked")??;
            noisy_launches += n;
            noisy_secs = noisy_secs.max(secs);
        }
        Ok(Scenario {
            noisy,
            connections: connections.to_string(),
            latencies_us: quiet?,
            noisy_launches,
            noisy_secs,
        })
    })
}

/// What an aggregate run measured.
struct Aggregate {
    tenants: usize,
    launches: u64,
    secs: f64,
}

/// `tenants` tenants, each `AGGREGATE_LAUNCHES` small ReLUs, 16 queued
/// before each `sync`; all start together.
fn aggregate(
    runtime: &GuestRuntime<CudaDriver>,
    module: &GuestModule,
    tenants: usize,
) -> BenchResult<Aggregate> {
    let ready = AtomicUsize::new(0);
    let go = AtomicBool::new(false);
    let mut start = Instant::now();
    let launches = std::thread::scope(|s| {
        let threads: Vec<_> = (0..tenants)
            .map(|i| {
                let (ready, go) = (&ready, &go);
                s.spawn(move || {
                    let prepared = (|| {
                        let mut guest = BenchGuest::new(runtime, module, &format!("small {i}"))?;
                        let (x, yb) =
                            relu_tenant(&mut guest, SMALL_ELEMS, 0x736d_616c_6c00 + i as u64)?;
                        guest.launch_wait()?;
                        BenchResult::Ok((guest, x, yb))
                    })();
                    ready.fetch_add(1, Ordering::SeqCst);
                    let (mut guest, x, yb) = prepared?;
                    while !go.load(Ordering::Acquire) {
                        std::hint::spin_loop();
                    }
                    for _ in 0..AGGREGATE_LAUNCHES / AGGREGATE_WINDOW {
                        for _ in 0..AGGREGATE_WINDOW {
                            let e = guest.launch()?;
                            guest.ok("launch (small ReLU)", e)?;
                        }
                        guest.sync()?;
                    }
                    let y = guest.read_buffer(yb, x.len())?;
                    oracle::check_close(&y, &oracle::relu(&oracle::widen(&x)), 0.0, 0.0)
                        .map_err(|e| format!("a small ReLU: {e}"))?;
                    BenchResult::Ok(AGGREGATE_LAUNCHES as u64)
                })
            })
            .collect();
        while ready.load(Ordering::SeqCst) < tenants {
            std::thread::sleep(Duration::from_millis(1));
        }
        start = Instant::now();
        go.store(true, Ordering::Release);
        let mut total = 0;
        for t in threads {
            total += t.join().map_err(|_| "a tenant panicked")??;
        }
        BenchResult::Ok(total)
    })?;
    Ok(Aggregate {
        tenants,
        launches,
        secs: start.elapsed().as_secs_f64(),
    })
}

// ---------------------------------------------------------------------------
// The hostile tenant.

/// How the hostile tenant's launches ended.
#[derive(Default)]
struct HostileLaunches {
    /// Each launch's wall time, from its `launch` to the return of its
    /// `wait`, in milliseconds.
    durations_ms: Vec<f64>,
    /// Launches whose `wait` returned `ETRAP` with "time limit" in the last
    /// error.
    time_limit_traps: usize,
    /// The first launch that ended otherwise: its errno and last error.
    other: Option<String>,
}

/// The hostile tenant: makes its kernel, says `ready`, waits for `go`,
/// then launches the endless kernel over `grid` x [`HOSTILE_BLOCK`] and
/// waits for it, again and again until `stop` (`flooding` once its first
/// launch is queued).
fn hostile_flood(
    runtime: &GuestRuntime<CudaDriver>,
    module: &GuestModule,
    launch_time: Duration,
    grid: u32,
    [ready, go, flooding, stop]: [&AtomicBool; 4],
) -> BenchResult<HostileLaunches> {
    let prepared = (|| {
        let mut guest = HostileGuest::new(runtime, module, launch_time)?;
        guest.kernel_get()?;
        BenchResult::Ok(guest)
    })();
    // Said even when it failed: the quiet tenant waits for it.
    ready.store(true, Ordering::SeqCst);
    let mut guest = prepared?;
    let mut out = HostileLaunches::default();
    while !go.load(Ordering::SeqCst) {
        if stop.load(Ordering::SeqCst) {
            return Ok(out);
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    while !stop.load(Ordering::SeqCst) {
        let t = Instant::now();
        guest.launch(grid, HOSTILE_BLOCK)?;
        flooding.store(true, Ordering::SeqCst);
        let e = guest.wait_last()?;
        out.durations_ms.push(ms(t.elapsed()));
        let text = guest.last_error();
        if e == Errno::ETRAP.code() && text.contains("time limit") {
            out.time_limit_traps += 1;
        } else if out.other.is_none() {
            out.other = Some(format!("wait returned errno {e}; last error: {text}"));
        }
    }
    Ok(out)
}

/// The quiet tenant's latencies, microseconds: [`QUIET_WARMUP`] untimed
/// launches, then [`QUIET_LAUNCHES`] timed ones, started `interval` apart
/// (at once when one ran late). The gaps are spun, not slept: a thread
/// woken from a sleep before each launch measures its own wake-up too.
fn paced_latencies(guest: &mut BenchGuest, interval: Duration) -> BenchResult<Vec<f64>> {
    for _ in 0..QUIET_WARMUP {
        guest.launch_wait()?;
    }
    let mut latencies_us = Vec::with_capacity(QUIET_LAUNCHES);
    let start = Instant::now();
    for i in 0..QUIET_LAUNCHES {
        let at = start + interval * i as u32;
        while Instant::now() < at {
            std::hint::spin_loop();
        }
        let t = Instant::now();
        guest.launch_wait()?;
        latencies_us.push(us(t.elapsed()));
    }
    Ok(latencies_us)
}

/// What the hostile scenario measured.
struct Hostile {
    launch_ms: u64,
    grid: u32,
    /// The hostile quota's share of the device one launch may hold.
    share_percent: u64,
    /// Between the starts of the quiet tenant's timed launches.
    interval: Duration,
    /// The quiet tenant's latencies alone and under the hostile tenant,
    /// microseconds.
    alone_us: Vec<f64>,
    flooded_us: Vec<f64>,
    launches: HostileLaunches,
}

impl Hostile {
    fn all_time_limit(&self) -> bool {
        !self.launches.durations_ms.is_empty()
            && self.launches.time_limit_traps == self.launches.durations_ms.len()
    }
}

/// The quiet tenant alone, then while the hostile tenant floods with its
/// largest launch (its launches `launch_ms` each).
fn hostile_scenario(
    runtime: &GuestRuntime<CudaDriver>,
    module: &GuestModule,
    launch_ms: u64,
) -> BenchResult<Hostile> {
    let hostile_module = runtime
        .compile(HOSTILE_WAT)
        .map_err(wasm_error("compiling the hostile guest"))?;
    let launch_time = Duration::from_millis(launch_ms);
    let grid = runtime.driver().device().max_grid_dim.0;
    let interval = launch_time * HOSTILE_SPAN / QUIET_LAUNCHES as u32;
    let flags = [(); 4].map(|()| AtomicBool::new(false));
    let [ready, go, flooding, stop] = &flags;
    std::thread::scope(|s| {
        let hostile = s.spawn(|| {
            let flags = [ready, go, flooding, stop];
            hostile_flood(runtime, &hostile_module, launch_time, grid, flags)
        });
        // False when the hostile tenant ended (failed) first.
        let wait_for = |flag: &AtomicBool| {
            while !flag.load(Ordering::SeqCst) && !hostile.is_finished() {
                std::thread::sleep(Duration::from_millis(1));
            }
            flag.load(Ordering::SeqCst)
        };
        let quiet = (|| {
            let mut guest = BenchGuest::new(runtime, module, "quiet")?;
            let (x, yb) = relu_tenant(&mut guest, QUIET_ELEMS, 0x0071_7569_6574)?;
            if !wait_for(ready) {
                return Err("the hostile tenant ended before it was ready".to_string());
            }
            let alone = paced_latencies(&mut guest, interval)?;
            go.store(true, Ordering::SeqCst);
            if !wait_for(flooding) {
                return Err("the hostile tenant ended before its first launch".to_string());
            }
            let flooded = paced_latencies(&mut guest, interval)?;
            let y = guest.read_buffer(yb, x.len())?;
            oracle::check_close(&y, &oracle::relu(&oracle::widen(&x)), 0.0, 0.0)
                .map_err(|e| format!("the quiet tenant's ReLU: {e}"))?;
            BenchResult::Ok((alone, flooded))
        })();
        stop.store(true, Ordering::SeqCst);
        // The hostile tenant's own failure explains the quiet one's.
        let launches = hostile
            .join()
            .map_err(|_| "the hostile tenant panicked")??;
        let (alone_us, flooded_us) = quiet?;
        Ok(Hostile {
            launch_ms,
            grid,
            share_percent: hostile_quota(launch_time).launch_share_percent(),
            interval,
            alone_us,
            flooded_us,
            launches,
        })
    })
}

fn setup(driver: CudaDriver) -> BenchResult<(GuestRuntime<CudaDriver>, GuestModule)> {
    let mut runtime =
        GuestRuntime::new(driver, GUEST_MEMORY_LIMIT).map_err(wasm_error("the guest runtime"))?;
    // The runtime's own cap on kernel fuel (2^24 a thread by default) would
    // end the hostile tenant's loop before its launch time does. Every
    // tenant here is untrusted, so its quota's fuel still bounds it.
    runtime.set_limits(WasiCudaLimits {
        kernel_fuel: u64::MAX,
        ..WasiCudaLimits::default()
    });
    let module = runtime
        .compile(GUEST_WAT)
        .map_err(wasm_error("compiling the bench guest"))?;
    Ok((runtime, module))
}

/// The child: the 4-noisy scenario without `CUDA_DEVICE_MAX_CONNECTIONS`;
/// one result line on stdout.
fn run_child(driver: CudaDriver) -> BenchResult<()> {
    let (runtime, module) = setup(driver)?;
    let noisy = NOISY[NOISY.len() - 1];
    let s = scenario(&runtime, &module, noisy, "unset")?;
    let samples: Vec<String> = s.latencies_us.iter().map(|x| format!("{x:.2}")).collect();
    println!(
        "{CHILD_PREFIX} {} {} {} {}",
        s.noisy_launches,
        s.noisy_secs,
        noisy,
        samples.join(",")
    );
    Ok(())
}

/// Runs the child and reads its scenario back.
fn scenario_in_child() -> BenchResult<Scenario> {
    let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
    let out = std::process::Command::new(&exe)
        .arg(CHILD_FLAG)
        .env_remove(CONNECTIONS_ENV)
        .output()
        .map_err(|e| format!("running {}: {e}", exe.display()))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        return Err(format!(
            "the child ({}) failed: {}{}",
            out.status,
            stdout,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix(CHILD_PREFIX))
        .ok_or_else(|| format!("the child printed no result: {stdout}"))?;
    let fields: Vec<&str> = line.split_whitespace().collect();
    let bad = |what: &str| format!("the child's result line {line:?}: bad {what}");
    let [launches, secs, noisy, samples] = fields[..] else {
        return Err(bad("field count"));
    };
    Ok(Scenario {
        noisy: noisy.parse().map_err(|_| bad("noisy"))?,
        connections: "unset".into(),
        latencies_us: samples
            .split(',')
            .map(|x| x.parse().map_err(|_| bad("sample")))
            .collect::<BenchResult<_>>()?,
        noisy_launches: launches.parse().map_err(|_| bad("launches"))?,
        noisy_secs: secs.parse().map_err(|_| bad("seconds"))?,
    })
}

fn run(driver: CudaDriver, connections: &str, hostile_ms: u64) -> BenchResult<()> {
    let info = driver.device().clone();
    let command = command_line();
    let date = utc_timestamp();
    let driver_version = driver_version(&info);
    println!("tenants on {} (driver {driver_version}), {date}", info.name);
    println!("command: {command}");
    println!("{connections}");
    let (runtime, module) = setup(driver)?;

    let mut scenarios = Vec::new();
    for noisy in NOISY {
        println!("quiet tenant with {noisy} noisy tenant(s)...");
        scenarios.push(scenario(&runtime, &module, noisy, CONNECTIONS)?);
    }
    let mut aggregates = Vec::new();
    for tenants in [1, AGGREGATE_TENANTS] {
        println!("{tenants} tenant(s) of small launches...");
        aggregates.push(aggregate(&runtime, &module, tenants)?);
    }
    println!(
        "the quiet tenant alone, then under a hostile tenant's largest launches \
         ({hostile_ms} ms each)..."
    );
    let hostile = hostile_scenario(&runtime, &module, hostile_ms);
    if let Err(e) = &hostile {
        println!("(the hostile scenario failed: {e})");
    }
    drop(module);
    drop(runtime);
    println!("the 4-noisy scenario again in a child without {CONNECTIONS_ENV}...");
    let child_error = match scenario_in_child() {
        Ok(s) => {
            scenarios.push(s);
            None
        }
        Err(e) => {
            println!("(not measured: {e})");
            Some(e)
        }
    };

    println!();
    print!("{}", table(&scenarios, &aggregates));
    if let Ok(h) = &hostile {
        print!("{}", hostile_table(h));
    }
    let record = Record::new(
        &info,
        date,
        command,
        child_error.as_deref(),
        &scenarios,
        &aggregates,
        hostile.as_ref(),
    );
    let path = common::write_record("tenants.json", &record)?;
    println!("raw numbers: {}", path.display());
    // The other numbers are written; a failed hostile run still fails the
    // bench, since it means a launch the sandbox must take went wrong.
    hostile
        .map(drop)
        .map_err(|e| format!("the hostile scenario: {e}"))
}
