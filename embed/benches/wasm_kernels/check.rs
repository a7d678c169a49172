//! wasm_kernels' inputs and the check of every output: each input element
//! made again from the seed alone, each output element computed again in
//! f32 on the CPU and compared bit for bit.

use crate::common::{
    BenchResult,
    check::over_cores,
    inputs::{f32_at, one_to_two, splitmix64},
};

use super::{ALPHA, LOOP_A, LOOP_B, LOOP_ITERS, N, Op};

/// Inputs at the start of both vectors, before the random ones: subnormals
/// (the smallest, whose 1.5x rounds), a value whose sum overflows, the
/// extremes, inexact fractions. Both vectors hold the same value at each
/// index, so every sum and every SAXPY step keeps one sign: no inf - inf,
/// hence no NaN, whose bits Wasm leaves open.
pub const EDGE_VALUES: [f32; 10] = [
    f32::from_bits(0x0000_0001),
    f32::from_bits(0x8040_0000),
    f32::MIN_POSITIVE,
    -1.0,
    3.0e38,
    f32::MAX,
    -f32::MAX,
    1.0e-30,
    0.1,
    -7.5e-3,
];

/// Element `i` of input vector `vector` (0: a, also x; 1: b): an edge value
/// at the start, then random floats in [1, 2) (never zero), the
/// `vector * N + i`-th output of SplitMix64 from `seed`, so any element can
/// be made again without the ones before it.
fn input(seed: u64, vector: usize, i: usize) -> f32 {
    if let Some(&edge) = EDGE_VALUES.get(i) {
        return edge;
    }
    one_to_two(splitmix64(seed, (vector * N + i) as u64))
}

/// Writes input vector `vector` as little-endian floats.
pub fn fill_inputs(seed: u64, vector: usize, out: &mut [u8]) {
    for (i, chunk) in out.chunks_exact_mut(4).enumerate() {
        chunk.copy_from_slice(&input(seed, vector, i).to_le_bytes());
    }
}

/// Elements `start..start + want.len()` of `op`'s output, computed in f32
/// on the CPU: `a + b` for the vector add; for the SAXPY (which runs over
/// the vector add's output), `applications` steps of `y = alpha * x + y`
/// from `y = a + b`; for the loop, [`LOOP_ITERS`] steps of `x = x * a + b`
/// from `x = a` (whatever `applications`: every launch starts again from
/// `a`). Each step is a multiply then an add (Rust never contracts them
/// into an fma). `x` is scratch of the same length.
fn expected(op: Op, seed: u64, applications: usize, start: usize, want: &mut [f32], x: &mut [f32]) {
    if op == Op::Loop {
        for (j, w) in want.iter_mut().enumerate() {
            *w = input(seed, 0, start + j);
        }
        // Step by step over the whole chunk, so the compiler can run the
        // elements' independent chains side by side.
        for _ in 0..LOOP_ITERS {
            for w in want.iter_mut() {
                let product = *w * LOOP_A;
                *w = product + LOOP_B;
            }
        }
        return;
    }
    for (j, (w, x)) in want.iter_mut().zip(x.iter_mut()).enumerate() {
        let (a, b) = (input(seed, 0, start + j), input(seed, 1, start + j));
        *w = a + b;
        *x = a;
    }
    if op == Op::Saxpy {
        for _ in 0..applications {
            for (y, &x) in want.iter_mut().zip(x.iter()) {
                let product = ALPHA * x;
                *y += product;
            }
        }
    }
}

/// The first element found wrong, and in which output.
struct Wrong {
    output: usize,
    element: usize,
    want: f32,
    got: f32,
}

/// Elements made at once per thread by [`check_outputs`].
const CHECK_CHUNK: usize = 16 << 10;

/// Checks every element of each output (`op.elements()` little-endian
/// floats) against [`expected`], bit for bit, on all cores.
pub fn check_outputs(
    op: Op,
    seed: u64,
    applications: usize,
    outputs: &[(&str, &[u8])],
) -> BenchResult<()> {
    let n = op.elements();
    if let Some((side, out)) = outputs.iter().find(|(_, out)| out.len() != n * 4) {
        return Err(format!(
            "{side}: {} bytes to check, not {}",
            out.len(),
            n * 4
        ));
    }
    let found = over_cores(n, |part| {
        let (mut at, end) = (part.start, part.end);
        let (mut want, mut x) = (vec![0f32; CHECK_CHUNK], vec![0f32; CHECK_CHUNK]);
        while at < end {
            let len = CHECK_CHUNK.min(end - at);
            let want = &mut want[..len];
            expected(op, seed, applications, at, want, &mut x[..len]);
            for (output, (_, out)) in outputs.iter().enumerate() {
                for (j, w) in want.iter().enumerate() {
                    let got = f32_at(out, at + j);
                    if got.to_bits() != w.to_bits() {
                        let (want, element) = (*w, at + j);
                        return Some(Wrong {
                            output,
                            element,
                            want,
                            got,
                        });
                    }
                }
            }
            at += len;
        }
        None
    })?;
    match found.into_iter().flatten().min_by_key(|w| w.element) {
        None => Ok(()),
        Some(w) => {
            let (x, y) = (input(seed, 0, w.element), input(seed, 1, w.element));
            let inputs = match op {
                Op::Vadd => format!("inputs {x:e} and {y:e}"),
                Op::Saxpy => format!("inputs {x:e} and {y:e}, {applications} steps"),
                Op::Loop => format!("input {x:e}, {LOOP_ITERS} steps"),
            };
            Err(format!(
                "{} {} is wrong at element {} ({inputs}): want {:e} ({:#010x}), got {:e} \
                 ({:#010x})",
                outputs[w.output].0,
                op.label(),
                w.element,
                w.want,
                w.want.to_bits(),
                w.got,
                w.got.to_bits(),
            ))
        }
    }
}
