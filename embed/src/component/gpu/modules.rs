//! Raw PTX and cubin modules for components (`modules` in `wit/gpu.wit`):
//! module and function resources over `wasi_cuda` handles, and launches
//! whose arguments are scalars or pointers into buffers. Loading follows
//! the tenant's `raw_modules` policy, as for a core module.

use tensorwasm_core::{
    Dim3 as GridDim, KernelParam,
    abi::{AbiError, Handle, LaunchArg},
};
use wasmtime::component::Resource;

use crate::kernel::KernelTarget;

use super::{
    GpuError, GpuLaunch, GpuView,
    bindings::tensorwasm::gpu::modules::{self, Dim3, KernelArg},
};

/// A `module` resource: the `wasi_cuda` module handle behind it.
pub struct GpuModule {
    handle: Handle,
}

/// A `function` resource: the `wasi_cuda` function handle behind it.
pub struct GpuFunction {
    handle: Handle,
}

impl<D: KernelTarget + Clone + 'static> GpuView<'_, D> {
    /// A module resource for a new module handle, or the handle freed.
    fn module(
        &mut self,
        loaded: Result<Handle, AbiError>,
        call: &str,
    ) -> Result<Resource<GpuModule>, GpuError> {
        let handle = self.checked(call, loaded)?;
        match self.table.push(GpuModule { handle }) {
            Ok(module) => Ok(module),
            Err(e) => {
                let _ = self.gpu.cuda.module_unload(handle.0);
                Err(e.into())
            }
        }
    }
}

impl<D: KernelTarget + Clone + 'static> modules::Host for GpuView<'_, D> {}

impl<D: KernelTarget + Clone + 'static> modules::HostModule for GpuView<'_, D> {
    fn load_ptx(&mut self, ptx: String) -> Result<Resource<GpuModule>, GpuError> {
        let loaded = self.gpu.cuda.load_ptx(&ptx);
        self.module(loaded, "module.load-ptx")
    }

    fn load_cubin(&mut self, image: Vec<u8>) -> Result<Resource<GpuModule>, GpuError> {
        let loaded = self.gpu.cuda.load_cubin(&image);
        self.module(loaded, "module.load-cubin")
    }

    fn function(
        &mut self,
        module: Resource<GpuModule>,
        name: String,
    ) -> Result<Resource<GpuFunction>, GpuError> {
        let module = self.table.get(&module)?.handle;
        let found = self.gpu.cuda.module_function(module, &name);
        let handle = self.checked("module.function", found)?;
        match self.table.push(GpuFunction { handle }) {
            Ok(function) => Ok(function),
            Err(e) => {
                let _ = self.gpu.cuda.function_release(handle.0);
                Err(e.into())
            }
        }
    }

    fn drop(&mut self, module: Resource<GpuModule>) -> wasmtime::Result<()> {
        let GpuModule { handle } = self.table.delete(module)?;
        // Its functions (and launches in flight) keep it loaded.
        self.gpu
            .cuda
            .module_unload(handle.0)
            .map_err(|e| wasmtime::format_err!("dropping a module: {e}"))
    }
}

/// A WIT grid or block as the driver's.
pub(super) fn dim3(d: Dim3) -> GridDim {
    GridDim {
        x: d.x,
        y: d.y,
        z: d.z,
    }
}

impl<D: KernelTarget + Clone + 'static> modules::HostFunction for GpuView<'_, D> {
    async fn launch(
        &mut self,
        function: Resource<GpuFunction>,
        grid: Dim3,
        block: Dim3,
        shared_memory_bytes: u32,
        args: Vec<KernelArg>,
    ) -> Result<Resource<GpuLaunch>, GpuError> {
        let function = self.table.get(&function)?.handle;
        let mut decoded = Vec::with_capacity(args.len());
        for arg in &args {
            decoded.push(match arg {
                KernelArg::Int32(v) => LaunchArg::Param(KernelParam::I32(*v)),
                KernelArg::Int64(v) => LaunchArg::Param(KernelParam::I64(*v)),
                KernelArg::Float32(v) => LaunchArg::Param(KernelParam::F32(*v)),
                KernelArg::Float64(v) => LaunchArg::Param(KernelParam::F64(*v)),
                KernelArg::Pointer(p) => LaunchArg::Buffer {
                    handle: self.buffer(&p.buffer)?,
                    offset: p.offset,
                },
            });
        }
        let (grid, block) = (dim3(grid), dim3(block));
        let queued = self
            .gpu
            .cuda
            .queue_with_room(|cuda| {
                cuda.launch_on_buffers(function, grid, block, shared_memory_bytes, decoded.clone())
            })
            .await;
        let handle = self.checked("function.launch", queued)?;
        self.launch(handle)
    }

    fn drop(&mut self, function: Resource<GpuFunction>) -> wasmtime::Result<()> {
        let GpuFunction { handle } = self.table.delete(function)?;
        // Launches in flight hold their own reference.
        self.gpu
            .cuda
            .function_release(handle.0)
            .map_err(|e| wasmtime::format_err!("dropping a function: {e}"))
    }
}
