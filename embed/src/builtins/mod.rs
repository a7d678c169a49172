//! Built-in tensor kernels in the runtime (docs/tensor-ops.md): the cache
//! that loads each kernel file once per driver and hands out its entry
//! points, and the CPU driver's host kernels (`cpu`). Checking a guest's
//! descriptor is `tensorwasm_core::abi::tensor`'s job; choosing the kernel
//! and its geometry is `tensorwasm_kernels::table`'s. It sits below
//! `wasi_cuda`, whose `tensor_op` launches what it hands out
//! (`BuiltinFunction`), and must not reach up into it.

pub(crate) mod cpu;

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, PoisonError},
};

use tensorwasm_core::GpuDriver;
use tensorwasm_kernels::{ptx::PtxFile, table::BuiltinKernel};

use crate::kernel::{KernelError, KernelTarget};

/// The built-in kernels loaded on one driver: each kernel file's module is
/// loaded on first use and kept; each entry point is looked up once.
pub struct BuiltinCache<D: GpuDriver> {
    modules: Mutex<HashMap<PtxFile, Arc<D::Module>>>,
    functions: Mutex<HashMap<&'static str, Arc<BuiltinFunction<D>>>>,
}

/// A built-in kernel's entry point, with its file's module kept loaded for
/// as long as anything (the cache, a launch in flight) holds it.
pub(crate) struct BuiltinFunction<D: GpuDriver> {
    /// The entry point.
    pub(crate) function: D::Function,
    _module: Arc<D::Module>,
}

impl<D: GpuDriver> Default for BuiltinCache<D> {
    fn default() -> Self {
        BuiltinCache {
            modules: Mutex::default(),
            functions: Mutex::default(),
        }
    }
}

impl<D: GpuDriver> BuiltinCache<D> {
    /// Kernel files loaded so far.
    pub fn loaded_files(&self) -> usize {
        self.modules
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}

impl<D: KernelTarget> BuiltinCache<D> {
    /// `kernel`'s function on `driver`, loading its file if this is the
    /// file's first use.
    pub(crate) fn function(
        &self,
        driver: &D,
        kernel: &'static BuiltinKernel,
    ) -> Result<Arc<BuiltinFunction<D>>, KernelError> {
        let mut functions = self
            .functions
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(f) = functions.get(kernel.entry) {
            return Ok(Arc::clone(f));
        }
        let module = {
            let mut modules = self.modules.lock().unwrap_or_else(PoisonError::into_inner);
            match modules.get(&kernel.file) {
                Some(m) => Arc::clone(m),
                None => {
                    let m = Arc::new(driver.load_builtins(kernel.file)?);
                    modules.insert(kernel.file, Arc::clone(&m));
                    m
                }
            }
        };
        let function = driver
            .function(&module, kernel.entry)
            .map_err(|e| KernelError::Driver {
                kind: tensorwasm_core::DriverError::kind(&e),
                message: format!("built-in kernel {}: {e}", kernel.entry),
            })?;
        let entry = Arc::new(BuiltinFunction {
            function,
            _module: module,
        });
        functions.insert(kernel.entry, Arc::clone(&entry));
        Ok(entry)
    }
}
