#!/usr/bin/env bash
# Builds the GPU test binaries in release mode and packs them, with a runner,
# into .device-pack/ (git-ignored through .git/info/exclude) for the device
# machine, which has a GPU but no Rust toolchain. Every session runs the same:
#
#   scripts/pack-gpu-tests.sh
#   device run:  command ".device-pack/run.sh"   carry [".device-pack"]
#   (PACK_BENCH=1: also command ".device-bench/bench.sh", carry [".device-bench"])
#
# The runner runs every packed test binary with --include-ignored, then
# `tensorwasm devices`, and writes one log per binary plus summary.txt to $OUT.
# GPU_TEST_PACKAGES (space-separated) picks the crates whose tests are packed;
# of tensorwasm-embed only the `gpu`, `kernel_ops`, `tensor_ops`, `mlp_guest`,
# `rust_kernels`, `kernel_stack`, `wasi_guest`, `tenants_stress`, `kernel_limits`,
# `gpu_kernel_diff`, `kernel_atomics`, `kernel_coop`, `faults`, `oom`, `device_lost`, `snapshot`,
# `launch_queue` and `c_guest` test targets are packed (c_guest with the C example guest,
# guest/target/c/saxpy.wasm, through C_GUEST_WASM), of tensorwasm-cli (tests that drive the `tensorwasm`
# binary) `wasi_guest`, `supervise`, `serve` and `soak` (the soak for
# TW_SOAK_SECS, 60 s unless set, losing the device every TW_SOAK_FAULT_SECS,
# 20 s; the others run in CI and each
# carries a whole wasmtime).
# The example guests go along too (examples/*.wat, and the Rust guests if
# guest/ has been built; run.sh points the `mlp_guest` and `rust_kernels` tests at
# the packed mlp.wasm and rust_kernels.wasm through MLP_GUEST_WASM and
# RUST_KERNELS_GUEST_WASM, and the `wasi_guest` tests at the packed
# mlp-wasi.wasm and tensorwasm through MLP_WASI_GUEST_WASM and TENSORWASM_BIN,
# since guest/target and target/ are not carried),
# and the benchmark binaries (guest_overhead, wasm_kernels, tenants,
# rust_kernels, coop_kernels, compute_kernels, foreign_kernels and
# components: the kernel benches read the packed kernel_bench.wasm;
# foreign_kernels also its C module, built here by
# scripts/build-foreign-kernels.sh --wasm) when PACK_BENCH=1 (BENCHES,
# space-separated, packs only some), into a pack of their own,
# .device-bench/ (with the example guests), so that each pack stays under
# the device tool's 64 MiB (tests and four benchmarks together did not,
# 2026-11-29); `.device-pack/run.sh` then runs `tensorwasm run` on each
# example guest, and `.device-bench/bench.sh` (carry .device-bench) the
# benchmarks. With coop_kernels, the bench built with `--features
# bench-unsandboxed` into UNSANDBOXED_TARGET_DIR (target/unsandboxed) goes
# along as coop_kernels_unsandboxed when that directory exists (the script
# brings it up to date there), and bench.sh runs it after coop_kernels.
# run.sh exports CUDA_DEVICE_MAX_CONNECTIONS=32 (one hardware queue per
# stream of up to 32 tenants) for the tests and the example runs.
# PACK_COMPONENTS=1 also packs tensorwasm-cli's `component` tests and the
# WASI 0.2 component guests they and the serve tests run (wasip2-cli,
# gpu-component, gpu-python, gpu-js: about 33 MB of Wasm, so best packed
# alone: GPU_TEST_PACKAGES=tensorwasm-cli PACK_COMPONENTS=1), which run.sh
# points them at (WASIP2_CLI_GUEST_WASM, GPU_COMPONENT_GUEST_WASM,
# GPU_PYTHON_GUEST_WASM, GPU_JS_GUEST_WASM).
set -euo pipefail
cd "$(dirname "$0")/.."
packages=${GPU_TEST_PACKAGES:-"tensorwasm-cuda tensorwasm-embed tensorwasm-cli"}
pack=.device-pack
bench_pack=.device-bench
rm -rf "$pack" "$bench_pack"
mkdir -p "$pack/bin"
exclude=$(git rev-parse --git-path info/exclude)  # a worktree's .git is a file
for ignored in /.device-pack/ /.device-bench/; do
  grep -qx "$ignored" "$exclude" 2>/dev/null || echo "$ignored" >> "$exclude"
done

args=()
for p in $packages; do args+=(-p "$p"); done
cargo build --release -p tensorwasm-cli --bin tensorwasm
cp target/release/tensorwasm "$pack/bin/tensorwasm"
cli_tests='"wasi_guest", "supervise", "serve", "soak"'
if [ "${PACK_COMPONENTS:-0}" = 1 ]; then cli_tests="$cli_tests"', "component"'; fi
cargo test --release "${args[@]}" --no-run --message-format=json \
  | python3 -c '
import json, shutil, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") != "compiler-artifact" or not m.get("executable"):
        continue
    if not m["profile"]["test"]:
        continue
    if "tensorwasm-embed" in m["package_id"] and m["target"]["name"] not in ("gpu", "kernel_ops", "tensor_ops", "mlp_guest", "rust_kernels", "kernel_stack", "wasi_guest", "tenants_stress", "kernel_limits", "gpu_kernel_diff", "kernel_atomics", "kernel_coop", "faults", "oom", "device_lost", "snapshot", "c_guest", "launch_queue"):
        continue
    if "tensorwasm-cli" in m["package_id"] and m["target"]["name"] not in ('"$cli_tests"'):
        continue
    crate = m["package_id"].split("#")[-1].split("@")[0].rsplit("/", 1)[-1]
    name = crate + "--" + m["target"]["name"]
    shutil.copy(m["executable"], f"'"$pack"'/bin/{name}")
    print("packed", name)
'

mkdir -p "$pack/examples"
cp examples/*.wat "$pack/examples/"
rust_guest=guest/target/wasm32-unknown-unknown/release/vector_add_guest.wasm
if [ -f "$rust_guest" ]; then cp "$rust_guest" "$pack/examples/"; fi
mlp_guest=guest/target/wasm32-unknown-unknown/release/mlp.wasm
if [ -f "$mlp_guest" ]; then cp "$mlp_guest" "$pack/examples/"; fi
rust_kernels_guest=guest/target/wasm32-unknown-unknown/release/rust_kernels.wasm
if [ -f "$rust_kernels_guest" ]; then cp "$rust_kernels_guest" "$pack/examples/"; fi
kernel_bench=guest/target/wasm32-unknown-unknown/release/kernel_bench.wasm
if [ -f "$kernel_bench" ]; then cp "$kernel_bench" "$pack/examples/"; fi
wasi_guest=guest/target/wasm32-wasip1/release/mlp-wasi.wasm
if [ -f "$wasi_guest" ]; then cp "$wasi_guest" "$pack/examples/"; fi
if [ -f guest/target/c/saxpy.wasm ]; then cp guest/target/c/saxpy.wasm "$pack/examples/"; fi
# The small components always (the serve tests run them); the Python and
# JavaScript ones with PACK_COMPONENTS=1.
components="wasip2-cli gpu-component gpu_bench"
if [ "${PACK_COMPONENTS:-0}" = 1 ]; then components="$components gpu-python gpu-js"; fi
for c in $components; do
  if [ -f "guest/target/wasm32-wasip2/release/$c.wasm" ]; then
    cp "guest/target/wasm32-wasip2/release/$c.wasm" "$pack/examples/"
  fi
done
if [ "${PACK_BENCH:-0}" = 1 ]; then
  mkdir -p "$pack/bench"
  bench_args=()
  for b in ${BENCHES:-guest_overhead wasm_kernels tenants}; do bench_args+=(--bench "$b"); done
  cargo bench -p tensorwasm-embed "${bench_args[@]}" --no-run --message-format=json \
    | python3 -c '
import json, shutil, sys
benches = ("guest_overhead", "wasm_kernels", "tenants", "rust_kernels", "coop_kernels", "compute_kernels", "foreign_kernels", "components")
for line in sys.stdin:
    m = json.loads(line)
    name = m.get("target", {}).get("name")
    if m.get("reason") == "compiler-artifact" and m.get("executable") and name in benches:
        shutil.copy(m["executable"], "'"$pack"'/bench/" + name)
        print("packed bench", name)
'
  if [[ " ${BENCHES:-} " == *" foreign_kernels "* ]]; then
    scripts/build-foreign-kernels.sh --wasm
    cp guest/target/c/foreign_kernels.wasm "$pack/examples/"
  fi
  unsandboxed=${UNSANDBOXED_TARGET_DIR:-target/unsandboxed}
  if [[ " ${BENCHES:-} " == *" coop_kernels "* ]] && [ -d "$unsandboxed" ]; then
    CARGO_TARGET_DIR="$unsandboxed" cargo bench -p tensorwasm-embed --bench coop_kernels \
      --features bench-unsandboxed --no-run --message-format=json \
      | python3 -c '
import json, shutil, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == "coop_kernels":
        shutil.copy(m["executable"], "'"$pack"'/bench/coop_kernels_unsandboxed")
        print("packed bench coop_kernels_unsandboxed")
'
  fi
  cat > "$pack/bench.sh" <<'BENCH'
#!/usr/bin/env bash
# Runs the packed benchmarks on the device machine; results go to $OUT.
cd "$(dirname "$0")"
# One after the other (BENCHES picks some: BENCHES=wasm_kernels); each writes
# its JSON to $OUT and its printed table to $OUT/<name>.txt. Exits with the
# first failing benchmark's status (2: no CUDA device). Benchmarks left out of
# the pack are skipped with a note. coop_kernels_unsandboxed (the same bench
# without the sandbox's checks, when packed) runs right after coop_kernels.
export OUT=${OUT:-/tmp/tensorwasm-bench-out}
mkdir -p "$OUT"
if [ -f examples/kernel_bench.wasm ]; then export RUST_KERNELS_WASM="$PWD/examples/kernel_bench.wasm"; fi
if [ -f examples/foreign_kernels.wasm ]; then export FOREIGN_KERNELS_WASM="$PWD/examples/foreign_kernels.wasm"; fi
if [ -f examples/gpu_bench.wasm ]; then export GPU_BENCH_GUEST_WASM="$PWD/examples/gpu_bench.wasm"; fi
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
status=0
names=()
for name in ${BENCHES:-guest_overhead wasm_kernels tenants}; do
  names+=("$name")
  if [ "$name" = coop_kernels ] && [ -x bench/coop_kernels_unsandboxed ]; then
    names+=(coop_kernels_unsandboxed)
  fi
done
for name in "${names[@]}"; do
  if [ ! -x bench/"$name" ]; then echo "$name: not packed (PACK_BENCH=1 BENCHES=...)"; continue; fi
  bench/"$name" "$@" 2>&1 | tee "$OUT/$name.txt"
  s=${PIPESTATUS[0]}
  if [ "$status" = 0 ] && [ "$s" != 0 ]; then status=$s; fi
done
exit $status
BENCH
  chmod +x "$pack/bench.sh"
fi

# Line tables are only for local backtraces; the pack must stay small.
strip --strip-debug "$pack"/bin/* "$pack"/bench/* 2>/dev/null || strip --strip-debug "$pack"/bin/*

cat > "$pack/run.sh" <<'RUN'
#!/usr/bin/env bash
# Runs the packed GPU tests on the device machine; logs go to $OUT.
cd "$(dirname "$0")"
out=${OUT:-/tmp/tensorwasm-gpu-out}
mkdir -p "$out"
summary="$out/summary.txt"
{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv,noheader 2>&1 | sed 's/^/gpu: /'
  echo "cuda (nvidia-smi): $(nvidia-smi | grep -o 'CUDA Version: [0-9.]*')"
} > "$summary"
status=0
# Tenants' streams each get a hardware queue (the driver's default is 8).
export CUDA_DEVICE_MAX_CONNECTIONS=32
# The mlp_guest tests load the MLP guest from guest/target unless told.
if [ -f examples/mlp.wasm ]; then export MLP_GUEST_WASM="$PWD/examples/mlp.wasm"; fi
if [ -f examples/rust_kernels.wasm ]; then export RUST_KERNELS_GUEST_WASM="$PWD/examples/rust_kernels.wasm"; fi
if [ -f examples/saxpy.wasm ]; then export C_GUEST_WASM="$PWD/examples/saxpy.wasm"; fi
# The wasi_guest tests run the packed WASI guest through the packed command.
if [ -f examples/mlp-wasi.wasm ]; then export MLP_WASI_GUEST_WASM="$PWD/examples/mlp-wasi.wasm"; fi
# The component tests (PACK_COMPONENTS=1) and the serve tests' components.
if [ -f examples/wasip2-cli.wasm ]; then export WASIP2_CLI_GUEST_WASM="$PWD/examples/wasip2-cli.wasm"; fi
if [ -f examples/gpu-component.wasm ]; then export GPU_COMPONENT_GUEST_WASM="$PWD/examples/gpu-component.wasm"; fi
if [ -f examples/gpu_bench.wasm ]; then export GPU_BENCH_GUEST_WASM="$PWD/examples/gpu_bench.wasm"; fi
if [ -f examples/gpu-python.wasm ]; then export GPU_PYTHON_GUEST_WASM="$PWD/examples/gpu-python.wasm"; fi
if [ -f examples/gpu-js.wasm ]; then export GPU_JS_GUEST_WASM="$PWD/examples/gpu-js.wasm"; fi
if [ ! -f examples/gpu-python.wasm ] || [ ! -f examples/gpu-js.wasm ]; then
  export TW_NO_LANG_COMPONENTS=1
  echo "note: the Python and JavaScript components are not packed (PACK_COMPONENTS=1): the serve test of them is skipped" | tee -a "$summary"
fi
export TENSORWASM_BIN="$PWD/bin/tensorwasm"
# The component tests (PACK_COMPONENTS=1) and the serve tests' servers on
# the GPU's driver (both default to the CPU driver, as in CI).
export TW_COMPONENT_DRIVER=${TW_COMPONENT_DRIVER:-cuda} TW_SERVE_DRIVER=${TW_SERVE_DRIVER:-cuda}
# The GPU soak: a minute unless told (issue 16 ran it for 300 s, faults every 60).
export TW_SOAK_SECS=${TW_SOAK_SECS:-60} TW_SOAK_FAULT_SECS=${TW_SOAK_FAULT_SECS:-20}
# Tests that need two GPUs have `two_gpus` in their names: skipped, and
# said so, on a machine with one.
skip=()
if [ "$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')" -lt 2 ]; then
  skip=(--skip two_gpus)
  echo "note: fewer than two GPUs: tests named *two_gpus* skipped" | tee -a "$summary"
fi
for t in bin/*--*; do
  name=$(basename "$t")
  # The component tests each start a `tensorwasm` process with its own
  # CUDA context; sixteen at once failed cuDevicePrimaryCtxRetain with
  # CUDA_ERROR_OUT_OF_MEMORY on an H200 (2026-11-29), four at once pass.
  threads=()
  if [ "$name" = tensorwasm-cli--component ]; then threads=(--test-threads=4); fi
  start=$(date +%s.%N)
  if "$t" --include-ignored "${skip[@]}" "${threads[@]}" ${TEST_ARGS:-} >"$out/$name.log" 2>&1; then r=PASS; else r=FAIL; status=1; fi
  secs=$(python3 -c "print(f'{$(date +%s.%N) - $start:.1f}')")
  line=$(grep -E '^test result:' "$out/$name.log" | tail -1)
  echo "$r $name (${secs}s): $line" | tee -a "$summary"
  if [ $r = FAIL ]; then grep -E -A3 'panicked' "$out/$name.log" | head -30 | sed 's/^/    /' | tee -a "$summary"; fi
done
# Options come before the guest, as with `wasmtime run`; each prints 0.
runs=(
  "--invoke run examples/vector_add.wat 16777216"
  "--invoke run examples/device_buffers.wat 16777216 8"
  "--invoke run examples/wasm_kernels.wat 16777216"
  "--invoke traps examples/wasm_kernels.wat"
)
if [ -f examples/vector_add_guest.wasm ]; then
  runs+=("--invoke run examples/vector_add_guest.wasm 16777216"
         "--invoke device_buffers examples/vector_add_guest.wasm 16777216")
fi
if [ -f examples/rust_kernels.wasm ]; then
  for k in run_saxpy_unchecked run_saxpy run_matmul run_row_sums run_pad_rows run_activations run_histogram run_atomic_dot run_block_reduce run_tiled_sgemm run_shared_histogram run_softmax run_inclusive_scan; do
    runs+=("--invoke $k examples/rust_kernels.wasm")
  done
fi
if [ -f examples/mlp.wasm ]; then
  runs+=("--invoke run examples/mlp.wasm 64"
         "--invoke run_bf16 examples/mlp.wasm 64")
fi
for spec in "${runs[@]}"; do
  if out_text=$(RUST_LOG=info bin/tensorwasm run --driver cuda $spec 2>&1) && [ "$(echo "$out_text" | tail -1)" = 0 ]; then r=PASS; else r=FAIL; status=1; fi
  echo "$r tensorwasm run --driver cuda $spec: $(echo "$out_text" | tr '\n' ' ')" | tee -a "$summary"
done
# The GPU component (WASI 0.2, tensorwasm:gpu): its MLP on built-ins and its
# own function as a Wasm kernel over its own memory, each checked by the
# guest (exit code 0 and its `ok` line).
if [ -f examples/gpu-component.wasm ]; then
  for spec in "mlp:mlp ok" "wasm-vadd 16777216:wasm-vadd ok 16777216" "vadd 1000000:vadd ok 1000000"; do
    args=${spec%%:*} want=${spec#*:}
    if out_text=$(bin/tensorwasm run --driver cuda examples/gpu-component.wasm $args 2>&1) && echo "$out_text" | grep -q "^$want"; then r=PASS; else r=FAIL; status=1; fi
    echo "$r tensorwasm run --driver cuda examples/gpu-component.wasm $args: $(echo "$out_text" | tr '\n' ' ')" | tee -a "$summary"
  done
fi
# The README's main job, a WASI command: one line, exit code 0.
if out_text=$(bin/tensorwasm run --driver cuda examples/hello_gpu.wat 16777216 2>&1) && echo "$out_text" | grep -q ': all 16777216 match$'; then r=PASS; else r=FAIL; status=1; fi
echo "$r tensorwasm run --driver cuda examples/hello_gpu.wat 16777216: $out_text" | tee -a "$summary"
echo "--- tensorwasm devices" >> "$summary"
bin/tensorwasm devices >> "$summary" 2>&1 || status=1
nvidia-smi --query-gpu=memory.used --format=csv,noheader | sed 's/^/gpu memory used after: /' >> "$summary"
cat "$summary"
exit $status
RUN
chmod +x "$pack/run.sh"

# Each wasmtime-carrying binary is ~26 MB, mostly the same wasmtime: xz with
# a dictionary larger than a binary finds the repeats (12 of them pack into
# ~22 MB, against ~60 MB with xz's default 8 MiB dictionary), keeping the
# pack under the device tool's 64 MiB carry limit. The runners unpack on
# first use.
# The benchmarks (PACK_BENCH=1) go to a pack of their own with the example
# guests: the tests and four benchmarks together were over the limit.
if [ -d "$pack/bench" ]; then
  mkdir -p "$bench_pack"
  mv "$pack/bench" "$pack/bench.sh" "$bench_pack/"
  cp -r "$pack/examples" "$bench_pack/"
  tar -C "$bench_pack" -cf - bench examples \
    | xz -T2 --lzma2=preset=6,dict=192MiB > "$bench_pack/payload.tar.xz"
  rm -rf "$bench_pack/bench" "$bench_pack/examples"
  sed -i '3a [ -d bench ] || tar -xJf payload.tar.xz' "$bench_pack/bench.sh"
  du -sh "$bench_pack"
fi
tar -C "$pack" -cf - bin examples \
  | xz -T2 --lzma2=preset=6,dict=192MiB > "$pack/payload.tar.xz"
rm -rf "$pack/bin" "$pack/examples"
sed -i '3a [ -d bin ] || tar -xJf payload.tar.xz' "$pack/run.sh"
du -sh "$pack"
