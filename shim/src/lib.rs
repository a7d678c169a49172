//! `containerd-shim-tensorwasm-v1`: containerd runs a pod's Wasm entrypoint
//! as a TensorWasm guest, through runwasi's `containerd-shim-wasm` (which
//! manages the container's life, its namespaces and root file system, and
//! the OCI image's Wasm layers). This crate is what runs inside: the
//! [`Shim`] naming the runtime (`io.containerd.tensorwasm.v1`) and the
//! [`Sandbox`] that runs one guest with WASI and `wasi_cuda`.
//!
//! Each container is one untrusted tenant:
//!
//! - **the guest**: the image's single Wasm layer, or the file `argv[0]`
//!   names in the container; its function `_start`, or the one after `#`
//!   in `argv[0]` (`/app.wasm#main`, as other runwasi shims read it);
//! - **the GPU**: CUDA when the pod was given one (the NVIDIA device plugin
//!   sets `NVIDIA_VISIBLE_DEVICES` and puts the device nodes in the
//!   container; with CDI the device nodes alone say so; the driver's libraries are loaded by the shim before the
//!   container exists, [`preload_cuda`]), the CPU driver when it was not:
//!   a pod never reaches a GPU it did not ask for;
//! - **its quota**: the untrusted defaults (docs/tenants.md), or less:
//!   `TENSORWASM_QUOTA` in the container's environment holds the body of a
//!   `[quota]` table, set from a pod annotation through the downward API
//!   (runwasi hands the sandbox the container's argv and environment, not
//!   the OCI annotations); a quota above the defaults is refused;
//! - **WASI**: the container's argv and environment, its root file system
//!   as `/`, and its stdout and stderr (the pod's log);
//! - **start-up**: Wasm layers are precompiled once per node through
//!   runwasi's hook ([`TensorWasmCompiler`]), keeping their Wasm for
//!   kernel translation.
//!
//! docs/deploy.md shows the RuntimeClass, the pod and the node installer.

use std::{io::Write as _, path::PathBuf};

use anyhow::{Context, Result, bail};
use containerd_shim_wasm::{
    sandbox::{
        Sandbox,
        context::{RuntimeContext, Source, WasmLayer},
    },
    shim::{Compiler, Shim, Version, version},
};
use tensorwasm_embed::{
    component,
    kernel::GuestModule,
    run::{DEFAULT_MEMORY_LIMIT, DriverChoice, RunOptions, run_bytes, run_precompiled},
    runtime::GuestRuntime,
    tenant::TenantConfig,
    wasi::{DirAccess, OutputMode, PreopenDir},
};

/// The environment variable whose value is the body of a `[quota]` table
/// (docs/tenants.md), e.g. `device_bytes = 268435456`.
pub const QUOTA_ENV: &str = "TENSORWASM_QUOTA";

/// The shim: `containerd-shim-tensorwasm-v1`, runtime
/// `io.containerd.tensorwasm.v1`.
pub struct TensorWasmShim;

impl Shim for TensorWasmShim {
    type Sandbox = TensorWasmSandbox;

    fn name() -> &'static str {
        "tensorwasm"
    }

    fn version() -> Version {
        version!()
    }

    async fn compiler() -> Option<impl Compiler> {
        match TensorWasmCompiler::new() {
            Ok(c) => Some(c),
            Err(e) => {
                log::warn!("guests will be compiled when their containers start: {e:#}");
                None
            }
        }
    }
}

/// What a precompiled layer starts with; then the Wasm's length (u64,
/// little-endian), the Wasm (kernels are translated from it), and
/// wasmtime's compiled module.
pub const PRECOMPILED_MAGIC: &[u8; 8] = b"TWPRE001";

/// The largest Wasm layer the shim precompiles (16 MiB).
pub const MAX_PRECOMPILE_BYTES: usize = 16 << 20;

/// Compiles images' Wasm layers ahead of time, through runwasi's hook:
/// containerd keeps the result in its content store, keyed by this shim,
/// its version and the engine's settings, so a guest is compiled once per
/// node, not once per container. A layer that is not a module TensorWasm
/// runs is left as it is.
pub struct TensorWasmCompiler {
    engine: wasmtime::Engine,
}

impl TensorWasmCompiler {
    /// A compiler with the guests' engine (configured alike whatever the
    /// driver; the CPU driver's serves here).
    pub fn new() -> anyhow::Result<Self> {
        let driver = tensorwasm_cpu::CpuDriver::new()?;
        let runtime = GuestRuntime::new(driver, DEFAULT_MEMORY_LIMIT)
            .map_err(|e| anyhow::anyhow!("the guests' engine: {e:#}"))?;
        Ok(TensorWasmCompiler {
            engine: runtime.engine().clone(),
        })
    }

    /// `wasm` (a module, binary or text, or a component) precompiled, as a
    /// layer ([`PRECOMPILED_MAGIC`]).
    pub fn bundle(&self, wasm: &[u8]) -> anyhow::Result<Vec<u8>> {
        let compiled = if component::is_component_binary(wasm) {
            component::precompile_component(&self.engine, wasm)
        } else {
            GuestModule::precompile(&self.engine, wasm)
        }
        .map_err(|e| anyhow::anyhow!("precompiling: {e:#}"))?;
        let mut out = Vec::with_capacity(16 + wasm.len() + compiled.len());
        out.extend_from_slice(PRECOMPILED_MAGIC);
        out.extend_from_slice(&(wasm.len() as u64).to_le_bytes());
        out.extend_from_slice(wasm);
        out.extend_from_slice(&compiled);
        Ok(out)
    }
}

/// A precompiled layer's Wasm and compiled module, if `layer` is one.
pub fn unbundle(layer: &[u8]) -> Option<(&[u8], &[u8])> {
    let rest = layer.strip_prefix(PRECOMPILED_MAGIC.as_slice())?;
    let (len, rest) = rest.split_first_chunk::<8>()?;
    let len = usize::try_from(u64::from_le_bytes(*len)).ok()?;
    (len <= rest.len()).then(|| rest.split_at(len))
}

impl Compiler for TensorWasmCompiler {
    fn cache_key(&self) -> impl std::hash::Hash {
        (
            env!("CARGO_PKG_VERSION"),
            self.engine.precompile_compatibility_hash(),
        )
    }

    async fn compile(&self, layers: &[WasmLayer]) -> Result<Vec<Option<Vec<u8>>>> {
        Ok(layers
            .iter()
            .map(|l| {
                // The hook runs in the shim, outside the pod's cgroup: a
                // large layer is left to compile in the container, under
                // the pod's own limits.
                if l.precompiled || l.layer.len() > MAX_PRECOMPILE_BYTES {
                    return None;
                }
                self.bundle(&l.layer)
                    .inspect_err(|e| log::info!("layer not precompiled: {e:#}"))
                    .ok()
            })
            .collect())
    }
}

/// Runs one container's guest (see the module's documentation).
#[derive(Default)]
pub struct TensorWasmSandbox;

impl Sandbox for TensorWasmSandbox {
    async fn run_wasi(&self, ctx: &impl RuntimeContext) -> Result<i32> {
        let envs = ctx.envs();
        let entry = ctx.entrypoint();
        let bytes = entry.source.as_bytes().context("reading the guest")?;
        let precompiled = entry.source.is_precompiled().unwrap_or(false);
        let name = match &entry.source {
            Source::File(path) => path.clone(),
            Source::Oci(_) => PathBuf::from(entry.name.as_deref().unwrap_or("guest.wasm")),
        };
        let options = run_options(name, &entry.func, ctx.args(), envs, gpu_device_nodes())?;
        // `run_bytes` drives the guest on a runtime of its own; this
        // future already runs on the shim's, so the guest gets a thread.
        let run = || match unbundle(&bytes).filter(|_| precompiled) {
            // SAFETY: a layer runwasi marks precompiled is what
            // `TensorWasmCompiler::compile` made of the image's Wasm on
            // this node: containerd's content store, which only the node's
            // root writes, keyed by this shim and its engine's settings.
            Some((wasm, compiled)) => unsafe { run_precompiled(&options, wasm, compiled) },
            None => run_bytes(&options, &bytes),
        };
        let report = std::thread::scope(|s| s.spawn(run).join())
            .map_err(|_| anyhow::anyhow!("the guest's thread panicked"))?;
        match report {
            Ok(report) => {
                if let Some(why) = &report.cuda_unavailable
                    && options.driver == DriverChoice::Auto
                {
                    // The pod asked for a GPU and runs without one: say so
                    // in its log.
                    let _ = writeln!(
                        std::io::stderr(),
                        "tensorwasm: the pod was given a GPU, but CUDA is unavailable here ({why}); \
                         running on the CPU driver"
                    );
                }
                if options.invoke.is_some() {
                    // Straight to the container's stdout (the `println!`
                    // machinery may be redirected in a test harness).
                    let _ = writeln!(std::io::stdout(), "{}", report.results.join(" "));
                }
                log::info!(
                    "guest ended with {} on {} ({})",
                    report.exit_code,
                    report.driver.as_str(),
                    report.device
                );
                Ok(report.exit_code)
            }
            Err(e) => {
                // The pod's log says why; the exit code says whose fault.
                let _ = writeln!(std::io::stderr(), "tensorwasm: {e}");
                Ok(i32::from(e.exit_code()))
            }
        }
    }
}

/// The CUDA driver's libraries, loaded into the shim process while it still
/// sees the node's file system (the libraries `TENSORWASM_LIBCUDA` or the
/// loader's search finds); does nothing on a node without them. A Wasm
/// container's file system holds the guest and what the device plugin
/// mounts, not the C library the driver library links, so opening the
/// driver from inside it can fail; the guest's process, forked from this
/// one, finds the libraries already loaded instead.
pub fn preload_cuda() {
    let libcuda = std::env::var("TENSORWASM_LIBCUDA").unwrap_or_else(|_| "libcuda.so.1".into());
    // The driver's PTX compiler, which libcuda opens when it first JITs.
    for name in [libcuda.as_str(), "libnvidia-ptxjitcompiler.so.1"] {
        // SAFETY: loading runs the library's initializers: those of the
        // NVIDIA driver's own libraries, which touch no state of ours. The
        // handle is leaked, so nothing is unloaded while in use.
        match unsafe {
            libloading::os::unix::Library::open(
                Some(name),
                libloading::os::unix::RTLD_NOW | libloading::os::unix::RTLD_GLOBAL,
            )
        } {
            Ok(lib) => std::mem::forget(lib),
            Err(e) => log::debug!("not preloading {name}: {e}"),
        }
    }
}

/// How to run a container: its guest `name`, the function to call, its
/// argv (`argv[0]` the entrypoint) and environment (`KEY=VALUE`), and
/// whether it holds GPU device nodes ([`gpu_device_nodes`]).
pub fn run_options(
    name: PathBuf,
    func: &str,
    argv: &[String],
    envs: &[String],
    device_nodes: bool,
) -> Result<RunOptions> {
    let env: Vec<(String, String)> = envs
        .iter()
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let var = |key: &str| env.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str());
    Ok(RunOptions {
        guest: name,
        driver: driver_for(var("NVIDIA_VISIBLE_DEVICES"), device_nodes),
        invoke: (func != "_start").then(|| func.to_string()),
        args: argv.iter().skip(1).cloned().collect(),
        memory_limit: DEFAULT_MEMORY_LIMIT,
        tenant: Some(tenant(var(QUOTA_ENV))?),
        dirs: vec![PreopenDir {
            host: PathBuf::from("/"),
            guest: "/".into(),
            access: DirAccess::ReadWrite,
        }],
        env,
        compile_cache: None,
    })
}

/// CUDA (falling back to the CPU driver) when the pod was given a GPU,
/// the CPU driver when it was not. A GPU is given when the container holds
/// a GPU's device nodes (`device_nodes`: CDI puts them there, and sets
/// `NVIDIA_VISIBLE_DEVICES=void` to keep the legacy hook out), or by the
/// device plugin's `NVIDIA_VISIBLE_DEVICES` naming devices.
pub fn driver_for(nvidia_visible_devices: Option<&str>, device_nodes: bool) -> DriverChoice {
    if device_nodes {
        return DriverChoice::Auto;
    }
    match nvidia_visible_devices.map(str::trim) {
        None | Some("" | "void" | "none") => DriverChoice::Cpu,
        Some(_) => DriverChoice::Auto,
    }
}

/// Whether this process sees a GPU's device nodes (`/dev/nvidia0`, ...):
/// in a container, only one given a GPU does.
pub fn gpu_device_nodes() -> bool {
    std::fs::read_dir("/dev").is_ok_and(|dir| {
        dir.flatten().any(|e| {
            e.file_name()
                .to_str()
                .and_then(|n| n.strip_prefix("nvidia"))
                .is_some_and(|rest| !rest.is_empty() && rest.bytes().all(|b| b.is_ascii_digit()))
        })
    })
}

/// The container's tenant: untrusted, with the quota `quota` (the body of
/// a `[quota]` table) asks for, which may not exceed the untrusted
/// defaults; its output to the container's own stdout and stderr.
pub fn tenant(quota: Option<&str>) -> Result<TenantConfig> {
    let ceiling = TenantConfig::untrusted("pod");
    let mut config = match quota {
        None => ceiling.clone(),
        Some(body) => TenantConfig::from_toml(&format!("[quota]\n{body}\n"))
            .map_err(|e| anyhow::anyhow!("{QUOTA_ENV}: {e}"))?,
    };
    if let Some(what) = config.quota.first_above(&ceiling.quota) {
        bail!(
            "{QUOTA_ENV} asks for more {what} than an untrusted tenant may have (docs/tenants.md)"
        );
    }
    config.name = "pod".into();
    config.wasi.stdout = OutputMode::Inherit;
    config.wasi.stderr = OutputMode::Inherit;
    Ok(config)
}

#[cfg(test)]
mod tests {
    use tensorwasm_core::quota::Resource;

    use super::*;

    #[test]
    fn the_gpu_is_used_only_when_the_pod_was_given_one() {
        assert_eq!(driver_for(None, false), DriverChoice::Cpu);
        assert_eq!(driver_for(Some("void"), false), DriverChoice::Cpu);
        assert_eq!(driver_for(Some(""), false), DriverChoice::Cpu);
        assert_eq!(driver_for(Some("0"), false), DriverChoice::Auto);
        assert_eq!(
            driver_for(Some("GPU-6f5a3c2e-1b2c-4d5e-8f90-123456789abc"), false),
            DriverChoice::Auto
        );
        // CDI: device nodes, the variable `void` or absent.
        assert_eq!(driver_for(None, true), DriverChoice::Auto);
        assert_eq!(driver_for(Some("void"), true), DriverChoice::Auto);
    }

    #[test]
    fn a_pod_may_lower_its_quota_but_not_raise_it() {
        let t = tenant(Some("device_bytes = 1048576\nstreams = 1")).unwrap();
        assert_eq!(t.quota.limit(Resource::DeviceBytes), 1 << 20);
        assert_eq!(t.quota.limit(Resource::Streams), 1);
        assert!(!t.policy.raw_modules);
        let e = tenant(Some("device_bytes = 1099511627776")).unwrap_err();
        assert!(e.to_string().contains("device-buffer bytes"), "{e}");
        let e = tenant(Some("launch_time_ms = 100000000")).unwrap_err();
        assert!(e.to_string().contains("launch time"), "{e}");
        let e = tenant(Some("no_such_key = 1")).unwrap_err();
        assert!(e.to_string().contains(QUOTA_ENV), "{e}");
        // No quota asked for: the untrusted defaults.
        let t = tenant(None).unwrap();
        assert_eq!(t.quota, TenantConfig::untrusted("x").quota);
    }

    #[test]
    fn precompiled_layers_keep_their_wasm() {
        let compiler = TensorWasmCompiler::new().unwrap();
        let wasm = b"(module (func (export \"_start\")))";
        let layer = compiler.bundle(wasm).unwrap();
        let (w, compiled) = unbundle(&layer).unwrap();
        assert_eq!(w, wasm);
        // SAFETY: `compiled` is this engine's compilation of `w`, just made.
        assert!(unsafe { GuestModule::deserialize(&compiler.engine, w, compiled) }.is_ok());
        // SAFETY: wasmtime refuses what is not a compiled module at all.
        assert!(unsafe { GuestModule::deserialize(&compiler.engine, w, b"garbage") }.is_err());
        assert!(unbundle(b"\0asm\x01\0\0\0").is_none());
        // A length past the end is not a bundle.
        let mut bad = PRECOMPILED_MAGIC.to_vec();
        bad.extend_from_slice(&u64::MAX.to_le_bytes());
        assert!(unbundle(&bad).is_none());
        assert!(compiler.bundle(b"not wasm").is_err());
        // A component's layer too, which the component loader takes back.
        let wasm = wat::parse_str("(component (core module (memory 1)))").unwrap();
        let layer = compiler.bundle(&wasm).unwrap();
        let (w, compiled) = unbundle(&layer).unwrap();
        assert_eq!(w, wasm);
        // SAFETY: `compiled` is this engine's compilation of `w`, just made.
        let loaded = unsafe { component::deserialize_component(&compiler.engine, w, compiled) };
        assert!(loaded.unwrap().kernels().source().is_ok());
        // SAFETY: a module's compiled code is no component's: refused.
        let module = compiler.bundle(b"(module)").unwrap();
        let (w, compiled) = unbundle(&module).unwrap();
        assert!(
            unsafe { component::deserialize_component(&compiler.engine, w, compiled) }.is_err()
        );
    }

    #[test]
    fn a_precompiled_component_layer_runs() {
        let compiler = TensorWasmCompiler::new().unwrap();
        let command = |result: i32| {
            wat::parse_str(format!(
                r#"(component
                     (core module $m (func (export "run") (result i32) i32.const {result}))
                     (core instance $i (instantiate $m))
                     (func $run (result (result)) (canon lift (core func $i "run")))
                     (instance $r (export "run" (func $run)))
                     (export "wasi:cli/run@0.2.0" (instance $r)))"#
            ))
            .unwrap()
        };
        let argv = ["/app.wasm".to_string()];
        let options = run_options("/app.wasm".into(), "_start", &argv, &[], false).unwrap();
        for (result, code) in [(0, 0), (1, 1)] {
            let layer = compiler.bundle(&command(result)).unwrap();
            let (wasm, compiled) = unbundle(&layer).unwrap();
            // SAFETY: `compiled` is this engine's compilation of `wasm`.
            let report = unsafe { run_precompiled(&options, wasm, compiled) }.unwrap();
            assert_eq!(report.exit_code, code);
        }
        // What is no compiled code at all is refused and the component
        // compiled afresh: it still runs.
        // SAFETY: wasmtime refuses what is not a compiled artifact.
        let report = unsafe { run_precompiled(&options, &command(1), b"garbage") }.unwrap();
        assert_eq!(report.exit_code, 1);
    }

    #[test]
    fn options_carry_argv_env_and_the_function() {
        let argv = ["/app.wasm".to_string(), "a".into(), "b".into()];
        let envs = ["A=1".to_string(), "NVIDIA_VISIBLE_DEVICES=0".into()];
        let o = run_options("/app.wasm".into(), "_start", &argv, &envs, false).unwrap();
        assert_eq!(o.args, ["a", "b"]);
        assert_eq!(o.invoke, None);
        assert_eq!(o.driver, DriverChoice::Auto);
        assert!(o.env.contains(&("A".into(), "1".into())));
        let o = run_options("/app.wasm".into(), "main", &argv, &[], false).unwrap();
        assert_eq!(o.invoke.as_deref(), Some("main"));
        assert_eq!(o.driver, DriverChoice::Cpu);
    }
}
