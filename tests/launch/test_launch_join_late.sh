#!/usr/bin/env bash
# test_launch_join_late.sh: a node that joins an elastic job (--nnodes 1:2, 1:3) while a round
# runs waits for the next round however long that takes, not only for its own --join-timeout
# (2 s here): it enters at the next restart (world 2); when the job ends instead, it exits with
# the job's exit code (3 for a failed job, 0 for one that succeeded) without running a worker; a
# SIGTERM ends its wait with 143 while the round goes on, and node 0 lets it go. Node 0's
# rounds end when the test says so (a file); when node 0's launcher is killed, the waiting node
# exits 1. Every wait is for an event, with a bound.
set -u
C=${COHORT:?COHORT must name the cohort binary}
T=$(mktemp -d)
trap 'kill -9 $(jobs -p) 2>/dev/null; rm -rf "$T"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
export COHORT_LOG=info
unset COHORT_JOB_TOKEN
PY=/usr/bin/python3
. "$(dirname "${BASH_SOURCE[0]}")/proc_lib.sh" # alive, all_gone
. "$(dirname "${BASH_SOURCE[0]}")/port_lib.sh" # free_port
# until N lines match REGEX in FILE (at most 100 s)
wait_lines() { for _ in $(seq 2000); do [ "$(cat "$3" 2>/dev/null | grep -c "$2")" -ge "$1" ] && return 0; sleep 0.05; done; return 1; }
# ends_within S PID: PID ends within S seconds (polled); else it is killed, and 1
ends_within() {
    for _ in $(seq $(($1 * 20))); do alive "$2" || return 0; sleep 0.05; done
    kill -9 "$2" 2>/dev/null
    wait "$2" 2>/dev/null
    return 1
}
# still_waiting S PID...: each PID still runs S seconds from now (a late node that gave up at its
# own join timeout, 2 s, would have exited by then); 1 as soon as one ends
still_waiting() {
    local s=$1 p
    shift
    for _ in $(seq $((s * 20))); do
        for p in "$@"; do alive "$p" || return 1; done
        sleep 0.05
    done
}
# Each worker writes its pid to $T/pid.$ID, then logs "attempt world rank node nnodes" to
# $T/log.$ID; attempt 0 ends with exit $CODE once $T/go exists, later attempts exit 0 at once.
w='echo $$ > '"$T"'/pid.$ID
echo "$TORCHELASTIC_RESTART_COUNT $WORLD_SIZE $RANK $GROUP_RANK $GROUP_WORLD_SIZE" >> '"$T"'/log.$ID
[ "$TORCHELASTIC_RESTART_COUNT" = 0 ] || exit 0
i=0; while [ ! -e '"$T"'/go ] && [ $i -lt 2400 ]; do sleep 0.05; i=$((i + 1)); done; exit $CODE'
node() { # ID RANK NNODES JOIN_TIMEOUT: one launcher (exec: $! is its pid), stderr in $T/err.ID
    ID=$1 exec "$C" run --nnodes "$3" --node-rank "$2" --master-port "$P" --max-restarts "$MAXR" \
        --join-timeout "$4" --grace 1 sh -c "$w" 2>"$T/err.$1"
}
# start NNODES LATE...: node 0 alone in round 0, then the late nodes (ids LATE...), each taken in
# to wait for the next restart; their pids in late[]
start() {
    local nn=$1 k=1 id
    shift
    rm -f "$T"/log.* "$T"/pid.* "$T"/err.* "$T/go"
    P=$(free_port)
    node n0 0 "$nn" 30 &
    n0=$!
    wait_lines 1 "^0 1 0 0 1$" "$T/log.n0" || fail "round 0 did not start on node 0: $(cat "$T/err.n0")"
    late=()
    for id in "$@"; do
        node "$id" "$k" "$nn" 2 &
        late+=($!)
        k=$((k + 1))
    done
    wait_lines $# "it enters at the next restart" "$T/err.n0" ||
        fail "the late nodes were not taken in: $(cat "$T"/err.*)"
}

# 1. --nnodes 1:2: the late node outwaits its join timeout and enters at the restart
export CODE=3
MAXR=1
start 1:2 c
nc=${late[0]}
still_waiting 5 $nc || fail "the late node gave up before the next round: $(cat "$T/err.c")"
grep -q "waits for the next round" "$T/err.c" || fail "the late node does not say that it waits: $(cat "$T/err.c")"
[ -e "$T/log.c" ] && fail "the late node's workers started before the next restart"
touch "$T/go"
wait $n0
rc0=$?
if ends_within 60 $nc; then wait $nc; rcc=$?; else rcc=killed; fi
[ $rc0 -eq 0 ] && [ "$rcc" = 0 ] || fail "launchers exited $rc0 and $rcc, expected 0 and 0: $(tail -n 5 "$T"/err.*)"
[ "$(cat "$T/log.n0")" = "$(printf '0 1 0 0 1\n1 2 0 0 2')" ] || fail "node 0's rounds: $(cat "$T/log.n0")"
[ "$(cat "$T/log.c" 2>/dev/null)" = "1 2 1 1 2" ] || fail "the late node's rounds: $(cat "$T/log.c" 2>/dev/null)"
grep -q "waiting for the next round, left" "$T/err.n0" && fail "node 0 lost the late node: $(cat "$T/err.n0")"
[ $failures -eq 0 ] && echo "ok   --nnodes 1:2: a node that joined during round 0 waited past its --join-timeout 2 and entered round 1 (world 2)"

# 2. --nnodes 1:3, no restarts left: of two waiting nodes, one is interrupted (143, node 0 lets
# it go, the round goes on); the other exits 3 when the job fails, without a worker
f0=$failures
MAXR=0
start 1:3 c d
nc=${late[0]} nd=${late[1]}
still_waiting 5 $nc $nd || fail "a late node gave up before the job ended: $(cat "$T/err.c" "$T/err.d")"
kill -TERM $nd 2>/dev/null
if ends_within 5 $nd; then wait $nd; rcd=$?; else rcd=killed; fi
[ "$rcd" = 143 ] || fail "SIGTERM to a waiting node: exit $rcd, expected 143: $(cat "$T/err.d")"
wait_lines 1 "waiting for the next round, left" "$T/err.n0" || fail "node 0 did not let the interrupted node go: $(cat "$T/err.n0")"
alive $n0 || fail "node 0's round ended with the waiting node: $(cat "$T/err.n0")"
touch "$T/go"
wait $n0
rc0=$?
if ends_within 60 $nc; then wait $nc; rcc=$?; else rcc=killed; fi
[ $rc0 -eq 3 ] && [ "$rcc" = 3 ] || fail "a failed job: launchers exited $rc0 and $rcc, expected 3 and 3: $(tail -n 5 "$T"/err.*)"
grep -q "job failed on node 0: rank 0 .* exited with code 3" "$T/err.c" || fail "the waiting node does not say why the job ended: $(cat "$T/err.c")"
ls "$T"/log.[cd] 2>/dev/null && fail "a waiting node ran a worker"
[ $failures -eq $f0 ] && echo "ok   --nnodes 1:3: a waiting node interrupted exits 143 and the round goes on; the other exits 3 with the failed job"

# 3. a job that succeeds while a node waits: that node exits 0
f0=$failures
export CODE=0
start 1:2 c
nc=${late[0]}
touch "$T/go"
wait $n0
rc0=$?
if ends_within 60 $nc; then wait $nc; rcc=$?; else rcc=killed; fi
[ $rc0 -eq 0 ] && [ "$rcc" = 0 ] || fail "a job that succeeded: launchers exited $rc0 and $rcc, expected 0 and 0: $(tail -n 5 "$T"/err.*)"
[ -e "$T/log.c" ] && fail "the waiting node ran a worker"
[ $failures -eq $f0 ] && echo "ok   --nnodes 1:2: the job succeeded while a node waited: it exits 0"

# 4. node 0's launcher lost while a node waits: that node ends (exit 1), it does not wait on
f0=$failures
export CODE=0
start 1:2 c
nc=${late[0]}
wpid=$(cat "$T/pid.n0")
kill -9 $n0
wait $n0 2>/dev/null
if ends_within 20 $nc; then wait $nc; rcc=$?; else rcc=killed; fi
[ "$rcc" = 1 ] && grep -q "node 0's launcher closed the connection" "$T/err.c" ||
    fail "node 0 lost while a node waited: exit $rcc, expected 1: $(cat "$T/err.c")"
all_gone "$wpid" || fail "node 0's worker outlived its killed launcher"
[ $failures -eq $f0 ] && echo "ok   --nnodes 1:2: node 0's launcher killed while a node waited: that node exits 1"
exit $((failures > 0))
