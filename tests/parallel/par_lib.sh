# par_lib.sh: the setup every tests/parallel/test_*.sh shares, sourced (not a test itself):
# strict variables, a work directory removed on exit, failure counting, corpus preparation and
# the small-model arguments.
set -u
cohort=${COHORT:?}
src=${COHORT_SOURCE_DIR:?}
py=${COHORT_PYTHON:-/usr/bin/python3}
work=$(mktemp -d)
launcher= # a background job's pid, killed on exit if a test leaves it running
trap '[ -n "$launcher" ] && kill -9 "$launcher" 2>/dev/null; rm -rf "$work"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# par_prepare [--val-fraction F] [FILE...]: byte-tokenised shards $work/c_train_*.bin (and
# c_val_* with a validation fraction) of FILE... (default: the README and the public headers),
# one document per paragraph.
par_prepare() {
    local opts=()
    if [ "${1:-}" = --val-fraction ]; then
        opts=(--val-fraction "$2")
        shift 2
    fi
    if [ $# -eq 0 ]; then
        set -- "$src"/README.md "$src"/include/cohort/*.h
    fi
    cat "$@" > "$work/corpus.txt"
    "$cohort" prepare --tokenizer byte --documents paragraph "${opts[@]}" --out "$work/c" \
        "$work/corpus.txt" >/dev/null || fail "prepare"
}

# par_model VOCAB LAYERS HEADS DIM SEQ: sets the array `model` to a model of that shape trained
# on the shards of par_prepare with one thread; tests append their own options.
par_model() {
    model=(--vocab "$1" --layers "$2" --heads "$3" --dim "$4" --seq "$5" --threads 1
           --data "$work/c_train_*.bin")
}

# par_check NAME REF RUN [par_compare.py options]: RUN's metrics and final parameters against
# REF's ($work/NAME.jsonl and .bin, model $V $C $L $T), the figures printed, a broken bound
# counted as a failure.
# par_noise OPTIONS...: the noise control of par_compare.py --noise: one device with the model
# and the reference's global batch, reordering its own sums (2 threads; OPTIONS give another
# micro-batch split). Once it exists, par_check and par_cmp hold runs to the bounds it sets.
par_noise() {
    "$cohort" train "${model[@]}" "$@" --threads 2 --metrics "$work/noise.jsonl" \
        --dump-params "$work/noise.bin" >"$work/noise.out" 2>&1 ||
        fail "noise control: $(tail -3 "$work/noise.out")"
}
# the --noise arguments of par_compare.py, once par_noise has run
par_noise_args() {
    [ -s "$work/noise.bin" ] && printf '%s\n' --noise "$work/noise.jsonl" "$work/noise.bin"
}

par_check() {
    local name=$1 ref=$2 run=$3
    shift 3
    local noise
    mapfile -t noise < <(par_noise_args)
    "$py" "$src/tests/parallel/par_compare.py" "${noise[@]}" "$@" "$work/$ref.jsonl" "$work/$ref.bin" \
        "$work/$run.jsonl" "$work/$run.bin" "$V" "$C" "$L" "$T" >"$work/$run.cmp" ||
        fail "$name: $(cat "$work/$run.cmp")"
    echo "$name: $(cat "$work/$run.cmp")"
}

# par_cmp REF RUN: par_compare.py's figures of RUN against REF into $work/RUN.cmp, whatever
# its verdict (the caller applies its own bounds); counts a failure when they cannot be
# compared. par_loss_err / par_param_err RUN: its loss max relative error and worst tensor's
# relative L2 error from that file.
par_cmp() {
    local noise
    mapfile -t noise < <(par_noise_args)
    "$py" "$src/tests/parallel/par_compare.py" "${noise[@]}" "$work/$1.jsonl" "$work/$1.bin" "$work/$2.jsonl" \
        "$work/$2.bin" "$V" "$C" "$L" "$T" >"$work/$2.cmp" 2>&1
    [ $? -le 1 ] || fail "$2: cannot compare: $(cat "$work/$2.cmp")"
}
par_loss_err() { sed -nE 's/.*loss max rel err ([^;]+);.*/\1/p' "$work/$1.cmp"; }
par_param_err() { sed -nE 's/.*worst tensor l2 rel err ([^ ]+) .*/\1/p' "$work/$1.cmp"; }

# par_bf16_mesh_model: the corpus and the model of test_parallel_bf16_mesh.sh (and of
# bf16_mesh_drift.sh, which measures its 30-step figures over seeds): 30 steps of bf16-mixed,
# micro-batches 2 x accumulation 4.
par_bf16_mesh_model() {
    par_prepare --val-fraction 0.1 "$src/tests/parallel/equiv_corpus.txt"
    V=256 C=32 L=2 T=32
    par_model $V $L 2 $C $T
    model+=(--lr 1e-3 --warmup 3 --deterministic --shuffle on --steps 30 --precision bf16-mixed
            --micro-batch 2 --grad-accum 4)
}

# par_train NAME RANKS OPTIONS...: `cohort train` with the model and OPTIONS on RANKS ranks
# under cohort run, its metrics, parameters and output kept as $work/NAME.*; returns 1 (and
# counts a failure) when the run fails.
par_train() {
    local name=$1 n=$2
    shift 2
    "$cohort" run --nproc-per-node "$n" "$cohort" train "${model[@]}" "$@" \
        --metrics "$work/$name.jsonl" --dump-params "$work/$name.bin" >"$work/$name.out" 2>&1 ||
        { fail "$name: $(tail -3 "$work/$name.out")"; return 1; }
}

# One step from one state (bf16-mixed's discriminating check, par_compare.py --update):
# par_step_state OPTIONS...: single's state after 10 steps of the model, the checkpoint
# $work/step10.st and its parameters $work/step10.bin.
par_step_state() {
    "$cohort" train "${model[@]}" "$@" --save "$work/step10.st" --stop-at 10 \
        --dump-params "$work/step10.bin" >"$work/step10.out" 2>&1 ||
        fail "the state after 10 steps: $(tail -3 "$work/step10.out")"
}
# par_one_step NAME RANKS OPTIONS...: step 11 from that state on RANKS ranks (cohort run), its
# loss and parameters kept as $work/NAME.jsonl and .bin; returns 1 (a failure counted) if it fails.
par_one_step() {
    local name=$1 n=$2
    shift 2
    "$cohort" run --nproc-per-node "$n" "$cohort" train "${model[@]}" "$@" \
        --resume "$work/step10.st" --stop-at 11 --metrics "$work/$name.jsonl" \
        --dump-params "$work/$name.bin" >"$work/$name.out" 2>&1 ||
        { fail "$name: $(tail -3 "$work/$name.out")"; return 1; }
}
# par_step_check NAME REF RUN TERMS [--control]: RUN's step against REF's (both par_one_step)
# held to TERMS x 2^-24 on the median update error, or (--control) at least 10x beyond it.
par_step_check() {
    local name=$1 ref=$2 run=$3 terms=$4
    shift 4
    "$py" "$src/tests/parallel/par_compare.py" --update "$work/step10.bin" --terms "$terms" "$@" \
        "$work/$ref.jsonl" "$work/$ref.bin" "$work/$run.jsonl" "$work/$run.bin" \
        "$V" "$C" "$L" "$T" >"$work/$run.step" 2>&1 || fail "$name: $(cat "$work/$run.step")"
    echo "$name: $(cat "$work/$run.step")"
}
# same_bits NAME A B: runs A and B ended with the same losses and parameters, bit for bit.
same_bits() {
    cmp -s "$work/$2.bin" "$work/$3.bin" &&
        [ "$(losses "$work/$2.jsonl")" = "$(losses "$work/$3.jsonl")" ] &&
        echo "ok   $1: the same bits" || fail "$1: $2 and $3 differ (they sum in the same order)"
}

# par_memory_setup: skips the test (exit 77) where the peak resident size cannot be reset, and
# sets rss=0 under AddressSanitizer, where the resident peak means nothing (shadow memory,
# quarantine) and only the model state (resident pages of the arenas) is compared; else rss=1.
par_memory_setup() {
    [ -r /proc/self/clear_refs ] ||
        { echo "no /proc/self/clear_refs: peak RSS cannot be reset"; exit 77; }
    rss=1
    grep -qs '^COHORT_SANITIZE:BOOL=ON' "${COHORT_BUILD_DIR:-/nonexistent}/CMakeCache.txt" && rss=0
}

# The "loss" of every line of a metrics file, and of the last one; the last "step".
losses() { sed -E 's/.*"loss":([^,]+),.*/\1/' "$1"; }
last_loss() { tail -1 "$1" | sed -E 's/.*"loss":([^,]+),.*/\1/'; }
last_step() { tail -1 "$1" 2>/dev/null | sed -nE 's/.*"step":([0-9]+),.*/\1/p'; }

# expect CODE MESSAGE COMMAND...: COMMAND exits CODE and its output holds MESSAGE.
expect() {
    local code=$1 msg=$2 out rc
    shift 2
    out=$("$@" 2>&1)
    rc=$?
    [ $rc -eq "$code" ] && echo "$out" | grep -qF -- "$msg" || fail "$*: rc $rc, output: $out"
    [ $rc -eq "$code" ] && echo "ok   $msg"
}

# rank_pid LAUNCHER RANK: the pid of the worker of RANK among the children of cohort run LAUNCHER.
rank_pid() {
    for p in $(pgrep -P "$1"); do
        tr '\0' '\n' < /proc/$p/environ 2>/dev/null | grep -qx "RANK=$2" && { echo $p; return; }
    done
}

# kill_at_step METRICS STEP: once the job of $launcher has logged STEP to METRICS, kill -9 its
# rank 1; sets killed to the step it was killed at (0: it ended first or never got there, after
# 240 s: a loaded machine, an ASan build; the job ending first ends the wait) and killed_at to
# the time of the kill.
kill_at_step() {
    local st pid
    killed=0 killed_at=
    for _ in $(seq 1 12000); do
        st=$(last_step "$1")
        if [ "${st:-0}" -ge "$2" ]; then
            pid=$(rank_pid "$launcher" 1)
            [ -n "$pid" ] && kill -9 "$pid" && killed=$st && killed_at=$(date +%s.%N)
            return
        fi
        kill -0 "$launcher" 2>/dev/null || return
        sleep 0.02
    done
}

# par_equiv_setup: the pipeline equivalence tests' model and corpus (V C L T, ${model[@]}: 30
# deterministic steps) and its single-process reference, $work/single.{jsonl,bin} at micro-batch
# 2 x 4; skips (exit 77) without numpy, which the comparison needs.
par_equiv_setup() {
    "$py" -c "import numpy" 2>/dev/null || { echo "numpy missing"; exit 77; }
    par_prepare --val-fraction 0.1 "$src/tests/parallel/equiv_corpus.txt"
    V=256 C=32 L=4 T=32
    par_model $V $L 2 $C $T
    model+=(--lr 1e-3 --warmup 3 --deterministic --shuffle on --steps 30)
}

par_equiv_single() {
    "$cohort" train "${model[@]}" --micro-batch 2 --grad-accum 4 --metrics "$work/single.jsonl" \
        --dump-params "$work/single.bin" >"$work/single.out" 2>&1 ||
        fail "single: $(tail -3 "$work/single.out")"
    par_noise --micro-batch 1 --grad-accum 8
}

# par_run_tied NAME RANKS OPTIONS...: par_train, and every pipeline checks its tied embedding
# at the end
par_run_tied() {
    par_train "$@" || return 1
    grep -q "tied embedding: the first and last stage's copies are bit-identical" \
        "$work/$1.out" || fail "$1: the tied embedding's copies were not checked"
}

# par_holds NAME STAGE TEXT: the start-up line of STAGE in NAME's output says TEXT
par_holds() {
    grep -qF "stage $2: $3" "$work/$1.out" ||
        fail "$1: stage $2 should hold '$3': $(grep "stage $2:" "$work/$1.out")"
}

# par_done MESSAGE: prints MESSAGE when nothing failed; exits 1 when something did.
par_done() {
    [ $fails -eq 0 ] && echo "$1"
    exit $((fails > 0))
}
