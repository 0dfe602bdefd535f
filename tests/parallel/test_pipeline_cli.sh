#!/usr/bin/env bash
# test_pipeline_cli.sh: a pipeline's bad input is refused before anything is allocated, exit 2,
# naming the value and what would be valid: pp larger than the blocks, a world not divisible by
# pp, the interleaved schedule's constraints, a --stage-layers that skips, repeats or miscounts
# blocks, strategies the pipeline does not run, and a --tied-grad-order it cannot honour (a
# pipeline sums the tied embedding's gradients in its own order; a data-parallel replica
# reduces wte's before the head's part could join it).
. "$(dirname "${BASH_SOURCE[0]}")/par_lib.sh"
par_prepare
par_model 256 4 2 16 16
m=("${model[@]}" --micro-batch 2 --steps 2)
run2() { "$cohort" run --nproc-per-node 2 "$cohort" train "${m[@]}" "$@"; }
run3() { "$cohort" run --nproc-per-node 3 "$cohort" train "${m[@]}" "$@"; }

expect 2 "pipeline parallel size 8 is larger than the 4 layers" "$cohort" train "${m[@]}" --pp 8 --dry-run
expect 2 "tp 1 x pp 2 = 2 does not divide the 3 ranks of this job" run3 --pp 2
expect 2 "the interleaved schedule needs the 3 microbatches to be a multiple of pp 2" \
    run2 --pp 2 --schedule interleaved --virtual-stages 2 --grad-accum 3
expect 2 "the interleaved schedule needs a block in each of its pp 2 x virtual stages 4 = 8 chunks: the model has 4 layers" \
    run2 --pp 2 --schedule interleaved --virtual-stages 4 --grad-accum 4
expect 2 "virtual stages 2 need the interleaved schedule" run2 --pp 2 --virtual-stages 2
expect 2 "invalid --stage-layers '0-0,2-3': stage 1 is blocks 2-3, but it must start at block 1" \
    run2 --pp 2 --stage-layers 0-0,2-3
expect 2 "invalid --stage-layers '0-2,2-3': stage 1 is blocks 2-3, but it must start at block 3" \
    run2 --pp 2 --stage-layers 0-2,2-3
expect 2 "invalid --stage-layers '0-3': 1 stage(s) covering blocks 0..3, but the pipeline has 2" \
    run2 --pp 2 --stage-layers 0-3
expect 2 "--stage-layers '0-3' needs a pipeline" "$cohort" train "${m[@]}" --stage-layers 0-3
expect 2 "--strategy zero2 with --pp 2: ZeRO-2 and -3 shard gradients that a pipeline accumulates" \
    "$cohort" run --nproc-per-node 4 "$cohort" train "${m[@]}" --pp 2 --strategy zero2
expect 2 "invalid --schedule 'zigzag': valid are 1f1b, gpipe, interleaved, naive" run2 --pp 2 --schedule zigzag
expect 2 "invalid --tied-grad-order 'head-first': valid are interleaved, pipeline" \
    "$cohort" train "${m[@]}" --tied-grad-order head-first
expect 2 "--tied-grad-order interleaved with --pp 2: a pipeline's first and last stages each sum" \
    run2 --pp 2 --tied-grad-order interleaved
expect 2 "--tied-grad-order pipeline with --strategy ddp (dp 2): it is for one data-parallel replica" \
    run2 --strategy ddp --tied-grad-order pipeline
expect 2 "--tied-grad-order pipeline with --strategy dp (dp 2): it is for one data-parallel replica" \
    "$cohort" train "${m[@]}" --strategy dp --devices 2 --tied-grad-order pipeline
# a pipeline is already in its order: the flag is accepted and says so
out=$(run2 --pp 2 --tied-grad-order pipeline --dry-run 2>&1) &&
    echo "$out" | grep -q "stage 1   " || fail "--pp 2 --tied-grad-order pipeline: $out"
out=$("$cohort" train "${m[@]}" --tied-grad-order pipeline --dry-run 2>&1) &&
    echo "$out" | grep -q "tied wte  its two gradients summed in a pipeline's order" ||
    fail "--tied-grad-order pipeline --dry-run: $out"
# a valid split is what the stages hold
out=$(run2 --pp 2 --stage-layers 0-0,1-3 2>&1) || fail "a valid --stage-layers run failed: $out"
echo "$out" | grep -q "stage 0: blocks 0-0 + embeddings" && echo "$out" | grep -q "stage 1: blocks 1-3 + final" ||
    fail "the stages do not hold the given split: $(echo "$out" | grep 'stage [01]:')"
# the default split weighs the LM head: with a 50257-token vocabulary the last stage holds fewer blocks
# (its 2 V C FLOPs a token weigh about 120 of these blocks), so blocks 0-4 go to stage 0
out=$("$cohort" run --nproc-per-node 2 "$cohort" train --vocab 50257 --layers 6 --heads 2 --dim 32 \
    --seq 16 --threads 1 --data "$work/c_train_*.bin" --steps 1 --pp 2 --dry-run 2>&1)
echo "$out" | grep -q "stage 0   blocks 0-4 + embeddings" && echo "$out" | grep -q "stage 1   blocks 5-5 + final" ||
    fail "the default split does not weigh the head: $out"
# even here the head (2 x 256 x 16) outweighs a block of dim 16 (24 x 16^2 + 4 x 16 x 16): 3 + 1
out=$("$cohort" run --nproc-per-node 2 "$cohort" train "${m[@]}" --pp 2 --dry-run 2>&1)
echo "$out" | grep -q "stage 0   blocks 0-2 + embeddings" || fail "a 3 + 1 split expected: $out"
par_done "pipeline usage errors checked"
