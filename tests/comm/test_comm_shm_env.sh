#!/usr/bin/env bash
# test_comm_shm_env.sh: the shared-memory variables are read whole and bounded: a staging half
# larger than the machine (COHORT_SHM_STAGE=4EiB, whose products by the ranks wrapped around to
# a tiny segment, and crashed the ranks) and a spin that is not a number of microseconds
# (COHORT_SHM_SPIN=fast or 1ms, which atoi read as 0 and 1) fail the job with a message naming
# the variable and its value (the first rank to fail ends the job: one message is enough), no
# rank crashes, and nothing is left in /dev/shm; a valid spin still runs the sweep.
. "$(dirname "$0")/comm_lib.sh"

# refused WHAT VAR VALUE: 2 ranks with VAR=VALUE must fail, naming the variable and value.
refused() {
    local what=$1 var=$2 value=$3 rc named
    launch 2 env "$var=$value" "$rank_bin" sweep >"$log" 2>&1
    rc=$?
    named=$(grep -c "^comm_rank: .*invalid $var '$value'" "$log")
    if [ "$rc" -ne 0 ] && ! grep -q SIGSEGV "$log" && [ "$named" -ge 1 ]; then
        echo "ok   $what"
    else
        echo "FAIL $what: exit $rc, no rank names $var '$value' or one crashed"
        tail -20 "$log"
        fails=$((fails + 1))
    fi
    check_no_shm "$what"
}

refused "a staging half larger than the machine" COHORT_SHM_STAGE 4EiB
refused "an arena larger than the machine" COHORT_SHM_ARENA 4EiB
refused "a spin that is a word" COHORT_SHM_SPIN fast
refused "a spin with a unit" COHORT_SHM_SPIN 1ms
refused "a negative spin" COHORT_SHM_SPIN -5
COHORT_SHM_SPIN=50 expect_ok "a spin of 50 us" 2 "$rank_bin" sweep
finish
