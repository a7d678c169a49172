//! Guest bounds tests in 32 bits (`core/src/lower/translate/limits.rs`)
//! and merged per base (`merge.rs`) against wasmtime: runs of loads at
//! `p - 4`, `p`, `p + 4` and at `p +/- q`, and lone accesses of 1, 2, 4 and
//! 8 bytes behind offsets up to 2^32 - 16, at addresses near both ends of
//! the memory and near 2^32 (where `p - 4` wraps), must give wasmtime's
//! outcome, trap offset and memory every time. Then the translated CLIF's
//! shape: a lone access's test is one `i32` compare against a limit.

#[allow(dead_code)] // the translator suite's harness; these tests use part of it
mod harness;

use harness::Ty::I32;
use harness::*;
use tensorwasm_core::lower::KernelTrap;

/// A stencil's run: loads at `p - 4`, `p`, `p + OFFSET` (one base), `p +
/// q` and `p - q` (two more), stored at `out` as a sum of squares (each
/// loaded value used twice, so that wasmtime cannot fold a load into the
/// arithmetic that uses it, which would report its trap at the
/// arithmetic's offset).
const RUN: &str = r#"(module (memory (export "memory") 1)
  (func (export "kernel") (param $p i32) (param $q i32) (param $out i32)
    (local $a i32) (local $b i32) (local $c i32) (local $d i32) (local $e i32)
    (local.set $a (i32.load (i32.sub (local.get $p) (i32.const 4))))
    (local.set $b (i32.load (local.get $p)))
    (local.set $c (i32.load offset=OFFSET (local.get $p)))
    (local.set $d (i32.load16_u (i32.add (local.get $p) (local.get $q))))
    (local.set $e (i32.load8_u offset=3 (i32.sub (local.get $p) (local.get $q))))
    (i32.store (local.get $out)
      (i32.add
        (i32.add (i32.mul (local.get $a) (local.get $a)) (i32.mul (local.get $b) (local.get $b)))
        (i32.add (i32.mul (local.get $c) (local.get $c))
          (i32.add (i32.mul (local.get $d) (local.get $d)) (i32.mul (local.get $e) (local.get $e))))))))"#;

/// Loads of each size at `p + OFFSET`, each stored at `out` before the
/// next: runs of two tests (the load's, the store's).
const PAIRS: &str = r#"(module (memory (export "memory") 1)
  (func (export "kernel") (param $p i32) (param $q i32) (param $out i32)
    (i32.store8 (local.get $out) (i32.load8_u offset=OFFSET (local.get $p)))
    (i32.store16 (local.get $out) (i32.load16_u offset=OFFSET (local.get $p)))
    (i32.store (local.get $out) (i32.load offset=OFFSET (local.get $q)))
    (i64.store (local.get $out) (i64.load offset=OFFSET (local.get $q)))))"#;

/// Stores of each size at `p + OFFSET`, each alone in its branch: tests of
/// their own.
const LONE: &str = r#"(module (memory (export "memory") 1)
  (func (export "kernel") (param $p i32) (param $q i32) (param $out i32)
    (if (local.get $out) (then (i32.store8 offset=OFFSET (local.get $p) (i32.const 7))))
    (if (local.get $out) (then (i32.store16 offset=OFFSET (local.get $p) (i32.const 7))))
    (if (local.get $out) (then (i32.store offset=OFFSET (local.get $q) (i32.const 7))))
    (if (local.get $out) (then (i64.store offset=OFFSET (local.get $q) (i64.const 7))))))"#;

/// Addresses near both ends of the memory (every alignment), near 2^32,
/// and anywhere.
fn address(rng: &mut Rng) -> u64 {
    match rng.below(5) {
        0 => rng.below(16),
        1 => PAGE as u64 - rng.below(24),
        2 => 0x1_0000_0000 - 1 - rng.below(16),
        3 => rng.below(PAGE as u64),
        _ => rng.next() & 0xffff_ffff,
    }
}

#[test]
fn merged_and_narrowed_tests_match_wasmtime() {
    let mut rng = rng("bounds");
    let (mut trapped, mut runs) = (0, 0);
    for offset in [0u64, 4, 8, 65532] {
        for wat in [RUN, PAIRS, LONE] {
            let wat = wat.replace("OFFSET", &offset.to_string());
            for _ in 0..250 {
                let p = address(&mut rng);
                let q = match rng.below(3) {
                    0 => rng.below(64),
                    1 => address(&mut rng),
                    _ => p.wrapping_add(rng.below(8)) & 0xffff_ffff,
                };
                let out = match rng.below(4) {
                    0 => address(&mut rng),
                    _ => 1024 + rng.below(1024),
                };
                let args = [p, q, out].map(|v| Arg(I32, v));
                let outcome = same_as_wasmtime(&wat, &args, &mut rng);
                if let Outcome::Trapped { .. } = outcome {
                    trapped += 1;
                }
                runs += 1;
            }
        }
    }
    // Both ways ran: many inputs stay in bounds, many leave.
    assert!(
        trapped > runs / 10 && trapped < runs * 9 / 10,
        "{trapped} of {runs} trapped"
    );
}

/// The edges one by one: each lone access exactly at the memory's end and
/// one byte past it, and the run with `p - 4` at 0 and wrapped.
#[test]
fn each_edge_gives_wasmtime_s_result() {
    let mut rng = rng("bounds_edges");
    let end = PAGE as u64;
    for (offset, wat) in [0u64, 4, 32764]
        .into_iter()
        .flat_map(|o| [(o, PAIRS), (o, LONE)])
    {
        let wat = wat.replace("OFFSET", &offset.to_string());
        // The byte and the half-word at the last byte(s), then one past;
        // the word and the double word at the last bytes, then one past.
        let last = end - offset;
        for (p, q, expect_trap) in [
            (last - 2, 0, false),
            (last - 1, 0, true),
            (last - 2, last - 8, false),
            (last - 2, last - 7, true),
        ] {
            let outcome =
                same_as_wasmtime(&wat, &[Arg(I32, p), Arg(I32, q), Arg(I32, 64)], &mut rng);
            assert_eq!(
                matches!(outcome, Outcome::Trapped { .. }),
                expect_trap,
                "offset {offset}, p {p}, q {q}: {outcome:?}"
            );
        }
    }
    let wat = RUN.replace("OFFSET", "4");
    for (p, expect_trap) in [
        (4, false),
        (3, true),
        (0, true),
        (end - 8, false),
        (end - 7, true),
    ] {
        let outcome = same_as_wasmtime(&wat, &[Arg(I32, p), Arg(I32, 0), Arg(I32, 64)], &mut rng);
        assert_eq!(
            matches!(outcome, Outcome::Trapped { .. }),
            expect_trap,
            "p {p}: {outcome:?}"
        );
    }
}

/// A lone access's bounds test is `icmp uge` of its `i32` address against
/// a limit (no 64-bit sum), but, in the original body (which may run on a
/// 4 GiB memory), a one-byte access's at offset 0 (end 1), which keeps the
/// 64-bit form (the last byte of a 4 GiB memory).
#[test]
fn lone_tests_compare_in_32_bits() {
    let clif = clif_of(&LONE.replace("OFFSET", "0"));
    let definition = |value: &str| {
        clif.lines()
            .map(str::trim)
            .map(|l| {
                l.split_once(' ').map_or(
                    l,
                    |(at, rest)| if at.starts_with('@') { rest.trim() } else { l },
                )
            })
            .find(|l| l.starts_with(&format!("{value} = ")))
            .map(str::to_owned)
            .unwrap_or_else(|| panic!("{value} is defined in\n{clif}"))
    };
    let code = format!(", {}", KernelTrap::HeapOutOfBounds.trap_code());
    let compares: Vec<String> = clif
        .lines()
        .filter_map(|l| l.trim_end().strip_suffix(&code))
        .filter_map(|l| l.split_whitespace().last().map(str::to_owned))
        .map(|v| definition(&v))
        .collect();
    // Four stores, one of a byte, in the body and in its copy for aligned
    // arguments (where the byte's test is narrow too).
    assert_eq!(compares.len(), 8, "{clif}");
    let narrow = compares.iter().filter(|d| d.contains(" uge ")).count();
    let wide = compares.iter().filter(|d| d.contains(" ugt ")).count();
    assert_eq!((narrow, wide), (7, 1), "{compares:#?}");
}

/// In the copy for aligned arguments, which runs only on memories of 64
/// KiB to 4 GiB less 16 MiB (the entry tests the length), a run's guest
/// tests at `j - 8`, `j` and `j + 8` are one test; in the original body,
/// which may run on a larger memory (where those addresses can wrap around
/// 2^32 apart), only the two at `j` are.
#[test]
fn the_aligned_copy_tests_each_base_once() {
    let clif = clif_of(
        r#"(module (memory 1)
  (func (export "kernel") (param $j i32) (param $out i32)
    (i64.store (local.get $out) (i64.add (i64.add
      (i64.load offset=0 (local.get $j)) (i64.load (i32.sub (local.get $j) (i32.const 8))))
      (i64.load offset=8 (local.get $j))))))"#,
    );
    assert!(
        clif.lines()
            .any(|l| l.contains(" = icmp ule ") && l.ends_with("= 0xfeff_0000")),
        "the entry tests the memory's length:\n{clif}"
    );
    // The entry's `bor` of the arguments' low bits; the copy's run: two
    // tests (the loads', the store's), one `bor`; the original's: three
    // (`j`'s two loads, `j - 8`'s, the store's), two.
    let bors = clif.lines().filter(|l| l.contains(" = bor ")).count();
    assert_eq!(bors, 4, "{clif}");
}

/// A 5-point stencil as C compilers write it: each row's address computed
/// (`(row +- 1) * n`, shifted) between the loads, so the arithmetic lies
/// inside the run of tests. It has no effect and cannot trap, so `merge`
/// moves it before the run's first test and the run stays whole: every
/// body makes one branch for its five loads and the store (the cold path
/// replays the six tests in order), where the rows' arithmetic used to end
/// the run at each row. Against wasmtime at rows and columns that put
/// each neighbour in turn past either end of the memory (each loaded
/// value is used twice, so wasmtime reports a trap at the load).
const STENCIL: &str = r#"(module (memory (export "memory") 1)
  (func (export "kernel") (param $a i32) (param $out i32) (param $row i32) (param $col i32) (param $n i32)
    (local $c i32) (local $l i32) (local $r i32) (local $u i32) (local $d i32)
    (local.set $c (i32.load (i32.add (local.get $a)
      (i32.shl (i32.add (i32.mul (local.get $row) (local.get $n)) (local.get $col)) (i32.const 2)))))
    (local.set $l (i32.load offset=4 (i32.add (local.get $a)
      (i32.shl (i32.add (i32.mul (local.get $row) (local.get $n)) (local.get $col)) (i32.const 2)))))
    (local.set $r (i32.load (i32.sub (i32.add (local.get $a)
      (i32.shl (i32.add (i32.mul (local.get $row) (local.get $n)) (local.get $col)) (i32.const 2))) (i32.const 4))))
    (local.set $u (i32.load (i32.add (local.get $a)
      (i32.shl (i32.add (i32.mul (i32.add (local.get $row) (i32.const 1)) (local.get $n)) (local.get $col)) (i32.const 2)))))
    (local.set $d (i32.load (i32.add (local.get $a)
      (i32.shl (i32.add (i32.mul (i32.sub (local.get $row) (i32.const 1)) (local.get $n)) (local.get $col)) (i32.const 2)))))
    (i32.store (local.get $out)
      (i32.add
        (i32.add (i32.mul (local.get $c) (local.get $c)) (i32.mul (local.get $l) (local.get $l)))
        (i32.add (i32.mul (local.get $r) (local.get $r))
          (i32.add (i32.mul (local.get $u) (local.get $u)) (i32.mul (local.get $d) (local.get $d))))))))"#;

#[test]
fn a_run_whose_addresses_are_computed_between_its_loads_stays_whole() {
    let clif = clif_of(STENCIL);
    // Two bodies (the aligned-argument copy and the original), one run
    // each: one cold path each, replaying six tests.
    let cold = clif
        .lines()
        .filter(|l| l.trim_end().ends_with("trap user2"))
        .count();
    assert_eq!(cold, 2, "{clif}");
    assert_eq!(
        traps(&clif, "trapnz", KernelTrap::HeapOutOfBounds),
        2 * 6,
        "{clif}"
    );
    // Every test is in a cold block (one that ends in the trap): none is
    // left on the hot path.
    let hot: usize = clif
        .split("\n\n")
        .filter(|block| {
            !block
                .trim_end()
                .trim_end_matches('}')
                .trim_end()
                .ends_with("trap user2")
        })
        .map(|block| traps(block, "trapnz", KernelTrap::HeapOutOfBounds))
        .sum();
    assert_eq!(hot, 0, "{clif}");

    let mut rng = rng("bounds_stencil");
    let (mut trapped, mut runs) = (0, 0);
    for _ in 0..400 {
        let n = 1 + rng.below(64);
        let a = match rng.below(4) {
            0 => 4 * rng.below(64),
            1 => PAGE as u64 - 4 * n * rng.below(4) - 4 * rng.below(4),
            2 => address(&mut rng),
            _ => 4 * rng.below(8192),
        };
        let row = [0, 1, rng.below(64), 0xffff_ffff][rng.below(4) as usize];
        let col = [0, 1, n - 1, rng.below(64), 0xffff_ffff][rng.below(5) as usize];
        let out = match rng.below(3) {
            0 => address(&mut rng),
            _ => 8 * rng.below(4096),
        };
        let args = [a, out, row, col, n].map(|v| Arg(I32, v));
        if let Outcome::Trapped { .. } = same_as_wasmtime(STENCIL, &args, &mut rng) {
            trapped += 1;
        }
        runs += 1;
    }
    assert!(
        trapped > runs / 10 && trapped < runs * 9 / 10,
        "{trapped} of {runs} trapped"
    );

    // A gather: the second address is the first load's value, which no
    // move may take above that load's own test.
    let (mut trapped, mut runs) = (0, 0);
    for _ in 0..200 {
        let args = [address(&mut rng), address(&mut rng), address(&mut rng)].map(|v| Arg(I32, v));
        if let Outcome::Trapped { .. } = same_as_wasmtime(GATHER, &args, &mut rng) {
            trapped += 1;
        }
        runs += 1;
    }
    assert!(trapped > 0 && trapped < runs, "{trapped} of {runs} trapped");
}

/// `out = a[p[0]] + p[4]`: the second load's address is the first load's
/// value (used twice, so that wasmtime reports a trap at its load).
const GATHER: &str = r#"(module (memory (export "memory") 1)
  (func (export "kernel") (param $a i32) (param $p i32) (param $out i32) (local $i i32)
    (local.set $i (i32.load (local.get $p)))
    (i32.store (local.get $out)
      (i32.add (i32.add (local.get $i) (local.get $i))
        (i32.add (i32.load (i32.add (local.get $a) (i32.shl (local.get $i) (i32.const 2))))
                 (i32.load offset=4 (local.get $p)))))))"#;

/// A gather as hashing and ring-buffer kernels write it: loads at `x +
/// ((i + c) & m) << 2` for several `c` (one at an offset), each loaded
/// value used twice. `merge` tests the run's masked loads once, `x + (m <<
/// 2) + E <= len` in 64 bits (`E` the farthest load's end), and replays
/// each load's own test on the cold path when that fails.
const MASKED_GATHER: &str = r#"(module (memory (export "memory") 1)
  (func (export "kernel") (param $x i32) (param $i i32) (param $m i32) (param $out i32)
    (local $a f32) (local $b f32) (local $c f32) (local $d f32)
    (local.set $a (f32.load (i32.add (local.get $x)
      (i32.shl (i32.and (i32.add (local.get $i) (i32.const 7)) (local.get $m)) (i32.const 2)))))
    (local.set $b (f32.load (i32.add (local.get $x)
      (i32.shl (i32.and (i32.add (local.get $i) (i32.const 4099)) (local.get $m)) (i32.const 2)))))
    (local.set $c (f32.load offset=8 (i32.add (local.get $x)
      (i32.shl (i32.and (i32.mul (local.get $i) (i32.const 31)) (local.get $m)) (i32.const 2)))))
    (local.set $d (f32.load (i32.add (local.get $x)
      (i32.shl (i32.and (local.get $m) (i32.xor (local.get $i) (i32.const 0x5555))) (i32.const 2)))))
    (f32.store (local.get $out)
      (f32.add (f32.add (f32.mul (local.get $a) (local.get $a)) (f32.mul (local.get $b) (local.get $b)))
        (f32.add (f32.mul (local.get $c) (local.get $c)) (f32.mul (local.get $d) (local.get $d)))))))"#;

/// A row read as a warp-per-row softmax reads it: `x[min(j, last)]` for
/// columns `j = l, l + 32, ...` past the row's end (no branch around the
/// load), the minimum written both ways a compiler writes it (`select(j
/// < last, j, last)` and `select(last > j, j, last)`, also `<=`), and
/// one at `max(j, last)` (the same shape, the operands swapped: no bound),
/// each loaded value used twice. `merge` tests the clamped loads once, `x +
/// (last << 2) + E <= len` in 64 bits, and replays each load's own test on
/// the cold path when that fails.
const CLAMPED_ROW: &str = r#"(module (memory (export "memory") 1)
  (func (export "kernel") (param $x i32) (param $l i32) (param $last i32) (param $out i32)
    (local $j i32) (local $a f32) (local $b f32) (local $c f32) (local $d f32) (local $e f32)
    (local.set $j (local.get $l))
    (local.set $a (f32.load (i32.add (local.get $x) (i32.shl
      (select (local.get $j) (local.get $last) (i32.lt_u (local.get $j) (local.get $last)))
      (i32.const 2)))))
    (local.set $j (i32.add (local.get $l) (i32.const 32)))
    (local.set $b (f32.load (i32.add (local.get $x) (i32.shl
      (select (local.get $j) (local.get $last) (i32.gt_u (local.get $last) (local.get $j)))
      (i32.const 2)))))
    (local.set $j (i32.add (local.get $l) (i32.const 64)))
    (local.set $c (f32.load offset=4 (i32.add (local.get $x) (i32.shl
      (select (local.get $last) (local.get $j) (i32.le_u (local.get $last) (local.get $j)))
      (i32.const 2)))))
    (local.set $j (i32.add (local.get $l) (i32.const 96)))
    (local.set $d (f32.load (i32.add (local.get $x) (i32.shl
      (select (local.get $j) (local.get $last) (i32.ge_u (local.get $last) (local.get $j)))
      (i32.const 2)))))
    (local.set $j (i32.add (local.get $l) (i32.const 128)))
    (local.set $e (f32.load (i32.add (local.get $x) (i32.shl
      (select (local.get $last) (local.get $j) (i32.lt_u (local.get $j) (local.get $last)))
      (i32.const 2)))))
    (f32.store (local.get $out)
      (f32.add (f32.add (f32.mul (local.get $a) (local.get $a)) (f32.mul (local.get $b) (local.get $b)))
        (f32.add (f32.add (f32.mul (local.get $c) (local.get $c)) (f32.mul (local.get $d) (local.get $d)))
          (f32.mul (local.get $e) (local.get $e)))))))"#;

#[test]
fn a_clamped_row_is_tested_once_and_traps_where_wasmtime_does() {
    let clif = clif_of(CLAMPED_ROW);
    // The hot path's test: the bound (`last`, the third parameter, v2)
    // widened, to be shifted and added to `x`.
    assert!(
        clif.lines().any(|l| l.ends_with("= uextend.i64 v2")),
        "no clamped group test:\n{clif}"
    );
    let mut rng = rng("bounds_clamped");
    let trapped = trapped_runs(CLAMPED_ROW, 600, &mut rng, |rng| {
        // Rows inside the page, rows whose bound reaches past it (while
        // the columns may not), and any.
        let last = match rng.below(4) {
            0 => rng.below(1024),
            1 => (1 << (14 + rng.below(4))) - 1,
            2 => rng.below(PAGE as u64 / 4),
            _ => rng.next() & 0xffff_ffff,
        };
        let x = base_below(rng, last);
        let l = match rng.below(3) {
            0 => rng.below(32),
            1 => 0xffff_ffff - rng.below(100),
            _ => rng.next() & 0xffff_ffff,
        };
        [x, l, last, 8 * rng.below(2048)]
    });
    assert_some_trapped(trapped, 600);
}

/// Runs `wat` against wasmtime `runs` times, on the four `i32` arguments
/// `args` makes each time; how many runs trapped.
fn trapped_runs(
    wat: &str,
    runs: usize,
    rng: &mut Rng,
    mut args: impl FnMut(&mut Rng) -> [u64; 4],
) -> usize {
    (0..runs)
        .filter(|_| {
            let args = args(rng).map(|v| Arg(I32, v));
            matches!(same_as_wasmtime(wat, &args, rng), Outcome::Trapped { .. })
        })
        .count()
}

/// Asserts that more than a tenth and less than nine tenths of `runs`
/// trapped: the arguments reach both sides of the bounds.
fn assert_some_trapped(trapped: usize, runs: usize) {
    assert!(
        trapped > runs / 10 && trapped < runs * 9 / 10,
        "{trapped} of {runs} trapped"
    );
}

/// A base for loads at up to `bound` 4-byte elements past it: near the
/// start of the page, so that the farthest load is just past its end
/// (bounds past 2^14 elements wrapped), anywhere, or far.
fn base_below(rng: &mut Rng, bound: u64) -> u64 {
    (match rng.below(4) {
        0 => 4 * rng.below(64),
        1 => (PAGE as u64).wrapping_sub(4 * ((bound & 0x3fff) + 1) + 4 * rng.below(4)),
        2 => address(rng),
        _ => 4 * rng.below(8192),
    }) & 0xffff_ffff
}

#[test]
fn a_masked_gather_is_tested_once_and_traps_where_wasmtime_does() {
    let clif = clif_of(MASKED_GATHER);
    // The hot path's test of the gather: the mask (`m`, the third
    // parameter, v2) widened, to be shifted and added to `x`.
    assert!(
        clif.lines().any(|l| l.ends_with("= uextend.i64 v2")),
        "no masked group test:\n{clif}"
    );
    let mut rng = rng("bounds_gather");
    let trapped = trapped_runs(MASKED_GATHER, 600, &mut rng, |rng| {
        // Masks that keep the gather inside the page, that reach past it
        // (while the indices may not), and any.
        let m = match rng.below(4) {
            0 => (1 << rng.below(14)) - 1,
            1 => (1 << (14 + rng.below(4))) - 1,
            2 => rng.below(PAGE as u64 / 4),
            _ => rng.next() & 0xffff_ffff,
        };
        let x = base_below(rng, m);
        let i = match rng.below(3) {
            0 => rng.below(64),
            1 => 0xffff_ffff - rng.below(8),
            _ => rng.next() & 0xffff_ffff,
        };
        [x, i, m, 8 * rng.below(2048)]
    });
    assert_some_trapped(trapped, 600);
}

/// Guarded stores as an unrolled row loop writes them: `if (j < n) y[j] =
/// e * s` per column, the guard both ways round (a `br_if` past the store,
/// an `if` around it), each arm's value computed inside it, stores of
/// every width. `guarded` moves each arm's arithmetic and test above its
/// guard (the test then traps only when the guard holds) and leaves the
/// store alone behind the branch.
const GUARDED: &str = r#"(module (memory (export "memory") 1)
  (func (export "kernel") (param $y i32) (param $l i32) (param $n i32) (param $s f32)
    (local $j i32)
    (local.set $j (local.get $l))
    (block $skip
      (br_if $skip (i32.ge_u (local.get $j) (local.get $n)))
      (f32.store (i32.add (local.get $y) (i32.shl (local.get $j) (i32.const 2)))
        (f32.mul (local.get $s) (f32.convert_i32_u (local.get $j)))))
    (local.set $j (i32.add (local.get $l) (i32.const 32)))
    (if (i32.lt_u (local.get $j) (local.get $n))
      (then (f32.store offset=4 (i32.add (local.get $y) (i32.shl (local.get $j) (i32.const 2)))
        (f32.div (local.get $s) (f32.convert_i32_u (local.get $j))))))
    (local.set $j (i32.add (local.get $l) (i32.const 64)))
    (if (i32.lt_u (local.get $j) (local.get $n))
      (then (i64.store (i32.add (local.get $y) (i32.shl (local.get $j) (i32.const 3)))
        (i64.extend_i32_u (local.get $j)))))
    (local.set $j (i32.add (local.get $l) (i32.const 96)))
    (block $skip
      (br_if $skip (i32.eqz (i32.lt_u (local.get $j) (local.get $n))))
      (i32.store8 (i32.add (local.get $y) (local.get $j)) (local.get $j)))))"#;

#[test]
fn guarded_stores_are_tested_above_their_guards_and_trap_where_wasmtime_does() {
    let clif = clif_of(GUARDED);
    // Each arm's test is combined with its guard.
    let combined = clif
        .lines()
        .filter(|l| l.contains("= band.i8 ") || l.contains("= band "))
        .count();
    assert!(combined >= 4, "{combined} guarded tests:\n{clif}");
    let mut rng = rng("bounds_guarded");
    let (mut trapped, mut skipped, mut runs) = (0, 0, 0);
    for _ in 0..800 {
        // Rows anywhere, rows that end at the memory's end, addresses that
        // are out of bounds while the guard fails.
        let y = match rng.below(4) {
            0 => 4 * rng.below(64),
            1 => PAGE as u64 - 4 * rng.below(160),
            2 => address(&mut rng),
            _ => rng.next() & 0xffff_ffff,
        };
        let l = match rng.below(3) {
            0 => rng.below(32),
            1 => 0xffff_ffff - rng.below(100),
            _ => rng.next() & 0xffff_ffff,
        };
        let n = match rng.below(4) {
            0 => l.wrapping_add(rng.below(130)) & 0xffff_ffff,
            1 => rng.below(200),
            2 => 0xffff_ffff,
            _ => rng.next() & 0xffff_ffff,
        };
        // A float's bits: finite, positive, from 0.5 up.
        let s = rng.next() & 0x3fff_ffff | 0x3f00_0000;
        let args = [
            Arg(I32, y),
            Arg(I32, l),
            Arg(I32, n),
            Arg(harness::Ty::F32, s),
        ];
        match same_as_wasmtime(GUARDED, &args, &mut rng) {
            Outcome::Trapped { .. } => trapped += 1,
            Outcome::Returned if y >= PAGE as u64 => skipped += 1,
            Outcome::Returned => {}
        }
        runs += 1;
    }
    // Some runs trap, and some return with every out-of-bounds store's
    // guard failing (a test that ignored its guard would trap there).
    assert!(
        trapped > runs / 10 && trapped < runs * 9 / 10 && skipped > runs / 20,
        "{trapped} of {runs} trapped, {skipped} returned with y out of bounds"
    );
}
