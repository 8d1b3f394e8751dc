#!/usr/bin/env bash
# Prepares the crates scripts/gpu-check.sh needs on a GPU machine without network: every
# package of Cargo.lock vendored with `cargo vendor` and packed as target/gpu-vendor.tar.gz
# (about 25 MB; target/ is git-ignored). Carry that one file to the device; gpu-check.sh
# unpacks it into target/gpu-vendor/ and builds with `--offline` and a generated
# source-replacement config (target/gpu-vendor/config.toml, passed with `cargo --config`), so
# nothing is downloaded there. Run on a machine that has the crates (network or a filled
# ~/.cargo registry cache).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
STAGE="$ROOT/target/gpu-vendor-stage"
rm -rf "$STAGE" "$ROOT/target/gpu-vendor.tar.gz"
mkdir -p "$STAGE"
echo "gpu-vendor: cargo vendor --locked into $STAGE/crates"
cargo vendor --locked --versioned-dirs "$STAGE/crates" >/dev/null
n=$(find "$STAGE/crates" -mindepth 1 -maxdepth 1 -type d | wc -l)
tar czf "$ROOT/target/gpu-vendor.tar.gz" -C "$STAGE" crates
rm -rf "$STAGE"
size=$(du -m "$ROOT/target/gpu-vendor.tar.gz" | cut -f1)
echo "gpu-vendor: $n crates in target/gpu-vendor.tar.gz (${size} MB); carry target/gpu-vendor.tar.gz and run: bash scripts/gpu-check.sh"
