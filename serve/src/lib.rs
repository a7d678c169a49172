//! TensorWasm's server, `tensorwasm serve`: many tenants in one process, over HTTP
//! ([`http`]), on every device the process may see. Each tenant (a party,
//! authenticated by its bearer token) is placed on one device and keeps its
//! own modules and instances there; all its instances share its quota. This
//! crate holds that state and its operations, apart from HTTP:
//! [`Server::upload`], [`Server::instantiate`], [`Server::invoke`],
//! [`Server::run`] and the deletes and lists. `docs/serve.md` is the API.

pub mod config;
pub mod http;
mod keep;
mod metrics;
pub mod start;
mod wit_json;

use std::{
    future::Future,
    sync::{
        Arc, Mutex, OnceLock, PoisonError,
        atomic::{AtomicU64, AtomicUsize, Ordering},
    },
};

use bytes::Bytes;
use serde::Serialize;
use sha2::Digest as _;
use tensorwasm_core::{DriverError, ErrorKind, ManagedAllocator, quota::QuotaLedger};
use wasmtime::{ExternType, Val, ValType};
use wasmtime_wasi::I32Exit;

pub use config::{ServeConfig, ServedTenant, token_digest};
pub use metrics::Metrics;

use keep::{Kept, Leaky, reserve};

use tensorwasm_embed::{
    component::{self, ComponentError},
    kernel::{GuestModule, KernelTarget},
    runtime::GuestRuntime,
    tenant::{Tenant, TenantConfig},
    wasi::OutputMode,
};

/// Guest code yields to the executor after this much fuel, so a long call
/// does not hold a server thread and its request's timeout can stop it.
/// Fuel counts Wasm operators, not time spent in host calls: a loop around
/// a cheap host call (a clock read) burns a few units per call, so a large
/// interval lets such a loop run for seconds between yields (ten million
/// took over 10 s under a loaded debug build). A million is about a
/// millisecond of plain Wasm; a yield costs microseconds.
const YIELD_FUEL: u64 = 1_000_000;

/// What a server's driver must be: a kernel target whose memory regions
/// and handles may be shared by the server's threads.
pub trait ServeDriver:
    KernelTarget + ManagedAllocator<Region: Sync> + Clone + Send + Sync + 'static
{
}

impl<D> ServeDriver for D where
    D: KernelTarget + ManagedAllocator<Region: Sync> + Clone + Send + Sync + 'static
{
}

/// Why an operation failed, as HTTP says it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServeError {
    /// 400: the request is malformed or the module invalid.
    BadRequest(String),
    /// 404: no such module or instance (of this tenant).
    NotFound(String),
    /// 413: the module is larger than the server takes.
    TooLarge(String),
    /// 429: the tenant is at a limit (calls in flight, modules, instances,
    /// its quota); retry later.
    Busy(String),
    /// 422: the guest trapped or failed.
    Guest(String),
    /// 504: the call took longer than the request timeout; its instance
    /// was ended.
    Timeout(String),
    /// 503: the server is shutting down.
    Unavailable(String),
}

impl ServeError {
    /// The HTTP status.
    pub fn status(&self) -> u16 {
        match self {
            ServeError::BadRequest(_) => 400,
            ServeError::NotFound(_) => 404,
            ServeError::TooLarge(_) => 413,
            ServeError::Guest(_) => 422,
            ServeError::Busy(_) => 429,
            ServeError::Unavailable(_) => 503,
            ServeError::Timeout(_) => 504,
        }
    }

    /// What happened.
    pub fn message(&self) -> &str {
        match self {
            ServeError::BadRequest(m)
            | ServeError::NotFound(m)
            | ServeError::TooLarge(m)
            | ServeError::Busy(m)
            | ServeError::Guest(m)
            | ServeError::Timeout(m)
            | ServeError::Unavailable(m) => m,
        }
    }
}

/// One device's runtime.
pub struct DeviceRuntime<D: ServeDriver> {
    /// Its ordinal.
    pub ordinal: u32,
    runtime: GuestRuntime<D>,
    tenants: AtomicUsize,
    /// Why the device's context was lost, once it is.
    lost: Arc<OnceLock<String>>,
}

/// An uploaded module.
struct Uploaded {
    guest: UploadedGuest,
    bytes: usize,
    exports: Vec<String>,
}

/// Whether `bytes` is a binary component: the Wasm header with layer 1
/// (a core module's is layer 0).
fn is_component(bytes: &[u8]) -> bool {
    bytes.len() >= 8 && bytes[..4] == *b"\0asm" && bytes[6..8] == [1, 0]
}

/// What an upload compiled to.
enum UploadedGuest {
    /// A core module: instances and `_start` runs.
    Module(GuestModule),
    /// A WASI 0.2 command component: runs of its `wasi:cli/run`.
    Component(component::GuestComponent),
}

impl Uploaded {
    /// The core module, or why a component cannot be used so.
    fn module(&self, id: u64) -> Result<&GuestModule, ServeError> {
        match &self.guest {
            UploadedGuest::Module(m) => Ok(m),
            UploadedGuest::Component(_) => Err(ServeError::BadRequest(format!(
                "module {id} is a component, not a core module"
            ))),
        }
    }
}

/// An instance of a module, with its tenant store.
struct Live<D: ServeDriver> {
    module: u64,
    guest: LiveGuest<D>,
}

/// What an instance is: a core module's, or a component's.
enum LiveGuest<D: ServeDriver> {
    Module(tokio::sync::Mutex<Leaky<Tenant<D>>>),
    Component(tokio::sync::Mutex<Leaky<component::ComponentInstance<D>>>),
}

/// A tenant's state on the server.
struct Party<D: ServeDriver> {
    served: ServedTenant,
    device: usize,
    ledger: Arc<QuotaLedger>,
    modules: Mutex<Kept<Uploaded>>,
    instances: Mutex<Kept<Live<D>>>,
    next_id: AtomicU64,
    in_flight: Arc<tokio::sync::Semaphore>,
}

/// A module as listed.
#[derive(Serialize, Debug, Clone, PartialEq, Eq)]
pub struct ModuleInfo {
    /// Its id (the tenant's own).
    pub id: u64,
    /// Its size in bytes.
    pub bytes: usize,
    /// Its exported functions.
    pub exports: Vec<String>,
}

/// An instance as listed.
#[derive(Serialize, Debug, Clone, PartialEq, Eq)]
pub struct InstanceInfo {
    /// Its id (the tenant's own).
    pub id: u64,
    /// The module it instantiates.
    pub module: u64,
}

/// What a command run (`_start`) gave.
#[derive(Serialize, Debug, Clone, PartialEq, Eq)]
pub struct RunOutcome {
    /// Its exit code (0 when `_start` returned).
    pub exit_code: i32,
    /// What it wrote to stdout (lossy UTF-8).
    pub stdout: String,
    /// What it wrote to stderr (lossy UTF-8).
    pub stderr: String,
    /// Whether its output reached the tenant's cap.
    pub output_capped: bool,
}

/// Every tenant on every device.
pub struct Server<D: ServeDriver> {
    config: ServeConfig,
    devices: Vec<DeviceRuntime<D>>,
    parties: Vec<Party<D>>,
    metrics: Metrics,
    /// Where guest calls run: a runtime apart from the one that serves
    /// HTTP, so that guests busy on their threads never hold up requests
    /// (health, metrics, 429s, other tenants' calls).
    guests: tokio::runtime::Handle,
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn one_line(e: &wasmtime::Error) -> String {
    format!("{e:#}").replace('\n', " | ")
}

impl<D: ServeDriver> Server<D> {
    /// A server over `drivers` (one per device, ordinals in order), placing
    /// each tenant: on its configured device, else on the device with the
    /// fewest tenants so far, the most free memory among those. Guest calls
    /// run on `guests`.
    pub fn new(
        config: ServeConfig,
        drivers: Vec<(u32, D)>,
        guests: tokio::runtime::Handle,
    ) -> Result<Self, String> {
        if drivers.is_empty() {
            return Err("no device to serve on".into());
        }
        let mut devices = Vec::new();
        for (ordinal, driver) in drivers {
            let free = driver.mem_info().map_err(|e| e.to_string())?.free;
            let limit = tensorwasm_embed::run::memory_cap(config.memory_limit, free);
            let runtime = GuestRuntime::new(driver, limit).map_err(|e| one_line(&e))?;
            devices.push(DeviceRuntime {
                ordinal,
                runtime,
                tenants: AtomicUsize::new(0),
                lost: Arc::default(),
            });
        }
        let mut parties = Vec::new();
        for served in &config.tenants {
            let device = match served.device {
                Some(d) => devices
                    .iter()
                    .position(|x| x.ordinal == d)
                    .ok_or_else(|| format!("tenant `{}`: no device {d} here", served.name))?,
                None => place(&devices),
            };
            devices[device].tenants.fetch_add(1, Ordering::Relaxed);
            tracing::info!(tenant = %served.name, device = devices[device].ordinal, "tenant placed");
            parties.push(Party {
                served: served.clone(),
                device,
                ledger: Arc::new(QuotaLedger::new(served.settings.quota)),
                modules: Mutex::default(),
                instances: Mutex::default(),
                next_id: AtomicU64::new(1),
                in_flight: Arc::new(tokio::sync::Semaphore::new(config.calls_in_flight)),
            });
        }
        let metrics = Metrics::new(config.tenants.iter().map(|t| t.name.as_str()));
        Ok(Server {
            config,
            devices,
            parties,
            metrics,
            guests,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &ServeConfig {
        &self.config
    }

    /// The metrics.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// The tenant whose token is `token`, in constant time per tenant.
    pub fn authenticate(&self, token: &str) -> Option<usize> {
        let digest: [u8; 32] = sha2::Sha256::digest(token.as_bytes()).into();
        let mut found = None;
        for (i, p) in self.parties.iter().enumerate() {
            let diff = p
                .served
                .token_sha256
                .iter()
                .zip(&digest)
                .fold(0u8, |acc, (a, b)| acc | (a ^ b));
            if diff == 0 {
                found = Some(i);
            }
        }
        found
    }

    /// Tenant `t`'s name and device ordinal.
    pub fn tenant(&self, t: usize) -> (&str, u32) {
        let p = &self.parties[t];
        (&p.served.name, self.devices[p.device].ordinal)
    }

    fn party(&self, t: usize) -> &Party<D> {
        &self.parties[t]
    }

    /// Validates, compiles and keeps `bytes` (Wasm binary or text) as a
    /// module of tenant `t`.
    pub fn upload(&self, t: usize, bytes: &[u8]) -> Result<ModuleInfo, ServeError> {
        let p = self.party(t);
        if bytes.len() > self.config.module_bytes {
            return Err(ServeError::TooLarge(format!(
                "the module has {} bytes; this server takes at most {}",
                bytes.len(),
                self.config.module_bytes
            )));
        }
        let place = reserve(&p.modules, self.config.modules).ok_or_else(|| {
            ServeError::Busy(format!(
                "{} modules kept already; delete one first",
                self.config.modules
            ))
        })?;
        let runtime = &self.devices[p.device].runtime;
        let (guest, exports) = if is_component(bytes) {
            // A component: run whole when it is a WASI 0.2 command
            // (`wasi:cli/run`), or instantiated and its exports invoked.
            let component = component::compile_component(runtime.engine(), bytes, "the component")
                .map_err(|e| match e {
                    ComponentError::NotACommand(m) | ComponentError::Guest(m) => {
                        ServeError::BadRequest(format!("invalid component: {m}"))
                    }
                })?;
            let exports = component::export_names(runtime.engine(), &component);
            (UploadedGuest::Component(component), exports)
        } else {
            let module = runtime
                .compile(bytes)
                .map_err(|e| ServeError::BadRequest(format!("invalid module: {}", one_line(&e))))?;
            let exports = module
                .exports()
                .filter(|e| matches!(e.ty(), ExternType::Func(_)))
                .map(|e| e.name().to_string())
                .collect();
            (UploadedGuest::Module(module), exports)
        };
        let id = p.next_id.fetch_add(1, Ordering::Relaxed);
        let uploaded = Arc::new(Uploaded {
            guest,
            bytes: bytes.len(),
            exports,
        });
        let info = ModuleInfo {
            id,
            bytes: uploaded.bytes,
            exports: uploaded.exports.clone(),
        };
        place.fill(id, uploaded);
        Ok(info)
    }

    /// Tenant `t`'s modules.
    pub fn modules(&self, t: usize) -> Vec<ModuleInfo> {
        lock(&self.party(t).modules)
            .map
            .iter()
            .map(|(&id, m)| ModuleInfo {
                id,
                bytes: m.bytes,
                exports: m.exports.clone(),
            })
            .collect()
    }

    /// Deletes module `id` of tenant `t` (its instances stay).
    pub fn delete_module(&self, t: usize, id: u64) -> Result<(), ServeError> {
        lock(&self.party(t).modules)
            .map
            .remove(&id)
            .map(drop)
            .ok_or_else(|| ServeError::NotFound(format!("no module {id}")))
    }

    fn module(&self, t: usize, id: u64) -> Result<Arc<Uploaded>, ServeError> {
        lock(&self.party(t).modules)
            .map
            .get(&id)
            .cloned()
            .ok_or_else(|| ServeError::NotFound(format!("no module {id}")))
    }

    /// 503 when tenant `t`'s device is lost.
    fn device_alive(&self, t: usize) -> Result<(), ServeError> {
        let d = &self.devices[self.party(t).device];
        match d.lost.get() {
            Some(why) => Err(ServeError::Unavailable(format!(
                "device {} was lost ({why}); the server must be restarted",
                d.ordinal
            ))),
            None => Ok(()),
        }
    }

    /// Marks device `d` lost (once; the first reason stays).
    fn lose(&self, d: usize, why: String) {
        let device = &self.devices[d];
        if device.lost.set(why.clone()).is_ok() {
            tracing::error!(
                device = device.ordinal,
                why,
                "the device's context is lost: its tenants get 503 and /healthz fails until the server restarts"
            );
        }
    }

    /// After a call of tenant `t`: a guest call that found the device lost
    /// (`EDEVLOST`) marks the tenant's device lost.
    fn note_device_loss(&self, t: usize) {
        let p = self.party(t);
        if self.metrics.device_lost_calls(&p.served.name) > 0 {
            self.lose(p.device, "a guest call found its context lost".into());
        }
    }

    /// Asks each device's driver whether its context still works; the
    /// devices lost, with why.
    pub fn probe_devices(&self) -> Vec<(u32, String)> {
        for (i, d) in self.devices.iter().enumerate() {
            if d.lost.get().is_none()
                && let Err(e) = d.runtime.driver().mem_info()
                && e.kind() == ErrorKind::DeviceLost
            {
                self.lose(i, e.to_string());
            }
        }
        self.devices
            .iter()
            .filter_map(|d| Some((d.ordinal, d.lost.get()?.clone())))
            .collect()
    }

    fn new_tenant(
        &self,
        t: usize,
        settings: &TenantConfig,
    ) -> Result<Leaky<Tenant<D>>, ServeError> {
        self.device_alive(t)?;
        let p = self.party(t);
        let runtime = &self.devices[p.device].runtime;
        let mut tenant = Tenant::with_ledger(runtime, settings, Arc::clone(&p.ledger))
            .map_err(|e| ServeError::Busy(one_line(&e)))?;
        tenant
            .store_mut()
            .fuel_async_yield_interval(Some(YIELD_FUEL))
            .map_err(|e| ServeError::BadRequest(one_line(&e)))?;
        let stats = self.metrics.guest_stats(&p.served.name);
        tenant.store_mut().data_mut().cuda.set_stats(stats);
        Ok(Leaky {
            value: Some(tenant),
            lost: Arc::clone(&self.devices[p.device].lost),
        })
    }

    /// Instantiates module `module` of tenant `t`.
    pub async fn instantiate(&self, t: usize, module: u64) -> Result<InstanceInfo, ServeError> {
        let p = self.party(t);
        let place = reserve(&p.instances, self.config.instances).ok_or_else(|| {
            ServeError::Busy(format!(
                "{} instances kept already; delete one first",
                self.config.instances
            ))
        })?;
        let uploaded = self.module(t, module)?;
        let mut settings = p.served.settings.clone();
        // A served instance's output is captured (never the server's).
        settings.wasi.stdout = OutputMode::Capture;
        settings.wasi.stderr = OutputMode::Capture;
        settings.wasi.stdin = false;
        let guest_module = match &uploaded.guest {
            UploadedGuest::Module(m) => m,
            UploadedGuest::Component(c) => {
                self.device_alive(t)?;
                let runtime = &self.devices[p.device].runtime;
                let made = component::ComponentInstance::new(
                    runtime,
                    c,
                    "the component",
                    &settings,
                    Arc::clone(&p.ledger),
                    Some(YIELD_FUEL),
                )
                .await;
                self.note_device_loss(t);
                let made = made.map_err(|e| match e {
                    ComponentError::NotACommand(m) | ComponentError::Guest(m) => {
                        ServeError::Guest(m)
                    }
                })?;
                let id = p.next_id.fetch_add(1, Ordering::Relaxed);
                place.fill(
                    id,
                    Arc::new(Live {
                        module,
                        guest: LiveGuest::Component(tokio::sync::Mutex::new(Leaky {
                            value: Some(made),
                            lost: Arc::clone(&self.devices[p.device].lost),
                        })),
                    }),
                );
                return Ok(InstanceInfo { id, module });
            }
        };
        let mut tenant = self.new_tenant(t, &settings)?;
        let runtime = &self.devices[p.device].runtime;
        let made = tenant.instantiate(runtime, guest_module).await;
        self.note_device_loss(t);
        made.map_err(|e| ServeError::Guest(format!("instantiating: {}", one_line(&e))))?;
        self.device_alive(t)?;
        let id = p.next_id.fetch_add(1, Ordering::Relaxed);
        place.fill(
            id,
            Arc::new(Live {
                module,
                guest: LiveGuest::Module(tokio::sync::Mutex::new(tenant)),
            }),
        );
        Ok(InstanceInfo { id, module })
    }

    /// Tenant `t`'s instances.
    pub fn instances(&self, t: usize) -> Vec<InstanceInfo> {
        lock(&self.party(t).instances)
            .map
            .iter()
            .map(|(&id, l)| InstanceInfo {
                id,
                module: l.module,
            })
            .collect()
    }

    /// Ends instance `id` of tenant `t` (once its call in flight, if any,
    /// is done), freeing all it holds.
    pub fn delete_instance(&self, t: usize, id: u64) -> Result<(), ServeError> {
        lock(&self.party(t).instances)
            .map
            .remove(&id)
            .map(drop)
            .ok_or_else(|| ServeError::NotFound(format!("no instance {id}")))
    }

    /// Runs `work` (CPU-bound: compiling a module) on the blocking threads
    /// of the guests' runtime, off the threads that serve HTTP.
    pub async fn off_http<T: Send + 'static>(
        &self,
        work: impl FnOnce() -> Result<T, ServeError> + Send + 'static,
    ) -> Result<T, ServeError> {
        self.guests
            .spawn_blocking(work)
            .await
            .unwrap_or_else(|e| Err(ServeError::Guest(format!("the task failed: {e}"))))
    }

    /// Runs `call` on the guests' runtime.
    pub async fn on_guest_runtime<T: Send + 'static>(
        &self,
        call: impl Future<Output = Result<T, ServeError>> + Send + 'static,
    ) -> Result<T, ServeError> {
        self.guests
            .spawn(call)
            .await
            .unwrap_or_else(|e| Err(ServeError::Guest(format!("the call's task failed: {e}"))))
    }

    /// A call slot of tenant `t` (held while the call runs), or 429.
    pub fn slot(&self, t: usize) -> Result<tokio::sync::OwnedSemaphorePermit, ServeError> {
        let p = self.party(t);
        Arc::clone(&p.in_flight).try_acquire_owned().map_err(|_| {
            self.metrics.refused(&p.served.name);
            ServeError::Busy(format!(
                "{} calls in flight already",
                self.config.calls_in_flight
            ))
        })
    }

    /// Calls export `export` of instance `id` with `args` (JSON numbers,
    /// converted to its parameter types; for a component, JSON by its WIT
    /// types, `wit_json`, and `export` may be `interface#name`); its results
    /// as JSON. The caller holds one of the tenant's call
    /// [`slot`](Self::slot)s.
    pub async fn invoke(
        &self,
        t: usize,
        id: u64,
        export: &str,
        args: &[serde_json::Value],
    ) -> Result<Vec<serde_json::Value>, ServeError> {
        self.device_alive(t)?;
        let p = self.party(t);
        let live = lock(&p.instances)
            .map
            .get(&id)
            .cloned()
            .ok_or_else(|| ServeError::NotFound(format!("no instance {id}")))?;
        let call = async {
            match &live.guest {
                LiveGuest::Module(tenant) => self.call_module(t, tenant, export, args).await,
                LiveGuest::Component(instance) => {
                    self.call_component(t, instance, export, args).await
                }
            }
        };
        match tokio::time::timeout(self.config.request_timeout, call).await {
            Ok(answer) => answer,
            Err(_) => {
                // The call was stopped part-way: its instance cannot be trusted.
                lock(&p.instances).map.remove(&id);
                Err(ServeError::Timeout(format!(
                    "`{export}` ran past {:?}; instance {id} was ended",
                    self.config.request_timeout
                )))
            }
        }
    }

    /// [`invoke`](Self::invoke) of a core module instance's export.
    async fn call_module(
        &self,
        t: usize,
        tenant: &tokio::sync::Mutex<Leaky<Tenant<D>>>,
        export: &str,
        args: &[serde_json::Value],
    ) -> Result<Vec<serde_json::Value>, ServeError> {
        let mut tenant = tenant.lock().await;
        let (instance, _) = tenant
            .instantiated()
            .map_err(|e| ServeError::BadRequest(one_line(&e)))?;
        let func = instance
            .get_func(tenant.store_mut(), export)
            .ok_or_else(|| ServeError::NotFound(format!("no export `{export}`")))?;
        let ty = func.ty(tenant.store());
        let params: Vec<ValType> = ty.params().collect();
        let vals = arguments(export, &params, args, |ty, v| {
            to_val(ty, v).ok_or_else(|| format!("not a {ty}: {v}"))
        })?;
        let mut results = vec![Val::I32(0); ty.results().len()];
        self.metrics.call(&self.party(t).served.name);
        let called = func
            .call_async(tenant.store_mut(), &vals, &mut results)
            .await;
        self.called(t, export, called)?;
        results_json(export, &results, from_val)
    }

    /// [`invoke`](Self::invoke) of a component instance's export (`name`
    /// or `interface#name`), its arguments and results JSON by their WIT
    /// types (`wit_json`).
    async fn call_component(
        &self,
        t: usize,
        instance: &tokio::sync::Mutex<Leaky<component::ComponentInstance<D>>>,
        export: &str,
        args: &[serde_json::Value],
    ) -> Result<Vec<serde_json::Value>, ServeError> {
        let mut instance = instance.lock().await;
        let func = instance
            .func(export)
            .ok_or_else(|| ServeError::NotFound(format!("no export `{export}`")))?;
        let (params, _) = instance.types(&func);
        let vals = arguments(export, &params, args, wit_json::to_wit)?;
        self.metrics.call(&self.party(t).served.name);
        let called = instance.call(func, &vals).await;
        let results = self.called(t, export, called)?;
        results_json(export, &results, wit_json::from_wit)
    }

    /// After a guest call of tenant `t`: notes a lost device, and counts
    /// and reports a trap.
    fn called<R>(
        &self,
        t: usize,
        export: &str,
        called: wasmtime::Result<R>,
    ) -> Result<R, ServeError> {
        self.note_device_loss(t);
        called.map_err(|e| {
            self.metrics.trap(&self.party(t).served.name);
            ServeError::Guest(format!("`{export}` failed: {}", one_line(&e)))
        })
    }

    /// Runs module `module` of tenant `t` as a WASI command: a fresh
    /// instance's `_start` with `argv` and `stdin`, its output captured.
    /// The caller holds one of the tenant's call [`slot`](Self::slot)s.
    pub async fn run(
        &self,
        t: usize,
        module: u64,
        argv: Vec<String>,
        stdin: Bytes,
    ) -> Result<RunOutcome, ServeError> {
        let p = self.party(t);
        let uploaded = self.module(t, module)?;
        if let UploadedGuest::Component(component) = &uploaded.guest {
            return self.run_component(t, component, argv, stdin).await;
        }
        if !uploaded.exports.iter().any(|e| e == "_start") {
            return Err(ServeError::BadRequest(
                "the module exports no `_start` (not a WASI command)".into(),
            ));
        }
        let settings = command_settings(&p.served.settings, argv, stdin);
        let name = p.served.name.clone();
        let call = async {
            let mut tenant = self.new_tenant(t, &settings)?;
            let runtime = &self.devices[p.device].runtime;
            let instance = tenant
                .instantiate(runtime, uploaded.module(module)?)
                .await
                .map_err(|e| ServeError::Guest(format!("instantiating: {}", one_line(&e))))?;
            let start = instance
                .get_typed_func::<(), ()>(tenant.store_mut(), "_start")
                .map_err(|e| ServeError::BadRequest(one_line(&e)))?;
            self.metrics.call(&name);
            let started = start.call_async(tenant.store_mut(), ()).await;
            self.note_device_loss(t);
            let exit_code = match started {
                Ok(()) => 0,
                Err(e) => match e.downcast_ref::<I32Exit>() {
                    Some(exit) => exit.0,
                    None => {
                        self.metrics.trap(&name);
                        return Err(ServeError::Guest(format!(
                            "_start failed: {}",
                            one_line(&e)
                        )));
                    }
                },
            };
            let output = tenant.output();
            Ok(RunOutcome {
                exit_code,
                stdout: String::from_utf8_lossy(&output.stdout()).into_owned(),
                stderr: String::from_utf8_lossy(&output.stderr()).into_owned(),
                output_capped: output.capped(),
            })
        };
        tokio::time::timeout(self.config.request_timeout, call)
            .await
            .unwrap_or_else(|_| {
                Err(ServeError::Timeout(format!(
                    "the run took longer than {:?} and was stopped",
                    self.config.request_timeout
                )))
            })
    }

    /// [`run`](Self::run) of a component: its `wasi:cli/run` in a store
    /// of its own, on a GPU context charged to the tenant's ledger, its
    /// output captured, stopped at the request timeout.
    async fn run_component(
        &self,
        t: usize,
        component: &component::GuestComponent,
        argv: Vec<String>,
        stdin: Bytes,
    ) -> Result<RunOutcome, ServeError> {
        self.device_alive(t)?;
        let p = self.party(t);
        if !component::is_command(self.devices[p.device].runtime.engine(), component) {
            return Err(ServeError::BadRequest(
                "the component exports no `wasi:cli/run` (not a WASI 0.2 command); \
                 instantiate it and invoke its exports instead"
                    .into(),
            ));
        }
        let settings = command_settings(&p.served.settings, argv, stdin);
        let name = p.served.name.clone();
        let runtime = &self.devices[p.device].runtime;
        self.metrics.call(&name);
        let call = component::run_compiled(
            runtime,
            component,
            "the component",
            &settings,
            Arc::clone(&p.ledger),
            Some(YIELD_FUEL),
        );
        let ran = tokio::time::timeout(self.config.request_timeout, call)
            .await
            .map_err(|_| {
                ServeError::Timeout(format!(
                    "the run took longer than {:?} and was stopped",
                    self.config.request_timeout
                ))
            })?;
        self.note_device_loss(t);
        let ran = ran.map_err(|e| match e {
            ComponentError::NotACommand(m) => ServeError::BadRequest(m),
            ComponentError::Guest(m) => ServeError::Guest(m),
        })?;
        let exit_code = ran.outcome.map_err(|m| {
            self.metrics.trap(&name);
            ServeError::Guest(m)
        })?;
        Ok(RunOutcome {
            exit_code,
            stdout: String::from_utf8_lossy(&ran.output.stdout()).into_owned(),
            stderr: String::from_utf8_lossy(&ran.output.stderr()).into_owned(),
            output_capped: ran.output.capped(),
        })
    }

    /// Ends every instance of every tenant (shutdown).
    pub fn end_all(&self) {
        for p in &self.parties {
            lock(&p.instances).map.clear();
            lock(&p.modules).map.clear();
        }
    }

    /// The metrics, with each tenant's ledger and each device's free
    /// memory and health read now.
    pub fn scrape(&self) -> String {
        let lost = self.probe_devices();
        for d in &self.devices {
            self.metrics
                .set_device_lost(d.ordinal, lost.iter().any(|(o, _)| *o == d.ordinal));
        }
        for p in &self.parties {
            for (r, used, _) in p.ledger.snapshot().iter() {
                self.metrics.set_in_use(&p.served.name, r.name(), used);
            }
        }
        for d in &self.devices {
            if let Ok(m) = d.runtime.driver().mem_info() {
                self.metrics.set_device_free(d.ordinal, m.free);
            }
        }
        self.metrics.render()
    }

    /// What tenant `t`'s ledger holds now, by resource (nonzero only).
    pub fn usage(&self, t: usize) -> Vec<(String, u64)> {
        self.party(t)
            .ledger
            .snapshot()
            .iter()
            .filter(|&(_, used, _)| used != 0)
            .map(|(r, used, _)| (r.name().to_string(), used))
            .collect()
    }
}

/// The device for a tenant with none configured: the fewest tenants, then
/// the most free memory.
fn place<D: ServeDriver>(devices: &[DeviceRuntime<D>]) -> usize {
    let free = |d: &DeviceRuntime<D>| d.runtime.driver().mem_info().map_or(0, |m| m.free);
    (0..devices.len())
        .min_by_key(|&i| {
            let d = &devices[i];
            (
                d.tenants.load(Ordering::Relaxed),
                std::cmp::Reverse(free(d)),
            )
        })
        .unwrap_or(0)
}

/// A command run's settings: the tenant's, with `argv`, `stdin` and its
/// output captured.
fn command_settings(tenant: &TenantConfig, argv: Vec<String>, stdin: Bytes) -> TenantConfig {
    let mut settings = tenant.clone();
    settings.wasi.args = argv;
    settings.wasi.stdin_bytes = Some(stdin);
    settings.wasi.stdout = OutputMode::Capture;
    settings.wasi.stderr = OutputMode::Capture;
    settings
}

/// `args` as `export`'s arguments of types `params`, each converted by
/// `convert` (what is wrong with it on failure).
fn arguments<T, V>(
    export: &str,
    params: &[T],
    args: &[serde_json::Value],
    convert: impl Fn(&T, &serde_json::Value) -> Result<V, String>,
) -> Result<Vec<V>, ServeError> {
    if params.len() != args.len() {
        return Err(ServeError::BadRequest(format!(
            "`{export}` takes {} arguments, {} given",
            params.len(),
            args.len()
        )));
    }
    params
        .iter()
        .zip(args)
        .enumerate()
        .map(|(i, (ty, v))| {
            convert(ty, v).map_err(|e| ServeError::BadRequest(format!("argument {i}: {e}")))
        })
        .collect()
}

/// `export`'s results as JSON, each by `convert`.
fn results_json<V: std::fmt::Debug>(
    export: &str,
    results: &[V],
    convert: impl Fn(&V) -> Option<serde_json::Value>,
) -> Result<Vec<serde_json::Value>, ServeError> {
    results
        .iter()
        .map(|v| {
            convert(v).ok_or_else(|| {
                ServeError::Guest(format!(
                    "`{export}` returned a {v:?}, which has no JSON form"
                ))
            })
        })
        .collect()
}

fn to_val(ty: &ValType, v: &serde_json::Value) -> Option<Val> {
    Some(match ty {
        ValType::I32 => Val::I32(i32::try_from(v.as_i64()?).ok().or_else(|| {
            // Unsigned 32-bit values are accepted as their bits.
            u32::try_from(v.as_u64()?).ok().map(|u| u as i32)
        })?),
        ValType::I64 => Val::I64(v.as_i64().or_else(|| v.as_u64().map(|u| u as i64))?),
        ValType::F32 => Val::F32((v.as_f64()? as f32).to_bits()),
        ValType::F64 => Val::F64(v.as_f64()?.to_bits()),
        _ => return None,
    })
}

fn from_val(v: &Val) -> Option<serde_json::Value> {
    Some(match *v {
        Val::I32(x) => x.into(),
        Val::I64(x) => x.into(),
        Val::F32(bits) => serde_json::Number::from_f64(f64::from(f32::from_bits(bits)))?.into(),
        Val::F64(bits) => serde_json::Number::from_f64(f64::from_bits(bits))?.into(),
        _ => return None,
    })
}
