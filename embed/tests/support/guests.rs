//! The Rust guests' Wasm, as the tests load it: from the path in an
//! environment variable when set (the device machine's pack carries the
//! guests there, without guest/target), else from the guest workspace's
//! release build (`scripts/test.sh` builds it before the tests run).

use std::path::PathBuf;

/// The guest `file` (`mlp.wasm`, ...) of the guest workspace's
/// `wasm32-unknown-unknown` release build, or the file `$env` names.
pub fn guest_wasm(env: &str, file: &str) -> Vec<u8> {
    let path = std::env::var_os(env).map(PathBuf::from).unwrap_or_else(|| {
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../guest/target/wasm32-unknown-unknown/release")
            .join(file)
    });
    std::fs::read(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e}; build the Rust guests first (scripts/test.sh does: \
             `cd guest && cargo build --release`)",
            path.display()
        )
    })
}
