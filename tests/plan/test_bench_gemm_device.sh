#!/usr/bin/env bash
# test_bench_gemm_device.sh: `cohort bench gemm --device NAME` times products through the
# engine's backend table: on the cpu-guarded test device (the CPU's kernels behind the device
# checks) every square and layer shape gets a row with a positive time and rate, and the stream
# and op-overhead line; the refusals name the bad value (an unknown device, --out for a device
# without a GPU preset, the CPU's flags with --device) and exit 2; cuda in a build or on a
# machine without it fails with the reason (exit 1), unless this machine has a GPU, where the
# GPU's file is written and reads back through `cohort plan --calibration`.
set -u
cohort=${COHORT:?}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
expect() { # CODE MESSAGE COMMAND...
    local code=$1 msg=$2 out rc
    shift 2
    out=$("$@" 2>&1)
    rc=$?
    [ $rc -eq "$code" ] && echo "$out" | grep -qF -- "$msg" || fail "$*: rc $rc (want $code), output: $out"
}

out=$("$cohort" bench gemm --device cpu-guarded --quick 2>&1) || fail "cpu-guarded --quick: $out"
echo "$out"
echo "$out" | grep -q "^# cohort bench gemm --device cpu-guarded: this machine's CPU" ||
    fail "no header naming the device"
# quick: the squares 64, 128, 256 (n to 1024 without --quick), each a row with positive milliseconds and TFLOP/s
for d in 64 128 256; do
    echo "$out" | awk -v d="$d" -v m=$((4 * d)) '$1 == "square" && $2 == d && $3 == m && $4 == d &&
        $5 == d && $6 > 0 && $7 > 0 { found = 1 } END { exit !found }' ||
        fail "no row with a positive time and rate for square $d"
done
echo "$out" | grep -qE "^# elementwise stream [0-9.]+ GB/s .* one small op [0-9.]+ us" ||
    fail "no stream and op-overhead line"
# and the layer shapes (GPT-2's and a tp 2 shard's) and the head, padded and not
for s in "gpt2-124m t1 qkv" "3.6b t2 fc2" "gpt2-124m lm head" "lm head v50304"; do
    echo "$out" | grep -q "^$s " || fail "no row for '$s'"
done

expect 2 "invalid device 'tpu'" "$cohort" bench gemm --device tpu
expect 2 "--out with --device cpu-guarded" "$cohort" bench gemm --device cpu-guarded --out "$tmp/x.json"
[ -e "$tmp/x.json" ] && fail "a refused --out wrote its file"
expect 2 "not with --device cpu-guarded" "$cohort" bench gemm --device cpu-guarded --threads-max 1

if nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
    "$cohort" bench gemm --device cuda --quick --out "$tmp/gpu.json" >"$tmp/gpu.out" 2>&1 ||
        fail "cuda: $(tail -3 "$tmp/gpu.out")"
    "$cohort" plan --layers 4 --dim 128 --heads 4 --vocab 256 --seq 64 --global-batch 8 \
        --devices 2 --calibration "$tmp/gpu.json" >"$tmp/plan.out" 2>&1 ||
        fail "plan on the GPU's file: $(tail -3 "$tmp/plan.out")"
else
    out=$("$cohort" bench gemm --device cuda 2>&1)
    rc=$?
    [ $rc -eq 1 ] && echo "$out" | grep -qE "no CUDA backend|CUDA backend is unavailable|no CUDA device" ||
        fail "cuda without a GPU: rc $rc, $out"
fi
[ $fails -eq 0 ] && echo ok
exit $((fails > 0))
