#!/usr/bin/env bash
# test_launch_error_report.sh: cohort run's failure reporting as torchrun 1.13's: the other
# failed workers in the summary (at most 8, then how many more), and a failure's time taken from
# the worker's report. No check reads the clock to time anything: a worker waits for the clock to
# pass a second before failing, and every job whose workers were not stopped runs into its
# HANG-second guard (timeout) rather than passing.
set -u
C=${COHORT:?COHORT must name the cohort binary}
T=$(mktemp -d)
trap 'kill -9 $(jobs -p) 2>/dev/null; rm -rf "$T"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
export COHORT_LOG=warn
LONG=600 HANG=120
# A worker's report as PyTorch's @record writes it; rank 1 writes it and fails, the other
# rank (which would sleep LONG s) is stopped.
REC='{"message": {"message": "ValueError: bad batch", "extraInfo": {"py_callstack": "Traceback", "timestamp": "1"}}}'
W_REC='if [ "$RANK" = 1 ]; then printf "%s" "$0" > "$TORCHELASTIC_ERROR_FILE"; exit 3; fi; exec sleep '$LONG

# 1. Other failures: rank 1 fails first; ranks 2..10 then exit 4 of their own (they trap the
# teardown's SIGTERM) and are listed, 8 of them and "and 1 more"; rank 0, ended by the SIGTERM,
# is not a failure of its own.
rm -f "$T"/ready.*
timeout -k 5 $HANG "$C" run -n 11 --grace 30 sh -c 'case $RANK in
0) touch '"$T"'/ready.$RANK; exec sleep '$LONG' ;;
1) i=0; while [ "$(ls '"$T"'/ready.* | wc -l)" -lt 10 ] && [ $i -lt 2000 ]; do sleep 0.05; i=$((i+1)); done
   exit 3 ;;
*) trap "exit 4" TERM; touch '"$T"'/ready.$RANK; sleep '$LONG' & wait ;;
esac' 2>"$T/e6"
rc=$?
[ $rc -eq 3 ] || fail "other failures job: launcher exited $rc, expected 3: $(cat "$T/e6")"
grep -qF "other failures on host $(hostname) (9):" "$T/e6" || fail "summary does not count 9 other failures: $(cat "$T/e6")"
[ "$(grep -cE '^    rank ([2-9]|10) \(local rank ([2-9]|10), pid [0-9]+\): exit code 4 at ' "$T/e6")" -eq 8 ] ||
    fail "summary does not list 8 other failures: $(cat "$T/e6")"
grep -qxF "    and 1 more" "$T/e6" || fail "summary does not say 1 more failed: $(cat "$T/e6")"
! grep -qF "rank 0 (local rank 0" "$T/e6" || fail "rank 0, stopped by the teardown, listed as a failure: $(cat "$T/e6")"

# 2. A report's timestamp from long before the job began ("1") is not taken as the failure's time.
timeout -k 5 $HANG "$C" run -n 2 --grace 1 sh -c "$W_REC" "$REC" 2>"$T/e1"
rc=$?
[ $rc -eq 3 ] || fail "report job: launcher exited $rc, expected 3: $(cat "$T/e1")"
grep -qF "error file of rank 1 (TORCHELASTIC_ERROR_FILE):" "$T/e1" || fail "summary lacks the report: $(cat "$T/e1")"
! grep -q "time: *1970-" "$T/e1" || fail "a timestamp from before the job was taken as the failure's time: $(cat "$T/e1")"

# 3. A failure's time is the report's timestamp when the worker wrote one (torchrun's
# ProcessFailure): the worker writes its start second, waits for the clock to pass two more,
# and fails; the summary shows that second.
timeout -k 5 $HANG "$C" run -n 1 sh -c 's=$(date +%s); echo $s > '"$T"'/s7
printf "{\"message\": {\"message\": \"late\", \"extraInfo\": {\"timestamp\": \"%s\"}}}" $s > "$TORCHELASTIC_ERROR_FILE"
while [ "$(date +%s)" -lt $((s + 2)) ]; do sleep 0.1; done; exit 3' 2>"$T/e7"
rc=$?
want="time:       $(date -u -d "@$(cat "$T/s7")" '+%Y-%m-%d %H:%M:%S').000 UTC"
[ $rc -eq 3 ] && grep -qF "$want" "$T/e7" || fail "failure time: exit $rc, summary lacks '$want': $(cat "$T/e7")"

[ $failures -eq 0 ] && echo "all launch error report checks passed"
exit $((failures > 0))
