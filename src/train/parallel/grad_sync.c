/* grad_sync.c: the grad-ready hook: bucket all-reduce (DDP, ZeRO-1) or reduce-scatter (ZeRO-2/3)
 * started as soon as backward finished a bucket, collected as it completes; and clipping on the
 * global norm. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "train/backend/backend.h"
#include "train/optim/clip.h"
#include "train/parallel/par_trainer_int.h"

/* --grad-reduce-dtype bf16: a bucket's gradients rounded to bf16 (nearest even) in g16, reduced
 * there in bf16 (the transport sums in fp32 and rounds once), and widened back into the fp32
 * gradients: the part this rank keeps (the whole bucket for DDP/ZeRO-1, the own chunk for
 * ZeRO-2/3). */
static coh_status issue16(coh_par_trainer *t, par_bucket *b)
{
    size_t len = b->end - b->begin, main = b->q * (size_t)t->ndp, tail = len - main;
    uint16_t *h = t->g16 + b->begin;
    coh_status st = COH_OK;
    coh_backend_current()->to_bf16(h, t->grads + b->begin, len);
    if (t->zero_stage < 2)
        return coh_allreduce_async(t->dp, h, h, len, COH_BF16, COH_AVG, &b->req[0]);
    if (b->q)
        st = coh_reduce_scatter_async(t->dp, h, h + (size_t)t->rdp * b->q, b->q, COH_BF16,
                                      COH_AVG, &b->req[0]);
    if (!st && tail)
        st = coh_allreduce_async(t->dp, h + main, h + main, tail, COH_BF16, COH_AVG, &b->req[1]);
    return st;
}

static void widen(float *dst, const uint16_t *src, size_t n)
{
    coh_backend_current()->from_bf16(dst, src, n);
}

/* The private pages of g16 [b, e) given back (ZeRO-2/3: only buckets in flight are resident). */
static void release16(uint16_t *base, size_t b, size_t e)
{
    uintptr_t ps = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t lo = (uintptr_t)(base + b), hi = (uintptr_t)(base + e);
    uintptr_t plo = (lo + ps - 1) / ps * ps, phi = hi / ps * ps;
    if (plo < phi)
        madvise((void *)plo, phi - plo, MADV_DONTNEED);
}

static void finish16(coh_par_trainer *t, par_bucket *b)
{
    if (t->zero_stage < 2) {
        widen(t->grads + b->begin, t->g16 + b->begin, b->end - b->begin);
        return;
    }
    widen(t->grads + b->own_b, t->g16 + b->own_b, b->own_e - b->own_b);
    if (!t->g16_shm)
        release16(t->g16, b->begin, b->end);
}

coh_status par_grad_issue(coh_par_trainer *t, int k)
{
    par_bucket *b = &t->bk[k];
    size_t len = b->end - b->begin, main = b->q * (size_t)t->ndp, tail = len - main;
    float *g = t->grads + b->begin;
    coh_status st = COH_OK;
    b->req[0] = b->req[1] = NULL;
    if (t->g16) {
        st = issue16(t, b);
    } else if (t->zero_stage < 2) {
        st = coh_allreduce_async(t->dp, g, g, len, COH_F32, COH_AVG, &b->req[0]);
    } else {
        if (b->q)
            st = coh_reduce_scatter_async(t->dp, g, g + (size_t)t->rdp * b->q, b->q, COH_F32,
                                          COH_AVG, &b->req[0]);
        if (!st && tail)
            st = coh_allreduce_async(t->dp, g + main, g + main, tail, COH_F32, COH_AVG,
                                     &b->req[1]);
    }
    b->busy = 1;
    b->t_issue = par_now_us();
    return st;
}

/* ZeRO-2/3: keep only the own chunk; earlier micro-steps move it into the accumulator. */
static void keep_own(coh_par_trainer *t, par_bucket *b)
{
    float *own = t->grads + b->own_b, *acc = t->gacc ? t->gacc + b->acc_off : NULL;
    size_t n = b->own_e - b->own_b;
    if (!t->last_micro) {
        t->be->add(acc, own, n);
        par_release(t->grads, b->own_b, b->own_e); /* zeroed for the next micro-step */
        par_grads_give_back(t, b);
        return;
    }
    if (acc)
        t->be->add(own, acc, n);
    par_grads_give_back(t, b);
}

static coh_status finish(coh_par_trainer *t, int k)
{
    par_bucket *b = &t->bk[k];
    coh_status st = COH_OK, s2;
    for (int i = 0; i < 2; i++) {
        if (b->req[i] && (s2 = coh_comm_wait(b->req[i])) && !st)
            st = s2;
        b->req[i] = NULL;
    }
    b->busy = 0;
    if (!st && t->g16)
        finish16(t, b);
    if (t->trace) { /* names are built only for a trace */
        char name[48];
        snprintf(name, sizeof name, "%s bucket %d",
                 t->zero_stage >= 2 ? "reduce-scatter" : "all-reduce", k);
        par_trace_event(t->trace, name, "comm", 1, b->t_issue, par_now_us());
    }
    if (!st && t->zero_stage >= 2)
        keep_own(t, b);
    return st;
}

static int finished(par_bucket *b)
{
    for (int i = 0; i < 2; i++) {
        int d = 1;
        if (b->req[i] && (coh_comm_test(b->req[i], &d) || !d))
            return d; /* a failed test counts as done: the wait reports the error */
    }
    return 1;
}

coh_status par_grad_collect(coh_par_trainer *t, int all)
{
    /* buckets complete in issue order (one queue per communicator): stop at the first busy one */
    for (int k = 0; k < t->nbk; k++) {
        if (!t->bk[k].busy)
            continue;
        if (!all && !finished(&t->bk[k]))
            return COH_OK;
        coh_status st = finish(t, k);
        if (st)
            return st;
    }
    return COH_OK;
}

void par_grad_hook(void *ctx, int layer, size_t begin, size_t end)
{
    coh_par_trainer *t = ctx;
    (void)begin;
    (void)end;
    if (t->err || t->ndp < 2)
        return;
    /* DDP and ZeRO-1 accumulate locally until the last micro-step (no_sync); every bucket the
     * layer completes (a pipeline's first stage: wte's and the rest of the embeddings') */
    for (int k = t->bucket_of[layer + 1]; k < t->nbk && t->bk[k].lo == layer && !t->err; k++)
        if (t->last_micro || t->zero_stage >= 2)
            t->err = par_grad_issue(t, k);
    if (!t->err)
        t->err = par_grad_collect(t, 0);
}

static void clip_push(coh_par_trainer *t, size_t b, size_t e, int counted)
{
    if (b >= e)
        return;
    t->clip_b[t->nclip] = b;
    t->clip_e[t->nclip] = e;
    t->clip_counted[t->nclip++] = (unsigned char)counted;
}

/* Appends [b, e) to the clip ranges, split where it crosses a tensor every tensor-parallel rank
 * holds whole: those parts are counted by tp rank 0 only. */
static void clip_add(coh_par_trainer *t, size_t b, size_t e, int counted)
{
    for (int k = 0; t->mesh->tp_rank > 0 && k < t->nrep && b < e; k++) {
        if (t->rep_e[k] <= b || t->rep_b[k] >= e)
            continue;
        size_t rb = t->rep_b[k] > b ? t->rep_b[k] : b, re = t->rep_e[k] < e ? t->rep_e[k] : e;
        clip_push(t, b, rb, counted);
        clip_push(t, rb, re, 0);
        b = re;
    }
    clip_push(t, b, e, counted);
}

coh_status par_clip_plan(coh_par_trainer *t)
{
    const coh_pipe_stage *lay = t->pipe ? par_pipe_layout(t->pipe) : NULL;
    int held = lay ? lay->nranges : t->zero_stage >= 2 ? t->nown : 1;
    size_t cap = (size_t)held * (2 * (size_t)t->nrep + 1);
    t->clip_b = malloc(cap * sizeof *t->clip_b);
    t->clip_e = malloc(cap * sizeof *t->clip_e);
    t->clip_counted = malloc(cap);
    if (!t->clip_b || !t->clip_e || !t->clip_counted)
        return coh_errf(COH_ERR_NOMEM, "out of memory for the clipper's ranges");
    t->nclip = 0;
    for (int k = 0; k < held; k++) {
        if (lay) /* the head's copy of the tied wte: the first stage counts it */
            clip_add(t, lay->begin[k], lay->end[k], !(lay->tied_copy && lay->begin[k] == 0));
        else if (t->zero_stage >= 2) /* the own chunks, in arena order */
            clip_add(t, t->own_rb[k], t->own_re[k], 1);
        else
            clip_add(t, 0, t->n, 1);
    }
    return COH_OK;
}

/* The sum of squares completed over the groups that split the parameters: dp for ZeRO-2/3, the
 * pipeline's stages, the tensor-parallel shards. */
static coh_status clip_reduce(void *ctx, double *sum)
{
    coh_par_trainer *t = ctx;
    coh_status st = COH_OK;
    if (t->zero_stage >= 2)
        st = coh_allreduce(t->dp, sum, sum, 1, COH_F64, COH_SUM);
    if (!st && t->mesh->pp > 1)
        st = coh_allreduce(t->mesh->pp_comm, sum, sum, 1, COH_F64, COH_SUM);
    if (!st && t->mesh->tp > 1)
        st = coh_allreduce(t->mesh->tp_comm, sum, sum, 1, COH_F64, COH_SUM);
    return st;
}

double par_clip(coh_par_trainer *t)
{
    coh_clip_ranges r = {t->clip_b, t->clip_e, t->clip_counted, t->nclip};
    coh_status st; /* clip_reduce itself skips the groups that split nothing */
    double norm = coh_clip_grads(t->be, t->grads, &r, clip_reduce, t, t->cfg.train.grad_clip,
                                 &st);
    if (st && !t->err)
        t->err = st;
    return norm;
}
