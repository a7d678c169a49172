//! Hand-made cases for the reference side's cooperative intrinsics: what
//! they return for the block's one live thread, and that a trap in one (a
//! host function on wasmtime) has the `call`'s offset, as the kernel's
//! trap site does; and that the runtime's variant of a kernel is the one
//! for its arguments. They run in `embed/tests/gpu_kernel_diff.rs`, which
//! includes this folder (the fuzz target builds no tests), on the CPU
//! driver.

use tensorwasm_core::{Dim3, GpuDriver, lower::KernelTrap};
use tensorwasm_cpu::CpuDriver;
use wasmparser::{Operator, Parser, Payload, ValType};

use super::run::{Arg, Launch, Outcome, Reference, engine};
use super::{
    Case, Checked, Facts, Frame, TRACKED, Variants, check, frame_bytes, loops, rows, shaped_case,
    with_kernel,
};

/// Block (2, 2, 1), thread (1, 1, 0): lane 3. Grid of one block.
fn launch(shared_bytes: u32) -> Launch {
    let dim = |x, y, z| Dim3 { x, y, z };
    Launch {
        grid: dim(1, 1, 1),
        block: dim(2, 2, 1),
        block_idx: dim(0, 0, 0),
        thread_idx: dim(1, 1, 0),
        shared_bytes,
    }
}

/// A case of `wat` (imports by index, no names: the harness writes the
/// `name` section) calling F (exported as `f`) with `args`, spilled into
/// the frame.
fn case(wat: &str, launch: Launch, args: Vec<Arg>) -> Case {
    case_spilled(wat, launch, args, true)
}

/// [`case`], `args` passed to F through the frame or not (`spill`).
fn case_spilled(wat: &str, launch: Launch, args: Vec<Arg>, spill: bool) -> Case {
    let wasm = wat::parse_str(wat).expect("the WAT parses");
    let facts = Facts::parse(&wasm);
    let f = facts.f.expect("`f`, exported");
    let f_type = facts.func_type(f).clone();
    let frame = Frame {
        sp: 4096,
        bytes: frame_bytes(&f_type),
        align: 0,
        fill: None,
        results_at: 0,
        spill,
    };
    Case {
        wasm: with_kernel(&wasm, &facts, f, &f_type, &launch, &frame),
        kernel_index: facts.funcs.len() as u32,
        f,
        f_type,
        launch,
        args,
        frame,
        variants: Variants::Both,
        rewrote: Vec::new(),
        uses: Vec::new(),
    }
}

/// The reference run: its outcome and F's results (8 bytes each, at 0).
fn reference(case: &Case) -> (Outcome, Vec<u64>) {
    let module = wasmtime::Module::new(engine(), &case.wasm).expect("wasmtime compiles it");
    let mut reference = Reference::instantiate(&module, &case.launch).expect("it instantiates");
    let (outcome, memory) = reference.call(&case.args);
    let results = (0..case.f_type.results().len())
        .map(|i| u64::from_le_bytes(memory[8 * i..8 * i + 8].try_into().expect("8 bytes")))
        .collect();
    (outcome, results)
}

/// Checks `case` on the CPU driver: the kernel agrees with wasmtime.
fn compare(case: &Case) -> Checked {
    let driver = CpuDriver::with_capacity(64 << 20).expect("the CPU driver");
    let stream = driver.create_stream().expect("a stream");
    let checked = check(&driver, &stream, case, "CPU");
    if let Checked::Differs(diff) | Checked::DriverFailed(diff) = &checked {
        panic!("{diff}{}", case.describe());
    }
    if let Checked::Skipped(why) = &checked {
        panic!("skipped: {why}");
    }
    checked
}

/// The byte offset of F's last `call`.
fn last_call(case: &Case) -> u32 {
    let mut at = None;
    let mut body_index = 0;
    let defined = case.f - Facts::parse(&case.wasm).imported_funcs();
    for payload in Parser::new(0).parse_all(&case.wasm) {
        if let Payload::CodeSectionEntry(body) = payload.expect("the module parses") {
            if body_index == defined {
                let mut reader = body.get_operators_reader().expect("operators");
                while !reader.eof() {
                    let (op, offset) = reader.read_with_offset().expect("an operator");
                    if matches!(op, Operator::Call { .. }) {
                        at = Some(offset as u32);
                    }
                }
            }
            body_index += 1;
        }
    }
    at.expect("F calls")
}

/// F stores 7 at shared offset 8, loads it back, then loads at its
/// argument: three imports, so F is function 3.
const LOAD_AT_ARG: &str = r#"(module
  (import "tensorwasm_kernel" "shared_load_i32" (func (param i32) (result i32)))
  (import "tensorwasm_kernel" "shared_store_i32" (func (param i32 i32)))
  (import "tensorwasm_kernel" "lane_id" (func (result i32)))
  (memory (export "memory") 1 4)
  (func (export "f") (param i32) (result i32 i32)
    i32.const 8
    i32.const 7
    call 1
    i32.const 8
    call 0
    local.get 0
    call 0))"#;

#[test]
fn a_trap_in_a_shared_access_has_the_calls_offset_on_both_sides() {
    for (offset, shared_bytes, trap) in [
        (2, 16, KernelTrap::HeapMisaligned),
        (16, 16, KernelTrap::HeapOutOfBounds),
        (4096, 4096, KernelTrap::HeapOutOfBounds),
        (0x8000_0002, 4096, KernelTrap::HeapMisaligned),
        (0xffff_fffc, 4096, KernelTrap::HeapOutOfBounds),
        // Alignment first: misaligned and out of bounds.
        (17, 16, KernelTrap::HeapMisaligned),
    ] {
        let case = case(
            LOAD_AT_ARG,
            launch(shared_bytes),
            vec![Arg(ValType::I32, offset)],
        );
        let (outcome, _) = reference(&case);
        let want = Outcome::Trapped {
            trap,
            offset: last_call(&case),
        };
        assert_eq!(outcome, want, "offset {offset:#x} of {shared_bytes} bytes");
        let Checked::Compared { shared_trap, .. } = compare(&case) else {
            unreachable!()
        };
        assert!(shared_trap, "offset {offset:#x}: a trap in a shared access");
    }
}

#[test]
fn shared_accesses_in_bounds_read_what_was_stored() {
    for offset in [0, 8, 12] {
        let case = case(LOAD_AT_ARG, launch(16), vec![Arg(ValType::I32, offset)]);
        let (outcome, results) = reference(&case);
        assert_eq!(outcome, Outcome::Returned);
        let at_offset = if offset == 8 { 7 } else { 0 };
        assert_eq!(results, [7, at_offset], "offset {offset}");
        compare(&case);
    }
}

/// The lone thread's warp operations and shared atomics: lane 3.
#[test]
fn a_lone_threads_warp_operations_and_shared_atomics() {
    let wat = r#"(module
      (import "tensorwasm_kernel" "lane_id" (func (result i32)))
      (import "tensorwasm_kernel" "ballot" (func (param i32) (result i32)))
      (import "tensorwasm_kernel" "any" (func (param i32) (result i32)))
      (import "tensorwasm_kernel" "all" (func (param i32) (result i32)))
      (import "tensorwasm_kernel" "shfl_xor_f32" (func (param f32 i32) (result f32)))
      (import "tensorwasm_kernel" "shared_atomic_max_u32" (func (param i32 i32) (result i32)))
      (import "tensorwasm_kernel" "shared_atomic_cas_i64" (func (param i32 i64 i64) (result i64)))
      (import "tensorwasm_kernel" "shared_atomic_add_f32" (func (param i32 f32) (result f32)))
      (import "tensorwasm_kernel" "shared_load_i32" (func (param i32) (result i32)))
      (import "tensorwasm_kernel" "barrier" (func))
      (memory (export "memory") 1 4)
      (func (export "f") (result i32 i32 i32 i32 i32 i32 i64 i64 f32 f32 i32)
        i32.const -7
        call 1
        i32.const 0
        call 2
        i32.const 0x80000000
        call 3
        f32.const nan:0x200001
        i32.const 1
        call 4
        i32.reinterpret_f32
        ;; max_u32: 0 -> 0xfffffff0 (unsigned), then the old value's load.
        i32.const 4
        i32.const -16
        call 5
        drop
        call 9
        i32.const 4
        i32.const 5
        call 5
        i32.const 4
        call 8
        ;; cas_i64 at 8: 0 == 0, replaced by -1; then -1 != 0, kept.
        i32.const 8
        i64.const 0
        i64.const -1
        call 6
        i32.const 8
        i64.const 0
        i64.const 5
        call 6
        ;; add_f32 at 0: 0 + 1.5, then 1.5 + NaN: the NaN, quieted.
        i32.const 0
        f32.const 1.5
        call 7
        i32.const 0
        f32.const nan:0x1
        call 7
        i32.const 0
        call 8))"#;
    let case = case(wat, launch(16), vec![]);
    let (outcome, results) = reference(&case);
    assert_eq!(outcome, Outcome::Returned);
    assert_eq!(
        results,
        [
            8,           // ballot(-7) at lane 3
            0,           // any(0)
            1,           // all(0x80000000)
            0x7fa0_0001, // the thread's own value, unquieted
            0xffff_fff0, // max_u32's old value (the second call)
            0xffff_fff0, // the load after it
            0,           // cas_i64's old value
            u64::MAX,    // and the second's
            0,           // add_f32's old value
            0x3fc0_0000, // and the second's (1.5)
            0x7fc0_0001, // what it left
        ],
        "results"
    );
    compare(&case);
}

/// The loop cases alone (`loops`, one case in sixteen of the generator's):
/// 200 from seeded bytes on the CPU driver against wasmtime, every
/// compare, step and test position at wrapping starts and bounds a few
/// passes away; at least 150 compared (a case is skipped only where its
/// stack pointer makes the launch invalid). It prints how many ran each
/// kernel (those passing F its pointers as they are have the aligned
/// copy: `own+aligned` where the pointers are aligned, else
/// `own+general`).
#[test]
fn loop_cases_match_wasmtime_on_the_cpu() {
    let driver = CpuDriver::with_capacity(64 << 20).expect("the CPU driver");
    let stream = driver.create_stream().expect("a stream");
    let mut rng = tensorwasm_conformance::Rng::from_env("kernel_case loop cases");
    let mut compared = 0;
    let mut variants = std::collections::BTreeMap::<&str, u32>::new();
    for i in 0..200u64 {
        let bytes = rng.bytes(1024);
        let mut u = arbitrary::Unstructured::new(&bytes);
        let pages = 1 + i % 4;
        let made = loops::loop_case(&mut u, pages).expect("enough bytes");
        let case = shaped_case(&mut u, pages, made, TRACKED[10]).expect("enough bytes");
        match check(&driver, &stream, &case, "CPU") {
            Checked::Compared { kernels, .. } => {
                compared += 1;
                for kernel in kernels {
                    *variants.entry(kernel).or_default() += 1;
                }
            }
            Checked::Skipped(_) => {}
            Checked::Differs(diff) | Checked::DriverFailed(diff) => {
                panic!("case {i}: {diff}{}", case.describe())
            }
        }
    }
    assert!(compared >= 150, "{compared} of 200 compared");
    println!("loop cases compared, by kernel: {variants:?}");
}

/// Row cases (`rows`: clamped loads, guarded stores) against wasmtime on
/// the CPU driver, with the kernels the case picks; some trap and some do
/// not (the edges the arguments sit at reach both).
#[test]
fn row_cases_match_wasmtime_on_the_cpu() {
    let driver = CpuDriver::with_capacity(64 << 20).expect("the CPU driver");
    let stream = driver.create_stream().expect("a stream");
    let mut rng = tensorwasm_conformance::Rng::from_env("kernel_case row cases");
    let (mut trapped, mut returned) = (0, 0);
    for i in 0..200u64 {
        let bytes = rng.bytes(1024);
        let mut u = arbitrary::Unstructured::new(&bytes);
        let pages = 1 + i % 4;
        let made = rows::row_case(&mut u, pages).expect("enough bytes");
        let case = shaped_case(&mut u, pages, made, TRACKED[11]).expect("enough bytes");
        match check(&driver, &stream, &case, "CPU") {
            Checked::Compared { outcome, .. } if outcome.contains("trap") => trapped += 1,
            Checked::Compared { .. } => returned += 1,
            Checked::Skipped(_) => {}
            Checked::Differs(diff) | Checked::DriverFailed(diff) => {
                panic!("case {i}: {diff}{}", case.describe())
            }
        }
    }
    println!("row cases: {trapped} trapped, {returned} returned");
    assert!(
        trapped >= 20 && returned >= 20,
        "{trapped} trapped, {returned} returned of 200"
    );
}

/// F returns the `i64` at its argument and at the argument plus 8, over
/// 32 distinct bytes at 1024.
const LOAD_I64_AT_ARG: &str = r#"(module
  (memory (export "memory") 1 4)
  (data (i32.const 1024) "\01\02\03\04\05\06\07\08\09\0a\0b\0c\0d\0e\0f\10")
  (data (i32.const 1040) "\11\12\13\14\15\16\17\18\19\1a\1b\1c\1d\1e\1f\20")
  (func (export "f") (param i32) (result i64 i64)
    local.get 0
    i64.load
    local.get 0
    i64.load offset=8))"#;

/// The runtime's variant (`docs/kernels.md`, "Kernel variants") of a
/// kernel that loads at its argument: the aligned copy alone for an
/// argument that is a multiple of 8, the general body for one that is
/// not, each matching wasmtime. Run on a misaligned argument, the aligned
/// copy would read it with its low bits masked off and load other bytes
/// than wasmtime: the comparison fails if `check` picks the variant
/// wrongly.
#[test]
fn a_misaligned_argument_runs_the_general_variant() {
    let dim = |x, y, z| Dim3 { x, y, z };
    for (at, variant) in [
        (1024, "own+aligned"),
        (1032, "own+aligned"),
        (1028, "own+general"),
        (1027, "own+general"),
    ] {
        let launch = Launch {
            grid: dim(1, 1, 1),
            block: dim(1, 1, 1),
            block_idx: dim(0, 0, 0),
            thread_idx: dim(0, 0, 0),
            shared_bytes: 0,
        };
        // Not through the frame, where the translator would not see that
        // the argument is an address.
        let case = case_spilled(LOAD_I64_AT_ARG, launch, vec![Arg(ValType::I32, at)], false);
        let (outcome, results) = reference(&case);
        assert_eq!(outcome, Outcome::Returned);
        let want =
            |at: u64| u64::from_le_bytes(std::array::from_fn(|i| (at - 1023) as u8 + i as u8));
        assert_eq!(results, [want(at), want(at + 8)], "argument {at}");
        let Checked::Compared { kernels, .. } = compare(&case) else {
            unreachable!()
        };
        assert_eq!(kernels, ["any", variant], "argument {at}");
    }
}
