//! wasm_kernels' output: the printed table and the JSON record, with the
//! settings it was measured with and notes on how to read each row.

use serde::Serialize;
use tensorwasm_core::DeviceInfo;

use crate::common::{
    DeviceRecord,
    rows::{Column, Row, RowFields, RowRecord},
};

use super::{
    ALPHA, BLOCK, BYTES_PER_ELEMENT, CPU_REPS, GUEST_MEMORY_LIMIT, KERNEL_GET_REPS,
    KERNEL_GET_WARMUP, LAUNCHES, LOOP_A, LOOP_B, LOOP_ITERS, LOOP_KERNEL, LOOP_N, N, Op, REPS,
    SAXPY_KERNEL, SMALL_GUEST_MEMORY_LIMIT, VADD_KERNEL, check::EDGE_VALUES,
};

pub fn table(rows: &[Row]) -> String {
    let columns = [
        Column::median(16),
        Column::min(16),
        Column::max(16),
        Column::ratio(8),
    ];
    crate::common::rows::table(
        rows,
        &columns,
        "ratio: GPU rows, this row's median over the raw row's (the JSON also has the Wasm \
         kernel over the guest's hand PTX);\n       tenant rows, over the trusted guest's Wasm \
         kernel row (what the launch share costs);\n       wasmtime rows, the guest Wasm \
         kernel's median over this row's (its speedup over one CPU core)\n",
    )
}

/// How the tenant's launches were sized.
pub struct TenantRecord {
    /// Its `launch_share_percent`.
    pub share: u64,
    /// The device's thread slots.
    pub slots: u64,
    /// Physical blocks of [`BLOCK`] threads in each of its Wasm-kernel
    /// launches.
    pub blocks: u64,
    /// Its `launch_time_ns`.
    pub launch_time_ns: u64,
}

/// The JSON record: every sample, and what produced it.
#[derive(Serialize)]
pub struct Record<'a> {
    benchmark: &'static str,
    date_utc: String,
    command: String,
    seed: u64,
    jit_cache: &'a str,
    device: DeviceRecord,
    config: Config,
    notes: [&'static str; 10],
    /// Each operation's lowered Wasm kernel, by [`Op::id`], in [`OPS`] order.
    #[serde(serialize_with = "crate::common::ordered_object")]
    lowered_ptx: Vec<(&'static str, &'a str)>,
    rows: Vec<RowRecord<'a>>,
}

/// The settings the record was measured with; f32 values as their bits.
#[derive(Serialize)]
struct Config {
    n: usize,
    block: u32,
    launches: usize,
    reps: usize,
    cpu_reps: usize,
    kernel_get_warmup: usize,
    kernel_get_reps: usize,
    alpha: f32,
    bytes_per_element: f64,
    loop_n: usize,
    loop_iters: u32,
    loop_a_bits: String,
    loop_b_bits: String,
    guest_memory_limit_bytes: usize,
    kernel_get_guest_memory_limit_bytes: usize,
    vadd_kernel_index: u32,
    saxpy_kernel_index: u32,
    loop_kernel_index: u32,
    tenant_launch_share_percent: u64,
    tenant_launch_time_ns: u64,
    thread_slots: u64,
    tenant_physical_blocks: u64,
    edge_value_bits: Vec<String>,
}

/// An f32's bits as the record writes them, `0x` and eight hex digits.
fn f32_bits(x: f32) -> String {
    format!("{:#010x}", x.to_bits())
}

impl<'a> Record<'a> {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        rows: &'a [Row],
        info: &DeviceInfo,
        date_utc: String,
        command: String,
        seed: u64,
        jit_cache: &'a str,
        lowered_ptx: &'a [(Op, String)],
        tenant: &TenantRecord,
    ) -> Record<'a> {
        Record {
            benchmark: "wasm_kernels",
            date_utc,
            command,
            seed,
            jit_cache,
            device: DeviceRecord::new(info),
            config: Config {
                n: N,
                block: BLOCK,
                launches: LAUNCHES,
                reps: REPS,
                cpu_reps: CPU_REPS,
                kernel_get_warmup: KERNEL_GET_WARMUP,
                kernel_get_reps: KERNEL_GET_REPS,
                alpha: ALPHA,
                bytes_per_element: BYTES_PER_ELEMENT,
                loop_n: LOOP_N,
                loop_iters: LOOP_ITERS,
                loop_a_bits: f32_bits(LOOP_A),
                loop_b_bits: f32_bits(LOOP_B),
                guest_memory_limit_bytes: GUEST_MEMORY_LIMIT,
                kernel_get_guest_memory_limit_bytes: SMALL_GUEST_MEMORY_LIMIT,
                vadd_kernel_index: VADD_KERNEL,
                saxpy_kernel_index: SAXPY_KERNEL,
                loop_kernel_index: LOOP_KERNEL,
                tenant_launch_share_percent: tenant.share,
                tenant_launch_time_ns: tenant.launch_time_ns,
                thread_slots: tenant.slots,
                tenant_physical_blocks: tenant.blocks,
                edge_value_bits: EDGE_VALUES.iter().map(|&e| f32_bits(e)).collect(),
            },
            notes: [
                "GPU rows: one sample per repetition of launches launches, then one synchronize \
                 (for a guest its `sync` export, whose completion callback is in the window); vadd \
                 and saxpy in GB/s = bytes_per_element * n * launches / seconds, loop in Giter/s = \
                 loop_iters * loop_n * launches / seconds (an iteration is one f32 multiply and one \
                 f32 add, so GFLOP/s is twice it); the four methods take turns within a \
                 repetition, the first rotating; one untimed launch each before",
                "guest rows run over the guest's linear memory (managed memory, prefetched to the \
                 device with the guest's `prefetch` import before the warm-up); raw rows over \
                 cuMemAlloc buffers; `guest hand PTX` launches the raw row's PTX through the guest \
                 (module_load_ptx, function_get, launch with guest pointers), so Wasm kernel over \
                 guest hand PTX is the lowering alone",
                "Wasm kernels: $vadd_kernel, $saxpy_kernel and $loop_kernel of wasm_kernels.wat \
                 (function indices in config), made by the guest's kernel_get and launched with \
                 eight hidden parameters (memory base and length, status word, fuel, time limit, \
                 the guest's grid); the lowered code checks every access against the memory's \
                 length, reads the SM's cycle counter when a thread starts, at each virtual \
                 block's start and at each loop header (after spending fuel), trapping past the \
                 launch's time limit (lowered_ptx below); the hand PTX does none of this",
                "loop: y = x after loop_iters steps of x = x * a + b (a = loop_a_bits, b = \
                 loop_b_bits as f32), x the first loop_n elements of vector a, y a vector of each \
                 method's own; every launch starts again from x, so the output does not depend on \
                 the launch count; the hand PTX (kernels/bench/mul_add_loop.ptx) has the Wasm \
                 loop's shape with mul.rn.f32 and add.rn.f32, which ptxas may unroll, while the Wasm \
                 kernel's loop header carries the fuel and clock check on every iteration, and its \
                 body a NaN test and canonicalization after each f32 operation",
                "tenant rows: the same Wasm kernels launched by a second guest of the same runtime \
                 whose store is an untrusted tenant's (GuestRuntime::tenant_store with \
                 TenantConfig::untrusted, the default TenantQuota but guest memory up to \
                 guest_memory_limit_bytes), over its own copy of the inputs: each launch runs on \
                 tenant_physical_blocks physical blocks (tenant_launch_share_percent of \
                 thread_slots, over block threads), each running every tenant_physical_blocks-th \
                 of the guest's blocks as virtual blocks, with a time limit of \
                 tenant_launch_time_ns; the trusted guest's launches have one physical block per \
                 virtual block and no time limit (the checks still run); the first ratio is the \
                 tenant row over the trusted guest's Wasm kernel row",
                "checks: every output element of every method (raw, guest Wasm kernel, guest hand \
                 PTX, tenant Wasm kernel, wasmtime) is compared bit for bit with f32 arithmetic on \
                 the CPU after the timed runs; a mismatch ends the run before this file is written",
                "SAXPY runs over the vector add's output: x = a, y starts as a + b, alpha = 1.5; \
                 after k launches y has taken k steps of y = alpha * x + y (k = 1 + reps * \
                 launches on the GPU, 1 + cpu_reps on the CPU), which the check replays in f32 on \
                 the CPU, mul then add",
                "wasmtime rows (vadd and saxpy only: the loop's loop_n * loop_iters dependent \
                 steps would take most of a minute on one core): one export call is one pass over \
                 n elements on the calling thread (a scalar f32 loop), in a runtime with \
                 wasmtime's own memory and default configuration \
                 (GuestRuntime::with_host_memory: guard pages, no explicit bounds checks); one \
                 untimed pass first; their ratio is the guest Wasm kernel's median over theirs",
                "kernel_get rows: call_async of an export that calls kernel_get and loads the \
                 handle; `first` in a fresh GuestRuntime (empty kernel cache: translate, lower, \
                 cuModuleLoadData JIT, cuModuleGetFunction), `cached` from a second store of the \
                 same runtime, `empty_call` an export that does nothing, in that store, \
                 `first_touch` the host's first write to that store's memory (64 bytes at 0; \
                 managed memory, so the driver serves a page fault); building the runtime, \
                 compiling the module, instantiating, each store's first call (which sets up its \
                 fiber stack) and first touch of its memory are not in the kernel_get times; `by \
                 hand` rows time translate_kernel, PtxLowerer::lower and cuModuleLoadDataEx + \
                 cuModuleGetFunction outside the guest, after the guest's calls, in the same \
                 repetition",
                "raw modules are loaded with cuModuleLoadDataEx and no options: sys.rs has no \
                 cuModuleLoadData",
            ],
            lowered_ptx: lowered_ptx
                .iter()
                .map(|(op, text)| (op.id(), text.as_str()))
                .collect(),
            rows: rows
                .iter()
                .map(|r| RowRecord::new(r, RowFields::Range))
                .collect(),
        }
    }
}
