//! Loop versioning (`core/src/lower/translate/version.rs`, with `loops.rs`,
//! `trip.rs` and `affine.rs`) on loops in the shapes people and compilers
//! write, against wasmtime: counted up or down, by steps of 1 to 2^30,
//! tested at the top (`br_if $done` out of a `block`) or the bottom
//! (`br_if $next` on the stepped value), by every compare, on `i32` and
//! `i64` induction variables, entered with starts and bounds at the edges
//! of their types (so that they wrap), zero-trip loops, loops whose last
//! pass leaves the memory, and `!=` loops whose step skips over the bound.
//! Each must give wasmtime's outcome, trap offset and memory (a store each
//! pass: the side effects before a trap are compared too). The
//! interpreter fails an access flagged `notrap` outside the memory or
//! `aligned` at a misaligned address, so a copy taken on a wrong count or
//! range fails the comparison. Then the translated CLIF: which shapes get
//! the copy, and that kernels as people write them (a matmul counted up
//! with its test at the top, loops from zig cc -O3) do.

#![cfg(feature = "lower")]

#[allow(dead_code)] // the translator suite's harness; these tests use part of it
mod harness;

use harness::Ty::{I32, I64};
use harness::*;
use tensorwasm_core::lower::KernelTrap;
use wasmparser::Operator;

/// Where a loop tests whether it goes on.
#[derive(Clone, Copy, Debug)]
enum Test {
    /// At the top: `br_if $done (i32.eqz (i CMP n))`.
    TopEqz,
    /// At the top, the compare turned around: `br_if $done (i !CMP n)`.
    TopComplement,
    /// At the bottom, on the stepped value: `br_if $next ((i + s) CMP n)`.
    Bottom,
}

/// A loop over induction variable `$i` (of `ty`) from `$i`'s argument,
/// stepped by `step`, going on while `i cmp $n`.
#[derive(Clone, Copy, Debug)]
struct Shape {
    ty: Ty,
    cmp: &'static str,
    step: i64,
    test: Test,
}

/// The compares and their complements.
const COMPARES: [(&str, &str); 9] = [
    ("lt_u", "ge_u"),
    ("le_u", "gt_u"),
    ("lt_s", "ge_s"),
    ("le_s", "gt_s"),
    ("gt_u", "le_u"),
    ("ge_u", "lt_u"),
    ("gt_s", "le_s"),
    ("ge_s", "lt_s"),
    ("ne", "eq"),
];

/// Steps: up and down, small, and one whose `i32` address step (`4 s`)
/// wraps to 4 while the compare sees a step near 2^30.
const STEPS: [i64; 8] = [1, 3, 4, 7, -1, -2, -5, 0x4000_0001];

impl Shape {
    /// The kernel: each pass adds the `i32` at `a + 4 i` (`i` wrapped to
    /// `i32`) to a running sum and stores the sum at `out`, which steps by
    /// 4; after the loop the sum goes to address 0.
    fn wat(self) -> String {
        let t = self.ty.name();
        let cmp = self.cmp;
        let not = COMPARES
            .iter()
            .find(|(c, _)| *c == cmp)
            .map(|(_, n)| *n)
            .expect("a compare");
        let wrap = match self.ty {
            I64 => "(i32.wrap_i64 (local.get $i))",
            _ => "(local.get $i)",
        };
        let step = self.step;
        let body = format!(
            r#"(local.set $s (i32.add (local.get $s)
              (i32.load (i32.add (local.get $a) (i32.shl {wrap} (i32.const 2))))))
            (i32.store (local.get $out) (local.get $s))
            (local.set $out (i32.add (local.get $out) (i32.const 4)))"#
        );
        let next = format!("({t}.add (local.get $i) ({t}.const {step}))");
        let looped = match self.test {
            Test::TopEqz => format!(
                r#"(block $done (loop $next
            (br_if $done (i32.eqz ({t}.{cmp} (local.get $i) (local.get $n))))
            {body}
            (local.set $i {next})
            (br $next)))"#
            ),
            Test::TopComplement => format!(
                r#"(block $done (loop $next
            (br_if $done ({t}.{not} (local.get $i) (local.get $n)))
            {body}
            (local.set $i {next})
            (br $next)))"#
            ),
            Test::Bottom => format!(
                r#"(loop $next
            {body}
            (br_if $next ({t}.{cmp} (local.tee $i {next}) (local.get $n))))"#
            ),
        };
        format!(
            r#"(module (memory (export "memory") 1)
  (func (export "kernel") (param $i {t}) (param $n {t}) (param $a i32) (param $out i32)
    (local $s i32)
    {looped}
    (i32.store (i32.const 0) (local.get $s))))"#
        )
    }

    /// Whether the analysis should count this loop: `!=`, or an order
    /// whose step goes towards the bound.
    fn counted(self) -> bool {
        let up = self.step > 0;
        match self.cmp {
            "ne" => true,
            "lt_u" | "le_u" | "lt_s" | "le_s" => up,
            _ => !up,
        }
    }

    fn mask(self) -> u64 {
        match self.ty {
            I64 => u64::MAX,
            _ => u64::from(u32::MAX),
        }
    }

    /// Arguments `(i, n, a, out)`: starts at the edges of the type and
    /// random ones; a bound some passes away (one off either side, or
    /// random); the first load near either end of the memory or inside
    /// it; `out` with room for a few or many passes; a few misaligned.
    fn args(self, rng: &mut Rng) -> [Arg; 4] {
        let mask = self.mask();
        let sign = (mask >> 1) + 1;
        let start = match rng.below(7) {
            0 => 0,
            1 => rng.below(100),
            2 => sign - 1 - rng.below(40),
            3 => mask - rng.below(40),
            4 => sign + rng.below(40),
            5 => sign.wrapping_sub(rng.below(40)) & mask,
            _ => rng.next() & mask,
        };
        let passes = match rng.below(5) {
            0 => 0,
            1 => 1,
            _ => rng.below(40),
        };
        let n = if rng.below(8) == 0 {
            rng.next() & mask
        } else {
            let off = [0u64, 0, 1, mask, 2][rng.below(5) as usize];
            start
                .wrapping_add((self.step as u64).wrapping_mul(passes))
                .wrapping_add(off)
                & mask
        };
        let first = match rng.below(6) {
            0 => 4 * rng.below(64),
            1 => PAGE as u64 - 4 * rng.below(64),
            2 => PAGE as u64 - 4 * passes - 4 * rng.below(3),
            3 => 4 * passes + 4 * rng.below(3),
            _ => 16384 + 4 * rng.below(4096),
        };
        let a = first.wrapping_sub(start.wrapping_mul(4)) as u32;
        let mut out = match rng.below(3) {
            0 => PAGE as u64 - 4 * passes - 4 * rng.below(3),
            _ => PAGE as u64 - 4 * rng.below(512),
        };
        let mut a = u64::from(a);
        if rng.below(12) == 0 {
            a += 1 + rng.below(3);
        }
        if rng.below(12) == 0 {
            out -= 1 + rng.below(3);
        }
        [
            Arg(self.ty, start),
            Arg(self.ty, n),
            Arg(I32, a),
            Arg(I32, out),
        ]
    }
}

/// `wat`'s kernel translated once (for every launch, and the variants the
/// host launches: [`Kernels`]) and run on each of `cases` both ways from
/// the same random memory: wasmtime's outcome and memory every time.
/// How many trapped.
fn compare_all(wat: &str, cases: &[Vec<Arg>], rng: &mut Rng) -> usize {
    compare_folded(wat, cases, rng, &[])
}

/// [`compare_all`] where wasmtime folds loads into the arithmetic that
/// uses them (`f32.mul` of a load, `x + x` of one: an x86 operand in
/// memory) and reports their traps at that arithmetic's offset: each
/// `(arithmetic, load)` of `folded` maps wasmtime's offset back to the
/// load's, which the kernel reports (docs/kernels.md: the trapping
/// operator's).
fn compare_folded(wat: &str, cases: &[Vec<Arg>], rng: &mut Rng, folded: &[(u32, u32)]) -> usize {
    let wasm = wat::parse_str(wat).expect("wat");
    let kernels = Kernels::new(&wasm);
    let mut reference = Reference::new(&wasm);
    let mut trapped = 0;
    for args in cases {
        let start = image(rng);
        let mut want = start.clone();
        let expected = match reference.run(args, &mut want) {
            Outcome::Trapped { trap, offset } => Outcome::Trapped {
                trap,
                offset: folded
                    .iter()
                    .find(|f| f.0 == offset)
                    .map_or(offset, |f| f.1),
            },
            returned => returned,
        };
        each_kernel_matches(
            &kernels,
            args,
            &start,
            &expected,
            &want,
            &format!("{wat}\n"),
        );
        if let Outcome::Trapped { .. } = expected {
            trapped += 1;
        }
    }
    trapped
}

/// Whether the kernel's CLIF has a versioned copy: accesses flagged
/// `notrap` (proven in bounds).
fn versioned(clif: &str) -> bool {
    clif.lines().any(|l| l.contains(" notrap "))
}

/// Every compare, test position and type, each with a step towards its
/// bound and another from [`STEPS`]: the counted ones get the copy, the
/// others keep their checks, and all match wasmtime on edge and random
/// starts, bounds and addresses.
#[test]
fn every_loop_shape_matches_wasmtime() {
    let mut rng = rng("loop_shapes");
    let (mut trapped, mut runs) = (0, 0);
    let mut shapes = 0;
    for (k, &(cmp, _)) in COMPARES.iter().enumerate() {
        for (j, test) in [Test::TopEqz, Test::TopComplement, Test::Bottom]
            .into_iter()
            .enumerate()
        {
            for ty in [I32, I64] {
                let towards = if cmp == "ne" || cmp.starts_with('l') {
                    STEPS[(k + j) % 4]
                } else {
                    STEPS[4 + (k + j) % 3]
                };
                let other = STEPS[(k * 3 + j * 2 + usize::from(ty == I64)) % STEPS.len()];
                for step in [towards, other] {
                    let shape = Shape {
                        ty,
                        cmp,
                        step,
                        test,
                    };
                    let wat = shape.wat();
                    let clif = clif_of(&wat);
                    assert_eq!(versioned(&clif), shape.counted(), "{shape:?}\n{clif}");
                    let cases: Vec<Vec<Arg>> =
                        (0..24).map(|_| shape.args(&mut rng).to_vec()).collect();
                    trapped += compare_all(&wat, &cases, &mut rng);
                    runs += cases.len();
                    shapes += 1;
                }
            }
        }
    }
    assert_eq!(shapes, 108);
    // Both paths ran: many inputs stay in bounds, many leave.
    assert!(
        trapped > runs / 10 && trapped < runs * 9 / 10,
        "{trapped} of {runs} trapped"
    );
}

/// The cases a wrong guard gets wrong, one by one, on `i32` loops counted
/// up with the test at the top (`for (i = start; i < n; i++) out[k++] =
/// s += a[i]`): in bounds (the copy); the last pass's load one element
/// past the memory (the original loop: the earlier passes' stores, then
/// the trap at the load); zero passes (nothing stored); a start past the
/// bound.
#[test]
fn the_last_pass_and_zero_passes_are_exact() {
    let mut rng = rng("loop_edges");
    let shape = Shape {
        ty: I32,
        cmp: "lt_u",
        step: 1,
        test: Test::TopEqz,
    };
    let wat = shape.wat();
    let wasm = wat::parse_str(&wat).expect("wat");
    let load = offset_of(&wasm, 0, |op| matches!(op, Operator::I32Load { .. }));
    let store = offset_of(&wasm, 0, |op| matches!(op, Operator::I32Store { .. }));
    let page = PAGE as u64;
    let args = |i: u64, n: u64, a: u64, out: u64| {
        vec![Arg(I32, i), Arg(I32, n), Arg(I32, a), Arg(I32, out)]
    };
    let cases = [
        // 100 passes, all in bounds.
        (args(0, 100, 1024, 8192), Outcome::Returned),
        // The load of the last pass (i = 99) ends 4 bytes past the memory.
        (
            args(0, 100, page - 4 * 99, 8192),
            Outcome::Trapped {
                trap: KernelTrap::HeapOutOfBounds,
                offset: load,
            },
        ),
        // Its last load ends at the memory's end: in bounds.
        (args(0, 100, page - 4 * 100, 8192), Outcome::Returned),
        // The store of the last pass ends 4 bytes past the memory.
        (
            args(0, 100, 1024, page - 4 * 99),
            Outcome::Trapped {
                trap: KernelTrap::HeapOutOfBounds,
                offset: store,
            },
        ),
        // Zero passes: the arrays may be anywhere.
        (args(7, 7, page, page), Outcome::Returned),
        (args(8, 7, page, page), Outcome::Returned),
        // One pass, its load past the end.
        (
            args(7, 8, page - 4 * 7 + 4, 8192),
            Outcome::Trapped {
                trap: KernelTrap::HeapOutOfBounds,
                offset: load,
            },
        ),
    ];
    for (args, want) in cases {
        let wasm_cases = vec![args.clone()];
        compare_all(&wat, &wasm_cases, &mut rng);
        let kernel = translate(&wasm);
        let mut memory = image(&mut rng);
        assert_eq!(
            interpret(&kernel, &args, &mut memory, PLENTY),
            want,
            "{args:?}"
        );
    }
}

/// Loops the count must refuse, one by one, each against wasmtime: a `!=`
/// loop whose step (4) skips over its bound (it goes on until its store
/// leaves the memory), `<=` up to the type's largest value (it wraps and
/// never ends), a signed loop that starts just below the bound and would
/// run 2^32 - 1 passes if its count wrapped, an `i64` loop across 2^32
/// (its addresses wrap in `i32`; its count must not), and a loop counted
/// down past zero, unsigned.
#[test]
fn loops_that_wrap_or_skip_their_bound_are_exact() {
    let mut rng = rng("loop_wraps");
    let page = PAGE as u64;
    let runs: [(Shape, Vec<[u64; 4]>); 5] = [
        (
            Shape {
                ty: I32,
                cmp: "ne",
                step: 4,
                test: Test::TopEqz,
            },
            vec![
                [0, 10, 1024, page - 4 * 40],
                [1, 10, 1024, page - 400],
                [0, 12, 1024, 8192],
            ],
        ),
        (
            Shape {
                ty: I32,
                cmp: "le_u",
                step: 1,
                test: Test::Bottom,
            },
            vec![
                [0xffff_fff0, 0xffff_ffff, 1024, page - 4 * 100],
                [0xffff_fff0, 0xffff_fff8, 1024, 8192],
            ],
        ),
        (
            Shape {
                ty: I32,
                cmp: "lt_s",
                step: 3,
                test: Test::Bottom,
            },
            vec![
                [0x7fff_fffc, 0x7fff_ffff, 1024, page - 4 * 100],
                [0x7fff_fff0, 0x7fff_fffe, 1024, 8192],
            ],
        ),
        (
            Shape {
                ty: I64,
                cmp: "lt_u",
                step: 1,
                test: Test::TopComplement,
            },
            vec![
                [0xffff_fff0, 0x1_0000_0010, 0x40, 8192],
                [0xffff_fff0, 0x1_0000_0010, 0x100, 8192],
                [u64::MAX - 3, u64::MAX, 1024, 8192],
            ],
        ),
        (
            Shape {
                ty: I32,
                cmp: "gt_u",
                step: -1,
                test: Test::Bottom,
            },
            vec![
                [5, 0, 1024, 8192],
                [5, 0xffff_fff0, 1024, page - 64],
                [0, 0, 1024, page - 64],
            ],
        ),
    ];
    for (shape, cases) in runs {
        let cases: Vec<Vec<Arg>> = cases
            .iter()
            .map(|c| {
                vec![
                    Arg(shape.ty, c[0]),
                    Arg(shape.ty, c[1]),
                    Arg(I32, c[2]),
                    Arg(I32, c[3]),
                ]
            })
            .collect();
        compare_all(&shape.wat(), &cases, &mut rng);
    }
}

/// A loop whose exit test runs only on some passes (`if (i & 1) { if (i
/// >= n) break; }`): its test does not bound every pass, so the loop has
/// no count and no copy; against wasmtime it runs past `n` when `n` is
/// even (to the next odd `i`) and its last passes leave the memory.
#[test]
fn an_exit_test_not_on_every_pass_gives_no_count() {
    let wat = r#"(module (memory (export "memory") 1)
      (func (export "kernel") (param $i i32) (param $n i32) (param $out i32)
        (block $done
          (loop $next
            (if (i32.and (local.get $i) (i32.const 1))
              (then (br_if $done (i32.ge_u (local.get $i) (local.get $n)))))
            (i32.store (i32.add (local.get $out) (i32.shl (local.get $i) (i32.const 2)))
              (local.get $i))
            (local.set $i (i32.add (local.get $i) (i32.const 1)))
            (br $next)))))"#;
    assert!(!versioned(&clif_of(wat)), "{}", clif_of(wat));
    let mut rng = rng("loop_odd_exit");
    let page = PAGE as u64;
    let cases: Vec<Vec<Arg>> = [
        [0, 10, 1024],
        // The store of `i = 10`, past `n`, leaves the memory.
        [0, 10, page - 4 * 10],
        // Odd `n`: the test at `i = 9` leaves before its store.
        [0, 9, page - 4 * 9],
        [3, 40, page - 4 * 41],
        [3, 40, page - 4 * 40],
    ]
    .iter()
    .map(|c| c.map(|v| Arg(I32, v)).to_vec())
    .collect();
    let trapped = compare_all(wat, &cases, &mut rng);
    assert_eq!(trapped, 2);
}

/// An address quadratic in the induction variable (`a[i * i]`) is not
/// affine: its first two passes' step predicts `4 (2 i0 + 1)` a pass, far
/// short of where the last passes read. Its load keeps its bounds test
/// (the loop is still copied: its fuel test goes), and against wasmtime
/// the pass whose `i * i` leaves the memory traps at the load.
#[test]
fn a_quadratic_address_keeps_its_test() {
    let wat = r#"(module (memory (export "memory") 1)
      (func (export "kernel") (param $i i32) (param $n i32) (param $a i32)
        (local $s i32)
        (block $done
          (loop $next
            (br_if $done (i32.ge_u (local.get $i) (local.get $n)))
            (local.set $s (i32.add (local.get $s)
              (i32.load (i32.add (local.get $a)
                (i32.shl (i32.mul (local.get $i) (local.get $i)) (i32.const 2))))))
            (local.set $i (i32.add (local.get $i) (i32.const 1)))
            (br $next)))
        (i32.store (i32.const 0) (local.get $s))))"#;
    let clif = clif_of(wat);
    assert!(!clif.contains(" notrap "), "{clif}");
    let mut rng = rng("loop_quadratic");
    let cases: Vec<Vec<Arg>> = [[0, 100, 0], [0, 200, 0], [10, 128, 64], [0, 129, 0]]
        .iter()
        .map(|c| c.map(|v| Arg(I32, v)).to_vec())
        .collect();
    // wasmtime folds the load into the `i32.add` that sums it.
    let wasm = wat::parse_str(wat).expect("wat");
    let load = offset_of(&wasm, 0, |op| matches!(op, Operator::I32Load { .. }));
    let add = offset_of(&wasm, 1, |op| matches!(op, Operator::I32Add));
    assert_eq!(compare_folded(wat, &cases, &mut rng, &[(add, load)]), 2);
}

/// Alignment the arguments do not give: the loop reads `i32`s at `a + d +
/// 4 i`, `d` read back from memory (where the aligned-argument copy cannot
/// see it). The copy flags its accesses `aligned`, so the entry test must
/// refuse it when `d` is not a multiple of 4 (the interpreter fails an
/// `aligned` access at a misaligned address): the original loop runs
/// those, with wasmtime's result.
#[test]
fn an_address_misaligned_at_run_time_takes_the_checked_loop() {
    let wat = r#"(module (memory (export "memory") 1)
      (func (export "kernel") (param $i i32) (param $n i32) (param $a i32) (param $d i32)
        (local $x i32) (local $s i32)
        (i32.store (i32.const 0) (local.get $d))
        (local.set $x (i32.add (local.get $a) (i32.load (i32.const 0))))
        (block $done
          (loop $next
            (br_if $done (i32.ge_u (local.get $i) (local.get $n)))
            (local.set $s (i32.add (local.get $s)
              (i32.load (i32.add (local.get $x) (i32.shl (local.get $i) (i32.const 2))))))
            (i32.store offset=8192 (i32.add (local.get $x) (i32.shl (local.get $i) (i32.const 2)))
              (local.get $s))
            (local.set $i (i32.add (local.get $i) (i32.const 1)))
            (br $next)))
        (i32.store (i32.const 4) (local.get $s))))"#;
    assert!(versioned(&clif_of(wat)));
    let mut rng = rng("loop_misaligned");
    let cases: Vec<Vec<Arg>> = (0..4u64)
        .flat_map(|d| [[0, 20, 1024, d], [5, 60, 2048, 8 + d], [0, 3, 4096, 64 + d]])
        .map(|c| c.map(|v| Arg(I32, v)).to_vec())
        .collect();
    assert_eq!(compare_all(wat, &cases, &mut rng), 0);
}

/// Fuel: a loop tested at the top runs its header once more than its
/// body. With exactly as much fuel as passes of its body it must take the
/// original loop, run every pass, and run out at the header's last test
/// (the copy needs the fuel of every header pass); with one more it
/// returns; with fewer it runs out after the passes the fuel paid for.
#[test]
fn fuel_counts_the_header_pass_that_leaves() {
    let shape = Shape {
        ty: I32,
        cmp: "lt_u",
        step: 1,
        test: Test::TopEqz,
    };
    let wasm = wat::parse_str(shape.wat()).expect("wat");
    let kernel = translate(&wasm);
    let header = offset_of(&wasm, 0, |op| matches!(op, Operator::Loop { .. }));
    let args = [0u64, 50, 1024, 8192].map(|v| Arg(I32, v));
    for (fuel, stored) in [(51i64, 50usize), (50, 50), (49, 49), (1, 1)] {
        let mut memory = vec![0u8; PAGE];
        for (i, b) in memory[1024..1024 + 200].iter_mut().enumerate() {
            *b = 1 + (i % 7) as u8;
        }
        let outcome = interpret(&kernel, &args, &mut memory, fuel);
        let done = (0..50)
            .filter(|i| memory[8192 + 4 * i..8196 + 4 * i] != [0; 4])
            .count();
        assert_eq!(done, stored, "fuel {fuel}");
        let want = if fuel > 50 {
            Outcome::Returned
        } else {
            Outcome::Trapped {
                trap: KernelTrap::OutOfFuel,
                offset: header,
            }
        };
        assert_eq!(outcome, want, "fuel {fuel}");
    }
}

/// The naive matmul as a person writes it in WAT: `k` counted up from 0,
/// the test `k >= n` at the top, `a[row * n + k]` and `b[k * n + col]`
/// (`row`, `col` from the thread's global id). Its inner loop gets the
/// versioned copy and the unrolled chain: both loads `notrap aligned` in
/// the copy and its eight links, the only fuel tests the two checked
/// loops' (each body's), the links' clock read once; and it matches
/// wasmtime on sizes and placements that stay in bounds and ones whose
/// last row leaves the memory.
const MATMUL_UP: &str = r#"(module
  (import "tensorwasm_kernel" "thread_idx_x" (func $tid (result i32)))
  (import "tensorwasm_kernel" "block_idx_x" (func $bid (result i32)))
  (import "tensorwasm_kernel" "block_dim_x" (func $bdim (result i32)))
  (memory (export "memory") 1)
  (func (export "kernel") (param $a i32) (param $b i32) (param $c i32) (param $n i32)
    (local $t i32) (local $row i32) (local $col i32) (local $k i32) (local $acc f32)
    (local.set $t (i32.add (i32.mul (call $bid) (call $bdim)) (call $tid)))
    (if (i32.ge_u (local.get $t) (i32.mul (local.get $n) (local.get $n)))
      (then (return)))
    (local.set $row (i32.div_u (local.get $t) (local.get $n)))
    (local.set $col (i32.rem_u (local.get $t) (local.get $n)))
    (block $done
      (loop $next
        (br_if $done (i32.ge_u (local.get $k) (local.get $n)))
        (local.set $acc (f32.add (local.get $acc)
          (f32.mul
            (f32.load (i32.add (local.get $a)
              (i32.shl (i32.add (i32.mul (local.get $row) (local.get $n)) (local.get $k)) (i32.const 2))))
            (f32.load (i32.add (local.get $b)
              (i32.shl (i32.add (i32.mul (local.get $k) (local.get $n)) (local.get $col)) (i32.const 2)))))))
        (local.set $k (i32.add (local.get $k) (i32.const 1)))
        (br $next)))
    (f32.store (i32.add (local.get $c) (i32.shl (local.get $t) (i32.const 2))) (local.get $acc))))"#;

#[test]
fn a_matmul_counted_up_and_tested_at_the_top_is_versioned() {
    let clif = clif_of(MATMUL_UP);
    let trusted_loads = clif
        .lines()
        .filter(|l| l.contains(" load.f32 notrap aligned "))
        .count();
    // The versioned copy and its chain's 16 links (two loads a pass: a
    // chain of 16, `unroll`'s wide factor), two loads each.
    assert_eq!(trusted_loads, 2 * 17, "{clif}");
    assert_eq!(traps(&clif, "trapz", KernelTrap::OutOfFuel), 2, "{clif}");
    // Each body's virtual block and checked loop, the versioned copy and
    // the chain's first link.
    assert_eq!(
        traps(&clif, "trapnz", KernelTrap::TimeLimit),
        2 + 2 + 2,
        "{clif}"
    );

    let mut rng = rng("matmul_up");
    // The harness's thread is global id 11 * 29 + 3 = 322 (block 11 of
    // 29 threads, thread 3): sizes from 18 (324 outputs) up.
    let mut cases = Vec::new();
    for n in [18u64, 19, 24, 31] {
        let bytes = 4 * n * n;
        for _ in 0..6 {
            let (a, b) = (4 * rng.below(1024), 4 * rng.below(1024));
            cases.push([a, b, 32768, n].map(|v| Arg(I32, v)).to_vec());
            // `b`'s last row ends past the memory (the last pass traps).
            let late = PAGE as u64 - bytes + 4 * rng.below(n);
            cases.push([a, late, 32768, n].map(|v| Arg(I32, v)).to_vec());
        }
    }
    // wasmtime folds the `b` load into the `f32.mul`.
    let wasm = wat::parse_str(MATMUL_UP).expect("wat");
    let b_load = offset_of(&wasm, 1, |op| matches!(op, Operator::F32Load { .. }));
    let mul = offset_of(&wasm, 0, |op| matches!(op, Operator::F32Mul));
    let trapped = compare_folded(MATMUL_UP, &cases, &mut rng, &[(mul, b_load)]);
    assert!(
        trapped > 0 && trapped < cases.len(),
        "{trapped} of {}",
        cases.len()
    );
}

/// Loops from zig cc 0.17.1 (clang), `-target wasm32-wasi -O3 -nostdlib
/// -fno-vectorize -fno-unroll-loops` (so that LLVM leaves one loop of the
/// C's shape), the loop's text from its `-S` output:
///
/// ```c
/// void strided(float *y, int from, int to) {
///     for (int i = from; i < to; i += 3) y[i] = y[i] * 2.0f;
/// }
/// void down(float *y, int n) {
///     for (int i = n - 1; i >= 0; i--) y[i] = y[i] + 1.0f;
/// }
/// ```
///
/// LLVM tests `strided` at the bottom on `i + 3 <s to` with a pointer
/// stepped by 12 beside `i`, and `down` on a counter `c - 1 >u 1` beside a
/// pointer stepped by -4: neither is the `c - 1 != 0` of a Rust loop.
const ZIG_LOOPS: &str = r#"(module (memory (export "memory") 1)
  (func $strided (export "strided") (param i32 i32 i32) (local f32)
    block
      local.get 1
      local.get 2
      i32.ge_s
      br_if 0
      local.get 0
      local.get 1
      i32.const 2
      i32.shl
      i32.add
      local.set 0
      loop
        local.get 0
        local.get 0
        f32.load
        local.tee 3
        local.get 3
        f32.add
        f32.store
        local.get 0
        i32.const 12
        i32.add
        local.set 0
        local.get 1
        i32.const 3
        i32.add
        local.tee 1
        local.get 2
        i32.lt_s
        br_if 0
      end
    end)
  (func $down (export "down") (param i32 i32) (local i32)
    block
      local.get 1
      i32.const 1
      i32.lt_s
      br_if 0
      local.get 1
      i32.const 1
      i32.add
      local.set 2
      local.get 1
      i32.const 2
      i32.shl
      local.get 0
      i32.add
      i32.const -4
      i32.add
      local.set 1
      loop
        local.get 1
        local.get 1
        f32.load
        f32.const 0x1p0
        f32.add
        f32.store
        local.get 1
        i32.const -4
        i32.add
        local.set 1
        local.get 2
        i32.const -1
        i32.add
        local.tee 2
        i32.const 1
        i32.gt_u
        br_if 0
      end
    end)
  (func (export "kernel") (param $which i32) (param $y i32) (param $from i32) (param $to i32)
    (if (local.get $which)
      (then (call $strided (local.get $y) (local.get $from) (local.get $to)))
      (else (call $down (local.get $y) (local.get $to))))))"#;

#[test]
fn loops_from_zig_cc_are_versioned() {
    let clif = clif_of(ZIG_LOOPS);
    // Each loop's copy and its chain's 16 links (one load a pass: a chain
    // of 16, `unroll`'s wide factor): a load and a store each.
    let trusted = clif
        .lines()
        .filter(|l| l.contains(" notrap aligned "))
        .count();
    assert_eq!(trusted, 2 * 2 * 17, "{clif}");
    let mut rng = rng("zig_loops");
    let page = PAGE as u64;
    let mut cases = Vec::new();
    for _ in 0..40 {
        let which = rng.below(2);
        let y = match rng.below(3) {
            0 => 4 * rng.below(256),
            1 => page - 4 * rng.below(300),
            _ => 4 * rng.below(8192),
        };
        let from = [0, 1, 0x7fff_fff0, 0x8000_0000, rng.below(50)][rng.below(5) as usize];
        let to = match rng.below(4) {
            0 => rng.next() & 0xffff_ffff,
            1 => (from + rng.below(100)) & 0xffff_ffff,
            2 => 0x7fff_ffff,
            _ => rng.below(300),
        };
        cases.push([which, y, from, to].map(|v| Arg(I32, v)).to_vec());
    }
    // wasmtime folds each load into the `f32.add` that uses it.
    let wasm = wat::parse_str(ZIG_LOOPS).expect("wat");
    let folded: Vec<(u32, u32)> = (0..2)
        .map(|k| {
            let load = offset_of(&wasm, k, |op| matches!(op, Operator::F32Load { .. }));
            let add = offset_of(&wasm, k, |op| matches!(op, Operator::F32Add));
            (add, load)
        })
        .collect();
    let trapped = compare_folded(ZIG_LOOPS, &cases, &mut rng, &folded);
    assert!(
        trapped > 0 && trapped < cases.len(),
        "{trapped} of {}",
        cases.len()
    );
}

/// A loop of a constant trip count, counted up and tested at the top
/// (`for (i = 0; i < 16; i += 2)`), is charged its fuel on entry
/// (`counted.rs`): its header runs 9 times (8 passes and the test that
/// leaves), so the entry traps `OutOfFuel` at the loop's offset unless the
/// fuel is at least 9, and the header tests no fuel and reads no clock.
/// With 9 fuel it runs every pass; with 8 it stores nothing.
#[test]
fn a_constant_loop_counted_up_is_charged_on_entry() {
    let wat = r#"(module (memory (export "memory") 1)
      (func (export "kernel") (param $out i32) (local $i i32)
        (block $done
          (loop $next
            (br_if $done (i32.ge_u (local.get $i) (i32.const 16)))
            (i32.store8 (i32.add (local.get $out) (local.get $i)) (i32.const 7))
            (local.set $i (i32.add (local.get $i) (i32.const 2)))
            (br $next)))))"#;
    let clif = clif_of(wat);
    assert_eq!(traps(&clif, "trapz", KernelTrap::OutOfFuel), 0, "{clif}");
    assert_eq!(traps(&clif, "trapnz", KernelTrap::OutOfFuel), 1, "{clif}");
    assert!(clif.contains("iconst.i64 9"), "{clif}");
    // The virtual block's time check only.
    assert_eq!(traps(&clif, "trapnz", KernelTrap::TimeLimit), 1, "{clif}");
    let wasm = wat::parse_str(wat).expect("wat");
    let kernel = translate(&wasm);
    let header = offset_of(&wasm, 0, |op| matches!(op, Operator::Loop { .. }));
    let mut memory = vec![0u8; PAGE];
    let args = [Arg(I32, 100)];
    assert_eq!(interpret(&kernel, &args, &mut memory, 9), Outcome::Returned);
    let stored: Vec<usize> = (0..PAGE).filter(|&i| memory[i] == 7).collect();
    assert_eq!(stored, (0..8).map(|k| 100 + 2 * k).collect::<Vec<_>>());
    let mut memory = vec![0u8; PAGE];
    assert_eq!(
        interpret(&kernel, &args, &mut memory, 8),
        Outcome::Trapped {
            trap: KernelTrap::OutOfFuel,
            offset: header
        }
    );
    assert!(memory.iter().all(|&b| b == 0));
    // At most 4096 header passes are charged on entry: `i < 8190` by 2
    // has 4096, `i < 8192` 4097 (its header keeps its fuel test).
    let at_most = |bound: u32| {
        let clif = clif_of(&wat.replace("(i32.const 16)", &format!("(i32.const {bound})")));
        traps(&clif, "trapz", KernelTrap::OutOfFuel)
    };
    assert_eq!(at_most(8190), 0);
    assert_eq!(at_most(8192), 1);
}
