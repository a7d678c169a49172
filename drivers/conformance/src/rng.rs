//! A small seeded generator for test inputs: the seed is printed, and
//! `TENSORWASM_SEED` replays a failing run.

use std::time::{SystemTime, UNIX_EPOCH};

/// xorshift64* with a printed seed.
pub struct Rng(u64);

impl Rng {
    /// Seeds from `TENSORWASM_SEED` or the clock, printing the seed with `what`.
    pub fn from_env(what: &str) -> Rng {
        let seed = std::env::var("TENSORWASM_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| {
                SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map(|d| d.as_nanos() as u64)
                    .unwrap_or(0x9e37_79b9_7f4a_7c15)
            });
        println!("{what}: TENSORWASM_SEED={seed}");
        Rng::new(seed)
    }

    /// A generator with a fixed seed.
    pub fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x2545_f491_4f6c_dd1d | 1)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A value in `0..n` (n > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    /// A nonzero byte.
    pub fn nonzero_byte(&mut self) -> u8 {
        (self.next_u64() % 255) as u8 + 1
    }

    /// `len` random bytes, none of them zero (so a zeroed or untouched
    /// buffer can never pass for the data).
    pub fn bytes(&mut self, len: usize) -> Vec<u8> {
        (0..len)
            .map(|_| match (self.next_u64() >> 56) as u8 {
                0 => 0xa5,
                byte => byte,
            })
            .collect()
    }

    /// A float in [-1000, 1000), never exactly zero.
    pub fn f32_signed(&mut self) -> f32 {
        let unit = (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32;
        let v = unit * 2000.0 - 1000.0;
        if v == 0.0 { 0.5 } else { v }
    }
}
