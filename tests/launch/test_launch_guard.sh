#!/usr/bin/env bash
# test_launch_guard.sh: the guard, which SIGKILLs the workers' process groups when the launcher is
# SIGKILLed, kills only the groups of workers still running: the group id of a worker the launcher
# reaped may be given to an unrelated process, which must survive. The reuse is made certain, not
# waited for: in a pid namespace of its own (a user namespace gives the right to set the next pid,
# ns_last_pid), the test starts an unrelated session whose pid, and so process group id, is the
# reaped worker's. Skipped where user and pid namespaces cannot be made (a container that forbids
# them). Every wait is for an event, with a generous bound.
set -u
C=${COHORT:?COHORT must name the cohort binary}
T=$(mktemp -d)
trap 'kill -9 $(jobs -p) 2>/dev/null; rm -rf "$T"' EXIT
export COHORT_LOG=warn
if ! unshare --user --map-root-user --pid --fork --mount-proc sh -c 'echo 1 > /proc/sys/kernel/ns_last_pid' 2>/dev/null; then
    echo "SKIP guard and a reused group id: cannot make a user and pid namespace here"
    exit 77
fi
# In the namespace (this script is its pid 1): prints "ok" or what went wrong; exits 0 either way
# but for a failure of the test itself.
cat >"$T/inner.sh" <<'INNER'
set -u
C=$1 T=$2
. "$3/proc_lib.sh" # alive, all_gone
wait_file() { for _ in $(seq 2000); do [ -s "$1" ] && return 0; sleep 0.05; done; return 1; }
# rank 1 ends at once (the launcher reaps it); rank 0 runs on without forking, so that no process
# of the namespace takes a pid while the test sets the next one
"$C" run -n 2 sh -c 'echo $$ > '"$T"'/w.tmp.$RANK; mv '"$T"'/w.tmp.$RANK '"$T"'/w.$RANK; [ "$RANK" = 1 ] || exec sleep 600' &
launcher=$!
wait_file "$T/w.0" && wait_file "$T/w.1" || { echo "the workers did not start"; exit 0; }
w0=$(cat "$T/w.0") w1=$(cat "$T/w.1")
for _ in $(seq 2000); do [ -e "/proc/$w1" ] || break; sleep 0.05; done # reaped, not a zombie
[ -e "/proc/$w1" ] && { echo "rank 1 was not reaped"; exit 0; }
guard=$(ps --ppid $launcher -o pid= | tr -d ' ' | grep -vx "$w0")
# the next pid is rank 1's: a session of its own (setsid: its group id is its pid, rank 1's group)
echo $((w1 - 1)) > /proc/sys/kernel/ns_last_pid
setsid sleep 600 &
other=$!
[ "$other" = "$w1" ] || { echo "SKIP: the unrelated process got pid $other, not $w1"; exit 0; }
# until setsid has made the group (after its exec): a group that does not exist yet is not killed
for _ in $(seq 2000); do [ "$(cut -d' ' -f5 "/proc/$other/stat" 2>/dev/null)" = "$other" ] && break; sleep 0.05; done
[ "$(cut -d' ' -f5 "/proc/$other/stat" 2>/dev/null)" = "$other" ] || { echo "the unrelated process made no group of its own"; exit 0; }
kill -9 $launcher
all_gone $w0 $guard >/dev/null || { echo "the guard did not end rank 0 and exit"; exit 0; }
if alive $other; then echo ok; else echo "the guard killed the unrelated process group $other (rank 1's old group)"; fi
kill -9 $other 2>/dev/null
INNER
out=$(unshare --user --map-root-user --pid --fork --mount-proc bash "$T/inner.sh" "$C" "$T" "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)" 2>"$T/err")
case $out in
ok) echo "ok   the guard spared an unrelated process given a reaped worker's group id"; exit 0 ;;
SKIP*) echo "$out"; exit 77 ;;
*) echo "FAIL: ${out:-no result}: $(cat "$T/err")"; exit 1 ;;
esac
