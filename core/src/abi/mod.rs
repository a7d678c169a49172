//! The `wasi_cuda` guest ABI's checks, independent of wasmtime: errnos,
//! handle tables, guest-memory access and the launch-argument decoder. The
//! host functions in `tensorwasm_embed` call these and nothing here calls a
//! driver. Every input is the guest's and hostile: no function here panics,
//! indexes out of bounds or overflows on any value. `docs/ABI.md` is the spec
//! this module implements.
//!
//! - [`errno`]: [`Errno`] and [`AbiError`] (errno + `last_error` text).
//! - [`handle`]: [`Handle`], [`OwnerId`] and [`HandleTable`].
//! - [`guest`]: ranges, out-pointers and strings in guest linear memory.
//! - [`args`]: launch argument descriptors, decoded and encoded.
//! - [`device_info`]: the 128-byte `device_info` record.
//! - [`tensor`]: built-in tensor-op descriptors, decoded and checked.

pub mod args;
pub mod device_info;
pub mod errno;
pub mod guest;
pub mod handle;
pub mod tensor;

pub use args::{
    ARG_DESCRIPTOR_SIZE, ArgDescriptor, ArgTag, GuestMemoryRef, LaunchArg, MAX_ARG_ALIGN,
    decode_launch_args, encode_args, resolve_buffer_pointer,
};
pub use device_info::{DEVICE_INFO_SIZE, encode_device_info};
pub use errno::{AbiError, Errno};
pub use guest::{
    guest_range, guest_slice, guest_slice_mut, non_negative, param_u32, param_u64, read_str,
    read_u32, read_u64, write_bytes, write_u32, write_u64,
};
pub use handle::{Handle, HandleKind, HandleTable, OwnerId, SlotImage, SlotState};

#[cfg(test)]
pub(crate) mod tests {
    //! The test inputs' generator, in the suite's seed format: the seed is
    //! printed and `TENSORWASM_SEED` replays it.

    extern crate std;

    /// xorshift64* with a printed seed (the conformance suite's `Rng`).
    pub(crate) struct Rng(u64);

    impl Rng {
        /// Seeds from `TENSORWASM_SEED` or the clock, printing the seed.
        pub(crate) fn from_env(what: &str) -> Rng {
            let seed = std::env::var("TENSORWASM_SEED")
                .ok()
                .and_then(|s| s.parse().ok())
                .unwrap_or_else(|| {
                    std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .map(|d| d.as_nanos() as u64)
                        .unwrap_or(0x9e37_79b9_7f4a_7c15)
                });
            std::println!("{what}: TENSORWASM_SEED={seed}");
            Rng(seed ^ 0x2545_f491_4f6c_dd1d | 1)
        }

        /// The next 64 random bits.
        pub(crate) fn next_u64(&mut self) -> u64 {
            let mut x = self.0;
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            self.0 = x;
            x.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }

        /// A value in `0..n` (`n` > 0).
        pub(crate) fn below(&mut self, n: u64) -> u64 {
            self.next_u64() % n.max(1)
        }
    }
}
