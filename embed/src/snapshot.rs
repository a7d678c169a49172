//! Tenant snapshots: what a tenant's guest holds between calls (its linear
//! memory, its mutable globals, its `wasi_cuda` handles and what they name,
//! device buffers' contents included), taken when its stream is idle and
//! rebuilt in another process on another context. After a device fault the
//! process's CUDA state is gone for good (`docs/tenants.md`, "Device
//! faults"); a supervisor starts a new process and
//! restores each tenant from its last snapshot.
//!
//! Not kept: the guest's call stack (a snapshot is taken between calls),
//! its tables (guests made by LLVM never change theirs), WASI state beyond
//! the tenant's configuration (open files, the clock), launches (a snapshot
//! needs every launch waited for).
//!
//! File format: the magic `TWSNAP01`, the header's length (u64, little
//! endian) and the header as JSON ([`SnapshotHeader`]), then each blob as
//! its length (u64, little endian) and its bytes.

use std::{
    fs,
    io::{self, Read, Write},
    path::Path,
};

use serde::{Deserialize, Serialize};
use tensorwasm_core::ManagedAllocator;
use wasmtime::{Extern, Mutability, Val};

use crate::{
    kernel::{GuestModule, KernelTarget},
    tenant::Tenant,
    wasi_cuda::CudaImage,
};

/// The file format's first bytes.
pub const MAGIC: &[u8; 8] = b"TWSNAP01";

/// A mutable global's value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", content = "bits", rename_all = "snake_case")]
pub enum GlobalValue {
    /// An `i32`.
    I32(i32),
    /// An `i64`.
    I64(i64),
    /// An `f32`, as its bits.
    F32(u32),
    /// An `f64`, as its bits.
    F64(u64),
}

/// A snapshot's description; large contents are blobs, named by index.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotHeader {
    /// The tenant's name.
    pub tenant: String,
    /// The guest module's identity (FNV-1a of its bytes, and their length):
    /// a snapshot restores only into an instance of the same module.
    pub module: (u64, usize),
    /// The blob holding the guest's linear memory, if it has one.
    pub memory: Option<usize>,
    /// Every exported mutable global (the runtime exports them all), by
    /// export name.
    pub globals: Vec<(String, GlobalValue)>,
    /// The guest's `wasi_cuda` state.
    pub cuda: CudaImage,
}

/// A tenant's state between calls: [`Tenant::snapshot`], then
/// [`Tenant::restore`] on a fresh tenant of the same module.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TenantSnapshot {
    /// What the blobs are.
    pub header: SnapshotHeader,
    /// Memory, module sources and buffer contents.
    pub blobs: Vec<Vec<u8>>,
}

impl TenantSnapshot {
    /// Its size in bytes, blobs included.
    pub fn bytes(&self) -> usize {
        self.blobs.iter().map(Vec::len).sum()
    }

    /// Writes it in the file format to `out`.
    pub fn write_to(&self, mut out: impl Write) -> io::Result<()> {
        let header = serde_json::to_vec(&self.header)?;
        out.write_all(MAGIC)?;
        out.write_all(&(header.len() as u64).to_le_bytes())?;
        out.write_all(&header)?;
        for blob in &self.blobs {
            out.write_all(&(blob.len() as u64).to_le_bytes())?;
            out.write_all(blob)?;
        }
        out.flush()
    }

    /// Writes it to `path` atomically: to a temporary file beside it, then
    /// renamed, so a process that dies while writing leaves the last
    /// snapshot whole.
    pub fn save(&self, path: &Path) -> io::Result<()> {
        let mut tmp = path.as_os_str().to_owned();
        tmp.push(".tmp");
        let file = fs::File::create(&tmp)?;
        self.write_to(io::BufWriter::new(&file))?;
        file.sync_data()?;
        fs::rename(&tmp, path)
    }

    /// Reads a snapshot written by [`save`](Self::save); every length is
    /// checked against the file's size before anything is allocated.
    pub fn load(path: &Path) -> io::Result<TenantSnapshot> {
        let file = fs::File::open(path)?;
        let mut left = file.metadata()?.len();
        let mut input = io::BufReader::new(file);
        let mut magic = [0u8; 8];
        input.read_exact(&mut magic)?;
        left = left.saturating_sub(8);
        if &magic != MAGIC {
            return Err(invalid("not a TensorWasm snapshot (bad magic)".into()));
        }
        let header: SnapshotHeader = serde_json::from_slice(&read_part(&mut input, &mut left)?)?;
        let mut blobs = Vec::new();
        while left > 0 {
            blobs.push(read_part(&mut input, &mut left)?);
        }
        Ok(TenantSnapshot { header, blobs })
    }
}

fn invalid(why: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, why)
}

/// One length-prefixed part; `left` is what the file has left, which the
/// length must not exceed.
fn read_part(input: &mut impl Read, left: &mut u64) -> io::Result<Vec<u8>> {
    let mut len = [0u8; 8];
    input.read_exact(&mut len)?;
    let len = u64::from_le_bytes(len);
    *left = left.saturating_sub(8);
    if len > *left {
        return Err(invalid(format!(
            "a {len}-byte part with {left} bytes left in the file"
        )));
    }
    *left -= len;
    let len = usize::try_from(len).map_err(|_| invalid(format!("{len} bytes")))?;
    let mut bytes = vec![0u8; len];
    input.read_exact(&mut bytes)?;
    Ok(bytes)
}

fn global_value(val: &Val) -> Option<GlobalValue> {
    Some(match *val {
        Val::I32(v) => GlobalValue::I32(v),
        Val::I64(v) => GlobalValue::I64(v),
        Val::F32(v) => GlobalValue::F32(v),
        Val::F64(v) => GlobalValue::F64(v),
        _ => return None,
    })
}

impl GlobalValue {
    fn val(self) -> Val {
        match self {
            GlobalValue::I32(v) => Val::I32(v),
            GlobalValue::I64(v) => Val::I64(v),
            GlobalValue::F32(v) => Val::F32(v),
            GlobalValue::F64(v) => Val::F64(v),
        }
    }
}

impl<D> Tenant<D>
where
    D: KernelTarget + ManagedAllocator + Clone + 'static,
    <D as ManagedAllocator>::Region: Sync,
{
    /// The tenant's state now, between calls into its guest: waits for its
    /// stream, and fails while it holds launches it has not waited for, or
    /// mutable globals of reference or vector type.
    pub fn snapshot(&mut self) -> wasmtime::Result<TenantSnapshot> {
        let (instance, module) = self.instantiated()?;
        let mut blobs = Vec::new();
        let cuda = self
            .store_mut()
            .data_mut()
            .cuda
            .image(&mut blobs)
            .map_err(|e| wasmtime::Error::msg(format!("snapshot of the GPU state: {e}")))?;
        let store = self.store_mut();
        let mut memory = None;
        let mut globals = Vec::new();
        let exports: Vec<(String, Extern)> = instance
            .exports(&mut *store)
            .map(|e| (e.name().to_owned(), e.into_extern()))
            .collect();
        for (name, export) in exports {
            match export {
                Extern::Memory(m) if name == "memory" => {
                    blobs.push(m.data(&*store).to_vec());
                    memory = Some(blobs.len() - 1);
                }
                Extern::Global(g) if g.ty(&*store).mutability() == Mutability::Var => {
                    let value = g.get(&mut *store);
                    let value = global_value(&value).ok_or_else(|| {
                        wasmtime::Error::msg(format!(
                            "global `{name}` holds a {:?}, which a snapshot cannot keep",
                            g.ty(&*store).content()
                        ))
                    })?;
                    globals.push((name, value));
                }
                _ => {}
            }
        }
        Ok(TenantSnapshot {
            header: SnapshotHeader {
                tenant: self.name().to_owned(),
                module,
                memory,
                globals,
                cuda,
            },
            blobs,
        })
    }

    /// Puts `snapshot` into this tenant, freshly instantiated from the same
    /// module: its memory grows to the snapshot's size (charged to the
    /// tenant's quota) and takes its bytes, its globals their values, and
    /// its `wasi_cuda` handles mean what they meant
    /// ([`WasiCudaCtx::rebuild`](crate::wasi_cuda::WasiCudaCtx::rebuild)).
    pub fn restore(&mut self, snapshot: &TenantSnapshot) -> wasmtime::Result<()> {
        let (instance, module) = self.instantiated()?;
        let header = &snapshot.header;
        if header.module != module {
            return Err(wasmtime::Error::msg(format!(
                "the snapshot is of another module ({:x?}, this tenant runs {module:x?})",
                header.module
            )));
        }
        let blob = |i: usize| {
            snapshot
                .blobs
                .get(i)
                .ok_or_else(|| wasmtime::Error::msg(format!("bad snapshot: blob {i} missing")))
        };
        let store = self.store_mut();
        if let Some(i) = header.memory {
            let bytes = blob(i)?;
            let memory = instance
                .get_memory(&mut *store, "memory")
                .ok_or_else(|| wasmtime::Error::msg("the snapshot has a memory; the guest none"))?;
            let page = memory.page_size(&*store);
            let have = memory.data_size(&*store) as u64;
            let want = bytes.len() as u64;
            if want < have || !want.is_multiple_of(page) {
                return Err(wasmtime::Error::msg(format!(
                    "bad snapshot: a {want}-byte memory for a guest that starts with {have}"
                )));
            }
            memory.grow(&mut *store, (want - have) / page)?;
            memory.data_mut(&mut *store).copy_from_slice(bytes);
        }
        for (name, value) in &header.globals {
            let global = instance.get_global(&mut *store, name).ok_or_else(|| {
                wasmtime::Error::msg(format!("bad snapshot: the guest has no global `{name}`"))
            })?;
            global.set(&mut *store, value.val())?;
        }
        store
            .data_mut()
            .cuda
            .rebuild(&header.cuda, &snapshot.blobs)
            .map_err(|e| wasmtime::Error::msg(format!("rebuilding the GPU state: {e}")))
    }
}

/// The identity of a module, as a snapshot names it.
pub fn module_id(module: &GuestModule) -> (u64, usize) {
    module.source().id()
}
