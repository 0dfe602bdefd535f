#!/usr/bin/env bash
# test_train_mismatch.sh: what `cohort train` and `generate` refused or ignored without a word:
# a --dp that disagrees with the launcher's ranks, model flags that contradict a --resume or
# --init-from checkpoint, unknown tokenizer names, the tokenizer recorded or inferred from the
# shards, a vocabulary too small for the shards (with the fix), byte shards on the default
# vocabulary (a warning), --tokenizer byte on a GPT-2 model, the GPT-2 tables found through
# $COHORT_GPT2_DIR, --merges with --vocab FILE kept as its old spelling, and generate on a byte
# model smaller than its tokenizer (--vocab 128).
set -u
cohort=${COHORT:?}
src=${COHORT_SOURCE_DIR:?}
build=${COHORT_BUILD_DIR:?}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
skips=0
skip() { echo "SKIP $1: $2"; skips=$((skips + 1)); }

# expect CODE NEEDLE CMD...: the exit code and a line of stdout+stderr containing NEEDLE.
expect() {
    local code=$1 needle=$2
    shift 2
    "$@" >"$work/out" 2>&1
    local got=$?
    if [ "$got" -ne "$code" ] || ! grep -qF -- "$needle" "$work/out"; then
        fail "$* -> exit $got (want $code), output lacks '$needle': $(tail -5 "$work/out")"
    else
        echo "ok   $(echo "$*" | cut -c1-110) -> $code"
    fi
}

cat "$src"/README.md "$src"/docs/train.md > "$work/corpus.txt"
"$cohort" prepare --tokenizer byte --out "$work/b" "$work/corpus.txt" >/dev/null || fail "prepare byte"
tiny=(--layers 1 --heads 2 --dim 32 --seq 32 --micro-batch 2 --threads 1 --steps 2)
byte=(--data "$work/b_train_000000.bin")

# --dp under a launcher: a given one must match the ranks, naming both values
expect 2 "invalid --dp '4': this job has 2 ranks" \
    "$cohort" run -n 2 "$cohort" train "${tiny[@]}" --vocab 256 "${byte[@]}" --strategy ddp --dp 4
expect 0 "done: 2 steps" \
    "$cohort" run -n 2 "$cohort" train "${tiny[@]}" --vocab 256 "${byte[@]}" --strategy ddp --dp 2

# the tokenizer: inferred from byte shards and recorded; unknown names refused
expect 0 "tokenizer byte (from the shards' largest token id" \
    "$cohort" train "${tiny[@]}" --vocab 256 "${byte[@]}" --save "$work/ck.safetensors"
expect 2 "invalid --tokenizer 'bpe': valid are byte, gpt2" \
    "$cohort" train "${tiny[@]}" --vocab 256 "${byte[@]}" --tokenizer bpe
expect 0 "Hello" "$cohort" generate --checkpoint "$work/ck.safetensors" --prompt Hello --tokens 3
# GPT-2 tables for a byte model (recorded or named) would be ignored: refused
expect 2 "--encoder '$work/nope' is read only by the gpt2 tokenizer, and this one is byte: drop --encoder" \
    "$cohort" generate --checkpoint "$work/ck.safetensors" --prompt Hello --encoder "$work/nope"
expect 2 "--merges 'x' is read only by the gpt2 tokenizer, and this one is byte: drop --merges" \
    "$cohort" generate --checkpoint "$work/ck.safetensors" --prompt Hello --tokenizer byte --merges x
# the default vocabulary on byte shards: a warning that names the fix
expect 0 "give --vocab 256 for byte data" "$cohort" train "${tiny[@]}" "${byte[@]}" --dry-run

# --resume and --init-from: a model flag that contradicts the checkpoint, refused with both values
expect 2 "--layers 3 disagrees with --resume '$work/ck.safetensors', whose model has --layers 1" \
    "$cohort" train --layers 3 --dim 32 --heads 2 --seq 32 --micro-batch 2 --steps 4 "${byte[@]}" \
    --resume "$work/ck.safetensors"
expect 2 "--dim 96 disagrees with --init-from '$work/ck.safetensors', whose model has --dim 32" \
    "$cohort" train --dim 96 --seq 32 --micro-batch 2 --steps 4 "${byte[@]}" \
    --init-from "$work/ck.safetensors"
expect 2 "--model gpt2 (layers 12) disagrees with --resume" \
    "$cohort" train --model gpt2 --steps 4 "${byte[@]}" --resume "$work/ck.safetensors"
expect 0 "done: 2 steps" "$cohort" train --layers 1 --vocab 256 --seq 32 --micro-batch 2 \
    --threads 1 --steps 4 "${byte[@]}" --resume "$work/ck.safetensors"

# --resume and the batch: the global batch (micro-batch x grad-accum x data-parallel) must be the
# checkpoint's, in any split of it: half the micro-batch and twice the accumulation, or half of
# it on each of 2 ranks, continue the run (its losses, within the sums' reordering); a changed
# one is refused naming the flag and both values, as are --steps below the saved step (--steps
# at it: nothing to train) and another --seq
m1=(--vocab 256 --layers 2 --heads 2 --dim 32 --seq 32 --threads 1 --lr 3e-3 "${byte[@]}")
losses() { sed -E 's/.*"loss":([^,]+),.*/\1/' "$1"; }
"$cohort" train "${m1[@]}" --micro-batch 2 --steps 8 --metrics "$work/u.jsonl" >/dev/null 2>&1 ||
    fail "the uninterrupted run"
"$cohort" train "${m1[@]}" --micro-batch 2 --steps 8 --stop-at 4 --save "$work/h.ck" >/dev/null \
    2>&1 || fail "the run saved at step 4"
for split in "--micro-batch 1 --grad-accum 2" "run --strategy ddp --micro-batch 1"; do
    set -- "$cohort" train
    [ "${split:0:3}" = run ] && set -- "$cohort" run -n 2 "$cohort" train && split=${split:4}
    rm -f "$work/s.jsonl"
    # shellcheck disable=SC2086
    expect 0 "done: 4 steps" "$@" "${m1[@]}" $split --steps 8 --resume "$work/h.ck" \
        --metrics "$work/s.jsonl"
    paste <(losses "$work/u.jsonl" | tail -4) <(losses "$work/s.jsonl") | awk '
        { d = $1 - $2; if (d < 0) d = -d; if (NF != 2 || d > 1e-5 * $1) bad = 1; n++ }
        END { exit bad || n != 4 }' || fail "resumed as '$split': losses differ from the run's: \
        $(paste <(losses "$work/u.jsonl" | tail -4) <(losses "$work/s.jsonl") | tr '\n' ' ')"
done
expect 2 "the global batch changed: --resume '$work/h.ck' was trained on 2 sequences a step (micro-batch 2 x grad-accum 1 x data-parallel 1), this run on 4 (2 x 2 x 1): --grad-accum 2 (saved 1)" \
    "$cohort" train "${m1[@]}" --micro-batch 2 --grad-accum 2 --steps 8 --resume "$work/h.ck"
expect 2 "this run on 1 (1 x 1 x 1): --micro-batch 1 (saved 2)" \
    "$cohort" train "${m1[@]}" --micro-batch 1 --steps 8 --resume "$work/h.ck"
expect 2 "this run on 4 (2 x 1 x 2): the data-parallel size 2 (saved 1)" \
    "$cohort" run -n 2 "$cohort" train "${m1[@]}" --strategy ddp --micro-batch 2 --steps 8 \
    --resume "$work/h.ck"
expect 2 "--steps 3 is below the step of --resume '$work/h.ck', 4" \
    "$cohort" train "${m1[@]}" --micro-batch 2 --steps 3 --resume "$work/h.ck"
expect 0 "--resume '$work/h.ck' is at step 4, which --steps 4 asks for: nothing to train" \
    "$cohort" train "${m1[@]}" --micro-batch 2 --steps 4 --resume "$work/h.ck"
expect 2 "--seq 16 disagrees with --resume '$work/h.ck', which trained on --seq 32" \
    "$cohort" train "${m1[@]}" --seq 16 --micro-batch 2 --steps 8 --resume "$work/h.ck"
# a state whose rows times its accumulation pass 2^64 (no trainer writes one): 2^63 + 1 rows x
# grad-accum 2 wrapped around to this run's 2 and the resume went on; now the product is whole
"$cohort" train "${m1[@]}" --micro-batch 1 --grad-accum 2 --steps 4 --stop-at 2 \
    --save "$work/w.ck" >/dev/null 2>&1 || fail "the run saved at step 2"
"$build/tests/data/data_st_tool" state-rows "$work/w.ck" 9223372036854775809 ||
    fail "rewriting the rows of w.ck's state"
expect 2 "the global batch changed: --resume '$work/w.ck' was trained on more than 18446744073709551615 sequences a step (micro-batch 1 x grad-accum 2 x data-parallel 9223372036854775809), this run on 2 (1 x 2 x 1): the data-parallel size 1 (saved 9223372036854775809)" \
    "$cohort" train "${m1[@]}" --micro-batch 1 --grad-accum 2 --steps 4 --resume "$work/w.ck"
# COHORT_COMM_ISA names kernels: a typo is refused (it chose the best kernels without a word),
# and so is a COHORT_LOG that names no level
expect 2 "invalid COHORT_COMM_ISA 'avx3': expected scalar, avx2 or avx512" \
    env COHORT_COMM_ISA=avx3 "$cohort" train "${tiny[@]}" --vocab 256 "${byte[@]}"
expect 2 "invalid COHORT_COMM_ISA 'avx3'" env COHORT_COMM_ISA=avx3 \
    "$cohort" run -n 2 "$cohort" train "${tiny[@]}" --vocab 256 "${byte[@]}" --strategy ddp
expect 2 "cohort train: error: invalid COHORT_LOG 'verbose': expected quiet, error, warn, info or debug" \
    env COHORT_LOG=verbose "$cohort" train "${tiny[@]}" --vocab 256 "${byte[@]}"

# eval and generate: a --heads that contradicts the checkpoint's metadata, refused as train's
expect 2 "--heads 1 disagrees with --checkpoint '$work/h.ck', whose model has --heads 2" \
    "$cohort" eval --checkpoint "$work/h.ck" "${byte[@]}" --batch 2 --heads 1
expect 2 "--heads 4 disagrees with --checkpoint '$work/h.ck', whose model has --heads 2" \
    "$cohort" generate --checkpoint "$work/h.ck" --prompt Hello --heads 4
# a pipeline schedule without a pipeline, named before the ranks are
expect 2 "--schedule gpipe is a pipeline schedule: it needs --pp 2 or more" \
    "$cohort" train "${tiny[@]}" --vocab 256 "${byte[@]}" --schedule gpipe
expect 2 "--schedule 1f1b is a pipeline schedule: it needs --pp 2 or more" \
    "$cohort" run -n 2 "$cohort" train "${tiny[@]}" --vocab 256 "${byte[@]}" --schedule 1f1b

if [ -r "${COHORT_GPT2_DIR:-}/encoder.json" ]; then
    "$cohort" prepare --out "$work/g" "$work/corpus.txt" >/dev/null || fail "prepare gpt2"
    gpt=(--data "$work/g_train_000000.bin")
    expect 2 "these are GPT-2 shards: drop --vocab (default 50257) or prepare the text with --tokenizer byte" \
        "$cohort" train "${tiny[@]}" --vocab 256 "${gpt[@]}"
    expect 2 "--tokenizer byte, but the shards hold token id 50256" \
        "$cohort" train "${tiny[@]}" "${gpt[@]}" --tokenizer byte
    expect 0 "tokenizer gpt2 (from the shards' largest token id, 50256)" \
        "$cohort" train "${tiny[@]}" "${gpt[@]}" --save "$work/g.safetensors"
    # generate finds the tables as prepare does: the installed ones, then $COHORT_GPT2_DIR
    expect 0 "Hello" "$cohort" generate --checkpoint "$work/g.safetensors" --prompt Hello --tokens 3
    expect 2 "cannot read '$work/none/encoder.json'" env COHORT_GPT2_DIR="$work/none" \
        "$cohort" generate --checkpoint "$work/g.safetensors" --prompt Hello --tokens 3
    expect 2 "--tokenizer byte, but '$work/g.safetensors' was trained on gpt2 shards" \
        "$cohort" generate --checkpoint "$work/g.safetensors" --prompt Hello --tokenizer byte
    # --merges FILE; --vocab FILE still read, with a line saying so; --vocab N refused
    expect 0 "Hello" "$cohort" generate --checkpoint "$work/g.safetensors" --prompt Hello --tokens 2 \
        --encoder "$COHORT_GPT2_DIR/encoder.json" --merges "$COHORT_GPT2_DIR/vocab.bpe"
    expect 0 "warning: --vocab FILE is now --merges FILE" "$cohort" prepare --out "$work/v" \
        --vocab "$COHORT_GPT2_DIR/vocab.bpe" "$work/corpus.txt"
    expect 2 "invalid --vocab '50257': here the tokenizer decides the vocabulary" \
        "$cohort" prepare --out "$work/v" --vocab 50257 "$work/corpus.txt"
else
    skip "gpt2" "no GPT-2 tables in '${COHORT_GPT2_DIR:-}' (scripts/setup.sh installs them)"
fi

# the byte tokenizer on a 50257-id model (byte data on the default vocabulary) samples only
# byte ids and says so, rather than print the prompt alone
"$cohort" train "${tiny[@]}" "${byte[@]}" --tokenizer byte --save "$work/wide.safetensors" \
    >/dev/null 2>&1 || fail "train the wide byte model"
expect 0 "warning: the model has 50257 ids, tokenizer 'byte' 256: sampling only its ids" \
    "$cohort" generate --checkpoint "$work/wide.safetensors" --prompt Hello --tokens 3

# a byte model smaller than the tokenizer (ASCII shards, --vocab 128): prompts whose ids fit are
# continued with ids below 128 only; a prompt byte past them is refused, naming its id
LC_ALL=C tr -cd '\n -~' <"$work/corpus.txt" | head -c 4000 >"$work/ascii.txt"
"$cohort" prepare --tokenizer byte --out "$work/A" "$work/ascii.txt" >/dev/null || fail "prepare ascii"
"$cohort" train --data "$work/A_train_000000.bin" --vocab 128 --layers 1 --heads 2 --dim 16 \
    --seq 16 --steps 2 --threads 1 --save "$work/a128.ck" >/dev/null 2>&1 || fail "train --vocab 128"
expect 0 "hello" "$cohort" generate --checkpoint "$work/a128.ck" --prompt hello --tokens 5
"$cohort" generate --checkpoint "$work/a128.ck" --prompt hello --tokens 400 --temperature 5 \
    --top-k 0 >"$work/gen128" 2>&1 || fail "generate 400 tokens on --vocab 128: $(cat "$work/gen128")"
[ "$(wc -c <"$work/gen128")" -eq 406 ] && [ -z "$(LC_ALL=C tr -d '\000-\177' <"$work/gen128")" ] ||
    fail "generate on --vocab 128 printed a byte past 127: $(od -c "$work/gen128" | head -3)"
expect 2 "prompt token id 195 (token 2 of 6) is outside the model's 128 ids (tokenizer 'byte' has 256)" \
    "$cohort" generate --checkpoint "$work/a128.ck" --prompt "héllo" --tokens 5

[ $fails -eq 0 ] || exit 1
[ $skips -eq 0 ] || exit 77
echo "all mismatch checks passed"
