#!/usr/bin/env bash
# test_cli_messages.sh: the messages a new user met that said too little or the wrong thing:
# pick counts the free devices and skips reserved ones without --reserve too, --device-memory
# needs a unit, a glob that matches nothing says so, an unquoted glob gets the hint to quote it,
# a .py program the hint to name python3, attention out of memory names the sequence length,
# and run --pick without accelerators exits 1 (a runtime failure, as launcher.md says).
set -u
cohort=${COHORT:?}
src=${COHORT_SOURCE_DIR:?}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
inv="$src/tests/device/inventories"
unset CUDA_VISIBLE_DEVICES CUDA_DEVICE_ORDER ZE_AFFINITY_MASK ROCR_VISIBLE_DEVICES \
    HIP_VISIBLE_DEVICES COHORT_INVENTORY
export COHORT_LOCK_DIR="$work/locks"

# expect CODE NEEDLE CMD...: the exit code and NEEDLE somewhere in stdout+stderr.
expect() {
    local code=$1 needle=$2
    shift 2
    "$@" >"$work/out" 2>&1
    local got=$?
    if [ "$got" -ne "$code" ] || ! grep -qF -- "$needle" "$work/out"; then
        fail "$* -> exit $got (want $code), output lacks '$needle': $(tail -5 "$work/out")"
    else
        echo "ok   $(echo "$*" | cut -c1-100) -> $code"
    fi
}

# pick: 2 of 4 reserved by a holder; --reserve counts the 2 free, plain pick skips the held ones
export COHORT_INVENTORY="$inv/four_a100.json"
"$cohort" pick 2 --reserve -q -- sh -c "echo \$CUDA_VISIBLE_DEVICES >'$work/held.tmp'; mv '$work/held.tmp' '$work/held'; while [ ! -e '$work/go' ]; do sleep 0.05; done" &
holder=$!
for _ in $(seq 2000); do [ -e "$work/held" ] && break; sleep 0.05; done # up to 100 s: a loaded machine
held=$(cat "$work/held" 2>/dev/null)
expect 1 "3 cuda devices requested, 2 usable and free of reservations" \
    "$cohort" pick 3 --reserve -- true
expect 1 "reserved by another process (pid" "$cohort" pick 3
"$cohort" pick 2 -q >"$work/free" 2>&1 || fail "pick 2 with 2 free: $(cat "$work/free")"
"${COHORT_PYTHON:-python3}" -c "
a=set('$held'.split(',')); b=set(open('$work/free').read().split(','))
b={x.strip() for x in b}
assert len(a)==2 and len(b)==2 and not (a & b), (a, b)" &&
    echo "ok   pick without --reserve skips the reserved devices ($held | $(cat "$work/free"))" ||
    fail "pick handed out reserved devices: held '$held', picked '$(cat "$work/free")'"
touch "$work/go"
wait $holder || fail "the holder exited $?"
# the job's own reservation (its parent's) stays usable to it
expect 0 "0,1" "$cohort" pick 2 --reserve -q -- "$cohort" pick 2 -q
unset COHORT_INVENTORY

# --device-memory: a bare number is no size of a device
expect 2 "invalid --device-memory '16': give a unit, e.g. 16GiB" \
    "$cohort" estimate --model gpt2 --device-memory 16
expect 2 "invalid --device-memory '16'" "$cohort" plan --model gpt2 --gpus-per-node 2 \
    --global-batch 8 --device-memory 16
expect 0 "16.00 GiB" "$cohort" estimate --model gpt2 --device-memory 16GiB

# globs: one that matches nothing, and one the shell expanded
printf 'some text for a shard\n%.0s' $(seq 300) > "$work/t.txt"
"$cohort" prepare --tokenizer byte --out "$work/a" "$work/t.txt" >/dev/null &&
    cp "$work/a_train_000000.bin" "$work/a_train_000001.bin" || fail "prepare"
expect 1 "no files match '$work/nope/*.bin'" "$cohort" train --data "$work/nope/*.bin" \
    --steps 1 --vocab 256 --layers 1 --dim 32 --heads 2 --seq 16
expect 2 "did the shell expand an unquoted glob into several files? quote the pattern" \
    "$cohort" train --data "$work"/a_train_*.bin --steps 1
# a Python script as the program (refused before any worker starts: exit 2, launcher.md)
expect 2 "a Python script: give the interpreter, e.g. 'cohort run ... python3 SCRIPT'" \
    "$cohort" run -n 2 train.py
# attention's T x T scores at a long sequence, allocations over 3 GiB failing (an address-space
# limit; under AddressSanitizer, which reserves terabytes of shadow, its own allocation cap)
python3 -c "print('x' * 200000)" > "$work/long.txt"
"$cohort" prepare --tokenizer byte --out "$work/l" "$work/long.txt" >/dev/null || fail "prepare long"
limit="ulimit -v 3000000;"
if ldd "$cohort" 2>/dev/null | grep -q libasan; then
    limit="export ASAN_OPTIONS=allocator_may_return_null=1:max_allocation_size_mb=3000;"
fi
expect 1 "out of memory in attention: sequence length 100000 needs a 100000 x 100000 score matrix" \
    bash -c "$limit exec '$cohort' train --data '$work/l_train_000000.bin' --steps 1 \
    --vocab 256 --layers 1 --dim 32 --heads 2 --seq 100000 --micro-batch 1 --threads 1"
# run --pick without any accelerator: a runtime failure
expect 1 "--pick 2: no accelerator is visible" env COHORT_INVENTORY="$inv/four_a100.json" CUDA_VISIBLE_DEVICES= \
    "$cohort" run --pick 2 true

[ $fails -eq 0 ] || exit 1
echo "all message checks passed"
