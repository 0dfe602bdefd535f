#!/usr/bin/env bash
# test_data_paragraphs.sh: `cohort prepare --documents paragraph` splits at blank lines that hold
# whitespace (WikiText's " \n", "\r\n", tabs) as well as at "\n\n", keeps every byte, and
# --val-fraction on one WikiText-style file then sends whole paragraphs, about that share, to
# validation; on one whole-file document the error says how to split it. Also prepare's other
# input mistakes: a directory, empty files, an --out that is no prefix (exit 2, the fix named).
set -uo pipefail
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
py=${COHORT_PYTHON:-/usr/bin/python3}

# The bytes of a shard (byte tokenizer: token = byte), written to a file.
bytes() {
    "$py" - "$1" "$2" <<'PY'
import struct, sys
data = open(sys.argv[1], "rb").read()
count = struct.unpack("<3i", data[:12])[2]
open(sys.argv[2], "wb").write(bytes(struct.unpack("<%dH" % count, data[1024:])))
PY
}

# docs FILE: the number of documents prepare counts in FILE, and the shard must hold FILE.
docs() {
    rm -f "$work"/s_*.bin
    "$COHORT" prepare --tokenizer byte --documents paragraph --out "$work/s" "$1" >"$work/out" ||
        { fail "prepare $1: $(cat "$work/out")"; return; }
    bytes "$work/s_train_000000.bin" "$work/back"
    cmp -s "$1" "$work/back" || fail "$1: the shard does not hold the file's bytes"
    sed -n 's/^prepared \([0-9]*\) documents.*/\1/p' "$work/out"
}

# WikiText-2's layout: lines start with a space, blank lines are " \n".
printf ' \n = Valkyria = \n \n Senjo no Valkyria 3 is a game . \n \n It was released . \n \n = = Gameplay = = \n \n As with previous games . \n' >"$work/wiki.txt"
[ "$(docs "$work/wiki.txt")" = 5 ] || fail "wikitext layout: $(cat "$work/out")"
printf 'de\n\nfg\n\nh' >"$work/plain.txt"
[ "$(docs "$work/plain.txt")" = 3 ] || fail "plain \\n\\n: $(cat "$work/out")"
printf 'a\r\n\r\nb\r\n' >"$work/crlf.txt"
[ "$(docs "$work/crlf.txt")" = 2 ] || fail "crlf: $(cat "$work/out")"
printf 'a\n\t \n\n  \nb\n' >"$work/tabs.txt"
[ "$(docs "$work/tabs.txt")" = 2 ] || fail "a run of blank lines with tabs is one separator: $(cat "$work/out")"
printf '\n \nonly\n' >"$work/lead.txt"
[ "$(docs "$work/lead.txt")" = 1 ] || fail "leading blank lines make no document of their own: $(cat "$work/out")"
printf 'one line, no break' >"$work/one.txt"
[ "$(docs "$work/one.txt")" = 1 ] || fail "one line: $(cat "$work/out")"

# --val-fraction on one WikiText-style file: whole paragraphs, about a tenth of the bytes.
"$py" - "$work/big.txt" <<'PY'
import sys
parts = [" = Title = \n \n"]
for i in range(60):
    parts.append(" Paragraph %02d says something about the topic . \n \n" % i)
open(sys.argv[1], "w").write("".join(parts))
PY
"$COHORT" prepare --tokenizer byte --documents paragraph --val-fraction 0.1 --out "$work/v" "$work/big.txt" >"$work/out" ||
    fail "val split of one wikitext file: $(cat "$work/out")"
grep -q "^prepared 61 documents" "$work/out" || fail "val split documents: $(cat "$work/out")"
bytes "$work/v_train_000000.bin" "$work/train.bin"
bytes "$work/v_val_000000.bin" "$work/val.bin"
"$py" - "$work/big.txt" "$work/train.bin" "$work/val.bin" <<'PY' || fail "val split is not whole paragraphs, about 10%"
import re, sys
paras = set(re.findall(r"[^\n]*\S[^\n]*\n(?:[ \t]*\n)*", open(sys.argv[1]).read()))
train, val = (open(p).read() for p in sys.argv[2:])
got = re.findall(r"[^\n]*\S[^\n]*\n(?:[ \t]*\n)*", val)
assert "".join(got) == val and all(g in paras for g in got), "val is not whole paragraphs"
share = len(val) / (len(val) + len(train))
assert 0.07 <= share <= 0.13, share
PY
# Without --documents paragraph one file is one document: validation would take all of it.
"$COHORT" prepare --tokenizer byte --val-fraction 0.1 --out "$work/n" "$work/big.txt" 2>"$work/err"
rc=$?
[ $rc -eq 2 ] && grep -qF "split files into documents with --documents paragraph" "$work/err" ||
    fail "one-document val split: exit $rc, $(cat "$work/err")"
! ls "$work"/n_* >/dev/null 2>&1 || fail "the refused split wrote shards"
"$COHORT" prepare --help | grep -qF "lines of only whitespace" || fail "--help does not describe blank lines"

# line CODE LINE ARGS...: prepare exits CODE, stderr is exactly LINE, no shard is written.
line() {
    local code=$1 want=$2
    shift 2
    (cd "$work" && "$COHORT" prepare --tokenizer byte "$@" >/dev/null 2>"$work/err")
    local rc=$?
    [ $rc -eq "$code" ] && [ "$(cat "$work/err")" = "$want" ] ||
        fail "prepare $*: exit $rc (want $code): $(cat "$work/err") (want: $want)"
    ! ls "$work"/*_train_*.bin "$work"/dir/*.bin >/dev/null 2>&1 || fail "prepare $* wrote shards"
}
rm -f "$work"/*.bin
mkdir "$work/dir"
: >"$work/empty.txt"
line 2 "cohort prepare: error: cannot read 'dir': it is a directory; give the text files in it (e.g. 'dir'/*.txt)" --out n dir
line 2 "cohort prepare: error: the input files are empty: no text to tokenize; give files with text" --out n empty.txt empty.txt
line 2 "cohort prepare: error: invalid --out 'dir/': give a path prefix such as 'dir/data', and the shards are written as PREFIX_train_000000.bin, ..." --out dir/ one.txt
line 2 "cohort prepare: error: invalid --out '': give a path prefix such as 'data', and the shards are written as PREFIX_train_000000.bin, ..." --out '' one.txt
# An empty file among others is still a document (with gpt2, an end-of-text token), as before.
(cd "$work" && "$COHORT" prepare --tokenizer byte --out e empty.txt one.txt >"$work/out") || fail "empty + text"
grep -q "^prepared 2 documents" "$work/out" || fail "empty + text: $(cat "$work/out")"

[ "$fails" -eq 0 ] || { echo "$fails failure(s)"; exit 1; }
echo "ok"
