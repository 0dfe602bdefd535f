#!/usr/bin/env bash
# test_launch_netns_zero1_elastic.sh: `cohort train --strategy zero1` on three nodes (network
# namespaces on one switch, netns_lib.sh) under `cohort run --nnodes 2:3` with a job secret,
# one rank per node, collectives over the tcp transport. Node 2's launcher is killed (-9) after
# the checkpoint of step 300 of 600 (three ZeRO shards): the two others see its rank die, the job
# restarts on two nodes and resumes from that checkpoint, resharded from 3 ranks to 2, and
# ends at the final loss of an uninterrupted run resumed from a copy of the same checkpoint at
# 2 ranks on one node (shared memory), bit for bit. Prints the restart time. Skipped by name
# without root or iproute2.
. "$(dirname "${BASH_SOURCE[0]}")/../parallel/par_lib.sh"
. "$src/tests/launch/netns_lib.sh"
unset COHORT_JOB_TOKEN COHORT_COMM
why=$(netns_can_run)
[ -z "$why" ] || { echo "SKIP elastic zero1 on three nodes: $why"; exit 77; }
trap 'netns_down; rm -rf "$work"' EXIT
chmod 755 "$work"
par_prepare
par_model 256 2 2 32 32
model+=(--lr 1e-3 --deterministic --steps 600 --strategy zero1)
# global batch 6 at any world size: 3 ranks x 2, 2 ranks x 3
train='exec "$0" train "$@" --batch $((6 / WORLD_SIZE))'
"$cohort" token "$work/token" >/dev/null || fail "cohort token"
netns_up_bridge 3 || { fail "namespaces could not be made"; exit 1; }
M=$NETNS_SUBNET.1
P=$("$py" -c 'import random; print(random.randrange(20000, 28000))')
mkdir "$work/job" "$work/snap"
node() { # K: the elastic job's launcher on node K, output in $work/out.K
    COHORT_LOG=debug NETNS_TIMEOUT=300 netns_node "$1" "$cohort" run --nnodes 2:3 \
        --node-rank $(($1 > 0)) --master-addr "$M" --master-port "$P" --max-restarts 1 \
        --join-timeout 60 --grace 1 --job-token "$work/token" sh -c "$train" "$cohort" "${model[@]}" \
        --save "$work/job/ck" --save-every 300 --metrics "$work/job.jsonl" >"$work/out.$1" 2>&1
}
# the launcher on node K: the cohort run there whose parent is not a cohort (the guard's is)
launcher_of() {
    local p
    for p in $(ip netns pids "${netns_ids[$1]}"); do
        [ "$(cat "/proc/$p/comm" 2>/dev/null)" = cohort ] && grep -q "^run" <(tr '\0' '\n' < "/proc/$p/cmdline" | sed -n 2p) &&
            [ "$(cat "/proc/$(awk '{print $4}' "/proc/$p/stat")/comm" 2>/dev/null)" != cohort ] && echo "$p"
    done
}
node 2 & p2=$!
node 1 & p1=$!
node 0 & p0=$!
# once the checkpoint of step 300 is committed (the weights renamed into place last; the next
# save would come at step 600), a copy of it, then node 2 killed
ready() { [ -e "$work/job/ck.state300" ] && [ -e "$work/job/ck.shard300-2-of-3" ] && [ -e "$work/job/ck" ]; }
wait_for 120 ready || fail "no checkpoint of step 300: $(tail -n 3 "$work"/out.*)"
sleep 0.1
cp -p "$work"/job/ck* "$work/snap/"
kb=$(launcher_of 2)
[ "$(wc -w <<<"$kb")" -eq 1 ] || fail "not one launcher on node 2: '$kb'"
t0=$(now)
kill -9 $kb
ls "$work/snap" | grep -q "ck.shard300-2-of-3" || fail "no 3-shard checkpoint of step 300: $(ls "$work/snap")"
grep -q "rank 0 of 3 (launcher cohort) on transport tcp" "$work/out.0" ||
    fail "the first round was not 3 ranks over tcp: $(grep -h "on transport" "$work/out.0" | head -2)"
wait $p0; rc0=$?
wait $p1; rc1=$?
wait $p2
t1=$(now)
[ $rc0 -eq 0 ] && [ $rc1 -eq 0 ] || fail "launchers of nodes 0 and 1 exited $rc0 and $rc1: $(tail -n 8 "$work/out.0")"
grep -q "launcher (host node2) was lost" "$work/out.0" || fail "node 0 did not name node2 lost"
grep -q "restart 1: resuming from '$work/job/ck'" "$work/out.0" || fail "the restart did not resume: $(grep -h "resum" "$work/out.0")"
grep -q "rank 0 of 2 (launcher cohort) on transport tcp" "$work/out.0" || fail "the second round was not 2 ranks over tcp"
# the reference: the same checkpoint resumed at 2 ranks on one node, uninterrupted
"$cohort" run --nproc-per-node 2 sh -c "$train" "$cohort" "${model[@]}" --resume "$work/snap/ck" \
    --metrics "$work/ref.jsonl" >"$work/ref.out" 2>&1 || fail "resumed reference: $(tail -3 "$work/ref.out")"
a=$(last_loss "$work/job.jsonl") b=$(last_loss "$work/ref.jsonl")
grep -q "global batch 6 sequences = micro-batch 3 x accumulation 1 x data-parallel 2" "$work/out.0" ||
    fail "the second round did not train at data-parallel 2"
[ "$(last_step "$work/job.jsonl")" = 600 ] && [ -n "$a" ] && [ "$a" = "$b" ] ||
    fail "final loss $a (step $(last_step "$work/job.jsonl")) differs from the resumed reference's $b"
par_done "ok   zero1 on --nnodes 2:3 over tcp: node2 killed after the checkpoint of step 300, restarted on 2 nodes from the 3-shard checkpoint, final loss $a equals the same checkpoint resumed at 2 ranks ($(secs "$t0" "$t1") s from the kill to the job's end)"
