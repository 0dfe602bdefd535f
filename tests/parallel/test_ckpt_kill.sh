#!/usr/bin/env bash
# test_ckpt_kill.sh: a checkpoint is committed as a whole. A rank killed (COHORT_CKPT_KILL, the
# save's fault-injection points) at each step of the second save of a 2-rank job under
# `cohort run --max-restarts 1`, for the single-file (ddp), tp 2 and zero3 layouts: the job
# always restarts, resumes from the newest committed checkpoint (the new one once the weights
# naming it are renamed into place, else the previous one, never a torn pair) and ends at the
# uninterrupted run's final loss, bit for bit.
. "$(dirname "${BASH_SOURCE[0]}")/par_lib.sh"

par_prepare
par_model 256 2 2 32 32
model+=(--batch 4 --lr 1e-3 --deterministic --steps 6 --bucket-mb 0.03)

# layout NAME RANK OPTIONS...: kill RANK at every point of its second save (step 4) in turn
layout() {
    local name=$1 rank=$2 p rc lines want
    shift 2
    "$cohort" run --nproc-per-node 2 "$cohort" train "${model[@]}" "$@" \
        --metrics "$work/$name.full.jsonl" >/dev/null 2>&1 || { fail "$name: uninterrupted run"; return; }
    local ref
    ref=$(last_loss "$work/$name.full.jsonl")
    for p in $(seq 1 30); do
        rm -f "$work/$name.ck"* "$work/$name.jsonl"
        COHORT_CKPT_KILL="$rank:2:$p" "$cohort" run --nproc-per-node 2 --max-restarts 1 \
            "$cohort" train "${model[@]}" "$@" --save "$work/$name.ck" --save-every 2 \
            --metrics "$work/$name.jsonl" >"$work/$name.out" 2>&1
        rc=$?
        if ! grep -q "checkpoint fault: killed" "$work/$name.out"; then
            [ $rc -eq 0 ] || fail "$name: run without a kill failed: $(tail -3 "$work/$name.out")"
            break # past the save's last point
        fi
        local at
        at=$(grep -o "checkpoint fault: killed.*" "$work/$name.out" | head -1)
        [ $rc -eq 0 ] || { fail "$name rank $rank, $at: restarted job failed ($rc): $(tail -3 "$work/$name.out")"; continue; }
        grep -q "restart 1: resuming from" "$work/$name.out" ||
            fail "$name rank $rank, $at: the restart did not resume"
        # committed once the weights are renamed: resumed from step 4 (steps 1..6 logged once),
        # else from step 2 (steps 3 and 4 logged again). Rank 0 logs a step before it saves:
        # when rank 1 is the one killed, rank 0 may be stopped before it logged step 4 (a loaded
        # machine), so the first attempt's step 4 may be missing then.
        want="1 2 3 4 3 4 5 6"
        echo "$at" | grep -qE "\((renamed|committed, cleanup next) $work/$name.ck\)" && want="1 2 3 4 5 6"
        steps=$(sed -nE 's/.*"step":([0-9]+),.*/\1/p' "$work/$name.jsonl" | tr '\n' ' ')
        [ "$steps" = "$want " ] || { [ "$rank" != 0 ] && [ "$want" = "1 2 3 4 3 4 5 6" ] && [ "$steps" = "1 2 3 3 4 5 6 " ]; } ||
            fail "$name rank $rank, $at: metrics of steps $steps, expected $want"
        [ "$(last_step "$work/$name.jsonl")" = 6 ] && [ "$(last_loss "$work/$name.jsonl")" = "$ref" ] ||
            fail "$name rank $rank, $at: final loss $(last_loss "$work/$name.jsonl"), uninterrupted $ref"
        echo "$name rank $rank killed at ${at#checkpoint fault: killed at }: resumed, final loss equal"
    done
    [ "$p" -gt 4 ] || [ "$rank" != 0 ] || fail "$name: only $((p - 1)) points in rank 0's save"
}

layout single 0 --strategy ddp
layout tp 0 --tp 2
layout zero3 0 --strategy zero3
layout zero3 1 --strategy zero3

# a malformed plan is refused, naming it
expect 2 "COHORT_CKPT_KILL 'x'" env COHORT_CKPT_KILL=x "$cohort" train "${model[@]}" --steps 2 \
    --save "$work/bad.ck"
par_done "a kill at any point of a save resumes from the newest committed checkpoint"
