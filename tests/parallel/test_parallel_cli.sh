#!/usr/bin/env bash
# test_parallel_cli.sh: usage errors of the parallel options (exit 2, the bad value quoted, what
# is valid), strategies started the wrong way, and rank 0 alone printing the start-up summary.
set -u
cohort=${COHORT:?}
src=${COHORT_SOURCE_DIR:?}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
expect() { # code message command...
    local code=$1 msg=$2
    shift 2
    out=$("$@" 2>&1)
    rc=$?
    [ $rc -eq "$code" ] && echo "$out" | grep -qF -- "$msg" || fail "$*: rc $rc, output: $out"
}

cat "$src"/README.md > "$work/corpus.txt"
"$cohort" prepare --tokenizer byte --out "$work/c" "$work/corpus.txt" >/dev/null || fail "prepare"
m=(--vocab 256 --layers 1 --heads 2 --dim 16 --seq 16 --batch 2 --steps 2 --threads 1
   --data "$work/c_train_*.bin")
expect 2 "invalid strategy 'zero4': valid are single, dp, ddp, zero1, zero2, zero3" \
    "$cohort" train "${m[@]}" --strategy zero4
expect 2 "invalid --bucket-mb '0'" "$cohort" train "${m[@]}" --bucket-mb 0
expect 2 "invalid --bucket-mb 'lots'" "$cohort" train "${m[@]}" --bucket-mb lots
expect 2 "strategy 'zero2' needs one process per rank: start it with 'cohort run" \
    env -u WORLD_SIZE "$cohort" train "${m[@]}" --strategy zero2
expect 2 "strategy 'single' runs one process but WORLD_SIZE is '2'" \
    "$cohort" run --nproc-per-node 2 "$cohort" train "${m[@]}"
expect 1 "strategy 'dp' runs in one process" "$cohort" train "${m[@]}" --strategy dp

out=$("$cohort" run --nproc-per-node 2 "$cohort" train "${m[@]}" --strategy ddp 2>&1) ||
    fail "ddp run: $out"
[ "$(echo "$out" | grep -c 'global batch 4 sequences = micro-batch 2 x accumulation 1 x data-parallel 2')" -eq 1 ] ||
    fail "global batch line not printed once by rank 0: $out"
echo "$out" | grep -q '^\[rank1\].*step 2/2' && fail "rank 1 printed progress"
[ $fails -eq 0 ] && echo "parallel cli checks passed"
exit $((fails > 0))
