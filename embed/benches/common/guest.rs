//! The guest side of guest_overhead and wasm_kernels: one instance of a
//! bench guest (`guest_overhead.wat`, `wasm_kernels.wat`) and the thin
//! exports over `wasi_cuda` that both guests have (`load_function`,
//! `launch_many`, `sync`, `prefetch`), with the guest's own exports
//! ([`OwnExports`]) beside them. The host writes PTX text, kernel names,
//! argument descriptors and data into the guest's memory itself; the guest
//! keeps its out-slots in the first 64 bytes.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use tensorwasm_core::{
    abi::{ArgDescriptor, encode_args},
    quota::QuotaLedger,
};
use tensorwasm_cuda::CudaDriver;
use tensorwasm_embed::{
    kernel::GuestModule,
    runtime::{GuestRuntime, GuestState},
    tenant::TenantConfig,
    wasmtime::{self, Instance, Memory, Store, TypedFunc, WasmParams, WasmResults},
};

use super::BenchResult;

/// Where the host writes a kernel's name for `load_function`.
pub const GUEST_NAME: u32 = 512;
/// Where the host writes PTX text for `load_function`.
pub const GUEST_PTX: u32 = 4096;
/// Where the benches' data starts.
pub const GUEST_DATA: u32 = 65536;
const WASM_PAGE: usize = 65536;

/// A kernel of the guest side: its function handle and where its argument
/// descriptors are in guest memory.
#[derive(Clone, Copy)]
pub struct GuestKernel {
    pub function: i64,
    pub args_ptr: u32,
    pub args_count: u32,
}

/// Where the guest's `prefetch` sends memory.
#[derive(Clone, Copy)]
pub enum PrefetchTo {
    Device = 0,
    Host = 1,
}

/// A bench guest's own exports, beside the ones every bench guest has:
/// looked up once, when the guest is instantiated.
pub trait OwnExports: Sized {
    fn look_up(instance: &Instance, store: &mut Store<GuestState<CudaDriver>>)
    -> BenchResult<Self>;
}

/// One instance of a bench guest: the exports every bench guest has, and
/// `own`, its own.
pub struct GuestInstance<E> {
    pub store: Store<GuestState<CudaDriver>>,
    pub memory: Memory,
    pub own: E,
    load_function: TypedFunc<(i32, i32, i32, i32), i64>,
    launch_many: TypedFunc<(i64, i32, i32, i32, i32, i32), i32>,
    sync: TypedFunc<(), i32>,
    prefetch: TypedFunc<(i32, i32, i32), i32>,
}

/// A wasmtime error as the benches report it: `what` failed, and why.
pub fn wasm_error(what: &str) -> impl FnOnce(wasmtime::Error) -> String + '_ {
    move |e| format!("{what}: {e:#}")
}

/// `value` as a guest `i32`, or an error naming `what`.
pub fn guest_i32(value: usize, what: &str) -> BenchResult<i32> {
    i32::try_from(value).map_err(|_| format!("{what} {value} does not fit an i32"))
}

/// Export `name` of `instance`, typed.
pub fn export<P: WasmParams, R: WasmResults>(
    instance: &Instance,
    store: &mut Store<GuestState<CudaDriver>>,
    name: &str,
) -> BenchResult<TypedFunc<P, R>> {
    instance
        .get_typed_func(store, name)
        .map_err(|e| format!("guest export `{name}`: {e:#}"))
}

impl<E: OwnExports> GuestInstance<E> {
    /// A trusted guest: no quota, one physical block per virtual block.
    pub async fn new(
        runtime: &GuestRuntime<CudaDriver>,
        module: &GuestModule,
    ) -> BenchResult<GuestInstance<E>> {
        let store = runtime.store().map_err(wasm_error("creating the store"))?;
        GuestInstance::instantiate(runtime, module, store).await
    }

    /// A guest in the context of the tenant `config`, with a ledger of its
    /// own, as `Tenant::new` makes it.
    pub async fn tenant(
        runtime: &GuestRuntime<CudaDriver>,
        module: &GuestModule,
        config: &TenantConfig,
    ) -> BenchResult<GuestInstance<E>> {
        let ledger = Arc::new(QuotaLedger::new(config.quota));
        let store = runtime
            .tenant_store(config, ledger)
            .map_err(wasm_error("creating the tenant's store"))?;
        GuestInstance::instantiate(runtime, module, store).await
    }

    async fn instantiate(
        runtime: &GuestRuntime<CudaDriver>,
        module: &GuestModule,
        mut store: Store<GuestState<CudaDriver>>,
    ) -> BenchResult<GuestInstance<E>> {
        let instance = runtime
            .instantiate(&mut store, module)
            .await
            .map_err(wasm_error("instantiating the bench guest"))?;
        let memory = instance
            .get_memory(&mut store, "memory")
            .ok_or("the guest exports no memory")?;
        Ok(GuestInstance {
            load_function: export(&instance, &mut store, "load_function")?,
            launch_many: export(&instance, &mut store, "launch_many")?,
            sync: export(&instance, &mut store, "sync")?,
            prefetch: export(&instance, &mut store, "prefetch")?,
            own: E::look_up(&instance, &mut store)?,
            store,
            memory,
        })
    }

    /// An export's result: `Ok` for errno 0, else the guest's last error.
    pub fn check(&self, call: &str, result: wasmtime::Result<i32>) -> BenchResult<()> {
        match result {
            Ok(0) => Ok(()),
            Ok(errno) => Err(format!(
                "guest `{call}` returned errno {errno}: {}",
                self.store.data().cuda.last_error()
            )),
            Err(e) => Err(format!("guest `{call}` trapped: {e:#}")),
        }
    }

    /// A handle-returning export's result: the handle, else the guest's
    /// last error.
    pub fn handle(&self, call: &str, result: wasmtime::Result<i64>) -> BenchResult<i64> {
        match result {
            Ok(handle) if handle >= 0 => Ok(handle),
            Ok(errno) => Err(format!(
                "guest `{call}` returned errno {}: {}",
                -errno,
                self.store.data().cuda.last_error()
            )),
            Err(e) => Err(format!("guest `{call}` trapped: {e:#}")),
        }
    }

    pub fn write(&mut self, at: u32, bytes: &[u8]) -> BenchResult<()> {
        self.memory
            .write(&mut self.store, at as usize, bytes)
            .map_err(|e| format!("writing {} bytes of guest memory at {at}: {e}", bytes.len()))
    }

    /// `len` bytes of guest memory at `at`.
    pub fn bytes(&self, at: u32, len: usize) -> BenchResult<&[u8]> {
        self.memory
            .data(&self.store)
            .get(at as usize..at as usize + len)
            .ok_or_else(|| format!("guest memory has no {len} bytes at {at}"))
    }

    /// `len` bytes of guest memory at `at`, writable.
    pub fn bytes_mut(&mut self, at: u32, len: usize) -> BenchResult<&mut [u8]> {
        self.memory
            .data_mut(&mut self.store)
            .get_mut(at as usize..at as usize + len)
            .ok_or_else(|| format!("guest memory has no {len} bytes at {at}"))
    }

    /// Grows the guest's memory to at least `bytes`.
    pub fn ensure(&mut self, bytes: usize) -> BenchResult<()> {
        let have = self.memory.data_size(&self.store);
        if bytes > have {
            let pages = (bytes - have).div_ceil(WASM_PAGE) as u64;
            self.memory
                .grow(&mut self.store, pages)
                .map_err(wasm_error("growing guest memory"))?;
        }
        Ok(())
    }

    /// Loads `ptx` through the guest, looks up `name`, and writes `args` for
    /// it at `args_ptr`.
    pub async fn load(
        &mut self,
        ptx: &str,
        name: &str,
        args_ptr: u32,
        args: &[ArgDescriptor],
    ) -> BenchResult<GuestKernel> {
        self.write(GUEST_PTX, ptx.as_bytes())?;
        self.write(GUEST_NAME, name.as_bytes())?;
        self.write(args_ptr, &encode_args(args))?;
        let params = (
            GUEST_PTX as i32,
            guest_i32(ptx.len(), "PTX length")?,
            GUEST_NAME as i32,
            guest_i32(name.len(), "name length")?,
        );
        let result = self.load_function.call_async(&mut self.store, params).await;
        Ok(GuestKernel {
            function: self.handle(&format!("load_function` of `{name}"), result)?,
            args_ptr,
            args_count: args.len() as u32,
        })
    }

    /// `k` launches of `kernel` on `grid` blocks of `block` threads in one
    /// export call, none waited for; the call's time.
    pub async fn launch_many(
        &mut self,
        kernel: GuestKernel,
        k: usize,
        grid: u32,
        block: u32,
    ) -> BenchResult<Duration> {
        let params = (
            kernel.function,
            guest_i32(k, "launch count")?,
            grid as i32,
            block as i32,
            kernel.args_ptr as i32,
            kernel.args_count as i32,
        );
        let (result, elapsed) = timed_call(&self.launch_many, &mut self.store, params).await;
        self.check("launch_many", result)?;
        Ok(elapsed)
    }

    /// Waits for every launch and releases their handles.
    pub async fn sync(&mut self) -> BenchResult<()> {
        let result = self.sync.call_async(&mut self.store, ()).await;
        self.check("sync", result)
    }

    /// Migrates `len` bytes of guest memory at `at` to the device or the
    /// host.
    pub async fn prefetch(&mut self, at: u32, len: usize, to: PrefetchTo) -> BenchResult<()> {
        let params = (at as i32, guest_i32(len, "prefetch length")?, to as i32);
        let result = self.prefetch.call_async(&mut self.store, params).await;
        self.check("prefetch", result)
    }
}

/// One call of `func` in `store`, and the call's time.
pub async fn timed_call<P, R>(
    func: &TypedFunc<P, R>,
    store: &mut Store<GuestState<CudaDriver>>,
    params: P,
) -> (wasmtime::Result<R>, Duration)
where
    P: WasmParams + Sync,
    R: WasmResults + Sync,
{
    let start = Instant::now();
    let result = func.call_async(store, params).await;
    (result, start.elapsed())
}
