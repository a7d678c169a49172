#!/usr/bin/env bash
# Builds the GPU test binaries in release mode and packs them, with a runner,
# into .device-pack/ (git-ignored through .git/info/exclude) for the device
# machine, which has a GPU but no Rust toolchain. Every session runs the same:
#
#   scripts/pack-gpu-tests.sh
#   device run:  command ".device-pack/run.sh"   carry [".device-pack"]
#
# The runner runs every packed test binary with --include-ignored, then
# `tensorwasm devices`, and writes one log per binary plus summary.txt to $OUT.
# GPU_TEST_PACKAGES (space-separated) picks the crates whose tests are packed.
set -euo pipefail
cd "$(dirname "$0")/.."
packages=${GPU_TEST_PACKAGES:-"tensorwasm-cuda"}
pack=.device-pack
rm -rf "$pack"
mkdir -p "$pack/bin"
grep -qx '/.device-pack/' .git/info/exclude 2>/dev/null || echo '/.device-pack/' >> .git/info/exclude

args=()
for p in $packages; do args+=(-p "$p"); done
cargo build --release -p tensorwasm-embed --bin tensorwasm
cp target/release/tensorwasm "$pack/bin/tensorwasm"
cargo test --release "${args[@]}" --no-run --message-format=json \
  | python3 -c '
import json, shutil, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") != "compiler-artifact" or not m.get("executable"):
        continue
    if not m["profile"]["test"]:
        continue
    crate = m["package_id"].split("#")[-1].split("@")[0].rsplit("/", 1)[-1]
    name = crate + "--" + m["target"]["name"]
    shutil.copy(m["executable"], f"'"$pack"'/bin/{name}")
    print("packed", name)
'

# Line tables are only for local backtraces; the pack must stay small.
strip --strip-debug "$pack"/bin/*

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
for t in bin/*--*; do
  name=$(basename "$t")
  start=$(date +%s.%N)
  if "$t" --include-ignored ${TEST_ARGS:-} >"$out/$name.log" 2>&1; then r=PASS; else r=FAIL; status=1; fi
  secs=$(python3 -c "print(f'{$(date +%s.%N) - $start:.1f}')")
  line=$(grep -E '^test result:' "$out/$name.log" | tail -1)
  echo "$r $name (${secs}s): $line" | tee -a "$summary"
  if [ $r = FAIL ]; then grep -E 'panicked|FAILED|failed' "$out/$name.log" | head -20 | sed 's/^/    /' | tee -a "$summary"; fi
done
echo "--- tensorwasm devices" >> "$summary"
bin/tensorwasm devices >> "$summary" 2>&1 || status=1
nvidia-smi --query-gpu=memory.used --format=csv,noheader | sed 's/^/gpu memory used after: /' >> "$summary"
cat "$summary"
exit $status
RUN
chmod +x "$pack/run.sh"
du -sh "$pack"
