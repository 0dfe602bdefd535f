#!/usr/bin/env bash
# test_launch_elastic.sh: cohort run --nnodes 2:3 with three launchers on loopback: the job
# starts on three nodes; one launcher killed mid-round ends the round and the job restarts on
# the two that remain (world size 2, new node ranks, no orphan of the killed node); a node
# started during that round waits and enters at the next restart (world 3 again); restarts
# count against --max-restarts; strangers at the control port during a round are closed and
# named without disturbing it; a PyTorch DDP job that loses a node mid-training resumes from
# its checkpoint on two nodes and ends with one process's loss. Prints the restart time.
set -u
C=${COHORT:?COHORT must name the cohort binary}
T=$(mktemp -d)
trap 'kill -9 $(jobs -p) 2>/dev/null; rm -rf "$T"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
export COHORT_LOG=info
PY=/usr/bin/python3
free_port() { "$PY" -c 'import random
lo = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
print(random.randrange(20000, min(lo, 29000) - 2))'; }
# until N lines match REGEX in the files of GLOB (expanded each time; at most 120 s: three
# launchers joining on a loaded machine)
wait_lines() {
    local n=$1 re=$2 glob=$3
    for _ in $(seq 2400); do
        [ "$(cat $glob 2>/dev/null | grep -cE "$re")" -ge "$n" ] && return 0
        sleep 0.05
    done
    return 1
}
now() { date +%s.%N; }
# until FILE holds a line matching REGEX (at most 100 s)
wait_grep() { for _ in $(seq 2000); do grep -q "$2" "$1" && return 0; sleep 0.05; done; return 1; }
# alive and all_gone: whether a process still runs (a zombie does not)
. "$(dirname "${BASH_SOURCE[0]}")/proc_lib.sh"
# Each worker logs "attempt world rank node nnodes" to $T/log.$ID; attempt 0 runs until stopped,
# attempt 1's rank 1 fails once $T/fail1 exists, attempt 2 succeeds.
w='echo "$TORCHELASTIC_RESTART_COUNT $WORLD_SIZE $RANK $GROUP_RANK $GROUP_WORLD_SIZE" >> '"$T"'/log.$ID
echo $$ > '"$T"'/pid.$ID
case $TORCHELASTIC_RESTART_COUNT in
0) exec sleep 600 ;;
1) if [ "$RANK" = 1 ]; then while [ ! -e '"$T"'/fail1 ]; do sleep 0.05; done; exit 1; fi; exec sleep 600 ;;
esac'
P=$(free_port)
node() { # ID RANK: one launcher of the elastic job (exec: $! is its pid), stderr in $T/err.ID
    ID=$1 exec "$C" run --nnodes 2:3 --node-rank "$2" --master-port "$P" --max-restarts "$MAXR" \
        --join-timeout 30 --grace 1 sh -c "$w" 2>"$T/err.$1"
}
# start3 FUNCTION: the three launchers, node 0's last. An elastic node 0 starts the round 2 s
# (SETTLE_S) after the second node joined: were a loaded machine to start b's launcher later
# than that, the round would start on 2 nodes. Nodes a and b say they have no secret once they
# are up, then retry their connection every 0.1 s: node 0 comes after both did, and both join at
# once.
start3() {
    rm -f "$T"/err.*
    "$1" a 1 &
    na=$!
    "$1" b 1 &
    nb=$!
    wait_grep "$T/err.a" "no job secret" && wait_grep "$T/err.b" "no job secret" ||
        fail "launchers a and b did not start: $(cat "$T"/err.*)"
    "$1" n0 0 &
    n0=$!
}
MAXR=3
start3 node
wait_lines 3 "^0 3 " "$T/log.*" || fail "the first round did not start on 3 nodes: $(cat "$T"/log.* "$T"/err.n0)"
bpid=$(cat "$T/pid.b")
t0=$(now)
kill -9 $nb
wait_lines 2 "^1 2 " "$T/log.n0 $T/log.a" || fail "no second round on 2 nodes: $(cat "$T"/log.* "$T"/err.n0)"
t1=$(now)
# the killed node's guard ends its worker (which would sleep 600 s)
all_gone "$bpid" || fail "a worker of the killed node outlived it"
node c 1 &
nc=$!
wait_grep "$T/err.n0" "it enters at the next restart" || fail "the late node was not taken in: $(cat "$T/err.n0" "$T/err.c")"
[ -e "$T/log.c" ] && fail "the late node's workers started before the next restart"
# strangers at the control port during the round: closed and named, the round goes on
"$PY" -c 'import socket, sys, time
a = socket.create_connection(("127.0.0.1", int(sys.argv[1]) + 1))
b = socket.create_connection(("127.0.0.1", int(sys.argv[1]) + 1))
b.sendall(b"FAIL 1 1 0 0 0 1 1 0 0 x stop\n")
for s in (a, b):
    s.settimeout(30)
    while s.recv(4096): pass' "$P"
grep -q "from 127.0.0.1:[0-9]*: no HELLO within" "$T/err.n0" &&
    grep -q "from 127.0.0.1:[0-9]*: it sent 'CHAL\|from 127.0.0.1:[0-9]*: it sent 'FAIL 1" "$T/err.n0" ||
    fail "strangers during a round not named: $(cat "$T/err.n0")"
touch "$T/fail1"
wait $n0
rc0=$?
wait $na
rca=$?
wait $nc
rcc=$?
[ $rc0 -eq 0 ] && [ $rca -eq 0 ] && [ $rcc -eq 0 ] || fail "launchers exited $rc0, $rca, $rcc, expected 0: $(tail -n 5 "$T"/err.*)"
rounds=$(cat "$T"/log.n0 "$T"/log.a "$T"/log.c | sort | tr '\n' ';')
# round 0: 3 nodes (b's rank among them); round 1: n0 and a as nodes 0 and 1 of 2; round 2:
# n0, a and the late c as 3 nodes
[ "$(grep -c '^0 3 ' <<<"$(cat "$T"/log.n0 "$T"/log.a)")" -eq 2 ] || fail "round 0: $rounds"
[ "$(cat "$T/log.n0")" = "$(printf '0 3 0 0 3\n1 2 0 0 2\n2 3 0 0 3')" ] || fail "node 0's rounds: $(cat "$T/log.n0")"
[ "$(sed -n 2p "$T/log.a")" = "1 2 1 1 2" ] || fail "node a in round 1: $(cat "$T/log.a")"
[ "$(cat "$T"/log.n0 "$T"/log.a "$T"/log.c | grep '^2 3 ' | cut -d' ' -f3 | sort | tr '\n' ' ')" = "0 1 2 " ] ||
    fail "round 2 ranks: $rounds"
[ "$(cut -d' ' -f1 "$T/log.c" | tr '\n' ' ')" = "2 " ] || fail "the late node ran in rounds: $(cat "$T/log.c")"
restart=$("$PY" -c "import sys; print('%.2f' % (float(sys.argv[2]) - float(sys.argv[1])))" "$t0" "$t1")
[ $failures -eq 0 ] && echo "ok   --nnodes 2:3: 3 nodes, one killed: restarted on 2 in $restart s (grace 1 s), a late node entered at the next restart: $rounds"

# restarts count against --max-restarts: with 1, the loss of a node uses it and the next
# failure ends the job with that failure's exit code
rm -f "$T"/log.* "$T"/pid.* "$T/fail1"
P=$(free_port)
MAXR=1
start3 node
wait_lines 3 "^0 3 " "$T/log.*" || fail "max-restarts job: no first round: $(cat "$T"/err.n0)"
kill -9 $nb
wait_lines 2 "^1 2 " "$T/log.n0 $T/log.a" || fail "max-restarts job: no second round"
touch "$T/fail1"
wait $n0
rc0=$?
wait $na
rca=$?
[ $rc0 -eq 1 ] && [ $rca -eq 1 ] || fail "--max-restarts 1 after a node loss and a failure: exit $rc0 and $rca, expected 1 and 1"
grep -q "job failed: rank 1 exited with code 1" "$T/err.n0" || fail "max-restarts job: no summary: $(cat "$T/err.n0")"
[ $failures -eq 0 ] && echo "ok   --max-restarts 1: the node loss takes the restart, the next failure ends the job (exit $rc0)"
# a PyTorch DDP job checkpointing every step, one node killed mid-training: the job restarts on
# two nodes from the last checkpoint and ends with the loss of one process on the full batch
if "$PY" -c "import torch" 2>/dev/null; then
    f0=$failures
    rm -f "$T"/log.* "$T"/err.*
    script=${COHORT_SOURCE_DIR:?}/tests/launch/launch_elastic_ddp.py
    ref=$("$PY" "$script" "$T/single.pt" 30 | sed -nE 's/.*"loss": ([^}]+)}.*/\1/p')
    P=$(free_port)
    ddp() { # ID RANK
        ID=$1 STEP_SLEEP=0.2 exec "$C" run --nnodes 2:3 --node-rank "$2" --master-port "$P" --max-restarts 1 \
            --join-timeout 60 --grace 1 "$PY" "$script" "$T/job.pt" 30 >"$T/out.$1" 2>"$T/err.$1"
    }
    start3 ddp
    # mid-training: a checkpoint exists (about 30 x 0.2 s of training are left)
    for _ in $(seq 3600); do [ -e "$T/job.pt" ] && break; sleep 0.05; done
    sleep 1
    kill -9 $nb
    wait $n0
    rc0=$?
    wait $na
    rca=$?
    [ $rc0 -eq 0 ] && [ $rca -eq 0 ] || fail "elastic DDP: launchers exited $rc0 and $rca: $(tail -n 5 "$T/err.n0")"
    "$PY" - "$ref" "$T/out.n0" "$T/out.a" <<'PY' || fail "elastic DDP: the resumed job's loss differs from one process"
import json, sys
ref = float(sys.argv[1])
recs = [json.loads(l.partition("]: ")[2]) for f in sys.argv[2:] for l in open(f) if "]: {" in l]
ok = sorted(r["rank"] for r in recs) == [0, 1] and all(r["world"] == 2 and r["start"] > 0 for r in recs)
ok = ok and all(abs(r["loss"] - ref) <= 1e-5 * abs(ref) for r in recs)
print("elastic DDP: round 2 on", [r["world"] for r in recs], "ranks, resumed at step", recs[0]["start"] if recs else None,
      "losses", [r["loss"] for r in recs], "one process", ref)
sys.exit(0 if ok else 1)
PY
    [ $failures -eq $f0 ] && echo "ok   elastic PyTorch DDP: a node killed mid-training, resumed from its checkpoint on 2 nodes, final loss equals one process's ($ref)"
else
    echo "SKIP elastic PyTorch DDP: torch missing"
fi
exit $((failures > 0))
