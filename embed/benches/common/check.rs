//! Checking a bench's outputs: where one first differs from what it should
//! be, and work split over the host's cores (outputs of 64 Mi elements
//! take seconds to check on one).

use std::ops::Range;

/// The first element where `got` differs from `want` in bits.
pub fn first_wrong(got: &[f32], want: &[f32]) -> Option<usize> {
    got.iter()
        .zip(want)
        .position(|(g, w)| g.to_bits() != w.to_bits())
}

/// `check` of each of `0..n`'s parts, one part per core, run at once; their
/// results in the parts' order.
pub fn over_cores<T: Send>(
    n: usize,
    check: impl Fn(Range<usize>) -> T + Sync,
) -> Result<Vec<T>, String> {
    let threads = std::thread::available_parallelism().map_or(1, |t| t.get());
    let chunk = n.div_ceil(threads).max(1);
    std::thread::scope(|s| {
        let parts: Vec<_> = (0..n)
            .step_by(chunk)
            .map(|start| {
                let check = &check;
                s.spawn(move || check(start..(start + chunk).min(n)))
            })
            .collect();
        parts
            .into_iter()
            .map(|p| {
                p.join()
                    .map_err(|_| "a checking thread panicked".to_string())
            })
            .collect()
    })
}
