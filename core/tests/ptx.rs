//! The PTX lowerer on kernel CLIF built by hand in the shape
//! `docs/kernels.md` promises (the translator's output): a vector add, a
//! SAXPY, one kernel per op family, and a sweep with one instruction per
//! PTX row of the op table. Each is verified by Cranelift's verifier,
//! lowered for sm_75, sm_80 and sm_90, checked for structure, and written
//! to `target/ptx-out/<name>.sm_XX.ptx`; `scripts/check-ptx.sh` runs these
//! tests and then assembles every file there with ptxas. The launch's time
//! checks are the translator's, so their kernels are translated from WAT.

use std::collections::BTreeSet;
use std::path::PathBuf;

use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::immediates::{Ieee32, Ieee64, Imm64, Offset32};
use cranelift_codegen::ir::types::{F32, F64, I8, I16, I32, I32X4, I64, INVALID};
use cranelift_codegen::ir::{
    AbiParam, Block, BlockArg, Endianness, ExtFuncData, ExternalName, Function, InstBuilder,
    JumpTableData, MemFlags, MemFlagsData, Opcode, Signature, SourceLoc, Type, UserFuncName, Value,
};
use cranelift_codegen::isa::CallConv;
use cranelift_codegen::settings;
use cranelift_codegen::verify_function;
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext};
use tensorwasm_core::lower::ptx::PtxLowerer;
use tensorwasm_core::lower::table::{self, Cond, Status};
use tensorwasm_core::lower::translate::translate_kernel;
use tensorwasm_core::lower::{Intrinsic, KernelAbi, KernelTrap, LowerError, Lowerer, RuntimeCheck};

/// The targets every kernel is lowered for, each with the PTX ISA version
/// the driver needs for it.
const TARGETS: [PtxLowerer; 3] = [
    PtxLowerer {
        sm: (7, 5),
        isa: (7, 0),
    },
    PtxLowerer {
        sm: (8, 0),
        isa: (7, 0),
    },
    PtxLowerer {
        sm: (9, 0),
        isa: (7, 8),
    },
];

/// A kernel's CLIF parameters, by role.
struct Params {
    wasm: Vec<Value>,
    mem_base: Value,
    mem_len: Value,
    status: Value,
    fuel: Value,
    intrinsics: Vec<Value>,
}

impl Params {
    fn intrinsic(&self, which: Intrinsic) -> Value {
        self.intrinsics[which.index()]
    }
}

struct Kernel {
    name: &'static str,
    func: Function,
    abi: KernelAbi,
}

/// Fills the kernel's blocks; no `finalize` (its config needs
/// target-lexicon), the verifier checks instead.
fn build(b: &mut FunctionBuilder, n: usize, body: impl FnOnce(&mut FunctionBuilder, &Params)) {
    let entry = b.create_block();
    b.append_block_params_for_function_params(entry);
    b.switch_to_block(entry);
    let v = b.block_params(entry).to_vec();
    let params = Params {
        wasm: v[..n].to_vec(),
        mem_base: v[n + KernelAbi::MEM_BASE],
        mem_len: v[n + KernelAbi::MEM_LEN],
        status: v[n + KernelAbi::STATUS],
        fuel: v[n + KernelAbi::FUEL],
        intrinsics: v[n + KernelAbi::INTRINSICS..].to_vec(),
    };
    body(b, &params);
    b.seal_all_blocks();
}

/// Builds a kernel with `docs/kernels.md`'s signature; `body` starts in
/// the entry block and must end every block it makes.
fn kernel(
    name: &'static str,
    wasm: &[Type],
    body: impl FnOnce(&mut FunctionBuilder, &Params),
) -> Kernel {
    let abi = KernelAbi {
        wasm_params: wasm.len(),
    };
    let mut sig = Signature::new(CallConv::SystemV);
    sig.params.extend(wasm.iter().map(|&t| AbiParam::new(t)));
    sig.params
        .extend([AbiParam::new(I64); KernelAbi::INTRINSICS]);
    sig.params.extend([AbiParam::new(I32); 12]);
    let mut func = Function::with_name_signature(UserFuncName::testcase(name), sig);
    let mut ctx = FunctionBuilderContext::new();
    build(
        &mut FunctionBuilder::new(&mut func, &mut ctx),
        wasm.len(),
        body,
    );
    let flags = settings::Flags::new(settings::builder());
    if let Err(errors) = verify_function(&func, &flags) {
        panic!("{name}: invalid CLIF: {errors}\n{}", func.display());
    }
    Kernel { name, func, abi }
}

fn little() -> MemFlagsData {
    MemFlagsData::new().with_endianness(Endianness::Little)
}

fn at(b: &mut FunctionBuilder, offset: u32) {
    b.set_srcloc(SourceLoc::new(offset));
}

/// `docs/kernels.md`'s address of an `size`-byte access at
/// `index + offset`: `ea = uextend(index) + offset`, `trapnz` when
/// `ea + size > mem_len`, then `mem_base + ea`.
fn guest_addr(b: &mut FunctionBuilder, p: &Params, index: Value, offset: u32, size: u32) -> Value {
    let index = b.ins().uextend(I64, index);
    let offset = b.ins().iconst(I64, i64::from(offset));
    let ea = b.ins().iadd(index, offset);
    let size = b.ins().iconst(I64, i64::from(size));
    let end = b.ins().iadd(ea, size);
    let oob = b.ins().icmp(IntCC::UnsignedGreaterThan, end, p.mem_len);
    b.ins().trapnz(oob, KernelTrap::HeapOutOfBounds.trap_code());
    b.ins().iadd(p.mem_base, ea)
}

/// The global thread index `ctaid.x * ntid.x + tid.x`.
fn global_index(b: &mut FunctionBuilder, p: &Params) -> Value {
    let block = b.ins().imul(
        p.intrinsic(Intrinsic::BlockIdxX),
        p.intrinsic(Intrinsic::BlockDimX),
    );
    b.ins().iadd(block, p.intrinsic(Intrinsic::ThreadIdxX))
}

/// Stores `value` at guest index `out + 8 * slot` (8-byte slots).
fn store_slot(b: &mut FunctionBuilder, p: &Params, out: Value, slot: u32, value: Value) {
    let addr = guest_addr(b, p, out, slot * 8, 8);
    b.ins().store(little(), value, addr, 0);
}

fn vector_add() -> Kernel {
    // (a, b, c, n): c[i] = a[i] + b[i] for i < n; f32 arrays at guest offsets.
    kernel("vector_add", &[I32, I32, I32, I32], |b, p| {
        let [a, x, c, n] = p.wasm[..] else {
            unreachable!()
        };
        let body = b.create_block();
        let done = b.create_block();
        let i = global_index(b, p);
        let inside = b.ins().icmp(IntCC::UnsignedLessThan, i, n);
        b.ins().brif(inside, body, &[], done, &[]);
        b.switch_to_block(body);
        let four = b.ins().iconst(I32, 4);
        let byte = b.ins().imul(i, four);
        let ia = b.ins().iadd(a, byte);
        let ib = b.ins().iadd(x, byte);
        let ic = b.ins().iadd(c, byte);
        at(b, 0x40);
        let pa = guest_addr(b, p, ia, 0, 4);
        let va = b.ins().load(F32, little(), pa, 0);
        at(b, 0x48);
        let pb = guest_addr(b, p, ib, 0, 4);
        let vb = b.ins().load(F32, little(), pb, 0);
        let sum = b.ins().fadd(va, vb);
        at(b, 0x50);
        let pc = guest_addr(b, p, ic, 0, 4);
        b.ins().store(little(), sum, pc, 0);
        b.ins().jump(done, &[]);
        b.switch_to_block(done);
        b.ins().return_(&[]);
    })
}

fn saxpy() -> Kernel {
    // (n, alpha, x, y): y[i] = alpha * x[i] + y[i].
    kernel("saxpy", &[I32, F32, I32, I32], |b, p| {
        let [n, alpha, x, y] = p.wasm[..] else {
            unreachable!()
        };
        let body = b.create_block();
        let done = b.create_block();
        let i = global_index(b, p);
        let inside = b.ins().icmp(IntCC::SignedLessThan, i, n);
        b.ins().brif(inside, body, &[], done, &[]);
        b.switch_to_block(body);
        let four = b.ins().iconst(I32, 4);
        let byte = b.ins().imul(i, four);
        let ix = b.ins().iadd(x, byte);
        let iy = b.ins().iadd(y, byte);
        at(b, 0x20);
        let px = guest_addr(b, p, ix, 0, 4);
        let vx = b.ins().load(F32, little(), px, 0);
        at(b, 0x28);
        let py = guest_addr(b, p, iy, 0, 4);
        let vy = b.ins().load(F32, little(), py, 0);
        let ax = b.ins().fmul(alpha, vx);
        let r = b.ins().fadd(ax, vy);
        at(b, 0x30);
        b.ins().store(little(), r, py, 0);
        b.ins().jump(done, &[]);
        b.switch_to_block(done);
        b.ins().return_(&[]);
    })
}

/// Integer arithmetic, masked shifts and rotates of both widths.
fn int_arith() -> Kernel {
    kernel("int_arith", &[I32, I32, I32, I64, I64], |b, p| {
        let [out, x, y, wx, wy] = p.wasm[..] else {
            unreachable!()
        };
        let mut slot = 0;
        let mut put = |b: &mut FunctionBuilder, v: Value| {
            store_slot(b, p, out, slot, v);
            slot += 1;
        };
        for (l, r) in [(x, y), (wx, wy)] {
            let v = b.ins().iadd(l, r);
            put(b, v);
            let v = b.ins().isub(l, r);
            put(b, v);
            let v = b.ins().imul(l, r);
            put(b, v);
            let v = b.ins().band(l, r);
            put(b, v);
            let v = b.ins().bor(l, r);
            put(b, v);
            let v = b.ins().bxor(l, r);
            put(b, v);
            let v = b.ins().bnot(l);
            put(b, v);
            let v = b.ins().ishl(l, r);
            put(b, v);
            let v = b.ins().ushr(l, r);
            put(b, v);
            let v = b.ins().sshr(l, r);
            put(b, v);
            let v = b.ins().rotl(l, r);
            put(b, v);
            let v = b.ins().rotr(l, r);
            put(b, v);
            let v = b.ins().clz(l);
            put(b, v);
            let v = b.ins().ctz(l);
            put(b, v);
            let v = b.ins().popcnt(l);
            put(b, v);
        }
        // Shifts whose amount has the other width.
        let v = b.ins().ishl(x, wy);
        put(b, v);
        let v = b.ins().rotl(wx, y);
        put(b, v);
        // Wasm's i32.eqz: icmp against 0, then uextend of the i8.
        let zero = b.ins().iconst(I32, 0);
        let eqz = b.ins().icmp(IntCC::Equal, x, zero);
        let v = b.ins().uextend(I32, eqz);
        put(b, v);
        // i64.extend8_s and i32.wrap_i64.
        let narrow = b.ins().ireduce(I8, wx);
        let v = b.ins().sextend(I64, narrow);
        put(b, v);
        let v = b.ins().ireduce(I32, wx);
        put(b, v);
        let minus_one = b.ins().iconst(I64, -1);
        put(b, minus_one);
        b.ins().return_(&[]);
    })
}

/// Division with the translator's guards: a zero divisor traps, so does
/// INT_MIN / -1 (band of two comparisons); remainders guard only zero.
fn div_traps() -> Kernel {
    kernel("div_traps", &[I32, I32, I32, I64, I64], |b, p| {
        let [out, x, y, wx, wy] = p.wasm[..] else {
            unreachable!()
        };
        let mut slot = 0;
        for (l, r, min) in [(x, y, i64::from(i32::MIN)), (wx, wy, i64::MIN)] {
            let ty = b.func.dfg.value_type(l);
            at(b, 0x100 + slot);
            b.ins()
                .trapz(r, KernelTrap::IntegerDivideByZero.trap_code());
            let minus_one = b.ins().iconst(ty, -1);
            let int_min = b.ins().iconst(ty, min);
            let r_is_minus_one = b.ins().icmp(IntCC::Equal, r, minus_one);
            let l_is_min = b.ins().icmp(IntCC::Equal, l, int_min);
            let overflow = b.ins().band(r_is_minus_one, l_is_min);
            b.ins()
                .trapnz(overflow, KernelTrap::IntegerOverflow.trap_code());
            let q = b.ins().sdiv(l, r);
            store_slot(b, p, out, slot, q);
            at(b, 0x110 + slot);
            b.ins()
                .trapz(r, KernelTrap::IntegerDivideByZero.trap_code());
            let q = b.ins().udiv(l, r);
            store_slot(b, p, out, slot + 1, q);
            let m = b.ins().srem(l, r);
            store_slot(b, p, out, slot + 2, m);
            let m = b.ins().urem(l, r);
            store_slot(b, p, out, slot + 3, m);
            slot += 4;
        }
        b.ins().return_(&[]);
    })
}

/// Float min/max and the bit-exact float ops of both widths.
fn float_minmax() -> Kernel {
    kernel("float_minmax", &[I32, F32, F32, F64, F64], |b, p| {
        let [out, x, y, wx, wy] = p.wasm[..] else {
            unreachable!()
        };
        let mut slot = 0;
        for (l, r) in [(x, y), (wx, wy)] {
            for v in [
                b.ins().fmin(l, r),
                b.ins().fmax(l, r),
                b.ins().fneg(l),
                b.ins().fabs(l),
                b.ins().fcopysign(l, r),
                b.ins().ceil(l),
                b.ins().floor(l),
                b.ins().trunc(l),
                b.ins().nearest(l),
                b.ins().sqrt(l),
                b.ins().fdiv(l, r),
                b.ins().fsub(l, r),
            ] {
                store_slot(b, p, out, slot, v);
                slot += 1;
            }
        }
        let nan = b.ins().f32const(Ieee32::with_bits(0x7FC0_0001));
        store_slot(b, p, out, slot, nan);
        let neg_zero = b.ins().f64const(Ieee64::with_bits(0x8000_0000_0000_0000));
        store_slot(b, p, out, slot + 1, neg_zero);
        b.ins().return_(&[]);
    })
}

/// Every conversion the translator emits, with its guards where Wasm traps.
fn conversions() -> Kernel {
    kernel("conversions", &[I32, I32, I64, F32, F64], |b, p| {
        let [out, x, wx, f, d] = p.wasm[..] else {
            unreachable!()
        };
        let mut slot = 0;
        let mut put = |b: &mut FunctionBuilder, v: Value| {
            store_slot(b, p, out, slot, v);
            slot += 1;
        };
        // trunc with guards: NaN traps (fcmp ne v, v), then the value is in range.
        for (src, ty) in [(f, I32), (d, I64)] {
            at(b, 0x200);
            let is_nan = b.ins().fcmp(FloatCC::NotEqual, src, src);
            b.ins()
                .trapnz(is_nan, KernelTrap::BadConversionToInteger.trap_code());
            let v = b.ins().fcvt_to_sint(ty, src);
            put(b, v);
            let v = b.ins().fcvt_to_uint(ty, src);
            put(b, v);
        }
        for src in [f, d] {
            for ty in [I32, I64] {
                let v = b.ins().fcvt_to_sint_sat(ty, src);
                put(b, v);
                let v = b.ins().fcvt_to_uint_sat(ty, src);
                put(b, v);
            }
        }
        for src in [x, wx] {
            for ty in [F32, F64] {
                let v = b.ins().fcvt_from_sint(ty, src);
                put(b, v);
                let v = b.ins().fcvt_from_uint(ty, src);
                put(b, v);
            }
        }
        let v = b.ins().fpromote(F64, f);
        put(b, v);
        let v = b.ins().fdemote(F32, d);
        put(b, v);
        let v = b.ins().bitcast(I32, MemFlagsData::new(), f);
        put(b, v);
        let v = b.ins().bitcast(F64, MemFlagsData::new(), wx);
        put(b, v);
        let v = b.ins().uextend(I64, x);
        put(b, v);
        let v = b.ins().sextend(I64, x);
        put(b, v);
        let half = b.ins().ireduce(I16, x);
        let v = b.ins().sextend(I32, half);
        put(b, v);
        b.ins().return_(&[]);
    })
}

/// Loads and stores of every width, at an index and a CLIF offset.
fn memory_widths() -> Kernel {
    kernel("memory_widths", &[I32, I32], |b, p| {
        let [src, dst] = p.wasm[..] else {
            unreachable!()
        };
        let mut loaded = Vec::new();
        let loads: [(Opcode, Type, u32); 14] = [
            (Opcode::Load, I32, 4),
            (Opcode::Load, I64, 8),
            (Opcode::Load, F32, 4),
            (Opcode::Load, F64, 8),
            (Opcode::Uload8, I32, 1),
            (Opcode::Sload8, I32, 1),
            (Opcode::Uload16, I32, 2),
            (Opcode::Sload16, I32, 2),
            (Opcode::Uload8, I64, 1),
            (Opcode::Sload8, I64, 1),
            (Opcode::Uload16, I64, 2),
            (Opcode::Sload16, I64, 2),
            (Opcode::Uload32, I64, 4),
            (Opcode::Sload32, I64, 4),
        ];
        for (k, (op, ty, size)) in loads.into_iter().enumerate() {
            at(b, 0x300 + k as u32);
            let addr = guest_addr(b, p, src, 3 * k as u32, size);
            let v = match op {
                Opcode::Load => b.ins().load(ty, little(), addr, 0),
                Opcode::Uload8 => b.ins().uload8(ty, little(), addr, 0),
                Opcode::Sload8 => b.ins().sload8(ty, little(), addr, 0),
                Opcode::Uload16 => b.ins().uload16(ty, little(), addr, 0),
                Opcode::Sload16 => b.ins().sload16(ty, little(), addr, 0),
                Opcode::Uload32 => b.ins().uload32(little(), addr, 0),
                _ => b.ins().sload32(little(), addr, 0),
            };
            loaded.push(v);
        }
        // Stores: every width, one with a nonzero CLIF offset.
        let mut k = 0;
        for &v in &loaded[..4] {
            at(b, 0x380 + k);
            let addr = guest_addr(b, p, dst, 8 * k, 8 + 4);
            b.ins().store(little(), v, addr, 4);
            k += 1;
        }
        for v in [loaded[4], loaded[8]] {
            let addr = guest_addr(b, p, dst, 8 * k, 1);
            b.ins().istore8(little(), v, addr, 0);
            let addr = guest_addr(b, p, dst, 8 * k + 1, 2);
            b.ins().istore16(little(), v, addr, 0);
            k += 1;
        }
        let addr = guest_addr(b, p, dst, 8 * k, 4);
        b.ins().istore32(little(), loaded[12], addr, 0);
        b.ins().return_(&[]);
    })
}

/// A Wasm br_table: three arms and a default, one arm passing an argument.
fn br_table() -> Kernel {
    kernel("br_table", &[I32, I32], |b, p| {
        let [out, which] = p.wasm[..] else {
            unreachable!()
        };
        let arms: Vec<Block> = (0..3).map(|_| b.create_block()).collect();
        let default = b.create_block();
        let join = b.create_block();
        b.append_block_param(join, I32);
        let seven = b.ins().iconst(I32, 7);
        let dfg = &mut b.func.dfg;
        let calls: Vec<_> = arms.iter().map(|&arm| dfg.block_call(arm, &[])).collect();
        let default_call = dfg.block_call(default, &[]);
        let jt = b.create_jump_table(JumpTableData::new(default_call, &calls));
        b.ins().br_table(which, jt);
        for (k, &arm) in arms.iter().enumerate() {
            b.switch_to_block(arm);
            let v = b.ins().iconst(I32, 10 * k as i64);
            b.ins().jump(join, &[BlockArg::Value(v)]);
        }
        b.switch_to_block(default);
        b.ins().jump(join, &[BlockArg::Value(seven)]);
        b.switch_to_block(join);
        let v = b.block_params(join)[0];
        store_slot(b, p, out, 0, v);
        b.ins().return_(&[]);
    })
}

/// A br_table whose entries carry block arguments (edge stubs), and one
/// with an empty table (only the default).
fn br_table_args() -> Kernel {
    kernel("br_table_args", &[I32, I32], |b, p| {
        let [out, which] = p.wasm[..] else {
            unreachable!()
        };
        let join = b.create_block();
        b.append_block_param(join, I32);
        let only_default = b.create_block();
        let one = b.ins().iconst(I32, 1);
        let two = b.ins().iconst(I32, 2);
        let dfg = &mut b.func.dfg;
        let calls = [
            dfg.block_call(join, &[BlockArg::Value(one)]),
            dfg.block_call(join, &[BlockArg::Value(two)]),
        ];
        let default_call = dfg.block_call(join, &[BlockArg::Value(which)]);
        let jt = b.create_jump_table(JumpTableData::new(default_call, &calls));
        b.ins().br_table(which, jt);
        b.switch_to_block(join);
        let v = b.block_params(join)[0];
        store_slot(b, p, out, 0, v);
        let default_call = b.func.dfg.block_call(only_default, &[]);
        let empty = b.create_jump_table(JumpTableData::new(default_call, &[]));
        b.ins().br_table(v, empty);
        b.switch_to_block(only_default);
        b.ins().return_(&[]);
    })
}

/// A counted loop with the translator's fuel check at its header, and a
/// pair of loop variables swapped each iteration (a parallel-move cycle).
fn fuel_loop() -> Kernel {
    kernel("fuel_loop", &[I32, I32], |b, p| {
        let [out, n] = p.wasm[..] else { unreachable!() };
        let header = b.create_block();
        let body = b.create_block();
        let exit = b.create_block();
        for ty in [I64, I32, I32, I32] {
            b.append_block_param(header, ty); // fuel, i, a, b
        }
        let zero = b.ins().iconst(I32, 0);
        let one = b.ins().iconst(I32, 1);
        b.ins().jump(
            header,
            &[
                BlockArg::Value(p.fuel),
                BlockArg::Value(zero),
                BlockArg::Value(zero),
                BlockArg::Value(one),
            ],
        );
        b.switch_to_block(header);
        let [fuel, i, x, y] = b.block_params(header)[..] else {
            unreachable!()
        };
        at(b, 0x400);
        b.ins().trapz(fuel, KernelTrap::OutOfFuel.trap_code());
        let one64 = b.ins().iconst(I64, 1);
        let fuel = b.ins().isub(fuel, one64);
        let more = b.ins().icmp(IntCC::SignedLessThan, i, n);
        b.ins().brif(more, body, &[], exit, &[]);
        b.switch_to_block(body);
        let i = b.ins().iadd(i, one);
        // (a, b) <- (b, a): each block parameter is the other's argument.
        b.ins().jump(
            header,
            &[
                BlockArg::Value(fuel),
                BlockArg::Value(i),
                BlockArg::Value(y),
                BlockArg::Value(x),
            ],
        );
        b.switch_to_block(exit);
        store_slot(b, p, out, 0, x);
        store_slot(b, p, out, 1, y);
        b.ins().return_(&[]);
    })
}

/// brif edges that carry arguments (stubs), unreachable, and select.
fn branches() -> Kernel {
    kernel("branches", &[I32, I32, F64], |b, p| {
        let [out, x, d] = p.wasm[..] else {
            unreachable!()
        };
        let join = b.create_block();
        b.append_block_param(join, I32);
        b.append_block_param(join, F64);
        let dead = b.create_block();
        let next = b.create_block();
        let zero = b.ins().f64const(0.0);
        b.ins().brif(
            x,
            join,
            &[BlockArg::Value(x), BlockArg::Value(d)],
            join,
            &[BlockArg::Value(out), BlockArg::Value(zero)],
        );
        b.switch_to_block(join);
        let [v, w] = b.block_params(join)[..] else {
            unreachable!()
        };
        let is_big = b.ins().icmp_imm_u(IntCC::UnsignedGreaterThan, v, 1000);
        let picked = b.ins().select(is_big, w, d);
        store_slot(b, p, out, 0, picked);
        let wide = b.ins().uextend(I64, v);
        at(b, 0x4F0);
        b.ins().trapnz(x, KernelTrap::Unreachable.trap_code());
        b.ins().trapnz(wide, KernelTrap::Unreachable.trap_code());
        b.ins().trapz(is_big, KernelTrap::Unreachable.trap_code());
        b.ins().brif(wide, next, &[], dead, &[]);
        b.switch_to_block(dead);
        at(b, 0x500);
        b.ins().trap(KernelTrap::Unreachable.trap_code());
        b.switch_to_block(next);
        b.ins().return_(&[]);
    })
}

/// A value for the sweep: one of each type, built from the parameters.
fn sample(b: &mut FunctionBuilder, p: &Params, ty: Type) -> Value {
    match ty {
        I8 => {
            let zero = b.ins().iconst(I32, 0);
            b.ins().icmp(IntCC::Equal, p.wasm[1], zero)
        }
        I16 => b.ins().ireduce(I16, p.wasm[1]),
        I32 => p.wasm[1],
        I64 => p.wasm[2],
        F32 => p.wasm[3],
        F64 => p.wasm[4],
        _ => panic!("no sample of {ty}"),
    }
}

/// One instruction per PTX row of the op table that is not control flow
/// (those are in the kernels above), built from the row's key: every
/// template is expanded and assembled at least once.
fn table_sweep() -> Kernel {
    kernel("table_sweep", &[I32, I32, I64, F32, F64], |b, p| {
        let out = p.wasm[0];
        let mut slot = 0;
        for row in table::rows() {
            if !matches!(row.status, Status::Ptx(_)) {
                continue;
            }
            let op = row.opcode;
            let ty = row.ty;
            let operand = row.operand.unwrap_or(ty);
            let inst = match op {
                Opcode::Jump
                | Opcode::Brif
                | Opcode::BrTable
                | Opcode::Return
                | Opcode::Trap
                | Opcode::Trapz
                | Opcode::Trapnz
                // A kernel has one stack slot: `compiler_output` has it.
                | Opcode::StackAddr => continue,
                Opcode::Iconst => b.ins().UnaryImm(op, ty, Imm64::new(0x5A)).0,
                Opcode::F32const => {
                    b.ins()
                        .UnaryIeee32(op, INVALID, Ieee32::with_bits(0x7FA0_0001))
                        .0
                }
                Opcode::F64const => {
                    b.ins()
                        .UnaryIeee64(op, INVALID, Ieee64::with_bits(0xFFF0_0000_0000_0001))
                        .0
                }
                Opcode::Icmp | Opcode::Fcmp => {
                    let (x, y) = (sample(b, p, ty), sample(b, p, ty));
                    match row.cond {
                        Some(Cond::Int(cc)) => b.ins().IntCompare(op, ty, cc, x, y).0,
                        Some(Cond::Float(cc)) => b.ins().FloatCompare(op, ty, cc, x, y).0,
                        Some(Cond::Rmw(_)) | None => unreachable!(),
                    }
                }
                Opcode::Select => {
                    let c = sample(b, p, operand);
                    let (x, y) = (sample(b, p, ty), sample(b, p, ty));
                    b.ins().Ternary(op, ty, c, x, y).0
                }
                Opcode::Bitcast => {
                    let x = sample(b, p, operand);
                    let flags = b.func.dfg.mem_flags.insert(MemFlagsData::new()).unwrap();
                    b.ins().LoadNoOffset(op, ty, flags, x).0
                }
                Opcode::AtomicRmw | Opcode::AtomicCas | Opcode::AtomicLoad | Opcode::AtomicStore => {
                    let addr = guest_addr(b, p, p.wasm[1], slot, 8);
                    let flags = MemFlagsData::trusted().with_endianness(Endianness::Little);
                    let (x, y) = (sample(b, p, ty), sample(b, p, ty));
                    match (op, row.cond) {
                        (Opcode::AtomicRmw, Some(Cond::Rmw(rmw))) => {
                            let v = b.ins().atomic_rmw(ty, flags, rmw, addr, x);
                            b.func.dfg.value_def(v).unwrap_inst()
                        }
                        (Opcode::AtomicCas, _) => {
                            let v = b.ins().atomic_cas(flags, addr, x, y);
                            b.func.dfg.value_def(v).unwrap_inst()
                        }
                        (Opcode::AtomicLoad, _) => {
                            let v = b.ins().atomic_load(ty, flags, addr);
                            b.func.dfg.value_def(v).unwrap_inst()
                        }
                        (Opcode::AtomicStore, _) => b.ins().atomic_store(flags, x, addr),
                        _ => unreachable!("an atomic row without its operation"),
                    }
                }
                Opcode::Fence => b.ins().fence(),
                Opcode::Fma => {
                    let (x, y, z) = (sample(b, p, ty), sample(b, p, ty), sample(b, p, ty));
                    let v = b.ins().fma(x, y, z);
                    b.func.dfg.value_def(v).unwrap_inst()
                }
                _ if op.can_load() => {
                    let addr = guest_addr(b, p, p.wasm[1], slot, 8);
                    let flags: MemFlags = b.func.dfg.mem_flags.insert(little()).unwrap();
                    b.ins().Load(op, ty, flags, Offset32::new(0), addr).0
                }
                _ if op.can_store() => {
                    let x = sample(b, p, ty);
                    let addr = guest_addr(b, p, p.wasm[1], slot, 8);
                    let flags: MemFlags = b.func.dfg.mem_flags.insert(little()).unwrap();
                    b.ins().Store(op, ty, flags, Offset32::new(-2), x, addr).0
                }
                Opcode::Ishl | Opcode::Ushr | Opcode::Sshr | Opcode::Rotl | Opcode::Rotr => {
                    let (x, y) = (sample(b, p, ty), sample(b, p, operand));
                    b.ins().Binary(op, ty, x, y).0
                }
                _ => match op.constraints().num_fixed_value_arguments() {
                    2 => {
                        let (x, y) = (sample(b, p, ty), sample(b, p, ty));
                        b.ins().Binary(op, ty, x, y).0
                    }
                    1 => {
                        let x = sample(b, p, operand);
                        b.ins().Unary(op, ty, x).0
                    }
                    n => panic!("the sweep does not build {op} ({n} operands)"),
                },
            };
            if let Some(&v) = b.func.dfg.inst_results(inst).first() {
                let v_ty = b.func.dfg.value_type(v);
                // Narrow results widen first (a store of i8 is not a row).
                let v = if v_ty == I8 || v_ty == I16 {
                    b.ins().uextend(I32, v)
                } else {
                    v
                };
                store_slot(b, p, out, slot, v);
            }
            slot += 1;
        }
        b.ins().return_(&[]);
    })
}

/// Function `index` of a WAT module through the translator: kernels with
/// the launch's time checks, as only the translator emits them.
fn translated(name: &'static str, wat: &str, index: u32) -> Kernel {
    let wasm = wat::parse_str(wat).unwrap_or_else(|e| panic!("{name}: {e}"));
    let t = translate_kernel(&wasm, index).unwrap_or_else(|e| panic!("{name}: {e}"));
    Kernel {
        name,
        func: t.function,
        abi: t.abi,
    }
}

/// An endless loop: the entry's checks and the loop header's.
fn time_loop() -> Kernel {
    translated(
        "time_loop",
        r#"(module (memory 1)
          (func (param $n i32)
            (loop $spin
              (local.set $n (i32.add (local.get $n) (i32.const 1)))
              (br $spin))))"#,
        0,
    )
}

/// No loop: only the thread's start and its (virtual) block's checks.
fn time_straight() -> Kernel {
    translated(
        "time_straight",
        r#"(module
          (import "tensorwasm_kernel" "thread_idx_x" (func $tid (result i32)))
          (memory 1)
          (func (param $out i32)
            (i32.store (i32.add (local.get $out) (i32.shl (call $tid) (i32.const 2)))
                       (i32.const 1))))"#,
        1,
    )
}

/// What rustc emits: a shadow-stack frame (`stack_addr` of the window,
/// generic loads and stores), `memory.fill`, `memory.copy` and a
/// `call_indirect` over a fixed table.
fn compiler_output() -> Kernel {
    translated(
        "compiler_output",
        r#"(module
          (import "tensorwasm_kernel" "thread_idx_x" (func $tid (result i32)))
          (memory 1)
          (global $__stack_pointer (mut i32) (i32.const 4096))
          (type $un (func (param f32) (result f32)))
          (table 3 funcref)
          (elem (i32.const 0) $double $square)
          (func $double (type $un) (f32.add (local.get 0) (local.get 0)))
          (func $square (type $un) (f32.mul (local.get 0) (local.get 0)))
          (func (param $out i32) (param $which i32) (local $sp i32)
            (local.set $sp (i32.sub (global.get $__stack_pointer) (i32.const 32)))
            (global.set $__stack_pointer (local.get $sp))
            (memory.fill (local.get $sp) (i32.const 0) (i32.const 32))
            (f32.store offset=4 (local.get $sp)
              (call_indirect (type $un) (f32.convert_i32_u (call $tid)) (local.get $which)))
            (memory.copy (i32.add (local.get $out) (i32.shl (call $tid) (i32.const 5)))
                         (local.get $sp) (i32.const 32))
            (global.set $__stack_pointer (i32.add (local.get $sp) (i32.const 32)))))"#,
        3,
    )
}

/// Loops the translator versions (`version.rs`): counted up with the test
/// at the top over a 2-D index (a matmul's inner loop, host pointers with
/// a run-time step), an `i64` `!=` loop by 3 (the count through a modular
/// inverse), a signed `<` loop by 3 at the bottom (a division), and one
/// counted down to zero: each with its entry test, copy and chain.
fn versioned_loops() -> Kernel {
    translated(
        "versioned_loops",
        r#"(module
          (import "tensorwasm_kernel" "thread_idx_x" (func $tid (result i32)))
          (memory 1)
          (func (param $a i32) (param $b i32) (param $n i32) (param $m i64)
            (local $k i32) (local $acc f32) (local $i i64) (local $j i32)
            (block $done
              (loop $next
                (br_if $done (i32.ge_u (local.get $k) (local.get $n)))
                (local.set $acc (f32.add (local.get $acc)
                  (f32.mul
                    (f32.load (i32.add (local.get $a) (i32.shl
                      (i32.add (i32.mul (call $tid) (local.get $n)) (local.get $k)) (i32.const 2))))
                    (f32.load (i32.add (local.get $b) (i32.shl
                      (i32.add (i32.mul (local.get $k) (local.get $n)) (call $tid)) (i32.const 2)))))))
                (local.set $k (i32.add (local.get $k) (i32.const 1)))
                (br $next)))
            (f32.store (local.get $a) (local.get $acc))
            (loop $wide
              (i64.store (i32.add (local.get $b) (i32.wrap_i64 (i64.shl (local.get $i) (i64.const 3))))
                (local.get $i))
              (br_if $wide (i64.ne (local.tee $i (i64.add (local.get $i) (i64.const 3))) (local.get $m))))
            (loop $signed
              (i32.store (i32.add (local.get $a) (i32.shl (local.get $j) (i32.const 2))) (local.get $j))
              (br_if $signed (i32.lt_s (local.tee $j (i32.add (local.get $j) (i32.const 3))) (local.get $n))))
            (loop $down
              (i32.store offset=8 (local.get $a) (local.get $n))
              (local.set $a (i32.add (local.get $a) (i32.const 4)))
              (br_if $down (local.tee $n (i32.sub (local.get $n) (i32.const 1)))))))"#,
        1,
    )
}

fn kernels() -> Vec<Kernel> {
    vec![
        vector_add(),
        saxpy(),
        int_arith(),
        div_traps(),
        float_minmax(),
        conversions(),
        memory_widths(),
        br_table(),
        br_table_args(),
        fuel_loop(),
        branches(),
        table_sweep(),
        time_loop(),
        time_straight(),
        compiler_output(),
        versioned_loops(),
    ]
}

fn out_dir() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/ptx-out");
    std::fs::create_dir_all(&dir).expect("create target/ptx-out");
    dir
}

fn lower(k: &Kernel, target: &PtxLowerer) -> String {
    match target.lower(k.name, &k.func, k.abi) {
        Ok(ptx) => ptx,
        Err(e) => panic!("{} for sm_{}{}: {e}", k.name, target.sm.0, target.sm.1),
    }
}

/// The PTX instructions of a kernel, without comments, labels or directives.
fn instructions(ptx: &str) -> impl Iterator<Item = &str> {
    ptx.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with("//") && !l.starts_with('.'))
        .filter(|l| !l.ends_with(':') && !l.contains(": .branchtargets"))
        .filter(|l| !matches!(*l, "{" | "}" | ")"))
}

#[test]
fn every_kernel_lowers_and_is_written_out() {
    let dir = out_dir();
    for k in kernels() {
        for target in &TARGETS {
            let ptx = lower(&k, target);
            let (major, minor) = target.sm;
            assert!(ptx.contains(&format!(".target sm_{major}{minor}\n")));
            assert!(ptx.contains(&format!(".version {}.{}\n", target.isa.0, target.isa.1)));
            assert!(ptx.contains(&format!(".visible .entry {}(\n", k.name)));
            assert_eq!(ptx.matches(".visible .entry").count(), 1);
            let params = ptx.matches("    .param ").count();
            assert_eq!(
                params,
                k.abi.wasm_params + KernelAbi::INTRINSICS,
                "{}: .params",
                k.name
            );
            for hidden in [
                "mem_base",
                "mem_len",
                "status",
                "fuel",
                "time_limit",
                "grid_x",
                "grid_y",
                "grid_z",
            ] {
                assert!(ptx.contains(&format!(".param .u64 {}_{hidden}", k.name)));
            }
            for inst in instructions(&ptx) {
                // `trap;` or `@%p trap;`: never (it would poison the context).
                assert!(
                    !inst
                        .split_whitespace()
                        .any(|w| w == "trap;" || w.starts_with("trap.")),
                    "{}: PTX trap in `{inst}`",
                    k.name
                );
                assert!(
                    !inst.contains('{') || inst.starts_with("mov.b64"),
                    "{}: unfilled `{inst}`",
                    k.name
                );
            }
            assert!(
                instructions(&ptx).any(|i| i == "ret;"),
                "{}: no ret",
                k.name
            );
            std::fs::write(dir.join(format!("{}.sm_{major}{minor}.ptx", k.name)), &ptx)
                .expect("write PTX");
        }
    }
}

#[test]
fn every_ptx_row_is_exercised() {
    let kernels = kernels();
    let mut used = BTreeSet::new();
    for k in &kernels {
        for block in k.func.layout.blocks() {
            for inst in k.func.layout.block_insts(block) {
                let row = table::row_for(&k.func, inst).expect("a row");
                used.insert(format!("{row:?}"));
            }
        }
    }
    let missing: Vec<String> = table::rows()
        .filter(|r| matches!(r.status, Status::Ptx(_)))
        .map(|r| format!("{r:?}"))
        .filter(|r| !used.contains(r))
        .collect();
    assert!(
        missing.is_empty(),
        "PTX rows no test kernel uses:\n{}",
        missing.join("\n")
    );
}

#[test]
fn vector_add_reads_special_registers_not_params() {
    let k = vector_add();
    let ptx = lower(&k, &TARGETS[1]);
    for reg in ["%tid.x", "%ctaid.x", "%ntid.x", "%nctaid.z"] {
        assert!(ptx.contains(&format!(", {reg};")), "{reg} not read");
    }
    for i in 0..4 {
        assert!(ptx.contains(&format!(".param .u32 vector_add_p{i}")));
    }
    // Float math is rounded per op and the f32 accesses check alignment.
    assert!(ptx.contains("add.rn.f32"));
    assert!(ptx.contains("ld.global.f32"));
    assert!(ptx.contains("st.global.f32"));
    assert!(
        ptx.contains("ld.global.u8"),
        "no byte path for unaligned loads"
    );
    assert!(ptx.contains("cvta.to.global.u64"));
}

#[test]
fn traps_record_code_and_offset_then_return() {
    let k = vector_add();
    let ptx = lower(&k, &TARGETS[0]);
    // Three bounds checks, each its own site with its Wasm offset, and one
    // shared stub that records whichever trapped.
    assert_eq!(ptx.matches("atom.global.cas.b32").count(), 1);
    for offset in [0x40, 0x48, 0x50] {
        assert!(
            ptx.contains(&format!("mov.b64 %trapoffset, {offset};")),
            "offset {offset:#x}"
        );
    }
    let code = KernelTrap::HeapOutOfBounds.code();
    assert_eq!(
        ptx.matches(&format!("mov.b32 %trapcode, {code};")).count(),
        3
    );
    assert!(ptx.contains("[%status], 0, %trapcode;"));
    assert!(ptx.contains("st.global.u64 [%status+8], %trapoffset;"));

    let k = div_traps();
    let ptx = lower(&k, &TARGETS[2]);
    for trap in [KernelTrap::IntegerDivideByZero, KernelTrap::IntegerOverflow] {
        assert!(
            ptx.contains(&format!("mov.b32 %trapcode, {};", trap.code())),
            "{trap}"
        );
    }
}

#[test]
fn shifts_mask_their_amount() {
    let ptx = lower(&int_arith(), &TARGETS[0]);
    assert!(ptx.contains(", 31;\n    shl.b32"));
    assert!(ptx.contains(", 63;\n    shl.b64"));
    assert!(ptx.contains("shf.l.wrap.b32"));
    assert!(ptx.contains("brev.b32"));
    assert!(ptx.contains("popc.b64"));
}

#[test]
fn fmin_fmax_give_wasm_canonical_nan_on_every_target() {
    // min.NaN / max.NaN (sm_80+) return PTX's canonical NaN, 0x7FFFFFFF
    // (measured on an H100), not Wasm's 0x7FC00000: never used.
    let k = float_minmax();
    for target in &TARGETS {
        let ptx = lower(&k, target);
        assert!(!ptx.contains("min.NaN") && !ptx.contains("max.NaN"));
        assert!(ptx.contains("setp.nan.f32") && ptx.contains("setp.nan.f64"));
        assert!(ptx.contains("0f7FC00000") && ptx.contains("0d7FF8000000000000"));
    }
}

#[test]
fn constants_are_bit_exact() {
    let ptx = lower(&float_minmax(), &TARGETS[0]);
    assert!(ptx.contains("mov.f32 %f"));
    assert!(ptx.contains(", 0f7FC00001;"));
    assert!(ptx.contains(", 0d8000000000000000;"));
    let ptx = lower(&int_arith(), &TARGETS[0]);
    assert!(ptx.contains(", 0xFFFFFFFFFFFFFFFF;"));
}

/// Runs a straight line of `mov`s over symbolic register contents.
fn run_moves<'a>(
    lines: impl Iterator<Item = &'a str>,
) -> std::collections::HashMap<String, String> {
    let mut regs = std::collections::HashMap::new();
    for line in lines {
        let rest = line
            .strip_prefix("mov.b32 ")
            .or_else(|| line.strip_prefix("mov.b64 "));
        let Some((dst, src)) = rest.and_then(|r| r.trim_end_matches(';').split_once(", ")) else {
            continue;
        };
        let value = regs
            .get(src)
            .cloned()
            .unwrap_or_else(|| format!("old {src}"));
        regs.insert(dst.to_string(), value);
    }
    regs
}

#[test]
fn swapped_loop_variables_move_through_scratch() {
    let k = fuel_loop();
    // The annotated PTX writes each CLIF instruction above its PTX; the
    // PTX the runtime loads has no such comments.
    let ptx = TARGETS[0]
        .lower_annotated(k.name, &k.func, k.abi)
        .expect("annotated PTX");
    let plain = lower(&k, &TARGETS[0]);
    assert!(!plain.contains("// jump block1"), "{plain}");
    let strip = |text: &str| -> Vec<String> {
        text.lines()
            .map(str::trim)
            .filter(|l| !l.starts_with("//"))
            .map(String::from)
            .collect()
    };
    assert_eq!(strip(&ptx), strip(&plain), "the same PTX but the comments");
    let header = k.func.layout.blocks().nth(1).expect("header");
    let params = k.func.dfg.block_params(header);
    let (a, b) = (
        format!("%r{}", params[2].as_u32()),
        format!("%r{}", params[3].as_u32()),
    );
    // The back edge: the moves after its CLIF comment, up to its bra.
    let start = ptx.rfind("// jump block1").expect("back edge");
    let edge = ptx[start..]
        .lines()
        .skip(1)
        .map(str::trim)
        .take_while(|l| !l.starts_with("bra "));
    let regs = run_moves(edge);
    assert_eq!(regs[&a], format!("old {b}"), "a <- b\n{ptx}");
    assert_eq!(regs[&b], format!("old {a}"), "b <- a\n{ptx}");
    assert!(
        ptx[start..].contains("%tr0"),
        "the swap needs a scratch register"
    );
    // Fuel: the loop header traps when it is 0.
    assert!(ptx.contains(&format!(
        "mov.b32 %trapcode, {};",
        KernelTrap::OutOfFuel.code()
    )));
}

#[test]
fn br_table_bounds_then_brx() {
    let ptx = lower(&br_table(), &TARGETS[0]);
    assert!(ptx.contains("setp.ge.u32"));
    assert!(ptx.contains(".branchtargets BLOCK"));
    assert!(ptx.contains("brx.idx"));
    let ptx = lower(&br_table_args(), &TARGETS[0]);
    assert!(
        ptx.contains(".branchtargets EDGE"),
        "arguments go through stubs"
    );
    assert_eq!(
        ptx.matches("brx.idx").count(),
        1,
        "the empty table is a plain bra"
    );
}

fn refused(k: &Kernel) -> LowerError {
    match TARGETS[0].lower(k.name, &k.func, k.abi) {
        Ok(_) => panic!("{} lowered", k.name),
        Err(e) => e,
    }
}

#[test]
fn unsupported_ops_are_refused_with_name_and_offset() {
    let k = kernel("simd", &[I32], |b, p| {
        at(b, 0x76);
        let x = sample_vector(b, p);
        at(b, 0x77);
        let _ = b.ins().iadd(x, x);
        b.ins().return_(&[]);
    });
    match refused(&k) {
        LowerError::Unsupported(op) => {
            assert_eq!((op.op.as_str(), op.offset), ("splat.i32x4", 0x76));
            assert!(op.reason.contains("SIMD"), "{}", op.reason);
        }
        other => panic!("{other}"),
    }
    let row = table::lookup(Opcode::Iadd, I32X4).expect("iadd.i32x4 row");
    assert!(matches!(row.status, Status::Deferred(why) if why.contains("SIMD")));

    let k = kernel("spectre", &[F32], |b, p| {
        at(b, 0x12);
        let x = p.wasm[0];
        let c = b.ins().iconst(I32, 1);
        let _ = b.ins().select_spectre_guard(c, x, x);
        b.ins().return_(&[]);
    });
    match refused(&k) {
        LowerError::Unsupported(op) => {
            assert_eq!(
                (op.op.as_str(), op.offset),
                ("select_spectre_guard.f32", 0x12)
            );
        }
        other => panic!("{other}"),
    }

    let k = kernel("call", &[I32], |b, _| {
        let sig = b.import_signature(Signature::new(CallConv::SystemV));
        let callee = b.import_function(ExtFuncData {
            name: ExternalName::testcase("callee"),
            signature: sig,
            colocated: true,
            patchable: false,
        });
        at(b, 0x33);
        b.ins().call(callee, &[]);
        b.ins().return_(&[]);
    });
    match refused(&k) {
        LowerError::Unsupported(op) => {
            assert_eq!((op.op.as_str(), op.offset), ("call", 0x33));
            assert!(op.reason.contains("inlines"), "{}", op.reason);
        }
        other => panic!("{other}"),
    }

    // An i16 addition has no row at all.
    let k = kernel("i16_add", &[I32], |b, p| {
        let h = b.ins().ireduce(I16, p.wasm[0]);
        let _ = b.ins().iadd(h, h);
        b.ins().return_(&[]);
    });
    match refused(&k) {
        LowerError::Unsupported(op) => assert_eq!(op.op, "iadd.i16"),
        other => panic!("{other}"),
    }

    let k = kernel("big_endian", &[I32], |b, p| {
        let addr = guest_addr(b, p, p.wasm[0], 0, 4);
        let flags = MemFlagsData::new().with_endianness(Endianness::Big);
        let _ = b.ins().load(I32, flags, addr, 0);
        b.ins().return_(&[]);
    });
    assert!(matches!(refused(&k), LowerError::Unsupported(op) if op.reason.contains("big-endian")));
}

fn sample_vector(b: &mut FunctionBuilder, p: &Params) -> Value {
    b.ins().splat(I32X4, p.wasm[0])
}

#[test]
fn malformed_kernels_are_invalid() {
    let k = vector_add();
    let bad_name = TARGETS[0].lower("vector-add", &k.func, k.abi);
    assert!(matches!(bad_name, Err(LowerError::Invalid(_))));
    let bad_abi = TARGETS[0].lower(k.name, &k.func, KernelAbi { wasm_params: 3 });
    assert!(matches!(bad_abi, Err(LowerError::Invalid(_))));
    let old_isa = PtxLowerer {
        sm: (9, 0),
        isa: (7, 0),
    };
    assert!(matches!(
        old_isa.lower(k.name, &k.func, k.abi),
        Err(LowerError::Invalid(_))
    ));

    // A trap code that is not a KernelTrap.
    let k = kernel("foreign_trap", &[], |b, _| {
        b.ins()
            .trap(cranelift_codegen::ir::TrapCode::user(42).unwrap());
    });
    assert!(matches!(refused(&k), LowerError::Invalid(why) if why.contains("KernelTrap")));
}

#[test]
fn check_accepts_what_the_lowerer_lowers() {
    for k in kernels() {
        table::check(&k.func).unwrap_or_else(|e| panic!("{}: {e}", k.name));
    }
    let lookup = table::lookup(Opcode::Iadd, I32).expect("iadd.i32");
    assert!(matches!(lookup.status, Status::Ptx(_)));
    assert!(table::lookup(Opcode::Iadd, I16).is_none());
    assert!(matches!(
        table::lookup(Opcode::Call, INVALID).map(|r| r.status),
        Some(Status::Rejected(_))
    ));
}

#[test]
fn time_checks_are_lowered_inline() {
    for target in &TARGETS {
        let ptx = lower(&time_loop(), target);
        assert!(ptx.contains(".param .u64 time_loop_time_limit"), "{ptx}");
        assert!(ptx.contains(", [time_loop_time_limit];"), "{ptx}");
        // No PTX call and no memory: each check reads the cycle counter
        // inline, at the thread's start and at the loop header (this body
        // never ends, so no later virtual block starts).
        assert!(
            !instructions(&ptx).any(|i| i.starts_with("call")),
            "a PTX call\n{ptx}"
        );
        assert_eq!(ptx.matches("%clock64;").count(), 2, "{ptx}");
        assert!(!ptx.contains("%globaltimer"));
        // Each trap site reads the code before its compare-and-swap.
        assert_eq!(
            ptx.matches("ld.volatile.global.u32 %tr0, [%status];")
                .count(),
            ptx.matches("atom.global.cas.b32").count()
        );
        let code = KernelTrap::TimeLimit.code();
        assert_eq!(code, 7);
        assert!(
            ptx.contains(&format!("mov.b32 %trapcode, {code};")),
            "{ptx}"
        );

        // The thread's start, and the start of each virtual block after
        // the first, in each copy of the body (the copy for an aligned
        // `$out`).
        let ptx = lower(&time_straight(), target);
        assert_eq!(ptx.matches("%clock64;").count(), 3, "{ptx}");
    }
}

/// `call` of a function named `name` with signature `sig` and `args`; its
/// result (as a clock reading) traps `TimeLimit` past a limit.
fn call_check(
    b: &mut FunctionBuilder,
    name: cranelift_codegen::ir::UserExternalName,
    sig: Signature,
    args: &[Value],
) {
    let sig = b.import_signature(sig);
    let name = b.func.declare_imported_user_function(name);
    let callee = b.import_function(ExtFuncData {
        name: ExternalName::user(name),
        signature: sig,
        colocated: false,
        patchable: false,
    });
    at(b, 0x21);
    let call = b.ins().call(callee, args);
    let now = b.inst_results(call)[0];
    if b.func.dfg.value_type(now) == I64 {
        let over = b.ins().icmp_imm_u(IntCC::UnsignedGreaterThan, now, 1000);
        b.ins().trapnz(over, KernelTrap::TimeLimit.trap_code());
    } else {
        b.ins().trapnz(now, KernelTrap::TimeLimit.trap_code());
    }
    b.ins().return_(&[]);
}

/// A kernel body, for lists of them.
type Body = fn(&mut FunctionBuilder, &Params);

#[test]
fn only_runtime_checks_are_called() {
    use RuntimeCheck::Clock;
    let good = kernel("clock_ok", &[], |b, _| {
        call_check(b, Clock.external_name(), Clock.signature(), &[]);
    });
    let ptx = lower(&good, &TARGETS[0]);
    assert!(ptx.contains("%clock64"));

    fn with_arg(mut sig: Signature) -> Signature {
        sig.params.push(AbiParam::new(I64));
        sig
    }
    fn narrow(mut sig: Signature) -> Signature {
        sig.returns[0] = AbiParam::new(I32);
        sig
    }
    let bad: [(&str, &str, Body); 4] = [
        ("with_an_argument", "call.i64", |b, p| {
            call_check(
                b,
                Clock.external_name(),
                with_arg(Clock.signature()),
                &[p.status],
            );
        }),
        ("wrong_result", "call.i32", |b, _| {
            call_check(b, Clock.external_name(), narrow(Clock.signature()), &[]);
        }),
        ("wrong_namespace", "call.i64", |b, _| {
            let name = cranelift_codegen::ir::UserExternalName {
                namespace: 0,
                index: Clock as u32,
            };
            call_check(b, name, Clock.signature(), &[]);
        }),
        ("no_such_check", "call.i64", |b, _| {
            let name = cranelift_codegen::ir::UserExternalName {
                namespace: RuntimeCheck::NAMESPACE,
                index: RuntimeCheck::ALL.len() as u32,
            };
            call_check(b, name, Clock.signature(), &[]);
        }),
    ];
    for (name, op_name, body) in bad {
        let k = kernel(name, &[], body);
        match refused(&k) {
            LowerError::Unsupported(op) => {
                assert_eq!((op.op.as_str(), op.offset), (op_name, 0x21), "{name}");
                assert!(op.reason.contains("inlines"), "{name}: {}", op.reason);
            }
            other => panic!("{name}: {other}"),
        }
        assert!(table::check(&k.func).is_err(), "{name}");
    }
}

/// A float operation's NaN fix-up is made only where a use can see the
/// NaN's bits, and as few times as that allows (`nan.rs`): a sum feeding
/// only a product loses it, the product that is stored keeps it, a sum
/// passed to a block parameter is fixed where the parameter is stored.
#[test]
fn nan_fixups_stay_where_a_nan_can_be_seen() {
    let fixups = |ptx: &str| ptx.matches("0f7FC00000;").count();
    let chained = kernel("nan_chain", &[F32], |b, p| {
        let x = p.wasm[0];
        let sum = b.ins().fadd(x, x);
        let product = b.ins().fmul(sum, sum);
        let less = b.ins().fcmp(FloatCC::LessThan, sum, x);
        let less = b.ins().uextend(I32, less);
        b.ins().store(little(), product, p.mem_base, 0);
        b.ins().store(little(), less, p.mem_base, 4);
        b.ins().return_(&[]);
    });
    let carried = kernel("nan_block_param", &[F32], |b, p| {
        let x = p.wasm[0];
        let sum = b.ins().fadd(x, x);
        let next = b.create_block();
        let v = b.append_block_param(next, F32);
        b.ins().jump(next, &[sum.into()]);
        b.switch_to_block(next);
        b.ins().store(little(), v, p.mem_base, 0);
        b.ins().return_(&[]);
    });
    for target in &TARGETS {
        let ptx = lower(&chained, target);
        assert_eq!(fixups(&ptx), 1, "only the stored product's:\n{ptx}");
        let ptx = lower(&carried, target);
        assert_eq!(fixups(&ptx), 1, "the parameter reaches a store:\n{ptx}");
        assert!(
            ptx.find("0f7FC00000;") > ptx.find("BLOCK1:"),
            "fixed in the parameter's block:\n{ptx}"
        );
    }
}

/// A loop's float accumulator (`acc = acc + x * x`), stored after the
/// loop: fixed once, after the loop, not at every step, whether the loop's
/// exit reads the header's parameter or the last sum. A sum also stored
/// inside the loop keeps its fix-up where it is made.
#[test]
fn nan_fixups_of_an_accumulator_leave_its_loop() {
    let fixups = |ptx: &str| ptx.matches("0f7FC00000;").count();
    // `exit_reads_sum`: the exit stores the last sum (the loop's body
    // dominates the exit) instead of the header's parameter;
    // `store_inside`: the sum is also stored at every step.
    let accumulate = |name, exit_reads_sum: bool, store_inside: bool| {
        kernel(name, &[F32, I32], move |b, p| {
            let (x, n) = (p.wasm[0], p.wasm[1]);
            let head = b.create_block();
            let acc = b.append_block_param(head, F32);
            let i = b.append_block_param(head, I32);
            let exit = b.create_block();
            let zero = b.ins().f32const(Ieee32::with_float(0.0));
            let first = b.ins().iconst(I32, 0);
            b.ins().jump(head, &[zero.into(), first.into()]);
            b.switch_to_block(head);
            let product = b.ins().fmul(x, x);
            let sum = b.ins().fadd(acc, product);
            if store_inside {
                b.ins().store(little(), sum, p.mem_base, 4);
            }
            let next = b.ins().iadd_imm_u(i, 1);
            let more = b.ins().icmp(IntCC::UnsignedLessThan, next, n);
            b.ins()
                .brif(more, head, &[sum.into(), next.into()], exit, &[]);
            b.switch_to_block(exit);
            let out = if exit_reads_sum { sum } else { acc };
            b.ins().store(little(), out, p.mem_base, 0);
            b.ins().return_(&[]);
        })
    };
    for target in &TARGETS {
        for (name, exit_reads_sum) in [("nan_acc_param", false), ("nan_acc_sum", true)] {
            let ptx = lower(&accumulate(name, exit_reads_sum, false), target);
            assert_eq!(fixups(&ptx), 1, "{name}: once:\n{ptx}");
            let (fix, exit) = (ptx.find("0f7FC00000;"), ptx.find("BLOCK2:"));
            assert!(fix > exit, "{name}: after the loop:\n{ptx}");
        }
        let ptx = lower(&accumulate("nan_acc_stored", true, true), target);
        assert_eq!(fixups(&ptx), 1, "kept where it is made:\n{ptx}");
        let (fix, exit) = (ptx.find("0f7FC00000;"), ptx.find("BLOCK2:"));
        assert!(fix < exit, "in the loop:\n{ptx}");
    }
}

/// An address computed by a long chain of `x = x + x` (operands shared,
/// as a guest's Wasm makes them) in a kernel that places accesses by where
/// their addresses come from (here: one that reads the shared base): the
/// lowerer works out each value's root once, so lowering stays linear
/// (a walk that did not remember them took 2^32 steps an access).
#[test]
fn address_roots_of_shared_operands_take_linear_time() {
    use RuntimeCheck::SharedBase;
    let k = kernel("doubling_chain", &[I32], |b, p| {
        let sig = b.import_signature(SharedBase.signature());
        let name = b
            .func
            .declare_imported_user_function(SharedBase.external_name());
        let callee = b.import_function(ExtFuncData {
            name: ExternalName::user(name),
            signature: sig,
            colocated: false,
            patchable: false,
        });
        b.ins().call(callee, &[]);
        let mut x = p.wasm[0];
        for _ in 0..200 {
            x = b.ins().iadd(x, x);
        }
        let offset = b.ins().uextend(I64, x);
        let addr = b.ins().iadd(p.mem_base, offset);
        let v = b.ins().load(I32, little(), addr, 0);
        b.ins().store(little(), v, addr, 4);
        b.ins().return_(&[]);
    });
    let started = std::time::Instant::now();
    let ptx = lower(&k, &TARGETS[0]);
    assert!(
        ptx.contains("cvta.to.global"),
        "the chain is an offset of mem_base:\n{ptx}"
    );
    assert!(
        started.elapsed() < std::time::Duration::from_secs(10),
        "lowering took {:?}",
        started.elapsed()
    );
}

/// A Wasm kernel's whole-value shared loads and stores use 32-bit shared
/// addresses (`__shmem` plus the offset), a shared atomic the converted
/// generic address; its `u64` offsets `i << 3` need no alignment test, its
/// `i32` atomic at a parameter does. Written out for ptxas.
#[test]
fn shared_accesses_use_32_bit_shared_addresses() {
    let wat = r#"(module
  (import "tensorwasm_kernel" "shared_load_i64" (func $ld (param i32) (result i64)))
  (import "tensorwasm_kernel" "shared_store_f32" (func $st (param i32 f32)))
  (import "tensorwasm_kernel" "shared_atomic_add_i32" (func $add (param i32 i32) (result i32)))
  (memory 1)
  (func (export "shared_kernel") (param $i i32) (param $o i32)
    (call $st (i32.shl (local.get $i) (i32.const 2)) (f32.const 1.5))
    (drop (call $add (local.get $o) (i32.const 1)))
    (i64.store (local.get $o) (call $ld (i32.add (i32.shl (local.get $i) (i32.const 3)) (i32.const 64))))))"#;
    let wasm = wat::parse_str(wat).unwrap();
    let k = translate_kernel(&wasm, 3).unwrap();
    let misaligned = KernelTrap::HeapMisaligned.trap_code().to_string();
    let tests = k
        .function
        .display()
        .to_string()
        .lines()
        .filter(|l| l.contains("trapnz") && l.trim_end().ends_with(misaligned.as_str()))
        .count();
    assert_eq!(tests, 1, "only the atomic's offset may be misaligned");
    for target in &TARGETS {
        let ptx = target.lower(&k.name, &k.function, k.abi).unwrap();
        for access in ["ld.shared.u64", "st.shared.f32"] {
            let line = ptx
                .lines()
                .find(|l| l.contains(access))
                .unwrap_or_else(|| panic!("no {access}:\n{ptx}"));
            assert!(line.contains("[%tr15+0]"), "{line}");
        }
        // Each in both copies of the body (the second for an aligned `$o`).
        assert_eq!(ptx.matches("mov.u32 %tr15, __shmem;").count(), 4, "{ptx}");
        assert_eq!(
            ptx.matches("cvta.to.shared.u64").count(),
            2,
            "the atomic:\n{ptx}"
        );
        let file = format!("shared_kernel.sm_{}{}.ptx", target.sm.0, target.sm.1);
        std::fs::write(out_dir().join(file), &ptx).unwrap();
    }
}
