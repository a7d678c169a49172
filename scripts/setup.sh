#!/usr/bin/env bash
# Installs everything the project's test command (scripts/test.sh) needs on
# a fresh Linux machine that has only rustup, Python 3 with pip, a C
# compiler and unzip: nothing here is assumed to be present before it runs,
# and it runs before the first cargo command. Idempotent: what is there
# already is left as it is.
#   - the toolchain pinned in rust-toolchain.toml with rustfmt, clippy and
#     the targets the checks build for (thumbv7em-none-eabihf for core's
#     no_std build; wasm32-unknown-unknown and wasm32-wasip1 for the guests
#     and the shim's test modules, which clippy builds; wasm32-wasip2 for the
#     test component);
#   - Debian packages: protoc and libseccomp (the shim's build), containerd
#     (its container tests); installed with apt-get when this runs as root,
#     else named and the script fails;
#   - wheels and tools under target/tools: ptxas (scripts/check-ptx.sh),
#     the CUDA 13.0 compiler (scripts/build-kernels.sh), helm, hadolint and
#     kubernetes-validate (deploy/check.sh), zig (guest/c/build.sh),
#     componentize-py and jco (with node from a wheel when the machine has
#     none; guest/examples/build-lang-components.sh); each script installs
#     its own (its --tools mode), so the versions live in one place.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*"; }

step "setup: the pinned Rust toolchain, its components and targets"
# rustup installs the toolchain rust-toolchain.toml names on first use, with
# the components and targets it lists, but not those targets when the
# toolchain was already there: add them every time (a no-op when present).
toolchain=$(sed -n 's/^channel *= *"\(.*\)"/\1/p' rust-toolchain.toml)
# Installed only when missing: reinstalling a toolchain in use would pull
# rustc from under builds that run beside this one.
rustup run "$toolchain" rustc --version >/dev/null 2>&1 ||
    rustup toolchain install "$toolchain" --profile minimal
rustup component add --toolchain "$toolchain" rustfmt clippy
rustup target add --toolchain "$toolchain" thumbv7em-none-eabihf wasm32-unknown-unknown wasm32-wasip1 wasm32-wasip2

step "setup: Debian packages (protoc, libseccomp, containerd)"
need=()
command -v protoc >/dev/null || need+=(protobuf-compiler)
[ -e /usr/include/seccomp.h ] || need+=(libseccomp-dev)
command -v containerd >/dev/null || need+=(containerd)
command -v unzip >/dev/null || need+=(unzip)
if [ ${#need[@]} -gt 0 ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
    else
        echo "missing: ${need[*]} (as root: apt-get install ${need[*]})" >&2
        exit 1
    fi
fi
echo "protoc: $(protoc --version); containerd: $(containerd --version | cut -d' ' -f3)"

step "setup: wheels and tools under target/tools"
scripts/check-ptx.sh --tools
scripts/build-kernels.sh --tools
deploy/check.sh --tools
guest/c/build.sh --tools  # zig (zig cc), for the C guests
guest/examples/build-lang-components.sh --tools  # componentize-py, node, jco: the Python and JavaScript guests
