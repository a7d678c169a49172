//! WASI for guests, beside `wasi_cuda`: preview 1 for core modules, 0.2
//! for components. The implementation is wasmtime-wasi's (`p1`, `p2`); this
//! module owns what a guest's WASI may reach ([`WasiConfig`]: arguments, environment, preopened
//! directories, stdio, a cap on the bytes it writes), the capped output
//! streams behind it ([`GuestOutput`]), and [`add_to_linker`], which
//! registers WASI and every `wasi_cuda` import with one call. It never
//! touches the GPU.

use std::{
    io::{self, Write as _},
    path::PathBuf,
    pin::Pin,
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
    task::{Context, Poll},
};

use bytes::Bytes;
use serde::Deserialize;
use tokio::io::AsyncWrite;
use wasmtime::Linker;
use wasmtime_wasi::{
    FsPerms, WasiCtx, WasiCtxBuilder,
    cli::{IsTerminal, StdoutStream},
    p2::{OutputStream, Pollable, StreamError, StreamResult},
};

pub use wasmtime_wasi::{I32Exit, p1::WasiP1Ctx};

use crate::{kernel::KernelTarget, wasi_cuda};

/// Registers WASI preview 1 (`wasi_snapshot_preview1`, wasmtime-wasi's
/// async implementation) and every `wasi_cuda` import on `linker`: `wasi`
/// reaches the guest's [`WasiP1Ctx`] and `cuda` its
/// [`WasiCudaCtx`](crate::wasi_cuda::WasiCudaCtx) from the store's data. A
/// guest that imports nothing from WASI links as before. Guests are called
/// with wasmtime's async API; WASI's clocks and polls need a tokio runtime
/// around the call (`tensorwasm run` has one).
pub fn add_to_linker<T, D>(
    linker: &mut Linker<T>,
    cuda: wasi_cuda::GetCtx<T, D>,
    wasi: fn(&mut T) -> &mut WasiP1Ctx,
) -> wasmtime::Result<()>
where
    T: Send + 'static,
    D: KernelTarget + Clone + 'static,
{
    wasmtime_wasi::p1::add_to_linker_async(linker, wasi)?;
    wasi_cuda::add_to_linker(linker, cuda)
}

/// Where a guest's stdout or stderr goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OutputMode {
    /// Straight to the host process's own stream.
    Inherit,
    /// Kept in memory for the host to read ([`GuestOutput::stdout`]).
    Capture,
}

/// What a guest may do in a preopened directory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DirAccess {
    /// Open and read files, list the directory; every write is refused.
    ReadOnly,
    /// Also create, write, rename and remove.
    ReadWrite,
}

/// A host directory the guest sees at a path of its own.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PreopenDir {
    /// The directory on the host.
    pub host: PathBuf,
    /// Its name in the guest (`/data`, `.`).
    pub guest: String,
    /// What the guest may do in it.
    pub access: DirAccess,
}

impl PreopenDir {
    /// Parses `HOST[::GUEST]` as `wasmtime run --dir` does: without
    /// `::GUEST` the guest sees the directory under its host path.
    pub fn parse(spec: &str, access: DirAccess) -> PreopenDir {
        let (host, guest) = spec.split_once("::").unwrap_or((spec, spec));
        PreopenDir {
            host: PathBuf::from(host),
            guest: guest.to_string(),
            access,
        }
    }
}

/// What a guest's WASI may reach. Anything not listed is out of reach: a
/// path outside every preopened directory is `ENOTCAPABLE` (or `EBADF` for a
/// descriptor it was never given), a write in a read-only directory
/// `EPERM`/`EACCES`, a write past the output cap `EFBIG`; WASI's own errors,
/// never a trap.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WasiConfig {
    /// The guest's argv; `args[0]` is by convention the guest's name.
    pub args: Vec<String>,
    /// The environment the guest sees (nothing of the host's leaks in).
    pub env: Vec<(String, String)>,
    /// Preopened directories.
    pub dirs: Vec<PreopenDir>,
    /// Whether the guest reads the host's stdin (else stdin is empty).
    pub stdin: bool,
    /// Bytes the guest reads as its stdin instead (a request's body, for a
    /// server); wins over `stdin`.
    pub stdin_bytes: Option<Bytes>,
    /// Where its stdout goes.
    pub stdout: OutputMode,
    /// Where its stderr goes.
    pub stderr: OutputMode,
    /// The most bytes it may write to stdout and stderr together; `None`:
    /// no cap.
    pub output_bytes: Option<u64>,
}

/// The untrusted default cap on a guest's stdout and stderr together.
pub const DEFAULT_OUTPUT_BYTES: u64 = 1 << 20;

impl WasiConfig {
    /// An untrusted guest's WASI: no arguments, no environment, no
    /// directories, no stdin, stdout and stderr captured, at most
    /// [`DEFAULT_OUTPUT_BYTES`] written.
    pub fn untrusted() -> Self {
        WasiConfig {
            args: Vec::new(),
            env: Vec::new(),
            dirs: Vec::new(),
            stdin: false,
            stdin_bytes: None,
            stdout: OutputMode::Capture,
            stderr: OutputMode::Capture,
            output_bytes: Some(DEFAULT_OUTPUT_BYTES),
        }
    }

    /// A trusted guest's WASI, as `wasmtime run` gives it: the host's stdin,
    /// stdout and stderr, no cap; still no directories and no environment
    /// unless added.
    pub fn inherit() -> Self {
        WasiConfig {
            stdin: true,
            stdout: OutputMode::Inherit,
            stderr: OutputMode::Inherit,
            output_bytes: None,
            ..WasiConfig::untrusted()
        }
    }

    /// Builds the guest's WASI preview 1 context, and the handle to what it
    /// writes. Fails when a preopened directory cannot be opened.
    pub fn build(&self) -> Result<(WasiP1Ctx, GuestOutput), WasiConfigError> {
        let (mut builder, output) = self.builder()?;
        Ok((builder.build_p1(), output))
    }

    /// Builds the guest's WASI 0.2 context (for a component), from the same
    /// capabilities as [`build`](Self::build): what a guest may not reach as
    /// a core module it may not reach as a component.
    pub fn build_p2(&self) -> Result<(WasiCtx, GuestOutput), WasiConfigError> {
        let (mut builder, output) = self.builder()?;
        Ok((builder.build(), output))
    }

    fn builder(&self) -> Result<(WasiCtxBuilder, GuestOutput), WasiConfigError> {
        let output = GuestOutput::new(self.output_bytes);
        let mut builder = WasiCtxBuilder::new();
        builder.args(&self.args).envs(&self.env);
        if let Some(bytes) = &self.stdin_bytes {
            builder.stdin(wasmtime_wasi::p2::pipe::MemoryInputPipe::new(bytes.clone()));
        } else if self.stdin {
            builder.inherit_stdin();
        }
        builder.stdout(output.stream(Stream::Stdout, self.stdout));
        builder.stderr(output.stream(Stream::Stderr, self.stderr));
        for dir in &self.dirs {
            let perms = match dir.access {
                DirAccess::ReadOnly => FsPerms::ReadOnly,
                DirAccess::ReadWrite => FsPerms::ReadWrite,
            };
            builder
                .preopened_dir(&dir.host, &dir.guest, perms)
                .map_err(|e| {
                    WasiConfigError(format!(
                        "cannot open directory {} for the guest: {e:#}",
                        dir.host.display()
                    ))
                })?;
        }
        Ok((builder, output))
    }
}

/// A WASI context that could not be built.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WasiConfigError(pub String);

impl std::fmt::Display for WasiConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for WasiConfigError {}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stream {
    Stdout,
    Stderr,
}

/// What a guest wrote: the captured bytes of stdout and stderr (those
/// passed through are not kept), and the budget both draw from.
#[derive(Clone, Debug)]
pub struct GuestOutput {
    shared: Arc<OutputShared>,
}

#[derive(Debug)]
struct OutputShared {
    /// Bytes the guest may still write, stdout and stderr together.
    left: AtomicU64,
    stdout: Mutex<Vec<u8>>,
    stderr: Mutex<Vec<u8>>,
    /// Whether a write was refused for the cap.
    refused: std::sync::atomic::AtomicBool,
}

impl GuestOutput {
    fn new(cap: Option<u64>) -> Self {
        GuestOutput {
            shared: Arc::new(OutputShared {
                left: AtomicU64::new(cap.unwrap_or(u64::MAX)),
                stdout: Mutex::default(),
                stderr: Mutex::default(),
                refused: Default::default(),
            }),
        }
    }

    fn stream(&self, stream: Stream, mode: OutputMode) -> CappedOutput {
        CappedOutput {
            shared: Arc::clone(&self.shared),
            stream,
            mode,
        }
    }

    /// The captured stdout so far (empty when it passes through).
    pub fn stdout(&self) -> Vec<u8> {
        lock(&self.shared.stdout).clone()
    }

    /// The captured stderr so far (empty when it passes through).
    pub fn stderr(&self) -> Vec<u8> {
        lock(&self.shared.stderr).clone()
    }

    /// Whether the guest hit the output cap (a write got `EFBIG`).
    pub fn capped(&self) -> bool {
        self.shared.refused.load(Ordering::Relaxed)
    }
}

fn lock(m: &Mutex<Vec<u8>>) -> std::sync::MutexGuard<'_, Vec<u8>> {
    // A panic while holding the lock leaves bytes, never a broken invariant.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// One of a guest's output streams: passes through or captures, and draws
/// every byte from the guest's output budget.
#[derive(Clone, Debug)]
struct CappedOutput {
    shared: Arc<OutputShared>,
    stream: Stream,
    mode: OutputMode,
}

/// The most one write may carry (wasmtime-wasi writes stdio in 4 KiB
/// chunks anyway).
const MAX_WRITE: u64 = 1 << 16;

impl CappedOutput {
    fn over_cap(&self) -> io::Error {
        self.shared.refused.store(true, Ordering::Relaxed);
        tracing::warn!(
            stream = ?self.stream,
            "guest output refused: its cap on bytes written is spent"
        );
        io::Error::from_raw_os_error(libc::EFBIG)
    }

    /// Takes `n` bytes from the budget, or none when fewer are left.
    fn take(&self, n: u64) -> io::Result<()> {
        self.shared
            .left
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |left| {
                left.checked_sub(n)
            })
            .map(|_| ())
            .map_err(|_| self.over_cap())
    }

    /// Writes `bytes`, all or nothing.
    fn put(&self, bytes: &[u8]) -> io::Result<()> {
        self.take(bytes.len() as u64)?;
        match (self.mode, self.stream) {
            (OutputMode::Inherit, Stream::Stdout) => io::stdout().write_all(bytes),
            (OutputMode::Inherit, Stream::Stderr) => io::stderr().write_all(bytes),
            (OutputMode::Capture, Stream::Stdout) => {
                lock(&self.shared.stdout).extend_from_slice(bytes);
                Ok(())
            }
            (OutputMode::Capture, Stream::Stderr) => {
                lock(&self.shared.stderr).extend_from_slice(bytes);
                Ok(())
            }
        }
    }

    fn flush_inner(&self) -> io::Result<()> {
        match (self.mode, self.stream) {
            (OutputMode::Inherit, Stream::Stdout) => io::stdout().flush(),
            (OutputMode::Inherit, Stream::Stderr) => io::stderr().flush(),
            (OutputMode::Capture, _) => Ok(()),
        }
    }
}

fn stream_error(e: io::Error) -> StreamError {
    StreamError::LastOperationFailed(e.into())
}

impl IsTerminal for CappedOutput {
    fn is_terminal(&self) -> bool {
        match (self.mode, self.stream) {
            (OutputMode::Inherit, Stream::Stdout) => io::IsTerminal::is_terminal(&io::stdout()),
            (OutputMode::Inherit, Stream::Stderr) => io::IsTerminal::is_terminal(&io::stderr()),
            (OutputMode::Capture, _) => false,
        }
    }
}

impl StdoutStream for CappedOutput {
    fn p2_stream(&self) -> Box<dyn OutputStream> {
        Box::new(self.clone())
    }

    fn async_stream(&self) -> Box<dyn AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

impl OutputStream for CappedOutput {
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        self.put(&bytes).map_err(stream_error)
    }

    fn flush(&mut self) -> StreamResult<()> {
        self.flush_inner().map_err(stream_error)
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        match self.shared.left.load(Ordering::Relaxed).min(MAX_WRITE) {
            0 => Err(stream_error(self.over_cap())),
            n => Ok(n as usize),
        }
    }
}

#[wasmtime_wasi::async_trait]
impl Pollable for CappedOutput {
    async fn ready(&mut self) {}
}

impl AsyncWrite for CappedOutput {
    fn poll_write(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let left = self.shared.left.load(Ordering::Relaxed);
        let n = buf.len().min(usize::try_from(left).unwrap_or(usize::MAX));
        if n == 0 && !buf.is_empty() {
            return Poll::Ready(Err(self.over_cap()));
        }
        Poll::Ready(self.put(&buf[..n]).map(|()| n))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(self.flush_inner())
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dir_specs_parse_as_wasmtime_run_reads_them() {
        let d = PreopenDir::parse("data/in::/in", DirAccess::ReadOnly);
        assert_eq!(
            (d.host, d.guest.as_str()),
            (PathBuf::from("data/in"), "/in")
        );
        let d = PreopenDir::parse("data", DirAccess::ReadWrite);
        assert_eq!((d.host, d.guest.as_str()), (PathBuf::from("data"), "data"));
    }

    #[test]
    fn captured_output_draws_from_one_budget() {
        let out = GuestOutput::new(Some(10));
        let mut stdout = out.stream(Stream::Stdout, OutputMode::Capture);
        let mut stderr = out.stream(Stream::Stderr, OutputMode::Capture);
        assert_eq!(stdout.check_write().unwrap(), 10);
        stdout.write(Bytes::from_static(b"hello ")).unwrap();
        assert_eq!(stderr.check_write().unwrap(), 4);
        // All or nothing: 5 bytes do not fit in 4.
        let e = stderr.write(Bytes::from_static(b"world")).unwrap_err();
        assert!(matches!(e, StreamError::LastOperationFailed(_)), "{e:?}");
        stderr.write(Bytes::from_static(b"worl")).unwrap();
        assert!(stdout.check_write().is_err());
        assert_eq!(out.stdout(), b"hello ");
        assert_eq!(out.stderr(), b"worl");
        assert!(out.capped());
    }
}
