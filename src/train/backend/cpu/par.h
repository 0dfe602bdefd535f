/* par.h: splitting a range over the threads of the current OpenMP team, always the same way. */
#ifndef COHORT_PAR_H
#define COHORT_PAR_H

#ifdef _OPENMP
#include <omp.h>
#endif

/* This thread's share [*b, *e) of 0..n in equal contiguous slices (empty when n < threads). */
static inline void par_range(long n, int *b, int *e)
{
#ifdef _OPENMP
    long t = omp_get_thread_num(), k = omp_get_num_threads();
#else
    long t = 0, k = 1;
#endif
    *b = (int)(n * t / k);
    *e = (int)(n * (t + 1) / k);
}

#endif
