//! Load on `tensorwasm serve` (issue 17): 64 HTTP clients of 8 tenants call
//! their instances for a while; each call runs a Wasm kernel that fills the
//! GPU (1024 blocks of 256 threads, `ITERS` multiply-adds each). Reported:
//! calls per second, p50 / p99 / max latency of a call (HTTP round trip),
//! 429s, the launches and GPU time the server's metrics counted, and the
//! server's RSS and device memory sampled every 5 seconds. With a small
//! `TW_LOAD_ITERS` the kernels are short and the calls latency-bound.
//! Each configuration in `TW_LOAD_DEVICES` (`;`-separated
//! `CUDA_VISIBLE_DEVICES` values, default `0;0,1`) is a server of its own;
//! the record compares their throughput (the goal: 2 GPUs >= 1.8x 1 for
//! this independent work).
//!
//!   cargo bench -p tensorwasm-cli --bench serve_load
//!   env: TENSORWASM_BIN (the server binary), TW_LOAD_SECS (60),
//!        TW_LOAD_DEVICES, TW_LOAD_DRIVER (cuda), TW_LOAD_ITERS (4096),
//!        OUT (where the JSON goes)

#[path = "../../embed/benches/common/mod.rs"]
mod common;

use std::{
    io::{BufRead, BufReader},
    path::PathBuf,
    process::{Child, Command, Stdio},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use common::{command_line, max_of, percentile, round, utc_timestamp, write_record};
use serde::Serialize;
use serde_json::{Value, json};
use tensorwasm_serve::token_digest;
use ureq::Agent;

const TENANTS: usize = 8;
const CLIENTS: usize = 64;
/// Multiply-adds per kernel thread (`TW_LOAD_ITERS` overrides it: the CPU
/// driver needs far fewer).
const ITERS: i32 = 4096;

fn iters() -> i32 {
    std::env::var("TW_LOAD_ITERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(ITERS)
}

/// `work(iters)`: a Wasm kernel over 1024 x 256 threads, each `iters`
/// dependent multiply-adds on its own float, stored to memory; 0 or the
/// failing call's errno.
const GUEST: &str = r#"(module
  (import "wasi_cuda" "kernel_get" (func $kernel_get (param i32 i32) (result i32)))
  (import "wasi_cuda" "launch" (func $launch (param i64 i32 i32 i32 i32 i32 i32 i32 i32 i32 i32) (result i32)))
  (import "wasi_cuda" "wait" (func $wait (param i64) (result i32)))
  (import "tensorwasm_kernel" "thread_idx_x" (func $tid (result i32)))
  (import "tensorwasm_kernel" "block_idx_x" (func $bid (result i32)))
  (import "tensorwasm_kernel" "block_dim_x" (func $bdim (result i32)))
  (memory (export "memory") 32)
  ;; function 6
  (func $fma (param $p i32) (param $iters i32) (local $i i32) (local $x f32) (local $k i32)
    (local.set $i (i32.add (i32.mul (call $bid) (call $bdim)) (call $tid)))
    (local.set $x (f32.convert_i32_u (local.get $i)))
    (block $done (loop $l
      (br_if $done (i32.ge_u (local.get $k) (local.get $iters)))
      (local.set $x (f32.add (f32.mul (local.get $x) (f32.const 0.999)) (f32.const 0.5)))
      (local.set $k (i32.add (local.get $k) (i32.const 1)))
      (br $l)))
    (f32.store (i32.add (local.get $p) (i32.shl (local.get $i) (i32.const 2))) (local.get $x)))
  (func (export "work") (param $iters i32) (result i32) (local $r i32)
    (if (i64.eqz (i64.load (i32.const 0x20))) (then
      (local.set $r (call $kernel_get (i32.const 6) (i32.const 0x20)))
      (if (local.get $r) (then (return (local.get $r))))))
    ;; args: i32 0x10000 (the floats), i32 iters
    (i32.store (i32.const 0x100) (i32.const 0))
    (i64.store (i32.const 0x108) (i64.const 0x10000))
    (i32.store (i32.const 0x118) (i32.const 0))
    (i64.store (i32.const 0x120) (i64.extend_i32_u (local.get $iters)))
    (local.set $r (call $launch (i64.load (i32.const 0x20)) (i32.const 1024) (i32.const 1) (i32.const 1)
      (i32.const 256) (i32.const 1) (i32.const 1) (i32.const 0) (i32.const 0x100) (i32.const 2) (i32.const 0x28)))
    (if (local.get $r) (then (return (local.get $r))))
    (call $wait (i64.load (i32.const 0x28)))))"#;

struct Server {
    child: Child,
    url: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn binary() -> PathBuf {
    std::env::var_os("TENSORWASM_BIN").map_or_else(
        || {
            // The bench binary lives in target/release/deps; the server beside.
            let me = std::env::current_exe().expect("own path");
            me.parent()
                .and_then(|d| d.parent())
                .map_or_else(|| PathBuf::from("tensorwasm"), |d| d.join("tensorwasm"))
        },
        PathBuf::from,
    )
}

fn start(devices: &str, driver: &str, dir: &std::path::Path) -> Server {
    let mut config = String::from(
        "listen = \"127.0.0.1:0\"\ncalls_in_flight = 8\ninstances = 8\nrequest_timeout_ms = 60000\n",
    );
    for t in 0..TENANTS {
        config.push_str(&format!(
            "[[tenant]]\nname = \"t{t}\"\ntoken_sha256 = \"{}\"\n\
             [tenant.settings.quota]\nstreams = 8\n",
            token_digest(&format!("token-{t}"))
        ));
    }
    let path = dir.join(format!("serve-{}.toml", devices.replace(',', "-")));
    std::fs::write(&path, config).expect("config");
    let mut child = Command::new(binary())
        .args(["serve", "--driver", driver, "--config"])
        .arg(&path)
        .env("CUDA_VISIBLE_DEVICES", devices)
        .stdout(Stdio::piped())
        .spawn()
        .expect("start tensorwasm serve (TENSORWASM_BIN)");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("first line");
    let url = line
        .trim()
        .strip_prefix("tensorwasm serve: listening on ")
        .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
        .to_string();
    Server { child, url }
}

fn agent() -> Agent {
    Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into()
}

fn post(agent: &Agent, url: &str, token: &str, body: Value) -> (u16, Value) {
    let response = agent
        .post(url)
        .header("Authorization", &format!("Bearer {token}"))
        .send_json(body)
        .expect("request");
    let status = response.status().as_u16();
    let value = response.into_body().read_json().unwrap_or(Value::Null);
    (status, value)
}

/// The server process's resident memory.
fn rss_bytes(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().strip_suffix("kB"))
                .and_then(|v| v.trim().parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

/// The values of every series of metric `name` (`name{...} value`).
fn series(agent: &Agent, url: &str, name: &str) -> Vec<f64> {
    let text = agent
        .get(&format!("{url}/metrics"))
        .call()
        .ok()
        .and_then(|r| r.into_body().read_to_string().ok())
        .unwrap_or_default();
    let prefix = format!("{name}{{");
    text.lines()
        .filter(|l| l.starts_with(&prefix))
        .filter_map(|l| l.rsplit(' ').next()?.parse().ok())
        .collect()
}

/// The devices' free memory, from the server's metrics.
fn device_free(agent: &Agent, url: &str) -> Vec<u64> {
    series(agent, url, "tensorwasm_device_free_bytes")
        .into_iter()
        .map(|b| b as u64)
        .collect()
}

/// Launches and GPU seconds of all tenants, from the server's metrics.
fn launches_and_gpu_seconds(agent: &Agent, url: &str) -> (f64, f64) {
    (
        series(agent, url, "tensorwasm_launches_total").iter().sum(),
        series(agent, url, "tensorwasm_gpu_seconds_total")
            .iter()
            .sum(),
    )
}

#[derive(Serialize)]
struct Sample {
    at_s: f64,
    rss_mib: f64,
    device_free_mib: Vec<f64>,
}

#[derive(Serialize)]
struct Run {
    cuda_visible_devices: String,
    devices: usize,
    seconds: f64,
    calls: usize,
    calls_per_s: f64,
    p50_ms: f64,
    p99_ms: f64,
    max_ms: f64,
    refused_429: usize,
    failed: usize,
    /// Kernel launches in the window, as the server's metrics count them.
    launches: f64,
    /// GPU time of those launches, summed over tenants (kernels of
    /// different tenants that run side by side each count in full).
    gpu_seconds: f64,
    samples: Vec<Sample>,
}

fn measure(devices: &str, driver: &str, seconds: u64, dir: &std::path::Path) -> Run {
    let server = start(devices, driver, dir);
    let setup = agent();
    let (status, who) = {
        let r = setup
            .get(&format!("{}/v1/whoami", server.url))
            .header("Authorization", "Bearer token-0")
            .call()
            .expect("whoami");
        (
            r.status().as_u16(),
            r.into_body().read_json::<Value>().unwrap_or(Value::Null),
        )
    };
    assert_eq!(status, 200, "{who}");
    // Each tenant: the module once, 8 instances (one per client).
    let mut instances = vec![Vec::new(); TENANTS];
    let mut placed = std::collections::BTreeSet::new();
    for (t, list) in instances.iter_mut().enumerate() {
        let token = format!("token-{t}");
        let r = setup
            .post(&format!("{}/v1/modules", server.url))
            .header("Authorization", &format!("Bearer {token}"))
            .send(GUEST.as_bytes())
            .expect("upload");
        assert_eq!(r.status().as_u16(), 201);
        let module: Value = r.into_body().read_json().expect("module");
        for _ in 0..CLIENTS / TENANTS {
            let (s, i) = post(
                &setup,
                &format!("{}/v1/instances", server.url),
                &token,
                json!({ "module": module["id"] }),
            );
            assert_eq!(s, 201, "{i}");
            list.push(i["id"].as_u64().unwrap());
        }
        let r = setup
            .get(&format!("{}/v1/whoami", server.url))
            .header("Authorization", &format!("Bearer {token}"))
            .call()
            .expect("whoami");
        let v: Value = r.into_body().read_json().expect("whoami");
        placed.insert(v["device"].as_u64().unwrap_or(0));
    }
    // Warm-up: each instance makes its kernel once.
    for (t, list) in instances.iter().enumerate() {
        for id in list {
            let (s, v) = post(
                &setup,
                &format!("{}/v1/instances/{id}/invoke", server.url),
                &format!("token-{t}"),
                json!({ "export": "work", "args": [iters()] }),
            );
            assert_eq!((s, &v["results"][0]), (200, &json!(0)), "warm-up: {v}");
        }
    }
    let latencies = Arc::new(Mutex::new(Vec::<f64>::new()));
    let counts = Arc::new(Mutex::new((0usize, 0usize)));
    let before = launches_and_gpu_seconds(&setup, &server.url);
    let started = Instant::now();
    let stop = started + Duration::from_secs(seconds);
    let mut samples = Vec::new();
    std::thread::scope(|scope| {
        for c in 0..CLIENTS {
            let (t, id) = (c % TENANTS, instances[c % TENANTS][c / TENANTS]);
            let url = format!("{}/v1/instances/{id}/invoke", server.url);
            let (latencies, counts) = (Arc::clone(&latencies), Arc::clone(&counts));
            scope.spawn(move || {
                let agent = agent();
                let token = format!("token-{t}");
                let mut mine = Vec::new();
                while Instant::now() < stop {
                    let t0 = Instant::now();
                    let (s, v) = post(
                        &agent,
                        &url,
                        &token,
                        json!({ "export": "work", "args": [iters()] }),
                    );
                    let ms = t0.elapsed().as_secs_f64() * 1e3;
                    match s {
                        200 if v["results"][0] == json!(0) => mine.push(ms),
                        429 => counts.lock().unwrap().0 += 1,
                        _ => counts.lock().unwrap().1 += 1,
                    }
                }
                latencies.lock().unwrap().extend(mine);
            });
        }
        let pid = server.child.id();
        let sampler = agent();
        while Instant::now() < stop {
            samples.push(Sample {
                at_s: round(started.elapsed().as_secs_f64(), 1),
                rss_mib: round(rss_bytes(pid) as f64 / 1048576.0, 1),
                device_free_mib: device_free(&sampler, &server.url)
                    .into_iter()
                    .map(|b| round(b as f64 / 1048576.0, 1))
                    .collect(),
            });
            std::thread::sleep(
                Duration::from_secs(5).min(stop.saturating_duration_since(Instant::now())),
            );
        }
    });
    let elapsed = started.elapsed().as_secs_f64();
    let after = launches_and_gpu_seconds(&setup, &server.url);
    let lat = latencies.lock().unwrap().clone();
    let (refused, failed) = *counts.lock().unwrap();
    Run {
        cuda_visible_devices: devices.to_string(),
        devices: placed.len(),
        seconds: round(elapsed, 2),
        calls: lat.len(),
        calls_per_s: round(lat.len() as f64 / elapsed, 1),
        p50_ms: round(percentile(&lat, 50.0), 3),
        p99_ms: round(percentile(&lat, 99.0), 3),
        max_ms: round(max_of(&lat), 3),
        refused_429: refused,
        failed,
        launches: after.0 - before.0,
        gpu_seconds: round(after.1 - before.1, 3),
        samples,
    }
}

#[derive(Serialize)]
struct Record {
    bench: &'static str,
    command: String,
    when: String,
    tenants: usize,
    clients: usize,
    kernel: String,
    runs: Vec<Run>,
    /// Throughput of the last run over the first's.
    scaling: Option<f64>,
}

fn main() {
    let seconds = std::env::var("TW_LOAD_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(60);
    let driver = std::env::var("TW_LOAD_DRIVER").unwrap_or_else(|_| "cuda".into());
    let configs = std::env::var("TW_LOAD_DEVICES").unwrap_or_else(|_| "0;0,1".into());
    let dir = std::env::temp_dir().join(format!("tw-serve-load-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch dir");
    let mut runs = Vec::new();
    for devices in configs.split(';').filter(|d| !d.is_empty()) {
        let run = measure(devices, &driver, seconds, &dir);
        println!(
            "CUDA_VISIBLE_DEVICES={:<5} tenants on {} device(s): {} calls in {:.1} s = {:.1}/s, p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms, 429s {}, failed {}; {} launches, {:.2} GPU s; RSS {:?} MiB",
            run.cuda_visible_devices,
            run.devices,
            run.calls,
            run.seconds,
            run.calls_per_s,
            run.p50_ms,
            run.p99_ms,
            run.max_ms,
            run.refused_429,
            run.failed,
            run.launches,
            run.gpu_seconds,
            run.samples.iter().map(|s| s.rss_mib).collect::<Vec<_>>()
        );
        runs.push(run);
    }
    let scaling = match (runs.first(), runs.last()) {
        (Some(a), Some(b)) if runs.len() > 1 && a.calls_per_s > 0.0 => {
            Some(round(b.calls_per_s / a.calls_per_s, 3))
        }
        _ => None,
    };
    if let Some(x) = scaling {
        println!("throughput, last over first: {x:.3}x (goal for 2 GPUs over 1: >= 1.8x)");
    }
    let record = Record {
        bench: "serve_load",
        command: command_line(),
        when: utc_timestamp(),
        tenants: TENANTS,
        clients: CLIENTS,
        kernel: format!(
            "Wasm kernel, 1024 x 256 threads, {} dependent f32 multiply-adds each",
            iters()
        ),
        runs,
        scaling,
    };
    match write_record("serve_load.json", &record) {
        Ok(path) => println!("wrote {}", path.display()),
        Err(e) => eprintln!("{e}"),
    }
    let _ = std::fs::remove_dir_all(&dir);
}
