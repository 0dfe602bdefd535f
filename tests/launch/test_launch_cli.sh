#!/usr/bin/env bash
# test_launch_cli.sh: cohort run's interface: usage errors (exit 2, one line, before any worker
# starts), the full worker environment contract, options ending at PROGRAM, line prefixes,
# ranks filter, log directory layout, --tee, whole lines under concurrent output, cpu binding.
set -u
C=${COHORT:?COHORT must name the cohort binary}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
export COHORT_LOG=warn

# expect_usage NEEDLE ARGS...: exit 2, one line on stderr containing NEEDLE, no worker started.
expect_usage() {
    local needle=$1
    shift
    rm -f "$T/started"
    "$C" run "$@" >"$T/out" 2>"$T/err"
    local rc=$?
    [ $rc -eq 2 ] || fail "cohort run $* exited $rc, expected 2"
    [ "$(wc -l <"$T/err")" -eq 1 ] || fail "cohort run $*: expected one error line, got: $(cat "$T/err")"
    grep -qF -- "$needle" "$T/err" || fail "cohort run $*: error lacks '$needle': $(cat "$T/err")"
    [ ! -e "$T/started" ] || fail "cohort run $*: a worker started despite the error"
}
expect_usage "unknown option '--bogus'" --bogus 1 sh -c "touch $T/started"
expect_usage "program 'no-such-program-xyz' not found in PATH" -n 2 no-such-program-xyz
expect_usage "invalid --nnodes '4:1': MIN is above MAX" --nnodes 4:1 sh -c "touch $T/started"
expect_usage "invalid node rank '2'" --nnodes 2 --node-rank 2 sh -c "touch $T/started"
expect_usage "invalid master port '0' with 2 nodes" --nnodes 2 --master-port 0 sh -c "touch $T/started"
expect_usage "invalid ranks filter '0,5'" -n 2 --local-ranks-filter 0,5 sh -c "touch $T/started"
expect_usage "invalid prefix template '{rnak}'" --prefix '{rnak}' sh -c "touch $T/started"
expect_usage "invalid cpu binding 'sockets'" --cpu-bind sockets sh -c "touch $T/started"
expect_usage "'--tee': it needs '--log-dir'" --tee sh -c "touch $T/started"
expect_usage "no program to run" -n 2
expect_usage "invalid log directory '/proc/cohort-no/logs'" --log-dir /proc/cohort-no/logs sh -c "touch $T/started"
expect_usage "option '--master-port' needs a value" --master-port
# Numbers: one phrasing, naming the option and the value; no trailing garbage, no empty value.
# expect_usage_line LINE ARGS...: as expect_usage, and stderr is exactly LINE.
expect_usage_line() {
    local line=$1
    shift
    expect_usage "$line" "$@"
    [ "$(cat "$T/err")" = "$line" ] || fail "cohort run $*: error is not exactly '$line': $(cat "$T/err")"
}
expect_usage_line "cohort run: error: invalid --nproc-per-node '4x': must be an integer from 1 to 4096" -n 4x sh -c "touch $T/started"
expect_usage_line "cohort run: error: invalid --nproc-per-node '5000': must be an integer from 1 to 4096" -n 5000 sh -c "touch $T/started"
expect_usage_line "cohort run: error: invalid --nproc-per-node '': must be auto, cpu, gpu or an integer from 1 to 4096" -n '' sh -c "touch $T/started"
expect_usage_line "cohort run: error: invalid --nproc-per-node 'zero': must be auto, cpu, gpu or an integer from 1 to 4096" -n zero sh -c "touch $T/started"
expect_usage_line "cohort run: error: invalid --nproc-per-node '2x': must be an integer from 1 to 4096" --accelerator cpu -n 2x sh -c "touch $T/started"
expect_usage_line "cohort run: error: invalid --nnodes '0': must be an integer from 1 to 4096" --nnodes 0 sh -c "touch $T/started"
expect_usage_line "cohort run: error: invalid --node-rank '': must be an integer from 0 to 4095" --node-rank '' sh -c "touch $T/started"
expect_usage_line "cohort run: error: invalid --master-port '70000': must be an integer from 0 to 65535" --master-port 70000 sh -c "touch $T/started"
expect_usage_line "cohort run: error: invalid --control-port '0': must be an integer from 1 to 65535" --control-port 0 sh -c "touch $T/started"
expect_usage_line "cohort run: error: invalid --max-restarts '2x': must be an integer from 0 to 1000000" --max-restarts 2x sh -c "touch $T/started"
expect_usage_line "cohort run: error: invalid --max-restarts ' 2': must be an integer from 0 to 1000000" --max-restarts ' 2' sh -c "touch $T/started"
expect_usage_line "cohort run: error: invalid --pick '2x': must be an integer from 1 to 64" --pick 2x sh -c "touch $T/started"
expect_usage_line "cohort run: error: invalid --pick '65': must be an integer from 1 to 64" --pick 65 sh -c "touch $T/started"
expect_usage_line "cohort run: error: invalid --grace '-1': must be a number from 0 to 86400" --grace -1 sh -c "touch $T/started"
expect_usage_line "cohort run: error: invalid --grace '5s': must be a number from 0 to 86400" --grace 5s sh -c "touch $T/started"
expect_usage_line "cohort run: error: invalid --join-timeout '': must be a number from 0 to 86400" --join-timeout '' sh -c "touch $T/started"
expect_usage_line "cohort run: error: invalid --join-timeout '1e9': must be a number from 0 to 86400" --join-timeout 1e9 sh -c "touch $T/started"
expect_usage_line "cohort run: error: invalid join timeout '0': expected more than 0, up to 86400 seconds" --nnodes 2 --join-timeout 0 sh -c "touch $T/started"
# An elastic range with a side missing is named as typed, not as the empty side.
expect_usage_line "cohort run: error: invalid --nnodes '1:': expected N or MIN:MAX, each an integer from 1 to 4096" --nnodes 1: sh -c "touch $T/started"
expect_usage_line "cohort run: error: invalid --nnodes ':2': expected N or MIN:MAX, each an integer from 1 to 4096" --nnodes :2 sh -c "touch $T/started"
# Ports: the control port is not the master port; master + 1 (control) and master + 2 (the tcp
# transport's) must fit, named by the master port the user gave, never wrapped around.
expect_usage_line "cohort run: error: invalid control port '29795': it is the master port '29795' too; they must differ" --nnodes 2 --join-timeout 2 --master-port 29795 --control-port 29795 sh -c "touch $T/started"
expect_usage "master port '65535' leaves no room for the control port (master port + 1)" --nnodes 2 --master-port 65535 sh -c "touch $T/started"
expect_usage "master port '65534' leaves no room for the port of cohort's tcp transport" --master-port 65534 sh -c "touch $T/started"
port=$("$C" run --master-port 65533 --prefix '' sh -c 'echo $COHORT_COMM_PORT')
[ "$port" = 65535 ] || fail "--master-port 65533 gave COHORT_COMM_PORT '$port', expected 65535"
# A log directory that is a file is refused before start, as one that cannot be created.
touch "$T/logfile"
expect_usage_line "cohort run: error: invalid log directory '$T/logfile': it exists and is not a directory" --log-dir "$T/logfile" sh -c "touch $T/started"
# Port in use: hold a listening socket on a free port, then ask for it.
PORTFILE=$T/port
/usr/bin/python3 -c "
import socket, sys, time
s = socket.socket(); s.bind(('0.0.0.0', 0)); s.listen(1)
open(sys.argv[1], 'w').write(str(s.getsockname()[1])); sys.stdout.close()
time.sleep(300)" "$PORTFILE" &
holder=$!
for _ in $(seq 2000); do [ -s "$PORTFILE" ] && break; sleep 0.05; done
expect_usage "master port '$(cat "$PORTFILE")' is already in use" --master-port "$(cat "$PORTFILE")" sh -c "touch $T/started"
kill $holder 2>/dev/null
wait $holder 2>/dev/null

# The environment contract, for every rank of a 3-process job.
"$C" run -n 3 --master-port 0 --run-id test-run-1 --max-restarts 0 -- sh -c 'env > '"$T"'/env.$RANK' || fail "env job failed"
for r in 0 1 2; do
    f=$T/env.$r
    [ -f "$f" ] || { fail "rank $r wrote no environment"; continue; }
    for kv in RANK=$r LOCAL_RANK=$r WORLD_SIZE=3 LOCAL_WORLD_SIZE=3 GROUP_RANK=0 GROUP_WORLD_SIZE=1 \
              ROLE_RANK=$r ROLE_NAME=default ROLE_WORLD_SIZE=3 MASTER_ADDR=127.0.0.1 \
              TORCHELASTIC_RESTART_COUNT=0 TORCHELASTIC_MAX_RESTARTS=0 TORCHELASTIC_RUN_ID=test-run-1 \
              TORCHELASTIC_USE_AGENT_STORE=False COHORT_JOB_ID=test-run-1 COHORT_RESTART_COUNT=0 \
              COHORT_RANK=$r COHORT_WORLD_SIZE=3 COHORT_LOCAL_RANK=$r COHORT_LOCAL_WORLD_SIZE=3 \
              COHORT_NODE_RANK=0 COHORT_NNODES=1 OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1; do
        grep -qx "$kv" "$f" || fail "rank $r lacks $kv (has: $(grep "^${kv%%=*}=" "$f"))"
    done
    port=$(sed -n 's/^MASTER_PORT=//p' "$f")
    { [ -n "$port" ] && [ "$port" -gt 0 ] && [ "$port" != 29500 ]; } || fail "--master-port 0 gave MASTER_PORT '$port'"
    pid=$(sed -n 's/^COHORT_LAUNCHER_PID=//p' "$f")
    [ -n "$pid" ] && [ "$pid" -gt 1 ] || fail "COHORT_LAUNCHER_PID is '$pid'"
done
[ "$(sed -n 's/^MASTER_PORT=//p' "$T"/env.* | sort -u | wc -l)" -eq 1 ] || fail "ranks disagree on MASTER_PORT"
# --standalone: a free port too; and it cannot be combined with several nodes.
port=$("$C" run --standalone -n 1 --prefix '' sh -c 'echo $MASTER_PORT')
{ [ -n "$port" ] && [ "$port" -gt 0 ] && [ "$port" != 29500 ]; } || fail "--standalone gave MASTER_PORT '$port'"
expect_usage "invalid option '--standalone' with --nnodes 2" --standalone --nnodes 2 sh -c "touch $T/started"
# The user's thread counts win.
OMP_NUM_THREADS=7 "$C" run -n 2 sh -c 'echo "$OMP_NUM_THREADS $OPENBLAS_NUM_THREADS"' >"$T/omp" 2>&1
grep -qx '\[rank1\]: 7 1' "$T/omp" || fail "OMP_NUM_THREADS from the user was not kept: $(cat "$T/omp")"
# The one line saying what was chosen.
COHORT_LOG=info "$C" run -n 2 --cpu-bind cores true 2>"$T/note"
grep -q "cpu-bind cores: 2 rank(s)" "$T/note" || fail "no cpu-bind note: $(cat "$T/note")"

# Options end at PROGRAM: its flags (even ones cohort knows) reach it untouched.
out=$("$C" run -n 1 --prefix '' printf '%s|' --grace 9 -n 3 "a b" 2>&1)
[ "$out" = "--grace|9|-n|3|a b|" ] || fail "program arguments changed: '$out'"

# Prefix template and ranks filter.
"$C" run -n 3 --prefix '<{local_rank}/{stream}> ' --local-ranks-filter 0,2 sh -c 'echo out$RANK; echo err$RANK >&2' >"$T/o" 2>"$T/e"
[ "$(sort "$T/o" | tr '\n' ' ')" = "<0/stdout> out0 <2/stdout> out2 " ] || fail "prefix/filter stdout: $(cat "$T/o")"
[ "$(sort "$T/e" | tr '\n' ' ')" = "<0/stderr> err0 <2/stderr> err2 " ] || fail "prefix/filter stderr: $(cat "$T/e")"

# Log directory layout, without and with --tee; a last line without newline is kept.
"$C" run -n 2 --run-id logs1 --log-dir "$T/logs" sh -c 'echo o$RANK; printf e$RANK >&2' >"$T/o" 2>"$T/e"
for r in 0 1; do
    [ "$(cat "$T/logs/logs1/attempt_0/$r/stdout.log")" = "o$r" ] || fail "stdout.log of rank $r"
    [ "$(cat "$T/logs/logs1/attempt_0/$r/stderr.log")" = "e$r" ] || fail "stderr.log of rank $r"
done
[ ! -s "$T/o" ] || fail "--log-dir without --tee still printed: $(cat "$T/o")"
# The same --run-id again: the earlier run's logs stay, this run gets a fresh folder beside them
# (torchrun's naming, <run-id>_XXXXXX), named in a warning.
"$C" run -n 1 --run-id logs1 --log-dir "$T/logs" sh -c 'echo again' 2>"$T/e"
[ "$(cat "$T/logs/logs1/attempt_0/0/stdout.log")" = "o0" ] || fail "a second run of run id logs1 overwrote the first's log: $(cat "$T/logs/logs1/attempt_0/0/stdout.log")"
again=$(ls -d "$T"/logs/logs1_?????? 2>/dev/null)
[ -n "$again" ] && [ "$(cat "$again/attempt_0/0/stdout.log")" = "again" ] || fail "no fresh folder for the second run of run id logs1: $(ls "$T/logs")"
grep -qF "this run logs to '$again'" "$T/e" || fail "no warning naming the second run's log folder: $(cat "$T/e")"
"$C" run -n 2 --run-id logs2 --log-dir "$T/logs" --tee sh -c 'echo o$RANK' >"$T/o" 2>"$T/e"
grep -qx '\[rank1\]: o1' "$T/o" || fail "--tee did not print: $(cat "$T/o")"
[ "$(cat "$T/logs/logs2/attempt_0/1/stdout.log")" = "o1" ] || fail "--tee did not log"

# Whole lines only: 4 ranks each write 2000 long lines in small pieces at once.
"$C" run -n 4 /usr/bin/python3 -c '
import os, sys
r = os.environ["RANK"]
for i in range(2000):
    line = ("%s:%d:" % (r, i)) + r * 300 + "\n"
    for k in range(0, len(line), 97):
        os.write(1, line[k:k + 97].encode())
' >"$T/lines" 2>&1 || fail "line job failed"
[ "$(wc -l <"$T/lines")" -eq 8000 ] || fail "expected 8000 lines, got $(wc -l <"$T/lines")"
bad=$(/usr/bin/python3 -c '
import re, sys
ok = re.compile(r"\[rank([0-3])\]: \1:[0-9]+:\1{300}\n\Z")
bad = [l for l in open(sys.argv[1]) if not ok.match(l)]
print(len(bad), repr(bad[:2]) if bad else "")' "$T/lines")
[ "$bad" = "0 " ] || fail "lines are torn or mixed: $bad"

# A line longer than 64 KiB is cut into prefixed pieces; nothing is lost.
"$C" run -n 1 /usr/bin/python3 -c 'print("x" * 100000)' >"$T/long" 2>&1
[ "$(grep -c '^\[rank0\]: x' "$T/long")" -eq 2 ] || fail "a 100000-byte line should come out as 2 prefixed pieces"
[ "$(sed 's/^\[rank0\]: //' "$T/long" | tr -d '\n' | wc -c)" -eq 100000 ] || fail "bytes of the long line were lost"

# cpu binding: ranks get disjoint cpu sets.
ncpu=$(nproc)
"$C" run -n 2 --cpu-bind cores sh -c 'grep Cpus_allowed_list /proc/self/status | cut -f2' >"$T/aff" 2>&1
a0=$(sed -n 's/^\[rank0\]: //p' "$T/aff")
a1=$(sed -n 's/^\[rank1\]: //p' "$T/aff")
if [ "$ncpu" -ge 2 ]; then
    [ -n "$a0" ] && [ -n "$a1" ] && [ "$a0" != "$a1" ] || fail "cpu-bind cores: rank sets '$a0' and '$a1'"
    /usr/bin/python3 -c "
import sys
def cpus(s):
    out = set()
    for part in s.split(','):
        lo, _, hi = part.partition('-')
        out |= set(range(int(lo), int(hi or lo) + 1))
    return out
a, b = cpus(sys.argv[1]), cpus(sys.argv[2])
sys.exit(0 if a and b and not (a & b) else 1)" "$a0" "$a1" || fail "cpu sets overlap: '$a0' '$a1'"
fi

# numa: every rank gets all cpus of its NUMA node (here: as many nodes as /sys lists).
nnuma=$(ls -d /sys/devices/system/node/node[0-9]* 2>/dev/null | wc -l)
COHORT_LOG=info "$C" run -n 2 --cpu-bind numa sh -c 'grep Cpus_allowed_list /proc/self/status | cut -f2' >"$T/numa" 2>"$T/numa.note"
grep -q "cpu-bind numa: 2 rank(s) over $((nnuma > 0 ? nnuma : 1)) NUMA node(s)" "$T/numa.note" || fail "numa note: $(cat "$T/numa.note")"
if [ "$nnuma" -le 1 ]; then
    mine=$(grep Cpus_allowed_list /proc/self/status | cut -f2)
    [ "$(sed 's/^\[rank[01]\]: //' "$T/numa" | sort -u)" = "$mine" ] || fail "numa on one node: ranks should keep all cpus '$mine': $(cat "$T/numa")"
fi

[ $failures -eq 0 ] && echo "all launch cli checks passed"
exit $((failures > 0))
