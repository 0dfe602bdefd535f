#!/usr/bin/env bash
# test_ckpt_hf_pieces.sh: a sharded checkpoint is plain safetensors of HF-named pieces. For
# tp 2 x dp 2 ZeRO-3 (weights and moments cut mid-row) and tp 2 x pp 2, ckpt_hf_pieces.py
# (python's standard library only) assembles every HF tensor from the shard files using only the
# commit file's index and the boxes, and finds each equal to `cohort export`'s file (names,
# dtypes, shapes, bytes), the moments covered exactly once; it fails when two pieces exchange
# their data. cohort refuses an index with overlapping pieces or a missing one, naming it, and
# the older layout of arena ranges by name.
. "$(dirname "${BASH_SOURCE[0]}")/par_lib.sh"

par_prepare
par_model 256 2 2 32 32
model+=(--steps 2 --batch 2)
check="$src/tests/parallel/ckpt_hf_pieces.py"
for mesh in "z3tp:--tp 2 --strategy zero3" "tppp:--tp 2 --pp 2"; do
    name=${mesh%%:*}
    read -ra flags <<<"${mesh#*:}"
    "$cohort" run --nproc-per-node 4 "$cohort" train "${model[@]}" "${flags[@]}" \
        --save "$work/$name.ck" >"$work/$name.out" 2>&1 ||
        { fail "$name save: $(tail -3 "$work/$name.out")"; continue; }
    "$cohort" export "$work/$name.ck" -o "$work/$name.st" || fail "$name export"
    "$py" "$check" "$work/$name.ck" "$work/$name.st" || fail "$name: pieces differ from the export"
done

# a copy under another name (FILE and its shard files) reads the same; two pieces of rank 0's
# file that exchange their data (a wrong box) fail the comparison
cp "$work/z3tp.ck" "$work/bad.ck"
for f in "$work"/z3tp.ck.shard*; do cp "$f" "$work/bad.ck${f#"$work"/z3tp.ck}"; done
"$py" "$check" "$work/bad.ck" "$work/z3tp.st" >/dev/null || fail "a copy of the checkpoint differs"
"$py" "$check" --swap "$work/bad.ck.shard2-0-of-4" || fail "no piece to plant an error in"
out=$("$py" "$check" "$work/bad.ck" "$work/z3tp.st")
[ $? -ne 0 ] && echo "$out" | grep -q "bytes differ" || fail "planted wrong box not found: $out"
echo "planted wrong box: $(echo "$out" | head -1)"

# edit the commit's index (and drop its checksum): EDIT is python on `idx`, the index
edit() {
    "$py" - "$work/tppp.ck" "$work/$1.ck" "$2" <<'PY'
import json, struct, sys
raw = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
h = json.loads(raw[8:8 + n])
meta = h["__metadata__"]
del meta["cohort.checksum"]
idx = json.loads(meta["index"])
exec(sys.argv[3])
meta["index"] = json.dumps(idx)
text = json.dumps(h).encode()
text += b" " * (-(8 + len(text)) % 8)
open(sys.argv[2], "wb").write(struct.pack("<Q", len(text)) + text + raw[8 + n:])
PY
    for f in "$work"/tppp.ck.shard*; do cp "$f" "$work/$1.ck${f#"$work"/tppp.ck}"; done
}
key=transformer.h.1.attn.c_attn.weight
edit same "pass"
"$cohort" export "$work/same.ck" -o "$work/same.st" && cmp -s "$work/same.st" "$work/tppp.st" ||
    fail "the index rewritten unchanged does not export the same file"
edit missing "idx['$key'].pop()"
expect 2 "lacks part of '$key' [0:1,80:96]" "$cohort" export "$work/missing.ck" -o "$work/x"
edit overlap "idx['$key'].append(idx['$key'][0])"
expect 2 "has overlapping pieces '$key[" "$cohort" export "$work/overlap.ck" -o "$work/x"
edit wrongname "e = idx['$key'][0]; e[1] = e[1].replace('[0:32,', '[0:31,')"
expect 2 "names piece '$key[0:31," "$cohort" export "$work/wrongname.ck" -o "$work/x"
expect 2 "names piece '$key[0:31," "$cohort" eval --checkpoint "$work/wrongname.ck" \
    --data "$work/c_train_000000.bin" --batch 1 --seq 32 --batches 1 --threads 1

# the layout of arena ranges before pieces (a commit file of it) is refused by name
tail -c +2 "$src/tests/fuzz/corpus/ckpt_shards/commit_old_layout" >"$work/old.ck"
expect 2 "is in the sharded layout of arena ranges (before HF-named pieces)" \
    "$cohort" export "$work/old.ck" -o "$work/x"
par_done "sharded checkpoints are HF-named pieces that any safetensors reader assembles"
