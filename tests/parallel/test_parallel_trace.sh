#!/usr/bin/env bash
# test_parallel_trace.sh: `--trace FILE.json` under 2 ddp ranks writes one valid Chrome trace per
# rank with forward and backward per layer, every bucket's all-reduce and the optimizer, and
# in every step some bucket's all-reduce starts before backward has finished (overlap). ZeRO-3
# traces its per-layer parameter all-gathers. With --accum 2 ddp all-reduces once per step
# (no_sync on the first micro-step) while zero2 reduce-scatters on both. A trace path that cannot be written is an error.
. "$(dirname "${BASH_SOURCE[0]}")/par_lib.sh"

par_prepare
par_model 256 4 2 64 32
model+=(--batch 4 --steps 3 --bucket-mb 0.1)
for s in ddp zero3; do
    "$cohort" run --nproc-per-node 2 "$cohort" train "${model[@]}" --strategy $s \
        --trace "$work/$s.json" >"$work/$s.out" 2>&1 || fail "$s: $(tail -3 "$work/$s.out")"
done
for s in ddp zero2; do
    "$cohort" run --nproc-per-node 2 "$cohort" train "${model[@]}" --strategy $s --accum 2 \
        --trace "$work/acc_$s.json" >"$work/acc_$s.out" 2>&1 || fail "$s accum: $(tail -3 "$work/acc_$s.out")"
done

"$py" - "$work" <<'PYEOF' || fail "trace contents"
import json, sys
work, ok = sys.argv[1], True
def check(cond, msg):
    global ok
    if not cond:
        print(msg); ok = False
for rank in (0, 1):
    ev = json.load(open("%s/ddp.rank%d.json" % (work, rank)))["traceEvents"]
    names = [e["name"] for e in ev if e["ph"] == "X"]
    check(all(e["pid"] == rank for e in ev), "rank %d: pid is not the rank" % rank)
    for l in range(4):
        check(names.count("forward layer %d" % l) == 3, "rank %d: forward layer %d x3" % (rank, l))
        check(names.count("backward layer %d" % l) == 3, "rank %d: backward layer %d x3" % (rank, l))
    check(names.count("optimizer") == 3, "rank %d: optimizer x3" % rank)
    ar = [e for e in ev if e["name"].startswith("all-reduce bucket")]
    nb = len({e["name"] for e in ar})
    check(nb >= 3, "rank %d: only %d buckets" % (rank, nb))
    check(len(ar) == 3 * nb, "rank %d: %d bucket all-reduces, want %d" % (rank, len(ar), 3 * nb))
    steps = sorted((e for e in ev if e["name"] == "forward+backward"), key=lambda e: e["ts"])
    for i, st in enumerate(steps):
        t0, t1 = st["ts"], st["ts"] + st["dur"]
        bw = [e for e in ev if e["name"].startswith("backward layer") and t0 <= e["ts"] <= t1]
        bw_end = max(e["ts"] + e["dur"] for e in bw)
        early = [e for e in ar if t0 <= e["ts"] < bw_end]
        check(early, "rank %d step %d: no all-reduce starts before backward ends" % (rank, i))
        print("rank %d step %d: %d of %d bucket all-reduces start while backward runs"
              % (rank, i, len(early), nb))
ev = json.load(open("%s/zero3.rank0.json" % work))["traceEvents"]
ag = [e for e in ev if e["name"].startswith("all-gather bucket")]
rs = [e for e in ev if e["name"].startswith("reduce-scatter bucket")]
check(len(ag) >= 3 * 10, "zero3: %d parameter all-gathers in 3 steps, want one per layer use" % len(ag))
check(len(rs) == 3 * 6, "zero3: %d reduce-scatters, want 6 per step" % len(rs))
# prefetch: a gather issued before a layer's compute and collected after it spans that compute
comp = [e for e in ev if e["tid"] == 0 and e["ph"] == "X"
        and e["name"] not in ("forward+backward", "optimizer")]
spans = [g for g in ag if any(g["ts"] <= c["ts"] and c["ts"] + c["dur"] <= g["ts"] + g["dur"]
                              for c in comp)]
print("zero3: %d of %d parameter all-gathers overlap a layer's compute (prefetch)"
      % (len(spans), len(ag)))
# per step 11 gathers (-1, 0..3, 4, -1, 3..0): the first is synchronous, and the embeddings'
# second gather, prefetched at the final LayerNorm, ends inside that LayerNorm's event (which
# lasts through the LM head and its backward); the other 9 each span a layer's compute
check(len(spans) >= 3 * 9, "zero3: only %d prefetched gathers in 3 steps" % len(spans))
for s, per_step in (("ddp", 1), ("zero2", 2)):
    ev = json.load(open("%s/acc_%s.rank0.json" % (work, s)))["traceEvents"]
    comm = [e for e in ev if e.get("cat") == "comm" and " bucket " in e["name"]
            and not e["name"].startswith("all-gather")]
    nb = len({e["name"] for e in comm})
    check(len(comm) == 3 * nb * per_step, "%s accum 2: %d gradient collectives for %d buckets "
          "in 3 steps, want %d" % (s, len(comm), nb, 3 * nb * per_step))
sys.exit(0 if ok else 1)
PYEOF

out=$("$cohort" train "${model[@]}" --trace "$work/no/such/dir/t.json" 2>&1)
rc=$?
[ $rc -eq 1 ] && echo "$out" | grep -q "cannot write trace file '$work/no/such/dir/t.json'" ||
    fail "unwritable trace: rc $rc: $out"
par_done "traces valid and overlapping"
