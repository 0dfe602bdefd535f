#!/usr/bin/env bash
# test_pipeline_memory.sh: what each pipeline stage holds, measured, against `cohort estimate
# --engine cohort --pp`: each stage's model state (resident pages of its parameter and gradient
# ranges, its AdamW moments) within 5%, its peak resident growth within 10%, and GPipe's
# in-flight activations against 1F1B's: stage 0 keeps m = 8 micro-batches under GPipe and p = 2
# under 1F1B, and the measured difference in its peak is the predicted one within 15%; and the
# same for stages whose chunk holds the embeddings or the head alone, or head shards (with
# their kept logits, and with --recompute full without).
. "$(dirname "${BASH_SOURCE[0]}")/par_lib.sh"
par_memory_setup
par_prepare
shape=(--vocab 256 --layers 8 --heads 4 --dim 128 --seq 64)
run=("${shape[@]}" --threads 1 --data "$work/c_train_*.bin" --micro-batch 2 --grad-accum 8 --steps 3)
for s in gpipe 1f1b; do
    "$cohort" estimate --engine cohort "${shape[@]}" --threads 1 --micro-batch 2 --grad-accum 8 \
        --pp 2 --schedule $s --json >"$work/$s.est" || fail "$s: estimate"
    "$cohort" run --nproc-per-node 2 "$cohort" train "${run[@]}" --pp 2 --schedule $s \
        --metrics "$work/$s.jsonl" >"$work/$s.out" 2>&1 || fail "$s: $(tail -3 "$work/$s.out")"
done
# the text table of a stage: its rows add up to its total (a row once underflowed to 16 EiB)
"$cohort" estimate --engine cohort "${shape[@]}" --threads 1 --micro-batch 2 --grad-accum 8 \
    --pp 2 >"$work/est.txt" 2>&1 || fail "estimate text: $(cat "$work/est.txt")"
"$py" - "$work/est.txt" <<'PY' && echo "ok   the estimate's text rows of a stage add up to its total" ||
import re, sys
unit = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40, "PiB": 2**50, "EiB": 2**60}
text = open(sys.argv[1]).read().split("holds at its peak:")[1].split("\n\n")[0]
rows = {m.group(1): float(m.group(2)) * unit[m.group(3)]
        for m in re.finditer(r"^  (\S[^\d]*?)\s+([\d.]+) (\S+)$", text, re.M)}
total = rows.pop("total")
assert all(v <= total for v in rows.values()), rows
assert abs(sum(rows.values()) - total) <= 0.01 * total, (sum(rows.values()), total, rows)
PY
    fail "the estimate's text rows: $(cat "$work/est.txt")"
"$py" - "$work" "$rss" <<'PY' || fail "memory figures"
import json, sys
work, rss, ok, grown = sys.argv[1], sys.argv[2] == "1", True, {}
print("%-6s %-5s %12s %12s %7s %12s %12s %7s" % ("", "stage", "state pred", "state meas", "err",
      "growth pred", "growth meas", "err"))
for s in ("gpipe", "1f1b"):
    est = json.load(open("%s/%s.est" % (work, s)))["stages"]
    mem = json.loads(open("%s/%s.jsonl" % (work, s)).read().splitlines()[-1])["memory"]
    for m in mem:
        e = est[m["rank"]]
        held = m["params_bytes"] + m["grads_bytes"] + m["optim_bytes"]
        grow = m["peak_rss_bytes"] - m["base_rss_bytes"]
        e1 = (held - e["model_state_bytes"]) / e["model_state_bytes"]
        e2 = (grow - e["total_bytes"]) / e["total_bytes"]
        grown[(s, m["rank"])] = grow
        print("%-6s %-5d %12d %12d %+6.2f%% %12d %12d %+6.2f%%" % (s, m["rank"],
              e["model_state_bytes"], held, 100 * e1, e["total_bytes"], grow, 100 * e2))
        if abs(e1) > 0.05:
            print("  -> model state more than 5% off"); ok = False
        if rss and abs(e2) > 0.10:
            print("  -> resident growth more than 10% off"); ok = False
        if m["predicted_bytes"] != e["total_bytes"]:
            print("  -> the trainer predicted %d, the estimate %d" % (m["predicted_bytes"],
                  e["total_bytes"])); ok = False
g, f = (json.load(open("%s/%s.est" % (work, s)))["stages"][0] for s in ("gpipe", "1f1b"))
pred = g["total_bytes"] - f["total_bytes"]
meas = grown[("gpipe", 0)] - grown[("1f1b", 0)]
print("stage 0, gpipe (%d slots) - 1f1b (%d slots): predicted %d, measured %d (%+.2f%%)" % (
      g["activation_slots"], f["activation_slots"], pred, meas, 100 * (meas - pred) / pred))
if g["activation_slots"] != 8 or f["activation_slots"] != 2 or (rss and abs(meas - pred) > 0.15 * pred):
    ok = False
sys.exit(0 if ok else 1)
PY

# stages whose chunk holds no block: each stage's model state against the trainer's layout
# (--dry-run: its parameters, 16 bytes each: fp32 parameters, gradients, AdamW m and v) within
# 5%, and its resident growth against its prediction (coh_par_memory_estimate_stage, what
# `cohort estimate --engine cohort` prints) within 10%
il=(--schedule interleaved --virtual-stages 2)
# (head shards with GPT-2's vocabulary, so that the logits the first shard keeps per slot for its
# backward, 12.9 MB a slot, are a fifth of its stage's growth; with --recompute full it keeps none)
v50k="--vocab 50257 --tokenizer byte"
layouts=("il-head ${il[*]} --stage-layers 0,1-4,5-7,head"
         "il-emb ${il[*]} --stage-layers embeddings,0-1,2-5,6-7"
         "1f1b-head --schedule 1f1b --stage-layers 0-7,head"
         "il-shards ${il[*]} --stage-layers 0-3,4-7,head:0/2,head:1/2 $v50k"
         "il-shards-rc ${il[*]} --stage-layers 0-3,4-7,head:0/2,head:1/2 $v50k --recompute full")
for l in "${layouts[@]}"; do
    read -r name opts <<<"$l"
    # shellcheck disable=SC2086
    "$cohort" run --nproc-per-node 2 "$cohort" train "${run[@]}" --pp 2 $opts --dry-run >"$work/$name.dry" 2>&1 ||
        fail "$name: dry run: $(tail -3 "$work/$name.dry")"
    # shellcheck disable=SC2086
    "$cohort" run --nproc-per-node 2 "$cohort" train "${run[@]}" --pp 2 $opts \
        --metrics "$work/$name.jsonl" >"$work/$name.out" 2>&1 || fail "$name: $(tail -3 "$work/$name.out")"
done
"$py" - "$work" "$rss" il-head il-emb 1f1b-head il-shards il-shards-rc <<'PY' || fail "memory figures of stages holding no block"
import json, re, sys
work, rss, ok = sys.argv[1], sys.argv[2] == "1", True
for name in sys.argv[3:]:
    dry = open("%s/%s.dry" % (work, name)).read()
    params = {int(s): int(p) for s, p in re.findall(r"stage (\d+)   .*, (\d+) parameters", dry)}
    mem = json.loads(open("%s/%s.jsonl" % (work, name)).read().splitlines()[-1])["memory"]
    for m in mem:
        held = m["params_bytes"] + m["grads_bytes"] + m["optim_bytes"]
        want = 16 * params[m["rank"]]
        grow = m["peak_rss_bytes"] - m["base_rss_bytes"]
        e1, e2 = (held - want) / want, (grow - m["predicted_bytes"]) / m["predicted_bytes"]
        print("%-9s stage %d: state %d predicted, %d held (%+.2f%%); growth %d predicted, %d "
              "measured (%+.2f%%)" % (name, m["rank"], want, held, 100 * e1,
                                       m["predicted_bytes"], grow, 100 * e2))
        if abs(e1) > 0.05:
            print("  -> model state more than 5% off"); ok = False
        if rss and abs(e2) > 0.10:
            print("  -> resident growth more than 10% off"); ok = False
    if len(params) != 2 or len(mem) != 2:
        print("%s: stages missing: %s" % (name, dry)); ok = False
sys.exit(0 if ok else 1)
PY
par_done "pipeline memory matches the estimate"
