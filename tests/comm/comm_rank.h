/* comm_rank.h: shared parts of the per-rank comm test driver (inputs with exactly known
 * results, typed conversions written independently of the library's). */
#ifndef COHORT_TESTS_COMM_RANK_H
#define COHORT_TESTS_COMM_RANK_H

#include <stdint.h>

#include "cohort/comm.h"

/* Small integer input of rank r at element i for reduction op (so that every sum, product
 * and average is exact in every type, bf16 included). */
int64_t rank_input(int r, size_t i, coh_redop op, coh_dtype t, int n);
/* Store the integer v (exactly representable) as type t at p[i]. */
void put_typed(void *p, size_t i, coh_dtype t, int64_t v);
/* Fold of rank_input over all ranks, in the type's integer semantics. */
int64_t expect_reduced(size_t i, coh_redop op, coh_dtype t, int n);
/* Run every op x type x size class; returns the number of wrong results. */
int run_cases(coh_comm *c, int verbose);
/* Every type x reduction x in-place/out-of-place x arena/plain all-reduce at the given counts. */
int run_allreduce_cases(coh_comm *c, const size_t *counts, int ncounts, int verbose);

#endif
