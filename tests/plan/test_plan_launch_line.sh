#!/usr/bin/env bash
# test_plan_launch_line.sh: the launch lines `cohort plan` prints run as printed once SHARDS and
# N are put in: the top picks on one node are run under `cohort run`; over several nodes the
# line is Open MPI's mpirun with COHORT_COMM=mpi and a slot count per host (never
# `cohort run --nnodes`, whose ranks cannot reach each other), and it runs with its hosts put
# as this one machine.
. "$(dirname "$0")/plan_cli_lib.sh" # cal, fail
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
unset OMP_NUM_THREADS COHORT_COMM COHORT_MPI_PLUGIN
export PATH="$(dirname "$COHORT"):$PATH" # the lines say a bare `cohort`, as the docs do
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" # Open MPI's own leaks
skips=0

cat "$COHORT_SOURCE_DIR/README.md" > "$work/corpus.txt"
cohort prepare --tokenizer byte --documents paragraph --out "$work/c" "$work/corpus.txt" \
    >/dev/null || { echo "FAIL: prepare"; fail=1; }
small=(--layers 2 --dim 64 --heads 4 --vocab 256 --seq 32)

# lines JSON-FILE: the commands of the runnable configurations, one per line.
lines() {
    "$COHORT_PYTHON" -c 'import json,sys
for c in json.load(open(sys.argv[1]))["configurations"]:
    if c.get("runnable") and c.get("command"): print(c["command"])' "$1"
}

# run_line WHAT LINE: LINE with SHARDS and N put in, run by the shell as a user would paste it.
run_line() {
    local what=$1 line=${2//SHARDS/"'$work/c_train_*.bin'"}
    line=${line//--steps N/--steps 2}
    if (cd "$work" && timeout 200 bash -c "$line") >"$work/run.out" 2>&1 &&
        grep -q "done: 2 steps" "$work/run.out"; then
        echo "ok   $what runs: $line"
    else
        echo "FAIL: $what: $line: $(grep -i error "$work/run.out" | head -3)"
        fail=1
    fi
}

# one node: each of the top 3 picks, as printed
cohort plan "${small[@]}" --devices 2 --global-batch 4 --calibration "$cal/measured.json" \
    --top 3 --json >"$work/one.json" || { echo "FAIL: plan on one node"; fail=1; }
n=0
while IFS= read -r line; do
    case $line in
    *"--data SHARDS --steps N"*) run_line "one node, pick $((++n))" "$line" ;;
    *) echo "FAIL: one node: no --data SHARDS --steps N placeholders: $line"; fail=1 ;;
    esac
done < <(lines "$work/one.json")
[ "$n" -ge 1 ] || { echo "FAIL: no runnable line on one node"; fail=1; }

# several nodes: the mpirun form, on GPU presets and on calibrated CPU nodes
multi() {
    local what=$1 want=$2
    shift 2
    local line
    line=$(cohort plan "$@" --json | "$COHORT_PYTHON" -c 'import json,sys
print(json.load(sys.stdin)["configurations"][0]["command"])')
    if [[ $line == $want* && $line == *" --data SHARDS --steps N"* && $line != *"cohort run"* ]]; then
        echo "ok   $what: $line"
    else
        echo "FAIL: $what: expected '$want...': $line"
        fail=1
    fi
    last_line=$line
}
multi "4 GPU nodes" "mpirun -np 32 --host HOST1:8,HOST2:8,HOST3:8,HOST4:8 -x COHORT_COMM=mpi cohort train " \
    --model gpt2 --hw a100-80gb --nodes 4 --global-batch 512 --link-inter 25:5
multi "8 GPU nodes" "mpirun -np 64 --hostfile HOSTFILE --npernode 8 -x COHORT_COMM=mpi cohort train " \
    --model gpt2 --hw a100-80gb --nodes 8 --global-batch 512 --link-inter 25:5
multi "2 CPU nodes" "mpirun -np 4 --host HOST1:2,HOST2:2 -x COHORT_COMM=mpi cohort train " \
    "${small[@]}" --nodes 2 --global-batch 8 --calibration "$cal/inter_node.json"

# ... which runs with both hosts put as this machine (its 4 slots on one host)
if ! command -v mpirun >/dev/null || [ ! -f "${COHORT_BUILD_DIR:-.}/libcohort_mpi.so" ]; then
    echo "SKIP mpirun line: mpirun or libcohort_mpi.so missing"
    skips=1
else
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    run_line "2 CPU nodes as one" "${last_line/--host HOST1:2,HOST2:2/--host localhost:4}"
fi
[ "$fail" -eq 0 ] || exit 1
[ "$skips" -eq 0 ] || exit 77
