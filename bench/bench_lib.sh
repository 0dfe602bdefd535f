# bench_lib.sh: what the side-by-side benchmarks share, sourced (not run): the build
# and data directories, a work directory, the fortunes corpus as GPT-2 BPE shards, a command
# shown as one would type it, waiting for a quiet machine before a round, and the collective
# benchmarks' rounds (bench_comm_trio, bench_comm_py).
# Expects `root` (the checkout) and optional $1 (the build directory); sets build, cohort,
# data_dir, work (removed on exit unless KEEP names a directory to keep it in).
build=$(cd "${1:-$root/build}" && pwd)
cohort=$build/cohort
# the data directory: COHORT_DATA_DIR, else the build's (its CMake cache), else the default one
data_dir=${COHORT_DATA_DIR:-$(sed -n 's/^COHORT_DATA_DIR:PATH=//p' "$build/CMakeCache.txt" 2>/dev/null)}
data_dir=${data_dir:-$root/../shared/data}
if [ -n "${KEEP:-}" ]; then
    work=$(mkdir -p "$KEEP" && cd "$KEEP" && pwd)
else
    work=$(mktemp -d)
fi
trap '[ -n "${KEEP:-}" ] || rm -rf "$work"' EXIT

# bench_fortune_files: the text files of Debian's `fortunes` package (the main job's corpus)
# into the array `files`.
bench_fortune_files() {
    local corpus=/usr/share/games/fortunes f
    [ -d "$corpus" ] || { echo "no $corpus: apt-get install fortunes (scripts/setup.sh)" >&2; exit 2; }
    files=()
    for f in "$corpus"/*; do
        case "$f" in *.dat | *.u8) ;; *) [ -f "$f" ] && files+=("$f") ;; esac
    done
}
# bench_fortunes_bytes: those files' bytes as tokens into $work/bytes_*.bin (vocabulary 256).
bench_fortunes_bytes() {
    bench_fortune_files
    "$cohort" prepare --tokenizer byte --out "$work/bytes" "${files[@]}" >/dev/null
}
# bench_fortunes: the files into `files`, and their GPT-2 BPE tokens into $work/fortunes_*.bin
# (vocabulary 50257).
bench_fortunes() {
    [ -f "$data_dir/gpt2-bpe/encoder.json" ] ||
        { echo "no GPT-2 BPE tables in $data_dir/gpt2-bpe: set COHORT_DATA_DIR" >&2; exit 2; }
    bench_fortune_files
    "$cohort" prepare --tokenizer gpt2 --encoder "$data_dir/gpt2-bpe/encoder.json" \
        --vocab "$data_dir/gpt2-bpe/vocab.bpe" --out "$work/fortunes" "${files[@]}" >/dev/null
}

# show ARGS...: a command as one would type it (quotes only where the shell needs them)
show() {
    local a out=""
    for a in "$@"; do
        case $a in *[!A-Za-z0-9_./=:+-]*) a="'$a'" ;; esac
        out+="${out:+ }$a"
    done
    echo "$out"
}
load1() { cut -d' ' -f1 /proc/loadavg; }
above() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a > b) }'; }

# bench_wait_quiet ROUND: with MAX_LOAD (default 1.0; 0 waits for nothing) wait until the
# 1-minute load average is at most MAX_LOAD, looking every 60 s, at most LOAD_WAIT s (default
# 1200) over the whole run; returns 1 when it gave up waiting. bench_waited counts the seconds.
bench_waited=0
bench_wait_quiet() {
    local max=${MAX_LOAD:-1.0} limit=${LOAD_WAIT:-1200}
    [ "$max" != 0 ] || return 0
    while above "$(load1)" "$max" && [ "$bench_waited" -lt "$limit" ]; do
        echo "round $1: load average $(load1) above $max, waiting 60 s ($bench_waited s so far)"
        sleep 60
        bench_waited=$((bench_waited + 60))
    done
    ! above "$(load1)" "$max"
}

# ---- the collective benchmarks across (simulated) nodes: bench/comm/hier.sh, bench/cluster ----
# bench_comm_trio RUN BENCH_OPTIONS...: one round of the three compared side by side, each
# started by the caller's function `RUN KIND PROGRAM...`: cohort's hierarchical transport (KIND
# hier, COHORT_COMM_HIER=1), its flat MPI transport (flat, COHORT_COMM_HIER=0) and Open MPI's
# own collective (ompi: mpi_comm_bench).
bench_comm_trio() {
    local run=$1
    shift
    COHORT_COMM_HIER=1 "$run" hier "$build/cohort" bench comm --comm mpi "$@"
    COHORT_COMM_HIER=0 "$run" flat "$build/cohort" bench comm --comm mpi "$@"
    COHORT_COMM_HIER=0 "$run" ompi "$build/mpi_comm_bench" "$@"
}
# bench_comm_transports DIR: the first round's runs in DIR used the transports compared.
bench_comm_transports() {
    grep -q "transport hier" "$1/hier.1" && grep -q "transport mpi" "$1/flat.1"
}
# bench_comm_py ARGS... <<'PY' ...: a Python script (on stdin, given ARGS) that can import
# bench/bench_comm.py's readers of those runs.
bench_comm_py() {
    PYTHONPATH="$root/bench${PYTHONPATH:+:$PYTHONPATH}" "${COHORT_PYTHON:-/usr/bin/python3}" - "$@"
}
