//! The driver-independent error classification. Each driver has its own
//! error type (with the driver's code, name and failing call); generic code
//! reacts to failures through [`ErrorKind`] alone.

use core::fmt;

/// What kind of failure a driver error is, independent of the driver.
///
/// Generic code (the embed layer, quotas, the guest ABI) decides how to react
/// from this alone: retry, refuse, or report to the guest.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "defmt", derive(defmt::Format))]
#[non_exhaustive]
pub enum ErrorKind {
    /// The driver cannot be used at all: library or symbol missing, no
    /// device, driver too old, initialisation failed.
    Unavailable,
    /// Not enough device, managed or host memory.
    OutOfMemory,
    /// An argument was refused (before or by the driver).
    InvalidArgument,
    /// A PTX or cubin image was rejected (the error carries the JIT log).
    InvalidImage,
    /// A named thing (a kernel function, say) does not exist.
    NotFound,
    /// The operation is not supported by this driver or device.
    NotSupported,
    /// A launch was refused, or a kernel failed in a way that leaves the
    /// context usable.
    LaunchFailed,
    /// The device's context is lost: a kernel faulted (an illegal address
    /// or instruction, a device-side assert, a timeout) or the hardware
    /// failed, and the driver refuses every later call of the process
    /// (CUDA's sticky errors; neither a context reset nor a new context
    /// brings it back).
    DeviceLost,
    /// Anything else the driver reported.
    Other,
}

impl ErrorKind {
    /// A short lowercase name, stable across versions (used in logs and in
    /// the text guests read).
    pub const fn as_str(self) -> &'static str {
        match self {
            ErrorKind::Unavailable => "unavailable",
            ErrorKind::OutOfMemory => "out of memory",
            ErrorKind::InvalidArgument => "invalid argument",
            ErrorKind::InvalidImage => "invalid image",
            ErrorKind::NotFound => "not found",
            ErrorKind::NotSupported => "not supported",
            ErrorKind::LaunchFailed => "launch failed",
            ErrorKind::DeviceLost => "device lost",
            ErrorKind::Other => "other",
        }
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The error type of a driver: printable, and classifiable with [`kind`].
///
/// [`kind`]: DriverError::kind
pub trait DriverError: fmt::Debug + fmt::Display + Send + Sync + 'static {
    /// The driver-independent class of this error.
    fn kind(&self) -> ErrorKind;
}
