#!/usr/bin/env bash
# test_launch_token.sh: `cohort token FILE` makes a job secret for cohort run --job-token: a new
# file of mode 0600 whatever the umask, 64 hex digits (32 random bytes) and a newline, a new
# secret each time, never replacing an existing file or following a link; `cohort token -`
# prints one. Two launchers given the file join and run the job; a launcher given another
# token is refused on both sides (exit 2).
set -u
C=${COHORT:?COHORT must name the cohort binary}
T=$(mktemp -d)
trap 'kill -9 $(jobs -p) 2>/dev/null; rm -rf "$T"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
unset COHORT_JOB_TOKEN
hex64() { grep -qxE '[0-9a-f]{64}' "$1" && [ "$(wc -c <"$1")" -eq 65 ]; }

# 1. the file: owner-only even under umask 000, the format, fresh each time
out=$( (umask 000; "$C" token "$T/a.tok") 2>&1)
rc=$?
[ $rc -eq 0 ] || fail "cohort token: exit $rc: $out"
[ "$(stat -c %a "$T/a.tok")" = 600 ] || fail "mode $(stat -c %a "$T/a.tok"), expected 600"
hex64 "$T/a.tok" || fail "not 64 hex digits and a newline: '$(cat "$T/a.tok")'"
grep -qF "scp -p $T/a.tok HOST:$T/a.tok" <<<"$out" && grep -qF -- "--job-token $T/a.tok" <<<"$out" ||
    fail "it does not say how to copy the file: $out"
"$C" token "$T/b.tok" 2>/dev/null
"$C" token - >"$T/c.tok"
hex64 "$T/c.tok" || fail "cohort token - printed '$(cat "$T/c.tok")'"
[ "$(sort -u "$T/a.tok" "$T/b.tok" "$T/c.tok" | wc -l)" -eq 3 ] || fail "the same secret twice"
# 32 random bytes: all 16 hex digits appear in six secrets together (a constant or a
# short-period fill would not; random ones miss a digit once in 16 x (15/16)^384, 4e9 runs:
# three secrets missed one once in 15000)
for k in d e f; do "$C" token - >"$T/$k.tok"; done
[ "$(cat "$T"/[a-f].tok | tr -d '\n' | fold -w1 | sort -u | wc -l)" -eq 16 ] || fail "few distinct digits: $(cat "$T"/[a-f].tok)"
[ $fails -eq 0 ] && echo "ok   cohort token: mode 600 under umask 000, 64 hex digits, three different secrets"

# 2. never replaced, never through a link; bad use
f0=$fails
cp "$T/a.tok" "$T/a.before"
out=$("$C" token "$T/a.tok" 2>&1)
rc=$?
[ $rc -eq 2 ] && grep -qF "job token file '$T/a.tok' exists already" <<<"$out" || fail "existing file: exit $rc: $out"
cmp -s "$T/a.tok" "$T/a.before" || fail "the existing secret changed"
ln -s "$T/target" "$T/link.tok"
out=$("$C" token "$T/link.tok" 2>&1)
rc=$?
[ $rc -eq 2 ] && [ ! -e "$T/target" ] || fail "a symbolic link: exit $rc, target made: $out"
out=$("$C" token "$T/no/such/dir.tok" 2>&1)
rc=$?
[ $rc -eq 1 ] && grep -qF "cannot create job token file '$T/no/such/dir.tok'" <<<"$out" || fail "missing directory: exit $rc: $out"
out=$("$C" run --nnodes 2 --master-port 29912 --job-token "$T/none.tok" true 2>&1)
rc=$?
[ $rc -eq 2 ] && grep -qF "cannot read job token file '$T/none.tok': no such file (make one with 'cohort token FILE'" <<<"$out" ||
    fail "a missing token file: exit $rc: $out"
out=$("$C" token 2>&1)
rc=$?
[ $rc -eq 2 ] && grep -q "missing FILE" <<<"$out" || fail "no FILE: exit $rc: $out"
[ $fails -eq $f0 ] && echo "ok   an existing file or link is never replaced (exit 2), a missing directory exits 1; cohort run names a missing token file and how to make one"

# 3. two launchers with the file join; one with another token is refused
f0=$fails
P=$("${COHORT_PYTHON:-/usr/bin/python3}" -c 'import random; print(random.randrange(20000, 28000))')
run() { # RANK TOKEN [COMMAND]
    local k=$1 tok=$2
    shift 2
    "$C" run --nnodes 2 --node-rank "$k" --master-port "$P" --join-timeout "${JT:-30}" --job-token "$tok" \
        --prefix '' "${@:-true}"
}
run 0 "$T/a.tok" sh -c 'echo "$WORLD_SIZE $RANK"' >"$T/j0.out" 2>"$T/j0.err" &
j0=$!
run 1 "$T/a.tok" sh -c 'echo "$WORLD_SIZE $RANK"' >"$T/j1.out" 2>"$T/j1.err"
rc1=$?
wait $j0
rc0=$?
[ $rc0 -eq 0 ] && [ $rc1 -eq 0 ] && [ "$(cat "$T/j0.out" "$T/j1.out")" = "$(printf '2 0\n2 1')" ] ||
    fail "two nodes with the token: exit $rc0 and $rc1, output '$(cat "$T"/j?.out)': $(cat "$T"/j?.err)"
grep -q "no job secret" "$T/j0.err" "$T/j1.err" && fail "a launcher with the token warned of no secret"
# node 0 waits out its join timeout (3 s) for a launcher with its token; node 1 starts first
# and retries until node 0 listens, so that a slow start on a loaded machine falls within it
P=$((P + 2))
JT=60 run 1 "$T/b.tok" 2>"$T/w1.err" &
j1=$!
JT=3 run 0 "$T/a.tok" 2>"$T/w0.err"
rc0=$?
wait $j1
rc1=$?
[ $rc0 -eq 2 ] && [ $rc1 -eq 2 ] && grep -q "the job secrets differ" "$T/w1.err" &&
    grep -q "refused because their job secret differs" "$T/w0.err" ||
    fail "another token: exit $rc0 and $rc1: $(cat "$T"/w?.err)"
[ $fails -eq $f0 ] && echo "ok   two launchers with the file join (world 2); one with another token is refused, exit 2 on both"
exit $((fails > 0))
