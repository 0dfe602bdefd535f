#!/usr/bin/env bash
# test_comm_launchers.sh: a shared-memory communicator made from each launcher's variables
# alone (as srun, Hydra's mpiexec and torchrun set them; the ranks are started here by hand):
# 2 ranks run the sweep and report the shm transport, leaving nothing in /dev/shm; a launcher
# without a job id gets the message saying to set COHORT_JOB_ID, and a PMI launcher whose MPI
# is not the one cohort's plugin was built with is refused.
. "$(dirname "$0")/comm_lib.sh"
for v in $(env | sed -n 's/^\(\(COHORT_[A-Z_]*\|OMPI_[A-Z_]*\|PMI_[A-Z_]*\|SLURM_[A-Z_]*\|TORCHELASTIC_[A-Z_]*\|RANK\|WORLD_SIZE\|LOCAL_RANK\|LOCAL_WORLD_SIZE\|GROUP_RANK\|GROUP_WORLD_SIZE\)\)=.*/\1/p'); do
    case $v in COHORT_BUILD_DIR | COHORT_SOURCE_DIR | COHORT_DATA_DIR | COHORT_PYTHON | COHORT) ;; *) unset "$v" ;; esac
done
export COHORT_COMM_TIMEOUT=60

# by_hand WHAT JOBNAME VARS-OF-RANK-0 -- VARS-OF-RANK-1: both ranks run the sweep.
by_hand() {
    local what=$1 log="$comm_tmp/launchers.log"
    job=$2
    shift 2
    local r0=() r1=()
    while [ "$1" != -- ]; do r0+=("$1"); shift; done
    shift
    r1=("$@")
    env "${r0[@]}" "$rank_bin" sweep >"$log.0" 2>&1 &
    local p0=$!
    env "${r1[@]}" "$rank_bin" sweep >"$log.1" 2>&1
    local s1=$?
    wait "$p0"
    local s0=$?
    if [ $s0 -eq 0 ] && [ $s1 -eq 0 ] && grep -q "rank 0 of 2 (shm): sweep passed" "$log.0" &&
        grep -q "rank 1 of 2 (shm): sweep passed" "$log.1"; then
        echo "ok   $what"
    else
        echo "FAIL $what (exit $s0, $s1)"
        tail -n 5 "$log.0" "$log.1"
        fails=$((fails + 1))
    fi
    check_no_shm "$what"
}

id=$$$RANDOM
by_hand "srun variables only" "slurm-$id.0" \
    SLURM_PROCID=0 SLURM_NTASKS=2 SLURM_LOCALID=0 SLURM_NODEID=0 SLURM_NNODES=1 \
    SLURM_TASKS_PER_NODE=2 SLURM_JOB_ID="$id" SLURM_STEP_ID=0 -- \
    SLURM_PROCID=1 SLURM_NTASKS=2 SLURM_LOCALID=1 SLURM_NODEID=0 SLURM_NNODES=1 \
    SLURM_TASKS_PER_NODE=2 SLURM_JOB_ID="$id" SLURM_STEP_ID=0
by_hand "torchrun variables only" "tr$id" \
    RANK=0 WORLD_SIZE=2 LOCAL_RANK=0 LOCAL_WORLD_SIZE=2 TORCHELASTIC_RUN_ID="tr$id" -- \
    RANK=1 WORLD_SIZE=2 LOCAL_RANK=1 LOCAL_WORLD_SIZE=2 TORCHELASTIC_RUN_ID="tr$id"
by_hand "pmi variables and COHORT_JOB_ID" "pj$id" \
    PMI_RANK=0 PMI_SIZE=2 MPI_LOCALRANKID=0 MPI_LOCALNRANKS=2 COHORT_JOB_ID="pj$id" COHORT_COMM=shm -- \
    PMI_RANK=1 PMI_SIZE=2 MPI_LOCALRANKID=1 MPI_LOCALNRANKS=2 COHORT_JOB_ID="pj$id" COHORT_COMM=shm

# Hydra gives no job id: the ranks must say what to set, not guess a name.
out=$(PMI_RANK=0 PMI_SIZE=2 COHORT_COMM=shm "$rank_bin" sweep 2>&1)
if [ $? -ne 0 ] && grep -q "the launcher (pmi) gives no job id (PMI_JOBID is not set).*set COHORT_JOB_ID" <<<"$out"; then
    echo "ok   pmi without a job id is refused with what to set"
else
    echo "FAIL pmi without a job id: $out"
    fails=$((fails + 1))
fi
# A PMI launcher (MPICH's mpiexec) with cohort's MPI plugin built on Open MPI: MPI starts alone
# (rank 0 of 1); the rank must refuse instead of running as a one-rank job.
if [ -f "$build/libcohort_mpi.so" ]; then
    out=$(OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 PMI_RANK=0 PMI_SIZE=2 \
          COHORT_MPI_PLUGIN="$build/libcohort_mpi.so" \
          ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" \
          timeout 60 "$rank_bin" rounding 2>&1)
    if [ $? -ne 0 ] && grep -q "mpi sees 1 rank(s) but the launcher (pmi) started 2" <<<"$out"; then
        echo "ok   an MPI that does not know the launcher is refused"
    else
        echo "FAIL an MPI that does not know the launcher: $out"
        fails=$((fails + 1))
    fi
fi
finish
