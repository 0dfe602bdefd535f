#!/usr/bin/env bash
# test_gpu_nccl.sh: the NCCL transport on device memory: the comm sweep (every collective x type
# x size class, checked on the host) at 1 rank, and at 2 ranks with a rank killed mid-job when
# the machine has 2 GPUs (NCCL 2.28 refuses two ranks on one GPU). Skipped by name otherwise.
set -u
cohort=${COHORT:?}
build=${COHORT_BUILD_DIR:?}
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
skips=0
skip() { echo "SKIP $1: $2"; skips=$((skips + 1)); }
ranks() { # N ARGS...: the driver on N ranks of one job
    local n=$1
    shift
    timeout 120 "$cohort" run --standalone --nproc-per-node "$n" --prefix '' -- \
        "$build/gpu_nccl_rank" "$@"
}

ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
if [ ! -e "$build/libcohort_nccl.so" ]; then
    if [ "${COHORT_REQUIRE_GPU:-}" = 1 ]; then fail "this build has no NCCL transport"
    else skip nccl "this build has no NCCL transport (configure with -DCOHORT_CUDA=ON)"; fi
elif [ "${ngpu:-0}" -lt 1 ]; then
    if [ "${COHORT_REQUIRE_GPU:-}" = 1 ]; then fail "a GPU was required: nvidia-smi lists none"
    else skip nccl "no GPU here (nvidia-smi lists none)"; fi
else
    out=$(ranks 1 sweep 2>&1) && echo "$out" | grep -q "0 wrong" ||
        fail "1-rank nccl sweep: $out"
    echo "$out" | grep "nccl cases"
    if [ "$ngpu" -lt 2 ]; then
        skip nccl_2ranks "one GPU: NCCL refuses two ranks on one GPU before 2.30 (NCCL_MULTI_RANK_GPU_ENABLE); the multi-rank logic runs on the host transports (tests/comm)"
    else
        out=$(ranks 2 sweep 2>&1) && [ "$(echo "$out" | grep -c " 0 wrong")" -eq 2 ] ||
            fail "2-rank nccl sweep: $out"
        echo "$out" | grep "nccl cases"
        start=$(date +%s)
        out=$(COHORT_COMM_TIMEOUT=15 ranks 2 kill 2>&1)
        took=$(( $(date +%s) - start ))
        echo "$out" | grep -q "rank 0: all-reduce with a dead peer returned '\(peer lost\|timeout\)" ||
            fail "the survivor of a killed rank did not end with an error: $out"
        echo "killed rank: the job ended after ${took} s"
    fi
fi
[ $fails -eq 0 ] || exit 1
[ $skips -eq 0 ] || exit 77
echo "ok"
