/* visible_hpu_mps.c: Intel Gaudi's HABANA_VISIBLE_MODULES (module ids, one per local rank) and
 * Apple's MPS (one device, no variable). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/device_int.h"
#include "util/strutil.h"

#define HPU_VAR "HABANA_VISIBLE_MODULES"

/* The module ids as "0,1,2" for messages ("none" without Gaudi modules). */
static void id_list(const int *ids, int n, char *buf, size_t cap)
{
    size_t len = 0;
    buf[0] = '\0';
    for (int i = 0; i < n; i++)
        coh_str_append(buf, cap, &len, "%s%d", i ? "," : "", ids[i]);
    if (n == 0)
        coh_str_append(buf, cap, &len, "none");
}

static int index_of(const int *ids, int n, long id)
{
    for (int i = 0; i < n; i++)
        if (ids[i] == id)
            return i;
    return -1;
}

/* One entry: plain decimal digits (no sign, no spaces: Habana documents integers). */
static coh_status hpu_entry(const char *value, const char *s, size_t len, int pos,
                            const char *valid, long *id)
{
    if (len == 0)
        return coh_errf(COH_ERR_INVALID, "invalid " HPU_VAR "='%s': entry %d is empty; give "
                        "module ids separated by commas (module ids here: %s)", value, pos,
                        valid);
    if (len > 9 || strspn(s, "0123456789") < len)
        return coh_errf(COH_ERR_INVALID, "invalid " HPU_VAR "='%s': entry %d '%.*s' is not a "
                        "module id (a number without sign or spaces; module ids here: %s)",
                        value, pos, (int)(len > 40 ? 40 : len), s, valid);
    char buf[16];
    memcpy(buf, s, len);
    buf[len] = '\0';
    *id = strtol(buf, NULL, 10);
    return COH_OK;
}

coh_status coh_hpu_modules_parse(const char *value, const int *ids, int nids, int *out, int cap,
                                 int *n)
{
    char valid[256];
    id_list(ids, nids, valid, sizeof valid);
    *n = 0;
    if (!*value)
        return coh_errf(COH_ERR_INVALID, "invalid " HPU_VAR "='': it is empty; list module ids "
                        "separated by commas, or unset it to use every module (module ids "
                        "here: %s)", valid);
    const char *p = value;
    for (int pos = 1;; pos++) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        long id = 0;
        coh_status st = hpu_entry(value, p, len, pos, valid, &id);
        if (st != COH_OK)
            return st;
        if (index_of(ids, nids, id) < 0)
            return coh_errf(COH_ERR_INVALID, "invalid " HPU_VAR "='%s': entry %d '%ld' is not a "
                            "module id of this machine (module ids here: %s)", value, pos, id,
                            valid);
        if (index_of(out, *n, id) >= 0)
            return coh_errf(COH_ERR_INVALID, "invalid " HPU_VAR "='%s': entry %d repeats module "
                            "%ld; each module may be listed once", value, pos, id);
        if (*n == cap)
            return coh_errf(COH_ERR_INVALID, "invalid " HPU_VAR "='%s': more than %d entries",
                            value, cap);
        out[(*n)++] = (int)id;
        if (!e)
            return COH_OK;
        p = e + 1;
    }
}

/* Gaudi devices of inv (indices into inv->gpus) sorted by module id; returns the count. */
static int hpu_by_module(const coh_inventory *inv, int *list)
{
    int n = vis_vendor_list(inv, COH_VENDOR_HABANA, list, inv->ngpus);
    for (int i = 1; i < n; i++) /* insertion sort: a node has a handful of modules */
        for (int j = i; j > 0 && inv->gpus[list[j]].module_id < inv->gpus[list[j - 1]].module_id;
             j--) {
            int t = list[j];
            list[j] = list[j - 1];
            list[j - 1] = t;
        }
    return n;
}

/* Unset: local rank N takes module id N (Habana's automatic assignment); cohort numbers the
 * modules by id, which is that rule when the ids are 0..N-1. Set: the listed order. */
coh_status visible_hpu(const coh_inventory *inv, const coh_vis_env *env, coh_visible *v)
{
    int *list = calloc((size_t)inv->ngpus + 1, sizeof *list);
    int *ids = calloc((size_t)inv->ngpus + 1, sizeof *ids);
    int *pick = calloc((size_t)inv->ngpus + 1, sizeof *pick);
    coh_status st = COH_OK;
    if (!list || !ids || !pick)
        st = coh_errf(COH_ERR_NOMEM, "out of memory");
    int n = st == COH_OK ? hpu_by_module(inv, list) : 0, np = n;
    for (int i = 0; i < n; i++) {
        ids[i] = inv->gpus[list[i]].module_id;
        pick[i] = ids[i];
    }
    const char *val = env->habana_visible_modules;
    if (st == COH_OK && val)
        st = coh_hpu_modules_parse(val, ids, n, pick, n, &np);
    for (int i = 0; i < np && st == COH_OK; i++)
        if (vis_push(v, list[index_of(ids, n, pick[i])], -1, -1))
            st = coh_errf(COH_ERR_NOMEM, "out of memory");
    free(list);
    free(ids);
    free(pick);
    return st;
}

coh_status visible_mps(const coh_inventory *inv, coh_visible *v)
{
    for (int i = 0; i < inv->ngpus; i++)
        if (inv->gpus[i].vendor == COH_VENDOR_APPLE && v->count == 0 && vis_push(v, i, -1, -1))
            return coh_errf(COH_ERR_NOMEM, "out of memory");
    return COH_OK;
}
