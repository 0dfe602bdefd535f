#!/usr/bin/env bash
# test_launch_hydra.sh: MPICH's Hydra (mpiexec.hydra, PMI variables) starts cohort training:
# ddp and zero3 on 2 ranks equal one device (par_compare.py's bound), over shared memory
# (COHORT_COMM=shm) and, where cohort's MPICH plug-in is built, over MPI by default (a PMI
# launcher picks libcohort_mpich.so); the Open MPI plug-in under Hydra is refused naming the
# launcher and the plug-in to use instead of letting every rank train alone; a Hydra job on
# shared memory without a job id names what to set. Skipped by name when mpiexec.hydra is missing.
. "$(dirname "${BASH_SOURCE[0]}")/../parallel/par_lib.sh"
hydra=$(command -v mpiexec.hydra) || { echo "SKIP hydra: mpiexec.hydra missing (scripts/setup.sh installs mpich)"; exit 77; }
"$py" -c "import numpy" 2>/dev/null || { echo "SKIP hydra: numpy missing"; exit 77; }
export COHORT_COMM_TIMEOUT=60
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
par_prepare --val-fraction 0.1 "$src/tests/parallel/equiv_corpus.txt"
V=256 C=32 L=2 T=32
par_model $V $L 2 $C $T
model+=(--lr 1e-3 --warmup 3 --deterministic --shuffle on --steps 30 --bucket-mb 0.03)
"$cohort" train "${model[@]}" --batch 8 --metrics "$work/single.jsonl" \
    --dump-params "$work/single.bin" >/dev/null 2>"$work/single.err" || fail "single: $(cat "$work/single.err")"

for s in ddp zero3; do
    COHORT_LOG=debug timeout 120 "$hydra" -n 2 -genv COHORT_COMM shm -genv COHORT_JOB_ID "hydra-$$-$s" \
        "$cohort" train "${model[@]}" --strategy $s --batch 4 --metrics "$work/$s.jsonl" \
        --dump-params "$work/$s.bin" >"$work/$s.out" 2>&1 || { fail "hydra $s: $(tail -3 "$work/$s.out")"; continue; }
    grep -q "(launcher pmi) on transport shm" "$work/$s.out" ||
        fail "hydra $s: not read as PMI: $(grep 'comm: rank' "$work/$s.out" | head -2)"
    if "$py" "$src/tests/parallel/par_compare.py" "$work/single.jsonl" "$work/single.bin" \
        "$work/$s.jsonl" "$work/$s.bin" $V $C $L $T >"$work/$s.cmp" 2>&1; then
        echo "ok   mpiexec.hydra -n 2, $s: $(head -1 "$work/$s.cmp")"
    else
        fail "hydra $s: $(cat "$work/$s.cmp")"
    fi
done

# The default (COHORT_COMM=auto) picks MPI for a PMI launcher, on MPICH's plug-in.
if [ -f "${COHORT_BUILD_DIR:-.}/libcohort_mpich.so" ]; then
    for s in ddp zero3; do
        COHORT_LOG=debug timeout 120 "$hydra" -n 2 "$cohort" train "${model[@]}" --strategy $s \
            --batch 4 --metrics "$work/mpi$s.jsonl" --dump-params "$work/mpi$s.bin" \
            >"$work/mpi$s.out" 2>&1 || { fail "hydra $s over MPI: $(tail -3 "$work/mpi$s.out")"; continue; }
        grep -q "(launcher pmi) on transport mpi" "$work/mpi$s.out" ||
            fail "hydra $s: not over MPI: $(grep 'comm: rank' "$work/mpi$s.out" | head -2)"
        if "$py" "$src/tests/parallel/par_compare.py" "$work/single.jsonl" "$work/single.bin" \
            "$work/mpi$s.jsonl" "$work/mpi$s.bin" $V $C $L $T >"$work/mpi$s.cmp" 2>&1; then
            echo "ok   mpiexec.hydra -n 2, $s over MPICH: $(head -1 "$work/mpi$s.cmp")"
        else
            fail "hydra $s over MPICH: $(cat "$work/mpi$s.cmp")"
        fi
    done
else
    echo "SKIP hydra over MPI: libcohort_mpich.so not built (MPICH's pkg-config file missing)"
fi
# An Open MPI plug-in under Hydra initialises alone, which is refused naming the launcher, and
# no rank trains alone. (Not necessarily on both ranks: Hydra ends the job when the first rank
# exits, and two Open MPI singletons starting at once may fail in MPI_Init instead.)
if [ -f "${COHORT_BUILD_DIR:-.}/libcohort_mpi.so" ]; then
    out=$(COHORT_MPI_PLUGIN="${COHORT_BUILD_DIR:-.}/libcohort_mpi.so" timeout 60 "$hydra" -n 2 \
        "$cohort" train "${model[@]}" --strategy ddp --batch 4 2>&1)
    rc=$?
    [ $rc -ne 0 ] && grep -q "mpi sees 1 rank(s) but the launcher (pmi) started 2.*MPICH's mpiexec and srun --mpi=pmi2 need libcohort_mpich.so" <<<"$out" &&
        ! grep -qE "^step [0-9]+/|done: " <<<"$out" &&
        echo "ok   Hydra with cohort's Open MPI plug-in: refused naming pmi and the plug-in to use; no rank trained" ||
        fail "hydra with the Open MPI plug-in: rc $rc: $out"
fi
out=$(COHORT_COMM=shm timeout 60 "$hydra" -n 2 "$cohort" train "${model[@]}" --strategy ddp --batch 4 2>&1)
grep -q "the launcher (pmi) gives no job id (PMI_JOBID is not set).*COHORT_JOB_ID" <<<"$out" &&
    echo "ok   Hydra without COHORT_JOB_ID on shared memory: says to set it" ||
    fail "hydra without a job id: $out"
par_done "MPICH's Hydra starts cohort training"
