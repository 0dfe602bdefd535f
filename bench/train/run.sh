#!/usr/bin/env bash
# run.sh: cohort's training step against PyTorch eager on the same GPT-2 model, side by side in
# one run, same threads and same OpenBLAS kernel; prints both and the ratios.
# usage: bench/train/run.sh [BUILD_DIR] (default build); env THREADS (default: all cores),
# STEPS (default 10).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
threads=${THREADS:-$(nproc)}
steps=${STEPS:-10}
shape=(--layers 6 --dim 384 --heads 6 --seq 256 --batch 8 --vocab 50257)
echo "load before: $(uptime)"
ours=$("$build/bench/train/bench_train" "${shape[@]}" --steps "$steps" --threads "$threads")
echo "$ours"
kernel=$(echo "$ours" | sed -E 's/.*"kernel": "([^"]+)".*/\1/')
peak=$(echo "$ours" | sed -E 's/.*"sgemm_gflops": ([0-9.]+).*/\1/')
# The anchor gets the same BLAS fix: PyTorch here calls the system OpenBLAS (libblas.so.3).
theirs=$(OPENBLAS_CORETYPE=$kernel OPENBLAS_NUM_THREADS=$threads OMP_NUM_THREADS=$threads \
         /usr/bin/python3 "$root/bench/train/bench_torch.py" "${shape[@]}" --steps "$steps" \
         --threads "$threads" --peak "$(echo "$peak * 1e9" | bc -l)")
echo "$theirs"
num() { echo "$1" | sed -E "s/.*\"$2\": ([0-9.]+).*/\1/"; }
echo "ratio tokens/s cohort/pytorch: $(echo "$(num "$ours" tokens_per_s) / $(num "$theirs" tokens_per_s)" | bc -l | cut -c1-5)"
echo "mfu cohort $(num "$ours" mfu), pytorch $(num "$theirs" mfu) (against sgemm peak ${peak} GFLOP/s, kernel $kernel)"
echo "load after: $(uptime)"
