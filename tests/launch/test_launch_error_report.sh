#!/usr/bin/env bash
# test_launch_error_report.sh: cohort run's failure reporting as torchrun 1.13's: the other
# failed workers in the summary (at most 8, then how many more). Every job whose workers were not
# stopped runs into its HANG-second guard (timeout) rather than passing.
set -u
C=${COHORT:?COHORT must name the cohort binary}
T=$(mktemp -d)
trap 'kill -9 $(jobs -p) 2>/dev/null; rm -rf "$T"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
export COHORT_LOG=warn
LONG=600 HANG=120

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

[ $failures -eq 0 ] && echo "all launch error report checks passed"
exit $((failures > 0))
