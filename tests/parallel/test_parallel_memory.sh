#!/usr/bin/env bash
# test_parallel_memory.sh: at 4 ranks each rank's measured model state (resident parameter and
# gradient pages, allocated AdamW moments, reported per rank in the metrics) matches the ZeRO
# paper's formulas within 5% for zero1, zero2 and zero3, zero3 holds at most a third of ddp,
# every rank reports its peak RSS, and the start-up line prints expected next to held bytes.
set -u
cohort=${COHORT:?}
src=${COHORT_SOURCE_DIR:?}
py=${COHORT_PYTHON:-/usr/bin/python3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

cat "$src"/README.md "$src"/include/cohort/*.h > "$work/corpus.txt"
"$cohort" prepare --tokenizer byte --documents paragraph --out "$work/c" "$work/corpus.txt" \
    >/dev/null || fail "prepare"
# 1.7 M parameters: chunks of whole pages dominate, so page rounding stays far below 5%
model=(--vocab 512 --layers 2 --heads 4 --dim 256 --seq 32 --batch 1 --threads 1 --steps 2
       --data "$work/c_train_*.bin" --bucket-mb 1)
for s in ddp zero1 zero2 zero3; do
    "$cohort" run --nproc-per-node 4 "$cohort" train "${model[@]}" --strategy $s \
        --metrics "$work/$s.jsonl" >"$work/$s.out" 2>&1 || fail "$s: $(tail -3 "$work/$s.out")"
    grep -q "model state per rank: expected .* held at start" "$work/$s.out" ||
        fail "$s: no expected-vs-held line at start"
done

"$py" - "$work" <<'PYEOF' || fail "memory figures"
import json, sys
work = sys.argv[1]
P = 512 * 256 + 32 * 256 + 2 * (4 * 256 + 256 * 768 + 768 + 256 * 256 + 256 + 256 * 1024 + 1024
                                + 1024 * 256 + 256) + 2 * 256
D = 4
formula = {"ddp": (4 * P, 4 * P, 8 * P), "zero1": (4 * P, 4 * P, 8 * P / D),
           "zero2": (4 * P, 4 * P / D, 8 * P / D), "zero3": (4 * P / D, 4 * P / D, 8 * P / D)}
ok, total = True, {}
for s, f in formula.items():
    mem = json.loads(open("%s/%s.jsonl" % (work, s)).read().splitlines()[-1])["memory"]
    if len(mem) != D:
        print("%s: %d ranks reported, want %d" % (s, len(mem), D)); ok = False; continue
    for m in mem:
        held = (m["params_bytes"], m["grads_bytes"], m["optim_bytes"])
        err = abs(sum(held) - sum(f)) / sum(f)
        parts = [abs(h - e) / e for h, e in zip(held, f)]
        print("%s rank %d: held %d = %s, formula %d = %s, error %.2f%% (parts %s), peak rss %d"
              % (s, m["rank"], sum(held), held, sum(f), tuple(int(x) for x in f), 100 * err,
                 ["%.2f%%" % (100 * p) for p in parts], m["peak_rss_bytes"]))
        if err > 0.05 or max(parts) > 0.05:
            print("  -> more than 5% off"); ok = False
        if m["peak_rss_bytes"] <= sum(held) / 2:
            print("  -> implausible peak rss"); ok = False
        total[s] = max(total.get(s, 0), sum(held))
print("zero3 / ddp = %.3f" % (total["zero3"] / total["ddp"]))
if total["zero3"] * 3 > total["ddp"]:
    print("zero3 holds more than a third of ddp"); ok = False
sys.exit(0 if ok else 1)
PYEOF
[ $fails -eq 0 ] && echo "memory matches the formulas"
exit $((fails > 0))
