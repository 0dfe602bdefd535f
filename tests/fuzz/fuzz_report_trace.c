/* fuzz_report_trace.c: libFuzzer target for `cohort report`'s trace and estimate readers: any
 * bytes parse or fail cleanly; a parsed trace's events are in start order with finite times and
 * durations >= 0, and a page with it as a run's timeline is written. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "cohort/report.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    coh_trace t;
    if (coh_trace_parse((const char *)data, size, &t) == COH_OK) {
        for (size_t i = 0; i < t.nevents; i++)
            if (!isfinite(t.events[i].ts) || !(t.events[i].dur >= 0) ||
                (i && t.events[i].ts < t.events[i - 1].ts))
                abort();
        static FILE *sink;
        if (!sink)
            sink = fopen("/dev/null", "w");
        coh_metrics m = {0};
        coh_report_run run = {.name = "fuzz", .metrics = &m, .traces = &t, .ntraces = 1};
        if (sink && coh_report_write_html(sink, "fuzz", &run, 1) != COH_OK)
            abort();
        coh_trace_release(&t);
    }
    coh_report_estimate e;
    (void)coh_report_estimate_parse((const char *)data, size, &e);
    return 0;
}
