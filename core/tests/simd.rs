//! SIMD kernels (`docs/kernels.md`, "SIMD") against wasmtime, through the
//! translator's CLIF in Cranelift's interpreter (`harness`): every operator
//! of the SIMD proposal on vectors of edge and random lanes, lane access
//! and shuffles at several lanes, each load and store form at random,
//! misaligned and out-of-bounds addresses, and `v128` locals, block
//! parameters, calls and selects. A float result lane may be any NaN where
//! wasmtime's is a NaN (Wasm leaves the payload to the engine); every other
//! bit of memory must match. The WebAssembly spec's own SIMD tests run
//! end to end on the CPU driver in `embed/tests/kernel_simd_spec.rs`.

#[allow(dead_code)]
mod harness;

use harness::{
    Arg, Kernels, PAGE, PLENTY, Reference, Ty, edges, image, interpret, rng, translate,
    variant_name,
};

/// Where the input vectors start, and how many there are.
const VECTORS: usize = 1024;
const COUNT: usize = 256;
/// Runs per operator.
const RUNS: usize = 24;

/// How the result of an operator is checked: its float lanes (NaN for NaN),
/// or bit for bit.
#[derive(Clone, Copy)]
enum Result {
    Bits,
    F32,
    F64,
}

/// `image` with `COUNT` vectors at `VECTORS`, each of one shape's edge
/// values and random lanes.
fn inputs(rng: &mut harness::Rng) -> Vec<u8> {
    let mut memory = image(rng);
    // The first 16 vectors: lanes of small integers (no NaN however read).
    for (i, byte) in memory[VECTORS..VECTORS + 16 * 16].iter_mut().enumerate() {
        *byte = if i % 2 == 0 { rng.next() as u8 } else { 0 };
    }
    let shapes = [Ty::I32, Ty::I64, Ty::F32, Ty::F64];
    for v in 16..COUNT {
        let ty = shapes[rng.below(4) as usize];
        let edge = edges(ty);
        let at = VECTORS + 16 * v;
        let mut k = 0;
        while k < 16 {
            let bits = match rng.below(3) {
                0 => rng.next(),
                _ => edge[rng.below(edge.len() as u64) as usize],
            };
            let n = ty.bytes();
            memory[at + k..at + k + n].copy_from_slice(&bits.to_le_bytes()[..n]);
            k += n;
        }
        // Narrow lanes' edges too: some bytes and halves at their extremes.
        for _ in 0..rng.below(4) {
            let i = at + rng.below(16) as usize;
            memory[i] = [0, 1, 0x7f, 0x80, 0xff][rng.below(5) as usize];
        }
    }
    memory
}

/// Runs the kernel of `wat` (its parameters three addresses or amounts)
/// both ways on `runs` random argument triples; the result is the 16 bytes
/// at 0.
fn check(name: &str, wat: &str, result: Result, args: impl Fn(&mut harness::Rng) -> [u32; 3]) {
    let mut rng = rng(name);
    let wasm = wat::parse_str(wat).unwrap_or_else(|e| panic!("{name}: {e}\n{wat}"));
    let kernels = Kernels::new(&wasm);
    let mut reference = Reference::new(&wasm);
    let start = inputs(&mut rng);
    for _ in 0..RUNS {
        let a = args(&mut rng);
        let argv: Vec<Arg> = a.iter().map(|&x| Arg(Ty::I32, u64::from(x))).collect();
        let mut want = start.clone();
        let expected = reference.run(&argv, &mut want);
        for kernel in kernels.for_launch(&argv, start.len()) {
            let name = format!("{name} ({})", variant_name(kernel.variant));
            let mut got = start.clone();
            let outcome = interpret(kernel, &argv, &mut got, PLENTY);
            compare(
                &name,
                &a,
                &start,
                result,
                (expected, &want),
                (outcome, &got),
            );
        }
    }
}

/// Asserts that a run of `name` with `a` (from `start`) left what
/// wasmtime's did (`want`: outcome and memory): the result's 16 bytes at
/// 0, NaNs of `result`'s type equal whatever their bits, and every other
/// byte.
fn compare(
    name: &str,
    a: &[u32; 3],
    start: &[u8],
    result: Result,
    (expected, want): (harness::Outcome, &[u8]),
    (outcome, got): (harness::Outcome, &[u8]),
) {
    assert_eq!(outcome, expected, "{name}, args {a:?}");
    let lane = match result {
        Result::Bits => 1,
        Result::F32 => 4,
        Result::F64 => 8,
    };
    for k in (0..16).step_by(lane) {
        let (w, g) = (&want[k..k + lane], &got[k..k + lane]);
        let nan = |b: &[u8]| match result {
            Result::F32 => f32::from_le_bytes(b.try_into().unwrap()).is_nan(),
            Result::F64 => f64::from_le_bytes(b.try_into().unwrap()).is_nan(),
            Result::Bits => false,
        };
        assert!(
            w == g || (nan(w) && nan(g)),
            "{name}, args {a:?}: bytes {k}.. differ: wasmtime {w:02x?}, translated {g:02x?}\n\
             a: {:02x?}\nb: {:02x?}",
            &start[a[0] as usize..(a[0] as usize + 16).min(PAGE)],
            &start[a[1] as usize..(a[1] as usize + 16).min(PAGE)],
        );
    }
    if let Some(at) = (16..PAGE).find(|&i| want[i] != got[i]) {
        panic!("{name}, args {a:?}: memory differs at byte {at}");
    }
}

/// Two random input vectors and a random small number.
fn vectors(rng: &mut harness::Rng) -> [u32; 3] {
    let pick = |rng: &mut harness::Rng| (VECTORS + 16 * rng.below(COUNT as u64) as usize) as u32;
    [pick(rng), pick(rng), rng.below(200) as u32]
}

fn float_result(op: &str) -> Result {
    let float = !op.contains("trunc_sat")
        && !["eq", "ne", "lt", "gt", "le", "ge"]
            .iter()
            .any(|c| op.ends_with(&format!(".{c}")));
    match op.split('.').next() {
        Some("f32x4") if float => Result::F32,
        Some("f64x2") if float => Result::F64,
        _ => Result::Bits,
    }
}

fn module(body: &str) -> String {
    format!(
        r#"(module (memory (export "memory") 1)
          (func (export "kernel") (param $a i32) (param $b i32) (param $c i32)
            {body}))"#
    )
}

const UNARY: &[&str] = &[
    "v128.not",
    "i8x16.abs",
    "i8x16.neg",
    "i8x16.popcnt",
    "i16x8.abs",
    "i16x8.neg",
    "i32x4.abs",
    "i32x4.neg",
    "i64x2.abs",
    "i64x2.neg",
    "f32x4.abs",
    "f32x4.neg",
    "f32x4.sqrt",
    "f32x4.ceil",
    "f32x4.floor",
    "f32x4.trunc",
    "f32x4.nearest",
    "f64x2.abs",
    "f64x2.neg",
    "f64x2.sqrt",
    "f64x2.ceil",
    "f64x2.floor",
    "f64x2.trunc",
    "f64x2.nearest",
    "i32x4.trunc_sat_f32x4_s",
    "i32x4.trunc_sat_f32x4_u",
    "f32x4.convert_i32x4_s",
    "f32x4.convert_i32x4_u",
    "i32x4.trunc_sat_f64x2_s_zero",
    "i32x4.trunc_sat_f64x2_u_zero",
    "f64x2.convert_low_i32x4_s",
    "f64x2.convert_low_i32x4_u",
    "f32x4.demote_f64x2_zero",
    "f64x2.promote_low_f32x4",
    "i16x8.extend_low_i8x16_s",
    "i16x8.extend_high_i8x16_s",
    "i16x8.extend_low_i8x16_u",
    "i16x8.extend_high_i8x16_u",
    "i32x4.extend_low_i16x8_s",
    "i32x4.extend_high_i16x8_s",
    "i32x4.extend_low_i16x8_u",
    "i32x4.extend_high_i16x8_u",
    "i64x2.extend_low_i32x4_s",
    "i64x2.extend_high_i32x4_s",
    "i64x2.extend_low_i32x4_u",
    "i64x2.extend_high_i32x4_u",
    "i16x8.extadd_pairwise_i8x16_s",
    "i16x8.extadd_pairwise_i8x16_u",
    "i32x4.extadd_pairwise_i16x8_s",
    "i32x4.extadd_pairwise_i16x8_u",
];

const BINARY: &[&str] = &[
    "v128.and",
    "v128.or",
    "v128.xor",
    "v128.andnot",
    "i8x16.add",
    "i8x16.sub",
    "i8x16.add_sat_s",
    "i8x16.add_sat_u",
    "i8x16.sub_sat_s",
    "i8x16.sub_sat_u",
    "i8x16.min_s",
    "i8x16.min_u",
    "i8x16.max_s",
    "i8x16.max_u",
    "i8x16.avgr_u",
    "i8x16.narrow_i16x8_s",
    "i8x16.narrow_i16x8_u",
    "i8x16.swizzle",
    "i16x8.add",
    "i16x8.sub",
    "i16x8.mul",
    "i16x8.add_sat_s",
    "i16x8.add_sat_u",
    "i16x8.sub_sat_s",
    "i16x8.sub_sat_u",
    "i16x8.min_s",
    "i16x8.min_u",
    "i16x8.max_s",
    "i16x8.max_u",
    "i16x8.avgr_u",
    "i16x8.q15mulr_sat_s",
    "i16x8.narrow_i32x4_s",
    "i16x8.narrow_i32x4_u",
    "i16x8.extmul_low_i8x16_s",
    "i16x8.extmul_high_i8x16_s",
    "i16x8.extmul_low_i8x16_u",
    "i16x8.extmul_high_i8x16_u",
    "i32x4.add",
    "i32x4.sub",
    "i32x4.mul",
    "i32x4.min_s",
    "i32x4.min_u",
    "i32x4.max_s",
    "i32x4.max_u",
    "i32x4.dot_i16x8_s",
    "i32x4.extmul_low_i16x8_s",
    "i32x4.extmul_high_i16x8_s",
    "i32x4.extmul_low_i16x8_u",
    "i32x4.extmul_high_i16x8_u",
    "i64x2.add",
    "i64x2.sub",
    "i64x2.mul",
    "i64x2.extmul_low_i32x4_s",
    "i64x2.extmul_high_i32x4_s",
    "i64x2.extmul_low_i32x4_u",
    "i64x2.extmul_high_i32x4_u",
    "f32x4.add",
    "f32x4.sub",
    "f32x4.mul",
    "f32x4.div",
    "f32x4.min",
    "f32x4.max",
    "f32x4.pmin",
    "f32x4.pmax",
    "f64x2.add",
    "f64x2.sub",
    "f64x2.mul",
    "f64x2.div",
    "f64x2.min",
    "f64x2.max",
    "f64x2.pmin",
    "f64x2.pmax",
];

const COMPARES: &[&str] = &[
    "i8x16.eq",
    "i8x16.ne",
    "i8x16.lt_s",
    "i8x16.lt_u",
    "i8x16.gt_s",
    "i8x16.gt_u",
    "i8x16.le_s",
    "i8x16.le_u",
    "i8x16.ge_s",
    "i8x16.ge_u",
    "i16x8.eq",
    "i16x8.ne",
    "i16x8.lt_s",
    "i16x8.lt_u",
    "i16x8.gt_s",
    "i16x8.gt_u",
    "i16x8.le_s",
    "i16x8.le_u",
    "i16x8.ge_s",
    "i16x8.ge_u",
    "i32x4.eq",
    "i32x4.ne",
    "i32x4.lt_s",
    "i32x4.lt_u",
    "i32x4.gt_s",
    "i32x4.gt_u",
    "i32x4.le_s",
    "i32x4.le_u",
    "i32x4.ge_s",
    "i32x4.ge_u",
    "i64x2.eq",
    "i64x2.ne",
    "i64x2.lt_s",
    "i64x2.gt_s",
    "i64x2.le_s",
    "i64x2.ge_s",
    "f32x4.eq",
    "f32x4.ne",
    "f32x4.lt",
    "f32x4.gt",
    "f32x4.le",
    "f32x4.ge",
    "f64x2.eq",
    "f64x2.ne",
    "f64x2.lt",
    "f64x2.gt",
    "f64x2.le",
    "f64x2.ge",
];

#[test]
fn unary_operators() {
    for op in UNARY {
        let wat = module(&format!(
            "(v128.store (i32.const 0) ({op} (v128.load (local.get $a))))"
        ));
        check(op, &wat, float_result(op), vectors);
    }
}

#[test]
fn binary_operators() {
    for op in BINARY.iter().chain(COMPARES) {
        let wat = module(&format!(
            "(v128.store (i32.const 0) ({op} (v128.load (local.get $a)) (v128.load (local.get $b))))"
        ));
        check(op, &wat, float_result(op), vectors);
    }
    let wat = module(
        "(v128.store (i32.const 0) (v128.bitselect (v128.load (local.get $a)) \
         (v128.load (local.get $b)) (v128.load offset=32 (local.get $a))))",
    );
    check("v128.bitselect", &wat, Result::Bits, vectors);
}

#[test]
fn shifts_and_whole_vector_tests() {
    for shape in ["i8x16", "i16x8", "i32x4", "i64x2"] {
        for op in ["shl", "shr_s", "shr_u"] {
            let op = format!("{shape}.{op}");
            let wat = module(&format!(
                "(v128.store (i32.const 0) ({op} (v128.load (local.get $a)) (local.get $c)))"
            ));
            check(&op, &wat, Result::Bits, vectors);
        }
        for op in ["all_true", "bitmask"] {
            let op = format!("{shape}.{op}");
            let wat = module(&format!(
                "(i32.store (i32.const 0) ({op} (v128.load (local.get $a))))"
            ));
            check(&op, &wat, Result::Bits, vectors);
        }
    }
    let wat = module("(i32.store (i32.const 0) (v128.any_true (v128.load (local.get $a))))");
    check("v128.any_true", &wat, Result::Bits, vectors);
    // Vectors with zero lanes, for all_true and any_true.
    let wat = module(
        "(i32.store (i32.const 0) (i32.add (i32.add (i8x16.all_true (v128.and (v128.load (local.get $a)) \
         (v128.load (local.get $b)))) (i32.shl (i16x8.all_true (v128.and (v128.load (local.get $a)) \
         (v128.load (local.get $b)))) (i32.const 1))) (i32.shl (v128.any_true (v128.and \
         (v128.load (local.get $a)) (v128.const i32x4 0 0 0x100 0))) (i32.const 2))))",
    );
    check("all_true of sparse vectors", &wat, Result::Bits, vectors);
}

#[test]
fn lanes_splats_and_shuffles() {
    for (shape, count, ty) in [
        ("i8x16", 16, "i32"),
        ("i16x8", 8, "i32"),
        ("i32x4", 4, "i32"),
        ("i64x2", 2, "i64"),
        ("f32x4", 4, "f32"),
        ("f64x2", 2, "f64"),
    ] {
        let narrow = count > 4;
        for lane in 0..count {
            let extracts: Vec<String> = if narrow {
                vec![
                    format!("{shape}.extract_lane_s {lane}"),
                    format!("{shape}.extract_lane_u {lane}"),
                ]
            } else {
                vec![format!("{shape}.extract_lane {lane}")]
            };
            for extract in extracts {
                let wat = module(&format!(
                    "({ty}.store (i32.const 0) ({extract} (v128.load (local.get $a))))"
                ));
                check(&extract, &wat, Result::Bits, vectors);
            }
            let op = format!("{shape}.replace_lane {lane}");
            let wat = module(&format!(
                "(v128.store (i32.const 0) ({op} (v128.load (local.get $a)) ({ty}.load (local.get $b))))"
            ));
            check(&op, &wat, Result::Bits, vectors);
        }
        let op = format!("{shape}.splat");
        let wat = module(&format!(
            "(v128.store (i32.const 0) ({op} ({ty}.load (local.get $a))))"
        ));
        check(&op, &wat, Result::Bits, vectors);
    }
    let mut rng = rng("shuffles");
    let mut patterns = vec![
        (0..16).collect::<Vec<u32>>(),
        (16..32).collect(),
        (0..16).rev().collect(),
        vec![4, 5, 6, 7, 0, 1, 2, 3, 24, 25, 26, 27, 16, 17, 18, 19],
        vec![0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23],
        vec![2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17],
    ];
    for _ in 0..8 {
        patterns.push((0..16).map(|_| rng.below(32) as u32).collect());
    }
    for p in patterns {
        let lanes: Vec<String> = p.iter().map(u32::to_string).collect();
        let op = format!("i8x16.shuffle {}", lanes.join(" "));
        let wat = module(&format!(
            "(v128.store (i32.const 0) ({op} (v128.load (local.get $a)) (v128.load (local.get $b))))"
        ));
        check(&op, &wat, Result::Bits, vectors);
    }
    let wat = module(
        "(v128.store (i32.const 0) (v128.const i32x4 0x01234567 0x89abcdef 0xdeadbeef 0x0badf00d))",
    );
    check("v128.const", &wat, Result::Bits, vectors);
}

/// Addresses near the memory's end (some out of bounds), unaligned.
fn addresses(rng: &mut harness::Rng) -> [u32; 3] {
    let near_end = |rng: &mut harness::Rng| (PAGE as u64 - 20 + rng.below(24)) as u32;
    let low = |rng: &mut harness::Rng| (VECTORS as u64 + rng.below(4000)) as u32;
    let pick = |rng: &mut harness::Rng| match rng.below(3) {
        0 => near_end(rng),
        _ => low(rng),
    };
    [pick(rng), pick(rng), rng.below(200) as u32]
}

#[test]
fn loads_and_stores() {
    let loads = [
        "v128.load",
        "v128.load offset=3",
        "v128.load8x8_s",
        "v128.load8x8_u",
        "v128.load16x4_s",
        "v128.load16x4_u",
        "v128.load32x2_s",
        "v128.load32x2_u",
        "v128.load8_splat",
        "v128.load16_splat",
        "v128.load32_splat",
        "v128.load64_splat",
        "v128.load32_zero",
        "v128.load64_zero offset=1",
    ];
    for load in loads {
        let wat = module(&format!(
            "(v128.store (i32.const 0) ({load} (local.get $a)))"
        ));
        check(load, &wat, Result::Bits, addresses);
    }
    for (bits, count) in [(8, 16), (16, 8), (32, 4), (64, 2)] {
        for lane in [0, count / 2 - 1, count - 1] {
            let load = format!("v128.load{bits}_lane {lane}");
            let wat = module(&format!(
                "(v128.store (i32.const 0) ({load} (local.get $a) (v128.load (i32.const {VECTORS}))))"
            ));
            check(&load, &wat, Result::Bits, addresses);
            let store = format!("v128.store{bits}_lane {lane}");
            let wat = module(&format!(
                "({store} (local.get $a) (v128.load (local.get $b)))"
            ));
            check(&store, &wat, Result::Bits, addresses);
        }
    }
    // A store partly out of bounds writes nothing.
    let wat = module("(v128.store offset=5 (local.get $a) (v128.load (local.get $b)))");
    check("v128.store", &wat, Result::Bits, addresses);
}

#[test]
fn v128_locals_blocks_calls_and_selects() {
    let wat = r#"(module (memory (export "memory") 1)
      (global $k v128 (v128.const i32x4 1 2 3 4))
      (global $m (mut v128) (v128.const i64x2 -1 7))
      (func $mix (param $x v128) (param $y v128) (param $s i32) (result v128 v128)
        (local $t v128)
        (local.set $t (i32x4.add (local.get $x) (global.get $k)))
        (select (local.get $t) (local.get $y) (local.get $s))
        (select (result v128) (local.get $y) (global.get $m) (local.get $s)))
      (func (export "kernel") (param $a i32) (param $b i32) (param $c i32)
        (local $acc v128) (local $i i32)
        (local.set $acc (v128.load (local.get $a)))
        (local.get $acc)
        (loop $next (param v128) (result v128)
          (call $mix (v128.load (local.get $b)) (i32.and (local.get $i) (i32.const 1)))
          (drop)
          (f32x4.mul (local.get $acc))
          (local.tee $acc)
          (local.set $i (i32.add (local.get $i) (i32.const 1)))
          (br_if $next (i32.lt_u (local.get $i) (i32.and (local.get $c) (i32.const 7)))))
        (block (param v128) (result v128)
          (if (param v128) (result v128) (i32.and (local.get $c) (i32.const 8))
            (then (i64x2.neg))
            (else (drop) (v128.const i8x16 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16))))
        (local.set $acc)
        (v128.store (i32.const 0) (local.get $acc))))"#;
    check("v128 control flow", wat, Result::Bits, vectors);
}

/// Mutable `v128` globals the kernel sets: each thread's copy of their
/// four words starts at the value at launch (read from wasmtime's
/// instance before each run, which the previous run changed), is read,
/// set on some paths and read again; the result and memory must be
/// wasmtime's.
#[test]
fn mutable_v128_globals_are_the_threads_own() {
    let wat = r#"(module (memory (export "memory") 1)
      (global $m (export "g0") (mut v128) (v128.const i32x4 1 2 3 4))
      (global $n (export "g1") (mut v128) (v128.const i64x2 -1 7))
      (global $k (export "g2") (mut i32) (i32.const 5))
      (func (export "kernel") (param $a i32) (param $b i32) (param $c i32)
        (global.set $m (i32x4.add (global.get $m) (v128.load (local.get $a))))
        (if (i32.and (local.get $c) (i32.const 1))
          (then (global.set $n (v128.xor (global.get $n) (v128.load (local.get $b))))))
        (global.set $k (i32.add (global.get $k) (local.get $c)))
        (v128.store (i32.const 0)
          (i8x16.add (global.get $m)
            (i32x4.replace_lane 2 (global.get $n) (global.get $k))))))"#;
    let wasm = wat::parse_str(wat).unwrap();
    let kernels = Kernels::new(&wasm);
    let entries: Vec<_> = kernels
        .any
        .globals
        .iter()
        .map(|g| (g.index, g.lane))
        .collect();
    assert_eq!(
        entries,
        [
            (0, Some(0)),
            (0, Some(1)),
            (0, Some(2)),
            (0, Some(3)),
            (1, Some(0)),
            (1, Some(1)),
            (1, Some(2)),
            (1, Some(3)),
            (2, None)
        ],
        "a v128 global's entries are its four words"
    );
    let mut reference = Reference::new(&wasm);
    let mut rng = rng("v128 globals");
    let start = inputs(&mut rng);
    for _ in 0..RUNS {
        let a = vectors(&mut rng);
        let argv: Vec<Arg> = a.iter().map(|&x| Arg(Ty::I32, u64::from(x))).collect();
        let globals: Vec<Arg> = kernels
            .any
            .globals
            .iter()
            .map(|g| reference.kernel_global(g))
            .collect();
        let mut want = start.clone();
        let expected = reference.run(&argv, &mut want);
        let params: Vec<Arg> = argv.iter().chain(&globals).copied().collect();
        for kernel in kernels.for_launch(&params, start.len()) {
            let name = format!("v128 globals ({})", variant_name(kernel.variant));
            let mut got = start.clone();
            let mut launch = harness::Launch::unlimited();
            launch.globals = globals.clone();
            let outcome = harness::interpret_launch(kernel, &argv, &mut got, PLENTY, &mut launch);
            compare(
                &name,
                &a,
                &start,
                Result::Bits,
                (expected, &want),
                (outcome, &got),
            );
        }
    }
}

/// One kernel per family of operators (every operator of the family in
/// turn, each result stored at its own address), lowered to PTX for sm_75,
/// sm_80 and sm_90 into `target/ptx-out/simd.<family>.sm_XX.ptx`, which
/// `scripts/check-ptx.sh` assembles with ptxas. Each kernel is also run
/// against wasmtime.
#[test]
fn every_family_lowers_to_ptx() {
    use tensorwasm_core::lower::Lowerer;
    use tensorwasm_core::lower::ptx::PtxLowerer;

    let store = |i: usize, op: &str, operands: &str| {
        format!(
            "(v128.store (i32.const {}) ({op} {operands}))",
            16 * (i + 1)
        )
    };
    let a = "(v128.load (local.get $a))";
    let b = "(v128.load (local.get $b))";
    let families: Vec<(&str, Vec<String>)> = vec![
        (
            "unary",
            UNARY
                .iter()
                .enumerate()
                .map(|(i, op)| store(i, op, a))
                .collect(),
        ),
        (
            "binary",
            BINARY
                .iter()
                .enumerate()
                .map(|(i, op)| store(i, op, &format!("{a} {b}")))
                .collect(),
        ),
        (
            "compares",
            COMPARES
                .iter()
                .enumerate()
                .map(|(i, op)| store(i, op, &format!("{a} {b}")))
                .collect(),
        ),
        (
            "lanes",
            vec![
                store(
                    0,
                    "i8x16.shuffle 0 17 2 19 4 21 6 23 8 25 10 27 12 29 14 31",
                    &format!("{a} {b}"),
                ),
                store(1, "i8x16.swizzle", &format!("{a} {b}")),
                store(
                    2,
                    "i8x16.replace_lane 5",
                    &format!("{a} (i32.load (local.get $b))"),
                ),
                store(3, "i64x2.shl", &format!("{a} (local.get $c)")),
                store(4, "i8x16.shr_s", &format!("{a} (local.get $c)")),
                format!("(i32.store (i32.const 96) (i8x16.bitmask {a}))"),
                format!("(i32.store (i32.const 100) (i16x8.all_true {a}))"),
                format!("(i32.store (i32.const 104) (i8x16.extract_lane_s 13 {a}))"),
                format!("(f64.store (i32.const 108) (f64x2.extract_lane 1 {a}))"),
                "(v128.store8_lane 7 (local.get $b) (v128.load64_zero (local.get $a)))".into(),
                "(v128.store (i32.const 128) (v128.load8x8_s offset=3 (local.get $b)))".into(),
                "(v128.store (i32.const 144) (v128.load16_splat (local.get $a)))".into(),
            ],
        ),
    ];
    let targets = [(7, 5), (8, 0), (9, 0)].map(|sm| PtxLowerer {
        sm,
        isa: PtxLowerer::min_isa(sm).expect("a known target"),
    });
    let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/ptx-out");
    std::fs::create_dir_all(&dir).expect("create target/ptx-out");
    for (family, body) in families {
        let wat = module(&body.join("\n"));
        check(family, &wat, Result::Bits, vectors_nan_free);
        let wasm = wat::parse_str(&wat).expect("wat");
        let kernel = translate(&wasm);
        for target in &targets {
            let ptx = target
                .lower(family, &kernel.function, kernel.abi)
                .unwrap_or_else(|e| panic!("{family} for sm_{}{}: {e}", target.sm.0, target.sm.1));
            let path = dir.join(format!(
                "simd.{family}.sm_{}{}.ptx",
                target.sm.0, target.sm.1
            ));
            std::fs::write(&path, ptx).expect("write the PTX");
        }
    }
}

/// Two input vectors whose float lanes are not NaNs (a family kernel's
/// results are compared bit for bit), and a small number.
fn vectors_nan_free(rng: &mut harness::Rng) -> [u32; 3] {
    // The first 16 vectors are integers below 2^16 in every lane.
    let pick = |rng: &mut harness::Rng| (VECTORS + 16 * rng.below(16) as usize) as u32;
    [pick(rng), pick(rng), rng.below(200) as u32]
}

/// `v128` loads and stores in the shadow stack's window (`docs/kernels.md`,
/// "Globals and the shadow stack"): frame accesses at constant offsets (a
/// window in registers), a frame array indexed at run time (a window in
/// the slot), and accesses at guest addresses that may fall in the window,
/// against wasmtime; memory outside the window must match.
#[test]
fn v128_in_the_stack_window() {
    let frame = |index: &str| {
        format!(
            r#"(module (memory (export "memory") 1)
          (global $__stack_pointer (export "g0") (mut i32) (i32.const 8192))
          (func (export "kernel") (param $a i32) (param $b i32) (param $c i32) (local $sp i32)
            (global.set $__stack_pointer
              (local.tee $sp (i32.sub (global.get $__stack_pointer) (i32.const 64))))
            (v128.store (local.get $sp) (v128.load (local.get $a)))
            (v128.store offset=16 (local.get $sp) (v128.load (local.get $b)))
            (v128.store offset=32 (local.get $sp) (i32x4.add (v128.load (local.get $sp))
              (v128.load offset=16 (local.get $sp))))
            (v128.store64_lane offset=40 1 (local.get $sp) (v128.load (local.get $a)))
            (v128.store (i32.const 0) (v128.load {index}))
            (v128.store (i32.const 16) (v128.load offset=32 (local.get $sp)))
            (v128.store (local.get $c) (v128.load32_splat offset=4 (local.get $sp)))
            (global.set $__stack_pointer (i32.add (local.get $sp) (i32.const 64)))))"#
        )
    };
    let near_window = |rng: &mut harness::Rng| {
        let v = |rng: &mut harness::Rng| (VECTORS + 16 * rng.below(COUNT as u64) as usize) as u32;
        // 8-byte aligned: each half of a `v128` access lies wholly in the
        // window or wholly outside (a half across its edge goes to the
        // guest's memory, where wasmtime has the frame).
        [v(rng), v(rng), (8192 - 80 + 8 * rng.below(12)) as u32]
    };
    for (name, index) in [
        ("frame at constant offsets", "(local.get $sp)".to_string()),
        (
            "frame indexed at run time",
            "(i32.add (local.get $sp) (i32.and (local.get $c) (i32.const 48)))".to_string(),
        ),
        (
            "a guest address near the window",
            "(local.get $c)".to_string(),
        ),
    ] {
        let wat = frame(&index);
        let wasm = wat::parse_str(&wat).unwrap_or_else(|e| panic!("{name}: {e}"));
        let kernels = Kernels::new(&wasm);
        let window = kernels.any.stack_window.expect("a stack window");
        // Frame accesses alone keep the window in registers.
        assert_eq!(
            window.registers,
            name != "frame indexed at run time",
            "{name}: the window's place"
        );
        let mut reference = Reference::new(&wasm);
        let mut rng = rng(name);
        let start = inputs(&mut rng);
        for _ in 0..RUNS {
            let a = near_window(&mut rng);
            let argv: Vec<Arg> = a.iter().map(|&x| Arg(Ty::I32, u64::from(x))).collect();
            let mut input = start.clone();
            let low = 8192 - window.bytes as usize;
            input[low..8192].fill(0);
            let mut want = input.clone();
            let expected = reference.run(&argv, &mut want);
            want[low..8192].fill(0);
            let globals = vec![reference.global(0)];
            let params: Vec<Arg> = argv.iter().chain(&globals).copied().collect();
            for kernel in kernels.for_launch(&params, input.len()) {
                let variant = variant_name(kernel.variant);
                let mut got = input.clone();
                let mut launch = harness::Launch::unlimited();
                launch.globals = globals.clone();
                let outcome =
                    harness::interpret_launch(kernel, &argv, &mut got, PLENTY, &mut launch);
                assert_eq!(outcome, expected, "{name} ({variant}), args {a:?}");
                got[low..8192].fill(0);
                if let Some(at) = (0..PAGE).find(|&i| want[i] != got[i]) {
                    panic!("{name} ({variant}), args {a:?}: memory differs at byte {at}");
                }
            }
        }
    }
}
