//! A minimal custom host: its own wasmtime program that embeds TensorWasm
//! through the embedding library alone. It picks CUDA when a GPU is there
//! (the CPU driver otherwise), builds a [`GuestRuntime`] (engine, linker
//! with `wasi_cuda` and WASI, guest memory in managed memory), adds an
//! import of its own, instantiates `examples/vector_add.wat` (a raw-PTX
//! vector add over the guest's memory) and calls its `run` export.
//!
//! ```sh
//! cargo run --release -p tensorwasm-example-host -- [N]
//! ```

use std::process::ExitCode;

use tensorwasm_embed::{
    kernel::KernelTarget,
    run::{Chosen, DriverChoice, choose_driver},
    runtime::{GuestRuntime, GuestState},
    tensorwasm_core::ManagedAllocator,
};
use wasmtime::Caller;

/// The guest: the repository's raw-PTX vector add, compiled in.
const GUEST: &str = include_str!("../../vector_add.wat");

fn main() -> ExitCode {
    let n: i32 = match std::env::args().nth(1).map(|a| a.parse()) {
        None => 1 << 20,
        Some(Ok(n)) if n > 0 => n,
        Some(_) => {
            eprintln!("usage: tensorwasm-example-host [N > 0]");
            return ExitCode::from(2);
        }
    };
    let result = match choose_driver(DriverChoice::Auto) {
        Ok(Chosen::Cuda(driver)) => run_on(driver, n),
        Ok(Chosen::Cpu(driver, _)) => run_on(driver, n),
        Err(e) => Err(e.to_string()),
    };
    match result {
        Ok(line) => {
            println!("{line}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("tensorwasm-example-host: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Runs the guest's `run(n)` on `driver`; one line on what happened.
fn run_on<D>(driver: D, n: i32) -> Result<String, String>
where
    D: KernelTarget + ManagedAllocator + Clone + 'static,
    <D as ManagedAllocator>::Region: Sync,
{
    let device = driver.device().name.clone();
    // Guest memories of at most 1 GiB each, in the driver's managed memory.
    let mut runtime = GuestRuntime::new(driver, 1 << 30).map_err(|e| e.to_string())?;
    // The host's own import beside TensorWasm's: this is the host's linker.
    runtime
        .linker_mut()
        .func_wrap("host", "log", |_: Caller<'_, GuestState<D>>, value: i32| {
            eprintln!("guest says {value}")
        })
        .map_err(|e| e.to_string())?;
    let module = runtime.compile(GUEST).map_err(|e| e.to_string())?;
    let mut store = runtime.store().map_err(|e| e.to_string())?;
    // wasi_cuda's waits are async host calls: the guest runs as a future,
    // here on futures' executor (a tokio runtime works as well).
    let code = futures::executor::block_on(async {
        let instance = runtime.instantiate(&mut store, &module).await?;
        let run = instance.get_typed_func::<i32, i32>(&mut store, "run")?;
        run.call_async(&mut store, n).await
    })
    .map_err(|e| format!("{e:#}"))?;
    match code {
        0 => Ok(format!(
            "vector add of {n} floats by raw PTX on {device}: all {n} match"
        )),
        c if c < 0 => Err(format!(
            "a wasi_cuda call failed with errno {}: {}",
            -c,
            store.data().cuda.last_error()
        )),
        c => Err(format!("element {} does not match", c - 1)),
    }
}
