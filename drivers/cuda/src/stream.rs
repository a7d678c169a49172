//! Streams, events and completion callbacks (`cuLaunchHostFunc`). The
//! callback trampoline never calls back into CUDA, as the driver requires.

use std::{
    ffi::c_void,
    panic::{AssertUnwindSafe, catch_unwind},
    sync::Arc,
};

use tensorwasm_core::driver::HostCallback;

use crate::{context::Context, error::CudaError, result, sys};

/// An in-order queue of work (`cuStreamCreate`), destroyed on drop. Created
/// blocking, so synchronous copies (legacy default stream) order after it.
pub struct CudaStream {
    pub(crate) ctx: Arc<Context>,
    pub(crate) raw: sys::CUstream,
}

// SAFETY: a CUstream may be used from any thread with its context current;
// the driver serialises work queued from several threads.
unsafe impl Send for CudaStream {}
// SAFETY: as for Send.
unsafe impl Sync for CudaStream {}

impl CudaStream {
    pub(crate) fn new(ctx: &Arc<Context>) -> Result<Self, CudaError> {
        ctx.bind()?;
        let raw = result::cuStreamCreate(&ctx.lib, sys::CUstream_flags_enum::CU_STREAM_DEFAULT.0)?;
        Ok(CudaStream {
            ctx: Arc::clone(ctx),
            raw,
        })
    }

    /// Queues `callback` to run once after the work queued so far.
    pub(crate) fn on_complete(&self, callback: HostCallback) -> Result<(), CudaError> {
        self.ctx.bind()?;
        let data = Box::into_raw(Box::new(callback));
        // SAFETY: the stream is live; `trampoline` takes ownership of `data`
        // exactly once when the driver runs it.
        let queued = unsafe {
            result::cuLaunchHostFunc(&self.ctx.lib, self.raw, Some(trampoline), data.cast())
        };
        if queued.is_err() {
            // SAFETY: the driver did not take the callback, so we still own it.
            drop(unsafe { Box::from_raw(data) });
        }
        queued
    }
}

/// Runs a boxed [`HostCallback`] on the driver's callback thread. A panic is
/// caught: unwinding into the driver would be undefined behaviour.
unsafe extern "C" fn trampoline(data: *mut c_void) {
    // SAFETY: `data` is the Box::into_raw of `on_complete`, handed to us once.
    let callback = unsafe { Box::from_raw(data.cast::<HostCallback>()) };
    let _ = catch_unwind(AssertUnwindSafe(callback));
}

impl Drop for CudaStream {
    fn drop(&mut self) {
        if self.ctx.bind().is_ok() {
            // SAFETY: created in this context, destroyed once; the driver lets
            // queued work (and callbacks) finish before releasing it.
            let _ = unsafe { result::cuStreamDestroy_v2(&self.ctx.lib, self.raw) };
        }
    }
}

/// A marker recorded on a stream (`cuEventCreate`, with timing).
pub struct CudaEvent {
    pub(crate) ctx: Arc<Context>,
    pub(crate) raw: sys::CUevent,
}

// SAFETY: a CUevent may be used from any thread with its context current.
unsafe impl Send for CudaEvent {}
// SAFETY: as for Send.
unsafe impl Sync for CudaEvent {}

impl CudaEvent {
    pub(crate) fn new(ctx: &Arc<Context>) -> Result<Self, CudaError> {
        ctx.bind()?;
        let raw = result::cuEventCreate(&ctx.lib, sys::CUevent_flags_enum::CU_EVENT_DEFAULT.0)?;
        Ok(CudaEvent {
            ctx: Arc::clone(ctx),
            raw,
        })
    }
}

impl Drop for CudaEvent {
    fn drop(&mut self) {
        if self.ctx.bind().is_ok() {
            // SAFETY: created in this context, destroyed once.
            let _ = unsafe { result::cuEventDestroy_v2(&self.ctx.lib, self.raw) };
        }
    }
}
