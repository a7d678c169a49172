//! The code translator: Wasm operators to CLIF, one kernel function with
//! every callee inlined (`docs/kernels.md`, "The kernel's CLIF"). Control
//! flow follows wasmtime's translator: block results travel through
//! variables, and operators in dead code (after `br`, `return`,
//! `unreachable`) are skipped. Every trap is an explicit `trap`, `trapz` or
//! `trapnz` with a [`KernelTrap`] code, emitted before the operation it
//! guards. This file decides nothing about what is supported: the detector
//! has refused everything the tables below do not cover.

use alloc::format;
use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;

use cranelift_codegen::entity::packed_option::ReservedValue;
use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::immediates::{Ieee32, Ieee64};
use cranelift_codegen::ir::types::{F32, F64, I8, I16, I32, I64};
use cranelift_codegen::ir::{
    AbiParam, Block, BlockArg, BlockCall, Endianness, ExtFuncData, ExternalName, FuncRef, Function,
    Inst, InstBuilder, JumpTableData, MemFlagsData, Signature, SourceLoc, Type, UserFuncName,
    Value,
};
use cranelift_codegen::isa::CallConv;
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext, Variable};
use wasmparser::{BlockType, BrTable, MemArg, Operator, ValType};

use super::detect::{Cooperation, op_name};
use super::module::{ConstValue, GlobalKind, ModuleInfo, invalid};
use super::{GridVariant, KernelGlobal, WasmType};
use crate::lower::atomic::AtomicIntrinsic;
use crate::lower::cooperative::CoopIntrinsic;
use crate::lower::math::MathIntrinsic;
use crate::lower::{Intrinsic, KernelAbi, KernelTrap, LowerError, RuntimeCheck, UnsupportedOp};

mod atomic;
mod cooperative;
mod simd;
mod window;

pub(super) use atomic::atomic_access;
pub(super) use simd::simd_access;

use simd::LANES;

use window::{Placement, Window, WindowAccess};

/// A translator invariant broke (the detector or validation should have
/// caught the input).
fn internal(what: &str) -> LowerError {
    LowerError::Invalid(format!("translator: {what}"))
}

/// Translates defined function `func_index` (already checked by the
/// detector, its call graph validated) into the kernel's CLIF function.
/// A kernel with a small shadow-stack window is translated twice: the
/// first translation finds its frame accesses at constant offsets, the
/// second keeps the window in registers (`window`). Returns the function,
/// whether its window lives in registers, and the shared-memory bounds its
/// tests compare against ([`SHARED_ACCESS_BYTES`] order), if it has shared
/// memory.
pub(super) fn translate(
    module: &ModuleInfo<'_>,
    func_index: u32,
    params: &[WasmType],
    globals: &[KernelGlobal],
    stack: Option<(u32, u64)>,
    cooperation: Cooperation,
    grid: GridVariant,
) -> Result<(Function, bool, Option<[Value; 4]>), LowerError> {
    let once = |plan| {
        translate_once(
            module,
            func_index,
            params,
            globals,
            stack,
            cooperation,
            grid,
            plan,
        )
    };
    let first = once(None)?;
    match stack {
        Some((_, bytes)) if window::promotable(bytes, &first.placements, first.spill_sites) => {
            once(Some(&first.placements)).map(|t| (t.function, true, t.shared_bounds))
        }
        _ => Ok((first.function, false, first.shared_bounds)),
    }
}

/// What [`translate_once`] gives.
struct Translation {
    function: Function,
    /// The placements of the loads and stores it found (without a plan).
    placements: Vec<Placement>,
    /// How many other operations reach the window by address.
    spill_sites: usize,
    /// The shared bounds its tests compare against, if it has shared memory.
    shared_bounds: Option<[Value; 4]>,
}

/// One translation; with `plan` (the first translation's placements of
/// the loads and stores), the window lives in registers. Returns the
/// function, the placements it found (without `plan`), how many other
/// operations reach the window by address (atomics, bulk memory: each
/// spills and reloads a promoted window), and the shared bounds.
#[allow(clippy::too_many_arguments)]
fn translate_once(
    module: &ModuleInfo<'_>,
    func_index: u32,
    params: &[WasmType],
    globals: &[KernelGlobal],
    stack: Option<(u32, u64)>,
    cooperation: Cooperation,
    grid_variant: GridVariant,
    plan: Option<&[Placement]>,
) -> Result<Translation, LowerError> {
    let abi = KernelAbi {
        wasm_params: params.len() + globals.len(),
    };
    let mut signature = Signature::new(CallConv::SystemV);
    signature.params.extend(
        params
            .iter()
            .chain(globals.iter().map(|g| &g.ty))
            .map(|p| AbiParam::new(p.clif_type())),
    );
    signature
        .params
        .extend([AbiParam::new(I64); KernelAbi::INTRINSICS]);
    signature
        .params
        .extend(Intrinsic::ALL.map(|_| AbiParam::new(I32)));
    debug_assert_eq!(signature.params.len(), abi.total_params());

    let mut function = Function::with_name_signature(UserFuncName::user(0, func_index), signature);
    let mut context = FunctionBuilderContext::new();
    let mut builder = FunctionBuilder::new(&mut function, &mut context);
    let entry = builder.create_block();
    builder.append_block_params_for_function_params(entry);
    builder.switch_to_block(entry);
    builder.seal_block(entry);
    let values = builder.block_params(entry).to_vec();
    let fuel = builder.declare_var(I64);
    builder.def_var(fuel, values[abi.hidden(KernelAbi::FUEL)]);
    let checks = RuntimeCheck::ALL.map(|check| {
        let signature = builder.import_signature(check.signature());
        let name = builder
            .func
            .declare_imported_user_function(check.external_name());
        builder.import_function(ExtFuncData {
            name: ExternalName::user(name),
            signature,
            colocated: false,
            patchable: false,
        })
    });
    let clock = checks[RuntimeCheck::Clock as usize];
    // The thread's clock starts now; the virtual blocks and loop headers
    // check how long it has run.
    let call = builder.ins().call(clock, &[]);
    let start = builder.inst_results(call)[0];
    // The block's shared memory, read once: every shared access adds a
    // checked offset to the base.
    let shared = cooperation.shared.then(|| {
        let [base, size] = [RuntimeCheck::SharedBase, RuntimeCheck::SharedSize].map(|check| {
            let call = builder.ins().call(checks[check as usize], &[]);
            builder.inst_results(call)[0]
        });
        // For each access size, the least `i32` offset out of bounds:
        // `max(size - bytes + 1, 0)` (0 when the block has less than
        // `bytes`: every access traps).
        let zero = builder.ins().iconst(I64, 0);
        let bounds = SHARED_ACCESS_BYTES.map(|bytes| {
            let bound = builder.ins().iadd_imm_s(size, 1 - i64::from(bytes));
            let negative = builder.ins().icmp(IntCC::SignedLessThan, bound, zero);
            let bound = builder.ins().select(negative, zero, bound);
            builder.ins().ireduce(I32, bound)
        });
        Shared { base, size, bounds }
    });
    let hidden = Hidden {
        mem_base: values[abi.hidden(KernelAbi::MEM_BASE)],
        mem_len: values[abi.hidden(KernelAbi::MEM_LEN)],
        time_limit: values[abi.hidden(KernelAbi::TIME_LIMIT)],
        intrinsics: core::array::from_fn(|i| values[abi.hidden(KernelAbi::INTRINSICS) + i]),
        clock,
        checks,
        start,
        shared,
        cooperative: cooperation.cooperative,
    };

    // Each thread's copies of the mutable globals (reset to their launch
    // values at each virtual block), and its shadow-stack window.
    let globals: Vec<ThreadGlobal> = globals
        .iter()
        .enumerate()
        .map(|(i, g)| ThreadGlobal {
            index: g.index,
            lane: g.lane,
            var: builder.declare_var(g.ty.clif_type()),
            launch: values[params.len() + i],
        })
        .collect();
    let window = stack.map(|(sp, bytes)| {
        let launch = globals
            .iter()
            .find(|g| g.index == sp)
            .map(|g| g.launch)
            .ok_or_else(|| internal("the stack pointer is not among the kernel's globals"))?;
        Ok::<_, LowerError>(window::stack_window(&mut builder, sp, bytes, launch, plan))
    });
    let window = window.transpose()?;

    let mut translator = Translator {
        module,
        builder,
        hidden,
        fuel,
        globals,
        window,
        window_accesses: Vec::new(),
        spill_sites: 0,
        sites: 0,
        views: simd::Views::default(),
        untimed: grid_variant == GridVariant::Own,
    };
    let def = module
        .defined(func_index)
        .ok_or_else(|| internal("translating a function that is not defined"))?;
    let body_offset = module.bodies[def].range().start;
    let grid =
        [KernelAbi::GRID_X, KernelAbi::GRID_Y, KernelAbi::GRID_Z].map(|k| values[abi.hidden(k)]);
    let fuel_param = values[abi.hidden(KernelAbi::FUEL)];
    let body_srcloc = SourceLoc::new(u32::try_from(body_offset).unwrap_or(u32::MAX));
    // Source locations are kept relative to the function's first one, and
    // one just below it would read as none: base them at 0.
    translator
        .builder
        .func
        .params
        .ensure_base_srcloc(SourceLoc::new(0));
    let run = match grid_variant {
        GridVariant::Any => Translator::virtual_blocks,
        GridVariant::Own => Translator::own_block,
    };
    run(&mut translator, grid, fuel_param, body_srcloc, &mut |t| {
        // A trap here carries the kernel body's offset.
        t.builder.set_srcloc(body_srcloc);
        for g in &t.globals {
            t.builder.def_var(g.var, g.launch);
        }
        t.reset_window();
        t.inline(func_index, &values[..params.len()])
            .map(|results| results.is_some())
    })?;
    translator.builder.seal_all_blocks();
    let (window, accesses, spill_sites) = (
        translator.window.take(),
        core::mem::take(&mut translator.window_accesses),
        translator.spill_sites,
    );
    drop(translator);
    let placements = match &window {
        Some(window) => window::resolve_frame_accesses(&mut function, window, &accesses),
        None => Vec::new(),
    };
    // No `finalize`: its `TargetFrontendConfig` needs target-lexicon's
    // `PointerWidth`, which no_std Cranelift does not re-export, and it only
    // adds debug checks (the verifier's, stricter, run in `translate_kernel`)
    // and stack maps (a kernel has no GC values).
    Ok(Translation {
        function,
        placements,
        spill_sites,
        shared_bounds: shared.map(|s| s.bounds),
    })
}

/// The kernel's hidden parameters the translator reads, and the runtime
/// checks it calls.
struct Hidden {
    mem_base: Value,
    mem_len: Value,
    time_limit: Value,
    intrinsics: [Value; 12],
    /// [`RuntimeCheck::Clock`].
    clock: FuncRef,
    /// Every runtime check, by index.
    checks: [FuncRef; RuntimeCheck::ALL.len()],
    /// The thread's clock when it started.
    start: Value,
    /// The block's shared memory, when the kernel uses it.
    shared: Option<Shared>,
    /// Whether the kernel calls a cooperative intrinsic: each virtual
    /// block then begins and ends for the whole block at once.
    cooperative: bool,
}

/// The sizes of shared accesses, in bytes.
pub(super) const SHARED_ACCESS_BYTES: [u32; 4] = [1, 2, 4, 8];

/// The block's shared memory: its address and size (`i64`s), and for each
/// of [`SHARED_ACCESS_BYTES`] the least offset (`i32`, unsigned) at which
/// an access of that size is out of bounds.
#[derive(Clone, Copy)]
struct Shared {
    base: Value,
    size: Value,
    bounds: [Value; 4],
}

struct Translator<'m, 'a, 'f> {
    module: &'m ModuleInfo<'a>,
    builder: FunctionBuilder<'f>,
    hidden: Hidden,
    /// The thread's remaining fuel.
    fuel: Variable,
    /// The thread's copies of the mutable globals the kernel uses.
    globals: Vec<ThreadGlobal>,
    /// The thread's shadow-stack window, if the kernel makes stack frames.
    window: Option<Window>,
    /// The loads' and stores' choices between the window and the guest's
    /// memory, for [`window::resolve_frame_accesses`].
    window_accesses: Vec<WindowAccess>,
    /// Operations other than loads and stores that reach the window by
    /// address (atomics, bulk memory).
    spill_sites: usize,
    /// Warp operations emitted so far: each call site's number.
    sites: i32,
    /// The typed lanes `v128` words were packed from (`simd`).
    views: simd::Views,
    /// The launches have no time limit ([`GridVariant::Own`]): no time
    /// checks.
    untimed: bool,
}

/// A thread's copy of a mutable global.
struct ThreadGlobal {
    index: u32,
    /// The word of a `v128` global ([`KernelGlobal::lane`]).
    lane: Option<u8>,
    var: Variable,
    /// Its value at launch (a kernel parameter).
    launch: Value,
}

/// A Wasm local: a scalar's variable, or a `v128`'s four 32-bit lanes
/// (`simd`).
#[derive(Clone, Copy)]
enum Local {
    Scalar(Variable),
    V128([Variable; LANES]),
}

impl Local {
    /// Its variables, lane 0 first.
    fn vars(self) -> impl Iterator<Item = Variable> {
        let (vars, n) = match self {
            Local::Scalar(var) => ([var; LANES], 1),
            Local::V128(vars) => (vars, LANES),
        };
        vars.into_iter().take(n)
    }

    /// How many values it holds on the operand stack.
    fn len(self) -> usize {
        match self {
            Local::Scalar(_) => 1,
            Local::V128(_) => LANES,
        }
    }
}

/// The state of one (inlined) function's translation. A `v128` on the
/// operand stack is its four 32-bit lanes, lane 0 deepest (`simd`).
struct FuncState {
    locals: Vec<Local>,
    stack: Vec<Value>,
    control: Vec<Frame>,
    /// Whether the current position can execute.
    reachable: bool,
}

enum FrameKind {
    Block,
    Loop {
        header: Block,
        /// The loop's parameters (the target of `br` to the loop).
        header_vars: Vec<Variable>,
    },
    If {
        else_block: Block,
        /// The block's parameters, which the `else` arm starts with.
        else_params: Vec<Value>,
        else_seen: bool,
    },
    /// A block, loop or if opened in dead code.
    Dead,
}

struct Frame {
    kind: FrameKind,
    /// The code after `end`, which takes the block's results.
    next: Block,
    next_vars: Vec<Variable>,
    /// The value stack's height below the block's parameters.
    height: usize,
    /// Whether a branch targets `next`.
    exit_branched: bool,
}

impl FuncState {
    fn pop(&mut self) -> Result<Value, LowerError> {
        self.stack
            .pop()
            .ok_or_else(|| internal("operand stack underflow"))
    }

    fn pop_n(&mut self, n: usize) -> Result<Vec<Value>, LowerError> {
        let at = self
            .stack
            .len()
            .checked_sub(n)
            .ok_or_else(|| internal("operand stack underflow"))?;
        Ok(self.stack.split_off(at))
    }

    fn top_n(&self, n: usize) -> Result<&[Value], LowerError> {
        let at = self
            .stack
            .len()
            .checked_sub(n)
            .ok_or_else(|| internal("operand stack underflow"))?;
        Ok(&self.stack[at..])
    }

    fn local(&self, index: u32) -> Result<Local, LowerError> {
        self.locals
            .get(index as usize)
            .copied()
            .ok_or_else(|| internal("local index out of range"))
    }

    fn frame(&mut self, depth: u32) -> Result<&mut Frame, LowerError> {
        let i = self
            .control
            .len()
            .checked_sub(depth as usize + 1)
            .ok_or_else(|| internal("branch depth out of range"))?;
        Ok(&mut self.control[i])
    }

    /// Where a branch to the frame `depth` levels up goes, with the
    /// variables that carry its values; marks the frame as branched to.
    fn branch_target(&mut self, depth: u32) -> Result<(Block, Vec<Variable>), LowerError> {
        let frame = self.frame(depth)?;
        Ok(match &frame.kind {
            FrameKind::Loop {
                header,
                header_vars,
            } => (*header, header_vars.clone()),
            _ => {
                frame.exit_branched = true;
                (frame.next, frame.next_vars.clone())
            }
        })
    }
}

/// The CLIF values that hold one Wasm value of type `ty`: a scalar's one,
/// a `v128`'s four 32-bit lanes.
fn clif_types(ty: ValType) -> Result<&'static [Type], LowerError> {
    Ok(match ty {
        ValType::I32 => &[I32],
        ValType::I64 => &[I64],
        ValType::F32 => &[F32],
        ValType::F64 => &[F64],
        ValType::V128 => &[I32; LANES],
        ValType::Ref(_) => return Err(internal("a reference value")),
    })
}

/// How many CLIF values hold a sequence of Wasm values of `types`.
fn flat_len(types: &[ValType]) -> usize {
    types
        .iter()
        .map(|&t| if t == ValType::V128 { LANES } else { 1 })
        .sum()
}

impl<'m> Translator<'m, '_, '_> {
    /// The loop over the launch's virtual blocks (`docs/kernels.md`,
    /// "Virtual blocks"): the launch runs `grid` (x, y, z: the grid the
    /// guest asked for) on however many physical blocks the host launched
    /// (a 1-D grid); each physical block takes the virtual blocks
    /// `ctaid.x, ctaid.x + nctaid.x, ...`, and for each, the kernel's body
    /// (`body`, which returns whether its end is reachable) runs with the
    /// block-index and grid-size intrinsics of that virtual block and fresh
    /// fuel. Every thread of a physical block takes the same virtual blocks
    /// in the same order.
    fn virtual_blocks(
        &mut self,
        grid: [Value; 3],
        fuel: Value,
        body_srcloc: SourceLoc,
        body: &mut dyn FnMut(&mut Self) -> Result<bool, LowerError>,
    ) -> Result<(), LowerError> {
        let physical = |which: Intrinsic, t: &mut Self| {
            let v = t.hidden.intrinsics[which.index()];
            t.builder.ins().uextend(I64, v)
        };
        let first = physical(Intrinsic::BlockIdxX, self);
        let stride = physical(Intrinsic::GridDimX, self);
        // Each grid parameter holds the extent in its low 32 bits and the
        // stride's digit in that dimension in its high 32 bits
        // (`KernelAbi::grid_params`): the host divides, once per launch,
        // so the latch below advances the index without a division (the
        // driver's JIT hoists a division of the stride above the loop,
        // where every thread paid for it).
        let [gx, gy, gz] = grid.map(|g| self.builder.ins().band_imm_u(g, 0xffff_ffff));
        let [sx, sy, sz] = grid.map(|g| {
            let high = self.builder.ins().ushr_imm_u(g, 32);
            self.builder.ins().ireduce(I32, high)
        });
        let gyz = self.builder.ins().imul(gy, gz);
        let total = self.builder.ins().imul(gx, gyz);
        let one_d = self.builder.ins().icmp_imm_u(IntCC::Equal, gyz, 1);

        // The loop is rotated: the entry tests the first virtual block, and
        // the latch the next one, then checks the thread's time (no time
        // has passed before the first): a thread of one virtual block, the
        // usual launch, reads no clock but at its start.
        //
        // No 64-bit division anywhere (a GPU divides 64 bits in a long
        // subroutine, which cost a small kernel more than its body and the
        // driver's JIT a third of its time): the host passes extents below
        // 2^32 (CUDA's own limits), and `ctaid.x` and `nctaid.x` are
        // 32-bit, so the first block's index takes two 32-bit divisions
        // (none when the physical grid is the virtual one); each later
        // block's index is the last one plus the stride's digits (the
        // host's), with carries, as `vb` itself advances.
        let start = self.builder.create_block();
        let vb = self.builder.append_block_param(start, I64);
        let [bx, by, bz] = [(); 3].map(|()| self.builder.append_block_param(start, I32));
        let exit = self.builder.create_block();
        self.enter_body();
        // The host launched the guest's grid itself and said so
        // (`KernelAbi::own_grid_params`): the block index is `ctaid`, and
        // the thread runs that block once (`vb` above any total, below
        // 2^64 less any stride, so the latch exits). One test of a
        // launch-wide value instead of the tests below (some twenty SASS
        // instructions a thread of a stencil).
        let [px, py, pz] = [
            Intrinsic::BlockIdxX,
            Intrinsic::BlockIdxY,
            Intrinsic::BlockIdxZ,
        ]
        .map(|w| self.hidden.intrinsics[w.index()]);
        // The latch reads these on either path.
        let [gx32, gy32] = [gx, gy].map(|v| self.builder.ins().ireduce(I32, v));
        let own_grid = (u64::from(KernelAbi::OWN_GRID) << 32) as i64;
        let own = self.own_grid_test(grid[0]);
        let own_block = self.builder.create_block();
        let general = self.builder.create_block();
        self.builder.ins().brif(own, own_block, &[], general, &[]);
        self.builder.seal_block(own_block);
        self.builder.seal_block(general);
        self.builder.switch_to_block(own_block);
        let past = self.builder.ins().iconst(I64, own_grid);
        self.builder
            .ins()
            .jump(start, &[past, px, py, pz].map(BlockArg::from));
        self.builder.switch_to_block(general);
        let any = self
            .builder
            .ins()
            .icmp(IntCC::UnsignedLessThan, first, total);
        let first_block = self.builder.create_block();
        self.builder.ins().brif(any, first_block, &[], exit, &[]);
        self.builder.seal_block(first_block);
        self.builder.switch_to_block(first_block);
        let first32 = self.builder.ins().ireduce(I32, first);
        let deep = self.flat_or_deep(one_d, start, first, first32);
        // A physical grid that is the virtual grid, from a host that did not
        // say so: each block's index is its own `ctaid`, no division, and
        // it runs that one virtual block (its `vb` is `total`, so the latch
        // exits).
        let [ny, nz] =
            [Intrinsic::GridDimY, Intrinsic::GridDimZ].map(|w| self.hidden.intrinsics[w.index()]);
        let gz32 = self.builder.ins().ireduce(I32, gz);
        let same_x = self.builder.ins().icmp(IntCC::Equal, stride, gx);
        let same_y = self.builder.ins().icmp(IntCC::Equal, ny, gy32);
        let same_z = self.builder.ins().icmp(IntCC::Equal, nz, gz32);
        let same_xy = self.builder.ins().band(same_x, same_y);
        let same = self.builder.ins().band(same_xy, same_z);
        let direct = self.builder.create_block();
        let divide = self.builder.create_block();
        self.builder.ins().brif(same, direct, &[], divide, &[]);
        self.builder.seal_block(deep);
        self.builder.seal_block(direct);
        self.builder.seal_block(divide);
        self.builder.switch_to_block(direct);
        self.builder
            .ins()
            .jump(start, &[total, px, py, pz].map(BlockArg::from));
        self.builder.switch_to_block(divide);
        let [x, y, z] = self.block_index(first32, gx32, gy32);
        self.builder
            .ins()
            .jump(start, &[first, x, y, z].map(BlockArg::from));

        self.builder.switch_to_block(start);
        let narrow = |v: Value, t: &mut Self| t.builder.ins().ireduce(I32, v);
        let block_idx = [bx, by, bz];
        let grid_dim = [gx, gy, gz].map(|v| narrow(v, self));
        for (which, v) in [
            Intrinsic::BlockIdxX,
            Intrinsic::BlockIdxY,
            Intrinsic::BlockIdxZ,
        ]
        .into_iter()
        .zip(block_idx)
        .chain(
            [
                Intrinsic::GridDimX,
                Intrinsic::GridDimY,
                Intrinsic::GridDimZ,
            ]
            .into_iter()
            .zip(grid_dim),
        ) {
            self.hidden.intrinsics[which.index()] = v;
        }
        if self.run_block(fuel, body)? {
            let next = self.builder.ins().iadd(vb, stride);
            let more = self
                .builder
                .ins()
                .icmp(IntCC::UnsignedLessThan, next, total);
            let again = self.builder.create_block();
            self.builder.ins().brif(more, again, &[], exit, &[]);
            self.builder.seal_block(again);
            self.builder.switch_to_block(again);
            // A trap here records the kernel function body's offset.
            self.builder.set_srcloc(body_srcloc);
            self.time_check();
            // A 1-D grid's index is `next` itself (`gx` is then the total,
            // below 2^32). Else `next < total`: its index is this one's
            // plus the stride's, each digit carried once (a digit and the
            // stride's are below their extent, so their sum is below twice
            // it).
            let next32 = self.builder.ins().ireduce(I32, next);
            let deep = self.flat_or_deep(one_d, start, next, next32);
            let add_carry = |t: &mut Self, a: Value, b: Value, extent: Value| {
                let sum = t.builder.ins().iadd(a, b);
                let carry = t
                    .builder
                    .ins()
                    .icmp(IntCC::UnsignedGreaterThanOrEqual, sum, extent);
                let wrapped = t.builder.ins().isub(sum, extent);
                let digit = t.builder.ins().select(carry, wrapped, sum);
                (digit, t.builder.ins().uextend(I32, carry))
            };
            let (x, carry) = add_carry(self, bx, sx, gx32);
            let by = self.builder.ins().iadd(by, carry);
            let (y, carry) = add_carry(self, by, sy, gy32);
            let z = self.builder.ins().iadd(bz, sz);
            let z = self.builder.ins().iadd(z, carry);
            self.builder
                .ins()
                .jump(start, &[next, x, y, z].map(BlockArg::from));
            self.builder.seal_block(deep);
        }
        self.builder.seal_block(start);
        self.builder.seal_block(exit);
        self.builder.switch_to_block(exit);
        self.builder.ins().return_(&[]);
        Ok(())
    }

    /// The kernel for launches of the guest's grid itself without a time
    /// limit only ([`GridVariant::Own`]): the block index is `ctaid`, and
    /// the body runs once with fresh fuel, no loop and no time checks. The
    /// host launches it only for a launch it marked as the guest's own grid
    /// ([`KernelAbi::own_grid_params`]) without a time limit; the kernel
    /// does not test that again (a test of launch-wide values before the
    /// body cost a 3-D stencil 7% on an H200, `specialize`'s docs), and on
    /// another launch it would still check every access, only compute on
    /// the wrong blocks and without its time limit.
    fn own_block(
        &mut self,
        // The grid's parameters, which this variant does not read (the
        // same signature as `virtual_blocks`).
        _grid: [Value; 3],
        fuel: Value,
        body_srcloc: SourceLoc,
        body: &mut dyn FnMut(&mut Self) -> Result<bool, LowerError>,
    ) -> Result<(), LowerError> {
        self.enter_body();
        self.builder.set_srcloc(body_srcloc);
        // `ctaid` and `nctaid` (the intrinsics' physical values) are the
        // guest's block index and grid: the host marks only a launch of
        // the guest's grid itself.
        if self.run_block(fuel, body)? {
            self.builder.ins().return_(&[]);
        }
        Ok(())
    }

    /// Ends the entry block in a jump to a new block and goes on there
    /// (the copy for aligned arguments, `specialize`, replaces that jump).
    fn enter_body(&mut self) {
        let enter = self.builder.create_block();
        self.builder.ins().jump(enter, &[]);
        self.builder.seal_block(enter);
        self.builder.switch_to_block(enter);
    }

    /// Whether the host marked the launch as one of the guest's grid itself
    /// (`grid_x`'s high bits all ones: [`KernelAbi::own_grid_params`]).
    fn own_grid_test(&mut self, grid_x: Value) -> Value {
        let own_grid = (u64::from(KernelAbi::OWN_GRID) << 32) as i64;
        self.builder
            .ins()
            .icmp_imm_u(IntCC::UnsignedGreaterThanOrEqual, grid_x, own_grid)
    }

    /// One block's run of the kernel's body with fresh `fuel` (begun and
    /// done for the whole block in a cooperative kernel); whether its end
    /// is reachable.
    fn run_block(
        &mut self,
        fuel: Value,
        body: &mut dyn FnMut(&mut Self) -> Result<bool, LowerError>,
    ) -> Result<bool, LowerError> {
        self.builder.def_var(self.fuel, fuel);
        if self.hidden.cooperative {
            self.runtime_call(RuntimeCheck::BlockBegin, &[]);
        }
        let reachable = body(self)?;
        if reachable && self.hidden.cooperative {
            self.runtime_call(RuntimeCheck::BlockDone, &[]);
        }
        Ok(reachable)
    }

    /// Ends the current block in a branch on `one_d`: a 1-D grid's block
    /// `v` (`v32` its low bits) jumps to `start` as index `(v, 0, 0)`; the
    /// returned block (switched to, not sealed) is the other grids' path.
    fn flat_or_deep(&mut self, one_d: Value, start: Block, v: Value, v32: Value) -> Block {
        let b = &mut self.builder;
        let flat = b.create_block();
        let deep = b.create_block();
        b.ins().brif(one_d, flat, &[], deep, &[]);
        b.seal_block(flat);
        b.switch_to_block(flat);
        let zero = b.ins().iconst(I32, 0);
        b.ins()
            .jump(start, &[v, v32, zero, zero].map(BlockArg::from));
        b.switch_to_block(deep);
        deep
    }

    /// The 3-D index `(v % gx, v / gx % gy, v / (gx * gy))` of block `v`
    /// of a grid of `gx` x `gy` x ... (all `u32`, extents at least 1): two
    /// 32-bit divisions, the remainders by multiply and subtract.
    fn block_index(&mut self, v: Value, gx: Value, gy: Value) -> [Value; 3] {
        let b = &mut self.builder;
        let rest = b.ins().udiv(v, gx);
        let rest_gx = b.ins().imul(rest, gx);
        let x = b.ins().isub(v, rest_gx);
        let z = b.ins().udiv(rest, gy);
        let z_gy = b.ins().imul(z, gy);
        let y = b.ins().isub(rest, z_gy);
        [x, y, z]
    }

    /// The launch's time check (`docs/kernels.md`, "Time limit"): traps
    /// `TimeLimit` (at the current source location) once the thread has
    /// run longer than the launch's time limit. The clock is the thread's
    /// own: no memory is read, so a check every thread makes costs no
    /// shared traffic.
    fn time_check(&mut self) {
        if self.untimed {
            return;
        }
        let Hidden {
            time_limit,
            clock,
            start,
            ..
        } = self.hidden;
        let call = self.builder.ins().call(clock, &[]);
        let now = self.builder.inst_results(call)[0];
        let elapsed = self.builder.ins().isub(now, start);
        let over = self
            .builder
            .ins()
            .icmp(IntCC::UnsignedGreaterThan, elapsed, time_limit);
        self.builder
            .ins()
            .trapnz(over, KernelTrap::TimeLimit.trap_code());
    }

    /// Translates defined function `func_index` at the current position,
    /// its parameters bound to `args`. Returns its results, or `None` when
    /// the code after it cannot execute (it always traps or loops).
    fn inline(
        &mut self,
        func_index: u32,
        args: &[Value],
    ) -> Result<Option<Vec<Value>>, LowerError> {
        let m = self.module;
        let def = m
            .defined(func_index)
            .ok_or_else(|| internal("inlining a function that is not defined"))?;
        let ty = m.func_type(func_index)?;
        let body = &m.bodies[def];

        let mut locals = Vec::with_capacity(args.len());
        let mut args = args.iter().copied();
        for &param in ty.params() {
            let local = self.declare_local(param)?;
            for var in local.vars() {
                let arg = args.next().ok_or_else(|| internal("too few arguments"))?;
                self.builder.def_var(var, arg);
            }
            locals.push(local);
        }
        let mut reader = body.get_locals_reader().map_err(invalid)?;
        for _ in 0..reader.get_count() {
            let (count, ty) = reader.read().map_err(invalid)?;
            let zero = match ty {
                ValType::I32 => ConstValue::I32(0),
                ValType::I64 => ConstValue::I64(0),
                ValType::F32 => ConstValue::F32(0),
                ValType::F64 => ConstValue::F64(0),
                ValType::V128 => ConstValue::I32(0),
                ValType::Ref(_) => return Err(internal("a local of a reference type")),
            };
            let zero = self.constant(zero);
            for _ in 0..count {
                let local = self.declare_local(ty)?;
                for var in local.vars() {
                    self.builder.def_var(var, zero);
                }
                locals.push(local);
            }
        }

        let exit = self.builder.create_block();
        let exit_vars = self.declare_vars(ty.results())?;
        let mut st = FuncState {
            locals,
            stack: Vec::new(),
            control: vec![Frame {
                kind: FrameKind::Block,
                next: exit,
                next_vars: exit_vars,
                height: 0,
                exit_branched: false,
            }],
            reachable: true,
        };
        let mut operators = body.get_operators_reader().map_err(invalid)?;
        while !st.control.is_empty() {
            let (op, offset) = operators.read_with_offset().map_err(invalid)?;
            self.builder
                .set_srcloc(SourceLoc::new(u32::try_from(offset).unwrap_or(u32::MAX)));
            self.operator(&mut st, &op)?;
        }
        Ok(st.reachable.then_some(st.stack))
    }

    /// The variables that carry values of `types` (four for a `v128`).
    fn declare_vars(&mut self, types: &[ValType]) -> Result<Vec<Variable>, LowerError> {
        let mut vars = Vec::with_capacity(flat_len(types));
        for &t in types {
            for &clif in clif_types(t)? {
                vars.push(self.builder.declare_var(clif));
            }
        }
        Ok(vars)
    }

    /// A local of type `ty`, its variables not yet defined.
    fn declare_local(&mut self, ty: ValType) -> Result<Local, LowerError> {
        Ok(match ty {
            ValType::V128 => Local::V128([(); LANES].map(|()| self.builder.declare_var(I32))),
            _ => Local::Scalar(self.builder.declare_var(clif_types(ty)?[0])),
        })
    }

    /// How many CLIF values a block type's parameters take (four for a
    /// `v128`), and its result types.
    fn block_type(&self, blockty: BlockType) -> Result<(usize, &'m [ValType]), LowerError> {
        let module = self.module;
        Ok(match blockty {
            BlockType::Empty => (0, &[]),
            BlockType::Type(ValType::I32) => (0, &[ValType::I32]),
            BlockType::Type(ValType::I64) => (0, &[ValType::I64]),
            BlockType::Type(ValType::F32) => (0, &[ValType::F32]),
            BlockType::Type(ValType::F64) => (0, &[ValType::F64]),
            BlockType::Type(ValType::V128) => (0, &[ValType::V128]),
            BlockType::Type(_) => return Err(internal("a reference block type")),
            BlockType::FuncType(index) => {
                let ty = module
                    .types
                    .get(index as usize)
                    .and_then(Option::as_ref)
                    .ok_or_else(|| internal("block type is not a function type"))?;
                (flat_len(ty.params()), ty.results())
            }
        })
    }

    fn constant(&mut self, value: ConstValue) -> Value {
        let ins = self.builder.ins();
        match value {
            ConstValue::I32(v) => ins.iconst(I32, i64::from(v.cast_unsigned())),
            ConstValue::I64(v) => ins.iconst(I64, v),
            ConstValue::F32(bits) => ins.f32const(Ieee32::with_bits(bits)),
            ConstValue::F64(bits) => ins.f64const(Ieee64::with_bits(bits)),
            // A `v128` is four values: `simd::Translator::v128_const`.
            ConstValue::V128(bits) => ins.iconst(I32, i64::from(bits as u32)),
        }
    }

    /// Defines `vars` as `args` and jumps to `dest`.
    fn jump(&mut self, dest: Block, vars: &[Variable], args: &[Value]) {
        for (&var, &arg) in vars.iter().zip(args) {
            self.builder.def_var(var, arg);
        }
        self.builder.ins().jump(dest, &[]);
    }

    fn operator(&mut self, st: &mut FuncState, op: &Operator<'_>) -> Result<(), LowerError> {
        if !st.reachable {
            return self.dead_operator(st, op);
        }
        if let Some(emit) = unary_op(op) {
            let x = st.pop()?;
            st.stack.push(emit(&mut self.builder, x));
            return Ok(());
        }
        if let Some(emit) = binary_op(op) {
            let y = st.pop()?;
            let x = st.pop()?;
            st.stack.push(emit(&mut self.builder, x, y));
            return Ok(());
        }
        if let Some((memarg, access)) = memory_access(op) {
            return self.memory(st, memarg, access);
        }
        if let Some((memarg, atomic)) = atomic_access(op) {
            return self.atomic(st, memarg, atomic);
        }
        if self.simd(st, op)? {
            return Ok(());
        }
        match *op {
            Operator::Unreachable => {
                self.builder.ins().trap(KernelTrap::Unreachable.trap_code());
                st.reachable = false;
            }
            Operator::Nop => {}
            Operator::Block { blockty } => {
                let (params, results) = self.block_type(blockty)?;
                let next = self.builder.create_block();
                let next_vars = self.declare_vars(results)?;
                let height = st
                    .stack
                    .len()
                    .checked_sub(params)
                    .ok_or_else(|| internal("operand stack underflow"))?;
                st.control.push(Frame {
                    kind: FrameKind::Block,
                    next,
                    next_vars,
                    height,
                    exit_branched: false,
                });
            }
            Operator::Loop { blockty } => self.loop_header(st, blockty)?,
            Operator::If { blockty } => self.if_head(st, blockty)?,
            Operator::Else => self.else_arm(st)?,
            Operator::End => self.end(st)?,
            Operator::Br { relative_depth } => self.br(st, relative_depth)?,
            Operator::BrIf { relative_depth } => self.br_if(st, relative_depth)?,
            Operator::BrTable { ref targets } => self.br_table(st, targets)?,
            Operator::Return => {
                let outermost = u32::try_from(st.control.len() - 1)
                    .map_err(|_| internal("control stack too deep"))?;
                self.br(st, outermost)?;
            }
            Operator::Call { function_index } => self.call(st, function_index)?,
            Operator::Drop => {
                let n = if self.v128_operand() { LANES } else { 1 };
                st.pop_n(n)?;
            }
            Operator::Select | Operator::TypedSelect { .. } => {
                let v128 = match *op {
                    Operator::TypedSelect { ty } => ty == ValType::V128,
                    _ => self.v128_operand(),
                };
                let n = if v128 { LANES } else { 1 };
                let condition = st.pop()?;
                let if_false = st.pop_n(n)?;
                let if_true = st.pop_n(n)?;
                for (t, f) in if_true.into_iter().zip(if_false) {
                    let value = self.builder.ins().select(condition, t, f);
                    st.stack.push(value);
                }
            }
            Operator::LocalGet { local_index } => {
                for var in st.local(local_index)?.vars() {
                    let value = self.builder.use_var(var);
                    st.stack.push(value);
                }
            }
            Operator::LocalSet { local_index } => {
                let local = st.local(local_index)?;
                let values = st.pop_n(local.len())?;
                for (var, value) in local.vars().zip(values) {
                    self.builder.def_var(var, value);
                }
            }
            Operator::LocalTee { local_index } => {
                let local = st.local(local_index)?;
                let values = st.top_n(local.len())?.to_vec();
                for (var, value) in local.vars().zip(values) {
                    self.builder.def_var(var, value);
                }
            }
            Operator::GlobalGet { global_index } => {
                match self.module.globals.get(global_index as usize).copied() {
                    Some(GlobalKind::Const(ConstValue::V128(bits))) => {
                        let lanes = self.v128_const(bits);
                        st.stack.extend(lanes);
                    }
                    Some(GlobalKind::Const(value)) => {
                        let value = self.constant(value);
                        st.stack.push(value);
                    }
                    Some(GlobalKind::MutableV128) => {
                        for var in self.thread_v128_global(global_index)? {
                            let word = self.builder.use_var(var);
                            st.stack.push(word);
                        }
                    }
                    _ => {
                        let var = self.thread_global(global_index)?;
                        let value = self.builder.use_var(var);
                        st.stack.push(value);
                    }
                }
            }
            Operator::GlobalSet { global_index }
                if matches!(
                    self.module.globals.get(global_index as usize),
                    Some(GlobalKind::MutableV128)
                ) =>
            {
                let words = st.pop_n(4)?;
                let vars = self.thread_v128_global(global_index)?;
                for (var, word) in vars.into_iter().zip(words) {
                    self.builder.def_var(var, word);
                }
            }
            Operator::GlobalSet { global_index } => {
                let value = st.pop()?;
                let var = self.thread_global(global_index)?;
                if let Some(w) = &self.window
                    && w.sp == global_index
                {
                    // The stack grows down; below the window it would reach
                    // memory other threads share.
                    let low = w.low;
                    let wide = self.builder.ins().uextend(I64, value);
                    let below = self.builder.ins().icmp(IntCC::SignedLessThan, wide, low);
                    self.builder
                        .ins()
                        .trapnz(below, KernelTrap::StackOverflow.trap_code());
                }
                self.builder.def_var(var, value);
            }
            Operator::AtomicFence { .. } => self.atomic_fence(),
            Operator::MemoryCopy { .. } => self.memory_copy(st)?,
            Operator::MemoryFill { .. } => self.memory_fill(st)?,
            Operator::CallIndirect {
                type_index,
                table_index,
            } => self.call_indirect(st, type_index, table_index)?,
            Operator::MemorySize { .. } => {
                let shift = self.builder.ins().iconst(I64, 16);
                let pages = self.builder.ins().ushr(self.hidden.mem_len, shift);
                let pages = self.builder.ins().ireduce(I32, pages);
                st.stack.push(pages);
            }
            Operator::I32Const { value } => {
                let value = self.constant(ConstValue::I32(value));
                st.stack.push(value);
            }
            Operator::I64Const { value } => {
                let value = self.constant(ConstValue::I64(value));
                st.stack.push(value);
            }
            Operator::F32Const { value } => {
                let value = self.constant(ConstValue::F32(value.bits()));
                st.stack.push(value);
            }
            Operator::F64Const { value } => {
                let value = self.constant(ConstValue::F64(value.bits()));
                st.stack.push(value);
            }
            _ => {
                return Err(LowerError::Unsupported(UnsupportedOp {
                    op: op_name(op),
                    offset: u64::from(self.builder.srcloc().bits()),
                    reason: String::from("the translator has no rule for it"),
                }));
            }
        }
        Ok(())
    }

    /// An operator in dead code: only the block structure is tracked.
    fn dead_operator(&mut self, st: &mut FuncState, op: &Operator<'_>) -> Result<(), LowerError> {
        let top_is_dead = matches!(
            st.control.last(),
            Some(Frame {
                kind: FrameKind::Dead,
                ..
            })
        );
        match op {
            Operator::Block { .. } | Operator::Loop { .. } | Operator::If { .. } => {
                st.control.push(Frame {
                    kind: FrameKind::Dead,
                    next: Block::reserved_value(),
                    next_vars: Vec::new(),
                    height: st.stack.len(),
                    exit_branched: false,
                });
            }
            Operator::Else if !top_is_dead => self.else_arm(st)?,
            Operator::End if top_is_dead => {
                st.control.pop();
            }
            Operator::End => self.end(st)?,
            _ => {}
        }
        Ok(())
    }

    fn loop_header(&mut self, st: &mut FuncState, blockty: BlockType) -> Result<(), LowerError> {
        let (params, results) = self.block_type(blockty)?;
        let header = self.builder.create_block();
        let next = self.builder.create_block();
        let next_vars = self.declare_vars(results)?;
        let param_types: Vec<Type> = st
            .top_n(params)?
            .iter()
            .map(|&v| self.builder.func.dfg.value_type(v))
            .collect();
        let header_vars: Vec<Variable> = param_types
            .into_iter()
            .map(|t| self.builder.declare_var(t))
            .collect();
        let args = st.pop_n(params)?;
        self.jump(header, &header_vars, &args);

        self.builder.switch_to_block(header);
        let height = st.stack.len();
        for &var in &header_vars {
            let value = self.builder.use_var(var);
            st.stack.push(value);
        }
        // Fuel and the thread's clock, once on entry and once per back
        // edge. Both are conditional traps (a branch to a stub that never
        // comes back), so a GPU pays no reconvergence for them: a check
        // every few thousand iterations behind a branch that rejoins the
        // loop cost an H100 1.9x on a tight loop, more than reading the
        // cycle counter each time.
        // `bench-unsandboxed` (never for production: benchmarks only)
        // spends no fuel, so an endless loop runs until the time limit.
        #[cfg(not(feature = "bench-unsandboxed"))]
        let fuel = self.builder.use_var(self.fuel);
        #[cfg(not(feature = "bench-unsandboxed"))]
        self.builder
            .ins()
            .trapz(fuel, KernelTrap::OutOfFuel.trap_code());
        self.time_check();
        #[cfg(not(feature = "bench-unsandboxed"))]
        {
            let fuel = self.builder.ins().iadd_imm_s(fuel, -1);
            self.builder.def_var(self.fuel, fuel);
        }

        st.control.push(Frame {
            kind: FrameKind::Loop {
                header,
                header_vars,
            },
            next,
            next_vars,
            height,
            exit_branched: false,
        });
        Ok(())
    }

    fn if_head(&mut self, st: &mut FuncState, blockty: BlockType) -> Result<(), LowerError> {
        let condition = st.pop()?;
        let (params, results) = self.block_type(blockty)?;
        let next = self.builder.create_block();
        let next_vars = self.declare_vars(results)?;
        let else_params = st.top_n(params)?.to_vec();
        let then_block = self.builder.create_block();
        let else_block = self.builder.create_block();
        self.builder
            .ins()
            .brif(condition, then_block, &[], else_block, &[]);
        self.builder.seal_block(then_block);
        self.builder.seal_block(else_block);
        self.builder.switch_to_block(then_block);
        st.control.push(Frame {
            kind: FrameKind::If {
                else_block,
                else_params,
                else_seen: false,
            },
            next,
            next_vars,
            height: st
                .stack
                .len()
                .checked_sub(params)
                .ok_or_else(|| internal("operand stack underflow"))?,
            exit_branched: false,
        });
        Ok(())
    }

    fn else_arm(&mut self, st: &mut FuncState) -> Result<(), LowerError> {
        let reachable = st.reachable;
        let results = match st.control.last() {
            Some(frame) => frame.next_vars.len(),
            None => return Err(internal("else outside a block")),
        };
        let args = if reachable {
            st.top_n(results)?.to_vec()
        } else {
            Vec::new()
        };
        let frame = st
            .control
            .last_mut()
            .ok_or_else(|| internal("else outside a block"))?;
        let FrameKind::If {
            else_block,
            else_params,
            else_seen,
        } = &mut frame.kind
        else {
            return Err(internal("else outside an if"));
        };
        if reachable {
            for (&var, &arg) in frame.next_vars.iter().zip(&args) {
                self.builder.def_var(var, arg);
            }
            self.builder.ins().jump(frame.next, &[]);
            frame.exit_branched = true;
        }
        *else_seen = true;
        st.stack.truncate(frame.height);
        st.stack.extend_from_slice(else_params);
        self.builder.switch_to_block(*else_block);
        st.reachable = true;
        Ok(())
    }

    fn end(&mut self, st: &mut FuncState) -> Result<(), LowerError> {
        let frame = st
            .control
            .pop()
            .ok_or_else(|| internal("end outside a block"))?;
        let mut next_reachable = frame.exit_branched;
        if st.reachable {
            let args = st.top_n(frame.next_vars.len())?.to_vec();
            self.jump(frame.next, &frame.next_vars, &args);
            next_reachable = true;
        }
        match frame.kind {
            FrameKind::Loop { header, .. } => self.builder.seal_block(header),
            FrameKind::If {
                else_block,
                else_params,
                else_seen: false,
            } => {
                // No `else`: the false arm passes the parameters through.
                self.builder.switch_to_block(else_block);
                self.jump(frame.next, &frame.next_vars, &else_params);
                next_reachable = true;
            }
            _ => {}
        }
        st.stack.truncate(frame.height);
        st.reachable = next_reachable;
        if next_reachable {
            self.builder.switch_to_block(frame.next);
            self.builder.seal_block(frame.next);
            for &var in &frame.next_vars {
                let value = self.builder.use_var(var);
                st.stack.push(value);
            }
        }
        Ok(())
    }

    fn br(&mut self, st: &mut FuncState, depth: u32) -> Result<(), LowerError> {
        let (dest, vars) = st.branch_target(depth)?;
        let args = st.top_n(vars.len())?.to_vec();
        self.jump(dest, &vars, &args);
        st.reachable = false;
        Ok(())
    }

    fn br_if(&mut self, st: &mut FuncState, depth: u32) -> Result<(), LowerError> {
        let condition = st.pop()?;
        let (dest, vars) = st.branch_target(depth)?;
        for (&var, &arg) in vars.iter().zip(st.top_n(vars.len())?) {
            self.builder.def_var(var, arg);
        }
        let fallthrough = self.builder.create_block();
        self.builder
            .ins()
            .brif(condition, dest, &[], fallthrough, &[]);
        self.builder.seal_block(fallthrough);
        self.builder.switch_to_block(fallthrough);
        Ok(())
    }

    /// `br_table`: every target goes through an edge block of its own (one
    /// per distinct depth) that sets the target's variables and jumps, so
    /// no `br_table` edge ever carries block arguments.
    fn br_table(&mut self, st: &mut FuncState, targets: &BrTable<'_>) -> Result<(), LowerError> {
        let index = st.pop()?;
        let mut edges: Vec<(u32, Block)> = Vec::new();
        let mut edge = |builder: &mut FunctionBuilder<'_>, depth: u32| {
            let block = match edges.iter().find(|(d, _)| *d == depth) {
                Some(&(_, block)) => block,
                None => {
                    let block = builder.create_block();
                    edges.push((depth, block));
                    block
                }
            };
            builder.func.dfg.block_call(block, &[])
        };
        let mut table = Vec::with_capacity(targets.len() as usize);
        for depth in targets.targets() {
            let depth = depth.map_err(invalid)?;
            table.push(edge(&mut self.builder, depth));
        }
        let default = edge(&mut self.builder, targets.default());
        let jump_table = self
            .builder
            .create_jump_table(JumpTableData::new(default, &table));
        self.builder.ins().br_table(index, jump_table);
        for (depth, block) in edges {
            self.builder.seal_block(block);
            self.builder.switch_to_block(block);
            let (dest, vars) = st.branch_target(depth)?;
            let args = st.top_n(vars.len())?.to_vec();
            self.jump(dest, &vars, &args);
        }
        st.reachable = false;
        Ok(())
    }

    fn call(&mut self, st: &mut FuncState, callee: u32) -> Result<(), LowerError> {
        let m = self.module;
        let decl = m
            .funcs
            .get(callee as usize)
            .ok_or_else(|| internal("call of a missing function"))?;
        if let Some((module, name)) = decl.import {
            if let Some(which) = AtomicIntrinsic::from_import(module, name) {
                return self.atomic_intrinsic(st, which);
            }
            if let Some(which) = CoopIntrinsic::from_import(module, name) {
                return self.coop_intrinsic(st, which);
            }
            if let Some(which) = MathIntrinsic::from_import(module, name) {
                let args = st.pop_n(which.arity())?;
                let result = match which {
                    MathIntrinsic::FmaF32 | MathIntrinsic::FmaF64 => {
                        self.builder.ins().fma(args[0], args[1], args[2])
                    }
                };
                st.stack.push(result);
                return Ok(());
            }
            let which = Intrinsic::from_import(module, name)
                .ok_or_else(|| internal("call of an import that is not an intrinsic"))?;
            st.stack.push(self.hidden.intrinsics[which.index()]);
            return Ok(());
        }
        let args = st.pop_n(flat_len(m.func_type(callee)?.params()))?;
        match self.inline(callee, &args)? {
            Some(results) => st.stack.extend(results),
            None => st.reachable = false,
        }
        Ok(())
    }

    /// A load or store: the bounds check of `docs/kernels.md`, then the
    /// access, little-endian and with no alignment promise.
    fn memory(
        &mut self,
        st: &mut FuncState,
        memarg: &MemArg,
        access: Access,
    ) -> Result<(), LowerError> {
        match access {
            Access::Load(kind, ty) => {
                let index = st.pop()?;
                let bytes = match kind {
                    Load::Full => ty.bytes(),
                    Load::U8 | Load::S8 => 1,
                    Load::U16 | Load::S16 => 2,
                    Load::U32 | Load::S32 => 4,
                };
                let value = if self.window_promoted() {
                    self.promoted_load(index, memarg.offset, bytes, kind, ty)?
                } else {
                    let addr = self.address(index, memarg.offset, bytes);
                    emit_load(&mut self.builder, kind, ty, addr)
                };
                st.stack.push(value);
            }
            Access::Store(kind) => {
                let value = st.pop()?;
                let index = st.pop()?;
                let bytes = match kind {
                    Store::Full => self.builder.func.dfg.value_type(value).bytes(),
                    Store::Low8 => 1,
                    Store::Low16 => 2,
                    Store::Low32 => 4,
                };
                if self.window_promoted() {
                    self.promoted_store(index, memarg.offset, bytes, kind, value)?;
                } else {
                    let addr = self.address(index, memarg.offset, bytes);
                    emit_store(&mut self.builder, kind, value, addr);
                }
            }
        }
        Ok(())
    }

    /// `ea = uextend(index) + offset`; trap unless `ea + bytes <= mem_len`;
    /// the host address ([`Self::host_address`]), recorded for
    /// [`window::resolve_frame_accesses`] when the kernel has a window.
    fn address(&mut self, wasm_index: Value, offset: u64, bytes: u32) -> Value {
        let (ea, check) = self.checked_ea(wasm_index, offset, bytes);
        let addr = self.host_address(ea, bytes);
        if self.window.is_some()
            && let Some(select) = self.builder.func.dfg.value_def(addr).inst()
        {
            self.window_accesses.push(WindowAccess {
                select,
                check,
                index: wasm_index,
                offset,
                bytes,
            });
        }
        addr
    }

    /// `ea = uextend(index) + offset` (`i64`); traps unless `ea + bytes <=
    /// mem_len`. Returns `ea` and the check (its `trapnz`).
    fn checked_ea(&mut self, wasm_index: Value, offset: u64, bytes: u32) -> (Value, Inst) {
        let ea = self.effective_address(wasm_index, offset);
        let check = self.bounds_check(ea, bytes);
        (ea, check)
    }

    /// `ea = uextend(index) + offset` (`i64`).
    fn effective_address(&mut self, wasm_index: Value, offset: u64) -> Value {
        let index = self.builder.ins().uextend(I64, wasm_index);
        // Both are below 2^32 (memory64 is refused), so the sums cannot wrap.
        match offset {
            0 => index,
            _ => self.builder.ins().iadd_imm_u(index, offset.cast_signed()),
        }
    }

    /// Traps `HeapOutOfBounds` unless `ea + bytes <= mem_len`; returns the
    /// `trapnz`.
    #[cfg(not(feature = "bench-unsandboxed"))]
    fn bounds_check(&mut self, ea: Value, bytes: u32) -> Inst {
        let end = self.builder.ins().iadd_imm_u(ea, i64::from(bytes));
        let out_of_bounds =
            self.builder
                .ins()
                .icmp(IntCC::UnsignedGreaterThan, end, self.hidden.mem_len);
        self.builder
            .ins()
            .trapnz(out_of_bounds, KernelTrap::HeapOutOfBounds.trap_code())
    }

    /// `bench-unsandboxed` (never for production: benchmarks only): no
    /// bounds check, so a kernel can read and write any device memory.
    /// Returns an unused constant, which the window code may remove as it
    /// removes a frame access's check.
    #[cfg(feature = "bench-unsandboxed")]
    fn bounds_check(&mut self, _ea: Value, _bytes: u32) -> Inst {
        let zero = self.builder.ins().iconst(I64, 0);
        self.builder.func.dfg.value_def(zero).unwrap_inst()
    }

    /// The thread's copy of mutable global `index`.
    fn thread_global(&self, index: u32) -> Result<Variable, LowerError> {
        self.globals
            .iter()
            .find(|g| g.index == index && g.lane.is_none())
            .map(|g| g.var)
            .ok_or_else(|| internal("a global the detector did not record"))
    }

    /// The thread's copy of `v128` global `index`: its four words' variables,
    /// word 0 first (the order of a `v128`'s values on the stack).
    fn thread_v128_global(&self, index: u32) -> Result<[Variable; 4], LowerError> {
        let mut vars = [None; 4];
        for g in self.globals.iter().filter(|g| g.index == index) {
            if let Some(lane) = g.lane {
                vars[usize::from(lane) & 3] = Some(g.var);
            }
        }
        match vars {
            [Some(a), Some(b), Some(c), Some(d)] => Ok([a, b, c, d]),
            _ => Err(internal("a v128 global the detector did not record")),
        }
    }

    /// Traps `HeapOutOfBounds` unless `[at, at + len)` (`i64`s below 2^33)
    /// lies in the guest memory.
    fn check_range(&mut self, at: Value, len: Value) {
        // `bench-unsandboxed` (never for production: benchmarks only).
        if cfg!(feature = "bench-unsandboxed") {
            return;
        }
        let end = self.builder.ins().iadd(at, len);
        let out = self
            .builder
            .ins()
            .icmp(IntCC::UnsignedGreaterThan, end, self.hidden.mem_len);
        self.builder
            .ins()
            .trapnz(out, KernelTrap::HeapOutOfBounds.trap_code());
    }

    /// `memory.copy`: both ranges are checked before any byte moves (Wasm
    /// traps with nothing written); then a copy forward when the
    /// destination is below the source, else backward, so overlapping
    /// ranges copy as `memmove` does; 4 bytes a step when the addresses and
    /// length are multiples of 4, else a byte a step. Every step checks the
    /// launch's time (a copy of gigabytes is bounded like a loop).
    fn memory_copy(&mut self, st: &mut FuncState) -> Result<(), LowerError> {
        let n = st.pop()?;
        let src = st.pop()?;
        let dst = st.pop()?;
        let [n, src, dst] = [n, src, dst].map(|v| self.builder.ins().uextend(I64, v));
        self.check_range(src, n);
        self.check_range(dst, n);
        let forward = self
            .builder
            .ins()
            .icmp(IntCC::UnsignedLessThanOrEqual, dst, src);
        let bits = self.builder.ins().bor(src, dst);
        let bits = self.builder.ins().bor(bits, n);
        self.bulk_loops(bits, n, |t, step, ty, k| {
            // Forward: k; backward: n - step - k.
            let back = t.builder.ins().isub(n, k);
            let back = t.builder.ins().iadd_imm_s(back, -step);
            let k = t.builder.ins().select(forward, k, back);
            let from = t.builder.ins().iadd(src, k);
            let to = t.builder.ins().iadd(dst, k);
            let bytes = u32::try_from(step).unwrap_or(1);
            let from = t.host_address(from, bytes);
            let flags = MemFlagsData::new().with_endianness(Endianness::Little);
            let value = match ty {
                I8 => t.builder.ins().uload8(I32, flags, from, 0),
                _ => t.builder.ins().load(I32, flags, from, 0),
            };
            let to = t.host_address(to, bytes);
            match ty {
                I8 => t.builder.ins().istore8(flags, value, to, 0),
                _ => t.builder.ins().store(flags, value, to, 0),
            };
        });
        Ok(())
    }

    /// `memory.fill`: the range is checked before any byte is written; 4
    /// bytes a step when the address and length are multiples of 4.
    fn memory_fill(&mut self, st: &mut FuncState) -> Result<(), LowerError> {
        let n = st.pop()?;
        let value = st.pop()?;
        let dst = st.pop()?;
        let [n, dst] = [n, dst].map(|v| self.builder.ins().uextend(I64, v));
        self.check_range(dst, n);
        let mask = self.builder.ins().iconst(I32, 0xff);
        let byte = self.builder.ins().band(value, mask);
        let spread = self.builder.ins().iconst(I32, 0x0101_0101);
        let word = self.builder.ins().imul(byte, spread);
        let bits = self.builder.ins().bor(dst, n);
        self.bulk_loops(bits, n, |t, step, ty, k| {
            let to = t.builder.ins().iadd(dst, k);
            let to = t.host_address(to, u32::try_from(step).unwrap_or(1));
            let flags = MemFlagsData::new().with_endianness(Endianness::Little);
            match ty {
                I8 => t.builder.ins().istore8(flags, byte, to, 0),
                _ => t.builder.ins().store(flags, word, to, 0),
            };
        });
        Ok(())
    }

    /// The two loops of a bulk operation over `n` bytes: 4 bytes a step
    /// when `bits` (the addresses and length or'ed) is a multiple of 4,
    /// else one. `step(t, bytes, type, k)` moves the bytes at offset `k`
    /// (`i64`) with accesses of `type` (`I32` or `I8`).
    fn bulk_loops(
        &mut self,
        bits: Value,
        n: Value,
        mut step: impl FnMut(&mut Self, i64, Type, Value),
    ) {
        // A promoted window is reached by address here (`host_address`).
        self.spill_window();
        let three = self.builder.ins().iconst(I64, 3);
        let low = self.builder.ins().band(bits, three);
        let words = self.builder.create_block();
        let bytes = self.builder.create_block();
        let done = self.builder.create_block();
        self.builder.ins().brif(low, bytes, &[], words, &[]);
        self.builder.seal_block(words);
        self.builder.seal_block(bytes);
        for (block, size, ty) in [(words, 4i64, I32), (bytes, 1, I8)] {
            self.builder.switch_to_block(block);
            let header = self.builder.create_block();
            let k = self.builder.append_block_param(header, I64);
            let body = self.builder.create_block();
            let zero = self.builder.ins().iconst(I64, 0);
            self.builder.ins().jump(header, &[zero.into()]);
            self.builder.switch_to_block(header);
            let more = self.builder.ins().icmp(IntCC::UnsignedLessThan, k, n);
            self.builder.ins().brif(more, body, &[], done, &[]);
            self.builder.seal_block(body);
            self.builder.switch_to_block(body);
            self.time_check();
            step(self, size, ty, k);
            let next = self.builder.ins().iadd_imm_s(k, size);
            self.builder.ins().jump(header, &[next.into()]);
            self.builder.seal_block(header);
        }
        self.builder.seal_block(done);
        self.builder.switch_to_block(done);
        self.reload_window();
    }

    /// `call_indirect` through a table whose contents are fixed (the
    /// detector checked): a `br_table` over the table's slots, each slot
    /// going to an inlined copy of its function when the function has the
    /// call's type, else to a trap: `IndirectCallToNull` for a null slot,
    /// `BadSignature` for another type, `TableOutOfBounds` past the end
    /// (Wasm's checks, in its order).
    fn call_indirect(
        &mut self,
        st: &mut FuncState,
        type_index: u32,
        table: u32,
    ) -> Result<(), LowerError> {
        let m = self.module;
        let index = st.pop()?;
        let ty = m
            .types
            .get(type_index as usize)
            .and_then(Option::as_ref)
            .ok_or_else(|| internal("call_indirect of a type that is not a function type"))?;
        let args = st.pop_n(flat_len(ty.params()))?;
        let contents = m
            .table_contents(table)
            .map_err(|_| internal("call_indirect through a table the detector refused"))?;

        let mut trap_blocks: Vec<(KernelTrap, Block)> = Vec::new();
        let mut trap_block = |b: &mut FunctionBuilder<'_>, trap: KernelTrap| -> BlockCall {
            let block = match trap_blocks.iter().find(|(t, _)| *t == trap) {
                Some(&(_, block)) => block,
                None => {
                    let block = b.create_block();
                    trap_blocks.push((trap, block));
                    block
                }
            };
            b.func.dfg.block_call(block, &[])
        };
        let mut callees: Vec<(u32, Block)> = Vec::new();
        let mut blocks = alloc::collections::BTreeMap::new();
        let mut slots = Vec::with_capacity(contents.len());
        for slot in &contents {
            let call = match *slot {
                None => trap_block(&mut self.builder, KernelTrap::IndirectCallToNull),
                Some(f) if m.same_type(f, type_index) => {
                    let block = match blocks.get(&f) {
                        Some(&block) => block,
                        None => {
                            let block = self.builder.create_block();
                            blocks.insert(f, block);
                            callees.push((f, block));
                            block
                        }
                    };
                    self.builder.func.dfg.block_call(block, &[])
                }
                Some(_) => trap_block(&mut self.builder, KernelTrap::BadSignature),
            };
            slots.push(call);
        }
        let default = trap_block(&mut self.builder, KernelTrap::TableOutOfBounds);
        let jump_table = self
            .builder
            .create_jump_table(JumpTableData::new(default, &slots));
        self.builder.ins().br_table(index, jump_table);

        for (trap, block) in trap_blocks {
            self.builder.seal_block(block);
            self.builder.switch_to_block(block);
            self.builder.ins().trap(trap.trap_code());
        }
        let join = self.builder.create_block();
        let join_vars = self.declare_vars(ty.results())?;
        let mut returns = false;
        let srcloc = self.builder.srcloc();
        for (f, block) in callees {
            self.builder.seal_block(block);
            self.builder.switch_to_block(block);
            if let Some(results) = self.inline(f, &args)? {
                self.jump(join, &join_vars, &results);
                returns = true;
            }
            self.builder.set_srcloc(srcloc);
        }
        self.builder.seal_block(join);
        if returns {
            self.builder.switch_to_block(join);
            for &var in &join_vars {
                let value = self.builder.use_var(var);
                st.stack.push(value);
            }
        } else {
            st.reachable = false;
        }
        Ok(())
    }
}

/// A load of `kind` to `ty` from host address `addr`, little endian.
fn emit_load(b: &mut FunctionBuilder<'_>, kind: Load, ty: Type, addr: Value) -> Value {
    let flags = MemFlagsData::new().with_endianness(Endianness::Little);
    let ins = b.ins();
    match kind {
        Load::Full => ins.load(ty, flags, addr, 0),
        Load::U8 => ins.uload8(ty, flags, addr, 0),
        Load::S8 => ins.sload8(ty, flags, addr, 0),
        Load::U16 => ins.uload16(ty, flags, addr, 0),
        Load::S16 => ins.sload16(ty, flags, addr, 0),
        Load::U32 => ins.uload32(flags, addr, 0),
        Load::S32 => ins.sload32(flags, addr, 0),
    }
}

/// A store of `kind` of `value` to host address `addr`, little endian.
fn emit_store(b: &mut FunctionBuilder<'_>, kind: Store, value: Value, addr: Value) {
    let flags = MemFlagsData::new().with_endianness(Endianness::Little);
    let ins = b.ins();
    match kind {
        Store::Full => ins.store(flags, value, addr, 0),
        Store::Low8 => ins.istore8(flags, value, addr, 0),
        Store::Low16 => ins.istore16(flags, value, addr, 0),
        Store::Low32 => ins.istore32(flags, value, addr, 0),
    };
}

/// Emits a one-operand operator.
pub(super) type UnaryFn = fn(&mut FunctionBuilder<'_>, Value) -> Value;
/// Emits a two-operand operator.
pub(super) type BinaryFn = fn(&mut FunctionBuilder<'_>, Value, Value) -> Value;

/// The rule for each one-operand numeric operator, one row per operator.
pub(super) fn unary_op(op: &Operator<'_>) -> Option<UnaryFn> {
    use Operator as O;
    let emit: UnaryFn = match op {
        O::I32Clz | O::I64Clz => |b, x| b.ins().clz(x),
        O::I32Ctz | O::I64Ctz => |b, x| b.ins().ctz(x),
        O::I32Popcnt | O::I64Popcnt => |b, x| b.ins().popcnt(x),
        O::I32Eqz | O::I64Eqz => |b, x| {
            let zero = b.ins().icmp_imm_u(IntCC::Equal, x, 0);
            b.ins().uextend(I32, zero)
        },
        O::F32Abs | O::F64Abs => |b, x| b.ins().fabs(x),
        O::F32Neg | O::F64Neg => |b, x| b.ins().fneg(x),
        O::F32Ceil | O::F64Ceil => |b, x| b.ins().ceil(x),
        O::F32Floor | O::F64Floor => |b, x| b.ins().floor(x),
        O::F32Trunc | O::F64Trunc => |b, x| b.ins().trunc(x),
        O::F32Nearest | O::F64Nearest => |b, x| b.ins().nearest(x),
        O::F32Sqrt | O::F64Sqrt => |b, x| b.ins().sqrt(x),
        O::I32WrapI64 => |b, x| b.ins().ireduce(I32, x),
        O::I64ExtendI32S => |b, x| b.ins().sextend(I64, x),
        O::I64ExtendI32U => |b, x| b.ins().uextend(I64, x),
        O::I32Extend8S => |b, x| sign_extend_low(b, x, I8, I32),
        O::I32Extend16S => |b, x| sign_extend_low(b, x, I16, I32),
        O::I64Extend8S => |b, x| sign_extend_low(b, x, I8, I64),
        O::I64Extend16S => |b, x| sign_extend_low(b, x, I16, I64),
        O::I64Extend32S => |b, x| sign_extend_low(b, x, I32, I64),
        O::I32TruncF32S | O::I32TruncF64S => |b, x| trunc_checked(b, x, I32, true),
        O::I32TruncF32U | O::I32TruncF64U => |b, x| trunc_checked(b, x, I32, false),
        O::I64TruncF32S | O::I64TruncF64S => |b, x| trunc_checked(b, x, I64, true),
        O::I64TruncF32U | O::I64TruncF64U => |b, x| trunc_checked(b, x, I64, false),
        O::I32TruncSatF32S | O::I32TruncSatF64S => |b, x| b.ins().fcvt_to_sint_sat(I32, x),
        O::I32TruncSatF32U | O::I32TruncSatF64U => |b, x| b.ins().fcvt_to_uint_sat(I32, x),
        O::I64TruncSatF32S | O::I64TruncSatF64S => |b, x| b.ins().fcvt_to_sint_sat(I64, x),
        O::I64TruncSatF32U | O::I64TruncSatF64U => |b, x| b.ins().fcvt_to_uint_sat(I64, x),
        O::F32ConvertI32S | O::F32ConvertI64S => |b, x| b.ins().fcvt_from_sint(F32, x),
        O::F32ConvertI32U | O::F32ConvertI64U => |b, x| b.ins().fcvt_from_uint(F32, x),
        O::F64ConvertI32S | O::F64ConvertI64S => |b, x| b.ins().fcvt_from_sint(F64, x),
        O::F64ConvertI32U | O::F64ConvertI64U => |b, x| b.ins().fcvt_from_uint(F64, x),
        O::F32DemoteF64 => |b, x| b.ins().fdemote(F32, x),
        O::F64PromoteF32 => |b, x| b.ins().fpromote(F64, x),
        O::I32ReinterpretF32 => |b, x| b.ins().bitcast(I32, MemFlagsData::new(), x),
        O::I64ReinterpretF64 => |b, x| b.ins().bitcast(I64, MemFlagsData::new(), x),
        O::F32ReinterpretI32 => |b, x| b.ins().bitcast(F32, MemFlagsData::new(), x),
        O::F64ReinterpretI64 => |b, x| b.ins().bitcast(F64, MemFlagsData::new(), x),
        _ => return None,
    };
    Some(emit)
}

/// The rule for each two-operand numeric operator, one row per operator.
pub(super) fn binary_op(op: &Operator<'_>) -> Option<BinaryFn> {
    use Operator as O;
    let emit: BinaryFn = match op {
        O::I32Add | O::I64Add => |b, x, y| b.ins().iadd(x, y),
        O::I32Sub | O::I64Sub => |b, x, y| b.ins().isub(x, y),
        O::I32Mul | O::I64Mul => |b, x, y| b.ins().imul(x, y),
        O::I32DivS | O::I64DivS => sdiv_checked,
        O::I32DivU | O::I64DivU => |b, x, y| {
            b.ins()
                .trapz(y, KernelTrap::IntegerDivideByZero.trap_code());
            b.ins().udiv(x, y)
        },
        O::I32RemS | O::I64RemS => srem_checked,
        O::I32RemU | O::I64RemU => |b, x, y| {
            b.ins()
                .trapz(y, KernelTrap::IntegerDivideByZero.trap_code());
            b.ins().urem(x, y)
        },
        O::I32And | O::I64And => |b, x, y| b.ins().band(x, y),
        O::I32Or | O::I64Or => |b, x, y| b.ins().bor(x, y),
        O::I32Xor | O::I64Xor => |b, x, y| b.ins().bxor(x, y),
        O::I32Shl | O::I64Shl => |b, x, y| b.ins().ishl(x, y),
        O::I32ShrS | O::I64ShrS => |b, x, y| b.ins().sshr(x, y),
        O::I32ShrU | O::I64ShrU => |b, x, y| b.ins().ushr(x, y),
        O::I32Rotl | O::I64Rotl => |b, x, y| b.ins().rotl(x, y),
        O::I32Rotr | O::I64Rotr => |b, x, y| b.ins().rotr(x, y),
        O::I32Eq | O::I64Eq => |b, x, y| icmp(b, IntCC::Equal, x, y),
        O::I32Ne | O::I64Ne => |b, x, y| icmp(b, IntCC::NotEqual, x, y),
        O::I32LtS | O::I64LtS => |b, x, y| icmp(b, IntCC::SignedLessThan, x, y),
        O::I32LtU | O::I64LtU => |b, x, y| icmp(b, IntCC::UnsignedLessThan, x, y),
        O::I32GtS | O::I64GtS => |b, x, y| icmp(b, IntCC::SignedGreaterThan, x, y),
        O::I32GtU | O::I64GtU => |b, x, y| icmp(b, IntCC::UnsignedGreaterThan, x, y),
        O::I32LeS | O::I64LeS => |b, x, y| icmp(b, IntCC::SignedLessThanOrEqual, x, y),
        O::I32LeU | O::I64LeU => |b, x, y| icmp(b, IntCC::UnsignedLessThanOrEqual, x, y),
        O::I32GeS | O::I64GeS => |b, x, y| icmp(b, IntCC::SignedGreaterThanOrEqual, x, y),
        O::I32GeU | O::I64GeU => |b, x, y| icmp(b, IntCC::UnsignedGreaterThanOrEqual, x, y),
        O::F32Add | O::F64Add => |b, x, y| b.ins().fadd(x, y),
        O::F32Sub | O::F64Sub => |b, x, y| b.ins().fsub(x, y),
        O::F32Mul | O::F64Mul => |b, x, y| b.ins().fmul(x, y),
        O::F32Div | O::F64Div => |b, x, y| b.ins().fdiv(x, y),
        O::F32Min | O::F64Min => |b, x, y| b.ins().fmin(x, y),
        O::F32Max | O::F64Max => |b, x, y| b.ins().fmax(x, y),
        O::F32Copysign | O::F64Copysign => |b, x, y| b.ins().fcopysign(x, y),
        O::F32Eq | O::F64Eq => |b, x, y| fcmp(b, FloatCC::Equal, x, y),
        O::F32Ne | O::F64Ne => |b, x, y| fcmp(b, FloatCC::NotEqual, x, y),
        O::F32Lt | O::F64Lt => |b, x, y| fcmp(b, FloatCC::LessThan, x, y),
        O::F32Gt | O::F64Gt => |b, x, y| fcmp(b, FloatCC::GreaterThan, x, y),
        O::F32Le | O::F64Le => |b, x, y| fcmp(b, FloatCC::LessThanOrEqual, x, y),
        O::F32Ge | O::F64Ge => |b, x, y| fcmp(b, FloatCC::GreaterThanOrEqual, x, y),
        _ => return None,
    };
    Some(emit)
}

/// How a load reads memory.
#[derive(Clone, Copy)]
pub(super) enum Load {
    /// The whole type.
    Full,
    U8,
    S8,
    U16,
    S16,
    U32,
    S32,
}

/// How a store writes memory.
#[derive(Clone, Copy)]
pub(super) enum Store {
    /// The whole value.
    Full,
    Low8,
    Low16,
    Low32,
}

/// A memory access: a load (to a type) or a store.
#[derive(Clone, Copy)]
pub(super) enum Access {
    Load(Load, Type),
    Store(Store),
}

/// The rule for each load and store, one row per operator.
pub(super) fn memory_access<'o>(op: &'o Operator<'_>) -> Option<(&'o MemArg, Access)> {
    use Operator as O;
    Some(match op {
        O::I32Load { memarg } => (memarg, Access::Load(Load::Full, I32)),
        O::I64Load { memarg } => (memarg, Access::Load(Load::Full, I64)),
        O::F32Load { memarg } => (memarg, Access::Load(Load::Full, F32)),
        O::F64Load { memarg } => (memarg, Access::Load(Load::Full, F64)),
        O::I32Load8S { memarg } => (memarg, Access::Load(Load::S8, I32)),
        O::I32Load8U { memarg } => (memarg, Access::Load(Load::U8, I32)),
        O::I32Load16S { memarg } => (memarg, Access::Load(Load::S16, I32)),
        O::I32Load16U { memarg } => (memarg, Access::Load(Load::U16, I32)),
        O::I64Load8S { memarg } => (memarg, Access::Load(Load::S8, I64)),
        O::I64Load8U { memarg } => (memarg, Access::Load(Load::U8, I64)),
        O::I64Load16S { memarg } => (memarg, Access::Load(Load::S16, I64)),
        O::I64Load16U { memarg } => (memarg, Access::Load(Load::U16, I64)),
        O::I64Load32S { memarg } => (memarg, Access::Load(Load::S32, I64)),
        O::I64Load32U { memarg } => (memarg, Access::Load(Load::U32, I64)),
        O::I32Store { memarg }
        | O::I64Store { memarg }
        | O::F32Store { memarg }
        | O::F64Store { memarg } => (memarg, Access::Store(Store::Full)),
        O::I32Store8 { memarg } | O::I64Store8 { memarg } => (memarg, Access::Store(Store::Low8)),
        O::I32Store16 { memarg } | O::I64Store16 { memarg } => {
            (memarg, Access::Store(Store::Low16))
        }
        O::I64Store32 { memarg } => (memarg, Access::Store(Store::Low32)),
        _ => return None,
    })
}

/// A comparison, widened from CLIF's `i8` to Wasm's `i32` 0/1.
fn icmp(b: &mut FunctionBuilder<'_>, cc: IntCC, x: Value, y: Value) -> Value {
    let flag = b.ins().icmp(cc, x, y);
    b.ins().uextend(I32, flag)
}

/// A float comparison, widened from CLIF's `i8` to Wasm's `i32` 0/1.
fn fcmp(b: &mut FunctionBuilder<'_>, cc: FloatCC, x: Value, y: Value) -> Value {
    let flag = b.ins().fcmp(cc, x, y);
    b.ins().uextend(I32, flag)
}

/// `extendN_s`: sign-extends the low `narrow` bits of `x` to `wide`.
fn sign_extend_low(b: &mut FunctionBuilder<'_>, x: Value, narrow: Type, wide: Type) -> Value {
    let low = b.ins().ireduce(narrow, x);
    b.ins().sextend(wide, low)
}

/// Signed division: traps on a zero divisor and on `INT_MIN / -1`.
fn sdiv_checked(b: &mut FunctionBuilder<'_>, x: Value, y: Value) -> Value {
    b.ins()
        .trapz(y, KernelTrap::IntegerDivideByZero.trap_code());
    let int_min = match b.func.dfg.value_type(y) {
        I32 => i64::from(i32::MIN),
        _ => i64::MIN,
    };
    let minus_one = b.ins().icmp_imm_s(IntCC::Equal, y, -1);
    let is_min = b.ins().icmp_imm_s(IntCC::Equal, x, int_min);
    let overflow = b.ins().band(minus_one, is_min);
    b.ins()
        .trapnz(overflow, KernelTrap::IntegerOverflow.trap_code());
    b.ins().sdiv(x, y)
}

/// Signed remainder: traps on a zero divisor; `x % -1` is computed as
/// `x % 1` (0 for every `x`), so `srem` never sees `INT_MIN % -1`.
fn srem_checked(b: &mut FunctionBuilder<'_>, x: Value, y: Value) -> Value {
    b.ins()
        .trapz(y, KernelTrap::IntegerDivideByZero.trap_code());
    let ty = b.func.dfg.value_type(y);
    let minus_one = b.ins().icmp_imm_s(IntCC::Equal, y, -1);
    let one = b.ins().iconst(ty, 1);
    let divisor = b.ins().select(minus_one, one, y);
    b.ins().srem(x, divisor)
}

/// The open interval of floats a trapping `trunc` to a `bits`-bit integer
/// accepts, as `f64` (exact for every `f32` too). The same bounds as
/// wasmtime's `f64_cvt_to_int_bounds`.
fn cvt_to_int_bounds(signed: bool, bits: u32) -> (f64, f64) {
    match (signed, bits) {
        (true, 32) => (-2147483649.0, 2147483648.0),
        (true, _) => (-9223372036854777856.0, 9223372036854775808.0),
        (false, 32) => (-1.0, 4294967296.0),
        (false, _) => (-1.0, 18446744073709551616.0),
    }
}

/// A trapping `trunc` (wasmtime's guard, with our trap codes): NaN traps
/// `BadConversionToInteger`, a value outside the bounds `IntegerOverflow`
/// (as the Wasm spec and wasmtime name them), before
/// `fcvt_to_sint`/`fcvt_to_uint` runs. wasmtime rounds toward zero before
/// comparing; the bounds are integers, so comparing the value itself
/// decides the same.
fn trunc_checked(b: &mut FunctionBuilder<'_>, x: Value, to: Type, signed: bool) -> Value {
    let wide = match b.func.dfg.value_type(x) {
        F32 => b.ins().fpromote(F64, x),
        _ => x,
    };
    let is_nan = b.ins().fcmp(FloatCC::NotEqual, wide, wide);
    b.ins()
        .trapnz(is_nan, KernelTrap::BadConversionToInteger.trap_code());
    let overflow = KernelTrap::IntegerOverflow.trap_code();
    let (low, high) = cvt_to_int_bounds(signed, to.bits());
    let low = b.ins().f64const(low);
    let too_small = b.ins().fcmp(FloatCC::LessThanOrEqual, wide, low);
    b.ins().trapnz(too_small, overflow);
    let high = b.ins().f64const(high);
    let too_large = b.ins().fcmp(FloatCC::GreaterThanOrEqual, wide, high);
    b.ins().trapnz(too_large, overflow);
    if signed {
        b.ins().fcvt_to_sint(to, x)
    } else {
        b.ins().fcvt_to_uint(to, x)
    }
}
