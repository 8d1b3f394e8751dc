#!/usr/bin/env bash
# Builds the fuzz seed corpus (corpus/ is not committed): a shrunken copy of the real report1
# export (512-byte pages, only the tables the importer reads) and a synthetic export with NVTX.
# Needs the sqlite3 CLI (scripts/install-deps.sh installs it).
set -euo pipefail
cd "$(dirname "$0")"
fixtures="${SIGMATRACE_NSYS_FIXTURES:-../../fixtures/nsys}"
out=corpus/open_export
mkdir -p "$out"
rm -f "$out/seed-r1small.sqlite" "$out/seed-nvtx.sqlite"
cp "$fixtures/report1.sqlite" "$out/seed-r1small.sqlite"
chmod u+w "$out/seed-r1small.sqlite"
keep="'StringIds','META_DATA_EXPORT','TARGET_INFO_SESSION_START_TIME','TARGET_INFO_SYSTEM_ENV',
  'PROCESSES','ThreadNames','TARGET_INFO_GPU','CUPTI_ACTIVITY_KIND_KERNEL','CUPTI_ACTIVITY_KIND_MEMCPY',
  'CUPTI_ACTIVITY_KIND_RUNTIME','CUPTI_ACTIVITY_KIND_SYNCHRONIZATION'"
for t in $(sqlite3 "$out/seed-r1small.sqlite" "SELECT name FROM sqlite_master WHERE type='table' AND name NOT IN ($keep)"); do
  sqlite3 "$out/seed-r1small.sqlite" "DROP TABLE \"$t\""
done
sqlite3 "$out/seed-r1small.sqlite" "
  DELETE FROM ThreadNames WHERE (globalTid >> 24) & 16777215 <> 17068;
  DELETE FROM PROCESSES WHERE pid <> 17068;
  DELETE FROM TARGET_INFO_SYSTEM_ENV WHERE name NOT IN ('Hostname','OsDescription');
  DELETE FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE rowid > 20;
  DELETE FROM CUPTI_ACTIVITY_KIND_MEMCPY WHERE rowid > 3;
  DELETE FROM StringIds WHERE id NOT IN (SELECT nameId FROM CUPTI_ACTIVITY_KIND_RUNTIME
    UNION SELECT shortName FROM CUPTI_ACTIVITY_KIND_KERNEL UNION SELECT nameId FROM ThreadNames);
  PRAGMA page_size = 512; VACUUM;"
sqlite3 "$out/seed-nvtx.sqlite" < seed-nvtx.sql
ls -l "$out"
