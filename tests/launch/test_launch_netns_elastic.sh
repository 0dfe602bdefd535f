#!/usr/bin/env bash
# test_launch_netns_elastic.sh: elastic membership (--nnodes 2:3) on three nodes of one switch
# (netns_lib.sh: network namespaces, the control channel and PyTorch's gloo over the switch): a
# DDP job checkpointing every step loses node 2's launcher (kill -9) mid-training and restarts
# on two nodes from its checkpoint; a new launcher on node 2 joins during that round and enters
# at the next restart (a worker failure), on three nodes again; the job ends with the loss of
# one process on the full batch (within 1e-5). Prints the restart times. Skipped by name without
# root, iproute2 or torch.
. "$(dirname "${BASH_SOURCE[0]}")/../parallel/par_lib.sh"
. "$src/tests/launch/netns_lib.sh"
export COHORT_LOG=info
unset COHORT_JOB_TOKEN
why=$(netns_can_run)
[ -z "$why" ] || { echo "SKIP elastic on three nodes: $why"; exit 77; }
"$py" -c "import torch" 2>/dev/null || { echo "SKIP elastic on three nodes: torch missing"; exit 77; }
trap 'netns_down; rm -rf "$work"' EXIT
chmod 755 "$work"
netns_up_bridge 3 || { fail "namespaces could not be made"; exit 1; }
M=$NETNS_SUBNET.1
P=$("$py" -c 'import random; print(random.randrange(20000, 28000))')
script=$src/tests/launch/launch_elastic_ddp.py
started() { [ "$(cat "$work"/err.* 2>/dev/null | grep -c "started attempt $1 world $2 ")" -ge "$3" ]; }
ref=$("$py" "$script" "$work/single.pt" 30 2>/dev/null | sed -nE 's/.*"loss": ([^}]+)}.*/\1/p')
[ -n "$ref" ] || { fail "the one-process run gave no loss"; exit 1; }
ddp() { # K ID: a launcher of the elastic job on node K, its output in $work/{out,err}.ID
    STEP_SLEEP=0.2 FAIL_FILE=$work/fail1 NETNS_TIMEOUT=300 netns_node "$1" "$cohort" run \
        --nnodes 2:3 --node-rank $(($1 > 0)) --master-addr "$M" --master-port "$P" --max-restarts 2 \
        --join-timeout 60 --grace 1 "$py" "$script" "$work/job.pt" 30 >"$work/out.$2" 2>"$work/err.$2"
}
# the launcher on node K: the cohort process there whose parent is not one (the guard's is)
launcher_of() {
    local p
    for p in $(ip netns pids "${netns_ids[$1]}"); do
        [ "$(cat "/proc/$p/comm" 2>/dev/null)" = cohort ] &&
            [ "$(cat "/proc/$(awk '{print $4}' "/proc/$p/stat")/comm" 2>/dev/null)" != cohort ] && echo "$p"
    done
}
# node 0 last, once nodes 1 and 2 are up (they say they have no secret, then retry their
# connection every 0.1 s): an elastic node 0 starts the round 2 s after the second node joined,
# and a third launcher started late by a loaded machine would miss it
ddp 1 a &
pa=$!
ddp 2 b &
pb=$!
wait_for 100 grep -q "no job secret" "$work/err.a" && wait_for 100 grep -q "no job secret" "$work/err.b" ||
    fail "the launchers of nodes 1 and 2 did not start: $(tail -n 3 "$work"/err.*)"
ddp 0 n0 &
p0=$!
wait_for 120 started 0 3 3 || fail "the first round did not start on 3 nodes: $(tail -n 3 "$work"/err.*)"
wait_for 60 test -e "$work/job.pt" || fail "no checkpoint from the first round"
sleep 0.5
kb=$(launcher_of 2)
[ "$(wc -w <<<"$kb")" -eq 1 ] || fail "not one launcher on node 2: '$kb'"
t0=$(now)
kill -9 $kb
wait_for 60 grep -q "restart 1 of 2" "$work/err.n0" && t1l=$(now) || fail "node 0 did not restart: $(tail -n 5 "$work/err.n0")"
wait_for 120 started 1 2 2 && t1=$(now) || fail "no second round on 2 nodes: $(tail -n 5 "$work/err.n0")"
wait $pb
# a new launcher on node 2 during the round: it waits for the next restart
ddp 2 c &
pc=$!
wait_for 60 grep -q "it enters at the next restart" "$work/err.n0" ||
    fail "the late node was not taken in: $(tail -n 3 "$work/err.n0" "$work/err.c")"
grep -q "started attempt" "$work/err.c" && fail "the late node's workers started before the next restart"
t2=$(now)
touch "$work/fail1"
wait_for 60 grep -q "restart 2 of 2" "$work/err.n0" && t3l=$(now) || fail "node 0 did not restart again: $(tail -n 5 "$work/err.n0")"
wait_for 120 started 2 3 3 && t3=$(now) || fail "no third round on 3 nodes: $(tail -n 5 "$work/err.n0")"
wait $p0
rc0=$?
wait $pa
rca=$?
wait $pc
rcc=$?
[ $rc0 -eq 0 ] && [ $rca -eq 0 ] && [ $rcc -eq 0 ] ||
    fail "launchers exited $rc0, $rca and $rcc, expected 0: $(tail -n 5 "$work/err.n0")"
"$py" - "$ref" "$work/out.n0" "$work/out.a" "$work/out.c" <<'PY' || fail "the job's final loss differs from one process's"
import json, sys
ref = float(sys.argv[1])
recs = [json.loads(l.partition("]: ")[2]) for f in sys.argv[2:] for l in open(f) if "]: {" in l]
ok = sorted(r["rank"] for r in recs) == [0, 1, 2] and all(r["world"] == 3 and r["start"] > 0 for r in recs)
ok = ok and all(abs(r["loss"] - ref) <= 1e-5 * abs(ref) for r in recs)
print("last round on", len(recs), "ranks of world", [r["world"] for r in recs], "resumed at step",
      sorted({r["start"] for r in recs}), "losses", [r["loss"] for r in recs], "one process", ref)
sys.exit(0 if ok else 1)
PY
[ $fails -eq 0 ] && echo "ok   --nnodes 2:3 on 3 nodes: node 2's launcher killed, restarted on 2 (node 0's restart $(secs "$t0" "$t1l") s after the kill, its DDP workers running again after $(secs "$t0" "$t1") s), a late node taken in at the next restart (restart $(secs "$t2" "$t3l") s after the failure, workers on 3 nodes after $(secs "$t2" "$t3") s); final loss equals one process's ($ref)"
exit $((fails > 0))
