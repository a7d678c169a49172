//! The GPU programming model in Wasm kernels (docs/kernels.md, "The GPU
//! programming model"): shared memory, barriers and warp operations,
//! through the whole runtime, on the CPU driver (CI) and CUDA (ignored
//! without a GPU). Cross-thread results are checked against values worked
//! out here from the documented semantics:
//!
//! - a barrier orders shared stores before other threads' loads; a block
//!   tree reduction with shared atomics; shared memory is zeroed at every
//!   virtual block (a grid of many virtual blocks over few physical ones);
//!   every shared atomic from many threads;
//! - every shuffle mode (`i32`, `f32`, sources out of range), lane id,
//!   warp size and the votes, in convergent code, and in a branch only the
//!   even lanes take (the odd lanes do not take part);
//! - the adversarial kernels: barriers in divergent branches, a trap before
//!   a barrier, an out-of-bounds shared access, a misaligned shared atomic,
//!   an endless loop around a barrier, one thread spinning while the others
//!   wait at a barrier. Each ends with its trap (or its result), and the
//!   next launch is right;
//! - the fused multiply-adds (`fma_f32`, `fma_f64`) in kernels and in the
//!   guest's own code, against the host's `mul_add`.

use tensorwasm_core::ManagedAllocator;
use tensorwasm_core::abi::Errno;
use tensorwasm_core::lower::KernelTrap;
use tensorwasm_cpu::CpuDriver;
use tensorwasm_cuda::CudaDriver;
use tensorwasm_embed::kernel::KernelTarget;
use tensorwasm_embed::runtime::{GuestRuntime, GuestState};
use tensorwasm_embed::wasi_cuda::WasiCudaLimits;
use wasmtime::{Instance, Store};

/// Where kernels read and write.
const IN: u32 = 0x1_0000;
const OUT: u32 = 0x10_0000;
/// Bytes of output the tests clear before each launch.
const OUT_BYTES: usize = 0x20_0000;
/// Each thread's fuel: small, so the endless loops end soon.
const FUEL: u64 = 4096;

/// The guest's imports, in index order.
const IMPORTS: &[(&str, &str, &str)] = &[
    ("wasi_cuda", "kernel_get", "(param i32 i32) (result i32)"),
    (
        "wasi_cuda",
        "launch",
        "(param i64 i32 i32 i32 i32 i32 i32 i32 i32 i32 i32) (result i32)",
    ),
    ("wasi_cuda", "wait", "(param i64) (result i32)"),
    ("tensorwasm_kernel", "thread_idx_x", "(result i32)"),
    ("tensorwasm_kernel", "block_idx_x", "(result i32)"),
    ("tensorwasm_kernel", "block_dim_x", "(result i32)"),
    ("tensorwasm_kernel", "grid_dim_x", "(result i32)"),
    ("tensorwasm_kernel", "shared_size", "(result i32)"),
    (
        "tensorwasm_kernel",
        "shared_load_i32",
        "(param i32) (result i32)",
    ),
    ("tensorwasm_kernel", "shared_store_i32", "(param i32 i32)"),
    (
        "tensorwasm_kernel",
        "shared_load_f64",
        "(param i32) (result f64)",
    ),
    ("tensorwasm_kernel", "shared_store_f64", "(param i32 f64)"),
    (
        "tensorwasm_kernel",
        "shared_atomic_add_i32",
        "(param i32 i32) (result i32)",
    ),
    (
        "tensorwasm_kernel",
        "shared_atomic_max_i32",
        "(param i32 i32) (result i32)",
    ),
    (
        "tensorwasm_kernel",
        "shared_atomic_min_u32",
        "(param i32 i32) (result i32)",
    ),
    (
        "tensorwasm_kernel",
        "shared_atomic_or_i32",
        "(param i32 i32) (result i32)",
    ),
    (
        "tensorwasm_kernel",
        "shared_atomic_cas_i32",
        "(param i32 i32 i32) (result i32)",
    ),
    (
        "tensorwasm_kernel",
        "shared_atomic_add_f32",
        "(param i32 f32) (result f32)",
    ),
    (
        "tensorwasm_kernel",
        "shared_atomic_add_i64",
        "(param i32 i64) (result i64)",
    ),
    (
        "tensorwasm_kernel",
        "atomic_add_i32",
        "(param i32 i32) (result i32)",
    ),
    (
        "tensorwasm_kernel",
        "atomic_add_f32",
        "(param i32 f32) (result f32)",
    ),
    ("tensorwasm_kernel", "barrier", ""),
    ("tensorwasm_kernel", "lane_id", "(result i32)"),
    ("tensorwasm_kernel", "warp_size", "(result i32)"),
    (
        "tensorwasm_kernel",
        "shfl_idx_i32",
        "(param i32 i32) (result i32)",
    ),
    (
        "tensorwasm_kernel",
        "shfl_up_i32",
        "(param i32 i32) (result i32)",
    ),
    (
        "tensorwasm_kernel",
        "shfl_down_i32",
        "(param i32 i32) (result i32)",
    ),
    (
        "tensorwasm_kernel",
        "shfl_xor_i32",
        "(param i32 i32) (result i32)",
    ),
    (
        "tensorwasm_kernel",
        "shfl_idx_f32",
        "(param f32 i32) (result f32)",
    ),
    (
        "tensorwasm_kernel",
        "shfl_up_f32",
        "(param f32 i32) (result f32)",
    ),
    (
        "tensorwasm_kernel",
        "shfl_down_f32",
        "(param f32 i32) (result f32)",
    ),
    (
        "tensorwasm_kernel",
        "shfl_xor_f32",
        "(param f32 i32) (result f32)",
    ),
    ("tensorwasm_kernel", "ballot", "(param i32) (result i32)"),
    ("tensorwasm_kernel", "any", "(param i32) (result i32)"),
    ("tensorwasm_kernel", "all", "(param i32) (result i32)"),
    (
        "tensorwasm_kernel",
        "fma_f32",
        "(param f32 f32 f32) (result f32)",
    ),
    (
        "tensorwasm_kernel",
        "fma_f64",
        "(param f64 f64 f64) (result f64)",
    ),
];

/// The kernels, `(param $a i32) (param $b i32)`, in function order after
/// `go`. `$t` is the thread, `$g` the global thread id, `$lane` the lane.
const KERNELS: &[(&str, &str)] = &[
    // out[g] = the value thread (t + 1) % n stored before the barrier.
    (
        "rotate",
        "(call $shared_store_i32 (i32.shl (local.get $t) (i32.const 2)) (local.get $g))
         (call $barrier)
         (i32.store (i32.add (local.get $b) (i32.shl (local.get $g) (i32.const 2)))
           (call $shared_load_i32 (i32.shl (i32.rem_u (i32.add (local.get $t) (i32.const 1))
             (call $block_dim_x)) (i32.const 2))))",
    ),
    // Tree reduction of the block's i32s at a; b[1 + block] = its sum,
    // b[0] += every block's sum (an atomic per block), and
    // b[1 + grid + block] = how many threads counted themselves in with a
    // shared atomic.
    (
        "reduce",
        "(call $shared_store_i32 (i32.shl (local.get $t) (i32.const 2))
           (i32.load (i32.add (local.get $a) (i32.shl (local.get $g) (i32.const 2)))))
         (drop (call $shared_atomic_add_i32 (i32.shl (call $block_dim_x) (i32.const 2)) (i32.const 1)))
         (local.set $s (i32.shr_u (call $block_dim_x) (i32.const 1)))
         (block $done (loop $halve
           (br_if $done (i32.eqz (local.get $s)))
           (call $barrier)
           (if (i32.lt_u (local.get $t) (local.get $s)) (then
             (call $shared_store_i32 (i32.shl (local.get $t) (i32.const 2))
               (i32.add (call $shared_load_i32 (i32.shl (local.get $t) (i32.const 2)))
                 (call $shared_load_i32 (i32.shl (i32.add (local.get $t) (local.get $s)) (i32.const 2)))))))
           (local.set $s (i32.shr_u (local.get $s) (i32.const 1)))
           (br $halve)))
         (if (i32.eqz (local.get $t)) (then
           (i32.store (i32.add (local.get $b) (i32.shl (i32.add (call $block_idx_x) (i32.const 1)) (i32.const 2)))
             (call $shared_load_i32 (i32.const 0)))
           (i32.store (i32.add (local.get $b) (i32.shl (i32.add (i32.add (call $grid_dim_x) (call $block_idx_x))
             (i32.const 1)) (i32.const 2)))
             (call $shared_load_i32 (i32.shl (call $block_dim_x) (i32.const 2))))
           (drop (call $atomic_add_i32 (local.get $b) (call $shared_load_i32 (i32.const 0))))))",
    ),
    // out[g] = what the thread finds in its shared words at the start of
    // its block (0, and 0.0), before it writes them.
    (
        "zeroed",
        "(i32.store (i32.add (local.get $b) (i32.shl (local.get $g) (i32.const 2)))
           (i32.add (call $shared_load_i32 (i32.shl (local.get $t) (i32.const 2)))
             (i32.trunc_f64_s (call $shared_load_f64 (i32.add (i32.shl (call $block_dim_x) (i32.const 2))
               (i32.shl (local.get $t) (i32.const 3)))))))
         (call $shared_store_i32 (i32.shl (local.get $t) (i32.const 2)) (i32.add (local.get $g) (i32.const 1)))
         (call $shared_store_f64 (i32.add (i32.shl (call $block_dim_x) (i32.const 2))
           (i32.shl (local.get $t) (i32.const 3))) (f64.const 2.5))",
    ),
    // Every shared atomic from every thread; thread 0 writes the words.
    (
        "shared_atomics",
        "(drop (call $shared_atomic_add_i32 (i32.const 0) (i32.const 3)))
         (drop (call $shared_atomic_max_i32 (i32.const 4) (i32.sub (i32.mul (local.get $t) (i32.const 7)) (i32.const 100))))
         (drop (call $shared_atomic_min_u32 (i32.const 8) (i32.sub (i32.const -1) (local.get $t))))
         (drop (call $shared_atomic_or_i32 (i32.const 12) (i32.shl (i32.const 1) (i32.and (local.get $t) (i32.const 31)))))
         (loop $retry
           (local.set $s (call $shared_load_i32 (i32.const 16)))
           (br_if $retry (i32.ne (local.get $s)
             (call $shared_atomic_cas_i32 (i32.const 16) (local.get $s) (i32.add (local.get $s) (i32.const 2))))))
         (drop (call $shared_atomic_add_f32 (i32.const 20) (f32.const 0.5)))
         (drop (call $shared_atomic_add_i64 (i32.const 24) (i64.extend_i32_u (local.get $t))))
         (call $barrier)
         (if (i32.eqz (local.get $t)) (then
           (local.set $s (i32.const 0))
           (loop $copy
             (i32.store (i32.add (local.get $b) (i32.add (i32.shl (call $block_idx_x) (i32.const 5)) (local.get $s)))
               (call $shared_load_i32 (local.get $s)))
             (local.set $s (i32.add (local.get $s) (i32.const 4)))
             (br_if $copy (i32.lt_u (local.get $s) (i32.const 32))))))",
    ),
    // The float atomic adds flush subnormals in the guest's memory, not in
    // shared memory (docs/kernels.md, "Atomics"): b[0] and b[1] get
    // 0 + 1e-40 in guest (flushed: 0) and shared memory (kept), b[2]
    // 0 + 1.5, b[3] 0.25 from every thread.
    (
        "float_atomics",
        "(if (i32.eqz (local.get $g)) (then
           (drop (call $atomic_add_f32 (local.get $b) (f32.const 1e-40)))
           (drop (call $shared_atomic_add_f32 (i32.const 0) (f32.const 1e-40)))
           (i32.store offset=4 (local.get $b) (call $shared_load_i32 (i32.const 0)))
           (drop (call $atomic_add_f32 (i32.add (local.get $b) (i32.const 8)) (f32.const 1.5)))))
         (drop (call $atomic_add_f32 (i32.add (local.get $b) (i32.const 12)) (f32.const 0.25)))",
    ),
    // Twelve words per thread: the shuffles, lane id and warp size.
    (
        "shuffles",
        "(local.set $v (i32.add (i32.mul (local.get $g) (i32.const 7)) (i32.const 3)))
         (local.set $f (f32.mul (f32.convert_i32_u (local.get $g)) (f32.const 0.5)))
         (local.set $o (i32.add (local.get $b) (i32.mul (local.get $g) (i32.const 48))))
         (i32.store offset=0 (local.get $o) (call $shfl_idx_i32 (local.get $v)
           (i32.add (i32.const 5) (i32.mul (local.get $lane) (i32.const 3)))))
         (i32.store offset=4 (local.get $o) (call $shfl_up_i32 (local.get $v) (i32.const 3)))
         (i32.store offset=8 (local.get $o) (call $shfl_down_i32 (local.get $v) (i32.const 5)))
         (i32.store offset=12 (local.get $o) (call $shfl_xor_i32 (local.get $v) (i32.const 6)))
         (f32.store offset=16 (local.get $o) (call $shfl_idx_f32 (local.get $f) (i32.sub (i32.const 31) (local.get $lane))))
         (f32.store offset=20 (local.get $o) (call $shfl_up_f32 (local.get $f) (i32.const 1)))
         (f32.store offset=24 (local.get $o) (call $shfl_down_f32 (local.get $f) (i32.const 40)))
         (f32.store offset=28 (local.get $o) (call $shfl_xor_f32 (local.get $f) (i32.const 33)))
         (i32.store offset=32 (local.get $o) (call $shfl_up_i32 (local.get $v) (i32.const -1)))
         (i32.store offset=36 (local.get $o) (call $lane_id))
         (i32.store offset=40 (local.get $o) (call $warp_size))
         (i32.store offset=44 (local.get $o) (call $shfl_down_i32 (local.get $v) (i32.const 0)))",
    ),
    // Eight words per thread: votes in convergent code, then in a branch
    // of the even lanes only.
    (
        "votes",
        "(local.set $v (i32.add (i32.mul (local.get $g) (i32.const 7)) (i32.const 3)))
         (local.set $o (i32.add (local.get $b) (i32.shl (local.get $g) (i32.const 5))))
         (i32.store offset=0 (local.get $o) (call $ballot (i32.eqz (i32.rem_u (local.get $lane) (i32.const 3)))))
         (i32.store offset=4 (local.get $o) (call $any (i32.eq (local.get $lane) (i32.const 5))))
         (i32.store offset=8 (local.get $o) (call $all (i32.lt_u (local.get $lane) (i32.const 40))))
         (i32.store offset=12 (local.get $o) (call $all (i32.ne (local.get $lane) (i32.const 7))))
         (i32.store offset=16 (local.get $o) (call $any (i32.const 0)))
         (if (i32.eqz (i32.and (local.get $lane) (i32.const 1))) (then
           (i32.store offset=20 (local.get $o) (call $ballot (i32.const 1)))
           (i32.store offset=24 (local.get $o) (call $shfl_xor_i32 (local.get $v) (i32.const 1)))
           (i32.store offset=28 (local.get $o) (call $shfl_xor_i32 (local.get $v) (i32.const 2)))))",
    ),
    // Barriers in divergent branches match each other.
    (
        "divergent_barrier",
        "(call $shared_store_i32 (i32.shl (local.get $t) (i32.const 2)) (local.get $g))
         (if (i32.and (local.get $t) (i32.const 1))
           (then (call $barrier))
           (else (call $barrier)))
         (i32.store (i32.add (local.get $b) (i32.shl (local.get $g) (i32.const 2)))
           (call $shared_load_i32 (i32.shl (i32.rem_u (i32.add (local.get $t) (i32.const 1))
             (call $block_dim_x)) (i32.const 2))))",
    ),
    // Thread 5 of each block traps before the barrier.
    (
        "trap_before_barrier",
        "(call $shared_store_i32 (i32.shl (local.get $t) (i32.const 2)) (local.get $g))
         (if (i32.eq (local.get $t) (i32.const 5)) (then unreachable))
         (call $barrier)
         (i32.store (i32.add (local.get $b) (i32.shl (local.get $g) (i32.const 2)))
           (call $shared_load_i32 (i32.shl (i32.rem_u (i32.add (local.get $t) (i32.const 1))
             (call $block_dim_x)) (i32.const 2))))",
    ),
    // Thread 3 reads the word just past the block's shared memory.
    (
        "shared_out_of_bounds",
        "(i32.store (i32.add (local.get $b) (i32.shl (local.get $g) (i32.const 2)))
           (call $shared_load_i32 (select (call $shared_size) (i32.const 0)
             (i32.eq (local.get $t) (i32.const 3)))))",
    ),
    // Thread 3 reads just past the block's shared memory with its first
    // shared load when bit 0 of the word at a is set, with its second when
    // bit 1 is; then every thread stores 1 + what it read.
    (
        "oob_loads",
        "(local.set $o (select (i32.load (local.get $a)) (i32.const 0) (i32.eq (local.get $t) (i32.const 3))))
         (local.set $v (call $shared_load_i32 (select (call $shared_size) (i32.const 0)
           (i32.and (local.get $o) (i32.const 1)))))
         (local.set $s (call $shared_load_i32 (select (call $shared_size) (i32.const 4)
           (i32.and (local.get $o) (i32.const 2)))))
         (i32.store (i32.add (local.get $b) (i32.shl (local.get $g) (i32.const 2)))
           (i32.add (i32.add (local.get $v) (local.get $s)) (i32.const 1)))",
    ),
    // Thread 3 reads two words of shared memory at the offset in the word
    // at a (rounded down to a multiple of 4: no alignment test between
    // the loads) and 4 bytes past it (one base: one merged bounds test),
    // the others at 0 and 4; then every thread stores 1 + what it read.
    (
        "oob_same_base",
        "(local.set $o (select (i32.and (i32.load (local.get $a)) (i32.const -4)) (i32.const 0)
           (i32.eq (local.get $t) (i32.const 3))))
         (local.set $v (call $shared_load_i32 (local.get $o)))
         (local.set $s (call $shared_load_i32 (i32.add (local.get $o) (i32.const 4))))
         (i32.store (i32.add (local.get $b) (i32.shl (local.get $g) (i32.const 2)))
           (i32.add (i32.add (local.get $v) (local.get $s)) (i32.const 1)))",
    ),
    // Thread 3's shared atomic is at offset 2.
    (
        "shared_misaligned_atomic",
        "(drop (call $shared_atomic_add_i32 (select (i32.const 2) (i32.const 0)
           (i32.eq (local.get $t) (i32.const 3))) (i32.const 1)))",
    ),
    // Fused multiply-adds: thread g's f32 operands at a + 12 g, its
    // result at b + 4 g; its f64 operands at a + FMA_F64 + 24 g, its
    // result at b + FMA_F64 + 8 g.
    (
        "fma",
        "(local.set $o (i32.add (local.get $a) (i32.mul (local.get $g) (i32.const 12))))
         (f32.store (i32.add (local.get $b) (i32.shl (local.get $g) (i32.const 2)))
           (call $fma_f32 (f32.load (local.get $o)) (f32.load offset=4 (local.get $o))
             (f32.load offset=8 (local.get $o))))
         (local.set $o (i32.add (i32.add (local.get $a) (i32.const 0x8000))
           (i32.mul (local.get $g) (i32.const 24))))
         (f64.store (i32.add (i32.add (local.get $b) (i32.const 0x8000)) (i32.shl (local.get $g) (i32.const 3)))
           (call $fma_f64 (f64.load (local.get $o)) (f64.load offset=8 (local.get $o))
             (f64.load offset=16 (local.get $o))))",
    ),
    // Every thread loops through a barrier forever.
    ("endless_barrier", "(loop $forever (call $barrier) (br $forever))"),
    // Thread 0 spins while the others wait at the barrier.
    (
        "spin_at_barrier",
        "(if (i32.eqz (local.get $t)) (then (loop $spin (br $spin))))
         (call $barrier)
         (i32.store (i32.add (local.get $b) (i32.shl (local.get $g) (i32.const 2))) (i32.const 1))",
    ),
];

/// The index of kernel `name` (after the imports and `go`).
fn kernel_index(name: &str) -> i32 {
    let k = KERNELS.iter().position(|(n, _)| *n == name).unwrap();
    (IMPORTS.len() + 1 + k) as i32
}

fn guest_wat() -> String {
    let mut wat = String::from("(module\n");
    for (module, name, sig) in IMPORTS {
        wat += &format!("  (import \"{module}\" \"{name}\" (func ${name} {sig}))\n");
    }
    wat += r#"  (memory (export "memory") 64)
  (func (export "go") (param $f i32) (param $blocks i32) (param $threads i32)
                      (param $shared i32) (param $a i32) (param $b i32) (result i32)
    (local $err i32)
    (local.set $err (call $kernel_get (local.get $f) (i32.const 64)))
    (if (local.get $err) (then (return (local.get $err))))
    (i32.store (i32.const 128) (i32.const 0))
    (i64.store (i32.const 136) (i64.extend_i32_u (local.get $a)))
    (i32.store (i32.const 152) (i32.const 0))
    (i64.store (i32.const 160) (i64.extend_i32_u (local.get $b)))
    (local.set $err (call $launch (i64.load (i32.const 64))
      (local.get $blocks) (i32.const 1) (i32.const 1) (local.get $threads) (i32.const 1) (i32.const 1)
      (local.get $shared) (i32.const 128) (i32.const 2) (i32.const 72)))
    (if (local.get $err) (then (return (local.get $err))))
    (call $wait (i64.load (i32.const 72))))
"#;
    for (name, body) in KERNELS {
        wat += &format!(
            "  (func (export \"{name}\") (param $a i32) (param $b i32)
    (local $t i32) (local $g i32) (local $lane i32) (local $s i32) (local $v i32) (local $o i32)
    (local $f f32)
    (local.set $t (call $thread_idx_x))
    (local.set $g (i32.add (i32.mul (call $block_idx_x) (call $block_dim_x)) (local.get $t)))
    (local.set $lane (i32.and (local.get $t) (i32.const 31)))
    {body})\n"
        );
    }
    // The intrinsics in the guest's own code (the host computes them).
    wat += "  (func (export \"fma_f32_host\") (param f32 f32 f32) (result f32)
    (call $fma_f32 (local.get 0) (local.get 1) (local.get 2)))
  (func (export \"fma_f64_host\") (param f64 f64 f64) (result f64)
    (call $fma_f64 (local.get 0) (local.get 1) (local.get 2)))\n";
    wat + ")"
}

struct Guest<D: tensorwasm_core::GpuDriver + 'static> {
    store: Store<GuestState<D>>,
    instance: Instance,
}

impl<D> Guest<D>
where
    D: KernelTarget + ManagedAllocator + Clone + 'static,
    <D as ManagedAllocator>::Region: Sync,
{
    fn new(rt: &GuestRuntime<D>) -> Self {
        let module = rt.compile(guest_wat()).unwrap_or_else(|e| panic!("{e:?}"));
        let mut store = rt.store().expect("store");
        let instance = futures::executor::block_on(rt.instantiate(&mut store, &module)).unwrap();
        Guest { store, instance }
    }

    fn memory(&mut self) -> &mut [u8] {
        let memory = self.instance.get_memory(&mut self.store, "memory").unwrap();
        memory.data_mut(&mut self.store)
    }

    /// Clears the output, launches `kernel`, returns its errno.
    fn launch(&mut self, kernel: &str, blocks: u32, threads: u32, shared: u32) -> i32 {
        self.memory()[OUT as usize..OUT as usize + OUT_BYTES].fill(0);
        let go = self
            .instance
            .get_typed_func::<(i32, i32, i32, i32, i32, i32), i32>(&mut self.store, "go")
            .unwrap();
        futures::executor::block_on(go.call_async(
            &mut self.store,
            (
                kernel_index(kernel),
                blocks as i32,
                threads as i32,
                shared as i32,
                IN as i32,
                OUT as i32,
            ),
        ))
        .unwrap()
    }

    /// Launches `kernel` and asserts it succeeded.
    fn run(&mut self, kernel: &str, blocks: u32, threads: u32, shared: u32) {
        let errno = self.launch(kernel, blocks, threads, shared);
        assert_eq!(errno, 0, "{kernel}: {}", self.last_error());
    }

    /// Launches `kernel` and asserts it trapped with `trap`.
    fn run_trapping(
        &mut self,
        kernel: &str,
        blocks: u32,
        threads: u32,
        shared: u32,
        trap: KernelTrap,
    ) {
        let errno = self.launch(kernel, blocks, threads, shared);
        let text = self.last_error();
        assert_eq!(errno, Errno::ETRAP.code(), "{kernel}: {text}");
        assert!(text.contains(trap.description()), "{kernel}: {text}");
    }

    fn out_u32(&mut self, i: usize) -> u32 {
        let at = OUT as usize + 4 * i;
        u32::from_le_bytes(self.memory()[at..at + 4].try_into().unwrap())
    }

    fn last_error(&self) -> String {
        self.store.data().cuda.last_error().to_string()
    }
}

/// The runtime: small fuel, and a small share of the device so a large
/// grid runs as many virtual blocks over few physical ones.
fn runtime<D>(driver: D) -> GuestRuntime<D>
where
    D: KernelTarget + ManagedAllocator + Clone + 'static,
    <D as ManagedAllocator>::Region: Sync,
{
    let mut rt = GuestRuntime::new(driver, 64 << 20).unwrap();
    rt.set_limits(WasiCudaLimits {
        kernel_fuel: FUEL,
        launch_time_ns: 60_000_000_000,
        launch_share_percent: 1,
        ..WasiCudaLimits::default()
    });
    rt
}

/// `rotate`'s result: thread t of block k reads what thread (t + 1) % n
/// stored.
fn check_rotated<D>(g: &mut Guest<D>, blocks: u32, n: u32, skip: Option<u32>)
where
    D: KernelTarget + ManagedAllocator + Clone + 'static,
    <D as ManagedAllocator>::Region: Sync,
{
    for k in 0..blocks {
        for t in 0..n {
            if skip == Some(t) || skip == Some((t + 1) % n) {
                continue;
            }
            let got = g.out_u32((k * n + t) as usize);
            assert_eq!(got, k * n + (t + 1) % n, "block {k} thread {t}");
        }
    }
}

fn block_model<D>(rt: &GuestRuntime<D>)
where
    D: KernelTarget + ManagedAllocator + Clone + 'static,
    <D as ManagedAllocator>::Region: Sync,
{
    let mut g = Guest::new(rt);
    // Barriers order shared memory.
    g.run("rotate", 7, 96, 96 * 4);
    check_rotated(&mut g, 7, 96, None);

    // A tree reduction of random i32s, one atomic per block.
    let (blocks, n) = (37u32, 256u32);
    let mut seed = 0x9e37_79b9u32;
    let values: Vec<u32> = (0..blocks * n)
        .map(|_| {
            seed ^= seed << 13;
            seed ^= seed >> 17;
            seed ^= seed << 5;
            seed
        })
        .collect();
    for (i, v) in values.iter().enumerate() {
        let at = IN as usize + 4 * i;
        g.memory()[at..at + 4].copy_from_slice(&v.to_le_bytes());
    }
    g.run("reduce", blocks, n, n * 4 + 16);
    let mut total = 0u32;
    for k in 0..blocks {
        let sum = values[(k * n) as usize..((k + 1) * n) as usize]
            .iter()
            .fold(0u32, |s, v| s.wrapping_add(*v));
        total = total.wrapping_add(sum);
        assert_eq!(g.out_u32(1 + k as usize), sum, "block {k}'s sum");
        assert_eq!(g.out_u32((1 + blocks + k) as usize), n, "block {k}'s count");
    }
    assert_eq!(g.out_u32(0), total, "the atomic total");

    // Shared memory starts zeroed in every virtual block (the grid is far
    // larger than the physical one).
    let (blocks, n) = (300u32, 128u32);
    g.run("zeroed", blocks, n, n * 12);
    for i in 0..blocks * n {
        assert_eq!(
            g.out_u32(i as usize),
            0,
            "thread {i} saw another block's data"
        );
    }

    // Every shared atomic, 3 blocks of 200 threads.
    let (blocks, n) = (3u32, 200u32);
    g.run("shared_atomics", blocks, n, 32);
    for k in 0..blocks {
        let w = |g: &mut Guest<D>, i: u32| g.out_u32((k * 8 + i) as usize);
        assert_eq!(w(&mut g, 0), 3 * n, "add");
        assert_eq!(w(&mut g, 1) as i32, (n as i32 - 1) * 7 - 100, "max");
        // The words start zeroed: no unsigned value is below 0.
        assert_eq!(w(&mut g, 2), 0, "min_u");
        assert_eq!(w(&mut g, 3), u32::MAX, "or");
        assert_eq!(w(&mut g, 4), 2 * n, "cas loop");
        assert_eq!(f32::from_bits(w(&mut g, 5)), 0.5 * n as f32, "add_f32");
        let sum = u64::from(w(&mut g, 6)) | (u64::from(w(&mut g, 7)) << 32);
        assert_eq!(sum, u64::from(n * (n - 1) / 2), "add_i64");
    }

    g.run("float_atomics", 4, 64, 16);
    assert_eq!(g.out_u32(0), 0, "1e-40 added in guest memory: flushed");
    assert_eq!(
        g.out_u32(1),
        1e-40f32.to_bits(),
        "1e-40 added in shared memory: kept"
    );
    assert_eq!(f32::from_bits(g.out_u32(2)), 1.5);
    assert_eq!(f32::from_bits(g.out_u32(3)), 64.0, "0.25 from 256 threads");
}

fn warp_model<D>(rt: &GuestRuntime<D>)
where
    D: KernelTarget + ManagedAllocator + Clone + 'static,
    <D as ManagedAllocator>::Region: Sync,
{
    let mut g = Guest::new(rt);
    let (blocks, n) = (3u32, 64u32);
    g.run("shuffles", blocks, n, 0);
    let v = |g: u32| g.wrapping_mul(7).wrapping_add(3);
    let f = |g: u32| (g as f32 * 0.5).to_bits();
    for gid in 0..blocks * n {
        let lane = gid % 32;
        let warp0 = gid - lane;
        let at = |l: u32| warp0 + l;
        let word = |g_: &mut Guest<D>, i: u32| g_.out_u32((gid * 12 + i) as usize);
        let idx = (5 + lane * 3) & 31;
        assert_eq!(word(&mut g, 0), v(at(idx)), "idx, thread {gid}");
        let up = if lane >= 3 { v(at(lane - 3)) } else { v(gid) };
        assert_eq!(word(&mut g, 1), up, "up 3, thread {gid}");
        let down = if lane + 5 <= 31 {
            v(at(lane + 5))
        } else {
            v(gid)
        };
        assert_eq!(word(&mut g, 2), down, "down 5, thread {gid}");
        assert_eq!(word(&mut g, 3), v(at(lane ^ 6)), "xor 6, thread {gid}");
        assert_eq!(word(&mut g, 4), f(at(31 - lane)), "idx f32, thread {gid}");
        let up = if lane >= 1 { f(at(lane - 1)) } else { f(gid) };
        assert_eq!(word(&mut g, 5), up, "up f32, thread {gid}");
        assert_eq!(
            word(&mut g, 6),
            f(gid),
            "down 40: out of range, thread {gid}"
        );
        assert_eq!(
            word(&mut g, 7),
            f(gid),
            "xor 33: out of range, thread {gid}"
        );
        assert_eq!(word(&mut g, 8), v(gid), "up -1: out of range, thread {gid}");
        assert_eq!(word(&mut g, 9), lane, "lane id");
        assert_eq!(word(&mut g, 10), 32, "warp size");
        assert_eq!(word(&mut g, 11), v(gid), "down 0");
    }

    g.run("votes", blocks, n, 0);
    let thirds = (0..32).filter(|l| l % 3 == 0).fold(0u32, |m, l| m | 1 << l);
    for gid in 0..blocks * n {
        let lane = gid % 32;
        let word = |g_: &mut Guest<D>, i: u32| g_.out_u32((gid * 8 + i) as usize);
        assert_eq!(word(&mut g, 0), thirds, "ballot, thread {gid}");
        assert_eq!(word(&mut g, 1), 1, "any");
        assert_eq!(word(&mut g, 2), 1, "all");
        assert_eq!(word(&mut g, 3), 0, "all but lane 7");
        assert_eq!(word(&mut g, 4), 0, "any of none");
        if lane % 2 == 0 {
            // Only the even lanes take part in the branch.
            assert_eq!(
                word(&mut g, 5),
                0x5555_5555,
                "ballot of the even lanes, {gid}"
            );
            assert_eq!(
                word(&mut g, 6),
                v(gid),
                "xor 1: an odd lane, not taking part"
            );
            assert_eq!(word(&mut g, 7), v(gid ^ 2), "xor 2: an even lane");
        } else {
            assert_eq!([word(&mut g, 5), word(&mut g, 6), word(&mut g, 7)], [0; 3]);
        }
    }
}

fn adversarial<D>(rt: &GuestRuntime<D>)
where
    D: KernelTarget + ManagedAllocator + Clone + 'static,
    <D as ManagedAllocator>::Region: Sync,
{
    let mut g = Guest::new(rt);
    let next_launch_works = |g: &mut Guest<D>, after: &str| {
        let errno = g.launch("rotate", 5, 64, 256);
        assert_eq!(errno, 0, "the launch after {after}: {}", g.last_error());
        check_rotated(g, 5, 64, None);
    };
    g.run("divergent_barrier", 4, 128, 512);
    check_rotated(&mut g, 4, 128, None);

    g.run_trapping("trap_before_barrier", 4, 64, 256, KernelTrap::Unreachable);
    check_rotated(&mut g, 4, 64, Some(5));
    next_launch_works(&mut g, "a trap before a barrier");

    g.run_trapping(
        "shared_out_of_bounds",
        2,
        64,
        100,
        KernelTrap::HeapOutOfBounds,
    );
    next_launch_works(&mut g, "an out-of-bounds shared access");

    // Shared loads' bounds tests are merged (`translate/merge.rs`), but a
    // failing load traps before the thread's next effect (each block's
    // thread 3 stores nothing, the others store 1), and the first failing
    // load's offset is the one reported. `trapped` runs `kernel` with
    // `word` at IN, checks the stores and gives the trap's offset.
    let trapped = |g: &mut Guest<D>, kernel: &str, word: u32| {
        g.memory()[IN as usize..IN as usize + 4].copy_from_slice(&word.to_le_bytes());
        g.run_trapping(kernel, 2, 64, 64, KernelTrap::HeapOutOfBounds);
        for gid in 0..128 {
            assert_eq!(
                g.out_u32(gid),
                u32::from(gid % 64 != 3),
                "{kernel}, thread {gid}"
            );
        }
        let text = g.last_error();
        let hex = text.rsplit("at offset 0x").next().unwrap_or_default();
        let digits: String = hex.chars().take_while(char::is_ascii_hexdigit).collect();
        u64::from_str_radix(&digits, 16).unwrap_or_else(|_| panic!("no offset in {text}"))
    };
    // Two loads at two bases: the second fails (word 2), both do (3; the
    // first comes earlier in the code).
    let second = trapped(&mut g, "oob_loads", 2);
    let first = trapped(&mut g, "oob_loads", 3);
    assert!(
        first < second,
        "the first load's offset {first:#x}, not {second:#x}"
    );
    next_launch_works(&mut g, "out-of-bounds shared loads");

    // Two loads at one base, 4 bytes apart (64 bytes of shared memory): at
    // 60 only the second fails; at 64 both do, and the first is reported;
    // at 2^32 - 4 the second wraps to 0 and only the first fails. At 56
    // neither does.
    let second = trapped(&mut g, "oob_same_base", 60);
    let first = trapped(&mut g, "oob_same_base", 64);
    assert!(first < second, "at 64: {first:#x}, not {second:#x}");
    assert_eq!(
        trapped(&mut g, "oob_same_base", u32::MAX - 3),
        first,
        "at 2^32 - 4"
    );
    g.memory()[IN as usize..IN as usize + 4].copy_from_slice(&56u32.to_le_bytes());
    g.run("oob_same_base", 2, 64, 64);
    next_launch_works(&mut g, "out-of-bounds shared loads at one base");

    g.run_trapping(
        "shared_misaligned_atomic",
        2,
        64,
        64,
        KernelTrap::HeapMisaligned,
    );
    next_launch_works(&mut g, "a misaligned shared atomic");

    g.run_trapping("endless_barrier", 2, 64, 0, KernelTrap::OutOfFuel);
    next_launch_works(&mut g, "an endless loop around a barrier");

    g.run_trapping("spin_at_barrier", 2, 64, 0, KernelTrap::OutOfFuel);
    for gid in 0..128 {
        let want = u32::from(gid % 64 != 0);
        assert_eq!(
            g.out_u32(gid),
            want,
            "thread {gid} after the spinner ran out of fuel"
        );
    }
    next_launch_works(&mut g, "a thread spinning at a barrier");
}

/// Threads of the `fma` launch (two blocks), one operand triple each.
const FMA_THREADS: u32 = 256;

/// Operands worth a fused multiply-add's attention: zeros, ones, the
/// pair whose product rounds to 1 unfused, infinities, NaNs (canonical,
/// signalling, with a payload), subnormals, the largest finite values.
const FMA_SPECIAL_F32: [u32; 16] = [
    0x0000_0000,
    0x8000_0000,
    0x3F80_0000,
    0xBF80_0000,
    0x3F80_0800,
    0x3F7F_F000,
    0x7F80_0000,
    0xFF80_0000,
    0x7FC0_0000,
    0x7FA0_0001,
    0xFFC1_2345,
    0x0000_0001,
    0x007F_FFFF,
    0x7F7F_FFFF,
    0x0080_0000,
    0xC020_0000,
];
const FMA_SPECIAL_F64: [u64; 16] = [
    0,
    1 << 63,
    0x3FF0_0000_0000_0000,
    0xBFF0_0000_0000_0000,
    0x3FF0_0000_0100_0000,
    0x3FEF_FFFF_FE00_0000,
    0x7FF0_0000_0000_0000,
    0xFFF0_0000_0000_0000,
    0x7FF8_0000_0000_0000,
    0x7FF4_0000_0000_0001,
    0xFFF8_1234_5678_9ABC,
    1,
    0x000F_FFFF_FFFF_FFFF,
    0x7FEF_FFFF_FFFF_FFFF,
    0x0010_0000_0000_0000,
    0xC004_0000_0000_0000,
];

/// Whether `got` is a result Wasm's NaN rule allows where the exact
/// result is a NaN: a canonical NaN (either sign), or, when some operand
/// is a NaN that is not canonical, any quiet NaN. `quiet` is the quiet
/// bit, `canonical` the canonical NaN's bits without the sign.
fn nan_allowed(got: u64, operands: [u64; 3], quiet: u64, canonical: u64, sign: u64) -> bool {
    let magnitude = |x: u64| x & !sign;
    let is_nan = |x: u64| magnitude(x) > (canonical & !quiet);
    if !is_nan(got) {
        return false;
    }
    let odd_operand = operands
        .iter()
        .any(|&x| is_nan(x) && magnitude(x) != canonical);
    magnitude(got) == canonical || (odd_operand && got & quiet != 0)
}

/// `fma_f32` and `fma_f64` in a kernel and in the guest's own code give
/// `a * b + c` rounded once (the host's `mul_add`), bit for bit but for
/// the NaNs Wasm's rule leaves open; the operands whose product rounds
/// to 1 show the add is fused (unfused, the result would be 0).
fn fused_multiply_add<D>(rt: &GuestRuntime<D>)
where
    D: KernelTarget + ManagedAllocator + Clone + 'static,
    <D as ManagedAllocator>::Region: Sync,
{
    let mut g = Guest::new(rt);
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let n = FMA_THREADS as usize;
    // Thread 0: (1 + 2^-12)(1 - 2^-12) - 1 = -2^-24 fused, 0 unfused (f64:
    // (1 + 2^-28)(1 - 2^-28) - 1 = -2^-56). Then operands drawn from the
    // specials and random bits.
    let mut f32s: Vec<[u32; 3]> = vec![[0x3F80_0800, 0x3F7F_F000, 0xBF80_0000]];
    let mut f64s: Vec<[u64; 3]> = vec![[
        0x3FF0_0000_0100_0000,
        0x3FEF_FFFF_FE00_0000,
        0xBFF0_0000_0000_0000,
    ]];
    while f32s.len() < n {
        let mut pick32 = || {
            let r = next();
            if r % 3 == 0 {
                FMA_SPECIAL_F32[(r >> 8) as usize % 16]
            } else {
                (r >> 16) as u32
            }
        };
        f32s.push([pick32(), pick32(), pick32()]);
        let mut pick64 = || {
            let r = next();
            if r % 3 == 0 {
                FMA_SPECIAL_F64[(r >> 8) as usize % 16]
            } else {
                next()
            }
        };
        f64s.push([pick64(), pick64(), pick64()]);
    }
    for (i, (x, y)) in f32s.iter().zip(&f64s).enumerate() {
        for k in 0..3 {
            let at = IN as usize + 12 * i + 4 * k;
            g.memory()[at..at + 4].copy_from_slice(&x[k].to_le_bytes());
            let at = IN as usize + 0x8000 + 24 * i + 8 * k;
            g.memory()[at..at + 8].copy_from_slice(&y[k].to_le_bytes());
        }
    }
    let host32 = g
        .instance
        .get_typed_func::<(f32, f32, f32), f32>(&mut g.store, "fma_f32_host")
        .unwrap();
    let host64 = g
        .instance
        .get_typed_func::<(f64, f64, f64), f64>(&mut g.store, "fma_f64_host")
        .unwrap();
    g.run("fma", 2, FMA_THREADS / 2, 0);
    for (i, (&[a, b, c], &[d, e, f])) in f32s.iter().zip(&f64s).enumerate() {
        let (a, b, c) = (f32::from_bits(a), f32::from_bits(b), f32::from_bits(c));
        let want = a.mul_add(b, c);
        let kernel = g.out_u32(i);
        let at = OUT as usize + 0x8000 + 8 * i;
        let kernel64 = u64::from_le_bytes(g.memory()[at..at + 8].try_into().unwrap());
        let guest = futures::executor::block_on(host32.call_async(&mut g.store, (a, b, c)))
            .unwrap()
            .to_bits();
        let (d, e, f) = (f64::from_bits(d), f64::from_bits(e), f64::from_bits(f));
        let want64 = d.mul_add(e, f);
        let guest64 = futures::executor::block_on(host64.call_async(&mut g.store, (d, e, f)))
            .unwrap()
            .to_bits();
        let ops32 = [a, b, c].map(|x| u64::from(x.to_bits()));
        for (who, got) in [("kernel", kernel), ("guest", guest)] {
            if want.is_nan() {
                assert!(
                    nan_allowed(u64::from(got), ops32, 1 << 22, 0x7FC0_0000, 1 << 31),
                    "{who} f32 #{i}: fma({a:e}, {b:e}, {c:e}) = {got:#010x}"
                );
            } else {
                assert_eq!(
                    got,
                    want.to_bits(),
                    "{who} f32 #{i}: fma({a:e}, {b:e}, {c:e})"
                );
            }
        }
        let ops64 = [d, e, f].map(f64::to_bits);
        for (who, got) in [("kernel", kernel64), ("guest", guest64)] {
            if want64.is_nan() {
                assert!(
                    nan_allowed(got, ops64, 1 << 51, 0x7FF8_0000_0000_0000, 1 << 63),
                    "{who} f64 #{i}: fma({d:e}, {e:e}, {f:e}) = {got:#018x}"
                );
            } else {
                assert_eq!(
                    got,
                    want64.to_bits(),
                    "{who} f64 #{i}: fma({d:e}, {e:e}, {f:e})"
                );
            }
        }
    }
    assert_eq!(f32::from_bits(g.out_u32(0)), -(2f32.powi(-24)), "fused");
    let at = OUT as usize + 0x8000;
    let first64 = u64::from_le_bytes(g.memory()[at..at + 8].try_into().unwrap());
    assert_eq!(f64::from_bits(first64), -(2f64.powi(-56)), "fused (f64)");
}

fn cpu() -> GuestRuntime<CpuDriver> {
    runtime(CpuDriver::with_capacity(1 << 30).unwrap())
}

fn cuda() -> GuestRuntime<CudaDriver> {
    runtime(CudaDriver::new(0).expect("a CUDA device"))
}

#[test]
fn block_model_on_the_cpu_driver() {
    block_model(&cpu());
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn block_model_on_the_gpu() {
    block_model(&cuda());
}

#[test]
fn warp_model_on_the_cpu_driver() {
    warp_model(&cpu());
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn warp_model_on_the_gpu() {
    warp_model(&cuda());
}

#[test]
fn adversarial_kernels_on_the_cpu_driver() {
    adversarial(&cpu());
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn adversarial_kernels_on_the_gpu() {
    adversarial(&cuda());
}

#[test]
fn fused_multiply_add_on_the_cpu_driver() {
    fused_multiply_add(&cpu());
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn fused_multiply_add_on_the_gpu() {
    fused_multiply_add(&cuda());
}
