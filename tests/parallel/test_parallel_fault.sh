#!/usr/bin/env bash
# test_parallel_fault.sh: fault tolerance and sharded checkpoints. kill -9 of rank 1 in the middle
# of a ddp and of a zero2 run under `cohort run --max-restarts 1` with --save-every: the job
# restarts, resumes from the last checkpoint and ends with the final loss of an uninterrupted
# run (--deterministic: bit for bit). A ZeRO checkpoint is one shard per rank plus an index,
# only the newest set is kept (also what a job killed mid-cleanup left), and it resumes under
# another dp size and stage with the same final loss; a missing shard is refused with a clear
# error.
. "$(dirname "${BASH_SOURCE[0]}")/par_lib.sh"

par_prepare
par_model 256 2 2 64 64
model+=(--batch 4 --lr 1e-3 --deterministic --steps 150 --bucket-mb 0.05)

for s in ddp zero2; do
    "$cohort" run --nproc-per-node 2 "$cohort" train "${model[@]}" --strategy $s \
        --metrics "$work/$s.full.jsonl" >/dev/null 2>&1 || fail "$s uninterrupted run"
    "$cohort" run --nproc-per-node 2 --max-restarts 1 "$cohort" train "${model[@]}" --strategy $s \
        --save "$work/$s.ck" --save-every 20 --metrics "$work/$s.jsonl" >"$work/$s.out" 2>&1 &
    launcher=$!
    kill_at_step "$work/$s.jsonl" 50
    wait $launcher
    rc=$?
    launcher=
    [ "$killed" -gt 0 ] || fail "$s: could not kill rank 1 mid-training (last step $(last_step "$work/$s.jsonl"))"
    [ $rc -eq 0 ] || fail "$s: restarted job failed ($rc): $(tail -5 "$work/$s.out")"
    grep -q "restart 1: resuming from" "$work/$s.out" || fail "$s: no resume after the restart"
    a=$(last_loss "$work/$s.full.jsonl") b=$(last_loss "$work/$s.jsonl")
    [ "$(last_step "$work/$s.jsonl")" = 150 ] && [ "$a" = "$b" ] ||
        fail "$s: killed at step $killed, final loss $b, uninterrupted $a"
    echo "$s: rank 1 killed at step $killed; final loss $b, uninterrupted $a"
done

# the zero2 checkpoint: one shard per rank (the commit file holds the index), older sets removed
ls "$work" | grep -q '^zero2.ck.shard150-0-of-2$' && ls "$work" | grep -q '^zero2.ck.shard150-1-of-2$' ||
    fail "zero2 shards missing: $(ls "$work")"
[ "$(ls "$work" | grep -c '^zero2.ck.shard')" -eq 2 ] || fail "old shard sets kept: $(ls "$work")"

# a ZeRO checkpoint written by 2 ranks resumes at 4 ranks (zero3) and in one process
par_model 256 2 2 32 32
short=("${model[@]}" --deterministic --steps 12 --bucket-mb 0.03)
"$cohort" train "${short[@]}" --batch 8 --metrics "$work/ref.jsonl" >/dev/null 2>&1
# what a job killed while removing its previous set leaves: the save removes it, and only it
touch "$work/x.ck.shard3-1-of-2" "$work/x.ck.zero3.index" "$work/x.ck.shard6-0-of-2.tmp.99" \
    "$work/x.ck.shard3-1-of-2.keep"
"$cohort" run --nproc-per-node 2 "$cohort" train "${short[@]}" --batch 4 --strategy zero1 \
    --stop-at 6 --save "$work/x.ck" >/dev/null 2>&1 || fail "zero1 save at 2 ranks"
[ -e "$work/x.ck.shard3-1-of-2" ] || [ -e "$work/x.ck.zero3.index" ] ||
    [ -e "$work/x.ck.shard6-0-of-2.tmp.99" ] || [ ! -e "$work/x.ck.shard3-1-of-2.keep" ] &&
    fail "orphaned shard set not removed: $(ls "$work")"
"$cohort" run --nproc-per-node 4 "$cohort" train "${short[@]}" --batch 2 --strategy zero3 \
    --resume "$work/x.ck" --metrics "$work/x4.jsonl" >"$work/x4.out" 2>&1 ||
    fail "zero3 at 4 ranks from a 2-rank checkpoint: $(tail -3 "$work/x4.out")"
"$cohort" train "${short[@]}" --batch 8 --resume "$work/x.ck" --metrics "$work/x1.jsonl" \
    >"$work/x1.out" 2>&1 || fail "single from a 2-rank checkpoint: $(tail -3 "$work/x1.out")"
ref=$(last_loss "$work/ref.jsonl")
for f in x4 x1; do
    got=$(last_loss "$work/$f.jsonl")
    awk -v a="$ref" -v b="$got" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 1e-5 * a) }' ||
        fail "$f: resumed final loss $got, uninterrupted $ref"
done

# a missing shard is an error naming it, not a silent zero state
rm "$work/x.ck.shard6-1-of-2"
out=$("$cohort" run --nproc-per-node 2 "$cohort" train "${short[@]}" --batch 4 --strategy zero1 \
    --resume "$work/x.ck" 2>&1)
[ $? -ne 0 ] && echo "$out" | grep -q "x.ck.shard6-1-of-2" || fail "missing shard not reported: $out"
par_done "fault tolerance and sharded checkpoints work"
