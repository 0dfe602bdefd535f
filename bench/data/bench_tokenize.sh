#!/usr/bin/env bash
# bench_tokenize.sh: GPT-2 tokenization throughput of `cohort prepare` against the JavaScript
# encoder of the npm package gpt-3-encoder 1.1.4 (the tests' oracle), side by side in one run,
# on WikiText-2 valid + test repeated REPEAT times. Both produce the same ids. cohort is timed as
# a whole process (start, table loading, reading, writing the shard); the anchor is timed after
# a warm-up pass in the same process (JIT compiled, its cache filled), which favours the anchor.
# usage: COHORT=build/cohort COHORT_DATA_DIR=... bench/data/bench_tokenize.sh [REPEAT]
set -euo pipefail
repeat=${1:-8}
data=${COHORT_DATA_DIR:?set COHORT_DATA_DIR}
cohort=${COHORT:?set COHORT to the cohort binary}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
oracle=${NPM_DIR:-$work/npm}
if [ ! -f "$oracle/node_modules/gpt-3-encoder/Encoder.js" ]; then
    npm install --prefix "$oracle" --no-audit --no-fund --silent gpt-3-encoder@1.1.4 >/dev/null
fi
files=()
for i in $(seq 1 "$repeat"); do
    files+=("$data/wikitext-2/valid.txt" "$data/wikitext-2/test.txt")
done
bytes=$(cat "${files[@]}" | wc -c)

t0=$(date +%s.%N)
"$cohort" prepare --tokenizer gpt2 --encoder "$data/gpt2-bpe/encoder.json" \
    --vocab "$data/gpt2-bpe/vocab.bpe" --out "$work/b" "${files[@]}" >"$work/prep.out"
t1=$(date +%s.%N)
read -r ctok _ < <(sed -E 's/.*: ([0-9]+) train tokens.*/\1/' "$work/prep.out")
read -r atok asec < <(node "$here/bpe_anchor.js" "$oracle" "$repeat" \
                          "$data/wikitext-2/valid.txt" "$data/wikitext-2/test.txt")
/usr/bin/python3 - "$bytes" "$ctok" "$t0" "$t1" "$atok" "$asec" <<'PY'
import sys
b, ctok, t0, t1, atok, asec = sys.argv[1:]
b, ctok, atok, asec = int(b), int(ctok), int(atok), float(asec)
csec = float(t1) - float(t0)
print("corpus: %.1f MB, %d tokens (cohort adds one end-of-text token per file)" % (b / 1e6, ctok))
print("%-36s %10s %12s" % ("", "MB/s", "tokens/s"))
print("%-36s %10.2f %12.0f" % ("cohort prepare (whole process)", b / csec / 1e6, ctok / csec))
print("%-36s %10.2f %12.0f" % ("gpt-3-encoder 1.1.4 (node, warm)", b / asec / 1e6, atok / asec))
print("ratio cohort / anchor: %.2fx" % ((b / csec) / (b / asec)))
PY
