#!/usr/bin/env bash
# test_comm_sweep_many.sh: the full correctness sweep (see test_comm_sweep.sh) on 5 to 8 ranks,
# that is more ranks than this machine has cores: waiting must sleep, not spin.
. "$(dirname "$0")/comm_lib.sh"
for n in 5 6 7 8; do
    expect_ok "sweep on $n ranks" "$n" "$rank_bin" sweep
done
finish
