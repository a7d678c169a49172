//! What a Wasm guest pays over raw CUDA driver calls, measured side by side
//! in one process on device 0's primary context:
//!
//! 1. launch overhead: host time per launch call, guest `launch` against a
//!    raw `cuLaunchKernel` (and `cuLaunchKernel` + `cuLaunchHostFunc`, which
//!    is what the guest's launch queues), empty kernel;
//! 2. latency from launch to the wait returning, guest `launch` + `wait`
//!    (the default, adaptive wait; always spinning up to 50 µs first; never
//!    spinning) against three raw ways to wait, on an empty and on a 10 ms
//!    kernel, with the process's CPU use while it waits; and the CPU of 64
//!    guests waiting at once, each on a 10 ms kernel;
//! 3. vector-add bandwidth over the guest's linear memory (managed memory)
//!    against three `cuMemAlloc` buffers.
//!
//! The raw side calls `tensorwasm_cuda::sys` directly, as a C program would;
//! the guest side runs `guest_overhead.wat` through [`GuestRuntime`]. Prints
//! a table and writes every sample to `$OUT/guest_overhead.json` (or
//! `./guest_overhead.json`). Run with
//! `cargo bench -p tensorwasm-embed --bench guest_overhead`; see
//! `docs/benchmarks/README.md`.
//!
//! Environment: `OUT` (where the JSON goes), `GUEST_OVERHEAD_SEED` (the seed
//! of the random inputs, decimal or `0x` hex; printed either way),
//! `TENSORWASM_LIBCUDA` (the driver library, for both sides).

mod common;

use common::{DeviceRecord, Target, command_line, driver_version, rounded, utc_timestamp};
use serde::Serialize;
use std::{
    ffi::{CStr, CString, c_char, c_void},
    fmt::Write as _,
    process::ExitCode,
    ptr,
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use tensorwasm_core::{
    GpuDriver,
    abi::{ArgDescriptor, encode_args},
};
use tensorwasm_cuda::{CudaDriver, DEFAULT_LIBCUDA, LIBCUDA_ENV, sys};
use tensorwasm_embed::runtime::{GuestRuntime, GuestState};
use tensorwasm_embed::wasi_cuda::WaitPolicy;
use wasmtime::{Memory, Store, TypedFunc};

/// The bench guest (thin exports over the `wasi_cuda` imports).
const GUEST_WAT: &str = include_str!("guest_overhead.wat");
/// `empty()`: does nothing.
const EMPTY_PTX: &str = include_str!("../../kernels/bench/empty.ptx");
/// `spin(ns)`: returns after `ns` nanoseconds of `%globaltimer`.
const SPIN_PTX: &str = include_str!("../../kernels/bench/spin.ptx");
/// `vadd(a, b, c, n)`: `c[i] = a[i] + b[i]`.
const VADD_PTX: &str = include_str!("../../kernels/test/vector_add.ptx");

/// Launches per timed batch in the launch-overhead measurement.
const LAUNCH_BATCH: usize = 256;
/// Timed batches per method.
const LAUNCH_BATCHES: usize = 200;
/// Untimed batches per method before them.
const LAUNCH_WARMUP_BATCHES: usize = 20;
/// Timed launch-to-wait round trips per method, empty kernel.
const LATENCY_ITERS: usize = 2000;
/// Untimed round trips per method before them.
const LATENCY_WARMUP: usize = 200;
/// How long the spin kernel runs.
const SPIN_NS: u64 = 10_000_000;
/// Timed round trips per method, spin kernel.
const SPIN_ITERS: usize = 30;
/// Untimed round trips per method before them.
const SPIN_WARMUP: usize = 3;
/// The sleep between two `cuEventQuery` calls of the sleep-poll waiter.
const SLEEP_POLL: Duration = Duration::from_micros(50);
/// Elements per vector of the vector add (64 Mi floats: 256 MiB a vector).
const VADD_N: usize = 64 << 20;
/// Threads per block of the vector add.
const VADD_BLOCK: u32 = 256;
/// Timed vector-add launches per repetition (then one sync, also timed).
const VADD_LAUNCHES: usize = 20;
/// Repetitions of the vector-add measurement; the median is reported.
const VADD_REPS: usize = 5;
/// The guest's memory limit: 1 GiB of managed memory, reserved lazily.
const GUEST_MEMORY_LIMIT: usize = 1 << 30;

/// Guest memory layout (the guest keeps its out-slots below 64).
const GUEST_ARGS_EMPTY: u32 = 256;
const GUEST_ARGS_SPIN: u32 = 320;
const GUEST_ARGS_VADD: u32 = 384;
const GUEST_NAME: u32 = 512;
const GUEST_PTX: u32 = 4096;
const GUEST_DATA: u32 = 65536;
const WASM_PAGE: usize = 65536;

type BenchResult<T> = Result<T, String>;

fn main() -> ExitCode {
    let driver = match CudaDriver::new(0) {
        Ok(d) => d,
        Err(e) => {
            eprintln!(
                "guest_overhead: needs a CUDA device, and none is usable here; nothing measured.\n\
                 CudaDriver::new(0): {e}"
            );
            return ExitCode::from(2);
        }
    };
    match run(driver) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("guest_overhead: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(driver: CudaDriver) -> BenchResult<()> {
    let seed = seed()?;
    let info = driver.device().clone();
    let command = command_line();
    let date = utc_timestamp();
    let driver_version = driver_version(&info);
    println!(
        "guest_overhead on {} (driver {driver_version}), {date}",
        info.name
    );
    println!("command: {command}");
    println!("seed of the random inputs: {seed:#x} (set GUEST_OVERHEAD_SEED to repeat)");

    let mut raw = RawCuda::open()?;
    let runtime = GuestRuntime::new(driver, GUEST_MEMORY_LIMIT)
        .map_err(|e| format!("building the guest runtime: {e:#}"))?;
    let rows = futures::executor::block_on(async {
        let mut guest = Guest::new(&runtime).await?;
        let mut rows = Vec::new();
        println!("measuring launch overhead...");
        rows.extend(launch_overhead(&mut raw, &mut guest).await?);
        println!("measuring wait latency...");
        rows.extend(wait_latency(&mut raw, &mut guest, &runtime).await?);
        println!("measuring {MANY_GUESTS} guests waiting at once...");
        rows.push(many_waiting(&runtime).await?);
        println!("measuring vector-add bandwidth...");
        rows.extend(bandwidth(&mut raw, &mut guest, seed).await?);
        BenchResult::Ok(rows)
        // The guest (its memory, modules, stream) is dropped here.
    })?;
    drop(raw);

    println!();
    print!("{}", table(&rows));
    let path = common::write_record(
        "guest_overhead.json",
        &Record::new(&rows, &info, date, command, seed),
    )?;
    println!("raw numbers: {}", path.display());
    Ok(())
}

// ---------------------------------------------------------------------------
// The raw side.

/// Device 0's primary context, one stream and one event, driven through
/// `tensorwasm_cuda::sys` with no layer in between.
struct RawCuda {
    lib: sys::CudaLib,
    device: sys::CUdevice,
    ctx: sys::CUcontext,
    stream: sys::CUstream,
    event: sys::CUevent,
    modules: Vec<sys::CUmodule>,
}

/// A kernel of the raw side and its parameters, packed as `cuLaunchKernel`
/// reads them: one 8-byte slot per parameter, and an array of pointers to
/// the slots.
struct RawKernel {
    function: sys::CUfunction,
    _slots: Box<[u64]>,
    ptrs: Box<[*mut c_void]>,
}

impl RawKernel {
    fn new(function: sys::CUfunction, params: &[u64]) -> RawKernel {
        let mut slots: Box<[u64]> = params.into();
        // The slots live on the heap, so the pointers stay valid when the
        // box moves into the struct. A 4-byte parameter is read from the low
        // (first, little-endian) half of its slot.
        let ptrs = slots
            .iter_mut()
            .map(|s| ptr::from_mut(s).cast::<c_void>())
            .collect();
        RawKernel {
            function,
            _slots: slots,
            ptrs,
        }
    }

    /// `kernelParams` for `cuLaunchKernel`: null for a kernel without any.
    fn params(&mut self) -> *mut *mut c_void {
        if self.ptrs.is_empty() {
            ptr::null_mut()
        } else {
            self.ptrs.as_mut_ptr()
        }
    }
}

/// A `cuMemAlloc` buffer, freed on drop.
struct RawBuffer<'a> {
    raw: &'a RawCuda,
    ptr: sys::CUdeviceptr,
    bytes: usize,
}

impl Drop for RawBuffer<'_> {
    fn drop(&mut self) {
        // SAFETY: allocated by `RawCuda::alloc`, freed once; the stream was
        // synchronized after the last kernel that used it.
        let _ = unsafe { self.raw.lib.cuMemFree_v2(self.ptr) };
    }
}

/// A completion callback that does nothing: the raw side's stand-in for the
/// one the guest's launch queues. It must not call into CUDA.
unsafe extern "C" fn noop_callback(_user_data: *mut c_void) {}

impl RawCuda {
    /// Loads the driver library as `tensorwasm_cuda` does, retains device 0's
    /// primary context (the one `CudaDriver::new(0)` uses), makes it current
    /// and creates a stream (blocking, like the guest's) and an event without
    /// timing.
    fn open() -> BenchResult<RawCuda> {
        let library = std::env::var(LIBCUDA_ENV).unwrap_or_else(|_| DEFAULT_LIBCUDA.to_string());
        // SAFETY: loading libcuda runs its initialisers, which have no
        // preconditions; symbols are resolved into Results (checked below).
        let lib = unsafe { sys::CudaLib::new(&library) }
            .map_err(|e| format!("loading {library}: {e}"))?;
        let symbols = [
            ("cuGetErrorName", lib.cuGetErrorName.is_ok()),
            ("cuInit", lib.cuInit.is_ok()),
            ("cuDeviceGet", lib.cuDeviceGet.is_ok()),
            (
                "cuDevicePrimaryCtxRetain",
                lib.cuDevicePrimaryCtxRetain.is_ok(),
            ),
            (
                "cuDevicePrimaryCtxRelease_v2",
                lib.cuDevicePrimaryCtxRelease_v2.is_ok(),
            ),
            ("cuCtxSetCurrent", lib.cuCtxSetCurrent.is_ok()),
            ("cuModuleLoadDataEx", lib.cuModuleLoadDataEx.is_ok()),
            ("cuModuleGetFunction", lib.cuModuleGetFunction.is_ok()),
            ("cuModuleUnload", lib.cuModuleUnload.is_ok()),
            ("cuStreamCreate", lib.cuStreamCreate.is_ok()),
            ("cuStreamSynchronize", lib.cuStreamSynchronize.is_ok()),
            ("cuStreamDestroy_v2", lib.cuStreamDestroy_v2.is_ok()),
            ("cuEventCreate", lib.cuEventCreate.is_ok()),
            ("cuEventRecord", lib.cuEventRecord.is_ok()),
            ("cuEventQuery", lib.cuEventQuery.is_ok()),
            ("cuEventDestroy_v2", lib.cuEventDestroy_v2.is_ok()),
            ("cuLaunchKernel", lib.cuLaunchKernel.is_ok()),
            ("cuLaunchHostFunc", lib.cuLaunchHostFunc.is_ok()),
            ("cuMemAlloc_v2", lib.cuMemAlloc_v2.is_ok()),
            ("cuMemFree_v2", lib.cuMemFree_v2.is_ok()),
            ("cuMemcpyHtoD_v2", lib.cuMemcpyHtoD_v2.is_ok()),
            ("cuMemcpyDtoH_v2", lib.cuMemcpyDtoH_v2.is_ok()),
        ];
        let missing: Vec<&str> = symbols
            .iter()
            .filter(|(_, ok)| !ok)
            .map(|(name, _)| *name)
            .collect();
        if !missing.is_empty() {
            return Err(format!("{library} lacks {}", missing.join(", ")));
        }
        let mut raw = RawCuda {
            lib,
            device: 0,
            ctx: ptr::null_mut(),
            stream: ptr::null_mut(),
            event: ptr::null_mut(),
            modules: Vec::new(),
        };
        // SAFETY: cuInit takes only its flags, which must be 0.
        raw.check("cuInit", unsafe { raw.lib.cuInit(0) })?;
        let mut device = 0;
        // SAFETY: the out-pointer is a live local.
        raw.check("cuDeviceGet", unsafe {
            raw.lib.cuDeviceGet(&mut device, 0)
        })?;
        raw.device = device;
        let mut ctx = ptr::null_mut();
        // SAFETY: the out-pointer is a live local; `device` came from the driver.
        let status = unsafe { raw.lib.cuDevicePrimaryCtxRetain(&mut ctx, device) };
        raw.check("cuDevicePrimaryCtxRetain", status)?;
        raw.ctx = ctx;
        // SAFETY: `ctx` is retained until `raw` drops.
        raw.check("cuCtxSetCurrent", unsafe { raw.lib.cuCtxSetCurrent(ctx) })?;
        let mut stream = ptr::null_mut();
        let flags = sys::CUstream_flags_enum::CU_STREAM_DEFAULT.0;
        // SAFETY: the out-pointer is a live local; the context is current.
        let status = unsafe { raw.lib.cuStreamCreate(&mut stream, flags) };
        raw.check("cuStreamCreate", status)?;
        raw.stream = stream;
        let mut event = ptr::null_mut();
        let flags = sys::CUevent_flags_enum::CU_EVENT_DISABLE_TIMING.0;
        // SAFETY: as for the stream.
        let status = unsafe { raw.lib.cuEventCreate(&mut event, flags) };
        raw.check("cuEventCreate", status)?;
        raw.event = event;
        Ok(raw)
    }

    /// `Ok` for `CUDA_SUCCESS`, else the call's name and the error's.
    fn check(&self, call: &str, status: sys::CUresult) -> BenchResult<()> {
        if status == sys::CUresult::CUDA_SUCCESS {
            return Ok(());
        }
        let mut name: *const c_char = ptr::null();
        // SAFETY: cuGetErrorName takes any code and writes a pointer to a
        // static string, or fails and leaves `name` null.
        let named = unsafe { self.lib.cuGetErrorName(status, &mut name) };
        let name = if named == sys::CUresult::CUDA_SUCCESS && !name.is_null() {
            // SAFETY: the driver's static, NUL-terminated error name.
            unsafe { CStr::from_ptr(name) }
                .to_string_lossy()
                .into_owned()
        } else {
            "an unknown error".to_string()
        };
        Err(format!("{call} failed: {name} ({})", status.0))
    }

    /// Loads PTX text and looks up one kernel (`cuModuleLoadDataEx` without
    /// JIT options: `sys.rs` has no `cuModuleLoadData`, and this is the same
    /// call with zero options).
    fn load(&mut self, ptx: &str, name: &str) -> BenchResult<sys::CUfunction> {
        let image = CString::new(ptx).map_err(|e| format!("PTX of `{name}`: {e}"))?;
        let mut module = ptr::null_mut();
        // SAFETY: `image` is NUL-terminated PTX text that outlives the call;
        // no options are passed (count 0, null arrays).
        let status = unsafe {
            self.lib.cuModuleLoadDataEx(
                &mut module,
                image.as_ptr().cast(),
                0,
                ptr::null_mut(),
                ptr::null_mut(),
            )
        };
        self.check("cuModuleLoadDataEx", status)?;
        self.modules.push(module);
        let cname = CString::new(name).map_err(|e| format!("kernel name {name:?}: {e}"))?;
        let mut function = ptr::null_mut();
        // SAFETY: `module` was loaded above; `cname` is NUL-terminated.
        let status = unsafe {
            self.lib
                .cuModuleGetFunction(&mut function, module, cname.as_ptr())
        };
        self.check("cuModuleGetFunction", status)?;
        Ok(function)
    }

    /// Queues `kernel` on the stream, 1-D.
    ///
    /// # Safety
    /// What the kernel's parameters point at must stay allocated until it
    /// has finished.
    #[inline]
    unsafe fn launch(&self, kernel: &mut RawKernel, grid: u32, block: u32) -> BenchResult<()> {
        // SAFETY: the stream and function are live; `params` holds one
        // pointer per kernel parameter to a slot that outlives the call (the
        // driver copies them); what the kernel touches is the caller's.
        let status = unsafe {
            self.lib.cuLaunchKernel(
                kernel.function,
                grid,
                1,
                1,
                block,
                1,
                1,
                0,
                self.stream,
                kernel.params(),
                ptr::null_mut(),
            )
        };
        self.check("cuLaunchKernel", status)
    }

    /// Queues [`noop_callback`] after the work queued so far.
    #[inline]
    fn host_func(&self) -> BenchResult<()> {
        // SAFETY: the stream is live; the callback ignores its (null)
        // argument and never calls into CUDA.
        let status = unsafe {
            self.lib
                .cuLaunchHostFunc(self.stream, Some(noop_callback), ptr::null_mut())
        };
        self.check("cuLaunchHostFunc", status)
    }

    /// Records the event after the work queued so far.
    #[inline]
    fn record(&self) -> BenchResult<()> {
        // SAFETY: the event and stream are live and of the current context.
        let status = unsafe { self.lib.cuEventRecord(self.event, self.stream) };
        self.check("cuEventRecord", status)
    }

    /// Whether the work before the last `record` has finished.
    #[inline]
    fn query(&self) -> BenchResult<bool> {
        // SAFETY: the event is live.
        let status = unsafe { self.lib.cuEventQuery(self.event) };
        if status == sys::CUresult::CUDA_ERROR_NOT_READY {
            return Ok(false);
        }
        self.check("cuEventQuery", status).map(|()| true)
    }

    /// Blocks until the stream is idle.
    #[inline]
    fn synchronize(&self) -> BenchResult<()> {
        // SAFETY: the stream is live.
        let status = unsafe { self.lib.cuStreamSynchronize(self.stream) };
        self.check("cuStreamSynchronize", status)
    }

    fn alloc(&self, bytes: usize) -> BenchResult<RawBuffer<'_>> {
        let mut dptr = 0;
        // SAFETY: the out-pointer is a live local; the context is current.
        let status = unsafe { self.lib.cuMemAlloc_v2(&mut dptr, bytes) };
        self.check("cuMemAlloc_v2", status)?;
        Ok(RawBuffer {
            raw: self,
            ptr: dptr,
            bytes,
        })
    }

    fn copy_to(&self, dst: &RawBuffer<'_>, src: &[u8]) -> BenchResult<()> {
        if src.len() != dst.bytes {
            return Err(format!("copying {} bytes into {}", src.len(), dst.bytes));
        }
        // SAFETY: `dst` is a live allocation of `src.len()` bytes; `src` is
        // readable for that long.
        let status = unsafe {
            self.lib
                .cuMemcpyHtoD_v2(dst.ptr, src.as_ptr().cast(), src.len())
        };
        self.check("cuMemcpyHtoD_v2", status)
    }

    fn copy_from(&self, dst: &mut [u8], src: &RawBuffer<'_>) -> BenchResult<()> {
        if dst.len() != src.bytes {
            return Err(format!("copying {} bytes out of {}", src.bytes, dst.len()));
        }
        // SAFETY: `src` is a live allocation of `dst.len()` bytes; `dst` is
        // writable for that long.
        let status = unsafe {
            self.lib
                .cuMemcpyDtoH_v2(dst.as_mut_ptr().cast(), src.ptr, dst.len())
        };
        self.check("cuMemcpyDtoH_v2", status)
    }
}

impl Drop for RawCuda {
    fn drop(&mut self) {
        if self.ctx.is_null() {
            return;
        }
        // SAFETY: `ctx` is still retained (released last, below).
        let _ = unsafe { self.lib.cuCtxSetCurrent(self.ctx) };
        if !self.stream.is_null() {
            // Nothing may still run when the modules go.
            let _ = self.synchronize();
        }
        if !self.event.is_null() {
            // SAFETY: created in `open`, destroyed once.
            let _ = unsafe { self.lib.cuEventDestroy_v2(self.event) };
        }
        if !self.stream.is_null() {
            // SAFETY: created in `open`, destroyed once, idle.
            let _ = unsafe { self.lib.cuStreamDestroy_v2(self.stream) };
        }
        for module in self.modules.drain(..) {
            // SAFETY: loaded by `load`, unloaded once; no kernel is running.
            let _ = unsafe { self.lib.cuModuleUnload(module) };
        }
        // SAFETY: retained once in `open`, released once.
        let _ = unsafe { self.lib.cuDevicePrimaryCtxRelease_v2(self.device) };
    }
}

// ---------------------------------------------------------------------------
// The guest side.

/// A kernel of the guest side: its function handle and where its argument
/// descriptors are in guest memory.
#[derive(Clone, Copy)]
struct GuestKernel {
    function: i64,
    args_ptr: u32,
    args_count: u32,
}

/// One instance of `guest_overhead.wat` and its exports.
struct Guest {
    store: Store<GuestState<CudaDriver>>,
    memory: Memory,
    load_function: TypedFunc<(i32, i32, i32, i32), i64>,
    launch_many: TypedFunc<(i64, i32, i32, i32, i32, i32), i32>,
    launch_wait: TypedFunc<(i64, i32, i32, i32, i32), i32>,
    sync: TypedFunc<(), i32>,
    prefetch: TypedFunc<(i32, i32, i32), i32>,
    host_calls: TypedFunc<i32, i32>,
}

fn wasm_error(what: &str) -> impl FnOnce(wasmtime::Error) -> String + '_ {
    move |e| format!("{what}: {e:#}")
}

fn guest_i32(value: usize, what: &str) -> BenchResult<i32> {
    i32::try_from(value).map_err(|_| format!("{what} {value} does not fit an i32"))
}

impl Guest {
    async fn new(runtime: &GuestRuntime<CudaDriver>) -> BenchResult<Guest> {
        let module = runtime
            .compile(GUEST_WAT)
            .map_err(wasm_error("compiling guest_overhead.wat"))?;
        let mut store = runtime.store().map_err(wasm_error("creating the store"))?;
        let instance = runtime
            .instantiate(&mut store, &module)
            .await
            .map_err(wasm_error("instantiating guest_overhead.wat"))?;
        let memory = instance
            .get_memory(&mut store, "memory")
            .ok_or("the guest exports no memory")?;
        macro_rules! export {
            ($name:literal) => {
                instance
                    .get_typed_func(&mut store, $name)
                    .map_err(wasm_error(concat!("guest export `", $name, "`")))?
            };
        }
        Ok(Guest {
            load_function: export!("load_function"),
            launch_many: export!("launch_many"),
            launch_wait: export!("launch_wait"),
            sync: export!("sync"),
            prefetch: export!("prefetch"),
            host_calls: export!("host_calls"),
            store,
            memory,
        })
    }

    /// An export's result: `Ok` for errno 0, else the guest's last error.
    fn check(&self, call: &str, result: wasmtime::Result<i32>) -> BenchResult<()> {
        match result {
            Ok(0) => Ok(()),
            Ok(errno) => Err(format!(
                "guest `{call}` returned errno {errno}: {}",
                self.store.data().cuda.last_error()
            )),
            Err(e) => Err(format!("guest `{call}` trapped: {e:#}")),
        }
    }

    fn write(&mut self, at: u32, bytes: &[u8]) -> BenchResult<()> {
        self.memory
            .write(&mut self.store, at as usize, bytes)
            .map_err(|e| format!("writing {} bytes of guest memory at {at}: {e}", bytes.len()))
    }

    /// Grows the guest's memory to at least `bytes`.
    fn ensure(&mut self, bytes: usize) -> BenchResult<()> {
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
    async fn load(
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
        let function = self
            .load_function
            .call_async(&mut self.store, params)
            .await
            .map_err(wasm_error("guest `load_function`"))?;
        if function < 0 {
            return Err(format!(
                "guest `load_function` of `{name}` returned errno {}: {}",
                -function,
                self.store.data().cuda.last_error()
            ));
        }
        Ok(GuestKernel {
            function,
            args_ptr,
            args_count: args.len() as u32,
        })
    }

    /// `k` launches of `kernel` in one export call; the call's time.
    async fn launch_many(
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
        let start = Instant::now();
        let result = self.launch_many.call_async(&mut self.store, params).await;
        let elapsed = start.elapsed();
        self.check("launch_many", result)?;
        Ok(elapsed)
    }

    /// One launch of `kernel` and its wait in one export call; the call's time.
    async fn launch_wait(&mut self, kernel: GuestKernel) -> BenchResult<Duration> {
        let params = (
            kernel.function,
            1,
            1,
            kernel.args_ptr as i32,
            kernel.args_count as i32,
        );
        let start = Instant::now();
        let result = self.launch_wait.call_async(&mut self.store, params).await;
        let elapsed = start.elapsed();
        self.check("launch_wait", result)?;
        Ok(elapsed)
    }

    async fn sync(&mut self) -> BenchResult<()> {
        let result = self.sync.call_async(&mut self.store, ()).await;
        self.check("sync", result)
    }

    async fn prefetch_to_device(&mut self, at: u32, len: usize) -> BenchResult<()> {
        let params = (at as i32, guest_i32(len, "prefetch length")?, 0);
        let result = self.prefetch.call_async(&mut self.store, params).await;
        self.check("prefetch", result)
    }

    /// `k` no-op import calls in one export call; the call's time.
    async fn host_calls(&mut self, k: usize) -> BenchResult<Duration> {
        let k = guest_i32(k, "call count")?;
        let start = Instant::now();
        let result = self.host_calls.call_async(&mut self.store, k).await;
        let elapsed = start.elapsed();
        self.check("host_calls", result)?;
        Ok(elapsed)
    }
}

// ---------------------------------------------------------------------------
// Measurements.

/// (1) Host time per launch call, in batches of [`LAUNCH_BATCH`] launches
/// not waited for; the stream is synchronized after each batch, untimed.
/// The methods take turns batch by batch, so drift hits them alike.
async fn launch_overhead(raw: &mut RawCuda, guest: &mut Guest) -> BenchResult<Vec<Row>> {
    let mut raw_empty = RawKernel::new(raw.load(EMPTY_PTX, "empty")?, &[]);
    let guest_empty = guest
        .load(EMPTY_PTX, "empty", GUEST_ARGS_EMPTY, &[])
        .await?;
    // The safe layer the guest path goes through: `CudaDriver::launch`
    // (geometry and parameter checks, context binding, cuLaunchKernel).
    let driver = guest.store.data().cuda.driver().clone();
    fn driver_err(what: &'static str) -> impl Fn(tensorwasm_cuda::CudaError) -> String {
        move |e| format!("{what}: {e}")
    }
    let safe_module = driver
        .load_ptx(EMPTY_PTX)
        .map_err(driver_err("loading the empty kernel"))?;
    let safe_function = driver
        .function(&safe_module, "empty")
        .map_err(driver_err("finding `empty`"))?;
    let safe_stream = driver
        .create_stream()
        .map_err(driver_err("creating a stream"))?;
    let one = tensorwasm_core::LaunchConfig {
        grid: tensorwasm_core::Dim3::linear(1),
        block: tensorwasm_core::Dim3::linear(1),
        shared_mem_bytes: 0,
    };
    let per_call = |d: Duration| d.as_secs_f64() * 1e6 / LAUNCH_BATCH as f64;
    let (mut launch, mut launch_host_func, mut guest_launch, mut host_call) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut safe_launch = Vec::new();
    for batch in 0..LAUNCH_WARMUP_BATCHES + LAUNCH_BATCHES {
        let keep = batch >= LAUNCH_WARMUP_BATCHES;

        let start = Instant::now();
        for _ in 0..LAUNCH_BATCH {
            // SAFETY: `empty` takes no parameters and touches nothing.
            unsafe { raw.launch(&mut raw_empty, 1, 1) }?;
        }
        let elapsed = start.elapsed();
        raw.synchronize()?;
        if keep {
            launch.push(per_call(elapsed));
        }

        let start = Instant::now();
        for _ in 0..LAUNCH_BATCH {
            // SAFETY: as above.
            unsafe { raw.launch(&mut raw_empty, 1, 1) }?;
            raw.host_func()?;
        }
        let elapsed = start.elapsed();
        raw.synchronize()?;
        if keep {
            launch_host_func.push(per_call(elapsed));
        }

        let start = Instant::now();
        for _ in 0..LAUNCH_BATCH {
            // SAFETY: `empty` takes no parameters and touches nothing.
            unsafe { driver.launch(&safe_stream, &safe_function, &one, &[]) }
                .map_err(driver_err("CudaDriver::launch"))?;
        }
        let elapsed = start.elapsed();
        driver
            .stream_synchronize(&safe_stream)
            .map_err(driver_err("stream_synchronize"))?;
        if keep {
            safe_launch.push(per_call(elapsed));
        }

        let elapsed = guest.launch_many(guest_empty, LAUNCH_BATCH, 1, 1).await?;
        guest.sync().await?;
        if keep {
            guest_launch.push(per_call(elapsed));
        }

        let elapsed = guest.host_calls(LAUNCH_BATCH).await?;
        if keep {
            host_call.push(per_call(elapsed));
        }
    }
    let raw_median = median(&launch);
    let guest_median = median(&guest_launch);
    let ratio = guest_median / raw_median;
    Ok(vec![
        Row::new("launch.raw", "launch: raw cuLaunchKernel", "us", launch),
        Row::new(
            "launch.raw_host_func",
            "launch: raw cuLaunchKernel + cuLaunchHostFunc",
            "us",
            launch_host_func,
        )
        .ratio_to("launch.raw", raw_median),
        Row::new(
            "launch.safe_layer",
            "launch: CudaDriver::launch (safe layer)",
            "us",
            safe_launch,
        )
        .ratio_to("launch.raw", raw_median),
        Row::new(
            "launch.guest",
            "launch: guest launch (Wasm call / launches)",
            "us",
            guest_launch,
        )
        .ratio_to("launch.raw", raw_median)
        .target("<= 1.2x raw", ratio <= 1.2),
        Row::new(
            "launch.guest_noop_import",
            "import call: guest device_count (no-op)",
            "us",
            host_call,
        ),
    ])
}

/// How a round trip waits for its launch.
#[derive(Clone, Copy)]
enum Wait {
    /// The guest's `launch` + `wait`, one export call, with the default
    /// wait policy (`WaitPolicy::Adaptive`).
    Guest,
    /// `cuEventRecord`, then `cuEventQuery` in a busy loop.
    Spin,
    /// `cuStreamSynchronize`.
    StreamSync,
    /// `cuEventRecord`, then `cuEventQuery` with a sleep between queries.
    SleepPoll,
    /// The guest's `launch` + `wait` with a spin budget every time
    /// (`WaitPolicy::Spin`) before the completion callback.
    GuestSpin,
    /// The guest's `launch` + `wait` that never spins
    /// (`WaitPolicy::Suspend`: the callback only).
    GuestSuspend,
}

/// The spin budget of [`Wait::GuestSpin`].
const GUEST_WAIT_SPIN: Duration = Duration::from_micros(50);

const WAITS: [Wait; 6] = [
    Wait::Guest,
    Wait::Spin,
    Wait::StreamSync,
    Wait::SleepPoll,
    Wait::GuestSpin,
    Wait::GuestSuspend,
];

impl Wait {
    fn id(self) -> &'static str {
        match self {
            Wait::Guest => "guest",
            Wait::Spin => "raw_spin",
            Wait::StreamSync => "raw_stream_sync",
            Wait::SleepPoll => "raw_sleep_poll",
            Wait::GuestSpin => "guest_spin50",
            Wait::GuestSuspend => "guest_suspend",
        }
    }

    fn label(self) -> &'static str {
        match self {
            Wait::Guest => "guest launch+wait",
            Wait::Spin => "raw launch + cuEventQuery spin",
            Wait::StreamSync => "raw launch + cuStreamSynchronize",
            Wait::SleepPoll => "raw launch + cuEventQuery/sleep(50us)",
            Wait::GuestSpin => "guest launch+wait, spin <= 50us first",
            Wait::GuestSuspend => "guest launch+wait, callback only",
        }
    }
}

/// The guests of the guest rows, each with its own store, stream and wait
/// policy, and its copy of the kernel a case launches: `[default, spin,
/// suspend]`.
type PolicyGuests<'g> = [(&'g mut Guest, GuestKernel); 3];

/// One round trip: wall time from before the launch to the wait's return,
/// and the process's CPU time over the same span.
async fn round_trip(
    wait: Wait,
    raw: &RawCuda,
    raw_kernel: &mut RawKernel,
    guests: &mut PolicyGuests<'_>,
) -> BenchResult<(Duration, Option<Duration>)> {
    let cpu_before = process_cpu_time();
    let elapsed = match wait {
        Wait::Guest | Wait::GuestSpin | Wait::GuestSuspend => {
            let (guest, kernel) = &mut guests[match wait {
                Wait::Guest => 0,
                Wait::GuestSpin => 1,
                _ => 2,
            }];
            guest.launch_wait(*kernel).await?
        }
        Wait::Spin | Wait::StreamSync | Wait::SleepPoll => {
            let start = Instant::now();
            // SAFETY: `empty` touches nothing; `spin` reads only its
            // parameter.
            unsafe { raw.launch(raw_kernel, 1, 1) }?;
            match wait {
                Wait::Spin => {
                    raw.record()?;
                    while !raw.query()? {}
                }
                Wait::SleepPoll => {
                    raw.record()?;
                    while !raw.query()? {
                        std::thread::sleep(SLEEP_POLL);
                    }
                }
                _ => raw.synchronize()?,
            }
            start.elapsed()
        }
    };
    let cpu = cpu_before
        .zip(process_cpu_time())
        .map(|(a, b)| b.saturating_sub(a));
    Ok((elapsed, cpu))
}

/// The samples of one wait method.
#[derive(Default)]
struct WaitSamples {
    latency_us: Vec<f64>,
    cpu_us: Vec<f64>,
}

/// (2) Launch-to-wait latency, empty kernel then the 10 ms spin kernel; the
/// methods take turns round trip by round trip. The default-policy rows
/// are `guest`'s; the fixed policies get guests of their own (so the
/// adaptive wait's state is its own stream's).
async fn wait_latency(
    raw: &mut RawCuda,
    guest: &mut Guest,
    runtime: &GuestRuntime<CudaDriver>,
) -> BenchResult<Vec<Row>> {
    let mut raw_empty = RawKernel::new(raw.load(EMPTY_PTX, "empty")?, &[]);
    let mut raw_spin = RawKernel::new(raw.load(SPIN_PTX, "spin")?, &[SPIN_NS]);
    let spin_arg = [ArgDescriptor::i64(SPIN_NS as i64)];
    let mut spinning = Guest::new(runtime).await?;
    spinning
        .store
        .data_mut()
        .cuda
        .set_wait_policy(WaitPolicy::Spin(GUEST_WAIT_SPIN));
    let mut suspending = Guest::new(runtime).await?;
    suspending
        .store
        .data_mut()
        .cuda
        .set_wait_policy(WaitPolicy::Suspend);
    let mut kernels = Vec::new();
    for g in [&mut *guest, &mut spinning, &mut suspending] {
        let empty = g.load(EMPTY_PTX, "empty", GUEST_ARGS_EMPTY, &[]).await?;
        let spin = g.load(SPIN_PTX, "spin", GUEST_ARGS_SPIN, &spin_arg).await?;
        kernels.push((empty, spin));
    }

    // What entering and leaving the guest costs by itself: `call_async` of
    // an export that returns at once (part of every guest row below).
    let mut call_us = Vec::new();
    for i in 0..LATENCY_WARMUP + LATENCY_ITERS {
        let elapsed = guest.host_calls(0).await?;
        if i >= LATENCY_WARMUP {
            call_us.push(elapsed.as_secs_f64() * 1e6);
        }
    }
    let mut rows = vec![
        Row::new(
            "latency.call_async_empty".to_string(),
            "call_async of an export that returns at once".to_string(),
            "us",
            call_us,
        )
        .with_p99(),
    ];
    let cases: [(&str, &str, usize, usize, &mut RawKernel, bool); 2] = [
        (
            "empty",
            "empty kernel",
            LATENCY_WARMUP,
            LATENCY_ITERS,
            &mut raw_empty,
            false,
        ),
        (
            "spin_10ms",
            "10 ms kernel",
            SPIN_WARMUP,
            SPIN_ITERS,
            &mut raw_spin,
            true,
        ),
    ];
    for (case, label, warmup, iters, raw_kernel, long) in cases {
        let pick = |k: &(GuestKernel, GuestKernel)| if long { k.1 } else { k.0 };
        let mut guests: PolicyGuests<'_> = [
            (&mut *guest, pick(&kernels[0])),
            (&mut spinning, pick(&kernels[1])),
            (&mut suspending, pick(&kernels[2])),
        ];
        let mut samples: [WaitSamples; 6] = Default::default();
        for i in 0..warmup + iters {
            for (wait, s) in WAITS.iter().zip(samples.iter_mut()) {
                let (elapsed, cpu) = round_trip(*wait, raw, raw_kernel, &mut guests).await?;
                if i >= warmup {
                    s.latency_us.push(elapsed.as_secs_f64() * 1e6);
                    if let Some(cpu) = cpu {
                        s.cpu_us.push(cpu.as_secs_f64() * 1e6);
                    }
                }
            }
        }
        let spin_id = format!("latency.{case}.{}", Wait::Spin.id());
        // `samples` is in `WAITS` order: index 1 is the spin-poll floor.
        let spin_median = median(&samples[1].latency_us);
        for (wait, s) in WAITS.iter().zip(samples) {
            let latency = median(&s.latency_us);
            let cpu_percent = (s.cpu_us.len() == s.latency_us.len())
                .then(|| 100.0 * s.cpu_us.iter().sum::<f64>() / s.latency_us.iter().sum::<f64>());
            let mut row = Row::new(
                format!("latency.{case}.{}", wait.id()),
                format!("wait, {label}: {}", wait.label()),
                "us",
                s.latency_us,
            )
            .with_p99()
            .with_cpu(cpu_percent, s.cpu_us);
            if !matches!(wait, Wait::Spin) {
                row = row.ratio_to(&spin_id, spin_median);
            }
            if matches!(wait, Wait::Guest) && case == "empty" {
                row = row.target("<= 1.5x spin", latency / spin_median <= 1.5);
            }
            if matches!(wait, Wait::GuestSpin) {
                row = row.target("<= 1.2x spin", latency / spin_median <= 1.2);
            }
            if matches!(wait, Wait::Guest | Wait::GuestSpin) && case == "spin_10ms" {
                let met = cpu_percent.is_some_and(|c| c < 10.0);
                row = row.target("CPU < 10% of a core", met);
            }
            rows.push(row);
        }
    }
    Ok(rows)
}

/// Guests waiting at once in [`many_waiting`].
const MANY_GUESTS: usize = 64;
/// Timed rounds of [`many_waiting`] (after one untimed).
const MANY_ROUNDS: usize = 5;

/// (2b) `MANY_GUESTS` guests, each with its own stream and the default wait
/// policy, each launch the 10 ms kernel and wait, all at once on this one
/// thread; per round, the process's CPU time over the round's wall time
/// (in cores).
async fn many_waiting(runtime: &GuestRuntime<CudaDriver>) -> BenchResult<Row> {
    let spin_arg = [ArgDescriptor::i64(SPIN_NS as i64)];
    let mut guests = Vec::with_capacity(MANY_GUESTS);
    for _ in 0..MANY_GUESTS {
        let mut g = Guest::new(runtime).await?;
        let kernel = g.load(SPIN_PTX, "spin", GUEST_ARGS_SPIN, &spin_arg).await?;
        guests.push((g, kernel));
    }
    let mut cores = Vec::new();
    for round in 0..=MANY_ROUNDS {
        let cpu_before = process_cpu_time();
        let start = Instant::now();
        let waits = guests.iter_mut().map(|(g, k)| g.launch_wait(*k));
        for result in futures::future::join_all(waits).await {
            result?;
        }
        let wall = start.elapsed();
        let cpu = cpu_before
            .zip(process_cpu_time())
            .map(|(a, b)| b.saturating_sub(a));
        if round > 0
            && let Some(cpu) = cpu
        {
            cores.push(cpu.as_secs_f64() / wall.as_secs_f64());
        }
    }
    let met = !cores.is_empty() && median(&cores) < 1.0;
    Ok(Row::new(
        "many_waiting.cores".to_string(),
        format!("{MANY_GUESTS} guests waiting at once, 10 ms kernel each: CPU"),
        "cores",
        cores,
    )
    .target("< 1 core", met))
}

/// Random floats in [1, 2) (never zero), little-endian bytes.
fn random_floats(rng: &mut SplitMix64, n: usize) -> Vec<u8> {
    let mut out = vec![0u8; n * 4];
    for chunk in out.chunks_exact_mut(4) {
        let bits = 0x3f80_0000 | (rng.next() >> 41) as u32;
        chunk.copy_from_slice(&bits.to_le_bytes());
    }
    out
}

fn f32_at(bytes: &[u8], i: usize) -> f32 {
    let at = 4 * i;
    f32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
}

/// Checks `c[i] == a[i] + b[i]` for every element.
fn verify(side: &str, a: &[u8], b: &[u8], c: &[u8]) -> BenchResult<()> {
    for i in 0..c.len() / 4 {
        let (x, y, z) = (f32_at(a, i), f32_at(b, i), f32_at(c, i));
        if z != x + y {
            return Err(format!(
                "{side} vector add is wrong at element {i}: {x} + {y} gave {z}"
            ));
        }
    }
    Ok(())
}

/// (3) Vector-add bandwidth: guest memory (managed, prefetched) against
/// `cuMemAlloc` buffers; repetitions alternate between the two.
async fn bandwidth(raw: &mut RawCuda, guest: &mut Guest, seed: u64) -> BenchResult<Vec<Row>> {
    let bytes = VADD_N * 4;
    let grid = VADD_N.div_ceil(VADD_BLOCK as usize) as u32;
    let gbps = |d: Duration| 12.0 * VADD_N as f64 * VADD_LAUNCHES as f64 / d.as_secs_f64() / 1e9;
    let mut rng = SplitMix64(seed);
    let a = random_floats(&mut rng, VADD_N);
    let b = random_floats(&mut rng, VADD_N);

    let vadd = raw.load(VADD_PTX, "vadd")?;
    let (da, db, dc) = (raw.alloc(bytes)?, raw.alloc(bytes)?, raw.alloc(bytes)?);
    raw.copy_to(&da, &a)?;
    raw.copy_to(&db, &b)?;
    let mut raw_vadd = RawKernel::new(vadd, &[da.ptr, db.ptr, dc.ptr, VADD_N as u64]);

    let (ga, gb, gc) = (
        GUEST_DATA,
        GUEST_DATA + bytes as u32,
        GUEST_DATA + 2 * bytes as u32,
    );
    guest.ensure(GUEST_DATA as usize + 3 * bytes)?;
    guest.write(ga, &a)?;
    guest.write(gb, &b)?;
    let len = bytes as u64;
    let args = [
        ArgDescriptor::guest_aligned(ga.into(), len, 4),
        ArgDescriptor::guest_aligned(gb.into(), len, 4),
        ArgDescriptor::guest_aligned(gc.into(), len, 4),
        ArgDescriptor::i32(VADD_N as i32),
    ];
    let guest_vadd = guest.load(VADD_PTX, "vadd", GUEST_ARGS_VADD, &args).await?;
    guest.prefetch_to_device(ga, 3 * bytes).await?;

    // Warm-up: one launch each (the guest's also waits for the prefetch).
    guest.launch_many(guest_vadd, 1, grid, VADD_BLOCK).await?;
    guest.sync().await?;
    // SAFETY: the three buffers hold `VADD_N` floats each and outlive the
    // kernel (every launch below is followed by a synchronize).
    unsafe { raw.launch(&mut raw_vadd, grid, VADD_BLOCK) }?;
    raw.synchronize()?;

    let (mut guest_gbps, mut raw_gbps) = (Vec::new(), Vec::new());
    for _ in 0..VADD_REPS {
        let start = Instant::now();
        guest
            .launch_many(guest_vadd, VADD_LAUNCHES, grid, VADD_BLOCK)
            .await?;
        guest.sync().await?;
        guest_gbps.push(gbps(start.elapsed()));

        let start = Instant::now();
        for _ in 0..VADD_LAUNCHES {
            // SAFETY: as for the warm-up launch.
            unsafe { raw.launch(&mut raw_vadd, grid, VADD_BLOCK) }?;
        }
        raw.synchronize()?;
        raw_gbps.push(gbps(start.elapsed()));
    }

    // Check both results (untimed; reading guest memory migrates it back).
    let mut c = vec![0u8; bytes];
    raw.copy_from(&mut c, &dc)?;
    verify("raw", &a, &b, &c)?;
    drop((da, db, dc));
    let guest_c = &guest.memory.data(&guest.store)[gc as usize..gc as usize + bytes];
    verify("guest", &a, &b, guest_c)?;

    let raw_median = median(&raw_gbps);
    let ratio = median(&guest_gbps) / raw_median;
    Ok(vec![
        Row::new(
            "bandwidth.raw",
            "vector add: raw, 3 cuMemAlloc buffers",
            "GB/s",
            raw_gbps,
        ),
        Row::new(
            "bandwidth.guest",
            "vector add: guest memory (managed, prefetched)",
            "GB/s",
            guest_gbps,
        )
        .ratio_to("bandwidth.raw", raw_median)
        .target(">= 0.9x raw", ratio >= 0.9),
    ])
}

// ---------------------------------------------------------------------------
// Statistics, rows, the table and the JSON record.

fn sorted(samples: &[f64]) -> Vec<f64> {
    let mut s = samples.to_vec();
    s.sort_by(f64::total_cmp);
    s
}

fn median(samples: &[f64]) -> f64 {
    let s = sorted(samples);
    match s.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => s[n / 2],
        n => (s[n / 2 - 1] + s[n / 2]) / 2.0,
    }
}

/// The nearest-rank percentile `q` (0..=100).
fn percentile(samples: &[f64], q: f64) -> f64 {
    let s = sorted(samples);
    if s.is_empty() {
        return f64::NAN;
    }
    let rank = (q / 100.0 * s.len() as f64).ceil() as usize;
    s[rank.clamp(1, s.len()) - 1]
}

/// A ratio of one row's median to another's.
struct Ratio {
    to: String,
    value: f64,
}

/// One measurement: its samples and what is reported about them.
struct Row {
    id: String,
    name: String,
    unit: &'static str,
    samples: Vec<f64>,
    p99: bool,
    cpu_percent: Option<f64>,
    cpu_us: Vec<f64>,
    ratio: Option<Ratio>,
    targets: Vec<Target>,
}

impl Row {
    fn new(
        id: impl Into<String>,
        name: impl Into<String>,
        unit: &'static str,
        samples: Vec<f64>,
    ) -> Row {
        Row {
            id: id.into(),
            name: name.into(),
            unit,
            samples,
            p99: false,
            cpu_percent: None,
            cpu_us: Vec::new(),
            ratio: None,
            targets: Vec::new(),
        }
    }

    fn with_p99(mut self) -> Row {
        self.p99 = true;
        self
    }

    fn with_cpu(mut self, percent: Option<f64>, cpu_us: Vec<f64>) -> Row {
        self.cpu_percent = percent;
        self.cpu_us = cpu_us;
        self
    }

    fn ratio_to(mut self, to: &str, other_median: f64) -> Row {
        self.ratio = Some(Ratio {
            to: to.to_string(),
            value: median(&self.samples) / other_median,
        });
        self
    }

    fn target(mut self, text: &'static str, met: bool) -> Row {
        self.targets.push(Target { text, met });
        self
    }
}

fn table(rows: &[Row]) -> String {
    let name_width = rows.iter().map(|r| r.name.len()).max().unwrap_or(0);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<name_width$}  {:>14}  {:>12}  {:>6}  {:>6}  target (met?)",
        "measurement", "median", "p99", "CPU %", "ratio"
    );
    for r in rows {
        let median = format!("{:.2} {}", median(&r.samples), r.unit);
        let p99 = if r.p99 {
            format!("{:.2} {}", percentile(&r.samples, 99.0), r.unit)
        } else {
            "-".into()
        };
        let cpu = r.cpu_percent.map_or("-".into(), |c| format!("{c:.1}"));
        let ratio = r
            .ratio
            .as_ref()
            .map_or("-".into(), |q| format!("{:.2}x", q.value));
        let targets: Vec<String> = r
            .targets
            .iter()
            .map(|t| format!("{} ({})", t.text, if t.met { "met" } else { "MISSED" }))
            .collect();
        let line = format!(
            "{:<name_width$}  {median:>14}  {p99:>12}  {cpu:>6}  {ratio:>6}  {}",
            r.name,
            targets.join(", ")
        );
        let _ = writeln!(out, "{}", line.trim_end());
    }
    out.push_str("ratio: this row's median over the raw row it is compared with (see the JSON)\n");
    out
}

/// The JSON record: every sample, and what produced it.
#[derive(Serialize)]
struct Record<'a> {
    benchmark: &'static str,
    date_utc: String,
    command: String,
    seed: u64,
    device: DeviceRecord,
    config: Config,
    notes: [&'static str; 4],
    rows: Vec<RowRecord<'a>>,
}

/// The settings the record was measured with.
#[derive(Serialize)]
struct Config {
    launch_batch: usize,
    launch_batches: usize,
    launch_warmup_batches: usize,
    latency_iters: usize,
    latency_warmup: usize,
    spin_ns: u64,
    spin_iters: usize,
    spin_warmup: usize,
    sleep_poll_us: u128,
    vadd_n: usize,
    vadd_block: u32,
    vadd_launches: usize,
    vadd_reps: usize,
    guest_memory_limit_bytes: usize,
}

/// One row in the record; numbers to 4 decimals, a non-finite one `null`.
#[derive(Serialize)]
struct RowRecord<'a> {
    id: &'a str,
    name: &'a str,
    unit: &'static str,
    median: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    p99: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cpu_percent: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ratio: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ratio_to: Option<&'a str>,
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    targets: &'a [Target],
    samples: Vec<f64>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    cpu_us: Vec<f64>,
}

impl<'a> Record<'a> {
    fn new(
        rows: &'a [Row],
        info: &tensorwasm_core::DeviceInfo,
        date_utc: String,
        command: String,
        seed: u64,
    ) -> Record<'a> {
        Record {
            benchmark: "guest_overhead",
            date_utc,
            command,
            seed,
            device: DeviceRecord::new(info),
            config: Config {
                launch_batch: LAUNCH_BATCH,
                launch_batches: LAUNCH_BATCHES,
                launch_warmup_batches: LAUNCH_WARMUP_BATCHES,
                latency_iters: LATENCY_ITERS,
                latency_warmup: LATENCY_WARMUP,
                spin_ns: SPIN_NS,
                spin_iters: SPIN_ITERS,
                spin_warmup: SPIN_WARMUP,
                sleep_poll_us: SLEEP_POLL.as_micros(),
                vadd_n: VADD_N,
                vadd_block: VADD_BLOCK,
                vadd_launches: VADD_LAUNCHES,
                vadd_reps: VADD_REPS,
                guest_memory_limit_bytes: GUEST_MEMORY_LIMIT,
            },
            notes: [
                "launch rows: host time of one batch of launch calls divided by the batch size; \
                 the raw side calls cuLaunchKernel directly, the guest row times one Wasm export \
                 call that makes every launch of the batch",
                "latency rows: wall time from before the launch to the wait's return; cpu_us is \
                 the process's getrusage(RUSAGE_SELF) user+sys time over the same span, every \
                 thread included",
                "bandwidth rows: GB/s = 12 * vadd_n * vadd_launches / seconds, one sample per \
                 repetition, the closing synchronize included",
                "raw modules are loaded with cuModuleLoadDataEx and no options: sys.rs has no \
                 cuModuleLoadData",
            ],
            rows: rows.iter().map(RowRecord::new).collect(),
        }
    }
}

impl<'a> RowRecord<'a> {
    fn new(r: &'a Row) -> RowRecord<'a> {
        let four = |x: f64| common::round(x, 4);
        RowRecord {
            id: &r.id,
            name: &r.name,
            unit: r.unit,
            median: four(median(&r.samples)),
            p99: r.p99.then(|| four(percentile(&r.samples, 99.0))),
            cpu_percent: r.cpu_percent.map(four),
            ratio: r.ratio.as_ref().map(|q| four(q.value)),
            ratio_to: r.ratio.as_ref().map(|q| q.to.as_str()),
            targets: &r.targets,
            samples: rounded(&r.samples, 4),
            cpu_us: rounded(&r.cpu_us, 4),
        }
    }
}

// ---------------------------------------------------------------------------
// The process: CPU time, seed, command line, date.

/// The process's CPU time, user + system, all threads (the driver's
/// callback thread included): `getrusage(RUSAGE_SELF)`.
#[cfg(all(target_os = "linux", target_pointer_width = "64"))]
fn process_cpu_time() -> Option<Duration> {
    use std::ffi::c_int;

    /// `struct timeval` on 64-bit Linux.
    #[repr(C)]
    #[derive(Default)]
    struct Timeval {
        tv_sec: i64,
        tv_usec: i64,
    }

    /// `struct rusage` on 64-bit Linux: two timevals, then 14 `long`s.
    #[repr(C)]
    #[derive(Default)]
    struct Rusage {
        ru_utime: Timeval,
        ru_stime: Timeval,
        counters: [i64; 14],
    }

    // The workspace gives this crate no `libc`; the C library std links
    // against provides the symbol.
    unsafe extern "C" {
        fn getrusage(who: c_int, usage: *mut Rusage) -> c_int;
    }
    const RUSAGE_SELF: c_int = 0;

    let mut usage = Rusage::default();
    // SAFETY: `usage` is a writable `struct rusage` with the 64-bit Linux
    // layout declared above; getrusage only writes it.
    if unsafe { getrusage(RUSAGE_SELF, &mut usage) } != 0 {
        return None;
    }
    let time = |tv: &Timeval| {
        Duration::from_secs(tv.tv_sec.max(0) as u64)
            + Duration::from_micros(tv.tv_usec.max(0) as u64)
    };
    Some(time(&usage.ru_utime) + time(&usage.ru_stime))
}

/// Not measured off 64-bit Linux: the CPU column stays empty.
#[cfg(not(all(target_os = "linux", target_pointer_width = "64")))]
fn process_cpu_time() -> Option<Duration> {
    None
}

/// SplitMix64: small, fast, and the same stream for the same seed.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

/// `GUEST_OVERHEAD_SEED`, or one made from the clock and the process id.
fn seed() -> BenchResult<u64> {
    match std::env::var("GUEST_OVERHEAD_SEED") {
        Ok(text) => {
            let t = text.trim();
            let parsed = match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
                Some(hex) => u64::from_str_radix(hex, 16),
                None => t.parse(),
            };
            parsed.map_err(|e| format!("GUEST_OVERHEAD_SEED={text:?} is not a u64: {e}"))
        }
        Err(_) => {
            let nanos = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64);
            Ok(SplitMix64(nanos ^ u64::from(std::process::id()) << 32).next())
        }
    }
}
