#!/usr/bin/env bash
# test_comm_sweep.sh: every op x type x size class (0, 1, 1009, 65537) x in-place/out-of-place
# x arena/plain buffers on 1 to 4 ranks, each element checked against the exact result; also
# with each reduction kernel (scalar, avx2), with tiny staging halves (many rounds) and without
# cross-memory attach (plain all-reduce through the staging halves, send/recv chunk by chunk),
# asked for or forced by Yama's ptrace scope.
. "$(dirname "$0")/comm_lib.sh"
for n in 1 2 3 4; do
    expect_ok "sweep on $n ranks" "$n" "$rank_bin" sweep
done
# Each kernel forced: one the cpu lacks is skipped by name (the library would quietly use the
# best it has), and every rank must say it used the kernel asked for.
for isa in scalar avx2; do
    got=$(COHORT_COMM_ISA=$isa "$rank_bin" isa 2>&1)
    rc=$?
    what="sweep on 3 ranks, $isa kernels"
    if [ $rc -ne 0 ] || ! [[ "$got" =~ ^(scalar|avx2|avx512)$ ]]; then
        echo "FAIL $what: the kernel probe exited $rc: $got"
        fails=$((fails + 1))
    elif [ "$got" != "$isa" ]; then
        skip "$what" "this cpu lacks $isa (its best kernels: $got)"
    else
        COHORT_COMM_ISA=$isa expect_ok "$what" 3 "$rank_bin" sweep
        used=$(grep -c "^rank [0-9]*: $isa kernels$" "$log")
        if [ "$used" -ne 3 ]; then
            echo "FAIL $what: $used of 3 ranks used $isa kernels"
            fails=$((fails + 1))
        fi
    fi
done
COHORT_SHM_STAGE=4096 expect_ok "sweep on 3 ranks, 4 KiB staging" 3 "$rank_bin" sweep
COHORT_SHM_NO_CMA=1 expect_ok "sweep on 2 ranks, no cross-memory attach" 2 "$rank_bin" sweep
# Yama's ptrace scope 2 forbids reading a sibling's memory: every rank must agree to go without
COHORT_SHM_PTRACE_SCOPE=2 expect_ok "sweep on 3 ranks, ptrace scope 2" 3 "$rank_bin" sweep
finish
