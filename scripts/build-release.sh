#!/usr/bin/env bash
# Builds the converter and its benchmark optimized with the profile of real conversions
# (profile-guided optimization, PGO): the programs in target/pgo/release/ run ~6 % fewer
# instructions than a plain `cargo build --release` and write the same bytes (checked here).
#
#   bash scripts/build-release.sh
#   target/pgo/release/sigmatrace-convert DIR -o trace.perfetto-trace
#   target/pgo/release/sigmatrace-convert-bench --ranks 64      (measures the PGO converter)
#
# Steps (training data in target/pgo-train/, deleted at the end but for the merged profile):
#   1. a debug build of the tracer and softnic; real logs from them (scripts/real-logs.sh,
#      BUILD=debug, ib_write_bw with N=50000: four unmodified programs traced over softnic);
#   2. an instrumented release build (target/pgo-gen) converts the real logs and the benchmark's
#      synthetic sets (64 ranks × 2 M and 1024 ranks × 3 M WR events, `--jobs 1` and `2`);
#   3. llvm-profdata (rustup component llvm-tools, scripts/install-deps.sh) merges the
#      profiles; the release build with them goes to target/pgo;
#   4. check: the PGO converter's traces of the real logs and of the 64-rank set are
#      byte-identical to the debug converter's (the one the tests run); any difference fails.
#
# `SIGMATRACE_TARGET_CPU=x86-64-v3` (or another `-C target-cpu`) adds it to both builds: 2–3 %
# fewer instructions again, but the binaries then need that CPU (AVX2, BMI2: SIGILL elsewhere).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

host=$(rustc -vV | sed -n 's/^host: //p')
profdata="$(rustc --print sysroot)/lib/rustlib/$host/bin/llvm-profdata"
[[ -x $profdata ]] || {
  echo "build-release: $profdata missing: rustup component add llvm-tools (scripts/install-deps.sh)" >&2
  exit 1
}
flags=${RUSTFLAGS:-}
if [[ -n ${SIGMATRACE_TARGET_CPU:-} ]]; then flags="$flags -Ctarget-cpu=$SIGMATRACE_TARGET_CPU"; fi

train=$root/target/pgo-train
rm -rf "$train"
mkdir -p "$train/profiles"

echo "== build-release: debug build of the tracer, softnic and converter (for the real logs)"
cargo build -q -p softnic -p softnic-mlx5 -p softnic-efa -p softnic-rdmacm \
  -p sigmatrace-interposer -p sigmatrace-convert
BUILD=debug N=50000 bash scripts/real-logs.sh "$train/real"

echo "== build-release: instrumented build (target/pgo-gen)"
RUSTFLAGS="$flags -Cprofile-generate=$train/profiles" CARGO_TARGET_DIR=$root/target/pgo-gen \
  cargo build -q --release -p sigmatrace-convert -p sigmatrace-synth --bins
gen=$root/target/pgo-gen/release
export LLVM_PROFILE_FILE=$train/profiles/%m.profraw

echo "== build-release: training conversions"
for d in "$train"/real/*/; do
  "$gen/sigmatrace-convert" -q "$d" -o "$train/trace.perfetto-trace"
done
"$gen/sigmatrace-convert-bench" --ranks 64 --events 2000000 --no-scaling --dir "$train/s64" --keep
"$gen/sigmatrace-convert-bench" --ranks 1024 --events 3000000 --no-scaling --dir "$train/s1024"
unset LLVM_PROFILE_FILE
"$profdata" merge -o "$train/merged.profdata" "$train"/profiles/*.profraw

echo "== build-release: optimized build (target/pgo)"
RUSTFLAGS="$flags -Cprofile-use=$train/merged.profdata" CARGO_TARGET_DIR=$root/target/pgo \
  cargo build -q --release -p sigmatrace-convert -p sigmatrace-synth --bins

echo "== build-release: check (PGO converter against the debug converter, byte for byte)"
check() { # name, log directory
  "$root/target/debug/sigmatrace-convert" -q "$2" -o "$train/plain.perfetto-trace"
  "$root/target/pgo/release/sigmatrace-convert" -q "$2" -o "$train/pgo.perfetto-trace"
  cmp "$train/plain.perfetto-trace" "$train/pgo.perfetto-trace" || {
    echo "build-release: the PGO converter's trace of $1 differs from the debug converter's" >&2
    exit 1
  }
  echo "build-release: $1: identical ($(stat -c %s "$train/pgo.perfetto-trace") bytes)"
}
for d in "$train"/real/*/; do check "$(basename "$d")" "$d"; done
check "64 ranks x 2 M" "$train/s64/full"

find "$train" -mindepth 1 -maxdepth 1 ! -name merged.profdata -exec rm -rf {} +
echo "build-release: ok: target/pgo/release/sigmatrace-convert (profile: $train/merged.profdata)"
