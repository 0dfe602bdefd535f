/* blas.c: OpenBLAS's kernel name, one thread setting for OpenMP and OpenBLAS, and the sgemm peak
 * MFU is measured against (the restart that fixes the kernel is engine_env.c's). */
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "cohort/clock.h"
#include "cohort/train.h"
#include "train/threads.h"

const char *coh_blas_kernel(void)
{
    const char *n = openblas_get_corename();
    return n ? n : "unknown";
}

static char threads_origin[256] = "set by the caller";

const char *coh_threads_origin(void)
{
    return threads_origin;
}

/* The default: OMP_NUM_THREADS when it is a positive number (cohort run sets it per rank),
 * else the CPUs this process may use, shared among the launcher's ranks on them. */
static int default_threads(void)
{
    const char *e = getenv("OMP_NUM_THREADS");
    char *end;
    long v = e ? strtol(e, &end, 10) : 0;
    if (e && *e && !*end && v > 0 && v <= 4096) {
        snprintf(threads_origin, sizeof threads_origin, "OMP_NUM_THREADS");
        return (int)v;
    }
    coh_cpu_budget b;
    coh_cpu_budget_read(&b);
    return coh_threads_for_budget(&b, threads_origin, sizeof threads_origin);
}

void coh_set_threads(int n)
{
    if (n < 1)
        n = default_threads();
#ifdef _OPENMP
    omp_set_dynamic(0);
    omp_set_num_threads(n);
#endif
    openblas_set_num_threads(1); /* matmuls are split over the OpenMP team (ops_matmul.c) */
}

int coh_get_threads(void)
{
#ifdef _OPENMP
    return omp_get_max_threads();
#else
    return 1;
#endif
}

#define PROBE_MIN_RUNS 8
#define PROBE_MAX_RUNS 64
#define PROBE_MIN_NS 400000000ull

int coh_mfu_text(double mfu, char *buf, size_t cap)
{
    if (isfinite(mfu) && mfu > 0 && mfu <= 1.0) {
        snprintf(buf, cap, "%.1f%%", mfu * 100);
        return 1;
    }
    snprintf(buf, cap, "n/a");
    return 0;
}

double coh_measure_sgemm_flops(int n)
{
    float *a = malloc((size_t)n * n * sizeof *a), *b = malloc((size_t)n * n * sizeof *b),
          *c = malloc((size_t)n * n * sizeof *c);
    double best = 0.0;
    if (a && b && c) {
        for (size_t i = 0; i < (size_t)n * n; i++)
            a[i] = (float)(i % 7) * 0.1f, b[i] = (float)(i % 5) * 0.1f;
        openblas_set_num_threads(coh_get_threads());
        /* The best of many runs over a fraction of a second, so that other work on the machine
         * during a few of them does not lower the peak (a low peak reads as MFU above 100%). */
        uint64_t start = coh_now_ns();
        for (int r = 0; r < PROBE_MAX_RUNS &&
                        (r < PROBE_MIN_RUNS || coh_now_ns() - start < PROBE_MIN_NS); r++) {
            uint64_t t0 = coh_now_ns();
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b, n,
                        0.0f, c, n);
            double s = (double)(coh_now_ns() - t0) * 1e-9;
            double f = 2.0 * n * (double)n * n / (s > 0 ? s : 1e-9);
            best = f > best ? f : best;
        }
        openblas_set_num_threads(1);
    }
    free(a);
    free(b);
    free(c);
    return best;
}
