#!/usr/bin/env bash
# test_launch_join.sh: a node's connection to node 0's control port is bounded by --join-timeout
# and ended by SIGTERM, even when node 0's machine never answers it: a listener whose accept
# queue is full drops every SYN, as a firewall's DROP rule does, so each connect would wait for
# the kernel's SYN retries (about 127 s). The node gives up within a few seconds of its
# --join-timeout, naming node 0's address (exit 1), and a SIGTERM during that connect, or while
# it retries a refused one (node 0 not up yet), ends it at once with 143 and no process left.
# Waits are for events (a file, a process exit), each with a bound that a broken launcher
# overruns.
set -u
C=${COHORT:?COHORT must name the cohort binary}
T=$(mktemp -d)
trap 'kill -9 $(jobs -p) 2>/dev/null; rm -rf "$T"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
export COHORT_LOG=warn
unset COHORT_JOB_TOKEN
PY=/usr/bin/python3
. "$(dirname "${BASH_SOURCE[0]}")/proc_lib.sh" # alive, all_gone
. "$(dirname "${BASH_SOURCE[0]}")/port_lib.sh" # free_port
P=$(free_port)
CP=$((P + 1)) # the control port node 1 connects to
# until FILE holds a line matching REGEX (at most 100 s)
wait_grep() { for _ in $(seq 2000); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.05; done; return 1; }
# ends_within S PID: PID ends within S seconds (polled); else it is killed, and 1
ends_within() {
    for _ in $(seq $(($1 * 20))); do alive "$2" || return 0; sleep 0.05; done
    kill -9 "$2" 2>/dev/null
    wait "$2" 2>/dev/null
    return 1
}
now() { date +%s.%N; }
secs() { "$PY" -c "import sys; print('%.1f' % (float(sys.argv[2]) - float(sys.argv[1])))" "$1" "$2"; }
node1() { # JOIN_TIMEOUT ERRFILE: node 1 of a static 2-node job (exec: $! is the launcher)
    exec "$C" run --nnodes 2 --node-rank 1 --master-port "$P" --join-timeout "$1" true 2>"$2"
}

# A control port that answers no SYN: backlog 0 and never accepting, its one place in the accept
# queue taken by a connection of its own; ready once the kernel shows that queue full.
"$PY" - "$CP" "$T/full" <<'PY' &
import signal, socket, sys, time
port = int(sys.argv[1])
l = socket.socket()
l.bind(("127.0.0.1", port))
l.listen(0)
c = socket.create_connection(("127.0.0.1", port))
key = "0100007F:%04X" % port
for _ in range(2000):  # the queue length of a listening socket is its rx_queue in /proc/net/tcp
    rows = [r.split() for r in open("/proc/net/tcp").read().splitlines()[1:]]
    if any(r[1] == key and r[3] == "0A" and int(r[4].split(":")[1], 16) >= 1 for r in rows):
        open(sys.argv[2], "w").close()
        break
    time.sleep(0.05)
signal.pause()
PY
full=$!
for _ in $(seq 2000); do [ -e "$T/full" ] && break; alive $full || break; sleep 0.05; done
[ -e "$T/full" ] || fail "could not fill the accept queue of control port $CP"

# 1. --join-timeout 1: given up within a few seconds, naming node 0's address
t0=$(now)
node1 1 "$T/err.1" &
n=$!
if ends_within 8 $n; then
    wait $n
    rc=$?
    t1=$(now)
    [ $rc -eq 1 ] || fail "join timeout: exit $rc, expected 1: $(cat "$T/err.1")"
    grep -qF "node 0's launcher at 127.0.0.1:$CP did not answer" "$T/err.1" ||
        fail "join timeout: node 0's address not named: $(cat "$T/err.1")"
    [ $failures -eq 0 ] && echo "ok   --join-timeout 1 against a control port that drops SYNs: gave up after $(secs "$t0" "$t1") s, exit 1: $(grep -o "node 0's launcher at.*" "$T/err.1")"
else
    fail "--join-timeout 1 against a control port that drops SYNs: still connecting 8 s later: $(cat "$T/err.1")"
fi

# sigterm_connecting WHAT: node 1 (--join-timeout 60) started, SIGTERM once it is connecting
# (its warning that the job has no secret comes just before): it ends with 143 within 5 s, and
# its guard with it.
sigterm_connecting() {
    local f0=$failures rc guard
    rm -f "$T/err.2"
    node1 60 "$T/err.2" &
    n=$!
    wait_grep "$T/err.2" "no job secret" || fail "$1: node 1 did not start: $(cat "$T/err.2")"
    guard=$(pgrep -P $n)
    kill -TERM $n
    if ends_within 5 $n; then
        wait $n
        rc=$?
        [ $rc -eq 143 ] || fail "$1: SIGTERM: exit $rc, expected 143: $(cat "$T/err.2")"
        grep -q "interrupted by SIGTERM while connecting to node 0's launcher at 127.0.0.1:$CP" "$T/err.2" ||
            fail "$1: SIGTERM: not said: $(cat "$T/err.2")"
    else
        fail "$1: SIGTERM ignored: still running 5 s later: $(cat "$T/err.2")"
    fi
    [ -n "$guard" ] && { all_gone $guard || fail "$1: the launcher's guard outlived it"; }
    [ $failures -eq $f0 ] && echo "ok   SIGTERM while $1: exit 143 at once, no process left"
}
# 2. SIGTERM during a connect that gets no answer
sigterm_connecting "connecting to a control port that drops SYNs"
# 3. SIGTERM while retrying a refused connect (node 0 not up yet)
kill -9 $full
wait $full 2>/dev/null
sigterm_connecting "retrying a refused connect"
exit $((failures > 0))
