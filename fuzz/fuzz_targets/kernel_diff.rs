//! Wasm kernels on the CPU driver against wasmtime: each input is one case
//! of `fuzz/kernel_case` (a wasm-smith module with bulk memory,
//! `call_indirect`, mutable globals, and a kernel that calls F through a
//! shadow-stack frame; that module's docs say how it is made and
//! compared), translated (`translate_kernel`, and the variant the runtime
//! launches for the case: `translate_kernel_variant` for the guest's own
//! grid, with the aligned copy alone or the general body as the case's
//! arguments decide; one or both, as the input picks), lowered
//! (`CpuKernelLowerer`) and launched on a `CpuDriver`. Any difference from
//! wasmtime — trap or not, the trap's kind and offset, a byte of guest
//! memory outside the stack window, a byte past it — is a crash.
//!
//! What happened to the inputs is counted on stderr at every power of two
//! from 1,024 inputs and every 4,096: compared (by outcome), skipped (by
//! reason: no module from the input, a translator refusal by operator, too
//! large, failed instantiation, out of fuel), and, among the compared, how
//! many ran each kernel (`info: compared, variant any`, `... own+aligned`,
//! `... own+aligned (one body)` where the kernel has no aligned copy,
//! `... own+general`), how many had `call_indirect`, `global.set`,
//! `memory.copy`, `memory.fill`,
//! atomics, calls of the cooperative intrinsics (shared memory, shared
//! atomics, `barrier`, warp operations) or of the fused multiply-adds in
//! F's call graph, and how many called the cooperative ones (on wasmtime)
//! and trapped in a shared access.
//!
//! `KERNEL_DIFF_DEBUG=1` prints every compared run (and why each skipped
//! one was skipped); `KERNEL_DIFF_WASM=path`
//! writes the module of a differing run there.

#![no_main]

use std::sync::{Mutex, OnceLock, PoisonError};

use arbitrary::Unstructured;
use libfuzzer_sys::fuzz_target;
use tensorwasm_core::GpuDriver;
use tensorwasm_cpu::{CpuDriver, CpuStream};

#[path = "../kernel_case/mod.rs"]
mod kernel_case;

use kernel_case::{Checked, Tally, check, generate};

fuzz_target!(|data: &[u8]| {
    let checked = match generate(&mut Unstructured::new(data)) {
        Err(e) => Checked::Skipped(format!("no module from this input ({e})")),
        Ok(Err(why)) => Checked::Skipped(why),
        Ok(Ok(case)) => {
            let (driver, stream) = driver();
            let checked = check(driver, stream, &case, "CPU");
            tally(|t| t.add_rewrites(&case));
            if std::env::var_os("KERNEL_DIFF_DEBUG").is_some()
                && let Checked::Compared {
                    outcome,
                    kernels,
                    uses,
                    ran,
                    shared_trap,
                } = &checked
            {
                let place = if *shared_trap {
                    " in a shared access"
                } else {
                    ""
                };
                eprintln!(
                    "kernel_diff: {outcome}{place} ({}); F's call graph has {uses:?}, the run \
                     called {ran:?}; {}",
                    kernels.join(", "),
                    case.describe()
                );
            }
            if let Checked::Differs(diff) | Checked::DriverFailed(diff) = &checked {
                if let Ok(path) = std::env::var("KERNEL_DIFF_WASM") {
                    let _ = std::fs::write(&path, &case.wasm);
                }
                panic!(
                    "kernel_diff: the CPU kernel differs from wasmtime\n{diff}{} \
                     (KERNEL_DIFF_WASM=path writes the module)",
                    case.describe()
                );
            }
            checked
        }
    };
    if std::env::var_os("KERNEL_DIFF_DEBUG").is_some()
        && let Checked::Skipped(why) = &checked
    {
        eprintln!("kernel_diff: skipped: {why}");
    }
    tally(|t| t.add_checked(&checked));
});

/// The CPU driver and one stream for every launch (a stream is a thread).
fn driver() -> &'static (CpuDriver, CpuStream) {
    static DRIVER: OnceLock<(CpuDriver, CpuStream)> = OnceLock::new();
    DRIVER.get_or_init(|| {
        let driver = CpuDriver::with_capacity(64 << 20).expect("the CPU driver");
        let stream = driver.create_stream().expect("a stream");
        (driver, stream)
    })
}

/// Updates the tally; prints it at every power of two from 1,024 cases and
/// every 4,096 (a 30-minute run makes about 15,000).
fn tally(update: impl FnOnce(&mut Tally)) {
    static TALLY: Mutex<Tally> = Mutex::new(Tally::new());
    let mut tally = TALLY.lock().unwrap_or_else(PoisonError::into_inner);
    let before = tally.cases();
    update(&mut tally);
    let n = tally.cases();
    if n != before && ((n >= 1024 && n.is_power_of_two()) || n % 4096 == 0) {
        eprintln!(
            "kernel_diff tally after {n} inputs ({} compared):{}",
            tally.count("compared:"),
            tally.line()
        );
    }
}
