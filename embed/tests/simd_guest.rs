//! Kernels built for Wasm SIMD (`guest/examples/simd-kernels`, built for
//! `wasm32-unknown-unknown` by `scripts/test.sh` before the tests run):
//! LLVM vectorised each kernel's loop into `v128` code, which the
//! translator lowers lane by lane (`docs/kernels.md`, "SIMD"). The guest's
//! `run_simd_kernels` launches each over random rows and checks every
//! element against the same Rust built without SIMD; here on the CPU
//! driver.

use tensorwasm_core::lower::Lowerer;
use tensorwasm_core::lower::translate::translate_kernel;
use tensorwasm_cpu::CpuDriver;
use tensorwasm_embed::runtime::GuestRuntime;

#[path = "support/guests.rs"]
mod guests;
#[path = "support/ptx_out.rs"]
mod ptx_out;

/// The built guest (`support/guests.rs`).
fn guest_wasm() -> Vec<u8> {
    guests::guest_wasm("SIMD_KERNELS_GUEST_WASM", "simd_kernels.wasm")
}

/// Each kernel is SIMD code: its body has `v128` operators (LLVM
/// vectorised its loop), so the test below runs the translator's SIMD.
/// Each is also lowered to PTX for sm_75, sm_80 and sm_90 into
/// `target/ptx-out/simd_guest.<kernel>.sm_XX.ptx`, which
/// `scripts/check-ptx.sh` assembles.
#[test]
fn the_kernels_are_built_of_v128_operators() {
    let wasm = guest_wasm();
    let mut names = std::collections::HashMap::new();
    let mut bodies = Vec::new();
    let mut imported = 0;
    for payload in wasmparser::Parser::new(0).parse_all(&wasm) {
        match payload.expect("the guest parses") {
            wasmparser::Payload::ImportSection(r) => {
                for import in r.into_imports() {
                    if matches!(import.expect("import").ty, wasmparser::TypeRef::Func(_)) {
                        imported += 1;
                    }
                }
            }
            wasmparser::Payload::CustomSection(c) => {
                if let wasmparser::KnownCustom::Name(n) = c.as_known() {
                    for name in n.flatten() {
                        if let wasmparser::Name::Function(map) = name {
                            for naming in map.into_iter().flatten() {
                                names.insert(naming.index, naming.name.to_string());
                            }
                        }
                    }
                }
            }
            wasmparser::Payload::CodeSectionEntry(body) => bodies.push(body),
            _ => {}
        }
    }
    for kernel in [
        "saxpy_rows",
        "growth_rows",
        "xorshift_rows",
        "byte_sums",
        "row_sums",
    ] {
        // `simd_kernels::kernels::<kernel>`, mangled.
        let mangled = format!("7kernels{}{kernel}", kernel.len());
        let index = names
            .iter()
            .find(|(_, n)| n.contains(&mangled))
            .map(|(i, _)| *i)
            .unwrap_or_else(|| panic!("the guest has a function named kernels::{kernel}"));
        let body = &bodies[(index - imported) as usize];
        let v128 = body
            .get_operators_reader()
            .expect("operators")
            .into_iter()
            .filter(|op| {
                let op = format!("{:?}", op.as_ref().expect("an operator"));
                ["V128", "I8x16", "I16x8", "I32x4", "I64x2", "F32x4", "F64x2"]
                    .iter()
                    .any(|shape| op.starts_with(shape))
            })
            .count();
        assert!(
            v128 > 0,
            "kernels::{kernel} has no v128 operator: LLVM did not vectorise it"
        );
        let translated = translate_kernel(&wasm, index)
            .unwrap_or_else(|e| panic!("kernels::{kernel} is not translated: {e}"));
        if kernel == "row_sums" {
            // Its array of partial sums is in the thread's stack frame.
            assert!(translated.stack_window.is_some(), "row_sums has a frame");
        }
        let Some(dir) = ptx_out::ptx_out_dir() else {
            continue;
        };
        for target in ptx_out::ptx_targets() {
            let ptx = target
                .lower(kernel, &translated.function, translated.abi)
                .unwrap_or_else(|e| panic!("kernels::{kernel} is not lowered: {e}"));
            let (major, minor) = target.sm;
            std::fs::write(
                dir.join(format!("simd_guest.{kernel}.sm_{major}{minor}.ptx")),
                ptx,
            )
            .expect("write the PTX");
        }
    }
}

#[test]
fn kernels_built_with_simd128_run_on_the_cpu_driver() {
    let driver = CpuDriver::with_capacity(1 << 30).unwrap();
    let rt = GuestRuntime::new(driver, 256 << 20).unwrap();
    let module = rt.compile(guest_wasm()).unwrap();
    let mut store = rt.store().unwrap();
    let instance = futures::executor::block_on(rt.instantiate(&mut store, &module)).unwrap();
    let f = instance
        .get_typed_func::<(), i32>(&mut store, "run_simd_kernels")
        .unwrap();
    let status = futures::executor::block_on(f.call_async(&mut store, ())).unwrap();
    assert_eq!(
        status,
        0,
        "run_simd_kernels() (0: every element matched; 1_000_000 * k + i + 1: element i of \
         kernel k did not; -errno: a wasi_cuda call failed): last error: {}",
        store.data().cuda.last_error()
    );
}
