/* pipe_draw.c: a schedule's simulated timeline as ASCII, one row per stage, drawn from the
 * action lists (docs/pipeline.md's pictures come from here). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train/parallel/pipeline_int.h"

#define DRAW_MAX_CELLS 16
#define DRAW_MAX_BYTES (16u << 20)

static int label(const coh_pipe_action *a, int chunks, char *buf, size_t cap)
{
    char chunk[2] = {chunks > 1 ? (char)('a' + a->chunk) : '\0', '\0'};
    return snprintf(buf, cap, "%c%d%s", a->op == COH_PIPE_FORWARD ? 'F' : 'B', a->mb, chunk);
}

static int is_compute(const coh_pipe_action *a)
{
    return a->op == COH_PIPE_FORWARD || a->op == COH_PIPE_BACKWARD;
}

/* Cells are as wide as the widest label: the last microbatch's, with its chunk letter. */
static int cell_width(const coh_pipe_shape *s)
{
    char buf[32];
    coh_pipe_action a = {COH_PIPE_FORWARD, s->microbatches - 1, 0, -1};
    return label(&a, s->virtual_stages, buf, sizeof buf);
}

static void cell(char *row, int i, int w, const char *text, char fill)
{
    char *c = row + (size_t)i * (size_t)(w + 1);
    size_t n = strlen(text);
    memset(c, fill, (size_t)w);
    memcpy(c, text, n);
}

/* One stage's row: idle cells first, then each compute over its cells. Returns the length. */
static size_t draw_row(const pipe_lists *l, const double *start, int s, int ncell, int w,
                       const int cells[2], int chunks, char *row)
{
    int pw = snprintf(NULL, 0, "%d", l->stages - 1);
    size_t at = (size_t)sprintf(row, "stage %*d: ", pw, s);
    char *cells_at = row + at, buf[32];
    for (int i = 0; i < ncell; i++) {
        cell(cells_at, i, w, ".", ' ');
        cells_at[(size_t)i * (size_t)(w + 1) + (size_t)w] = ' ';
    }
    for (int k = 0; k < l->count[s]; k++) {
        const coh_pipe_action *a = &l->list[s][k];
        if (!is_compute(a))
            continue;
        int t0 = (int)start[k], len = cells[a->op == COH_PIPE_BACKWARD];
        label(a, chunks, buf, sizeof buf);
        cell(cells_at, t0, w, buf, ' ');
        for (int i = 1; i < len; i++)
            cell(cells_at, t0 + i, w, "", '-');
    }
    size_t n = at + (size_t)ncell * (size_t)(w + 1);
    while (n > 0 && row[n - 1] == ' ')
        n--;
    row[n++] = '\n';
    return n;
}

static coh_status render(const coh_pipe_shape *s, const pipe_lists *l, double *const *start,
                         double makespan, const int cells[2], char **out)
{
    int ncell = (int)makespan, w = cell_width(s);
    size_t line = 32 + (size_t)ncell * (size_t)(w + 1), size = line * (size_t)s->stages + 1;
    if (size > DRAW_MAX_BYTES)
        return coh_errf(COH_ERR_INVALID,
                        "drawing of %d stages over %d cells would take '%zu' bytes, at most %u",
                        s->stages, ncell, size, DRAW_MAX_BYTES);
    char *text = malloc(size);
    if (!text)
        return coh_errf(COH_ERR_NOMEM, "out of memory for a drawing of %zu bytes", size);
    size_t n = 0;
    for (int st = 0; st < s->stages; st++)
        n += draw_row(l, start[st], st, ncell, w, cells, s->virtual_stages, text + n);
    text[n] = '\0';
    *out = text;
    return COH_OK;
}

static coh_status check_draw(const coh_pipe_shape *s, int fwd_cells, int bwd_cells)
{
    coh_status rc = coh_pipeline_check(s);
    if (rc)
        return rc;
    if (fwd_cells < 1 || fwd_cells > DRAW_MAX_CELLS || bwd_cells < 1 || bwd_cells > DRAW_MAX_CELLS)
        return coh_errf(COH_ERR_INVALID,
                        "invalid cells per forward '%d', per backward '%d': need 1 .. %d each",
                        fwd_cells, bwd_cells, DRAW_MAX_CELLS);
    if (s->virtual_stages > 26)
        return coh_errf(COH_ERR_INVALID,
                        "cannot draw '%d' virtual stages: chunks are drawn as letters, at most 26",
                        s->virtual_stages);
    long size = (long)s->stages * s->microbatches * s->virtual_stages;
    if (size > COH_PIPE_MAX_SIMULATED)
        return coh_errf(COH_ERR_INVALID,
                        "pipeline too large to draw: stages x microbatches x virtual stages = "
                        "'%ld', at most %d", size, COH_PIPE_MAX_SIMULATED);
    return COH_OK;
}

coh_status coh_pipeline_draw(const coh_pipe_shape *s, int fwd_cells, int bwd_cells, char **out)
{
    coh_status rc = check_draw(s, fwd_cells, bwd_cells);
    if (rc)
        return rc;
    pipe_lists l;
    double **start = NULL;
    rc = pipe_lists_build(s, &l);
    if (!rc && !(start = calloc((size_t)s->stages, sizeof *start)))
        rc = coh_errf(COH_ERR_NOMEM, "out of memory for a drawing");
    for (int i = 0; !rc && i < s->stages; i++)
        if (!(start[i] = calloc((size_t)l.count[i], sizeof **start)))
            rc = coh_errf(COH_ERR_NOMEM, "out of memory for a drawing");
    coh_pipe_sim sim;
    pipe_sim_in in = {s->stages, s->microbatches, s->virtual_stages, l.list, l.count,
                      fwd_cells, bwd_cells, start, NULL, NULL, NULL};
    if (!rc && (rc = pipe_simulate(&in, &sim, NULL)) == COH_ERR_INVALID)
        rc = coh_err_prefix(COH_ERR_INTERNAL, "%s schedule", coh_schedule_name(s->kind));
    const int cells[2] = {fwd_cells, bwd_cells};
    if (!rc)
        rc = render(s, &l, start, sim.makespan, cells, out);
    for (int i = 0; start && i < s->stages; i++)
        free(start[i]);
    free(start);
    pipe_lists_release(&l);
    return rc;
}
