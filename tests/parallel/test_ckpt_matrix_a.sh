#!/usr/bin/env bash
# test_ckpt_matrix_a.sh: the resume matrix (ckpt_matrix_lib.sh), saved at (1,1,1) and (2,1,1)
# zero3, resumed at every other mesh of the matrix.
. "$(dirname "${BASH_SOURCE[0]}")/ckpt_matrix_lib.sh"
for i in 0 1; do matrix_row $i; done
par_done "checkpoints of (1,1,1) and (2,1,1) zero3 resume at every mesh of the matrix"
