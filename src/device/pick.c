/* pick.c: which visible devices are usable right now, ranked: most free memory, then least
 * utilization, then lower index. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/device_int.h"
#include "util/strutil.h"

void coh_pick_opts_init(coh_pick_opts *o)
{
    memset(o, 0, sizeof *o);
    o->n = 1;
    o->max_utilization_pct = 100;
}

/* What a program would get on visible device d: memory, utilization, processes, mode. */
static void device_state(const coh_inventory *inv, const coh_visible_device *d, uint64_t *free_mib,
                         int *util, int *procs)
{
    const coh_gpu *g = &inv->gpus[d->gpu];
    *util = g->utilization_pct;
    if (d->mig >= 0) {
        const coh_mig *m = &g->mig[d->mig];
        *free_mib = m->memory_total_mib - m->memory_used_mib;
        *procs = m->processes;
    } else if (d->tile >= 0) {
        /* Tiles share the device's memory evenly; per-tile use is not reported. */
        *free_mib = (g->memory_total_mib - g->memory_used_mib) / (uint64_t)g->tiles;
        *procs = g->processes;
    } else {
        *free_mib = g->memory_total_mib - g->memory_used_mib;
        *procs = g->processes;
    }
}

static void judge(const coh_inventory *inv, const coh_visible *vis, const coh_pick_opts *o,
                  int l, coh_pick_candidate *c)
{
    const coh_gpu *g = &inv->gpus[vis->dev[l].gpu];
    int procs;
    c->logical = l;
    device_state(inv, &vis->dev[l], &c->free_mib, &c->utilization_pct, &procs);
    c->usable = 0;
    char owners[72] = ""; /* bounded so that the reason always fits */
    if (g->owners[0])
        snprintf(owners, sizeof owners, " (owners: %.58s)", g->owners);
    if (g->compute_mode == COH_COMPUTE_PROHIBITED)
        snprintf(c->reason, sizeof c->reason, "compute mode is prohibited");
    else if (g->compute_mode == COH_COMPUTE_EXCLUSIVE_PROCESS && procs > 0)
        snprintf(c->reason, sizeof c->reason, "compute mode is exclusive_process and %d "
                 "process%s already on it%s", procs, procs == 1 ? " is" : "es are", owners);
    else if (procs > 0 && !o->allow_shared)
        snprintf(c->reason, sizeof c->reason, "busy: %d compute process%s%s (--allow-shared "
                 "accepts it)", procs, procs == 1 ? "" : "es", owners);
    else if (c->free_mib == 0)
        snprintf(c->reason, sizeof c->reason, "memory full: 0 MiB free");
    else if (c->free_mib < o->min_free_mib)
        snprintf(c->reason, sizeof c->reason, "%llu MiB free, below the %llu MiB required",
                 (unsigned long long)c->free_mib,
                 (unsigned long long)o->min_free_mib);
    else if (c->utilization_pct > o->max_utilization_pct)
        snprintf(c->reason, sizeof c->reason, "utilization %d%% is above the %d%% allowed",
                 c->utilization_pct, o->max_utilization_pct);
    else
        c->usable = 1;
}

static int better(const coh_pick_candidate *a, const coh_pick_candidate *b)
{
    if (a->free_mib != b->free_mib)
        return a->free_mib > b->free_mib;
    if (a->utilization_pct != b->utilization_pct)
        return a->utilization_pct < b->utilization_pct;
    return a->logical < b->logical;
}

/* Fill res->cand and rank[] (usable logical indices, best first); returns how many. */
int pick_rank(const coh_inventory *inv, const coh_visible *vis, const coh_pick_opts *o,
              coh_pick_result *res, int *rank)
{
    int nr = 0;
    for (int l = 0; l < vis->count; l++) {
        judge(inv, vis, o, l, &res->cand[l]);
        if (!res->cand[l].usable)
            continue;
        int j = nr++;
        for (; j > 0 && better(&res->cand[l], &res->cand[rank[j - 1]]); j--)
            rank[j] = rank[j - 1];
        rank[j] = l;
    }
    return nr;
}

/* "cuda:1 (GPU-...): reason; ..." for every unusable candidate. */
void pick_rejections(const coh_inventory *inv, const coh_visible *vis, const coh_pick_result *res,
                     char *buf, size_t cap)
{
    size_t len = 0;
    buf[0] = '\0';
    for (int i = 0; i < res->ncand; i++) {
        const coh_pick_candidate *c = &res->cand[i];
        if (c->usable)
            continue;
        const coh_visible_device *d = &vis->dev[c->logical];
        const coh_gpu *g = &inv->gpus[d->gpu];
        coh_str_append(buf, cap, &len, "%s%s:%d (%s): %s", len ? "; " : "",
                   coh_accel_name(vis->accel), c->logical,
                   d->mig >= 0 ? g->mig[d->mig].uuid : g->uuid, c->reason);
    }
}

coh_status pick_prepare(const coh_visible *vis, const coh_pick_opts *o, coh_pick_result *res)
{
    memset(res, 0, sizeof *res);
    if (o->n < 1 || o->n > 64)
        return coh_errf(COH_ERR_INVALID, "invalid device count %d: pick 1 to 64 devices", o->n);
    if (vis->accel == COH_ACCEL_CPU || vis->accel == COH_ACCEL_AUTO)
        return coh_errf(COH_ERR_INVALID, "pick chooses among cuda, xpu or rocm devices, not %s",
                        coh_accel_name(vis->accel));
    res->cand = calloc((size_t)vis->count + 1, sizeof *res->cand);
    if (!res->cand)
        return coh_errf(COH_ERR_NOMEM, "out of memory");
    res->ncand = vis->count;
    return COH_OK;
}

coh_status coh_pick(const coh_inventory *inv, const coh_visible *vis, const coh_pick_opts *o,
                    coh_pick_result *res)
{
    coh_status st = pick_prepare(vis, o, res);
    if (st != COH_OK)
        return st;
    int *rank = calloc((size_t)vis->count + 1, sizeof *rank);
    if (!rank)
        return coh_errf(COH_ERR_NOMEM, "out of memory");
    int nr = pick_skip_reserved(inv, vis, res, rank, pick_rank(inv, vis, o, res, rank));
    for (int i = 0; i < nr && i < o->n; i++)
        res->picked[res->npicked++] = rank[i];
    free(rank);
    if (nr >= o->n)
        return COH_OK;
    char why[900];
    pick_rejections(inv, vis, res, why, sizeof why);
    return coh_errf(COH_ERR_NOT_FOUND, "%d %s device%s requested but %d %s usable%s%s", o->n,
                    coh_accel_name(vis->accel), o->n == 1 ? "" : "s", nr,
                    nr == 1 ? "is" : "are", *why ? ": " : "", why);
}

void coh_pick_result_release(coh_pick_result *res)
{
    if (!res)
        return;
    free(res->cand);
    memset(res, 0, sizeof *res);
}
