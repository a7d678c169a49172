//! The translator: one kernel function of a guest's Wasm module to one
//! Cranelift IR function, exactly as `docs/kernels.md` describes ("The
//! kernel's CLIF"). It parses and validates the module (`module`), refuses
//! whole any kernel that uses something unsupported (`detect`), and emits
//! the CLIF with every callee inlined (`body`). It lowers nothing: that is
//! the lowerers' job, after the op table.

mod affine;
mod align;
mod body;
mod copy;
mod counted;
mod detect;
mod guarded;
mod limits;
mod loops;
mod merge;
mod module;
mod specialize;
mod straighten;
mod trip;
mod unroll;
mod version;

pub use detect::MAX_STACK_WINDOW;

use alloc::string::String;
use alloc::vec::Vec;

use cranelift_codegen::ir::{Function, Type, types};
use wasmparser::ValType;

use super::{KernelAbi, LowerError};

/// The type of a kernel's parameter (and of every value a kernel
/// computes with): Wasm's four scalar types.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WasmType {
    /// `i32`
    I32,
    /// `i64`
    I64,
    /// `f32`
    F32,
    /// `f64`
    F64,
}

impl WasmType {
    /// The CLIF type that carries it.
    pub const fn clif_type(self) -> Type {
        match self {
            WasmType::I32 => types::I32,
            WasmType::I64 => types::I64,
            WasmType::F32 => types::F32,
            WasmType::F64 => types::F64,
        }
    }

    /// Its name in the Wasm text format.
    pub const fn name(self) -> &'static str {
        match self {
            WasmType::I32 => "i32",
            WasmType::I64 => "i64",
            WasmType::F32 => "f32",
            WasmType::F64 => "f64",
        }
    }

    /// Its Wasm value type.
    pub const fn val_type(self) -> ValType {
        match self {
            WasmType::I32 => ValType::I32,
            WasmType::I64 => ValType::I64,
            WasmType::F32 => ValType::F32,
            WasmType::F64 => ValType::F64,
        }
    }

    /// The scalar type of a wasmparser value type (`None` for `v128` and
    /// references).
    pub fn from_val_type(ty: ValType) -> Option<WasmType> {
        match ty {
            ValType::I32 => Some(WasmType::I32),
            ValType::I64 => Some(WasmType::I64),
            ValType::F32 => Some(WasmType::F32),
            ValType::F64 => Some(WasmType::F64),
            ValType::V128 | ValType::Ref(_) => None,
        }
    }
}

/// How large a kernel may be, every callee inlined. The translator refuses
/// a larger one with [`LowerError::TooLarge`] before it emits anything, so
/// the time and memory that translation, lowering and the driver's PTX JIT
/// take stay bounded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct KernelLimits {
    /// Wasm operators.
    pub operators: u64,
    /// Branch points: memory accesses (each a bounds check and an
    /// alignment split), loops, `if`s, `br_if`/`br_table`, `unreachable`
    /// and trapping operators (division, remainder, float-to-int `trunc`).
    /// The driver's PTX JIT grows faster than linearly in them.
    pub branches: u64,
}

impl KernelLimits {
    /// The host's own caps, whatever a tenant's quota says: 2^16 operators
    /// and 1024 branch points. At these caps the whole compile stays within
    /// seconds and a few hundred MB (docs/kernels.md, "Limits"), and the
    /// compile worker's stack is sized for them.
    pub const HOST: KernelLimits = KernelLimits {
        operators: 1 << 16,
        branches: 1 << 10,
    };

    /// The tighter of `self` and `other`, limit by limit.
    pub fn min(self, other: KernelLimits) -> KernelLimits {
        KernelLimits {
            operators: self.operators.min(other.operators),
            branches: self.branches.min(other.branches),
        }
    }

    /// Whether a kernel of `size` fits.
    pub fn admits(self, size: KernelSize) -> bool {
        size.operators <= self.operators && size.branches <= self.branches
    }
}

/// A kernel's size, every callee inlined, as [`KernelLimits`] counts it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct KernelSize {
    /// Wasm operators.
    pub operators: u64,
    /// Branch points.
    pub branches: u64,
}

/// A mutable global a kernel uses (`docs/kernels.md`, "Globals and the shadow stack"): each
/// thread works on a copy of its own, which starts at the global's value
/// when the kernel is launched. The launcher passes that value as a
/// parameter after the kernel's Wasm parameters, in
/// [`TranslatedKernel::globals`] order.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct KernelGlobal {
    /// The global's index in the module.
    pub index: u32,
    /// Its type.
    pub ty: WasmType,
    /// A name the module exports it under (its first), through which a
    /// host can read its value at launch.
    pub export: Option<String>,
    /// For a `v128` global, which of its four 32-bit words (0 the lowest)
    /// this parameter carries, as an `i32` (`ty`); such a global has four
    /// entries, words 0 to 3 in order. `None` for a scalar global.
    pub lane: Option<u8>,
}

/// A kernel thread's shadow-stack window (`docs/kernels.md`, "The shadow
/// stack"): the `bytes` below the stack pointer's launch value are the
/// thread's own.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct StackWindow {
    /// The stack pointer's global index (one of the kernel's globals).
    pub global: u32,
    /// The window's size: a multiple of 16, at most [`MAX_STACK_WINDOW`].
    pub bytes: u64,
    /// Whether it lives in registers (`docs/kernels.md`, "Where the window
    /// lives"), else in a local slot.
    pub registers: bool,
}

/// Which launches a translation serves (`docs/kernels.md`, "Kernel
/// variants"). The host knows, before each launch, whether the launch runs
/// the guest's grid itself and whether the arguments the aligned copy
/// assumes aligned are ([`TranslatedKernel::aligned_args`]); a variant made
/// for one kind of launch leaves out the code the others need, so the
/// driver's JIT compiles less. The default serves every launch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct KernelVariant {
    /// The launches' grid.
    pub grid: GridVariant,
    /// The bodies it holds.
    pub bodies: BodyVariant,
}

impl KernelVariant {
    /// Every launch: the virtual-block loop and both bodies.
    pub const ANY: KernelVariant = KernelVariant {
        grid: GridVariant::Any,
        bodies: BodyVariant::Both,
    };

    /// Launches of the guest's own grid without a time limit whose
    /// arguments meet the aligned copy's assumption: the aligned copy
    /// alone, what `kernel_get` makes for a guest with the device to itself.
    pub const OWN_ALIGNED: KernelVariant = KernelVariant {
        grid: GridVariant::Own,
        bodies: BodyVariant::Aligned,
    };

    /// Launches of the guest's own grid without a time limit that do not
    /// meet the aligned copy's assumption: the general body alone.
    pub const OWN_GENERAL: KernelVariant = KernelVariant {
        grid: GridVariant::Own,
        bodies: BodyVariant::General,
    };
}

/// The grid a [`KernelVariant`] runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum GridVariant {
    /// Any launch: the loop over virtual blocks (`docs/kernels.md`,
    /// "Virtual blocks").
    #[default]
    Any,
    /// Only launches of the guest's grid itself
    /// ([`KernelAbi::own_grid_params`]) without a time limit
    /// (`time_limit` `u64::MAX`): each thread runs its own block once, no
    /// loop, no time checks. The kernel does not test that it got such a
    /// launch (`docs/kernels.md`, "Kernel variants"): on another it would
    /// compute the wrong blocks, every access still checked.
    Own,
}

/// The bodies a [`KernelVariant`] holds (the aligned copy: `specialize`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum BodyVariant {
    /// Both, the entry choosing by the arguments and the memory's length.
    #[default]
    Both,
    /// Only the aligned copy, when the kernel has one (else the one body
    /// there is): for launches that meet [`TranslatedKernel::aligned_args`]
    /// and whose memory's length is within [`ALIGNED_MEMORY_LEN`], which
    /// the kernel does not test (`docs/kernels.md`, "Kernel variants"): it
    /// reads those arguments with their low bits masked off, so it stays
    /// aligned on any launch, and trusts the length's range as every
    /// variant trusts the length.
    Aligned,
    /// Only the body for any arguments: what a launch that does not meet
    /// the aligned copy's assumption runs.
    General,
}

/// The memory lengths (bytes) the aligned copy runs on: one page to 4 GiB
/// less 16 MiB (`docs/kernels.md`, "The launch").
pub const ALIGNED_MEMORY_LEN: core::ops::RangeInclusive<u64> =
    (specialize::BOUNDED_MIN_LEN as u64)..=(specialize::BOUNDED_LEN as u64);

/// An argument the aligned copy assumes aligned: its low `bits` bits are
/// zero.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AlignedArg {
    /// Its index among the kernel's Wasm parameters (an `i32` one).
    pub param: usize,
    /// How many low bits are zero.
    pub bits: u32,
}

impl AlignedArg {
    /// Whether `value` (the argument, as the kernel reads it) meets it.
    pub fn admits(self, value: u32) -> bool {
        value & ((1u32 << self.bits) - 1) == 0
    }
}

/// A kernel translated to CLIF.
#[derive(Clone, Debug)]
pub struct TranslatedKernel {
    /// The kernel's CLIF: its Wasm parameters, the launch values of its
    /// globals, then the hidden parameters ([`KernelAbi`]); every callee
    /// inlined, no `call` but the runtime checks.
    pub function: Function,
    /// Where the hidden parameters sit ([`KernelAbi::wasm_params`] counts
    /// the Wasm parameters and the globals).
    pub abi: KernelAbi,
    /// The kernel's export name, or `kernel_<index>` when it has none.
    pub name: String,
    /// The kernel's Wasm parameters, in order.
    pub params: Vec<WasmType>,
    /// The mutable globals it uses, whose launch values follow the Wasm
    /// parameters.
    pub globals: Vec<KernelGlobal>,
    /// Each thread's shadow-stack window, when the kernel makes stack
    /// frames (`docs/kernels.md`, "Globals and the shadow stack").
    pub stack_window: Option<StackWindow>,
    /// Its size, every callee inlined.
    pub size: KernelSize,
    /// The variant it was translated for.
    pub variant: KernelVariant,
    /// What the aligned copy assumes of the arguments (with the memory's
    /// length within [`ALIGNED_MEMORY_LEN`]); empty when the kernel has
    /// no aligned copy, and then [`BodyVariant::Aligned`] and
    /// [`BodyVariant::General`] translate the same code.
    pub aligned_args: Vec<AlignedArg>,
}

impl TranslatedKernel {
    /// Whether a launch with Wasm arguments `args` (the `i32` ones read
    /// as `u32`, by parameter index: `None` for others) over a memory of
    /// `mem_len` bytes may run the aligned copy
    /// ([`BodyVariant::Aligned`]).
    pub fn admits_aligned(&self, args: impl Fn(usize) -> Option<u32>, mem_len: u64) -> bool {
        admits_aligned(&self.aligned_args, args, mem_len)
    }
}

/// [`TranslatedKernel::admits_aligned`] for a kernel whose aligned copy
/// assumes `aligned_args`.
pub fn admits_aligned(
    aligned_args: &[AlignedArg],
    args: impl Fn(usize) -> Option<u32>,
    mem_len: u64,
) -> bool {
    aligned_args.is_empty()
        || (ALIGNED_MEMORY_LEN.contains(&mem_len)
            && aligned_args
                .iter()
                .all(|a| args(a.param).is_some_and(|v| a.admits(v))))
}

/// Translates function `func_index` (in the Wasm function index space:
/// imports first) of the module `wasm` to the kernel's CLIF.
///
/// The module must be valid (else [`LowerError::Invalid`]), the function
/// one it defines, with `i32`/`i64`/`f32`/`f64` parameters and no results
/// (else [`LowerError::Invalid`]); everything the kernel reaches through
/// direct calls must be supported (else [`LowerError::Unsupported`] naming
/// the first refused operator and its byte offset in `wasm`), and it must
/// fit the host's caps, [`KernelLimits::HOST`] (else
/// [`LowerError::TooLarge`]).
pub fn translate_kernel(wasm: &[u8], func_index: u32) -> Result<TranslatedKernel, LowerError> {
    translate_kernel_within(wasm, func_index, KernelLimits::HOST)
}

/// [`translate_kernel`] for a kernel that must also fit `limits` (a
/// tenant's quota; the host's caps hold either way).
pub fn translate_kernel_within(
    wasm: &[u8],
    func_index: u32,
    limits: KernelLimits,
) -> Result<TranslatedKernel, LowerError> {
    translate_kernel_variant(wasm, func_index, limits, KernelVariant::ANY)
}

/// [`translate_kernel_within`] for the launches `variant` serves.
pub fn translate_kernel_variant(
    wasm: &[u8],
    func_index: u32,
    limits: KernelLimits,
    variant: KernelVariant,
) -> Result<TranslatedKernel, LowerError> {
    let mut module = module::ModuleInfo::parse(wasm)?;
    let params = module.kernel_params(func_index)?;
    let detected = detect::detect(&module, func_index, limits.min(KernelLimits::HOST))?;
    module.validate_bodies(&detected.reached)?;
    let mut globals: Vec<KernelGlobal> = Vec::new();
    for &index in &detected.globals {
        let export = module
            .global_exports
            .iter()
            .find(|(g, _)| *g == index)
            .map(|(_, name)| String::from(*name));
        match module.globals.get(index as usize) {
            Some(module::GlobalKind::Mutable(Some(ty))) => globals.push(KernelGlobal {
                index,
                ty: *ty,
                export,
                lane: None,
            }),
            Some(module::GlobalKind::MutableV128) => {
                globals.extend((0..4).map(|lane| KernelGlobal {
                    index,
                    ty: WasmType::I32,
                    export: export.clone(),
                    lane: Some(lane),
                }));
            }
            _ => {
                return Err(LowerError::Invalid(alloc::format!(
                    "translator: global {index} is not a mutable numeric global"
                )));
            }
        }
    }
    let (mut function, registers, shared_bounds) = body::translate(
        &module,
        func_index,
        &params,
        &globals,
        detected.stack,
        detected.cooperation,
        variant.grid,
    )?;
    let abi = KernelAbi {
        wasm_params: params.len() + globals.len(),
    };
    let entry = function
        .layout
        .entry_block()
        .ok_or_else(|| LowerError::Invalid(String::from("translator: no entry block")))?;
    let mem_base = function.dfg.block_params(entry)[abi.hidden(KernelAbi::MEM_BASE)];
    let mem_len = function.dfg.block_params(entry)[abi.hidden(KernelAbi::MEM_LEN)];
    let (specialized, aligned_args) = match variant.bodies {
        BodyVariant::General => (None, Vec::new()),
        bodies => {
            let only = bodies == BodyVariant::Aligned;
            match specialize::specialize_for_aligned_arguments(
                &mut function,
                abi.wasm_params,
                mem_base,
                mem_len,
                only,
            ) {
                Some((body, assumed)) => (Some(body), assumed),
                None => (None, Vec::new()),
            }
        }
    };
    // The aligned copy alone: the original body is unreachable.
    straighten::remove_unreachable(&mut function);
    let copy_alone = specialized.is_some() && variant.bodies == BodyVariant::Aligned;
    let most = if copy_alone {
        specialize::BOUNDED_LEN
    } else {
        1 << 32
    };
    limits::clamp_memory_length(&mut function, mem_len, most)
        .ok_or_else(|| LowerError::Invalid(String::from("translator: no entry block")))?;
    let unspecialized: Vec<_> = specialized
        .iter()
        .flatten()
        .copied()
        .filter(|&b| function.layout.is_block_inserted(b))
        .collect();
    align::drop_proven_alignment_tests(&mut function);
    counted::charge_counted_loops(&mut function);
    version::version_loops(&mut function, mem_base, &unspecialized);
    let mut limits = limits::GuestLimits::new(&function, specialized.is_some())
        .ok_or_else(|| LowerError::Invalid(String::from("translator: no entry block")))?;
    merge::merge_bounds_tests(&mut function, shared_bounds.as_ref(), &mut limits);
    align::flag_aligned_accesses(&mut function, mem_base);
    limits::narrow_guest_tests(&mut function, &mut limits);
    guarded::hoist_guarded_stores(&mut function);
    let blocks: Vec<_> = function.layout.blocks().collect();
    version::drop_unused(&mut function, &blocks);
    straighten::straighten(&mut function);
    straighten::remove_unreachable(&mut function);

    #[cfg(debug_assertions)]
    {
        use cranelift_codegen::settings::{self, Flags};
        let flags = Flags::new(settings::builder());
        if let Err(errors) = cranelift_codegen::verifier::verify_function(&function, &flags) {
            panic!("the translator produced invalid CLIF (a translator bug): {errors}\n{function}");
        }
    }

    Ok(TranslatedKernel {
        function,
        abi,
        name: module.kernel_name(func_index),
        params,
        globals,
        stack_window: detected.stack.map(|(global, bytes)| StackWindow {
            global,
            bytes,
            registers,
        }),
        size: detected.size,
        variant,
        aligned_args,
    })
}

/// What the detector says of function `func_index` as (part of) a kernel,
/// without translating it: its size, every callee inlined, or the first
/// refusal ([`LowerError::Unsupported`], or [`LowerError::TooLarge`] past
/// `limits`, which here are not capped by [`KernelLimits::HOST`]). Any
/// signature is measured (a callee need not be a kernel's).
pub fn measure_kernel(
    wasm: &[u8],
    func_index: u32,
    limits: KernelLimits,
) -> Result<KernelSize, LowerError> {
    let module = module::ModuleInfo::parse(wasm)?;
    if module.defined(func_index).is_none() {
        return Err(LowerError::Invalid(alloc::format!(
            "function {func_index} is not one the module defines"
        )));
    }
    Ok(detect::detect(&module, func_index, limits)?.size)
}

/// The function index of the module's function exported as `name`, for
/// [`translate_kernel`] (a guest names its kernel by export). An export
/// that is not a function, or no such export, is [`LowerError::Invalid`].
pub fn function_by_export(wasm: &[u8], name: &str) -> Result<u32, LowerError> {
    let module = module::ModuleInfo::parse(wasm)?;
    module
        .func_exports
        .iter()
        .find(|(_, export)| *export == name)
        .map(|(index, _)| *index)
        .ok_or_else(|| {
            LowerError::Invalid(alloc::format!("the module exports no function `{name}`"))
        })
}

/// The function index in slot `slot` of table 0, for [`translate_kernel`]:
/// a compiled language's function pointer is its table slot (Rust's
/// `f as usize` on wasm32). The table's contents must be fixed when the
/// module is translated (a defined `funcref` table that no operator of the
/// module changes, filled by constant element segments); a slot past the
/// table or a null slot is [`LowerError::Invalid`], and so is a table
/// whose contents are not fixed.
pub fn function_by_table_slot(wasm: &[u8], slot: u32) -> Result<u32, LowerError> {
    let module = module::ModuleInfo::parse(wasm)?;
    let contents = module
        .table_contents(0)
        .map_err(|why| LowerError::Invalid(alloc::format!("no function pointer: {why}")))?;
    match contents.get(slot as usize) {
        Some(Some(func)) => Ok(*func),
        Some(None) => Err(LowerError::Invalid(alloc::format!(
            "slot {slot} of table 0 is null: not a function pointer"
        ))),
        None => Err(LowerError::Invalid(alloc::format!(
            "slot {slot} is past the end of table 0 ({} slots)",
            contents.len()
        ))),
    }
}
