//! Where the component tests (`component.rs`, `serve.rs`) find the built
//! WASI 0.2 component guests: included with `#[path]`.

use std::path::PathBuf;

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
