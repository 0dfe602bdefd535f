# ckpt_matrix_lib.sh: the resume matrix shared by test_ckpt_matrix_*.sh, sourced (not a test
# itself): a checkpoint saved at step 6 of 12 at one mesh (dp, pp, tp) resumes at every other
# mesh of the matrix, and the resumed run's losses and final parameters equal an uninterrupted
# single-device run's within the resume tests' bound (par_compare.py --tensor-l2, as
# test_tensor_ckpt.sh).
. "$(dirname "${BASH_SOURCE[0]}")/par_lib.sh"
"$py" -c "import numpy" 2>/dev/null || { echo "numpy missing"; exit 77; }

par_prepare "$src/tests/parallel/equiv_corpus.txt"
V=256 C=32 L=4 T=32
par_model $V $L 2 $C $T
model+=(--lr 1e-3 --deterministic --steps 12)
"$cohort" train "${model[@]}" --micro-batch 4 --grad-accum 2 --metrics "$work/ref.jsonl" \
    --dump-params "$work/ref.bin" >/dev/null 2>&1 || fail "uninterrupted single run"

# The matrix: name "dp pp tp" [strategy]. A step keeps the loader's rows (micro-batch x dp = 4)
# and the global batch (8) at every mesh.
meshes=("1 1 1" "2 1 1 zero3" "1 2 1" "1 1 2" "2 2 1 zero1" "1 2 2")

# mesh_cmd DP PP TP [STRATEGY]: sets `cmd` to the launch of that mesh
mesh_cmd() {
    local dp=$1 pp=$2 tp=$3 s=${4:-}
    local n=$((dp * pp * tp))
    cmd=("$cohort" train "${model[@]}" --micro-batch $((4 / dp)) --grad-accum 2)
    [ "$pp" -gt 1 ] && cmd+=(--pp "$pp")
    [ "$tp" -gt 1 ] && cmd+=(--tp "$tp")
    [ -n "$s" ] && cmd+=(--strategy "$s")
    [ "$n" -gt 1 ] && cmd=("$cohort" run --nproc-per-node "$n" "${cmd[@]}")
}

# matrix_row I: save at mesh I (step 6), resume at every other mesh of the matrix
matrix_row() {
    local from=${meshes[$1]} ck="ck$1" j name
    mesh_cmd $from
    "${cmd[@]}" --stop-at 6 --save "$work/$ck" >"$work/$ck.out" 2>&1 ||
        { fail "save at ($from): $(tail -3 "$work/$ck.out")"; return; }
    for j in "${!meshes[@]}"; do
        [ "$j" = "$1" ] && continue
        name="$1-$j"
        mesh_cmd ${meshes[$j]}
        "${cmd[@]}" --resume "$work/$ck" --metrics "$work/$name.jsonl" --dump-params "$work/$name.bin" \
            >"$work/$name.out" 2>&1 || { fail "($from) -> (${meshes[$j]}): $(tail -3 "$work/$name.out")"; continue; }
        [ "$(wc -l < "$work/$name.jsonl")" = 6 ] || fail "($from) -> (${meshes[$j]}): not 6 resumed steps"
        tail -n 6 "$work/ref.jsonl" >"$work/ref.tail.jsonl"
        "$py" "$src/tests/parallel/par_compare.py" --tensor-l2 "$work/ref.tail.jsonl" "$work/ref.bin" \
            "$work/$name.jsonl" "$work/$name.bin" $V $C $L $T >"$work/$name.cmp" ||
            fail "($from) -> (${meshes[$j]}): $(cat "$work/$name.cmp")"
        echo "($from) -> (${meshes[$j]}): $(head -1 "$work/$name.cmp")"
    done
}
