/* buckets.c: gradient buckets over the layer-major arena, each rank's ZeRO chunks, the give-back
 * of what a rank does not own through the backend (counted by its allocator), and the
 * residency measure (resident pages, a process-level figure) that shows it on the CPU. */
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "train/parallel/par_trainer_int.h"

static void own_chunk(par_bucket *b, int ndp, int rdp)
{
    size_t len = b->end - b->begin;
    b->q = len / (size_t)ndp;
    b->own_b = b->begin + (size_t)rdp * b->q;
    b->own_e = rdp == ndp - 1 ? b->end : b->own_b + b->q;
}

/* Whether a stage of layout `lay` (NULL: the whole model) holds layer l (-1 embeddings, L the
 * final LayerNorm). */
static int holds(const coh_pipe_stage *lay, int L, int l)
{
    if (!lay)
        return 1;
    if (l < 0)
        return lay->first;
    for (int k = 0; k < lay->chunks; k++)
        if (l == L ? lay->head_lo[k] == 0 && lay->head_hi[k] > 0
                   : lay->lo[k] <= l && l < lay->hi[k])
            return 1;
    return 0;
}

static void put_bucket(par_bucket *bk, int *nbk, size_t b, size_t e, int l)
{
    bk[*nbk] = (par_bucket){.begin = b, .end = e, .lo = l, .hi = l};
    (*nbk)++;
}

/* Whole layers from the last backwards until a bucket reaches bucket_bytes, never across a
 * layer the stage does not hold; ZeRO-3 gathers per layer, so there every layer is its own
 * bucket. With a pipeline, wte is a bucket of its own on the first stage and on each stage
 * holding the LM head's copy, so both copies are reduced and (ZeRO-1) updated in the same
 * pieces. Pure, so the memory estimate plans the same. */
int par_bucket_plan(const coh_gpt_config *c, const coh_pipe_stage *lay, int zero_stage, int ndp,
                    int rdp, size_t bucket_bytes, par_bucket *bk, int *bucket_of,
                    size_t *own_total)
{
    int L = c->layers, nbk = 0;
    size_t cap = bucket_bytes / sizeof(float), wte = lay ? par_wte_size(c) : 0;
    for (int l = L; l >= -1; l--) {
        size_t b, e;
        if (!holds(lay, L, l))
            continue;
        coh_gpt_layer_range(c, l, &b, &e);
        b = b > wte ? b : wte; /* wte apart (pipeline only) */
        par_bucket *cur = nbk ? &bk[nbk - 1] : NULL;
        if (!cur || zero_stage == 3 || cur->end - cur->begin >= cap || cur->begin != e) {
            cur = &bk[nbk++];
            cur->end = e;
            cur->hi = l;
        }
        cur->begin = b;
        cur->lo = l;
        bucket_of[l + 1] = nbk - 1;
    }
    if (lay && (lay->first || lay->tied_copy)) /* reported with layer -1, or never (a copy) */
        put_bucket(bk, &nbk, 0, wte, -1);
    if (lay && lay->tied_copy)
        bucket_of[0] = nbk - 1;
    size_t off = 0;
    for (int k = nbk - 1; k >= 0; k--) { /* accumulation buffer in arena order */
        own_chunk(&bk[k], ndp, rdp);
        bk[k].acc_off = off;
        off += bk[k].own_e - bk[k].own_b;
    }
    *own_total = off;
    return nbk;
}

coh_status par_plan_buckets(coh_par_trainer *t)
{
    const coh_gpt_config *c = coh_gpt_get_config(t->model);
    int L = c->layers;
    t->bk = calloc((size_t)L + 3, sizeof *t->bk); /* a pipeline's wte apart: one more */
    t->bucket_of = calloc((size_t)L + 2, sizeof *t->bucket_of);
    if (!t->bk || !t->bucket_of)
        return coh_errf(COH_ERR_NOMEM, "out of memory planning gradient buckets");
    const coh_pipe_stage *lay = t->pipe ? par_pipe_layout(t->pipe) : NULL;
    t->nbk = par_bucket_plan(c, lay, t->zero_stage, t->ndp, t->rdp, t->cfg.par.bucket_bytes,
                             t->bk, t->bucket_of, &t->own_total);
    return COH_OK;
}

void par_release(float *base, size_t b, size_t e)
{
    if (e > b) /* the backend's release reads back as zeros: it is also a zeroing */
        coh_dev_zero_release(coh_backend_current(), base + b, (e - b) * sizeof(float));
}

static size_t not_own_bytes(const par_bucket *b)
{
    return (b->end - b->begin - (b->own_e - b->own_b)) * sizeof(float);
}

void par_params_give_back(coh_par_trainer *t, par_bucket *b)
{
    par_release(t->params, b->begin, b->own_b);
    par_release(t->params, b->own_e, b->end);
    if (!b->params_away)
        coh_dev_forget(t->be, not_own_bytes(b));
    b->params_away = 1;
}

void par_params_take_back(coh_par_trainer *t, par_bucket *b)
{
    if (b->params_away)
        coh_dev_retake(t->be, not_own_bytes(b));
    b->params_away = 0;
}

void par_grads_give_back(coh_par_trainer *t, par_bucket *b)
{
    par_release(t->grads, b->begin, b->own_b);
    par_release(t->grads, b->own_e, b->end);
    if (!b->grads_away)
        coh_dev_forget(t->be, not_own_bytes(b));
    b->grads_away = 1;
}

void par_grads_take_back(coh_par_trainer *t, par_bucket *b)
{
    if (b->grads_away)
        coh_dev_retake(t->be, not_own_bytes(b));
    b->grads_away = 0;
}

void par_grads_give_back_all(coh_par_trainer *t)
{
    par_release(t->grads, 0, t->n); /* the own chunks too: zeroed for backward to add into */
    for (int k = 0; k < t->nbk; k++) {
        if (!t->bk[k].grads_away)
            coh_dev_forget(t->be, not_own_bytes(&t->bk[k]));
        t->bk[k].grads_away = 1;
    }
}

uint64_t par_resident(const coh_backend *be, const float *base, size_t b, size_t e)
{
    return e > b ? be->resident(base + b, (e - b) * sizeof *base) : 0;
}
