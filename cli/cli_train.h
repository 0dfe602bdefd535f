/* cli_train.h: option parsing and model setup shared by `cohort train`, `eval` and `generate`. */
#ifndef COHORT_CLI_TRAIN_H
#define COHORT_CLI_TRAIN_H

#include <stdint.h>

#include "cohort/parallel.h"
#include "cohort/train.h"

#define MAX_SHARDS 64

/* Everything `cohort train` was asked to do. */
typedef struct train_opts {
    coh_trainer_config tc;
    const char *preset, *data[MAX_SHARDS], *val[MAX_SHARDS];
    int ndata, nval;
    long layers, heads, dim, vocab, seq;
    long val_every, val_batches, log_every, save_every, stop_at, threads;
    const char *save, *resume, *init_from, *metrics, *tokenizer;
    int shuffle, deterministic, blas_info;
    coh_strategy strategy;     /* --strategy, parsed by coh_strategy_parse */
    size_t bucket_bytes;       /* --bucket-mb */
    const char *trace;         /* --trace FILE.json (per rank: FILE.rankN.json when N > 1) */
    const char *dump_params;   /* --dump-params FILE: final parameters as raw f32 (rank 0) */
    long devices;              /* --devices: dp's devices in this process (0 when not dp) */
} train_opts;

/* Run the training described by o (model config already resolved); returns the exit code. */
int cli_train_run(const train_opts *o);

/* Called first by commands that run the engine: BLAS kernel check (may re-exec) and threads. */
void cli_engine_setup(int threads);

/* Peak resident set size of this process in bytes (since the last cli_rss_reset). */
uint64_t cli_peak_rss(void);
/* Reset the peak resident size to the current one, where the system allows it; returns the
 * current resident size in bytes (0 when unknown). */
uint64_t cli_rss_reset(void);

#endif
