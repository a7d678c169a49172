//! `tensorwasm devices` end to end: the real binary, as a user runs it.

use std::process::Command;

fn tensorwasm() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tensorwasm"))
}

#[test]
fn devices_lists_both_drivers_and_the_auto_choice() {
    let out = tensorwasm()
        .arg("devices")
        .output()
        .expect("run tensorwasm");
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("cpu: 1 device(s)"), "{text}");
    assert!(text.lines().any(|l| l.starts_with("cuda: ")), "{text}");
    assert!(text.contains("auto picks: "), "{text}");
}

#[test]
fn missing_libcuda_is_reported_with_its_reason() {
    let out = tensorwasm()
        .arg("devices")
        .env("TENSORWASM_LIBCUDA", "/nonexistent/libcuda.so.1")
        .output()
        .expect("run tensorwasm");
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains(
            "cuda: unavailable: cannot load the CUDA driver library `/nonexistent/libcuda.so.1`"
        ),
        "{text}"
    );
    assert!(text.ends_with("auto picks: cpu\n"), "{text}");
}

#[test]
fn unknown_commands_fail_with_usage() {
    let out = tensorwasm()
        .arg("frobnicate")
        .output()
        .expect("run tensorwasm");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains("unknown command `frobnicate`") && err.contains("usage:"),
        "{err}"
    );
}

/// `tensorwasm run` from the workspace root, as the examples' comments show.
fn run_guest(args: &[&str]) -> std::process::Output {
    tensorwasm()
        .arg("run")
        .args(args)
        .current_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
        .output()
        .expect("run tensorwasm")
}

#[test]
fn run_vector_add_on_the_cpu_driver() {
    let out = run_guest(&["examples/vector_add.wat", "--driver", "cpu", "4096"]);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert_eq!(stdout, "0\n", "{stderr}");
    assert!(stderr.contains("tensorwasm: driver cpu (CPU ("), "{stderr}");
    assert!(!stderr.contains("last wasi_cuda error"), "{stderr}");
}

#[test]
fn run_names_a_missing_export() {
    let out = run_guest(&[
        "examples/vector_add.wat",
        "--driver",
        "cpu",
        "--invoke",
        "no_such_function",
        "1",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(out.stdout.is_empty(), "{out:?}");
    assert!(
        stderr.contains("the guest exports no function `no_such_function`"),
        "{stderr}"
    );
}

#[test]
fn run_names_a_bad_argument() {
    let out = run_guest(&["examples/vector_add.wat", "--driver", "cpu", "lots"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("argument 0 of `run`") && stderr.contains("`lots` is not a valid i32"),
        "{stderr}"
    );
    // The wrong number of arguments names the function and the count.
    let out = run_guest(&["examples/vector_add.wat", "--driver", "cpu", "1", "2"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("`run` takes 1 argument(s), 2 given"),
        "{stderr}"
    );
    // An out-of-range integer names the argument too.
    let out = run_guest(&["examples/vector_add.wat", "--driver", "cpu", "4294967296"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("argument 0 of `run`") && stderr.contains("out of range for 32 bits"),
        "{stderr}"
    );
}

#[test]
fn an_untrusted_tenant_runs_wasm_kernels_but_not_raw_ptx() {
    let tenant = "examples/untrusted-tenant.toml";
    let out = run_guest(&[
        "examples/wasm_kernels.wat",
        "--driver",
        "cpu",
        "--tenant",
        tenant,
        "4096",
    ]);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert_eq!(stdout, "0\n", "{stderr}");
    // vector_add.wat loads raw PTX: the guest sees EPERM (17) and says so.
    let out = run_guest(&[
        "examples/vector_add.wat",
        "--driver",
        "cpu",
        "--tenant",
        tenant,
        "4096",
    ]);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_ne!(
        stdout, "0\n",
        "raw PTX ran for an untrusted tenant: {stderr}"
    );
    assert!(
        stderr.contains("module_load_ptx: EPERM: this tenant's policy does not allow raw PTX"),
        "{stderr}"
    );
}

#[test]
fn a_bad_tenant_file_is_refused_before_anything_runs() {
    let dir = std::env::temp_dir().join(format!("tensorwasm-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("bad.toml");
    std::fs::write(&bad, "[quota]\ndevice_byte = 1\n").unwrap();
    let out = run_guest(&[
        "examples/vector_add.wat",
        "--driver",
        "cpu",
        "--tenant",
        bad.to_str().unwrap(),
        "1",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("device_byte"), "{stderr}");
    assert!(out.stdout.is_empty());
}
