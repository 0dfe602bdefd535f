/* gpt_tp.c: tensor parallelism inside the engine (Megatron-LM): the shard's place in the whole
 * model, the all-reduces of the f and g operators, and the vocabulary-parallel head's
 * reductions. With one shard every call returns at once, so the engine has one code path. */
#include "cohort/clock.h"
#include "train/model/gpt_int.h"

void gpt_tp_place(coh_gpt *g, int tp_rank)
{
    const coh_gpt_config *c = &g->cfg;
    g->tp = gpt_tp(c);
    g->tp_rank = tp_rank;
    g->Ca = c->dim / g->tp;
    g->F = 4 * c->dim / g->tp;
    g->NHs = c->heads / g->tp;
    g->Vs = coh_gpt_vocab_per_shard(c);
    g->v0 = tp_rank * g->Vs;
    int left = c->vocab - g->v0;
    g->Vv = left <= 0 ? 0 : (left < g->Vs ? left : g->Vs);
    g->sp = gpt_sp(c);
}

coh_status coh_gpt_set_tp(coh_gpt *g, coh_comm *tp)
{
    int n = tp ? coh_comm_size(tp) : 1;
    if (n != g->tp)
        return coh_errf(COH_ERR_INVALID, "tensor-parallel group of %d ranks for a model split "
                        "into %d shards (tp %d)", n, g->tp, g->tp);
    g->tp_comm = n > 1 ? tp : NULL;
    gpt_tp_place(g, tp ? coh_comm_rank(tp) : 0);
    return COH_OK;
}

coh_status gpt_tp_skip_collectives(coh_gpt *g, coh_status (*sync)(void *), void *ctx)
{
    if (g->sp)
        return coh_errf(COH_ERR_INVALID, "a sequence-parallel shard cannot run without its "
                        "group: its rows are split");
    g->tp_skip = 1;
    g->tp_sync = sync;
    g->tp_sync_ctx = ctx;
    return COH_OK;
}

double coh_gpt_tp_comm_seconds(const coh_gpt *g) { return g->tp_comm_s; }

void coh_gpt_set_comm_span(coh_gpt *g, coh_comm_span_fn fn, void *ctx)
{
    g->span = fn;
    g->span_ctx = ctx;
}

static coh_status reduce(coh_gpt *g, float *x, size_t n, coh_redop op, const char *what)
{
    if (g->tp == 1)
        return COH_OK;
    if (g->tp_skip)
        return g->tp_sync ? g->tp_sync(g->tp_sync_ctx) : COH_OK;
    if (!g->tp_comm)
        return coh_errf(COH_ERR_INVALID, "a model split into %d shards needs its "
                        "tensor-parallel group (coh_gpt_set_tp)", g->tp);
    double t0 = coh_now_s();
    coh_status st = coh_allreduce(g->tp_comm, x, x, n, COH_F32, op);
    double t1 = coh_now_s();
    g->tp_comm_s += t1 - t0;
    if (g->span)
        g->span(g->span_ctx, what, t0, t1);
    return st ? coh_err_prefix(st, "tensor-parallel all-reduce (%s)", what) : COH_OK;
}

coh_status gpt_tp_allreduce(coh_gpt *g, float *x, size_t n, const char *what)
{
    return reduce(g, x, n, COH_SUM, what);
}

coh_status gpt_tp_reduce_rows(coh_gpt *g, float *x, size_t N, const char *what)
{
    size_t C = (size_t)g->cfg.dim;
    if (!g->sp)
        return reduce(g, x, N * C, COH_SUM, what);
    double t0 = coh_now_s();
    coh_status st = coh_reduce_scatter(g->tp_comm, x, x, N / (size_t)g->tp * C, COH_F32, COH_SUM);
    double t1 = coh_now_s();
    g->tp_comm_s += t1 - t0;
    if (g->span)
        g->span(g->span_ctx, what, t0, t1);
    return st ? coh_err_prefix(st, "tensor-parallel reduce-scatter (%s)", what) : COH_OK;
}

const float *gpt_tp_all_rows(coh_gpt *g, const float *local, size_t N, const char *what,
                             coh_status *st)
{
    if (!g->sp)
        return local;
    size_t C = (size_t)g->cfg.dim;
    double t0 = coh_now_s();
    *st = coh_allgather(g->tp_comm, local, g->gbuf, N / (size_t)g->tp * C, COH_F32);
    double t1 = coh_now_s();
    g->tp_comm_s += t1 - t0;
    if (g->span)
        g->span(g->span_ctx, what, t0, t1);
    if (*st) {
        *st = coh_err_prefix(*st, "tensor-parallel all-gather (%s)", what);
        return NULL;
    }
    return g->gbuf;
}

static coh_status head_reduce(void *ctx, float *x, size_t n, int max)
{
    return reduce(ctx, x, n, max ? COH_MAX : COH_SUM, max ? "head max" : "head sums");
}

gpt_vocab_part gpt_tp_vocab(coh_gpt *g)
{
    /* the whole vocabulary (tp 1): nothing to reduce, so the head may fuse its row passes */
    return (gpt_vocab_part){.v0 = g->v0, .vn = g->Vv, .reduce = g->tp > 1 ? head_reduce : NULL,
                            .ctx = g};
}
