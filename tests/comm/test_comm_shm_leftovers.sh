#!/usr/bin/env bash
# test_comm_shm_leftovers.sh: a segment that a killed run left under its name (its rank 0 killed
# with -9 while it waited for the others to join, under no launcher that would remove it, as
# under mpirun or srun) is removed by the next rank 0 of the same user that creates one, once
# the killed run's join deadline is past; a live run's segment, inside its join deadline, is
# left alone, and that run then completes.
. "$(dirname "$0")/comm_lib.sh"

hand_rank() { # JOB TIMEOUT RANK: one rank of 2 over shared memory, started by hand (in a
               # subshell, which it replaces: $! of `hand_rank ... &` is the rank's pid)
    exec env -u COHORT_RANK -u COHORT_WORLD_SIZE RANK="$3" WORLD_SIZE=2 LOCAL_RANK="$3" \
        LOCAL_WORLD_SIZE=2 COHORT_JOB_ID="$1" COHORT_COMM=shm COHORT_COMM_TIMEOUT="$2" \
        "$rank_bin" allreduce 1
}
seg_of() { ls /dev/shm 2>/dev/null | grep -F "cohort-$user-$1-r" | head -1; }
wait_seg() { # JOB: until its segment exists (at most 100 s: a loaded machine)
    for _ in $(seq 2000); do [ -n "$(seg_of "$1")" ] && return 0; sleep 0.05; done
    return 1
}
dead="ctest$$-dead$RANDOM" live="ctest$$-live$RANDOM"

# the killed run: a 2 s join timeout, so its deadline is at most 3 s after its segment appeared
hand_rank "$dead" 2 0 >"$comm_tmp/dead.log" 2>&1 &
dead_pid=$!
wait_seg "$dead"
appeared=$(date +%s)
kill -9 "$dead_pid"
wait "$dead_pid" 2>/dev/null
dead_seg=$(seg_of "$dead")
# a live run waiting for its rank 1 (60 s to join)
hand_rank "$live" 60 0 >"$comm_tmp/live0.log" 2>&1 &
live_pid=$!
wait_seg "$live"
live_seg=$(seg_of "$live")
if [ -z "$dead_seg" ] || [ -z "$live_seg" ]; then
    echo "FAIL premise: the killed run's segment '$dead_seg' or the live run's '$live_seg' is missing"
    cat "$comm_tmp/dead.log"
    fails=$((fails + 1))
fi
# past the killed run's deadline and the 5 s slack (no rank of its own will ever unlink its
# segment; a comm test that ctest runs beside this one may remove it first, by the same rule)
while [ "$(date +%s)" -le $((appeared + 3 + 5 + 1)) ]; do sleep 0.2; done
expect_ok "a run after the killed one" 2 "$rank_bin" allreduce 1,1000
if [ -n "$dead_seg" ] && [ -e "/dev/shm/$dead_seg" ]; then
    echo "FAIL the killed run's segment $dead_seg is still there"
    fails=$((fails + 1))
else
    echo "ok   the killed run's segment was removed by the next run"
fi
if [ -n "$live_seg" ] && [ -e "/dev/shm/$live_seg" ]; then
    echo "ok   the live run's segment was left alone"
else
    echo "FAIL the live run's segment '$live_seg' was removed inside its join deadline"
    fails=$((fails + 1))
fi
(hand_rank "$live" 60 1) >"$comm_tmp/live1.log" 2>&1
rc1=$?
wait "$live_pid"
rc0=$?
if [ "$rc0" -eq 0 ] && [ "$rc1" -eq 0 ]; then
    echo "ok   the live run completed"
else
    echo "FAIL the live run: ranks exited $rc0 and $rc1"
    cat "$comm_tmp"/live*.log
    fails=$((fails + 1))
fi
job=$live check_no_shm "the live run"
job=$dead check_no_shm "the killed run"
finish
