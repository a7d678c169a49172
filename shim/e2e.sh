#!/usr/bin/env bash
# End to end through containerd: the shim installed where containerd finds
# it, the example image (examples/hello_gpu.wat as a file in a tar layer,
# which containerd 1.6 unpacks; shim/examples/image.rs) imported, and
# `ctr run --runtime io.containerd.tensorwasm.v1` of it: its output, its
# argv, its exit codes; then the same of an image of the GPU component (a
# WASI 0.2 component: its MLP through tensorwasm:gpu). Needs root and a containerd listening on
# /run/containerd/containerd.sock (scripts/test.sh starts one). SHIM_BIN,
# IMAGE_BUILDER (shim/examples/image.rs built) and IMAGE_TAR, when set, are
# used instead of building them. The guest
# runs on the CPU driver: a container made by ctr gets no GPU devices.
set -euo pipefail
cd "$(dirname "$0")/.."

SOCK=/run/containerd/containerd.sock
if [ "$(id -u)" != 0 ] || [ ! -S "$SOCK" ] || ! command -v ctr >/dev/null; then
    echo "shim e2e: skipped (needs root, ctr and a containerd at $SOCK)"
    exit 0
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if [ -z "${SHIM_BIN:-}" ]; then
    cargo build --quiet -p tensorwasm-shim --bin containerd-shim-tensorwasm-v1
    SHIM_BIN=target/debug/containerd-shim-tensorwasm-v1
fi
if [ -z "${IMAGE_BUILDER:-}" ]; then
    cargo build --quiet -p tensorwasm-shim --example image
    IMAGE_BUILDER=target/debug/examples/image
fi
if [ -z "${IMAGE_TAR:-}" ]; then
    IMAGE_TAR="$work/hello-gpu.tar"
    "$IMAGE_BUILDER" --rootfs examples/hello_gpu.wat ghcr.io/tensorwasm/hello-gpu:e2e "$IMAGE_TAR"
fi
# containerd looks the shim up on its PATH.
install -m 0755 "$SHIM_BIN" /usr/local/bin/containerd-shim-tensorwasm-v1
ctr() { command ctr -n tensorwasm-e2e "$@"; }
ctr image import --all-platforms "$IMAGE_TAR" >/dev/null
image=$(ctr image ls -q | grep hello-gpu | head -1)
# A core module's image is wasip1/wasm, a component's wasip2/wasm.
platform=wasip1/wasm
run() {
    local id="e2e-$RANDOM"
    ctr run --rm --platform "$platform" --runtime io.containerd.tensorwasm.v1 \
        "$image" "$id" "$@"
}

out=$(run)
echo "   ctr run: $out"
[[ "$out" == *"all 1048576 match"* ]]
out=$(run /hello_gpu.wasm 4096)
echo "   ctr run ... /hello_gpu.wasm 4096: $out"
[[ "$out" == *"all 4096 match"* ]]
set +e
run /hello_gpu.wasm not-a-number >"$work/bad" 2>&1
code=$?
set -e
echo "   ctr run ... /hello_gpu.wasm not-a-number: exit $code, $(cat "$work/bad")"
[ "$code" = 2 ]
ctr image rm "$image" >/dev/null

# A WASI 0.2 component through the same shim: the GPU component
# (guest/examples/gpu-component, built by scripts/test.sh) runs its MLP
# through tensorwasm:gpu and checks it against its own CPU computation.
component=${GPU_COMPONENT_GUEST_WASM:-guest/target/wasm32-wasip2/release/gpu-component.wasm}
if [ ! -f "$component" ]; then
    echo "shim e2e: $component missing: build the guests first (scripts/test.sh)" >&2
    exit 1
fi
"$IMAGE_BUILDER" --rootfs "$component" ghcr.io/tensorwasm/gpu-component:e2e "$work/component.tar"
ctr image import --all-platforms "$work/component.tar" >/dev/null
image=$(ctr image ls -q | grep gpu-component | head -1)
platform=wasip2/wasm
out=$(run)
echo "   ctr run (component): $out"
[[ "$out" == *"mlp ok: batch 5, 37 -> 67 -> 10"* ]]
out=$(run /gpu-component.wasm mlp 7)
echo "   ctr run ... /gpu-component.wasm mlp 7: $out"
[[ "$out" == "seed 7"* && "$out" == *"mlp ok: batch 5"* ]]
ctr image rm "$image" >/dev/null
echo "shim e2e passed"
