//! The `tensorwasm` binary the command-line tests run: included with
//! `#[path]` by every test that starts it.

use std::path::PathBuf;

/// `$TENSORWASM_BIN` where set (the GPU pack's runner sets it: cargo's path
/// does not exist on the device machine), else the one cargo built for
/// this test.
pub fn tensorwasm_bin() -> PathBuf {
    std::env::var_os("TENSORWASM_BIN").map_or_else(
        || PathBuf::from(env!("CARGO_BIN_EXE_tensorwasm")),
        PathBuf::from,
    )
}
