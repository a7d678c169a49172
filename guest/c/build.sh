#!/usr/bin/env bash
# Builds the C guest examples (guest/c/examples/*.c) for wasm32-wasi with
# the pinned zig (PyPI wheel `ziglang`, its `zig cc`: clang and wasi-libc
# in one package), into guest/target/c/<name>.wasm (git-ignored; the host's
# tests load them from there: embed/tests/c_guest.rs).
#
#   guest/c/build.sh          build every example
#   guest/c/build.sh --tools  only install zig (scripts/setup.sh)
#   guest/c/build.sh --zig    install zig if needed and print its path (for
#                             other scripts that compile C to Wasm)
#
# zig is unzipped from its wheel into target/tools/zig-<version> (set
# TW_ZIG_WHEELS to a directory that already holds the wheel to skip the
# download). Nothing outside target/tools/ and guest/target/c/ is written.
set -euo pipefail
cd "$(dirname "$0")/../.."

version=0.15.1
tools=target/tools/zig-$version
zig=$tools/ziglang/zig
# The flags every C guest is built with: a WASI reactor (no main; the host
# calls exports), the stack pointer exported (a Wasm kernel's threads start
# from its value at launch: docs/kernels.md), optimised.
cflags=(-target wasm32-wasi -O2 -mexec-model=reactor -Wl,--export=__stack_pointer)

install_zig() {
  local dl whl
  dl=$(mktemp -d)
  if [ -n "${TW_ZIG_WHEELS:-}" ]; then
    cp "$TW_ZIG_WHEELS"/ziglang-"$version"-*.whl "$dl"/
  else
    echo "downloading zig $version (PyPI ziglang) into $tools" >&2
    python3 -m pip download --quiet --no-deps --only-binary=:all: \
      --platform manylinux_2_12_x86_64 --dest "$dl" "ziglang==$version"
  fi
  whl=$(ls "$dl"/ziglang-"$version"-*.whl | head -n1)
  mkdir -p "$tools"
  # unzip keeps the binary's mode.
  unzip -q -o "$whl" -d "$tools"
  rm -rf "$dl"
}

if [ ! -x "$zig" ]; then install_zig; fi
case "${1:-}" in
  --tools) "$zig" version; exit 0 ;;
  --zig) echo "$zig"; exit 0 ;;
  "") ;;
  *) echo "usage: $0 [--tools | --zig]" >&2; exit 2 ;;
esac

out=guest/target/c
mkdir -p "$out"
for src in guest/c/examples/*.c; do
  name=$(basename "$src" .c)
  "$zig" cc "${cflags[@]}" -o "$out/$name.wasm" "$src"
  echo "built $out/$name.wasm (zig $version: zig cc ${cflags[*]})"
done
