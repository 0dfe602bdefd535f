#!/usr/bin/env bash
# main-job.sh: the README's main job: cohort's mission on the machine it runs on, in a few minutes
# on 2 cores: (1) the devices this machine has and what a job sees, (2) the memory estimate of the
# run it is about to start, (3) that run: a small GPT (byte-level tokens) trained on the English
# text of Debian's `fortunes` package by 2 data-parallel (DDP) processes under `cohort run`, with
# the progress line on a terminal, (4) `cohort report`: an HTML page of its loss, speed, memory
# and per-rank timeline, (5) a sample of text from the trained model.
# usage: scripts/main-job.sh [WORK_DIR] (default build/main-job); env STEPS (default 300),
# THREADS (per rank; default: the cores shared by the 2 ranks).
set -euo pipefail
cd "$(dirname "$0")/.."
work=${1:-build/main-job}
steps=${STEPS:-300}
corpus=/usr/share/games/fortunes
ranks=2
# DDP: on 2 cores, 2 ranks of 1 thread train faster than one process of 2 threads, and faster
# than ZeRO-1 (whose parameter all-gather costs more than the optimizer state it saves here);
# see docs/BENCHMARKS.md.
strategy=ddp
threads=${THREADS:-$(($(nproc) / ranks > 0 ? $(nproc) / ranks : 1))}

scripts/setup.sh
# Always (re)build: an incremental build is quick, and a stale binary would run old code.
cmake -S . -B build/release -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build/release -j"$(nproc)" >/dev/null
cohort=build/release/cohort
mkdir -p "$work"
rm -f "$work"/trace*.json "$work"/metrics.jsonl

echo "=== 1. devices: what this machine has, and what a job sees"
"$cohort" devices

# Every fortune file (not the .dat indexes or .u8 links), 2.5 MB of text, 5% held out.
files=()
for f in "$corpus"/*; do
    case "$f" in *.dat | *.u8) ;; *) [ -f "$f" ] && files+=("$f") ;; esac
done
echo
echo "=== corpus: Debian's fortunes, byte-level tokens"
"$cohort" prepare --tokenizer byte --val-fraction 0.05 --out "$work/fortunes" "${files[@]}"

model=(--vocab 256 --layers 4 --heads 4 --dim 192 --seq 128)
# the global batch is 16 sequences: 8 on each of the 2 ranks
parallel=(--strategy "$strategy" --batch 8 --threads "$threads")
echo
echo "=== 2. estimate: memory per rank of the run below, before anything is allocated"
"$cohort" estimate --engine cohort "${model[@]}" "${parallel[@]}" --dp "$ranks"
"$cohort" estimate --engine cohort "${model[@]}" "${parallel[@]}" --dp "$ranks" --json \
    >"$work/estimate.json"

echo
echo "=== 3. train: $ranks processes ($strategy) under cohort run, $steps steps"
# Only rank 0's output is shown (a failing rank's last lines are printed whatever the filter).
"$cohort" run --nproc-per-node "$ranks" --local-ranks-filter 0 \
    "$cohort" train --tokenizer byte "${model[@]}" "${parallel[@]}" \
    --data "$work/fortunes_train_*.bin" --val-data "$work/fortunes_val_*.bin" \
    --steps "$steps" --lr 3e-3 --warmup 30 --weight-decay 0.1 --log-every 25 --val-every 100 \
    --val-batches 20 --metrics "$work/metrics.jsonl" --trace "$work/trace.json" \
    --save "$work/model.safetensors" --save-every 100

echo
echo "=== 4. report: loss, speed, memory and the per-rank timeline"
"$cohort" report main-job="$work" --title "cohort main job: $strategy on $ranks ranks" \
    -o "$work/report.html"
echo "report: $(cd "$work" && pwd)/report.html"

echo
echo "=== 5. sample from the trained model"
"$cohort" generate --checkpoint "$work/model.safetensors" --prompt "The meaning of life is" \
    --tokens 400 --temperature 0.8 --top-k 40 --seed 7
