//! [`GuestRuntime`]: an engine, a linker with WASI preview 1 and the
//! `wasi_cuda` imports, and a managed memory creator, for one driver. The `tensorwasm run` command, the
//! tests and the benchmarks build guests through it; an embedder with its own
//! store data uses [`memory`](crate::memory) and
//! [`crate::wasi::add_to_linker`] directly instead.

use std::{path::Path, sync::Arc};

use tensorwasm_core::{GpuDriver, ManagedAllocator, quota::QuotaLedger};
use wasmtime::{Cache, CacheConfig, Config, Engine, Instance, Linker, Store};

use crate::{
    builtins::BuiltinCache,
    kernel::{GuestModule, KernelCache, KernelTarget},
    memory::{ManagedMemoryCreator, configure_engine},
    tenant_config::{TenantConfig, TenantLimiter},
    wasi::{self, GuestOutput, WasiP1Ctx},
    wasi_cuda::{WasiCudaCtx, WasiCudaLimits},
};

/// The store data of a guest run by a [`GuestRuntime`].
pub struct GuestState<D: GpuDriver> {
    /// The guest's `wasi_cuda` context.
    pub cuda: WasiCudaCtx<D>,
    /// Ties the guest's memory growth to its tenant's quota.
    pub limiter: TenantLimiter,
    /// The guest's WASI preview 1 context (what its config lets it reach).
    pub wasi: WasiP1Ctx,
    /// What the guest wrote to its captured stdout and stderr.
    pub output: GuestOutput,
}

/// Builds engines, stores and instances for guests on one driver.
pub struct GuestRuntime<D>
where
    D: GpuDriver + ManagedAllocator,
{
    driver: D,
    engine: Engine,
    linker: Linker<GuestState<D>>,
    creator: Option<Arc<ManagedMemoryCreator<D>>>,
    limits: WasiCudaLimits,
    kernels: Arc<KernelCache<D>>,
    builtins: Arc<BuiltinCache<D>>,
}

impl<D> GuestRuntime<D>
where
    D: KernelTarget + ManagedAllocator + Clone + 'static,
    <D as ManagedAllocator>::Region: Sync,
{
    /// Guests whose linear memory is `driver`'s managed memory, at most
    /// `memory_limit` bytes each.
    pub fn new(driver: D, memory_limit: usize) -> wasmtime::Result<Self> {
        let creator = ManagedMemoryCreator::new(driver.clone(), memory_limit);
        let mut config = Config::new();
        configure_engine(&mut config, creator.clone());
        Self::build(driver, config, Some(creator))
    }

    /// As [`new`](Self::new), with compiled code kept in the directory
    /// `dir` (wasmtime's compilation cache, keyed by the Wasm, the engine's
    /// settings and wasmtime's version): a later runtime that compiles the
    /// same guest loads it from there instead. A big guest (a component
    /// that embeds CPython or a JavaScript engine) then compiles once.
    /// What is in `dir` runs as it is, unchecked: only a directory that
    /// nobody else can write to is safe.
    pub fn with_compile_cache(
        driver: D,
        memory_limit: usize,
        dir: &Path,
    ) -> wasmtime::Result<Self> {
        let creator = ManagedMemoryCreator::new(driver.clone(), memory_limit);
        let mut config = Config::new();
        configure_engine(&mut config, creator.clone());
        let mut cache = CacheConfig::new();
        cache.with_directory(dir);
        config.cache(Some(Cache::new(cache)?));
        Self::build(driver, config, Some(creator))
    }

    /// Guests with wasmtime's own (host) linear memory: a kernel cannot
    /// address it, so launches with guest pointers are refused. For hosts
    /// that need wasmtime's default memory, and to test that refusal.
    pub fn with_host_memory(driver: D) -> wasmtime::Result<Self> {
        Self::build(driver, Config::new(), None)
    }

    fn build(
        driver: D,
        mut config: Config,
        creator: Option<Arc<ManagedMemoryCreator<D>>>,
    ) -> wasmtime::Result<Self> {
        // Tenants' guest code is bounded by fuel (deterministic, and time
        // spent waiting for the GPU costs none); trusted stores get all of it.
        config.consume_fuel(true);
        // Wasm's atomic operators (the threads proposal), which kernels use
        // (docs/kernels.md, "Atomics"); guests' memories stay unshared.
        config.wasm_threads(true);
        let engine = Engine::new(&config)?;
        let mut linker = Linker::new(&engine);
        wasi::add_to_linker(
            &mut linker,
            |s: &mut GuestState<D>| &mut s.cuda,
            |s: &mut GuestState<D>| &mut s.wasi,
        )?;
        Ok(GuestRuntime {
            driver,
            engine,
            linker,
            creator,
            limits: WasiCudaLimits::default(),
            kernels: Arc::default(),
            builtins: Arc::default(),
        })
    }

    /// Sets the per-guest handle limits of stores made from now on.
    pub fn set_limits(&mut self, limits: WasiCudaLimits) {
        self.limits = limits;
    }

    /// The engine.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// The driver.
    pub fn driver(&self) -> &D {
        &self.driver
    }

    /// The linker with WASI preview 1 and every `wasi_cuda` import; add more imports to it
    /// before instantiating if the guest needs them.
    pub fn linker_mut(&mut self) -> &mut Linker<GuestState<D>> {
        &mut self.linker
    }

    /// The managed memory creator (absent with
    /// [`with_host_memory`](Self::with_host_memory)): snapshots and restores.
    pub fn memory_creator(&self) -> Option<&Arc<ManagedMemoryCreator<D>>> {
        self.creator.as_ref()
    }

    /// Compiles a guest from Wasm binary or text (keeping the binary, from
    /// which its Wasm kernels are translated).
    pub fn compile(&self, bytes: impl AsRef<[u8]>) -> wasmtime::Result<GuestModule> {
        GuestModule::new(&self.engine, bytes.as_ref())
    }

    /// The cache of this runtime's Wasm kernels (translated, lowered and
    /// loaded once per module and function).
    pub fn kernel_cache(&self) -> &Arc<KernelCache<D>> {
        &self.kernels
    }

    /// The built-in tensor kernels loaded on this runtime's driver.
    pub fn builtin_cache(&self) -> &Arc<BuiltinCache<D>> {
        &self.builtins
    }

    /// A store for one trusted guest, with its own context and stream: no
    /// quota, every kind of module allowed, no fuel bound, the host's stdio
    /// and nothing else for WASI ([`WasiConfig::inherit`](crate::wasi::WasiConfig::inherit)). Untrusted code
    /// goes in a [`Tenant`](crate::tenant::Tenant).
    pub fn store(&self) -> wasmtime::Result<Store<GuestState<D>>> {
        let ledger = Arc::new(QuotaLedger::new(
            tensorwasm_core::quota::TenantQuota::unlimited(),
        ));
        self.tenant_store(&TenantConfig::trusted("guest"), ledger)
    }

    /// A store for a tenant: its context charges `ledger` and follows the
    /// config's policy, its memory growth is charged to the same ledger,
    /// its guest code gets the config's fuel, and its WASI reaches what the
    /// config's [`wasi`](TenantConfig::wasi) lists.
    pub fn tenant_store(
        &self,
        config: &TenantConfig,
        ledger: Arc<QuotaLedger>,
    ) -> wasmtime::Result<Store<GuestState<D>>> {
        let cuda = self.tenant_context(config, &ledger)?;
        let limiter = TenantLimiter::new(ledger);
        let (wasi, output) = config
            .wasi
            .build()
            .map_err(|e| wasmtime::format_err!("tenant `{}`: {e}", config.name))?;
        let mut store = Store::new(
            &self.engine,
            GuestState {
                cuda,
                limiter,
                wasi,
                output,
            },
        );
        store.limiter(|s| &mut s.limiter);
        store.set_fuel(config.guest_fuel.unwrap_or(u64::MAX))?;
        Ok(store)
    }

    /// A tenant's GPU context on this runtime's driver: its own stream,
    /// this runtime's limits and built-in kernels, charging `ledger` and
    /// following the config's policy (what [`tenant_store`](Self::tenant_store)
    /// puts in a core module's store, and a component's store holds too).
    pub fn tenant_context(
        &self,
        config: &TenantConfig,
        ledger: &Arc<QuotaLedger>,
    ) -> wasmtime::Result<WasiCudaCtx<D>> {
        let lookup = self.creator.as_ref().map(|c| c.lookup());
        let mut cuda = WasiCudaCtx::for_tenant(
            self.driver.clone(),
            lookup,
            self.limits,
            Arc::clone(ledger),
            config.policy,
        )
        .map_err(|e| wasmtime::format_err!("tenant `{}`: {e}", config.name))?;
        cuda.set_builtin_cache(Arc::clone(&self.builtins));
        Ok(cuda)
    }

    /// Instantiates `module` in `store`; the guest may turn the module's
    /// functions into kernels (`kernel_get`).
    pub async fn instantiate(
        &self,
        store: &mut Store<GuestState<D>>,
        module: &GuestModule,
    ) -> wasmtime::Result<Instance> {
        store
            .data_mut()
            .cuda
            .set_kernel_source(module.source().clone(), Arc::clone(&self.kernels));
        self.linker.instantiate_async(store, module).await
    }
}
