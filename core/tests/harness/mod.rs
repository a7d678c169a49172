//! The differential harness of the translator's tests: a kernel run by
//! wasmtime on the CPU (the reference) and as its translated CLIF in
//! Cranelift's interpreter, on the same memory and arguments.
//!
//! The interpreter runs the CLIF through a `State` of our own (its stock
//! one has no memory but the stack): the guest memory sits at a nonzero
//! base in the interpreter's address space, so a kernel that forgot
//! `mem_base` would read the wrong bytes. Our own step loop also tells
//! which instruction trapped, hence its source location; a native JIT
//! would need signal handling for that. It also plays the host's part in
//! the launch's time limit: the kernel's calls of the runtime checks
//! (`RuntimeCheck`) are answered by the step loop from a model of the
//! status word, with the interpreter's step count as the clock.
//!
//! A differential test runs two kernels per launch ([`Kernels`]): the one
//! for every launch (`translate_kernel`) and the variant the host would
//! launch for it (`docs/kernels.md`, "Kernel variants"), which does not
//! test the host's choice itself.

use std::sync::OnceLock;

use Ty::{F32, F64, I32, I64};
use cranelift_codegen::data_value::DataValue;
use cranelift_codegen::ir::immediates::{Ieee32, Ieee64};
use cranelift_codegen::ir::{
    ExternalName, FuncRef, Function, GlobalValue, InstructionData, MemFlagsData, Opcode, StackSlot,
    Type,
};
use cranelift_codegen::settings::{self, Flags};
use cranelift_interpreter::address::{Address, AddressRegion, AddressSize};
use cranelift_interpreter::frame::Frame;
use cranelift_interpreter::instruction::DfgInstructionContext;
use cranelift_interpreter::interpreter::LibCallHandler;
use cranelift_interpreter::state::{InterpreterFunctionRef, MemoryError, State};
use cranelift_interpreter::step::{ControlFlow, CraneliftTrap, step};
use tensorwasm_core::lower::translate::{
    BodyVariant, GridVariant, KernelLimits, KernelVariant, TranslatedKernel, translate_kernel,
    translate_kernel_variant,
};
use tensorwasm_core::lower::{INTRINSIC_MODULE, Intrinsic, KernelAbi, KernelTrap, RuntimeCheck};
use wasmparser::{Operator, Parser, Payload};

// ---------------------------------------------------------------------------
// Random inputs and edge values
// ---------------------------------------------------------------------------

/// splitmix64: small, and the same sequence on every host.
pub struct Rng(u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// The run's seed: `TRANSLATE_SEED`, else the clock; printed either way.
pub fn seed() -> u64 {
    static SEED: OnceLock<u64> = OnceLock::new();
    *SEED.get_or_init(|| {
        let seed = std::env::var("TRANSLATE_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_nanos() as u64)
                    .unwrap_or(1)
            });
        eprintln!("translate tests: seed {seed} (TRANSLATE_SEED={seed} repeats this run)");
        seed
    })
}

pub fn rng(salt: &str) -> Rng {
    let mut h = seed();
    for b in salt.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
    }
    Rng(h)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ty {
    I32,
    I64,
    F32,
    F64,
}

impl Ty {
    pub fn name(self) -> &'static str {
        match self {
            Ty::I32 => "i32",
            Ty::I64 => "i64",
            Ty::F32 => "f32",
            Ty::F64 => "f64",
        }
    }

    pub fn bytes(self) -> usize {
        match self {
            Ty::I32 | Ty::F32 => 4,
            Ty::I64 | Ty::F64 => 8,
        }
    }
}

/// Edge values, as bit patterns: zeros, signs, extremes, NaNs, infinities,
/// shift counts around the widths, and the bounds of every `trunc`.
pub fn edges(ty: Ty) -> Vec<u64> {
    let i32s: [i32; 17] = [
        0,
        1,
        -1,
        2,
        -2,
        i32::MIN,
        i32::MAX,
        i32::MIN + 1,
        31,
        32,
        33,
        63,
        64,
        0x80,
        0xff,
        0x8000,
        0xffff,
    ];
    let i64s: [i64; 17] = [
        0,
        1,
        -1,
        2,
        -2,
        i64::MIN,
        i64::MAX,
        i64::MIN + 1,
        31,
        32,
        33,
        63,
        64,
        0x8000_0000,
        0xffff_ffff,
        0x1_0000_0000,
        -0x8000_0000,
    ];
    let f32s: [f32; 24] = [
        0.0,
        -0.0,
        1.0,
        -1.0,
        0.5,
        -0.5,
        1.5,
        2.5,
        -2.5,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::MAX,
        f32::MIN_POSITIVE,
        1e-45,
        2147483648.0,
        2147483520.0,
        -2147483648.0,
        -2147483904.0,
        4294967296.0,
        4294967040.0,
        9223372036854775808.0,
        9223371487098961920.0,
        -9223372036854775808.0,
        18446744073709551616.0,
    ];
    let f64s: [f64; 28] = [
        0.0,
        -0.0,
        1.0,
        -1.0,
        0.5,
        -0.5,
        1.5,
        2.5,
        -2.5,
        -0.9,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::MAX,
        f64::MIN_POSITIVE,
        5e-324,
        2147483647.0,
        2147483647.9,
        2147483648.0,
        -2147483648.0,
        -2147483648.9,
        -2147483649.0,
        4294967295.0,
        4294967295.9,
        4294967296.0,
        9223372036854775808.0,
        9223372036854774784.0,
        -9223372036854775808.0,
        18446744073709549568.0,
    ];
    match ty {
        Ty::I32 => i32s.iter().map(|&v| u64::from(v as u32)).collect(),
        Ty::I64 => i64s.iter().map(|&v| v as u64).collect(),
        Ty::F32 => {
            let mut v: Vec<u64> = f32s.iter().map(|f| u64::from(f.to_bits())).collect();
            // Quiet NaN, negative NaN, a signalling NaN with a payload.
            v.extend([0x7fc0_0000, 0xffc0_0000, 0x7fa0_0001]);
            v
        }
        Ty::F64 => {
            let mut v: Vec<u64> = f64s.iter().map(|f| f.to_bits()).collect();
            v.extend([
                0x7ff8_0000_0000_0000,
                0xfff8_0000_0000_0000,
                0x7ff4_0000_0000_0001,
            ]);
            v
        }
    }
}

/// A random value: an edge value, a small or scaled number, or random bits.
pub fn random_value(rng: &mut Rng, ty: Ty) -> u64 {
    match rng.below(4) {
        0 => {
            let e = edges(ty);
            e[rng.below(e.len() as u64) as usize]
        }
        1 => {
            // Magnitudes spread over the whole range.
            let x = (rng.next() as i64) >> rng.below(64);
            match ty {
                Ty::I32 => u64::from(x as i32 as u32),
                Ty::I64 => x as u64,
                Ty::F32 => u64::from((((x as f64) / 4.0) as f32).to_bits()),
                Ty::F64 => ((x as f64) / 4.0).to_bits(),
            }
        }
        _ => match ty {
            Ty::I32 | Ty::F32 => rng.next() & 0xffff_ffff,
            Ty::I64 | Ty::F64 => rng.next(),
        },
    }
}

// ---------------------------------------------------------------------------
// Running a kernel: the reference (wasmtime) and the interpreter
// ---------------------------------------------------------------------------

pub const PAGE: usize = 65536;
/// Where guest memory starts in the interpreter's address space.
pub const BASE: usize = 4096;
/// What the intrinsics return (in `Intrinsic::ALL` order).
pub const INTRINSIC_VALUES: [i32; 12] = [3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41];
/// Fuel for runs that should not run out.
pub const PLENTY: i64 = 1 << 40;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Returned,
    Trapped { trap: KernelTrap, offset: u32 },
}

/// The interpreter's view of a kernel's world: one frame stack and one
/// flat address space with the guest memory at [`BASE`].
pub struct Machine<'a> {
    frames: Vec<Frame<'a>>,
    space: Vec<u8>,
    /// An access outside the address space: the translator's bounds check
    /// should make this impossible.
    stray: Option<String>,
    /// Where guest memory ends in the space (the stack slot follows).
    memory_end: usize,
}

impl Machine<'_> {
    /// Whether an access the translator flagged `notrap` (proven in
    /// bounds) is not inside the guest memory: the stack slot after it
    /// would otherwise hide a few bytes too many. Such an access fails.
    fn trusted_outside(&self, addr: &Address, size: usize, flags: MemFlagsData) -> bool {
        let start = addr.offset as usize;
        flags.notrap() && (start < BASE || start + size > self.memory_end)
    }
}

/// Bytes the interpreter gives a kernel's stack slot.
pub const STACK_SLOT_BYTES: usize = tensorwasm_core::lower::translate::MAX_STACK_WINDOW as usize;

pub fn range(space: &[u8], addr: &Address, size: usize) -> Option<std::ops::Range<usize>> {
    let start = usize::try_from(addr.offset).ok()?;
    let end = start.checked_add(size)?;
    (addr.region == AddressRegion::Stack && start >= BASE && end <= space.len())
        .then_some(start..end)
}

impl<'a> State<'a> for Machine<'a> {
    fn get_function(&self, _: FuncRef) -> Option<&'a Function> {
        None
    }
    fn get_current_function(&self) -> &'a Function {
        self.current_frame().function()
    }
    fn get_libcall_handler(&self) -> LibCallHandler {
        |_, _| Err(CraneliftTrap::UnreachableCodeReached)
    }
    fn push_frame(&mut self, function: &'a Function) {
        self.frames.push(Frame::new(function));
    }
    fn pop_frame(&mut self) {
        self.frames.pop();
    }
    fn current_frame_mut(&mut self) -> &mut Frame<'a> {
        self.frames.last_mut().expect("a frame")
    }
    fn current_frame(&self) -> &Frame<'a> {
        self.frames.last().expect("a frame")
    }
    fn stack_address(
        &self,
        size: AddressSize,
        _: StackSlot,
        offset: u64,
    ) -> Result<Address, MemoryError> {
        // The kernel's one slot (its shadow-stack window) sits past the
        // guest memory, so a window access that went to guest memory (or
        // the reverse) reads other bytes.
        Address::from_parts(
            size,
            AddressRegion::Stack,
            0,
            (self.space.len() - STACK_SLOT_BYTES) as u64 + offset,
        )
    }
    fn checked_load(
        &self,
        addr: Address,
        ty: Type,
        flags: MemFlagsData,
    ) -> Result<DataValue, MemoryError> {
        let size = ty.bytes() as usize;
        if flags.aligned() && !addr.offset.is_multiple_of(size as u64) {
            return Err(MemoryError::MisalignedLoad {
                addr,
                load_size: size,
            });
        }
        match range(&self.space, &addr, size).filter(|_| !self.trusted_outside(&addr, size, flags))
        {
            Some(r) => Ok(DataValue::read_from_slice_le(&self.space[r], ty)),
            None => Err(MemoryError::OutOfBoundsLoad {
                addr,
                load_size: size,
                mem_flags: flags,
            }),
        }
    }
    fn checked_store(
        &mut self,
        addr: Address,
        v: DataValue,
        flags: MemFlagsData,
    ) -> Result<(), MemoryError> {
        let size = v.ty().bytes() as usize;
        if flags.aligned() && !addr.offset.is_multiple_of(size as u64) {
            return Err(MemoryError::MisalignedStore {
                addr,
                store_size: size,
            });
        }
        match range(&self.space, &addr, size).filter(|_| !self.trusted_outside(&addr, size, flags))
        {
            Some(r) => {
                v.write_to_slice_le(&mut self.space[r]);
                Ok(())
            }
            None => {
                self.stray = Some(format!("store of {size} bytes at {addr:?}"));
                Err(MemoryError::OutOfBoundsStore {
                    addr,
                    store_size: size,
                    mem_flags: flags,
                })
            }
        }
    }
    fn function_address(&self, _: AddressSize, _: &ExternalName) -> Result<Address, MemoryError> {
        Err(MemoryError::InvalidOffset { offset: 0, max: 0 })
    }
    fn get_function_from_address(&self, _: Address) -> Option<InterpreterFunctionRef<'a>> {
        None
    }
    fn resolve_global_value(&self, _: GlobalValue) -> Result<DataValue, MemoryError> {
        Err(MemoryError::InvalidOffset { offset: 0, max: 0 })
    }
    fn get_pinned_reg(&self) -> DataValue {
        DataValue::I64(0)
    }
    fn set_pinned_reg(&mut self, _: DataValue) {}
}

/// A Wasm value as a bit pattern of its type.
#[derive(Clone, Copy, Debug)]
pub struct Arg(pub Ty, pub u64);

impl Arg {
    pub fn data_value(self) -> DataValue {
        match self.0 {
            Ty::I32 => DataValue::I32(self.1 as u32 as i32),
            Ty::I64 => DataValue::I64(self.1 as i64),
            Ty::F32 => DataValue::F32(Ieee32::with_bits(self.1 as u32)),
            Ty::F64 => DataValue::F64(Ieee64::with_bits(self.1)),
        }
    }

    pub fn val(self) -> wasmtime::Val {
        match self.0 {
            Ty::I32 => wasmtime::Val::I32(self.1 as u32 as i32),
            Ty::I64 => wasmtime::Val::I64(self.1 as i64),
            Ty::F32 => wasmtime::Val::F32(self.1 as u32),
            Ty::F64 => wasmtime::Val::F64(self.1),
        }
    }
}

/// The launch as the runtime checks see it: the time limit, the thread's
/// intrinsics, and every clock reading the thread made. The clock is the
/// interpreter's step count plus one: time passes with every instruction.
#[derive(Clone, Debug)]
pub struct Launch {
    pub time_limit: u64,
    pub intrinsics: [i32; 12],
    pub clock_reads: Vec<u64>,
    /// The launch values of the kernel's globals.
    pub globals: Vec<Arg>,
    /// The physical grid (`nctaid.x`) when it is smaller than the virtual
    /// one: the thread then runs virtual blocks `linear`, `linear +
    /// physical`, ... (`linear` its virtual block's linear index, which
    /// must be below `physical`); `None`, one physical block per virtual
    /// one.
    pub physical: Option<i64>,
    /// A launch the reference cannot express, for the virtual-block loop
    /// alone: the guest's grid `(gx, gy, gz)` as the host passes it, this
    /// thread's physical block `first` and the physical grid `stride`
    /// (both `u32`, as `ctaid.x` and `nctaid.x` are); overrides the
    /// intrinsics' grid and `physical`.
    pub virtual_grid: Option<VirtualGrid>,
    /// With neither `physical` nor `virtual_grid`: whether the host says
    /// the launch is the guest's grid itself (`KernelAbi::own_grid_params`,
    /// as `launch` does) or leaves the kernel to find it out (`nctaid`
    /// against the grid).
    pub own_grid: bool,
}

/// See [`Launch::virtual_grid`].
#[derive(Clone, Copy, Debug)]
pub struct VirtualGrid {
    pub grid: [i64; 3],
    pub first: u32,
    pub stride: u32,
}

impl Launch {
    /// No time limit, the intrinsics the reference sees.
    pub fn unlimited() -> Launch {
        Launch::limited(u64::MAX)
    }

    pub fn limited(time_limit: u64) -> Launch {
        Launch {
            time_limit,
            intrinsics: INTRINSIC_VALUES,
            clock_reads: Vec::new(),
            globals: Vec::new(),
            physical: None,
            virtual_grid: None,
            own_grid: true,
        }
    }

    /// The runtime check `check` at clock `now`, as `docs/kernels.md`
    /// specifies it.
    /// The cooperative checks (shared memory, barriers, warps) need a
    /// block of threads: `embed/tests/kernel_coop.rs` runs them.
    pub fn answer(&mut self, check: RuntimeCheck, args: &[DataValue], now: u64) -> DataValue {
        assert!(args.is_empty(), "the clock takes no arguments");
        match check {
            RuntimeCheck::Clock => {
                self.clock_reads.push(now);
                DataValue::I64(now as i64)
            }
            other => panic!("{} needs a block of threads", other.name()),
        }
    }
}

/// Runs the translated kernel in the interpreter on `memory` (updated in
/// place), with `fuel` and no time limit.
pub fn interpret(kernel: &TranslatedKernel, args: &[Arg], memory: &mut [u8], fuel: i64) -> Outcome {
    interpret_launch(kernel, args, memory, fuel, &mut Launch::unlimited())
}

/// [`interpret`] as a thread of `launch`, which the runtime checks read and
/// update.
pub fn interpret_launch(
    kernel: &TranslatedKernel,
    args: &[Arg],
    memory: &mut [u8],
    fuel: i64,
    launch: &mut Launch,
) -> Outcome {
    let func = &kernel.function;
    let mut machine = Machine {
        frames: Vec::new(),
        // Stale bytes in the stack slot: the kernel zeroes its window.
        space: vec![0xa5; BASE + memory.len() + STACK_SLOT_BYTES],
        stray: None,
        memory_end: BASE + memory.len(),
    };
    machine.space[BASE..BASE + memory.len()].copy_from_slice(memory);
    let mut values: Vec<DataValue> = args.iter().map(|a| a.data_value()).collect();
    assert_eq!(launch.globals.len(), kernel.globals.len(), "launch values");
    values.extend(launch.globals.iter().map(|a| a.data_value()));
    values.extend([
        DataValue::I64(BASE as i64),
        DataValue::I64(memory.len() as i64),
        DataValue::I64(0),
        DataValue::I64(fuel),
        DataValue::I64(launch.time_limit as i64),
    ]);
    // The launch's grid is the intrinsics' grid. Without `physical` the
    // host launches it as the physical grid itself (every block fits at
    // once): the intrinsics are the physical ones. With it, a 1-D grid of
    // `physical` blocks, this thread's physical block its virtual block's
    // linear index.
    let at = |which: Intrinsic| i64::from(launch.intrinsics[which.index()]);
    let (gx, gy, gz) = (
        at(Intrinsic::GridDimX),
        at(Intrinsic::GridDimY),
        at(Intrinsic::GridDimZ),
    );
    let linear =
        at(Intrinsic::BlockIdxX) + gx * (at(Intrinsic::BlockIdxY) + gy * at(Intrinsic::BlockIdxZ));
    let mut physical = launch.intrinsics;
    let (grid, first, stride) = match launch.virtual_grid {
        // The bits of a u32 register.
        Some(v) => (v.grid, v.first as i32, v.stride as i32),
        None => {
            let to_i32 = |v: i64| i32::try_from(v).expect("a test grid fits i32");
            (
                [gx, gy, gz],
                to_i32(linear),
                to_i32(launch.physical.unwrap_or(0)),
            )
        }
    };
    let own_grid = launch.own_grid && launch.physical.is_none() && launch.virtual_grid.is_none();
    let grid_params = if own_grid {
        KernelAbi::own_grid_params(grid.map(|g| g as u32))
    } else {
        KernelAbi::grid_params(grid.map(|g| g as u32), u64::from(stride as u32))
    };
    values.extend(grid_params.map(DataValue::I64));
    let one_d = launch.virtual_grid.is_some() || launch.physical.is_some();
    for (which, v) in [
        (Intrinsic::BlockIdxX, first),
        (Intrinsic::BlockIdxY, 0),
        (Intrinsic::BlockIdxZ, 0),
        (Intrinsic::GridDimX, stride),
        (Intrinsic::GridDimY, 1),
        (Intrinsic::GridDimZ, 1),
    ] {
        if one_d {
            physical[which.index()] = v;
        }
    }
    values.extend(physical.map(DataValue::I32));
    assert_eq!(values.len(), kernel.abi.total_params());

    machine.push_frame(func);
    let entry = func.layout.entry_block().expect("an entry block");
    machine
        .current_frame_mut()
        .set_all(func.dfg.block_params(entry), values);
    let mut next = func.layout.first_inst(entry);
    let mut steps: u64 = 0;
    let outcome = loop {
        let inst = next.expect("fell off the end of a block");
        steps += 1;
        assert!(steps < 50_000_000, "the interpreter ran away");
        if func.dfg.insts[inst].opcode().is_call() {
            // Only the runtime checks are called; the host answers them.
            let check = RuntimeCheck::called_by(func, inst).unwrap_or_else(|| {
                panic!(
                    "a call that is no runtime check: {}",
                    func.dfg.display_inst(inst)
                )
            });
            let args: Vec<DataValue> = func
                .dfg
                .inst_args(inst)
                .iter()
                .map(|&v| machine.current_frame().get(v).clone())
                .collect();
            let answer = launch.answer(check, &args, steps + 1);
            machine
                .current_frame_mut()
                .set_all(func.dfg.inst_results(inst), vec![answer]);
            next = func.layout.next_inst(inst);
            continue;
        }
        let flow =
            step(&mut machine, DfgInstructionContext::new(inst, &func.dfg)).unwrap_or_else(|e| {
                panic!(
                    "interpreter failed at {}: {e:?}",
                    func.dfg.display_inst(inst)
                )
            });
        match flow {
            ControlFlow::Assign(results) => {
                machine
                    .current_frame_mut()
                    .set_all(func.dfg.inst_results(inst), results.to_vec());
                next = func.layout.next_inst(inst);
            }
            ControlFlow::Continue => next = func.layout.next_inst(inst),
            ControlFlow::ContinueAt(block, args) => {
                machine
                    .current_frame_mut()
                    .set_all(func.dfg.block_params(block), args.to_vec());
                next = func.layout.first_inst(block);
            }
            ControlFlow::Return(_) => break Outcome::Returned,
            ControlFlow::Trap(CraneliftTrap::User(code)) => {
                let trap = KernelTrap::from_trap_code(code).unwrap_or_else(|| {
                    panic!(
                        "trap {code} is not a kernel trap, at {} ({:?})",
                        func.dfg.display_inst(inst),
                        machine.stray
                    )
                });
                break Outcome::Trapped {
                    trap,
                    offset: func.srcloc(inst).bits(),
                };
            }
            other => panic!("unexpected control flow {other:?}"),
        }
    };
    assert_eq!(
        machine.stray, None,
        "the kernel accessed memory outside its bounds check"
    );
    memory.copy_from_slice(&machine.space[BASE..BASE + memory.len()]);
    outcome
}

/// wasmtime running the same module: the reference.
pub struct Reference {
    store: wasmtime::Store<()>,
    instance: wasmtime::Instance,
    memory: wasmtime::Memory,
    kernel: wasmtime::Func,
}

impl Reference {
    pub fn new(wasm: &[u8]) -> Self {
        // Backtraces (with module offsets) are on by default. No
        // optimization: it may fold a branch to a trap into a conditional
        // trap at the branch's offset, where the contract wants the
        // trapping operator's.
        let mut config = wasmtime::Config::new();
        config.cranelift_opt_level(wasmtime::OptLevel::None);
        let engine = wasmtime::Engine::new(&config).expect("engine");
        let module = wasmtime::Module::new(&engine, wasm).expect("wasmtime compiles the module");
        let mut linker = wasmtime::Linker::new(&engine);
        for (which, value) in Intrinsic::ALL.into_iter().zip(INTRINSIC_VALUES) {
            linker
                .func_wrap(INTRINSIC_MODULE, which.import_name(), move || value)
                .expect("intrinsic");
        }
        let mut store = wasmtime::Store::new(&engine, ());
        let instance = linker
            .instantiate(&mut store, &module)
            .expect("instantiate");
        let memory = instance
            .get_memory(&mut store, "memory")
            .expect("a memory export");
        let kernel = instance
            .get_func(&mut store, "kernel")
            .expect("a kernel export");
        Reference {
            store,
            instance,
            memory,
            kernel,
        }
    }

    /// The value of global `index`, which the test module exports as
    /// `g<index>`.
    pub fn global(&mut self, index: u32) -> Arg {
        let global = self
            .instance
            .get_global(&mut self.store, &format!("g{index}"))
            .unwrap_or_else(|| panic!("the test module exports global {index} as g{index}"));
        match global.get(&mut self.store) {
            wasmtime::Val::I32(v) => Arg(I32, v as u32 as u64),
            wasmtime::Val::I64(v) => Arg(I64, v as u64),
            wasmtime::Val::F32(v) => Arg(F32, u64::from(v)),
            wasmtime::Val::F64(v) => Arg(F64, v),
            other => panic!("global {index} is {other:?}"),
        }
    }

    /// The launch value of a kernel's global entry: the global's value,
    /// or for a `v128` global's entry its word `lane`.
    pub fn kernel_global(&mut self, g: &tensorwasm_core::lower::translate::KernelGlobal) -> Arg {
        let Some(lane) = g.lane else {
            return self.global(g.index);
        };
        let global = self
            .instance
            .get_global(&mut self.store, &format!("g{}", g.index))
            .unwrap_or_else(|| {
                panic!("the test module exports global {} as g{}", g.index, g.index)
            });
        match global.get(&mut self.store) {
            wasmtime::Val::V128(v) => {
                Arg(I32, (v.as_u128() >> (32 * u32::from(lane))) as u32 as u64)
            }
            other => panic!("global {} is {other:?}", g.index),
        }
    }

    pub fn run(&mut self, args: &[Arg], memory: &mut [u8]) -> Outcome {
        self.memory.data_mut(&mut self.store)[..memory.len()].copy_from_slice(memory);
        let args: Vec<wasmtime::Val> = args.iter().map(|a| a.val()).collect();
        let result = self.kernel.call(&mut self.store, &args, &mut []);
        memory.copy_from_slice(&self.memory.data(&self.store)[..memory.len()]);
        let Err(error) = result else {
            return Outcome::Returned;
        };
        let trap = *error
            .downcast_ref::<wasmtime::Trap>()
            .unwrap_or_else(|| panic!("not a trap: {error:?}"));
        let offset = error
            .downcast_ref::<wasmtime::WasmBacktrace>()
            .and_then(|bt| bt.frames().first().and_then(|f| f.module_offset()))
            .expect("a backtrace with the trapping offset") as u32;
        let trap = match trap {
            wasmtime::Trap::UnreachableCodeReached => KernelTrap::Unreachable,
            wasmtime::Trap::MemoryOutOfBounds => KernelTrap::HeapOutOfBounds,
            wasmtime::Trap::IntegerDivisionByZero => KernelTrap::IntegerDivideByZero,
            wasmtime::Trap::BadConversionToInteger => KernelTrap::BadConversionToInteger,
            wasmtime::Trap::OutOfFuel => KernelTrap::OutOfFuel,
            wasmtime::Trap::IntegerOverflow => KernelTrap::IntegerOverflow,
            wasmtime::Trap::TableOutOfBounds => KernelTrap::TableOutOfBounds,
            wasmtime::Trap::IndirectCallToNull => KernelTrap::IndirectCallToNull,
            wasmtime::Trap::BadSignature => KernelTrap::BadSignature,
            wasmtime::Trap::HeapMisaligned => KernelTrap::HeapMisaligned,
            other => panic!("unexpected wasmtime trap {other:?}"),
        };
        Outcome::Trapped { trap, offset }
    }
}

/// The function index of export `name`.
pub fn export_index(wasm: &[u8], name: &str) -> u32 {
    for payload in Parser::new(0).parse_all(wasm) {
        if let Payload::ExportSection(reader) = payload.expect("parse") {
            for export in reader {
                let export = export.expect("export");
                if export.name == name && export.kind == wasmparser::ExternalKind::Func {
                    return export.index;
                }
            }
        }
    }
    panic!("no export {name}");
}

/// The byte offset of the `nth` operator (in module order) that `pick`
/// accepts.
pub fn offset_of(wasm: &[u8], nth: usize, pick: impl Fn(&Operator<'_>) -> bool) -> u32 {
    let mut seen = 0;
    for payload in Parser::new(0).parse_all(wasm) {
        if let Payload::CodeSectionEntry(body) = payload.expect("parse") {
            let mut reader = body.get_operators_reader().expect("operators");
            while !reader.eof() {
                let (op, offset) = reader.read_with_offset().expect("operator");
                if pick(&op) {
                    if seen == nth {
                        return offset as u32;
                    }
                    seen += 1;
                }
            }
        }
    }
    panic!("no such operator");
}

/// The CLIF passes the verifier and keeps the contract's shape.
pub fn check_shape(kernel: &TranslatedKernel) {
    let func = &kernel.function;
    let flags = Flags::new(settings::builder());
    if let Err(errors) = cranelift_codegen::verify_function(func, &flags) {
        panic!("verifier: {errors}\n{func}");
    }
    assert_eq!(func.signature.params.len(), kernel.abi.total_params());
    for (param, ty) in func.signature.params.iter().zip(&kernel.params) {
        assert_eq!(param.value_type, ty.clif_type());
    }
    assert!(func.signature.returns.is_empty());
    for block in func.layout.blocks() {
        for inst in func.layout.block_insts(block) {
            let data = &func.dfg.insts[inst];
            let opcode = data.opcode();
            assert!(
                !opcode.is_call() || RuntimeCheck::called_by(func, inst).is_some(),
                "a call survived: {}",
                func.dfg.display_inst(inst)
            );
            if matches!(opcode, Opcode::Trap | Opcode::Trapz | Opcode::Trapnz) {
                let code = data.trap_code().expect("trap code");
                assert!(
                    KernelTrap::from_trap_code(code).is_some(),
                    "foreign trap code {code}"
                );
                assert!(!func.srcloc(inst).is_default(), "trap without a srcloc");
            }
            if (opcode.can_load() || opcode.can_store())
                && let Some(flags) = data.memflags_data(&func.dfg)
            {
                // An `aligned` access must be at an aligned address, a
                // `notrap` one inside the memory: the interpreter's
                // `Machine` fails any that is not, when it runs.
                assert_eq!(
                    flags.explicit_endianness(),
                    Some(cranelift_codegen::ir::Endianness::Little)
                );
            }
            if let InstructionData::BranchTable { table, .. } = data {
                let table = &func.stencil.dfg.jump_tables[*table];
                for call in table.all_branches() {
                    assert_eq!(
                        call.args(&func.dfg.value_lists).count(),
                        0,
                        "br_table edge with arguments"
                    );
                }
            }
        }
    }
}

pub fn translate(wasm: &[u8]) -> TranslatedKernel {
    let kernel = translate_kernel(wasm, export_index(wasm, "kernel"))
        .unwrap_or_else(|e| panic!("translation failed: {e}"));
    check_shape(&kernel);
    kernel
}

/// [`translate`] for the launches `variant` serves.
pub fn translate_variant(wasm: &[u8], variant: KernelVariant) -> TranslatedKernel {
    let index = export_index(wasm, "kernel");
    let kernel = translate_kernel_variant(wasm, index, KernelLimits::HOST, variant)
        .unwrap_or_else(|e| panic!("translation of {variant:?} failed: {e}"));
    assert_eq!(kernel.variant, variant);
    check_shape(&kernel);
    kernel
}

/// A variant's short name in messages: `any`, `own+aligned`, ...
pub fn variant_name(variant: KernelVariant) -> &'static str {
    match (variant.grid, variant.bodies) {
        (GridVariant::Any, BodyVariant::Both) => "any",
        (GridVariant::Any, BodyVariant::Aligned) => "any+aligned",
        (GridVariant::Any, BodyVariant::General) => "any+general",
        (GridVariant::Own, BodyVariant::Both) => "own+both",
        (GridVariant::Own, BodyVariant::Aligned) => "own+aligned",
        (GridVariant::Own, BodyVariant::General) => "own+general",
    }
}

/// Whether the host may launch the aligned copy with `params` (the Wasm
/// arguments, then the globals' launch values: the aligned copy may assume
/// a global aligned too) over `mem_len` bytes
/// (`TranslatedKernel::admits_aligned`, the `i32` ones read as `u32`).
pub fn admits_aligned(kernel: &TranslatedKernel, params: &[Arg], mem_len: usize) -> bool {
    let arg = |i: usize| match params.get(i) {
        Some(&Arg(I32, bits)) => Some(bits as u32),
        _ => None,
    };
    kernel.admits_aligned(arg, mem_len as u64)
}

/// A module's kernel as the differential tests run it: the translation for
/// every launch, and the variants the host launches on the guest's own
/// grid without a time limit (the interpreter's unlimited launch,
/// [`Launch::unlimited`]), chosen per launch as the host chooses
/// (`docs/kernels.md`, "Kernel variants"): the aligned copy when
/// [`admits_aligned`] holds for it, else the general body (made on first
/// use).
pub struct Kernels {
    wasm: Vec<u8>,
    /// `translate_kernel`'s.
    pub any: TranslatedKernel,
    own_aligned: TranslatedKernel,
    own_general: OnceLock<TranslatedKernel>,
}

impl Kernels {
    pub fn new(wasm: &[u8]) -> Kernels {
        Kernels {
            wasm: wasm.to_vec(),
            any: translate(wasm),
            own_aligned: translate_variant(wasm, KernelVariant::OWN_ALIGNED),
            own_general: OnceLock::new(),
        }
    }

    /// The variant the host launches with `params` (the Wasm arguments,
    /// then the globals' launch values) over `mem_len` bytes of memory, on
    /// the guest's own grid without a time limit.
    pub fn host(&self, params: &[Arg], mem_len: usize) -> &TranslatedKernel {
        if admits_aligned(&self.own_aligned, params, mem_len) {
            &self.own_aligned
        } else {
            self.own_general
                .get_or_init(|| translate_variant(&self.wasm, KernelVariant::OWN_GENERAL))
        }
    }

    /// The kernels a differential test runs for a launch with `params`
    /// (as [`Kernels::host`] takes them) over `mem_len` bytes:
    /// [`Kernels::any`], then [`Kernels::host`]'s.
    pub fn for_launch(&self, params: &[Arg], mem_len: usize) -> [&TranslatedKernel; 2] {
        [&self.any, self.host(params, mem_len)]
    }
}

/// The CLIF text of `wat`'s kernel.
pub fn clif_of(wat: &str) -> String {
    let wasm = wat::parse_str(wat).expect("wat");
    translate(&wasm).function.display().to_string()
}

/// How many of `clif`'s `op` instructions (`trapz`, `trapnz`, with or
/// without a type suffix) have `trap`'s code.
pub fn traps(clif: &str, op: &str, trap: KernelTrap) -> usize {
    let code = format!(", {}", trap.trap_code());
    let typed = format!("{op}.");
    clif.lines()
        .filter(|l| {
            l.split_whitespace()
                .any(|w| w == op || w.starts_with(&typed))
                && l.trim_end().ends_with(&code)
        })
        .count()
}

/// A random memory image: the first and last 4 KiB random, so a float
/// loaded anywhere there is rarely zero.
pub fn image(rng: &mut Rng) -> Vec<u8> {
    let mut memory = vec![0u8; PAGE];
    for i in (0..4096).chain(PAGE - 4096..PAGE) {
        memory[i] = rng.next() as u8;
    }
    memory
}

/// Runs `wat` with `args` both ways on the same random memory, the
/// translation for every launch and the variant the host launches
/// ([`Kernels`]), and asserts the same outcome and memory; the outcome.
pub fn same_as_wasmtime(wat: &str, args: &[Arg], rng: &mut Rng) -> Outcome {
    let wasm = wat::parse_str(wat).expect("wat");
    let kernels = Kernels::new(&wasm);
    let mut reference = Reference::new(&wasm);
    let start = image(rng);
    let mut want = start.clone();
    let expected = reference.run(args, &mut want);
    each_kernel_matches(&kernels, args, &start, &expected, &want, "");
    expected
}

/// Runs each kernel [`Kernels::for_launch`] gives for `args` from memory
/// `start` and asserts wasmtime's `expected` outcome and memory `want`;
/// `context` heads each failure's message.
pub fn each_kernel_matches(
    kernels: &Kernels,
    args: &[Arg],
    start: &[u8],
    expected: &Outcome,
    want: &[u8],
    context: &str,
) {
    let shown: Vec<u64> = args.iter().map(|a| a.1).collect();
    for kernel in kernels.for_launch(args, start.len()) {
        let name = variant_name(kernel.variant);
        let mut got = start.to_vec();
        let outcome = interpret(kernel, args, &mut got, PLENTY);
        assert_eq!(&outcome, expected, "{context}{name}: args {shown:?}");
        // Slice equality first: a byte loop is slow in a debug build.
        if want != got
            && let Some(at) = (0..PAGE).find(|&i| want[i] != got[i])
        {
            panic!(
                "{context}{name}: args {shown:?}: memory differs first at byte {at}: wasmtime \
                 {}, translated {}",
                want[at], got[at]
            );
        }
    }
}
