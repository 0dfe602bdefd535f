#!/usr/bin/env bash
# run.sh: collectives across a rate-shaped link between two "nodes" on one machine
# (tests/launch/netns_lib.sh: network namespaces joined by a veth pair shaped with tc tbf, a host
# name and a /dev/shm per node), 2 ranks per node started by Open MPI (TCP across the link,
# shared memory inside a node). Per link rate and collective, side by side in each round:
# cohort's hierarchical transport (COHORT_COMM_HIER=1: shared memory inside the node, MPI across;
# COHORT_COMM_HIER_MIN_BYTES=0: all-gather and reduce-scatter in two steps at every size),
# cohort's flat MPI transport (COHORT_COMM_HIER=0) and Open MPI's own collective
# (mpi_comm_bench); the table gives per size the median over the rounds of the slowest rank's
# mean time, busbw (nccl-tests' convention) and the ratios; then the link's alpha and beta seen
# by flat MPI's and Open MPI's all-gather. Needs root.
# usage: bench/cluster/run.sh BUILD_DIR [--rounds 3] [--rates "10gbit 1gbit"]
#        [--ops "allreduce allgather reduce_scatter"] [bench options...]
#   e.g. bench/cluster/run.sh build/rel --rounds 3
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
build=$(cd "${1:?usage: run.sh BUILD_DIR [options]}" && pwd)
shift
rounds=3 rates="10gbit 1gbit" ops="allreduce allgather reduce_scatter"
args=(--min-bytes 64K --max-bytes 64M --step-factor 4 --iters 5 --warmup 2)
while [ $# -gt 0 ]; do
    case $1 in
    --rounds) rounds=$2; shift 2 ;;
    --rates) rates=$2; shift 2 ;;
    --ops) ops=$2; shift 2 ;;
    *) args+=("$1"); shift ;;
    esac
done
python=${COHORT_PYTHON:-/usr/bin/python3}
# shellcheck source=../../tests/launch/netns_lib.sh
. "$here/../../tests/launch/netns_lib.sh"
why=$(netns_can_run)
[ -z "$why" ] || { echo "run.sh: cannot make the nodes: $why" >&2; exit 1; }
out=$(mktemp -d)
trap 'netns_down; rm -rf "$out"' EXIT
netns_up
export COHORT_MPI_PLUGIN=$build/libcohort_mpi.so COHORT_COMM_HIER_MIN_BYTES=0 # (flat runs: unused)
run() { # KIND PROGRAM...: 2 nodes x 2 ranks, the hierarchy switched by COHORT_COMM_HIER
    local kind=$1
    shift
    NETNS_TIMEOUT=600 netns_mpirun 2 -x COHORT_COMM_HIER -x COHORT_COMM_HIER_MIN_BYTES -x COHORT_MPI_PLUGIN \
        "$@" >"$out/$kind.$r"
}
echo "# bench/cluster: 2 nodes x 2 ranks (namespaces on one host, $(nproc) cpus), link rates: $rates;" \
    "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
for rate in $rates; do
    netns_shape "$rate"
    for op in $ops; do
        for r in $(seq "$rounds"); do
            COHORT_COMM_HIER=1 run hier "$build/cohort" bench comm --comm mpi --op "$op" "${args[@]}"
            COHORT_COMM_HIER=0 run flat "$build/cohort" bench comm --comm mpi --op "$op" "${args[@]}"
            COHORT_COMM_HIER=0 run ompi "$build/mpi_comm_bench" --op "$op" "${args[@]}"
        done
        grep -q "transport hier" "$out/hier.1" && grep -q "transport mpi" "$out/flat.1" || {
            echo "run.sh: the runs did not use the transports compared:" >&2
            head -3 "$out/hier.1" "$out/flat.1" >&2
            exit 1
        }
        "$python" - "$out" "$rounds" "$rate" "$op" <<'PY'
import statistics, sys
out, rounds, rate, op = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
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
print(f"\n{op}, link {rate}, 2 nodes x 2 ranks, {f0[2]} {f0[3]} {f0[4]}, median of {rounds} rounds")
print(f"| size | hier us | busbw GB/s | flat mpi us | busbw GB/s | Open MPI us | busbw GB/s | "
      "hier/flat | hier/MPI | #wrong |")
print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
fit = {"flat MPI": [], "Open MPI": []}
for size in sorted(h):
    th, tf, tm = (statistics.median(x[1] for x in d[size]) for d in (h, f, m))
    n = 4  # nccl-tests' busbw factor for 4 ranks
    fac = 2 * (n - 1) / n if op == "allreduce" else (n - 1) / n
    bw = lambda t: size / (t * 1e-6) / 1e9 * fac
    wrong = sum(x[2] for d in (h, f, m) for x in d[size])
    fit["flat MPI"].append((size, tf))
    fit["Open MPI"].append((size, tm))
    print(f"| {size} | {th:.1f} | {bw(th):.3f} | {tf:.1f} | {bw(tf):.3f} | {tm:.1f} | {bw(tm):.3f} | "
          f"{tf/th:.2f} | {tm/th:.2f} | {wrong} |")
if op == "allgather" and len(sizes := sorted(h)) >= 3:
    # all-gather of n bytes over 2 nodes: each node receives the other's half across the link,
    # t = alpha + (n / 2) beta: beta from the two largest sizes, alpha what the smallest leaves
    for name, pts in fit.items():
        t = dict(pts)
        a, b = sizes[-2], sizes[-1]
        beta = (t[b] - t[a]) * 1e-6 / ((b - a) / 2)
        alpha = t[sizes[0]] * 1e-6 - sizes[0] / 2 * beta
        print(f"\nlink {rate}, {name} all-gather: beta {beta*1e9:.2f} ns/byte ({1/beta/1e9:.3f} GB/s "
              f"across the link), alpha {alpha*1e6:.0f} us")
PY
    done
done
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"
