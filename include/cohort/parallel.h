/* parallel.h: training strategies over a device mesh: single, DDP and ZeRO stages 1-3, each the
 * same step loop on the mesh (dp, pp, tp); single device is the mesh (1, 1, 1). */
#ifndef COHORT_PARALLEL_H
#define COHORT_PARALLEL_H

#include <stddef.h>
#include <stdint.h>

#include "cohort/comm.h"
#include "cohort/data.h"
#include "cohort/parallel_config.h"
#include "cohort/status.h"
#include "cohort/train.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- the mesh -------------------------------------------------------------------------------- */

/* World ranks arranged as Megatron-LM orders them, tp fastest, then dp, then pp:
 * rank = (p * dp + d) * tp + t, so a tensor-parallel group is neighbouring ranks (one node) and
 * a pipeline's stages are the farthest apart. Each axis has its own communicator made by
 * coh_comm_split; an axis of size 1 is a one-rank communicator. */
typedef struct coh_mesh {
    int dp, pp, tp;          /* sizes; dp * pp * tp = world size */
    int dp_rank, pp_rank, tp_rank;
    coh_comm *world;         /* not owned */
    coh_comm *dp_comm, *pp_comm, *tp_comm; /* owned */
} coh_mesh;

/* Build the mesh over `world` (borrowed; must outlive the mesh). Collective over world.
 * COH_ERR_INVALID when dp * pp * tp differs from the world size (naming the three sizes). */
coh_status coh_mesh_create(coh_comm *world, int dp, int pp, int tp, coh_mesh **out);

/* The mesh's order as pure arithmetic, so that the trainer, its dry run and the planner place
 * ranks alike: the coordinates of world rank r, and the world rank of coordinates. */
void coh_mesh_coords(long r, int dp, int pp, int tp, int *dp_rank, int *pp_rank, int *tp_rank);
long coh_mesh_rank(int dp, int pp, int tp, int dp_rank, int pp_rank, int tp_rank);
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
    uint64_t gathered;     /* ZeRO-3: other ranks' chunks of parameters present at the peak */
    uint64_t grad_buckets; /* ZeRO-2/3: other ranks' chunks of gradients not yet reduced, there */
    uint64_t comm;         /* peers' shared-arena gradient pieces this rank reduces (DDP, ZeRO-1)
                              and the transport's staging and channel buffers of the groups it
                              communicates over (dp, tp; a stage's links and tied embedding) */
    uint64_t save;         /* with train.saves: what a checkpoint's save holds besides the state
                              (its stream and write buffers, its slices' lists) */
    uint64_t total;        /* peak resident growth over the process before the model existed */
    int activation_slots;  /* pipelines: micro-batches whose activations a stage holds at once */
} coh_par_memory;

struct coh_par_config;
/* Prediction for rank `rank` of a data-parallel group of `dp` ranks training c (the batch
 * shape, strategy and bucket size from c->par). Pure apart from reading the thread
 * count. COH_ERR_INVALID for a bad config, dp < 1 or rank outside 0..dp-1; COH_ERR_UNSUPPORTED
 * for strategy 'dp'. */
coh_status coh_par_memory_estimate(const struct coh_par_config *c, int dp, int rank,
                                   coh_par_memory *out);

/* ---- the parallel trainer -------------------------------------------------------------------- */

typedef struct coh_par_config {
    coh_trainer_config train;  /* model and optimisation; its batch, seq and accum are set from
                                  par (micro_batch, seq, microbatches) by the trainer */
    coh_parallel_config par;   /* the strategy, batch shape and bucket size; strategy dp: par.dp
                                  is the device count of this one process */
    const char *trace_path;    /* Chrome trace events of this rank, NULL = off */
} coh_par_config;

/* The trainer's view of c->par written into c->train: batch = micro_batch, seq = par.seq or the
 * model's context, accum = microbatches or 1, model.tp = par.tp (the model becomes one
 * tensor-parallel shard) and model.sp = par.sequence_parallel with tp > 1. The trainer and the memory prediction call it; callers need not. */
void coh_par_config_apply(coh_par_config *c);

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

/* ---- pipeline stages ------------------------------------------------------------------------ */

#define COH_PIPE_STAGE_MAX_CHUNKS 64

/* What pipeline stage `stage` of c (c->par.pp stages, c->par.virtual_stages chunks each with
 * the interleaved schedule) holds. Blocks are split into contiguous virtual stages (chunk k of
 * stage s is virtual stage k * pp + s); by default the split whose simulated step, the
 * schedule's own action lists run with each chunk's estimated compute, is shortest.
 * Virtual stage 0 (chunk 0 of stage 0) also holds the embeddings, the last one (the last chunk
 * of stage pp - 1) the final LayerNorm, the LM head and, with pp > 1, a copy of the tied token
 * embedding. Those two may hold no block (lo == hi): "embeddings" or "head" only; every other
 * chunk holds at least one.
 * The head may also be split by vocabulary into head_shards > 1 pipeline units after the
 * blocks (coh_pipe_head_shard_row): the chain of blocks 0..L-1 then shards 0..n-1 is cut into
 * the virtual stages, so a chunk may hold blocks, shards, or the last blocks and the first
 * shards; shard 0 runs the final LayerNorm, the last shard the loss, and every stage holding a
 * shard but not the embeddings holds a copy of the tied wte. */
typedef struct coh_pipe_stage {
    int chunks;                            /* model chunks on this stage */
    int lo[COH_PIPE_STAGE_MAX_CHUNKS], hi[COH_PIPE_STAGE_MAX_CHUNKS]; /* blocks lo..hi-1 */
    int first, last;                       /* holds virtual stage 0 (the embeddings), the last
                                              virtual stage (final LayerNorm and head) */
    int nranges;                           /* arena ranges held (parameters, gradients, AdamW) */
    size_t begin[COH_PIPE_STAGE_MAX_CHUNKS + 1], end[COH_PIPE_STAGE_MAX_CHUNKS + 1];
    int tied_copy;                         /* holds the head's copy of wte */
    size_t params;                         /* elements over the ranges */
    int head_shards;                       /* the LM head's shards over the whole pipeline (1:
                                              the head whole, in the last virtual stage) */
    int head_lo[COH_PIPE_STAGE_MAX_CHUNKS], head_hi[COH_PIPE_STAGE_MAX_CHUNKS]; /* each chunk's
                                              head shards head_lo..head_hi-1 (0, 0: none) */
    int head;                              /* some chunk holds a head shard */
} coh_pipe_stage;

/* Pure. With c->par.stage_layers the split is the user's (coh_pipe_parse_layers).
 * COH_ERR_INVALID for a stage outside 0..pp-1, more virtual stages than blocks, or a bad split. */
coh_status coh_par_pipe_stage(const coh_par_config *c, int stage, coh_pipe_stage *out);

/* What one rank of stage `stage` moves in a step, in values (the trainer moves fp32: gpt_tp.c,
 * pipe_exec.c, zero.c), from the trainer's own layout: the dry run prints it and the planner's
 * pricing is checked against it. */
typedef struct coh_par_traffic {
    size_t pipe_send;      /* one pipeline message of a microbatch: the rank's rows (1/tp of
                              them only with sequence parallelism), with head shards the loss
                              statistics (3 a token); 0 without a pipeline */
    size_t tp_allreduce;   /* one tp all-reduce of a block's (B T, C) output; 0 without tp */
    size_t dp_reduce;      /* the stage's gradients reduced over dp in a step; 0 without dp */
    size_t zero_gather;    /* ZeRO: the stage's parameters gathered (per step for stages 1-2,
                              per pass for 3); 0 otherwise */
    size_t embed_allreduce; /* the tied wte summed between the first stage and the head's */
    size_t params;         /* the stage's parameters (its tp shard) */
    int blocks;            /* its transformer blocks */
    int dp_buckets;        /* its gradient buckets over dp, in the order backward issues them */
    size_t dp_bucket[COH_BUCKETS_LISTED]; /* the first ones' values (buckets.c's plan) */
} coh_par_traffic;

/* Pure. COH_ERR_INVALID as coh_par_pipe_stage. */
coh_status coh_par_stage_traffic(const coh_par_config *c, int stage, coh_par_traffic *out);

/* The stage's chunks as --stage-layers spells them, "0-0,2-11", an empty chunk "embeddings" or
 * "head", into buf (cap bytes, NUL-terminated, cut short when it does not fit). Returns buf. */
char *coh_pipe_stage_blocks(const coh_pipe_stage *st, char *buf, size_t cap);

/* What one rank of pipeline stage `stage` holds: the model state of its arena ranges (fp32
 * parameters, gradients, AdamW m and v) and its engine buffers, with one activation slot per
 * micro-batch its schedule keeps in flight (GPipe m, 1F1B p - stage, ...), and the transport's
 * memory of its links and groups (comm). Its total is at
 * least the whole model's fp32 parameters, which the seeded initialisation writes before the
 * stage gives back the pages of the others. Pure apart from reading the thread count.
 * COH_ERR_INVALID as coh_par_pipe_stage. */
coh_status coh_par_memory_estimate_stage(const coh_par_config *c, int stage, coh_par_memory *out);

/* The last step's time on this pipeline stage: computing its forwards and backwards, and
 * waiting for its neighbours (receives, and the last sends to drain): the stage's bubble.
 * COH_ERR_INVALID without a pipeline. */
coh_status coh_par_trainer_pipeline_times(const coh_par_trainer *t, double *busy_s,
                                          double *idle_s);

/* The tied embedding's two copies (first and last stage) are bit-identical; COH_OK without a
 * pipeline. COH_ERR_INTERNAL naming how many elements differ. Collective over the pipeline. */
coh_status coh_par_trainer_check_tied(coh_par_trainer *t);

/* ---- tensor parallelism ---------------------------------------------------------------------- */

/* The tensors every tp rank holds whole (LayerNorms, position embedding, row-parallel biases)
 * are bit-identical across the tp group; COH_OK without tensor parallelism. COH_ERR_INTERNAL
 * naming how many elements differ. Collective over tp. */
coh_status coh_par_trainer_check_replicated(coh_par_trainer *t);

/* Seconds this rank spent in tensor-parallel all-reduces (the model's f and g, the
 * vocabulary-parallel embedding and cross-entropy) during the last step; 0 without tp. */
double coh_par_trainer_tp_comm_seconds(const coh_par_trainer *t);

#ifdef __cplusplus
}
#endif
#endif
