/* report.h: reading what a training run leaves behind (metrics JSONL, per-rank Perfetto traces,
 * the estimator's JSON) and writing it as one self-contained HTML page of SVG charts and tables
 * (`cohort report`). */
#ifndef COHORT_REPORT_H
#define COHORT_REPORT_H

#include <stddef.h>
#include <stdio.h>

#include "cohort/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- metrics: the lines `cohort train --metrics` writes -------------------------------------- */

/* One step. Fields a line lacks are NAN (tokens: NAN in metrics written before it existed). */
typedef struct coh_metrics_step {
    long step;
    double loss, val_loss, lr, tokens, tokens_per_s, mfu, elapsed_s, grad_norm;
} coh_metrics_step;

/* One rank's memory (bytes) and, for pipelines, its last step's busy and idle time (us), for
 * tensor parallelism its time in the tp collectives (us), as the last line holding a "memory"
 * array says: alloc_peak is the device allocator's peak (what the prediction is compared with),
 * peak_rss - base_rss the process's resident growth. Absent fields are NAN. */
typedef struct coh_metrics_rank {
    int rank;
    double params, grads, optim, peak_rss, base_rss, predicted, busy_us, idle_us, tp_comm_us;
    double alloc_peak;
} coh_metrics_rank;

/* A line that could not be used: its 1-based number and why. */
typedef struct coh_metrics_problem {
    long line;
    char message[160];
} coh_metrics_problem;

#define COH_METRICS_MAX_PROBLEMS 16 /* problems kept; nproblems counts them all */

typedef struct coh_metrics {
    coh_metrics_step *steps;    /* in step order; a resumed run's repeated steps replace the
                                   earlier ones from that step on */
    size_t nsteps;
    coh_metrics_rank *ranks;    /* ascending rank */
    size_t nranks;
    coh_metrics_problem problems[COH_METRICS_MAX_PROBLEMS];
    size_t nproblems;           /* bad lines, including those beyond the ones kept */
    long lines;                 /* lines read (a last line without '\n' counts) */
} coh_metrics;

/* Parse text[0..len): every line a JSON object with an integer "step" >= 0 and a number "loss";
 * blank lines are skipped. A bad line (not JSON, truncated, a field of the wrong type) is
 * recorded in m->problems and skipped; the rest is kept. Only running out of memory fails
 * (COH_ERR_NOMEM, *m then empty). Release with coh_metrics_release. */
coh_status coh_metrics_parse(const char *text, size_t len, coh_metrics *m);

/* Read and parse a file; COH_ERR_IO naming it when it cannot be read. */
coh_status coh_metrics_read(const char *path, coh_metrics *m);
void coh_metrics_release(coh_metrics *m); /* NULL-safe */

/* ---- traces: the Chrome/Perfetto JSON `cohort train --trace` writes, one file per rank ------- */

typedef enum coh_trace_kind {
    COH_TRACE_COMPUTE,  /* forward, backward, optimizer, a pipeline's F/B of a micro-batch */
    COH_TRACE_COMM,     /* collectives (gradient, parameter and tensor-parallel tracks) */
    COH_TRACE_IDLE,     /* waiting: a pipeline stage's receives (its bubble) */
    COH_TRACE_STEP      /* a span around a whole step's compute (drawn as its outline) */
} coh_trace_kind;

typedef struct coh_trace_event {
    char name[40];
    coh_trace_kind kind;
    int tid;            /* 0 compute, 1 gradient comm, 2 parameter comm, 3 tensor-parallel comm
                           (other tracks are not drawn) */
    double ts, dur;     /* microseconds; ts on the clock shared by the ranks of a machine */
} coh_trace_event;

typedef struct coh_trace {
    int rank;           /* the events' pid; -1 when the file has no complete event */
    coh_trace_event *events; /* by start time */
    size_t nevents;
} coh_trace;

/* Parse a trace: {"traceEvents": [...]} or a bare array; complete events ("ph": "X") are
 * kept, metadata and other phases skipped. COH_ERR_INVALID naming the line for text that is
 * not such a trace; COH_ERR_NOMEM. */
coh_status coh_trace_parse(const char *text, size_t len, coh_trace *t);
coh_status coh_trace_read(const char *path, coh_trace *t);
void coh_trace_release(coh_trace *t); /* NULL-safe */

/* ---- the estimate: `cohort estimate --engine cohort --json` ---------------------------------- */

typedef struct coh_report_estimate {
    char strategy[16];  /* "ddp", "zero1", ... ("" when absent) */
    int dp, pp, tp;     /* 0 when absent */
    int rank;           /* the rank the figures are for (the one holding the most) */
    double params, grads, optim, activations, temp, comm, total; /* bytes; NAN when absent */
} coh_report_estimate;

coh_status coh_report_estimate_parse(const char *text, size_t len, coh_report_estimate *e);
coh_status coh_report_estimate_read(const char *path, coh_report_estimate *e);

/* ---- the page -------------------------------------------------------------------------------- */

typedef struct coh_report_run {
    const char *name;                   /* legend and table name */
    const char *metrics_path;           /* shown with the problems */
    const coh_metrics *metrics;
    const coh_trace *traces;            /* one per rank, any order; may be NULL */
    size_t ntraces;
    const coh_report_estimate *estimate; /* may be NULL */
} coh_report_run;

/* Write the HTML page (inline SVG and CSS, no script, nothing fetched) for runs[0..n): loss and
 * validation loss against tokens, tokens/s and MFU against steps, memory per rank (measured
 * against predicted), each run's per-rank timeline of its last steps, and, for n > 1, a
 * comparison table. Every chart has a title, axis labels and a data table. COH_ERR_IO when
 * writing fails. */
coh_status coh_report_write_html(FILE *out, const char *title, const coh_report_run *runs,
                                 size_t n);

#ifdef __cplusplus
}
#endif

#endif
