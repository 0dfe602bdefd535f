/* adamw.c: AdamW with decoupled weight decay (as torch.optim.AdamW) over the flat arenas,
 * global-norm clipping, and the warmup + cosine learning-rate schedule. The arithmetic over the
 * state and the gradients runs on the backend (backend.h); this file only walks the segments. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cohort/train.h"
#include "train/backend/backend.h"
#include "train/optim/clip.h"

/* The state covers segments: pieces of the arena inside one tensor (so one decay flag each),
 * stored back to back in m and v from moff. The full optimizer has one segment per tensor. */
struct coh_adamw {
    const coh_backend *be; /* where m and v live and the update runs */
    size_t count; /* floats of m and v */
    float *m, *v;
    int nseg;
    size_t *begin, *len, *moff; /* (nseg) arena start, length, offset into m and v */
    int *decay;                 /* (nseg) */
};

static coh_status alloc_segments(coh_adamw *o, int nseg)
{
    o->nseg = nseg;
    o->m = coh_dev_alloc(o->be, o->count * sizeof(float));
    o->v = coh_dev_alloc(o->be, o->count * sizeof(float));
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
    o->be = coh_backend_current();
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
    coh_dev_free(o->be, o->m);
    coh_dev_free(o->be, o->v);
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

void coh_adamw_update(coh_adamw *o, float *params, const float *grads, const coh_adamw_params *a,
                      long t)
{
    float bc1 = 1.0f - powf(a->beta1, (float)t), bc2 = 1.0f - powf(a->beta2, (float)t);
    float step_size = a->lr / bc1, rbc2 = 1.0f / sqrtf(bc2);
    for (int k = 0; k < o->nseg; k++) {
        float keep = o->decay[k] ? 1.0f - a->lr * a->weight_decay : 1.0f;
        size_t b = o->begin[k], mo = o->moff[k];
        o->be->adamw(params + b, grads + b, o->m + mo, o->v + mo, o->len[k], a->beta1, a->beta2,
                     a->eps, keep, step_size, rbc2);
    }
}

double coh_clip_grads(const coh_backend *be, float *grads, const coh_clip_ranges *r,
                      coh_clip_reduce reduce, void *ctx, double max_norm, coh_status *err)
{
    double sum = 0.0;
    *err = COH_OK;
    for (int k = 0; k < r->n; k++) /* each in an order fixed by its length alone */
        if (!r->counted || r->counted[k])
            sum += be->sumsq(grads + r->b[k], r->e[k] - r->b[k]);
    if (reduce && (*err = reduce(ctx, &sum)))
        return sqrt(sum);
    double norm = sqrt(sum);
    if (max_norm > 0.0 && norm > max_norm) {
        float f = (float)(max_norm / (norm + 1e-6));
        for (int k = 0; k < r->n; k++)
            be->scale(grads + r->b[k], r->e[k] - r->b[k], f);
    }
    return norm;
}

double coh_clip_grad_norm(float *grads, size_t count, double max_norm)
{
    size_t b = 0;
    coh_clip_ranges whole = {&b, &count, NULL, 1};
    coh_status err;
    return coh_clip_grads(coh_backend_current(), grads, &whole, NULL, NULL, max_norm, &err);
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
