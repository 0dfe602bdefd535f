/* planner.c: one configuration priced (estimator for memory, simulator for time, a line of
 * reasons), its simulated timeline as a trace, and the search over every configuration of a
 * device count: enumerate, drop what the estimator refuses, order by a lower bound, simulate
 * until the bound passes the K-th best. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cohort/json_writer.h"
#include "cohort/size.h"
#include "plan/plan_int.h"
#include "plan/planner_int.h"
#include "util/strutil.h"

#define LEADERS 8            /* with measured costs: the most candidates measured again */
#define LEADER_MARGIN 0.15   /* ... of those within this much of the best's step */
#define LEADER_ROUNDS 4      /* ... this many times each */

static int hw_devices(const coh_hw *hw)
{
    if (!hw->gpu && hw->nodes <= 1)
        return 0; /* ranks on the CPU: any count (oversubscribed past the cores) */
    long n = (long)(hw->nodes > 0 ? hw->nodes : 1) * (hw->gpus_per_node > 0 ? hw->gpus_per_node : 1);
    return n > (1 << 20) ? 1 << 20 : (int)n;
}

static coh_status check_devices(const coh_parallel_config *c, const coh_hw *hw)
{
    long n = (long)c->dp * c->tp * c->pp;
    int have = hw_devices(hw);
    if (have && n > have)
        return coh_errf(COH_ERR_INVALID, "dp %d x tp %d x pp %d = %ld devices, the hardware has "
                        "%d (%d nodes x %d)", c->dp, c->tp, c->pp, n, have,
                        hw->nodes > 0 ? hw->nodes : 1, hw->gpus_per_node);
    if ((hw->gpu || hw->nodes > 1) && n > hw->gpus_per_node && hw->inter.bytes_per_s <= 0)
        return coh_errf(COH_ERR_INVALID, "%ld devices span nodes of %d, and no link between "
                        "nodes is known: give the inventory's \"links\" or --link-inter", n,
                        hw->gpus_per_node);
    if (c->nodes && c->gpus_per_node && (hw->gpu || hw->nodes > 1) &&
        c->gpus_per_node != hw->gpus_per_node)
        return coh_errf(COH_ERR_INVALID, "--gpus-per-node %d disagrees with the hardware's %d",
                        c->gpus_per_node, hw->gpus_per_node);
    return COH_OK;
}

static double gbs(const coh_link *l)
{
    return l->bytes_per_s / 1e9;
}

static void add_reason(char *buf, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void add_reason(char *buf, size_t cap, const char *fmt, ...)
{
    size_t n = strlen(buf);
    if (n + 3 >= cap)
        return;
    if (n)
        n += (size_t)snprintf(buf + n, cap - n, "; ");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + n, cap - n, fmt, ap);
    va_end(ap);
}

/* One line in the guide's terms: why each axis is what it is, with the numbers. */
static void reasons(const coh_model_desc *m, const coh_hw *hw, coh_plan_result *r)
{
    const coh_parallel_config *c = &r->config;
    char *b = r->reasons;
    size_t cap = sizeof r->reasons;
    b[0] = '\0';
    int multi_node = hw->nodes > 1 && (long)c->dp * c->tp * c->pp > hw->gpus_per_node;
    if (c->tp > 1) {
        if (multi_node)
            add_reason(b, cap, "tp %d stays inside a node: %.3g GB/s each way against %.3g GB/s "
                       "between nodes for its 4 all-reduces per block per microbatch", c->tp,
                       gbs(&hw->intra), gbs(&hw->inter));
        else
            add_reason(b, cap, "tp %d splits every block's matrices over %.0f GB/s links (4 "
                       "all-reduces per block per microbatch)", c->tp, gbs(&hw->intra));
    }
    if (c->pp > 1) {
        int across = multi_node && (long)c->tp * c->pp > hw->gpus_per_node;
        add_reason(b, cap, "pp %d%s: only activations cross stage boundaries; %s bubble %.0f%% "
                   "of the step with m = %lld%s", c->pp, across ? " between nodes" : "",
                   coh_schedule_name(c->schedule), 100 * r->bubble_s / r->step_s,
                   (long long)c->microbatches,
                   c->virtual_stages > 1 ? " and interleaving" : "");
    }
    int zero = coh_strategy_zero_stage(c->strategy);
    char mem[32], dev[32];
    coh_size_format(r->memory_bytes, mem, sizeof mem);
    coh_size_format(hw->memory_bytes, dev, sizeof dev);
    if (c->dp > 1) {
        if (zero == 0)
            add_reason(b, cap, "DDP over dp %d: the replica fits (%s of %s) and the gradient "
                       "all-reduce %s", c->dp, mem, hw->memory_bytes ? dev : "any",
                       c->grad_sync_after_backward ? "follows the whole backward"
                                                   : "overlaps backward");
        else
            add_reason(b, cap, "ZeRO-%d over dp %d shards %s to fit %s of %s", zero, c->dp,
                       zero == 1 ? "optimizer state" : zero == 2 ? "optimizer state and gradients"
                                                                 : "all model states",
                       mem, hw->memory_bytes ? dev : "any");
        add_reason(b, cap, "communication %.0f%% of the step, %.0f%% exposed",
                   100 * r->comm_s / r->step_s, 100 * r->exposed_comm_s / r->step_s);
    } else if (c->tp == 1 && c->pp == 1) {
        add_reason(b, cap, "one device: %s of %s, no communication", mem,
                   hw->memory_bytes ? dev : "any");
    }
    if (c->recompute != COH_RECOMPUTE_NONE)
        add_reason(b, cap, "%s recompute: activations traded for %s", coh_recompute_name(c->recompute),
                   c->recompute == COH_RECOMPUTE_FULL ? "one more forward per block"
                                                      : "recomputing attention's scores");
    (void)m;
}

/* The memory of the split the time model priced (the trainer's, plan_chunk_costs), in place of
 * the even split's: the blocks of each stage summed over its chunks; where cohort's trainer runs
 * the configuration, the largest of its own per-rank predictions. */
static coh_status memory_of_split(const coh_model_desc *m, const coh_parallel_config *c,
                                  const plan_chunk *chunk, const coh_hw *hw, coh_plan_result *out)
{
    coh_status st = COH_OK;
    if (c->pp > 1) {
        int64_t *layers = calloc((size_t)c->pp, sizeof *layers);
        if (!layers)
            return coh_errf(COH_ERR_NOMEM, "out of memory pricing %d stages", c->pp);
        for (int k = 0; k < c->pp * c->virtual_stages; k++)
            layers[k % c->pp] += chunk[k].hi - chunk[k].lo;
        st = plan_estimate_memory_layers(m, c, layers, &out->estimate);
        free(layers);
    }
    out->memory_bytes = out->estimate.per_device.total_bytes;
    /* where cohort's trainer runs it, its own prediction of the buffers it allocates */
    uint64_t worst = 0, b;
    for (int s = 0; !st && s < c->pp && plan_trainer_memory(m, c, hw, chunk, s, &b); s++)
        worst = b > worst ? b : worst;
    if (worst)
        out->memory_bytes = worst;
    out->fits = !hw->memory_bytes || out->memory_bytes <= hw->memory_bytes;
    return st;
}

/* One configuration priced: coh_plan_config's work, with the search's remembered splits
 * (splits may be NULL) and, when want_events, the step's events in *step_out. */
static coh_status price(const coh_model_desc *m, const coh_parallel_config *cin,
                        const coh_hw *hw, plan_split_memo *splits, coh_plan_result *out,
                        int want_events, plan_step *step_out)
{
    memset(out, 0, sizeof *out);
    if (m->arch == COH_ARCH_COUNTS)
        return coh_errf(COH_ERR_INVALID, "the planner needs the model's shape (--model, --config "
                                         "or --layers/--dim/...), not only its parameter count");
    coh_parallel_config c = *cin;
    coh_status st = coh_estimate_memory(m, &c, &out->estimate);
    if (st)
        return st;
    if ((st = check_devices(&c, hw)))
        return st;
    c.seq = out->estimate.seq;
    c.microbatches = out->estimate.microbatches;
    if (c.virtual_stages < 1)
        c.virtual_stages = 1;
    out->config = c;
    out->memory_bytes = out->estimate.per_device.total_bytes;
    out->fits = !hw->memory_bytes || out->memory_bytes <= hw->memory_bytes;
    plan_dev d;
    if ((st = plan_dev_for(hw, &c, &d)))
        return st;
    d.splits = splits;
    int u = c.pp * c.virtual_stages;
    plan_chunk *chunk = calloc((size_t)u, sizeof *chunk);
    if (!chunk)
        return coh_errf(COH_ERR_NOMEM, "out of memory pricing %d virtual stages", u);
    plan_step step;
    st = plan_chunk_costs(m, &c, &d, c.seq, chunk);
    if (!st)
        st = memory_of_split(m, &c, chunk, hw, out);
    if (!st)
        st = plan_simulate(m, &c, hw, &d, chunk, c.seq, want_events, &step);
    free(chunk);
    if (st)
        return st;
    double devices = (double)c.dp * c.tp * c.pp;
    double tokens = (double)c.dp * c.micro_batch * c.microbatches * c.seq;
    out->step_s = step.step_s;
    out->compute_s = step.compute_s;
    out->bubble_s = step.bubble_s;
    out->comm_s = step.comm_s;
    out->exposed_comm_s = step.exposed_s;
    out->tokens_per_s = tokens / step.step_s;
    /* 6 N per token plus attention's 12 L h s (PaLM's MFU, Chowdhery et al. 2022, app. B) */
    out->model_flops = 6.0 * (double)out->estimate.counts.total * tokens +
                       12.0 * m->layers * m->dim * (double)c.seq * tokens;
    /* a CPU's peak is the whole machine's (its ranks share the cores): one per node */
    double peaks = hw->gpu ? devices : hw->nodes > 1 ? hw->nodes : 1.0;
    out->mfu = out->model_flops / (step.step_s * peaks * hw->peak_flops);
    out->threads = d.threads;
    out->runnable = coh_model_trainable(m, out->missing, sizeof out->missing) &&
                    coh_parallel_config_runnable(&c, out->missing, sizeof out->missing);
    reasons(m, hw, out);
    if (step_out)
        *step_out = step;
    else
        free(step.ev);
    return COH_OK;
}

coh_status coh_plan_config(const coh_model_desc *m, const coh_parallel_config *c,
                           const coh_hw *hw, coh_plan_result *out)
{
    return price(m, c, hw, NULL, out, 0, NULL);
}

coh_status coh_plan_trace(const coh_model_desc *m, const coh_parallel_config *c,
                          const coh_hw *hw, const char *path)
{
    coh_plan_result r;
    plan_step step;
    coh_status st = price(m, c, hw, NULL, &r, 1, &step);
    if (st)
        return st;
    FILE *f = fopen(path, "w");
    if (!f) {
        free(step.ev);
        return coh_errf(COH_ERR_IO, "cannot write trace file '%s'", path);
    }
    static const char *const THREADS[3] = {"compute", "gradient comm", "parameter comm"};
    coh_jw w;
    coh_jw_init(&w, f, 0);
    coh_jw_object_begin(&w);
    coh_jw_key(&w, "traceEvents");
    coh_jw_array_begin(&w);
    for (int s = 0; s < r.config.pp; s++)
        for (int i = 0; i < 3; i++) {
            coh_jw_object_begin(&w);
            coh_jw_field_string(&w, "name", "thread_name");
            coh_jw_field_string(&w, "ph", "M");
            coh_jw_field_int(&w, "pid", s);
            coh_jw_field_int(&w, "tid", i);
            coh_jw_key(&w, "args");
            coh_jw_object_begin(&w);
            coh_jw_field_string(&w, "name", THREADS[i]);
            coh_jw_object_end(&w);
            coh_jw_object_end(&w);
        }
    for (size_t i = 0; i < step.nev; i++) {
        const plan_event *e = &step.ev[i];
        coh_jw_object_begin(&w);
        coh_jw_field_string(&w, "name", e->name);
        coh_jw_field_string(&w, "cat", e->tid ? "comm" : "compute");
        coh_jw_field_string(&w, "ph", "X");
        coh_jw_field_double(&w, "ts", e->t0 * 1e6);
        coh_jw_field_double(&w, "dur", (e->t1 - e->t0) * 1e6);
        coh_jw_field_int(&w, "pid", e->stage);
        coh_jw_field_int(&w, "tid", e->tid);
        coh_jw_object_end(&w);
    }
    coh_jw_array_end(&w);
    coh_jw_field_string(&w, "displayTimeUnit", "ms");
    coh_jw_object_end(&w);
    coh_jw_finish(&w);
    free(step.ev);
    if (fclose(f))
        return coh_errf(COH_ERR_IO, "cannot write trace file '%s'", path);
    return COH_OK;
}

/* ---- the search ----------------------------------------------------------------------------- */

typedef struct cand {
    coh_parallel_config c;
    double bound;
    uint64_t mem;
    long order;
} cand;

/* Why configurations were refused, counted by message, so that "nothing fits" names the cause
 * (tp not dividing the heads, a precision cohort train does not run) rather than memory. */
#define REFUSAL_KINDS 3

typedef struct refusal {
    long count;
    char why[256];
} refusal;

typedef struct search {
    const coh_model_desc *m;
    const coh_plan_request *req;
    const coh_hw *hw;
    coh_plan_stats *stats;
    cand *cands;
    size_t n, cap;
    plan_split_memo *splits; /* shared by every configuration priced (NULL: none) */
    refusal refused[REFUSAL_KINDS];
    int kinds;
    long refused_otherwise; /* for a reason past the first REFUSAL_KINDS */
} search;

/* A lower bound of the step: the devices' average compute, which the busiest stage cannot
 * beat (costs add up over blocks), plus the optimizer. Cheap: no split, no simulation. */
static double lower_bound(const search *S, const coh_parallel_config *c)
{
    plan_dev d;
    if (plan_dev_for(S->hw, c, &d))
        return INFINITY;
    coh_parallel_config one = *c;
    one.pp = 1;
    one.virtual_stages = 1;
    one.schedule = COH_SCHED_1F1B;
    one.stage_layers = NULL;
    one.strategy = coh_strategy_zero_stage(c->strategy) == 3 ? COH_STRATEGY_ZERO2 : c->strategy;
    plan_chunk ch;
    if (plan_chunk_costs(S->m, &one, &d, c->seq, &ch))
        return INFINITY;
    int64_t params = (int64_t)ch.params;
    double owned = coh_strategy_zero_stage(c->strategy) >= 1 ? (double)params / c->dp / c->pp
                                                             : (double)params / c->pp;
    return (double)c->microbatches * (ch.fwd + ch.bwd) / c->pp +
           plan_optimizer_s(&d, c, owned);
}

/* Count a configuration as invalid, under its reason. */
static void refuse(search *S, const char *why)
{
    S->stats->invalid++;
    for (int i = 0; i < S->kinds; i++)
        if (!strcmp(S->refused[i].why, why)) {
            S->refused[i].count++;
            return;
        }
    if (S->kinds == REFUSAL_KINDS) {
        S->refused_otherwise++;
        return;
    }
    refusal *r = &S->refused[S->kinds++];
    r->count = 1;
    snprintf(r->why, sizeof r->why, "%s", why);
}

/* "; 24 of them: tensor parallel size 3 does not divide ...": the reasons, most first. */
static void describe_refusals(const search *S, char *buf, size_t cap)
{
    size_t n = 0;
    int done[REFUSAL_KINDS] = {0};
    buf[0] = '\0';
    for (int k = 0; k < S->kinds; k++) {
        int most = -1;
        for (int i = 0; i < S->kinds; i++)
            if (!done[i] && (most < 0 || S->refused[i].count > S->refused[most].count))
                most = i;
        done[most] = 1;
        coh_str_append(buf, cap, &n, "; %ld of them: %s", S->refused[most].count,
                       S->refused[most].why);
    }
    if (S->refused_otherwise)
        coh_str_append(buf, cap, &n, "; %ld for other reasons", S->refused_otherwise);
}

static coh_status push(search *S, const coh_parallel_config *c)
{
    S->stats->considered++;
    coh_estimate e;
    char why[256], runs[160];
    if (coh_parallel_config_check(S->m, c) != COH_OK) {
        refuse(S, coh_last_error());
        return COH_OK;
    }
    if (S->req->runnable_only && (!coh_model_trainable(S->m, runs, sizeof runs) ||
                                  !coh_parallel_config_runnable(c, runs, sizeof runs))) {
        snprintf(why, sizeof why, "not run by cohort train (--runnable-only): %s", runs);
        refuse(S, why);
        return COH_OK;
    }
    if (coh_estimate_memory(S->m, c, &e) != COH_OK) {
        refuse(S, coh_last_error());
        return COH_OK;
    }
    if (S->hw->memory_bytes && e.per_device.total_bytes > S->hw->memory_bytes) {
        S->stats->too_big++;
        return COH_OK;
    }
    if (S->n == S->cap) {
        size_t cap = S->cap ? S->cap * 2 : 1024;
        cand *a = realloc(S->cands, cap * sizeof *a);
        if (!a)
            return coh_errf(COH_ERR_NOMEM, "out of memory holding %zu configurations", S->n);
        S->cands = a;
        S->cap = cap;
    }
    cand *k = &S->cands[S->n];
    k->c = *c;
    k->c.seq = e.seq;
    k->c.microbatches = e.microbatches;
    k->mem = e.per_device.total_bytes;
    k->order = (long)S->n;
    k->bound = lower_bound(S, &k->c);
    S->n++;
    return COH_OK;
}

static int by_bound(const void *a, const void *b)
{
    const cand *x = a, *y = b;
    if (x->bound != y->bound)
        return x->bound < y->bound ? -1 : 1;
    return x->order < y->order ? -1 : x->order > y->order;
}

/* The rest of a configuration once (tp, pp, dp, strategy) are set. */
static coh_status enumerate_rest(search *S, coh_parallel_config c)
{
    const coh_plan_request *q = S->req;
    int64_t per_replica = q->global_batch / c.dp;
    int64_t max_mb = q->max_micro_batch > 0 ? q->max_micro_batch : 64;
    static const coh_recompute RC[] = {COH_RECOMPUTE_NONE, COH_RECOMPUTE_SELECTIVE,
                                       COH_RECOMPUTE_FULL};
    static const int VS[] = {2, 3, 4, 6, 8};
    /* what the request holds for every candidate */
    c.dropout = q->dropout;
    c.grad_sync_after_backward = q->grad_sync_after_backward;
    c.bucket_bytes = q->bucket_bytes;
    c.grad_reduce_bf16 = q->grad_reduce_bf16;
    for (int64_t b = 1; b <= per_replica && b <= max_mb; b++) {
        if (per_replica % b || (q->fixed_micro_batch > 0 && b != q->fixed_micro_batch))
            continue;
        c.micro_batch = b;
        c.microbatches = per_replica / b;
        for (int r = 0; r < 3; r++) {
            if (q->fixed_recompute && RC[r] != q->recompute)
                continue;
            c.recompute = RC[r];
            for (int sp = 0; sp <= (c.tp > 1); sp++) {
                if (q->fixed_sequence_parallel && sp != !!q->sequence_parallel)
                    continue;
                c.sequence_parallel = sp;
                if (c.pp == 1) {
                    c.schedule = COH_SCHED_1F1B;
                    c.virtual_stages = 1;
                    coh_status st = push(S, &c);
                    if (st)
                        return st;
                    continue;
                }
                static const coh_schedule SCH[] = {COH_SCHED_1F1B, COH_SCHED_GPIPE,
                                                   COH_SCHED_INTERLEAVED};
                for (int k = 0; k < 3; k++) {
                    c.schedule = SCH[k];
                    int nv = SCH[k] == COH_SCHED_INTERLEAVED ? 5 : 1;
                    for (int i = 0; i < nv; i++) {
                        c.virtual_stages = SCH[k] == COH_SCHED_INTERLEAVED ? VS[i] : 1;
                        int64_t u = (int64_t)c.pp * c.virtual_stages;
                        if (c.virtual_stages > 1 &&
                            (u > S->m->layers || c.microbatches % c.pp ||
                             (q->interleave_divisible && S->m->layers % u)))
                            continue;
                        coh_status st = push(S, &c);
                        if (st)
                            return st;
                    }
                }
            }
        }
    }
    return COH_OK;
}

static coh_status enumerate(search *S)
{
    const coh_plan_request *q = S->req;
    int n = q->devices, node = S->hw->gpu || S->hw->nodes > 1 ? S->hw->gpus_per_node : n;
    for (int tp = 1; tp <= n && tp <= node; tp++) { /* tp within a node */
        if (n % tp || (q->fixed_tp && tp != q->fixed_tp))
            continue;
        for (int pp = 1; pp <= n / tp; pp++) {
            if ((n / tp) % pp || (q->fixed_pp && pp != q->fixed_pp) || pp > S->m->layers)
                continue;
            int dp = n / tp / pp;
            if (q->global_batch % dp)
                continue;
            coh_parallel_config c;
            coh_parallel_config_init(&c);
            c.dp = dp;
            c.tp = tp;
            c.pp = pp;
            c.seq = q->seq;
            c.precision = q->precision;
            for (int z = 0; z <= 3; z++) {
                if (n == 1)
                    c.strategy = z ? COH_STRATEGY_COUNT : COH_STRATEGY_SINGLE;
                else if (dp == 1)
                    c.strategy = z ? COH_STRATEGY_COUNT : COH_STRATEGY_DDP;
                else
                    c.strategy = pp > 1 && z >= 2 ? COH_STRATEGY_COUNT : coh_strategy_of_zero(z);
                if (c.strategy == COH_STRATEGY_COUNT)
                    continue;
                if (q->fixed_strategy && c.strategy != q->strategy &&
                    !(dp == 1 && coh_strategy_zero_stage(q->strategy) == 0))
                    continue;
                coh_status st = enumerate_rest(S, c);
                if (st)
                    return st;
            }
        }
    }
    return COH_OK;
}

static int better(const coh_plan_result *a, const coh_plan_result *b)
{
    if (a->step_s != b->step_s)
        return a->step_s < b->step_s;
    return a->memory_bytes < b->memory_bytes;
}

/* The `cap` best by simulated step, in order, from the candidates by lower bound: stops when the
 * bound passes the cap-th best. */
static coh_status best_of(search *S, coh_plan_result *out, int cap, int *count)
{
    coh_status st = COH_OK;
    int n = 0;
    qsort(S->cands, S->n, sizeof *S->cands, by_bound);
    for (size_t i = 0; !st && i < S->n; i++) {
        if (n == cap && S->cands[i].bound >= out[n - 1].step_s) {
            S->stats->pruned += (long)(S->n - i);
            break;
        }
        coh_plan_result r;
        st = price(S->m, &S->cands[i].c, S->hw, S->splits, &r, 0, NULL);
        if (st)
            break;
        if (!r.fits) { /* the even split fitted (push), the trainer's split does not */
            S->stats->too_big++;
            continue;
        }
        S->stats->simulated++;
        /* insert in order (stable: an equal one found later goes after) */
        int at = n;
        while (at > 0 && better(&r, &out[at - 1]))
            at--;
        if (at >= cap)
            continue;
        int last = n < cap ? n : cap - 1;
        memmove(&out[at + 1], &out[at], (size_t)(last - at) * sizeof *out);
        out[at] = r;
        if (n < cap)
            n++;
    }
    *count = n;
    return st;
}

/* With the engine's measured costs, the first ranking rests on one measurement of each shape,
 * and a few percent of noise between two shapes' reorders candidates that close. So the
 * leaders (those within LEADER_MARGIN of the best, at most LEADERS of them) have their shapes
 * measured again, LEADER_ROUNDS times, taking turns (a slow moment of the machine then falls on
 * every leader alike), each keeping the median of its measurements; then every plan is priced
 * again from the refined costs and the list sorted again. */
static coh_status measure_leaders_again(const coh_model_desc *m, const coh_hw *hw,
                                        plan_split_memo *splits, coh_plan_result *best, int n)
{
    int lead = 0;
    while (lead < n && best[lead].step_s <= best[0].step_s * (1.0 + LEADER_MARGIN))
        lead++;
    coh_status st = COH_OK;
    coh_plan_result r;
    for (int round = 0; round < LEADER_ROUNDS && lead > 1 && !st; round++) {
        plan_engine_next_round(hw);
        for (int i = 0; i < lead && !st; i++)
            st = price(m, &best[i].config, hw, splits, &r, 0, NULL);
    }
    plan_engine_stop_rounds(hw);
    for (int i = 0; i < n && !st; i++) { /* priced again, then inserted in order */
        if ((st = price(m, &best[i].config, hw, splits, &r, 0, NULL)))
            break;
        int at = i;
        while (at > 0 && better(&r, &best[at - 1])) {
            best[at] = best[at - 1];
            at--;
        }
        best[at] = r;
    }
    return st;
}

coh_status coh_plan_search(const coh_model_desc *m, const coh_plan_request *req,
                           const coh_hw *hw, coh_plan_result *out, int cap, int *count,
                           coh_plan_stats *stats)
{
    coh_plan_stats local;
    if (!stats)
        stats = &local;
    memset(stats, 0, sizeof *stats);
    *count = 0;
    if (cap < 1)
        return coh_errf(COH_ERR_INVALID, "invalid top count '%d': need at least 1", cap);
    if (m->arch == COH_ARCH_COUNTS)
        return coh_errf(COH_ERR_INVALID, "the planner needs the model's shape (--model, --config "
                                         "or --layers/--dim/...), not only its parameter count");
    if (req->devices < 1 || req->devices > (1 << 20))
        return coh_errf(COH_ERR_INVALID, "invalid device count '%d': need 1 to %d", req->devices,
                        1 << 20);
    if (req->global_batch < 1)
        return coh_errf(COH_ERR_INVALID, "invalid global batch '%lld': need at least 1",
                        (long long)req->global_batch);
    int have = hw_devices(hw);
    if (hw->gpu || hw->nodes > 1) {
        int gpn = hw->gpus_per_node;
        if (have && req->devices > have)
            return coh_errf(COH_ERR_INVALID, "invalid device count '%d': the hardware has %d "
                            "(%d nodes x %d)", req->devices, have, hw->nodes, gpn);
        if (req->devices > gpn && req->devices % gpn)
            return coh_errf(COH_ERR_INVALID, "invalid device count '%d': a job over several "
                            "nodes uses whole nodes of %d devices", req->devices, gpn);
        if (req->devices > gpn && hw->inter.bytes_per_s <= 0)
            return coh_errf(COH_ERR_INVALID, "%d devices span %d nodes and no link between "
                            "nodes is known: give the inventory's \"links\": {\"inter_node\": "
                            "...} or --link-inter", req->devices, req->devices / gpn);
    }
    search S = {m, req, hw, stats, NULL, 0, 0, plan_split_memo_new(), {{0, {0}}}, 0, 0};
    coh_status st = enumerate(&S);
    if (!st && S.n == 0 && stats->considered == 0 && req->fixed_micro_batch > 0) {
        free(S.cands);
        plan_split_memo_free(S.splits);
        return coh_errf(COH_ERR_INVALID, "invalid micro-batch '%lld': no configuration of %d "
                        "devices divides the global batch %lld into micro-batches of it (each "
                        "data-parallel replica's share must be a multiple of it)",
                        (long long)req->fixed_micro_batch, req->devices,
                        (long long)req->global_batch);
    }
    if (!st && S.n == 0) {
        char why[900];
        describe_refusals(&S, why, sizeof why);
        free(S.cands);
        plan_split_memo_free(S.splits);
        const char *plural = req->devices == 1 ? "" : "s";
        if (!stats->too_big)
            return coh_errf(COH_ERR_INVALID, "no valid configuration of %d device%s (%ld "
                            "considered, all invalid%s)", req->devices, plural, stats->considered,
                            why);
        return coh_errf(COH_ERR_INVALID, "no configuration of %d device%s fits the memory per "
                        "device (%ld considered: %ld too big, %ld invalid%s)", req->devices, plural,
                        stats->considered, stats->too_big, stats->invalid, why);
    }
    int keep = hw->engine && cap < LEADERS ? LEADERS : cap, n = 0;
    coh_plan_result *best = keep > cap ? calloc((size_t)keep, sizeof *best) : out;
    if (!st && !best)
        st = coh_errf(COH_ERR_NOMEM, "out of memory for %d plans", keep);
    if (!st)
        st = best_of(&S, best, keep, &n);
    if (!st && hw->engine)
        st = measure_leaders_again(m, hw, S.splits, best, n);
    if (best != out) {
        n = n < cap ? n : cap;
        if (!st)
            memcpy(out, best, (size_t)n * sizeof *out);
        free(best);
    }
    free(S.cands);
    plan_split_memo_counts(S.splits, &stats->splits_searched, &stats->splits_reused);
    plan_split_memo_free(S.splits);
    *count = st ? 0 : n;
    return st;
}
