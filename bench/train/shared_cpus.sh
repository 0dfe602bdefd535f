#!/usr/bin/env bash
# shared_cpus.sh: two trainings started at once on the same cpus, each as wide as the machine,
# with OpenMP's barrier spin as cohort decides it (bounded when a job sees other work on its
# cpus at start) against libgomp's default for both (COHORT_SPIN_BOUND=0), and one job alone:
# the small model whose thousands of barriers a step make the stall visible, then
# bench/train's shape. Rounds alternate; each pair's wall time (or its rate) is printed, since
# how the scheduler places two unbounded jobs' threads is chance (docs/train.md, "Two jobs on
# the same CPUs").
# usage: bench/train/shared_cpus.sh [BUILD_DIR]; env ROUNDS (default 3), STALL_S (the most an
# unbounded pair may take before it is stopped and reported as such; default 300).
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
. "$root/bench/bench_lib.sh"
rounds=${ROUNDS:-3}
stall=${STALL_S:-300}
threads=$(nproc)

bench_fortune_files
bench_fortunes_bytes
small=(--data "$work/bytes_*.bin" --vocab 256 --layers 4 --heads 2 --dim 32 --seq 32
       --micro-batch 1 --grad-accum 8 --steps 30 --threads "$threads" --deterministic
       --peak-gflops 100)
shape=(--layers 6 --dim 384 --heads 6 --seq 256 --batch 8 --vocab 50257 --steps 3
       --threads "$threads" --precision fp32)

now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }'; }
# pair MODE CMD...: CMD twice at once under MODE (an env assignment); prints the wall time and
# what each said of the spin
pair() {
    local mode=$1 t0 i
    shift
    t0=$(now)
    for i in 1 2; do
        env -u GOMP_SPINCOUNT -u OMP_WAIT_POLICY "$mode" timeout "$stall" "$@" \
            >"$work/pair$i.out" 2>&1 &
    done
    wait
    local wall
    wall=$(since "$t0")
    local said
    said=$(grep -ho "OpenMP barriers spin [^(]*turns" "$work"/pair[12].out | sort | uniq -c |
           awk '{ $1 = $1 "x"; print }' | paste -sd ';' -)
    if grep -q '"tokens_per_s":' "$work/pair1.out"; then
        echo "$wall s; tokens/s $(grep -ho '"tokens_per_s": [0-9.]*' "$work"/pair[12].out |
              sed 's/.*: //' | paste -sd ' ' -); $said"
    else
        echo "$wall s$(awk -v w="$wall" -v s="$stall" 'BEGIN { if (w >= s) print " (stopped)" }'); $said"
    fi
}

echo "load before: $(uptime)"
echo "cpus: $threads ($(lscpu | sed -n 's/^Model name: *//p'))"
for r in $(seq "$rounds"); do
    t0=$(now)
    env -u GOMP_SPINCOUNT -u OMP_WAIT_POLICY "$cohort" train "${small[@]}" >"$work/alone.out" 2>&1
    echo "round $r small alone: $(since "$t0") s; $(grep -o "OpenMP barriers spin [^(]*turns" "$work/alone.out")"
    echo "round $r small pair, cohort's choice: $(pair COHORT_BENCH=1 "$cohort" train "${small[@]}")"
    echo "round $r small pair, both unbounded: $(pair COHORT_SPIN_BOUND=0 "$cohort" train "${small[@]}")"
done
for r in $(seq "$rounds"); do
    out=$(env -u GOMP_SPINCOUNT -u OMP_WAIT_POLICY "$build/bench/train/bench_train" "${shape[@]}")
    echo "round $r shape alone: tokens/s $(echo "$out" | sed -E 's/.*"tokens_per_s": ([0-9.]+).*/\1/'); $(echo "$out" | grep -o "OpenMP barriers spin [^(]*turns")"
    echo "round $r shape pair, cohort's choice: $(pair COHORT_BENCH=1 "$build/bench/train/bench_train" "${shape[@]}")"
    echo "round $r shape pair, both unbounded: $(pair COHORT_SPIN_BOUND=0 "$build/bench/train/bench_train" "${shape[@]}")"
done
echo "load after: $(uptime)"
echo "command: bench/train/shared_cpus.sh $build (ROUNDS=$rounds STALL_S=$stall)"
