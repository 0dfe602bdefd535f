#!/usr/bin/env bash
# test_comm_tcp.sh: the tcp transport (COHORT_COMM=tcp) on one machine: the op sweep on 2 and 4
# ranks, splits, async ops, rounding, mismatches; every op on values whose sums round gives
# the shm transport's results bit for bit (a digest of every op, on 2 and 3 ranks); a rank
# killed with -9 is named by every survivor; ranks that end one after another are all named by
# the rank that saw the first; a silent rank times out by name, an absent one is named as never
# joined; a rank with another COHORT_COMM_KEY is refused by name.
. "$(dirname "$0")/comm_lib.sh"
export COHORT_COMM=tcp
# the sweep on 2 ranks here, on 4 in reorder's sub-group below; 3 ranks: the digest below
expect_ok "tcp sweep on 2 ranks" 2 "$rank_bin" sweep
for mode in split reorder async rounding mismatch; do
    expect_ok "tcp $mode on 4 ranks" 4 "$rank_bin" "$mode"
done
for n in 2 3; do
    digest=()
    for tr in shm tcp; do
        COHORT_COMM=$tr expect_ok "digest over $tr on $n ranks" "$n" "$rank_bin" digest
        digest+=("$(grep ' digest [0-9a-f]*$' "$log" | sort | tr '\n' ' ')")
    done
    if [ "${digest[0]}" != "${digest[1]}" ] || [ -z "${digest[0]}" ]; then
        echo "FAIL tcp results differ from shm's on $n ranks: shm '${digest[0]}', tcp '${digest[1]}'"
        fails=$((fails + 1))
    else
        echo "ok   tcp results equal shm's bit for bit on $n ranks"
    fi
done
kill_test 3
# ranks 1 and 2 end 0.5 s apart: rank 0 sees rank 1 end first and must name rank 2 as well
expect_ok "tcp ranks ending one after another on 3 ranks" 3 "$rank_bin" leave
COHORT_COMM_TIMEOUT=1 expect_ok "tcp silent rank on 3 ranks" 3 "$rank_bin" silent
COHORT_COMM_TIMEOUT=2 expect_ok "tcp absent rank on 3 ranks" 3 "$rank_bin" absent
# Each rank gets its own key: every handshake must fail, naming the refusing rank, no hang.
COHORT_COMM_TIMEOUT=10 launch 2 sh -c 'COHORT_COMM_KEY=$(printf "%032d" "$RANK") exec "$0" sweep' \
    "$rank_bin" >"$log" 2>&1
rc=$?
if [ $rc -eq 0 ] || ! grep -q "listener of rank 0 failed the handshake: it holds another key" "$log"; then
    echo "FAIL ranks with different keys: exit $rc"
    tail -20 "$log"
    fails=$((fails + 1))
else
    echo "ok   ranks with different keys refuse each other"
fi
finish
