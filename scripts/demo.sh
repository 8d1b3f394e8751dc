#!/usr/bin/env bash
# The quick-start demo: builds SigmaTrace, runs 4 simulated nodes of softnic doing a ring
# all-reduce under the tracer, converts the logs and prints where the trace is.
# Usage: bash scripts/demo.sh [sigmatrace demo options, e.g. -o DIR --ranks 4 --iters 20]
set -euo pipefail
cd "$(dirname "$0")/.."
echo "demo: building (cargo build --workspace)..." >&2
cargo build -q --workspace --lib --bins
exec "${CARGO_TARGET_DIR:-target}/debug/sigmatrace" demo "$@"
