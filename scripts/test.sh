#!/usr/bin/env bash
# The project's test command (README "Tests"; .ci/run calls exactly this).
# Formatting, lints, a full build (cdylibs and binaries the integration tests run), all tests,
# and a build of the fuzz targets.
set -euo pipefail
cd "$(dirname "$0")/.."
export SIGMATRACE_PYTHON="${SIGMATRACE_PYTHON:-$PWD/.venv/bin/python}"

echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy"
cargo clippy --workspace --all-targets -- -D warnings
echo "== cargo build"
cargo build --workspace --all-targets
echo "== cargo test"
cargo test --workspace -- --test-threads="${SIGMATRACE_TEST_THREADS:-2}"
echo "== fuzz targets build"
# Each fuzz crate is its own workspace (cargo-fuzz layout); CI checks that every target
# compiles (a plain build, without sanitizers), sharing one target directory. Running them:
# RUSTC_BOOTSTRAP=1 cargo fuzz run <target> (from the crate's directory), see README.
fuzz_target_dir="${CARGO_TARGET_DIR:-$PWD/target}/fuzz-check"
for manifest in $(find . -path ./target -prune -o -path '*/fuzz/Cargo.toml' -print | sort); do
  CARGO_TARGET_DIR="$fuzz_target_dir" cargo build -q --manifest-path "$manifest" --bins
  echo "fuzz targets of $manifest build"
done
echo "== GPU check, dry run (CPU-side parts against the libcuda test double)" && bash scripts/gpu-check.sh --dry-run
