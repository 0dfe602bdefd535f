# engine_lib.sh: what bench/engine's scripts share, sourced (not run): a work folder removed on
# exit, byte shards of the repository's README and docs, the benchmark model and the median of a
# run's tokens/s.
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# engine_prepare COHORT: the shards, prepared by that build, and the array `model` (4 layers, dim
# 256, 4 heads, byte vocabulary, seq 128, micro-batch 4, one thread a rank) that trains on them.
engine_prepare() {
    cat "$root"/README.md "$root"/docs/*.md > "$work/corpus.txt"
    "$1" prepare --tokenizer byte --documents paragraph --out "$work/c" "$work/corpus.txt" >/dev/null
    model=(--vocab 256 --layers 4 --heads 4 --dim 256 --seq 128 --batch 4 --threads 1
           --data "$work/c_train_*.bin" --val-every 1000000)
}

median_tps() { # metrics file: median tokens/s of the steps after the first
    python3 -c 'import json,sys
v=sorted(json.loads(l)["tokens_per_s"] for l in open(sys.argv[1]).read().splitlines()[1:])
print(v[len(v)//2] if v else 0)' "$1"
}
