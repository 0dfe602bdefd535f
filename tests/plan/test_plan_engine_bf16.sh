#!/usr/bin/env bash
# test_plan_engine_bf16.sh: `cohort estimate --engine cohort --precision bf16-mixed --json`
# against what bf16-mixed runs measure, for single and for ddp and zero3 at 2 ranks: each rank's
# model state at the optimizer step and its peak resident growth (peak RSS minus the RSS just
# before the model was created) within 5% of the prediction, the trainer's own prediction equal
# to the estimator's, and bf16-mixed predicted above fp32 by its operand buffers (what the
# prediction adds must be there: the same runs in fp32 grow by less); also ddp and zero3 with
# --grad-reduce-dtype bf16 (the bf16 gradient copy: whole for ddp, within 5%; for zero3 the
# buckets in flight, priced as the two largest at once, which over-predicts: measured -6.6%, so
# there only the prediction's not falling short is asserted).
set -u
cohort=${COHORT:?}
src=${COHORT_SOURCE_DIR:?}
py=${COHORT_PYTHON:-/usr/bin/python3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

rss=1
grep -qs '^COHORT_SANITIZE:BOOL=ON' "${COHORT_BUILD_DIR:-/nonexistent}/CMakeCache.txt" && rss=0

cat "$src"/README.md "$src"/include/cohort/*.h > "$work/corpus.txt"
"$cohort" prepare --tokenizer byte --documents paragraph --out "$work/c" "$work/corpus.txt" \
    >/dev/null || fail "prepare"
shape=(--vocab 8192 --layers 2 --heads 4 --dim 256 --seq 128)
if ! out=$("$cohort" train "${shape[@]}" --steps 1 --data "$work/c_train_*.bin" \
        --precision bf16-mixed --dry-run 2>&1); then
    echo "SKIP bf16-mixed: $out"
    exit 77
fi
train=("${shape[@]}" --batch 4 --threads 1 --steps 3 --data "$work/c_train_*.bin")
runs="single:1:0 ddp:2:0 zero3:2:3"
run() { # precision name strategy ranks zero [options]
    local prec=$1 name=$2 s=$3 n=$4 z=$5
    shift 5
    "$cohort" estimate --engine cohort "${shape[@]}" --micro-batch 4 --threads 1 --dp "$n" \
        --zero "$z" --precision $prec "$@" --json >"$work/$prec-$name.est" || fail "$prec $name: estimate"
    "$cohort" run --nproc-per-node "$n" "$cohort" train "${train[@]}" --strategy "$s" \
        --precision $prec "$@" --metrics "$work/$prec-$name.jsonl" >"$work/$prec-$name.out" 2>&1 ||
        fail "$prec $name x$n: $(tail -3 "$work/$prec-$name.out")"
}
for prec in bf16-mixed fp32; do
    for r in $runs; do
        IFS=: read -r s n z <<<"$r"
        run $prec $s $s $n $z
    done
done
run bf16-mixed ddp16 ddp 2 0 --grad-reduce-dtype bf16
run bf16-mixed zero316 zero3 2 3 --grad-reduce-dtype bf16

"$py" - "$work" "$rss" $runs <<'PYEOF' || fail "memory figures"
import json, sys
work, rss, runs = sys.argv[1], sys.argv[2] == "1", sys.argv[3:]
ok = True
print("%-10s %-6s %-4s %14s %14s %7s %14s %14s %7s" % ("", "", "rank", "state pred",
      "state meas", "err", "growth pred", "growth meas", "err"))
growth = {}
cases = [(p, r) for p in ("bf16-mixed", "fp32") for r in runs]
cases += [("bf16-mixed", "ddp16:2:0"), ("bf16-mixed", "zero316:2:3")]
for prec, r in cases:
        s, n, z = r.split(":")
        est = json.load(open("%s/%s-%s.est" % (work, prec, s)))
        if est["strategy"]["grad_reduce_dtype"] != ("bf16" if s.endswith("16") else "fp32"):
            print("%s %s: estimate says %s" % (prec, s, est["strategy"])); ok = False
        if est["strategy"]["precision"] != prec:
            print("%s %s: estimate says %s" % (prec, s, est["strategy"])); ok = False
        pd = est["per_device"]
        mem = json.loads(open("%s/%s-%s.jsonl" % (work, prec, s)).read().splitlines()[-1])["memory"]
        if len(mem) != int(n):
            print("%s %s: %d ranks reported" % (prec, s, len(mem))); ok = False; continue
        for m in mem:
            held = m["params_bytes"] + m["grads_bytes"] + m["optim_bytes"]
            grown = m["peak_rss_bytes"] - m["base_rss_bytes"]
            e1 = (held - pd["model_state_bytes"]) / pd["model_state_bytes"]
            e2 = (grown - pd["total_bytes"]) / pd["total_bytes"]
            growth[(prec, s, m["rank"])] = (grown, pd["total_bytes"])
            print("%-10s %-6s %-4d %14d %14d %+6.2f%% %14d %14d %s" % (prec, s, m["rank"],
                  pd["model_state_bytes"], held, 100 * e1, pd["total_bytes"], grown,
                  "%+6.2f%%" % (100 * e2) if rss else "(not compared under ASan)"))
            if prec == "bf16-mixed" and abs(e1) > 0.05:
                print("  -> model state more than 5% off"); ok = False
            if s == "zero316" and rss and e2 > 0.05:
                print("  -> resident growth more than 5% above the prediction"); ok = False
            elif s != "zero316" and prec == "bf16-mixed" and rss and abs(e2) > 0.05:
                print("  -> resident growth more than 5% off"); ok = False
            if abs(m["predicted_bytes"] - pd["total_bytes"]) > 0.01 * pd["total_bytes"]:
                print("  -> trainer predicted %d, estimate %d" % (m["predicted_bytes"],
                      pd["total_bytes"])); ok = False
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
