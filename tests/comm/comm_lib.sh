# comm_lib.sh: shared by the comm test scripts: how ranks are launched and how leftovers in
# /dev/shm are found. Sourced, not run.
# LAUNCH N CMD...: start N ranks of CMD with the launcher's worker environment.
set -u
build=${COHORT_BUILD_DIR:?run through ctest}
rank_bin="$build/comm_rank"
user=$(id -un)
fails=0
job=""

# Each launch gets its own job id so that its /dev/shm names are known.
launch() {
    local n=$1
    shift
    job="ctest$$-$RANDOM"
    "$build/comm_spawn" --job "$job" --limit 200 "$n" "$@"
}

# No segment of the last job may remain, whatever happened to its ranks.
check_no_shm() {
    local left
    left=$(ls /dev/shm 2>/dev/null | grep -F "cohort-$user-$job" || true)
    if [ -n "$left" ]; then
        echo "FAIL: left in /dev/shm after $1: $left"
        fails=$((fails + 1))
    fi
}

# expect_ok WHAT N CMD...: all ranks must pass.
expect_ok() {
    local what=$1
    shift
    if launch "$@" >"$build/comm_last.log" 2>&1; then
        echo "ok   $what"
    else
        echo "FAIL $what"
        tail -20 "$build/comm_last.log"
        fails=$((fails + 1))
    fi
    check_no_shm "$what"
}

finish() {
    echo "$fails failed"
    [ "$fails" -eq 0 ]
    exit $?
}
