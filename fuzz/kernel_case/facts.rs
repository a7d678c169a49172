//! What the generator needs to know of wasm-smith's module: types,
//! functions, its imports (intrinsics), globals, tables' element segments
//! and each body's calls. It changes nothing.

use tensorwasm_core::lower::{Intrinsic, cooperative::CoopIntrinsic, math::MathIntrinsic};
use wasmparser::{ElementItems, ElementKind, FuncType, Operator, Parser, Payload, ValType};

use super::F_EXPORT;

/// What the generator needs to know of a module.
pub struct Facts {
    /// Function types, by type index.
    pub types: Vec<FuncType>,
    /// Each function's type index, imports first.
    pub funcs: Vec<u32>,
    /// The imported functions (all intrinsics).
    pub imports: Vec<Import>,
    /// Each global's type and mutability, by index (wasm-smith imports
    /// none).
    pub globals: Vec<(ValType, bool)>,
    /// Defined functions: operator count and callees (direct calls, and
    /// `call_indirect`s as their table and type).
    pub bodies: Vec<Body>,
    /// Functions that active element segments put in each table, by table.
    pub tables: Vec<Vec<u32>>,
    /// The function exported as `f`.
    pub f: Option<u32>,
    /// Whether the module has a `name` section already.
    pub has_names: bool,
}

/// An imported function: an intrinsic of `tensorwasm_kernel`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Import {
    /// A thread's or block's position (`thread_idx_x`, ...).
    Position(Intrinsic),
    /// A cooperative intrinsic (shared memory, barrier, warp operations).
    Coop(CoopIntrinsic),
    /// An arithmetic intrinsic (`fma_f32`, `fma_f64`).
    Math(MathIntrinsic),
}

impl Import {
    fn from_import(module: &str, name: &str) -> Option<Import> {
        Intrinsic::from_import(module, name)
            .map(Import::Position)
            .or_else(|| CoopIntrinsic::from_import(module, name).map(Import::Coop))
            .or_else(|| MathIntrinsic::from_import(module, name).map(Import::Math))
    }
}

/// One defined function, as the call graph sees it.
pub struct Body {
    pub operators: u64,
    pub calls: Vec<u32>,
    /// `(table, type)` of each `call_indirect`.
    pub indirect: Vec<(u32, u32)>,
    /// Which of the constructs the tally follows ([`TRACKED`]) it uses.
    pub uses: Vec<&'static str>,
}

/// Operators whose presence in a compared kernel the tally counts: what
/// compilers emit and the translator gained; then four kinds of calls of
/// cooperative intrinsics ([`coop_tracked`]), and calls of the fused
/// multiply-adds; then the loop cases (`loops`).
pub const TRACKED: [&str; 12] = [
    "call_indirect",
    "global.set",
    "memory.copy",
    "memory.fill",
    "atomics",
    "shared memory",
    "shared atomics",
    "barrier",
    "warp operations",
    "fused multiply-add",
    "loop shape",
    "row shape",
];

/// The tracked constructs a call of `which` uses: any shared access (the
/// size too) is `shared memory`, the shared atomics are also `shared
/// atomics`; lane ids, the warp size, shuffles and votes are `warp
/// operations`.
pub fn coop_tracked(which: CoopIntrinsic) -> &'static [&'static str] {
    match which {
        CoopIntrinsic::SharedAtomic(_) => &[TRACKED[5], TRACKED[6]],
        c if c.uses_shared_memory() => &[TRACKED[5]],
        CoopIntrinsic::Barrier => &[TRACKED[7]],
        _ => &[TRACKED[8]],
    }
}

impl Facts {
    pub fn parse(wasm: &[u8]) -> Facts {
        let mut facts = Facts {
            types: Vec::new(),
            funcs: Vec::new(),
            imports: Vec::new(),
            globals: Vec::new(),
            bodies: Vec::new(),
            tables: Vec::new(),
            f: None,
            has_names: false,
        };
        for payload in Parser::new(0).parse_all(wasm) {
            match payload.expect("the module parses") {
                Payload::TypeSection(reader) => {
                    for group in reader {
                        for ty in group.expect("a type").into_types() {
                            facts.types.push(ty.unwrap_func().clone());
                        }
                    }
                }
                Payload::ImportSection(reader) => {
                    for import in reader.into_imports() {
                        let import = import.expect("an import");
                        let wasmparser::TypeRef::Func(ty) = import.ty else {
                            panic!("wasm-smith imported a non-function: {import:?}");
                        };
                        let which =
                            Import::from_import(import.module, import.name).expect("an intrinsic");
                        facts.funcs.push(ty);
                        facts.imports.push(which);
                    }
                }
                Payload::FunctionSection(reader) => {
                    for ty in reader {
                        facts.funcs.push(ty.expect("a function"));
                    }
                }
                Payload::TableSection(reader) => {
                    for table in reader {
                        table.expect("a table");
                        facts.tables.push(Vec::new());
                    }
                }
                Payload::GlobalSection(reader) => {
                    for global in reader {
                        let ty = global.expect("a global").ty;
                        facts.globals.push((ty.content_type, ty.mutable));
                    }
                }
                Payload::ExportSection(reader) => {
                    for export in reader {
                        let export = export.expect("an export");
                        if export.name == F_EXPORT && export.kind == wasmparser::ExternalKind::Func
                        {
                            facts.f = Some(export.index);
                        }
                    }
                }
                Payload::ElementSection(reader) => {
                    for element in reader {
                        let element = element.expect("an element segment");
                        let ElementKind::Active { table_index, .. } = element.kind else {
                            continue;
                        };
                        let items: Vec<u32> = match element.items {
                            ElementItems::Functions(reader) => {
                                reader.into_iter().map(|f| f.expect("an item")).collect()
                            }
                            ElementItems::Expressions(_, reader) => reader
                                .into_iter()
                                .filter_map(|expr| {
                                    let mut ops = expr.expect("an item").get_operators_reader();
                                    match ops.read() {
                                        Ok(Operator::RefFunc { function_index }) => {
                                            Some(function_index)
                                        }
                                        _ => None,
                                    }
                                })
                                .collect(),
                        };
                        let table = table_index.unwrap_or(0) as usize;
                        if let Some(slots) = facts.tables.get_mut(table) {
                            slots.extend(items);
                        }
                    }
                }
                Payload::CodeSectionEntry(body) => {
                    let mut operators = 0;
                    let (mut calls, mut indirect, mut uses) = (Vec::new(), Vec::new(), Vec::new());
                    let mut reader = body.get_operators_reader().expect("operators");
                    while !reader.eof() {
                        let op = reader.read().expect("an operator");
                        operators += 1;
                        match op {
                            Operator::Call { function_index } => {
                                calls.push(function_index);
                                match facts.imports.get(function_index as usize) {
                                    Some(&Import::Coop(c)) => {
                                        uses.extend(coop_tracked(c).iter().copied());
                                    }
                                    Some(Import::Math(_)) => uses.push(TRACKED[9]),
                                    _ => {}
                                }
                            }
                            Operator::CallIndirect {
                                type_index,
                                table_index,
                            } => {
                                indirect.push((table_index, type_index));
                                uses.push(TRACKED[0]);
                            }
                            Operator::GlobalSet { .. } => uses.push(TRACKED[1]),
                            Operator::MemoryCopy { .. } => uses.push(TRACKED[2]),
                            Operator::MemoryFill { .. } => uses.push(TRACKED[3]),
                            // The threads operators (and `atomic.fence`).
                            op if format!("{op:?}").contains("Atomic") => uses.push(TRACKED[4]),
                            _ => {}
                        }
                    }
                    uses.sort_unstable();
                    uses.dedup();
                    facts.bodies.push(Body {
                        operators,
                        calls,
                        indirect,
                        uses,
                    });
                }
                Payload::CustomSection(reader) if reader.name() == "name" => {
                    facts.has_names = true;
                }
                _ => {}
            }
        }
        for slots in &mut facts.tables {
            slots.sort_unstable();
            slots.dedup();
        }
        facts
    }

    pub fn imported_funcs(&self) -> u32 {
        self.imports.len() as u32
    }

    pub fn func_type(&self, func: u32) -> &FuncType {
        &self.types[self.funcs[func as usize] as usize]
    }

    /// The function that imports `which`, if the module imports it.
    pub fn intrinsic(&self, which: Intrinsic) -> Option<u32> {
        self.import(Import::Position(which))
    }

    /// The function that imports cooperative intrinsic `which`, if the
    /// module imports it.
    pub fn coop(&self, which: CoopIntrinsic) -> Option<u32> {
        self.import(Import::Coop(which))
    }

    /// Whether the module imports a shared-memory intrinsic.
    pub fn imports_shared_memory(&self) -> bool {
        self.imports
            .iter()
            .any(|i| matches!(i, Import::Coop(c) if c.uses_shared_memory()))
    }

    fn import(&self, which: Import) -> Option<u32> {
        self.imports
            .iter()
            .position(|&w| w == which)
            .map(|i| i as u32)
    }

    /// The functions a defined function `def` may call: its direct
    /// callees, and for each `call_indirect` the functions of the call's
    /// type that the table's active segments hold (as the translator
    /// counts them).
    fn callees(&self, def: usize) -> Vec<u32> {
        let body = &self.bodies[def];
        let mut callees = body.calls.clone();
        for &(table, ty) in &body.indirect {
            let want = &self.types[ty as usize];
            let slots = self.tables.get(table as usize).map_or(&[][..], |s| &s[..]);
            callees.extend(
                slots
                    .iter()
                    .filter(|&&f| (f as usize) < self.funcs.len() && self.func_type(f) == want),
            );
        }
        callees
    }

    /// Mutable globals of a scalar type: the ones a kernel may take as
    /// thread-private copies, exported as `g<index>` so the harness can read
    /// their launch values.
    pub fn mutable_scalar_globals(&self) -> impl Iterator<Item = u32> + '_ {
        self.globals
            .iter()
            .enumerate()
            .filter(|(_, (ty, mutable))| *mutable && !matches!(ty, ValType::V128 | ValType::Ref(_)))
            .map(|(i, _)| i as u32)
    }
}

/// Operators of `func` with every callee inlined (saturating), or `None`
/// for a recursive call graph (the translator refuses it).
pub fn inlined_operators(facts: &Facts, func: u32) -> Option<u64> {
    #[derive(Clone, Copy)]
    enum Seen {
        No,
        OnPath,
        Done(u64),
    }
    fn visit(facts: &Facts, func: u32, seen: &mut [Seen]) -> Option<u64> {
        let Some(def) = func.checked_sub(facts.imported_funcs()) else {
            return Some(1);
        };
        let def = def as usize;
        match seen[def] {
            Seen::OnPath => return None,
            Seen::Done(n) => return Some(n),
            Seen::No => {}
        }
        seen[def] = Seen::OnPath;
        let mut total = facts.bodies[def].operators;
        for callee in facts.callees(def) {
            total = total.saturating_add(visit(facts, callee, seen)?);
        }
        seen[def] = Seen::Done(total);
        Some(total)
    }
    visit(facts, func, &mut vec![Seen::No; facts.bodies.len()])
}

/// Which defined functions `f` reaches through calls, direct or through a
/// table (itself too).
pub fn reached_from(facts: &Facts, f: u32) -> Vec<bool> {
    let mut reached = vec![false; facts.bodies.len()];
    let mut stack = vec![f];
    while let Some(func) = stack.pop() {
        let Some(def) = func.checked_sub(facts.imported_funcs()) else {
            continue;
        };
        if !std::mem::replace(&mut reached[def as usize], true) {
            stack.extend(facts.callees(def as usize));
        }
    }
    reached
}
