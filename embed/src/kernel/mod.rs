//! Wasm kernels in the embedding: a guest module's bytes kept for
//! translation ([`GuestModule`]), how each driver turns a translated kernel
//! into a loaded module ([`KernelTarget`]: PTX on CUDA, native code on the
//! CPU driver), the cache that translates, lowers and loads each
//! (module, function) once per driver ([`KernelCache`]), and the compile
//! worker that does it off the guest's fiber, bounded in size and time
//! ([`compile_bounded`]). Translation and lowering themselves live in
//! `tensorwasm_core::lower`.

pub mod cpu;
pub mod globals;

use std::{
    collections::HashMap,
    fmt,
    ops::Deref,
    panic::{self, AssertUnwindSafe},
    sync::{
        Arc, Mutex, PoisonError,
        atomic::{AtomicU64, Ordering},
        mpsc,
    },
    time::{Duration, Instant},
};

use tensorwasm_core::{
    DeviceInfo, DriverError, ErrorKind, GpuDriver,
    dispatch::{DispatchFuture, dispatch},
    lower::{
        LowerError, Lowerer, UnsupportedOp,
        ptx::PtxLowerer,
        translate::{
            AlignedArg, KernelGlobal, KernelLimits, KernelSize, KernelVariant, StackWindow,
            TranslatedKernel, WasmType, translate_kernel_variant,
        },
    },
    quota::{OwnedCharge, QuotaLedger},
};
use tensorwasm_cpu::CpuDriver;
use tensorwasm_cuda::CudaDriver;
use tensorwasm_kernels::ptx::PtxFile;

/// A compiled guest module with the Wasm bytes its kernels are translated
/// from. Derefs to the wasmtime module.
#[derive(Clone)]
pub struct GuestModule {
    module: wasmtime::Module,
    source: KernelSource,
}

impl GuestModule {
    /// Compiles `bytes` (Wasm binary or text) for `engine`.
    pub fn new(engine: &wasmtime::Engine, bytes: &[u8]) -> wasmtime::Result<GuestModule> {
        let wasm = wat::parse_bytes(bytes)?.into_owned();
        // Kernels read the guest's mutable globals at launch, through
        // exports the runtime adds (`globals`).
        let compiled = globals::export_mutable_globals(&wasm).map_err(wasmtime::Error::msg)?;
        if compiled.len() != wasm.len() {
            tracing::info!(
                added_bytes = compiled.len() - wasm.len(),
                "guest module: exports added for its mutable globals (kernels read them at \
                 launch); wasmtime's offsets into the guest's code are that many bytes past the \
                 module's (export them, e.g. wasm-ld --export=__stack_pointer, to avoid this)"
            );
        }
        let module = wasmtime::Module::new(engine, &compiled)?;
        Ok(GuestModule {
            module,
            source: KernelSource::new(wasm.into()),
        })
    }

    /// `bytes` (Wasm binary or text) compiled ahead of time for `engine`:
    /// what [`deserialize`](Self::deserialize) loads, without compiling.
    pub fn precompile(engine: &wasmtime::Engine, bytes: &[u8]) -> wasmtime::Result<Vec<u8>> {
        let wasm = wat::parse_bytes(bytes)?;
        let compiled = globals::export_mutable_globals(&wasm).map_err(wasmtime::Error::msg)?;
        engine.precompile_module(&compiled)
    }

    /// The module `bytes` (its Wasm, binary or text, kept for kernel
    /// translation) from `precompiled`, its [`precompile`](Self::precompile)d
    /// form. Fails when wasmtime finds the precompiled code made by another
    /// version or engine configuration.
    ///
    /// # Safety
    ///
    /// `precompiled` must be what [`precompile`](Self::precompile) made of
    /// these `bytes`: wasmtime checks its version and settings, not that
    /// the code is unaltered (`wasmtime::Module::deserialize`'s contract).
    pub unsafe fn deserialize(
        engine: &wasmtime::Engine,
        bytes: &[u8],
        precompiled: &[u8],
    ) -> wasmtime::Result<GuestModule> {
        let wasm = wat::parse_bytes(bytes)?.into_owned();
        // SAFETY: the caller's promise: `precompiled` is this engine
        // configuration's compilation of these bytes.
        let module = unsafe { wasmtime::Module::deserialize(engine, precompiled)? };
        Ok(GuestModule {
            module,
            source: KernelSource::new(wasm.into()),
        })
    }

    /// The Wasm binary and its identity, for kernel translation.
    pub fn source(&self) -> &KernelSource {
        &self.source
    }
}

impl Deref for GuestModule {
    type Target = wasmtime::Module;

    fn deref(&self) -> &wasmtime::Module {
        &self.module
    }
}

/// A module's Wasm binary and a 64-bit identity (FNV-1a of the bytes, plus
/// the length) that keys the kernel cache.
#[derive(Clone)]
pub struct KernelSource {
    wasm: Arc<[u8]>,
    id: (u64, usize),
}

impl KernelSource {
    /// The source of `wasm`.
    pub fn new(wasm: Arc<[u8]>) -> KernelSource {
        let mut hash = 0xcbf2_9ce4_8422_2325u64;
        for b in wasm.iter() {
            hash = (hash ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3);
        }
        let id = (hash, wasm.len());
        KernelSource { wasm, id }
    }

    /// The Wasm binary.
    pub fn wasm(&self) -> &[u8] {
        &self.wasm
    }

    /// Its identity: FNV-1a of the bytes, and their length.
    pub fn id(&self) -> (u64, usize) {
        self.id
    }
}

impl fmt::Debug for KernelSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "KernelSource({:016x}, {} bytes)", self.id.0, self.id.1)
    }
}

/// Why a kernel could not be made.
#[derive(Clone, Debug)]
pub enum KernelError {
    /// Translation or lowering refused it (the guest reads the text).
    Lower(LowerError),
    /// The driver refused the lowered code.
    Driver {
        /// The driver-independent kind.
        kind: ErrorKind,
        /// The driver's message.
        message: String,
    },
    /// The compile ran past the time the guest may wait for it
    /// ([`CompileBounds::wait`]); it goes on on its worker, charged to the
    /// tenant, and its kernel is cached if it succeeds.
    TimedOut {
        /// How long the guest waited.
        waited: Duration,
    },
    /// The compile worker panicked (a bug in translation or lowering): the
    /// host caught it, nothing else was affected.
    Panicked(String),
}

impl fmt::Display for KernelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KernelError::Lower(e) => e.fmt(f),
            KernelError::Driver { message, .. } => {
                write!(f, "loading the kernel failed: {message}")
            }
            KernelError::TimedOut { waited } => write!(
                f,
                "compile-time quota exceeded: the kernel did not compile within {} ms \
                 (the compile goes on, charged to the tenant; a later kernel_get may find it \
                 ready)",
                waited.as_millis()
            ),
            KernelError::Panicked(why) => write!(f, "the kernel compiler failed: {why}"),
        }
    }
}

fn driver_error<E: DriverError>(e: E) -> KernelError {
    KernelError::Driver {
        kind: e.kind(),
        message: e.to_string(),
    }
}

/// A driver that can run Wasm kernels: it lowers a translated kernel to its
/// own code and loads it as a module with one function named after it.
///
/// It also loads the built-in tensor kernels (docs/tensor-ops.md): the PTX
/// build of a kernel file for the device on CUDA, their host kernels on the
/// CPU driver.
pub trait KernelTarget: GpuDriver {
    /// Lowers and loads `kernel`.
    fn load_kernel(&self, kernel: &TranslatedKernel) -> Result<Self::Module, KernelError>;

    /// Loads the built-in kernels of `file`.
    fn load_builtins(&self, file: PtxFile) -> Result<Self::Module, KernelError>;
}

impl KernelTarget for CudaDriver {
    fn load_kernel(&self, kernel: &TranslatedKernel) -> Result<Self::Module, KernelError> {
        let lowerer = ptx_target(self.device())?;
        let ptx = lowerer
            .lower(&kernel.name, &kernel.function, kernel.abi)
            .map_err(KernelError::Lower)?;
        self.load_ptx(&ptx).map_err(driver_error)
    }

    fn load_builtins(&self, file: PtxFile) -> Result<Self::Module, KernelError> {
        let (major, minor) = self.device().compute_capability.ok_or_else(|| {
            KernelError::Lower(LowerError::Invalid(
                "the device reports no compute capability".into(),
            ))
        })?;
        let sm = major * 10 + minor;
        let build =
            tensorwasm_kernels::ptx::build_for(file, sm).ok_or_else(|| KernelError::Driver {
                kind: ErrorKind::NotSupported,
                message: format!(
                    "the built-in {} kernels need sm_75 or newer; this device is sm_{sm}",
                    file.stem()
                ),
            })?;
        self.load_ptx(build.text).map_err(driver_error)
    }
}

/// The PTX target for a device: its compute capability, and the oldest PTX
/// ISA that can target it, provided the driver accepts that ISA.
pub fn ptx_target(device: &DeviceInfo) -> Result<PtxLowerer, KernelError> {
    let invalid = |why: String| KernelError::Lower(LowerError::Invalid(why));
    let sm = device
        .compute_capability
        .ok_or_else(|| invalid("the device reports no compute capability".into()))?;
    let isa = PtxLowerer::min_isa(sm).ok_or_else(|| {
        invalid(format!(
            "sm_{}{} is a GPU the PTX lowerer does not know",
            sm.0, sm.1
        ))
    })?;
    if let Some(max) = device.driver_version.and_then(driver_max_isa)
        && isa > max
    {
        return Err(invalid(format!(
            "sm_{}{} needs PTX ISA {}.{}, newer than the {}.{} this driver accepts",
            sm.0, sm.1, isa.0, isa.1, max.0, max.1
        )));
    }
    Ok(PtxLowerer { sm, isa })
}

/// The newest PTX ISA a CUDA driver of version `(major, minor)` accepts
/// (CUDA's release notes); `None` for versions this table does not know,
/// which are then trusted.
pub fn driver_max_isa((major, minor): (u32, u32)) -> Option<(u32, u32)> {
    match (major, minor) {
        (12, 0..=5) => Some((8, minor)),
        (12, 6) => Some((8, 5)),
        (12, 8) => Some((8, 7)),
        (12, 9) => Some((8, 8)),
        (13, m) => Some((9, m)),
        _ => None,
    }
}

impl KernelTarget for CpuDriver {
    fn load_kernel(&self, kernel: &TranslatedKernel) -> Result<Self::Module, KernelError> {
        let compiled = cpu::CpuKernelLowerer
            .lower(&kernel.name, &kernel.function, kernel.abi)
            .map_err(KernelError::Lower)?;
        Ok(self.host_module([(kernel.name.as_str(), compiled.host_kernel())]))
    }

    fn load_builtins(&self, _file: PtxFile) -> Result<Self::Module, KernelError> {
        // One module of every host kernel serves each file.
        Ok(self.host_module(crate::builtins::cpu::host_kernels(self)))
    }
}

/// A kernel ready to launch: its loaded module and function, and the Wasm
/// parameter types a launch must match.
pub struct LoadedKernel<D: GpuDriver> {
    /// The module holding the kernel (kept loaded by the cache).
    pub module: Arc<D::Module>,
    /// The kernel.
    pub function: D::Function,
    /// Its Wasm parameter types.
    pub params: Vec<WasmType>,
    /// The mutable globals it uses: their launch values follow the Wasm
    /// arguments.
    pub globals: Vec<KernelGlobal>,
    /// Its threads' shadow-stack window, if it makes stack frames.
    pub stack_window: Option<StackWindow>,
    /// Its symbol (the export name, or `kernel_<index>`).
    pub name: String,
    /// Its function index in the guest's module.
    pub index: u32,
    /// Its size, callees inlined: a cache hit is checked against the
    /// asking tenant's limits with it.
    pub size: KernelSize,
    /// The launches it serves (`docs/kernels.md`, "Kernel variants").
    pub variant: KernelVariant,
    /// What its aligned copy assumes of the arguments
    /// ([`TranslatedKernel::aligned_args`]).
    pub aligned_args: Vec<AlignedArg>,
}

/// A cache key: the module's identity, the function's index and the
/// variant.
type KernelKey = ((u64, usize), u32, KernelVariant);

/// What a kernel being made is answered with.
type Made<D> = Result<Arc<LoadedKernel<D>>, KernelError>;

/// Who waits for a kernel being made.
type Waiters<D> = Vec<mpsc::Sender<Made<D>>>;

/// Translates, lowers and loads each (module, function) once for one
/// driver; later requests share the loaded kernel, and requests while it
/// is being made (with the same limits) wait for that one make.
pub struct KernelCache<D: GpuDriver> {
    entries: Mutex<HashMap<KernelKey, Arc<LoadedKernel<D>>>>,
    /// Kernels being made, with the channels of those waiting for them.
    making: Mutex<HashMap<(KernelKey, KernelLimits), Waiters<D>>>,
    lowerings: AtomicU64,
}

impl<D: GpuDriver> Default for KernelCache<D> {
    fn default() -> Self {
        KernelCache {
            entries: Mutex::default(),
            making: Mutex::default(),
            lowerings: AtomicU64::new(0),
        }
    }
}

/// A request's place in the cache: the kernel, a make to wait for, or the
/// make to do (then [`KernelCache::make`] and publish to the waiters).
enum Claim<D: GpuDriver> {
    Ready(Made<D>),
    Wait(mpsc::Receiver<Made<D>>),
    Make,
}

impl<D: GpuDriver> KernelCache<D> {
    /// The kernel of function `index` of `source`, `variant`, if it is
    /// cached and fits `limits` (`Some(Err(TooLarge))` when cached but
    /// larger).
    pub fn lookup(
        &self,
        source: &KernelSource,
        index: u32,
        variant: KernelVariant,
        limits: KernelLimits,
    ) -> Option<Result<Arc<LoadedKernel<D>>, KernelError>> {
        let entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        let hit = entries.get(&(source.id, index, variant))?;
        Some(if limits.admits(hit.size) {
            Ok(Arc::clone(hit))
        } else {
            Err(KernelError::Lower(LowerError::TooLarge(UnsupportedOp {
                op: hit.name.clone(),
                offset: 0,
                reason: format!(
                    "the kernel, every callee inlined, has {} Wasm operators and {} branch \
                     points; this tenant's limits are {} and {}",
                    hit.size.operators, hit.size.branches, limits.operators, limits.branches
                ),
            })))
        })
    }
}

impl<D: KernelTarget> KernelCache<D> {
    /// The kernel of function `index` of `source`, made on first use, within
    /// the host's caps ([`KernelLimits::HOST`]), on the calling thread.
    pub fn get(
        &self,
        driver: &D,
        source: &KernelSource,
        index: u32,
    ) -> Result<Arc<LoadedKernel<D>>, KernelError> {
        self.get_within(driver, source, index, KernelLimits::HOST)
    }

    /// As [`get`](Self::get), refusing a kernel larger than `limits`. The
    /// cache's locks are not held while a kernel is made, so a slow compile
    /// stalls nobody else's `kernel_get`; a request for a kernel being made
    /// with the same limits waits for that make instead of making it again.
    pub fn get_within(
        &self,
        driver: &D,
        source: &KernelSource,
        index: u32,
        limits: KernelLimits,
    ) -> Result<Arc<LoadedKernel<D>>, KernelError> {
        self.get_variant(driver, source, index, KernelVariant::ANY, limits)
    }

    /// As [`get_within`](Self::get_within), for the launches `variant`
    /// serves.
    pub fn get_variant(
        &self,
        driver: &D,
        source: &KernelSource,
        index: u32,
        variant: KernelVariant,
        limits: KernelLimits,
    ) -> Result<Arc<LoadedKernel<D>>, KernelError> {
        let key = (source.id, index, variant);
        match self.claim(source, key, limits) {
            Claim::Ready(made) => made,
            Claim::Wait(answer) => answer.recv().unwrap_or_else(|_| {
                Err(KernelError::Panicked(
                    "the kernel's make ended without an answer".into(),
                ))
            }),
            Claim::Make => self.make_and_publish(driver, source, key, limits),
        }
    }

    /// Where a request for the kernel stands; `Make` registers the caller
    /// as its maker, who must then call [`make_and_publish`]
    /// (Self::make_and_publish).
    fn claim(&self, source: &KernelSource, key: KernelKey, limits: KernelLimits) -> Claim<D> {
        // Lock order: `making`, then `entries` (in `lookup`); the maker
        // publishes in the same order.
        let mut making = self.making.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(hit) = self.lookup(source, key.1, key.2, limits) {
            return Claim::Ready(hit);
        }
        match making.get_mut(&(key, limits)) {
            Some(waiters) => {
                let (sent, answer) = mpsc::channel();
                waiters.push(sent);
                Claim::Wait(answer)
            }
            None => {
                making.insert((key, limits), Vec::new());
                Claim::Make
            }
        }
    }

    /// Makes the kernel (the caller claimed it), caches it if it was made,
    /// and answers everyone who waited for it.
    fn make_and_publish(
        &self,
        driver: &D,
        source: &KernelSource,
        key: KernelKey,
        limits: KernelLimits,
    ) -> Made<D> {
        let made = panic::catch_unwind(AssertUnwindSafe(|| {
            self.make(driver, source, key.1, key.2, limits)
        }))
        .unwrap_or_else(|payload| Err(KernelError::Panicked(panic_text(&*payload))));
        self.publish(key, limits, made)
    }

    /// Ends the claimed make of the kernel with `made`: caches it if it was
    /// made, answers everyone who waited for it, and lets the next request
    /// claim it again if it failed.
    fn publish(&self, key: KernelKey, limits: KernelLimits, made: Made<D>) -> Made<D> {
        let mut making = self.making.lock().unwrap_or_else(PoisonError::into_inner);
        let made = made.map(|loaded| {
            let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
            Arc::clone(entries.entry(key).or_insert(loaded))
        });
        for waiter in making.remove(&(key, limits)).unwrap_or_default() {
            // A waiter that gave up is gone: nobody to answer.
            let _ = waiter.send(made.clone());
        }
        made
    }

    /// Translates, lowers and loads the kernel's `variant`.
    fn make(
        &self,
        driver: &D,
        source: &KernelSource,
        index: u32,
        variant: KernelVariant,
        limits: KernelLimits,
    ) -> Made<D> {
        let started = std::time::Instant::now();
        let translated = translate_kernel_variant(source.wasm(), index, limits, variant)
            .map_err(KernelError::Lower)?;
        let translate = started.elapsed();
        let module = driver.load_kernel(&translated)?;
        let function = driver
            .function(&module, &translated.name)
            .map_err(driver_error)?;
        tracing::debug!(kernel = %translated.name, ?variant, ?translate,
            lower_and_jit = ?started.elapsed() - translate, "Wasm kernel made");
        self.lowerings.fetch_add(1, Ordering::Relaxed);
        Ok(Arc::new(LoadedKernel {
            module: Arc::new(module),
            function,
            params: translated.params.clone(),
            globals: translated.globals.clone(),
            stack_window: translated.stack_window,
            name: translated.name.clone(),
            index,
            size: translated.size,
            variant,
            aligned_args: translated.aligned_args.clone(),
        }))
    }

    /// How many kernels this cache has translated, lowered and loaded.
    pub fn lowerings(&self) -> u64 {
        self.lowerings.load(Ordering::Relaxed)
    }
}

/// What one `kernel_get` may cost: the kernel's size, and how long the
/// guest waits for its compile.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CompileBounds {
    /// The largest kernel it may make (the tenant's quota; the host's caps
    /// hold either way).
    pub limits: KernelLimits,
    /// How long the guest waits before `kernel_get` answers `EQUOTA`.
    pub wait: Duration,
}

/// Stack of a compile worker. Translation and lowering recurse over a
/// kernel's values and blocks; at the host's caps
/// ([`KernelLimits::HOST`]) they need far less than this (the tests compile
/// kernels at the caps on it). Only the pages touched are ever mapped.
pub const COMPILE_STACK_BYTES: usize = 256 << 20;

/// Makes `variant` of the kernel of function `index` of `source` on a worker thread of
/// its own (never the guest's fiber, whose stack is small, and never the
/// executor's thread, which other guests share), within `bounds`.
///
/// The future completes with the kernel, or with
/// [`KernelError::TimedOut`] once `bounds.wait` has passed. A compile that
/// outlives the wait cannot be interrupted (the driver's PTX JIT is one
/// call); it runs on, holds `compile_slot` (the tenant's
/// [`Resource::Compiles`](tensorwasm_core::quota::Resource::Compiles)
/// charge) until it ends, and its whole time is charged to `ledger`'s
/// compile budget. Its kernel is cached if it succeeds. A request for a
/// kernel another request is making with the same limits waits for that
/// make (within its own `bounds.wait`) and gives `compile_slot` back at
/// once: one make, charged to the tenant that started it.
#[allow(clippy::too_many_arguments)]
pub fn compile_bounded<D: KernelTarget + Clone + 'static>(
    driver: &D,
    cache: &Arc<KernelCache<D>>,
    source: &KernelSource,
    index: u32,
    variant: KernelVariant,
    bounds: CompileBounds,
    ledger: Arc<QuotaLedger>,
    compile_slot: OwnedCharge,
) -> DispatchFuture<Made<D>> {
    let (done, result) = dispatch();
    let key = (source.id, index, variant);
    let received = match cache.claim(source, key, bounds.limits) {
        Claim::Ready(made) => {
            let _ = done.complete(made);
            return result;
        }
        // Another tenant is making this kernel: wait for that make (within
        // this guest's own bound), with no worker, slot or time of ours.
        Claim::Wait(answer) => {
            drop(compile_slot);
            answer
        }
        Claim::Make => {
            let (w_driver, w_cache, w_source) = (driver.clone(), Arc::clone(cache), source.clone());
            let (sent, received) = mpsc::channel();
            let worker = std::thread::Builder::new()
                .name("tensorwasm-compile".into())
                .stack_size(COMPILE_STACK_BYTES)
                .spawn(move || {
                    let start = Instant::now();
                    let made = w_cache.make_and_publish(&w_driver, &w_source, key, bounds.limits);
                    let spent = u64::try_from(start.elapsed().as_nanos()).unwrap_or(u64::MAX);
                    ledger.spend_compile_time(spent);
                    drop(compile_slot);
                    // The waiter may have given up: then nobody reads this.
                    let _ = sent.send(made);
                });
            if let Err(e) = worker {
                // Nobody will make it: answer the waiters, free the claim.
                let failed = Err(KernelError::Driver {
                    kind: ErrorKind::OutOfMemory,
                    message: format!("no compile worker could be started: {e}"),
                });
                let _ = done.complete(cache.publish(key, bounds.limits, failed));
                return result;
            }
            received
        }
    };
    // The watchdog ends when the make does or the wait is over, whichever
    // comes first; the guest's future completes then.
    let watchdog = std::thread::Builder::new()
        .name("tensorwasm-compile-wait".into())
        .spawn(move || {
            let outcome = match received.recv_timeout(bounds.wait) {
                // Made within these very limits: makes are shared per
                // limits, and a cached kernel was checked by `claim`.
                Ok(made) => made,
                Err(mpsc::RecvTimeoutError::Timeout) => Err(KernelError::TimedOut {
                    waited: bounds.wait,
                }),
                Err(mpsc::RecvTimeoutError::Disconnected) => Err(KernelError::Panicked(
                    "the compile worker ended without an answer".into(),
                )),
            };
            let _ = done.complete(outcome);
        });
    if let Err(e) = watchdog {
        // Without a watchdog the guest would wait for the compile however
        // long it takes; refuse instead (the worker still ends on its own).
        let (done, refused) = dispatch();
        let _ = done.complete(Err(KernelError::Driver {
            kind: ErrorKind::OutOfMemory,
            message: format!("no compile watchdog could be started: {e}"),
        }));
        return refused;
    }
    result
}

fn panic_text(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn device(sm: (u32, u32), driver: (u32, u32)) -> DeviceInfo {
        let mut info = CpuDriver::with_capacity(1 << 20).unwrap().device().clone();
        info.compute_capability = Some(sm);
        info.driver_version = Some(driver);
        info
    }

    #[test]
    fn ptx_targets_follow_the_device_and_the_driver() {
        let h100 = ptx_target(&device((9, 0), (13, 0))).unwrap();
        assert_eq!((h100.sm, h100.isa), ((9, 0), (7, 8)));
        let t4 = ptx_target(&device((7, 5), (12, 2))).unwrap();
        assert_eq!((t4.sm, t4.isa), ((7, 5), (6, 3)));
        // sm_120 needs ISA 8.7, which a 12.4 driver does not accept.
        let old = ptx_target(&device((12, 0), (12, 4)));
        assert!(matches!(
            old,
            Err(KernelError::Lower(LowerError::Invalid(_)))
        ));
        assert!(
            ptx_target(&device((6, 1), (13, 0))).is_err(),
            "unknown target"
        );
        assert_eq!(driver_max_isa((12, 9)), Some((8, 8)));
        assert_eq!(driver_max_isa((11, 8)), None);
    }
}
