//! [`WasiCudaCtx`]: one guest's view of the device (its stream, handle
//! tables, limits and policy) and how it is made. The bodies of its calls
//! sit beside it, one file per resource (`buffers`, `modules`, `launch`,
//! `wait`, `device`, `errors`); the wasmtime glue is the parent module's,
//! argument decoding `tensorwasm_core::abi`'s.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use tensorwasm_core::{
    DevicePtr, GpuDriver,
    abi::{self, AbiError, Errno, GuestMemoryRef, HandleKind, HandleTable, OwnerId},
    lower::translate::KernelLimits,
    quota::{OwnedCharge, QuotaLedger, Resource, TenantQuota},
};

use crate::{
    builtins::BuiltinCache,
    kernel::{CompileBounds, KernelCache, KernelSource},
    memory::{GuestMemoryLookup, GuestRegionInfo},
};

use super::{
    buffers::GuestBuffer,
    errors::driver_error,
    gpu_time::GpuClock,
    kernel_names::ResolvedNames,
    launch::LaunchEntry,
    modules::{FunctionEntry, ModuleEntry},
    stats::GuestStats,
    wait::{LaunchQueue, SpinState, WaitPolicy},
};

/// How many objects of each kind one guest may hold at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WasiCudaLimits {
    /// Live device buffers.
    pub buffers: usize,
    /// Loaded modules.
    pub modules: usize,
    /// Live function handles.
    pub functions: usize,
    /// Launches in flight at once (queued and not yet seen finished); a
    /// launch past it waits for the guest's oldest (`docs/ABI.md`,
    /// `launch`). Handles of finished launches not yet waited for do not
    /// count: up to 2^16 of them are kept.
    pub launches: usize,
    /// Fuel of each thread of a Wasm kernel launch: every loop iteration
    /// spends one; a thread that runs out traps with "out of fuel".
    pub kernel_fuel: u64,
    /// Nanoseconds one Wasm kernel launch may run, from its first thread's
    /// clock check: then its threads stop and it traps with "launch time
    /// limit exceeded" (`u64::MAX`: no limit).
    pub launch_time_ns: u64,
    /// The share of the device's thread slots, in percent (1 ..= 100), one
    /// Wasm kernel launch may occupy at once; a larger grid runs as virtual
    /// blocks over that many physical ones (`docs/kernels.md`).
    pub launch_share_percent: u64,
    /// The largest kernel `kernel_get` makes (the host's caps,
    /// [`KernelLimits::HOST`], hold whatever this says).
    pub kernel_limits: KernelLimits,
    /// How long `kernel_get` waits for one kernel's compile.
    pub compile_wait: Duration,
}

impl Default for WasiCudaLimits {
    fn default() -> Self {
        WasiCudaLimits {
            buffers: 4096,
            modules: 256,
            functions: 4096,
            launches: 65536,
            kernel_fuel: 1 << 24,
            launch_time_ns: u64::MAX,
            launch_share_percent: 100,
            kernel_limits: KernelLimits::HOST,
            compile_wait: Duration::MAX,
        }
    }
}

/// What a tenant may load and run. Raw PTX and cubin modules are not
/// sandboxed (a kernel may read or write any device memory of the process
/// and can fault the shared context), so only trusted tenants get them;
/// Wasm kernels and the built-in tensor kernels are checked by construction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TenantPolicy {
    /// `module_load_ptx` and `module_load_cubin`.
    pub raw_modules: bool,
    /// `kernel_get` (the guest's own functions, lowered and sandboxed).
    pub wasm_kernels: bool,
    /// `tensor_op` (the built-in kernels).
    pub builtins: bool,
}

impl TenantPolicy {
    /// Everything: for code the host trusts as much as itself.
    pub const TRUSTED: TenantPolicy = TenantPolicy {
        raw_modules: true,
        wasm_kernels: true,
        builtins: true,
    };
    /// Sandboxed kernels only: Wasm kernels and built-ins, no raw modules.
    pub const UNTRUSTED: TenantPolicy = TenantPolicy {
        raw_modules: false,
        wasm_kernels: true,
        builtins: true,
    };
}

impl Default for TenantPolicy {
    /// [`TenantPolicy::UNTRUSTED`]: a tenant is untrusted unless said.
    fn default() -> Self {
        TenantPolicy::UNTRUSTED
    }
}

/// The guest's linear memory as one call sees it.
pub(crate) struct GuestMem<'a> {
    pub(crate) bytes: &'a mut [u8],
}

impl GuestMem<'_> {
    pub(super) fn host_base(&self) -> usize {
        self.bytes.as_ptr() as usize
    }
}

/// The state behind one guest's `wasi_cuda` imports. The embedder owns it
/// (in the store's data) and hands [`add_to_linker`](super::add_to_linker)
/// a function that reaches it.
pub struct WasiCudaCtx<D: GpuDriver> {
    pub(crate) driver: D,
    pub(crate) stream: Arc<D::Stream>,
    memories: Option<Arc<dyn GuestMemoryLookup>>,
    /// The region behind the guest's memory, found once: memories never move.
    region: Option<GuestRegionInfo>,
    pub(crate) buffers: HandleTable<GuestBuffer<D>>,
    pub(crate) modules: HandleTable<Arc<ModuleEntry<D>>>,
    pub(crate) functions: HandleTable<Arc<FunctionEntry<D>>>,
    pub(crate) launches: HandleTable<LaunchEntry<D>>,
    /// The launches in flight, in order, and the limit on them.
    pub(super) queue: LaunchQueue,
    /// How `wait` waits, and what the adaptive policy has learnt.
    pub(super) waits: SpinState,
    /// When the current wait began.
    pub(super) wait_began: Option<Instant>,
    /// The guest module's Wasm, for `kernel_get`.
    pub(crate) kernel_source: Option<KernelSource>,
    /// Kernels the guest named by export or function pointer, resolved.
    pub(super) kernel_names: ResolvedNames,
    pub(crate) kernels: Arc<KernelCache<D>>,
    /// The built-in tensor kernels loaded on this driver.
    pub(super) builtins: Arc<BuiltinCache<D>>,
    /// Status words (`docs/kernels.md`) of Wasm kernel launches, one per
    /// launch slot, in managed memory (made on the first kernel launch).
    pub(super) status: Option<D::ManagedBuffer>,
    pub(super) kernel_fuel: u64,
    /// Each Wasm kernel launch's time limit, in nanoseconds.
    pub(super) launch_time_ns: u64,
    /// The share of the device one Wasm kernel launch may occupy.
    pub(super) launch_share_percent: u64,
    /// What one `kernel_get` may cost.
    pub(crate) compile_bounds: CompileBounds,
    pub(crate) last_error: String,
    /// Counters a host reports ([`set_stats`](Self::set_stats)).
    pub(super) stats: Option<GuestStats>,
    /// The GPU time of its launches, when `stats` is set.
    pub(super) gpu_clock: Option<GpuClock<D>>,
    /// The tenant's quota ledger (shared by every context of the tenant).
    pub(super) ledger: Arc<QuotaLedger>,
    pub(super) policy: TenantPolicy,
    /// The charge for this context's stream.
    _stream_charge: OwnedCharge,
}

impl<D: GpuDriver> WasiCudaCtx<D> {
    /// A context on `driver` with its own stream. `memories` is the registry
    /// of the engine's managed memory creator
    /// ([`ManagedMemoryCreator::lookup`](crate::memory::ManagedMemoryCreator::lookup));
    /// without it the guest's memory is not device-addressable and launches
    /// with guest pointers are refused.
    pub fn new(
        driver: D,
        memories: Option<Arc<dyn GuestMemoryLookup>>,
        limits: WasiCudaLimits,
    ) -> Result<Self, D::Error> {
        let ledger = Arc::new(QuotaLedger::new(TenantQuota::unlimited()));
        let stream_charge = match QuotaLedger::try_reserve_owned(&ledger, Resource::Streams, 1) {
            Ok(r) => r.commit(),
            Err(_) => unreachable!("an unlimited ledger refuses nothing"),
        };
        Self::build(
            driver,
            memories,
            limits,
            ledger,
            TenantPolicy::TRUSTED,
            stream_charge,
        )
    }

    /// A context for one tenant: every buffer, module, function, launch and
    /// stream it makes is charged to `ledger` (shared with the tenant's
    /// other contexts and its guest memory) before the driver is asked, and
    /// `policy` decides what it may load. Wasm kernels get the quota's
    /// fuel or `limits.kernel_fuel`, whichever is less, and likewise for
    /// the launch time limit (`launch_time_ns`). Fails with `EQUOTA`
    /// when the tenant has no stream left.
    pub fn for_tenant(
        driver: D,
        memories: Option<Arc<dyn GuestMemoryLookup>>,
        limits: WasiCudaLimits,
        ledger: Arc<QuotaLedger>,
        policy: TenantPolicy,
    ) -> Result<Self, AbiError> {
        let stream_charge = QuotaLedger::try_reserve_owned(&ledger, Resource::Streams, 1)?.commit();
        // The host's cap and the tenant's quota: the smaller one holds.
        let quota = ledger.quota();
        let limits = WasiCudaLimits {
            kernel_fuel: limits.kernel_fuel.min(quota.kernel_fuel()),
            launch_time_ns: limits.launch_time_ns.min(quota.launch_time_ns()),
            launch_share_percent: limits
                .launch_share_percent
                .min(quota.launch_share_percent()),
            kernel_limits: limits.kernel_limits.min(KernelLimits {
                operators: quota.kernel_operators(),
                branches: quota.kernel_branches(),
            }),
            compile_wait: limits
                .compile_wait
                .min(Duration::from_nanos(quota.compile_time_ns())),
            ..limits
        };
        Self::build(driver, memories, limits, ledger, policy, stream_charge)
            .map_err(|e| driver_error("create_stream", e))
    }

    fn build(
        driver: D,
        memories: Option<Arc<dyn GuestMemoryLookup>>,
        limits: WasiCudaLimits,
        ledger: Arc<QuotaLedger>,
        policy: TenantPolicy,
        stream_charge: OwnedCharge,
    ) -> Result<Self, D::Error> {
        let stream = Arc::new(driver.create_stream()?);
        let owner = OwnerId::allocate();
        Ok(WasiCudaCtx {
            driver,
            stream,
            memories,
            region: None,
            buffers: HandleTable::new(owner, HandleKind::Buffer, limits.buffers),
            modules: HandleTable::new(owner, HandleKind::Module, limits.modules),
            functions: HandleTable::new(owner, HandleKind::Function, limits.functions),
            launches: HandleTable::new(owner, HandleKind::Launch, abi::handle::MAX_TABLE_CAPACITY),
            queue: LaunchQueue::new(limits.launches),
            waits: SpinState::new(WaitPolicy::default()),
            wait_began: None,
            kernel_source: None,
            kernel_names: ResolvedNames::default(),
            kernels: Arc::default(),
            builtins: Arc::default(),
            status: None,
            kernel_fuel: limits.kernel_fuel,
            launch_time_ns: limits.launch_time_ns,
            launch_share_percent: limits.launch_share_percent.clamp(1, 100),
            compile_bounds: CompileBounds {
                limits: limits.kernel_limits,
                wait: limits.compile_wait,
            },
            last_error: String::new(),
            stats: None,
            gpu_clock: None,
            ledger,
            policy,
            _stream_charge: stream_charge,
        })
    }

    /// The tenant's quota ledger: what it holds now, against its limits.
    pub fn ledger(&self) -> &Arc<QuotaLedger> {
        &self.ledger
    }

    /// What this guest may load and run.
    pub fn policy(&self) -> TenantPolicy {
        self.policy
    }

    /// Charges `amount` of `resource` to the tenant, or `EQUOTA`.
    pub(crate) fn charge(&self, resource: Resource, amount: u64) -> Result<OwnedCharge, AbiError> {
        Ok(QuotaLedger::try_reserve_owned(&self.ledger, resource, amount)?.commit())
    }

    /// `EPERM` unless the policy allows `what`.
    pub(super) fn allowed(&self, allowed: bool, what: &str) -> Result<(), AbiError> {
        if allowed {
            Ok(())
        } else {
            Err(AbiError::new(
                Errno::EPERM,
                format!("this tenant's policy does not allow {what}"),
            ))
        }
    }

    /// Lets the guest turn functions of `source` (its own module) into
    /// kernels, made through `cache` (shared by the guests of one driver).
    pub fn set_kernel_source(&mut self, source: KernelSource, cache: Arc<KernelCache<D>>) {
        self.kernel_source = Some(source);
        self.kernel_names.clear();
        self.kernels = cache;
    }

    /// Shares `cache` of built-in kernels (one per driver is enough).
    pub fn set_builtin_cache(&mut self, cache: Arc<BuiltinCache<D>>) {
        self.builtins = cache;
    }

    /// Counts this guest's launches, waits and GPU time into `stats`
    /// (the GPU time costs an event record or two per launch:
    /// `gpu_time.rs`).
    pub fn set_stats(&mut self, stats: GuestStats) {
        self.gpu_clock = Some(GpuClock::new(stats.clone()));
        self.stats = Some(stats);
    }

    /// The driver this guest runs on.
    pub fn driver(&self) -> &D {
        &self.driver
    }

    /// Live buffer, module, function and launch handles, in that order.
    pub fn live_handles(&self) -> [usize; 4] {
        [
            self.buffers.len(),
            self.modules.len(),
            self.functions.len(),
            self.launches.len(),
        ]
    }

    /// The region behind the guest's memory, if the managed allocator made it.
    pub(super) fn region(&mut self, host_base: usize) -> Option<&GuestRegionInfo> {
        let stale = self
            .region
            .as_ref()
            .is_none_or(|r| r.host_base != host_base);
        if stale {
            self.region = self.memories.as_ref().and_then(|m| m.lookup(host_base));
        }
        self.region.as_ref()
    }

    /// The guest's memory as the ABI's decoders see it, and the region
    /// behind it (none when the memory is not managed memory).
    pub(super) fn guest_ref(
        &mut self,
        mem: &GuestMem<'_>,
    ) -> (GuestMemoryRef, Option<GuestRegionInfo>) {
        let len = mem.bytes.len();
        match self.region(mem.host_base()).cloned() {
            Some(region) => (
                GuestMemoryRef {
                    base: region.device_base,
                    len,
                    device_addressable: region.device_addressable,
                },
                Some(region),
            ),
            None => (
                GuestMemoryRef {
                    base: DevicePtr(mem.host_base() as u64),
                    len,
                    device_addressable: false,
                },
                None,
            ),
        }
    }
}

impl<D: GpuDriver> Drop for WasiCudaCtx<D> {
    fn drop(&mut self) {
        // Kernels may still be using the guest's buffers and memory: let them
        // finish before anything they touch is freed.
        let _ = self.driver.stream_synchronize(&self.stream);
        if let Some(clock) = &mut self.gpu_clock {
            clock.collect(&self.driver);
        }
    }
}

/// Checks that an out-pointer can take a `u64` before anything changes, so
/// a bad one leaves nothing half done (the read has no effect).
pub(super) fn check_out_u64(mem: &[u8], out: u32) -> Result<(), AbiError> {
    abi::read_u64(mem, out).map(drop)
}
