#!/usr/bin/env bash
# test_train_cli.sh: `cohort train/eval/generate` end to end on a tiny byte-level model: metrics,
# bit-identical deterministic runs, exact resume, atomic and corrupt checkpoints, usage errors,
# and the BLAS kernel fix through the CLI.
set -u
cohort=${COHORT:?}
src=${COHORT_SOURCE_DIR:?}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
skips=0 # skip SUBTEST REASON: a part that cannot run here; the test then exits 77 (skipped)
skip() { echo "SKIP $1: $2"; skips=$((skips + 1)); }

# A real text corpus from the repository itself.
cat "$src"/README.md "$src"/include/cohort/*.h > "$work/corpus.txt"
"$cohort" prepare --tokenizer byte --documents paragraph --val-fraction 0.1 --out "$work/c" "$work/corpus.txt" \
    >/dev/null || fail "prepare"
model=(--vocab 256 --layers 2 --heads 2 --dim 32 --seq 32 --batch 4 --lr 3e-3 --warmup 2
       --threads 2 --deterministic --tokenizer byte --data "$work/c_train_*.bin")
losses() { sed -E 's/.*"loss":([^,]+),.*/\1/' "$1"; }

# metrics fields and a falling loss
"$cohort" train "${model[@]}" --steps 12 --metrics "$work/a.jsonl" --val-data \
    "$work/c_val_*.bin" --val-every 6 --val-batches 2 >"$work/a.out" 2>"$work/a.err" ||
    fail "train: $(cat "$work/a.err")"
for k in step loss lr tokens_per_s mfu elapsed_s; do
    [ "$(grep -c "\"$k\":" "$work/a.jsonl")" -eq 12 ] || fail "metrics lack '$k' on some line"
done
[ "$(grep -c '"val_loss":' "$work/a.jsonl")" -eq 2 ] || fail "val_loss expected at steps 6, 12"
first=$(losses "$work/a.jsonl" | head -1)
last=$(losses "$work/a.jsonl" | tail -1)
awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a - 0.5) }' || fail "loss did not fall: $first -> $last"
grep -q "^step 12/12 loss" "$work/a.out" || fail "no plain progress line when not a terminal"
grep -q "peak rss .* (engine predicted .*); allocator peak " "$work/a.err" &&
    grep -q "memory predicted" "$work/a.err" || fail "no memory prediction, peak rss and allocator peak"
grep -q "device cpu; blas kernel" "$work/a.err" || fail "the device is not printed at start"
grep -q '"alloc_peak_bytes":[1-9]' "$work/a.jsonl" || fail "metrics lack the allocator's peak"

# the backend is chosen per run: cpu, and nothing this build lacks
out=$("$cohort" train "${model[@]}" --steps 1 --device cuda 2>&1)
[ $? -eq 2 ] && echo "$out" | grep -q "device 'cuda': this build has no CUDA backend" ||
    fail "--device cuda not refused: $out"
out=$("$cohort" train "${model[@]}" --steps 1 --device tpu 2>&1)
[ $? -eq 2 ] && echo "$out" | grep -q "invalid device 'tpu': valid: cpu" || fail "--device tpu: $out"
"$cohort" train "${model[@]}" --steps 1 --device cpu >/dev/null 2>&1 || fail "--device cpu refused"

# deterministic: the same run twice gives bit-identical losses
"$cohort" train "${model[@]}" --steps 12 --metrics "$work/b.jsonl" 2>/dev/null >/dev/null
"$cohort" train "${model[@]}" --steps 12 --metrics "$work/b2.jsonl" 2>/dev/null >/dev/null
[ "$(losses "$work/b.jsonl")" = "$(losses "$work/b2.jsonl")" ] || fail "deterministic runs differ"

# resume: 5 steps + 7 resumed steps equal 12 uninterrupted steps, bit for bit
"$cohort" train "${model[@]}" --steps 12 --stop-at 5 --save "$work/ck.safetensors" \
    --metrics "$work/r.jsonl" 2>/dev/null >/dev/null || fail "train with --stop-at"
cp "$work/ck.safetensors" "$work/ck5.safetensors"
cp "$work/ck.safetensors.state5" "$work/ck5.safetensors.state5"
"$cohort" train "${model[@]}" --steps 12 --resume "$work/ck.safetensors" --save \
    "$work/ck.safetensors" --save-every 4 --metrics "$work/r.jsonl" 2>"$work/r.err" >/dev/null ||
    fail "resume: $(cat "$work/r.err")"
[ "$(losses "$work/r.jsonl")" = "$(losses "$work/b.jsonl")" ] || {
    fail "resumed losses differ from the uninterrupted run"
    paste <(losses "$work/r.jsonl") <(losses "$work/b.jsonl")
}
[ "$(sed -E 's/.*"step":([0-9]+),.*/\1/' "$work/r.jsonl" | tr '\n' ' ')" = \
  "1 2 3 4 5 6 7 8 9 10 11 12 " ] || fail "resumed metrics steps wrong"

# a deterministic resume with another thread count is refused
out=$("$cohort" train "${model[@]}" --threads 1 --steps 12 --resume "$work/ck5.safetensors" 2>&1)
[ $? -ne 0 ] && echo "$out" | grep -q "trained with 2 threads" || fail "thread mismatch not refused: $out"
# without --threads a run takes OMP_NUM_THREADS (what `cohort run` sets per rank)
out=$(OMP_NUM_THREADS=1 "$cohort" train "${model[@]:0:16}" "${model[@]:18}" --steps 12 \
    --resume "$work/ck5.safetensors" 2>&1)
[ $? -ne 0 ] && echo "$out" | grep -q "this run has 1" || fail "OMP_NUM_THREADS not honoured: $out"

# only the committed step's state is kept: the weights name it
[ "$(cd "$work" && ls ck.safetensors.state*)" = ck.safetensors.state12 ] ||
    fail "state files of other steps kept: $(ls "$work")"
# a torn pair (weights of step 12, the state they name holding step 5) is refused
cp "$work/ck5.safetensors.state5" "$work/ck.safetensors.state12"
out=$("$cohort" train "${model[@]}" --steps 12 --resume "$work/ck.safetensors" 2>&1)
[ $? -eq 1 ] && echo "$out" | grep -q "torn" || fail "torn checkpoint not refused: $out"

# a truncated checkpoint is refused with its name; nothing is overwritten
head -c 3000 "$work/ck5.safetensors" > "$work/trunc.safetensors"
cp "$work/ck5.safetensors.state5" "$work/trunc.safetensors.state5"
out=$("$cohort" train "${model[@]}" --steps 12 --resume "$work/trunc.safetensors" 2>&1)
[ $? -ne 0 ] && echo "$out" | grep -q "trunc.safetensors" || fail "truncated checkpoint: $out"
# a flipped byte in the data is caught by the checksum
cp "$work/ck5.safetensors" "$work/flip.safetensors"
cp "$work/ck5.safetensors.state5" "$work/flip.safetensors.state5"
size=$(stat -c %s "$work/flip.safetensors")
printf '\x55' | dd of="$work/flip.safetensors" bs=1 seek=$((size - 100)) conv=notrunc 2>/dev/null
out=$("$cohort" eval --checkpoint "$work/flip.safetensors" --data "$work/c_val_*.bin" 2>&1)
[ $? -ne 0 ] && echo "$out" | grep -q "flip.safetensors" || fail "corrupt checkpoint: $out"

# eval: JSON loss close to the training's validation loss scale, finite and stable
e1=$("$cohort" eval --checkpoint "$work/ck5.safetensors" --data "$work/c_val_*.bin" --batch 4 \
     --seq 32 --batches 3 --json) || fail "eval"
e2=$("$cohort" eval --checkpoint "$work/ck5.safetensors" --data "$work/c_val_*.bin" --batch 4 \
     --seq 32 --batches 3 --json)
[ "$e1" = "$e2" ] && echo "$e1" | grep -q '"loss":[0-9]' || fail "eval output: $e1 / $e2"
# eval on a shard of 3 batches (8 x 32 tokens each): the default of 10 evaluates the 3, an
# explicit --batches asks for exactly that many
head -c 800 "$work/corpus.txt" >"$work/small.txt"
"$cohort" prepare --tokenizer byte --out "$work/small" "$work/small.txt" >/dev/null || fail "prepare small"
out=$("$cohort" eval --checkpoint "$work/ck5.safetensors" --data "$work/small_train_000000.bin" 2>&1)
[ $? -eq 0 ] && echo "$out" | grep -q "^loss [0-9.]* over 3 batches$" || fail "eval, default batches, small shard: $out"
out=$("$cohort" eval --checkpoint "$work/ck5.safetensors" --data "$work/small_train_000000.bin" --json 2>&1)
echo "$out" | grep -q '"batches":3,"tokens":768}' || fail "eval --json, small shard: $out"
out=$("$cohort" eval --checkpoint "$work/ck5.safetensors" --data "$work/small_train_000000.bin" --batches 4 2>&1)
[ $? -eq 1 ] && echo "$out" | grep -q "holds only 3 batches" || fail "eval --batches 4 of 3: $out"

# generate: the prompt then N bytes, the same for the same seed
g1=$("$cohort" generate --checkpoint "$work/ck.safetensors" --prompt "The " --tokens 40 --seed 3)
g2=$("$cohort" generate --checkpoint "$work/ck.safetensors" --prompt "The " --tokens 40 --seed 3)
[ "$g1" = "$g2" ] && [ "${g1:0:4}" = "The " ] || fail "generate: '$g1' vs '$g2'"

# usage errors: exit 2 and the bad value named
check_usage() {
    local want=$1; shift
    out=$("$cohort" "$@" 2>&1); rc=$?
    [ $rc -eq 2 ] && echo "$out" | grep -qF -- "$want" || fail "'$*': rc $rc, '$out' lacks '$want'"
}
check_usage "invalid --steps 'x'" train --data "$work/c_train_*.bin" --steps x
check_usage "unknown model preset 'gpt5'" train --data "$work/c_train_*.bin" --steps 1 --model gpt5
check_usage "missing --data" train --steps 3
check_usage "invalid dim '30'" train --data "$work/c_train_*.bin" --steps 1 --dim 30 --heads 4
check_usage "invalid --shuffle 'maybe'" train --shuffle maybe
check_usage "invalid --seq '64'" train "${model[@]}" --steps 1 --seq 64 --resume "$work/ck5.safetensors"
check_usage "outside the model's vocabulary of 50 ids" train --data "$work/c_train_*.bin" --steps 1 --vocab 50 --layers 1 --dim 8 --heads 1 --seq 8

# the run's output files are checked before the first step: a --save (or its state and shard
# companions), --metrics or --dump-params over a --data or --val-data shard, a missing folder,
# a folder as FILE; exit 2, naming both, and nothing written
cp "$work"/c_train_000000.bin "$work/shard.bin"
sum=$(cksum < "$work/shard.bin")
check_usage "--save '$work/shard.bin' would overwrite --data '$work/shard.bin'" \
    train "${model[@]}" --data "$work/shard.bin" --steps 2 --save "$work/shard.bin"
ln -s shard.bin "$work/link.bin"
check_usage "--save '$work/link.bin' would overwrite --data '$work/shard.bin'" \
    train "${model[@]}" --data "$work/shard.bin" --steps 2 --save "$work/link.bin"
cp "$work/shard.bin" "$work/sh.state3"
check_usage "--save '$work/sh' would overwrite --data '$work/sh.state3' (one of the files its saves write or remove)" \
    train "${model[@]}" --data "$work/sh.state*" --steps 2 --save "$work/sh"
check_usage "--metrics '$work/c_val_000000.bin' would overwrite --val-data '$work/c_val_000000.bin'" \
    train "${model[@]}" --val-data "$work/c_val_*.bin" --steps 2 --metrics "$work/c_val_000000.bin"
check_usage "invalid --save '$work/none/x.ck': folder '$work/none' does not exist" \
    train "${model[@]}" --steps 2 --save "$work/none/x.ck"
mkdir "$work/adir"
check_usage "invalid --save '$work/adir': it is a folder" train "${model[@]}" --steps 2 --save "$work/adir"
check_usage "invalid --dump-params '$work/shard.bin/p': '$work/shard.bin' is not a folder" \
    train "${model[@]}" --steps 2 --dump-params "$work/shard.bin/p"
[ "$(cksum < "$work/shard.bin")" = "$sum" ] || fail "--save wrote over the training shard"
[ -z "$(ls "$work/adir")" ] && ! ls "$work"/adir.* >/dev/null 2>&1 && [ ! -e "$work/sh" ] ||
    fail "a refused run wrote files: $(ls "$work")"

# SIGINT: one line naming the step and the last checkpoint, the signal's exit status, and the
# committed step's files alone (a save that the signal meets ends first)
set -m # the run gets SIGINT's default action, as in a terminal (a script's jobs ignore it)
"$cohort" train "${model[@]:0:14}" --threads 1 --data "$work/c_train_*.bin" --steps 1000000 \
    --save "$work/sig.ck" --save-every 1 >/dev/null 2>"$work/sig.err" &
pid=$!
set +m
for _ in $(seq 300); do [ -e "$work/sig.ck" ] && break; sleep 0.1; done
kill -INT $pid
for _ in $(seq 300); do kill -0 $pid 2>/dev/null || break; sleep 0.1; done
kill -KILL $pid 2>/dev/null && fail "SIGINT did not end the run"
wait $pid
rc=$?
line=$(grep "interrupted" "$work/sig.err")
saved=$(echo "$line" | sed -nE "s/.*last checkpoint: step ([0-9]+) in '.*sig.ck'\$/\1/p")
[ $rc -eq 130 ] && [ -n "$saved" ] || fail "SIGINT: rc $rc, line '$line'"
[ "$(cd "$work" && ls sig.ck*)" = "$(printf 'sig.ck\nsig.ck.state%s' "$saved")" ] ||
    fail "SIGINT left other files than the checkpoint of step $saved: $(cd "$work" && ls sig.ck*)"

# the BLAS fix through the CLI: a forced weak kernel is replaced, in one log line. Any cpu with
# AVX has a better kernel than Prescott (Sandybridge, Haswell or SkylakeX: src/train/blas.c).
if grep -qw avx /proc/cpuinfo; then
    k=$(env -u COHORT_BLAS_KEEP OPENBLAS_CORETYPE=Prescott "$cohort" train --blas-info 2>"$work/blas.err")
    [ "$k" != "Prescott" ] && [ "$(wc -l < "$work/blas.err")" -eq 1 ] &&
        grep -q "'Prescott'" "$work/blas.err" || fail "blas fix: kernel '$k', log '$(cat "$work/blas.err")'"
    echo "ran blas fix: Prescott forced, '$k' used"
else
    skip "blas fix" "this cpu has no AVX, so no kernel is better than Prescott"
fi

[ $fails -eq 0 ] || exit 1
[ $skips -eq 0 ] || { echo "$skips part(s) skipped"; exit 77; }
echo "ok"
