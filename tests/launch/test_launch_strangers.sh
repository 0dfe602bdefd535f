#!/usr/bin/env bash
# test_launch_strangers.sh: the job secret of cohort run --nnodes: a token file others may read
# is refused by name; two launchers with different secrets refuse each other (exit 2 on both);
# then on two network namespaces (netns_lib.sh), strangers at node 0's control port while the
# real two-node job starts (no secret, a replayed captured HELLO, silent sockets past the
# handshake deadline and while node 1 joins, a 1 MiB line, a HELLO with another --nnodes) are each closed and named in node 0's
# log, and the PyTorch DDP script of test_launch_ddp.py, then `cohort train --strategy zero1`
# (its collectives over the tcp transport across the nodes), end with the losses of a run without
# strangers. Prints how long node 0 took to close each stranger.
. "$(dirname "${BASH_SOURCE[0]}")/../parallel/par_lib.sh"
. "$src/tests/launch/netns_lib.sh"
export COHORT_LOG=info
unset COHORT_JOB_TOKEN
free_port() { "$py" -c 'import random
lo = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
print(random.randrange(20000, min(lo, 29000) - 4))'; }
openssl_hex() { "$py" -c 'import os; print(os.urandom(32).hex())'; }
( umask 077; openssl_hex > "$work/tokA"; openssl_hex > "$work/tokB" )

# 1. a token file its group or others may read: refused by name, before anything starts
cp "$work/tokA" "$work/open.tok"
chmod 640 "$work/open.tok"
out=$("$cohort" run --nnodes 2 --master-port "$(free_port)" --job-token "$work/open.tok" true 2>&1)
rc=$?
[ $rc -eq 2 ] && grep -qF "job token file '$work/open.tok' is readable or writable by others (mode 0640)" <<<"$out" &&
    echo "ok   a group-readable token file: exit 2 naming it: $out" ||
    fail "group-readable token file: exit $rc: $out"

# the secret stays with the launchers: workers do not inherit COHORT_JOB_TOKEN
out=$(COHORT_JOB_TOKEN=$(cat "$work/tokA") "$cohort" run --prefix '' sh -c 'echo "${COHORT_JOB_TOKEN:-unset}"' 2>/dev/null)
[ "$out" = unset ] && echo "ok   COHORT_JOB_TOKEN is not passed on to the workers" || fail "a worker saw COHORT_JOB_TOKEN: $out"

# 2. two launchers with different secrets refuse each other, exit 2 on both sides. Node 0 waits
# out its join timeout (3 s) for a launcher with its secret; node 1 starts first and retries its
# connection until node 0 listens, so that even a slow start on a loaded machine falls within
# those 3 s.
P=$(free_port)
"$cohort" run --nnodes 2 --node-rank 1 --master-port "$P" --join-timeout 60 --job-token "$work/tokB" \
    true 2>"$work/d1.err" &
launcher=$!
"$cohort" run --nnodes 2 --node-rank 0 --master-port "$P" --join-timeout 3 --job-token "$work/tokA" \
    true 2>"$work/d0.err"
rc0=$?
wait $launcher
rc1=$?
launcher=
f0=$fails
[ $rc0 -eq 2 ] && [ $rc1 -eq 2 ] || fail "different secrets: launchers exited $rc0 and $rc1, expected 2 and 2"
grep -q "refused because their job secret differs" "$work/d0.err" || fail "node 0 does not say why: $(cat "$work/d0.err")"
grep -q "refused this launcher: the job secrets differ" "$work/d1.err" || fail "node 1 does not say why: $(cat "$work/d1.err")"
[ $fails -eq $f0 ] && echo "ok   different secrets: both launchers exit 2: $(grep error "$work/d1.err")"

# 3. strangers on a two-node job across network namespaces
why=$(netns_can_run)
[ -z "$why" ] || { echo "SKIP strangers on two nodes: $why"; par_done_skip=1; }
"$py" -c "import torch" 2>/dev/null || { echo "SKIP strangers on two nodes: torch missing"; par_done_skip=1; }
if [ -n "${par_done_skip:-}" ]; then
    [ $fails -eq 0 ] || exit 1
    exit 0
fi
trap 'netns_down; [ -n "$launcher" ] && kill -9 "$launcher" 2>/dev/null; rm -rf "$work"' EXIT
chmod 755 "$work"
netns_up || { fail "namespaces could not be made"; exit 1; }
"$py" -c 'import ast, sys
tree = ast.parse(open(sys.argv[1]).read())
print(next(n.value.value for n in tree.body if isinstance(n, ast.Assign) and n.targets[0].id == "SCRIPT"))' \
    "$src/tests/launch/test_launch_ddp.py" > "$work/ddp.py"
# each worker runs the DDP script, then 10 steps of zero1 on the same 2 x 2 ranks (rank 0
# writes the metrics file its argument names)
par_prepare
par_model 256 2 2 32 32
{
    printf '"%s" "%s" || exit $?\n' "$py" "$work/ddp.py"
    printf 'exec "%s" train' "$cohort"
    printf " '%s'" "${model[@]}" --strategy zero1 --batch 2 --steps 10 --lr 1e-3 --warmup 2 \
        --deterministic
    printf ' --metrics "$1"\n'
} >"$work/worker.sh"
M=$NETNS_SUBNET.1
stranger() { NETNS_TIMEOUT=60 netns_node 1 "$py" "$src/tests/launch/launch_stranger.py" "$@"; }
run_node() { # K NAME [OPTIONS]: node K's launcher of the 2 x 2 job
    local k=$1 name=$2
    shift 2
    NETNS_TIMEOUT=200 netns_node "$k" "$cohort" run --nnodes 2 --node-rank "$k" -n 2 --master-addr "$M" \
        --master-port "$P" --join-timeout 60 --grace 1 "$@" sh "$work/worker.sh" \
        "$work/$name-zero1.jsonl" >"$work/$name$k.out" 2>"$work/$name$k.err"
}
zero1_losses() { grep -oE '"loss":[^,}]*' "$work/$1-zero1.jsonl" 2>/dev/null | tr '\n' ' '; }
losses() { sed -nE 's/.*"loss": ([^,]+),.*/\1/p' "$work/$1"0.out "$work/$1"1.out | sort | tr '\n' ' '; }

# a run without strangers and without a secret: one warning line on each node
P=$(free_port)
run_node 0 ref &
launcher=$!
run_node 1 ref
rc1=$?
wait $launcher
rc0=$?
launcher=
[ $rc0 -eq 0 ] && [ $rc1 -eq 0 ] || fail "the job without strangers: exit $rc0 and $rc1: $(tail -n 3 "$work/ref0.err" "$work/ref1.err")"
ref=$(losses ref)
[ "$(echo $ref | wc -w)" -eq 4 ] || fail "the job without strangers: losses '$ref'"
zref=$(zero1_losses ref)
[ "$(echo $zref | wc -w)" -eq 10 ] || fail "zero1 without strangers: losses '$zref'"
for k in 0 1; do
    [ "$(grep -c "warning: no job secret" "$work/ref$k.err")" -eq 1 ] || fail "node $k without a secret: not one warning: $(cat "$work/ref$k.err")"
done

# a HELLO captured from a real launcher of the job (it took a stranger for node 0)
P=$(free_port)
NETNS_TIMEOUT=120 netns_node 0 "$py" "$src/tests/launch/launch_stranger.py" capture "$M" $((P + 3)) "$work/captured" &
cap=$!
wait_file() { for _ in $(seq 2000); do [ -e "$1" ] && return 0; sleep 0.05; done; return 1; }
wait_file "$work/captured.ready" || fail "the capturing node 0 did not listen"
NETNS_TIMEOUT=30 netns_node 1 "$cohort" run --nnodes 2 --node-rank 1 -n 2 --master-addr "$M" --master-port "$P" \
    --control-port $((P + 3)) --join-timeout 3 --job-token "$work/tokA" true 2>/dev/null
wait $cap
grep -qE "^HELLO 1 2 2 node1 [0-9a-f]{32} [0-9a-f]{64}$" "$work/captured" || fail "no HELLO captured: $(cat "$work/captured")"

# the job again, with strangers at its control port before node 1 comes: two silent ones
# outlast the handshake deadline (5 s), two more are still connected when node 1 joins. The
# test waits for node 0 to close the first two, and for the late two to be connected (node 1
# then joins well within their 5 s), not for fixed times.
# count_in N REGEX GLOB: until N lines of the files of GLOB (expanded each time: a background
# job makes its file when it runs) match REGEX (at most 100 s)
count_in() {
    local _
    for _ in $(seq 2000); do [ "$(cat $3 2>/dev/null | grep -c "$2")" -ge "$1" ] && return 0; sleep 0.05; done
    return 1
}
run_node 0 str --job-token "$work/tokA" &
launcher=$!
CP=$((P + 1))
for m in nosecret wrongnn big silent silent; do stranger "$m" "$M" $CP >"$work/s.$m.$RANDOM" 2>&1 & done
stranger replay "$M" $CP "$work/captured" >"$work/s.replay" 2>&1 &
count_in 2 "no HELLO within" "$work/str0.err" || fail "node 0 did not close the silent strangers: $(cat "$work/str0.err")"
for m in silent silent; do stranger "$m" "$M" $CP >"$work/s.late-$m.$RANDOM" 2>&1 & done
count_in 2 "connected" "$work/s.late-*" || fail "the late strangers did not connect: $(cat "$work"/s.late-*)"
run_node 1 str --job-token "$work/tokA"
rc1=$?
wait $launcher
rc0=$?
launcher=
wait
f0=$fails
[ $rc0 -eq 0 ] && [ $rc1 -eq 0 ] || fail "the job with strangers: exit $rc0 and $rc1: $(tail -n 5 "$work/str0.err" "$work/str1.err")"
got=$(losses str)
[ "$got" = "$ref" ] || fail "the job with strangers: losses '$got', without: '$ref'"
zgot=$(zero1_losses str)
[ "$zgot" = "$zref" ] || fail "zero1 with strangers: losses '$zgot', without: '$zref'"
closed=$(grep -h "closed a connection to the control port from $NETNS_SUBNET.2:" "$work/str0.err")
[ "$(grep -c "does not prove this job's secret" <<<"$closed")" -eq 3 ] || fail "not 3 strangers refused for the secret (no secret, replay, --nnodes 3): $closed"
[ "$(grep -c "no HELLO within" <<<"$closed")" -eq 2 ] || fail "not 2 silent strangers closed at the deadline: $closed"
[ "$(grep -c "every node has joined" <<<"$closed")" -eq 2 ] || fail "not 2 silent strangers closed when node 1 joined: $closed"
[ "$(grep -c "a line longer than" <<<"$closed")" -eq 1 ] || fail "the 1 MiB line not closed: $closed"
[ "$(cat "$work"/s.* | grep -c "closed after")" -eq 8 ] || fail "not every stranger saw its connection closed: $(cat "$work"/s.*)"
[ $fails -eq $f0 ] && echo "ok   8 strangers at node 0's control port, each closed and named in its log; the DDP job on 2 nodes x 2 and zero1 after it end with the losses without strangers ($got; zero1 at step 10: $(echo $zgot | awk '{print $NF}'))" &&
    echo "     time to close each stranger: $(cat "$work"/s.* | grep "closed after" | sort | tr '\n' ';')"
[ $fails -eq 0 ] && echo "the job secret holds: strangers cannot stop, stall or join a job"
exit $((fails > 0))
