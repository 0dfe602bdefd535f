#!/usr/bin/env bash
# test_ckpt_interrupt.sh: Ctrl-C during a sharded save lets the save finish on every rank, then
# the job stops as docs/train.md says. A 2-rank job saving every step (tp 2, and zero1) is held
# at the start of its third save on one rank (COHORT_CKPT_PAUSE) until the other rank's shard of
# that step is written, so both ranks are inside the save; then the launcher gets SIGINT, which
# it forwards to every rank. The step's save must be committed and whole (it resumes), no
# temporary file left, the job's exit status 130 and its line naming that step. The ranks stop
# together: when the signal reaches only the paused rank 1 (as when another node's launcher was
# interrupted), rank 0 stops after the same save, with the same line, instead of running a
# step alone.
. "$(dirname "${BASH_SOURCE[0]}")/par_lib.sh"

par_prepare
# big enough that a save is not instant (about 7 MB of shards a step)
par_model 256 4 4 192 32
model+=(--batch 2 --lr 1e-3 --steps 1000)

# interrupt NAME RANK OPTIONS...: RANK paused at the start of save 3 (step 3), SIGINT to the
# launcher (to=launcher) or to the paused rank alone (to=rank) once the other rank's shard of
# step 3 exists; the checkpoint then resumed by one process with the options in the array
# `single` (the job's global batch)
interrupt() {
    local name=$1 rank=$2 ck=$work/$1.ck other=$((1 - $2)) rc line
    shift 2
    set -m # the launcher gets SIGINT's default handling, as in a terminal (a script's jobs ignore it)
    COHORT_CKPT_PAUSE="$rank:3" "$cohort" run --nproc-per-node 2 --grace 60 "$cohort" train \
        "${model[@]}" "$@" --save "$ck" --save-every 1 >"$work/$name.out" 2>&1 &
    launcher=$!
    set +m
    local ready=0
    for _ in $(seq 2400); do # 120 s: a loaded machine, a sanitizer build
        if grep -q "checkpoint pause: rank $rank at the start of save 3" "$work/$name.out" &&
            ls "$ck".shard3*-$other-of-2 2>/dev/null | grep -qv '\.tmp\.'; then
            ready=1
            break
        fi
        kill -0 $launcher 2>/dev/null || break
        sleep 0.05
    done
    [ $ready = 1 ] || fail "$name: the job did not reach the pause: $(tail -5 "$work/$name.out")"
    if [ "$to" = rank ]; then
        kill -INT "$(rank_pid $launcher $rank)" || fail "$name: no rank $rank to signal"
    else
        kill -INT $launcher
    fi
    for _ in $(seq 1200); do kill -0 $launcher 2>/dev/null || break; sleep 0.05; done
    kill -KILL $launcher 2>/dev/null && fail "$name: SIGINT did not end the job in 60 s"
    wait $launcher
    rc=$?
    launcher=
    line=$(grep "interrupted (SIGINT)" "$work/$name.out")
    [ $rc -eq 130 ] && echo "$line" | grep -qF "cohort train: interrupted (SIGINT) after step 3; last checkpoint: step 3 in '$ck'" ||
        fail "$name (rank $rank paused): rc $rc, line '$line': $(tail -5 "$work/$name.out")"
    local left
    left=$(cd "$work" && ls "$name".ck* | grep -E '\.tmp\.|shard[12][^0-9]|state[12]$')
    [ -z "$left" ] || fail "$name: files of an unfinished save or an older step left: $left"
    # the committed step is 3 and whole: a single process resumes it at step 4
    "$cohort" train "${model[@]}" "${single[@]}" --steps 4 --resume "$ck" --metrics "$work/$name.jsonl" \
        >"$work/$name.resume" 2>&1 || fail "$name: resume: $(tail -3 "$work/$name.resume")"
    [ "$(last_step "$work/$name.jsonl")" = 4 ] && [ "$(wc -l <"$work/$name.jsonl")" = 1 ] ||
        fail "$name: the resumed run did not start at step 4: $(cat "$work/$name.jsonl")"
    echo "$name, rank $rank paused in save 3, SIGINT to the $to: rc $rc, '$line'; files $(cd "$work" && ls "$name".ck* | tr '\n' ' ')"
}

single=() to=launcher
interrupt tp0 0 --tp 2
interrupt tp1 1 --tp 2
to=rank
interrupt tp1only 1 --tp 2
single=(--grad-accum 2) to=launcher # dp 2
interrupt zero1 1 --strategy zero1

# a malformed plan is refused, naming it
expect 2 "COHORT_CKPT_PAUSE 'x'" env COHORT_CKPT_PAUSE=x "$cohort" train "${model[@]}" --steps 1 \
    --save "$work/bad.ck"
par_done "SIGINT during a sharded save: the save finishes on every rank, then the job stops"
