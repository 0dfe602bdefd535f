#!/usr/bin/env bash
# test_pipeline_ckpt.sh: a pipeline's checkpoints are mesh-independent and survive a dead stage.
# A run saved at pp 2 resumes at pp 1, 2 and 4 (and as ddp or zero1 replicas of a 2-stage
# pipeline, whose checkpoint resumes in one process) to
# the final parameters of an uninterrupted run (at pp 1 with --tied-grad-order pipeline: the
# uninterrupted pipeline's, bit for bit), and `cohort eval` reads it; a stage killed with
# -9 mid-run ends the job within seconds, and with --max-restarts 1 the job resumes from the
# last checkpoint to the uninterrupted run's final loss, bit for bit.
. "$(dirname "${BASH_SOURCE[0]}")/par_lib.sh"
"$py" -c "import numpy" 2>/dev/null || { echo "numpy missing"; exit 77; }

par_prepare --val-fraction 0.1 "$src/tests/parallel/equiv_corpus.txt"
V=256 C=32 L=4 T=32
par_model $V $L 2 $C $T
model+=(--lr 1e-3 --deterministic --steps 12 --micro-batch 2 --grad-accum 4)

"$cohort" train "${model[@]}" --metrics "$work/ref.jsonl" --dump-params "$work/ref.bin" \
    >/dev/null 2>&1 || fail "uninterrupted single run"
"$cohort" run --nproc-per-node 2 "$cohort" train "${model[@]}" --pp 2 --stop-at 6 \
    --save "$work/ck" >"$work/save.out" 2>&1 || fail "pp 2 save: $(tail -3 "$work/save.out")"
for f in ck ck.state6 ck.shard6-0-of-2 ck.shard6-1-of-2; do
    [ -e "$work/$f" ] || fail "checkpoint file $f missing: $(ls "$work")"
done

resume() { # name ranks options...
    local name=$1 n=$2
    shift 2
    local cmd=("$cohort" train "${model[@]}" "$@" --resume "$work/ck" --metrics "$work/$name.jsonl"
               --dump-params "$work/$name.bin")
    [ "$n" -gt 1 ] && cmd=("$cohort" run --nproc-per-node "$n" "${cmd[@]}")
    "${cmd[@]}" >"$work/$name.out" 2>&1 || { fail "$name: $(tail -3 "$work/$name.out")"; return; }
    # the resumed run logs steps 7..12: compare them with the same steps of the reference
    tail -n "$(wc -l < "$work/$name.jsonl")" "$work/ref.jsonl" >"$work/ref.tail.jsonl"
    "$py" "$src/tests/parallel/par_compare.py" "$work/ref.tail.jsonl" "$work/ref.bin" \
        "$work/$name.jsonl" "$work/$name.bin" $V $C $L $T >"$work/$name.cmp" ||
        fail "$name: $(cat "$work/$name.cmp")"
    echo "$name: $(cat "$work/$name.cmp")"
}
resume "pp 1" 1
resume "pp 2" 2 --pp 2
resume "pp 4" 4 --pp 4 --schedule gpipe
resume "dp 2 x pp 2" 4 --pp 2 --strategy ddp --micro-batch 1
resume "dp 2 x pp 2, zero1" 4 --pp 2 --strategy zero1 --micro-batch 1
# one device summing the tied embedding's gradients as the pipeline does continues the
# pipeline's run exactly: the losses of its steps 7..12 and its final parameters
"$cohort" run --nproc-per-node 2 "$cohort" train "${model[@]}" --pp 2 --metrics "$work/pp2full.jsonl" \
    --dump-params "$work/pp2full.bin" >"$work/pp2full.out" 2>&1 ||
    fail "uninterrupted pp 2: $(tail -3 "$work/pp2full.out")"
resume "pp 1, the pipeline's order" 1 --tied-grad-order pipeline
tail -n 6 "$work/pp2full.jsonl" >"$work/pp2full.tail.jsonl"
cp "$work/pp2full.bin" "$work/pp2full.tail.bin"
same_bits "pp 2 saved at step 6, resumed on one device in the pipeline's order, against pp 2" \
    pp2full.tail "pp 1, the pipeline's order"
# a checkpoint of ZeRO-1 replicas (one shard per rank) resumes in one process, to the final
# parameters of the uninterrupted ZeRO-1 pipeline
z1=("$cohort" run --nproc-per-node 4 "$cohort" train "${model[@]}" --pp 2 --strategy zero1 --micro-batch 1)
"${z1[@]}" --metrics "$work/z1full.jsonl" --dump-params "$work/z1full.bin" >"$work/z1full.out" 2>&1 ||
    fail "zero1 pipeline: $(tail -3 "$work/z1full.out")"
"${z1[@]}" --stop-at 6 --save "$work/z1" >"$work/z1.out" 2>&1 || fail "zero1 pipeline save: $(tail -3 "$work/z1.out")"
[ -e "$work/z1.shard6-3-of-4" ] || fail "zero1 pipeline shards: $(ls "$work" | grep z1)"
"$cohort" train "${model[@]}" --resume "$work/z1" --metrics "$work/z1r.jsonl" --dump-params "$work/z1r.bin" \
    >"$work/z1r.out" 2>&1 || fail "single from a zero1 pipeline checkpoint: $(tail -3 "$work/z1r.out")"
tail -n 6 "$work/z1full.jsonl" >"$work/z1full.tail.jsonl"
"$py" "$src/tests/parallel/par_compare.py" "$work/z1full.tail.jsonl" "$work/z1full.bin" "$work/z1r.jsonl" \
    "$work/z1r.bin" $V $C $L $T >"$work/z1r.cmp" || fail "single from zero1 pipeline: $(cat "$work/z1r.cmp")"
echo "single from a zero1 pipeline checkpoint: $(cat "$work/z1r.cmp")"
[ "$(wc -l < "$work/pp 2.jsonl")" -eq 6 ] || fail "resumed run logged $(wc -l < "$work/pp 2.jsonl") steps, want 6"
"$cohort" eval --checkpoint "$work/ck" --data "$work/c_val_000000.bin" --threads 1 \
    >"$work/eval.out" 2>&1 || fail "cohort eval of a pipeline checkpoint: $(tail -3 "$work/eval.out")"

long=("${model[@]}" --steps 150)
"$cohort" run --nproc-per-node 2 "$cohort" train "${long[@]}" --pp 2 --metrics "$work/full.jsonl" \
    >/dev/null 2>&1 || fail "uninterrupted pp 2 run"
# kill a stage: without restarts the job ends with the dead rank named, well before the 120 s
# communication timeout would end it (within 60 s, the bound of a loaded machine: the launcher
# stops the other stage at once, and kills it after its 5 s grace period)
for restarts in 0 1; do
    rm -f "$work/f$restarts.jsonl"
    "$cohort" run --run-id "pipeck$$-$restarts" --nproc-per-node 2 --max-restarts $restarts \
        "$cohort" train "${long[@]}" --pp 2 \
        --save "$work/f$restarts.ck" --save-every 20 --metrics "$work/f$restarts.jsonl" \
        >"$work/f$restarts.out" 2>&1 &
    launcher=$!
    kill_at_step "$work/f$restarts.jsonl" 50
    t0=$killed_at
    wait $launcher
    rc=$?
    t1=$(date +%s.%N)
    launcher=
    [ "$killed" -gt 0 ] || { fail "could not kill stage 1 mid-training"; continue; }
    if [ $restarts = 0 ]; then
        [ $rc -ne 0 ] || fail "the job with a dead stage exited 0"
        grep -q "job failed: rank 1 was killed by SIGKILL" "$work/f0.out" ||
            fail "the job with a dead stage does not name rank 1: $(tail -5 "$work/f0.out")"
        awk -v a="$t0" -v b="$t1" 'BEGIN { exit !(b - a < 60) }' ||
            fail "the job took $(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }') s to end after a stage died"
        echo "stage 1 killed at step $killed: job ended (exit $rc) in $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }') s"
    else
        [ $rc -eq 0 ] || fail "restarted pipeline failed ($rc): $(tail -5 "$work/f1.out")"
        grep -q "restart 1: resuming from" "$work/f1.out" || fail "no resume after the restart"
        a=$(last_loss "$work/full.jsonl") b=$(last_loss "$work/f1.jsonl")
        [ "$(last_step "$work/f1.jsonl")" = 150 ] && [ "$a" = "$b" ] ||
            fail "killed at step $killed, final loss $b, uninterrupted $a"
        echo "stage 1 killed at step $killed, restarted: final loss $b, uninterrupted $a"
    fi
done
# no segment of the killed jobs remains (other tests' jobs may be running beside this one)
left=$(ls /dev/shm 2>/dev/null | grep -F "pipeck$$-" || true)
[ -z "$left" ] || fail "shared memory left behind: $left"
par_done "pipeline checkpoints and faults handled"
