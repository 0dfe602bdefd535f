#!/usr/bin/env bash
# test_data_prepare.sh: `cohort prepare`: shard layout, shard rollover, the validation split,
# paragraph documents, end-of-text separators, reruns (the stale shards removed, nothing else),
# and usage errors (exit 2, message naming the bad value) and runtime errors (exit 1), with
# nothing written on bad input.
set -uo pipefail
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
skips=0 # skip SUBTEST REASON: a part that cannot run here; the test then exits 77 (skipped)
skip() { echo "SKIP $1: $2"; skips=$((skips + 1)); }
py=${COHORT_PYTHON:-/usr/bin/python3}

# expect CODE NEEDLE -- command...: exit code and a stderr substring.
expect() {
    local code=$1 needle=$2
    shift 3
    "$@" >"$work/out" 2>"$work/err"
    local rc=$?
    [ "$rc" -eq "$code" ] || fail "'$*' exited $rc, expected $code: $(cat "$work/err")"
    grep -qF -- "$needle" "$work/err" || fail "'$*': stderr lacks '$needle': $(cat "$work/err")"
}

# Shard contents as "count tok tok ..." (checks the header fields on the way).
dump() {
    "$py" - "$1" <<'PY'
import struct, sys
data = open(sys.argv[1], "rb").read()
magic, version, count = struct.unpack("<3i", data[:12])
assert magic == 20240520 and version == 1, (magic, version)
assert all(b == 0 for b in data[12:1024]), "header padding not zero"
assert len(data) == 1024 + 2 * count, "size disagrees with count"
print(count, *struct.unpack("<%dH" % count, data[1024:]))
PY
}

printf 'abc' >"$work/a.txt"
printf 'de\n\nfg\n\nh' >"$work/b.txt"

# Byte tokenizer, one shard: the bytes of both files, no separator.
"$COHORT" prepare --tokenizer byte --out "$work/x" "$work/a.txt" "$work/b.txt" >"$work/out" || fail "byte prepare"
got=$(dump "$work/x_train_000000.bin")
[ "$got" = "12 97 98 99 100 101 10 10 102 103 10 10 104" ] || fail "byte shard: $got"
grep -q "prepared 2 documents: 12 train tokens in 1 shard(s), 0 val tokens" "$work/out" || fail "summary: $(cat "$work/out")"
[ ! -e "$work/x_val_000000.bin" ] || fail "empty validation split wrote a shard"

# Shard rollover: 12 tokens, 5 per shard -> 5, 5, 2.
"$COHORT" prepare --tokenizer byte --shard-tokens 5 --out "$work/r" "$work/a.txt" "$work/b.txt" >/dev/null || fail "rollover"
[ "$(dump "$work/r_train_000000.bin")" = "5 97 98 99 100 101" ] || fail "rollover shard 0"
[ "$(dump "$work/r_train_000001.bin")" = "5 10 10 102 103 10" ] || fail "rollover shard 1"
[ "$(dump "$work/r_train_000002.bin")" = "2 10 104" ] || fail "rollover shard 2"
ls "$work"/r_*.bin | wc -l | grep -qx 3 || fail "rollover wrote extra shards"

# A rerun with the same prefix removes the shards it did not write, naming how many and the
# pattern: an old validation shard (its text is now in train) and the surplus of a run with
# more, smaller shards. Files of other names, other digit counts and folders stay.
mkdir "$work/re"
"$COHORT" prepare --tokenizer byte --documents paragraph --val-fraction 0.3 --out "$work/re/w" "$work/b.txt" >/dev/null || fail "rerun: val run"
[ -e "$work/re/w_val_000000.bin" ] || fail "rerun: the first run wrote no val shard"
"$COHORT" prepare --tokenizer byte --out "$work/re/w" "$work/b.txt" >"$work/out" || fail "rerun: no-val run"
[ ! -e "$work/re/w_val_000000.bin" ] || fail "rerun without --val-fraction left the old val shard"
grep -qxF "removed 1 old shard(s) that this run did not write: $work/re/w_{train,val}_NNNNNN.bin" "$work/out" || fail "rerun: removal line: $(cat "$work/out")"
"$COHORT" prepare --tokenizer byte --shard-tokens 1 --out "$work/re/s" "$work/a.txt" "$work/b.txt" >/dev/null || fail "rerun: 12 shards"
for f in s_train_notes.txt s_train_0.bin s_train_0000013.bin s_val_00001.bin s_train_000020.bin.tmp.1 s_train_000020.binx t_train_000020.bin; do
    : >"$work/re/$f"
done
mkdir "$work/re/s_val_000007.bin"
"$COHORT" prepare --tokenizer byte --shard-tokens 5 --out "$work/re/s" "$work/a.txt" "$work/b.txt" >"$work/out" || fail "rerun: 3 shards"
[ "$(cd "$work/re" && LC_ALL=C ls -d s_train_0*.bin s_val_0*.bin | tr '\n' ' ')" = "s_train_0.bin s_train_000000.bin s_train_000001.bin s_train_0000013.bin s_train_000002.bin s_val_000007.bin s_val_00001.bin " ] ||
    fail "rerun with fewer shards: $(ls "$work/re" | tr '\n' ' ')"
for f in s_train_notes.txt s_train_000020.bin.tmp.1 s_train_000020.binx t_train_000020.bin w_train_000000.bin; do
    [ -e "$work/re/$f" ] || fail "rerun removed '$f', not a shard of this prefix"
done
grep -qF "removed 9 old shard(s)" "$work/out" || fail "rerun: removal count: $(cat "$work/out")"
# A failed run removes nothing.
"$COHORT" prepare --tokenizer byte --val-fraction 0.9 --out "$work/re/s" "$work/a.txt" >/dev/null 2>&1 && fail "rerun: a failing run passed"
[ -e "$work/re/s_train_000002.bin" ] || fail "a failed run removed shards"

# The GPT-2 tables: the ones scripts/setup.sh installs (COHORT_GPT2_DIR, found by default), else
# COHORT_DATA_DIR's copy; when both exist they must be byte-identical.
data=${COHORT_DATA_DIR:-}
gpt2=${COHORT_GPT2_DIR:-}
[ -f "$gpt2/encoder.json" ] || gpt2=$data/gpt2-bpe
if [ -f "$gpt2/encoder.json" ] && [ -f "$data/gpt2-bpe/encoder.json" ]; then
    for f in encoder.json vocab.bpe; do
        cmp -s "$gpt2/$f" "$data/gpt2-bpe/$f" || fail "GPT-2 table $f: '$gpt2/$f' differs from '$data/gpt2-bpe/$f'"
    done
fi
if [ -f "$gpt2/encoder.json" ]; then
    enc=(--tokenizer gpt2 --encoder "$gpt2/encoder.json" --vocab "$gpt2/vocab.bpe")
    # Paragraph documents: each starts with 50256, the text is kept whole.
    printf 'Hello world\n\nHello world' >"$work/p.txt"
    "$COHORT" prepare "${enc[@]}" --documents paragraph --out "$work/g" "$work/p.txt" >/dev/null || fail "gpt2 prepare"
    got=$(dump "$work/g_train_000000.bin")
    [ "$got" = "7 50256 15496 995 628 50256 15496 995" ] || fail "gpt2 paragraphs: $got" # 628 = "\n\n"
    # Validation split: about a quarter of the tokens, whole documents, the first one included.
    for i in $(seq 1 20); do printf 'Document number %d says hello.\n' "$i" >"$work/d$i.txt"; done
    "$COHORT" prepare "${enc[@]}" --val-fraction 0.25 --out "$work/v" "$work"/d{1..20}.txt >"$work/out" || fail "val split"
    train=$(dump "$work/v_train_000000.bin" | cut -d' ' -f1)
    val=$(dump "$work/v_val_000000.bin" | cut -d' ' -f1)
    "$py" -c "import sys; t,v=$train,$val; sys.exit(0 if 0.2 <= v/(t+v) <= 0.3 else 1)" || fail "val share $val of $((train + val))"
    [ "$(dump "$work/v_val_000000.bin" | cut -d' ' -f2)" = 50256 ] || fail "val does not start with a document"
    # Found by default (gpt2 is the default tokenizer): the same tokens without any flag, from
    # the folder COHORT_GPT2_DIR names; a folder without them is named in the error.
    if [ -f "${COHORT_GPT2_DIR:-}/encoder.json" ]; then
        "$COHORT" prepare --documents paragraph --out "$work/d" "$work/p.txt" >/dev/null || fail "gpt2 prepare, default tables"
        [ "$(dump "$work/d_train_000000.bin")" = "$got" ] || fail "gpt2 default tables: $(dump "$work/d_train_000000.bin")"
    else
        skip "gpt2 default tables" "scripts/setup.sh did not install them at '${COHORT_GPT2_DIR:-}'"
    fi
    COHORT_GPT2_DIR="$gpt2" "$COHORT" prepare --out "$work/e" "$work/p.txt" >/dev/null || fail "COHORT_GPT2_DIR=$gpt2"
    mkdir "$work/empty"
    COHORT_GPT2_DIR="$work/empty" expect 2 "--tokenizer gpt2: cannot read '$work/empty/encoder.json'" -- "$COHORT" prepare --out "$work/n" "$work/a.txt"
    COHORT_GPT2_DIR="$work/empty" expect 2 "cannot read '$work/empty/vocab.bpe'" -- "$COHORT" prepare --encoder "$gpt2/encoder.json" --out "$work/n" "$work/a.txt"
    ls "$work"/n_* >/dev/null 2>&1 && fail "a refused prepare wrote shards"
    printf '{"a": 0}' >"$work/enc.json"
    expect 2 "'$work/enc.json': no token for byte 0x00" -- "$COHORT" prepare --tokenizer gpt2 --encoder "$work/enc.json" --vocab "$gpt2/vocab.bpe" --out "$work/n" "$work/a.txt"
    echo "ran gpt2 cases: paragraphs, validation split, default tables, encoder errors"
else
    skip "gpt2 cases" "no GPT-2 tables (run scripts/setup.sh, or set COHORT_DATA_DIR)"
fi

# A vocabulary with ids beyond uint16 is refused before anything is written.
"$py" - "$work" <<'PY'
import json, sys
pr = lambda c: 0x21 <= c <= 0x7E or 0xA1 <= c <= 0xAC or c >= 0xAE
alpha = lambda b: chr(b) if pr(b) else chr(256 + sum(1 for c in range(b) if not pr(c)))
enc = {alpha(b): b for b in range(256)}
enc["ab"] = 70000
json.dump(enc, open(sys.argv[1] + "/wide.json", "w"))
open(sys.argv[1] + "/wide.bpe", "w").write("#version: 0.2\na b\n")
PY
expect 2 "the tokenizer has 70001 ids: the shard format stores uint16 tokens" -- \
    "$COHORT" prepare --tokenizer gpt2 --encoder "$work/wide.json" --vocab "$work/wide.bpe" --out "$work/n" "$work/a.txt"

expect 2 "invalid --tokenizer 'bpe': valid are byte, gpt2" -- "$COHORT" prepare --tokenizer bpe --out "$work/n" "$work/a.txt"
# GPT-2 tables with the byte tokenizer would be ignored: refused, naming the option.
expect 2 "cohort prepare: error: --encoder '$work/nope' is read only by the gpt2 tokenizer, and this one is byte: drop --encoder" -- \
    "$COHORT" prepare --tokenizer byte --encoder "$work/nope" --merges x --out "$work/n" "$work/a.txt"
expect 2 "--merges 'x' is read only by the gpt2 tokenizer, and this one is byte: drop --merges" -- \
    "$COHORT" prepare --tokenizer byte --merges x --out "$work/n" "$work/a.txt"
expect 2 "missing --out PREFIX" -- "$COHORT" prepare --tokenizer byte "$work/a.txt"
expect 2 "no input files" -- "$COHORT" prepare --tokenizer byte --out "$work/n"
# Numbers: one phrasing naming the option and the value; no trailing garbage, no empty value.
# expect_line CODE LINE -- command...: as expect, and stderr is exactly LINE.
expect_line() {
    local line=$2
    expect "$@"
    [ "$(cat "$work/err")" = "$line" ] || fail "'${*:4}': stderr is not exactly '$line': $(cat "$work/err")"
}
for bad in 0 -5 5x '' ' 5' 2147483648; do
    expect_line 2 "cohort prepare: error: invalid --shard-tokens '$bad': must be an integer from 1 to 2147483647" -- \
        "$COHORT" prepare --tokenizer byte --shard-tokens "$bad" --out "$work/n" "$work/a.txt"
done
for bad in 1.5 -0.1 0.5x '' nan; do
    expect_line 2 "cohort prepare: error: invalid --val-fraction '$bad': must be a number from 0 to 1" -- \
        "$COHORT" prepare --tokenizer byte --val-fraction "$bad" --out "$work/n" "$work/a.txt"
done
expect_line 2 "cohort prepare: error: invalid --val-fraction '1': must be below 1 (no tokens would be left for training)" -- \
    "$COHORT" prepare --tokenizer byte --val-fraction 1 --out "$work/n" "$work/a.txt"
expect 2 "invalid --documents 'lines'" -- "$COHORT" prepare --tokenizer byte --documents lines --out "$work/n" "$work/a.txt"
expect 2 "unknown option '--bogus'" -- "$COHORT" prepare --bogus
expect 1 "cannot open '$work/missing.txt'" -- "$COHORT" prepare --tokenizer byte --out "$work/n" "$work/missing.txt"
expect 2 "no tokens went to the train split (1 document(s)" -- "$COHORT" prepare --tokenizer byte --val-fraction 0.9 --out "$work/n" "$work/a.txt"
# A missing value, a missing or non-folder --out folder: usage errors naming them, before any
# input is read (the missing input file is not reached).
expect_line 2 "cohort prepare: error: option '--out' needs a value (see 'cohort prepare --help')" -- "$COHORT" prepare --out
expect_line 2 "cohort prepare: error: option '--val-fraction' needs a value (see 'cohort prepare --help')" -- "$COHORT" prepare "$work/a.txt" --val-fraction
expect_line 2 "cohort prepare: error: invalid --out '$work/no/such/dir/n': folder '$work/no/such/dir' does not exist (create it)" -- \
    "$COHORT" prepare --tokenizer byte --out "$work/no/such/dir/n" "$work/missing.txt"
expect 2 "invalid --out '$work/a.txt/n': '$work/a.txt' is not a folder" -- "$COHORT" prepare --tokenizer byte --out "$work/a.txt/n" "$work/a.txt"
! ls "$work"/n_* >/dev/null 2>&1 || fail "bad input wrote shards: $(ls "$work"/n_*)"
"$COHORT" prepare --help | grep -q "usage: cohort prepare" || fail "--help"

[ "$fails" -eq 0 ] || { echo "$fails failure(s)"; exit 1; }
[ "$skips" -eq 0 ] || { echo "$skips part(s) skipped"; exit 77; }
echo "ok"
