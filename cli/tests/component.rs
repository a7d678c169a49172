//! WASI 0.2 components under `tensorwasm run`, on the CPU driver: the test
//! component `guest/examples/wasip2-cli` (a `wasm32-wasip2` Rust command,
//! built by `scripts/test.sh` before the tests run) prints hello world, its
//! argv, its environment, its stdin; reads and writes files in a `--dir`;
//! exits non-zero. Each case asserts the real behaviour, and
//! `the_same_as_wasmtime_run` runs every case under `wasmtime run` too when
//! a `wasmtime` binary is on PATH and compares stdout, stderr and exit code.
//! Tenants' WASI capabilities and fuel hold for components as for core
//! modules; components in WAT check the errors for bad input.

use std::{
    path::{Path, PathBuf},
    process::Output,
};

use assert_cmd::Command;

/// The built component: `$WASIP2_CLI_GUEST_WASM` when set, else the guest
/// build's output.
fn guest() -> PathBuf {
    let path = std::env::var_os("WASIP2_CLI_GUEST_WASM")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("../guest/target/wasm32-wasip2/release/wasip2-cli.wasm")
        });
    assert!(
        path.exists(),
        "{}: build the component first (scripts/test.sh does: \
         `cd guest/examples/wasip2-cli && cargo build --release`)",
        path.display()
    );
    path
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
    run_with(
        Path::new(env!("CARGO_BIN_EXE_tensorwasm")),
        &["--driver", "cpu"],
        case,
    )
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

#[test]
fn the_same_as_wasmtime_run() {
    let Some(wasmtime) = wasmtime() else {
        eprintln!(
            "skipped: no `wasmtime` on PATH to compare with \
             (`cargo install wasmtime-cli --version 48.0.8 --locked`)"
        );
        return;
    };
    let ours = cases("ours");
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

/// `tensorwasm run --driver cpu ARGS...` of a WAT component written here.
fn run_wat(test: &str, wat: &str, args: &[&str]) -> Output {
    let dir = scratch(test);
    let path = dir.join("c.wat");
    std::fs::write(&path, wat).unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tensorwasm"));
    cmd.env_remove("RUST_LOG")
        .args(["run", "--driver", "cpu"])
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
    let gpu = RUN_WAT
        .replace(
            "IMPORT",
            r#"(import "tensorwasm:gpu/devices@0.1.0" (instance (export "count" (func (result u32)))))"#,
        )
        .replace("RESULT", "0");
    one_line_error(
        &run_wat("import", &gpu, &[]),
        1,
        "component imports instance `tensorwasm:gpu/devices@0.1.0`",
    );
    one_line_error(
        &run_wat("import", &gpu, &[]),
        1,
        "the GPU API is not available to components yet",
    );
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
