#!/usr/bin/env bash
# Installs everything a fresh Debian machine needs to build and test SigmaTrace.
# Idempotent: safe to run again; only installs what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

# Debian packages: build deps for ibverbs-sys (cmake, libclang, libnl), the real verbs clients
# softnic runs (ibverbs-utils, perftest, qperf, rdmacm-utils, NetPIPE, HPC Challenge and LAMMPS over
# Open MPI's openib BTL; UCX's ucx_info and ucx_perftest, NetPIPE over Open MPI's UCX PML;
# libfabric's fi_info and fi_pingpong; fio's rdma I/O engine; rdma-core's own test suite, which
# python3-pyverbs ships in /usr/share/doc/rdma-core/tests),
# valgrind for instruction counts, python venv for the CUDA compile-check wheels.
DEB_PKGS=(
  build-essential pkg-config cmake libclang-dev clang libnl-3-dev libnl-route-3-dev
  libibverbs-dev ibverbs-utils perftest rdma-core librdmacm-dev rdmacm-utils qperf
  python3 python3-venv python3-pip valgrind sqlite3 openmpi-bin netpipe-openmpi hpcc lammps
  ucx-utils libfabric-bin fio python3-pyverbs
)
# Without their recommended packages: QEMU (live migration over RDMA; no firmware or GUI: the
# test boots nothing), NetPIPE over MPICH (no MPICH development files: `mpirun.mpich` runs
# it, Open MPI stays the default `mpirun`, mpicc and mpi.h), and iSER: the tgt target daemon
# with QEMU's qemu-io over its libiscsi block driver (qemu-block-extra) as the initiator.
BARE_DEB_PKGS=(qemu-system-x86 mpich netpipe-mpich2 tgt qemu-utils qemu-block-extra)
updated=""
install_missing() {
  local missing=() p
  for p in "${@:2}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ "${#missing[@]}" -gt 0 ]; then
    echo "install-deps: installing Debian packages: ${missing[*]}"
    [ -n "$updated" ] || { $SUDO apt-get update -qq; updated=1; }
    # $1: extra apt-get options (word-split on purpose).
    # shellcheck disable=SC2086
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $1 "${missing[@]}" >/dev/null
  fi
}
install_missing "" "${DEB_PKGS[@]}"
install_missing "--no-install-recommends" "${BARE_DEB_PKGS[@]}"

# Rust components used by the test command and the release build.
rustup component list --installed 2>/dev/null | grep -q '^rustfmt' || rustup component add rustfmt
rustup component list --installed 2>/dev/null | grep -q '^clippy' || rustup component add clippy
# llvm-profdata for the profile-guided release build (scripts/build-release.sh).
rustup component list --installed 2>/dev/null | grep -q '^llvm-tools' || rustup component add llvm-tools

# cargo-fuzz: CI builds the fuzz targets (without running them).
if ! command -v cargo-fuzz >/dev/null 2>&1; then
  echo "install-deps: installing cargo-fuzz"
  cargo install --locked cargo-fuzz >/dev/null 2>&1 || cargo install cargo-fuzz
fi

# Python virtual environment for the CUDA compile-check wheels. (Traces are checked by the
# repository's own checker, sigmatrace-testkit: no Python packages needed for that.)
VENV=.venv
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
fi
# CUDA compile-check tools for observe/gpu (no GPU needed): ptxas and libNVVM from the nvcc
# wheel, NVRTC to regenerate PTX from the .cu sources (observe/gpu/check-ptx.sh).
if ! "$VENV/bin/python" -c 'import nvidia.cuda_nvcc, nvidia.cuda_nvrtc' 2>/dev/null; then
  echo "install-deps: installing nvidia-cuda-nvcc-cu12 + nvidia-cuda-nvrtc-cu12 into $VENV"
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check \
    "nvidia-cuda-nvcc-cu12==12.9.86" "nvidia-cuda-nvrtc-cu12==12.9.86"
fi
"$VENV/bin/python" -c 'import nvidia.cuda_nvcc, nvidia.cuda_nvrtc' || {
  echo "install-deps: FAILED to install the CUDA compile-check wheels into $VENV" >&2
  exit 1
}
echo "install-deps: ok"
