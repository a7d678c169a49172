//! The module a case runs: wasm-smith's, with `memory.grow`, `memory.init`
//! and `data.drop` rewritten in place, bodies the kernel never reaches stubbed out, and the kernel, the
//! stack pointer, the globals' exports and a `name` section appended. Every
//! byte offset of wasm-smith's code keeps its operator (up to the shift the
//! appended global makes, which both sides see alike).

use tensorwasm_core::lower::{INTRINSIC_MODULE, Intrinsic};
use wasm_encoder::{BlockType, Instruction as I, MemArg};
use wasmparser::{FuncType, Operator, Parser, Payload, ValType};

use super::facts::{Facts, reached_from};
use super::run::Launch;
use super::{F_EXPORT, KERNEL_EXPORT, MAX_PAGES, PAGE};

/// The name the translator reads the stack pointer by.
const STACK_POINTER: &str = "__stack_pointer";

pub fn smith_config(
    pages: u64,
    params: &[ValType],
    results: &[ValType],
    tables: bool,
) -> wasm_smith::Config {
    use wasm_smith::{InstructionKind as K, InstructionKinds};
    // Table operators the translator refuses (bulk memory's `table.copy`,
    // `table.init`, `elem.drop`; only `call_indirect`, a control operator,
    // is lowered); a quarter of the inputs allow them, so the refusals stay
    // exercised.
    let mut kinds = vec![
        K::Numeric,
        K::Parametric,
        K::Variable,
        K::Memory,
        K::Control,
    ];
    if tables {
        kinds.extend([K::Table, K::Reference]);
    }
    wasm_smith::Config {
        available_imports: Some(intrinsics_module()),
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
        simd_enabled: false,
        relaxed_simd_enabled: false,
        // The threads proposal's atomics (docs/kernels.md, "Atomics");
        // `wait`/`notify`, which kernels refuse, keep the refusal covered.
        threads_enabled: true,
        shared_everything_threads_enabled: false,
        tail_call_enabled: false,
        wide_arithmetic_enabled: false,
        max_tags: 0,
        max_imports: Intrinsic::ALL.len(),
        max_funcs: 16,
        max_globals: 8,
        max_data_segments: 4,
        max_instructions: 100,
        canonicalize_nans: true,
        ..wasm_smith::Config::default()
    }
}

/// The imports wasm-smith may use: the twelve intrinsics, `() -> i32`.
fn intrinsics_module() -> Vec<u8> {
    let mut types = wasm_encoder::TypeSection::new();
    types.ty().function([], [wasm_encoder::ValType::I32]);
    let mut imports = wasm_encoder::ImportSection::new();
    for which in Intrinsic::ALL {
        imports.import(
            INTRINSIC_MODULE,
            which.import_name(),
            wasm_encoder::EntityType::Function(0),
        );
    }
    let mut module = wasm_encoder::Module::new();
    module.section(&types).section(&imports);
    module.finish()
}

/// The exports wasm-smith must make: memory 0 as `memory`, and F as `f`
/// with the given type (wasm-smith writes its body).
fn exports_module(pages: u64, params: &[ValType], results: &[ValType]) -> Vec<u8> {
    let mut types = wasm_encoder::TypeSection::new();
    types.ty().function(
        params.iter().map(|&t| enc_valtype(t)),
        results.iter().map(|&t| enc_valtype(t)),
    );
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
    let mut body = wasm_encoder::Function::new([]);
    body.instruction(&I::Unreachable).instruction(&I::End);
    code.function(&body);
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

/// `kernel(F's params)`: unless every imported intrinsic returns the
/// chosen thread's value, return; else open a frame on the shadow stack,
/// spill F's arguments there and reload them, call F, store its results in
/// the frame, `memory.copy` them to where the harness reads them, and
/// close the frame.
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
    for which in Intrinsic::ALL {
        if let Some(import) = facts.intrinsic(which) {
            body.instruction(&I::Call(import))
                .instruction(&I::I32Const(launch.intrinsic(which) as i32))
                .instruction(&I::I32Ne)
                .instruction(&I::BrIf(0));
        }
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
    for (i, &ty) in params.iter().enumerate() {
        body.instruction(&I::LocalGet(locals.fp))
            .instruction(&I::LocalGet(i as u32))
            .instruction(&store(ty, slot(i)));
    }
    for (i, &ty) in params.iter().enumerate() {
        body.instruction(&I::LocalGet(locals.fp))
            .instruction(&load(ty, slot(i)));
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
