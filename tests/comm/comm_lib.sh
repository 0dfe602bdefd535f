# comm_lib.sh: shared by the comm test scripts: how ranks are launched (`cohort run`) and how
# leftovers in /dev/shm are found. Sourced, not run.
set -u
build=${COHORT_BUILD_DIR:?run through ctest}
rank_bin="$build/comm_rank"
user=$(id -un)
fails=0
job=""
# Logs live in a directory of this script's own: ctest runs several comm tests at once.
comm_tmp=$(mktemp -d)
trap 'rm -rf "$comm_tmp"' EXIT
log="$comm_tmp/last.log" # output of the last expect_ok

cohort=${COHORT:?run through ctest}

# launch N CMD...: N ranks of CMD under `cohort run` (a free port, unprefixed output); each
# launch gets its own job id so that its /dev/shm names are known. A caller that runs launch in
# the background (a subshell) calls new_job first, so that the parent knows the id too.
new_job() {
    job="ctest$$-$RANDOM"
    job_fresh=1
}
launch() {
    local n=$1
    shift
    [ "${job_fresh:-0}" = 1 ] || new_job
    job_fresh=0
    "$cohort" run --standalone --nproc-per-node "$n" --run-id "$job" --prefix '' -- "$@"
}

# No segment of the last job may remain, whatever happened to its ranks. (The job's segments
# are cohort-USER-JOB-rRESTART...: "-r" ends the id, so that job ctest1-2 is not ctest1-23.)
check_no_shm() {
    local left
    left=$(ls /dev/shm 2>/dev/null | grep -F "cohort-$user-$job-r" || true)
    if [ -n "$left" ]; then
        echo "FAIL: left in /dev/shm after $1: $left"
        fails=$((fails + 1))
    fi
}

# seg_ready SEG: the segment /dev/shm/SEG has its header (its creator wrote the magic last)
seg_ready() {
    [ "$(od -An -tx8 -N8 "/dev/shm/$1" 2>/dev/null | tr -d ' ')" = 636f686f72747368 ]
}

# expect_ok WHAT N CMD...: all ranks must pass.
expect_ok() {
    local what=$1
    shift
    if launch "$@" >"$log" 2>&1; then
        echo "ok   $what"
    else
        echo "FAIL $what"
        tail -20 "$log"
        fails=$((fails + 1))
    fi
    check_no_shm "$what"
}

# wait_pid_file FILE PID: waits until FILE holds a whole pid line (written by a rank to be
# killed) while process PID (the job) lives, up to 100 s: a loaded machine may take many seconds
# to start the ranks. Fails when it never came.
wait_pid_file() {
    local _
    for _ in $(seq 1000); do
        [ -s "$1" ] && [ -z "$(tail -c1 "$1")" ] && return 0
        kill -0 "$2" 2>/dev/null || break
        sleep 0.1
    done
    [ -s "$1" ] && [ -z "$(tail -c1 "$1")" ]
}

# kill_test N: a rank of N killed with -9 mid-all-reduce; every survivor must fail with
# PEER_LOST naming it within 30 s (a loaded machine; it takes milliseconds).
kill_test() {
    local n=$1 pidfile="$comm_tmp/kill.pid" log="$comm_tmp/kill.log"
    rm -f "$pidfile"
    new_job
    launch "$n" "$rank_bin" kill "$pidfile" >"$log" 2>&1 &
    job_fresh=0
    local spawner=$!
    if ! wait_pid_file "$pidfile" "$spawner"; then
        # ranks ignore SIGTERM in this mode: kill them (the launcher then ends); survivors would
        # give up after 120 s by themselves
        for _ in $(seq 25); do
            pkill -9 -f "$rank_bin kill $pidfile" || break
            sleep 0.2
        done
        wait "$spawner"
        echo "FAIL kill -9 on $n ranks: the last rank never wrote its pid"
        cat "$log"
        fails=$((fails + 1))
        return
    fi
    sleep 0.3
    local t0
    t0=$(date +%s.%N)
    kill -9 "$(cat "$pidfile")"
    wait "$spawner"
    local lost
    lost=$(grep -c "peer lost at" "$log")
    if [ "$lost" -ne $((n - 1)) ]; then
        echo "FAIL kill -9 on $n ranks: $lost of $((n - 1)) survivors reported the lost peer"
        cat "$log"
        fails=$((fails + 1))
    elif ! grep -c "kill passed" "$log" | grep -qx $((n - 1)); then
        echo "FAIL kill -9 on $n ranks: a survivor failed its checks"
        cat "$log"
        fails=$((fails + 1))
    else
        local worst
        worst=$(sed -n 's/.*peer lost at \([0-9.]*\).*/\1/p' "$log" |
                awk -v t0="$t0" 'BEGIN{m=0} {d=$1-t0; if (d>m) m=d} END{printf "%.3f", m}')
        if awk -v w="$worst" 'BEGIN{exit !(w < 30.0)}'; then
            echo "ok   kill -9 on $n ranks: every survivor reported it within ${worst} s"
        else
            echo "FAIL kill -9 on $n ranks: the slowest survivor took ${worst} s"
            fails=$((fails + 1))
        fi
    fi
    check_no_shm "kill -9 on $n ranks"
    rm -f "$pidfile"
}

# skip WHAT REASON: a part that cannot run here, named; finish then reports the test skipped.
skips=0
skip() {
    echo "SKIP $1: $2"
    skips=$((skips + 1))
}

# The exit: 1 when a check failed, else 77 (ctest's skipped, never passed) when a part was
# skipped, else 0.
finish() {
    echo "$fails failed, $skips skipped"
    [ "$fails" -eq 0 ] || exit 1
    [ "$skips" -eq 0 ] || exit 77
    exit 0
}
