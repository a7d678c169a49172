//! The `tensorwasm` command end to end: the real binary, as a user runs it,
//! on the CPU driver. Every flag of `run`, WASI guests (argv, environment,
//! stdio, preopened directories, exit codes), capability denials with
//! WASI's own errno, tenants' WASI settings, bad input (one line on stderr,
//! exit code 2 for usage errors and 1 for guest failures), `--help` and
//! `--version`, and `devices`.

use std::path::{Path, PathBuf};

use assert_cmd::{Command, assert::Assert};
use predicates::prelude::*;

fn tensorwasm() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tensorwasm"));
    // Quiet by default: no RUST_LOG from the environment running the tests.
    cmd.env_remove("RUST_LOG");
    cmd.current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."));
    cmd
}

/// `tensorwasm run ARGS...` from the workspace root, on the CPU driver.
fn run(args: &[&str]) -> Assert {
    tensorwasm()
        .args(["run", "--driver", "cpu"])
        .args(args)
        .assert()
}

/// A fresh directory for one test.
fn scratch(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tensorwasm-cli-{}-{test}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn write(dir: &Path, name: &str, contents: impl AsRef<[u8]>) -> String {
    let path = dir.join(name);
    std::fs::write(&path, contents).unwrap();
    path.to_str().unwrap().to_string()
}

fn stdout_of(a: &Assert) -> String {
    String::from_utf8_lossy(&a.get_output().stdout).into_owned()
}

fn stderr_of(a: &Assert) -> String {
    String::from_utf8_lossy(&a.get_output().stderr).into_owned()
}

/// The failure is one line on stderr (never a panic), and nothing on stdout.
fn one_line_error(a: Assert, code: i32, says: &str) {
    let a = a.code(code).stdout("");
    let err = stderr_of(&a);
    assert_eq!(err.lines().count(), 1, "not one line: {err:?}");
    assert!(err.contains(says), "{err:?} does not say {says:?}");
    assert!(!err.contains("panicked"), "{err}");
}

/// A WASI guest written by hand: `_start` writes its argv to stdout and its
/// environment to stderr (each string NUL-terminated) and exits with 7;
/// `echo` copies stdin to stdout; `open(fd, which, create)` opens one of
/// three paths under the preopened descriptor `fd` and returns WASI's errno;
/// `write_twice(fd)` writes "hello\n" twice and returns the second write's
/// errno; `trap` traps.
const PROBE: &str = r#"
(module
  (import "wasi_snapshot_preview1" "args_sizes_get" (func $args_sizes_get (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "args_get" (func $args_get (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "environ_sizes_get" (func $environ_sizes_get (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "environ_get" (func $environ_get (param i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_write" (func $fd_write (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "fd_read" (func $fd_read (param i32 i32 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "path_open"
    (func $path_open (param i32 i32 i32 i32 i32 i64 i64 i32 i32) (result i32)))
  (import "wasi_snapshot_preview1" "proc_exit" (func $proc_exit (param i32)))
  (memory (export "memory") 1)
  (data (i32.const 100) "../outside.txt")
  (data (i32.const 200) "new.txt")
  (data (i32.const 300) "in.txt")
  (data (i32.const 400) "hello\n")
  ;; (pointer, length) of each path `open` takes.
  (data (i32.const 500) "\64\00\00\00\0e\00\00\00\c8\00\00\00\07\00\00\00\2c\01\00\00\06\00\00\00")

  (func $write (param $fd i32) (param $ptr i32) (param $len i32) (result i32)
    (i32.store (i32.const 0) (local.get $ptr))
    (i32.store (i32.const 4) (local.get $len))
    (call $fd_write (local.get $fd) (i32.const 0) (i32.const 1) (i32.const 8)))

  (func (export "_start")
    (drop (call $args_sizes_get (i32.const 16) (i32.const 20)))
    (drop (call $args_get (i32.const 1024) (i32.const 4096)))
    (drop (call $write (i32.const 1) (i32.const 4096) (i32.load (i32.const 20))))
    (drop (call $environ_sizes_get (i32.const 16) (i32.const 20)))
    (drop (call $environ_get (i32.const 1024) (i32.const 8192)))
    (drop (call $write (i32.const 2) (i32.const 8192) (i32.load (i32.const 20))))
    (call $proc_exit (i32.const 7)))

  (func (export "echo") (result i32)
    (local $n i32)
    (loop $more
      (i32.store (i32.const 0) (i32.const 4096))
      (i32.store (i32.const 4) (i32.const 4096))
      (if (call $fd_read (i32.const 0) (i32.const 0) (i32.const 1) (i32.const 8))
        (then (return (i32.const -1))))
      (local.set $n (i32.load (i32.const 8)))
      (if (local.get $n)
        (then
          (drop (call $write (i32.const 1) (i32.const 4096) (local.get $n)))
          (br $more))))
    (i32.const 0))

  ;; Rights: FD_READ (2), with `create` also FD_WRITE (64); oflags CREAT (1).
  (func (export "open") (param $fd i32) (param $which i32) (param $create i32) (result i32)
    (local $at i32)
    (local.set $at (i32.add (i32.const 500) (i32.shl (local.get $which) (i32.const 3))))
    (call $path_open (local.get $fd) (i32.const 0)
      (i32.load (local.get $at)) (i32.load offset=4 (local.get $at))
      (local.get $create)
      (select (i64.const 66) (i64.const 2) (local.get $create))
      (i64.const 0) (i32.const 0) (i32.const 12)))

  (func (export "write_twice") (param $fd i32) (result i32)
    (drop (call $write (local.get $fd) (i32.const 400) (i32.const 6)))
    (call $write (local.get $fd) (i32.const 400) (i32.const 6)))

  (func (export "trap") unreachable))
"#;

/// WASI's errno values the tests expect (wasi_snapshot_preview1).
const EBADF: &str = "8";
const EFBIG: &str = "22";
/// What wasmtime-wasi answers for a path that leaves its preopened
/// directory (`..`), as under `wasmtime run`.
const EPERM: &str = "63";

fn probe(test: &str) -> (PathBuf, String) {
    let dir = scratch(test);
    let wat = write(&dir, "probe.wat", PROBE);
    (dir, wat)
}

// ---- the command line ----

#[test]
fn version_and_help_on_every_subcommand() {
    tensorwasm()
        .arg("--version")
        .assert()
        .success()
        .stdout(format!("tensorwasm {}\n", env!("CARGO_PKG_VERSION")));
    tensorwasm()
        .arg("--help")
        .assert()
        .success()
        .stdout(predicate::str::contains("Usage: tensorwasm <COMMAND>"))
        .stdout(predicate::str::contains("run"))
        .stdout(predicate::str::contains("devices"));
    let a = tensorwasm().args(["run", "--help"]).assert().success();
    let help = stdout_of(&a);
    for flag in [
        "Usage: tensorwasm run [OPTIONS] <GUEST> [ARGS]...",
        "--driver",
        "--invoke",
        "--dir <HOST[::GUEST]>",
        "--env <NAME[=VALUE]>",
        "--memory-limit",
        "--tenant",
    ] {
        assert!(help.contains(flag), "run --help lacks {flag}: {help}");
    }
    tensorwasm()
        .args(["devices", "--help"])
        .assert()
        .success()
        .stdout(predicate::str::contains("Usage: tensorwasm devices"));
    tensorwasm()
        .args(["run", "--version"])
        .assert()
        .success()
        .stdout(predicate::str::contains("tensorwasm"));
}

#[test]
fn usage_errors_exit_2_in_clap_form() {
    tensorwasm()
        .arg("frobnicate")
        .assert()
        .code(2)
        .stderr(predicate::str::contains(
            "error: unrecognized subcommand 'frobnicate'",
        ));
    tensorwasm()
        .assert()
        .code(2)
        .stderr(predicate::str::contains("Usage: tensorwasm <COMMAND>"));
    tensorwasm()
        .arg("run")
        .assert()
        .code(2)
        .stderr(predicate::str::contains("<GUEST>"));
    tensorwasm()
        .args(["run", "--driver", "tpu", "x.wasm"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("invalid value 'tpu'"));
    tensorwasm()
        .args(["run", "--memory-limit", "lots", "x.wasm"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("invalid value 'lots'"));
    tensorwasm()
        .args(["run", "--env", "=x", "x.wasm"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("the variable's name is empty"));
    tensorwasm()
        .args(["run", "--env", "TENSORWASM_SURELY_UNSET_VAR", "x.wasm"])
        .env_remove("TENSORWASM_SURELY_UNSET_VAR")
        .assert()
        .code(2)
        .stderr(predicate::str::contains("is not set on the host"));
}

#[test]
fn devices_lists_both_drivers_and_the_auto_choice() {
    let a = tensorwasm().arg("devices").assert().success();
    let text = stdout_of(&a);
    assert!(text.contains("cpu: 1 device(s)"), "{text}");
    assert!(text.lines().any(|l| l.starts_with("cuda: ")), "{text}");
    assert!(text.contains("auto picks: "), "{text}");
}

#[test]
fn missing_libcuda_is_reported_with_its_reason() {
    let a = tensorwasm()
        .arg("devices")
        .env("TENSORWASM_LIBCUDA", "/nonexistent/libcuda.so.1")
        .assert()
        .success();
    let text = stdout_of(&a);
    assert!(
        text.contains(
            "cuda: unavailable: cannot load the CUDA driver library `/nonexistent/libcuda.so.1`"
        ),
        "{text}"
    );
    assert!(text.ends_with("auto picks: cpu\n"), "{text}");
}

// ---- WASI guests ----

#[test]
fn a_command_gets_its_argv_only_the_given_environment_and_its_exit_code() {
    let (_dir, wat) = probe("argv");
    let a = tensorwasm()
        .args(["run", "--driver", "cpu", "--env", "MODEL=small", "--env"])
        .arg("TENSORWASM_CLI_FROM_HOST")
        .env("TENSORWASM_CLI_FROM_HOST", "yes")
        .env("TENSORWASM_CLI_LEAK", "no")
        // Everything after the guest is the guest's, flags included.
        .args([wat.as_str(), "a", "b c", "--driver", "--help"])
        .assert()
        .code(7);
    assert_eq!(
        a.get_output().stdout,
        b"probe.wat\0a\0b c\0--driver\0--help\0",
        "argv[0] is the guest's file name"
    );
    assert_eq!(
        a.get_output().stderr,
        b"MODEL=small\0TENSORWASM_CLI_FROM_HOST=yes\0",
        "the guest sees exactly the --env variables"
    );
    // Right after the guest too: `--help` is the guest's first argument,
    // not a request for tensorwasm's help.
    let a = tensorwasm()
        .args(["run", "--driver", "cpu", wat.as_str(), "--help", "x"])
        .assert()
        .code(7);
    assert_eq!(a.get_output().stdout, b"probe.wat\0--help\0x\0");
}

#[test]
fn stdin_passes_through_and_invoke_prints_results() {
    let (_dir, wat) = probe("stdin");
    tensorwasm()
        .args(["run", "--driver", "cpu", "--invoke", "echo", &wat])
        .write_stdin("ping\npong\n")
        .assert()
        .success()
        .stdout("ping\npong\n0\n");
}

#[test]
fn a_trap_fails_with_exit_code_1_and_names_the_function() {
    let (_dir, wat) = probe("trap");
    let a = run(&["--invoke", "trap", &wat]).code(1).stdout("");
    let err = stderr_of(&a);
    assert!(
        err.contains("tensorwasm run: guest function `trap` failed") && err.contains("unreachable"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn quiet_by_default_and_rust_log_turns_the_log_on() {
    let (_dir, wat) = probe("log");
    let a = run(&["--invoke", "echo", &wat]).success();
    assert_eq!(stderr_of(&a), "", "nothing on stderr by default");
    let a = tensorwasm()
        .env("RUST_LOG", "info")
        .args(["run", "--driver", "cpu", "--invoke", "echo", &wat])
        .assert()
        .success();
    let err = stderr_of(&a);
    assert!(
        err.contains("driver chosen") && err.contains("cpu"),
        "{err}"
    );
    assert!(err.contains("guest module compiled"), "{err}");
}

// ---- capabilities ----

#[test]
fn without_dir_the_guest_has_no_files() {
    let (_dir, wat) = probe("nodir");
    // fd 3 would be the first preopen: there is none.
    run(&["--invoke", "open", &wat, "3", "2", "0"])
        .success()
        .stdout(format!("{EBADF}\n"));
    // A descriptor never given, for writing.
    run(&["--invoke", "write_twice", &wat, "9"])
        .success()
        .stdout(format!("{EBADF}\n"));
}

#[test]
fn dir_preopens_read_write_and_nothing_outside() {
    let (dir, wat) = probe("dir");
    let data = dir.join("data");
    std::fs::create_dir(&data).unwrap();
    write(&data, "in.txt", "input");
    write(&dir, "outside.txt", "secret");
    let grant = format!("{}::/data", data.display());
    run(&["--dir", &grant, "--invoke", "open", &wat, "3", "2", "0"])
        .success()
        .stdout("0\n");
    run(&["--dir", &grant, "--invoke", "open", &wat, "3", "1", "1"])
        .success()
        .stdout("0\n");
    assert!(data.join("new.txt").exists(), "--dir is read-write");
    // `..` out of the preopened directory.
    run(&["--dir", &grant, "--invoke", "open", &wat, "3", "0", "0"])
        .success()
        .stdout(format!("{EPERM}\n"));
}

#[test]
fn a_tenant_gets_what_its_wasi_section_grants_and_no_more() {
    let (dir, wat) = probe("tenant");
    let data = dir.join("data");
    std::fs::create_dir(&data).unwrap();
    write(&data, "in.txt", "input");
    let tenant = write(
        &dir,
        "tenant.toml",
        format!(
            "name = \"t\"\n[wasi]\noutput_bytes = 8\nenv = {{ MODEL = \"small\" }}\n\
             [[wasi.dirs]]\nhost = \"{}\"\nguest = \"/data\"\n",
            data.display()
        ),
    );
    // Read-only: reading works, creating is refused with WASI's errno.
    run(&["--tenant", &tenant, "--invoke", "open", &wat, "3", "2", "0"])
        .success()
        .stdout("0\n");
    let a = run(&["--tenant", &tenant, "--invoke", "open", &wat, "3", "1", "1"]).success();
    let errno = stdout_of(&a);
    assert_ne!(errno, "0\n", "a read-only directory took a new file");
    assert!(!data.join("new.txt").exists());
    // Captured output, capped at 8 bytes: the second "hello\n" gets EFBIG
    // (after the 2 bytes that fit); what was captured is replayed.
    let a = run(&["--tenant", &tenant, "--invoke", "write_twice", &wat, "1"]).success();
    assert_eq!(stdout_of(&a), format!("hello\nhe{EFBIG}\n"));
    assert!(
        stderr_of(&a).contains("reached its cap"),
        "{}",
        stderr_of(&a)
    );
    // The cap holds for argv too: 8 of "probe.wat\0x\0".
    let a = run(&["--tenant", &tenant, &wat, "x"]).code(7);
    assert_eq!(a.get_output().stdout, b"probe.wa");
    // The tenant's environment, and argv, under the default cap; exit
    // code 7 as always.
    let roomy = write(&dir, "roomy.toml", "[wasi]\nenv = { MODEL = \"small\" }\n");
    let a = run(&["--tenant", &roomy, &wat, "x"]).code(7);
    assert_eq!(a.get_output().stdout, b"probe.wat\0x\0");
    assert!(
        a.get_output().stderr.starts_with(b"MODEL=small\0"),
        "{}",
        stderr_of(&a)
    );
}

#[test]
fn an_untrusted_tenant_runs_wasm_kernels_but_not_raw_ptx() {
    let tenant = "examples/untrusted-tenant.toml";
    run(&[
        "--tenant",
        tenant,
        "--invoke",
        "run",
        "examples/wasm_kernels.wat",
        "4096",
    ])
    .success()
    .stdout("0\n");
    // vector_add.wat loads raw PTX: the guest sees EPERM (17) and says so.
    let a = tensorwasm()
        .env("RUST_LOG", "info")
        .args(["run", "--driver", "cpu", "--tenant", tenant])
        .args(["--invoke", "run", "examples/vector_add.wat", "4096"])
        .assert()
        .success();
    assert_ne!(stdout_of(&a), "0\n", "raw PTX ran for an untrusted tenant");
    assert!(
        stderr_of(&a)
            .contains("module_load_ptx: EPERM: this tenant's policy does not allow raw PTX"),
        "{}",
        stderr_of(&a)
    );
}

// ---- the README's main job ----

#[test]
fn hello_gpu_is_a_wasi_command_that_prints_its_result() {
    let a = run(&["examples/hello_gpu.wat", "4096"]).success();
    let out = stdout_of(&a);
    assert!(
        out.starts_with("vector add of 4096 floats by a Wasm kernel on CPU (")
            && out.ends_with("): all 4096 match\n")
            && out.lines().count() == 1,
        "{out:?}"
    );
    assert_eq!(stderr_of(&a), "");
    // Its own usage error is its exit code 2, its message on stderr.
    run(&["examples/hello_gpu.wat", "many"])
        .code(2)
        .stdout("")
        .stderr("usage: hello_gpu [N], 1 <= N <= 67108864\n");
}

// ---- reactors (--invoke) ----

#[test]
fn invoke_runs_vector_add_on_the_cpu_driver() {
    let a = run(&["--invoke", "run", "examples/vector_add.wat", "4096"])
        .success()
        .stdout("0\n");
    assert_eq!(stderr_of(&a), "");
}

// ---- bad input ----

#[test]
fn a_file_that_is_neither_wasm_nor_wat() {
    let dir = scratch("notwasm");
    let text = write(&dir, "notes.txt", "hello, world\n");
    one_line_error(run(&[&text]), 1, "is neither a Wasm module");
    let bytes = write(&dir, "blob.bin", [0xffu8, 0xfe, 0x00, 0x61, 0x73]);
    one_line_error(run(&[&bytes]), 1, "is neither a Wasm module");
    let bad_wat = write(
        &dir,
        "bad.wat",
        "(module (func (export \"_start\") (i32.add)))\n",
    );
    one_line_error(run(&[&bad_wat]), 1, "bad.wat");
    let bad_syntax = write(&dir, "syntax.wat", "(module (fnuc))\n");
    one_line_error(run(&[&bad_syntax]), 1, "invalid WAT at line 1, column 10");
}

#[test]
fn a_truncated_module() {
    let dir = scratch("truncated");
    let full = wat::parse_str(PROBE).unwrap();
    let cut = write(&dir, "cut.wasm", &full[..full.len() / 2]);
    one_line_error(run(&[&cut]), 1, "compiling");
    let header = write(&dir, "header.wasm", &full[..6]);
    one_line_error(run(&[&header]), 1, "is truncated");
}

#[test]
fn missing_start_or_export_and_bad_arguments_are_usage_errors() {
    one_line_error(
        run(&["examples/vector_add.wat", "4096"]),
        2,
        "exports no `_start` (it is not a WASI command); call one of its functions with \
         --invoke NAME (it exports run)",
    );
    one_line_error(
        run(&["--invoke", "no_such", "examples/vector_add.wat", "1"]),
        2,
        "exports no function `no_such`",
    );
    one_line_error(
        run(&["--invoke", "run", "examples/vector_add.wat", "1", "2"]),
        2,
        "`run` takes 1 argument(s), 2 given",
    );
    one_line_error(
        run(&["--invoke", "run", "examples/vector_add.wat", "lots"]),
        2,
        "argument 0 of `run`: `lots` is not a valid i32",
    );
    one_line_error(
        run(&["--invoke", "run", "examples/vector_add.wat", "4294967296"]),
        2,
        "out of range for 32 bits",
    );
    one_line_error(
        run(&["no/such/guest.wasm"]),
        2,
        "cannot read no/such/guest.wasm",
    );
}

#[test]
fn an_unreadable_dir_or_tenant_file_is_a_usage_error() {
    let (dir, wat) = probe("baddir");
    one_line_error(
        run(&["--dir", "/nonexistent/tensorwasm::/d", &wat]),
        2,
        "--dir /nonexistent/tensorwasm::/d: cannot open /nonexistent/tensorwasm",
    );
    let file = write(&dir, "file.txt", "not a directory");
    one_line_error(run(&["--dir", &file, &wat]), 2, "cannot open");
    let bad = write(&dir, "bad.toml", "[quota]\ndevice_byte = 1\n");
    one_line_error(run(&["--tenant", &bad, &wat]), 2, "device_byte");
    one_line_error(
        run(&["--tenant", "/nonexistent/t.toml", &wat]),
        2,
        "cannot read --tenant /nonexistent/t.toml",
    );
}
