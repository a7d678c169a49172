//! `tensorwasm run`: load a guest (`.wasm` or `.wat`), pick a driver, and
//! run it as `wasmtime run` would: a WASI 0.2 component's `wasi:cli/run`
//! ([`crate::component`]), a WASI command's `_start` with its argv,
//! environment, preopened directories and stdio, or one exported function
//! (`--invoke`) with arguments from the command line. Reports its exit code
//! and results, or which guest function and which `wasi_cuda` call failed;
//! bad input is a one-line [`RunError`] that says whose fault it was.

use std::{
    fmt,
    io::Write as _,
    path::{Path, PathBuf},
    time::Instant,
};

use tensorwasm_core::{DriverKind, ManagedAllocator};
use tensorwasm_cpu::CpuDriver;
use tensorwasm_cuda::CudaDriver;
use wasmtime::{ExternType, Val, ValType};

use crate::{
    component::ComponentError,
    runtime::GuestRuntime,
    tenant::{Tenant, TenantConfig},
    twins,
    wasi::{GuestOutput, I32Exit, OutputMode, PreopenDir},
};
/// Which driver `run` uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DriverChoice {
    /// CUDA when a GPU is there, else the CPU driver.
    Auto,
    /// CUDA or an error.
    Cuda,
    /// The CPU driver.
    Cpu,
}

/// What to run.
#[derive(Clone, Debug)]
pub struct RunOptions {
    /// The guest file.
    pub guest: PathBuf,
    /// The driver.
    pub driver: DriverChoice,
    /// The exported function to call, its parameters parsed from `args`;
    /// `None`: the WASI command's `_start`.
    pub invoke: Option<String>,
    /// The guest's arguments: its argv after `argv[0]` (the guest file's
    /// name), and with `invoke` also the function's parameters.
    pub args: Vec<String>,
    /// The most bytes one guest memory may reserve.
    pub memory_limit: usize,
    /// The tenant the guest runs as (`--tenant FILE`): its quota, policy,
    /// guest fuel and WASI capabilities. `None`: a trusted tenant (the user
    /// runs their own code) with the host's stdio.
    pub tenant: Option<TenantConfig>,
    /// Directories preopened for the guest on top of the tenant's
    /// (`--dir`, read-write as in `wasmtime run`).
    pub dirs: Vec<PreopenDir>,
    /// Environment variables for the guest on top of the tenant's (`--env`).
    pub env: Vec<(String, String)>,
    /// Keep the compiled guest in this directory and load it from there
    /// when it is there (`--compile-cache`,
    /// [`GuestRuntime::with_compile_cache`]); `None`: compile every time.
    pub compile_cache: Option<PathBuf>,
}

/// The default per-guest memory limit: the whole 32-bit address space.
pub const DEFAULT_MEMORY_LIMIT: usize = 4 << 30;

/// What a run did.
#[derive(Clone, Debug)]
pub struct RunReport {
    /// The driver used.
    pub driver: DriverKind,
    /// The device's name.
    pub device: String,
    /// Why `auto` did not pick CUDA, when it did not.
    pub cuda_unavailable: Option<String>,
    /// The invoked function's results, formatted (none for `_start`).
    pub results: Vec<String>,
    /// The guest's exit code: what it passed to WASI's `proc_exit`, 0 when
    /// it returned.
    pub exit_code: i32,
    /// The guest's last `wasi_cuda` error, if any call failed.
    pub last_error: Option<String>,
}

/// Whose fault a failed run was: it decides the command's exit code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunErrorKind {
    /// The command line asked for something that cannot be: an unreadable
    /// guest file, tenant file or `--dir`, a missing `_start` or export, a
    /// wrong argument count or type, a component with no `wasi:cli/run`.
    /// Exit code 2.
    Usage,
    /// The guest or the host failed: not a Wasm module or component, one
    /// that does not instantiate, a trap, a driver error. Exit code 1.
    Guest,
}

/// Why a run failed, in one line (a trap adds wasmtime's backtrace).
#[derive(Debug)]
pub struct RunError {
    /// Whose fault it was.
    pub kind: RunErrorKind,
    /// What went wrong.
    pub message: String,
}

impl RunError {
    /// The exit code `tensorwasm run` ends with: 2 for usage errors, 1 for
    /// guest failures.
    pub fn exit_code(&self) -> u8 {
        match self.kind {
            RunErrorKind::Usage => 2,
            RunErrorKind::Guest => 1,
        }
    }
}

impl fmt::Display for RunError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for RunError {}

fn usage(message: impl Into<String>) -> RunError {
    RunError {
        kind: RunErrorKind::Usage,
        message: message.into(),
    }
}

fn guest_err(message: impl Into<String>) -> RunError {
    RunError {
        kind: RunErrorKind::Guest,
        message: message.into(),
    }
}

/// Joins a multi-line error (wasmtime's and wat's) into one line.
pub(crate) fn one_line(text: &str) -> String {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join("; ")
}

/// A guest file's binary: a core module or a component.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GuestBinary {
    /// A core Wasm module (WASI preview 1, `wasi_cuda`).
    Module(Vec<u8>),
    /// A component (WASI 0.2 and the `tensorwasm:gpu` WIT package).
    Component(Vec<u8>),
}

/// The guest file as a Wasm binary (a core module or a component), or why
/// it is not one.
pub fn guest_binary(path: &Path, bytes: &[u8]) -> Result<GuestBinary, RunError> {
    let name = path.display();
    let wasm = match wat::Detect::from_bytes(bytes) {
        wat::Detect::WasmBinary => bytes.to_vec(),
        wat::Detect::WasmText => {
            let text = std::str::from_utf8(bytes).unwrap_or_default();
            wat::parse_str(text).map_err(|e| {
                // wat's message, then a `--> file:line:col` line and a snippet.
                let shown = e.to_string();
                let mut lines = shown.lines();
                let message = lines.next().unwrap_or("invalid WAT").trim();
                let at = lines
                    .find_map(|l| l.trim().strip_prefix("--> "))
                    .and_then(|loc| {
                        let mut parts = loc.rsplitn(3, ':');
                        let (col, line) = (parts.next()?, parts.next()?);
                        Some(format!("line {line}, column {col}"))
                    });
                match at {
                    Some(at) => guest_err(format!("{name}: invalid WAT at {at}: {message}")),
                    None => guest_err(format!("{name}: invalid WAT: {message}")),
                }
            })?
        }
        wat::Detect::Unknown => {
            return Err(guest_err(format!(
                "{name} is neither a Wasm module (no `\\0asm` header) nor WAT text"
            )));
        }
    };
    if wasm.len() < 8 {
        return Err(guest_err(format!(
            "{name} is truncated: {} bytes, shorter than a Wasm header",
            wasm.len()
        )));
    }
    match [wasm[4], wasm[5], wasm[6], wasm[7]] {
        [1, 0, 0, 0] => Ok(GuestBinary::Module(wasm)),
        // A component's version field is 0x0d, its layer 1.
        [0x0d, 0, 1, 0] => Ok(GuestBinary::Component(wasm)),
        [v0, v1, 1, 0] => Err(guest_err(format!(
            "{name}: unsupported Wasm component version {}",
            u16::from_le_bytes([v0, v1])
        ))),
        [v0, v1, _, _] => Err(guest_err(format!(
            "{name}: unsupported Wasm version {}",
            u16::from_le_bytes([v0, v1])
        ))),
    }
}

/// Runs a guest as `tensorwasm run` does, on a tokio runtime of its own
/// (wasmtime-wasi's I/O and clocks need one). A guest whose tenant captures
/// its output has it replayed on this process's stdout and stderr when it
/// ends.
pub fn run(options: &RunOptions) -> Result<RunReport, RunError> {
    let bytes = std::fs::read(&options.guest)
        .map_err(|e| usage(format!("cannot read {}: {e}", options.guest.display())))?;
    run_bytes(options, &bytes)
}

/// [`run`] of a guest already in memory, `bytes` (Wasm or WAT);
/// `options.guest` only names it (argv\[0\], messages). What the
/// containerd shim runs from an image's layer.
pub fn run_bytes(options: &RunOptions, bytes: &[u8]) -> Result<RunReport, RunError> {
    run_inner(options, bytes, None)
}

/// [`run_bytes`] with the guest already compiled: `precompiled` is
/// [`GuestModule::precompile`](crate::kernel::GuestModule::precompile) of
/// `bytes` by a [`GuestRuntime`]'s engine (any driver: their engines are
/// configured alike). Precompiled code that wasmtime refuses (another
/// version or configuration) is logged and the guest compiled instead.
///
/// # Safety
///
/// `precompiled` must be that compilation of `bytes`, unaltered: its code
/// runs as it is ([`GuestModule::deserialize`](crate::kernel::GuestModule::deserialize)).
pub unsafe fn run_precompiled(
    options: &RunOptions,
    bytes: &[u8],
    precompiled: &[u8],
) -> Result<RunReport, RunError> {
    run_inner(options, bytes, Some(precompiled))
}

fn run_inner(
    options: &RunOptions,
    bytes: &[u8],
    precompiled: Option<&[u8]>,
) -> Result<RunReport, RunError> {
    let wasm = guest_binary(&options.guest, bytes)?;
    let config = tenant_config(options)?;
    let tokio = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| guest_err(format!("starting the I/O runtime: {e}")))?;
    match choose_driver(options.driver)? {
        Chosen::Cuda(driver) => {
            tokio.block_on(run_on(driver, &wasm, precompiled, options, config, None))
        }
        Chosen::Cpu(driver, why) => {
            tokio.block_on(run_on(driver, &wasm, precompiled, options, config, why))
        }
    }
}

/// The most one guest memory may reserve on a device with `free` bytes
/// free: `limit`, at most half of them. Reserving is cheap (managed memory
/// is populated lazily) but a reservation above what the device has free
/// is refused.
pub fn memory_cap(limit: usize, free: u64) -> usize {
    limit.min(usize::try_from(free / 2).unwrap_or(usize::MAX))
}

/// The driver a [`DriverChoice`] gets.
pub enum Chosen {
    /// The CUDA driver on device 0.
    Cuda(CudaDriver),
    /// The CPU driver (its PTX twins registered), with why CUDA was not
    /// used when `auto` fell back to it.
    Cpu(CpuDriver, Option<String>),
}

/// Starts the driver `choice` asks for: `auto` falls back to the CPU
/// driver when CUDA is unavailable, `cuda` fails then.
pub fn choose_driver(choice: DriverChoice) -> Result<Chosen, RunError> {
    let cuda = match choice {
        DriverChoice::Cpu => Err("the CPU driver was asked for".to_string()),
        DriverChoice::Auto | DriverChoice::Cuda => CudaDriver::new(0).map_err(|e| e.to_string()),
    };
    match cuda {
        Ok(driver) => Ok(Chosen::Cuda(driver)),
        Err(why) if choice == DriverChoice::Cuda => {
            tracing::error!(%why, "the CUDA driver is unavailable");
            Err(guest_err(format!("the CUDA driver is unavailable: {why}")))
        }
        Err(why) => {
            let driver =
                CpuDriver::new().map_err(|e| guest_err(format!("starting the CPU driver: {e}")))?;
            twins::register(&driver);
            let why = (choice == DriverChoice::Auto).then_some(why);
            if let Some(why) = &why {
                tracing::info!(%why, "CUDA unavailable; using the CPU driver");
            }
            Ok(Chosen::Cpu(driver, why))
        }
    }
}

/// The tenant the guest runs as, with the command line's argv, environment
/// and directories added; every directory is checked to open.
fn tenant_config(options: &RunOptions) -> Result<TenantConfig, RunError> {
    let mut config = options
        .tenant
        .clone()
        .unwrap_or_else(|| TenantConfig::trusted("guest"));
    // argv[0] is the guest file's name without its directories, as
    // `wasmtime run` gives it (no host path leaks into the guest).
    let argv0 = options
        .guest
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| options.guest.display().to_string());
    config.wasi.args = std::iter::once(argv0)
        .chain(options.args.iter().cloned())
        .collect();
    config.wasi.env.extend(options.env.iter().cloned());
    config.wasi.dirs.extend(options.dirs.iter().cloned());
    for dir in &config.wasi.dirs {
        std::fs::read_dir(&dir.host).map_err(|e| {
            usage(format!(
                "--dir {}::{}: cannot open {}: {e}",
                dir.host.display(),
                dir.guest,
                dir.host.display()
            ))
        })?;
    }
    Ok(config)
}

fn exports_list(module: &wasmtime::Module) -> String {
    let names: Vec<&str> = module
        .exports()
        .filter(|e| matches!(e.ty(), ExternType::Func(_)))
        .map(|e| e.name())
        .collect();
    if names.is_empty() {
        "it exports no function".into()
    } else {
        format!("it exports {}", names.join(", "))
    }
}

/// `precompiled`: see [`run_precompiled`], whose promise it carries.
async fn run_on<D>(
    driver: D,
    guest: &GuestBinary,
    precompiled: Option<&[u8]>,
    options: &RunOptions,
    config: TenantConfig,
    cuda_unavailable: Option<String>,
) -> Result<RunReport, RunError>
where
    D: crate::kernel::KernelTarget + ManagedAllocator + Clone + 'static,
    <D as ManagedAllocator>::Region: Sync,
{
    let free = driver
        .mem_info()
        .map_err(|e| guest_err(format!("asking the device for free memory: {e}")))?
        .free;
    let limit = memory_cap(options.memory_limit, free);
    let kind = driver.kind();
    let device = driver.device().name.clone();
    tracing::info!(driver = kind.as_str(), %device, "driver chosen");
    let runtime = match &options.compile_cache {
        Some(dir) => GuestRuntime::with_compile_cache(driver, limit, dir),
        None => GuestRuntime::new(driver, limit),
    }
    .map_err(|e| guest_err(one_line(&format!("{e:#}"))))?;
    let name = options.guest.display();
    let wasm = match guest {
        GuestBinary::Module(wasm) => wasm,
        GuestBinary::Component(wasm) => {
            if options.invoke.is_some() {
                return Err(usage(format!(
                    "{name} is a component: --invoke calls a core module's export; \
                     a component runs its `wasi:cli/run`"
                )));
            }
            let shown = name.to_string();
            // SAFETY: `precompiled` is `wasm`'s compilation, as
            // `run_precompiled`'s caller promised.
            let run = unsafe {
                crate::component::run_command(&runtime, wasm, precompiled, &shown, &config)
            }
            .await
            .map_err(|e| match e {
                ComponentError::NotACommand(m) => usage(m),
                ComponentError::Guest(m) => guest_err(m),
            })?;
            replay_captured(&run.output, &config.name, &config);
            let exit_code = run.outcome.map_err(|mut message| {
                if let Some(last) = &run.last_error {
                    message.push_str(&format!("\nlast GPU error: {last}"));
                }
                guest_err(message)
            })?;
            return Ok(RunReport {
                driver: kind,
                device,
                cuda_unavailable,
                results: Vec::new(),
                exit_code,
                last_error: run.last_error,
            });
        }
    };
    let started = Instant::now();
    let loaded = precompiled.and_then(|p| {
        // SAFETY: `precompiled` is `wasm`'s compilation, as
        // `run_precompiled`'s caller promised.
        let module = unsafe { crate::kernel::GuestModule::deserialize(runtime.engine(), wasm, p) };
        match module {
            Ok(module) => Some(module),
            Err(e) => {
                tracing::warn!(error = %one_line(&format!("{e:#}")), "precompiled guest refused; compiling it");
                None
            }
        }
    });
    let module = match loaded {
        Some(module) => module,
        None => runtime
            .compile(wasm)
            .map_err(|e| guest_err(format!("compiling {name}: {}", one_line(&format!("{e:#}")))))?,
    };
    tracing::info!(guest = %name, bytes = wasm.len(), elapsed = ?started.elapsed(), precompiled = precompiled.is_some(), "guest module compiled");
    // Which function, and its arguments, before anything is instantiated.
    let (func_name, params) = match &options.invoke {
        Some(f) => match module.get_export(f) {
            Some(ExternType::Func(ty)) => (f.clone(), ty.params().collect::<Vec<ValType>>()),
            _ => {
                return Err(usage(format!(
                    "{name} exports no function `{f}` ({})",
                    exports_list(&module)
                )));
            }
        },
        None => match module.get_export("_start") {
            Some(ExternType::Func(ty)) if ty.params().len() == 0 => ("_start".into(), Vec::new()),
            Some(_) => {
                return Err(usage(format!(
                    "{name}: `_start` is not a function without parameters"
                )));
            }
            None => {
                return Err(usage(format!(
                    "{name} exports no `_start` (it is not a WASI command); \
                     call one of its functions with --invoke NAME ({})",
                    exports_list(&module)
                )));
            }
        },
    };
    let args = if options.invoke.is_some() {
        if params.len() != options.args.len() {
            return Err(usage(format!(
                "`{func_name}` takes {} argument(s), {} given",
                params.len(),
                options.args.len()
            )));
        }
        params
            .iter()
            .zip(&options.args)
            .enumerate()
            .map(|(i, (ty, text))| {
                parse_arg(ty, text)
                    .map_err(|e| usage(format!("argument {i} of `{func_name}`: {e}")))
            })
            .collect::<Result<Vec<Val>, RunError>>()?
    } else {
        Vec::new()
    };
    let mut tenant =
        Tenant::new(&runtime, &config).map_err(|e| guest_err(one_line(&format!("{e:#}"))))?;
    let instance = tenant.instantiate(&runtime, &module).await.map_err(|e| {
        guest_err(format!(
            "instantiating {name}: {}",
            one_line(&format!("{e:#}"))
        ))
    })?;
    let store = tenant.store_mut();
    let func = instance
        .get_func(&mut *store, &func_name)
        .ok_or_else(|| guest_err(format!("{name} lost its export `{func_name}`")))?;
    let mut results = vec![Val::I32(0); func.ty(&*store).results().len()];
    let started = Instant::now();
    let outcome = func.call_async(&mut *store, &args, &mut results).await;
    tracing::info!(function = %func_name, elapsed = ?started.elapsed(), "guest returned");
    replay_captured(tenant.output(), tenant.name(), &config);
    let last = tenant.store().data().cuda.last_error();
    let last_error = (!last.is_empty()).then(|| last.to_string());
    let exit_code = match outcome {
        Ok(()) => 0,
        Err(e) => match e.downcast_ref::<I32Exit>() {
            Some(exit) => exit.0,
            None => {
                tracing::warn!(function = %func_name, "guest trapped: {e:#}");
                let mut message = format!("guest function `{func_name}` failed: {e:#}");
                if let Some(last) = &last_error {
                    message.push_str(&format!("\nlast wasi_cuda error: {last}"));
                }
                return Err(guest_err(message));
            }
        },
    };
    if let Some(last) = &last_error {
        tracing::info!(%last, "the guest's last failed wasi_cuda call");
    }
    Ok(RunReport {
        driver: kind,
        device,
        cuda_unavailable,
        results: if options.invoke.is_some() {
            results.iter().map(format_val).collect()
        } else {
            Vec::new()
        },
        exit_code,
        last_error,
    })
}

/// Writes what the guest wrote to captured streams on this process's own.
fn replay_captured(output: &GuestOutput, tenant: &str, config: &TenantConfig) {
    if config.wasi.stdout == OutputMode::Capture {
        let mut out = std::io::stdout().lock();
        let _ = out.write_all(&output.stdout());
        let _ = out.flush();
    }
    if config.wasi.stderr == OutputMode::Capture {
        let _ = std::io::stderr().lock().write_all(&output.stderr());
    }
    if output.capped() {
        tracing::warn!(
            tenant,
            cap = ?config.wasi.output_bytes,
            "the guest's output reached its cap; later writes got EFBIG"
        );
    }
}

fn parse_arg(ty: &ValType, text: &str) -> Result<Val, String> {
    let bad = |e: &dyn fmt::Display| format!("`{text}` is not a valid {ty}: {e}");
    Ok(match ty {
        ValType::I32 => Val::I32(parse_int(text, 32).map_err(|e| bad(&e))? as i32),
        ValType::I64 => Val::I64(parse_int(text, 64).map_err(|e| bad(&e))?),
        ValType::F32 => Val::F32(text.parse::<f32>().map_err(|e| bad(&e))?.to_bits()),
        ValType::F64 => Val::F64(text.parse::<f64>().map_err(|e| bad(&e))?.to_bits()),
        other => {
            return Err(format!(
                "parameters of type {other} cannot be given on the command line"
            ));
        }
    })
}

/// Signed decimal, unsigned decimal, or `0x` hex (the bits, reinterpreted).
fn parse_int(text: &str, bits: u32) -> Result<i64, String> {
    let unsigned = match text.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16).map_err(|e| e.to_string())?,
        None => match text.parse::<i64>() {
            Ok(v) => {
                let min = -(1i128 << (bits - 1));
                let max = (1i128 << bits) - 1;
                return if (min..=max).contains(&i128::from(v)) {
                    Ok(v)
                } else {
                    Err(format!("out of range for {bits} bits"))
                };
            }
            Err(_) => text.parse::<u64>().map_err(|e| e.to_string())?,
        },
    };
    if bits < 64 && unsigned >> bits != 0 {
        return Err(format!("out of range for {bits} bits"));
    }
    Ok(unsigned as i64)
}

fn format_val(v: &Val) -> String {
    match v {
        Val::I32(x) => x.to_string(),
        Val::I64(x) => x.to_string(),
        Val::F32(b) => f32::from_bits(*b).to_string(),
        Val::F64(b) => f64::from_bits(*b).to_string(),
        other => format!("{other:?}"),
    }
}
