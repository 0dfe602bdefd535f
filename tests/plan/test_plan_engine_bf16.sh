#!/usr/bin/env bash
# test_plan_engine_bf16.sh: `cohort estimate --engine cohort --precision bf16-mixed --json`
# against what bf16-mixed runs measure, for single and for ddp and zero1-3 at 2 ranks: each rank's
# model state at the optimizer step and its peak resident growth (peak RSS minus the RSS just
# before the model was created) within 5% of the prediction, the trainer's
# own prediction equal to the estimator's, and bf16-mixed predicted above fp32 by what it adds
# (operand buffers, the head's bf16 dL/dlogits, less the halves of the activations it keeps in
# bf16): the same runs in fp32 grow by about that much less. Also ddp and zero3 with
# --grad-reduce-dtype bf16 (the bf16 gradient copy: whole for ddp, within 5%; for zero3 the
# buckets in flight, priced as the two largest at once, which over-predicts (-6.6%, then), so
# there only the prediction's not falling short is asserted: measured -5.2% and -5.4%). ZeRO-3
# prices other ranks' parameters and gradients at the moment of the step their sum is largest
# (the head, with wte gathered and its gradient written); it priced each at its own peak as if
# they coincided, which over-predicted by about 4.5 MB here (bf16-mixed zero3 -5.5%, fp32 -5.85%;
# now -2.0% and -1.6%).
. "$(dirname "${BASH_SOURCE[0]}")/engine_lib.sh"

shape=(--vocab 8192 --layers 2 --heads 4 --dim 256 --seq 128)
if ! out=$("$cohort" train "${shape[@]}" --steps 1 --data "$work/c_train_*.bin" \
        --precision bf16-mixed --dry-run 2>&1); then
    echo "SKIP bf16-mixed: $out"
    exit 77
fi
train=("${shape[@]}" --batch 4 --threads 1 --steps 3 --data "$work/c_train_*.bin")
runs="single:1:0 ddp:2:0 zero1:2:1 zero2:2:2 zero3:2:3"
for prec in bf16-mixed fp32; do
    for r in $runs; do
        IFS=: read -r s n z <<<"$r"
        engine_run "$prec-$s" "$n" "$s" "$z" 4 --precision $prec
    done
done
engine_run bf16-mixed-ddp16 2 ddp 0 4 --precision bf16-mixed --grad-reduce-dtype bf16
engine_run bf16-mixed-zero316 2 zero3 3 4 --precision bf16-mixed --grad-reduce-dtype bf16

PYTHONPATH="$src/tests/plan" "$py" - "$work" "$rss" $runs <<'PYEOF' || fail "memory figures"
import sys
from engine_mem import HEADER, ranks
work, rss, runs = sys.argv[1], sys.argv[2] == "1", sys.argv[3:]
ok = True
print("%-10s %-6s %-4s %s" % ("", "", "rank", HEADER))
growth = {}
cases = [(p, r) for p in ("bf16-mixed", "fp32") for r in runs]
cases += [("bf16-mixed", "ddp16:2:0"), ("bf16-mixed", "zero316:2:3")]
for prec, r in cases:
    s, n, z = r.split(":")
    est, rows = ranks(work, "%s-%s" % (prec, s), int(n), rss)
    if est["strategy"]["grad_reduce_dtype"] != ("bf16" if s.endswith("16") else "fp32"):
        print("%s %s: estimate says %s" % (prec, s, est["strategy"])); ok = False
    if est["strategy"]["precision"] != prec:
        print("%s %s: estimate says %s" % (prec, s, est["strategy"])); ok = False
    if rows is None:
        print("%s %s: not %s ranks reported" % (prec, s, n)); ok = False; continue
    pred = est["per_device"]["total_bytes"]
    for rank, held, grown, e1, e2, text, problems in rows:
        growth[(prec, s, rank)] = (grown, pred)
        print("%-10s %-6s %-4d %s" % (prec, s, rank, text))
        if prec == "bf16-mixed" and abs(e1) > 0.05:
            print("  -> model state more than 5% off"); ok = False
        if s == "zero316" and rss and e2 > 0.05:
            print("  -> resident growth more than 5% above the prediction"); ok = False
        elif s != "zero316" and prec == "bf16-mixed" and rss and abs(e2) > 0.05:
            print("  -> resident growth more than 5% off"); ok = False
        for p in problems:
            print("  -> " + p); ok = False
for r in runs:
    s = r.split(":")[0]
    g16, p16 = growth.get(("bf16-mixed", s, 0), (0, 0))
    g32, p32 = growth.get(("fp32", s, 0), (0, 0))
    extra = p16 - p32
    print("%s: bf16-mixed predicted %+d bytes over fp32, grew %+d" % (s, extra, g16 - g32))
    if extra <= 0:
        print("  -> bf16-mixed predicts no more than fp32"); ok = False
    elif rss and not (0.5 * extra <= g16 - g32 <= 2 * extra):
        print("  -> the measured difference is not what the prediction adds"); ok = False
sys.exit(0 if ok else 1)
PYEOF
[ $fails -eq 0 ] && echo "bf16-mixed engine predictions match the measured runs"
exit $((fails > 0))
