//! Counted loops: fuel charged on entry, no checks per iteration. Every
//! Wasm `loop` header spends one fuel (`trapz fuel, OutOfFuel` then
//! `fuel - 1`) and reads the thread's clock (`TimeLimit`). For an
//! innermost loop that runs a constant number of times, both are known in
//! advance: the fuel the loop will spend and that the loop ends. Compilers
//! make such loops of fixed trip counts (a tile's depth, an unrolled
//! remainder): LLVM counts them down, `c = N` on entry, `c - 1` to the
//! header while it is nonzero.
//!
//! A loop qualifies when
//!
//! - its trip count (`trip`) follows from constants on every entry edge
//!   (each a `jump`): an induction variable that every entry sets to a
//!   constant, stepped by a constant and compared with a constant bound
//!   (a constant offset allowed) by the exit test of a pass, so the header
//!   runs at most `N` times an entry, `N` in `1 ..= MAX_TRIPS` (other ways
//!   out only make it fewer). How LLVM counts a fixed trip count down (`c
//!   = N`, `c - 1 != 0`), and C's `for (i = 0; i < 16; i += 2)`, either;
//! - the header tests and decreases by one the fuel parameter, which the
//!   back edge passes decreased: nothing else in the loop spends fuel (no
//!   inner loop), so the header sees `f, f - 1, ...`.
//!
//! Then each entry edge traps `OutOfFuel` (at the header's location)
//! unless its fuel is at least `N`, the header's fuel test is removed (it
//! cannot fail: the header runs at most `N` times, so its fuel is at least
//! `f - N + 1 >= 1`) and so is its time check: the loop's `N` iterations
//! of a body without loops are bounded work, and the enclosing loop's
//! header (or the virtual block's start) checks the clock. The fuel the
//! loop leaves is what it left before; only a loop that would have run
//! out of fuel now traps on entry instead of in its `f`-th iteration.

use alloc::vec::Vec;

use cranelift_codegen::cursor::{Cursor, FuncCursor};
use cranelift_codegen::flowgraph::ControlFlowGraph;
use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::types::I64;
use cranelift_codegen::ir::{
    Block, Function, Inst, InstBuilder, InstructionData, Opcode, SourceLoc, Value,
};

use super::align::constant;
use super::loops::{entry_args, inductions, innermost_loops, loop_form};
use super::trip::{constant_passes, trip_count};
use crate::lower::KernelTrap;

/// The largest trip count a loop may have to be charged on entry: between
/// two time checks a thread runs at most this many iterations of a body
/// without loops.
pub(super) const MAX_TRIPS: i64 = 4096;

/// A counted loop found, and what to change.
struct Counted {
    /// The header's fuel test (`trapz`) and its location.
    fuel_test: Inst,
    srcloc: SourceLoc,
    /// The header's time check, its `trapnz` first, then what computes it
    /// (none in a kernel for launches without a time limit).
    time_check: Option<[Inst; 4]>,
    /// The entry `jump`s, each with its fuel argument and trip count.
    entries: Vec<(Inst, Value, i64)>,
}

/// Charges `func`'s counted loops on entry (module docs); how many.
pub(super) fn charge_counted_loops(func: &mut Function) -> usize {
    let (cfg, innermost) = innermost_loops(func);
    let found: Vec<Counted> = innermost
        .into_iter()
        .filter_map(|(header, blocks)| counted(func, &cfg, header, blocks))
        .collect();
    for loop_ in &found {
        for &(jump, fuel, trips) in &loop_.entries {
            let mut pos = FuncCursor::new(func)
                .at_inst(jump)
                .with_srcloc(loop_.srcloc);
            let trips = pos.ins().iconst(I64, trips);
            let short = pos.ins().icmp(IntCC::UnsignedLessThan, fuel, trips);
            pos.ins().trapnz(short, KernelTrap::OutOfFuel.trap_code());
        }
        func.layout.remove_inst(loop_.fuel_test);
        for &inst in loop_.time_check.iter().flatten() {
            func.layout.remove_inst(inst);
        }
    }
    found.len()
}

/// The loop at `header` (its blocks: `blocks`) if it is counted.
fn counted(
    func: &Function,
    cfg: &ControlFlowGraph,
    header: Block,
    blocks: Vec<Block>,
) -> Option<Counted> {
    let dfg = &func.dfg;
    let params = dfg.block_params(header);
    let param_index = |v: Value| params.iter().position(|&p| p == dfg.resolve_aliases(v));
    let mut fuel_test = None;
    let mut time_check = None;
    for inst in func.layout.block_insts(header) {
        match dfg.insts[inst] {
            InstructionData::CondTrap {
                opcode: Opcode::Trapz,
                arg,
                code,
            } if KernelTrap::from_trap_code(code) == Some(KernelTrap::OutOfFuel)
                && fuel_test.is_none() =>
            {
                fuel_test = Some((inst, param_index(arg)?));
            }
            InstructionData::CondTrap {
                opcode: Opcode::Trapnz,
                arg,
                code,
            } if KernelTrap::from_trap_code(code) == Some(KernelTrap::TimeLimit)
                && time_check.is_none() =>
            {
                time_check = Some(clock_chain(func, inst, arg)?);
            }
            _ => {}
        }
    }
    let (fuel_test, fuel) = fuel_test?;
    let form = loop_form(func, cfg, header, blocks)?;
    if minus_one(func, form.back[fuel]) != Some(params[fuel]) {
        return None;
    }
    let ivs = inductions(func, &form);
    let trip = trip_count(func, &form, &ivs)?;
    if trip.iv == fuel {
        return None;
    }
    // Every entry: `jump header(..)` with constants the count follows from.
    let mut entries = Vec::new();
    for &entry in &form.entries {
        let args = entry_args(func, entry)?;
        let trips = constant_passes(func, &trip, args[trip.iv], MAX_TRIPS as u64)?;
        entries.push((entry, args[fuel], trips as i64));
    }
    Some(Counted {
        fuel_test,
        srcloc: func.srcloc(fuel_test),
        time_check,
        entries,
    })
}

/// `x` when `v` is `iadd x, -1` or `isub x, 1`.
pub(super) fn minus_one(func: &Function, v: Value) -> Option<Value> {
    let dfg = &func.dfg;
    let InstructionData::Binary {
        opcode,
        args: [x, y],
    } = dfg.insts[dfg.value_def(dfg.resolve_aliases(v)).inst()?]
    else {
        return None;
    };
    let width = dfg.value_type(x).bits();
    let c = constant(func, y)?;
    // An `i32`'s -1 may be held as its 32 bits.
    let minus = c == -1 || (width == 32 && c == 0xffff_ffff);
    let one = (opcode == Opcode::Iadd && minus) || (opcode == Opcode::Isub && c == 1);
    one.then(|| dfg.resolve_aliases(x))
}

/// The time check ending in `trapnz` of `arg`: `[trapnz, icmp, isub,
/// call]` (`icmp ugt (isub (call clock) start) limit`), or `None` when it
/// has another shape.
pub(super) fn clock_chain(func: &Function, trapnz: Inst, arg: Value) -> Option<[Inst; 4]> {
    let dfg = &func.dfg;
    let def = |v: Value| dfg.value_def(dfg.resolve_aliases(v)).inst();
    let compare = def(arg)?;
    let InstructionData::IntCompare {
        opcode: Opcode::Icmp,
        args: [elapsed, _],
        ..
    } = dfg.insts[compare]
    else {
        return None;
    };
    let sub = def(elapsed)?;
    let InstructionData::Binary {
        opcode: Opcode::Isub,
        args: [now, _],
    } = dfg.insts[sub]
    else {
        return None;
    };
    let call = def(now)?;
    (dfg.insts[call].opcode() == Opcode::Call).then_some([trapnz, compare, sub, call])
}
