//! [`Errno`], the codes of `docs/ABI.md`, and [`Error`], an errno with the
//! text the host gives for it through `last_error`. Only the thin layer
//! ([`crate::result`]) makes errors; everything above passes them on.

use alloc::string::String;
use core::fmt;

/// A failure code of a `wasi_cuda` import (`docs/ABI.md`, "Error codes").
/// `0` (success) is not a variant: success is `Ok`.
// The names are the ABI's, spelled as the host's `tensorwasm_core::abi::Errno`.
#[allow(clippy::upper_case_acronyms)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(i32)]
pub enum Errno {
    /// An argument is outside its domain (unknown tag, zero size, bad launch
    /// geometry, text not UTF-8, ...).
    EINVAL = 1,
    /// A guest range lies outside the guest's memory.
    EFAULT = 2,
    /// A guest pointer is not aligned as required.
    EALIGN = 3,
    /// An offset plus a length does not fit.
    EOVERFLOW = 4,
    /// A handle is freed, forged, another guest's, or of another kind.
    EBADH = 5,
    /// The device (or the guest's limit) has no room.
    ENOMEM = 6,
    /// No such device.
    ENODEV = 7,
    /// The driver cannot do this (e.g. PTX on the CPU driver).
    ENOTSUP = 8,
    /// A module image was refused; the message holds the JIT log.
    EIMAGE = 9,
    /// No function of that name in the module.
    ENOENT = 10,
    /// The launch was refused by the driver or the kernel failed.
    ELAUNCH = 11,
    /// A pointer argument names guest memory the device cannot address.
    ENOTADDR = 12,
    /// A per-guest limit is reached (handles per kind, arguments per launch).
    ELIMIT = 13,
    /// Any other driver failure; the message says which call and code.
    EDRIVER = 14,
    /// A Wasm kernel trapped; the message names the kernel, the trap and its
    /// offset in the module.
    ETRAP = 15,
    /// A tenant quota would be exceeded; the message names the resource, the
    /// amount requested, what is in use and the limit.
    EQUOTA = 16,
    /// The tenant's policy forbids this call, e.g. loading raw PTX.
    EPERM = 17,
    /// The device's context is lost to a fault; no GPU call of the host
    /// process will succeed again.
    EDEVLOST = 18,
}

/// Every errno with its name, in code order: the ABI's table, as data.
const TABLE: [(Errno, &str); 18] = [
    (Errno::EINVAL, "EINVAL"),
    (Errno::EFAULT, "EFAULT"),
    (Errno::EALIGN, "EALIGN"),
    (Errno::EOVERFLOW, "EOVERFLOW"),
    (Errno::EBADH, "EBADH"),
    (Errno::ENOMEM, "ENOMEM"),
    (Errno::ENODEV, "ENODEV"),
    (Errno::ENOTSUP, "ENOTSUP"),
    (Errno::EIMAGE, "EIMAGE"),
    (Errno::ENOENT, "ENOENT"),
    (Errno::ELAUNCH, "ELAUNCH"),
    (Errno::ENOTADDR, "ENOTADDR"),
    (Errno::ELIMIT, "ELIMIT"),
    (Errno::EDRIVER, "EDRIVER"),
    (Errno::ETRAP, "ETRAP"),
    (Errno::EQUOTA, "EQUOTA"),
    (Errno::EPERM, "EPERM"),
    (Errno::EDEVLOST, "EDEVLOST"),
];

impl Errno {
    /// The code the import returns for this failure (1..=18).
    pub const fn code(self) -> i32 {
        self as i32
    }

    /// The errno's name as `docs/ABI.md` writes it, e.g. `"EFAULT"`.
    pub const fn name(self) -> &'static str {
        // Codes are 1..=18 and the table is in code order.
        TABLE[(self.code() - 1) as usize].1
    }

    /// The errno with this code; `None` for `0` (success) and unknown codes.
    pub const fn from_code(code: i32) -> Option<Errno> {
        if code >= 1 && code <= TABLE.len() as i32 {
            Some(TABLE[(code - 1) as usize].0)
        } else {
            None
        }
    }
}

impl fmt::Display for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A refused `wasi_cuda` call: its errno and the host's text for it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Error {
    /// What the import returned. A code this library does not know (a newer
    /// host) is reported as [`Errno::EDRIVER`]; the message still names it.
    pub errno: Errno,
    /// The host's `last_error` text, read right after the failure: the
    /// function, the errno and the cause, e.g. `module_load_ptx: EIMAGE: ...`.
    /// Empty only if the host gave none.
    pub message: String,
}

impl Error {
    /// The value a guest export conventionally returns for this error: the
    /// errno's code, negated (`-1` for `EINVAL`, ...).
    pub const fn negative_errno(&self) -> i32 {
        -self.errno.code()
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.message.is_empty() {
            write!(f, "{} ({})", self.errno, self.errno.code())
        } else {
            // The host's text already names the function and the errno.
            f.write_str(&self.message)
        }
    }
}

impl core::error::Error for Error {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_and_names_match_the_abi_table() {
        for (code, name) in [
            (1, "EINVAL"),
            (5, "EBADH"),
            (9, "EIMAGE"),
            (14, "EDRIVER"),
            (15, "ETRAP"),
            (16, "EQUOTA"),
            (17, "EPERM"),
            (18, "EDEVLOST"),
        ] {
            let errno = Errno::from_code(code).unwrap();
            assert_eq!(errno.code(), code);
            assert_eq!(errno.name(), name);
        }
        for (i, (errno, _)) in TABLE.iter().enumerate() {
            assert_eq!(errno.code(), i as i32 + 1);
        }
    }

    #[test]
    fn success_and_unknown_codes_are_not_errnos() {
        for code in [0, -1, 19, i32::MIN, i32::MAX] {
            assert_eq!(Errno::from_code(code), None, "code {code}");
        }
    }
}
