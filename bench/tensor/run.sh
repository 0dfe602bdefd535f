#!/usr/bin/env bash
# run.sh: tensor-parallel training throughput against one process, side by side in one run, on
# the engine benchmark model (6 layers, 384 dim, 6 heads, T 256, B 8, V 50257, GPT-2 BPE tokens
# of Debian's fortunes): `cohort train` single with 2 threads (the anchor) against tp 2 (2 ranks x
# 1 thread under `cohort run`), with and without --sequence-parallel. Rounds alternate the
# configurations so the machine's noise hits all of them; median tokens/s over the rounds and
# the ratio to single; every run must train (last loss finite and below the first). From the
# last round's trace of tp rank 0: the share of the step spent in tensor-parallel collectives,
# the bytes Megatron's formula says a rank moves (8 b s h (t - 1) / t elements a block a
# micro-batch for the 4 all-reduces, plus the embedding's and the head's), the bandwidth that
# implies, and `cohort bench comm`'s all-reduce bus bandwidth at the same message size beside it.
# usage: bench/tensor/run.sh [BUILD_DIR] (default build); env ROUNDS (default 3), STEPS per run
# (default 8; the first 2 are warm-up), MAX_LOAD (default 1.0: wait before each round until the
# 1-minute load average is at most this, 60 s between looks, at most LOAD_WAIT s in all, default
# 1200; 0 waits for nothing), COHORT_DATA_DIR (where gpt2-bpe/ is; default the build's),
# KEEP (a directory to keep the metrics, traces and logs in).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
. "$root/bench/bench_lib.sh"
rounds=${ROUNDS:-3}
steps=${STEPS:-8}
warm=2
[ "$steps" -gt "$warm" ] || { echo "STEPS must be above $warm (the warm-up steps)" >&2; exit 2; }
bench_fortunes

B=8 T=256 C=384 L=6 V=50257
model=(--layers $L --dim $C --heads 6 --seq $T --vocab $V --micro-batch $B
       --data "$work/fortunes_train_*.bin" --tokenizer gpt2 --steps "$steps" --log-every 1000)
launch=("$cohort" run --nproc-per-node 2 --standalone)
configs=("single" "tp2" "tp2-sp")
command_of() {
    case $1 in
    single) cmd=("$cohort" train --threads 2 "${model[@]}") ;;
    tp2) cmd=("${launch[@]}" "$cohort" train --threads 1 --tp 2 "${model[@]}") ;;
    tp2-sp) cmd=("${launch[@]}" "$cohort" train --threads 1 --tp 2 --sequence-parallel "${model[@]}") ;;
    esac
}
echo "commands (each run adds --metrics FILE, the tp runs --trace FILE):"
for c in "${configs[@]}"; do
    command_of "$c"
    echo "  $(show "${cmd[@]}")"
done
# the bandwidth anchor: one all-reduce of a block's (B, T, C) activation, fp32, 2 ranks, from
# ordinary memory as the model's scratch is
comm=("${launch[@]}" "$cohort" bench comm --op allreduce --min-bytes $((B * T * C * 4))
      --max-bytes $((B * T * C * 4)) --iters 20 --buffers plain --json)
echo "  $(show "${comm[@]}")"
echo "load before: $(uptime)"
for r in $(seq "$rounds"); do
    bench_wait_quiet "$r" || echo "round $r: gave up waiting for load ${MAX_LOAD:-1.0}"
    echo "round $r: start at load $(load1) ($(date -u '+%H:%M:%S UTC'))"
    for c in "${configs[@]}"; do
        extra=(--metrics "$work/$c.r$r.jsonl")
        [ "$c" = single ] || extra+=(--trace "$work/$c.r$r.json")
        command_of "$c"
        if ! "${cmd[@]}" "${extra[@]}" >"$work/$c.r$r.log" 2>&1; then
            echo "round $r: $c failed; its output:" >&2
            tail -20 "$work/$c.r$r.log" >&2
            exit 1
        fi
        echo "round $r: $c: $(tail -1 "$work/$c.r$r.log")"
    done
    "${comm[@]}" >"$work/comm.r$r.json" 2>"$work/comm.r$r.log" ||
        { echo "round $r: bench comm failed" >&2; cat "$work/comm.r$r.log" >&2; exit 1; }
done
echo "load after: $(uptime)"

/usr/bin/python3 - "$work" "$rounds" "$warm" "$B" "$T" "$C" "$L" "${configs[@]}" <<'PY'
import json, math, os, statistics, sys

work, rounds, warm = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
B, T, C, L = map(int, sys.argv[4:8])
configs = sys.argv[8:]
bad = []

def rate(path):
    rows = [json.loads(l) for l in open(path) if l.strip()]
    meas = rows[warm:]
    tokens = sum(r["tokens_per_s"] * (r["elapsed_s"] - p["elapsed_s"])
                 for p, r in zip(rows[warm - 1:], meas))
    secs = rows[-1]["elapsed_s"] - rows[warm - 1]["elapsed_s"]
    return tokens / secs, rows[0]["loss"], rows[-1]["loss"], secs / len(meas)

def tp_share(trace):
    ev = [e for e in json.load(open(trace))["traceEvents"] if e.get("ph") == "X"]
    steps = sorted((e for e in ev if e["name"] == "forward+backward"), key=lambda e: e["ts"])
    opts = sorted((e for e in ev if e["name"] == "optimizer"), key=lambda e: e["ts"])
    t0, t1 = steps[warm]["ts"], opts[-1]["ts"] + opts[-1]["dur"]
    tp = [e for e in ev if e.get("cat") == "tp" and t0 <= e["ts"] <= t1]
    return sum(e["dur"] for e in tp) / (t1 - t0), sum(e["dur"] for e in tp) * 1e-6, len(tp)

res = {}
for c in configs:
    rates = []
    for r in range(1, rounds + 1):
        x, first, last, sps = rate(os.path.join(work, "%s.r%d.jsonl" % (c, r)))
        rates.append(x)
        if not (math.isfinite(last) and last < first):
            bad.append("%s round %d: loss %.4f -> %.4f" % (c, r, first, last))
    res[c] = (statistics.median(rates), rates)
base = res["single"][0]
print("\n%-8s %14s %8s   %s" % ("config", "tokens/s", "x single", "rounds"))
for c in configs:
    med, rates = res[c]
    print("%-8s %14.0f %8.2f   %s" % (c, med, med / base, " ".join("%.0f" % x for x in rates)))
# Megatron's count: 4 all-reduces of (b, s, h) a block a micro-batch, each moving
# 2 (t - 1) / t of it per rank (ring): 8 b s h (t - 1) / t elements; plus the embedding's and the
# head's input gradient: 2 more all-reduces; fp32
t = 2
per_block = 8 * B * T * C * (t - 1) / t * 4
per_step = L * per_block + 2 * 2 * B * T * C * (t - 1) / t * 4
def busbw(path):  # rank 0's row, after the launcher's "[rank0]: " prefix
    for line in open(path):
        if line.startswith("[rank0]: {"):
            return json.loads(line.split(": ", 1)[1])["busbw_gbs"]
    raise ValueError("no rank 0 row in " + path)
bus = statistics.median(busbw(os.path.join(work, "comm.r%d.json" % r)) for r in range(1, rounds + 1))
print("\nbench comm all-reduce of %d bytes, 2 ranks: bus bandwidth %.2f GB/s (median of rounds)"
      % (B * T * C * 4, bus))
print("Megatron's formula: %.1f MB a block a micro-batch per rank, %.1f MB a step" %
      (per_block / 1e6, per_step / 1e6))
for c in configs[1:]:
    share, secs, n = tp_share(os.path.join(work, "%s.r%d.rank0.json" % (c, rounds)))
    steps = int(os.environ.get("STEPS", "8")) - warm
    print("%-8s tp collectives %.1f%% of the step (%d events, %.3f s over %d steps): %.2f GB/s "
          "achieved on the formula's bytes" % (c, 100 * share, n, secs, steps,
                                               per_step * steps / secs / 1e9))
for b in bad:
    print("BAD: " + b)
sys.exit(1 if bad else 0)
PY
