/* trace.c: Chrome / Perfetto trace events of one rank, kept in memory during training and
 * written as {"traceEvents": [...]} when the trainer is destroyed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cohort/clock.h"
#include "cohort/json_writer.h"
#include "train/parallel/par_trainer_int.h"

typedef struct trace_ev {
    char name[40];
    const char *cat;
    int tid;
    double t0, t1;
} trace_ev;

struct par_trace {
    char *path;
    int rank;
    trace_ev *ev;
    size_t n, cap;
    int lost; /* events dropped for lack of memory */
};

double par_now_us(void)
{
    return (double)coh_now_ns() * 1e-3;
}

coh_status par_trace_open(const char *path, int rank, par_trace **out)
{
    *out = NULL;
    par_trace *tr = calloc(1, sizeof *tr);
    if (!tr || !(tr->path = strdup(path))) {
        free(tr);
        return coh_errf(COH_ERR_NOMEM, "out of memory opening the trace");
    }
    /* fail now, not after training, when the file cannot be written */
    FILE *f = fopen(path, "w");
    if (!f) {
        free(tr->path);
        free(tr);
        return coh_errf(COH_ERR_IO, "cannot write trace file '%s'", path);
    }
    fclose(f);
    tr->rank = rank;
    *out = tr;
    return COH_OK;
}

void par_trace_event(par_trace *tr, const char *name, const char *cat, int tid, double t0,
                     double t1)
{
    if (!tr)
        return;
    if (tr->n == tr->cap) {
        size_t cap = tr->cap ? tr->cap * 2 : 1024;
        trace_ev *ev = realloc(tr->ev, cap * sizeof *ev);
        if (!ev) {
            tr->lost++;
            return;
        }
        tr->ev = ev;
        tr->cap = cap;
    }
    trace_ev *e = &tr->ev[tr->n++];
    snprintf(e->name, sizeof e->name, "%s", name);
    e->cat = cat;
    e->tid = tid;
    e->t0 = t0;
    e->t1 = t1;
}

static const char *const THREADS[4] = {"compute", "gradient comm", "parameter comm",
                                       "tensor-parallel comm"};

static void write_events(par_trace *tr, coh_jw *w)
{
    for (int i = 0; i < 4; i++) { /* names of the tracks */
        coh_jw_object_begin(w);
        coh_jw_key(w, "name"); coh_jw_string(w, "thread_name");
        coh_jw_key(w, "ph"); coh_jw_string(w, "M");
        coh_jw_key(w, "pid"); coh_jw_int(w, tr->rank);
        coh_jw_key(w, "tid"); coh_jw_int(w, i);
        coh_jw_key(w, "args"); coh_jw_object_begin(w);
        coh_jw_key(w, "name"); coh_jw_string(w, THREADS[i]);
        coh_jw_object_end(w);
        coh_jw_object_end(w);
    }
    for (size_t i = 0; i < tr->n; i++) {
        const trace_ev *e = &tr->ev[i];
        coh_jw_object_begin(w);
        coh_jw_key(w, "name"); coh_jw_string(w, e->name);
        coh_jw_key(w, "cat"); coh_jw_string(w, e->cat);
        coh_jw_key(w, "ph"); coh_jw_string(w, "X");
        coh_jw_key(w, "ts"); coh_jw_double(w, e->t0);
        coh_jw_key(w, "dur"); coh_jw_double(w, e->t1 - e->t0);
        coh_jw_key(w, "pid"); coh_jw_int(w, tr->rank);
        coh_jw_key(w, "tid"); coh_jw_int(w, e->tid);
        coh_jw_object_end(w);
    }
}

coh_status par_trace_close(par_trace *tr)
{
    if (!tr)
        return COH_OK;
    coh_status st = COH_OK;
    FILE *f = fopen(tr->path, "w");
    if (!f) {
        st = coh_errf(COH_ERR_IO, "cannot write trace file '%s'", tr->path);
    } else {
        coh_jw w;
        coh_jw_init(&w, f, 0);
        coh_jw_object_begin(&w);
        coh_jw_key(&w, "traceEvents");
        coh_jw_array_begin(&w);
        write_events(tr, &w);
        coh_jw_array_end(&w);
        coh_jw_key(&w, "displayTimeUnit");
        coh_jw_string(&w, "ms");
        coh_jw_object_end(&w);
        coh_jw_finish(&w);
        if (fclose(f) || tr->lost)
            st = coh_errf(COH_ERR_IO, "trace file '%s' is incomplete (%d events lost)",
                          tr->path, tr->lost);
    }
    free(tr->ev);
    free(tr->path);
    free(tr);
    return st;
}
