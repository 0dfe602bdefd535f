#!/usr/bin/env bash
# test_tensor_ckpt.sh: checkpoints of tensor-parallel runs are mesh-independent: each rank writes
# its slices (no file holds the whole model) and `cohort export` gives whole HF-named tensors. A
# run saved at (dp, pp, tp) = (2, 2, 2) with zero1 resumes at (1, 1, 1), (1, 2, 2)
# and (2, 1, 2) to the final parameters of an uninterrupted run (par_compare.py --tensor-l2, with
# its --noise control); a
# ZeRO-1 pipeline's shard set (tp 1) resumes at tp 2; and `cohort eval` of a tp 2 run's
# checkpoint gives the validation loss the run reported.
. "$(dirname "${BASH_SOURCE[0]}")/par_lib.sh"
"$py" -c "import numpy" 2>/dev/null || { echo "numpy missing"; exit 77; }

par_prepare --val-fraction 0.1 "$src/tests/parallel/equiv_corpus.txt"
V=257 C=64 L=4 T=32
par_model $V $L 4 $C $T
model+=(--lr 1e-3 --deterministic --steps 12)
# a resumed run keeps the loader's rows a step (micro-batch x dp) and the global batch (8)
mb4=(--micro-batch 4 --grad-accum 2) mb2=(--micro-batch 2 --grad-accum 2)

"$cohort" train "${model[@]}" --micro-batch 2 --grad-accum 4 --metrics "$work/ref.jsonl" --dump-params "$work/ref.bin" \
    >/dev/null 2>&1 || fail "uninterrupted single run"
par_noise --micro-batch 1 --grad-accum 8
"$cohort" run --nproc-per-node 8 "$cohort" train "${model[@]}" --tp 2 --pp 2 --strategy zero1 \
    "${mb2[@]}" --stop-at 6 --save "$work/ck" >"$work/save.out" 2>&1 ||
    fail "(2, 2, 2) save: $(tail -3 "$work/save.out")"
[ -e "$work/ck" ] && [ -e "$work/ck.state6" ] || fail "checkpoint files missing: $(ls "$work")"
# sharded: the commit holds the index, each rank's file less than the model (its weights'
# pieces: HF-named boxes, moments apart) and all of them the model once; the export holds
# whole tensors, the model's shapes, not a shard's
"$cohort" export "$work/ck" -o "$work/ck.plain" || fail "export of the (2, 2, 2) checkpoint"
"$py" - "$work/ck" $V $C <<'PY' || fail "checkpoint shapes"
import glob, json, struct, sys
def header(path):
    f = open(path, "rb")
    n = struct.unpack("<Q", f.read(8))[0]
    return json.loads(f.read(n))
V, C = int(sys.argv[2]), int(sys.argv[3])
commit = header(sys.argv[1])
if commit["__metadata__"].get("layout") != "shards" or "index" not in commit["__metadata__"]:
    print("the commit file is not the sharded layout's"); sys.exit(1)
whole = sum(v["shape"][0] * (v["shape"][1] if len(v["shape"]) > 1 else 1)
            for k, v in header(sys.argv[1] + ".plain").items() if k != "__metadata__")
files = glob.glob(sys.argv[1] + ".shard6-*-of-8")
def numel(t):
    return t["shape"][0] * (t["shape"][1] if len(t["shape"]) > 1 else 1)
sizes = [sum(numel(t) for k, t in header(p).items() if k != "__metadata__" and
             not k.split("[")[0].endswith((".exp_avg", ".exp_avg_sq"))) for p in files]
sizes = [n for n in sizes if n]
if not sizes or max(sizes) >= whole or sum(sizes) != whole:
    print("rank files' weights %s of the model's %d: not its slices" % (sizes, whole)); sys.exit(1)
print("rank files' weights %s, the model's %d" % (sizes, whole))
h = header(sys.argv[1] + ".plain")
want = {"transformer.wte.weight": [V, C], "transformer.h.0.attn.c_attn.weight": [C, 3 * C],
        "transformer.h.0.mlp.c_proj.weight": [4 * C, C], "transformer.h.3.mlp.c_fc.bias": [4 * C]}
bad = {k: h[k]["shape"] for k in want if h[k]["shape"] != want[k]}
print("checkpoint shapes:", "whole" if not bad else bad)
sys.exit(1 if bad else 0)
PY

# resume NAME CHECKPOINT REF RANKS OPTIONS...: the resumed steps and final parameters against REF's
resume() {
    local name=$1 ck=$2 ref=$3 n=$4
    shift 4
    local cmd=("$cohort" train "${model[@]}" "$@" --resume "$work/$ck" --metrics "$work/$name.jsonl"
               --dump-params "$work/$name.bin")
    [ "$n" -gt 1 ] && cmd=("$cohort" run --nproc-per-node "$n" "${cmd[@]}")
    "${cmd[@]}" >"$work/$name.out" 2>&1 || { fail "$name: $(tail -3 "$work/$name.out")"; return; }
    tail -n "$(wc -l < "$work/$name.jsonl")" "$work/$ref.jsonl" >"$work/$ref.tail.jsonl"
    "$py" "$src/tests/parallel/par_compare.py" $(par_noise_args) --tensor-l2 "$work/$ref.tail.jsonl" "$work/$ref.bin" \
        "$work/$name.jsonl" "$work/$name.bin" $V $C $L $T >"$work/$name.cmp" ||
        fail "$name: $(cat "$work/$name.cmp")"
    echo "$name: $(cat "$work/$name.cmp")"
}
resume "(2,2,2) -> (1,1,1)" ck ref 1 "${mb4[@]}"
resume "(2,2,2) -> (1,2,2)" ck ref 4 --tp 2 --pp 2 "${mb4[@]}"
resume "(2,2,2) -> (2,1,2) zero1" ck ref 4 --tp 2 --strategy zero1 "${mb2[@]}"
[ "$(wc -l < "$work/(2,2,2) -> (1,1,1).jsonl" 2>/dev/null)" = 6 ] || fail "the resumed run did not log 6 steps"

# a ZeRO-1 pipeline's shard set, written without tensor parallelism, resumes on tp 2
"$cohort" run --nproc-per-node 4 "$cohort" train "${model[@]}" --pp 2 --strategy zero1 \
    "${mb2[@]}" --stop-at 6 --save "$work/z1" >"$work/z1.out" 2>&1 || fail "zero1 pipeline save"
[ -e "$work/z1.shard6-3-of-4" ] || fail "zero1 pipeline shards: $(ls "$work" | grep z1)"
resume "(2,2,1) zero1 set -> (1,1,2)" z1 ref 2 --tp 2 "${mb4[@]}"

# cohort eval of a tp 2 run's checkpoint: the run's own final validation loss
"$cohort" run --nproc-per-node 2 "$cohort" train "${model[@]}" --tp 2 --micro-batch 2 --grad-accum 4 \
    --val-data "$work/c_val_000000.bin" --val-batches 3 --val-every 12 --save "$work/tpck" \
    --metrics "$work/tpval.jsonl" >"$work/tpval.out" 2>&1 || fail "tp 2 with validation: $(tail -3 "$work/tpval.out")"
"$cohort" eval --checkpoint "$work/tpck" --data "$work/c_val_000000.bin" --batch 2 --seq $T \
    --batches 3 --threads 1 --json >"$work/eval.json" 2>"$work/eval.err" || fail "cohort eval: $(cat "$work/eval.err")"
"$py" - "$work" <<'PY' || fail "eval of the tp 2 checkpoint"
import json, sys
w = sys.argv[1]
run = json.loads(open(w + "/tpval.jsonl").read().splitlines()[-1])["val_loss"]
ev = json.load(open(w + "/eval.json"))["loss"]
print("tp 2 run's validation loss %.7f, cohort eval of its checkpoint %.7f" % (run, ev))
sys.exit(0 if abs(run - ev) <= 1e-5 * abs(run) else 1)
PY
par_done "tensor-parallel checkpoints are mesh-independent"
