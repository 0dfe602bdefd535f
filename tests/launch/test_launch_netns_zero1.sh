#!/usr/bin/env bash
# test_launch_netns_zero1.sh: `cohort train --strategy zero1` across two nodes (network
# namespaces on one switch, netns_lib.sh) under `cohort run --nnodes 2` with a job secret: the
# ranks' collectives go over the tcp transport (chosen by default when a job spans nodes),
# their data connections authenticated with the attempt's key. One rank per node: final loss
# and parameters bit-identical to zero1 on two ranks of one node (shared memory: both reduce in
# rank order), while strangers on node 1 reach rank 0's tcp port during the rendezvous (a
# line of text, and a well-formed hello that cannot prove the key): each is closed and named in
# node 0's log. Two ranks per node (shared memory inside a node, tcp across): within the
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

# strangers HOST PORT: from node 1, once rank 0 listens: a line of text, then a hello of the
# right form (magic, version, ranks 1 -> 0) that cannot answer the challenge
strangers() {
    netns_node 1 "$py" - "$@" <<'PY'
import socket, struct, sys, time
host, port = sys.argv[1], int(sys.argv[2])
end = time.time() + 60
while time.time() < end:
    try:
        s = socket.create_connection((host, port), timeout=2)
        break
    except OSError:
        time.sleep(0.05)
s.sendall(b"GET / HTTP/1.0\r\n\r\n" + b"x" * 40)
time.sleep(0.3)
s.close()
s = socket.create_connection((host, port), timeout=2)
s.sendall(struct.pack("<IIQii", 0x54484F43, 1, 1, 1, 0) + bytes(16))
s.recv(48)
s.sendall(bytes(32))  # a made-up proof
time.sleep(0.3)
s.close()
PY
}

# two NAME PER_NODE TRANSPORT [strangers]: the job on both nodes, PER_NODE ranks each, global
# batch 4; TRANSPORT: what rank 0's log must show (a regex). With strangers, node 1's ranks
# start once node 0 has closed both.
two() {
    local name=$1 per=$2 want=$3 with=${4:-} k pids=() gate=
    [ -n "$with" ] && gate="until [ -e '$work/go' ]; do sleep 0.05; done; "
    for k in 0 1; do
        COHORT_LOG=debug NETNS_TIMEOUT=300 netns_node $k "$cohort" run --nnodes 2 --node-rank $k \
            --nproc-per-node "$per" --master-addr "$M" --master-port "$P" --job-token "$work/token" \
            sh -c "$([ $k = 1 ] && echo "$gate")"'exec "$0" "$@"' \
            "$cohort" train "${model[@]}" --batch $((4 / per)) --metrics "$work/$name.jsonl" \
            --dump-params "$work/$name.bin" >"$work/$name.out$k" 2>&1 &
        pids+=($!)
    done
    if [ -n "$with" ]; then
        strangers "$M" $((P + 2)) || fail "the strangers could not reach rank 0"
        wait_for 30 sh -c "[ \$(grep -c 'closed a connection from $NETNS_SUBNET.2:' '$work/$name.out0') -ge 2 ]" ||
            fail "$name: the strangers were not closed and named: $(grep -h "closed" "$work/$name.out0")"
        grep -q "closed a connection from $NETNS_SUBNET.2:[0-9]*: not a cohort hello" "$work/$name.out0" &&
            grep -q "closed a connection from $NETNS_SUBNET.2:[0-9]*: wrong key" "$work/$name.out0" &&
            echo "ok   two strangers at rank 0's tcp port closed and named: $(grep -ho "closed a connection from .*" "$work/$name.out0" | tr '\n' ';')" ||
            fail "$name: strangers: $(grep -h "closed" "$work/$name.out0")"
        touch "$work/go"
    fi
    wait "${pids[0]}" && wait "${pids[1]}" ||
        { fail "$name: $(tail -n 4 "$work/$name.out0" "$work/$name.out1")"; return 1; }
    grep -q "$want" "$work/$name.out0" && ! grep -q "data connections are not authenticated" "$work/$name".out* ||
        fail "$name: not over authenticated tcp: $(grep -h "transport\|authenticated" "$work/$name".out* | head -4)"
    P=$((P + 5))
}

t0=$(now)
par_train ref2 2 --batch 4 || exit 1
t1=$(now)
two nodes2x1 1 "on transport tcp" strangers || exit 1
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
