#!/usr/bin/env bash
# test_launch_failures.sh: cohort run under failure: exit codes and the summary, teardown
# once a worker fails (the others, which would run for minutes, are stopped: SIGTERM, then
# SIGKILL when the grace period is over), no worker (nor its children) outliving a SIGKILLed
# launcher, signal forwarding (and signals inherited as ignored staying so), each worker's
# TORCHELASTIC_ERROR_FILE and its report in the summary, restarts, and the same across two
# launchers of a two-node job on loopback (an error report and a later failure of node 1 shown
# as such); a killed guard process is named, restarted, and changes neither the exit code nor
# the promise. No check reads the clock: every wait is for an event, with a generous bound (a
# loaded machine, an ASan build), and a launcher that failed to stop its workers would hang
# until its HANG-second guard (timeout) rather than pass.
set -u
C=${COHORT:?COHORT must name the cohort binary}
T=$(mktemp -d)
trap 'kill -9 $(jobs -p) 2>/dev/null; rm -rf "$T"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
export COHORT_LOG=warn
PY=/usr/bin/python3
# Run with SIGINT at its default even when this shell ignores it for background jobs (an
# array, not a function, so that $! is the launcher's pid).
DFL=("$PY" -c 'import os, signal, sys
for s in (signal.SIGINT, signal.SIGQUIT, signal.SIGHUP, signal.SIGTERM): signal.signal(s, signal.SIG_DFL)
os.execvp(sys.argv[1], sys.argv[1:])')

# A job whose workers were not stopped runs for LONG s; the launcher is killed after HANG s
# (exit 124/137: a failure) - far above what any loaded machine needs, far below LONG.
LONG=600 HANG=120
. "$(dirname "${BASH_SOURCE[0]}")/proc_lib.sh"
# wait_files N GLOB: until N files match (at most 100 s: a loaded machine starts ranks slowly).
wait_files() {
    for _ in $(seq 2000); do
        [ "$(ls $2 2>/dev/null | wc -l)" -ge "$1" ] && return 0
        sleep 0.05
    done
    return 1
}
. "$(dirname "${BASH_SOURCE[0]}")/port_lib.sh" # free_port

# 1. A worker exits 3: the launcher stops the other (which would sleep LONG s), exits 3 and
# names it in the summary.
timeout -k 5 $HANG "$C" run -n 2 --grace 1 sh -c 'if [ "$RANK" = 1 ]; then echo "first words" >&2; echo "the cause" >&2; exit 3; fi; exec sleep '$LONG 2>"$T/e1"
rc=$?
[ $rc -eq 3 ] || fail "exit 3 worker: launcher exited $rc (124 or 137: the other worker was not stopped)"
for needle in "job failed: rank 1 exited with code 3" "on host $(hostname), pid " "exit code:  3" "time:" "| first words" "| the cause"; do
    grep -qF -- "$needle" "$T/e1" || fail "summary lacks '$needle': $(cat "$T/e1")"
done

# 1b. A program that cannot be executed: exit 126, the rank and the reason named.
printf '\001\002not a program' >"$T/notexec"
chmod +x "$T/notexec"
"$C" run -n 2 "$T/notexec" 2>"$T/e1b"
rc=$?
[ $rc -eq 126 ] || fail "unexecutable program: launcher exited $rc, expected 126"
grep -qF "rank 0: cannot start '$T/notexec': Exec format error" "$T/e1b" || fail "no reason for the unexecutable program: $(cat "$T/e1b")"

# 1c. TORCHELASTIC_ERROR_FILE: every rank gets a file of its own (an inherited value is not
# shared by all), in the launcher's private folder, removed at exit; the failing rank's report
# there, as PyTorch's @record writes it, heads the summary (this rank writes nothing to stderr).
rm -f "$T"/ef.*
TORCHELASTIC_ERROR_FILE=$T/inherited.json timeout -k 5 $HANG "$C" run -n 2 --grace 1 sh -c 'echo "$TORCHELASTIC_ERROR_FILE" > '"$T"'/ef.tmp.$RANK; mv '"$T"'/ef.tmp.$RANK '"$T"'/ef.$RANK
if [ "$RANK" = 1 ]; then
    i=0; while [ ! -s '"$T"'/ef.0 ] && [ $i -lt 2000 ]; do sleep 0.05; i=$((i+1)); done
    printf "%s" "{\"message\": {\"message\": \"ValueError: bad batch\\nsecond line\", \"extraInfo\": {\"py_callstack\": \"Traceback\", \"timestamp\": \"1\"}}}" > "$TORCHELASTIC_ERROR_FILE"
    exit 1
fi
exec sleep '$LONG 2>"$T/e1c"
rc=$?
[ $rc -eq 1 ] || fail "error-file job: launcher exited $rc, expected 1"
f0=$(cat "$T/ef.0" 2>/dev/null) f1=$(cat "$T/ef.1" 2>/dev/null)
{ [ -n "$f0" ] && [ -n "$f1" ] && [ "$f0" != "$f1" ]; } || fail "ranks 0 and 1 share TORCHELASTIC_ERROR_FILE '$f0' '$f1'"
[ "$f0" != "$T/inherited.json" ] || fail "the inherited TORCHELASTIC_ERROR_FILE reached the workers"
for needle in "error file of rank 1 (TORCHELASTIC_ERROR_FILE):" "| ValueError: bad batch" "| second line"; do
    grep -qF -- "$needle" "$T/e1c" || fail "summary lacks the error file's '$needle': $(cat "$T/e1c")"
done
[ -n "$f1" ] && [ ! -e "$f1" ] && [ ! -e "${f1%/attempt_0/1/error.json}" ] || fail "the error files' folder of '$f1' outlived the launcher"
# With --log-dir it lies beside the rank's logs.
"$C" run -n 2 --run-id ef --log-dir "$T/elogs" sh -c 'echo "$TORCHELASTIC_ERROR_FILE" > '"$T"'/ef.log.$RANK' 2>/dev/null
for r in 0 1; do
    [ "$(cat "$T/ef.log.$r" 2>/dev/null)" = "$T/elogs/ef/attempt_0/$r/error.json" ] || fail "rank $r's error file with --log-dir: '$(cat "$T/ef.log.$r" 2>/dev/null)'"
done

# 1d. An error file that is not a regular file (here a FIFO no one writes to) is not read, as
# torchrun reads only a regular file: the launcher does not block on it, exits 3 with the
# stderr tail, and shows no report.
timeout -k 5 $HANG "$C" run -n 1 --grace 1 sh -c 'mkfifo "$TORCHELASTIC_ERROR_FILE"; echo "left a fifo" >&2; exit 3' 2>"$T/e1d"
rc=$?
[ $rc -eq 3 ] || fail "a FIFO as error file: launcher exited $rc, expected 3 (124 or 137: it blocked reading the FIFO)"
grep -qF -- "| left a fifo" "$T/e1d" || fail "a FIFO as error file: summary lacks the stderr tail: $(cat "$T/e1d")"
! grep -qF -- "error file of rank" "$T/e1d" || fail "a FIFO as error file: summary shows a report: $(cat "$T/e1d")"

# 2. A worker killed by SIGKILL once the other ignores SIGTERM (and sleeps LONG s): that one is
# killed when the grace period of 1 s is over, exit 137.
timeout -k 5 $HANG "$C" run -n 2 --grace 1 sh -c 'if [ "$RANK" = 1 ]; then i=0; while [ ! -s '"$T"'/k.0 ] && [ $i -lt 2000 ]; do sleep 0.05; i=$((i+1)); done; kill -9 $$; fi; trap "" TERM; echo $$ > '"$T"'/k.$RANK; sleep '$LONG 2>"$T/e2"
rc=$?
[ $rc -eq 137 ] || fail "SIGKILLed worker: launcher exited $rc, expected 137 (124: rank 0 was never killed)"
grep -qF "rank 1 was killed by SIGKILL" "$T/e2" || fail "summary lacks the signal: $(cat "$T/e2")"
grep -qF "grace period of 1 s over: killing the remaining workers" "$T/e2" ||
    fail "rank 0, deaf to SIGTERM, was not killed at the end of the 1 s grace period: $(cat "$T/e2")"
all_gone "$(cat "$T/k.0")" || fail "rank 0 survived the teardown"

# 3. SIGKILL of the launcher: no worker, nor a worker's child, stays alive; the guard removes
# the folder of the workers' error files.
"$C" run -n 2 sh -c 'echo "$TORCHELASTIC_ERROR_FILE" > '"$T"'/ef3; sleep 60 & echo $! > '"$T"'/gc.$RANK; echo $$ > '"$T"'/w.$RANK; wait' &
launcher=$!
wait_files 4 "$T/[gw][c.]*" || fail "workers of the launcher-kill job did not start"
kill -9 $launcher
wait $launcher 2>/dev/null
pids=$(cat "$T"/w.* "$T"/gc.*)
all_gone $pids || fail "processes outlived the SIGKILLed launcher"
ef_dir=$(sed 's|/attempt_0/[0-9]*/error.json$||' "$T/ef3")
for _ in $(seq 1200); do [ -e "$ef_dir" ] || break; sleep 0.05; done
[ -n "$ef_dir" ] && [ ! -e "$ef_dir" ] || fail "the error files' folder '$ef_dir' outlived the SIGKILLed launcher"

# 4. SIGINT, SIGTERM, SIGHUP and SIGQUIT reach every worker; the launcher exits 128 + signal.
for sig in INT TERM HUP QUIT; do
    rm -f "$T"/ready.* "$T"/got.*
    "${DFL[@]}" "$C" run -n 3 --grace 2 sh -c 'trap "echo got > '"$T"'/got.\$RANK; exit 0" '$sig'; touch '"$T"'/ready.$RANK; i=0; while [ $i -lt 2400 ]; do sleep 0.05; i=$((i+1)); done' 2>"$T/e4" &
    launcher=$!
    wait_files 3 "$T/ready.*" || fail "SIG$sig job did not start"
    kill -$sig $launcher
    wait $launcher
    rc=$?
    want=$((128 + $(kill -l $sig)))
    [ $rc -eq $want ] || fail "launcher interrupted by SIG$sig exited $rc, expected $want: $(cat "$T/e4")"
    for r in 0 1 2; do [ -f "$T/got.$r" ] || fail "rank $r never saw SIG$sig"; done
    grep -qF "interrupted by SIG$sig" "$T/e4" || fail "summary lacks the SIG$sig interruption: $(cat "$T/e4")"
done

# 4b. Signals inherited as ignored (nohup's SIGHUP, SIGINT of a background job of a script) stay
# ignored: the launcher neither acts on them nor forwards them, its workers inherit them ignored,
# and the job ends with its own exit code. Both are sent before the workers are told to end, so a
# launcher that took them would exit 129 or 130.
IGN=("$PY" -c 'import os, signal, sys
for s in (signal.SIGHUP, signal.SIGINT): signal.signal(s, signal.SIG_IGN)
os.execvp(sys.argv[1], sys.argv[1:])')
rm -f "$T"/ign.* "$T/go"
"${IGN[@]}" "$C" run -n 2 sh -c 'sed -n "s/^SigIgn:\t//p" /proc/$$/status > '"$T"'/tmp.$RANK; mv '"$T"'/tmp.$RANK '"$T"'/ign.$RANK; i=0; while [ ! -e '"$T"'/go ] && [ $i -lt 2400 ]; do sleep 0.05; i=$((i+1)); done' 2>"$T/e4b" &
launcher=$!
wait_files 2 "$T/ign.*" || fail "job with ignored signals did not start"
kill -HUP $launcher
kill -INT $launcher
touch "$T/go"
wait $launcher
rc=$?
[ $rc -eq 0 ] || fail "launcher that inherited SIGHUP and SIGINT ignored exited $rc after them, expected the job's 0: $(cat "$T/e4b")"
for r in 0 1; do
    mask=$(cat "$T/ign.$r" 2>/dev/null)
    [ -n "$mask" ] && [ $((0x$mask & 3)) -eq 3 ] || fail "rank $r does not ignore SIGHUP and SIGINT (SigIgn '$mask')"
done

# 4c. A second, different signal names both: SIGTERM first (the workers trap it and go on), then
# SIGINT kills every worker at once; the exit code is the first one's.
rm -f "$T"/ready.* "$T"/got.*
"${DFL[@]}" "$C" run -n 2 --grace 100 sh -c 'trap "touch '"$T"'/got.\$RANK" TERM; touch '"$T"'/ready.$RANK; i=0; while [ $i -lt 2400 ]; do sleep 0.05; i=$((i+1)); done' 2>"$T/e4c" &
launcher=$!
wait_files 2 "$T/ready.*" || fail "SIGTERM-then-SIGINT job did not start"
kill -TERM $launcher
wait_files 2 "$T/got.*" || fail "SIGTERM did not reach the workers"
kill -INT $launcher
wait $launcher
rc=$?
[ $rc -eq 143 ] || fail "SIGTERM then SIGINT: launcher exited $rc, expected 143"
grep -qF "warning: SIGINT after SIGTERM: killing every worker now" "$T/e4c" ||
    fail "SIGTERM then SIGINT: the warning does not name both: $(cat "$T/e4c")"

# 5. --max-restarts 2: a job failing twice succeeds on its third attempt; counts reach workers.
"$C" run -n 2 --max-restarts 2 --grace 1 --run-id flaky --log-dir "$T/logs" sh -c \
    'echo "$TORCHELASTIC_RESTART_COUNT $COHORT_RESTART_COUNT $TORCHELASTIC_MAX_RESTARTS" >> '"$T"'/att.$RANK
     [ "$RANK" = 0 ] || exit 0
     i=0  # fail only once rank 1 has written this attempt, so both ranks see every attempt
     while [ "$(cat '"$T"'/att.1 2>/dev/null | wc -l)" -le "$COHORT_RESTART_COUNT" ] && [ $i -lt 3000 ]; do sleep 0.02; i=$((i+1)); done
     [ "$COHORT_RESTART_COUNT" -ge 2 ] || exit 5' 2>"$T/e5"
rc=$?
[ $rc -eq 0 ] || fail "flaky job with 2 restarts exited $rc: $(cat "$T/e5")"
for r in 0 1; do
    [ "$(tr '\n' ' ' <"$T/att.$r")" = "0 0 2 1 1 2 2 2 2 " ] || fail "rank $r saw attempts: $(cat "$T/att.$r")"
done
[ -d "$T/logs/flaky/attempt_2/1" ] || fail "no log directory for attempt 2"
rm -f "$T"/att.*
"$C" run -n 2 --max-restarts 1 --grace 1 sh -c 'echo $COHORT_RESTART_COUNT >> '"$T"'/att.$RANK; [ "$RANK" != 0 ] || exit 5' 2>"$T/e5b"
rc=$?
[ $rc -eq 5 ] || fail "always-failing job with 1 restart exited $rc, expected 5"
[ "$(wc -l <"$T/att.0")" -eq 2 ] || fail "1 restart should mean 2 attempts, saw $(wc -l <"$T/att.0")"

# 6. Two nodes: a worker on node 1 exits 3 once every worker runs; node 0's workers (which
# would sleep LONG s) are torn down, both launchers exit 3.
P=$(free_port)
rm -f "$T"/n.*
timeout -k 5 $HANG "$C" run --nnodes 2 --node-rank 0 -n 2 --master-port "$P" --grace 1 --join-timeout 60 sh -c 'echo $$ > '"$T"'/n.$RANK; exec sleep '$LONG 2>"$T/e6a" &
n0=$!
timeout -k 5 $HANG "$C" run --nnodes 2 --node-rank 1 -n 2 --master-port "$P" --grace 1 --join-timeout 60 sh -c 'echo $$ > '"$T"'/n.$RANK; if [ "$RANK" = 3 ]; then i=0; while [ "$(ls '"$T"'/n.* | wc -l)" -lt 4 ] && [ $i -lt 2000 ]; do sleep 0.05; i=$((i+1)); done; echo "node one fails" >&2; exit 3; fi; exec sleep '$LONG 2>"$T/e6b"
rc1=$?
wait $n0
rc0=$?
[ $rc0 -eq 3 ] && [ $rc1 -eq 3 ] || fail "two-node failure: launchers exited $rc0 and $rc1, expected 3 and 3 (124 or 137: workers not stopped)"
grep -qF "rank 3 exited with code 3" "$T/e6a" || fail "node 0 summary lacks the root cause: $(cat "$T/e6a")"
grep -qF "| node one fails" "$T/e6a" || fail "node 0 summary lacks node 1's stderr: $(cat "$T/e6a")"
[ "$(ls "$T"/n.* | wc -l)" -eq 4 ] || fail "two-node failure: not every worker started: $(ls "$T")"
all_gone $(cat "$T"/n.*) || fail "workers survived the two-node failure"

# 6b. Two nodes: node 1's failed worker left a PyTorch @record report in its
# TORCHELASTIC_ERROR_FILE: node 0's summary shows it (sent over the control channel), as node
# 0 shows a local worker's, and only the first lines of its message.
P=$(free_port)
EW='if [ "$RANK" = 1 ]; then
    printf "%s" "{\"message\": {\"message\": \"RuntimeError: remote bad batch\\nl2\\nl3\\nl4\\nl5 not shown\", \"extraInfo\": {\"timestamp\": \"1\"}}}" > "$TORCHELASTIC_ERROR_FILE"
    echo "node one dies" >&2; exit 4
fi
exec sleep '$LONG
timeout -k 5 $HANG "$C" run --nnodes 2 --node-rank 0 -n 1 --master-port "$P" --grace 1 --join-timeout 60 sh -c "$EW" 2>"$T/e6c" &
n0=$!
timeout -k 5 $HANG "$C" run --nnodes 2 --node-rank 1 -n 1 --master-port "$P" --grace 1 --join-timeout 60 sh -c "$EW" 2>"$T/e6d"
rc1=$?
wait $n0
rc0=$?
[ $rc0 -eq 4 ] && [ $rc1 -eq 4 ] || fail "two-node error file: launchers exited $rc0 and $rc1, expected 4 and 4"
for needle in "rank 1 exited with code 4" "error file of rank 1 (TORCHELASTIC_ERROR_FILE):" "| RuntimeError: remote bad batch" "| l4" "| node one dies"; do
    grep -qF -- "$needle" "$T/e6c" || fail "node 0's summary lacks node 1's '$needle': $(cat "$T/e6c")"
done
! grep -qF -- "l5 not shown" "$T/e6c" || fail "node 0's summary shows more than 4 lines of the report: $(cat "$T/e6c")"

# 6c. Two nodes, both failing: node 0's rank 0 exits 5 first; node 1's rank 1 exits 3 after it,
# while node 1's launcher is stopped (SIGSTOP), so that it takes its worker's failure before it
# reads node 0's STOP. The job's root cause is node 0's: both launchers exit 5, and node 1 says
# so, naming its own worker's failure as a later one, not as the root cause. (--grace 30: node
# 0 waits that long + 5 s for the stopped node's word.)
P=$(free_port)
rm -f "$T"/n.* "$T/go0" "$T/go1"
W6='echo $$ > '"$T"'/n.$RANK; i=0; while [ ! -e '"$T"'/go$RANK ] && [ $i -lt 2000 ]; do sleep 0.05; i=$((i+1)); done; echo "rank $RANK gives up" >&2; exit $((5 - 2 * RANK))'
timeout -k 5 $HANG "$C" run --nnodes 2 --node-rank 0 -n 1 --master-port "$P" --grace 30 --join-timeout 60 sh -c "$W6" 2>"$T/e6e" &
n0=$!
timeout -k 5 $HANG "$C" run --nnodes 2 --node-rank 1 -n 1 --master-port "$P" --grace 30 --join-timeout 60 sh -c "$W6" 2>"$T/e6f" &
n1=$!
n1_launcher=$(for _ in $(seq 200); do c=$(pgrep -P $n1 -x cohort) && { echo "$c"; break; }; sleep 0.05; done)
if wait_files 2 "$T/n.*" && [ -n "$n1_launcher" ]; then
    kill -STOP "$n1_launcher"
    touch "$T/go0"
    all_gone "$(cat "$T/n.0")" || fail "node 0's rank 0 did not exit"
    touch "$T/go1"
    for _ in $(seq 2000); do grep -qE '^[0-9]+ \(.*\) Z' "/proc/$(cat "$T/n.1")/stat" 2>/dev/null && break; sleep 0.05; done
    kill -CONT "$n1_launcher"
else
    fail "two failing nodes: the job did not start"
fi
wait $n1
rc1=$?
wait $n0
rc0=$?
[ $rc0 -eq 5 ] && [ $rc1 -eq 5 ] || fail "two failing nodes: launchers exited $rc0 and $rc1, expected 5 and 5: $(cat "$T/e6e" "$T/e6f")"
grep -qF "rank 0 exited with code 5" "$T/e6e" || fail "two failing nodes: node 0 does not name rank 0: $(cat "$T/e6e")"
grep -qF "job failed on node 0: rank 0 (node 0" "$T/e6f" || fail "two failing nodes: node 1 does not name node 0's rank 0 the root cause: $(cat "$T/e6f")"
! grep -qF "root cause: rank 1" "$T/e6f" || fail "two failing nodes: node 1 calls its own later failure the root cause: $(cat "$T/e6f")"
grep -qF "| rank 1 gives up" "$T/e6f" || fail "two failing nodes: node 1 does not show its own worker's failure: $(cat "$T/e6f")"

# 7. Two nodes: SIGKILL of node 1's launcher takes down both nodes' workers.
P=$(free_port)
rm -f "$T"/n.*
"$C" run --nnodes 2 --node-rank 0 -n 1 --master-port "$P" --grace 1 --join-timeout 30 sh -c 'echo $$ > '"$T"'/n.$RANK; exec sleep '$LONG 2>"$T/e7a" &
n0=$!
"$C" run --nnodes 2 --node-rank 1 -n 1 --master-port "$P" --grace 1 --join-timeout 30 sh -c 'echo $$ > '"$T"'/n.$RANK; exec sleep '$LONG 2>"$T/e7b" &
n1=$!
wait_files 2 "$T/n.*" || fail "two-node job did not start"
kill -9 $n1
wait $n0
rc0=$?
[ $rc0 -ne 0 ] || fail "node 0 exited 0 after node 1's launcher was killed"
grep -qF "node 1's launcher" "$T/e7a" || fail "node 0 does not say node 1 was lost: $(cat "$T/e7a")"
all_gone $(cat "$T"/n.*) || fail "workers survived the loss of node 1's launcher"

# 8. Two nodes: SIGTERM to node 0's launcher stops node 1 too; both exit 143.
P=$(free_port)
rm -f "$T"/n.*
"$C" run --nnodes 2 --node-rank 0 -n 1 --master-port "$P" --grace 1 --join-timeout 30 sh -c 'echo $$ > '"$T"'/n.$RANK; exec sleep '$LONG 2>"$T/e8a" &
n0=$!
"$C" run --nnodes 2 --node-rank 1 -n 1 --master-port "$P" --grace 1 --join-timeout 30 sh -c 'echo $$ > '"$T"'/n.$RANK; exec sleep '$LONG 2>"$T/e8b" &
n1=$!
wait_files 2 "$T/n.*" || fail "two-node job did not start"
kill -TERM $n0
wait $n0
rc0=$?
wait $n1
rc1=$?
[ $rc0 -eq 143 ] && [ $rc1 -eq 143 ] || fail "SIGTERM on node 0: launchers exited $rc0 and $rc1, expected 143 and 143"
all_gone $(cat "$T"/n.*) || fail "workers survived the SIGTERM of node 0"

# 9. Two nodes of different sizes restart together: node 1's rank 2 fails on attempt 0 only.
P=$(free_port)
rm -f "$T"/r.*
W='echo "$RANK $WORLD_SIZE $GROUP_RANK $COHORT_RESTART_COUNT $COHORT_JOB_ID" >> '"$T"'/r.$RANK; if [ "$RANK" = 2 ] && [ "$COHORT_RESTART_COUNT" = 0 ]; then exit 6; fi'
"$C" run --nnodes 2 --node-rank 0 -n 1 --master-port "$P" --grace 1 --join-timeout 30 --max-restarts 1 sh -c "$W" 2>"$T/e9a" &
n0=$!
"$C" run --nnodes 2 --node-rank 1 -n 2 --master-port "$P" --grace 1 --join-timeout 30 --max-restarts 1 sh -c "$W" 2>"$T/e9b"
rc1=$?
wait $n0
rc0=$?
[ $rc0 -eq 0 ] && [ $rc1 -eq 0 ] || fail "two-node restart: launchers exited $rc0 and $rc1: $(cat "$T/e9a" "$T/e9b")"
for r in 0 1 2; do
    node=$((r > 0 ? 1 : 0))
    last=$(tail -1 "$T/r.$r" 2>/dev/null | cut -d' ' -f1-4)
    [ "$last" = "$r 3 $node 1" ] || fail "two-node restart: rank $r last saw '$last', expected '$r 3 $node 1'"
done
[ "$(cut -d' ' -f5 "$T"/r.* | sort -u | wc -l)" -eq 1 ] || fail "two-node restart: nodes saw different job ids"

# 10. Launchers that disagree on --nnodes: both refuse with exit 2, no worker starts; a stray
# connection to the control port is ignored, not taken for a launcher.
P=$(free_port)
rm -f "$T/started"
"$C" run --nnodes 2 --node-rank 0 --master-port "$P" --join-timeout 20 sh -c "touch $T/started" 2>"$T/e10a" &
n0=$!
"$PY" -c 'import socket, sys, time
for _ in range(2000):
    try:
        s = socket.create_connection(("127.0.0.1", int(sys.argv[1]) + 1)); break
    except OSError: time.sleep(0.05)
s.sendall(b"GET / HTTP/1.0\n"); s.close()' "$P"
"$C" run --nnodes 3 --node-rank 1 --master-port "$P" --join-timeout 20 sh -c "touch $T/started" 2>"$T/e10b"
rc1=$?
wait $n0
rc0=$?
[ $rc0 -eq 2 ] && [ $rc1 -eq 2 ] || fail "--nnodes mismatch: launchers exited $rc0 and $rc1, expected 2 and 2: $(cat "$T/e10a" "$T/e10b")"
grep -qF "node 0 has --nnodes 2" "$T/e10b" || fail "node 1 does not say why it was refused: $(cat "$T/e10b")"
[ ! -e "$T/started" ] || fail "a worker started despite the --nnodes mismatch"

# 11. kill -9 of the guard (the launcher's child that is not a worker) mid-job: a warning names
# it, the job ends with its own exit code (0, not 141 from a write to the dead guard's pipe); a
# second job whose guard was killed and restarted still leaves no orphan when the launcher is
# SIGKILLed.
# guard_of LAUNCHER GLOB: the launcher's one child that is not a worker (their pids in GLOB).
guard_of() {
    local k ws
    ws=" $(cat $2 | tr '\n' ' ') "
    for k in $(ps --ppid "$1" -o pid=); do
        case $ws in *" $k "*) ;; *) echo "$k"; return 0 ;; esac
    done
    return 1
}
# wait_log FILE TEXT: until FILE holds TEXT (at most 100 s).
wait_log() { for _ in $(seq 2000); do grep -qF -- "$2" "$1" && return 0; sleep 0.05; done; return 1; }
rm -f "$T"/gw.* "$T/go"
# the workers end (exit 0) once the test says so, after the guard was killed and replaced
"$C" run -n 2 sh -c 'echo $$ > '"$T"'/gw.$RANK; i=0; while [ ! -e '"$T"'/go ] && [ $i -lt 2400 ]; do sleep 0.05; i=$((i+1)); done; exit 0' 2>"$T/e11" &
launcher=$!
wait_files 2 "$T/gw.*" || fail "guard job: workers did not start"
g=$(guard_of $launcher "$T/gw.*") || fail "guard job: no guard process among the launcher's children"
[ -n "$g" ] && kill -9 "$g"
wait_log "$T/e11" "started a new guard"
touch "$T/go"
wait $launcher
rc=$?
[ $rc -eq 0 ] || fail "guard killed mid-job: the launcher exited $rc, expected the job's 0: $(cat "$T/e11")"
grep -qE "guard process \(pid $g\) was killed by SIGKILL: started a new guard" "$T/e11" ||
    fail "guard killed mid-job: no warning naming guard $g: $(cat "$T/e11")"
rm -f "$T"/gw.* "$T"/gg.*
"$C" run -n 2 sh -c 'sleep 60 & echo $! > '"$T"'/gg.$RANK; echo $$ > '"$T"'/gw.$RANK; wait' 2>"$T/e11b" &
launcher=$!
wait_files 2 "$T/gw.*" && wait_files 2 "$T/gg.*" || fail "guard job 2: workers did not start"
g=$(guard_of $launcher "$T/gw.*") && kill -9 "$g"
wait_log "$T/e11b" "started a new guard"
grep -q "started a new guard" "$T/e11b" || fail "guard job 2: no new guard: $(cat "$T/e11b")"
kill -9 $launcher
wait $launcher 2>/dev/null
pids=$(cat "$T"/gw.* "$T"/gg.*)
all_gone $pids || fail "processes outlived the launcher after its guard was restarted"

# 12. The root cause is the first worker to die, even when another died too before the launcher
# woke (a loaded machine): with the launcher stopped, rank 1 is killed, then rank 0; the summary
# names rank 1.
rm -f "$T"/z.*
"$C" run -n 2 sh -c 'echo $$ > '"$T"'/z.$RANK; exec sleep '$LONG 2>"$T/e12" &
launcher=$!
if wait_files 2 "$T/z.*"; then
    kill -STOP $launcher
    kill -9 "$(cat "$T/z.1")"
    for _ in $(seq 1200); do zombie "$(cat "$T/z.1")" && break; sleep 0.05; done
    kill -9 "$(cat "$T/z.0")"
    for _ in $(seq 1200); do zombie "$(cat "$T/z.0")" && break; sleep 0.05; done
    kill -CONT $launcher
else
    fail "first-death job: workers did not start"
fi
wait $launcher
rc=$?
[ $rc -eq 137 ] && grep -qF "job failed: rank 1 was killed by SIGKILL" "$T/e12" ||
    fail "rank 1 died first, rank 0 next: launcher exited $rc, summary: $(cat "$T/e12")"

# 13. The same when the first to die cannot be reaped yet: rank 1's main thread ends first (its
# peers see it dead) and its last thread is killed a second later, as a large process killed by
# a signal ends on a loaded machine; rank 0, finding it dead, exits 1 in between. The launcher
# reaps rank 0 first, and still names rank 1.
SLOW=${COHORT_BUILD_DIR:?}/tests/launch/launch_slow_death
rm -f "$T/sd.pid"
timeout -k 5 $HANG "$C" run -n 2 sh -c 'if [ "$RANK" = 1 ]; then exec "$1" "$2"; fi
while ! grep -qE "^[0-9]+ \(.*\) Z" "/proc/$(cat "$2" 2>/dev/null || echo 0)/stat" 2>/dev/null; do
    sleep 0.01
done
echo "rank 0: rank 1 died"; exit 1' sh "$SLOW" "$T/sd.pid" 2>"$T/e13" >/dev/null
rc=$?
[ $rc -eq 137 ] && grep -qF "job failed: rank 1 was killed by SIGKILL" "$T/e13" ||
    fail "rank 1 died first (reaped last), rank 0 exited 1: launcher exited $rc, summary: $(cat "$T/e13")"

[ $failures -eq 0 ] && echo "all launch failure checks passed"
exit $((failures > 0))
