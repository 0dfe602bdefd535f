#!/usr/bin/env bash
# bf16_mesh_drift.sh: measures how far test_parallel_bf16_mesh.sh's 30-step runs drift from single
# over many seeds on this machine's kernels, and how often its bounds would break (a measurement,
# not a test: `COHORT=build/cohort COHORT_SOURCE_DIR=. tests/parallel/bf16_mesh_drift.sh [FIRST
# [LAST]]`, seeds 1..40 by default; OPENBLAS_CORETYPE with COHORT_BLAS_KEEP=1, or
# ONEDNN_MAX_CPU_ISA, gives other kernels of the same machine).
#
# bf16 rounding turns any reordering of fp32 sums into 2^-8 steps of the operands it moves across a
# rounding boundary, and AdamW carries those into whole steps of elements whose gradient is near
# zero, so how far a run reordered by tp lies from single after 30 steps is chaotic: another seed,
# or another CPU's kernels, gives another figure. The test's 30-step bounds (loss within 2e-5 or
# twice one device's own reordering; every tensor within 2e-3) are statistical, and this prints
# their distribution: for each seed the loss and parameter figures of par_compare.py against
# single for the floor (single at micro-batches 4 x 2), tp 2, tp 2 with sequence parallelism and
# the control (tp 2 in fp32, which the bounds must tell apart), whether pp 2 (1f1b) gave the bits
# of one device in a pipeline's order (--tied-grad-order pipeline; exact, never statistical), and
# the test's discriminating check, one step from single's state after 10 steps (the median
# element update error of tp 2, tp 2 with sequence parallelism and the control, bound 256 x
# 2^-24, the control at least 10x beyond); then the quantiles and the count of seeds that would
# break each bound.
. "$(dirname "${BASH_SOURCE[0]}")/par_lib.sh"
first=${1:-1} last=${2:-40}
case "$first$last" in *[!0-9]*) echo "usage: $0 [FIRST [LAST]] (seeds, whole numbers)" >&2; exit 2 ;; esac
"$py" -c "import numpy" 2>/dev/null || { echo "numpy missing for $py" >&2; exit 2; }
par_bf16_mesh_model
base=("${model[@]}")
table=$work/table.txt
printf '%s\n' "seed floor_loss tp2_loss sp2_loss f32_loss floor_params tp2_params sp2_params f32_params" \
    "tp2_step sp2_step f32_step pp2_bits" | paste -sd' ' >"$table"
# step_median RUN: the median element update error of RUN's step 11 against single's
step_median() {
    "$py" "$src/tests/parallel/par_compare.py" --update "$work/step10.bin" --terms 256 \
        "$work/step-single.jsonl" "$work/step-single.bin" "$work/step-$1.jsonl" "$work/step-$1.bin" \
        "$V" "$C" "$L" "$T" | sed -nE 's/.*median element error ([^ ]+) .*/\1/p'
}
for seed in $(seq "$first" "$last"); do
    model=("${base[@]}" --seed "$seed")
    for run in "single" "floor --micro-batch 4 --grad-accum 2" "single-tied --tied-grad-order pipeline"; do
        set -- $run
        name=$1
        shift
        "$cohort" train "${model[@]}" "$@" --metrics "$work/$name.jsonl" --dump-params "$work/$name.bin" \
            >"$work/$name.out" 2>&1 || fail "seed $seed, $name: $(tail -2 "$work/$name.out")"
    done
    par_train tp2 2 --tp 2
    par_train sp2 2 --tp 2 --sequence-parallel
    par_train f32 2 --tp 2 --precision fp32
    par_train pp2 2 --pp 2 --schedule 1f1b
    par_step_state
    par_one_step step-single 1
    par_one_step step-tp2 2 --tp 2
    par_one_step step-sp2 2 --tp 2 --sequence-parallel
    par_one_step step-f32 2 --tp 2 --precision fp32
    for name in floor tp2 sp2 f32; do par_cmp single "$name"; done
    bits=no
    cmp -s "$work/single-tied.bin" "$work/pp2.bin" &&
        [ "$(losses "$work/single-tied.jsonl")" = "$(losses "$work/pp2.jsonl")" ] && bits=yes
    row="$seed $(par_loss_err floor) $(par_loss_err tp2) $(par_loss_err sp2) $(par_loss_err f32)"
    row="$row $(par_param_err floor) $(par_param_err tp2) $(par_param_err sp2) $(par_param_err f32)"
    row="$row $(step_median tp2) $(step_median sp2) $(step_median f32) $bits"
    echo "$row" >>"$table"
    echo "$row"
done
[ $fails -eq 0 ] || { echo "$fails run(s) failed: no summary" >&2; exit 1; }
"$py" - "$table" <<'PYEOF'
import sys
import numpy as np
rows = [l.split() for l in open(sys.argv[1])]
head, rows = rows[0], rows[1:]
col = {h: np.array([float(r[i]) for r in rows]) for i, h in enumerate(head[:-1])}
print("%d seeds; quantiles min / median / 90%% / max" % len(rows))
for h in head[1:-1]:
    x = col[h]
    print("  %-13s %9.3g %9.3g %9.3g %9.3g" % (h, x.min(), np.median(x), np.quantile(x, 0.9), x.max()))
loss_bound = np.maximum(2e-5, 2 * col["floor_loss"])
for run in ("tp2", "sp2"):
    print("%s: loss beyond max(2e-5, 2 x floor) in %d seeds (largest share of that bound %.2f); "
          "parameters beyond 2e-3 in %d (largest %.3g)"
          % (run, (col[run + "_loss"] > loss_bound).sum(), (col[run + "_loss"] / loss_bound).max(),
             (col[run + "_params"] > 2e-3).sum(), col[run + "_params"].max()))
bound = 256 * 2.0 ** -24
for run in ("tp2", "sp2"):
    print("%s, one step: beyond %.3g in %d seeds (largest %.3g)"
          % (run, bound, (col[run + "_step"] > bound).sum(), col[run + "_step"].max()))
print("control, one step: less than 10x the bound in %d seeds (smallest %.3g, %.1fx the bound)"
      % ((col["f32_step"] < 10 * bound).sum(), col["f32_step"].min(), col["f32_step"].min() / bound))
told = (col["f32_loss"] > 1e-5) | (col["f32_params"] > 2e-3)
print("control (tp 2 in fp32): told apart (loss beyond 1e-5 or parameters beyond 2e-3) in %d of %d "
      "seeds; its smallest figures: loss %.3g, parameters %.3g"
      % (told.sum(), len(rows), col["f32_loss"].min(), col["f32_params"].min()))
print("pp 2 (1f1b) gave one device's bits in a pipeline's order in %d of %d seeds"
      % (sum(r[-1] == "yes" for r in rows), len(rows)))
PYEOF
