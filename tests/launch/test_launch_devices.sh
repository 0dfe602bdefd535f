#!/usr/bin/env bash
# test_launch_devices.sh: cohort run's device selection on fake machines (inventory files):
# the job sees only the chosen devices (CUDA_VISIBLE_DEVICES, ZE_AFFINITY_MASK,
# HIP_VISIBLE_DEVICES), --bind-devices gives each rank its own, --nproc-per-node gpu|auto count
# the visible devices, --pick reserves devices so two jobs at once never share one, and bad
# device options fail with exit 2 before any worker starts.
set -u
C=${COHORT:?COHORT must name the cohort binary}
INV=${COHORT_SOURCE_DIR:?}/tests/device/inventories
T=$(mktemp -d)
trap 'kill -9 $(jobs -p) 2>/dev/null; rm -rf "$T"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
export COHORT_LOG=warn COHORT_LOCK_DIR=$T/locks
unset CUDA_VISIBLE_DEVICES CUDA_DEVICE_ORDER ZE_AFFINITY_MASK ZE_FLAT_DEVICE_HIERARCHY HIP_VISIBLE_DEVICES ROCR_VISIBLE_DEVICES

# run_env INVENTORY VAR ARGS...: "rank=value" of VAR for every rank, sorted, space-separated.
run_env() {
    local inv=$1 var=$2
    shift 2
    COHORT_INVENTORY=$INV/$inv "$C" run --prefix '' "$@" sh -c 'echo "$RANK=${'"$var"'-unset}"' | sort | tr '\n' ' '
}
expect() { [ "$2" = "$3" ] || fail "$1: got '$2', expected '$3'"; }

expect "-n gpu" "$(run_env four_a100.json CUDA_VISIBLE_DEVICES -n gpu)" "0=0,1,2,3 1=0,1,2,3 2=0,1,2,3 3=0,1,2,3 "
expect "-n auto" "$(run_env four_a100.json CUDA_VISIBLE_DEVICES -n auto)" "0=0,1,2,3 1=0,1,2,3 2=0,1,2,3 3=0,1,2,3 "
expect "--devices 2" "$(run_env four_a100.json CUDA_VISIBLE_DEVICES --devices 2)" "0=0,1 1=0,1 "
expect "--devices 1,3" "$(run_env four_a100.json CUDA_VISIBLE_DEVICES --devices 1,3)" "0=1,3 1=1,3 "
expect "--devices 3,1 --bind-devices" "$(run_env four_a100.json CUDA_VISIBLE_DEVICES --devices 3,1 --bind-devices)" "0=3 1=1 "
# An explicit process count with a device list: the count wins, the job sees the list.
expect "-n 3 --devices 0,2" "$(run_env four_a100.json CUDA_VISIBLE_DEVICES -n 3 --devices 0,2)" "0=0,2 1=0,2 2=0,2 "
# Inherited visibility is respected: with CUDA_VISIBLE_DEVICES=2,0, logical 1 is physical 0.
expect "CUDA_VISIBLE_DEVICES=2,0 --devices 1," "$(CUDA_VISIBLE_DEVICES=2,0 run_env four_a100.json CUDA_VISIBLE_DEVICES --devices 1,)" "0=0 "
# Intel and AMD devices.
expect "xpu bound" "$(run_env intel.json ZE_AFFINITY_MASK --accelerator xpu --devices 2 --bind-devices)" "0=0 1=1 "
expect "rocm auto" "$(run_env amd.json HIP_VISIBLE_DEVICES --accelerator rocm -n 2 --devices 0,1)" "0=0,1 1=0,1 "
# cpu: no visibility variable, one process per available core of the inventory's cpu.
out=$(COHORT_INVENTORY=$INV/four_a100.json "$C" run --prefix '' --accelerator cpu --devices 3 sh -c 'echo "$RANK=${CUDA_VISIBLE_DEVICES-unset}"' | sort | tr '\n' ' ')
expect "--accelerator cpu --devices 3" "$out" "0=unset 1=unset 2=unset "

# --pick: two jobs at once get disjoint devices, held while they run. The first job runs until
# told (at most 120 s), whatever the load: the checks below need its devices held.
COHORT_INVENTORY=$INV/four_a100.json "$C" run --prefix '' --pick 2 sh -c \
    'echo "$CUDA_VISIBLE_DEVICES" > '"$T"'/a.$RANK; i=0; while [ ! -e '"$T"'/b.done ] && [ $i -lt 2400 ]; do sleep 0.05; i=$((i+1)); done' &
a=$!
for _ in $(seq 2000); do [ -s "$T/a.0" ] && [ -s "$T/a.1" ] && break; sleep 0.05; done
COHORT_INVENTORY=$INV/four_a100.json "$C" run --prefix '' --pick 2 sh -c 'echo "$CUDA_VISIBLE_DEVICES"' >"$T/b" || fail "second --pick job failed"
# While the first job holds 2 of the 4, a job wanting 3 cannot start (and starts nothing).
rm -f "$T/started"
COHORT_INVENTORY=$INV/four_a100.json "$C" run --pick 3 sh -c "touch $T/started" 2>"$T/e3"
rc=$?
[ $rc -eq 1 ] && [ ! -e "$T/started" ] || fail "--pick 3 with 2 of 4 held: exit $rc, expected 1 and no worker: $(cat "$T/e3")"
grep -q "cohort run: error: " "$T/e3" || fail "--pick 3 with 2 held: no error line: $(cat "$T/e3")"
touch "$T/b.done"
wait $a || fail "first --pick job failed"
va=$(cat "$T/a.0" 2>/dev/null)
vb=$(sort -u "$T/b")
/usr/bin/python3 -c "
import sys
a, b = set(sys.argv[1].split(',')), set(sys.argv[2].split(','))
sys.exit(0 if len(a) == 2 and len(b) == 2 and not (a & b) else 1)" "$va" "$vb" || fail "--pick jobs overlap: '$va' and '$vb'"

# Errors: exit 2, one line, nothing started.
expect_usage() {
    local needle=$1
    shift
    rm -f "$T/started"
    "$C" run "$@" sh -c "touch $T/started" >"$T/o" 2>"$T/e"
    local rc=$?
    [ $rc -eq 2 ] || fail "cohort run $*: exit $rc, expected 2 ($(cat "$T/e"))"
    grep -qF -- "$needle" "$T/e" || fail "cohort run $*: error lacks '$needle': $(cat "$T/e")"
    [ ! -e "$T/started" ] || fail "cohort run $*: a worker started"
}
export COHORT_INVENTORY=$INV/four_a100.json
expect_usage "invalid device spec '1,,3': empty entry at position 2" --devices 1,,3
expect_usage "invalid accelerator 'tpu'" --accelerator tpu
expect_usage "'--pick' and '--devices' together" --pick 1 --devices 1
expect_usage "with --bind-devices: 2 device(s) selected" -n 3 --devices 2 --bind-devices
expect_usage "invalid --pick '0'" --pick 0
# No GPU visible is not a usage error (the device layer's rule: exit 1), but still says why.
rm -f "$T/started"
COHORT_INVENTORY=$INV/amd.json "$C" run -n gpu sh -c "touch $T/started" 2>"$T/e"
rc=$?
[ $rc -eq 1 ] && [ ! -e "$T/started" ] || fail "-n gpu without GPUs: exit $rc, expected 1 and no worker"
grep -qF -- "--nproc-per-node gpu: no cuda device is visible" "$T/e" || fail "-n gpu without GPUs: $(cat "$T/e")"
expect_usage "invalid --nproc-per-node 'gpu' with --accelerator cpu" -n gpu --accelerator cpu
CUDA_VISIBLE_DEVICES=0,x expect_usage "invalid CUDA_VISIBLE_DEVICES" --devices 1

[ $failures -eq 0 ] && echo "all launch device checks passed"
exit $((failures > 0))
