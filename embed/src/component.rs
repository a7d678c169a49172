//! WASI 0.2 components for `tensorwasm run`: a command component's
//! `wasi:cli/run` on wasmtime-wasi's WASI 0.2 (`p2`), with the same
//! capabilities a core module gets from its tenant (arguments, environment,
//! preopened directories, stdio, output cap), the same memory quota and the
//! same fuel. Components get no GPU API yet: nothing of `wasi_cuda` is
//! linked, so a component that imports anything but WASI 0.2 fails to
//! instantiate with the import's name.

use std::sync::Arc;

use tensorwasm_core::quota::QuotaLedger;
use wasmtime::{
    Engine, Store,
    component::{Component, Linker, ResourceTable, types::ComponentItem},
};
use wasmtime_wasi::{I32Exit, WasiCtx, WasiCtxView, WasiView, p2::bindings::Command};

use crate::{
    run::one_line,
    tenant::{TenantConfig, TenantLimiter},
    wasi::GuestOutput,
};

/// The store data of a component guest.
pub struct ComponentState {
    wasi: WasiCtx,
    table: ResourceTable,
    limiter: TenantLimiter,
}

impl WasiView for ComponentState {
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

/// The `wasi:cli/run` interface a command exports, without its version.
const RUN_INTERFACE: &str = "wasi:cli/run@";

/// What a component exports, for messages.
fn exports_list(engine: &Engine, component: &Component) -> String {
    let names: Vec<String> = component
        .component_type()
        .exports(engine)
        .map(|(name, _)| name.to_string())
        .collect();
    if names.is_empty() {
        "it exports nothing".into()
    } else {
        format!("it exports {}", names.join(", "))
    }
}

/// A component's run: its exit code (0 when `run` returned `ok`, 1 when it
/// returned `err`, what it passed to `wasi:cli/exit`) or its trap, and what
/// it wrote to captured streams either way.
pub struct CommandRun {
    /// The exit code, or the trap in one message.
    pub outcome: Result<i32, String>,
    /// What it wrote.
    pub output: GuestOutput,
}

/// Runs `wasm`, a component, as a WASI 0.2 command on `engine` (which
/// must enable async and fuel, as
/// [`GuestRuntime`](crate::runtime::GuestRuntime)'s does), as `config`'s
/// tenant. `name` names it in messages.
pub async fn run_command(
    engine: &Engine,
    wasm: &[u8],
    name: &str,
    config: &TenantConfig,
) -> Result<CommandRun, ComponentError> {
    let guest = |m: String| ComponentError::Guest(m);
    let component = Component::new(engine, wasm)
        .map_err(|e| guest(format!("compiling {name}: {}", one_line(&format!("{e:#}")))))?;
    let runs = component.component_type().exports(engine).any(|(n, item)| {
        n.starts_with(RUN_INTERFACE) && matches!(item.ty, ComponentItem::ComponentInstance(_))
    });
    if !runs {
        return Err(ComponentError::NotACommand(format!(
            "{name} exports no `wasi:cli/run` (it is not a WASI 0.2 command component; {})",
            exports_list(engine, &component)
        )));
    }
    let mut linker = Linker::<ComponentState>::new(engine);
    wasmtime_wasi::p2::add_to_linker_async(&mut linker)
        .map_err(|e| guest(format!("linking WASI 0.2: {e:#}")))?;
    let (wasi, output) = config
        .wasi
        .build_p2()
        .map_err(|e| guest(format!("tenant `{}`: {e}", config.name)))?;
    let ledger = Arc::new(QuotaLedger::new(config.quota));
    let mut store = Store::new(
        engine,
        ComponentState {
            wasi,
            table: ResourceTable::new(),
            limiter: TenantLimiter::new(ledger),
        },
    );
    store.limiter(|s| &mut s.limiter);
    store
        .set_fuel(config.guest_fuel.unwrap_or(u64::MAX))
        .map_err(|e| guest(format!("{e:#}")))?;
    let command = Command::instantiate_async(&mut store, &component, &linker)
        .await
        .map_err(|e| {
            guest(format!(
                "instantiating {name}: {} (components get WASI 0.2 only; \
                 the GPU API is not available to components yet)",
                one_line(&format!("{e:#}"))
            ))
        })?;
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
    Ok(CommandRun { outcome, output })
}
