/* probe.c: measures this machine's rate table for the planner: sgemm throughput over GEMM sizes
 * (the engine's OpenBLAS, row-major, tokens x features shapes), elementwise bandwidth and the
 * fixed cost of one op, for 1 thread and for all cores. `cohort bench gemm` writes the result
 * as a calibration file; `cohort plan` runs the quick version when it has none. */
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "cohort/clock.h"
#include "cohort/train.h"
#include "plan/planner_int.h"
#include "train/backend/cpu/cpu_ops.h" /* gpt_sgemm_nt: the CPU engine's product */

/* Best of `reps` timings of f over `inner` calls. */
static double best_of(int reps, int inner, void (*f)(void *), void *ctx)
{
    double best = INFINITY;
    for (int r = 0; r < reps; r++) {
        double t0 = coh_now_s();
        for (int i = 0; i < inner; i++)
            f(ctx);
        double t = (coh_now_s() - t0) / inner;
        best = t < best ? t : best;
    }
    return best;
}

typedef struct gemm_ctx {
    int M, N, K;
    float *a, *b, *c;
} gemm_ctx;

/* As the engine runs a matrix product: its own threaded sgemm (ops_matmul.c). */
static void run_gemm(void *p)
{
    gemm_ctx *g = p;
    gpt_sgemm_nt(g->M, g->N, g->K, g->a, g->b, g->c);
}

/* One thread's product inside a parallel region (the concurrent row). */
static void run_gemm_one(void *p)
{
    gemm_ctx *g = p;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, g->M, g->N, g->K, 1.0f, g->a, g->K,
                g->b, g->K, 0.0f, g->c, g->N);
}

typedef struct ew_ctx {
    float *x, *y;
    size_t n;
} ew_ctx;

static void run_ew(void *p)
{
    ew_ctx *e = p;
#pragma omp parallel for schedule(static)
    for (long i = 0; i < (long)e->n; i++)
        e->y[i] = e->y[i] * 0.5f + e->x[i];
}

/* The operands of one measurement: the GEMM's a (4n x n), b (n x n) and c (4n x n) for the
 * largest shape, n = PROBE_MAX_N, and the elementwise kernel's x and y of en floats each. */
#define PROBE_MAX_N 768
typedef struct probe_buffers {
    float *a, *b, *c, *x, *y;
} probe_buffers;

static void probe_buffers_free(probe_buffers *p)
{
    float *all[] = {p->a, p->b, p->c, p->x, p->y};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        free(all[i]);
}

/* Allocate and fill them with small values; 0 when out of memory (what was allocated is left
 * for probe_buffers_free). */
static int probe_buffers_make(probe_buffers *p, size_t en)
{
    size_t nn = (size_t)PROBE_MAX_N * PROBE_MAX_N;
    p->a = malloc(4 * nn * sizeof *p->a);
    p->b = malloc(nn * sizeof *p->b);
    p->c = malloc(4 * nn * sizeof *p->c);
    p->x = malloc(en * sizeof *p->x);
    p->y = malloc(en * sizeof *p->y);
    if (!p->a || !p->b || !p->c || !p->x || !p->y)
        return 0;
    for (size_t i = 0; i < 4 * nn; i++)
        p->a[i] = p->c[i] = (float)(i % 7) * 0.01f;
    for (size_t i = 0; i < nn; i++)
        p->b[i] = (float)(i % 5) * 0.01f;
    for (size_t i = 0; i < en; i++)
        p->x[i] = p->y[i] = 1.0f;
    return 1;
}

/* The 1-thread row with every core busy: `cores` OpenMP threads each run single-threaded
 * kernels on their own buffers at once (as `cores` ranks of 1 thread do), and each thread's
 * rate is the rank's; the best over repetitions of the slowest thread. */
static void concurrent_rates(int quick, int cores, coh_device_rates *row)
{
    double *gemm = calloc((size_t)cores * COH_RATE_POINTS, sizeof *gemm);
    double *ew = calloc((size_t)cores, sizeof *ew);
    if (!gemm || !ew)
        goto out;
#pragma omp parallel num_threads(cores)
    {
#ifdef _OPENMP
        int me = omp_get_thread_num();
#else
        int me = 0;
#endif
        size_t en = (size_t)4 << 20;
        probe_buffers buf;
        if (probe_buffers_make(&buf, en)) {
            float *x = buf.x, *y = buf.y;
            for (int k = 0; k < row->gemm.n; k++) {
                int n = (int)llround(cbrt(row->gemm.work[k] / 4.0));
                gemm_ctx g = {4 * n, n, n, buf.a, buf.b, buf.c};
                int inner = row->gemm.work[k] < 1e6 ? 200 : row->gemm.work[k] < 1e8 ? 10 : 2;
#pragma omp barrier
                double t = best_of(quick ? 2 : 5, inner, run_gemm_one, &g);
                gemm[me * COH_RATE_POINTS + k] = 2.0 * row->gemm.work[k] / t;
            }
#pragma omp barrier
            double best = INFINITY;
            for (int r = 0; r < (quick ? 2 : 5); r++) {
                double t0 = coh_now_s();
                for (size_t i = 0; i < en; i++)
                    y[i] = y[i] * 0.5f + x[i];
                double t = coh_now_s() - t0;
                best = t < best ? t : best;
            }
            ew[me] = 3.0 * 4.0 * en / best;
        }
        probe_buffers_free(&buf);
    }
    for (int k = 0; k < row->gemm.n; k++) {
        double slowest = INFINITY;
        for (int t = 0; t < cores; t++)
            slowest = fmin(slowest, gemm[t * COH_RATE_POINTS + k]);
        if (slowest > 0 && isfinite(slowest))
            row->gemm.flops[k] = slowest;
    }
    double slowest = INFINITY;
    for (int t = 0; t < cores; t++)
        slowest = fmin(slowest, ew[t]);
    if (slowest > 0 && isfinite(slowest))
        row->elementwise_bytes_per_s = slowest;
out:
    free(gemm);
    free(ew);
}

static coh_status measure_row(int quick, int threads, coh_device_rates *row)
{
    coh_set_threads(threads);
    memset(row, 0, sizeof *row);
    row->threads = threads;
    /* shapes of tokens x features: M = 4 n rows, N = K = n */
    static const int NS[] = {16, 32, 64, 96, 128, 192, 256, 384, 512, 768};
    int count = quick ? 5 : 10, step = quick ? 2 : 1;
    size_t en = (size_t)8 << 20; /* 32 MiB per array: past the caches */
    probe_buffers buf;
    coh_status st = COH_OK;
    if (!probe_buffers_make(&buf, en)) {
        st = coh_errf(COH_ERR_NOMEM, "out of memory measuring the rate table");
        goto out;
    }
    for (int i = 0, k = 0; k < count; i += step, k++) {
        int n = NS[i];
        gemm_ctx g = {4 * n, n, n, buf.a, buf.b, buf.c};
        double work = 4.0 * n * n * (double)n;
        int inner = work < 1e6 ? 200 : work < 1e8 ? 10 : 2;
        double t = best_of(quick ? 2 : 5, inner, run_gemm, &g);
        row->gemm.work[k] = work;
        row->gemm.flops[k] = 2.0 * work / t;
        row->gemm.n = k + 1;
    }
    ew_ctx e = {buf.x, buf.y, en};
    double t = best_of(quick ? 2 : 5, 1, run_ew, &e);
    row->elementwise_bytes_per_s = 3.0 * 4.0 * en / t; /* two reads, one write */
    ew_ctx tiny = {buf.x, buf.y, 64};
    row->op_overhead_s = best_of(3, 1000, run_ew, &tiny);
out:
    probe_buffers_free(&buf);
    return st;
}

coh_status coh_calibration_measure(int quick, int max_threads, coh_hw *out)
{
    memset(out, 0, sizeof *out);
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    if (cores < 1)
        cores = 1;
    if (max_threads > 0 && max_threads < cores)
        cores = max_threads;
    snprintf(out->name, sizeof out->name, "this machine (%ld cores, OpenBLAS %s)", cores,
             coh_blas_kernel());
    snprintf(out->source, sizeof out->source, "%s probe of this machine",
             quick ? "quick" : "full");
    out->cores = (int)cores;
    out->precision = COH_PREC_FP32;
    out->gpus_per_node = (int)cores;
    out->nodes = 1;
    long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGESIZE);
    out->memory_bytes = pages > 0 && psize > 0 ? (uint64_t)pages * (uint64_t)psize : 0;
    int counts[2] = {1, (int)cores};
    for (int i = 0; i < (cores > 1 ? 2 : 1); i++) {
        coh_status st = measure_row(quick, counts[i], &out->rates[i]);
        if (st)
            return st;
        out->nrates = i + 1;
    }
    if (cores > 1) { /* a 1-thread rank shares the machine with the other ranks */
        coh_set_threads(1);
        concurrent_rates(quick, (int)cores, &out->rates[0]);
    }
    coh_set_threads(0);
    out->peak_flops = plan_cpu_peak(out);
    /* shared memory between ranks: a copy in and a copy out per message at about the
     * elementwise bandwidth; `cohort bench comm` measures it better (bench/plan/run.sh) */
    out->intra.alpha_s = 10e-6;
    out->intra.bytes_per_s = out->rates[0].elementwise_bytes_per_s / 3.0;
    return COH_OK;
}
