//! The shim's sandbox run directly, without containerd or a container:
//! `Sandbox::run_wasi` with a runtime context of the test's (argv,
//! environment, the entrypoint), in a child process so its stdout can be
//! read: args and env reach the guest, the quota from `TENSORWASM_QUOTA`,
//! the CPU driver without a GPU, and with `NVIDIA_VISIBLE_DEVICES` a GPU
//! guest on CUDA (the ignored GPU test). `container.rs` runs the same
//! sandbox in containers.

use std::{path::PathBuf, process::Command};

use containerd_shim_wasm::sandbox::{
    Sandbox,
    context::{Entrypoint, RuntimeContext, Source},
};
use tensorwasm_shim::TensorWasmSandbox;

mod common;

use common::{ECHO, HELLO_GPU};

/// A runtime context of the test's.
struct Ctx {
    args: Vec<String>,
    envs: Vec<String>,
    file: PathBuf,
}

impl RuntimeContext for Ctx {
    fn args(&self) -> &[String] {
        &self.args
    }
    fn envs(&self) -> &[String] {
        &self.envs
    }
    fn entrypoint(&self) -> Entrypoint<'_> {
        Entrypoint {
            func: "_start".into(),
            name: Some("guest".into()),
            arg0: Some(&self.file),
            source: Source::File(self.file.clone()),
        }
    }
}

/// The child's side: runs the sandbox on `TW_SHIM_CHILD`'s guest file with
/// `TW_SHIM_ARGS` and `TW_SHIM_ENVS` (`;`-separated) and exits with its
/// code.
#[test]
fn child() {
    let Ok(file) = std::env::var("TW_SHIM_CHILD") else {
        return;
    };
    let split = |key: &str| -> Vec<String> {
        std::env::var(key)
            .unwrap_or_default()
            .split(';')
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect()
    };
    let file = PathBuf::from(file);
    let args = std::iter::once(file.display().to_string())
        .chain(split("TW_SHIM_ARGS"))
        .collect();
    let ctx = Ctx {
        args,
        envs: split("TW_SHIM_ENVS"),
        file,
    };
    let rt = tokio_runtime();
    let code = rt
        .block_on(TensorWasmSandbox.run_wasi(&ctx))
        .expect("run_wasi");
    std::process::exit(code);
}

fn tokio_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

/// Runs the sandbox on `wasm` in a child process: (exit code, stdout,
/// stderr).
fn sandboxed(wasm: &str, args: &[&str], envs: &[&str]) -> (i32, String, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("guest.wat");
    std::fs::write(&file, wasm).expect("guest");
    let out = Command::new(std::env::current_exe().expect("test binary"))
        .args(["--exact", "child", "--nocapture", "--test-threads=1"])
        .env("TW_SHIM_CHILD", &file)
        .env("TW_SHIM_ARGS", args.join(";"))
        .env("TW_SHIM_ENVS", envs.join(";"))
        .output()
        .expect("child");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn args_and_env_reach_the_guest() {
    let (code, stdout, stderr) = sandboxed(ECHO, &["one", "two"], &["COLOUR=blue", "N=3"]);
    assert_eq!(code, 7, "{stdout} {stderr}");
    assert!(
        stdout.contains("guest.wat\none\ntwo\nCOLOUR=blue\nN=3\n"),
        "{stdout}"
    );
}

#[test]
fn a_quota_above_the_untrusted_defaults_is_refused() {
    let (code, stdout, stderr) = sandboxed(
        ECHO,
        &[],
        &["TENSORWASM_QUOTA=device_bytes = 1099511627776"],
    );
    assert_ne!(code, 0, "{stdout} {stderr}");
    assert!(stderr.contains("device-buffer bytes"), "{stderr}");
    assert!(!stdout.contains("guest.wat"), "the guest ran: {stdout}");
    // A lower quota is taken: the GPU guest's buffers fit in 64 MiB.
    let (code, stdout, stderr) = sandboxed(
        HELLO_GPU,
        &["4096"],
        &["TENSORWASM_QUOTA=device_bytes = 67108864\nstreams = 1"],
    );
    assert_eq!(code, 0, "{stdout} {stderr}");
    assert!(stdout.contains("all 4096 match"), "{stdout}");
}

#[test]
fn without_a_gpu_the_pod_runs_on_the_cpu_driver() {
    let (code, stdout, stderr) = sandboxed(HELLO_GPU, &["65536"], &[]);
    assert_eq!(code, 0, "{stdout} {stderr}");
    assert!(stdout.contains("all 65536 match"), "{stdout}");
    // Outside a container the machine's own GPU device nodes count as
    // given (container.rs has the pod without a GPU on every machine).
    let on_cpu = stdout.contains("by a Wasm kernel on CPU");
    assert_eq!(on_cpu, !tensorwasm_shim::gpu_device_nodes(), "{stdout}");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn with_a_gpu_the_pod_runs_on_cuda() {
    let (code, stdout, stderr) = sandboxed(HELLO_GPU, &[], &["NVIDIA_VISIBLE_DEVICES=0"]);
    assert_eq!(code, 0, "{stdout} {stderr}");
    assert!(
        stdout.contains("all 1048576 match") && !stdout.contains("on CPU"),
        "{stdout}"
    );
}
