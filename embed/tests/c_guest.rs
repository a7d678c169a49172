//! A guest written in C (`guest/c/examples/saxpy.c`, over
//! `guest/c/tensorwasm.h`, built for wasm32-wasi with zig cc by
//! `guest/c/build.sh`, which `scripts/test.sh` runs before the tests): its
//! `run` export makes its own `saxpy` function a kernel by export name and
//! by function pointer, launches both over arrays in its memory, waits and
//! checks every element against the same arithmetic on its CPU; it returns
//! 0 when all matched. On the CPU driver here; on CUDA with
//! `--include-ignored` on the device machine.

use std::path::PathBuf;

use tensorwasm_core::ManagedAllocator;
use tensorwasm_cpu::CpuDriver;
use tensorwasm_cuda::CudaDriver;
use tensorwasm_embed::{kernel::KernelTarget, runtime::GuestRuntime};

/// The built example: the file `C_GUEST_WASM` names, else
/// `guest/target/c/saxpy.wasm`.
fn saxpy_wasm() -> Vec<u8> {
    let path = std::env::var_os("C_GUEST_WASM").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../guest/target/c/saxpy.wasm"),
        PathBuf::from,
    );
    std::fs::read(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e}; build the C guests first (guest/c/build.sh; scripts/test.sh does)",
            path.display()
        )
    })
}

/// Runs `run()` in a fresh instance and asserts that it returns 0, with
/// the guest's last error in the message otherwise.
fn run_passes<D>(driver: D, memory_limit: usize)
where
    D: KernelTarget + ManagedAllocator + Clone + 'static,
    <D as ManagedAllocator>::Region: Sync,
{
    let rt = GuestRuntime::new(driver, memory_limit).unwrap();
    let module = rt.compile(saxpy_wasm()).unwrap();
    for import in module.imports() {
        assert!(
            ["wasi_cuda", "tensorwasm_kernel"].contains(&import.module()),
            "the C guest imports only wasi_cuda and the kernel intrinsics: {}.{}",
            import.module(),
            import.name()
        );
    }
    let mut store = rt.store().unwrap();
    let instance = futures::executor::block_on(rt.instantiate(&mut store, &module)).unwrap();
    let run = instance
        .get_typed_func::<(), i32>(&mut store, "run")
        .unwrap();
    let status = futures::executor::block_on(run.call_async(&mut store, ())).unwrap();
    assert_eq!(
        status,
        0,
        "run() (0: every element matched; i + 1: element i did not; -errno: a wasi_cuda \
         call failed): last error: {}",
        store.data().cuda.last_error()
    );
    assert_eq!(
        rt.kernel_cache().lowerings(),
        1,
        "the kernel named by export and by function pointer is made once"
    );
}

#[test]
fn c_saxpy_guest_passes_on_the_cpu_driver() {
    let driver = CpuDriver::with_capacity(1 << 30).unwrap();
    run_passes(driver, 64 << 20);
}

#[test]
#[ignore = "needs a CUDA GPU"]
fn c_saxpy_guest_passes_on_the_gpu() {
    let driver = CudaDriver::new(0).expect("a CUDA device");
    run_passes(driver, 1 << 30);
}
