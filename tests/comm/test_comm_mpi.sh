#!/usr/bin/env bash
# test_comm_mpi.sh: the comm suite over the MPI transport (the plugin libcohort_mpi.so),
# started by mpirun on 1, 2, 3 and 8 ranks (--oversubscribe: more ranks than cores): the full
# correctness sweep, split, async, rounding, mismatch and a silent rank timing out.
. "$(dirname "$0")/comm_lib.sh"
command -v mpirun >/dev/null && [ -f "$build/libcohort_mpi.so" ] || {
    echo "skipped: mpirun or libcohort_mpi.so missing"
    exit 77
}
# waiting ranks yield the cpu (mpirun passes OMPI_MCA_* on): more ranks than cores, beside
# another test (ctest -j2), busy-polled a third more cpu time
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_mpi_yield_when_idle=1
launch() {
    local n=$1
    shift
    job=none # MPI creates no shared-memory segment of cohort's
    timeout 200 mpirun -x COHORT_COMM_TIMEOUT -np "$n" "$@"
}
# Open MPI does not free its own allocations at MPI_Finalize (and unloads the components that
# made them, so they cannot be suppressed by name): leak checking stays on in the shm tests.
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
export COHORT_COMM_TIMEOUT=${COHORT_COMM_TIMEOUT:-60}
for n in 1 2 3 8; do
    expect_ok "mpi sweep on $n ranks" "$n" "$rank_bin" sweep
done
for n in 2 5; do
    for mode in split async rounding mismatch; do
        expect_ok "mpi $mode on $n ranks" "$n" "$rank_bin" "$mode"
    done
done
# The ranks that timed out pass their checks, then end the job with MPI_Abort at exit (the
# silent rank is still asleep): mpirun fails, by design, and the first to abort may end the
# other before it prints.
COHORT_COMM_TIMEOUT=1 launch 3 "$rank_bin" silent >"$log" 2>&1
if grep -q "rank [01] of 3 (mpi): silent passed" "$log" && ! grep -q "check failed" "$log"; then
    echo "ok   mpi silent rank on 3 ranks"
else
    echo "FAIL mpi silent rank on 3 ranks"
    tail -20 "$log"
    fails=$((fails + 1))
fi

# A stopped rank (alive, never answering): the other times out and, at exit, ends the job with
# MPI_Abort; MPI_Finalize would wait for the stopped rank, and mpirun with it, for ever. The
# outer timeout only ends a run that hangs: the stopped rank lives until the test kills it.
stop_test() {
    local pidfile="$comm_tmp/stop.pid" out="$comm_tmp/stop.log" pid rc segs
    COHORT_COMM_TIMEOUT=2 timeout 30 mpirun -x COHORT_COMM_TIMEOUT -np 2 "$rank_bin" stop \
        "$pidfile" >"$out" 2>&1 &
    local spawner=$!
    if ! wait_pid_file "$pidfile" "$spawner"; then
        wait "$spawner"
        echo "FAIL mpi stopped rank: the last rank never wrote its pid"
        cat "$out"
        fails=$((fails + 1))
        return
    fi
    pid=$(cat "$pidfile")
    # Open MPI's own segments of the rank that mpirun will kill: removed below if left
    segs=$(grep -o '/dev/shm/vader_segment[^ ]*' "/proc/$pid/maps" 2>/dev/null | sort -u)
    kill -STOP "$pid"
    wait "$spawner"
    rc=$?
    kill -CONT "$pid" 2>/dev/null
    kill -KILL "$pid" 2>/dev/null
    for seg in $segs; do rm -f "$seg"; done
    if [ "$rc" -eq 124 ]; then
        echo "FAIL mpi stopped rank: mpirun still ran 30 s later (a rank waits in MPI_Finalize)"
        cat "$out"
        fails=$((fails + 1))
    elif ! grep -q "rank 0: peer lost at .*timed out after 2 s" "$out"; then
        echo "FAIL mpi stopped rank: rank 0 did not report the timeout (mpirun exit $rc)"
        cat "$out"
        fails=$((fails + 1))
    else
        echo "ok   mpi stopped rank: the job ended (mpirun exit $rc) after the timeout"
    fi
}
stop_test
finish
