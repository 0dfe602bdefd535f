#!/usr/bin/env bash
# test_comm_modes.sh: split into sub-groups, async all-reduce with test/wait, and bf16/f16
# reduced in f32 with one rounding to nearest even (NaN kept), on 1 to 8 ranks.
. "$(dirname "$0")/comm_lib.sh"
for n in 1 2 3 5 8; do
    for mode in split async rounding; do
        expect_ok "$mode on $n ranks" "$n" "$rank_bin" "$mode"
    done
done
finish
