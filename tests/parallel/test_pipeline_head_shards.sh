#!/usr/bin/env bash
# test_pipeline_head_shards.sh: the LM head split by vocabulary into pipeline chunks
# (--stage-layers ...,head:0/2,head:1/2) trains the same model as one device: 30 steps of
# interleaved v = 2 at pp 2 with the two head shards as the last two chunks (also with
# --recompute full, which recomputes the shards' logits instead of keeping them), with blocks and
# shard 0 in one chunk, and 1F1B at pp 2 with the head in 2 and 3 shards over both stages (and under ZeRO-1 on 2 replicas), give
# `single`'s losses within 1e-5 at every step and its final parameters within 1e-5 (per-tensor
# relative L2); the tied embedding's copies stay bit-identical; a checkpoint saved with head
# shards resumes in one process and with the head whole; the start-up lines name the shards;
# and bad shard spellings are refused naming the value.
. "$(dirname "${BASH_SOURCE[0]}")/par_lib.sh"
par_equiv_setup
par_equiv_single
il=(--pp 2 --schedule interleaved --virtual-stages 2 --micro-batch 2 --grad-accum 4)
par_run_tied il-2 2 "${il[@]}" --stage-layers 0-1,2-3,head:0/2,head:1/2 &&
    par_check "interleaved, pp 2, the head in 2 shards as the last 2 chunks" single il-2
par_holds il-2 0 "blocks 0-1,head:0/2"
par_holds il-2 1 "blocks 2-3,head:1/2"
par_run_tied il-2-rc 2 "${il[@]}" --stage-layers 0-1,2-3,head:0/2,head:1/2 --recompute full &&
    par_check "interleaved, pp 2, 2 head shards, --recompute full" single il-2-rc
par_run_tied il-mixed 2 "${il[@]}" --stage-layers 0,1-2,3+head:0/2,head:1/2 &&
    par_check "interleaved, pp 2, blocks and head shard 0 in one chunk" single il-mixed
par_holds il-mixed 0 "blocks 0-0,3-3+head:0/2"
f1=(--pp 2 --schedule 1f1b --micro-batch 2 --grad-accum 4)
par_run_tied 1f1b-2 2 "${f1[@]}" --stage-layers 0-3+head:0/2,head:1/2 &&
    par_check "1f1b, pp 2, head shard 0 after the blocks on stage 0, shard 1 on stage 1" single 1f1b-2
par_holds 1f1b-2 1 "LM head shard head:1/2"
par_run_tied 1f1b-3 2 "${f1[@]}" --stage-layers 0-3+head:0/3,head:1-2/3 &&
    par_check "1f1b, pp 2, the head in 3 shards, two of them on stage 1" single 1f1b-3
par_holds 1f1b-3 1 "LM head shards head:1-2/3"
# the last stage's copy of wte on 2 replicas under ZeRO-1, shards on both stages
par_run_tied zero1-2 4 --pp 2 --strategy zero1 --schedule 1f1b --micro-batch 2 --grad-accum 2 \
    --stage-layers 0-3+head:0/2,head:1/2 &&
    par_check "1f1b, dp 2 x pp 2, zero1, 2 head shards" single zero1-2

# checkpoints stay mesh-independent: saved at step 15 by interleaved with head shards (the wte
# copy on stage 1 not in its shard), resumed in one process and as 1F1B with the head whole, to
# the final parameters of the uninterrupted single run
par_run_tied il-2-save 2 "${il[@]}" --stage-layers 0-1,2-3,head:0/2,head:1/2 --stop-at 15 --save "$work/ck"
for r in "single:1" "1f1b-whole:2:--pp 2 --schedule 1f1b --stage-layers 0-3,head"; do
    IFS=: read -r name n opts <<<"$r"
    cmd=("$cohort" train "${model[@]}" --micro-batch 2 --grad-accum 4 --resume "$work/ck"
         --metrics "$work/res-$name.jsonl" --dump-params "$work/res-$name.bin")
    # shellcheck disable=SC2206
    [ "$n" -gt 1 ] && cmd=("$cohort" run --nproc-per-node "$n" "${cmd[@]}" $opts)
    "${cmd[@]}" >"$work/res-$name.out" 2>&1 ||
        { fail "resume as $name: $(tail -3 "$work/res-$name.out")"; continue; }
    [ "$(wc -l < "$work/res-$name.jsonl")" -eq 15 ] ||
        fail "resume as $name: $(wc -l < "$work/res-$name.jsonl") steps logged, want 15"
    tail -n 15 "$work/single.jsonl" >"$work/single.tail.jsonl"
    "$py" "$src/tests/parallel/par_compare.py" "$work/single.tail.jsonl" "$work/single.bin" \
        "$work/res-$name.jsonl" "$work/res-$name.bin" $V $C $L $T >"$work/res-$name.cmp" ||
        fail "resume as $name: $(cat "$work/res-$name.cmp")"
    echo "saved with head shards, resumed as $name: $(cat "$work/res-$name.cmp")"
done

# bad shard spellings, refused by name
m=("${model[@]}" --micro-batch 2 --grad-accum 4 --steps 1)
run2() { "$cohort" run --nproc-per-node 2 "$cohort" train "${m[@]}" "$@"; }
expect 2 "invalid --stage-layers '0-1,2-3,head:1/2,head:0/2': entry 3 holds head shards 1-1 of 2, but it must start at shard 0" \
    run2 "${il[@]}" --stage-layers 0-1,2-3,head:1/2,head:0/2
expect 2 "invalid --stage-layers '0-1,2-3,head:0/2,head:1/3': head shards of '3'" \
    run2 "${il[@]}" --stage-layers 0-1,2-3,head:0/2,head:1/3
expect 2 "invalid --stage-layers '0-3+head:0/2': 1 stage(s) covering blocks 0..3 and part of the head's shards" \
    run2 "${f1[@]}" --stage-layers 0-3+head:0/2
expect 2 "invalid --stage-layers '0-1,head:0/2,2-3,head:1/2': head shard 0 comes before blocks 2..3" \
    run2 "${il[@]}" --stage-layers 0-1,head:0/2,2-3,head:1/2
expect 2 "invalid --stage-layers '0-2+head:0/2,3,head:1/2': entry 1: only the stage ending at block 3 goes on to the head" \
    run2 "${il[@]}" --stage-layers 0-2+head:0/2,3,head:1/2
expect 2 "invalid --stage-layers '0-3,head:0/1': head shards of '1'" \
    run2 "${f1[@]}" --stage-layers 0-3,head:0/1
par_done "pipelines with the LM head split by vocabulary train as one device"
