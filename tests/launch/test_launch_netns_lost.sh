#!/usr/bin/env bash
# test_launch_netns_lost.sh: a node that vanishes without a word (its cable pulled out of the
# switch: no FIN, no RST) is noticed within COHORT_CONTROL_TIMEOUT + 1 s, not when TCP gives up
# minutes later. Three nodes on one switch (netns_lib.sh, network namespaces): an elastic job
# (--nnodes 2:3) whose third node is cut off restarts on the two that remain, and the cut-off
# node's launcher ends its workers and exits 1 naming node 0; a static two-node job whose node 1
# is cut off ends on node 0 with exit 1 naming node 1. A bad COHORT_CONTROL_TIMEOUT is refused
# by name. Prints the detection and restart times. Skipped by name without root or iproute2.
. "$(dirname "${BASH_SOURCE[0]}")/../parallel/par_lib.sh"
. "$src/tests/launch/netns_lib.sh"
. "$src/tests/launch/proc_lib.sh"
export COHORT_LOG=info
unset COHORT_JOB_TOKEN

# a bad timeout: refused by name, exit 2, before anything starts
out=$(COHORT_CONTROL_TIMEOUT=1x "$cohort" run --nnodes 2 --master-port 29911 true 2>&1)
rc=$?
[ $rc -eq 2 ] && grep -qF "invalid COHORT_CONTROL_TIMEOUT '1x': expected seconds from 2 to 3600" <<<"$out" &&
    echo "ok   COHORT_CONTROL_TIMEOUT=1x: exit 2: $out" || fail "COHORT_CONTROL_TIMEOUT=1x: exit $rc: $out"

why=$(netns_can_run)
[ -z "$why" ] || { echo "SKIP a vanished node: $why"; [ $fails -eq 0 ] && exit 77; exit 1; }
trap 'netns_down; rm -rf "$work"' EXIT
chmod 755 "$work"
netns_up_bridge 3 || { fail "namespaces could not be made"; exit 1; }
TO=${COHORT_TEST_CONTROL_TIMEOUT:-4} # COHORT_CONTROL_TIMEOUT: a silent launcher is lost after TO s (+1 s)
BOUND=30 # what the test accepts: generous (a loaded machine), far below TCP's own minutes
M=$NETNS_SUBNET.1
free_port() { "$py" -c 'import random; print(random.randrange(20000, 28000))'; }
# each worker logs "attempt world rank" to $work/log.ID and its pid to $work/pid.ID; attempt 0
# runs until stopped, later attempts end at once
w='echo "$TORCHELASTIC_RESTART_COUNT $WORLD_SIZE $RANK" >> '"$work"'/log.$ID
echo $$ > '"$work"'/pid.$ID
[ "$TORCHELASTIC_RESTART_COUNT" = 0 ] && exec sleep 300
exit 0'
node() { # K ID NNODES: a launcher on node K (netns), stderr in $work/err.ID
    local k=$1 id=$2 nn=$3
    ID=$id COHORT_CONTROL_TIMEOUT=$TO NETNS_TIMEOUT=120 netns_node "$k" "$cohort" run --nnodes "$nn" \
        --node-rank $((k > 0)) --master-addr "$M" --master-port "$P" --max-restarts 1 \
        --join-timeout 30 --grace 1 sh -c "$w" 2>"$work/err.$id"
}
lines() { [ "$(cat $2 2>/dev/null | grep -cE "$3")" -ge "$1" ]; }

# 1. elastic: node 2 cut off mid-round; the job goes on with nodes 0 and 1. Node 0 starts the
# round 2 s after the second node joined: it starts after nodes 1 and 2 are up (they say they
# have no secret, then retry their connection every 0.1 s), so that both join at once, however
# slowly a loaded machine started them.
P=$(free_port)
node 1 a 2:3 &
pa=$!
node 2 b 2:3 &
pb=$!
wait_for 100 grep -q "no job secret" "$work/err.a" && wait_for 100 grep -q "no job secret" "$work/err.b" ||
    fail "the launchers of nodes 1 and 2 did not start: $(cat "$work"/err.*)"
node 0 n0 2:3 &
p0=$!
wait_for 120 lines 3 "$work/log.*" '^0 3 ' || fail "the first round did not start on 3 nodes: $(cat "$work"/err.*)"
bworker=$(cat "$work/pid.b")
t0=$(now)
netns_cut 2
wait_for $BOUND grep -q "stopped answering" "$work/err.n0" &&
    t_detect=$(now) || fail "node 0 did not notice node 2 gone within $BOUND s: $(cat "$work/err.n0")"
wait_for $BOUND lines 2 "$work/log.n0 $work/log.a" '^1 2 ' && t_restart=$(now) ||
    fail "no second round on 2 nodes within $BOUND s: $(cat "$work/err.n0")"
wait_for $BOUND eval '! alive $pb' && t_self=$(now) ||
    fail "the cut-off node's launcher still runs after $BOUND s: $(cat "$work/err.b")"
wait $p0
rc0=$?
wait $pa
rca=$?
wait $pb
rcb=$?
[ $rc0 -eq 0 ] && [ $rca -eq 0 ] || fail "the nodes that remain exited $rc0 and $rca, expected 0: $(tail -n 4 "$work/err.n0" "$work/err.a")"
[ $rcb -eq 1 ] || fail "the cut-off node exited $rcb, expected 1: $(cat "$work/err.b")"
# (elastic nodes are numbered in the order they joined: the host names it)
grep -qE "node [12]'s launcher \(host node2, $NETNS_SUBNET.3:[0-9]+\) stopped answering for $TO s" "$work/err.n0" ||
    fail "node 0 does not name the lost node: $(cat "$work/err.n0")"
grep -q "node 0's launcher at $M stopped answering for $TO s" "$work/err.b" ||
    fail "the cut-off node does not name node 0: $(cat "$work/err.b")"
all_gone "$bworker" || fail "the cut-off node's worker (pid $bworker) outlived its launcher"
[ "$(grep -c '^0 3 ' "$work/log.n0" "$work/log.a" | cut -d: -f2 | tr '\n' ' ')" = "1 1 " ] &&
    [ "$(cat "$work/log.n0" "$work/log.a" | grep '^1 2 ' | cut -d' ' -f3 | sort | tr '\n' ' ')" = "0 1 " ] ||
    fail "rounds: $(cat "$work/log.n0" "$work/log.a")"
if [ $fails -eq 0 ]; then
    d=$(secs "$t0" "$t_detect") r=$(secs "$t0" "$t_restart") s=$(secs "$t0" "$t_self")
    echo "ok   --nnodes 2:3, node 2's link cut: node 0 noticed in $d s (COHORT_CONTROL_TIMEOUT=$TO), restarted on 2 nodes $r s after the cut; node 2 ended its workers and exited 1 after $s s"
fi

# 2. static: node 1 of a two-node job cut off; the job ends on node 0 naming it
netns_mend 2
rm -f "$work"/log.* "$work"/pid.* "$work"/err.*
P=$(free_port)
f0=$fails
node 0 s0 2 &
p0=$!
node 1 s1 2 &
p1=$!
wait_for 120 lines 2 "$work/log.*" '^0 2 ' || fail "the static job did not start: $(cat "$work"/err.*)"
t0=$(now)
netns_cut 1
wait_for $BOUND eval '! alive $p0' && t_end=$(now) || fail "node 0 did not end within $BOUND s: $(cat "$work/err.s0")"
wait $p0
rc0=$?
wait $p1
rc1=$?
[ $rc0 -eq 1 ] && [ $rc1 -eq 1 ] || fail "the static job after the cut: exit $rc0 and $rc1, expected 1 and 1"
grep -qE "job failed: node 1's launcher \(host node1, $NETNS_SUBNET.2:[0-9]+\) stopped answering for $TO s" "$work/err.s0" ||
    fail "node 0's summary does not name node 1: $(cat "$work/err.s0")"
[ $fails -eq $f0 ] && echo "ok   --nnodes 2, node 1's link cut: node 0 ended the job (exit 1) naming node 1 after $(secs "$t0" "$t_end") s: $(grep -m1 "job failed" "$work/err.s0")"
exit $((fails > 0))
