#!/usr/bin/env bash
# test_train_threads_cli.sh: `cohort train`'s default thread count, printed at start with where
# it came from: every cpu of the affinity mask, 1 under `taskset -c 0`, shared among the ranks
# mpirun or MPICH's Hydra start on the same cpus and each rank's own cpus when mpirun binds
# them; OMP_NUM_THREADS and --threads win; OpenMP's spin bounded when the local ranks' threads
# outnumber the cpus they share.
set -u
cohort=${COHORT:?}
src=${COHORT_SOURCE_DIR:?}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fails=0 skips=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
skip() { echo "SKIP $1: $2"; skips=$((skips + 1)); }
unset OMP_NUM_THREADS COHORT_COMM
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" # Open MPI's own leaks

cat "$src"/README.md > "$work/corpus.txt"
"$cohort" prepare --tokenizer byte --documents paragraph --out "$work/c" "$work/corpus.txt" \
    >/dev/null || fail "prepare"
model=(--vocab 256 --layers 1 --heads 2 --dim 16 --seq 16 --batch 2 --steps 2
       --data "$work/c_train_*.bin")

# expect WHAT PATTERN CMD...: the run succeeds and its start-up line matches PATTERN.
expect() {
    local what=$1 pattern=$2
    shift 2
    if "$@" >"$work/out" 2>&1 && grep -Eq "$pattern" "$work/out"; then
        echo "ok   $what: $(grep -Eo '[0-9]+ threads \([^)]*\)?[^,]*' "$work/out" | head -1)"
    else
        fail "$what: expected /$pattern/: $(grep -E 'threads|error' "$work/out" | head -3)"
    fi
}

n=$(nproc)
expect "plain" "blas kernel .*, $n threads \\($n cpus? in the affinity mask\\)" \
    "$cohort" train "${model[@]}"
if command -v taskset >/dev/null; then
    expect "taskset -c 0" "1 threads \\(1 cpu in the affinity mask\\)" \
        taskset -c 0 "$cohort" train "${model[@]}"
else
    skip "taskset" "no taskset"
fi
expect "OMP_NUM_THREADS wins" "3 threads \\(OMP_NUM_THREADS\\)" \
    env OMP_NUM_THREADS=3 "$cohort" train "${model[@]}"
expect "--threads wins" "1 threads \\(--threads\\)" "$cohort" train "${model[@]}" --threads 1

# local ranks that share the cpus with more threads than cpus (each given them all): OpenMP's
# barrier spin bounded, since each rank's barriers wait for threads the others keep off a cpu;
# at their share (the default) it is not bounded for that reason (docs/train.md)
if [ "$n" -ge 1 ]; then
    expect "cohort run: 2 local ranks x $n threads" \
        "OpenMP barriers spin 1000 turns \\(2 local ranks x $n threads on $n cpus" \
        env -u GOMP_SPINCOUNT "$cohort" run --nproc-per-node 2 "$cohort" train "${model[@]}" \
        --strategy ddp --threads "$n"
    if "$cohort" run --nproc-per-node 2 env -u GOMP_SPINCOUNT "$cohort" train "${model[@]}" \
        --strategy ddp >"$work/out" 2>&1 && ! grep -q "local ranks x" "$work/out"; then
        echo "ok   cohort run: 2 local ranks at their share: not counted as contended"
    else
        fail "2 local ranks at their share: $(grep -E 'OpenMP|error' "$work/out" | head -2)"
    fi
fi

if ! command -v mpirun >/dev/null || [ ! -f "${COHORT_BUILD_DIR:-.}/libcohort_mpi.so" ]; then
    skip "mpirun" "mpirun or libcohort_mpi.so missing"
elif [ "$n" -lt 2 ]; then
    skip "mpirun" "fewer than 2 cpus"
else
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    mpi=(timeout 120 mpirun -x ASAN_OPTIONS --host localhost:2 -np 2)
    # unbound: both ranks on all n cpus, n/2 threads each
    expect "mpirun -np 2 --bind-to none" \
        "$((n / 2)) threads \\($n cpus in the affinity mask, shared by 2 local ranks \\(openmpi\\)\\)" \
        "${mpi[@]}" --bind-to none "$cohort" train "${model[@]}" --strategy ddp
    # bound to a core each: the rank's own core (its hardware threads), not divided again
    expect "mpirun -np 2 --bind-to core" \
        "([0-9]+) threads \\(\\1 cpus? in the affinity mask; 2 local ranks \\(openmpi\\), each bound" \
        "${mpi[@]}" --bind-to core "$cohort" train "${model[@]}" --strategy ddp
fi
# MPICH's Hydra: no binding by default, so the 2 ranks share the cpus (MPI_LOCALNRANKS)
if ! command -v mpiexec.hydra >/dev/null || [ ! -f "${COHORT_BUILD_DIR:-.}/libcohort_mpich.so" ]; then
    skip "mpiexec.hydra" "MPICH's mpiexec.hydra or libcohort_mpich.so missing"
elif [ "$n" -ge 2 ]; then
    expect "mpiexec.hydra -n 2" \
        "$((n / 2)) threads \\($n cpus in the affinity mask, shared by 2 local ranks \\(pmi\\)\\)" \
        timeout 120 mpiexec.hydra -n 2 "$cohort" train "${model[@]}" --strategy ddp
fi
echo "$fails failed, $skips skipped"
[ "$fails" -eq 0 ] || exit 1
[ "$skips" -eq 0 ] || exit 77
