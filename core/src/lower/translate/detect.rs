//! The detector (`docs/kernels.md`, "What is refused"): walks the call
//! graph from the kernel, in program order, and refuses the whole kernel at
//! the first construct the translator does not lower, naming the operator
//! and its byte offset in the module. It emits no CLIF.

use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec;
use alloc::vec::Vec;

use wasmparser::{BlockType, MemArgTarget, Operator, ValType};

use super::body::{atomic_access, binary_op, memory_access, simd_access, unary_op};
use super::module::{GlobalKind, ModuleInfo, invalid, numeric};
use super::{KernelLimits, KernelSize, WasmType};
use crate::lower::atomic::AtomicIntrinsic;
use crate::lower::cooperative::CoopIntrinsic;
use crate::lower::math::MathIntrinsic;
use crate::lower::{INTRINSIC_MODULE, Intrinsic, LowerError, UnsupportedOp};

/// The deepest chain of inlined calls below a kernel.
pub(super) const MAX_CALL_DEPTH: usize = 64;

/// The largest shadow-stack window a kernel thread gets, in bytes
/// (`docs/kernels.md`, "Globals and the shadow stack"). The device reserves local
/// memory for it in every resident thread (4 KiB is 1.1 GB over an H100's
/// 270,336 thread slots).
pub const MAX_STACK_WINDOW: u64 = 4096;

/// What the window adds for a function that may move the stack pointer by
/// an amount the detector cannot read off (a dynamic `alloca`).
pub(super) const DYNAMIC_FRAME_BYTES: u64 = 256;

/// A function's state in the depth-first walk.
#[derive(Clone, Copy)]
enum Walk {
    /// On the current call path: a call to it closes a cycle.
    OnPath,
    /// Checked: its size with every callee inlined, how deep its own call
    /// chain goes, and the stack bytes it and its callees need.
    Done {
        size: KernelSize,
        depth: usize,
        stack: u64,
    },
}

struct Detector<'m, 'a> {
    module: &'m ModuleInfo<'a>,
    walk: Vec<Option<Walk>>,
    reached: Vec<u32>,
    limits: KernelLimits,
    stack_pointer: Option<u32>,
    /// The mutable globals the kernel reads or writes.
    globals: Vec<u32>,
    /// What of the block's cooperative operations it calls.
    cooperation: Cooperation,
}

/// What of the block's cooperative operations (`docs/kernels.md`, "The GPU
/// programming model") a kernel calls.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Cooperation {
    /// Some cooperative intrinsic: the block's threads run together
    /// (virtual blocks begin and end for the whole block at once).
    pub cooperative: bool,
    /// Some shared-memory intrinsic.
    pub shared: bool,
}

/// What the detector found out about a kernel.
pub(super) struct Detected {
    /// The defined functions it reaches, the kernel first.
    pub reached: Vec<u32>,
    /// Its size, every callee inlined.
    pub size: KernelSize,
    /// The mutable globals it uses, in index order.
    pub globals: Vec<u32>,
    /// The shadow stack's pointer and the window's size in bytes (a
    /// multiple of 16), when the kernel makes stack frames.
    pub stack: Option<(u32, u64)>,
    /// The cooperative operations it calls.
    pub cooperation: Cooperation,
}

/// Checks the kernel `kernel` and everything it calls against what the
/// translator lowers and against `limits`.
pub(super) fn detect(
    module: &ModuleInfo<'_>,
    kernel: u32,
    limits: KernelLimits,
) -> Result<Detected, LowerError> {
    let mut detector = Detector {
        module,
        walk: vec![None; module.bodies.len()],
        reached: Vec::new(),
        limits,
        stack_pointer: module.stack_pointer(),
        globals: Vec::new(),
        cooperation: Cooperation::default(),
    };
    let (size, _, stack) = detector.visit(kernel, 0)?;
    let mut globals = detector.globals;
    globals.sort_unstable();
    globals.dedup();
    let window = stack.div_ceil(16) * 16;
    if window > MAX_STACK_WINDOW {
        return Err(LowerError::TooLarge(UnsupportedOp {
            op: String::from("global.get __stack_pointer"),
            offset: module.bodies[module.defined(kernel).unwrap_or(0)]
                .range()
                .start,
            reason: format!(
                "the kernel's stack frames, every callee inlined, need {window} bytes per \
                 thread; kernels get at most {MAX_STACK_WINDOW}"
            ),
        }));
    }
    let stack = match (detector.stack_pointer, window) {
        (Some(sp), 1..) => Some((sp, window)),
        _ => None,
    };
    Ok(Detected {
        reached: detector.reached,
        size,
        globals,
        stack,
        cooperation: detector.cooperation,
    })
}

/// Reads stack frames off the operators of one function: LLVM opens a
/// frame with `global.get $sp; i32.const N; i32.sub` (then, for an
/// over-aligned frame, `i32.const -A; i32.and`).
#[derive(Default)]
struct FrameScan {
    /// How far into the pattern the last operators are (0: not in it).
    state: u8,
    pending: u64,
    /// Bytes of the frames found.
    bytes: u64,
    /// A `global.get $sp` that opened no frame of a constant size.
    other_reads: bool,
    /// A `global.set $sp`.
    writes: bool,
}

impl FrameScan {
    fn step(&mut self, op: &Operator<'_>, sp: u32) {
        self.state = match (self.state, op) {
            (_, Operator::GlobalGet { global_index }) if *global_index == sp => {
                if self.state == 1 {
                    self.other_reads = true;
                }
                1
            }
            (_, Operator::GlobalSet { global_index }) if *global_index == sp => {
                if self.state == 1 {
                    self.other_reads = true;
                }
                self.writes = true;
                0
            }
            (1, Operator::I32Const { value }) => {
                self.pending = u64::from(value.cast_unsigned());
                2
            }
            (2, Operator::I32Sub) => {
                self.bytes = self.bytes.saturating_add(self.pending);
                3
            }
            (3, Operator::I32Const { value }) if *value < 0 => {
                self.pending = u64::from(value.unsigned_abs()) - 1;
                4
            }
            (4, Operator::I32And) => {
                self.bytes = self.bytes.saturating_add(self.pending);
                0
            }
            (1 | 2, _) => {
                self.other_reads = true;
                0
            }
            _ => 0,
        };
    }

    /// The bytes this function's own frames may take below the stack
    /// pointer it was called with.
    fn frame_bytes(&self) -> u64 {
        let dynamic = if self.other_reads && self.writes {
            DYNAMIC_FRAME_BYTES
        } else {
            0
        };
        self.bytes.saturating_add(dynamic)
    }
}

/// How many branch points the translated `op` makes (a memory access, with
/// its bounds check and alignment split; a loop, `if` or conditional
/// branch; an operator with a trap check; `memory.copy`/`memory.fill`,
/// their checks and two loops; `call_indirect`'s dispatch): what the
/// driver's PTX JIT pays for most.
/// The branch points of an atomic access: its alignment and bounds checks,
/// the stack window's test, a compare-and-swap loop.
const ATOMIC_BRANCH_POINTS: u64 = 4;

fn branch_points(op: &Operator<'_>) -> u64 {
    match op {
        Operator::MemoryCopy { .. } | Operator::MemoryFill { .. } => 4,
        Operator::CallIndirect { .. } => 2,
        op if atomic_access(op).is_some() => ATOMIC_BRANCH_POINTS,
        _ => match simd_access(op) {
            Some((_, access)) => u64::from(access.accesses()),
            None => u64::from(is_branch_point(op)),
        },
    }
}

fn is_branch_point(op: &Operator<'_>) -> bool {
    matches!(
        op,
        Operator::Loop { .. }
            | Operator::If { .. }
            | Operator::BrIf { .. }
            | Operator::BrTable { .. }
            | Operator::Unreachable
            | Operator::I32DivS
            | Operator::I32DivU
            | Operator::I32RemS
            | Operator::I32RemU
            | Operator::I64DivS
            | Operator::I64DivU
            | Operator::I64RemS
            | Operator::I64RemU
            | Operator::I32TruncF32S
            | Operator::I32TruncF32U
            | Operator::I32TruncF64S
            | Operator::I32TruncF64U
            | Operator::I64TruncF32S
            | Operator::I64TruncF32U
            | Operator::I64TruncF64S
            | Operator::I64TruncF64U
    ) || memory_access(op).is_some()
}

fn refuse(op: impl Into<String>, offset: u64, reason: impl Into<String>) -> LowerError {
    LowerError::Unsupported(UnsupportedOp {
        op: op.into(),
        offset,
        reason: reason.into(),
    })
}

impl Detector<'_, '_> {
    /// Checks defined function `func`, reached through `depth` calls;
    /// returns its size with every callee inlined, the depth of its call
    /// chain and the stack bytes it and its callees need.
    fn visit(&mut self, func: u32, depth: usize) -> Result<(KernelSize, usize, u64), LowerError> {
        let m = self.module;
        let def = m
            .defined(func)
            .ok_or_else(|| LowerError::Invalid(format!("function {func} is not defined")))?;
        self.walk[def] = Some(Walk::OnPath);
        self.reached.push(func);
        let body = &m.bodies[def];

        let mut locals = body.get_locals_reader().map_err(invalid)?;
        for _ in 0..locals.get_count() {
            let offset = locals.original_position();
            let (_, ty) = locals.read().map_err(invalid)?;
            if !numeric(ty) {
                return Err(refuse(
                    format!("local of type {ty}"),
                    offset,
                    "kernels compute with i32, i64, f32, f64 and v128 values only",
                ));
            }
        }

        let mut size = KernelSize::default();
        let mut height = 0;
        let mut callee_stack = 0u64;
        let mut frames = FrameScan::default();
        let mut reader = body.get_operators_reader().map_err(invalid)?;
        while !reader.eof() {
            let offset = reader.original_position();
            let op = match reader.read() {
                Ok(op) => op,
                Err(e) => {
                    // This build of wasmparser may not decode SIMD at all.
                    return Err(if m.wasm.get(offset as usize) == Some(&0xfd) {
                        refuse("SIMD operator", offset, SIMD_REASON)
                    } else {
                        invalid(e)
                    });
                }
            };
            // A SIMD operator becomes scalar code for each of its lanes.
            size.operators += simd_weight(&op).unwrap_or(1);
            size.branches += branch_points(&op);
            if let Operator::Call { function_index } = op
                && m.funcs
                    .get(function_index as usize)
                    .and_then(|f| f.import)
                    .is_some_and(|(module, name)| {
                        AtomicIntrinsic::from_import(module, name).is_some()
                    })
            {
                // As the threads operators: checks, the window, a CAS loop.
                size.branches += ATOMIC_BRANCH_POINTS;
            }
            if let Operator::Call { function_index } = op
                && let Some(coop) = m
                    .funcs
                    .get(function_index as usize)
                    .and_then(|f| f.import)
                    .and_then(|(module, name)| CoopIntrinsic::from_import(module, name))
            {
                self.cooperation.cooperative = true;
                self.cooperation.shared |= coop.uses_shared_memory();
                // Shared accesses: an alignment and a bounds check (and a
                // CAS loop for some atomics).
                if coop.uses_shared_memory() {
                    size.branches += ATOMIC_BRANCH_POINTS;
                }
            }
            if let Some(sp) = self.stack_pointer {
                frames.step(&op, sp);
            }
            self.check(&op, offset)?;
            if let Operator::GlobalGet { global_index } | Operator::GlobalSet { global_index } = op
                && matches!(
                    m.globals.get(global_index as usize),
                    Some(GlobalKind::Mutable(_) | GlobalKind::MutableV128)
                )
            {
                self.globals.push(global_index);
            }
            let (callees, dispatch_slots) = self.callees(&op, offset)?;
            // A `call_indirect` becomes a jump table of the table's slots:
            // each counts as an operator, so many dispatch sites over a
            // large table stay within the size limits.
            size.operators = size.operators.saturating_add(dispatch_slots);
            for callee in callees {
                let Some(callee_def) = m.defined(callee) else {
                    continue;
                };
                let (callee_size, callee_depth, stack) = match self.walk[callee_def] {
                    Some(Walk::OnPath) => {
                        return Err(refuse(
                            format!("{} (recursion)", op_name(&op)),
                            offset,
                            format!(
                                "function {callee} is already on the call path from the \
                                 kernel: kernels cannot recurse"
                            ),
                        ));
                    }
                    Some(Walk::Done { size, depth, stack }) => (size, depth, stack),
                    None if depth < MAX_CALL_DEPTH => self.visit(callee, depth + 1)?,
                    None => (KernelSize::default(), MAX_CALL_DEPTH, 0),
                };
                if depth + 1 + callee_depth > MAX_CALL_DEPTH {
                    return Err(refuse(
                        op_name(&op),
                        offset,
                        format!(
                            "the chain of calls below the kernel is deeper than {MAX_CALL_DEPTH}"
                        ),
                    ));
                }
                size.operators = size.operators.saturating_add(callee_size.operators);
                size.branches = size.branches.saturating_add(callee_size.branches);
                height = height.max(callee_depth + 1);
                callee_stack = callee_stack.max(stack);
            }
            self.check_size(size, &op, offset)?;
        }
        let stack = frames.frame_bytes().saturating_add(callee_stack);
        self.walk[def] = Some(Walk::Done {
            size,
            depth: height,
            stack,
        });
        Ok((size, height, stack))
    }

    /// The functions `op` may call: a direct call's callee, or every
    /// function of the call's type in the table a `call_indirect` goes
    /// through (the translator inlines each of them at the call).
    /// Also returns the slots of a `call_indirect`'s jump table.
    fn callees(&self, op: &Operator<'_>, offset: u64) -> Result<(Vec<u32>, u64), LowerError> {
        match *op {
            Operator::Call { function_index } => Ok((vec![function_index], 0)),
            Operator::CallIndirect {
                type_index,
                table_index,
            } => self.indirect_callees(type_index, table_index, offset),
            _ => Ok((Vec::new(), 0)),
        }
    }

    fn indirect_callees(
        &self,
        type_index: u32,
        table: u32,
        offset: u64,
    ) -> Result<(Vec<u32>, u64), LowerError> {
        let m = self.module;
        let contents = m
            .table_contents(table)
            .map_err(|why| refuse("call_indirect", offset, why))?;
        let slots = contents.len() as u64;
        let mut seen = alloc::collections::BTreeSet::new();
        let mut callees: Vec<u32> = Vec::new();
        for func in contents.into_iter().flatten() {
            if !seen.insert(func) || !m.same_type(func, type_index) {
                continue;
            }
            if let Some((module, name)) = m.funcs.get(func as usize).and_then(|f| f.import) {
                return Err(refuse(
                    "call_indirect",
                    offset,
                    format!(
                        "table {table} holds the import `{module}`.`{name}` with the call's \
                         type; kernels call imports only directly"
                    ),
                ));
            }
            callees.push(func);
        }
        Ok((callees, slots))
    }

    /// Refuses the kernel once its size so far passes a limit.
    fn check_size(
        &self,
        size: KernelSize,
        op: &Operator<'_>,
        offset: u64,
    ) -> Result<(), LowerError> {
        let KernelLimits {
            operators,
            branches,
        } = self.limits;
        let (what, limit) = if size.operators > operators {
            ("Wasm operators", operators)
        } else if size.branches > branches {
            (
                "branch points (memory accesses, loops, ifs, conditional branches, trapping operators)",
                branches,
            )
        } else {
            return Ok(());
        };
        Err(LowerError::TooLarge(UnsupportedOp {
            op: op_name(op),
            offset,
            reason: format!("the kernel, every callee inlined, has more than {limit} {what}"),
        }))
    }

    /// Refuses `op` unless the translator lowers it.
    fn check(&self, op: &Operator<'_>, offset: u64) -> Result<(), LowerError> {
        let m = self.module;
        match op {
            Operator::Call { function_index } => self.check_call(*function_index, offset),
            Operator::GlobalGet { global_index } | Operator::GlobalSet { global_index } => {
                let why = match m.globals.get(*global_index as usize) {
                    Some(GlobalKind::Const(_)) => return Ok(()),
                    Some(GlobalKind::Mutable(Some(_)) | GlobalKind::MutableV128) => return Ok(()),
                    Some(GlobalKind::Mutable(None)) => {
                        "it is a mutable reference global; kernels keep thread-private copies \
                         of numeric globals only"
                    }
                    Some(GlobalKind::Imported) => {
                        "it is imported; kernels use the module's own globals"
                    }
                    Some(GlobalKind::NotConstant) | None => {
                        "its initializer is not an i32, i64, f32 or f64 constant"
                    }
                };
                Err(refuse(
                    op_name(op),
                    offset,
                    format!("global {global_index}: {why}"),
                ))
            }
            Operator::MemoryCopy { dst_mem, src_mem } => {
                self.check_memory(op, *dst_mem, offset)?;
                self.check_memory(op, *src_mem, offset)
            }
            Operator::MemoryFill { mem } => self.check_memory(op, *mem, offset),
            Operator::CallIndirect { type_index, .. } => {
                if m.numeric_func_type(*type_index) {
                    Ok(())
                } else {
                    Err(refuse(
                        "call_indirect",
                        offset,
                        format!(
                            "type {type_index} is not a function type of i32, i64, f32, f64 \
                             and v128 values"
                        ),
                    ))
                }
            }
            Operator::Block { blockty } | Operator::Loop { blockty } | Operator::If { blockty } => {
                self.check_block_type(op, *blockty, offset)
            }
            Operator::TypedSelect { ty } if !numeric(*ty) => Err(refuse(
                "select",
                offset,
                format!("selects {ty} values; kernels use numbers and v128"),
            )),
            Operator::MemorySize { mem } => self.check_memory(op, *mem, offset),
            Operator::AtomicFence { .. } => Ok(()),
            Operator::MemoryAtomicNotify { .. }
            | Operator::MemoryAtomicWait32 { .. }
            | Operator::MemoryAtomicWait64 { .. } => Err(refuse(
                op_name(op),
                offset,
                "a kernel thread cannot wait or wake others (docs/kernels.md, \"Atomics\")",
            )),
            Operator::Unreachable
            | Operator::Nop
            | Operator::Else
            | Operator::End
            | Operator::Br { .. }
            | Operator::BrIf { .. }
            | Operator::BrTable { .. }
            | Operator::Return
            | Operator::Drop
            | Operator::Select
            | Operator::TypedSelect { .. }
            | Operator::LocalGet { .. }
            | Operator::LocalSet { .. }
            | Operator::LocalTee { .. }
            | Operator::I32Const { .. }
            | Operator::I64Const { .. }
            | Operator::F32Const { .. }
            | Operator::F64Const { .. } => Ok(()),
            _ => {
                let (_, proposal) = op_info(op);
                if proposal == "relaxed_simd" {
                    return Err(refuse(op_name(op), offset, RELAXED_SIMD_REASON));
                }
                let memarg = memory_access(op)
                    .map(|(memarg, _)| memarg)
                    .or_else(|| atomic_access(op).map(|(memarg, _)| memarg))
                    .or_else(|| simd_access(op).map(|(memarg, _)| memarg));
                if let Some(memarg) = memarg {
                    return match memarg.target {
                        MemArgTarget::Memory(mem) => self.check_memory(op, mem, offset),
                        MemArgTarget::Array(_) => Err(self.refuse_op(op, offset)),
                    };
                }
                // Every operator of the SIMD proposal has a rule
                // (`body/simd.rs`).
                if unary_op(op).is_some() || binary_op(op).is_some() || proposal == "simd" {
                    return Ok(());
                }
                Err(self.refuse_op(op, offset))
            }
        }
    }

    fn check_call(&self, callee: u32, offset: u64) -> Result<(), LowerError> {
        let m = self.module;
        let decl = m
            .funcs
            .get(callee as usize)
            .ok_or_else(|| LowerError::Invalid(format!("call of missing function {callee}")))?;
        let ty = m.func_type(callee)?;
        if let Some((module, name)) = decl.import {
            if let Some(atomic) = AtomicIntrinsic::from_import(module, name) {
                let params: Vec<ValType> = atomic.params().map(WasmType::val_type).collect();
                let result = [atomic.value_type().val_type()];
                if ty.params() != params.as_slice() || ty.results() != result {
                    return Err(LowerError::Invalid(format!(
                        "the intrinsic `{INTRINSIC_MODULE}`.`{}` is imported as {ty}; it must \
                         be ({}) -> {}",
                        atomic.import_name(),
                        params
                            .iter()
                            .map(ToString::to_string)
                            .collect::<Vec<_>>()
                            .join(", "),
                        result[0]
                    )));
                }
                return Ok(());
            }
            if let Some(coop) = CoopIntrinsic::from_import(module, name) {
                let params: Vec<ValType> =
                    coop.params().into_iter().map(WasmType::val_type).collect();
                let results: Vec<ValType> =
                    coop.result().map(WasmType::val_type).into_iter().collect();
                if ty.params() != params.as_slice() || ty.results() != results.as_slice() {
                    return Err(LowerError::Invalid(format!(
                        "the intrinsic `{INTRINSIC_MODULE}`.`{name}` is imported as {ty}; it \
                         must be ({}) -> ({})",
                        params
                            .iter()
                            .map(ToString::to_string)
                            .collect::<Vec<_>>()
                            .join(", "),
                        results
                            .iter()
                            .map(ToString::to_string)
                            .collect::<Vec<_>>()
                            .join(", ")
                    )));
                }
                return Ok(());
            }
            if let Some(math) = MathIntrinsic::from_import(module, name) {
                let value = math.value_type().val_type();
                let params = vec![value; math.arity()];
                if ty.params() != params.as_slice() || ty.results() != [value] {
                    return Err(LowerError::Invalid(format!(
                        "the intrinsic `{INTRINSIC_MODULE}`.`{name}` is imported as {ty}; it \
                         must be ({value}, {value}, {value}) -> {value}"
                    )));
                }
                return Ok(());
            }
            let Some(which) = Intrinsic::from_import(module, name) else {
                return Err(refuse(
                    "call",
                    offset,
                    format!(
                        "calls the import `{module}`.`{name}`; kernels call only the \
                         `{INTRINSIC_MODULE}` intrinsics and functions of their own module"
                    ),
                ));
            };
            if !ty.params().is_empty() || ty.results() != [ValType::I32] {
                return Err(LowerError::Invalid(format!(
                    "the intrinsic `{INTRINSIC_MODULE}`.`{}` is imported as {ty}; it must be \
                     () -> i32",
                    which.import_name()
                )));
            }
            return Ok(());
        }
        if ty.params().iter().chain(ty.results()).all(|t| numeric(*t)) {
            Ok(())
        } else {
            Err(refuse(
                "call",
                offset,
                format!(
                    "function {callee} has type {ty}; functions a kernel calls take and \
                     return i32, i64, f32, f64 and v128 values only"
                ),
            ))
        }
    }

    fn check_block_type(
        &self,
        op: &Operator<'_>,
        blockty: BlockType,
        offset: u64,
    ) -> Result<(), LowerError> {
        let numbers = match blockty {
            BlockType::Empty => true,
            BlockType::Type(t) => numeric(t),
            BlockType::FuncType(index) => self.module.numeric_func_type(index),
        };
        if numbers {
            Ok(())
        } else {
            Err(refuse(
                op_name(op),
                offset,
                "its block type carries reference values; kernels use numbers and v128",
            ))
        }
    }

    fn check_memory(&self, op: &Operator<'_>, mem: u32, offset: u64) -> Result<(), LowerError> {
        if mem != 0 {
            return Err(refuse(
                op_name(op),
                offset,
                format!("uses memory {mem}; kernels use memory 0 only (no multi-memory)"),
            ));
        }
        match &self.module.memory0 {
            None => Err(LowerError::Invalid(String::from(
                "the kernel accesses memory but the module has none",
            ))),
            Some(ty) if ty.memory64 => Err(refuse(
                op_name(op),
                offset,
                "memory 0 is a 64-bit memory (memory64); kernels use 32-bit memories",
            )),
            Some(_) => Ok(()),
        }
    }

    fn refuse_op(&self, op: &Operator<'_>, offset: u64) -> LowerError {
        let (_, proposal) = op_info(op);
        let name = op_name(op);
        let reason = match (name.as_str(), proposal) {
            ("memory.grow", _) => "kernels cannot grow memory",
            (_, "bulk_memory") => "bulk memory and table operations are not supported in kernels",
            (_, "tail_call") => "tail calls are not supported in kernels",
            (_, "threads" | "shared_everything_threads" | "acquire_release_atomics") => {
                "threads and atomics are not supported in kernels"
            }
            (_, "reference_types" | "gc" | "function_references" | "custom_descriptors") => {
                "reference types, tables and GC are not supported in kernels"
            }
            (_, "exceptions" | "legacy_exceptions") => "exceptions are not supported in kernels",
            (_, "relaxed_simd") => RELAXED_SIMD_REASON,
            (_, "stack_switching") => "stack switching is not supported in kernels",
            (_, "wide_arithmetic") => "wide arithmetic is not supported in kernels",
            (_, "memory_control") => "memory control is not supported in kernels",
            _ => "not supported in kernels",
        };
        refuse(name, offset, reason)
    }
}

/// Why an opcode with the SIMD prefix that this wasmparser cannot decode is
/// refused.
const SIMD_REASON: &str = "an unknown SIMD (0xfd-prefixed) operator";

/// Why relaxed SIMD is refused: its results are the hardware's choice
/// (Wasm lets each engine pick per operator), and a kernel computes the
/// same on every target.
const RELAXED_SIMD_REASON: &str = "relaxed SIMD is not supported in kernels (its results \
     are implementation-defined; a kernel computes the same on every target): use the SIMD \
     operators it relaxes";

/// How many operators a SIMD operator counts as toward the size limits:
/// it becomes scalar code for each lane of its shape (`body/simd.rs`), so
/// an `i8x16` operator is sixteen, a `v128` one four; `None` for others.
fn simd_weight(op: &Operator<'_>) -> Option<u64> {
    let (visit, proposal) = op_info(op);
    if proposal != "simd" {
        return None;
    }
    let shape = visit.trim_start_matches("visit_").split('_').next();
    Some(match shape {
        Some("i8x16") => 16,
        Some("i16x8") => 8,
        Some("i64x2" | "f64x2") => 2,
        _ => 4,
    })
}

/// An operator's `VisitOperator` method name and its proposal, from
/// wasmparser's own operator list.
fn op_info(op: &Operator<'_>) -> (&'static str, &'static str) {
    macro_rules! define_op_info {
        ($( @$proposal:ident $op:ident $({ $($arg:ident: $argty:ty),* })? => $visit:ident ($($ann:tt)*))*) => {
            match op {
                $( Operator::$op { .. } => (stringify!($visit), stringify!($proposal)), )*
                _ => ("visit_unknown", "unknown"),
            }
        };
    }
    wasmparser::for_each_operator!(define_op_info)
}

/// An operator's name in the Wasm text format (`i32.add`,
/// `i32.atomic.rmw8.add_u`, `call_indirect`), derived from wasmparser's
/// visitor names.
pub(super) fn op_name(op: &Operator<'_>) -> String {
    let (visit, _) = op_info(op);
    text_name(visit.trim_start_matches("visit_"))
}

/// Turns a visitor name (`i32_atomic_rmw8_add_u`) into the text format's
/// (`i32.atomic.rmw8.add_u`): the first `_` after a type or namespace prefix
/// is a `.`, and so are the ones after `atomic` and `rmw<N>`.
fn text_name(visit: &str) -> String {
    const PREFIXES: [&str; 21] = [
        "i32", "i64", "f32", "f64", "v128", "i8x16", "i16x8", "i32x4", "i64x2", "f32x4", "f64x2",
        "memory", "table", "global", "local", "ref", "data", "elem", "struct", "array", "atomic",
    ];
    const MORE_PREFIXES: [&str; 4] = ["any", "extern", "i31", "cont"];
    let mut name = match visit.split_once('_') {
        Some((head, tail)) if PREFIXES.contains(&head) || MORE_PREFIXES.contains(&head) => {
            format!("{head}.{tail}")
        }
        _ => visit.to_string(),
    };
    for (from, to) in [
        ("atomic_", "atomic."),
        ("rmw8_", "rmw8."),
        ("rmw16_", "rmw16."),
        ("rmw32_", "rmw32."),
        ("rmw_", "rmw."),
    ] {
        name = name.replace(from, to);
    }
    name
}

#[cfg(test)]
mod tests {
    use super::text_name;

    #[test]
    fn text_names_follow_the_text_format() {
        for (visit, text) in [
            ("i32_add", "i32.add"),
            ("call_indirect", "call_indirect"),
            ("return_call", "return_call"),
            ("global_set", "global.set"),
            ("memory_grow", "memory.grow"),
            ("memory_copy", "memory.copy"),
            ("i32_trunc_sat_f32_s", "i32.trunc_sat_f32_s"),
            ("i32_atomic_rmw8_add_u", "i32.atomic.rmw8.add_u"),
            ("i64_atomic_rmw_cmpxchg", "i64.atomic.rmw.cmpxchg"),
            ("memory_atomic_wait32", "memory.atomic.wait32"),
            ("atomic_fence", "atomic.fence"),
            ("i32x4_add", "i32x4.add"),
            ("ref_is_null", "ref.is_null"),
            ("try_table", "try_table"),
        ] {
            assert_eq!(text_name(visit), text, "{visit}");
        }
    }
}
