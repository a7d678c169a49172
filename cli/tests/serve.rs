//! `tensorwasm serve` for real: the binary started on a free port with a
//! config file, driven by an HTTP client (ureq). Every endpoint, missing and
//! wrong tokens, one tenant reaching for another's module and instance,
//! oversized and malformed uploads and bodies, the limits (429, concurrent
//! requests included), the request timeout (504), and a shutdown with a
//! call in flight. The CPU
//! driver in CI; on a GPU `TW_SERVE_DRIVER=cuda` (and `TENSORWASM_BIN` for
//! the carried binary) runs the same suite there.

use std::{
    io::{BufRead, BufReader},
    path::PathBuf,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use serde_json::{Value, json};
use tensorwasm_serve::token_digest;
use ureq::Agent;

#[path = "support/bin.rs"]
mod bin;
#[allow(dead_code)] // its guest and nothing of its supervisor
#[path = "support/supervised_guest.rs"]
mod supervised_guest;

/// A guest: `add(a, b)`, `scale(x) -> x * 2.5` (f64), `double_on_device(n)`
/// (a Wasm kernel doubling n floats written by the guest, returning their
/// sum), `sleep_ms(ms)` (spins on the WASI clock), `trap`, `hog` (a buffer
/// past tenant a's quota), `boom` (a Wasm kernel that traps).
const GUEST: &str = r#"(module
  (import "wasi_cuda" "kernel_get" (func $kernel_get (param i32 i32) (result i32)))
  (import "wasi_cuda" "launch" (func $launch (param i64 i32 i32 i32 i32 i32 i32 i32 i32 i32 i32) (result i32)))
  (import "wasi_cuda" "wait" (func $wait (param i64) (result i32)))
  (import "wasi_snapshot_preview1" "clock_time_get" (func $clock (param i32 i64 i32) (result i32)))
  (import "wasi_cuda" "buffer_alloc" (func $alloc (param i64 i32) (result i32)))
  (import "tensorwasm_kernel" "thread_idx_x" (func $tid (result i32)))
  (import "tensorwasm_kernel" "block_idx_x" (func $bid (result i32)))
  (import "tensorwasm_kernel" "block_dim_x" (func $bdim (result i32)))
  (memory (export "memory") 2)
  ;; function 8: doubles n floats at p
  (func $double (param $p i32) (param $n i32) (local $i i32) (local $a i32)
    (local.set $i (i32.add (i32.mul (call $bid) (call $bdim)) (call $tid)))
    (if (i32.lt_u (local.get $i) (local.get $n)) (then
      (local.set $a (i32.add (local.get $p) (i32.shl (local.get $i) (i32.const 2))))
      (f32.store (local.get $a) (f32.mul (f32.load (local.get $a)) (f32.const 2))))))
  ;; function 9: a kernel whose thread 0 traps
  (func $boom (param i32) (param i32)
    (if (i32.eqz (call $tid)) (then unreachable)))
  ;; launches $boom on 64 threads and waits: ETRAP (15)
  (func (export "boom") (result i32)
    (if (call $kernel_get (i32.const 9) (i32.const 0x38)) (then (return (i32.const -1))))
    (i32.store (i32.const 0x100) (i32.const 0))
    (i64.store (i32.const 0x108) (i64.const 0))
    (i32.store (i32.const 0x118) (i32.const 0))
    (i64.store (i32.const 0x120) (i64.const 0))
    (if (call $launch (i64.load (i32.const 0x38)) (i32.const 1) (i32.const 1) (i32.const 1)
          (i32.const 64) (i32.const 1) (i32.const 1) (i32.const 0) (i32.const 0x100) (i32.const 2) (i32.const 0x28))
      (then (return (i32.const -2))))
    (call $wait (i64.load (i32.const 0x28))))
  (func (export "add") (param i32 i32) (result i32) (i32.add (local.get 0) (local.get 1)))
  (func (export "scale") (param f64) (result f64) (f64.mul (local.get 0) (f64.const 2.5)))
  (func (export "trap") unreachable)
  ;; 2 MiB of buffer: past tenant a's 1 MiB quota (EQUOTA, 16)
  (func (export "hog") (result i32) (call $alloc (i64.const 2097152) (i32.const 0x30)))
  (func $now (result i64)
    (drop (call $clock (i32.const 1) (i64.const 1) (i32.const 0x10)))
    (i64.load (i32.const 0x10)))
  (func (export "sleep_ms") (param $ms i64) (local $end i64)
    (local.set $end (i64.add (call $now) (i64.mul (local.get $ms) (i64.const 1000000))))
    (loop $l (br_if $l (i64.lt_u (call $now) (local.get $end)))))
  (func (export "double_on_device") (param $n i32) (result f64) (local $i i32) (local $s f64)
    (loop $fill
      (f32.store (i32.add (i32.const 0x1000) (i32.shl (local.get $i) (i32.const 2)))
        (f32.convert_i32_u (local.get $i)))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br_if $fill (i32.lt_u (local.get $i) (local.get $n))))
    (if (call $kernel_get (i32.const 8) (i32.const 0x20)) (then (return (f64.const -1))))
    ;; args at 0x100: i32 0x1000, i32 n (24-byte descriptors, tag 0 = i32)
    (i32.store (i32.const 0x100) (i32.const 0))
    (i64.store (i32.const 0x108) (i64.const 0x1000))
    (i32.store (i32.const 0x118) (i32.const 0))
    (i64.store (i32.const 0x120) (i64.extend_i32_u (local.get $n)))
    (if (call $launch (i64.load (i32.const 0x20)) (i32.div_u (i32.add (local.get $n) (i32.const 63)) (i32.const 64))
          (i32.const 1) (i32.const 1) (i32.const 64) (i32.const 1) (i32.const 1) (i32.const 0)
          (i32.const 0x100) (i32.const 2) (i32.const 0x28))
      (then (return (f64.const -2))))
    (if (call $wait (i64.load (i32.const 0x28))) (then (return (f64.const -3))))
    (local.set $i (i32.const 0))
    (loop $sum
      (local.set $s (f64.add (local.get $s) (f64.promote_f32
        (f32.load (i32.add (i32.const 0x1000) (i32.shl (local.get $i) (i32.const 2)))))))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br_if $sum (i32.lt_u (local.get $i) (local.get $n))))
    (local.get $s)))"#;

/// A WASI command: echoes its argv and stdin, exits with argv's count.
const COMMAND: &str = r#"(module
  (import "wasi_snapshot_preview1" "fd_read" (func $read (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_write" (func $write (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "args_sizes_get" (func $sizes (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "proc_exit" (func $exit (param i32)))
  (memory (export "memory") 1)
  (func (export "_start") (local $n i32)
    ;; stdin into 0x1000 (up to 4096 bytes), then write it to stdout
    (i32.store (i32.const 0x10) (i32.const 0x1000))
    (i32.store (i32.const 0x14) (i32.const 4096))
    (drop (call $read (i32.const 0) (i32.const 0x10) (i32.const 1) (i32.const 0x20)))
    (i32.store (i32.const 0x14) (i32.load (i32.const 0x20)))
    (drop (call $write (i32.const 1) (i32.const 0x10) (i32.const 1) (i32.const 0x24)))
    (drop (call $sizes (i32.const 0x30) (i32.const 0x34)))
    (call $exit (i32.load (i32.const 0x30)))))"#;

struct Served {
    child: Child,
    url: String,
    agent: Agent,
    dir: PathBuf,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Starts the server with `extra` config lines and tenants `a` (untrusted,
/// token "token-a") and `b` (trusted, "token-b").
fn start(what: &str, extra: &str) -> Served {
    start_on(what, extra, None, &[])
}

/// [`start`] on `driver` (else `TW_SERVE_DRIVER`, else the CPU driver),
/// with `flags` added to the command line.
fn start_on(what: &str, extra: &str, driver: Option<&str>, flags: &[&str]) -> Served {
    let dir = std::env::temp_dir().join(format!("tw-serve-{what}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = format!(
        "listen = \"127.0.0.1:0\"\n{extra}\n\
         [[tenant]]\nname = \"a\"\ntoken_sha256 = \"{}\"\n\
         [tenant.settings.quota]\ndevice_bytes = 1048576\n\
         [[tenant]]\nname = \"b\"\ntoken_sha256 = \"{}\"\n\
         [tenant.settings]\ntrusted = true\n",
        token_digest("token-a"),
        token_digest("token-b")
    );
    let path = dir.join("serve.toml");
    std::fs::write(&path, config).unwrap();
    let driver = driver.map_or_else(
        || std::env::var("TW_SERVE_DRIVER").unwrap_or_else(|_| "cpu".into()),
        str::to_string,
    );
    let mut child = Command::new(bin::tensorwasm_bin())
        .args(["serve", "--driver", &driver, "--config"])
        .arg(&path)
        .args(flags)
        .stdout(Stdio::piped())
        .spawn()
        .expect("start tensorwasm serve");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let url = line
        .trim()
        .strip_prefix("tensorwasm serve: listening on ")
        .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
        .to_string();
    // A connection per request: after a refused upload (413) the server
    // closes the connection mid-body, which a pooled one would trip on.
    let agent: Agent = Agent::config_builder()
        .http_status_as_error(false)
        .max_idle_connections(0)
        .build()
        .into();
    Served {
        child,
        url,
        agent,
        dir,
    }
}

impl Served {
    fn call(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Option<Body>,
    ) -> (u16, Value) {
        let url = format!("{}{path}", self.url);
        let auth = token.map(|t| format!("Bearer {t}"));
        let response = match method {
            "GET" | "DELETE" => {
                let mut r = if method == "GET" {
                    self.agent.get(&url)
                } else {
                    self.agent.delete(&url)
                };
                if let Some(a) = &auth {
                    r = r.header("Authorization", a);
                }
                r.call()
            }
            _ => {
                let mut r = self.agent.post(&url);
                if let Some(a) = &auth {
                    r = r.header("Authorization", a);
                }
                match body {
                    Some(Body::Json(v)) => r.send_json(v),
                    Some(Body::Bytes(b)) => r.send(&b[..]),
                    None => r.send_empty(),
                }
            }
        }
        .unwrap_or_else(|e| panic!("{method} {path}: {e}"));
        let status = response.status().as_u16();
        let text = response.into_body().read_to_string().unwrap_or_default();
        let value = serde_json::from_str(&text).unwrap_or(Value::String(text));
        (status, value)
    }

    fn get(&self, path: &str, token: &str) -> (u16, Value) {
        self.call("GET", path, Some(token), None)
    }

    fn post(&self, path: &str, token: &str, body: Value) -> (u16, Value) {
        self.call("POST", path, Some(token), Some(Body::Json(body)))
    }

    fn upload(&self, token: &str, module: &[u8]) -> (u16, Value) {
        self.call(
            "POST",
            "/v1/modules",
            Some(token),
            Some(Body::Bytes(module.to_vec())),
        )
    }

    /// Calls `export` of instance `id` with JSON `args`.
    fn invoke(&self, token: &str, id: &Value, export: &str, args: Value) -> (u16, Value) {
        self.post(
            &format!("/v1/instances/{id}/invoke"),
            token,
            json!({ "export": export, "args": args }),
        )
    }

    /// Uploads the binary `wasm` (a module or a component) and makes an
    /// instance of it: the instance's id.
    fn instance_of(&self, token: &str, wasm: &[u8]) -> Value {
        let (status, m) = self.upload(token, wasm);
        assert_eq!(status, 201, "{m}");
        let (status, i) = self.post("/v1/instances", token, json!({ "module": m["id"] }));
        assert_eq!(status, 201, "{i}");
        i["id"].clone()
    }

    fn instance(&self, token: &str, module: &str) -> u64 {
        let (s, m) = self.upload(token, module.as_bytes());
        assert_eq!(s, 201, "{m}");
        let (s, i) = self.post("/v1/instances", token, json!({ "module": m["id"] }));
        assert_eq!(s, 201, "{i}");
        i["id"].as_u64().unwrap()
    }
}

enum Body {
    Json(Value),
    Bytes(Vec<u8>),
}

#[test]
fn every_endpoint_for_real() {
    let s = start("endpoints", "");
    assert_eq!(s.call("GET", "/healthz", None, None).0, 200);
    let (status, who) = s.get("/v1/whoami", "token-a");
    assert_eq!(status, 200);
    assert_eq!(who["tenant"], "a");
    let (status, m) = s.upload("token-a", GUEST.as_bytes());
    assert_eq!(status, 201, "{m}");
    let module = m["id"].as_u64().unwrap();
    assert!(
        m["exports"]
            .as_array()
            .unwrap()
            .contains(&json!("double_on_device"))
    );
    assert_eq!(
        s.get("/v1/modules", "token-a").1.as_array().unwrap().len(),
        1
    );
    let (status, i) = s.post("/v1/instances", "token-a", json!({ "module": module }));
    assert_eq!(status, 201, "{i}");
    let id = i["id"].as_u64().unwrap();
    assert_eq!(s.get("/v1/instances", "token-a").1[0]["module"], module);
    let invoke = |export: &str, args: Value| s.invoke("token-a", &json!(id), export, args);
    assert_eq!(
        invoke("add", json!([2, 40])),
        (200, json!({ "results": [42] }))
    );
    assert_eq!(
        invoke("scale", json!([1.5])),
        (200, json!({ "results": [3.75] }))
    );
    // sum of 2i for i < 1000
    assert_eq!(
        invoke("double_on_device", json!([1000])),
        (200, json!({ "results": [999000.0] }))
    );
    let (status, e) = invoke("trap", json!([]));
    assert_eq!(status, 422, "{e}");
    assert!(e["error"].as_str().unwrap().contains("unreachable"), "{e}");
    // The instance survives a trap.
    assert_eq!(invoke("add", json!([1, 1])).1, json!({ "results": [2] }));
    assert_eq!(invoke("hog", json!([])).1, json!({ "results": [16] }));
    assert_eq!(invoke("boom", json!([])).1, json!({ "results": [15] }));
    // A WASI command: argv and stdin in, exit code and output out.
    let (status, c) = s.upload("token-a", COMMAND.as_bytes());
    assert_eq!(status, 201, "{c}");
    let (status, out) = s.post(
        &format!("/v1/modules/{}/run", c["id"]),
        "token-a",
        json!({ "argv": ["echo", "x", "y"], "stdin": "hello from stdin" }),
    );
    assert_eq!(status, 200, "{out}");
    assert_eq!(out["exit_code"], 3);
    assert_eq!(out["stdout"], "hello from stdin");
    // Metrics count the tenant's calls and traps.
    let (status, metrics) = s.call("GET", "/metrics", None, None);
    assert_eq!(status, 200);
    let text = metrics.as_str().unwrap();
    assert!(
        text.contains("tensorwasm_calls_total{tenant=\"a\"} 8"),
        "{text}"
    );
    assert!(
        text.contains("tensorwasm_traps_total{tenant=\"a\"} 1"),
        "{text}"
    );
    // double_on_device and boom: two launches, two waits.
    for line in [
        "tensorwasm_launches_total{tenant=\"a\"} 2",
        "tensorwasm_waits_total{tenant=\"a\"} 2",
        "tensorwasm_launches_total{tenant=\"b\"} 0",
        "tensorwasm_wait_seconds_total{tenant=\"a\"} ",
        "tensorwasm_quota_refusals_total{tenant=\"a\"} 1",
        "tensorwasm_kernel_traps_total{tenant=\"a\"} 1",
    ] {
        assert!(text.contains(line), "{line} missing from {text}");
    }
    // GPU time: a's two launches took some, b launched nothing.
    let gpu_seconds = |tenant: &str| -> f64 {
        let key = format!("tensorwasm_gpu_seconds_total{{tenant=\"{tenant}\"}} ");
        let line = text.lines().find(|l| l.starts_with(&key));
        line.and_then(|l| l[key.len()..].parse().ok())
            .unwrap_or_else(|| panic!("{key} missing from {text}"))
    };
    assert!(gpu_seconds("a") > 0.0, "{text}");
    assert!(gpu_seconds("a") < 60.0, "{text}");
    assert_eq!(gpu_seconds("b"), 0.0, "{text}");
    // Deletes: everything goes, and the quota with it.
    assert_eq!(
        s.call(
            "DELETE",
            &format!("/v1/instances/{id}"),
            Some("token-a"),
            None
        )
        .0,
        204
    );
    assert_eq!(
        s.call(
            "DELETE",
            &format!("/v1/modules/{module}"),
            Some("token-a"),
            None
        )
        .0,
        204
    );
    assert_eq!(s.get("/v1/instances", "token-a").1, json!([]));
    assert_eq!(s.get("/v1/whoami", "token-a").1["quota_in_use"], json!([]));
}

#[test]
fn tokens_are_checked_and_tenants_see_only_their_own() {
    let s = start("auth", "");
    let id = s.instance("token-a", GUEST);
    for token in [None, Some("token-c"), Some("")] {
        let (status, e) = s.call("GET", "/v1/modules", token, None);
        assert_eq!(status, 401, "{token:?}: {e}");
    }
    let (status, _) = s.call(
        "POST",
        "/v1/modules",
        Some("token-c"),
        Some(Body::Bytes(GUEST.into())),
    );
    assert_eq!(status, 401);
    // b sees none of a's, and cannot call, run or delete them.
    assert_eq!(s.get("/v1/modules", "token-b").1, json!([]));
    assert_eq!(s.get("/v1/instances", "token-b").1, json!([]));
    let (status, _) = s.post(
        &format!("/v1/instances/{id}/invoke"),
        "token-b",
        json!({ "export": "add", "args": [1, 2] }),
    );
    assert_eq!(status, 404);
    assert_eq!(
        s.call(
            "DELETE",
            &format!("/v1/instances/{id}"),
            Some("token-b"),
            None
        )
        .0,
        404
    );
    assert_eq!(
        s.call("DELETE", "/v1/modules/1", Some("token-b"), None).0,
        404
    );
    // a's instance is untouched.
    let (status, r) = s.post(
        &format!("/v1/instances/{id}/invoke"),
        "token-a",
        json!({ "export": "add", "args": [1, 2] }),
    );
    assert_eq!((status, r), (200, json!({ "results": [3] })));
}

#[test]
fn bad_uploads_and_bodies_are_refused() {
    let s = start("bad", "module_bytes = 65536\n");
    let (status, e) = s.upload("token-a", &vec![0u8; 65537]);
    assert_eq!(status, 413, "{e}");
    let (status, e) = s.upload("token-a", b"\0asm\x01\0\0\0\xff garbage");
    assert_eq!(status, 400, "{e}");
    let (status, e) = s.upload(
        "token-a",
        b"(module (func (export \"f\") (result i32) i64.const 1))",
    );
    assert_eq!(status, 400, "{e}");
    assert_eq!(s.get("/v1/modules", "token-a").1, json!([]));
    let id = s.instance("token-a", GUEST);
    let path = format!("/v1/instances/{id}/invoke");
    for (body, want) in [
        (json!({ "export": "nothing" }), 404),
        (json!({ "export": "add", "args": [1] }), 400),
        (json!({ "export": "add", "args": ["one", 2] }), 400),
        (json!({ "export": "add", "args": [1, 2], "extra": 1 }), 422),
        (json!({ "module": 1 }), 422),
    ] {
        let (status, e) = s.post(&path, "token-a", body.clone());
        assert_eq!(status, want, "{body}: {e}");
    }
    let (status, _) = s.call(
        "POST",
        &path,
        Some("token-a"),
        Some(Body::Bytes(b"{not json".to_vec())),
    );
    assert!(status == 400 || status == 415, "{status}");
    let (status, _) = s.post("/v1/instances", "token-a", json!({ "module": 99 }));
    assert_eq!(status, 404);
}

#[test]
fn concurrent_requests_stay_within_the_limits() {
    let s = start("concurrent", "modules = 3\ninstances = 3\n");
    // Twelve uploads and then twelve instantiates at once: each limit
    // holds exactly, the rest are 429.
    let statuses = |make: &(dyn Fn() -> (u16, Value) + Sync)| -> Vec<u16> {
        std::thread::scope(|scope| {
            let calls: Vec<_> = (0..12).map(|_| scope.spawn(make)).collect();
            calls.into_iter().map(|c| c.join().unwrap().0).collect()
        })
    };
    let uploads = statuses(&|| s.upload("token-a", GUEST.as_bytes()));
    assert_eq!(
        uploads.iter().filter(|&&c| c == 201).count(),
        3,
        "{uploads:?}"
    );
    assert_eq!(
        uploads.iter().filter(|&&c| c == 429).count(),
        9,
        "{uploads:?}"
    );
    let module = s.call("GET", "/v1/modules", Some("token-a"), None).1[0]["id"].clone();
    let made = statuses(&|| s.post("/v1/instances", "token-a", json!({ "module": module })));
    assert_eq!(made.iter().filter(|&&c| c == 201).count(), 3, "{made:?}");
    assert_eq!(made.iter().filter(|&&c| c == 429).count(), 9, "{made:?}");
    let listed = s.call("GET", "/v1/instances", Some("token-a"), None).1;
    assert_eq!(listed.as_array().unwrap().len(), 3, "{listed}");
}

#[test]
fn limits_answer_429_and_timeouts_504() {
    let s = start(
        "limits",
        "calls_in_flight = 1\ninstances = 2\nrequest_timeout_ms = 1500\n",
    );
    let first = s.instance("token-a", GUEST);
    let _second = s.instance("token-a", GUEST);
    let (status, e) = s.post("/v1/instances", "token-a", json!({ "module": 1 }));
    assert_eq!(status, 429, "{e}");
    // One call in flight: the next is refused, not queued.
    std::thread::scope(|scope| {
        let slow = scope.spawn(|| {
            s.post(
                &format!("/v1/instances/{first}/invoke"),
                "token-a",
                json!({ "export": "sleep_ms", "args": [700] }),
            )
        });
        std::thread::sleep(Duration::from_millis(250));
        let (status, e) = s.post(
            &format!("/v1/instances/{first}/invoke"),
            "token-a",
            json!({ "export": "add", "args": [1, 2] }),
        );
        assert_eq!(status, 429, "{e}");
        // Another tenant is not held up.
        let other = s.instance("token-b", GUEST);
        let (status, _) = s.post(
            &format!("/v1/instances/{other}/invoke"),
            "token-b",
            json!({ "export": "add", "args": [1, 2] }),
        );
        assert_eq!(status, 200);
        assert_eq!(slow.join().unwrap().0, 200);
    });
    let (_, metrics) = s.call("GET", "/metrics", None, None);
    assert!(
        metrics
            .as_str()
            .unwrap()
            .contains("tensorwasm_refused_total{tenant=\"a\"} 1"),
        "{metrics}"
    );
    // Past the request timeout: 504, and the instance is ended.
    let started = Instant::now();
    let (status, e) = s.post(
        &format!("/v1/instances/{first}/invoke"),
        "token-a",
        json!({ "export": "sleep_ms", "args": [60000] }),
    );
    assert_eq!(status, 504, "{e}");
    assert!(started.elapsed() < Duration::from_secs(10));
    let (status, _) = s.post(
        &format!("/v1/instances/{first}/invoke"),
        "token-a",
        json!({ "export": "add", "args": [1, 2] }),
    );
    assert_eq!(status, 404);
}

#[test]
fn shutdown_lets_the_call_in_flight_finish() {
    let mut s = start("shutdown", "");
    let id = s.instance("token-a", GUEST);
    let pid = s.child.id();
    std::thread::scope(|scope| {
        let slow = scope.spawn(|| {
            s.post(
                &format!("/v1/instances/{id}/invoke"),
                "token-a",
                json!({ "export": "sleep_ms", "args": [800] }),
            )
        });
        std::thread::sleep(Duration::from_millis(300));
        // SAFETY: kill(2) on the server's pid, which this test owns.
        let r = unsafe { libc::kill(pid as libc::pid_t, libc::SIGTERM) };
        assert_eq!(r, 0);
        let (status, _) = slow.join().unwrap();
        assert_eq!(status, 200, "the call in flight finished");
    });
    let status = s.child.wait().unwrap();
    assert!(status.success(), "{status}");
    // Nothing listens any more.
    assert!(s.agent.get(&format!("{}/healthz", s.url)).call().is_err());
}

#[test]
fn a_lost_device_fails_health_and_the_calls_on_it() {
    // On the CPU driver a failing kernel loses the device only when asked
    // to, as a faulting kernel loses a CUDA context.
    let cpu = std::env::var("TW_SERVE_DRIVER").map_or(true, |d| d == "cpu");
    let flags: &[&str] = if cpu {
        &["--cpu-faults-lose-device"]
    } else {
        &[]
    };
    let mut s = start_on("lost", "", None, flags);
    let quiet = s.instance("token-a", GUEST);
    let add = |id: u64, token: &str| {
        s.post(
            &format!("/v1/instances/{id}/invoke"),
            token,
            json!({ "export": "add", "args": [1, 2] }),
        )
    };
    assert_eq!(add(quiet, "token-a").0, 200);
    assert_eq!(s.call("GET", "/healthz", None, None).0, 200);
    // Tenant b (trusted) launches raw PTX on wild pointers: the device is
    // lost, and its wait says so (EDEVLOST, 18).
    let faulty = s.instance("token-b", &supervised_guest::guest());
    let invoke = |export: &str| {
        s.post(
            &format!("/v1/instances/{faulty}/invoke"),
            "token-b",
            json!({ "export": export, "args": [] }),
        )
    };
    assert_eq!(invoke("load_vadd"), (200, json!({ "results": [0] })));
    assert_eq!(invoke("fault"), (200, json!({ "results": [18] })));
    // Health fails (a liveness probe restarts the server), every call on
    // the device is 503, and the metrics say which device.
    let (status, health) = s.call("GET", "/healthz", None, None);
    assert_eq!(status, 503, "{health}");
    assert!(health.to_string().contains("device 0 lost"), "{health}");
    let (status, e) = add(quiet, "token-a");
    assert_eq!(status, 503, "{e}");
    assert!(
        e["error"].as_str().unwrap().contains("must be restarted"),
        "{e}"
    );
    assert_eq!(
        s.post("/v1/instances", "token-a", json!({ "module": 1 })).0,
        503
    );
    let (_, metrics) = s.call("GET", "/metrics", None, None);
    let text = metrics.as_str().unwrap();
    for line in [
        "tensorwasm_device_lost{device=\"0\"} 1",
        "tensorwasm_device_lost_calls_total{tenant=\"b\"} 1",
        "tensorwasm_device_lost_calls_total{tenant=\"a\"} 0",
    ] {
        assert!(text.contains(line), "{line} missing from {text}");
    }
    // Deleting an instance and shutting down leave the lost device's
    // memory alone: the server ends cleanly.
    let (status, _) = s.call(
        "DELETE",
        &format!("/v1/instances/{quiet}"),
        Some("token-a"),
        None,
    );
    assert_eq!(status, 204);
    // SAFETY: kill(2) on the server's pid, which this test owns.
    let r = unsafe { libc::kill(s.child.id() as libc::pid_t, libc::SIGTERM) };
    assert_eq!(r, 0);
    let status = s.child.wait().unwrap();
    assert!(status.success(), "{status}");
}

#[test]
#[ignore = "needs two CUDA GPUs"]
fn tenants_spread_over_two_gpus() {
    let s = start_on("two-gpus", "", Some("cuda"), &[]);
    let (_, a) = s.get("/v1/whoami", "token-a");
    let (_, b) = s.get("/v1/whoami", "token-b");
    assert_ne!(a["device"], b["device"], "{a} {b}");
    // Each runs a Wasm kernel on its own device, at the same time.
    let ia = s.instance("token-a", GUEST);
    let ib = s.instance("token-b", GUEST);
    std::thread::scope(|scope| {
        let runs: Vec<_> = [("token-a", ia), ("token-b", ib)]
            .into_iter()
            .map(|(token, id)| {
                let s = &s;
                scope.spawn(move || {
                    s.post(
                        &format!("/v1/instances/{id}/invoke"),
                        token,
                        json!({ "export": "double_on_device", "args": [20000] }),
                    )
                })
            })
            .collect();
        for r in runs {
            // The sum of 2i for i < 20000 (every term and partial sum exact).
            let (status, v) = r.join().unwrap();
            assert_eq!((status, v), (200, json!({ "results": [399980000.0] })));
        }
    });
}

#[path = "support/components.rs"]
mod components;

/// A built component of the guest workspace (`$var` overrides).
fn component(var: &str, file: &str) -> PathBuf {
    components::component(
        var,
        file,
        "cd guest/examples/gpu-component && cargo build --release; guest/examples/build-lang-components.sh",
    )
}

#[test]
fn a_component_runs_as_a_command() {
    let s = start("component", "");
    let cli = std::fs::read(component("WASIP2_CLI_GUEST_WASM", "wasip2-cli.wasm")).unwrap();
    let (status, c) = s.upload("token-a", &cli);
    assert_eq!(status, 201, "{c}");
    let exports = c["exports"].as_array().unwrap();
    assert!(
        exports
            .iter()
            .any(|e| e.as_str().unwrap().starts_with("wasi:cli/run@")),
        "{c}"
    );
    let run = |id: &Value, body: Value| s.post(&format!("/v1/modules/{id}/run"), "token-a", body);
    // argv (argv[0] first) and stdin in, output and exit code out.
    let (status, out) = run(
        &c["id"],
        json!({ "argv": ["cli", "stdin"], "stdin": "some input\n" }),
    );
    assert_eq!(status, 200, "{out}");
    assert_eq!(out["exit_code"], 0, "{out}");
    assert_eq!(out["stdout"], "SOME INPUT\n", "{out}");
    assert_eq!(out["stderr"], "11 bytes\n", "{out}");
    // WASI 0.2's exit carries success or failure only: 7 is 1, as under
    // `wasmtime run` and `tensorwasm run`.
    let (status, out) = run(&c["id"], json!({ "argv": ["cli", "exit", "7"] }));
    assert_eq!(status, 200, "{out}");
    assert_eq!(out["exit_code"], 1, "{out}");
    // An instance of it: an interface's function by `interface#name`, its
    // `result` as `{"ok": null}`.
    let run_interface = exports
        .iter()
        .map(|e| e.as_str().unwrap())
        .find(|e| e.starts_with("wasi:cli/run@"))
        .unwrap();
    let (status, i) = s.post("/v1/instances", "token-a", json!({ "module": c["id"] }));
    assert_eq!(status, 201, "{i}");
    let (status, out) = s.post(
        &format!("/v1/instances/{}/invoke", i["id"]),
        "token-a",
        json!({ "export": format!("{run_interface}#run"), "args": [] }),
    );
    assert_eq!((status, out), (200, json!({ "results": [{ "ok": null }] })));
    // The GPU component's MLP through tensorwasm:gpu, as `tensorwasm run`
    // prints it.
    let gpu_path = component("GPU_COMPONENT_GUEST_WASM", "gpu-component.wasm");
    let (status, g) = s.upload("token-b", &std::fs::read(&gpu_path).unwrap());
    assert_eq!(status, 201, "{g}");
    let (status, out) = s.post(
        &format!("/v1/modules/{}/run", g["id"]),
        "token-b",
        json!({ "argv": ["gpu-component", "mlp"] }),
    );
    assert_eq!(status, 200, "{out}");
    assert_eq!(out["exit_code"], 0, "{out}");
    let driver = std::env::var("TW_SERVE_DRIVER").unwrap_or_else(|_| "cpu".into());
    let direct = std::process::Command::new(bin::tensorwasm_bin())
        .arg("run")
        .args(["--driver", &driver])
        .arg(&gpu_path)
        .arg("mlp")
        .output()
        .unwrap();
    assert!(direct.status.success(), "{direct:?}");
    assert_eq!(
        out["stdout"],
        String::from_utf8_lossy(&direct.stdout).as_ref(),
        "{out}"
    );
    // Not a command: no run (its exports are invoked on an instance).
    let (status, r) = s.upload("token-a", &wat::parse_str(REACTOR).unwrap());
    assert_eq!(status, 201, "{r}");
    let (status, e) = run(&r["id"], json!({ "argv": ["r"] }));
    assert_eq!(status, 400, "{e}");
    assert!(e["error"].as_str().unwrap().contains("wasi:cli/run"), "{e}");
}

/// A component that exports functions (no `wasi:cli/run`): WIT's integers,
/// floats, bools, a record, an enum, a string and a list in and out.
const REACTOR: &str = r#"(component
  (core module $m
    (func (export "add") (param i32 i32) (result i32) (i32.add (local.get 0) (local.get 1)))
    (func (export "sum") (param i32 i32) (result i32) (i32.add (local.get 0) (local.get 1)))
    (func (export "pick") (param i32) (result i32) (i32.mul (local.get 0) (i32.const 10)))
    (func (export "half") (param f64) (result f64) (f64.mul (local.get 0) (f64.const 0.5)))
    (func (export "odd") (param i32) (result i32) (i32.and (local.get 0) (i32.const 1)))
    (func (export "boom") unreachable)
    (memory (export "mem") 1)
    (global $next (mut i32) (i32.const 1024))
    (func (export "realloc") (param i32 i32 i32 i32) (result i32) (local $r i32)
      (local.set $r (i32.and (i32.add (global.get $next) (i32.sub (local.get 2) (i32.const 1)))
        (i32.sub (i32.const 0) (local.get 2))))
      (global.set $next (i32.add (local.get $r) (local.get 3)))
      (local.get $r))
    (func (export "len") (param i32 i32) (result i32) (local.get 1))
    (func (export "total") (param $p i32) (param $n i32) (result i32) (local $s i32)
      (block $done (loop $next
        (br_if $done (i32.eqz (local.get $n)))
        (local.set $s (i32.add (local.get $s) (i32.load (local.get $p))))
        (local.set $p (i32.add (local.get $p) (i32.const 4)))
        (local.set $n (i32.sub (local.get $n) (i32.const 1)))
        (br $next)))
      (local.get $s)))
  (core instance $i (instantiate $m))
  (alias core export $i "mem" (core memory $mem))
  (alias core export $i "realloc" (core func $realloc))
  (type $point (record (field "x" u32) (field "y" u32)))
  (export $p "point" (type $point))
  (type $color (enum "red" "green" "blue"))
  (export $c "color" (type $color))
  (func (export "add") (param "a" s32) (param "b" s32) (result s32) (canon lift (core func $i "add")))
  (func (export "sum") (param "p" $p) (result u32) (canon lift (core func $i "sum")))
  (func (export "pick") (param "c" $c) (result u32) (canon lift (core func $i "pick")))
  (func (export "half") (param "x" f64) (result f64) (canon lift (core func $i "half")))
  (func (export "odd") (param "n" u32) (result bool) (canon lift (core func $i "odd")))
  (func (export "boom") (canon lift (core func $i "boom")))
  (func (export "len") (param "s" string) (result u32)
    (canon lift (core func $i "len") (memory $mem) (realloc $realloc)))
  (func (export "total") (param "xs" (list u32)) (result u32)
    (canon lift (core func $i "total") (memory $mem) (realloc $realloc))))"#;

#[test]
fn a_component_instance_answers_with_json_by_wit_type() {
    let s = start("reactor", "");
    let id = s.instance_of("token-a", &wat::parse_str(REACTOR).unwrap());
    let invoke = |export: &str, args: Value| s.invoke("token-a", &id, export, args);
    assert_eq!(
        invoke("add", json!([-7, 3])),
        (200, json!({ "results": [-4] }))
    );
    assert_eq!(
        invoke("sum", json!([{ "x": 40, "y": 2 }])),
        (200, json!({ "results": [42] }))
    );
    assert_eq!(
        invoke("pick", json!(["blue"])),
        (200, json!({ "results": [20] }))
    );
    assert_eq!(
        invoke("half", json!([2.5])),
        (200, json!({ "results": [1.25] }))
    );
    assert_eq!(
        invoke("odd", json!([7])),
        (200, json!({ "results": [true] }))
    );
    assert_eq!(
        invoke("len", json!(["héllo"])),
        (200, json!({ "results": [6] }))
    );
    assert_eq!(
        invoke("total", json!([[1, 2, 3, 4000000000u64]])),
        (200, json!({ "results": [4000000006u64] }))
    );
    // Values outside their types: 400 with what is wrong, nothing called.
    for (export, args, says) in [
        ("add", json!([1]), "takes 2 arguments"),
        ("add", json!([1, 2147483648u64]), "does not fit in s32"),
        ("sum", json!([{ "x": 1 }]), "field `y` missing"),
        ("sum", json!([{ "x": 1, "y": 2, "z": 3 }]), "no field `z`"),
        ("pick", json!(["mauve"]), "no case `mauve`"),
        ("odd", json!([-1]), "non-negative integer"),
        ("len", json!([7]), "expected a string"),
        ("total", json!([[1, "x"]]), "item 1"),
    ] {
        let (status, e) = invoke(export, args);
        assert_eq!(status, 400, "{export}: {e}");
        assert!(e["error"].as_str().unwrap().contains(says), "{export}: {e}");
    }
    assert_eq!(invoke("nothing", json!([])).0, 404);
    // A trap is a 422.
    let (status, e) = invoke("boom", json!([]));
    assert_eq!(status, 422, "{e}");
    assert!(e["error"].as_str().unwrap().contains("unreachable"), "{e}");
}

/// A component instance whose exports launch a Wasm kernel over its own
/// memory and a built-in GEMM (`guest/examples/gpu-bench`, the benchmark's
/// guest), driven by JSON invokes: each result checked by the guest.
#[test]
fn a_component_instance_launches_its_own_kernel_and_a_gemm() {
    let s = start("bench-component", "");
    let wasm = std::fs::read(components::component(
        "GPU_BENCH_GUEST_WASM",
        "gpu_bench.wasm",
        "cd guest/examples/gpu-bench && cargo build --release",
    ))
    .unwrap();
    let id = s.instance_of("token-a", &wasm);
    let invoke = |export: &str, args: Value| s.invoke("token-a", &id, export, args);
    let ok = json!({ "results": [{ "ok": null }] });
    // Before its setup the guest says so (its own error, not a trap).
    assert_eq!(
        invoke("vadd", json!([1])),
        (
            200,
            json!({ "results": [{ "err": "vadd before vadd-setup" }] })
        )
    );
    assert_eq!(
        invoke("vadd-setup", json!([100003, 7, 0, true])),
        (200, ok.clone())
    );
    assert_eq!(invoke("vadd", json!([3])), (200, ok.clone()));
    assert_eq!(invoke("vadd-check", json!([])), (200, ok.clone()));
    assert_eq!(
        invoke("gemm-setup", json!([33, 17, 65, 9])),
        (200, ok.clone())
    );
    assert_eq!(invoke("gemm", json!([])), (200, ok.clone()));
    let (status, checked) = invoke("gemm-check", json!([64]));
    assert_eq!(status, 200, "{checked}");
    let error = checked["results"][0]["ok"]
        .as_f64()
        .expect("a relative error");
    assert!(error < 1e-6, "GEMM relative error {error}");
}

/// The Python and JavaScript GPU components (`guest/examples/gpu-python`,
/// `gpu-js`) run their MLP through the server and print what the Rust
/// component prints for the same seed.
#[test]
fn language_components_run_through_the_server() {
    // A GPU pack without them (scripts/pack-gpu-tests.sh sets this and says
    // so); CI builds them before the tests.
    if std::env::var_os("TW_NO_LANG_COMPONENTS").is_some() {
        eprintln!("skipped: TW_NO_LANG_COMPONENTS is set");
        return;
    }
    let s = start(
        "lang-components",
        "module_bytes = 33554432\nrequest_timeout_ms = 300000\n",
    );
    let run = |file: &str, var: &str| {
        let (status, m) = s.upload("token-b", &std::fs::read(component(var, file)).unwrap());
        assert_eq!(status, 201, "{file}: {m}");
        let (status, out) = s.post(
            &format!("/v1/modules/{}/run", m["id"]),
            "token-b",
            json!({ "argv": [file, "mlp", "7"] }),
        );
        assert_eq!(status, 200, "{file}: {out}");
        assert_eq!(out["exit_code"], 0, "{file}: {out}");
        out["stdout"].as_str().unwrap().to_string()
    };
    let rust = run("gpu-component.wasm", "GPU_COMPONENT_GUEST_WASM");
    assert!(rust.contains("seed 7"), "{rust}");
    assert_eq!(run("gpu-python.wasm", "GPU_PYTHON_GUEST_WASM"), rust);
    assert_eq!(run("gpu-js.wasm", "GPU_JS_GUEST_WASM"), rust);
}
