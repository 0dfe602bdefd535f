#!/usr/bin/env bash
# test_launch_netns.sh: two nodes on one machine (netns_lib.sh: network namespaces joined by a
# veth pair shaped to 1 Gbit/s with tc tbf, host names node0 and node1, a /dev/shm per node).
# Open MPI starts 2 ranks per node (its daemon on node 1 through an `ip netns exec` agent, TCP
# over the shaped link): cohort train --strategy ddp, zero1 and zero3 on the hierarchical
# transport equal one device (par_compare.py's bound) and their bytes cross the link; shared
# memory forced across the nodes is refused naming COHORT_COMM. `cohort run --nnodes 2` (one
# launcher per node, node 0's address on the link) runs the unmodified PyTorch DDP script of
# test_launch_ddp.py (gloo over the link) to single-process losses; a worker killed on node 1
# ends both launchers with its exit code (137) naming it; node 1 killed whole ends node 0's job.
# Skipped by name without root, iproute2, Open MPI or cohort's MPI plug-in.
. "$(dirname "${BASH_SOURCE[0]}")/../parallel/par_lib.sh"
. "$src/tests/launch/netns_lib.sh"
. "$src/tests/launch/proc_lib.sh"
netns_skip_unless_mpi
"$py" -c "import numpy" 2>/dev/null || { echo "SKIP namespaces: numpy missing"; exit 77; }
trap 'netns_down; [ -n "$launcher" ] && kill -9 "$launcher" 2>/dev/null; rm -rf "$work"' EXIT
chmod 755 "$work"
netns_up || { fail "namespaces could not be made"; par_done ""; }
netns_shape 1gbit || { fail "tc tbf on the link"; par_done ""; }
plugin=$(cd "${COHORT_BUILD_DIR:-.}" && pwd)/libcohort_mpi.so
export COHORT_COMM_TIMEOUT=60 COHORT_MPI_PLUGIN=$plugin
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
tx_bytes() { ip netns exec "${netns_ids[0]}" cat "/sys/class/net/${netns_ids[0]%n0}v0/statistics/tx_bytes"; }

# 0. the nodes are what they claim: own host names, own /dev/shm
f0=$fails
[ "$(netns_node 1 hostname)" = node1 ] || fail "node 1's host name: $(netns_node 1 hostname)"
netns_node 1 sh -c 'touch /dev/shm/cohort-netns-probe'
[ -e /dev/shm/cohort-netns-probe ] && fail "node 1's /dev/shm is this machine's"
out=$(netns_mpirun 2 hostname 2>&1 | sort | uniq -c | awk '{print $1 $2}' | tr '\n' ' ')
[ "$out" = "2node0 2node1 " ] || fail "mpirun across the nodes: $out"
[ $fails -eq $f0 ] && echo "ok   2 nodes: host names node0 and node1, /dev/shm private to each, mpirun places 2 ranks on each"

# 1. training across the nodes over Open MPI
par_prepare --val-fraction 0.1 "$src/tests/parallel/equiv_corpus.txt"
V=256 C=32 L=2 T=32
par_model $V $L 2 $C $T
model+=(--lr 1e-3 --warmup 3 --deterministic --shuffle on --steps 30 --bucket-mb 0.03)
"$cohort" train "${model[@]}" --batch 8 --metrics "$work/single.jsonl" \
    --dump-params "$work/single.bin" >/dev/null 2>"$work/single.err" || fail "single: $(cat "$work/single.err")"
for s in ddp zero1 zero3; do
    tx0=$(tx_bytes)
    COHORT_LOG=debug NETNS_TIMEOUT=200 netns_mpirun 2 -x COHORT_LOG -x COHORT_COMM_TIMEOUT -x COHORT_MPI_PLUGIN \
        -x ASAN_OPTIONS "$cohort" train "${model[@]}" --strategy $s --batch 2 \
        --metrics "$work/$s.jsonl" --dump-params "$work/$s.bin" >"$work/$s.out" 2>&1 ||
        { fail "$s on 2 nodes x 2: $(grep -v 'step ' "$work/$s.out" | tail -5)"; continue; }
    crossed=$(($(tx_bytes) - tx0))
    grep -q "comm: rank 0 of 4 (launcher openmpi) on transport hier" "$work/$s.out" &&
        grep -q "hierarchical transport: 4 ranks on 2 nodes (2+2)" "$work/$s.out" ||
        fail "$s: not hierarchical over 2 nodes of 2: $(grep 'comm:' "$work/$s.out" | head -3)"
    # 30 steps move the gradients (136 KB) at least once across the link each step
    [ "$crossed" -gt 1000000 ] || fail "$s: only $crossed bytes crossed the link"
    if "$py" "$src/tests/parallel/par_compare.py" "$work/single.jsonl" "$work/single.bin" \
        "$work/$s.jsonl" "$work/$s.bin" $V $C $L $T >"$work/$s.cmp" 2>&1; then
        echo "ok   $s on 2 nodes x 2 ranks ($((crossed / 1000)) kB crossed the 1 Gbit/s link): $(head -1 "$work/$s.cmp" | cut -c1-150)"
    else
        fail "$s on 2 nodes x 2: $(cat "$work/$s.cmp")"
    fi
done
out=$(COHORT_COMM=shm NETNS_TIMEOUT=60 netns_mpirun 2 -x COHORT_COMM "$cohort" train "${model[@]}" \
    --strategy ddp --batch 2 2>&1)
grep -q "shared memory reaches one node (COHORT_COMM=shm forces it).*COHORT_COMM=tcp or mpi" <<<"$out" &&
    echo "ok   COHORT_COMM=shm across the nodes: refused naming COHORT_COMM and the fix" ||
    fail "shared memory forced across nodes: $out"

# 2. cohort run --nnodes 2: one launcher per node, the PyTorch DDP script of test_launch_ddp.py
free_port() { "$py" -c 'import random, socket
lo = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
p = random.randrange(20000, min(lo, 29000) - 1); print(p)'; }
if "$py" -c "import torch" 2>/dev/null; then
    "$py" -c 'import ast, sys
tree = ast.parse(open(sys.argv[1]).read())
print(next(n.value.value for n in tree.body if isinstance(n, ast.Assign) and n.targets[0].id == "SCRIPT"))' \
        "$src/tests/launch/test_launch_ddp.py" > "$work/ddp.py"
    # PyTorch's OpenBLAS kernel for this CPU: SkylakeX only where AVX-512 is (else SIGILL)
    grep -qw avx512f /proc/cpuinfo && export OPENBLAS_CORETYPE=SkylakeX || export OPENBLAS_CORETYPE=Haswell
    ref=$("$py" "$work/ddp.py" | sed -E 's/.*"loss": ([^,]+),.*/\1/')
    P=$(free_port)
    run_node() { # K: node K's launcher of the 2 x 2 job
        netns_node "$1" "$cohort" run --nnodes 2 --node-rank "$1" -n 2 --master-addr "$NETNS_SUBNET.1" \
            --master-port "$P" --join-timeout 60 --grace 1 "$py" "$work/ddp.py"
    }
    run_node 0 >"$work/run0.out" 2>"$work/run0.err" &
    launcher=$!
    NETNS_TIMEOUT=200 run_node 1 >"$work/run1.out" 2>"$work/run1.err"
    rc1=$?
    wait $launcher
    rc0=$?
    launcher=
    f0=$fails
    [ $rc0 -eq 0 ] && [ $rc1 -eq 0 ] || fail "cohort run --nnodes 2 ddp.py: exit $rc0 and $rc1: $(tail -n 3 "$work/run0.err" "$work/run1.err")"
    "$py" - "$ref" "$work/run0.out" "$work/run1.out" <<'PY' || fail "cohort run --nnodes 2 ddp.py: ranks differ from one process"
import json, sys
ref = float(sys.argv[1])
recs = [json.loads(l.partition("]: ")[2]) for f in sys.argv[2:] for l in open(f) if "]: {" in l]
ranks = sorted(r["rank"] for r in recs)
ok = ranks == [0, 1, 2, 3] and all(r["world"] == 4 for r in recs) and len({r["job"] for r in recs}) == 1
ok = ok and all(abs(r["loss"] - ref) <= 1e-5 * max(abs(ref), 1e-6) for r in recs)
print("ranks", ranks, "losses", [r["loss"] for r in recs], "single", ref)
sys.exit(0 if ok else 1)
PY
    [ $fails -eq $f0 ] && echo "ok   cohort run --nnodes 2 across the namespaces: PyTorch DDP (gloo over the link) on 4 ranks equals one process"
else
    echo "SKIP cohort run --nnodes 2 with PyTorch DDP: torch missing"
fi

# 3. a worker killed on node 1: both launchers exit 137 (128 + SIGKILL) naming rank 3
worker='echo $$ > '"$work"'/n.$RANK; exec sleep 600'
start_job() {
    rm -f "$work"/n.*
    P=$(free_port)
    netns_node 0 "$cohort" run --nnodes 2 --node-rank 0 -n 2 --master-addr "$NETNS_SUBNET.1" \
        --master-port "$P" --join-timeout 60 --grace 1 sh -c "$worker" 2>"$work/k0.err" &
    launcher=$!
    netns_node 1 "$cohort" run --nnodes 2 --node-rank 1 -n 2 --master-addr "$NETNS_SUBNET.1" \
        --master-port "$P" --join-timeout 60 --grace 1 sh -c "$worker" 2>"$work/k1.err" &
    node1=$!
    for _ in $(seq 2400); do [ "$(ls "$work"/n.* 2>/dev/null | wc -l)" -eq 4 ] && return 0; sleep 0.05; done
    return 1
}
# (the pid a worker wrote is its pid here too: the namespaces are network, UTS and mount only,
# so all_gone can look it up)
if start_job; then
    f0=$fails
    kill -9 "$(cat "$work/n.3")"
    t0=$(date +%s)
    wait $node1
    rc1=$?
    wait $launcher
    rc0=$?
    launcher=
    [ $rc0 -eq 137 ] && [ $rc1 -eq 137 ] || fail "killed worker: launchers exited $rc0 and $rc1, expected 137 and 137"
    grep -q "rank 3" "$work/k0.err" || fail "node 0 does not name rank 3: $(cat "$work/k0.err")"
    all_gone $(cat "$work"/n.*) || fail "workers survived the killed worker"
    [ $fails -eq $f0 ] && echo "ok   a worker killed on node 1: both launchers exit $rc0 / $rc1 within $(($(date +%s) - t0)) s, node 0 names rank 3"
else
    fail "the 2-node sleep job did not start: $(cat "$work/k0.err" "$work/k1.err")"
fi
# 4. node 1 killed whole (every process in its namespace): node 0's launcher ends its workers
if start_job; then
    f0=$fails
    for p in $(ip netns pids "${netns_ids[1]}"); do kill -9 "$p" 2>/dev/null; done
    wait $node1 2>/dev/null
    # node 0 sees its connection to node 1 end: 60 s, or its workers (sleeping 600 s) hold it
    timeout 60 tail --pid=$launcher -f /dev/null ||
        { fail "node 1 killed: node 0's launcher still runs after 60 s: $(cat "$work/k0.err")"; kill -9 $launcher; }
    wait $launcher
    rc0=$?
    launcher=
    [ $rc0 -ne 0 ] || fail "node 1 killed: node 0's launcher exited 0"
    grep -q "node 1" "$work/k0.err" || fail "node 0 does not say node 1 was lost: $(cat "$work/k0.err")"
    all_gone $(cat "$work"/n.*) || fail "workers survived the loss of node 1"
    [ $fails -eq $f0 ] && echo "ok   node 1 killed whole: node 0's launcher exits $rc0 saying so, no worker left on either node"
else
    fail "the 2-node sleep job did not start (second time): $(cat "$work/k0.err" "$work/k1.err")"
fi
par_done "two nodes over a shaped link: training equals one device, DDP over cohort run, failures end the job"
