/* report_read.c: reads a run's files for `cohort report`: the metrics JSONL (bad lines noted and
 * skipped), per-rank Perfetto traces and the estimator's JSON, with the library's JSON reader. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "cohort/report.h"
#include "util/file.h"
#include "util/json.h"

/* ---- files ----------------------------------------------------------------------------------- */

/* ---- metrics --------------------------------------------------------------------------------- */

static void problem(coh_metrics *m, long line, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

static void problem(coh_metrics *m, long line, const char *fmt, ...)
{
    if (m->nproblems < COH_METRICS_MAX_PROBLEMS) {
        coh_metrics_problem *p = &m->problems[m->nproblems];
        va_list ap;
        va_start(ap, fmt);
        p->line = line;
        vsnprintf(p->message, sizeof p->message, fmt, ap);
        va_end(ap);
    }
    m->nproblems++;
}

/* The number `key` of object o into *out (NAN when absent or null). 0, with *why set, for a
 * value of another type. */
static int number_field(const json_value *o, const char *key, double *out, const char **why)
{
    const json_value *v = json_get(o, key);
    *out = NAN;
    if (!v || v->type == JSON_NULL)
        return 1;
    if (v->type != JSON_NUMBER) {
        *why = json_type_name(v->type);
        return 0;
    }
    *out = v->u.num.value;
    return 1;
}

static int read_ranks(coh_metrics *m, long line, const json_value *mem, coh_metrics_rank **out,
                      size_t *nout)
{
    enum { NKEYS = 10 };
    static const char *const KEYS[NKEYS] = {"params_bytes", "grads_bytes", "optim_bytes",
                                            "peak_rss_bytes", "base_rss_bytes",
                                            "predicted_bytes", "busy_us", "idle_us",
                                            "tp_comm_us", "alloc_peak_bytes"};
    *out = NULL;
    *nout = 0;
    if (mem->type != JSON_ARRAY) {
        problem(m, line, "'memory' is %s, expected an array", json_type_name(mem->type));
        return 0;
    }
    size_t n = mem->u.arr.count;
    coh_metrics_rank *r = calloc(n ? n : 1, sizeof *r);
    if (!r)
        return -1;
    for (size_t i = 0; i < n; i++) {
        const json_value *o = mem->u.arr.items[i], *rk = json_get(o, "rank");
        if (o->type != JSON_OBJECT || !rk || rk->type != JSON_NUMBER || !rk->u.num.is_integer ||
            rk->u.num.integer < 0 || rk->u.num.integer > 1000000) {
            problem(m, line, "'memory' item %zu has no integer 'rank' of 0..1000000", i);
            free(r);
            return 0;
        }
        r[i].rank = (int)rk->u.num.integer;
        double *dst[NKEYS] = {&r[i].params,    &r[i].grads,     &r[i].optim,
                              &r[i].peak_rss,  &r[i].base_rss,  &r[i].predicted,
                              &r[i].busy_us,   &r[i].idle_us,   &r[i].tp_comm_us,
                              &r[i].alloc_peak};
        for (int k = 0; k < NKEYS; k++) {
            const char *why;
            if (!number_field(o, KEYS[k], dst[k], &why)) {
                problem(m, line, "'memory' of rank %d: '%s' is %s, expected a number",
                        r[i].rank, KEYS[k], why);
                free(r);
                return 0;
            }
        }
        for (size_t j = 0; j < i; j++)
            if (r[j].rank == r[i].rank) {
                problem(m, line, "'memory' lists rank %d twice", r[i].rank);
                free(r);
                return 0;
            }
    }
    /* ascending rank (insertion sort: a handful of ranks) */
    for (size_t i = 1; i < n; i++)
        for (size_t j = i; j > 0 && r[j - 1].rank > r[j].rank; j--) {
            coh_metrics_rank t = r[j];
            r[j] = r[j - 1];
            r[j - 1] = t;
        }
    *out = r;
    *nout = n;
    return 1;
}

/* One line. 1 kept, 0 a problem recorded, -1 out of memory. */
static int parse_line(coh_metrics *m, long line, const char *s, size_t len, size_t *cap)
{
    json_doc *doc;
    if (json_parse(s, len, &doc) != COH_OK) {
        problem(m, line, "not JSON (%s)", coh_last_error());
        coh_err_clear();
        return 0;
    }
    const json_value *o = json_root(doc), *step = json_get(o, "step"), *mem;
    int rc = 0;
    const char *why = NULL;
    coh_metrics_step st;
    if (o->type != JSON_OBJECT) {
        problem(m, line, "a JSON %s, expected an object", json_type_name(o->type));
        goto done;
    }
    if (!step || step->type != JSON_NUMBER || !step->u.num.is_integer ||
        step->u.num.integer < 0 || step->u.num.integer > 1000000000000LL) {
        problem(m, line, "no integer 'step' of 0..10^12");
        goto done;
    }
    st.step = (long)step->u.num.integer;
    static const char *const KEYS[8] = {"loss",      "val_loss", "lr",        "tokens",
                                        "tokens_per_s", "mfu",   "elapsed_s", "grad_norm"};
    double *dst[8] = {&st.loss, &st.val_loss, &st.lr, &st.tokens,
                      &st.tokens_per_s, &st.mfu, &st.elapsed_s, &st.grad_norm};
    for (int k = 0; k < 8; k++)
        if (!number_field(o, KEYS[k], dst[k], &why)) {
            problem(m, line, "step %ld: '%s' is %s, expected a number", st.step, KEYS[k], why);
            goto done;
        }
    if (isnan(st.loss)) {
        problem(m, line, "step %ld has no 'loss'", st.step);
        goto done;
    }
    /* values no run writes (a hand edit, a corrupt line: 1e999 reads as infinity): none is
     * negative, and MFU is a share of the peak (up to 10, so that a peak given too low still
     * shows); drawn, they would flatten the charts or fill the tables */
    for (int k = 0; k < 8; k++) {
        double v = *dst[k], most = dst[k] == &st.mfu ? 10.0 : INFINITY;
        if (!isnan(v) && !(isfinite(v) && v >= 0 && v <= most)) {
            problem(m, line, "step %ld: '%s' is %g, expected %s", st.step, KEYS[k], v,
                    most < INFINITY ? "a share of the peak from 0 to 10" : "a finite number of "
                                                                          "at least 0");
            goto done;
        }
    }
    if ((mem = json_get(o, "memory"))) {
        coh_metrics_rank *r;
        size_t nr;
        int got = read_ranks(m, line, mem, &r, &nr);
        if (got <= 0) {
            rc = got;
            goto done;
        }
        free(m->ranks);
        m->ranks = r;
        m->nranks = nr;
    }
    /* a resumed run appends from its checkpoint's step: its lines replace those from there */
    while (m->nsteps && m->steps[m->nsteps - 1].step >= st.step)
        m->nsteps--;
    if (m->nsteps == *cap) {
        size_t nc = *cap ? *cap * 2 : 256;
        coh_metrics_step *ns = realloc(m->steps, nc * sizeof *ns);
        if (!ns) {
            rc = -1;
            goto done;
        }
        m->steps = ns;
        *cap = nc;
    }
    m->steps[m->nsteps++] = st;
    rc = 1;
done:
    json_free(doc);
    return rc;
}

coh_status coh_metrics_parse(const char *text, size_t len, coh_metrics *m)
{
    memset(m, 0, sizeof *m);
    size_t cap = 0;
    const char *p = text, *end = text + len;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);
        m->lines++;
        size_t k = 0;
        while (k < n && (p[k] == ' ' || p[k] == '\t' || p[k] == '\r'))
            k++;
        if (k < n && parse_line(m, m->lines, p, n, &cap) < 0) {
            coh_metrics_release(m);
            return coh_errf(COH_ERR_NOMEM, "out of memory reading metrics");
        }
        p += n + (nl != NULL);
    }
    return COH_OK;
}

coh_status coh_metrics_read(const char *path, coh_metrics *m)
{
    char *text;
    size_t len;
    memset(m, 0, sizeof *m);
    coh_status st = util_read_file(path, 0, &text, &len);
    if (st)
        return st;
    st = coh_metrics_parse(text, len, m);
    free(text);
    return st;
}

void coh_metrics_release(coh_metrics *m)
{
    if (!m)
        return;
    free(m->steps);
    free(m->ranks);
    memset(m, 0, sizeof *m);
}

/* ---- traces ---------------------------------------------------------------------------------- */

static coh_trace_kind kind_of(const char *cat, int tid)
{
    if (!strcmp(cat, "comm") || tid > 0)
        return COH_TRACE_COMM;
    if (!strcmp(cat, "idle"))
        return COH_TRACE_IDLE;
    if (!strcmp(cat, "step"))
        return COH_TRACE_STEP;
    return COH_TRACE_COMPUTE;
}

/* by start; at the same start the longer first (a step's span before what it holds) */
static int by_start(const void *a, const void *b)
{
    const coh_trace_event *x = a, *y = b;
    if (x->ts != y->ts)
        return x->ts < y->ts ? -1 : 1;
    return x->dur > y->dur ? -1 : x->dur < y->dur;
}

coh_status coh_trace_parse(const char *text, size_t len, coh_trace *t)
{
    memset(t, 0, sizeof *t);
    t->rank = -1;
    json_doc *doc;
    coh_status st = json_parse(text, len, &doc);
    if (st)
        return coh_err_prefix(st, "trace");
    const json_value *root = json_root(doc), *evs = root;
    if (root->type == JSON_OBJECT)
        evs = json_get(root, "traceEvents");
    if (!evs || evs->type != JSON_ARRAY) {
        const char *found = json_type_name((evs ? evs : root)->type);
        json_free(doc);
        return coh_errf(COH_ERR_INVALID, "trace: expected {\"traceEvents\": [...]} or an array "
                        "of events, found %s", evs ? found : "no 'traceEvents'");
    }
    size_t n = evs->u.arr.count;
    t->events = calloc(n ? n : 1, sizeof *t->events);
    if (!t->events) {
        json_free(doc);
        return coh_errf(COH_ERR_NOMEM, "out of memory reading a trace");
    }
    for (size_t i = 0; i < n; i++) {
        const json_value *e = evs->u.arr.items[i];
        const json_value *ph = json_get(e, "ph"), *name = json_get(e, "name"),
                         *cat = json_get(e, "cat"), *ts = json_get(e, "ts"),
                         *dur = json_get(e, "dur"), *pid = json_get(e, "pid"),
                         *tid = json_get(e, "tid");
        if (!ph || ph->type != JSON_STRING || strcmp(ph->u.str.chars, "X"))
            continue; /* metadata, instants, counters */
        if (!ts || ts->type != JSON_NUMBER || !dur || dur->type != JSON_NUMBER ||
            !isfinite(ts->u.num.value) || !isfinite(dur->u.num.value) || dur->u.num.value < 0) {
            st = coh_errf(COH_ERR_INVALID, "trace: the event at line %d has no numbers 'ts' and "
                          "'dur' >= 0", e->line);
            break;
        }
        coh_trace_event *out = &t->events[t->nevents++];
        snprintf(out->name, sizeof out->name, "%s",
                 name && name->type == JSON_STRING ? name->u.str.chars : "?");
        out->tid = tid && tid->type == JSON_NUMBER && fabs(tid->u.num.value) < 1e6
                       ? (int)tid->u.num.value : 0;
        out->kind = kind_of(cat && cat->type == JSON_STRING ? cat->u.str.chars : "", out->tid);
        out->ts = ts->u.num.value;
        out->dur = dur->u.num.value;
        if (t->rank < 0 && pid && pid->type == JSON_NUMBER && pid->u.num.value >= 0 &&
            pid->u.num.value < 1e6)
            t->rank = (int)pid->u.num.value;
    }
    json_free(doc);
    if (st) {
        coh_trace_release(t);
        return st;
    }
    qsort(t->events, t->nevents, sizeof *t->events, by_start);
    return COH_OK;
}

coh_status coh_trace_read(const char *path, coh_trace *t)
{
    char *text;
    size_t len;
    memset(t, 0, sizeof *t);
    t->rank = -1;
    coh_status st = util_read_file(path, 0, &text, &len);
    if (st)
        return st;
    st = coh_trace_parse(text, len, t);
    free(text);
    return st ? coh_err_prefix(st, "'%s'", path) : COH_OK;
}

void coh_trace_release(coh_trace *t)
{
    if (!t)
        return;
    free(t->events);
    memset(t, 0, sizeof *t);
    t->rank = -1;
}

/* ---- the estimate ---------------------------------------------------------------------------- */

static double bytes_of(const json_value *o, const char *key)
{
    const json_value *v = json_get(o, key);
    return v && v->type == JSON_NUMBER ? v->u.num.value : NAN;
}

static int int_of(const json_value *o, const char *key)
{
    const json_value *v = json_get(o, key);
    return v && v->type == JSON_NUMBER && v->u.num.is_integer && v->u.num.integer >= 0 &&
                   v->u.num.integer < 1000000
               ? (int)v->u.num.integer
               : 0;
}

coh_status coh_report_estimate_parse(const char *text, size_t len, coh_report_estimate *e)
{
    memset(e, 0, sizeof *e);
    json_doc *doc;
    coh_status st = json_parse(text, len, &doc);
    if (st)
        return coh_err_prefix(st, "estimate");
    const json_value *root = json_root(doc), *pd = json_get(root, "per_device");
    if (!pd || pd->type != JSON_OBJECT) {
        json_free(doc);
        return coh_errf(COH_ERR_INVALID, "estimate: no object 'per_device' (write it with "
                        "'cohort estimate --engine cohort --json')");
    }
    const json_value *s = json_get(root, "strategy"), *name = s ? json_get(s, "name") : NULL;
    if (name && name->type == JSON_STRING)
        snprintf(e->strategy, sizeof e->strategy, "%s", name->u.str.chars);
    if (s) {
        e->dp = int_of(s, "dp");
        e->pp = int_of(s, "pp");
        e->tp = int_of(s, "tp");
    }
    e->rank = int_of(root, "rank");
    e->params = bytes_of(pd, "params_bytes");
    e->grads = bytes_of(pd, "grads_bytes");
    e->optim = bytes_of(pd, "optimizer_bytes");
    e->activations = bytes_of(pd, "activations_bytes");
    e->temp = bytes_of(pd, "temp_bytes");
    e->comm = bytes_of(pd, "comm_bytes");
    e->total = bytes_of(pd, "total_bytes");
    json_free(doc);
    return COH_OK;
}

coh_status coh_report_estimate_read(const char *path, coh_report_estimate *e)
{
    char *text;
    size_t len;
    memset(e, 0, sizeof *e);
    coh_status st = util_read_file(path, 0, &text, &len);
    if (st)
        return st;
    st = coh_report_estimate_parse(text, len, e);
    free(text);
    return st ? coh_err_prefix(st, "'%s'", path) : COH_OK;
}
