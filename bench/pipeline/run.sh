#!/usr/bin/env bash
# run.sh: pipeline-parallel training throughput against one process, side by side in one run:
# `cohort train` single (2 threads, the anchor) and pp 2 (2 ranks x 1 thread under `cohort run`)
# with 1f1b, gpipe and naive at 8 microbatches, 1f1b and interleaved (v = 2) at 2 (gpipe and
# the m = 2 rows also with the first default split, which balances the stages' summed compute
# with a block in every chunk; the m = 2 rows also with the LM head whole, and interleaved with
# its head shards' logits recomputed), all at the same global
# batch, on the engine benchmark model made deeper (12 layers); and 1f1b against
# interleaved at m = 2 again with a byte vocabulary, whose light LM head lets chunks balance. Rounds alternate the
# configurations so the machine's noise hits all of them; median tokens/s over the rounds, the
# ratio to single and the pipeline's ideal 1 / (1 + (p - 1) / (v m)); every run must train
# (last loss finite and below the first).
# usage: bench/pipeline/run.sh [BUILD_DIR] (default build); env ROUNDS (default 3), STEPS per
# run (default 8; the first 2 are warm-up), B (sequences per microbatch at m = 8, default 1; at
# m = 2 it is 4 B), MAX_LOAD (default 1.0: wait before each round until the 1-minute load
# average is at most this, sleeping 60 s between looks, at most LOAD_WAIT s in all, default
# 1200; 0 waits for nothing), ONLY (run only the configurations whose name matches this
# extended regular expression, e.g. bytes or '^(1f1b|interleaved)-m2$', with the single anchor
# of their vocabulary), COHORT_DATA_DIR (where gpt2-bpe/ is; default the build's, as
# CMake's COHORT_DATA_DIR: ../shared/data beside the checkout), KEEP (a directory to keep the
# metrics, traces and logs in).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
. "$root/bench/bench_lib.sh"
rounds=${ROUNDS:-3}
steps=${STEPS:-8}
b=${B:-1}
warm=2
[ "$steps" -gt "$warm" ] || { echo "STEPS must be above $warm (the warm-up steps)" >&2; exit 2; }

# Data: GPT-2 BPE tokens of the text of Debian's `fortunes` package (the main job's corpus, the
# same files), so the vocabulary is the engine benchmark's 50257 (bench/train draws random
# tokens from it; `cohort train` needs a shard).
bench_fortunes
# the same text as bytes: a 256-token vocabulary makes the LM head light (0.05 blocks against
# 9.8 at 50257), the case where model chunks can be balanced and interleaving pays
"$cohort" prepare --tokenizer byte --out "$work/bytes" "${files[@]}"

model_50257=(--layers 12 --dim 384 --heads 6 --seq 256 --vocab 50257
             --data "$work/fortunes_train_*.bin" --tokenizer gpt2 --steps "$steps" --log-every 1000)
# (its 12 layers diverge at lr 3e-4 without warm-up: 4 warm-up steps)
model_256=(--layers 12 --dim 384 --heads 6 --seq 256 --vocab 256 --data "$work/bytes_train_*.bin"
           --tokenizer byte --steps "$steps" --log-every 1000 --warmup 4)
launch=("$cohort" run --nproc-per-node 2 --standalone)
# name, pp, schedule, virtual stages, microbatches m, sequences per microbatch, vocabulary and
# (-blocks) the split with a block in every chunk that balances the stages' summed compute, the
# default before the split was chosen by simulating the schedule; (-whole) the best split with
# the LM head whole (in one chunk), the default before the head could be split by vocabulary
# into head shards (which the default now does at m = 2); a ninth field "rc" adds --recompute
# full (-rc: interleaved's default split at m = 2 with its head shards' logits recomputed in
# backward instead of kept, to time the two from the chunks' backward in the traces)
configs=(
    "single 1 - 1 8 $b 50257"
    "1f1b 2 1f1b 1 8 $b 50257"
    "gpipe 2 gpipe 1 8 $b 50257"
    "naive 2 naive 1 8 $b 50257"
    "1f1b-m2 2 1f1b 1 2 $((4 * b)) 50257"
    "interleaved-m2 2 interleaved 2 2 $((4 * b)) 50257"
    "gpipe-blocks 2 gpipe 1 8 $b 50257 0-10,11"
    "1f1b-m2-blocks 2 1f1b 1 2 $((4 * b)) 50257 0-10,11"
    "interleaved-m2-blocks 2 interleaved 2 2 $((4 * b)) 50257 0-3,4,5-10,11"
    "1f1b-m2-whole 2 1f1b 1 2 $((4 * b)) 50257 0-11,head"
    "interleaved-m2-whole 2 interleaved 2 2 $((4 * b)) 50257 0-1,2-4,5-11,head"
    "interleaved-m2-rc 2 interleaved 2 2 $((4 * b)) 50257 0-5,6-11,head:0-1/3,head:2/3 rc"
    "single-bytes 1 - 1 8 $b 256"
    "1f1b-m2-bytes 2 1f1b 1 2 $((4 * b)) 256"
    "interleaved-m2-bytes 2 interleaved 2 2 $((4 * b)) 256"
)
# ONLY=PATTERN keeps the configurations whose name matches PATTERN (an extended regular
# expression: a word, or e.g. '^(1f1b|interleaved)-m2$'), each with the single anchor of its
# vocabulary
if [ -n "${ONLY:-}" ]; then
    kept=() vocabs=" "
    for c in "${configs[@]}"; do
        read -r name _ _ _ _ _ vocab _ <<<"$c"
        if grep -qE -- "$ONLY" <<<"$name"; then
            kept+=("$c")
            vocabs+="$vocab "
        fi
    done
    [ ${#kept[@]} -gt 0 ] || { echo "ONLY='$ONLY' matches no configuration" >&2; exit 2; }
    anchors=()
    for c in "${configs[@]}"; do # the single runs first, as in the full table
        read -r name pp _ _ _ _ vocab _ <<<"$c"
        if [ "$pp" = 1 ] && [[ $vocabs == *" $vocab "* ]] && ! grep -qE -- "$ONLY" <<<"$name"; then
            anchors+=("$c")
        fi
    done
    configs=("${anchors[@]}" "${kept[@]}")
fi
# the command of one configuration, into the array cmd (without --metrics and --trace); an
# eighth field, when there is one, is its --stage-layers, a ninth "rc" adds --recompute full
command_of() {
    local name=$1 pp=$2 sched=$3 v=$4 m=$5 mb=$6 vocab=$7 split=${8:-} rc=${9:-}
    local -n model="model_$vocab"
    if [ "$pp" = 1 ]; then
        cmd=("$cohort" train --threads 2 --micro-batch "$mb" --grad-accum "$m" "${model[@]}")
    else
        cmd=("${launch[@]}" "$cohort" train --threads 1 --pp "$pp" --schedule "$sched")
        [ "$v" = 1 ] || cmd+=(--virtual-stages "$v")
        [ -z "$split" ] || cmd+=(--stage-layers "$split")
        [ "$rc" != rc ] || cmd+=(--recompute full)
        cmd+=(--grad-accum "$m" --micro-batch "$mb" "${model[@]}")
    fi
}
echo "commands (each run adds --metrics FILE, and the pp runs --trace FILE):"
for c in "${configs[@]}"; do
    # shellcheck disable=SC2086
    command_of $c
    echo "  $(show "${cmd[@]}")"
done
echo "load before: $(uptime)"
start_loads=() gave_up=() sampler=
trap '[ -z "$sampler" ] || kill "$sampler" 2>/dev/null || true; [ -n "${KEEP:-}" ] || rm -rf "$work"' EXIT
for r in $(seq "$rounds"); do
    bench_wait_quiet "$r" || gave_up+=("$r")
    echo "round $r: start at load $(load1) ($(date -u '+%H:%M:%S UTC'))"
    start_loads+=("$(load1)")
    echo "[round $r]" >>"$work/load.log"
    if [ -z "$sampler" ]; then # the load while the rounds run, every 10 s, not while waiting
        (while sleep 10; do load1; done) >>"$work/load.log" &
        sampler=$!
    fi
    for c in "${configs[@]}"; do
        read -r name pp _ <<<"$c"
        extra=(--metrics "$work/$name.r$r.jsonl")
        [ "$pp" = 1 ] || extra+=(--trace "$work/$name.r$r.json")
        # shellcheck disable=SC2086
        command_of $c
        if ! "${cmd[@]}" "${extra[@]}" >"$work/$name.r$r.log" 2>&1; then
            echo "round $r: $name failed; its output:" >&2
            tail -20 "$work/$name.r$r.log" >&2
            exit 1
        fi
        echo "round $r: $name: $(tail -1 "$work/$name.r$r.log")"
    done
done
kill "$sampler" 2>/dev/null || true
sampler=
echo "load after: $(uptime)"
echo "what each pipeline stage holds (round 1's start-up lines):"
for c in "${configs[@]}"; do
    read -r name pp _ <<<"$c"
    [ "$pp" = 1 ] || sed -nE "s/.*(stage [0-9]+: blocks [^;]*);.*/  $name: \1/p" "$work/$name.r1.log" | sort -u
done

# The table: per run, tokens/s over steps warm+1 .. steps from the metrics (the tokens of each
# step are its tokens_per_s times its duration, elapsed_s minus the previous step's), median
# over the rounds; the trace's busy share of each pp rank over the same steps (forward and
# backward events over the wall time from the first measured step's start to the last one's
# optimizer end), from the last round.
status=0
(/usr/bin/python3 - "$work" "$rounds" "$warm" "$((8 * b * 256))" "${configs[@]}" <<'PY'
import json, math, os, statistics, sys

work, rounds, warm, want_tokens = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
configs = [c.split() for c in sys.argv[5:]]
bad = []

def run_rate(path):
    rows = [json.loads(l) for l in open(path) if l.strip()]
    meas = rows[warm:]
    tokens = sum(r["tokens_per_s"] * (r["elapsed_s"] - p["elapsed_s"])
                 for p, r in zip(rows[warm - 1:], meas))
    secs = rows[-1]["elapsed_s"] - rows[warm - 1]["elapsed_s"]
    return tokens / secs, tokens / len(meas), rows[0]["loss"], rows[-1]["loss"], secs / len(meas)

def busy(trace):
    ev = [e for e in json.load(open(trace))["traceEvents"] if e.get("ph") == "X"]
    steps = sorted((e for e in ev if e["name"] == "forward+backward"), key=lambda e: e["ts"])
    opts = sorted((e for e in ev if e["name"] == "optimizer"), key=lambda e: e["ts"])
    if len(steps) <= warm or len(opts) != len(steps):
        return None
    t0, t1 = steps[warm]["ts"], opts[-1]["ts"] + opts[-1]["dur"]
    work_us = sum(e["dur"] for e in ev
                  if e.get("cat") == "compute" and t0 <= e["ts"] <= t1)
    idle_us = sum(e["dur"] for e in ev if e.get("cat") == "idle" and t0 <= e["ts"] <= t1)
    return work_us / (t1 - t0), idle_us / work_us

res = {}
for name, pp, sched, v, m, mb, vocab, *_ in configs:
    rates, losses = [], []
    for r in range(1, rounds + 1):
        rate, tok, first, last, sps = run_rate(os.path.join(work, "%s.r%d.jsonl" % (name, r)))
        rates.append(rate)
        losses.append((first, last))
        if not (math.isfinite(last) and last < first):
            bad.append("%s round %d: loss %.4f -> %.4f" % (name, r, first, last))
        if abs(tok - want_tokens) > 0.01 * want_tokens:
            bad.append("%s round %d: %.0f tokens a step, not %d" % (name, r, tok, want_tokens))
    shares, bubbles = [], []
    if pp != "1":
        for k in range(int(pp)):
            t = os.path.join(work, "%s.r%d.rank%d.json" % (name, rounds, k))
            s = busy(t) if os.path.exists(t) else None
            shares.append("%.2f" % s[0] if s is not None else "?")
            bubbles.append("%.3f" % s[1] if s is not None else "?")
    res[name] = (statistics.median(rates), rates, losses[-1], shares, bubbles)

single = {c[6]: res[c[0]][0] for c in configs if c[1] == "1"}
print()
print("| configuration | ranks x threads | m x micro-batch | tokens/s (median) | vs single |"
      " ideal | vs ideal | busy share per stage | bubble per stage (formula) |"
      " loss (step 1 -> last) |")
print("|:---|:---|:---|---:|---:|---:|---:|:---|:---|:---|")
for name, pp, sched, v, m, mb, vocab, *split in configs:
    med, rates, (first, last), shares, bubbles = res[name]
    p, vv, mm = int(pp), int(v), int(m)
    if p == 1:
        what, rt, ideal = "single", "1 x 2", None
    else:
        what = "pp %d, %s%s" % (p, sched, ", v = %d" % vv if vv > 1 else "")
        what += ", split %s" % split[0] if split else ""
        what += ", --recompute full" if split[1:] == ["rc"] else ""
        rt = "%d x 1" % p
        ideal = 1 / p if sched == "naive" else 1 / (1 + (p - 1) / (vv * mm))
    what += "" if vocab == "50257" else " (vocab 256)"
    base = single[vocab]
    formula = "" if p == 1 else " (%.3f)" % ((p - 1) if sched == "naive" else (p - 1) / (vv * mm))
    print("| %s | %s | %d x %s | %.1f | %.2fx | %s | %s | %s | %s%s | %.4f -> %.4f |" % (
        what, rt, mm, mb, med, med / base, "%.2f" % ideal if ideal else "",
        "%.2f" % (med / base / ideal) if ideal else "", " / ".join(shares),
        " / ".join(bubbles), formula, first, last))
print()
print("mean forward / backward ms of each chunk (round %d's traces, measured steps):" % rounds)
def chunk_times(trace, v):
    ev = [e for e in json.load(open(trace))["traceEvents"] if e.get("ph") == "X"]
    steps = sorted((e for e in ev if e["name"] == "forward+backward"), key=lambda e: e["ts"])
    if len(steps) <= warm:
        return "?"
    t0 = steps[warm]["ts"]
    out = []
    for c in range(v):
        fb = []
        for kind in "FB":
            d = [e["dur"] for e in ev if e.get("cat") == "compute" and e["ts"] >= t0 and
                 e["name"].startswith(kind) and
                 (e["name"].endswith(".%d" % c) if v > 1 else True)]
            fb.append("%.0f" % (statistics.mean(d) / 1000) if d else "?")
        out.append("/".join(fb))
    return ", ".join(out)
for name, pp, sched, v, *_ in configs:
    if pp == "1":
        continue
    parts = []
    for k in range(int(pp)):
        t = os.path.join(work, "%s.r%d.rank%d.json" % (name, rounds, k))
        parts.append("stage %d %s" % (k, chunk_times(t, int(v)) if os.path.exists(t) else "?"))
    print("  %-22s %s" % (name, "; ".join(parts)))
print()
print("per-round tokens/s:")
for name, *_ in configs:
    print("  %-22s %s" % (name, " ".join("%.1f" % x for x in res[name][1])))
if bad:
    print("\nNOT TRAINING SANELY:\n  " + "\n  ".join(bad))
    sys.exit(1)
print("\nevery run: loss at the last step finite and below the first; %d tokens a step" % want_tokens)
PY
) || status=$?
echo "global batch $((8 * b)) sequences x 256 tokens; $steps steps a run, the first $warm warm-up;" \
     "ideal: 1 / (1 + (p - 1) / (v m)), naive 1 / p; busy share: forward + backward time over" \
     "wall time on each stage; bubble: time waiting for a neighbour over forward + backward" \
     "time on each stage, against (p - 1) / (v m), naive p - 1 (traces of round $rounds);" \
     "loss: round $rounds"
echo "load average (1 min) at each round's start: ${start_loads[*]}"
[ ${#gave_up[@]} = 0 ] ||
    echo "NOT QUIET: round(s) ${gave_up[*]} started above load ${MAX_LOAD:-1.0} after waiting $bench_waited s"
echo "load average (1 min) during the rounds (and the gate's waits between them), every 10 s:" \
     "$(tr '\n' ' ' <"$work/load.log")"
exit "$status"
