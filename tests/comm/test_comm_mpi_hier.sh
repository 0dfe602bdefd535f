#!/usr/bin/env bash
# test_comm_mpi_hier.sh: the hierarchical transport under mpirun, with the nodes simulated by
# COHORT_COMM_RANKS_PER_NODE on this one host: the full sweep on 4 ranks as 2 nodes of 2 and on
# 3 ranks as unequal nodes (2+1) (all-reduce, broadcast, and on equal nodes all-gather and
# reduce-scatter are the hierarchical ops), on sub-groups whose nodes are interleaved (2+2 and
# 3+3), split (with hierarchical sub-groups), async, rounding, mismatch and a silent rank; the
# debug log and the transport's name show that the hierarchy ran, and that COHORT_COMM_HIER=0
# or a single node leave plain MPI; all-gather and reduce-scatter below COHORT_COMM_HIER_MIN_BYTES
# (default 1 MiB) run flat, and ranks must agree on it. No segment may remain in /dev/shm.
. "$(dirname "$0")/comm_lib.sh"
command -v mpirun >/dev/null && [ -f "$build/libcohort_mpi.so" ] || {
    echo "skipped: mpirun or libcohort_mpi.so missing"
    exit 77
}
# waiting ranks yield the cpu (mpirun passes OMPI_MCA_* on): more ranks than cores, beside
# another test (ctest -j2), busy-polled a third more cpu time
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_mpi_yield_when_idle=1
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" # as in test_comm_mpi.sh
export COHORT_COMM_TIMEOUT=${COHORT_COMM_TIMEOUT:-60} COHORT_LOG=debug
unset COHORT_COMM_HIER COHORT_COMM_RANKS_PER_NODE
# all-gather and reduce-scatter of every size in two steps, so the sweep's small counts test them
# (by default those below 1 MiB run flat: checked at the end)
export COHORT_COMM_HIER_MIN_BYTES=0
launch() {
    local n=$1
    shift
    job=hier # the node segments are named cohort-<user>-hier-<leader pid>-...
    timeout 200 mpirun -x COHORT_COMM_TIMEOUT -x COHORT_LOG -x COHORT_COMM_HIER \
        -x COHORT_COMM_RANKS_PER_NODE -x COHORT_COMM_HIER_MIN_BYTES -np "$n" "$@"
}

# expect_in WHAT PATTERN COUNT: the last run's log holds COUNT lines matching PATTERN.
expect_in() {
    local got
    got=$(grep -c -- "$2" "$log")
    if [ "$got" -ne "$3" ]; then
        echo "FAIL $1: $got lines match '$2', want $3"
        tail -5 "$log"
        fails=$((fails + 1))
    fi
}

export COHORT_COMM_RANKS_PER_NODE=2
expect_ok "hier sweep on 4 ranks as 2 nodes of 2" 4 "$rank_bin" sweep
expect_in "4 ranks as 2+2" "hierarchical transport: 4 ranks on 2 nodes (2+2); all-reduce as shm reduce-scatter.*all-gather and reduce-scatter in two steps from 0 bytes" 4
expect_in "4 ranks as 2+2" "of 4 (hier): sweep passed" 4
# counts that split evenly into the node's shards take the copy-free path
expect_ok "hier all-reduce of even counts on 4 ranks" 4 "$rank_bin" allreduce 2,1010,65536,262144
expect_in "even counts" "of 4 (hier): allreduce passed" 4
expect_ok "hier sweep on 3 ranks as nodes of 2+1" 3 "$rank_bin" sweep
expect_in "3 ranks as 2+1" "hierarchical transport: 3 ranks on 2 nodes (2+1); all-reduce as shm reduce to node leaders" 3
expect_in "3 ranks as 2+1" "of 3 (hier): sweep passed" 3
for run in "4 async" "4 rounding" "4 mismatch" "5 rounding" "5 mismatch"; do
    set -- $run
    expect_ok "hier $2 on $1 ranks" "$1" "$rank_bin" "$2"
    expect_in "hier $2 on $1 ranks" "(hier): $2 passed" "$1"
done
# sub-groups that still share nodes are hierarchical again (8 ranks as 2 nodes of 4, split by
# parity with rank 7 left out: 2+2 and 1+2), and pass the sweep
COHORT_COMM_RANKS_PER_NODE=4 expect_ok "hier split on 8 ranks as 2 nodes of 4" 8 "$rank_bin" split
expect_in "hierarchical sub-group 2+2" "split (color 0): hierarchical transport: 4 ranks on 2 nodes (2+2)" 4
expect_in "hierarchical sub-group 1+2" "split (color 1): hierarchical transport: 3 ranks on 2 nodes (1+2)" 3
# a sub-group in which the nodes' ranks are interleaved (even ranks first): the sweep on it
for pn in 2 3; do
    COHORT_COMM_RANKS_PER_NODE=$pn expect_ok "hier sweep on interleaved nodes of $pn" $((2 * pn)) "$rank_bin" reorder
    expect_in "interleaved nodes of $pn" "split (color 0): hierarchical transport: $((2 * pn)) ranks on 2 nodes ($pn+$pn)" $((2 * pn))
done
# the ranks that time out end the job with MPI_Abort at exit (MPI_Finalize would wait for the
# silent rank): mpirun fails, and the first to abort may end the other before it prints
COHORT_COMM_TIMEOUT=1 launch 3 "$rank_bin" silent >"$log" 2>&1
check_no_shm "hier silent rank on 3 ranks"
if grep -q "allreduce(count=1, i32, sum) #1 on rank [01] timed out after 1 s.*rank 2 never arrived" "$log" &&
    grep -q "rank [01] of 3 (hier): silent passed" "$log" && ! grep -q "check failed" "$log"; then
    echo "ok   hier silent rank on 3 ranks"
else
    echo "FAIL hier silent rank on 3 ranks: the silent rank was not named"
    tail -20 "$log"
    fails=$((fails + 1))
fi

# kill -9 of a rank mid-all-reduce: mpirun ends the job (survivors get no PEER_LOST from MPI);
# a node mate caught in the shared-memory step may report the death first, naming the world
# rank, and then ends the job itself with MPI_Abort at its exit, which mpirun may report
# instead of the signal. The job must end within 60 s, non-zero, and say why: mpirun's report of
# the signal or of the abort, or the node mate's naming of the killed rank (the last, rank 3:
# with the abort and the signal at once, mpirun's own message can fail to print, "ORTE_ERROR_LOG:
# Out of resource in file ../../../orte/util/show_help.c", seen once in an ASan run). Nothing
# may hang or remain in /dev/shm.
kill_under_mpirun() {
    local pidfile="$comm_tmp/hier_kill.pid" t0 rc
    rm -f "$pidfile"
    # ranks ignore SIGTERM in this mode: the timeout follows it with SIGKILL; setsid makes the
    # job a process group of its own, to be killed whole if it never gets going
    setsid timeout -k 5 150 mpirun -x COHORT_COMM_TIMEOUT -x COHORT_LOG -x COHORT_COMM_HIER \
        -x COHORT_COMM_RANKS_PER_NODE -x COHORT_COMM_HIER_MIN_BYTES -np 4 \
        "$rank_bin" kill "$pidfile" >"$log" 2>&1 &
    local spawner=$!
    # a loaded machine may take many seconds to start 4 ranks: wait for the pid while the job
    # lives, up to 100 s, and fail saying so rather than leave the job looping
    if ! wait_pid_file "$pidfile" "$spawner"; then
        # the job is its own process group (setsid); ranks mpirun started late are caught too
        kill -9 -- -"$spawner" 2>/dev/null
        wait "$spawner"
        for _ in $(seq 25); do
            pkill -9 -f "$rank_bin kill $pidfile" || break
            sleep 0.2
        done
        echo "FAIL kill -9 under mpirun: the last rank never wrote its pid"
        tail -20 "$log"
        fails=$((fails + 1))
        return
    fi
    sleep 0.3
    t0=$(date +%s)
    kill -9 "$(cat "$pidfile")"
    wait "$spawner"
    rc=$?
    if [ "$rc" -eq 0 ] || [ $(($(date +%s) - t0)) -gt 60 ] || ! grep -qE "exited on signal 9|MPI_ABORT was invoked|peer lost at .*: rank 3 died" "$log" ||
        grep -q "check failed" "$log"; then
        echo "FAIL kill -9 under mpirun (exit $rc)"
        tail -20 "$log"
        fails=$((fails + 1))
    else
        echo "ok   kill -9 under mpirun: job ended (exit $rc), $(grep -c 'peer lost at' "$log") node mate(s) reported it"
    fi
    check_no_shm "kill -9 under mpirun"
    rm -f "$pidfile"
}
kill_under_mpirun

COHORT_COMM_HIER=0 expect_ok "COHORT_COMM_HIER=0 on 4 ranks" 4 "$rank_bin" rounding
expect_in "COHORT_COMM_HIER=0 leaves plain mpi" "of 4 (mpi): rounding passed" 4
expect_in "COHORT_COMM_HIER=0 leaves plain mpi" "hierarchical" 0
COHORT_COMM_RANKS_PER_NODE=1 expect_ok "one rank per node" 4 "$rank_bin" rounding
expect_in "one rank per node is plain mpi" "flat mpi transport: 4 ranks on 4 nodes (1+1+1+1)" 4
unset COHORT_COMM_RANKS_PER_NODE
expect_ok "one host, no override" 2 "$rank_bin" rounding
expect_in "one node is plain mpi" "flat mpi transport: 2 ranks on 1 nodes (2)" 2

# ranks that disagree on the simulated nodes all fail, saying so, rather than wait for each other
if timeout 100 mpirun -x COHORT_COMM_TIMEOUT -np 1 env COHORT_COMM_RANKS_PER_NODE=2 "$rank_bin" rounding : \
    -np 1 env COHORT_COMM_RANKS_PER_NODE=3 "$rank_bin" rounding >"$log" 2>&1; then
    echo "FAIL ranks with different COHORT_COMM_RANKS_PER_NODE were accepted"
    fails=$((fails + 1))
else
    expect_in "different COHORT_COMM_RANKS_PER_NODE refused" "COHORT_COMM_RANKS_PER_NODE differs between ranks: rank 0 has '2', rank 1 has '3'" 2
    echo "ok   different COHORT_COMM_RANKS_PER_NODE refused on every rank"
fi
check_no_shm "different COHORT_COMM_RANKS_PER_NODE"

# expect_refused VAR VALUE MESSAGE: 2 ranks started with VAR=VALUE both fail with MESSAGE.
expect_refused() {
    if (export "$1=$2" && launch 2 "$rank_bin" rounding) >"$log" 2>&1; then
        echo "FAIL $1=$2 was accepted"
        fails=$((fails + 1))
    else
        expect_in "$1=$2 refused" "$3" 2
        echo "ok   $1=$2 refused"
    fi
}
expect_refused COHORT_COMM_RANKS_PER_NODE 0 \
    "invalid COHORT_COMM_RANKS_PER_NODE '0': expected a number of ranks from 1"
expect_refused COHORT_COMM_HIER 2 "invalid COHORT_COMM_HIER '2': expected 0"
export COHORT_COMM_RANKS_PER_NODE=2
expect_refused COHORT_COMM_HIER_MIN_BYTES 1X "invalid COHORT_COMM_HIER_MIN_BYTES '1X': expected a size in bytes"
# the default: all-gather and reduce-scatter from 1 MiB in two steps, smaller ones flat; the
# sweep passes either way
unset COHORT_COMM_HIER_MIN_BYTES
expect_ok "hier sweep on 4 ranks, default threshold" 4 "$rank_bin" sweep
expect_in "default threshold" "all-gather and reduce-scatter in two steps from 1048576 bytes" 4
expect_in "default threshold" "of 4 (hier): sweep passed" 4
if timeout 100 mpirun -x COHORT_COMM_TIMEOUT -x COHORT_COMM_RANKS_PER_NODE -np 2 env COHORT_COMM_HIER_MIN_BYTES=1M \
    "$rank_bin" rounding : -np 2 env COHORT_COMM_HIER_MIN_BYTES=0 "$rank_bin" rounding >"$log" 2>&1; then
    echo "FAIL ranks with different COHORT_COMM_HIER_MIN_BYTES were accepted"
    fails=$((fails + 1))
else
    expect_in "different COHORT_COMM_HIER_MIN_BYTES refused" "COHORT_COMM_HIER_MIN_BYTES differs between ranks: rank 0 has 1048576 bytes, rank 2 has 0" 4
    echo "ok   different COHORT_COMM_HIER_MIN_BYTES refused on every rank"
fi
check_no_shm "different COHORT_COMM_HIER_MIN_BYTES"
finish
