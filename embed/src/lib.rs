//! TensorWasm's embedding library: wires the drivers into wasmtime for
//! hosts. It is what a custom host links (`examples/custom-host`); the
//! `tensorwasm` command (`tensorwasm-cli`) and the HTTP server
//! (`tensorwasm-serve`) are crates above it, so no HTTP server, metrics
//! exporter or command-line parser comes with it.
//!
//! - [`memory`]: guest linear memory in the driver's managed memory.
//! - [`kernel`]: Wasm kernels: translation cache and per-driver lowering.
//! - [`wasi_cuda`]: the guest API (`docs/ABI.md`) and its per-guest context.
//! - [`wasi`]: WASI preview 1 beside it (wasmtime-wasi), what a guest's WASI
//!   may reach, and one `add_to_linker` for both.
//! - [`component`]: WASI 0.2 command components, with the GPU API as the
//!   WIT package `tensorwasm:gpu` (`wit/gpu.wit`).
//! - [`runtime`]: engine + linker + stores for one driver, ready to run guests.
//! - [`tenant`]: an untrusted party's store: quota, policy, limiter, WASI.
//! - [`run`]: run a guest file as `wasmtime run` does (what `tensorwasm
//!   run` and the containerd shim call).
//! - [`snapshot`], [`supervise`]: a tenant's state between calls, and
//!   tenants kept in a worker process that survive a lost device.
//! - [`twins`]: host twins of the shipped PTX kernels, for the CPU driver.
//! - this file: driver discovery (which drivers work here, and why not).

pub mod builtins;
pub mod component;
pub mod kernel;
pub mod memory;
pub mod run;
pub mod runtime;
pub mod snapshot;
pub mod supervise;
pub mod tenant;
mod tenant_config;
pub mod twins;
pub mod wasi;
pub mod wasi_cuda;

/// The core crate (traits, ABI, quota), at the version this library uses.
pub use tensorwasm_core;
/// wasmtime, at the version this library uses: a host builds its own
/// imports and calls against it.
pub use wasmtime;

use std::fmt::Write as _;

use tensorwasm_core::{DeviceInfo, DriverKind, GpuDriver};
use tensorwasm_cpu::CpuDriver;
use tensorwasm_cuda::CudaDriver;

/// What one driver finds on this machine.
#[derive(Debug, Clone)]
pub struct DriverReport {
    /// The driver.
    pub kind: DriverKind,
    /// Its devices, or the reason it is unavailable.
    pub devices: Result<Vec<DeviceInfo>, String>,
}

/// Asks every driver what it finds. Never fails: an unavailable driver is
/// reported with its reason.
pub fn discover() -> Vec<DriverReport> {
    let cuda = CudaDriver::probe()
        .map_err(|e| e.to_string())
        .and_then(|d| {
            if d.is_empty() {
                Err("the driver loaded but reports no CUDA device".to_string())
            } else {
                Ok(d)
            }
        });
    let cpu = CpuDriver::new()
        .map(|d| vec![d.device().clone()])
        .map_err(|e| e.to_string());
    vec![
        DriverReport {
            kind: DriverKind::Cuda,
            devices: cuda,
        },
        DriverReport {
            kind: DriverKind::Cpu,
            devices: cpu,
        },
    ]
}

/// The driver `auto` picks: CUDA when it has a device, else the CPU.
pub fn auto_choice(reports: &[DriverReport]) -> DriverKind {
    let cuda_ok = reports
        .iter()
        .any(|r| r.kind == DriverKind::Cuda && r.devices.as_ref().is_ok_and(|d| !d.is_empty()));
    if cuda_ok {
        DriverKind::Cuda
    } else {
        DriverKind::Cpu
    }
}

fn gib(bytes: u64) -> f64 {
    bytes as f64 / (1u64 << 30) as f64
}

/// Formats reports as the `tensorwasm devices` command prints them.
pub fn format_reports(reports: &[DriverReport]) -> String {
    let mut out = String::new();
    for r in reports {
        match &r.devices {
            Err(why) => {
                let _ = writeln!(out, "{}: unavailable: {why}", r.kind.as_str());
            }
            Ok(devices) => {
                let _ = writeln!(out, "{}: {} device(s)", r.kind.as_str(), devices.len());
                for d in devices {
                    let _ = write!(out, "  [{}] {}", d.ordinal, d.name);
                    if let Some((major, minor)) = d.compute_capability {
                        let _ = write!(out, ", sm_{major}{minor}");
                    }
                    if r.kind == DriverKind::Cuda {
                        let _ = write!(out, ", {} SMs", d.multiprocessor_count);
                    }
                    let _ = write!(out, ", {:.1} GiB", gib(d.total_memory));
                    if let Some((major, minor)) = d.driver_version {
                        let _ = write!(out, ", driver {major}.{minor}");
                    }
                    let yes = |b: bool| if b { "yes" } else { "no" };
                    let _ = writeln!(
                        out,
                        ", concurrent managed access: {}, VMM: {}",
                        yes(d.concurrent_managed_access),
                        yes(d.vmm_supported)
                    );
                }
            }
        }
    }
    let _ = writeln!(out, "auto picks: {}", auto_choice(reports).as_str());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_is_always_found_and_auto_falls_back_to_it() {
        let reports = discover();
        let cpu = reports.iter().find(|r| r.kind == DriverKind::Cpu).unwrap();
        assert_eq!(cpu.devices.as_ref().map(Vec::len), Ok(1));
        let no_cuda = vec![
            DriverReport {
                kind: DriverKind::Cuda,
                devices: Err("cannot load".into()),
            },
            cpu.clone(),
        ];
        assert_eq!(auto_choice(&no_cuda), DriverKind::Cpu);
        let text = format_reports(&no_cuda);
        assert!(text.contains("cuda: unavailable: cannot load"), "{text}");
        assert!(text.contains("cpu: 1 device(s)"), "{text}");
        assert!(text.ends_with("auto picks: cpu\n"), "{text}");
    }
}
