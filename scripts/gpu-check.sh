#!/usr/bin/env bash
# The GPU check (README "On a GPU machine"): builds, runs the CUDA smoke checks, the GPU
# workloads traced, the device poller's capture at the highest post rate and the error of the
# %globaltimer <-> host mapping; one line per check, a summary (summary.txt, summary.json)
# and the traces in $OUT (default ./gpu-check-out). Exit status 1 if any check failed.
#
#   bash scripts/gpu-check.sh            on a GPU machine (release build; needs no network
#                                        when target/gpu-vendor.tar.gz from
#                                        scripts/gpu-vendor.sh was carried along)
#   bash scripts/gpu-check.sh --dry-run  here and in CI: every CPU-side part — debug build,
#                                        PTX assembled for sm_80/sm_90, the CUDA orchestration
#                                        against the libcuda TEST DOUBLE (testkit/cuda-double)
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
DRY=0
for a in "$@"; do
  case "$a" in
    --dry-run) DRY=1 ;;
    -h | --help) sed -n '2,13p' "$0"; exit 0 ;;
    *) echo "gpu-check: unknown argument $a" >&2; exit 2 ;;
  esac
done
OUT="${OUT:-$ROOT/gpu-check-out}"
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
SUMMARY="$OUT/summary.txt"
: >"$SUMMARY"
JSON_PARTS=()
FAILED=0
START=$(date +%s)

# One line per check: "gpu-check: NAME: PASS|FAIL|NOT RUN detail".
line() {
  local name=$1 status=$2; shift 2
  local l="gpu-check: $name: $status $*"
  echo "$l" | tee -a "$SUMMARY"
  [ "$status" = FAIL ] && FAILED=$((FAILED + 1))
  local esc=${*//\\/\\\\}
  esc=${esc//\"/\\\"}
  JSON_PARTS+=("{\"check\":\"$name\",\"status\":\"$status\",\"detail\":\"$esc\"}")
}

# Runs a step (a command, or a function of this script) with a time limit, output to
# $OUT/logs/NAME.log; returns its status.
step() {
  local name=$1 limit=$2; shift 2
  mkdir -p "$OUT/logs"
  if declare -F "$1" >/dev/null; then
    timeout --kill-after=10 "$limit" bash -c "$(declare -p CARGO_OPTS CARGO_PROFILE PKGS); $(declare -f "$1"); $*" >"$OUT/logs/$name.log" 2>&1
  else
    timeout --kill-after=10 "$limit" "$@" >"$OUT/logs/$name.log" 2>&1
  fi
}

if [ $DRY = 1 ]; then
  PROFILE=debug
  CARGO_PROFILE=()
  echo "gpu-check: dry run (no GPU): the CPU-side parts, against the libcuda TEST DOUBLE"
else
  PROFILE=release
  CARGO_PROFILE=(--release)
fi
CARGO_OPTS=()

# --- prerequisites (real run) -------------------------------------------------------------
if [ $DRY = 0 ]; then
  missing=()
  command -v cargo >/dev/null || missing+=("cargo (Rust toolchain)")
  { ldconfig -p 2>/dev/null | grep -q 'libcuda\.so\.1'; } || ls /usr/lib/x86_64-linux-gnu/libcuda.so.1 /usr/lib64/libcuda.so.1 >/dev/null 2>&1 || missing+=("libcuda.so.1 (NVIDIA driver)")
  [ -e /usr/include/infiniband/verbs.h ] || missing+=("rdma-core headers (libibverbs-dev)")
  if [ ${#missing[@]} -gt 0 ]; then
    line prerequisites FAIL "missing: ${missing[*]}"
  else
    gpu=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)
    line prerequisites PASS "cargo, libcuda.so.1, rdma-core headers${gpu:+; nvidia-smi: $gpu}"
  fi
fi

# --- offline crates ---------------------------------------------------------------------------
# The device has no network: the crates come from target/gpu-vendor.tar.gz (gpu-vendor.sh).
# The dry run only checks that they unpack and resolve the workspace offline (building from
# them here would rebuild the shared target directory from other source paths).
if [ -f "$ROOT/target/gpu-vendor.tar.gz" ]; then
  rm -rf "$ROOT/target/gpu-vendor"
  mkdir -p "$ROOT/target/gpu-vendor"
  if tar xzf "$ROOT/target/gpu-vendor.tar.gz" -C "$ROOT/target/gpu-vendor"; then
    cat >"$ROOT/target/gpu-vendor/config.toml" <<EOF
[source.crates-io]
replace-with = "gpu-vendor"
[source.gpu-vendor]
directory = "$ROOT/target/gpu-vendor/crates"
EOF
    VENDOR_OPTS=(--offline --config "$ROOT/target/gpu-vendor/config.toml")
    ncrates=$(ls "$ROOT/target/gpu-vendor/crates" | wc -l)
    if [ $DRY = 1 ]; then
      if cargo metadata "${VENDOR_OPTS[@]}" --format-version 1 >/dev/null 2>"$OUT/vendor.err"; then
        line vendored-crates PASS "$ncrates crates from target/gpu-vendor.tar.gz resolve the workspace offline"
      else
        line vendored-crates FAIL "offline resolution: $(head -3 "$OUT/vendor.err" | tr '\n' ' ')"
      fi
    else
      CARGO_OPTS=("${VENDOR_OPTS[@]}")
      line vendored-crates PASS "$ncrates crates from target/gpu-vendor.tar.gz, building --offline"
    fi
  else
    line vendored-crates FAIL "target/gpu-vendor.tar.gz does not unpack"
  fi
elif [ $DRY = 0 ]; then
  line vendored-crates "NOT RUN" "no target/gpu-vendor.tar.gz (scripts/gpu-vendor.sh): cargo needs the crates in ~/.cargo or the network"
else
  line vendored-crates "NOT RUN" "no target/gpu-vendor.tar.gz here (bash scripts/gpu-vendor.sh prepares it for the device)"
fi

# --- build ------------------------------------------------------------------------------------
PKGS=(-p softnic -p softnic-mlx5 -p softnic-efa -p softnic-rdmacm -p sigmatrace-interposer
  -p sigmatrace-convert -p sigmatrace-examples)
[ $DRY = 1 ] && PKGS+=(-p sigmatrace-cuda-double)
t0=$(date +%s)
build() {
  cargo build "${CARGO_OPTS[@]}" "${CARGO_PROFILE[@]}" "${PKGS[@]}" &&
    cargo test --no-run "${CARGO_OPTS[@]}" "${CARGO_PROFILE[@]}" -p sigmatrace-examples --test gpu_mode
}
if step build 330 build; then
  line build PASS "cargo build ${CARGO_PROFILE[*]:-(debug)} of $((${#PKGS[@]} / 2)) packages in $(($(date +%s) - t0)) s"
  BUILT=1
else
  line build FAIL "see $OUT/logs/build.log: $(grep -m1 -E '^error' "$OUT/logs/build.log")"
  BUILT=0
fi
BIN="$ROOT/target/$PROFILE"

# --- PTX (dry run; on the GPU the driver JIT-compiles the committed PTX) ------------------
if [ $DRY = 1 ]; then
  if step ptx 120 bash observe/gpu/check-ptx.sh; then
    line ptx PASS "$(tail -1 "$OUT/logs/ptx.log")"
  else
    line ptx FAIL "see $OUT/logs/ptx.log: $(tail -1 "$OUT/logs/ptx.log")"
  fi
fi

# --- the driver: the machine's, or the TEST DOUBLE ----------------------------------------
DRIVER_ENV=()
if [ $DRY = 1 ]; then
  DOUBLE_DIR="$OUT/cuda-double"
  mkdir -p "$DOUBLE_DIR"
  ln -sf "$BIN/libsigmatrace_cuda_double.so" "$DOUBLE_DIR/libcuda.so.1"
  ln -sf "$BIN/libsigmatrace_cuda_double.so" "$DOUBLE_DIR/libcuda.so"
  DRIVER_ENV=(env "LD_LIBRARY_PATH=$DOUBLE_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}")
else
  DRIVER_ENV=(env SIGMATRACE_GPU_CHECK=device)
fi

if [ $BUILT = 1 ]; then
  # --- CUDA smoke checks, clock mapping, device poller capture -----------------------------
  step smoke 90 "${DRIVER_ENV[@]}" "$BIN/gpu_smoke" --out "$OUT/smoke.json"
  rc=$?
  while IFS= read -r l; do
    name=${l#gpu-smoke: }; name=${name%%:*}
    rest=${l#gpu-smoke: "$name": }
    line "$name" "${rest%% *}" "${rest#* }"
  done < <(grep '^gpu-smoke: ' "$OUT/logs/smoke.log")
  if [ $rc != 0 ] && ! grep -q ': FAIL' "$OUT/logs/smoke.log"; then
    line smoke FAIL "gpu_smoke exited with $rc: $(tail -2 "$OUT/logs/smoke.log" | tr '\n' ' ')"
  fi
  [ -f "$OUT/smoke.json" ] && JSON_PARTS+=("{\"check\":\"smoke-details\",\"status\":\"INFO\",\"details\":$(cat "$OUT/smoke.json")}")

  # --- the GPU workloads, traced (4 softnic nodes each) ------------------------------------
  rm -rf "$OUT/workloads"
  mkdir -p "$OUT/workloads"
  step workloads 170 "${DRIVER_ENV[@]}" SIGMATRACE_GPU_CHECK_OUT="$OUT/workloads" \
    cargo test "${CARGO_OPTS[@]}" "${CARGO_PROFILE[@]}" -p sigmatrace-examples --test gpu_mode \
    -- --test-threads=1 --nocapture
  rc=$?
  for t in bfs-gpu moe-gpu; do
    l=$(grep -o -m1 "GPU-CHECK $t PASS .*" "$OUT/logs/workloads.log")
    if [ -n "$l" ] && [ -f "$OUT/workloads/$t.json" ]; then
      line "$t" PASS "${l#GPU-CHECK $t PASS }; trace workloads/$t/$t.perfetto-trace"
      JSON_PARTS+=("$(cat "$OUT/workloads/$t.json")")
    else
      why=$(grep -m1 -A3 "panicked" "$OUT/logs/workloads.log" | tr '\n' ' ' | cut -c1-400)
      line "$t" FAIL "see $OUT/logs/workloads.log${why:+: $why}"
    fi
  done
  [ $rc != 0 ] && ! grep -q ': FAIL' "$SUMMARY" && line workloads FAIL "cargo test exited with $rc"
else
  line smoke "NOT RUN" "build failed"
  line workloads "NOT RUN" "build failed"
fi

elapsed=$(($(date +%s) - START))
status=PASS
[ $FAILED -gt 0 ] && status=FAIL
{
  printf '{"dry_run":%s,"status":"%s","failed":%d,"seconds":%d,"checks":[' \
    "$([ $DRY = 1 ] && echo true || echo false)" "$status" "$FAILED" "$elapsed"
  (IFS=,; printf '%s' "${JSON_PARTS[*]}")
  printf ']}\n'
} >"$OUT/summary.json"
echo "gpu-check: $status ($FAILED failed) in ${elapsed} s; summary: $SUMMARY, $OUT/summary.json" | tee -a "$SUMMARY"
[ $FAILED = 0 ]
