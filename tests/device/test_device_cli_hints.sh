#!/usr/bin/env bash
# test_device_cli_hints.sh: errors of `cohort devices`, `cohort pick` and `cohort run`'s device
# options name the bad value and say what to do instead (each line here was a bare complaint).
set -u
C=${COHORT:?COHORT must name the cohort binary}
INV=${COHORT_SOURCE_DIR:?}/tests/device/inventories
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
failures=0
unset CUDA_VISIBLE_DEVICES CUDA_DEVICE_ORDER ZE_AFFINITY_MASK ZE_FLAT_DEVICE_HIERARCHY HIP_VISIBLE_DEVICES \
    ROCR_VISIBLE_DEVICES HABANA_VISIBLE_MODULES
export COHORT_LOG=warn COHORT_LOCK_DIR=$T/locks COHORT_INVENTORY=$INV/four_a100.json

# line CODE LINE ARGS...: cohort ARGS exits CODE and stderr is exactly LINE; no worker starts.
line() {
    local code=$1 want=$2
    shift 2
    rm -f "$T/started"
    "$C" "$@" >/dev/null 2>"$T/err"
    local rc=$?
    if [ $rc -ne "$code" ] || [ "$(cat "$T/err")" != "$want" ] || [ -e "$T/started" ]; then
        echo "FAIL cohort $*: exit $rc (want $code), stderr:"
        cat "$T/err"
        echo "want: $want"
        failures=$((failures + 1))
    else
        echo "ok   cohort $*"
    fi
}
W=(sh -c "touch $T/started")

line 2 "cohort devices: error: option '--devices' needs a value (a count like 3, -1 or auto for all, or indices like '1, 3')" devices --devices
line 2 "cohort devices: error: option '--accelerator' needs a value (auto, cpu, cuda, gpu, mps, hpu, xpu or rocm)" devices --accelerator
line 2 "cohort devices: error: invalid device spec '1,,3': empty entry at position 2; expected a count (3), -1 or auto for all, or indices ('1, 3', '[1,3]', '3,')" devices --devices 1,,3
line 2 "cohort run: error: invalid --nproc-per-node '3' with --bind-devices: 2 device(s) selected, one process each; drop -n or give -n 2" run -n 3 --devices 2 --bind-devices "${W[@]}"
line 2 "cohort run: error: invalid option '--bind-devices': no accelerator selected (cpu); bind devices of an accelerator that 'cohort devices' lists (--accelerator cuda, hpu, ...) or drop --bind-devices" run --accelerator cpu --bind-devices "${W[@]}"
line 2 "cohort run: error: invalid --nproc-per-node 'gpu' with --accelerator cpu: 'gpu' counts GPUs; use -n cpu, or an accelerator such as --accelerator cuda" run -n gpu --accelerator cpu "${W[@]}"
line 2 "cohort run: error: invalid --nproc-per-node 'cpu' with --accelerator cuda: 'cpu' starts one process per cpu core; drop --accelerator, or use -n gpu or a number" run -n cpu --accelerator cuda "${W[@]}"
line 1 "cohort run: error: no mps device: Apple MPS exists only on macOS on Apple silicon; accelerators available here: cpu, cuda" run --accelerator mps "${W[@]}"
line 2 "cohort pick: error: missing the number of devices: give N, as in 'cohort pick 2' (see --help)" pick
line 1 "cohort pick: error: 5 cuda devices requested but only 4 are visible, all usable; ask for at most 4" pick 5 -q
line 1 "cohort pick: error: 1 mps device requested but none is visible (Apple MPS exists only on macOS on Apple silicon)" pick 1 --accelerator mps -q
line 1 "cohort pick: error: 2 hpu devices requested but none is visible ('cohort devices' lists what there is; --accelerator picks another kind)" pick 2 --accelerator hpu -q

[ $failures -eq 0 ] || exit 1
echo "all passed"
