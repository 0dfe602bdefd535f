/* engine_costs.c: the planner's measured costs (FlexFlow's way): on this machine, times cohort's
 * own engine running one block, the embeddings and the LM head forward and backward, and the
 * optimizer step, at the exact shape a configuration gives each rank (micro-batch, sequence, tp
 * shard, threads, precision), instead of composing them from GEMM and bandwidth rates. Each
 * shape is measured once and kept for the rest of the search, and the leading candidates'
 * shapes again, in turn, before they are ranked (plan_engine_next_round). */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cohort/clock.h"
#include "cohort/train.h"
#include "plan/planner_int.h"
#include "train/model/gpt_int.h" /* gpt_tp_skip_collectives: a shard timed without its group */
#include "train/parallel/par_trainer_int.h" /* par_release: pages given back as the trainer does */

#define REPS 5 /* timed repetitions after one warm-up */

struct coh_engine_costs {
    plan_engine_cost *rows;
    size_t n, cap;
    int round;   /* the current round of measuring again; 0: none */
};

coh_status coh_hw_measure_engine(coh_hw *hw)
{
    if (hw->gpu)
        return coh_errf(COH_ERR_INVALID, "measuring the engine times cohort's own CPU engine on "
                        "this machine; it cannot price '%s' (use its rates, without measuring)",
                        hw->name);
    if (hw->engine)
        return COH_OK;
    hw->engine = calloc(1, sizeof *hw->engine);
    if (!hw->engine)
        return coh_errf(COH_ERR_NOMEM, "out of memory for the engine's measured costs");
    return COH_OK;
}

void coh_hw_free_measurements(coh_hw *hw)
{
    if (!hw->engine)
        return;
    free(hw->engine->rows);
    free(hw->engine);
    hw->engine = NULL;
}

/* A barrier that can be broken: when a rank cannot start, the others stop instead of waiting. */
typedef struct probe_barrier {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int n, waiting, broken;
    unsigned long round;
} probe_barrier;

/* 0 when all n arrived; -1 once broken. */
static int barrier_wait(probe_barrier *b)
{
    pthread_mutex_lock(&b->mu);
    unsigned long round = b->round;
    if (!b->broken && ++b->waiting == b->n) {
        b->waiting = 0;
        b->round++;
        pthread_cond_broadcast(&b->cv);
    }
    while (!b->broken && b->round == round)
        pthread_cond_wait(&b->cv, &b->mu);
    int rc = b->broken ? -1 : 0;
    pthread_mutex_unlock(&b->mu);
    return rc;
}

static void barrier_break(probe_barrier *b)
{
    pthread_mutex_lock(&b->mu);
    b->broken = 1;
    pthread_cond_broadcast(&b->cv);
    pthread_mutex_unlock(&b->mu);
}

/* A tp shard's collective, timed as its group's meeting (gpt_tp_skip_collectives). */
static coh_status group_meet(void *group)
{
    return barrier_wait(group) ? coh_errf(COH_ERR_PEER_LOST, "another measuring rank of the "
                                          "tensor-parallel group stopped")
                               : COH_OK;
}

/* One rank of the measurement: its own 3-block model of the configuration's shard. */
typedef struct probe_rank {
    const coh_model_desc *m;
    const plan_engine_cost *k;
    probe_barrier *bar;
    probe_barrier *group;    /* the tp shards' meeting at each collective */
    coh_status st;
    char why[256];
    double t[6][REPS];       /* forward of [0,1), [1,2), [2,3); backward of [2,3), [1,2), [0,1) */
    double opt[REPS];
    size_t nparams;
    int done;                /* probe_run returned (a forked rank that ends without it died) */
} probe_rank;

/* ZeRO-2/3 give back every gradient page of a range once its bucket is reduced: the trainer
 * keeps the own chunk in its accumulator (or releases the whole arena when the step starts), so
 * each micro-batch's backward writes into fresh pages across the whole range, own chunk included
 * (par_step.c accumulate, grad_sync.c keep_own). */
static void release_grads(const coh_gpt_config *g, float *grads, int lo, int hi)
{
    size_t b, e, x, y;
    coh_gpt_layer_range(g, lo == 0 ? -1 : lo, &b, &y);
    coh_gpt_layer_range(g, hi == g->layers ? g->layers : hi - 1, &x, &e);
    par_release(grads, b, e);
}

static void *probe_run(void *arg)
{
    probe_rank *r = arg;
    const plan_engine_cost *k = r->k;
    coh_gpt_config g = {.layers = 3, .heads = (int)r->m->heads, .dim = (int)r->m->dim,
                        .vocab = (int)r->m->vocab, .seq = k->seq, .tp = k->tp, .sp = 0};
    int B = k->micro_batch, T = k->seq;
    size_t nx = (size_t)B * T * (size_t)g.dim, np = 0;
    coh_gpt *model = NULL;
    coh_adamw *opt = NULL;
    int32_t *tok = malloc(sizeof *tok * (size_t)B * T * 2);
    float *x1 = malloc(sizeof *x1 * nx * 4), *x2 = x1 ? x1 + nx : NULL;
    float *d2 = x1 ? x1 + 2 * nx : NULL, *d1 = x1 ? x1 + 3 * nx : NULL;
    coh_status st = tok && x1 ? COH_OK
                              : coh_errf(COH_ERR_NOMEM, "out of memory for micro-batch %d x %d",
                                         B, T);
    if (!st)
        st = coh_gpt_create(&g, B, T, &model);
    if (!st && k->tp > 1)
        st = gpt_tp_skip_collectives(model, group_meet, r->group);
    if (!st)
        st = coh_gpt_set_slots(model, 1);
    if (!st && k->half)
        st = coh_gpt_set_bf16_mixed(model, 1);
    if (!st)
        st = coh_adamw_create(&g, &opt);
    float *params = NULL, *grads = NULL, *own = NULL;
    if (!st) {
        coh_set_threads(k->threads);
        coh_gpt_init_weights(model, 1234);
        params = coh_gpt_params(model, &np);
        grads = coh_gpt_grads(model, &np);
        /* ZeRO-2/3's optimizer reads the rank's own gradients, which stay resident: not the
         * pages given back (reading those would time page faults the trainer never takes) */
        if (k->grads_released && !(own = malloc(np * sizeof *own)))
            st = coh_errf(COH_ERR_NOMEM, "out of memory for %zu gradients", np);
        if (own)
            memset(own, 0, np * sizeof *own);
        uint64_t x = 88172645463325252ull;
        for (long i = 0; i < 2L * B * T; i++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            tok[i] = (int32_t)(x % (uint64_t)r->m->vocab);
        }
    }
    if (st) {
        snprintf(r->why, sizeof r->why, "%s", coh_last_error());
        barrier_break(r->bar);
        barrier_break(r->group);
    }
    r->st = st;
    r->nparams = np;
    coh_adamw_params hp = {1e-6f, 0.9f, 0.95f, 1e-8f, 0.1f};
    for (int rep = -1; rep < REPS; rep++) {
        if (barrier_wait(r->bar))
            break;
        double c[7];
        float loss;
        if (!k->grads_released || rep < 0) /* ZeRO-2/3: the given-back pages read as zero */
            coh_gpt_zero_grad(model);
        c[0] = coh_now_s();
        for (int i = 0; i < 6 && !st; i++) {
            int lo = i < 3 ? i : 5 - i, hi = lo + 1; /* blocks [lo, hi) */
            if (i < 3)
                st = coh_gpt_stage_forward(model, 0, lo, hi, lo ? NULL : tok,
                                           lo == 0 ? NULL : (lo == 1 ? x1 : x2),
                                           hi == 3 ? tok + (size_t)B * T : NULL, B, T, 1.0f,
                                           hi == 3 ? NULL : (lo == 0 ? x1 : x2),
                                           hi == 3 ? &loss : NULL);
            else
                st = coh_gpt_stage_backward(model, 0, lo, hi, hi == 3 ? NULL : (hi == 2 ? d2 : d1),
                                            B, T, lo == 0 ? NULL : (lo == 2 ? d2 : d1));
            if (i >= 3 && k->grads_released)
                release_grads(&g, grads, lo, hi);
            c[i + 1] = coh_now_s();
        }
        double o0 = coh_now_s();
        if (!st) {
            coh_clip_grad_norm(own ? own : grads, np, 1.0);
            coh_adamw_update(opt, params, own ? own : grads, &hp, rep + 2);
            if (!k->grads_released)
                coh_gpt_zero_grad(model);
        }
        double o1 = coh_now_s();
        if (rep >= 0) {
            for (int i = 0; i < 6; i++)
                r->t[i][rep] = c[i + 1] - c[i];
            r->opt[rep] = o1 - o0;
        }
    }
    if (st && !r->st) {
        r->st = st;
        snprintf(r->why, sizeof r->why, "%s", coh_last_error());
    }
    if (st) { /* the others stop at their next meeting instead of waiting for this rank */
        barrier_break(r->bar);
        barrier_break(r->group);
    }
    coh_adamw_destroy(opt);
    coh_gpt_destroy(model);
    free(own);
    free(tok);
    free(x1);
    r->done = 1;
    return NULL;
}

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* What one measurement shares between its ranks: in memory that forked ranks share too. */
typedef struct probe_shared {
    probe_barrier bar;     /* all ranks, between repetitions */
    probe_rank *r;         /* n */
    probe_barrier *groups; /* one per tp group */
    int ngroups;
    size_t bytes;
    int pshared;
} probe_shared;

static void barrier_init(probe_barrier *b, int n, int pshared)
{
    pthread_mutexattr_t ma;
    pthread_condattr_t ca;
    pthread_mutexattr_init(&ma);
    pthread_condattr_init(&ca);
    if (pshared) {
        pthread_mutexattr_setpshared(&ma, PTHREAD_PROCESS_SHARED);
        pthread_condattr_setpshared(&ca, PTHREAD_PROCESS_SHARED);
    }
    memset(b, 0, sizeof *b);
    pthread_mutex_init(&b->mu, &ma);
    pthread_cond_init(&b->cv, &ca);
    b->n = n;
    pthread_mutexattr_destroy(&ma);
    pthread_condattr_destroy(&ca);
}

static void barrier_destroy(probe_barrier *b)
{
    pthread_mutex_destroy(&b->mu);
    pthread_cond_destroy(&b->cv);
}

static probe_shared *shared_create(int n, int ngroups, int pshared)
{
    size_t bytes = sizeof(probe_shared) + (size_t)n * sizeof(probe_rank) +
                   (size_t)ngroups * sizeof(probe_barrier);
    void *p = pshared ? mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                             -1, 0)
                      : calloc(1, bytes);
    if (p == MAP_FAILED || !p)
        return NULL;
    probe_shared *sh = p;
    memset(sh, 0, bytes);
    sh->r = (probe_rank *)(sh + 1);
    sh->groups = (probe_barrier *)(sh->r + n);
    sh->bytes = bytes;
    sh->pshared = pshared;
    return sh;
}

static void shared_free(probe_shared *sh)
{
    if (sh->pshared)
        munmap(sh, sh->bytes);
    else
        free(sh);
}

/* Forked ranks: reaps them; one that dies without reporting breaks the barriers, so that no
 * rank waits for it. */
typedef struct probe_reaper {
    probe_shared *sh;
    pid_t *pid;
    int n;
} probe_reaper;

static void *reap(void *arg)
{
    probe_reaper *rp = arg;
    for (int i = 1; i < rp->n; i++) {
        int ws = 0;
        while (waitpid(rp->pid[i], &ws, 0) < 0 && errno == EINTR)
            ;
        probe_rank *r = &rp->sh->r[i];
        if (!r->done && !r->st) {
            r->st = COH_ERR_INTERNAL;
            snprintf(r->why, sizeof r->why, "measuring rank %d ended before it reported (%s %d)",
                     i, WIFSIGNALED(ws) ? "signal" : "exit status",
                     WIFSIGNALED(ws) ? WTERMSIG(ws) : WEXITSTATUS(ws));
        }
        if (r->st) {
            barrier_break(&rp->sh->bar);
            for (int g = 0; g < rp->sh->ngroups; g++)
                barrier_break(&rp->sh->groups[g]);
        }
    }
    return NULL;
}

/* The configuration's ranks of one node run at once, each on its own 3-block model, so the
 * costs include what the ranks do to each other (cores, caches, memory bandwidth shared the
 * same way, oversubscription included), ZeRO-2/3's gradient pages given back after each
 * micro-batch (grads_released), and a tp group's shards meeting at each of their collectives (no
 * data moves: the link prices that), so the wait for the slowest shard is in the times. Ranks
 * of one thread each are processes, forked, as the trainer's ranks are: threads of one process
 * share its page tables, so each page given back interrupts the others (a TLB shootdown) and
 * their faults contend, which made ZeRO-2's backward 70% slower than in separate processes.
 * Ranks of several threads each are threads (a process forked after OpenMP has run cannot
 * start a team of its own). Not ZeRO-3's parameter pages (unpriced: emulated by threads they
 * overstated its step by 20% to 40%). Stage calls on blocks [0,1) (embeddings + a block),
 * [1,2) (a block alone) and [2,3) (a block + final LayerNorm and head) give each part by
 * difference (derive); then the trainer's end of step: gradient norm, AdamW, zeroing. Each time
 * is the slowest rank's in a repetition (a synchronous step is paced by it), the median of the
 * repetitions (as a run's step is the median of its steps: a cost that varies from one
 * repetition to the next, page faults, turns on a shared core, counts as it does there), and
 * k->timed is the median of that and of k's earlier measurements, made in turn with the other
 * leaders' (measure_leaders_again in planner.c): a slow spell of the machine falls on all of them
 * alike, and the median drops a lucky low measurement as well as a slow one (the least, kept
 * before, let one measurement 10% below a shape's usual rank it first). */
static coh_status measure(const coh_model_desc *m, plan_engine_cost *k)
{
    int n = k->ranks, ngroups = (n + k->tp - 1) / k->tp, forked = n > 1 && k->threads == 1;
    probe_shared *sh = shared_create(n, ngroups, forked);
    pthread_t *th = calloc((size_t)n, sizeof *th);
    pid_t *pid = calloc((size_t)n, sizeof *pid);
    if (!sh || !th || !pid) {
        if (sh)
            shared_free(sh);
        free(th);
        free(pid);
        return coh_errf(COH_ERR_NOMEM, "out of memory for %d measuring ranks", n);
    }
    barrier_init(&sh->bar, n, forked);
    sh->ngroups = ngroups;
    for (int g = 0; g < ngroups; g++) /* consecutive ranks form a tp group, as in the mesh */
        barrier_init(&sh->groups[g], n - g * k->tp < k->tp ? n - g * k->tp : k->tp, forked);
    probe_rank *r = sh->r;
    for (int i = 0; i < n; i++)
        r[i] = (probe_rank){.m = m, .k = k, .bar = &sh->bar, .group = &sh->groups[i / k->tp]};
    int started = 1, threads = coh_get_threads(); /* rank 0 runs on this thread */
    fflush(NULL); /* a forked rank leaves through _exit: nothing buffered is written twice */
    while (started < n) {
        if (forked) {
            pid_t p = fork();
            if (p == 0) {
                probe_run(&r[started]);
                _exit(0);
            }
            if (p < 0)
                break;
            pid[started] = p;
        } else if (pthread_create(&th[started], NULL, probe_run, &r[started])) {
            break;
        }
        started++;
    }
    probe_reaper rp = {sh, pid, started};
    pthread_t reaper;
    int reaping = forked && started > 1 && pthread_create(&reaper, NULL, reap, &rp) == 0;
    coh_status st = COH_OK;
    if (started < n || (forked && started > 1 && !reaping)) {
        /* a rank could not start (or be watched): the others stop at the barrier */
        barrier_break(&sh->bar);
        st = coh_errf(COH_ERR_NOMEM, "cannot start %d measuring %s", n,
                      forked ? "processes" : "threads");
    } else {
        probe_run(&r[0]);
    }
    if (reaping)
        pthread_join(reaper, NULL);
    else if (forked)
        reap(&rp);
    for (int i = 1; !forked && i < started; i++)
        pthread_join(th[i], NULL);
    coh_set_threads(threads);
    barrier_destroy(&sh->bar);
    for (int g = 0; g < ngroups; g++)
        barrier_destroy(&sh->groups[g]);
    for (int i = 0; i < n && !st; i++)
        if (r[i].st)
            st = coh_errf(r[i].st, "%s", r[i].why);
    for (int j = 0; j < 7 && !st; j++) {
        double slowest[REPS];
        for (int rep = 0; rep < REPS; rep++) {
            slowest[rep] = 0;
            for (int i = 0; i < n; i++)
                slowest[rep] = fmax(slowest[rep], j < 6 ? r[i].t[j][rep] : r[i].opt[rep]);
        }
        qsort(slowest, REPS, sizeof *slowest, by_value);
        int at = k->nsamples < PLAN_ENGINE_SAMPLES ? k->nsamples : PLAN_ENGINE_SAMPLES - 1;
        k->samples[j][at] = slowest[REPS / 2];
        double sorted[PLAN_ENGINE_SAMPLES];
        memcpy(sorted, k->samples[j], (size_t)(at + 1) * sizeof *sorted);
        qsort(sorted, (size_t)at + 1, sizeof *sorted, by_value);
        k->timed[j] = at % 2 ? (sorted[at / 2] + sorted[at / 2 + 1]) / 2 : sorted[at / 2];
    }
    if (!st) {
        k->nparams = r[0].nparams;
        if (k->nsamples < PLAN_ENGINE_SAMPLES)
            k->nsamples++;
    }
    shared_free(sh);
    free(th);
    free(pid);
    return st;
}

/* The parts from the stage calls' times, by difference. */
static void derive(plan_engine_cost *k)
{
    const double *t = k->timed;
    double f0 = t[0], f1 = t[1], f2 = t[2], b2 = t[3], b1 = t[4], b0 = t[5];
    k->block_fwd_s = f1;
    k->block_bwd_s = b1;
    k->emb_fwd_s = fmax(0.0, f0 - f1);
    k->emb_bwd_s = fmax(0.0, b0 - b1);
    k->head_fwd_s = fmax(0.0, f2 - f1);
    k->head_bwd_s = fmax(0.0, b2 - b1);
    k->optimizer_s_per_param = t[6] / (double)k->nparams;
    if (getenv("COHORT_PLAN_DEBUG"))
        fprintf(stderr, "measured b %d s %d tp %d thr %d ranks %d released %d round %d: blk "
                "%.2f/%.2f emb %.2f/%.2f head %.2f/%.2f ms opt %.3f ns/param\n", k->micro_batch,
                k->seq, k->tp, k->threads, k->ranks, k->grads_released, k->round, f1 * 1e3, b1 * 1e3,
                k->emb_fwd_s * 1e3, k->emb_bwd_s * 1e3, k->head_fwd_s * 1e3,
                k->head_bwd_s * 1e3, k->optimizer_s_per_param * 1e9);
}

void plan_engine_next_round(const coh_hw *hw)
{
    if (hw->engine)
        hw->engine->round++;
}

void plan_engine_stop_rounds(const coh_hw *hw)
{
    if (hw->engine)
        hw->engine->round = 0;
}

int plan_engine_measurable(const coh_model_desc *m)
{
    return m->arch == COH_ARCH_GPT2 && m->ffn == 4 * m->dim && m->kv_heads == m->heads &&
           m->head_dim * m->heads == m->dim;
}

coh_status plan_engine_lookup(const plan_dev *d, const coh_model_desc *m, int micro_batch,
                              int seq, int tp, int grads_released, const plan_engine_cost **out)
{
    struct coh_engine_costs *e = d->hw->engine;
    *out = NULL;
    if (!e || !plan_engine_measurable(m))
        return COH_OK;
    plan_engine_cost key = {.dim = m->dim, .heads = m->heads, .vocab = m->vocab,
                            .micro_batch = micro_batch, .seq = seq, .tp = tp,
                            .threads = d->threads, .half = d->half, .ranks = d->ranks,
                            .grads_released = grads_released != 0};
    plan_engine_cost *row = NULL;
    for (size_t i = 0; i < e->n && !row; i++) {
        plan_engine_cost *r = &e->rows[i];
        if (r->dim == key.dim && r->heads == key.heads && r->vocab == key.vocab &&
            r->micro_batch == key.micro_batch && r->seq == key.seq && r->tp == key.tp &&
            r->threads == key.threads && r->half == key.half && r->ranks == key.ranks &&
            r->grads_released == key.grads_released)
            row = r;
    }
    if (row && (!e->round || row->round == e->round)) {
        *out = row;
        return COH_OK;
    }
    if (!row && e->n == e->cap) {
        size_t cap = e->cap ? 2 * e->cap : 16;
        plan_engine_cost *rows = realloc(e->rows, cap * sizeof *rows);
        if (!rows)
            return coh_errf(COH_ERR_NOMEM, "out of memory for the engine's measured costs");
        e->rows = rows;
        e->cap = cap;
    }
    if (!row) {
        row = &e->rows[e->n];
        *row = key;
    }
    coh_status st = measure(m, row);
    if (st) {
        char why[256];
        snprintf(why, sizeof why, "%s", coh_last_error());
        return coh_errf(st, "measuring the engine at micro-batch %d x %d, tp %d, %d rank(s) of "
                        "%d thread(s): %s", micro_batch, seq, tp, d->ranks, d->threads, why);
    }
    if (row == &e->rows[e->n])
        e->n++;
    row->round = e->round;
    derive(row);
    *out = row;
    return COH_OK;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

double plan_engine_optimizer_s_per_param(const plan_dev *d)
{
    /* every shape measures the same end of step (resident gradients) at these threads and
     * ranks: the median of them, like the compute costs (the least let one undisturbed
     * measurement price every configuration) */
    const struct coh_engine_costs *e = d->hw->engine;
    double v[64];
    size_t n = 0;
    for (size_t i = 0; e && i < e->n && n < sizeof v / sizeof v[0]; i++)
        if (e->rows[i].threads == d->threads && e->rows[i].half == d->half &&
            e->rows[i].ranks == d->ranks && e->rows[i].optimizer_s_per_param > 0)
            v[n++] = e->rows[i].optimizer_s_per_param;
    if (!n)
        return 0;
    qsort(v, n, sizeof v[0], cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}
