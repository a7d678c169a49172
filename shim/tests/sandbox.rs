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
    context::{Entrypoint, RuntimeContext, Source, WasmLayer},
};
use oci_spec::image::{Descriptor, Digest, MediaType};
use tensorwasm_shim::{PRECOMPILED_MAGIC, TensorWasmCompiler, TensorWasmSandbox};

mod common;

use common::{ECHO, HELLO_GPU};

/// A runtime context of the test's: the guest from a file, or from OCI
/// layers when there are some.
struct Ctx {
    args: Vec<String>,
    envs: Vec<String>,
    file: PathBuf,
    layers: Vec<WasmLayer>,
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
            source: if self.layers.is_empty() {
                Source::File(self.file.clone())
            } else {
                Source::Oci(&self.layers)
            },
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
    // TW_SHIM_LAYER: the guest as a layer the shim's compiler precompiled
    // (`precompiled`), or one whose compiled part is garbage (`garbage`).
    let layers = match std::env::var("TW_SHIM_LAYER").as_deref() {
        Ok(how) => {
            let wasm = std::fs::read(&file).expect("guest");
            let mut layer = TensorWasmCompiler::new()
                .expect("compiler")
                .bundle(&wasm)
                .expect("precompile");
            if how == "garbage" {
                let keep = PRECOMPILED_MAGIC.len() + 8 + wasm.len();
                layer.truncate(keep);
                layer.extend_from_slice(b"not a compiled module");
            }
            let config = Descriptor::new(
                MediaType::Other("application/wasm".into()),
                layer.len() as u64,
                Digest::try_from(format!("sha256:{}", "0".repeat(64))).expect("digest"),
            );
            vec![WasmLayer {
                config,
                precompiled: true,
                layer,
            }]
        }
        Err(_) => Vec::new(),
    };
    let ctx = Ctx {
        args,
        envs: split("TW_SHIM_ENVS"),
        file,
        layers,
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
    sandboxed_as(wasm, args, envs, None)
}

/// [`sandboxed`], the guest as a precompiled OCI layer (`layer`: see
/// [`child`]).
fn sandboxed_as(
    wasm: &str,
    args: &[&str],
    envs: &[&str],
    layer: Option<&str>,
) -> (i32, String, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("guest.wat");
    std::fs::write(&file, wasm).expect("guest");
    let mut child = Command::new(std::env::current_exe().expect("test binary"));
    if let Some(layer) = layer {
        child.env("TW_SHIM_LAYER", layer);
    }
    let out = child
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
fn a_precompiled_layer_runs_and_a_bad_one_is_compiled_instead() {
    for layer in ["precompiled", "garbage"] {
        let (code, stdout, stderr) = sandboxed_as(HELLO_GPU, &["65536"], &[], Some(layer));
        assert_eq!(code, 0, "{layer}: {stdout} {stderr}");
        // Its Wasm kernel was translated from the layer's Wasm.
        assert!(stdout.contains("all 65536 match"), "{layer}: {stdout}");
    }
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn with_a_gpu_the_pod_runs_on_cuda() {
    // From a file, and from a precompiled layer (its kernel translated
    // from the layer's Wasm and lowered to PTX).
    for layer in [None, Some("precompiled")] {
        let (code, stdout, stderr) =
            sandboxed_as(HELLO_GPU, &[], &["NVIDIA_VISIBLE_DEVICES=0"], layer);
        assert_eq!(code, 0, "{layer:?}: {stdout} {stderr}");
        assert!(
            stdout.contains("all 1048576 match") && !stdout.contains("on CPU"),
            "{layer:?}: {stdout}"
        );
    }
}
