//! Surviving a lost device: a [`Supervisor`] keeps tenants in a worker
//! process (`tensorwasm worker`) and replaces the process when its device
//! is lost. On CUDA a faulting kernel leaves the process's context with a
//! sticky error: no later call succeeds, managed memory (guest memories)
//! cannot even be read, and neither a reset nor a new context helps in the
//! same process (measured on an H100, `docs/tenants.md`, "Device faults").
//! So the supervisor snapshots each tenant after each call
//! ([`crate::snapshot`]) and, when the worker reports the device lost or
//! dies, starts a new worker and restores every tenant from its last
//! snapshot: each keeps its memory, globals and handles as they were after
//! its last call. The call in flight at the fault fails with
//! [`SupervisorError::DeviceLost`] and its tenant is rolled back to before
//! it; a tenant whose state since its last snapshot was not kept is ended,
//! and only that tenant.
//!
//! Calls go to the worker one at a time.

pub mod protocol;
pub mod worker;

use std::{
    ffi::OsString,
    fmt, fs,
    io::{BufRead, BufReader, Write},
    path::{Path, PathBuf},
    process::{Child, ChildStdin, ChildStdout, Command, Stdio},
    time::{Duration, Instant},
};

use protocol::{Failure, Request, Response, WasmValue, WorkerStatus};

/// How to start a worker: a program and its arguments, e.g. the
/// `tensorwasm` binary with `worker --driver auto`.
#[derive(Clone, Debug)]
pub struct WorkerCommand {
    /// The program.
    pub program: PathBuf,
    /// Its arguments.
    pub args: Vec<OsString>,
}

/// A supervisor's settings.
#[derive(Clone, Debug)]
pub struct SupervisorConfig {
    /// How to start each worker.
    pub worker: WorkerCommand,
    /// Where tenants' snapshots are kept: a directory of this supervisor's
    /// own (created if missing; a tmpfs such as `/dev/shm` keeps them
    /// fast). A tenant's module file must not change while it is served:
    /// a snapshot restores only into the module it was taken from.
    pub snapshot_dir: PathBuf,
    /// Snapshot each tenant after each call (the default). Without it a
    /// tenant that has been called cannot be kept across a lost device.
    pub snapshots: bool,
    /// Keep a second worker started and idle, so that a recovery does not
    /// wait for a process and its driver to start (on CUDA most of a
    /// recovery's time); it costs that worker's memory and, on CUDA, its
    /// context's device memory.
    pub standby: bool,
}

/// One recovery from a lost device.
#[derive(Clone, Debug, PartialEq)]
pub struct Recovery {
    /// What the worker said (or how it ended).
    pub cause: String,
    /// The tenant and export whose call was in flight.
    pub during: Option<(String, String)>,
    /// Tenants restored on the new worker (from their snapshots, or fresh
    /// when never called).
    pub restored: Vec<String>,
    /// Tenants ended, with why.
    pub ended: Vec<(String, String)>,
    /// From noticing the loss to serving again (the new worker started and
    /// every tenant restored).
    pub took: Duration,
    /// Of that, until the new worker answered (the standby's check, or a
    /// process and its driver starting).
    pub worker_ready: Duration,
}

/// Why a supervised request failed.
#[derive(Debug)]
pub enum SupervisorError {
    /// The request was refused (unknown tenant, bad configuration); nothing
    /// changed.
    Refused(String),
    /// The guest trapped or its call failed.
    Guest(String),
    /// The device was lost during the request; the tenants now run on a
    /// new worker as the recovery says. The call did not complete.
    DeviceLost(Box<Recovery>),
    /// The tenant was ended by an earlier recovery.
    Ended(String),
    /// No worker could be started, or one broke its protocol.
    Worker(String),
}

impl fmt::Display for SupervisorError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SupervisorError::Refused(m) => write!(f, "refused: {m}"),
            SupervisorError::Guest(m) => write!(f, "the guest failed: {m}"),
            SupervisorError::DeviceLost(r) => write!(
                f,
                "the device was lost ({}); recovered in {:?}: {} tenants restored, {} ended",
                r.cause,
                r.took,
                r.restored.len(),
                r.ended.len()
            ),
            SupervisorError::Ended(m) => write!(f, "the tenant was ended: {m}"),
            SupervisorError::Worker(m) => write!(f, "worker: {m}"),
        }
    }
}

impl std::error::Error for SupervisorError {}

/// A running worker process.
struct Worker {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Worker {
    fn start(command: &WorkerCommand) -> Result<Worker, SupervisorError> {
        let mut child = Command::new(&command.program)
            .args(&command.args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| {
                SupervisorError::Worker(format!("starting {}: {e}", command.program.display()))
            })?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            let _ = child.kill();
            return Err(SupervisorError::Worker("the worker's pipes".into()));
        };
        Ok(Worker {
            child,
            stdin,
            stdout: BufReader::new(stdout),
        })
    }

    /// Sends `request` and reads the response; `Err` with what happened
    /// when the worker is gone or broke the protocol.
    fn request(&mut self, request: &Request) -> Result<Response, String> {
        let mut line = serde_json::to_vec(request).map_err(|e| e.to_string())?;
        line.push(b'\n');
        if let Err(e) = self
            .stdin
            .write_all(&line)
            .and_then(|()| self.stdin.flush())
        {
            return Err(format!("the worker is gone ({e}; {})", self.end()));
        }
        let mut answer = String::new();
        match self.stdout.read_line(&mut answer) {
            Ok(0) | Err(_) => Err(format!("the worker ended ({})", self.end())),
            Ok(_) => serde_json::from_str(&answer)
                .map_err(|e| format!("the worker answered {answer:?}: {e}")),
        }
    }

    /// Ends the process without waiting for it to go (a process whose CUDA
    /// context faulted takes a few hundred milliseconds to be torn down):
    /// a thread reaps it.
    fn abandon(mut self) {
        let _ = self.child.kill();
        let reaper = std::thread::Builder::new().name("tensorwasm-reaper".into());
        if reaper.spawn(move || self.child.wait()).is_err() {
            tracing::warn!("no thread to reap the old worker; it stays a zombie until this ends");
        }
    }

    /// Ends the process; how it ended.
    fn end(&mut self) -> String {
        let _ = self.child.kill();
        match self.child.wait() {
            Ok(status) => status.to_string(),
            Err(e) => format!("waiting for it: {e}"),
        }
    }
}

/// A tenant as the supervisor keeps it.
struct Supervised {
    name: String,
    config: String,
    module: PathBuf,
    snapshot: PathBuf,
    /// Whether `snapshot` holds its state now (`false` before its first
    /// call: then a fresh instance is its state).
    snapshotted: bool,
    /// Whether its state now can be rebuilt (fresh, or snapshotted after
    /// its last call).
    kept: bool,
}

/// Runs tenants in a worker process and moves them to a new one when the
/// device is lost (module docs).
pub struct Supervisor {
    config: SupervisorConfig,
    worker: Worker,
    /// The standby worker ([`SupervisorConfig::standby`]).
    spare: Option<Worker>,
    tenants: Vec<Supervised>,
    ended: Vec<(String, String)>,
    recoveries: Vec<Recovery>,
    next_file: u64,
}

impl Supervisor {
    /// Starts the first worker.
    pub fn start(config: SupervisorConfig) -> Result<Supervisor, SupervisorError> {
        fs::create_dir_all(&config.snapshot_dir).map_err(|e| {
            SupervisorError::Worker(format!("creating {}: {e}", config.snapshot_dir.display()))
        })?;
        let worker = Worker::start(&config.worker)?;
        let spare = config
            .standby
            .then(|| Worker::start(&config.worker))
            .transpose()?;
        Ok(Supervisor {
            config,
            worker,
            spare,
            tenants: Vec::new(),
            ended: Vec::new(),
            recoveries: Vec::new(),
            next_file: 0,
        })
    }

    /// Adds tenant `name` (its TOML `config`, as `--tenant` files hold it)
    /// running the guest module in file `module`.
    pub fn add_tenant(
        &mut self,
        name: &str,
        config: &str,
        module: &Path,
    ) -> Result<(), SupervisorError> {
        if self.tenants.iter().any(|t| t.name == name) {
            return Err(SupervisorError::Refused(format!("tenant `{name}` exists")));
        }
        let request = Request::Add {
            tenant: name.into(),
            config: config.into(),
            module: module.into(),
            snapshot: None,
        };
        self.request(&request, None)?;
        let file = self.next_file;
        self.next_file += 1;
        self.tenants.push(Supervised {
            name: name.into(),
            config: config.into(),
            module: module.into(),
            snapshot: self
                .config
                .snapshot_dir
                .join(format!("tenant-{file}.twsnap")),
            snapshotted: false,
            kept: true,
        });
        Ok(())
    }

    /// Calls export `export` of tenant `tenant` with `args`.
    pub fn call(
        &mut self,
        tenant: &str,
        export: &str,
        args: &[WasmValue],
    ) -> Result<Vec<WasmValue>, SupervisorError> {
        let index = self.index(tenant)?;
        let snapshot = self
            .config
            .snapshots
            .then(|| self.tenants[index].snapshot.clone());
        let request = Request::Call {
            tenant: tenant.into(),
            export: export.into(),
            args: args.to_vec(),
            snapshot,
        };
        let during = Some((tenant.to_string(), export.to_string()));
        let answer = self.request(&request, during);
        // A recovery may have moved or ended the tenant.
        let Some(t) = self.tenants.iter_mut().find(|t| t.name == tenant) else {
            return answer.and(Err(SupervisorError::Ended(format!("tenant `{tenant}`"))));
        };
        match answer {
            Ok(Response::Ok {
                results,
                snapshot_bytes,
                snapshot_error,
            }) => {
                t.kept = snapshot_bytes.is_some();
                t.snapshotted |= t.kept;
                if let Some(why) = snapshot_error {
                    tracing::warn!(tenant, %why, "no snapshot after the call: its state is not kept");
                }
                Ok(results)
            }
            Ok(other) => Err(SupervisorError::Worker(format!(
                "a call answered {other:?}"
            ))),
            Err(e) => {
                // A guest that failed part-way may have changed its memory.
                if matches!(e, SupervisorError::Guest(_)) {
                    t.kept = false;
                }
                Err(e)
            }
        }
    }

    /// Ends tenant `tenant`, freeing everything it holds; returns what its
    /// quota ledger still held after (by resource; empty unless something
    /// leaked).
    pub fn remove_tenant(&mut self, tenant: &str) -> Result<Vec<(String, u64)>, SupervisorError> {
        self.index(tenant)?;
        let answer = self.request(
            &Request::Remove {
                tenant: tenant.into(),
            },
            None,
        );
        if let Some(i) = self.tenants.iter().position(|t| t.name == tenant) {
            let t = self.tenants.remove(i);
            let _ = fs::remove_file(&t.snapshot);
        }
        match answer? {
            Response::Removed { held } => Ok(held),
            other => Err(SupervisorError::Worker(format!(
                "remove answered {other:?}"
            ))),
        }
    }

    /// The worker's and the device's memory.
    pub fn status(&mut self) -> Result<WorkerStatus, SupervisorError> {
        match self.request(&Request::Status, None)? {
            Response::Status(status) => Ok(status),
            other => Err(SupervisorError::Worker(format!(
                "status answered {other:?}"
            ))),
        }
    }

    /// Every recovery so far.
    pub fn recoveries(&self) -> &[Recovery] {
        &self.recoveries
    }

    /// The tenants served now.
    pub fn tenants(&self) -> impl Iterator<Item = &str> {
        self.tenants.iter().map(|t| t.name.as_str())
    }

    /// The worker's process id.
    pub fn worker_pid(&self) -> u32 {
        self.worker.child.id()
    }

    fn index(&self, tenant: &str) -> Result<usize, SupervisorError> {
        if let Some(i) = self.tenants.iter().position(|t| t.name == tenant) {
            return Ok(i);
        }
        Err(match self.ended.iter().find(|(name, _)| name == tenant) {
            Some((_, why)) => SupervisorError::Ended(why.clone()),
            None => SupervisorError::Refused(format!("no tenant `{tenant}`")),
        })
    }

    /// Sends `request`; a lost device (said, or the worker gone) recovers
    /// and becomes [`SupervisorError::DeviceLost`].
    fn request(
        &mut self,
        request: &Request,
        during: Option<(String, String)>,
    ) -> Result<Response, SupervisorError> {
        let cause = match self.worker.request(request) {
            Ok(Response::Failed {
                failure: Failure::DeviceLost,
                message,
            }) => message,
            Ok(Response::Failed {
                failure: Failure::Request,
                message,
            }) => return Err(SupervisorError::Refused(message)),
            Ok(Response::Failed {
                failure: Failure::Guest,
                message,
            }) => return Err(SupervisorError::Guest(message)),
            Ok(ok) => return Ok(ok),
            Err(gone) => gone,
        };
        tracing::error!(%cause, ?during, "the device is lost: moving the tenants to a new worker");
        let recovery = self.recover(cause, during)?;
        Err(SupervisorError::DeviceLost(Box::new(recovery)))
    }

    /// The standby worker if it answers, else a new one.
    fn next_worker(&mut self) -> Result<Worker, SupervisorError> {
        if let Some(mut spare) = self.spare.take() {
            match spare.request(&Request::Status) {
                Ok(Response::Status(_)) => return Ok(spare),
                answer => {
                    tracing::warn!(?answer, "the standby worker is not well; starting another");
                    spare.end();
                }
            }
        }
        let mut worker = Worker::start(&self.config.worker)?;
        // Ready once it answers (its driver started).
        match worker.request(&Request::Status) {
            Ok(Response::Status(_)) => Ok(worker),
            answer => Err(SupervisorError::Worker(format!(
                "a new worker did not start: {answer:?}"
            ))),
        }
    }

    /// Starts a new worker and restores every tenant that can be kept.
    fn recover(
        &mut self,
        cause: String,
        during: Option<(String, String)>,
    ) -> Result<Recovery, SupervisorError> {
        let started = Instant::now();
        let next = self.next_worker()?;
        std::mem::replace(&mut self.worker, next).abandon();
        let worker_ready = started.elapsed();
        if self.config.standby {
            // Starts in the background while the tenants are restored.
            self.spare = Worker::start(&self.config.worker).ok();
        }
        let mut restored = Vec::new();
        let mut ended = Vec::new();
        for t in std::mem::take(&mut self.tenants) {
            // `kept` is the state before the call in flight: that call's
            // tenant goes back to before it.
            if !t.kept {
                let _ = fs::remove_file(&t.snapshot);
                ended.push((
                    t.name.clone(),
                    "its state since its last snapshot was not kept".to_string(),
                ));
                continue;
            }
            let request = Request::Add {
                tenant: t.name.clone(),
                config: t.config.clone(),
                module: t.module.clone(),
                snapshot: t.snapshotted.then(|| t.snapshot.clone()),
            };
            let failed = match self.worker.request(&request) {
                Ok(Response::Ok { .. }) => {
                    restored.push(t.name.clone());
                    self.tenants.push(Supervised { kept: true, ..t });
                    continue;
                }
                Ok(Response::Failed { message, .. }) | Err(message) => message,
                Ok(other) => format!("the worker answered {other:?}"),
            };
            let _ = fs::remove_file(&t.snapshot);
            ended.push((t.name.clone(), format!("restoring it failed: {failed}")));
        }
        self.ended.extend(ended.iter().cloned());
        let recovery = Recovery {
            cause,
            during,
            restored,
            ended,
            took: started.elapsed(),
            worker_ready,
        };
        tracing::warn!(?recovery, "serving again");
        self.recoveries.push(recovery.clone());
        Ok(recovery)
    }
}

impl Drop for Supervisor {
    fn drop(&mut self) {
        // The worker ends at the end of its input; then its snapshots go.
        self.worker.end();
        if let Some(spare) = &mut self.spare {
            spare.end();
        }
        for t in &self.tenants {
            let _ = fs::remove_file(&t.snapshot);
        }
    }
}
