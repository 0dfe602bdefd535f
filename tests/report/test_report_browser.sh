#!/usr/bin/env bash
# test_report_browser.sh: `cohort report` pages rendered by a real browser (headless Chromium):
# a 2-rank data-parallel run with its traces and estimate (as the main job's), a comparison of
# it with a 2-stage 1F1B pipeline, and a run whose metrics have a bad line and a truncated last
# line. The DOM Chromium builds is checked (series per chart, axis labels, the table behind
# every chart, timeline lanes and pipeline blocks, the summary rows, the bad lines named, no
# script, nothing fetched) and the console must stay silent; screenshots are kept in
# $COHORT_BUILD_DIR/report/ for a person to look at. Skipped (77) where Chromium cannot run.
set -u
cohort=${COHORT:?}
src=${COHORT_SOURCE_DIR:?}
py=${COHORT_PYTHON:-/usr/bin/python3}
shots=${COHORT_BUILD_DIR:?}/report
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

browser=$(command -v chromium || command -v chromium-browser || true)
if [ -z "$browser" ]; then
    echo "SKIP report_browser: no chromium (scripts/setup.sh installs Debian's)"
    exit 77
fi
# chrome ARGS...: headless, its own profile, no sandbox (tests may run as root), console to stderr
chrome() {
    timeout 120 "$browser" --headless --no-sandbox --disable-gpu --disable-dev-shm-usage --no-first-run \
        --user-data-dir="$work/profile" --enable-logging=stderr --v=0 --hide-scrollbars "$@"
}
if ! chrome --dump-dom "data:text/html,<p>ok</p>" >"$work/probe" 2>"$work/probe.err" ||
        ! grep -q "<p>ok</p>" "$work/probe"; then
    echo "SKIP report_browser: chromium cannot run here: $(tail -3 "$work/probe.err")"
    exit 77
fi

# render NAME PAGE [HEIGHT]: the DOM into $work/NAME.dom, console lines into $work/NAME.console,
# a screenshot into $shots/NAME.png
render() {
    local name=$1 page=$2 height=${3:-5200}
    chrome --dump-dom "file://$page" >"$work/$name.dom" 2>"$work/$name.err" ||
        fail "$name: chromium --dump-dom failed: $(tail -3 "$work/$name.err")"
    grep "CONSOLE" "$work/$name.err" >"$work/$name.console"
    chrome --window-size=1200,"$height" --screenshot="$shots/$name.png" "file://$page" \
        >/dev/null 2>"$work/$name.shot.err" || fail "$name: screenshot failed"
    # a PNG of the asked size: signature, IHDR width and height
    "$py" - "$shots/$name.png" "$height" <<'PY' || fail "$name: bad screenshot"
import struct, sys
d = open(sys.argv[1], "rb").read()
assert d[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
w, h = struct.unpack(">II", d[16:24])
assert (w, h) == (1200, int(sys.argv[2])), (w, h)
assert len(d) > 20000, f"{len(d)} bytes: an empty page?"
PY
}
mkdir -p "$shots"

# The console check itself: a page that logs an error is caught.
printf '<!DOCTYPE html><script>console.error("report-test-canary")</script>' >"$work/canary.html"
chrome --dump-dom "file://$work/canary.html" >/dev/null 2>"$work/canary.err"
grep "CONSOLE" "$work/canary.err" | grep -q "report-test-canary" ||
    fail "a console error is not seen in chromium's log: the console check below checks nothing"

# Runs: a tiny model on the README's text, byte tokens, one thread per rank.
cat "$src"/README.md "$src"/docs/*.md >"$work/corpus.txt"
"$cohort" prepare --tokenizer byte --documents paragraph --val-fraction 0.1 --out "$work/c" \
    "$work/corpus.txt" >/dev/null || fail "prepare"
model=(--tokenizer byte --vocab 256 --layers 2 --heads 2 --dim 32 --seq 32 --batch 4 --threads 1
       --steps 30 --val-every 10 --val-batches 2 --data "$work/c_train_*.bin"
       --val-data "$work/c_val_*.bin")
mkdir -p "$work/ddp" "$work/pp" "$work/bad"
"$cohort" run --nproc-per-node 2 "$cohort" train --strategy ddp "${model[@]}" \
    --metrics "$work/ddp/metrics.jsonl" --trace "$work/ddp/trace.json" >"$work/ddp.log" 2>&1 ||
    fail "ddp run: $(tail -5 "$work/ddp.log")"
"$cohort" estimate --engine cohort --json --layers 2 --heads 2 --dim 32 --vocab 256 --seq 32 \
    --batch 4 --strategy ddp --dp 2 >"$work/ddp/estimate.json" || fail "estimate"
"$cohort" run --nproc-per-node 2 "$cohort" train --pp 2 --schedule 1f1b --microbatches 4 \
    "${model[@]}" --metrics "$work/pp/metrics.jsonl" --trace "$work/pp/trace.json" \
    >"$work/pp.log" 2>&1 || fail "pp run: $(tail -5 "$work/pp.log")"

# 1. One run, as the main job's: 2 series in the loss chart (training, validation), one per
# speed chart; a memory chart (measured, predicted); 2 ranks x (compute, gradient comm) lanes.
"$cohort" report ddp="$work/ddp" -o "$work/one.html" 2>"$work/one.err" || fail "report one run: $(cat "$work/one.err")"
[ -s "$work/one.err" ] && fail "report one run: warnings for a clean run: $(cat "$work/one.err")"
render report-one-run "$work/one.html" 4400
"$py" "$src/tests/report/report_dom.py" "$work/report-one-run.dom" --series loss=2 \
    --series throughput=1 --series mfu=1 --series memory-0=2 --rows 1 --lanes 4 --no-problems \
    --label tokens --label "loss (cross-entropy, nats)" --label step --label tokens/s \
    --label "MFU (%)" --label bytes --label "time (ms from the window's start)" ||
    fail "one run: DOM"
[ -s "$work/report-one-run.console" ] && fail "one run: console: $(cat "$work/report-one-run.console")"
# On paper: the page prints to a PDF of several pages (tables unfolded, charts whole).
chrome --no-pdf-header-footer --print-to-pdf="$shots/report-one-run.pdf" "file://$work/one.html" \
    >/dev/null 2>"$work/pdf.err" || fail "print to PDF: $(tail -3 "$work/pdf.err")"
pages=$(grep -ac "/Type /Page$\|/Type/Page[^s]" "$shots/report-one-run.pdf" 2>/dev/null || true)
head -c 5 "$shots/report-one-run.pdf" 2>/dev/null | grep -q "%PDF-" || fail "print: not a PDF"
[ "${pages:-0}" -ge 2 ] || fail "print: $pages page(s), expected the report over several"

# 2. The comparison: both runs in every shared chart, two summary rows, the pipeline's timeline
# with its F/B blocks (2 steps x 2 stages x 4 micro-batches x forward and backward).
"$cohort" report "$work/ddp/metrics.jsonl" pipeline="$work/pp/metrics.jsonl" \
    -o "$work/cmp.html" 2>"$work/cmp.err" || fail "report comparison: $(cat "$work/cmp.err")"
render report-comparison "$work/cmp.html" 5600
"$py" "$src/tests/report/report_dom.py" "$work/report-comparison.dom" --series loss=4 \
    --series throughput=2 --series mfu=2 --series memory-0=2 --series memory-1=2 --rows 2 \
    --lanes 6 --blocks 32 --no-problems --label tokens --label "MFU (%)" || fail "comparison: DOM"
grep -q '<th scope="row">pipeline</th>' "$work/report-comparison.dom" || fail "comparison: no row named 'pipeline'"
[ -s "$work/report-comparison.console" ] && fail "comparison: console: $(cat "$work/report-comparison.console")"

# 3. Malformed metrics: line 4 not JSON, line 7 a string loss, the last line cut in half. The
# page names them, warns on stderr, exits 0 and still draws the rest.
n=$(wc -l <"$work/ddp/metrics.jsonl")
{
    sed -n 1,3p "$work/ddp/metrics.jsonl"
    echo 'garbage {"step": 4'
    sed -n 4,5p "$work/ddp/metrics.jsonl"
    sed -n 6p "$work/ddp/metrics.jsonl" | sed -E 's/"loss":[^,]+/"loss":"high"/'
    sed -n "7,$((n - 1))p" "$work/ddp/metrics.jsonl"
    sed -n "${n}p" "$work/ddp/metrics.jsonl" | head -c 60
} >"$work/bad/metrics.jsonl"
lines=$(($(wc -l <"$work/bad/metrics.jsonl") + 1))
"$cohort" report "$work/bad" -o "$work/bad.html" 2>"$work/bad.err" || fail "report bad: exit $?: $(cat "$work/bad.err")"
grep -q "line 4: not JSON" "$work/bad.err" || fail "bad: stderr does not name line 4: $(cat "$work/bad.err")"
grep -q "line 7: step 6: 'loss' is string, expected a number" "$work/bad.err" || fail "bad: stderr does not name line 7: $(cat "$work/bad.err")"
grep -q "line $lines: not JSON" "$work/bad.err" || fail "bad: stderr does not name the truncated line $lines: $(cat "$work/bad.err")"
render report-bad-metrics "$work/bad.html" 3600
"$py" "$src/tests/report/report_dom.py" "$work/report-bad-metrics.dom" --series loss=2 \
    --series throughput=1 --rows 1 --problem "line 4: not JSON" \
    --problem "line 7: step 6: 'loss' is string" --problem "line $lines: not JSON" ||
    fail "bad metrics: DOM"
# the kept steps: all but the bad line 7's step 6 and the truncated last one
grep -q "$((n - 2)) steps" "$work/report-bad-metrics.dom" || fail "bad metrics: the page does not say $((n - 2)) steps were kept"

# A folder given with a trailing slash is named after the folder.
"$cohort" report "$work/pp/" -o "$work/slash.html" 2>/dev/null || fail "report pp/"
grep -q '<th scope="row">pp</th>' "$work/slash.html" || fail "a run 'pp/' is not named pp"

# 4. Refusals: exit 2 naming the problem, no page written.
"$cohort" report "$work/ddp" 2>"$work/e1" && fail "no -o accepted"
grep -q "missing -o REPORT.html" "$work/e1" || fail "no -o: $(cat "$work/e1")"
"$cohort" report "$work/nope.jsonl" -o "$work/nope.html" 2>"$work/e2"
[ $? -eq 1 ] || fail "missing metrics: exit code"
grep -q "cannot open '$work/nope.jsonl'" "$work/e2" || fail "missing metrics: $(cat "$work/e2")"
[ -e "$work/nope.html" ] || [ -e "$work/nope.html.tmp" ] && fail "a failed report left a file"
"$cohort" report "$work/ddp" "$work/pp" --trace x.json -o "$work/x.html" 2>"$work/e3"
[ $? -eq 2 ] || fail "--trace with two runs: exit code"
grep -q -- "--trace and --estimate need exactly one run" "$work/e3" || fail "--trace with two runs: $(cat "$work/e3")"

echo "screenshots: $shots/report-one-run.png $shots/report-comparison.png $shots/report-bad-metrics.png"
[ "$fails" -eq 0 ] || { echo "$fails failure(s)"; exit 1; }
echo "ok"
