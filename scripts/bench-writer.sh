#!/usr/bin/env bash
# Log-writer benchmark: criterion (ns per append, 1/2/8 threads) and callgrind instructions per
# append (stable on noisy machines).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -q -p sigmatrace-schemas --example append_cost
bin="${CARGO_TARGET_DIR:-target}/release/examples/append_cost"
ir() { valgrind --tool=callgrind --callgrind-out-file=/dev/null "$bin" "$1" 2>&1 | sed -n 's/.*Collected : \([0-9]*\).*/\1/p'; }
base=$(ir 0); full=$(ir 1000000)
echo "callgrind: $(( (full - base) / 1000000 )) instructions per append (timestamp + 64-byte record)"
"$bin" 20000000
cargo bench -q -p sigmatrace-schemas --bench append -- --noplot "${@}"
