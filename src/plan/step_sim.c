/* step_sim.c: the planner's discrete-event simulator of one optimizer step: every pipeline
 * stage runs the schedule's own action list (coh_pipeline_schedule, what the trainer runs) with
 * per-chunk compute costs and sends that arrive after the link's α + bytes / β; then each
 * stage's data-parallel gradient buckets (issued as backward finishes them, as the trainer does),
 * the tied embedding's sum, the optimizer and the ZeRO parameter gathers. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/planner_int.h"

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

typedef struct stage_state {
    coh_pipe_action *list;
    int count, pc;
    double clock, busy, comm_p2p;
    double *bwd_t0, *bwd_t1; /* [m * v]: each backward's span, by (mb, chunk) */
} stage_state;

typedef struct des {
    int p, v, m, nv;
    const plan_chunk *chunk;
    double p2p_bytes;
    const coh_link **link; /* [p]: between stage s and s + 1 (wrapping for interleaved) */
    double *arrive;        /* [2][m][nv]: when the message is at the receiver; NAN: unsent */
    int *waiter;
    stage_state *st;
    int *ready, nready;
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

static double msg_cost(const des *D, int from_stage, int to_stage)
{
    int a = from_stage < to_stage ? from_stage : to_stage;
    int b = from_stage < to_stage ? to_stage : from_stage;
    const coh_link *l = (b - a == 1) ? D->link[a] : D->link[D->p - 1]; /* wrap: p-1 -> 0 */
    return l->alpha_s + D->p2p_bytes / l->bytes_per_s;
}

static coh_status run_stage(des *D, int s)
{
    stage_state *S = &D->st[s];
    while (S->pc < S->count) {
        const coh_pipe_action *a = &S->list[S->pc];
        int u = a->chunk * D->p + s;
        if (a->op == COH_PIPE_FORWARD || a->op == COH_PIPE_BACKWARD) {
            int fwd = a->op == COH_PIPE_FORWARD;
            double dur = fwd ? D->chunk[u].fwd : D->chunk[u].bwd;
            if (!fwd) {
                S->bwd_t0[a->mb * D->v + a->chunk] = S->clock;
                S->bwd_t1[a->mb * D->v + a->chunk] = S->clock + dur;
            }
            if (D->events) {
                char name[40];
                snprintf(name, sizeof name, "%s mb %d%s%c", fwd ? "forward" : "backward", a->mb,
                         D->v > 1 ? " chunk " : "", D->v > 1 ? 'a' + a->chunk : '\0');
                add_event(D->out, s, 0, name, S->clock, S->clock + dur);
            }
            S->clock += dur;
            S->busy += dur;
            S->pc++;
            continue;
        }
        int grad = a->op == COH_PIPE_SEND_GRAD || a->op == COH_PIPE_RECV_GRAD;
        int send = a->op == COH_PIPE_SEND_ACT || a->op == COH_PIPE_SEND_GRAD;
        int from = send ? u : (grad ? u + 1 : u - 1);
        if (from < 0 || from >= D->nv)
            return coh_errf(COH_ERR_INTERNAL, "stage %d: %s of mb %d has no neighbour", s,
                            coh_pipe_op_name(a->op), a->mb);
        long key = ((long)grad * D->m + a->mb) * D->nv + from;
        if (send) {
            double c = msg_cost(D, s, a->peer);
            D->arrive[key] = S->clock + c;
            S->comm_p2p += c;
            if (D->waiter[key] >= 0) {
                D->ready[D->nready++] = D->waiter[key];
                D->waiter[key] = -1;
            }
        } else {
            if (isnan(D->arrive[key])) {
                D->waiter[key] = s;
                return COH_OK;
            }
            if (D->arrive[key] > S->clock)
                S->clock = D->arrive[key];
        }
        S->pc++;
    }
    return COH_OK;
}

static coh_status run_pipeline(des *D)
{
    for (int s = D->p - 1; s >= 0; s--)
        D->ready[D->nready++] = s;
    while (D->nready > 0) {
        int s = D->ready[--D->nready];
        coh_status rc = run_stage(D, s);
        if (rc)
            return rc;
    }
    for (int s = 0; s < D->p; s++)
        if (D->st[s].pc < D->st[s].count)
            return coh_errf(COH_ERR_INTERNAL, "simulated schedule deadlocks at stage %d action "
                            "%d", s, D->st[s].pc);
    return COH_OK;
}

/* The stage's data-parallel gradient traffic, on the gradient track: buckets of bucket_bytes
 * issued as backward finishes them (DDP, ZeRO-1: the last microbatch's backward; ZeRO-2/3:
 * every microbatch's reduce-scatter). Returns when the last one ends. */
static double grad_sync(des *D, const coh_parallel_config *c, const coh_hw *hw, int s,
                        double grad_bytes_per_param, double *comm)
{
    stage_state *S = &D->st[s];
    int zero = coh_strategy_zero_stage(c->strategy), stride = c->tp * c->pp;
    double bucket = c->bucket_bytes ? (double)c->bucket_bytes : 25.0 * 1048576.0;
    double chan = 0;
    int first_mb = zero >= 2 ? 0 : D->m - 1;
    for (int mb = first_mb; mb < D->m; mb++)
        for (int k = D->v - 1; k >= 0; k--) {
            int u = k * D->p + s;
            double bytes = (double)D->chunk[u].params * grad_bytes_per_param;
            int nb = (int)ceil(bytes / bucket);
            double t0 = S->bwd_t0[mb * D->v + k], t1 = S->bwd_t1[mb * D->v + k];
            if (zero == 3) /* the backward's parameter gathers share the link */
                chan = fmax(chan, t0) + D->chunk[u].zero3_comm / 2;
            for (int i = 0; i < nb; i++) {
                double size = i < nb - 1 ? bucket : bytes - bucket * (nb - 1);
                double ready = t0 + (t1 - t0) * (i + 1) / nb;
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
    return chan;
}

static void des_free(des *D)
{
    if (D->st)
        for (int s = 0; s < D->p; s++) {
            free(D->st[s].list);
            free(D->st[s].bwd_t0);
            free(D->st[s].bwd_t1);
        }
    free(D->st);
    free(D->arrive);
    free(D->waiter);
    free(D->ready);
    free(D->link);
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
    D->p2p_bytes = p2p_bytes;
    size_t keys = 2 * (size_t)D->m * (size_t)D->nv;
    D->arrive = malloc(keys * sizeof *D->arrive);
    D->waiter = malloc(keys * sizeof *D->waiter);
    D->st = calloc((size_t)D->p, sizeof *D->st);
    D->ready = malloc((size_t)D->p * sizeof *D->ready);
    D->link = malloc((size_t)D->p * sizeof *D->link);
    if (!D->arrive || !D->waiter || !D->st || !D->ready || !D->link)
        return coh_errf(COH_ERR_NOMEM, "out of memory simulating %d stages", D->p);
    for (size_t k = 0; k < keys; k++) {
        D->arrive[k] = NAN;
        D->waiter[k] = -1;
    }
    /* cohort's mesh: tp fastest, then pp, then dp; stage s's rank 0 is s * tp */
    for (int s = 0; s < D->p; s++)
        D->link[s] = plan_link(hw, (long)s * c->tp, (long)((s + 1) % D->p) * c->tp);
    for (int s = 0; s < D->p; s++) {
        stage_state *S = &D->st[s];
        coh_status rc = coh_pipeline_schedule(&shape, s, &S->list, &S->count);
        if (rc)
            return rc;
        S->bwd_t0 = calloc((size_t)D->m * D->v, sizeof(double));
        S->bwd_t1 = calloc((size_t)D->m * D->v, sizeof(double));
        if (!S->bwd_t0 || !S->bwd_t1)
            return coh_errf(COH_ERR_NOMEM, "out of memory simulating %d stages", D->p);
    }
    return COH_OK;
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
    double e = d->half ? 2.0 : 4.0;
    /* Megatron sends 1/tp of the activation from each tp rank (scatter-gather) */
    double p2p = (double)c->micro_batch * (double)seq * (double)m->dim * e / c->tp;
    coh_status rc = des_init(&D, c, hw, chunk, p2p);
    if (!rc)
        rc = run_pipeline(&D);
    if (rc) {
        des_free(&D);
        return rc;
    }
    double makespan = 0, ideal = 0;
    for (int s = 0; s < D.p; s++) {
        makespan = fmax(makespan, D.st[s].clock);
        ideal = fmax(ideal, D.st[s].busy);
    }
    double grad_bytes = c->precision == COH_PREC_FP16_MIXED ? 2.0 : 4.0;
    int zero = coh_strategy_zero_stage(c->strategy);
    int stride = c->tp * c->pp;
    double step = 0;
    int crit = 0;
    double crit_comm = 0, crit_exposed = 0, crit_compute = 0;
    for (int s = 0; s < D.p; s++) {
        stage_state *S = &D.st[s];
        double params = 0, tp_comm = 0, z3 = 0, z3x = 0;
        for (int k = 0; k < D.v; k++) {
            const plan_chunk *ch = &chunk[k * D.p + s];
            params += (double)ch->params;
            tp_comm += ch->tp_comm * D.m;
            z3 += ch->zero3_comm * D.m;
            z3x += ch->zero3_exposed * D.m;
        }
        double comm = tp_comm + z3 + S->comm_p2p, t = S->clock, exposed = tp_comm + z3x;
        if (c->dp > 1) {
            double before = comm;
            double end = grad_sync(&D, c, hw, s, grad_bytes, &comm);
            if (d->saturated)
                /* no copy engine: the transport's progress thread copies and reduces on the
                   cores the ranks compute with, so its work adds to the step */
                end = t + (comm - before);
            exposed += fmax(0, end - t);
            if (D.events && end > t)
                add_event(out, s, 1, "gradient sync tail", t, end);
            t = fmax(t, end);
        }
        if (D.p > 1 && m->tied && (s == 0 || holds_head(&D, chunk, s))) {
            /* the tied embedding's gradient summed between the first stage and the stages
             * holding the LM head or its shards */
            double bytes = ceil((double)m->vocab / c->tp) * m->dim * grad_bytes;
            const coh_link *l = plan_link(hw, 0, (long)(D.p - 1) * c->tp);
            double cost = 2 * (l->alpha_s + bytes / 2 / l->bytes_per_s);
            double t0 = D.st[0].clock;
            for (int r = 1; r < D.p; r++)
                if (holds_head(&D, chunk, r))
                    t0 = fmax(t0, D.st[r].clock);
            if (D.events)
                add_event(out, s, 1, "tied embedding all-reduce", fmax(t, t0), fmax(t, t0) + cost);
            exposed += fmax(t, t0) + cost - t;
            comm += cost;
            t = fmax(t, t0) + cost;
        }
        double owned = zero >= 1 ? params / c->dp : params;
        double opt = plan_optimizer_s(d, c, owned);
        if (D.events)
            add_event(out, s, 0, "optimizer", t, t + opt);
        t += opt;
        if ((zero == 1 || zero == 2) && c->dp > 1) {
            double g = plan_allgather_s(hw, c->dp, stride, params * 4.0);
            if (D.events)
                add_event(out, s, 2, "all-gather updated parameters", t, t + g);
            t += g;
            comm += g;
            exposed += g;
        }
        if (t > step) {
            step = t;
            crit = s;
            crit_comm = comm;
            crit_exposed = exposed;
            crit_compute = S->busy - tp_comm - z3x + opt;
        }
    }
    (void)crit;
    out->step_s = step;
    out->compute_s = crit_compute;
    out->bubble_s = makespan - ideal;
    out->comm_s = crit_comm;
    out->exposed_s = crit_exposed;
    des_free(&D);
    return COH_OK;
}
