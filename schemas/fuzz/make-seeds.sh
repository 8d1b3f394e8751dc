#!/usr/bin/env bash
# Builds the fuzz seed corpus of reader (corpus/ is not committed): the golden v1 and v2 logs,
# read as whole files (their first byte, 'S', has bit 0 set: the target then takes the bytes
# as they are, without its template header).
set -euo pipefail
cd "$(dirname "$0")"
bash ../../scripts/golden-seeds.sh corpus/reader
