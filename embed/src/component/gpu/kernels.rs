//! Wasm kernels from components (`kernels` in `wit/gpu.wit`): which core
//! module of a component its kernels come from, found once when it is
//! compiled ([`KernelModule::of`]); the `kernel` resource over `wasi_cuda`
//! function handles, launched over the memory the component's instance
//! made (recorded at instantiation, `memory::recording_memories`); and the
//! `kernel-intrinsics` imports, which trap outside a kernel. Translation,
//! caching, checks and launches are the `wasi_cuda` context's, as for a
//! core module's kernels.

use std::sync::Arc;

use tensorwasm_core::{
    Advice, Dim3 as GridDim, KernelParam, PrefetchTarget,
    abi::{AbiError, Errno, Handle},
    lower::{
        INTRINSIC_INTERFACE, Intrinsic, atomic::AtomicIntrinsic, cooperative::CoopIntrinsic,
        math::MathIntrinsic, translate::function_by_export,
    },
};
use wasmparser::{Parser, Payload};
use wasmtime::component::{Linker, Resource};

use crate::{
    kernel::{KernelSource, KernelTarget},
    memory::GuestRegionInfo,
    wasi_cuda::MAX_EXPORT_NAME,
};

use super::{
    GpuError, GpuLaunch, GpuView,
    bindings::tensorwasm::gpu::kernels::{self, KernelValue},
    modules::dim3,
};

/// Where a component's kernels come from: the one core module that
/// defines a memory (the program's; wit-component's shims and fix-ups
/// define none), or why there is none to take.
#[derive(Clone, Debug)]
pub struct KernelModule(Result<KernelSource, String>);

impl KernelModule {
    /// Finds it in `wasm`, a component's binary. Every core module the
    /// component embeds (nested components' too) is read; exactly one may
    /// define a memory, or kernels are refused with the count.
    pub fn of(wasm: &[u8]) -> KernelModule {
        let mut defining = Vec::new();
        let mut modules = 0;
        for payload in Parser::new(0).parse_all(wasm) {
            let Ok(payload) = payload else {
                // Compiling the component reports what is wrong with it.
                return KernelModule(Err("the component cannot be read".into()));
            };
            if let Payload::ModuleSection {
                unchecked_range, ..
            } = payload
            {
                modules += 1;
                let range = unchecked_range.start as usize..unchecked_range.end as usize;
                let Some(bytes) = wasm.get(range) else {
                    return KernelModule(Err("the component cannot be read".into()));
                };
                if defines_memory(bytes) {
                    defining.push(bytes);
                }
            }
        }
        KernelModule(match defining.as_slice() {
            [one] => Ok(KernelSource::new(Arc::from(*one))),
            [] => Err(format!(
                "none of the component's {modules} core module(s) defines a memory for kernels \
                 to run over"
            )),
            many => Err(format!(
                "{} of the component's {modules} core modules define a memory (programs \
                 composed into one component, each with its own memory): Wasm kernels need \
                 its code to be one core module over one memory",
                many.len()
            )),
        })
    }

    /// No module: the component was not registered for kernels.
    pub(crate) fn none() -> Self {
        KernelModule(Err(
            "the host did not register this component's code for Wasm kernels".into(),
        ))
    }

    /// The module's bytes and identity, or why the component has none.
    pub fn source(&self) -> Result<&KernelSource, &str> {
        self.0.as_ref().map_err(String::as_str)
    }
}

/// Whether core module `wasm` defines (not imports) a memory.
fn defines_memory(wasm: &[u8]) -> bool {
    Parser::new(0)
        .parse_all(wasm)
        .any(|payload| matches!(payload, Ok(Payload::MemorySection(reader)) if reader.count() > 0))
}

/// What a component's store knows for its kernels: the module they come
/// from and the memory its instance made.
#[derive(Clone, Debug)]
pub(crate) struct KernelMemory {
    /// The region of the kernel module's memory, or why there is none.
    pub(crate) region: Result<GuestRegionInfo, String>,
}

impl KernelMemory {
    /// Not instantiated yet: no memory.
    pub(crate) fn none() -> Self {
        KernelMemory {
            region: Err("the component is not instantiated".into()),
        }
    }

    /// The memory among `made` (what the instantiation made, in order)
    /// that kernels run over: the only one. The kernel module defines one
    /// memory, and every other module of the component defines none, so an
    /// instance that made more has instantiated a module twice.
    pub(crate) fn from_made(made: Vec<GuestRegionInfo>) -> Self {
        let count = made.len();
        let mut made = made.into_iter();
        let region = match (made.next(), made.next()) {
            (Some(one), None) => Ok(one),
            (None, _) => Err(
                "the component's instance made no memory TensorWasm manages (kernels need its \
                 memory in managed memory)"
                    .into(),
            ),
            (Some(_), Some(_)) => Err(format!(
                "the component's instance made {count} memories: Wasm kernels need exactly one"
            )),
        };
        KernelMemory { region }
    }
}

/// A `kernel` resource: the `wasi_cuda` function handle behind it.
pub struct GpuKernel {
    handle: Handle,
}

impl<D: KernelTarget + Clone + 'static> kernels::Host for GpuView<'_, D> {
    fn prefetch(
        &mut self,
        offset: u32,
        len: u32,
        target: kernels::PrefetchTarget,
    ) -> Result<(), GpuError> {
        let target = match target {
            kernels::PrefetchTarget::Device => PrefetchTarget::Device,
            kernels::PrefetchTarget::Host => PrefetchTarget::Host,
        };
        let done = self
            .kernel_memory()
            .and_then(|guest| self.gpu.cuda.prefetch_in(guest, offset, len, target));
        self.checked("kernels.prefetch", done)
    }

    fn advise(&mut self, offset: u32, len: u32, advice: kernels::Advice) -> Result<(), GpuError> {
        use kernels::Advice as A;
        let advice = match advice {
            A::SetReadMostly => Advice::SetReadMostly,
            A::UnsetReadMostly => Advice::UnsetReadMostly,
            A::PreferDevice => Advice::PreferDevice,
            A::PreferHost => Advice::PreferHost,
            A::UnsetPreferredLocation => Advice::UnsetPreferredLocation,
            A::AccessedByDevice => Advice::AccessedByDevice,
            A::UnsetAccessedByDevice => Advice::UnsetAccessedByDevice,
        };
        let done = self
            .kernel_memory()
            .and_then(|guest| self.gpu.cuda.advise_in(guest, offset, len, advice));
        self.checked("kernels.advise", done)
    }
}

impl<D: KernelTarget + Clone + 'static> GpuView<'_, D> {
    /// The memory the component's kernels run over (`enotsup` when there
    /// is none, as for `kernel.get`).
    fn kernel_memory(&self) -> Result<tensorwasm_core::abi::GuestMemoryRef, AbiError> {
        match &self.gpu.memory.region {
            Ok(region) => Ok(region.memory_ref()),
            Err(why) => Err(AbiError::new(Errno::ENOTSUP, why.clone())),
        }
    }

    /// The function index `export` names in the component's kernel module,
    /// after the checks that come before any compile.
    fn kernel_index(&mut self, export: &str) -> Result<u32, AbiError> {
        self.gpu.cuda.kernels_allowed()?;
        let source = self.gpu.kernel_source()?;
        if let Err(why) = &self.gpu.memory.region {
            return Err(AbiError::new(Errno::ENOTSUP, why.clone()));
        }
        // As `kernel_get_export`: no module exports a longer name, and the
        // name goes into the error text.
        if export.len() > MAX_EXPORT_NAME as usize {
            return Err(AbiError::invalid(format!(
                "the export name is {} bytes long; at most {MAX_EXPORT_NAME}",
                export.len()
            )));
        }
        function_by_export(source.wasm(), export).map_err(|e| AbiError::invalid(e.to_string()))
    }
}

impl<D: KernelTarget + Clone + 'static> kernels::HostKernel for GpuView<'_, D> {
    async fn get(&mut self, export: String) -> Result<Resource<GpuKernel>, GpuError> {
        const CALL: &str = "kernel.get";
        let index = self.kernel_index(&export);
        let index = self.checked(CALL, index)?;
        let handle = self.gpu.cuda.kernel_by_index(index).await;
        let handle = self.checked(CALL, handle)?;
        if let Some(reason) = self.gpu.cuda.kernel_reads_globals(handle) {
            let _ = self.gpu.cuda.function_release(handle.0);
            return self.checked(CALL, Err(AbiError::new(Errno::ENOTSUP, reason)));
        }
        match self.table.push(GpuKernel { handle }) {
            Ok(kernel) => Ok(kernel),
            Err(e) => {
                let _ = self.gpu.cuda.function_release(handle.0);
                Err(e.into())
            }
        }
    }

    async fn launch(
        &mut self,
        kernel: Resource<GpuKernel>,
        grid: kernels::Dim3,
        block: kernels::Dim3,
        shared_memory_bytes: u32,
        args: Vec<KernelValue>,
    ) -> Result<Resource<GpuLaunch>, GpuError> {
        let function = self.table.get(&kernel)?.handle;
        let params: Vec<KernelParam> = args
            .iter()
            .map(|arg| match *arg {
                KernelValue::Int32(v) => KernelParam::I32(v),
                KernelValue::Int64(v) => KernelParam::I64(v),
                KernelValue::Float32(v) => KernelParam::F32(v),
                KernelValue::Float64(v) => KernelParam::F64(v),
            })
            .collect();
        let (grid, block): (GridDim, GridDim) = (dim3(grid), dim3(block));
        let region = self.gpu.memory.region.clone();
        let queued = match region {
            Ok(region) => {
                self.gpu
                    .cuda
                    .queue_with_room(|cuda| {
                        cuda.launch_over_region(
                            function,
                            grid,
                            block,
                            shared_memory_bytes,
                            params.clone(),
                            &region,
                        )
                    })
                    .await
            }
            Err(why) => Err(AbiError::new(Errno::ENOTSUP, why)),
        };
        let handle = self.checked("kernel.launch", queued)?;
        self.launch(handle)
    }

    fn drop(&mut self, kernel: Resource<GpuKernel>) -> wasmtime::Result<()> {
        let GpuKernel { handle } = self.table.delete(kernel)?;
        // Launches in flight hold their own reference.
        self.gpu
            .cuda
            .function_release(handle.0)
            .map_err(|e| wasmtime::format_err!("dropping a kernel: {e}"))
    }
}

/// Every intrinsic's field name, as core modules import it.
fn intrinsic_names() -> impl Iterator<Item = String> {
    Intrinsic::ALL
        .iter()
        .map(|i| i.import_name().to_string())
        .chain(
            AtomicIntrinsic::ALL
                .iter()
                .map(|a| a.import_name().to_string()),
        )
        .chain(CoopIntrinsic::all().map(|c| {
            let mut name = String::new();
            c.import_name(&mut name);
            name
        }))
        .chain(
            MathIntrinsic::ALL
                .iter()
                .map(|m| m.import_name().to_string()),
        )
}

/// Defines `kernel-intrinsics` (version `version`) on `linker`: each
/// function traps when called, since outside a kernel there is no thread
/// position, block or warp to answer with (inside one the translator
/// lowers the call, and this is never reached).
pub(super) fn add_intrinsics_to_linker<T: 'static>(
    linker: &mut Linker<T>,
    version: &str,
) -> wasmtime::Result<()> {
    let mut instance = linker.instance(&format!("{INTRINSIC_INTERFACE}{version}"))?;
    for field in intrinsic_names() {
        let name = field.replace('_', "-");
        let message = format!(
            "`tensorwasm:gpu/kernel-intrinsics.{name}` was called outside a Wasm kernel: the \
             intrinsics exist only in kernels launched with `kernel.launch`"
        );
        instance.func_new(&name, move |_, _, _, _| {
            Err(wasmtime::Error::msg(message.clone()))
        })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tensorwasm_core::lower::translate::WasmType;

    /// A WIT type's name for a Wasm value type, as `kernel-intrinsics`
    /// spells it.
    fn wit(ty: WasmType) -> &'static str {
        match ty {
            WasmType::I32 => "s32",
            WasmType::I64 => "s64",
            WasmType::F32 => "f32",
            WasmType::F64 => "f64",
        }
    }

    /// Every intrinsic's kebab name and its WIT signature,
    /// `(param types) -> result`, from the translator's tables.
    fn expected() -> Vec<(String, String)> {
        let sig = |name: String, params: Vec<WasmType>, result: Option<WasmType>| {
            let params: Vec<&str> = params.into_iter().map(wit).collect();
            let result = result.map_or(String::new(), |r| format!(" -> {}", wit(r)));
            (
                name.replace('_', "-"),
                format!("({}){result}", params.join(", ")),
            )
        };
        let mut all = Vec::new();
        for i in Intrinsic::ALL {
            all.push(sig(i.import_name().into(), vec![], Some(WasmType::I32)));
        }
        for a in AtomicIntrinsic::ALL {
            all.push(sig(
                a.import_name().into(),
                a.params().collect(),
                Some(a.value_type()),
            ));
        }
        for c in CoopIntrinsic::all() {
            let mut name = String::new();
            c.import_name(&mut name);
            all.push(sig(name, c.params(), c.result()));
        }
        for m in MathIntrinsic::ALL {
            all.push(sig(
                m.import_name().into(),
                vec![m.value_type(); m.arity()],
                Some(m.value_type()),
            ));
        }
        all.sort();
        all
    }

    /// The functions of `kernel-intrinsics` in `wit/gpu.wit`, as
    /// [`expected`] writes them.
    fn declared() -> Vec<(String, String)> {
        let wit = include_str!("../../../../wit/gpu.wit");
        let start = wit
            .find("interface kernel-intrinsics {")
            .expect("wit/gpu.wit declares kernel-intrinsics");
        let body = &wit[start..];
        let body = &body[..body.find("\n}").expect("the interface ends")];
        let mut all: Vec<(String, String)> = body
            .lines()
            .map(str::trim)
            .filter_map(|line| {
                let (name, rest) = line.split_once(": func(")?;
                let (params, result) = rest.trim_end_matches(';').split_once(')')?;
                let params: Vec<&str> = params
                    .split(", ")
                    .filter(|p| !p.is_empty())
                    .map(|p| p.split_once(": ").expect("name: type").1)
                    .collect();
                Some((name.to_string(), format!("({}){result}", params.join(", "))))
            })
            .collect();
        all.sort();
        all
    }

    fn module_of(wat: &str) -> Result<Vec<u8>, String> {
        let wasm = wat::parse_str(wat).expect("valid WAT");
        KernelModule::of(&wasm)
            .source()
            .map(|s| s.wasm().to_vec())
            .map_err(str::to_string)
    }

    #[test]
    fn kernels_come_from_the_one_core_module_that_defines_a_memory() {
        // The program's module beside a shim that imports its memory: the
        // program's bytes, exactly.
        let found = module_of(
            r#"(component
                 (core module $shim (import "a" "m" (memory 1)))
                 (core module $program (memory 1) (func (export "k"))))"#,
        )
        .expect("one module defines a memory");
        let program =
            wat::parse_str(r#"(module $program (memory 1) (func (export "k")))"#).unwrap();
        assert_eq!(found, program);
        // In a nested component too.
        assert!(
            module_of(r#"(component (component (core module (memory 1))))"#).is_ok(),
            "nested"
        );
        // None, or two: refused with the count.
        let none = module_of(r#"(component (core module (func)))"#).unwrap_err();
        assert!(
            none.contains("none of the component's 1 core module(s)"),
            "{none}"
        );
        let two = module_of(r#"(component (core module (memory 1)) (core module (memory 2)))"#)
            .unwrap_err();
        assert!(
            two.starts_with("2 of the component's 2 core modules"),
            "{two}"
        );
    }

    #[test]
    fn the_wit_interface_declares_every_intrinsic_the_translator_knows() {
        let (expected, declared) = (expected(), declared());
        assert_eq!(expected.len(), 65);
        assert_eq!(declared, expected);
        // And the host defines each (trapping) under the same name.
        let mut names: Vec<String> = intrinsic_names().map(|n| n.replace('_', "-")).collect();
        names.sort();
        let declared: Vec<String> = declared.into_iter().map(|(n, _)| n).collect();
        assert_eq!(names, declared);
    }
}
