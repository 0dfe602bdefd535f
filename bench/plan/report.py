# report.py: bench/plan's figures from the runs run.sh kept: the table of predicted against
# measured steps, the top pick against the measured best, and which configurations meet in the
# head-to-head rounds and how they came out there.
# usage: report.py contenders WORK WARM ROUNDS SHAPE   (prints the configuration lines to race)
#        report.py table WORK WARM ROUNDS HEAD_TO_HEAD (prints every table and judgement)
# A run's step is the median of its steps after WARM warm-up steps (their elapsed_s differences).
import json
import os
import statistics
import sys

SHAPES = {"small": "4 x 256, seq 128", "large": "8 x 384, seq 256"}


def run_step(work, shape, name, tag, warm):
    m = [json.loads(l) for l in open(os.path.join(work, "m.%s.%s.%s.jsonl" % (shape, name, tag)))]
    t = [b["elapsed_s"] - a["elapsed_s"] for a, b in zip(m[warm - 1:], m[warm:])]
    return statistics.median(t)


def round_steps(work, shape, name, warm, rounds):
    return [run_step(work, shape, name, "r%d" % r, warm) for r in range(1, rounds + 1)]


def contenders(work, warm, rounds, shape):
    """The pick and the configurations that could be the best: the least by the best round, and
    the three least by the median round (the best round alone favours whoever met the machine's
    one quiet moment; the median, whoever the slow moments spared)."""
    names = open(os.path.join(work, "names.%s" % shape)).read().split()
    pick = open(os.path.join(work, "pick.%s" % shape)).read().strip()
    steps = {n: round_steps(work, shape, n, warm, rounds) for n in names}
    by_best = sorted(names, key=lambda n: min(steps[n]))
    by_median = sorted(names, key=lambda n: statistics.median(steps[n]))
    chosen = []
    for n in [pick, by_best[0]] + by_median[:3]:
        if n not in chosen:
            chosen.append(n)
    lines = {l.split()[0]: l.rstrip("\n") for l in open(os.path.join(work, "configs.%s" % shape))}
    for n in chosen:
        print(lines[n])


def head_to_head(work, warm, shape, h2h, pick):
    """Each head-to-head round runs every contender once, back to back, in a rotated order; the
    pick's step over each contender's in the same round, the median over the rounds: a slow
    spell of the machine falls on both runs of a pair alike."""
    path = os.path.join(work, "h2h.%s" % shape)
    if h2h < 1 or not os.path.exists(path):
        return
    names = [l.split()[0] for l in open(path) if l.strip()]
    if len(names) < 2:
        return
    steps = {n: [run_step(work, shape, n, "h%d" % h, warm) for h in range(1, h2h + 1)] for n in names}
    ratio = {n: statistics.median([p / q for p, q in zip(steps[pick], steps[n])]) for n in names}
    print("\nhead to head, shape %s: %d rounds, each contender once a round, in turn" % (shape, h2h))
    print("| configuration | measured step (ms, median of rounds) | per round | the pick / it (median of the rounds' ratios) |")
    print("|:---|---:|:---|---:|")
    for n in names:
        print("| %s%s | %.1f | %s | %.3f |" % (n, " (pick)" if n == pick else "", statistics.median(steps[n]) * 1e3,
              " / ".join("%.1f" % (x * 1e3) for x in steps[n]), ratio[n]))
    best = max(names, key=lambda n: ratio[n])
    over = ratio[best] - 1
    if best == pick:
        print("head to head: the pick is the fastest of the contenders")
    else:
        print("head to head: the fastest is %s; the pick is %.1f%% above it%s" % (
            best, 100 * over, "" if over <= 0.05 else " (outside 5%)"))


def table(work, warm, rounds, h2h):
    for shape in ("small", "large"):
        rows = []
        allm = {}
        names = open(os.path.join(work, "names.%s" % shape)).read().split()
        pick = open(os.path.join(work, "pick.%s" % shape)).read().strip()
        for n in names:
            preds = [json.load(open(os.path.join(work, "pred.%s.%s.r%d.json" % (shape, n, r)))) for r in range(1, rounds + 1)]
            pred = min(preds, key=lambda p: p["step_s"])
            rates = json.load(open(os.path.join(work, "rates.%s.%s.json" % (shape, n))))["step_s"]
            meds = round_steps(work, shape, n, warm, rounds)
            rows.append((n, pred["step_s"], min(meds), rates))
            allm[n] = (meds, [p["step_s"] for p in preds])
        best = min(rows, key=lambda x: x[2])
        top = json.load(open(os.path.join(work, "top.%s.json" % shape)))["configurations"][0]
        print("\nshape %s (%s)" % (shape, SHAPES[shape]))
        print("| configuration | predicted step (ms, best of %d rounds) | per round | measured step (ms, best of %d rounds) | per round | predicted / measured | from rates alone (ms) | rates / measured |" % (rounds, rounds))
        print("|:---|---:|:---|---:|:---|---:|---:|---:|")
        for n, p, m, ra in rows:
            err = p / m
            print("| %s | %.1f | %s | %.1f | %s | %.2f%s | %.1f | %.2f |" % (n, p * 1e3, " / ".join("%.1f" % (x * 1e3) for x in allm[n][1]),
                  m * 1e3, " / ".join("%.1f" % (x * 1e3) for x in allm[n][0]),
                  err, "" if abs(err - 1) <= 0.15 else " (outside 15%)", ra * 1e3, ra / m))
        tmeas = [m for n, p, m, _ in rows if n == pick][0]
        print("planner's top pick: %s (%s); measured best: %s at %.1f ms; the pick measured %.1f ms, %.1f%% above the best%s" % (
            top["command"].split(" --layers")[0], pick, best[0], best[2] * 1e3, tmeas * 1e3, 100 * (tmeas / best[2] - 1),
            "" if tmeas <= 1.05 * best[2] else " (outside 5%)"))
        head_to_head(work, warm, shape, h2h, pick)


if __name__ == "__main__":
    mode, work, warm, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    if mode == "contenders":
        contenders(work, warm, rounds, sys.argv[5])
    elif mode == "table":
        table(work, warm, rounds, int(sys.argv[5]))
    else:
        sys.exit("report.py: unknown mode '%s' (contenders or table)" % mode)
