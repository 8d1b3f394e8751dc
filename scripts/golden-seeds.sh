#!/usr/bin/env bash
# Writes the golden logs of fixtures/golden-v1 (format 1) and fixtures/golden-v2 (format 2.1,
# compact records) — real traced ibv_rc_pingpong pairs — unpacked into DIR, as fuzz seeds
# (converter/fuzz/make-seeds.sh, schemas/fuzz/make-seeds.sh).
set -euo pipefail
out="${1:?usage: golden-seeds.sh DIR}"
fixtures="$(cd "$(dirname "$0")/../fixtures" && pwd)"
mkdir -p "$out"
for set in golden-v1 golden-v2; do
  for side in server client; do
    gzip -dc "$fixtures/$set/$side.sigmalog.gz" > "$out/seed-$set-$side.sigmalog"
  done
done
ls -l "$out"/seed-*
