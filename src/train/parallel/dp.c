/* dp.c: DP, torch.nn.DataParallel's design in one process: a thread per device, device 0
 * scatters the batch and copies its parameters to every replica each micro-step, gathers the
 * per-token losses, reduces the replicas' gradients into its own and runs the optimizer.
 *
 *   device 0 (caller)            devices 1..n-1 (own threads)
 *   next() -> global batch
 *   scatter rows, copy params -> replicas
 *   go ------------------------> zero grads, forward + backward on own rows
 *   forward + backward rows 0..  |
 *   wait <---------------------- done
 *   gather losses, grads += replica grads          (repeat per micro-step)
 *   clip, schedule, AdamW
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cohort/train_dp.h"
#include "train/model/gpt_int.h"

typedef struct dp_dev {
    coh_dp *dp;
    int id;
    pthread_t th;
    int started;
    coh_gpt *g;          /* device 0: the trainer's model; others: a replica */
    int32_t *in, *tg;    /* (B, T) this device's rows */
    float loss;
    int threads_seen;
    coh_status st;
    char err[256];
} dp_dev;

struct coh_dp {
    coh_trainer_config cfg;
    int n;
    coh_trainer *t;
    dp_dev *dev;            /* (n) */
    int32_t *gin, *gtg;     /* (n*B, T) the global micro-batch */
    float *glosses;         /* (n*B, T) per-token losses gathered on device 0 */
    float grad_scale;       /* of each device's mean loss: 1 / (n * accum) */
    pthread_mutex_t mu;
    pthread_cond_t go, done;
    unsigned long gen;      /* bumped for each micro-step the devices run */
    int pending, quit;
};

/* Forward and backward of one device on its rows; replicas start from zero gradients (a fresh
 * replica in DataParallel has none), device 0 accumulates over the micro-steps. */
static void device_run(dp_dev *d)
{
    const coh_trainer_config *c = &d->dp->cfg;
    if (d->id)
        coh_gpt_zero_grad(d->g);
    d->threads_seen = coh_get_threads();
    d->st = coh_gpt_step(d->g, d->in, d->tg, c->batch, c->seq, d->dp->grad_scale, &d->loss);
    if (d->st)
        snprintf(d->err, sizeof d->err, "%s", coh_last_error());
}

static void *device_main(void *arg)
{
    dp_dev *d = arg;
    coh_dp *dp = d->dp;
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
        device_run(d);
        pthread_mutex_lock(&dp->mu);
        if (--dp->pending == 0)
            pthread_cond_signal(&dp->done);
    }
    pthread_mutex_unlock(&dp->mu);
    return NULL;
}

static coh_status alloc_device(coh_dp *dp, int i)
{
    dp_dev *d = &dp->dev[i];
    size_t bt = (size_t)dp->cfg.batch * dp->cfg.seq;
    d->dp = dp;
    d->id = i;
    d->in = malloc(bt * sizeof *d->in);
    d->tg = malloc(bt * sizeof *d->tg);
    if (!d->in || !d->tg)
        return coh_errf(COH_ERR_NOMEM, "out of memory allocating device %d's batch", i);
    if (i == 0) {
        d->g = coh_trainer_model(dp->t);
        return COH_OK;
    }
    coh_status st = coh_gpt_create(&dp->cfg.model, dp->cfg.batch, dp->cfg.seq, &d->g);
    if (st)
        return coh_err_prefix(st, "dp replica");
    if (pthread_create(&d->th, NULL, device_main, d))
        return coh_errf(COH_ERR_SYSTEM, "cannot start the thread of dp device %d", i);
    d->started = 1;
    return COH_OK;
}

static coh_status alloc_all(coh_dp *dp)
{
    size_t gbt = (size_t)dp->n * dp->cfg.batch * dp->cfg.seq;
    dp->gin = malloc(gbt * sizeof *dp->gin);
    dp->gtg = malloc(gbt * sizeof *dp->gtg);
    dp->glosses = malloc(gbt * sizeof *dp->glosses);
    if (!dp->gin || !dp->gtg || !dp->glosses)
        return coh_errf(COH_ERR_NOMEM, "out of memory allocating the dp batch");
    coh_status st = coh_trainer_create(&dp->cfg, &dp->t);
    for (int i = 0; !st && i < dp->n; i++)
        st = alloc_device(dp, i);
    return st;
}

coh_status coh_dp_create(const coh_trainer_config *c, int devices, coh_dp **out)
{
    *out = NULL;
    if (devices < 1 || devices > COH_DP_MAX_DEVICES)
        return coh_errf(COH_ERR_INVALID, "invalid dp device count '%d': must be 1..%d", devices,
                        COH_DP_MAX_DEVICES);
    coh_status st = coh_gpt_config_check(&c->model);
    if (st)
        return st;
    if (c->batch < 1 || c->seq < 1)
        return coh_errf(COH_ERR_INVALID, "invalid batch '%d' or seq '%d': must be at least 1",
                        c->batch, c->seq);
    coh_dp *dp = calloc(1, sizeof *dp);
    if (!dp || !(dp->dev = calloc((size_t)devices, sizeof *dp->dev))) {
        free(dp);
        return coh_errf(COH_ERR_NOMEM, "out of memory allocating the dp trainer");
    }
    dp->cfg = *c;
    dp->n = devices;
    dp->grad_scale = 1.0f / ((float)devices * (float)c->accum);
    pthread_mutex_init(&dp->mu, NULL);
    pthread_cond_init(&dp->go, NULL);
    pthread_cond_init(&dp->done, NULL);
    if ((st = alloc_all(dp))) {
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
        free(d->in);
        free(d->tg);
    }
    coh_trainer_destroy(dp->t);
    pthread_cond_destroy(&dp->go);
    pthread_cond_destroy(&dp->done);
    pthread_mutex_destroy(&dp->mu);
    free(dp->dev);
    free(dp->gin);
    free(dp->gtg);
    free(dp->glosses);
    free(dp);
}

/* Device 0 hands every device its rows and a copy of its parameters (DataParallel's scatter and
 * replicate, done on every forward). */
static void scatter_replicate(coh_dp *dp)
{
    size_t bt = (size_t)dp->cfg.batch * dp->cfg.seq, np;
    const float *master = coh_gpt_params(dp->dev[0].g, &np);
    for (int i = 0; i < dp->n; i++) {
        dp_dev *d = &dp->dev[i];
        memcpy(d->in, dp->gin + i * bt, bt * sizeof *d->in);
        memcpy(d->tg, dp->gtg + i * bt, bt * sizeof *d->tg);
        if (i)
            memcpy(coh_gpt_params(d->g, NULL), master, np * sizeof *master);
    }
}

/* Runs every device on its rows; device 0 on the calling thread. */
static coh_status run_devices(coh_dp *dp)
{
    pthread_mutex_lock(&dp->mu);
    dp->gen++;
    dp->pending = dp->n - 1;
    pthread_cond_broadcast(&dp->go);
    pthread_mutex_unlock(&dp->mu);
    device_run(&dp->dev[0]);
    pthread_mutex_lock(&dp->mu);
    while (dp->pending)
        pthread_cond_wait(&dp->done, &dp->mu);
    pthread_mutex_unlock(&dp->mu);
    for (int i = 0; i < dp->n; i++)
        if (dp->dev[i].st)
            return coh_errf(dp->dev[i].st, "dp device %d: %s", i, dp->dev[i].err);
    return COH_OK;
}

/* Device 0 gathers the per-token losses and takes their mean, in the order one device would. */
static double gather_loss(coh_dp *dp)
{
    size_t bt = (size_t)dp->cfg.batch * dp->cfg.seq, all = bt * dp->n;
    for (int i = 0; i < dp->n; i++)
        memcpy(dp->glosses + i * bt, dp->dev[i].g->slot[0].losses, bt * sizeof *dp->glosses);
    double sum = 0.0;
    for (size_t k = 0; k < all; k++)
        sum += dp->glosses[k];
    return sum / (double)all;
}

/* Device 0 adds every replica's gradients into its own, replicas in device order. */
static void reduce_grads(coh_dp *dp)
{
    size_t n;
    float *g0 = coh_gpt_grads(dp->dev[0].g, &n);
    for (int i = 1; i < dp->n; i++) {
        const float *gi = coh_gpt_grads(dp->dev[i].g, NULL);
        for (size_t k = 0; k < n; k++)
            g0[k] += gi[k];
    }
}

static coh_status micro_steps(coh_dp *dp, coh_batch_fn next, void *ctx, double *loss_sum)
{
    coh_gpt_zero_grad(dp->dev[0].g);
    *loss_sum = 0.0;
    for (int k = 0; k < dp->cfg.accum; k++) {
        coh_status st = next(ctx, dp->gin, dp->gtg);
        if (st)
            return st;
        scatter_replicate(dp);
        if ((st = run_devices(dp)))
            return st;
        *loss_sum += (float)gather_loss(dp);
        reduce_grads(dp);
    }
    return COH_OK;
}

coh_status coh_dp_step(coh_dp *dp, coh_batch_fn next, void *ctx, coh_step_stats *out)
{
    const coh_trainer_config *c = &dp->cfg;
    int caller_threads = coh_get_threads();
    coh_set_threads(1); /* device 0's work runs on this thread, with one thread like the rest */
    double sum;
    coh_status st = micro_steps(dp, next, ctx, &sum);
    if (!st) {
        size_t n;
        coh_gpt *g = dp->dev[0].g;
        float *p = coh_gpt_params(g, &n), *gr = coh_gpt_grads(g, NULL);
        long step = coh_trainer_get_step(dp->t);
        out->grad_norm = coh_clip_grad_norm(gr, n, c->grad_clip);
        out->lr = coh_lr_schedule(step, c->warmup, c->steps, c->lr, c->min_lr_frac);
        coh_adamw_params ap = {out->lr, c->beta1, c->beta2, c->eps, c->weight_decay};
        coh_adamw_update(coh_trainer_optimizer(dp->t), p, gr, &ap, step + 1);
        coh_trainer_set_step(dp->t, step + 1);
        out->step = step + 1;
        out->loss = (float)(sum / c->accum);
    }
    coh_set_threads(caller_threads);
    return st;
}

coh_trainer *coh_dp_trainer(coh_dp *dp) { return dp->t; }
int coh_dp_devices(const coh_dp *dp) { return dp->n; }

coh_gpt *coh_dp_device_model(coh_dp *dp, int d)
{
    return d >= 0 && d < dp->n ? dp->dev[d].g : NULL;
}

int coh_dp_device_threads(const coh_dp *dp, int d)
{
    return d >= 0 && d < dp->n ? dp->dev[d].threads_seen : 0;
}
