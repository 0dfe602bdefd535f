#!/usr/bin/env bash
# test_comm_faults.sh: a rank killed with -9 mid-all-reduce makes every other rank fail with
# PEER_LOST naming it (they check their peers every 100 ms: within 1 s on an idle machine; the
# test accepts 30 s, far below the 120 s after which they would time out instead, because a
# loaded 2-core machine running 8 ranks may not schedule a survivor for seconds); a rank calling with another count or type makes all fail
# with MISMATCH describing both calls; a rank that never calls makes the others time out
# naming it, and one that never joins makes the others' create time out naming it; a segment a
# killed run of the same job id left is replaced; ranks that disagree on the arena size are
# refused at once. Nothing may remain in /dev/shm after any of
# them.
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
# naming both sizes (before, they waited the whole timeout and blamed each other).
COHORT_COMM_TIMEOUT=10 launch 2 sh -c 'COHORT_SHM_ARENA=$((4096 * (RANK + 1))) exec "$0" sweep' \
    "$rank_bin" >"$log" 2>&1
if [ "$(grep -c "^comm_rank: .*ranks disagree on WORLD_SIZE or COHORT_SHM_\*" "$log")" -eq 2 ]; then
    echo "ok   arena sizes that differ between ranks"
else
    echo "FAIL arena sizes that differ between ranks: not refused on both ranks"
    tail -20 "$log"
    fails=$((fails + 1))
fi
check_no_shm "arena sizes that differ between ranks"
finish
