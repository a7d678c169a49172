//! The rewrite that keeps a kernel's native code from trapping (a Cranelift
//! trap is a `ud2`/`SIGILL` that would end the process): every trap with a
//! [`KernelTrap`] code becomes a branch to one cold block that records it in
//! the status word and returns, divisions get divisors that cannot fault,
//! trapping float-to-int conversions saturate, and whatever could still
//! trap natively, or calls anything but a runtime check, is refused
//! (`super`'s module docs, "Traps"). It compiles nothing.

use cranelift_codegen::{
    cursor::{Cursor, FuncCursor},
    ir::{
        self, Block, BlockArg, Endianness, Function, Inst, InstBuilder, MemFlagsData, Opcode,
        condcodes::IntCC, types,
    },
};
use tensorwasm_core::lower::{KernelAbi, KernelTrap, LowerError, RuntimeCheck, status};

use super::{invalid, unsupported};

/// The source offset an instruction carries (0 when it has none).
fn source_offset(function: &Function, inst: Inst) -> u64 {
    let srcloc = function.srcloc(inst);
    if srcloc.is_default() {
        0
    } else {
        u64::from(srcloc.bits())
    }
}

/// Rewrites `function` so that no instruction can trap natively (see the
/// module docs), or refuses it.
pub(super) fn make_trap_free(function: &mut Function, abi: KernelAbi) -> Result<(), LowerError> {
    let entry = function
        .layout
        .entry_block()
        .ok_or_else(|| invalid("the kernel has no body"))?;
    let status = *function
        .dfg
        .block_params(entry)
        .get(abi.hidden(KernelAbi::STATUS))
        .ok_or_else(|| invalid("the entry block lacks the hidden parameters"))?;
    let insts: Vec<Inst> = function
        .layout
        .blocks()
        .flat_map(|block| function.layout.block_insts(block))
        .collect();
    let mut trap_block = None;
    for inst in insts {
        match function.dfg.insts[inst].opcode() {
            Opcode::Trap | Opcode::Trapz | Opcode::Trapnz => {
                let code = function.dfg.insts[inst].trap_code();
                // Other codes stay and are refused below.
                if let Some(trap) = code.and_then(KernelTrap::from_trap_code) {
                    let target =
                        *trap_block.get_or_insert_with(|| append_trap_block(function, status));
                    branch_to_trap(function, inst, trap, target)?;
                }
            }
            Opcode::Udiv | Opcode::Urem | Opcode::Srem => guard_divisor(function, inst, false),
            Opcode::Sdiv => guard_divisor(function, inst, true),
            Opcode::FcvtToSint | Opcode::FcvtToUint => saturate(function, inst),
            _ => {}
        }
    }
    for block in function.layout.blocks() {
        for inst in function.layout.block_insts(block) {
            if let Some(reason) = native_hazard(function, inst) {
                let opcode = function.dfg.insts[inst].opcode();
                return Err(unsupported(
                    opcode.to_string(),
                    source_offset(function, inst),
                    reason,
                ));
            }
        }
    }
    Ok(())
}

/// Why `inst` may not reach native code, if it may not.
fn native_hazard(function: &Function, inst: Inst) -> Option<String> {
    let data = &function.dfg.insts[inst];
    let opcode = data.opcode();
    if let Some(code) = data.trap_code() {
        return Some(format!(
            "trap code `{code}` is not a KernelTrap (docs/kernels.md), and a native trap would \
             end the process"
        ));
    }
    match opcode {
        Opcode::Debugtrap => Some("a debug trap would stop the process".into()),
        // Linked to this module's host functions (`define`).
        Opcode::Call if RuntimeCheck::called_by(function, inst).is_some() => None,
        Opcode::Call
        | Opcode::CallIndirect
        | Opcode::ReturnCall
        | Opcode::ReturnCallIndirect
        | Opcode::TryCall
        | Opcode::TryCallIndirect
        | Opcode::FuncAddr
        | Opcode::SymbolValue
        | Opcode::TlsValue
        | Opcode::StackSwitch => Some(
            "a kernel calls nothing but the runtime checks and links to nothing \
                 (docs/kernels.md)"
                .into(),
        ),
        // The translator checked their addresses: in bounds and aligned.
        Opcode::AtomicRmw
        | Opcode::AtomicCas
        | Opcode::AtomicLoad
        | Opcode::AtomicStore
        | Opcode::Fence => None,
        // Divisions got a divisor that cannot fault (`guard_divisor`).
        Opcode::Udiv | Opcode::Sdiv | Opcode::Urem | Opcode::Srem => None,
        _ if opcode.can_trap() => Some("it traps natively, which would end the process".into()),
        _ => None,
    }
}

/// Appends the cold block every trap branches to, with parameters (code:
/// i32, offset: i64): the first trap of the launch records both, then the
/// thread returns.
fn append_trap_block(function: &mut Function, status: ir::Value) -> Block {
    let trap = function.dfg.make_block();
    let code = function.dfg.append_block_param(trap, types::I32);
    let offset = function.dfg.append_block_param(trap, types::I64);
    let won = function.dfg.make_block();
    let lost = function.dfg.make_block();
    // The launcher guarantees an aligned, live status word.
    let flags = MemFlagsData::trusted().with_endianness(Endianness::Little);
    let record = function.dfg.make_block();
    let stop = function.dfg.make_block();
    let mut pos = FuncCursor::new(function);
    pos.insert_block(trap);
    // A thread out of time also sets the launch's stop word, whatever trap
    // was recorded first: the block runner reads it between threads, which
    // on the CPU run one after another (see `run_block`).
    let is_time = pos
        .ins()
        .icmp_imm_u(IntCC::Equal, code, i64::from(KernelTrap::TimeLimit.code()));
    pos.ins().brif(is_time, stop, &[], record, &[]);
    pos.insert_block(stop);
    let one = pos.ins().iconst(types::I32, 1);
    let at = status_field(&mut pos, status, status::STOP);
    pos.ins().atomic_store(flags, one, at);
    pos.ins().jump(record, &[]);
    pos.insert_block(record);
    let zero = pos.ins().iconst(types::I32, 0);
    let previous = pos.ins().atomic_cas(flags, status, zero, code);
    pos.ins().brif(previous, lost, &[], won, &[]);
    pos.insert_block(won);
    pos.ins().store(flags, offset, status, 8);
    pos.ins().return_(&[]);
    pos.insert_block(lost);
    pos.ins().return_(&[]);
    for block in [trap, stop, record, won, lost] {
        function.layout.set_cold(block);
    }
    trap
}

/// The address of the status word's field at `offset`.
fn status_field(pos: &mut FuncCursor<'_>, status: ir::Value, offset: usize) -> ir::Value {
    pos.ins().iadd_imm_s(status, offset as i64)
}

/// Turns trap instruction `inst` into a branch to `target` with its code
/// and source offset.
fn branch_to_trap(
    function: &mut Function,
    inst: Inst,
    trap: KernelTrap,
    target: Block,
) -> Result<(), LowerError> {
    let offset = source_offset(function, inst);
    let opcode = function.dfg.insts[inst].opcode();
    let mut pos = FuncCursor::new(function).at_inst(inst);
    let code = pos.ins().iconst(types::I32, i64::from(trap.code()));
    // Source offsets are u32s.
    let offset = pos.ins().iconst(types::I64, offset as i64);
    let args = [BlockArg::Value(code), BlockArg::Value(offset)];
    if opcode == Opcode::Trap {
        function.replace(inst).jump(target, &args);
        return Ok(());
    }
    let condition = function.dfg.inst_args(inst)[0];
    let next = function
        .layout
        .next_inst(inst)
        .ok_or_else(|| invalid(format!("`{opcode}` ends a block")))?;
    let rest = function.dfg.make_block();
    function.layout.split_block(rest, next);
    if opcode == Opcode::Trapnz {
        function
            .replace(inst)
            .brif(condition, target, &args, rest, &[]);
    } else {
        function
            .replace(inst)
            .brif(condition, rest, &[], target, &args);
    }
    Ok(())
}

/// Replaces the divisor of division `inst` by 1 where the hardware would
/// fault: 0, and `-1` with a dividend of `MIN` for signed division. The
/// translator's traps run first, so this never changes a result.
fn guard_divisor(function: &mut Function, inst: Inst, signed_division: bool) {
    let &[dividend, divisor] = function.dfg.inst_args(inst) else {
        return;
    };
    let ty = function.dfg.value_type(divisor);
    if !ty.is_int() || ty.bits() > 64 {
        return;
    }
    let mut pos = FuncCursor::new(function).at_inst(inst);
    let mut fault = pos.ins().icmp_imm_s(IntCC::Equal, divisor, 0);
    if signed_division {
        let min = i64::MIN >> (64 - ty.bits());
        let is_min = pos.ins().icmp_imm_s(IntCC::Equal, dividend, min);
        let is_minus_one = pos.ins().icmp_imm_s(IntCC::Equal, divisor, -1);
        let overflow = pos.ins().band(is_min, is_minus_one);
        fault = pos.ins().bor(fault, overflow);
    }
    let one = pos.ins().iconst(ty, 1);
    let safe = pos.ins().select(fault, one, divisor);
    function.dfg.inst_args_mut(inst)[1] = safe;
}

/// Makes a trapping float-to-int conversion saturate; the translator's
/// range checks run first, so this never changes a result.
fn saturate(function: &mut Function, inst: Inst) {
    let &[value] = function.dfg.inst_args(inst) else {
        return;
    };
    let ty = function.dfg.value_type(function.dfg.first_result(inst));
    if function.dfg.insts[inst].opcode() == Opcode::FcvtToSint {
        function.replace(inst).fcvt_to_sint_sat(ty, value);
    } else {
        function.replace(inst).fcvt_to_uint_sat(ty, value);
    }
}

#[cfg(test)]
mod tests {
    use cranelift_codegen::{
        ir::{AbiParam, Signature, SourceLoc, UserFuncName},
        isa::CallConv,
        settings,
    };
    use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext};

    use super::*;

    /// `(x: i32, hidden...)`: `trapz x` at 0x10, `sdiv` by `x`, then an
    /// unconditional `unreachable` at 0x20.
    fn two_traps() -> (Function, KernelAbi) {
        let abi = KernelAbi { wasm_params: 1 };
        let mut sig = Signature::new(CallConv::SystemV);
        sig.params.push(AbiParam::new(types::I32));
        sig.params
            .extend([AbiParam::new(types::I64); KernelAbi::INTRINSICS]);
        sig.params.extend([AbiParam::new(types::I32); 12]);
        let mut function = Function::with_name_signature(UserFuncName::user(0, 0), sig);
        let mut ctx = FunctionBuilderContext::new();
        let mut b = FunctionBuilder::new(&mut function, &mut ctx);
        let entry = b.create_block();
        b.append_block_params_for_function_params(entry);
        b.switch_to_block(entry);
        let x = b.block_params(entry)[0];
        b.set_srcloc(SourceLoc::new(0x10));
        b.ins()
            .trapz(x, KernelTrap::IntegerDivideByZero.trap_code());
        b.set_srcloc(SourceLoc::default());
        let _ = b.ins().sdiv(x, x);
        b.set_srcloc(SourceLoc::new(0x20));
        b.ins().trap(KernelTrap::Unreachable.trap_code());
        b.seal_all_blocks();
        let flags = settings::Flags::new(settings::builder());
        let isa = cranelift_native::builder()
            .expect("a host ISA")
            .finish(flags)
            .expect("host ISA flags");
        b.finalize(isa.frontend_config());
        (function, abi)
    }

    #[test]
    fn the_rewrite_leaves_no_trap_and_verifies() {
        let (mut function, abi) = two_traps();
        make_trap_free(&mut function, abi).expect("rewrite");
        let flags = settings::Flags::new(settings::builder());
        cranelift_codegen::verify_function(&function, &flags)
            .unwrap_or_else(|e| panic!("{e}\n{}", function.display()));
        let text = function.display().to_string();
        println!("{text}");
        let opcodes: Vec<Opcode> = function
            .layout
            .blocks()
            .flat_map(|block| function.layout.block_insts(block))
            .map(|inst| function.dfg.insts[inst].opcode())
            .collect();
        assert!(
            !opcodes
                .iter()
                .any(|op| op.can_trap() && *op != Opcode::Sdiv),
            "{text}"
        );
        // One shared trap block: one compare-and-swap, one offset store.
        let count = |op| opcodes.iter().filter(|&&o| o == op).count();
        assert_eq!(count(Opcode::AtomicCas), 1, "{text}");
        assert_eq!(count(Opcode::Store), 1, "{text}");
        assert_eq!(count(Opcode::Select), 1, "the divisor guard: {text}");
    }
}
