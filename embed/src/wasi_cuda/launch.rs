//! Launches: `launch` and `tensor_op` check their work, take a launch slot,
//! queue it on the guest's stream and keep what it touches alive
//! ([`LaunchEntry`]) until it is seen finished, and place the checkpoints
//! a launch that finds no slot free waits for; a Wasm kernel's grid,
//! arguments and status word (its trap) are handled here. Waiting (for a
//! launch, or for a slot: the guest's `LaunchQueue`) is `wait`'s.

use std::{sync::Arc, time::Instant};

use tensorwasm_core::{
    DeviceMemory, DevicePtr, Dim3, GpuDriver, KernelParam, LaunchConfig,
    abi::{self, AbiError, Errno, Handle, LaunchArg},
    dispatch::dispatch,
    lower::{
        KernelAbi, KernelTrap, status,
        translate::{KernelGlobal, KernelVariant, WasmType},
    },
    quota::{OwnedCharge, Resource},
};

use crate::{
    builtins::BuiltinFunction,
    kernel::{KernelTarget, LoadedKernel},
    memory::GuestRegionInfo,
};

use super::{
    buffers::GuestBuffer,
    ctx::{GuestMem, WasiCudaCtx, check_out_u64},
    errors::{driver_error, kernel_error},
    modules::{FunctionEntry, KernelInfo},
    wait::Checkpoint,
};

/// A launch the guest holds a handle to: in flight, with everything the
/// kernel may touch kept alive and its launch slot held; or seen finished
/// before the guest waited for it, with its result alone (the slot counts
/// kernel work in flight, not handles: `docs/tenants.md`).
pub(crate) struct LaunchEntry<D: GpuDriver> {
    /// Its place in the guest's launch order ([`LaunchQueue`]).
    seq: u64,
    /// A Wasm kernel's status slot (the launch handle's slot) and name.
    kernel: Option<(usize, String)>,
    state: LaunchState<D>,
}

enum LaunchState<D: GpuDriver> {
    InFlight(Held<D>),
    /// Its result: `Err` is the trap its Wasm kernel recorded (`ETRAP`).
    Finished(Result<(), AbiError>),
}

/// What a launch in flight keeps until it has finished: what it touches,
/// and the tenant's launches-in-flight charge (its slot).
struct Held<D: GpuDriver> {
    _buffers: Vec<GuestBuffer<D>>,
    _function: Launched<D>,
    /// The kernel variant launched, when not the handle's own.
    _variant: Option<Arc<LoadedKernel<D>>>,
    _memory: Option<GuestRegionInfo>,
    _charge: OwnedCharge,
}

/// What a launch runs, kept loaded until the launch has finished.
enum Launched<D: GpuDriver> {
    /// A function handle's target: a raw module's entry point or a Wasm
    /// kernel (`launch`).
    Handle { _entry: Arc<FunctionEntry<D>> },
    /// A built-in tensor kernel, the runtime's (`tensor_op`).
    Builtin { _entry: Arc<BuiltinFunction<D>> },
}

impl<D: GpuDriver> LaunchEntry<D> {
    /// A launch seen finished with `result`, holding nothing else (a
    /// snapshot's).
    pub(crate) fn finished(result: Result<(), AbiError>) -> Self {
        LaunchEntry {
            seq: 0,
            kernel: None,
            state: LaunchState::Finished(result),
        }
    }

    /// Whether it is still in flight.
    pub(crate) fn in_flight(&self) -> bool {
        matches!(self.state, LaunchState::InFlight(_))
    }

    /// Its result, once seen finished.
    pub(crate) fn outcome(&self) -> Option<&Result<(), AbiError>> {
        match &self.state {
            LaunchState::Finished(result) => Some(result),
            LaunchState::InFlight(_) => None,
        }
    }

    /// The launch has finished: reads its trap from `words` (clearing its
    /// status word) and lets go of what it held, its slot included.
    fn finish(&mut self, words: Option<&D::ManagedBuffer>) {
        if self.in_flight() {
            let result = self.trap(words);
            self.state = LaunchState::Finished(result);
        }
    }

    /// Its result, once it has finished: the one kept, or its trap read
    /// from `words` now.
    fn result(mut self, words: Option<&D::ManagedBuffer>) -> Result<(), AbiError> {
        match std::mem::replace(&mut self.state, LaunchState::Finished(Ok(()))) {
            LaunchState::Finished(result) => result,
            LaunchState::InFlight(held) => {
                let result = self.trap(words);
                drop(held);
                result
            }
        }
    }

    fn trap(&self, words: Option<&D::ManagedBuffer>) -> Result<(), AbiError> {
        match (&self.kernel, words) {
            (Some((slot, name)), Some(words)) => take_trap(words, *slot, name),
            _ => Ok(()),
        }
    }
}

/// A launch as the guest asked for it, its arguments decoded: the grid,
/// the block, the dynamic shared memory, the arguments, and the launch
/// values of a Wasm kernel's globals.
struct LaunchCall {
    grid: Dim3,
    block: Dim3,
    shared_mem_bytes: u32,
    args: Vec<LaunchArg>,
    globals: Vec<KernelParam>,
}

/// Why a launch (`launch`, `tensor_op`) was not queued.
pub(crate) enum NotQueued {
    /// Every launch slot it may take is held (`ELIMIT`: the guest's own
    /// limit; `EQUOTA`: the tenant's quota): waiting for the guest's own
    /// launches may free one, and this is the error when none can.
    Full(AbiError),
    /// A Wasm kernel's launch needs a variant of it that is not made yet
    /// (`docs/kernels.md`, "Kernel variants"): once it is, the launch may
    /// be tried again.
    Compile {
        /// The kernel's function index.
        index: u32,
        /// The variant.
        variant: KernelVariant,
    },
    /// Anything else, reported as it is.
    Failed(AbiError),
}

impl From<AbiError> for NotQueued {
    fn from(e: AbiError) -> Self {
        NotQueued::Failed(e)
    }
}

impl<D: GpuDriver> WasiCudaCtx<D> {
    /// The mutable globals whose launch values a launch of `function`
    /// needs (none for a bad handle or a function that is not a Wasm
    /// kernel; `launch` reports those). Shared, not copied: it is asked
    /// on every launch.
    pub(crate) fn launch_globals(&self, function: u64) -> Option<Arc<[KernelGlobal]>> {
        self.functions
            .get(Handle(function))
            .ok()
            .and_then(|f| f.kernel.as_ref())
            .filter(|k| !k.globals.is_empty())
            .map(|k| Arc::clone(&k.globals))
    }

    /// Decodes, checks and queues a launch, and writes its handle.
    /// `globals` are the launch values of a Wasm kernel's globals
    /// ([`launch_globals`](Self::launch_globals)). [`NotQueued::Full`]
    /// when every slot it may take is held, after every check passed.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn launch(
        &mut self,
        mem: GuestMem<'_>,
        function: u64,
        grid: Dim3,
        block: Dim3,
        shared_mem_bytes: u32,
        args_ptr: u32,
        args_count: u32,
        out: u32,
        globals: Vec<KernelParam>,
    ) -> Result<(), NotQueued> {
        check_out_u64(mem.bytes, out)?;
        let function = Arc::clone(self.functions.get(Handle(function))?);
        let (guest, region) = self.guest_ref(&mem);
        let args = abi::decode_launch_args(mem.bytes, &guest, args_ptr, args_count)?;
        let call = LaunchCall {
            grid,
            block,
            shared_mem_bytes,
            args,
            globals,
        };
        let handle = self.queue_decoded(&function, call, guest, region)?;
        Ok(abi::write_u64(mem.bytes, out, handle.0)?)
    }

    /// Checks and queues a launch of Wasm kernel `function` (a component's:
    /// it reads no globals) with `params`, over the guest memory behind
    /// `region` at its current size; the launch handle, or
    /// [`NotQueued::Full`] as `launch`.
    pub(crate) fn launch_over_region(
        &mut self,
        function: Handle,
        grid: Dim3,
        block: Dim3,
        shared_mem_bytes: u32,
        params: Vec<KernelParam>,
        region: &GuestRegionInfo,
    ) -> Result<Handle, NotQueued> {
        let function = Arc::clone(self.functions.get(function)?);
        if function.kernel.is_none() {
            return Err(NotQueued::Failed(AbiError::new(
                Errno::EINVAL,
                "the function is not a Wasm kernel",
            )));
        }
        let guest = region.memory_ref();
        let call = LaunchCall {
            grid,
            block,
            shared_mem_bytes,
            args: params.into_iter().map(LaunchArg::Param).collect(),
            globals: Vec::new(),
        };
        self.queue_decoded(&function, call, guest, Some(region.clone()))
    }

    /// Checks and queues a launch of function `function` whose arguments
    /// are all scalars or buffer pointers (the component API's raw
    /// launches: it has no guest memory to point into); the launch handle,
    /// or [`NotQueued::Full`] as `launch`.
    pub(crate) fn launch_on_buffers(
        &mut self,
        function: Handle,
        grid: Dim3,
        block: Dim3,
        shared_mem_bytes: u32,
        args: Vec<LaunchArg>,
    ) -> Result<Handle, NotQueued> {
        let function = Arc::clone(self.functions.get(function)?);
        // No guest memory: a Wasm kernel is refused (`ENOTADDR`).
        let guest = abi::GuestMemoryRef {
            base: DevicePtr(0),
            len: 0,
            device_addressable: false,
        };
        let call = LaunchCall {
            grid,
            block,
            shared_mem_bytes,
            args,
            globals: Vec::new(),
        };
        self.queue_decoded(&function, call, guest, None)
    }

    /// Checks and queues a launch of `function` with decoded arguments
    /// over guest memory `guest` (backed by `region`, when managed).
    fn queue_decoded(
        &mut self,
        function: &Arc<FunctionEntry<D>>,
        call: LaunchCall,
        guest: abi::GuestMemoryRef,
        region: Option<GuestRegionInfo>,
    ) -> Result<Handle, NotQueued> {
        let LaunchCall {
            grid,
            block,
            shared_mem_bytes,
            args,
            globals,
        } = call;
        let uses_guest_memory = args
            .iter()
            .any(|a| matches!(a, LaunchArg::Param(KernelParam::Ptr(_))));
        let mut params = Vec::with_capacity(args.len() + KernelAbi::INTRINSICS);
        let mut buffers = Vec::new();
        for arg in args {
            match arg {
                LaunchArg::Param(p) => params.push(p),
                LaunchArg::Buffer { handle, offset } => {
                    let buf = Arc::clone(self.buffers.get(handle)?);
                    params.push(abi::resolve_buffer_pointer(
                        buf.device_ptr(),
                        buf.len(),
                        offset,
                    )?);
                    buffers.push(buf);
                }
            }
        }
        // Geometry and parameter count are checked by the driver against
        // the device's limits before it runs anything (`EINVAL`); a Wasm
        // kernel's grid is checked here, since it runs as virtual blocks.
        let mut config = LaunchConfig {
            grid,
            block,
            shared_mem_bytes,
        };
        let mut variant: Option<Arc<LoadedKernel<D>>> = None;
        if let Some(kernel) = &function.kernel {
            check_kernel_args(kernel, &params, &buffers)?;
            if globals.len() != kernel.globals.len() {
                return Err(NotQueued::Failed(AbiError::new(
                    Errno::EINVAL,
                    format!(
                        "kernel `{}` uses {} global(s); the launch read {}",
                        kernel.name,
                        kernel.globals.len(),
                        globals.len()
                    ),
                )));
            }
            check_stack_window(kernel, &globals, guest.len as u64)?;
            params.extend(globals);
            if !guest.device_addressable {
                return Err(NotQueued::Failed(AbiError::new(
                    Errno::ENOTADDR,
                    "a Wasm kernel runs over the guest's memory, which the device cannot address",
                )));
            }
            // Accesses the translator proved aligned are aligned in the
            // guest's memory (`docs/kernels.md`, "The launch"); a device
            // allocation always starts on a 256-byte boundary, so this
            // never fails unless the memory was not allocated as one.
            if !guest.base.0.is_multiple_of(16) {
                return Err(NotQueued::Failed(AbiError::new(
                    Errno::EINVAL,
                    "a Wasm kernel needs the guest's memory 16-byte aligned",
                )));
            }
            self.status_words()?;
            config.grid = self.physical_grid(grid, block)?;
            // A block zeroes its shared memory 16 bytes at a time
            // (`docs/kernels.md`, "Shared memory"): the kernel sees the
            // launch's bytes rounded up to a multiple of 16 (the driver
            // checks the result against the device's limit).
            config.shared_mem_bytes =
                shared_mem_bytes
                    .checked_next_multiple_of(16)
                    .ok_or_else(|| {
                        AbiError::new(
                            Errno::EINVAL,
                            format!("{shared_mem_bytes} bytes of shared memory per block"),
                        )
                    })?;
            let own = [config.grid.x, config.grid.y, config.grid.z] == [grid.x, grid.y, grid.z]
                && self.launch_time_ticks() == u64::MAX;
            let needed = kernel.variant_for(&params, guest.len as u64, own);
            if needed != kernel.variant {
                let source = self.kernel_source.as_ref().ok_or_else(|| {
                    AbiError::new(Errno::EDRIVER, "a Wasm kernel without its module")
                })?;
                match self
                    .kernels
                    .lookup(source, kernel.index, needed, self.compile_bounds.limits)
                {
                    Some(Ok(made)) => variant = Some(made),
                    Some(Err(e)) => return Err(NotQueued::Failed(kernel_error(&e))),
                    None => {
                        return Err(NotQueued::Compile {
                            index: kernel.index,
                            variant: needed,
                        });
                    }
                }
            }
        }
        let kernel = function.kernel.as_ref().map(|k| k.name.clone());
        let is_kernel = kernel.is_some();
        let held = Held {
            _buffers: buffers,
            _function: Launched::Handle {
                _entry: Arc::clone(function),
            },
            _variant: variant.clone(),
            _memory: if uses_guest_memory || is_kernel {
                region
            } else {
                None
            },
            _charge: self.launch_slot()?,
        };
        let (handle, seq) = self.insert_launch(held)?;
        if let Some(name) = kernel {
            let slot = usize::from(handle.slot());
            let status = match self.status_word(slot) {
                Ok(status) => status,
                Err(e) => {
                    let _ = self.launches.remove(handle);
                    return Err(e.into());
                }
            };
            if let Ok(entry) = self.launches.get_mut(handle) {
                entry.kernel = Some((slot, name));
            }
            params.extend([
                KernelParam::Ptr(guest.base),
                KernelParam::I64(guest.len as i64),
                KernelParam::Ptr(status),
                KernelParam::I64(self.kernel_fuel as i64),
                // Its bits: the kernel reads it as a u64.
                KernelParam::I64(self.launch_time_ticks() as i64),
            ]);
            let guest_grid = [grid.x, grid.y, grid.z];
            let grid_params = if [config.grid.x, config.grid.y, config.grid.z] == guest_grid {
                // The guest's grid itself (`physical_grid`): each thread
                // takes its block from `ctaid` after one test.
                KernelAbi::own_grid_params(guest_grid)
            } else {
                let physical =
                    u64::from(config.grid.x) * u64::from(config.grid.y) * u64::from(config.grid.z);
                KernelAbi::grid_params(guest_grid, physical)
            };
            params.extend(grid_params.map(KernelParam::I64));
        }
        let target = variant.as_ref().map_or(&function.function, |v| &v.function);
        self.clock_before_launch();
        // SAFETY: every pointer parameter was produced by the decoder inside
        // the guest's memory (device-addressable, checked) or by
        // `resolve_buffer_pointer` inside a live buffer; the launch entry
        // keeps both alive until the launch has finished, and the context
        // synchronizes its stream before it is dropped. The parameter count
        // (and, on CUDA, each size) is checked against the kernel by the
        // driver. A Wasm kernel gets the guest memory's base and current
        // length (every access it makes is checked against that length by
        // the translated code) and its own status word; a kernel variant
        // (the launch entry holds it) runs only on a launch that meets the
        // assumption it was made under (`KernelInfo::variant_for` above
        // picks it from this launch's arguments, memory length, grid and
        // time limit; the kernel does not test it again, `docs/kernels.md`
        // "Kernel variants"). What raw PTX or a cubin does is
        // the loaded module's responsibility: they are trusted code.
        let queued = unsafe { self.driver.launch(&self.stream, target, &config, &params) };
        self.clock_after_launch();
        if let Err(e) = queued {
            let _ = self.launches.remove(handle);
            return Err(driver_error("launch", e).into());
        }
        self.queued(seq, handle);
        self.count_launch();
        Ok(handle)
    }

    /// A launch slot: one of the guest's own (its launch limit, `ELIMIT`),
    /// then the tenant's launches-in-flight charge (`EQUOTA`).
    fn launch_slot(&self) -> Result<OwnedCharge, NotQueued> {
        let (n, limit) = (self.queue.len(), self.queue.limit());
        if n >= limit {
            return Err(NotQueued::Full(AbiError::limit(format!(
                "{n} launches in flight, this guest's limit is {limit}"
            ))));
        }
        self.charge(Resource::LaunchesInFlight, 1)
            .map_err(NotQueued::Full)
    }

    /// A handle for a launch about to be queued, and its sequence number
    /// (`ELIMIT` when the guest holds as many launch handles as there are,
    /// finished ones included: only waiting for them frees those).
    fn insert_launch(&mut self, held: Held<D>) -> Result<(Handle, u64), AbiError> {
        let seq = self.queue.next_seq();
        let handle = self.launches.insert(LaunchEntry {
            seq,
            kernel: None,
            state: LaunchState::InFlight(held),
        })?;
        Ok((handle, seq))
    }

    /// Launch `seq` is on the stream: it joins the queue, and once half as
    /// many launches as the guest may have in flight have joined since the
    /// last checkpoint, a checkpoint follows it. A launch that finds no
    /// slot free then waits for an older half, not for everything queued,
    /// and the stream stays busy meanwhile; a guest that never has that
    /// many in flight pays for no callback.
    fn queued(&mut self, seq: u64, handle: Handle) {
        self.queue.push(seq, handle);
        let quota = self.ledger.limit(Resource::LaunchesInFlight);
        let limit = (self.queue.limit() as u64).min(quota);
        let every = usize::try_from(limit / 2).unwrap_or(usize::MAX).max(1);
        if self.queue.unmarked() < every {
            return;
        }
        let (completer, passed) = dispatch();
        let queued = self.driver.on_complete(
            &self.stream,
            Box::new(move || {
                let _ = completer.complete(Instant::now());
            }),
        );
        // Without it a full queue waits for its newest launch instead.
        if queued.is_ok() {
            self.queue.add_checkpoint(Checkpoint { after: seq, passed });
        }
    }

    /// Takes launch `handle` out (`wait`), in flight or finished.
    pub(crate) fn take_launch(&mut self, handle: Handle) -> Result<LaunchEntry<D>, AbiError> {
        let entry = self.launches.remove(handle)?;
        if entry.in_flight() {
            self.queue.remove(entry.seq);
        }
        Ok(entry)
    }

    /// Takes every launch out (`sync`).
    pub(crate) fn take_all_launches(&mut self) -> Vec<LaunchEntry<D>> {
        self.queue.take_through(u64::MAX);
        self.launches.take_all()
    }

    /// A launch's result once it has finished (its trap, if it recorded
    /// one), letting go of what it held.
    pub(crate) fn launch_result(&self, entry: LaunchEntry<D>) -> Result<(), AbiError> {
        entry.result(self.status.as_ref())
    }

    /// The guest's launches up to `seq` have finished (`u64::MAX`: all of
    /// them): each keeps its result in its handle, and lets go of what it
    /// held, its slot included. How many there were.
    pub(crate) fn retire_through(&mut self, seq: u64) -> usize {
        let handles = self.queue.take_through(seq);
        let words = self.status.as_ref();
        for &handle in &handles {
            if let Ok(entry) = self.launches.get_mut(handle) {
                entry.finish(words);
            }
        }
        handles.len()
    }

    /// The launch time limit in the ticks of the kernel's clock (the
    /// device's cycle counter, at its peak clock rate: at a lower clock the
    /// limit lasts longer in proportion). `u64::MAX` stays "no limit".
    fn launch_time_ticks(&self) -> u64 {
        if self.launch_time_ns == u64::MAX {
            return u64::MAX;
        }
        let khz = u128::from(self.driver.device().clock_rate_khz.max(1));
        let ticks = u128::from(self.launch_time_ns) * khz / 1_000_000;
        u64::try_from(ticks).unwrap_or(u64::MAX)
    }

    /// The physical grid of a Wasm kernel launch of `grid` x `block`: `grid`
    /// itself when all its blocks fit in the tenant's share of the device's
    /// thread slots (or the share is uncapped), else a 1-D grid of at most
    /// as many blocks as fit (and the device's largest grid x), over which
    /// the kernel runs `grid` as virtual blocks (`docs/kernels.md`,
    /// "Virtual blocks"). The rest of the device stays free for other
    /// tenants however long the launch runs. `EINVAL` for a grid or block
    /// outside the device's limits.
    fn physical_grid(&self, grid: Dim3, block: Dim3) -> Result<Dim3, AbiError> {
        let device = self.driver.device();
        let (gx, gy, gz) = device.max_grid_dim;
        let dims = [(grid.x, gx), (grid.y, gy), (grid.z, gz)];
        if dims.iter().any(|&(g, max)| g == 0 || g > max) {
            return Err(AbiError::new(
                Errno::EINVAL,
                format!(
                    "grid ({}, {}, {}) is outside 1 ..= ({gx}, {gy}, {gz})",
                    grid.x, grid.y, grid.z
                ),
            ));
        }
        let threads = u64::from(block.x) * u64::from(block.y) * u64::from(block.z);
        if threads == 0 || threads > u64::from(device.max_threads_per_block) {
            return Err(AbiError::new(
                Errno::EINVAL,
                format!(
                    "block ({}, {}, {}) has {threads} threads; 1 ..= {} allowed",
                    block.x, block.y, block.z, device.max_threads_per_block
                ),
            ));
        }
        let blocks = u64::from(grid.x) * u64::from(grid.y) * u64::from(grid.z);
        let slots = u64::from(device.multiprocessor_count)
            * u64::from(device.max_threads_per_multiprocessor);
        // At least one block, or a launch could never run.
        let share = (slots * self.launch_share_percent / 100 / threads).max(1);
        // Each thread's clock starts when its physical block does, so the
        // time limit bounds the launch only while every physical block is
        // resident at once: with a limit, the grid is capped at the share
        // (100% is one wave of the device) even for a full share.
        let cap = if self.launches_own_grid() {
            u64::MAX
        } else {
            share
        };
        // Every block fits at once: the physical grid is the virtual grid
        // itself, so each block reads its index off `ctaid` (no division)
        // and runs once.
        if blocks <= cap {
            return Ok(grid);
        }
        let x = blocks.min(cap).min(u64::from(gx));
        Ok(Dim3 {
            x: u32::try_from(x).unwrap_or(gx),
            y: 1,
            z: 1,
        })
    }

    /// Whether every Wasm kernel launch of this guest runs the guest's grid
    /// itself ([`physical_grid`](Self::physical_grid)): a full share of the
    /// device and no launch time limit.
    pub(super) fn launches_own_grid(&self) -> bool {
        self.launch_share_percent >= 100 && self.launch_time_ns == u64::MAX
    }

    /// The status words of kernel launches, made (and zeroed) on first use.
    fn status_words(&mut self) -> Result<&D::ManagedBuffer, AbiError> {
        if self.status.is_none() {
            let words = self
                .driver
                .alloc_managed(STATUS_WORDS * STATUS_BYTES)
                .map_err(|e| driver_error("alloc_managed (kernel status words)", e))?;
            self.driver
                .memset(words.full(), 0)
                .map_err(|e| driver_error("memset (kernel status words)", e))?;
            self.status = Some(words);
        }
        self.status
            .as_ref()
            .ok_or_else(|| AbiError::new(Errno::EDRIVER, "no status words"))
    }

    /// The address of launch slot `slot`'s status word.
    fn status_word(&mut self, slot: usize) -> Result<DevicePtr, AbiError> {
        let words = self.status_words()?;
        words
            .range(slot * STATUS_BYTES, STATUS_BYTES)
            .map(|r| r.ptr())
            .ok_or_else(|| AbiError::new(Errno::ELIMIT, format!("no status word for slot {slot}")))
    }

    fn clock_before_launch(&mut self) {
        if let Some(clock) = &mut self.gpu_clock {
            clock.before_launch(&self.driver, &self.stream);
        }
    }

    fn clock_after_launch(&mut self) {
        if let Some(clock) = &mut self.gpu_clock {
            clock.after_launch(&self.driver, &self.stream);
        }
    }

    fn count_launch(&self) {
        if let Some(stats) = &self.stats {
            stats.launches.inc();
        }
    }
}

impl<D: KernelTarget> WasiCudaCtx<D> {
    /// Checks a built-in tensor op's descriptor, queues its kernel and
    /// writes the launch handle; [`NotQueued::Full`] as `launch`.
    pub(crate) fn tensor_op(
        &mut self,
        mem: GuestMem<'_>,
        desc_ptr: u32,
        desc_len: u32,
        out: u32,
    ) -> Result<(), NotQueued> {
        check_out_u64(mem.bytes, out)?;
        self.allowed(self.policy.builtins, "built-in tensor kernels")?;
        let (guest, region) = self.guest_ref(&mem);
        let mut held = Vec::new();
        let buffers = &self.buffers;
        let op =
            abi::tensor::decode_tensor_op(mem.bytes, &guest, desc_ptr, desc_len, &mut |handle| {
                let buf = Arc::clone(buffers.get(handle)?);
                let at = (buf.device_ptr(), buf.len() as u64);
                held.push(buf);
                Ok(at)
            })?;
        let handle = self.queue_tensor_op(op, held, region)?;
        Ok(abi::write_u64(mem.bytes, out, handle.0)?)
    }

    /// Checks a built-in op given as its fields, whose operands all lie
    /// in buffers (the component API's tensor ops), and queues its kernel;
    /// the launch handle, or [`NotQueued::Full`] as `launch`.
    pub(crate) fn tensor_op_on_buffers(
        &mut self,
        header: &abi::tensor::TensorHeader,
        operands: &[abi::tensor::OperandDescriptor],
    ) -> Result<Handle, NotQueued> {
        self.allowed(self.policy.builtins, "built-in tensor kernels")?;
        // No guest memory: an operand located there is refused (`EFAULT`).
        let guest = abi::GuestMemoryRef {
            base: DevicePtr(0),
            len: 0,
            device_addressable: false,
        };
        let mut held = Vec::new();
        let buffers = &self.buffers;
        let op = abi::tensor::check_tensor_op(header, operands, &guest, &mut |handle| {
            let buf = Arc::clone(buffers.get(handle)?);
            let at = (buf.device_ptr(), buf.len() as u64);
            held.push(buf);
            Ok(at)
        })?;
        self.queue_tensor_op(op, held, None)
    }

    /// Queues checked op `op`, keeping `held` (its buffers) and `region`
    /// (the guest memory it touches, if any) alive until it has finished.
    fn queue_tensor_op(
        &mut self,
        op: abi::tensor::TensorOp,
        held: Vec<GuestBuffer<D>>,
        region: Option<GuestRegionInfo>,
    ) -> Result<Handle, NotQueued> {
        let (work, limit) = (op.work(), self.ledger.quota().tensor_work());
        if work > limit {
            return Err(NotQueued::Failed(AbiError::new(
                Errno::EQUOTA,
                format!(
                    "tensor-op work quota exceeded: the op asks for {work} multiply-adds or \
                     element operations, this tenant's limit is {limit} per op"
                ),
            )));
        }
        let device = self.driver.device();
        let sm = device
            .compute_capability
            .map(|(major, minor)| major * 10 + minor);
        let plan = tensorwasm_kernels::table::plan_on(&op, sm, device.multiprocessor_count)?;
        let function = self
            .builtins
            .function(&self.driver, plan.kernel)
            .map_err(|e| kernel_error(&e))?;
        let config = LaunchConfig {
            grid: plan.grid,
            block: plan.block,
            shared_mem_bytes: plan.shared_bytes,
        };
        let held = Held {
            _variant: None,
            _buffers: held,
            _function: Launched::Builtin {
                _entry: Arc::clone(&function),
            },
            _memory: region,
            _charge: self.launch_slot()?,
        };
        let (handle, seq) = self.insert_launch(held)?;
        self.clock_before_launch();
        // SAFETY: every pointer parameter is an operand that
        // `check_tensor_op` checked to lie, with the whole extent its shape
        // and strides give, inside the guest's device-addressable memory or
        // a live buffer; `plan` derives the kernel's sizes from the same
        // checked shapes, and the kernels touch nothing outside those
        // extents (docs/tensor-ops.md). The launch entry keeps the buffers
        // and the memory alive until the launch has finished.
        let queued = unsafe {
            self.driver
                .launch(&self.stream, &function.function, &config, &plan.params)
        };
        self.clock_after_launch();
        if let Err(e) = queued {
            let _ = self.launches.remove(handle);
            return Err(driver_error("launch (built-in kernel)", e).into());
        }
        self.queued(seq, handle);
        self.count_launch();
        Ok(handle)
    }
}

/// After a kernel launch finished: the trap it recorded in its status
/// word (slot `slot` of `words`), if any, with the whole slot cleared for
/// the next launch, every time (a launch that did not trap may still have
/// set the CPU target's stop flag and launch start).
fn take_trap<M: DeviceMemory>(words: &M, slot: usize, name: &str) -> Result<(), AbiError> {
    let Some(word) = words.range(slot * STATUS_BYTES, STATUS_BYTES) else {
        return Ok(());
    };
    let at = word.ptr().0 as usize;
    // SAFETY: the word lies in a live managed allocation of this context
    // (checked by `range`), which the host may read and write at the
    // same address; the launch that used it has finished (a completion
    // callback queued behind it has fired, or its stream was idle), and no
    // other launch uses this slot until the launch handle is released (a
    // finished launch's handle keeps its result, not its word). Each field
    // is aligned: the allocation is, and words are STATUS_BYTES (a
    // multiple of 8) apart.
    let (code, offset) = unsafe {
        let code = std::ptr::with_exposed_provenance::<u32>(at + status::CODE).read_volatile();
        let offset = std::ptr::with_exposed_provenance::<u64>(at + status::OFFSET).read_volatile();
        std::ptr::with_exposed_provenance_mut::<u32>(at + status::CODE).write_volatile(0);
        std::ptr::with_exposed_provenance_mut::<u32>(at + status::STOP).write_volatile(0);
        std::ptr::with_exposed_provenance_mut::<u64>(at + status::OFFSET).write_volatile(0);
        std::ptr::with_exposed_provenance_mut::<u64>(at + status::RESERVED).write_volatile(0);
        std::ptr::with_exposed_provenance_mut::<u64>(at + status::RESERVED + 8).write_volatile(0);
        (code, offset)
    };
    if code == 0 {
        return Ok(());
    }
    let what = KernelTrap::from_code(code).map_or("unknown trap", KernelTrap::description);
    Err(AbiError::new(
        Errno::ETRAP,
        format!("kernel `{name}` trapped: {what} (code {code}) at offset {offset:#x}"),
    ))
}

/// Launch slots with a status word (one per possible launch handle).
const STATUS_WORDS: usize = abi::handle::MAX_TABLE_CAPACITY;
/// A status word: `u32` trap code, `u32` stop, `u64` offset, two `u64`s
/// reserved (`docs/kernels.md`).
const STATUS_BYTES: usize = status::BYTES;

/// A kernel with a stack window runs only when the window lies in the
/// guest's memory: its stack pointer's launch value is at least the
/// window's size and at most the memory's (`docs/kernels.md`, "Globals and
/// the shadow stack"; the translator relies on it to place frames at
/// constant offsets with no bounds check).
fn check_stack_window(
    kernel: &KernelInfo,
    globals: &[KernelParam],
    mem_len: u64,
) -> Result<(), AbiError> {
    let Some(window) = kernel.stack_window else {
        return Ok(());
    };
    let sp = kernel
        .globals
        .iter()
        .position(|g| g.index == window.global)
        .and_then(|at| globals.get(at));
    match sp {
        Some(KernelParam::I32(sp))
            if (window.bytes..=mem_len).contains(&u64::from(sp.cast_unsigned())) =>
        {
            Ok(())
        }
        Some(KernelParam::I32(sp)) if u64::from(sp.cast_unsigned()) > mem_len => {
            Err(AbiError::new(
                Errno::EINVAL,
                format!(
                    "kernel `{}` has a stack window below its stack pointer, which is {} at \
                     launch: past the end of the guest's memory ({mem_len} bytes)",
                    kernel.name,
                    sp.cast_unsigned()
                ),
            ))
        }
        Some(KernelParam::I32(sp)) => Err(AbiError::new(
            Errno::EINVAL,
            format!(
                "kernel `{}` needs a stack window of {} bytes below the stack pointer, which is \
                 {} at launch: the window would reach below address 0",
                kernel.name,
                window.bytes,
                sp.cast_unsigned()
            ),
        )),
        _ => Err(AbiError::new(
            Errno::EINVAL,
            format!(
                "kernel `{}`: its stack pointer was not read at launch",
                kernel.name
            ),
        )),
    }
}

/// A Wasm kernel's arguments are values of its Wasm parameter types (guest
/// offsets are `i32` values, not pointer descriptors).
fn check_kernel_args<B>(
    kernel: &KernelInfo,
    params: &[KernelParam],
    buffers: &[B],
) -> Result<(), AbiError> {
    if !buffers.is_empty() || params.len() != kernel.params.len() {
        return Err(AbiError::new(
            Errno::EINVAL,
            format!(
                "kernel `{}` takes {} value argument(s) ({:?}); {} given{}",
                kernel.name,
                kernel.params.len(),
                kernel.params,
                params.len() + buffers.len(),
                if buffers.is_empty() {
                    ""
                } else {
                    ", and buffer pointers are not values"
                }
            ),
        ));
    }
    for (i, (p, ty)) in params.iter().zip(&kernel.params).enumerate() {
        let ok = matches!(
            (p, ty),
            (KernelParam::I32(_), WasmType::I32)
                | (KernelParam::I64(_), WasmType::I64)
                | (KernelParam::F32(_), WasmType::F32)
                | (KernelParam::F64(_), WasmType::F64)
        );
        if !ok {
            return Err(AbiError::new(
                Errno::EINVAL,
                format!(
                    "argument {i} of kernel `{}` must be {ty:?}, got {p:?} (guest offsets are \
                     passed as i32 values)",
                    kernel.name
                ),
            ));
        }
    }
    Ok(())
}
