#!/usr/bin/env bash
# test_launch_restart.sh: what ends a job that --max-restarts would otherwise restart after a
# worker failure: a node of a static job lost during the failed attempt's teardown (its launcher
# killed). It is not restarted on any node, no attempt runs with a world that counts the lost
# node, the worker failure stays the root cause, and node 0 names what ended the job. Workers of
# a later attempt would exit 0 at once, so a launcher that restarted would pass its exit code;
# every wait is for an event (a file), with a generous bound (a loaded machine), and the
# launchers run under a HANG-second timeout.
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
# no_restart WHAT N: N workers logged the first attempt, and none a later one (att.* hold one
# line per attempt).
no_restart() {
    [ "$(cat "$T"/att.* 2>/dev/null | grep -c '^0 ')" -eq "$2" ] || fail "$1: not every worker ran: $(grep -H . "$T"/att.*)"
    ! grep -qv '^0 ' "$T"/att.* || fail "$1: the job was restarted: $(grep -H . "$T"/att.*)"
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
wait $n0
rc0=$?
wait $n1
rc1=$?
wait $n2 2>/dev/null # killed: no word of it from the shell
[ $rc0 -eq 3 ] && [ $rc1 -eq 3 ] || fail "static node lost after a worker failure: launchers of nodes 0 and 1 exited $rc0 and $rc1, expected 3 and 3: $(cat "$T"/e.*)"
no_restart "static node lost after a worker failure" 3
grep -qF "root cause: rank 1 (local rank 0, node 1)" "$T/e.0" || fail "node 0 does not name rank 1 the root cause: $(cat "$T/e.0")"
grep -qF "ended by:   node 2's launcher (host $HOST) was lost" "$T/e.0" || fail "node 0 does not say that node 2 was lost: $(cat "$T/e.0")"
all_gone $(cat "$T"/pid.*) || fail "workers survived the loss of node 2"

[ $failures -eq 0 ] && echo "all launch restart checks passed"
exit $((failures > 0))
