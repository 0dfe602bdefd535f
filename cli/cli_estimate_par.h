/* cli_estimate_par.h: the bridge from `cohort estimate --engine cohort` to the parallel trainer's
 * own memory prediction, in plain types (plan.h and parallel.h both name a coh_strategy). */
#ifndef COHORT_CLI_ESTIMATE_PAR_H
#define COHORT_CLI_ESTIMATE_PAR_H

#include <stddef.h>
#include <stdint.h>

#include "cohort/status.h"

typedef struct est_par_in {
    int layers, heads, dim, vocab, seq; /* the GPT-2 shape */
    int batch, T, accum;                /* micro batch per rank, sequence length, accumulation */
    int dp, zero;                       /* dp 1 zero 0 = single; zero 0 with dp > 1 = ddp */
    size_t bucket_bytes;                /* 0 = the trainer's default */
} est_par_in;

/* One rank's prediction: model state at the optimizer step and the resident peak growth. */
typedef struct est_par_bytes {
    int rank;
    uint64_t params, grads, optim, engine, gathered, grad_buckets, comm, total;
} est_par_bytes;

/* The rank holding the most (ranks differ only by the last one's shard tails) into *out,
 * its strategy's name into *strategy. COH_ERR_INVALID / COH_ERR_NOMEM with a message. */
coh_status est_par_predict(const est_par_in *in, est_par_bytes *out, const char **strategy);

#endif
