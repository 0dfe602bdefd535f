#!/usr/bin/env bash
# hier.sh: the hierarchical all-reduce (shared memory inside a node, MPI across nodes) against
# the flat MPI transport and Open MPI's own MPI_Allreduce (or the --op given: broadcast is
# hierarchical too), side by side in one run: 4 ranks
# under mpirun acting as 2 nodes of 2 (COHORT_COMM_RANKS_PER_NODE=2). Each round runs
# `cohort bench comm --comm mpi` with COHORT_COMM_HIER=1, then =0, then the anchor
# mpi_comm_bench, and the table gives per size the median time of each over the rounds.
# On one host the "network" between the simulated nodes is Open MPI's shared memory.
# usage: bench/comm/hier.sh BUILD_DIR [--rounds 3] [bench options...]
#   e.g. bench/comm/hier.sh build --rounds 3 --min-bytes 4K --max-bytes 64M
set -euo pipefail
: "${1:?usage: hier.sh BUILD_DIR [options]}"
root=$(cd "$(dirname "$0")/../.." && pwd)
. "$root/bench/bench_lib.sh" # build (from $1), work (removed on exit)
shift
rounds=3
args=(--op allreduce --min-bytes 4K --max-bytes 64M)
while [ $# -gt 0 ]; do
    case $1 in
    --rounds) rounds=$2; shift 2 ;;
    *) args+=("$1"); shift ;;
    esac
done
export COHORT_COMM_RANKS_PER_NODE=2 COHORT_COMM_HIER_MIN_BYTES=0 # two steps at every size
run() { # run KIND PROGRAM...: 4 ranks, the hierarchy switched by COHORT_COMM_HIER
    local kind=$1
    shift
    mpirun --allow-run-as-root --oversubscribe -x COHORT_COMM_RANKS_PER_NODE -x COHORT_COMM_HIER \
        -x COHORT_COMM_HIER_MIN_BYTES \
        -np 4 "$@" >"$work/$kind.$r"
}
for r in $(seq "$rounds"); do
    bench_comm_trio run "${args[@]}"
done
bench_comm_transports "$work" || {
    echo "hier.sh: the runs did not use the transports compared" >&2
    exit 1
}

bench_comm_py "$work" "$rounds" <<'PY'
import sys
from bench_comm import medians, trio
out, rounds = sys.argv[1], int(sys.argv[2])
h, f, m, f0 = trio(out, rounds)
print(f"4 ranks as 2 nodes of 2, {f0[2]} {f0[3]} {f0[4]}, median of {rounds} alternating rounds")
print(f"| size | count | hier us | busbw GB/s | flat mpi us | busbw GB/s | Open MPI us | "
      "busbw GB/s | hier/flat | hier/MPI | #wrong |")
print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for size in sorted(h):
    (th, tf, tm), wrong = medians(size, h, f, m)
    row = m[size][0][0]
    fac = float(row[7]) / float(row[6]) if float(row[6]) else 1  # nccl-tests' busbw factor
    bw = lambda t: size / (t * 1e-6) / 1e9 * fac
    print(f"| {size} | {h[size][0][0][1]} | {th:.1f} | {bw(th):.2f} | {tf:.1f} | {bw(tf):.2f} | "
          f"{tm:.1f} | {bw(tm):.2f} | {tf/th:.2f} | {tm/th:.2f} | {wrong} |")
PY
