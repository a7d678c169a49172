//! The module-level facts a kernel's translation needs: types, the function
//! index space (imports first), globals, memory 0, exports and the code
//! bodies with their byte offsets. Parsing validates everything but the
//! function bodies; [`ModuleInfo::validate_bodies`] checks only the bodies
//! a kernel reaches, so a module may carry (say) reference types elsewhere,
//! and records which `drop`s and `select`s there take `v128` operands (the
//! translator holds a `v128` as four values: `body/simd.rs`).

use alloc::collections::BTreeSet;
use alloc::format;
use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;

use core::cell::OnceCell;

use wasmparser::{
    BinaryReaderError, CompositeInnerType, ConstExpr, ElementItems, ElementKind, ExternalKind,
    FuncToValidate, FuncType, FuncValidatorAllocations, FunctionBody, KnownCustom, MemoryType,
    Name, Operator, Parser, Payload, TableInit, TypeRef, ValType, ValidPayload, Validator,
    ValidatorResources, WasmFeatures,
};

use super::WasmType;
use crate::lower::LowerError;

/// Whether a kernel computes with values of type `ty`: the four scalars
/// and `v128` (held as lanes, `body/simd.rs`); not references.
pub(super) fn numeric(ty: ValType) -> bool {
    WasmType::from_val_type(ty).is_some() || ty == ValType::V128
}

/// A wasmparser failure: the module is malformed or invalid.
pub(super) fn invalid(e: BinaryReaderError) -> LowerError {
    LowerError::Invalid(format!("{e}"))
}

/// The function a constant reference expression names (`Some(None)` for
/// `ref.null`), or `None` when it is not a constant function reference.
fn const_func_ref(expr: &ConstExpr<'_>) -> Option<Option<u32>> {
    let mut reader = expr.get_operators_reader();
    let item = match reader.read().ok()? {
        Operator::RefFunc { function_index } => Some(function_index),
        Operator::RefNull { .. } => None,
        _ => return None,
    };
    matches!(reader.read().ok()?, Operator::End).then_some(item)
}

/// A constant value (an immutable global's initializer).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum ConstValue {
    I32(i32),
    I64(i64),
    /// Bits of an `f32`.
    F32(u32),
    /// Bits of an `f64`.
    F64(u64),
    /// Bits of a `v128`, lane 0 in the low bits.
    V128(u128),
}

/// What `global.get` of a global can become.
#[derive(Clone, Copy, Debug)]
pub(super) enum GlobalKind {
    /// Immutable, with a constant initializer: becomes the constant.
    Const(ConstValue),
    /// Defined and mutable: its value depends on the instance's history.
    /// Kernels get a thread-private copy of it, initialised with its value
    /// at launch (`None`: a reference, refused).
    Mutable(Option<WasmType>),
    /// A defined mutable `v128` global: kernels get a thread-private copy
    /// of its four 32-bit words, each initialised from its value at launch.
    /// One that no operator of the module sets and no export reaches keeps
    /// its initializer for ever: it is [`GlobalKind::Const`].
    MutableV128,
    /// Imported: its value is not known at translation time.
    Imported,
    /// Immutable, but its initializer is not a constant number (a
    /// reference, or built from an imported global).
    NotConstant,
}

/// One entry of the table index space.
#[derive(Clone, Copy, Debug)]
pub(super) enum TableDecl {
    /// Imported: its contents are the host's.
    Imported,
    /// Defined by the module.
    Defined {
        /// Its initial size, in elements.
        initial: u64,
        /// Whether it holds `funcref`s.
        funcref: bool,
        /// A 64-bit table (memory64).
        table64: bool,
        /// Whether it starts all null (no initializer expression).
        starts_null: bool,
    },
}

/// An active element segment: what it writes into a table at
/// instantiation.
pub(super) struct ActiveElements {
    /// The table it initializes.
    pub table: u32,
    /// Where it starts, when the offset is a constant.
    pub offset: Option<u64>,
    /// Its items (a function index, or `None` for a null reference), or
    /// `None` when an item is not a constant function reference.
    pub items: Option<Vec<Option<u32>>>,
}

/// The largest table the translator dispatches over (`call_indirect`
/// becomes a `br_table` over its slots).
pub(super) const MAX_TABLE_ELEMENTS: u64 = 1 << 16;

/// One entry of the function index space.
pub(super) struct FuncDecl<'a> {
    /// Index into the type section.
    pub type_index: u32,
    /// `(module, name)` for an imported function.
    pub import: Option<(&'a str, &'a str)>,
}

/// The parsed module.
pub(super) struct ModuleInfo<'a> {
    /// The module's bytes (operator offsets index into them).
    pub wasm: &'a [u8],
    /// Function types by type index (`None`: a GC struct or array type).
    pub types: Vec<Option<FuncType>>,
    /// The function index space: imports, then defined functions.
    pub funcs: Vec<FuncDecl<'a>>,
    /// How many functions are imported.
    pub num_imported_funcs: u32,
    /// The global index space.
    pub globals: Vec<GlobalKind>,
    /// Memory 0's type, if the module has (or imports) a memory.
    pub memory0: Option<MemoryType>,
    /// Code bodies of the defined functions, in order.
    pub bodies: Vec<FunctionBody<'a>>,
    /// Each body's pending validation, taken when it is validated.
    pending: Vec<Option<FuncToValidate<ValidatorResources>>>,
    /// Exported functions: `(function index, export name)`.
    pub func_exports: Vec<(u32, &'a str)>,
    /// Exported globals: `(global index, export name)`.
    pub global_exports: Vec<(u32, &'a str)>,
    /// The table index space.
    pub tables: Vec<TableDecl>,
    /// Global names from the `name` section, if it names any.
    global_names: Option<Vec<(u32, &'a str)>>,
    /// The active element segments, in order.
    pub elements: Vec<ActiveElements>,
    /// Why the module's tables may change after instantiation (a
    /// `table.set`, `table.grow`, ... anywhere in it), or `None`; computed
    /// on first use.
    tables_mutated: OnceCell<Option<(String, u64)>>,
    /// Mutable `v128` globals with their constant initializers, until the
    /// whole module is read (then those that stay constant become
    /// [`GlobalKind::Const`]).
    v128_globals: Vec<(u32, u128)>,
    /// The offsets of the `drop`s and `select`s, in the bodies validated so
    /// far, whose operands are `v128`s.
    v128_operands: BTreeSet<u64>,
}

impl<'a> ModuleInfo<'a> {
    /// Parses `wasm` and validates all of it except the function bodies.
    pub fn parse(wasm: &'a [u8]) -> Result<Self, LowerError> {
        let mut validator = Validator::new_with_features(WasmFeatures::default());
        let mut m = ModuleInfo {
            wasm,
            types: Vec::new(),
            funcs: Vec::new(),
            num_imported_funcs: 0,
            globals: Vec::new(),
            memory0: None,
            bodies: Vec::new(),
            pending: Vec::new(),
            func_exports: Vec::new(),
            global_exports: Vec::new(),
            tables: Vec::new(),
            global_names: None,
            elements: Vec::new(),
            tables_mutated: OnceCell::new(),
            v128_globals: Vec::new(),
            v128_operands: BTreeSet::new(),
        };
        for payload in Parser::new(0).parse_all(wasm) {
            let payload = payload.map_err(invalid)?;
            match validator.payload(&payload).map_err(invalid)? {
                ValidPayload::Func(to_validate, body) => {
                    m.pending.push(Some(to_validate));
                    m.bodies.push(body);
                    continue;
                }
                ValidPayload::Parser(_) => {
                    return Err(LowerError::Invalid(String::from(
                        "a component or nested module is not a core Wasm module",
                    )));
                }
                ValidPayload::Ok | ValidPayload::End(_) => {}
            }
            m.section(payload)?;
        }
        m.settle_v128_globals();
        Ok(m)
    }

    /// A mutable `v128` global that no operator of the module sets and no
    /// export reaches (a host could set it through one) holds its
    /// initializer for the instance's life: LLVM and hand-written modules
    /// use such globals as vector constants. It becomes a constant; any
    /// other stays refused.
    fn settle_v128_globals(&mut self) {
        let mut candidates = core::mem::take(&mut self.v128_globals);
        candidates.retain(|(index, _)| self.global_exports.iter().all(|(g, _)| g != index));
        if candidates.is_empty() {
            return;
        }
        for body in &self.bodies {
            let Ok(mut reader) = body.get_operators_reader() else {
                return;
            };
            while !reader.eof() {
                let Ok(op) = reader.read() else { return };
                if let Operator::GlobalSet { global_index } = op {
                    candidates.retain(|(index, _)| *index != global_index);
                }
            }
        }
        for (index, bits) in candidates {
            self.globals[index as usize] = GlobalKind::Const(ConstValue::V128(bits));
        }
    }

    fn section(&mut self, payload: Payload<'a>) -> Result<(), LowerError> {
        match payload {
            Payload::TypeSection(reader) => {
                for group in reader {
                    for sub in group.map_err(invalid)?.into_types() {
                        self.types.push(match sub.composite_type.inner {
                            CompositeInnerType::Func(ty) => Some(ty),
                            _ => None,
                        });
                    }
                }
            }
            Payload::ImportSection(reader) => {
                for import in reader.into_imports() {
                    let import = import.map_err(invalid)?;
                    match import.ty {
                        TypeRef::Func(type_index) | TypeRef::FuncExact(type_index) => {
                            self.funcs.push(FuncDecl {
                                type_index,
                                import: Some((import.module, import.name)),
                            });
                            self.num_imported_funcs += 1;
                        }
                        TypeRef::Global(_) => self.globals.push(GlobalKind::Imported),
                        TypeRef::Memory(ty) => {
                            self.memory0.get_or_insert(ty);
                        }
                        TypeRef::Table(_) => self.tables.push(TableDecl::Imported),
                        TypeRef::Tag(_) => {}
                    }
                }
            }
            Payload::FunctionSection(reader) => {
                for type_index in reader {
                    self.funcs.push(FuncDecl {
                        type_index: type_index.map_err(invalid)?,
                        import: None,
                    });
                }
            }
            Payload::MemorySection(reader) => {
                for ty in reader {
                    let ty = ty.map_err(invalid)?;
                    self.memory0.get_or_insert(ty);
                }
            }
            Payload::GlobalSection(reader) => {
                for global in reader {
                    let global = global.map_err(invalid)?;
                    let kind = if global.ty.mutable {
                        if let Some(ConstValue::V128(bits)) = self.eval_const(&global.init_expr) {
                            let index = u32::try_from(self.globals.len()).unwrap_or(u32::MAX);
                            self.v128_globals.push((index, bits));
                        }
                        if global.ty.content_type == ValType::V128 {
                            GlobalKind::MutableV128
                        } else {
                            GlobalKind::Mutable(WasmType::from_val_type(global.ty.content_type))
                        }
                    } else {
                        match self.eval_const(&global.init_expr) {
                            Some(v) => GlobalKind::Const(v),
                            None => GlobalKind::NotConstant,
                        }
                    };
                    self.globals.push(kind);
                }
            }
            Payload::TableSection(reader) => {
                for table in reader {
                    let table = table.map_err(invalid)?;
                    self.tables.push(TableDecl::Defined {
                        initial: table.ty.initial,
                        funcref: table.ty.element_type.is_func_ref(),
                        table64: table.ty.table64,
                        starts_null: matches!(table.init, TableInit::RefNull),
                    });
                }
            }
            Payload::ElementSection(reader) => {
                for element in reader {
                    let element = element.map_err(invalid)?;
                    let ElementKind::Active {
                        table_index,
                        offset_expr,
                    } = element.kind
                    else {
                        continue;
                    };
                    let offset = match self.eval_const(&offset_expr) {
                        Some(ConstValue::I32(v)) => Some(u64::from(v.cast_unsigned())),
                        Some(ConstValue::I64(v)) => Some(v.cast_unsigned()),
                        _ => None,
                    };
                    let items = match element.items {
                        ElementItems::Functions(reader) => reader
                            .into_iter()
                            .map(|f| f.map(Some))
                            .collect::<Result<Vec<_>, _>>()
                            .map(Some)
                            .map_err(invalid)?,
                        ElementItems::Expressions(_, reader) => {
                            let mut items = Some(Vec::new());
                            for expr in reader {
                                let expr = expr.map_err(invalid)?;
                                let item = const_func_ref(&expr);
                                match (&mut items, item) {
                                    (Some(list), Some(item)) => list.push(item),
                                    _ => items = None,
                                }
                            }
                            items
                        }
                    };
                    self.elements.push(ActiveElements {
                        table: table_index.unwrap_or(0),
                        offset,
                        items,
                    });
                }
            }
            Payload::CustomSection(reader) => {
                // A malformed name section is not an invalid module: it is
                // ignored, as engines do.
                if let KnownCustom::Name(names) = reader.as_known() {
                    for name in names.flatten() {
                        if let Name::Global(map) = name {
                            let list = self.global_names.get_or_insert_with(Vec::new);
                            list.extend(map.into_iter().flatten().map(|n| (n.index, n.name)));
                        }
                    }
                }
            }
            Payload::ExportSection(reader) => {
                for export in reader {
                    let export = export.map_err(invalid)?;
                    match export.kind {
                        ExternalKind::Func => self.func_exports.push((export.index, export.name)),
                        ExternalKind::Global => {
                            self.global_exports.push((export.index, export.name));
                        }
                        _ => {}
                    }
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// Evaluates a constant expression to a number: the MVP constants,
    /// `v128.const`, `global.get` of an earlier constant global, and the
    /// extended-const integer `add`/`sub`/`mul`. Anything else is not a
    /// constant number.
    fn eval_const(&self, expr: &ConstExpr<'_>) -> Option<ConstValue> {
        let mut stack: Vec<ConstValue> = Vec::new();
        let mut reader = expr.get_operators_reader();
        while !reader.eof() {
            let op = reader.read().ok()?;
            let value = match op {
                Operator::I32Const { value } => ConstValue::I32(value),
                Operator::I64Const { value } => ConstValue::I64(value),
                Operator::F32Const { value } => ConstValue::F32(value.bits()),
                Operator::F64Const { value } => ConstValue::F64(value.bits()),
                Operator::V128Const { value } => {
                    ConstValue::V128(u128::from_le_bytes(*value.bytes()))
                }
                Operator::GlobalGet { global_index } => {
                    match self.globals.get(global_index as usize)? {
                        GlobalKind::Const(v) => *v,
                        _ => return None,
                    }
                }
                Operator::I32Add | Operator::I32Sub | Operator::I32Mul => {
                    let (ConstValue::I32(b), ConstValue::I32(a)) = (stack.pop()?, stack.pop()?)
                    else {
                        return None;
                    };
                    ConstValue::I32(match op {
                        Operator::I32Add => a.wrapping_add(b),
                        Operator::I32Sub => a.wrapping_sub(b),
                        _ => a.wrapping_mul(b),
                    })
                }
                Operator::I64Add | Operator::I64Sub | Operator::I64Mul => {
                    let (ConstValue::I64(b), ConstValue::I64(a)) = (stack.pop()?, stack.pop()?)
                    else {
                        return None;
                    };
                    ConstValue::I64(match op {
                        Operator::I64Add => a.wrapping_add(b),
                        Operator::I64Sub => a.wrapping_sub(b),
                        _ => a.wrapping_mul(b),
                    })
                }
                Operator::End => break,
                _ => return None,
            };
            stack.push(value);
        }
        match stack.as_slice() {
            [v] => Some(*v),
            _ => None,
        }
    }

    /// The shadow stack's pointer (`docs/kernels.md`, "Globals and the shadow stack"):
    /// the global the `name` section calls `__stack_pointer`; in a module
    /// whose name section names no globals, global 0 when it is a defined,
    /// mutable `i32` (where wasm-ld always puts the stack pointer).
    pub fn stack_pointer(&self) -> Option<u32> {
        let (candidate, named) = match &self.global_names {
            Some(names) => (
                names
                    .iter()
                    .find(|(_, name)| *name == "__stack_pointer")
                    .map(|(index, _)| *index)?,
                true,
            ),
            None => (0, false),
        };
        let mutable_i32 = matches!(
            self.globals.get(candidate as usize),
            Some(GlobalKind::Mutable(Some(WasmType::I32)))
        );
        // An unnamed global 0 is the stack pointer only when some function
        // opens a frame with it as LLVM's prologue does: a module's own
        // mutable `i32` (the spec tests' `global.set` of a counter) is an
        // ordinary global, whose value need not leave room for frames.
        (mutable_i32 && (named || self.opens_frames(candidate))).then_some(candidate)
    }

    /// Whether some function body opens a stack frame below global `sp`
    /// as LLVM's prologue does: `global.get $sp`, `i32.const N`,
    /// `i32.sub`.
    fn opens_frames(&self, sp: u32) -> bool {
        self.bodies.iter().any(|body| {
            let Ok(mut ops) = body.get_operators_reader() else {
                return false;
            };
            let mut state = 0u8;
            while !ops.eof() {
                let Ok(op) = ops.read() else {
                    return false;
                };
                state = match (state, op) {
                    (_, Operator::GlobalGet { global_index }) if global_index == sp => 1,
                    (1, Operator::I32Const { .. }) => 2,
                    (2, Operator::I32Sub) => return true,
                    _ => 0,
                };
            }
            false
        })
    }

    /// The first operator anywhere in the module that changes a table after
    /// instantiation (`table.set`, `table.grow`, `table.fill`,
    /// `table.copy`, `table.init`), with its offset; `None` when the tables
    /// keep what the element segments put there.
    pub fn table_mutation(&self) -> Option<&(String, u64)> {
        self.tables_mutated
            .get_or_init(|| {
                for body in &self.bodies {
                    let Ok(mut reader) = body.get_operators_reader() else {
                        continue;
                    };
                    while !reader.eof() {
                        let offset = reader.original_position();
                        let Ok(op) = reader.read() else { break };
                        if matches!(
                            op,
                            Operator::TableSet { .. }
                                | Operator::TableGrow { .. }
                                | Operator::TableFill { .. }
                                | Operator::TableCopy { .. }
                                | Operator::TableInit { .. }
                        ) {
                            return Some((super::detect::op_name(&op), offset));
                        }
                    }
                }
                None
            })
            .as_ref()
    }

    /// What table `table` holds for the whole life of an instance (a
    /// function index or `None`, slot by slot), or why that is not known
    /// when the module is translated.
    pub fn table_contents(&self, table: u32) -> Result<Vec<Option<u32>>, String> {
        let (initial, funcref, table64, starts_null) = match self.tables.get(table as usize) {
            None => return Err(format!("the module has no table {table}")),
            Some(TableDecl::Imported) => {
                return Err(format!(
                    "table {table} is imported, so its contents are not known when the kernel \
                     is translated"
                ));
            }
            Some(TableDecl::Defined {
                initial,
                funcref,
                table64,
                starts_null,
            }) => (*initial, *funcref, *table64, *starts_null),
        };
        if let Some((op, offset)) = self.table_mutation() {
            return Err(format!(
                "the module changes its tables (`{op}` at offset {offset:#x}), so their \
                 contents are not known when the kernel is translated"
            ));
        }
        if !funcref || table64 || !starts_null {
            return Err(format!(
                "table {table} is not a 32-bit `funcref` table that starts empty"
            ));
        }
        if initial > MAX_TABLE_ELEMENTS {
            return Err(format!(
                "table {table} has {initial} elements; kernels dispatch over at most \
                 {MAX_TABLE_ELEMENTS}"
            ));
        }
        let mut contents = vec![None; initial as usize];
        for segment in self.elements.iter().filter(|e| e.table == table) {
            let (Some(offset), Some(items)) = (segment.offset, &segment.items) else {
                return Err(format!(
                    "an element segment of table {table} has an offset or item that is not \
                     a constant"
                ));
            };
            let end = offset
                .checked_add(items.len() as u64)
                .filter(|&end| end <= initial)
                .ok_or_else(|| {
                    format!("an element segment does not fit table {table} (instantiation fails)")
                })?;
            contents[offset as usize..end as usize].copy_from_slice(items);
        }
        Ok(contents)
    }

    /// The position of a defined function among the bodies, or `None` for
    /// an import (or an index out of range).
    pub fn defined(&self, func_index: u32) -> Option<usize> {
        let def = func_index.checked_sub(self.num_imported_funcs)? as usize;
        (def < self.bodies.len()).then_some(def)
    }

    /// A function's type.
    pub fn func_type(&self, func_index: u32) -> Result<&FuncType, LowerError> {
        self.funcs
            .get(func_index as usize)
            .and_then(|f| self.types.get(f.type_index as usize))
            .and_then(Option::as_ref)
            .ok_or_else(|| {
                LowerError::Invalid(format!("function {func_index} has no function type"))
            })
    }

    /// Whether type `type_index` is a function type whose parameters and
    /// results are all numbers (`i32`, `i64`, `f32`, `f64`) or `v128`s.
    pub fn numeric_func_type(&self, type_index: u32) -> bool {
        self.types
            .get(type_index as usize)
            .and_then(Option::as_ref)
            .is_some_and(|ty| ty.params().iter().chain(ty.results()).all(|t| numeric(*t)))
    }

    /// Whether function `func` has type `type_index` (`call_indirect`'s
    /// check: the same parameters and results).
    pub fn same_type(&self, func: u32, type_index: u32) -> bool {
        let want = self.types.get(type_index as usize).and_then(Option::as_ref);
        match (self.func_type(func), want) {
            (Ok(have), Some(want)) => {
                have.params() == want.params() && have.results() == want.results()
            }
            _ => false,
        }
    }

    /// The kernel's Wasm parameter types, after checking that `func_index`
    /// names a defined function with scalar parameters and no results.
    pub fn kernel_params(&self, func_index: u32) -> Result<Vec<WasmType>, LowerError> {
        if func_index as usize >= self.funcs.len() {
            return Err(LowerError::Invalid(format!(
                "no function {func_index}: the module has {} functions (imports included)",
                self.funcs.len()
            )));
        }
        if let Some((module, name)) = self.funcs[func_index as usize].import {
            return Err(LowerError::Invalid(format!(
                "function {func_index} is the import `{module}`.`{name}`, not a function \
                 the module defines"
            )));
        }
        let ty = self.func_type(func_index)?;
        if !ty.results().is_empty() {
            return Err(LowerError::Invalid(format!(
                "function {func_index} returns {} value(s); a kernel returns nothing \
                 (it writes its results to memory)",
                ty.results().len()
            )));
        }
        ty.params()
            .iter()
            .enumerate()
            .map(|(i, &p)| {
                WasmType::from_val_type(p).ok_or_else(|| {
                    LowerError::Invalid(format!(
                        "parameter {i} of function {func_index} is a {p}; kernel parameters \
                         are i32, i64, f32 or f64"
                    ))
                })
            })
            .collect()
    }

    /// The name a kernel goes by: its first export name, else
    /// `kernel_<index>`.
    pub fn kernel_name(&self, func_index: u32) -> String {
        self.func_exports
            .iter()
            .find(|(index, _)| *index == func_index)
            .map(|(_, name)| String::from(*name))
            .unwrap_or_else(|| format!("kernel_{func_index}"))
    }

    /// Validates the bodies of `functions` (defined function indices), and
    /// records which of their `drop`s and `select`s take `v128` operands
    /// ([`ModuleInfo::v128_operands`]): the validator knows every
    /// operand's type, and only these two operators do not say theirs.
    pub fn validate_bodies(&mut self, functions: &[u32]) -> Result<(), LowerError> {
        let mut allocs = FuncValidatorAllocations::default();
        for &f in functions {
            let Some(def) = self.defined(f) else { continue };
            let Some(to_validate) = self.pending[def].take() else {
                continue;
            };
            let mut validator = to_validate.into_validator(allocs);
            let body = &self.bodies[def];
            let mut locals = body.get_locals_reader().map_err(invalid)?;
            for _ in 0..locals.get_count() {
                let offset = locals.original_position();
                let (count, ty) = locals.read().map_err(invalid)?;
                validator
                    .define_locals(offset, count, ty)
                    .map_err(invalid)?;
            }
            let mut operators = body.get_operators_reader().map_err(invalid)?;
            while !operators.eof() {
                let (op, offset) = operators.read_with_offset().map_err(invalid)?;
                // The value a `drop` drops is on top; `select`'s two values
                // are below its condition.
                let depth = match op {
                    Operator::Drop => Some(0),
                    Operator::Select => Some(1),
                    _ => None,
                };
                if let Some(depth) = depth
                    && validator.get_operand_type(depth) == Some(Some(ValType::V128))
                {
                    self.v128_operands.insert(offset);
                }
                validator.op(offset, &op).map_err(invalid)?;
            }
            operators.finish().map_err(invalid)?;
            allocs = validator.into_allocations();
        }
        Ok(())
    }

    /// Whether the `drop` or untyped `select` at `offset` (in a body
    /// [`ModuleInfo::validate_bodies`] validated) takes `v128` operands.
    pub fn v128_operand(&self, offset: u64) -> bool {
        self.v128_operands.contains(&offset)
    }
}

#[cfg(test)]
mod tests {
    use super::ModuleInfo;

    fn stack_pointer(wat: &str) -> Option<u32> {
        let wasm = wat::parse_str(wat).expect("wat");
        ModuleInfo::parse(&wasm).expect("valid").stack_pointer()
    }

    #[test]
    fn an_unnamed_global_is_the_stack_pointer_only_when_a_prologue_uses_it() {
        // The spec tests' `as-global.set-value` (block.wast): a counter,
        // no name section (no identifiers).
        let counter = r#"(module (global (mut i32) (i32.const 10))
          (func (export "k") (global.set 0 (i32.add (global.get 0) (i32.const 1)))))"#;
        assert_eq!(stack_pointer(counter), None);
        let prologue = r#"(module (global (mut i32) (i32.const 65536)) (memory 2)
          (func (export "k") (local i32)
            (local.set 0 (i32.sub (global.get 0) (i32.const 32)))
            (global.set 0 (local.get 0))
            (i32.store (local.get 0) (i32.const 1))
            (global.set 0 (i32.add (local.get 0) (i32.const 32)))))"#;
        assert_eq!(stack_pointer(prologue), Some(0));
        // A name says so whatever the code does; another name says not.
        let named = r#"(module (global $__stack_pointer (mut i32) (i32.const 10))
          (func (export "k") (global.set $__stack_pointer (i32.const 4))))"#;
        assert_eq!(stack_pointer(named), Some(0));
        let other = r#"(module (global $count (mut i32) (i32.const 10))
          (func (export "k") (local i32)
            (local.set 0 (i32.sub (global.get $count) (i32.const 32)))))"#;
        assert_eq!(stack_pointer(other), None);
    }
}
