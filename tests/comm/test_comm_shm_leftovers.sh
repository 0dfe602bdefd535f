#!/usr/bin/env bash
# test_comm_shm_leftovers.sh: a segment that a killed run left under its name (its rank 0 killed
# with -9 while it waited for the others to join, under no launcher that would remove it, as
# under mpirun or srun) is removed by the next creator of a segment of the same user, as no live
# creator holds its lock; a live run's segment, whose creator holds it, is left alone, and that
# run then completes. A FIFO given a segment's name (anyone may make one in /dev/shm) does not
# block the sweep, and is left alone.
. "$(dirname "$0")/comm_lib.sh"

hand_rank() { # JOB RANK: one rank of 2 over shared memory, started by hand (in a subshell,
              # which it replaces: $! of `hand_rank ... &` is the rank's pid)
    exec env -u COHORT_RANK -u COHORT_WORLD_SIZE RANK="$2" WORLD_SIZE=2 LOCAL_RANK="$2" \
        LOCAL_WORLD_SIZE=2 COHORT_JOB_ID="$1" COHORT_COMM=shm COHORT_COMM_TIMEOUT=60 \
        "$rank_bin" allreduce 1
}
seg_of() { ls /dev/shm 2>/dev/null | grep -F "cohort-$user-$1-r" | head -1; }
wait_ready() { # JOB: until its segment has its header (at most 100 s: a loaded machine)
    local seg
    for _ in $(seq 2000); do
        seg=$(seg_of "$1")
        [ -n "$seg" ] && seg_ready "$seg" && return 0
        sleep 0.05
    done
    return 1
}
dead="ctest$$-dead$RANDOM" live="ctest$$-live$RANDOM"

hand_rank "$dead" 0 >"$comm_tmp/dead.log" 2>&1 &
dead_pid=$!
wait_ready "$dead"
kill -9 "$dead_pid"
wait "$dead_pid" 2>/dev/null
dead_seg=$(seg_of "$dead")
hand_rank "$live" 0 >"$comm_tmp/live0.log" 2>&1 &
live_pid=$!
wait_ready "$live"
live_seg=$(seg_of "$live")
if [ -z "$dead_seg" ] || [ -z "$live_seg" ]; then
    echo "FAIL premise: the killed run's segment '$dead_seg' or the live run's '$live_seg' is missing"
    cat "$comm_tmp/dead.log" "$comm_tmp/live0.log"
    fails=$((fails + 1))
fi

fifo="/dev/shm/cohort-$user-ctest$$-fifo$RANDOM-r0"
trap 'rm -rf "$comm_tmp" "$fifo"' EXIT INT TERM
mkfifo "$fifo" || fails=$((fails + 1))
new_job
if timeout -k 5 120 "$cohort" run --standalone --nproc-per-node 2 --run-id "$job" --prefix '' \
    -- "$rank_bin" allreduce 1,1000 >"$log" 2>&1; then
    echo "ok   a run after the killed one (a FIFO among the names)"
else
    echo "FAIL a run after the killed one: exit $? (124: blocked)"
    tail -20 "$log"
    fails=$((fails + 1))
fi
check_no_shm "a run after the killed one"
[ -p "$fifo" ] && fifo_left=1 || fifo_left=0
rm -f "$fifo"
if [ -n "$dead_seg" ] && [ -e "/dev/shm/$dead_seg" ]; then
    echo "FAIL the killed run's segment $dead_seg is still there"
    fails=$((fails + 1))
else
    echo "ok   the killed run's segment was removed by the next run"
fi
if [ -n "$live_seg" ] && [ -e "/dev/shm/$live_seg" ] && [ "$fifo_left" = 1 ]; then
    echo "ok   the live run's segment and the FIFO were left alone"
else
    echo "FAIL the live run's segment '$live_seg' or the FIFO was removed"
    fails=$((fails + 1))
fi
(hand_rank "$live" 1) >"$comm_tmp/live1.log" 2>&1
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
