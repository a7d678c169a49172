//! `core::lower::translate` against wasmtime: every scalar Wasm operator
//! family, control flow, calls, memory and traps, run twice on the same
//! inputs (random, with a printed seed, plus listed edge values) — once by
//! wasmtime on the CPU (the reference) and once as the translated CLIF in
//! Cranelift's interpreter — and compared bit for bit (NaN payloads of
//! arithmetic results excepted), traps and their byte offsets included.
//! Then the detector: each refused construct, its name and offset.
//! The harness (`harness`) runs each kernel both ways.

#[allow(dead_code)] // shared with the other translator suites; this one uses most of it
mod harness;

use harness::*;

use cranelift_codegen::ir::InstructionData;
use tensorwasm_core::lower::translate::{TranslatedKernel, WasmType, translate_kernel};
use tensorwasm_core::lower::{Intrinsic, KernelAbi, KernelTrap, LowerError, RuntimeCheck};
use wasmparser::{Operator, Parser, Payload};

// ---------------------------------------------------------------------------
// Differential cases
// ---------------------------------------------------------------------------

/// One run's inputs: kernel arguments and the memory image.
struct Input {
    args: Vec<Arg>,
    memory: Vec<u8>,
}

/// A kernel run against wasmtime on many inputs.
struct Case {
    name: String,
    wat: String,
    /// Output slots whose NaNs may differ in payload.
    nan_slots: Vec<(usize, Ty)>,
    inputs: Vec<Input>,
}

fn nan_equal(ty: Ty, a: &[u8], b: &[u8]) -> bool {
    match ty {
        Ty::F32 => {
            let x = f32::from_le_bytes(a[..4].try_into().unwrap());
            let y = f32::from_le_bytes(b[..4].try_into().unwrap());
            x.is_nan() && y.is_nan()
        }
        Ty::F64 => {
            let x = f64::from_le_bytes(a[..8].try_into().unwrap());
            let y = f64::from_le_bytes(b[..8].try_into().unwrap());
            x.is_nan() && y.is_nan()
        }
        Ty::I32 | Ty::I64 => false,
    }
}

/// Runs every input of `case` on both sides (the kernel for every launch
/// and the variant the host launches, [`Kernels`]); returns how many runs
/// trapped.
fn run_case(case: &Case) -> usize {
    let wasm = wat::parse_str(&case.wat).unwrap_or_else(|e| panic!("{}: {e}", case.name));
    let kernels = Kernels::new(&wasm);
    let mut reference = Reference::new(&wasm);
    let mut traps = 0;
    for input in &case.inputs {
        let mut expected_memory = input.memory.clone();
        let expected = reference.run(&input.args, &mut expected_memory);
        if expected != Outcome::Returned {
            traps += 1;
        }
        for kernel in kernels.for_launch(&input.args, input.memory.len()) {
            run_input(case, input, kernel, expected, &expected_memory);
        }
    }
    traps
}

/// Runs `kernel` on `input` of `case` and asserts wasmtime's outcome
/// (`expected`) and memory.
fn run_input(
    case: &Case,
    input: &Input,
    kernel: &TranslatedKernel,
    expected: Outcome,
    expected_memory: &[u8],
) {
    let mut actual_memory = input.memory.clone();
    let actual = interpret(kernel, &input.args, &mut actual_memory, PLENTY);
    let context = || {
        let slots: Vec<String> = input.memory[..64]
            .chunks(8)
            .map(|c| format!("{:016x}", u64::from_le_bytes(c.try_into().unwrap())))
            .collect();
        format!(
            "{} ({}): args {:?}, slots {slots:?}",
            case.name,
            variant_name(kernel.variant),
            input.args
        )
    };
    assert_eq!(actual, expected, "{}", context());
    for &(at, ty) in &case.nan_slots {
        let r = at..at + ty.bytes();
        if nan_equal(ty, &expected_memory[r.clone()], &actual_memory[r.clone()]) {
            actual_memory[r.clone()].copy_from_slice(&expected_memory[r]);
        }
    }
    // Slice equality first: a byte loop is slow in a debug build.
    if expected_memory != actual_memory
        && let Some(at) = (0..PAGE).find(|&i| expected_memory[i] != actual_memory[i])
    {
        let from = at & !7;
        panic!(
            "{}: memory differs at {at:#x}: wasmtime {:02x?}, CLIF {:02x?}",
            context(),
            &expected_memory[from..from + 8],
            &actual_memory[from..from + 8]
        );
    }
}

/// Input slot `i` sits at byte `8 * i`; output `j` at `256 + 8 * j`.
const OUT: usize = 256;

/// Inputs for kernels that read typed slots: every edge value (or pair of
/// edge values, for two slots), then `random` random rows.
fn slot_inputs(rng: &mut Rng, slots: &[Ty], random: usize) -> Vec<Input> {
    let image = |values: &[u64]| {
        let mut memory = vec![0u8; PAGE];
        for (i, (&ty, &v)) in slots.iter().zip(values).enumerate() {
            memory[8 * i..8 * i + ty.bytes()].copy_from_slice(&v.to_le_bytes()[..ty.bytes()]);
        }
        Input {
            args: Vec::new(),
            memory,
        }
    };
    let mut inputs = Vec::new();
    match slots {
        [a] => inputs.extend(edges(*a).into_iter().map(|x| image(&[x]))),
        [a, b] => {
            for x in edges(*a) {
                for y in edges(*b) {
                    inputs.push(image(&[x, y]));
                }
            }
        }
        _ => {}
    }
    for _ in 0..random {
        let row: Vec<u64> = slots.iter().map(|&t| random_value(rng, t)).collect();
        inputs.push(image(&row));
    }
    inputs
}

/// An operator row: its text, which slots feed it, its result type, and
/// whether NaN payloads of its result may differ.
type OpRow = (&'static str, &'static [usize], Ty, bool);

/// A kernel that applies each operator in `ops` to slots and stores the
/// results.
fn slot_case(rng: &mut Rng, name: &str, slots: &[Ty], ops: &[OpRow], random: usize) -> Case {
    let mut body = String::new();
    let mut nan_slots = Vec::new();
    for (j, &(op, args, result, nan)) in ops.iter().enumerate() {
        let loads: Vec<String> = args
            .iter()
            .map(|&s| format!("({}.load offset={} (i32.const 0))", slots[s].name(), 8 * s))
            .collect();
        body.push_str(&format!(
            "    ({}.store offset={} (i32.const 0) ({op} {}))\n",
            result.name(),
            OUT + 8 * j,
            loads.join(" ")
        ));
        if nan {
            nan_slots.push((OUT + 8 * j, result));
        }
    }
    Case {
        name: name.to_string(),
        wat: format!(
            "(module\n  (memory (export \"memory\") 1)\n  (func (export \"kernel\")\n{body}  ))"
        ),
        nan_slots,
        inputs: slot_inputs(rng, slots, random),
    }
}

use Ty::{F32, F64, I32, I64};

const I32_BINARY: &[OpRow] = &[
    ("i32.add", &[0, 1], I32, false),
    ("i32.sub", &[0, 1], I32, false),
    ("i32.mul", &[0, 1], I32, false),
    ("i32.and", &[0, 1], I32, false),
    ("i32.or", &[0, 1], I32, false),
    ("i32.xor", &[0, 1], I32, false),
    ("i32.shl", &[0, 1], I32, false),
    ("i32.shr_s", &[0, 1], I32, false),
    ("i32.shr_u", &[0, 1], I32, false),
    ("i32.rotl", &[0, 1], I32, false),
    ("i32.rotr", &[0, 1], I32, false),
    ("i32.eq", &[0, 1], I32, false),
    ("i32.ne", &[0, 1], I32, false),
    ("i32.lt_s", &[0, 1], I32, false),
    ("i32.lt_u", &[0, 1], I32, false),
    ("i32.gt_s", &[0, 1], I32, false),
    ("i32.gt_u", &[0, 1], I32, false),
    ("i32.le_s", &[0, 1], I32, false),
    ("i32.le_u", &[0, 1], I32, false),
    ("i32.ge_s", &[0, 1], I32, false),
    ("i32.ge_u", &[0, 1], I32, false),
    ("i32.clz", &[0], I32, false),
    ("i32.ctz", &[0], I32, false),
    ("i32.popcnt", &[0], I32, false),
    ("i32.eqz", &[0], I32, false),
    ("i32.extend8_s", &[0], I32, false),
    ("i32.extend16_s", &[0], I32, false),
];

const I64_BINARY: &[OpRow] = &[
    ("i64.add", &[0, 1], I64, false),
    ("i64.sub", &[0, 1], I64, false),
    ("i64.mul", &[0, 1], I64, false),
    ("i64.and", &[0, 1], I64, false),
    ("i64.or", &[0, 1], I64, false),
    ("i64.xor", &[0, 1], I64, false),
    ("i64.shl", &[0, 1], I64, false),
    ("i64.shr_s", &[0, 1], I64, false),
    ("i64.shr_u", &[0, 1], I64, false),
    ("i64.rotl", &[0, 1], I64, false),
    ("i64.rotr", &[0, 1], I64, false),
    ("i64.eq", &[0, 1], I32, false),
    ("i64.ne", &[0, 1], I32, false),
    ("i64.lt_s", &[0, 1], I32, false),
    ("i64.lt_u", &[0, 1], I32, false),
    ("i64.gt_s", &[0, 1], I32, false),
    ("i64.gt_u", &[0, 1], I32, false),
    ("i64.le_s", &[0, 1], I32, false),
    ("i64.le_u", &[0, 1], I32, false),
    ("i64.ge_s", &[0, 1], I32, false),
    ("i64.ge_u", &[0, 1], I32, false),
    ("i64.clz", &[0], I64, false),
    ("i64.ctz", &[0], I64, false),
    ("i64.popcnt", &[0], I64, false),
    ("i64.eqz", &[0], I32, false),
    ("i64.extend8_s", &[0], I64, false),
    ("i64.extend16_s", &[0], I64, false),
    ("i64.extend32_s", &[0], I64, false),
];

/// A float operator row: its `f32` and `f64` texts, slots, result type
/// (`None`: the operand type) and NaN tolerance.
type FloatRow = (
    &'static str,
    &'static str,
    &'static [usize],
    Option<Ty>,
    bool,
);

fn float_ops(t: Ty) -> Vec<OpRow> {
    let ops: &[FloatRow] = &[
        ("f32.add", "f64.add", &[0, 1], None, true),
        ("f32.sub", "f64.sub", &[0, 1], None, true),
        ("f32.mul", "f64.mul", &[0, 1], None, true),
        ("f32.div", "f64.div", &[0, 1], None, true),
        ("f32.min", "f64.min", &[0, 1], None, true),
        ("f32.max", "f64.max", &[0, 1], None, true),
        ("f32.copysign", "f64.copysign", &[0, 1], None, false),
        ("f32.eq", "f64.eq", &[0, 1], Some(I32), false),
        ("f32.ne", "f64.ne", &[0, 1], Some(I32), false),
        ("f32.lt", "f64.lt", &[0, 1], Some(I32), false),
        ("f32.gt", "f64.gt", &[0, 1], Some(I32), false),
        ("f32.le", "f64.le", &[0, 1], Some(I32), false),
        ("f32.ge", "f64.ge", &[0, 1], Some(I32), false),
        ("f32.abs", "f64.abs", &[0], None, false),
        ("f32.neg", "f64.neg", &[0], None, false),
        ("f32.ceil", "f64.ceil", &[0], None, true),
        ("f32.floor", "f64.floor", &[0], None, true),
        ("f32.trunc", "f64.trunc", &[0], None, true),
        ("f32.nearest", "f64.nearest", &[0], None, true),
        ("f32.sqrt", "f64.sqrt", &[0], None, true),
    ];
    ops.iter()
        .map(|&(a, b, args, result, nan)| {
            (if t == F32 { a } else { b }, args, result.unwrap_or(t), nan)
        })
        .collect()
}

/// Slots: i32, i64, f32, f64.
const CONVERSIONS: &[OpRow] = &[
    ("i32.wrap_i64", &[1], I32, false),
    ("i64.extend_i32_s", &[0], I64, false),
    ("i64.extend_i32_u", &[0], I64, false),
    ("i32.trunc_sat_f32_s", &[2], I32, false),
    ("i32.trunc_sat_f32_u", &[2], I32, false),
    ("i32.trunc_sat_f64_s", &[3], I32, false),
    ("i32.trunc_sat_f64_u", &[3], I32, false),
    ("i64.trunc_sat_f32_s", &[2], I64, false),
    ("i64.trunc_sat_f32_u", &[2], I64, false),
    ("i64.trunc_sat_f64_s", &[3], I64, false),
    ("i64.trunc_sat_f64_u", &[3], I64, false),
    ("f32.convert_i32_s", &[0], F32, false),
    ("f32.convert_i32_u", &[0], F32, false),
    ("f32.convert_i64_s", &[1], F32, false),
    ("f32.convert_i64_u", &[1], F32, false),
    ("f64.convert_i32_s", &[0], F64, false),
    ("f64.convert_i32_u", &[0], F64, false),
    ("f64.convert_i64_s", &[1], F64, false),
    ("f64.convert_i64_u", &[1], F64, false),
    ("f32.demote_f64", &[3], F32, true),
    ("f64.promote_f32", &[2], F64, true),
    ("i32.reinterpret_f32", &[2], I32, false),
    ("i64.reinterpret_f64", &[3], I64, false),
    ("f32.reinterpret_i32", &[0], F32, false),
    ("f64.reinterpret_i64", &[1], F64, false),
];

#[test]
fn integer_operators_match_wasmtime() {
    let mut rng = rng("integer");
    for (name, slots, ops) in [
        ("i32 operators", [I32, I32], I32_BINARY),
        ("i64 operators", [I64, I64], I64_BINARY),
    ] {
        let case = slot_case(&mut rng, name, &slots, ops, 400);
        let runs = case.inputs.len();
        assert_eq!(run_case(&case), 0);
        eprintln!("{name}: {} operators x {runs} inputs", ops.len());
    }
}

#[test]
fn float_operators_match_wasmtime() {
    let mut rng = rng("float");
    for t in [F32, F64] {
        let ops = float_ops(t);
        let case = slot_case(
            &mut rng,
            &format!("{} operators", t.name()),
            &[t, t],
            &ops,
            400,
        );
        let runs = case.inputs.len();
        assert_eq!(run_case(&case), 0);
        eprintln!(
            "{} operators: {} operators x {runs} inputs",
            t.name(),
            ops.len()
        );
    }
}

#[test]
fn conversions_match_wasmtime() {
    let mut rng = rng("conversions");
    let slots = [I32, I64, F32, F64];
    let mut case = slot_case(&mut rng, "conversions", &slots, CONVERSIONS, 1500);
    // Each edge value in every slot at once.
    for i in 0..40 {
        let mut memory = vec![0u8; PAGE];
        for (s, &ty) in slots.iter().enumerate() {
            let e = edges(ty);
            let v = e[i % e.len()];
            memory[8 * s..8 * s + ty.bytes()].copy_from_slice(&v.to_le_bytes()[..ty.bytes()]);
        }
        case.inputs.push(Input {
            args: Vec::new(),
            memory,
        });
    }
    assert_eq!(run_case(&case), 0);
}

/// Trapping operators, one per kernel so each is tested on every input;
/// traps (code and offset) must match wasmtime's.
#[test]
fn trapping_arithmetic_matches_wasmtime() {
    let mut rng = rng("trapping");
    let rows: &[(&str, Ty, Ty)] = &[
        ("i32.div_s", I32, I32),
        ("i32.div_u", I32, I32),
        ("i32.rem_s", I32, I32),
        ("i32.rem_u", I32, I32),
        ("i64.div_s", I64, I64),
        ("i64.div_u", I64, I64),
        ("i64.rem_s", I64, I64),
        ("i64.rem_u", I64, I64),
        ("i32.trunc_f32_s", F32, I32),
        ("i32.trunc_f32_u", F32, I32),
        ("i32.trunc_f64_s", F64, I32),
        ("i32.trunc_f64_u", F64, I32),
        ("i64.trunc_f32_s", F32, I64),
        ("i64.trunc_f32_u", F32, I64),
        ("i64.trunc_f64_s", F64, I64),
        ("i64.trunc_f64_u", F64, I64),
    ];
    for &(op, input, result) in rows {
        let binary = op.contains("div") || op.contains("rem");
        let (slots, args): (&[Ty], &'static [usize]) = if binary {
            (&[input, input][..], &[0, 1])
        } else {
            (&[input][..], &[0])
        };
        let case = slot_case(&mut rng, op, slots, &[(op, args, result, false)], 1000);
        let traps = run_case(&case);
        eprintln!("{op}: {} inputs, {traps} trapped", case.inputs.len());
        assert!(traps > 0, "{op}: no input trapped");
        assert!(traps < case.inputs.len(), "{op}: every input trapped");
    }
}

#[test]
fn kernel_parameters_match_wasmtime() {
    let mut rng = rng("params");
    let wat = r#"(module
      (memory (export "memory") 1)
      (func (export "kernel") (param i32 i64 f32 f64)
        (i32.store offset=256 (i32.const 0) (local.get 0))
        (i64.store offset=264 (i32.const 0) (local.get 1))
        (f32.store offset=272 (i32.const 0) (local.get 2))
        (f64.store offset=280 (i32.const 0) (local.get 3))))"#;
    let inputs = (0..300)
        .map(|_| Input {
            args: [I32, I64, F32, F64]
                .into_iter()
                .map(|t| Arg(t, random_value(&mut rng, t)))
                .collect(),
            memory: vec![0; PAGE],
        })
        .collect();
    let case = Case {
        name: "parameters".into(),
        wat: wat.into(),
        nan_slots: Vec::new(),
        inputs,
    };
    assert_eq!(run_case(&case), 0);
}

/// Every load and store width, with immediate offsets, at random, unaligned
/// and out-of-bounds addresses.
#[test]
fn loads_and_stores_match_wasmtime() {
    let mut rng = rng("memory");
    let loads: &[(&str, Ty)] = &[
        ("i32.load", I32),
        ("i64.load", I64),
        ("f32.load", F32),
        ("f64.load", F64),
        ("i32.load8_s", I32),
        ("i32.load8_u", I32),
        ("i32.load16_s", I32),
        ("i32.load16_u", I32),
        ("i64.load8_s", I64),
        ("i64.load8_u", I64),
        ("i64.load16_s", I64),
        ("i64.load16_u", I64),
        ("i64.load32_s", I64),
        ("i64.load32_u", I64),
    ];
    let stores: &[(&str, Ty)] = &[
        ("i32.store", I32),
        ("i64.store", I64),
        ("f32.store", F32),
        ("f64.store", F64),
        ("i32.store8", I32),
        ("i32.store16", I32),
        ("i64.store8", I64),
        ("i64.store16", I64),
        ("i64.store32", I64),
    ];
    let addresses = |rng: &mut Rng, offset: u32| -> Vec<u32> {
        let mut a: Vec<u32> = (0..16)
            .map(|k| (PAGE as u32 - 16 + k).wrapping_sub(offset))
            .collect();
        a.extend([
            0,
            1,
            3,
            0xffff_ffff,
            0x8000_0000,
            0x7fff_ffff,
            0x1_0000 - offset,
        ]);
        a.extend((0..120).map(|_| rng.below(4096) as u32));
        a
    };
    let memory_image = |rng: &mut Rng| {
        let mut memory = vec![0u8; PAGE];
        for i in (0..4096).chain(PAGE - 64..PAGE) {
            memory[i] = rng.next() as u8;
        }
        memory
    };
    let mut runs = 0;
    let mut traps = 0;
    for offset in [0u32, 5, 65530] {
        for &(op, ty) in loads {
            let wat = format!(
                r#"(module (memory (export "memory") 1)
                  (func (export "kernel") (param $a i32)
                    ({t}.store offset=8192 (i32.const 0) ({op} offset={offset} (local.get $a)))))"#,
                t = ty.name()
            );
            let inputs = addresses(&mut rng, offset)
                .into_iter()
                .map(|a| Input {
                    args: vec![Arg(I32, u64::from(a))],
                    memory: memory_image(&mut rng),
                })
                .collect::<Vec<_>>();
            runs += inputs.len();
            traps += run_case(&Case {
                name: format!("{op} offset={offset}"),
                wat,
                nan_slots: Vec::new(),
                inputs,
            });
        }
        for &(op, ty) in stores {
            let wat = format!(
                r#"(module (memory (export "memory") 1)
                  (func (export "kernel") (param $a i32)
                    ({op} offset={offset} (local.get $a) ({t}.load offset=8 (i32.const 0)))))"#,
                t = ty.name()
            );
            let inputs = addresses(&mut rng, offset)
                .into_iter()
                .map(|a| Input {
                    args: vec![Arg(I32, u64::from(a))],
                    memory: memory_image(&mut rng),
                })
                .collect::<Vec<_>>();
            runs += inputs.len();
            traps += run_case(&Case {
                name: format!("{op} offset={offset}"),
                wat,
                nan_slots: Vec::new(),
                inputs,
            });
        }
    }
    eprintln!("loads and stores: {runs} runs, {traps} trapped out of bounds");
    assert!(traps > 0 && traps < runs);
}

/// Control flow, locals, calls (inlined), globals, multi-value blocks, dead
/// code, intrinsics and `memory.size`, in one module of helpers.
const CONTROL: &str = r#"(module
  (import "tensorwasm_kernel" "thread_idx_x" (func $tid_x (result i32)))
  (import "tensorwasm_kernel" "block_idx_y" (func $ctaid_y (result i32)))
  (import "tensorwasm_kernel" "grid_dim_z" (func $nctaid_z (result i32)))
  (memory (export "memory") 1)
  (global $seven i32 (i32.const 7))
  (global $answer i64 (i64.add (i64.const 40) (i64.const 2)))
  (global $half f64 (f64.const -1.5))
  (global $copy i32 (global.get $seven))

  (func $collatz (param $n i32) (result i32)
    (local $steps i32)
    (local.set $n (i32.add (i32.and (local.get $n) (i32.const 0x3ff)) (i32.const 1)))
    (block $done
      (loop $next
        (br_if $done (i32.eq (local.get $n) (i32.const 1)))
        (local.set $steps (i32.add (local.get $steps) (i32.const 1)))
        (if (i32.and (local.get $n) (i32.const 1))
          (then (local.set $n (i32.add (i32.mul (local.get $n) (i32.const 3)) (i32.const 1))))
          (else (local.set $n (i32.shr_u (local.get $n) (i32.const 1)))))
        (br $next)))
    (local.get $steps))

  (func $classify (param $x i32) (result i32)
    (block $d (block $c (block $b (block $a
      (br_table $a $b $c $d (i32.and (local.get $x) (i32.const 7))))
      (return (i32.const 100)))
      (return (i32.const 200)))
      (return (i32.const 300)))
    (i32.const 400))

  (func $table_values (param $x i32) (result i32)
    (block $outer (result i32)
      (block $inner (result i32)
        (i32.const 11)
        (br_table $outer $inner $outer (i32.and (local.get $x) (i32.const 3))))
      (i32.const 1000)
      (i32.add)))

  (func $table_loop (param $x i32) (result i32)
    (local $i i32)
    (block $exit
      (loop $again
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br_if $exit (i32.gt_u (local.get $i) (i32.const 40)))
        (br_table $again $again $exit
          (i32.and (i32.shr_u (local.get $x) (local.get $i)) (i32.const 3)))))
    (local.get $i))

  (func $multi (param $x i32) (result i32 i64)
    (i32.add (local.get $x) (i32.const 1))
    (i64.mul (i64.extend_i32_s (local.get $x)) (i64.const 3)))

  (func $sum_to (param $n i32) (result i32)
    (local $c i32) (local $acc i32)
    (local.get $n) (i32.const 15) (i32.and)
    (i32.const 0)
    (loop $l (param i32 i32) (result i32)
      (local.set $acc) (local.set $c)
      (local.set $acc (i32.add (local.get $acc) (local.get $c)))
      (local.set $c (i32.sub (local.get $c) (i32.const 1)))
      (local.get $c) (local.get $acc)
      (br_if $l (i32.gt_s (local.get $c) (i32.const 0)))
      (local.set $acc) (drop) (local.get $acc)))

  (func $if_params (param $x i32) (param $y i32) (result i32)
    local.get $x
    local.get $y
    i32.const 1
    i32.and
    if (param i32) (result i32)
      i32.const 1
      i32.add
    else
      i32.const 2
      i32.mul
    end
    local.get $y
    i32.const 2
    i32.and
    if (param i32) (result i32)
      i32.const 5
      i32.sub
    end)

  (func $early (param $x i32) (result i64)
    (if (i32.lt_s (local.get $x) (i32.const 0)) (then (return (i64.const -1))))
    (block (result i64)
      (i64.extend_i32_u (local.get $x))
      (br_if 0 (i32.gt_u (local.get $x) (i32.const 100)))
      (drop)
      (i64.const 5)))

  (func $dead (param $x i32) (result i32)
    (block $b (result i32)
      (i32.const 9)
      (br $b)
      (i32.const 1)
      (drop)
      (loop (br 0))
      (if (i32.const 1) (then (unreachable)) (else (nop)))
      (block (result i32) (unreachable))
      (i32.add))
    (if (result i32) (i32.and (local.get $x) (i32.const 1))
      (then (return (i32.const 77)) (i32.const 1))
      (else (i32.const 2)))
    (i32.add))

  (func $boom (param $x i32) (result i32)
    (if (i32.eq (i32.and (local.get $x) (i32.const 3)) (i32.const 3))
      (then (unreachable)))
    (i32.add (local.get $x) (i32.const 1)))

  (func $never (result f32)
    (unreachable))

  (func $chain (param $x i32) (result i32)
    (call $boom (call $boom (local.get $x))))

  (func (export "kernel") (param $x i32) (param $y i32) (param $f f64)
    (local $l64 i64) (local $lf32 f32) (local $lf64 f64) (local $a i32) (local $b i64)
    (i32.store offset=256 (i32.const 0) (call $collatz (local.get $x)))
    (i32.store offset=264 (i32.const 0) (call $classify (local.get $y)))
    (i32.store offset=272 (i32.const 0) (call $table_values (local.get $x)))
    (i32.store offset=280 (i32.const 0) (call $table_loop (local.get $y)))
    (call $multi (local.get $x))
    (local.set $b)
    (local.set $a)
    (i32.store offset=288 (i32.const 0) (local.get $a))
    (i64.store offset=296 (i32.const 0) (local.get $b))
    (i32.store offset=304 (i32.const 0) (call $sum_to (local.get $y)))
    (i32.store offset=312 (i32.const 0) (call $if_params (local.get $x) (local.get $y)))
    (i64.store offset=320 (i32.const 0) (call $early (local.get $x)))
    (i32.store offset=328 (i32.const 0) (call $dead (local.get $y)))
    (i32.store offset=336 (i32.const 0) (select (local.get $x) (local.get $y) (i32.lt_s (local.get $x) (local.get $y))))
    (f64.store offset=344 (i32.const 0)
      (select (result f64) (local.get $f) (global.get $half) (i32.and (local.get $y) (i32.const 4))))
    (i32.store offset=352 (i32.const 0) (global.get $seven))
    (i64.store offset=360 (i32.const 0) (global.get $answer))
    (i32.store offset=368 (i32.const 0) (global.get $copy))
    (i64.store offset=376 (i32.const 0) (local.get $l64))
    (f32.store offset=384 (i32.const 0) (local.get $lf32))
    (f64.store offset=392 (i32.const 0) (local.get $lf64))
    (i32.store offset=400 (i32.const 0) (memory.size))
    (i32.store offset=408 (i32.const 0) (call $tid_x))
    (i32.store offset=416 (i32.const 0) (call $ctaid_y))
    (i32.store offset=424 (i32.const 0) (call $nctaid_z))
    (local.set $l64 (i64.const 5))
    (local.set $lf32 (local.tee $lf32 (f32.const 2.5)))
    (f32.store offset=432 (i32.const 0) (local.get $lf32))
    (nop)
    (i32.store offset=440 (i32.const 0) (call $chain (local.get $y)))
    (if (i32.eq (local.get $x) (i32.const 12345))
      (then (f32.store offset=448 (i32.const 0) (call $never))))
    (i32.store offset=456 (i32.const 0) (i32.const -1)))
)"#;

#[test]
fn control_flow_and_calls_match_wasmtime() {
    let mut rng = rng("control");
    let mut inputs: Vec<Input> = Vec::new();
    let i32_edges = edges(I32);
    for &x in &i32_edges {
        for &y in &i32_edges {
            inputs.push(Input {
                args: vec![Arg(I32, x), Arg(I32, y), Arg(F64, 2.0f64.to_bits())],
                memory: vec![0; PAGE],
            });
        }
    }
    for _ in 0..400 {
        inputs.push(Input {
            args: vec![
                Arg(I32, random_value(&mut rng, I32)),
                Arg(I32, random_value(&mut rng, I32)),
                Arg(F64, random_value(&mut rng, F64)),
            ],
            memory: vec![0; PAGE],
        });
    }
    inputs.push(Input {
        args: vec![Arg(I32, 12345), Arg(I32, 0), Arg(F64, 0)],
        memory: vec![0; PAGE],
    });
    let runs = inputs.len();
    let traps = run_case(&Case {
        name: "control flow".into(),
        wat: CONTROL.into(),
        nan_slots: Vec::new(),
        inputs,
    });
    eprintln!("control flow: {runs} runs, {traps} trapped");
    assert!(traps > 0 && traps < runs);
}

// ---------------------------------------------------------------------------
// Traps, explicitly
// ---------------------------------------------------------------------------

fn run_alone(wat: &str, args: &[Arg], fuel: i64) -> (Vec<u8>, Outcome, Vec<u8>, TranslatedKernel) {
    let wasm = wat::parse_str(wat).expect("wat");
    let kernel = translate(&wasm);
    let mut memory = vec![0u8; PAGE];
    for (i, b) in memory[..64].iter_mut().enumerate() {
        *b = i as u8 | 0x80;
    }
    let outcome = interpret(&kernel, args, &mut memory, fuel);
    (wasm, outcome, memory, kernel)
}

#[test]
fn traps_carry_their_code_and_operator_offset() {
    type Row = (
        &'static str,
        Vec<Arg>,
        KernelTrap,
        fn(&Operator<'_>) -> bool,
    );
    let cases: Vec<Row> = vec![
        (
            "(i32.store offset=256 (i32.const 0) (i32.div_u (i32.const 7) (local.get 0)))",
            vec![Arg(I32, 0), Arg(I64, 0), Arg(F64, 0)],
            KernelTrap::IntegerDivideByZero,
            |op| matches!(op, Operator::I32DivU),
        ),
        (
            "(i64.store offset=256 (i32.const 0) (i64.rem_s (local.get 1) (i64.const 0)))",
            vec![Arg(I32, 0), Arg(I64, 5), Arg(F64, 0)],
            KernelTrap::IntegerDivideByZero,
            |op| matches!(op, Operator::I64RemS),
        ),
        (
            "(i32.store offset=256 (i32.const 0) (i32.div_s (local.get 0) (i32.const -1)))",
            vec![Arg(I32, 0x8000_0000), Arg(I64, 0), Arg(F64, 0)],
            KernelTrap::IntegerOverflow,
            |op| matches!(op, Operator::I32DivS),
        ),
        (
            "(i64.store offset=256 (i32.const 0) (i64.div_s (local.get 1) (i64.const -1)))",
            vec![Arg(I32, 0), Arg(I64, i64::MIN as u64), Arg(F64, 0)],
            KernelTrap::IntegerOverflow,
            |op| matches!(op, Operator::I64DivS),
        ),
        (
            "(i32.store offset=256 (i32.const 0) (i32.trunc_f64_s (local.get 2)))",
            vec![Arg(I32, 0), Arg(I64, 0), Arg(F64, f64::NAN.to_bits())],
            KernelTrap::BadConversionToInteger,
            |op| matches!(op, Operator::I32TruncF64S),
        ),
        (
            // As Wasm and wasmtime name it: out of range is an overflow.
            "(i32.store offset=256 (i32.const 0) (i32.trunc_f32_s (f32.demote_f64 (local.get 2))))",
            vec![
                Arg(I32, 0),
                Arg(I64, 0),
                Arg(F64, 2147483648.0f64.to_bits()),
            ],
            KernelTrap::IntegerOverflow,
            |op| matches!(op, Operator::I32TruncF32S),
        ),
        (
            "(i64.store offset=256 (i32.const 0) (i64.trunc_f64_u (local.get 2)))",
            vec![Arg(I32, 0), Arg(I64, 0), Arg(F64, (-1.0f64).to_bits())],
            KernelTrap::IntegerOverflow,
            |op| matches!(op, Operator::I64TruncF64U),
        ),
        (
            "(i32.store (local.get 0) (i32.const 0x01020304))",
            vec![Arg(I32, (PAGE - 2) as u64), Arg(I64, 0), Arg(F64, 0)],
            KernelTrap::HeapOutOfBounds,
            |op| matches!(op, Operator::I32Store { .. }),
        ),
        (
            "(i64.store offset=16 (local.get 0) (i64.const -1))",
            vec![Arg(I32, (PAGE - 20) as u64), Arg(I64, 0), Arg(F64, 0)],
            KernelTrap::HeapOutOfBounds,
            |op| matches!(op, Operator::I64Store { .. }),
        ),
        (
            "(i32.store (i32.const 300) (i32.const 1)) (unreachable)",
            vec![Arg(I32, 0), Arg(I64, 0), Arg(F64, 0)],
            KernelTrap::Unreachable,
            |op| matches!(op, Operator::Unreachable),
        ),
    ];
    for (body, args, trap, pick) in cases {
        let wat = format!(
            r#"(module (memory (export "memory") 1)
              (func (export "kernel") (param i32 i64 f64) {body}))"#
        );
        let (wasm, outcome, memory, _) = run_alone(&wat, &args, PLENTY);
        let offset = offset_of(&wasm, 0, pick);
        assert_eq!(outcome, Outcome::Trapped { trap, offset }, "{body}");
        // A trapping store writes nothing: the last page is untouched.
        assert!(
            memory[PAGE - 64..].iter().all(|&b| b == 0),
            "{body}: partial write"
        );
        // And the reference agrees.
        let mut reference = Reference::new(&wasm);
        let mut expected = vec![0u8; PAGE];
        for (i, b) in expected[..64].iter_mut().enumerate() {
            *b = i as u8 | 0x80;
        }
        assert_eq!(reference.run(&args, &mut expected), outcome, "{body}");
        assert_eq!(expected, memory, "{body}");
    }
}

#[test]
fn fuel_is_spent_once_per_loop_header() {
    let endless = r#"(module (memory (export "memory") 1)
      (func (export "kernel")
        (i32.store (i32.const 0) (i32.const 1))
        (loop $spin (br $spin))))"#;
    let (wasm, outcome, memory, _) = run_alone(endless, &[], 10);
    let offset = offset_of(&wasm, 0, |op| matches!(op, Operator::Loop { .. }));
    assert_eq!(
        outcome,
        Outcome::Trapped {
            trap: KernelTrap::OutOfFuel,
            offset
        }
    );
    assert_eq!(memory[0], 1, "work before the loop stays done");

    // A loop whose header runs n times (n - 1 back edges) needs exactly n,
    // plus one per header of the loops before it.
    let counted = r#"(module (memory (export "memory") 1)
      (func (export "kernel") (param $n i32)
        (loop $once)
        (loop $again
          (local.set $n (i32.sub (local.get $n) (i32.const 1)))
          (br_if $again (local.get $n)))
        (i32.store (i32.const 8) (i32.const 9))))"#;
    for n in [1u64, 2, 5, 100] {
        let (_, enough, memory, _) = run_alone(counted, &[Arg(I32, n)], n as i64 + 1);
        assert_eq!(enough, Outcome::Returned, "n = {n}");
        assert_eq!(memory[8], 9);
        let (wasm, short, _, _) = run_alone(counted, &[Arg(I32, n)], n as i64);
        let offset = offset_of(&wasm, 1, |op| matches!(op, Operator::Loop { .. }));
        assert_eq!(
            short,
            Outcome::Trapped {
                trap: KernelTrap::OutOfFuel,
                offset
            },
            "n = {n}"
        );
    }
}

/// A loop run a constant number of times (counted down from 5, as LLVM
/// makes one) is charged its 5 fuel on entry: its header neither tests
/// fuel nor reads the clock; with 5 fuel (plus the first loop's 1) it
/// runs, with less it traps out of fuel at its header before its first
/// iteration. A loop counted from a parameter keeps its checks (and gets
/// a versioned copy).
#[test]
fn a_counted_loop_is_charged_on_entry() {
    let counted = r#"(module (memory (export "memory") 1)
      (func (export "kernel") (param $n i32) (local $c i32)
        (loop $once)
        (local.set $c (i32.const 5))
        (loop $again
          (i32.store (i32.shl (local.get $c) (i32.const 2)) (local.get $c))
          (local.set $c (i32.sub (local.get $c) (i32.const 1)))
          (br_if $again (local.get $c)))
        (i32.store (i32.const 40) (i32.const 9))))"#;
    let clif = clif_of(counted);
    // The first loop's fuel test and the counted loop's entry check; the
    // virtual block's and the first loop's time checks.
    assert_eq!(traps(&clif, "trapz", KernelTrap::OutOfFuel), 1, "{clif}");
    assert_eq!(traps(&clif, "trapnz", KernelTrap::OutOfFuel), 1, "{clif}");
    assert_eq!(traps(&clif, "trapnz", KernelTrap::TimeLimit), 2, "{clif}");
    let (_, enough, memory, _) = run_alone(counted, &[Arg(I32, 0)], 6);
    assert_eq!(enough, Outcome::Returned);
    for c in 1..=5u8 {
        assert_eq!(memory[4 * usize::from(c)], c, "iteration {c}");
    }
    assert_eq!(memory[40], 9);
    let (wasm, short, memory, _) = run_alone(counted, &[Arg(I32, 0)], 5);
    let offset = offset_of(&wasm, 1, |op| matches!(op, Operator::Loop { .. }));
    assert_eq!(
        short,
        Outcome::Trapped {
            trap: KernelTrap::OutOfFuel,
            offset
        }
    );
    assert_eq!(memory[20], 0x80 | 20, "no iteration ran");

    // Counted from a parameter, the loop keeps its checks, and gets a
    // versioned copy (`version.rs`) that reads the clock too, and its
    // unrolled chain (`unroll.rs`) that reads it once a chain pass.
    let from_a_parameter = counted.replace("(i32.const 5))", "(local.get $n))");
    let clif = clif_of(&from_a_parameter);
    assert_eq!(traps(&clif, "trapz", KernelTrap::OutOfFuel), 2, "{clif}");
    assert_eq!(traps(&clif, "trapnz", KernelTrap::TimeLimit), 5, "{clif}");
}

/// The byte offset of the module's only function body: where a trap of the
/// kernel's entry check points.
fn body_offset(wasm: &[u8]) -> u32 {
    let mut bodies = Parser::new(0)
        .parse_all(wasm)
        .filter_map(|p| match p.expect("parse") {
            Payload::CodeSectionEntry(body) => Some(body.range().start as u32),
            _ => None,
        });
    let offset = bodies.next().expect("a function body");
    assert!(bodies.next().is_none(), "one function body");
    offset
}

/// Counts its iterations at byte 0 and never ends on its own.
const ENDLESS_COUNTER: &str = r#"(module (memory (export "memory") 1)
  (func (export "kernel") (local $n i32)
    (loop $spin
      (local.set $n (i32.add (local.get $n) (i32.const 1)))
      (i32.store (i32.const 0) (local.get $n))
      (br $spin))))"#;

fn run_launch(wat: &str, fuel: i64, launch: &mut Launch) -> (Vec<u8>, Outcome, Vec<u8>) {
    let wasm = wat::parse_str(wat).expect("wat");
    let kernel = translate(&wasm);
    let mut memory = vec![0u8; PAGE];
    let outcome = interpret_launch(&kernel, &[], &mut memory, fuel, launch);
    (wasm, outcome, memory)
}

fn counter(memory: &[u8]) -> u64 {
    u64::from(u32::from_le_bytes(memory[..4].try_into().expect("4 bytes")))
}

#[test]
fn time_limit_ends_an_endless_loop_at_a_header() {
    // Fuel enough for 2^40 iterations; 200_000 interpreter steps of time.
    let mut launch = Launch::limited(200_000);
    let (wasm, outcome, memory) = run_launch(ENDLESS_COUNTER, PLENTY, &mut launch);
    let offset = offset_of(&wasm, 0, |op| matches!(op, Operator::Loop { .. }));
    assert_eq!(
        outcome,
        Outcome::Trapped {
            trap: KernelTrap::TimeLimit,
            offset
        }
    );
    // The thread's start, then every header: the body ran once after each
    // header but the last.
    let reads = &launch.clock_reads;
    assert_eq!(reads.len() as u64, 1 + counter(&memory) + 1);
    let start = reads[0];
    let [.., before, last] = reads[..] else {
        unreachable!()
    };
    assert!(last - start > 200_000);
    assert!(before - start <= 200_000);
}

#[test]
fn without_a_time_limit_fuel_ends_the_loop_as_before() {
    let fuel: u64 = 10_000;
    let mut launch = Launch::unlimited();
    let (wasm, outcome, memory) = run_launch(ENDLESS_COUNTER, fuel as i64, &mut launch);
    let offset = offset_of(&wasm, 0, |op| matches!(op, Operator::Loop { .. }));
    assert_eq!(
        outcome,
        Outcome::Trapped {
            trap: KernelTrap::OutOfFuel,
            offset
        }
    );
    // Headers 1..=fuel ran (the body after each), header fuel + 1 trapped
    // out of fuel before it read the clock.
    assert_eq!(counter(&memory), fuel);
    assert_eq!(launch.clock_reads.len() as u64, 1 + fuel);
}

/// A thread's first virtual block runs without a time check (no time has
/// passed); before its next one the thread checks its time.
#[test]
fn a_thread_out_of_time_stops_before_its_next_block_runs() {
    let add_seven = r#"(module (memory (export "memory") 1)
      (func (export "kernel")
        (i32.store (i32.const 0) (i32.add (i32.load (i32.const 0)) (i32.const 7)))))"#;
    let wasm = wat::parse_str(add_seven).expect("wat");
    // The thread's virtual block (linear index `linear` of `total`), then
    // the last one: a physical grid of `total - 1 - linear` blocks.
    let at = |which: Intrinsic| i64::from(INTRINSIC_VALUES[which.index()]);
    let (gx, gy, gz) = (
        at(Intrinsic::GridDimX),
        at(Intrinsic::GridDimY),
        at(Intrinsic::GridDimZ),
    );
    let linear =
        at(Intrinsic::BlockIdxX) + gx * (at(Intrinsic::BlockIdxY) + gy * at(Intrinsic::BlockIdxZ));
    let two_blocks = |limit: u64| Launch {
        physical: Some(gx * gy * gz - 1 - linear),
        ..Launch::limited(limit)
    };
    // A limit of 0: by the second block's start, the thread's clock has
    // moved; the first block ran.
    let mut launch = two_blocks(0);
    let (_, outcome, memory) = run_launch(add_seven, PLENTY, &mut launch);
    assert_eq!(
        outcome,
        Outcome::Trapped {
            trap: KernelTrap::TimeLimit,
            offset: body_offset(&wasm),
        }
    );
    assert_eq!(
        counter(&memory),
        7,
        "the first block ran, the second did not"
    );
    assert_eq!(launch.clock_reads.len(), 2);
    let mut launch = two_blocks(1000);
    let (_, outcome, memory) = run_launch(add_seven, PLENTY, &mut launch);
    assert_eq!(outcome, Outcome::Returned);
    assert_eq!(counter(&memory), 14);
    // One block per thread: no check but at the start, even at limit 0.
    let mut launch = Launch::limited(0);
    let (_, outcome, memory) = run_launch(add_seven, PLENTY, &mut launch);
    assert_eq!(outcome, Outcome::Returned);
    assert_eq!(counter(&memory), 7);
    assert_eq!(launch.clock_reads.len(), 1);
}

#[test]
fn only_the_clock_is_called_and_no_check_rejoins_the_loop() {
    let wasm = wat::parse_str(ENDLESS_COUNTER).expect("wat");
    let kernel = translate(&wasm);
    let func = &kernel.function;
    let mut calls = Vec::new();
    for block in func.layout.blocks() {
        for inst in func.layout.block_insts(block) {
            if func.dfg.insts[inst].opcode().is_call() {
                calls.push(RuntimeCheck::called_by(func, inst).expect("a runtime check"));
            }
        }
    }
    // The thread's start, the loop header (the body never ends: no
    // later virtual block).
    assert_eq!(calls, [RuntimeCheck::Clock; 2]);
    // Checks are conditional traps, not branches to blocks that come back.
    assert_eq!(
        func.layout
            .blocks()
            .filter(|&b| func.layout.is_cold(b))
            .count(),
        0
    );
}

// ---------------------------------------------------------------------------
// The translation's interface
// ---------------------------------------------------------------------------

#[test]
fn names_params_and_abi() {
    let wasm = wat::parse_str(
        r#"(module
          (import "tensorwasm_kernel" "thread_idx_x" (func (result i32)))
          (memory 1)
          (func (param f32 i64))
          (func (export "saxpy") (export "other") (param i32 f64)))"#,
    )
    .unwrap();
    let anonymous = translate_kernel(&wasm, 1).unwrap();
    assert_eq!(anonymous.name, "kernel_1");
    assert_eq!(anonymous.params, [WasmType::F32, WasmType::I64]);
    assert_eq!(anonymous.abi, KernelAbi { wasm_params: 2 });
    let named = translate_kernel(&wasm, 2).unwrap();
    assert_eq!(named.name, "saxpy");
    assert_eq!(named.params, [WasmType::I32, WasmType::F64]);
    check_shape(&named);
    let params = &named.function.signature.params;
    assert_eq!(params.len(), 2 + KernelAbi::HIDDEN_PARAMS);
    for i in 0..KernelAbi::INTRINSICS {
        assert_eq!(
            params[named.abi.hidden(i)].value_type,
            cranelift_codegen::ir::types::I64
        );
    }
    for which in Intrinsic::ALL {
        assert_eq!(
            params[named.abi.intrinsic(which)].value_type,
            cranelift_codegen::ir::types::I32
        );
    }
}

fn invalid(wasm: &[u8], index: u32) -> String {
    match translate_kernel(wasm, index) {
        Err(LowerError::Invalid(why)) => why,
        other => panic!("expected Invalid, got {other:?}"),
    }
}

#[test]
fn non_kernels_and_invalid_modules_are_invalid() {
    let wasm = wat::parse_str(
        r#"(module
          (import "env" "f" (func))
          (func (result i32) (i32.const 1))
          (func (param v128))
          (func))"#,
    )
    .unwrap();
    assert!(
        invalid(&wasm, 0).contains("import"),
        "{}",
        invalid(&wasm, 0)
    );
    assert!(invalid(&wasm, 1).contains("returns"));
    assert!(invalid(&wasm, 2).contains("v128"));
    assert!(invalid(&wasm, 9).contains("no function 9"));
    invalid(b"\0asm\x01\0\0\0\x07garbage", 0);
    invalid(b"not wasm at all", 0);

    // A reached body that does not validate (i32.add of an f32).
    let bad = wat::parse_str(
        r#"(module (func $helper (result i32) (i32.const 1))
           (func (export "kernel") (drop (call $helper)) (drop (i32.const 0))))"#,
    )
    .unwrap();
    // Patch `i32.const 0` (0x41 0x00) in the kernel into `f32.const`-less
    // garbage that parses but does not type-check: `i32.eqz` with an empty
    // stack (0x45 0x01 = eqz, nop).
    let mut broken = bad.clone();
    let at = broken
        .windows(3)
        .rposition(|w| w == [0x41, 0x00, 0x1a])
        .expect("the kernel's i32.const 0; drop");
    broken[at] = 0x45;
    broken[at + 1] = 0x01;
    let why = invalid(&broken, 1);
    assert!(
        why.contains("type mismatch") || why.contains("operand"),
        "{why}"
    );
    // A function the kernel does not reach is not validated (wasmtime
    // would still refuse the module when the guest is instantiated).
    assert!(translate_kernel(&bad, 1).is_ok());
}

// ---------------------------------------------------------------------------
// The detector
// ---------------------------------------------------------------------------

fn refused(wat: &str) -> (Vec<u8>, tensorwasm_core::lower::UnsupportedOp) {
    let wasm = wat::parse_str(wat).unwrap_or_else(|e| panic!("{e}\n{wat}"));
    match translate_kernel(&wasm, export_index(&wasm, "kernel")) {
        Err(LowerError::Unsupported(op)) => (wasm, op),
        other => panic!("expected a refusal, got {other:?}\n{wat}"),
    }
}

#[test]
fn detector_refuses_each_construct_at_its_offset() {
    type Pick = fn(&Operator<'_>) -> bool;
    let rows: Vec<(&str, &str, &str, Pick)> = vec![
        (
            "call_indirect",
            r#"(import "env" "t" (table 1 funcref)) (type $t (func))"#,
            "(call_indirect (type $t) (i32.const 0))",
            |op| matches!(op, Operator::CallIndirect { .. }),
        ),
        (
            "call_indirect",
            "(table $t 1 funcref) (type $ty (func)) (func $f) (elem (i32.const 0) $f) \
             (func $mutate (table.set $t (i32.const 0) (ref.null func)))",
            "(call_indirect (type $ty) (i32.const 0))",
            |op| matches!(op, Operator::CallIndirect { .. }),
        ),
        (
            "call_indirect",
            r#"(import "env" "f" (func $imp)) (type $ty (func)) (table 1 funcref)
               (elem (i32.const 0) $imp)"#,
            "(call_indirect (type $ty) (i32.const 0))",
            |op| matches!(op, Operator::CallIndirect { .. }),
        ),
        ("return_call", "(func $f)", "(return_call $f)", |op| {
            matches!(op, Operator::ReturnCall { .. })
        }),
        (
            "call",
            r#"(import "env" "log" (func $log (param i32)))"#,
            "(call $log (i32.const 1))",
            |op| matches!(op, Operator::Call { .. }),
        ),
        (
            "global.set",
            r#"(import "env" "g" (global $g (mut i32)))"#,
            "(global.set $g (i32.const 1))",
            |op| matches!(op, Operator::GlobalSet { .. }),
        ),
        (
            "global.get",
            r#"(import "env" "g" (global $g i32))"#,
            "(drop (global.get $g))",
            |op| matches!(op, Operator::GlobalGet { .. }),
        ),
        (
            "memory.grow",
            "",
            "(drop (memory.grow (i32.const 1)))",
            |op| matches!(op, Operator::MemoryGrow { .. }),
        ),
        (
            "memory.init",
            r#"(data $d "hello")"#,
            "(memory.init $d (i32.const 0) (i32.const 0) (i32.const 5))",
            |op| matches!(op, Operator::MemoryInit { .. }),
        ),
        (
            "data.drop",
            r#"(data $d "hello")"#,
            "(data.drop $d)",
            |op| matches!(op, Operator::DataDrop { .. }),
        ),
        (
            "table.size",
            "(table 1 funcref)",
            "(drop (table.size))",
            |op| matches!(op, Operator::TableSize { .. }),
        ),
        ("ref.null", "", "(drop (ref.null func))", |op| {
            matches!(op, Operator::RefNull { .. })
        }),
        (
            "ref.func",
            "(func $f) (elem declare func $f)",
            "(drop (ref.func $f))",
            |op| matches!(op, Operator::RefFunc { .. }),
        ),
        // Atomics are supported (docs/kernels.md, "Atomics"), but a kernel
        // thread may not wait or wake.
        (
            "memory.atomic.notify",
            "",
            "(drop (memory.atomic.notify (i32.const 0) (i32.const 1)))",
            |op| matches!(op, Operator::MemoryAtomicNotify { .. }),
        ),
        (
            "memory.atomic.wait32",
            "",
            "(drop (memory.atomic.wait32 (i32.const 0) (i32.const 0) (i64.const -1)))",
            |op| matches!(op, Operator::MemoryAtomicWait32 { .. }),
        ),
        ("throw", "(tag $e)", "(throw $e)", |op| {
            matches!(op, Operator::Throw { .. })
        }),
        ("try_table", "", "try_table nop end", |op| {
            matches!(op, Operator::TryTable { .. })
        }),
    ];
    for (name, decls, body, pick) in rows {
        let wat = format!(
            r#"(module {decls} (memory (export "memory") 1)
              (func (export "kernel") (i32.store (i32.const 0) (i32.const 1)) {body}))"#
        );
        let (wasm, op) = refused(&wat);
        assert_eq!(op.op, name, "{wat}: {op}");
        assert_eq!(
            op.offset,
            u64::from(offset_of(&wasm, 0, pick)),
            "{wat}: {op}"
        );
        assert!(!op.reason.is_empty());
    }
}

#[test]
fn detector_refuses_recursion_and_walks_callees() {
    // Self-recursion, found at the recursive call.
    let (wasm, op) = refused(
        r#"(module (memory (export "memory") 1)
          (func $f (param i32) (if (local.get 0) (then (call $f (i32.const 0)))))
          (func (export "kernel") (call $f (i32.const 1))))"#,
    );
    assert_eq!(op.op, "call (recursion)");
    assert_eq!(
        op.offset,
        u64::from(offset_of(&wasm, 0, |op| matches!(
            op,
            Operator::Call { .. }
        )))
    );

    // Mutual recursion a -> b -> a: the call in b closes the cycle.
    let (wasm, op) = refused(
        r#"(module (memory (export "memory") 1)
          (func $a (call $b))
          (func $b (call $a))
          (func (export "kernel") (call $a)))"#,
    );
    assert_eq!(op.op, "call (recursion)");
    assert_eq!(
        op.offset,
        u64::from(offset_of(&wasm, 1, |op| matches!(
            op,
            Operator::Call { .. }
        )))
    );

    // A refused operator two calls down, after an allowed one.
    let (wasm, op) = refused(
        r#"(module (memory (export "memory") 1)
          (func $leaf (drop (memory.grow (i32.const 1))))
          (func $mid (nop) (call $leaf))
          (func (export "kernel") (call $mid)))"#,
    );
    assert_eq!(op.op, "memory.grow");
    assert_eq!(
        op.offset,
        u64::from(offset_of(&wasm, 0, |op| matches!(
            op,
            Operator::MemoryGrow { .. }
        )))
    );

    // The first refused operator wins, in program order; dead code counts.
    let (wasm, op) = refused(
        r#"(module (memory (export "memory") 1) (global $g (mut i32) (i32.const 0))
          (func (export "kernel") (return) (data.drop 0) (drop (memory.grow (i32.const 1))))
          (data "x"))"#,
    );
    assert_eq!(op.op, "data.drop");
    assert_eq!(
        op.offset,
        u64::from(offset_of(&wasm, 0, |op| matches!(
            op,
            Operator::DataDrop { .. }
        )))
    );

    // Recursion through a table: every function of the call's type in the
    // table is a callee.
    let (wasm, op) = refused(
        r#"(module (memory (export "memory") 1) (type $ty (func (param i32)))
          (table 2 funcref) (elem (i32.const 0) $a $b)
          (func $a (type $ty) (call_indirect (type $ty) (local.get 0) (local.get 0)))
          (func $b (type $ty))
          (func (export "kernel") (call $a (i32.const 1))))"#,
    );
    assert_eq!(op.op, "call_indirect (recursion)");
    assert_eq!(
        op.offset,
        u64::from(offset_of(&wasm, 0, |op| matches!(
            op,
            Operator::CallIndirect { .. }
        )))
    );

    // Helpers that the kernel does not call may use anything.
    let wasm = wat::parse_str(
        r#"(module (memory (export "memory") 1) (global $g (mut i32) (i32.const 0))
          (func $other (drop (memory.grow (i32.const 1))) (call $other))
          (func (export "kernel") (i32.store (i32.const 0) (i32.const 1))))"#,
    )
    .unwrap();
    translate(&wasm);
}

#[test]
fn detector_refuses_simd_multi_memory_and_memory64() {
    // SIMD is lowered (`docs/kernels.md`, "SIMD"; `tests/simd.rs`), v128
    // locals too; relaxed SIMD is refused, at its offset.
    let wasm = wat::parse_str(
        r#"(module (memory (export "memory") 1)
          (func (export "kernel") (local v128)
            (v128.store (i32.const 0) (i32x4.add (v128.const i32x4 1 2 3 4) (v128.const i32x4 1 1 1 1)))))"#,
    )
    .unwrap();
    translate(&wasm);
    let (wasm, op) = refused(
        r#"(module (memory (export "memory") 1)
          (func (export "kernel")
            (v128.store (i32.const 0) (f32x4.relaxed_madd (v128.const i32x4 1 2 3 4)
              (v128.const i32x4 1 1 1 1) (v128.const i32x4 0 0 0 0)))))"#,
    );
    assert_eq!(op.op, "f32x4.relaxed_madd");
    assert!(op.reason.contains("relaxed SIMD"), "{op}");
    assert_eq!(
        op.offset,
        u64::from(offset_of(&wasm, 0, |op| matches!(
            op,
            Operator::F32x4RelaxedMadd
        )))
    );

    // A SIMD opcode no wasmparser decodes (0xfd 0x7ff, in place of three
    // `nop`s): refused as SIMD, not invalid.
    let mut wasm = wat::parse_str(
        r#"(module (memory (export "memory") 1)
          (func (export "kernel") (nop) (nop) (nop) (i32.store (i32.const 0) (i32.const 1))))"#,
    )
    .unwrap();
    let nop = offset_of(&wasm, 0, |op| matches!(op, Operator::Nop)) as usize;
    wasm[nop..nop + 3].copy_from_slice(&[0xfd, 0xff, 0x0f]);
    match translate_kernel(&wasm, export_index(&wasm, "kernel")) {
        Err(LowerError::Unsupported(op)) => {
            assert_eq!(op.offset, nop as u64);
            assert!(op.reason.contains("SIMD"), "{op}");
        }
        other => panic!("expected a SIMD refusal, got {other:?}"),
    }

    // A mutable v128 global that the module sets: the thread's copy of its
    // four words (`tests/simd.rs` runs one against wasmtime).
    let wasm = wat::parse_str(
        r#"(module (memory (export "memory") 1) (global $g (mut v128) (v128.const i64x2 0 0))
          (func (export "kernel") (global.set $g (v128.const i64x2 1 1))))"#,
    )
    .unwrap();
    let lanes: Vec<_> = translate(&wasm).globals.iter().map(|g| g.lane).collect();
    assert_eq!(lanes, [Some(0), Some(1), Some(2), Some(3)]);
    // A mutable reference global: kernels copy numeric globals only.
    let (_, op) = refused(
        r#"(module (memory (export "memory") 1) (global $r (mut funcref) (ref.null func))
          (func (export "kernel") (global.set $r (global.get $r))))"#,
    );
    assert!(op.op.starts_with("global."), "{op}");
    assert!(op.reason.contains("reference"), "{op}");

    // Relaxed SIMD in a function the kernel does not call is fine.
    let wasm = wat::parse_str(
        r#"(module (memory (export "memory") 1)
          (func $relaxed (result v128) (f32x4.relaxed_min (v128.const i64x2 0 0) (v128.const i64x2 0 0)))
          (func (export "kernel") (i32.store (i32.const 0) (i32.const 1))))"#,
    )
    .unwrap();
    translate(&wasm);

    // Memory 1 (multi-memory).
    let (wasm, op) = refused(
        r#"(module (memory (export "memory") 1) (memory $m1 1)
          (func (export "kernel") (drop (i32.load $m1 (i32.const 0)))))"#,
    );
    assert_eq!(op.op, "i32.load");
    assert!(op.reason.contains("multi-memory"), "{op}");
    assert_eq!(
        op.offset,
        u64::from(offset_of(&wasm, 0, |op| matches!(
            op,
            Operator::I32Load { .. }
        )))
    );

    // memory64.
    let (wasm, op) = refused(
        r#"(module (memory (export "memory") i64 1)
          (func (export "kernel") (i64.store (i64.const 8) (i64.const 1))))"#,
    );
    assert_eq!(op.op, "i64.store");
    assert!(op.reason.contains("memory64"), "{op}");
    assert_eq!(
        op.offset,
        u64::from(offset_of(&wasm, 0, |op| matches!(
            op,
            Operator::I64Store { .. }
        )))
    );
}

#[test]
fn detector_bounds_inlining() {
    // Each level calls the next one twice: 2^30 copies of the leaf.
    let mut wat = String::from(r#"(module (memory (export "memory") 1) (func $f0 (nop))"#);
    for i in 1..=30 {
        wat.push_str(&format!(
            "(func $f{i} (call $f{p}) (call $f{p}))",
            p = i - 1
        ));
    }
    wat.push_str(r#"(func (export "kernel") (call $f30)))"#);
    let wasm = wat::parse_str(&wat).unwrap();
    match translate_kernel(&wasm, export_index(&wasm, "kernel")) {
        Err(LowerError::TooLarge(op)) => {
            assert!(
                op.reason.contains("more than 65536 Wasm operators"),
                "{op:?}"
            );
        }
        other => panic!("expected TooLarge, got {other:?}"),
    }

    // A chain of calls deeper than the limit.
    let mut wat = String::from(r#"(module (memory (export "memory") 1) (func $f0 (nop))"#);
    for i in 1..=100 {
        wat.push_str(&format!("(func $f{i} (call $f{p}))", p = i - 1));
    }
    wat.push_str(r#"(func (export "kernel") (call $f100)))"#);
    let (_, op) = refused(&wat);
    assert!(op.reason.contains("deeper"), "{op}");
}

// ---------------------------------------------------------------------------
// What compilers emit: globals, the shadow stack, bulk memory, call_indirect
// ---------------------------------------------------------------------------

/// Runs export `kernel` of `wat` once on a fresh wasmtime instance and in
/// the interpreter, from `memory`, the globals' launch values read off the
/// instance (the module exports each mutable global as `g<index>`), once
/// as the kernel for every launch and once as the variant the host
/// launches ([`Kernels`]). The kernel's stack window is zeroed in the
/// input (so frames read the same on both sides) and left out of the
/// comparison (the frames are the thread's own); every other byte and the
/// outcome must match. Returns the outcome and the memory after the run.
fn differential(wat: &str, args: &[Arg], memory: &[u8]) -> (Outcome, Vec<u8>) {
    let wasm = wat::parse_str(wat).unwrap_or_else(|e| panic!("{e}\n{wat}"));
    let kernels = Kernels::new(&wasm);
    let kernel = &kernels.any;
    let mut reference = Reference::new(&wasm);
    let globals: Vec<Arg> = kernel
        .globals
        .iter()
        .map(|g| reference.kernel_global(g))
        .collect();
    let window = kernel.stack_window.map(|w| {
        let at = kernel
            .globals
            .iter()
            .position(|g| g.index == w.global)
            .expect("the stack pointer is a kernel global");
        let sp = globals[at].1 as usize;
        sp.saturating_sub(w.bytes as usize)..sp
    });
    let mut input = memory.to_vec();
    if let Some(w) = &window {
        input[w.clone()].fill(0);
    }
    let mut expected_memory = input.clone();
    let expected = reference.run(args, &mut expected_memory);
    if let Some(w) = &window {
        expected_memory[w.clone()].fill(0);
    }
    let params: Vec<Arg> = args.iter().chain(&globals).copied().collect();
    let mut after = Vec::new();
    for kernel in kernels.for_launch(&params, memory.len()) {
        let name = variant_name(kernel.variant);
        assert_eq!(kernel.globals, kernels.any.globals, "{name}: the globals");
        assert_eq!(kernel.stack_window, kernels.any.stack_window, "{name}");
        let mut actual_memory = input.clone();
        let mut launch = Launch::unlimited();
        launch.globals = globals.clone();
        let actual = interpret_launch(kernel, args, &mut actual_memory, PLENTY, &mut launch);
        assert_eq!(actual, expected, "{name}: args {args:?}\n{wat}");
        if let Some(w) = &window {
            actual_memory[w.clone()].fill(0);
        }
        if expected_memory != actual_memory
            && let Some(at) = (0..memory.len()).find(|&i| expected_memory[i] != actual_memory[i])
        {
            let from = at & !7;
            panic!(
                "{name}: args {args:?}: memory differs at {at:#x}: wasmtime {:02x?}, CLIF \
                 {:02x?}\n{wat}",
                &expected_memory[from..from + 8],
                &actual_memory[from..from + 8]
            );
        }
        after = actual_memory;
    }
    (expected, after)
}

fn random_page(rng: &mut Rng) -> Vec<u8> {
    (0..PAGE).map(|_| rng.next() as u8).collect()
}

/// The shape LLVM gives a Rust function with a stack frame: the kernel
/// opens a frame, a callee opens its own below it and fills an array
/// there, the kernel sums the array through a dynamically indexed loop
/// and copies a frame struct out with `memory.copy`; a second mutable
/// global counts calls.
const FRAMES: &str = r#"(module
  (import "tensorwasm_kernel" "thread_idx_x" (func $tid (result i32)))
  (memory (export "memory") 1)
  (global $__stack_pointer (export "g0") (mut i32) (i32.const 8192))
  (global $calls (export "g1") (mut i32) (i32.const 40))
  (func $fill (param $p i32) (param $n i32) (param $seed i32)
    (local $sp i32) (local $i i32)
    (global.set $__stack_pointer
      (local.tee $sp (i32.sub (global.get $__stack_pointer) (i32.const 16))))
    (i32.store offset=12 (local.get $sp) (local.get $seed))
    (block $done (loop $next
      (br_if $done (i32.ge_u (local.get $i) (local.get $n)))
      (i32.store (i32.add (local.get $p) (i32.shl (local.get $i) (i32.const 2)))
        (i32.mul (i32.load offset=12 (local.get $sp))
                 (i32.add (local.get $i) (i32.const 1))))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br $next)))
    (global.set $calls (i32.add (global.get $calls) (i32.const 1)))
    (global.set $__stack_pointer (i32.add (local.get $sp) (i32.const 16))))
  (func (export "kernel") (param $out i32) (param $n i32) (param $seed i32)
    (local $sp i32) (local $i i32) (local $sum i32)
    (global.set $__stack_pointer
      (local.tee $sp (i32.sub (global.get $__stack_pointer) (i32.const 64))))
    (call $fill (i32.add (local.get $sp) (i32.const 16)) (local.get $n) (local.get $seed))
    (block $done (loop $next
      (br_if $done (i32.ge_u (local.get $i) (local.get $n)))
      (local.set $sum (i32.add (local.get $sum)
        (i32.load offset=16 (i32.add (local.get $sp) (i32.shl (local.get $i) (i32.const 2))))))
      (local.set $i (i32.add (local.get $i) (i32.const 1)))
      (br $next)))
    (i32.store (local.get $sp) (local.get $sum))
    (i32.store offset=4 (local.get $sp) (global.get $calls))
    (i32.store offset=8 (local.get $sp) (global.get $__stack_pointer))
    (memory.copy (local.get $out) (local.get $sp) (i32.const 12))
    (global.set $__stack_pointer (i32.add (local.get $sp) (i32.const 64)))))"#;

#[test]
fn shadow_stack_frames_and_globals_match_wasmtime() {
    let wasm = wat::parse_str(FRAMES).unwrap();
    let kernel = translate(&wasm);
    let window = kernel.stack_window.expect("a stack window");
    assert_eq!(window.global, 0, "the name section's __stack_pointer");
    assert!(
        window.bytes >= 80 && window.bytes.is_multiple_of(16),
        "{window:?}"
    );
    assert_eq!(
        kernel.globals.iter().map(|g| g.index).collect::<Vec<_>>(),
        vec![0, 1]
    );
    // The frames' accesses at constant offsets from the stack pointer go
    // straight to the slot (a `stack_addr` with the offset), not through
    // the window-or-memory select: the kernel's own frame stores and loads,
    // and $fill's store of its seed.
    // (The entry block's are the window's zeroing.)
    let entry = kernel.function.layout.entry_block();
    let direct = kernel
        .function
        .layout
        .blocks()
        .filter(|&b| Some(b) != entry)
        .flat_map(|b| kernel.function.layout.block_insts(b))
        .filter(|&i| {
            matches!(
                kernel.function.dfg.insts[i],
                InstructionData::StackAddr { offset, .. } if i32::from(offset) > 0
            )
        })
        .count();
    assert!(
        direct >= 5,
        "{direct} accesses resolved to the slot\n{}",
        kernel.function
    );
    let mut rng = rng("frames");
    for n in 0..=12u64 {
        let memory = random_page(&mut rng);
        let seed = rng.next() as u32 as u64;
        let out = 256 + 16 * rng.below(100);
        let (outcome, after) = differential(
            FRAMES,
            &[Arg(I32, out), Arg(I32, n), Arg(I32, seed)],
            &memory,
        );
        assert_eq!(outcome, Outcome::Returned);
        let word =
            |at: u64| u32::from_le_bytes(after[at as usize..at as usize + 4].try_into().unwrap());
        let sum = (1..=n as u32).fold(0u32, |s, i| s.wrapping_add((seed as u32).wrapping_mul(i)));
        assert_eq!(word(out), sum, "n {n}");
        assert_eq!(word(out + 4), 41, "the thread's copy of $calls");
        assert_eq!(word(out + 8), 8192 - 64, "the thread's stack pointer");
    }
    // An access into the window from a kernel argument is the thread's
    // too: it never reaches the guest's bytes there.
    let mut memory = random_page(&mut rng);
    memory[8192 - 64..8192].fill(0);
    let mut launch = Launch::unlimited();
    launch.globals = vec![Arg(I32, 8192), Arg(I32, 40)];
    let out = 8192 - 32; // inside the window: the copy lands in the frame
    let before = memory.clone();
    let outcome = interpret_launch(
        &kernel,
        &[Arg(I32, out), Arg(I32, 3), Arg(I32, 7)],
        &mut memory,
        PLENTY,
        &mut launch,
    );
    assert_eq!(outcome, Outcome::Returned);
    assert_eq!(memory, before, "a window write reached guest memory");
}

/// A frame at constant offsets only (so a small one lives in registers)
/// written and read at every width, beside accesses through two kernel
/// arguments, `$p` (stores, `memory.fill`) and `$q` (loads), that land in
/// the window when they point there; `memory.copy` of the frame out.
/// `{frame}` is the frame's size.
fn frame_words(frame: u32) -> String {
    format!(
        r#"(module
  (memory (export "memory") 1)
  (global $__stack_pointer (export "g0") (mut i32) (i32.const 8192))
  (func (export "kernel") (param $p i32) (param $q i32) (param $v i64) (param $out i32)
    (local $sp i32)
    (global.set $__stack_pointer
      (local.tee $sp (i32.sub (global.get $__stack_pointer) (i32.const {frame}))))
    (i64.store (local.get $sp) (local.get $v))
    (i32.store offset=8 (local.get $sp) (i32.wrap_i64 (i64.rotl (local.get $v) (i64.const 17))))
    (i32.store16 offset=12 (local.get $sp) (i32.const 0xbeef))
    (i32.store8 offset=14 (local.get $sp) (i32.const 0x9c))
    (i64.store8 offset=15 (local.get $sp) (i64.const -2))
    (f32.store offset=16 (local.get $sp) (f32.const -1.5))
    (i64.store32 offset=20 (local.get $sp) (local.get $v))
    (f64.store offset=24 (local.get $sp) (f64.const 3.25))
    (i32.store (local.get $p) (i32.const 0x12345678))
    (i32.store8 offset=5 (local.get $p) (i32.const 0xa7))
    (i64.store (local.get $out) (i64.load (local.get $sp)))
    (i32.store offset=8 (local.get $out) (i32.load8_s offset=14 (local.get $sp)))
    (i32.store offset=12 (local.get $out) (i32.load16_u offset=12 (local.get $sp)))
    (i64.store offset=16 (local.get $out) (i64.load32_s offset=20 (local.get $sp)))
    (f32.store offset=24 (local.get $out) (f32.load offset=16 (local.get $sp)))
    (f64.store offset=32 (local.get $out) (f64.load offset=24 (local.get $sp)))
    (i64.store offset=40 (local.get $out) (i64.load8_u offset=15 (local.get $sp)))
    (i32.store offset=48 (local.get $out) (i32.load16_s offset=12 (local.get $sp)))
    (i32.store offset=52 (local.get $out) (i32.load (local.get $q)))
    (i64.store offset=56 (local.get $out) (i64.load offset=2 (local.get $q)))
    (i32.store offset=64 (local.get $out) (i32.load8_s offset=1 (local.get $q)))
    (i32.store offset=68 (local.get $out) (i32.load16_u offset=3 (local.get $q)))
    (f32.store offset=72 (local.get $out) (f32.load offset=4 (local.get $q)))
    (memory.copy (i32.add (local.get $out) (i32.const 80)) (local.get $sp) (i32.const 32))
    (memory.fill (i32.add (local.get $p) (i32.const 1)) (i32.const 0x5a) (i32.const 3))
    (i32.store offset=112 (local.get $out) (i32.load (local.get $sp)))
    (i64.store offset=120 (local.get $out) (i64.load offset=8 (local.get $sp)))
    (global.set $__stack_pointer (i32.add (local.get $sp) (i32.const {frame})))))"#
    )
}

#[test]
fn windows_in_registers_and_in_the_slot_match_wasmtime() {
    // 32 bytes: in registers; 160: in the slot. Either way every access
    // through $p or $q that lies in [8192 - W, 8192) is the thread's frame.
    let mut rng = rng("frame words");
    for (frame, registers) in [(32u32, true), (160, false)] {
        let wat = frame_words(frame);
        let kernel = translate(&wat::parse_str(&wat).unwrap());
        let window = kernel.stack_window.expect("a window");
        assert_eq!(
            window.registers, registers,
            "{frame}-byte frame: {window:?}"
        );
        let low = 8192 - u64::from(frame);
        // $p's accesses span [p, p + 6), $q's [q, q + 10): wholly in the
        // window or wholly out of it.
        let ps = [1024, low, low + 1, low + 3, low + 13, low + 26, 8192, 8200];
        let qs = [2048, low, low + 1, low + 6, low + 15, low + 22, 8192, 8199];
        for (&p, &q) in ps.iter().zip(qs.iter().rev()).chain(ps.iter().zip(&qs)) {
            let v = rng.next();
            let memory = random_page(&mut rng);
            let (outcome, _) = differential(
                &wat,
                &[Arg(I32, p), Arg(I32, q), Arg(I64, v), Arg(I32, 512)],
                &memory,
            );
            assert_eq!(outcome, Outcome::Returned, "frame {frame}, p {p}, q {q}");
        }
    }
}

#[test]
fn a_stack_pointer_below_the_window_traps() {
    // A dynamic alloca the detector cannot size: the window gets a fixed
    // allowance, and a frame past it traps at the `global.set`.
    let wat = r#"(module
      (memory (export "memory") 1)
      (global $__stack_pointer (export "g0") (mut i32) (i32.const 32768))
      (func (export "kernel") (param $n i32) (local $saved i32) (local $p i32)
        (local.set $saved (global.get $__stack_pointer))
        (global.set $__stack_pointer
          (local.tee $p (i32.and (i32.sub (global.get $__stack_pointer) (local.get $n))
                                 (i32.const -16))))
        (i32.store (local.get $p) (i32.const 1))
        (global.set $__stack_pointer (local.get $saved))))"#;
    let wasm = wat::parse_str(wat).unwrap();
    let kernel = translate(&wasm);
    let bytes = kernel.stack_window.expect("a window").bytes;
    assert_eq!(bytes, 256, "the dynamic allowance");
    let mut rng = rng("alloca");
    for n in [0u64, 16, 200, 256] {
        let (outcome, _) = differential(wat, &[Arg(I32, n)], &random_page(&mut rng));
        assert_eq!(outcome, Outcome::Returned, "n {n}");
    }
    let mut memory = random_page(&mut rng);
    let mut launch = Launch::unlimited();
    launch.globals = vec![Arg(I32, 32768)];
    let outcome = interpret_launch(&kernel, &[Arg(I32, 4000)], &mut memory, PLENTY, &mut launch);
    assert_eq!(
        outcome,
        Outcome::Trapped {
            trap: KernelTrap::StackOverflow,
            offset: offset_of(&wasm, 0, |op| matches!(op, Operator::GlobalSet { .. })),
        }
    );
}

#[test]
fn frames_larger_than_the_window_cap_are_too_large() {
    let wat = format!(
        r#"(module (memory (export "memory") 1)
          (global $__stack_pointer (mut i32) (i32.const 65536))
          (func (export "kernel")
            (global.set $__stack_pointer
              (i32.sub (global.get $__stack_pointer) (i32.const {})))))"#,
        tensorwasm_core::lower::translate::MAX_STACK_WINDOW + 16
    );
    let wasm = wat::parse_str(&wat).unwrap();
    match translate_kernel(&wasm, export_index(&wasm, "kernel")) {
        Err(LowerError::TooLarge(op)) => {
            assert!(op.reason.contains("stack frames"), "{op:?}")
        }
        other => panic!("expected TooLarge, got {other:?}"),
    }
}

/// `memory.copy` (`which` 0) or `memory.fill` (1) of the arguments.
const BULK: &str = r#"(module
  (memory (export "memory") 1)
  (func (export "kernel") (param $dst i32) (param $src i32) (param $n i32) (param $which i32)
    (if (local.get $which)
      (then (memory.fill (local.get $dst) (local.get $src) (local.get $n)))
      (else (memory.copy (local.get $dst) (local.get $src) (local.get $n))))))"#;

#[test]
fn bulk_memory_matches_wasmtime() {
    let page = PAGE as u64;
    let mut rng = rng("bulk");
    let mut cases: Vec<(u64, u64, u64)> = vec![
        // Disjoint, aligned and not.
        (0, 1024, 256),
        (4096, 8, 1000),
        (4097, 10, 999),
        // Overlapping both ways, by less than a word and by more.
        (100, 102, 200),
        (102, 100, 200),
        (100, 101, 64),
        (101, 100, 64),
        (200, 100, 400),
        (100, 200, 400),
        (64, 64, 128),
        // Empty, at the end, and one past.
        (0, 0, 0),
        (page, page, 0),
        (page - 16, 0, 16),
        (0, page - 16, 16),
        (page + 1, 0, 0),
        (0, page + 1, 0),
        (page - 15, 0, 16),
        (0, page - 15, 16),
        (0, 0, u32::MAX as u64),
        (u32::MAX as u64, 0, 1),
    ];
    for _ in 0..40 {
        let n = rng.below(600);
        cases.push((rng.below(page - n), rng.below(page - n), n));
    }
    let mut traps = 0;
    for (dst, src, n) in cases {
        for which in [0, 1] {
            let memory = random_page(&mut rng);
            let args = [Arg(I32, dst), Arg(I32, src), Arg(I32, n), Arg(I32, which)];
            let (outcome, _) = differential(BULK, &args, &memory);
            traps += usize::from(outcome != Outcome::Returned);
        }
    }
    assert!(traps >= 8, "the out-of-bounds cases trap ({traps})");
}

/// A table of three functions of two types and a null slot; the kernel
/// calls slot `i` as `(i32, i32) -> i32`.
const INDIRECT: &str = r#"(module
  (memory (export "memory") 1)
  (type $bin (func (param i32 i32) (result i32)))
  (type $un (func (param f32) (result f32)))
  (table 6 funcref)
  (elem (i32.const 0) $add $mul)
  (elem (i32.const 3) $neg $sub $add)
  (func $add (type $bin) (i32.add (local.get 0) (local.get 1)))
  (func $mul (type $bin) (i32.mul (local.get 0) (local.get 1)))
  (func $sub (type $bin) (i32.sub (local.get 0) (local.get 1)))
  (func $neg (type $un) (f32.neg (local.get 0)))
  (func (export "kernel") (param $i i32) (param $x i32) (param $y i32)
    (i32.store (i32.const 256)
      (call_indirect (type $bin) (local.get $x) (local.get $y) (local.get $i)))))"#;

#[test]
fn call_indirect_matches_wasmtime() {
    let wasm = wat::parse_str(INDIRECT).unwrap();
    let at = offset_of(&wasm, 0, |op| matches!(op, Operator::CallIndirect { .. }));
    let mut rng = rng("indirect");
    let expect = |i: u64| match i {
        0 | 4 | 5 => Outcome::Returned,
        1 => Outcome::Returned,
        2 => Outcome::Trapped {
            trap: KernelTrap::IndirectCallToNull,
            offset: at,
        },
        3 => Outcome::Trapped {
            trap: KernelTrap::BadSignature,
            offset: at,
        },
        _ => Outcome::Trapped {
            trap: KernelTrap::TableOutOfBounds,
            offset: at,
        },
    };
    for i in [0u64, 1, 2, 3, 4, 5, 6, 7, 1000, u32::MAX as u64] {
        let args = [
            Arg(I32, i),
            Arg(I32, rng.next() as u32 as u64),
            Arg(I32, rng.next() as u32 as u64),
        ];
        let (outcome, _) = differential(INDIRECT, &args, &random_page(&mut rng));
        assert_eq!(outcome, expect(i), "slot {i}");
    }
}

#[test]
fn kernels_are_named_by_export_and_by_table_slot() {
    use tensorwasm_core::lower::translate::{function_by_export, function_by_table_slot};
    let wasm = wat::parse_str(INDIRECT).unwrap();
    assert_eq!(function_by_export(&wasm, "kernel").unwrap(), 4);
    assert!(matches!(
        function_by_export(&wasm, "nope"),
        Err(LowerError::Invalid(why)) if why.contains("`nope`")
    ));
    assert_eq!(function_by_table_slot(&wasm, 1).unwrap(), 1);
    assert_eq!(function_by_table_slot(&wasm, 5).unwrap(), 0);
    for (slot, says) in [(2, "null"), (6, "past the end"), (u32::MAX, "past the end")] {
        match function_by_table_slot(&wasm, slot) {
            Err(LowerError::Invalid(why)) => assert!(why.contains(says), "{slot}: {why}"),
            other => panic!("slot {slot}: {other:?}"),
        }
    }
    let mutated = wat::parse_str(
        r#"(module (table $t 1 funcref) (func $f) (elem (i32.const 0) $f)
          (func (table.set $t (i32.const 0) (ref.null func))))"#,
    )
    .unwrap();
    match function_by_table_slot(&mutated, 0) {
        Err(LowerError::Invalid(why)) => assert!(why.contains("table.set"), "{why}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn dispatch_over_a_large_table_counts_toward_the_size_limits() {
    // Each `call_indirect` over a 2^16-slot table is a 2^16-entry jump
    // table: two of them pass the host's 2^16 operators.
    let wat = r#"(module (memory (export "memory") 1) (type $t (func))
      (table 65536 funcref) (func $f) (elem (i32.const 0) $f)
      (func (export "kernel") (param i32)
        (call_indirect (type $t) (local.get 0))
        (call_indirect (type $t) (local.get 0))))"#;
    let wasm = wat::parse_str(wat).unwrap();
    match translate_kernel(&wasm, export_index(&wasm, "kernel")) {
        Err(LowerError::TooLarge(op)) => assert_eq!(op.op, "call_indirect", "{op:?}"),
        other => panic!("expected TooLarge, got {other:?}"),
    }
}

/// A shared access whose offset is known to be a multiple of its size
/// (`i << 3` for a `u64`, as the SDK computes it; a sum of such) has no
/// alignment test; one that is not (`i << 2` for a `u64`, a parameter)
/// keeps it. Every access keeps its bounds test (two: the shared load's
/// and the result's store, at a constant address so that the kernel has
/// no copy for aligned arguments).
#[test]
fn shared_alignment_tests_only_where_the_offset_may_be_misaligned() {
    let count = |body: &str| {
        let wat = format!(
            r#"(module
  (import "tensorwasm_kernel" "shared_load_i64" (func $ld (param i32) (result i64)))
  (memory 1)
  (func (export "kernel") (param $i i32) (param $o i32)
    (i64.store (i32.const 64) {body})))"#
        );
        let clif = clif_of(&wat);
        (
            traps(&clif, "trapnz", KernelTrap::HeapMisaligned),
            traps(&clif, "trapnz", KernelTrap::HeapOutOfBounds),
        )
    };
    let shifted = "(call $ld (i32.shl (local.get $i) (i32.const 3)))";
    assert_eq!(count(shifted), (0, 2), "i << 3");
    let summed = "(call $ld (i32.add (i32.mul (local.get $i) (i32.const 16))
                     (i32.add (i32.shl (local.get $o) (i32.const 4)) (i32.const 8))))";
    assert_eq!(count(summed), (0, 2), "16 i + (o << 4) + 8");
    assert_eq!(
        count("(call $ld (i32.shl (local.get $i) (i32.const 2)))"),
        (1, 2),
        "i << 2"
    );
    assert_eq!(count("(call $ld (local.get $i))"), (1, 2), "a parameter");
    let odd = "(call $ld (i32.add (i32.shl (local.get $i) (i32.const 3)) (i32.const 4)))";
    assert_eq!(count(odd), (1, 2), "(i << 3) + 4");
}

/// The bounds tests of a run of loads with nothing observable between
/// them become one test per base behind one branch to a cold block that
/// makes the run's own tests in order and ends in a trap: shared loads at
/// `i << 3` plus 0, 8, 16, 24 (one base) and `j << 3` plus 0 and 8
/// (another); guest loads at one address with offsets 0, 8 and 16 (one).
/// A test of no group (a store's, at another address: a constant one, so
/// that the kernel has no copy for aligned arguments) is a group of its
/// own, so every test of a run goes behind the one branch; a run of one
/// test is left as it is. A store between two loads ends a run.
#[test]
fn bounds_tests_merge_per_base_within_a_run() {
    let bounds = KernelTrap::HeapOutOfBounds.trap_code().to_string();
    let shape = |body: &str| {
        // `$i` and `$j` scaled once (as a compiler's common subexpressions).
        let wat = format!(
            r#"(module
  (import "tensorwasm_kernel" "shared_load_i64" (func $ld (param i32) (result i64)))
  (memory 1)
  (func (export "kernel") (param $i i32) (param $j i32) (param $o i32)
    (local.set $i (i32.shl (local.get $i) (i32.const 3)))
    (local.set $j (i32.shl (local.get $j) (i32.const 3)))
    {body}))"#
        );
        let clif = clif_of(&wat);
        let count = |what: &dyn Fn(&str) -> bool| clif.lines().filter(|l| what(l.trim())).count();
        (
            // Cold blocks (one per merged run), and the `bor`s of their
            // groups' tests.
            count(&|l| l.ends_with(&format!("trap {bounds}"))),
            count(&|l| l.contains(" = bor ")),
            // Conditional bounds traps: the cold blocks' and those in place.
            traps(&clif, "trapnz", KernelTrap::HeapOutOfBounds),
        )
    };
    let ld = |base: &str, plus: u32| {
        format!("(call $ld (i32.add (local.get {base}) (i32.const {plus})))")
    };
    let sum = format!(
        "(i64.store (i32.const 64) (i64.add (i64.add (i64.add {} {}) (i64.add {} {})) (i64.add {} {})))",
        ld("$i", 0),
        ld("$j", 0),
        ld("$i", 8),
        ld("$j", 8),
        ld("$i", 16),
        ld("$i", 24)
    );
    // One run: two shared groups and the store's test; seven tests in
    // the cold block.
    assert_eq!(shape(&sum), (1, 2, 7), "six shared loads, two bases");
    let split = format!(
        "(i64.store (i32.const 64) (i64.add {} {})) (i64.store (i32.const 64) (i64.add {} {}))",
        ld("$i", 0),
        ld("$i", 8),
        ld("$i", 16),
        ld("$i", 24)
    );
    assert_eq!(shape(&split), (2, 2, 6), "a store between two runs");
    let guest = "(i64.store (i32.const 64) (i64.add (i64.add
        (i64.load offset=0 (local.get $j)) (i64.load offset=8 (local.get $j)))
        (i64.load offset=16 (local.get $j))))";
    // One run: the loads' group and the store's test (another address).
    assert_eq!(shape(guest), (1, 1, 4), "three guest loads, one address");
    // `j - 8` (an `isub` of a constant) does not end the run: j's two
    // loads still form a group, `j - 8`'s and the store's tests their own.
    let subtracted = "(i64.store (i32.const 64) (i64.add (i64.add
        (i64.load offset=0 (local.get $j)) (i64.load (i32.sub (local.get $j) (i32.const 8))))
        (i64.load offset=8 (local.get $j))))";
    assert_eq!(shape(subtracted), (1, 2, 4), "j, j - 8, j + 8");
    let apart = "(i64.store (i32.const 64) (i64.add
        (i64.load (local.get $i)) (i64.load (local.get $j))))";
    assert_eq!(shape(apart), (1, 2, 3), "no two tests at one address");
    let alone = "(i64.store (i32.const 64) (i64.const 1))";
    assert_eq!(shape(alone), (0, 0, 1), "a lone store");
}
