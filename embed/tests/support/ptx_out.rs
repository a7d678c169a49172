//! Where the tests that lower Wasm kernels to PTX put their files for
//! `scripts/check-ptx.sh`, and the targets they lower for.

use std::path::PathBuf;

use tensorwasm_core::lower::ptx::PtxLowerer;

/// `target/ptx-out` of the checkout, created; `None` for a packed test
/// binary on the device machine, which has no checkout to write to.
pub fn ptx_out_dir() -> Option<PathBuf> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let dir = root
        .join("Cargo.toml")
        .exists()
        .then(|| root.join("target/ptx-out"))?;
    std::fs::create_dir_all(&dir).expect("create target/ptx-out");
    Some(dir)
}

/// sm_75, sm_80 and sm_90, each with the oldest PTX ISA that knows it.
pub fn ptx_targets() -> Vec<PtxLowerer> {
    [(7, 5), (8, 0), (9, 0)]
        .into_iter()
        .map(|sm| PtxLowerer {
            sm,
            isa: PtxLowerer::min_isa(sm).expect("a known target"),
        })
        .collect()
}
