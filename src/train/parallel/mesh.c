/* mesh.c: world ranks arranged as (dp, pp, tp), one communicator per axis made by split. */
#include <stdlib.h>

#include "cohort/parallel.h"

/* Megatron's order: tp fastest (neighbouring ranks, one node), then dp, then pp */
void coh_mesh_coords(long r, int dp, int pp, int tp, int *dp_rank, int *pp_rank, int *tp_rank)
{
    (void)pp;
    *tp_rank = (int)(r % tp);
    *dp_rank = (int)((r / tp) % dp);
    *pp_rank = (int)(r / ((long)tp * dp));
}

long coh_mesh_rank(int dp, int pp, int tp, int dp_rank, int pp_rank, int tp_rank)
{
    (void)pp;
    return ((long)pp_rank * dp + dp_rank) * tp + tp_rank;
}

coh_status coh_mesh_create(coh_comm *world, int dp, int pp, int tp, coh_mesh **out)
{
    *out = NULL;
    int n = coh_comm_size(world), r = coh_comm_rank(world);
    if (dp < 1 || pp < 1 || tp < 1 || (long)dp * pp * tp != n)
        return coh_errf(COH_ERR_INVALID, "invalid mesh '%dx%dx%d' (dp x pp x tp): the product "
                        "must equal the world size %d", dp, pp, tp, n);
    coh_mesh *m = calloc(1, sizeof *m);
    if (!m)
        return coh_errf(COH_ERR_NOMEM, "out of memory allocating the mesh");
    *m = (coh_mesh){.dp = dp, .pp = pp, .tp = tp, .world = world};
    coh_mesh_coords(r, dp, pp, tp, &m->dp_rank, &m->pp_rank, &m->tp_rank);
    /* ranks sharing the other two coordinates form one group along an axis */
    coh_status st = coh_comm_split(world, m->pp_rank * tp + m->tp_rank, m->dp_rank, &m->dp_comm);
    if (!st)
        st = coh_comm_split(world, m->dp_rank * tp + m->tp_rank, m->pp_rank, &m->pp_comm);
    if (!st)
        st = coh_comm_split(world, m->pp_rank * dp + m->dp_rank, m->tp_rank, &m->tp_comm);
    if (st) {
        coh_mesh_destroy(m);
        return st;
    }
    *out = m;
    return COH_OK;
}

void coh_mesh_destroy(coh_mesh *m)
{
    if (!m)
        return;
    coh_comm_destroy(m->dp_comm);
    coh_comm_destroy(m->pp_comm);
    coh_comm_destroy(m->tp_comm);
    free(m);
}
