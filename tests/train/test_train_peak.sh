#!/usr/bin/env bash
# test_train_peak.sh: the peak `cohort train` takes MFU against. Measured at start when not given
# (an sgemm on the run's threads), by rank 0 alone in a job of several ranks (the others name
# rank 0's peak and measure nothing); given by --peak-gflops or COHORT_PEAK_GFLOPS (the flag wins),
# then nothing is measured and MFU is exactly the model's FLOP/s over that peak (twice the peak,
# half the MFU at the same speed); a peak that makes MFU read above 100% warns naming where it
# came from; a bad value is refused by name with exit 2.
set -u
cohort=${COHORT:?}
src=${COHORT_SOURCE_DIR:?}
py=${COHORT_PYTHON:-python3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
unset COHORT_PEAK_GFLOPS # the test environment gives one; this test is about both ways

cat "$src"/README.md "$src"/include/cohort/*.h >"$work/corpus.txt"
"$cohort" prepare --tokenizer byte --documents paragraph --out "$work/c" "$work/corpus.txt" \
    >/dev/null || fail "prepare"
model=(--vocab 256 --layers 2 --heads 2 --dim 32 --seq 32 --batch 4 --threads 1 --steps 4
       --data "$work/c_train_*.bin")

# measured: a positive sgemm peak on the start-up line
"$cohort" train "${model[@]}" >"$work/m.out" 2>&1 || fail "measured run: $(tail -3 "$work/m.out")"
grep -Eq "1 threads \(--threads\), sgemm peak [0-9]+\.[0-9] GFLOP/s;" "$work/m.out" &&
    ! grep -q "sgemm peak 0\.0 GFLOP/s" "$work/m.out" ||
    fail "no measured peak: $(grep 'blas kernel' "$work/m.out")"

# two ranks: rank 0 measures, rank 1 does not
"$cohort" run --nproc-per-node 2 "$cohort" train "${model[@]}" --strategy ddp >"$work/r.out" 2>&1 ||
    fail "2 ranks: $(tail -3 "$work/r.out")"
[ "$(grep -c 'sgemm peak [0-9.]* GFLOP/s' "$work/r.out")" -eq 1 ] &&
    grep -q "^\[rank0\]: .*sgemm peak [0-9.]* GFLOP/s" "$work/r.out" &&
    grep -q "^\[rank1\]: .*MFU against rank 0's peak;" "$work/r.out" ||
    fail "rank 0 alone measures: $(grep 'blas kernel' "$work/r.out")"

# given: MFU is the model's FLOP/s over it, exactly
for p in 100 200; do
    "$cohort" train "${model[@]}" --peak-gflops $p --metrics "$work/p$p.jsonl" >"$work/p$p.out" 2>&1 ||
        fail "--peak-gflops $p: $(tail -3 "$work/p$p.out")"
done
grep -q "1 threads (--threads), peak 100 GFLOP/s (--peak-gflops);" "$work/p100.out" ||
    fail "given peak not on the start-up line: $(grep 'blas kernel' "$work/p100.out")"
"$py" - "$work/p100.jsonl" "$work/p200.jsonl" <<'PY' || fail "MFU against the given peak"
import json, sys
def per_token(path, peak):  # mfu * peak / tokens_per_s: the model's FLOPs per token
    out = []
    for line in open(path):
        m = json.loads(line)
        out.append(m["mfu"] * peak * 1e9 / m["tokens_per_s"])
    return out
a, b = per_token(sys.argv[1], 100), per_token(sys.argv[2], 200)
print("FLOPs per token from MFU: peak 100: %s; peak 200: %s" % (a, b))
if len(a) != 4 or len(b) != 4 or any(abs(x / a[0] - 1) > 1e-9 for x in a + b):
    sys.exit(1)
PY
COHORT_PEAK_GFLOPS=50 "$cohort" train "${model[@]}" >"$work/e.out" 2>&1 || fail "COHORT_PEAK_GFLOPS=50"
grep -q "peak 50 GFLOP/s (COHORT_PEAK_GFLOPS);" "$work/e.out" ||
    fail "COHORT_PEAK_GFLOPS not taken: $(grep 'blas kernel' "$work/e.out")"
COHORT_PEAK_GFLOPS=50 "$cohort" train "${model[@]}" --peak-gflops 70 >"$work/f.out" 2>&1 ||
    fail "flag over the variable"
grep -q "peak 70 GFLOP/s (--peak-gflops);" "$work/f.out" ||
    fail "--peak-gflops does not win over COHORT_PEAK_GFLOPS: $(grep 'blas kernel' "$work/f.out")"
# a peak below what the run reaches: MFU above 100% is n/a, with one warning naming the flag
"$cohort" train "${model[@]}" --peak-gflops 0.001 --metrics "$work/low.jsonl" >"$work/low.out" 2>&1 ||
    fail "--peak-gflops 0.001"
[ "$(grep -c "warning: mfu reads [0-9]*% against the peak given (0.001 GFLOP/s, --peak-gflops), so that peak is low" "$work/low.out")" -eq 1 ] ||
    fail "no single warning on a low peak: $(grep -i warn "$work/low.out")"
[ "$(grep -c '"mfu":null' "$work/low.jsonl")" -eq 4 ] || fail "MFU above 100% not written as null"

# bad values: exit 2, the value named
expect_refused() {
    local what=$1 want=$2 rc
    shift 2
    "$@" >"$work/bad.out" 2>&1
    rc=$?
    [ $rc -eq 2 ] && grep -qF -- "$want" "$work/bad.out" ||
        fail "$what: exit $rc, want 2 and '$want': $(cat "$work/bad.out")"
}
for v in 0 -5 abc inf 2e9; do
    expect_refused "--peak-gflops $v" "invalid --peak-gflops '$v': must be a number from 0.001" \
        "$cohort" train "${model[@]}" --peak-gflops "$v"
done
expect_refused "COHORT_PEAK_GFLOPS=x1" "invalid COHORT_PEAK_GFLOPS 'x1': must be a number" \
    env COHORT_PEAK_GFLOPS=x1 "$cohort" train "${model[@]}"

[ $fails -eq 0 ] || exit 1
echo "ok"
