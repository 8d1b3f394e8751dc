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
for dir in $(find . -path ./target -prune -o -name fuzz -type d -print | sort); do
  if [ -f "$dir/Cargo.toml" ]; then
    (cd "$dir/.." && RUSTC_BOOTSTRAP=1 cargo fuzz build --dev >/dev/null)
    echo "fuzz targets in $dir build"
  fi
done
