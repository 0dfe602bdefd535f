/* parallel_config.h: the one description of a parallel training configuration (mesh, what the
 * data-parallel axis does, batch shape, pipeline schedule, memory knobs), shared by the estimator
 * (plan.h), the trainer (parallel.h) and the planner, with one name table per choice. */
#ifndef COHORT_PARALLEL_CONFIG_H
#define COHORT_PARALLEL_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include "cohort/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What the data-parallel axis does (`--strategy`; `--zero N` names the same thing by stage). */
typedef enum coh_strategy {
    COH_STRATEGY_SINGLE = 0, /* one process, the mesh (1, 1, 1) */
    COH_STRATEGY_DP,         /* one process, one thread per device (cohort/train_dp.h) */
    COH_STRATEGY_DDP,        /* replicas, bucketed gradient all-reduce overlapping backward */
    COH_STRATEGY_ZERO1,      /* + optimizer state sharded over dp */
    COH_STRATEGY_ZERO2,      /* + gradients sharded (reduce-scatter per bucket) */
    COH_STRATEGY_ZERO3,      /* + parameters sharded, gathered per layer just before use */
    COH_STRATEGY_COUNT
} coh_strategy;

typedef enum coh_precision {
    COH_PREC_FP32,
    COH_PREC_BF16_MIXED,
    COH_PREC_FP16_MIXED,
    COH_PREC_COUNT
} coh_precision;

typedef enum coh_recompute {
    COH_RECOMPUTE_NONE,
    COH_RECOMPUTE_SELECTIVE,
    COH_RECOMPUTE_FULL,
    COH_RECOMPUTE_COUNT
} coh_recompute;

/* Pipeline schedules (docs/pipeline.md). */
typedef enum coh_schedule {
    COH_SCHED_1F1B,        /* PipeDream-Flush: warm-up, one forward one backward, drain */
    COH_SCHED_GPIPE,       /* all forwards, then all backwards */
    COH_SCHED_INTERLEAVED, /* Megatron's 1F1B over v model chunks per rank */
    COH_SCHED_NAIVE,       /* one microbatch through all stages at a time */
    COH_SCHED_COUNT
} coh_schedule;

typedef enum coh_offload {
    COH_OFFLOAD_NONE,
    COH_OFFLOAD_OPTIMIZER,        /* optimizer state (and fp32 master/grads) in host memory */
    COH_OFFLOAD_OPTIMIZER_PARAMS, /* ZeRO-3 only: the parameters too */
    COH_OFFLOAD_COUNT
} coh_offload;

/* A parallel training configuration. Plain data: fill it with coh_parallel_config_init, then
 * set what differs. The estimator prices it, the trainer runs it, the planner chooses it. */
typedef struct coh_parallel_config {
    int dp, tp, pp;            /* data, tensor, pipeline parallel degrees */
    coh_strategy strategy;     /* what the dp axis does; its ZeRO stage: coh_strategy_zero_stage */
    int64_t micro_batch;       /* sequences per microbatch on one dp rank, b */
    int64_t seq;               /* sequence length s; 0 = the model's context length */
    int64_t microbatches;      /* microbatches per optimizer step on one dp rank (gradient
                                  accumulation; a pipeline's microbatches); 0 = 1, or pp */
    coh_schedule schedule;
    int virtual_stages;        /* interleaved schedule: model chunks per device, v */
    const char *stage_layers;  /* "0-2,3-7" or "0,1,2-11,head": blocks of each virtual stage
                                  (coh_pipe_parse_layers); NULL = the split whose simulated
                                  step is shortest (borrowed) */
    coh_precision precision;
    coh_recompute recompute;
    int sequence_parallel;
    int dropout;               /* 1: dropout masks are stored (Megatron's GPT) */
    coh_offload offload;
    size_t bucket_bytes;       /* gradient bucket of DDP and ZeRO; 0 = 25 MiB */
    int nodes, gpus_per_node;  /* 0 = not given; when given dp*tp*pp must equal their product */
    int grad_reduce_bf16;      /* 1: DDP/ZeRO gradients travel as bf16 (summed in fp32, rounded
                                  once: half the traffic); 0: fp32 */
    int grad_sync_after_backward; /* 1: DDP / ZeRO-1 gradients are reduced after the whole
                                  backward (Megatron-LM's local DDP, and its default without
                                  --overlap-grad-reduce); 0: each bucket as backward finishes
                                  it (cohort's trainer, PyTorch DDP) */
} coh_parallel_config;

/* What `cohort train` runs without options: one device, no ZeRO, micro batch 1, fp32, no
 * dropout (the engine has none), 1F1B, 25 MiB buckets. */
void coh_parallel_config_init(coh_parallel_config *c);

/* The choices' names as typed on a command line and printed ("1f1b", "bf16-mixed", ...).
 * name(): "unknown" outside the enum. parse(): COH_ERR_INVALID naming the text and the valid
 * names. */
const char *coh_strategy_name(coh_strategy s);
coh_status coh_strategy_parse(const char *text, coh_strategy *out);
const char *coh_precision_name(coh_precision p);
coh_status coh_precision_parse(const char *text, coh_precision *out);
const char *coh_recompute_name(coh_recompute r);
coh_status coh_recompute_parse(const char *text, coh_recompute *out);
const char *coh_schedule_name(coh_schedule s);
coh_status coh_schedule_parse(const char *text, coh_schedule *out);
const char *coh_offload_name(coh_offload o);
coh_status coh_offload_parse(const char *text, coh_offload *out);

/* 1 when the strategy runs one process per rank under `cohort run` (ddp, zero1..3). */
int coh_strategy_is_multiprocess(coh_strategy s);
/* ZeRO stage: 0 for single, dp and ddp. */
int coh_strategy_zero_stage(coh_strategy s);
/* The multi-process strategy of ZeRO stage `stage` (0: ddp); COH_STRATEGY_COUNT outside 0..3. */
coh_strategy coh_strategy_of_zero(int stage);

/* The gradient bucket of DDP and ZeRO in bytes: c->bucket_bytes, 25 MiB when 0. */
size_t coh_parallel_bucket_bytes(const coh_parallel_config *c);
/* How many of a stage's gradient buckets the dry runs list, one by one (coh_par_traffic,
 * coh_plan_stage_view). */
#define COH_BUCKETS_LISTED 64

/* 1 when cohort's own trainer (`cohort train`) runs c as it is; else 0 with `why` (cap bytes,
 * may be NULL) naming the first option it lacks: "--tp 2: tensor parallelism is not in cohort's
 * trainer yet". The trainer refuses with this message; the estimator and planner label their
 * suggestions with it. Pure. */
int coh_parallel_config_runnable(const coh_parallel_config *c, char *why, size_t cap);

#ifdef __cplusplus
}
#endif
#endif
