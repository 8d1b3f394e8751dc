#!/usr/bin/env bash
# Makes the real-log corpus the converter's and the tracer's measurements use (converter
# README "Benchmark"): unmodified programs traced over softnic, one directory of logs each.
#
#   bash scripts/real-logs.sh [OUT_DIR]      (default: target/real-logs)
#
#   OUT/ib_write_bw/   Debian perftest `ib_write_bw -q 16 -s 8 -n 200000`, client and server
#                      (~3.2 M WR events, mostly unsignaled 8-byte RDMA writes on 16 QPs)
#   OUT/netpipe/       NetPIPE (`NPopenmpi -n 20 -u 65536`), 2 ranks, Open MPI openib BTL
#   OUT/hpcc/          HPC Challenge (N = 500), 4 ranks, openib
#   OUT/lammps/        LAMMPS Lennard-Jones melt (4 000 atoms, 200 steps), 4 ranks, openib
#
# Needs scripts/install-deps.sh and a release build of the tracer and softnic:
#   cargo build --release -p softnic -p softnic-mlx5 -p softnic-efa -p softnic-rdmacm \
#     -p sigmatrace-interposer
# (`BUILD=debug` takes them from target/debug instead: the same kinds of records, though the
# slower debug fabric changes the MPI programs' traffic somewhat.)
# `N=...` sets ib_write_bw's iteration count. Fails loudly when a program fails.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
out=$(realpath -m "${1:-target/real-logs}")
rel=$root/target/${BUILD:-release}
for f in libsigmatrace.so softnic-run; do
  [[ -e $rel/$f ]] || { echo "real-logs: $rel/$f missing (cargo build, see above)" >&2; exit 1; }
done
n=${N:-200000}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
unset LD_PRELOAD

fresh() { rm -rf "$out/$1"; mkdir -p "$out/$1"; }

# ib_write_bw: server on softnic node 1, client on node 2, one fabric directory.
fresh ib_write_bw
port=$((20000 + RANDOM % 20000))
SOFTNIC_FABRIC=$work/fabric LD_PRELOAD=$rel/libsigmatrace.so SIGMATRACE_DIR=$out/ib_write_bw \
  "$rel/softnic-run" --node 1 -- ib_write_bw -q 16 -s 8 -n "$n" -p "$port" >"$work/server.txt" 2>&1 &
server=$!
sleep 1
SOFTNIC_FABRIC=$work/fabric LD_PRELOAD=$rel/libsigmatrace.so SIGMATRACE_DIR=$out/ib_write_bw \
  "$rel/softnic-run" --node 2 -- ib_write_bw -q 16 -s 8 -n "$n" -p "$port" 127.0.0.1 >"$work/client.txt" 2>&1 \
  || { cat "$work/client.txt" >&2; exit 1; }
wait "$server" || { cat "$work/server.txt" >&2; exit 1; }
echo "real-logs: ib_write_bw -q 16 -s 8 -n $n -> $out/ib_write_bw"

mpi() { # mpirun -np N over openib on softnic, traced into $out/$1; the rest is the command.
  local name=$1 np=$2
  shift 2
  fresh "$name"
  mkdir -p "$work/$name/fabric"
  (cd "$work/$name" && mpirun --oversubscribe --bind-to none -np "$np" \
    --mca pml ob1 --mca btl openib,self --mca btl_openib_allow_ib 1 \
    -x LD_PRELOAD="$rel/libsigmatrace.so" -x SIGMATRACE_DIR="$out/$name" \
    "$rel/softnic-run" --fabric "$work/$name/fabric" -- "$@") >"$work/$name.txt" 2>&1 \
    || { cat "$work/$name.txt" >&2; exit 1; }
  echo "real-logs: $name ($np ranks) -> $out/$name"
}

mpi netpipe 2 NPopenmpi -n 20 -u 65536 -p 0 -o "$work/np.out"

mkdir -p "$work/hpcc"
sed 's/^1000         Ns/500          Ns/' /usr/share/doc/hpcc/examples/_hpccinf.txt >"$work/hpcc/hpccinf.txt"
mpi hpcc 4 hpcc
grep -q '^Success=1$' "$work/hpcc/hpccoutf.txt" || { echo "real-logs: hpcc's HPL check failed" >&2; exit 1; }

mkdir -p "$work/lammps"
cp tests/data/in.lj "$work/lammps/in.lj"
mpi lammps 4 lmp -in in.lj -log none -screen none
du -sh "$out"/*
