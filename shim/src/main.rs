//! `containerd-shim-tensorwasm-v1`: what containerd starts for a container
//! whose runtime is `io.containerd.tensorwasm.v1` (docs/deploy.md).

use containerd_shim_wasm::shim::Cli as _;
use tensorwasm_shim::{TensorWasmShim, preload_cuda};

fn main() {
    // Before any container exists: the guest's process, inside the
    // container's file system, finds the driver already loaded.
    preload_cuda();
    TensorWasmShim::run(None);
}
