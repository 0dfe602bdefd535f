#!/usr/bin/env bash
# test_ckpt_matrix_b.sh: the resume matrix (ckpt_matrix_lib.sh), saved at (1,2,1) and (1,1,2),
# resumed at every other mesh of the matrix.
. "$(dirname "${BASH_SOURCE[0]}")/ckpt_matrix_lib.sh"
for i in 2 3; do matrix_row $i; done
par_done "checkpoints of (1,2,1) and (1,1,2) resume at every mesh of the matrix"
