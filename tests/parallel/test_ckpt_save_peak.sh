#!/usr/bin/env bash
# test_ckpt_save_peak.sh: a checkpoint's save stays within the run's memory prediction. For tp 2,
# pp 2, zero3 and ddp (2 ranks), tp 2 x pp 2 (4 ranks) and 3D with zero1 (dp 2 x pp 2 x tp 2,
# 8 ranks), with a model whose vocabulary dominates, so that gathering the model on a rank would
# show, every rank's peak resident growth with --save-every 2 and the final --save is within 5%
# of the engine's prediction, which counts the save's buffers and, on pipeline stages, the
# transport's memory of the groups the stage communicates over.
. "$(dirname "${BASH_SOURCE[0]}")/par_lib.sh"
par_memory_setup
[ "$rss" = 1 ] || { echo "SKIP save peak: the resident peak means nothing under a sanitizer"; exit 77; }

par_prepare
model=(--vocab 50257 --layers 4 --dim 128 --heads 2 --seq 64 --batch 4 --steps 4 --threads 1
       --data "$work/c_train_*.bin")
for mesh in "tp:2:--tp 2" "pp:2:--pp 2" "zero3:2:--strategy zero3" "ddp:2:--strategy ddp" \
    "tp2pp2:4:--tp 2 --pp 2" "3d-zero1:8:--tp 2 --pp 2 --strategy zero1"; do
    IFS=: read -r name ranks opts <<<"$mesh"
    read -ra flags <<<"$opts"
    "$cohort" run --nproc-per-node "$ranks" "$cohort" train "${model[@]}" "${flags[@]}" \
        --save "$work/$name.ck" --save-every 2 >"$work/$name.out" 2>&1 ||
        { fail "$name: $(tail -3 "$work/$name.out")"; continue; }
    [ -s "$work/$name.ck" ] || fail "$name: no checkpoint written"
    "$py" - "$name" "$ranks" "$work/$name.out" <<'PYEOF' || fail "$name: a save's peak is off the prediction"
import re, sys
units = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}
def size(s):
    v, u = s.split()
    return float(v) * units[u]
name, ranks, ok, seen = sys.argv[1], int(sys.argv[2]), True, set()
pat = re.compile(r"^\[rank(\d+)\]: .*done: .* peak rss [^,]+, (\S+ \S+) over the start "
                 r"\(engine predicted (\S+ \S+)\)")
for line in open(sys.argv[3]):
    m = pat.search(line)
    if not m:
        continue
    rank, grown, pred = int(m.group(1)), size(m.group(2)), size(m.group(3))
    err = (grown - pred) / pred
    seen.add(rank)
    print("%-8s rank %d: grew %.2f MiB, predicted %.2f MiB (%+.2f%%)" %
          (name, rank, grown / 2**20, pred / 2**20, 100 * err))
    if abs(err) > 0.05:
        print("  -> beyond 5%"); ok = False
if seen != set(range(ranks)):
    print("%s: end lines of ranks %s, expected one from each of %d" % (name, sorted(seen), ranks))
    ok = False
sys.exit(0 if ok else 1)
PYEOF
done
par_done "a save's peak stays within 5% of the prediction for tp 2, pp 2, zero3, ddp, tp 2 x pp 2 and 3D zero1"
