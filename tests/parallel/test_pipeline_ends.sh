#!/usr/bin/env bash
# test_pipeline_ends.sh: pipelines whose first virtual stage holds the embeddings alone or whose
# last holds the final LayerNorm and LM head alone (--stage-layers embeddings,... / ...,head)
# train the same model as one device: 30 steps of interleaved v = 2 at pp 2 with a head-only
# last chunk (also with --recompute full and under ZeRO-1 on 2 replicas) and with an
# embeddings-only first chunk, and 1F1B with a head-only and an embeddings-only stage, give
# `single`'s losses within 1e-5 at every step and its final parameters within 1e-5; the tied
# embedding's two copies stay bit-identical; the start-up lines name what each stage holds; and
# the words in the wrong place are refused naming the value.
. "$(dirname "${BASH_SOURCE[0]}")/par_lib.sh"
par_equiv_setup
par_equiv_single
il=(--pp 2 --schedule interleaved --virtual-stages 2 --micro-batch 2 --grad-accum 4)
par_run_tied il-head 2 "${il[@]}" --stage-layers 0,1,2-3,head &&
    par_check "interleaved, pp 2, last chunk the head alone" single il-head
par_holds il-head 0 "blocks 0-0,2-3 + embeddings;"
par_holds il-head 1 "blocks 1-1 + final LayerNorm and LM head;"
par_run_tied il-emb 2 "${il[@]}" --stage-layers embeddings,0-1,2,3 &&
    par_check "interleaved, pp 2, first chunk the embeddings alone" single il-emb
par_holds il-emb 0 "blocks 2-2 + embeddings;"
par_holds il-emb 1 "blocks 0-1,3-3 + final LayerNorm and LM head;"
par_run_tied il-both 2 "${il[@]}" --stage-layers embeddings,0-2,3,head &&
    par_check "interleaved, pp 2, both ends alone" single il-both
par_run_tied il-head-rc 2 "${il[@]}" --stage-layers 0,1,2-3,head --recompute full &&
    par_check "interleaved, pp 2, head alone, --recompute full" single il-head-rc
f1=(--pp 2 --schedule 1f1b --micro-batch 2 --grad-accum 4)
par_run_tied 1f1b-head 2 "${f1[@]}" --stage-layers 0-3,head &&
    par_check "1f1b, pp 2, stage 1 the head alone" single 1f1b-head
par_holds 1f1b-head 1 "final LayerNorm and LM head;"
par_run_tied 1f1b-emb 2 "${f1[@]}" --stage-layers embeddings,0-3 &&
    par_check "1f1b, pp 2, stage 0 the embeddings alone" single 1f1b-emb
par_holds 1f1b-emb 0 "embeddings;"
# ZeRO-1 slices a head-only stage's ranges (its wte copy and the final LayerNorm) over 2 replicas
par_run_tied zero1-head 4 --pp 2 --strategy zero1 --schedule 1f1b --micro-batch 2 --grad-accum 2 \
    --stage-layers 0-3,head && par_check "1f1b, dp 2 x pp 2, zero1, stage 1 the head alone" single zero1-head

# the words only at the ends
m=("${model[@]}" --micro-batch 2 --grad-accum 4 --steps 1)
run2() { "$cohort" run --nproc-per-node 2 "$cohort" train "${m[@]}" "$@"; }
expect 2 "invalid --stage-layers '0-1,head,2-3': 'head' (a stage of the final LayerNorm and LM head alone) can only be the last entry, not entry 2" \
    run2 "${il[@]}" --stage-layers 0-1,head,2-3
expect 2 "invalid --stage-layers '0,embeddings,1-2,3': 'embeddings' (a stage of the embeddings alone) can only be the first entry, not entry 2" \
    run2 "${il[@]}" --stage-layers 0,embeddings,1-2,3
expect 2 "invalid --stage-layers '0-2,head': 'head' ends the stages, but blocks 3..3 are in none" \
    run2 "${f1[@]}" --stage-layers 0-2,head
expect 2 "invalid --stage-layers 'embeddings,head'" run2 "${f1[@]}" --stage-layers embeddings,head
expect 2 "invalid --stage-layers '0-3,Head': expected block ranges like 0-2,3-7, with 'embeddings' first or 'head' last" \
    run2 "${f1[@]}" --stage-layers 0-3,Head
# the dry run and the estimate print the same words
out=$(run2 "${il[@]}" --stage-layers 0,1,2-3,head --dry-run 2>&1)
echo "$out" | grep -q "stage 1   blocks 1-1 + final LayerNorm and LM head," || fail "dry run: $out"
# the estimate prints the default split, which splits GPT-2's LM head (9.8 blocks of dim 384 at
# T 256) by vocabulary over both stages at m = 2 (test_pipeline_head_shards.sh trains such
# splits): chunks 0 and 1 the blocks, the shards after them
out=$("$cohort" estimate --engine cohort --vocab 50257 --layers 12 --heads 6 --dim 384 --seq 256 \
    --micro-batch 4 --grad-accum 2 --pp 2 --schedule interleaved --virtual-stages 2 --json 2>&1)
echo "$out" | "$py" -c '
import json, sys
s = json.load(sys.stdin)["stages"]
assert ",head:" in s[0]["blocks"] and ",head:" in s[1]["blocks"], s
assert s[0]["first_block"] == 0 and s[1]["last_block"] == 11, s
print("estimate: stage 0 %s, stage 1 %s" % (s[0]["blocks"], s[1]["blocks"]))
' || fail "estimate's stages: $out"
par_done "pipelines with the embeddings or the head alone train as one device"
