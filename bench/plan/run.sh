#!/usr/bin/env bash
# run.sh: `cohort plan`'s predicted step time against `cohort train`'s measured one, on this
# machine, for every configuration that fits 2 ranks (single with 2 threads; ddp, zero1-3, tp 2
# and pp 2 with each schedule as 2 ranks x 1 thread; ddp over 4 ranks oversubscribed), on two model
# shapes, side by side in one run; and whether the planner's top pick is the measured best.
# First it calibrates: `cohort bench comm` (all-reduce times over 2 ranks, fitted to α + n/β)
# and `cohort bench gemm` write the calibration file the predictions use.
# usage: bench/plan/run.sh [BUILD_DIR] (default build); env STEPS per run (default 10, the
# first 3 are warm-up), ROUNDS (default 5; a run's step is the median of its measured steps,
# a configuration's the smallest over the rounds: the machine is shared, and other work only
# ever slows a run down; even rounds run the configurations in reverse order, so that a slow
# spell of the machine does not fall on the same ones every round), MAX_LOAD (default
# 1.5: wait until the 1-minute load is at most this, up to LOAD_WAIT s, default 900), KEEP (a
# directory to keep the metrics and logs in), ONLY (configurations whose name holds this word),
# HEAD_TO_HEAD (default 5; 0 skips: rounds in which the pick and the configurations that could be
# the best run again back to back, judged in pairs; report.py says which).
# Each configuration is predicted twice: with the engine itself timed at its shapes (`cohort
# plan --measure`, the prediction the goals are about, and the top pick's) and with compute
# composed from the GEMM and bandwidth rates alone (for comparison).
# On a machine shared with other work, run it as `nice -n -20 bench/plan/run.sh ...` so its
# processes take the cores first (the tensor-parallel benchmark does the same).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
steps=${STEPS:-10}
rounds=${ROUNDS:-5}
head_to_head=${HEAD_TO_HEAD:-5}
max_load=${MAX_LOAD:-1.5}
load_wait=${LOAD_WAIT:-900}
warm=3
cohort=$build/cohort
if [ -n "${KEEP:-}" ]; then
    work=$(mkdir -p "$KEEP" && cd "$KEEP" && pwd)
else
    work=$(mktemp -d)
    trap 'rm -rf "$work"' EXIT
fi
load1() { cut -d' ' -f1 /proc/loadavg; }
above() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a > b) }'; }
wait_load() {
    local waited=0
    while above "$(load1)" "$max_load" && [ "$waited" -lt "$load_wait" ]; do
        echo "load $(load1) above $max_load, waiting 60 s"
        sleep 60
        waited=$((waited + 60))
    done
}

# data: the bytes of Debian's fortunes text (the pipeline benchmark's corpus)
corpus=/usr/share/games/fortunes
[ -d "$corpus" ] || { echo "no $corpus: apt-get install fortunes (scripts/setup.sh)" >&2; exit 2; }
files=()
for f in "$corpus"/*; do
    case "$f" in *.dat | *.u8) ;; *) [ -f "$f" ] && files+=("$f") ;; esac
done
"$cohort" prepare --tokenizer byte --out "$work/bytes" "${files[@]}" >/dev/null

# ---- calibration ----
wait_load
echo "calibration at load $(load1) ($(date -u '+%H:%M:%S UTC'))"
"$cohort" run --nproc-per-node 2 --standalone --local-ranks-filter 0 --prefix '' \
    "$cohort" bench comm --json --min-bytes 64K --max-bytes 64M --step-factor 4 --iters 10 \
    >"$work/comm.jsonl"
read -r lat gbs < <(/usr/bin/python3 - "$work/comm.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip().startswith("{")]
# 2-rank ring all-reduce: t = 2 alpha + n / beta. beta: least squares slope over the messages of
# gradient-bucket size (1 MiB and up, where the caches no longer hold them); alpha: half the
# smallest message's time
big = [(r["size"], r["time_us"] * 1e-6) for r in rows if r["size"] >= (1 << 20)]
mx = sum(x for x, _ in big) / len(big); my = sum(y for _, y in big) / len(big)
slope = sum((x - mx) * (y - my) for x, y in big) / sum((x - mx) ** 2 for x, _ in big)
small = min(rows, key=lambda r: r["size"])
icpt = max(small["time_us"] * 1e-6 - small["size"] * slope, small["time_us"] * 1e-6 / 2)
print("%.3f %.4f" % (max(icpt / 2, 0) * 1e6, 1 / slope / 1e9))
PY
)
echo "link from bench comm: alpha $lat us, beta $gbs GB/s"
"$cohort" bench gemm --out "$work/cal.json" --link-latency-us "$lat" --link-gbytes-per-s "$gbs" \
    | sed 's/^/  /'

# ---- the configurations ----
shape_small=(--layers 4 --dim 256 --heads 4 --vocab 256 --seq 128)
shape_large=(--layers 8 --dim 384 --heads 6 --vocab 256 --seq 256)
gb=8
# name ranks threads flags (global batch 8 sequences in every one)
configs=(
    "single 1 2 --micro-batch 8 --grad-accum 1"
    "single-m4 1 2 --micro-batch 2 --grad-accum 4"
    "ddp 2 1 --strategy ddp --micro-batch 4 --grad-accum 1"
    "zero1 2 1 --strategy zero1 --micro-batch 4 --grad-accum 1"
    "zero2 2 1 --strategy zero2 --micro-batch 4 --grad-accum 1"
    "zero3 2 1 --strategy zero3 --micro-batch 4 --grad-accum 1"
    "pp-1f1b 2 1 --pp 2 --schedule 1f1b --micro-batch 2 --grad-accum 4"
    "pp-gpipe 2 1 --pp 2 --schedule gpipe --micro-batch 2 --grad-accum 4"
    "pp-naive 2 1 --pp 2 --schedule naive --micro-batch 2 --grad-accum 4"
    "pp-interleaved 2 1 --pp 2 --schedule interleaved --virtual-stages 2 --micro-batch 2 --grad-accum 4"
    "tp 2 1 --tp 2 --micro-batch 8 --grad-accum 1"
    "ddp-4ranks 4 1 --strategy ddp --micro-batch 2 --grad-accum 1"
)
if [ -n "${ONLY:-}" ]; then
    kept=()
    for c in "${configs[@]}"; do case ${c%% *} in *"$ONLY"*) kept+=("$c") ;; esac; done
    configs=("${kept[@]}")
fi
# The planner's top pick for each shape (engine measured), added to that shape's runs as "pick"
# when no configuration above is the same one.
wait_load
echo "searching at load $(load1) ($(date -u '+%H:%M:%S UTC'))"
for shape in small large; do
    declare -n sh="shape_$shape"
    declare -n list="configs_$shape"
    list=("${configs[@]}")
    "$cohort" plan "${sh[@]}" --global-batch $gb --calibration "$work/cal.json" --runnable-only \
        --measure --json --top 3 >"$work/top.$shape.json"
    pick=$(/usr/bin/python3 - "$work/top.$shape.json" "${configs[@]}" <<'PY'
import json, sys
top = json.load(open(sys.argv[1]))["configurations"][0]
cmd = top["command"].split()
ranks = int(cmd[cmd.index("--nproc-per-node") + 1]) if "--nproc-per-node" in cmd else 1
flags = cmd[cmd.index("train") + 1:cmd.index("--layers")]
threads = flags[flags.index("--threads") + 1] if "--threads" in flags else "1"
if "--threads" in flags:
    i = flags.index("--threads")
    del flags[i:i + 2]
def norm(f):  # flags as a set of option/value pairs, --strategy single implied
    f = list(f)
    if "--strategy" not in f:
        f += ["--strategy", "single"]
    return sorted(zip(f[0::2], f[1::2]))
for c in sys.argv[2:]:
    name, r, t, *fl = c.split()
    if int(r) == ranks and t == threads and norm(fl) == norm(flags):
        print(name)
        sys.exit(0)
print("pick %d %s %s" % (ranks, threads, " ".join(flags)))
PY
)
    case $pick in pick\ *) list+=("$pick"); echo "$shape: the top pick is not among the runs: ${pick#pick }" ;;
                  *) echo "$shape: the top pick is $pick" ;; esac
    echo "${pick%% *}" >"$work/pick.$shape"
    /usr/bin/python3 - "$work/top.$shape.json" <<'PY'
import json, sys
for i, c in enumerate(json.load(open(sys.argv[1]))["configurations"]):
    cmd = c["command"].split(" --layers")[0].split(" train ")[1]
    print("  search's #%d: %.1f ms  %s" % (i + 1, c["step_s"] * 1e3, cmd))
PY
    for c in "${list[@]}"; do echo "${c%% *}"; done >"$work/names.$shape"
    for c in "${list[@]}"; do echo "$c"; done >"$work/configs.$shape"
done
# train_run SHAPE "NAME RANKS THREADS FLAGS" TAG: one measured run of a configuration, its
# metrics in m.SHAPE.NAME.TAG.jsonl
train_run() {
    local shape=$1 tag=$3 name ranks threads flags
    read -r name ranks threads flags <<<"$2"
    declare -n shr="shape_$shape"
    local launch=()
    [ "$ranks" = 1 ] || launch=("$cohort" run --nproc-per-node "$ranks" --standalone)
    # shellcheck disable=SC2086
    if ! "${launch[@]}" "$cohort" train --threads "$threads" $flags "${shr[@]}" \
        --data "$work/bytes_train_*.bin" --tokenizer byte --steps "$steps" \
        --log-every 1000 --metrics "$work/m.$shape.$name.$tag.jsonl" \
        >"$work/log.$shape.$name.$tag" 2>&1; then
        echo "$shape $name failed:"; tail -5 "$work/log.$shape.$name.$tag"; exit 1
    fi
}
echo "load before: $(uptime)"
# Each round predicts every configuration (the engine measured then, under the round's own
# conditions) just before running it; a configuration's prediction is the smallest over the
# rounds, as its measured step is (other work only ever slows either down).
for r in $(seq "$rounds"); do
    wait_load
    echo "round $r at load $(load1) ($(date -u '+%H:%M:%S UTC'))"
    shapes=(small large)
    [ $((r % 2)) = 1 ] || shapes=(large small)
    for shape in "${shapes[@]}"; do
        declare -n sh="shape_$shape"
        declare -n list="configs_$shape"
        order=("${list[@]}")
        if [ $((r % 2)) = 0 ]; then
            order=()
            for ((i = ${#list[@]} - 1; i >= 0; i--)); do order+=("${list[i]}"); done
        fi
        for c in "${order[@]}"; do
            read -r name ranks threads flags <<<"$c"
            # shellcheck disable=SC2086
            "$cohort" plan "${sh[@]}" --explain --nodes 1 --gpus-per-node "$ranks" \
                --threads "$threads" $flags --calibration "$work/cal.json" --measure --json \
                >"$work/pred.$shape.$name.r$r.json"
            # shellcheck disable=SC2086
            [ "$r" != 1 ] || "$cohort" plan "${sh[@]}" --explain --nodes 1 --gpus-per-node "$ranks" \
                --threads "$threads" $flags --calibration "$work/cal.json" --json \
                >"$work/rates.$shape.$name.json"
            train_run "$shape" "$c" "r$r"
        done
    done
done
echo "load after: $(uptime)"

# Head to head: the pick and the configurations that could be the best (report.py contenders)
# run again, HEAD_TO_HEAD rounds of each once, back to back, the order rotated every round, so
# that the pick is judged against them in pairs that met the same machine.
for h in $(seq "$head_to_head"); do
    wait_load
    echo "head-to-head round $h at load $(load1) ($(date -u '+%H:%M:%S UTC'))"
    for shape in small large; do
        [ "$h" != 1 ] || /usr/bin/python3 "$root/bench/plan/report.py" contenders "$work" "$warm" \
            "$rounds" "$shape" >"$work/h2h.$shape"
        mapfile -t race <"$work/h2h.$shape"
        [ "${#race[@]}" -ge 2 ] || continue
        for ((i = 0; i < ${#race[@]}; i++)); do
            train_run "$shape" "${race[(i + h) % ${#race[@]}]}" "h$h"
        done
    done
done

/usr/bin/python3 "$root/bench/plan/report.py" table "$work" "$warm" "$rounds" "$head_to_head"
