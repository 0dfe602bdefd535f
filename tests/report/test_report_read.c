/* test_report_read.c: the readers and the page of `cohort report` on inputs whose right answers
 * are known: metrics values, bad lines named with their numbers, a resumed run's lines, ranks in
 * order; trace events classified and sorted; the estimate's fields; the page's series count, its
 * escaping, and no script or fetch. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "cohort/report.h"

static const char METRICS[] =
    "{\"step\":1,\"tokens\":512,\"loss\":5.5,\"lr\":0.001,\"tokens_per_s\":1000,\"mfu\":0.5}\n"
    "\n"
    "{\"step\":2,\"tokens\":1024,\"loss\":5.0,\"val_loss\":5.25}\r\n"
    "{\"step\":3,\"loss\":\"high\"}\n"
    "garbage\n"
    "{\"step\":3,\"tokens\":1536,\"loss\":4.5,\"memory\":[{\"rank\":1,\"params_bytes\":10,"
    "\"peak_rss_bytes\":300,\"base_rss_bytes\":100},{\"rank\":0,\"params_bytes\":20,"
    "\"predicted_bytes\":150}]}\n"
    "{\"step\":4,\"loss\":4.0,\"memory\":[{\"rank\":0},{\"rank\":0}]}\n"
    "{\"step\":2,\"tokens\":1024,\"loss\":4.75}\n" /* resumed from step 1 */
    "{\"step\":3,\"tokens\":1536,\"loss\":4.25";        /* truncated */

static void test_metrics(void)
{
    coh_metrics m;
    CHECK_OK(coh_metrics_parse(METRICS, sizeof METRICS - 1, &m));
    CHECK_INT(m.lines, 9);
    /* kept: 1, then the resumed 2 replaces 2 and 3 */
    CHECK_INT(m.nsteps, 2);
    if (m.nsteps == 2) {
        CHECK_INT(m.steps[0].step, 1);
        CHECK_NEAR(m.steps[0].loss, 5.5, 1e-12);
        CHECK_NEAR(m.steps[0].tokens, 512, 1e-12);
        CHECK_NEAR(m.steps[0].mfu, 0.5, 1e-12);
        CHECK(isnan(m.steps[0].val_loss));
        CHECK(isnan(m.steps[0].grad_norm));
        CHECK_INT(m.steps[1].step, 2);
        CHECK_NEAR(m.steps[1].loss, 4.75, 1e-12);
        CHECK(isnan(m.steps[1].val_loss)); /* the replaced line's validation is gone */
    }
    CHECK_INT(m.nproblems, 4);
    if (m.nproblems == 4) {
        CHECK_INT(m.problems[0].line, 4);
        CHECK_STR(m.problems[0].message, "step 3: 'loss' is string, expected a number");
        CHECK_INT(m.problems[1].line, 5);
        CHECK(!strncmp(m.problems[1].message, "not JSON (", 10));
        CHECK_INT(m.problems[2].line, 7);
        CHECK_STR(m.problems[2].message, "'memory' lists rank 0 twice");
        CHECK_INT(m.problems[3].line, 9);
        CHECK(!strncmp(m.problems[3].message, "not JSON (", 10));
    }
    /* memory of line 6, ranks in order */
    CHECK_INT(m.nranks, 2);
    if (m.nranks == 2) {
        CHECK_INT(m.ranks[0].rank, 0);
        CHECK_NEAR(m.ranks[0].params, 20, 0);
        CHECK_NEAR(m.ranks[0].predicted, 150, 0);
        CHECK(isnan(m.ranks[0].peak_rss));
        CHECK_INT(m.ranks[1].rank, 1);
        CHECK_NEAR(m.ranks[1].peak_rss - m.ranks[1].base_rss, 200, 0);
    }
    coh_metrics_release(&m);
    CHECK_INT(m.nsteps, 0);
    CHECK(m.steps == NULL);
}

static void test_metrics_limits(void)
{
    /* more bad lines than are kept: all counted */
    char text[4000] = "";
    for (int i = 0; i < 40; i++)
        strcat(text, "{\"step\":1}\n");
    coh_metrics m;
    CHECK_OK(coh_metrics_parse(text, strlen(text), &m));
    CHECK_INT(m.nproblems, 40);
    CHECK_INT(m.nsteps, 0);
    CHECK_STR(m.problems[COH_METRICS_MAX_PROBLEMS - 1].message, "step 1 has no 'loss'");
    coh_metrics_release(&m);
    CHECK_OK(coh_metrics_parse("", 0, &m));
    CHECK_INT(m.lines, 0);
    coh_metrics_release(&m);
    /* values no run writes are bad lines, named, not drawn: infinity (1e999), negative
     * tokens or tokens/s, an MFU of 1e300 */
    static const char ABSURD[] =
        "{\"step\":1,\"loss\":5.0,\"tokens\":100}\n"
        "{\"step\":2,\"loss\":1e999,\"tokens\":200}\n"
        "{\"step\":3,\"loss\":3.0,\"tokens\":-300}\n"
        "{\"step\":4,\"loss\":4.0,\"tokens\":400,\"tokens_per_s\":-1}\n"
        "{\"step\":5,\"loss\":4.0,\"tokens\":500,\"mfu\":1e300}\n"
        "{\"step\":6,\"loss\":3.5,\"tokens\":600,\"mfu\":0.4}\n";
    CHECK_OK(coh_metrics_parse(ABSURD, sizeof ABSURD - 1, &m));
    CHECK_INT(m.nsteps, 2);
    CHECK_INT(m.nproblems, 4);
    if (m.nproblems == 4) {
        CHECK_INT(m.problems[0].line, 2);
        CHECK_STR(m.problems[0].message, "step 2: 'loss' is inf, expected a finite number of at "
                                         "least 0");
        CHECK_STR(m.problems[1].message, "step 3: 'tokens' is -300, expected a finite number of "
                                         "at least 0");
        CHECK_STR(m.problems[2].message, "step 4: 'tokens_per_s' is -1, expected a finite number "
                                         "of at least 0");
        CHECK_STR(m.problems[3].message, "step 5: 'mfu' is 1e+300, expected a share of the peak "
                                         "from 0 to 10");
    }
    coh_metrics_release(&m);
    CHECK(coh_metrics_read("/nonexistent/metrics.jsonl", &m) == COH_ERR_IO);
    CHECK(strstr(coh_last_error(), "/nonexistent/metrics.jsonl") != NULL);
}

static const char TRACE[] =
    "{\"traceEvents\":["
    "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":0,\"args\":{\"name\":\"compute\"}},"
    "{\"name\":\"B0\",\"cat\":\"compute\",\"ph\":\"X\",\"ts\":30,\"dur\":10,\"pid\":1,\"tid\":0},"
    "{\"name\":\"F0\",\"cat\":\"compute\",\"ph\":\"X\",\"ts\":10,\"dur\":5,\"pid\":1,\"tid\":0},"
    "{\"name\":\"recv gradient\",\"cat\":\"idle\",\"ph\":\"X\",\"ts\":15,\"dur\":15,\"pid\":1,"
    "\"tid\":0},"
    "{\"name\":\"allreduce\",\"cat\":\"comm\",\"ph\":\"X\",\"ts\":41,\"dur\":3,\"pid\":1,\"tid\":1},"
    "{\"name\":\"forward+backward\",\"cat\":\"step\",\"ph\":\"X\",\"ts\":10,\"dur\":30,\"pid\":1,"
    "\"tid\":0}],\"displayTimeUnit\":\"ms\"}";

static void test_trace(void)
{
    coh_trace t;
    CHECK_OK(coh_trace_parse(TRACE, sizeof TRACE - 1, &t));
    CHECK_INT(t.rank, 1);
    CHECK_INT(t.nevents, 5); /* the metadata event left out */
    if (t.nevents == 5) {
        /* by start, the step's span before the block starting with it */
        CHECK_STR(t.events[0].name, "forward+backward");
        CHECK(t.events[0].kind == COH_TRACE_STEP);
        CHECK_STR(t.events[1].name, "F0");
        CHECK(t.events[1].kind == COH_TRACE_COMPUTE);
        CHECK_STR(t.events[4].name, "allreduce");
        for (size_t i = 1; i < t.nevents; i++)
            CHECK(t.events[i].ts >= t.events[i - 1].ts);
        int idle = 0, comm = 0, step = 0;
        for (size_t i = 0; i < t.nevents; i++) {
            idle += t.events[i].kind == COH_TRACE_IDLE;
            comm += t.events[i].kind == COH_TRACE_COMM && t.events[i].tid == 1;
            step += t.events[i].kind == COH_TRACE_STEP;
        }
        CHECK_INT(idle, 1);
        CHECK_INT(comm, 1);
        CHECK_INT(step, 1);
    }
    coh_trace_release(&t);
    static const char *const BAD[] = {"{\"traceEvents\":{}}", "[{\"ph\":\"X\",\"ts\":1}]",
                                      "{\"traceEvents\":[{\"ph\":\"X\",\"ts\":1,\"dur\":-1}]}",
                                      "{\"traceEvents\":[", "3"};
    for (size_t i = 0; i < sizeof BAD / sizeof *BAD; i++) {
        CHECK(coh_trace_parse(BAD[i], strlen(BAD[i]), &t) == COH_ERR_INVALID);
        CHECK(strstr(coh_last_error(), "trace") != NULL);
        CHECK(t.events == NULL);
    }
}

static void test_estimate(void)
{
    static const char E[] =
        "{\"parameters\":10,\"strategy\":{\"name\":\"zero1\",\"dp\":2,\"tp\":1,\"pp\":1},"
        "\"rank\":1,\"per_device\":{\"params_bytes\":40,\"grads_bytes\":40,\"optimizer_bytes\":40,"
        "\"total_bytes\":500}}";
    coh_report_estimate e;
    CHECK_OK(coh_report_estimate_parse(E, sizeof E - 1, &e));
    CHECK_STR(e.strategy, "zero1");
    CHECK_INT(e.dp, 2);
    CHECK_INT(e.pp, 1);
    CHECK_INT(e.rank, 1);
    CHECK_NEAR(e.optim, 40, 0);
    CHECK_NEAR(e.total, 500, 0);
    CHECK(isnan(e.comm));
    CHECK(coh_report_estimate_parse("{}", 2, &e) == COH_ERR_INVALID);
    CHECK(strstr(coh_last_error(), "per_device") != NULL);
}

static size_t count(const char *s, const char *what)
{
    size_t n = 0;
    for (const char *p = s; (p = strstr(p, what)); p += strlen(what))
        n++;
    return n;
}

static void test_page(void)
{
    coh_metrics a, b;
    CHECK_OK(coh_metrics_parse(METRICS, sizeof METRICS - 1, &a));
    static const char B[] = "{\"step\":1,\"tokens\":100,\"loss\":3,\"val_loss\":3.5}\n"
                            "{\"step\":2,\"tokens\":200,\"loss\":2}\n";
    CHECK_OK(coh_metrics_parse(B, sizeof B - 1, &b));
    coh_trace t;
    CHECK_OK(coh_trace_parse(TRACE, sizeof TRACE - 1, &t));
    coh_report_run runs[2] = {
        {.name = "a<script>", .metrics_path = "a.jsonl", .metrics = &a, .traces = &t,
         .ntraces = 1},
        {.name = "b&c", .metrics_path = "b.jsonl", .metrics = &b}};
    char *page = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&page, &len);
    CHECK(f != NULL);
    if (!f)
        return;
    CHECK_OK(coh_report_write_html(f, "title \"x\"", runs, 2));
    fclose(f);
    CHECK(!strncmp(page, "<!DOCTYPE html>", 15));
    CHECK(strstr(page, "</html>\n") != NULL);
    CHECK(count(page, "<script") == 0); /* the run name is escaped */
    CHECK(strstr(page, "a&lt;script&gt;") != NULL);
    CHECK(strstr(page, "b&amp;c") != NULL);
    CHECK(strstr(page, "title &quot;x&quot;") != NULL);
    CHECK(count(page, "http://") == count(page, "xmlns=\"http://www.w3.org/2000/svg\""));
    CHECK(count(page, "https://") == 0);
    /* loss: a and b, b's validation (a's validated line was replaced): 3 series; speed: 2 + 2;
     * memory: a's measured and predicted (b has no memory figures) */
    CHECK_INT(count(page, "<g class=\"series\""), 3 + 2 + 2 + 2);
    CHECK(strstr(page, "<h2 id=\"summary-heading\">Comparison</h2>") != NULL);
    /* a's bad lines named */
    CHECK(strstr(page, "<code>a.jsonl</code> line 4: step 3: &#39;loss&#39; is string") != NULL);
    CHECK_INT(count(page, "<li class=\"problem\">"), 4);
    /* the timeline: F0 and B0 as blocks, the receive as waiting */
    CHECK(strstr(page, "ev ev-forward") != NULL);
    CHECK(strstr(page, "ev ev-backward") != NULL);
    CHECK(strstr(page, "ev ev-idle") != NULL);
    CHECK(strstr(page, "<td style=\"text-align:left\">F0 B0</td>") != NULL);
    free(page);
    coh_trace_release(&t);
    coh_metrics_release(&a);
    coh_metrics_release(&b);
}

int main(void)
{
    RUN(test_metrics);
    RUN(test_metrics_limits);
    RUN(test_trace);
    RUN(test_estimate);
    RUN(test_page);
    return CHECK_REPORT();
}
