#!/usr/bin/env bash
# test_plan_inventory_schema.sh: one inventory schema for every command: a file that `cohort
# devices --inventory` refuses (an unknown key, a missing vendor, a duplicate uuid, an
# impossible MIG layout, a bad link, a missing file) is refused by `cohort plan` and `cohort
# estimate` too, with the same message and exit code 2; a valid one is read by all three.
set -u
: "${COHORT:?}" "${COHORT_SOURCE_DIR:?}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
unset COHORT_INVENTORY CUDA_VISIBLE_DEVICES
corpus=$COHORT_SOURCE_DIR/tests/fuzz/corpus/inventory

# The error of `cohort CMD ... --inventory FILE`, less its "cohort CMD: error: " prefix, in
# $tmp/msg; its exit code in $rc.
refusal() {
    local cmd=$1
    shift
    "$COHORT" "$cmd" "$@" >"$tmp/out" 2>&1
    rc=$?
    sed -n "s/^cohort $cmd: error: //p" "$tmp/out" >"$tmp/msg"
}

# refused_alike FILE NEEDLE: devices, plan and estimate all exit 2 with one message holding
# NEEDLE.
refused_alike() {
    local file=$1 needle=$2 want=""
    local -A args=([devices]="" [plan]="--model gpt2 --global-batch 8"
                   [estimate]="--model gpt2")
    for cmd in devices plan estimate; do
        # shellcheck disable=SC2086 # the arguments are words
        refusal "$cmd" ${args[$cmd]} --inventory "$file"
        local msg
        msg=$(cat "$tmp/msg")
        if [ "$rc" -ne 2 ] || ! grep -qF -- "$needle" "$tmp/msg"; then
            echo "FAIL: cohort $cmd --inventory $file -> exit $rc (want 2), error lacks '$needle':"
            sed 's/^/    /' "$tmp/out"
            fail=1
        elif [ -n "$want" ] && [ "$msg" != "$want" ]; then
            echo "FAIL: cohort $cmd says '$msg', cohort devices '$want'"
            fail=1
        else
            echo "ok   $cmd $(basename "$file") -> 2: $msg"
        fi
        [ -n "$want" ] || want=$msg
    done
}

gpu() { # gpu N NAME MIB: an entry of the documented schema
    printf '{"vendor":"nvidia","name":"%s","uuid":"GPU-%s","memory_total_mib":%s}' "$2" "$1" "$3"
}
a100=$(gpu 0 "NVIDIA A100-SXM4-80GB" 81920)

# The shapes the planner's own reader once took: an "index" key, no vendor or uuid.
printf '{"gpus":[{"index":0,"name":"NVIDIA A100-SXM4-80GB","memory_total_mib":16384}]}' \
    >"$tmp/index.json"
refused_alike "$tmp/index.json" "$tmp/index.json: gpus[0]: unknown key 'index'"
printf '{"gpus":[{"name":"NVIDIA A100-SXM4-80GB","memory_total_mib":81920}]}' >"$tmp/novendor.json"
refused_alike "$tmp/novendor.json" "$tmp/novendor.json: gpus[0].vendor: missing"
printf '{"gpus":[%s,%s]}' "$a100" "$a100" >"$tmp/dup.json"
refused_alike "$tmp/dup.json" "$tmp/dup.json: gpus[1].uuid: 'GPU-0' is also the uuid of gpus[0]"
refused_alike "$corpus/mig_same_instance_pair.json" \
    "gpus[0].mig[1].compute_instance: 0 with gpu_instance 1 is also gpus[0].mig[0]"
refused_alike "$corpus/mig_instances_exceed_gpu.json" "more than their GPU's memory_total_mib"
printf '{"gpus":[%s,%s]}' "$a100" '{"vendor":"nvidia","name":"x","uuid":"GPU-1",
  "memory_total_mib":"80GB"}' >"$tmp/badmem.json"
refused_alike "$tmp/badmem.json" \
    "$tmp/badmem.json: gpus[1].memory_total_mib: '80GB' is not an integer from 1 to"
refused_alike "$corpus/links_zero_bandwidth.json" \
    "links.inter_node.gbytes_per_s: 0 is not a number from 1e-06 to 1e+06"
refused_alike "$corpus/links_unknown_key.json" "links: unknown key 'inter'"
refused_alike "$tmp/missing.json" "cannot open inventory file '$tmp/missing.json'"

# A valid file is read by all three, links included.
printf '{"gpus":[%s],"links":{"intra_node":{"gbytes_per_s":123,"latency_us":3}}}' "$a100" \
    >"$tmp/good.json"
for run in "devices" "plan --model gpt2 --global-batch 8" "estimate --model gpt2"; do
    # shellcheck disable=SC2086 # the command and its arguments are words
    if "$COHORT" $run --inventory "$tmp/good.json" >"$tmp/out" 2>&1; then
        echo "ok   $run reads a valid inventory"
    else
        echo "FAIL: cohort $run --inventory good.json:"
        sed 's/^/    /' "$tmp/out"
        fail=1
    fi
done
grep -q "intra-node 123 GB/s" <("$COHORT" plan --model gpt2 --global-batch 8 \
    --inventory "$tmp/good.json" 2>&1) || { echo "FAIL: plan did not price the file's link"; fail=1; }
exit $fail
