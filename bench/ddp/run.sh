#!/usr/bin/env bash
# run.sh: data-parallel training throughput side by side in one run on the engine benchmark
# model: cohort single (THREADS threads), cohort dp (2 devices x 1 thread), cohort ddp and the
# ZeRO stages (2 ranks x 1 thread under `cohort run`), PyTorch DDP with gloo (2 ranks x 1 thread
# under `cohort run`); global tokens/s and ratios as a markdown table.
# usage: bench/ddp/run.sh [BUILD_DIR] (default build); env STEPS (default 10), THREADS (default
# 2: the cores the 2-rank runs use), STRATEGIES (default "ddp zero1 zero2 zero3"), PRECISION
# (default fp32; bf16-mixed runs the cohort rows in bf16-mixed, dp excepted, which refuses it),
# GRAD_DTYPE (default fp32; bf16: the multi-process rows reduce gradients in bf16).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
steps=${STEPS:-10}
threads=${THREADS:-2}
strategies=${STRATEGIES:-ddp zero1 zero2 zero3}
precision=${PRECISION:-fp32}
shape=(--layers 6 --dim 384 --heads 6 --seq 256 --batch 8 --vocab 50257 --steps "$steps")
ours=(--precision "$precision")
grad=(--grad-reduce-dtype "${GRAD_DTYPE:-fp32}")
bench=$build/bench/ddp/bench_dp
launch=("$build/cohort" run --nproc-per-node 2 --standalone --local-ranks-filter 0 --prefix '')
num() { echo "$1" | sed -E "s/.*\"$2\": \"?([^,\"}]+)\"?.*/\1/"; }

echo "load before: $(uptime)"
single=$("$bench" --strategy single --threads "$threads" "${shape[@]}" "${ours[@]}")
echo "$single"
kernel=$(num "$single" kernel)
dp='{"tokens_per_s": 0, "step_s": 0, "first_loss": 0, "loss": 0}'
if [ "$precision" = fp32 ]; then
    dp=$("$bench" --strategy dp --devices 2 "${shape[@]}")
    echo "$dp"
fi
declare -A multi
for s in $strategies; do
    if out=$("${launch[@]}" "$bench" --strategy "$s" --threads 1 "${shape[@]}" "${ours[@]}" \
             "${grad[@]}" 2>/dev/null | tail -1) &&
       [ -n "$out" ]; then
        multi[$s]=$out
        echo "$out"
    else
        echo "cohort $s: failed (see its output: rerun the line above without 2>/dev/null)"
    fi
done
# The anchor gets the same BLAS fix: PyTorch here calls the system OpenBLAS (libblas.so.3).
torch=$(OPENBLAS_CORETYPE=$kernel "${launch[@]}" /usr/bin/python3 \
        "$root/bench/ddp/bench_torch_ddp.py" "${shape[@]}" --threads 1 2>/dev/null | tail -1)
echo "$torch"
echo "load after: $(uptime)"

ttps=$(num "$torch" tokens_per_s)
stps=$(num "$single" tokens_per_s)
ratio() { echo "$1 / $2" | bc -l | awk '{ printf "%.2fx", $1 }'; }
label() { case $1 in ddp) echo DDP ;; zero*) echo "ZeRO-${1#zero}" ;; *) echo "$1" ;; esac; }
# one row: type (the guide's N:kind), what runs, the JSON line
row() {
    local tps
    tps=$(num "$3" tokens_per_s)
    echo "| $1 | $2 | $(num "$3" step_s) | $tps | $(ratio "$tps" "$ttps") | $(ratio "$tps" "$stps") |" \
         "$(num "$3" first_loss) -> $(num "$3" loss) |"
}
echo
echo "| Type | processes x threads | s/step | tokens/s | vs PyTorch DDP | vs cohort single | loss |"
echo "|:---|:---|---:|---:|---:|---:|---:|"
for s in $strategies; do
    [ -n "${multi[$s]:-}" ] && row "2:$(label "$s")" "cohort, 2 x 1" "${multi[$s]}"
done
[ "$precision" = fp32 ] && row "2:DP" "cohort, 1 x 2 (a thread per device)" "$dp"
row "1:single" "cohort, 1 x $threads" "$single"
row "2:DDP" "PyTorch 1.13 (gloo), 2 x 1" "$torch"
echo
echo "OpenBLAS kernel $kernel for cohort and PyTorch; micro-batch 8 x 256 tokens per rank, per device or for single; $steps steps timed after one warm-up step; s/step is one optimizer step (2:* steps process twice the tokens of 1:single); loss: random tokens (ln 50257 = 10.82), first step -> last, mean over ranks; the same initialisation, AdamW and schedule for both; cohort rows in $precision, gradients reduced in ${GRAD_DTYPE:-fp32} (PyTorch DDP: fp32)"
