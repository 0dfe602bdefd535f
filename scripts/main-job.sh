#!/usr/bin/env bash
# main-job.sh: the README's main job: trains a small GPT (byte-level tokens) on the English text
# of Debian's `fortunes` package, shows the loss falling, then samples text from the model.
# Takes a few minutes on 2 cores. usage: scripts/main-job.sh [WORK_DIR] (default build/main-job);
# env STEPS (default 300), THREADS (default: all cores).
set -euo pipefail
cd "$(dirname "$0")/.."
work=${1:-build/main-job}
steps=${STEPS:-300}
corpus=/usr/share/games/fortunes

scripts/setup.sh
# Always (re)build: an incremental build is quick, and a stale binary would run old code.
cmake -S . -B build/release -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build/release -j"$(nproc)" >/dev/null
cohort=build/release/cohort
mkdir -p "$work"

# Every fortune file (not the .dat indexes or .u8 links), 2.5 MB of text, 5% held out.
files=()
for f in "$corpus"/*; do
    case "$f" in *.dat | *.u8) ;; *) [ -f "$f" ] && files+=("$f") ;; esac
done
"$cohort" prepare --tokenizer byte --val-fraction 0.05 --out "$work/fortunes" "${files[@]}"

threads=()
[ -z "${THREADS:-}" ] || threads=(--threads "$THREADS")
"$cohort" train --data "$work/fortunes_train_*.bin" --val-data "$work/fortunes_val_*.bin" \
    --tokenizer byte --vocab 256 --layers 4 --heads 4 --dim 192 --seq 128 --batch 16 \
    --steps "$steps" --lr 3e-3 --warmup 30 --weight-decay 0.1 --log-every 25 --val-every 100 \
    --val-batches 20 --metrics "$work/metrics.jsonl" --save "$work/model.safetensors" \
    --save-every 100 \
    "${threads[@]}"

echo "--- sample:"
"$cohort" generate --checkpoint "$work/model.safetensors" --prompt "The meaning of life is" \
    --tokens 400 --temperature 0.8 --top-k 40 --seed 7
