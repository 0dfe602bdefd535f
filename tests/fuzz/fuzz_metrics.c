/* fuzz_metrics.c: libFuzzer target for the metrics reader of `cohort report`: any bytes give a
 * parse with its bad lines named (never a crash), steps in increasing order, ranks ascending and
 * unique, problems on lines that exist; and the page is written from what was kept. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "cohort/report.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    coh_metrics m;
    if (coh_metrics_parse((const char *)data, size, &m) != COH_OK)
        return 0; /* out of memory only */
    for (size_t i = 1; i < m.nsteps; i++)
        if (m.steps[i].step <= m.steps[i - 1].step)
            abort();
    for (size_t i = 0; i < m.nsteps; i++)
        if (isnan(m.steps[i].loss))
            abort(); /* a step without a loss is a bad line, not a step */
    for (size_t i = 1; i < m.nranks; i++)
        if (m.ranks[i].rank <= m.ranks[i - 1].rank)
            abort();
    size_t kept = m.nproblems < COH_METRICS_MAX_PROBLEMS ? m.nproblems : COH_METRICS_MAX_PROBLEMS;
    for (size_t i = 0; i < kept; i++)
        if (m.problems[i].line < 1 || m.problems[i].line > m.lines || !m.problems[i].message[0])
            abort();
    if (m.nsteps + m.nproblems > (size_t)m.lines)
        abort();
    static FILE *sink;
    if (!sink)
        sink = fopen("/dev/null", "w");
    if (sink) {
        coh_report_run run = {.name = "fuzz <&>", .metrics_path = "m.jsonl", .metrics = &m};
        if (coh_report_write_html(sink, "fuzz", &run, 1) != COH_OK)
            abort();
    }
    coh_metrics_release(&m);
    return 0;
}
