//! What a [`Supervisor`](super::Supervisor) and its worker say to each
//! other: one JSON object per line, a request on the worker's stdin, its
//! response on the worker's stdout (`docs/tenants.md`, "Device faults").

use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use wasmtime::Val;

/// A Wasm value passed to or returned by an export.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", content = "value", rename_all = "snake_case")]
pub enum WasmValue {
    /// `i32`.
    I32(i32),
    /// `i64`.
    I64(i64),
    /// `f32`.
    F32(f32),
    /// `f64`.
    F64(f64),
}

impl WasmValue {
    /// As a wasmtime value.
    pub fn val(self) -> Val {
        match self {
            WasmValue::I32(v) => Val::I32(v),
            WasmValue::I64(v) => Val::I64(v),
            WasmValue::F32(v) => Val::F32(v.to_bits()),
            WasmValue::F64(v) => Val::F64(v.to_bits()),
        }
    }

    /// From a wasmtime value; `None` for references and vectors.
    pub fn from_val(val: &Val) -> Option<WasmValue> {
        Some(match *val {
            Val::I32(v) => WasmValue::I32(v),
            Val::I64(v) => WasmValue::I64(v),
            Val::F32(v) => WasmValue::F32(f32::from_bits(v)),
            Val::F64(v) => WasmValue::F64(f64::from_bits(v)),
            _ => return None,
        })
    }
}

/// A request to the worker.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Request {
    /// Makes tenant `tenant` (its TOML `config`) and instantiates `module`
    /// (a file); with `snapshot`, restores it from that snapshot file.
    Add {
        /// The tenant's name (unique in the worker).
        tenant: String,
        /// The tenant's configuration, as `--tenant` files hold it.
        config: String,
        /// The guest module's file.
        module: PathBuf,
        /// A snapshot of the tenant to restore.
        snapshot: Option<PathBuf>,
    },
    /// Calls export `export` of tenant `tenant`'s guest; after a call that
    /// returned, writes the tenant's snapshot to `snapshot` (if given).
    Call {
        /// The tenant.
        tenant: String,
        /// The export.
        export: String,
        /// Its arguments.
        args: Vec<WasmValue>,
        /// Where to write the tenant's snapshot after the call.
        snapshot: Option<PathBuf>,
    },
    /// Ends tenant `tenant`, freeing all it holds; answered with what its
    /// quota ledger still holds after (nothing, unless something leaked).
    Remove {
        /// The tenant.
        tenant: String,
    },
    /// The worker's memory and the device's.
    Status,
}

/// Why a request failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Failure {
    /// The request itself: an unknown tenant, a bad configuration or module,
    /// a malformed line. Nothing changed.
    Request,
    /// The guest trapped or its call failed.
    Guest,
    /// The device was lost (CUDA's sticky errors): the worker ends after
    /// saying so, and its tenants must move to a new worker.
    DeviceLost,
}

/// The worker's answer to one request.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum Response {
    /// Done.
    Ok {
        /// The export's results (empty for other requests).
        results: Vec<WasmValue>,
        /// The snapshot written after a call, in bytes; `None` when none
        /// was asked for or it failed.
        snapshot_bytes: Option<u64>,
        /// Why the snapshot asked for could not be taken (the call itself
        /// succeeded).
        snapshot_error: Option<String>,
    },
    /// A tenant removed.
    Removed {
        /// What its ledger still held once everything was freed, by
        /// resource: empty unless something leaked.
        held: Vec<(String, u64)>,
    },
    /// The worker's state.
    Status(WorkerStatus),
    /// Failed.
    Failed {
        /// Why.
        failure: Failure,
        /// What happened, for people.
        message: String,
    },
}

impl Response {
    /// A failure of `failure` with `message`.
    pub fn failed(failure: Failure, message: impl Into<String>) -> Response {
        Response::Failed {
            failure,
            message: message.into(),
        }
    }

    /// Success with nothing to report.
    pub fn done() -> Response {
        Response::Ok {
            results: Vec::new(),
            snapshot_bytes: None,
            snapshot_error: None,
        }
    }
}

/// What a worker reports about itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerStatus {
    /// The device's free memory, in bytes.
    pub device_free: u64,
    /// The device's memory, in bytes.
    pub device_total: u64,
    /// The worker process's resident memory, in bytes.
    pub rss_bytes: u64,
    /// Tenants it serves.
    pub tenants: u64,
}
