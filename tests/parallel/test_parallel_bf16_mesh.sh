#!/usr/bin/env bash
# test_parallel_bf16_mesh.sh: tensor and pipeline parallelism in --precision bf16-mixed train the
# same model as one device in bf16-mixed, with the same seed and micro-batches (2 x accumulation
# 4). The discriminating check: one step of tp 2, pp 2 (1f1b) and tp 2 with sequence parallelism
# from single's state after 10 steps, within the reordering bound of par_compare.py --update,
# which tp 2 in fp32 from the same state must exceed 10x. Then 30 steps against single: the
# parameters within 2e-3 (relative L2 of every tensor), and for tp 2 the loss at every step
# within 2e-5 relative, or twice one device's own reordering (micro-batches 4 x 2) where that is
# larger: bf16 rounding turns any fp32 reordering into 2^-8 steps of the operands it moves across
# a rounding boundary, and how far those compound in 30 steps depends on the CPU's kernels. A
# pipeline computes each product as single does and differs only in the order it sums the tied
# embedding's two gradients (the head's on the last stage, the embedding's on the first, each
# over the step, then added): pp 2 gives, bit for bit, the losses and parameters of one device
# that sums them in that order (--tied-grad-order pipeline), on any CPU's kernels; that one
# device's order drifts from single's by a reordering, as the floor does. Why tp reorders: tp
# splits the K dimension of the
# row-parallel products (attention and MLP projections: each shard's partial sum rounded to fp32,
# then summed over the shards) and sums the vocabulary-parallel head's row statistics over the
# shards; with --sequence-parallel (fp32 activations there) the LayerNorm gradients sum each
# rank's rows, then over the ranks. --recompute full gives single's bits. Also --save-dtype bf16
# from both meshes (their own gather and save paths): a BF16 file whose values are the final fp32
# parameters rounded to nearest even (torch's own conversion).
. "$(dirname "${BASH_SOURCE[0]}")/par_lib.sh"
"$py" -c "import numpy, torch" 2>/dev/null || { echo "numpy or torch missing"; exit 77; }

par_bf16_mesh_model
if ! out=$("$cohort" train "${model[@]}" --steps 1 --dry-run 2>&1); then
    echo "SKIP bf16-mixed: $out"
    exit 77
fi

# ---- one step from one state: the longest sum of a step has K = 256 terms (the weight
# gradients' 8 x 32 tokens, the 256-token vocabulary; 4C = 128) ----
K=256
par_step_state
if par_one_step step-single 1; then
    par_one_step step-tp2 2 --tp 2 && par_step_check "tp 2, one step" step-single step-tp2 $K
    par_one_step step-pp2 2 --pp 2 --schedule 1f1b &&
        par_step_check "pp 2 1f1b, one step" step-single step-pp2 $K
    par_one_step step-sp2 2 --tp 2 --sequence-parallel &&
        par_step_check "tp 2 --sequence-parallel, one step" step-single step-sp2 $K
    par_one_step step-tp2-f32 2 --tp 2 --precision fp32 &&
        par_step_check "tp 2 in fp32 from the same state (the control)" step-single step-tp2-f32 \
            $K --control
fi

# ---- 30 steps ----
"$cohort" train "${model[@]}" --micro-batch 4 --grad-accum 2 --metrics "$work/floor.jsonl" \
    --dump-params "$work/floor.bin" >"$work/floor.out" 2>&1 || fail "floor: $(tail -3 "$work/floor.out")"
within() { # NAME LOSS_BOUND: the loss within the bound (or twice the floor's) and the parameters
           # within 2e-3 of single's
    local b
    b=$(awk -v f="$(par_loss_err floor)" -v b="$2" 'BEGIN { printf "%.3g", (2 * f > b ? 2 * f : b) }')
    awk -v e="$(par_loss_err "$1")" -v b="$b" 'BEGIN { exit !(e != "" && e <= b) }' ||
        fail "$1: loss max rel err '$(par_loss_err "$1")' beyond $b"
    awk -v e="$(par_param_err "$1")" 'BEGIN { exit !(e != "" && e <= 2e-3) }' ||
        fail "$1: parameter error '$(par_param_err "$1")' beyond 2e-3"
}
# bf16_file NAME: the mesh's own save of $work/NAME.st (an index and one piece per rank since
# saves are sharded) holds its weights as BF16 (the optimizer's moments stay F32), and those
# weights, exported to one file, are NAME's final parameters ($work/NAME.bin, the fp32 arena,
# the file's tensor order) rounded by torch
bf16_file() {
    "$cohort" export "$work/$1.st" -o "$work/$1.one.st" --dtype bf16 >"$work/$1.export.out" 2>&1 ||
        { fail "$1: cohort export: $(tail -2 "$work/$1.export.out")"; return; }
    "$py" - "$work/$1.one.st" "$work/$1.bin" "$work/$1.st".shard* <<'PYEOF' || fail "$1: --save-dtype bf16 file"
import json, struct, sys
import numpy as np, torch
def header(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    hdr = json.loads(raw[8:8 + n])
    hdr.pop("__metadata__", None)
    return raw, n, hdr
weights = set()
for piece in sys.argv[3:]:
    _, _, h = header(piece)
    weights |= {e["dtype"] for k, e in h.items() if ".exp_avg" not in k}
raw, n, hdr = header(sys.argv[1])
dt = {e["dtype"] for e in hdr.values()}
data = np.frombuffer(raw[8 + n:], dtype="<u2")
x = np.fromfile(sys.argv[2], dtype="<f4")
want = torch.from_numpy(x.copy()).to(torch.bfloat16).view(torch.int16).numpy().view("<u2")
print("%s: %d pieces with weights as %s; exported %d tensors, dtypes %s, %d values, %d differ "
      "from torch's bf16 of the parameters" % (sys.argv[1].split("/")[-1], len(sys.argv) - 3,
      sorted(weights), len(hdr), sorted(dt), data.size,
      -1 if data.size != want.size else int(np.count_nonzero(data != want))))
sys.exit(0 if len(sys.argv) > 3 and weights == {"BF16"} and dt == {"BF16"} and
         data.size == want.size and (data == want).all() else 1)
PYEOF
}

"$cohort" train "${model[@]}" --metrics "$work/single.jsonl" --dump-params "$work/single.bin" \
    >"$work/single.out" 2>&1 || fail "single: $(tail -3 "$work/single.out")"
"$cohort" train "${model[@]}" --tied-grad-order pipeline --metrics "$work/single-tied.jsonl" \
    --dump-params "$work/single-tied.bin" >"$work/single-tied.out" 2>&1 ||
    fail "single --tied-grad-order pipeline: $(tail -3 "$work/single-tied.out")"
par_cmp single floor
echo "floor (single, micro-batches 4 x 2): $(head -1 "$work/floor.cmp")"
if par_train tp2 2 --tp 2 --save "$work/tp2.st" --save-dtype bf16; then
    grep -q "bf16-mixed" "$work/tp2.out" || fail "tp2: no bf16-mixed line"
    par_cmp single tp2
    echo "tp 2, bf16-mixed: $(head -1 "$work/tp2.cmp")"
    within tp2 2e-5
    bf16_file tp2
fi
if par_train pp2 2 --pp 2 --schedule 1f1b --save "$work/pp2.st" --save-dtype bf16; then
    grep -q "tied embedding: the first and last stage's copies are bit-identical" \
        "$work/pp2.out" || fail "pp2: the tied embedding's copies were not checked"
    par_cmp single pp2
    echo "pp 2 1f1b, bf16-mixed: $(head -1 "$work/pp2.cmp")"
    awk -v e="$(par_param_err pp2)" 'BEGIN { exit !(e != "" && e <= 2e-3) }' ||
        fail "pp2: parameter error '$(par_param_err pp2)' beyond 2e-3"
    same_bits "pp 2 1f1b, bf16-mixed, against one device in a pipeline's order" single-tied pp2
    bf16_file pp2
fi
# sequence parallelism keeps its activations fp32 (its LayerNorm rows are gathered as fp32): tp
# 2's bounds (its LayerNorm gradients sum each rank's rows, then over the ranks: another order)
if par_train sp2 2 --tp 2 --sequence-parallel; then
    par_cmp single sp2
    echo "tp 2 --sequence-parallel, bf16-mixed: $(head -1 "$work/sp2.cmp")"
    within sp2 2e-5
fi
# --recompute full rebuilds each block's activations (the bf16-kept ones included) from the same
# bits: single's losses and parameters exactly
if par_train rc 1 --recompute full; then
    par_cmp single rc
    echo "--recompute full, bf16-mixed: $(head -1 "$work/rc.cmp")"
    awk -v e="$(par_loss_err rc)" -v p="$(par_param_err rc)" 'BEGIN { exit !(e != "" && e == 0 && p == 0) }' ||
        fail "--recompute full: not single's bits ($(head -1 "$work/rc.cmp"))"
fi
# the bounds tell the precisions apart: tp 2 in fp32 is beyond them
if par_train tp2-f32 2 --tp 2 --precision fp32; then
    par_cmp single tp2-f32
    echo "tp 2 in fp32 against single bf16-mixed (must differ): $(head -1 "$work/tp2-f32.cmp")"
    awk -v e="$(par_loss_err tp2-f32)" -v p="$(par_param_err tp2-f32)" \
        'BEGIN { exit !(e != "" && p != "" && (e > 1e-5 || p > 2e-3)) }' ||
        fail "tp 2 in fp32 within the bf16-mixed bounds: they cannot tell the precisions apart"
fi

par_done "bf16-mixed at tp 2 and pp 2 (1f1b) matches single bf16-mixed"
