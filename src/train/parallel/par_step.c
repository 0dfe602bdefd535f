/* par_step.c: the parallel trainer's optimizer step, evaluation, parameter gathering and memory
 * accounting; the data flow reads top to bottom in coh_par_trainer_step. */
#include <stdlib.h>
#include <string.h>

#include "train/parallel/par_trainer_int.h"

static void max_into(coh_model_state_bytes *peak, const coh_model_state_bytes *m)
{
    if (m->params > peak->params)
        peak->params = m->params;
    if (m->grads > peak->grads)
        peak->grads = m->grads;
    if (m->optim > peak->optim)
        peak->optim = m->optim;
}

static void sample_memory(coh_par_trainer *t)
{
    coh_model_state_bytes m, sum = {0};
    for (int d = 0; d < t->ndev; d++) {
        coh_par_trainer_device_memory(t, d, &m);
        max_into(&t->dev_peak[d], &m);
        sum.params += m.params;
        sum.grads += m.grads;
        sum.optim += m.optim;
    }
    max_into(&t->peak, &sum);
}

/* AdamW on what this rank owns, then ZeRO-1/2 share the updated chunks. */
static coh_status update(coh_par_trainer *t, float lr)
{
    const coh_trainer_config *c = &t->cfg.train;
    long step = coh_trainer_get_step(t->base);
    coh_adamw_params ap = {lr, c->beta1, c->beta2, c->eps, c->weight_decay};
    double t0 = par_now_us();
    coh_adamw_update(coh_trainer_optimizer(t->base), t->params, t->grads, &ap, step + 1);
    par_trace_event(t->trace, "optimizer", "optimizer", 0, t0, par_now_us());
    coh_trainer_set_step(t->base, step + 1);
    coh_status st = COH_OK;
    if (t->zero_stage == 1 || t->zero_stage == 2) {
        for (int k = 0; !st && k < t->nbk; k++)
            st = par_gather_bucket(t, k, 0);
        for (int k = 0; k < t->nbk; k++) {
            coh_status s2 = par_wait_bucket(t, k);
            if (!st)
                st = s2;
        }
    }
    return st;
}

static coh_status train_step(coh_par_trainer *t, coh_batch_fn next, void *ctx,
                             coh_step_stats *out)
{
    const coh_trainer_config *c = &t->cfg.train;
    double loss, t0 = par_now_us(), tp0 = coh_gpt_tp_comm_seconds(t->model);
    /* every strategy's, dp's devices included (their replicate and reduce are its hooks) */
    coh_status st = par_forward_backward(t, next, ctx, &loss);
    t->tp_step_s = coh_gpt_tp_comm_seconds(t->model) - tp0;
    if (st)
        return st;
    par_trace_event(t->trace, "forward+backward", "step", 0, t0, par_now_us());
    out->grad_norm = par_clip(t);
    if (t->err)
        return t->err;
    out->lr = coh_lr_schedule(coh_trainer_get_step(t->base), c->warmup, c->steps, c->lr,
                              c->min_lr_frac);
    sample_memory(t);
    if ((st = update(t, out->lr)))
        return st;
    sample_memory(t); /* the moments are resident from the first update on */
    if (t->ndp > 1 && (st = coh_allreduce(t->dp, &loss, &loss, 1, COH_F64, COH_AVG)))
        return st;
    out->loss = (float)loss;
    out->step = coh_trainer_get_step(t->base);
    return COH_OK;
}

coh_status coh_par_trainer_step(coh_par_trainer *t, coh_batch_fn next, void *ctx,
                                coh_step_stats *out)
{
    if (!t->step_threads)
        return train_step(t, next, ctx, out);
    /* OpenMP's thread count is per thread: the caller's comes back after the step */
    int caller = coh_get_threads();
    coh_set_threads(t->step_threads);
    coh_status st = train_step(t, next, ctx, out);
    coh_set_threads(caller);
    return st;
}

/* The mean loss over n micro-batches, on every rank, each forward only through the executor's
 * evaluation list (pp = 1: the one forward; dp: device 0 alone): the last stage's summed over
 * the pipeline (the others add 0), averaged over dp. */
coh_status coh_par_trainer_eval(coh_par_trainer *t, coh_batch_fn next, void *ctx, long n,
                                double *loss)
{
    double sum = 0.0;
    coh_status st = COH_OK;
    for (long k = 0; !st && k < n; k++)
        st = par_pipe_eval_batch(t, next, ctx, &sum);
    coh_status fl = par_pipe_drain(t); /* the sends still in flight (none with one stage) */
    if (!st)
        st = fl;
    *loss = n > 0 ? sum / (double)n : 0.0;
    if (!st) /* as the step's loss: over the stages (one stage: itself alone) */
        st = coh_allreduce(t->mesh->pp_comm, loss, loss, 1, COH_F64, COH_SUM);
    if (!st && t->ndp > 1)
        st = coh_allreduce(t->dp, loss, loss, 1, COH_F64, COH_AVG);
    return st;
}

/* ZeRO-3: each bucket gathered over dp, copied out, and given back again. */
static coh_status gather_zero3(coh_par_trainer *t, float *out)
{
    for (int k = 0; k < t->nbk; k++) {
        par_bucket *b = &t->bk[k];
        coh_status st = par_gather_bucket(t, k, 1);
        if (st)
            return st;
        t->be->copy(out + b->begin, t->params + b->begin, (b->end - b->begin) * sizeof *out,
                    COH_COPY_D2H);
        par_params_give_back(t, b);
        b->present = 0;
    }
    return COH_OK;
}

coh_status par_gather_own(coh_par_trainer *t, float *out)
{
    if (t->zero_stage == 3)
        return gather_zero3(t, out);
    /* the stage's ranges (one stage: the whole arena), summed over the stages */
    const coh_pipe_stage *lay = par_pipe_layout(t->exec);
    memset(out, 0, t->n * sizeof *out);
    for (int k = 0; k < lay->nranges; k++)
        if (!(lay->tied_copy && lay->begin[k] == 0))
            t->be->copy(out + lay->begin[k], t->params + lay->begin[k],
                        (lay->end[k] - lay->begin[k]) * sizeof *out, COH_COPY_D2H);
    return coh_allreduce(t->mesh->pp_comm, out, out, t->n, COH_F32, COH_SUM);
}

coh_status coh_par_trainer_gather_params(coh_par_trainer *t, float *out)
{
    if (t->mesh->tp == 1)
        return par_gather_own(t, out);
    coh_gpt_config whole = t->cfg.train.model;
    whole.tp = 1;
    float *shard = malloc(t->n * sizeof *shard);
    if (!shard)
        return coh_errf(COH_ERR_NOMEM, "out of memory gathering the parameters");
    coh_status st = par_gather_own(t, shard);
    if (!st) /* each shard's tensors into their places, summed over the tp group: exact */
        st = par_tp_gather(t, shard, out, coh_gpt_param_count(&whole));
    free(shard);
    return st;
}

void coh_par_trainer_params_loaded(coh_par_trainer *t)
{
    par_pipe_keep_own(t, t->params); /* one stage keeps everything */
    if (t->zero_stage == 3)
        par_release_params(t);
}

void coh_par_trainer_memory(coh_par_trainer *t, coh_model_state_bytes *out)
{
    coh_model_state_bytes m;
    *out = (coh_model_state_bytes){0};
    for (int d = 0; d < t->ndev; d++) {
        coh_par_trainer_device_memory(t, d, &m);
        out->params += m.params;
        out->grads += m.grads;
        out->optim += m.optim;
    }
}

int coh_par_trainer_devices(const coh_par_trainer *t) { return t->ndev; }

static coh_status check_device(const coh_par_trainer *t, int d)
{
    if (d < 0 || d >= t->ndev)
        return coh_errf(COH_ERR_INVALID, "invalid device '%d': this rank drives devices 0..%d", d,
                        t->ndev - 1);
    return COH_OK;
}

coh_status coh_par_trainer_device_memory(coh_par_trainer *t, int d, coh_model_state_bytes *out)
{
    coh_status st = check_device(t, d);
    if (st)
        return st;
    /* only device 0 updates; the moments' pages appear as the first update writes them */
    coh_adamw *o = coh_trainer_optimizer(t->base);
    size_t m;
    const float *mom1 = coh_adamw_m(o, &m), *mom2 = coh_adamw_v(o, NULL);
    out->optim = d == 0 ? par_resident(t->be, mom1, 0, m) + par_resident(t->be, mom2, 0, m) : 0;
    if (d > 0) { /* dp's replicas (par_dp.c); device 0 is this rank's model */
        coh_gpt *g = par_dp_device_model(t->threads, d);
        out->params = par_resident(t->be, coh_gpt_params(g, NULL), 0, t->n);
        out->grads = par_resident(t->be, coh_gpt_grads(g, NULL), 0, t->n);
        return COH_OK;
    }
    out->params = par_resident(t->be, t->params, 0, t->n);
    out->grads = par_resident(t->be, t->grads, 0, t->n);
    if (t->gacc) /* ZeRO-2/3 accumulating: the own chunks summed over micro-batches */
        out->grads += par_resident(t->be, t->gacc, 0, t->own_total);
    return COH_OK;
}

coh_status coh_par_trainer_device_memory_peak(const coh_par_trainer *t, int d,
                                              coh_model_state_bytes *out)
{
    coh_status st = check_device(t, d);
    if (!st)
        *out = t->dev_peak[d];
    return st;
}

void coh_par_trainer_memory_peak(coh_par_trainer *t, coh_model_state_bytes *out)
{
    *out = t->peak;
}

coh_trainer *coh_par_trainer_base(coh_par_trainer *t) { return t->base; }
const coh_mesh *coh_par_trainer_mesh(const coh_par_trainer *t) { return t->mesh; }
