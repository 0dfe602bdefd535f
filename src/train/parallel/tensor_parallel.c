/* tensor_parallel.c: tensor parallelism in the trainer (the model's own split and all-reduces
 * are src/train/model/gpt_tp.c): which tensors every tp rank holds whole, the gradient norm
 * that counts them once, the whole model gathered from the shards, and the check that the
 * replicated tensors stay bit-identical. */
#include <stdlib.h>
#include <string.h>

#include "train/parallel/par_trainer_int.h"

static double sumsq(const float *g, size_t b, size_t e)
{
    double s = 0.0;
    for (size_t i = b; i < e; i++)
        s += (double)g[i] * g[i];
    return s;
}

double par_sumsq(const coh_par_trainer *t, size_t b, size_t e)
{
    if (t->mesh->tp_rank == 0 || !t->nrep)
        return sumsq(t->grads, b, e);
    double s = 0.0;
    size_t at = b;
    for (int k = 0; k < t->nrep && at < e; k++) { /* the gaps between replicated ranges */
        if (t->rep_e[k] <= at)
            continue;
        size_t stop = t->rep_b[k] < e ? t->rep_b[k] : e;
        if (stop > at)
            s += sumsq(t->grads, at, stop);
        at = t->rep_e[k] > at ? t->rep_e[k] : at;
    }
    if (at < e)
        s += sumsq(t->grads, at, e);
    return s;
}

void par_scale(coh_par_trainer *t, size_t b, size_t e, float f)
{
    for (size_t i = b; i < e; i++)
        t->grads[i] *= f;
}

coh_status par_find_replicated(coh_par_trainer *t)
{
    const coh_gpt_config *c = &t->cfg.train.model;
    int n = coh_gpt_tensor_count(c);
    t->rep_b = malloc((size_t)n * sizeof *t->rep_b);
    t->rep_e = malloc((size_t)n * sizeof *t->rep_e);
    if (!t->rep_b || !t->rep_e)
        return coh_errf(COH_ERR_NOMEM, "out of memory for the replicated tensors' ranges");
    t->nrep = 0;
    for (int i = 0; i < n; i++) {
        coh_tensor_info ti;
        coh_tensor_shard sh;
        coh_gpt_tensor(c, i, &ti);
        coh_gpt_tensor_shard(c, i, t->mesh->tp_rank, &sh);
        if (!sh.replicated)
            continue;
        if (t->nrep && t->rep_e[t->nrep - 1] == ti.offset) { /* adjacent: one range */
            t->rep_e[t->nrep - 1] += ti.numel;
            continue;
        }
        t->rep_b[t->nrep] = ti.offset;
        t->rep_e[t->nrep++] = ti.offset + ti.numel;
    }
    return COH_OK;
}

coh_status par_tp_gather(coh_par_trainer *t, const float *shard, float *out, size_t whole)
{
    memset(out, 0, whole * sizeof *out);
    coh_gpt_arena_gather(&t->cfg.train.model, t->mesh->tp_rank, shard, out);
    return coh_allreduce(t->mesh->tp_comm, out, out, whole, COH_F32, COH_SUM);
}

coh_status coh_par_trainer_check_replicated(coh_par_trainer *t)
{
    if (t->mesh->tp == 1)
        return COH_OK;
    size_t total = 0;
    for (int k = 0; k < t->nrep; k++)
        total += t->rep_e[k] - t->rep_b[k];
    float *copy = malloc((total ? total : 1) * sizeof *copy);
    if (!copy)
        return coh_errf(COH_ERR_NOMEM, "out of memory checking the replicated tensors");
    size_t at = 0;
    for (int k = 0; k < t->nrep; k++) {
        memcpy(copy + at, t->params + t->rep_b[k], (t->rep_e[k] - t->rep_b[k]) * sizeof *copy);
        at += t->rep_e[k] - t->rep_b[k];
    }
    /* tp rank 0's values to every rank, compared bit for bit */
    coh_status st = coh_broadcast(t->mesh->tp_comm, copy, total, COH_F32, 0);
    int64_t differ = 0;
    at = 0;
    for (int k = 0; !st && k < t->nrep; k++)
        for (size_t i = t->rep_b[k]; i < t->rep_e[k]; i++, at++)
            differ += memcmp(&copy[at], &t->params[i], sizeof *copy) != 0;
    free(copy);
    if (!st)
        st = coh_allreduce(t->mesh->tp_comm, &differ, &differ, 1, COH_I64, COH_SUM);
    if (!st && differ)
        st = coh_errf(COH_ERR_INTERNAL, "the replicated tensors (LayerNorms, position embedding, "
                      "row-parallel biases) differ between the %d tp ranks in %lld of %zu "
                      "elements", t->mesh->tp, (long long)differ, total);
    return st;
}

double coh_par_trainer_tp_comm_seconds(const coh_par_trainer *t)
{
    return t->tp_step_s;
}
