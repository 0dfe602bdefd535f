#!/usr/bin/env bash
# run.sh: which strategy trains the main job's model fastest on this machine: one process with
# every core (single) against 2 ranks under `cohort run` (ddp, zero1) sharing the same cores,
# interleaved rounds side by side in one run on the main job's corpus and model, the global
# batch (16 x 128 tokens) the same in each; the median tokens/s of each run's steps after the
# first 5 (warm-up), then the median over rounds, and ratios against single.
# usage: bench/strategy/run.sh [BUILD_DIR] (default build/release); env ROUNDS (default 3),
# STEPS (default 25), CORES (default: nproc).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build/release}
rounds=${ROUNDS:-3}
steps=${STEPS:-25}
cores=${CORES:-$(nproc)}
cohort=$build/cohort
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
files=()
for f in /usr/share/games/fortunes/*; do
    case "$f" in *.dat | *.u8) ;; *) [ -f "$f" ] && files+=("$f") ;; esac
done
"$cohort" prepare --tokenizer byte --out "$work/f" "${files[@]}" >/dev/null
model=(--tokenizer byte --vocab 256 --layers 4 --heads 4 --dim 192 --seq 128 --lr 3e-3
       --warmup 30 --weight-decay 0.1 --data "$work/f_train_*.bin" --steps "$steps"
       --log-every 1000)
half=$((cores / 2 > 0 ? cores / 2 : 1))
run_one() { # NAME: one run, its metrics in $work/NAME.ROUND.jsonl
    local name=$1 round=$2 m=$work/$1.$2.jsonl
    case $name in
    single) "$cohort" train "${model[@]}" --batch 16 --threads "$cores" --metrics "$m" ;;
    *) "$cohort" run --nproc-per-node 2 "$cohort" train "${model[@]}" --strategy "$name" \
           --batch 8 --threads "$half" --metrics "$m" ;;
    esac >/dev/null 2>&1
}
echo "load before: $(uptime)"
for r in $(seq 1 "$rounds"); do
    for s in single ddp zero1; do run_one "$s" "$r"; done
done
echo "load after: $(uptime)"
/usr/bin/python3 - "$work" "$rounds" "$cores" "$half" <<'PY'
import json, statistics, sys
work, rounds, cores, half = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
med = {}
for s in ("single", "ddp", "zero1"):
    per_round = []
    for r in range(1, rounds + 1):
        tps = [json.loads(l)["tokens_per_s"] for l in open(f"{work}/{s}.{r}.jsonl")][5:]
        per_round.append(statistics.median(tps))
    med[s] = (statistics.median(per_round), per_round)
print("| strategy | processes x threads | tokens/s (median of rounds) | rounds | vs single |")
print("|:---|:---|---:|:---|---:|")
for s, (m, pr) in med.items():
    shape = f"1 x {cores}" if s == "single" else f"2 x {half}"
    print(f"| {s} | {shape} | {m:.0f} | {', '.join(f'{x:.0f}' for x in pr)} | "
          f"{m / med['single'][0]:.2f}x |")
PY
