//! Loop cases: F is one loop in a shape the translator's loop analysis
//! counts or must refuse (docs/kernels.md, "Versioned loops"), made from
//! the bytes instead of by wasm-smith, whose loops are rarely counted and
//! rarely run far: an `i32` or `i64` induction variable `i` from F's first
//! argument, stepped by a constant (up or down, 1 to 2^30, or any), going
//! on while `i CMP n` (every compare, `eq` too) tested at the top (`br_if`
//! out of a `block`, through `i32.eqz` or on the complement) or the bottom
//! (`br_if` on the stepped value); each pass loads at `a + (i << k)` (`i`
//! wrapped to `i32`, an access of `2^k` bytes at a constant offset), adds
//! it to a sum, and stores the sum at `out`, which steps by 4 (a side
//! effect each pass, so a trap's place shows in memory). F returns the
//! sum. The arguments sit at the edges that matter: starts at the ends of
//! the type (so that `i` wraps), bounds a few passes away or one off,
//! first addresses near either end of memory.

use arbitrary::{Result as ArbitraryResult, Unstructured};
use wasm_encoder::{BlockType, Instruction as I, MemArg};
use wasmparser::ValType;

use super::PAGE;
use super::module::f_module;
use super::run::Arg;

/// Steps, besides any: up and down, small, and one whose `i32` address
/// step wraps while the compare sees a step near 2^30.
const STEPS: [i64; 10] = [1, 2, 3, 4, 7, -1, -2, -3, -8, 0x4000_0001];

/// The compares, by name, each with its complement.
const COMPARES: [(&str, &str); 10] = [
    ("lt_u", "ge_u"),
    ("le_u", "gt_u"),
    ("lt_s", "ge_s"),
    ("le_s", "gt_s"),
    ("gt_u", "le_u"),
    ("ge_u", "lt_u"),
    ("gt_s", "le_s"),
    ("ge_s", "lt_s"),
    ("ne", "eq"),
    ("eq", "ne"),
];

/// Where the loop tests whether it goes on.
#[derive(Clone, Copy, Debug)]
enum Test {
    TopEqz,
    TopComplement,
    Bottom,
}

/// A loop module (memory of `pages`, exported as `memory`; F exported as
/// `f`) and F's arguments.
pub fn loop_case(u: &mut Unstructured<'_>, pages: u64) -> ArbitraryResult<(Vec<u8>, Vec<Arg>)> {
    let wide = u.arbitrary::<bool>()?;
    let (ty, mask) = if wide {
        (ValType::I64, u64::MAX)
    } else {
        (ValType::I32, u64::from(u32::MAX))
    };
    let (cmp, not) = *u.choose(&COMPARES)?;
    let step = if u.ratio(1, 8)? {
        u.arbitrary::<i64>()?
    } else {
        *u.choose(&STEPS)?
    };
    let test = *u.choose(&[Test::TopEqz, Test::TopComplement, Test::Bottom])?;
    // A byte, two bytes or four a pass: `2^shift`.
    let shift = u.int_in_range(0..=2u32)?;
    let offset = *u.choose(&[0u64, 0, 4, 8, 1000])?;
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
    let wasm = module(pages, ty, cmp, not, step, test, load, shift);

    // The arguments: `i`, `n`, `a`, `out`.
    let mem_len = pages * PAGE;
    let sign = (mask >> 1) + 1;
    let near = u.int_in_range(0..=40u64)?;
    let start = match u.int_in_range(0..=6u8)? {
        0 => 0,
        1 => near,
        2 => sign - 1 - near,
        3 => mask - near,
        4 => sign + near,
        5 => sign.wrapping_sub(near) & mask,
        _ => u.arbitrary::<u64>()? & mask,
    };
    let passes = u.int_in_range(0..=64u64)?;
    let n = if u.ratio(1, 8)? {
        u.arbitrary::<u64>()? & mask
    } else {
        let off = *u.choose(&[0u64, 0, 1, mask, 2])?;
        start
            .wrapping_add((step as u64).wrapping_mul(passes))
            .wrapping_add(off)
            & mask
    };
    let first = match u.int_in_range(0..=4u8)? {
        0 => u.int_in_range(0..=256u64)?,
        1 => mem_len.saturating_sub(u.int_in_range(0..=256u64)?),
        2 => mem_len.saturating_sub((passes << shift) + offset + u.int_in_range(0..=8u64)?),
        _ => u.int_in_range(0..=mem_len)?,
    };
    let a = first.wrapping_sub(start.wrapping_mul(1 << shift)) & 0xffff_ffff;
    let out = mem_len.saturating_sub(u.int_in_range(0..=4 * passes + 8)?);
    Ok((
        wasm,
        vec![
            Arg(ty, start),
            Arg(ty, n),
            Arg(ValType::I32, a),
            Arg(ValType::I32, out),
        ],
    ))
}

/// The module: memory 0 and F, `(i T, n T, a i32, out i32) -> i32`.
#[allow(clippy::too_many_arguments)]
fn module(
    pages: u64,
    ty: ValType,
    cmp: &str,
    not: &str,
    step: i64,
    test: Test,
    load: I<'static>,
    shift: u32,
) -> Vec<u8> {
    let t = match ty {
        ValType::I64 => wasm_encoder::ValType::I64,
        _ => wasm_encoder::ValType::I32,
    };
    // Locals: 0 `i`, 1 `n`, 2 `a`, 3 `out`, 4 the sum.
    let (i, n, a, out, s) = (0, 1, 2, 3, 4);
    let wide = ty == ValType::I64;
    let compare = |which: &str| -> I<'static> { compare(wide, which) };
    let mut f = wasm_encoder::Function::new([(1, wasm_encoder::ValType::I32)]);
    let next = |f: &mut wasm_encoder::Function| {
        f.instruction(&I::LocalGet(i));
        if wide {
            f.instruction(&I::I64Const(step)).instruction(&I::I64Add);
        } else {
            f.instruction(&I::I32Const(step as i32))
                .instruction(&I::I32Add);
        }
    };
    let body = |f: &mut wasm_encoder::Function| {
        // s += load(a + (wrap(i) << shift)); store s at out; out += 4.
        f.instruction(&I::LocalGet(s)).instruction(&I::LocalGet(a));
        f.instruction(&I::LocalGet(i));
        if wide {
            f.instruction(&I::I32WrapI64);
        }
        f.instruction(&I::I32Const(shift as i32))
            .instruction(&I::I32Shl)
            .instruction(&I::I32Add)
            .instruction(&load)
            .instruction(&I::I32Add)
            .instruction(&I::LocalSet(s));
        f.instruction(&I::LocalGet(out))
            .instruction(&I::LocalGet(s))
            .instruction(&I::I32Store(MemArg {
                offset: 0,
                align: 0,
                memory_index: 0,
            }));
        f.instruction(&I::LocalGet(out))
            .instruction(&I::I32Const(4))
            .instruction(&I::I32Add)
            .instruction(&I::LocalSet(out));
    };
    match test {
        Test::TopEqz | Test::TopComplement => {
            f.instruction(&I::Block(BlockType::Empty))
                .instruction(&I::Loop(BlockType::Empty))
                .instruction(&I::LocalGet(i))
                .instruction(&I::LocalGet(n));
            if let Test::TopEqz = test {
                f.instruction(&compare(cmp)).instruction(&I::I32Eqz);
            } else {
                f.instruction(&compare(not));
            }
            f.instruction(&I::BrIf(1));
            body(&mut f);
            next(&mut f);
            f.instruction(&I::LocalSet(i))
                .instruction(&I::Br(0))
                .instruction(&I::End)
                .instruction(&I::End);
        }
        Test::Bottom => {
            f.instruction(&I::Loop(BlockType::Empty));
            body(&mut f);
            next(&mut f);
            f.instruction(&I::LocalTee(i))
                .instruction(&I::LocalGet(n))
                .instruction(&compare(cmp))
                .instruction(&I::BrIf(0))
                .instruction(&I::End);
        }
    }
    f.instruction(&I::LocalGet(s)).instruction(&I::End);
    let i32t = wasm_encoder::ValType::I32;
    f_module(pages, [t, t, i32t, i32t], [i32t], &f)
}

/// The compare `which` (`lt_u`, ...) of `i64`s or `i32`s.
fn compare(wide: bool, which: &str) -> I<'static> {
    match (wide, which) {
        (false, "lt_u") => I::I32LtU,
        (false, "le_u") => I::I32LeU,
        (false, "lt_s") => I::I32LtS,
        (false, "le_s") => I::I32LeS,
        (false, "gt_u") => I::I32GtU,
        (false, "ge_u") => I::I32GeU,
        (false, "gt_s") => I::I32GtS,
        (false, "ge_s") => I::I32GeS,
        (false, "ne") => I::I32Ne,
        (false, _) => I::I32Eq,
        (true, "lt_u") => I::I64LtU,
        (true, "le_u") => I::I64LeU,
        (true, "lt_s") => I::I64LtS,
        (true, "le_s") => I::I64LeS,
        (true, "gt_u") => I::I64GtU,
        (true, "ge_u") => I::I64GeU,
        (true, "gt_s") => I::I64GtS,
        (true, "ge_s") => I::I64GeS,
        (true, "ne") => I::I64Ne,
        (true, _) => I::I64Eq,
    }
}
