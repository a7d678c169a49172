//! The module a case runs: wasm-smith's, with `memory.grow`, `memory.init`
//! and `data.drop` rewritten in place, some operators rewritten in place as
//! calls of cooperative intrinsics, bodies the kernel never reaches stubbed
//! out, and the kernel, the stack pointer, the globals' exports and a
//! `name` section appended. Every byte offset of wasm-smith's code keeps
//! its operator (up to the shift the appended global makes, which both
//! sides see alike).

use arbitrary::{Result as ArbitraryResult, Unstructured};
use tensorwasm_core::lower::{
    INTRINSIC_MODULE, Intrinsic, cooperative::CoopIntrinsic, math::MathIntrinsic,
    translate::WasmType,
};
use wasm_encoder::{BlockType, Instruction as I, MemArg};
use wasmparser::{FuncType, Operator, Parser, Payload, ValType};

use super::facts::{Facts, reached_from};
use super::run::Launch;
use super::{F_EXPORT, KERNEL_EXPORT, MAX_PAGES, PAGE};

/// The name the translator reads the stack pointer by.
const STACK_POINTER: &str = "__stack_pointer";

/// Functions wasm-smith may define (F among them), beyond its imports.
const MAX_DEFINED_FUNCS: usize = 16;

/// wasm-smith's configuration; `coop`: whether the cooperative intrinsics
/// are offered as imports besides the position intrinsics.
pub fn smith_config(
    pages: u64,
    params: &[ValType],
    results: &[ValType],
    tables: bool,
    coop: bool,
) -> wasm_smith::Config {
    use wasm_smith::{InstructionKind as K, InstructionKinds};
    // Table operators the translator refuses (bulk memory's `table.copy`,
    // `table.init`, `elem.drop`; only `call_indirect`, a control operator,
    // is lowered); a quarter of the inputs allow them, so the refusals stay
    // exercised.
    let mut kinds = vec![
        K::Numeric,
        K::Vector,
        K::Parametric,
        K::Variable,
        K::Memory,
        K::Control,
    ];
    if tables {
        kinds.extend([K::Table, K::Reference]);
    }
    let (offered, imports) = intrinsics_module(coop);
    wasm_smith::Config {
        // wasm-smith takes each offered import with probability 1/2.
        available_imports: Some(imports),
        // The only exports, and the only memory (`max_memories` counts the
        // ones wasm-smith adds on its own).
        exports: Some(exports_module(pages, params, results)),
        max_memories: 0,
        max_memory32_bytes: MAX_PAGES * PAGE,
        memory64_enabled: false,
        custom_page_sizes_enabled: false,
        allow_start_export: false,
        bulk_memory_enabled: true,
        // No reference types: wasmtime without its GC refuses `externref`,
        // which wasm-smith puts in most modules that have them. Table 0 of
        // `funcref` still makes `call_indirect`.
        reference_types_enabled: false,
        max_tables: 1,
        max_table_elements: 64,
        max_element_segments: 4,
        allowed_instructions: InstructionKinds::new(&kinds),
        gc_enabled: false,
        custom_descriptors_enabled: false,
        exceptions_enabled: false,
        // SIMD (docs/kernels.md, "SIMD"): `v128` values, operators, loads
        // and stores. Relaxed SIMD, which kernels refuse, is left out: its
        // results are wasmtime's choice.
        simd_enabled: true,
        relaxed_simd_enabled: false,
        // The threads proposal's atomics (docs/kernels.md, "Atomics");
        // `wait`/`notify`, which kernels refuse, keep the refusal covered.
        threads_enabled: true,
        shared_everything_threads_enabled: false,
        tail_call_enabled: false,
        wide_arithmetic_enabled: false,
        max_tags: 0,
        max_imports: offered,
        // Imports count as functions: wasm-smith takes no more once there
        // are `max_funcs`, and defines none past it.
        max_funcs: MAX_DEFINED_FUNCS + offered,
        max_globals: 8,
        max_data_segments: 4,
        max_instructions: 100,
        canonicalize_nans: true,
        ..wasm_smith::Config::default()
    }
}

/// The imports wasm-smith may use, and how many: the twelve position
/// intrinsics, `() -> i32`, and with `coop` every cooperative intrinsic
/// (`CoopIntrinsic::all()`, with its own type) and the fused
/// multiply-adds (`MathIntrinsic::ALL`).
fn intrinsics_module(coop: bool) -> (usize, Vec<u8>) {
    let mut signatures: Vec<(Vec<WasmType>, Option<WasmType>)> = Vec::new();
    let mut type_of = |params: Vec<WasmType>, result: Option<WasmType>| -> u32 {
        let sig = (params, result);
        let at = signatures
            .iter()
            .position(|s| *s == sig)
            .unwrap_or_else(|| {
                signatures.push(sig);
                signatures.len() - 1
            });
        at as u32
    };
    let mut entries: Vec<(String, u32)> = Intrinsic::ALL
        .iter()
        .map(|which| {
            (
                which.import_name().to_string(),
                type_of(vec![], Some(WasmType::I32)),
            )
        })
        .collect();
    if coop {
        for which in CoopIntrinsic::all() {
            let mut name = String::new();
            which.import_name(&mut name);
            entries.push((name, type_of(which.params(), which.result())));
        }
        for which in MathIntrinsic::ALL {
            let t = which.value_type();
            entries.push((
                which.import_name().to_string(),
                type_of(vec![t; which.arity()], Some(t)),
            ));
        }
    }
    let mut types = wasm_encoder::TypeSection::new();
    for (params, result) in &signatures {
        types.ty().function(
            params.iter().map(|&t| wasm_valtype(t)),
            result.iter().map(|&t| wasm_valtype(t)),
        );
    }
    let mut imports = wasm_encoder::ImportSection::new();
    for (name, ty) in &entries {
        imports.import(
            INTRINSIC_MODULE,
            name,
            wasm_encoder::EntityType::Function(*ty),
        );
    }
    let mut module = wasm_encoder::Module::new();
    module.section(&types).section(&imports);
    (entries.len(), module.finish())
}

fn wasm_valtype(ty: WasmType) -> wasm_encoder::ValType {
    match ty {
        WasmType::I32 => wasm_encoder::ValType::I32,
        WasmType::I64 => wasm_encoder::ValType::I64,
        WasmType::F32 => wasm_encoder::ValType::F32,
        WasmType::F64 => wasm_encoder::ValType::F64,
    }
}

/// The exports wasm-smith must make: memory 0 as `memory`, and F as `f`
/// with the given type (wasm-smith writes its body).
fn exports_module(pages: u64, params: &[ValType], results: &[ValType]) -> Vec<u8> {
    let mut body = wasm_encoder::Function::new([]);
    body.instruction(&I::Unreachable).instruction(&I::End);
    f_module(
        pages,
        params.iter().map(|&t| enc_valtype(t)),
        results.iter().map(|&t| enc_valtype(t)),
        &body,
    )
}

/// A module of memory 0 (`pages` pages, at most [`MAX_PAGES`], exported
/// as `memory`) and one function F of the given type and `body`, exported
/// as `f`.
pub(super) fn f_module(
    pages: u64,
    params: impl IntoIterator<Item = wasm_encoder::ValType, IntoIter: ExactSizeIterator>,
    results: impl IntoIterator<Item = wasm_encoder::ValType, IntoIter: ExactSizeIterator>,
    body: &wasm_encoder::Function,
) -> Vec<u8> {
    let mut types = wasm_encoder::TypeSection::new();
    types.ty().function(params, results);
    let mut functions = wasm_encoder::FunctionSection::new();
    functions.function(0);
    let mut memories = wasm_encoder::MemorySection::new();
    memories.memory(wasm_encoder::MemoryType {
        minimum: pages,
        maximum: Some(MAX_PAGES),
        memory64: false,
        shared: false,
        page_size_log2: None,
    });
    let mut exports = wasm_encoder::ExportSection::new();
    exports.export("memory", wasm_encoder::ExportKind::Memory, 0);
    exports.export(F_EXPORT, wasm_encoder::ExportKind::Func, 0);
    let mut code = wasm_encoder::CodeSection::new();
    code.function(body);
    let mut module = wasm_encoder::Module::new();
    module
        .section(&types)
        .section(&functions)
        .section(&memories)
        .section(&exports)
        .section(&code);
    module.finish()
}

/// Rewrites, in place, the operators the translator refuses that have a
/// stand-in of the same stack effect: `memory.grow` becomes `i32.eqz`,
/// `memory.init` three `drop`s, `data.drop` a `nop`, each padded with
/// `nop`s to its length, so every other byte stays where it was. What it
/// rewrote.
pub fn rewrite_refused(wasm: &mut [u8]) -> Vec<&'static str> {
    let mut patches: Vec<(usize, usize, &'static [u8], &'static str)> = Vec::new();
    for payload in Parser::new(0).parse_all(wasm) {
        if let Payload::CodeSectionEntry(body) = payload.expect("wasm-smith's module parses") {
            let mut reader = body.get_operators_reader().expect("operators");
            while !reader.eof() {
                let (op, at) = reader.read_with_offset().expect("an operator");
                let span = (at as usize, reader.original_position() as usize);
                match op {
                    Operator::MemoryGrow { .. } => {
                        patches.push((span.0, span.1, &[0x45], "memory.grow"));
                    }
                    Operator::MemoryInit { .. } => {
                        patches.push((span.0, span.1, &[0x1a; 3], "memory.init"));
                    }
                    Operator::DataDrop { .. } => patches.push((span.0, span.1, &[], "data.drop")),
                    _ => {}
                }
            }
        }
    }
    let mut what: Vec<&'static str> = patches.iter().map(|p| p.3).collect();
    what.sort_unstable();
    what.dedup();
    for (start, end, with, _) in patches {
        assert!(
            end - start >= with.len(),
            "a stand-in longer than its operator"
        );
        wasm[start..start + with.len()].copy_from_slice(with);
        wasm[start + with.len()..end].fill(0x01);
    }
    what
}

/// Stand-ins that make the cooperative intrinsics' calls common: wasm-smith
/// calls any one function rarely, and its code mostly traps before.
/// Operators with a cooperative intrinsic of the same stack effect, by
/// what they become: guest-memory loads and stores a shared access (and an
/// `i32` load a vote), `i32` read-modify-writes a shared atomic or a
/// shuffle, `atomic.fence` a barrier, `memory.size` a cooperative `() ->
/// i32`.
fn coop_stand_ins(op: &Operator) -> Option<(&'static str, &'static [CoopIntrinsic])> {
    use CoopIntrinsic::{Barrier, LaneId, SharedAtomic, SharedLoad, SharedSize, SharedStore};
    use CoopIntrinsic::{Shuffle, Vote as V, WarpSize};
    use Operator as O;
    use WasmType::{F32, F64, I32, I64};
    use tensorwasm_core::lower::{
        atomic::AtomicIntrinsic as A,
        cooperative::{ShuffleMode as S, Vote},
    };
    const LOAD_I32: &[CoopIntrinsic] =
        &[SharedLoad(I32), V(Vote::Ballot), V(Vote::Any), V(Vote::All)];
    const RMW_I32: &[CoopIntrinsic] = &[
        SharedAtomic(A::AddI32),
        SharedAtomic(A::SubI32),
        SharedAtomic(A::AndI32),
        SharedAtomic(A::OrI32),
        SharedAtomic(A::XorI32),
        SharedAtomic(A::XchgI32),
        SharedAtomic(A::MinI32),
        SharedAtomic(A::MaxI32),
        SharedAtomic(A::MinU32),
        SharedAtomic(A::MaxU32),
        Shuffle(S::Idx, I32),
        Shuffle(S::Up, I32),
        Shuffle(S::Down, I32),
        Shuffle(S::Xor, I32),
    ];
    Some(match op {
        O::I32Load { .. }
        | O::I32Load8S { .. }
        | O::I32Load8U { .. }
        | O::I32Load16S { .. }
        | O::I32Load16U { .. }
        | O::I32AtomicLoad { .. }
        | O::I32AtomicLoad8U { .. }
        | O::I32AtomicLoad16U { .. } => ("a load as a shared load or a vote", LOAD_I32),
        O::I64Load { .. }
        | O::I64Load8S { .. }
        | O::I64Load8U { .. }
        | O::I64Load16S { .. }
        | O::I64Load16U { .. }
        | O::I64Load32S { .. }
        | O::I64Load32U { .. }
        | O::I64AtomicLoad { .. }
        | O::I64AtomicLoad8U { .. }
        | O::I64AtomicLoad16U { .. }
        | O::I64AtomicLoad32U { .. } => ("a load as a shared load", &[SharedLoad(I64)]),
        O::F32Load { .. } => ("a load as a shared load", &[SharedLoad(F32)]),
        O::F64Load { .. } => ("a load as a shared load", &[SharedLoad(F64)]),
        O::I32Store { .. }
        | O::I32Store8 { .. }
        | O::I32Store16 { .. }
        | O::I32AtomicStore { .. }
        | O::I32AtomicStore8 { .. }
        | O::I32AtomicStore16 { .. } => ("a store as a shared store", &[SharedStore(I32)]),
        O::I64Store { .. }
        | O::I64Store8 { .. }
        | O::I64Store16 { .. }
        | O::I64Store32 { .. }
        | O::I64AtomicStore { .. }
        | O::I64AtomicStore8 { .. }
        | O::I64AtomicStore16 { .. }
        | O::I64AtomicStore32 { .. } => ("a store as a shared store", &[SharedStore(I64)]),
        O::F32Store { .. } => ("a store as a shared store", &[SharedStore(F32)]),
        O::F64Store { .. } => ("a store as a shared store", &[SharedStore(F64)]),
        O::I32AtomicRmwAdd { .. }
        | O::I32AtomicRmw8AddU { .. }
        | O::I32AtomicRmw16AddU { .. }
        | O::I32AtomicRmwSub { .. }
        | O::I32AtomicRmw8SubU { .. }
        | O::I32AtomicRmw16SubU { .. }
        | O::I32AtomicRmwAnd { .. }
        | O::I32AtomicRmw8AndU { .. }
        | O::I32AtomicRmw16AndU { .. }
        | O::I32AtomicRmwOr { .. }
        | O::I32AtomicRmw8OrU { .. }
        | O::I32AtomicRmw16OrU { .. }
        | O::I32AtomicRmwXor { .. }
        | O::I32AtomicRmw8XorU { .. }
        | O::I32AtomicRmw16XorU { .. }
        | O::I32AtomicRmwXchg { .. }
        | O::I32AtomicRmw8XchgU { .. }
        | O::I32AtomicRmw16XchgU { .. } => ("an atomic as a shared atomic or a shuffle", RMW_I32),
        O::I32AtomicRmwCmpxchg { .. }
        | O::I32AtomicRmw8CmpxchgU { .. }
        | O::I32AtomicRmw16CmpxchgU { .. } => {
            ("an atomic as a shared atomic", &[SharedAtomic(A::CasI32)])
        }
        O::I64AtomicRmwAdd { .. }
        | O::I64AtomicRmw8AddU { .. }
        | O::I64AtomicRmw16AddU { .. }
        | O::I64AtomicRmw32AddU { .. }
        | O::I64AtomicRmwSub { .. }
        | O::I64AtomicRmw8SubU { .. }
        | O::I64AtomicRmw16SubU { .. }
        | O::I64AtomicRmw32SubU { .. }
        | O::I64AtomicRmwAnd { .. }
        | O::I64AtomicRmw8AndU { .. }
        | O::I64AtomicRmw16AndU { .. }
        | O::I64AtomicRmw32AndU { .. }
        | O::I64AtomicRmwOr { .. }
        | O::I64AtomicRmw8OrU { .. }
        | O::I64AtomicRmw16OrU { .. }
        | O::I64AtomicRmw32OrU { .. }
        | O::I64AtomicRmwXor { .. }
        | O::I64AtomicRmw8XorU { .. }
        | O::I64AtomicRmw16XorU { .. }
        | O::I64AtomicRmw32XorU { .. }
        | O::I64AtomicRmwXchg { .. }
        | O::I64AtomicRmw8XchgU { .. }
        | O::I64AtomicRmw16XchgU { .. }
        | O::I64AtomicRmw32XchgU { .. } => {
            ("an atomic as a shared atomic", &[SharedAtomic(A::AddI64)])
        }
        O::I64AtomicRmwCmpxchg { .. }
        | O::I64AtomicRmw8CmpxchgU { .. }
        | O::I64AtomicRmw16CmpxchgU { .. }
        | O::I64AtomicRmw32CmpxchgU { .. } => {
            ("an atomic as a shared atomic", &[SharedAtomic(A::CasI64)])
        }
        O::AtomicFence { .. } => ("atomic.fence as a barrier", &[Barrier]),
        O::MemorySize { .. } => (
            "memory.size as a cooperative intrinsic",
            &[SharedSize, LaneId, WarpSize],
        ),
        _ => return None,
    })
}

/// Rewrites, in place, about half the operators that have a cooperative
/// stand-in ([`coop_stand_ins`]) among the intrinsics the module imports
/// (`u`'s bytes choose) into a `call` of it, padded with `nop`s to the
/// operator's length: the call's offset is the operator's, and every other
/// byte stays where it was. What it rewrote.
pub fn rewrite_as_coop(
    wasm: &mut [u8],
    facts: &Facts,
    u: &mut Unstructured<'_>,
) -> ArbitraryResult<Vec<&'static str>> {
    let mut patches: Vec<(usize, usize, u32)> = Vec::new();
    let mut what = Vec::new();
    for payload in Parser::new(0).parse_all(wasm) {
        if let Payload::CodeSectionEntry(body) = payload.expect("the module parses") {
            let mut reader = body.get_operators_reader().expect("operators");
            while !reader.eof() {
                let (op, at) = reader.read_with_offset().expect("an operator");
                let span = (at as usize, reader.original_position() as usize);
                let Some((why, stand_ins)) = coop_stand_ins(&op) else {
                    continue;
                };
                let imported: Vec<u32> = stand_ins.iter().filter_map(|&c| facts.coop(c)).collect();
                if imported.is_empty() || !u.arbitrary()? {
                    continue;
                }
                patches.push((span.0, span.1, *u.choose(&imported)?));
                what.push(why);
            }
        }
    }
    for (start, end, func) in patches {
        // Imports come first: fewer than 128, a one-byte index.
        assert!(
            func < 0x80 && end - start >= 2,
            "a call longer than its operator"
        );
        wasm[start..start + 2].copy_from_slice(&[0x10, func as u8]);
        wasm[start + 2..end].fill(0x01);
    }
    what.sort_unstable();
    what.dedup();
    Ok(what)
}

/// How the kernel makes its shadow-stack frame, as LLVM does.
#[derive(Clone, Copy, Debug)]
pub struct Frame {
    /// The stack pointer's value at launch.
    pub sp: u32,
    /// The frame's size: F's arguments, then its results, 8 bytes each.
    pub bytes: u32,
    /// An over-aligned frame (`i32.const -align; i32.and`, the stack
    /// pointer restored from a saved copy); 0 for a plain one (restored by
    /// adding `bytes` back).
    pub align: u32,
    /// `memory.fill` the frame with this byte first, if any.
    pub fill: Option<u8>,
    /// Where the results are copied to: [`super::RESULTS_AT`] plus 0 to 3 (a
    /// misaligned copy moves a byte a step).
    pub results_at: u32,
    /// Whether F's arguments go through the frame (stored, then loaded
    /// back, as unoptimized code passes them), else straight from the
    /// kernel's parameters, where the translator sees which are addresses.
    pub spill: bool,
}

/// The kernel's locals past its parameters, in order.
struct Locals {
    fp: u32,
    saved: u32,
    results: u32,
}

/// The module with the kernel appended: its type, function, export and
/// code, the stack pointer (a mutable `i32` global, named in an appended
/// `name` section), and an export `g<index>` of every mutable scalar
/// global. Other indices do not move: each goes at the end of its index
/// space.
pub fn with_kernel(
    wasm: &[u8],
    facts: &Facts,
    f: u32,
    f_type: &FuncType,
    launch: &Launch,
    frame: &Frame,
) -> Vec<u8> {
    assert!(!facts.has_names, "wasm-smith wrote a name section");
    let kernel_type = facts.types.len() as u32;
    let kernel_index = facts.funcs.len() as u32;
    let sp = facts.globals.len() as u32;

    let mut ty = vec![0x60];
    uleb(&mut ty, f_type.params().len() as u64);
    ty.extend(f_type.params().iter().map(|&t| valtype_byte(t)));
    ty.push(0x00);
    let mut function = Vec::new();
    uleb(&mut function, u64::from(kernel_type));
    // `(global (mut i32) (i32.const sp))`.
    let mut global = vec![0x7f, 0x01, 0x41];
    sleb(&mut global, i64::from(frame.sp as i32));
    global.push(0x0b);
    let mut exports = Vec::new();
    let mut export = |name: &str, kind: u8, index: u32| {
        uleb(&mut exports, name.len() as u64);
        exports.extend_from_slice(name.as_bytes());
        exports.push(kind);
        uleb(&mut exports, u64::from(index));
    };
    export(KERNEL_EXPORT, 0x00, kernel_index);
    let globals: Vec<u32> = facts.mutable_scalar_globals().chain([sp]).collect();
    for &g in &globals {
        export(&format!("g{g}"), 0x03, g);
    }
    let mut code = Vec::new();
    wasm_encoder::Encode::encode(&kernel_body(facts, f, f_type, launch, frame, sp), &mut code);

    let reached = reached_from(facts, f);
    let mut out = wasm[..8].to_vec();
    let mut appended = 0;
    let mut global_done = false;
    let mut at = 8;
    while at < wasm.len() {
        let id = wasm[at];
        let (size, n) = read_uleb(&wasm[at + 1..]);
        let start = at + 1 + n;
        let contents = &wasm[start..start + size as usize];
        at = start + size as usize;
        // The global section goes before the export section; wasm-smith
        // may have made none.
        if id == 7 && !global_done {
            append_section(&mut out, 6, &[0], &global, 1);
            appended += 1;
            global_done = true;
        }
        let stubbed;
        let (contents, entry, entries) = match id {
            1 => (contents, &ty, 1),
            3 => (contents, &function, 1),
            6 => {
                global_done = true;
                (contents, &global, 1)
            }
            7 => (contents, &exports, 1 + globals.len() as u64),
            10 => {
                stubbed = stub_unreached(contents, &reached);
                (&stubbed[..], &code, 1)
            }
            _ => {
                out.push(id);
                uleb(&mut out, size);
                out.extend_from_slice(contents);
                continue;
            }
        };
        appended += 1;
        append_section(&mut out, id, contents, entry, entries);
    }
    assert_eq!(
        appended, 5,
        "type, function, global, export and code sections"
    );
    // `name` section, global names (subsection 7): the stack pointer.
    let mut names = Vec::new();
    uleb(&mut names, 1);
    uleb(&mut names, u64::from(sp));
    uleb(&mut names, STACK_POINTER.len() as u64);
    names.extend_from_slice(STACK_POINTER.as_bytes());
    let mut custom = Vec::new();
    uleb(&mut custom, 4);
    custom.extend_from_slice(b"name");
    custom.push(7);
    uleb(&mut custom, names.len() as u64);
    custom.extend_from_slice(&names);
    out.push(0);
    uleb(&mut out, custom.len() as u64);
    out.extend_from_slice(&custom);
    out
}

/// Writes section `id`: `contents` (a vector) with `entries` more entries,
/// `entry`, at its end.
fn append_section(out: &mut Vec<u8>, id: u8, contents: &[u8], entry: &[u8], entries: u64) {
    let (count, n) = read_uleb(contents);
    let mut section = Vec::new();
    uleb(&mut section, count + entries);
    section.extend_from_slice(&contents[n..]);
    section.extend_from_slice(entry);
    out.push(id);
    uleb(out, section.len() as u64);
    out.extend_from_slice(&section);
}

/// The code section's contents with every body the kernel cannot reach
/// replaced by `unreachable`: wasmtime compiles every function, and would
/// spend most of the run on ones that never run.
fn stub_unreached(contents: &[u8], reached: &[bool]) -> Vec<u8> {
    let (count, mut at) = read_uleb(contents);
    assert_eq!(
        count as usize,
        reached.len(),
        "one body per defined function"
    );
    let mut out = contents[..at].to_vec();
    for &keep in reached {
        let (size, n) = read_uleb(&contents[at..]);
        let end = at + n + size as usize;
        if keep {
            out.extend_from_slice(&contents[at..end]);
        } else {
            // Size 3: no locals, `unreachable`, `end`.
            out.extend_from_slice(&[0x03, 0x00, 0x00, 0x0b]);
        }
        at = end;
    }
    assert_eq!(
        at,
        contents.len(),
        "the code section ends with its last body"
    );
    out
}

/// `kernel(F's params)`: unless every imported position intrinsic (and
/// `lane_id`) returns the chosen thread's value, return; else open a frame on the shadow stack,
/// spill F's arguments there and reload them (or pass them as they are:
/// [`Frame::spill`]), call F, store its results in the frame,
/// `memory.copy` them to where the harness reads them, and close the
/// frame.
fn kernel_body(
    facts: &Facts,
    f: u32,
    f_type: &FuncType,
    launch: &Launch,
    frame: &Frame,
    sp: u32,
) -> wasm_encoder::Function {
    let params = f_type.params();
    let results = f_type.results();
    let n = params.len() as u32;
    let locals = Locals {
        fp: n,
        saved: n + 1,
        results: n + 2,
    };
    let local_types: Vec<(u32, wasm_encoder::ValType)> = [(2, wasm_encoder::ValType::I32)]
        .into_iter()
        .chain(results.iter().map(|&t| (1, enc_valtype(t))))
        .collect();
    let mut body = wasm_encoder::Function::new(local_types);
    let slot = |i: usize| MemArg {
        offset: 8 * i as u64,
        align: 0,
        memory_index: 0,
    };
    body.instruction(&I::Block(BlockType::Empty));
    let checks = Intrinsic::ALL
        .into_iter()
        .filter_map(|which| Some((facts.intrinsic(which)?, launch.intrinsic(which))));
    // The lane id tells the block's threads apart too (a block has fewer
    // than 32).
    let lane = facts
        .coop(CoopIntrinsic::LaneId)
        .map(|import| (import, launch.lane()));
    for (import, value) in checks.chain(lane) {
        body.instruction(&I::Call(import))
            .instruction(&I::I32Const(value as i32))
            .instruction(&I::I32Ne)
            .instruction(&I::BrIf(0));
    }
    // The prologue, as LLVM writes it.
    if frame.align != 0 {
        body.instruction(&I::GlobalGet(sp))
            .instruction(&I::LocalSet(locals.saved));
    }
    body.instruction(&I::GlobalGet(sp))
        .instruction(&I::I32Const(frame.bytes as i32))
        .instruction(&I::I32Sub);
    if frame.align != 0 {
        body.instruction(&I::I32Const(-(frame.align as i32)))
            .instruction(&I::I32And);
    }
    body.instruction(&I::LocalTee(locals.fp))
        .instruction(&I::GlobalSet(sp));
    if let Some(byte) = frame.fill {
        body.instruction(&I::LocalGet(locals.fp))
            .instruction(&I::I32Const(i32::from(byte)))
            .instruction(&I::I32Const(frame.bytes as i32))
            .instruction(&I::MemoryFill(0));
    }
    if frame.spill {
        for (i, &ty) in params.iter().enumerate() {
            body.instruction(&I::LocalGet(locals.fp))
                .instruction(&I::LocalGet(i as u32))
                .instruction(&store(ty, slot(i)));
        }
        for (i, &ty) in params.iter().enumerate() {
            body.instruction(&I::LocalGet(locals.fp))
                .instruction(&load(ty, slot(i)));
        }
    } else {
        for i in 0..n {
            body.instruction(&I::LocalGet(i));
        }
    }
    body.instruction(&I::Call(f));
    for i in (0..results.len() as u32).rev() {
        body.instruction(&I::LocalSet(locals.results + i));
    }
    for (i, &ty) in results.iter().enumerate() {
        body.instruction(&I::LocalGet(locals.fp))
            .instruction(&I::LocalGet(locals.results + i as u32))
            .instruction(&store(ty, slot(params.len() + i)));
    }
    body.instruction(&I::I32Const(frame.results_at as i32))
        .instruction(&I::LocalGet(locals.fp))
        .instruction(&I::I32Const(8 * n as i32))
        .instruction(&I::I32Add)
        .instruction(&I::I32Const(8 * results.len() as i32))
        .instruction(&I::MemoryCopy {
            src_mem: 0,
            dst_mem: 0,
        });
    // The epilogue.
    if frame.align != 0 {
        body.instruction(&I::LocalGet(locals.saved));
    } else {
        body.instruction(&I::LocalGet(locals.fp))
            .instruction(&I::I32Const(frame.bytes as i32))
            .instruction(&I::I32Add);
    }
    body.instruction(&I::GlobalSet(sp));
    body.instruction(&I::End).instruction(&I::End);
    body
}

fn store(ty: ValType, memarg: MemArg) -> I<'static> {
    match ty {
        ValType::I32 => I::I32Store(memarg),
        ValType::I64 => I::I64Store(memarg),
        ValType::F32 => I::F32Store(memarg),
        ValType::F64 => I::F64Store(memarg),
        other => panic!("a {other} in F's type"),
    }
}

fn load(ty: ValType, memarg: MemArg) -> I<'static> {
    match ty {
        ValType::I32 => I::I32Load(memarg),
        ValType::I64 => I::I64Load(memarg),
        ValType::F32 => I::F32Load(memarg),
        ValType::F64 => I::F64Load(memarg),
        other => panic!("a {other} in F's type"),
    }
}

/// The frame's bytes for F's type: 8 per argument and result, rounded up
/// to 16 (at least 16).
pub fn frame_bytes(f_type: &FuncType) -> u32 {
    let slots = (f_type.params().len() + f_type.results().len()) as u32;
    (8 * slots).div_ceil(16).max(1) * 16
}

fn valtype_byte(ty: ValType) -> u8 {
    match ty {
        ValType::I32 => 0x7f,
        ValType::I64 => 0x7e,
        ValType::F32 => 0x7d,
        ValType::F64 => 0x7c,
        other => panic!("a {other} parameter"),
    }
}

pub fn enc_valtype(ty: ValType) -> wasm_encoder::ValType {
    match ty {
        ValType::I32 => wasm_encoder::ValType::I32,
        ValType::I64 => wasm_encoder::ValType::I64,
        ValType::F32 => wasm_encoder::ValType::F32,
        ValType::F64 => wasm_encoder::ValType::F64,
        other => panic!("a {other} value"),
    }
}

fn uleb(out: &mut Vec<u8>, mut v: u64) {
    loop {
        let byte = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out.push(byte);
            return;
        }
        out.push(byte | 0x80);
    }
}

fn sleb(out: &mut Vec<u8>, mut v: i64) {
    loop {
        let byte = (v & 0x7f) as u8;
        v >>= 7;
        if (v == 0 && byte & 0x40 == 0) || (v == -1 && byte & 0x40 != 0) {
            out.push(byte);
            return;
        }
        out.push(byte | 0x80);
    }
}

/// A LEB128 `u64` and its length in bytes.
fn read_uleb(b: &[u8]) -> (u64, usize) {
    let mut v = 0u64;
    for (i, &byte) in b.iter().enumerate() {
        v |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return (v, i + 1);
        }
    }
    panic!("a truncated LEB128");
}
