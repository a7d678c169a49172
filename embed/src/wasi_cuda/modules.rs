//! Modules and functions: raw PTX and cubin modules, `function_get`, and
//! the Wasm kernels `kernel_get` makes through the kernel cache; what a
//! function handle names ([`FunctionEntry`]). Launching one is `launch`'s.

use std::{sync::Arc, time::Duration};

use tensorwasm_core::{
    GpuDriver, KernelParam,
    abi::{self, AbiError, Errno, Handle},
    dispatch::DispatchFuture,
    lower::translate::{
        AlignedArg, BodyVariant, GridVariant, KernelGlobal, KernelVariant, StackWindow, WasmType,
        admits_aligned,
    },
    quota::{OwnedCharge, Resource},
};

use crate::kernel::{
    CompileBounds, KernelError, KernelSource, KernelTarget, LoadedKernel, compile_bounded,
};

use super::{
    ctx::{GuestMem, WasiCudaCtx, check_out_u64},
    errors::{driver_error, kernel_error},
    kernel_names::KernelName,
};

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
    /// `function_get` on a guest-loaded module (kept loaded while the
    /// function lives), by entry-point name.
    Raw(Arc<ModuleEntry<D>>, String),
    /// `kernel_get`: function `index` of the guest's module.
    Kernel(u32),
}

/// A function handle's target, with its module kept loaded. (A built-in
/// kernel is never a handle: `tensor_op` launches the runtime's shared
/// [`BuiltinFunction`](crate::builtins::BuiltinFunction) directly.)
pub(crate) struct FunctionEntry<D: GpuDriver> {
    pub(super) function: D::Function,
    _module: Arc<D::Module>,
    pub(crate) origin: FunctionOrigin<D>,
    /// The tenant's charge for the function handle.
    _charge: OwnedCharge,
    /// For a Wasm kernel: its name and Wasm parameter types.
    pub(super) kernel: Option<KernelInfo>,
}

/// What a launch of a Wasm kernel checks its arguments against.
pub(crate) struct KernelInfo {
    pub(super) name: String,
    pub(super) params: Vec<WasmType>,
    /// The mutable globals it uses, whose launch values follow the
    /// arguments.
    pub(super) globals: Arc<[KernelGlobal]>,
    /// Its threads' shadow-stack window.
    pub(super) stack_window: Option<StackWindow>,
    /// Its function index in the guest's module.
    pub(super) index: u32,
    /// The variant the handle's function is (`docs/kernels.md`, "Kernel
    /// variants"): a launch it does not serve runs another.
    pub(super) variant: KernelVariant,
    /// What the aligned copy assumes of the arguments.
    pub(super) aligned_args: Arc<[AlignedArg]>,
}

impl KernelInfo {
    /// The variant a launch with `params` (the Wasm arguments, then the
    /// globals' launch values) over a memory of `mem_len` bytes runs;
    /// `own_grid` when the host launches the guest's grid itself without a
    /// time limit.
    pub(super) fn variant_for(
        &self,
        params: &[KernelParam],
        mem_len: u64,
        own_grid: bool,
    ) -> KernelVariant {
        let grid = match self.variant.grid {
            GridVariant::Own if own_grid => GridVariant::Own,
            _ => GridVariant::Any,
        };
        let arg = |i: usize| match params.get(i) {
            Some(KernelParam::I32(v)) => Some(*v as u32),
            _ => None,
        };
        let bodies = match self.variant.bodies {
            BodyVariant::Aligned if !admits_aligned(&self.aligned_args, arg, mem_len) => {
                BodyVariant::General
            }
            bodies => bodies,
        };
        KernelVariant { grid, bodies }
    }
}

impl<D: GpuDriver> WasiCudaCtx<D> {
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
        let handle = self.load_ptx(text)?;
        abi::write_u64(mem.bytes, out, handle.0)
    }

    /// Loads PTX text as a new module handle, if the policy allows raw
    /// modules (`module_load_ptx` without guest memory).
    pub(crate) fn load_ptx(&mut self, text: &str) -> Result<Handle, AbiError> {
        self.allowed(self.policy.raw_modules, "raw PTX modules (not sandboxed)")?;
        let entry = self.load_module(ModuleSource::Ptx(text.into()))?;
        self.modules.insert(entry)
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
        let handle = self.load_cubin(&mem.bytes[range])?;
        abi::write_u64(mem.bytes, out, handle.0)
    }

    /// Loads a cubin or fatbin image as a new module handle, if the policy
    /// allows raw modules (`module_load_cubin` without guest memory).
    pub(crate) fn load_cubin(&mut self, image: &[u8]) -> Result<Handle, AbiError> {
        self.allowed(self.policy.raw_modules, "cubin modules (not sandboxed)")?;
        // The image's own tables are checked here, whatever the driver.
        tensorwasm_core::image::check_module_image(image).map_err(|e| {
            AbiError::new(Errno::EIMAGE, format!("malformed cubin/fatbin image: {e}"))
        })?;
        let entry = self.load_module(ModuleSource::Cubin(image.into()))?;
        self.modules.insert(entry)
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
            _charge: charge,
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
        self.modules.get(Handle(module))?;
        let name = abi::read_str(mem.bytes, name_ptr, name_len)?;
        let handle = self.module_function(Handle(module), name)?;
        abi::write_u64(mem.bytes, out, handle.0)
    }

    /// Entry point `name` of loaded module `module` as a new function
    /// handle (`function_get` without guest memory).
    pub(crate) fn module_function(
        &mut self,
        module: Handle,
        name: &str,
    ) -> Result<Handle, AbiError> {
        let loaded = Arc::clone(self.modules.get(module)?);
        let entry = self.raw_function(loaded, name)?;
        self.functions.insert(entry)
    }

    pub(crate) fn function_release(&mut self, function: u64) -> Result<(), AbiError> {
        // Launches in flight hold their own reference to the function.
        self.functions.remove(Handle(function)).map(drop)
    }
}

impl<D: KernelTarget> WasiCudaCtx<D> {
    /// The first half of `kernel_get` (and of `kernel_get_export` and
    /// `kernel_get_table`, which name the function otherwise): checks the
    /// call, resolves `name` to a function index of the guest's own module,
    /// then finds that function's kernel in the cache or starts its compile
    /// on a worker ([`compile_bounded`]); the guest awaits the second
    /// (`KernelGet::Compiling`), then
    /// [`kernel_get_finish`](Self::kernel_get_finish) writes the handle.
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
        self.kernels_allowed()?;
        let source = registered(&self.kernel_source)?;
        let index = self.kernel_names.resolve(mem.bytes, source.wasm(), name)?;
        self.kernel_get_index(index)
    }

    /// `EPERM` unless the tenant's policy allows Wasm kernels.
    pub(crate) fn kernels_allowed(&self) -> Result<(), AbiError> {
        self.allowed(self.policy.wasm_kernels, "Wasm kernels")
    }

    /// The second step of `kernel_get_start` (and a component's
    /// `kernel.get`): charges the function handle, then finds function
    /// `index`'s kernel in the cache or starts its compile.
    pub(crate) fn kernel_get_index(&mut self, index: u32) -> Result<KernelGet<D>, AbiError>
    where
        D: Clone + 'static,
    {
        let source = registered(&self.kernel_source)?;
        let charge = self.charge(Resource::Functions, 1)?;
        let variant = self.kernel_get_variant();
        if let Some(hit) = self
            .kernels
            .lookup(source, index, variant, self.compile_bounds.limits)
        {
            return Ok(KernelGet::Ready(hit.map_err(|e| kernel_error(&e))?, charge));
        }
        let compiling = self.compile_variant(index, variant)?;
        Ok(KernelGet::Compiling(compiling, charge))
    }

    /// The variant `kernel_get` makes (`docs/kernels.md`, "Kernel
    /// variants"): the aligned copy alone, and the guest's own grid alone
    /// when this guest's launches always run it (a full share of the
    /// device and no time limit). A launch it does not serve makes the
    /// variant it needs then.
    pub(super) fn kernel_get_variant(&self) -> KernelVariant {
        KernelVariant {
            grid: if self.launches_own_grid() {
                GridVariant::Own
            } else {
                GridVariant::Any
            },
            bodies: BodyVariant::Aligned,
        }
    }

    /// Starts the compile of `variant` of the kernel of function `index`
    /// of the guest's module on a worker ([`compile_bounded`]), within the
    /// tenant's compile bounds, charged to its compile budget.
    pub(crate) fn compile_variant(
        &mut self,
        index: u32,
        variant: KernelVariant,
    ) -> Result<DispatchFuture<MadeKernel<D>>, AbiError>
    where
        D: Clone + 'static,
    {
        let source = registered(&self.kernel_source)?;
        // A compile costs the tenant time: refuse once its budget is spent,
        // and wait no longer than what is left of it.
        let left = self.ledger.compile_time_left()?;
        let slot = self.charge(Resource::Compiles, 1)?;
        let bounds = CompileBounds {
            wait: self.compile_bounds.wait.min(Duration::from_nanos(left)),
            ..self.compile_bounds
        };
        Ok(compile_bounded(
            &self.driver,
            &self.kernels,
            source,
            index,
            variant,
            bounds,
            Arc::clone(&self.ledger),
            slot,
        ))
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
        let handle = self.kernel_handle(loaded, charge)?;
        abi::write_u64(mem.bytes, out, handle.0)
    }

    /// The function handle of a made kernel (or its failure as the errno).
    fn kernel_handle(
        &mut self,
        loaded: Result<Arc<LoadedKernel<D>>, KernelError>,
        charge: OwnedCharge,
    ) -> Result<Handle, AbiError> {
        let loaded = loaded.map_err(|e| kernel_error(&e))?;
        self.functions.insert(kernel_entry(&loaded, charge))
    }

    /// The function handle of function `index`'s kernel (a component's
    /// `kernel.get`, whose name is resolved already): made or found as
    /// `kernel_get` does, the caller suspended while it compiles.
    pub(crate) async fn kernel_by_index(&mut self, index: u32) -> Result<Handle, AbiError>
    where
        D: Clone + 'static,
    {
        let (loaded, charge) = match self.kernel_get_index(index)? {
            KernelGet::Ready(kernel, charge) => (Ok(kernel), charge),
            KernelGet::Compiling(compiling, charge) => (compiling.await, charge),
        };
        self.kernel_handle(loaded, charge)
    }

    /// Why the kernel behind function handle `handle` cannot run without
    /// its guest's globals (which a component's core instance does not
    /// export to the host), or `None` when it reads none.
    pub(crate) fn kernel_reads_globals(&self, handle: Handle) -> Option<String> {
        let function = self.functions.get(handle).ok()?;
        let kernel = function.kernel.as_ref()?;
        (!kernel.globals.is_empty()).then(|| {
            format!(
                "kernel `{}` reads {} mutable global(s) of its module (a shadow-stack frame, \
                 for one: locals the compiler keeps in memory); a component's kernels run \
                 without their module's globals, which its instance does not export",
                kernel.name,
                kernel.globals.len()
            )
        })
    }
}

/// The guest's module, which its kernels are made of (`ENOTSUP` when the
/// host registered none).
fn registered(source: &Option<KernelSource>) -> Result<&KernelSource, AbiError> {
    source.as_ref().ok_or_else(|| {
        AbiError::new(
            Errno::ENOTSUP,
            "the host did not register this guest's module for Wasm kernels",
        )
    })
}

/// What a kernel's compile ends with.
pub(crate) type MadeKernel<D> = Result<Arc<LoadedKernel<D>>, KernelError>;

/// A function handle's entry for a made Wasm kernel, paid by `charge`.
pub(crate) fn kernel_entry<D: GpuDriver>(
    loaded: &LoadedKernel<D>,
    charge: OwnedCharge,
) -> Arc<FunctionEntry<D>> {
    Arc::new(FunctionEntry {
        function: loaded.function.clone(),
        _module: Arc::clone(&loaded.module),
        origin: FunctionOrigin::Kernel(loaded.index),
        _charge: charge,
        kernel: Some(KernelInfo {
            name: loaded.name.clone(),
            params: loaded.params.clone(),
            globals: loaded.globals.clone().into(),
            stack_window: loaded.stack_window,
            index: loaded.index,
            variant: loaded.variant,
            aligned_args: loaded.aligned_args.clone().into(),
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
