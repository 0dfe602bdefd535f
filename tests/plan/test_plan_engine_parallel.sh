#!/usr/bin/env bash
# test_plan_engine_parallel.sh: `cohort estimate --engine cohort --json` against what cohort
# runs measure, for single, ddp, zero1, zero2 and zero3 at 2 and 4 ranks: each rank's model state
# at the optimizer step (resident parameter and gradient pages, AdamW moments) and its peak
# resident growth (peak RSS minus the RSS just before the model was created, the peak reset
# there) are both within 10% of the prediction, and the trainer's own per-rank prediction equals
# the estimator's.
set -u
cohort=${COHORT:?}
src=${COHORT_SOURCE_DIR:?}
py=${COHORT_PYTHON:-/usr/bin/python3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# The resident peak means nothing under AddressSanitizer (shadow memory, quarantine).
rss=1
grep -qs '^COHORT_SANITIZE:BOOL=ON' "${COHORT_BUILD_DIR:-/nonexistent}/CMakeCache.txt" && rss=0

cat "$src"/README.md "$src"/include/cohort/*.h > "$work/corpus.txt"
"$cohort" prepare --tokenizer byte --documents paragraph --out "$work/c" "$work/corpus.txt" \
    >/dev/null || fail "prepare"
# 3.3 M parameters, 4 layers: several ZeRO-3 layer buckets, and page rounding far below 10%
shape=(--vocab 512 --layers 4 --heads 4 --dim 256 --seq 64)
train=("${shape[@]}" --batch 2 --threads 1 --steps 3 --data "$work/c_train_*.bin")
runs="single:1:0 ddp:2:0 zero1:2:1 zero2:2:2 zero3:2:3 ddp:4:0 zero1:4:1 zero2:4:2 zero3:4:3"
for r in $runs; do
    IFS=: read -r s n z <<<"$r"
    "$cohort" estimate --engine cohort "${shape[@]}" --micro-batch 2 --threads 1 --dp "$n" \
        --zero "$z" --json >"$work/$s-$n.est" || fail "$s x$n: estimate"
    "$cohort" run --nproc-per-node "$n" "$cohort" train "${train[@]}" --strategy "$s" \
        --metrics "$work/$s-$n.jsonl" >"$work/$s-$n.out" 2>&1 ||
        fail "$s x$n: $(tail -3 "$work/$s-$n.out")"
    grep -q "memory predicted per rank .* over the .* resident before the model" "$work/$s-$n.out" ||
        fail "$s x$n: no prediction at start"
    grep -q "done: .* peak rss .* over the start (engine predicted " "$work/$s-$n.out" ||
        fail "$s x$n: no measured-vs-predicted line at the end"
done

"$py" - "$work" "$rss" $runs <<'PYEOF' || fail "memory figures"
import json, sys
work, rss, runs = sys.argv[1], sys.argv[2] == "1", sys.argv[3:]
ok, state = True, {}
print("%-6s %-2s %-4s %14s %14s %7s %14s %14s %7s" % ("", "dp", "rank", "state pred",
      "state meas", "err", "growth pred", "growth meas", "err"))
for r in runs:
    s, n, z = r.split(":")
    est = json.load(open("%s/%s-%s.est" % (work, s, n)))
    if {k: est["strategy"][k] for k in ("name", "dp", "zero")} != {"name": s, "dp": int(n), "zero": int(z)}:
        print("%s x%s: estimate says %s" % (s, n, est["strategy"])); ok = False
    pd = est["per_device"]
    mem = json.loads(open("%s/%s-%s.jsonl" % (work, s, n)).read().splitlines()[-1])["memory"]
    if len(mem) != int(n):
        print("%s x%s: %d ranks reported" % (s, n, len(mem))); ok = False; continue
    for m in mem:
        held = m["params_bytes"] + m["grads_bytes"] + m["optim_bytes"]
        grown = m["peak_rss_bytes"] - m["base_rss_bytes"]
        e1 = (held - pd["model_state_bytes"]) / pd["model_state_bytes"]
        e2 = (grown - pd["total_bytes"]) / pd["total_bytes"]
        print("%-6s %-2s %-4d %14d %14d %+6.2f%% %14d %14d %s" % (s, n, m["rank"],
              pd["model_state_bytes"], held, 100 * e1, pd["total_bytes"], grown,
              "%+6.2f%%" % (100 * e2) if rss else "(not compared under ASan)"))
        if abs(e1) > 0.10:
            print("  -> model state more than 10% off"); ok = False
        if rss and abs(e2) > 0.10:
            print("  -> resident growth more than 10% off"); ok = False
        if abs(m["predicted_bytes"] - pd["total_bytes"]) > 0.01 * pd["total_bytes"]:
            print("  -> trainer predicted %d, estimate %d" % (m["predicted_bytes"],
                  pd["total_bytes"])); ok = False
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
