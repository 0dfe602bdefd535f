#!/usr/bin/env bash
# precision.sh: one build's cohort train in fp32 and in bf16-mixed side by side, alternating in
# each round so a slow spell of a shared machine falls on both (single, one thread, the model of
# ab.sh); prints each round's median tokens/s, the best of each, their ratio and the bf16 line
# the trainer logged (which kernels ran the products: AMX, AVX512-BF16, oneDNN's emulation or the
# widened fp32 products).
# usage: bench/engine/precision.sh COHORT [ROUNDS (default 3)]; env STEPS (default 8)
set -euo pipefail
co=$1 rounds=${2:-3} steps=${STEPS:-8}
. "$(dirname "$0")/engine_lib.sh"
engine_prepare "$co"
model+=(--steps "$steps")
best_f=0 best_b=0
for r in $(seq 1 "$rounds"); do
    for p in fp32 bf16-mixed; do
        "$co" train "${model[@]}" --precision $p --metrics "$work/$p.jsonl" >"$work/$p.out" 2>&1
        t=$(median_tps "$work/$p.jsonl")
        echo "round $r $p: $t tokens/s"
        if [ $p = fp32 ]; then
            best_f=$(python3 -c "print(max($best_f, $t))")
        else
            best_b=$(python3 -c "print(max($best_b, $t))")
        fi
    done
done
grep -E "bf16-mixed" "$work/bf16-mixed.out" | head -2
python3 -c "print('best of %d rounds: fp32 %.0f, bf16-mixed %.0f tokens/s: bf16-mixed / fp32 %.3f'
      % ($rounds, $best_f, $best_b, $best_b / $best_f))"
