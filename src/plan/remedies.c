/* remedies.c: when an estimate does not fit a device, the changes to the strategy that would make
 * it fit, smallest change first, as the multi-GPU guide orders them; when no single change is
 * enough, the cheapest combination. */
#include <stdio.h>
#include <string.h>

#include "plan/plan_int.h"
#include "util/strutil.h"

/* The knobs, cheapest first: ZeRO costs no devices and little time; selective recompute a few
 * percent of compute; tp and pp need devices; full recompute repeats the forward (~30%);
 * offload is bound by the host link. */
enum { KNOB_ZERO, KNOB_SELECTIVE, KNOB_TP, KNOB_PP, KNOB_FULL, KNOB_OFFLOAD, KNOB_COUNT };

#define MAX_CANDIDATES 16

typedef struct candidate {
    coh_parallel_config s;
    char what[64];
} candidate;

/* A larger tp (or pp) keeps the device count when one was given (dp shrinks), and adds devices
 * otherwise. */
static int regroup(const coh_parallel_config *s, int tp, int pp, coh_parallel_config *c)
{
    *c = *s;
    c->tp = tp;
    c->pp = pp;
    if (s->gpus_per_node) {
        int64_t devices = (int64_t)s->dp * s->tp * s->pp;
        if (devices % ((int64_t)tp * pp) != 0)
            return 0;
        c->dp = (int)(devices / ((int64_t)tp * pp));
    }
    if (pp != s->pp && c->schedule == COH_SCHED_INTERLEAVED) {
        c->schedule = COH_SCHED_1F1B;
        c->virtual_stages = 1;
    }
    if (pp != s->pp && c->microbatches && c->microbatches < pp)
        c->microbatches = pp;
    return 1;
}

static int add(candidate *out, int n, const coh_parallel_config *s, const char *what)
{
    if (n >= MAX_CANDIDATES)
        return n;
    out[n].s = *s;
    snprintf(out[n].what, sizeof out[n].what, "%s", what);
    return n + 1;
}

/* Degrees of tp (tensor) or pp above the current one, doubling; tp at most tp_max (a node). */
static int parallel_candidates(const coh_model_desc *m, const coh_parallel_config *s, int tensor,
                               int tp_max, candidate *out)
{
    int n = 0, cur = tensor ? s->tp : s->pp;
    for (int k = cur * 2; k <= (tensor ? tp_max : 1024) && n < MAX_CANDIDATES; k *= 2) {
        coh_parallel_config c;
        if (!regroup(s, tensor ? k : s->tp, tensor ? s->pp : k, &c))
            break;
        if (coh_parallel_config_check(m, &c) != COH_OK) {
            coh_err_clear();
            if (tensor || c.pp > m->layers)
                break;
            continue; /* e.g. interleaving constraints at this pp; a larger one may pass */
        }
        char what[64];
        snprintf(what, sizeof what, "--%s %d", tensor ? "tp" : "pp", k);
        n = add(out, n, &c, what);
    }
    return n;
}

/* Settings of one knob stronger than the current one, weakest first. */
static int candidates(const coh_model_desc *m, const coh_parallel_config *s, int knob, int tp_max,
                      candidate *out)
{
    int n = 0;
    coh_parallel_config c = *s;
    char what[64];
    switch (knob) {
    case KNOB_ZERO: /* ZeRO shards what dp replicates: nothing to gain without dp */
        for (int z = coh_strategy_zero_stage(s->strategy) + 1; z <= 3 && s->dp > 1; z++) {
            c.strategy = coh_strategy_of_zero(z);
            snprintf(what, sizeof what, "--zero %d", z);
            if (c.offload != COH_OFFLOAD_OPTIMIZER_PARAMS || z == 3)
                n = add(out, n, &c, what);
        }
        return n;
    case KNOB_SELECTIVE:
    case KNOB_FULL: {
        coh_recompute r = knob == KNOB_FULL ? COH_RECOMPUTE_FULL : COH_RECOMPUTE_SELECTIVE;
        if (m->arch == COH_ARCH_COUNTS || s->recompute >= r)
            return 0;
        c.recompute = r;
        return add(out, 0, &c, r == COH_RECOMPUTE_FULL ? "--recompute full" : "--recompute selective");
    }
    case KNOB_TP:
    case KNOB_PP:
        return parallel_candidates(m, s, knob == KNOB_TP, tp_max, out);
    default:
        if (s->offload == COH_OFFLOAD_NONE) {
            c.offload = COH_OFFLOAD_OPTIMIZER;
            int z = coh_strategy_zero_stage(c.strategy);
            c.strategy = coh_strategy_of_zero(z ? z : 1);
            snprintf(what, sizeof what, "--zero %d --offload optimizer", z ? z : 1);
            n = add(out, n, &c, what);
        }
        if (s->offload != COH_OFFLOAD_OPTIMIZER_PARAMS) {
            c = *s;
            c.strategy = COH_STRATEGY_ZERO3;
            c.offload = COH_OFFLOAD_OPTIMIZER_PARAMS;
            n = add(out, n, &c, "--zero 3 --offload optimizer+params");
        }
        return n;
    }
}

/* Per-device total of a strategy, or UINT64_MAX when it is not valid. */
static uint64_t total_of(const coh_model_desc *m, const coh_parallel_config *s)
{
    coh_estimate e;
    if (coh_estimate_memory(m, s, &e) != COH_OK) {
        coh_err_clear();
        return UINT64_MAX;
    }
    return e.per_device.total_bytes;
}

/* Keep a remedy; when it regroups the devices, say into what. */
static void record(const coh_model_desc *m, coh_remedy *out, int cap, int *count,
                   const coh_parallel_config *from, const coh_parallel_config *s,
                   const char *what, uint64_t total)
{
    if (*count < cap) {
        coh_remedy *r = &out[*count];
        snprintf(r->what, sizeof r->what, "%s", what);
        r->strategy = *s;
        r->total_bytes = total;
        r->runnable = coh_model_trainable(m, r->missing, sizeof r->missing) &&
                      coh_parallel_config_runnable(s, r->missing, sizeof r->missing);
        if (s->tp != from->tp || s->pp != from->pp)
            snprintf(r->what + strlen(r->what), sizeof r->what - strlen(r->what),
                     " (dp %d x tp %d x pp %d = %lld devices)", s->dp, s->tp, s->pp,
                     (long long)s->dp * s->tp * s->pp);
    }
    (*count)++;
}

/* "--zero 3 --recompute selective --tp 2": the options in which `to` differs from `from`. */
static void describe(const coh_parallel_config *from, const coh_parallel_config *to, char *buf, size_t cap)
{
    size_t n = 0;
    buf[0] = '\0';
    int zero = coh_strategy_zero_stage(to->strategy);
    if (zero != coh_strategy_zero_stage(from->strategy))
        coh_str_append(buf, cap, &n, " --zero %d", zero);
    if (to->recompute != from->recompute)
        coh_str_append(buf, cap, &n, " --recompute %s", coh_recompute_name(to->recompute));
    if (to->tp != from->tp)
        coh_str_append(buf, cap, &n, " --tp %d", to->tp);
    if (to->pp != from->pp)
        coh_str_append(buf, cap, &n, " --pp %d", to->pp);
    if (to->offload != from->offload)
        coh_str_append(buf, cap, &n, " --offload %s", coh_offload_name(to->offload));
    memmove(buf, buf + (buf[0] == ' '), strlen(buf) + 1);
}

/* Undo every change of `c` (against `from`) that is not needed to stay within limit. */
static void prune(const coh_model_desc *m, const coh_parallel_config *from, coh_parallel_config *c,
                  uint64_t limit)
{
    coh_parallel_config t;
    t = *c;
    t.strategy = from->strategy;
    if (t.offload == COH_OFFLOAD_NONE && total_of(m, &t) <= limit)
        *c = t;
    t = *c;
    t.recompute = from->recompute;
    if (total_of(m, &t) <= limit)
        *c = t;
    if (regroup(c, from->tp, c->pp, &t) && total_of(m, &t) <= limit)
        *c = t;
    if (regroup(c, c->tp, from->pp, &t) && total_of(m, &t) <= limit)
        *c = t;
}

/* No single knob is enough: turn them up one after another, cheapest first (each to its
 * strongest setting until one fits), then undo what turned out not to be needed. */
static void combined(const coh_model_desc *m, const coh_parallel_config *s, uint64_t limit,
                     int tp_max, coh_remedy *out, int cap, int *count)
{
    coh_parallel_config c = *s;
    for (int knob = 0; knob < KNOB_COUNT; knob++) {
        candidate cand[MAX_CANDIDATES];
        int n = candidates(m, &c, knob, tp_max, cand);
        for (int i = 0; i < n; i++) {
            if (total_of(m, &cand[i].s) <= limit) {
                c = cand[i].s;
                prune(m, s, &c, limit);
                char what[128];
                describe(s, &c, what, sizeof what);
                record(m, out, cap, count, s, &c, what, total_of(m, &c));
                return;
            }
        }
        if (n > 0)
            c = cand[n - 1].s;
    }
}

coh_status coh_plan_remedies(const coh_model_desc *m, const coh_parallel_config *s, uint64_t device_bytes,
                             int gpus_per_node, coh_remedy *out, int cap, int *count)
{
    int found = 0;
    int tp_max = gpus_per_node > 0 ? gpus_per_node : s->gpus_per_node > 0 ? s->gpus_per_node : 1024;
    *count = 0;
    coh_status st = coh_parallel_config_check(m, s);
    if (st != COH_OK)
        return st;
    for (int knob = 0; knob < KNOB_COUNT; knob++) {
        candidate cand[MAX_CANDIDATES];
        int n = candidates(m, s, knob, tp_max, cand);
        for (int i = 0; i < n; i++) {
            uint64_t t = total_of(m, &cand[i].s);
            if (t <= device_bytes) { /* the smallest setting of this knob that fits */
                record(m, out, cap, &found, s, &cand[i].s, cand[i].what, t);
                break;
            }
        }
    }
    if (found == 0)
        combined(m, s, device_bytes, tp_max, out, cap, &found);
    *count = found < cap ? found : cap;
    return COH_OK;
}
