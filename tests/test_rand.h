/* test_rand.h: reproducible random floats for cohort's C tests: one 64-bit LCG per program,
 * started from the TEST_RAND_SEED the program defines before including this header. */
#ifndef COHORT_TESTS_TEST_RAND_H
#define COHORT_TESTS_TEST_RAND_H

#include <stdlib.h>

#ifndef TEST_RAND_SEED
#error "define TEST_RAND_SEED (the program's seed) before including test_rand.h"
#endif

static unsigned long long test_rand_state = TEST_RAND_SEED;

/* The next number of the sequence, uniform in [-1, 1) on a grid of 2^-23. */
static inline float urand(void)
{
    test_rand_state = test_rand_state * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((test_rand_state >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f;
}

/* n such numbers times scale, malloc'ed (the caller frees). */
static inline float *rnd(size_t n, float scale)
{
    float *x = malloc(n * sizeof *x);
    for (size_t i = 0; i < n; i++)
        x[i] = urand() * scale;
    return x;
}

#endif
