#!/usr/bin/env bash
# run.sh: cohort's collectives against Open MPI, side by side in one run: for each rank count
# and round it runs `cohort bench comm` (arena buffers, then plain buffers) and the MPI anchor
# (mpi_comm_bench) alternately, then prints per size the median time of each over the rounds,
# their bus bandwidths and the ratios cohort/MPI (busbw; above 1 means cohort is faster).
# With --baseline OTHER_BUILD_DIR (another commit's build) that build's cohort runs in the same
# rounds too, and its ratios to MPI are printed beside the current ones (before/after).
# usage: bench/comm/run.sh BUILD_DIR [--ranks "2 4"] [--rounds 3] [--baseline DIR] [bench options...]
#   e.g. bench/comm/run.sh build --ranks "2 4" --rounds 3 --op allreduce --max-bytes 256M
set -euo pipefail
build=$(cd "${1:?usage: run.sh BUILD_DIR [options]}" && pwd)
shift
ranks="2 4"
rounds=3
baseline=
args=()
while [ $# -gt 0 ]; do
    case $1 in
    --ranks) ranks=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --baseline) baseline=$(cd "$2" && pwd); shift 2 ;;
    *) args+=("$1"); shift ;;
    esac
done
python=${COHORT_PYTHON:-/usr/bin/python3}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# cohort ranks are started by the launcher; MPI's by mpirun. Open MPI binds each rank to a
# core when there are no more ranks than cores (and to nothing when oversubscribed): cohort's
# ranks get the same, or the scheduler may stack both on one core while the other is busy.
launch_cohort() {
    local n=$1 bind=none
    shift
    [ "$n" -le "$(nproc)" ] && bind=cores
    "$1" run --standalone --nproc-per-node "$n" --cpu-bind "$bind" --prefix '' -- "$@" 2>/dev/null
}
# --oversubscribe only when ranks outnumber cores: it makes Open MPI yield when idle.
launch_mpi() {
    local n=$1 over=()
    shift
    [ "$n" -gt "$(nproc)" ] && over=(--oversubscribe)
    mpirun --allow-run-as-root "${over[@]}" -np "$n" "$@"
}

for n in $ranks; do
    for r in $(seq "$rounds"); do
        launch_cohort "$n" "$build/cohort" bench comm --buffers arena "${args[@]}" >"$out/arena.$n.$r"
        launch_cohort "$n" "$build/cohort" bench comm --buffers plain "${args[@]}" >"$out/plain.$n.$r"
        if [ -n "$baseline" ]; then
            launch_cohort "$n" "$baseline/cohort" bench comm --buffers arena "${args[@]}" >"$out/barena.$n.$r"
            launch_cohort "$n" "$baseline/cohort" bench comm --buffers plain "${args[@]}" >"$out/bplain.$n.$r"
        fi
        launch_mpi "$n" "$build/mpi_comm_bench" "${args[@]}" >"$out/mpi.$n.$r"
    done
done

"$python" - "$out" "$ranks" "$rounds" "$baseline" <<'PY'
import statistics, sys
out, ranks, rounds, base = sys.argv[1], sys.argv[2].split(), int(sys.argv[3]), sys.argv[4]
def rows(kind, n):
    by = {}
    for r in range(1, rounds + 1):
        for line in open(f"{out}/{kind}.{n}.{r}"):
            if line.startswith("#") or not line.strip():
                continue
            f = line.split()
            by.setdefault(int(f[0]), []).append((f, float(f[5]), int(f[8])))
    return by
for n in ranks:
    a, p, m = rows("arena", n), rows("plain", n), rows("mpi", n)
    ba, bp = (rows("barena", n), rows("bplain", n)) if base else ({}, {})
    f0 = next(iter(m.values()))[0][0]
    print(f"\n{n} ranks, {f0[2]} {f0[3]} {f0[4]}, median of {rounds} alternating rounds")
    extra = " baseline arena/MPI | baseline plain/MPI |" if base else ""
    print(f"| size | count | cohort arena us | busbw GB/s | cohort plain us | busbw GB/s | "
          f"Open MPI us | busbw GB/s | arena/MPI | plain/MPI |{extra} #wrong |")
    print("|---:" * (13 if base else 11) + "|")
    for size in sorted(m):
        fac = float(m[size][0][0][7]) / float(m[size][0][0][6]) if float(m[size][0][0][6]) else 1
        ta = statistics.median(x[1] for x in a[size]); tp = statistics.median(x[1] for x in p[size])
        tm = statistics.median(x[1] for x in m[size])
        bw = lambda t: size / (t * 1e-6) / 1e9 * fac
        wrong = sum(x[2] for d in (a, p, m, ba, bp) for x in d.get(size, []))
        cols = ""
        if base:
            tba = statistics.median(x[1] for x in ba[size])
            tbp = statistics.median(x[1] for x in bp[size])
            cols = f" {tm/tba:.2f} | {tm/tbp:.2f} |"
        print(f"| {size} | {m[size][0][0][1]} | {ta:.1f} | {bw(ta):.2f} | {tp:.1f} | {bw(tp):.2f} | "
              f"{tm:.1f} | {bw(tm):.2f} | {tm/ta:.2f} | {tm/tp:.2f} |{cols} {wrong} |")
PY
