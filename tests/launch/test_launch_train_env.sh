#!/usr/bin/env bash
# test_launch_train_env.sh: `cohort train` decides "one of several processes" from the launch
# API alone: the variables of cohort run, torchrun, Open MPI, PMI (Hydra, srun --mpi=pmi2) and
# an srun step each make a 2-rank job (seen in --dry-run's plan, nothing started); the batch
# script of sbatch is one process; a mismatch names the launcher and its variable; PMI and Slurm
# disagreeing names both variables.
set -u
cohort=${COHORT:?}
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
# ok WHAT: WHAT passed, said only when nothing failed since the last ok
f0=0
ok() { [ $fails -eq $f0 ] && echo "ok   $*"; f0=$fails; }
model=(--dry-run --vocab 256 --layers 1 --dim 32 --heads 2 --seq 16)
# a clean environment, so the test's own launcher (if any) does not leak in
run() { env -i PATH="$PATH" "$@"; }

declare -A launchers=(
    [cohort]="COHORT_RANK=1 COHORT_WORLD_SIZE=2 COHORT_LOCAL_RANK=1 COHORT_LOCAL_WORLD_SIZE=2 COHORT_JOB_ID=j1"
    [torchrun]="RANK=1 WORLD_SIZE=2 LOCAL_RANK=1 LOCAL_WORLD_SIZE=2 TORCHELASTIC_RUN_ID=j1"
    [openmpi]="OMPI_COMM_WORLD_RANK=1 OMPI_COMM_WORLD_SIZE=2 OMPI_COMM_WORLD_LOCAL_RANK=1 OMPI_COMM_WORLD_LOCAL_SIZE=2"
    [pmi]="PMI_RANK=1 PMI_SIZE=2 MPI_LOCALRANKID=1 MPI_LOCALNRANKS=2"
    [slurm]="SLURM_PROCID=1 SLURM_NTASKS=2 SLURM_LOCALID=1 SLURM_NODEID=0 SLURM_NNODES=1 SLURM_TASKS_PER_NODE=2 SLURM_JOB_ID=7 SLURM_STEP_ID=0"
)
declare -A world_var=([cohort]=COHORT_WORLD_SIZE [torchrun]=WORLD_SIZE [openmpi]=OMPI_COMM_WORLD_SIZE
                      [pmi]=PMI_SIZE [slurm]=SLURM_NTASKS)
for l in cohort torchrun openmpi pmi slurm; do
    # shellcheck disable=SC2086
    for s in ddp zero1 zero2 zero3; do
        out=$(run ${launchers[$l]} "$cohort" train "${model[@]}" --strategy $s 2>&1)
        grep -q "strategy  $s on dp 2" <<<"$out" || fail "$l, $s: not a 2-rank job: $out"
    done
    # shellcheck disable=SC2086
    out=$(run ${launchers[$l]} "$cohort" train "${model[@]}" --strategy single 2>&1)
    rc=$?
    [ $rc -eq 2 ] && grep -qF "strategy 'single' runs one process but $l started 2 ranks (${world_var[$l]}=2)" <<<"$out" ||
        fail "$l, single on 2 ranks: rc $rc: $out"
    ok "$l: ddp, zero1..3 see 2 ranks; single is refused naming $l and ${world_var[$l]}"
done

# sbatch's batch script: SLURM_PROCID=0 and the allocation's task count, but no step: one process
batch="SLURM_JOB_ID=4 SLURM_PROCID=0 SLURM_NTASKS=2 SLURM_NPROCS=2 SLURM_LOCALID=0 SLURM_NODEID=0 SLURM_NNODES=1 SLURM_TASKS_PER_NODE=2"
# shellcheck disable=SC2086
out=$(run $batch "$cohort" train "${model[@]}" 2>&1)
grep -q "strategy  single on dp 1" <<<"$out" || fail "batch script, single: $out"
# shellcheck disable=SC2086
out=$(run $batch "$cohort" train "${model[@]}" --strategy ddp 2>&1)
[ $? -eq 2 ] && grep -q "strategy 'ddp' needs one process per rank.*srun" <<<"$out" ||
    fail "batch script, ddp: $out"
ok "sbatch's batch script is one process (single runs, ddp says to use srun or cohort run)"

# srun --mpi=pmi2: PMI served by Slurm must agree with it
pmi2="PMI_JOBID=7.0 PMI_RANK=1 PMI_SIZE=4 SLURM_JOB_ID=7 SLURM_STEP_ID=0 SLURM_PROCID=1 SLURM_NTASKS=2 SLURM_TASKS_PER_NODE=2"
# shellcheck disable=SC2086
out=$(run $pmi2 "$cohort" train "${model[@]}" --strategy ddp 2>&1)
rc=$?
[ $rc -ne 0 ] && grep -q "PMI_SIZE '4' and SLURM_NTASKS '2'.*disagree" <<<"$out" ||
    fail "pmi and slurm disagreeing: rc $rc: $out"
ok "PMI_SIZE against SLURM_NTASKS: refused naming both"
# shellcheck disable=SC2086
out=$(run ${pmi2/PMI_SIZE=4/PMI_SIZE=2} "$cohort" train "${model[@]}" --strategy ddp 2>&1)
grep -q "strategy  ddp on dp 2" <<<"$out" || fail "srun --mpi=pmi2 variables: $out"
ok "srun --mpi=pmi2's variables make a 2-rank job"

[ $fails -eq 0 ] && echo "every launcher starts multi-process training through one decision"
exit $((fails > 0))
