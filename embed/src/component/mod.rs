//! WASI 0.2 components for `tensorwasm run`: a command component's
//! `wasi:cli/run` on wasmtime-wasi's WASI 0.2 (`p2`), with the same
//! capabilities a core module gets from its tenant (arguments, environment,
//! preopened directories, stdio, output cap), the same memory quota and the
//! same fuel, and the GPU API as the WIT package `tensorwasm:gpu` ([`gpu`],
//! `wit/gpu.wit`), on a GPU context of the tenant's like a core module's,
//! Wasm kernels over the component's own memory among it
//! ([`GuestComponent`] keeps the core module they come from). A component
//! that imports anything else fails to instantiate with the import's name.

pub mod gpu;

use std::{ops::Deref, sync::Arc};

use tensorwasm_core::{ManagedAllocator, quota::QuotaLedger};
use wasmtime::{
    Engine, Store,
    component::{Component, Linker, ResourceTable, types::ComponentItem},
};
use wasmtime_wasi::{I32Exit, WasiCtx, WasiCtxView, WasiView, p2::bindings::Command};

use crate::{
    kernel::KernelTarget,
    memory::recording_memories,
    run::one_line,
    runtime::GuestRuntime,
    tenant::{TenantConfig, TenantLimiter},
    wasi::GuestOutput,
};

use gpu::{ComponentGpu, GpuView, KernelMemory, KernelModule};

/// A compiled component and the core module its Wasm kernels come from
/// (found in its binary when it was compiled). Derefs to the wasmtime
/// component.
#[derive(Clone)]
pub struct GuestComponent {
    component: Component,
    kernels: KernelModule,
}

impl GuestComponent {
    /// Where its kernels come from, or why it has none.
    pub fn kernels(&self) -> &KernelModule {
        &self.kernels
    }
}

impl Deref for GuestComponent {
    type Target = Component;

    fn deref(&self) -> &Component {
        &self.component
    }
}

/// The store data of a component guest.
pub struct ComponentState<D: KernelTarget> {
    wasi: WasiCtx,
    table: ResourceTable,
    limiter: TenantLimiter,
    gpu: ComponentGpu<D>,
}

impl<D: KernelTarget> ComponentState<D> {
    /// The component's GPU state.
    pub fn gpu(&self) -> &ComponentGpu<D> {
        &self.gpu
    }

    fn gpu_view(&mut self) -> GpuView<'_, D> {
        GpuView {
            gpu: &mut self.gpu,
            table: &mut self.table,
        }
    }
}

impl<D: KernelTarget> WasiView for ComponentState<D> {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

/// Why a component did not run: the command line's fault (it is no
/// command) or the guest's.
#[derive(Debug)]
pub enum ComponentError {
    /// It exports no `wasi:cli/run`; the message lists what it exports.
    NotACommand(String),
    /// It did not compile, did not instantiate, or trapped.
    Guest(String),
}

/// The version of `tensorwasm:gpu` components get (`wit/gpu.wit`); guests
/// built against an earlier patch of it link too.
pub const GPU_VERSION: &str = "0.1.2";

/// The `wasi:cli/run` interface a command exports, without its version.
const RUN_INTERFACE: &str = "wasi:cli/run@";

/// What a component exports, for messages.
fn exports_list(engine: &Engine, component: &Component) -> String {
    let names = export_names(engine, component);
    if names.is_empty() {
        "it exports nothing".into()
    } else {
        format!("it exports {}", names.join(", "))
    }
}

/// Why component `name` did not instantiate (what the host offers it is
/// the usual reason: a missing import).
fn not_instantiated(name: &str, e: &wasmtime::Error) -> ComponentError {
    ComponentError::Guest(format!(
        "instantiating {name}: {} (components get WASI 0.2 and tensorwasm:gpu@{GPU_VERSION})",
        one_line(&format!("{e:#}"))
    ))
}

/// A component's run: its exit code (0 when `run` returned `ok`, 1 when it
/// returned `err`, what it passed to `wasi:cli/exit`) or its trap, and what
/// it wrote to captured streams either way.
pub struct CommandRun {
    /// The exit code, or the trap in one message.
    pub outcome: Result<i32, String>,
    /// What it wrote.
    pub output: GuestOutput,
    /// Its last failed GPU call, if any (as `wasi_cuda`'s `last_error`).
    pub last_error: Option<String>,
}

/// Runs `wasm`, a component, as a WASI 0.2 command on `runtime`'s engine
/// and driver, as `config`'s tenant: WASI 0.2 and `tensorwasm:gpu`, on a
/// GPU context charged to a ledger of the tenant's quota (which its memory
/// also draws on) under its policy. `name` names it in messages.
///
/// # Safety
///
/// `precompiled`, when given, must be what [`precompile_component`] made
/// of `wasm` (wasmtime checks its version and settings, not that the code
/// is unaltered); code it refuses is compiled afresh.
pub async unsafe fn run_command<D>(
    runtime: &GuestRuntime<D>,
    wasm: &[u8],
    precompiled: Option<&[u8]>,
    name: &str,
    config: &TenantConfig,
) -> Result<CommandRun, ComponentError>
where
    D: KernelTarget + ManagedAllocator + Clone + 'static,
    <D as ManagedAllocator>::Region: Sync,
{
    let loaded = precompiled.and_then(|p| {
        // SAFETY: the caller's promise.
        match unsafe { deserialize_component(runtime.engine(), wasm, p) } {
            Ok(component) => Some(component),
            Err(e) => {
                tracing::warn!(error = %e, "precompiled component refused; compiling it");
                None
            }
        }
    });
    let component = match loaded {
        Some(component) => {
            command_only(runtime.engine(), &component, name)?;
            component
        }
        None => compile_command(runtime, wasm, name)?,
    };
    let ledger = Arc::new(QuotaLedger::new(config.quota));
    run_compiled(runtime, &component, name, config, ledger, None).await
}

/// `wasm`, a component, compiled ahead of time for `engine` (a runtime's):
/// what [`deserialize_component`] and [`run_command`] load without
/// compiling.
pub fn precompile_component(engine: &Engine, wasm: &[u8]) -> wasmtime::Result<Vec<u8>> {
    engine.precompile_component(wasm)
}

/// The component `wasm` from `precompiled`, its
/// [`precompile_component`]d form (its kernels' module found in `wasm`).
///
/// # Safety
///
/// `precompiled` must be what [`precompile_component`] made of `wasm`:
/// wasmtime checks its version and settings, not that the code is
/// unaltered (`wasmtime::component::Component::deserialize`'s contract).
pub unsafe fn deserialize_component(
    engine: &Engine,
    wasm: &[u8],
    precompiled: &[u8],
) -> wasmtime::Result<GuestComponent> {
    // SAFETY: the caller's promise.
    let component = unsafe { Component::deserialize(engine, precompiled)? };
    Ok(GuestComponent {
        component,
        kernels: KernelModule::of(wasm),
    })
}

/// Whether a binary is a component (not a core module).
pub fn is_component_binary(wasm: &[u8]) -> bool {
    wasmparser::Parser::is_component(wasm)
}

/// Compiles `wasm` on `runtime`'s engine and checks that it is a WASI 0.2
/// command (it exports `wasi:cli/run`). `name` names it in messages.
pub fn compile_command<D>(
    runtime: &GuestRuntime<D>,
    wasm: &[u8],
    name: &str,
) -> Result<GuestComponent, ComponentError>
where
    D: KernelTarget + ManagedAllocator + Clone + 'static,
    <D as ManagedAllocator>::Region: Sync,
{
    let component = compile_component(runtime.engine(), wasm, name)?;
    command_only(runtime.engine(), &component, name)?;
    Ok(component)
}

/// `NotACommand` unless `component` exports `wasi:cli/run`.
fn command_only(
    engine: &Engine,
    component: &GuestComponent,
    name: &str,
) -> Result<(), ComponentError> {
    if is_command(engine, component) {
        Ok(())
    } else {
        Err(ComponentError::NotACommand(format!(
            "{name} exports no `wasi:cli/run` (it is not a WASI 0.2 command component; {})",
            exports_list(engine, component)
        )))
    }
}

/// Compiles `wasm`, a component, on `engine` (a runtime's: a command or
/// not), and finds the core module its kernels come from.
pub fn compile_component(
    engine: &Engine,
    wasm: &[u8],
    name: &str,
) -> Result<GuestComponent, ComponentError> {
    let component = Component::new(engine, wasm).map_err(|e| {
        ComponentError::Guest(format!("compiling {name}: {}", one_line(&format!("{e:#}"))))
    })?;
    Ok(GuestComponent {
        component,
        kernels: KernelModule::of(wasm),
    })
}

/// Whether `component` (compiled on `engine`) is a WASI 0.2 command: it
/// exports `wasi:cli/run`.
pub fn is_command(engine: &Engine, component: &Component) -> bool {
    component.component_type().exports(engine).any(|(n, item)| {
        n.starts_with(RUN_INTERFACE) && matches!(item.ty, ComponentItem::ComponentInstance(_))
    })
}

/// What `component` (compiled on `engine`) exports, by name.
pub fn export_names(engine: &Engine, component: &Component) -> Vec<String> {
    component
        .component_type()
        .exports(engine)
        .map(|(n, _)| n.to_string())
        .collect()
}

/// Runs `component`, a command [`compile_command`] made, as `config`'s
/// tenant with its GPU work and memory charged to `ledger` (a server's
/// tenant shares one across its guests). With `yield_fuel`, the guest
/// yields to the executor after that much fuel, so a timeout around the
/// returned future can stop a long run.
pub async fn run_compiled<D>(
    runtime: &GuestRuntime<D>,
    component: &GuestComponent,
    name: &str,
    config: &TenantConfig,
    ledger: Arc<QuotaLedger>,
    yield_fuel: Option<u64>,
) -> Result<CommandRun, ComponentError>
where
    D: KernelTarget + ManagedAllocator + Clone + 'static,
    <D as ManagedAllocator>::Region: Sync,
{
    let (mut store, linker, output) = new_store(runtime, component, config, ledger, yield_fuel)?;
    let instance = instantiate(&mut store, &linker, component, name).await?;
    let command = Command::new(&mut store, &instance).map_err(|e| not_instantiated(name, &e))?;
    let outcome = command.wasi_cli_run().call_run(&mut store).await;
    let outcome = match outcome {
        Ok(Ok(())) => Ok(0),
        Ok(Err(())) => Ok(1),
        Err(e) => match e.downcast_ref::<I32Exit>() {
            Some(exit) => Ok(exit.0),
            None => {
                tracing::warn!("component trapped: {e:#}");
                Err(format!("guest function `wasi:cli/run#run` failed: {e:#}"))
            }
        },
    };
    let last = store.data().gpu.context().last_error();
    let last_error = (!last.is_empty()).then(|| last.to_string());
    Ok(CommandRun {
        outcome,
        output,
        last_error,
    })
}

/// A store for `component` as `config`'s tenant on `runtime` (WASI 0.2
/// and `tensorwasm:gpu` linked, its kernels' module registered, its GPU
/// work and memory charged to `ledger`, its fuel set, yielding every
/// `yield_fuel` when given), the linker, and its output.
#[allow(clippy::type_complexity)]
fn new_store<D>(
    runtime: &GuestRuntime<D>,
    component: &GuestComponent,
    config: &TenantConfig,
    ledger: Arc<QuotaLedger>,
    yield_fuel: Option<u64>,
) -> Result<
    (
        Store<ComponentState<D>>,
        Linker<ComponentState<D>>,
        GuestOutput,
    ),
    ComponentError,
>
where
    D: KernelTarget + ManagedAllocator + Clone + 'static,
    <D as ManagedAllocator>::Region: Sync,
{
    let engine = runtime.engine();
    let guest = |m: String| ComponentError::Guest(m);
    let mut linker = Linker::<ComponentState<D>>::new(engine);
    wasmtime_wasi::p2::add_to_linker_async(&mut linker)
        .map_err(|e| guest(format!("linking WASI 0.2: {e:#}")))?;
    gpu::add_to_linker(&mut linker, ComponentState::gpu_view)
        .map_err(|e| guest(format!("linking tensorwasm:gpu: {e:#}")))?;
    let (wasi, output) = config
        .wasi
        .build_p2()
        .map_err(|e| guest(format!("tenant `{}`: {e}", config.name)))?;
    // A `buffer.read` list lands in the component's memory: at most the
    // runtime's per-memory limit and the tenant's guest-memory quota.
    let read_limit = runtime
        .memory_creator()
        .map_or(u64::MAX, |c| c.limit() as u64)
        .min(ledger.limit(tensorwasm_core::quota::Resource::GuestMemoryBytes));
    let cuda = runtime
        .tenant_context(config, &ledger)
        .map_err(|e| guest(one_line(&format!("{e:#}"))))?;
    let mut gpu = ComponentGpu::new(cuda, read_limit);
    gpu.set_kernels(
        component.kernels.clone(),
        Arc::clone(runtime.kernel_cache()),
    );
    let mut store = Store::new(
        engine,
        ComponentState {
            wasi,
            table: ResourceTable::new(),
            limiter: TenantLimiter::new(ledger),
            gpu,
        },
    );
    store.limiter(|s| &mut s.limiter);
    store
        .set_fuel(config.guest_fuel.unwrap_or(u64::MAX))
        .map_err(|e| guest(format!("{e:#}")))?;
    if yield_fuel.is_some() {
        store
            .fuel_async_yield_interval(yield_fuel)
            .map_err(|e| guest(format!("{e:#}")))?;
    }
    Ok((store, linker, output))
}

/// Instantiates `component` in `store`, and gives the store's GPU state
/// the memory the instance made, for the component's kernels.
async fn instantiate<D>(
    store: &mut Store<ComponentState<D>>,
    linker: &Linker<ComponentState<D>>,
    component: &GuestComponent,
    name: &str,
) -> Result<wasmtime::component::Instance, ComponentError>
where
    D: KernelTarget + ManagedAllocator + Clone + 'static,
    <D as ManagedAllocator>::Region: Sync,
{
    let (instance, made) =
        recording_memories(linker.instantiate_async(&mut *store, &component.component)).await;
    let instance = instance.map_err(|e| not_instantiated(name, &e))?;
    store
        .data_mut()
        .gpu
        .set_memory(KernelMemory::from_made(made));
    Ok(instance)
}

/// An instance of a component kept for calls of its exported functions
/// (a server's instances): its store, with the tenant's WASI 0.2 and GPU
/// context, and what it wrote.
pub struct ComponentInstance<D: KernelTarget + 'static> {
    store: Store<ComponentState<D>>,
    instance: wasmtime::component::Instance,
    output: GuestOutput,
}

impl<D> ComponentInstance<D>
where
    D: KernelTarget + ManagedAllocator + Clone + 'static,
    <D as ManagedAllocator>::Region: Sync,
{
    /// Instantiates `component` (compiled on `runtime`'s engine) for
    /// `config`'s tenant, its GPU work and memory charged to `ledger`,
    /// yielding every `yield_fuel` when given. `name` names it in messages.
    pub async fn new(
        runtime: &GuestRuntime<D>,
        component: &GuestComponent,
        name: &str,
        config: &TenantConfig,
        ledger: Arc<QuotaLedger>,
        yield_fuel: Option<u64>,
    ) -> Result<Self, ComponentError> {
        let (mut store, linker, output) =
            new_store(runtime, component, config, ledger, yield_fuel)?;
        let instance = instantiate(&mut store, &linker, component, name).await?;
        Ok(ComponentInstance {
            store,
            instance,
            output,
        })
    }

    /// The exported function `export`: a function the component exports
    /// itself (`name`), or one of an interface it exports
    /// (`interface#name`, e.g. `example:calc/ops#add`).
    pub fn func(&mut self, export: &str) -> Option<wasmtime::component::Func> {
        let (outer, inner) = match export.rsplit_once('#') {
            Some((interface, name)) => (Some(interface), name),
            None => (None, export),
        };
        let parent = match outer {
            Some(interface) => Some(self.instance.get_export_index(
                &mut self.store,
                None,
                interface,
            )?),
            None => None,
        };
        let index = self
            .instance
            .get_export_index(&mut self.store, parent.as_ref(), inner)?;
        self.instance.get_func(&mut self.store, index)
    }

    /// The parameter and result types of `func`.
    pub fn types(
        &self,
        func: &wasmtime::component::Func,
    ) -> (
        Vec<wasmtime::component::types::Type>,
        Vec<wasmtime::component::types::Type>,
    ) {
        let ty = func.ty(&self.store);
        let params = ty.params().map(|(_, t)| t).collect();
        let results = ty.results().collect();
        (params, results)
    }

    /// Calls `func` with `params`: its results.
    pub async fn call(
        &mut self,
        func: wasmtime::component::Func,
        params: &[wasmtime::component::Val],
    ) -> wasmtime::Result<Vec<wasmtime::component::Val>> {
        let count = func.ty(&self.store).results().len();
        let mut results = vec![wasmtime::component::Val::Bool(false); count];
        func.call_async(&mut self.store, params, &mut results)
            .await?;
        Ok(results)
    }

    /// What it wrote so far.
    pub fn output(&self) -> &GuestOutput {
        &self.output
    }

    /// Its GPU state (its last error, its ledger).
    pub fn gpu(&self) -> &ComponentGpu<D> {
        &self.store.data().gpu
    }
}
