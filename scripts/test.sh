#!/usr/bin/env bash
# The project's test command (README, CI): formatting, lints, every test
# that runs without a GPU, the no_std build of core, and ptxas over every
# PTX file in the repo. GPU tests are #[ignore]d here; they run on a GPU
# through scripts/pack-gpu-tests.sh.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*"; }

step "rustfmt"
cargo fmt --all --check

step "clippy (-D warnings)"
cargo clippy --workspace --all-targets -- -D warnings

step "tests (CPU driver; GPU tests are ignored here)"
cargo test --workspace

# loom models of core::dispatch; own target dir, since --cfg loom rebuilds every crate.
step "loom models (tensorwasm-core, --cfg loom)"
RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom \
    cargo test -p tensorwasm-core --test loom_dispatch --release

step "tensorwasm-core for thumbv7em-none-eabihf (no_std), with and without defmt"
rustup target add thumbv7em-none-eabihf >/dev/null 2>&1 || true
cargo build -p tensorwasm-core --target thumbv7em-none-eabihf
cargo build -p tensorwasm-core --target thumbv7em-none-eabihf --features defmt

step "ptxas over every PTX file (sm_75, sm_80, sm_90)"
scripts/check-ptx.sh

printf '\nall checks passed\n'
