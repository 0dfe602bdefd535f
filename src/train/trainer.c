/* trainer.c: the optimizer step (accumulate micro-batches, clip, schedule, AdamW) and eval. */
#include <stdlib.h>
#include <string.h>

#include "cohort/train.h"

struct coh_trainer {
    coh_trainer_config cfg;
    coh_gpt *model;
    coh_adamw *opt;
    int32_t *inputs, *targets; /* (B, T) */
    long step;
};

void coh_trainer_config_defaults(coh_trainer_config *c)
{
    memset(c, 0, sizeof *c);
    c->accum = 1;
    c->lr = 3e-4f;
    c->min_lr_frac = 0.1f;
    c->beta1 = 0.9f;
    c->beta2 = 0.95f;
    c->eps = 1e-8f;
    c->weight_decay = 0.1f;
    c->grad_clip = 1.0f;
    c->seed = 1337;
}

static coh_status check(const coh_trainer_config *c)
{
    if (c->accum < 1)
        return coh_errf(COH_ERR_INVALID, "invalid accumulation '%d': must be at least 1",
                        c->accum);
    if (c->steps < 1)
        return coh_errf(COH_ERR_INVALID, "invalid steps '%ld': must be at least 1", c->steps);
    if (c->warmup < 0)
        return coh_errf(COH_ERR_INVALID, "invalid warmup '%ld': must be 0 or more", c->warmup);
    if (!(c->lr > 0) || !(c->min_lr_frac >= 0 && c->min_lr_frac <= 1))
        return coh_errf(COH_ERR_INVALID, "invalid learning rate '%g' (min fraction '%g'): lr "
                        "must be > 0 and the fraction in 0..1", c->lr, c->min_lr_frac);
    if (!(c->beta1 >= 0 && c->beta1 < 1) || !(c->beta2 >= 0 && c->beta2 < 1) || !(c->eps > 0))
        return coh_errf(COH_ERR_INVALID, "invalid adamw betas '%g,%g' or eps '%g': betas in "
                        "[0,1), eps > 0", c->beta1, c->beta2, c->eps);
    if (!(c->weight_decay >= 0) || !(c->grad_clip >= 0))
        return coh_errf(COH_ERR_INVALID, "invalid weight decay '%g' or clip '%g': must be >= 0",
                        c->weight_decay, c->grad_clip);
    return COH_OK;
}

coh_status coh_trainer_create(const coh_trainer_config *c, coh_trainer **out)
{
    *out = NULL;
    coh_status st = check(c);
    if (st)
        return st;
    coh_gpt *model = NULL;
    coh_adamw *opt = NULL;
    if ((st = coh_gpt_create(&c->model, c->batch, c->seq, &model)) ||
        (st = coh_adamw_create(&c->model, &opt))) {
        coh_gpt_destroy(model);
        coh_adamw_destroy(opt);
        return st;
    }
    coh_gpt_init_weights(model, c->seed);
    return coh_trainer_create_from(c, model, opt, out);
}

coh_status coh_trainer_create_from(const coh_trainer_config *c, coh_gpt *model, coh_adamw *opt,
                                   coh_trainer **out)
{
    *out = NULL;
    coh_status st = check(c);
    coh_trainer *t = st ? NULL : calloc(1, sizeof *t);
    if (!st && !t)
        st = coh_errf(COH_ERR_NOMEM, "out of memory allocating the trainer");
    if (st) {
        coh_gpt_destroy(model);
        coh_adamw_destroy(opt);
        return st;
    }
    t->cfg = *c;
    t->model = model;
    t->opt = opt;
    size_t n = (size_t)c->batch * c->seq;
    t->inputs = malloc(n * sizeof *t->inputs);
    t->targets = malloc(n * sizeof *t->targets);
    if (!t->inputs || !t->targets) {
        coh_trainer_destroy(t);
        return coh_errf(COH_ERR_NOMEM, "out of memory allocating batch buffers");
    }
    *out = t;
    return COH_OK;
}

void coh_trainer_destroy(coh_trainer *t)
{
    if (!t)
        return;
    coh_gpt_destroy(t->model);
    coh_adamw_destroy(t->opt);
    free(t->inputs);
    free(t->targets);
    free(t);
}

coh_status coh_trainer_step(coh_trainer *t, coh_batch_fn next, void *ctx, coh_step_stats *out)
{
    const coh_trainer_config *c = &t->cfg;
    coh_gpt_zero_grad(t->model);
    double sum = 0.0;
    for (int k = 0; k < c->accum; k++) {
        float loss;
        coh_status st = next(ctx, t->inputs, t->targets);
        if (!st)
            st = coh_gpt_step(t->model, t->inputs, t->targets, c->batch, c->seq,
                              1.0f / (float)c->accum, &loss);
        if (st)
            return st;
        sum += loss;
    }
    size_t n;
    float *p = coh_gpt_params(t->model, &n), *g = coh_gpt_grads(t->model, NULL);
    out->grad_norm = coh_clip_grad_norm(g, n, c->grad_clip);
    out->lr = coh_lr_schedule(t->step, c->warmup, c->steps, c->lr, c->min_lr_frac);
    coh_adamw_params ap = {out->lr, c->beta1, c->beta2, c->eps, c->weight_decay};
    coh_adamw_update(t->opt, p, g, &ap, t->step + 1);
    t->step++;
    out->step = t->step;
    out->loss = (float)(sum / c->accum);
    return COH_OK;
}

coh_status coh_trainer_eval(coh_trainer *t, coh_batch_fn next, void *ctx, long n, double *loss)
{
    double sum = 0.0;
    for (long k = 0; k < n; k++) {
        float l;
        coh_status st = next(ctx, t->inputs, t->targets);
        if (!st)
            st = coh_gpt_step(t->model, t->inputs, t->targets, t->cfg.batch, t->cfg.seq, 0.0f, &l);
        if (st)
            return st;
        sum += l;
    }
    *loss = n > 0 ? sum / (double)n : 0.0;
    return COH_OK;
}

coh_gpt *coh_trainer_model(coh_trainer *t) { return t->model; }
coh_adamw *coh_trainer_optimizer(coh_trainer *t) { return t->opt; }
const coh_trainer_config *coh_trainer_get_config(const coh_trainer *t) { return &t->cfg; }

long coh_trainer_get_step(const coh_trainer *t) { return t->step; }
void coh_trainer_set_step(coh_trainer *t, long step) { t->step = step; }
