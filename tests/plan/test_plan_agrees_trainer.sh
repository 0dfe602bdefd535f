#!/usr/bin/env bash
# test_plan_agrees_trainer.sh: `cohort plan --explain --json` prices the step `cohort train
# --dry-run --json` describes, on the same flags, for a table of meshes (dp x pp x tp, ZeRO
# stages, sequence parallelism, bf16, several nodes): every rank's stage and peers, each stage's
# blocks and parameters (the trainer's split), the bytes of each collective and send, its
# gradient buckets over dp one by one in issue order (the trainer's bucket plan: whole layers
# merged up to 25 MiB, a larger layer alone, ZeRO-3 per layer, a pipeline's wte last), which
# links they cross, and the memory of each stage (the planner's against the
# trainer's own prediction, within 1%: the planner prices the trainer's prediction where the
# trainer runs the configuration). Every row runs on every CPU (bf16-mixed too: widened
# products where oneDNN cannot run bf16).
. "$(dirname "$0")/plan_cli_lib.sh" # expect, cal, fail
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

small=(--layers 4 --dim 64 --heads 4 --vocab 256 --seq 32 --micro-batch 2)
# each row: the flags both commands take (a mesh over --nodes x --gpus-per-node ranks)
rows=(
    "--dp 2 --strategy ddp --grad-accum 2 --nodes 1 --gpus-per-node 2"
    "--dp 2 --strategy ddp --grad-reduce-dtype bf16 --nodes 1 --gpus-per-node 2"
    "--dp 2 --strategy zero1 --nodes 2 --gpus-per-node 1"
    "--dp 2 --strategy zero2 --nodes 1 --gpus-per-node 2"
    "--dp 4 --strategy zero3 --nodes 2 --gpus-per-node 2"
    "--pp 2 --grad-accum 4 --nodes 1 --gpus-per-node 2"
    "--pp 2 --schedule gpipe --grad-accum 4 --nodes 2 --gpus-per-node 1"
    "--pp 2 --schedule interleaved --virtual-stages 2 --grad-accum 4 --nodes 1 --gpus-per-node 2"
    "--tp 2 --nodes 1 --gpus-per-node 2"
    "--tp 2 --sequence-parallel --pp 2 --grad-accum 2 --nodes 2 --gpus-per-node 2"
    "--dp 2 --pp 2 --tp 2 --strategy zero1 --grad-accum 4 --nodes 2 --gpus-per-node 4"
    "--dp 2 --pp 2 --strategy ddp --grad-accum 2 --nodes 2 --gpus-per-node 2"
    "--dp 4 --pp 2 --strategy ddp --grad-accum 2 --nodes 4 --gpus-per-node 2"
    "--dp 2 --tp 2 --strategy ddp --precision bf16-mixed --nodes 2 --gpus-per-node 2"
    # layers of 12.6 M values, each over the 25 MiB bucket: one bucket a layer (and ZeRO-3's
    # per layer whatever its size), with and without a pipeline
    "--dim 1024 --heads 8 --dp 2 --strategy ddp --nodes 1 --gpus-per-node 2"
    "--dim 1024 --heads 8 --dp 2 --strategy zero3 --nodes 2 --gpus-per-node 1"
    "--dim 1024 --heads 8 --layers 8 --dp 2 --pp 2 --schedule interleaved --virtual-stages 2 --strategy zero1 --grad-accum 4 --nodes 2 --gpus-per-node 2"
    # a GPT-2 vocabulary: the trainer shards the head over the stages
    "--vocab 50257 --dim 128 --seq 128 --pp 2 --schedule interleaved --virtual-stages 2 --grad-accum 2 --nodes 1 --gpus-per-node 2"
)
i=0
for row in "${rows[@]}"; do
    i=$((i + 1))
    read -r -a flags <<<"$row"
    if ! "$COHORT" train "${small[@]}" "${flags[@]}" --dry-run --json >"$tmp/t$i.json" 2>"$tmp/t$i.err"; then
        echo "FAIL: cohort train $row --dry-run: $(cat "$tmp/t$i.err")"
        fail=1
        continue
    fi
    if ! "$COHORT" plan "${small[@]}" "${flags[@]}" --explain --json --calibration \
        "$cal/measured.json" --link-inter 1 >"$tmp/p$i.json" 2>"$tmp/p$i.err"; then
        echo "FAIL: cohort plan $row --explain: $(cat "$tmp/p$i.err")"
        fail=1
        continue
    fi
    "$COHORT_PYTHON" - "$tmp/t$i.json" "$tmp/p$i.json" "$row" <<'PY' || fail=1
import json, sys
t, p, row = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), sys.argv[3]
bad = []
if t["mesh"] != p["mesh"]:
    bad.append("mesh %s vs %s" % (t["mesh"], p["mesh"]))
if t["ranks"] != p["ranks"]:
    bad.append("ranks differ: %s vs %s" % (t["ranks"][:2], p["ranks"][:2]))
if len(t["stages"]) != len(p["stages"]):
    bad.append("stages %d vs %d" % (len(t["stages"]), len(p["stages"])))
worst = 0
for a, b in zip(t["stages"], p["stages"]):
    for k in ("blocks", "params", "links"):
        if a[k] != b[k]:
            bad.append("stage %d %s: trainer %s, planner %s" % (a["stage"], k, a[k], b[k]))
    for k in ("dp_buckets", "dp_bucket_values"):
        if a[k] != b[k]:
            bad.append("stage %d %s: trainer %s, planner %s" % (a["stage"], k, a[k], b[k]))
    for k, v in a["bytes"].items():
        if abs(v - b["bytes"][k]) > 1e-9 * max(v, 1):
            bad.append("stage %d %s bytes: trainer %s, planner %s" % (a["stage"], k, v, b["bytes"][k]))
    r = b["memory_bytes"] / a["memory_bytes"]
    worst = max(worst, abs(r - 1))
    if abs(r - 1) > 0.01:
        bad.append("stage %d memory: trainer %d, planner %d (%.2fx)" % (a["stage"], a["memory_bytes"], b["memory_bytes"], r))
for x in bad:
    print("FAIL: %s: %s" % (row, x))
if not bad:
    print("ok   %s: %d ranks, %d stages agree; memory within %.1f%%" % (row, len(t["ranks"]), len(t["stages"]), 100 * worst))
sys.exit(1 if bad else 0)
PY
done
exit $fail
