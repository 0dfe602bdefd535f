#!/usr/bin/env bash
# test_pipeline_few_blocks.sh: the layouts docs/pipeline.md calls valid that have more chunks
# than blocks or a block count the interleaved chunks do not divide train as one device: given
# by --stage-layers, 1F1B at pp 2 on 1 block (`0,head`), at pp 4 on 2 blocks
# (`embeddings,0,1,head`), and interleaved v = 2 at pp 2 on 3 blocks (`0,1,2,head`); by the
# trainer's own split, interleaved v = 2 at pp 2 on 5 blocks; each gives `single`'s losses and
# final parameters within 1e-5 (30 steps). Without --stage-layers a chunk without a block is
# still refused, naming the layer count.
. "$(dirname "${BASH_SOURCE[0]}")/par_lib.sh"
"$py" -c "import numpy" 2>/dev/null || { echo "SKIP all: numpy missing"; exit 77; }
par_prepare --val-fraction 0.1 "$src/tests/parallel/equiv_corpus.txt"
V=256 C=32 T=32
mb=(--micro-batch 2 --grad-accum 4)

# layers L: the model of L blocks and its one-process reference $work/single$L.*
layers() {
    L=$1
    par_model $V "$L" 2 $C $T
    model+=(--lr 1e-3 --warmup 3 --deterministic --shuffle on --steps 30)
    "$cohort" train "${model[@]}" "${mb[@]}" --metrics "$work/single$L.jsonl" \
        --dump-params "$work/single$L.bin" >"$work/single$L.out" 2>&1 ||
        fail "single, $L blocks: $(tail -3 "$work/single$L.out")"
}

layers 1
par_run_tied pp2-l1 2 --pp 2 --schedule 1f1b "${mb[@]}" --stage-layers 0,head &&
    par_check "1f1b, pp 2, 1 block: 0,head" single1 pp2-l1
par_holds pp2-l1 1 "final LayerNorm and LM head;"

layers 2
par_run_tied pp4-l2 4 --pp 4 --schedule 1f1b "${mb[@]}" --stage-layers embeddings,0,1,head &&
    par_check "1f1b, pp 4, 2 blocks: embeddings,0,1,head" single2 pp4-l2
par_holds pp4-l2 0 "embeddings;"
par_holds pp4-l2 2 "blocks 1-1;"

layers 3
par_run_tied il-l3 2 --pp 2 --schedule interleaved --virtual-stages 2 "${mb[@]}" \
    --stage-layers 0,1,2,head && par_check "interleaved v 2, pp 2, 3 blocks: 0,1,2,head" single3 il-l3

# the trainer's own split, interleaved, on a block count p v does not divide (5 blocks in 4
# chunks, Llama 3 405B's case: 126 on 16 stages)
layers 5
par_run_tied il-l5 2 --pp 2 --schedule interleaved --virtual-stages 2 "${mb[@]}" &&
    par_check "interleaved v 2, pp 2, 5 blocks, the trainer's split" single5 il-l5

# the trainer's own split still needs a block per chunk
par_model $V 3 2 $C $T
m=("${model[@]}" "${mb[@]}" --steps 1)
expect 2 "the interleaved schedule needs a block in each of its pp 2 x virtual stages 2 = 4 chunks: the model has 3 layers" \
    "$cohort" run --nproc-per-node 2 "$cohort" train "${m[@]}" --pp 2 --schedule interleaved \
    --virtual-stages 2
par_model $V 1 2 $C $T
m=("${model[@]}" "${mb[@]}" --steps 1)
expect 2 "pipeline parallel size 2 is larger than the 1 layers" \
    "$cohort" run --nproc-per-node 2 "$cohort" train "${m[@]}" --pp 2
par_done "pipelines with more chunks than blocks (given by --stage-layers) and uneven interleaved chunks train as one device"
