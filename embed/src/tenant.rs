//! Tenants: one untrusted party's guest on a shared device. A [`Tenant`]
//! owns its store (its `wasi_cuda` context: stream, handle tables; its WASI
//! context: what it may read, write and print), its quota ledger and its
//! policy; [`TenantLimiter`] ties the guest's linear memory growth to the
//! same ledger, and Wasm fuel bounds the guest's own CPU time.
//! [`TenantConfig`] is what an embedder passes (or `tensorwasm run --tenant
//! FILE` reads from TOML); it and the limiter live in a module below
//! `runtime`, which builds a tenant's store from them, and are re-exported
//! here. docs/tenants.md is the isolation model this implements.

use std::sync::Arc;

use tensorwasm_core::{
    GpuDriver, ManagedAllocator,
    quota::{QuotaLedger, QuotaSnapshot},
};
use wasmtime::{Instance, Store};

use crate::{
    kernel::{GuestModule, KernelTarget},
    runtime::{GuestRuntime, GuestState},
    wasi::GuestOutput,
};

pub use crate::tenant_config::{ConfigError, DEFAULT_GUEST_FUEL, TenantConfig, TenantLimiter};

/// One tenant: its store (and through it its stream, handle tables and
/// guest memory), its ledger and, once instantiated, its instance.
/// Dropping it waits for its work in flight, then frees everything it holds
/// (buffers, modules, functions, the stream, the memory), returning every
/// charge to the ledger.
pub struct Tenant<D>
where
    D: GpuDriver + ManagedAllocator + 'static,
{
    name: String,
    ledger: Arc<QuotaLedger>,
    store: Store<GuestState<D>>,
    instance: Option<Instance>,
    /// The identity of the instantiated module (what a snapshot names).
    module: Option<(u64, usize)>,
}

impl<D> Tenant<D>
where
    D: KernelTarget + ManagedAllocator + Clone + 'static,
    <D as ManagedAllocator>::Region: Sync,
{
    /// A tenant of `runtime` configured by `config`.
    pub fn new(runtime: &GuestRuntime<D>, config: &TenantConfig) -> wasmtime::Result<Self> {
        Self::with_ledger(runtime, config, Arc::new(QuotaLedger::new(config.quota)))
    }

    /// A tenant charging `ledger` (shared with other instances of the same
    /// party, whose quota it holds) instead of a ledger of its own.
    pub fn with_ledger(
        runtime: &GuestRuntime<D>,
        config: &TenantConfig,
        ledger: Arc<QuotaLedger>,
    ) -> wasmtime::Result<Self> {
        let store = runtime.tenant_store(config, Arc::clone(&ledger))?;
        Ok(Tenant {
            name: config.name.clone(),
            ledger,
            store,
            instance: None,
            module: None,
        })
    }

    /// Instantiates `module` as this tenant's guest.
    pub async fn instantiate(
        &mut self,
        runtime: &GuestRuntime<D>,
        module: &GuestModule,
    ) -> wasmtime::Result<Instance> {
        let instance = runtime.instantiate(&mut self.store, module).await?;
        self.instance = Some(instance);
        self.module = Some(module.source().id());
        Ok(instance)
    }

    /// The instance and its module's identity, or an error before
    /// [`instantiate`](Self::instantiate).
    pub fn instantiated(&self) -> wasmtime::Result<(Instance, (u64, usize))> {
        match (self.instance, self.module) {
            (Some(instance), Some(module)) => Ok((instance, module)),
            _ => Err(wasmtime::Error::msg(format!(
                "tenant `{}` has no instance yet",
                self.name
            ))),
        }
    }

    /// The tenant's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The guest's instance, once instantiated.
    pub fn instance(&self) -> Option<Instance> {
        self.instance
    }

    /// The tenant's store.
    pub fn store(&self) -> &Store<GuestState<D>> {
        &self.store
    }

    /// What the guest wrote to its captured stdout and stderr.
    pub fn output(&self) -> &GuestOutput {
        &self.store.data().output
    }

    /// The tenant's store, to call its guest.
    pub fn store_mut(&mut self) -> &mut Store<GuestState<D>> {
        &mut self.store
    }

    /// What the tenant holds now against its quota.
    pub fn usage(&self) -> QuotaSnapshot {
        self.ledger.snapshot()
    }

    /// The tenant's ledger (it outlives the tenant: after the drop, every
    /// count in it is back to zero).
    pub fn ledger(&self) -> &Arc<QuotaLedger> {
        &self.ledger
    }
}
