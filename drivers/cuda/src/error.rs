//! [`CudaError`]: every way the CUDA driver can fail, with the driver's
//! numeric code, its name and the call that failed, so a person can act on it.

use std::fmt;

use tensorwasm_core::{DriverError, ErrorKind};

/// The lowest driver version this crate supports (12.2: `cuMemAdvise_v2`,
/// `cuMemPrefetchAsync_v2`).
pub const MIN_DRIVER_VERSION: (u32, u32) = (12, 2);

/// An error of the CUDA driver or of loading it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum CudaError {
    /// `libcuda` could not be opened.
    LibraryNotFound {
        /// The library name or path tried.
        library: String,
        /// The loader's message.
        reason: String,
    },
    /// `libcuda` lacks a function this crate calls (driver too old or broken).
    MissingSymbol {
        /// The exported symbol, e.g. `cuMemPrefetchAsync_v2`.
        symbol: &'static str,
    },
    /// The installed driver is older than [`MIN_DRIVER_VERSION`].
    DriverTooOld {
        /// The driver's version (major, minor).
        found: (u32, u32),
        /// The version required.
        required: (u32, u32),
    },
    /// No device with this ordinal.
    NoDevice {
        /// The ordinal asked for.
        ordinal: u32,
        /// Devices present.
        count: u32,
    },
    /// A driver call returned an error.
    Driver {
        /// The CUDA function, as exported (e.g. `cuModuleLoadDataEx`).
        call: &'static str,
        /// The `CUresult` value.
        code: u32,
        /// Its name, e.g. `CUDA_ERROR_INVALID_PTX`.
        name: String,
        /// The driver's description of it.
        description: String,
        /// The JIT's log, for a rejected module image.
        log: Option<String>,
    },
    /// An argument was refused before any driver call.
    Invalid {
        /// The operation (a `GpuDriver` method or CUDA call).
        op: &'static str,
        /// What was wrong.
        reason: String,
    },
}

impl CudaError {
    /// The `CUresult` code, for errors the driver returned.
    pub fn code(&self) -> Option<u32> {
        match self {
            CudaError::Driver { code, .. } => Some(*code),
            _ => None,
        }
    }

    /// The `CUresult` name (e.g. `CUDA_ERROR_INVALID_PTX`), for errors the
    /// driver returned.
    pub fn code_name(&self) -> Option<&str> {
        match self {
            CudaError::Driver { name, .. } => Some(name),
            _ => None,
        }
    }

    /// The JIT log of a rejected PTX or cubin image.
    pub fn jit_log(&self) -> Option<&str> {
        match self {
            CudaError::Driver { log, .. } => log.as_deref(),
            _ => None,
        }
    }

    pub(crate) fn invalid(op: &'static str, reason: impl Into<String>) -> CudaError {
        CudaError::Invalid {
            op,
            reason: reason.into(),
        }
    }
}

impl DriverError for CudaError {
    fn kind(&self) -> ErrorKind {
        match self {
            CudaError::LibraryNotFound { .. }
            | CudaError::MissingSymbol { .. }
            | CudaError::DriverTooOld { .. }
            | CudaError::NoDevice { .. } => ErrorKind::Unavailable,
            CudaError::Invalid { .. } => ErrorKind::InvalidArgument,
            CudaError::Driver { code, .. } => kind_of_code(*code),
        }
    }
}

/// Classifies a `CUresult` (codes from `cuda.h`).
fn kind_of_code(code: u32) -> ErrorKind {
    match code {
        2 => ErrorKind::OutOfMemory,
        1 | 101 | 201 | 400 | 701 => ErrorKind::InvalidArgument,
        3 | 4 | 34 | 35 | 36 | 46 | 100 | 216 | 802..=805 => ErrorKind::Unavailable,
        200 | 209 | 218 | 221..=224 | 300..=302 => ErrorKind::InvalidImage,
        500 => ErrorKind::NotFound,
        217 | 801 => ErrorKind::NotSupported,
        // Sticky: the context is unusable from then on (illegal address,
        // launch timeout, context destroyed, device-side assert, hardware
        // stack error, illegal instruction, misaligned address, invalid
        // address space or PC, an exception in a kernel; an uncorrectable
        // ECC error).
        214 | 700 | 702 | 709 | 710 | 714..=719 => ErrorKind::DeviceLost,
        720 => ErrorKind::LaunchFailed,
        _ => ErrorKind::Other,
    }
}

impl fmt::Display for CudaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CudaError::LibraryNotFound { library, reason } => write!(
                f,
                "cannot load the CUDA driver library `{library}`: {reason} \
                 (install the NVIDIA driver, or point TENSORWASM_LIBCUDA at libcuda)"
            ),
            CudaError::MissingSymbol { symbol } => write!(
                f,
                "the CUDA driver library has no `{symbol}`: driver {}.{} or newer is required",
                MIN_DRIVER_VERSION.0, MIN_DRIVER_VERSION.1
            ),
            CudaError::DriverTooOld { found, required } => write!(
                f,
                "CUDA driver {}.{} is too old: {}.{} or newer is required",
                found.0, found.1, required.0, required.1
            ),
            CudaError::NoDevice { ordinal, count } => {
                write!(f, "no CUDA device {ordinal}: {count} device(s) present")
            }
            CudaError::Driver {
                call,
                code,
                name,
                description,
                log,
            } => {
                write!(f, "{call} failed: {name} ({code}): {description}")?;
                match log {
                    Some(log) if !log.is_empty() => write!(f, "\nJIT log:\n{log}"),
                    _ => Ok(()),
                }
            }
            CudaError::Invalid { op, reason } => write!(f, "{op}: invalid argument: {reason}"),
        }
    }
}

impl std::error::Error for CudaError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_classify() {
        assert_eq!(kind_of_code(2), ErrorKind::OutOfMemory);
        assert_eq!(kind_of_code(218), ErrorKind::InvalidImage);
        assert_eq!(kind_of_code(100), ErrorKind::Unavailable);
        assert_eq!(kind_of_code(700), ErrorKind::DeviceLost);
        assert_eq!(kind_of_code(710), ErrorKind::DeviceLost);
        assert_eq!(kind_of_code(719), ErrorKind::DeviceLost);
        assert_eq!(kind_of_code(720), ErrorKind::LaunchFailed);
        assert_eq!(kind_of_code(500), ErrorKind::NotFound);
        assert_eq!(kind_of_code(999), ErrorKind::Other);
    }

    #[test]
    fn display_names_call_code_and_log() {
        let e = CudaError::Driver {
            call: "cuModuleLoadDataEx",
            code: 218,
            name: "CUDA_ERROR_INVALID_PTX".into(),
            description: "a PTX JIT compilation failed".into(),
            log: Some("ptxas fatal: syntax error".into()),
        };
        let text = e.to_string();
        assert!(text.contains("cuModuleLoadDataEx"));
        assert!(text.contains("CUDA_ERROR_INVALID_PTX (218)"));
        assert!(text.contains("ptxas fatal"));
        assert_eq!(e.kind(), ErrorKind::InvalidImage);
        assert_eq!(e.jit_log(), Some("ptxas fatal: syntax error"));
    }
}
