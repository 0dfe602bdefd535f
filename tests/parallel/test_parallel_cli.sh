#!/usr/bin/env bash
# test_parallel_cli.sh: usage errors of the parallel options (exit 2, the bad value quoted, what
# is valid), strategies started the wrong way, and rank 0 alone printing the start-up summary.
. "$(dirname "${BASH_SOURCE[0]}")/par_lib.sh"

par_prepare "$src"/README.md
par_model 256 1 2 16 16
m=("${model[@]}" --batch 2 --steps 2)
expect 2 "invalid --strategy 'zero4': valid are single, dp, ddp, zero1, zero2, zero3" \
    "$cohort" train "${m[@]}" --strategy zero4
expect 2 "invalid --bucket-mb '0'" "$cohort" train "${m[@]}" --bucket-mb 0
expect 2 "invalid --bucket-mb 'lots'" "$cohort" train "${m[@]}" --bucket-mb lots
expect 2 "strategy 'zero2' needs one process per rank: start it with 'cohort run" \
    env -u WORLD_SIZE "$cohort" train "${m[@]}" --strategy zero2
expect 2 "strategy 'single' runs one process but cohort started 2 ranks" \
    "$cohort" run --nproc-per-node 2 "$cohort" train "${m[@]}"
expect 2 "strategy 'dp' runs one process but cohort started 2 ranks" \
    "$cohort" run --nproc-per-node 2 "$cohort" train "${m[@]}" --strategy dp

out=$("$cohort" run --nproc-per-node 2 "$cohort" train "${m[@]}" --strategy ddp 2>&1) ||
    fail "ddp run: $out"
[ "$(echo "$out" | grep -c 'global batch 4 sequences = micro-batch 2 x accumulation 1 x data-parallel 2')" -eq 1 ] ||
    fail "global batch line not printed once by rank 0: $out"
echo "$out" | grep -q '^\[rank1\].*step 2/2' && fail "rank 1 printed progress"
par_done "parallel cli checks passed"
