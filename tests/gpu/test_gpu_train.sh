#!/usr/bin/env bash
# test_gpu_train.sh: the whole model on the GPU against the CPU engine: 20 steps of fp32 training
# give the same losses within 1e-4 relative, bf16-mixed within 2e-2 (bf16 rounding of every
# product's operands, compounded over the steps), as does fp32 with the tied embedding's head
# gradient kept apart (--tied-grad-order pipeline), and the start-up line names the GPU. Skipped
# by name without a GPU (COHORT_REQUIRE_GPU=1 makes that a failure).
set -u
cohort=${COHORT:?}
src=${COHORT_SOURCE_DIR:?}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
skips=0
skip() { echo "SKIP $1: $2"; skips=$((skips + 1)); }

cat "$src"/README.md "$src"/include/cohort/*.h > "$work/corpus.txt"
"$cohort" prepare --tokenizer byte --documents paragraph --val-fraction 0.1 --out "$work/c" \
    "$work/corpus.txt" >/dev/null || fail "prepare"
model=(--vocab 256 --layers 2 --heads 4 --dim 64 --seq 64 --batch 4 --lr 1e-3 --warmup 2
       --threads 4 --deterministic --tokenizer byte --data "$work/c_train_*.bin" --steps 20)
losses() { sed -E 's/.*"loss":([^,]+),.*/\1/' "$1"; }

# the largest relative difference of two loss columns, checked against a bound
compare() { # NAME A B BOUND
    paste -d' ' <(losses "$2") <(losses "$3") | awk -v name="$1" -v bound="$4" '
        { n++; d = $1 - $2; d = d < 0 ? -d : d; r = d / ($1 < 0 ? -$1 : $1); if (r > m) m = r }
        END { printf "%s: %d steps, largest relative loss difference %.3e (bound %.1e)\n",
              name, n, m, bound; exit !(n == 20 && m <= bound) }' || fail "$1 beyond its bound"
}

if ! "$cohort" train "${model[@]}" --steps 1 --device cuda >"$work/probe.out" 2>"$work/probe.err"; then
    if [ "${COHORT_REQUIRE_GPU:-}" = 1 ]; then
        fail "a GPU was required (COHORT_REQUIRE_GPU=1): $(tail -1 "$work/probe.err")"
    else
        skip gpu_train "no GPU here: $(tail -1 "$work/probe.err")"
    fi
else
    grep -q "device cuda: .*sm_" "$work/probe.err" || fail "the start-up line does not name the GPU"
    for prec in fp32 bf16-mixed; do
        if ! "$cohort" train "${model[@]}" --precision "$prec" --device cpu \
            --metrics "$work/cpu-$prec.jsonl" >/dev/null 2>"$work/cpu-$prec.err"; then
            if [ "$prec" = bf16-mixed ] && grep -q "bf16" "$work/cpu-$prec.err"; then
                skip "gpu_train_$prec" "the CPU cannot run bf16 here: $(tail -1 "$work/cpu-$prec.err")"
                continue
            fi
            fail "cpu $prec: $(tail -3 "$work/cpu-$prec.err")"
            continue
        fi
        "$cohort" train "${model[@]}" --precision "$prec" --device cuda \
            --metrics "$work/gpu-$prec.jsonl" >/dev/null 2>"$work/gpu-$prec.err" ||
            { fail "cuda $prec: $(tail -3 "$work/gpu-$prec.err")"; continue; }
        bound=1e-4
        [ "$prec" = bf16-mixed ] && bound=2e-2
        compare "losses $prec cuda vs cpu" "$work/cpu-$prec.jsonl" "$work/gpu-$prec.jsonl" "$bound"
    done
    # --tied-grad-order pipeline keeps the head's part of the tied embedding's gradient in a
    # buffer of its own (the backend's memory: device memory here), added at the step's end
    for d in cpu cuda; do
        "$cohort" train "${model[@]}" --tied-grad-order pipeline --device $d \
            --metrics "$work/tied-$d.jsonl" >/dev/null 2>"$work/tied-$d.err" ||
            fail "--tied-grad-order pipeline on $d: $(tail -3 "$work/tied-$d.err")"
    done
    [ -s "$work/tied-cpu.jsonl" ] && [ -s "$work/tied-cuda.jsonl" ] &&
        compare "losses fp32 --tied-grad-order pipeline cuda vs cpu" "$work/tied-cpu.jsonl" \
            "$work/tied-cuda.jsonl" 1e-4
fi
[ $fails -eq 0 ] || exit 1
[ $skips -eq 0 ] || exit 77
echo "ok"
