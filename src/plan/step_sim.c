/* step_sim.c: the planner's simulation of one optimizer step: every pipeline stage runs the
 * schedule's own action lists through the trainer's own list simulator (pipe_simulate) with
 * per-chunk compute costs and sends that arrive after the link's α + bytes / β; then what the
 * trainer does around and after its backward: the data-parallel gradient buckets, issued as the
 * last microbatch's backward finishes them, with or without a pipeline (the trainer's one
 * executor); with a pipeline then the tied embedding's sum (pipe_exec.c reduce_grads); the
 * optimizer and the ZeRO parameter gathers. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cohort/parallel.h" /* coh_mesh_rank: the trainer's rank order */
#include "plan/planner_int.h"
#include "train/parallel/pipeline_int.h" /* pipe_simulate: the one list simulator */

static void add_event(plan_step *o, int stage, int tid, const char *name, double t0, double t1)
{
    if (o->nev == o->cap) {
        size_t cap = o->cap ? o->cap * 2 : 256;
        plan_event *ev = realloc(o->ev, cap * sizeof *ev);
        if (!ev)
            return; /* the timeline is a view: losing events never changes the prediction */
        o->ev = ev;
        o->cap = cap;
    }
    plan_event *e = &o->ev[o->nev++];
    e->stage = stage;
    e->tid = tid;
    snprintf(e->name, sizeof e->name, "%s", name);
    e->t0 = t0;
    e->t1 = t1;
}

/* The schedule run by the trainer's own list simulator (pipe_simulate, pipe_sim.c) with each
 * chunk's priced compute and each stage boundary's link; what the planner reads back. */
typedef struct des {
    int p, v, m, nv;
    const plan_chunk *chunk;
    pipe_lists l;
    double *hop;           /* [p]: stage s to s + 1 (wrapping for interleaved) */
    double *fwd_u, *bwd_u; /* [nv] */
    double **start;        /* [p][count]: each action's start */
    coh_pipe_stage_stats *st;
    double *comm_p2p;      /* [p]: the sends' link time */
    plan_step *out;
    int events;
} des;

/* Whether stage s runs the LM head or some of its shards. */
static int holds_head(const des *D, const plan_chunk *chunk, int s)
{
    for (int k = 0; k < D->v; k++)
        if (chunk[k * D->p + s].last)
            return 1;
    return 0;
}

static double hop_between(const des *D, int a, int b)
{
    int lo = a < b ? a : b, hi = a < b ? b : a;
    return hi - lo == 1 ? D->hop[lo] : D->hop[D->p - 1];
}

/* The backward of (mb, chunk) on stage s: its start and end; 0 when the list has none. */
static void backward_span(const des *D, int s, int mb, int chunk, double *t0, double *t1)
{
    *t0 = *t1 = 0;
    for (int i = 0; i < D->l.count[s]; i++) {
        const coh_pipe_action *a = &D->l.list[s][i];
        if (a->op == COH_PIPE_BACKWARD && a->mb == mb && a->chunk == chunk) {
            *t0 = D->start[s][i];
            *t1 = *t0 + D->bwd_u[chunk * D->p + s];
            return;
        }
    }
}

/* After the simulation: each stage's link time of its sends and, when asked, its compute
 * events. */
static void read_back(des *D)
{
    for (int s = 0; s < D->p; s++)
        for (int i = 0; i < D->l.count[s]; i++) {
            const coh_pipe_action *a = &D->l.list[s][i];
            int u = a->chunk * D->p + s;
            if (a->op == COH_PIPE_SEND_ACT || a->op == COH_PIPE_SEND_GRAD)
                D->comm_p2p[s] += hop_between(D, s, a->peer);
            if (!D->events || (a->op != COH_PIPE_FORWARD && a->op != COH_PIPE_BACKWARD))
                continue;
            int fwd = a->op == COH_PIPE_FORWARD;
            double dur = fwd ? D->fwd_u[u] : D->bwd_u[u];
            char name[40];
            snprintf(name, sizeof name, "%s mb %d%s%c", fwd ? "forward" : "backward", a->mb,
                     D->v > 1 ? " chunk " : "", D->v > 1 ? 'a' + a->chunk : '\0');
            add_event(D->out, s, 0, name, D->start[s][i], D->start[s][i] + dur);
        }
}

static coh_status run_pipeline(des *D)
{
    pipe_sim_in in = {D->p, D->m, D->v, D->l.list, D->l.count, 0, 0, D->start, D->fwd_u,
                      D->bwd_u, D->hop};
    coh_pipe_sim sim;
    coh_status rc = pipe_simulate(&in, &sim, D->st);
    if (rc)
        return coh_err_prefix(COH_ERR_INTERNAL, "simulating the %d-stage schedule", D->p);
    read_back(D);
    return COH_OK;
}

/* One of the trainer's gradient buckets: its values and the share of its chunk's backward done
 * when the last of its layers is. */
typedef struct sync_bucket {
    double values, done;
} sync_bucket;

/* The trainer's buckets of stage s's chunk k (buckets.c, par_bucket_plan), in the order its
 * backward finishes them: whole layers from the last backwards, merged until a bucket holds
 * bucket_bytes / 4 values (ZeRO-3: each layer its own, as it gathers per layer); a layer larger
 * than that is one bucket, never split. With a pipeline the stage's wte (the first stage's, or
 * the copy a stage keeps beside the LM head) is its last bucket, done with chunk 0. Returns the
 * count (at most the chunk's blocks + 3). */
static int chunk_buckets(const coh_parallel_config *c, const plan_chunk *chunk, int v, int s,
                         int k, sync_bucket *out)
{
    const plan_chunk *ch = &chunk[k * c->pp + s];
    int n = 0, nb = ch->hi - ch->lo, zero = coh_strategy_zero_stage(c->strategy);
    double cap = (double)coh_parallel_bucket_bytes(c) / 4.0, bwd = ch->bwd > 0 ? ch->bwd : 1;
    for (int i = -1; i <= nb; i++) { /* the top layer, the blocks from the last, embeddings */
        double val = i < 0 ? (double)ch->top_params
                           : i < nb ? ch->block_params : (double)ch->embed_params;
        double done = i < 0 ? ch->bwd_top / bwd
                            : i < nb ? (ch->bwd_top + (i + 1) * ch->bwd_block) / bwd : 1;
        if (val <= 0)
            continue;
        if (!n || zero == 3 || out[n - 1].values >= cap)
            out[n++] = (sync_bucket){0, 0};
        out[n - 1].values += val;
        out[n - 1].done = fmin(done, 1);
    }
    double wte = 0;
    for (int j = 0; k == 0 && j < v; j++)
        wte = fmax(wte, (double)chunk[j * c->pp + s].wte_params);
    if (wte > 0)
        out[n++] = (sync_bucket){wte, 1};
    return n;
}

/* Stage s's buckets, chunk by chunk from the last (the order backward reaches them), into one
 * array, count[k] of them chunk k's. NULL out of memory; the caller frees it. */
static sync_bucket *stage_buckets(const coh_parallel_config *c, const plan_chunk *chunk, int s,
                                  int *count)
{
    int v = c->virtual_stages > 1 ? c->virtual_stages : 1, room = 0, n = 0;
    for (int k = 0; k < v; k++)
        room += chunk[k * c->pp + s].hi - chunk[k * c->pp + s].lo + 3;
    sync_bucket *bk = malloc((size_t)room * sizeof *bk);
    for (int k = v - 1; bk && k >= 0; k--) {
        count[k] = chunk_buckets(c, chunk, v, s, k, bk + n);
        n += count[k];
    }
    return bk;
}

int plan_stage_buckets(const coh_parallel_config *c, const plan_chunk *chunk, int s,
                       double *values, int max)
{
    int v = c->virtual_stages > 1 ? c->virtual_stages : 1, n = 0;
    int *count = malloc((size_t)v * sizeof *count);
    sync_bucket *bk = count ? stage_buckets(c, chunk, s, count) : NULL;
    if (!bk) {
        free(count);
        return -1;
    }
    for (int k = v - 1; k >= 0; k--)
        for (int i = 0; i < count[k]; i++, n++)
            if (n < max)
                values[n] = bk[n].values;
    free(bk);
    free(count);
    return n;
}

/* The stage's data-parallel gradient traffic, on the gradient track, as the trainer issues it
 * (grad_sync.c's hook, for every pp): its buckets (stage_buckets, built once) issued as backward
 * finishes them (DDP, ZeRO-1: the last microbatch's backward of each of the stage's chunks;
 * ZeRO-2/3: every microbatch's reduce-scatter), one at a time; with --grad-sync after-backward
 * (DDP, ZeRO-1) all of them once the stage's whole backward is done, as Megatron-LM's local DDP
 * does. Returns when the last one ends. */
static double grad_sync(des *D, const coh_parallel_config *c, const coh_hw *hw, int s,
                        double grad_bytes_per_param, double *comm)
{
    int zero = coh_strategy_zero_stage(c->strategy), stride = plan_dp_stride(c);
    double chan = 0;
    int *count = malloc((size_t)D->v * sizeof *count);
    sync_bucket *bk = count ? stage_buckets(c, D->chunk, s, count) : NULL;
    if (!bk) { /* unpriced rather than wrong: only under memory exhaustion */
        free(count);
        return chan;
    }
    int first_mb = zero >= 2 ? 0 : D->m - 1;
    for (int mb = first_mb; mb < D->m; mb++)
        for (int k = D->v - 1, b = 0; k >= 0; b += count[k--]) {
            double t0, t1;
            backward_span(D, s, mb, k, &t0, &t1);
            if (zero == 3) /* the backward's parameter gathers share the link */
                chan = fmax(chan, t0) + D->chunk[k * D->p + s].zero3_comm / 2;
            for (int i = 0; i < count[k]; i++) {
                double size = bk[b + i].values * grad_bytes_per_param;
                double ready = c->grad_sync_after_backward ? D->st[s].finish
                                                           : t0 + (t1 - t0) * bk[b + i].done;
                double cost = zero >= 2 ? plan_reduce_scatter_s(hw, c->dp, stride, size)
                                        : plan_allreduce_s(hw, c->dp, stride, size);
                double start = fmax(ready, chan);
                chan = start + cost;
                *comm += cost;
                if (D->events && (D->out->nev < 20000)) {
                    char name[40];
                    snprintf(name, sizeof name, "%s bucket %d", zero >= 2 ? "reduce-scatter"
                             : "all-reduce", i);
                    add_event(D->out, s, 1, name, start, chan);
                }
            }
        }
    free(bk);
    free(count);
    return chan;
}

static void des_free(des *D)
{
    if (D->start)
        for (int s = 0; s < D->p; s++)
            free(D->start[s]);
    free(D->start);
    pipe_lists_release(&D->l);
    free(D->hop);
    free(D->fwd_u);
    free(D->bwd_u);
    free(D->st);
    free(D->comm_p2p);
}

static coh_status des_init(des *D, const coh_parallel_config *c, const coh_hw *hw,
                           const plan_chunk *chunk, double p2p_bytes)
{
    coh_pipe_shape shape = {c->pp > 1 ? c->schedule : COH_SCHED_1F1B, c->pp,
                            (int)c->microbatches,
                            c->virtual_stages > 1 ? c->virtual_stages : 1};
    D->p = shape.stages;
    D->v = shape.virtual_stages;
    D->m = shape.microbatches;
    D->nv = D->p * D->v;
    D->chunk = chunk;
    coh_status rc = pipe_lists_build(&shape, &D->l);
    if (rc)
        return rc;
    D->hop = malloc((size_t)D->p * sizeof *D->hop);
    D->fwd_u = malloc((size_t)D->nv * sizeof *D->fwd_u);
    D->bwd_u = malloc((size_t)D->nv * sizeof *D->bwd_u);
    D->start = calloc((size_t)D->p, sizeof *D->start);
    D->st = calloc((size_t)D->p, sizeof *D->st);
    D->comm_p2p = calloc((size_t)D->p, sizeof *D->comm_p2p);
    if (!D->hop || !D->fwd_u || !D->bwd_u || !D->start || !D->st || !D->comm_p2p)
        return coh_errf(COH_ERR_NOMEM, "out of memory simulating %d stages", D->p);
    for (int u = 0; u < D->nv; u++) {
        D->fwd_u[u] = chunk[u].fwd;
        D->bwd_u[u] = chunk[u].bwd;
    }
    for (int s = 0; s < D->p; s++) {
        const coh_link *l = plan_stage_link(hw, c, s);
        D->hop[s] = l->alpha_s + p2p_bytes / l->bytes_per_s;
    }
    for (int s = 0; s < D->p; s++)
        if (!(D->start[s] = calloc((size_t)D->l.count[s] + 1, sizeof(double))))
            return coh_errf(COH_ERR_NOMEM, "out of memory simulating %d stages", D->p);
    return COH_OK;
}

/* The tied embedding's gradient summed between the first stage and the stages holding the LM
 * head or its shards (the trainer's embedding group, fp32), from when all of them are done. */
static double tied_sum(des *D, const coh_model_desc *m, const coh_parallel_config *c,
                       const coh_hw *hw, int s, double t, double *comm, double *exposed)
{
    double bytes = ceil((double)m->vocab / c->tp) * m->dim * 4.0;
    const coh_link *l = plan_link(hw, coh_mesh_rank(c->dp, c->pp, c->tp, 0, 0, 0),
                                  coh_mesh_rank(c->dp, c->pp, c->tp, 0, D->p - 1, 0));
    double cost = 2 * (l->alpha_s + bytes / 2 / l->bytes_per_s);
    double t0 = D->st[0].finish;
    for (int r = 1; r < D->p; r++)
        if (holds_head(D, D->chunk, r))
            t0 = fmax(t0, D->st[r].finish);
    if (D->events)
        add_event(D->out, s, 1, "tied embedding all-reduce", fmax(t, t0), fmax(t, t0) + cost);
    *exposed += fmax(t, t0) + cost - t;
    *comm += cost;
    return fmax(t, t0) + cost;
}

const coh_link *plan_stage_link(const coh_hw *hw, const coh_parallel_config *c, int s)
{
    /* the trainer's mesh (coh_mesh_rank): stage s's first rank, and the next stage's */
    return plan_link(hw, coh_mesh_rank(c->dp, c->pp, c->tp, 0, s, 0),
                     coh_mesh_rank(c->dp, c->pp, c->tp, 0, (s + 1) % c->pp, 0));
}

int plan_dp_stride(const coh_parallel_config *c)
{
    return (int)(coh_mesh_rank(c->dp, c->pp, c->tp, 1, 0, 0) -
                 coh_mesh_rank(c->dp, c->pp, c->tp, 0, 0, 0));
}

double plan_p2p_values(const coh_model_desc *m, const coh_parallel_config *c, int64_t seq,
                       int head_shards)
{
    /* pipe_exec.c: a rank sends its rows of the activation, 1/tp of them only with sequence
     * parallelism, and with head shards the loss statistics (3 values a token) */
    double bt = (double)c->micro_batch * (double)seq;
    double rows = bt * (double)m->dim / (c->sequence_parallel && c->tp > 1 ? c->tp : 1);
    return rows + (head_shards > 1 ? 3 * bt : 0);
}

coh_status plan_simulate(const coh_model_desc *m, const coh_parallel_config *c, const coh_hw *hw,
                         const plan_dev *d, const plan_chunk *chunk, int64_t seq,
                         int want_events, plan_step *out)
{
    memset(out, 0, sizeof *out);
    des D;
    memset(&D, 0, sizeof D);
    D.out = out;
    D.events = want_events;
    int shards = 0;
    for (int u = 0; u < c->pp * (c->virtual_stages > 1 ? c->virtual_stages : 1); u++)
        shards = chunk[u].head_hi > shards ? chunk[u].head_hi : shards;
    double p2p = plan_p2p_values(m, c, seq, shards) * plan_wire_bytes(d);
    coh_status rc = des_init(&D, c, hw, chunk, p2p);
    if (!rc)
        rc = run_pipeline(&D);
    if (rc) {
        des_free(&D);
        return rc;
    }
    double makespan = 0, ideal = 0;
    for (int s = 0; s < D.p; s++) {
        makespan = fmax(makespan, D.st[s].finish);
        ideal = fmax(ideal, D.st[s].busy);
    }
    double grad_bytes = plan_grad_bytes(c);
    int zero = coh_strategy_zero_stage(c->strategy);
    int stride = plan_dp_stride(c);
    double step = 0;
    double crit_comm = 0, crit_exposed = 0, crit_compute = 0;
    for (int s = 0; s < D.p; s++) {
        double params = 0, tp_comm = 0, z3 = 0, z3x = 0;
        for (int k = 0; k < D.v; k++) {
            const plan_chunk *ch = &chunk[k * D.p + s];
            params += (double)ch->params;
            tp_comm += ch->tp_comm * D.m;
            z3 += ch->zero3_comm * D.m;
            z3x += ch->zero3_exposed * D.m;
        }
        double comm = tp_comm + z3 + D.comm_p2p[s], t = D.st[s].finish, exposed = tp_comm + z3x;
        if (c->dp > 1) {
            double before = comm, t_in = t;
            double end = grad_sync(&D, c, hw, s, grad_bytes, &comm);
            if (d->saturated)
                /* no copy engine: the transport's progress thread copies and reduces on the
                   cores the ranks compute with, so its work adds to the step */
                end = t + (comm - before);
            exposed += fmax(0, end - t);
            if (D.events && end > t)
                add_event(out, s, 1, "gradient sync tail", t_in, end);
            t = fmax(t, end);
        }
        /* then the tied embedding's sum over its group (after the dp sync, as Megatron) */
        if (D.p > 1 && m->tied && (s == 0 || holds_head(&D, chunk, s)))
            t = tied_sum(&D, m, c, hw, s, t, &comm, &exposed);
        double owned = zero >= 1 ? params / c->dp : params;
        double opt = plan_optimizer_s(d, c, owned);
        if (D.events)
            add_event(out, s, 0, "optimizer", t, t + opt);
        t += opt;
        if ((zero == 1 || zero == 2) && c->dp > 1) {
            /* fp32 parameters (zero.c, with or without a pipeline) */
            double g = plan_allgather_s(hw, c->dp, stride, params * 4.0);
            if (D.events)
                add_event(out, s, 2, "all-gather updated parameters", t, t + g);
            t += g;
            comm += g;
            exposed += g;
        }
        if (t > step) {
            step = t;
            crit_comm = comm;
            crit_exposed = exposed;
            crit_compute = D.st[s].busy - tp_comm - z3x + opt;
        }
    }
    out->step_s = step;
    out->compute_s = crit_compute;
    out->bubble_s = makespan - ideal;
    out->comm_s = crit_comm;
    out->exposed_s = crit_exposed;
    des_free(&D);
    return COH_OK;
}
