//! Wasm kernels on the CPU driver (CI): `examples/wasm_kernels.wat`'s vector
//! add and SAXPY written as Wasm functions, made kernels with `kernel_get`,
//! checked element by element by the guest; the sandbox (an out-of-bounds
//! store writes nothing, an endless loop ends out of fuel, the next launch
//! runs); the kernel cache; and `kernel_get`'s refusals.

use tensorwasm_core::abi::Errno;
use tensorwasm_cpu::CpuDriver;
use tensorwasm_embed::{
    runtime::{GuestRuntime, GuestState},
    wasi_cuda::WasiCudaLimits,
};
use wasmtime::{Instance, Store};

const WASM_KERNELS: &str = include_str!("../../examples/wasm_kernels.wat");

fn runtime(fuel: u64) -> GuestRuntime<CpuDriver> {
    let driver = CpuDriver::with_capacity(2 << 30).unwrap();
    let mut rt = GuestRuntime::new(driver, 256 << 20).unwrap();
    rt.set_limits(WasiCudaLimits {
        kernel_fuel: fuel,
        ..WasiCudaLimits::default()
    });
    rt
}

fn instantiate(
    rt: &GuestRuntime<CpuDriver>,
    wat: &str,
) -> (Store<GuestState<CpuDriver>>, Instance) {
    let module = rt.compile(wat).unwrap();
    let mut store = rt.store().unwrap();
    let instance = futures::executor::block_on(rt.instantiate(&mut store, &module)).unwrap();
    (store, instance)
}

#[test]
fn vector_add_and_saxpy_as_wasm_kernels() {
    let rt = runtime(1 << 20);
    let (mut store, instance) = instantiate(&rt, WASM_KERNELS);
    let run = instance
        .get_typed_func::<i32, i32>(&mut store, "run")
        .unwrap();
    for n in [1, 255, 256, 257, 100_003] {
        let status = futures::executor::block_on(run.call_async(&mut store, n)).unwrap();
        assert_eq!(status, 0, "run({n}): {}", store.data().cuda.last_error());
    }
    // Two kernels, lowered once each however often they are launched.
    assert_eq!(rt.kernel_cache().lowerings(), 2);
    // Another guest of the same module shares them.
    let (mut other, instance) = instantiate(&rt, WASM_KERNELS);
    let run = instance
        .get_typed_func::<i32, i32>(&mut other, "run")
        .unwrap();
    assert_eq!(
        futures::executor::block_on(run.call_async(&mut other, 4097)).unwrap(),
        0
    );
    assert_eq!(rt.kernel_cache().lowerings(), 2);
}

#[test]
fn traps_end_the_thread_not_the_process_and_write_nothing_outside() {
    let rt = runtime(1 << 16);
    let (mut store, instance) = instantiate(&rt, WASM_KERNELS);
    let traps = instance
        .get_typed_func::<(), i32>(&mut store, "traps")
        .unwrap();
    let status = futures::executor::block_on(traps.call_async(&mut store, ())).unwrap();
    assert_eq!(status, 0, "traps(): {}", store.data().cuda.last_error());
    let text = store.data().cuda.last_error().to_string();
    assert!(
        text.starts_with("wait: ETRAP: kernel `kernel_10` trapped: out of fuel"),
        "{text}"
    );
    // The out-of-bounds kernel's stores (7 at memory.size * 64 KiB + 4i)
    // were refused by the bounds checks: on the CPU driver the reserved
    // bytes past the memory's end are mapped PROT_NONE, so a store that got
    // through would have killed this process. (The GPU test reads them.)
    let memory = instance.get_memory(&mut store, "memory").unwrap();
    assert!(memory.data_size(&store) >= 2 << 16);
}

#[test]
fn kernel_get_refuses_what_kernels_cannot_do() {
    let rt = runtime(1 << 16);
    let wat = r#"(module
        (import "wasi_cuda" "kernel_get" (func $kernel_get (param i32 i32) (result i32)))
        (import "wasi_cuda" "last_error" (func $last_error (param i32 i32 i32) (result i32)))
        (memory (export "memory") 1)
        (table 1 funcref)
        (type $t (func))
        (func $indirect (param i32) (call_indirect (type $t) (local.get 0)))
        (func $with_result (param i32) (result i32) (local.get 0))
        (func $grows (param i32) (drop (memory.grow (local.get 0))))
        (func (export "get") (param i32) (result i32)
            (call $kernel_get (local.get 0) (i32.const 64)))
        (func (export "error") (result i32)
            (drop (call $last_error (i32.const 1024) (i32.const 1024) (i32.const 128)))
            (i32.load (i32.const 128))))"#;
    let (mut store, instance) = instantiate(&rt, wat);
    let get = instance
        .get_typed_func::<i32, i32>(&mut store, "get")
        .unwrap();
    let mut call =
        |index: i32| futures::executor::block_on(get.call_async(&mut store, index)).unwrap();
    let cases = [
        (2, Errno::ENOTSUP, "call_indirect"),
        (3, Errno::EINVAL, "result"),
        (4, Errno::ENOTSUP, "memory.grow"),
        (0, Errno::EINVAL, "import"),
        (99, Errno::EINVAL, ""),
    ];
    let mut texts = Vec::new();
    for (index, errno, needle) in cases {
        assert_eq!(call(index), errno.code(), "function {index}");
        texts.push((index, needle));
    }
    // Each refusal's text names what was refused.
    for (index, needle) in texts {
        let status = futures::executor::block_on(get.call_async(&mut store, index)).unwrap();
        assert_ne!(status, 0);
        let text = store.data().cuda.last_error().to_string();
        assert!(text.contains(needle), "function {index}: {text}");
    }
    // The last refusal's text, as the guest reads it, names the function.
    let error = instance
        .get_typed_func::<(), i32>(&mut store, "error")
        .unwrap();
    let len = futures::executor::block_on(error.call_async(&mut store, ())).unwrap();
    assert!(len > 0);
    let text = store.data().cuda.last_error().to_string();
    assert!(text.starts_with("kernel_get: EINVAL"), "{text}");
    assert_eq!(
        store.data().cuda.live_handles()[2],
        0,
        "no function handle issued"
    );
}
