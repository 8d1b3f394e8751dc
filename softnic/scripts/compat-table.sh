#!/usr/bin/env bash
# Prints softnic's compatibility table (client × untraced/traced) by running the test each
# cell of the README table names. Cells are `package:test-file:test-name` ("—": no test).
# Usage: softnic/scripts/compat-table.sh   (after `cargo build --workspace`)
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
readme="$root/softnic/README.md"

declare -A result_of # a test named in both columns runs once
run() { # package:file:name -> $result: pass | FAIL | —
    local id="$1"
    if [[ "$id" != *:*:* ]]; then result="—"; return; fi
    if [[ -z "${result_of[$id]:-}" ]]; then result_of[$id]="$(run_once "$id")"; fi
    result="${result_of[$id]}"
}

run_once() {
    local id="$1"
    IFS=: read -r pkg file name <<<"$id"
    # Exactly one test must run and pass (a misspelt name matches none).
    if (cd "$root" && cargo test -p "$pkg" --test "$file" -- --exact "$name" 2>&1) |
        grep -q "test result: ok. 1 passed"; then
        echo pass
    else
        echo FAIL
    fi
}

echo "| Client | Untraced | Traced |"
echo "|---|---|---|"
sed -n '/<!-- compat:start -->/,/<!-- compat:end -->/p' "$readme" |
    grep '^| ' | grep -v '^| Client' | while IFS='|' read -r _ client untraced traced _; do
        u="$(echo "$untraced" | tr -d ' `')"
        t="$(echo "$traced" | tr -d ' `')"
        run "$u"
        ru="$result"
        run "$t"
        echo "|$client| $ru | $result |"
    done
