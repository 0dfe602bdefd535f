/* report_html.c: `cohort report`'s page: one self-contained HTML file (inline CSS and SVG, no
 * script, nothing fetched) with the runs' loss, speed and memory charts, each run's per-rank
 * timeline of its last steps from its traces, the summary table and the metrics' bad lines. */
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "cohort/report.h"
#include "report/report_svg.h"

#define TIMELINE_STEPS 2 /* the last steps a timeline shows */

static const char CSS[] =
    "body{font-family:system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;margin:2em auto;"
    "max-width:1100px;padding:0 1em;color:#1a1a1a;background:#fff;line-height:1.4}\n"
    "h1{font-size:1.6em;margin-bottom:.2em}h2{font-size:1.25em;margin-top:2em;"
    "border-bottom:1px solid #ccc;padding-bottom:.2em}\n"
    "figure{margin:1.2em 0;break-inside:avoid;page-break-inside:avoid}\n"
    "svg{max-width:100%;height:auto;font-size:12px;background:#fff}\n"
    ".chart-title{font-size:14px;font-weight:600;fill:#1a1a1a}\n"
    ".grid line{stroke:#e4e4e4;stroke-width:1}\n"
    ".axis line{stroke:#444;stroke-width:1}.tick{fill:#444}\n"
    ".axis-label{fill:#1a1a1a;font-size:13px}\n"
    ".legend text{fill:#1a1a1a}\n"
    ".table-wrap{max-height:16em;overflow:auto;margin-top:.4em}\n"
    "table{border-collapse:collapse;font-size:.85em}\n"
    "th,td{border:1px solid #ccc;padding:.2em .6em;text-align:right}\n"
    "th[scope=row],thead th:first-child{text-align:left}\n"
    "caption{text-align:left;font-weight:600;padding:.3em 0}\n"
    ".summary td,.summary th{font-size:1.05em}\n"
    ".problems{border:2px solid #b00020;background:#fff4f4;padding:.6em 1em;margin:1em 0}\n"
    ".problems h2{margin-top:0;border:0;color:#b00020}\n"
    ".note{color:#555;font-size:.9em}\n"
    ".ev-forward{fill:#0072b2}.ev-backward{fill:#009e73}.ev-optimizer{fill:#cc79a7}"
    ".ev-compute{fill:#3b5b92}.ev-comm{fill:#e69f00}.ev-idle{fill:url(#idle-hatch)}"
    ".ev-step{fill:#f2f2f2;stroke:#999;stroke-width:.5}\n"
    ".ev-label{fill:#fff;font-size:10px;pointer-events:none}\n"
    ".lane-label{fill:#1a1a1a;font-size:11px}\n"
    "code{font-size:.95em}\n"
    "@media print{body{margin:0;max-width:none}.table-wrap{max-height:none;overflow:visible}"
    "h2{break-after:avoid}}\n";

typedef struct page {
    FILE *f;
    const coh_report_run *runs;
    size_t n;
} page;

static void esc(page *p, const char *s)
{
    rsvg_esc(p->f, s);
}

/* ---- per run figures ------------------------------------------------------------------------- */

/* the steps' x (tokens when every line has them, else the step) into x[nsteps]; 1 for tokens */
static int xs_of(const coh_metrics *m, double *x)
{
    int tokens = m->nsteps > 0;
    for (size_t i = 0; i < m->nsteps; i++)
        tokens &= isfinite(m->steps[i].tokens) && m->steps[i].tokens > 0;
    for (size_t i = 0; i < m->nsteps; i++)
        x[i] = tokens ? m->steps[i].tokens : (double)m->steps[i].step;
    return tokens;
}

static double median_tail(const coh_metrics *m, size_t off)
{
    /* the median of the second half of the steps' values (warm-up left out) */
    size_t n = m->nsteps, from = n / 2, k = 0;
    double *v = malloc((n - from + 1) * sizeof *v);
    if (!v)
        return NAN;
    for (size_t i = from; i < n; i++) {
        double d = *(const double *)((const char *)&m->steps[i] + off);
        if (isfinite(d))
            v[k++] = d;
    }
    for (size_t i = 1; i < k; i++) /* insertion sort: a report's worth of steps */
        for (size_t j = i; j > 0 && v[j - 1] > v[j]; j--) {
            double t = v[j];
            v[j] = v[j - 1];
            v[j - 1] = t;
        }
    double r = k ? (k % 2 ? v[k / 2] : (v[k / 2 - 1] + v[k / 2]) / 2) : NAN;
    free(v);
    return r;
}

typedef struct series_buf {
    double *x, *y;
    char name[96];
} series_buf;

static int series_alloc(series_buf *b, size_t n)
{
    b->x = malloc((n ? n : 1) * sizeof *b->x);
    b->y = malloc((n ? n : 1) * sizeof *b->y);
    return b->x && b->y;
}

static void series_free(series_buf *b, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(b[i].x);
        free(b[i].y);
    }
    free(b);
}

static int loss_chart(page *p)
{
    size_t ns = 2 * p->n, k = 0;
    rsvg_series *s = calloc(ns ? ns : 1, sizeof *s);
    series_buf *b = calloc(ns ? ns : 1, sizeof *b);
    int all_tokens = 1, any_val = 0;
    if (!s || !b) {
        free(s);
        free(b);
        return -1;
    }
    for (size_t r = 0; r < p->n; r++) {
        const coh_metrics *m = p->runs[r].metrics;
        if (!series_alloc(&b[2 * r], m->nsteps) || !series_alloc(&b[2 * r + 1], m->nsteps)) {
            series_free(b, ns);
            free(s);
            return -1;
        }
        all_tokens &= xs_of(m, b[2 * r].x);
        memcpy(b[2 * r + 1].x, b[2 * r].x, m->nsteps * sizeof *b->x);
        size_t nv = 0;
        for (size_t i = 0; i < m->nsteps; i++) {
            b[2 * r].y[i] = m->steps[i].loss;
            if (isfinite(m->steps[i].val_loss)) { /* validated steps only */
                b[2 * r + 1].x[nv] = b[2 * r].x[i];
                b[2 * r + 1].y[nv++] = m->steps[i].val_loss;
            }
        }
        s[k++] = (rsvg_series){.name = p->runs[r].name, .x = b[2 * r].x, .y = b[2 * r].y,
                               .n = m->nsteps, .color = (int)r};
        if (nv) {
            any_val = 1;
            snprintf(b[2 * r + 1].name, sizeof b->name, "%s validation", p->runs[r].name);
            s[k++] = (rsvg_series){.name = b[2 * r + 1].name, .x = b[2 * r + 1].x,
                                   .y = b[2 * r + 1].y, .n = nv, .color = (int)r, .dashed = 1,
                                   .markers = 1};
        }
    }
    rsvg_chart c = {
        .id = "loss",
        .title = all_tokens ? "Loss against tokens" : "Loss against steps",
        .desc = any_val ? "Training loss (solid) and validation loss (dashed, dots) of each run "
                          "against the tokens trained on."
                        : "Training loss of each run against the tokens trained on.",
        .xlabel = all_tokens ? "tokens" : "step", .ylabel = "loss (cross-entropy, nats)",
        .logx = -1};
    rsvg_line_chart(p->f, &c, s, k);
    series_free(b, ns);
    free(s);
    return 0;
}

/* tokens/s (what = 0) or MFU (what = 1) against steps */
static int speed_chart(page *p, int what)
{
    rsvg_series *s = calloc(p->n ? p->n : 1, sizeof *s);
    series_buf *b = calloc(p->n ? p->n : 1, sizeof *b);
    if (!s || !b) {
        free(s);
        free(b);
        return -1;
    }
    for (size_t r = 0; r < p->n; r++) {
        const coh_metrics *m = p->runs[r].metrics;
        if (!series_alloc(&b[r], m->nsteps)) {
            series_free(b, p->n);
            free(s);
            return -1;
        }
        for (size_t i = 0; i < m->nsteps; i++) {
            b[r].x[i] = (double)m->steps[i].step;
            b[r].y[i] = what ? m->steps[i].mfu : m->steps[i].tokens_per_s;
        }
        s[r] = (rsvg_series){.name = p->runs[r].name, .x = b[r].x, .y = b[r].y,
                             .n = m->nsteps, .color = (int)r};
    }
    rsvg_chart c = what ? (rsvg_chart){.id = "mfu", .title = "MFU over steps",
                                       .desc = "Model FLOPs utilisation of each step: the "
                                               "model's FLOPs per second against the sgemm peak "
                                               "measured at the start of the run.",
                                       .xlabel = "step", .ylabel = "MFU (%)",
                                       .y_from_zero = 1, .y_scale = 100}
                        : (rsvg_chart){.id = "throughput", .title = "Tokens per second over steps",
                                       .desc = "Training throughput of each step (all ranks' "
                                               "tokens over the step's time).",
                                       .xlabel = "step", .ylabel = "tokens/s",
                                       .y_from_zero = 1};
    rsvg_line_chart(p->f, &c, s, p->n);
    series_free(b, p->n);
    free(s);
    return 0;
}

static int memory_chart(page *p, size_t r)
{
    const coh_report_run *run = &p->runs[r];
    const coh_metrics *m = run->metrics;
    const coh_report_estimate *e = run->estimate;
    enum { COMPONENTS = 5 };
    static const char *const NAMES[COMPONENTS] = {"parameters", "gradients", "optimizer",
                                                  "allocator peak",
                                                  "growth of the resident peak"};
    size_t nrows = m->nranks * COMPONENTS;
    if (!nrows) {
        fprintf(p->f, "<p class=\"note\">No memory figures in the metrics of ");
        esc(p, run->name);
        fprintf(p->f, ".</p>\n");
        return 0;
    }
    char (*labels)[64] = calloc(nrows, sizeof *labels);
    const char **rows = calloc(nrows, sizeof *rows);
    double *v = calloc(nrows * 2, sizeof *v);
    if (!labels || !rows || !v) {
        free(labels);
        free(rows);
        free(v);
        return -1;
    }
    for (size_t k = 0; k < m->nranks; k++) {
        const coh_metrics_rank *q = &m->ranks[k];
        double measured[COMPONENTS] = {q->params, q->grads, q->optim, q->alloc_peak,
                                       q->peak_rss - q->base_rss};
        double predicted[COMPONENTS] = {e ? e->params : NAN, e ? e->grads : NAN,
                                        e ? e->optim : NAN, q->predicted, q->predicted};
        for (int c = 0; c < COMPONENTS; c++) {
            size_t row = k * COMPONENTS + (size_t)c;
            snprintf(labels[row], sizeof labels[row], "rank %d %s", q->rank, NAMES[c]);
            rows[row] = labels[row];
            v[2 * row] = measured[c];
            v[2 * row + 1] = predicted[c];
        }
    }
    char id[48], title[200], desc[640];
    snprintf(id, sizeof id, "memory-%zu", r);
    snprintf(title, sizeof title, "Memory per rank, measured against predicted: %s", run->name);
    snprintf(desc, sizeof desc,
             "For each rank: parameters, gradients and optimizer state held at the optimizer "
             "step, the peak of the device allocator (every buffer of the rank), and the "
             "growth of the resident set over the process before the model existed (a "
             "process-level figure); measured (first bar) against the prediction (second bar: "
             "the estimator's per-component figures%s, and the trainer's own prediction of "
             "the rank's peak for both).", e ? " for the rank holding the most" : ", absent without an estimate");
    static const char *const SERIES[2] = {"measured", "predicted"};
    rsvg_bars b = {.id = id, .title = title, .desc = desc, .xlabel = "bytes", .rows = rows,
                   .nrows = nrows, .series = SERIES, .nseries = 2, .values = v, .bytes = 1};
    rsvg_bar_chart(p->f, &b);
    free(labels);
    free(rows);
    free(v);
    return 0;
}

/* ---- timeline -------------------------------------------------------------------------------- */

static const char *event_class(const coh_trace_event *e)
{
    const char *n = e->name;
    switch (e->kind) {
    case COH_TRACE_COMM: return "comm";
    case COH_TRACE_IDLE: return "idle";
    case COH_TRACE_STEP: return "step";
    case COH_TRACE_COMPUTE: break;
    }
    if ((n[0] == 'F' && n[1] >= '0' && n[1] <= '9') || !strncmp(n, "forward", 7) ||
        !strncmp(n, "final", 5))
        return "forward";
    if ((n[0] == 'B' && n[1] >= '0' && n[1] <= '9') || !strncmp(n, "backward", 8))
        return "backward";
    if (!strncmp(n, "optimizer", 9))
        return "optimizer";
    return "compute";
}

static int by_rank(const void *a, const void *b)
{
    const coh_trace *x = *(const coh_trace *const *)a, *y = *(const coh_trace *const *)b;
    return (x->rank > y->rank) - (x->rank < y->rank);
}

/* The window of the last TIMELINE_STEPS steps: from the earliest start, over the ranks, of their
 * TIMELINE_STEPS-th last step span to the end of their last optimizer step (else of their last
 * step span), so that a validation after the last step is left out. The whole trace without
 * step spans. */
static void window_of(const coh_trace *const *t, size_t n, double *t0, double *t1)
{
    double lo = INFINITY, all_lo = INFINITY, hi = -INFINITY, all_hi = -INFINITY;
    for (size_t r = 0; r < n; r++) {
        int seen = 0;
        double end = -INFINITY;
        for (size_t i = t[r]->nevents; i-- > 0;) {
            const coh_trace_event *e = &t[r]->events[i];
            if (e->kind == COH_TRACE_STEP && ++seen == TIMELINE_STEPS)
                lo = fmin(lo, e->ts);
            if (e->kind == COH_TRACE_STEP && seen == 1)
                end = fmax(end, e->ts + e->dur);
            if (!strcmp(event_class(e), "optimizer") && !isfinite(end))
                end = e->ts + e->dur;
        }
        for (size_t i = 0; i < t[r]->nevents; i++) {
            const coh_trace_event *e = &t[r]->events[i];
            all_lo = fmin(all_lo, e->ts);
            all_hi = fmax(all_hi, e->ts + e->dur);
        }
        hi = fmax(hi, end);
    }
    *t0 = isfinite(lo) ? lo : all_lo;
    *t1 = isfinite(hi) && hi > *t0 ? hi : all_hi;
}

/* F3, B3, F3.1: a pipeline schedule's block */
static int pipeline_block(const char *n)
{
    return (n[0] == 'F' || n[0] == 'B') && n[1] >= '0' && n[1] <= '9';
}

static int timeline(page *p, size_t r)
{
    const coh_report_run *run = &p->runs[r];
    size_t n = run->ntraces;
    if (!n)
        return 0;
    const coh_trace **t = calloc(n, sizeof *t);
    if (!t)
        return -1;
    for (size_t i = 0; i < n; i++)
        t[i] = &run->traces[i];
    qsort(t, n, sizeof *t, by_rank);
    double w0, w1;
    window_of(t, n, &w0, &w1);
    if (!(w1 > w0) || !isfinite(w1 - w0)) {
        free(t);
        return 0;
    }
    /* lanes: for each rank its compute lane and the comm lanes it used */
    enum { LANE_H = 26, LANE_GAP = 6, LEFT_W = 190, RIGHT_W = 20, WIDTH = 1000, TOP_H = 50 };
    int lanes[256][4], nl = 0;
    size_t nr = n < 256 ? n : 256;
    for (size_t k = 0; k < nr; k++)
        for (int tid = 0; tid < 4; tid++) {
            int used = tid == 0;
            for (size_t i = 0; i < t[k]->nevents && !used; i++)
                used = t[k]->events[i].tid == tid;
            lanes[k][tid] = used ? nl++ : -1;
        }
    int h = TOP_H + nl * (LANE_H + LANE_GAP) + 60;
    double scale = (WIDTH - LEFT_W - RIGHT_W) / (w1 - w0);
    char id[48];
    snprintf(id, sizeof id, "timeline-%zu", r);
    FILE *f = p->f;
    fprintf(f, "<figure class=\"chart timeline\" id=\"%s\">\n<svg class=\"timeline\" "
               "viewBox=\"0 0 %d %d\" width=\"%d\" height=\"%d\" role=\"img\" "
               "aria-labelledby=\"%s-title %s-desc\" xmlns=\"http://www.w3.org/2000/svg\">\n"
               "<defs><pattern id=\"idle-hatch\" width=\"6\" height=\"6\" "
               "patternUnits=\"userSpaceOnUse\" patternTransform=\"rotate(45)\">"
               "<rect width=\"6\" height=\"6\" fill=\"#d9d9d9\"/><line x1=\"0\" y1=\"0\" x2=\"0\" "
               "y2=\"6\" stroke=\"#8a8a8a\" stroke-width=\"2\"/></pattern></defs>\n",
            id, WIDTH, h, WIDTH, h, id, id);
    fprintf(f, "<title id=\"%s-title\">Per-rank timeline of the last steps: ", id);
    esc(p, run->name);
    fprintf(f, "</title>\n<desc id=\"%s-desc\">Each rank's compute (forward blue, backward "
               "green, optimizer pink), communication (orange) and waiting (grey hatching: a "
               "pipeline's bubble) over the last %d steps, on the clock the ranks share. "
               "Pipeline blocks are named F or B and the micro-batch.</desc>\n",
            id, TIMELINE_STEPS);
    fprintf(f, "<text class=\"chart-title\" x=\"10\" y=\"20\">Per-rank timeline of the last %d "
               "steps: ", TIMELINE_STEPS);
    esc(p, run->name);
    fprintf(f, "</text>\n");
    static const char *const LEG[][2] = {{"forward", "forward"}, {"backward", "backward"},
                                         {"optimizer", "optimizer"}, {"comm", "communication"},
                                         {"idle", "idle (waiting)"}};
    fprintf(f, "<g class=\"legend\">");
    for (int i = 0; i < 5; i++)
        fprintf(f, "<rect class=\"ev-%s\" x=\"%d\" y=\"30\" width=\"14\" height=\"10\"/>"
                   "<text x=\"%d\" y=\"40\">%s</text>",
                LEG[i][0], LEFT_W + i * 125, LEFT_W + i * 125 + 18, LEG[i][1]);
    fprintf(f, "</g>\n");
    static const char *const TRACK[4] = {"compute", "gradient comm", "parameter comm",
                                         "tensor-parallel comm"};
    for (size_t k = 0; k < nr; k++) {
        for (int tid = 0; tid < 4; tid++) {
            if (lanes[k][tid] < 0)
                continue;
            int y = TOP_H + lanes[k][tid] * (LANE_H + LANE_GAP);
            fprintf(f, "<g class=\"lane\" data-rank=\"%d\" data-track=\"%s\">"
                       "<text class=\"lane-label\" x=\"%d\" y=\"%d\" text-anchor=\"end\">rank %d "
                       "%s</text>", t[k]->rank, TRACK[tid], LEFT_W - 8, y + LANE_H / 2 + 4,
                    t[k]->rank, TRACK[tid]);
            /* step spans first: the background of the blocks */
            for (int pass = 0; pass < 2; pass++)
                for (size_t i = 0; i < t[k]->nevents; i++) {
                    const coh_trace_event *e = &t[k]->events[i];
                    if (e->tid != tid || (e->kind == COH_TRACE_STEP) != (pass == 0) ||
                        e->ts + e->dur < w0 || e->ts > w1)
                        continue;
                    double x0 = LEFT_W + (fmax(e->ts, w0) - w0) * scale,
                           x1 = LEFT_W + (fmin(e->ts + e->dur, w1) - w0) * scale;
                    double wd = fmax(x1 - x0, 0.5);
                    const char *cls = event_class(e);
                    fprintf(f, "<rect class=\"ev ev-%s\" x=\"%.2f\" y=\"%d\" width=\"%.2f\" "
                               "height=\"%d\"><title>", cls, x0, y, wd, LANE_H);
                    esc(p, e->name);
                    fprintf(f, ": %.3f ms</title></rect>", e->dur / 1000);
                    size_t len = strlen(e->name);
                    if (pass == 1 && strcmp(cls, "idle") && wd > 6.5 * (double)len + 4)
                        fprintf(f, "<text class=\"ev-label\" x=\"%.1f\" y=\"%d\" "
                                   "text-anchor=\"middle\">%s</text>", x0 + wd / 2,
                                y + LANE_H / 2 + 4, e->name);
                }
            fprintf(f, "</g>\n");
        }
    }
    /* time axis in ms */
    double span_ms = (w1 - w0) / 1000, step = pow(10, floor(log10(span_ms)));
    if (span_ms / step < 2.5)
        step /= span_ms / step < 1.2 ? 5 : 2;
    int ya = TOP_H + nl * (LANE_H + LANE_GAP);
    fprintf(f, "<g class=\"axis x-axis\"><line x1=\"%d\" x2=\"%d\" y1=\"%d\" y2=\"%d\"/>", LEFT_W,
            WIDTH - RIGHT_W, ya, ya);
    for (int i = 0; i <= 20 && i * step <= span_ms * (1 + 1e-9); i++)
        fprintf(f, "<text class=\"tick\" x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%.4g</text>",
                LEFT_W + i * step * 1000 * scale, ya + 16, i * step);
    fprintf(f, "<text class=\"axis-label\" x=\"%d\" y=\"%d\" text-anchor=\"middle\">time (ms "
               "from the window's start)</text></g>\n</svg>\n",
            (LEFT_W + WIDTH) / 2, ya + 40);
    /* the table: time per kind in the window, and the compute order of the last step */
    fprintf(f, "<div class=\"table-wrap\"><table class=\"data\"><caption>Per-rank timeline: "
               "time in the window (ms) and the order of a pipeline's blocks in the last step"
               "</caption>\n<thead><tr><th scope=\"col\">rank</th><th scope=\"col\">compute"
               "</th><th scope=\"col\">communication</th><th scope=\"col\">idle</th>"
               "<th scope=\"col\">pipeline blocks of the last step, in order</th></tr></thead><tbody>\n");
    for (size_t k = 0; k < nr; k++) {
        double sum[3] = {0, 0, 0}, last_step = -INFINITY;
        for (size_t i = 0; i < t[k]->nevents; i++) {
            const coh_trace_event *e = &t[k]->events[i];
            if (e->kind == COH_TRACE_STEP)
                last_step = fmax(last_step, e->ts);
            if (e->ts + e->dur < w0 || e->ts > w1 || e->kind == COH_TRACE_STEP)
                continue;
            double d = fmin(e->ts + e->dur, w1) - fmax(e->ts, w0);
            sum[e->kind == COH_TRACE_COMPUTE ? 0 : e->kind == COH_TRACE_COMM ? 1 : 2] += d;
        }
        fprintf(f, "<tr><th scope=\"row\">%d</th><td>%.3f</td><td>%.3f</td><td>%.3f</td><td "
                   "style=\"text-align:left\">", t[k]->rank, sum[0] / 1000, sum[1] / 1000,
                sum[2] / 1000);
        int shown = 0;
        for (size_t i = 0; i < t[k]->nevents && shown < 64; i++) {
            const coh_trace_event *e = &t[k]->events[i];
            if (e->kind == COH_TRACE_COMPUTE && e->tid == 0 && e->ts >= last_step &&
                isfinite(last_step) && e->ts < w1 && pipeline_block(e->name)) {
                fprintf(f, "%s", shown++ ? " " : "");
                esc(p, e->name);
            }
        }
        fprintf(f, "%s</td></tr>\n", shown == 64 ? " ..." : shown ? "" : "-");
    }
    fprintf(f, "</tbody></table></div>\n</figure>\n");
    free(t);
    return 0;
}

/* ---- summary, problems ----------------------------------------------------------------------- */

static void strategy_of(const coh_report_run *run, char *s, size_t cap, char *mesh, size_t mcap)
{
    const coh_report_estimate *e = run->estimate;
    const coh_metrics *m = run->metrics;
    int pipeline = m->nranks > 0 && isfinite(m->ranks[0].busy_us),
        tensor = m->nranks > 0 && isfinite(m->ranks[0].tp_comm_us);
    if (e && e->strategy[0]) {
        snprintf(s, cap, "%s%s", e->strategy, e->pp > 1 ? " + pipeline" : "");
        snprintf(mesh, mcap, "dp %d x pp %d x tp %d", e->dp, e->pp, e->tp);
    } else {
        snprintf(s, cap, "%s%s%s",
                 m->nranks == 1 ? "single process" : m->nranks == 0 ? "-" : "",
                 m->nranks > 1 ? (pipeline ? "pipeline" : tensor ? "" : "data parallel") : "",
                 m->nranks > 1 && tensor ? (pipeline ? " + tensor parallel" : "tensor parallel")
                                         : "");
        snprintf(mesh, mcap, "%zu rank%s", m->nranks, m->nranks == 1 ? "" : "s");
    }
}

static void summary(page *p)
{
    FILE *f = p->f;
    fprintf(f, "<h2 id=\"summary-heading\">%s</h2>\n<table class=\"summary\" "
               "id=\"summary\"><caption>%s</caption>\n<thead><tr><th scope=\"col\">run</th>"
               "<th scope=\"col\">strategy</th><th scope=\"col\">mesh</th><th scope=\"col\">"
               "steps</th><th scope=\"col\">tokens/s</th><th scope=\"col\">MFU</th>"
               "<th scope=\"col\">final loss</th><th scope=\"col\">final validation loss</th>"
               "<th scope=\"col\">peak memory (resident, largest rank)</th></tr></thead><tbody>\n",
            p->n > 1 ? "Comparison" : "Summary",
            "tokens/s and MFU: medians over the second half of the steps");
    for (size_t r = 0; r < p->n; r++) {
        const coh_report_run *run = &p->runs[r];
        const coh_metrics *m = run->metrics;
        char s[64], mesh[64], tps[32], peak[32];
        strategy_of(run, s, sizeof s, mesh, sizeof mesh);
        double last_val = NAN, pk = NAN;
        for (size_t i = 0; i < m->nsteps; i++)
            if (isfinite(m->steps[i].val_loss))
                last_val = m->steps[i].val_loss;
        for (size_t k = 0; k < m->nranks; k++)
            if (isfinite(m->ranks[k].peak_rss))
                pk = isfinite(pk) ? fmax(pk, m->ranks[k].peak_rss) : m->ranks[k].peak_rss;
        rsvg_num(median_tail(m, offsetof(coh_metrics_step, tokens_per_s)), tps, sizeof tps);
        rsvg_bytes(pk, peak, sizeof peak);
        double mfu = median_tail(m, offsetof(coh_metrics_step, mfu));
        fprintf(f, "<tr><th scope=\"row\">");
        esc(p, run->name);
        fprintf(f, "</th><td>");
        esc(p, s);
        fprintf(f, "</td><td>%s</td><td>%ld</td><td>%s</td>", mesh,
                m->nsteps ? m->steps[m->nsteps - 1].step : 0L, tps);
        if (isfinite(mfu))
            fprintf(f, "<td>%.1f%%</td>", mfu * 100);
        else
            fprintf(f, "<td>-</td>");
        if (m->nsteps)
            fprintf(f, "<td>%.4f</td>", m->steps[m->nsteps - 1].loss);
        else
            fprintf(f, "<td>-</td>");
        if (isfinite(last_val))
            fprintf(f, "<td>%.4f</td>", last_val);
        else
            fprintf(f, "<td>-</td>");
        fprintf(f, "<td>%s</td></tr>\n", peak);
    }
    fprintf(f, "</tbody></table>\n");
}

static void problems(page *p)
{
    size_t total = 0;
    for (size_t r = 0; r < p->n; r++)
        total += p->runs[r].metrics->nproblems;
    if (!total)
        return;
    FILE *f = p->f;
    fprintf(f, "<section class=\"problems\" id=\"problems\" role=\"alert\">\n<h2>Bad lines "
               "in the metrics (left out; the rest is shown)</h2>\n<ul>\n");
    for (size_t r = 0; r < p->n; r++) {
        const coh_metrics *m = p->runs[r].metrics;
        size_t kept = m->nproblems < COH_METRICS_MAX_PROBLEMS ? m->nproblems
                                                              : COH_METRICS_MAX_PROBLEMS;
        for (size_t i = 0; i < kept; i++) {
            fprintf(f, "<li class=\"problem\"><code>");
            esc(p, p->runs[r].metrics_path ? p->runs[r].metrics_path : p->runs[r].name);
            fprintf(f, "</code> line %ld: ", m->problems[i].line);
            esc(p, m->problems[i].message);
            fprintf(f, "</li>\n");
        }
        if (m->nproblems > kept)
            fprintf(f, "<li>... and %zu more bad lines</li>\n", m->nproblems - kept);
    }
    fprintf(f, "</ul>\n</section>\n");
}

coh_status coh_report_write_html(FILE *out, const char *title, const coh_report_run *runs,
                                 size_t n)
{
    page pg = {.f = out, .runs = runs, .n = n}, *p = &pg;
    int rc = 0;
    fprintf(out, "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
                 "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
                 "<meta name=\"generator\" content=\"cohort %s\">\n<title>", coh_version());
    esc(p, title);
    fprintf(out, "</title>\n<style>\n%s</style>\n</head>\n<body>\n<main>\n<h1>", CSS);
    esc(p, title);
    fprintf(out, "</h1>\n<p class=\"note\">%zu run%s:", n, n == 1 ? "" : "s");
    for (size_t r = 0; r < n; r++) {
        fprintf(out, "%s <strong>", r ? "," : "");
        esc(p, runs[r].name);
        fprintf(out, "</strong> (<code>");
        esc(p, runs[r].metrics_path ? runs[r].metrics_path : "");
        fprintf(out, "</code>, %zu steps, %zu trace%s%s)", runs[r].metrics->nsteps,
                runs[r].ntraces, runs[r].ntraces == 1 ? "" : "s",
                runs[r].estimate ? ", an estimate" : "");
    }
    fprintf(out, ". Written by <code>cohort report</code>; every chart has its data in the "
                 "table below it.</p>\n");
    problems(p);
    summary(p);
    fprintf(out, "<h2>Loss</h2>\n");
    rc |= loss_chart(p);
    fprintf(out, "<h2>Speed</h2>\n");
    rc |= speed_chart(p, 0);
    rc |= speed_chart(p, 1);
    fprintf(out, "<h2>Memory per rank</h2>\n");
    for (size_t r = 0; r < n && !rc; r++)
        rc |= memory_chart(p, r);
    int any_trace = 0;
    for (size_t r = 0; r < n; r++)
        any_trace |= runs[r].ntraces > 0;
    fprintf(out, "<h2>Timeline</h2>\n");
    if (!any_trace)
        fprintf(out, "<p class=\"note\">No traces: train with <code>--trace FILE.json</code> "
                     "to see each rank's compute, communication and waiting here.</p>\n");
    for (size_t r = 0; r < n && !rc; r++)
        rc |= timeline(p, r);
    fprintf(out, "</main>\n</body>\n</html>\n");
    if (rc)
        return coh_errf(COH_ERR_NOMEM, "out of memory writing the report");
    if (fflush(out) || ferror(out))
        return coh_errf(COH_ERR_IO, "cannot write the report");
    return COH_OK;
}
