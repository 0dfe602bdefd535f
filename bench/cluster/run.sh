#!/usr/bin/env bash
# run.sh: collectives across a rate-shaped link between two "nodes" on one machine
# (tests/launch/netns_lib.sh: network namespaces joined by a veth pair shaped with tc tbf, a host
# name and a /dev/shm per node), 2 ranks per node started by Open MPI (TCP across the link,
# shared memory inside a node). Per link rate, first the link itself: `cohort bench link` with
# one rank on each node measures its alpha and beta and merges them as "inter_node" into this
# machine's calibration file (`cohort bench gemm`), then `cohort plan --calibration` over
# 2 nodes x 2 ranks predicts a ddp step that is measured beside it (`cohort train` on the nodes;
# --ddp-steps 0 skips it). Then per collective, side by side in each round:
# cohort's hierarchical transport (COHORT_COMM_HIER=1: shared memory inside the node, MPI across;
# COHORT_COMM_HIER_MIN_BYTES=0: all-gather and reduce-scatter in two steps at every size),
# cohort's flat MPI transport (COHORT_COMM_HIER=0) and Open MPI's own collective
# (mpi_comm_bench); the table gives per size the median over the rounds of the slowest rank's
# mean time, busbw (nccl-tests' convention) and the ratios; then the link's alpha and beta seen
# by flat MPI's and Open MPI's all-gather. Needs root.
# usage: bench/cluster/run.sh BUILD_DIR [--rounds 3] [--rates "10gbit 1gbit"]
#        [--ops "allreduce allgather reduce_scatter"] [--ddp-steps 20] [bench options...]
#   e.g. bench/cluster/run.sh build/rel --rounds 3
#        bench/cluster/run.sh build/rel --ops ""   (the link, the calibration and the ddp step)
# env KEEP: a directory to keep the calibration files, metrics and tables in.
set -euo pipefail
: "${1:?usage: run.sh BUILD_DIR [options]}"
root=$(cd "$(dirname "$0")/../.." && pwd)
. "$root/bench/bench_lib.sh" # build (from $1), cohort, work
shift
rounds=3 rates="10gbit 1gbit" ops="allreduce allgather reduce_scatter" ddp_steps=20
args=(--min-bytes 64K --max-bytes 64M --step-factor 4 --iters 5 --warmup 2)
while [ $# -gt 0 ]; do
    case $1 in
    --rounds) rounds=$2; shift 2 ;;
    --rates) rates=$2; shift 2 ;;
    --ops) ops=$2; shift 2 ;;
    --ddp-steps) ddp_steps=$2; shift 2 ;;
    *) args+=("$1"); shift ;;
    esac
done
python=${COHORT_PYTHON:-/usr/bin/python3}
# shellcheck source=../../tests/launch/netns_lib.sh
. "$root/tests/launch/netns_lib.sh"
why=$(netns_can_run)
[ -z "$why" ] || { echo "run.sh: cannot make the nodes: $why" >&2; exit 1; }
trap 'netns_down; [ -n "${KEEP:-}" ] || rm -rf "$work"' EXIT
chmod 755 "$work"
netns_up
export COHORT_MPI_PLUGIN=$build/libcohort_mpi.so
run() { # KIND PROGRAM...: 2 nodes x 2 ranks, the hierarchy switched by COHORT_COMM_HIER
    local kind=$1
    shift
    # (COHORT_COMM_HIER_MIN_BYTES: unused by the flat runs)
    COHORT_COMM_HIER_MIN_BYTES=0 NETNS_TIMEOUT=600 netns_mpirun 2 -x COHORT_COMM_HIER -x COHORT_COMM_HIER_MIN_BYTES -x COHORT_MPI_PLUGIN \
        "$@" >"$work/$kind.$r"
}
echo "# bench/cluster: 2 nodes x 2 ranks (namespaces on one host, $(nproc) cpus), link rates: $rates;" \
    "load before: $(cut -d' ' -f1-3 /proc/loadavg)"

# ---- the link, the calibration file and a ddp step: measured against the plan ----
# The model and batch of bench/plan's ddp row (its small shape), 1 thread per rank; the byte
# tokens of Debian's fortunes text.
shape=(--layers 4 --dim 256 --heads 4 --vocab 256 --seq 128)
step=(--strategy ddp --micro-batch 2 --grad-accum 1 --threads 1)
"$cohort" bench gemm --out "$work/cal.json" >"$work/gemm.txt"
[ "$ddp_steps" -eq 0 ] || bench_fortunes_bytes
link_step() { # RATE: the link measured into cal.RATE.json; the ddp step predicted and measured
    local rate=$1
    cp "$work/cal.json" "$work/cal.$rate.json"
    NETNS_TIMEOUT=300 netns_mpirun 1 -x COHORT_MPI_PLUGIN "$cohort" bench link \
        --calibration "$work/cal.$rate.json" >"$work/link.$rate"
    grep '^# link:' "$work/link.$rate" | sed "s/^# link:/link $rate, one rank per node, cohort bench link:/"
    [ "$ddp_steps" -gt 0 ] || return 0
    # the plan prices each namespace node as half of this machine (the 4 ranks share its cores)
    "$python" -c 'import json, sys
c = json.load(open(sys.argv[1])); c["cores"] = max(1, c["cores"] // 2); json.dump(c, open(sys.argv[2], "w"))' \
        "$work/cal.$rate.json" "$work/cal.$rate.half.json"
    "$cohort" plan "${shape[@]}" --explain --nodes 2 --gpus-per-node 2 "${step[@]}" \
        --calibration "$work/cal.$rate.half.json" --json >"$work/plan.$rate.json"
    NETNS_TIMEOUT=600 netns_mpirun 2 -x COHORT_MPI_PLUGIN "$cohort" train "${shape[@]}" "${step[@]}" \
        --data "$work/bytes_train_*.bin" --tokenizer byte --steps "$ddp_steps" --log-every 1000 \
        --metrics "$work/ddp.$rate.jsonl" >"$work/ddp.$rate.log" 2>&1 ||
        { echo "ddp on the nodes failed:" >&2; tail -5 "$work/ddp.$rate.log" >&2; exit 1; }
    "$python" - "$work" "$rate" <<'PY'
import json, statistics, sys
work, rate = sys.argv[1], sys.argv[2]
plan = json.load(open(f"{work}/plan.{rate}.json"))
m = [json.loads(l) for l in open(f"{work}/ddp.{rate}.jsonl") if l.startswith("{")]
warm = min(5, len(m) - 2)
t = [b["elapsed_s"] - a["elapsed_s"] for a, b in zip(m[warm - 1:], m[warm:])]
meas = statistics.median(t)
print(f"link {rate}, ddp on 2 nodes x 2 ranks (1 thread each, micro-batch 2): "
      f"plan {plan['step_s'] * 1e3:.1f} ms (comm {plan['comm_s'] * 1e3:.1f} ms, exposed "
      f"{plan['exposed_comm_s'] * 1e3:.1f} ms), measured {meas * 1e3:.1f} ms (median of {len(t)} steps "
      f"after {warm}), plan / measured {plan['step_s'] / meas:.2f}")
PY
}

for rate in $rates; do
    netns_shape "$rate"
    link_step "$rate"
    for op in $ops; do
        for r in $(seq "$rounds"); do
            bench_comm_trio run --op "$op" "${args[@]}"
        done
        bench_comm_transports "$work" || {
            echo "run.sh: the runs did not use the transports compared:" >&2
            head -3 "$work/hier.1" "$work/flat.1" >&2
            exit 1
        }
        bench_comm_py "$work" "$rounds" "$rate" "$op" <<'PY'
import sys
from bench_comm import medians, trio
out, rounds, rate, op = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
h, f, m, f0 = trio(out, rounds)
print(f"\n{op}, link {rate}, 2 nodes x 2 ranks, {f0[2]} {f0[3]} {f0[4]}, median of {rounds} rounds")
print(f"| size | hier us | busbw GB/s | flat mpi us | busbw GB/s | Open MPI us | busbw GB/s | "
      "hier/flat | hier/MPI | #wrong |")
print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
fit = {"flat MPI": [], "Open MPI": []}
for size in sorted(h):
    (th, tf, tm), wrong = medians(size, h, f, m)
    n = 4  # nccl-tests' busbw factor for 4 ranks
    fac = 2 * (n - 1) / n if op == "allreduce" else (n - 1) / n
    bw = lambda t: size / (t * 1e-6) / 1e9 * fac
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
