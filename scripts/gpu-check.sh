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
#     gpu-assets/bin/     (optional) cohort, its plug-ins and the GPU test programs built here,
#                         with gpu-assets/libs.tar.xz the libraries they need beyond the C and
#                         CUDA runtimes: the device machine then builds nothing but llm.c (it
#                         may lack OpenBLAS and oneDNN, and it cannot install them)
# Fill it with:  scripts/gpu-check.sh --fill DIR   (DIR: the folder holding anchors/ and data/)
# Stage a build: scripts/gpu-check.sh --stage      (builds build/gpu here, copies it in)
# Run it with:   OUT=/some/dir scripts/gpu-check.sh      (on the device machine: $OUT is set)
# Without a GPU it stops at once with a "no GPU" line (exit 2); GPU_CHECK_BUILD_ONLY=1 then
# builds and stops, to check the script itself. $OUT receives at most 8 files: the log, the
# summary, the GPU calibration file and logs.tar.gz with every step's log.
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

if [ "${1:-}" = --stage ]; then
    b="$root/build/gpu"
    cmake -S "$root" -B "$b" -DCMAKE_BUILD_TYPE=Release -DCOHORT_WERROR=ON -DCOHORT_CUDA=ON \
        -DCMAKE_CUDA_ARCHITECTURES=90 >/dev/null &&
        cmake --build "$b" -j"$(nproc)" --target cohort test_gpu_ops gpu_nccl_rank >/dev/null ||
        { echo "gpu-check: the CUDA build failed" >&2; exit 1; }
    rm -rf "$assets/bin" "$assets/libs" && mkdir -p "$assets/bin" "$assets/libs" || exit 1
    cp "$b"/cohort "$b"/libcohort_cuda.so "$b"/libcohort_nccl.so "$b"/test_gpu_ops \
        "$b"/gpu_nccl_rank "$assets/bin/" || exit 1
    # every library they load from outside the C runtime, CUDA and NCCL (the machine's own)
    ldd "$assets"/bin/* | awk '$3 ~ /^\// {print $3}' | sort -u |
        grep -Ev '/(libc|libm|libdl|librt|libpthread|libstdc\+\+|libgcc_s|ld-linux[^/]*|libcu[A-Za-z]*|libnccl)\.so' |
        while read -r lib; do cp -L "$lib" "$assets/libs/"; done
    tar -C "$assets/libs" -cf - . | xz -6 -T0 >"$assets/libs.tar.xz" && rm -rf "$assets/libs" &&
        du -sh "$assets" && exit 0
    exit 1
fi

OUT=${OUT:-$root/build/gpu-check-out}
mkdir -p "$OUT"
# the step logs and work files live here; $OUT gets the few files that come back
LOGS=$(mktemp -d /tmp/gpu-check.XXXXXX)
exec > >(tee "$OUT/gpu-check.log") 2>&1
t_start=$(date +%s)
summary="$OUT/summary.txt"
: >"$summary"
build="$root/build/gpu"
jobs=$(nproc)

# step NAME SECONDS CMD...: runs CMD with set -x into $OUT/NAME.log under a time limit;
# records PASS, FAIL (exit status) or SKIP (77) with its time
# Every step's limit is cut to what is left of GPU_CHECK_BUDGET seconds (default 450: the
# call stays under 8 minutes with the machine's start and the transfers). GPU_CHECK_STEPS, a
# regular expression of step names (bench_.*|llmc_build), runs only those.
budget_end=$(( $(date +%s) + ${GPU_CHECK_BUDGET:-450} ))
step() {
    local name=$1 limit=$2 t0 rc left
    shift 2
    t0=$(date +%s)
    if [ -n "${GPU_CHECK_STEPS:-}" ] && ! [[ $name =~ ^($GPU_CHECK_STEPS)$ ]]; then
        printf '%-16s %-28s %4d s\n' "$name" "SKIP (not in GPU_CHECK_STEPS)" 0 >>"$summary"
        return 77
    fi
    left=$(( budget_end - t0 ))
    if [ "$left" -lt 15 ]; then
        printf '%-16s %-28s %4d s\n' "$name" "SKIP (no time left)" 0 | tee -a "$summary"
        return 77
    fi
    [ "$limit" -gt "$left" ] && limit=$left
    echo "=== $name (limit ${limit} s)"
    timeout --kill-after=10 "$limit" bash -xc '"$@"' _ "$@" >"$LOGS/$name.log" 2>&1
    rc=$?
    local what=PASS
    [ $rc -eq 77 ] && what=SKIP
    [ $rc -ne 0 ] && [ $rc -ne 77 ] && what="FAIL (exit $rc$([ $rc -eq 124 ] && echo ', time limit'))"
    printf '%-16s %-28s %4d s\n' "$name" "$what" "$(( $(date +%s) - t0 ))" | tee -a "$summary"
    tail -n 25 "$LOGS/$name.log" | sed "s/^/  $name| /"
    return $rc
}

# ---- the GPU ----
if ! nvidia-smi -L >"$LOGS/gpu.txt" 2>&1 || ! grep -q '^GPU' "$LOGS/gpu.txt"; then
    echo "gpu-check: no GPU here (nvidia-smi: $(head -1 "$LOGS/gpu.txt"))"
    [ "${GPU_CHECK_BUILD_ONLY:-}" = 1 ] || exit 2
fi
nvidia-smi >>"$LOGS/gpu.txt" 2>&1
gpu_name=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d .)
cc=${cc:-90}
echo "gpu: ${gpu_name:-none} (sm_$cc), $jobs cores; nccl $(ls /usr/local/cuda/lib*/libnccl.so.* 2>/dev/null | head -1)"

# ---- llm.c, built in the background while cohort builds ----
# llm.c links NVML by the unversioned name, which a driver-only machine lacks: a folder with
# that name pointing at the driver's libnvidia-ml.so.1
llmc_build() {
    [ -f "$assets/llm.c/train_gpt2.cu" ] || { echo "no llm.c anchor in $assets/llm.c"; return 77; }
    local nvml
    nvml=$(ldconfig -p 2>/dev/null | awk '/libnvidia-ml\.so\.1 /{print $NF; exit}')
    [ -n "$nvml" ] || nvml=$(find / -name 'libnvidia-ml.so.1' 2>/dev/null | head -1)
    mkdir -p "$LOGS/nvml" && [ -n "$nvml" ] && ln -sf "$nvml" "$LOGS/nvml/libnvidia-ml.so"
    rm -rf "$LOGS/llmc-build" && cp -r "$assets/llm.c" "$LOGS/llmc-build" &&
        make -C "$LOGS/llmc-build" train_gpt2cu NO_MULTI_GPU=1 USE_CUDNN=0 NO_USE_MPI=1 \
            NVCC_LDFLAGS="-lcublas -lcublasLt -L$LOGS/nvml -L/usr/local/cuda/lib64/stubs -lnvidia-ml" \
            GPU_COMPUTE_CAPABILITY="$cc" -j"$jobs"
}
export -f llmc_build
export assets OUT LOGS cc jobs
( step llmc_build 300 llmc_build >/dev/null ) &
llmc_pid=$!

# ---- cohort ----
# NCCL: beside CUDA, else the one in PyTorch's wheel (nvidia/nccl/{include,lib})
nccl_home=
[ -e /usr/local/cuda/include/nccl.h ] ||
    nccl_home=$(python3 -c 'import nvidia.nccl, os; print(list(nvidia.nccl.__path__)[0])' 2>/dev/null)
echo "nccl: ${nccl_home:-beside CUDA}"
if [ -x "$assets/bin/cohort" ] && [ -f "$assets/libs.tar.xz" ]; then
    # the build staged on the development machine, with its libraries; the CUDA runtime, cuBLAS
    # and NCCL are this machine's own
    build="$assets/bin"
    mkdir -p "$LOGS/libs" && tar -C "$LOGS/libs" -xJf "$assets/libs.tar.xz"
    ncclpy=$(python3 -c 'import nvidia.nccl, os; print(list(nvidia.nccl.__path__)[0])' 2>/dev/null)
    cudapy=$(python3 -c 'import nvidia.cu13, os; print(list(nvidia.cu13.__path__)[0])' 2>/dev/null)
    export LD_LIBRARY_PATH="$LOGS/libs:/usr/local/cuda/lib64:/usr/local/cuda/lib${ncclpy:+:$ncclpy/lib}${cudapy:+:$cudapy/lib}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    echo "staged build: $build; LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
    step libraries 30 bash -c 'ldd "$1"/* | grep -B1000 "not found" || true; ! ldd "$1"/* | grep -q "not found"' _ "$build"
else
    step configure 120 cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DCOHORT_WERROR=ON \
        -DCOHORT_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$cc" -DCOHORT_DATA_DIR="$assets/data" \
        ${nccl_home:+-DCOHORT_NCCL_HOME="$nccl_home"}
    step build 300 cmake --build "$build" -j"$jobs" --target cohort test_gpu_ops gpu_nccl_rank
fi
[ "${GPU_CHECK_BUILD_ONLY:-}" = 1 ] && { wait $llmc_pid; cat "$summary"; exit 0; }

export COHORT="$build/cohort" COHORT_SOURCE_DIR="$root" COHORT_BUILD_DIR="$build"
export COHORT_REQUIRE_GPU=1 COHORT_GPT2_DIR="$assets/data/gpt2-bpe"
step gpu_ops 120 "$build/test_gpu_ops"
# the GEMM curve and layer shapes against the planner's price, and the calibration file
step bench_gemm 120 "$COHORT" bench gemm --device cuda --out "$OUT/gpu-calibration.json"
cp "$LOGS/bench_gemm.log" "$OUT/bench_gemm.txt" 2>/dev/null
step gpu_train 150 bash "$root/tests/gpu/test_gpu_train.sh"
step gpu_nccl 150 bash "$root/tests/gpu/test_gpu_nccl.sh"

# ---- bench/gpu: GPT-2 124M, bf16-mixed, batch 16 x 1024, on the same shards ----
data="$LOGS/bench-data/wt2"
step bench_data 60 bash -c 'mkdir -p "$(dirname "$1")" && "$COHORT" prepare --tokenizer gpt2 \
    --encoder "$2/gpt2-bpe/encoder.json" --merges "$2/gpt2-bpe/vocab.bpe" --documents paragraph --val-fraction 0.1 \
    --out "$1" "$2/wikitext-2/valid.txt"' _ "$data" "$assets/data"
shape=(--layers 12 --heads 12 --dim 768 --vocab 50257 --seq 1024 --batch 16)
step bench_cohort 120 "$COHORT" train "${shape[@]}" --precision bf16-mixed --device cuda \
    --steps 8 --warmup 2 --data "$data"'_train_*.bin' --metrics "$LOGS/bench_cohort.jsonl"
# where the CUDA engine's step goes: the same tokens at a quarter of the sequence (attention's
# share), and a small bf16-mixed model's allocator peak on the GPU against the CPU's
step cohort_probe 90 bash -c '"$COHORT" train "${@:2}" --seq 256 --batch 64 --precision bf16-mixed \
    --device cuda --steps 4 --warmup 1 --data "$1" 2>&1 | grep -E "^step 4|done:";
    for d in cpu cuda; do "$COHORT" train --layers 2 --heads 4 --dim 256 --vocab 50257 --seq 256 \
        --batch 8 --precision bf16-mixed --device $d --steps 2 --data "$1" 2>&1 | grep -E "done:|predicted per rank"; done' \
    _ "$data"'_train_*.bin' --layers 12 --heads 12 --dim 768 --vocab 50257
wait $llmc_pid
[ -x "$LOGS/llmc-build/train_gpt2cu" ] ||
    printf '%-16s %-28s %4d s\n' bench_llmc "SKIP (llm.c did not build)" 0 | tee -a "$summary"
[ -x "$LOGS/llmc-build/train_gpt2cu" ] &&
    step bench_llmc 120 bash -c 'cd "$1" && ./train_gpt2cu -i "$2_train_*.bin" -j "$2_val_*.bin" \
        -e d12 -b 16 -t 1024 -x 20 -v 100 -m 2 -s 0 -h 0' _ "$LOGS/llmc-build" "$data"
step bench_torch 180 env -u LD_LIBRARY_PATH python3 "$root/bench/gpu/bench_torch_gpu.py" --data "$data"'_train_*.bin' \
    --steps 15

# ---- this machine's CPU (a Xeon with AMX on the machines lent so far): the bf16-mixed
# equivalence and memory tests on oneDNN's native kernels, which a development machine without
# AVX-512 replaces by widened fp32 products; then the equivalence tests again with oneDNN held to
# AVX512-BF16 (the kernels of an AMD EPYC without AMX, where a 30-step bound once failed). Python
# without the staged libraries, cohort through a wrapper that has them ----
mkdir -p "$LOGS/wrap"
printf '#!/bin/sh\nLD_LIBRARY_PATH="%s" exec "%s" "$@"\n' "$LD_LIBRARY_PATH" "$COHORT" >"$LOGS/wrap/cohort"
chmod +x "$LOGS/wrap/cohort"
for t in parallel/test_parallel_bf16_mesh parallel/test_parallel_bf16 plan/test_plan_engine_bf16; do
    step "cpu_${t##*/test_}" 150 env -u LD_LIBRARY_PATH COHORT="$LOGS/wrap/cohort" COHORT_PYTHON=python3 \
        bash "$root/tests/$t.sh"
done
for t in parallel/test_parallel_bf16_mesh parallel/test_parallel_bf16; do
    step "cpu_avx512bf16_${t##*/test_}" 150 env -u LD_LIBRARY_PATH ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16 \
        COHORT="$LOGS/wrap/cohort" COHORT_PYTHON=python3 bash "$root/tests/$t.sh"
done
# the bf16 mesh test's 30-step bounds are statistical: their figures over 12 seeds on both kernel
# sets, and how many seeds would break them (tests/parallel/bf16_mesh_drift.sh)
step cpu_drift 60 env -u LD_LIBRARY_PATH COHORT="$LOGS/wrap/cohort" COHORT_PYTHON=python3 \
    bash "$root/tests/parallel/bf16_mesh_drift.sh" 1 12
step cpu_avx512bf16_drift 60 env -u LD_LIBRARY_PATH ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16 \
    COHORT="$LOGS/wrap/cohort" COHORT_PYTHON=python3 bash "$root/tests/parallel/bf16_mesh_drift.sh" 1 12

# ---- a probe the session brings (gpu-assets/probe/run.sh), if any ----
[ -x "$assets/probe/run.sh" ] && step probe 300 env -u LD_LIBRARY_PATH COHORT="$LOGS/wrap/cohort" \
    COHORT_PYTHON=python3 "$assets/probe/run.sh"

# ---- the figures side by side ----
{
    echo "--- bench/gpu on ${gpu_name:-?}: GPT-2 124M, bf16-mixed, B 16 x T 1024"
    c=$(sed -nE 's/.*"tokens_per_s":([0-9.e+]+).*/\1/p' "$LOGS/bench_cohort.jsonl" 2>/dev/null | tail -1)
    l=$(grep -E '^step +[0-9]+/' "$LOGS/bench_llmc.log" 2>/dev/null | tail -5 |
        sed -nE 's/.*\| *([0-9.]+) tok\/s.*/\1/p' | sort -n | awk '{a[NR]=$1} END {if (NR) print a[int((NR+1)/2)]}')
    t=$(sed -nE 's/.*, ([0-9.]+) tok\/s$/\1/p' "$LOGS/bench_torch.log" 2>/dev/null | tail -1)
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
rm -rf "$LOGS/llmc-build" "$LOGS/libs" "$LOGS/bench-data" "$LOGS/nvml"
tar -C "$LOGS" -czf "$OUT/logs.tar.gz" . && rm -rf "$LOGS"
