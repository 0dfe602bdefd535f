#!/usr/bin/env bash
# run.sh: cohort's training step against PyTorch eager on the same GPT-2 model, side by side in
# one run, same threads and same OpenBLAS kernel. The machine is shared and noisy, so the two
# alternate for ROUNDS rounds and each keeps its best round; MFU is against the best sgemm peak
# measured in the run (bench_train measures it before each of its rounds).
# usage: bench/train/run.sh [BUILD_DIR] (default build); env THREADS (default: all cores),
# STEPS per round (default 6), ROUNDS (default 3).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
threads=${THREADS:-$(nproc)}
steps=${STEPS:-6}
rounds=${ROUNDS:-3}
shape=(--layers 6 --dim 384 --heads 6 --seq 256 --batch 8 --vocab 50257)
num() { echo "$1" | sed -E "s/.*\"$2\": ([0-9.]+).*/\1/"; }
max() { echo "$1 $2" | awk '{ print ($1 > $2) ? $1 : $2 }'; }

echo "load before: $(uptime)"
best_ours=0 best_theirs=0 peak=0 kernel="" fpt=0
for r in $(seq "$rounds"); do
    ours=$("$build/bench/train/bench_train" "${shape[@]}" --steps "$steps" --threads "$threads")
    echo "round $r: $ours"
    kernel=$(echo "$ours" | sed -E 's/.*"kernel": "([^"]+)".*/\1/')
    fpt=$(num "$ours" flops_per_token)
    peak=$(max "$peak" "$(num "$ours" sgemm_gflops)")
    best_ours=$(max "$best_ours" "$(num "$ours" tokens_per_s)")
    # The anchor gets the same BLAS fix: PyTorch here calls the system OpenBLAS (libblas.so.3).
    theirs=$(OPENBLAS_CORETYPE=$kernel OPENBLAS_NUM_THREADS=$threads OMP_NUM_THREADS=$threads \
             /usr/bin/python3 "$root/bench/train/bench_torch.py" "${shape[@]}" --steps "$steps" \
             --threads "$threads" --peak "$(echo "$(num "$ours" sgemm_gflops) * 1000000000" | bc -l)")
    echo "round $r: $theirs"
    best_theirs=$(max "$best_theirs" "$(num "$theirs" tokens_per_s)")
done
mfu() { echo "$1 $fpt $peak" | awk '{ printf "%.1f%%", 100 * $1 * $2 / ($3 * 1e9) }'; }
echo "best of $rounds rounds, $threads threads, OpenBLAS kernel $kernel, sgemm peak $peak GFLOP/s:"
echo "  cohort  tokens/s $best_ours  mfu $(mfu "$best_ours")"
echo "  pytorch tokens/s $best_theirs  mfu $(mfu "$best_theirs")"
echo "  ratio cohort/pytorch: $(echo "$best_ours $best_theirs" | awk '{ printf "%.2fx", $1 / $2 }')"
echo "load after: $(uptime)"
