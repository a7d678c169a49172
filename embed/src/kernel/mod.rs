//! Wasm kernels in the embedding: a guest module's bytes kept for
//! translation ([`GuestModule`]), how each driver turns a translated kernel
//! into a loaded module ([`KernelTarget`]: PTX on CUDA, native code on the
//! CPU driver), and the cache that translates, lowers and loads each
//! (module, function) once per driver ([`KernelCache`]). Translation and
//! lowering themselves live in `tensorwasm_core::lower`.

pub mod cpu;

use std::{
    collections::HashMap,
    fmt,
    ops::Deref,
    sync::{
        Arc, Mutex, PoisonError,
        atomic::{AtomicU64, Ordering},
    },
};

use tensorwasm_core::{
    DeviceInfo, DriverError, ErrorKind, GpuDriver,
    lower::{
        LowerError, Lowerer,
        ptx::PtxLowerer,
        translate::{TranslatedKernel, WasmType, translate_kernel},
    },
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
        let module = wasmtime::Module::new(engine, &wasm)?;
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
}

impl fmt::Display for KernelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KernelError::Lower(e) => e.fmt(f),
            KernelError::Driver { message, .. } => {
                write!(f, "loading the kernel failed: {message}")
            }
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
    /// Its symbol (the export name, or `kernel_<index>`).
    pub name: String,
}

/// A cache key: the module's identity and the function's index.
type KernelKey = ((u64, usize), u32);

/// Translates, lowers and loads each (module, function) once for one
/// driver; later requests share the loaded kernel.
pub struct KernelCache<D: GpuDriver> {
    entries: Mutex<HashMap<KernelKey, Arc<LoadedKernel<D>>>>,
    lowerings: AtomicU64,
}

impl<D: GpuDriver> Default for KernelCache<D> {
    fn default() -> Self {
        KernelCache {
            entries: Mutex::default(),
            lowerings: AtomicU64::new(0),
        }
    }
}

impl<D: KernelTarget> KernelCache<D> {
    /// The kernel of function `index` of `source`, made on first use.
    pub fn get(
        &self,
        driver: &D,
        source: &KernelSource,
        index: u32,
    ) -> Result<Arc<LoadedKernel<D>>, KernelError> {
        let key = (source.id, index);
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(hit) = entries.get(&key) {
            return Ok(Arc::clone(hit));
        }
        let translated = translate_kernel(source.wasm(), index).map_err(KernelError::Lower)?;
        let module = driver.load_kernel(&translated)?;
        let function = driver
            .function(&module, &translated.name)
            .map_err(driver_error)?;
        self.lowerings.fetch_add(1, Ordering::Relaxed);
        let loaded = Arc::new(LoadedKernel {
            module: Arc::new(module),
            function,
            params: translated.params.clone(),
            name: translated.name.clone(),
        });
        entries.insert(key, Arc::clone(&loaded));
        Ok(loaded)
    }

    /// How many kernels this cache has translated, lowered and loaded.
    pub fn lowerings(&self) -> u64 {
        self.lowerings.load(Ordering::Relaxed)
    }
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
