/* parallel.h: training strategies over a device mesh: single, DDP and ZeRO stages 1-3, each the
 * same step loop on the mesh (dp, pp, tp); single device is the mesh (1, 1, 1). */
#ifndef COHORT_PARALLEL_H
#define COHORT_PARALLEL_H

#include <stddef.h>
#include <stdint.h>

#include "cohort/comm.h"
#include "cohort/data.h"
#include "cohort/status.h"
#include "cohort/train.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- strategies ------------------------------------------------------------------------------ */

typedef enum coh_strategy {
    COH_STRATEGY_SINGLE = 0, /* one process, the mesh (1, 1, 1) */
    COH_STRATEGY_DP,         /* one process, one thread per device (cohort/train_dp.h) */
    COH_STRATEGY_DDP,        /* replicas, bucketed gradient all-reduce overlapping backward */
    COH_STRATEGY_ZERO1,      /* + optimizer state sharded over dp */
    COH_STRATEGY_ZERO2,      /* + gradients sharded (reduce-scatter per bucket) */
    COH_STRATEGY_ZERO3,      /* + parameters sharded, gathered per layer just before use */
    COH_STRATEGY_COUNT
} coh_strategy;

/* The one parser of `--strategy`: "single", "dp", "ddp", "zero1", "zero2", "zero3".
 * COH_ERR_INVALID naming the bad value and the valid ones. */
coh_status coh_strategy_parse(const char *s, coh_strategy *out);
const char *coh_strategy_name(coh_strategy s);
/* 1 when the strategy runs one process per rank under `cohort run` (ddp, zero1..3). */
int coh_strategy_is_multiprocess(coh_strategy s);
/* ZeRO stage: 0 for single, dp and ddp. */
int coh_strategy_zero_stage(coh_strategy s);

/* ---- the mesh -------------------------------------------------------------------------------- */

/* World ranks arranged as (dp, pp, tp), tp fastest: rank = (d * pp + p) * tp + t. Each axis has
 * its own communicator made by coh_comm_split; an axis of size 1 is a one-rank communicator. */
typedef struct coh_mesh {
    int dp, pp, tp;          /* sizes; dp * pp * tp = world size */
    int dp_rank, pp_rank, tp_rank;
    coh_comm *world;         /* not owned */
    coh_comm *dp_comm, *pp_comm, *tp_comm; /* owned */
} coh_mesh;

/* Build the mesh over `world` (borrowed; must outlive the mesh). Collective over world.
 * COH_ERR_INVALID when dp * pp * tp differs from the world size (naming the three sizes). */
coh_status coh_mesh_create(coh_comm *world, int dp, int pp, int tp, coh_mesh **out);
void coh_mesh_destroy(coh_mesh *m); /* NULL-safe */

/* ---- model-state memory ---------------------------------------------------------------------- */

/* Bytes of model state one rank holds: parameters, gradients, AdamW moments (fp32). */
typedef struct coh_model_state_bytes {
    uint64_t params, grads, optim;
} coh_model_state_bytes;

/* The ZeRO paper's per-rank model state for fp32 training of `nparams` parameters over `dp`
 * ranks (4 + 4 + 8 bytes a parameter; stage 1 divides the 8, stage 2 also the gradient 4,
 * stage 3 everything by dp). Pure. */
void coh_zero_expected_bytes(coh_strategy s, size_t nparams, int dp, coh_model_state_bytes *out);

/* DataParallel's model state on device d (strategy dp, fp32): device 0 holds the parameters,
 * gradients and AdamW moments (4 + 4 + 8 bytes a parameter), every other device a replica of
 * the parameters and its own gradients (4 + 4). Pure. */
void coh_dp_expected_bytes(size_t nparams, int d, coh_model_state_bytes *out);

/* What one rank of the parallel trainer holds, predicted from the same bucket plan and shard
 * ranges the trainer uses (coh_par_memory_estimate). Model state is as coh_par_trainer_memory_peak
 * measures it, at the optimizer step; the rest is what adds to the resident peak. */
typedef struct coh_par_memory {
    coh_model_state_bytes state; /* params, grads (+ ZeRO-2/3 accumulator), AdamW moments */
    uint64_t engine;       /* activations, activation-gradient scratch, logits chunk, attention
                              scratch per thread, token buffers */
    uint64_t gathered;     /* ZeRO-3: other ranks' chunks of the two layers present at once */
    uint64_t grad_buckets; /* ZeRO-2/3: other ranks' chunks of gradient buckets not yet reduced */
    uint64_t comm;         /* peers' shared-arena gradient pieces this rank reduces (DDP, ZeRO-1)
                              and the transport's staging buffers */
    uint64_t total;        /* peak resident growth over the process before the model existed */
} coh_par_memory;

struct coh_par_config;
/* Prediction for rank `rank` of a data-parallel group of `dp` ranks training c (batch = micro
 * batch per rank, accum, bucket_bytes 0 = 25 MiB, strategy). Pure apart from reading the thread
 * count. COH_ERR_INVALID for a bad config, dp < 1 or rank outside 0..dp-1; COH_ERR_UNSUPPORTED
 * for strategy 'dp'. */
coh_status coh_par_memory_estimate(const struct coh_par_config *c, int dp, int rank,
                                   coh_par_memory *out);

/* ---- the parallel trainer -------------------------------------------------------------------- */

typedef struct coh_par_config {
    coh_trainer_config train;  /* batch is the per-rank micro-batch */
    coh_strategy strategy;
    size_t bucket_bytes;       /* DDP/ZeRO-2/3 gradient bucket size; 0 = 25 MiB */
    const char *trace_path;    /* Chrome trace events of this rank, NULL = off */
    int devices;               /* dp only: devices (one thread each) of this process; 0 = 1 */
} coh_par_config;

typedef struct coh_par_trainer coh_par_trainer;

/* Model, (sharded) optimizer and hooks for `strategy` on the mesh's dp group. The weights are
 * initialised from the seed, then broadcast from dp rank 0. Collective over the mesh.
 * `dp` runs its `devices` threads inside this trainer (one process: a mesh of one rank; the
 * batch function then fills devices x batch rows; device 0's model is the base).
 * COH_ERR_INVALID for a bad config (dp on more than one rank), COH_ERR_UNSUPPORTED for pp/tp >
 * 1 or a trace with dp; COH_ERR_NOMEM. The caller owns *out. */
coh_status coh_par_trainer_create(const coh_par_config *c, coh_mesh *mesh, coh_par_trainer **out);
void coh_par_trainer_destroy(coh_par_trainer *t); /* NULL-safe; flushes the trace */

/* One optimizer step over the global batch: accum micro-batches of this rank's rows from next()
 * (gradient communication only on the last, like PyTorch's no_sync), clip on the global norm,
 * schedule, AdamW on what this rank owns, parameter all-gather where the stage needs it.
 * out->loss is the mean over all ranks and micro-batches. Collective over the dp group. */
coh_status coh_par_trainer_step(coh_par_trainer *t, coh_batch_fn next, void *ctx,
                                coh_step_stats *out);

/* Mean loss over n batches of this rank, averaged over the dp group (parameters gathered
 * layer by layer under ZeRO-3). Collective. */
coh_status coh_par_trainer_eval(coh_par_trainer *t, coh_batch_fn next, void *ctx, long n,
                                double *loss);

/* The full parameters (coh_gpt_param_count floats) into `out` on every rank (gathered under
 * ZeRO-3). Collective. */
coh_status coh_par_trainer_gather_params(coh_par_trainer *t, float *out);

/* Call after writing full parameters into the model's arena (coh_gpt_load, resume): ZeRO-3
 * then releases what this rank does not own. Not collective (every rank loaded the same). */
void coh_par_trainer_params_loaded(coh_par_trainer *t);

/* Model-state bytes this rank holds now, measured: resident pages (mincore) of the parameter
 * and gradient arenas (ZeRO-2/3 release what they do not own) and of the AdamW moments, whose
 * pages the first update writes (until then they may count nothing). Strategy dp: the sum over
 * its devices, what the process holds. */
void coh_par_trainer_memory(coh_par_trainer *t, coh_model_state_bytes *out);
/* The same, at its largest so far, sampled just before and just after each optimizer update
 * (dp: after it). */
void coh_par_trainer_memory_peak(coh_par_trainer *t, coh_model_state_bytes *out);

/* Devices this rank drives: strategy dp's devices, 1 for every other strategy. */
int coh_par_trainer_devices(const coh_par_trainer *t);
/* What device d holds, now and at its largest so far (sampled with the rank's peak). Strategy
 * dp: device 0 the trained parameters, their gradients and the AdamW moments, devices 1.. a
 * replica and its gradients; other strategies: device 0 is the rank. COH_ERR_INVALID for d
 * outside 0..coh_par_trainer_devices - 1. */
coh_status coh_par_trainer_device_memory(coh_par_trainer *t, int d, coh_model_state_bytes *out);
coh_status coh_par_trainer_device_memory_peak(const coh_par_trainer *t, int d,
                                              coh_model_state_bytes *out);

/* Checkpoint to `path` (weights, HF names) and companions. Single/DDP: rank 0 writes the
 * engine's pair (path, path.state). ZeRO: every rank writes its AdamW shard
 * `path.zero<step>-<rank>-of-<dp>` (m, v and the arena ranges they cover), rank 0 the gathered
 * weights, the index `path.zero<step>.index` ((rank, begin, end) rows) and last `path.state`
 * naming the index; every other shard set of `path` (the previous one, or one a job killed
 * while removing it left behind) is then removed. Collective over dp. */
coh_status coh_par_trainer_save(coh_par_trainer *t, const char *path, const char *tokenizer,
                                const coh_loader_pos *data, int threads);

/* Restore weights, AdamW moments and step from either kind of checkpoint, written by any dp
 * size and stage: each rank reads only the shards overlapping what it owns. *data receives the
 * loader position, *threads the thread count of the run that saved (0 unknown). Errors as
 * coh_trainer_resume, plus COH_ERR_INVALID for an index or shard that does not cover this
 * rank's parameters. Every rank calls it (reads only; not collective). */
coh_status coh_par_trainer_resume(coh_par_trainer *t, const char *path, coh_loader_pos *data,
                                  int *threads);

/* The underlying trainer (model, optimizer, step counter) for checkpoints of stage 0. */
coh_trainer *coh_par_trainer_base(coh_par_trainer *t);
const coh_mesh *coh_par_trainer_mesh(const coh_par_trainer *t);

#ifdef __cplusplus
}
#endif
#endif
