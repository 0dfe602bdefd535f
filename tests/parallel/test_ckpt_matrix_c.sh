#!/usr/bin/env bash
# test_ckpt_matrix_c.sh: the resume matrix (ckpt_matrix_lib.sh), saved at (2,2,1) zero1 and
# (1,2,2), resumed at every other mesh of the matrix.
. "$(dirname "${BASH_SOURCE[0]}")/ckpt_matrix_lib.sh"
for i in 4 5; do matrix_row $i; done
par_done "checkpoints of (2,2,1) zero1 and (1,2,2) resume at every mesh of the matrix"
