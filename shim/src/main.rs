//! `containerd-shim-tensorwasm-v1`: what containerd starts for a container
//! whose runtime is `io.containerd.tensorwasm.v1` (docs/deploy.md).

use containerd_shim_wasm::shim::Cli as _;
use tensorwasm_shim::TensorWasmShim;

fn main() {
    TensorWasmShim::run(None);
}
