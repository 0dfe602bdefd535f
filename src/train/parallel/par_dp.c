/* par_dp.c: strategy dp (torch.nn.DataParallel's design) inside the parallel trainer: every
 * device is a rank that is a thread of this process, over the thread transport. Device 0 is the
 * trainer's own model and optimizer on the caller's thread; the trainer's step (par_step.c)
 * runs around this file's forward and backward as it does for ddp, so clipping, the schedule,
 * AdamW on device 0 alone, evaluation, checkpoints and memory figures are the trainer's.
 *
 *   device 0 (caller)                       devices 1..n-1 (own threads)
 *   next() -> global micro-batch (n*B rows)
 *   go ------------------------------------> (wake)
 *   broadcast params from 0 (replicate: device 0 copies them into every replica)
 *   forward + backward on rows 0..B-1       zero grads, forward + backward on rows d*B..
 *   reduce [loss sum, failed] to 0 (gather)
 *   reduce grads to 0 (device 0 adds every replica's, in device order)
 *   (repeat per micro-step; then the trainer clips and updates on device 0)
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "train/model/gpt_int.h"
#include "train/parallel/par_trainer_int.h"

#define DP_COLLECTIVE_TIMEOUT_S 3600.0

typedef struct dp_dev {
    par_dp *dp;
    int id;
    pthread_t th;
    int started;
    coh_comm *comm;      /* rank `id` of the device group */
    coh_gpt *g;          /* device 0: the trainer's model; others: a replica */
    int threads_seen;
    coh_status st;
    char err[256];
} dp_dev;

struct par_dp {
    const coh_backend *be;
    int n, B, T;
    float grad_scale;       /* of each device's mean loss: 1 / (n * accum) */
    dp_dev *dev;            /* (n) */
    int32_t *gin, *gtg;     /* (n*B, T) host: the global micro-batch; device d reads rows d*B.. */
    double total;           /* device 0: the last micro-step's loss summed over every token */
    pthread_mutex_t mu;
    pthread_cond_t go;
    unsigned long gen;      /* bumped for each micro-step the devices run */
    int quit;
};

/* One micro-step of one device, every collective taken whatever happened before it so that no
 * device waits for one that failed: replicate, forward and backward on its rows (the token ids
 * stay on the host, where the engine reads them for every strategy), gather, reduce. */
static coh_status device_micro(dp_dev *d)
{
    par_dp *dp = d->dp;
    size_t np, bt = (size_t)dp->B * dp->T;
    float *p = coh_gpt_params(d->g, &np), *gr = coh_gpt_grads(d->g, NULL);
    d->threads_seen = coh_get_threads();
    coh_status cst = coh_broadcast(d->comm, p, np, COH_F32, 0);
    if (d->id) /* a fresh replica in DataParallel has no gradients */
        coh_gpt_zero_grad(d->g);
    float mean;
    d->st = cst ? cst : coh_gpt_step(d->g, dp->gin + d->id * bt, dp->gtg + d->id * bt, dp->B,
                                     dp->T, dp->grad_scale, &mean);
    if (d->st)
        snprintf(d->err, sizeof d->err, "%s", coh_last_error());
    double mine[2] = {d->st ? 0.0 : dp->be->sum(d->g->slot[0].losses, bt), d->st != 0}, all[2];
    if (!cst)
        cst = coh_reduce(d->comm, mine, all, 2, COH_F64, COH_SUM, 0);
    if (!cst)
        cst = coh_reduce(d->comm, gr, gr, np, COH_F32, COH_SUM, 0);
    if (!cst && d->id == 0) {
        dp->total = all[0];
        cst = all[1] > 0 ? COH_ERR_INVALID : COH_OK; /* which device: the caller looks */
    }
    return cst;
}

static void *device_main(void *arg)
{
    dp_dev *d = arg;
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
        coh_status st = device_micro(d);
        if (st && !d->st) { /* a transport failure: the device's own error stands first */
            d->st = st;
            snprintf(d->err, sizeof d->err, "%s", coh_last_error());
        }
        pthread_mutex_lock(&dp->mu);
    }
    pthread_mutex_unlock(&dp->mu);
    return NULL;
}

static coh_status add_device(par_dp *dp, coh_par_trainer *t, int i)
{
    dp_dev *d = &dp->dev[i];
    d->dp = dp;
    d->id = i;
    if (i == 0) {
        d->g = t->model;
        return COH_OK;
    }
    const coh_trainer_config *c = &t->cfg.train;
    coh_status st = coh_gpt_create(&c->model, c->batch, c->seq, &d->g);
    if (st)
        return coh_err_prefix(st, "dp replica");
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
    dp->be = t->be;
    dp->n = n;
    dp->B = c->batch;
    dp->T = c->seq;
    dp->grad_scale = 1.0f / ((float)n * (float)c->accum);
    pthread_mutex_init(&dp->mu, NULL);
    pthread_cond_init(&dp->go, NULL);
    size_t gbt = (size_t)n * c->batch * c->seq;
    dp->gin = malloc(gbt * sizeof *dp->gin);
    dp->gtg = malloc(gbt * sizeof *dp->gtg);
    coh_comm **comms = calloc((size_t)n, sizeof *comms);
    /* a collective waits for the slowest device's forward and backward, which a loaded machine
     * may stretch far; threads of this process cannot be lost, so the deadline only catches a
     * device left out of a collective */
    coh_status st = dp->gin && dp->gtg && comms
                        ? coh_comm_create_threads(n, DP_COLLECTIVE_TIMEOUT_S, comms)
                        : coh_errf(COH_ERR_NOMEM, "out of memory allocating the dp batch");
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
        dp_dev *d = &dp->dev[i];
        if (d->started)
            pthread_join(d->th, NULL);
        if (i)
            coh_gpt_destroy(d->g);
        coh_comm_destroy(d->comm);
    }
    pthread_cond_destroy(&dp->go);
    pthread_mutex_destroy(&dp->mu);
    free(dp->dev);
    free(dp->gin);
    free(dp->gtg);
    free(dp);
}

/* Every device's micro-step, device 0's on the calling thread; the first failing device named. */
static coh_status run_devices(par_dp *dp)
{
    pthread_mutex_lock(&dp->mu);
    dp->gen++;
    pthread_cond_broadcast(&dp->go);
    pthread_mutex_unlock(&dp->mu);
    coh_status st = device_micro(&dp->dev[0]);
    for (int i = 0; st && i < dp->n; i++) /* the reduce's barrier published every d->st */
        if (dp->dev[i].st)
            return coh_errf(dp->dev[i].st, "dp device %d: %s", i, dp->dev[i].err);
    return st;
}

coh_status par_dp_forward_backward(coh_par_trainer *t, coh_batch_fn next, void *ctx,
                                   double *loss)
{
    par_dp *dp = t->threads;
    double all = (double)dp->n * dp->B * dp->T, sum = 0.0;
    coh_gpt_zero_grad(t->model); /* device 0 accumulates over the micro-steps */
    for (int k = 0; k < t->cfg.train.accum; k++) {
        coh_status st = next(ctx, dp->gin, dp->gtg);
        if (st || (st = run_devices(dp)))
            return st;
        sum += (float)(dp->total / all);
    }
    *loss = sum / t->cfg.train.accum;
    return COH_OK;
}

coh_gpt *par_dp_device_model(const par_dp *dp, int d)
{
    return dp && d >= 0 && d < dp->n ? dp->dev[d].g : NULL;
}

int par_dp_device_threads(const par_dp *dp, int d)
{
    return dp && d >= 0 && d < dp->n ? dp->dev[d].threads_seen : 0;
}
