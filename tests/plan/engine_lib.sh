# engine_lib.sh: what tests/plan/test_plan_engine_*.sh share, sourced (not a test itself):
# strict variables, a work directory removed on exit, failure counting, the corpus, and one
# configuration's `cohort estimate --engine cohort` beside the `cohort train` run it predicts
# (engine_mem.py reads the pair).
set -u
cohort=${COHORT:?}
src=${COHORT_SOURCE_DIR:?}
py=${COHORT_PYTHON:-/usr/bin/python3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# The resident peak means nothing under AddressSanitizer (shadow memory, quarantine).
rss=1
grep -qs '^COHORT_SANITIZE:BOOL=ON' "${COHORT_BUILD_DIR:-/nonexistent}/CMakeCache.txt" && rss=0

cat "$src"/README.md "$src"/include/cohort/*.h > "$work/corpus.txt"
"$cohort" prepare --tokenizer byte --documents paragraph --out "$work/c" "$work/corpus.txt" \
    >/dev/null || fail "prepare"

# engine_run NAME RANKS STRATEGY ZERO MICRO [OPTION...]: the estimate of the model `shape`
# (micro-batch MICRO, one thread) as JSON into $work/NAME.est, and `cohort train` with the
# arguments `train` under `cohort run` on RANKS ranks, its metrics in $work/NAME.jsonl and its
# output in $work/NAME.out; both get the OPTIONs.
engine_run() {
    local name=$1 n=$2 s=$3 z=$4 mb=$5
    shift 5
    "$cohort" estimate --engine cohort "${shape[@]}" --micro-batch "$mb" --threads 1 --dp "$n" \
        --zero "$z" "$@" --json >"$work/$name.est" || fail "$name: estimate"
    "$cohort" run --nproc-per-node "$n" "$cohort" train "${train[@]}" --strategy "$s" "$@" \
        --metrics "$work/$name.jsonl" >"$work/$name.out" 2>&1 ||
        fail "$name x$n: $(tail -3 "$work/$name.out")"
}
