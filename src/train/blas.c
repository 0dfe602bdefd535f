/* blas.c: OpenBLAS kernel check (re-exec with OPENBLAS_CORETYPE when it chose a kernel weaker
 * than the CPU supports) and one thread setting for OpenMP and OpenBLAS. */
#include <cblas.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "cohort/clock.h"
#include "cohort/log.h"
#include "cohort/train.h"
#include "train/threads.h"

#define REEXEC_ENV "COHORT_BLAS_REEXEC"

const char *coh_blas_kernel(void)
{
    const char *n = openblas_get_corename();
    return n ? n : "unknown";
}

/* 3: AVX-512, 2: AVX2+FMA, 1: AVX, 0: older. */
static int kernel_level(const char *k)
{
    static const char *const l3[] = {"skylakex", "cooperlake", "sapphirerapids"};
    static const char *const l2[] = {"haswell", "zen", "skylake"};
    static const char *const l1[] = {"sandybridge"};
    char low[64];
    size_t i = 0;
    for (; k[i] && i + 1 < sizeof low; i++)
        low[i] = (char)(k[i] >= 'A' && k[i] <= 'Z' ? k[i] - 'A' + 'a' : k[i]);
    low[i] = 0;
    for (i = 0; i < sizeof l3 / sizeof *l3; i++)
        if (!strcmp(low, l3[i]))
            return 3;
    for (i = 0; i < sizeof l2 / sizeof *l2; i++)
        if (!strcmp(low, l2[i]))
            return 2;
    return !strcmp(low, l1[0]) ? 1 : 0;
}

static int cpu_level(const char **kernel)
{
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl")) {
        *kernel = "SkylakeX";
        return 3;
    }
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
        *kernel = "Haswell";
        return 2;
    }
    if (__builtin_cpu_supports("avx")) {
        *kernel = "Sandybridge";
        return 1;
    }
    *kernel = NULL;
    return 0;
}

/* argv of this process as the kernel started it, from /proc/self/cmdline. */
static char **self_argv(char *buf, size_t cap)
{
    FILE *f = fopen("/proc/self/cmdline", "rb");
    if (!f)
        return NULL;
    size_t n = fread(buf, 1, cap - 1, f);
    fclose(f);
    if (n == 0 || n >= cap - 1)
        return NULL;
    buf[n] = 0;
    size_t argc = 0;
    for (size_t i = 0; i < n; i++)
        argc += buf[i] == 0;
    char **argv = calloc(argc + 1, sizeof *argv);
    if (!argv)
        return NULL;
    char *p = buf;
    for (size_t i = 0; i < argc; i++, p += strlen(p) + 1)
        argv[i] = p;
    return argv;
}

void coh_blas_ensure_best_kernel(void)
{
    const char *was = getenv(REEXEC_ENV);
    const char *now = coh_blas_kernel(), *want = NULL;
    if (was && *was) {
        const char *set = getenv("OPENBLAS_CORETYPE");
        unsetenv(REEXEC_ENV);
        if (cpu_level(&want) > kernel_level(now))
            coh_warn("openblas still uses the '%s' kernel after a restart with "
                     "OPENBLAS_CORETYPE=%s; matrix products will be slow", now, set ? set : "");
        else
            coh_info("openblas chose the '%s' kernel on a cpu that supports more; restarted "
                     "with OPENBLAS_CORETYPE=%s, now using '%s' (COHORT_BLAS_KEEP=1 keeps the "
                     "library's choice)", was, set ? set : "", now);
        return;
    }
    const char *keep = getenv("COHORT_BLAS_KEEP");
    if (keep && !strcmp(keep, "1"))
        return;
    if (cpu_level(&want) <= kernel_level(now) || !want)
        return;
    static char buf[1 << 16];
    char **argv = self_argv(buf, sizeof buf);
    char was_buf[64];
    snprintf(was_buf, sizeof was_buf, "%s", now);
    if (!argv || setenv("OPENBLAS_CORETYPE", want, 1) || setenv(REEXEC_ENV, was_buf, 1)) {
        coh_warn("openblas uses the slow '%s' kernel; could not restart with "
                 "OPENBLAS_CORETYPE=%s", now, want);
        free(argv);
        return;
    }
    fflush(stdout);
    fflush(stderr);
    execv("/proc/self/exe", argv);
    coh_warn("openblas uses the slow '%s' kernel; restart with OPENBLAS_CORETYPE=%s failed: %s",
             now, want, strerror(errno));
    unsetenv(REEXEC_ENV);
    free(argv);
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
