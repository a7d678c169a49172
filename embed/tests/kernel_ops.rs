//! Every scalar Wasm operator as a kernel, against wasmtime: for each
//! operator family (`common/ops.rs`) one guest module holds, per operator,
//! a reference function `ref_<op>` and a kernel `k_<op>` that calls it
//! (inlined by the translator). The guest's kernels are made with
//! `kernel_get`, launched with one thread per input, and waited for; each
//! result is compared, bit for bit, with wasmtime calling `ref_<op>` on the
//! same input in the same store (NaN payloads of arithmetic results
//! excepted). The same checks run on the CPU driver (`cpu::*`, in CI) and on
//! CUDA (`gpu::*`, ignored without a GPU: `--include-ignored` on the device
//! machine), one test per family.
//!
//! # How traps are checked
//!
//! The kernel of a trapping operator stores 1 in its thread's `state` word
//! before the operator and 2 after storing the result. One launch runs
//! every input; then, per input: wasmtime trapped exactly when the state is
//! 1 (the operator was reached but not passed) and the result slot still
//! holds its sentinel (a trapping thread writes nothing); otherwise the
//! state is 2 and the result matches. The launch's `wait` returns `ETRAP`
//! exactly when some input trapped, naming one of the traps wasmtime saw
//! (code and byte offset). Then every trapping input (up to
//! [`SINGLE_LAUNCHES`] per operator) and a few others are launched again
//! alone, one thread each: `wait` must return `ETRAP` naming wasmtime's trap
//! for that input (its kind and the Wasm byte offset of the operator), or 0.
//!
//! Every launch may write only the result slots, the state words and (for
//! stores) the store area and the memory's last bytes (besides the host's
//! own descriptors and handles below `OPERANDS`): the rest of the memory is
//! compared with a snapshot taken before the launch.
//!
//! NaN results of arithmetic operators only need to be NaNs; those outside
//! Wasm's NaN rule (a canonical NaN unless some operand is a non-canonical
//! NaN) are counted and printed as notes, not failures.
//!
//! `ptx_for_every_kernel_and_op_table_coverage` translates every kernel,
//! lowers it to PTX for sm_75, sm_80 and sm_90 into
//! `target/ptx-out/kernel_ops.<op>.sm_XX.ptx` (`scripts/check-ptx.sh`
//! assembles them), and checks that the kernels use every PTX row of the op
//! table but those no Wasm operator produces ([`NO_WASM_SOURCE`]).
//!
//! Inputs are random (`TENSORWASM_SEED` replays a run; the seed is printed)
//! plus edge values listed in `common/ops.rs`.

#[path = "common/ops.rs"]
mod ops;
#[path = "support/ptx_out.rs"]
mod ptx_out;

use std::collections::BTreeSet;
use std::time::Instant;

use cranelift_codegen::ir::condcodes::FloatCC;
use cranelift_codegen::ir::types::{F32, F64, I8, I16, I32, I64};
use cranelift_codegen::ir::{AtomicRmwOp, Opcode, Type};
use ops::{
    ARGS, Compare, Family, Inputs, LOAD_WINDOW, LOAD_WINDOW_LEN, MEM_LEN, MIRROR_DELTA, OPERANDS,
    OUT, OUT_FUNCTION, OUT_LAUNCH, Op, Rng, STATE, STORE_AREA, STORE_AREA_LEN, TAIL,
};
use tensorwasm_core::ManagedAllocator;
use tensorwasm_core::abi::Errno;
use tensorwasm_core::lower::table::{self, Cond, Status};
use tensorwasm_core::lower::translate::translate_kernel;
use tensorwasm_core::lower::{KernelTrap, Lowerer};
use tensorwasm_cpu::CpuDriver;
use tensorwasm_cuda::CudaDriver;
use tensorwasm_embed::kernel::KernelTarget;
use tensorwasm_embed::runtime::{GuestRuntime, GuestState};
use wasmtime::{Func, Instance, Memory, Store, Val};

/// Trapping inputs of one operator launched again alone, one thread each.
const SINGLE_LAUNCHES: usize = 256;
/// Non-trapping inputs of a trapping operator launched alone.
const SINGLE_CLEAN_LAUNCHES: usize = 4;
/// Mismatches listed per operator.
const SHOWN: usize = 6;
/// Threads per block.
const BLOCK: u32 = 256;

// ---------------------------------------------------------------------------
// A guest of one family
// ---------------------------------------------------------------------------

/// What one side did with one input.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    /// Returned (with the result's bits, if it has one).
    Done(Option<u64>),
    /// Trapped: the `KernelTrap` code and the Wasm byte offset.
    Trapped { code: u32, offset: u64 },
}

/// One family's module instantiated in a store of the runtime.
struct Guest<D: tensorwasm_core::GpuDriver + 'static> {
    store: Store<GuestState<D>>,
    instance: Instance,
    memory: Memory,
    wasm: Vec<u8>,
}

impl<D> Guest<D>
where
    D: KernelTarget + ManagedAllocator + Clone + 'static,
    <D as ManagedAllocator>::Region: Sync,
{
    fn new(rt: &GuestRuntime<D>, family: &Family) -> Guest<D> {
        let wat = ops::module_wat(family);
        let module = rt.compile(&wat).unwrap_or_else(|e| {
            panic!("{}: the module does not compile: {e:#}\n{wat}", family.name)
        });
        let wasm = module.source().wasm().to_vec();
        let mut store = rt.store().expect("store");
        let instance =
            futures::executor::block_on(rt.instantiate(&mut store, &module)).expect("instantiate");
        let memory = instance
            .get_memory(&mut store, "memory")
            .expect("memory export");
        assert_eq!(memory.data_size(&store), MEM_LEN as usize);
        Guest {
            store,
            instance,
            memory,
            wasm,
        }
    }

    fn func(&mut self, name: &str) -> Func {
        self.instance
            .get_func(&mut self.store, name)
            .unwrap_or_else(|| panic!("no export {name}"))
    }

    /// Calls an `i32`-returning wrapper.
    fn call(&mut self, name: &str, args: &[Val]) -> i32 {
        let func = self.func(name);
        let mut results = [Val::I32(0)];
        futures::executor::block_on(func.call_async(&mut self.store, args, &mut results))
            .unwrap_or_else(|e| panic!("`{name}` trapped: {e:#}"));
        results[0].unwrap_i32()
    }

    fn write(&mut self, at: u32, bytes: &[u8]) {
        let at = at as usize;
        self.memory.data_mut(&mut self.store)[at..at + bytes.len()].copy_from_slice(bytes);
    }

    fn bytes(&self) -> &[u8] {
        self.memory.data(&self.store)
    }

    fn last_error(&self) -> String {
        self.store.data().cuda.last_error().to_string()
    }

    /// `kernel_get` of function `index`: the function handle.
    fn kernel(&mut self, index: u32, name: &str) -> u64 {
        let rc = self.call(
            "kernel_get",
            &[Val::I32(index as i32), Val::I32(OUT_FUNCTION as i32)],
        );
        assert_eq!(rc, 0, "kernel_get({name}): {}", self.last_error());
        u64_at(self.bytes(), OUT_FUNCTION)
    }

    /// Launches `function` with `n` threads and the six `i32` arguments,
    /// waits, and returns `wait`'s errno (the launch itself must succeed).
    fn launch_wait(&mut self, function: u64, n: u32, args: [u32; 6]) -> i32 {
        let mut descriptors = Vec::new();
        for a in args {
            descriptors.extend(0u32.to_le_bytes()); // tag 0: i32
            descriptors.extend(0u32.to_le_bytes());
            descriptors.extend(u64::from(a).to_le_bytes());
            descriptors.extend(0u64.to_le_bytes());
        }
        self.write(ARGS, &descriptors);
        let blocks = n.div_ceil(BLOCK).max(1);
        let threads = n.clamp(1, BLOCK);
        let mut launch = vec![Val::I64(function as i64)];
        launch.extend(
            [blocks, 1, 1, threads, 1, 1, 0, ARGS, 6, OUT_LAUNCH].map(|v| Val::I32(v as i32)),
        );
        let rc = self.call("launch", &launch);
        assert_eq!(rc, 0, "launch: {}", self.last_error());
        let handle = u64_at(self.bytes(), OUT_LAUNCH);
        self.call("wait", &[Val::I64(handle as i64)])
    }

    /// wasmtime runs `func` (a reference function) on `args`.
    fn reference(&mut self, func: &Func, args: &[Val], has_result: bool) -> Outcome {
        let mut results = vec![Val::I32(0); usize::from(has_result)];
        let Err(error) =
            futures::executor::block_on(func.call_async(&mut self.store, args, &mut results))
        else {
            return Outcome::Done(results.first().map(ops::val_bits));
        };
        let trap = *error
            .downcast_ref::<wasmtime::Trap>()
            .unwrap_or_else(|| panic!("not a trap: {error:?}"));
        let offset = error
            .downcast_ref::<wasmtime::WasmBacktrace>()
            .and_then(|bt| bt.frames().first().and_then(|f| f.module_offset()))
            .expect("a backtrace with the trapping offset") as u64;
        let trap = match trap {
            wasmtime::Trap::UnreachableCodeReached => KernelTrap::Unreachable,
            wasmtime::Trap::MemoryOutOfBounds => KernelTrap::HeapOutOfBounds,
            wasmtime::Trap::IntegerDivisionByZero => KernelTrap::IntegerDivideByZero,
            wasmtime::Trap::BadConversionToInteger => KernelTrap::BadConversionToInteger,
            wasmtime::Trap::IntegerOverflow => KernelTrap::IntegerOverflow,
            wasmtime::Trap::TableOutOfBounds => KernelTrap::TableOutOfBounds,
            wasmtime::Trap::IndirectCallToNull => KernelTrap::IndirectCallToNull,
            wasmtime::Trap::BadSignature => KernelTrap::BadSignature,
            wasmtime::Trap::HeapMisaligned => KernelTrap::HeapMisaligned,
            other => panic!("unexpected wasmtime trap {other:?}"),
        };
        // wasmtime's optimizer turns a branch into a block that only traps
        // into a conditional trap at the branch: `if` (0x04, block type
        // 0x40) over a lone `unreachable` (0x00) reports the `if`. The
        // kernel contract names the operator that traps, the `unreachable`.
        let at = offset as usize;
        let offset = if trap == KernelTrap::Unreachable
            && self.wasm.get(at..at + 3) == Some(&[0x04, 0x40, 0x00][..])
        {
            offset + 2
        } else {
            offset
        };
        Outcome::Trapped {
            code: trap.code(),
            offset,
        }
    }
}

fn u64_at(bytes: &[u8], at: u32) -> u64 {
    let at = at as usize;
    u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"))
}

fn u32_at(bytes: &[u8], at: u32) -> u32 {
    let at = at as usize;
    u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"))
}

/// What `last_error` says after a wait that returned `ETRAP` for `trap`.
fn trap_text(code: u32, offset: u64) -> String {
    let what = KernelTrap::from_code(code).map_or("unknown trap", KernelTrap::description);
    format!("trapped: {what} (code {code}) at offset {offset:#x}")
}

// ---------------------------------------------------------------------------
// One operator
// ---------------------------------------------------------------------------

/// What one operator's check found: its mismatches, and how much ran.
struct Findings {
    op: String,
    lines: Vec<String>,
    count: usize,
    inputs: usize,
    trapped: usize,
    single_launches: usize,
    /// NaN results outside Wasm's NaN rule (`ops::nan_allowed`): reported,
    /// not failed.
    nan_rule: usize,
    nan_example: Option<String>,
}

impl Findings {
    fn add(&mut self, line: String) {
        self.count += 1;
        if self.lines.len() < SHOWN {
            self.lines.push(line);
        }
    }
}

/// The byte ranges a launch of `op` over `n` inputs may write.
fn writable(op: &Op, n: usize) -> Vec<std::ops::Range<usize>> {
    // The host's own area: the launch's descriptors, and the handle
    // `launch` writes.
    let mut ranges = Vec::with_capacity(4);
    ranges.push(0..OPERANDS[0] as usize);
    if op.result.is_some() {
        ranges.push(OUT as usize..OUT as usize + 8 * n);
    }
    if op.traps {
        ranges.push(STATE as usize..STATE as usize + 4 * n);
    }
    if matches!(op.inputs, Inputs::Store { .. }) {
        ranges.push(STORE_AREA as usize..(STORE_AREA + STORE_AREA_LEN) as usize);
        ranges.push(TAIL as usize..MEM_LEN as usize);
    }
    ranges
}

/// The first byte outside `allowed` where `before` and `after` differ.
fn stray_write(before: &[u8], after: &[u8], allowed: &[std::ops::Range<usize>]) -> Option<usize> {
    let mut edges: Vec<usize> = vec![0];
    let mut sorted = allowed.to_vec();
    sorted.sort_by_key(|r| r.start);
    for r in &sorted {
        edges.push(r.start);
        edges.push(r.end);
    }
    edges.push(before.len());
    edges
        .chunks(2)
        .filter(|c| c[0] < c[1])
        .filter(|c| before[c[0]..c[1]] != after[c[0]..c[1]])
        .find_map(|c| (c[0]..c[1]).find(|&i| before[i] != after[i]))
}

fn hex(row: &[u64]) -> String {
    let parts: Vec<String> = row.iter().map(|v| format!("{v:#x}")).collect();
    format!("({})", parts.join(", "))
}

fn show(outcome: Outcome) -> String {
    match outcome {
        Outcome::Done(Some(bits)) => format!("{bits:#x}"),
        Outcome::Done(None) => "returned".into(),
        Outcome::Trapped { code, offset } => format!("trap {code} at {offset:#x}"),
    }
}

/// Runs operator `j` of the family as a kernel over all its inputs and
/// compares with wasmtime; returns the mismatches.
fn check_op<D>(guest: &mut Guest<D>, j: usize, op: &Op) -> Findings
where
    D: KernelTarget + ManagedAllocator + Clone + 'static,
    <D as ManagedAllocator>::Region: Sync,
{
    let mut rng = Rng::new(&op.name);
    let rows = ops::inputs(op, &mut rng);
    let n = rows.len();
    let mut findings = Findings {
        op: op.name.clone(),
        lines: Vec::new(),
        count: 0,
        inputs: n,
        trapped: 0,
        single_launches: 0,
        nan_rule: 0,
        nan_example: None,
    };

    // Operands, a sentinel in every result slot, zero state words; for
    // stores, the same random bytes in the store area and its mirror.
    for (p, &array) in OPERANDS.iter().enumerate().take(op.params.len()) {
        let bytes: Vec<u8> = rows.iter().flat_map(|r| r[p].to_le_bytes()).collect();
        guest.write(array, &bytes);
    }
    let sentinel = rng.next_u64() | 0x0101_0101_0101_0101;
    guest.write(OUT, &sentinel.to_le_bytes().repeat(n));
    guest.write(STATE, &vec![0; 4 * n]);
    if let Inputs::Store { .. } = op.inputs {
        let area: Vec<u8> = (0..STORE_AREA_LEN).map(|_| rng.next_u64() as u8).collect();
        guest.write(STORE_AREA, &area);
        guest.write(STORE_AREA + MIRROR_DELTA, &area);
        let tail: Vec<u8> = (0..MEM_LEN - TAIL).map(|_| rng.next_u64() as u8).collect();
        guest.write(TAIL, &tail);
    }

    // The kernel, once over every input.
    let function = guest.kernel(ops::kernel_index(j), &op.name);
    let before = guest.bytes().to_vec();
    let args = [OPERANDS[0], OPERANDS[1], OPERANDS[2], OUT, STATE, n as u32];
    let rc = guest.launch_wait(function, n as u32, args);
    let launch_error = guest.last_error();
    let after = guest.bytes().to_vec();
    if let Some(at) = stray_write(&before, &after, &writable(op, n)) {
        findings.add(format!(
            "the launch wrote outside its results at {at:#x}: {:#04x} -> {:#04x}",
            before[at], after[at]
        ));
    }

    // wasmtime, input by input, on the memory as the launch found it: the
    // store area's mirror, and the tail put back (an atomic
    // read-modify-write there is not idempotent, as a store is).
    if let Inputs::Store { .. } = op.inputs {
        guest.write(TAIL, &before[TAIL as usize..MEM_LEN as usize]);
    }
    let reference = guest.func(&op.ref_export());
    let mut expected = Vec::with_capacity(n);
    for row in &rows {
        let mut row = row.clone();
        if let Inputs::Store { offset, .. } = op.inputs {
            // Into the mirror, for stores into the store area.
            let ea = row[0] + u64::from(offset);
            if (u64::from(STORE_AREA)..u64::from(STORE_AREA + STORE_AREA_LEN)).contains(&ea) {
                row[0] += u64::from(MIRROR_DELTA);
            }
        }
        let vals: Vec<Val> = op.params.iter().zip(&row).map(|(t, &b)| t.val(b)).collect();
        expected.push(guest.reference(&reference, &vals, op.result.is_some()));
    }
    let mirrored = guest.bytes().to_vec();

    // Per input: trapped or not, and the result.
    let mut traps = BTreeSet::new();
    for (i, (row, want)) in rows.iter().zip(&expected).enumerate() {
        let slot = u64_at(&after, OUT + 8 * i as u32);
        let state = u32_at(&after, STATE + 4 * i as u32);
        let context = |got: String| {
            format!(
                "input {i} {}: wasmtime {}, kernel {got}",
                hex(row),
                show(*want)
            )
        };
        if let Outcome::Trapped { code, offset } = *want {
            traps.insert((code, offset));
            if state != 1 || (op.result.is_some() && slot != sentinel) {
                findings.add(context(format!(
                    "did not trap (state {state}, result slot {slot:#x})"
                )));
            }
            continue;
        }
        if op.traps && state != 2 {
            findings.add(context(format!("state {state} (1: trapped, 0: never ran)")));
            continue;
        }
        match (op.result, *want) {
            (Some(t), Outcome::Done(Some(bits))) => {
                let got = slot & t.mask();
                let same = got == bits
                    || (op.compare == Compare::AnyNan && t.is_nan(got) && t.is_nan(bits));
                if !same {
                    findings.add(context(format!("{got:#x}")));
                } else if t.is_nan(got) && got != bits {
                    // Not a failure (Wasm leaves the payload open, and the
                    // comparison asks only for a NaN), but worth knowing:
                    // Wasm's rule narrows which NaNs are allowed.
                    let operands: Vec<(ops::Ty, u64)> =
                        op.params.iter().copied().zip(row.iter().copied()).collect();
                    if !ops::nan_allowed(t, got, &operands) {
                        findings.nan_rule += 1;
                        findings
                            .nan_example
                            .get_or_insert_with(|| context(format!("{got:#x}")));
                    }
                } else if slot & !t.mask() != sentinel & !t.mask() {
                    findings.add(context(format!("{slot:#x} (wrote past the result)")));
                }
            }
            (None, Outcome::Done(None)) => {}
            _ => unreachable!("a reference outcome of the wrong shape"),
        }
        // A store, or an atomic read-modify-write: the bytes it left in the
        // thread's 16-byte window, or in the tail.
        if let Inputs::Store { offset, .. } = op.inputs {
            let ea = (row[0] + u64::from(offset)) as usize;
            let (kernel, wasmtime) = if ea >= TAIL as usize {
                let r = TAIL as usize..MEM_LEN as usize;
                (&after[r.clone()], &mirrored[r])
            } else {
                let start = STORE_AREA as usize + 16 * i;
                let mirror = start + MIRROR_DELTA as usize;
                (&after[start..start + 16], &mirrored[mirror..mirror + 16])
            };
            if kernel != wasmtime {
                findings.add(context(format!(
                    "stored bytes {kernel:02x?}, wasmtime's {wasmtime:02x?}"
                )));
            }
        }
    }

    // The inputs must exercise the trap, and (but where the offset alone
    // puts every access out of bounds) its absence.
    findings.trapped = expected
        .iter()
        .filter(|o| matches!(o, Outcome::Trapped { .. }))
        .count();
    let always = matches!(
        op.inputs,
        Inputs::Load { offset, .. } | Inputs::Store { offset, .. } if offset > MEM_LEN
    );
    if op.traps && (findings.trapped == 0 || (findings.trapped == n && !always)) {
        findings.add(format!(
            "{} of {n} inputs trap in wasmtime: the inputs do not exercise the trap",
            findings.trapped
        ));
    }
    if !op.traps && findings.trapped > 0 {
        findings.add(format!(
            "{} inputs trap in wasmtime, but the kernel keeps no state words",
            findings.trapped
        ));
    }

    // The launch's errno: ETRAP naming one of wasmtime's traps, or 0.
    if traps.is_empty() {
        if rc != 0 {
            findings.add(format!(
                "wait returned {rc} with no trapping input: {launch_error}"
            ));
        }
    } else if rc != Errno::ETRAP.code() {
        findings.add(format!(
            "wait returned {rc}, not ETRAP, with {} trapping inputs: {launch_error}",
            findings.trapped
        ));
    } else if !traps
        .iter()
        .any(|&(code, offset)| launch_error.contains(&trap_text(code, offset)))
    {
        findings.add(format!(
            "the launch's trap is none of wasmtime's {traps:?}: {launch_error}"
        ));
    }

    // Trapping inputs one at a time: the trap's kind and offset.
    if op.traps {
        let trapping = (0..n).filter(|&i| matches!(expected[i], Outcome::Trapped { .. }));
        let clean = (0..n).filter(|&i| !matches!(expected[i], Outcome::Trapped { .. }));
        let picked: Vec<usize> = trapping
            .take(SINGLE_LAUNCHES)
            .chain(clean.take(SINGLE_CLEAN_LAUNCHES))
            .collect();
        findings.single_launches = picked.len();
        for i in picked {
            let i32s = i as u32;
            let args = [
                OPERANDS[0] + 8 * i32s,
                OPERANDS[1] + 8 * i32s,
                OPERANDS[2] + 8 * i32s,
                OUT + 8 * i32s,
                STATE + 4 * i32s,
                1,
            ];
            let rc = guest.launch_wait(function, 1, args);
            let text = guest.last_error();
            let ok = match expected[i] {
                Outcome::Trapped { code, offset } => {
                    rc == Errno::ETRAP.code() && text.contains(&trap_text(code, offset))
                }
                Outcome::Done(_) => rc == 0,
            };
            if !ok {
                findings.add(format!(
                    "input {i} {} alone: wasmtime {}, wait returned {rc}: {text}",
                    hex(&rows[i]),
                    show(expected[i])
                ));
            }
        }
    }
    findings
}

// ---------------------------------------------------------------------------
// A family, on any driver
// ---------------------------------------------------------------------------

/// Checks every operator of `family` on `rt`'s driver against wasmtime and
/// panics with every mismatch found.
fn check_all<D>(rt: &GuestRuntime<D>, family: &Family)
where
    D: KernelTarget + ManagedAllocator + Clone + 'static,
    <D as ManagedAllocator>::Region: Sync,
{
    let start = Instant::now();
    let mut guest = Guest::new(rt, family);
    let memory = guest.bytes().len();
    // Random bytes, with NaN payloads planted, where loads read.
    let mut rng = Rng::new(family.name);
    let mut window: Vec<u8> = (0..LOAD_WINDOW_LEN).map(|_| rng.next_u64() as u8).collect();
    window[8..12].copy_from_slice(&0x7fa0_0001u32.to_le_bytes());
    window[16..24].copy_from_slice(&0x7ff4_0000_0000_0001u64.to_le_bytes());
    window[33..37].copy_from_slice(&0xff81_2345u32.to_le_bytes());
    window[41..49].copy_from_slice(&0xfff8_0000_0001_2345u64.to_le_bytes());
    guest.write(LOAD_WINDOW, &window);
    let tail: Vec<u8> = (0..memory as u32 - TAIL)
        .map(|_| rng.next_u64() as u8)
        .collect();
    guest.write(TAIL, &tail);

    let mut failures = Vec::new();
    let (mut inputs, mut trapped, mut singles) = (0, 0, 0);
    for (j, op) in family.ops.iter().enumerate() {
        let mut findings = check_op(&mut guest, j, op);
        inputs += findings.inputs;
        trapped += findings.trapped;
        singles += findings.single_launches;
        // Wasm's NaN rule (a canonical NaN when no operand is a
        // non-canonical NaN) is enforced, not just "is a NaN".
        if let Some(example) = findings.nan_example.clone() {
            findings.add(format!(
                "{} NaN results are NaNs but not ones Wasm's NaN rule allows (canonical for \
                 canonical or no NaN operands); e.g. {example}",
                findings.nan_rule
            ));
        }
        if findings.count > 0 {
            failures.push(findings);
        }
    }
    eprintln!(
        "{}: {} operators, {inputs} inputs ({trapped} trap in wasmtime), \
         {singles} one-thread launches, {:.1?}",
        family.name,
        family.ops.len(),
        start.elapsed()
    );
    if !failures.is_empty() {
        let mut text = format!(
            "{}: {} of {} operators differ from wasmtime (TENSORWASM_SEED={}):\n",
            family.name,
            failures.len(),
            family.ops.len(),
            ops::seed()
        );
        for f in &failures {
            text.push_str(&format!("  {} ({} mismatches):\n", f.op, f.count));
            for line in &f.lines {
                text.push_str(&format!("    {line}\n"));
            }
        }
        panic!("{text}");
    }
}

// ---------------------------------------------------------------------------
// The tests: each family on the CPU driver and on CUDA
// ---------------------------------------------------------------------------

/// Bytes one guest memory may reserve.
const MEMORY_LIMIT: usize = 16 << 20;

fn cpu_runtime() -> GuestRuntime<CpuDriver> {
    let driver = CpuDriver::with_capacity(256 << 20).expect("CPU driver");
    GuestRuntime::new(driver, MEMORY_LIMIT).expect("runtime")
}

fn cuda_runtime() -> GuestRuntime<CudaDriver> {
    let driver = CudaDriver::new(0).expect("a CUDA device");
    GuestRuntime::new(driver, MEMORY_LIMIT).expect("runtime")
}

/// The CUDA tests run one at a time, so a failure's output is its own.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn on_gpu(family: &str) {
    let _serial = SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    check_all(&cuda_runtime(), &ops::family(family));
}

macro_rules! family_tests {
    ($($family:ident),* $(,)?) => {
        /// Each family on the CPU driver.
        mod cpu {
            $(
                #[test]
                fn $family() {
                    super::check_all(&super::cpu_runtime(), &super::ops::family(stringify!($family)));
                }
            )*
        }

        /// Each family on CUDA.
        mod gpu {
            $(
                #[test]
                #[ignore = "needs a CUDA GPU"]
                fn $family() {
                    super::on_gpu(stringify!($family));
                }
            )*
        }

        #[test]
        fn every_family_has_tests() {
            let tested = [$(stringify!($family)),*];
            let names: Vec<&str> = ops::families().iter().map(|f| f.name).collect();
            assert_eq!(names, tested);
        }
    };
}

family_tests!(
    int32,
    int64,
    float32,
    float64,
    conversions,
    traps,
    select_and_constants,
    loads,
    stores,
    control,
    compiler_output,
    atomics,
);

// ---------------------------------------------------------------------------
// PTX for every kernel, and the op table's coverage
// ---------------------------------------------------------------------------

/// PTX rows of the op table that no Wasm operator produces, so the check
/// below cannot ask for them (`core/tests/ptx.rs` lowers each from
/// hand-built CLIF): `(opcode, controlling type, free operand type,
/// condition)`. If the translator starts emitting one, the check fails
/// until it is removed here.
const NO_WASM_SOURCE: &[(Opcode, Type, Option<Type>, Option<Cond>)] = &[
    // Comparisons make i8 flags and constants are i32/i64: no i8 constant.
    (Opcode::Iconst, I8, None, None),
    // Wasm has no bitwise not (`x ^ -1` is a bxor; only the atomics'
    // compare-and-swap loops invert their i32 masks), and the translator
    // combines i8 flags with band (guards) and bor (merged bounds tests)
    // only.
    (Opcode::Bnot, I64, None, None),
    (Opcode::Bnot, I8, None, None),
    (Opcode::Bxor, I8, None, None),
    // A Wasm shift or rotate amount has the type of the value shifted.
    (Opcode::Ishl, I32, Some(I64), None),
    (Opcode::Ushr, I32, Some(I64), None),
    (Opcode::Sshr, I32, Some(I64), None),
    (Opcode::Rotl, I32, Some(I64), None),
    (Opcode::Rotr, I32, Some(I64), None),
    (Opcode::Ishl, I64, Some(I32), None),
    (Opcode::Ushr, I64, Some(I32), None),
    (Opcode::Sshr, I64, Some(I32), None),
    (Opcode::Rotl, I64, Some(I32), None),
    (Opcode::Rotr, I64, Some(I32), None),
    // Narrow loads are uload8/uload16 (and sextend for extend8_s/16_s):
    // only i8 flags are ever zero-extended, and to i32.
    (Opcode::Uextend, I32, Some(I16), None),
    (Opcode::Uextend, I64, Some(I8), None),
    (Opcode::Uextend, I64, Some(I16), None),
    // Wasm compares floats with eq, ne, lt, gt, le, ge only (and the trunc
    // guards use ne, le, ge): CLIF's other conditions have no source.
    fcmp(F32, FloatCC::Ordered),
    fcmp(F32, FloatCC::Unordered),
    fcmp(F32, FloatCC::OrderedNotEqual),
    fcmp(F32, FloatCC::UnorderedOrEqual),
    fcmp(F32, FloatCC::UnorderedOrLessThan),
    fcmp(F32, FloatCC::UnorderedOrLessThanOrEqual),
    fcmp(F32, FloatCC::UnorderedOrGreaterThan),
    fcmp(F32, FloatCC::UnorderedOrGreaterThanOrEqual),
    fcmp(F64, FloatCC::Ordered),
    fcmp(F64, FloatCC::Unordered),
    fcmp(F64, FloatCC::OrderedNotEqual),
    fcmp(F64, FloatCC::UnorderedOrEqual),
    fcmp(F64, FloatCC::UnorderedOrLessThan),
    fcmp(F64, FloatCC::UnorderedOrLessThanOrEqual),
    fcmp(F64, FloatCC::UnorderedOrGreaterThan),
    fcmp(F64, FloatCC::UnorderedOrGreaterThanOrEqual),
    // Wasm's select condition is an i32; only the translator's srem guard
    // selects on an i8 flag, between integers.
    (Opcode::Select, F32, Some(I8), None),
    (Opcode::Select, F64, Some(I8), None),
    (Opcode::Select, I32, Some(I64), None),
    (Opcode::Select, I64, Some(I64), None),
    (Opcode::Select, F32, Some(I64), None),
    (Opcode::Select, F64, Some(I64), None),
    // The translator traps with trapnz on i8 flags (a time check's
    // comparison among them), and with trapz on a divisor (i32/i64) or on
    // the fuel (i64).
    (Opcode::Trapnz, I32, None, None),
    (Opcode::Trapnz, I64, None, None),
    (Opcode::Trapz, I8, None, None),
    // The fused multiply-add is the `fma_f32`/`fma_f64` intrinsics
    // (`kernel_coop` runs them), not a Wasm operator.
    (Opcode::Fma, F32, None, None),
    (Opcode::Fma, F64, None, None),
    // Signed and unsigned min and max are the SDK's atomic intrinsics
    // (`kernel_atomics` lowers them), not Wasm operators.
    (
        Opcode::AtomicRmw,
        I32,
        None,
        Some(Cond::Rmw(AtomicRmwOp::Smin)),
    ),
    (
        Opcode::AtomicRmw,
        I32,
        None,
        Some(Cond::Rmw(AtomicRmwOp::Smax)),
    ),
    (
        Opcode::AtomicRmw,
        I32,
        None,
        Some(Cond::Rmw(AtomicRmwOp::Umin)),
    ),
    (
        Opcode::AtomicRmw,
        I32,
        None,
        Some(Cond::Rmw(AtomicRmwOp::Umax)),
    ),
];

const fn fcmp(ty: Type, cc: FloatCC) -> (Opcode, Type, Option<Type>, Option<Cond>) {
    (Opcode::Fcmp, ty, None, Some(Cond::Float(cc)))
}

/// A row's key, as [`NO_WASM_SOURCE`] lists it.
fn key(row: &table::Row) -> String {
    format!("{:?}", (row.opcode, row.ty, row.operand, row.cond))
}

#[test]
fn ptx_for_every_kernel_and_op_table_coverage() {
    let out = ptx_out::ptx_out_dir();
    let targets = ptx_out::ptx_targets();
    let mut used = BTreeSet::new();
    let mut written = 0;
    for family in ops::families() {
        let wasm = wat::parse_str(ops::module_wat(&family)).expect("the module parses");
        for (j, op) in family.ops.iter().enumerate() {
            let kernel = translate_kernel(&wasm, ops::kernel_index(j))
                .unwrap_or_else(|e| panic!("{}: {e}", op.name));
            assert_eq!(kernel.name, op.kernel_export());
            let func = &kernel.function;
            for block in func.layout.blocks() {
                for inst in func.layout.block_insts(block) {
                    let row = table::row_for(func, inst).expect("a row");
                    used.insert(format!("{row:?}"));
                }
            }
            for target in &targets {
                let ptx = target
                    .lower(&kernel.name, func, kernel.abi)
                    .unwrap_or_else(|e| {
                        panic!("{} for sm_{}{}: {e}", op.name, target.sm.0, target.sm.1)
                    });
                assert!(ptx.contains(&format!(".visible .entry {}(", kernel.name)));
                if let Some(dir) = &out {
                    let file = format!(
                        "kernel_ops.{}.sm_{}{}.ptx",
                        op.name, target.sm.0, target.sm.1
                    );
                    std::fs::write(dir.join(file), &ptx).expect("write PTX");
                    written += 1;
                }
            }
        }
    }
    eprintln!("{written} PTX files written");
    let missing: BTreeSet<String> = table::rows()
        .filter(|r| matches!(r.status, Status::Ptx(_)))
        .filter(|r| !used.contains(&format!("{r:?}")))
        .map(key)
        .collect();
    let expected: BTreeSet<String> = NO_WASM_SOURCE.iter().map(|k| format!("{k:?}")).collect();
    assert_eq!(
        missing, expected,
        "PTX rows the Wasm kernels do not reach, against those listed as having no Wasm source"
    );
}
