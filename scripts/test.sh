#!/usr/bin/env bash
# The project's test command (README, CI): formatting, lints, every test
# that runs without a GPU, the Wasm guests (the wasi_cuda-only guests and
# the WASI example, built before the tests, which load them), the no_std
# build of core, ptxas over every PTX file in the repo, the containerd shim
# (its container tests and a `ctr run` through it, on a containerd started
# here when run as root), and the deployment files (deploy/check.sh). GPU
# tests are #[ignore]d here; they run on a GPU through
# scripts/pack-gpu-tests.sh. It installs what it needs first (scripts/setup.sh:
# the toolchain's targets, Debian packages, wheels), before any cargo command.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*"; }

# Everything the checks below need, before the first cargo command (a fresh
# machine has only rustup, Python and a C compiler).
scripts/setup.sh

step "rustfmt"
cargo fmt --all --check

step "clippy (-D warnings)"
cargo clippy --workspace --all-targets -- -D warnings

# The guests are their own workspace (target wasm32-unknown-unknown, set in
# guest/.cargo/config.toml, which cargo reads from the working directory).
step "guests (wasm32-unknown-unknown): rustfmt, clippy, release build; the guest library's unit tests on the host"
(
    cd guest
    cargo fmt --all --check
    cargo clippy --release --workspace --all-targets -- -D warnings
    cargo build --release
    cargo test -p tensorwasm-guest --target "$(rustc -vV | sed -n 's/^host: //p')"
)

# The WASI example is a wasm32-wasip1 command, its own workspace (its
# .cargo/config.toml); it lands in guest/target/wasm32-wasip1/release.
step "WASI guest (wasm32-wasip1): rustfmt, clippy, release build"
(
    cd guest/examples/mlp-wasi
    cargo fmt --all --check
    cargo clippy --release --all-targets -- -D warnings
    cargo build --release
)

# The test component is a wasm32-wasip2 command, its own workspace (its
# .cargo/config.toml); it lands in guest/target/wasm32-wasip2/release, where
# cli/tests/component.rs runs it.
step "WASI 0.2 component (wasm32-wasip2): rustfmt, clippy, release build"
(
    cd guest/examples/wasip2-cli
    cargo fmt --all --check
    cargo clippy --release --all-targets -- -D warnings
    cargo build --release
)

# The GPU test component (tensorwasm:gpu through wit-bindgen, from
# wit/gpu.wit) likewise, and the benchmark's component (a reactor whose
# exports the host calls); cli/tests/component.rs and serve.rs run them.
step "GPU components (wasm32-wasip2, tensorwasm:gpu): rustfmt, clippy, release build"
for dir in guest/examples/gpu-component guest/examples/gpu-bench; do
    (
        cd "$dir"
        cargo fmt --all --check
        cargo clippy --release --all-targets -- -D warnings
        cargo build --release
    )
done

# The same MLP guest in Python (componentize-py) and JavaScript (jco
# componentize), from guest/examples/gpu-python and gpu-js, likewise; they
# land beside it.
step "GPU components in Python and JavaScript (componentize-py, jco componentize)"
guest/examples/build-lang-components.sh

# The C guests (guest/c/examples, zig cc for wasm32-wasi) land in
# guest/target/c; embed/tests/c_guest.rs loads them.
step "C guests (wasm32-wasi): zig cc build"
guest/c/build.sh

step "tests (CPU driver; GPU tests are ignored here), the shim's container tests on a containerd started here"
# The shim's container tests and its end-to-end run need containerd
# (installed by scripts/setup.sh); started here when this runs as root.
containerd_pid=""
if [ "$(id -u)" = 0 ] && [ ! -S /run/containerd/containerd.sock ]; then
    containerd_dir=$(mktemp -d)
    containerd --root "$containerd_dir/root" --state "$containerd_dir/state" \
        --address /run/containerd/containerd.sock >"$containerd_dir/log" 2>&1 &
    containerd_pid=$!
    trap 'kill "$containerd_pid" 2>/dev/null || true' EXIT
    for _ in $(seq 50); do [ -S /run/containerd/containerd.sock ] && break; sleep 0.2; done
fi
cargo test --workspace

step "the shim end to end: ctr run --runtime io.containerd.tensorwasm.v1 of the example image"
# The shim and the image builder `cargo test --workspace` built.
SHIM_BIN=target/debug/containerd-shim-tensorwasm-v1 IMAGE_BUILDER=target/debug/examples/image shim/e2e.sh
if [ -n "$containerd_pid" ]; then kill "$containerd_pid" 2>/dev/null || true; fi

# loom models of core::dispatch and core::quota; own target dir, since --cfg loom rebuilds every crate.
step "loom models (tensorwasm-core, --cfg loom)"
RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom \
    cargo test -p tensorwasm-core --test loom_dispatch --release
RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom \
    cargo test -p tensorwasm-core --test loom_quota --release

step "tensorwasm-core for thumbv7em-none-eabihf (no_std), with and without defmt"
cargo build -p tensorwasm-core --target thumbv7em-none-eabihf
cargo build -p tensorwasm-core --target thumbv7em-none-eabihf --features defmt

step "ptxas over every PTX file (sm_75, sm_80, sm_90)"
scripts/check-ptx.sh

# Kernels nobody shaped for the translator (PolyBench/GPU's programs in C,
# WAT loops of every shape, Rust), built by check-ptx above: each program
# at small sizes on the CPU driver, its outputs the bits wasmtime computes
# running the same Wasm per thread (the GPU timing of the same programs is
# the foreign_kernels benchmark).
step "foreign kernels on the CPU driver against wasmtime (foreign_kernels --cpu)"
cargo test --workspace --bench foreign_kernels -- --cpu

step "deploy: Dockerfile lint, the Helm chart rendered and validated against the Kubernetes schemas, its configuration served"
# The server binary `cargo test --workspace` built (building it alone
# would unify features differently and rebuild half the tree).
TENSORWASM_BIN=target/debug/tensorwasm deploy/check.sh

printf '\nall checks passed\n'
