//! Atomics (`docs/kernels.md`, "Atomics"): the Wasm threads operators on
//! the guest's memory and the atomic intrinsics of the Rust SDK
//! ([`AtomicIntrinsic`]). Every one traps `HeapMisaligned` unless its
//! address is a multiple of its size, then is bounds-checked; one whose
//! address lies in the thread's stack window is a plain read-modify-write of
//! the thread's own copy; the rest are CLIF atomics on the guest's memory
//! (32 and 64 bits) or compare-and-swap loops on the containing 32-bit word
//! (8 and 16 bits, `f32` add). The threads operators are sequentially
//! consistent (a `fence` before and after), the intrinsics relaxed.

use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::types::{F32, I32, I64};
use cranelift_codegen::ir::{AtomicRmwOp, Endianness, InstBuilder, MemFlagsData, Type, Value};
use wasmparser::{MemArg, Operator};

use super::{FuncState, Load, Store, Translator, emit_load, emit_store, internal};
use crate::lower::atomic::{AtomicIntrinsic, AtomicOp};
use crate::lower::{KernelTrap, LowerError, RuntimeCheck};

/// One atomic access: what it does, on how many bytes, with operands and
/// result of which type (`I32` or `I64`; `F32` for the float add).
#[derive(Clone, Copy, Debug)]
pub(in crate::lower::translate) struct Atomic {
    pub(in crate::lower::translate) op: AtomicOp,
    pub(in crate::lower::translate) bytes: u32,
    pub(in crate::lower::translate) ty: Type,
    /// Sequentially consistent (the Wasm operators), else relaxed.
    pub(in crate::lower::translate) fenced: bool,
}

/// The threads proposal's operators on memory, one row each; `None` for
/// every other operator (and for `wait`, `notify` and `fence`, which are not
/// accesses).
pub(in crate::lower::translate) fn atomic_access<'o>(
    op: &'o Operator<'_>,
) -> Option<(&'o MemArg, Atomic)> {
    use AtomicOp::{Cmpxchg, Load as L, Rmw, Store as S};
    use AtomicRmwOp::{Add, And, Or, Sub, Xchg, Xor};
    use Operator as O;
    let (memarg, op, bytes, ty) = match op {
        O::I32AtomicLoad { memarg } => (memarg, L, 4, I32),
        O::I64AtomicLoad { memarg } => (memarg, L, 8, I64),
        O::I32AtomicLoad8U { memarg } => (memarg, L, 1, I32),
        O::I32AtomicLoad16U { memarg } => (memarg, L, 2, I32),
        O::I64AtomicLoad8U { memarg } => (memarg, L, 1, I64),
        O::I64AtomicLoad16U { memarg } => (memarg, L, 2, I64),
        O::I64AtomicLoad32U { memarg } => (memarg, L, 4, I64),
        O::I32AtomicStore { memarg } => (memarg, S, 4, I32),
        O::I64AtomicStore { memarg } => (memarg, S, 8, I64),
        O::I32AtomicStore8 { memarg } => (memarg, S, 1, I32),
        O::I32AtomicStore16 { memarg } => (memarg, S, 2, I32),
        O::I64AtomicStore8 { memarg } => (memarg, S, 1, I64),
        O::I64AtomicStore16 { memarg } => (memarg, S, 2, I64),
        O::I64AtomicStore32 { memarg } => (memarg, S, 4, I64),
        O::I32AtomicRmwAdd { memarg } => (memarg, Rmw(Add), 4, I32),
        O::I64AtomicRmwAdd { memarg } => (memarg, Rmw(Add), 8, I64),
        O::I32AtomicRmw8AddU { memarg } => (memarg, Rmw(Add), 1, I32),
        O::I32AtomicRmw16AddU { memarg } => (memarg, Rmw(Add), 2, I32),
        O::I64AtomicRmw8AddU { memarg } => (memarg, Rmw(Add), 1, I64),
        O::I64AtomicRmw16AddU { memarg } => (memarg, Rmw(Add), 2, I64),
        O::I64AtomicRmw32AddU { memarg } => (memarg, Rmw(Add), 4, I64),
        O::I32AtomicRmwSub { memarg } => (memarg, Rmw(Sub), 4, I32),
        O::I64AtomicRmwSub { memarg } => (memarg, Rmw(Sub), 8, I64),
        O::I32AtomicRmw8SubU { memarg } => (memarg, Rmw(Sub), 1, I32),
        O::I32AtomicRmw16SubU { memarg } => (memarg, Rmw(Sub), 2, I32),
        O::I64AtomicRmw8SubU { memarg } => (memarg, Rmw(Sub), 1, I64),
        O::I64AtomicRmw16SubU { memarg } => (memarg, Rmw(Sub), 2, I64),
        O::I64AtomicRmw32SubU { memarg } => (memarg, Rmw(Sub), 4, I64),
        O::I32AtomicRmwAnd { memarg } => (memarg, Rmw(And), 4, I32),
        O::I64AtomicRmwAnd { memarg } => (memarg, Rmw(And), 8, I64),
        O::I32AtomicRmw8AndU { memarg } => (memarg, Rmw(And), 1, I32),
        O::I32AtomicRmw16AndU { memarg } => (memarg, Rmw(And), 2, I32),
        O::I64AtomicRmw8AndU { memarg } => (memarg, Rmw(And), 1, I64),
        O::I64AtomicRmw16AndU { memarg } => (memarg, Rmw(And), 2, I64),
        O::I64AtomicRmw32AndU { memarg } => (memarg, Rmw(And), 4, I64),
        O::I32AtomicRmwOr { memarg } => (memarg, Rmw(Or), 4, I32),
        O::I64AtomicRmwOr { memarg } => (memarg, Rmw(Or), 8, I64),
        O::I32AtomicRmw8OrU { memarg } => (memarg, Rmw(Or), 1, I32),
        O::I32AtomicRmw16OrU { memarg } => (memarg, Rmw(Or), 2, I32),
        O::I64AtomicRmw8OrU { memarg } => (memarg, Rmw(Or), 1, I64),
        O::I64AtomicRmw16OrU { memarg } => (memarg, Rmw(Or), 2, I64),
        O::I64AtomicRmw32OrU { memarg } => (memarg, Rmw(Or), 4, I64),
        O::I32AtomicRmwXor { memarg } => (memarg, Rmw(Xor), 4, I32),
        O::I64AtomicRmwXor { memarg } => (memarg, Rmw(Xor), 8, I64),
        O::I32AtomicRmw8XorU { memarg } => (memarg, Rmw(Xor), 1, I32),
        O::I32AtomicRmw16XorU { memarg } => (memarg, Rmw(Xor), 2, I32),
        O::I64AtomicRmw8XorU { memarg } => (memarg, Rmw(Xor), 1, I64),
        O::I64AtomicRmw16XorU { memarg } => (memarg, Rmw(Xor), 2, I64),
        O::I64AtomicRmw32XorU { memarg } => (memarg, Rmw(Xor), 4, I64),
        O::I32AtomicRmwXchg { memarg } => (memarg, Rmw(Xchg), 4, I32),
        O::I64AtomicRmwXchg { memarg } => (memarg, Rmw(Xchg), 8, I64),
        O::I32AtomicRmw8XchgU { memarg } => (memarg, Rmw(Xchg), 1, I32),
        O::I32AtomicRmw16XchgU { memarg } => (memarg, Rmw(Xchg), 2, I32),
        O::I64AtomicRmw8XchgU { memarg } => (memarg, Rmw(Xchg), 1, I64),
        O::I64AtomicRmw16XchgU { memarg } => (memarg, Rmw(Xchg), 2, I64),
        O::I64AtomicRmw32XchgU { memarg } => (memarg, Rmw(Xchg), 4, I64),
        O::I32AtomicRmwCmpxchg { memarg } => (memarg, Cmpxchg, 4, I32),
        O::I64AtomicRmwCmpxchg { memarg } => (memarg, Cmpxchg, 8, I64),
        O::I32AtomicRmw8CmpxchgU { memarg } => (memarg, Cmpxchg, 1, I32),
        O::I32AtomicRmw16CmpxchgU { memarg } => (memarg, Cmpxchg, 2, I32),
        O::I64AtomicRmw8CmpxchgU { memarg } => (memarg, Cmpxchg, 1, I64),
        O::I64AtomicRmw16CmpxchgU { memarg } => (memarg, Cmpxchg, 2, I64),
        O::I64AtomicRmw32CmpxchgU { memarg } => (memarg, Cmpxchg, 4, I64),
        _ => return None,
    };
    Some((
        memarg,
        Atomic {
            op,
            bytes,
            ty,
            fenced: true,
        },
    ))
}

/// The atomics' flags: their address was checked (in bounds, aligned)
/// before them, so they cannot trap.
fn flags() -> MemFlagsData {
    MemFlagsData::trusted().with_endianness(Endianness::Little)
}

/// The load and store kinds of an access of `bytes` bytes to `ty`.
fn kinds(bytes: u32, ty: Type) -> (Load, Store) {
    match bytes {
        1 => (Load::U8, Store::Low8),
        2 => (Load::U16, Store::Low16),
        4 if ty == I64 => (Load::U32, Store::Low32),
        _ => (Load::Full, Store::Full),
    }
}

impl Translator<'_, '_, '_> {
    /// A threads operator: pops its operands (the address below them),
    /// pushes its result.
    pub(super) fn atomic(
        &mut self,
        st: &mut FuncState,
        memarg: &MemArg,
        atomic: Atomic,
    ) -> Result<(), LowerError> {
        let operands = match atomic.op {
            AtomicOp::Load => 0,
            AtomicOp::Cmpxchg => 2,
            _ => 1,
        };
        let operands = st.pop_n(operands)?;
        let index = st.pop()?;
        if let Some(result) = self.atomic_at(index, memarg.offset, atomic, &operands)? {
            st.stack.push(result);
        }
        Ok(())
    }

    /// `atomic.fence`.
    pub(super) fn atomic_fence(&mut self) {
        self.builder.ins().fence();
    }

    /// An atomic intrinsic: pops its arguments, pushes the old value.
    pub(super) fn atomic_intrinsic(
        &mut self,
        st: &mut FuncState,
        which: AtomicIntrinsic,
    ) -> Result<(), LowerError> {
        let args = st.pop_n(which.params().count())?;
        let (&index, operands) = args
            .split_first()
            .ok_or_else(|| internal("an atomic intrinsic without an address"))?;
        let ty = which.value_type().clif_type();
        let atomic = Atomic {
            op: which.op(),
            bytes: ty.bytes(),
            ty,
            fenced: false,
        };
        let result = self
            .atomic_at(index, 0, atomic, operands)?
            .ok_or_else(|| internal("an atomic intrinsic without a result"))?;
        st.stack.push(result);
        Ok(())
    }

    /// The access at Wasm address `index + offset`: checks, then the
    /// window's plain access or the guest memory's atomic one.
    fn atomic_at(
        &mut self,
        index: Value,
        offset: u64,
        atomic: Atomic,
        operands: &[Value],
    ) -> Result<Option<Value>, LowerError> {
        // Alignment first, then bounds: wasmtime's order (an address that
        // is both misaligned and out of bounds traps as misaligned).
        let ea = self.effective_address(index, offset);
        if atomic.bytes > 1 {
            let low = self
                .builder
                .ins()
                .band_imm_s(ea, i64::from(atomic.bytes - 1));
            let misaligned = self.builder.ins().icmp_imm_u(IntCC::NotEqual, low, 0);
            self.builder
                .ins()
                .trapnz(misaligned, KernelTrap::HeapMisaligned.trap_code());
        }
        self.bounds_check(ea, atomic.bytes);
        if atomic.fenced {
            self.builder.ins().fence();
        }
        let result_type = (atomic.op != AtomicOp::Store).then_some(atomic.ty);
        let result = if self.window.is_some() {
            let (inside, _, _) = self.window_test(ea, atomic.bytes)?;
            let private = self.slow_block();
            let shared = self.builder.create_block();
            let join = self.builder.create_block();
            let joined = result_type.map(|ty| self.builder.append_block_param(join, ty));
            self.builder.ins().brif(inside, private, &[], shared, &[]);
            self.builder.seal_block(private);
            self.builder.seal_block(shared);
            // The thread's own copy: nobody else sees it.
            self.builder.switch_to_block(private);
            self.spill_window();
            let addr = self.host_address(ea, atomic.bytes);
            let value = self.plain_atomic(addr, atomic, operands);
            self.reload_window();
            let args: alloc::vec::Vec<_> = value.iter().map(|&v| v.into()).collect();
            self.builder.ins().jump(join, &args);
            self.builder.switch_to_block(shared);
            let value = self.device_atomic(self.hidden.mem_base, ea, atomic, operands);
            let args: alloc::vec::Vec<_> = value.iter().map(|&v| v.into()).collect();
            self.builder.ins().jump(join, &args);
            self.builder.seal_block(join);
            self.builder.switch_to_block(join);
            joined
        } else {
            self.device_atomic(self.hidden.mem_base, ea, atomic, operands)
        };
        if atomic.fenced {
            self.builder.ins().fence();
        }
        Ok(result)
    }

    /// The atomic's effect by plain accesses at host address `addr` (the
    /// thread's window): the old value, zero-extended.
    fn plain_atomic(&mut self, addr: Value, atomic: Atomic, operands: &[Value]) -> Option<Value> {
        let (load, store) = kinds(atomic.bytes, atomic.ty);
        if atomic.op == AtomicOp::Store {
            emit_store(&mut self.builder, store, operands[0], addr);
            return None;
        }
        let old = emit_load(&mut self.builder, load, atomic.ty, addr);
        if atomic.op == AtomicOp::Load {
            return Some(old);
        }
        let new = self.new_value(atomic, old, operands);
        emit_store(&mut self.builder, store, new, addr);
        Some(old)
    }

    /// The atomic at offset `ea` (checked) of the memory at `base` (the
    /// guest's memory, or the block's shared memory).
    pub(super) fn device_atomic(
        &mut self,
        base: Value,
        ea: Value,
        atomic: Atomic,
        operands: &[Value],
    ) -> Option<Value> {
        if atomic.op == AtomicOp::FloatAdd {
            // The device's own float atomic (a runtime call: CLIF has none),
            // which flushes subnormals in the guest's memory only.
            let global = i64::from(base == self.hidden.mem_base);
            let global = self.builder.ins().iconst(I32, global);
            let addr = self.builder.ins().iadd(base, ea);
            return self.runtime_call(RuntimeCheck::AtomicAddF32, &[addr, operands[0], global]);
        }
        let word = atomic.ty == I32 || atomic.ty == I64;
        if word && atomic.bytes == atomic.ty.bytes() {
            let addr = self.builder.ins().iadd(base, ea);
            return self.clif_atomic(addr, atomic.ty, atomic.op, operands);
        }
        if atomic.ty == I64 && atomic.bytes == 4 {
            // The 32-bit forms of `i64`: the `i32` atomic, zero-extended.
            let addr = self.builder.ins().iadd(base, ea);
            let narrow: alloc::vec::Vec<Value> = operands
                .iter()
                .map(|&v| self.builder.ins().ireduce(I32, v))
                .collect();
            let old = self.clif_atomic(addr, I32, atomic.op, &narrow)?;
            return Some(self.builder.ins().uextend(I64, old));
        }
        let old = self.word_cas_loop(base, ea, atomic, operands);
        (atomic.op != AtomicOp::Store).then_some(old)
    }

    /// A CLIF atomic of type `ty` (`I32`/`I64`) at host address `addr`.
    fn clif_atomic(
        &mut self,
        addr: Value,
        ty: Type,
        op: AtomicOp,
        operands: &[Value],
    ) -> Option<Value> {
        let ins = self.builder.ins();
        match op {
            AtomicOp::Load => Some(ins.atomic_load(ty, flags(), addr)),
            AtomicOp::Store => {
                ins.atomic_store(flags(), operands[0], addr);
                None
            }
            AtomicOp::Rmw(op) => Some(ins.atomic_rmw(ty, flags(), op, addr, operands[0])),
            AtomicOp::Cmpxchg => Some(ins.atomic_cas(flags(), addr, operands[0], operands[1])),
            AtomicOp::FloatAdd => None,
        }
    }

    /// An atomic of 1 or 2 bytes, or the `f32` add, as a compare-and-swap
    /// loop on the aligned 32-bit word that holds it (`base` is 4-aligned:
    /// a device allocation, or shared memory). Each retry checks the
    /// launch's time.
    fn word_cas_loop(
        &mut self,
        base: Value,
        ea: Value,
        atomic: Atomic,
        operands: &[Value],
    ) -> Value {
        let b = &mut self.builder;
        let word_ea = b.ins().band_imm_s(ea, -4);
        let addr = b.ins().iadd(base, word_ea);
        let byte = b.ins().band_imm_s(ea, 3);
        let shift = b.ins().ishl_imm_u(byte, 3);
        let shift = b.ins().ireduce(I32, shift);
        let bits = 8 * atomic.bytes;
        let field_mask = if bits >= 32 { -1 } else { (1i64 << bits) - 1 };
        let field = b.ins().iconst(I32, field_mask);
        let mask = b.ins().ishl(field, shift);
        let keep = b.ins().bnot(mask);
        let first = b.ins().atomic_load(I32, flags(), addr);
        if atomic.op == AtomicOp::Load {
            let value = b.ins().ushr(first, shift);
            let value = b.ins().band(value, field);
            return self.widen(value, atomic.ty);
        }
        let header = b.create_block();
        let old_word = b.append_block_param(header, I32);
        let done = b.create_block();
        let result = b.append_block_param(done, atomic.ty);
        b.ins().jump(header, &[first.into()]);
        b.switch_to_block(header);
        self.time_check();
        let b = &mut self.builder;
        let old = b.ins().ushr(old_word, shift);
        let old = b.ins().band(old, field);
        let old = self.widen(old, atomic.ty);
        let new = self.new_value(atomic, old, operands);
        let b = &mut self.builder;
        let new_bits = match atomic.ty {
            F32 => b.ins().bitcast(I32, MemFlagsData::new(), new),
            I64 => b.ins().ireduce(I32, new),
            _ => new,
        };
        let new_field = b.ins().band(new_bits, field);
        let new_field = b.ins().ishl(new_field, shift);
        let kept = b.ins().band(old_word, keep);
        let new_word = b.ins().bor(kept, new_field);
        let seen = b.ins().atomic_cas(flags(), addr, old_word, new_word);
        let swapped = b.ins().icmp(IntCC::Equal, seen, old_word);
        b.ins()
            .brif(swapped, done, &[old.into()], header, &[seen.into()]);
        b.seal_block(header);
        b.seal_block(done);
        b.switch_to_block(done);
        result
    }

    /// The value the atomic leaves in memory where `old` was.
    fn new_value(&mut self, atomic: Atomic, old: Value, operands: &[Value]) -> Value {
        match atomic.op {
            AtomicOp::Load => old,
            AtomicOp::Store => operands[0],
            AtomicOp::Rmw(op) => self.combine(op, old, operands[0]),
            AtomicOp::FloatAdd => self.float_add(old, operands[0]),
            AtomicOp::Cmpxchg => {
                let expected = self.wrap(operands[0], atomic);
                let equal = self.builder.ins().icmp(IntCC::Equal, old, expected);
                self.builder.ins().select(equal, operands[1], old)
            }
        }
    }

    /// A 32-bit field value (zero-extended) as `ty`.
    fn widen(&mut self, value: Value, ty: Type) -> Value {
        match ty {
            I64 => self.builder.ins().uextend(I64, value),
            F32 => self.builder.ins().bitcast(F32, MemFlagsData::new(), value),
            _ => value,
        }
    }

    /// `expected` wrapped to the access's width, as Wasm compares it.
    fn wrap(&mut self, expected: Value, atomic: Atomic) -> Value {
        if atomic.bytes >= atomic.ty.bytes() {
            return expected;
        }
        let mask = (1i64 << (8 * atomic.bytes)) - 1;
        self.builder.ins().band_imm_s(expected, mask)
    }

    /// `old op v`.
    fn combine(&mut self, op: AtomicRmwOp, old: Value, v: Value) -> Value {
        let ins = self.builder.ins();
        match op {
            AtomicRmwOp::Add => ins.iadd(old, v),
            AtomicRmwOp::Sub => ins.isub(old, v),
            AtomicRmwOp::And => ins.band(old, v),
            AtomicRmwOp::Or => ins.bor(old, v),
            AtomicRmwOp::Xor => ins.bxor(old, v),
            AtomicRmwOp::Smin => ins.smin(old, v),
            AtomicRmwOp::Smax => ins.smax(old, v),
            AtomicRmwOp::Umin => ins.umin(old, v),
            AtomicRmwOp::Umax => ins.umax(old, v),
            AtomicRmwOp::Xchg => v,
            AtomicRmwOp::Nand => {
                let and = ins.band(old, v);
                self.builder.ins().bnot(and)
            }
        }
    }

    /// `old + v` as the float atomic computes it
    /// ([`crate::lower::atomic::add_f32_bits`]: Wasm's `f32.add` with
    /// subnormal inputs and result flushed to zero), for an atomic on the
    /// thread's own stack window.
    fn float_add(&mut self, old: Value, v: Value) -> Value {
        let old = self.flush_subnormal(old);
        let v = self.flush_subnormal(v);
        let sum = match super::binary_op(&Operator::F32Add) {
            Some(emit) => emit(&mut self.builder, old, v),
            None => self.builder.ins().fadd(old, v),
        };
        self.flush_subnormal(sum)
    }

    /// `x` (`f32`), a subnormal replaced by zero of its sign.
    fn flush_subnormal(&mut self, x: Value) -> Value {
        let b = &mut self.builder;
        let bits = b.ins().bitcast(I32, MemFlagsData::new(), x);
        let exponent = b.ins().band_imm_s(bits, 0x7f80_0000);
        let subnormal = b.ins().icmp_imm_u(IntCC::Equal, exponent, 0);
        let sign = b.ins().band_imm_s(bits, i64::from(0x8000_0000u32));
        let flushed = b.ins().select(subnormal, sign, bits);
        b.ins().bitcast(F32, MemFlagsData::new(), flushed)
    }
}
