#!/usr/bin/env bash
# test_plan_engine_parallel.sh: `cohort estimate --engine cohort --json` against what cohort
# runs measure, for single, ddp, zero1, zero2 and zero3 at 2 and 4 ranks: each rank's model state
# at the optimizer step (resident parameter and gradient pages, AdamW moments) and its peak
# resident growth (peak RSS minus the RSS just before the model was created, the peak reset
# there) are both within 10% of the prediction, and the trainer's own per-rank prediction equals
# the estimator's.
. "$(dirname "${BASH_SOURCE[0]}")/engine_lib.sh"

# 3.3 M parameters, 4 layers: several ZeRO-3 layer buckets, and page rounding far below 10%
shape=(--vocab 512 --layers 4 --heads 4 --dim 256 --seq 64)
train=("${shape[@]}" --batch 2 --threads 1 --steps 3 --data "$work/c_train_*.bin")
runs="single:1:0 ddp:2:0 zero1:2:1 zero2:2:2 zero3:2:3 ddp:4:0 zero1:4:1 zero2:4:2 zero3:4:3"
for r in $runs; do
    IFS=: read -r s n z <<<"$r"
    engine_run "$s-$n" "$n" "$s" "$z" 2
    grep -q "memory predicted per rank .* over the .* resident before the model" "$work/$s-$n.out" ||
        fail "$s x$n: no prediction at start"
    grep -q "done: .* peak rss .* over the start (engine predicted " "$work/$s-$n.out" ||
        fail "$s x$n: no measured-vs-predicted line at the end"
done

PYTHONPATH="$src/tests/plan" "$py" - "$work" "$rss" $runs <<'PYEOF' || fail "memory figures"
import sys
from engine_mem import HEADER, ranks
work, rss, runs = sys.argv[1], sys.argv[2] == "1", sys.argv[3:]
ok, state = True, {}
print("%-6s %-2s %-4s %s" % ("", "dp", "rank", HEADER))
for r in runs:
    s, n, z = r.split(":")
    est, rows = ranks(work, "%s-%s" % (s, n), int(n), rss)
    if {k: est["strategy"][k] for k in ("name", "dp", "zero")} != {"name": s, "dp": int(n), "zero": int(z)}:
        print("%s x%s: estimate says %s" % (s, n, est["strategy"])); ok = False
    if rows is None:
        print("%s x%s: not %s ranks reported" % (s, n, n)); ok = False; continue
    for rank, held, grown, e1, e2, text, problems in rows:
        print("%-6s %-2s %-4d %s" % (s, n, rank, text))
        if abs(e1) > 0.10:
            print("  -> model state more than 10% off"); ok = False
        if rss and abs(e2) > 0.10:
            print("  -> resident growth more than 10% off"); ok = False
        for p in problems:
            print("  -> " + p); ok = False
        state[(s, n)] = max(state.get((s, n), 0), held)
# the strategies really differ, so agreement is not a coincidence of equal sizes
for n in ("2", "4"):
    seq = [state.get((s, n), 0) for s in ("ddp", "zero1", "zero2", "zero3")]
    if not all(a > b for a, b in zip(seq, seq[1:])):
        print("dp %s: model state does not shrink ddp > zero1 > zero2 > zero3: %s" % (n, seq))
        ok = False
sys.exit(0 if ok else 1)
PYEOF
[ $fails -eq 0 ] && echo "engine predictions match the measured runs"
exit $((fails > 0))
