/* inventory_mem.c: reads what the estimator and the planner need from a device inventory
 * file's GPUs, parsed by the device layer (src/device/inventory.c): the smallest memory (a
 * configuration must fit on every device) and which GPUs differ, for a warning that names
 * them. */
#include <stdio.h>
#include <string.h>

#include "plan/plan_int.h"
#include "util/strutil.h"

coh_status plan_inventory_scan(const coh_inventory *inv, const char *path,
                               coh_inventory_memory *out)
{
    memset(out, 0, sizeof *out);
    out->other = -1;
    if (inv->ngpus == 0)
        return coh_errf(COH_ERR_INVALID, "inventory '%s' lists no GPUs; give --device-memory",
                        path);
    for (int i = 0; i < inv->ngpus; i++) {
        uint64_t mib = inv->gpus[i].memory_total_mib;
        if (mib < inv->gpus[out->smallest].memory_total_mib)
            out->smallest = i;
        if (mib > inv->gpus[out->largest].memory_total_mib)
            out->largest = i;
    }
    out->gpus = inv->ngpus;
    out->smallest_mib = inv->gpus[out->smallest].memory_total_mib;
    out->largest_mib = inv->gpus[out->largest].memory_total_mib;
    /* The first GPU named otherwise than the priced one: its speed is not what is priced. */
    snprintf(out->name, sizeof out->name, "%s", inv->gpus[out->smallest].name);
    for (int i = 0; i < inv->ngpus && out->other < 0; i++)
        if (strcmp(inv->gpus[i].name, out->name)) {
            out->other = i;
            snprintf(out->other_name, sizeof out->other_name, "%s", inv->gpus[i].name);
        }
    return COH_OK;
}

/* The device layer's parser reads the file: one schema and one set of checks (duplicate uuids,
 * impossible MIG layouts, ...) for every command, with the same messages. */
coh_status coh_plan_inventory_gpus(const char *path, coh_inventory_memory *out)
{
    memset(out, 0, sizeof *out);
    coh_inventory *inv;
    coh_status st = coh_inventory_load(path, &inv);
    if (st != COH_OK)
        return st;
    st = plan_inventory_scan(inv, path, out);
    coh_inventory_destroy(inv);
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
