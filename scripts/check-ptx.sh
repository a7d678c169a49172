#!/usr/bin/env bash
# Assembles every .ptx file in the repo with ptxas for sm_75, sm_80 and sm_90.
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
  for arch in sm_75 sm_80 sm_90; do
    "$ptxas" -arch="$arch" "$f" -o "$tmp/out.cubin"
  done
  echo "ok  $f"
  count=$((count + 1))
done < <(find . -name '*.ptx' -not -path './target/*' -not -path './.device-pack/*' -print0)
echo "$count PTX file(s) assembled for sm_75, sm_80, sm_90"
