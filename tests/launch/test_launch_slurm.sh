#!/usr/bin/env bash
# test_launch_slurm.sh: cohort on a real one-node Slurm cluster (slurm_lib.sh starts munged,
# slurmctld and slurmd as children of this test and tears them down): `srun -n 2` and
# `srun -n 4 --overcommit` train ddp and zero3 as one device does (par_compare.py's bound);
# `srun --mpi=pmix` with the MPI transport, and `srun --mpi=pmi2` (srun's PMI: PMI rules, local
# ranks from Slurm) on shared memory; a task killed ends the job with nothing left in /dev/shm;
# `cohort run` inside `salloc` and inside an `sbatch` script, whose own `cohort train` is one
# process. Skipped by name where Slurm cannot run (not root, packages missing).
. "$(dirname "${BASH_SOURCE[0]}")/../parallel/par_lib.sh"
. "$src/tests/launch/slurm_lib.sh"
why=$(slurm_can_run)
[ -z "$why" ] || { echo "SKIP slurm: $why"; exit 77; }
"$py" -c "import numpy" 2>/dev/null || { echo "SKIP slurm: numpy missing"; exit 77; }
trap 'slurm_stop; [ -n "$launcher" ] && kill -9 "$launcher" 2>/dev/null; rm -rf "$work"' EXIT
slurm_start || { fail "slurm start"; par_done ""; }
chmod 755 "$work"
export COHORT_COMM_TIMEOUT=60 # the MPI plug-ins are found beside the cohort program
# Open MPI does not free its own allocations at MPI_Finalize
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"

par_prepare --val-fraction 0.1 "$src/tests/parallel/equiv_corpus.txt"
V=256 C=32 L=2 T=32
par_model $V $L 2 $C $T
model+=(--lr 1e-3 --warmup 3 --deterministic --shuffle on --steps 30 --bucket-mb 0.03)
compare() { # NAME RUN: RUN against single within par_compare.py's bound
    if "$py" "$src/tests/parallel/par_compare.py" "$work/single.jsonl" "$work/single.bin" \
        "$work/$2.jsonl" "$work/$2.bin" $V $C $L $T >"$work/$2.cmp" 2>&1; then
        echo "ok   $1: $(head -1 "$work/$2.cmp")"
    else
        fail "$1: $(cat "$work/$2.cmp")"
    fi
}
# transport NAME OUT WANT: the job's ranks said they ran on transport WANT (COHORT_LOG=debug)
transport() {
    grep -q "comm: rank 0 of [0-9]* (launcher [a-z]*) on transport $3" "$work/$2.out" ||
        fail "$1: not on transport $3: $(grep 'comm: rank' "$work/$2.out" | head -2)"
}

"$cohort" train "${model[@]}" --batch 8 --metrics "$work/single.jsonl" \
    --dump-params "$work/single.bin" >/dev/null 2>"$work/single.err" || fail "single: $(cat "$work/single.err")"

# 1. srun -n 2 and srun -n 4 --overcommit (more tasks than this machine's cpus)
for n in 2 4; do
    over=()
    [ $n -gt "$(nproc)" ] && over=(--overcommit)
    for s in ddp zero3; do
        COHORT_LOG=debug timeout 120 srun -n $n "${over[@]}" "$cohort" train "${model[@]}" --strategy $s \
            --batch $((8 / n)) --metrics "$work/$s$n.jsonl" --dump-params "$work/$s$n.bin" \
            >"$work/$s$n.out" 2>&1 || { fail "srun -n $n $s: $(tail -3 "$work/$s$n.out")"; continue; }
        grep -q "global batch 8 sequences = micro-batch $((8 / n)) x accumulation 1 x data-parallel $n" \
            "$work/$s$n.out" || fail "srun -n $n $s: not a $n-rank job: $(grep -m1 strategy "$work/$s$n.out")"
        transport "srun -n $n $s" $s$n shm
        compare "srun -n $n ${over[*]} $s" $s$n
    done
done

# 2. a mismatch is refused naming the launcher, on every task
out=$(timeout 60 srun -n 2 "$cohort" train "${model[@]}" --batch 8 2>&1)
[ "$(grep -c "strategy 'single' runs one process but slurm started 2 ranks (SLURM_NTASKS=2)" <<<"$out")" -eq 2 ] &&
    echo "ok   srun -n 2 of --strategy single: refused by both tasks, naming slurm and SLURM_NTASKS" ||
    fail "srun -n 2 of a single run: $out"

# 3. srun's MPI plug-ins. pmix: Open MPI initialises from srun (direct launch), the MPI transport
# carries the training. pmi2: srun serves PMI-2; Debian's Open MPI is built without Slurm's
# PMI-1/2 client and cannot start from it, MPICH can: the PMI variables are checked through
# shared memory (PMI rules, its local ranks from Slurm), then MPI on cohort's MPICH plug-in.
if [ -f "${COHORT_BUILD_DIR:-.}/libcohort_mpi.so" ] && srun --mpi=list 2>&1 | grep -q pmix; then
    COHORT_COMM=mpi COHORT_LOG=debug timeout 120 srun -n 2 --mpi=pmix "$cohort" train "${model[@]}" \
        --strategy ddp --batch 4 --metrics "$work/pmix.jsonl" --dump-params "$work/pmix.bin" \
        >"$work/pmix.out" 2>&1 || fail "srun --mpi=pmix ddp over MPI: $(tail -5 "$work/pmix.out")"
    transport "srun --mpi=pmix" pmix mpi
    compare "srun -n 2 --mpi=pmix, ddp over MPI" pmix
else
    echo "SKIP srun --mpi=pmix: libcohort_mpi.so or Slurm's pmix plug-in missing"
fi
if srun --mpi=list 2>&1 | grep -q pmi2; then
    COHORT_COMM=shm COHORT_LOG=debug timeout 120 srun -n 2 --mpi=pmi2 "$cohort" train "${model[@]}" \
        --strategy zero3 --batch 4 --metrics "$work/pmi2.jsonl" --dump-params "$work/pmi2.bin" \
        >"$work/pmi2.out" 2>&1 || fail "srun --mpi=pmi2 zero3: $(tail -5 "$work/pmi2.out")"
    grep -q "(launcher pmi) on transport shm" "$work/pmi2.out" ||
        fail "srun --mpi=pmi2: not read as PMI: $(grep 'comm: rank' "$work/pmi2.out" | head -2)"
    compare "srun -n 2 --mpi=pmi2 (PMI variables), zero3 on shared memory" pmi2
    # MPICH speaks srun's PMI-2: with its plug-in built, the default picks MPI on it
    if [ -f "${COHORT_BUILD_DIR:-.}/libcohort_mpich.so" ]; then
        COHORT_LOG=debug timeout 120 srun -n 2 --mpi=pmi2 "$cohort" train "${model[@]}" \
            --strategy ddp --batch 4 --metrics "$work/pmi2mpi.jsonl" --dump-params "$work/pmi2mpi.bin" \
            >"$work/pmi2mpi.out" 2>&1 || fail "srun --mpi=pmi2 ddp over MPICH: $(tail -5 "$work/pmi2mpi.out")"
        grep -q "(launcher pmi) on transport mpi" "$work/pmi2mpi.out" ||
            fail "srun --mpi=pmi2: not over MPI: $(grep 'comm: rank' "$work/pmi2mpi.out" | head -2)"
        compare "srun -n 2 --mpi=pmi2, ddp over MPI (MPICH)" pmi2mpi
    else
        echo "SKIP srun --mpi=pmi2 over MPI: libcohort_mpich.so not built (Debian's Open MPI has no Slurm PMI-2 client)"
    fi
fi

# 4. one task killed: the other notices the lost peer, the job ends, /dev/shm is clean. The
# job's segments are named by its Slurm job and step (cohort-USER-slurm-JOB.STEP-r0...; unlinked
# once every rank mapped them, so none is seen while it runs): other tests' jobs may be running
# beside this one, with segments of their own, so only this job's count.
f0=$fails
seg=
timeout 120 srun -n 2 "$cohort" train "${model[@]}" --strategy ddp --batch 4 --steps 100000 \
    --metrics "$work/kill.jsonl" >"$work/kill.out" 2>&1 &
launcher=$!
killed=
for _ in $(seq 600); do
    if [ "$(last_step "$work/kill.jsonl")" -ge 5 ] 2>/dev/null; then
        for p in $(pgrep -x cohort); do
            env_of=$(tr '\0' '\n' < /proc/$p/environ 2>/dev/null)
            grep -qx "SLURM_PROCID=1" <<<"$env_of" && grep -qF "SLURM_CONF=$SLURM_CONF" <<<"$env_of" || continue
            seg="cohort-$(id -un)-slurm-$(sed -n 's/^SLURM_JOB_ID=//p' <<<"$env_of").$(sed -n 's/^SLURM_STEP_ID=//p' <<<"$env_of")-r"
            kill -9 "$p" && killed=$p
        done
        break
    fi
    kill -0 $launcher 2>/dev/null || break
    sleep 0.05
done
t0=$(date +%s)
wait $launcher
rc=$?
launcher=
[ -n "$killed" ] || fail "kill a task: task 1 not found running"
[ $rc -ne 0 ] && [ $rc -ne 124 ] || fail "kill a task: srun exited $rc (124: the job did not end)"
grep -q "rank 1 died" "$work/kill.out" || fail "kill a task: rank 0 did not see rank 1 die: $(tail -3 "$work/kill.out")"
for _ in $(seq 600); do pgrep -x cohort -a | grep -qF "$work" || break; sleep 0.1; done
pgrep -x cohort -a | grep -qF "$work" && fail "kill a task: a cohort task of the job still runs"
left=$(ls /dev/shm | grep -F "${seg:-none}" || true)
[ -z "$left" ] || fail "kill a task: left in /dev/shm: $left"
[ $fails -eq $f0 ] && echo "ok   a task killed at step 5: srun exits $rc after $(($(date +%s) - t0)) s, no task left, no $seg* segment in /dev/shm"

# 5. cohort run inside an allocation: salloc, then an sbatch script that also runs cohort train
# alone (its batch step has SLURM_PROCID=0 and SLURM_NTASKS=2 but is one process)
timeout 120 salloc -n 2 "$cohort" run --nproc-per-node 2 "$cohort" train "${model[@]}" \
    --strategy zero3 --batch 4 --metrics "$work/salloc.jsonl" --dump-params "$work/salloc.bin" \
    >"$work/salloc.out" 2>&1 || fail "salloc + cohort run: $(tail -3 "$work/salloc.out")"
compare "salloc -n 2 cohort run -n 2, zero3" salloc
q() { printf '%q ' "$@"; }
cat > "$work/job.sh" <<EOF
#!/usr/bin/env bash
$(q "$cohort" train "${model[@]}") --batch 8 --metrics $work/batch_single.jsonl --dump-params $work/batch_single.bin || exit 1
$(q "$cohort" run --nproc-per-node 2 "$cohort" train "${model[@]}") --strategy ddp --batch 4 --metrics $work/sbatch.jsonl --dump-params $work/sbatch.bin
EOF
timeout 120 sbatch -W -n 2 -o "$work/sbatch.out" "$work/job.sh" >/dev/null 2>"$work/sbatch.err" ||
    fail "sbatch: $(cat "$work/sbatch.err"; tail -5 "$work/sbatch.out")"
cp "$work/batch_single.jsonl" "$work/batch_single_run.jsonl" 2>/dev/null
compare "sbatch -n 2: cohort train alone in the batch script (one process)" batch_single
compare "sbatch -n 2: cohort run -n 2, ddp" sbatch

par_done "Slurm: srun, srun --mpi, salloc and sbatch train as one device does; a killed task ends the job"
