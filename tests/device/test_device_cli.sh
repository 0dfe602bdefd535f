#!/usr/bin/env bash
# test_device_cli.sh: `cohort devices` and `cohort pick` from the outside: the guide's examples
# through inventory files, exit codes 0/1/2, messages naming the bad value, JSON, aligned
# tables, and --reserve: concurrent picks never share a device, the locks live as long as
# the command.
set -u
fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
inv="$COHORT_SOURCE_DIR/tests/device/inventories"
unset CUDA_VISIBLE_DEVICES CUDA_DEVICE_ORDER ZE_AFFINITY_MASK ZE_ENABLE_PCI_ID_DEVICE_ORDER ZE_FLAT_DEVICE_HIERARCHY \
    ROCR_VISIBLE_DEVICES HIP_VISIBLE_DEVICES COHORT_INVENTORY
export COHORT_LOCK_DIR="$tmp/locks"

# expect CODE NEEDLE [ENV=VAL...] -- ARGS...: run cohort, check exit code and that stdout+stderr
# contain NEEDLE.
expect() {
    local code=$1 needle=$2
    shift 2
    local envs=()
    while [ "$1" != "--" ]; do envs+=("$1"); shift; done
    shift
    env "${envs[@]}" "$COHORT" "$@" >"$tmp/out" 2>"$tmp/err"
    local got=$?
    if [ "$got" -ne "$code" ] || ! grep -qF -- "$needle" "$tmp/out" "$tmp/err"; then
        echo "FAIL cohort $* (${envs[*]}): exit $got (want $code), output lacks '$needle':"
        cat "$tmp/out" "$tmp/err"
        fail=1
    else
        echo "ok   cohort $* ${envs[*]} -> $code"
    fi
}

# expect_line CODE LINE [ENV=VAL...] -- ARGS...: as expect, and stderr is exactly LINE.
expect_line() {
    local code=$1 line=$2
    expect "$@"
    [ "$(cat "$tmp/err")" = "$line" ] || { echo "FAIL cohort: stderr is not exactly '$line': $(cat "$tmp/err")"; fail=1; }
}

# visible PHYSICAL... [ENV=VAL...] -- ARGS: the JSON's cuda/xpu/rocm list, as physical indices.
visible() {
    local kind=$1 want=$2
    shift 2
    local envs=()
    while [ "$1" != "--" ]; do envs+=("$1"); shift; done
    shift
    local got
    got=$(env "${envs[@]}" "$COHORT" devices --json "$@" 2>/dev/null | "$COHORT_PYTHON" -c \
        "import json,sys; d=json.load(sys.stdin)['visible'].get('$kind',{'devices':[]});
print(','.join(str(x['physical_index'])+('.'+str(x['tile']) if x['tile'] is not None else '') for x in d['devices']))")
    if [ "$got" = "$want" ]; then echo "ok   $kind ${envs[*]} -> '$got'"; else
        echo "FAIL $kind ${envs[*]} $*: got '$got', want '$want'"; fail=1; fi
}

# The accelerator-selection guide, 4 GPUs.
visible cuda "0,2" CUDA_VISIBLE_DEVICES=0,2 -- --inventory "$inv/four_a100.json"
visible cuda "2,0" CUDA_VISIBLE_DEVICES=2,0 -- --inventory "$inv/four_a100.json"
visible cuda "" CUDA_VISIBLE_DEVICES= -- --inventory "$inv/four_a100.json"
expect_line 0 "" "CUDA_VISIBLE_DEVICES=  " -- devices --inventory "$inv/four_a100.json"
grep -q "none visible" "$tmp/out" && echo "ok   spaces only: no GPU" || { echo "FAIL spaces only"; fail=1; }
visible cuda "0,1,2,3" CUDA_DEVICE_ORDER=PCI_BUS_ID -- --inventory "$inv/mixed.json"
visible cuda "3,1,2,0" CUDA_DEVICE_ORDER=FASTEST_FIRST -- --inventory "$inv/mixed.json"
visible xpu "0,2" ZE_FLAT_DEVICE_HIERARCHY=COMPOSITE ZE_AFFINITY_MASK=0,2 -- --inventory "$inv/intel.json"
visible xpu "0,2" ZE_FLAT_DEVICE_HIERARCHY=COMPOSITE ZE_AFFINITY_MASK=2,0 -- --inventory "$inv/intel.json"
visible xpu "1.1" ZE_FLAT_DEVICE_HIERARCHY=COMPOSITE ZE_AFFINITY_MASK=1.1 -- --inventory "$inv/intel.json"
# ZE_FLAT_DEVICE_HIERARCHY=FLAT (and unset): each tile of the 2-tile cards is a device, 0..7.
visible xpu "0.1,1.0,3.1" ZE_FLAT_DEVICE_HIERARCHY=FLAT ZE_AFFINITY_MASK=7,1,2 -- --inventory "$inv/intel.json"
visible xpu "0.1,1.0,3.1" ZE_FLAT_DEVICE_HIERARCHY=COMBINED ZE_AFFINITY_MASK=1,2,7 -- --inventory "$inv/intel.json"
expect 0 "warning: ZE_FLAT_DEVICE_HIERARCHY is unset: cohort assumes FLAT" -- devices --inventory "$inv/intel.json"
grep -q "xpu:7 " "$tmp/out" && echo "ok   8 FLAT devices" || { echo "FAIL no xpu:7 with FLAT"; fail=1; }
expect_line 0 "" ZE_FLAT_DEVICE_HIERARCHY=FLAT ZE_AFFINITY_MASK=1,2,7 -- devices --inventory "$inv/intel.json" \
    --accelerator xpu --devices '[2,0]'
grep -qx "a child process gets ZE_AFFINITY_MASK=1,7" "$tmp/out" && echo "ok   FLAT child mask" || { echo "FAIL FLAT child mask"; fail=1; }
expect 2 "invalid ZE_AFFINITY_MASK='0.0': entry 1 '0.0' is not a device index or uuid (expected N: with ZE_FLAT_DEVICE_HIERARCHY FLAT each tile is a device of its own" \
    ZE_FLAT_DEVICE_HIERARCHY=FLAT ZE_AFFINITY_MASK=0.0 -- devices --inventory "$inv/intel.json"
expect 2 "invalid ZE_FLAT_DEVICE_HIERARCHY='flat' is not one of FLAT, COMPOSITE, COMBINED" \
    ZE_FLAT_DEVICE_HIERARCHY=flat -- devices --inventory "$inv/intel.json"
visible rocm "3,1" ROCR_VISIBLE_DEVICES=0,1,3 HIP_VISIBLE_DEVICES=2,1 -- --inventory "$inv/amd.json"
visible rocm "1" CUDA_VISIBLE_DEVICES=1 -- --inventory "$inv/amd.json" # HIP reads it too
visible rocm "2" HIP_VISIBLE_DEVICES=2 CUDA_VISIBLE_DEVICES=1 -- --inventory "$inv/amd.json"
visible cuda "0,2" CUDA_VISIBLE_DEVICES=0,2,-1,1 CUDA_DEVICE_ORDER=PCI_BUS_ID -- --inventory "$inv/four_a100.json"
visible cuda "0,3" COHORT_INVENTORY="$inv/four_a100.json" CUDA_VISIBLE_DEVICES=0,GPU-7777 -- 

# Listings, warnings and cuts.
expect 0 "cuda:3" -- devices --inventory "$inv/four_a100.json"
expect 0 "MIG instance of nvidia-smi 0: MIG-11119999-2222-3333-4444-555555555555 (gpu instance 2, compute instance 0, 19968 MiB)" \
    -- devices --inventory "$inv/mig.json"
expect 0 "none visible" CUDA_VISIBLE_DEVICES= -- devices --inventory "$inv/four_a100.json"
# a uuid with spaces around it matches nothing in CUDA (an index's spaces are trimmed): exit 2
expect 2 "error: invalid CUDA_VISIBLE_DEVICES='GPU-8932, GPU-7': entry 2 'GPU-7' is a uuid with spaces around it" \
    CUDA_VISIBLE_DEVICES="GPU-8932, GPU-7" -- devices --inventory "$inv/four_a100.json"
expect 2 "entry 1 'GPU-8932' is a uuid with spaces around it" \
    CUDA_VISIBLE_DEVICES=" GPU-8932" -- pick 1 --inventory "$inv/four_a100.json"
visible cuda "0,1" CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES="0, 1" -- --inventory "$inv/four_a100.json"
# A CUDA process enumerates one MIG instance, the first listed; pick still hands out several,
# one per worker.
visible cuda "0,1" CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES=MIG-11119,1,MIG-11111 -- --inventory "$inv/mig.json"
expect 0 "warning: CUDA_VISIBLE_DEVICES lists 2 MIG instances, but a CUDA process uses only the first (cuda:0, MIG-11119999-2222-3333-4444-555555555555); it cannot use MIG-11111111-2222-3333-4444-555555555555" \
    CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES=MIG-11119,MIG-11111 -- devices --inventory "$inv/mig.json"
grep -q "cuda:1" "$tmp/out" && { echo "FAIL a second MIG instance is listed as visible"; fail=1; } || echo "ok   one MIG instance listed"
expect 0 "MIG-11119999-2222-3333-4444-555555555555,MIG-11111111-2222-3333-4444-555555555555" \
    CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES=MIG-11119,MIG-11111 -- pick 2 --inventory "$inv/mig.json"
grep -qF "2 MIG instances picked; a CUDA process uses only the first MIG instance it is given, so give each worker one of them" "$tmp/err" &&
    echo "ok   pick notes one MIG instance per worker" || { echo "FAIL pick's MIG note"; fail=1; }
expect 0 "warning: CUDA_VISIBLE_DEVICES='0,2,-1,1': entry 3 '-1' is negative; the runtime ignores it and every entry after it (visible: 0,2)" \
    CUDA_VISIBLE_DEVICES=0,2,-1,1 -- devices --inventory "$inv/four_a100.json"
expect 0 "entry 2 'GPU-1a2b' matches several devices" CUDA_VISIBLE_DEVICES=0,GPU-1a2b -- \
    devices --inventory "$inv/four_a100.json"
expect 0 "CUDA then shows no device at all" CUDA_VISIBLE_DEVICES=1,0,1 -- devices --inventory "$inv/four_a100.json"
expect 0 "warning: CUDA_DEVICE_ORDER is unset: CUDA numbers devices fastest first, so cuda index 0 is nvidia-smi index 3" \
    -- devices --inventory "$inv/mixed.json"
expect 2 "error: invalid CUDA_VISIBLE_DEVICES='0,abc': entry 2 'abc' is not a device index or uuid" \
    CUDA_VISIBLE_DEVICES=0,abc -- devices --inventory "$inv/four_a100.json"
expect 2 "invalid CUDA_DEVICE_ORDER='FASTEST' is not one of FASTEST_FIRST, PCI_BUS_ID" \
    CUDA_DEVICE_ORDER=FASTEST -- devices --inventory "$inv/four_a100.json"
expect 2 "invalid ZE_ENABLE_PCI_ID_DEVICE_ORDER='yes' is not 0 or 1" ZE_ENABLE_PCI_ID_DEVICE_ORDER=yes -- \
    devices --inventory "$inv/intel.json"
expect 0 "warning: ZE_AFFINITY_MASK='0,7': entry 2 '7' is past the last device (4 intel devices); it selects nothing" \
    ZE_FLAT_DEVICE_HIERARCHY=COMPOSITE ZE_AFFINITY_MASK=0,7 -- devices --inventory "$inv/intel.json"
expect 2 "invalid ZE_AFFINITY_MASK='0,1.x'" ZE_FLAT_DEVICE_HIERARCHY=COMPOSITE ZE_AFFINITY_MASK=0,1.x -- devices --inventory "$inv/intel.json"
expect 2 "invalid ROCR_VISIBLE_DEVICES='0,,1': entry 2 '' is empty" ROCR_VISIBLE_DEVICES=0,,1 -- \
    devices --inventory "$inv/amd.json"

# Specs.
expect 0 "a child process gets CUDA_VISIBLE_DEVICES=1,3" -- devices --inventory "$inv/four_a100.json" --devices '[1,3]'
expect 0 "a child process gets CUDA_VISIBLE_DEVICES=3" -- devices --inventory "$inv/four_a100.json" --devices '3,'
expect 0 "= 3 processes" -- devices --inventory "$inv/four_a100.json" --accelerator cpu --devices 3
expect 2 "invalid device spec '1,,3': empty entry at position 2" -- devices --inventory "$inv/four_a100.json" --devices 1,,3
expect 2 "invalid device spec '0': it selects no device, which is not allowed for accelerator cuda (valid: 1 to 4, -1, auto, or indices 0 to 3)" \
    -- devices --inventory "$inv/four_a100.json" --accelerator gpu --devices 0
expect 2 "invalid device spec '[]': it selects no device" -- devices --inventory "$inv/four_a100.json" --devices '[]'
expect 2 "index 5 is out of range (visible cuda devices: 0 to 1)" CUDA_VISIBLE_DEVICES=0,1 -- \
    devices --inventory "$inv/four_a100.json" --devices 5,
expect 1 "error: no cuda device is visible (devices '2' needs at least one)" CUDA_VISIBLE_DEVICES= -- \
    devices --inventory "$inv/four_a100.json" --accelerator cuda --devices 2
grep -q "none visible" "$tmp/out" && echo "ok   the listing is still printed" || { echo "FAIL no listing"; fail=1; }
expect 2 "invalid accelerator 'tpu': expected one of auto, cpu, cuda, gpu, mps, hpu, xpu, rocm" -- devices --accelerator tpu
expect 2 "unknown option '--colour'" -- devices --colour
expect 0 "usage: cohort devices" -- devices --help

# Inventory files.
printf '{"gpus":[{"vendor":"nvidia","name":"x","uuid":"GPU-1","memory_total_mib":1,"compute_mode":"shared"}]}' >"$tmp/bad.json"
expect 2 "bad.json: gpus[0].compute_mode: 'shared' is not one of default, exclusive_process, prohibited" \
    -- devices --inventory "$tmp/bad.json"
expect 2 "cannot open inventory file '$tmp/missing.json'" -- devices --inventory "$tmp/missing.json"
expect 2 "COHORT_INVENTORY: cannot open inventory file" COHORT_INVENTORY="$tmp/missing.json" -- devices
expect 2 "cannot read inventory file '$tmp': it is a directory" -- devices --inventory "$tmp"
head -c $((16 * 1024 * 1024 + 1)) /dev/zero | tr '\0' ' ' >"$tmp/huge.json"
expect 2 "inventory file '$tmp/huge.json' is larger than 16 MiB, the most cohort reads" \
    -- devices --inventory "$tmp/huge.json"
rm -f "$tmp/huge.json"
# An endless file stops at the limit (the memory limit and timeout only keep a regression from
# hanging the test or filling the machine; AddressSanitizer reserves its shadow memory beyond
# any such limit, so a sanitizer build runs with the timeout alone).
vlimit=1048576
grep -qs '^COHORT_SANITIZE:BOOL=ON' "${COHORT_BUILD_DIR:-/nonexistent}/CMakeCache.txt" &&
    vlimit=unlimited
(ulimit -v "$vlimit"; timeout 60 "$COHORT" devices --inventory /dev/zero) >"$tmp/out" 2>&1
[ $? -eq 2 ] && grep -qF "inventory file '/dev/zero' is larger than 16 MiB" "$tmp/out" &&
    echo "ok   /dev/zero stops at the limit" || { echo "FAIL /dev/zero: $(head -c 300 "$tmp/out")"; fail=1; }

# 1024 GPUs: every one is listed and can be selected; no cap at 64.
expect 0 "cuda:1023" -- devices --inventory "$inv/g1024.json"
expect 0 "devices '70' = 70 devices:" -- devices --inventory "$inv/g1024.json" --devices 70
grep -qx "a child process gets CUDA_VISIBLE_DEVICES=$(seq -s, 0 69)" "$tmp/out" &&
    grep -qF "  cuda:69 " "$tmp/out" && echo "ok   70 of 1024 selected" || { echo "FAIL 70 of 1024"; fail=1; }
"$COHORT" devices --json --inventory "$inv/g1024.json" --devices -1 >"$tmp/j" 2>/dev/null &&
    "$COHORT_PYTHON" -c "import json; s=json.load(open('$tmp/j'))['selection']
assert s['count']==1024 and s['logical_indices']==list(range(1024)) and s['value'].endswith(',1022,1023'), s['count']" &&
    echo "ok   --devices -1 selects all 1024" || { echo "FAIL --devices -1 with 1024 GPUs"; fail=1; }

# JSON is valid and the human table is aligned.
"$COHORT" devices --json --inventory "$inv/busy.json" --devices 2 >"$tmp/j" 2>/dev/null &&
    "$COHORT_PYTHON" -c "import json; d=json.load(open('$tmp/j')); assert d['selection']['value']=='0,1', d['selection']" &&
    echo "ok   devices --json parses" || { echo "FAIL devices --json"; fail=1; }
"$COHORT" devices --inventory "$inv/busy.json" >"$tmp/t" 2>/dev/null
"$COHORT_PYTHON" - "$tmp/t" <<'EOT' && echo "ok   table columns aligned" || { echo "FAIL table alignment"; fail=1; }
import sys
rows = [l for l in open(sys.argv[1]) if l.startswith("  ")]
head = rows[0]
for col in ("PCI BUS ID", "UUID", "NAME", "MEMORY FREE/TOTAL"):
    at = head.index(col)
    for r in rows[1:]:
        assert r[at - 2:at] == "  " and r[at] != " ", (col, r)
EOT

# pick.
expect 0 "0,7" -- pick 2 --inventory "$inv/busy.json"
expect 0 "GPU-00000000-0000-0000-0000-000000000000,GPU-77777777" -- pick 2 --format uuid -q --inventory "$inv/busy.json"
expect 0 "0,7,6,3" -- pick 4 --allow-shared -q --inventory "$inv/busy.json"
expect 0 "0,7,6" -- pick 3 --min-free-memory 50GiB -q --inventory "$inv/busy.json"
expect 1 "cuda:5 (GPU-55555555-0000-0000-0000-000000000000): 40960 MiB free, below the 51200 MiB required" \
    -- pick 4 --min-free-memory 50GiB --inventory "$inv/busy.json"
expect 1 "cuda:1 (GPU-11111111-0000-0000-0000-000000000000): compute mode is prohibited" -- pick 5 --inventory "$inv/busy.json"
grep -q "cuda:4 (GPU-44444444-0000-0000-0000-000000000000): memory full: 0 MiB free" "$tmp/err" &&
    grep -q "cuda:2 .*exclusive_process" "$tmp/err" && grep -q "cuda:3 .*busy: 2 compute processes" "$tmp/err" &&
    echo "ok   pick names every rejected device" || { echo "FAIL pick rejections"; cat "$tmp/err"; fail=1; }
expect 0 "\"value\": \"0\"" -- pick 1 --json --inventory "$inv/busy.json"
# Numbers: one phrasing naming the value; no trailing garbage, no empty value, no blanks.
expect_line 2 "cohort pick: error: invalid device count '0': must be an integer from 1 to 64" -- pick 0 --inventory "$inv/busy.json"
expect_line 2 "cohort pick: error: invalid device count '65': must be an integer from 1 to 64" -- pick 65 --inventory "$inv/busy.json"
expect_line 2 "cohort pick: error: invalid device count 'two': must be an integer from 1 to 64" -- pick two
expect_line 2 "cohort pick: error: invalid device count '2x': must be an integer from 1 to 64" -- pick 2x
expect_line 2 "cohort pick: error: invalid device count '': must be an integer from 1 to 64" -- pick ''
expect_line 2 "cohort pick: error: invalid device count ' 2': must be an integer from 1 to 64" -- pick ' 2'
expect 2 "missing the number of devices" -- pick
expect_line 2 "cohort pick: error: invalid --max-utilization '150': must be an integer from 0 to 100" -- pick 1 --max-utilization 150
expect_line 2 "cohort pick: error: invalid --max-utilization 'high': must be an integer from 0 to 100" -- pick 1 --max-utilization high
expect_line 2 "cohort pick: error: invalid --max-utilization '50x': must be an integer from 0 to 100" -- pick 1 --max-utilization 50x%
expect_line 2 "cohort pick: error: invalid --max-utilization '': must be an integer from 0 to 100" -- pick 1 --max-utilization ''
expect 0 "0,7" -- pick 2 --max-utilization 50% -q --inventory "$inv/busy.json"
expect 2 "cohort pick: error: --min-free-memory: invalid size '': no number" -- pick 1 --min-free-memory ''
# 16 EiB is more than any device has (it once rounded up to 0 MiB: no requirement at all).
expect 1 "below the 17592186044416 MiB required" -- pick 1 --min-free-memory 16EiB --inventory "$inv/busy.json"
expect 2 "invalid --format 'name': expected index or uuid" -- pick 1 --format name
expect 2 "5XB" -- pick 1 --min-free-memory 5XB
expect 2 "--reserve holds the devices only while a command runs" -- pick 1 --reserve
expect 2 "invalid --accelerator 'cpu' for pick" -- pick 1 --accelerator cpu
expect 1 "1 cuda device requested but none is visible" CUDA_VISIBLE_DEVICES= -- pick 1 --inventory "$inv/busy.json"
expect 0 "0,1" -- pick 2 -q --accelerator xpu --inventory "$inv/intel.json"

# --reserve: two picks started together get disjoint devices; a third finds them held; the
# command's exit status comes back; the locks go with the command.
holder() { # holder NAME: pick 2 devices and keep them until $tmp/go exists
    COHORT_INVENTORY="$inv/four_a100.json" "$COHORT" pick 2 --reserve -q -- \
        sh -c "echo \$CUDA_VISIBLE_DEVICES >'$tmp/$1.tmp'; mv '$tmp/$1.tmp' '$tmp/$1'; while [ ! -e '$tmp/go' ]; do sleep 0.05; done"
}
holder a & pa=$!
holder b & pb=$!
for _ in $(seq 2000); do [ -e "$tmp/a" ] && [ -e "$tmp/b" ] && break; sleep 0.05; done # up to 100 s: a loaded machine
a=$(cat "$tmp/a" 2>/dev/null); b=$(cat "$tmp/b" 2>/dev/null)
"$COHORT_PYTHON" -c "
a=set('$a'.split(',')); b=set('$b'.split(','))
assert len(a)==2 and len(b)==2 and not (a & b) and a|b=={'0','1','2','3'}, (a, b)" &&
    echo "ok   concurrent reservations are disjoint ($a | $b)" || { echo "FAIL reservations overlap: '$a' '$b'"; fail=1; }
expect 1 "reserved by another process (pid" COHORT_INVENTORY="$inv/four_a100.json" -- pick 1 --reserve -- true
touch "$tmp/go"
wait $pa; ra=$?
wait $pb; rb=$?
[ $ra -eq 0 ] && [ $rb -eq 0 ] && echo "ok   holders exit 0" || { echo "FAIL holders exit $ra $rb"; fail=1; }
expect 7 "running sh with CUDA_VISIBLE_DEVICES=0,1 (devices reserved until it exits)" \
    COHORT_INVENTORY="$inv/four_a100.json" -- pick 2 --reserve -- sh -c 'exit 7'
expect 0 "0,1,2,3" COHORT_INVENTORY="$inv/four_a100.json" -- pick 4 --reserve -q -- sh -c 'echo $CUDA_VISIBLE_DEVICES'
expect 127 "cannot run 'no-such-command-xyz'" COHORT_INVENTORY="$inv/four_a100.json" -- pick 1 -- no-such-command-xyz
exit $fail
