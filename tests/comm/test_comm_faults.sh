#!/usr/bin/env bash
# test_comm_faults.sh: a rank killed with -9 mid-all-reduce makes every other rank fail with
# PEER_LOST naming it (they check their peers every 100 ms: within 1 s on an idle machine; the
# test accepts 30 s, far below the 120 s after which they would time out instead, because a
# loaded 2-core machine running 8 ranks may not schedule a survivor for seconds); a rank calling with another count or type makes all fail
# with MISMATCH describing both calls; a rank that never calls makes the others time out
# naming it, and one that never joins makes the others' create time out naming it. Nothing may
# remain in /dev/shm after any of them.
. "$(dirname "$0")/comm_lib.sh"

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
