/* par_trainer.c: the parallel trainer: one step loop for every strategy on the mesh, with the
 * strategy entering only through the hooks it installs and the ranges it owns. */
#include <stdlib.h>
#include <string.h>

#include "cohort/log.h"
#include "train/parallel/par_trainer_int.h"

void coh_par_config_apply(coh_par_config *c)
{
    const coh_parallel_config *p = &c->par;
    c->train.batch = (int)p->micro_batch;
    c->train.seq = p->seq ? (int)p->seq : c->train.model.seq;
    c->train.accum = p->microbatches > 0 ? (int)p->microbatches : 1;
    c->train.model.tp = p->tp > 1 ? (int)p->tp : 0;
    c->train.model.sp = p->tp > 1 && p->sequence_parallel;
}

static coh_status check(const coh_par_config *c, const coh_mesh *m)
{
    const coh_parallel_config *p = &c->par;
    char why[160];
    if ((unsigned)p->strategy >= COH_STRATEGY_COUNT)
        return coh_errf(COH_ERR_INVALID, "invalid strategy '%d'", (int)p->strategy);
    if (!coh_parallel_config_runnable(p, why, sizeof why))
        return coh_errf(COH_ERR_UNSUPPORTED, "%s", why);
    if (p->micro_batch < 1 || p->micro_batch > 1 << 20 || p->microbatches < 0 ||
        p->microbatches > 1 << 20 || p->seq < 0 || p->seq > c->train.model.seq)
        return coh_errf(COH_ERR_INVALID, "invalid batch shape: micro batch %lld, microbatches "
                        "%lld, seq %lld (context %d)", (long long)p->micro_batch,
                        (long long)p->microbatches, (long long)p->seq, c->train.model.seq);
    coh_status st = p->strategy == COH_STRATEGY_DP ? par_dp_check(c, m) : COH_OK;
    if (st)
        return st;
    /* dp's devices (configuration dp) are threads of one rank */
    int ranks = p->strategy == COH_STRATEGY_DP ? 1 : (int)p->dp;
    if (m->pp != p->pp || m->tp != p->tp || m->dp != ranks)
        return coh_errf(COH_ERR_INVALID, "mesh %dx%dx%d (dp x pp x tp) differs from the "
                        "configuration's dp %d x pp %d x tp %d", m->dp, m->pp, m->tp, p->dp,
                        p->pp, p->tp);
    if (m->pp > 1 && coh_strategy_zero_stage(p->strategy) > 1)
        return coh_errf(COH_ERR_UNSUPPORTED, "strategy '%s' with pp %d: ZeRO-2 and -3 shard "
                        "gradients that a pipeline accumulates over its microbatches; use ddp or "
                        "zero1", coh_strategy_name(p->strategy), m->pp);
    if (c->train.tied_grad_apart && (p->strategy == COH_STRATEGY_DP || m->dp != 1))
        return coh_errf(COH_ERR_UNSUPPORTED, "the tied embedding's gradients in a pipeline's "
                        "order with %s (dp %lld): a replica's wte gradient is reduced when the "
                        "embedding's backward ends, before the head's part could join it; keep "
                        "one replica", coh_strategy_name(p->strategy), (long long)p->dp);
    if (c->train.grad_accum_apart && (p->strategy == COH_STRATEGY_DP || m->dp != 1 ||
                                      m->pp != 1 || m->tp != 1 || c->train.tied_grad_apart))
        return coh_errf(COH_ERR_UNSUPPORTED, "micro-batches summed apart with %s on dp %d x pp "
                        "%d x tp %d%s: it is one rank's way to sum as 2 data-parallel ranks "
                        "do; keep one rank, the tied embedding's order interleaved",
                        coh_strategy_name(p->strategy), m->dp, m->pp, m->tp,
                        c->train.tied_grad_apart ? " and the tied embedding's gradients in a "
                                                   "pipeline's order" : "");
    if (p->strategy == COH_STRATEGY_SINGLE && m->dp != 1)
        return coh_errf(COH_ERR_INVALID, "strategy 'single' with %d ranks: use ddp or zero1..3 "
                        "under 'cohort run', or run one process", m->dp);
    return COH_OK;
}

/* The optimizer covers this rank's chunks under ZeRO, its stage's ranges otherwise (pp = 1: the
 * whole arena). */
static coh_status make_optimizer(coh_par_trainer *t, coh_adamw **opt)
{
    const coh_pipe_stage *lay = par_pipe_layout(t->exec);
    int n = t->zero_stage == 0 ? lay->nranges : t->nbk;
    t->own_rb = malloc((size_t)n * sizeof *t->own_rb);
    t->own_re = malloc((size_t)n * sizeof *t->own_re);
    if (!t->own_rb || !t->own_re)
        return coh_errf(COH_ERR_NOMEM, "out of memory for shard ranges");
    t->nown = n;
    for (int k = 0; k < n; k++) {
        if (!t->zero_stage) {
            t->own_rb[k] = lay->begin[k];
            t->own_re[k] = lay->end[k];
        } else { /* arena order: buckets run backwards */
            t->own_rb[k] = t->bk[t->nbk - 1 - k].own_b;
            t->own_re[k] = t->bk[t->nbk - 1 - k].own_e;
        }
    }
    return coh_adamw_create_ranges(&t->cfg.train.model, t->own_rb, t->own_re, n, opt);
}

static coh_status alloc_state(coh_par_trainer *t)
{
    int L = t->cfg.train.model.layers;
    t->seq = calloc(2 * (size_t)L + 4, sizeof *t->seq);
    t->t_need = calloc((size_t)L + 2, sizeof *t->t_need);
    t->need_ev = calloc((size_t)L + 2, sizeof *t->need_ev);
    if (t->zero_stage >= 2 && t->cfg.train.accum > 1)
        t->gacc = coh_dev_alloc(t->be, t->own_total * sizeof(float));
    if (!t->seq || !t->t_need || !t->need_ev ||
        (t->zero_stage >= 2 && t->cfg.train.accum > 1 && !t->gacc))
        return coh_errf(COH_ERR_NOMEM, "out of memory allocating the parallel trainer");
    return COH_OK;
}

/* pp > 1: the whole arena is reserved but only this stage's ranges are ever written (and
 * held), its optimizer covers them (ZeRO-1: this replica's chunks of the stage's buckets),
 * and its activations have one slot per micro-batch the schedule keeps in flight, each sized for
 * the stage's own layers. */
static coh_status build_pipeline(coh_par_trainer *t, coh_gpt *model, coh_adamw **opt)
{
    coh_status st = COH_OK;
    t->pipe = t->exec;
    const coh_pipe_stage *lay = par_pipe_layout(t->pipe);
    par_pipe_keep_own(t, coh_gpt_params(model, NULL));
    if ((st = par_plan_buckets(t))) /* dp sync over the stage's ranges, by the grad hook */
        return st;
    int full = t->cfg.par.recompute == COH_RECOMPUTE_FULL;
    if ((st = coh_gpt_set_stage_slots(model, par_pipe_slots(t->pipe), lay->chunks, lay->lo,
                                      lay->hi, lay->first, lay->head)) ||
        (st = par_pipe_setup_model(t->pipe, model, full)))
        return st;
    return make_optimizer(t, opt);
}

static coh_status build(coh_par_trainer *t)
{
    const coh_par_config *c = &t->cfg;
    coh_gpt *model;
    coh_adamw *opt = NULL;
    /* a pipeline stage's activations are sized for its own layers (build_pipeline) */
    coh_status st = (t->mesh->pp > 1 ? coh_gpt_create_stage : coh_gpt_create)(
        &c->train.model, c->train.batch, c->train.seq, &model);
    if (st)
        return st;
    t->model = model;
    if ((st = coh_gpt_set_tp(model, t->mesh->tp_comm))) {
        coh_gpt_destroy(model);
        t->model = NULL;
        return st;
    }
    coh_gpt_init_weights(model, c->train.seed); /* a shard keeps its part of each tensor */
    if (t->mesh->tp > 1 && (st = par_find_replicated(t))) {
        coh_gpt_destroy(model);
        t->model = NULL;
        return st;
    }
    if ((c->par.recompute == COH_RECOMPUTE_FULL && (st = coh_gpt_set_recompute(model, 1))) ||
        (c->par.precision == COH_PREC_BF16_MIXED && (st = coh_gpt_set_bf16_mixed(model, 1)))) {
        coh_gpt_destroy(model);
        t->model = NULL;
        return st;
    }
    /* a pipeline's first and last stages accumulate the two apart already */
    if (c->train.tied_grad_apart && t->mesh->pp == 1 &&
        (st = coh_gpt_keep_head_grad_apart(model))) {
        coh_gpt_destroy(model);
        t->model = NULL;
        return st;
    }
    st = par_pipe_create(t, &t->exec); /* the schedule of any pp, one stage's included */
    if (!st && t->mesh->pp > 1)
        st = build_pipeline(t, model, &opt);
    else if (!st && !(st = par_plan_buckets(t))) {
        if (t->zero_stage >= 2) { /* unwritten yet: given back before the optimizer's state */
            t->grads = coh_gpt_grads(model, &t->n);
            par_grads_give_back_all(t);
        }
        st = make_optimizer(t, &opt);
    }
    if (st) {
        coh_gpt_destroy(model);
        t->model = NULL;
        return st;
    }
    if ((st = coh_trainer_create_from(&c->train, model, opt, &t->base))) {
        t->model = NULL;
        return st;
    }
    t->params = coh_gpt_params(model, &t->n);
    t->grads = coh_gpt_grads(model, NULL);
    if (c->train.grad_accum_apart &&
        !(t->grads_apart = coh_dev_alloc(t->be, t->n * sizeof *t->grads_apart)))
        return coh_errf(COH_ERR_NOMEM, "out of memory for the micro-batches' own gradients "
                        "(%zu floats)", t->n);
    /* dp: this rank's model is device 0; the replicas join it over the thread transport */
    if (c->par.strategy == COH_STRATEGY_DP && (st = par_dp_build(t)))
        return st;
    return (st = par_clip_plan(t)) ? st : alloc_state(t);
}

/* The model's tensor-parallel all-reduces on the trace's fourth track. */
static void trace_tp(void *ctx, const char *name, double t0, double t1)
{
    coh_par_trainer *t = ctx;
    par_trace_event(t->trace, name, "tp", 3, t0 * 1e6, t1 * 1e6);
}

static coh_status start(coh_par_trainer *t)
{
    coh_status st = COH_OK;
    if (t->cfg.trace_path &&
        (st = par_trace_open(t->cfg.trace_path, coh_comm_rank(t->mesh->world), &t->trace)))
        return st;
    if (t->trace && t->mesh->tp > 1)
        coh_gpt_set_comm_span(t->model, trace_tp, t);
    if (t->pipe) { /* a stage's replicas start from dp rank 0's ranges; gradients stay private */
        const coh_pipe_stage *lay = par_pipe_layout(t->pipe);
        for (int k = 0; t->ndp > 1 && !st && k < lay->nranges; k++)
            st = coh_broadcast(t->dp, t->params + lay->begin[k], lay->end[k] - lay->begin[k],
                               COH_F32, 0);
        if (t->ndp > 1)
            coh_gpt_set_grad_hook(t->model, par_grad_hook, t);
        return st;
    }
    /* the same seed gives the same weights, but --init-from / resume may differ per rank */
    if (t->ndp > 1 && (st = coh_broadcast(t->dp, t->params, t->n, COH_F32, 0)))
        return st;
    if (t->zero_stage == 3)
        par_release_params(t);
    /* full gradients are all-reduced in place: keep them where the transport reads directly
     * (not for ZeRO-2/3, whose page release needs private memory) */
    if (t->ndp > 1 && t->zero_stage < 2 &&
        (t->grads_shm = coh_comm_alloc(t->dp, t->n * sizeof(float)))) {
        coh_gpt_set_grad_arena(t->model, t->grads_shm);
        coh_dev_track(t->be, t->grads_shm, t->n * sizeof(float)); /* the rank's gradients */
        t->grads = t->grads_shm;
        coh_debug("gradients (%zu floats) in the %s transport's shared arena", t->n,
                  coh_comm_transport(t->dp));
    }
    if (t->ndp > 1 && t->cfg.par.grad_reduce_bf16) {
        size_t bytes = (t->n * sizeof *t->g16 + 4095) / 4096 * 4096;
        /* DDP/ZeRO-1 reduce whole buckets in place: in the arena, without a copy-in; ZeRO-2/3
         * give each bucket's pages back once its own chunk is out, so private memory */
        if (t->zero_stage < 2 && (t->g16 = coh_comm_alloc(t->dp, bytes)))
            t->g16_shm = 1;
        else if (!(t->g16 = aligned_alloc(4096, bytes)))
            return coh_errf(COH_ERR_NOMEM, "out of memory for the bf16 gradient buffer");
    }
    if (t->zero_stage >= 2) /* gradients live only in buckets being reduced and in own chunks */
        par_grads_give_back_all(t);
    else /* resident from the start, as they will be for the whole run */
        coh_gpt_zero_grad(t->model);
    if (t->ndp > 1 || t->trace)
        coh_gpt_set_grad_hook(t->model, par_grad_hook, t);
    if (t->zero_stage >= 2 || t->trace) /* ZeRO-2 for when gradients are written */
        coh_gpt_set_param_hook(t->model, par_param_hook, t);
    return COH_OK;
}

coh_status coh_par_trainer_create(const coh_par_config *c, coh_mesh *mesh, coh_par_trainer **out)
{
    *out = NULL;
    coh_status st = check(c, mesh);
    if (st)
        return st;
    coh_par_trainer *t = calloc(1, sizeof *t);
    if (!t)
        return coh_errf(COH_ERR_NOMEM, "out of memory allocating the parallel trainer");
    t->cfg = *c;
    t->be = coh_backend_current();
    coh_par_config_apply(&t->cfg);
    t->cfg.par.bucket_bytes = coh_parallel_bucket_bytes(&t->cfg.par);
    t->mesh = mesh;
    t->dp = mesh->dp_comm;
    t->ndp = mesh->dp;
    t->rdp = mesh->dp_rank;
    /* one rank owns everything: plain single-device training (pp > 1 takes ZeRO-1 at most) */
    t->zero_stage = t->ndp > 1 ? coh_strategy_zero_stage(c->par.strategy) : 0;
    t->ndev = 1; /* strategy dp's build sets its device count */
    if (!(st = build(t))) {
        if (!(t->dev_peak = calloc((size_t)t->ndev, sizeof *t->dev_peak)))
            st = coh_errf(COH_ERR_NOMEM, "out of memory allocating the parallel trainer");
    }
    if (st || (st = start(t))) {
        coh_par_trainer_destroy(t);
        return st;
    }
    *out = t;
    return COH_OK;
}

void coh_par_trainer_destroy(coh_par_trainer *t)
{
    if (!t)
        return;
    for (int k = 0; k < t->nbk; k++) { /* no request may outlive the buffers it names */
        for (int i = 0; i < 2; i++) {
            if (t->bk[k].req[i])
                coh_comm_wait(t->bk[k].req[i]);
            if (t->bk[k].preq[i])
                coh_comm_wait(t->bk[k].preq[i]);
        }
    }
    coh_status st = par_trace_close(t->trace);
    if (st)
        coh_warn("%s", coh_last_error());
    par_dp_destroy(t->threads); /* the replicas' threads first: they join device 0's model */
    coh_trainer_destroy(t->base);
    par_pipe_destroy(t->exec);
    if (t->grads_shm) {
        coh_dev_untrack(t->be, t->grads_shm);
        coh_comm_free(t->dp, t->grads_shm);
    }
    if (t->g16 && t->g16_shm)
        coh_comm_free(t->dp, t->g16);
    else
        free(t->g16);
    free(t->bk);
    free(t->bucket_of);
    coh_dev_free(t->be, t->gacc);
    coh_dev_free(t->be, t->grads_apart);
    free(t->seq);
    free(t->t_need);
    free(t->need_ev);
    free(t->own_rb);
    free(t->own_re);
    free(t->dev_peak);
    free(t->rep_b);
    free(t->rep_e);
    free(t->clip_b);
    free(t->clip_e);
    free(t->clip_counted);
    free(t);
}
