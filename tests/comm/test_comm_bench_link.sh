#!/usr/bin/env bash
# test_comm_bench_link.sh: `cohort bench link` on one host (2 ranks over shared memory): one
# verified row per size (#wrong 0, bandwidth = size / time), the fit line with a positive,
# finite alpha and beta, --json rows and fit; and the refusals, each naming the bad value with
# the calibration file left as it was: --calibration with both ranks on one host (it records the
# link between nodes), a calibration file that does not read, 3 ranks, bad options. The link
# between two nodes is measured in tests/launch/test_launch_netns_link.sh.
. "$(dirname "$0")/comm_lib.sh"
src=${COHORT_SOURCE_DIR:?run through ctest}
py=${COHORT_PYTHON:-/usr/bin/python3}
fail() { echo "FAIL $*"; fails=$((fails + 1)); }

# 1. the table and the fit. On a loaded machine a size's median round trip can come out slower
# than a larger one's, and bench link then rightly refuses to fit ("times do not grow with the
# size"): that refusal, and only it, is measured again, up to 3 times
out=$comm_tmp/link.txt
for attempt in 1 2 3; do
    launch 2 "$cohort" bench link --min-bytes 64K --max-bytes 4M --iters 5 >"$out" 2>"$out.err" &&
        { link_rc=0; break; }
    link_rc=1
    grep -q "do not grow with the size" "$out.err" || break
    echo "bench link: times did not grow with the size (a loaded machine), attempt $attempt"
done
if [ $link_rc -eq 0 ]; then
    if "$py" - "$out" <<'PY'; then
import math, re, sys
rows, fit = [], None
for line in open(sys.argv[1]):
    if line.startswith("# link:"):
        m = re.search(r"alpha ([0-9.e+-]+) us .* beta ([0-9.e+-]+) GB/s", line)
        fit = (float(m.group(1)), float(m.group(2)))
    elif not line.startswith("#") and line.strip():
        size, us, gbs, wrong = line.split()
        rows.append((int(size), float(us), float(gbs), int(wrong)))
sizes = [r[0] for r in rows]
ok = sizes == [65536, 262144, 1048576, 4194304] and all(r[3] == 0 for r in rows)
# bandwidth column = size / one-way time, within what printing them (4 decimals, time to
# 0.1 us) rounds off
lo = lambda r: r[0] / ((r[1] + 0.05) * 1e-6) / 1e9 - 1e-4
hi = lambda r: r[0] / (max(r[1] - 0.05, 1e-9) * 1e-6) / 1e9 + 1e-4
ok = ok and all(lo(r) <= r[2] <= hi(r) for r in rows)
ok = ok and fit is not None and all(math.isfinite(x) and x > 0 for x in fit)
print("rows", rows, "fit", fit)
sys.exit(0 if ok else 1)
PY
        echo "ok   bench link on 2 ranks: 4 verified sizes, $(grep '^# link:' "$out" | cut -c3-90)"
    else
        fail "bench link's table or fit: $(cat "$out")"
    fi
else
    fail "bench link on 2 ranks: $(cat "$out" "$out.err")"
fi
check_no_shm "bench link"

# --json: one object per size and one for the fit. The fit needs times that grow with the size;
# a machine busy with other work can break that for 3 sizes of 5 round trips, and the tool then
# refuses (rightly): only that refusal is run again, at most twice.
json_ok=0
for attempt in 1 2 3; do
    if launch 2 "$cohort" bench link --min-bytes 64K --max-bytes 4M --step-factor 8 --iters 5 \
        --json >"$out" 2>"$out.err"; then
        "$py" -c 'import json, sys
r = [json.loads(l) for l in open(sys.argv[1])]
ok = [x["size"] for x in r[:-1]] == [65536, 524288, 4194304] and all(x["wrong"] == 0 for x in r[:-1])
ok = ok and r[-1]["alpha_us"] > 0 and r[-1]["beta_gbytes_per_s"] > 0 and r[-1]["sizes"] == 3
sys.exit(0 if ok else 1)' "$out" && json_ok=1
        break
    fi
    grep -q "do not grow with the size" "$out.err" || break
    echo "note bench link --json: times did not grow with the size (a busy machine); again"
done
if [ "$json_ok" = 1 ]; then
    echo "ok   bench link --json: one object per size and one for the fit"
else
    fail "bench link --json: $(cat "$out" "$out.err")"
fi
check_no_shm "bench link --json"

# 2. refusals: exit code, message, and the calibration file untouched
cal=$comm_tmp/cal.json
cp "$src/tests/fuzz/corpus/calibration/measured.json" "$cal"
sum=$(md5sum <"$cal")
expect() { # CODE TEXT RANKS ARGS...: the launch (RANKS 0: one process) exits CODE saying TEXT
    local code=$1 text=$2 n=$3 rc
    shift 3
    if [ "$n" = 0 ]; then
        "$cohort" bench link "$@" >"$out" 2>&1
    else
        launch "$n" "$cohort" bench link "$@" >"$out" 2>&1
    fi
    rc=$?
    if [ $rc -eq "$code" ] && grep -qF -- "$text" "$out" && [ "$(md5sum <"$cal")" = "$sum" ]; then
        echo "ok   refused ($rc): $text"
    else
        fail "bench link $* on $n ranks: exit $rc (want $code), want '$text': $(head -5 "$out")"
    fi
    [ "$n" = 0 ] || check_no_shm "bench link $*"
}
expect 2 "rank 0 and rank 1 both run on host '$(hostname)'" 2 --calibration "$cal" --max-bytes 64K
cp "$src/tests/fuzz/corpus/calibration/unknown_key.json" "$comm_tmp/bad.json"
expect 2 "unknown key 'colour'" 2 --calibration "$comm_tmp/bad.json" --max-bytes 64K
expect 1 "cannot read calibration file '$comm_tmp/none.json'" 2 --calibration "$comm_tmp/none.json"
expect 2 "3 ranks: the link is measured between 2 ranks" 3 --max-bytes 64K
expect 2 "invalid --step-factor '1'" 0 --step-factor 1
expect 2 "--min-bytes 1048576 above --max-bytes 65536" 0 --min-bytes 1M --max-bytes 64K
expect 2 "unknown or incomplete option '--colour'" 0 --colour x
[ -e "$comm_tmp/none.json" ] && fail "a missing calibration file was created"
ls "$comm_tmp"/*.tmp* >/dev/null 2>&1 && fail "a temporary calibration file was left"
[ $fails -eq 0 ] || exit 1
