//! The detector (`docs/kernels.md`, "What is refused"): walks the call
//! graph from the kernel, in program order, and refuses the whole kernel at
//! the first construct the translator does not lower, naming the operator
//! and its byte offset in the module. It emits no CLIF.

use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec;
use alloc::vec::Vec;

use wasmparser::{BlockType, MemArgTarget, Operator, ValType};

use super::body::{binary_op, memory_access, unary_op};
use super::module::{GlobalKind, ModuleInfo, invalid};
use super::{KernelLimits, KernelSize, WasmType};
use crate::lower::{INTRINSIC_MODULE, Intrinsic, LowerError, UnsupportedOp};

/// The deepest chain of inlined calls below a kernel.
pub(super) const MAX_CALL_DEPTH: usize = 64;

/// A function's state in the depth-first walk.
#[derive(Clone, Copy)]
enum Walk {
    /// On the current call path: a call to it closes a cycle.
    OnPath,
    /// Checked: its size with every callee inlined, and how deep its own
    /// call chain goes.
    Done { size: KernelSize, depth: usize },
}

struct Detector<'m, 'a> {
    module: &'m ModuleInfo<'a>,
    walk: Vec<Option<Walk>>,
    reached: Vec<u32>,
    limits: KernelLimits,
}

/// Checks the kernel `kernel` and everything it calls against what the
/// translator lowers and against `limits`; returns the defined functions it
/// reaches (the kernel first) and the kernel's size, callees inlined.
pub(super) fn detect(
    module: &ModuleInfo<'_>,
    kernel: u32,
    limits: KernelLimits,
) -> Result<(Vec<u32>, KernelSize), LowerError> {
    let mut detector = Detector {
        module,
        walk: vec![None; module.bodies.len()],
        reached: Vec::new(),
        limits,
    };
    let (size, _) = detector.visit(kernel, 0)?;
    Ok((detector.reached, size))
}

/// Whether the translated `op` branches (a memory access, with its bounds
/// check and alignment split; a loop, `if` or conditional branch; an
/// operator with a trap check): what the driver's PTX JIT pays for most.
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
    /// Checks defined function `func`, reached through `depth` calls.
    fn visit(&mut self, func: u32, depth: usize) -> Result<(KernelSize, usize), LowerError> {
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
            if WasmType::from_val_type(ty).is_none() {
                return Err(refuse(
                    format!("local of type {ty}"),
                    offset,
                    "kernels compute with i32, i64, f32 and f64 values only",
                ));
            }
        }

        let mut size = KernelSize::default();
        let mut height = 0;
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
            size.operators += 1;
            size.branches += u64::from(is_branch_point(&op));
            self.check(&op, offset)?;
            if let Operator::Call { function_index } = op
                && let Some(callee) = m.defined(function_index)
            {
                let (callee_size, callee_depth) = match self.walk[callee] {
                    Some(Walk::OnPath) => {
                        return Err(refuse(
                            "call (recursion)",
                            offset,
                            format!(
                                "function {function_index} is already on the call path \
                                 from the kernel: kernels cannot recurse"
                            ),
                        ));
                    }
                    Some(Walk::Done { size, depth }) => (size, depth),
                    None if depth < MAX_CALL_DEPTH => self.visit(function_index, depth + 1)?,
                    None => (KernelSize::default(), MAX_CALL_DEPTH),
                };
                if depth + 1 + callee_depth > MAX_CALL_DEPTH {
                    return Err(refuse(
                        "call",
                        offset,
                        format!(
                            "the chain of calls below the kernel is deeper than {MAX_CALL_DEPTH}"
                        ),
                    ));
                }
                size.operators = size.operators.saturating_add(callee_size.operators);
                size.branches = size.branches.saturating_add(callee_size.branches);
                height = height.max(callee_depth + 1);
            }
            self.check_size(size, &op, offset)?;
        }
        self.walk[def] = Some(Walk::Done {
            size,
            depth: height,
        });
        Ok((size, height))
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
            Operator::GlobalGet { global_index } => {
                let why = match m.globals.get(*global_index as usize) {
                    Some(GlobalKind::Const(_)) => return Ok(()),
                    Some(GlobalKind::Mutable) => {
                        "it is mutable; kernels read immutable globals only"
                    }
                    Some(GlobalKind::Imported) => {
                        "it is imported, so its value is not known when the kernel is translated"
                    }
                    Some(GlobalKind::NotConstant) | None => {
                        "its initializer is not an i32, i64, f32 or f64 constant"
                    }
                };
                Err(refuse(
                    "global.get",
                    offset,
                    format!("global {global_index}: {why}"),
                ))
            }
            Operator::Block { blockty } | Operator::Loop { blockty } | Operator::If { blockty } => {
                self.check_block_type(op, *blockty, offset)
            }
            Operator::TypedSelect { ty } if WasmType::from_val_type(*ty).is_none() => Err(refuse(
                "select",
                offset,
                format!("selects {ty} values; kernels use scalars"),
            )),
            Operator::MemorySize { mem } => self.check_memory(op, *mem, offset),
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
                if let Some((memarg, _)) = memory_access(op) {
                    return match memarg.target {
                        MemArgTarget::Memory(mem) => self.check_memory(op, mem, offset),
                        MemArgTarget::Array(_) => Err(self.refuse_op(op, offset)),
                    };
                }
                if unary_op(op).is_some() || binary_op(op).is_some() {
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
        let scalar = ty
            .params()
            .iter()
            .chain(ty.results())
            .all(|t| WasmType::from_val_type(*t).is_some());
        if scalar {
            Ok(())
        } else {
            Err(refuse(
                "call",
                offset,
                format!(
                    "function {callee} has type {ty}; functions a kernel calls take and \
                     return i32, i64, f32 and f64 values only"
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
        let scalar = match blockty {
            BlockType::Empty => true,
            BlockType::Type(t) => WasmType::from_val_type(t).is_some(),
            BlockType::FuncType(index) => self
                .module
                .types
                .get(index as usize)
                .and_then(Option::as_ref)
                .is_some_and(|ty| {
                    ty.params()
                        .iter()
                        .chain(ty.results())
                        .all(|t| WasmType::from_val_type(*t).is_some())
                }),
        };
        if scalar {
            Ok(())
        } else {
            Err(refuse(
                op_name(op),
                offset,
                "its block type carries v128 or reference values; kernels use scalars",
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
        if self.module.wasm.get(offset as usize) == Some(&0xfd) {
            return refuse(name, offset, SIMD_REASON);
        }
        let reason = match (name.as_str(), proposal) {
            ("call_indirect", _) => "indirect calls cannot be inlined into a kernel",
            ("global.set", _) => "kernels cannot write globals",
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
            (_, "simd" | "relaxed_simd") => SIMD_REASON,
            (_, "stack_switching") => "stack switching is not supported in kernels",
            (_, "wide_arithmetic") => "wide arithmetic is not supported in kernels",
            (_, "memory_control") => "memory control is not supported in kernels",
            _ => "not supported in kernels",
        };
        refuse(name, offset, reason)
    }
}

const SIMD_REASON: &str = "SIMD (v128) operators are not supported in kernels";

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
