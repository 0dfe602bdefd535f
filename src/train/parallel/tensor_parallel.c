/* tensor_parallel.c: tensor parallelism in the trainer (the model's own split and all-reduces
 * are src/train/model/gpt_tp.c): which tensors every tp rank holds whole (the clipper counts
 * them once, replicas.c checks they stay bit-identical), and the whole model gathered from
 * the shards. */
#include <stdlib.h>
#include <string.h>

#include "train/parallel/par_trainer_int.h"

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

double coh_par_trainer_tp_comm_seconds(const coh_par_trainer *t)
{
    return t->tp_step_s;
}
