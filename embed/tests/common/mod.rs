//! What the `wasi_cuda` integration tests share: a seeded generator, a test
//! guest that imports every `wasi_cuda` function and re-exports each as a
//! thin wrapper (so a test drives one call with exact arguments), and a
//! [`Guest`] that calls those wrappers with `call_async` and reads and
//! writes the guest's memory from the host side.

use std::fmt::Write as _;

use tensorwasm_core::abi::{ArgDescriptor, encode_args};
use tensorwasm_cpu::CpuDriver;
use tensorwasm_embed::kernel::GuestModule;
use tensorwasm_embed::{
    runtime::{GuestRuntime, GuestState},
    twins,
    wasi_cuda::WasiCudaCtx,
};
use wasmtime::{Instance, Memory, Store, Val};

/// Capacity of the CPU driver of a [`Fixture`]: what `total_memory` says.
pub const DEVICE_BYTES: u64 = 256 << 20;
/// The most bytes one guest memory of a [`Fixture`] may reserve (64 pages).
pub const MEMORY_LIMIT: usize = 4 << 20;
/// Wasm pages are 64 KiB.
pub const PAGE: usize = 64 << 10;
/// Pages of the test guest's memory when instantiated.
pub const INITIAL_PAGES: usize = 4;

/// Out-pointers (8-aligned, 8 bytes each) in the test guest's memory.
pub const OUT: u32 = 0x40;
/// A second out-pointer.
pub const OUT2: u32 = 0x48;
/// Where the tests put argument descriptors (8-aligned).
pub const ARGS: u32 = 0x400;
/// Where the tests put kernel names.
pub const NAME: u32 = 0x1000;
/// Where the tests put PTX text.
pub const TEXT: u32 = 0x2000;
/// Where the tests put data (a, b, c vectors, copy sources).
pub const DATA: u32 = 0x1_0000;

/// A value the tests put in out-pointers before a call that must fail, to
/// check that the call left them untouched.
pub const SENTINEL: u64 = 0x5a5a_0bad_f00d_5a5a;

/// xorshift64* with a printed seed; `TENSORWASM_SEED` replays a run.
pub struct Rng(u64);

impl Rng {
    /// Seeds from `TENSORWASM_SEED` or the clock, and prints the seed.
    pub fn new(what: &str) -> Rng {
        let seed = std::env::var("TENSORWASM_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_nanos() as u64)
                    .unwrap_or(0x9e37_79b9_7f4a_7c15)
            });
        println!("{what}: TENSORWASM_SEED={seed}");
        Rng(seed ^ 0x2545_f491_4f6c_dd1d | 1)
    }

    /// A stream from `seed` (one drawn from a printed generator, so
    /// `TENSORWASM_SEED` replays it), through splitmix64 so that streams
    /// of nearby seeds start far apart.
    pub fn from_seed(seed: u64) -> Rng {
        let mut z = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        Rng((z ^ (z >> 31)) | 1)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Uniform in `0..n` (`0` when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }

    /// In `1..=max`, uniform in the exponent: most sizes small, some the
    /// largest allowed, none of them round.
    pub fn size(&mut self, max: u64) -> u64 {
        let bits = 64 - max.max(1).leading_zeros();
        let e = self.below(u64::from(bits)) as u32;
        let lo = 1u64 << e;
        let hi = ((lo << 1) - 1).min(max);
        lo + self.below(hi - lo + 1)
    }

    /// A float of magnitude in [1, 2), either sign: never zero, never a
    /// NaN.
    pub fn float(&mut self) -> f32 {
        let x = self.next_u64();
        let sign = (x >> 63) as u32;
        f32::from_bits(sign << 31 | 0x3f80_0000 | (x as u32 & 0x7f_ffff))
    }

    /// `n` random bytes, none of them zero (so a copy that moved nothing,
    /// or zeroed its target, never passes).
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n)
            .map(|_| match self.next_u64() as u8 {
                0 => 0xa5,
                b => b,
            })
            .collect()
    }

    /// `n` random floats of magnitude in [1, 2), either sign: never zero,
    /// never a NaN, and their sums are exact enough to compare bitwise with
    /// the host's own `+`.
    pub fn floats(&mut self, n: usize) -> Vec<f32> {
        (0..n).map(|_| self.float()).collect()
    }
}

/// Every `wasi_cuda` import with its parameter types (all return `i32`):
/// the functions of `docs/ABI.md`, in its order.
pub const IMPORTS: &[(&str, &[&str])] = &[
    ("device_count", &["i32"]),
    ("device_info", &["i32", "i32", "i32"]),
    ("buffer_alloc", &["i64", "i32"]),
    ("buffer_free", &["i64"]),
    ("buffer_size", &["i64", "i32"]),
    ("copy_to_buffer", &["i64", "i64", "i32", "i32"]),
    ("copy_from_buffer", &["i32", "i64", "i64", "i32"]),
    ("copy_buffer", &["i64", "i64", "i64", "i64", "i64"]),
    ("memset_buffer", &["i64", "i64", "i32", "i64"]),
    ("module_load_ptx", &["i32", "i32", "i32"]),
    ("module_load_cubin", &["i32", "i32", "i32"]),
    ("module_unload", &["i64"]),
    ("function_release", &["i64"]),
    ("function_get", &["i64", "i32", "i32", "i32"]),
    (
        "launch",
        &[
            "i64", "i32", "i32", "i32", "i32", "i32", "i32", "i32", "i32", "i32", "i32",
        ],
    ),
    ("tensor_op", &["i32", "i32", "i32"]),
    ("wait", &["i64"]),
    ("sync", &[]),
    ("prefetch", &["i32", "i32", "i32"]),
    ("advise", &["i32", "i32", "i32"]),
    ("last_error", &["i32", "i32", "i32"]),
];

/// The test guest: imports every `wasi_cuda` function and exports a wrapper
/// of the same name that passes its parameters through; exports its memory
/// (`INITIAL_PAGES` pages, no maximum), `grow`, `size` and `load8` so the
/// host can drive `memory.grow` and see what compiled code sees.
pub fn test_guest_wat() -> String {
    let mut wat = String::from("(module\n");
    for (name, params) in IMPORTS {
        let params = if params.is_empty() {
            String::new()
        } else {
            format!(" (param {})", params.join(" "))
        };
        let _ = writeln!(
            wat,
            "  (import \"wasi_cuda\" \"{name}\" (func ${name}{params} (result i32)))"
        );
    }
    let _ = writeln!(wat, "  (memory (export \"memory\") {INITIAL_PAGES})");
    for (name, params) in IMPORTS {
        let gets: String = (0..params.len())
            .map(|i| format!("local.get {i} "))
            .collect();
        let params = if params.is_empty() {
            String::new()
        } else {
            format!(" (param {})", params.join(" "))
        };
        let _ = writeln!(
            wat,
            "  (func (export \"{name}\"){params} (result i32) {gets}call ${name})"
        );
    }
    wat.push_str(
        "  (func (export \"grow\") (param i32) (result i32) local.get 0 memory.grow)\n\
         \x20 (func (export \"size\") (result i32) memory.size)\n\
         \x20 (func (export \"load8\") (param i32) (result i32) local.get 0 i32.load8_u)\n\
         )\n",
    );
    wat
}

/// A CPU driver with the twins registered, a runtime on it with managed
/// guest memory, and the test guest compiled for it.
pub struct Fixture {
    /// The driver (a clone of the runtime's).
    pub driver: CpuDriver,
    /// The runtime.
    pub runtime: GuestRuntime<CpuDriver>,
    /// The test guest.
    pub module: GuestModule,
}

impl Fixture {
    /// A fixture whose guests have managed (device-addressable) memory.
    pub fn new() -> Fixture {
        let driver = cpu_driver();
        let runtime = GuestRuntime::new(driver.clone(), MEMORY_LIMIT).expect("runtime");
        Fixture::with_runtime(driver, runtime)
    }

    /// A fixture whose guests have wasmtime's own host memory.
    pub fn with_host_memory() -> Fixture {
        let driver = cpu_driver();
        let runtime = GuestRuntime::with_host_memory(driver.clone()).expect("runtime");
        Fixture::with_runtime(driver, runtime)
    }

    fn with_runtime(driver: CpuDriver, runtime: GuestRuntime<CpuDriver>) -> Fixture {
        let module = runtime
            .compile(test_guest_wat())
            .expect("compile the test guest");
        Fixture {
            driver,
            runtime,
            module,
        }
    }

    /// A new store with the test guest instantiated in it.
    pub fn guest(&self) -> Guest {
        let mut store = self.runtime.store().expect("store");
        let instance =
            futures::executor::block_on(self.runtime.instantiate(&mut store, &self.module))
                .expect("instantiate the test guest");
        let memory = instance
            .get_memory(&mut store, "memory")
            .expect("the guest exports memory");
        Guest {
            store,
            instance,
            memory,
        }
    }

    /// Free bytes of the driver, by its own (exact) accounting.
    pub fn free(&self) -> u64 {
        use tensorwasm_core::GpuDriver as _;
        self.driver.mem_info().expect("mem_info").free
    }
}

/// A CPU driver of [`DEVICE_BYTES`] with TensorWasm's twins registered.
pub fn cpu_driver() -> CpuDriver {
    let driver = CpuDriver::with_capacity(DEVICE_BYTES).expect("CPU driver");
    twins::register(&driver);
    driver
}

/// One instantiated test guest in its own store.
pub struct Guest {
    /// The guest's store.
    pub store: Store<GuestState<CpuDriver>>,
    /// The instance.
    pub instance: Instance,
    /// Its exported memory.
    pub memory: Memory,
}

/// An `i32` parameter from its bits.
fn i32v(v: u32) -> Val {
    Val::I32(v as i32)
}

/// An `i64` parameter from its bits.
fn i64v(v: u64) -> Val {
    Val::I64(v as i64)
}

impl Guest {
    /// Calls the export `name` with `call_async` and returns its `i32`.
    pub fn call(&mut self, name: &str, args: &[Val]) -> i32 {
        let func = self
            .instance
            .get_func(&mut self.store, name)
            .unwrap_or_else(|| panic!("the guest exports no `{name}`"));
        let mut results = [Val::I32(0)];
        futures::executor::block_on(func.call_async(&mut self.store, args, &mut results))
            .unwrap_or_else(|e| panic!("calling `{name}` trapped: {e:#}"));
        results[0].unwrap_i32()
    }

    /// The guest's `wasi_cuda` context.
    pub fn cuda(&self) -> &WasiCudaCtx<CpuDriver> {
        &self.store.data().cuda
    }

    /// Live buffer, module, function and launch handles.
    pub fn live(&self) -> [usize; 4] {
        self.cuda().live_handles()
    }

    /// The guest's last error text.
    pub fn last_error(&self) -> String {
        self.cuda().last_error().to_string()
    }

    /// Asserts that the last error names `call` and `errno`, then says
    /// something more (`"{call}: {errno}: ..."`), and returns it.
    pub fn assert_last_error(&self, call: &str, errno: &str) -> String {
        let text = self.last_error();
        let prefix = format!("{call}: {errno}: ");
        assert!(
            text.starts_with(&prefix) && text.len() > prefix.len(),
            "last_error {text:?} does not start with {prefix:?}"
        );
        text
    }

    /// The memory's current size in bytes.
    pub fn mem_size(&self) -> usize {
        self.memory.data_size(&self.store)
    }

    /// Writes `bytes` at `at` from the host side.
    pub fn write(&mut self, at: u32, bytes: &[u8]) {
        self.memory
            .write(&mut self.store, at as usize, bytes)
            .expect("host write in bounds");
    }

    /// Reads `len` bytes at `at` from the host side.
    pub fn read(&self, at: u32, len: usize) -> Vec<u8> {
        let mut out = vec![0; len];
        self.memory
            .read(&self.store, at as usize, &mut out)
            .expect("host read in bounds");
        out
    }

    /// The `u64` at `at`.
    pub fn read_u64(&self, at: u32) -> u64 {
        u64::from_le_bytes(self.read(at, 8).try_into().expect("8 bytes"))
    }

    /// The `u32` at `at`.
    pub fn read_u32(&self, at: u32) -> u32 {
        u32::from_le_bytes(self.read(at, 4).try_into().expect("4 bytes"))
    }

    /// Writes a `u64` at `at`.
    pub fn write_u64(&mut self, at: u32, v: u64) {
        self.write(at, &v.to_le_bytes());
    }

    /// Writes floats at `at`.
    pub fn write_floats(&mut self, at: u32, values: &[f32]) {
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        self.write(at, &bytes);
    }

    /// Reads `n` floats at `at`.
    pub fn read_floats(&self, at: u32, n: usize) -> Vec<f32> {
        self.read(at, n * 4)
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().expect("4 bytes")))
            .collect()
    }

    /// Writes argument descriptors at `at`.
    pub fn write_args(&mut self, at: u32, args: &[ArgDescriptor]) {
        self.write(at, &encode_args(args));
    }

    /// `memory.grow` from inside the guest: the old size in pages, or -1.
    pub fn grow(&mut self, pages: u32) -> i32 {
        self.call("grow", &[i32v(pages)])
    }

    /// `memory.size` from inside the guest, in pages.
    pub fn size(&mut self) -> i32 {
        self.call("size", &[])
    }

    /// The byte at `at` as the guest's compiled code loads it.
    pub fn load8(&mut self, at: u32) -> i32 {
        self.call("load8", &[i32v(at)])
    }

    /// `device_count(out)`.
    pub fn device_count(&mut self, out: u32) -> i32 {
        self.call("device_count", &[i32v(out)])
    }

    /// `device_info(device, out, out_len)`.
    pub fn device_info(&mut self, device: i32, out: u32, out_len: i32) -> i32 {
        self.call(
            "device_info",
            &[Val::I32(device), i32v(out), Val::I32(out_len)],
        )
    }

    /// `buffer_alloc(size, out)`.
    pub fn buffer_alloc(&mut self, size: u64, out: u32) -> i32 {
        self.call("buffer_alloc", &[i64v(size), i32v(out)])
    }

    /// `buffer_free(buffer)`.
    pub fn buffer_free(&mut self, buffer: u64) -> i32 {
        self.call("buffer_free", &[i64v(buffer)])
    }

    /// `buffer_size(buffer, out)`.
    pub fn buffer_size(&mut self, buffer: u64, out: u32) -> i32 {
        self.call("buffer_size", &[i64v(buffer), i32v(out)])
    }

    /// `copy_to_buffer(dst, dst_offset, src, len)`.
    pub fn copy_to_buffer(&mut self, dst: u64, dst_offset: u64, src: u32, len: u32) -> i32 {
        self.call(
            "copy_to_buffer",
            &[i64v(dst), i64v(dst_offset), i32v(src), i32v(len)],
        )
    }

    /// `copy_from_buffer(dst, src, src_offset, len)`.
    pub fn copy_from_buffer(&mut self, dst: u32, src: u64, src_offset: u64, len: u32) -> i32 {
        self.call(
            "copy_from_buffer",
            &[i32v(dst), i64v(src), i64v(src_offset), i32v(len)],
        )
    }

    /// `copy_buffer(dst, dst_offset, src, src_offset, len)`.
    pub fn copy_buffer(
        &mut self,
        dst: u64,
        dst_offset: u64,
        src: u64,
        src_offset: u64,
        len: u64,
    ) -> i32 {
        self.call(
            "copy_buffer",
            &[
                i64v(dst),
                i64v(dst_offset),
                i64v(src),
                i64v(src_offset),
                i64v(len),
            ],
        )
    }

    /// `memset_buffer(dst, dst_offset, value, len)`.
    pub fn memset_buffer(&mut self, dst: u64, dst_offset: u64, value: u32, len: u64) -> i32 {
        self.call(
            "memset_buffer",
            &[i64v(dst), i64v(dst_offset), i32v(value), i64v(len)],
        )
    }

    /// `module_load_ptx(ptr, len, out)`.
    pub fn module_load_ptx(&mut self, ptr: u32, len: u32, out: u32) -> i32 {
        self.call("module_load_ptx", &[i32v(ptr), i32v(len), i32v(out)])
    }

    /// `module_load_cubin(ptr, len, out)`.
    pub fn module_load_cubin(&mut self, ptr: u32, len: u32, out: u32) -> i32 {
        self.call("module_load_cubin", &[i32v(ptr), i32v(len), i32v(out)])
    }

    /// `function_release(function)`.
    pub fn function_release(&mut self, function: u64) -> i32 {
        self.call("function_release", &[i64v(function)])
    }

    /// `module_unload(module)`.
    pub fn module_unload(&mut self, module: u64) -> i32 {
        self.call("module_unload", &[i64v(module)])
    }

    /// `function_get(module, name, name_len, out)`.
    pub fn function_get(&mut self, module: u64, name: u32, name_len: u32, out: u32) -> i32 {
        self.call(
            "function_get",
            &[i64v(module), i32v(name), i32v(name_len), i32v(out)],
        )
    }

    /// `launch(function, grid, block, shared, args_ptr, args_count, out)`.
    #[allow(clippy::too_many_arguments)]
    pub fn launch(
        &mut self,
        function: u64,
        grid: [u32; 3],
        block: [u32; 3],
        shared: u32,
        args_ptr: u32,
        args_count: u32,
        out: u32,
    ) -> i32 {
        let mut args = vec![i64v(function)];
        args.extend(grid.iter().chain(&block).map(|&v| i32v(v)));
        args.extend([shared, args_ptr, args_count, out].map(i32v));
        self.call("launch", &args)
    }

    /// `wait(launch)`.
    pub fn wait(&mut self, launch: u64) -> i32 {
        self.call("wait", &[i64v(launch)])
    }

    /// `sync()`.
    pub fn sync(&mut self) -> i32 {
        self.call("sync", &[])
    }

    /// `prefetch(ptr, len, target)`.
    pub fn prefetch(&mut self, ptr: u32, len: u32, target: u32) -> i32 {
        self.call("prefetch", &[i32v(ptr), i32v(len), i32v(target)])
    }

    /// `advise(ptr, len, advice)`.
    pub fn advise(&mut self, ptr: u32, len: u32, advice: u32) -> i32 {
        self.call("advise", &[i32v(ptr), i32v(len), i32v(advice)])
    }

    /// `last_error(buf, buf_len, out_len)`.
    pub fn last_error_call(&mut self, buf: u32, buf_len: i32, out_len: u32) -> i32 {
        self.call("last_error", &[i32v(buf), Val::I32(buf_len), i32v(out_len)])
    }

    /// Allocates a buffer of `size` bytes; its handle.
    pub fn alloc(&mut self, size: u64) -> u64 {
        assert_eq!(self.buffer_alloc(size, OUT), 0, "{}", self.last_error());
        self.read_u64(OUT)
    }

    /// Loads PTX `text` (through guest memory); the module handle.
    pub fn load_ptx(&mut self, text: &str) -> u64 {
        self.write(TEXT, text.as_bytes());
        let len = text.len() as u32;
        assert_eq!(
            self.module_load_ptx(TEXT, len, OUT),
            0,
            "{}",
            self.last_error()
        );
        self.read_u64(OUT)
    }

    /// Looks up kernel `name` in `module`; the function handle.
    pub fn function(&mut self, module: u64, name: &str) -> u64 {
        self.write(NAME, name.as_bytes());
        let len = name.len() as u32;
        assert_eq!(
            self.function_get(module, NAME, len, OUT),
            0,
            "{}",
            self.last_error()
        );
        self.read_u64(OUT)
    }

    /// Loads the vector_add PTX (the twin's text) and looks up `vadd`:
    /// `(module, function)`.
    pub fn load_vadd(&mut self) -> (u64, u64) {
        let module = self.load_ptx(twins::VECTOR_ADD_PTX);
        let function = self.function(module, "vadd");
        (module, function)
    }

    /// Launches `function` over `n` elements (256 threads a block) with
    /// `args` placed at [`ARGS`]; the errno, and the launch handle at
    /// [`OUT2`] on success.
    pub fn launch_n(&mut self, function: u64, n: u32, args: &[ArgDescriptor]) -> i32 {
        self.write_args(ARGS, args);
        self.launch(
            function,
            [n.div_ceil(256).max(1), 1, 1],
            [256, 1, 1],
            0,
            ARGS,
            args.len() as u32,
            OUT2,
        )
    }

    /// Launches and waits for `function` over `n` elements; asserts both
    /// succeed.
    pub fn run_n(&mut self, function: u64, n: u32, args: &[ArgDescriptor]) {
        assert_eq!(self.launch_n(function, n, args), 0, "{}", self.last_error());
        let launch = self.read_u64(OUT2);
        assert_eq!(self.wait(launch), 0, "{}", self.last_error());
    }
}
