/* inventory_mem.c: reads what the estimator and the planner need from a device inventory
 * file's GPUs: the smallest memory (a configuration must fit on every device) and which GPUs
 * differ, for a warning that names them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan/plan_int.h"
#include "util/json.h"
#include "util/strutil.h"

coh_status plan_inventory_scan(const json_value *root, const char *path,
                               coh_inventory_memory *out)
{
    memset(out, 0, sizeof *out);
    out->other = -1;
    const json_value *gpus = json_get(root, "gpus");
    if (!gpus || gpus->type != JSON_ARRAY)
        return coh_errf(COH_ERR_INVALID, "inventory '%s' has no \"gpus\" array", path);
    if (gpus->u.arr.count == 0)
        return coh_errf(COH_ERR_INVALID, "inventory '%s' lists no GPUs; give --device-memory",
                        path);
    uint64_t *mib = calloc(gpus->u.arr.count, sizeof *mib);
    if (!mib)
        return coh_errf(COH_ERR_NOMEM, "out of memory reading inventory '%s'", path);
    for (size_t i = 0; i < gpus->u.arr.count; i++) {
        const json_value *m = json_get(gpus->u.arr.items[i], "memory_total_mib");
        if (!m || m->type != JSON_NUMBER || !m->u.num.is_integer || m->u.num.integer < 1 ||
            m->u.num.integer > ((int64_t)1 << 40)) {
            free(mib);
            return coh_errf(COH_ERR_INVALID, "inventory '%s': gpus[%zu] has no valid "
                            "\"memory_total_mib\" (a positive integer)", path, i);
        }
        mib[i] = (uint64_t)m->u.num.integer;
        if (mib[i] < mib[out->smallest])
            out->smallest = (int)i;
        if (mib[i] > mib[out->largest])
            out->largest = (int)i;
    }
    out->gpus = (int)gpus->u.arr.count;
    out->smallest_mib = mib[out->smallest];
    out->largest_mib = mib[out->largest];
    free(mib);
    /* The first GPU named otherwise than the priced one: its speed is not what is priced. */
    const json_value *name = json_get(gpus->u.arr.items[out->smallest], "name");
    if (name && name->type == JSON_STRING)
        snprintf(out->name, sizeof out->name, "%s", name->u.str.chars);
    for (size_t i = 0; i < gpus->u.arr.count && out->other < 0; i++) {
        const json_value *n = json_get(gpus->u.arr.items[i], "name");
        if (n && n->type == JSON_STRING && strcmp(n->u.str.chars, out->name)) {
            out->other = (int)i;
            snprintf(out->other_name, sizeof out->other_name, "%s", n->u.str.chars);
        }
    }
    return COH_OK;
}

coh_status coh_plan_inventory_gpus(const char *path, coh_inventory_memory *out)
{
    memset(out, 0, sizeof *out);
    json_doc *doc;
    coh_status st = json_parse_file(path, &doc);
    if (st != COH_OK)
        return st == COH_ERR_INVALID ? coh_err_prefix(st, "malformed inventory") : st;
    st = plan_inventory_scan(json_root(doc), path, out);
    json_free(doc);
    return st;
}

coh_status coh_plan_inventory_memory(const char *path, uint64_t *bytes)
{
    coh_inventory_memory m;
    coh_status st = coh_plan_inventory_gpus(path, &m);
    if (st == COH_OK)
        *bytes = m.smallest_mib << 20;
    return st;
}

void coh_plan_inventory_note(const coh_inventory_memory *m, const char *path, int rates,
                             char *buf, size_t cap)
{
    size_t len = 0;
    if (!cap)
        return;
    buf[0] = '\0';
    if (m->smallest_mib != m->largest_mib)
        coh_str_append(buf, cap, &len, "inventory '%s': its GPUs differ in memory (gpus[%d] "
                       "%llu MiB, gpus[%d] %llu MiB): a configuration must fit on every device, "
                       "so memory is priced at the smallest, gpus[%d]'s", path, m->largest,
                       (unsigned long long)m->largest_mib, m->smallest,
                       (unsigned long long)m->smallest_mib, m->smallest);
    if (rates && m->other >= 0)
        coh_str_append(buf, cap, &len, "%sinventory '%s': its GPUs differ (gpus[%d] '%s', "
                       "gpus[%d] '%s'): a step waits for the slowest, so the rates are the "
                       "slowest's", len ? "; " : "", path, m->smallest, m->name, m->other,
                       m->other_name);
}
