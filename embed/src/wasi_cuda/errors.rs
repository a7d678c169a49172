//! Errors as the guest sees them: the last error (`last_error`), each
//! failed call's errno and log line, and how driver and kernel failures map
//! to errnos.

use tensorwasm_core::{
    DriverError, ErrorKind, GpuDriver,
    abi::{self, AbiError, Errno},
    lower::LowerError,
};

use crate::kernel::KernelError;

use super::ctx::{GuestMem, WasiCudaCtx};

impl<D: GpuDriver> WasiCudaCtx<D> {
    /// The text of the guest's most recent failed call (empty if none).
    pub fn last_error(&self) -> &str {
        &self.last_error
    }

    /// Records a failure of `call` as the guest's last error and returns
    /// its errno.
    pub(crate) fn fail(&mut self, call: &str, error: AbiError) -> i32 {
        self.last_error = format!("{call}: {error}");
        if let Some(stats) = &self.stats {
            match error.errno {
                Errno::EQUOTA => {
                    stats.quota_refusals.inc();
                }
                Errno::ETRAP => {
                    stats.kernel_traps.inc();
                }
                Errno::EDEVLOST => {
                    stats.device_lost.inc();
                }
                _ => {}
            }
        }
        // What the host's operator wants to see: quota refusals and kernel
        // traps (a tenant at its limits), driver failures (the device).
        match error.errno {
            Errno::EQUOTA => tracing::info!(call, %error, "quota refusal"),
            Errno::ETRAP => tracing::info!(call, %error, "kernel trap"),
            Errno::EDRIVER | Errno::ELAUNCH | Errno::ENODEV | Errno::ENOMEM => {
                tracing::warn!(call, %error, "driver error")
            }
            Errno::EDEVLOST => tracing::error!(call, %error, "the device's context is lost"),
            _ => tracing::debug!(call, %error, "wasi_cuda call failed"),
        }
        error.errno.code()
    }

    /// Turns a call's result into its errno.
    pub(crate) fn finish(&mut self, call: &str, result: Result<(), AbiError>) -> i32 {
        match result {
            Ok(()) => 0,
            Err(e) => self.fail(call, e),
        }
    }

    pub(crate) fn read_last_error(
        &mut self,
        mem: GuestMem<'_>,
        buf: u32,
        buf_len: i32,
        out_len: u32,
    ) -> Result<(), AbiError> {
        let buf_len = usize::try_from(buf_len)
            .map_err(|_| AbiError::new(Errno::EINVAL, format!("buf_len {buf_len} is negative")))?;
        let text = self.last_error.as_bytes();
        let n = buf_len.min(text.len());
        abi::guest_range(mem.bytes.len(), buf, n as u64)?;
        abi::read_u32(mem.bytes, out_len)?;
        abi::write_bytes(mem.bytes, buf, &text[..n])?;
        abi::write_u32(mem.bytes, out_len, text.len() as u32)
    }
}

/// A kernel that could not be made or loaded, as the guest sees it.
pub(crate) fn kernel_error(e: &KernelError) -> AbiError {
    match e {
        KernelError::Lower(LowerError::Unsupported(_)) => {
            AbiError::new(Errno::ENOTSUP, e.to_string())
        }
        KernelError::Lower(LowerError::Invalid(_)) => AbiError::new(Errno::EINVAL, e.to_string()),
        KernelError::Lower(LowerError::TooLarge(_)) | KernelError::TimedOut { .. } => {
            AbiError::new(Errno::EQUOTA, e.to_string())
        }
        KernelError::Panicked(_) => AbiError::new(Errno::EDRIVER, e.to_string()),
        KernelError::Driver { kind, .. } => AbiError::new(Errno::from(*kind), e.to_string()),
    }
}

/// Work on the guest's stream failed: `ELAUNCH`, but `EDEVLOST` when the
/// failure lost the device's context.
pub(super) fn launch_failed<E: DriverError>(e: E) -> AbiError {
    let errno = match e.kind() {
        ErrorKind::DeviceLost => Errno::EDEVLOST,
        _ => Errno::ELAUNCH,
    };
    AbiError::new(errno, format!("work on the guest's stream failed: {e}"))
}

/// A driver failure as the guest sees it: `call: error`, the call named
/// once (the CPU driver's errors already open with their call's name).
pub(crate) fn driver_error<E: DriverError>(call: &str, e: E) -> AbiError {
    AbiError::new(Errno::from(e.kind()), named_once(call, &e.to_string()))
}

/// `text` prefixed with `call: ` unless it already opens with it.
fn named_once(call: &str, text: &str) -> String {
    match text.strip_prefix(call) {
        Some(rest) if rest.starts_with(": ") => text.to_string(),
        _ => format!("{call}: {text}"),
    }
}

#[cfg(test)]
mod tests {
    use super::named_once;

    #[test]
    fn the_call_is_named_once() {
        assert_eq!(
            named_once("load_ptx", "load_ptx: not supported: needs CUDA"),
            "load_ptx: not supported: needs CUDA"
        );
        assert_eq!(
            named_once("load_ptx", "CUDA_ERROR_INVALID_PTX (218): bad"),
            "load_ptx: CUDA_ERROR_INVALID_PTX (218): bad"
        );
        // Another call whose name starts with this one's.
        assert_eq!(
            named_once("load", "load_ptx: not supported"),
            "load: load_ptx: not supported"
        );
    }
}
