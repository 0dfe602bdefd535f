/* gpu_cmp.h: what the GPU tests share: the backend under test (the CUDA one; with
 * COHORT_GPU_TEST_BACKEND=cpu the CPU one, so that the comparisons themselves can be checked on
 * a machine without a GPU), device buffers, and the compare-and-print of one result. */
#ifndef COHORT_TESTS_GPU_CMP_H
#define COHORT_TESTS_GPU_CMP_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "train/backend/backend.h"

static const coh_backend *dev; /* under test */

/* The CUDA backend, or NULL after printing why it cannot run here. A machine meant to have a
 * GPU (COHORT_REQUIRE_GPU=1, set by scripts/gpu-check.sh) makes its absence a failure. */
static const coh_backend *gpu_open(const char *test)
{
    const char *alt = getenv("COHORT_GPU_TEST_BACKEND");
    if (alt && !strcmp(alt, "cpu")) {
        printf("%s: comparing the cpu backend with itself (COHORT_GPU_TEST_BACKEND=cpu)\n", test);
        return coh_backend_cpu();
    }
    const coh_backend *be = NULL;
    if (coh_backend_find("cuda", &be) == COH_OK) {
        printf("%s: on %s\n", test, coh_backend_cuda_desc());
        return be;
    }
    const char *req = getenv("COHORT_REQUIRE_GPU");
    if (req && !strcmp(req, "1")) {
        fprintf(stderr, "%s: a GPU was required (COHORT_REQUIRE_GPU=1): %s\n", test,
                coh_last_error());
        check_failures++;
        return NULL;
    }
    printf("SKIP %s: no GPU here: %s\n", test, coh_last_error());
    return NULL;
}

/* Live device buffers and their sizes: a backend's free wants the size it was given. */
static struct { void *p; size_t bytes; } dlive[64];

static void *dalloc(size_t bytes)
{
    void *p = dev->alloc(bytes ? bytes : 1);
    if (!p) {
        fprintf(stderr, "device allocation of %zu bytes failed\n", bytes);
        exit(1);
    }
    for (int i = 0; i < 64; i++)
        if (!dlive[i].p) {
            dlive[i].p = p, dlive[i].bytes = bytes ? bytes : 1;
            return p;
        }
    fprintf(stderr, "more than 64 live device buffers: a test leaks them\n");
    exit(1);
}

static void *dput(const void *host, size_t bytes)
{
    void *d = dalloc(bytes);
    dev->copy(d, host, bytes, COH_COPY_H2D);
    return d;
}

static void *hget(const void *d, size_t bytes)
{
    void *h = malloc(bytes ? bytes : 1);
    dev->copy(h, d, bytes, COH_COPY_D2H);
    return h;
}

/* d from dalloc (the size argument of the callers is only documentation). */
static void dfree(void *d, size_t bytes)
{
    (void)bytes;
    for (int i = 0; i < 64; i++)
        if (dlive[i].p == d) {
            dev->free(d, dlive[i].bytes);
            dlive[i].p = NULL;
            return;
        }
    fprintf(stderr, "dfree of a buffer dalloc did not give\n");
    check_failures++;
}

/* max |got - ref| over max |ref|: printed, and checked against bound (a NaN fails). */
static double cmp_f32(const char *what, const float *ref, const float *got, size_t n,
                      double bound)
{
    double err = 0, mag = 0;
    int nan = 0;
    for (size_t i = 0; i < n; i++) {
        nan |= isnan(got[i]) != isnan(ref[i]);
        if (!isnan(ref[i])) {
            err = fmax(err, fabs((double)got[i] - ref[i]));
            mag = fmax(mag, fabs((double)ref[i]));
        }
    }
    double rel = err / (mag > 0 ? mag : 1);
    printf("  %-34s max abs err %.3e  rel %.3e  (bound %.1e)%s\n", what, err, rel, bound,
           nan ? "  NaN where the cpu has none" : "");
    if (nan || !(rel <= bound)) {
        fprintf(stderr, "%s: error %.3e over the bound %.1e\n", what, rel, bound);
        check_failures++;
    }
    return rel;
}

/* The device buffer d (n floats) against the cpu's ref. */
static double cmp_dev(const char *what, const float *ref, const float *d, size_t n, double bound)
{
    float *got = hget(d, n * sizeof *got);
    double r = cmp_f32(what, ref, got, n, bound);
    free(got);
    return r;
}

#endif
