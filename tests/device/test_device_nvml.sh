#!/usr/bin/env bash
# test_device_nvml.sh: the NVML path through the real dlopen of a fake libnvidia-ml.so.1 (built
# by tests/device/CMakeLists.txt, found through LD_LIBRARY_PATH): every field, MIG, the call
# sequence, failures of nvmlInit; and the machine without the library.
set -u
fail=0
check() { # check DESCRIPTION COMMAND...: the command must succeed
    local what=$1
    shift
    if "$@"; then echo "ok   $what"; else echo "FAIL $what"; fail=1; fi
}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
lib="$COHORT_BUILD_DIR/tests/device/fake_nvml"
[ -f "$lib/libnvidia-ml.so.1" ] || { echo "fake library missing in $lib"; exit 1; }
unset CUDA_VISIBLE_DEVICES CUDA_DEVICE_ORDER COHORT_INVENTORY COHORT_NVML_LIB

# Two GPUs in PCI order: a V100 (cc 7.0) and an A100 (cc 8.0, MIG on, exclusive, 1 process).
cat >"$tmp/devices" <<'EOT'
Tesla V100-SXM2-32GB|GPU-aaaaaaaa-1111-2222-3333-444444444444|00000000:05:00.0|32768|1024|7|0|0|7.0|80|1530|
NVIDIA A100-SXM4-40GB|GPU-bbbbbbbb-1111-2222-3333-444444444444|00000000:0B:00.0|40960|0|0|3|1|8.0|108|1410|MIG-cccccccc-1111-2222-3333-444444444444/1/0/9856;MIG-dddddddd-1111-2222-3333-444444444444/2/0/19968
EOT
run() { LD_LIBRARY_PATH="$lib" COHORT_FAKE_NVML="$tmp/devices" COHORT_FAKE_NVML_LOG="$tmp/log" "$@"; }

rm -f "$tmp/log"
run "$COHORT" devices --json >"$tmp/out.json" 2>"$tmp/err"
check "devices --json through the fake nvml exits 0" test $? -eq 0
check "json fields come from nvml" "$COHORT_PYTHON" - "$tmp/out.json" "$(id -un)" <<'EOT'
import json, sys
d = json.load(open(sys.argv[1])); me = sys.argv[2]
assert d["source"] == "nvml", d["source"]
g = d["gpus"]
assert [x["name"] for x in g] == ["Tesla V100-SXM2-32GB", "NVIDIA A100-SXM4-40GB"], g
assert g[0]["uuid"] == "GPU-aaaaaaaa-1111-2222-3333-444444444444"
assert g[1]["pci_bus_id"] == "00000000:0B:00.0"
assert (g[0]["memory_total_mib"], g[0]["memory_used_mib"]) == (32768, 1024)
assert g[0]["utilization_pct"] == 7 and g[0]["compute_mode"] == "default"
assert g[1]["compute_mode"] == "exclusive_process" and g[1]["processes"] == 1
assert g[1]["process_owners"] == me, g[1]["process_owners"]
assert g[0]["compute_capability"] == "7.0" and g[1]["compute_capability"] == "8.0"
assert g[1]["multiprocessors"] == 108 and g[1]["clock_mhz"] == 1410
assert [m["uuid"][:12] for m in g[1]["mig"]] == ["MIG-cccccccc", "MIG-dddddddd"]
assert [(m["gpu_instance"], m["memory_total_mib"]) for m in g[1]["mig"]] == [(1, 9856), (2, 19968)]
assert [x["physical_index"] for x in g] == [0, 1]
# FASTEST_FIRST by default: the A100 (cc 8.0) is cuda:0
assert [x["physical_index"] for x in d["visible"]["cuda"]["devices"]] == [1, 0]
assert "nvidia-smi index 1" in d["visible"]["cuda"]["warning"]
EOT
check "the call sequence starts with nvmlInit_v2 and ends with nvmlShutdown" \
    bash -c "head -1 '$tmp/log' | grep -qx nvmlInit_v2 && tail -1 '$tmp/log' | grep -qx nvmlShutdown"
check "the versioned entry points are the ones called" bash -c \
    "grep -qx nvmlDeviceGetCount_v2 '$tmp/log' && grep -qx nvmlDeviceGetHandleByIndex_v2 '$tmp/log' &&
     grep -qx nvmlDeviceGetPciInfo_v3 '$tmp/log' && grep -qx nvmlDeviceGetComputeRunningProcesses_v3 '$tmp/log' &&
     grep -qx nvmlDeviceGetMigDeviceHandleByIndex '$tmp/log'"
check "no call is made before nvmlInit_v2 or after nvmlShutdown" \
    bash -c "! grep -q refused '$tmp/log' && [ \$(grep -c nvmlInit_v2 '$tmp/log') -eq 1 ]"

# The human table and the order warning.
run "$COHORT" devices >"$tmp/out" 2>"$tmp/err"
check "human listing names both GPUs in cuda order" bash -c \
    "grep -E '^  cuda:0 +1 +00000000:0B:00.0' '$tmp/out' >/dev/null && grep -E '^  cuda:1 +0 +00000000:05:00.0' '$tmp/out' >/dev/null"
check "warns that cuda and nvidia-smi order differ" grep -q "CUDA_DEVICE_ORDER is unset" "$tmp/err"
CUDA_DEVICE_ORDER=PCI_BUS_ID run "$COHORT" devices >"$tmp/out" 2>"$tmp/err"
check "no warning with CUDA_DEVICE_ORDER=PCI_BUS_ID" bash -c "! grep -q warning '$tmp/err'"

# Pick through nvml: the A100 is exclusive with a process, so only the V100 is usable.
val=$(run "$COHORT" pick 1 -q 2>"$tmp/err")
check "pick 1 chooses the V100, cuda index 1 under FASTEST_FIRST (got '$val')" test "$val" = 1
run "$COHORT" pick 2 -q >/dev/null 2>"$tmp/err"
check "pick 2 fails with exit 1" test $? -eq 1
check "pick names the exclusive device and why" grep -q "exclusive_process and 1 process is already on it" "$tmp/err"
val=$(CUDA_VISIBLE_DEVICES=MIG-dddd run "$COHORT" pick 1 -q 2>/dev/null)
check "a visible MIG instance is picked by its uuid (got '$val')" \
    test "$val" = "MIG-dddddddd-1111-2222-3333-444444444444"

# nvmlInit failing (driver not loaded) is a note, not an error.
COHORT_FAKE_NVML_INIT=9 run "$COHORT" devices >"$tmp/out" 2>&1
check "init failure exits 0" test $? -eq 0
check "init failure is one line naming nvmlErrorString" grep -q "nvmlInit_v2: Driver Not Loaded" "$tmp/out"

# A GPU this process may not open is left out with a note; the other keeps its nvidia-smi index.
COHORT_FAKE_NVML_DENY=0 run "$COHORT" devices --json >"$tmp/out.json" 2>"$tmp/err"
check "a denied gpu: exit 0" test $? -eq 0
check "a denied gpu: skipped with a note, the other listed as smi 1 and cuda:0" "$COHORT_PYTHON" - "$tmp/out.json" <<'EOT'
import json, sys
d = json.load(open(sys.argv[1]))
assert d["note"] == "skipped gpu 0: nvmlDeviceGetHandleByIndex_v2: Insufficient Permissions", d["note"]
assert [(g["name"], g["physical_index"]) for g in d["gpus"]] == [("NVIDIA A100-SXM4-40GB", 1)], d["gpus"]
c = d["visible"]["cuda"]
assert [x["physical_index"] for x in c["devices"]] == [1] and c["warning"] is None, c
EOT

# No library at all.
COHORT_NVML_LIB="$tmp/none/libnvidia-ml.so.1" "$COHORT" devices >"$tmp/out" 2>&1
check "no library: exit 0" test $? -eq 0
check "no library: lists the cpu" grep -q "^cpu: [0-9]* cores online" "$tmp/out"
check "no library: one line saying no driver" bash -c "[ \$(grep -c 'no NVIDIA driver found' '$tmp/out') -eq 1 ]"
if ! /sbin/ldconfig -p 2>/dev/null | grep -q libnvidia-ml.so.1; then
    env -u LD_LIBRARY_PATH "$COHORT" devices >"$tmp/out" 2>&1
    check "this machine: the real soname is not found, exit 0" test $? -eq 0
    check "this machine: says no NVIDIA driver was found" grep -q "nvidia: no NVIDIA driver found" "$tmp/out"
fi
exit $fail
