#!/usr/bin/env bash
# Assembles every committed PTX of the repository (observe/gpu: the device poller;
# examples/gpu: the workload kernels) for sm_80 and sm_90 with ptxas from the
# nvidia-cuda-nvcc-cu12 wheel in the repo's .venv (scripts/install-deps.sh installs it), and
# checks the PTX is what NVRTC generates from the .cu sources today. Fails loudly when a tool
# is missing: this is a compile check only (no GPU needed).
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
PY="${SIGMATRACE_PYTHON:-$ROOT/.venv/bin/python}"
if [ ! -x "$PY" ]; then
  echo "check-ptx: FAILED: no Python venv at $PY (run scripts/install-deps.sh)" >&2
  exit 1
fi
PTXAS=$("$PY" -c 'import nvidia.cuda_nvcc as m, os; print(os.path.join(list(m.__path__)[0], "bin", "ptxas"))' 2>/dev/null || true)
if [ -z "$PTXAS" ] || [ ! -x "$PTXAS" ]; then
  echo "check-ptx: FAILED: ptxas not found (pip package nvidia-cuda-nvcc-cu12 missing from $PY; run scripts/install-deps.sh)" >&2
  exit 1
fi
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
n=0
PTX_FILES=(observe/gpu/*.ptx examples/gpu/*.ptx)
for ptx in "${PTX_FILES[@]}"; do
  for arch in sm_80 sm_90; do
    "$PTXAS" -arch="$arch" -O3 -o "$TMP/$(basename "${ptx%.ptx}").$arch.cubin" "$ptx"
    n=$((n + 1))
  done
done
"$PY" observe/gpu/gen-ptx.py --check
echo "check-ptx: $n assemblies ok (${PTX_FILES[*]} for sm_80 sm_90), PTX up to date with the .cu sources"
