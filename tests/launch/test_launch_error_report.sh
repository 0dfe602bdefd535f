#!/usr/bin/env bash
# test_launch_error_report.sh: cohort run's failure reporting as torchrun 1.13's: the report it
# writes to the TORCHELASTIC_ERROR_FILE it was itself given (the root cause worker's report with
# its errorCode, replacing what was there, atomically; nothing when that worker wrote none; its
# own failure otherwise), the other failed workers in the summary (at most 8, then how many
# more), and a failure's time taken from the worker's report (which orders the root cause across
# two nodes on loopback). No check reads the clock to time anything: a worker waits for the clock
# to pass a second before failing, and every job whose workers were not stopped runs into its
# HANG-second guard (timeout) rather than passing.
set -u
C=${COHORT:?COHORT must name the cohort binary}
T=$(mktemp -d)
trap 'kill -9 $(jobs -p) 2>/dev/null; rm -rf "$T"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
export COHORT_LOG=warn
ulimit -c 0 # the worker killed by SIGSEGV leaves no core file
PY=/usr/bin/python3
LONG=600 HANG=120

. "$(dirname "${BASH_SOURCE[0]}")/port_lib.sh" # free_port
. "$(dirname "${BASH_SOURCE[0]}")/proc_lib.sh" # alive, all_gone, zombie, wait_zombies
# json_check FILE EXPR: FILE holds JSON for which the Python expression EXPR (over d) is true.
json_check() {
    "$PY" -c 'import json, sys
d = json.load(open(sys.argv[1]))
sys.exit(0 if eval(sys.argv[2]) else 1)' "$1" "$2" 2>/dev/null
}
# A worker's report as PyTorch's @record writes it; rank 1 writes it and fails, the other
# rank (which would sleep LONG s) is stopped.
REC='{"message": {"message": "ValueError: bad batch", "extraInfo": {"py_callstack": "Traceback", "timestamp": "1"}}}'
W_REC='if [ "$RANK" = 1 ]; then printf "%s" "$0" > "$TORCHELASTIC_ERROR_FILE"; exit 3; fi; exec sleep '$LONG

# 1. The root cause's report reaches cohort run's own TORCHELASTIC_ERROR_FILE with errorCode
# (PyTorch's dump_error_file), replacing an earlier file there; no temporary file is left beside
# it; the workers still get files of their own. The report's timestamp "1" is long before the
# job began: the summary does not take it as the failure's time.
mkdir -p "$T/r1"
echo stale >"$T/r1/parent.json"
TORCHELASTIC_ERROR_FILE=$T/r1/parent.json timeout -k 5 $HANG "$C" run -n 2 --grace 1 \
    sh -c "$W_REC" "$REC" 2>"$T/e1"
rc=$?
[ $rc -eq 3 ] || fail "report job: launcher exited $rc, expected 3: $(cat "$T/e1")"
json_check "$T/r1/parent.json" 'd == {"message": {"message": "ValueError: bad batch", "extraInfo": {"py_callstack": "Traceback", "timestamp": "1"}, "errorCode": 3}}' ||
    fail "cohort run's error file is not rank 1's report with errorCode 3: $(cat "$T/r1/parent.json")"
[ "$(ls -A "$T/r1")" = parent.json ] || fail "files left beside the error report: $(ls -A "$T/r1")"
grep -qF "error file of rank 1 (TORCHELASTIC_ERROR_FILE):" "$T/e1" || fail "summary lacks the report: $(cat "$T/e1")"
! grep -q "time: *1970-" "$T/e1" || fail "a timestamp from before the job was taken as the failure's time: $(cat "$T/e1")"

# 2. A worker killed by a signal after writing its report: errorCode is minus the signal number,
# torchrun's exitcode; a report whose message is a string is passed on without errorCode.
W_SEGV='if [ "$RANK" = 1 ]; then printf "%s" "$0" > "$TORCHELASTIC_ERROR_FILE"; kill -SEGV $$; fi; exec sleep '$LONG
TORCHELASTIC_ERROR_FILE=$T/r2.json timeout -k 5 $HANG "$C" run -n 2 --grace 1 sh -c "$W_SEGV" "$REC" 2>"$T/e2"
rc=$?
[ $rc -eq 139 ] || fail "SIGSEGV job: launcher exited $rc, expected 139: $(cat "$T/e2")"
json_check "$T/r2.json" 'd["message"]["errorCode"] == -11 and d["message"]["message"] == "ValueError: bad batch"' ||
    fail "SIGSEGV job: errorCode is not -11: $(cat "$T/r2.json")"
TORCHELASTIC_ERROR_FILE=$T/r2s.json timeout -k 5 $HANG "$C" run -n 2 --grace 1 \
    sh -c "$W_REC" '{"message": "RuntimeError: plain", "timestamp": "1"}' 2>"$T/e2s"
json_check "$T/r2s.json" 'd == {"message": "RuntimeError: plain", "timestamp": "1"}' ||
    fail "a report with a string message was not passed on as it was: $(cat "$T/r2s.json")"

# 3. A root cause that wrote no report: nothing is written (torchrun's @record only logs that);
# a job that succeeds writes nothing either.
TORCHELASTIC_ERROR_FILE=$T/r3.json timeout -k 5 $HANG "$C" run -n 2 --grace 1 \
    sh -c 'if [ "$RANK" = 1 ]; then echo "no report" >&2; exit 3; fi; exec sleep '$LONG 2>"$T/e3"
rc=$?
[ $rc -eq 3 ] || fail "job without a report: launcher exited $rc, expected 3: $(cat "$T/e3")"
[ ! -e "$T/r3.json" ] || fail "a worker without a report: an error report was written: $(cat "$T/r3.json")"
TORCHELASTIC_ERROR_FILE=$T/r3ok.json "$C" run -n 2 true 2>"$T/e3ok"
rc=$?
[ $rc -eq 0 ] && [ ! -e "$T/r3ok.json" ] || fail "a job that succeeded: exit $rc, report '$(cat "$T/r3ok.json" 2>/dev/null)'"

# 4. A failure of the launcher's own (here SIGTERM): its report says so, in record_exception's
# form.
rm -f "$T"/ready.*
TORCHELASTIC_ERROR_FILE=$T/r4.json "$C" run -n 2 --grace 1 \
    sh -c 'touch '"$T"'/ready.$RANK; exec sleep '$LONG 2>"$T/e4" &
launcher=$!
for _ in $(seq 2000); do [ "$(ls "$T"/ready.* 2>/dev/null | wc -l)" -ge 2 ] && break; sleep 0.05; done
kill -TERM $launcher
wait $launcher
rc=$?
[ $rc -eq 143 ] || fail "SIGTERM job: launcher exited $rc, expected 143: $(cat "$T/e4")"
json_check "$T/r4.json" '"was interrupted by SIGTERM" in d["message"]["message"] and d["message"]["extraInfo"]["timestamp"].isdigit()' ||
    fail "interrupted launcher: its report does not say so: $(cat "$T/r4.json" 2>/dev/null)"

# 5. A report that cannot be written (its folder is missing) is a warning naming it; the job's
# exit code stays the worker's.
TORCHELASTIC_ERROR_FILE=$T/missing/r5.json timeout -k 5 $HANG "$C" run -n 2 --grace 1 \
    sh -c "$W_REC" "$REC" 2>"$T/e5"
rc=$?
[ $rc -eq 3 ] || fail "unwritable report: launcher exited $rc, expected 3: $(cat "$T/e5")"
grep -qF "cannot write the job's error report to TORCHELASTIC_ERROR_FILE '$T/missing/r5.json'" "$T/e5" ||
    fail "unwritable report: no warning naming it: $(cat "$T/e5")"

# 6. Other failures: rank 1 is killed (SIGKILL) first, then ranks 2..10 exit 4 of their own
# before the launcher has taken rank 1's failure (it is stopped, SIGSTOP, until all have
# exited, so it signals them as it stops the job, unreaped): they are listed, 8 of them and
# "and 1 more". Rank 0, ended by the teardown's SIGTERM, and rank 11, which traps that SIGTERM
# and exits 4, did not fail of themselves (torchrun too lists only the workers that had failed
# when it stopped the rest).
rm -f "$T"/ready.* "$T"/pid.* "$T/go6" "$T/launcher6"
W6='echo $$ > '"$T"'/pid.$RANK.tmp; mv '"$T"'/pid.$RANK.tmp '"$T"'/pid.$RANK
echo "$COHORT_LAUNCHER_PID" > '"$T"'/launcher6.$RANK
zombie() { grep -qE "^[0-9]+ \(.*\) Z" "/proc/$1/stat" 2>/dev/null; }
case $RANK in
0) touch '"$T"'/ready.$RANK; exec sleep '$LONG' ;;
11) trap "exit 4" TERM; touch '"$T"'/ready.$RANK; sleep '$LONG' & wait ;;
*) i=0; while [ ! -e '"$T"'/go6 ] && [ $i -lt 2000 ]; do sleep 0.05; i=$((i+1)); done
   [ "$RANK" = 1 ] && kill -KILL $$
   i=0; while ! zombie "$(cat '"$T"'/pid.1)" && [ $i -lt 2000 ]; do sleep 0.05; i=$((i+1)); done
   exit 4 ;;
esac'
timeout -k 5 $HANG "$C" run -n 12 --grace 30 sh -c "$W6" 2>"$T/e6" &
job6=$!
for _ in $(seq 2000); do
    [ "$(ls "$T"/pid.* 2>/dev/null | grep -c '/pid\.[0-9]*$')" -eq 12 ] && [ -e "$T/ready.0" ] &&
        [ -e "$T/ready.11" ] && break
    sleep 0.05
done
launcher6=$(cat "$T/launcher6.0" 2>/dev/null)
if [ -n "$launcher6" ] && [ -e "$T/ready.11" ]; then
    kill -STOP "$launcher6"
    touch "$T/go6"
    wait_zombies "$T"/pid.{1,2,3,4,5,6,7,8,9,10}
    kill -CONT "$launcher6"
else
    fail "other failures job: the workers did not start"
fi
wait $job6
rc=$?
[ $rc -eq 137 ] || fail "other failures job: launcher exited $rc, expected 137: $(cat "$T/e6")"
grep -qF "job failed: rank 1 was killed by SIGKILL" "$T/e6" || fail "other failures job: rank 1 is not the root cause: $(cat "$T/e6")"
grep -qF "other failures on host $(hostname) (9):" "$T/e6" || fail "summary does not count 9 other failures: $(cat "$T/e6")"
[ "$(grep -cE '^    rank ([2-9]|10) \(local rank ([2-9]|10), pid [0-9]+\): exit code 4 at ' "$T/e6")" -eq 8 ] ||
    fail "summary does not list 8 other failures: $(cat "$T/e6")"
grep -qxF "    and 1 more" "$T/e6" || fail "summary does not say 1 more failed: $(cat "$T/e6")"
! grep -qF "rank 0 (local rank 0" "$T/e6" || fail "rank 0, stopped by the teardown, listed as a failure: $(cat "$T/e6")"
! grep -qF "rank 11 (local rank 11" "$T/e6" || fail "rank 11, which exited 4 on the teardown's SIGTERM, listed as a failure: $(cat "$T/e6")"

# 6b. A scheduler's stop (Slurm's scancel signals every process of the step): SIGTERM reaches
# the workers, which die of it, before the launcher takes its own (it is stopped until then).
# They were ended by the signal the launcher forwards, not failures of their own: the launcher
# exits 143 naming its interruption and lists no other failure.
rm -f "$T"/pid.* "$T"/launcher6.*
timeout -k 5 $HANG "$C" run -n 3 --grace 30 sh -c 'echo $$ > '"$T"'/pid.$RANK.tmp; mv '"$T"'/pid.$RANK.tmp '"$T"'/pid.$RANK
echo "$COHORT_LAUNCHER_PID" > '"$T"'/launcher6.$RANK; exec sleep '$LONG 2>"$T/e6b" &
job6=$!
for _ in $(seq 2000); do
    [ "$(ls "$T"/pid.* 2>/dev/null | grep -c '/pid\.[0-9]*$')" -eq 3 ] && [ -s "$T/launcher6.2" ] && break
    sleep 0.05
done
launcher6=$(cat "$T/launcher6.0" 2>/dev/null)
if [ -n "$launcher6" ] && [ -s "$T/pid.2" ]; then
    kill -STOP "$launcher6"
    for r in 0 1 2; do kill -TERM "$(cat "$T/pid.$r")"; done
    wait_zombies "$T"/pid.{0,1,2}
    kill -TERM "$launcher6"
    kill -CONT "$launcher6"
else
    fail "scheduler stop: the workers did not start"
fi
wait $job6
rc=$?
[ $rc -eq 143 ] && grep -qF "was interrupted by SIGTERM" "$T/e6b" ||
    fail "scheduler stop: launcher exited $rc (143 expected) or did not name SIGTERM: $(cat "$T/e6b")"
! grep -qF "other failures" "$T/e6b" || fail "scheduler stop: workers ended by SIGTERM listed as failures: $(cat "$T/e6b")"

# 7. A failure's time is the report's timestamp when the worker wrote one (torchrun's
# ProcessFailure): the worker writes its start second, waits for the clock to pass two more,
# and fails; the summary shows that second.
timeout -k 5 $HANG "$C" run -n 1 sh -c 's=$(date +%s); echo $s > '"$T"'/s7
printf "{\"message\": {\"message\": \"late\", \"extraInfo\": {\"timestamp\": \"%s\"}}}" $s > "$TORCHELASTIC_ERROR_FILE"
while [ "$(date +%s)" -lt $((s + 2)) ]; do sleep 0.1; done; exit 3' 2>"$T/e7"
rc=$?
want="time:       $(date -u -d "@$(cat "$T/s7")" '+%Y-%m-%d %H:%M:%S').000 UTC"
[ $rc -eq 3 ] && grep -qF "$want" "$T/e7" || fail "failure time: exit $rc, summary lacks '$want': $(cat "$T/e7")"

# 8. Across nodes the root cause is the failure with the earliest time, its report's timestamp
# when it wrote one: node 1's rank 1 writes a report at second S; node 0's rank 0 fails without
# one once the clock has passed S + 2 and is reaped first; rank 1 then exits 3 while node 1's
# launcher is stopped (SIGSTOP, so that it takes its worker's failure before node 0's STOP), and
# reaches node 0 last. Rank 1's failure came first: both launchers exit 3, and node 0 names it.
P=$(free_port)
rm -f "$T"/n.* "$T"/go* "$T/s8"
W8='echo $$ > '"$T"'/n.$RANK
if [ "$RANK" = 1 ]; then
    s=$(date +%s)
    printf "{\"message\": {\"message\": \"first\", \"extraInfo\": {\"timestamp\": \"%s\"}}}" $s > "$TORCHELASTIC_ERROR_FILE"
    echo $s > '"$T"'/s8
fi
i=0; while [ ! -e '"$T"'/go$RANK ] && [ $i -lt 2000 ]; do sleep 0.05; i=$((i+1)); done
if [ "$RANK" = 0 ]; then
    s=$(cat '"$T"'/s8); while [ "$(date +%s)" -lt $((s + 2)) ]; do sleep 0.1; done
fi
exit $((5 - 2 * RANK))'
timeout -k 5 $HANG "$C" run --nnodes 2 --node-rank 0 -n 1 --master-port "$P" --grace 30 --join-timeout 60 sh -c "$W8" 2>"$T/e8a" &
n0=$!
timeout -k 5 $HANG "$C" run --nnodes 2 --node-rank 1 -n 1 --master-port "$P" --grace 30 --join-timeout 60 sh -c "$W8" 2>"$T/e8b" &
n1=$!
n1_launcher=$(for _ in $(seq 200); do c=$(pgrep -P $n1 -x cohort) && { echo "$c"; break; }; sleep 0.05; done)
for _ in $(seq 2000); do [ -s "$T/s8" ] && [ -s "$T/n.0" ] && break; sleep 0.05; done
if [ -s "$T/s8" ] && [ -s "$T/n.0" ] && [ -n "$n1_launcher" ]; then
    kill -STOP "$n1_launcher"
    touch "$T/go0"
    all_gone "$(cat "$T/n.0")" || fail "node 0's rank 0 did not exit"
    touch "$T/go1"
    for _ in $(seq 2000); do grep -qE '^[0-9]+ \(.*\) Z' "/proc/$(cat "$T/n.1")/stat" 2>/dev/null && break; sleep 0.05; done
    kill -CONT "$n1_launcher"
else
    fail "two nodes: the job did not start"
fi
wait $n1
rc1=$?
wait $n0
rc0=$?
want="time:       $(date -u -d "@$(cat "$T/s8" 2>/dev/null)" '+%Y-%m-%d %H:%M:%S').000 UTC"
[ $rc0 -eq 3 ] && [ $rc1 -eq 3 ] || fail "two nodes: launchers exited $rc0 and $rc1, expected 3 and 3: $(cat "$T/e8a" "$T/e8b")"
grep -qF "job failed: rank 1 exited with code 3" "$T/e8a" && grep -qF "$want" "$T/e8a" ||
    fail "two nodes: node 0 does not name rank 1 the root cause at its report's time: $(cat "$T/e8a")"

# 9. A launcher that fails before any attempt (node 0 never answers within --join-timeout) writes
# its own error in its report, and still says it on stderr.
P=$(free_port)
TORCHELASTIC_ERROR_FILE=$T/r9.json timeout -k 5 $HANG "$C" run --nnodes 2 --node-rank 1 -n 1 \
    --master-port "$P" --join-timeout 2 true 2>"$T/e9"
rc=$?
[ $rc -ne 0 ] && grep -qF "did not answer in time" "$T/e9" ||
    fail "node 0 absent: exit $rc, stderr: $(cat "$T/e9")"
json_check "$T/r9.json" '"did not answer in time" in d["message"]["message"]' ||
    fail "node 0 absent: the launcher's report lacks its error: $(cat "$T/r9.json" 2>/dev/null)"

[ $failures -eq 0 ] && echo "all launch error report checks passed"
exit $((failures > 0))
