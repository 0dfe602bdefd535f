#!/usr/bin/env bash
# test_device_hpu_mps_cli.sh: Gaudi and MPS from the outside: `cohort devices` rows with the
# hpu:N -> module mapping, HABANA_VISIBLE_MODULES errors (exit 2, naming the value), the MPS
# line on machines without it, and `cohort run --bind-devices` giving each local rank its module.
set -u
C=${COHORT:?COHORT must name the cohort binary}
INV=${COHORT_SOURCE_DIR:?}/tests/device/inventories
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
unset CUDA_VISIBLE_DEVICES CUDA_DEVICE_ORDER ZE_AFFINITY_MASK ZE_FLAT_DEVICE_HIERARCHY HIP_VISIBLE_DEVICES \
    ROCR_VISIBLE_DEVICES HABANA_VISIBLE_MODULES COHORT_INVENTORY DISABLE_MPS
export COHORT_LOG=warn COHORT_LOCK_DIR=$T/locks

# has CODE NEEDLE CMD...: CMD exits CODE and its output holds NEEDLE.
has() {
    local code=$1 needle=$2
    shift 2
    "$@" >"$T/out" 2>&1
    local rc=$?
    if [ $rc -ne "$code" ] || ! grep -qF -- "$needle" "$T/out"; then
        fail "$*: exit $rc (want $code), output lacks '$needle': $(cat "$T/out")"
    else
        echo "ok   $* -> $code"
    fi
}

G=$INV/gaudi.json
# Rows: hpu:N, then the module id and hl-smi index behind it.
has 0 "hpu:1            1 (2)  00000000:33:00.0" "$C" devices --inventory "$G"
has 0 "hpu devices (HABANA_VISIBLE_MODULES unset)" "$C" devices --inventory "$G"
has 0 "hpu:0            3 (6)" env HABANA_VISIBLE_MODULES=3,1 "$C" devices --inventory "$G"
has 0 "a child process gets HABANA_VISIBLE_MODULES=3,1" env HABANA_VISIBLE_MODULES=3,1,5 \
    "$C" devices --inventory "$G" --accelerator hpu --devices 2
has 0 '"module_id": 4' "$C" devices --inventory "$G" --json
# The runtime refuses these values, and so does cohort (exit 2, the value named).
has 2 "cohort devices: error: invalid HABANA_VISIBLE_MODULES='1,1': entry 2 repeats module 1" \
    env HABANA_VISIBLE_MODULES=1,1 "$C" devices --inventory "$G"
has 2 "entry 1 '8' is not a module id of this machine (module ids here: 0,1,2,3,4,5,6,7)" \
    env HABANA_VISIBLE_MODULES=8 "$C" devices --inventory "$G"
has 2 "invalid HABANA_VISIBLE_MODULES='': it is empty" \
    env HABANA_VISIBLE_MODULES= "$C" devices --inventory "$G"
# ... but only where there are Gaudi modules: a CUDA machine ignores the variable.
has 0 "cuda:3" env HABANA_VISIBLE_MODULES=oops "$C" devices --inventory "$INV/four_a100.json"
has 2 "invalid device spec '[1]' for accelerator hpu" "$C" devices --inventory "$G" \
    --accelerator hpu --devices '[1]'

# MPS: one row on a Mac; elsewhere a line for auto, an error (exit 1) for --accelerator mps.
has 0 "mps:0" "$C" devices --inventory "$INV/mac.json"
has 0 "a child process needs no variable (mps has one device)" "$C" devices \
    --inventory "$INV/mac.json" --accelerator gpu
has 0 "mps: none (Apple MPS exists only on macOS on Apple silicon)" "$C" devices \
    --inventory "$INV/four_a100.json"
has 1 "no mps device: Apple MPS exists only on macOS on Apple silicon" "$C" devices \
    --inventory "$INV/four_a100.json" --accelerator mps
grep -qF "cohort devices: error: " "$T/out" || fail "--accelerator mps without MPS: no error line"

# --bind-devices: every rank gets the same module list; LOCAL_RANK N takes the N-th.
out=$(HABANA_VISIBLE_MODULES=6,2,4 COHORT_INVENTORY=$G "$C" run --prefix '' \
    --accelerator hpu --devices 2 --bind-devices \
    sh -c 'echo "$LOCAL_RANK:$HABANA_VISIBLE_MODULES"' | sort | tr '\n' ' ')
[ "$out" = "0:6,2 1:6,2 " ] || fail "hpu --bind-devices: got '$out', want '0:6,2 1:6,2 '"
# Each rank's module by Habana's rule: position LOCAL_RANK of the list.
out=$(COHORT_INVENTORY=$G "$C" run --prefix '' --accelerator hpu --devices 3 --bind-devices \
    sh -c 'IFS=,; set -- $HABANA_VISIBLE_MODULES; shift $LOCAL_RANK; echo "$LOCAL_RANK=$1"' |
    sort | tr '\n' ' ')
[ "$out" = "0=0 1=1 2=2 " ] || fail "hpu ranks' modules: got '$out'"
has 2 "invalid HABANA_VISIBLE_MODULES='0,0'" env HABANA_VISIBLE_MODULES=0,0 \
    COHORT_INVENTORY="$G" "$C" run --accelerator hpu --bind-devices true
# Habana wants one process per listed module: another -n is refused before anything starts.
has 2 "invalid --nproc-per-node '3' with --accelerator hpu: 2 module(s) selected and Gaudi runs one process per module; drop -n, give -n 2, or select 3 modules with --devices" \
    env COHORT_INVENTORY="$G" "$C" run -n 3 --accelerator hpu --devices 2 sh -c "touch $T/started"
[ ! -e "$T/started" ] || fail "the refused hpu job started a worker"
out=$(COHORT_INVENTORY=$G "$C" run --prefix '' -n 2 --accelerator hpu --devices 2 \
    sh -c 'echo "$HABANA_VISIBLE_MODULES"' | sort -u)
[ "$out" = "0,1" ] || fail "hpu job without --bind-devices: every rank should see '0,1', got '$out'"
# MPS: one process, no variable to set.
out=$(COHORT_INVENTORY=$INV/mac.json "$C" run --prefix '' --accelerator mps --bind-devices \
    sh -c 'echo "$RANK:${CUDA_VISIBLE_DEVICES-unset}"')
[ "$out" = "0:unset" ] || fail "mps --bind-devices: got '$out'"

# pick: module ids for HABANA_VISIBLE_MODULES (module 4 has a process on it: skipped); MPS runs
# the command with nothing to set.
has 0 "7,1" env HABANA_VISIBLE_MODULES=7,4,1 COHORT_INVENTORY="$G" "$C" pick 2 --accelerator hpu -q
[ "$(cat "$T/out")" = "7,1" ] || fail "pick hpu printed '$(cat "$T/out")'"
has 0 "cohort pick: running true (mps needs no variable)" env COHORT_INVENTORY="$INV/mac.json" \
    "$C" pick 1 --accelerator mps -- true
# Without a command there is no value to print for mps: an empty line would read as "no GPU".
has 2 "nothing to print for accelerator mps: it has one device and no visibility variable" \
    env COHORT_INVENTORY="$INV/mac.json" "$C" pick 1 --accelerator mps
# HABANA_VISIBLE_MODULES and ZE_AFFINITY_MASK take no uuids.
has 2 "invalid --format 'uuid' for accelerator hpu: HABANA_VISIBLE_MODULES takes module ids, not uuids" \
    env COHORT_INVENTORY="$G" "$C" pick 1 --accelerator hpu --format uuid
has 2 "invalid --format 'uuid' for accelerator xpu: ZE_AFFINITY_MASK takes device indices (0, 0.1), not uuids" \
    env COHORT_INVENTORY="$INV/intel.json" "$C" pick 2 --accelerator xpu --format uuid

[ $failures -eq 0 ] || exit 1
echo "all passed"
