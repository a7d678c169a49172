//! Oversized and deep kernels against the size limits of `kernel_get`
//! (docs/tenants.md, "Kernel compiles"): the input picks a kernel made of
//! up to eight segments of the shapes a hostile tenant sends — long
//! straight lines, deeply nested blocks and loops, many live values,
//! many memory accesses and trapping divisions, and inlined call trees that
//! multiply a small module into a huge kernel — with sizes drawn around the
//! limits, and a tenant's limits (sometimes above the host's caps). The
//! target builds the module with wasm-encoder, counting by construction the
//! Wasm operators and branch points the kernel has with every callee
//! inlined, and then, on a thread with the compile worker's stack
//! (`tensorwasm_embed::kernel::COMPILE_STACK_BYTES`), as `kernel_get` does:
//!
//! - `translate_kernel_within` must accept exactly the kernels whose size
//!   fits both the tenant's limits and `KernelLimits::HOST`, report that
//!   size, and refuse the others with `LowerError::TooLarge`; any other
//!   answer, a panic or a stack overflow is a crash;
//! - an accepted kernel must lower to PTX (sm_90) and to native code
//!   (`CpuKernelLowerer`), which is what the worker does next.
//!
//! `KERNEL_LIMITS_DEBUG=1` prints every case.

#![no_main]

use arbitrary::{Result as ArbitraryResult, Unstructured};
use libfuzzer_sys::fuzz_target;
use tensorwasm_core::lower::{
    LowerError, Lowerer,
    ptx::PtxLowerer,
    translate::{KernelLimits, KernelSize, translate_kernel_within},
};
use tensorwasm_embed::kernel::{COMPILE_STACK_BYTES, cpu::CpuKernelLowerer};
use wasm_encoder::{
    CodeSection, ExportKind, ExportSection, Function, FunctionSection, Instruction, MemArg,
    MemorySection, MemoryType, Module, TypeSection, ValType,
};

/// Live-value locals the kernel declares (one more is the accumulator).
const POOL: u32 = 4096;

#[derive(Clone, Copy, Debug)]
enum Segment {
    Straight(u32),
    Blocks(u32),
    Loops(u32),
    Live(u32),
    Loads(u32),
    Divisions(u32),
    /// `k` calls of the helper tree's root.
    Calls(u32),
}

/// A size drawn around the host's caps: small, near a power of two, or
/// large.
fn count(u: &mut Unstructured<'_>, max: u32) -> ArbitraryResult<u32> {
    Ok(match u.int_in_range(0..=3u8)? {
        0 => u.int_in_range(0..=64)?,
        1 => {
            let p = 1u32 << u.int_in_range(4..=16u32)?;
            let d = u.int_in_range(0..=4u32)?;
            if u.arbitrary()? { p.saturating_add(d) } else { p.saturating_sub(d) }
        }
        _ => u.int_in_range(0..=max)?,
    })
}

fn segment(u: &mut Unstructured<'_>) -> ArbitraryResult<Segment> {
    Ok(match u.int_in_range(0..=6u8)? {
        0 => Segment::Straight(count(u, 70_000)?),
        1 => Segment::Blocks(count(u, 40_000)?),
        2 => Segment::Loops(count(u, 1_200)?),
        3 => Segment::Live(count(u, POOL)?.min(POOL)),
        4 => Segment::Loads(count(u, 1_200)?),
        5 => Segment::Divisions(count(u, 1_200)?),
        _ => Segment::Calls(count(u, 64)?),
    })
}

struct Case {
    wasm: Vec<u8>,
    size: KernelSize,
    limits: KernelLimits,
    describe: String,
}

fn case(u: &mut Unstructured<'_>) -> ArbitraryResult<Case> {
    let segments: Vec<Segment> = (0..u.int_in_range(1..=8u8)?)
        .map(|_| segment(u))
        .collect::<ArbitraryResult<_>>()?;
    // The helper tree: `depth` functions, each calling the next `fan` times.
    let depth = u.int_in_range(1..=8u32)?;
    let fan = u.int_in_range(1..=6u32)?;
    let limits = KernelLimits {
        operators: u.int_in_range(1..=(1u64 << 17))?,
        branches: u.int_in_range(0..=2048u64)?,
    };

    let mut types = TypeSection::new();
    types.ty().function([ValType::I32], []);
    let mut functions = FunctionSection::new();
    let mut code = CodeSection::new();
    let mut size = KernelSize::default();
    let op = |n: u64, branches: u64, size: &mut KernelSize| {
        size.operators = size.operators.saturating_add(n);
        size.branches = size.branches.saturating_add(branches);
    };

    // Helper sizes, leaf first: the leaf is `local.get 0, i32.const 1,
    // i32.add, drop, end`; each other is `fan` x (`local.get 0`, `call`)
    // plus its callee inlined, then `end`.
    let mut helper_size = vec![KernelSize::default(); depth as usize];
    for j in (0..depth as usize).rev() {
        helper_size[j] = if j + 1 == depth as usize {
            KernelSize { operators: 5, branches: 0 }
        } else {
            let inner = helper_size[j + 1];
            KernelSize {
                operators: u64::from(fan) * (2 + inner.operators) + 1,
                branches: u64::from(fan) * inner.branches,
            }
        };
    }

    let mut kernel = Function::new([(POOL + 1, ValType::I32)]);
    let acc = POOL + 1;
    for s in &segments {
        match *s {
            Segment::Straight(n) => {
                kernel.instruction(&Instruction::LocalGet(0));
                for _ in 0..n {
                    kernel.instruction(&Instruction::I32Const(3));
                    kernel.instruction(&Instruction::I32Mul);
                }
                kernel.instruction(&Instruction::Drop);
                op(2 * u64::from(n) + 2, 0, &mut size);
            }
            Segment::Blocks(n) | Segment::Loops(n) => {
                let is_loop = matches!(s, Segment::Loops(_));
                for _ in 0..n {
                    kernel.instruction(&if is_loop {
                        Instruction::Loop(wasm_encoder::BlockType::Empty)
                    } else {
                        Instruction::Block(wasm_encoder::BlockType::Empty)
                    });
                }
                for _ in 0..n {
                    kernel.instruction(&Instruction::End);
                }
                op(2 * u64::from(n), if is_loop { u64::from(n) } else { 0 }, &mut size);
            }
            Segment::Live(n) => {
                for i in 0..n {
                    kernel.instruction(&Instruction::LocalGet(0));
                    kernel.instruction(&Instruction::I32Const(i as i32 * 7 + 1));
                    kernel.instruction(&Instruction::I32Mul);
                    kernel.instruction(&Instruction::LocalSet(i + 1));
                }
                kernel.instruction(&Instruction::I32Const(0));
                kernel.instruction(&Instruction::I32Const(0));
                for i in 0..n {
                    kernel.instruction(&Instruction::LocalGet(i + 1));
                    kernel.instruction(&Instruction::I32Add);
                }
                kernel.instruction(&Instruction::I32Store(MemArg {
                    offset: 0,
                    align: 2,
                    memory_index: 0,
                }));
                op(6 * u64::from(n) + 3, 1, &mut size);
            }
            Segment::Loads(n) => {
                for i in 0..n {
                    kernel.instruction(&Instruction::LocalGet(acc));
                    kernel.instruction(&Instruction::LocalGet(0));
                    kernel.instruction(&Instruction::I32Load(MemArg {
                        offset: u64::from((i * 4) % 60_000),
                        align: 2,
                        memory_index: 0,
                    }));
                    kernel.instruction(&Instruction::I32Add);
                    kernel.instruction(&Instruction::LocalSet(acc));
                }
                op(5 * u64::from(n), u64::from(n), &mut size);
            }
            Segment::Divisions(n) => {
                kernel.instruction(&Instruction::LocalGet(0));
                for _ in 0..n {
                    kernel.instruction(&Instruction::LocalGet(0));
                    kernel.instruction(&Instruction::I32DivU);
                }
                kernel.instruction(&Instruction::Drop);
                op(2 * u64::from(n) + 2, u64::from(n), &mut size);
            }
            Segment::Calls(k) => {
                for _ in 0..k {
                    kernel.instruction(&Instruction::LocalGet(0));
                    kernel.instruction(&Instruction::Call(1));
                }
                let root = helper_size[0];
                op(
                    u64::from(k).saturating_mul(2 + root.operators),
                    u64::from(k).saturating_mul(root.branches),
                    &mut size,
                );
            }
        }
    }
    kernel.instruction(&Instruction::End);
    op(1, 0, &mut size);

    functions.function(0);
    code.function(&kernel);
    for j in 0..depth {
        functions.function(0);
        let mut helper = Function::new([]);
        if j + 1 == depth {
            helper.instruction(&Instruction::LocalGet(0));
            helper.instruction(&Instruction::I32Const(1));
            helper.instruction(&Instruction::I32Add);
            helper.instruction(&Instruction::Drop);
        } else {
            for _ in 0..fan {
                helper.instruction(&Instruction::LocalGet(0));
                helper.instruction(&Instruction::Call(j + 2));
            }
        }
        helper.instruction(&Instruction::End);
        code.function(&helper);
    }

    let mut memories = MemorySection::new();
    memories.memory(MemoryType {
        minimum: 1,
        maximum: None,
        memory64: false,
        shared: false,
        page_size_log2: None,
    });
    let mut exports = ExportSection::new();
    exports.export("kernel", ExportKind::Func, 0);
    let mut module = Module::new();
    module
        .section(&types)
        .section(&functions)
        .section(&memories)
        .section(&exports)
        .section(&code);
    Ok(Case {
        wasm: module.finish(),
        size,
        limits,
        describe: format!("{segments:?}, helpers {depth} deep x {fan}, limits {limits:?}"),
    })
}

fn check(case: Case) {
    let Case {
        wasm,
        size,
        limits,
        describe,
    } = case;
    let debug = std::env::var_os("KERNEL_LIMITS_DEBUG").is_some();
    let fits = limits.min(KernelLimits::HOST).admits(size);
    match translate_kernel_within(&wasm, 0, limits) {
        Ok(kernel) => {
            assert!(fits, "accepted a kernel of {size:?} past {limits:?}: {describe}");
            assert_eq!(kernel.size, size, "size miscounted: {describe}");
            let ptx = PtxLowerer {
                sm: (9, 0),
                isa: (7, 8),
            }
            .lower(&kernel.name, &kernel.function, kernel.abi);
            assert!(ptx.is_ok(), "PTX lowering refused: {:?}: {describe}", ptx.err());
            let native = CpuKernelLowerer.lower(&kernel.name, &kernel.function, kernel.abi);
            assert!(native.is_ok(), "CPU lowering refused: {:?}: {describe}", native.err());
            if debug {
                eprintln!("accepted {size:?}: {describe}");
            }
        }
        Err(LowerError::TooLarge(at)) => {
            assert!(!fits, "refused a kernel of {size:?} within {limits:?} ({at:?}): {describe}");
            if debug {
                eprintln!("refused {size:?} at {}: {describe}", at.op);
            }
        }
        Err(e) => panic!("unexpected answer for {size:?}: {e}: {describe}"),
    }
}

fuzz_target!(|data: &[u8]| {
    let mut u = Unstructured::new(data);
    let Ok(case) = case(&mut u) else { return };
    // As kernel_get does it: on a thread with the compile worker's stack.
    std::thread::Builder::new()
        .stack_size(COMPILE_STACK_BYTES)
        .spawn(move || check(case))
        .expect("a compile thread")
        .join()
        .unwrap_or_else(|p| std::panic::resume_unwind(p));
});
