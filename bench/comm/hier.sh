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
build=$(cd "${1:?usage: hier.sh BUILD_DIR [options]}" && pwd)
shift
rounds=3
args=(--op allreduce --min-bytes 4K --max-bytes 64M)
while [ $# -gt 0 ]; do
    case $1 in
    --rounds) rounds=$2; shift 2 ;;
    *) args+=("$1"); shift ;;
    esac
done
python=${COHORT_PYTHON:-/usr/bin/python3}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
export COHORT_COMM_RANKS_PER_NODE=2 COHORT_COMM_HIER_MIN_BYTES=0 # two steps at every size
run() { # run KIND PROGRAM...: 4 ranks, the hierarchy switched by COHORT_COMM_HIER
    local kind=$1
    shift
    mpirun --allow-run-as-root --oversubscribe -x COHORT_COMM_RANKS_PER_NODE -x COHORT_COMM_HIER \
        -x COHORT_COMM_HIER_MIN_BYTES \
        -np 4 "$@" >"$out/$kind.$r"
}
for r in $(seq "$rounds"); do
    COHORT_COMM_HIER=1 run hier "$build/cohort" bench comm --comm mpi "${args[@]}"
    COHORT_COMM_HIER=0 run flat "$build/cohort" bench comm --comm mpi "${args[@]}"
    COHORT_COMM_HIER=0 run ompi "$build/mpi_comm_bench" "${args[@]}"
done
grep -q "transport hier" "$out/hier.1" && grep -q "transport mpi" "$out/flat.1" || {
    echo "hier.sh: the runs did not use the transports compared" >&2
    exit 1
}

"$python" - "$out" "$rounds" <<'PY'
import statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
def rows(kind):
    by = {}
    for r in range(1, rounds + 1):
        for line in open(f"{out}/{kind}.{r}"):
            if line.startswith("#") or not line.strip():
                continue
            f = line.split()
            by.setdefault(int(f[0]), []).append((f, float(f[5]), int(f[8])))
    return by
h, f, m = rows("hier"), rows("flat"), rows("ompi")
f0 = next(iter(h.values()))[0][0]
print(f"4 ranks as 2 nodes of 2, {f0[2]} {f0[3]} {f0[4]}, median of {rounds} alternating rounds")
print(f"| size | count | hier us | busbw GB/s | flat mpi us | busbw GB/s | Open MPI us | "
      "busbw GB/s | hier/flat | hier/MPI | #wrong |")
print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for size in sorted(h):
    th, tf, tm = (statistics.median(x[1] for x in d[size]) for d in (h, f, m))
    row = m[size][0][0]
    fac = float(row[7]) / float(row[6]) if float(row[6]) else 1  # nccl-tests' busbw factor
    bw = lambda t: size / (t * 1e-6) / 1e9 * fac
    wrong = sum(x[2] for d in (h, f, m) for x in d[size])
    print(f"| {size} | {h[size][0][0][1]} | {th:.1f} | {bw(th):.2f} | {tf:.1f} | {bw(tf):.2f} | "
          f"{tm:.1f} | {bw(tm):.2f} | {tf/th:.2f} | {tm/th:.2f} | {wrong} |")
PY
