#!/usr/bin/env bash
# ab.sh: cohort train of two builds side by side (A: before a change, B: after), alternating
# in each round so a slow spell of a shared machine falls on both: single, ddp (2 ranks through
# cohort run), zero3 (2 ranks), pp 2 1f1b with 8 microbatches, tp 2, and bf16-mixed single where
# the CPU runs bf16; one thread a rank. Each
# run's figure is its median tokens/s over the steps after the first; each side keeps its best
# round; prints B/A per configuration. Beside it, the CPU seconds of a step (user + system,
# every rank's, from the launcher's waited-for children; a run of STEPS steps less a run of one
# step, so that what a build does once at start, such as its sgemm peak probe, is left out): a
# shared virtual machine's slow spells stretch the wall clock more than the CPU time a run is
# charged, so the median of A's over B's is a second view where tokens/s spread widely (it
# leaves out time spent waiting, which tokens/s keeps).
# usage: bench/engine/ab.sh COHORT_A COHORT_B [ROUNDS (default 3)]; env STEPS (default 6), ONLY
# (an extended regular expression: only the configurations whose names match it)
set -euo pipefail
a=$1 b=$2 rounds=${3:-3} steps=${STEPS:-6}
. "$(dirname "$0")/engine_lib.sh"
engine_prepare "$a"
configs=("single:1:--strategy single" "ddp:2:--strategy ddp" "zero3:2:--strategy zero3"
         "pp2_1f1b_m8:2:--pp 2 --schedule 1f1b --microbatches 8" "tp2:2:--tp 2")
# bf16-mixed single where this CPU runs bf16 products (AVX512-BF16 or AMX), else said and left out
if "$a" train "${model[@]}" --precision bf16-mixed --steps 1 --dry-run >/dev/null 2>&1 &&
    "$b" train "${model[@]}" --precision bf16-mixed --steps 1 --dry-run >/dev/null 2>&1; then
    configs+=("single_bf16:1:--strategy single --precision bf16-mixed")
else
    echo "bf16-mixed left out: this CPU cannot run bf16 products"
fi
if [ -n "${ONLY:-}" ]; then
    kept=()
    for c in "${configs[@]}"; do
        if [[ ${c%%:*} =~ ^($ONLY)$ ]]; then kept+=("$c"); fi
    done
    [ ${#kept[@]} -gt 0 ] || { echo "ab.sh: ONLY='$ONLY' matches no configuration" >&2; exit 2; }
    configs=("${kept[@]}")
fi
cpu_seconds() { # COMMAND...: runs it (output discarded); prints its and its children's CPU s
    python3 -c 'import resource, subprocess, sys
subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
r = resource.getrusage(resource.RUSAGE_CHILDREN)
print("%.3f" % (r.ru_utime + r.ru_stime))' "$@"
}
median() { tr ' ' '\n' | grep . | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
declare -A best cpu
echo "load before: $(uptime)"
for r in $(seq "$rounds"); do
    for c in "${configs[@]}"; do
        IFS=: read -r name n opts <<<"$c"
        order="A B"
        [ $((r % 2)) -eq 0 ] && order="B A" # even rounds in reverse
        for side in $order; do
            bin=$a
            [ "$side" = B ] && bin=$b
            # shellcheck disable=SC2086
            s=$(cpu_seconds "$bin" run --nproc-per-node "$n" "$bin" train "${model[@]}" $opts \
                --steps "$steps" --metrics "$work/m.jsonl")
            t=$(median_tps "$work/m.jsonl")
            # shellcheck disable=SC2086
            s1=$(cpu_seconds "$bin" run --nproc-per-node "$n" "$bin" train "${model[@]}" $opts \
                --steps 1)
            s=$(echo "$s $s1 $steps" | awk '{ printf "%.4f", ($1 - $2) / ($3 - 1) }')
            echo "round $r $name $side: $t tokens/s, $s CPU s a step"
            k="$name.$side"
            best[$k]=$(echo "${best[$k]:-0} $t" | awk '{ print ($2 > $1) ? $2 : $1 }')
            cpu[$k]="${cpu[$k]:-} $s"
        done
    done
done
echo "best of $rounds rounds (tokens/s): configuration A B B/A"
for c in "${configs[@]}"; do
    name=${c%%:*}
    echo "$name ${best[$name.A]} ${best[$name.B]} $(echo "${best[$name.B]} ${best[$name.A]}" |
        awk '{ printf "%.3f", $1 / $2 }')"
done
echo "median CPU seconds of a step: configuration A B A/B (above 1: B used less CPU)"
for c in "${configs[@]}"; do
    name=${c%%:*}
    ca=$(echo "${cpu[$name.A]}" | median) cb=$(echo "${cpu[$name.B]}" | median)
    echo "$name $ca $cb $(echo "$ca $cb" | awk '{ printf "%.3f", $1 / $2 }')"
done
echo "load after: $(uptime)"
