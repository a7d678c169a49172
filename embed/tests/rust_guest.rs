//! The Rust example guest (`guest/examples/vector-add`, built for
//! `wasm32-unknown-unknown` by `scripts/test.sh` before the tests run) on the
//! CPU driver: both exports compute and check their vector adds.

use std::path::PathBuf;

use tensorwasm_cpu::CpuDriver;
use tensorwasm_embed::runtime::GuestRuntime;

fn guest_wasm() -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../guest/target/wasm32-unknown-unknown/release/vector_add_guest.wasm");
    std::fs::read(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e}; build the Rust guest first (scripts/test.sh does: \
             `cd guest && cargo build --release`)",
            path.display()
        )
    })
}

#[test]
fn rust_guest_runs_on_the_cpu_driver() {
    let driver = CpuDriver::with_capacity(1 << 30).unwrap();
    tensorwasm_embed::twins::register(&driver);
    let rt = GuestRuntime::new(driver, 256 << 20).unwrap();
    let module = rt.compile(guest_wasm()).unwrap();
    let imports: Vec<String> = module
        .imports()
        .map(|i| format!("{}.{}", i.module(), i.name()))
        .collect();
    assert!(
        imports.iter().all(|i| i.starts_with("wasi_cuda.")),
        "the guest imports only wasi_cuda: {imports:?}"
    );
    for export in ["run", "device_buffers"] {
        for n in [1, 257, 100_003] {
            let mut store = rt.store().unwrap();
            let instance =
                futures::executor::block_on(rt.instantiate(&mut store, &module)).unwrap();
            let f = instance
                .get_typed_func::<i32, i32>(&mut store, export)
                .unwrap();
            let status = futures::executor::block_on(f.call_async(&mut store, n)).unwrap();
            assert_eq!(
                status,
                0,
                "{export}({n}): {}",
                store.data().cuda.last_error()
            );
        }
    }
}
