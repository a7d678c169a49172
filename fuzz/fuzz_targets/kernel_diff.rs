//! Wasm kernels on the CPU driver against wasmtime: wasm-smith makes a
//! module in the kernel subset (`docs/kernels.md`) around a function F of a
//! type the input picks, the target appends a kernel that calls F and
//! stores its results, and runs it twice from the same memory image: once
//! on wasmtime (the reference), once translated (`translate_kernel`),
//! lowered (`CpuKernelLowerer`) and launched on a `CpuDriver`. Any
//! difference — trap or not, the trap's kind and offset, a byte of guest
//! memory, a byte past it — is a crash.
//!
//! Input, in order: memory pages (1 to 4), F's parameter and result types
//! (up to [`MAX_PARAMS`] and [`MAX_RESULTS`]), wasm-smith's module, the
//! launch geometry and the thread that does the work, F's arguments.
//!
//! The module (docs/verification/2026-11-22-fuzz-kernel-diff.md says why):
//! - wasm-smith with no SIMD, threads, reference types, bulk memory,
//!   multi-memory, memory64, tail calls, exceptions, GC, tables or start
//!   function; its only imports are some of the `tensorwasm_kernel`
//!   intrinsics, its only exports memory 0 (`min` 1 to 4 pages, `max` 4)
//!   and F (as `f`, which it writes like any other function); NaNs
//!   canonicalized after every float operation that may make one.
//! - Two rewrites that keep every byte offset, so more modules reach the
//!   translator: every global becomes immutable and `global.set` becomes
//!   `drop` (plus `nop`s); `memory.grow` becomes `i32.eqz` (plus `nop`s).
//! - Bodies of functions F does not reach become `unreachable` (wasmtime
//!   compiles every function, and would spend most of the run on them).
//! - Appended (type, function, export `kernel`, code): `kernel(F's params)`
//!   checks every intrinsic the module imports against one chosen thread's
//!   values and returns unless they all match; then it calls F and stores
//!   F's results at [`RESULTS_AT`], 8 bytes apart. Only that thread works,
//!   so the launch is deterministic; an axis of the launch is longer than 1
//!   only if the module imports its index intrinsic.
//!
//! Both sides run the same bytes, so trap offsets index the same module.
//! Skipped, and counted (stderr, at every power of two from 1,024 inputs
//! and every 50,000): inputs wasm-smith cannot build a module from, a
//! translator refusal (by operator), call graphs that inline to more than
//! [`MAX_INLINED_OPERATORS`], failed instantiation, and runs where either
//! side runs out of fuel (the two count fuel differently: wasmtime per
//! operator, the kernel per loop iteration).
//!
//! `KERNEL_DIFF_DEBUG=1` prints every compared run; `KERNEL_DIFF_WASM=path`
//! writes the module of a differing run there.

#![no_main]

use std::{
    collections::BTreeMap,
    fmt::Write as _,
    sync::{
        Mutex, OnceLock, PoisonError,
        atomic::{AtomicU64, Ordering},
    },
};

use arbitrary::{Result as ArbitraryResult, Unstructured};
use libfuzzer_sys::fuzz_target;
use tensorwasm_core::{
    DeviceMemory, Dim3, GpuDriver, KernelParam, LaunchConfig,
    lower::{
        INTRINSIC_MODULE, Intrinsic, KernelTrap, LowerError, Lowerer, translate::translate_kernel,
    },
};
use tensorwasm_cpu::{CpuDriver, CpuStream};
use tensorwasm_embed::kernel::cpu::{
    CpuKernelLowerer, HiddenParams, STATUS_BYTES, launch_params, one_block_each,
};
use wasmparser::{Operator, Parser, Payload, ValType};

const PAGE: u64 = 65536;
/// Memory 0's maximum, in pages; its minimum is 1 to this.
const MAX_PAGES: u64 = 4;
/// Where the kernel stores F's results (8 bytes each).
const RESULTS_AT: u64 = 0;
/// The kernel's budget of loop iterations.
const KERNEL_FUEL: u64 = 10_000;
/// wasmtime's budget of fuel (about one unit per operator).
const WASMTIME_FUEL: u64 = 1_000_000;
/// The largest kernel, every callee inlined, the target compiles; larger
/// call graphs (which inlining can make exponential) are skipped.
const MAX_INLINED_OPERATORS: u64 = 10_000;
/// Bytes past guest memory, filled with a pattern the kernel must not touch.
const CANARY: usize = 4096;
const CANARY_BYTE: u8 = 0xa5;
/// Blocks per grid and threads per block, along each axis.
const MAX_DIM: u32 = 3;
const KERNEL_EXPORT: &str = "kernel";
const F_EXPORT: &str = "f";
/// F's most parameters and results.
const MAX_PARAMS: usize = 8;
const MAX_RESULTS: usize = 3;

fuzz_target!(|data: &[u8]| {
    let outcome = run(&mut Unstructured::new(data));
    tally(match outcome {
        Ok(what) => what,
        Err(e) => format!("skip: no module from this input ({e})"),
    });
});

/// Generates, runs and compares one case; what happened, for the tally.
fn run(u: &mut Unstructured<'_>) -> ArbitraryResult<String> {
    let pages = u.int_in_range(1..=MAX_PAGES)?;
    let (params, results) = (
        arbitrary_types(u, MAX_PARAMS)?,
        arbitrary_types(u, MAX_RESULTS)?,
    );
    let smith = wasm_smith::Module::new(smith_config(pages, &params, &results), u)?;
    let mut wasm = smith.to_bytes();
    for rewrite in keep_offsets_rewrite(&mut wasm) {
        tally(format!("info: rewrote {rewrite}"));
    }
    let facts = Facts::parse(&wasm);
    let f = facts.f.expect("wasm-smith exports `f`");
    let f_type = facts.func_type(f).clone();
    let launch = Launch::arbitrary(u, &facts)?;
    let args = f_type
        .params()
        .iter()
        .map(|&ty| arbitrary_arg(u, ty, pages * PAGE))
        .collect::<ArbitraryResult<Vec<Arg>>>()?;

    let kernel_index = facts.funcs.len() as u32;
    let wasm = with_kernel(&wasm, &facts, f, &f_type, &launch);
    match inlined_operators(&facts, f) {
        Some(n) if n > MAX_INLINED_OPERATORS => {
            return Ok(format!(
                "skip: inlines to more than {MAX_INLINED_OPERATORS} operators"
            ));
        }
        _ => {}
    }

    let case = Case {
        wasm: &wasm,
        f,
        f_type: &f_type,
        launch: &launch,
        args: &args,
    };
    // The reference first: a module wasmtime refuses is the harness's bug.
    let module = wasmtime::Module::new(engine(), &wasm)
        .unwrap_or_else(|e| panic!("wasmtime refuses the module: {e:?}\n{}", case.describe()));
    let Some(mut reference) = Reference::instantiate(&module, &launch) else {
        return Ok("skip: instantiation failed".into());
    };
    let image = reference.memory_image();

    let kernel = match translate_kernel(&wasm, kernel_index) {
        Ok(kernel) => kernel,
        Err(LowerError::Unsupported(op)) => return Ok(format!("skip: refused `{}`", op.op)),
        Err(LowerError::TooLarge(op)) => return Ok(format!("skip: too large at `{}`", op.op)),
        Err(LowerError::Invalid(why)) => panic!(
            "the translator calls a module wasmtime accepts invalid: {why}\n{}",
            case.describe()
        ),
    };
    let native = CpuKernelLowerer
        .lower(&kernel.name, &kernel.function, kernel.abi)
        .unwrap_or_else(|e| {
            panic!(
                "CpuKernelLowerer refuses a translated kernel: {e}\n{}",
                case.describe()
            )
        });

    let (ours, our_memory, canary) = run_native(&native, &launch, &args, &image);
    let (theirs, their_memory) = reference.call(&args, &wasm);
    if ours == Outcome::OutOfFuel || theirs == Outcome::OutOfFuel {
        return Ok("skip: out of fuel (either side)".into());
    }
    if theirs == Outcome::StackOverflow {
        return Ok("skip: wasmtime's stack overflowed".into());
    }

    if std::env::var_os("KERNEL_DIFF_DEBUG").is_some() {
        let changed = |m: &[u8]| m.iter().zip(&image).filter(|(a, b)| a != b).count();
        eprintln!(
            "kernel_diff: wasmtime {theirs:?} ({} bytes changed), CPU kernel {ours:?} ({} bytes \
             changed); {}",
            changed(&their_memory),
            changed(&our_memory),
            case.describe()
        );
    }
    let mut diff = String::new();
    if ours != theirs {
        let _ = writeln!(diff, "outcome: wasmtime {theirs:?}, CPU kernel {ours:?}");
    }
    // Slice equality first: a byte loop is slow under coverage tracing.
    if our_memory != their_memory {
        let differing: Vec<usize> = (0..image.len())
            .filter(|&i| our_memory[i] != their_memory[i])
            .collect();
        let _ = writeln!(
            diff,
            "memory differs at {} bytes; first ones (address: wasmtime, CPU kernel):",
            differing.len()
        );
        for &i in differing.iter().take(16) {
            let _ = writeln!(
                diff,
                "  {i:#07x}: {:#04x} {:#04x}",
                their_memory[i], our_memory[i]
            );
        }
    }
    if let Some(at) = canary {
        let _ = writeln!(
            diff,
            "the CPU kernel wrote past guest memory, at mem_len + {at}"
        );
    }
    if !diff.is_empty() {
        if let Ok(path) = std::env::var("KERNEL_DIFF_WASM") {
            let _ = std::fs::write(&path, &wasm);
        }
        panic!(
            "kernel_diff: the CPU kernel differs from wasmtime\n{diff}{}",
            case.describe()
        );
    }
    Ok(match ours {
        Outcome::Trapped { trap, .. } => format!("compared: trapped ({})", trap.description()),
        _ => "compared: returned".into(),
    })
}

// ---------------------------------------------------------------------------
// The module: wasm-smith's, two rewrites, and the kernel
// ---------------------------------------------------------------------------

/// Up to `max` Wasm scalar types.
fn arbitrary_types(u: &mut Unstructured<'_>, max: usize) -> ArbitraryResult<Vec<ValType>> {
    const TYPES: [ValType; 4] = [ValType::I32, ValType::I64, ValType::F32, ValType::F64];
    let n = u.int_in_range(0..=max)?;
    (0..n).map(|_| u.choose(&TYPES).copied()).collect()
}

fn smith_config(pages: u64, params: &[ValType], results: &[ValType]) -> wasm_smith::Config {
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
        bulk_memory_enabled: false,
        reference_types_enabled: false,
        gc_enabled: false,
        custom_descriptors_enabled: false,
        exceptions_enabled: false,
        simd_enabled: false,
        relaxed_simd_enabled: false,
        threads_enabled: false,
        shared_everything_threads_enabled: false,
        tail_call_enabled: false,
        wide_arithmetic_enabled: false,
        max_tables: 0,
        max_element_segments: 0,
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
    body.instruction(&wasm_encoder::Instruction::Unreachable)
        .instruction(&wasm_encoder::Instruction::End);
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

/// Makes every global immutable, `global.set` a `drop` and `memory.grow`
/// an `i32.eqz` (each padded with `nop`s to its length), in place: the
/// translator refuses all three, and every other byte stays where it was.
/// What it rewrote.
fn keep_offsets_rewrite(wasm: &mut [u8]) -> Vec<&'static str> {
    let mut patches: Vec<(usize, usize, u8, &'static str)> = Vec::new();
    for payload in Parser::new(0).parse_all(wasm) {
        match payload.expect("wasm-smith's module parses") {
            Payload::GlobalSection(reader) => {
                for global in reader.into_iter_with_offsets() {
                    let (at, global) = global.expect("a global");
                    if global.ty.mutable {
                        // A scalar value type is one byte; `mut` follows.
                        patches.push((at + 1, at + 2, 0x00, "a mutable global"));
                    }
                }
            }
            Payload::CodeSectionEntry(body) => {
                let mut reader = body.get_operators_reader().expect("operators");
                while !reader.eof() {
                    let (op, at) = reader.read_with_offset().expect("an operator");
                    let end = reader.original_position();
                    match op {
                        Operator::GlobalSet { .. } => patches.push((at, end, 0x1a, "global.set")),
                        Operator::MemoryGrow { .. } => patches.push((at, end, 0x45, "memory.grow")),
                        _ => {}
                    }
                }
            }
            _ => {}
        }
    }
    let mut what: Vec<&'static str> = patches.iter().map(|p| p.3).collect();
    what.sort_unstable();
    what.dedup();
    for (start, end, byte, _) in patches {
        if byte == 0x00 {
            assert_eq!(wasm[start], 0x01, "the mutability byte");
        }
        wasm[start] = byte;
        wasm[start + 1..end].fill(0x01);
    }
    what
}

/// What the target needs to know of a module.
struct Facts {
    /// Function types, by type index.
    types: Vec<wasmparser::FuncType>,
    /// Each function's type index, imports first.
    funcs: Vec<u32>,
    /// The imported functions (all intrinsics).
    imports: Vec<Intrinsic>,
    /// Defined functions: operator count and direct callees.
    bodies: Vec<(u64, Vec<u32>)>,
    /// The function exported as `f`.
    f: Option<u32>,
}

impl Facts {
    fn parse(wasm: &[u8]) -> Facts {
        let mut facts = Facts {
            types: Vec::new(),
            funcs: Vec::new(),
            imports: Vec::new(),
            bodies: Vec::new(),
            f: None,
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
                        let which = Intrinsic::from_import(import.module, import.name)
                            .expect("an intrinsic");
                        facts.funcs.push(ty);
                        facts.imports.push(which);
                    }
                }
                Payload::FunctionSection(reader) => {
                    for ty in reader {
                        facts.funcs.push(ty.expect("a function"));
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
                Payload::CodeSectionEntry(body) => {
                    let mut operators = 0;
                    let mut calls = Vec::new();
                    let mut reader = body.get_operators_reader().expect("operators");
                    while !reader.eof() {
                        let op = reader.read().expect("an operator");
                        operators += 1;
                        if let Operator::Call { function_index } = op {
                            calls.push(function_index);
                        }
                    }
                    facts.bodies.push((operators, calls));
                }
                _ => {}
            }
        }
        facts
    }

    fn imported_funcs(&self) -> u32 {
        self.imports.len() as u32
    }

    fn func_type(&self, func: u32) -> &wasmparser::FuncType {
        &self.types[self.funcs[func as usize] as usize]
    }

    /// The function that imports `which`, if the module imports it.
    fn intrinsic(&self, which: Intrinsic) -> Option<u32> {
        self.imports
            .iter()
            .position(|&w| w == which)
            .map(|i| i as u32)
    }
}

/// Operators of `func` with every callee inlined (saturating), or `None`
/// for a recursive call graph (the translator refuses it).
fn inlined_operators(facts: &Facts, func: u32) -> Option<u64> {
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
        let (mut total, calls) = (facts.bodies[def].0, &facts.bodies[def].1);
        for &callee in calls {
            total = total.saturating_add(visit(facts, callee, seen)?);
        }
        seen[def] = Seen::Done(total);
        Some(total)
    }
    visit(facts, func, &mut vec![Seen::No; facts.bodies.len()])
}

/// The module with `kernel` appended: its type, function, export and code.
/// Other indices do not move: each goes at the end of its index space.
fn with_kernel(
    wasm: &[u8],
    facts: &Facts,
    f: u32,
    f_type: &wasmparser::FuncType,
    launch: &Launch,
) -> Vec<u8> {
    let kernel_type = facts.types.len() as u32;
    let kernel_index = facts.funcs.len() as u32;

    let mut ty = vec![0x60];
    uleb(&mut ty, f_type.params().len() as u64);
    ty.extend(f_type.params().iter().map(|&t| valtype_byte(t)));
    ty.push(0x00);
    let mut function = Vec::new();
    uleb(&mut function, u64::from(kernel_type));
    let mut export = Vec::new();
    uleb(&mut export, KERNEL_EXPORT.len() as u64);
    export.extend_from_slice(KERNEL_EXPORT.as_bytes());
    export.push(0x00);
    uleb(&mut export, u64::from(kernel_index));
    let mut code = Vec::new();
    wasm_encoder::Encode::encode(&kernel_body(facts, f, f_type, launch), &mut code);

    let reached = reached_from(facts, f);
    let mut out = wasm[..8].to_vec();
    let mut appended = 0;
    let mut at = 8;
    while at < wasm.len() {
        let id = wasm[at];
        let (size, n) = read_uleb(&wasm[at + 1..]);
        let start = at + 1 + n;
        let contents = &wasm[start..start + size as usize];
        at = start + size as usize;
        let stubbed;
        let (contents, entry) = match id {
            1 => (contents, &ty),
            3 => (contents, &function),
            7 => (contents, &export),
            10 => {
                stubbed = stub_unreached(contents, &reached);
                (&stubbed[..], &code)
            }
            _ => {
                out.push(id);
                uleb(&mut out, size);
                out.extend_from_slice(contents);
                continue;
            }
        };
        appended += 1;
        let (count, n) = read_uleb(contents);
        let mut section = Vec::new();
        uleb(&mut section, count + 1);
        section.extend_from_slice(&contents[n..]);
        section.extend_from_slice(entry);
        out.push(id);
        uleb(&mut out, section.len() as u64);
        out.extend_from_slice(&section);
    }
    assert_eq!(appended, 4, "type, function, export and code sections");
    out
}

/// Which defined functions `f` reaches through direct calls (itself too).
fn reached_from(facts: &Facts, f: u32) -> Vec<bool> {
    let mut reached = vec![false; facts.bodies.len()];
    let mut stack = vec![f];
    while let Some(func) = stack.pop() {
        let Some(def) = func.checked_sub(facts.imported_funcs()) else {
            continue;
        };
        if !std::mem::replace(&mut reached[def as usize], true) {
            stack.extend(&facts.bodies[def as usize].1);
        }
    }
    reached
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
/// chosen thread's value, return; else call F and store its results.
fn kernel_body(
    facts: &Facts,
    f: u32,
    f_type: &wasmparser::FuncType,
    launch: &Launch,
) -> wasm_encoder::Function {
    use wasm_encoder::{BlockType, Instruction as I, MemArg};
    let params = f_type.params().len() as u32;
    let results = f_type.results();
    let mut body = wasm_encoder::Function::new(results.iter().map(|&t| (1, enc_valtype(t))));
    body.instruction(&I::Block(BlockType::Empty));
    for which in Intrinsic::ALL {
        if let Some(import) = facts.intrinsic(which) {
            body.instruction(&I::Call(import))
                .instruction(&I::I32Const(launch.intrinsic(which) as i32))
                .instruction(&I::I32Ne)
                .instruction(&I::BrIf(0));
        }
    }
    for i in 0..params {
        body.instruction(&I::LocalGet(i));
    }
    body.instruction(&I::Call(f));
    for i in (0..results.len() as u32).rev() {
        body.instruction(&I::LocalSet(params + i));
    }
    for (i, &ty) in results.iter().enumerate() {
        let memarg = MemArg {
            offset: 0,
            align: 0,
            memory_index: 0,
        };
        body.instruction(&I::I32Const((RESULTS_AT + 8 * i as u64) as i32))
            .instruction(&I::LocalGet(params + i as u32))
            .instruction(&match ty {
                ValType::I32 => I::I32Store(memarg),
                ValType::I64 => I::I64Store(memarg),
                ValType::F32 => I::F32Store(memarg),
                ValType::F64 => I::F64Store(memarg),
                other => panic!("wasm-smith made a {other} result"),
            });
    }
    body.instruction(&I::End).instruction(&I::End);
    body
}

fn valtype_byte(ty: ValType) -> u8 {
    match ty {
        ValType::I32 => 0x7f,
        ValType::I64 => 0x7e,
        ValType::F32 => 0x7d,
        ValType::F64 => 0x7c,
        other => panic!("wasm-smith made a {other} parameter"),
    }
}

fn enc_valtype(ty: ValType) -> wasm_encoder::ValType {
    match ty {
        ValType::I32 => wasm_encoder::ValType::I32,
        ValType::I64 => wasm_encoder::ValType::I64,
        ValType::F32 => wasm_encoder::ValType::F32,
        ValType::F64 => wasm_encoder::ValType::F64,
        other => panic!("wasm-smith made a {other} value"),
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

// ---------------------------------------------------------------------------
// Launch geometry and arguments
// ---------------------------------------------------------------------------

/// The grid, the block, and the one thread (block index, thread index) that
/// does the work. An axis is longer than 1 only if the module imports its
/// index intrinsic, so the kernel's check can tell that thread apart.
#[derive(Debug)]
struct Launch {
    grid: Dim3,
    block: Dim3,
    block_idx: Dim3,
    thread_idx: Dim3,
}

impl Launch {
    fn arbitrary(u: &mut Unstructured<'_>, facts: &Facts) -> ArbitraryResult<Launch> {
        let mut axis = |index: Intrinsic| -> ArbitraryResult<(u32, u32)> {
            if facts.intrinsic(index).is_none() {
                return Ok((1, 0));
            }
            let extent = u.int_in_range(1..=MAX_DIM)?;
            Ok((extent, u.int_in_range(0..=extent - 1)?))
        };
        let (gx, bx) = axis(Intrinsic::BlockIdxX)?;
        let (gy, by) = axis(Intrinsic::BlockIdxY)?;
        let (gz, bz) = axis(Intrinsic::BlockIdxZ)?;
        let (nx, tx) = axis(Intrinsic::ThreadIdxX)?;
        let (ny, ty) = axis(Intrinsic::ThreadIdxY)?;
        let (nz, tz) = axis(Intrinsic::ThreadIdxZ)?;
        Ok(Launch {
            grid: Dim3 {
                x: gx,
                y: gy,
                z: gz,
            },
            block: Dim3 {
                x: nx,
                y: ny,
                z: nz,
            },
            block_idx: Dim3 {
                x: bx,
                y: by,
                z: bz,
            },
            thread_idx: Dim3 {
                x: tx,
                y: ty,
                z: tz,
            },
        })
    }

    /// What `which` returns in the working thread.
    fn intrinsic(&self, which: Intrinsic) -> u32 {
        match which {
            Intrinsic::ThreadIdxX => self.thread_idx.x,
            Intrinsic::ThreadIdxY => self.thread_idx.y,
            Intrinsic::ThreadIdxZ => self.thread_idx.z,
            Intrinsic::BlockIdxX => self.block_idx.x,
            Intrinsic::BlockIdxY => self.block_idx.y,
            Intrinsic::BlockIdxZ => self.block_idx.z,
            Intrinsic::BlockDimX => self.block.x,
            Intrinsic::BlockDimY => self.block.y,
            Intrinsic::BlockDimZ => self.block.z,
            Intrinsic::GridDimX => self.grid.x,
            Intrinsic::GridDimY => self.grid.y,
            Intrinsic::GridDimZ => self.grid.z,
        }
    }
}

/// A Wasm argument: its type and bits.
#[derive(Clone, Copy)]
struct Arg(ValType, u64);

impl std::fmt::Debug for Arg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            ValType::I32 => write!(f, "i32 {:#x}", self.1),
            ValType::I64 => write!(f, "i64 {:#x}", self.1),
            ValType::F32 => write!(f, "f32 {:#x} ({})", self.1, f32::from_bits(self.1 as u32)),
            _ => write!(f, "f64 {:#x} ({})", self.1, f64::from_bits(self.1)),
        }
    }
}

impl Arg {
    fn val(self) -> wasmtime::Val {
        match self.0 {
            ValType::I32 => wasmtime::Val::I32(self.1 as u32 as i32),
            ValType::I64 => wasmtime::Val::I64(self.1 as i64),
            ValType::F32 => wasmtime::Val::F32(self.1 as u32),
            _ => wasmtime::Val::F64(self.1),
        }
    }

    fn param(self) -> KernelParam {
        match self.0 {
            ValType::I32 => KernelParam::I32(self.1 as u32 as i32),
            ValType::I64 => KernelParam::I64(self.1 as i64),
            ValType::F32 => KernelParam::F32(f32::from_bits(self.1 as u32)),
            _ => KernelParam::F64(f64::from_bits(self.1)),
        }
    }
}

/// An argument: an address near or in memory, an edge value, or any bits.
fn arbitrary_arg(u: &mut Unstructured<'_>, ty: ValType, mem_len: u64) -> ArbitraryResult<Arg> {
    const INTS: [i64; 10] = [
        0,
        1,
        -1,
        2,
        i32::MIN as i64,
        i32::MAX as i64,
        i64::MIN,
        i64::MAX,
        31,
        64,
    ];
    const F32S: [u32; 8] = [
        0x0000_0000,
        0x8000_0000,
        0x3f80_0000,
        0x7f80_0000,
        0x4f00_0000,
        0xcf00_0000,
        0x7fc0_0000,
        0x7fa0_0001,
    ];
    const F64S: [u64; 8] = [
        0,
        0x8000_0000_0000_0000,
        0x3ff0_0000_0000_0000,
        0x7ff0_0000_0000_0000,
        0x41e0_0000_0000_0000,
        0xc3e0_0000_0000_0000,
        0x7ff8_0000_0000_0000,
        0x7ff4_0000_0000_0001,
    ];
    let bits = match (u.int_in_range(0..=3u8)?, ty) {
        (0, ValType::I32 | ValType::I64) => u.int_in_range(0..=mem_len + 16)?,
        (1, ValType::I32 | ValType::I64) => *u.choose(&INTS)? as u64,
        (0 | 1, ValType::F32) => u64::from(*u.choose(&F32S)?),
        (0 | 1, _) => *u.choose(&F64S)?,
        _ => u.arbitrary()?,
    };
    Ok(match ty {
        ValType::I32 | ValType::F32 => Arg(ty, bits & 0xffff_ffff),
        _ => Arg(ty, bits),
    })
}

// ---------------------------------------------------------------------------
// Running: wasmtime and the CPU driver
// ---------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    Returned,
    Trapped {
        trap: KernelTrap,
        offset: u32,
    },
    OutOfFuel,
    /// wasmtime only.
    StackOverflow,
}

/// Everything that makes one case, for the crash report.
struct Case<'a> {
    wasm: &'a [u8],
    f: u32,
    f_type: &'a wasmparser::FuncType,
    launch: &'a Launch,
    args: &'a [Arg],
}

impl Case<'_> {
    fn describe(&self) -> String {
        format!(
            "kernel calls function {} of type {}; args {:?}; {:?}; module of {} bytes \
             (KERNEL_DIFF_WASM=path writes it)",
            self.f,
            self.f_type,
            self.args,
            self.launch,
            self.wasm.len()
        )
    }
}

/// The reference engine: no optimization (a trap keeps its operator's
/// offset), fuel, explicit checks instead of signal handlers (libFuzzer
/// and AddressSanitizer own those), and no NaN canonicalization: the module
/// canonicalizes its own arithmetic NaNs, and wasmtime's would also
/// canonicalize `f32.demote_f64`/`f64.promote_f32`, which Wasm lets keep
/// the payload and the CPU kernel does.
fn engine() -> &'static wasmtime::Engine {
    static ENGINE: OnceLock<wasmtime::Engine> = OnceLock::new();
    ENGINE.get_or_init(|| {
        let mut config = wasmtime::Config::new();
        config
            .cranelift_opt_level(wasmtime::OptLevel::None)
            .consume_fuel(true)
            .signals_based_traps(false)
            .parallel_compilation(false)
            .cranelift_nan_canonicalization(false);
        wasmtime::Engine::new(&config).expect("the reference engine")
    })
}

struct Reference {
    store: wasmtime::Store<()>,
    memory: wasmtime::Memory,
    kernel: wasmtime::Func,
}

impl Reference {
    /// `None` where instantiation fails (a data segment out of bounds).
    fn instantiate(module: &wasmtime::Module, launch: &Launch) -> Option<Reference> {
        let mut linker = wasmtime::Linker::new(engine());
        for which in Intrinsic::ALL {
            let value = launch.intrinsic(which) as i32;
            linker
                .func_wrap(INTRINSIC_MODULE, which.import_name(), move || value)
                .expect("an intrinsic");
        }
        let mut store = wasmtime::Store::new(engine(), ());
        store.set_fuel(WASMTIME_FUEL).expect("fuel");
        let instance = linker.instantiate(&mut store, module).ok()?;
        let memory = instance
            .get_memory(&mut store, "memory")
            .expect("memory 0, exported");
        let kernel = instance
            .get_func(&mut store, KERNEL_EXPORT)
            .expect("the kernel, exported");
        Some(Reference {
            store,
            memory,
            kernel,
        })
    }

    fn memory_image(&self) -> Vec<u8> {
        self.memory.data(&self.store).to_vec()
    }

    /// Calls the kernel; its outcome and memory afterwards.
    fn call(&mut self, args: &[Arg], wasm: &[u8]) -> (Outcome, Vec<u8>) {
        let args: Vec<wasmtime::Val> = args.iter().map(|a| a.val()).collect();
        let result = self.kernel.call(&mut self.store, &args, &mut []);
        let memory = self.memory_image();
        let Err(error) = result else {
            return (Outcome::Returned, memory);
        };
        let trap = *error
            .downcast_ref::<wasmtime::Trap>()
            .unwrap_or_else(|| panic!("wasmtime failed without a trap: {error:?}"));
        let offset = error
            .downcast_ref::<wasmtime::WasmBacktrace>()
            .and_then(|bt| bt.frames().first().and_then(|f| f.module_offset()))
            .map(|o| o as u32);
        let trap = match trap {
            wasmtime::Trap::OutOfFuel => return (Outcome::OutOfFuel, memory),
            wasmtime::Trap::StackOverflow => return (Outcome::StackOverflow, memory),
            wasmtime::Trap::UnreachableCodeReached => KernelTrap::Unreachable,
            wasmtime::Trap::MemoryOutOfBounds => KernelTrap::HeapOutOfBounds,
            wasmtime::Trap::IntegerDivisionByZero => KernelTrap::IntegerDivideByZero,
            wasmtime::Trap::BadConversionToInteger => KernelTrap::BadConversionToInteger,
            // Wasm calls an out-of-range `trunc` (opcodes 0xa8..=0xb1) an
            // integer overflow; the kernel contract files it under bad
            // conversions.
            wasmtime::Trap::IntegerOverflow
                if offset.is_some_and(|o| (0xa8..=0xb1).contains(&wasm[o as usize])) =>
            {
                KernelTrap::BadConversionToInteger
            }
            wasmtime::Trap::IntegerOverflow => KernelTrap::IntegerOverflow,
            other => panic!("unexpected wasmtime trap {other:?}"),
        };
        let offset = offset.expect("a backtrace with the trapping offset");
        (Outcome::Trapped { trap, offset }, memory)
    }
}

/// The CPU driver and one stream for every launch (a stream is a thread).
fn driver() -> &'static (CpuDriver, CpuStream) {
    static DRIVER: OnceLock<(CpuDriver, CpuStream)> = OnceLock::new();
    DRIVER.get_or_init(|| {
        let driver = CpuDriver::with_capacity(64 << 20).expect("the CPU driver");
        let stream = driver.create_stream().expect("a stream");
        (driver, stream)
    })
}

/// Launches the kernel over a copy of `image` (canary bytes after it);
/// the working thread's outcome, the memory afterwards, and the first
/// canary byte that changed.
fn run_native(
    kernel: &tensorwasm_embed::kernel::cpu::CpuKernel,
    launch: &Launch,
    args: &[Arg],
    image: &[u8],
) -> (Outcome, Vec<u8>, Option<usize>) {
    let (d, stream) = driver();
    let canary = [CANARY_BYTE; CANARY];
    let memory = d.alloc_managed(image.len() + CANARY).expect("guest memory");
    let status = d.alloc_device(STATUS_BYTES).expect("the status word");
    d.copy_to_device(memory.range(0, image.len()).expect("range"), image)
        .expect("write guest memory");
    d.copy_to_device(memory.range(image.len(), CANARY).expect("range"), &canary)
        .expect("write the canary");
    d.memset(status.full(), 0).expect("zero the status word");
    let module = d.host_module([(KERNEL_EXPORT, kernel.host_kernel())]);
    let function = d.function(&module, KERNEL_EXPORT).expect("the kernel");
    let wasm_args: Vec<KernelParam> = args.iter().map(|a| a.param()).collect();
    let params = launch_params(
        &wasm_args,
        HiddenParams {
            mem_base: memory.device_ptr(),
            mem_len: image.len() as u64,
            status: status.device_ptr(),
            fuel: KERNEL_FUEL,
            // Fuel, not time, bounds these kernels: the runs must be
            // deterministic.
            time_limit: u64::MAX,
            grid: (launch.grid.x, launch.grid.y, launch.grid.z),
        },
    );
    let config = LaunchConfig {
        grid: one_block_each(launch.grid),
        block: launch.block,
        shared_mem_bytes: 0,
    };
    // SAFETY: guest memory is the first `image.len()` bytes of `memory`
    // and the status word is `status`; both outlive the launch, which ends
    // at the synchronize below.
    unsafe { d.launch(stream, &function, &config, &params) }.expect("launch");
    d.stream_synchronize(stream)
        .expect("the kernel's launch failed (a host kernel panicked)");

    let mut after = vec![0; image.len() + CANARY];
    d.copy_from_device(&mut after, memory.full())
        .expect("read guest memory");
    let mut word = [0u8; STATUS_BYTES];
    d.copy_from_device(&mut word, status.full())
        .expect("read the status word");
    let code = u32::from_le_bytes(word[..4].try_into().expect("4 bytes"));
    let offset = u64::from_le_bytes(word[8..16].try_into().expect("8 bytes"));
    let outcome = match code {
        0 => Outcome::Returned,
        _ => match KernelTrap::from_code(code)
            .unwrap_or_else(|| panic!("status code {code} is no KernelTrap"))
        {
            KernelTrap::OutOfFuel => Outcome::OutOfFuel,
            trap => Outcome::Trapped {
                trap,
                offset: offset as u32,
            },
        },
    };
    let past = after.split_off(image.len());
    let changed = (past != canary)
        .then(|| past.iter().position(|&b| b != CANARY_BYTE))
        .flatten();
    (outcome, after, changed)
}

// ---------------------------------------------------------------------------
// The tally (stderr)
// ---------------------------------------------------------------------------

fn tally(what: String) {
    static COUNTS: Mutex<BTreeMap<String, u64>> = Mutex::new(BTreeMap::new());
    static INPUTS: AtomicU64 = AtomicU64::new(0);
    let mut counts = COUNTS.lock().unwrap_or_else(PoisonError::into_inner);
    *counts.entry(what.clone()).or_default() += 1;
    if what.starts_with("info:") {
        return;
    }
    let n = INPUTS.fetch_add(1, Ordering::Relaxed) + 1;
    if (n >= 1024 && n.is_power_of_two()) || n % 50_000 == 0 {
        let mut line = format!("kernel_diff tally after {n} inputs:");
        for (what, count) in counts.iter() {
            let _ = write!(line, " [{what}: {count}]");
        }
        eprintln!("{line}");
    }
}
