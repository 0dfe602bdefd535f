#!/usr/bin/env bash
# test_ckpt_save_peak.sh: a checkpoint's save stays within the run's memory prediction. For tp 2,
# pp 2, zero3 and ddp (2 ranks, a model whose vocabulary dominates, so that gathering the model
# on a rank would show), every rank's peak resident growth with --save-every 2 and the final
# --save is within 5% of the engine's prediction, which counts the save's buffers.
. "$(dirname "${BASH_SOURCE[0]}")/par_lib.sh"
par_memory_setup
[ "$rss" = 1 ] || { echo "SKIP save peak: the resident peak means nothing under a sanitizer"; exit 77; }

par_prepare
model=(--vocab 50257 --layers 4 --dim 128 --heads 2 --seq 64 --batch 4 --steps 4 --threads 1
       --data "$work/c_train_*.bin")
for mesh in "tp:--tp 2" "pp:--pp 2" "zero3:--strategy zero3" "ddp:--strategy ddp"; do
    name=${mesh%%:*}
    read -ra flags <<<"${mesh#*:}"
    "$cohort" run --nproc-per-node 2 "$cohort" train "${model[@]}" "${flags[@]}" \
        --save "$work/$name.ck" --save-every 2 >"$work/$name.out" 2>&1 ||
        { fail "$name: $(tail -3 "$work/$name.out")"; continue; }
    [ -s "$work/$name.ck" ] || fail "$name: no checkpoint written"
    "$py" - "$name" "$work/$name.out" <<'PYEOF' || fail "$name: a save's peak is off the prediction"
import re, sys
units = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}
def size(s):
    v, u = s.split()
    return float(v) * units[u]
name, ok, n = sys.argv[1], True, 0
pat = re.compile(r"done: .* peak rss [^,]+, (\S+ \S+) over the start \(engine predicted (\S+ \S+)\)")
for line in open(sys.argv[2]):
    m = pat.search(line)
    if not m:
        continue
    grown, pred = size(m.group(1)), size(m.group(2))
    err = (grown - pred) / pred
    n += 1
    print("%-6s rank line %d: grew %.1f MiB, predicted %.1f MiB (%+.1f%%)" %
          (name, n, grown / 2**20, pred / 2**20, 100 * err))
    ok &= abs(err) <= 0.05
if n != 2:
    print("%s: %d end lines, expected one per rank" % (name, n)); ok = False
sys.exit(0 if ok else 1)
PYEOF
done
par_done "a save's peak stays within 5% of the prediction for tp 2, pp 2, zero3 and ddp"
