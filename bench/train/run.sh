#!/usr/bin/env bash
# run.sh: cohort's training step against PyTorch eager on the same GPT-2 model, side by side in
# one run, same threads and same OpenBLAS kernel, in fp32 and in bf16 mixed precision (cohort
# --precision bf16-mixed; PyTorch under torch.autocast("cpu", dtype=torch.bfloat16)). The
# machine is shared and noisy, so the four alternate for ROUNDS rounds and each keeps its best
# round; fp32 MFU is against the best sgemm peak measured in the run, bf16-mixed MFU against the
# best bf16 GEMM peak (oneDNN, 2048^3; bench_train measures both before its rounds).
# usage: bench/train/run.sh [BUILD_DIR] (default build); env THREADS (default: all cores),
# STEPS per round (default 6), ROUNDS (default 3), PRECISIONS (default "fp32 bf16-mixed").
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
threads=${THREADS:-$(nproc)}
steps=${STEPS:-6}
rounds=${ROUNDS:-3}
precisions=${PRECISIONS:-fp32 bf16-mixed}
shape=(--layers 6 --dim 384 --heads 6 --seq 256 --batch 8 --vocab 50257)
num() { echo "$1" | sed -E "s/.*\"$2\": ([0-9.]+).*/\1/"; }
max() { echo "$1 $2" | awk '{ print ($1 > $2) ? $1 : $2 }'; }

echo "load before: $(uptime)"
declare -A best peak
kernel="" fpt=0
for p in $precisions; do best[cohort-$p]=0 best[pytorch-$p]=0 peak[$p]=0; done
for r in $(seq "$rounds"); do
    for p in $precisions; do
        ours=$("$build/bench/train/bench_train" "${shape[@]}" --steps "$steps" --threads "$threads" \
               --precision "$p")
        echo "round $r: $ours"
        kernel=$(echo "$ours" | sed -E 's/.*"kernel": "([^"]+)".*/\1/')
        fpt=$(num "$ours" flops_per_token)
        key=sgemm_gflops
        [ "$p" = fp32 ] || key=bf16_gemm_gflops
        peak[$p]=$(max "${peak[$p]}" "$(num "$ours" $key)")
        best[cohort-$p]=$(max "${best[cohort-$p]}" "$(num "$ours" tokens_per_s)")
        # The anchor gets the same BLAS fix: PyTorch here calls the system OpenBLAS (libblas.so.3).
        theirs=$(OPENBLAS_CORETYPE=$kernel OPENBLAS_NUM_THREADS=$threads OMP_NUM_THREADS=$threads \
                 /usr/bin/python3 "$root/bench/train/bench_torch.py" "${shape[@]}" --steps "$steps" \
                 --threads "$threads" --precision "$p" \
                 --peak "$(echo "$(num "$ours" $key) * 1000000000" | bc -l)")
        echo "round $r: $theirs"
        best[pytorch-$p]=$(max "${best[pytorch-$p]}" "$(num "$theirs" tokens_per_s)")
    done
done
mfu() { echo "$1 $fpt $2" | awk '{ printf "%.1f%%", 100 * $1 * $2 / ($3 * 1e9) }'; }
ratio() { echo "$1 $2" | awk '{ printf "%.2fx", $1 / $2 }'; }
echo "best of $rounds rounds, $threads threads, OpenBLAS kernel $kernel:"
for p in $precisions; do
    echo "  $p (GEMM peak ${peak[$p]} GFLOP/s):"
    echo "    cohort  tokens/s ${best[cohort-$p]}  mfu $(mfu "${best[cohort-$p]}" "${peak[$p]}")"
    echo "    pytorch tokens/s ${best[pytorch-$p]}  mfu $(mfu "${best[pytorch-$p]}" "${peak[$p]}")"
    echo "    ratio cohort/pytorch: $(ratio "${best[cohort-$p]}" "${best[pytorch-$p]}")"
done
if [ -n "${best[cohort-bf16-mixed]:-}" ] && [ -n "${best[cohort-fp32]:-}" ]; then
    echo "  cohort bf16-mixed / cohort fp32: $(ratio "${best[cohort-bf16-mixed]}" "${best[cohort-fp32]}")"
    echo "  pytorch autocast / pytorch fp32: $(ratio "${best[pytorch-bf16-mixed]}" "${best[pytorch-fp32]}")"
fi
echo "load after: $(uptime)"
