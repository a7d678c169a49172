//! The CPU target for Wasm kernels end to end: kernel CLIF built by hand the
//! way `docs/kernels.md` says the translator emits it, lowered with
//! `CpuKernelLowerer`, and launched on the CPU driver over guest memory in a
//! managed buffer, with a status word in a device buffer.

#[allow(dead_code)] // the shared test generator; the rest is for other suites
mod common;

use common::Rng;
use cranelift_codegen::{
    ir::{
        AbiParam, Endianness, ExtFuncData, ExternalName, Function, InstBuilder, MemFlagsData,
        Signature, SourceLoc, TrapCode, Type, UserExternalName, UserFuncName, Value,
        condcodes::IntCC, types,
    },
    isa::{CallConv, TargetFrontendConfig},
    settings,
};
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext};
use tensorwasm_core::{
    DeviceMemory, Dim3, DriverError, ErrorKind, GpuDriver, KernelParam, LaunchConfig,
    lower::{
        Intrinsic, KernelAbi, KernelTrap, LowerError, Lowerer, status,
        translate::{
            BodyVariant, GridVariant, KernelLimits, KernelVariant, translate_kernel,
            translate_kernel_variant,
        },
    },
};
use tensorwasm_cpu::{CpuDeviceBuffer, CpuDriver, CpuError, CpuManagedBuffer};
use tensorwasm_embed::kernel::cpu::{
    CpuKernel, CpuKernelLowerer, HiddenParams, STATUS_BYTES, launch_params, one_block_each,
    own_grid_launch_params,
};

/// Elements of the large tests: not a multiple of any block size.
const N: usize = 1_000_003;

// ---- Kernel CLIF, as the translator emits it ----

/// What a kernel's body gets: its Wasm parameters and the hidden ones.
struct Params {
    wasm: Vec<Value>,
    mem_base: Value,
    mem_len: Value,
    fuel: Value,
    intrinsics: Vec<Value>,
}

impl Params {
    fn intrinsic(&self, which: Intrinsic) -> Value {
        self.intrinsics[which.index()]
    }
}

/// Wasm memory accesses: little-endian, no alignment promise.
fn wasm_flags() -> MemFlagsData {
    MemFlagsData::new().with_endianness(Endianness::Little)
}

/// A kernel with Wasm parameters `wasm` whose entry block `body` fills
/// (it must end every block it makes).
fn kernel(
    wasm: &[Type],
    body: impl FnOnce(&mut FunctionBuilder, &Params),
) -> (Function, KernelAbi) {
    let abi = KernelAbi {
        wasm_params: wasm.len(),
    };
    let mut sig = Signature::new(CallConv::SystemV);
    sig.params.extend(wasm.iter().map(|&t| AbiParam::new(t)));
    sig.params
        .extend([AbiParam::new(types::I64); KernelAbi::INTRINSICS]);
    sig.params.extend([AbiParam::new(types::I32); 12]);
    let mut function = Function::with_name_signature(UserFuncName::user(0, 0), sig);
    let mut ctx = FunctionBuilderContext::new();
    let mut b = FunctionBuilder::new(&mut function, &mut ctx);
    let entry = b.create_block();
    b.append_block_params_for_function_params(entry);
    b.switch_to_block(entry);
    let all = b.block_params(entry).to_vec();
    let params = Params {
        wasm: all[..abi.wasm_params].to_vec(),
        mem_base: all[abi.hidden(KernelAbi::MEM_BASE)],
        mem_len: all[abi.hidden(KernelAbi::MEM_LEN)],
        fuel: all[abi.hidden(KernelAbi::FUEL)],
        intrinsics: all[abi.hidden(KernelAbi::INTRINSICS)..].to_vec(),
    };
    body(&mut b, &params);
    b.seal_all_blocks();
    b.finalize(frontend_config());
    (function, abi)
}

/// The host's frontend settings (the translator's would do as well).
fn frontend_config() -> TargetFrontendConfig {
    let flags = settings::Flags::new(settings::builder());
    cranelift_native::builder()
        .expect("a host ISA")
        .finish(flags)
        .expect("host ISA flags")
        .frontend_config()
}

/// `blockIdx.x * blockDim.x + threadIdx.x`.
fn global_x(b: &mut FunctionBuilder, p: &Params) -> Value {
    let block = b.ins().imul(
        p.intrinsic(Intrinsic::BlockIdxX),
        p.intrinsic(Intrinsic::BlockDimX),
    );
    b.ins().iadd(block, p.intrinsic(Intrinsic::ThreadIdxX))
}

/// `base + 4 * i` in i32, wrapping, as Wasm computes an element address.
fn element(b: &mut FunctionBuilder, base: Value, i: Value) -> Value {
    let offset = b.ins().ishl_imm_s(i, 2);
    b.ins().iadd(base, offset)
}

/// A Wasm access of `size` bytes at guest address `index` (i32): the bounds
/// check of `docs/kernels.md` at source offset `at`; the host address.
fn heap_addr(b: &mut FunctionBuilder, p: &Params, index: Value, size: i64, at: u32) -> Value {
    let ea = b.ins().uextend(types::I64, index);
    let end = b.ins().iadd_imm_s(ea, size);
    b.set_srcloc(SourceLoc::new(at));
    let oob = b.ins().icmp(IntCC::UnsignedGreaterThan, end, p.mem_len);
    b.ins().trapnz(oob, KernelTrap::HeapOutOfBounds.trap_code());
    b.set_srcloc(SourceLoc::default());
    b.ins().iadd(p.mem_base, ea)
}

fn load(b: &mut FunctionBuilder, p: &Params, ty: Type, index: Value, at: u32) -> Value {
    let addr = heap_addr(b, p, index, i64::from(ty.bytes()), at);
    b.ins().load(ty, wasm_flags(), addr, 0)
}

fn store(b: &mut FunctionBuilder, p: &Params, value: Value, index: Value, at: u32) {
    let ty = b.func.dfg.value_type(value);
    let addr = heap_addr(b, p, index, i64::from(ty.bytes()), at);
    b.ins().store(wasm_flags(), value, addr, 0);
}

/// `if i < n { then(i) }` for the thread's global x index; returns.
fn for_each_below(
    b: &mut FunctionBuilder,
    p: &Params,
    n: Value,
    then: impl FnOnce(&mut FunctionBuilder, Value),
) {
    let i = global_x(b, p);
    let body = b.create_block();
    let exit = b.create_block();
    let inside = b.ins().icmp(IntCC::UnsignedLessThan, i, n);
    b.ins().brif(inside, body, &[], exit, &[]);
    b.switch_to_block(body);
    then(b, i);
    b.ins().jump(exit, &[]);
    b.switch_to_block(exit);
    b.ins().return_(&[]);
}

fn lower(name: &str, (function, abi): (Function, KernelAbi)) -> CpuKernel {
    CpuKernelLowerer
        .lower(name, &function, abi)
        .unwrap_or_else(|e| panic!("lowering `{name}`: {e}\n{}", function.display()))
}

// ---- Launching ----

/// Guest memory (a managed buffer) and a status word on one CPU driver.
struct Launcher {
    driver: CpuDriver,
    memory: CpuManagedBuffer,
    status: CpuDeviceBuffer,
}

impl Launcher {
    fn new(memory_bytes: usize) -> Launcher {
        let driver = CpuDriver::with_capacity(256 << 20).expect("CPU driver");
        let memory = driver.alloc_managed(memory_bytes).expect("guest memory");
        let status = driver.alloc_device(STATUS_BYTES).expect("status word");
        Launcher {
            driver,
            memory,
            status,
        }
    }

    fn write(&self, at: usize, bytes: &[u8]) {
        let range = self.memory.range(at, bytes.len()).expect("in guest memory");
        self.driver.copy_to_device(range, bytes).expect("write");
    }

    fn read(&self, at: usize, len: usize) -> Vec<u8> {
        let mut out = vec![0; len];
        let range = self.memory.range(at, len).expect("in guest memory");
        self.driver.copy_from_device(&mut out, range).expect("read");
        out
    }

    fn write_u32s(&self, at: usize, values: impl IntoIterator<Item = u32>) {
        let bytes: Vec<u8> = values.into_iter().flat_map(u32::to_le_bytes).collect();
        self.write(at, &bytes);
    }

    fn read_u32s(&self, at: usize, n: usize) -> Vec<u32> {
        self.read(at, 4 * n)
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes(c.try_into().expect("4 bytes")))
            .collect()
    }

    /// Zeroes the status word, launches `kernel` with guest memory
    /// `0 .. mem_len` and no time limit, waits; the stream's result.
    fn run(
        &self,
        kernel: &CpuKernel,
        config: LaunchConfig,
        args: &[KernelParam],
        mem_len: usize,
        fuel: u64,
    ) -> Result<(), CpuError> {
        self.run_limited(kernel, config, args, mem_len, fuel, u64::MAX, false)
    }

    /// [`Launcher::run`] with a time limit (ns), and the status word's
    /// `stop` set before the launch when `stopped` (the host stopping it).
    #[allow(clippy::too_many_arguments)]
    fn run_limited(
        &self,
        kernel: &CpuKernel,
        config: LaunchConfig,
        args: &[KernelParam],
        mem_len: usize,
        fuel: u64,
        time_limit: u64,
        stopped: bool,
    ) -> Result<(), CpuError> {
        self.run_marked(
            kernel, config, args, mem_len, fuel, time_limit, stopped, false,
        )
    }

    /// [`Launcher::run_limited`]; with `own_grid`, the launch says that its
    /// physical grid is the guest's own (`KernelAbi::own_grid_params`).
    #[allow(clippy::too_many_arguments)]
    fn run_marked(
        &self,
        kernel: &CpuKernel,
        config: LaunchConfig,
        args: &[KernelParam],
        mem_len: usize,
        fuel: u64,
        time_limit: u64,
        stopped: bool,
        own_grid: bool,
    ) -> Result<(), CpuError> {
        assert!(mem_len <= self.memory.len());
        let d = &self.driver;
        d.memset(self.status.full(), 0)
            .expect("zero the status word");
        if stopped {
            let stop = self.status.range(status::STOP, 4).expect("the stop word");
            d.copy_to_device(stop, &1u32.to_le_bytes())
                .expect("set stop");
        }
        let module = d.host_module([("k", kernel.host_kernel())]);
        let function = d.function(&module, "k").expect("the kernel");
        let stream = d.create_stream().expect("stream");
        let hidden = HiddenParams {
            mem_base: self.memory.device_ptr(),
            mem_len: mem_len as u64,
            status: self.status.device_ptr(),
            fuel,
            time_limit,
            grid: (config.grid.x, config.grid.y, config.grid.z),
        };
        let params = if own_grid {
            own_grid_launch_params(args, hidden)
        } else {
            launch_params(args, hidden)
        };
        let config = LaunchConfig {
            grid: one_block_each(config.grid),
            ..config
        };
        // SAFETY: guest memory is `0 .. mem_len` of `self.memory` (checked
        // above) and the status word is `self.status`; both outlive the
        // launch, which ends at the synchronize below.
        unsafe { d.launch(&stream, &function, &config, &params) }.expect("launch");
        d.stream_synchronize(&stream)
    }

    /// The status word: (code, offset).
    fn status(&self) -> (u32, u64) {
        let mut bytes = [0; STATUS_BYTES];
        self.driver
            .copy_from_device(&mut bytes, self.status.full())
            .expect("read the status word");
        let code = u32::from_le_bytes(bytes[..4].try_into().expect("4 bytes"));
        let offset = u64::from_le_bytes(bytes[8..16].try_into().expect("8 bytes"));
        (code, offset)
    }

    /// The status word's `stop` flag.
    fn stop_word(&self) -> u32 {
        let mut bytes = [0; STATUS_BYTES];
        self.driver
            .copy_from_device(&mut bytes, self.status.full())
            .expect("read the status word");
        let at = |i: usize, n: usize| &bytes[i..i + n];
        u32::from_le_bytes(at(status::STOP, 4).try_into().expect("4 bytes"))
    }
}

fn i32p(v: u32) -> KernelParam {
    KernelParam::I32(v as i32)
}

fn config(threads: usize, block: u32) -> LaunchConfig {
    LaunchConfig::for_elements(threads as u32, block)
}

// ---- Tests ----

/// `vadd(a, b, c, n)`: `c[i] = a[i] + b[i]` for `i < n` (f32).
fn vadd() -> CpuKernel {
    let ty = types::I32;
    lower(
        "vadd",
        kernel(&[ty, ty, ty, ty], |b, p| {
            let [a, bb, c, n] = p.wasm[..] else {
                unreachable!()
            };
            for_each_below(b, p, n, |b, i| {
                let pa = element(b, a, i);
                let x = load(b, p, types::F32, pa, 0x10);
                let pb = element(b, bb, i);
                let y = load(b, p, types::F32, pb, 0x18);
                let sum = b.ins().fadd(x, y);
                let pc = element(b, c, i);
                store(b, p, sum, pc, 0x20);
            });
        }),
    )
}

#[test]
fn vector_add_matches_the_host_on_every_element() {
    let mut rng = Rng::new("vector_add_matches_the_host_on_every_element");
    // b and c at odd addresses: Wasm promises no alignment.
    let (a_at, b_at) = (64, 64 + 4 * N + 1);
    let c_at = b_at + 4 * N + 2;
    let mem_len = c_at + 4 * N + 64;
    let l = Launcher::new(mem_len);
    let a: Vec<f32> = (0..N).map(|_| rng.float()).collect();
    let b: Vec<f32> = (0..N).map(|_| rng.float()).collect();
    l.write_u32s(a_at, a.iter().map(|v| v.to_bits()));
    l.write_u32s(b_at, b.iter().map(|v| v.to_bits()));
    let canary = rng.bytes(4 * N + 64);
    l.write(c_at, &canary);

    let kernel = vadd();
    let args = [a_at, b_at, c_at, N].map(|v| i32p(v as u32));
    l.run(&kernel, config(N, 256), &args, mem_len, 1)
        .expect("vadd");

    assert_eq!(l.status(), (0, 0));
    let c = l.read_u32s(c_at, N);
    for i in 0..N {
        assert_eq!(c[i], (a[i] + b[i]).to_bits(), "c[{i}]: {} + {}", a[i], b[i]);
    }
    assert_eq!(l.read(c_at + 4 * N, 64), canary[4 * N..], "past c");
}

#[test]
fn an_out_of_bounds_store_records_its_code_and_offset() {
    let mut rng = Rng::new("an_out_of_bounds_store_records_its_code_and_offset");
    // fill(out): out[i] = 3i + 1 for every thread; guest memory ends after
    // n elements, so threads n.. trap at the store's bounds check.
    let kernel = lower(
        "fill",
        kernel(&[types::I32], |b, p| {
            let i = global_x(b, p);
            let at = element(b, p.wasm[0], i);
            let three = b.ins().imul_imm_s(i, 3);
            let value = b.ins().iadd_imm_s(three, 1);
            store(b, p, value, at, 0x1234);
            b.ins().return_(&[]);
        }),
    );
    let out = 64;
    let mem_len = out + 4 * N;
    let l = Launcher::new(mem_len + 4096);
    let canary = rng.bytes(4096);
    l.write(mem_len, &canary);
    l.run(
        &kernel,
        config(N + 1000, 256),
        &[i32p(out as u32)],
        mem_len,
        1,
    )
    .expect("a trap is no failed launch");

    assert_eq!(
        l.status(),
        (KernelTrap::HeapOutOfBounds.code(), 0x1234),
        "status word"
    );
    let values = l.read_u32s(out, N);
    for (i, &v) in values.iter().enumerate() {
        assert_eq!(v, 3 * i as u32 + 1, "out[{i}]");
    }
    assert_eq!(l.read(mem_len, 4096), canary, "memory past mem_len");
}

#[test]
fn a_trapping_thread_ends_alone() {
    let mut rng = Rng::new("a_trapping_thread_ends_alone");
    // mark(out, bad): thread `bad` hits `unreachable`; every other thread,
    // those after it in its block too, writes out[i] = 3i + 1.
    let kernel = lower(
        "mark",
        kernel(&[types::I32, types::I32], |b, p| {
            let [out, bad] = p.wasm[..] else {
                unreachable!()
            };
            let i = global_x(b, p);
            let trap = b.create_block();
            let work = b.create_block();
            let is_bad = b.ins().icmp(IntCC::Equal, i, bad);
            b.ins().brif(is_bad, trap, &[], work, &[]);
            b.switch_to_block(trap);
            b.set_srcloc(SourceLoc::new(0x77));
            b.ins().trap(KernelTrap::Unreachable.trap_code());
            b.set_srcloc(SourceLoc::default());
            b.switch_to_block(work);
            let three = b.ins().imul_imm_s(i, 3);
            let value = b.ins().iadd_imm_s(three, 1);
            let at = element(b, out, i);
            store(b, p, value, at, 0x80);
            b.ins().return_(&[]);
        }),
    );
    let out = 128;
    // Room for every thread launched (N rounded up to whole blocks): a
    // thread past N storing out of bounds would trap too, and whichever
    // trap is recorded first would win.
    let mem_len = out + 4 * N.div_ceil(256) * 256;
    let l = Launcher::new(mem_len);
    l.write_u32s(out, std::iter::repeat_n(u32::MAX, N));
    // Not the last thread of its block of 256.
    let bad = loop {
        let bad = rng.below(N as u64) as usize;
        if bad % 256 != 255 && bad + 1 < N {
            break bad;
        }
    };
    println!("thread {bad} traps");
    l.run(
        &kernel,
        config(N, 256),
        &[i32p(out as u32), i32p(bad as u32)],
        mem_len,
        1,
    )
    .expect("a trap is no failed launch");

    assert_eq!(l.status(), (KernelTrap::Unreachable.code(), 0x77));
    let values = l.read_u32s(out, N);
    for (i, &v) in values.iter().enumerate() {
        let want = if i == bad { u32::MAX } else { 3 * i as u32 + 1 };
        assert_eq!(v, want, "out[{i}]");
    }
}

#[test]
fn division_by_zero_traps_its_threads_only() {
    let mut rng = Rng::new("division_by_zero_traps_its_threads_only");
    // quot(a, d, q, n): q[i] = a[i] / d[i] (i32.div_s, with the
    // translator's two guards).
    let kernel = lower(
        "quot",
        kernel(&[types::I32; 4], |b, p| {
            let [a, d, q, n] = p.wasm[..] else {
                unreachable!()
            };
            for_each_below(b, p, n, |b, i| {
                let pa = element(b, a, i);
                let x = load(b, p, types::I32, pa, 0x3000);
                let pd = element(b, d, i);
                let y = load(b, p, types::I32, pd, 0x3008);
                b.set_srcloc(SourceLoc::new(0x3333));
                b.ins()
                    .trapz(y, KernelTrap::IntegerDivideByZero.trap_code());
                let is_min = b.ins().icmp_imm_s(IntCC::Equal, x, i64::from(i32::MIN));
                let is_minus_one = b.ins().icmp_imm_s(IntCC::Equal, y, -1);
                let overflow = b.ins().band(is_min, is_minus_one);
                b.ins()
                    .trapnz(overflow, KernelTrap::IntegerOverflow.trap_code());
                let r = b.ins().sdiv(x, y);
                b.set_srcloc(SourceLoc::default());
                let pq = element(b, q, i);
                store(b, p, r, pq, 0x3010);
            });
        }),
    );
    let edges: [(i32, i32); 7] = [
        (i32::MIN, 1),
        (i32::MAX, -1),
        (i32::MIN, i32::MIN),
        (i32::MIN, 0),
        (-7, 2),
        (7, -2),
        (5, 0),
    ];
    let mut a = Vec::with_capacity(N);
    let mut d = Vec::with_capacity(N);
    for i in 0..N {
        let (x, mut y) = match edges.get(i) {
            Some(&edge) => edge,
            None => {
                let y = if rng.below(64) == 0 {
                    0
                } else {
                    rng.next_u64() as i32 >> rng.below(31)
                };
                (rng.next_u64() as i32, y)
            }
        };
        if x == i32::MIN && y == -1 {
            y = 1;
        }
        a.push(x);
        d.push(y);
    }
    let (a_at, d_at, q_at) = (256, 256 + 4 * N, 256 + 8 * N);
    let mem_len = q_at + 4 * N;
    let l = Launcher::new(mem_len);
    l.write_u32s(a_at, a.iter().map(|&v| v as u32));
    l.write_u32s(d_at, d.iter().map(|&v| v as u32));
    let sentinel = 0x7ead_beef;
    l.write_u32s(q_at, std::iter::repeat_n(sentinel, N));
    let args = [a_at, d_at, q_at, N].map(|v| i32p(v as u32));
    l.run(&kernel, config(N, 128), &args, mem_len, 1)
        .expect("a trap is no failed launch");

    assert_eq!(l.status(), (KernelTrap::IntegerDivideByZero.code(), 0x3333));
    let q = l.read_u32s(q_at, N);
    let zeros = d.iter().filter(|&&y| y == 0).count();
    println!("{zeros} of {N} divisors are zero");
    for i in 0..N {
        let want = if d[i] == 0 {
            sentinel
        } else {
            a[i].wrapping_div(d[i]) as u32
        };
        assert_eq!(q[i], want, "q[{i}] = {} / {}", a[i], d[i]);
    }
}

#[test]
fn loops_run_out_of_fuel() {
    // spin(out, iters): a loop of `iters` iterations (at least one), with
    // the translator's fuel check at its header; then out[i] = iterations.
    let spin = lower(
        "spin",
        kernel(&[types::I32, types::I32], |b, p| {
            let [out, iters] = p.wasm[..] else {
                unreachable!()
            };
            let fuel = b.declare_var(types::I64);
            let count = b.declare_var(types::I32);
            b.def_var(fuel, p.fuel);
            let zero = b.ins().iconst(types::I32, 0);
            b.def_var(count, zero);
            let header = b.create_block();
            let exit = b.create_block();
            b.ins().jump(header, &[]);
            b.switch_to_block(header);
            let left = b.use_var(fuel);
            b.set_srcloc(SourceLoc::new(0x4444));
            let empty = b.ins().icmp_imm_s(IntCC::Equal, left, 0);
            b.ins().trapnz(empty, KernelTrap::OutOfFuel.trap_code());
            b.set_srcloc(SourceLoc::default());
            let left = b.ins().iadd_imm_s(left, -1);
            b.def_var(fuel, left);
            let done = b.use_var(count);
            let done = b.ins().iadd_imm_s(done, 1);
            b.def_var(count, done);
            let more = b.ins().icmp(IntCC::UnsignedLessThan, done, iters);
            b.ins().brif(more, header, &[], exit, &[]);
            b.switch_to_block(exit);
            let i = global_x(b, p);
            let at = element(b, out, i);
            let done = b.use_var(count);
            store(b, p, done, at, 0x4500);
            b.ins().return_(&[]);
        }),
    );
    let threads = 1024;
    let l = Launcher::new(4 * threads);
    let iters = 5000;
    // Exactly enough fuel: one unit per loop header.
    l.write_u32s(0, std::iter::repeat_n(u32::MAX, threads));
    l.run(
        &spin,
        config(threads, 128),
        &[i32p(0), i32p(iters)],
        4 * threads,
        u64::from(iters),
    )
    .expect("spin");
    assert_eq!(l.status(), (0, 0));
    assert!(l.read_u32s(0, threads).iter().all(|&v| v == iters));
    // One unit short: every thread stops at the header, before its store.
    l.write_u32s(0, std::iter::repeat_n(u32::MAX, threads));
    l.run(
        &spin,
        config(threads, 128),
        &[i32p(0), i32p(iters)],
        4 * threads,
        u64::from(iters - 1),
    )
    .expect("a trap is no failed launch");
    assert_eq!(l.status(), (KernelTrap::OutOfFuel.code(), 0x4444));
    assert!(l.read_u32s(0, threads).iter().all(|&v| v == u32::MAX));

    // An endless loop ends too.
    let endless = lower(
        "endless",
        kernel(&[], |b, p| {
            let fuel = b.declare_var(types::I64);
            b.def_var(fuel, p.fuel);
            let header = b.create_block();
            b.ins().jump(header, &[]);
            b.switch_to_block(header);
            let left = b.use_var(fuel);
            b.set_srcloc(SourceLoc::new(0x4600));
            let empty = b.ins().icmp_imm_s(IntCC::Equal, left, 0);
            b.ins().trapnz(empty, KernelTrap::OutOfFuel.trap_code());
            b.set_srcloc(SourceLoc::default());
            let left = b.ins().iadd_imm_s(left, -1);
            b.def_var(fuel, left);
            b.ins().jump(header, &[]);
        }),
    );
    l.run(&endless, config(300, 64), &[], 0, 100_000)
        .expect("a trap is no failed launch");
    assert_eq!(l.status(), (KernelTrap::OutOfFuel.code(), 0x4600));
}

#[test]
fn every_thread_sees_its_intrinsics() {
    // where(out): thread t of the grid (x fastest) stores its twelve
    // intrinsics at out + 48 t.
    let kernel = lower(
        "where",
        kernel(&[types::I32], |b, p| {
            let axis = |b: &mut FunctionBuilder, tid, ctaid, ntid| {
                let base = b.ins().imul(p.intrinsic(ctaid), p.intrinsic(ntid));
                b.ins().iadd(base, p.intrinsic(tid))
            };
            use Intrinsic::*;
            let gx = axis(b, ThreadIdxX, BlockIdxX, BlockDimX);
            let gy = axis(b, ThreadIdxY, BlockIdxY, BlockDimY);
            let gz = axis(b, ThreadIdxZ, BlockIdxZ, BlockDimZ);
            let width = b.ins().imul(p.intrinsic(GridDimX), p.intrinsic(BlockDimX));
            let height = b.ins().imul(p.intrinsic(GridDimY), p.intrinsic(BlockDimY));
            let plane = b.ins().imul(gz, height);
            let row = b.ins().iadd(plane, gy);
            let row = b.ins().imul(row, width);
            let t = b.ins().iadd(row, gx);
            let record = b.ins().imul_imm_s(t, 48);
            let record = b.ins().iadd(p.wasm[0], record);
            for (k, which) in Intrinsic::ALL.into_iter().enumerate() {
                let at = b.ins().iadd_imm_s(record, 4 * k as i64);
                store(b, p, p.intrinsic(which), at, 0x5000);
            }
            b.ins().return_(&[]);
        }),
    );
    // A Wasm kernel's physical grid is 1-D (the translator maps the guest's
    // grid onto it as virtual blocks), so that is what the CPU target gets.
    let grid = Dim3 { x: 12, y: 1, z: 1 };
    let block = Dim3 { x: 4, y: 2, z: 3 };
    let (w, h, depth) = (48, 2, 3);
    let threads = w * h * depth;
    let l = Launcher::new(48 * threads);
    let config = LaunchConfig {
        grid,
        block,
        shared_mem_bytes: 0,
    };
    l.run(&kernel, config, &[i32p(0)], 48 * threads, 1)
        .expect("where");
    assert_eq!(l.status(), (0, 0));
    let records = l.read_u32s(0, 12 * threads);
    for (t, record) in records.chunks_exact(12).enumerate() {
        let (gx, gy, gz) = ((t % w) as u32, (t / w % h) as u32, (t / (w * h)) as u32);
        let want = [
            gx % 4,
            gy % 2,
            gz % 3,
            gx / 4,
            gy / 2,
            gz / 3,
            4,
            2,
            3,
            12,
            1,
            1,
        ];
        assert_eq!(record, want, "thread ({gx}, {gy}, {gz})");
    }
}

#[test]
fn unguarded_division_and_conversion_do_not_end_the_process() {
    // raw(x, y, f, out): CLIF the translator never emits (no guards):
    // out = [x / y (signed), x / y (unsigned), x % y, trunc_s(f), trunc_u(f)].
    let kernel = lower(
        "raw",
        kernel(&[types::I32, types::I32, types::F32, types::I32], |b, p| {
            let [x, y, f, out] = p.wasm[..] else {
                unreachable!()
            };
            let results = [
                b.ins().sdiv(x, y),
                b.ins().udiv(x, y),
                b.ins().srem(x, y),
                b.ins().fcvt_to_sint(types::I32, f),
                b.ins().fcvt_to_uint(types::I32, f),
            ];
            for (k, r) in results.into_iter().enumerate() {
                let at = b.ins().iadd_imm_s(out, 4 * k as i64);
                store(b, p, r, at, 0x6000);
            }
            b.ins().return_(&[]);
        }),
    );
    let l = Launcher::new(64);
    let cases: [(i32, i32, f32); 4] = [
        (i32::MIN, -1, f32::NAN),
        (7, 0, 3e9),
        (-9, 0, -1e10),
        (100, 7, 42.9),
    ];
    for (x, y, f) in cases {
        let args = [
            KernelParam::I32(x),
            KernelParam::I32(y),
            KernelParam::F32(f),
            i32p(0),
        ];
        l.run(&kernel, config(1, 1), &args, 64, 1).expect("raw");
        assert_eq!(l.status(), (0, 0));
        let got = l.read_u32s(0, 5);
        if y != 0 && !(x == i32::MIN && y == -1) {
            assert_eq!(got[0], x.wrapping_div(y) as u32);
            assert_eq!(got[1], x as u32 / y as u32);
            assert_eq!(got[2], x.wrapping_rem(y) as u32);
        }
        // Saturating, like Rust's `as`.
        assert_eq!(got[3], f as i32 as u32, "trunc_s({f})");
        assert_eq!(got[4], f as u32, "trunc_u({f})");
    }
}

#[test]
fn wrong_launch_parameters_fail_the_launch_only() {
    let l = Launcher::new(64 + 8 * 1000);
    let kernel = vadd();
    let n = 1000;
    let good = [64, 64, 64 + 4 * n, n].map(|v| i32p(v as u32));
    let mut bad = good;
    bad[3] = KernelParam::F32(1000.0);
    let err = l
        .run(&kernel, config(n, 128), &bad, 64 + 4 * n, 1)
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::LaunchFailed, "{err}");
    let text = err.to_string();
    assert!(
        text.contains("kernel `vadd`: parameter 3 must be a Wasm i32, got F32(1000.0)"),
        "{text}"
    );
    let err = l
        .run(&kernel, config(n, 128), &good[..3], 64 + 4 * n, 1)
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("kernel `vadd` takes 12 launch parameters (4 Wasm, then mem_base"),
        "{err}"
    );
    // The driver and the kernel still work.
    l.write_u32s(64, (0..n).map(|i| (i as f32).to_bits()));
    l.run(&kernel, config(n, 128), &good, 64 + 8 * n, 1)
        .expect("a good launch after bad ones");
    let c = l.read_u32s(64 + 4 * n, n);
    assert!((0..n).all(|i| c[i] == (2.0 * i as f32).to_bits()));
}

/// A one-block kernel of no Wasm parameters whose body is `emit`.
fn lower_body(emit: impl FnOnce(&mut FunctionBuilder, &Params)) -> Result<CpuKernel, LowerError> {
    let (function, abi) = kernel(&[], emit);
    CpuKernelLowerer.lower("refused", &function, abi)
}

fn refused_op(result: Result<CpuKernel, LowerError>) -> (String, u64, String) {
    match result {
        Err(LowerError::Unsupported(op)) => (op.op, op.offset, op.reason),
        Err(other) => panic!("refused as invalid, not unsupported: {other}"),
        Ok(kernel) => panic!("{kernel:?} was not refused"),
    }
}

#[test]
fn native_traps_calls_and_bad_signatures_are_refused() {
    // A trap code that is no KernelTrap would be a native trap.
    let (op, offset, reason) = refused_op(lower_body(|b, p| {
        let i = p.intrinsic(Intrinsic::ThreadIdxX);
        b.set_srcloc(SourceLoc::new(0x99));
        b.ins().trapnz(i, TrapCode::INTEGER_DIVISION_BY_ZERO);
        b.ins().return_(&[]);
    }));
    assert_eq!((op.as_str(), offset), ("trapnz", 0x99));
    assert!(reason.contains("not a KernelTrap"), "{reason}");
    let user99 = TrapCode::user(99).expect("a user code");
    let (op, _, _) = refused_op(lower_body(|b, _| {
        b.ins().trap(user99);
    }));
    assert_eq!(op, "trap");
    let (op, _, _) = refused_op(lower_body(|b, p| {
        let one = b.ins().iconst(types::I32, 1);
        let sum = b.ins().uadd_overflow_trap(
            p.intrinsic(Intrinsic::ThreadIdxX),
            one,
            KernelTrap::IntegerOverflow.trap_code(),
        );
        let at = b.ins().iconst(types::I32, 0);
        store(b, p, sum, at, 0);
        b.ins().return_(&[]);
    }));
    assert_eq!(op, "uadd_overflow_trap");
    let (op, _, _) = refused_op(lower_body(|b, _| {
        b.ins().debugtrap();
        b.ins().return_(&[]);
    }));
    assert_eq!(op, "debugtrap");
    // Kernels call nothing: every callee is inlined.
    let (op, _, reason) = refused_op(lower_body(|b, _| {
        let signature = b.import_signature(Signature::new(CallConv::SystemV));
        let name = b
            .func
            .declare_imported_user_function(UserExternalName::new(0, 7));
        let callee = b.import_function(ExtFuncData {
            name: ExternalName::user(name),
            signature,
            colocated: false,
            patchable: false,
        });
        b.ins().call(callee, &[]);
        b.ins().return_(&[]);
    }));
    assert_eq!(op, "call");
    assert!(reason.contains("calls nothing"), "{reason}");

    // A signature without the hidden parameters is no kernel.
    let mut function =
        Function::with_name_signature(UserFuncName::user(0, 0), Signature::new(CallConv::SystemV));
    let mut ctx = FunctionBuilderContext::new();
    let mut b = FunctionBuilder::new(&mut function, &mut ctx);
    let entry = b.create_block();
    b.switch_to_block(entry);
    b.ins().return_(&[]);
    b.seal_all_blocks();
    b.finalize(frontend_config());
    let err = CpuKernelLowerer
        .lower("empty", &function, KernelAbi { wasm_params: 0 })
        .unwrap_err();
    assert!(matches!(err, LowerError::Invalid(_)), "{err}");
}

#[test]
fn kernels_outlive_their_lowerer_and_free_their_code() {
    // Many kernels made and dropped: each frees its code; clones and host
    // kernels keep it.
    let l = Launcher::new(64 + 12 * 100);
    for round in 0..50 {
        let kernel = vadd();
        let host = kernel.host_kernel();
        let copy = kernel.clone();
        drop(kernel);
        let n = 100;
        l.write_u32s(64, (0..2 * n).map(|i| (i as f32 + round as f32).to_bits()));
        let args = [64, 64 + 4 * n, 64 + 8 * n, n].map(|v| i32p(v as u32));
        l.run(&copy, config(n, 32), &args, 64 + 12 * n, 1)
            .expect("vadd");
        drop(host);
    }
}

// ---- The translator's output ----

/// Kernels in WAT, for the translator. Function indices: the three
/// imports, then `$gid` (3), `saxpy` (4), `quot` (5), `tri` (6), `spin` (7).
const TRANSLATED: &str = r#"(module
  (import "tensorwasm_kernel" "thread_idx_x" (func $tid (result i32)))
  (import "tensorwasm_kernel" "block_idx_x" (func $bid (result i32)))
  (import "tensorwasm_kernel" "block_dim_x" (func $bdim (result i32)))
  (memory (export "memory") 1)
  (func $gid (result i32)
    (i32.add (i32.mul (call $bid) (call $bdim)) (call $tid)))
  (func (export "saxpy") (param $alpha f32) (param $x i32) (param $y i32) (param $n i32)
    (local $i i32) (local $at i32)
    (local.set $i (call $gid))
    (if (i32.lt_u (local.get $i) (local.get $n))
      (then
        (local.set $at (i32.shl (local.get $i) (i32.const 2)))
        (f32.store (i32.add (local.get $y) (local.get $at))
          (f32.add
            (f32.mul (local.get $alpha) (f32.load (i32.add (local.get $x) (local.get $at))))
            (f32.load (i32.add (local.get $y) (local.get $at))))))))
  (func (export "quot") (param $a i32) (param $d i32) (param $q i32) (param $n i32)
    (local $i i32) (local $at i32)
    (local.set $i (call $gid))
    (if (i32.lt_u (local.get $i) (local.get $n))
      (then
        (local.set $at (i32.shl (local.get $i) (i32.const 2)))
        (i32.store (i32.add (local.get $q) (local.get $at))
          (i32.div_s (i32.load (i32.add (local.get $a) (local.get $at)))
                     (i32.load (i32.add (local.get $d) (local.get $at))))))))
  (func (export "tri") (param $out i32) (param $n i32)
    (local $i i32) (local $k i32) (local $s i64)
    (local.set $i (call $gid))
    (if (i32.lt_u (local.get $i) (local.get $n))
      (then
        (local.set $k (i32.rem_u (local.get $i) (i32.const 100)))
        (block $done
          (loop $next
            (br_if $done (i32.eqz (local.get $k)))
            (local.set $s (i64.add (local.get $s) (i64.extend_i32_u (local.get $k))))
            (local.set $k (i32.sub (local.get $k) (i32.const 1)))
            (br $next)))
        (i64.store (i32.add (local.get $out) (i32.shl (local.get $i) (i32.const 3)))
          (local.get $s)))))
  (func (export "spin") (loop $forever (br $forever))))"#;

/// Translates function `index` of [`TRANSLATED`] and lowers it.
fn translated(index: u32, name: &str) -> CpuKernel {
    let wasm = wat::parse_str(TRANSLATED).expect("the WAT parses");
    let kernel = translate_kernel(&wasm, index).expect("the translator takes it");
    assert_eq!(kernel.name, name);
    lower(name, (kernel.function, kernel.abi))
}

#[test]
fn translated_kernels_run_natively() {
    let mut rng = Rng::new("translated_kernels_run_natively");
    let (x_at, y_at) = (16, 16 + 4 * N + 3);
    let mem_len = y_at + 4 * N;
    let l = Launcher::new(mem_len.max(16 + 8 * N));

    // saxpy: y = alpha x + y, on every element.
    let alpha = rng.float();
    let x: Vec<f32> = (0..N).map(|_| rng.float()).collect();
    let y: Vec<f32> = (0..N).map(|_| rng.float()).collect();
    l.write_u32s(x_at, x.iter().map(|v| v.to_bits()));
    l.write_u32s(y_at, y.iter().map(|v| v.to_bits()));
    let args = [
        KernelParam::F32(alpha),
        i32p(x_at as u32),
        i32p(y_at as u32),
        i32p(N as u32),
    ];
    l.run(&translated(4, "saxpy"), config(N, 256), &args, mem_len, 1)
        .expect("saxpy");
    assert_eq!(l.status(), (0, 0));
    let got = l.read_u32s(y_at, N);
    for i in 0..N {
        assert_eq!(got[i], (alpha * x[i] + y[i]).to_bits(), "y[{i}]");
    }

    // quot: a zero divisor traps its thread only.
    let a: Vec<i32> = (0..N).map(|_| rng.next_u64() as i32 | 1).collect();
    let d: Vec<i32> = (0..N)
        .map(|_| match rng.below(50) {
            0 => 0,
            _ => (rng.next_u64() as i32 >> rng.below(31)) | 2,
        })
        .collect();
    let (a_at, d_at, q_at) = (0, 4 * N, 8 * N);
    let mem_len = 12 * N;
    let l = Launcher::new(mem_len);
    l.write_u32s(a_at, a.iter().map(|&v| v as u32));
    l.write_u32s(d_at, d.iter().map(|&v| v as u32));
    l.write_u32s(q_at, std::iter::repeat_n(0x7ead_beef, N));
    let args = [a_at, d_at, q_at, N].map(|v| i32p(v as u32));
    l.run(&translated(5, "quot"), config(N, 128), &args, mem_len, 1)
        .expect("quot");
    let (code, offset) = l.status();
    assert_eq!(code, KernelTrap::IntegerDivideByZero.code());
    assert!(offset > 0, "the div_s operator's offset, got {offset}");
    let q = l.read_u32s(q_at, N);
    for i in 0..N {
        let want = match d[i] {
            0 => 0x7ead_beef,
            d => a[i].wrapping_div(d) as u32,
        };
        assert_eq!(q[i], want, "q[{i}] = {} / {}", a[i], d[i]);
    }

    // tri: out[i] = 1 + 2 + ... + i % 100, a loop whose header runs
    // i % 100 + 1 times: fuel 100 is enough for all, 99 is one short for
    // the threads with i % 100 == 99.
    let tri = translated(6, "tri");
    let mem_len = 8 * N;
    let l = Launcher::new(mem_len);
    let want = |i: usize| (i % 100 * (i % 100 + 1) / 2) as u64;
    for fuel in [100, 99] {
        let fill = std::iter::repeat_n([u32::MAX, u32::MAX], N).flatten();
        l.write_u32s(0, fill);
        l.run(
            &tri,
            config(N, 256),
            &[i32p(0), i32p(N as u32)],
            mem_len,
            fuel,
        )
        .expect("tri");
        let (code, offset) = l.status();
        let got = l.read(0, 8 * N);
        for (i, bytes) in got.chunks_exact(8).enumerate() {
            let sum = u64::from_le_bytes(bytes.try_into().expect("8 bytes"));
            let expect = if fuel == 99 && i % 100 == 99 {
                u64::MAX
            } else {
                want(i)
            };
            assert_eq!(sum, expect, "fuel {fuel}: out[{i}]");
        }
        if fuel == 100 {
            assert_eq!((code, offset), (0, 0));
        } else {
            assert_eq!(code, KernelTrap::OutOfFuel.code());
            assert!(offset > 0, "the loop's offset, got {offset}");
        }
    }

    // spin: an endless loop ends.
    l.run(
        &translated(7, "spin"),
        config(1000, 100),
        &[],
        mem_len,
        5000,
    )
    .expect("spin");
    assert_eq!(l.status().0, KernelTrap::OutOfFuel.code());
}

/// Each kernel variant runs the launches it serves exactly as the kernel
/// for every launch does; on a launch it does not serve (the host's pick
/// gone wrong: the kernels no longer test it) it stays in bounds and
/// computes what its assumption says: the aligned copy reads an argument
/// it assumes aligned with the low bits masked off (an aligned address
/// whatever the launch passes), and the own-grid variant, its blocks from
/// `ctaid`, ignores the host's mark and the time limit.
#[test]
fn kernel_variants_serve_their_launches_and_stay_in_bounds_on_others() {
    let mut rng = Rng::new("kernel_variants_serve_their_launches_and_stay_in_bounds_on_others");
    let wasm = wat::parse_str(TRANSLATED).expect("the WAT parses");
    let variant = |grid, bodies| {
        let kernel =
            translate_kernel_variant(&wasm, 4, KernelLimits::HOST, KernelVariant { grid, bodies })
                .expect("the translator takes it");
        let aligned = kernel.aligned_args.clone();
        (lower("saxpy", (kernel.function, kernel.abi)), aligned)
    };
    const M: usize = 10_007;
    let mem_len = 1 << 20;
    let y_at = 8 * M + 64;
    let l = Launcher::new(mem_len);
    let alpha = rng.float();
    let x: Vec<f32> = (0..M).map(|_| rng.float()).collect();
    let y: Vec<f32> = (0..M).map(|_| rng.float()).collect();
    // `x_at`: where x is written; `read_at`: where the kernel reads it.
    let check_timed =
        |kernel: &CpuKernel, x_at: usize, read_at: usize, own_grid: bool, time: u64| {
            l.write(0, &vec![0; mem_len]);
            l.write_u32s(x_at, x.iter().map(|v| v.to_bits()));
            l.write_u32s(y_at, y.iter().map(|v| v.to_bits()));
            let read: Vec<f32> = l
                .read_u32s(read_at, M)
                .into_iter()
                .map(f32::from_bits)
                .collect();
            let before = l.read(0, mem_len);
            let args = [
                KernelParam::F32(alpha),
                i32p(x_at as u32),
                i32p(y_at as u32),
                i32p(M as u32),
            ];
            l.run_marked(
                kernel,
                config(M, 128),
                &args,
                mem_len,
                1,
                time,
                false,
                own_grid,
            )
            .expect("saxpy");
            let case = format!("x at {x_at} read at {read_at}, own grid {own_grid}, time {time}");
            assert_eq!(l.status(), (0, 0), "{case}");
            let got = l.read_u32s(y_at, M);
            for (i, &g) in got.iter().enumerate() {
                let want = alpha * read[i] + y[i];
                assert!(
                    g == want.to_bits() || (want.is_nan() && f32::from_bits(g).is_nan()),
                    "{case}: y[{i}] = {g:#x}, want {:#x}",
                    want.to_bits()
                );
            }
            let after = l.read(0, mem_len);
            let outside = |m: &[u8]| [m[..y_at].to_vec(), m[y_at + 4 * M..].to_vec()].concat();
            assert!(
                outside(&after) == outside(&before),
                "{case}: wrote outside y"
            );
        };
    let check = |kernel: &CpuKernel, x_at: usize, read_at: usize, own_grid: bool| {
        check_timed(kernel, x_at, read_at, own_grid, u64::MAX)
    };
    let (aligned, args) = variant(GridVariant::Any, BodyVariant::Aligned);
    assert!(
        !args.is_empty(),
        "saxpy has an aligned copy: its x and y are assumed aligned"
    );
    check(&aligned, 16, 16, false);
    check(&aligned, 16, 16, true);
    check(&aligned, 17, 16, false);
    let (general, _) = variant(GridVariant::Any, BodyVariant::General);
    check(&general, 17, 17, false);
    check(&general, 16, 16, true);
    let (own, _) = variant(GridVariant::Own, BodyVariant::Aligned);
    check(&own, 16, 16, true);
    check(&own, 16, 16, false);
    check_timed(&own, 16, 16, true, 1 << 40);
    check_timed(&aligned, 16, 16, true, 1 << 40);
    check(&own, 18, 16, true);
    let (own_general, _) = variant(GridVariant::Own, BodyVariant::General);
    check(&own_general, 18, 18, true);
    check(&own_general, 18, 18, false);
}

#[test]
fn translated_kernels_stop_at_the_time_limit() {
    let l = Launcher::new(4 * 4096);
    let limit = std::time::Duration::from_millis(50);
    // spin: fuel for ages, 50 ms of time. The first thread runs out of its
    // time and sets `stop`; the block runner starts no thread after that.
    let spin = translated(7, "spin");
    let started = std::time::Instant::now();
    l.run_limited(
        &spin,
        config(1000, 100),
        &[],
        0,
        u64::MAX,
        limit.as_nanos() as u64,
        false,
    )
    .expect("a trap is no failed launch");
    let took = started.elapsed();
    assert_eq!(l.status().0, KernelTrap::TimeLimit.code());
    assert_eq!(l.stop_word(), 1, "the launch was stopped");
    assert!(took >= limit, "stopped after {took:?}, before the limit");
    assert!(took < std::time::Duration::from_secs(5), "took {took:?}");

    // Stopped before it ran (as by a thread out of time): no thread runs.
    let saxpy = translated(4, "saxpy");
    let n = 4096;
    l.write_u32s(0, std::iter::repeat_n(7, n));
    let args = [KernelParam::F32(2.0), i32p(0), i32p(0), i32p(n as u32)];
    l.run_limited(&saxpy, config(n, 128), &args, 4 * n, 1, u64::MAX, true)
        .expect("a stopped launch is no failed launch");
    assert!(l.read_u32s(0, n).iter().all(|&v| v == 7), "nothing ran");

    // No limit: the same launch runs.
    l.run(&saxpy, config(n, 128), &args, 4 * n, 1)
        .expect("saxpy");
    assert_eq!(l.status(), (0, 0));
    assert_eq!(l.stop_word(), 0);
    let want = (2.0f32 * f32::from_bits(7) + f32::from_bits(7)).to_bits();
    assert!(l.read_u32s(0, n).iter().all(|&v| v == want));
}

/// Loops in the shapes people and C compilers write, which the translator
/// versions (`core/src/lower/translate/version.rs`): a matmul's inner loop
/// counted up with its test at the top (`k >= n` leaves), and zig cc's
/// `for (int i = from; i < to; i += 3) y[i] *= 2` (tested at the bottom on
/// `i + 3 <s to`, beside a pointer stepped by 12).
const LOOPS: &str = r#"(module
  (import "tensorwasm_kernel" "thread_idx_x" (func $tid (result i32)))
  (import "tensorwasm_kernel" "block_idx_x" (func $bid (result i32)))
  (import "tensorwasm_kernel" "block_dim_x" (func $bdim (result i32)))
  (memory (export "memory") 1)
  (func (export "matmul") (param $a i32) (param $b i32) (param $c i32) (param $n i32)
    (local $t i32) (local $row i32) (local $col i32) (local $k i32) (local $acc f32)
    (local.set $t (i32.add (i32.mul (call $bid) (call $bdim)) (call $tid)))
    (if (i32.ge_u (local.get $t) (i32.mul (local.get $n) (local.get $n)))
      (then (return)))
    (local.set $row (i32.div_u (local.get $t) (local.get $n)))
    (local.set $col (i32.rem_u (local.get $t) (local.get $n)))
    (block $done
      (loop $next
        (br_if $done (i32.ge_u (local.get $k) (local.get $n)))
        (local.set $acc (f32.add (local.get $acc)
          (f32.mul
            (f32.load (i32.add (local.get $a)
              (i32.shl (i32.add (i32.mul (local.get $row) (local.get $n)) (local.get $k)) (i32.const 2))))
            (f32.load (i32.add (local.get $b)
              (i32.shl (i32.add (i32.mul (local.get $k) (local.get $n)) (local.get $col)) (i32.const 2)))))))
        (local.set $k (i32.add (local.get $k) (i32.const 1)))
        (br $next)))
    (f32.store (i32.add (local.get $c) (i32.shl (local.get $t) (i32.const 2))) (local.get $acc)))
  (func (export "strided") (param i32 i32 i32) (local f32)
    block
      local.get 1
      local.get 2
      i32.ge_s
      br_if 0
      local.get 0
      local.get 1
      i32.const 2
      i32.shl
      i32.add
      local.set 0
      loop
        local.get 0
        local.get 0
        f32.load
        local.tee 3
        local.get 3
        f32.add
        f32.store
        local.get 0
        i32.const 12
        i32.add
        local.set 0
        local.get 1
        i32.const 3
        i32.add
        local.tee 1
        local.get 2
        i32.lt_s
        br_if 0
      end
    end))"#;

/// [`LOOPS`]' export `name`, translated and lowered for the CPU.
fn loop_kernel(name: &str) -> CpuKernel {
    let wasm = wat::parse_str(LOOPS).expect("the WAT parses");
    let index =
        tensorwasm_core::lower::translate::function_by_export(&wasm, name).expect("the export");
    let kernel = translate_kernel(&wasm, index).expect("the translator takes it");
    lower(name, (kernel.function, kernel.abi))
}

#[test]
fn versioned_loops_run_natively() {
    let mut rng = Rng::new("versioned_loops_run_natively");
    // matmul: every output as the host computes it, in the same order;
    // then `b`'s last element one past the memory's end: the threads of
    // the last column trap at the `b` load and store nothing, the others
    // store theirs.
    let n = 64usize;
    let (c_at, a_at, b_at) = (0, 32768, 131072 - 4 * n * n);
    let mem_len = 131072;
    let l = Launcher::new(mem_len);
    let a: Vec<f32> = (0..n * n).map(|_| rng.float()).collect();
    let b: Vec<f32> = (0..n * n).map(|_| rng.float()).collect();
    l.write_u32s(a_at, a.iter().map(|v| v.to_bits()));
    l.write_u32s(b_at, b.iter().map(|v| v.to_bits()));
    let want: Vec<u32> = (0..n * n)
        .map(|t| {
            let (row, col) = (t / n, t % n);
            let mut acc = 0.0f32;
            for k in 0..n {
                acc += a[row * n + k] * b[k * n + col];
            }
            acc.to_bits()
        })
        .collect();
    let matmul = loop_kernel("matmul");
    let args = [a_at, b_at, c_at, n].map(|v| i32p(v as u32));
    for cut in [0, 4] {
        l.write_u32s(c_at, std::iter::repeat_n(0x7ead_beef, n * n));
        l.run(&matmul, config(n * n, 128), &args, mem_len - cut, 1 << 20)
            .expect("matmul");
        let got = l.read_u32s(c_at, n * n);
        let (code, offset) = l.status();
        for t in 0..n * n {
            let trapped = cut > 0 && t % n == n - 1;
            let expect = if trapped { 0x7ead_beef } else { want[t] };
            assert_eq!(got[t], expect, "cut {cut}: c[{t}]");
        }
        if cut == 0 {
            assert_eq!((code, offset), (0, 0));
        } else {
            assert_eq!(code, KernelTrap::HeapOutOfBounds.code());
            assert!(offset > 0, "the b load's offset, got {offset}");
        }
    }

    // strided: y[i] *= 2 for i = from, from + 3, ... below to, one thread;
    // a `to` whose last element is past the memory's end traps after the
    // passes before it.
    let strided = loop_kernel("strided");
    let y: Vec<f32> = (0..8192).map(|_| rng.float()).collect();
    for (from, to, len) in [
        (5u32, 8000u32, 65536usize),
        (0, 8190, 65536),
        (1, 16385, 65536),
    ] {
        l.write_u32s(0, y.iter().map(|v| v.to_bits()));
        l.run(
            &strided,
            config(1, 1),
            &[i32p(0), i32p(from), i32p(to)],
            len,
            1 << 20,
        )
        .expect("strided");
        let got = l.read_u32s(0, 8192);
        let end = (to as usize).min(len / 4);
        for (i, &g) in got.iter().enumerate() {
            let doubled = i >= from as usize && i < end && (i - from as usize).is_multiple_of(3);
            let expect = if doubled {
                (y[i] + y[i]).to_bits()
            } else {
                y[i].to_bits()
            };
            assert_eq!(g, expect, "from {from} to {to}: y[{i}]");
        }
        let trapped = (to as usize) * 4 > len;
        assert_eq!(
            l.status().0,
            if trapped {
                KernelTrap::HeapOutOfBounds.code()
            } else {
                0
            }
        );
    }
}
