//! Cooperative kernels on the CPU target end to end: kernel CLIF built by
//! hand that calls the block's cooperative runtime checks (shared memory,
//! barriers, virtual blocks, warp operations: `docs/kernels.md`, "The GPU
//! programming model"), lowered with `CpuKernelLowerer` and launched on the
//! CPU driver, whose block runner runs each block's threads as coroutines.

#[allow(dead_code)] // the shared test generator; the rest is for other suites
mod common;

use common::Rng;
use cranelift_codegen::{
    ir::{
        AbiParam, Endianness, ExtFuncData, ExternalName, Function, InstBuilder, MemFlagsData,
        Signature, SourceLoc, StackSlotData, StackSlotKind, UserFuncName, Value, condcodes::IntCC,
        types,
    },
    isa::{CallConv, TargetFrontendConfig},
    settings,
};
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext};
use tensorwasm_core::{
    DeviceMemory, Dim3, GpuDriver, KernelParam, LaunchConfig,
    lower::{Intrinsic, KernelAbi, KernelTrap, Lowerer, RuntimeCheck, status},
};
use tensorwasm_cpu::{CpuDeviceBuffer, CpuDriver, CpuManagedBuffer};
use tensorwasm_embed::kernel::cpu::{
    CpuKernel, CpuKernelLowerer, HiddenParams, STATUS_BYTES, launch_params,
};

/// Guest address of the output array of `u32` slots.
const OUT: usize = 64;

/// What an output slot holds until a thread writes it.
const UNWRITTEN: u32 = 0xAAAA_AAAA;

// ---- Kernel CLIF ----

/// What a kernel's body gets: its Wasm parameters `out` and `input` (guest
/// addresses of `u32` arrays) and the hidden ones it uses.
struct Params {
    out: Value,
    input: Value,
    mem_base: Value,
    fuel: Value,
    intrinsics: Vec<Value>,
}

impl Params {
    fn intrinsic(&self, which: Intrinsic) -> Value {
        self.intrinsics[which.index()]
    }
}

/// A kernel `(out: i32, input: i32)` whose entry block `body` fills (it
/// must end every block it makes), lowered for the CPU.
fn kernel(name: &str, body: impl FnOnce(&mut FunctionBuilder, &Params)) -> CpuKernel {
    let abi = KernelAbi { wasm_params: 2 };
    let mut sig = Signature::new(CallConv::SystemV);
    sig.params.extend([AbiParam::new(types::I32); 2]);
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
        out: all[0],
        input: all[1],
        mem_base: all[abi.hidden(KernelAbi::MEM_BASE)],
        fuel: all[abi.hidden(KernelAbi::FUEL)],
        intrinsics: all[abi.hidden(KernelAbi::INTRINSICS)..].to_vec(),
    };
    body(&mut b, &params);
    b.seal_all_blocks();
    b.finalize(frontend_config());
    CpuKernelLowerer
        .lower(name, &function, abi)
        .unwrap_or_else(|e| panic!("lowering `{name}`: {e}\n{}", function.display()))
}

/// The host's frontend settings.
fn frontend_config() -> TargetFrontendConfig {
    let flags = settings::Flags::new(settings::builder());
    cranelift_native::builder()
        .expect("a host ISA")
        .finish(flags)
        .expect("host ISA flags")
        .frontend_config()
}

/// A call of runtime check `check`, as the translator emits it; its
/// result, if it has one.
fn call(b: &mut FunctionBuilder, check: RuntimeCheck, args: &[Value]) -> Option<Value> {
    let signature = b.import_signature(check.signature());
    let name = b.func.declare_imported_user_function(check.external_name());
    let callee = b.import_function(ExtFuncData {
        name: ExternalName::user(name),
        signature,
        colocated: false,
        patchable: false,
    });
    let inst = b.ins().call(callee, args);
    b.inst_results(inst).first().copied()
}

/// A call of a check with a result.
fn read(b: &mut FunctionBuilder, check: RuntimeCheck, args: &[Value]) -> Value {
    call(b, check, args).expect("a result")
}

/// Threads in the block: `nx * ny * nz`.
fn block_threads(b: &mut FunctionBuilder, p: &Params) -> Value {
    let xy = b.ins().imul(
        p.intrinsic(Intrinsic::BlockDimX),
        p.intrinsic(Intrinsic::BlockDimY),
    );
    b.ins().imul(xy, p.intrinsic(Intrinsic::BlockDimZ))
}

/// The thread's linear id in its block: `x + nx * (y + ny * z)`.
fn linear_id(b: &mut FunctionBuilder, p: &Params) -> Value {
    let ny_z = b.ins().imul(
        p.intrinsic(Intrinsic::BlockDimY),
        p.intrinsic(Intrinsic::ThreadIdxZ),
    );
    let row = b.ins().iadd(ny_z, p.intrinsic(Intrinsic::ThreadIdxY));
    let rows = b.ins().imul(p.intrinsic(Intrinsic::BlockDimX), row);
    b.ins().iadd(rows, p.intrinsic(Intrinsic::ThreadIdxX))
}

/// The thread's id in the (1-D) grid: `blockIdx.x * threads + linear id`.
fn global_id(b: &mut FunctionBuilder, p: &Params) -> Value {
    let threads = block_threads(b, p);
    let first = b.ins().imul(p.intrinsic(Intrinsic::BlockIdxX), threads);
    let t = linear_id(b, p);
    b.ins().iadd(first, t)
}

/// The host address of `u32` slot `i` of the guest array at `array` (the
/// tests size guest memory for every slot they touch).
fn slot(b: &mut FunctionBuilder, p: &Params, array: Value, i: Value) -> Value {
    let array = b.ins().uextend(types::I64, array);
    let i = b.ins().uextend(types::I64, i);
    let offset = b.ins().ishl_imm_s(i, 2);
    let at = b.ins().iadd(array, offset);
    b.ins().iadd(p.mem_base, at)
}

fn flags() -> MemFlagsData {
    MemFlagsData::trusted().with_endianness(Endianness::Little)
}

/// `out[i] = value`.
fn put(b: &mut FunctionBuilder, p: &Params, i: Value, value: Value) {
    let at = slot(b, p, p.out, i);
    b.ins().store(flags(), value, at, 0);
}

/// `input[i]`.
fn get(b: &mut FunctionBuilder, p: &Params, i: Value) -> Value {
    let at = slot(b, p, p.input, i);
    b.ins().load(types::I32, flags(), at, 0)
}

/// The host address of `u32` slot `i` of the block's shared memory.
fn shared_slot(b: &mut FunctionBuilder, i: Value) -> Value {
    let base = read(b, RuntimeCheck::SharedBase, &[]);
    let i = b.ins().uextend(types::I64, i);
    let offset = b.ins().ishl_imm_s(i, 2);
    b.ins().iadd(base, offset)
}

fn shared_get(b: &mut FunctionBuilder, i: Value) -> Value {
    let at = shared_slot(b, i);
    b.ins().load(types::I32, flags(), at, 0)
}

fn shared_set(b: &mut FunctionBuilder, i: Value, value: Value) {
    let at = shared_slot(b, i);
    b.ins().store(flags(), value, at, 0);
}

/// `(t + 1) % n`.
fn next(b: &mut FunctionBuilder, t: Value, n: Value) -> Value {
    let t1 = b.ins().iadd_imm_s(t, 1);
    b.ins().urem(t1, n)
}

/// `if cond { then } else { otherwise }`, both falling through to what
/// follows.
fn branch(
    b: &mut FunctionBuilder,
    cond: Value,
    then: impl FnOnce(&mut FunctionBuilder),
    otherwise: impl FnOnce(&mut FunctionBuilder),
) {
    let (yes, no, join) = (b.create_block(), b.create_block(), b.create_block());
    b.ins().brif(cond, yes, &[], no, &[]);
    b.switch_to_block(yes);
    then(b);
    b.ins().jump(join, &[]);
    b.switch_to_block(no);
    otherwise(b);
    b.ins().jump(join, &[]);
    b.switch_to_block(join);
}

/// `if cond { then; return }`.
fn return_if(b: &mut FunctionBuilder, cond: Value, then: impl FnOnce(&mut FunctionBuilder)) {
    let (yes, rest) = (b.create_block(), b.create_block());
    b.ins().brif(cond, yes, &[], rest, &[]);
    b.switch_to_block(yes);
    then(b);
    b.ins().return_(&[]);
    b.switch_to_block(rest);
}

// ---- Launching ----

/// Guest memory (a managed buffer) and a status word on one CPU driver.
struct Launcher {
    driver: CpuDriver,
    memory: CpuManagedBuffer,
    status: CpuDeviceBuffer,
}

/// One launch: a 1-D grid of `grid` blocks of `block`, with `shared`
/// bytes of shared memory each, and `out_slots` output slots.
#[derive(Clone, Copy)]
struct Shape {
    grid: u32,
    block: Dim3,
    shared: u32,
    out_slots: usize,
}

impl Launcher {
    fn new() -> Launcher {
        let driver = CpuDriver::with_capacity(64 << 20).expect("CPU driver");
        let memory = driver.alloc_managed(16 << 20).expect("guest memory");
        let status = driver.alloc_device(STATUS_BYTES).expect("status word");
        Launcher {
            driver,
            memory,
            status,
        }
    }

    /// Guest address of the input array for `shape`: after the output.
    fn input_at(shape: Shape) -> usize {
        OUT + 4 * shape.out_slots + 64
    }

    /// Fills the output with [`UNWRITTEN`], writes `input`, zeroes the
    /// status word (and sets `stop` when `stopped`), runs `kernel` with
    /// `fuel` and waits; the output.
    fn run_with(
        &self,
        kernel: &CpuKernel,
        shape: Shape,
        input: &[u32],
        fuel: u64,
        stopped: bool,
    ) -> Vec<u32> {
        let d = &self.driver;
        let input_at = Self::input_at(shape);
        self.write_u32s(OUT, vec![UNWRITTEN; shape.out_slots]);
        self.write_u32s(input_at, input.to_vec());
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
        let params = launch_params(
            &[
                KernelParam::I32(OUT as i32),
                KernelParam::I32(input_at as i32),
            ],
            HiddenParams {
                mem_base: self.memory.device_ptr(),
                mem_len: self.memory.len() as u64,
                status: self.status.device_ptr(),
                fuel,
                time_limit: u64::MAX,
                grid: (shape.grid, 1, 1),
            },
        );
        let config = LaunchConfig {
            grid: Dim3::linear(shape.grid),
            block: shape.block,
            shared_mem_bytes: shape.shared,
        };
        // SAFETY: guest memory is all of `self.memory` and the status word
        // is `self.status`; both outlive the launch, which ends at the
        // synchronize below.
        unsafe { d.launch(&stream, &function, &config, &params) }.expect("launch");
        d.stream_synchronize(&stream).expect("the launch completes");
        self.read_u32s(OUT, shape.out_slots)
    }

    fn run(&self, kernel: &CpuKernel, shape: Shape, input: &[u32]) -> Vec<u32> {
        self.run_with(kernel, shape, input, u64::MAX, false)
    }

    fn write_u32s(&self, at: usize, values: Vec<u32>) {
        let bytes: Vec<u8> = values.into_iter().flat_map(u32::to_le_bytes).collect();
        let range = self.memory.range(at, bytes.len()).expect("in guest memory");
        self.driver.copy_to_device(range, &bytes).expect("write");
    }

    fn read_u32s(&self, at: usize, n: usize) -> Vec<u32> {
        let mut bytes = vec![0; 4 * n];
        let range = self.memory.range(at, bytes.len()).expect("in guest memory");
        self.driver
            .copy_from_device(&mut bytes, range)
            .expect("read");
        bytes
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes(c.try_into().expect("4 bytes")))
            .collect()
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
}

fn volume(d: Dim3) -> usize {
    (d.x * d.y * d.z) as usize
}

// ---- Barriers and shared memory ----

/// `rotate`: each thread writes `shared[t] = 7t + 1 + 1000 * blockIdx`,
/// waits at a barrier, then writes the next thread's slot to `out[g]`, and
/// the block's shared size to `out[threads + g]`. Without the barrier a
/// thread would read its neighbour's slot before the neighbour ran.
fn rotate() -> CpuKernel {
    kernel("rotate", |b, p| {
        let t = linear_id(b, p);
        let n = block_threads(b, p);
        let g = global_id(b, p);
        let mine = b.ins().imul_imm_s(t, 7);
        let mine = b.ins().iadd_imm_s(mine, 1);
        let block = b.ins().imul_imm_s(p.intrinsic(Intrinsic::BlockIdxX), 1000);
        let mine = b.ins().iadd(mine, block);
        shared_set(b, t, mine);
        call(b, RuntimeCheck::Barrier, &[]);
        let neighbour = next(b, t, n);
        let seen = shared_get(b, neighbour);
        put(b, p, g, seen);
        let size = read(b, RuntimeCheck::SharedSize, &[]);
        let size = b.ins().ireduce(types::I32, size);
        let grid_threads = b.ins().imul(n, p.intrinsic(Intrinsic::GridDimX));
        let at = b.ins().iadd(grid_threads, g);
        put(b, p, at, size);
        b.ins().return_(&[]);
    })
}

#[test]
fn a_barrier_orders_shared_writes_before_reads() {
    let kernel = rotate();
    let l = Launcher::new();
    for (grid, block) in [
        (3, Dim3 { x: 8, y: 4, z: 2 }),
        (2, Dim3 { x: 32, y: 8, z: 4 }),
        (2, Dim3::linear(1)),
        (4, Dim3::linear(45)),
    ] {
        let n = volume(block);
        let total = n * grid as usize;
        let shared = (4 * n as u32).next_multiple_of(16) + 16;
        let shape = Shape {
            grid,
            block,
            shared,
            out_slots: 2 * total,
        };
        let out = l.run(&kernel, shape, &[]);
        assert_eq!(l.status(), (0, 0), "{block:?}");
        for g in 0..total {
            let (bx, t) = (g / n, g % n);
            let want = 7 * ((t + 1) % n) as u32 + 1 + 1000 * bx as u32;
            assert_eq!(out[g], want, "block {block:?}, thread {g}");
            assert_eq!(out[total + g], shared, "shared size, thread {g}");
        }
    }
}

#[test]
fn threads_that_return_early_do_not_hold_the_barrier() {
    // Threads t % 3 == 0 write 0xDEAD and return; the others write
    // shared[t] = t + 1, wait at one of two barriers (odd and even
    // threads at different calls, which match each other), then read
    // shared[(t + 1) % n].
    let kernel = kernel("early", |b, p| {
        let t = linear_id(b, p);
        let n = block_threads(b, p);
        let g = global_id(b, p);
        let third = b.ins().urem_imm_u(t, 3);
        let leaves = b.ins().icmp_imm_u(IntCC::Equal, third, 0);
        return_if(b, leaves, |b| {
            let dead = b.ins().iconst(types::I32, 0xDEAD);
            put(b, p, g, dead);
        });
        let mine = b.ins().iadd_imm_s(t, 1);
        shared_set(b, t, mine);
        let odd = b.ins().band_imm_u(t, 1);
        branch(
            b,
            odd,
            |b| {
                call(b, RuntimeCheck::Barrier, &[]);
            },
            |b| {
                call(b, RuntimeCheck::Barrier, &[]);
            },
        );
        let neighbour = next(b, t, n);
        let seen = shared_get(b, neighbour);
        put(b, p, g, seen);
        b.ins().return_(&[]);
    });
    let l = Launcher::new();
    let (grid, n) = (2, 100);
    let shape = Shape {
        grid,
        block: Dim3::linear(n as u32),
        shared: 4 * n as u32,
        out_slots: grid as usize * n,
    };
    let out = l.run(&kernel, shape, &[]);
    for (g, &v) in out.iter().enumerate() {
        let t = g % n;
        let s = (t + 1) % n;
        let want = match (t % 3, s % 3) {
            (0, _) => 0xDEAD,
            (_, 0) => 0,
            _ => s as u32 + 1,
        };
        assert_eq!(v, want, "thread {g}");
    }
}

#[test]
fn a_thread_that_traps_before_a_barrier_ends_alone() {
    // Threads t % 4 == 1 hit `unreachable` at 0x42 before the barrier; the
    // others rotate their shared slots as in `rotate`.
    let kernel = kernel("trap", |b, p| {
        let t = linear_id(b, p);
        let n = block_threads(b, p);
        let g = global_id(b, p);
        let quarter = b.ins().urem_imm_u(t, 4);
        let traps = b.ins().icmp_imm_u(IntCC::Equal, quarter, 1);
        b.set_srcloc(SourceLoc::new(0x42));
        b.ins().trapnz(traps, KernelTrap::Unreachable.trap_code());
        b.set_srcloc(SourceLoc::default());
        let mine = b.ins().iadd_imm_s(t, 1);
        shared_set(b, t, mine);
        call(b, RuntimeCheck::Barrier, &[]);
        let neighbour = next(b, t, n);
        let seen = shared_get(b, neighbour);
        put(b, p, g, seen);
        b.ins().return_(&[]);
    });
    let l = Launcher::new();
    let (grid, n) = (2, 64);
    let shape = Shape {
        grid,
        block: Dim3::linear(n as u32),
        shared: 4 * n as u32,
        out_slots: grid as usize * n,
    };
    let out = l.run(&kernel, shape, &[]);
    assert_eq!(l.status(), (KernelTrap::Unreachable.code(), 0x42));
    for (g, &v) in out.iter().enumerate() {
        let t = g % n;
        let s = (t + 1) % n;
        let want = match (t % 4, s % 4) {
            (1, _) => UNWRITTEN,
            (_, 1) => 0,
            _ => s as u32 + 1,
        };
        assert_eq!(v, want, "thread {g}");
    }
}

#[test]
fn an_endless_loop_around_a_barrier_runs_out_of_fuel() {
    // Threads t < 10 loop forever around a barrier, with the translator's
    // fuel check at the loop header (0x99); the others write out[g] = t
    // and return. The block ends once the looping threads are out of fuel.
    let kernel = kernel("spin", |b, p| {
        let t = linear_id(b, p);
        let g = global_id(b, p);
        let fast = b.ins().icmp_imm_u(IntCC::UnsignedGreaterThanOrEqual, t, 10);
        return_if(b, fast, |b| put(b, p, g, t));
        let fuel = b.declare_var(types::I64);
        b.def_var(fuel, p.fuel);
        let header = b.create_block();
        b.ins().jump(header, &[]);
        b.switch_to_block(header);
        let left = b.use_var(fuel);
        b.set_srcloc(SourceLoc::new(0x99));
        let empty = b.ins().icmp_imm_s(IntCC::Equal, left, 0);
        b.ins().trapnz(empty, KernelTrap::OutOfFuel.trap_code());
        b.set_srcloc(SourceLoc::default());
        let left = b.ins().iadd_imm_s(left, -1);
        b.def_var(fuel, left);
        call(b, RuntimeCheck::Barrier, &[]);
        b.ins().jump(header, &[]);
    });
    let l = Launcher::new();
    let n = 40;
    let shape = Shape {
        grid: 3,
        block: Dim3::linear(n),
        shared: 0,
        out_slots: 3 * n as usize,
    };
    let out = l.run_with(&kernel, shape, &[], 1000, false);
    assert_eq!(l.status(), (KernelTrap::OutOfFuel.code(), 0x99));
    for (g, &v) in out.iter().enumerate() {
        let t = (g % n as usize) as u32;
        assert_eq!(v, if t < 10 { UNWRITTEN } else { t }, "thread {g}");
    }
}

#[test]
fn a_stopped_launch_starts_no_cooperative_thread() {
    let l = Launcher::new();
    let shape = Shape {
        grid: 2,
        block: Dim3::linear(64),
        shared: 256,
        out_slots: 256,
    };
    let out = l.run_with(&rotate(), shape, &[], u64::MAX, true);
    assert!(out.iter().all(|&v| v == UNWRITTEN));
}

#[test]
fn shared_memory_is_zero_at_each_virtual_block() {
    // The kernel runs VIRTUAL virtual blocks itself, as the translator's
    // loop does: block_begin; seen = shared[t] (must be 0); shared[t] =
    // 1000 (vb + 1) + t + 1; even threads are done at once (marker 0xD0E),
    // odd ones wait at a barrier, which completes while the even ones wait
    // done, then read shared[t + 1]; block_done.
    const VIRTUAL: i64 = 4;
    let kernel = kernel("virtual", |b, p| {
        let t = linear_id(b, p);
        let n = block_threads(b, p);
        let vb = b.declare_var(types::I32);
        let zero = b.ins().iconst(types::I32, 0);
        b.def_var(vb, zero);
        let (header, body, exit) = (b.create_block(), b.create_block(), b.create_block());
        b.ins().jump(header, &[]);
        b.switch_to_block(header);
        let v = b.use_var(vb);
        let more = b.ins().icmp_imm_u(IntCC::UnsignedLessThan, v, VIRTUAL);
        b.ins().brif(more, body, &[], exit, &[]);
        b.switch_to_block(body);
        call(b, RuntimeCheck::BlockBegin, &[]);
        // Output slots: 2 * ((blockIdx * VIRTUAL + vb) * n + t) and + 1.
        let bv = b
            .ins()
            .imul_imm_s(p.intrinsic(Intrinsic::BlockIdxX), VIRTUAL);
        let bv = b.ins().iadd(bv, v);
        let bvn = b.ins().imul(bv, n);
        let at = b.ins().iadd(bvn, t);
        let at = b.ins().ishl_imm_s(at, 1);
        let at1 = b.ins().iadd_imm_s(at, 1);
        let seen = shared_get(b, t);
        put(b, p, at, seen);
        let v1 = b.ins().iadd_imm_s(v, 1);
        let mine = b.ins().imul_imm_s(v1, 1000);
        let mine = b.ins().iadd(mine, t);
        let mine = b.ins().iadd_imm_s(mine, 1);
        shared_set(b, t, mine);
        let odd = b.ins().band_imm_u(t, 1);
        branch(
            b,
            odd,
            |b| {
                call(b, RuntimeCheck::Barrier, &[]);
                let neighbour = next(b, t, n);
                let value = shared_get(b, neighbour);
                put(b, p, at1, value);
                call(b, RuntimeCheck::BlockDone, &[]);
            },
            |b| {
                let marker = b.ins().iconst(types::I32, 0xD0E);
                put(b, p, at1, marker);
                call(b, RuntimeCheck::BlockDone, &[]);
            },
        );
        let v = b.use_var(vb);
        let v1 = b.ins().iadd_imm_s(v, 1);
        b.def_var(vb, v1);
        b.ins().jump(header, &[]);
        b.switch_to_block(exit);
        b.ins().return_(&[]);
    });
    let l = Launcher::new();
    let (grid, n) = (2usize, 64usize);
    let shape = Shape {
        grid: grid as u32,
        block: Dim3::linear(n as u32),
        shared: 4 * n as u32 + 16,
        out_slots: 2 * grid * VIRTUAL as usize * n,
    };
    let out = l.run(&kernel, shape, &[]);
    assert_eq!(l.status(), (0, 0));
    for bx in 0..grid {
        for vb in 0..VIRTUAL as usize {
            for t in 0..n {
                let at = 2 * ((bx * VIRTUAL as usize + vb) * n + t);
                let what = format!("block {bx}, virtual block {vb}, thread {t}");
                assert_eq!(out[at], 0, "{what}: shared[t] at the start");
                let s = (t + 1) % n;
                let want = if t % 2 == 1 {
                    1000 * (vb as u32 + 1) + s as u32 + 1
                } else {
                    0xD0E
                };
                assert_eq!(out[at + 1], want, "{what}");
            }
        }
    }
}

#[test]
fn a_large_stack_frame_fits_each_thread() {
    // Each thread keeps 512 KiB in a stack slot (more than the stacks'
    // slack) across a barrier: its first and last words.
    const SLOT: u32 = 512 << 10;
    let kernel = kernel("frame", |b, p| {
        let slot =
            b.create_sized_stack_slot(StackSlotData::new(StackSlotKind::ExplicitSlot, SLOT, 4));
        let t = linear_id(b, p);
        let g = global_id(b, p);
        let last = b.ins().imul_imm_s(t, 3);
        b.ins().stack_store(types::I64, t, slot, 0);
        b.ins()
            .stack_store(types::I64, last, slot, (SLOT - 4) as i32);
        call(b, RuntimeCheck::Barrier, &[]);
        let first = b.ins().stack_load(types::I64, types::I32, slot, 0);
        let last = b
            .ins()
            .stack_load(types::I64, types::I32, slot, (SLOT - 4) as i32);
        let sum = b.ins().iadd(first, last);
        put(b, p, g, sum);
        b.ins().return_(&[]);
    });
    let l = Launcher::new();
    let shape = Shape {
        grid: 2,
        block: Dim3::linear(48),
        shared: 0,
        out_slots: 96,
    };
    let out = l.run(&kernel, shape, &[]);
    for (g, &v) in out.iter().enumerate() {
        assert_eq!(v, 4 * (g % 48) as u32, "thread {g}");
    }
}

// ---- Warp operations ----

/// How a warp operation's second argument is chosen.
#[derive(Clone, Copy, Debug)]
enum Arg {
    /// The lane's `x` from the input.
    Lane,
    /// A constant.
    Const(i32),
    /// None: a vote or the lane id.
    None,
}

/// The operations the warp kernels run, each at its own call site.
const WARP_OPS: [(RuntimeCheck, Arg); 12] = [
    (RuntimeCheck::ShflIdx, Arg::Lane),
    (RuntimeCheck::ShflUp, Arg::Lane),
    (RuntimeCheck::ShflDown, Arg::Lane),
    (RuntimeCheck::ShflXor, Arg::Lane),
    (RuntimeCheck::ShflIdx, Arg::Const(3)),
    (RuntimeCheck::ShflUp, Arg::Const(1)),
    (RuntimeCheck::ShflDown, Arg::Const(1)),
    (RuntimeCheck::ShflXor, Arg::Const(16)),
    (RuntimeCheck::Ballot, Arg::None),
    (RuntimeCheck::VoteAny, Arg::None),
    (RuntimeCheck::VoteAll, Arg::None),
    (RuntimeCheck::LaneId, Arg::None),
];

/// A kernel over a 1-D block of `n` threads: the lanes that take part
/// (all, or only the even ones when `even_only`: the odd ones return)
/// run every operation of [`WARP_OPS`] and write its result to
/// `out[k * n + t]`. Input: `v[t]` at 0, `x[t]` at `n`, `pred[t]` at `2n`.
fn warp_kernel(n: i64, even_only: bool) -> CpuKernel {
    kernel("warp", |b, p| {
        let t = linear_id(b, p);
        if even_only {
            let odd = b.ins().band_imm_u(t, 1);
            return_if(b, odd, |_| {});
        }
        let v = get(b, p, t);
        let at_x = b.ins().iadd_imm_s(t, n);
        let x = get(b, p, at_x);
        let at_pred = b.ins().iadd_imm_s(t, 2 * n);
        let pred = get(b, p, at_pred);
        for (k, (op, arg)) in WARP_OPS.into_iter().enumerate() {
            let site = b.ins().iconst(types::I32, k as i64 + 100);
            let result = match arg {
                Arg::Lane => read(b, op, &[v, x, site]),
                Arg::Const(c) => {
                    let c = b.ins().iconst(types::I32, i64::from(c));
                    read(b, op, &[v, c, site])
                }
                Arg::None if op == RuntimeCheck::LaneId => read(b, op, &[]),
                Arg::None => read(b, op, &[pred, site]),
            };
            let at = b.ins().iadd_imm_s(t, k as i64 * n);
            put(b, p, at, result);
        }
        b.ins().return_(&[]);
    })
}

/// The model of `docs/kernels.md`, "Warp operations", written apart from
/// the runner's: lane `lane`'s result when the lanes of `members` take
/// part.
fn model(op: RuntimeCheck, members: &[bool; 32], v: &[i32; 32], x: &[i32; 32], lane: usize) -> i32 {
    let own = v[lane];
    let shifted = |src: i64| {
        let ok = (0..32).contains(&src) && members[src as usize];
        if ok { v[src as usize] } else { own }
    };
    let d = i64::from(x[lane] as u32);
    let preds = || (0..32).filter(|&i| members[i]).map(|i| v[i] != 0);
    match op {
        RuntimeCheck::ShflIdx => shifted(i64::from(x[lane] & 31)),
        RuntimeCheck::ShflUp => shifted(lane as i64 - d),
        RuntimeCheck::ShflDown => shifted(lane as i64 + d),
        RuntimeCheck::ShflXor if d < 32 => shifted(lane as i64 ^ d),
        RuntimeCheck::ShflXor => own,
        RuntimeCheck::Ballot => (0..32)
            .filter(|&i| members[i] && v[i] != 0)
            .map(|i| 1u32 << i)
            .sum::<u32>() as i32,
        RuntimeCheck::VoteAny => preds().any(|p| p) as i32,
        RuntimeCheck::VoteAll => preds().all(|p| p) as i32,
        RuntimeCheck::LaneId => lane as i32,
        other => panic!("{other:?} is no warp operation"),
    }
}

/// Inputs for `n` threads: random values; shuffle arguments from a list
/// of edge values and random ones; predicates mixed in warp 0, all
/// nonzero in warp 1, all zero in warp 2.
fn warp_input(rng: &mut Rng, n: usize) -> Vec<u32> {
    let edges = [
        0,
        1,
        2,
        15,
        16,
        31,
        32,
        33,
        63,
        -1,
        -2,
        -31,
        -32,
        i32::MIN,
        i32::MAX,
    ];
    let mut input: Vec<u32> = (0..n).map(|_| rng.next_u64() as u32).collect();
    for _ in 0..n {
        let pick = rng.below(edges.len() as u64 + 8) as usize;
        let random = rng.next_u64() as i32;
        input.push(edges.get(pick).copied().unwrap_or(random) as u32);
    }
    for t in 0..n {
        input.push(match t / 32 {
            0 => [0, 1, u32::MAX, 0x8000_0000][rng.below(4) as usize],
            1 => rng.next_u64() as u32 | 1,
            _ => 0,
        });
    }
    input
}

fn check_warp_ops(even_only: bool) {
    let mut rng = Rng::new(&format!(
        "warp_shuffles_and_votes_match_the_model (even only: {even_only})"
    ));
    let n = 96;
    let kernel = warp_kernel(n as i64, even_only);
    let input = warp_input(&mut rng, n);
    let l = Launcher::new();
    let shape = Shape {
        grid: 1,
        block: Dim3::linear(n as u32),
        shared: 0,
        out_slots: WARP_OPS.len() * n,
    };
    let out = l.run(&kernel, shape, &input);
    assert_eq!(l.status(), (0, 0));
    let result = |k: usize, t: usize| out[k * n + t] as i32;
    for warp in 0..n / 32 {
        let lanes = warp * 32..warp * 32 + 32;
        let members: [bool; 32] = std::array::from_fn(|lane| !even_only || lane % 2 == 0);
        let x: [i32; 32] = std::array::from_fn(|lane| input[n + warp * 32 + lane] as i32);
        for (k, (op, arg)) in WARP_OPS.into_iter().enumerate() {
            let v: [i32; 32] = std::array::from_fn(|lane| {
                let t = warp * 32 + lane;
                let at = if matches!(arg, Arg::None) {
                    2 * n + t
                } else {
                    t
                };
                input[at] as i32
            });
            let x = match arg {
                Arg::Const(c) => [c; 32],
                _ => x,
            };
            for (lane, t) in lanes.clone().enumerate() {
                let want = if members[lane] {
                    model(op, &members, &v, &x, lane)
                } else {
                    UNWRITTEN as i32
                };
                assert_eq!(result(k, t), want, "{op:?} ({arg:?}), thread {t}");
            }
        }
    }
    // Edge values, by hand.
    let v = |t: usize| input[t] as i32;
    let (up1, down1, xor16) = (5, 6, 7);
    if even_only {
        // An odd source lane takes no part: the lane's own value.
        assert_eq!(result(up1, 2), v(2));
        assert_eq!(result(xor16, 4), v(20));
    } else {
        assert_eq!(result(up1, 0), v(0), "no lane below 0");
        assert_eq!(result(up1, 33), v(32));
        assert_eq!(result(down1, 31), v(31), "no lane past 31");
        assert_eq!(result(down1, 32), v(33));
        assert_eq!(result(xor16, 5), v(21));
    }
    let (any, all) = (9, 10);
    assert_eq!((result(any, 32), result(all, 32)), (1, 1), "warp 1");
    assert_eq!((result(any, 64), result(all, 64)), (0, 0), "warp 2");
}

#[test]
fn warp_shuffles_and_votes_match_the_model() {
    check_warp_ops(false);
}

#[test]
fn warp_operations_of_even_lanes_only_leave_the_odd_ones_out() {
    check_warp_ops(true);
}

#[test]
fn lanes_at_different_sites_take_part_in_different_operations() {
    // Even lanes: shfl_idx(v, 0) at site 1; odd lanes: shfl_idx(v, 1) at
    // site 2 and ballot(1) at site 3. Each group is its own operation.
    let kernel = kernel("sites", |b, p| {
        let t = linear_id(b, p);
        let v = get(b, p, t);
        let odd = b.ins().band_imm_u(t, 1);
        let result = b.declare_var(types::I32);
        let mask = b.declare_var(types::I32);
        branch(
            b,
            odd,
            |b| {
                let (one, site) = (b.ins().iconst(types::I32, 1), b.ins().iconst(types::I32, 2));
                let r = read(b, RuntimeCheck::ShflIdx, &[v, one, site]);
                b.def_var(result, r);
                let site = b.ins().iconst(types::I32, 3);
                let m = read(b, RuntimeCheck::Ballot, &[one, site]);
                b.def_var(mask, m);
            },
            |b| {
                let (zero, site) = (b.ins().iconst(types::I32, 0), b.ins().iconst(types::I32, 1));
                let r = read(b, RuntimeCheck::ShflIdx, &[v, zero, site]);
                b.def_var(result, r);
                b.def_var(mask, zero);
            },
        );
        let r = b.use_var(result);
        put(b, p, t, r);
        let m = b.use_var(mask);
        let at = b.ins().iadd_imm_s(t, 64);
        put(b, p, at, m);
        b.ins().return_(&[]);
    });
    let mut rng = Rng::new("lanes_at_different_sites_take_part_in_different_operations");
    let input: Vec<u32> = (0..64).map(|_| rng.next_u64() as u32).collect();
    let l = Launcher::new();
    let shape = Shape {
        grid: 1,
        block: Dim3::linear(64),
        shared: 0,
        out_slots: 128,
    };
    let out = l.run(&kernel, shape, &input);
    for t in 0..64 {
        let source = t / 32 * 32 + t % 2;
        assert_eq!(out[t], input[source], "thread {t}");
        let mask = if t % 2 == 1 { 0xAAAA_AAAA } else { 0 };
        assert_eq!(out[64 + t], mask, "ballot, thread {t}");
    }
}
