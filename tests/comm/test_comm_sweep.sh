#!/usr/bin/env bash
# test_comm_sweep.sh: every op x type x size class (0, 1, 1009, 65537) x in-place/out-of-place
# x arena/plain buffers on 1 to 4 ranks, each element checked against the exact result; also
# with each reduction kernel (scalar, avx2) and with tiny staging halves (many rounds).
. "$(dirname "$0")/comm_lib.sh"
for n in 1 2 3 4; do
    expect_ok "sweep on $n ranks" "$n" "$rank_bin" sweep
done
for isa in scalar avx2; do
    if COHORT_COMM_ISA=$isa "$rank_bin" rounding >/dev/null 2>&1; then
        COHORT_COMM_ISA=$isa expect_ok "sweep on 3 ranks, $isa kernels" 3 "$rank_bin" sweep
    fi
done
COHORT_SHM_STAGE=4096 expect_ok "sweep on 3 ranks, 4 KiB staging" 3 "$rank_bin" sweep
finish
