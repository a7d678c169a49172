//! Where the component tests (`component.rs`, `serve.rs`) find the built
//! WASI 0.2 component guests: included with `#[path]`.

use std::path::PathBuf;

/// The `tensorwasm` binary the tests run: `$TENSORWASM_BIN` where set (the
/// GPU pack's runner sets it: cargo's path does not exist there), else the
/// one cargo built for this test.
pub fn tensorwasm_bin() -> PathBuf {
    std::env::var_os("TENSORWASM_BIN").map_or_else(
        || PathBuf::from(env!("CARGO_BIN_EXE_tensorwasm")),
        PathBuf::from,
    )
}

/// The built component `file` (in `guest/target/wasm32-wasip2/release`,
/// where scripts/test.sh builds the guests), or `$var` when set; it must
/// exist (`how` says how to build it).
pub fn component(var: &str, file: &str, how: &str) -> PathBuf {
    let path = std::env::var_os(var).map(PathBuf::from).unwrap_or_else(|| {
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../guest/target/wasm32-wasip2/release")
            .join(file)
    });
    assert!(
        path.exists(),
        "{}: build the component first (`{how}`; scripts/test.sh builds every guest)",
        path.display()
    );
    path
}
