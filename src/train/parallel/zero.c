/* zero.c: ZeRO parameter movement: all-gather of updated chunks (stages 1-2) and, for stage 3,
 * the param hook that gathers each layer just before use, prefetches the next one in the step's
 * order, and frees what this rank does not own after use. */
#include <stdio.h>
#include <stdlib.h>

#include "train/parallel/par_trainer_int.h"

coh_status par_gather_bucket(coh_par_trainer *t, int k, int wait)
{
    par_bucket *b = &t->bk[k];
    size_t main = b->q * (size_t)t->ndp, tail = b->end - b->begin - main;
    float *p = t->params + b->begin;
    coh_status st = COH_OK;
    if (t->zero_stage == 3) /* its other chunks are written again now */
        par_params_take_back(t, b);
    b->preq[0] = b->preq[1] = NULL;
    if (b->q)
        st = coh_allgather_async(t->dp, p + (size_t)t->rdp * b->q, p, b->q, COH_F32, &b->preq[0]);
    if (!st && tail)
        st = coh_broadcast_async(t->dp, p + main, tail, COH_F32, t->ndp - 1, &b->preq[1]);
    b->pbusy = 1;
    b->t_pissue = par_now_us();
    return st || !wait ? st : par_wait_bucket(t, k);
}

coh_status par_wait_bucket(coh_par_trainer *t, int k)
{
    par_bucket *b = &t->bk[k];
    coh_status st = COH_OK, s2;
    for (int i = 0; i < 2; i++) {
        if (b->preq[i] && (s2 = coh_comm_wait(b->preq[i])) && !st)
            st = s2;
        b->preq[i] = NULL;
    }
    if (b->pbusy && t->trace) {
        char name[48];
        snprintf(name, sizeof name, "all-gather bucket %d", k);
        par_trace_event(t->trace, name, "comm", 2, b->t_pissue, par_now_us());
    }
    b->pbusy = 0;
    b->present = !st;
    return st;
}

static void release_bucket(coh_par_trainer *t, par_bucket *b)
{
    par_params_give_back(t, b);
    b->present = 0;
}

void par_release_params(coh_par_trainer *t)
{
    for (int k = 0; k < t->nbk; k++)
        release_bucket(t, &t->bk[k]);
}

void par_reset_sequence(coh_par_trainer *t, int train)
{
    int L = coh_gpt_get_config(t->model)->layers, n = 0;
    for (int l = -1; l <= L; l++)
        t->seq[n++] = l;
    t->seq[n++] = -1; /* the LM head reads wte */
    for (int l = L - 1; train && l >= 0; l--)
        t->seq[n++] = l;
    t->nseq = n;
    t->seqpos = 0;
    t->seq_train = train;
}

/* Gather `layer` if needed, then start the next layer's gather so it overlaps this one's use. */
static coh_status need(coh_par_trainer *t, int layer)
{
    int k = t->bucket_of[layer + 1];
    coh_status st = COH_OK;
    if (!t->bk[k].present)
        st = t->bk[k].pbusy ? par_wait_bucket(t, k) : par_gather_bucket(t, k, 1);
    if (st)
        return st;
    if (t->seqpos < t->nseq && t->seq[t->seqpos] == layer)
        t->seqpos++;
    if (t->seqpos < t->nseq) {
        int nk = t->bucket_of[t->seq[t->seqpos] + 1];
        if (nk != k && !t->bk[nk].present && !t->bk[nk].pbusy)
            st = par_gather_bucket(t, nk, 0);
    }
    return st;
}

static void trace_layer(coh_par_trainer *t, int layer)
{
    if (!t->trace)
        return;
    const char *what = t->need_ev[layer + 1] == COH_PARAM_NEED_BACKWARD ? "backward" : "forward";
    int L = coh_gpt_get_config(t->model)->layers;
    char name[48];
    if (layer < 0)
        snprintf(name, sizeof name, "%s embeddings", what);
    else if (layer == L)
        snprintf(name, sizeof name, "final layernorm");
    else
        snprintf(name, sizeof name, "%s layer %d", what, layer);
    par_trace_event(t->trace, name, what, 0, t->t_need[layer + 1], par_now_us());
}

/* ZeRO-2/3: the gradients of a layer's bucket are held again from just before backward writes
 * them: the layer's backward, or for the final LayerNorm's and the tied embedding's (which the
 * fused head writes in its forward) the final LayerNorm's forward in a training step. */
static void grads_written(coh_par_trainer *t, int layer, coh_param_event ev)
{
    int L = coh_gpt_get_config(t->model)->layers;
    if (ev == COH_PARAM_NEED_BACKWARD) {
        par_grads_take_back(t, &t->bk[t->bucket_of[layer + 1]]);
    } else if (layer == L && t->seq_train) {
        par_grads_take_back(t, &t->bk[t->bucket_of[L + 1]]);
        par_grads_take_back(t, &t->bk[t->bucket_of[0]]);
    }
}

void par_param_hook(void *ctx, int layer, coh_param_event ev, size_t begin, size_t end)
{
    coh_par_trainer *t = ctx;
    (void)begin;
    (void)end;
    if (t->err)
        return;
    if (ev != COH_PARAM_DONE) {
        if (t->zero_stage >= 2)
            grads_written(t, layer, ev);
        if (t->zero_stage == 3)
            t->err = need(t, layer);
        t->need_ev[layer + 1] = (int)ev;
        t->t_need[layer + 1] = par_now_us();
        return;
    }
    trace_layer(t, layer);
    if (t->zero_stage == 3)
        release_bucket(t, &t->bk[t->bucket_of[layer + 1]]);
}
