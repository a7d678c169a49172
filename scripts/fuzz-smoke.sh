#!/usr/bin/env bash
# The fuzz targets' smoke run (CI; docs/testing.md, "Fuzzing"): builds every
# cargo-fuzz target of fuzz/ (nightly, no sanitizer: the targets' own
# assertions and the comparisons against wasmtime are what they check, and
# an AddressSanitizer build of wasmtime and Cranelift takes over ten minutes
# on a CI machine), then runs each for FUZZ_SECONDS (60) seconds starting
# from its committed corpus, fuzz/corpus/<target>. New inputs go to a
# scratch directory, so the committed corpora change only when someone
# minimises a longer campaign into them:
#
#   cd fuzz && cargo +nightly fuzz cmin <target> corpus/<target>
#
# A crash fails the run; its input is left in fuzz/artifacts/<target>/.
# FUZZ_TOOLCHAIN names the nightly (default: `nightly`); it and cargo-fuzz
# are installed first when missing.
set -euo pipefail
cd "$(dirname "$0")/../fuzz"

toolchain=${FUZZ_TOOLCHAIN:-nightly}
rustup run "$toolchain" rustc --version >/dev/null 2>&1 || rustup toolchain install "$toolchain" --profile minimal
command -v cargo-fuzz >/dev/null 2>&1 || cargo install cargo-fuzz --locked
seconds=${FUZZ_SECONDS:-60}
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

cargo "+$toolchain" fuzz build -s none -O
for target in $(cargo "+$toolchain" fuzz list); do
    mkdir -p "corpus/$target" "$scratch/$target"
    printf '\n==> fuzz %s for %ss (corpus: %s inputs)\n' \
        "$target" "$seconds" "$(find "corpus/$target" -type f | wc -l)"
    cargo "+$toolchain" fuzz run -s none -O "$target" "$scratch/$target" "corpus/$target" -- \
        -max_total_time="$seconds" -print_final_stats=1 2>&1 | tail -n 40
done
