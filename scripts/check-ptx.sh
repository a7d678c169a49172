#!/usr/bin/env bash
# Assembles every hand-written .ptx file in the repo with ptxas for sm_75,
# sm_80 and sm_90 (those at or above the file's `.target`: a Hopper-only
# test kernel is assembled for sm_90 alone); checks the built-in kernels' generated PTX
# (kernels/ptx/, CUDA 13.0, PTX ISA 9.0) with `scripts/build-kernels.sh
# --check`, which rebuilds it from kernels/src, diffs, and assembles each file
# for its own target with the CUDA 13.0 ptxas; then the PTX lowerer's output: `cargo test -p tensorwasm-core --features
# lower --test ptx` lowers its test kernels once per target (sm_75 and sm_80
# with PTX ISA 7.0, sm_90 with 7.8) into target/ptx-out/<kernel>.sm_XX.ptx,
# and embed's `kernel_ops` test lowers one Wasm kernel per operator (each
# target with its oldest ISA) into target/ptx-out/kernel_ops.<op>.sm_XX.ptx,
# and `kernel_atomics` every atomic kernel (the SDK's intrinsics among them)
# into target/ptx-out/kernel_atomics.<export>.sm_XX.ptx;
# each file is assembled for the target its `.target` line names.
# ptxas runs without a GPU; it comes from the PyPI wheel nvidia-cuda-nvcc-cu12
# (installed under target/tools/ when not on PATH or in $PTXAS).
set -euo pipefail
cd "$(dirname "$0")/.."
version=12.9.86
ptxas=${PTXAS:-}
if [ -z "$ptxas" ]; then
  if command -v ptxas >/dev/null; then
    ptxas=$(command -v ptxas)
  else
    tools=target/tools/nvcc-$version
    ptxas=$tools/nvidia/cuda_nvcc/bin/ptxas
    if [ ! -x "$ptxas" ]; then
      python3 -m pip install --quiet --no-deps --target "$tools" "nvidia-cuda-nvcc-cu12==$version"
    fi
  fi
fi
"$ptxas" --version | tail -1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
count=0
while IFS= read -r -d '' f; do
  target=$(sed -n 's/^\.target sm_\([0-9]*\).*/\1/p' "$f" | head -n1)
  for arch in 75 80 90; do
    [ "$arch" -ge "${target:-0}" ] || continue
    "$ptxas" -arch="sm_$arch" "$f" -o "$tmp/out.cubin"
  done
  echo "ok  $f"
  count=$((count + 1))
done < <(find . -name '*.ptx' -not -path './target/*' -not -path './.device-pack/*' \
  -not -path './kernels/ptx/*' -not -path './fuzz/*' -not -path './guest/target/*' -print0)
echo "$count PTX file(s) assembled for sm_75, sm_80, sm_90 (from each one's .target up)"

scripts/build-kernels.sh --check

# The op table's and lowerer's unit tests (docs/op-table.md must match the
# table), then the lowerer's kernels, emitted afresh so no stale file is
# assembled.
cargo test -q -p tensorwasm-core --features lower --lib -- lower::table lower::ptx
rm -rf target/ptx-out
cargo test -q -p tensorwasm-core --features lower --test ptx
cargo test -q -p tensorwasm-embed --test kernel_ops -- ptx_for_every_kernel
cargo test -q -p tensorwasm-embed --test kernel_atomics -- ptx_for_every_atomic_kernel
lowered=0
for f in target/ptx-out/*.ptx; do
  [ -e "$f" ] || continue
  arch=$(sed -n 's/^\.target \(sm_[0-9a-z]*\).*/\1/p' "$f" | head -n1)
  "$ptxas" -arch="$arch" "$f" -o "$tmp/out.cubin"
  lowered=$((lowered + 1))
done
if [ "$lowered" -eq 0 ]; then
  echo "no PTX in target/ptx-out: the lowerer's tests wrote none" >&2
  exit 1
fi
echo "$lowered lowered kernel(s) in target/ptx-out assembled, each for its .target"
