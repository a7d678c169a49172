//! Seeded inputs: the seed a bench prints (from its environment variable,
//! else the clock), the generators the benches draw their floats from, and
//! f32 vectors as the little-endian bytes that guest and device memory hold.

use std::time::{SystemTime, UNIX_EPOCH};

/// SplitMix64's increment (the golden ratio in 64 bits).
pub const GOLDEN_GAMMA: u64 = 0x9e37_79b9_7f4a_7c15;

/// The SplitMix64 finaliser.
pub fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Output `index` (0 first) of SplitMix64 started at `seed`, made without
/// the ones before it.
pub fn splitmix64(seed: u64, index: u64) -> u64 {
    mix(seed.wrapping_add(index.wrapping_add(1).wrapping_mul(GOLDEN_GAMMA)))
}

/// A float in [1, 2) (never zero) from the top 23 bits of `z`.
pub fn one_to_two(z: u64) -> f32 {
    f32::from_bits(0x3f80_0000 | (z >> 41) as u32)
}

/// 64 random bits for element `i` of stream `v` of `seed`.
pub fn counter_bits(seed: u64, v: u64, i: usize) -> u64 {
    mix(seed ^ mix(v.wrapping_mul(GOLDEN_GAMMA) ^ i as u64))
}

/// Element `i` of random vector `v` of `seed`: uniform in `[lo, hi)` on a
/// grid of 2^24 points, each in the middle of its step, so none is 0 when
/// `lo` is a whole number of steps from 0 (as for `[-2, 2)` or `[-1, 3)`).
pub fn uniform(seed: u64, v: u64, i: usize, lo: f64, hi: f64) -> f32 {
    let bits = counter_bits(seed, v, i) >> 40;
    (lo + (hi - lo) * (bits as f64 + 0.5) / (1u64 << 24) as f64) as f32
}

/// The seed in environment variable `var` (decimal, or hex after `0x`),
/// else one made from the clock and the process id; the caller prints it
/// either way, so a run can be repeated.
pub fn seed(var: &str) -> Result<u64, String> {
    match std::env::var(var) {
        Ok(text) => {
            let t = text.trim();
            let parsed = match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
                Some(hex) => u64::from_str_radix(hex, 16),
                None => t.parse(),
            };
            parsed.map_err(|e| format!("{var}={text:?} is not a u64: {e}"))
        }
        Err(_) => {
            let nanos = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64);
            Ok(splitmix64(nanos ^ u64::from(std::process::id()) << 32, 0))
        }
    }
}

/// Float `i` of little-endian `bytes`.
pub fn f32_at(bytes: &[u8], i: usize) -> f32 {
    let at = 4 * i;
    f32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
}

/// `values` as little-endian bytes.
pub fn f32_bytes(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// Little-endian `bytes` as floats.
pub fn f32s(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}
