//! Bounds tests merged. Every access to guest or shared memory is preceded
//! by its own test (a guest access: `trapnz(icmp ugt (uextend(addr) + k),
//! mem_len)`, `k` its offset and size; a shared one: `trapnz(icmp uge
//! offset, bound)`, `bound` the least out-of-bounds offset for its size,
//! worked out at entry), and a tiled kernel makes many accesses close to
//! one another: SGEMM's inner loop reads shared `a + 0, a + 128, a + 256,
//! a + 384` and the same of `b`; its tile loads read guest memory at one
//! address with offsets 0, 4, 8, 12. This pass replaces each run of such
//! tests by one test per base, without changing which trap a kernel
//! reports.
//!
//! A *run* is a stretch of a block from one bounds test to the next
//! instruction that has an effect or can trap (a store, call, branch,
//! other trap): only quiet code (arithmetic, loads, each behind its own
//! test) lies between its tests, so nothing observable happens between the
//! first and the last. Each test's address is written as a sum of *leaves*
//! (values available at the run's first test) and a constant, through the
//! `iadd`s (and `isub`s of a constant) and constants the run itself
//! computes. A leaf the run computes by arithmetic that has no effect and
//! cannot trap, from values available at its first test (a C stencil's
//! `(row + 1) * n << 2` between two loads), becomes available there once
//! that arithmetic is moved before the first test, which nothing can
//! observe; a test whose address needs anything else the run computes (a
//! loaded value: a gather) ends the run. Tests of the same kind and leaves
//! form a *group*:
//!
//! - guest accesses at one `i32` address (same leaves and constant) with
//!   ends `k_i`: the group's test is the member's of largest `k` (the
//!   `i64` sums cannot wrap), which passes only if every member's does;
//! - in a *bounded* block (`limits`: the copy for aligned arguments, which
//!   runs only on memories of at most 4 GiB less 16 MiB), guest accesses
//!   at `x + d_i` (the same leaves, `x` their sum plus the least constant,
//!   `d_i < 2^24`) with ends `k_i`: the group's test is `x < lim_E`, `E`
//!   the largest `d_i + k_i`. When it passes, `x + E <= len`, so no `x +
//!   d_i` wraps and every member's access is in bounds; when every
//!   member's passes, `x` is below `len` and no `x + d_i` wraps (`len +
//!   2^24 <= 2^32`), so it passes too. The hot path's accesses then use
//!   one 64-bit base, `uextend(x)`, plus `d_i`;
//! - shared accesses at offsets `y + d_i` (`y` the leaves' sum plus the
//!   least constant, `d_i >= 0`): with `*` the member of largest `d +
//!   bytes`, the group's test is `y >= max(bound(bytes*) - d*, 0)`. When it
//!   passes, `y + d* + bytes* <= size`, so every member's `y + d_i +
//!   bytes_i <= size` (no wrap: a block's shared memory is far below
//!   2^31). When it fails, some member fails: `*` when `y + d*` does not
//!   wrap, else the member at `d = 0` (its offset `y` is then near 2^32).
//!
//! - guest accesses whose addresses have one leaf `(a_i & m) << s` (an
//!   index masked to a range: a gather, a ring buffer) or `min(a_i, m) <<
//!   s` (unsigned; an index clamped to a row's last element, read past the
//!   row's end instead of branching around the load), the other leaves
//!   the same, at constants `d_i` apart: the group's test is
//!   `uextend(x) + (uextend(m) << s) + E <= len` in 64 bits (`x` the other
//!   leaves' sum plus the least constant, `E` the largest `d_i + k_i`).
//!   When it passes, `a_i & m <= m` (or `min(a_i, m) <= m`) and no sum
//!   wraps, so every member's access is in bounds; it may fail while every
//!   member's passes (a mask past the memory's end), so the cold path then
//!   goes on to the hot one.
//!
//! At the run's first test the block branches, when any group's test
//! fails, to a cold block that makes the run's tests one by one in their
//! order (each with its own source location) and so traps exactly where
//! the kernel did (or, with a masked group, goes on to the hot path when
//! none traps); the run's tests are removed. A test in no group is a
//! group of its own, so a run's tests all become one branch and its loads
//! follow it in one block, which the GPU's compiler can schedule together
//! (a stencil's nine loads at six addresses went from 0.66x to 0.75x of
//! its nvcc twin on an H100; with one group and one base per row, and the
//! 32-bit tests of `limits`, 0.85x).

use alloc::collections::{BTreeMap, BTreeSet};
use alloc::vec::Vec;

use cranelift_codegen::cursor::{Cursor, FuncCursor};
use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::types::{I32, I64};
use cranelift_codegen::ir::{
    Block, Function, Inst, InstBuilder, InstructionData, Opcode, SourceLoc, Value,
};

use super::align::{compare_trap, constant};
use super::body::SHARED_ACCESS_BYTES;
use super::limits::{Exact, GuestLimits, guest_test};
use super::loops::pure;
use crate::lower::KernelTrap;

/// The most leaves an address may have.
const MAX_LEAVES: usize = 4;

/// The deepest nest of `iadd`s an address is summed through.
const MAX_DEPTH: usize = 8;

/// The most tests a run holds (a longer stretch makes several runs): a
/// run's grouping compares its tests pairwise.
const MAX_RUN: usize = 64;

/// The largest distance `d` between a shared group's members (larger: the
/// members are tested alone).
const MAX_DISTANCE: i64 = 1 << 24;

/// What a test compares its `i32` address against.
#[derive(Clone, Copy, PartialEq)]
enum Limit {
    /// Shared memory: out when `address >= bounds[size]` (`size` indexes
    /// [`SHARED_ACCESS_BYTES`]).
    Shared { size: usize },
    /// Guest memory: out when `uextend(address) + end > len`;
    /// `extended` is the test's `uextend(address)`.
    Guest {
        end: i64,
        len: Value,
        extended: Value,
    },
}

/// One bounds test of a run.
struct Test {
    inst: Inst,
    /// The address: the sum of `leaves` (sorted) and `constant` (mod 2^32).
    leaves: Vec<Value>,
    constant: i32,
    limit: Limit,
    srcloc: SourceLoc,
    /// A guest test's leaf that is a masked index, if any.
    masked: Option<Masked>,
}

/// A leaf `(a & b) << shift` (or `a & b`): an index masked to a range,
/// scaled. It is at most `m << shift` for `m` either of `a`, `b`
/// (unsigned: `a & b <= b`), whatever the other (a gather's hashed or
/// wrapped index). The unsigned minimum of `a` and `b` in place of `a &
/// b` (an index clamped to a row's last element) is bounded alike.
#[derive(Clone, Copy)]
struct Masked {
    leaf: Value,
    operands: [Value; 2],
    shift: u32,
}

/// A test to emit: `leaves + constant` against `against`; with `reach`
/// `(m, shift)`, `uextend(leaves + constant) + (uextend(m) << shift)`
/// against `Against::Past` (a masked group's test).
struct Check {
    leaves: Vec<Value>,
    constant: i32,
    against: Against,
    reach: Option<(Value, u32)>,
}

/// [`Check`]'s comparison.
#[derive(Clone, Copy)]
enum Against {
    /// Out when the address (unsigned) `>=` the value.
    Below(Value),
    /// Out when `uextend(address) + end > len`.
    Past { end: i64, len: Value },
}

/// What the groups' tests compare against.
struct Bounds<'a> {
    /// The function's shared bounds in [`SHARED_ACCESS_BYTES`] order,
    /// defined in the entry block, if it has shared memory.
    shared: Option<&'a [Value; 4]>,
    /// Shared bounds `max(bound - d, 0)` already made, by `(size, d)`.
    made: Vec<(usize, i64, Value)>,
    /// The guest limits (`limits`).
    limits: &'a mut GuestLimits,
}

/// Merges the bounds tests of `func` run by run (module docs). `shared`
/// are the function's shared bounds in [`SHARED_ACCESS_BYTES`] order,
/// defined in the entry block, if it has shared memory; `limits` the
/// guest limits, which also tell the bounded blocks. Returns how many
/// tests the merged tests replaced.
pub(super) fn merge_bounds_tests(
    func: &mut Function,
    shared: Option<&[Value; 4]>,
    limits: &mut GuestLimits,
) -> usize {
    let blocks: Vec<Block> = func.layout.blocks().collect();
    let mut replaced = 0;
    let mut bounds = Bounds {
        shared,
        made: Vec::new(),
        limits,
    };
    for block in blocks {
        let bounded = bounds.limits.bounded(block);
        for (run, hoist) in runs(func, block, shared) {
            replaced += rewrite(func, &run, &hoist, &mut bounds, bounded);
        }
    }
    replaced
}

/// The runs of `block` with at least two tests, each with the arithmetic
/// its tests' addresses need that it computes after its first test (to be
/// moved before it).
fn runs(func: &Function, block: Block, shared: Option<&[Value; 4]>) -> Vec<(Vec<Test>, Vec<Inst>)> {
    let mut runs = Vec::new();
    let mut run: Vec<Test> = Vec::new();
    let mut hoist: Vec<Inst> = Vec::new();
    // Instructions of the current run after its first test (by index,
    // and as a list to clear): their results are summed through; anything
    // else is a leaf.
    let mut inside = Inside {
        marked: alloc::vec![false; func.dfg.num_insts()],
        list: Vec::new(),
    };
    let mut close = |run: &mut Vec<Test>, hoist: &mut Vec<Inst>, inside: &mut Inside| {
        if run.len() > 1 {
            runs.push((core::mem::take(run), core::mem::take(hoist)));
        }
        run.clear();
        hoist.clear();
        inside.clear();
    };
    for inst in func.layout.block_insts(block) {
        if let Some((address, limit)) = bounds_test(func, inst, shared) {
            let mut moved = Vec::new();
            let form = if run.is_empty() || run.len() >= MAX_RUN {
                None
            } else {
                sum(func, address, &inside, &mut moved)
            };
            let (leaves, constant) = match form {
                Some(form) => {
                    for m in moved {
                        if !hoist.contains(&m) {
                            hoist.push(m);
                        }
                    }
                    form
                }
                None => {
                    // A new run starts here: every value is available.
                    close(&mut run, &mut hoist, &mut inside);
                    sum(func, address, &inside, &mut Vec::new())
                        .unwrap_or_else(|| (alloc::vec![address], 0))
                }
            };
            let (leaves, masked) = match limit {
                Limit::Guest { .. } => {
                    let leaves = split_masked_sum(func, leaves);
                    let masked = leaves.iter().find_map(|&l| masked(func, l));
                    (leaves, masked)
                }
                Limit::Shared { .. } => (leaves, None),
            };
            run.push(Test {
                inst,
                leaves,
                constant,
                limit,
                srcloc: func.srcloc(inst),
                masked,
            });
        } else if quiet(func, inst) {
            if !run.is_empty() {
                inside.mark(inst);
            }
        } else {
            close(&mut run, &mut hoist, &mut inside);
        }
    }
    close(&mut run, &mut hoist, &mut inside);
    runs
}

/// `leaf` as a bounded index ([`Masked`]): `ishl(x, c)` with a constant
/// `c` below 32, or `x` alone, where `x` is `band(a, b)` (neither of `a`,
/// `b` a constant of 2^31 or more) or the unsigned minimum of `a` and `b`
/// ([`unsigned_min`]).
fn masked(func: &Function, leaf: Value) -> Option<Masked> {
    let dfg = &func.dfg;
    let binary = |v: Value, opcode: Opcode| match dfg.value_def(dfg.resolve_aliases(v)).inst() {
        Some(def) => match dfg.insts[def] {
            InstructionData::Binary { opcode: o, args } if o == opcode => Some(args),
            _ => None,
        },
        None => None,
    };
    let (index, shift) = match binary(leaf, Opcode::Ishl) {
        Some([x, amount]) => {
            let c = constant(func, amount)?;
            (x, u32::try_from(c).ok().filter(|&c| c < 32)?)
        }
        None => (leaf, 0),
    };
    let operands = match binary(index, Opcode::Band) {
        Some(args) => args.map(|v| dfg.resolve_aliases(v)),
        None => unsigned_min(func, index)?,
    };
    // A constant operand of 2^31 or more clears low bits (`x & -4`, an
    // alignment): it bounds nothing a test could use.
    if operands
        .iter()
        .any(|&v| constant(func, v).is_some_and(|c| c as u32 >= 1 << 31))
    {
        return None;
    }
    (dfg.value_type(index) == I32).then_some(Masked {
        leaf: dfg.resolve_aliases(leaf),
        operands,
        shift,
    })
}

/// `v`'s operands when `v` is their unsigned minimum: `umin(a, b)`, or a
/// `select` that picks the lesser by an unsigned comparison of the two
/// (`select(a < b, a, b)`, `select(a > b, b, a)`, also `<=`, `>=`, the
/// comparison possibly widened to `i32` first): a clamped index, `x[min(j,
/// last)]`. Either operand bounds it.
fn unsigned_min(func: &Function, v: Value) -> Option<[Value; 2]> {
    let dfg = &func.dfg;
    let def = |v: Value| dfg.value_def(dfg.resolve_aliases(v)).inst();
    match dfg.insts[def(v)?] {
        InstructionData::Binary {
            opcode: Opcode::Umin,
            args,
        } => Some(args.map(|v| dfg.resolve_aliases(v))),
        InstructionData::Ternary {
            opcode: Opcode::Select,
            args: [c, t, f],
        } => {
            let mut c = def(c)?;
            if let InstructionData::Unary {
                opcode: Opcode::Uextend,
                arg,
            } = dfg.insts[c]
            {
                c = def(arg)?;
            }
            let InstructionData::IntCompare { cond, args, .. } = dfg.insts[c] else {
                return None;
            };
            let [p, q] = args.map(|v| dfg.resolve_aliases(v));
            let (t, f) = (dfg.resolve_aliases(t), dfg.resolve_aliases(f));
            // `p < q ? p : q` or `p > q ? q : p`, either way min(p, q).
            let least = match cond {
                IntCC::UnsignedLessThan | IntCC::UnsignedLessThanOrEqual => (t, f) == (p, q),
                IntCC::UnsignedGreaterThan | IntCC::UnsignedGreaterThanOrEqual => (t, f) == (q, p),
                _ => false,
            };
            least.then_some([p, q])
        }
        _ => None,
    }
}

/// `leaves`, a lone leaf `a + t` with `t` a masked index split into `a`
/// and `t` (a run's first test sums nothing: its address is its leaf).
/// Both are defined where the sum is, so available where it is.
fn split_masked_sum(func: &Function, leaves: Vec<Value>) -> Vec<Value> {
    let dfg = &func.dfg;
    let [leaf] = leaves[..] else {
        return leaves;
    };
    let Some(def) = dfg.value_def(dfg.resolve_aliases(leaf)).inst() else {
        return leaves;
    };
    match dfg.insts[def] {
        InstructionData::Binary {
            opcode: Opcode::Iadd,
            args,
        } if args.iter().any(|&t| masked(func, t).is_some()) => {
            let mut split = args.map(|v| dfg.resolve_aliases(v)).to_vec();
            split.sort_unstable();
            split
        }
        _ => leaves,
    }
}

/// The leaves of `test` but its masked one.
fn unmasked_leaves(test: &Test) -> Vec<Value> {
    let masked = test.masked.map(|m| m.leaf);
    test.leaves
        .iter()
        .copied()
        .filter(|&l| Some(l) != masked)
        .collect()
}

/// The mask `m` that bounds every masked leaf of `members` (an operand
/// they all share), if any.
fn common_mask<'t>(members: impl Iterator<Item = &'t Test> + Clone) -> Option<Value> {
    let first = members.clone().next()?.masked?;
    first.operands.into_iter().find(|&m| {
        members
            .clone()
            .all(|t| t.masked.is_some_and(|x| x.operands.contains(&m)))
    })
}

/// The instructions of a run after its first test.
struct Inside {
    marked: Vec<bool>,
    list: Vec<Inst>,
}

impl Inside {
    fn mark(&mut self, inst: Inst) {
        self.marked[inst.as_u32() as usize] = true;
        self.list.push(inst);
    }

    fn contains(&self, inst: Inst) -> bool {
        self.marked[inst.as_u32() as usize]
    }

    fn clear(&mut self) {
        for inst in self.list.drain(..) {
            self.marked[inst.as_u32() as usize] = false;
        }
    }
}

/// `(address, limit)` when `inst` is a bounds test with code
/// `HeapOutOfBounds`: a shared one, `trapnz(icmp uge address, bound)` with
/// `bound` one of `shared`, or a guest one (`limits::guest_test`).
fn bounds_test(func: &Function, inst: Inst, shared: Option<&[Value; 4]>) -> Option<(Value, Limit)> {
    if let Some(t) = guest_test(func, inst) {
        let limit = Limit::Guest {
            end: t.end,
            len: t.len,
            extended: t.extended,
        };
        return Some((t.address, limit));
    }
    let (cond, x, y) = compare_trap(func, inst, KernelTrap::HeapOutOfBounds)?;
    if cond != IntCC::UnsignedGreaterThanOrEqual {
        return None;
    }
    let size = shared?.iter().position(|&b| b == y)?;
    (func.dfg.value_type(x) == I32).then_some((x, Limit::Shared { size }))
}

/// Whether `inst` has no effect and cannot trap (cranelift's own test of
/// a removable instruction, but for loads): it may lie inside a run. Every
/// load the translator makes follows its own bounds test, so none traps,
/// and a load has no effect.
fn quiet(func: &Function, inst: Inst) -> bool {
    let op = func.dfg.insts[inst].opcode();
    let load = PLAIN_LOADS.contains(&op);
    let effect = op.is_call()
        || op.is_branch()
        || op.is_terminator()
        || op.is_return()
        || op.other_side_effects()
        || op.can_store()
        || (op.can_trap() && !load);
    !effect && (!op.can_load() || load)
}

/// The loads of one scalar the translator makes (atomic ones have effects).
const PLAIN_LOADS: [Opcode; 7] = [
    Opcode::Load,
    Opcode::Uload8,
    Opcode::Sload8,
    Opcode::Uload16,
    Opcode::Sload16,
    Opcode::Uload32,
    Opcode::Sload32,
];

/// `value` as a sum of leaves and a constant, summing through the `iadd`s
/// of `inside` (the run's instructions after its first test) and the
/// constants added elsewhere. A value defined elsewhere is available at
/// the run's first test, so it may stand as a leaf (and does where its
/// terms are too many); so may one that `inside` computes by [`pure`]
/// arithmetic (no effect, no trap) of such values, once that arithmetic is
/// moved before the first test: `moved` gets its instructions, operands
/// first. `None` when some other instruction of `inside` (a load) defines
/// a term.
fn sum(
    func: &Function,
    value: Value,
    inside: &Inside,
    moved: &mut Vec<Inst>,
) -> Option<(Vec<Value>, i32)> {
    let (mut leaves, total) = terms(func, value, inside, moved, 0)?;
    leaves.sort_unstable();
    Some((leaves, total))
}

/// [`sum`]'s terms of `value`, `depth` `iadd`s down.
fn terms(
    func: &Function,
    value: Value,
    inside: &Inside,
    moved: &mut Vec<Inst>,
    depth: usize,
) -> Option<(Vec<Value>, i32)> {
    let dfg = &func.dfg;
    let v = dfg.resolve_aliases(value);
    if let Some(c) = constant(func, v) {
        return Some((Vec::new(), c as i32));
    }
    let def = dfg.value_def(v).inst();
    let within = def.is_some_and(|d| inside.contains(d));
    let split = match def.map(|d| &dfg.insts[d]) {
        // Outside the run, only constants are taken off: the sum itself is
        // the leaf (the address the kernel computed, not its terms again).
        Some(&InstructionData::Binary {
            opcode: Opcode::Iadd,
            args: [x, y],
        }) if depth < MAX_DEPTH
            && (within || constant(func, x).is_some() || constant(func, y).is_some()) =>
        {
            let mut mine = Vec::new();
            let form = terms(func, x, inside, &mut mine, depth + 1).and_then(|(mut l, a)| {
                let (r, b) = terms(func, y, inside, &mut mine, depth + 1)?;
                l.extend(r);
                (l.len() <= MAX_LEAVES).then_some((l, a.wrapping_add(b)))
            });
            if form.is_some() {
                moved.extend(mine);
            }
            form
        }
        // `x - c` is `x + (-c)` (mod 2^32): a stencil's `p - 4`.
        Some(&InstructionData::Binary {
            opcode: Opcode::Isub,
            args: [x, y],
        }) if depth < MAX_DEPTH && constant(func, y).is_some() => {
            let c = constant(func, y)? as i32;
            terms(func, x, inside, moved, depth + 1).map(|(l, a)| (l, a.wrapping_sub(c)))
        }
        _ => None,
    };
    match split {
        Some(form) => Some(form),
        None if within => {
            let mut mine = Vec::new();
            let movable = movable(func, v, inside, &mut mine, 0);
            movable.then(|| {
                moved.extend(mine);
                (alloc::vec![v], 0)
            })
        }
        None => Some((alloc::vec![v], 0)),
    }
}

/// Whether `v` is available at the run's first test once `moved` (which
/// gets the instructions, operands first) is moved before it: defined
/// outside `inside`, or by [`pure`] arithmetic of such values. Moving it
/// is unobservable: it has no effect and cannot trap.
fn movable(
    func: &Function,
    v: Value,
    inside: &Inside,
    moved: &mut Vec<Inst>,
    depth: usize,
) -> bool {
    let dfg = &func.dfg;
    let Some(def) = dfg.value_def(dfg.resolve_aliases(v)).inst() else {
        return true;
    };
    if !inside.contains(def) || moved.contains(&def) {
        return true;
    }
    if depth >= MAX_DEPTH || !pure(dfg.insts[def].opcode()) || dfg.inst_results(def).len() != 1 {
        return false;
    }
    let args: Vec<Value> = dfg.inst_args(def).to_vec();
    if !args
        .iter()
        .all(|&a| movable(func, a, inside, moved, depth + 1))
    {
        return false;
    }
    moved.push(def);
    true
}

/// The groups of `run` (module docs) of two or more members, as indices
/// into `run`: tests of one kind and the same leaves within
/// [`MAX_DISTANCE`] of the least (a set farther apart is no group).
fn groups(run: &[Test], bounded: bool) -> Vec<Vec<usize>> {
    let mut groups = Vec::new();
    let mut done = alloc::vec![false; run.len()];
    for (i, test) in run.iter().enumerate() {
        if done[i] {
            continue;
        }
        let same = |t: &Test| match (t.limit, test.limit) {
            (Limit::Guest { len: a, .. }, Limit::Guest { len: b, .. })
                if t.masked.is_some() || test.masked.is_some() =>
            {
                // Masked indices under one mask, the other leaves the same:
                // any constants (the group's test is made in 64 bits).
                a == b
                    && t.masked.map(|m| m.shift) == test.masked.map(|m| m.shift)
                    && common_mask([t, test].into_iter()).is_some()
                    && unmasked_leaves(t) == unmasked_leaves(test)
            }
            (Limit::Guest { len: a, .. }, Limit::Guest { len: b, .. }) => {
                a == b && t.leaves == test.leaves && (bounded || t.constant == test.constant)
            }
            (Limit::Shared { .. }, Limit::Shared { .. }) => t.leaves == test.leaves,
            _ => false,
        };
        let members: Vec<usize> = (i..run.len())
            .filter(|&j| !done[j] && same(&run[j]))
            .collect();
        for &j in &members {
            done[j] = true;
        }
        let least = members.iter().map(|&j| run[j].constant).min().unwrap_or(0);
        let near = members
            .iter()
            .all(|&j| i64::from(run[j].constant) - i64::from(least) < MAX_DISTANCE);
        // Members that share a mask pairwise with the first but not all
        // one: no group.
        let masked =
            test.masked.is_none() || common_mask(members.iter().map(|&j| &run[j])).is_some();
        if members.len() > 1 && near && masked {
            groups.push(members);
        }
    }
    groups
}

/// The test of `group` (module docs), at its least address: for guest
/// tests, against the limit of the group's reach; for shared tests,
/// against the bound of the member of largest `d + bytes` less its `d`
/// (from `made`).
fn group_check(
    func: &mut Function,
    run: &[Test],
    group: &[usize],
    bounds: &mut Bounds<'_>,
    bounded: bool,
) -> Option<Check> {
    let first = &run[*group.first()?];
    let members = || group.iter().map(|&j| &run[j]);
    let least = members().map(|t| t.constant).min()?;
    let reach = |t: &Test| i64::from(t.constant) - i64::from(least);
    if let (Some(masked), Limit::Guest { len, .. }, true) =
        (first.masked, first.limit, group.len() > 1)
    {
        // Each member's address is `x + d_i + (a_i & m) << s`, `x` the
        // other leaves' sum plus the least constant: at most `x + d_i +
        // (m << s)`. The test `uextend(x) + (uextend(m) << s) + E <= len`
        // (`E` the largest `d_i + end_i`), in 64 bits, passes only when no
        // member's address wraps and each is in bounds; when it fails, the
        // cold path tests each member (some may be in bounds).
        let end = members()
            .filter_map(|t| match t.limit {
                Limit::Guest { end, .. } => Some(reach(t) + end),
                Limit::Shared { .. } => None,
            })
            .max()?;
        return Some(Check {
            leaves: unmasked_leaves(first),
            constant: least,
            against: Against::Past { end, len },
            reach: Some((common_mask(members())?, masked.shift)),
        });
    }
    let against = match first.limit {
        Limit::Guest { len, .. } => {
            let end = members()
                .filter_map(|t| match t.limit {
                    Limit::Guest { end, .. } => Some(reach(t) + end),
                    Limit::Shared { .. } => None,
                })
                .max()?;
            guest_against(func, bounds.limits, len, end, bounded)
        }
        Limit::Shared { .. } => {
            let shared = bounds.shared?;
            let size = |t: &Test| match t.limit {
                Limit::Shared { size } => size,
                Limit::Guest { .. } => 0,
            };
            let far =
                members().max_by_key(|t| reach(t) + i64::from(SHARED_ACCESS_BYTES[size(t)]))?;
            Against::Below(bound_minus(
                func,
                shared,
                size(far),
                reach(far),
                &mut bounds.made,
            ))
        }
    };
    Some(Check {
        leaves: first.leaves.clone(),
        constant: least,
        against,
        reach: None,
    })
}

/// Rewrites one run whose tests form at least one group: the groups'
/// tests and the branch to the cold block at its first test, the cold
/// block at the function's end, and the grouped tests removed (a test in
/// no group stays where it is; the cold block makes it too, in its turn).
fn rewrite(
    func: &mut Function,
    run: &[Test],
    moved: &[Inst],
    bounds: &mut Bounds<'_>,
    bounded: bool,
) -> usize {
    // Every test of no group is a group of its own: the run's tests all
    // become one branch, so the run's loads follow it in one block.
    let mut groups = groups(run, bounded);
    let mut grouped = alloc::vec![false; run.len()];
    for &j in groups.iter().flatten() {
        grouped[j] = true;
    }
    groups.extend(
        (0..run.len())
            .filter(|&j| !grouped[j])
            .map(|j| alloc::vec![j]),
    );
    if run.len() < 2 {
        return 0;
    }
    let first = run[0].inst;
    let checks: Vec<Check> = groups
        .iter()
        .filter_map(|g| group_check(func, run, g, bounds, bounded))
        .collect();
    if checks.len() != groups.len() {
        return 0;
    }
    // The arithmetic the later tests' addresses need, before the first.
    for &inst in moved {
        func.layout.remove_inst(inst);
        FuncCursor::new(func).at_inst(first).insert_inst(inst);
    }
    // The cold path's own tests.
    let mut exact = Vec::with_capacity(run.len());
    for test in run {
        exact.push(match test.limit {
            Limit::Shared { size } => bounds.shared.map(|shared| Against::Below(shared[size])),
            Limit::Guest { end, len, .. } => {
                Some(guest_against(func, bounds.limits, len, end, bounded))
            }
        });
    }

    // The hot path: the groups' tests, in the run's first test's place.
    let block = func.layout.inst_block(first).expect("a test in the layout");
    let rest = func.dfg.make_block();
    let cold = func.dfg.make_block();
    func.layout.split_block(rest, first);
    bounds.limits.inherit(block, rest);
    bounds.limits.inherit(block, cold);
    let mut pos = FuncCursor::new(func)
        .at_bottom(block)
        .with_srcloc(run[0].srcloc);
    let mut any: Option<Value> = None;
    let mut addresses = Vec::with_capacity(checks.len());
    for check in &checks {
        let (address, out) = emit(&mut pos, check);
        addresses.push(address);
        any = Some(match any {
            Some(a) => pos.ins().bor(a, out),
            None => out,
        });
    }
    let any = any.expect("a run has tests");
    pos.ins().brif(any, cold, &[], rest, &[]);

    // The cold path: the run's tests in order; the last (a group's test
    // failed, so one of them traps) never falls through.
    pos.func.layout.append_block(cold);
    pos.goto_bottom(cold);
    for (test, against) in run.iter().zip(exact) {
        let Some(against) = against else { continue };
        pos.set_srcloc(test.srcloc);
        let check = Check {
            leaves: test.leaves.clone(),
            constant: test.constant,
            against,
            reach: None,
        };
        let (_, out) = emit(&mut pos, &check);
        pos.ins()
            .trapnz(out, KernelTrap::HeapOutOfBounds.trap_code());
    }
    // A masked group's test may fail while every member's passes (the
    // mask reaches past the memory, the indices do not): the cold path
    // then goes on to the hot one, whose accesses it has just tested.
    let masked = groups
        .iter()
        .any(|g| g.len() > 1 && g.iter().any(|&j| run[j].masked.is_some()));
    if masked {
        pos.ins().jump(rest, &[]);
    } else {
        pos.ins().trap(KernelTrap::HeapOutOfBounds.trap_code());
    }

    if bounded {
        one_base_per_group(pos.func, run, &groups, &addresses, rest);
    }
    let grouped: Vec<usize> = groups.into_iter().flatten().collect();
    for &j in &grouped {
        pos.func.layout.remove_inst(run[j].inst);
    }
    sink_moved(pos.func, moved, cold, rest);
    grouped.len()
}

/// Moves the arithmetic `moved` (hoisted above the run's first test, now
/// at the end of the block before the run) that the groups' tests do not
/// read back down: into `rest` (the hot path), at its top, and a copy
/// into `cold` for its tests. The
/// hot path then computes each address where the PTX lowerer's scheduler
/// wants it, not all of them before the branch: a gather's 64 masked
/// indices, all live across the branch, had taken 96 registers.
fn sink_moved(func: &mut Function, moved: &[Inst], cold: Block, rest: Block) {
    // What the groups' tests read, and what those reads need in turn. Only
    // what follows the first moved instruction (the moved ones, then the
    // groups' tests) can read them: `moved` ends the block before the run.
    let Some(&first_moved) = moved.first() else {
        return;
    };
    let moved_set: BTreeSet<Inst> = moved.iter().copied().collect();
    let mut kept: BTreeSet<Value> = BTreeSet::new();
    let mut at = Some(first_moved);
    while let Some(inst) = at {
        if !moved_set.contains(&inst) {
            kept.extend(
                func.dfg
                    .inst_args(inst)
                    .iter()
                    .map(|&v| func.dfg.resolve_aliases(v)),
            );
        }
        at = func.layout.next_inst(inst);
    }
    let mut sunk: Vec<Inst> = Vec::new();
    for &inst in moved.iter().rev() {
        let results = func.dfg.inst_results(inst);
        if results.iter().any(|r| kept.contains(r)) {
            kept.extend(
                func.dfg
                    .inst_args(inst)
                    .iter()
                    .map(|&v| func.dfg.resolve_aliases(v)),
            );
        } else {
            sunk.push(inst);
        }
    }
    sunk.reverse();
    let (Some(hot_top), Some(cold_top)) =
        (func.layout.first_inst(rest), func.layout.first_inst(cold))
    else {
        return;
    };
    let mut copies: BTreeMap<Value, Value> = BTreeMap::new();
    for &inst in &sunk {
        let copy = func.dfg.clone_inst(inst);
        func.dfg
            .map_inst_values(copy, |v| copies.get(&v).copied().unwrap_or(v));
        FuncCursor::new(func).at_inst(cold_top).insert_inst(copy);
        func.set_srcloc(copy, func.srcloc(inst));
        let (old, new) = (func.dfg.inst_results(inst), func.dfg.inst_results(copy));
        for (&a, &b) in old.iter().zip(new) {
            copies.insert(a, b);
        }
        func.layout.remove_inst(inst);
        FuncCursor::new(func).at_inst(hot_top).insert_inst(inst);
    }
    let cold_insts: Vec<Inst> = func.layout.block_insts(cold).collect();
    for inst in cold_insts {
        func.dfg
            .map_inst_values(inst, |v| copies.get(&v).copied().unwrap_or(v));
    }
}

/// The exact test of a guest access (or group) of end `end`
/// (`GuestLimits::exact`).
fn guest_against(
    func: &mut Function,
    limits: &mut GuestLimits,
    len: Value,
    end: i64,
    bounded: bool,
) -> Against {
    match limits.exact(func, len, end, bounded) {
        Exact::Below(limit) => Against::Below(limit),
        Exact::Past => Against::Past { end, len },
    }
}

/// In a bounded block's hot path (`rest`, where every test of `run`
/// passed), each guest group's members at `x0 + d` (`x0` the group's
/// least address, its test's, in `addresses`) read `uextend(x0) + d`
/// instead of their own `uextend(x0 + d)`: the same value, since no `x0 +
/// d` wraps there (module docs), and one 64-bit base per group, the `d`s
/// the loads' and stores' immediate offsets. The run's instructions (to
/// the one that closes it) use the new values.
fn one_base_per_group(
    func: &mut Function,
    run: &[Test],
    groups: &[Vec<usize>],
    addresses: &[Value],
    rest: Block,
) {
    let Some(top) = func.layout.first_inst(rest) else {
        return;
    };
    let mut pos = FuncCursor::new(func)
        .at_inst(top)
        .with_srcloc(run[0].srcloc);
    let mut renamed: Vec<(Value, Value)> = Vec::new();
    for (group, &x0) in groups.iter().zip(addresses) {
        let least = group.iter().map(|&j| run[j].constant).min();
        let (Some(least), Some(Limit::Guest { .. })) =
            (least, group.first().map(|&j| run[j].limit))
        else {
            continue;
        };
        // A masked group's members are not at constant distances.
        if group.len() > 1 && group.iter().any(|&j| run[j].masked.is_some()) {
            continue;
        }
        let base = pos.ins().uextend(I64, x0);
        for &j in group {
            if let Limit::Guest { extended, .. } = run[j].limit {
                let d = i64::from(run[j].constant) - i64::from(least);
                let at = if d == 0 {
                    base
                } else {
                    pos.ins().iadd_imm_s(base, d)
                };
                renamed.push((extended, at));
            }
        }
    }
    let last = run.last().map(|t| t.inst);
    let insts: Vec<Inst> = pos.func.layout.block_insts(rest).collect();
    let mut past_last = false;
    for inst in insts {
        pos.func.dfg.map_inst_values(inst, |v| {
            renamed
                .iter()
                .find(|&&(from, _)| from == v)
                .map_or(v, |&(_, to)| to)
        });
        if Some(inst) == last {
            past_last = true;
        } else if past_last && !quiet(pos.func, inst) {
            break;
        }
    }
}

/// `check`'s comparison at `pos`: the address it tests, and an `i8`,
/// nonzero when out of bounds.
fn emit(pos: &mut FuncCursor<'_>, check: &Check) -> (Value, Value) {
    let mut address = match check.leaves.split_first() {
        Some((&first, rest)) => rest.iter().fold(first, |s, &l| pos.ins().iadd(s, l)),
        None => pos.ins().iconst(I32, 0),
    };
    if check.constant != 0 {
        address = pos.ins().iadd_imm_s(address, i64::from(check.constant));
    }
    let out = match check.against {
        Against::Below(bound) => pos
            .ins()
            .icmp(IntCC::UnsignedGreaterThanOrEqual, address, bound),
        Against::Past { end, len } => {
            // `uextend(address) + end > len` as `uextend(address) > len -
            // end`, signed: exact (`len <= 2^32`, `end < 2^34`; a masked
            // group's reach is below 2^63).
            let mut ea = pos.ins().uextend(I64, address);
            if let Some((mask, shift)) = check.reach {
                let m = pos.ins().uextend(I64, mask);
                let far = pos.ins().ishl_imm_u(m, i64::from(shift));
                ea = pos.ins().iadd(ea, far);
            }
            let limit = pos.ins().iadd_imm_s(len, -end);
            pos.ins().icmp(IntCC::SignedGreaterThan, ea, limit)
        }
    };
    (address, out)
}

/// `max(bounds[size] - distance, 0)` (`i32`), defined in the entry block
/// just after `bounds[size]`; made once per `(size, distance)`.
fn bound_minus(
    func: &mut Function,
    bounds: &[Value; 4],
    size: usize,
    distance: i64,
    made: &mut Vec<(usize, i64, Value)>,
) -> Value {
    if distance == 0 {
        return bounds[size];
    }
    if let Some(&(_, _, v)) = made.iter().find(|m| m.0 == size && m.1 == distance) {
        return v;
    }
    let def = func
        .dfg
        .value_def(bounds[size])
        .inst()
        .expect("a shared bound is an instruction's result");
    let mut pos = FuncCursor::new(func).after_inst(def);
    // `bound < 2^31` and `distance < 2^24`: the signed difference is exact.
    let less = pos.ins().iadd_imm_s(bounds[size], -distance);
    let zero = pos.ins().iconst(I32, 0);
    let negative = pos.ins().icmp(IntCC::SignedLessThan, less, zero);
    let v = pos.ins().select(negative, zero, less);
    made.push((size, distance, v));
    v
}
