/* backend_measure.c: times a device through its backend table, as the engine would run on it:
 * bare products of given shapes on random operands, an elementwise stream, and the fixed cost of
 * one queued op. `cohort bench gemm --device` turns the figures into a calibration file. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cohort/clock.h"
#include "train/backend/backend.h"

/* Random operands (zeros would run faster than training data on a GPU): a host block of values
 * in [-1, 1) copied over the device buffer. */
#define RANDOM_BLOCK ((size_t)1 << 22) /* bytes */

static void fill_random(const coh_backend *be, void *dev, size_t bytes, int bf16, uint32_t seed)
{
    unsigned char *host = malloc(RANDOM_BLOCK);
    if (!host)
        return; /* the buffer stays zeroed: slower operands never make a faster figure */
    uint32_t x = seed * 2654435761u + 1;
    size_t n = bf16 ? RANDOM_BLOCK / 2 : RANDOM_BLOCK / 4;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13, x ^= x >> 17, x ^= x << 5;
        float v = (float)(x >> 8) / 8388608.0f - 1.0f;
        if (bf16) {
            uint32_t u;
            memcpy(&u, &v, 4);
            uint16_t h = (uint16_t)(u >> 16);
            memcpy(host + 2 * i, &h, 2);
        } else {
            memcpy(host + 4 * i, &v, 4);
        }
    }
    for (size_t off = 0; off < bytes; off += RANDOM_BLOCK)
        be->copy((char *)dev + off, host, bytes - off < RANDOM_BLOCK ? bytes - off : RANDOM_BLOCK,
                 COH_COPY_H2D);
    free(host);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

#define ROUNDS 5

typedef coh_status (*op_fn)(const coh_backend *be, void *ctx);

/* reps runs of op closed by one sync: the seconds they took */
static coh_status round_of(const coh_backend *be, op_fn op, void *ctx, long reps, double *secs)
{
    coh_status st = COH_OK;
    double t0 = coh_now_s();
    for (long r = 0; r < reps && !st; r++)
        st = op(be, ctx);
    if (!st)
        st = be->sync();
    *secs = coh_now_s() - t0;
    return st;
}

/* One warm-up run of op, then rounds of `reps` runs each closed by a sync, reps grown until a
 * round takes min_s / ROUNDS; then ROUNDS rounds: the median round's seconds per op. */
static coh_status time_op(const coh_backend *be, op_fn op, void *ctx, double min_s, double *out)
{
    double t = 0, per[ROUNDS];
    coh_status st = round_of(be, op, ctx, 1, &t); /* the warm-up */
    long reps = 1;
    while (!st && !(st = round_of(be, op, ctx, reps, &t)) && t < min_s / ROUNDS &&
           reps < (1L << 24))
        reps *= t > 0 ? (long)fmin(64.0, fmax(2.0, ceil(min_s / ROUNDS / t))) : 64;
    for (int k = 0; k < ROUNDS && !st; k++) {
        st = round_of(be, op, ctx, reps, &t);
        per[k] = t / (double)reps;
    }
    if (st)
        return st;
    qsort(per, ROUNDS, sizeof per[0], cmp_double);
    *out = per[ROUNDS / 2];
    return COH_OK;
}

typedef struct gemm_ctx {
    int bf16, M, N, K;
    void *a, *b;
    float *c;
} gemm_ctx;

static coh_status run_gemm(const coh_backend *be, void *ctx)
{
    const gemm_ctx *g = ctx;
    return be->gemm(g->bf16, 0, 0, g->M, g->N, g->K, g->a, (size_t)g->K, g->b, (size_t)g->N,
                    0.0f, g->c, (size_t)g->N);
}

coh_status coh_backend_time_gemms(const char *name, int bf16, coh_gemm_timing *t, int n,
                                  double min_s)
{
    const coh_backend *be;
    coh_status st = coh_backend_find(name, &be);
    if (st)
        return st;
    if (bf16 && (st = be->bf16_check()))
        return st;
    size_t e = bf16 ? 2 : 4, amax = 0, bmax = 0, cmax = 0;
    for (int i = 0; i < n; i++) {
        if (t[i].M < 1 || t[i].N < 1 || t[i].K < 1)
            return coh_errf(COH_ERR_INVALID, "gemm shape %d x %d x %d: every side must be at "
                            "least 1", t[i].M, t[i].N, t[i].K);
        size_t a = (size_t)t[i].M * t[i].K * e, b = (size_t)t[i].K * t[i].N * e,
               c = (size_t)t[i].M * t[i].N * 4;
        amax = a > amax ? a : amax, bmax = b > bmax ? b : bmax, cmax = c > cmax ? c : cmax;
    }
    gemm_ctx g = {.bf16 = bf16};
    g.a = coh_dev_alloc(be, amax), g.b = coh_dev_alloc(be, bmax), g.c = coh_dev_alloc(be, cmax);
    if (!g.a || !g.b || !g.c)
        st = coh_errf(COH_ERR_NOMEM, "device '%s': no memory for the operands of the largest "
                      "product (%.3g GB)", name, (double)(amax + bmax + cmax) / 1e9);
    if (!st) {
        fill_random(be, g.a, amax, bf16, 1);
        fill_random(be, g.b, bmax, bf16, 2);
    }
    for (int i = 0; i < n && !st; i++) {
        g.M = t[i].M, g.N = t[i].N, g.K = t[i].K;
        st = time_op(be, run_gemm, &g, min_s, &t[i].seconds);
    }
    coh_dev_free(be, g.a), coh_dev_free(be, g.b), coh_dev_free(be, g.c);
    return st;
}

typedef struct stream_ctx {
    float *y, *x;
    size_t n;
} stream_ctx;

static coh_status run_add(const coh_backend *be, void *ctx)
{
    const stream_ctx *s = ctx;
    be->add(s->y, s->x, s->n);
    return COH_OK;
}

static coh_status run_tiny(const coh_backend *be, void *ctx)
{
    const stream_ctx *s = ctx;
    be->scale(s->y, 1, 1.0f);
    return COH_OK;
}

coh_status coh_backend_time_stream(const char *name, size_t n, double min_s,
                                   double *bytes_per_s, double *op_s)
{
    const coh_backend *be;
    coh_status st = coh_backend_find(name, &be);
    if (st)
        return st;
    stream_ctx s = {.n = n};
    s.y = coh_dev_alloc(be, n * sizeof(float)), s.x = coh_dev_alloc(be, n * sizeof(float));
    double t = 0;
    if (!s.y || !s.x)
        st = coh_errf(COH_ERR_NOMEM, "device '%s': no memory for two vectors of %zu floats", name,
                      n);
    if (!st) /* y += x reads two values and writes one */
        st = time_op(be, run_add, &s, min_s, &t);
    if (!st) {
        *bytes_per_s = 12.0 * (double)n / t;
        st = time_op(be, run_tiny, &s, min_s, op_s);
    }
    coh_dev_free(be, s.y), coh_dev_free(be, s.x);
    return st;
}
