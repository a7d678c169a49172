//! The shim's sandbox in containers, by runwasi's own harness
//! (`containerd_shim_wasm::testing::WasiTest`: youki's libcontainer makes
//! the container from an OCI bundle, the shim's executor runs the guest in
//! it): exit codes, stdout and stderr, a GPU guest's result (on the CPU
//! driver: the harness's spec gives the container no
//! NVIDIA_VISIBLE_DEVICES, so no GPU), and WASI 0.2 components (the guest
//! workspace's, which scripts/test.sh builds): hello world, and the GPU
//! component's MLP through `tensorwasm:gpu`. Needs root, as containers do, and a
//! containerd to connect to (the harness asks it for the image's layers;
//! scripts/test.sh starts one); skipped with a note otherwise.

use std::{
    sync::{Mutex, PoisonError},
    time::Duration,
};

use containerd_shim_wasm::testing::WasiTest;
use tensorwasm_shim::TensorWasmShim;

mod common;

use common::{ECHO, HELLO_GPU};

const TRAP: &str = r#"(module (func (export "_start") unreachable))"#;

/// Where runwasi's harness finds containerd.
const CONTAINERD: &str = "/run/containerd/containerd.sock";

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Runs `wasm` in a container named `name` by runwasi's harness: (exit
/// code, stdout, stderr); `None` where containers cannot be made (not
/// root). One container at a time (the harness's cgroups are per name, its
/// containerd namespace shared).
fn in_container(name: &str, wasm: impl AsRef<[u8]>) -> Option<(u32, String, String)> {
    static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
    if !is_root() {
        eprintln!("skipped: runwasi's harness makes containers, which needs root");
        return None;
    }
    if !std::path::Path::new(CONTAINERD).exists() {
        eprintln!("skipped: no containerd at {CONTAINERD} (scripts/test.sh starts one)");
        return None;
    }
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(PoisonError::into_inner);
    let test = WasiTest::<TensorWasmShim>::builder()
        .map(|b| b.with_name(name))
        .and_then(|b| b.with_wasm(wasm.as_ref()))
        .and_then(|b| b.build())
        .expect("the container");
    test.start().expect("start");
    Some(test.wait(Duration::from_secs(120)).expect("wait"))
}

#[test]
fn container_a_gpu_guest_runs_and_checks_its_result() {
    let Some((code, stdout, stderr)) = in_container("tw-hello-gpu", HELLO_GPU) else {
        return;
    };
    assert_eq!(code, 0, "stdout {stdout:?} stderr {stderr:?}");
    assert!(
        stdout.contains("vector add of 1048576 floats by a Wasm kernel on CPU")
            && stdout.contains("all 1048576 match"),
        "{stdout:?} {stderr:?}"
    );
}

#[test]
fn container_exit_codes_and_stdout() {
    let Some((code, stdout, _)) = in_container("tw-echo", ECHO) else {
        return;
    };
    // argv[0] is the entrypoint's file name; the environment is the
    // harness's spec's (PATH and TERM).
    assert_eq!(code, 7, "{stdout}");
    assert!(stdout.starts_with("hello.wasm\nPATH="), "{stdout:?}");
    let errw = r#"(module
  (import "wasi_snapshot_preview1" "fd_write" (func $write (param i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (data (i32.const 64) "to stderr\n")
  (func (export "_start")
    (i32.store (i32.const 0) (i32.const 64))
    (i32.store (i32.const 4) (i32.const 10))
    (drop (call $write (i32.const 2) (i32.const 0) (i32.const 1) (i32.const 8)))))"#;
    let Some((code, stdout, stderr)) = in_container("tw-stderr", errw) else {
        return;
    };
    assert_eq!(
        (code, stdout.as_str(), stderr.as_str()),
        (0, "", "to stderr\n")
    );
    let Some((code, stdout, stderr)) = in_container("tw-trap", TRAP) else {
        return;
    };
    assert_eq!(code, 1, "{stdout:?} {stderr:?}");
    assert!(stderr.contains("unreachable"), "{stdout:?} {stderr:?}");
}

/// A built component of the guest workspace: `$VAR` when set, else
/// `guest/target/wasm32-wasip2/release/FILE`.
fn component(var: &str, file: &str) -> Vec<u8> {
    let path = std::env::var_os(var)
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("../guest/target/wasm32-wasip2/release")
                .join(file)
        });
    std::fs::read(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (build the guests first: scripts/test.sh)",
            path.display()
        )
    })
}

#[test]
fn container_components_run() {
    let cli = component("WASIP2_CLI_GUEST_WASM", "wasip2-cli.wasm");
    let Some((code, stdout, stderr)) = in_container("tw-component", &cli) else {
        return;
    };
    assert_eq!(
        (code, stdout.as_str(), stderr.as_str()),
        (0, "hello from a component\n", "to stderr\n")
    );
    // The GPU component's default mode: the MLP on buffers and built-in
    // ops, checked against its own CPU computation.
    let gpu = component("GPU_COMPONENT_GUEST_WASM", "gpu-component.wasm");
    let Some((code, stdout, stderr)) = in_container("tw-gpu-component", &gpu) else {
        return;
    };
    assert_eq!(code, 0, "stdout {stdout:?} stderr {stderr:?}");
    assert!(
        stdout.contains("mlp ok: batch 5, 37 -> 67 -> 10, largest error "),
        "{stdout:?} {stderr:?}"
    );
}
