#!/usr/bin/env bash
# test_comm_mpi.sh: the comm suite over the MPI transport (the plugin libcohort_mpi.so),
# started by mpirun on 1, 2, 3 and 8 ranks (--oversubscribe: more ranks than cores): the full
# correctness sweep, split, async, rounding, mismatch and a silent rank timing out.
. "$(dirname "$0")/comm_lib.sh"
command -v mpirun >/dev/null && [ -f "$build/libcohort_mpi.so" ] || {
    echo "skipped: mpirun or libcohort_mpi.so missing"
    exit 77
}
# waiting ranks yield the cpu (mpirun passes OMPI_MCA_* on): more ranks than cores, beside
# another test (ctest -j2), busy-polled a third more cpu time
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_mpi_yield_when_idle=1
launch() {
    local n=$1
    shift
    job=none # MPI creates no shared-memory segment of cohort's
    timeout 200 mpirun -x COHORT_COMM_TIMEOUT -np "$n" "$@"
}
# Open MPI does not free its own allocations at MPI_Finalize (and unloads the components that
# made them, so they cannot be suppressed by name): leak checking stays on in the shm tests.
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
export COHORT_COMM_TIMEOUT=${COHORT_COMM_TIMEOUT:-60}
for n in 1 2 3 8; do
    expect_ok "mpi sweep on $n ranks" "$n" "$rank_bin" sweep
done
for n in 2 5; do
    for mode in split async rounding mismatch; do
        expect_ok "mpi $mode on $n ranks" "$n" "$rank_bin" "$mode"
    done
done
COHORT_COMM_TIMEOUT=1 expect_ok "mpi silent rank on 3 ranks" 3 "$rank_bin" silent
finish
