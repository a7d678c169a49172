//! The block's cooperative intrinsics (`docs/kernels.md`, "The GPU
//! programming model"; [`CoopIntrinsic`]): shared-memory accesses become a
//! checked offset added to the block's shared base (alignment, then
//! bounds: `HeapMisaligned`, `HeapOutOfBounds`) and an ordinary or atomic
//! access; barriers, lane ids, shuffles and votes become runtime calls
//! ([`RuntimeCheck`]) that each lowerer implements, a shuffle or vote
//! carrying its call site's number (the CPU target groups a warp's lanes
//! by it).

use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::types::{F32, I32, I64};
use cranelift_codegen::ir::{Endianness, InstBuilder, MemFlagsData, Value};

use super::atomic::Atomic;
use super::{FuncState, Translator, internal};
use crate::lower::cooperative::{CoopIntrinsic, ShuffleMode, Vote};
use crate::lower::translate::WasmType;
use crate::lower::{KernelTrap, LowerError, RuntimeCheck};

impl Translator<'_, '_, '_> {
    /// Calls runtime check `check` with `args`; its result, if it has one.
    pub(super) fn runtime_call(&mut self, check: RuntimeCheck, args: &[Value]) -> Option<Value> {
        let call = self
            .builder
            .ins()
            .call(self.hidden.checks[check as usize], args);
        self.builder.inst_results(call).first().copied()
    }

    /// A cooperative intrinsic: pops its arguments, pushes its result.
    pub(super) fn coop_intrinsic(
        &mut self,
        st: &mut FuncState,
        which: CoopIntrinsic,
    ) -> Result<(), LowerError> {
        let args = st.pop_n(which.params().len())?;
        let result = match which {
            CoopIntrinsic::SharedSize => {
                let size = self.shared()?.size;
                Some(self.builder.ins().ireduce(I32, size))
            }
            CoopIntrinsic::SharedLoad(ty) => {
                let ty = ty.clif_type();
                let addr = self.shared_address(args[0], ty.bytes())?;
                Some(self.builder.ins().load(ty, flags(), addr, 0))
            }
            CoopIntrinsic::SharedStore(ty) => {
                let addr = self.shared_address(args[0], ty.clif_type().bytes())?;
                self.builder.ins().store(flags(), args[1], addr, 0);
                None
            }
            CoopIntrinsic::SharedAtomic(a) => {
                let ty = a.value_type().clif_type();
                let atomic = Atomic {
                    op: a.op(),
                    bytes: ty.bytes(),
                    ty,
                    fenced: false,
                };
                let ea = self.shared_offset(args[0], ty.bytes())?;
                let base = self.shared()?.base;
                let old = self
                    .device_atomic(base, ea, atomic, &args[1..])
                    .ok_or_else(|| internal("a shared atomic without a result"))?;
                Some(old)
            }
            CoopIntrinsic::Barrier => {
                self.runtime_call(RuntimeCheck::Barrier, &[]);
                None
            }
            CoopIntrinsic::LaneId => self.runtime_call(RuntimeCheck::LaneId, &[]),
            CoopIntrinsic::WarpSize => Some(self.builder.ins().iconst(I32, 32)),
            CoopIntrinsic::Shuffle(mode, ty) => {
                let check = match mode {
                    ShuffleMode::Idx => RuntimeCheck::ShflIdx,
                    ShuffleMode::Up => RuntimeCheck::ShflUp,
                    ShuffleMode::Down => RuntimeCheck::ShflDown,
                    ShuffleMode::Xor => RuntimeCheck::ShflXor,
                };
                let float = ty == WasmType::F32;
                let v = if float {
                    self.builder
                        .ins()
                        .bitcast(I32, MemFlagsData::new(), args[0])
                } else {
                    args[0]
                };
                let site = self.next_site();
                let out = self
                    .runtime_call(check, &[v, args[1], site])
                    .ok_or_else(|| internal("a shuffle without a result"))?;
                Some(if float {
                    self.builder.ins().bitcast(F32, MemFlagsData::new(), out)
                } else {
                    out
                })
            }
            CoopIntrinsic::Vote(vote) => {
                let check = match vote {
                    Vote::Ballot => RuntimeCheck::Ballot,
                    Vote::Any => RuntimeCheck::VoteAny,
                    Vote::All => RuntimeCheck::VoteAll,
                };
                let site = self.next_site();
                self.runtime_call(check, &[args[0], site])
            }
        };
        st.stack.extend(result);
        Ok(())
    }

    /// The next warp operation's call-site number, as an `i32` constant.
    fn next_site(&mut self) -> Value {
        let site = self.sites;
        self.sites = self.sites.wrapping_add(1);
        self.builder.ins().iconst(I32, i64::from(site))
    }

    fn shared(&self) -> Result<super::Shared, LowerError> {
        self.hidden
            .shared
            .ok_or_else(|| internal("a shared-memory intrinsic the detector did not record"))
    }

    /// The checked `i64` offset of a shared access of `bytes` at `offset`
    /// (an `i32`, unsigned): traps `HeapMisaligned` unless `bytes` divides
    /// it, then `HeapOutOfBounds` unless `offset + bytes <= shared_size`.
    fn shared_offset(&mut self, offset: Value, bytes: u32) -> Result<Value, LowerError> {
        let shared = self.shared()?;
        let b = &mut self.builder;
        let ea = b.ins().uextend(I64, offset);
        // `bench-unsandboxed` (never for production: benchmarks only): no
        // checks, so a kernel can reach past its block's shared memory.
        if cfg!(feature = "bench-unsandboxed") {
            return Ok(ea);
        }
        // (`translate::align` removes the tests it proves pass.)
        if bytes > 1 {
            let low = b.ins().band_imm_s(ea, i64::from(bytes - 1));
            let misaligned = b.ins().icmp_imm_u(IntCC::NotEqual, low, 0);
            b.ins()
                .trapnz(misaligned, KernelTrap::HeapMisaligned.trap_code());
        }
        // `offset + bytes > size`, in 32 bits against the bound worked
        // out once at entry.
        let bound = super::SHARED_ACCESS_BYTES
            .iter()
            .position(|&n| n == bytes)
            .map(|i| shared.bounds[i])
            .ok_or_else(|| internal("a shared access of an odd size"))?;
        let out = b
            .ins()
            .icmp(IntCC::UnsignedGreaterThanOrEqual, offset, bound);
        b.ins().trapnz(out, KernelTrap::HeapOutOfBounds.trap_code());
        Ok(ea)
    }

    /// The host address of a checked shared access ([`Self::shared_offset`]).
    fn shared_address(&mut self, offset: Value, bytes: u32) -> Result<Value, LowerError> {
        let ea = self.shared_offset(offset, bytes)?;
        let base = self.shared()?.base;
        Ok(self.builder.ins().iadd(base, ea))
    }
}

/// Shared accesses' flags: checked before them (in bounds, aligned), so
/// they cannot trap.
fn flags() -> MemFlagsData {
    MemFlagsData::trusted().with_endianness(Endianness::Little)
}
