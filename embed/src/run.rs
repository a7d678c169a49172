//! `tensorwasm run`: load a guest (`.wat` or `.wasm`), pick a driver, call
//! one exported function with arguments from the command line, and report
//! its results — or which guest function and which `wasi_cuda` call failed.

use std::{fmt, path::PathBuf};

use tensorwasm_core::{DriverKind, ManagedAllocator};
use tensorwasm_cpu::CpuDriver;
use tensorwasm_cuda::CudaDriver;
use wasmtime::{Val, ValType};

use crate::{
    runtime::GuestRuntime,
    tenant::{Tenant, TenantConfig},
    twins,
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
    /// The exported function to call.
    pub invoke: String,
    /// Its arguments, parsed by the function's parameter types.
    pub args: Vec<String>,
    /// The most bytes one guest memory may reserve.
    pub memory_limit: usize,
    /// The tenant the guest runs as (`--tenant FILE`): its quota, policy
    /// and guest fuel. `None`: a trusted tenant (the user runs their own
    /// code).
    pub tenant: Option<TenantConfig>,
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
    /// The function's results, formatted.
    pub results: Vec<String>,
    /// The guest's last `wasi_cuda` error, if any call failed.
    pub last_error: Option<String>,
}

/// Why a run failed.
#[derive(Debug)]
pub struct RunError(pub String);

impl fmt::Display for RunError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for RunError {}

fn err(message: impl Into<String>) -> RunError {
    RunError(message.into())
}

/// Runs a guest as `tensorwasm run` does.
pub fn run(options: &RunOptions) -> Result<RunReport, RunError> {
    let bytes = std::fs::read(&options.guest)
        .map_err(|e| err(format!("reading {}: {e}", options.guest.display())))?;
    let cuda = match options.driver {
        DriverChoice::Cpu => Err("the CPU driver was asked for".to_string()),
        DriverChoice::Auto | DriverChoice::Cuda => match CudaDriver::new(0) {
            Ok(d) => Ok(d),
            Err(e) => Err(e.to_string()),
        },
    };
    match cuda {
        Ok(driver) => run_on(driver, &bytes, options, None),
        Err(why) if options.driver == DriverChoice::Cuda => {
            Err(err(format!("the CUDA driver is unavailable: {why}")))
        }
        Err(why) => {
            let driver =
                CpuDriver::new().map_err(|e| err(format!("starting the CPU driver: {e}")))?;
            twins::register(&driver);
            let why = (options.driver == DriverChoice::Auto).then_some(why);
            run_on(driver, &bytes, options, why)
        }
    }
}

fn run_on<D>(
    driver: D,
    bytes: &[u8],
    options: &RunOptions,
    cuda_unavailable: Option<String>,
) -> Result<RunReport, RunError>
where
    D: crate::kernel::KernelTarget + ManagedAllocator + Clone + 'static,
    <D as ManagedAllocator>::Region: Sync,
{
    let free = driver
        .mem_info()
        .map_err(|e| err(format!("asking the device for free memory: {e}")))?
        .free;
    // Reserving is cheap (managed memory is populated lazily) but a
    // reservation above what the device has free is refused.
    let limit = options
        .memory_limit
        .min(usize::try_from(free / 2).unwrap_or(usize::MAX));
    let kind = driver.kind();
    let device = driver.device().name.clone();
    let runtime = GuestRuntime::new(driver, limit).map_err(|e| err(format!("{e:#}")))?;
    let module = runtime
        .compile(bytes)
        .map_err(|e| err(format!("compiling {}: {e:#}", options.guest.display())))?;
    let config = options
        .tenant
        .clone()
        .unwrap_or_else(|| TenantConfig::trusted("guest"));
    let mut tenant = Tenant::new(&runtime, &config).map_err(|e| err(format!("{e:#}")))?;
    futures::executor::block_on(async {
        let instance = tenant
            .instantiate(&runtime, &module)
            .await
            .map_err(|e| err(format!("instantiating {}: {e:#}", options.guest.display())))?;
        let store = tenant.store_mut();
        let name = &options.invoke;
        let func = instance
            .get_func(&mut *store, name)
            .ok_or_else(|| err(format!("the guest exports no function `{name}`")))?;
        let ty = func.ty(&*store);
        let params: Vec<ValType> = ty.params().collect();
        if params.len() != options.args.len() {
            return Err(err(format!(
                "`{name}` takes {} argument(s), {} given",
                params.len(),
                options.args.len()
            )));
        }
        let args = params
            .iter()
            .zip(&options.args)
            .enumerate()
            .map(|(i, (ty, text))| {
                parse_arg(ty, text).map_err(|e| err(format!("argument {i} of `{name}`: {e}")))
            })
            .collect::<Result<Vec<Val>, RunError>>()?;
        let mut results = vec![Val::I32(0); ty.results().len()];
        let outcome = func.call_async(&mut *store, &args, &mut results).await;
        let last = store.data().cuda.last_error();
        let last_error = (!last.is_empty()).then(|| last.to_string());
        if let Err(e) = outcome {
            let mut message = format!("guest function `{name}` failed: {e:#}");
            if let Some(last) = &last_error {
                message.push_str(&format!("\nlast wasi_cuda error: {last}"));
            }
            return Err(err(message));
        }
        Ok(RunReport {
            driver: kind,
            device,
            cuda_unavailable,
            results: results.iter().map(format_val).collect(),
            last_error,
        })
    })
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
