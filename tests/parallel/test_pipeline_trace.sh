#!/usr/bin/env bash
# test_pipeline_trace.sh: a pipeline's timeline as a user sees it. --trace writes one Chrome trace
# per stage whose compute events follow the schedule's action list (1F1B at pp 2, m = 4: stage 0
# F0 F1 B0 F2 B1 F3 B2 B3, stage 1 one forward, one backward), with the waits for neighbours as
# "idle" events: the bubble, visible; the metrics carry each stage's compute and idle time of
# every step.
. "$(dirname "${BASH_SOURCE[0]}")/par_lib.sh"
par_prepare
par_model 256 4 2 32 32
"$cohort" run --nproc-per-node 2 "$cohort" train "${model[@]}" --micro-batch 2 --grad-accum 4 \
    --steps 2 --pp 2 --schedule 1f1b --trace "$work/t.json" --metrics "$work/m.jsonl" \
    >"$work/out" 2>&1 || fail "traced run: $(tail -3 "$work/out")"
"$py" - "$work" <<'PY' || fail "trace or metrics"
import json, sys
work, ok = sys.argv[1], True
want = {0: "F0 F1 B0 F2 B1 F3 B2 B3", 1: "F0 B0 F1 B1 F2 B2 F3 B3"}
for rank in (0, 1):
    d = json.load(open("%s/t.rank%d.json" % (work, rank)))
    ev = d if isinstance(d, list) else d["traceEvents"]
    names = [e["name"] for e in ev if e.get("cat") == "compute"]
    steps = [" ".join(names[i:i + 8]) for i in (0, 8)]
    idle = [e for e in ev if e.get("cat") == "idle"]
    print("stage %d: %s | %s; %d idle events" % (rank, steps[0], steps[1], len(idle)))
    if steps != [want[rank]] * 2 or len(names) != 16 or not idle:
        print("  -> want %s twice and idle events" % want[rank]); ok = False
for line in open("%s/m.jsonl" % work):
    for m in json.loads(line)["memory"]:
        if not (m["busy_us"] > 0 and m["idle_us"] > 0):
            print("step metrics without a stage's busy and idle time:", m); ok = False
sys.exit(0 if ok else 1)
PY
par_done "the pipeline's timeline is the schedule's"
