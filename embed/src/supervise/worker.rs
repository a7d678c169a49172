//! The worker side of a [`Supervisor`](super::Supervisor): `tensorwasm
//! worker` reads [`Request`]s from stdin, one JSON object per line, runs
//! them on its tenants one at a time, and writes one [`Response`] line per
//! request to stdout. After every request it asks the driver whether the
//! device is still there; once it is lost it says so and ends, because a
//! process whose CUDA context has a sticky error can never use the GPU
//! again.

use std::{
    collections::HashMap,
    io::{self, BufRead, Write},
};

use tensorwasm_core::{DriverError, ErrorKind, ManagedAllocator};
use wasmtime::Val;

use super::protocol::{Failure, Request, Response, WasmValue, WorkerStatus};
use crate::{
    kernel::{GuestModule, KernelSource, KernelTarget},
    runtime::GuestRuntime,
    snapshot::TenantSnapshot,
    tenant::{Tenant, TenantConfig},
};

/// Serves requests from `input` until it ends (or the device is lost),
/// answering on `output`. Guest memories reserve at most `memory_limit`
/// bytes each.
pub fn serve<D>(
    driver: D,
    memory_limit: usize,
    input: impl BufRead,
    mut output: impl Write,
) -> io::Result<()>
where
    D: KernelTarget + ManagedAllocator + Clone + 'static,
    <D as ManagedAllocator>::Region: Sync,
{
    let runtime = GuestRuntime::new(driver.clone(), memory_limit).map_err(io::Error::other)?;
    let tokio = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let mut worker = Worker {
        runtime,
        tenants: HashMap::new(),
        modules: HashMap::new(),
    };
    for line in input.lines() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        let response = match serde_json::from_str::<Request>(&line) {
            Ok(request) => tokio.block_on(worker.handle(request)),
            Err(e) => Response::failed(Failure::Request, format!("malformed request: {e}")),
        };
        // Whatever the request did, a lost device ends this worker.
        let response = match driver.synchronize() {
            Err(e) if e.kind() == ErrorKind::DeviceLost => {
                Response::failed(Failure::DeviceLost, e.to_string())
            }
            _ => response,
        };
        let lost = matches!(
            response,
            Response::Failed {
                failure: Failure::DeviceLost,
                ..
            }
        );
        serde_json::to_writer(&mut output, &response)?;
        output.write_all(b"\n")?;
        output.flush()?;
        if lost {
            tracing::error!("the device is lost: this worker ends");
            // The tenants' memories are unreadable now: leave without
            // dropping them (their teardown would touch that memory).
            std::mem::forget(worker);
            return Ok(());
        }
    }
    Ok(())
}

struct Worker<D>
where
    D: KernelTarget + ManagedAllocator + Clone + 'static,
    <D as ManagedAllocator>::Region: Sync,
{
    runtime: GuestRuntime<D>,
    tenants: HashMap<String, Tenant<D>>,
    /// Compiled modules by their file's identity: tenants of one module
    /// (and a recovery's many restores) compile it once.
    modules: HashMap<(u64, usize), GuestModule>,
}

impl<D> Worker<D>
where
    D: KernelTarget + ManagedAllocator + Clone + 'static,
    <D as ManagedAllocator>::Region: Sync,
{
    async fn handle(&mut self, request: Request) -> Response {
        match request {
            Request::Add {
                tenant,
                config,
                module,
                snapshot,
            } => self
                .add(tenant, &config, &module, snapshot.as_deref())
                .await
                .map_or_else(|(f, m)| Response::failed(f, m), |()| Response::done()),
            Request::Call {
                tenant,
                export,
                args,
                snapshot,
            } => self
                .call(&tenant, &export, &args, snapshot.as_deref())
                .await
                .unwrap_or_else(|(f, m)| Response::failed(f, m)),
            Request::Remove { tenant } => match self.tenants.remove(&tenant) {
                Some(t) => {
                    let ledger = std::sync::Arc::clone(t.ledger());
                    drop(t);
                    let held = ledger
                        .snapshot()
                        .iter()
                        .filter(|&(_, used, _)| used != 0)
                        .map(|(r, used, _)| (r.name().to_string(), used))
                        .collect();
                    Response::Removed { held }
                }
                None => Response::failed(Failure::Request, format!("no tenant `{tenant}`")),
            },
            Request::Status => match self.runtime.driver().mem_info() {
                Ok(m) => Response::Status(WorkerStatus {
                    device_free: m.free,
                    device_total: m.total,
                    rss_bytes: rss_bytes(),
                    tenants: self.tenants.len() as u64,
                }),
                Err(e) => Response::failed(Failure::Request, format!("mem_info: {e}")),
            },
        }
    }

    async fn add(
        &mut self,
        name: String,
        config: &str,
        module: &std::path::Path,
        snapshot: Option<&std::path::Path>,
    ) -> Result<(), (Failure, String)> {
        let refused = |m: String| (Failure::Request, m);
        if self.tenants.contains_key(&name) {
            return Err(refused(format!("tenant `{name}` exists")));
        }
        let mut config = TenantConfig::from_toml(config).map_err(|e| refused(e.to_string()))?;
        config.name.clone_from(&name);
        let bytes = std::fs::read(module)
            .map_err(|e| refused(format!("reading {}: {e}", module.display())))?;
        let key = KernelSource::new(bytes.as_slice().into()).id();
        let module = match self.modules.get(&key) {
            Some(compiled) => compiled.clone(),
            None => {
                let compiled = self
                    .runtime
                    .compile(&bytes)
                    .map_err(|e| refused(format!("compiling {}: {e:#}", module.display())))?;
                self.modules.insert(key, compiled.clone());
                compiled
            }
        };
        let mut tenant =
            Tenant::new(&self.runtime, &config).map_err(|e| refused(format!("{e:#}")))?;
        tenant
            .instantiate(&self.runtime, &module)
            .await
            .map_err(|e| (Failure::Guest, format!("instantiating: {e:#}")))?;
        if let Some(path) = snapshot {
            let snapshot = TenantSnapshot::load(path)
                .map_err(|e| refused(format!("reading the snapshot {}: {e}", path.display())))?;
            tenant
                .restore(&snapshot)
                .map_err(|e| refused(format!("restoring the snapshot: {e:#}")))?;
        }
        self.tenants.insert(name, tenant);
        Ok(())
    }

    async fn call(
        &mut self,
        name: &str,
        export: &str,
        args: &[WasmValue],
        snapshot: Option<&std::path::Path>,
    ) -> Result<Response, (Failure, String)> {
        let tenant = self
            .tenants
            .get_mut(name)
            .ok_or_else(|| (Failure::Request, format!("no tenant `{name}`")))?;
        let (instance, _) = tenant
            .instantiated()
            .map_err(|e| (Failure::Request, e.to_string()))?;
        let func = instance
            .get_func(tenant.store_mut(), export)
            .ok_or_else(|| (Failure::Request, format!("`{name}` exports no `{export}`")))?;
        let ty = func.ty(tenant.store());
        let params: Vec<Val> = args.iter().map(|a| a.val()).collect();
        let fits = ty.params().len() == params.len()
            && ty
                .params()
                .zip(&params)
                .all(|(want, have)| have.ty(tenant.store()).is_ok_and(|t| t.matches(&want)));
        if !fits {
            return Err((
                Failure::Request,
                format!(
                    "`{export}` takes ({}), not {} arguments ({args:?})",
                    ty.params()
                        .map(|p| p.to_string())
                        .collect::<Vec<_>>()
                        .join(", "),
                    args.len()
                ),
            ));
        }
        let mut results = vec![Val::I32(0); ty.results().len()];
        func.call_async(tenant.store_mut(), &params, &mut results)
            .await
            .map_err(|e| (Failure::Guest, format!("{export}: {e:#}")))?;
        let results = results
            .iter()
            .map(|v| {
                WasmValue::from_val(v).ok_or_else(|| {
                    (
                        Failure::Guest,
                        format!("{export} returned a {v:?}, which has no JSON form"),
                    )
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let (snapshot_bytes, snapshot_error) = match snapshot {
            None => (None, None),
            Some(path) => match tenant.snapshot() {
                Ok(s) => match s.save(path) {
                    Ok(()) => (Some(s.bytes() as u64), None),
                    Err(e) => (None, Some(format!("writing {}: {e}", path.display()))),
                },
                Err(e) => (None, Some(format!("{e:#}"))),
            },
        };
        Ok(Response::Ok {
            results,
            snapshot_bytes,
            snapshot_error,
        })
    }
}

/// This process's resident memory (`/proc/self/statm`), 0 where unknown.
fn rss_bytes() -> u64 {
    let pages = std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .unwrap_or(0);
    // SAFETY: sysconf only reads a configuration value.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    pages * u64::try_from(page).unwrap_or(4096)
}
