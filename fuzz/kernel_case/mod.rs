//! Differential cases for Wasm kernels against wasmtime, shared by the
//! `kernel_diff` fuzz target (CPU driver) and `embed/tests/gpu_kernel_diff.rs`
//! (CUDA, and the CPU driver in CI), which include this folder with
//! `#[path]`. A case is made from bytes (libFuzzer's input, or a seeded
//! generator's): wasm-smith makes a module in the kernel subset around a
//! function F of a type the bytes pick, and a kernel that calls F through
//! a shadow-stack frame is appended; [`check`] runs it once on wasmtime
//! (the reference) and once translated, lowered and launched on a driver,
//! from the same memory image, and compares the outcome (trap or not, the
//! trap's kind and offset), every byte of guest memory but the working
//! thread's stack window, and bytes past guest memory.
//!
//! The bytes, in order: memory pages (1 to 4), whether F is made from the
//! bytes (one case in sixteen, then half each: a counted or refused loop
//! shape of `loops`, or a row read through clamped indices and written
//! under guards, `rows`; its arguments from the bytes, then the launch and
//! the frame), F's
//! parameter and result types (up to [`MAX_PARAMS`] and
//! [`MAX_RESULTS`]), whether table operators are allowed (a quarter of
//! the cases), whether the cooperative intrinsics are offered (half the
//! cases), wasm-smith's module, which operators become cooperative calls
//! (below), the launch geometry, the thread that does the work and the
//! block's shared bytes, F's arguments, the frame (below), and which
//! kernels run ([`Variants`]: mostly both, from inputs too short for the
//! choice too).
//!
//! The module (docs/verification/2026-11-24-fuzz-kernel-diff-compiler-output.md
//! says why):
//! - wasm-smith with bulk memory (`memory.copy`, `memory.fill`), a table
//!   of up to 64 `funcref`s and up to 4 element segments (`call_indirect`),
//!   mutable globals (`global.set`), SIMD (`v128` operators, loads and
//!   stores; not relaxed SIMD); no reference types (wasmtime without its
//!   GC refuses the `externref` they bring), multi-memory, memory64, tail
//!   calls, exceptions, GC or start function.
//!   Table operators (`table.copy`, `table.init`, `elem.drop`: refused,
//!   tables must be fixed) only in a quarter of the cases. Its only imports
//!   are some of the `tensorwasm_kernel` intrinsics: the position ones, and
//!   in half the cases the cooperative ones (shared memory and its atomics,
//!   `barrier`, lane id, warp size, shuffles, votes), its only exports
//!   memory 0 (`min` 1 to 4 pages, `max` 4) and F (as `f`); NaNs
//!   canonicalized after every float operation that may make one.
//! - Refused operators with a stand-in of the same stack effect are
//!   rewritten in place (padded with `nop`s), so more modules reach the
//!   translator: `memory.grow` becomes `i32.eqz`, `memory.init` three
//!   `drop`s, `data.drop` a `nop`.
//! - Where the cooperative intrinsics are offered, about half the
//!   operators that have a cooperative intrinsic of the same stack effect
//!   among the module's imports become a `call` of it, in place (padded
//!   with `nop`s, so the call has the operator's offset): loads and stores
//!   shared accesses (an `i32` load a vote), `i32` read-modify-writes a
//!   shared atomic or a shuffle, `atomic.fence` a barrier, `memory.size`
//!   `shared_size`, `lane_id` or `warp_size`. wasm-smith calls any one
//!   function rarely, and its code mostly traps before it does.
//! - Bodies of functions F does not reach (by direct calls, or through a
//!   table's active segments) become `unreachable` (wasmtime compiles every
//!   function, and would spend most of the run on them).
//! - Appended: a mutable `i32` global, the stack pointer, which a `name`
//!   section calls `__stack_pointer`; an export `g<index>` of each mutable
//!   scalar global (the harness reads the launch values there); and
//!   `kernel(F's params)` (type, function, export, code). The kernel checks
//!   every intrinsic the module imports against one chosen thread's values
//!   (and `lane_id`, if imported) and returns unless they all match, so
//!   only that thread works and the launch is deterministic; an axis of the
//!   launch is longer than 1 only if the module imports its index intrinsic
//!   (or, for the block's axes, `lane_id`). Then, as LLVM does, it
//!   opens a frame (`global.get sp; i32.const N; i32.sub`, over-aligned
//!   with `i32.const -A; i32.and` in some cases, `local.tee; global.set`),
//!   may `memory.fill` it, spills F's arguments into it and reloads them
//!   (in half the cases it passes its parameters to F as they are, so
//!   the translator sees which ones F uses as addresses: those the
//!   aligned copy assumes aligned, "Kernel variants" below; in practice
//!   the loop cases' pointers, wasm-smith's code rarely proves an access
//!   aligned),
//!   calls F, stores F's results into the frame, `memory.copy`s them to
//!   [`RESULTS_AT`] (plus 0 to 3 bytes), and restores the stack pointer.
//!   The stack pointer starts at a multiple of 16 the bytes pick: mostly in
//!   memory above 1 KiB, sometimes at or past its end, or at 0; where the
//!   window would not lie in the memory (below address 0 or past its end)
//!   the runtime refuses the launch (`EINVAL`) and the case is skipped.
//!
//! The cooperative intrinsics: the launch asks for 0, 16, 64, 256 or 4096
//! shared bytes per block where the module imports a shared-memory
//! intrinsic; on wasmtime they are host functions over a zeroed buffer of
//! that size, with the semantics of `docs/kernels.md` ("The GPU
//! programming model") for a block whose only live thread is the working
//! one (the others returned): accesses trap as the kernel's, alignment
//! first; a barrier returns; a shuffle reads the thread's own value;
//! `ballot(p)` is `(p != 0) << lane`, `any` and `all` `p != 0`. A trap in
//! a host function is attributed to its `call`, as the kernel's is.
//!
//! Kernel variants (`docs/kernels.md`): the translation
//! for every launch (`translate_kernel`, `KernelVariant::ANY`), launched
//! with one physical block per virtual block, and the variant the runtime
//! launches for the case: the case launches the guest's grid itself
//! without a time limit, so the own-grid variant, with the aligned copy
//! alone where the arguments and the globals' launch values meet its
//! assumption (`TranslatedKernel::admits_aligned` of the aligned variant's
//! translation) and the memory's length is in range, else the general
//! body; launched on the guest's grid, marked as its own. Neither tests
//! the host's choice, so each is compared with wasmtime on its own.
//!
//! Both sides run the same bytes, so trap offsets index the same module.
//! Modules with `externref` (none, reference types being off) would be
//! skipped: wasmtime without its GC, as the fuzz target and the embedding
//! build it, refuses them.
//! The globals' launch values are the reference instance's values before
//! the call. The thread's stack window (`docs/kernels.md`, "Globals and the
//! shadow stack") is zeroed in the image both sides start from and left out
//! of the memory comparison: its bytes are the thread's own. Skipped, and
//! counted: inputs wasm-smith cannot build a module from, a translator
//! refusal (by operator), call graphs that inline to more than
//! [`MAX_INLINED_OPERATORS`], failed instantiation, and runs where either
//! side runs out of fuel (the two count fuel differently: wasmtime per
//! operator, the kernel per loop iteration) or wasmtime's stack overflows.

mod facts;
mod loops;
mod module;
mod rows;
mod run;
/// Hand-made cases, run by `embed/tests/gpu_kernel_diff.rs` (the fuzz
/// target builds no tests).
#[cfg(test)]
mod tests;

use std::{collections::BTreeMap, fmt::Write as _};

use arbitrary::{Result as ArbitraryResult, Unstructured};
use tensorwasm_core::lower::{
    LowerError,
    translate::{KernelLimits, KernelVariant, TranslatedKernel, translate_kernel_variant},
};
use tensorwasm_embed::kernel::KernelTarget;
use wasmparser::{FuncType, ValType};

use facts::{Facts, TRACKED, inlined_operators, reached_from};
use module::{Frame, frame_bytes, rewrite_as_coop, rewrite_refused, smith_config, with_kernel};
use run::{Arg, Launch, Outcome, Reference, arbitrary_arg, engine, launch_on};

const PAGE: u64 = 65536;
/// Memory 0's maximum, in pages; its minimum is 1 to this.
const MAX_PAGES: u64 = 4;
/// Where the kernel copies F's results (8 bytes each), give or take 3.
const RESULTS_AT: u64 = 0;
/// The kernel's budget of loop iterations.
const KERNEL_FUEL: u64 = 10_000;
/// wasmtime's budget of fuel (about one unit per operator).
const WASMTIME_FUEL: u64 = 1_000_000;
/// The largest kernel, every callee inlined, a case compiles; larger
/// call graphs (which inlining can make exponential) are skipped.
const MAX_INLINED_OPERATORS: u64 = 10_000;
/// Blocks per grid and threads per block, along each axis.
const MAX_DIM: u32 = 3;
const KERNEL_EXPORT: &str = "kernel";
const F_EXPORT: &str = "f";
/// F's most parameters and results.
const MAX_PARAMS: usize = 8;
const MAX_RESULTS: usize = 3;

/// One generated case: the module and how to launch its kernel.
pub struct Case {
    pub wasm: Vec<u8>,
    kernel_index: u32,
    f: u32,
    f_type: FuncType,
    launch: Launch,
    args: Vec<Arg>,
    frame: Frame,
    variants: Variants,
    /// The refused operators rewritten in place.
    rewrote: Vec<&'static str>,
    /// The tracked operators ([`TRACKED`]) in F's call graph.
    uses: Vec<&'static str>,
}

/// Makes a case from `u`'s bytes: `Ok(Err(why))` where it is skipped before
/// it runs, `Err` where the bytes make no module.
pub fn generate(u: &mut Unstructured<'_>) -> ArbitraryResult<Result<Case, String>> {
    let pages = u.int_in_range(1..=MAX_PAGES)?;
    if u.ratio(1, 16)? {
        let (shaped, shape) = if u.ratio(1, 2)? {
            (rows::row_case(u, pages)?, TRACKED[11])
        } else {
            (loops::loop_case(u, pages)?, TRACKED[10])
        };
        return shaped_case(u, pages, shaped, shape).map(Ok);
    }
    let (params, results) = (
        arbitrary_types(u, MAX_PARAMS)?,
        arbitrary_types(u, MAX_RESULTS)?,
    );
    let tables = u.ratio(1, 4)?;
    let coop = u.ratio(1, 2)?;
    let smith = wasm_smith::Module::new(smith_config(pages, &params, &results, tables, coop), u)?;
    let mut wasm = smith.to_bytes();
    let mut rewrote = rewrite_refused(&mut wasm);
    let mut facts = Facts::parse(&wasm);
    if coop {
        rewrote.extend(rewrite_as_coop(&mut wasm, &facts, u)?);
        facts = Facts::parse(&wasm);
    }
    let f = facts.f.expect("wasm-smith exports `f`");
    let f_type = facts.func_type(f).clone();
    let launch = Launch::arbitrary(u, &facts)?;
    let mem_len = pages * PAGE;
    let args = f_type
        .params()
        .iter()
        .map(|&ty| arbitrary_arg(u, ty, mem_len))
        .collect::<ArbitraryResult<Vec<Arg>>>()?;
    let frame = arbitrary_frame(u, &f_type, mem_len)?;
    let variants = Variants::arbitrary(u)?;
    if inlined_operators(&facts, f).is_some_and(|n| n > MAX_INLINED_OPERATORS) {
        return Ok(Err(format!(
            "inlines to more than {MAX_INLINED_OPERATORS} operators"
        )));
    }
    let reached = reached_from(&facts, f);
    let mut uses: Vec<&'static str> = (facts.bodies.iter().zip(&reached))
        .filter(|(_, reached)| **reached)
        .flat_map(|(body, _)| body.uses.iter().copied())
        .collect();
    uses.sort_unstable();
    uses.dedup();
    Ok(Ok(Case {
        wasm: with_kernel(&wasm, &facts, f, &f_type, &launch, &frame),
        kernel_index: facts.funcs.len() as u32,
        f,
        f_type,
        launch,
        args,
        frame,
        variants,
        rewrote,
        uses,
    }))
}

/// A case whose F is made by `loops` or `rows` (its module and arguments).
fn shaped_case(
    u: &mut Unstructured<'_>,
    pages: u64,
    (wasm, args): (Vec<u8>, Vec<Arg>),
    shape: &'static str,
) -> ArbitraryResult<Case> {
    let facts = Facts::parse(&wasm);
    let f = facts.f.expect("the shaped module exports `f`");
    let f_type = facts.func_type(f).clone();
    let launch = Launch::arbitrary(u, &facts)?;
    let frame = arbitrary_frame(u, &f_type, pages * PAGE)?;
    let variants = Variants::arbitrary(u)?;
    Ok(Case {
        wasm: with_kernel(&wasm, &facts, f, &f_type, &launch, &frame),
        kernel_index: facts.funcs.len() as u32,
        f,
        f_type,
        launch,
        args,
        frame,
        variants,
        rewrote: Vec::new(),
        uses: vec![shape],
    })
}

/// Which kernels a case runs against wasmtime (the module docs say which
/// variant the runtime launches).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Variants {
    /// The translation for every launch, then the runtime's variant.
    Both,
    /// The translation for every launch alone.
    Any,
    /// The runtime's variant alone.
    Host,
}

impl Variants {
    /// Both in half the cases (and where the bytes have run out), each
    /// alone in a quarter.
    fn arbitrary(u: &mut Unstructured<'_>) -> ArbitraryResult<Variants> {
        Ok(match u.int_in_range(0..=3u8)? {
            0 | 1 => Variants::Both,
            2 => Variants::Host,
            _ => Variants::Any,
        })
    }

    fn any(self) -> bool {
        self != Variants::Host
    }
}

/// Up to `max` Wasm scalar types.
fn arbitrary_types(u: &mut Unstructured<'_>, max: usize) -> ArbitraryResult<Vec<ValType>> {
    const TYPES: [ValType; 4] = [ValType::I32, ValType::I64, ValType::F32, ValType::F64];
    let n = u.int_in_range(0..=max)?;
    (0..n).map(|_| u.choose(&TYPES).copied()).collect()
}

/// The kernel's frame: its size from F's type, its alignment, fill and
/// results address, and where the stack pointer starts.
fn arbitrary_frame(
    u: &mut Unstructured<'_>,
    f_type: &FuncType,
    mem_len: u64,
) -> ArbitraryResult<Frame> {
    let top = (mem_len / 16) as u32;
    // Not just above 0: F's accesses to small addresses, common in
    // wasm-smith's code, would then straddle the window's top, and an access
    // that lies partly in the window goes to the shared bytes while the
    // thread's own copy keeps the window's (docs/kernels.md), a difference
    // by design that the comparison cannot tell from a bug.
    let sp = 16
        * match u.int_in_range(0..=15u8)? {
            // Below the window: the launch is refused, and counted.
            0 => 0,
            // At or past the memory's end.
            1 => top + u.int_in_range(0..=4)?,
            _ => u.int_in_range(64..=top)?,
        };
    Ok(Frame {
        sp,
        bytes: frame_bytes(f_type),
        align: *u.choose(&[0, 0, 32, 64])?,
        fill: if u.arbitrary()? {
            Some(u.arbitrary()?)
        } else {
            None
        },
        results_at: RESULTS_AT as u32 + u.int_in_range(0..=3)?,
        // Spilled where the bytes have run out, as before the choice.
        spill: u.int_in_range(0..=1u8)? == 0,
    })
}

impl Case {
    /// Everything that makes the case, for a report.
    pub fn describe(&self) -> String {
        format!(
            "kernel calls function {} of type {}; args {:?}; {:?}; {:?}; kernels {:?}; module of \
             {} bytes",
            self.f,
            self.f_type,
            self.args,
            self.launch,
            self.frame,
            self.variants,
            self.wasm.len()
        )
    }
}

/// What [`check`] found.
pub enum Checked {
    /// Both sides agree: how it ended, the kernels compared (`any`,
    /// `own+aligned`, `own+aligned (one body)` for a kernel without an
    /// aligned copy, `own+general`), the tracked operators in F's call
    /// graph, the cooperative ones the run called, and whether it trapped
    /// in a shared access.
    Compared {
        outcome: String,
        kernels: Vec<&'static str>,
        uses: Vec<&'static str>,
        ran: Vec<&'static str>,
        shared_trap: bool,
    },
    /// Not compared, and why.
    Skipped(String),
    /// The kernel differs from wasmtime, or the translator or the target's
    /// lowerer refuses a module wasmtime runs: the report.
    Differs(String),
    /// The driver failed (on CUDA, a launch that faulted: the context is
    /// lost, and no later case can run): the report.
    DriverFailed(String),
}

/// Runs `case` on wasmtime and on `driver` (`target` names it in reports),
/// as each of its kernels ([`Variants`]), and compares each with wasmtime.
pub fn check<D: KernelTarget>(
    driver: &D,
    stream: &D::Stream,
    case: &Case,
    target: &str,
) -> Checked {
    match check_kernels(driver, stream, case, target) {
        Ok(checked) | Err(checked) => checked,
    }
}

/// [`check`], `Err` where it ends before the comparison.
fn check_kernels<D: KernelTarget>(
    driver: &D,
    stream: &D::Stream,
    case: &Case,
    target: &str,
) -> Result<Checked, Checked> {
    // The reference first: a module wasmtime refuses is the harness's bug,
    // but for `externref`, which wasmtime built without its GC (as here and
    // in the embedding) refuses.
    let module = match wasmtime::Module::new(engine(), &case.wasm) {
        Ok(module) => module,
        Err(e) if format!("{e:?}").contains("requires gc") => {
            return Err(Checked::Skipped(
                "wasmtime without GC refuses externref".into(),
            ));
        }
        Err(e) => {
            return Err(Checked::Differs(format!(
                "wasmtime refuses the module: {e:?}\n"
            )));
        }
    };
    let Some(mut reference) = Reference::instantiate(&module, &case.launch) else {
        return Err(Checked::Skipped("instantiation failed".into()));
    };
    let first = if case.variants.any() {
        KernelVariant::ANY
    } else {
        KernelVariant::OWN_ALIGNED
    };
    let kernel = translate(case, first)?;
    // Mutable `v128` globals the module sets: the appended exports cover
    // scalar globals only, so such a module is skipped (as when the
    // translator refused them); `core/tests/simd.rs` checks them.
    if kernel.globals.iter().any(|g| g.lane.is_some()) {
        return Err(Checked::Skipped(
            "a mutable v128 global the module sets".into(),
        ));
    }
    // The launch values of the kernel's globals, then its stack window,
    // zeroed in the image both sides start from. Every variant has the
    // same (the detector's), which `kernels` checks.
    let globals: Vec<Arg> = kernel
        .globals
        .iter()
        .map(|g| reference.global(g.index))
        .collect();
    let mem_len = reference.memory().len() as u64;
    let mut window = None;
    if let Some(w) = kernel.stack_window {
        let at = kernel
            .globals
            .iter()
            .position(|g| g.index == w.global)
            .expect("the stack pointer is a kernel global");
        let sp = globals[at].1;
        if sp < w.bytes {
            // The runtime refuses such a launch (`EINVAL`): the window
            // would reach below address 0 (docs/kernels.md).
            return Err(Checked::Skipped(
                "stack pointer below the window (EINVAL)".into(),
            ));
        }
        if sp > mem_len {
            // Refused too: the window would reach past the memory's end.
            return Err(Checked::Skipped(
                "stack pointer past the memory (EINVAL)".into(),
            ));
        }
        window = Some((sp - w.bytes) as usize..sp as usize);
    }
    let args: Vec<Arg> = case.args.iter().chain(&globals).copied().collect();
    let kernels = kernels(case, kernel, &args, mem_len)?;
    if let Some(w) = &window {
        reference.memory()[w.clone()].fill(0);
    }
    let image = reference.memory().to_vec();

    let mut ours = Vec::new();
    for (name, kernel) in &kernels {
        let loaded = driver.load_kernel(kernel).map_err(|e| {
            Checked::Differs(format!(
                "{name}: the {target} target refuses a translated kernel: {e}"
            ))
        })?;
        let function = driver.function(&loaded, &kernel.name).map_err(|e| {
            Checked::Differs(format!("{name}: the loaded kernel has no function: {e}"))
        })?;
        let grid = kernel.variant.grid;
        let launched = launch_on(driver, stream, &function, &case.launch, grid, &args, &image)
            .map_err(|e| {
                Checked::DriverFailed(format!("{name}: the {target} driver failed: {e}"))
            })?;
        ours.push((*name, launched));
    }
    let (theirs, mut their_memory) = reference.call(&case.args);
    let (ran, shared_trap) = reference.cooperation();
    if theirs == Outcome::OutOfFuel || ours.iter().any(|(_, l)| l.outcome == Outcome::OutOfFuel) {
        return Err(Checked::Skipped("out of fuel (either side)".into()));
    }
    if theirs == Outcome::StackOverflow {
        return Err(Checked::Skipped("wasmtime's stack overflowed".into()));
    }
    if let Some(w) = &window {
        their_memory[w.clone()].fill(0);
    }

    let mut diff = String::new();
    for (name, launched) in &mut ours {
        let kernel = format!("{target} kernel ({name})");
        if let Some(w) = &window {
            launched.memory[w.clone()].fill(0);
        }
        let our_memory = &launched.memory;
        if launched.outcome != theirs {
            let _ = writeln!(
                diff,
                "outcome: wasmtime {theirs:?}, {kernel} {:?}",
                launched.outcome
            );
        }
        // Slice equality first: a byte loop is slow under coverage tracing.
        if *our_memory != their_memory {
            let differing: Vec<usize> = (0..image.len())
                .filter(|&i| our_memory[i] != their_memory[i])
                .collect();
            let _ = writeln!(
                diff,
                "memory differs at {} bytes (the stack window {window:?} left out); first ones \
                 (address: wasmtime, {kernel}):",
                differing.len()
            );
            for &i in differing.iter().take(16) {
                let _ = writeln!(
                    diff,
                    "  {i:#07x}: {:#04x} {:#04x}",
                    their_memory[i], our_memory[i]
                );
            }
        }
        if let Some(at) = launched.canary {
            let _ = writeln!(
                diff,
                "the {kernel} wrote past guest memory, at mem_len + {at}"
            );
        }
    }
    if !diff.is_empty() {
        return Err(Checked::Differs(diff));
    }
    Ok(Checked::Compared {
        outcome: match theirs {
            Outcome::Trapped { trap, .. } => format!("trapped ({})", trap.description()),
            _ => "returned".into(),
        },
        kernels: ours.iter().map(|(name, _)| *name).collect(),
        uses: case.uses.clone(),
        ran,
        shared_trap,
    })
}

/// `case`'s kernel translated for `variant`; a refusal skips the case
/// (`Err`), but for a module the translator calls invalid.
fn translate(case: &Case, variant: KernelVariant) -> Result<TranslatedKernel, Checked> {
    translate_kernel_variant(&case.wasm, case.kernel_index, KernelLimits::HOST, variant).map_err(
        |e| match e {
            LowerError::Unsupported(op) => Checked::Skipped(format!("refused `{}`", op.op)),
            LowerError::TooLarge(op) => Checked::Skipped(format!("too large at `{}`", op.op)),
            LowerError::Invalid(why) => Checked::Differs(format!(
                "the translator calls a module wasmtime accepts invalid: {why}"
            )),
        },
    )
}

/// The kernels `case` runs, named: `first` (translated for every launch
/// or, alone, for the runtime's first choice), and the variant the runtime
/// launches with `args` (the Wasm arguments, then the globals' launch
/// values) over `mem_len` bytes, as `KernelInfo::variant_for` picks it.
/// A later translation that fails, or whose globals or stack window differ
/// from the first's, is a difference.
fn kernels(
    case: &Case,
    first: TranslatedKernel,
    args: &[Arg],
    mem_len: u64,
) -> Result<Vec<(&'static str, TranslatedKernel)>, Checked> {
    let (globals, window, made) = (first.globals.clone(), first.stack_window, first.variant);
    let again = |variant: KernelVariant| {
        let kernel = translate(case, variant).map_err(|checked| match checked {
            Checked::Skipped(why) | Checked::Differs(why) => Checked::Differs(format!(
                "{variant:?} fails ({why}) where {made:?} translates"
            )),
            other => other,
        })?;
        if kernel.globals != globals || kernel.stack_window != window {
            return Err(Checked::Differs(format!(
                "{variant:?} has globals {:?} and window {:?}, {made:?} {globals:?} and {window:?}",
                kernel.globals, kernel.stack_window
            )));
        }
        Ok(kernel)
    };
    let mut kernels = Vec::new();
    let aligned = match case.variants {
        Variants::Host => first,
        Variants::Any => return Ok(vec![("any", first)]),
        Variants::Both => {
            let aligned = again(KernelVariant::OWN_ALIGNED)?;
            kernels.push(("any", first));
            aligned
        }
    };
    let arg = |i: usize| match args.get(i) {
        Some(&Arg(ValType::I32, bits)) => Some(bits as u32),
        _ => None,
    };
    if !aligned.admits_aligned(arg, mem_len) {
        kernels.push(("own+general", again(KernelVariant::OWN_GENERAL)?));
    } else if aligned.aligned_args.is_empty() {
        kernels.push(("own+aligned (one body)", aligned));
    } else {
        kernels.push(("own+aligned", aligned));
    }
    Ok(kernels)
}

/// Counts of what happened to the cases, by what (`compared: ...`,
/// `skip: ...`, `info: ...`, `uses: ...`).
pub struct Tally {
    counts: BTreeMap<String, u64>,
}

impl Tally {
    pub const fn new() -> Tally {
        Tally {
            counts: BTreeMap::new(),
        }
    }

    pub fn add(&mut self, what: String) {
        *self.counts.entry(what).or_default() += 1;
    }

    /// Counts the refused operators a case rewrote.
    pub fn add_rewrites(&mut self, case: &Case) {
        for rewrote in &case.rewrote {
            self.add(format!("info: rewrote {rewrote}"));
        }
    }

    /// Counts a case's result.
    pub fn add_checked(&mut self, checked: &Checked) {
        match checked {
            Checked::Compared {
                outcome,
                kernels,
                uses,
                ran,
                shared_trap,
            } => {
                self.add(format!("compared: {outcome}"));
                for kernel in kernels {
                    self.add(format!("info: compared, variant {kernel}"));
                }
                for tracked in TRACKED {
                    if uses.contains(&tracked) {
                        self.add(format!("info: compared, F's call graph has {tracked}"));
                    }
                }
                for tracked in ran {
                    self.add(format!("info: compared, the run called {tracked}"));
                }
                if *shared_trap {
                    self.add("info: compared, trapped in a shared access".into());
                }
            }
            Checked::Skipped(why) => self.add(format!("skip: {why}")),
            Checked::Differs(_) => self.add("DIFFERS".into()),
            Checked::DriverFailed(_) => self.add("DRIVER FAILED".into()),
        }
    }

    /// Cases counted whose key starts with `prefix`.
    pub fn count(&self, prefix: &str) -> u64 {
        self.counts
            .iter()
            .filter(|(what, _)| what.starts_with(prefix))
            .map(|(_, n)| n)
            .sum()
    }

    /// Cases counted, `info:` entries left out.
    pub fn cases(&self) -> u64 {
        self.counts
            .iter()
            .filter(|(what, _)| !what.starts_with("info:"))
            .map(|(_, n)| n)
            .sum()
    }

    /// Every count, by what.
    pub fn entries(&self) -> impl Iterator<Item = (&str, u64)> {
        self.counts.iter().map(|(what, n)| (what.as_str(), *n))
    }

    /// Every count, one `[what: n]` after another.
    pub fn line(&self) -> String {
        let mut line = String::new();
        for (what, count) in self.entries() {
            let _ = write!(line, " [{what}: {count}]");
        }
        line
    }
}
