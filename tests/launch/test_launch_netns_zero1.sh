#!/usr/bin/env bash
# test_launch_netns_zero1.sh: `cohort train --strategy zero1` across two nodes (network
# namespaces on one switch, netns_lib.sh) under `cohort run --nnodes 2` with a job secret: the
# ranks' collectives go over the tcp transport (chosen by default when a job spans nodes),
# their data connections authenticated with the attempt's key. One rank per node: final loss
# and parameters bit-identical to zero1 on two ranks of one node (shared memory: both reduce in
# rank order). Two ranks per node (shared memory inside a node, tcp across): within the
# parallel tests' bound (par_compare.py) of four ranks on one node. Prints the wall times.
# Skipped by name without root, iproute2 or numpy.
. "$(dirname "${BASH_SOURCE[0]}")/../parallel/par_lib.sh"
. "$src/tests/launch/netns_lib.sh"
unset COHORT_JOB_TOKEN COHORT_COMM
why=$(netns_can_run)
[ -z "$why" ] || { echo "SKIP zero1 on two nodes: $why"; exit 77; }
"$py" -c "import numpy" 2>/dev/null || { echo "SKIP zero1 on two nodes: numpy missing"; exit 77; }
trap 'netns_down; rm -rf "$work"' EXIT
chmod 755 "$work"
par_prepare --val-fraction 0.1 "$src/tests/parallel/equiv_corpus.txt"
V=256 C=32 L=2 T=32
par_model $V $L 2 $C $T
model+=(--lr 1e-3 --warmup 3 --deterministic --shuffle on --steps 20 --strategy zero1)
"$cohort" token "$work/token" >/dev/null || fail "cohort token"
netns_up_bridge 2 || { fail "namespaces could not be made"; exit 1; }
M=$NETNS_SUBNET.1
P=$("$py" -c 'import random; print(random.randrange(20000, 28000))')

# two NAME PER_NODE TRANSPORT: the job on both nodes, PER_NODE ranks each, global batch 4;
# TRANSPORT: what rank 0's log must show (a regex)
two() {
    local name=$1 per=$2 want=$3 k pids=()
    for k in 0 1; do
        COHORT_LOG=debug NETNS_TIMEOUT=300 netns_node $k "$cohort" run --nnodes 2 --node-rank $k \
            --nproc-per-node "$per" --master-addr "$M" --master-port "$P" --job-token "$work/token" \
            "$cohort" train "${model[@]}" --batch $((4 / per)) --metrics "$work/$name.jsonl" \
            --dump-params "$work/$name.bin" >"$work/$name.out$k" 2>&1 &
        pids+=($!)
    done
    wait "${pids[0]}" && wait "${pids[1]}" ||
        { fail "$name: $(tail -n 4 "$work/$name.out0" "$work/$name.out1")"; return 1; }
    grep -q "$want" "$work/$name.out0" && ! grep -q "data connections are not authenticated" "$work/$name".out* ||
        fail "$name: not over authenticated tcp: $(grep -h "transport\|authenticated" "$work/$name".out* | head -4)"
    P=$((P + 5))
}

t0=$(now)
par_train ref2 2 --batch 4 || exit 1
t1=$(now)
two nodes2x1 1 "on transport tcp" || exit 1
t2=$(now)
if cmp -s "$work/ref2.bin" "$work/nodes2x1.bin" && [ "$(losses "$work/ref2.jsonl")" = "$(losses "$work/nodes2x1.jsonl")" ]; then
    echo "ok   zero1 on 2 nodes x 1 rank: losses and parameters bit-identical to 2 ranks on one node (final loss $(last_loss "$work/nodes2x1.jsonl"); $(secs "$t1" "$t2") s on two nodes, $(secs "$t0" "$t1") s on one)"
else
    fail "zero1 on 2 nodes x 1 rank differs from 2 ranks on one node: losses $(last_loss "$work/ref2.jsonl") vs $(last_loss "$work/nodes2x1.jsonl")"
fi
par_train ref4 4 --batch 2 || exit 1
t3=$(now)
two nodes2x2 2 "hierarchical transport: 4 ranks on 2 nodes (2+2); all-reduce as shm reduce-scatter, tcp all-reduce" || exit 1
t4=$(now)
par_check "zero1 on 2 nodes x 2 ranks (shm inside, tcp across; $(secs "$t3" "$t4") s) against 4 ranks on one node" ref4 nodes2x2
par_done "ok   zero1 across two nodes over tcp"
