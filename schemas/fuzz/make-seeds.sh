#!/usr/bin/env bash
# Builds the fuzz seed corpus of reader (corpus/ is not committed): the golden logs of
# fixtures/golden-v1 (format 1) and fixtures/golden-v2 (format 2.1, compact records), real
# traced ibv_rc_pingpong pairs, read as whole files (their first byte, 'S', has bit 0 set:
# the target then takes the bytes as they are, without its template header).
set -euo pipefail
cd "$(dirname "$0")"
fixtures="${SIGMATRACE_FIXTURES:-../../fixtures}"
out=corpus/reader
mkdir -p "$out"
for set in golden-v1 golden-v2; do
  for side in server client; do
    gzip -dc "$fixtures/$set/$side.sigmalog.gz" > "$out/seed-$set-$side.sigmalog"
  done
done
ls -l "$out"/seed-*
