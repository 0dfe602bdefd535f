#!/usr/bin/env bash
# test_pipeline_mpi.sh: a pipeline whose stages talk over MPI (started by mpirun, the transport
# forced to MPI, as between nodes): pp 2 with 1F1B and 2 replicas of 2 stages train what one
# device trains, within par_compare.py's bounds (with its --noise control), and the tied
# embedding's copies stay identical.
. "$(dirname "${BASH_SOURCE[0]}")/par_lib.sh"
command -v mpirun >/dev/null && [ -f "${COHORT_BUILD_DIR:-.}/libcohort_mpi.so" ] || {
    echo "skipped: mpirun or libcohort_mpi.so missing"
    exit 77
}
"$py" -c "import numpy" 2>/dev/null || { echo "numpy missing"; exit 77; }
# waiting ranks yield the cpu (mpirun passes OMPI_MCA_* on): more ranks than cores, beside
# another test (ctest -j2), busy-polled a third more cpu time
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_mpi_yield_when_idle=1
# Open MPI does not free its own allocations at MPI_Finalize
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
par_prepare --val-fraction 0.1 "$src/tests/parallel/equiv_corpus.txt"
V=256 C=32 L=4 T=32
par_model $V $L 2 $C $T
model+=(--lr 1e-3 --warmup 3 --deterministic --steps 20 --micro-batch 2 --grad-accum 4)
"$cohort" train "${model[@]}" --metrics "$work/single.jsonl" --dump-params "$work/single.bin" \
    >/dev/null 2>&1 || fail "single"
par_noise --micro-batch 1 --grad-accum 8
for r in "2:--pp 2" "4:--pp 2 --strategy ddp --micro-batch 1"; do
    n=${r%%:*} opts=${r#*:} name=mpi$n
    # shellcheck disable=SC2086
    timeout 200 mpirun -np "$n" -x COHORT_COMM=mpi -x COHORT_COMM_TIMEOUT=60 \
        "$cohort" train "${model[@]}" $opts --metrics "$work/$name.jsonl" \
        --dump-params "$work/$name.bin" >"$work/$name.out" 2>&1 || { fail "$name: $(tail -3 "$work/$name.out")"; continue; }
    grep -q "the first and last stage's copies are bit-identical" "$work/$name.out" ||
        fail "$name: tied copies not checked"
    "$py" "$src/tests/parallel/par_compare.py" $(par_noise_args) "$work/single.jsonl" "$work/single.bin" \
        "$work/$name.jsonl" "$work/$name.bin" $V $C $L $T >"$work/$name.cmp" || fail "$name: $(cat "$work/$name.cmp")"
    echo "$opts over MPI on $n ranks: $(cat "$work/$name.cmp")"
done
par_done "pipelines over MPI train the same model"
