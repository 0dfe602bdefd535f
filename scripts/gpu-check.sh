#!/usr/bin/env bash
# gpu-check.sh: everything a session lent a GPU has to run, in one call of under 8 minutes:
# build cohort with the CUDA backend and NCCL transport (Release), run the GPU tests (each op
# against the CPU backend, 20 training steps cuda vs cpu, the NCCL sweep) and bench/gpu (GPT-2
# 124M bf16-mixed: cohort, llm.c's train_gpt2cu, compiled PyTorch, side by side), with every log
# and a summary in $OUT. A failing step is recorded and the next one runs.
#
# The device machine receives only the repository, so what the script needs from outside it lies
# in the git-ignored folder gpu-assets/ at the repository root, which the session fills before
# the call and carries with it:
#     gpu-assets/llm.c/   the llm.c anchor (train_gpt2.cu, llmc/, Makefile), copied unchanged
#     gpu-assets/data/    wikitext-2/valid.txt and gpt2-bpe/{encoder.json,vocab.bpe}
# Fill it with:  scripts/gpu-check.sh --fill DIR   (DIR: the folder holding anchors/ and data/)
# Run it with:   OUT=/some/dir scripts/gpu-check.sh      (on the device machine: $OUT is set)
# Without a GPU it stops at once with a "no GPU" line (exit 2); GPU_CHECK_BUILD_ONLY=1 then
# builds and stops, to check the script itself.
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
assets="$root/gpu-assets"

if [ "${1:-}" = --fill ]; then
    src=${2:?usage: scripts/gpu-check.sh --fill DIR (DIR holds anchors/llm.c and data/)}
    mkdir -p "$assets/data"
    cp -r "$src/anchors/llm.c" "$assets/" &&
        cp -r "$src/data/wikitext-2" "$src/data/gpt2-bpe" "$assets/data/" &&
        du -sh "$assets" && exit 0
    echo "gpu-check: could not copy the assets from '$src'" >&2
    exit 1
fi

OUT=${OUT:-$root/build/gpu-check-out}
mkdir -p "$OUT"
exec > >(tee "$OUT/gpu-check.log") 2>&1
t_start=$(date +%s)
summary="$OUT/summary.txt"
: >"$summary"
build="$root/build/gpu"
jobs=$(nproc)

# step NAME SECONDS CMD...: runs CMD with set -x into $OUT/NAME.log under a time limit;
# records PASS, FAIL (exit status) or SKIP (77) with its time
# Every step's limit is cut to what is left of GPU_CHECK_BUDGET seconds (default 450: the
# call stays under 8 minutes with the machine's start and the transfers).
budget_end=$(( $(date +%s) + ${GPU_CHECK_BUDGET:-450} ))
step() {
    local name=$1 limit=$2 t0 rc left
    shift 2
    t0=$(date +%s)
    left=$(( budget_end - t0 ))
    if [ "$left" -lt 15 ]; then
        printf '%-16s %-28s %4d s\n' "$name" "SKIP (no time left)" 0 | tee -a "$summary"
        return 77
    fi
    [ "$limit" -gt "$left" ] && limit=$left
    echo "=== $name (limit ${limit} s)"
    timeout --kill-after=10 "$limit" bash -xc '"$@"' _ "$@" >"$OUT/$name.log" 2>&1
    rc=$?
    local what=PASS
    [ $rc -eq 77 ] && what=SKIP
    [ $rc -ne 0 ] && [ $rc -ne 77 ] && what="FAIL (exit $rc$([ $rc -eq 124 ] && echo ', time limit'))"
    printf '%-16s %-28s %4d s\n' "$name" "$what" "$(( $(date +%s) - t0 ))" | tee -a "$summary"
    tail -n 25 "$OUT/$name.log" | sed "s/^/  $name| /"
    return $rc
}

# ---- the GPU ----
if ! nvidia-smi -L >"$OUT/gpu.txt" 2>&1 || ! grep -q '^GPU' "$OUT/gpu.txt"; then
    echo "gpu-check: no GPU here (nvidia-smi: $(head -1 "$OUT/gpu.txt"))"
    [ "${GPU_CHECK_BUILD_ONLY:-}" = 1 ] || exit 2
fi
nvidia-smi >>"$OUT/gpu.txt" 2>&1
gpu_name=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d .)
cc=${cc:-90}
echo "gpu: ${gpu_name:-none} (sm_$cc), $jobs cores; nccl $(ls /usr/local/cuda/lib*/libnccl.so.* 2>/dev/null | head -1)"

# ---- llm.c, built in the background while cohort builds ----
llmc_build() {
    [ -f "$assets/llm.c/train_gpt2.cu" ] || { echo "no llm.c anchor in $assets/llm.c"; return 77; }
    rm -rf "$OUT/llmc-build" && cp -r "$assets/llm.c" "$OUT/llmc-build" &&
        make -C "$OUT/llmc-build" train_gpt2cu NO_MULTI_GPU=1 USE_CUDNN=0 \
            GPU_COMPUTE_CAPABILITY="$cc" -j"$jobs"
}
export -f llmc_build
export assets OUT cc jobs
( step llmc_build 300 llmc_build >/dev/null ) &
llmc_pid=$!

# ---- cohort ----
# NCCL: beside CUDA, else the one in PyTorch's wheel (nvidia/nccl/{include,lib})
nccl_home=
[ -e /usr/local/cuda/include/nccl.h ] ||
    nccl_home=$(python3 -c 'import nvidia.nccl, os; print(list(nvidia.nccl.__path__)[0])' 2>/dev/null)
echo "nccl: ${nccl_home:-beside CUDA}"
step configure 120 cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DCOHORT_WERROR=ON \
    -DCOHORT_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$cc" -DCOHORT_DATA_DIR="$assets/data" \
    ${nccl_home:+-DCOHORT_NCCL_HOME="$nccl_home"}
step build 300 cmake --build "$build" -j"$jobs" --target cohort test_gpu_ops gpu_nccl_rank
[ "${GPU_CHECK_BUILD_ONLY:-}" = 1 ] && { wait $llmc_pid; cat "$summary"; exit 0; }

export COHORT="$build/cohort" COHORT_SOURCE_DIR="$root" COHORT_BUILD_DIR="$build"
export COHORT_REQUIRE_GPU=1 COHORT_GPT2_DIR="$assets/data/gpt2-bpe"
step gpu_ops 120 "$build/test_gpu_ops"
step gpu_train 150 bash "$root/tests/gpu/test_gpu_train.sh"
step gpu_nccl 150 bash "$root/tests/gpu/test_gpu_nccl.sh"

# ---- bench/gpu: GPT-2 124M, bf16-mixed, batch 16 x 1024, on the same shards ----
data="$OUT/bench-data/wt2"
step bench_data 60 bash -c 'mkdir -p "$(dirname "$1")" && "$COHORT" prepare --tokenizer gpt2 \
    --encoder "$2/gpt2-bpe/encoder.json" --merges "$2/gpt2-bpe/vocab.bpe" --documents paragraph --val-fraction 0.05 \
    --out "$1" "$2/wikitext-2/valid.txt"' _ "$data" "$assets/data"
shape=(--layers 12 --heads 12 --dim 768 --vocab 50257 --seq 1024 --batch 16)
step bench_cohort 120 "$COHORT" train "${shape[@]}" --precision bf16-mixed --device cuda \
    --steps 8 --warmup 2 --data "$data"'_train_*.bin' --metrics "$OUT/bench_cohort.jsonl"
wait $llmc_pid
[ -x "$OUT/llmc-build/train_gpt2cu" ] ||
    printf '%-16s %-28s %4d s\n' bench_llmc "SKIP (llm.c did not build)" 0 | tee -a "$summary"
[ -x "$OUT/llmc-build/train_gpt2cu" ] &&
    step bench_llmc 120 bash -c 'cd "$1" && ./train_gpt2cu -i "$2_train_*.bin" -j "$2_val_*.bin" \
        -e d12 -b 16 -t 1024 -x 20 -v 0 -s 0 -h 0' _ "$OUT/llmc-build" "$data"
step bench_torch 180 python3 "$root/bench/gpu/bench_torch_gpu.py" --data "$data"'_train_*.bin' \
    --steps 15

# ---- the figures side by side ----
{
    echo "--- bench/gpu on ${gpu_name:-?}: GPT-2 124M, bf16-mixed, B 16 x T 1024"
    c=$(sed -nE 's/.*"tokens_per_s":([0-9.e+]+).*/\1/p' "$OUT/bench_cohort.jsonl" 2>/dev/null | tail -1)
    l=$(grep -E '^step +[0-9]+/' "$OUT/bench_llmc.log" 2>/dev/null | tail -5 |
        sed -nE 's/.*\| *([0-9.]+) tok\/s.*/\1/p' | sort -n | awk '{a[NR]=$1} END {if (NR) print a[int((NR+1)/2)]}')
    t=$(sed -nE 's/.*, ([0-9.]+) tok\/s$/\1/p' "$OUT/bench_torch.log" 2>/dev/null | tail -1)
    echo "cohort  tok/s ${c:-none}"
    echo "llm.c   tok/s ${l:-none}  (median of its last 5 steps)"
    echo "torch   tok/s ${t:-none}"
    # MFU against the GPU's dense bf16 peak, with llm.c's count of a token's FLOPs:
    # 6 x 124,439,808 parameters + 12 L C T (attention) = 859,885,056
    case "$gpu_name" in
    *H100*PCIe*) peak=756e12 ;; *H100*NVL*) peak=835e12 ;; *H100* | *H200* | *GH200*) peak=989.4e12 ;;
    *A100*) peak=312e12 ;; *) peak=0 ;;
    esac
    echo "peak dense bf16 ${peak} FLOP/s (by the GPU's name; 0: unknown)"
    awk -v c="${c:-0}" -v l="${l:-0}" -v t="${t:-0}" -v peak="$peak" 'BEGIN {
        f = 859885056
        if (peak > 0) printf "MFU: cohort %.1f%%, llm.c %.1f%%, torch %.1f%%\n", 100 * c * f / peak,
                             100 * l * f / peak, 100 * t * f / peak
        if (l > 0 && c > 0) printf "cohort / llm.c %.3f (goal >= 0.9)\n", c / l
        if (t > 0 && c > 0) printf "cohort / torch %.3f (goal >= 1.0)\n", c / t }'
    echo "--- total $(( $(date +%s) - t_start )) s"
} | tee -a "$summary"
echo "=== summary"
cat "$summary"
