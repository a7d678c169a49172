//! The CPU target for Wasm kernels: a kernel's CLIF (`docs/kernels.md`)
//! compiled to native code with Cranelift's JIT, and run by the CPU driver
//! as a host kernel that loops over each block's threads. This module owns
//! compiling and the launch parameters' order; its parts own the rewrite
//! that keeps native code from trapping (`trap_free`: a Cranelift trap is a
//! `ud2`/`SIGILL` that would end the process), the runtime checks' host
//! functions (`checks`) and the block runner of cooperative kernels
//! (`block`). Translation lives in `tensorwasm_core::lower`, launching in
//! the driver.
//!
//! # Launch parameters
//!
//! The launcher passes the kernel's Wasm arguments, then eight hidden
//! parameters, in [`KernelAbi`]'s order ([`launch_params`] builds the list):
//!
//! | index | [`KernelParam`] | meaning |
//! | --- | --- | --- |
//! | `0 .. w` | `I32`, `I64`, `F32`, `F64` | the Wasm arguments, each of exactly its Wasm type |
//! | `w` | `Ptr` | `mem_base`: host address of byte 0 of the guest's memory |
//! | `w + 1` | `I64` | `mem_len`: bytes of guest memory the kernel may touch (`>= 0`) |
//! | `w + 2` | `Ptr` | `status`: 32 bytes (`u32` code, `u32` stop, `u64` offset, `u64` the launch's start (this target only), `u64` reserved, little-endian), 8-aligned, zeroed before the launch |
//! | `w + 3` | `I64` | `fuel`: each thread's budget of loop iterations (its bits, as a `u64`) |
//! | `w + 4` | `I64` | `time_limit`: nanoseconds the launch may run (its bits, as a `u64`; `u64::MAX`: no limit) |
//! | `w + 5 ..= w + 7` | `I64` | `grid_x`, `grid_y`, `grid_z`: the grid the guest launched (each extent at least 1, in the low 32 bits; the stride's digit in the high ones: `KernelAbi::grid_params`, or `KernelAbi::OWN_GRID` in `grid_x`'s when the physical grid is the guest's own: `KernelAbi::own_grid_params`), which the kernel runs as virtual blocks over the launch's physical grid |
//!
//! `w` is [`KernelAbi::wasm_params`]. The twelve intrinsics are not launch
//! parameters: the host kernel computes them for every thread from the
//! block it is given. A launch whose parameters do not fit this table fails
//! (the host kernel panics, which the CPU driver reports as a failed launch).
//!
//! # Traps
//!
//! Every `trap`/`trapz`/`trapnz` with a [`KernelTrap`] code becomes a branch
//! to one cold block that compare-and-swaps the status code from 0 to the
//! trap's code and, if it won, stores the trap's source offset at
//! `status + 8`; then the thread returns. Other threads, in the same block
//! too, run to completion, as on a GPU. Belt and braces against a
//! translator bug, divisions get a divisor that cannot fault and trapping
//! float-to-int conversions become saturating ones (the translator's guards
//! run first, so results do not change). A kernel that still holds a
//! trapping instruction, a call (other than a runtime check's) or a symbol
//! after that is refused.
//!
//! # Runtime checks
//!
//! The kernel's calls of [`RuntimeCheck`]s stay calls: the JIT links each to
//! a host function (`extern "C"`, of the check's [`RuntimeCheck::types`],
//! `i64` results as `u64`).
//!
//! The clock ([`RuntimeCheck::Clock`], `docs/kernels.md`, "Time limit") is
//! `clock`, the nanoseconds since a process-wide
//! [`Instant`](std::time::Instant) (the CPU driver's ticks). Threads of one
//! block run one after another on the CPU driver, so a thread's own clock
//! bounds only itself: a thread that traps `TimeLimit` sets the status
//! word's `stop` (`AtomicU32` at +4), and the block runner keeps the
//! launch's clock too (its start, `AtomicU64` at +16, by the first block),
//! looking every 256 threads; either way it starts no more threads.
//!
//! The float atomic ([`RuntimeCheck::AtomicAddF32`]) is a
//! compare-and-swap loop with the device's arithmetic (`checks`).
//!
//! A kernel that calls any of the block's cooperative operations (shared
//! memory, barriers, virtual blocks' ends, warp operations;
//! [`RuntimeCheck::is_cooperative`]) is cooperative: its
//! block runner (`block`) runs the block's threads together, each as a
//! stackful coroutine, and owns the block's zeroed shared memory. The host
//! functions reach the running thread through a thread-local: `shared_base`
//! and `shared_size` give the shared memory's host address and the
//! launch's size, `lane_id` the thread's linear id modulo 32, and
//! `barrier`, `block_done` and the warp operations (`shfl_*`, `ballot`,
//! `vote_any`, `vote_all`) suspend the thread until the runner answers
//! (`block_begin` does nothing: the runner zeroes the memory when every
//! thread is done). The runner looks at the launch's clock between its
//! rounds and resumes every thread until it has ended, which its own fuel
//! and clock checks guarantee; it never unwinds a coroutine through JIT
//! frames. Other kernels keep the plain loop over threads.

use std::{
    fmt, mem,
    panic::{self, AssertUnwindSafe},
    sync::{Arc, Mutex, PoisonError},
};

use cranelift_codegen::{
    CodegenError, Context,
    ir::{AbiParam, Function, InstBuilder, MemFlagsData, Type, UserFuncName, types},
    settings::{self, Configurable},
};
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext};
use cranelift_jit::{JITBuilder, JITModule};
use cranelift_module::{FuncId, Linkage, Module, ModuleError, default_libcall_names};
use tensorwasm_core::{
    DevicePtr, Dim3, KernelParam,
    lower::{
        Intrinsic, KernelAbi, KernelTrap, LowerError, Lowerer, RuntimeCheck, UnsupportedOp, status,
    },
};
use tensorwasm_cpu::{BlockContext, HostKernelFn};

mod block;
mod checks;
mod trap_free;

use checks::{check_symbol, clock, host_check, link_runtime_checks};
use trap_free::make_trap_free;

/// Hidden launch parameters after the Wasm arguments: `mem_base`,
/// `mem_len`, `status`, `fuel`, `time_limit`, `grid_x`, `grid_y`, `grid_z`.
pub const LAUNCH_HIDDEN_PARAMS: usize = KernelAbi::INTRINSICS;

/// Bytes of the status word a launch points at (`docs/kernels.md`).
pub const STATUS_BYTES: usize = status::BYTES;

/// Alignment the status word must have (the trap handler's atomic
/// compare-and-swap and 64-bit store need it).
pub const STATUS_ALIGN: u64 = 8;

/// The hidden launch parameters, by name, so a launcher cannot swap them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HiddenParams {
    /// Host address of byte 0 of the guest's memory.
    pub mem_base: DevicePtr,
    /// Bytes of guest memory the kernel may touch.
    pub mem_len: u64,
    /// The status word: [`STATUS_BYTES`] bytes, [`STATUS_ALIGN`]-aligned,
    /// zeroed before the launch.
    pub status: DevicePtr,
    /// Each thread's budget of loop iterations.
    pub fuel: u64,
    /// Nanoseconds the launch may run, from its first clock check
    /// (`u64::MAX`: no limit).
    pub time_limit: u64,
    /// The grid the guest launched, run as virtual blocks over the physical
    /// grid (`docs/kernels.md`, "Virtual blocks"); each extent at least 1.
    pub grid: (u32, u32, u32),
}

/// A 1-D physical grid with one block per virtual block of `grid` (at most
/// `i32::MAX`), for launchers that do not share the device (the grid
/// itself is the other physical grid a Wasm kernel runs on without
/// looping: `docs/kernels.md`, "Virtual blocks").
pub fn one_block_each(grid: Dim3) -> Dim3 {
    let blocks = u64::from(grid.x) * u64::from(grid.y) * u64::from(grid.z);
    Dim3 {
        x: u32::try_from(blocks.min(i32::MAX as u64)).unwrap_or(i32::MAX as u32),
        y: 1,
        z: 1,
    }
}

/// The launch parameters of a CPU kernel: the Wasm arguments, then the
/// hidden ones in [`KernelAbi`]'s order (see the module docs). A `mem_len`
/// above `i64::MAX` comes out negative, which the host kernel refuses.
pub fn launch_params(wasm_args: &[KernelParam], hidden: HiddenParams) -> Vec<KernelParam> {
    let mut params = Vec::with_capacity(wasm_args.len() + LAUNCH_HIDDEN_PARAMS);
    params.extend_from_slice(wasm_args);
    params.extend([
        KernelParam::Ptr(hidden.mem_base),
        KernelParam::I64(hidden.mem_len as i64),
        KernelParam::Ptr(hidden.status),
        KernelParam::I64(hidden.fuel as i64),
        KernelParam::I64(hidden.time_limit as i64),
    ]);
    let (x, y, z) = hidden.grid;
    let blocks = u64::from(x) * u64::from(y) * u64::from(z);
    params.extend(KernelAbi::grid_params([x, y, z], blocks).map(KernelParam::I64));
    params
}

/// [`launch_params`] for a launch whose physical grid is `hidden.grid`
/// itself, saying so as `launch` does (`KernelAbi::own_grid_params`):
/// each thread takes its block from `ctaid` after one test.
pub fn own_grid_launch_params(wasm_args: &[KernelParam], hidden: HiddenParams) -> Vec<KernelParam> {
    let (x, y, z) = hidden.grid;
    let mut params = launch_params(wasm_args, hidden);
    let at = params.len() - 3;
    for (param, value) in params[at..]
        .iter_mut()
        .zip(KernelAbi::own_grid_params([x, y, z]))
    {
        *param = KernelParam::I64(value);
    }
    params
}

/// Lowers a kernel's CLIF to native code for this host (see the module
/// docs for what it rewrites and refuses).
#[derive(Clone, Copy, Debug, Default)]
pub struct CpuKernelLowerer;

impl Lowerer for CpuKernelLowerer {
    type Output = CpuKernel;

    fn lower(
        &self,
        name: &str,
        kernel: &Function,
        abi: KernelAbi,
    ) -> Result<CpuKernel, LowerError> {
        let wasm_params = check_signature(kernel, abi)?;
        let cooperative = calls_cooperative(kernel);
        let mut function = kernel.clone();
        make_trap_free(&mut function, abi)?;
        let compiled = compile(name, function, &wasm_params)?;
        Ok(CpuKernel {
            native: Arc::new(NativeKernel {
                name: name.to_owned(),
                abi,
                wasm_params,
                trampoline: compiled.trampoline,
                cooperative,
                stack_bytes: block::stack_bytes(compiled.frame_bytes),
                module: Mutex::new(Some(compiled.module)),
            }),
        })
    }
}

/// A kernel compiled to native code. Clones share the code, which is freed
/// when the last clone and the last host kernel made from it are gone.
#[derive(Clone)]
pub struct CpuKernel {
    native: Arc<NativeKernel>,
}

impl CpuKernel {
    /// The kernel's symbol.
    pub fn name(&self) -> &str {
        &self.native.name
    }

    /// Where its parameters sit.
    pub fn abi(&self) -> KernelAbi {
        self.native.abi
    }

    /// Its Wasm parameters' CLIF types (`I32`, `I64`, `F32`, `F64`).
    pub fn wasm_params(&self) -> &[Type] {
        &self.native.wasm_params
    }

    /// A host kernel for [`CpuDriver::host_module`]: for its block it runs
    /// every thread, in z, y, x order (a cooperative kernel's together, as
    /// coroutines: see the module docs), with the launch parameters of the
    /// module docs. Parameters that do not fit fail the launch.
    ///
    /// Launching it (an `unsafe` call) is sound only if `mem_base ..
    /// mem_base + mem_len` and the status word are live memory that the
    /// launch may write, until it completes: the kernel checks its accesses
    /// against `mem_len` (the translator emitted those checks), not against
    /// what the host owns.
    ///
    /// [`CpuDriver::host_module`]: tensorwasm_cpu::CpuDriver::host_module
    pub fn host_kernel(&self) -> Arc<HostKernelFn> {
        let native = Arc::clone(&self.native);
        Arc::new(move |block: &BlockContext, params: &[KernelParam]| {
            native.run_block(block, params);
        })
    }
}

impl fmt::Debug for CpuKernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "CpuKernel({}, {} Wasm params)",
            self.native.name,
            self.native.wasm_params.len()
        )
    }
}

/// `extern "C" fn(args, intrinsics)`: `args` holds one 8-byte slot per Wasm
/// and hidden parameter ([`KernelParam::to_slot`]), `intrinsics` the twelve
/// `u32`s in [`Intrinsic::ALL`] order. It loads them and calls the kernel.
type Trampoline = unsafe extern "C" fn(args: *const u64, intrinsics: *const u32);

/// The compiled code and what calling it needs.
struct NativeKernel {
    name: String,
    abi: KernelAbi,
    wasm_params: Vec<Type>,
    trampoline: Trampoline,
    /// Whether the kernel calls a cooperative runtime check: its blocks'
    /// threads then run together ([`block`]).
    cooperative: bool,
    /// Each thread's coroutine stack when `cooperative`.
    stack_bytes: usize,
    /// Owns the code `trampoline` points into. `JITModule` is `Send` but not
    /// `Sync` (it caches symbols in a `RefCell`); the mutex makes this
    /// struct `Sync`, and nothing locks it: only `Drop` touches the module.
    module: Mutex<Option<JITModule>>,
}

impl Drop for NativeKernel {
    fn drop(&mut self) {
        let module = self
            .module
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(module) = module.take() {
            // SAFETY: `trampoline` is private to this struct and calls borrow
            // it (host kernels hold an `Arc` of it), so no call is running
            // and none can start once it is dropped.
            unsafe { module.free_memory() };
        }
    }
}

impl NativeKernel {
    /// Runs every thread of `block`; panics (failing the launch) on
    /// parameters that do not fit.
    fn run_block(&self, block: &BlockContext, params: &[KernelParam]) {
        let args = self.launch_slots(params);
        let mut intrinsics = Intrinsic::ALL.map(|which| block_intrinsic(which, block));
        if self.cooperative {
            let launch = block::CooperativeBlock {
                trampoline: self.trampoline,
                args: &args,
                intrinsics,
                block,
                stack_bytes: self.stack_bytes,
            };
            block::run(launch, |look| stopped(&args, self.wasm_params.len(), look));
            return;
        }
        let tid = [
            Intrinsic::ThreadIdxX.index(),
            Intrinsic::ThreadIdxY.index(),
            Intrinsic::ThreadIdxZ.index(),
        ];
        let Dim3 {
            x: nx,
            y: ny,
            z: nz,
        } = block.block_dim;
        let mut started: u32 = 0;
        for z in 0..nz {
            intrinsics[tid[2]] = z;
            for y in 0..ny {
                intrinsics[tid[1]] = y;
                for x in 0..nx {
                    intrinsics[tid[0]] = x;
                    let look = started.is_multiple_of(CLOCK_EVERY_THREADS);
                    started = started.wrapping_add(1);
                    if stopped(&args, self.wasm_params.len(), look) {
                        return;
                    }
                    // SAFETY: the trampoline was compiled for exactly this
                    // many slots and intrinsics; `launch_slots` checked the
                    // parameters' types and that the status word is aligned.
                    // The launcher's `unsafe` launch vouches that guest
                    // memory and the status word are live (see
                    // `CpuKernel::host_kernel`); the kernel's accesses stay
                    // below `mem_len` by the translator's bounds checks, and
                    // its traps return instead of faulting (`make_trap_free`).
                    unsafe { (self.trampoline)(args.as_ptr(), intrinsics.as_ptr()) };
                }
            }
        }
    }
}

/// Threads a block runner starts between two looks at the launch's clock.
const CLOCK_EVERY_THREADS: u32 = 256;

/// Whether the launch whose slots are `args` must start no more threads: a
/// thread ran out of its time (see `append_trap_block`), or, when `look`,
/// the launch as a whole has run past its time limit since its first block
/// started. On a GPU every thread of the launch runs at once and each one's
/// own clock bounds it; here a block's threads run one after another, so
/// the runner also keeps the launch's clock (its start in the status
/// word's first reserved field) and, past the limit, stops the launch with
/// the `TimeLimit` trap (offset 0) as a thread would.
fn stopped(args: &[u64], wasm_params: usize, look: bool) -> bool {
    use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
    let at = args[wasm_params + KernelAbi::STATUS] as usize;
    let limit = args[wasm_params + KernelAbi::TIME_LIMIT];
    // SAFETY: `launch_slots` checked the status word is non-null and
    // aligned, and the launcher vouches it is live for the launch; during
    // it, its fields are touched only atomically (threads' trap blocks and
    // these runners).
    let (code, stop, start) = unsafe {
        (
            &*std::ptr::with_exposed_provenance::<AtomicU32>(at + status::CODE),
            &*std::ptr::with_exposed_provenance::<AtomicU32>(at + status::STOP),
            &*std::ptr::with_exposed_provenance::<AtomicU64>(at + status::RESERVED),
        )
    };
    if stop.load(Ordering::Relaxed) != 0 {
        return true;
    }
    if !look || limit == u64::MAX {
        return false;
    }
    // Never 0 (0 is "not started").
    let now = clock().saturating_add(1);
    let began = match start.compare_exchange(0, now, Ordering::Relaxed, Ordering::Relaxed) {
        Ok(_) => now,
        Err(earlier) => earlier,
    };
    if now.saturating_sub(began) <= limit {
        return false;
    }
    stop.store(1, Ordering::Relaxed);
    let _ = code.compare_exchange(
        0,
        KernelTrap::TimeLimit.code(),
        Ordering::Relaxed,
        Ordering::Relaxed,
    );
    true
}

impl NativeKernel {
    /// The launch parameters as 8-byte slots, after checking them against
    /// the kernel and the module docs' table.
    fn launch_slots(&self, params: &[KernelParam]) -> Vec<u64> {
        let name = &self.name;
        let wasm = self.wasm_params.len();
        if params.len() != wasm + LAUNCH_HIDDEN_PARAMS {
            panic!(
                "kernel `{name}` takes {} launch parameters ({wasm} Wasm, then mem_base, \
                 mem_len, status, fuel, time_limit, grid_x, grid_y, grid_z), got {}",
                wasm + LAUNCH_HIDDEN_PARAMS,
                params.len()
            );
        }
        for (i, (param, &ty)) in params.iter().zip(&self.wasm_params).enumerate() {
            if param_type(*param) != Some(ty) {
                panic!(
                    "kernel `{name}`: parameter {i} must be a Wasm {}, got {param:?}",
                    wasm_type_name(ty)
                );
            }
        }
        let hidden = &params[wasm..];
        let [
            KernelParam::Ptr(mem_base),
            KernelParam::I64(mem_len),
            KernelParam::Ptr(status),
            KernelParam::I64(_fuel),
            KernelParam::I64(_time_limit),
            KernelParam::I64(grid_x),
            KernelParam::I64(grid_y),
            KernelParam::I64(grid_z),
        ] = *hidden
        else {
            panic!(
                "kernel `{name}`: after its {wasm} Wasm parameters come mem_base (Ptr), \
                 mem_len (I64), status (Ptr), fuel (I64), time_limit (I64), grid_x, grid_y, \
                 grid_z (I64); got {hidden:?}"
            );
        };
        // Extents in the low 32 bits (`KernelAbi::grid_params`).
        for extent in [grid_x, grid_y, grid_z].map(|g| g & 0xffff_ffff) {
            if extent == 0 {
                panic!("kernel `{name}`: grid extent {extent} is not 1 ..= 2^32 - 1");
            }
        }
        let Ok(len) = u64::try_from(mem_len) else {
            panic!("kernel `{name}`: mem_len {mem_len} is negative");
        };
        if mem_base.0.checked_add(len).is_none() || (mem_base.0 == 0 && len > 0) {
            panic!(
                "kernel `{name}`: guest memory {mem_base:?} + {len} bytes is not an address range"
            );
        }
        if status.0 == 0 || status.0 % STATUS_ALIGN != 0 {
            panic!(
                "kernel `{name}`: the status word {status:?} must be a non-null, \
                 {STATUS_ALIGN}-aligned address"
            );
        }
        // Every parameter was matched above to a Wasm type or a hidden
        // scalar or pointer, all of which have a slot (a tensor map has no
        // Wasm type and was refused).
        params.iter().filter_map(|p| p.to_slot()).collect()
    }
}

/// An intrinsic's value for every thread of `block` (the thread indices
/// are overwritten per thread).
fn block_intrinsic(which: Intrinsic, block: &BlockContext) -> u32 {
    let BlockContext {
        block_idx,
        block_dim,
        grid_dim,
        shared_mem_bytes: _,
    } = *block;
    match which {
        Intrinsic::ThreadIdxX | Intrinsic::ThreadIdxY | Intrinsic::ThreadIdxZ => 0,
        Intrinsic::BlockIdxX => block_idx.x,
        Intrinsic::BlockIdxY => block_idx.y,
        Intrinsic::BlockIdxZ => block_idx.z,
        Intrinsic::BlockDimX => block_dim.x,
        Intrinsic::BlockDimY => block_dim.y,
        Intrinsic::BlockDimZ => block_dim.z,
        Intrinsic::GridDimX => grid_dim.x,
        Intrinsic::GridDimY => grid_dim.y,
        Intrinsic::GridDimZ => grid_dim.z,
    }
}

/// The CLIF type a launch parameter carries for a Wasm parameter (`Ptr`
/// is no Wasm type).
fn param_type(param: KernelParam) -> Option<Type> {
    match param {
        KernelParam::I32(_) => Some(types::I32),
        KernelParam::I64(_) => Some(types::I64),
        KernelParam::F32(_) => Some(types::F32),
        KernelParam::F64(_) => Some(types::F64),
        KernelParam::Ptr(_) | KernelParam::TensorMap(_) => None,
    }
}

/// The Wasm name of a Wasm parameter's CLIF type.
fn wasm_type_name(ty: Type) -> &'static str {
    match ty {
        types::I32 => "i32",
        types::I64 => "i64",
        types::F32 => "f32",
        _ => "f64",
    }
}

fn invalid(why: impl Into<String>) -> LowerError {
    LowerError::Invalid(why.into())
}

fn unsupported(op: impl Into<String>, offset: u64, reason: impl Into<String>) -> LowerError {
    LowerError::Unsupported(UnsupportedOp {
        op: op.into(),
        offset,
        reason: reason.into(),
    })
}

/// Checks the signature against `docs/kernels.md`; the Wasm parameters'
/// types.
fn check_signature(kernel: &Function, abi: KernelAbi) -> Result<Vec<Type>, LowerError> {
    let sig = &kernel.signature;
    if sig.params.len() != abi.total_params() || !sig.returns.is_empty() {
        return Err(invalid(format!(
            "the kernel's signature {sig} does not have {} Wasm and {} hidden parameters and \
             no results",
            abi.wasm_params,
            KernelAbi::HIDDEN_PARAMS
        )));
    }
    let wasm_params: Vec<Type> = sig.params[..abi.wasm_params]
        .iter()
        .map(|p| p.value_type)
        .collect();
    if let Some(bad) = wasm_params
        .iter()
        .position(|t| ![types::I32, types::I64, types::F32, types::F64].contains(t))
    {
        return Err(invalid(format!(
            "Wasm parameter {bad} has CLIF type {}, not i32, i64, f32 or f64",
            wasm_params[bad]
        )));
    }
    for (i, p) in sig.params[abi.wasm_params..].iter().enumerate() {
        let want = if i < KernelAbi::INTRINSICS {
            types::I64
        } else {
            types::I32
        };
        if p.value_type != want {
            return Err(invalid(format!(
                "hidden parameter {i} has CLIF type {}, not {want}",
                p.value_type
            )));
        }
    }
    Ok(wasm_params)
}

/// Whether `kernel` calls one of the block's cooperative operations.
fn calls_cooperative(kernel: &Function) -> bool {
    kernel
        .layout
        .blocks()
        .flat_map(|block| kernel.layout.block_insts(block))
        .filter_map(|inst| RuntimeCheck::called_by(kernel, inst))
        .any(RuntimeCheck::is_cooperative)
}

/// A kernel compiled for this host.
struct Compiled {
    /// Owns the code.
    module: JITModule,
    trampoline: Trampoline,
    /// Bytes of the kernel's stack frame.
    frame_bytes: usize,
}

/// Compiles the kernel and its trampoline for this host.
fn compile(name: &str, function: Function, wasm_params: &[Type]) -> Result<Compiled, LowerError> {
    let mut module = jit_module()?;
    // Cranelift's JIT panics on some failures (an unresolvable libcall);
    // that must not take down the embedding.
    let built = panic::catch_unwind(AssertUnwindSafe(|| {
        define(&mut module, name, function, wasm_params)
    }));
    let (entry, frame_bytes) = match built {
        Ok(Ok(built)) => built,
        Ok(Err(e)) => {
            // SAFETY: nothing of the module was called or handed out.
            unsafe { module.free_memory() };
            return Err(e);
        }
        Err(payload) => {
            let why = payload
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| payload.downcast_ref::<&str>().copied())
                .unwrap_or("a panic");
            return Err(unsupported(
                "native code",
                0,
                format!("Cranelift's JIT failed: {why}"),
            ));
        }
    };
    // SAFETY: `entry` is the finalized trampoline, defined with the host's
    // default calling convention (the C one) and the signature
    // `(pointer, pointer) -> ()`, which is `Trampoline`.
    let trampoline = unsafe { mem::transmute::<*const u8, Trampoline>(entry) };
    Ok(Compiled {
        module,
        trampoline,
        frame_bytes,
    })
}

/// A JIT module for the host's ISA, optimizing for speed.
fn jit_module() -> Result<JITModule, LowerError> {
    let host = |why: String| unsupported("native code", 0, format!("this host: {why}"));
    let mut flags = settings::builder();
    for (flag, value) in [
        ("opt_level", "speed"),
        // cranelift-jit needs both: code and libcalls may be far apart.
        ("use_colocated_libcalls", "false"),
        ("is_pic", "false"),
    ] {
        flags
            .set(flag, value)
            .map_err(|e| host(format!("Cranelift flag {flag}={value}: {e}")))?;
    }
    let isa = cranelift_native::builder()
        .map_err(|why| host(why.to_owned()))?
        .finish(settings::Flags::new(flags))
        .map_err(|e| host(e.to_string()))?;
    let mut builder = JITBuilder::with_isa(isa, default_libcall_names());
    for check in RuntimeCheck::ALL {
        builder.symbol(check_symbol(check), host_check(check));
    }
    Ok(JITModule::new(builder))
}

/// Defines the kernel and its trampoline and finalizes them; the
/// trampoline's address and the bytes of the kernel's stack frame.
fn define(
    module: &mut JITModule,
    name: &str,
    mut function: Function,
    wasm_params: &[Type],
) -> Result<(*const u8, usize), LowerError> {
    // docs/kernels.md says SystemV, but only our trampoline calls it.
    function.signature.call_conv = module.isa().default_call_conv();
    link_runtime_checks(module, &mut function)?;
    let kernel = module
        .declare_function(name, Linkage::Local, &function.signature)
        .map_err(module_error)?;
    function.name = UserFuncName::user(0, kernel.as_u32());
    // Should the compiled code not say, its stack slots are most of it.
    let slot_bytes: usize = function
        .sized_stack_slots
        .values()
        .map(|slot| slot.size as usize + (1 << slot.align_shift))
        .sum();
    let mut ctx = Context::for_function(function);
    module
        .define_function(kernel, &mut ctx)
        .map_err(module_error)?;
    let frame_bytes = ctx
        .compiled_code()
        .and_then(|code| code.buffer.frame_layout())
        .map_or(slot_bytes, |layout| layout.frame_to_fp_offset as usize)
        .max(slot_bytes);
    ctx.clear();
    let trampoline = define_trampoline(module, &mut ctx, kernel, wasm_params)?;
    module.finalize_definitions().map_err(module_error)?;
    Ok((module.get_finalized_function(trampoline), frame_bytes))
}

/// Defines the [`Trampoline`] of `kernel`.
fn define_trampoline(
    module: &mut JITModule,
    ctx: &mut Context,
    kernel: FuncId,
    wasm_params: &[Type],
) -> Result<FuncId, LowerError> {
    let config = module.target_config();
    let pointer = config.pointer_type();
    let mut sig = module.make_signature();
    sig.params
        .extend([AbiParam::new(pointer), AbiParam::new(pointer)]);
    let id = module
        .declare_anonymous_function(&sig)
        .map_err(module_error)?;
    ctx.func.signature = sig;
    ctx.func.name = UserFuncName::user(0, id.as_u32());
    let callee = module.declare_func_in_func(kernel, &mut ctx.func);
    let mut builder_ctx = FunctionBuilderContext::new();
    let mut b = FunctionBuilder::new(&mut ctx.func, &mut builder_ctx);
    let block = b.create_block();
    b.append_block_params_for_function_params(block);
    b.switch_to_block(block);
    b.seal_block(block);
    let (args, intrinsics) = (b.block_params(block)[0], b.block_params(block)[1]);
    // Both arrays are the host's, aligned and live for the call.
    let flags = MemFlagsData::trusted();
    let slots = wasm_params
        .iter()
        .copied()
        .chain([types::I64; LAUNCH_HIDDEN_PARAMS]);
    let mut values = Vec::with_capacity(wasm_params.len() + KernelAbi::HIDDEN_PARAMS);
    // At most 64 + 4 slots and 12 intrinsics: the offsets fit an i32.
    for (i, ty) in slots.enumerate() {
        let slot = b.ins().load(types::I64, flags, args, (8 * i) as i32);
        let value = match ty {
            types::I32 => b.ins().ireduce(types::I32, slot),
            types::F32 => {
                let bits = b.ins().ireduce(types::I32, slot);
                b.ins().bitcast(types::F32, MemFlagsData::new(), bits)
            }
            types::F64 => b.ins().bitcast(types::F64, MemFlagsData::new(), slot),
            _ => slot,
        };
        values.push(value);
    }
    for i in 0..Intrinsic::ALL.len() {
        values.push(b.ins().load(types::I32, flags, intrinsics, (4 * i) as i32));
    }
    b.ins().call(callee, &values);
    b.ins().return_(&[]);
    b.finalize(config);
    module.define_function(id, ctx).map_err(module_error)?;
    Ok(id)
}

fn module_error(e: ModuleError) -> LowerError {
    match e {
        // The translator's (or this module's) bug; say where.
        ModuleError::Compilation(CodegenError::Verifier(errors)) => {
            invalid(format!("the kernel's CLIF does not verify: {errors}"))
        }
        other => unsupported(
            "native code",
            0,
            format!("Cranelift could not compile the kernel for this host: {other}"),
        ),
    }
}

/// `CpuKernel` crosses threads: the driver calls host kernels from several
/// workers at once.
const _: () = {
    const fn send_sync<T: Send + Sync>() {}
    send_sync::<CpuKernel>();
};
