/* par_dp.c: strategy dp (torch.nn.DataParallel's design) inside the parallel trainer: every
 * device is a rank that is a thread of this process, over the thread transport, and runs the
 * step's executor (par_forward_backward, pipe_exec.c) on its one-stage action list like any
 * rank; this file adds the two things DataParallel does around each micro-batch, as the list's
 * device hooks: replicate before its forward and reduce after its backward. Device 0 is the
 * trainer's own model and optimizer on the caller's thread; the trainer's step (par_step.c)
 * runs around the executor as it does for ddp, so clipping, the schedule, AdamW on device 0
 * alone, evaluation, checkpoints and memory figures are the trainer's.
 *
 *   device 0 (caller)                       devices 1..n-1 (own threads, a replica each)
 *   next() -> the step's global micro-batches (n*B rows each)
 *   replicate mb 0: go ---------------------> (wake) par_forward_backward on the same list
 *   for each micro-batch of the list:
 *     replicate: broadcast params from 0    (and zero a replica's gradients)
 *     forward + backward on rows 0..B-1     forward + backward on rows d*B..
 *     reduce: [loss sum, failed] summed to every device, gradients to 0 (device 0 adds every
 *             replica's, in device order)
 *   (then the trainer clips and updates on device 0)
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "train/model/gpt_int.h"
#include "train/parallel/par_trainer_int.h"

#define DP_COLLECTIVE_TIMEOUT_S 3600.0

struct par_dp_dev {
    par_dp *dp;
    int id;
    pthread_t th;
    int started;
    coh_comm *comm;      /* rank `id` of the device group */
    coh_par_trainer *t;  /* device 0: the trainer; others: a replica's rank of its own */
    coh_comm *self;      /* a replica's one-rank world (its mesh's) */
    int threads_seen;
    coh_status st;       /* this step's compute failure, published by the reduce */
    char err[256];
};

struct par_dp {
    int n;
    double tokens;          /* of one global micro-batch: n * B * T */
    par_dp_dev *dev;        /* (n) */
    pthread_mutex_t mu;
    pthread_cond_t go;
    unsigned long gen;      /* bumped for each step the devices run */
    int quit;
};

/* The devices' threads wait for a step, then run the executor on the batches device 0 read. */
static void *device_main(void *arg)
{
    par_dp_dev *d = arg;
    par_dp *dp = d->dp;
    /* OpenMP's thread count is per thread: this one runs its ops on itself only */
    coh_set_threads(1);
    unsigned long seen = 0;
    pthread_mutex_lock(&dp->mu);
    for (;;) {
        while (dp->gen == seen && !dp->quit)
            pthread_cond_wait(&dp->go, &dp->mu);
        if (dp->quit)
            break;
        seen = dp->gen;
        pthread_mutex_unlock(&dp->mu);
        /* a failure reaches device 0 through the reduce (or as its own transport error) */
        double loss;
        (void)par_forward_backward(d->t, NULL, NULL, &loss);
        pthread_mutex_lock(&dp->mu);
    }
    pthread_mutex_unlock(&dp->mu);
    return NULL;
}

coh_status par_dp_replicate(par_dp_dev *d, int mb)
{
    par_dp *dp = d->dp;
    if (mb == 0) {
        d->st = COH_OK;
        if (d->id == 0) { /* the batches are read: every device runs the step's list */
            pthread_mutex_lock(&dp->mu);
            dp->gen++;
            pthread_cond_broadcast(&dp->go);
            pthread_mutex_unlock(&dp->mu);
        }
    }
    d->threads_seen = coh_get_threads();
    size_t np;
    float *p = coh_gpt_params(d->t->model, &np);
    coh_status st = coh_broadcast(d->comm, p, np, COH_F32, 0);
    /* a fresh replica in DataParallel has no gradients (the executor zeroed the first's) */
    if (!st && d->id && mb > 0)
        coh_gpt_zero_grad(d->t->model);
    return st;
}

coh_status par_dp_reduce(par_dp_dev *d, int slot, coh_status computed, double *loss)
{
    par_dp *dp = d->dp;
    coh_gpt *g = d->t->model;
    size_t np, bt = (size_t)d->t->cfg.train.batch * d->t->cfg.train.seq;
    float *gr = coh_gpt_grads(g, &np);
    if (computed) {
        d->st = computed;
        snprintf(d->err, sizeof d->err, "%s", coh_last_error());
    }
    /* every device learns whether one failed, so all stop after the same micro-batch */
    double mine[2] = {computed ? 0.0 : d->t->be->sum(g->slot[slot].losses, bt), computed != 0};
    double all[2];
    coh_status st = coh_allreduce(d->comm, mine, all, 2, COH_F64, COH_SUM);
    if (st)
        return st;
    if (all[1] > 0) { /* device 0 names the first that failed: the barrier published its st */
        for (int i = 0; d->id == 0 && i < dp->n; i++)
            if (dp->dev[i].st)
                return coh_errf(dp->dev[i].st, "dp device %d: %s", i, dp->dev[i].err);
        return coh_errf(COH_ERR_INVALID, "another dp device failed");
    }
    if ((st = coh_reduce(d->comm, gr, gr, np, COH_F32, COH_SUM, 0)))
        return st;
    *loss += (float)(all[0] / dp->tokens); /* the mean over every device's tokens */
    return COH_OK;
}

/* A replica: its own model and a one-rank mesh of its own, so the executor sees a rank. */
static coh_status make_replica(par_dp_dev *d, const coh_par_trainer *t)
{
    const coh_trainer_config *c = &t->cfg.train;
    coh_par_trainer *r = calloc(1, sizeof *r);
    if (!(d->t = r))
        return coh_errf(COH_ERR_NOMEM, "out of memory for dp device %d", d->id);
    r->cfg = t->cfg;
    r->be = t->be;
    r->ndp = r->ndev = 1;
    r->seq = calloc(2 * (size_t)c->model.layers + 4, sizeof *r->seq);
    if (!r->seq)
        return coh_errf(COH_ERR_NOMEM, "out of memory for dp device %d", d->id);
    coh_status st = coh_comm_create_self(&d->self);
    if (!st)
        st = coh_mesh_create(d->self, 1, 1, 1, &r->mesh);
    if (!st && (st = coh_gpt_create(&c->model, c->batch, c->seq, &r->model)))
        return coh_err_prefix(st, "dp replica");
    if (st)
        return st;
    r->params = coh_gpt_params(r->model, &r->n);
    r->grads = coh_gpt_grads(r->model, NULL);
    return par_pipe_create(r, &r->exec);
}

static void destroy_replica(par_dp_dev *d)
{
    coh_par_trainer *r = d->t;
    if (!r)
        return;
    par_pipe_destroy(r->exec);
    coh_gpt_destroy(r->model);
    coh_mesh_destroy(r->mesh);
    coh_comm_destroy(d->self);
    free(r->seq);
    free(r);
}

static coh_status add_device(par_dp *dp, coh_par_trainer *t, int i)
{
    par_dp_dev *d = &dp->dev[i];
    d->dp = dp;
    d->id = i;
    coh_status st = i == 0 ? (d->t = t, COH_OK) : make_replica(d, t);
    if (!st) /* device 0's executor holds the batches; the others read their rows of them */
        st = par_pipe_set_device(d->t->exec, d, i, dp->n, t->exec);
    if (st || i == 0)
        return st;
    if (pthread_create(&d->th, NULL, device_main, d))
        return coh_errf(COH_ERR_SYSTEM, "cannot start the thread of dp device %d", i);
    d->started = 1;
    return COH_OK;
}

coh_status par_dp_check(const coh_par_config *c, const coh_mesh *m)
{
    if (c->par.dp < 1 || c->par.dp > COH_DP_MAX_DEVICES)
        return coh_errf(COH_ERR_INVALID, "invalid dp device count '%lld': must be 1..%d",
                        (long long)c->par.dp, COH_DP_MAX_DEVICES);
    if (m->dp != 1)
        return coh_errf(COH_ERR_INVALID, "strategy 'dp' with %d ranks: it runs in one process "
                        "with a thread per device (--devices N); use ddp across processes", m->dp);
    if (c->trace_path)
        return coh_errf(COH_ERR_UNSUPPORTED, "trace '%s': traces are not available for strategy "
                        "'dp'", c->trace_path);
    if (m->tp > 1)
        return coh_errf(COH_ERR_UNSUPPORTED, "strategy 'dp' with tp %d: DataParallel runs "
                        "whole replicas in one process; use ddp or zero1..3 with --tp", m->tp);
    if (m->pp > 1 || c->par.pp > 1)
        return coh_errf(COH_ERR_UNSUPPORTED, "strategy 'dp' with pp %d: DataParallel runs "
                        "whole replicas in one process; use ddp or zero1 with --pp",
                        m->pp > 1 ? m->pp : c->par.pp);
    return COH_OK;
}

coh_status par_dp_build(coh_par_trainer *t)
{
    int n = (int)t->cfg.par.dp;
    const coh_trainer_config *c = &t->cfg.train;
    par_dp *dp = calloc(1, sizeof *dp);
    if (!dp || !(dp->dev = calloc((size_t)n, sizeof *dp->dev))) {
        free(dp);
        return coh_errf(COH_ERR_NOMEM, "out of memory allocating the dp devices");
    }
    t->threads = dp;
    dp->n = n;
    dp->tokens = (double)n * c->batch * c->seq;
    pthread_mutex_init(&dp->mu, NULL);
    pthread_cond_init(&dp->go, NULL);
    coh_comm **comms = calloc((size_t)n, sizeof *comms);
    /* a collective waits for the slowest device's forward and backward, which a loaded machine
     * may stretch far; threads of this process cannot be lost, so the deadline only catches a
     * device left out of a collective */
    coh_status st = comms ? coh_comm_create_threads(n, DP_COLLECTIVE_TIMEOUT_S, comms)
                          : coh_errf(COH_ERR_NOMEM, "out of memory allocating the dp devices");
    for (int i = 0; !st && i < n; i++)
        dp->dev[i].comm = comms[i];
    free(comms);
    for (int i = 0; !st && i < n; i++)
        st = add_device(dp, t, i);
    t->ndev = n;
    t->step_threads = 1; /* device 0 computes with one thread, like every device */
    return st;
}

void par_dp_destroy(par_dp *dp)
{
    if (!dp)
        return;
    pthread_mutex_lock(&dp->mu);
    dp->quit = 1;
    pthread_cond_broadcast(&dp->go);
    pthread_mutex_unlock(&dp->mu);
    for (int i = 0; i < dp->n; i++) {
        par_dp_dev *d = &dp->dev[i];
        if (d->started)
            pthread_join(d->th, NULL);
        if (i)
            destroy_replica(d);
        coh_comm_destroy(d->comm);
    }
    pthread_cond_destroy(&dp->go);
    pthread_mutex_destroy(&dp->mu);
    free(dp->dev);
    free(dp);
}

coh_gpt *par_dp_device_model(const par_dp *dp, int d)
{
    return dp && d >= 0 && d < dp->n && dp->dev[d].t ? dp->dev[d].t->model : NULL;
}

int par_dp_device_threads(const par_dp *dp, int d)
{
    return dp && d >= 0 && d < dp->n ? dp->dev[d].threads_seen : 0;
}
