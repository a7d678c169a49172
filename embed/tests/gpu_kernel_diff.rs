//! Wasm kernels on a GPU against wasmtime: the `kernel_diff` fuzz target's
//! cases (`fuzz/kernel_case`, included below: wasm-smith modules with bulk
//! memory, `call_indirect` and mutable globals, and a kernel that calls F
//! through a shadow-stack frame) made from seeded bytes, translated (for
//! every launch, and as the variant the runtime launches for the case),
//! lowered to PTX for the device's compute capability, loaded and launched
//! on the CUDA driver over managed guest memory, and compared with
//! wasmtime: the outcome (trap kind and offset), guest memory outside the
//! stack window, and bytes past it. The CUDA test needs a GPU (run it on the
//! device machine with `--include-ignored`; scripts/pack-gpu-tests.sh packs
//! this file); a smaller run on the CPU driver tests the harness in CI.
//!
//! `TENSORWASM_SEED` repeats a run (its seed is printed), `KERNEL_DIFF_CASE`
//! runs one case of it, and `KERNEL_DIFF_WASM_DIR` gets the module of each
//! differing case (`case-<n>-<case seed>.wasm`).

use arbitrary::Unstructured;
use tensorwasm_conformance::Rng;
use tensorwasm_cpu::CpuDriver;
use tensorwasm_cuda::CudaDriver;
use tensorwasm_embed::kernel::KernelTarget;

#[path = "../../fuzz/kernel_case/mod.rs"]
mod kernel_case;

use kernel_case::{Checked, Tally, check, generate};

/// Input bytes per case: wasm-smith rarely runs out with this many.
const CASE_BYTES: usize = 16 << 10;
/// Differing cases after which a run stops (each is reported).
const MAX_REPORTS: usize = 10;

#[test]
#[ignore = "needs a CUDA GPU"]
fn gpu_kernels_match_wasmtime() {
    let driver = CudaDriver::new(0).expect("a CUDA device");
    differential(&driver, "CUDA", 200, 4000);
}

#[test]
fn cpu_kernels_match_wasmtime() {
    let driver = CpuDriver::with_capacity(64 << 20).expect("the CPU driver");
    differential(&driver, "CPU", 50, 1000);
}

/// Runs cases until `compared` of them have been compared (at most `cases`
/// in all), prints the tally, and fails on any difference or on fewer
/// compared cases.
fn differential<D: KernelTarget>(driver: &D, target: &str, compared: u64, cases: u64) {
    let device = driver.device();
    let mut rng = Rng::from_env(&format!(
        "gpu_kernel_diff on {target} ({}, sm {:?})",
        device.name, device.compute_capability
    ));
    let only: Option<u64> = std::env::var("KERNEL_DIFF_CASE")
        .ok()
        .map(|c| c.parse().expect("KERNEL_DIFF_CASE is a case number"));
    let stream = driver.create_stream().expect("a stream");
    let mut tally = Tally::new();
    let mut reports = Vec::new();
    for i in 0..cases {
        let seed = rng.next_u64();
        if only.is_some_and(|only| only != i) {
            continue;
        }
        if tally.count("compared:") >= compared || reports.len() >= MAX_REPORTS {
            break;
        }
        let bytes = case_bytes(seed);
        let (checked, case) = match generate(&mut Unstructured::new(&bytes)) {
            Err(e) => (
                Checked::Skipped(format!("no module from this input ({e})")),
                None,
            ),
            Ok(Err(why)) => (Checked::Skipped(why), None),
            Ok(Ok(case)) => {
                tally.add_rewrites(&case);
                (check(driver, &stream, &case, target), Some(case))
            }
        };
        tally.add_checked(&checked);
        if let (Checked::Differs(report) | Checked::DriverFailed(report), Some(case)) =
            (&checked, &case)
        {
            if let Ok(dir) = std::env::var("KERNEL_DIFF_WASM_DIR") {
                let path = std::path::Path::new(&dir).join(format!("case-{i}-{seed:#x}.wasm"));
                std::fs::write(&path, &case.wasm).expect("write the module");
            }
            let report = format!("case {i} (seed {seed:#x}): {report}{}", case.describe());
            println!("{report}");
            reports.push(report);
            if matches!(checked, Checked::DriverFailed(_)) {
                // The CUDA context is lost: no later case would run.
                break;
            }
        }
    }
    println!("tally ({target}):");
    for (what, n) in tally.entries() {
        println!("  {what}: {n}");
    }
    assert!(
        reports.is_empty(),
        "{} case(s) differ from wasmtime on {target}:\n{}",
        reports.len(),
        reports.join("\n")
    );
    if only.is_none() {
        let done = tally.count("compared:");
        assert!(
            done >= compared,
            "only {done} of {} cases were compared on {target}; want {compared}:{}",
            tally.cases(),
            tally.line()
        );
    }
}

/// Case bytes, from the case's own seed.
fn case_bytes(seed: u64) -> Vec<u8> {
    let mut rng = Rng::new(seed);
    (0..CASE_BYTES / 8)
        .flat_map(|_| rng.next_u64().to_le_bytes())
        .collect()
}
