#!/usr/bin/env bash
# test_launch_restart.sh: what ends a job that --max-restarts would otherwise restart after a
# worker failure: a node of a static job lost during the failed attempt's teardown (its launcher
# killed), and a SIGTERM to a launcher (node 0's, another node's, one node's alone) during that
# teardown. Neither is restarted on any node, no attempt runs with a world that counts a lost
# node, the worker failure stays the root cause, node 0 names what ended the job, and an
# interrupted launcher exits 128 + the signal. Workers of a later attempt would exit 0 at once,
# so a launcher that restarted would pass its exit code; every wait is for an event (a file),
# with a generous bound (a loaded machine), and the launchers run under a HANG-second timeout.
set -u
C=${COHORT:?COHORT must name the cohort binary}
T=$(mktemp -d)
trap 'kill -9 $(jobs -p) 2>/dev/null; rm -rf "$T"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
export COHORT_LOG=warn
PY=/usr/bin/python3
LONG=600 HANG=120
HOST=$(hostname)
. "$(dirname "${BASH_SOURCE[0]}")/proc_lib.sh" # all_gone
. "$(dirname "${BASH_SOURCE[0]}")/port_lib.sh" # free_port
# wait_files N GLOB: until N files match (at most 100 s).
wait_files() {
    for _ in $(seq 2000); do
        [ "$(ls $2 2>/dev/null | wc -l)" -ge "$1" ] && return 0
        sleep 0.05
    done
    return 1
}
# no_restart WHAT N: N workers logged the first attempt, and none a later one (att.* hold one
# line per attempt).
no_restart() {
    [ "$(cat "$T"/att.* 2>/dev/null | grep -c '^0 ')" -eq "$2" ] || fail "$1: not every worker ran: $(grep -H . "$T"/att.*)"
    ! grep -qv '^0 ' "$T"/att.* || fail "$1: the job was restarted: $(grep -H . "$T"/att.*)"
}
# both_exit: the two launchers' exit codes, rc0 and rc1
both_exit() {
    wait $n0
    rc0=$?
    wait $n1
    rc1=$?
}
# Every worker: its attempt to att.RANK, its pid to pid.RANK; attempts after the first exit 0.
PRE='echo "$COHORT_RESTART_COUNT $WORLD_SIZE" >> '"$T"'/att.$RANK; echo $$ > '"$T"'/pid.$RANK
[ "$COHORT_RESTART_COUNT" = 0 ] || exit 0
'
# A worker that ignores the teardown's SIGTERM (term.RANK.1), runs ON_TERM then, and ends at the
# second SIGTERM (the interrupted launcher forwards its signal): waits on files, not the clock.
deaf() { # ON_TERM
    echo 'n=0; trap '\''n=$((n + 1)); touch '"$T"'/term.$RANK.$n; [ $n -gt 1 ] || { '"$1"'; }'\'' TERM
touch '"$T"'/ready.$RANK
i=0; while [ ! -e '"$T"'/term.$RANK.2 ] && [ $i -lt 12000 ]; do sleep 0.05; i=$((i + 1)); done; exit 0'
}
# fails_when_ready N: exit 3 once N workers are ready (their SIGTERM traps set).
fails_when_ready() {
    echo 'i=0; while [ "$(ls '"$T"'/ready.* 2>/dev/null | wc -l)" -lt '"$1"' ] && [ $i -lt 2000 ]; do sleep 0.05; i=$((i + 1)); done
echo "rank $RANK fails" >&2; exit 3'
}
# launcher_of PID: the cohort launcher that timeout (PID) runs.
launcher_of() { pgrep -P "$1" -x cohort; }
fresh() { rm -f "$T"/att.* "$T"/pid.* "$T"/ready.* "$T"/term.* "$T"/e.*; }

# 1. Three static nodes, --max-restarts 1: node 1's worker exits 3; node 2's worker, stopped by
# the teardown, SIGKILLs its own launcher. Node 0 does not restart the job on the two nodes left
# (with a world size that counts node 2), names node 2 as what ended it, and exits with the root
# cause's code, as node 1 does.
fresh
P=$(free_port)
W1=$PRE'case $GROUP_RANK in
1) '"$(fails_when_ready 1)"' ;;
2) '"$(deaf 'kill -9 $COHORT_LAUNCHER_PID')"' ;;
*) exec sleep '$LONG' ;;
esac'
for k in 0 1 2; do
    timeout -k 5 $HANG "$C" run --nnodes 3 --node-rank $k -n 1 --master-port "$P" --grace 30 --join-timeout 60 --max-restarts 1 sh -c "$W1" 2>"$T/e.$k" &
    eval n$k=$!
done
both_exit
wait $n2 2>/dev/null # killed: no word of it from the shell
[ $rc0 -eq 3 ] && [ $rc1 -eq 3 ] || fail "static node lost after a worker failure: launchers of nodes 0 and 1 exited $rc0 and $rc1, expected 3 and 3: $(cat "$T"/e.*)"
no_restart "static node lost after a worker failure" 3
grep -qF "root cause: rank 1 (local rank 0, node 1)" "$T/e.0" || fail "node 0 does not name rank 1 the root cause: $(cat "$T/e.0")"
grep -qF "ended by:   node 2's launcher (host $HOST) was lost" "$T/e.0" || fail "node 0 does not say that node 2 was lost: $(cat "$T/e.0")"
all_gone $(cat "$T"/pid.*) || fail "workers survived the loss of node 2"

# 2. One node, --max-restarts 2: rank 0 exits 3, rank 1 ignores the teardown's SIGTERM, and the
# launcher gets SIGTERM during the grace period: no restart, exit 143, rank 0 the root cause.
fresh
W2=$PRE'if [ "$RANK" = 0 ]; then '"$(fails_when_ready 1)"'; fi
'"$(deaf :)"
timeout -k 5 $HANG "$C" run -n 2 --max-restarts 2 --grace 60 sh -c "$W2" 2>"$T/e.0" &
n0=$!
wait_files 1 "$T/term.1.1" || fail "one node: rank 1 never got the teardown's SIGTERM"
kill -TERM $(launcher_of $n0)
wait $n0
rc0=$?
[ $rc0 -eq 143 ] || fail "one node interrupted during the teardown: launcher exited $rc0, expected 143: $(cat "$T/e.0")"
no_restart "one node interrupted during the teardown" 2
grep -qF "job failed: rank 0 exited with code 3" "$T/e.0" || fail "one node: the summary does not name rank 0's failure: $(cat "$T/e.0")"
grep -qF "ended by:   the launcher on $HOST (node 0) was interrupted by SIGTERM" "$T/e.0" || fail "one node: the summary does not name the interruption: $(cat "$T/e.0")"

# Two static nodes, --max-restarts 2 (3-5): node 0's launcher is n0, node 1's n1.
two_nodes() { # WORKER: both launchers, stderr to e.0 and e.1
    P=$(free_port)
    timeout -k 5 $HANG "$C" run --nnodes 2 --node-rank 0 -n 1 --master-port "$P" --grace 60 --join-timeout 60 --max-restarts 2 sh -c "$1" 2>"$T/e.0" &
    n0=$!
    timeout -k 5 $HANG "$C" run --nnodes 2 --node-rank 1 -n "$2" --master-port "$P" --grace 60 --join-timeout 60 --max-restarts 2 sh -c "$1" 2>"$T/e.1" &
    n1=$!
}
# 3. Node 0's worker exits 3; node 1's worker, stopped by the teardown, sends SIGTERM to its own
# launcher: node 1 exits 143, node 0 exits 3 and names both.
fresh
two_nodes "$PRE"'if [ "$GROUP_RANK" = 0 ]; then '"$(fails_when_ready 1)"'; fi
'"$(deaf 'kill -TERM $COHORT_LAUNCHER_PID')" 1
both_exit
[ $rc0 -eq 3 ] && [ $rc1 -eq 143 ] || fail "node 1 interrupted during the teardown: launchers exited $rc0 and $rc1, expected 3 and 143: $(cat "$T"/e.*)"
no_restart "node 1 interrupted during the teardown" 2
grep -qF "root cause: rank 0 (local rank 0, node 0)" "$T/e.0" || fail "node 0 does not name rank 0 the root cause: $(cat "$T/e.0")"
grep -qF "ended by:   the launcher on $HOST (node 1) was interrupted by SIGTERM" "$T/e.0" || fail "node 0 does not name node 1's interruption: $(cat "$T/e.0")"
grep -qF "job failed on node 0: rank 0 (node 0" "$T/e.1" || fail "node 1 does not name the root cause: $(cat "$T/e.1")"

# 4. Node 1's worker exits 3; node 0's launcher gets SIGTERM while its worker ignores the
# teardown's: node 0 exits 143, node 1 exits 3.
fresh
two_nodes "$PRE"'if [ "$GROUP_RANK" = 1 ]; then '"$(fails_when_ready 1)"'; fi
'"$(deaf :)" 1
wait_files 1 "$T/term.0.1" || fail "node 0 interrupted: rank 0 never got the teardown's SIGTERM"
kill -TERM $(launcher_of $n0)
both_exit
[ $rc0 -eq 143 ] && [ $rc1 -eq 3 ] || fail "node 0 interrupted during the teardown: launchers exited $rc0 and $rc1, expected 143 and 3: $(cat "$T"/e.*)"
no_restart "node 0 interrupted during the teardown" 2
grep -qF "root cause: rank 1 (local rank 0, node 1)" "$T/e.0" || fail "node 0 interrupted: rank 1 is not the root cause: $(cat "$T/e.0")"
grep -qF "ended by:   the launcher on $HOST (node 0) was interrupted by SIGTERM" "$T/e.0" || fail "node 0 interrupted: the summary does not name it: $(cat "$T/e.0")"

# 5. Node 1's own worker (rank 1) exits 3 and its other worker (rank 2), stopped by the
# teardown, sends SIGTERM to their launcher: node 1 tells node 0, which does not restart.
fresh
two_nodes "$PRE"'case $RANK in
1) '"$(fails_when_ready 1)"' ;;
2) '"$(deaf 'kill -TERM $COHORT_LAUNCHER_PID')"' ;;
*) exec sleep '$LONG' ;;
esac' 2
both_exit
[ $rc0 -eq 3 ] && [ $rc1 -eq 143 ] || fail "node 1 interrupted after its own worker failed: launchers exited $rc0 and $rc1, expected 3 and 143: $(cat "$T"/e.*)"
no_restart "node 1 interrupted after its own worker failed" 3
grep -qF "ended by:   the launcher on $HOST (node 1) was interrupted by SIGTERM" "$T/e.0" || fail "node 1's interruption after its own failure: node 0 does not name it: $(cat "$T/e.0")"
all_gone $(cat "$T"/pid.*) || fail "workers survived the interrupted jobs"

[ $failures -eq 0 ] && echo "all launch restart checks passed"
exit $((failures > 0))
