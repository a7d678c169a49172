//! The MLP example guest (`guest/examples/mlp`, built for
//! `wasm32-unknown-unknown` by `scripts/test.sh` before the tests run): a
//! forward pass of layer norm, two GEMMs with bias rows, GELU and softmax on
//! the built-in tensor ops, which the guest checks against its own scalar
//! forward pass. `run` uses f32 GEMMs (tolerance 1e-4 on the
//! probabilities), `run_bf16` bf16 inputs (2e-2); both return 0 when every
//! check passed (the guest's crate docs list the other codes). On the CPU
//! driver here, on CUDA with `--include-ignored` on the device machine
//! (scripts/pack-gpu-tests.sh packs this file).

use tensorwasm_core::ManagedAllocator;
use tensorwasm_cpu::CpuDriver;
use tensorwasm_cuda::CudaDriver;
use tensorwasm_embed::{kernel::KernelTarget, runtime::GuestRuntime};

#[path = "support/guests.rs"]
mod guests;

/// The batch each export runs.
const BATCH: i32 = 64;

/// The built guest (`support/guests.rs`).
fn guest_wasm() -> Vec<u8> {
    guests::guest_wasm("MLP_GUEST_WASM", "mlp.wasm")
}

/// Runs `run(BATCH)` and `run_bf16(BATCH)`, each in a fresh instance, and
/// asserts that both return 0.
fn both_exports_pass<D>(driver: D, memory_limit: usize, what: &str)
where
    D: KernelTarget + ManagedAllocator + Clone + 'static,
    <D as ManagedAllocator>::Region: Sync,
{
    let rt = GuestRuntime::new(driver, memory_limit).unwrap();
    let module = rt.compile(guest_wasm()).unwrap();
    let imports: Vec<String> = module
        .imports()
        .map(|i| format!("{}.{}", i.module(), i.name()))
        .collect();
    assert!(
        imports.iter().all(|i| i.starts_with("wasi_cuda.")),
        "the guest imports only wasi_cuda: {imports:?}"
    );
    for export in ["run", "run_bf16"] {
        let mut store = rt.store().unwrap();
        let instance = futures::executor::block_on(rt.instantiate(&mut store, &module)).unwrap();
        let f = instance
            .get_typed_func::<i32, i32>(&mut store, export)
            .unwrap();
        let status = futures::executor::block_on(f.call_async(&mut store, BATCH)).unwrap();
        let max_error = instance
            .get_typed_func::<(), f32>(&mut store, "max_error")
            .unwrap();
        let max_error = futures::executor::block_on(max_error.call_async(&mut store, ())).unwrap();
        println!("{what}: {export}({BATCH}) = {status}, max |p - reference| = {max_error:e}");
        assert_eq!(
            status,
            0,
            "{what}: {export}({BATCH}) (max error {max_error:e}): {}",
            store.data().cuda.last_error()
        );
    }
}

#[test]
fn mlp_guest_runs_on_the_cpu_driver() {
    let driver = CpuDriver::with_capacity(1 << 30).unwrap();
    both_exports_pass(driver, 256 << 20, "CPU driver");
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn mlp_guest_runs_on_the_gpu() {
    let driver = CudaDriver::new(0).expect("a CUDA device");
    both_exports_pass(driver, 1 << 30, "CUDA");
}
