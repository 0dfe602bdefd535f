#!/usr/bin/env bash
# test_plan_calibration_nodes.sh: `cohort plan --calibration FILE --nodes N`: several nodes like
# the calibrated machine, linked by FILE's "inter_node" (tests/fuzz/corpus/calibration/
# inter_node.json). --explain shows that link, and its step equals the same plan given the link
# by --link-inter (and a slower link costs more communication); the search over 2 nodes puts N
# ranks on each, reports the link in its JSON and launches through mpirun; without a link, with
# a bad one or with a device count the nodes cannot share, it refuses naming the value and the
# fix. The link measured between two real (namespace) nodes: tests/launch/test_launch_netns_link.sh.
. "$(dirname "$0")/plan_cli_lib.sh" # expect, cal, fail

small=(--layers 2 --dim 64 --heads 4 --vocab 256 --seq 32)
ddp=(--explain --nodes 2 --gpus-per-node 2 --strategy ddp --micro-batch 2 --grad-accum 1 --threads 1)

# the file's link, shown and used
expect 0 "nodes: 2 like it, inter-node link 0.1187 GB/s (61.5 us)" "${small[@]}" "${ddp[@]}" \
    --calibration "$cal/inter_node.json"
p_file=$("$COHORT" plan "${small[@]}" "${ddp[@]}" --calibration "$cal/inter_node.json" --json)
p_flag=$("$COHORT" plan "${small[@]}" "${ddp[@]}" --calibration "$cal/measured.json" \
    --link-inter 0.1187:61.5 --json)
p_slow=$("$COHORT" plan "${small[@]}" "${ddp[@]}" --calibration "$cal/inter_node.json" \
    --link-inter 0.01187:61.5 --json)
p_one=$("$COHORT" plan "${small[@]}" --explain --nodes 1 --gpus-per-node 4 --strategy ddp \
    --micro-batch 2 --grad-accum 1 --threads 1 --calibration "$cal/inter_node.json" --json)
search=$("$COHORT" plan "${small[@]}" --nodes 2 --global-batch 8 --calibration "$cal/inter_node.json" --json)
search4=$("$COHORT" plan "${small[@]}" --nodes 2 --devices 4 --global-batch 8 \
    --calibration "$cal/inter_node.json" --json)
if "$COHORT_PYTHON" - "$p_file" "$p_flag" "$p_slow" "$p_one" "$search" "$search4" <<'PY'; then
import json, sys
f, g, slow, one, s, s4 = (json.loads(x) for x in sys.argv[1:7])
# the file's link is the one --link-inter would give
assert f["step_s"] == g["step_s"] and f["comm_s"] == g["comm_s"], (f["step_s"], g["step_s"])
# it is priced: 10x slower costs more; 4 ranks on one node (shared memory only) differ
assert slow["comm_s"] > f["comm_s"], (slow["comm_s"], f["comm_s"])
assert one["comm_s"] != f["comm_s"], (one["comm_s"], f["comm_s"])
assert f["command"].startswith("mpirun -np 4 --host HOST1:2,HOST2:2 -x COHORT_COMM=mpi cohort train"), f["command"]
for j in (s, s4):
    link = j["inter_node"]
    assert j["nodes"] == 2 and abs(link["gbytes_per_s"] - 0.1187) < 1e-12 and \
        abs(link["latency_us"] - 61.5) < 1e-9, j
    assert j["configurations"], j
# the search without --devices: 1 and 2 ranks on each node (this machine's 2 cores each)
ranks = {c["strategy"]["dp"] * c["strategy"]["tp"] * c["strategy"]["pp"] for c in s["configurations"]}
assert ranks <= {2, 4} and ranks, ranks
assert all(c["strategy"]["dp"] * c["strategy"]["tp"] * c["strategy"]["pp"] == 4 for c in s4["configurations"])
assert all(c["command"].startswith("mpirun -np ") for c in s["configurations"] + s4["configurations"])
print("ok   plan over 2 nodes: step %.3f ms with the file's link = with --link-inter; comm %.3f ms, "
      "%.3f ms on a 10x slower link, %.3f ms on one node; search over %s ranks" % (
      f["step_s"] * 1e3, f["comm_s"] * 1e3, slow["comm_s"] * 1e3, one["comm_s"] * 1e3, sorted(ranks)))
PY
    :
else
    echo "FAIL: plan over 2 nodes does not use the file's link: $p_file / $p_flag / $p_slow / $p_one"
    fail=1
fi

# refusals
expect 2 "--nodes 2 needs the link between nodes: a calibration file with \"inter_node\"" \
    "${small[@]}" --global-batch 8 --nodes 2 --calibration "$cal/measured.json"
expect 2 "inter_node.gbytes_per_s: -0.5 is not a number from 1e-06 to 1e+06" \
    "${small[@]}" --global-batch 8 --nodes 2 --calibration "$cal/inter_node_bad_value.json"
expect 2 "inter_node: unknown key 'mtu'" \
    "${small[@]}" --global-batch 8 --nodes 2 --calibration "$cal/inter_node_unknown_key.json"
expect 2 "invalid --devices '3': --nodes 2 run the same number of ranks each" \
    "${small[@]}" --global-batch 6 --nodes 2 --devices 3 --calibration "$cal/inter_node.json"
expect 2 "--nodes 2 needs --gpus-per-node" "${small[@]}" --explain --nodes 2 --strategy ddp \
    --calibration "$cal/inter_node.json"
# one node: the inter-node link is read but not used
expect 0 "ranks linked at 7.98 GB/s" "${small[@]}" --global-batch 8 --devices 2 \
    --calibration "$cal/inter_node.json"
exit $fail
