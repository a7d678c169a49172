//! Kernels written in Rust (`guest/examples/rust-kernels`, built for
//! `wasm32-unknown-unknown` by `scripts/test.sh` before the tests run):
//! each export makes one of the guest's own `extern "C" fn`s a kernel
//! (`tensorwasm_guest::Kernel`, by function pointer or export name),
//! launches it over random inputs in the guest's memory and checks every
//! element against the same Rust run on the guest's CPU; it returns 0 when
//! all matched (the guest's crate docs list the other codes). On the CPU
//! driver here; on CUDA with `--include-ignored` on the device machine
//! (scripts/pack-gpu-tests.sh packs this file).
//!
//! What each kernel needs of the translator is in the guest's crate docs:
//! `saxpy_unchecked` needs nothing beyond scalar Wasm; the others need the
//! shadow stack, panics as traps, `memory.copy`/`fill` and `call_indirect`
//! over the fixed table; the cooperative ones (`run_block_reduce`,
//! `run_tiled_sgemm`, `run_shared_histogram`, `run_softmax`,
//! `run_inclusive_scan`) shared memory, its atomics, the barrier and warp
//! shuffles (`docs/kernels.md`, "The GPU programming model").

use tensorwasm_core::ManagedAllocator;
use tensorwasm_cpu::CpuDriver;
use tensorwasm_cuda::CudaDriver;
use tensorwasm_embed::{kernel::KernelTarget, runtime::GuestRuntime};

#[path = "support/guests.rs"]
mod guests;

/// The built guest (`support/guests.rs`).
fn guest_wasm() -> Vec<u8> {
    guests::guest_wasm("RUST_KERNELS_GUEST_WASM", "rust_kernels.wasm")
}

/// Runs `export()` in a fresh instance of the guest and asserts that it
/// returns 0, with the guest's last error in the message otherwise.
fn export_passes<D>(driver: D, memory_limit: usize, export: &str)
where
    D: KernelTarget + ManagedAllocator + Clone + 'static,
    <D as ManagedAllocator>::Region: Sync,
{
    let rt = GuestRuntime::new(driver, memory_limit).unwrap();
    let module = rt.compile(guest_wasm()).unwrap();
    for import in module.imports() {
        assert!(
            ["wasi_cuda", "tensorwasm_kernel"].contains(&import.module()),
            "the guest imports only wasi_cuda and the kernel intrinsics: {}.{}",
            import.module(),
            import.name()
        );
    }
    let mut store = rt.store().unwrap();
    let instance = futures::executor::block_on(rt.instantiate(&mut store, &module)).unwrap();
    let f = instance
        .get_typed_func::<(), i32>(&mut store, export)
        .unwrap();
    let status = futures::executor::block_on(f.call_async(&mut store, ())).unwrap();
    assert_eq!(
        status,
        0,
        "{export}() (0: every element matched; i + 1: element i did not; -errno: a \
         wasi_cuda call failed): last error: {}",
        store.data().cuda.last_error()
    );
}

/// Runs `run_panicking_gather()` (thread 77 indexes past its slice):
/// the export sees `ETRAP` with every other element right, and the trap is
/// `unreachable` at the offset of an `unreachable` operator (the panic
/// handler's) in the guest's module.
fn panic_traps_unreachable<D>(driver: D, memory_limit: usize)
where
    D: KernelTarget + ManagedAllocator + Clone + 'static,
    <D as ManagedAllocator>::Region: Sync,
{
    let wasm = guest_wasm();
    let rt = GuestRuntime::new(driver, memory_limit).unwrap();
    let module = rt.compile(&wasm).unwrap();
    let mut store = rt.store().unwrap();
    let instance = futures::executor::block_on(rt.instantiate(&mut store, &module)).unwrap();
    let f = instance
        .get_typed_func::<(), i32>(&mut store, "run_panicking_gather")
        .unwrap();
    let status = futures::executor::block_on(f.call_async(&mut store, ())).unwrap();
    let text = store.data().cuda.last_error().to_string();
    assert_eq!(status, -15, "ETRAP expected: {text}");
    let needle = "trapped: unreachable executed (code 1) at offset 0x";
    let at = text
        .find(needle)
        .unwrap_or_else(|| panic!("not an unreachable trap: {text}"));
    let hex: String = text[at + needle.len()..]
        .chars()
        .take_while(char::is_ascii_hexdigit)
        .collect();
    let offset = u64::from_str_radix(&hex, 16).unwrap();
    let mut unreachable_at = Vec::new();
    for payload in wasmparser::Parser::new(0).parse_all(&wasm) {
        if let wasmparser::Payload::CodeSectionEntry(body) = payload.unwrap() {
            let mut ops = body.get_operators_reader().unwrap();
            while !ops.eof() {
                let (op, at) = ops.read_with_offset().unwrap();
                if matches!(op, wasmparser::Operator::Unreachable) {
                    unreachable_at.push(at);
                }
            }
        }
    }
    assert!(
        unreachable_at.contains(&offset),
        "offset {offset:#x} is no `unreachable` of the module ({unreachable_at:x?}): {text}"
    );
}

#[test]
fn a_panic_in_a_kernel_is_an_unreachable_trap_at_its_offset() {
    let driver = CpuDriver::with_capacity(1 << 30).unwrap();
    panic_traps_unreachable(driver, 256 << 20);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn a_panic_in_a_kernel_is_an_unreachable_trap_at_its_offset_on_the_gpu() {
    let driver = CudaDriver::new(0).expect("a CUDA device");
    panic_traps_unreachable(driver, 1 << 30);
}

fn on_cpu(export: &str) {
    let driver = CpuDriver::with_capacity(1 << 30).unwrap();
    export_passes(driver, 256 << 20, export);
}

fn on_gpu(export: &str) {
    let driver = CudaDriver::new(0).expect("a CUDA device");
    export_passes(driver, 1 << 30, export);
}

/// A CPU-driver test and its GPU twin for each export.
macro_rules! exports {
    ($($export:ident: $cpu:ident, $gpu:ident;)*) => {$(
        #[test]
        fn $cpu() {
            on_cpu(stringify!($export));
        }

        #[test]
        #[ignore = "needs a CUDA GPU"]
        fn $gpu() {
            on_gpu(stringify!($export));
        }
    )*};
}

exports! {
    run_saxpy_unchecked: saxpy_unchecked_on_the_cpu_driver, saxpy_unchecked_on_the_gpu;
    run_saxpy: strided_saxpy_over_slices_on_the_cpu_driver, strided_saxpy_over_slices_on_the_gpu;
    run_matmul: matmul_with_div_and_rem_on_the_cpu_driver, matmul_with_div_and_rem_on_the_gpu;
    run_row_sums: row_sums_on_a_stack_array_on_the_cpu_driver, row_sums_on_a_stack_array_on_the_gpu;
    run_pad_rows: copy_and_fill_rows_on_the_cpu_driver, copy_and_fill_rows_on_the_gpu;
    run_activations: dyn_trait_activations_on_the_cpu_driver, dyn_trait_activations_on_the_gpu;
    run_histogram: histogram_by_global_atomics_on_the_cpu_driver, histogram_by_global_atomics_on_the_gpu;
    run_atomic_dot: float_and_int_atomic_sums_on_the_cpu_driver, float_and_int_atomic_sums_on_the_gpu;
    run_block_reduce: block_tree_reduction_in_shared_memory_on_the_cpu_driver, block_tree_reduction_in_shared_memory_on_the_gpu;
    run_tiled_sgemm: tiled_sgemm_in_shared_memory_on_the_cpu_driver, tiled_sgemm_in_shared_memory_on_the_gpu;
    run_shared_histogram: histogram_by_shared_atomics_on_the_cpu_driver, histogram_by_shared_atomics_on_the_gpu;
    run_softmax: row_softmax_by_warp_shuffles_on_the_cpu_driver, row_softmax_by_warp_shuffles_on_the_gpu;
    run_inclusive_scan: inclusive_scan_by_warp_shuffles_on_the_cpu_driver, inclusive_scan_by_warp_shuffles_on_the_gpu;
}
