#!/usr/bin/env bash
# test_pipeline_equiv.sh: pipeline parallelism trains the same model as one device: with the same
# seed and global batch, 30 steps at (dp, pp) = (1, 2), (1, 4) and (2, 2, ddp and zero1) for the naive, GPipe
# and 1F1B schedules, and interleaved with 2 chunks per stage at pp 2, with and without
# --recompute full, give the losses of
# `single` within 1e-5 at every step and final parameters within 1e-5 (par_compare.py: each
# tensor's relative L2 error and each element's against its tensor's scale); the tied token
# embedding's two copies (first and last stage) stay bit-identical; and a different global
# batch fails the same comparison. Exactly: every pipeline of one replica gives the losses and
# parameters of one device that sums the tied embedding's two gradients in a pipeline's order
# (--tied-grad-order pipeline: the head's and the embedding's each over the step, then added),
# bit for bit: a pipeline computes every other sum as one device does.
. "$(dirname "${BASH_SOURCE[0]}")/par_lib.sh"
par_equiv_setup

compare() { par_check "$@"; }

# global batch 8: single as 2 x 4 micro-batches (the pipelines' grouping) and 1 x 8
par_equiv_single
"$cohort" train "${model[@]}" --micro-batch 2 --grad-accum 4 --tied-grad-order pipeline \
    --metrics "$work/single-tied.jsonl" --dump-params "$work/single-tied.bin" \
    >"$work/single-tied.out" 2>&1 || fail "single --tied-grad-order pipeline: $(tail -3 "$work/single-tied.out")"
grep -q "tied embedding: the head's and the embedding's wte gradients are each summed" \
    "$work/single-tied.out" || fail "single-tied: no tied embedding line"
# the other order is another sum (the test's premise: were they equal, the exact checks below
# would not tell a pipeline's order from one device's)
cmp -s "$work/single.bin" "$work/single-tied.bin" &&
    fail "--tied-grad-order pipeline gave one device's interleaved bits"
for s in naive gpipe 1f1b; do
    for pp in 2 4; do
        par_run_tied "$s-pp$pp" $pp --pp $pp --schedule $s --micro-batch 2 --grad-accum 4 &&
            compare "$s, dp 1 x pp $pp" single "$s-pp$pp" &&
            same_bits "$s, dp 1 x pp $pp against one device in a pipeline's order" single-tied \
                "$s-pp$pp"
    done
    # two replicas of a 2-stage pipeline: micro-batch 2 x 2 microbatches x dp 2
    par_run_tied "$s-dp2" 4 --pp 2 --strategy ddp --schedule $s --micro-batch 2 --grad-accum 2 &&
        compare "$s, dp 2 x pp 2" single "$s-dp2"
done
# ZeRO-1 on each stage's replicas: the optimizer state sliced over dp
par_run_tied zero1-dp2 4 --pp 2 --strategy zero1 --schedule 1f1b --micro-batch 2 --grad-accum 2 &&
    compare "1f1b, dp 2 x pp 2, zero1" single zero1-dp2
par_run_tied interleaved 2 --pp 2 --schedule interleaved --virtual-stages 2 --micro-batch 2 --grad-accum 4 &&
    compare "interleaved, 2 chunks per stage, pp 2" single interleaved &&
    same_bits "interleaved, pp 2, against one device in a pipeline's order" single-tied interleaved
# full recomputation: the same ops on the same inputs, so one device's run is bit-identical, and
# the pipelines keep to the bound
"$cohort" train "${model[@]}" --micro-batch 2 --grad-accum 4 --recompute full \
    --metrics "$work/single-rc.jsonl" --dump-params "$work/single-rc.bin" >/dev/null 2>&1 ||
    fail "single with --recompute full"
cmp -s "$work/single.bin" "$work/single-rc.bin" || fail "--recompute full changed single's parameters"
par_run_tied 1f1b-rc 2 --pp 2 --schedule 1f1b --micro-batch 2 --grad-accum 4 --recompute full &&
    compare "1f1b, pp 2, --recompute full" single 1f1b-rc &&
    same_bits "1f1b, pp 2, --recompute full, in a pipeline's order" single-tied 1f1b-rc
par_run_tied interleaved-rc 2 --pp 2 --schedule interleaved --virtual-stages 2 --micro-batch 2 \
    --grad-accum 4 --recompute full && compare "interleaved, pp 2, --recompute full" single interleaved-rc &&
    same_bits "interleaved, pp 2, --recompute full, in a pipeline's order" single-tied interleaved-rc
# the default split is the one whose simulated step is shortest: here the embeddings alone in
# the first chunk (blocks 0-1 on stage 1, 2-3 on stage 0, the head on stage 1)
grep -q "stage 0: blocks 2-3 + embeddings;" "$work/interleaved.out" &&
    grep -q "stage 1: blocks 0-1 + final LayerNorm and LM head;" "$work/interleaved.out" ||
    fail "interleaved: the default split: $(grep 'stage [01]:' "$work/interleaved.out")"
# and a block in every chunk
par_run_tied interleaved-blocks 2 --pp 2 --schedule interleaved --virtual-stages 2 --micro-batch 2 \
    --grad-accum 4 --stage-layers 0,1,2,3 &&
    compare "interleaved, pp 2, a block in every chunk" single interleaved-blocks &&
    same_bits "interleaved, pp 2, a block in every chunk, in a pipeline's order" single-tied \
        interleaved-blocks
grep -q "stage 0: blocks 0-0,2-2 + embeddings" "$work/interleaved-blocks.out" ||
    fail "interleaved-blocks: stage 0 should hold blocks 0 and 2: $(grep 'stage 0' "$work/interleaved-blocks.out")"

# the start-up summary: the mesh, each stage's blocks, the schedule's bubble
out="$work/1f1b-pp4.out"
grep -q "strategy single on mesh 1x4x1 (dp x pp x tp)" "$out" || fail "mesh line missing"
grep -q "schedule 1f1b, 4 microbatches per step; bubble 75.0%" "$out" || fail "bubble line missing"
[ "$(grep -c 'cohort: stage [0-3]: .*parameters, model state' "$out")" -eq 4 ] || fail "stage lines missing"
# only rank 0 writes the metrics, one line per step
[ "$(wc -l < "$work/1f1b-pp4.jsonl")" -eq 30 ] || fail "metrics: $(wc -l < "$work/1f1b-pp4.jsonl") lines, want 30"

# a different global batch must not pass as equivalent
# (it must run, and its comparison must say "beyond the bound", exit 1, not "cannot compare", 2)
if par_run_tied other 2 --pp 2 --schedule 1f1b --micro-batch 2 --grad-accum 2; then
    "$py" "$src/tests/parallel/par_compare.py" "$work/single.jsonl" "$work/single.bin" \
        "$work/other.jsonl" "$work/other.bin" $V $C $L $T >"$work/other.cmp" 2>&1
    rc=$?
    [ $rc -eq 1 ] || fail "a pipeline with global batch 4 against global batch 8: compare exit $rc, want 1: $(cat "$work/other.cmp")"
fi
par_done "all pipeline equivalence checks passed"
