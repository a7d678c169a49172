//! [`WasiCudaCtx`]: one guest's view of the device — its stream, its handle
//! tables and its last error — and the body of every `wasi_cuda` call. The
//! wasmtime glue (reading parameters, finding the guest's memory, async
//! suspension) is in the parent module; argument decoding is in
//! `tensorwasm_core::abi`.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use tensorwasm_core::{
    Advice, DeviceMemory, DevicePtr, Dim3, DriverError, ErrorKind, GpuDriver, KernelParam,
    LaunchConfig, PrefetchTarget,
    abi::{
        self, AbiError, Errno, GuestMemoryRef, Handle, HandleKind, HandleTable, LaunchArg, OwnerId,
    },
    dispatch::{DispatchFuture, dispatch},
    quota::{OwnedCharge, QuotaLedger, Resource, TenantQuota},
};

use tensorwasm_core::lower::{
    KernelAbi, KernelTrap, LowerError, status,
    translate::{KernelGlobal, KernelLimits, StackWindow, WasmType},
};

use crate::{
    builtins::BuiltinCache,
    kernel::{
        CompileBounds, KernelCache, KernelError, KernelSource, KernelTarget, LoadedKernel,
        compile_bounded,
    },
    memory::{GuestMemoryLookup, GuestRegionInfo},
};

use super::kernel_names::{KernelName, ResolvedNames};
use super::{gpu_time::GpuClock, stats::GuestStats};

/// How many objects of each kind one guest may hold at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WasiCudaLimits {
    /// Live device buffers.
    pub buffers: usize,
    /// Loaded modules.
    pub modules: usize,
    /// Live function handles.
    pub functions: usize,
    /// Launches not yet waited for.
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

/// A resource with the quota charge that pays for it: the charge goes back
/// to the tenant's ledger when the last reference to the resource drops
/// (a launch in flight holds one), so freeing is releasing and nothing leaks.
pub(crate) struct Charged<T> {
    value: T,
    _charge: OwnedCharge,
}

impl<T> Charged<T> {
    /// `value`, paid by `charge`.
    pub(crate) fn new(value: T, charge: OwnedCharge) -> Self {
        Charged {
            value,
            _charge: charge,
        }
    }
}

impl<T> std::ops::Deref for Charged<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.value
    }
}

/// A guest's device buffer with the charge that pays for it.
type GuestBuffer<D> = Arc<Charged<<D as GpuDriver>::DeviceBuffer>>;

/// What a guest-loaded module was loaded from, kept so that the module can
/// be loaded again after a device reset ([`image`](super::image)).
#[derive(Clone)]
pub(crate) enum ModuleSource {
    /// `module_load_ptx`'s text.
    Ptx(Arc<str>),
    /// `module_load_cubin`'s image.
    Cubin(Arc<[u8]>),
}

/// A guest-loaded module with its source and the charge that pays for it.
pub(crate) struct ModuleEntry<D: GpuDriver> {
    pub(crate) module: Arc<D::Module>,
    pub(crate) source: ModuleSource,
    _charge: OwnedCharge,
}

/// Where a function handle's target came from.
pub(crate) enum FunctionOrigin<D: GpuDriver> {
    /// A built-in kernel (the runtime's, shared).
    Builtin,
    /// `function_get` on a guest-loaded module (kept loaded while the
    /// function lives), by entry-point name.
    Raw(Arc<ModuleEntry<D>>, String),
    /// `kernel_get`: function `index` of the guest's module.
    Kernel(u32),
}

/// A function handle's target, with its module kept loaded.
pub(crate) struct FunctionEntry<D: GpuDriver> {
    function: D::Function,
    _module: Arc<D::Module>,
    pub(crate) origin: FunctionOrigin<D>,
    /// The tenant's charge for the function handle (none for the runtime's
    /// shared built-ins).
    _charge: Option<OwnedCharge>,
    /// For a Wasm kernel: its name and Wasm parameter types.
    kernel: Option<KernelInfo>,
}

impl<D: GpuDriver> FunctionEntry<D> {
    /// A built-in kernel's entry point in its loaded module.
    pub(crate) fn builtin(function: D::Function, module: Arc<D::Module>) -> Self {
        FunctionEntry {
            function,
            _module: module,
            origin: FunctionOrigin::Builtin,
            _charge: None,
            kernel: None,
        }
    }
}

/// What a launch of a Wasm kernel checks its arguments against.
pub(crate) struct KernelInfo {
    name: String,
    params: Vec<WasmType>,
    /// The mutable globals it uses, whose launch values follow the
    /// arguments.
    globals: Arc<[KernelGlobal]>,
    /// Its threads' shadow-stack window.
    stack_window: Option<StackWindow>,
}

/// A launch not yet waited for: everything the kernel may touch, kept alive
/// until the guest has seen it finish (`wait` or `sync`) or the context
/// synchronizes its stream on drop.
pub(crate) struct LaunchEntry<D: GpuDriver> {
    /// A Wasm kernel's status slot (the launch handle's slot) and name.
    pub(crate) kernel: Option<(usize, String)>,
    _buffers: Vec<GuestBuffer<D>>,
    _function: Arc<FunctionEntry<D>>,
    _memory: Option<GuestRegionInfo>,
    /// The tenant's launches-in-flight charge, released with the handle.
    _charge: OwnedCharge,
}

/// The guest's linear memory as one call sees it.
pub(crate) struct GuestMem<'a> {
    pub(crate) bytes: &'a mut [u8],
}

impl GuestMem<'_> {
    fn host_base(&self) -> usize {
        self.bytes.as_ptr() as usize
    }
}

/// How a guest's `wait` (and every call that waits for its stream) waits
/// for the work it queued: asking the driver (`stream_query`) in a loop
/// holds the executor thread and a core but answers within a microsecond
/// of the work's end; suspending the guest on the driver's completion
/// callback costs no CPU but ~20 µs of latency (`docs/benchmarks/`,
/// `guest_overhead`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WaitPolicy {
    /// One non-blocking query, then the completion callback.
    Suspend,
    /// Ask for up to this long, every wait, then the callback.
    Spin(Duration),
    /// Ask for up to this long while the stream's waits end within it;
    /// after a wait that outlasted it, suspend at once until a wait ends
    /// within it again (one that suspends still notes when it ended), but
    /// spin every [`PROBE_EVERY`]-th wait. A stream of short kernels gets
    /// the spin's latency; a stream of long ones costs one budget of CPU
    /// when it turns long, then one per [`PROBE_EVERY`] waits.
    Adaptive(Duration),
}

/// [`WaitPolicy::Adaptive`]: after this many waits in a row that did not
/// spin, one spins again (a probe: at most one budget of CPU per this many
/// waits on a stream of long kernels).
pub const PROBE_EVERY: u32 = 16;

/// [`WaitPolicy::Adaptive`]'s default budget: a little more than an empty
/// kernel's launch-to-completion time on an H100 (~10 µs), so short
/// kernels end within it.
pub const DEFAULT_WAIT_SPIN: Duration = Duration::from_micros(50);

impl Default for WaitPolicy {
    /// [`WaitPolicy::Adaptive`] with [`DEFAULT_WAIT_SPIN`].
    fn default() -> Self {
        WaitPolicy::Adaptive(DEFAULT_WAIT_SPIN)
    }
}

/// The state behind one guest's `wasi_cuda` imports. The embedder owns it
/// (in the store's data) and hands [`add_to_linker`](super::add_to_linker)
/// a function that reaches it.
pub struct WasiCudaCtx<D: GpuDriver> {
    pub(crate) driver: D,
    pub(crate) stream: D::Stream,
    memories: Option<Arc<dyn GuestMemoryLookup>>,
    /// The region behind the guest's memory, found once: memories never move.
    region: Option<GuestRegionInfo>,
    pub(crate) buffers: HandleTable<GuestBuffer<D>>,
    pub(crate) modules: HandleTable<Arc<ModuleEntry<D>>>,
    pub(crate) functions: HandleTable<Arc<FunctionEntry<D>>>,
    pub(crate) launches: HandleTable<LaunchEntry<D>>,
    /// How `wait` waits.
    wait_policy: WaitPolicy,
    /// [`WaitPolicy::Adaptive`]: whether the stream's last wait ended
    /// within the spin budget (so this one spins first).
    spin_pays: bool,
    /// [`WaitPolicy::Adaptive`]: waits that suspended at once since the
    /// last that spun.
    unspun: u32,
    /// When the current wait began.
    wait_began: Option<Instant>,
    /// The guest module's Wasm, for `kernel_get`.
    pub(crate) kernel_source: Option<KernelSource>,
    /// Kernels the guest named by export or function pointer, resolved.
    kernel_names: ResolvedNames,
    pub(crate) kernels: Arc<KernelCache<D>>,
    /// The built-in tensor kernels loaded on this driver.
    builtins: Arc<BuiltinCache<D>>,
    /// Status words (`docs/kernels.md`) of Wasm kernel launches, one per
    /// launch slot, in managed memory (made on the first kernel launch).
    status: Option<D::ManagedBuffer>,
    kernel_fuel: u64,
    /// Each Wasm kernel launch's time limit, in nanoseconds.
    launch_time_ns: u64,
    /// The share of the device one Wasm kernel launch may occupy.
    launch_share_percent: u64,
    /// What one `kernel_get` may cost.
    pub(crate) compile_bounds: CompileBounds,
    pub(crate) last_error: String,
    /// Counters a host reports ([`set_stats`](Self::set_stats)).
    stats: Option<GuestStats>,
    /// The GPU time of its launches, when `stats` is set.
    gpu_clock: Option<GpuClock<D>>,
    /// The tenant's quota ledger (shared by every context of the tenant).
    ledger: Arc<QuotaLedger>,
    policy: TenantPolicy,
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
        let stream = driver.create_stream()?;
        let owner = OwnerId::allocate();
        Ok(WasiCudaCtx {
            driver,
            stream,
            memories,
            region: None,
            buffers: HandleTable::new(owner, HandleKind::Buffer, limits.buffers),
            modules: HandleTable::new(owner, HandleKind::Module, limits.modules),
            functions: HandleTable::new(owner, HandleKind::Function, limits.functions),
            launches: HandleTable::new(owner, HandleKind::Launch, limits.launches),
            wait_policy: WaitPolicy::default(),
            spin_pays: true,
            unspun: 0,
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
    fn allowed(&self, allowed: bool, what: &str) -> Result<(), AbiError> {
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

    /// The driver this guest runs on.
    pub fn driver(&self) -> &D {
        &self.driver
    }

    /// The text of the guest's most recent failed call (empty if none).
    pub fn last_error(&self) -> &str {
        &self.last_error
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

    /// Records a failure of `call` as the guest's last error and returns
    /// its errno.
    pub(crate) fn fail(&mut self, call: &str, error: AbiError) -> i32 {
        self.last_error = format!("{call}: {error}");
        if let Some(stats) = &self.stats {
            match error.errno {
                Errno::EQUOTA => {
                    stats.quota_refusals.inc();
                }
                Errno::ETRAP => {
                    stats.kernel_traps.inc();
                }
                Errno::EDEVLOST => {
                    stats.device_lost.inc();
                }
                _ => {}
            }
        }
        // What the host's operator wants to see: quota refusals and kernel
        // traps (a tenant at its limits), driver failures (the device).
        match error.errno {
            Errno::EQUOTA => tracing::info!(call, %error, "quota refusal"),
            Errno::ETRAP => tracing::info!(call, %error, "kernel trap"),
            Errno::EDRIVER | Errno::ELAUNCH | Errno::ENODEV | Errno::ENOMEM => {
                tracing::warn!(call, %error, "driver error")
            }
            Errno::EDEVLOST => tracing::error!(call, %error, "the device's context is lost"),
            _ => tracing::debug!(call, %error, "wasi_cuda call failed"),
        }
        error.errno.code()
    }

    /// Turns a call's result into its errno.
    pub(crate) fn finish(&mut self, call: &str, result: Result<(), AbiError>) -> i32 {
        match result {
            Ok(()) => 0,
            Err(e) => self.fail(call, e),
        }
    }

    /// The region behind the guest's memory, if the managed allocator made it.
    fn region(&mut self, host_base: usize) -> Option<&GuestRegionInfo> {
        let stale = self
            .region
            .as_ref()
            .is_none_or(|r| r.host_base != host_base);
        if stale {
            self.region = self.memories.as_ref().and_then(|m| m.lookup(host_base));
        }
        self.region.as_ref()
    }

    fn guest_ref(&mut self, mem: &GuestMem<'_>) -> (GuestMemoryRef, Option<GuestRegionInfo>) {
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

    pub(crate) fn device_count(&mut self, mem: GuestMem<'_>, out: u32) -> Result<(), AbiError> {
        abi::write_u32(mem.bytes, out, 1)
    }

    pub(crate) fn device_info(
        &mut self,
        mem: GuestMem<'_>,
        device: u32,
        out: u32,
        out_len: i32,
    ) -> Result<(), AbiError> {
        if device != 0 {
            return Err(AbiError::new(
                Errno::ENODEV,
                format!("device {device} does not exist (this guest has 1 device)"),
            ));
        }
        let out_len = usize::try_from(out_len)
            .map_err(|_| AbiError::new(Errno::EINVAL, format!("out_len {out_len} is negative")))?;
        let addressable = self
            .region(mem.host_base())
            .is_some_and(|r| r.device_addressable);
        let record = abi::encode_device_info(self.driver.device(), self.driver.kind(), addressable);
        let n = out_len.min(record.len());
        abi::write_bytes(mem.bytes, out, &record[..n])
    }

    pub(crate) fn buffer_alloc(
        &mut self,
        mem: GuestMem<'_>,
        size: u64,
        out: u32,
    ) -> Result<(), AbiError> {
        check_out_u64(mem.bytes, out)?;
        if size == 0 {
            return Err(AbiError::new(Errno::EINVAL, "size is 0"));
        }
        let bytes = usize::try_from(size).map_err(|_| {
            AbiError::new(Errno::ENOMEM, format!("{size} bytes do not fit this host"))
        })?;
        if size > self.driver.device().total_memory {
            return Err(AbiError::new(
                Errno::ENOMEM,
                format!(
                    "{size} bytes exceed the device's {} bytes",
                    self.driver.device().total_memory
                ),
            ));
        }
        let charge = self.charge(Resource::DeviceBytes, size)?;
        let buffer = self
            .driver
            .alloc_device(bytes)
            .map_err(|e| driver_error("alloc_device", e))?;
        let handle = self.buffers.insert(Arc::new(Charged {
            value: buffer,
            _charge: charge,
        }))?;
        abi::write_u64(mem.bytes, out, handle.0)
    }

    pub(crate) fn buffer_free(&mut self, buffer: u64) -> Result<(), AbiError> {
        // In-flight launches hold their own `Arc`; the memory goes with the last.
        self.buffers.remove(Handle(buffer)).map(drop)
    }

    pub(crate) fn buffer_size(
        &mut self,
        mem: GuestMem<'_>,
        buffer: u64,
        out: u32,
    ) -> Result<(), AbiError> {
        check_out_u64(mem.bytes, out)?;
        let len = self.buffers.get(Handle(buffer))?.len();
        abi::write_u64(mem.bytes, out, len as u64)
    }

    /// `offset .. offset + len` of a buffer, checked.
    fn buffer_range(
        &self,
        buffer: u64,
        offset: u64,
        len: u64,
        what: &str,
    ) -> Result<(GuestBuffer<D>, usize, usize), AbiError> {
        let buf = Arc::clone(self.buffers.get(Handle(buffer))?);
        if len == 0 {
            return Err(AbiError::new(Errno::EINVAL, "len is 0"));
        }
        let end = offset.checked_add(len).ok_or_else(|| {
            AbiError::new(
                Errno::EOVERFLOW,
                format!("{what} offset {offset:#x} + len {len:#x} overflows"),
            )
        })?;
        if end > buf.len() as u64 {
            return Err(AbiError::new(
                Errno::EFAULT,
                format!(
                    "{what} range {offset:#x}..{end:#x} ends past the buffer's {:#x} bytes",
                    buf.len()
                ),
            ));
        }
        Ok((buf, offset as usize, len as usize))
    }

    pub(crate) fn copy_to_buffer(
        &mut self,
        mem: GuestMem<'_>,
        dst: u64,
        dst_offset: u64,
        src: u32,
        len: u32,
    ) -> Result<(), AbiError> {
        let (buf, offset, len) = self.buffer_range(dst, dst_offset, u64::from(len), "dst")?;
        let src = abi::guest_range(mem.bytes.len(), src, len as u64)?;
        let dst = buf.range(offset, len).ok_or_else(out_of_buffer)?;
        self.driver
            .copy_to_device(dst, &mem.bytes[src])
            .map_err(|e| driver_error("copy_to_device", e))
    }

    pub(crate) fn copy_from_buffer(
        &mut self,
        mem: GuestMem<'_>,
        dst: u32,
        src: u64,
        src_offset: u64,
        len: u32,
    ) -> Result<(), AbiError> {
        let (buf, offset, len) = self.buffer_range(src, src_offset, u64::from(len), "src")?;
        let dst = abi::guest_range(mem.bytes.len(), dst, len as u64)?;
        let src = buf.range(offset, len).ok_or_else(out_of_buffer)?;
        self.driver
            .copy_from_device(&mut mem.bytes[dst], src)
            .map_err(|e| driver_error("copy_from_device", e))
    }

    pub(crate) fn copy_buffer(
        &mut self,
        dst: u64,
        dst_offset: u64,
        src: u64,
        src_offset: u64,
        len: u64,
    ) -> Result<(), AbiError> {
        let (dbuf, doff, n) = self.buffer_range(dst, dst_offset, len, "dst")?;
        let (sbuf, soff, _) = self.buffer_range(src, src_offset, len, "src")?;
        let d = dbuf.range(doff, n).ok_or_else(out_of_buffer)?;
        let s = sbuf.range(soff, n).ok_or_else(out_of_buffer)?;
        let (dp, sp) = (d.ptr().0, s.ptr().0);
        if dp < sp + n as u64 && sp < dp + n as u64 {
            return Err(AbiError::new(
                Errno::EINVAL,
                "the source and destination ranges overlap",
            ));
        }
        self.driver
            .copy_device(d, s)
            .map_err(|e| driver_error("copy_device", e))
    }

    pub(crate) fn memset_buffer(
        &mut self,
        dst: u64,
        dst_offset: u64,
        value: u32,
        len: u64,
    ) -> Result<(), AbiError> {
        let (buf, offset, n) = self.buffer_range(dst, dst_offset, len, "dst")?;
        let value = u8::try_from(value).map_err(|_| {
            AbiError::new(
                Errno::EINVAL,
                format!("value {value} is not a byte (0..=255)"),
            )
        })?;
        let d = buf.range(offset, n).ok_or_else(out_of_buffer)?;
        self.driver
            .memset(d, value)
            .map_err(|e| driver_error("memset", e))
    }

    pub(crate) fn module_load_ptx(
        &mut self,
        mem: GuestMem<'_>,
        ptr: u32,
        len: u32,
        out: u32,
    ) -> Result<(), AbiError> {
        check_out_u64(mem.bytes, out)?;
        self.allowed(self.policy.raw_modules, "raw PTX modules (not sandboxed)")?;
        let text = abi::read_str(mem.bytes, ptr, len)?;
        let entry = self.load_module(ModuleSource::Ptx(text.into()))?;
        let handle = self.modules.insert(entry)?;
        abi::write_u64(mem.bytes, out, handle.0)
    }

    pub(crate) fn module_load_cubin(
        &mut self,
        mem: GuestMem<'_>,
        ptr: u32,
        len: u32,
        out: u32,
    ) -> Result<(), AbiError> {
        check_out_u64(mem.bytes, out)?;
        self.allowed(self.policy.raw_modules, "cubin modules (not sandboxed)")?;
        let range = abi::guest_range(mem.bytes.len(), ptr, u64::from(len))?;
        let image = &mem.bytes[range];
        // The image's own tables are checked here, whatever the driver.
        tensorwasm_core::image::check_module_image(image).map_err(|e| {
            AbiError::new(Errno::EIMAGE, format!("malformed cubin/fatbin image: {e}"))
        })?;
        let entry = self.load_module(ModuleSource::Cubin(image.into()))?;
        let handle = self.modules.insert(entry)?;
        abi::write_u64(mem.bytes, out, handle.0)
    }

    /// Charges and loads a guest's module.
    pub(crate) fn load_module(
        &self,
        source: ModuleSource,
    ) -> Result<Arc<ModuleEntry<D>>, AbiError> {
        let charge = self.charge(Resource::Modules, 1)?;
        let module = match &source {
            ModuleSource::Ptx(text) => self
                .driver
                .load_ptx(text)
                .map_err(|e| driver_error("load_ptx", e))?,
            ModuleSource::Cubin(image) => self
                .driver
                .load_cubin(image)
                .map_err(|e| driver_error("load_cubin", e))?,
        };
        Ok(Arc::new(ModuleEntry {
            module: Arc::new(module),
            source,
            _charge: charge,
        }))
    }

    /// Charges and looks up entry point `name` of a guest-loaded module.
    pub(crate) fn raw_function(
        &self,
        loaded: Arc<ModuleEntry<D>>,
        name: &str,
    ) -> Result<Arc<FunctionEntry<D>>, AbiError> {
        let charge = self.charge(Resource::Functions, 1)?;
        let function = self
            .driver
            .function(&loaded.module, name)
            .map_err(|e| driver_error("function", e))?;
        Ok(Arc::new(FunctionEntry {
            function,
            _module: Arc::clone(&loaded.module),
            origin: FunctionOrigin::Raw(loaded, name.to_owned()),
            _charge: Some(charge),
            kernel: None,
        }))
    }

    pub(crate) fn module_unload(&mut self, module: u64) -> Result<(), AbiError> {
        self.modules.remove(Handle(module)).map(drop)
    }

    pub(crate) fn function_get(
        &mut self,
        mem: GuestMem<'_>,
        module: u64,
        name_ptr: u32,
        name_len: u32,
        out: u32,
    ) -> Result<(), AbiError> {
        check_out_u64(mem.bytes, out)?;
        let loaded = Arc::clone(self.modules.get(Handle(module))?);
        let name = abi::read_str(mem.bytes, name_ptr, name_len)?;
        let entry = self.raw_function(loaded, name)?;
        let handle = self.functions.insert(entry)?;
        abi::write_u64(mem.bytes, out, handle.0)
    }

    pub(crate) fn function_release(&mut self, function: u64) -> Result<(), AbiError> {
        // Launches in flight hold their own reference to the function.
        self.functions.remove(Handle(function)).map(drop)
    }

    /// The mutable globals whose launch values a launch of `function`
    /// needs (none for a bad handle or a function that is not a Wasm
    /// kernel; `launch` reports those). Shared, not copied: it is asked
    /// on every launch.
    pub(crate) fn launch_globals(&self, function: u64) -> Option<Arc<[KernelGlobal]>> {
        self.functions
            .get(Handle(function))
            .ok()
            .and_then(|f| f.kernel.as_ref())
            .filter(|k| !k.globals.is_empty())
            .map(|k| Arc::clone(&k.globals))
    }

    /// Decodes, checks and queues a launch, and writes its handle.
    /// `globals` are the launch values of a Wasm kernel's globals
    /// ([`launch_globals`](Self::launch_globals)).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn launch(
        &mut self,
        mem: GuestMem<'_>,
        function: u64,
        grid: Dim3,
        block: Dim3,
        shared_mem_bytes: u32,
        args_ptr: u32,
        args_count: u32,
        out: u32,
        globals: Vec<KernelParam>,
    ) -> Result<(), AbiError> {
        check_out_u64(mem.bytes, out)?;
        let function = Arc::clone(self.functions.get(Handle(function))?);
        let (guest, region) = self.guest_ref(&mem);
        let args = abi::decode_launch_args(mem.bytes, &guest, args_ptr, args_count)?;
        let uses_guest_memory = args
            .iter()
            .any(|a| matches!(a, LaunchArg::Param(KernelParam::Ptr(_))));
        let mut params = Vec::with_capacity(args.len() + KernelAbi::INTRINSICS);
        let mut buffers = Vec::new();
        for arg in args {
            match arg {
                LaunchArg::Param(p) => params.push(p),
                LaunchArg::Buffer { handle, offset } => {
                    let buf = Arc::clone(self.buffers.get(handle)?);
                    params.push(abi::resolve_buffer_pointer(
                        buf.device_ptr(),
                        buf.len(),
                        offset,
                    )?);
                    buffers.push(buf);
                }
            }
        }
        // Geometry and parameter count are checked by the driver against
        // the device's limits before it runs anything (`EINVAL`); a Wasm
        // kernel's grid is checked here, since it runs as virtual blocks.
        let mut config = LaunchConfig {
            grid,
            block,
            shared_mem_bytes,
        };
        if let Some(kernel) = &function.kernel {
            check_kernel_args(kernel, &params, &buffers)?;
            if globals.len() != kernel.globals.len() {
                return Err(AbiError::new(
                    Errno::EINVAL,
                    format!(
                        "kernel `{}` uses {} global(s); the launch read {}",
                        kernel.name,
                        kernel.globals.len(),
                        globals.len()
                    ),
                ));
            }
            check_stack_window(kernel, &globals, guest.len as u64)?;
            params.extend(globals);
            if !guest.device_addressable {
                return Err(AbiError::new(
                    Errno::ENOTADDR,
                    "a Wasm kernel runs over the guest's memory, which the device cannot address",
                ));
            }
            // Accesses the translator proved aligned are aligned in the
            // guest's memory (`docs/kernels.md`, "The launch"); a device
            // allocation always starts on a 256-byte boundary, so this
            // never fails unless the memory was not allocated as one.
            if !guest.base.0.is_multiple_of(16) {
                return Err(AbiError::new(
                    Errno::EINVAL,
                    "a Wasm kernel needs the guest's memory 16-byte aligned",
                ));
            }
            self.status_words()?;
            config.grid = self.physical_grid(grid, block)?;
            // A block zeroes its shared memory 16 bytes at a time
            // (`docs/kernels.md`, "Shared memory"): the kernel sees the
            // launch's bytes rounded up to a multiple of 16 (the driver
            // checks the result against the device's limit).
            config.shared_mem_bytes =
                shared_mem_bytes
                    .checked_next_multiple_of(16)
                    .ok_or_else(|| {
                        AbiError::new(
                            Errno::EINVAL,
                            format!("{shared_mem_bytes} bytes of shared memory per block"),
                        )
                    })?;
        }
        let kernel = function.kernel.as_ref().map(|k| k.name.clone());
        let is_kernel = kernel.is_some();
        let charge = self.charge(Resource::LaunchesInFlight, 1)?;
        let handle = self.launches.insert(LaunchEntry {
            kernel: None,
            _buffers: buffers,
            _function: Arc::clone(&function),
            _memory: if uses_guest_memory || is_kernel {
                region
            } else {
                None
            },
            _charge: charge,
        })?;
        if let Some(name) = kernel {
            let slot = usize::from(handle.slot());
            let status = match self.status_word(slot) {
                Ok(status) => status,
                Err(e) => {
                    let _ = self.launches.remove(handle);
                    return Err(e);
                }
            };
            if let Ok(entry) = self.launches.get_mut(handle) {
                entry.kernel = Some((slot, name));
            }
            params.extend([
                KernelParam::Ptr(guest.base),
                KernelParam::I64(guest.len as i64),
                KernelParam::Ptr(status),
                KernelParam::I64(self.kernel_fuel as i64),
                // Its bits: the kernel reads it as a u64.
                KernelParam::I64(self.launch_time_ticks() as i64),
                KernelParam::I64(i64::from(grid.x)),
                KernelParam::I64(i64::from(grid.y)),
                KernelParam::I64(i64::from(grid.z)),
            ]);
        }
        self.clock_before_launch();
        // SAFETY: every pointer parameter was produced by the decoder inside
        // the guest's memory (device-addressable, checked) or by
        // `resolve_buffer_pointer` inside a live buffer; the launch entry
        // keeps both alive until the launch has finished, and the context
        // synchronizes its stream before it is dropped. The parameter count
        // (and, on CUDA, each size) is checked against the kernel by the
        // driver. A Wasm kernel gets the guest memory's base and current
        // length (every access it makes is checked against that length by
        // the translated code) and its own status word. What raw PTX or a
        // cubin does is the loaded module's responsibility: they are
        // trusted code.
        let queued = unsafe {
            self.driver
                .launch(&self.stream, &function.function, &config, &params)
        };
        self.clock_after_launch();
        if let Err(e) = queued {
            let _ = self.launches.remove(handle);
            return Err(driver_error("launch", e));
        }
        self.count_launch();
        abi::write_u64(mem.bytes, out, handle.0)
    }

    /// The launch time limit in the ticks of the kernel's clock (the
    /// device's cycle counter, at its peak clock rate: at a lower clock the
    /// limit lasts longer in proportion). `u64::MAX` stays "no limit".
    fn launch_time_ticks(&self) -> u64 {
        if self.launch_time_ns == u64::MAX {
            return u64::MAX;
        }
        let khz = u128::from(self.driver.device().clock_rate_khz.max(1));
        let ticks = u128::from(self.launch_time_ns) * khz / 1_000_000;
        u64::try_from(ticks).unwrap_or(u64::MAX)
    }

    /// The physical grid of a Wasm kernel launch of `grid` x `block`: a 1-D
    /// grid of at most as many blocks as fit in the tenant's share of the
    /// device's thread slots (and the device's largest grid x), over which
    /// the kernel runs `grid` as virtual blocks (`docs/kernels.md`,
    /// "Virtual blocks"). The rest of the device stays free for other
    /// tenants however long the launch runs. `EINVAL` for a grid or block
    /// outside the device's limits.
    fn physical_grid(&self, grid: Dim3, block: Dim3) -> Result<Dim3, AbiError> {
        let device = self.driver.device();
        let (gx, gy, gz) = device.max_grid_dim;
        let dims = [(grid.x, gx), (grid.y, gy), (grid.z, gz)];
        if dims.iter().any(|&(g, max)| g == 0 || g > max) {
            return Err(AbiError::new(
                Errno::EINVAL,
                format!(
                    "grid ({}, {}, {}) is outside 1 ..= ({gx}, {gy}, {gz})",
                    grid.x, grid.y, grid.z
                ),
            ));
        }
        let threads = u64::from(block.x) * u64::from(block.y) * u64::from(block.z);
        if threads == 0 || threads > u64::from(device.max_threads_per_block) {
            return Err(AbiError::new(
                Errno::EINVAL,
                format!(
                    "block ({}, {}, {}) has {threads} threads; 1 ..= {} allowed",
                    block.x, block.y, block.z, device.max_threads_per_block
                ),
            ));
        }
        let blocks = u64::from(grid.x) * u64::from(grid.y) * u64::from(grid.z);
        let slots = u64::from(device.multiprocessor_count)
            * u64::from(device.max_threads_per_multiprocessor);
        // At least one block, or a launch could never run.
        let share = (slots * self.launch_share_percent / 100 / threads).max(1);
        // Each thread's clock starts when its physical block does, so the
        // time limit bounds the launch only while every physical block is
        // resident at once: with a limit, the grid is capped at the share
        // (100% is one wave of the device) even for a full share.
        let cap = if self.launch_share_percent >= 100 && self.launch_time_ns == u64::MAX {
            u64::MAX
        } else {
            share
        };
        let x = blocks.min(cap).min(u64::from(gx));
        Ok(Dim3 {
            x: u32::try_from(x).unwrap_or(gx),
            y: 1,
            z: 1,
        })
    }

    /// The status words of kernel launches, made (and zeroed) on first use.
    fn status_words(&mut self) -> Result<&D::ManagedBuffer, AbiError> {
        if self.status.is_none() {
            let words = self
                .driver
                .alloc_managed(STATUS_WORDS * STATUS_BYTES)
                .map_err(|e| driver_error("alloc_managed (kernel status words)", e))?;
            self.driver
                .memset(words.full(), 0)
                .map_err(|e| driver_error("memset (kernel status words)", e))?;
            self.status = Some(words);
        }
        self.status
            .as_ref()
            .ok_or_else(|| AbiError::new(Errno::EDRIVER, "no status words"))
    }

    /// The address of launch slot `slot`'s status word.
    fn status_word(&mut self, slot: usize) -> Result<DevicePtr, AbiError> {
        let words = self.status_words()?;
        words
            .range(slot * STATUS_BYTES, STATUS_BYTES)
            .map(|r| r.ptr())
            .ok_or_else(|| AbiError::new(Errno::ELIMIT, format!("no status word for slot {slot}")))
    }

    /// After a kernel launch finished: the trap it recorded, if any, with
    /// the whole slot cleared for the next launch, every time (a launch
    /// that did not trap may still have set the CPU target's stop flag and
    /// launch start).
    pub(crate) fn take_trap(&mut self, slot: usize, name: &str) -> Result<(), AbiError> {
        let Some(words) = &self.status else {
            return Ok(());
        };
        let Some(word) = words.range(slot * STATUS_BYTES, STATUS_BYTES) else {
            return Ok(());
        };
        let at = word.ptr().0 as usize;
        // SAFETY: the word lies in a live managed allocation of this context
        // (checked by `range`), which the host may read and write at the
        // same address; the launch that used it has finished (its stream
        // reached the completion callback or was idle), and no other launch
        // uses this slot until the launch handle is released. Each field is
        // aligned: the allocation is, and words are STATUS_BYTES (a multiple
        // of 8) apart.
        let (code, offset) = unsafe {
            let code = std::ptr::with_exposed_provenance::<u32>(at + status::CODE).read_volatile();
            let offset =
                std::ptr::with_exposed_provenance::<u64>(at + status::OFFSET).read_volatile();
            std::ptr::with_exposed_provenance_mut::<u32>(at + status::CODE).write_volatile(0);
            std::ptr::with_exposed_provenance_mut::<u32>(at + status::STOP).write_volatile(0);
            std::ptr::with_exposed_provenance_mut::<u64>(at + status::OFFSET).write_volatile(0);
            std::ptr::with_exposed_provenance_mut::<u64>(at + status::RESERVED).write_volatile(0);
            std::ptr::with_exposed_provenance_mut::<u64>(at + status::RESERVED + 8)
                .write_volatile(0);
            (code, offset)
        };
        if code == 0 {
            return Ok(());
        }
        let what = KernelTrap::from_code(code).map_or("unknown trap", KernelTrap::description);
        Err(AbiError::new(
            Errno::ETRAP,
            format!("kernel `{name}` trapped: {what} (code {code}) at offset {offset:#x}"),
        ))
    }

    /// Where the guest's stream stands at the start of a wait: `Ok(true)`
    /// when every piece of work queued so far has finished, `Ok(false)`
    /// while some still runs (the caller then suspends on
    /// [`Self::completion`] and calls [`Self::launch_status`]), `Err`
    /// (`ELAUNCH`) once work on it has failed. Keeps asking for as long as
    /// the [`WaitPolicy`] lets it spin before answering "still running".
    pub(crate) fn settle(&mut self) -> Result<bool, AbiError> {
        let start = Instant::now();
        self.wait_began = Some(start);
        let budget = match self.wait_policy {
            WaitPolicy::Suspend => Duration::ZERO,
            WaitPolicy::Spin(spin) => spin,
            WaitPolicy::Adaptive(spin) if self.spin_pays || self.unspun >= PROBE_EVERY => {
                self.unspun = 0;
                spin
            }
            WaitPolicy::Adaptive(_) => {
                self.unspun += 1;
                Duration::ZERO
            }
        };
        loop {
            match self.driver.stream_query(&self.stream) {
                Ok(true) => {
                    self.wait_ended(Instant::now());
                    return Ok(true);
                }
                Ok(false) => {}
                Err(e) => return Err(launch_failed(e)),
            }
            if budget.is_zero() || start.elapsed() >= budget {
                return Ok(false);
            }
            std::hint::spin_loop();
        }
    }

    /// Notes when the wait that began in [`Self::settle`] saw its work
    /// done (`done`: the query that said so, or the completion callback's
    /// call): under [`WaitPolicy::Adaptive`], the next wait spins only if
    /// this one ended within the budget (and every [`PROBE_EVERY`]-th
    /// after that anyway, to find the stream's kernels short again when
    /// the callback's own latency keeps its waits past the budget).
    fn wait_ended(&mut self, done: Instant) {
        if let Some(clock) = &mut self.gpu_clock {
            clock.collect(&self.driver);
        }
        let began = self.wait_began.take();
        if let (Some(stats), Some(began)) = (&self.stats, began) {
            stats.waits.inc();
            stats
                .wait_seconds
                .inc_by(done.saturating_duration_since(began).as_secs_f64());
        }
        if let (WaitPolicy::Adaptive(spin), Some(began)) = (self.wait_policy, began) {
            self.spin_pays = done.saturating_duration_since(began) <= spin;
        }
    }

    /// Counts this guest's launches, waits and GPU time into `stats`
    /// (the GPU time costs an event record or two per launch:
    /// `gpu_time.rs`).
    pub fn set_stats(&mut self, stats: GuestStats) {
        self.gpu_clock = Some(GpuClock::new(stats.clone()));
        self.stats = Some(stats);
    }

    fn clock_before_launch(&mut self) {
        if let Some(clock) = &mut self.gpu_clock {
            clock.before_launch(&self.driver, &self.stream);
        }
    }

    fn clock_after_launch(&mut self) {
        if let Some(clock) = &mut self.gpu_clock {
            clock.after_launch(&self.driver, &self.stream);
        }
    }

    fn count_launch(&self) {
        if let Some(stats) = &self.stats {
            stats.launches.inc();
        }
    }

    /// A future that completes from the driver's completion callback once
    /// the work queued so far has finished, with the time of the call.
    /// Should queueing the callback fail, waits here instead, so a waiter
    /// is never left hanging.
    pub(crate) fn completion(&self) -> DispatchFuture<Instant> {
        let (completer, done) = dispatch();
        let on_done = completer.clone();
        let queued = self.driver.on_complete(
            &self.stream,
            Box::new(move || {
                let _ = on_done.complete(Instant::now());
            }),
        );
        if queued.is_err() {
            let _ = self.driver.stream_synchronize(&self.stream);
            let _ = completer.complete(Instant::now());
        }
        done
    }

    /// While a wait is suspended on its callback: has the stream's work
    /// finished (`Ok(true)`), or failed (`Err`, `EDEVLOST` for a lost
    /// device)?
    pub(crate) fn poll_stream(&self) -> Result<bool, AbiError> {
        self.driver
            .stream_query(&self.stream)
            .map_err(launch_failed)
    }

    /// After a completion callback fired (at `done`): did the work fail?
    /// (`Ok(false)` is success here: the callback itself counts as stream
    /// work until it has returned.)
    pub(crate) fn launch_status(&mut self, done: Instant) -> Result<(), AbiError> {
        self.wait_ended(done);
        self.driver
            .stream_query(&self.stream)
            .map(drop)
            .map_err(launch_failed)
    }

    /// Lets `wait` keep asking the driver for up to `spin` before it
    /// suspends the guest on a completion callback, every time
    /// ([`WaitPolicy::Spin`]; zero: [`WaitPolicy::Suspend`]).
    pub fn set_wait_spin(&mut self, spin: Duration) {
        self.set_wait_policy(if spin.is_zero() {
            WaitPolicy::Suspend
        } else {
            WaitPolicy::Spin(spin)
        });
    }

    /// How `wait` waits from now on ([`WaitPolicy`]).
    pub fn set_wait_policy(&mut self, policy: WaitPolicy) {
        self.wait_policy = policy;
        self.spin_pays = true;
        self.unspun = 0;
    }

    /// How `wait` waits.
    pub fn wait_policy(&self) -> WaitPolicy {
        self.wait_policy
    }

    /// Whether the next wait asks the driver in a loop before it suspends
    /// (under [`WaitPolicy::Adaptive`]: whether the last wait ended within
    /// the budget, or the next is a probe).
    pub fn spins_before_next_wait(&self) -> bool {
        match self.wait_policy {
            WaitPolicy::Suspend => false,
            WaitPolicy::Spin(spin) => !spin.is_zero(),
            WaitPolicy::Adaptive(spin) => {
                (self.spin_pays || self.unspun >= PROBE_EVERY) && !spin.is_zero()
            }
        }
    }

    pub(crate) fn prefetch(
        &mut self,
        mem: GuestMem<'_>,
        ptr: u32,
        len: u32,
        target: u32,
    ) -> Result<(), AbiError> {
        let target = match target {
            0 => PrefetchTarget::Device,
            1 => PrefetchTarget::Host,
            t => {
                return Err(AbiError::new(
                    Errno::EINVAL,
                    format!("target {t} is neither 0 (device) nor 1 (host)"),
                ));
            }
        };
        let range = self.managed_range(&mem, ptr, len)?;
        self.driver
            .prefetch(range, target, &self.stream)
            .map_err(|e| driver_error("prefetch", e))?;
        Ok(())
    }

    pub(crate) fn advise(
        &mut self,
        mem: GuestMem<'_>,
        ptr: u32,
        len: u32,
        advice: u32,
    ) -> Result<(), AbiError> {
        let advice = match advice {
            0 => Advice::SetReadMostly,
            1 => Advice::UnsetReadMostly,
            2 => Advice::PreferDevice,
            3 => Advice::PreferHost,
            4 => Advice::UnsetPreferredLocation,
            5 => Advice::AccessedByDevice,
            6 => Advice::UnsetAccessedByDevice,
            a => {
                return Err(AbiError::new(
                    Errno::EINVAL,
                    format!("advice {a} is not one of 0..=6"),
                ));
            }
        };
        let range = self.managed_range(&mem, ptr, len)?;
        self.driver
            .advise(range, advice)
            .map_err(|e| driver_error("advise", e))
    }

    /// `ptr .. ptr + len` of the guest's memory as a driver range, if the
    /// memory is managed memory.
    fn managed_range(
        &mut self,
        mem: &GuestMem<'_>,
        ptr: u32,
        len: u32,
    ) -> Result<tensorwasm_core::DeviceRange<'static>, AbiError> {
        if len == 0 {
            return Err(AbiError::new(Errno::EINVAL, "len is 0"));
        }
        let range = abi::guest_range(mem.bytes.len(), ptr, u64::from(len))?;
        let (guest, _) = self.guest_ref(mem);
        if !guest.device_addressable {
            return Err(AbiError::new(
                Errno::ENOTADDR,
                "the guest's memory is not managed memory",
            ));
        }
        let start = guest.base.checked_add(range.start).ok_or_else(|| {
            AbiError::new(Errno::EOVERFLOW, "the range's device address overflows")
        })?;
        // SAFETY: the range lies inside the guest's exposed memory (checked
        // above), which is a live managed region for this call; the driver
        // only reads its address for advice or a stream-ordered migration,
        // and migration leaves the contents in place.
        Ok(unsafe { tensorwasm_core::DeviceRange::from_raw(start, range.len()) })
    }

    pub(crate) fn read_last_error(
        &mut self,
        mem: GuestMem<'_>,
        buf: u32,
        buf_len: i32,
        out_len: u32,
    ) -> Result<(), AbiError> {
        let buf_len = usize::try_from(buf_len)
            .map_err(|_| AbiError::new(Errno::EINVAL, format!("buf_len {buf_len} is negative")))?;
        let text = self.last_error.as_bytes();
        let n = buf_len.min(text.len());
        abi::guest_range(mem.bytes.len(), buf, n as u64)?;
        abi::read_u32(mem.bytes, out_len)?;
        abi::write_bytes(mem.bytes, buf, &text[..n])?;
        abi::write_u32(mem.bytes, out_len, text.len() as u32)
    }
}

impl<D: KernelTarget> WasiCudaCtx<D> {
    /// Checks a built-in tensor op's descriptor, queues its kernel and
    /// writes the launch handle.
    pub(crate) fn tensor_op(
        &mut self,
        mem: GuestMem<'_>,
        desc_ptr: u32,
        desc_len: u32,
        out: u32,
    ) -> Result<(), AbiError> {
        check_out_u64(mem.bytes, out)?;
        self.allowed(self.policy.builtins, "built-in tensor kernels")?;
        let (guest, region) = self.guest_ref(&mem);
        let mut held = Vec::new();
        let buffers = &self.buffers;
        let op =
            abi::tensor::decode_tensor_op(mem.bytes, &guest, desc_ptr, desc_len, &mut |handle| {
                let buf = Arc::clone(buffers.get(handle)?);
                let at = (buf.device_ptr(), buf.len() as u64);
                held.push(buf);
                Ok(at)
            })?;
        let (work, limit) = (op.work(), self.ledger.quota().tensor_work());
        if work > limit {
            return Err(AbiError::new(
                Errno::EQUOTA,
                format!(
                    "tensor-op work quota exceeded: the op asks for {work} multiply-adds or \
                     element operations, this tenant's limit is {limit} per op"
                ),
            ));
        }
        let device = self.driver.device();
        let sm = device
            .compute_capability
            .map(|(major, minor)| major * 10 + minor);
        let plan = tensorwasm_kernels::table::plan_on(&op, sm, device.multiprocessor_count)?;
        let function = self
            .builtins
            .function(&self.driver, plan.kernel)
            .map_err(|e| kernel_error(&e))?;
        let config = LaunchConfig {
            grid: plan.grid,
            block: plan.block,
            shared_mem_bytes: plan.shared_bytes,
        };
        let charge = self.charge(Resource::LaunchesInFlight, 1)?;
        let handle = self.launches.insert(LaunchEntry {
            kernel: None,
            _buffers: held,
            _function: Arc::clone(&function),
            _memory: region,
            _charge: charge,
        })?;
        self.clock_before_launch();
        // SAFETY: every pointer parameter is an operand that
        // `decode_tensor_op` checked to lie, with the whole extent its shape
        // and strides give, inside the guest's device-addressable memory or
        // a live buffer; `plan` derives the kernel's sizes from the same
        // checked shapes, and the kernels touch nothing outside those
        // extents (docs/tensor-ops.md). The launch entry keeps the buffers
        // and the memory alive until the launch has finished.
        let queued = unsafe {
            self.driver
                .launch(&self.stream, &function.function, &config, &plan.params)
        };
        self.clock_after_launch();
        if let Err(e) = queued {
            let _ = self.launches.remove(handle);
            return Err(driver_error("launch (built-in kernel)", e));
        }
        self.count_launch();
        abi::write_u64(mem.bytes, out, handle.0)
    }

    /// The first half of `kernel_get` (and of `kernel_get_export` and
    /// `kernel_get_table`, which name the function otherwise): checks the
    /// call, resolves `name` to a function index of the guest's own module,
    /// then finds that function's kernel in the cache or starts its compile
    /// on a worker ([`compile_bounded`]); the guest awaits the second
    /// (`KernelGet::Compiling`), then [`kernel_get_finish`]
    /// (Self::kernel_get_finish) writes the handle.
    pub(crate) fn kernel_get_start(
        &mut self,
        mem: GuestMem<'_>,
        name: KernelName,
        out: u32,
    ) -> Result<KernelGet<D>, AbiError>
    where
        D: Clone + 'static,
    {
        check_out_u64(mem.bytes, out)?;
        self.allowed(self.policy.wasm_kernels, "Wasm kernels")?;
        let Some(source) = &self.kernel_source else {
            return Err(AbiError::new(
                Errno::ENOTSUP,
                "the host did not register this guest's module for Wasm kernels",
            ));
        };
        let index = self.kernel_names.resolve(mem.bytes, source.wasm(), name)?;
        let charge = self.charge(Resource::Functions, 1)?;
        let bounds = self.compile_bounds;
        if let Some(hit) = self.kernels.lookup(source, index, bounds.limits) {
            return Ok(KernelGet::Ready(hit.map_err(|e| kernel_error(&e))?, charge));
        }
        // A compile costs the tenant time: refuse once its budget is spent,
        // and wait no longer than what is left of it.
        let left = self.ledger.compile_time_left()?;
        let slot = self.charge(Resource::Compiles, 1)?;
        let bounds = CompileBounds {
            wait: bounds.wait.min(Duration::from_nanos(left)),
            ..bounds
        };
        let compiling = compile_bounded(
            &self.driver,
            &self.kernels,
            source,
            index,
            bounds,
            Arc::clone(&self.ledger),
            slot,
        );
        Ok(KernelGet::Compiling(compiling, charge))
    }

    /// The second half of `kernel_get`: the kernel is made (or failed);
    /// writes its function handle.
    pub(crate) fn kernel_get_finish(
        &mut self,
        mem: GuestMem<'_>,
        out: u32,
        loaded: Result<Arc<LoadedKernel<D>>, KernelError>,
        charge: OwnedCharge,
    ) -> Result<(), AbiError> {
        let loaded = loaded.map_err(|e| kernel_error(&e))?;
        let handle = self.functions.insert(kernel_entry(&loaded, charge))?;
        abi::write_u64(mem.bytes, out, handle.0)
    }
}

/// A function handle's entry for a made Wasm kernel, paid by `charge`.
pub(crate) fn kernel_entry<D: GpuDriver>(
    loaded: &LoadedKernel<D>,
    charge: OwnedCharge,
) -> Arc<FunctionEntry<D>> {
    Arc::new(FunctionEntry {
        function: loaded.function.clone(),
        _module: Arc::clone(&loaded.module),
        origin: FunctionOrigin::Kernel(loaded.index),
        _charge: Some(charge),
        kernel: Some(KernelInfo {
            name: loaded.name.clone(),
            params: loaded.params.clone(),
            globals: loaded.globals.clone().into(),
            stack_window: loaded.stack_window,
        }),
    })
}

/// Where a `kernel_get` stands after its checks: the kernel (a cache hit),
/// or its compile under way; each with the function handle's charge.
pub(crate) enum KernelGet<D: GpuDriver> {
    Ready(Arc<LoadedKernel<D>>, OwnedCharge),
    Compiling(
        DispatchFuture<Result<Arc<LoadedKernel<D>>, KernelError>>,
        OwnedCharge,
    ),
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
fn check_out_u64(mem: &[u8], out: u32) -> Result<(), AbiError> {
    abi::read_u64(mem, out).map(drop)
}

/// Launch slots with a status word (one per possible launch handle).
const STATUS_WORDS: usize = abi::handle::MAX_TABLE_CAPACITY;
/// A status word: `u32` trap code, `u32` stop, `u64` offset, two `u64`s
/// reserved (`docs/kernels.md`).
const STATUS_BYTES: usize = status::BYTES;

/// A Wasm kernel's arguments are values of its Wasm parameter types (guest
/// offsets are `i32` values, not pointer descriptors).
/// A kernel with a stack window runs only when the window lies in the
/// guest's memory: its stack pointer's launch value is at least the
/// window's size and at most the memory's (`docs/kernels.md`, "Globals and
/// the shadow stack"; the translator relies on it to place frames at
/// constant offsets with no bounds check).
fn check_stack_window(
    kernel: &KernelInfo,
    globals: &[KernelParam],
    mem_len: u64,
) -> Result<(), AbiError> {
    let Some(window) = kernel.stack_window else {
        return Ok(());
    };
    let sp = kernel
        .globals
        .iter()
        .position(|g| g.index == window.global)
        .and_then(|at| globals.get(at));
    match sp {
        Some(KernelParam::I32(sp))
            if (window.bytes..=mem_len).contains(&u64::from(sp.cast_unsigned())) =>
        {
            Ok(())
        }
        Some(KernelParam::I32(sp)) if u64::from(sp.cast_unsigned()) > mem_len => {
            Err(AbiError::new(
                Errno::EINVAL,
                format!(
                    "kernel `{}` has a stack window below its stack pointer, which is {} at \
                     launch: past the end of the guest's memory ({mem_len} bytes)",
                    kernel.name,
                    sp.cast_unsigned()
                ),
            ))
        }
        Some(KernelParam::I32(sp)) => Err(AbiError::new(
            Errno::EINVAL,
            format!(
                "kernel `{}` needs a stack window of {} bytes below the stack pointer, which is \
                 {} at launch: the window would reach below address 0",
                kernel.name,
                window.bytes,
                sp.cast_unsigned()
            ),
        )),
        _ => Err(AbiError::new(
            Errno::EINVAL,
            format!(
                "kernel `{}`: its stack pointer was not read at launch",
                kernel.name
            ),
        )),
    }
}

fn check_kernel_args<B>(
    kernel: &KernelInfo,
    params: &[KernelParam],
    buffers: &[B],
) -> Result<(), AbiError> {
    if !buffers.is_empty() || params.len() != kernel.params.len() {
        return Err(AbiError::new(
            Errno::EINVAL,
            format!(
                "kernel `{}` takes {} value argument(s) ({:?}); {} given{}",
                kernel.name,
                kernel.params.len(),
                kernel.params,
                params.len() + buffers.len(),
                if buffers.is_empty() {
                    ""
                } else {
                    ", and buffer pointers are not values"
                }
            ),
        ));
    }
    for (i, (p, ty)) in params.iter().zip(&kernel.params).enumerate() {
        let ok = matches!(
            (p, ty),
            (KernelParam::I32(_), WasmType::I32)
                | (KernelParam::I64(_), WasmType::I64)
                | (KernelParam::F32(_), WasmType::F32)
                | (KernelParam::F64(_), WasmType::F64)
        );
        if !ok {
            return Err(AbiError::new(
                Errno::EINVAL,
                format!(
                    "argument {i} of kernel `{}` must be {ty:?}, got {p:?} (guest offsets are \
                     passed as i32 values)",
                    kernel.name
                ),
            ));
        }
    }
    Ok(())
}

/// A kernel that could not be made or loaded, as the guest sees it.
pub(crate) fn kernel_error(e: &KernelError) -> AbiError {
    match e {
        KernelError::Lower(LowerError::Unsupported(_)) => {
            AbiError::new(Errno::ENOTSUP, e.to_string())
        }
        KernelError::Lower(LowerError::Invalid(_)) => AbiError::new(Errno::EINVAL, e.to_string()),
        KernelError::Lower(LowerError::TooLarge(_)) | KernelError::TimedOut { .. } => {
            AbiError::new(Errno::EQUOTA, e.to_string())
        }
        KernelError::Panicked(_) => AbiError::new(Errno::EDRIVER, e.to_string()),
        KernelError::Driver { kind, .. } => AbiError::new(Errno::from(*kind), e.to_string()),
    }
}

/// Work on the guest's stream failed: `ELAUNCH`, but `EDEVLOST` when the
/// failure lost the device's context.
fn launch_failed<E: DriverError>(e: E) -> AbiError {
    let errno = match e.kind() {
        ErrorKind::DeviceLost => Errno::EDEVLOST,
        _ => Errno::ELAUNCH,
    };
    AbiError::new(errno, format!("work on the guest's stream failed: {e}"))
}

fn out_of_buffer() -> AbiError {
    AbiError::new(Errno::EFAULT, "range outside the buffer")
}

/// A driver failure as the guest sees it.
pub(crate) fn driver_error<E: DriverError>(call: &str, e: E) -> AbiError {
    AbiError::new(Errno::from(e.kind()), format!("{call}: {e}"))
}
