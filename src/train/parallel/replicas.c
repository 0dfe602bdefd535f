/* replicas.c: the one check that parameters several ranks each hold a copy of stay bit-identical:
 * the tied embedding's copies along the pipeline and the tensors every tp shard holds whole. */
#include <stdlib.h>
#include <string.h>

#include "train/parallel/par_trainer_int.h"

/* Ranges [b[k], e[k]) of this rank's parameters against rank 0's of `group`, piece by piece so
 * that the check adds no copy of them to the rank's peak; *differ: the elements that differ
 * over the group, *total: the elements compared here. Collective over group. */
static coh_status compare_copies(coh_par_trainer *t, coh_comm *group, const size_t *b,
                                 const size_t *e, int n, int64_t *differ, size_t *total)
{
    enum { PIECE = 1 << 16 };
    float *theirs = malloc(2 * PIECE * sizeof *theirs), *mine = theirs + PIECE;
    coh_status st = theirs ? COH_OK
                           : coh_errf(COH_ERR_NOMEM, "out of memory checking parameter copies");
    *differ = 0;
    *total = 0;
    for (int k = 0; !st && k < n; k++)
        for (size_t at = b[k]; !st && at < e[k]; at += PIECE) {
            size_t len = e[k] - at < PIECE ? e[k] - at : PIECE;
            t->be->copy(mine, t->params + at, len * sizeof *mine, COH_COPY_D2H);
            t->be->copy(theirs, t->params + at, len * sizeof *mine, COH_COPY_D2H);
            st = coh_broadcast(group, theirs, len, COH_F32, 0);
            for (size_t i = 0; !st && i < len; i++) /* bits, not values: -0 and NaN count */
                *differ += memcmp(&theirs[i], &mine[i], sizeof *mine) != 0;
            *total += len;
        }
    free(theirs);
    if (!st)
        st = coh_allreduce(group, differ, differ, 1, COH_I64, COH_SUM);
    return st;
}

coh_status coh_par_trainer_check_tied(coh_par_trainer *t)
{
    coh_comm *embed = t->pipe ? par_pipe_embed(t->pipe) : NULL;
    if (!embed)
        return COH_OK;
    size_t b = 0, e = par_wte_size(&t->cfg.train.model), total;
    int64_t differ;
    coh_status st = compare_copies(t, embed, &b, &e, 1, &differ, &total);
    if (!st && differ)
        st = coh_errf(COH_ERR_INTERNAL, "the tied embedding's copies on the first stage and the "
                      "stages of the LM head differ in %lld elements (of %zu each)",
                      (long long)differ, total);
    return st;
}

coh_status coh_par_trainer_check_replicated(coh_par_trainer *t)
{
    if (t->mesh->tp == 1)
        return COH_OK;
    size_t total;
    int64_t differ;
    coh_status st = compare_copies(t, t->mesh->tp_comm, t->rep_b, t->rep_e, t->nrep, &differ,
                                   &total);
    if (!st && differ)
        st = coh_errf(COH_ERR_INTERNAL, "the replicated tensors (LayerNorms, position embedding, "
                      "row-parallel biases) differ between the %d tp ranks in %lld of %zu "
                      "elements", t->mesh->tp, (long long)differ, total);
    return st;
}
