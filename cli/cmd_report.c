/* cmd_report.c: `cohort report`: one self-contained HTML page (SVG charts, tables) from one or
 * several training runs' metrics, with the traces and estimates found beside them. */
#include <getopt.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "cohort/report.h"

const char cmd_report_summary[] = "an HTML page of charts from training runs' metrics and traces";

static const char *const CMD = "report";

#define MAX_RUNS 16
#define MAX_TRACES 64

static void help(void)
{
    printf("usage: cohort report [options] RUN... -o REPORT.html\n\n"
           "Writes one self-contained HTML page (inline SVG and CSS, nothing fetched) showing\n"
           "the runs: loss and validation loss against tokens, tokens/s and MFU over steps,\n"
           "memory per rank (measured against predicted), each run's per-rank timeline of its\n"
           "last steps (compute, communication, waiting), and a table comparing the runs.\n\n"
           "RUN is the metrics file of `cohort train --metrics FILE.jsonl`, or a folder holding\n"
           "metrics.jsonl, optionally named: NAME=RUN (default: the file's stem, or the folder's\n"
           "name for metrics.jsonl). Beside a run's STEM.jsonl the report takes its traces\n"
           "(STEM.trace.json or STEM.trace.rankN.json, else trace.json / trace.rankN.json) and\n"
           "its estimate (STEM.estimate.json, else estimate.json: `cohort estimate --engine\n"
           "cohort --json`). Bad lines of a metrics file are named, left out, and the rest is\n"
           "shown.\n\n"
           "options:\n"
           "  -o, --out FILE      the page to write (required; '-' for standard output)\n"
           "  --title TEXT        the page's title (default 'cohort training report')\n"
           "  --trace FILE        a trace file (repeat, one per rank); only with one RUN,\n"
           "                      instead of those found beside it\n"
           "  --estimate FILE     the estimate; only with one RUN\n"
           "  -h, --help          this help\n");
}

typedef struct report_run {
    char name[128], path[4096], dir[4096], stem[1024];
    coh_metrics metrics;
    coh_trace traces[MAX_TRACES];
    size_t ntraces;
    coh_report_estimate estimate;
    int has_estimate;
} report_run;

typedef struct report_opts {
    const char *out, *title, *traces[MAX_TRACES], *estimate;
    int ntraces;
} report_opts;

static int is_dir(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static int exists(const char *p)
{
    return access(p, R_OK) == 0;
}

/* NAME=PATH or PATH into r->name, r->path, r->dir, r->stem */
static int locate(const char *arg, report_run *r)
{
    const char *eq = strchr(arg, '='), *path = arg;
    if (eq && eq > arg && !memchr(arg, '/', (size_t)(eq - arg))) {
        snprintf(r->name, sizeof r->name, "%.*s", (int)(eq - arg), arg);
        path = eq + 1;
    }
    if (!*path)
        return cli_usage_error(CMD, "invalid run '%s': no path", arg);
    if (is_dir(path)) {
        size_t n = strlen(path);
        while (n > 1 && path[n - 1] == '/') /* runs/ddp/ is runs/ddp */
            n--;
        static const char file[] = "/metrics.jsonl";
        if (n + sizeof file > sizeof r->path)
            return cli_usage_error(CMD, "invalid run '%s': the path is too long", arg);
        snprintf(r->dir, sizeof r->dir, "%.*s", (int)n, path);
        memcpy(r->path, path, n);
        memcpy(r->path + n, file, sizeof file);
        snprintf(r->stem, sizeof r->stem, "metrics");
    } else {
        snprintf(r->path, sizeof r->path, "%s", path);
        const char *slash = strrchr(path, '/');
        snprintf(r->dir, sizeof r->dir, "%.*s", slash ? (int)(slash - path) : 1,
                 slash ? path : ".");
        const char *base = slash ? slash + 1 : path, *dot = strrchr(base, '.');
        snprintf(r->stem, sizeof r->stem, "%.*s", dot && dot > base ? (int)(dot - base)
                                                                    : (int)strlen(base), base);
    }
    if (!r->name[0]) {
        const char *d = strrchr(r->dir, '/');
        snprintf(r->name, sizeof r->name, "%.127s",
                 strcmp(r->stem, "metrics") ? r->stem : d ? d + 1 : r->dir);
    }
    return 0;
}

/* A trace's rank from its name (FILE.rankN.json, as `cohort train --trace` writes one per rank):
 * every rank writes pid 0 in some strategies. */
static void set_rank(coh_trace *t, const char *path)
{
    const char *k = strstr(path, ".rank");
    char *end;
    long n = k ? strtol(k + 5, &end, 10) : -1;
    if (k && end != k + 5 && n >= 0 && n < 1000000)
        t->rank = (int)n;
}

/* Traces named PATTERN (a glob), in rank order; 0 when none matched. */
static int find_traces(report_run *r, const char *pattern)
{
    glob_t g;
    if (glob(pattern, 0, NULL, &g) != 0)
        return 0;
    for (size_t i = 0; i < g.gl_pathc && r->ntraces < MAX_TRACES; i++) {
        coh_trace *t = &r->traces[r->ntraces];
        if (coh_trace_read(g.gl_pathv[i], t) != COH_OK) {
            fprintf(stderr, "%s %s: warning: trace left out: %s\n", cli_progname, CMD,
                    coh_last_error());
            coh_err_clear();
            continue;
        }
        set_rank(t, g.gl_pathv[i]);
        r->ntraces++;
    }
    globfree(&g);
    return r->ntraces > 0;
}

static int load(report_run *r, const report_opts *o, int nruns)
{
    coh_status st = coh_metrics_read(r->path, &r->metrics);
    if (st)
        return cli_fail(CMD, st);
    size_t kept = r->metrics.nproblems < COH_METRICS_MAX_PROBLEMS ? r->metrics.nproblems
                                                                  : COH_METRICS_MAX_PROBLEMS;
    for (size_t i = 0; i < kept; i++)
        fprintf(stderr, "%s %s: warning: '%s' line %ld: %s (left out)\n", cli_progname, CMD,
                r->path, r->metrics.problems[i].line, r->metrics.problems[i].message);
    if (r->metrics.nproblems > kept)
        fprintf(stderr, "%s %s: warning: '%s': %zu more bad lines\n", cli_progname, CMD, r->path,
                r->metrics.nproblems - kept);
    if (!r->metrics.nsteps)
        fprintf(stderr, "%s %s: warning: '%s' has no usable step\n", cli_progname, CMD, r->path);
    char p[8192];
    if (nruns == 1 && o->ntraces) {
        for (int i = 0; i < o->ntraces; i++) {
            if ((st = coh_trace_read(o->traces[i], &r->traces[r->ntraces])))
                return cli_fail(CMD, st);
            set_rank(&r->traces[r->ntraces++], o->traces[i]);
        }
    } else {
        snprintf(p, sizeof p, "%s/%s.trace.json", r->dir, r->stem);
        if (!find_traces(r, p)) {
            snprintf(p, sizeof p, "%s/%s.trace.rank*.json", r->dir, r->stem);
            if (!find_traces(r, p)) {
                snprintf(p, sizeof p, "%s/trace.json", r->dir);
                if (!find_traces(r, p)) {
                    snprintf(p, sizeof p, "%s/trace.rank*.json", r->dir);
                    find_traces(r, p);
                }
            }
        }
    }
    const char *est = nruns == 1 ? o->estimate : NULL;
    if (!est) {
        snprintf(p, sizeof p, "%s/%s.estimate.json", r->dir, r->stem);
        if (!exists(p))
            snprintf(p, sizeof p, "%s/estimate.json", r->dir);
        est = exists(p) ? p : NULL;
    }
    if (est) {
        st = coh_report_estimate_read(est, &r->estimate);
        if (st && est != p)
            return cli_fail(CMD, st);
        if (st) { /* found, not asked for: the page goes on without it */
            fprintf(stderr, "%s %s: warning: estimate left out: %s\n", cli_progname, CMD,
                    coh_last_error());
            coh_err_clear();
        }
        r->has_estimate = st == COH_OK;
    }
    return 0;
}

static int parse(report_opts *o, int argc, char **argv)
{
    static const struct option lo[] = {{"out", 1, 0, 'o'},      {"title", 1, 0, 'T'},
                                       {"trace", 1, 0, 't'},    {"estimate", 1, 0, 'e'},
                                       {"help", 0, 0, 'h'},     {0, 0, 0, 0}};
    memset(o, 0, sizeof *o);
    o->title = "cohort training report";
    optind = 1;
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, "ho:", lo, NULL)) != -1) {
        switch (c) {
        case 'o': o->out = optarg; break;
        case 'T': o->title = optarg; break;
        case 't':
            if (o->ntraces == MAX_TRACES)
                return cli_usage_error(CMD, "too many --trace at '%s': at most %d", optarg,
                                       MAX_TRACES);
            o->traces[o->ntraces++] = optarg;
            break;
        case 'e': o->estimate = optarg; break;
        case 'h': help(); return -1;
        default: return cli_bad_option(CMD, argv);
        }
    }
    int nruns = argc - optind;
    if (!o->out)
        return cli_usage_error(CMD, "missing -o REPORT.html (see 'cohort report --help')");
    if (nruns < 1)
        return cli_usage_error(CMD, "no runs: give one or more metrics files (see "
                               "'cohort report --help')");
    if (nruns > MAX_RUNS)
        return cli_usage_error(CMD, "too many runs (%d): at most %d", nruns, MAX_RUNS);
    if (nruns > 1 && (o->ntraces || o->estimate))
        return cli_usage_error(CMD, "--trace and --estimate need exactly one run (%d given); "
                               "put each run's files beside its metrics instead", nruns);
    return 0;
}

/* Write to OUT.tmp, then rename: a failure leaves no half page behind. */
static int write_page(const report_opts *o, const coh_report_run *runs, size_t n)
{
    if (!strcmp(o->out, "-")) {
        coh_status st = coh_report_write_html(stdout, o->title, runs, n);
        return st ? cli_fail(CMD, st) : CLI_OK;
    }
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", o->out);
    FILE *f = fopen(tmp, "w");
    if (!f)
        return cli_fail(CMD, coh_errf(COH_ERR_IO, "cannot write '%s'", tmp));
    coh_status st = coh_report_write_html(f, o->title, runs, n);
    if (fclose(f) && !st)
        st = coh_errf(COH_ERR_IO, "cannot write '%s'", tmp);
    if (!st && rename(tmp, o->out))
        st = coh_errf(COH_ERR_IO, "cannot write '%s'", o->out);
    if (st) {
        remove(tmp);
        return cli_fail(CMD, st);
    }
    return CLI_OK;
}

int cmd_report(int argc, char **argv)
{
    report_opts o;
    int rc = parse(&o, argc, argv);
    if (rc)
        return rc < 0 ? CLI_OK : rc;
    size_t n = (size_t)(argc - optind);
    report_run *r = calloc(n, sizeof *r);
    coh_report_run *runs = calloc(n, sizeof *runs);
    if (!r || !runs) {
        free(r);
        free(runs);
        return cli_fail(CMD, coh_errf(COH_ERR_NOMEM, "out of memory"));
    }
    int first = optind;
    for (size_t i = 0; i < n && !rc; i++)
        if (!(rc = locate(argv[first + (int)i], &r[i])))
            rc = load(&r[i], &o, (int)n);
    for (size_t i = 0; i < n && !rc; i++)
        runs[i] = (coh_report_run){.name = r[i].name, .metrics_path = r[i].path,
                                   .metrics = &r[i].metrics, .traces = r[i].traces,
                                   .ntraces = r[i].ntraces,
                                   .estimate = r[i].has_estimate ? &r[i].estimate : NULL};
    if (!rc)
        rc = write_page(&o, runs, n);
    for (size_t i = 0; i < n; i++) {
        coh_metrics_release(&r[i].metrics);
        for (size_t k = 0; k < r[i].ntraces; k++)
            coh_trace_release(&r[i].traces[k]);
    }
    free(r);
    free(runs);
    return rc;
}
