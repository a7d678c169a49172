//! WASI 0.2 components under `tensorwasm run`, on the CPU driver (CI), or
//! on the driver `TW_COMPONENT_DRIVER` names (`cuda` on a GPU: the packed
//! GPU run sets it; the few outcomes that differ by driver are said where
//! they are checked): the test
//! component `guest/examples/wasip2-cli` (a `wasm32-wasip2` Rust command,
//! built by `scripts/test.sh` before the tests run) prints hello world, its
//! argv, its environment, its stdin; reads and writes files in a `--dir`;
//! exits non-zero. Each case asserts the real behaviour, and
//! `the_same_as_wasmtime_run` runs every case under wasmtime's own WASI 0.2
//! host too (the `wasmtime-wasi` crate `wasmtime run` is built on, in the
//! test's process), and under `wasmtime run` itself when a `wasmtime`
//! binary is on PATH, and compares stdout, stderr and exit code.
//! Tenants' WASI capabilities and fuel hold for components as for core
//! modules; components in WAT check the errors for bad input.
//!
//! The GPU API (`tensorwasm:gpu`, `wit/gpu.wit`): the test component
//! `guest/examples/gpu-component` (Rust, wit-bindgen) runs an MLP forward
//! pass on device buffers and built-in ops and checks it against its own
//! CPU computation, from random inputs or a model file in a `--dir`;
//! launches the repo's vector-add PTX as a raw module and its own function
//! as a Wasm kernel over its own memory; calls the API
//! wrongly and prints the error codes; and meets its tenant's quotas and
//! policy. The same MLP in Python (componentize-py,
//! `guest/examples/gpu-python`) and JavaScript (jco componentize,
//! `guest/examples/gpu-js`), built by `guest/examples/build-lang-components.sh`,
//! prints what the Rust guest prints. A component in WAT calls it with no
//! bindings generator at all.

use std::{
    path::{Path, PathBuf},
    process::Output,
};

use assert_cmd::Command;

#[path = "support/bin.rs"]
mod bin;
#[path = "support/components.rs"]
mod components;

/// The driver the component runs on: `TW_COMPONENT_DRIVER`, else `cpu`.
fn driver() -> String {
    std::env::var("TW_COMPONENT_DRIVER").unwrap_or_else(|_| "cpu".into())
}

/// Whether it is CUDA (a real GPU).
fn on_cuda() -> bool {
    driver() == "cuda"
}

/// The built component (`$WASIP2_CLI_GUEST_WASM` overrides).
fn guest() -> PathBuf {
    components::component(
        "WASIP2_CLI_GUEST_WASM",
        "wasip2-cli.wasm",
        "cd guest/examples/wasip2-cli && cargo build --release",
    )
}

/// The built GPU component (`$GPU_COMPONENT_GUEST_WASM` overrides).
fn gpu_guest() -> PathBuf {
    components::component(
        "GPU_COMPONENT_GUEST_WASM",
        "gpu-component.wasm",
        "cd guest/examples/gpu-component && cargo build --release",
    )
}

/// A fresh directory for one test.
fn scratch(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "tensorwasm-component-{}-{test}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// One run of the component: options before the guest, the guest's own
/// arguments, its stdin.
struct Case {
    options: Vec<String>,
    args: Vec<&'static str>,
    stdin: &'static [u8],
}

fn case(options: &[&str], args: &[&'static str]) -> Case {
    Case {
        options: options.iter().map(|s| s.to_string()).collect(),
        args: args.to_vec(),
        stdin: b"",
    }
}

/// Runs `case` under `program run` (`tensorwasm` on the CPU driver, or
/// `wasmtime`), in the guest's directory so that argv\[0\] is its file name
/// under both.
fn run_with(program: &Path, extra: &[&str], case: &Case) -> Output {
    let guest = guest();
    let mut cmd = Command::new(program);
    cmd.env_remove("RUST_LOG")
        .current_dir(guest.parent().unwrap())
        .arg("run")
        .args(extra)
        .args(&case.options)
        .arg(guest.file_name().unwrap())
        .args(&case.args)
        .write_stdin(case.stdin);
    cmd.output().unwrap()
}

fn tensorwasm(case: &Case) -> Output {
    run_with(&bin::tensorwasm_bin(), &["--driver", &driver()], case)
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Asserts stdout, stderr and the exit code.
fn expect(out: &Output, stdout: &str, stderr: &str, code: i32) {
    assert_eq!(
        (
            text(&out.stdout).as_str(),
            text(&out.stderr).as_str(),
            out.status.code()
        ),
        (stdout, stderr, Some(code))
    );
}

/// The files case's directory: `in.txt` holds `abc`.
fn files_dir(test: &str) -> PathBuf {
    let dir = scratch(test);
    std::fs::write(dir.join("in.txt"), "abc").unwrap();
    dir
}

/// Every case, with a fresh directory for the files cases.
fn cases(test: &str) -> Vec<Case> {
    let data = files_dir(test);
    let dir = format!("{}::/data", data.display());
    vec![
        case(&[], &["hello"]),
        case(&[], &["args", "a", "b c", "--help"]),
        case(&["--env", "MODEL=small"], &["env", "MODEL", "HOME"]),
        Case {
            stdin: b"some input\n",
            ..case(&[], &["stdin"])
        },
        case(&["--dir", &dir], &["files", "/data"]),
        case(&[], &["files", "/data"]),
        case(&[], &["exit", "7"]),
        case(&[], &["exit", "0"]),
    ]
}

#[test]
fn hello_world_prints_to_stdout_and_stderr() {
    expect(
        &tensorwasm(&case(&[], &["hello"])),
        "hello from a component\n",
        "to stderr\n",
        0,
    );
}

#[test]
fn the_guest_gets_its_argv_after_its_file_name() {
    expect(
        &tensorwasm(&case(&[], &["args", "a", "b c", "--help"])),
        "wasip2-cli.wasm\nargs\na\nb c\n--help\n",
        "",
        0,
    );
}

#[test]
fn the_guest_sees_only_the_environment_it_is_given() {
    let out = tensorwasm(&case(&["--env", "MODEL=small"], &["env", "MODEL", "HOME"]));
    expect(&out, "MODEL=small\nHOME unset\n", "", 0);
}

#[test]
fn stdin_reaches_the_guest() {
    let out = tensorwasm(&Case {
        stdin: b"some input\n",
        ..case(&[], &["stdin"])
    });
    expect(&out, "SOME INPUT\n", "11 bytes\n", 0);
}

#[test]
fn a_preopened_dir_is_read_and_written_and_nothing_else_is_reachable() {
    let data = files_dir("dir");
    let dir = format!("{}::/data", data.display());
    expect(
        &tensorwasm(&case(&["--dir", &dir], &["files", "/data"])),
        "read abc\n",
        "",
        0,
    );
    assert_eq!(
        std::fs::read_to_string(data.join("out.txt")).unwrap(),
        "cba"
    );
    // Without --dir there is no /data: the guest's own error, exit code 1
    // (its `exit(3)`: WASI 0.2's exit takes ok or err, not a number).
    let out = tensorwasm(&case(&[], &["files", "/data"]));
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).starts_with("cannot read /data/in.txt"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn a_non_zero_exit_is_exit_code_1() {
    // Rust's `process::exit(7)` is `wasi:cli/exit` with `err`: 1, as under
    // `wasmtime run` (exit-with-code is an unstable WASI 0.2 interface).
    expect(&tensorwasm(&case(&[], &["exit", "7"])), "", "", 1);
    expect(&tensorwasm(&case(&[], &["exit", "0"])), "", "", 0);
}

/// `wasmtime` on PATH, if any.
fn wasmtime() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join("wasmtime"))
        .find(|p| p.is_file())
}

/// `case` run as `wasmtime run` runs a command component, by wasmtime's
/// own WASI 0.2 host (the `wasmtime-wasi` crate `wasmtime run` is built
/// on) in this process: argv\[0\] the guest's file name, the case's
/// `--env` and `--dir` (read-write), its stdin; its stdout, stderr and
/// exit code (0 for `ok`, 1 for `err`, `wasi:cli/exit`'s code).
fn reference(case: &Case) -> (String, String, Option<i32>) {
    use wasmtime::component::{Component, Linker, ResourceTable};
    use wasmtime::{Engine, Store};
    use wasmtime_wasi::p2::bindings::Command as WasiCommand;
    use wasmtime_wasi::p2::pipe::{MemoryInputPipe, MemoryOutputPipe};
    use wasmtime_wasi::{FsPerms, I32Exit, WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

    struct State {
        ctx: WasiCtx,
        table: ResourceTable,
    }
    impl WasiView for State {
        fn ctx(&mut self) -> WasiCtxView<'_> {
            WasiCtxView {
                ctx: &mut self.ctx,
                table: &mut self.table,
            }
        }
    }

    let guest = guest();
    let mut argv = vec![guest.file_name().unwrap().to_string_lossy().into_owned()];
    argv.extend(case.args.iter().map(|a| a.to_string()));
    let (stdout, stderr) = (
        MemoryOutputPipe::new(1 << 20),
        MemoryOutputPipe::new(1 << 20),
    );
    let mut builder = WasiCtxBuilder::new();
    builder
        .args(&argv)
        .stdin(MemoryInputPipe::new(case.stdin.to_vec()))
        .stdout(stdout.clone())
        .stderr(stderr.clone());
    let mut options = case.options.iter();
    while let Some(option) = options.next() {
        let value = options
            .next()
            .expect("every option of the cases has a value");
        match option.as_str() {
            "--env" => {
                let (key, val) = value.split_once('=').expect("--env KEY=VALUE");
                builder.env(key, val);
            }
            "--dir" => {
                let (host, guest) = value.split_once("::").expect("--dir HOST::GUEST");
                builder
                    .preopened_dir(host, guest, FsPerms::ReadWrite)
                    .expect("the case's directory");
            }
            other => panic!("the reference runs no `{other}`"),
        }
    }
    let engine = Engine::default();
    let component = Component::from_file(&engine, &guest).unwrap();
    let mut linker = Linker::new(&engine);
    wasmtime_wasi::p2::add_to_linker_async(&mut linker).unwrap();
    let mut store = Store::new(
        &engine,
        State {
            ctx: builder.build(),
            table: ResourceTable::new(),
        },
    );
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let code = runtime.block_on(async {
        let command = WasiCommand::instantiate_async(&mut store, &component, &linker)
            .await
            .unwrap();
        match command.wasi_cli_run().call_run(&mut store).await {
            Ok(Ok(())) => Some(0),
            Ok(Err(())) => Some(1),
            Err(e) => e.downcast_ref::<I32Exit>().map(|exit| exit.0),
        }
    });
    drop(store);
    let text = |pipe: MemoryOutputPipe| String::from_utf8_lossy(&pipe.contents()).into_owned();
    (text(stdout), text(stderr), code)
}

/// Every case gives under `tensorwasm run` what wasmtime's WASI host gives
/// (`reference`), and what `wasmtime run` gives where a `wasmtime` is on
/// PATH (`cargo install wasmtime-cli --version 48.0.8 --locked`).
#[test]
fn the_same_as_wasmtime_run() {
    let ours = cases("ours");
    let reference_cases = cases("reference");
    for (ours, theirs) in ours.iter().zip(&reference_cases) {
        let a = tensorwasm(ours);
        assert_eq!(
            (text(&a.stdout), text(&a.stderr), a.status.code()),
            reference(theirs),
            "tensorwasm run and wasmtime's WASI host differ on {:?} {:?}",
            ours.options,
            ours.args
        );
    }
    let Some(wasmtime) = wasmtime() else {
        eprintln!("no `wasmtime` on PATH: compared with wasmtime's WASI host only");
        return;
    };
    let theirs = cases("theirs");
    for (ours, theirs) in ours.iter().zip(&theirs) {
        let a = tensorwasm(ours);
        let b = run_with(&wasmtime, &[], theirs);
        assert_eq!(
            (text(&a.stdout), text(&a.stderr), a.status.code()),
            (text(&b.stdout), text(&b.stderr), b.status.code()),
            "tensorwasm run and wasmtime run differ on {:?} {:?}",
            ours.options,
            ours.args
        );
    }
}

/// A tenant file in `dir`.
fn tenant(dir: &Path, toml: &str) -> String {
    let path = dir.join("tenant.toml");
    std::fs::write(&path, toml).unwrap();
    path.to_str().unwrap().to_string()
}

#[test]
fn a_tenant_gets_what_its_wasi_section_grants_and_no_more() {
    let data = files_dir("tenant");
    let file = tenant(
        &data,
        &format!(
            "name = \"t\"\n[wasi]\nenv = {{ MODEL = \"small\" }}\n\
             [[wasi.dirs]]\nhost = \"{}\"\nguest = \"/data\"\n",
            data.display()
        ),
    );
    // Its environment, nothing of the host's; output captured and replayed.
    let out = tensorwasm(&case(&["--tenant", &file], &["env", "MODEL", "HOME"]));
    expect(&out, "MODEL=small\nHOME unset\n", "", 0);
    // Its directory is read-only: reading works, writing is refused.
    let out = tensorwasm(&case(&["--tenant", &file], &["files", "/data"]));
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).starts_with("cannot write /data/out.txt"),
        "{}",
        text(&out.stderr)
    );
    assert!(!data.join("out.txt").exists());
    // No stdin for an untrusted tenant.
    let out = tensorwasm(&Case {
        stdin: b"secret",
        ..case(&["--tenant", &file], &["stdin"])
    });
    expect(&out, "", "0 bytes\n", 0);
}

#[test]
fn a_tenants_fuel_bounds_a_component() {
    let dir = scratch("fuel");
    let file = tenant(&dir, "name = \"t\"\nguest_fuel = 1000\n");
    let out = tensorwasm(&case(&["--tenant", &file], &["hello"]));
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("fuel"), "{}", text(&out.stderr));
}

/// `tensorwasm run --driver DRIVER ARGS...` of a WAT component written here.
fn run_wat(test: &str, wat: &str, args: &[&str]) -> Output {
    let dir = scratch(test);
    let path = dir.join("c.wat");
    std::fs::write(&path, wat).unwrap();
    let mut cmd = Command::new(bin::tensorwasm_bin());
    cmd.env_remove("RUST_LOG")
        .args(["run", "--driver", &driver()])
        .args(args)
        .arg(&path);
    cmd.output().unwrap()
}

/// The failure is one line on stderr, saying `says`, and nothing on stdout.
fn one_line_error(out: &Output, code: i32, says: &str) {
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(code), "{err}");
    assert_eq!(text(&out.stdout), "");
    assert_eq!(err.lines().count(), 1, "not one line: {err:?}");
    assert!(err.contains(says), "{err:?} does not say {says:?}");
}

/// A command component whose `run` returns `RESULT` (0: ok, 1: err),
/// with `IMPORT` in front.
const RUN_WAT: &str = r#"(component
  IMPORT
  (core module $m (func (export "run") (result i32) i32.const RESULT))
  (core instance $i (instantiate $m))
  (func $run (result (result)) (canon lift (core func $i "run")))
  (instance $r (export "run" (func $run)))
  (export "wasi:cli/run@0.2.0" (instance $r)))"#;

#[test]
fn a_command_component_in_wat_runs_and_its_err_is_exit_code_1() {
    let ok = RUN_WAT.replace("IMPORT", "").replace("RESULT", "0");
    let out = run_wat("wat-ok", &ok, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let err = RUN_WAT.replace("IMPORT", "").replace("RESULT", "1");
    let out = run_wat("wat-err", &err, &[]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
}

#[test]
fn bad_components_are_one_line_errors() {
    one_line_error(
        &run_wat("no-run", "(component)", &[]),
        2,
        "exports no `wasi:cli/run` (it is not a WASI 0.2 command component; it exports nothing)",
    );
    let unknown = RUN_WAT
        .replace(
            "IMPORT",
            r#"(import "tensorwasm:gpu/streams@0.1.0" (instance (export "count" (func (result u32)))))"#,
        )
        .replace("RESULT", "0");
    one_line_error(
        &run_wat("import", &unknown, &[]),
        1,
        "component imports instance `tensorwasm:gpu/streams@0.1.0`",
    );
    one_line_error(
        &run_wat("import", &unknown, &[]),
        1,
        "components get WASI 0.2 and tensorwasm:gpu@0.1.2",
    );
    // The right interface with a function of the wrong type.
    let mistyped = RUN_WAT
        .replace(
            "IMPORT",
            r#"(import "tensorwasm:gpu/devices@0.1.0" (instance (export "count" (func (result u64)))))"#,
        )
        .replace("RESULT", "0");
    one_line_error(&run_wat("mistyped", &mistyped, &[]), 1, "instantiating");
    one_line_error(
        &run_wat(
            "invalid",
            "(component (core module (func (result i32))))",
            &[],
        ),
        1,
        "compiling",
    );
    let ok = RUN_WAT.replace("IMPORT", "").replace("RESULT", "0");
    one_line_error(
        &run_wat("invoke", &ok, &["--invoke", "run"]),
        2,
        "is a component: --invoke calls a core module's export",
    );
}

/// A command component in WAT whose `run` calls `tensorwasm:gpu`'s
/// `devices.count` and returns `ok` when it is `COUNT`, `err` otherwise:
/// the API from a guest no bindings generator made.
const COUNT_WAT: &str = r#"(component
  (import "tensorwasm:gpu/devices@0.1.0" (instance $devices
    (export "count" (func (result u32)))))
  (core func $count (canon lower (func $devices "count")))
  (core module $m
    (import "gpu" "count" (func $count (result i32)))
    (func (export "run") (result i32)
      (i32.ne (call $count) (i32.const COUNT))))
  (core instance $gpu (export "count" (func $count)))
  (core instance $i (instantiate $m (with "gpu" (instance $gpu))))
  (func $run (result (result)) (canon lift (core func $i "run")))
  (instance $r (export "run" (func $run)))
  (export "wasi:cli/run@0.2.0" (instance $r)))"#;

#[test]
fn a_wat_component_calls_the_gpu_api() {
    let out = run_wat("count-1", &COUNT_WAT.replace("COUNT", "1"), &[]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    // The same component expecting two devices gets one: `err`.
    let out = run_wat("count-2", &COUNT_WAT.replace("COUNT", "2"), &[]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
}

/// `tensorwasm run --driver DRIVER OPTIONS gpu-component.wasm ARGS...`.
fn run_gpu(options: &[&str], args: &[&str]) -> Output {
    let mut cmd = Command::new(bin::tensorwasm_bin());
    cmd.env_remove("RUST_LOG")
        .args(["run", "--driver", &driver()])
        .args(options)
        .arg(gpu_guest())
        .args(args);
    cmd.output().unwrap()
}

/// Asserts that the MLP ran and matched its CPU computation.
fn mlp_ok(out: &Output) {
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("mlp ok: batch 5, 37 -> 67 -> 10, largest error "),
        "{}",
        text(&out.stdout)
    );
}

#[test]
fn a_component_runs_an_mlp_on_buffers_and_built_in_ops() {
    for seed in ["24301", "7", "1234567890123"] {
        let out = run_gpu(&[], &["mlp", seed]);
        assert!(
            text(&out.stdout).starts_with(&format!("seed {seed}\n")),
            "{}",
            text(&out.stdout)
        );
        mlp_ok(&out);
    }
}

#[test]
fn a_component_waits_for_launches_with_wasi_io_poll() {
    // Two launches' pollables in one `poll`, until both are ready; a
    // waited launch's pollable is ready at once. One launch in flight at
    // a time as well: the second op waits for a slot.
    mlp_ok(&run_gpu(&[], &["mlp-poll", "31"]));
    let dir = scratch("poll");
    let file = tenant(&dir, "name = \"t\"\n[quota]\nlaunches_in_flight = 1\n");
    mlp_ok(&run_gpu(&["--tenant", &file], &["mlp-poll"]));
}

#[test]
fn a_component_reads_its_model_from_a_preopened_dir() {
    let dir = scratch("model");
    let mapped = format!("{}::/data", dir.display());
    let out = run_gpu(
        &["--dir", &mapped],
        &["write-model", "/data/model.bin", "99"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    mlp_ok(&run_gpu(
        &["--dir", &mapped],
        &["mlp-file", "/data/model.bin"],
    ));
    // A model cut short is the guest's own error.
    let model = std::fs::read(dir.join("model.bin")).unwrap();
    std::fs::write(dir.join("short.bin"), &model[..model.len() - 4]).unwrap();
    let out = run_gpu(&["--dir", &mapped], &["mlp-file", "/data/short.bin"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("need"), "{}", text(&out.stderr));
}

#[test]
fn a_component_sees_one_device() {
    let out = run_gpu(&[], &["info"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 4, "{stdout}");
    assert_eq!(lines[0], "devices 1");
    if on_cuda() {
        assert_eq!(lines[1], "driver DriverKind::Cuda");
        assert!(lines[2].starts_with("name NVIDIA"), "{stdout}");
    } else {
        assert_eq!(lines[1], "driver DriverKind::Cpu");
        assert!(lines[2].starts_with("name CPU"), "{stdout}");
    }
    assert_eq!(lines[3], "device 1: ErrorCode::Enodev");
}

#[test]
fn wrong_calls_get_the_wasi_cuda_error_codes() {
    let out = run_gpu(&[], &["errors"]);
    expect(
        &out,
        "alloc 0: ErrorCode::Einval\n\
         len 64\n\
         write past the end: ErrorCode::Efault\n\
         write nothing: ErrorCode::Einval\n\
         read past the end: ErrorCode::Efault\n\
         read at an offset that overflows: ErrorCode::Eoverflow\n\
         fill: none\n\
         read back: none\n\
         copy-from: none\n\
         copy-from onto itself: ErrorCode::Einval\n\
         gemm with mismatched inner sizes: ErrorCode::Einval\n\
         relu past the buffer: ErrorCode::Efault\n\
         relu onto its input: ErrorCode::Einval\n\
         relu of rank 5: ErrorCode::Einval\n\
         relu with strides for another rank: ErrorCode::Einval\n\
         layernorm with a negative eps: ErrorCode::Einval\n\
         reduce over axis 3 of a matrix: ErrorCode::Einval\n\
         relu: none\n\
         sync: none\n",
        "",
        0,
    );
}

#[test]
fn a_tenants_quota_and_policy_hold_for_a_component() {
    let dir = scratch("gpu-tenant");
    // Device bytes: what the quota allows, and no more (the message names
    // the quota).
    let file = tenant(&dir, "name = \"t\"\n[quota]\ndevice_bytes = 4096\n");
    let out = run_gpu(&["--tenant", &file], &["alloc", "4096"]);
    expect(&out, "len 4096\n", "", 0);
    let out = run_gpu(&["--tenant", &file], &["alloc", "4097"]);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.starts_with("ErrorCode::Equota: buffer.alloc: ") && err.contains("device"),
        "{err}"
    );
    // A read lands in the component's memory: one longer than the
    // tenant's guest-memory quota is refused before the host allocates it.
    let file = tenant(
        &dir,
        "name = \"t\"\n[quota]\nguest_memory_bytes = 4194304\n",
    );
    let out = run_gpu(&["--tenant", &file], &["read", "65536"]);
    expect(&out, "read 65536\n", "", 0);
    let out = run_gpu(&["--tenant", &file], &["read", "8388608"]);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.starts_with("ErrorCode::Einval: buffer.read: 8388608 bytes requested")
            && err.contains("4194304"),
        "{err}"
    );
    // No built-ins: the op is refused before anything runs.
    let file = tenant(&dir, "name = \"t\"\n[policy]\nbuiltins = false\n");
    let out = run_gpu(&["--tenant", &file], &["gemm"]);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.starts_with("ErrorCode::Eperm: gemm: ") && err.contains("built-in"),
        "{err}"
    );
    // One launch in flight at a time: each op waits for the one before
    // (the host suspends the guest until a slot is free), and the MLP
    // still matches.
    let file = tenant(&dir, "name = \"t\"\n[quota]\nlaunches_in_flight = 1\n");
    mlp_ok(&run_gpu(&["--tenant", &file], &["mlp"]));
    // A tensor op's work: the first GEMM asks for 5 * 37 * 67 multiply-adds.
    let file = tenant(&dir, "name = \"t\"\n[quota]\ntensor_work = 1000\n");
    let out = run_gpu(&["--tenant", &file], &["mlp"]);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.starts_with("mlp: ErrorCode::Equota: gemm: tensor-op work quota exceeded"),
        "{err}"
    );
}

#[test]
fn the_gemm_is_right() {
    // [[1, 2], [3, 4]] @ [[5, 6], [7, 8]]
    expect(
        &run_gpu(&[], &["gemm"]),
        "[19.0, 22.0, 43.0, 50.0]\n",
        "",
        0,
    );
}

#[test]
fn a_trusted_component_launches_raw_ptx_over_its_buffers() {
    // The repo's vector-add PTX, run by its host twin on the CPU driver;
    // a partial last block and a single element.
    for n in ["1000", "1"] {
        expect(
            &run_gpu(&[], &["vadd", n]),
            &format!("vadd ok {n}\n"),
            "",
            0,
        );
    }
    // The raw-module API's errors (on the CPU driver: PTX it has no twin
    // for is not supported there, where CUDA refuses the image).
    let not_ptx = if on_cuda() { "Eimage" } else { "Enotsup" };
    expect(
        &run_gpu(&[], &["module-errors"]),
        &format!(
            "load-ptx of text that is not PTX: ErrorCode::{not_ptx}\n\
         load-cubin of no image: ErrorCode::Eimage\n\
         function that is not there: ErrorCode::Enoent\n\
         launch with a pointer past the buffer: ErrorCode::Efault\n\
         launch with an empty grid: ErrorCode::Einval\n\
         launch: none\n"
        ),
        "",
        0,
    );
}

#[test]
fn a_component_launches_its_own_function_as_a_wasm_kernel_over_its_memory() {
    // One thread, a partial last block, many blocks: the guest checks
    // every element where the kernel wrote it, in its own memory.
    for n in ["1", "1000", "100003"] {
        expect(
            &run_gpu(&[], &["wasm-vadd", n]),
            &format!("wasm-vadd ok {n}\n"),
            "",
            0,
        );
    }
    expect(
        &run_gpu(&[], &["kernel-errors"]),
        "get of a function not exported: ErrorCode::Einval\n\
         get of an empty name: ErrorCode::Einval\n\
         get of a name of 2000 bytes: ErrorCode::Einval\n\
         get of a kernel with a stack frame: ErrorCode::Enotsup\n\
         launch with three arguments: ErrorCode::Einval\n\
         launch with a float for a pointer: ErrorCode::Einval\n\
         launch of an empty grid: ErrorCode::Einval\n\
         wait of a kernel that reads past the memory: ErrorCode::Etrap\n\
         prefetch of 0 bytes: ErrorCode::Einval\n\
         prefetch past the memory: ErrorCode::Efault\n\
         advise of 0 bytes: ErrorCode::Einval\n\
         advise past the memory: ErrorCode::Efault\n",
        "",
        0,
    );
    // Outside a kernel an intrinsic traps, naming itself.
    let out = run_gpu(&[], &["intrinsic-outside"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(
        err.contains(
            "`tensorwasm:gpu/kernel-intrinsics.thread-idx-x` was called outside a Wasm kernel"
        ),
        "{err}"
    );
    assert!(text(&out.stdout).is_empty());
}

#[test]
fn a_tenant_without_wasm_kernels_may_not_get_one() {
    let dir = scratch("kernels-policy");
    let file = tenant(&dir, "name = \"t\"\n[policy]\nwasm_kernels = false\n");
    let out = run_gpu(&["--tenant", &file], &["wasm-vadd", "10"]);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.starts_with("ErrorCode::Eperm: kernel.get: ") && err.contains("Wasm kernels"),
        "{err}"
    );
    // The same tenant's built-ins still run.
    mlp_ok(&run_gpu(&["--tenant", &file], &["mlp"]));
}

#[test]
fn an_untrusted_component_may_not_load_raw_modules() {
    let dir = scratch("raw-untrusted");
    let file = tenant(&dir, "name = \"t\"\n");
    let out = run_gpu(&["--tenant", &file], &["vadd", "10"]);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.starts_with("ErrorCode::Eperm: module.load-ptx: ")
            && err.contains("does not allow raw PTX modules"),
        "{err}"
    );
    // A tenant whose policy allows them may.
    let file = tenant(&dir, "name = \"t\"\n[policy]\nraw_modules = true\n");
    expect(
        &run_gpu(&["--tenant", &file], &["vadd", "10"]),
        "vadd ok 10\n",
        "",
        0,
    );
}

/// A guest that guest/examples/build-lang-components.sh builds (`$var`
/// overrides).
fn lang_guest(var: &str, file: &str) -> PathBuf {
    components::component(var, file, "guest/examples/build-lang-components.sh")
}

/// `tensorwasm run --driver DRIVER --compile-cache DIR OPTIONS GUEST ARGS...`.
/// The Python and JavaScript guests embed their interpreters (15 to 18 MB
/// of Wasm, most of a minute to compile on 2 cores): they compile once into
/// a cache kept under the test build's tmp dir, and later runs, in this test
/// run or the next, load them from it.
fn run_lang(guest: &Path, options: &[&str], args: &[&str]) -> Output {
    let cache = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("compile-cache");
    let mut cmd = Command::new(bin::tensorwasm_bin());
    cmd.env_remove("RUST_LOG")
        .args(["run", "--driver", &driver(), "--compile-cache"])
        .arg(&cache)
        .args(options)
        .arg(guest)
        .args(args);
    cmd.output().unwrap()
}

/// A guest in another language runs the Rust guest's MLP through the same
/// API and says what the Rust guest says: from a seed (the same generator,
/// so the same model), the same outputs' largest error against its own CPU
/// computation; from a model file the Rust guest wrote into a preopened
/// dir, the same; from a file cut short, the same one-line error and exit
/// code 1; from a file that is not there, its own "cannot read".
fn a_language_guest_says_what_the_rust_guest_says(guest: &Path, test: &str) {
    for seed in ["24301", "7"] {
        let ours = run_lang(guest, &[], &["mlp", seed]);
        mlp_ok(&ours);
        let rust = run_gpu(&[], &["mlp", seed]);
        mlp_ok(&rust);
        assert_eq!(text(&ours.stdout), text(&rust.stdout), "seed {seed}");
    }

    let dir = scratch(test);
    let mapped = format!("{}::/data", dir.display());
    let out = run_gpu(
        &["--dir", &mapped],
        &["write-model", "/data/model.bin", "99"],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let ours = run_lang(guest, &["--dir", &mapped], &["mlp-file", "/data/model.bin"]);
    mlp_ok(&ours);
    let rust = run_gpu(&["--dir", &mapped], &["mlp-file", "/data/model.bin"]);
    assert_eq!(text(&ours.stdout), text(&rust.stdout));

    let model = std::fs::read(dir.join("model.bin")).unwrap();
    std::fs::write(dir.join("short.bin"), &model[..model.len() - 4]).unwrap();
    let ours = run_lang(guest, &["--dir", &mapped], &["mlp-file", "/data/short.bin"]);
    let rust = run_gpu(&["--dir", &mapped], &["mlp-file", "/data/short.bin"]);
    expect(
        &ours,
        "",
        "/data/short.bin: the file holds 3410 values; sizes 5 x 37 -> 67 -> 10 need 3411\n",
        1,
    );
    assert_eq!(text(&ours.stderr), text(&rust.stderr));

    let out = run_lang(guest, &["--dir", &mapped], &["mlp-file", "/data/none.bin"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).starts_with("cannot read /data/none.bin: "),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn a_python_component_runs_the_mlp_as_the_rust_one_does() {
    let guest = lang_guest("GPU_PYTHON_GUEST_WASM", "gpu-python.wasm");
    a_language_guest_says_what_the_rust_guest_says(&guest, "python");
}

#[test]
fn a_javascript_component_runs_the_mlp_as_the_rust_one_does() {
    let guest = lang_guest("GPU_JS_GUEST_WASM", "gpu-js.wasm");
    a_language_guest_says_what_the_rust_guest_says(&guest, "js");
}

#[test]
fn a_compile_cache_is_filled_once_and_read_after() {
    // The small Rust component: the first run writes its code into the
    // directory, the second finds it there (and writes nothing) and runs
    // the same.
    let dir = scratch("compile-cache");
    let cache = dir.join("cache");
    let run = || {
        let mut cmd = Command::new(bin::tensorwasm_bin());
        cmd.env_remove("RUST_LOG")
            .args(["run", "--driver", &driver(), "--compile-cache"])
            .arg(&cache)
            .arg(gpu_guest())
            .args(["mlp", "5"]);
        cmd.output().unwrap()
    };
    // The compiled code's files (wasmtime's cache keeps usage counts in
    // `.stats` files beside them, and its cleanup's marks in the top
    // directory) and when they were written.
    let entries = || -> Vec<(PathBuf, std::time::SystemTime)> {
        let mut found = Vec::new();
        let mut todo = vec![cache.join("modules")];
        while let Some(d) = todo.pop() {
            for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
                let path = entry.path();
                let meta = entry.metadata().unwrap();
                if meta.is_dir() {
                    todo.push(path);
                } else if path.extension().is_none_or(|e| e != "stats") {
                    found.push((path, meta.modified().unwrap()));
                }
            }
        }
        found
    };
    let first = run();
    mlp_ok(&first);
    let written = entries();
    assert_eq!(written.len(), 1, "{written:?}");
    let second = run();
    assert_eq!(text(&second.stdout), text(&first.stdout));
    assert_eq!(entries(), written, "compiled again");
}
