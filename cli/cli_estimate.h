/* cli_estimate.h: the output side of `cohort estimate` (tables, views, JSON), shared between
 * cmd_estimate.c (options) and cli_estimate_out.c (printing). */
#ifndef COHORT_CLI_ESTIMATE_H
#define COHORT_CLI_ESTIMATE_H

#include <stddef.h>
#include <stdint.h>

#include "cohort/plan.h"

typedef enum est_view { VIEW_COHORT, VIEW_ACCELERATE, VIEW_DEEPSPEED } est_view;

/* Everything `cohort estimate` was asked, after parsing. */
typedef struct est_request {
    coh_model_desc model;
    coh_parallel_config par;
    est_view view;
    int json;
    int si;                   /* print 10^n units (GB), as papers do */
    uint64_t device_bytes;    /* 0 = not given */
    const char *device_from;  /* "--device-memory" or the inventory path */
    int engine;               /* --engine cohort: what cohort's engine allocates */
    int threads;              /* --threads for the engine's per-thread buffers; 0 = default */
    int save;                 /* --save: the engine's prediction adds a checkpoint's save */
    int precision_given;      /* else the precision is cohort train's (fp32), said in the output */
} est_request;

/* Print the accelerate or DeepSpeed view of the estimate's counts; returns a CLI exit code. */
int est_print_views(const est_request *r, const coh_estimate *e);

/* Binary units (GiB), or decimal ones (GB) when si. Returns buf. */
const char *est_fmt(uint64_t bytes, int si, char *buf, size_t cap);

/* Print what cohort's engine allocates for the request; returns a CLI exit code. */
int est_print_engine(const est_request *r);

/* Print the estimate (or the requested view); returns a CLI exit code. */
int est_print(const est_request *r);

#endif
