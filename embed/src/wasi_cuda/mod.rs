//! The `wasi_cuda` host API: [`add_to_linker`] registers every import of
//! `docs/ABI.md` on a wasmtime [`Linker`]. Each import is thin: find the
//! guest's memory and context, call the matching [`WasiCudaCtx`] method
//! (which decodes with `tensorwasm_core::abi` and calls the driver), turn the
//! result into an errno. `wait`, `sync` and the copies are async: they
//! suspend the guest until the driver's completion callback fires; so are
//! `launch` and `tensor_op`, which suspend it while every launch slot they
//! may take is held, until the guest's oldest launches have finished. The
//! context is split by resource: `ctx` (the context itself), `buffers`,
//! `modules` (modules, functions, Wasm kernels), `launch`, `wait`, `device`
//! and `errors`.

mod atomics;
mod buffers;
mod ctx;
mod device;
mod errors;
mod gpu_time;
mod image;
mod kernel_names;
mod launch;
mod modules;
mod stats;
mod tick;
mod wait;

pub use ctx::{TenantPolicy, WasiCudaCtx, WasiCudaLimits};
pub use image::{CudaImage, FunctionRecord, LaunchRecord, SlotRecord, SourceRecord};
pub(crate) use kernel_names::MAX_EXPORT_NAME;
pub use stats::{Count, GuestStats, Seconds};
pub use wait::{DEFAULT_WAIT_SPIN, PROBE_EVERY, WaitPolicy};

use ctx::GuestMem;
use futures::future::Either;
use kernel_names::KernelName;
use launch::NotQueued;
use modules::KernelGet;
use tensorwasm_core::{
    Dim3, GpuDriver,
    abi::{AbiError, Errno, Handle},
    lower::{INTRINSIC_MODULE, Intrinsic, cooperative::CoopIntrinsic, math::MathIntrinsic},
};
use wait::Room;

use crate::kernel::KernelTarget;
use errors::kernel_error;
use wasmtime::{Caller, Extern, FuncType, Linker, Val};

/// The import module name.
pub const MODULE: &str = "wasi_cuda";

/// Reaches a guest's context from its store's data.
pub type GetCtx<T, D> = fn(&mut T) -> &mut WasiCudaCtx<D>;

/// Runs `f` on the guest's memory (empty when it exports none) and context,
/// and returns the errno.
fn with_mem<T, D: GpuDriver>(
    caller: &mut Caller<'_, T>,
    get: GetCtx<T, D>,
    call: &str,
    f: impl FnOnce(&mut WasiCudaCtx<D>, GuestMem<'_>) -> Result<(), tensorwasm_core::abi::AbiError>,
) -> i32 {
    on_mem(caller, get, |ctx, mem| {
        let result = f(ctx, mem);
        ctx.finish(call, result)
    })
}

/// Runs `f` on the guest's memory (empty when it exports none) and context.
fn on_mem<T, D: GpuDriver, R>(
    caller: &mut Caller<'_, T>,
    get: GetCtx<T, D>,
    f: impl FnOnce(&mut WasiCudaCtx<D>, GuestMem<'_>) -> R,
) -> R {
    let memory = match caller.get_export("memory") {
        Some(Extern::Memory(m)) => Some(m),
        _ => None,
    };
    let (bytes, data): (&mut [u8], &mut T) = match memory {
        Some(m) => m.data_and_store_mut(&mut *caller),
        None => (Default::default(), caller.data_mut()),
    };
    f(get(data), GuestMem { bytes })
}

/// Runs `f` on the context alone, and returns the errno.
fn with_ctx<T, D: GpuDriver>(
    caller: &mut Caller<'_, T>,
    get: GetCtx<T, D>,
    call: &str,
    f: impl FnOnce(&mut WasiCudaCtx<D>) -> Result<(), tensorwasm_core::abi::AbiError>,
) -> i32 {
    let ctx = get(caller.data_mut());
    let result = f(ctx);
    ctx.finish(call, result)
}

/// Suspends the guest until the work it queued so far has finished; `Err`
/// carries the errno when that work failed ([`WasiCudaCtx::quiesce`]).
async fn quiesce<T, D: GpuDriver>(
    caller: &mut Caller<'_, T>,
    get: GetCtx<T, D>,
    call: &str,
) -> Result<(), i32> {
    let ctx = get(caller.data_mut());
    ctx.quiesce().await.map_err(|e| ctx.fail(call, e))
}

impl<D: GpuDriver> WasiCudaCtx<D> {
    /// Waits (the guest suspended) until the work queued so far has
    /// finished; `Err` when that work failed. One non-blocking query first:
    /// work that is already done costs no callback. While suspended it also
    /// asks the stream every [`tick::CALLBACK_POLL`]: a driver may never
    /// call the completion callback once the device is lost (CUDA's
    /// `cuLaunchHostFunc`), and the failure must reach the guest.
    pub(crate) async fn quiesce(&mut self) -> Result<(), tensorwasm_core::abi::AbiError> {
        if self.settle()? {
            self.retire_through(u64::MAX);
            return Ok(());
        }
        let mut done = self.completion();
        let fired = loop {
            match futures::future::select(done, tick::poll_tick()).await {
                Either::Left((fired, _)) => break fired,
                Either::Right(((), waiting)) => {
                    done = waiting;
                    if self.poll_stream()? {
                        break std::time::Instant::now();
                    }
                }
            }
        };
        self.launch_status(fired)?;
        // Every launch queued so far has finished: their slots are free,
        // their handles keep their results.
        self.retire_through(u64::MAX);
        Ok(())
    }

    /// Frees launch slots for a launch that found them all held: retires
    /// the guest's launches that have finished, waiting (the guest
    /// suspended, its fuel untouched, its thread free) until a checkpoint
    /// behind its oldest ones passes if none has. `Ok(false)` when the
    /// guest has nothing in flight; `Err` once work on its stream has
    /// failed. Like [`quiesce`](Self::quiesce) it asks the stream every
    /// [`tick::CALLBACK_POLL`] while suspended, so a lost device ends the
    /// wait.
    pub(crate) async fn make_room(&mut self) -> Result<bool, tensorwasm_core::abi::AbiError> {
        let checkpoint = match self.room()? {
            Room::Made => return Ok(true),
            Room::None => return Ok(false),
            Room::Wait(checkpoint) => checkpoint,
        };
        let mut passed = checkpoint.passed;
        loop {
            match futures::future::select(passed, tick::poll_tick()).await {
                Either::Left(_) => break,
                Either::Right(((), waiting)) => {
                    passed = waiting;
                    if self.poll_stream()? {
                        break;
                    }
                }
            }
        }
        self.passed(checkpoint.after)?;
        Ok(true)
    }

    /// Waits (the guest suspended) until launch `handle` has finished and
    /// releases it: its result, or the stream's failure (sticky: every
    /// later wait reports it too).
    pub(crate) async fn wait_launch(
        &mut self,
        handle: Handle,
    ) -> Result<(), tensorwasm_core::abi::AbiError> {
        let entry = self.take_launch(handle)?;
        if !entry.in_flight() {
            // Seen finished while the guest queued more: its own result at
            // once, unless work on the stream has failed since.
            return self.poll_stream().and_then(|_| self.launch_result(entry));
        }
        let status = self.quiesce().await;
        // A Wasm kernel's trap, read (and its slot cleared) either way; the
        // kernel has finished (or failed): what it used may go.
        let trap = self.launch_result(entry);
        status.and(trap)
    }
}

impl<D: KernelTarget + Clone + 'static> WasiCudaCtx<D> {
    /// Queues a launch that `attempt` checks and queues, as `launch` and
    /// `tensor_op` do, for a host that holds the context across the wait
    /// (the component API): while every slot it may take is held it waits
    /// for the guest's oldest launches ([`make_room`](Self::make_room))
    /// and tries again; the slot's error (`EQUOTA`, `ELIMIT`) only once
    /// nothing in flight could free one. A Wasm kernel's variant that is
    /// not made yet is compiled (the guest suspended) and the launch tried
    /// again, as `launch` does.
    pub(crate) async fn queue_with_room<R>(
        &mut self,
        mut attempt: impl FnMut(&mut Self) -> Result<R, NotQueued>,
    ) -> Result<R, AbiError> {
        let mut compiled = false;
        loop {
            let full = match attempt(self) {
                Ok(queued) => return Ok(queued),
                Err(NotQueued::Failed(e)) => return Err(e),
                Err(NotQueued::Compile { index, variant }) => {
                    if compiled {
                        // The cache keeps what it made: a second miss is a bug.
                        return Err(AbiError::new(
                            Errno::EDRIVER,
                            format!("kernel variant {variant:?} was made but is not cached"),
                        ));
                    }
                    compiled = true;
                    self.compile_variant(index, variant)?
                        .await
                        .map_err(|e| kernel_error(&e))?;
                    continue;
                }
                Err(NotQueued::Full(e)) => e,
            };
            if !self.make_room().await? {
                return Err(full);
            }
        }
    }
}

/// Queues a launch (`launch`, `tensor_op`: `attempt` checks and queues it)
/// and returns the errno. While every slot it may take is held it
/// suspends the guest until the guest's oldest launches have finished
/// ([`make_room`]) and tries again; it fails with the slot's error
/// (`EQUOTA`, `ELIMIT`) only once the guest has nothing in flight whose
/// end could free one. Each round retires at least one of the guest's
/// launches and queues none, so it ends. A Wasm kernel's launch that needs
/// a variant not made yet (`docs/kernels.md`, "Kernel variants") suspends
/// the guest while it compiles, as `kernel_get` does, and tries again
/// (then the variant is cached); a failed compile fails the launch.
async fn queue_launch<T, D>(
    caller: &mut Caller<'_, T>,
    get: GetCtx<T, D>,
    call: &str,
    mut attempt: impl FnMut(&mut Caller<'_, T>) -> Result<(), NotQueued>,
) -> i32
where
    T: Send + 'static,
    D: KernelTarget + Clone + 'static,
{
    let mut compiled = false;
    loop {
        let full = match attempt(caller) {
            Ok(()) => return 0,
            Err(NotQueued::Failed(e)) => return get(caller.data_mut()).fail(call, e),
            Err(NotQueued::Compile { index, variant }) => {
                let ctx = get(caller.data_mut());
                if compiled {
                    // The cache keeps what it made: a second miss is a bug.
                    let e = AbiError::new(
                        Errno::EDRIVER,
                        format!("kernel variant {variant:?} was made but is not cached"),
                    );
                    return ctx.fail(call, e);
                }
                compiled = true;
                let compiling = match ctx.compile_variant(index, variant) {
                    Ok(compiling) => compiling,
                    Err(e) => return ctx.fail(call, e),
                };
                if let Err(e) = compiling.await {
                    return get(caller.data_mut()).fail(call, kernel_error(&e));
                }
                continue;
            }
            Err(NotQueued::Full(e)) => e,
        };
        match make_room(caller, get, call).await {
            Ok(true) => {}
            Ok(false) => return get(caller.data_mut()).fail(call, full),
            Err(errno) => return errno,
        }
    }
}

/// Frees launch slots ([`WasiCudaCtx::make_room`]); `Err` carries the
/// errno once work on the guest's stream has failed.
async fn make_room<T, D: GpuDriver>(
    caller: &mut Caller<'_, T>,
    get: GetCtx<T, D>,
    call: &str,
) -> Result<bool, i32> {
    let ctx = get(caller.data_mut());
    ctx.make_room().await.map_err(|e| ctx.fail(call, e))
}

/// `kernel_get` and its siblings: makes (or finds) the kernel of the
/// function `name` names, suspending the guest while it compiles, and
/// writes its function handle to `out`; the errno.
async fn kernel_get<T, D>(
    caller: &mut Caller<'_, T>,
    get: GetCtx<T, D>,
    call: &str,
    name: KernelName,
    out: i32,
) -> i32
where
    T: Send + 'static,
    D: KernelTarget + Clone + 'static,
{
    let mut started = None;
    let errno = with_mem(caller, get, call, |ctx, mem| {
        started = Some(ctx.kernel_get_start(mem, name, out as u32)?);
        Ok(())
    });
    let (loaded, charge) = match started {
        None => return errno,
        Some(KernelGet::Ready(kernel, charge)) => (Ok(kernel), charge),
        Some(KernelGet::Compiling(compiling, charge)) => (compiling.await, charge),
    };
    with_mem(caller, get, call, |ctx, mem| {
        ctx.kernel_get_finish(mem, out as u32, loaded, charge)
    })
}

/// Registers every `wasi_cuda` import on `linker`. `get` reaches the guest's
/// [`WasiCudaCtx`] from the store's data. Guests must be called with
/// wasmtime's async API (`call_async`), since `wait`, `sync` and the copies
/// suspend.
pub fn add_to_linker<T, D>(linker: &mut Linker<T>, get: GetCtx<T, D>) -> wasmtime::Result<()>
where
    T: Send + 'static,
    D: KernelTarget + Clone + 'static,
{
    linker.func_wrap(
        MODULE,
        "device_count",
        move |mut caller: Caller<'_, T>, out: i32| -> i32 {
            with_mem(&mut caller, get, "device_count", |ctx, mem| {
                ctx.device_count(mem, out as u32)
            })
        },
    )?;
    linker.func_wrap(
        MODULE,
        "device_info",
        move |mut caller: Caller<'_, T>, device: i32, out: i32, out_len: i32| -> i32 {
            with_mem(&mut caller, get, "device_info", |ctx, mem| {
                ctx.device_info(mem, device as u32, out as u32, out_len)
            })
        },
    )?;
    linker.func_wrap(
        MODULE,
        "buffer_alloc",
        move |mut caller: Caller<'_, T>, size: i64, out: i32| -> i32 {
            with_mem(&mut caller, get, "buffer_alloc", |ctx, mem| {
                ctx.buffer_alloc(mem, size as u64, out as u32)
            })
        },
    )?;
    linker.func_wrap(
        MODULE,
        "buffer_free",
        move |mut caller: Caller<'_, T>, buffer: i64| -> i32 {
            with_ctx(&mut caller, get, "buffer_free", |ctx| {
                ctx.buffer_free(buffer as u64)
            })
        },
    )?;
    linker.func_wrap(
        MODULE,
        "buffer_size",
        move |mut caller: Caller<'_, T>, buffer: i64, out: i32| -> i32 {
            with_mem(&mut caller, get, "buffer_size", |ctx, mem| {
                ctx.buffer_size(mem, buffer as u64, out as u32)
            })
        },
    )?;
    linker.func_wrap_async(
        MODULE,
        "copy_to_buffer",
        move |mut caller: Caller<'_, T>, (dst, dst_offset, src, len): (i64, i64, i32, i32)| {
            Box::new(async move {
                const CALL: &str = "copy_to_buffer";
                if let Err(errno) = quiesce(&mut caller, get, CALL).await {
                    return errno;
                }
                with_mem(&mut caller, get, CALL, |ctx, mem| {
                    ctx.copy_to_buffer(mem, dst as u64, dst_offset as u64, src as u32, len as u32)
                })
            })
        },
    )?;
    linker.func_wrap_async(
        MODULE,
        "copy_from_buffer",
        move |mut caller: Caller<'_, T>, (dst, src, src_offset, len): (i32, i64, i64, i32)| {
            Box::new(async move {
                const CALL: &str = "copy_from_buffer";
                if let Err(errno) = quiesce(&mut caller, get, CALL).await {
                    return errno;
                }
                with_mem(&mut caller, get, CALL, |ctx, mem| {
                    ctx.copy_from_buffer(mem, dst as u32, src as u64, src_offset as u64, len as u32)
                })
            })
        },
    )?;
    linker.func_wrap_async(
        MODULE,
        "copy_buffer",
        move |mut caller: Caller<'_, T>,
              (dst, dst_offset, src, src_offset, len): (i64, i64, i64, i64, i64)| {
            Box::new(async move {
                const CALL: &str = "copy_buffer";
                if let Err(errno) = quiesce(&mut caller, get, CALL).await {
                    return errno;
                }
                with_ctx(&mut caller, get, CALL, |ctx| {
                    ctx.copy_buffer(
                        dst as u64,
                        dst_offset as u64,
                        src as u64,
                        src_offset as u64,
                        len as u64,
                    )
                })
            })
        },
    )?;
    linker.func_wrap_async(
        MODULE,
        "memset_buffer",
        move |mut caller: Caller<'_, T>, (dst, dst_offset, value, len): (i64, i64, i32, i64)| {
            Box::new(async move {
                const CALL: &str = "memset_buffer";
                if let Err(errno) = quiesce(&mut caller, get, CALL).await {
                    return errno;
                }
                with_ctx(&mut caller, get, CALL, |ctx| {
                    ctx.memset_buffer(dst as u64, dst_offset as u64, value as u32, len as u64)
                })
            })
        },
    )?;
    linker.func_wrap(
        MODULE,
        "module_load_ptx",
        move |mut caller: Caller<'_, T>, ptr: i32, len: i32, out: i32| -> i32 {
            with_mem(&mut caller, get, "module_load_ptx", |ctx, mem| {
                ctx.module_load_ptx(mem, ptr as u32, len as u32, out as u32)
            })
        },
    )?;
    linker.func_wrap(
        MODULE,
        "module_load_cubin",
        move |mut caller: Caller<'_, T>, ptr: i32, len: i32, out: i32| -> i32 {
            with_mem(&mut caller, get, "module_load_cubin", |ctx, mem| {
                ctx.module_load_cubin(mem, ptr as u32, len as u32, out as u32)
            })
        },
    )?;
    linker.func_wrap(
        MODULE,
        "module_unload",
        move |mut caller: Caller<'_, T>, module: i64| -> i32 {
            with_ctx(&mut caller, get, "module_unload", |ctx| {
                ctx.module_unload(module as u64)
            })
        },
    )?;
    linker.func_wrap(
        MODULE,
        "function_get",
        move |mut caller: Caller<'_, T>, module: i64, name: i32, name_len: i32, out: i32| -> i32 {
            with_mem(&mut caller, get, "function_get", |ctx, mem| {
                ctx.function_get(mem, module as u64, name as u32, name_len as u32, out as u32)
            })
        },
    )?;
    // Making a kernel runs on a compile worker, bounded in size and time:
    // the guest is suspended meanwhile, never its fiber's stack or the
    // executor's thread spent on it. The three calls differ only in how the
    // guest names the function.
    linker.func_wrap_async(
        MODULE,
        "kernel_get",
        move |mut caller: Caller<'_, T>, (index, out): (i32, i32)| {
            Box::new(async move {
                let name = KernelName::Index(index as u32);
                kernel_get(&mut caller, get, "kernel_get", name, out).await
            })
        },
    )?;
    linker.func_wrap_async(
        MODULE,
        "kernel_get_export",
        move |mut caller: Caller<'_, T>, (name_ptr, name_len, out): (i32, i32, i32)| {
            Box::new(async move {
                let name = KernelName::Export {
                    ptr: name_ptr as u32,
                    len: name_len as u32,
                };
                kernel_get(&mut caller, get, "kernel_get_export", name, out).await
            })
        },
    )?;
    linker.func_wrap_async(
        MODULE,
        "kernel_get_table",
        move |mut caller: Caller<'_, T>, (slot, out): (i32, i32)| {
            Box::new(async move {
                let name = KernelName::TableSlot(slot as u32);
                kernel_get(&mut caller, get, "kernel_get_table", name, out).await
            })
        },
    )?;
    linker.func_wrap_async(
        MODULE,
        "tensor_op",
        move |mut caller: Caller<'_, T>, (desc_ptr, desc_len, out): (i32, i32, i32)| {
            Box::new(async move {
                queue_launch(&mut caller, get, "tensor_op", |caller| {
                    on_mem(caller, get, |ctx, mem| {
                        ctx.tensor_op(mem, desc_ptr as u32, desc_len as u32, out as u32)
                    })
                })
                .await
            })
        },
    )?;
    linker.func_wrap(
        MODULE,
        "function_release",
        move |mut caller: Caller<'_, T>, function: i64| -> i32 {
            with_ctx(&mut caller, get, "function_release", |ctx| {
                ctx.function_release(function as u64)
            })
        },
    )?;
    linker.func_wrap_async(
        MODULE,
        "launch",
        move |mut caller: Caller<'_, T>,
              (
            function,
            grid_x,
            grid_y,
            grid_z,
            block_x,
            block_y,
            block_z,
            shared_mem_bytes,
            args_ptr,
            args_count,
            out,
        ): (i64, i32, i32, i32, i32, i32, i32, i32, i32, i32, i32)| {
            let grid = Dim3 {
                x: grid_x as u32,
                y: grid_y as u32,
                z: grid_z as u32,
            };
            let block = Dim3 {
                x: block_x as u32,
                y: block_y as u32,
                z: block_z as u32,
            };
            Box::new(async move {
                queue_launch(&mut caller, get, "launch", |caller| {
                    // A Wasm kernel's threads start from the globals' values
                    // now (after a wait for a slot: the same values, since
                    // the guest was suspended).
                    let needed = get(caller.data_mut()).launch_globals(function as u64);
                    let globals = crate::kernel::globals::launch_values(
                        needed.as_deref().unwrap_or(&[]),
                        |name| match caller.get_export(name) {
                            Some(Extern::Global(g)) => Some(g.get(&mut *caller)),
                            _ => None,
                        },
                    )?;
                    on_mem(caller, get, |ctx, mem| {
                        ctx.launch(
                            mem,
                            function as u64,
                            grid,
                            block,
                            shared_mem_bytes as u32,
                            args_ptr as u32,
                            args_count as u32,
                            out as u32,
                            globals,
                        )
                    })
                })
                .await
            })
        },
    )?;
    linker.func_wrap_async(
        MODULE,
        "wait",
        move |mut caller: Caller<'_, T>, (launch,): (i64,)| {
            Box::new(async move {
                let ctx = get(caller.data_mut());
                let result = ctx.wait_launch(Handle(launch as u64)).await;
                ctx.finish("wait", result)
            })
        },
    )?;
    linker.func_wrap_async(MODULE, "sync", move |mut caller: Caller<'_, T>, (): ()| {
        Box::new(async move {
            const CALL: &str = "sync";
            let failed = quiesce(&mut caller, get, CALL).await.err();
            // Every launch queued before has finished: release them all,
            // with each Wasm kernel's trap (read and cleared, or kept since
            // the launch was seen finished).
            let ctx = get(caller.data_mut());
            let mut trap = None;
            for entry in ctx.take_all_launches() {
                if let Err(e) = ctx.launch_result(entry) {
                    trap.get_or_insert(e);
                }
            }
            match (failed, trap) {
                (Some(errno), _) => errno,
                (None, Some(e)) => ctx.fail(CALL, e),
                (None, None) => 0,
            }
        })
    })?;
    linker.func_wrap(
        MODULE,
        "prefetch",
        move |mut caller: Caller<'_, T>, ptr: i32, len: i32, target: i32| -> i32 {
            with_mem(&mut caller, get, "prefetch", |ctx, mem| {
                ctx.prefetch(mem, ptr as u32, len as u32, target as u32)
            })
        },
    )?;
    linker.func_wrap(
        MODULE,
        "advise",
        move |mut caller: Caller<'_, T>, ptr: i32, len: i32, advice: i32| -> i32 {
            with_mem(&mut caller, get, "advise", |ctx, mem| {
                ctx.advise(mem, ptr as u32, len as u32, advice as u32)
            })
        },
    )?;
    // A kernel's position intrinsics mean something only inside a launched
    // kernel (the translator turns them into the thread's indices); called
    // from the guest's own code in wasmtime they trap with a message.
    for intrinsic in Intrinsic::ALL {
        let name = intrinsic.import_name();
        linker.func_wrap(
            INTRINSIC_MODULE,
            name,
            move |_: Caller<'_, T>| -> wasmtime::Result<i32> {
                wasmtime::bail!(
                    "{INTRINSIC_MODULE}.{name} was called outside a kernel: it is only \
                     meaningful in a function launched as a Wasm kernel (wasi_cuda.kernel_get)"
                )
            },
        )?;
    }
    // The block's cooperative intrinsics (shared memory, barriers, warps)
    // too: outside a kernel there is no block.
    for which in CoopIntrinsic::all() {
        let mut name = String::new();
        which.import_name(&mut name);
        let ty = FuncType::new(
            linker.engine(),
            which.params().into_iter().map(atomics::val_type),
            which.result().map(atomics::val_type),
        );
        let message = format!(
            "{INTRINSIC_MODULE}.{name} was called outside a kernel: it is only meaningful in \
             a function launched as a Wasm kernel (wasi_cuda.kernel_get)"
        );
        linker.func_new(
            INTRINSIC_MODULE,
            &name,
            ty,
            move |_: Caller<'_, T>, _: &[Val], _: &mut [Val]| -> wasmtime::Result<()> {
                wasmtime::bail!("{message}")
            },
        )?;
    }
    atomics::add_to_linker(linker)?;
    // The arithmetic intrinsics compute in the guest's own code what they
    // compute in a kernel (`a * b + c` rounded once), so kernels run
    // unchanged as ordinary guest code.
    for which in MathIntrinsic::ALL {
        let name = which.import_name();
        match which {
            MathIntrinsic::FmaF32 => {
                linker.func_wrap(INTRINSIC_MODULE, name, |a: f32, b: f32, c: f32| {
                    a.mul_add(b, c)
                })?;
            }
            MathIntrinsic::FmaF64 => {
                linker.func_wrap(INTRINSIC_MODULE, name, |a: f64, b: f64, c: f64| {
                    a.mul_add(b, c)
                })?;
            }
        }
    }
    linker.func_wrap(
        MODULE,
        "last_error",
        move |mut caller: Caller<'_, T>, buf: i32, buf_len: i32, out_len: i32| -> i32 {
            // Reading the last error must not replace it.
            let memory = match caller.get_export("memory") {
                Some(Extern::Memory(m)) => Some(m),
                _ => None,
            };
            let (bytes, data): (&mut [u8], &mut T) = match memory {
                Some(m) => m.data_and_store_mut(&mut caller),
                None => (Default::default(), caller.data_mut()),
            };
            let ctx = get(data);
            match ctx.read_last_error(GuestMem { bytes }, buf as u32, buf_len, out_len as u32) {
                Ok(()) => 0,
                Err(e) => e.errno.code(),
            }
        },
    )?;
    Ok(())
}
