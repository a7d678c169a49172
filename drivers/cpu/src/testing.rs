//! Helpers for the unit tests: a seeded PRNG and a small driver.

use std::time::{SystemTime, UNIX_EPOCH};

use tensorwasm_core::DevicePtr;

use crate::CpuDriver;

/// xorshift64*, seeded from `TENSORWASM_SEED` or the clock; the seed is
/// printed so a failure can be repeated.
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn seeded(test: &str) -> Rng {
        let seed = std::env::var("TENSORWASM_SEED")
            .ok()
            .and_then(|s| u64::from_str_radix(s.trim_start_matches("0x"), 16).ok())
            .unwrap_or_else(|| {
                SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map_or(0x9e37_79b9_7f4a_7c15, |d| d.as_nanos() as u64)
            })
            | 1;
        println!("{test}: seed {seed:#x} (TENSORWASM_SEED={seed:x} repeats it)");
        Rng(seed)
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// `n` random bytes, none of them zero (so a zeroed copy cannot pass).
    pub(crate) fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n)
            .map(|_| match (self.next_u64() >> 56) as u8 {
                0 => 0xa5,
                byte => byte,
            })
            .collect()
    }
}

pub(crate) fn driver(capacity: u64) -> CpuDriver {
    CpuDriver::with_capacity(capacity).expect("a CPU driver")
}

/// A kernel parameter's address as a typed host pointer.
pub(crate) fn host<T>(address: DevicePtr) -> *mut T {
    std::ptr::with_exposed_provenance_mut(address.0 as usize)
}
