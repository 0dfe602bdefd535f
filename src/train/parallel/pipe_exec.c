/* pipe_exec.c: the step's executor for any (dp, pp, tp): this rank's stage (its model chunks'
 * layer ranges; pp = 1 is the one stage of the whole model), the schedule's action list
 * (schedule.c) run with sends and receives on threads of their own, the hooks seeing each
 * micro-batch (dp buckets started during the last one's backward), the tied embedding's
 * gradient summed between the first and last stage, and the loss reduced over the pipeline.
 * Strategy dp's devices run it too, each on its thread: the device hooks (par_dp.c) replicate
 * before each forward and reduce after each backward of their one-stage list.
 *
 * Point to point runs on two-rank communicators, one per direction of each neighbouring pair:
 * the sender thread uses the ones this rank sends on, the receiver thread the ones it receives
 * on, so no communicator is used by two threads. A send never waits for the receiver's schedule
 * to reach its receive (which is what deadlocks 1F1B with blocking sends), and a receive is
 * posted as soon as a buffer is free, in the order the list consumes them, so a message that
 * arrives while this rank computes is already in place when the list reaches it. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cohort/log.h"
#include "train/model/gpt_int.h"
#include "train/parallel/par_trainer_int.h"

/* ---- the sender thread ------------------------------------------------------------------- */

typedef struct pipe_msg {
    struct pipe_msg *next;
    coh_comm *comm;
    size_t count;
    float data[];
} pipe_msg;

struct par_pipe {
    coh_pipe_shape shape;
    int stage, p, v, m, L;
    coh_pipe_stage layout;    /* this rank's chunks and arena ranges */
    int others_away;          /* other stages' parameters given back (counted once) */
    int lo[COH_PIPE_STAGE_MAX_CHUNKS], hi[COH_PIPE_STAGE_MAX_CHUNKS]; /* chunks' blocks */
    size_t msg;               /* floats of every activation and gradient message */
    coh_pipe_action *acts, *eval_acts;
    int nacts, neval;
    int *slot_of;             /* (m) activation slot of each micro-batch, -1 when none */
    int *chunks_live;         /* (m) chunks forwarded and not yet backwarded */
    int nslots;
    coh_comm *next_send, *next_recv, *prev_send, *prev_recv; /* 2-rank, sender is rank 0 */
    coh_comm **owned;         /* every 2-rank communicator this rank belongs to */
    int nowned;
    coh_comm *embed;          /* stages 0 and p - 1 (the tied wte), NULL when p == 1 */
    int32_t *tok, *tgt;       /* (m, ndev*B*T) this step's micro-batches */
    /* strategy dp (par_dp.c): each micro-batch holds every device's rows, device 0's executor
     * reads them and the others read theirs from it; the device's replicate and reduce run
     * before each forward and after each backward */
    par_dp_dev *dev;          /* NULL: no devices (every strategy but dp) */
    int ndev;                 /* devices sharing a micro-batch (1 without dp) */
    size_t bt;                /* tokens of one device's micro-batch (B*T) */
    size_t row0;              /* this device's first token of a micro-batch */
    int tok_shared;           /* tok, tgt are device 0's */
    coh_status dev_st;        /* a device's compute failure, held for its micro-batch's reduce */
    float *xbuf, *ybuf;       /* (B*T*C) the receive being read (a ring buffer), and to send */
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pipe_msg *head, *tail;
    int busy, quit, started;
    coh_status send_err;
    double busy_us, idle_us;  /* the last step's compute, and waits for peers */
    /* the receiver thread: the list's receives, taken in order into a ring of buffers */
    pthread_t rthread;
    pthread_mutex_t rmu;
    pthread_cond_t rcv;
    int rstarted, rquit;
    coh_comm **rq_comm;       /* (nacts) the current list's receives, in order */
    size_t rq_count;          /* floats each */
    int rq_n, rq_done, rq_taken; /* posted, received, consumed by the step */
    float *ring[PIPE_RECV_DEPTH];
    coh_status recv_err;
};

/* ---- the receiver thread -------------------------------------------------------------------- */

/* Receive the list's messages in order while a ring buffer is free: the one the step holds
 * (the last taken) stays untouched until the step takes the next. */
static void *receiver(void *arg)
{
    par_pipe *pp = arg;
    pthread_mutex_lock(&pp->rmu);
    for (;;) {
        while (!pp->rquit && !pp->recv_err &&
               (pp->rq_done >= pp->rq_n || pp->rq_done - pp->rq_taken >= PIPE_RECV_DEPTH - 1))
            pthread_cond_wait(&pp->rcv, &pp->rmu);
        if (pp->rquit || pp->recv_err)
            break;
        int k = pp->rq_done;
        coh_comm *c = pp->rq_comm[k];
        float *buf = pp->ring[k % PIPE_RECV_DEPTH];
        size_t n = pp->rq_count;
        pthread_mutex_unlock(&pp->rmu);
        coh_status st = coh_recv(c, buf, n, COH_F32, 0);
        pthread_mutex_lock(&pp->rmu);
        if (st) {
            pp->recv_err = st;
            coh_warn("pipeline receive failed: %s", coh_last_error());
        } else {
            pp->rq_done = k + 1;
        }
        pthread_cond_broadcast(&pp->rcv);
    }
    pthread_mutex_unlock(&pp->rmu);
    return NULL;
}

/* Post the receives of list a (n actions) of `count` floats each. The previous list's were all
 * taken, so the thread is idle. */
static void recv_begin(par_pipe *pp, const coh_pipe_action *a, int n, size_t count)
{
    pthread_mutex_lock(&pp->rmu);
    pp->rq_n = pp->rq_done = pp->rq_taken = 0;
    pp->rq_count = count;
    for (int i = 0; i < n; i++) {
        if (a[i].op == COH_PIPE_RECV_ACT)
            pp->rq_comm[pp->rq_n++] = pp->next_recv;
        else if (a[i].op == COH_PIPE_RECV_GRAD)
            pp->rq_comm[pp->rq_n++] = pp->prev_recv;
    }
    pthread_cond_broadcast(&pp->rcv);
    pthread_mutex_unlock(&pp->rmu);
}

/* The next receive of the list, waited for: its buffer, valid until the next take. */
static coh_status recv_take(par_pipe *pp, float **buf)
{
    pthread_mutex_lock(&pp->rmu);
    while (pp->rq_done <= pp->rq_taken && !pp->recv_err)
        pthread_cond_wait(&pp->rcv, &pp->rmu);
    coh_status st = pp->recv_err;
    if (!st) {
        *buf = pp->ring[pp->rq_taken % PIPE_RECV_DEPTH];
        pp->rq_taken++;
        pthread_cond_broadcast(&pp->rcv); /* the buffer taken before is free again */
    }
    pthread_mutex_unlock(&pp->rmu);
    return st ? coh_errf(st, "a pipeline receive failed (see the warning above)") : COH_OK;
}


static void *sender(void *arg)
{
    par_pipe *pp = arg;
    pthread_mutex_lock(&pp->mu);
    for (;;) {
        while (!pp->head && !pp->quit)
            pthread_cond_wait(&pp->cv, &pp->mu);
        if (!pp->head)
            break;
        pipe_msg *msg = pp->head;
        pp->head = msg->next;
        if (!pp->head)
            pp->tail = NULL;
        pp->busy = 1;
        pthread_mutex_unlock(&pp->mu);
        coh_status st = pp->send_err ? pp->send_err
                                     : coh_send(msg->comm, msg->data, msg->count, COH_F32, 1);
        free(msg);
        pthread_mutex_lock(&pp->mu);
        if (st && !pp->send_err) {
            pp->send_err = st;
            coh_warn("pipeline send failed: %s", coh_last_error());
        }
        pp->busy = 0;
        pthread_cond_broadcast(&pp->cv);
    }
    pthread_mutex_unlock(&pp->mu);
    return NULL;
}

/* Queue a copy of data for the sender thread. */
static coh_status pipe_send(par_pipe *pp, coh_comm *comm, const float *data, size_t count)
{
    pipe_msg *msg = malloc(sizeof *msg + count * sizeof(float));
    if (!msg)
        return coh_errf(COH_ERR_NOMEM, "out of memory queueing a pipeline send");
    msg->next = NULL;
    msg->comm = comm;
    msg->count = count;
    memcpy(msg->data, data, count * sizeof(float));
    pthread_mutex_lock(&pp->mu);
    coh_status st = pp->send_err;
    if (pp->tail)
        pp->tail->next = msg;
    else
        pp->head = msg;
    pp->tail = msg;
    pthread_cond_broadcast(&pp->cv);
    pthread_mutex_unlock(&pp->mu);
    return st;
}

/* Wait until every queued send has been taken by its receiver's channel. */
static coh_status pipe_flush(par_pipe *pp)
{
    pthread_mutex_lock(&pp->mu);
    while (pp->head || pp->busy)
        pthread_cond_wait(&pp->cv, &pp->mu);
    coh_status st = pp->send_err;
    pthread_mutex_unlock(&pp->mu);
    return st ? coh_errf(st, "a pipeline send failed (see the warning above)") : COH_OK;
}

/* ---- set-up -------------------------------------------------------------------------------- */

/* One two-rank communicator per direction of each neighbouring pair (i -> i + 1 and i + 1 -> i,
 * around the ring when chunks wrap), each made by a split of the pipeline communicator. */
static coh_status make_links(par_pipe *pp, coh_comm *pc)
{
    int p = pp->p, s = pp->stage, pairs = pp->v > 1 ? p : p - 1;
    pp->owned = calloc(4, sizeof *pp->owned);
    if (!pp->owned)
        return coh_errf(COH_ERR_NOMEM, "out of memory for pipeline links");
    for (int dir = 0; dir < 2; dir++) {
        for (int i = 0; i < pairs; i++) {
            int a = i, b = (i + 1) % p; /* dir 0 carries a -> b, dir 1 b -> a */
            int from = dir ? b : a, to = dir ? a : b;
            int in = s == from || s == to;
            coh_comm *c = NULL;
            coh_status st = coh_comm_split(pc, in ? 0 : COH_COMM_NO_COLOR, s == from ? 0 : 1, &c);
            if (st)
                return st;
            if (!c)
                continue;
            pp->owned[pp->nowned++] = c;
            if (dir == 0 && s == from)
                pp->next_send = c;
            else if (dir == 0)
                pp->next_recv = c;
            else if (s == from)
                pp->prev_send = c;
            else
                pp->prev_recv = c;
        }
    }
    if (p > 1) { /* the embeddings' stage and every one holding a head shard */
        int in = s == 0 || pp->layout.head;
        return coh_comm_split(pc, in ? 0 : COH_COMM_NO_COLOR, s, &pp->embed);
    }
    return COH_OK;
}

/* Forward-only lists for evaluation: each chunk receives, runs and passes on each batch. */
static coh_status eval_list(par_pipe *pp)
{
    int p = pp->p, s = pp->stage, v = pp->v, n = 0;
    pp->eval_acts = malloc(sizeof *pp->eval_acts * 3 * (size_t)v);
    if (!pp->eval_acts)
        return coh_errf(COH_ERR_NOMEM, "out of memory for the evaluation schedule");
    for (int c = 0; c < v; c++) {
        int u = c * p + s;
        if (u > 0)
            pp->eval_acts[n++] = (coh_pipe_action){COH_PIPE_RECV_ACT, 0, c, (s - 1 + p) % p};
        pp->eval_acts[n++] = (coh_pipe_action){COH_PIPE_FORWARD, 0, c, -1};
        if (u < p * v - 1)
            pp->eval_acts[n++] = (coh_pipe_action){COH_PIPE_SEND_ACT, 0, c, (s + 1) % p};
    }
    pp->neval = n;
    return COH_OK;
}

/* The layout of the one stage of pp = 1: every block and the head whole, the arena one range. */
static void one_stage(const coh_gpt_config *m, coh_pipe_stage *out)
{
    memset(out, 0, sizeof *out);
    out->chunks = 1;
    out->hi[0] = m->layers;
    out->first = out->last = out->head = 1;
    out->head_shards = 1;
    out->head_hi[0] = 1;
    out->nranges = 1;
    out->end[0] = out->params = coh_gpt_param_count(m);
}

coh_status par_pipe_create(coh_par_trainer *t, par_pipe **out)
{
    const coh_par_config *c = &t->cfg;
    const coh_mesh *mesh = t->mesh;
    par_pipe *pp = calloc(1, sizeof *pp);
    if (!pp)
        return coh_errf(COH_ERR_NOMEM, "out of memory for the pipeline");
    *out = pp;
    pthread_mutex_init(&pp->mu, NULL);
    pthread_cond_init(&pp->cv, NULL);
    pthread_mutex_init(&pp->rmu, NULL);
    pthread_cond_init(&pp->rcv, NULL);
    pp->p = mesh->pp;
    pp->stage = mesh->pp_rank;
    pp->v = c->par.schedule == COH_SCHED_INTERLEAVED && pp->p > 1 ? c->par.virtual_stages : 1;
    pp->m = c->train.accum;
    pp->ndev = 1;
    pp->L = c->train.model.layers;
    /* one stage: forward and backward of each micro-batch in turn, nothing sent */
    pp->shape = (coh_pipe_shape){pp->p > 1 ? c->par.schedule : COH_SCHED_NAIVE, pp->p, pp->m,
                                 pp->v};
    coh_status st = COH_OK;
    if (pp->p > 1)
        st = coh_par_pipe_stage(c, pp->stage, &pp->layout);
    else
        one_stage(&c->train.model, &pp->layout);
    if (st)
        return st;
    memcpy(pp->lo, pp->layout.lo, sizeof pp->lo);
    memcpy(pp->hi, pp->layout.hi, sizeof pp->hi);
    st = coh_pipeline_schedule(&pp->shape, pp->stage, &pp->acts, &pp->nacts);
    if (!st)
        st = eval_list(pp);
    if (st)
        return st;
    pp->nslots = par_pipe_count_slots(pp->acts, pp->nacts, pp->m);
    size_t bt = (size_t)c->train.batch * c->train.seq, btc = bt * (size_t)c->train.model.dim;
    pp->bt = bt;
    /* this rank's rows (its share with sequence parallelism, so a tp group sends each
     * activation once, split), and the head shards' statistics */
    pp->msg = (c->train.model.sp && c->train.model.tp > 1 ? btc / (size_t)c->train.model.tp
                                                           : btc) +
              (pp->layout.head_shards > 1 ? 3 * bt : 0);
    btc = pp->msg;
    pp->slot_of = malloc((size_t)pp->m * sizeof *pp->slot_of);
    pp->chunks_live = calloc((size_t)pp->m, sizeof *pp->chunks_live);
    pp->tok = malloc((size_t)pp->m * bt * sizeof *pp->tok);
    pp->tgt = malloc((size_t)pp->m * bt * sizeof *pp->tgt);
    int nq = pp->nacts > pp->neval ? pp->nacts : pp->neval;
    pp->rq_comm = malloc((size_t)(nq > 0 ? nq : 1) * sizeof *pp->rq_comm);
    if (pp->nslots < 1 || !pp->slot_of || !pp->chunks_live || !pp->tok || !pp->tgt ||
        !pp->rq_comm)
        return coh_errf(COH_ERR_NOMEM, "out of memory for the pipeline");
    if (pp->p == 1) /* no messages, links or threads: the list has no send or receive */
        return COH_OK;
    pp->ybuf = malloc(btc * sizeof *pp->ybuf);
    int rings = 1;
    for (int k = 0; k < PIPE_RECV_DEPTH; k++)
        rings &= (pp->ring[k] = malloc(btc * sizeof(float))) != NULL;
    if (!rings || !pp->ybuf)
        return coh_errf(COH_ERR_NOMEM, "out of memory for the pipeline");
    pp->xbuf = pp->ring[0];
    if ((st = make_links(pp, mesh->pp_comm)))
        return st;
    if (pthread_create(&pp->thread, NULL, sender, pp))
        return coh_errf(COH_ERR_SYSTEM, "cannot start the pipeline's sender thread");
    pp->started = 1;
    if (pthread_create(&pp->rthread, NULL, receiver, pp))
        return coh_errf(COH_ERR_SYSTEM, "cannot start the pipeline's receiver thread");
    pp->rstarted = 1;
    return COH_OK;
}

void par_pipe_destroy(par_pipe *pp)
{
    if (!pp)
        return;
    if (pp->started) {
        pthread_mutex_lock(&pp->mu);
        pp->quit = 1;
        pthread_cond_broadcast(&pp->cv);
        pthread_mutex_unlock(&pp->mu);
        pthread_join(pp->thread, NULL);
    }
    if (pp->rstarted) { /* blocked in a receive only when a peer died: that receive fails */
        pthread_mutex_lock(&pp->rmu);
        pp->rquit = 1;
        pthread_cond_broadcast(&pp->rcv);
        pthread_mutex_unlock(&pp->rmu);
        pthread_join(pp->rthread, NULL);
    }
    while (pp->head) {
        pipe_msg *n = pp->head->next;
        free(pp->head);
        pp->head = n;
    }
    for (int i = 0; i < pp->nowned; i++)
        coh_comm_destroy(pp->owned[i]);
    coh_comm_destroy(pp->embed);
    pthread_mutex_destroy(&pp->mu);
    pthread_cond_destroy(&pp->cv);
    pthread_mutex_destroy(&pp->rmu);
    pthread_cond_destroy(&pp->rcv);
    for (int k = 0; k < PIPE_RECV_DEPTH; k++)
        free(pp->ring[k]);
    free(pp->rq_comm);
    free(pp->owned);
    free(pp->acts);
    free(pp->eval_acts);
    free(pp->slot_of);
    free(pp->chunks_live);
    if (!pp->tok_shared) {
        free(pp->tok);
        free(pp->tgt);
    }
    free(pp->ybuf);
    free(pp);
}

coh_status par_pipe_set_device(par_pipe *pp, par_dp_dev *dev, int id, int n, par_pipe *first)
{
    size_t stride = (size_t)n * pp->bt;
    pp->dev = dev;
    pp->ndev = n;
    pp->row0 = (size_t)id * pp->bt;
    free(pp->tok);
    free(pp->tgt);
    pp->tok = pp->tgt = NULL;
    if (id > 0) { /* device 0's, set before */
        pp->tok = first->tok;
        pp->tgt = first->tgt;
        pp->tok_shared = 1;
        return COH_OK;
    }
    pp->tok = malloc((size_t)pp->m * stride * sizeof *pp->tok);
    pp->tgt = malloc((size_t)pp->m * stride * sizeof *pp->tgt);
    return pp->tok && pp->tgt ? COH_OK
                              : coh_errf(COH_ERR_NOMEM, "out of memory for the dp batches");
}

int par_pipe_slots(const par_pipe *pp) { return pp->nslots; }
const coh_pipe_stage *par_pipe_layout(const par_pipe *pp) { return &pp->layout; }

void par_pipe_keep_own(coh_par_trainer *t, float *params)
{
    const coh_pipe_stage *lay = &t->exec->layout;
    size_t kept = 0, n = coh_gpt_param_count(&t->cfg.train.model), away = 0;
    for (int k = 0; k <= lay->nranges; k++) { /* give back what other stages hold */
        size_t e = k < lay->nranges ? lay->begin[k] : n;
        par_release(params, kept, e);
        away += e > kept ? e - kept : 0;
        kept = k < lay->nranges ? lay->end[k] : n;
    }
    /* their parameters, and their gradients, which this stage never writes, are not held */
    if (!t->exec->others_away)
        coh_dev_forget(t->be, 2 * away * sizeof(float));
    t->exec->others_away = 1;
}

/* ---- the step ------------------------------------------------------------------------------ */

static int slot_take(par_pipe *pp, int mb)
{
    if (pp->chunks_live[mb]++ > 0)
        return pp->slot_of[mb];
    /* the lowest slot no live micro-batch holds */
    for (int s = 0; s < pp->nslots; s++) {
        int used = 0;
        for (int k = 0; k < pp->m && !used; k++)
            used = k != mb && pp->chunks_live[k] > 0 && pp->slot_of[k] == s;
        if (!used)
            return pp->slot_of[mb] = s;
    }
    return pp->slot_of[mb] = -1; /* count_slots bounds the live ones: cannot happen */
}

/* "F3" (forward of micro-batch 3), "B3.1" (backward, chunk 1): the schedule's picture; one
 * stage's is the param hook's, layer by layer. */
static void trace_compute(coh_par_trainer *t, const char *what, int mb, int chunk, double t0)
{
    char name[32];
    if (!t->trace || t->exec->p == 1)
        return;
    if (t->exec->v > 1)
        snprintf(name, sizeof name, "%s%d.%d", what, mb, chunk);
    else
        snprintf(name, sizeof name, "%s%d", what, mb);
    par_trace_event(t->trace, name, "compute", 0, t0, par_now_us());
}

/* Whether chunk k of this stage holds the embeddings (virtual stage 0). By virtual stage, not
 * by blocks: a chunk may hold no block. */
static int chunk_ends(const par_pipe *pp, int k)
{
    return pp->layout.first && k == 0 ? COH_GPT_EMBEDDINGS : 0;
}

/* Whether chunk k holds the head's last shard (the loss). */
static int chunk_loss(const par_pipe *pp, int k)
{
    return pp->layout.head_hi[k] == pp->layout.head_shards;
}

coh_status par_pipe_setup_model(const par_pipe *pp, coh_gpt *model, int recompute)
{
    const coh_pipe_stage *lay = &pp->layout;
    if (lay->head_shards < 2)
        return COH_OK;
    int held[COH_PIPE_MAX_HEAD_SHARDS] = {0};
    for (int k = 0; k < lay->chunks; k++)
        for (int h = lay->head_lo[k]; h < lay->head_hi[k]; h++)
            held[h] = 1;
    /* the logits of the shards before the last are kept for their backward, unless full
     * recomputation asks for the least memory */
    return coh_gpt_set_head_shards(model, lay->head_shards, held, !recompute);
}

/* A dp device's compute failure is held for its micro-batch's reduce, which every device takes
 * so that none waits for one that failed; without devices it stops the list at once. */
static coh_status device_keeps(par_pipe *pp, const par_dp_dev *dev, coh_status st)
{
    if (!st || !dev)
        return st;
    pp->dev_st = st;
    return COH_OK;
}

/* Run one action list over micro-batches (train: forward with the gradient's scale, then
 * backward; eval: forward only). *loss: the last stage's summed micro-batch losses. The hooks
 * see the micro-batch: the grad hook communicates on the last one's backward (every one's under
 * ZeRO-2/3, collected when its backward is done), ZeRO-3's param hook prefetches in the order
 * of one micro-batch's pass. */
static coh_status run_list(coh_par_trainer *t, const coh_pipe_action *a, int n, int mb0,
                           float scale, double *loss)
{
    par_pipe *pp = t->exec;
    const coh_trainer_config *c = &t->cfg.train;
    int B = c->batch, T = c->seq;
    size_t stride = (size_t)pp->ndev * pp->bt; /* a micro-batch, every device's rows */
    size_t btc = pp->msg;
    par_dp_dev *dev = scale > 0.0f ? pp->dev : NULL; /* dp evaluates on device 0 alone */
    coh_status st = COH_OK;
    recv_begin(pp, a, n, btc);
    for (int i = 0; !st && i < n; i++) {
        int mb = a[i].mb + mb0, k = a[i].chunk, lo = pp->lo[k], hi = pp->hi[k];
        int hlo = pp->layout.head_lo[k], hhi = pp->layout.head_hi[k];
        double t0 = par_now_us();
        t->last_micro = mb == pp->m - 1;
        switch (a[i].op) {
        case COH_PIPE_RECV_ACT: /* posted ahead: waits only for what has not arrived */
        case COH_PIPE_RECV_GRAD:
            st = recv_take(pp, &pp->xbuf);
            pp->idle_us += par_now_us() - t0;
            par_trace_event(t->trace, a[i].op == COH_PIPE_RECV_ACT ? "recv activation"
                                                                  : "recv gradient",
                            "idle", 0, t0, par_now_us());
            break;
        case COH_PIPE_SEND_ACT:
            st = pipe_send(pp, pp->next_send, pp->ybuf, btc);
            break;
        case COH_PIPE_SEND_GRAD:
            st = pipe_send(pp, pp->prev_send, pp->ybuf, btc);
            break;
        case COH_PIPE_FORWARD: {
            float l = 0.0f;
            /* micro-batches summed apart: from the forward on (the head adds its part of wte's
             * gradient there), each but the first sums into a buffer of its own from zero */
            if (t->grads_apart && scale > 0.0f && mb > 0) {
                t->be->set(t->grads_apart, 0, t->n * sizeof *t->grads_apart);
                gpt_point_grads(t->model, t->grads_apart);
            }
            int slot = scale > 0.0f ? slot_take(pp, a[i].mb) : 0;
            size_t row = (size_t)mb * stride + pp->row0;
            if (dev && (st = par_dp_replicate(dev, a[i].mb)))
                break;
            if (k == 0)
                par_reset_sequence(t, scale > 0.0f);
            st = device_keeps(pp, dev, coh_gpt_shards_forward(t->model, slot, lo, hi,
                                                              chunk_ends(pp, k), hlo, hhi,
                                                              pp->tok + row, pp->xbuf,
                                                              pp->tgt + row, B, T, scale,
                                                              pp->ybuf, &l));
            if (chunk_loss(pp, k) && !dev) /* dp's is the reduce's, over every device */
                *loss += l;
            pp->busy_us += par_now_us() - t0;
            trace_compute(t, "F", a[i].mb, k, t0);
            break;
        }
        case COH_PIPE_BACKWARD:
            if (!pp->dev_st) /* a device whose forward failed still takes the reduce */
                st = device_keeps(pp, dev,
                                  coh_gpt_shards_backward(t->model, pp->slot_of[a[i].mb], lo, hi,
                                                          chunk_ends(pp, k), hlo, hhi, pp->xbuf,
                                                          B, T, pp->ybuf));
            if (t->grads_apart && mb > 0) { /* then added, as 2 ranks' all-reduce adds */
                gpt_point_grads(t->model, t->grads);
                t->be->add(t->grads, t->grads_apart, t->n);
            }
            pp->chunks_live[a[i].mb]--;
            pp->busy_us += par_now_us() - t0;
            trace_compute(t, "B", a[i].mb, k, t0);
            if (!st && k == 0 && t->zero_stage >= 2) /* its own chunks kept before the next */
                st = par_grad_collect(t, 1);
            if (!st && dev)
                st = par_dp_reduce(dev, pp->slot_of[a[i].mb], pp->dev_st, loss);
            break;
        }
        if (!st && t->err)
            st = t->err;
    }
    return st;
}

/* After the list: the dp reductions the last micro-batch's backward started, with a head
 * stage's copy of wte (which no layer of it reports) started now, all collected; then the tied
 * wte summed between the first stage and the head's (Megatron's embedding group, after the dp
 * sync as there). */
static coh_status reduce_grads(coh_par_trainer *t)
{
    par_pipe *pp = t->exec;
    coh_status st = COH_OK;
    for (int k = 0; t->ndp > 1 && pp->layout.tied_copy && !st && k < t->nbk; k++)
        if (t->bk[k].lo == -1)
            st = par_grad_issue(t, k);
    if (!st && t->ndp > 1)
        st = par_grad_collect(t, 1);
    if (!st && pp->embed)
        st = coh_allreduce(pp->embed, t->grads, t->grads, par_wte_size(&t->cfg.train.model),
                           COH_F32, COH_SUM);
    return st;
}

/* All ranks read the step's micro-batches, so every loader stays where single's would be. */
static coh_status read_batches(coh_par_trainer *t, coh_batch_fn next, void *ctx, int count)
{
    par_pipe *pp = t->exec;
    size_t stride = (size_t)pp->ndev * pp->bt; /* dp: the devices' rows of each, together */
    coh_status st = COH_OK;
    for (int k = 0; !st && k < count; k++)
        st = next(ctx, pp->tok + (size_t)k * stride, pp->tgt + (size_t)k * stride);
    return st;
}

/* Zero the gradients this rank writes: its stage's ranges, or under ZeRO-2/3 every bucket's,
 * given back until backward writes them; and the own chunks' accumulator. */
static void zero_grads(coh_par_trainer *t)
{
    const coh_pipe_stage *lay = &t->exec->layout;
    if (t->zero_stage >= 2)
        par_grads_give_back_all(t);
    else
        for (int k = 0; k < lay->nranges; k++)
            t->be->set(t->grads + lay->begin[k], 0,
                       (lay->end[k] - lay->begin[k]) * sizeof(float));
    if (t->gacc)
        t->be->set(t->gacc, 0, t->own_total * sizeof *t->gacc);
    size_t n;
    float *head = coh_gpt_head_grad(t->model, &n);
    if (head)
        t->be->set(head, 0, n * sizeof *head);
}

/* One stage keeping the tied wte's two gradients apart (coh_gpt_keep_head_grad_apart): the
 * head's added into the embedding's at the step's end, as a pipeline's tied all-reduce adds the
 * last stage's to the first's (reduce_grads). */
static void add_head_grad(coh_par_trainer *t)
{
    size_t n;
    const float *head = coh_gpt_head_grad(t->model, &n);
    if (head)
        t->be->add(t->grads, head, n);
}

coh_status par_forward_backward(coh_par_trainer *t, coh_batch_fn next, void *ctx, double *loss)
{
    par_pipe *pp = t->exec;
    zero_grads(t);
    memset(pp->chunks_live, 0, (size_t)pp->m * sizeof *pp->chunks_live);
    double sum = 0.0;
    /* next NULL: a dp replica, whose rows device 0's executor has read */
    coh_status st = next ? read_batches(t, next, ctx, pp->m) : COH_OK;
    pp->busy_us = pp->idle_us = 0.0;
    pp->dev_st = COH_OK;
    t->err = COH_OK;
    /* each device's mean loss weighs 1 / (devices * micro-batches) */
    if (!st)
        st = run_list(t, pp->acts, pp->nacts, 0, 1.0f / ((float)pp->ndev * (float)pp->m), &sum);
    double t0 = par_now_us();
    coh_status fl = pipe_flush(pp);
    pp->idle_us += par_now_us() - t0;
    if (!st)
        st = fl;
    if (!st)
        add_head_grad(t);
    if (!st)
        st = reduce_grads(t);
    /* the last stage has the loss; everyone gets it */
    sum /= pp->m;
    if (!st)
        st = coh_allreduce(t->mesh->pp_comm, &sum, &sum, 1, COH_F64, COH_SUM);
    *loss = sum;
    return st;
}

coh_status par_pipe_eval_batch(coh_par_trainer *t, coh_batch_fn next, void *ctx, double *loss)
{
    par_pipe *pp = t->exec;
    coh_status st = read_batches(t, next, ctx, 1);
    return st ? st : run_list(t, pp->eval_acts, pp->neval, 0, 0.0f, loss);
}

coh_status par_pipe_drain(coh_par_trainer *t) { return pipe_flush(t->exec); }

void par_pipe_describe(const par_pipe *pp, char *buf, size_t cap)
{
    coh_pipe_stage_blocks(&pp->layout, buf, cap);
}

coh_comm *par_pipe_embed(const par_pipe *pp) { return pp->embed; }

coh_status coh_par_trainer_pipeline_times(const coh_par_trainer *t, double *busy_s,
                                          double *idle_s)
{
    if (!t->pipe)
        return coh_errf(COH_ERR_INVALID, "the trainer runs no pipeline");
    *busy_s = t->pipe->busy_us * 1e-6;
    *idle_s = t->pipe->idle_us * 1e-6;
    return COH_OK;
}
