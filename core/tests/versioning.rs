//! Loop versioning (`core/src/lower/translate/version.rs`) against
//! wasmtime: loops that count down from a run-time count, walking arrays by
//! a stride, run on random and edge-case pointers, strides, counts and
//! offsets (in bounds, past the memory's end in a late iteration, wrapping
//! `i32` addresses, misaligned, zero counts), and must give wasmtime's
//! memory, outcome and trap offset every time. The interpreter traps on an
//! access flagged `aligned` at a misaligned address, so a copy taken
//! wrongly fails the comparison too. The kernels here also get the copy
//! for aligned arguments (`specialize.rs`), which the misaligned pointers
//! leave. Then the translated CLIF's shape: the copies have no fuel test
//! and no bounds test of their induction accesses.

#[allow(dead_code)] // the translator suite's harness; these tests use part of it
mod harness;

use harness::Ty::{F32, I32};
use harness::*;
use tensorwasm_core::lower::KernelTrap;
use tensorwasm_core::lower::translate::KernelVariant;
use wasmparser::Operator;

/// `out[i] = acc += a[i] * b[i * stride]` for `n` iterations counted down,
/// `f32`, the addresses stepped by 4, `stride` and 4: every access an
/// induction access, a store in the loop so a late trap leaves the earlier
/// iterations' results.
const RUNNING_DOT: &str = r#"(module (memory (export "memory") 1)
  (func (export "kernel") (param $a i32) (param $b i32) (param $out i32) (param $n i32) (param $stride i32)
    (local $acc f32)
    (loop $next
      (local.set $acc (f32.add (local.get $acc)
        (f32.mul (f32.load (local.get $a)) (f32.load offset=OFFSET (local.get $b)))))
      (f32.store (local.get $out) (local.get $acc))
      (local.set $a (i32.add (local.get $a) (i32.const 4)))
      (local.set $b (i32.add (local.get $b) (local.get $stride)))
      (local.set $out (i32.add (local.get $out) (i32.const 4)))
      (br_if $next (local.tee $n (i32.sub (local.get $n) (i32.const 1)))))))"#;

/// `i64` sums at `p + q` (an induction address plus an invariant) and a
/// narrow store: 8-byte alignment, and a byte access that needs none.
const WIDE_SUM: &str = r#"(module (memory (export "memory") 1)
  (func (export "kernel") (param $p i32) (param $q i32) (param $n i32) (param $out i32)
    (local $s i64)
    (loop $next
      (local.set $s (i64.add (local.get $s) (i64.load (i32.add (local.get $p) (local.get $q)))))
      (i32.store8 (local.get $out) (i32.wrap_i64 (local.get $s)))
      (local.set $p (i32.add (local.get $p) (i32.const 8)))
      (local.set $out (i32.add (local.get $out) (i32.const 1)))
      (br_if $next (local.tee $n (i32.sub (local.get $n) (i32.const 1)))))
    (i64.store (i32.const 8) (local.get $s))))"#;

/// Byte sums at `p + offset`, stepping by `s`: an access of one byte,
/// which needs no alignment, so only the bounds part of the entry test
/// guards it.
const BYTE_SUM: &str = r#"(module (memory (export "memory") 1)
  (func (export "kernel") (param $p i32) (param $s i32) (param $n i32)
    (local $sum i32)
    (loop $next
      (local.set $sum (i32.add (local.get $sum) (i32.load8_u offset=OFFSET (local.get $p))))
      (local.set $p (i32.add (local.get $p) (local.get $s)))
      (br_if $next (local.tee $n (i32.sub (local.get $n) (i32.const 1)))))
    (i32.store (i32.const 0) (local.get $sum))))"#;

/// Pointers near both ends of the memory, aligned and not.
fn pointer(rng: &mut Rng) -> u64 {
    match rng.below(6) {
        0 => rng.below(64),
        1 => rng.below(4096) & !3,
        2 => (PAGE as u64 - rng.below(256)) & !3,
        3 => PAGE as u64 - rng.below(256),
        4 => 0xffff_ffff - rng.below(64),
        _ => rng.below(4096),
    }
}

/// Iteration counts: zero (2^32 iterations: the loop runs off the memory),
/// small, and large enough to leave it.
fn count(rng: &mut Rng) -> u64 {
    match rng.below(5) {
        0 => 0,
        1 => 1,
        2 => rng.below(16),
        3 => rng.below(2048),
        _ => 0xffff_ffff - rng.below(4),
    }
}

#[test]
fn versioned_loops_match_wasmtime_on_every_path() {
    let mut rng = rng("versioned_loops");
    let mut trapped = 0;
    let mut runs = 0;
    for offset in [0u32, 8, 65532] {
        let wat = RUNNING_DOT.replace("OFFSET", &offset.to_string());
        for _ in 0..150 {
            let stride = match rng.below(5) {
                0 => 4,
                1 => 0,
                2 => rng.below(64) & !3,
                3 => (-4i32) as u32 as u64,
                _ => rng.below(64),
            };
            let (mut a, b, mut out) = (pointer(&mut rng), pointer(&mut rng), pointer(&mut rng));
            let mut n = count(&mut rng);
            if rng.below(3) == 0 && b + u64::from(offset) + 4 <= PAGE as u64 {
                // b's last access ends at the memory's end or one stride
                // past it (the entry test's edge), a and out in bounds.
                let stride = stride.max(64);
                let room = PAGE as u64 - b - u64::from(offset) - 4;
                n = room / stride + 1 + rng.below(2);
                (a, out) = (4 * rng.below(64), 8192 + 4 * rng.below(64));
            }
            let args = [a, b, out, n, stride].map(|v| Arg(I32, v));
            if let Outcome::Trapped { .. } = same_as_wasmtime(&wat, &args, &mut rng) {
                trapped += 1;
            }
            runs += 1;
        }
    }
    for _ in 0..150 {
        let args = [
            Arg(I32, pointer(&mut rng)),
            Arg(I32, rng.below(64)),
            Arg(I32, count(&mut rng)),
            Arg(I32, pointer(&mut rng)),
        ];
        if let Outcome::Trapped { .. } = same_as_wasmtime(WIDE_SUM, &args, &mut rng) {
            trapped += 1;
        }
        runs += 1;
    }
    for offset in [0u64, 3, 100] {
        let wat = BYTE_SUM.replace("OFFSET", &offset.to_string());
        for _ in 0..100 {
            let (p, s) = (pointer(&mut rng), 1 + rng.below(300));
            // The last byte at the memory's last byte, or one stride past.
            let n = match (PAGE as u64).checked_sub(p + offset + 1) {
                Some(room) if rng.below(4) != 0 => room / s + 1 + rng.below(2),
                _ => count(&mut rng),
            };
            let args = [p, s, n].map(|v| Arg(I32, v));
            if let Outcome::Trapped { .. } = same_as_wasmtime(&wat, &args, &mut rng) {
                trapped += 1;
            }
            runs += 1;
        }
    }
    // Both paths ran: many inputs stay in bounds, many leave.
    assert!(
        trapped > runs / 10 && trapped < runs * 9 / 10,
        "{trapped} of {runs} trapped"
    );
}

/// The cases each path must get right, one by one: the copy (aligned, in
/// bounds), a trap in the last iteration (the original loop, which traps
/// where wasmtime does after the earlier stores), a misaligned pointer
/// (the original loop's byte accesses), a stride that walks backwards.
#[test]
fn each_path_gives_wasmtime_s_result() {
    let mut rng = rng("versioned_paths");
    let wat = RUNNING_DOT.replace("OFFSET", "0");
    let run =
        |args: [u64; 5], rng: &mut Rng| same_as_wasmtime(&wat, &args.map(|v| Arg(I32, v)), rng);
    assert_eq!(run([0, 1024, 2048, 256, 4], &mut rng), Outcome::Returned);
    assert_eq!(run([0, 1024, 2048, 256, 12], &mut rng), Outcome::Returned);
    let wasm = wat::parse_str(&wat).expect("wat");
    let second_load = offset_of(&wasm, 1, |op| matches!(op, Operator::F32Load { .. }));
    // b's last element is 4 bytes past the end.
    let past = [0, PAGE as u64 - 4 * 255, 2048, 256, 4];
    assert_eq!(
        run(past, &mut rng),
        Outcome::Trapped {
            trap: KernelTrap::HeapOutOfBounds,
            offset: second_load
        }
    );
    assert_eq!(run([1, 1026, 2051, 256, 4], &mut rng), Outcome::Returned);
    assert_eq!(
        run([0, 4096, 2048, 256, (-4i32) as u32 as u64], &mut rng),
        Outcome::Returned
    );
}

/// Fuel: a loop entered with less fuel than its count takes the original
/// loop and runs out at its header after exactly the iterations the fuel
/// paid for; with enough it runs them all.
#[test]
fn fuel_short_of_the_count_traps_at_the_header() {
    let wat = RUNNING_DOT.replace("OFFSET", "0");
    let wasm = wat::parse_str(&wat).expect("wat");
    let kernel = translate(&wasm);
    let header = offset_of(&wasm, 0, |op| matches!(op, Operator::Loop { .. }));
    let args = [0u64, 1024, 2048, 100, 4].map(|v| Arg(I32, v));
    for (fuel, ran) in [(100i64, 100usize), (99, 99), (1, 1)] {
        let mut memory = vec![0u8; PAGE];
        for (i, b) in memory[..2048].iter_mut().enumerate() {
            *b = 0x3f + (i % 3) as u8;
        }
        let outcome = interpret(&kernel, &args, &mut memory, fuel);
        let stored = (0..100)
            .filter(|i| memory[2048 + 4 * i..2052 + 4 * i] != [0; 4])
            .count();
        assert_eq!(stored, ran, "fuel {fuel}");
        if fuel >= 100 {
            assert_eq!(outcome, Outcome::Returned);
        } else {
            assert_eq!(
                outcome,
                Outcome::Trapped {
                    trap: KernelTrap::OutOfFuel,
                    offset: header
                },
                "fuel {fuel}"
            );
        }
    }
}

/// The translated CLIF: the kernel has two copies of its body (the second
/// for aligned `$a`, `$b`, `$out` and `$stride`), each with its loop; the
/// aligned copy's loop also has a versioned copy, unrolled into a chain of
/// 16 links (`unroll.rs`: two loads a pass); the original body (misaligned pointers) keeps
/// only its checked loop. Only the two checked loops test fuel; the
/// versioned copy's and links' three accesses are flagged `aligned` and
/// `notrap`, the aligned body's checked loop's three `aligned` only (they
/// keep their bounds tests); the loops and the chain's first link read
/// the clock, the other links do not.
#[test]
fn the_copies_drop_their_checks() {
    let clif = clif_of(&RUNNING_DOT.replace("OFFSET", "0"));
    let accesses = |flags: &str| {
        clif.lines()
            .filter(|l| l.contains(flags) && (l.contains(" load") || l.contains(" store")))
            .count()
    };
    assert_eq!(traps(&clif, "trapz", KernelTrap::OutOfFuel), 2, "{clif}");
    // The versioned copy and 16 links, three accesses each.
    assert_eq!(accesses(" notrap aligned "), 17 * 3, "{clif}");
    assert_eq!(accesses(" aligned "), 17 * 3 + 3, "{clif}");
    assert_eq!(accesses(" little "), (17 + 2) * 3, "{clif}");
    // Each body's virtual block and checked loop, the versioned copy, and
    // the chain's first link.
    assert_eq!(
        traps(&clif, "trapnz", KernelTrap::TimeLimit),
        2 + 2 + 2,
        "{clif}"
    );
}

/// Straight code over pointer arguments (no loop): the `f32`s at `a + 4 t`
/// and `a + 4 t + 4` stored at `out + 8 t` and `out + 8 t + 4`, the `i64`
/// at `c` stored at 8 (t a thread index; values moved, not computed with,
/// so that wasmtime cannot fold a load into an instruction that reports
/// another operator's offset). The aligned-argument copy runs when `a` and
/// `out` are multiples of 4 and `c` of 8; any other pointer takes the
/// original, with its alignment tests.
const STRAIGHT: &str = r#"(module
  (import "tensorwasm_kernel" "thread_idx_x" (func $tid (result i32)))
  (memory (export "memory") 1)
  (func (export "kernel") (param $a i32) (param $out i32) (param $c i32)
    (local $t i32)
    (local.set $t (call $tid))
    (f32.store (i32.add (local.get $out) (i32.shl (local.get $t) (i32.const 3)))
      (f32.load (i32.add (local.get $a) (i32.shl (local.get $t) (i32.const 2)))))
    (f32.store offset=4 (i32.add (local.get $out) (i32.shl (local.get $t) (i32.const 3)))
      (f32.load offset=4 (i32.add (local.get $a) (i32.shl (local.get $t) (i32.const 2)))))
    (i64.store (i32.const 8) (i64.load (local.get $c)))))"#;

#[test]
fn the_aligned_argument_copy_matches_wasmtime() {
    let mut rng = rng("aligned_arguments");
    let mut trapped = 0;
    for _ in 0..300 {
        let args = [0; 3].map(|_| Arg(I32, pointer(&mut rng)));
        if let Outcome::Trapped { .. } = same_as_wasmtime(STRAIGHT, &args, &mut rng) {
            trapped += 1;
        }
    }
    assert!(trapped > 30 && trapped < 270, "{trapped} of 300 trapped");
    let clif = clif_of(STRAIGHT);
    let aligned = clif
        .lines()
        .filter(|l| l.contains(" aligned ") && (l.contains(" load") || l.contains(" store")))
        .count();
    // The copy's five accesses; the store at 8 is proven in both.
    assert_eq!(aligned, 7, "{clif}");
    assert!(clif.contains("band v0, "), "{clif}");
}

/// The host's choice of variant (`docs/kernels.md`, "Kernel variants") for
/// [`STRAIGHT`] on the guest's own grid: aligned pointers run the aligned
/// copy alone, a pointer off its alignment or a memory shorter than a page
/// the general body, and each run gives wasmtime's outcome and memory. The
/// kernel does not test the choice itself: the aligned copy launched with
/// the misaligned pointer reads it with its low bits masked off, and its
/// stores differ from wasmtime's, which this test also asserts, so a
/// wrong choice in [`Kernels::host`] fails here.
#[test]
fn a_misaligned_argument_runs_the_general_variant() {
    let wasm = wat::parse_str(STRAIGHT).expect("wat");
    let kernels = Kernels::new(&wasm);
    // `a`, `out` and `c`, inside the image's random first 4 KiB.
    let aligned = [Arg(I32, 1024), Arg(I32, 2048), Arg(I32, 2000)];
    let misaligned = [Arg(I32, 1026), Arg(I32, 2048), Arg(I32, 2000)];
    let mut rng = rng("variant_choice");
    for args in [aligned, misaligned] {
        assert_eq!(
            same_as_wasmtime(STRAIGHT, &args, &mut rng),
            Outcome::Returned,
            "{args:?}"
        );
    }
    assert_eq!(
        kernels.host(&aligned, PAGE).variant,
        KernelVariant::OWN_ALIGNED
    );
    assert_eq!(
        kernels.host(&misaligned, PAGE).variant,
        KernelVariant::OWN_GENERAL
    );
    assert_eq!(
        kernels.host(&aligned, PAGE / 2).variant,
        KernelVariant::OWN_GENERAL
    );
    let wrong = translate_variant(&wasm, KernelVariant::OWN_ALIGNED);
    let start = image(&mut rng);
    let (mut want, mut got) = (start.clone(), start);
    let expected = Reference::new(&wasm).run(&misaligned, &mut want);
    let outcome = interpret(&wrong, &misaligned, &mut got, PLENTY);
    assert!(
        outcome != expected || got != want,
        "the aligned copy on a misaligned pointer matched wasmtime: the test cannot tell \
         the variants apart"
    );
}

/// A loop without memory accesses, counted down from `$n` (the shape of
/// the Wasm-kernel benchmark's mul-add loop): its versioned copy drops
/// only the fuel test, and its chain of links runs the passes in eights.
/// Every count from 1 to 40 (chains and the copy's remainders) gives the
/// host's `f32` result; one fuel short traps at the header with nothing
/// stored; a zero count (2^32 passes) runs out of fuel.
#[test]
fn a_loop_without_accesses_runs_its_passes_exactly() {
    let wat = r#"(module (memory (export "memory") 1)
      (func (export "kernel") (param $n i32) (param $a f32) (param $b f32)
        (local $v f32)
        (local.set $v (f32.const 1.5))
        (loop $next
          (local.set $v (f32.add (f32.mul (local.get $v) (local.get $a)) (local.get $b)))
          (br_if $next (local.tee $n (i32.sub (local.get $n) (i32.const 1)))))
        (f32.store (i32.const 0) (local.get $v))))"#;
    let wasm = wat::parse_str(wat).expect("wat");
    let kernel = translate(&wasm);
    let header = offset_of(&wasm, 0, |op| matches!(op, Operator::Loop { .. }));
    let (a, b) = (0.999_f32, 0.25_f32);
    let args = |n: u64| {
        [
            Arg(I32, n),
            Arg(F32, u64::from(a.to_bits())),
            Arg(F32, u64::from(b.to_bits())),
        ]
    };
    for n in 1..=40u64 {
        let mut want = 1.5_f32;
        for _ in 0..n {
            want = want * a + b;
        }
        let mut memory = vec![0u8; PAGE];
        assert_eq!(
            interpret(&kernel, &args(n), &mut memory, n as i64),
            Outcome::Returned,
            "n = {n}"
        );
        assert_eq!(memory[..4], want.to_le_bytes(), "n = {n}");
        let mut memory = vec![0u8; PAGE];
        let short = interpret(&kernel, &args(n), &mut memory, n as i64 - 1);
        let trap = Outcome::Trapped {
            trap: KernelTrap::OutOfFuel,
            offset: header,
        };
        assert_eq!(short, trap, "n = {n}, one fuel short");
        assert_eq!(memory[..4], [0; 4], "n = {n}: nothing stored");
    }
    let mut memory = vec![0u8; PAGE];
    let endless = interpret(&kernel, &args(0), &mut memory, 1000);
    assert_eq!(
        endless,
        Outcome::Trapped {
            trap: KernelTrap::OutOfFuel,
            offset: header
        }
    );
}

/// A loop with a warp shuffle is not versioned: lanes of a warp could take
/// different copies (the entry test reads each lane's own values), and a
/// shuffle's lanes are those that run it together. Its fuel test (one in
/// each body: the kernel has an aligned-argument copy, taken by all lanes
/// alike) and its per-access bounds tests stay; the same loop without
/// the shuffle gets its versioned copy.
#[test]
fn a_loop_with_a_warp_collective_keeps_its_checks() {
    let wat = r#"(module
      (import "tensorwasm_kernel" "shfl_xor_i32" (func $xor (param i32 i32) (result i32)))
      (memory (export "memory") 1)
      (func (export "kernel") (param $p i32) (param $n i32)
        (local $s i32)
        (loop $next
          (local.set $s (i32.add (local.get $s)
            (call $xor (i32.load (local.get $p)) (i32.const 1))))
          (local.set $p (i32.add (local.get $p) (i32.const 4)))
          (br_if $next (local.tee $n (i32.sub (local.get $n) (i32.const 1)))))
        (i32.store (i32.const 0) (local.get $s))))"#;
    let clif = clif_of(wat);
    assert_eq!(traps(&clif, "trapz", KernelTrap::OutOfFuel), 2, "{clif}");
    assert!(!clif.contains(" notrap aligned "), "{clif}");
    let plain = wat.replace(
        "(call $xor (i32.load (local.get $p)) (i32.const 1))",
        "(i32.load (local.get $p))",
    );
    let clif = clif_of(&plain);
    assert!(clif.contains(" notrap aligned "), "{clif}");
}

/// A kernel of forty small loops: only the first 32 get a versioned copy
/// (each with its chain of 16 links, one access a pass), so what
/// `kernel_get` compiles stays bounded; the others keep their checks.
#[test]
fn a_kernel_of_many_loops_copies_at_most_32() {
    let one = r#"(local.set $k (local.get $n))
        (loop $l
          (local.set $s (i32.add (local.get $s) (i32.load (local.get $p))))
          (local.set $p (i32.add (local.get $p) (i32.const 4)))
          (br_if $l (local.tee $k (i32.sub (local.get $k) (i32.const 1)))))"#;
    let wat = format!(
        r#"(module (memory (export "memory") 1)
      (func (export "kernel") (param $p i32) (param $n i32) (local $k i32) (local $s i32)
        {}
        (i32.store (i32.const 0) (local.get $s))))"#,
        one.repeat(40)
    );
    let clif = clif_of(&wat);
    let trusted = clif
        .lines()
        .filter(|l| l.contains(" notrap aligned "))
        .count();
    assert_eq!(trusted, 32 * 17, "{clif}");
}
