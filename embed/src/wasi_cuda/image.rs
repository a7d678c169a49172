//! A guest's `wasi_cuda` state as a snapshot keeps it ([`CudaImage`]), and
//! its rebuild on a fresh context: after a device fault the process must be
//! replaced (CUDA's sticky errors), and a tenant moved to the new process
//! keeps the meaning of every handle it holds. Modules are loaded again from
//! their sources, functions looked up again, Wasm kernels made again from the
//! guest's module, and device buffers allocated again with the contents they
//! had when the snapshot was taken. Launches in flight are not kept: a
//! snapshot is taken only when the guest has none (it waited for them, or a
//! later wait saw them finished); a finished launch it has not waited for
//! yet is kept with its result, so its handle's wait still gives it.

use std::{collections::HashMap, sync::Arc};

use serde::{Deserialize, Serialize};
use tensorwasm_core::{
    DeviceMemory,
    abi::{AbiError, Errno, HandleKind, HandleTable, OwnerId, SlotImage, SlotState},
    quota::Resource,
};

use super::{
    buffers::Charged,
    ctx::WasiCudaCtx,
    errors::{driver_error, kernel_error},
    launch::LaunchEntry,
    modules::{FunctionEntry, FunctionOrigin, ModuleEntry, ModuleSource, kernel_entry},
    wait::LaunchQueue,
};
use crate::kernel::KernelTarget;

/// One handle-table slot of a [`CudaImage`]: its generation and what it
/// holds (so freed handles stay freed after the rebuild).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum SlotRecord<U> {
    /// A live object.
    Live {
        /// The generation of its handle.
        generation: u32,
        /// The object.
        value: U,
    },
    /// A free slot.
    Free {
        /// The generation its next handle gets.
        generation: u32,
    },
    /// A slot never used again.
    Retired {
        /// Its last generation.
        generation: u32,
    },
}

/// A guest-loaded module's source: the blob holding its PTX text or cubin.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum SourceRecord {
    /// PTX text.
    Ptx {
        /// Its blob.
        blob: usize,
    },
    /// A cubin or fatbin image.
    Cubin {
        /// Its blob.
        blob: usize,
    },
}

/// A function handle's target.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum FunctionRecord {
    /// Entry point `name` of source `module` (an index into
    /// [`CudaImage::sources`]).
    Raw {
        /// The module's source.
        module: usize,
        /// The entry point.
        name: String,
    },
    /// Function `index` of the guest's module, made a Wasm kernel.
    Kernel {
        /// The function index.
        index: u32,
    },
}

/// A launch that had finished, and was not waited for yet, when the
/// snapshot was taken: what its `wait` returns.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "result", rename_all = "snake_case")]
pub enum LaunchRecord {
    /// It succeeded.
    Finished,
    /// It failed (a Wasm kernel's trap): the errno and the reason.
    Failed {
        /// The errno's code.
        errno: i32,
        /// What `last_error` says after the `wait`, past the call's name.
        reason: String,
    },
}

/// A guest's `wasi_cuda` state: its handle tables, what each live handle
/// names, and its last error. Large contents (module sources, buffer
/// contents) are blobs kept beside it, named by index.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CudaImage {
    /// The guest's handle owner id.
    pub owner: u32,
    /// Every guest-loaded module that a module or function handle keeps.
    pub sources: Vec<SourceRecord>,
    /// Module handles: indices into `sources`.
    pub modules: Vec<SlotRecord<usize>>,
    /// Function handles.
    pub functions: Vec<SlotRecord<FunctionRecord>>,
    /// Buffer handles: the blob with each buffer's contents.
    pub buffers: Vec<SlotRecord<usize>>,
    /// Launch handles: each live one a finished launch not yet waited for
    /// (none in snapshots made before they were kept).
    #[serde(default)]
    pub launches: Vec<SlotRecord<LaunchRecord>>,
    /// What `last_error` said.
    pub last_error: String,
}

fn record<U>(slot: SlotImage<U>) -> SlotRecord<U> {
    let generation = slot.generation;
    match slot.state {
        SlotState::Live(value) => SlotRecord::Live { generation, value },
        SlotState::Free => SlotRecord::Free { generation },
        SlotState::Retired => SlotRecord::Retired { generation },
    }
}

/// A slot record back as a table slot, its live value made by `make`.
fn slot<U, T>(
    record: &SlotRecord<U>,
    make: &mut impl FnMut(&U) -> Result<T, AbiError>,
) -> Result<SlotImage<T>, AbiError> {
    Ok(match record {
        SlotRecord::Live { generation, value } => SlotImage {
            generation: *generation,
            state: SlotState::Live(make(value)?),
        },
        SlotRecord::Free { generation } => SlotImage {
            generation: *generation,
            state: SlotState::Free,
        },
        SlotRecord::Retired { generation } => SlotImage {
            generation: *generation,
            state: SlotState::Retired,
        },
    })
}

fn rebuild_table<U, T>(
    owner: OwnerId,
    kind: HandleKind,
    capacity: usize,
    records: &[SlotRecord<U>],
    mut make: impl FnMut(&U) -> Result<T, AbiError>,
) -> Result<HandleTable<T>, AbiError> {
    let slots = records
        .iter()
        .map(|r| slot(r, &mut make))
        .collect::<Result<Vec<_>, _>>()?;
    HandleTable::from_image(owner, kind, capacity, slots)
}

fn bad_image(why: impl Into<String>) -> AbiError {
    AbiError::new(Errno::EINVAL, format!("bad snapshot: {}", why.into()))
}

impl<D: KernelTarget + Clone + 'static> WasiCudaCtx<D> {
    /// The guest's state, with its blobs appended to `blobs`. Waits for the
    /// guest's stream; `EINVAL` while the guest has launches in flight it
    /// has not waited for (finished ones it has not waited for are kept),
    /// and the driver's error if the stream failed or a buffer cannot be
    /// read.
    pub fn image(&mut self, blobs: &mut Vec<Vec<u8>>) -> Result<CudaImage, AbiError> {
        self.driver
            .stream_synchronize(&self.stream)
            .map_err(|e| driver_error("stream_synchronize", e))?;
        let in_flight = self.queue.len();
        if in_flight > 0 {
            return Err(AbiError::new(
                Errno::EINVAL,
                format!(
                    "{in_flight} launches not waited for: a snapshot is taken once the guest \
                     has waited for its launches"
                ),
            ));
        }
        let launches = self
            .launches
            .image(|_, entry| match entry.outcome() {
                Some(Err(e)) => LaunchRecord::Failed {
                    errno: e.errno.code(),
                    reason: e.reason.to_string(),
                },
                // None cannot be: no launch is in flight.
                Some(Ok(())) | None => LaunchRecord::Finished,
            })
            .into_iter()
            .map(record)
            .collect();
        // One source per loaded module, however many handles keep it.
        let mut sources = Vec::new();
        let mut index_of: HashMap<*const ModuleEntry<D>, usize> = HashMap::new();
        let mut source_of = |entry: &Arc<ModuleEntry<D>>, blobs: &mut Vec<Vec<u8>>| {
            *index_of.entry(Arc::as_ptr(entry)).or_insert_with(|| {
                let blob = blobs.len();
                sources.push(match &entry.source {
                    ModuleSource::Ptx(text) => {
                        blobs.push(text.as_bytes().to_vec());
                        SourceRecord::Ptx { blob }
                    }
                    ModuleSource::Cubin(image) => {
                        blobs.push(image.to_vec());
                        SourceRecord::Cubin { blob }
                    }
                });
                sources.len() - 1
            })
        };
        let modules = self
            .modules
            .image(|_, entry| source_of(entry, blobs))
            .into_iter()
            .map(record)
            .collect();
        let mut functions = Vec::new();
        for slot in self.functions.image(|_, f| Arc::clone(f)) {
            let generation = slot.generation;
            let state = match slot.state {
                SlotState::Live(entry) => SlotState::Live(match &entry.origin {
                    FunctionOrigin::Raw(module, name) => FunctionRecord::Raw {
                        module: source_of(module, blobs),
                        name: name.clone(),
                    },
                    FunctionOrigin::Kernel(index) => FunctionRecord::Kernel { index: *index },
                }),
                SlotState::Free => SlotState::Free,
                SlotState::Retired => SlotState::Retired,
            };
            functions.push(record(SlotImage { generation, state }));
        }
        let mut buffers = Vec::new();
        for slot in self.buffers.image(|_, b| Arc::clone(b)) {
            let generation = slot.generation;
            let state = match slot.state {
                SlotState::Live(buffer) => {
                    let mut contents = vec![0u8; buffer.len()];
                    self.driver
                        .copy_from_device(&mut contents, buffer.full())
                        .map_err(|e| driver_error("copy_from_device", e))?;
                    blobs.push(contents);
                    SlotState::Live(blobs.len() - 1)
                }
                SlotState::Free => SlotState::Free,
                SlotState::Retired => SlotState::Retired,
            };
            buffers.push(record(SlotImage { generation, state }));
        }
        Ok(CudaImage {
            owner: self.buffers.owner().get(),
            sources,
            modules,
            functions,
            buffers,
            launches,
            last_error: self.last_error.clone(),
        })
    }

    /// Rebuilds the guest's state from `image` on this context, which must
    /// hold no handles yet: every resource is charged to the tenant again
    /// (`EQUOTA` if its quota no longer admits it), modules are loaded, Wasm
    /// kernels made (without the compile-time budget: the tenant paid it
    /// once) and buffers filled. On an error the context holds nothing.
    pub fn rebuild(&mut self, image: &CudaImage, blobs: &[Vec<u8>]) -> Result<(), AbiError> {
        if self.live_handles() != [0; 4] {
            return Err(AbiError::new(
                Errno::EINVAL,
                "a guest is rebuilt from a snapshot only on a fresh context",
            ));
        }
        let owner = OwnerId::adopt(image.owner)
            .ok_or_else(|| bad_image(format!("owner {:#x}", image.owner)))?;
        let blob = |i: usize| {
            blobs
                .get(i)
                .ok_or_else(|| bad_image(format!("blob {i} missing")))
        };
        let mut loaded: Vec<Option<Arc<ModuleEntry<D>>>> = vec![None; image.sources.len()];
        let mut module = |ctx: &Self, i: usize| -> Result<Arc<ModuleEntry<D>>, AbiError> {
            let slot = loaded
                .get_mut(i)
                .ok_or_else(|| bad_image(format!("source {i} missing")))?;
            if let Some(entry) = slot {
                return Ok(Arc::clone(entry));
            }
            let source = match image.sources[i] {
                SourceRecord::Ptx { blob: b } => ModuleSource::Ptx(
                    std::str::from_utf8(blob(b)?)
                        .map_err(|_| bad_image("PTX that is not UTF-8"))?
                        .into(),
                ),
                SourceRecord::Cubin { blob: b } => ModuleSource::Cubin(blob(b)?.as_slice().into()),
            };
            let entry = ctx.load_module(source)?;
            *slot = Some(Arc::clone(&entry));
            Ok(entry)
        };
        let modules = rebuild_table(
            owner,
            HandleKind::Module,
            self.modules.capacity(),
            &image.modules,
            |&i| module(self, i),
        )?;
        let functions = rebuild_table(
            owner,
            HandleKind::Function,
            self.functions.capacity(),
            &image.functions,
            |f| self.rebuild_function(f, &mut module),
        )?;
        let buffers = rebuild_table(
            owner,
            HandleKind::Buffer,
            self.buffers.capacity(),
            &image.buffers,
            |&i| {
                let contents = blob(i)?;
                let charge = self.charge(Resource::DeviceBytes, contents.len() as u64)?;
                let buffer = self
                    .driver
                    .alloc_device(contents.len())
                    .map_err(|e| driver_error("alloc_device", e))?;
                self.driver
                    .copy_to_device(buffer.full(), contents)
                    .map_err(|e| driver_error("copy_to_device", e))?;
                Ok(Arc::new(Charged::new(buffer, charge)))
            },
        )?;
        let launches = rebuild_table(
            owner,
            HandleKind::Launch,
            self.launches.capacity(),
            &image.launches,
            |record| {
                Ok(LaunchEntry::finished(match record {
                    LaunchRecord::Finished => Ok(()),
                    LaunchRecord::Failed { errno, reason } => Err(AbiError::new(
                        Errno::from_code(*errno)
                            .ok_or_else(|| bad_image(format!("launch errno {errno}")))?,
                        reason.clone(),
                    )),
                }))
            },
        )?;
        self.modules = modules;
        self.functions = functions;
        self.buffers = buffers;
        self.launches = launches;
        self.queue = LaunchQueue::new(self.queue.limit());
        self.last_error.clone_from(&image.last_error);
        Ok(())
    }

    fn rebuild_function(
        &self,
        record: &FunctionRecord,
        module: &mut impl FnMut(&Self, usize) -> Result<Arc<ModuleEntry<D>>, AbiError>,
    ) -> Result<Arc<FunctionEntry<D>>, AbiError> {
        match record {
            FunctionRecord::Raw { module: i, name } => self.raw_function(module(self, *i)?, name),
            FunctionRecord::Kernel { index } => {
                let source = self.kernel_source.as_ref().ok_or_else(|| {
                    AbiError::new(
                        Errno::ENOTSUP,
                        "the snapshot holds Wasm kernels, and the host did not register this \
                         guest's module for them",
                    )
                })?;
                let charge = self.charge(Resource::Functions, 1)?;
                let loaded = self
                    .kernels
                    .get_variant(
                        &self.driver,
                        source,
                        *index,
                        self.kernel_get_variant(),
                        self.compile_bounds.limits,
                    )
                    .map_err(|e| kernel_error(&e))?;
                Ok(kernel_entry(&loaded, charge))
            }
        }
    }
}
