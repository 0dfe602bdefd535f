#!/usr/bin/env bash
# test_dp_cli.sh: `cohort train --strategy dp --devices N` through the CLI: the same losses as
# single on the same global batch (10 steps, 1e-5), exact resume from a dp checkpoint, and usage
# errors.
. "$(dirname "${BASH_SOURCE[0]}")/par_lib.sh"

par_prepare --val-fraction 0.1
par_model 256 2 2 32 32
model+=(--lr 3e-3 --warmup 2 --steps 10 --shuffle off --tokenizer byte)
close() { # every line of two loss lists within 1e-5 relative
    paste <(losses "$1") <(losses "$2") | awk '{ d = $1 - $2; if (d < 0) d = -d;
        m = $2 < 0 ? -$2 : $2; if (d > 1e-5 * m) bad++ } END { exit !(NR == 10 && !bad) }'
}

"$cohort" train "${model[@]}" --batch 4 --metrics "$work/single.jsonl" >/dev/null 2>&1 ||
    fail "single run"
for n in 2; do # 4 devices: test_parallel_equiv.sh
    "$cohort" train "${model[@]}" --strategy dp --devices $n --batch $((4 / n)) \
        --metrics "$work/dp$n.jsonl" --save "$work/dp$n.safetensors" >"$work/dp$n.out" \
        2>"$work/dp$n.err" || fail "dp $n: $(cat "$work/dp$n.err")"
    close "$work/single.jsonl" "$work/dp$n.jsonl" || {
        fail "dp at $n devices: losses differ from single"
        paste <(losses "$work/single.jsonl") <(losses "$work/dp$n.jsonl")
    }
    [ -s "$work/dp$n.safetensors" ] || fail "dp $n wrote no checkpoint"
    grep -q "global batch 4 sequences = micro-batch $((4 / n)) x accumulation 1 x data-parallel $n" \
        "$work/dp$n.err" || fail "dp $n: global batch not printed: $(cat "$work/dp$n.err")"
done

# dp is deterministic: 5 steps, a checkpoint, and 5 resumed steps equal the 10 steps of dp2
dp2=(--strategy dp --devices 2 --batch 2)
"$cohort" train "${model[@]}" "${dp2[@]}" --stop-at 5 --save "$work/r.safetensors" \
    --metrics "$work/r.jsonl" >/dev/null 2>&1 || fail "dp with --stop-at"
"$cohort" train "${model[@]}" "${dp2[@]}" --resume "$work/r.safetensors" \
    --metrics "$work/r.jsonl" >/dev/null 2>"$work/r.err" || fail "dp resume: $(cat "$work/r.err")"
[ "$(losses "$work/r.jsonl")" = "$(losses "$work/dp2.jsonl")" ] || {
    fail "resumed dp losses differ from the uninterrupted dp run"
    paste <(losses "$work/r.jsonl") <(losses "$work/dp2.jsonl")
}

out=$("$cohort" train "${model[@]}" --devices 2 2>&1)
[ $? -eq 2 ] && echo "$out" | grep -q "devices '2' is for --strategy dp" ||
    fail "--devices without dp not a usage error: $out"
out=$("$cohort" train "${model[@]}" --strategy dp --devices 0 2>&1)
[ $? -eq 2 ] && echo "$out" | grep -q "'0'" || fail "--devices 0 not a usage error: $out"
out=$("$cohort" train "${model[@]}" --strategy dp --devices x 2>&1)
[ $? -eq 2 ] && echo "$out" | grep -q "'x'" || fail "--devices x not a usage error: $out"

par_done "all passed"
