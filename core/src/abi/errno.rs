//! The errno every `wasi_cuda` import returns, and [`AbiError`], an errno with
//! the text a guest reads back through `last_error`. The codes and names are
//! the table in `docs/ABI.md`; success is `Ok`, never a variant.

use alloc::{borrow::Cow, format, string::String};
use core::fmt;

use crate::error::{DriverError, ErrorKind};

/// A failure code of the guest ABI, as the guest sees it (`docs/ABI.md`,
/// "Error codes"). `0` (success) is not a variant: success is `Ok`.
// The names are the ABI's, spelled as the guest's headers spell them.
#[allow(clippy::upper_case_acronyms)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[repr(i32)]
pub enum Errno {
    /// An argument is outside its domain.
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
    /// The driver cannot do this.
    ENOTSUP = 8,
    /// A module image was refused.
    EIMAGE = 9,
    /// No function of that name in the module.
    ENOENT = 10,
    /// The launch was refused by the driver or the kernel failed.
    ELAUNCH = 11,
    /// A pointer argument names guest memory the device cannot address.
    ENOTADDR = 12,
    /// A per-guest limit is reached.
    ELIMIT = 13,
    /// Any other driver failure.
    EDRIVER = 14,
    /// A Wasm kernel trapped (out of bounds, division by zero, out of fuel...).
    ETRAP = 15,
    /// A tenant quota would be exceeded.
    EQUOTA = 16,
    /// The tenant's policy forbids this call, e.g. loading raw PTX.
    EPERM = 17,
    /// The device's context is lost to a fault; no GPU call of the
    /// process will succeed again.
    EDEVLOST = 18,
}

/// Every errno with its name and meaning, in code order: the table in
/// `docs/ABI.md`, as data.
const TABLE: [(Errno, &str, &str); 18] = [
    (Errno::EINVAL, "EINVAL", "an argument is outside its domain"),
    (
        Errno::EFAULT,
        "EFAULT",
        "a guest range lies outside the guest's memory",
    ),
    (
        Errno::EALIGN,
        "EALIGN",
        "a guest pointer is not aligned as required",
    ),
    (
        Errno::EOVERFLOW,
        "EOVERFLOW",
        "an offset plus a length does not fit",
    ),
    (
        Errno::EBADH,
        "EBADH",
        "a handle is freed, forged, another guest's, or of another kind",
    ),
    (
        Errno::ENOMEM,
        "ENOMEM",
        "the device (or the guest's limit) has no room",
    ),
    (Errno::ENODEV, "ENODEV", "no such device"),
    (Errno::ENOTSUP, "ENOTSUP", "the driver cannot do this"),
    (Errno::EIMAGE, "EIMAGE", "a module image was refused"),
    (
        Errno::ENOENT,
        "ENOENT",
        "no function of that name in the module",
    ),
    (
        Errno::ELAUNCH,
        "ELAUNCH",
        "the launch was refused by the driver or the kernel failed",
    ),
    (
        Errno::ENOTADDR,
        "ENOTADDR",
        "a pointer argument names guest memory the device cannot address",
    ),
    (Errno::ELIMIT, "ELIMIT", "a per-guest limit is reached"),
    (Errno::EDRIVER, "EDRIVER", "any other driver failure"),
    (Errno::ETRAP, "ETRAP", "a Wasm kernel trapped"),
    (Errno::EQUOTA, "EQUOTA", "a tenant quota would be exceeded"),
    (
        Errno::EPERM,
        "EPERM",
        "the tenant's policy forbids this call",
    ),
    (
        Errno::EDEVLOST,
        "EDEVLOST",
        "the device's context is lost to a fault",
    ),
];

impl Errno {
    /// Every errno, in code order.
    pub const ALL: [Errno; 18] = [
        Errno::EINVAL,
        Errno::EFAULT,
        Errno::EALIGN,
        Errno::EOVERFLOW,
        Errno::EBADH,
        Errno::ENOMEM,
        Errno::ENODEV,
        Errno::ENOTSUP,
        Errno::EIMAGE,
        Errno::ENOENT,
        Errno::ELAUNCH,
        Errno::ENOTADDR,
        Errno::ELIMIT,
        Errno::EDRIVER,
        Errno::ETRAP,
        Errno::EQUOTA,
        Errno::EPERM,
        Errno::EDEVLOST,
    ];

    /// The code a `wasi_cuda` import returns for this failure.
    pub const fn code(self) -> i32 {
        self as i32
    }

    /// The row of [`TABLE`] for this errno (codes are 1..=18, rows 0..=17).
    fn row(self) -> (Errno, &'static str, &'static str) {
        let index = usize::try_from(self.code() - 1).unwrap_or(0);
        TABLE.get(index).copied().unwrap_or(TABLE[0])
    }

    /// The errno's name as `docs/ABI.md` writes it, e.g. `"EFAULT"`.
    pub fn name(self) -> &'static str {
        self.row().1
    }

    /// What the errno means, in a few words.
    pub fn description(self) -> &'static str {
        self.row().2
    }

    /// The errno with this code; `None` for `0` (success) and unknown codes.
    pub fn from_code(code: i32) -> Option<Errno> {
        let index = usize::try_from(code.checked_sub(1)?).ok()?;
        Errno::ALL.get(index).copied()
    }
}

impl fmt::Display for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl From<Errno> for i32 {
    fn from(errno: Errno) -> i32 {
        errno.code()
    }
}

impl From<ErrorKind> for Errno {
    fn from(kind: ErrorKind) -> Errno {
        match kind {
            ErrorKind::OutOfMemory => Errno::ENOMEM,
            ErrorKind::InvalidImage => Errno::EIMAGE,
            ErrorKind::NotFound => Errno::ENOENT,
            ErrorKind::NotSupported => Errno::ENOTSUP,
            ErrorKind::LaunchFailed => Errno::ELAUNCH,
            ErrorKind::DeviceLost => Errno::EDEVLOST,
            ErrorKind::InvalidArgument => Errno::EINVAL,
            ErrorKind::Unavailable => Errno::ENODEV,
            ErrorKind::Other => Errno::EDRIVER,
        }
    }
}

/// A refused guest call: the errno it returns and the text `last_error`
/// shows, `"ENAME: reason"`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AbiError {
    /// The code the import returns.
    pub errno: Errno,
    /// What was wrong, for a person: which argument, which value, which limit.
    pub reason: Cow<'static, str>,
}

impl AbiError {
    /// An error with this errno and reason.
    pub fn new(errno: Errno, reason: impl Into<Cow<'static, str>>) -> Self {
        AbiError {
            errno,
            reason: reason.into(),
        }
    }

    /// [`Errno::EINVAL`] with this reason.
    pub fn invalid(reason: impl Into<Cow<'static, str>>) -> Self {
        AbiError::new(Errno::EINVAL, reason)
    }

    /// [`Errno::EFAULT`] with this reason.
    pub fn fault(reason: impl Into<Cow<'static, str>>) -> Self {
        AbiError::new(Errno::EFAULT, reason)
    }

    /// [`Errno::EALIGN`] with this reason.
    pub fn misaligned(reason: impl Into<Cow<'static, str>>) -> Self {
        AbiError::new(Errno::EALIGN, reason)
    }

    /// [`Errno::EOVERFLOW`] with this reason.
    pub fn overflow(reason: impl Into<Cow<'static, str>>) -> Self {
        AbiError::new(Errno::EOVERFLOW, reason)
    }

    /// [`Errno::EBADH`] with this reason.
    pub fn bad_handle(reason: impl Into<Cow<'static, str>>) -> Self {
        AbiError::new(Errno::EBADH, reason)
    }

    /// [`Errno::ELIMIT`] with this reason.
    pub fn limit(reason: impl Into<Cow<'static, str>>) -> Self {
        AbiError::new(Errno::ELIMIT, reason)
    }

    /// A driver failure as the guest sees it: the errno of its
    /// [`ErrorKind`], and the driver's own text (call, code, name, JIT log).
    pub fn from_driver<E: DriverError>(error: &E) -> Self {
        AbiError::new(Errno::from(error.kind()), format!("{error}"))
    }

    /// The code the import returns.
    pub fn code(&self) -> i32 {
        self.errno.code()
    }

    /// The same error with `context: ` put before its reason, e.g. the
    /// argument it was found in.
    #[must_use]
    pub fn context(self, context: impl fmt::Display) -> Self {
        let reason: String = format!("{context}: {}", self.reason);
        AbiError::new(self.errno, reason)
    }
}

impl fmt::Display for AbiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.errno.name(), self.reason)
    }
}

#[cfg(feature = "defmt")]
impl defmt::Format for AbiError {
    fn format(&self, f: defmt::Formatter<'_>) {
        defmt::write!(f, "{}: {=str}", self.errno, &*self.reason)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::ToString;

    #[test]
    fn codes_names_and_table_agree() {
        let expected = [
            (1, "EINVAL"),
            (2, "EFAULT"),
            (3, "EALIGN"),
            (4, "EOVERFLOW"),
            (5, "EBADH"),
            (6, "ENOMEM"),
            (7, "ENODEV"),
            (8, "ENOTSUP"),
            (9, "EIMAGE"),
            (10, "ENOENT"),
            (11, "ELAUNCH"),
            (12, "ENOTADDR"),
            (13, "ELIMIT"),
            (14, "EDRIVER"),
            (15, "ETRAP"),
            (16, "EQUOTA"),
            (17, "EPERM"),
            (18, "EDEVLOST"),
        ];
        assert_eq!(Errno::ALL.len(), expected.len());
        for (errno, (code, name)) in Errno::ALL.iter().zip(expected) {
            assert_eq!(errno.code(), code);
            assert_eq!(errno.name(), name);
            assert_eq!(errno.to_string(), name);
            assert_eq!(Errno::from_code(code), Some(*errno));
            assert_eq!(i32::from(*errno), code);
            assert!(!errno.description().is_empty());
        }
        for (row, errno) in TABLE.iter().zip(Errno::ALL) {
            assert_eq!(row.0, errno);
        }
    }

    #[test]
    fn unknown_codes_are_none() {
        for code in [0, -1, 19, 20, i32::MIN, i32::MAX] {
            assert_eq!(Errno::from_code(code), None, "code {code}");
        }
    }

    #[test]
    fn error_kinds_map_to_errnos() {
        let pairs = [
            (ErrorKind::OutOfMemory, Errno::ENOMEM),
            (ErrorKind::InvalidImage, Errno::EIMAGE),
            (ErrorKind::NotFound, Errno::ENOENT),
            (ErrorKind::NotSupported, Errno::ENOTSUP),
            (ErrorKind::LaunchFailed, Errno::ELAUNCH),
            (ErrorKind::DeviceLost, Errno::EDEVLOST),
            (ErrorKind::InvalidArgument, Errno::EINVAL),
            (ErrorKind::Unavailable, Errno::ENODEV),
            (ErrorKind::Other, Errno::EDRIVER),
        ];
        for (kind, errno) in pairs {
            assert_eq!(Errno::from(kind), errno);
        }
    }

    #[derive(Debug)]
    struct FakeDriverError;

    impl fmt::Display for FakeDriverError {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("cuModuleLoadData: CUDA_ERROR_INVALID_PTX (218)")
        }
    }

    impl DriverError for FakeDriverError {
        fn kind(&self) -> ErrorKind {
            ErrorKind::InvalidImage
        }
    }

    #[test]
    fn display_is_name_then_reason() {
        let e = AbiError::fault("guest range 0x10+0x20 ends past memory of 0x18 bytes");
        assert_eq!(
            e.to_string(),
            "EFAULT: guest range 0x10+0x20 ends past memory of 0x18 bytes"
        );
        assert_eq!(e.code(), 2);
        let e = e.context("argument 3");
        assert_eq!(
            e.to_string(),
            "EFAULT: argument 3: guest range 0x10+0x20 ends past memory of 0x18 bytes"
        );
        let d = AbiError::from_driver(&FakeDriverError);
        assert_eq!(d.errno, Errno::EIMAGE);
        assert_eq!(
            d.to_string(),
            "EIMAGE: cuModuleLoadData: CUDA_ERROR_INVALID_PTX (218)"
        );
        assert_eq!(AbiError::invalid("x").errno, Errno::EINVAL);
        assert_eq!(AbiError::misaligned("x").errno, Errno::EALIGN);
        assert_eq!(AbiError::overflow("x").errno, Errno::EOVERFLOW);
        assert_eq!(AbiError::bad_handle("x").errno, Errno::EBADH);
        assert_eq!(AbiError::limit("x").errno, Errno::ELIMIT);
    }
}
