#!/usr/bin/env bash
# test_comm_faults.sh: a rank killed with -9 mid-all-reduce makes every other rank fail with
# PEER_LOST naming it (they check their peers every 100 ms: within 1 s on an idle machine; the
# test accepts 30 s, far below the 120 s after which they would time out instead, because a
# loaded 2-core machine running 8 ranks may not schedule a survivor for seconds); a rank calling with another count or type makes all fail
# with MISMATCH describing both calls; a rank that never calls makes the others time out
# naming it, and one that never joins makes the others' create time out naming it; a segment a
# killed run of the same job id left is replaced; ranks that disagree on the arena size are
# refused at once; a second live job with the same job id fails at once. Nothing may remain in
# /dev/shm after any of them.
. "$(dirname "$0")/comm_lib.sh"

kill_test 2
kill_test 4
kill_test 8
for n in 2 5; do
    expect_ok "mismatch on $n ranks" "$n" "$rank_bin" mismatch
done
# a 1 s timeout bounds the create too: the ranks start it together (comm_rank's DIR)
mkdir "$comm_tmp/silent" "$comm_tmp/absent"
COHORT_COMM_TIMEOUT=1 expect_ok "silent rank on 3 ranks" 3 "$rank_bin" silent "$comm_tmp/silent"
COHORT_COMM_TIMEOUT=1 expect_ok "absent rank on 3 ranks" 3 "$rank_bin" absent "$comm_tmp/absent"

# A segment left by a killed run of the same job id (its header valid, its creator gone) is
# replaced by the next run: no rank may join it. It is a copy of a real one, taken while rank 0
# of an absent run waits in it; each run gets one planted before it starts.
stale_test() {
    local copy="$comm_tmp/stale.seg" seg="" i spawner
    new_job
    COHORT_COMM_TIMEOUT=3 launch 2 "$rank_bin" absent >"$comm_tmp/absent.log" 2>&1 &
    job_fresh=0
    spawner=$!
    for i in $(seq 300); do
        seg=$(ls /dev/shm 2>/dev/null | grep -F "cohort-$user-$job-r" | head -1)
        [ -n "$seg" ] && cp "/dev/shm/$seg" "$copy" 2>/dev/null && break
        seg=""
        kill -0 "$spawner" 2>/dev/null || break
        sleep 0.05
    done
    wait "$spawner"
    if [ -z "$seg" ]; then
        echo "FAIL stale segment: the absent run's segment never appeared"
        cat "$comm_tmp/absent.log"
        fails=$((fails + 1))
        return
    fi
    for i in 1 2 3 4 5; do
        cp "$copy" "/dev/shm/$seg"
        job_fresh=1 # the same job id again
        expect_ok "run $i over a stale segment" 2 "$rank_bin" allreduce 1,1000
    done
    rm -f "/dev/shm/$seg"
}
stale_test

# Ranks given different arena sizes make segments of different sizes: both refuse at once,
# naming both sizes (before, they waited the whole timeout and blamed each other). Started by
# hand, so that no launcher stops rank 0 before it has seen rank 1's refusal.
arena_rank() { # RANK: one rank of 2 with job id $job, an arena that differs by rank
    env -u COHORT_RANK -u COHORT_WORLD_SIZE RANK="$1" WORLD_SIZE=2 LOCAL_RANK="$1" \
        LOCAL_WORLD_SIZE=2 COHORT_JOB_ID="$job" COHORT_COMM=shm COHORT_COMM_TIMEOUT=30 \
        COHORT_SHM_ARENA=$((4096 * ($1 + 1))) "$rank_bin" sweep
}
new_job
arena_rank 0 >"$comm_tmp/arena.0" 2>&1 &
pid0=$!
arena_rank 1 >"$comm_tmp/arena.1" 2>&1
rc1=$?
wait "$pid0"
rc0=$?
sizes='holds 2 ranks and \([0-9]*\) bytes but .* expects 2 and \([0-9]*\): ranks disagree on WORLD_SIZE or COHORT_SHM_\*'
named=$(cat "$comm_tmp"/arena.* | sed -n "s/^comm_rank: .*$sizes.*/\1 \2/p" | awk '$1 != $2' | wc -l)
if [ "$rc0" -ne 0 ] && [ "$rc1" -ne 0 ] && [ "$named" -eq 2 ]; then
    echo "ok   arena sizes that differ between ranks"
else
    echo "FAIL arena sizes that differ between ranks: exits $rc0 $rc1, $named of 2 name both sizes"
    cat "$comm_tmp"/arena.*
    fails=$((fails + 1))
fi
check_no_shm "arena sizes that differ between ranks"

# The same under cohort run: rank 1's refusal fails the job, and the launcher may stop rank 0
# before rank 0 has seen it; the segment rank 0 made is still removed.
COHORT_COMM_TIMEOUT=30 launch 2 sh -c 'COHORT_SHM_ARENA=$((4096 * (RANK + 1))) exec "$0" sweep' \
    "$rank_bin" >"$log" 2>&1
rc=$?
if [ "$rc" -ne 0 ] && grep -q "^comm_rank: .*ranks disagree on WORLD_SIZE or COHORT_SHM_\*" "$log" &&
    ! grep -q "within 30 s" "$log"; then
    echo "ok   arena sizes that differ between ranks under cohort run"
else
    echo "FAIL arena sizes that differ between ranks under cohort run: exit $rc"
    tail -20 "$log"
    fails=$((fails + 1))
fi
check_no_shm "arena sizes that differ between ranks under cohort run"

# A rank that fails before it joins (a script's import error), once rank 0 has made the segment
# and waits for it in there: the launcher stops rank 0 there, and removes the segment it made.
new_job
job_fresh=1
COHORT_COMM_TIMEOUT=60 launch 2 sh -c '
    if [ "$RANK" = 1 ]; then
        i=0
        until seg=$(ls /dev/shm | grep -F "cohort-$1-$2-r" | head -1) && [ -n "$seg" ] &&
            [ "$(od -An -tx8 -N8 "/dev/shm/$seg" 2>/dev/null | tr -d " ")" = 636f686f72747368 ]; do
            i=$((i + 1)); [ "$i" -lt 2000 ] || exit 4; sleep 0.05
        done
        echo "rank 1 fails before it joins" >&2
        exit 3
    fi
    exec "$0" sweep' "$rank_bin" "$user" "$job" >"$log" 2>&1
rc=$?
if [ "$rc" -eq 3 ] && grep -q "rank 1 fails before it joins" "$log"; then
    echo "ok   a rank that fails before it joins"
else
    echo "FAIL a rank that fails before it joins: exit $rc (3 expected)"
    tail -20 "$log"
    fails=$((fails + 1))
fi
check_no_shm "a rank that fails before it joins"

# The launcher SIGKILLed while rank 0 waits in its segment for rank 1 (which never joins): its
# guard kills the ranks and removes the segment.
new_job
COHORT_COMM_TIMEOUT=60 "$cohort" run --standalone --nproc-per-node 2 --run-id "$job" --prefix '' \
    -- sh -c 'if [ "$RANK" = 1 ]; then exec sleep 120; fi; exec "$0" sweep' "$rank_bin" \
    >"$log" 2>&1 &
launcher=$!
seg=""
for i in $(seq 2000); do
    seg=$(ls /dev/shm 2>/dev/null | grep -F "cohort-$user-$job-r" | head -1)
    [ -n "$seg" ] && seg_ready "$seg" && break
    sleep 0.05
done
kill -9 "$launcher"
wait "$launcher" 2>/dev/null
for i in $(seq 600); do # the guard waits for the killed ranks to go before it removes it
    [ -e "/dev/shm/$seg" ] || break
    sleep 0.05
done
if [ -n "$seg" ]; then
    echo "ok   the launcher killed while rank 0 waits in its segment"
else
    echo "FAIL the launcher killed while rank 0 waits in its segment: no segment appeared"
    cat "$log"
    fails=$((fails + 1))
fi
check_no_shm "the launcher killed while rank 0 waits in its segment"

# Two live jobs given the same job id: the second fails at once naming the id, and the first
# keeps its segment (before, the second's rank 0 replaced it and the two jobs' ranks mixed).
# The first is 3 ranks whose last never joins, so its segment stays under the name until its
# 15 s timeout; the second starts under another `cohort run` while it waits.
two_jobs_test() {
    local seg="" i first out="$comm_tmp/second.log"
    new_job
    COHORT_COMM_TIMEOUT=15 launch 3 "$rank_bin" absent >"$comm_tmp/first.log" 2>&1 &
    job_fresh=0
    first=$!
    for i in $(seq 300); do
        seg=$(ls /dev/shm 2>/dev/null | grep -F "cohort-$user-$job-r" | head -1)
        [ -n "$seg" ] && break
        kill -0 "$first" 2>/dev/null || break
        sleep 0.05
    done
    job_fresh=1 # the same job id again
    launch 2 "$rank_bin" allreduce 1,1000 >"$out" 2>&1
    local rc=$?
    wait "$first"
    local first_rc=$?
    if [ -n "$seg" ] && [ "$rc" -ne 0 ] && ! grep -q "passed" "$out" &&
        grep -q "^comm_rank: .*belongs to another job running with the same job id '$job' " "$out" &&
        [ "$first_rc" -eq 0 ]; then
        echo "ok   a second live job with the same job id"
    else
        echo "FAIL a second live job with the same job id: exit $rc (the first: $first_rc)"
        cat "$out" "$comm_tmp/first.log"
        fails=$((fails + 1))
    fi
    check_no_shm "a second live job with the same job id"
}
two_jobs_test

# Ranks started by hand (no launcher that tells two launches apart): a rank that finds its
# slot taken makes every rank of the segment fail, naming the rank and the job id, instead of
# completing a world of two jobs' ranks. Ranks 0 and 1 of 3, then another rank 1.
hand_rank() { # RANK: one rank of 3 with job id $job over shared memory
    env -u COHORT_RANK -u COHORT_WORLD_SIZE RANK="$1" WORLD_SIZE=3 LOCAL_RANK="$1" \
        LOCAL_WORLD_SIZE=3 COHORT_JOB_ID="$job" COHORT_COMM=shm COHORT_COMM_TIMEOUT=15 \
        "$rank_bin" allreduce 1
}
new_job
hand_rank 0 >"$comm_tmp/hand.0" 2>&1 &
pid0=$!
hand_rank 1 >"$comm_tmp/hand.1" 2>&1 &
pid1=$!
for i in $(seq 300); do # rank 0 made the segment (whichever rank 1 claims slot 1 first wins)
    ls /dev/shm 2>/dev/null | grep -qF "cohort-$user-$job-r" && break
    sleep 0.05
done
hand_rank 1 >"$comm_tmp/hand.2" 2>&1
rc2=$?
wait "$pid0"
rc0=$?
wait "$pid1"
rc1=$?
twice=$(grep -l "^comm_rank: .*joined twice as rank 1 .*same job id '$job'" "$comm_tmp"/hand.* |
    wc -l)
if [ "$rc0" -ne 0 ] && [ "$rc1" -ne 0 ] && [ "$rc2" -ne 0 ] && [ "$twice" -eq 3 ]; then
    echo "ok   two rank 1s in one segment"
else
    echo "FAIL two rank 1s in one segment: exits $rc0 $rc1 $rc2, $twice of 3 name it"
    cat "$comm_tmp"/hand.*
    fails=$((fails + 1))
fi
check_no_shm "two rank 1s in one segment"
finish
