//! The shadow-stack window (`docs/kernels.md`, "Globals and the shadow
//! stack"): the bytes just below the stack pointer's launch value that are
//! each kernel thread's own, and how loads, stores and bulk operations
//! reach them. A small window lives in registers (variables, one per 32-bit
//! word) once a first translation has shown which accesses are frame
//! accesses at constant offsets; a larger one in a stack slot (PTX local
//! memory, the native stack on the CPU). This file owns nothing else of
//! the translation.

use alloc::vec::Vec;

use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::types::{F32, F64, I32, I64};
use cranelift_codegen::ir::{
    Block, Endianness, Function, Inst, InstBuilder, MemFlagsData, Opcode, StackSlot, StackSlotData,
    StackSlotKind, Type, Value,
};
use cranelift_frontend::{FunctionBuilder, Variable};

use super::{Load, Store, Translator, emit_load, emit_store, internal};
use crate::lower::LowerError;

/// Windows up to this many bytes live in registers (when the frame
/// accesses allow, see [`promotable`]): 32 words. Larger frames stay in
/// the stack slot, where a dynamically indexed array would be anyway.
pub(super) const PROMOTED_WINDOW: u64 = 128;

/// The most words a promoted window may spill and reload, summed over its
/// kernel's accesses that are not at a constant frame offset (each spills
/// the window, a store also reloads it): bounds the code the device's JIT
/// sees. At 2^14 a kernel at the host's caps with a 32-byte window (990
/// run-time loads) took ptxas 29 s, against 12 s with the window in the
/// slot; 2^11 keeps such kernels in the slot and still promotes every
/// benchmark and example kernel (`gather_frame`: 65 run-time accesses,
/// 1,040 words).
const SPILL_BUDGET: u64 = 1 << 11;

/// Windows up to this many bytes are zeroed by straight-line stores.
const UNROLLED_ZEROING: u64 = 256;

/// The shadow-stack window: the `bytes` below the stack pointer's launch
/// value are the thread's own, zeroed at the start of each virtual block
/// (each of the thread's independent calls of the kernel).
pub(super) struct Window {
    /// The stack pointer's global index.
    pub(super) sp: u32,
    pub(super) bytes: u64,
    /// The slot: the window itself, or (promoted) where it is spilled for
    /// an access at an address known only at run time.
    slot: StackSlot,
    /// The slot's address.
    base: Value,
    /// The window's lowest Wasm address (`i64`, the stack pointer's launch
    /// value minus `bytes`; below 0 when the stack pointer starts low).
    pub(super) low: Value,
    /// `low` as an `i32` (the launch rule puts it in `[0, 2^32)`).
    low32: Value,
    /// The stack pointer's launch value (`i32`, a kernel parameter).
    sp_launch: Value,
    /// Promoted: the window's 32-bit words (little endian), and where each
    /// load or store of the kernel goes, in translation order.
    promoted: Option<Promoted>,
}

struct Promoted {
    words: Vec<Variable>,
    plan: Vec<Placement>,
    /// The loads and stores translated so far.
    next: usize,
}

/// Where one load or store of the kernel goes, as the first translation
/// found it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Placement {
    /// At this byte offset of the window, on every execution.
    Frame(u32),
    /// Not known before it runs: the window or the guest's memory.
    Dynamic,
    /// Not known before it runs, and computed from the stack pointer (a
    /// frame array indexed at run time, most likely): such a window stays
    /// in the slot, where every access is a plain local one.
    StackDynamic,
}

/// A load's or store's address choice between the window and the guest's
/// memory (a `select`), for [`resolve_frame_accesses`]: the Wasm address
/// is `index + offset`.
pub(super) struct WindowAccess {
    pub(super) select: Inst,
    /// Its bounds check (a `trapnz`), which a frame access does not need.
    pub(super) check: Inst,
    /// The Wasm `i32` address operand.
    pub(super) index: Value,
    pub(super) offset: u64,
    pub(super) bytes: u32,
}

/// Makes the thread's stack window: the slot and its bounds, emitted in
/// the entry block so they dominate the whole kernel. `plan` (from a first
/// translation, [`resolve_frame_accesses`]) promotes it to registers.
pub(super) fn stack_window(
    b: &mut FunctionBuilder<'_>,
    sp: u32,
    bytes: u64,
    sp_launch: Value,
    plan: Option<&[Placement]>,
) -> Window {
    let size = u32::try_from(bytes).unwrap_or(u32::MAX);
    let slot = b.create_sized_stack_slot(StackSlotData::new(StackSlotKind::ExplicitSlot, size, 4));
    let base = b.ins().stack_addr(I64, slot, 0);
    let wide = b.ins().uextend(I64, sp_launch);
    let low = b.ins().iadd_imm_s(wide, -(bytes.cast_signed()));
    let low32 = b.ins().ireduce(I32, low);
    let promoted = plan.map(|plan| Promoted {
        words: (0..bytes / 4).map(|_| b.declare_var(I32)).collect(),
        plan: plan.to_vec(),
        next: 0,
    });
    Window {
        sp,
        bytes,
        slot,
        base,
        low,
        low32,
        sp_launch,
        promoted,
    }
}

/// Whether a window of `bytes` whose loads and stores a first translation
/// placed as `plan`, and which `spill_sites` other operations reach by
/// address, is worth promoting to registers: small enough, and the spills
/// those accesses need stay within [`SPILL_BUDGET`].
pub(super) fn promotable(bytes: u64, plan: &[Placement], spill_sites: usize) -> bool {
    let dynamic = plan.iter().filter(|p| **p == Placement::Dynamic).count();
    let spills = (dynamic as u64).saturating_add(spill_sites as u64);
    bytes <= PROMOTED_WINDOW
        && !plan.contains(&Placement::StackDynamic)
        && spills.saturating_mul(2 * bytes / 4) <= SPILL_BUDGET
}

fn flags() -> MemFlagsData {
    MemFlagsData::new().with_endianness(Endianness::Little)
}

impl Translator<'_, '_, '_> {
    /// Zeroes the window: at the start of each virtual block, so no call of
    /// the kernel sees another's frames.
    pub(super) fn reset_window(&mut self) {
        let Some(w) = &self.window else { return };
        let (slot, base, bytes) = (w.slot, w.base, w.bytes);
        let b = &mut self.builder;
        if let Some(p) = &w.promoted {
            let zero = b.ins().iconst(I32, 0);
            for &word in &p.words {
                b.def_var(word, zero);
            }
            return;
        }
        let zero = b.ins().iconst(I64, 0);
        if bytes <= UNROLLED_ZEROING {
            // Stores at constant offsets, 8 bytes each.
            for at in (0..bytes).step_by(8) {
                let addr = b
                    .ins()
                    .stack_addr(I64, slot, i32::try_from(at).unwrap_or(0));
                b.ins().store(flags(), zero, addr, 0);
            }
        } else {
            let zero_loop = b.create_block();
            let at = b.append_block_param(zero_loop, I64);
            let done = b.create_block();
            b.ins().jump(zero_loop, &[zero.into()]);
            b.switch_to_block(zero_loop);
            let addr = b.ins().iadd(base, at);
            b.ins().store(flags(), zero, addr, 0);
            let next = b.ins().iadd_imm_s(at, 8);
            let more = b
                .ins()
                .icmp_imm_u(IntCC::UnsignedLessThan, next, bytes.cast_signed());
            b.ins().brif(more, zero_loop, &[next.into()], done, &[]);
            b.seal_block(zero_loop);
            b.seal_block(done);
            b.switch_to_block(done);
        }
    }

    /// Whether the window lives in registers.
    pub(super) fn window_promoted(&self) -> bool {
        self.window.as_ref().is_some_and(|w| w.promoted.is_some())
    }

    /// The host address of `bytes` bytes at Wasm address `ea` (`i64`,
    /// already bounds-checked): in the thread's stack window when they lie
    /// wholly inside it, else in the guest's memory. A promoted window must
    /// be spilled around such accesses ([`Self::spill_window`]).
    pub(super) fn host_address(&mut self, ea: Value, bytes: u32) -> Value {
        let shared = self.builder.ins().iadd(self.hidden.mem_base, ea);
        let Some(w) = &self.window else {
            return shared;
        };
        let (base, low, last) = (w.base, w.low, w.bytes - u64::from(bytes));
        let ins = self.builder.ins();
        let into = ins.isub(ea, low);
        let inside =
            self.builder
                .ins()
                .icmp_imm_u(IntCC::UnsignedLessThanOrEqual, into, last.cast_signed());
        let private = self.builder.ins().iadd(base, into);
        self.builder.ins().select(inside, private, shared)
    }

    /// Writes a promoted window's words to the slot, so that accesses by
    /// address ([`Self::host_address`]) see them. Nothing for a window in
    /// the slot.
    pub(super) fn spill_window(&mut self) {
        self.spill_sites += 1;
        for (word, addr) in self.slot_words() {
            let value = self.builder.use_var(word);
            self.builder.ins().store(flags(), value, addr, 0);
        }
    }

    /// Reads a promoted window's words back from the slot after accesses by
    /// address may have written it.
    pub(super) fn reload_window(&mut self) {
        for (word, addr) in self.slot_words() {
            let value = self.builder.ins().load(I32, flags(), addr, 0);
            self.builder.def_var(word, value);
        }
    }

    /// A promoted window's words with their addresses in the slot (none for
    /// a window in the slot).
    fn slot_words(&mut self) -> Vec<(Variable, Value)> {
        let Some(Window {
            slot,
            promoted: Some(p),
            ..
        }) = &self.window
        else {
            return Vec::new();
        };
        let (slot, words) = (*slot, p.words.clone());
        words
            .into_iter()
            .enumerate()
            .map(|(k, word)| {
                (
                    word,
                    self.builder.ins().stack_addr(I64, slot, word_offset(k)),
                )
            })
            .collect()
    }

    /// Where the next load or store of a promoted window goes.
    fn next_placement(&mut self) -> Result<Placement, LowerError> {
        let p = self
            .window
            .as_mut()
            .and_then(|w| w.promoted.as_mut())
            .ok_or_else(|| internal("a promoted access without a promoted window"))?;
        let placement = p
            .plan
            .get(p.next)
            .copied()
            .ok_or_else(|| internal("more accesses than the first translation made"))?;
        p.next += 1;
        Ok(placement)
    }

    /// A load of `bytes` bytes at Wasm address `index + offset` with a
    /// promoted window: a frame access (in bounds, see
    /// [`resolve_frame_accesses`]) at a naturally aligned offset reads the
    /// words, at another offset spills the window and reads the slot; any
    /// other access is bounds-checked, reads the guest's memory, and tests
    /// the address at run time (when it lies in the window, the window is
    /// spilled and the slot read instead).
    pub(super) fn promoted_load(
        &mut self,
        index: Value,
        offset: u64,
        bytes: u32,
        kind: Load,
        ty: Type,
    ) -> Result<Value, LowerError> {
        match self.next_placement()? {
            Placement::Frame(at) if at % bytes == 0 => Ok(self.word_load(at, bytes, kind, ty)),
            Placement::Frame(at) => {
                self.spill_window();
                let w = self.window_slot()?;
                let addr = self.builder.ins().stack_addr(I64, w, slot_offset(at));
                Ok(emit_load(&mut self.builder, kind, ty, addr))
            }
            Placement::Dynamic | Placement::StackDynamic => {
                let (ea, _) = self.checked_ea(index, offset, bytes);
                // The guest's memory is read either way (the address is in
                // bounds), and the window's value, when the address lies in
                // it, comes back through a block parameter that the fast
                // edge fills with a constant: nothing waits for the load
                // until its value is used.
                let addr = self.builder.ins().iadd(self.hidden.mem_base, ea);
                let shared = emit_load(&mut self.builder, kind, ty, addr);
                let (inside, into, base) = self.window_test(ea, bytes)?;
                let (slow, join) = (self.slow_block(), self.builder.create_block());
                let private = self.builder.append_block_param(join, ty);
                let none = match ty {
                    F32 => self.builder.ins().f32const(0.0),
                    F64 => self.builder.ins().f64const(0.0),
                    _ => self.builder.ins().iconst(ty, 0),
                };
                self.builder
                    .ins()
                    .brif(inside, slow, &[], join, &[none.into()]);
                self.builder.seal_block(slow);
                self.builder.switch_to_block(slow);
                self.spill_window();
                let addr = self.builder.ins().iadd(base, into);
                let value = emit_load(&mut self.builder, kind, ty, addr);
                self.builder.ins().jump(join, &[value.into()]);
                self.builder.seal_block(join);
                self.builder.switch_to_block(join);
                Ok(self.builder.ins().select(inside, private, shared))
            }
        }
    }

    /// A store of `value` to `bytes` bytes at Wasm address `index +
    /// offset` with a promoted window: as [`Self::promoted_load`], except
    /// that an access at a run-time address branches first (the guest's
    /// memory, or the spilled slot, whose words are then reloaded).
    pub(super) fn promoted_store(
        &mut self,
        index: Value,
        offset: u64,
        bytes: u32,
        kind: Store,
        value: Value,
    ) -> Result<(), LowerError> {
        match self.next_placement()? {
            Placement::Frame(at) if at % bytes == 0 => self.word_store(at, bytes, value),
            Placement::Frame(at) => {
                self.spill_window();
                let w = self.window_slot()?;
                let addr = self.builder.ins().stack_addr(I64, w, slot_offset(at));
                emit_store(&mut self.builder, kind, value, addr);
                self.reload_window();
            }
            Placement::Dynamic | Placement::StackDynamic => {
                let (ea, _) = self.checked_ea(index, offset, bytes);
                let (inside, into, base) = self.window_test(ea, bytes)?;
                let slow = self.slow_block();
                let (fast, join) = (self.builder.create_block(), self.builder.create_block());
                self.builder.ins().brif(inside, slow, &[], fast, &[]);
                self.builder.seal_block(slow);
                self.builder.seal_block(fast);
                self.builder.switch_to_block(fast);
                let addr = self.builder.ins().iadd(self.hidden.mem_base, ea);
                emit_store(&mut self.builder, kind, value, addr);
                self.builder.ins().jump(join, &[]);
                self.builder.switch_to_block(slow);
                self.spill_window();
                let addr = self.builder.ins().iadd(base, into);
                emit_store(&mut self.builder, kind, value, addr);
                self.reload_window();
                self.builder.ins().jump(join, &[]);
                self.builder.seal_block(join);
                self.builder.switch_to_block(join);
            }
        }
        Ok(())
    }

    fn window_slot(&self) -> Result<StackSlot, LowerError> {
        self.window
            .as_ref()
            .map(|w| w.slot)
            .ok_or_else(|| internal("no window"))
    }

    /// A block for the rare path, taken only when an address known at run
    /// time falls in the window: cold, so lowerers put it out of the hot
    /// code's way.
    pub(super) fn slow_block(&mut self) -> Block {
        let slow = self.builder.create_block();
        self.builder.set_cold_block(slow);
        slow
    }

    /// Whether `bytes` bytes at `ea` lie wholly in the window, their
    /// offset in it, and the slot's address. The test is in 32 bits, which
    /// is exact: `ea + bytes <= mem_len <= 2^32` (the
    /// bounds check passed) and `0 <= low < 2^32` (the launch rule), so
    /// `ea - low` wraps only when `ea < low`, to past the window.
    pub(super) fn window_test(
        &mut self,
        ea: Value,
        bytes: u32,
    ) -> Result<(Value, Value, Value), LowerError> {
        let w = self.window.as_ref().ok_or_else(|| internal("no window"))?;
        let (base, low, last) = (w.base, w.low32, w.bytes - u64::from(bytes));
        let ea = self.builder.ins().ireduce(I32, ea);
        let into = self.builder.ins().isub(ea, low);
        let inside =
            self.builder
                .ins()
                .icmp_imm_u(IntCC::UnsignedLessThanOrEqual, into, last.cast_signed());
        let into = self.builder.ins().uextend(I64, into);
        Ok((inside, into, base))
    }

    /// The promoted window's word `k`.
    fn word(&mut self, k: u32) -> Value {
        let var = self.words()[k as usize];
        self.builder.use_var(var)
    }

    fn set_word(&mut self, k: u32, value: Value) {
        let var = self.words()[k as usize];
        self.builder.def_var(var, value);
    }

    fn words(&self) -> &[Variable] {
        self.window
            .as_ref()
            .and_then(|w| w.promoted.as_ref())
            .map_or(&[], |p| &p.words)
    }

    /// A load from the promoted window's words at byte `at` (a multiple
    /// of `bytes`), as the memory would give it (little endian).
    fn word_load(&mut self, at: u32, bytes: u32, kind: Load, ty: Type) -> Value {
        let k = at / 4;
        if bytes == 8 {
            let lo = self.word(k);
            let hi = self.word(k + 1);
            let lo = self.builder.ins().uextend(I64, lo);
            let hi = self.builder.ins().uextend(I64, hi);
            let shift = self.builder.ins().iconst(I64, 32);
            let hi = self.builder.ins().ishl(hi, shift);
            let wide = self.builder.ins().bor(lo, hi);
            return match ty {
                F64 => self.builder.ins().bitcast(F64, MemFlagsData::new(), wide),
                _ => wide,
            };
        }
        let word = self.word(k);
        let narrow = match (bytes, kind) {
            (4, _) => word,
            (_, Load::S8 | Load::S16) => {
                // Move the field to the top, then shift it down with its sign.
                let bits = i64::from(8 * bytes);
                let up = self
                    .builder
                    .ins()
                    .iconst(I32, 32 - bits - i64::from(8 * (at % 4)));
                let top = self.builder.ins().ishl(word, up);
                let down = self.builder.ins().iconst(I32, 32 - bits);
                self.builder.ins().sshr(top, down)
            }
            _ => {
                let shift = self.builder.ins().iconst(I32, i64::from(8 * (at % 4)));
                let field = self.builder.ins().ushr(word, shift);
                let mask = self.builder.ins().iconst(I32, (1i64 << (8 * bytes)) - 1);
                self.builder.ins().band(field, mask)
            }
        };
        match (ty, kind) {
            (F32, _) => self.builder.ins().bitcast(F32, MemFlagsData::new(), narrow),
            (I64, Load::S8 | Load::S16 | Load::S32) => self.builder.ins().sextend(I64, narrow),
            (I64, _) => self.builder.ins().uextend(I64, narrow),
            _ => narrow,
        }
    }

    /// A store of `value`'s low `bytes` bytes to the promoted window's
    /// words at byte `at` (a multiple of `bytes`).
    fn word_store(&mut self, at: u32, bytes: u32, value: Value) {
        let k = at / 4;
        let ty = self.builder.func.dfg.value_type(value);
        let bits = match ty {
            F32 => self.builder.ins().bitcast(I32, MemFlagsData::new(), value),
            F64 => self.builder.ins().bitcast(I64, MemFlagsData::new(), value),
            _ => value,
        };
        if bytes == 8 {
            let lo = self.builder.ins().ireduce(I32, bits);
            let shift = self.builder.ins().iconst(I64, 32);
            let hi = self.builder.ins().ushr(bits, shift);
            let hi = self.builder.ins().ireduce(I32, hi);
            self.set_word(k, lo);
            self.set_word(k + 1, hi);
            return;
        }
        let low = match self.builder.func.dfg.value_type(bits) {
            I64 => self.builder.ins().ireduce(I32, bits),
            _ => bits,
        };
        if bytes == 4 {
            self.set_word(k, low);
            return;
        }
        // Replace the field's bits of the word.
        let shift = i64::from(8 * (at % 4));
        let mask = (1i64 << (8 * bytes)) - 1;
        let old = self.word(k);
        let keep = self
            .builder
            .ins()
            .iconst(I32, i64::from(!((mask << shift) as u32)));
        let kept = self.builder.ins().band(old, keep);
        let field_mask = self.builder.ins().iconst(I32, mask);
        let field = self.builder.ins().band(low, field_mask);
        let amount = self.builder.ins().iconst(I32, shift);
        let field = self.builder.ins().ishl(field, amount);
        let new = self.builder.ins().bor(kept, field);
        self.set_word(k, new);
    }
}

/// Word `k`'s offset in the slot.
fn word_offset(k: usize) -> i32 {
    i32::try_from(4 * k).unwrap_or(i32::MAX)
}

fn slot_offset(at: u32) -> i32 {
    i32::try_from(at).unwrap_or(i32::MAX)
}

/// Places each load and store of a translation with a window in the slot
/// ([`Placement`], in translation order). The frame accesses, whose Wasm
/// address is the stack pointer's launch value plus a constant (`sp0 + k`,
/// through any chain of `i32.add` / `i32.sub` of constants, locals and
/// loop parameters that carry the same value on every edge) and lies
/// wholly in the window, get the slot's address at a constant offset
/// (`stack_addr`) instead of a select between the window and the guest's
/// memory, so the device can keep the frame in local memory without a
/// check; the placements let a second translation keep a small window in
/// registers, and lose their bounds check. Exact because the host launches
/// a kernel with a window only when `bytes <= sp0 <= mem_len`
/// (`docs/kernels.md`): `sp0 + k` never wraps for `-bytes <= k < 0`, and
/// the window lies wholly in the memory, so no frame access can trap.
pub(super) fn resolve_frame_accesses(
    func: &mut Function,
    window: &Window,
    accesses: &[WindowAccess],
) -> Vec<Placement> {
    let known = SpOffsets::of(func, window.sp_launch);
    let w = window.bytes.cast_signed();
    let mut plan = Vec::with_capacity(accesses.len());
    for access in accesses {
        let placed = known.offset(func, access.index).and_then(|k| {
            let at = w + k + access.offset.cast_signed();
            if at < 0 || at > w - i64::from(access.bytes) {
                return None;
            }
            u32::try_from(at).ok()
        });
        match placed {
            Some(at) => {
                func.replace(access.select)
                    .stack_addr(I64, window.slot, slot_offset(at));
                // In bounds: the window lies in the memory.
                func.layout.remove_inst(access.check);
                plan.push(Placement::Frame(at));
            }
            None if known.may_derive_from_sp(func, access.index) => {
                plan.push(Placement::StackDynamic);
            }
            None => plan.push(Placement::Dynamic),
        }
    }
    plan
}

/// What is known of an `i32` value relative to the stack pointer's launch
/// value.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum SpOffset {
    /// Not seen yet (block parameters, optimistically).
    Unseen,
    /// `sp0 + k`.
    Known(i64),
    /// Anything else.
    Unknown,
}

/// Block parameters' [`SpOffset`]s, to a fixed point over every edge.
struct SpOffsets {
    sp_launch: Value,
    params: alloc::collections::BTreeMap<Value, SpOffset>,
    /// Every value computed from the stack pointer's launch value, through
    /// any instruction or block parameter.
    from_sp: alloc::collections::BTreeSet<Value>,
}

impl SpOffsets {
    fn of(func: &Function, sp_launch: Value) -> SpOffsets {
        let mut incoming: alloc::collections::BTreeMap<Value, Vec<Value>> =
            alloc::collections::BTreeMap::new();
        for block in func.layout.blocks() {
            let Some(last) = func.layout.last_inst(block) else {
                continue;
            };
            for call in func.dfg.insts[last]
                .branch_destination(&func.dfg.jump_tables, &func.dfg.exception_tables)
            {
                let dest = call.block(&func.dfg.value_lists);
                let params = func.dfg.block_params(dest);
                for (&param, arg) in params.iter().zip(call.args(&func.dfg.value_lists)) {
                    if func.dfg.value_type(param) == I32
                        && let Some(arg) = arg.as_value()
                    {
                        incoming.entry(param).or_default().push(arg);
                    }
                }
            }
        }
        let mut table = SpOffsets {
            sp_launch,
            params: incoming.keys().map(|&p| (p, SpOffset::Unseen)).collect(),
            from_sp: alloc::collections::BTreeSet::new(),
        };
        // Each parameter only moves down (Unseen, Known, Unknown): this ends.
        let mut changed = true;
        while changed {
            changed = false;
            for (param, args) in &incoming {
                let mut meet = SpOffset::Unseen;
                for &arg in args {
                    meet = match (meet, table.state(func, arg, 0)) {
                        (m, SpOffset::Unseen) => m,
                        (SpOffset::Unseen, s) => s,
                        (SpOffset::Known(a), SpOffset::Known(b)) if a == b => meet,
                        _ => SpOffset::Unknown,
                    };
                }
                if table.params.get(param) != Some(&meet) {
                    table.params.insert(*param, meet);
                    changed = true;
                }
            }
        }
        table.from_sp = values_from(func, sp_launch);
        table
    }

    /// Whether `value` may be computed from the stack pointer's launch
    /// value (through any instruction or block parameter). A heuristic for
    /// where to keep the window, never for what an access reads.
    fn may_derive_from_sp(&self, func: &Function, value: Value) -> bool {
        self.from_sp.contains(&func.dfg.resolve_aliases(value))
    }

    /// `value`'s offset from the stack pointer's launch value, if known.
    fn offset(&self, func: &Function, value: Value) -> Option<i64> {
        match self.state(func, value, 0) {
            SpOffset::Known(k) => Some(k),
            _ => None,
        }
    }

    fn state(&self, func: &Function, value: Value, depth: u32) -> SpOffset {
        let value = func.dfg.resolve_aliases(value);
        if value == self.sp_launch {
            return SpOffset::Known(0);
        }
        if depth > 64 {
            return SpOffset::Unknown;
        }
        if let Some(state) = self.params.get(&value) {
            return *state;
        }
        let Some(inst) = func.dfg.value_def(value).inst() else {
            return SpOffset::Unknown;
        };
        let constant = |v: Value| {
            crate::lower::translate::align::constant(func, v).map(|c| i64::from(c as i32))
        };
        let args = func.dfg.inst_args(inst);
        let (sign, base, c) = match (func.dfg.insts[inst].opcode(), args) {
            (Opcode::Iadd, &[a, b]) => match (constant(a), constant(b)) {
                (_, Some(c)) => (1, a, c),
                (Some(c), _) => (1, b, c),
                _ => return SpOffset::Unknown,
            },
            (Opcode::Isub, &[a, b]) => match constant(b) {
                Some(c) => (-1, a, c),
                None => return SpOffset::Unknown,
            },
            _ => return SpOffset::Unknown,
        };
        match self.state(func, base, depth + 1) {
            SpOffset::Known(k) => SpOffset::Known(k + sign * c),
            other => other,
        }
    }
}

/// Every value computed from `root`: one pass to list each value's users
/// (instruction results, and the block parameters a branch passes it to),
/// then a walk from `root`. Linear in the function's size, whatever the
/// number of accesses asked about.
fn values_from(func: &Function, root: Value) -> alloc::collections::BTreeSet<Value> {
    let mut users: alloc::collections::BTreeMap<Value, Vec<Value>> =
        alloc::collections::BTreeMap::new();
    for block in func.layout.blocks() {
        for inst in func.layout.block_insts(block) {
            let results = func.dfg.inst_results(inst);
            for &arg in func.dfg.inst_args(inst) {
                let arg = func.dfg.resolve_aliases(arg);
                users.entry(arg).or_default().extend_from_slice(results);
            }
            for call in func.dfg.insts[inst]
                .branch_destination(&func.dfg.jump_tables, &func.dfg.exception_tables)
            {
                let params = func.dfg.block_params(call.block(&func.dfg.value_lists));
                for (&param, arg) in params.iter().zip(call.args(&func.dfg.value_lists)) {
                    if let Some(arg) = arg.as_value() {
                        let arg = func.dfg.resolve_aliases(arg);
                        users.entry(arg).or_default().push(param);
                    }
                }
            }
        }
    }
    let mut from = alloc::collections::BTreeSet::new();
    let mut work = alloc::vec![func.dfg.resolve_aliases(root)];
    while let Some(v) = work.pop() {
        if from.insert(v)
            && let Some(next) = users.get(&v)
        {
            work.extend(next.iter().copied());
        }
    }
    from
}
