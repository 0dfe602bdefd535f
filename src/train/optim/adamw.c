/* adamw.c: AdamW with decoupled weight decay (as torch.optim.AdamW) over the flat arenas,
 * global-norm clipping, and the warmup + cosine learning-rate schedule. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cohort/train.h"
#include "train/model/gpt_int.h"

struct coh_adamw {
    size_t count;
    float *m, *v;
    int ntensors;
    size_t *begin, *len; /* (ntensors) ranges in the arena */
    int *decay;          /* (ntensors) */
};

coh_status coh_adamw_create(const coh_gpt_config *c, coh_adamw **out)
{
    *out = NULL;
    coh_status st = coh_gpt_config_check(c);
    if (st)
        return st;
    coh_adamw *o = calloc(1, sizeof *o);
    if (!o)
        return coh_errf(COH_ERR_NOMEM, "out of memory allocating the optimizer");
    o->count = coh_gpt_param_count(c);
    o->ntensors = coh_gpt_tensor_count(c);
    o->m = calloc(o->count, sizeof(float));
    o->v = calloc(o->count, sizeof(float));
    o->begin = calloc((size_t)o->ntensors, sizeof *o->begin);
    o->len = calloc((size_t)o->ntensors, sizeof *o->len);
    o->decay = calloc((size_t)o->ntensors, sizeof *o->decay);
    if (!o->m || !o->v || !o->begin || !o->len || !o->decay) {
        coh_adamw_destroy(o);
        return coh_errf(COH_ERR_NOMEM, "out of memory allocating the optimizer state");
    }
    for (int i = 0; i < o->ntensors; i++) {
        coh_tensor_info t;
        coh_gpt_tensor(c, i, &t);
        o->begin[i] = t.offset;
        o->len[i] = t.numel;
        o->decay[i] = t.decay;
    }
    *out = o;
    return COH_OK;
}

void coh_adamw_destroy(coh_adamw *o)
{
    if (!o)
        return;
    free(o->m);
    free(o->v);
    free(o->begin);
    free(o->len);
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
    for (int k = 0; k < o->ntensors; k++) {
        float keep = o->decay[k] ? 1.0f - a->lr * a->weight_decay : 1.0f;
        size_t b = o->begin[k], n = o->len[k];
#pragma omp parallel for schedule(static)
        for (long s = 0; s < (long)((n + SPAN - 1) / SPAN); s++) {
            size_t a0 = b + (size_t)s * SPAN, len = n - (size_t)s * SPAN;
            len = len < SPAN ? len : SPAN;
            adamw_span(params + a0, grads + a0, o->m + a0, o->v + a0, len, a->lr, a->beta1,
                       a->beta2, a->eps, keep, step_size, rbc2);
        }
    }
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
            double s = 0.0;
            size_t e = ((size_t)k + 1) * BLK < count ? ((size_t)k + 1) * BLK : count;
            for (size_t i = (size_t)k * BLK; i < e; i++)
                s += (double)grads[i] * grads[i];
            part[k] = s;
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
