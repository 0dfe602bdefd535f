/* cli_device.c: inventory opening, visibility warnings and device tables for the device
 * commands. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "cli_device.h"

int cli_inventory_fail(const char *cmd, coh_status st)
{
    /* A file the user named that is missing or unreadable (a folder) is a usage error too. */
    return cli_fail(cmd, st == COH_ERR_NOT_FOUND || st == COH_ERR_IO ? COH_ERR_INVALID : st);
}

int cli_device_open(const char *cmd, const char *path, coh_inventory **inv)
{
    coh_status st = coh_inventory_open(path, inv);
    const char *env = getenv("COHORT_INVENTORY");
    if (st != COH_OK && !path && !(env && *env)) /* probed: no file of the user's */
        return cli_fail(cmd, st);
    return st == COH_OK ? CLI_OK : cli_inventory_fail(cmd, st);
}

int cli_device_check(const char *cmd, const coh_visible *v)
{
    if (v->cut == COH_CUT_MALFORMED || v->cut == COH_CUT_EMPTY_ENTRY ||
        v->cut == COH_CUT_SPACED_ID)
        return cli_usage_error(cmd, "invalid %s", v->cut_note);
    if (v->order_note[0] && !v->order_differs)
        return cli_usage_error(cmd, "invalid %s", v->order_note);
    if (v->cut != COH_CUT_NONE)
        fprintf(stderr, "%s %s: warning: %s\n", cli_progname, cmd, v->cut_note);
    if (v->order_differs)
        fprintf(stderr, "%s %s: warning: %s\n", cli_progname, cmd, v->order_note);
    if (v->note[0])
        fprintf(stderr, "%s %s: warning: %s\n", cli_progname, cmd, v->note);
    return CLI_OK;
}

void cli_table_init(cli_table *t, int ncols, const char *align)
{
    memset(t, 0, sizeof *t);
    t->ncols = ncols;
    t->align = align;
}

void cli_table_add(cli_table *t, const char *const *cells)
{
    if (t->nrows == t->cap) {
        int cap = t->cap ? t->cap * 2 : 16;
        char *(*nc)[10] = realloc(t->cells, (size_t)cap * sizeof *nc);
        if (!nc)
            return;
        t->cells = nc;
        t->cap = cap;
    }
    for (int c = 0; c < t->ncols; c++)
        t->cells[t->nrows][c] = strdup(cells[c] ? cells[c] : "");
    t->nrows++;
}

void cli_table_print(cli_table *t, FILE *f, const char *indent)
{
    int width[10] = {0};
    for (int r = 0; r < t->nrows; r++)
        for (int c = 0; c < t->ncols; c++) {
            int w = t->cells[r][c] ? (int)strlen(t->cells[r][c]) : 0;
            if (w > width[c])
                width[c] = w;
        }
    for (int r = 0; r < t->nrows; r++) {
        fputs(indent, f);
        for (int c = 0; c < t->ncols; c++) {
            const char *s = t->cells[r][c] ? t->cells[r][c] : "";
            int last = c == t->ncols - 1;
            if (t->align[c] == 'r')
                fprintf(f, "%*s%s", width[c], s, last ? "" : "  ");
            else if (last)
                fputs(s, f);
            else
                fprintf(f, "%-*s  ", width[c], s);
        }
        fputc('\n', f);
    }
}

void cli_table_free(cli_table *t)
{
    for (int r = 0; r < t->nrows; r++)
        for (int c = 0; c < t->ncols; c++)
            free(t->cells[r][c]);
    free(t->cells);
    t->cells = NULL;
    t->nrows = t->cap = 0;
}

void cli_device_label(const coh_visible *v, int l, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s:%d", coh_accel_name(v->accel), l);
}

/* Memory, utilization and processes as a program on device d sees them. */
static void device_numbers(const coh_inventory *inv, const coh_visible_device *d,
                           uint64_t *total, uint64_t *used, int *procs)
{
    const coh_gpu *g = &inv->gpus[d->gpu];
    if (d->mig >= 0) {
        *total = g->mig[d->mig].memory_total_mib;
        *used = g->mig[d->mig].memory_used_mib;
        *procs = g->mig[d->mig].processes;
    } else if (d->tile >= 0) {
        *total = g->memory_total_mib / (uint64_t)g->tiles;
        *used = g->memory_used_mib / (uint64_t)g->tiles;
        *procs = g->processes;
    } else {
        *total = g->memory_total_mib;
        *used = g->memory_used_mib;
        *procs = g->processes;
    }
}

void cli_device_table(const coh_inventory *inv, const coh_visible *v, const int *only, int nonly,
                      FILE *f)
{
    cli_table t;
    cli_table_init(&t, 8, "lrllllrl");
    const char *phys = v->accel == COH_ACCEL_CUDA ? "SMI"
                       : v->accel == COH_ACCEL_HPU ? "MODULE (INDEX)" : "PHYS";
    const char *head[] = {"DEVICE", phys, "PCI BUS ID", "UUID", "NAME", "MEMORY FREE/TOTAL",
                          "UTIL", "PROCESSES"};
    cli_table_add(&t, head);
    int rows = only ? nonly : v->count;
    for (int i = 0; i < rows; i++) {
        int l = only ? only[i] : i;
        const coh_visible_device *d = &v->dev[l];
        const coh_gpu *g = &inv->gpus[d->gpu];
        char dev[32], smi[32], mem[64], util[16], procs[200], uuid[COH_DEV_UUID_MAX + 16];
        uint64_t total, used;
        int np;
        device_numbers(inv, d, &total, &used, &np);
        cli_device_label(v, l, dev, sizeof dev);
        if (g->vendor == COH_VENDOR_HABANA) /* the id HABANA_VISIBLE_MODULES names first */
            snprintf(smi, sizeof smi, "%d (%d)", g->module_id, g->physical_index);
        else if (d->tile >= 0)
            snprintf(smi, sizeof smi, "%d.%d", g->physical_index, d->tile);
        else
            snprintf(smi, sizeof smi, "%d", g->physical_index);
        snprintf(uuid, sizeof uuid, "%s", d->mig >= 0 ? g->mig[d->mig].uuid : g->uuid);
        snprintf(mem, sizeof mem, "%llu/%llu MiB", (unsigned long long)(total - used),
                 (unsigned long long)total);
        snprintf(util, sizeof util, "%d%%", g->utilization_pct);
        snprintf(procs, sizeof procs, "%d%s%.120s%s", np, g->owners[0] ? " (" : "", g->owners,
                 g->owners[0] ? ")" : "");
        const char *row[] = {dev, smi, g->pci_bus_id[0] ? g->pci_bus_id : "-", uuid, g->name,
                             mem, util, procs};
        cli_table_add(&t, row);
    }
    cli_table_print(&t, f, "  ");
    cli_table_free(&t);
}

void cli_device_json(coh_jw *w, const coh_inventory *inv, const coh_visible *v, int l)
{
    const coh_visible_device *d = &v->dev[l];
    const coh_gpu *g = &inv->gpus[d->gpu];
    char label[32];
    uint64_t total, used;
    int np;
    device_numbers(inv, d, &total, &used, &np);
    cli_device_label(v, l, label, sizeof label);
    coh_jw_object_begin(w);
    coh_jw_field_string(w, "device", label);
    coh_jw_field_int(w, "logical_index", l);
    coh_jw_field_int(w, "physical_index", g->physical_index);
    coh_jw_key(w, "module_id");
    if (g->vendor == COH_VENDOR_HABANA)
        coh_jw_int(w, g->module_id);
    else
        coh_jw_null(w);
    coh_jw_field_string(w, "pci_bus_id", g->pci_bus_id);
    coh_jw_field_string(w, "uuid", g->uuid);
    coh_jw_field_string(w, "mig_uuid", d->mig >= 0 ? g->mig[d->mig].uuid : NULL);
    coh_jw_key(w, "tile");
    if (d->tile >= 0)
        coh_jw_int(w, d->tile);
    else
        coh_jw_null(w);
    coh_jw_field_string(w, "name", g->name);
    coh_jw_field_uint(w, "memory_total_mib", total);
    coh_jw_field_uint(w, "memory_free_mib", total - used);
    coh_jw_field_int(w, "utilization_pct", g->utilization_pct);
    coh_jw_field_int(w, "processes", np);
    coh_jw_object_end(w);
}
