#!/usr/bin/env bash
# test_train_guard.sh: one rank's training, evaluation, checkpoints (fp32 and bf16), resume and
# --init-from on the cpu-guarded device, whose memory the host cannot touch outside backend
# calls, equal the CPU's bit for bit: the trainer, model, optimizer and checkpoint code reach
# device memory only through the backend's copies, as a GPU requires.
set -u
cohort=${COHORT:?}
src=${COHORT_SOURCE_DIR:?}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

cat "$src"/README.md "$src"/include/cohort/*.h >"$work/corpus.txt"
"$cohort" prepare --tokenizer byte --documents paragraph --val-fraction 0.1 --out "$work/c" \
    "$work/corpus.txt" >/dev/null || fail "prepare"
model=(--vocab 256 --layers 2 --heads 2 --dim 32 --seq 32 --batch 4 --lr 3e-3 --warmup 2
       --threads 1 --deterministic --tokenizer byte --data "$work/c_train_*.bin"
       --val-data "$work/c_val_*.bin" --val-every 2 --val-batches 2)
figures() { grep -oE '"(val_)?loss":[^,}]*' "$1"; }

for dev in cpu cpu-guarded; do
    d="$work/$dev"
    mkdir -p "$d"
    run() { "$cohort" train "${model[@]}" --device "$dev" "$@" >>"$d/log" 2>&1; }
    run --steps 6 --stop-at 4 --save "$d/ck.safetensors" --metrics "$d/a.jsonl" ||
        fail "$dev: train and save: $(tail -3 "$d/log")"
    run --steps 6 --resume "$d/ck.safetensors" --metrics "$d/b.jsonl" ||
        fail "$dev: resume: $(tail -3 "$d/log")"
    run --steps 2 --save "$d/half.safetensors" --save-dtype bf16 ||
        fail "$dev: bf16 save: $(tail -3 "$d/log")"
    run --steps 2 --init-from "$d/half.safetensors" --metrics "$d/c.jsonl" ||
        fail "$dev: --init-from a bf16 file: $(tail -3 "$d/log")"
done
g="$work/cpu-guarded" c="$work/cpu"
for m in a b c; do
    [ -s "$c/$m.jsonl" ] && [ "$(figures "$g/$m.jsonl")" = "$(figures "$c/$m.jsonl")" ] ||
        fail "losses of run $m differ: cpu $(figures "$c/$m.jsonl" | tr '\n' ' ') guarded $(figures "$g/$m.jsonl" | tr '\n' ' ')"
done
for f in ck.safetensors ck.safetensors.state4 half.safetensors; do
    cmp -s "$c/$f" "$g/$f" || fail "$f differs between cpu and cpu-guarded"
done
[ "$fails" -eq 0 ] && echo "ok   train, eval, save (fp32, bf16), resume and --init-from on cpu-guarded equal the cpu's: $(figures "$g/b.jsonl" | tail -1)"

out=$("$cohort" train "${model[@]}" --device cpu-guarded --strategy dp --devices 2 --steps 1 2>&1)
rc=$?
[ $rc -eq 2 ] && grep -q "cpu-guarded runs strategy 'single' only" <<<"$out" &&
    echo "ok   cpu-guarded refuses strategy dp (exit 2)" || fail "cpu-guarded with dp: rc $rc: $out"

[ "$fails" -eq 0 ] && echo "PASS" || { echo "$fails failure(s)"; exit 1; }
