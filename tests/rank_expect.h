/* rank_expect.h: EXPECT, the check of the per-rank test programs (comm_rank, mesh_rank): a
 * failed check prints "rank R: check failed: COND: <message>" and counts in the program's `bad`,
 * and the rank goes on. Where it is used, `rank` and `bad` (int) must be in scope. */
#ifndef COHORT_TESTS_RANK_EXPECT_H
#define COHORT_TESTS_RANK_EXPECT_H

#include <stdio.h>

#define EXPECT(cond, ...)                                                                      \
    do {                                                                                       \
        if (!(cond)) {                                                                         \
            bad++;                                                                             \
            fprintf(stderr, "rank %d: check failed: %s: ", rank, #cond);                      \
            fprintf(stderr, __VA_ARGS__);                                                      \
            fprintf(stderr, "\n");                                                             \
        }                                                                                      \
    } while (0)

#endif
