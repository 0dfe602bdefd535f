#!/usr/bin/env bash
# test_ckpt_export.sh: `cohort export` of a tp 2 x pp 2 checkpoint (cohort run -n 4): the plain
# file names no state and holds the checkpoint's tensors (cohort eval gives the same loss on
# both); its bf16 export is byte-identical to the export of the same deterministic run saved
# with --save-dtype bf16 (the save's own rounding); bad input is refused, naming it, and so is an
# output that is one of the checkpoint's own files (its state, a shard), however it is named.
. "$(dirname "${BASH_SOURCE[0]}")/par_lib.sh"

par_prepare --val-fraction 0.1 "$src/tests/parallel/equiv_corpus.txt"
par_model 256 4 2 32 32
model+=(--lr 1e-3 --deterministic --steps 4 --micro-batch 2 --grad-accum 2 --tp 2 --pp 2)

for d in fp32 bf16; do
    "$cohort" run --nproc-per-node 4 "$cohort" train "${model[@]}" --save "$work/ck.$d" \
        --save-dtype $d >"$work/$d.out" 2>&1 || fail "tp 2 x pp 2 save ($d): $(tail -3 "$work/$d.out")"
done
"$cohort" export "$work/ck.fp32" -o "$work/e32.safetensors" || fail "export fp32"
"$cohort" export "$work/ck.fp32" -o "$work/e16.safetensors" --dtype bf16 || fail "export bf16"
"$cohort" export "$work/ck.bf16" -o "$work/s16.safetensors" --dtype bf16 || fail "export of the bf16 save"
cmp -s "$work/e16.safetensors" "$work/s16.safetensors" ||
    fail "bf16 export differs from the bf16 save's: $(cmp "$work/e16.safetensors" "$work/s16.safetensors")"
grep -qa state_suffix "$work/e32.safetensors" && fail "the export names a state file"
cmp -s "$work/e32.safetensors" "$work/ck.fp32" && fail "the export is the checkpoint's own file"

ev() { "$cohort" eval --checkpoint "$1" --data "$work/c_val_000000.bin" --batch 2 --seq 32 \
       --batches 3 --threads 1 --json | sed -E 's/.*"loss":([^,]+),.*/\1/'; }
a=$(ev "$work/ck.fp32") b=$(ev "$work/e32.safetensors")
[ -n "$a" ] && [ "$a" = "$b" ] || fail "cohort eval: checkpoint $a, export $b"
echo "tp 2 x pp 2: cohort eval of the checkpoint $a, of its export $b; bf16 exports byte-identical"

expect 2 "it is the checkpoint itself" "$cohort" export "$work/ck.fp32" -o "$work/ck.fp32"
# the checkpoint's other files: its state, a shard, through "./", a symlink and a symlinked
# folder, and names a save writes or removes that do not exist now; each refused naming the
# output, and no file written or changed
(cd "$work" && sha256sum ck.fp32*) >"$work/ck.sums"
ln -s "$work/ck.fp32.state4" "$work/link.state"
ln -s "$work" "$work/dirlink"
for o in "$work/ck.fp32.state4" "$work/ck.fp32.shard4-1-of-4" "$work/./ck.fp32.state4" \
    "$work/link.state" "$work/dirlink/ck.fp32.shard4-3-of-4" "$work/ck.fp32.state9" \
    "$work/ck.fp32.tmp.123"; do
    for d in fp32 bf16; do
        expect 2 "invalid -o '$o': it is a file of checkpoint" "$cohort" export "$work/ck.fp32" \
            -o "$o" --dtype $d
    done
done
expect 2 "invalid -o 'ck.fp32.state4'" sh -c "cd '$work' && '$cohort' export ck.fp32 -o ck.fp32.state4"
expect 2 "invalid -o './ck.fp32.shard4-0-of-4'" \
    sh -c "cd '$work' && '$cohort' export '$work/dirlink/ck.fp32' -o ./ck.fp32.shard4-0-of-4"
(cd "$work" && sha256sum --quiet -c ck.sums) || fail "a refused export changed the checkpoint"
[ "$(cd "$work" && ls -d ck.fp32*)" = "$(sed 's/.* //' "$work/ck.sums")" ] ||
    fail "a refused export wrote files: $(cd "$work" && ls ck.fp32*)"
par_model 256 4 2 32 32
"$cohort" train "${model[@]}" --lr 1e-3 --deterministic --micro-batch 2 --grad-accum 2 --steps 5 \
    --resume "$work/ck.fp32" >"$work/resume.out" 2>&1 ||
    fail "resume after the refused exports: $(tail -3 "$work/resume.out")"
# a name that only starts with the checkpoint's is another file
"$cohort" export "$work/ck.fp32" -o "$work/ck.fp32.hf.safetensors" || fail "export to ck.fp32.hf..."
expect 2 "invalid --dtype 'f16'" "$cohort" export "$work/ck.fp32" -o "$work/x" --dtype f16
expect 1 "ck.none" "$cohort" export "$work/ck.none" -o "$work/x"
par_done "cohort export streams a tp 2 x pp 2 checkpoint into the plain HF file"
