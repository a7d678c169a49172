//! [`CpuError`]: the CPU driver's error. It names the trait method that
//! failed, its driver-independent [`ErrorKind`], and a message a person can
//! act on.

use std::{fmt, io};

use tensorwasm_core::{DriverError, ErrorKind};

/// An error of the CPU driver: which call failed, its kind, and why.
///
/// Displays as `op: kind: message`, e.g.
/// `load_ptx: not supported: loading PTX needs the CUDA driver (this is the CPU driver)`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CpuError {
    op: &'static str,
    kind: ErrorKind,
    message: String,
}

impl CpuError {
    pub(crate) fn new(op: &'static str, kind: ErrorKind, message: impl Into<String>) -> Self {
        CpuError {
            op,
            kind,
            message: message.into(),
        }
    }

    /// An argument refused before any work was done.
    pub(crate) fn invalid(op: &'static str, message: impl Into<String>) -> Self {
        CpuError::new(op, ErrorKind::InvalidArgument, message)
    }

    /// A failed system call; `ENOMEM` is out of memory, anything else `Other`.
    pub(crate) fn os(op: &'static str, doing: &str, err: io::Error) -> Self {
        let kind = if err.raw_os_error() == Some(libc::ENOMEM)
            || err.kind() == io::ErrorKind::OutOfMemory
        {
            ErrorKind::OutOfMemory
        } else {
            ErrorKind::Other
        };
        CpuError::new(op, kind, format!("{doing} failed: {err}"))
    }

    /// The driver call that failed, named as its trait method (`"alloc_device"`,
    /// `"load_ptx"`, `"stream_synchronize"`).
    pub fn op(&self) -> &'static str {
        self.op
    }

    /// Why it failed, in words.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for CpuError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}: {}", self.op, self.kind, self.message)
    }
}

impl std::error::Error for CpuError {}

impl DriverError for CpuError {
    fn kind(&self) -> ErrorKind {
        self.kind
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_names_call_kind_and_reason() {
        let e = CpuError::new("alloc_device", ErrorKind::OutOfMemory, "1 byte too many");
        assert_eq!(
            e.to_string(),
            "alloc_device: out of memory: 1 byte too many"
        );
        assert_eq!(e.kind(), ErrorKind::OutOfMemory);
        assert_eq!(e.op(), "alloc_device");
        let oom = CpuError::os(
            "vm_map",
            "mprotect",
            io::Error::from_raw_os_error(libc::ENOMEM),
        );
        assert_eq!(oom.kind(), ErrorKind::OutOfMemory);
        let other = CpuError::os(
            "vm_map",
            "mprotect",
            io::Error::from_raw_os_error(libc::EINVAL),
        );
        assert_eq!(other.kind(), ErrorKind::Other);
    }
}
