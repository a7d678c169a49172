//! Row cases: F reads a row as a warp-per-row kernel does and writes it
//! back under guards, made from the bytes instead of by wasm-smith (whose
//! code has neither shape): `cols` columns `j = l + 32k` (`k` from 0), each
//! loaded at `a + (min(j, last) << shift)`, the minimum written in one of
//! the four ways a compiler writes an unsigned minimum with `select` (or,
//! one time in five, the maximum: no bound, which `merge` must not group),
//! the loads first (one run of bounds tests: `merge`'s clamped group), then
//! each column's value times the row's sum stored at `out + (j << 2)`
//! under a guard `j <
//! n` (an `if`, a `br_if` past the store on the complement, or on `eqz`:
//! `guarded`'s arms). F returns the sum. The arguments sit at the edges:
//! rows that end at the memory's end or past it, bounds that reach past it
//! while the columns do not, guards that fail where the stores would be
//! out of bounds.

use arbitrary::{Result as ArbitraryResult, Unstructured};
use wasm_encoder::{BlockType, Instruction as I, MemArg};
use wasmparser::ValType;

use super::PAGE;
use super::module::f_module;
use super::run::Arg;

/// How a column's index is bounded.
#[derive(Clone, Copy, Debug)]
enum Clamp {
    /// `select(j, last, j < last)`.
    LessThan,
    /// `select(j, last, last > j)`.
    GreaterThan,
    /// `select(last, j, last <= j)`.
    LessOrEqual,
    /// `select(j, last, last >= j)`.
    GreaterOrEqual,
    /// `select(last, j, j < last)`: the maximum.
    Max,
}

/// How a store is guarded by `j < n`.
#[derive(Clone, Copy, Debug)]
enum Guard {
    /// `if (j < n) store`.
    If,
    /// `block; br_if (j >= n); store; end`.
    Complement,
    /// `block; br_if (eqz (j < n)); store; end`.
    Eqz,
}

/// A row module (memory of `pages`, exported as `memory`; F exported as
/// `f`) and F's arguments `(l, last, n, a, out)`.
pub fn row_case(u: &mut Unstructured<'_>, pages: u64) -> ArbitraryResult<(Vec<u8>, Vec<Arg>)> {
    let cols = u.int_in_range(1..=8u32)?;
    let shift = u.int_in_range(0..=2u32)?;
    let offset = *u.choose(&[0u64, 0, 4, 8, 1000])?;
    let clamps = (0..cols)
        .map(|_| {
            Ok(match u.int_in_range(0..=4u8)? {
                0 => Clamp::LessThan,
                1 => Clamp::GreaterThan,
                2 => Clamp::LessOrEqual,
                3 => Clamp::GreaterOrEqual,
                _ => Clamp::Max,
            })
        })
        .collect::<ArbitraryResult<Vec<_>>>()?;
    let guards = (0..cols)
        .map(|_| Ok(*u.choose(&[Guard::If, Guard::Complement, Guard::Eqz])?))
        .collect::<ArbitraryResult<Vec<_>>>()?;
    let wasm = module(pages, shift, offset, &clamps, &guards);

    let mem_len = pages * PAGE;
    let l = match u.int_in_range(0..=3u8)? {
        0 => u.int_in_range(0..=31u64)?,
        1 => u64::from(u32::MAX) - u.int_in_range(0..=300u64)?,
        _ => u64::from(u.arbitrary::<u32>()?),
    };
    let last = match u.int_in_range(0..=3u8)? {
        0 => u.int_in_range(0..=300u64)?,
        1 => (mem_len >> shift).saturating_sub(u.int_in_range(0..=8u64)?),
        2 => u64::from(u.arbitrary::<u32>()?),
        _ => l.wrapping_add(u.int_in_range(0..=300u64)?) & 0xffff_ffff,
    };
    let n = match u.int_in_range(0..=3u8)? {
        0 => l.wrapping_add(u.int_in_range(0..=32 * u64::from(cols))?) & 0xffff_ffff,
        1 => u.int_in_range(0..=300u64)?,
        2 => u64::from(u32::MAX),
        _ => u64::from(u.arbitrary::<u32>()?),
    };
    let a = match u.int_in_range(0..=3u8)? {
        0 => u.int_in_range(0..=256u64)?,
        1 => mem_len.saturating_sub((last << shift) + offset + u.int_in_range(0..=8u64)?),
        2 => mem_len.saturating_sub(u.int_in_range(0..=256u64)?),
        _ => u.int_in_range(0..=mem_len)?,
    } & 0xffff_ffff;
    let out = match u.int_in_range(0..=2u8)? {
        0 => u.int_in_range(0..=256u64)?,
        1 => mem_len.saturating_sub((l << 2) + u.int_in_range(0..=256u64)?),
        _ => u.int_in_range(0..=mem_len)?,
    } & 0xffff_ffff;
    Ok((
        wasm,
        [l, last, n, a, out].map(|v| Arg(ValType::I32, v)).to_vec(),
    ))
}

/// The module: memory 0 and F, `(l, last, n, a, out: i32) -> i32`.
fn module(pages: u64, shift: u32, offset: u64, clamps: &[Clamp], guards: &[Guard]) -> Vec<u8> {
    let i32t = wasm_encoder::ValType::I32;
    // Locals: 0 `l`, 1 `last`, 2 `n`, 3 `a`, 4 `out`, 5 the sum, then one
    // per column: its loaded value.
    let (l, last, n, a, out, sum) = (0, 1, 2, 3, 4, 5);
    let cols = clamps.len() as u32;
    let value = |k: u32| 6 + k;
    let mut f = wasm_encoder::Function::new([(1 + cols, i32t)]);
    let j = |f: &mut wasm_encoder::Function, k: u32| {
        f.instruction(&I::LocalGet(l))
            .instruction(&I::I32Const((32 * k) as i32))
            .instruction(&I::I32Add);
    };
    let memarg = MemArg {
        offset,
        align: 0,
        memory_index: 0,
    };
    let load = match shift {
        0 => I::I32Load8U(memarg),
        1 => I::I32Load16U(memarg),
        _ => I::I32Load(memarg),
    };
    // The loads, one run.
    for (k, clamp) in (0..cols).zip(clamps) {
        f.instruction(&I::LocalGet(a));
        // select(first, second, condition)
        let (first_j, cond): (bool, &[I<'static>]) = match clamp {
            Clamp::LessThan => (true, &[I::I32LtU]),
            Clamp::GreaterThan => (true, &[I::I32GtU]),
            Clamp::LessOrEqual => (false, &[I::I32LeU]),
            Clamp::GreaterOrEqual => (true, &[I::I32GeU]),
            Clamp::Max => (false, &[I::I32LtU]),
        };
        if first_j {
            j(&mut f, k);
            f.instruction(&I::LocalGet(last));
        } else {
            f.instruction(&I::LocalGet(last));
            j(&mut f, k);
        }
        // The condition's operands: `j, last` for `<` (and the maximum's),
        // `last, j` for the others.
        match clamp {
            Clamp::LessThan | Clamp::Max => {
                j(&mut f, k);
                f.instruction(&I::LocalGet(last));
            }
            _ => {
                f.instruction(&I::LocalGet(last));
                j(&mut f, k);
            }
        }
        for op in cond {
            f.instruction(op);
        }
        f.instruction(&I::Select)
            .instruction(&I::I32Const(shift as i32))
            .instruction(&I::I32Shl)
            .instruction(&I::I32Add)
            .instruction(&load)
            .instruction(&I::LocalTee(value(k)))
            .instruction(&I::LocalGet(sum))
            .instruction(&I::I32Add)
            .instruction(&I::LocalSet(sum));
    }
    // The guarded stores: the column's value times the sum, at `out + (j << 2)`.
    let store = I::I32Store(MemArg {
        offset: 0,
        align: 0,
        memory_index: 0,
    });
    let running = |f: &mut wasm_encoder::Function, k: u32| {
        f.instruction(&I::LocalGet(out));
        j(f, k);
        f.instruction(&I::I32Const(2))
            .instruction(&I::I32Shl)
            .instruction(&I::I32Add)
            .instruction(&I::LocalGet(value(k)))
            .instruction(&I::LocalGet(sum))
            .instruction(&I::I32Mul)
            .instruction(&store);
    };
    for (k, guard) in (0..cols).zip(guards) {
        match guard {
            Guard::If => {
                j(&mut f, k);
                f.instruction(&I::LocalGet(n))
                    .instruction(&I::I32LtU)
                    .instruction(&I::If(BlockType::Empty));
                running(&mut f, k);
                f.instruction(&I::End);
            }
            Guard::Complement | Guard::Eqz => {
                f.instruction(&I::Block(BlockType::Empty));
                j(&mut f, k);
                f.instruction(&I::LocalGet(n));
                if let Guard::Complement = guard {
                    f.instruction(&I::I32GeU);
                } else {
                    f.instruction(&I::I32LtU).instruction(&I::I32Eqz);
                }
                f.instruction(&I::BrIf(0));
                running(&mut f, k);
                f.instruction(&I::End);
            }
        }
    }
    f.instruction(&I::LocalGet(sum)).instruction(&I::End);
    f_module(pages, [i32t; 5], [i32t], &f)
}
