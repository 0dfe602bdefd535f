/* cli_device.h: what `cohort devices` and `cohort pick` share: opening the inventory, checking
 * the visibility variables, device rows as aligned tables and as JSON. */
#ifndef COHORT_CLI_DEVICE_H
#define COHORT_CLI_DEVICE_H

#include <stdio.h>

#include "cohort/device.h"
#include "cohort/json_writer.h"

/* Print the error of reading an inventory file and return the exit code: 2 for a bad or
 * missing or unreadable file, as every command that takes --inventory does (devices, pick, run, plan,
 * estimate). */
int cli_inventory_fail(const char *cmd, coh_status st);

/* Open the inventory (--inventory, COHORT_INVENTORY or probe). Returns CLI_OK or the exit code
 * after printing the error. */
int cli_device_open(const char *cmd, const char *path, coh_inventory **inv);

/* Print the cut / order warnings of v on stderr. Returns CLI_USAGE (after printing an error)
 * when a variable is malformed (a typo rather than the runtime's documented cut), else CLI_OK. */
int cli_device_check(const char *cmd, const coh_visible *v);

/* A simple aligned table: add cells row by row (as many as there are devices), then print. */
typedef struct cli_table {
    int ncols, nrows, cap;
    char *(*cells)[10]; /* cap rows of ncols cells */
    const char *align;  /* per column: 'l' or 'r' */
} cli_table;
void cli_table_init(cli_table *t, int ncols, const char *align);
void cli_table_add(cli_table *t, const char *const *cells); /* ncols cells; copied */
void cli_table_print(cli_table *t, FILE *f, const char *indent);
void cli_table_free(cli_table *t);

/* One row per visible device: DEVICE SMI PCI UUID NAME FREE/TOTAL UTIL PROCS; `only` (may be
 * NULL) limits the rows to those logical indices. */
void cli_device_table(const coh_inventory *inv, const coh_visible *v, const int *only, int nonly,
                      FILE *f);

/* The visible device l as a JSON object. */
void cli_device_json(coh_jw *w, const coh_inventory *inv, const coh_visible *v, int l);

/* "cuda:1" etc. */
void cli_device_label(const coh_visible *v, int l, char *buf, size_t cap);

#endif
