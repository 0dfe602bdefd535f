#!/usr/bin/env bash
# test_ckpt_same_step.sh: a save at the step of the checkpoint already committed at its path (a
# rerun of an experiment with another learning rate and the same --save and --steps) never
# writes over the files that commit names: it takes the other set of names of that step
# (ck.state4.1, ck.shard4.1-R-of-N), so a rank killed at any point of it (COHORT_CKPT_KILL)
# leaves the old checkpoint whole until the new commit replaces it. For the single-file layout
# (one device) and the sharded one (tp 2): after each kill, resuming the checkpoint for 2 more
# steps ends bit for bit where resuming the old run's intact copy ends, or, once the new commit
# is in place, where resuming the new run's does; never a mix (the old commit naming the new
# save's state or shards, which the same step made impossible to detect). Then a third save of
# the step goes back to the first set, and each commit's cleanup leaves only its own set.
. "$(dirname "${BASH_SOURCE[0]}")/par_lib.sh"

par_prepare
par_model 256 2 2 32 32
model+=(--batch 4 --deterministic --bucket-mb 0.03)

# train NAME RANKS OPTIONS...: cohort train (under cohort run when RANKS > 1), output in NAME.out
train() {
    local name=$1 n=$2
    shift 2
    if [ "$n" -gt 1 ]; then
        "$cohort" run --nproc-per-node "$n" "$cohort" train "${model[@]}" "$@" >"$work/$name.out" 2>&1
    else
        "$cohort" train "${model[@]}" "$@" >"$work/$name.out" 2>&1
    fi
}
# resumed DIR NAME RANKS OPTIONS...: the final loss of 2 more steps from DIR/ck
resumed() {
    local dir=$1 name=$2 n=$3
    shift 3
    rm -f "$work/$name.jsonl"
    train "$name" "$n" "$@" --lr 1e-3 --steps 6 --resume "$dir/ck" --metrics "$work/$name.jsonl" ||
        { echo "resume failed: $(tail -2 "$work/$name.out")"; return; }
    [ "$(last_step "$work/$name.jsonl")" = 6 ] && last_loss "$work/$name.jsonl"
}
# names DIR: the checkpoint's file names in DIR, on one line
names() { (cd "$1" && ls ck* | tr '\n' ' '); }

layout() {
    local name=$1 n=$2 p
    shift 2
    local d=$work/$name
    mkdir -p "$d/a" "$d/b" "$d/run"
    # A, the committed checkpoint at step 4; B, the rerun at another learning rate, whole
    train "$name-a" "$n" "$@" --lr 1e-3 --steps 4 --save "$d/a/ck" || { fail "$name: run A: $(tail -2 "$work/$name-a.out")"; return; }
    cp "$d/a/"ck* "$d/b/"
    train "$name-b" "$n" "$@" --lr 5e-3 --steps 4 --save "$d/b/ck" || { fail "$name: run B: $(tail -2 "$work/$name-b.out")"; return; }
    local sa sb
    sa=$(names "$d/a")
    sb=$(names "$d/b")
    echo "$name: A committed $sa; B over it: $sb"
    case "$sb" in *".state4.1 "*) ;; *) fail "$name: B at A's step did not take the second set of names: $sb" ;; esac
    case " $sb" in *" ck.state4 "*) fail "$name: B's commit left A's state file: $sb" ;; esac
    local la lb
    la=$(resumed "$d/a" "$name-ra" "$n" "$@")
    lb=$(resumed "$d/b" "$name-rb" "$n" "$@")
    [ -n "$la" ] && [ -n "$lb" ] && [ "$la" != "$lb" ] ||
        { fail "$name: resumed A '$la' and B '$lb' must both end, apart"; return; }
    # B killed at every point of its save, over A's intact files
    local rank before
    for rank in $(seq 0 $((n - 1))); do
        before=$fails
        for p in $(seq 1 30); do
            rm -f "$d/run/"ck*
            cp "$d/a/"ck* "$d/run/"
            (COHORT_CKPT_KILL="$rank:1:$p" train "$name-k" "$n" "$@" --lr 5e-3 --steps 4 \
                --save "$d/run/ck") 2>/dev/null # no "Killed" line from this shell
            grep -q "checkpoint fault: killed" "$work/$name-k.out" || break # past the last point
            local at want got
            at=$(grep -o "checkpoint fault: killed.*" "$work/$name-k.out" | head -1)
            want=$la
            echo "$at" | grep -qE "\((renamed|committed, cleanup next) $d/run/ck\)" && want=$lb
            got=$(resumed "$d/run" "$name-rk" "$n" "$@")
            [ "$got" = "$want" ] ||
                fail "$name rank $rank, ${at#checkpoint fault: }: resumed to '$got', expected '$want' ($([ "$want" = "$la" ] && echo A || echo B), A $la, B $lb); files: $(names "$d/run")"
        done
        [ "$p" -gt 3 ] || fail "$name rank $rank: only $((p - 1)) points in its save"
        [ $fails -eq "$before" ] &&
            echo "$name: rank $rank killed at each of the $((p - 1)) points of B's save: each resume ended as A's or, once committed, B's"
    done
    # a third save of step 4 goes back to the first set; its cleanup removes B's
    train "$name-c" "$n" "$@" --lr 3e-3 --steps 4 --save "$d/b/ck" || { fail "$name: run C: $(tail -2 "$work/$name-c.out")"; return; }
    local sc
    sc=$(names "$d/b")
    echo "$name: C over B: $sc"
    [ "$(echo "$sc" | sed 's/\.state4 / /; s/\.shard4-/X/g')" = "$(echo "$sa" | sed 's/\.state4 / /; s/\.shard4-/X/g')" ] ||
        fail "$name: C at B's step should take the first set again, as A's names ($sa): $sc"
    local lc
    lc=$(resumed "$d/b" "$name-rc" "$n" "$@")
    [ -n "$lc" ] && [ "$lc" != "$lb" ] && [ "$lc" != "$la" ] ||
        fail "$name: resumed C '$lc' should end apart from A '$la' and B '$lb'"
}

layout single 1
layout tp 2 --tp 2

par_done "a save at the committed checkpoint's own step leaves it whole until its own commit: single-file and sharded layouts"
