/* dp.c: the library face of strategy dp (include/cohort/train_dp.h): a parallel trainer of one
 * rank whose devices are threads (par_dp.c), so DP steps, clips and updates through the same
 * trainer code as ddp. */
#include <stdlib.h>

#include "cohort/train_dp.h"
#include "train/parallel/par_trainer_int.h"

struct coh_dp {
    coh_comm *self;
    coh_mesh *mesh;
    coh_par_trainer *t;
};

static coh_status check(const coh_trainer_config *c, int devices)
{
    if (devices < 1 || devices > COH_DP_MAX_DEVICES)
        return coh_errf(COH_ERR_INVALID, "invalid dp device count '%d': must be 1..%d", devices,
                        COH_DP_MAX_DEVICES);
    coh_status st = coh_gpt_config_check(&c->model);
    if (st)
        return st;
    if (c->batch < 1 || c->seq < 1 || c->seq > c->model.seq)
        return coh_errf(COH_ERR_INVALID, "invalid batch '%d' or seq '%d': must be at least 1 "
                        "(seq at most the context %d)", c->batch, c->seq, c->model.seq);
    return COH_OK;
}

coh_status coh_dp_create(const coh_trainer_config *c, int devices, coh_dp **out)
{
    *out = NULL;
    coh_status st = check(c, devices);
    if (st)
        return st;
    coh_dp *dp = calloc(1, sizeof *dp);
    if (!dp)
        return coh_errf(COH_ERR_NOMEM, "out of memory allocating the dp trainer");
    coh_par_config pc = {0};
    coh_parallel_config_init(&pc.par);
    pc.par.strategy = COH_STRATEGY_DP;
    pc.par.dp = devices;
    pc.par.micro_batch = c->batch;
    pc.par.seq = c->seq;
    pc.par.microbatches = c->accum;
    pc.train = *c;
    if (!(st = coh_comm_create_self(&dp->self)) &&
        !(st = coh_mesh_create(dp->self, 1, 1, 1, &dp->mesh)))
        st = coh_par_trainer_create(&pc, dp->mesh, &dp->t);
    if (st) {
        coh_dp_destroy(dp);
        return st;
    }
    *out = dp;
    return COH_OK;
}

void coh_dp_destroy(coh_dp *dp)
{
    if (!dp)
        return;
    coh_par_trainer_destroy(dp->t);
    coh_mesh_destroy(dp->mesh);
    coh_comm_destroy(dp->self);
    free(dp);
}

coh_status coh_dp_step(coh_dp *dp, coh_batch_fn next, void *ctx, coh_step_stats *out)
{
    return coh_par_trainer_step(dp->t, next, ctx, out);
}

coh_trainer *coh_dp_trainer(coh_dp *dp) { return coh_par_trainer_base(dp->t); }
int coh_dp_devices(const coh_dp *dp) { return coh_par_trainer_devices(dp->t); }

coh_gpt *coh_dp_device_model(coh_dp *dp, int d)
{
    return par_dp_device_model(dp->t->threads, d);
}

int coh_dp_device_threads(const coh_dp *dp, int d)
{
    return par_dp_device_threads(dp->t->threads, d);
}
