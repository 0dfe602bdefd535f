/* planner_int.h: internals of the planner shared by the files of src/plan (cost model, step
 * simulator, search). */
#ifndef COHORT_PLANNER_INT_H
#define COHORT_PLANNER_INT_H

#include "cohort/pipeline.h"
#include "cohort/planner.h"

/* The trainer's pipeline split of each shape, remembered over one search (split_memo.c). A key
 * is PLAN_SPLIT_KEY ints naming everything the split depends on (plan_chunk_costs builds it). */
#define PLAN_SPLIT_KEY 13
typedef struct plan_split_memo plan_split_memo;
plan_split_memo *plan_split_memo_new(void); /* NULL when out of memory: nothing is remembered */
void plan_split_memo_free(plan_split_memo *memo);
/* 1 and the split (bounds[0..u], *shards) when key's is remembered; else 0 (counted searched). */
int plan_split_memo_get(plan_split_memo *memo, const int *key, int u, int *bounds, int *shards);
/* Remembers key's split; quietly not when out of memory. */
void plan_split_memo_put(plan_split_memo *memo, const int *key, int u, const int *bounds,
                         int shards);
/* The lookups that missed (the split searched) and that found it. */
void plan_split_memo_counts(const plan_split_memo *memo, long *searched, long *reused);

/* The rates one rank gets in a configuration: a CPU row for its threads (shared when the ranks
 * of a node outnumber its cores), or the GPU roofline. */
typedef struct plan_dev {
    const coh_hw *hw;
    const coh_device_rates *row;
    double share;      /* CPU oversubscription: cores / ranks of the node when below 1 */
    int threads;       /* CPU threads per rank (`cohort train --threads`) */
    int half;          /* 2-byte activations and GEMM operands */
    int saturated;     /* CPU: the ranks' threads fill the cores, so communication (done by
                          the transport's progress thread on those cores) cannot overlap */
    int ranks;         /* CPU: ranks sharing the cores (measured costs run that many at once) */
    plan_split_memo *splits; /* the search's remembered splits, or NULL */
} plan_dev;

/* The engine's measured costs at one rank's shape (engine_costs.c). */
#define PLAN_ENGINE_SAMPLES 8 /* a shape's measurements kept (the first and its rounds) */

typedef struct plan_engine_cost {
    int64_t dim, heads, vocab;
    int micro_batch, seq, tp, threads, half;   /* the shape: the key, with */
    int ranks;                                 /* ranks running at once on the cores */
    int grads_released;                        /* ZeRO-2/3: every gradient page given back
                                                  after each micro-batch's reduction */
    double block_fwd_s, block_bwd_s;           /* one block */
    double emb_fwd_s, emb_bwd_s;               /* the embeddings */
    double head_fwd_s, head_bwd_s;             /* final LayerNorm, LM head and loss */
    double optimizer_s_per_param;              /* gradient norm, AdamW, zeroing */
    double timed[7];  /* the times of the stage calls the parts come from: the median of the
                         measurements below (engine_costs.c) */
    double samples[7][PLAN_ENGINE_SAMPLES]; /* each measurement's times, the first nsamples */
    int nsamples;
    size_t nparams;   /* of the 3-block model timed (the optimizer's cost per parameter) */
    int round;        /* the last round of measuring again that measured it */
} plan_engine_cost;

/* Whether the engine can run this model's shape (GPT-2 blocks: 4h MLP, no GQA). */
int plan_engine_measurable(const coh_model_desc *m);
/* The measured costs at this shape (measured now if new) when d's hardware measures the
 * engine and the model is measurable; *out NULL otherwise. Times include the other ranks
 * running (d->ranks at once) and, with grads_released, ZeRO-2/3's gradient pages given back
 * after each micro-batch. Errors: the measurement's. */
coh_status plan_engine_lookup(const plan_dev *d, const coh_model_desc *m, int micro_batch,
                              int seq, int tp, int grads_released, const plan_engine_cost **out);

/* Rounds of measuring again: after plan_engine_next_round, each shape looked up is measured
 * once more in that round, and each of its times is the median of its measurements (the
 * leading candidates' shapes, measured in turn, so that a slow moment of the machine does not
 * fall on one shape only); plan_engine_stop_rounds ends them. No-ops without measured costs. */
void plan_engine_next_round(const coh_hw *hw);
void plan_engine_stop_rounds(const coh_hw *hw);

/* Seconds per parameter of the measured end of step at d's threads; 0 when none measured. */
double plan_engine_optimizer_s_per_param(const plan_dev *d);

/* One model chunk's cost per microbatch, in seconds (tp all-reduces and ZeRO-3 stalls are in
 * fwd / bwd, and also counted in the comm fields). */
typedef struct plan_chunk {
    int lo, hi;            /* blocks [lo, hi) */
    int head_lo, head_hi;  /* the LM head's units [head_lo, head_hi) of its shards (0, 1: whole) */
    int first, last;       /* carries the embedding / the LM head or some of its shards */
    double fwd, bwd;
    double tp_comm;        /* tp all-reduce time inside fwd + bwd */
    double zero3_comm;     /* ZeRO-3 gathers issued in fwd + bwd (all of them) */
    double zero3_exposed;  /* the part of it that stalls compute (inside fwd + bwd) */
    double flops;          /* executed FLOPs (recompute included) */
    int64_t params;        /* this tp rank's parameters of the chunk */
    /* the chunk's layers as the trainer buckets their gradients (buckets.c), this tp rank's
     * parameters: each block, the layer after the blocks (the final LayerNorm, with the LM
     * head's weights where the chunk keeps a copy), the embeddings (first chunk; wte included
     * without a pipeline), and wte apart (with a pipeline: its own bucket, first chunk or a
     * copy beside the head) */
    double block_params;
    int64_t top_params, embed_params, wte_params;
    double bwd_top, bwd_block; /* backward until the top layer's gradients are done; a block's */
} plan_chunk;

/* The values of stage s's gradient buckets over dp (the first `max` into values), in the order
 * the trainer issues them (buckets.c's plan, as step_sim.c prices them). Returns the count, -1
 * out of memory. */
int plan_stage_buckets(const coh_parallel_config *c, const plan_chunk *chunk, int s,
                       double *values, int max);

/* A CPU's peak for MFU: the best measured GEMM rate of any row, scaled to every core. */
double plan_cpu_peak(const coh_hw *hw);

/* Resolve what a rank of config c gets from hw. COH_ERR_INVALID when hw cannot run c. */
coh_status plan_dev_for(const coh_hw *hw, const coh_parallel_config *c, plan_dev *out);

/* The share of a large GEMM's rate an (M x N) output, `count` times, reaches on a GPU of `sms`
 * SMs: the best of cuBLAS's tiles by tile and wave quantization and the tile's operand reuse
 * (1 when sms is 0). */
double plan_gemm_shape_share(int sms, double M, double N, double count);
/* Seconds of one GEMM (M x K) @ (K x N), `count` times (a batched GEMM: one op). */
double plan_gemm_s(const plan_dev *d, double M, double N, double K, double count);
/* Seconds of an elementwise op moving `bytes` (read + written). */
double plan_elementwise_s(const plan_dev *d, double bytes);

/* Collectives over a group of n ranks placed `stride` apart in rank order (nodes of
 * gpus_per_node consecutive ranks), bytes being each rank's buffer: the cheaper of a flat ring
 * and the hierarchical algorithm (reduce-scatter in the node, across nodes, all-gather in the
 * node). */
double plan_allreduce_s(const coh_hw *hw, int n, int stride, double bytes);
double plan_reduce_scatter_s(const coh_hw *hw, int n, int stride, double bytes);
double plan_allgather_s(const coh_hw *hw, int n, int stride, double bytes);
/* The link between two ranks. */
const coh_link *plan_link(const coh_hw *hw, long rank_a, long rank_b);
/* Ranks a node holds in the planner's view (CPU: all ranks are on this machine). */
int plan_node_size(const coh_hw *hw, const coh_parallel_config *c);

/* Per-chunk costs of one microbatch for every virtual stage (blocks split as the trainer splits
 * them). chunk[] must hold p * v entries. */
coh_status plan_chunk_costs(const coh_model_desc *m, const coh_parallel_config *c,
                            const plan_dev *d, int64_t seq, plan_chunk *chunk);

/* Seconds of the optimizer step over n parameters. */
double plan_optimizer_s(const plan_dev *d, const coh_parallel_config *c, double n);

/* Bytes a value takes in the messages the trainer sends: tp all-reduces, pipeline sends and
 * ZeRO gathers. cohort's trainer moves fp32 whatever the precision (gpt_tp.c, pipe_exec.c,
 * zero.c); a GPU preset prices the published stack it describes (Megatron-LM: the training
 * precision), for cohort has no GPU backend yet. */
double plan_wire_bytes(const plan_dev *d);
/* Bytes a gradient value takes in the dp reduction: fp32 unless --grad-reduce-dtype bf16 (or
 * fp16 mixed precision, a GPU stack's). */
double plan_grad_bytes(const coh_parallel_config *c);
/* The link a pipeline message between stage s and s + 1 (mod pp) crosses, in the trainer's
 * mesh. */
const coh_link *plan_stage_link(const coh_hw *hw, const coh_parallel_config *c, int s);
/* The distance in rank order between two dp replicas (the trainer's mesh: tp). */
int plan_dp_stride(const coh_parallel_config *c);
/* Values one rank sends per pipeline message of a microbatch (pipe_exec.c's message). */
double plan_p2p_values(const coh_model_desc *m, const coh_parallel_config *c, int64_t seq,
                       int head_shards);

/* Where cohort's own trainer runs c on this hardware (a CPU, a GPT-2 shape it runs): *bytes
 * gets its own prediction of stage `stage`'s rank (coh_par_memory_estimate: the buffers it
 * allocates), and 1; else 0 (the estimator's figure stands). chunk (NULL: chosen again) is the
 * split priced, the trainer's (plan_chunk_costs). */
int plan_trainer_memory(const coh_model_desc *m, const coh_parallel_config *c, const coh_hw *hw,
                        const plan_chunk *chunk, int stage, uint64_t *bytes);

/* ---- the step simulator ------------------------------------------------------------------- */

typedef struct plan_event {
    int stage, tid;        /* tid 0 compute, 1 gradient comm, 2 parameter comm */
    char name[40];
    double t0, t1;
} plan_event;

typedef struct plan_step {
    double step_s, compute_s, bubble_s, comm_s, exposed_s;
    plan_event *ev;        /* when asked for: the timeline */
    size_t nev, cap;
} plan_step;

/* Simulate one optimizer step of c with these chunk costs: the schedule's own action lists
 * (coh_pipeline_schedule) run by the trainer's list simulator (pipe_simulate) with sends
 * arriving after the link's cost, then each stage's data-parallel gradient sync as the trainer
 * issues it (buckets during the last microbatch's backward, for every pp), the tied embedding's
 * sum, optimizer and ZeRO gathers.
 * want_events: fill out->ev (the caller frees it). */
coh_status plan_simulate(const coh_model_desc *m, const coh_parallel_config *c, const coh_hw *hw,
                         const plan_dev *d, const plan_chunk *chunk, int64_t seq,
                         int want_events, plan_step *out);

#endif
