# plan_cli_lib.sh: what the `cohort plan` script tests share, sourced (not a test itself):
# strict variables, the calibration corpus and `expect`, a run checked for its exit code and a
# line of its output.
set -u
: "${COHORT:?}" "${COHORT_SOURCE_DIR:?}" "${COHORT_PYTHON:=/usr/bin/python3}"
fail=0
unset COHORT_INVENTORY # plan's machine when none is named: the tests name theirs
cal=$COHORT_SOURCE_DIR/tests/fuzz/corpus/calibration

# expect CODE NEEDLE ARGS...: `cohort plan ARGS` exits CODE and its output (stdout and stderr,
# runs of spaces as one) holds NEEDLE; a miss sets fail=1.
expect() {
    local code=$1 needle=$2
    shift 2
    local out rc
    out=$("$COHORT" plan "$@" 2>&1)
    rc=$?
    if [ "$rc" -ne "$code" ] || ! tr -s ' ' <<<"$out" | grep -qF -- "$needle"; then
        echo "FAIL: cohort plan $* -> exit $rc (want $code), output lacks '$needle':"
        echo "$out" | sed 's/^/    /'
        fail=1
    else
        echo "ok   $* -> $code: $needle"
    fi
}
