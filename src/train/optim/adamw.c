/* adamw.c: AdamW with decoupled weight decay (as torch.optim.AdamW) over the flat arenas,
 * global-norm clipping, and the warmup + cosine learning-rate schedule. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cohort/train.h"
#include "train/model/gpt_int.h"

/* The state covers segments: pieces of the arena inside one tensor (so one decay flag each),
 * stored back to back in m and v from moff. The full optimizer has one segment per tensor. */
struct coh_adamw {
    size_t count; /* floats of m and v */
    float *m, *v;
    int nseg;
    size_t *begin, *len, *moff; /* (nseg) arena start, length, offset into m and v */
    int *decay;                 /* (nseg) */
};

static coh_status alloc_segments(coh_adamw *o, int nseg)
{
    o->nseg = nseg;
    o->m = calloc(o->count ? o->count : 1, sizeof(float));
    o->v = calloc(o->count ? o->count : 1, sizeof(float));
    o->begin = calloc((size_t)nseg + 1, sizeof *o->begin);
    o->len = calloc((size_t)nseg + 1, sizeof *o->len);
    o->moff = calloc((size_t)nseg + 1, sizeof *o->moff);
    o->decay = calloc((size_t)nseg + 1, sizeof *o->decay);
    if (!o->m || !o->v || !o->begin || !o->len || !o->moff || !o->decay)
        return coh_errf(COH_ERR_NOMEM, "out of memory allocating the optimizer state");
    return COH_OK;
}

/* Intersect the ranges with the tensor table; with `o` NULL only count the segments. */
static int cut_segments(const coh_gpt_config *c, const size_t *rb, const size_t *re, int nr,
                        coh_adamw *o)
{
    int nt = coh_gpt_tensor_count(c), n = 0;
    size_t moff = 0;
    for (int r = 0; r < nr; r++) {
        for (int i = 0; i < nt; i++) {
            coh_tensor_info t;
            coh_gpt_tensor(c, i, &t);
            size_t b = rb[r] > t.offset ? rb[r] : t.offset;
            size_t e = re[r] < t.offset + t.numel ? re[r] : t.offset + t.numel;
            if (b >= e)
                continue;
            if (o) {
                o->begin[n] = b;
                o->len[n] = e - b;
                o->moff[n] = moff;
                o->decay[n] = t.decay;
            }
            moff += e - b;
            n++;
        }
    }
    return n;
}

coh_status coh_adamw_create_ranges(const coh_gpt_config *c, const size_t *begin,
                                   const size_t *end, int nranges, coh_adamw **out)
{
    *out = NULL;
    coh_status st = coh_gpt_config_check(c);
    if (st)
        return st;
    size_t total = coh_gpt_param_count(c), count = 0;
    for (int r = 0; r < nranges; r++) {
        if (begin[r] > end[r] || end[r] > total || (r && begin[r] < end[r - 1]))
            return coh_errf(COH_ERR_INVALID, "invalid optimizer range %d '[%zu, %zu)': ranges "
                            "must be sorted, disjoint and inside 0..%zu", r, begin[r], end[r],
                            total);
        count += end[r] - begin[r];
    }
    coh_adamw *o = calloc(1, sizeof *o);
    if (!o)
        return coh_errf(COH_ERR_NOMEM, "out of memory allocating the optimizer");
    o->count = count;
    if ((st = alloc_segments(o, cut_segments(c, begin, end, nranges, NULL)))) {
        coh_adamw_destroy(o);
        return st;
    }
    cut_segments(c, begin, end, nranges, o);
    *out = o;
    return COH_OK;
}

coh_status coh_adamw_create(const coh_gpt_config *c, coh_adamw **out)
{
    coh_status st = coh_gpt_config_check(c);
    if (st) {
        *out = NULL;
        return st;
    }
    size_t b = 0, e = coh_gpt_param_count(c);
    return coh_adamw_create_ranges(c, &b, &e, 1, out);
}

void coh_adamw_destroy(coh_adamw *o)
{
    if (!o)
        return;
    free(o->m);
    free(o->v);
    free(o->begin);
    free(o->len);
    free(o->moff);
    free(o->decay);
    free(o);
}

float *coh_adamw_m(coh_adamw *o, size_t *count)
{
    if (count)
        *count = o->count;
    return o->m;
}

float *coh_adamw_v(coh_adamw *o, size_t *count)
{
    if (count)
        *count = o->count;
    return o->v;
}

GPT_CLONES static void adamw_span(float *p, const float *g, float *m, float *v, size_t n,
                                  float lr, float b1, float b2, float eps, float keep,
                                  float step_size, float rbc2)
{
#pragma omp simd
    for (size_t i = 0; i < n; i++) {
        m[i] = b1 * m[i] + (1.0f - b1) * g[i];
        v[i] = b2 * v[i] + (1.0f - b2) * g[i] * g[i];
        float denom = sqrtf(v[i]) * rbc2 + eps;
        p[i] = p[i] * keep - step_size * m[i] / denom;
    }
}

#define SPAN 8192

void coh_adamw_update(coh_adamw *o, float *params, const float *grads, const coh_adamw_params *a,
                      long t)
{
    float bc1 = 1.0f - powf(a->beta1, (float)t), bc2 = 1.0f - powf(a->beta2, (float)t);
    float step_size = a->lr / bc1, rbc2 = 1.0f / sqrtf(bc2);
    for (int k = 0; k < o->nseg; k++) {
        float keep = o->decay[k] ? 1.0f - a->lr * a->weight_decay : 1.0f;
        size_t b = o->begin[k], n = o->len[k], mo = o->moff[k];
#pragma omp parallel for schedule(static)
        for (long s = 0; s < (long)((n + SPAN - 1) / SPAN); s++) {
            size_t a0 = b + (size_t)s * SPAN, m0 = mo + (size_t)s * SPAN;
            size_t len = n - (size_t)s * SPAN;
            len = len < SPAN ? len : SPAN;
            adamw_span(params + a0, grads + a0, o->m + m0, o->v + m0, len, a->lr, a->beta1,
                       a->beta2, a->eps, keep, step_size, rbc2);
        }
    }
}

/* Sum of squares in double over 8 lanes (element i into lane i % 8), the lanes added in a fixed
 * order: a vector loop whose result does not depend on the thread count or the ISA. */
GPT_CLONES static double sumsq_block(const float *g, size_t n)
{
    double lane[8] = {0};
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++)
            lane[j] += (double)g[i + j] * g[i + j];
    for (; i < n; i++)
        lane[i % 8] += (double)g[i] * g[i];
    return ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
}

double coh_clip_grad_norm(float *grads, size_t count, double max_norm)
{
    /* fixed blocks summed in order: the same norm for any thread count */
    enum { BLK = 65536 };
    size_t nb = (count + BLK - 1) / BLK;
    double *part = malloc((nb ? nb : 1) * sizeof *part);
    double sum = 0.0;
    if (part) {
#pragma omp parallel for schedule(static)
        for (long k = 0; k < (long)nb; k++) {
            size_t e = ((size_t)k + 1) * BLK < count ? ((size_t)k + 1) * BLK : count;
            part[k] = sumsq_block(grads + (size_t)k * BLK, e - (size_t)k * BLK);
        }
        for (size_t k = 0; k < nb; k++)
            sum += part[k];
        free(part);
    } else {
        for (size_t i = 0; i < count; i++)
            sum += (double)grads[i] * grads[i];
    }
    double norm = sqrt(sum);
    if (max_norm > 0.0 && norm > max_norm) {
        float f = (float)(max_norm / (norm + 1e-6));
#pragma omp parallel for simd schedule(static)
        for (size_t i = 0; i < count; i++)
            grads[i] *= f;
    }
    return norm;
}

float coh_lr_schedule(long step, long warmup, long total, float lr, float min_frac)
{
    if (step < warmup)
        return lr * (float)(step + 1) / (float)warmup;
    if (total <= warmup || step >= total)
        return total <= warmup ? lr : lr * min_frac;
    double r = (double)(step - warmup) / (double)(total - warmup);
    double c = 0.5 * (1.0 + cos(M_PI * r));
    return (float)(lr * (min_frac + (1.0 - min_frac) * c));
}
