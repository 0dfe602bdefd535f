/* pipe_sim.c: runs every stage's action list against the others in simulated time, to prove a
 * schedule (no deadlock, every message sent once and received once) and to count its bubble.
 * A stage runs until a receive finds nothing sent yet, then waits on that one message; the
 * send wakes it. Each action is visited once, so a step of N actions costs O(N). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "train/parallel/pipeline_int.h"

typedef struct sim {
    const pipe_sim_in *in;
    int nv;                 /* virtual stages, p * v */
    double *sent;           /* [2][m][nv] when the message arrives, NAN before it is sent; by
                               the sender's u */
    unsigned char *got;     /* [2][m][nv] received */
    int *waiter;            /* [2][m][nv] stage blocked on the message, or -1 */
    unsigned char *done;    /* [p][m][v]: 1 forwarded, 2 backwarded */
    int *pc, *ready, nready;
    double *clock;
    int *held;
} sim;

/* The message an action sends or receives, by the sending virtual stage; -1 when it has no
 * neighbour there. *peer is the stage that must be on the other end. */
static long msg_key(const sim *S, int stage, const coh_pipe_action *a, int *peer)
{
    int p = S->in->stages, u = a->chunk * p + stage, from, grad;
    switch (a->op) {
    case COH_PIPE_SEND_ACT: from = u; *peer = u + 1; grad = 0; break;
    case COH_PIPE_RECV_ACT: from = u - 1; *peer = u - 1; grad = 0; break;
    case COH_PIPE_SEND_GRAD: from = u; *peer = u - 1; grad = 1; break;
    default: from = u + 1; *peer = u + 1; grad = 1; break;
    }
    if (*peer < 0 || *peer >= S->nv)
        return -1;
    *peer %= p;
    return ((long)grad * S->in->microbatches + a->mb) * S->nv + from;
}

static coh_status bad(int stage, int i, const coh_pipe_action *a, const char *why)
{
    return coh_errf(COH_ERR_INVALID, "stage %d action %d (%s mb %d chunk %d peer %d): %s", stage,
                    i, coh_pipe_op_name(a->op), a->mb, a->chunk, a->peer, why);
}

static coh_status compute(sim *S, int s, const coh_pipe_action *a, coh_pipe_stage_stats *st)
{
    const pipe_sim_in *in = S->in;
    unsigned char *d = &S->done[((size_t)s * in->microbatches + a->mb) * in->chunks + a->chunk];
    int fwd = a->op == COH_PIPE_FORWARD;
    if (*d != (fwd ? 0 : 1))
        return bad(s, S->pc[s], a, fwd ? "forwarded twice" : "backward without its forward");
    *d += 1;
    int u = a->chunk * in->stages + s;
    double t = fwd ? (in->fwd_u ? in->fwd_u[u] : in->fwd) : (in->bwd_u ? in->bwd_u[u] : in->bwd);
    S->clock[s] += t;
    st->busy += t;
    st->finish = S->clock[s];
    S->held[s] += fwd ? 1 : -1;
    if (S->held[s] > st->peak_in_flight)
        st->peak_in_flight = S->held[s];
    return COH_OK;
}

/* How long a message between stages a and b takes to arrive (0 without link costs). */
static double hop(const sim *S, int a, int b)
{
    const pipe_sim_in *in = S->in;
    if (!in->hop_s || a == b)
        return 0.0;
    int lo = a < b ? a : b, hi = a < b ? b : a;
    return hi - lo == 1 ? in->hop_s[lo] : in->hop_s[in->stages - 1]; /* wrap: p - 1 -> 0 */
}

static coh_status sim_send(sim *S, int s, const coh_pipe_action *a, long key, int peer)
{
    if (!isnan(S->sent[key]))
        return bad(s, S->pc[s], a, "sent twice");
    S->sent[key] = S->clock[s] + hop(S, s, peer); /* when it is at the receiver */
    if (S->waiter[key] >= 0) {
        S->ready[S->nready++] = S->waiter[key];
        S->waiter[key] = -1;
    }
    return COH_OK;
}

/* 1 when the stage must wait for this message. */
static int sim_receive(sim *S, int s, long key, coh_status *st, const coh_pipe_action *a)
{
    if (isnan(S->sent[key])) {
        S->waiter[key] = s;
        return 1;
    }
    if (S->got[key])
        *st = bad(s, S->pc[s], a, "received twice");
    S->got[key] = 1;
    if (S->sent[key] > S->clock[s])
        S->clock[s] = S->sent[key];
    return 0;
}

static coh_status check_fields(const sim *S, int s, const coh_pipe_action *a)
{
    const pipe_sim_in *in = S->in;
    if ((int)a->op < 0 || (int)a->op > COH_PIPE_RECV_GRAD)
        return bad(s, S->pc[s], a, "unknown action");
    if (a->mb < 0 || a->mb >= in->microbatches || a->chunk < 0 || a->chunk >= in->chunks)
        return bad(s, S->pc[s], a, "microbatch or chunk out of range");
    return COH_OK;
}

/* Runs stage s until it finishes or waits on a message. */
static coh_status run_stage(sim *S, int s, coh_pipe_stage_stats *st)
{
    const pipe_sim_in *in = S->in;
    while (S->pc[s] < in->count[s]) {
        const coh_pipe_action *a = &in->list[s][S->pc[s]];
        coh_status rc = check_fields(S, s, a);
        if (rc)
            return rc;
        if (a->op == COH_PIPE_FORWARD || a->op == COH_PIPE_BACKWARD) {
            if (in->start)
                in->start[s][S->pc[s]] = S->clock[s];
            if ((rc = compute(S, s, a, st)))
                return rc;
            S->pc[s]++;
            continue;
        }
        int peer;
        long key = msg_key(S, s, a, &peer);
        if (key < 0 || peer != a->peer)
            return bad(s, S->pc[s], a, key < 0 ? "no neighbour on that side" : "wrong peer");
        if (a->op == COH_PIPE_SEND_ACT || a->op == COH_PIPE_SEND_GRAD)
            rc = sim_send(S, s, a, key, peer);
        else if (sim_receive(S, s, key, &rc, a))
            return COH_OK;
        if (rc)
            return rc;
        if (in->start)
            in->start[s][S->pc[s]] = S->clock[s];
        S->pc[s]++;
    }
    return COH_OK;
}

static coh_status deadlock(const sim *S)
{
    for (int s = 0; s < S->in->stages; s++)
        if (S->pc[s] < S->in->count[s])
            return bad(s, S->pc[s], &S->in->list[s][S->pc[s]],
                       "deadlock: waits for a message never sent");
    return COH_OK;
}

static coh_status unreceived(const sim *S)
{
    long n = 2L * S->in->microbatches * S->nv;
    for (long k = 0; k < n; k++)
        if (!isnan(S->sent[k]) && !S->got[k]) {
            int u = (int)(k % S->nv), mb = (int)(k / S->nv % S->in->microbatches);
            return coh_errf(COH_ERR_INVALID,
                            "the %s of microbatch %d sent by virtual stage %d is never received",
                            k / S->nv >= S->in->microbatches ? "gradient" : "activation", mb, u);
        }
    return COH_OK;
}

static void summarise(const sim *S, coh_pipe_stage_stats *st, coh_pipe_sim *out)
{
    memset(out, 0, sizeof *out);
    for (int s = 0; s < S->in->stages; s++) {
        out->makespan = fmax(out->makespan, st[s].finish);
        out->ideal = fmax(out->ideal, st[s].busy);
        if (st[s].peak_in_flight > out->peak_in_flight)
            out->peak_in_flight = st[s].peak_in_flight;
    }
    for (int s = 0; s < S->in->stages; s++)
        st[s].idle = out->makespan - st[s].busy;
    out->bubble = out->ideal > 0 ? (out->makespan - out->ideal) / out->ideal : 0;
}

static coh_status run_all(sim *S, coh_pipe_stage_stats *st, coh_pipe_sim *out)
{
    for (int s = S->in->stages - 1; s >= 0; s--)
        S->ready[S->nready++] = s;
    while (S->nready > 0) {
        int s = S->ready[--S->nready];
        coh_status rc = run_stage(S, s, &st[s]);
        if (rc)
            return rc;
    }
    coh_status rc = deadlock(S);
    if (!rc)
        rc = unreceived(S);
    if (!rc)
        summarise(S, st, out);
    return rc;
}

static void sim_free(sim *S)
{
    free(S->sent);
    free(S->got);
    free(S->waiter);
    free(S->done);
    free(S->pc);
    free(S->ready);
    free(S->clock);
    free(S->held);
}

coh_status pipe_simulate(const pipe_sim_in *in, coh_pipe_sim *out, coh_pipe_stage_stats *stages)
{
    int p = in->stages;
    sim S = {.in = in, .nv = p * in->chunks};
    size_t keys = 2 * (size_t)in->microbatches * (size_t)S.nv;
    S.sent = malloc(keys * sizeof *S.sent);
    S.got = calloc(keys, 1);
    S.waiter = malloc(keys * sizeof *S.waiter);
    S.done = calloc((size_t)p * (size_t)in->microbatches * (size_t)in->chunks, 1);
    S.pc = calloc((size_t)p, sizeof *S.pc);
    S.ready = malloc((size_t)p * sizeof *S.ready);
    S.clock = calloc((size_t)p, sizeof *S.clock);
    S.held = calloc((size_t)p, sizeof *S.held);
    coh_pipe_stage_stats *st = stages ? stages : calloc((size_t)p, sizeof *st);
    coh_status rc = COH_OK;
    if (!S.sent || !S.got || !S.waiter || !S.done || !S.pc || !S.ready || !S.clock || !S.held ||
        !st) {
        rc = coh_errf(COH_ERR_NOMEM, "out of memory simulating %d pipeline stages", p);
    } else {
        for (size_t k = 0; k < keys; k++) {
            S.sent[k] = NAN;
            S.waiter[k] = -1;
        }
        memset(st, 0, (size_t)p * sizeof *st);
        rc = run_all(&S, st, out);
    }
    if (st != stages)
        free(st);
    sim_free(&S);
    return rc;
}

coh_status coh_pipeline_simulate(const coh_pipe_shape *shape, double t_fwd, double t_bwd,
                                 coh_pipe_sim *out, coh_pipe_stage_stats *stages)
{
    coh_status rc = coh_pipeline_check(shape);
    if (rc)
        return rc;
    if (!isfinite(t_fwd) || !isfinite(t_bwd) || t_fwd <= 0 || t_bwd <= 0)
        return coh_errf(COH_ERR_INVALID,
                        "invalid compute times forward '%g', backward '%g': need finite and > 0",
                        t_fwd, t_bwd);
    long size = (long)shape->stages * shape->microbatches * shape->virtual_stages;
    if (size > COH_PIPE_MAX_SIMULATED)
        return coh_errf(COH_ERR_INVALID,
                        "pipeline too large to simulate: stages x microbatches x virtual stages "
                        "= %d x %d x %d = '%ld', at most %d", shape->stages, shape->microbatches,
                        shape->virtual_stages, size, COH_PIPE_MAX_SIMULATED);
    pipe_lists l;
    rc = pipe_lists_build(shape, &l);
    double v = shape->virtual_stages;
    pipe_sim_in in = {shape->stages, shape->microbatches, shape->virtual_stages,
                      l.list, l.count, t_fwd / v, t_bwd / v, NULL, NULL, NULL, NULL};
    if (!rc)
        rc = pipe_simulate(&in, out, stages);
    pipe_lists_release(&l);
    if (rc == COH_ERR_INVALID)
        return coh_err_prefix(COH_ERR_INTERNAL, "%s schedule, %d stages, %d microbatches, %d "
                              "virtual stages", coh_schedule_name(shape->kind), shape->stages,
                              shape->microbatches, shape->virtual_stages);
    return rc;
}
