/* remedies.c: when an estimate does not fit a device, the single changes to the strategy that
 * would make it fit, smallest change first, as the multi-GPU guide orders them. */
#include <stdio.h>
#include <string.h>

#include "plan/plan_int.h"

typedef struct search {
    const coh_model_desc *m;
    uint64_t limit;
    coh_remedy *out;
    int cap, count;
} search;

/* Record the change if it is valid and fits; returns 1 when it fits. */
static int try_change(search *x, const coh_strategy *s, const char *what)
{
    coh_estimate e;
    if (coh_estimate_memory(x->m, s, &e) != COH_OK)
        return 0;
    coh_err_clear();
    if (e.per_device.total_bytes > x->limit)
        return 0;
    if (x->count < x->cap) {
        coh_remedy *r = &x->out[x->count];
        snprintf(r->what, sizeof r->what, "%s", what);
        r->strategy = *s;
        r->total_bytes = e.per_device.total_bytes;
    }
    x->count++;
    return 1;
}

/* ZeRO shards what dp replicates: free memory without more devices, if there is dp. */
static void try_zero(search *x, const coh_strategy *s)
{
    for (int z = s->zero + 1; z <= 3 && s->dp > 1; z++) {
        coh_strategy c = *s;
        c.zero = z;
        if (c.offload == COH_OFFLOAD_OPTIMIZER_PARAMS && z != 3)
            continue;
        char what[96];
        snprintf(what, sizeof what, "--zero %d", z);
        if (try_change(x, &c, what))
            return;
    }
}

static void try_recompute(search *x, const coh_strategy *s, coh_recompute r, const char *what)
{
    if (x->m->arch == COH_ARCH_COUNTS || s->recompute >= r)
        return;
    coh_strategy c = *s;
    c.recompute = r;
    try_change(x, &c, what);
}

/* A larger tp (or pp) keeps the device count when one was given (dp shrinks), and adds devices
 * otherwise. */
static int regroup(const coh_strategy *s, int tp, int pp, coh_strategy *c)
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
    return 1;
}

static void try_parallel(search *x, const coh_strategy *s, int tensor)
{
    int cur = tensor ? s->tp : s->pp;
    for (int n = cur * 2; n <= 1024; n *= 2) {
        coh_strategy c;
        if (!regroup(s, tensor ? n : s->tp, tensor ? s->pp : n, &c))
            break;
        if (!tensor && c.schedule == COH_SCHED_INTERLEAVED)
            c.schedule = COH_SCHED_1F1B, c.virtual_stages = 1;
        if (!tensor && c.microbatches && c.microbatches < n)
            c.microbatches = n;
        char what[96];
        snprintf(what, sizeof what, "--%s %d (dp %d x tp %d x pp %d = %lld devices)",
                 tensor ? "tp" : "pp", n, c.dp, c.tp, c.pp, (long long)c.dp * c.tp * c.pp);
        if (coh_strategy_check(x->m, &c) != COH_OK) {
            coh_err_clear();
            if (tensor || c.pp > x->m->layers)
                break;
            continue;
        }
        if (try_change(x, &c, what))
            return;
    }
}

static void try_offload(search *x, const coh_strategy *s)
{
    coh_strategy c = *s;
    if (s->offload == COH_OFFLOAD_NONE) {
        c.offload = COH_OFFLOAD_OPTIMIZER;
        if (c.zero == 0)
            c.zero = 1;
        char what[96];
        snprintf(what, sizeof what, "--zero %d --offload optimizer", c.zero);
        if (try_change(x, &c, what))
            return;
    }
    if (s->offload != COH_OFFLOAD_OPTIMIZER_PARAMS) {
        c = *s;
        c.zero = 3;
        c.offload = COH_OFFLOAD_OPTIMIZER_PARAMS;
        try_change(x, &c, "--zero 3 --offload optimizer+params");
    }
}

coh_status coh_plan_remedies(const coh_model_desc *m, const coh_strategy *s, uint64_t device_bytes,
                             coh_remedy *out, int cap, int *count)
{
    *count = 0;
    coh_status st = coh_strategy_check(m, s);
    if (st != COH_OK)
        return st;
    search x = {m, device_bytes, out, cap, 0};
    /* Cheapest first: ZeRO costs no devices and little time; selective recompute a few percent
     * of compute; tp and pp need devices; full recompute repeats the forward (~30%); offload
     * is bound by the host link. */
    try_zero(&x, s);
    try_recompute(&x, s, COH_RECOMPUTE_SELECTIVE, "--recompute selective");
    try_parallel(&x, s, 1);
    try_parallel(&x, s, 0);
    try_recompute(&x, s, COH_RECOMPUTE_FULL, "--recompute full");
    try_offload(&x, s);
    *count = x.count < cap ? x.count : cap;
    return COH_OK;
}
