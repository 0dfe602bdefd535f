#!/usr/bin/env bash
# test_parallel_mesh.sh: the mesh beyond 1x1x1. On 8 ranks (2x2x2, 1x2x4, 4x1x2, 2x4x1 and each
# axis alone) and 6 ranks (axes of three different sizes, so no two axes can stand in for each
# other), every rank's coordinates, axis communicators (size, rank, members) and per-axis sums
# match rank = (p * dp + d) * tp + t (Megatron's order: tp fastest, then dp, then pp), and shapes whose product is not the world size are refused
# naming the sizes. The checks are mesh_rank's; this script launches it and reads its verdict.
. "$(dirname "${BASH_SOURCE[0]}")/par_lib.sh"

bin=${COHORT_BUILD_DIR:?}/mesh_rank
[ -x "$bin" ] || { echo "FAIL: $bin not built"; exit 1; }
# a broken split that leaves ranks waiting on each other fails in seconds, not at the default 300
export COHORT_COMM_TIMEOUT=30

# mesh_run N SHAPES...: N ranks of mesh_rank; every rank must pass, rank 0 reports each shape
mesh_run() {
    local n=$1
    shift
    if "$cohort" run --standalone --nproc-per-node "$n" --prefix '' -- "$bin" "$@" \
        >"$work/mesh$n.out" 2>&1; then
        cat "$work/mesh$n.out"
    else
        fail "$n ranks: $(tail -20 "$work/mesh$n.out")"
    fi
    # each shape must have been reported, so a rank program that checked nothing cannot pass
    local s
    for s in "$@"; do
        [ "$s" = --refuse ] && continue
        grep -q "^ok   mesh $s\( refused\)\? on $n ranks$" "$work/mesh$n.out" ||
            fail "$n ranks: no passing line for mesh $s"
    done
}

mesh_run 8 2x2x2 1x2x4 4x1x2 2x4x1 8x1x1 1x8x1 1x1x8 --refuse 2x2x3 4x4x1 1x1x7 0x8x1
mesh_run 6 3x2x1 1x2x3 2x1x3 3x1x2 --refuse 2x2x2 6x1x0
par_done "mesh layouts match on 8 and 6 ranks"
