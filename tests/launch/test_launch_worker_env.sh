#!/usr/bin/env bash
# test_launch_worker_env.sh: a cohort worker learns its rank, world and job id through
# coh_launch_env_read whichever launcher started it: cohort run, Open MPI's mpirun, torchrun's
# variables, or none; a malformed variable is an error naming it.
set -u
C=${COHORT:?COHORT must name the cohort binary}
PROBE=${COHORT_BUILD_DIR:?}/tests/launch/launch_envprobe
[ -x "$PROBE" ] || { echo "FAIL: $PROBE not built"; exit 1; }
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
export COHORT_LOG=warn

# Under cohort run: "cohort rank world local local_world node nnodes restart job".
out=$("$C" run -n 3 --prefix '' --run-id probe-7 "$PROBE" | sort)
expect="cohort 0 3 0 3 0 1 0 probe-7
cohort 1 3 1 3 0 1 0 probe-7
cohort 2 3 2 3 0 1 0 probe-7"
[ "$out" = "$expect" ] || fail "under cohort run: got '$out'"

# Under mpirun (Open MPI): ranks from OMPI_COMM_WORLD_*, one job id for all ranks.
if command -v mpirun >/dev/null; then
    out=$(env -u RANK -u WORLD_SIZE mpirun --allow-run-as-root --oversubscribe -n 3 "$PROBE" | sort)
    [ "$(echo "$out" | cut -d' ' -f1-7 | tr '\n' '|')" = "openmpi 0 3 0 3 0 1|openmpi 1 3 1 3 0 1|openmpi 2 3 2 3 0 1|" ] ||
        fail "under mpirun: got '$out'"
    jobs=$(echo "$out" | cut -d' ' -f9 | sort -u)
    { [ "$(echo "$jobs" | wc -l)" -eq 1 ] && [[ $jobs == ompi-* ]]; } || fail "mpirun job ids: '$jobs'"
else
    fail "mpirun is not installed (scripts/setup.sh installs openmpi-bin)"
fi

# torchrun's variables set by hand, and no launcher at all.
out=$(env RANK=1 WORLD_SIZE=2 LOCAL_RANK=1 LOCAL_WORLD_SIZE=2 TORCHELASTIC_RUN_ID=tr "$PROBE")
[ "$out" = "torchrun 1 2 1 2 0 1 0 tr" ] || fail "torchrun variables: got '$out'"
out=$(env -i PATH="$PATH" "$PROBE")
[[ $out == "none 0 1 0 1 0 1 0 single-"* ]] || fail "no launcher: got '$out'"

# A malformed variable: exit 2 and the variable named.
err=$(env -i RANK=one WORLD_SIZE=2 "$PROBE" 2>&1)
rc=$?
[ $rc -eq 2 ] && [[ $err == *"invalid RANK 'one'"* ]] || fail "malformed RANK: rc $rc, '$err'"

[ $failures -eq 0 ] && echo "all worker environment checks passed"
exit $((failures > 0))
