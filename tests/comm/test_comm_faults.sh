#!/usr/bin/env bash
# test_comm_faults.sh: a rank killed with -9 mid-all-reduce makes every other rank fail with
# PEER_LOST naming it (they check their peers every 100 ms: within 1 s on an idle machine; the
# test accepts 30 s, far below the 120 s after which they would time out instead, because a
# loaded 2-core machine running 8 ranks may not schedule a survivor for seconds); a rank calling with another count or type makes all fail
# with MISMATCH describing both calls; a rank that never calls makes the others time out
# naming it, and one that never joins makes the others' create time out naming it. Nothing may
# remain in /dev/shm after any of them.
. "$(dirname "$0")/comm_lib.sh"

kill_test() {
    local n=$1 pidfile="$comm_tmp/kill.pid" log="$comm_tmp/kill.log"
    rm -f "$pidfile"
    new_job
    launch "$n" "$rank_bin" kill "$pidfile" >"$log" 2>&1 &
    job_fresh=0
    local spawner=$!
    if ! wait_pid_file "$pidfile" "$spawner"; then
        # ranks ignore SIGTERM in this mode: kill them (the launcher then ends); survivors would
        # give up after 120 s by themselves
        for _ in $(seq 25); do
            pkill -9 -f "$rank_bin kill $pidfile" || break
            sleep 0.2
        done
        wait "$spawner"
        echo "FAIL kill -9 on $n ranks: the last rank never wrote its pid"
        cat "$log"
        fails=$((fails + 1))
        return
    fi
    sleep 0.3
    local t0
    t0=$(date +%s.%N)
    kill -9 "$(cat "$pidfile")"
    wait "$spawner"
    local lost
    lost=$(grep -c "peer lost at" "$log")
    if [ "$lost" -ne $((n - 1)) ]; then
        echo "FAIL kill -9 on $n ranks: $lost of $((n - 1)) survivors reported the lost peer"
        cat "$log"
        fails=$((fails + 1))
    elif ! grep -c "kill passed" "$log" | grep -qx $((n - 1)); then
        echo "FAIL kill -9 on $n ranks: a survivor failed its checks"
        cat "$log"
        fails=$((fails + 1))
    else
        local worst
        worst=$(sed -n 's/.*peer lost at \([0-9.]*\).*/\1/p' "$log" |
                awk -v t0="$t0" 'BEGIN{m=0} {d=$1-t0; if (d>m) m=d} END{printf "%.3f", m}')
        if awk -v w="$worst" 'BEGIN{exit !(w < 30.0)}'; then
            echo "ok   kill -9 on $n ranks: every survivor reported it within ${worst} s"
        else
            echo "FAIL kill -9 on $n ranks: the slowest survivor took ${worst} s"
            fails=$((fails + 1))
        fi
    fi
    check_no_shm "kill -9 on $n ranks"
    rm -f "$pidfile"
}

kill_test 2
kill_test 4
kill_test 8
for n in 2 5; do
    expect_ok "mismatch on $n ranks" "$n" "$rank_bin" mismatch
done
# a 1 s timeout bounds the create too: the ranks start it together (comm_rank's DIR)
mkdir "$comm_tmp/silent" "$comm_tmp/absent"
COHORT_COMM_TIMEOUT=1 expect_ok "silent rank on 3 ranks" 3 "$rank_bin" silent "$comm_tmp/silent"
COHORT_COMM_TIMEOUT=1 expect_ok "absent rank on 3 ranks" 3 "$rank_bin" absent "$comm_tmp/absent"
finish
