/* planner.h: cohort's planner: the predicted step time of a parallel configuration from a cost
 * model of the engine's own ops (a rate table measured on this machine or a GPU preset), the
 * α-β cost of the collectives the trainer issues, and the pipeline schedule's own action lists
 * run in a discrete-event simulator; and a search over every configuration that fits memory
 * (the estimator of cohort/plan.h decides what fits). docs/plan.md gives the model. */
#ifndef COHORT_PLANNER_H
#define COHORT_PLANNER_H

#include <stddef.h>
#include <stdint.h>

#include "cohort/parallel_config.h"
#include "cohort/plan.h"
#include "cohort/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- the hardware --------------------------------------------------------------------------- */

/* A link's cost of moving n bytes one way between two devices: alpha + n / bytes_per_s. For the
 * inter-node link, bytes_per_s is what one device gets (a node's NIC bandwidth over its GPUs
 * when each GPU has its own NIC, as on DGX A100: 8 x 200 Gb/s = 25 GB/s per GPU). */
typedef struct coh_link {
    double alpha_s;
    double bytes_per_s;
} coh_link;

#define COH_RATE_POINTS 16

/* GEMM throughput against a GEMM's size, as points (work = M * N * K multiply-adds, FLOP/s);
 * between points the rate is interpolated in log(work), outside them clamped to the end. */
typedef struct coh_rate_curve {
    int n;
    double work[COH_RATE_POINTS];
    double flops[COH_RATE_POINTS];
} coh_rate_curve;

/* What one device computes and moves, for one way of running it (one thread count on a CPU). */
typedef struct coh_device_rates {
    int threads;              /* CPU: threads per process this row was measured with; GPU: 0 */
    coh_rate_curve gemm;      /* the training precision's matrix products */
    double elementwise_bytes_per_s; /* LayerNorm, GELU, softmax, Adam: bytes read + written */
    double op_overhead_s;     /* fixed cost of one op (a kernel launch, an OpenMP region) */
} coh_device_rates;

#define COH_HW_MAX_RATES 8

/* A machine (or a cluster of identical nodes) as the planner prices it. */
typedef struct coh_hw {
    char name[96];
    char source[256];          /* where the figures come from ("calibration FILE", a preset's
                                  datasheet, ...) */
    int gpu;                   /* 1: a GPU preset; 0: this machine's CPU cores */
    int cores;                 /* CPU: cores a node has for all its ranks (oversubscription
                                  shares them); GPU: 0 */
    coh_device_rates rates[COH_HW_MAX_RATES]; /* GPU: one row; CPU: by thread count, ascending */
    int nrates;
    double peak_flops;         /* for MFU: the device's (CPU: all cores') dense peak at the
                                  training precision */
    coh_precision precision;   /* what the rates were measured or quoted for */
    uint64_t memory_bytes;     /* per device; 0 = unlimited (memory is not checked) */
    int gpus_per_node;         /* devices a node holds */
    int nodes;                 /* nodes available (the search uses nodes x gpus_per_node) */
    coh_link intra, inter;     /* inside a node, between nodes (inter.bytes_per_s 0: none) */
    int threads;               /* CPU: threads each rank runs (`--threads`); 0: cores / ranks */
    double gemm_efficiency;    /* GPU roofline: share of peak_flops a large GEMM reaches */
    int sms;                   /* GPU: streaming multiprocessors (the waves of a GEMM's tiles;
                                  0: no quantization priced) */
    double mem_bytes_per_s;    /* GPU roofline: memory bandwidth a thin GEMM is bound by */
    struct coh_engine_costs *engine; /* CPU: measured costs of cohort's engine (owned; NULL:
                                        priced from the rates) */
    char note[512];            /* a warning for the user about the machine (an inventory whose
                                  GPUs differ: coh_plan_inventory_note), else "" */
} coh_hw;

/* Price each configuration's compute by timing cohort's own engine on this machine at the
 * shapes the configuration gives a rank (a block, the embeddings and the LM head forward and
 * backward, and the optimizer step; each shape measured once, about a second each), as FlexFlow
 * measures its operators, instead of composing it from the rate table. Communication stays
 * modelled from the links. COH_ERR_INVALID for GPU hardware (the engine runs on this CPU). */
coh_status coh_hw_measure_engine(coh_hw *hw);
/* Forget what coh_hw_measure_engine measured (NULL-safe on a hw that measured nothing). */
void coh_hw_free_measurements(coh_hw *hw);

/* GPU presets: "a100-80gb", "a100-40gb", "h100-sxm", "v100-32gb" at bf16 (fp16 for V100), with
 * NVLink inside the node; nodes and the inter-node link are left unset (0). Sources in
 * docs/plan.md. COH_ERR_INVALID naming the unknown name and the known ones. */
coh_status coh_hw_preset(const char *name, coh_hw *out);

/* The preset whose device name matches an inventory's GPU name ("NVIDIA A100-SXM4-80GB"), or
 * COH_ERR_NOT_FOUND. */
coh_status coh_hw_preset_for_gpu(const char *gpu_name, uint64_t memory_bytes, coh_hw *out);

/* An inventory file (docs/inventory.md) for the planner: the rates of its slowest GPU's preset
 * and the least memory listed (a step waits for the slowest device, and a configuration must
 * fit on every one; coh_plan_inventory_note words a warning when the GPUs differ), every GPU
 * needing a preset, devices per node (the number of GPUs listed), and its "links" object:
 *   "links": {"intra_node": {"gbytes_per_s": 300, "latency_us": 3},
 *             "inter_node": {"gbytes_per_s": 25, "latency_us": 5}}
 * `nodes` > 1 needs inter_node. The file is read by coh_inventory_load, as `cohort devices`
 * reads it. Errors: as coh_inventory_load (COH_ERR_INVALID naming the file, JSON path and
 * value; COH_ERR_NOT_FOUND / COH_ERR_IO for the file); COH_ERR_INVALID for no GPUs, a GPU
 * without a preset, or no inter_node link for `nodes` > 1. */
coh_status coh_hw_from_inventory(const char *path, int nodes, coh_hw *out);

/* ---- calibration ---------------------------------------------------------------------------- */

/* A calibration file, written by `cohort bench gemm` (and `--comm` figures from `cohort bench
 * comm`) on the machine it describes:
 *   {"cohort_calibration": 1, "machine": "...", "cores": 2, "memory_bytes": 25769803776,
 *    "rates": [{"threads": 1, "gemm": [[work, flops_per_s], ...],
 *               "elementwise_gbytes_per_s": 9.5, "op_overhead_us": 2.0}, ...],
 *    "link": {"latency_us": 4.0, "gbytes_per_s": 3.1},
 *    "inter_node": {"latency_us": 10, "gbytes_per_s": 0.12}}
 * "link" joins the ranks of one node; the optional "inter_node" (written by `cohort bench link
 * --calibration FILE`, one rank on each of two nodes) is the link to another node like it: with
 * it, hw->inter is set and a plan over several nodes of this machine needs no --link-inter.
 * Parsing is strict: unknown keys, out-of-range numbers, unsorted or repeated points are errors
 * that name the key and value. */
coh_status coh_calibration_parse(const char *text, size_t len, const char *name, coh_hw *out);
coh_status coh_calibration_load(const char *path, coh_hw *out);
/* Write hw as a calibration file (CPU rates only). COH_ERR_IO. */
coh_status coh_calibration_write(const coh_hw *hw, const char *path);
/* Write a GPU's calibration file (`cohort bench gemm --device cuda --out`): the preset the
 * device matched (COH_ERR_INVALID when there is no such preset), and what was measured in place
 * of its constants: the large-GEMM efficiency, the stream bandwidth, the cost of one small op,
 * and the squares they came from (work, FLOP/s), kept for the record. COH_ERR_IO. */
coh_status coh_gpu_calibration_write(const char *path, const char *machine, const char *preset,
                                     double gemm_efficiency, double elementwise_bytes_per_s,
                                     double op_overhead_s, const coh_rate_curve *squares);

/* Measure this machine: sgemm throughput over GEMM sizes, elementwise bandwidth and the cost of
 * one op, for 1 thread and for all cores (max_threads > 0 caps them); the link is estimated
 * from the copy bandwidth. quick: fewer sizes and repetitions (about a second). Changes the
 * calling process's OpenMP / OpenBLAS thread count and restores the default. */
coh_status coh_calibration_measure(int quick, int max_threads, coh_hw *out);

/* The planner's price of one product C (M x N) = A (M x K) B (K x N) on hw's first rate row:
 * half, 2-byte operands (bf16/fp16 on a GPU). What `cohort bench gemm --device` compares its
 * measurements with. */
double coh_plan_gemm_seconds(const coh_hw *hw, int half, double M, double N, double K);

/* ---- one configuration ---------------------------------------------------------------------- */

/* The predicted step of one configuration (one optimizer step, global batch of dp x
 * micro_batch x microbatches sequences). Times in seconds. */
typedef struct coh_plan_result {
    coh_parallel_config config;
    double step_s;             /* predicted wall time of a step */
    double compute_s;          /* the busiest device's compute (forward, backward, recompute,
                                  optimizer) */
    double bubble_s;           /* pipeline idle time of the slowest stage (from the simulator) */
    double comm_s;             /* all communication a device issues (tp, pp, dp) */
    double exposed_comm_s;     /* the part of comm_s not overlapped with compute */
    double tokens_per_s;
    double model_flops;        /* 6 N T + attention, per step, without recompute */
    double mfu;                /* model_flops / (step_s x devices x peak) */
    uint64_t memory_bytes;     /* per device, the estimator's total */
    int fits;                  /* memory_bytes <= the hardware's (always 1 without a limit) */
    coh_estimate estimate;     /* the estimator's answer */
    int threads;               /* CPU: threads per rank (`cohort train --threads`); GPU: 0 */
    int runnable;              /* coh_model_trainable and coh_parallel_config_runnable */
    char missing[160];         /* else what cohort's trainer lacks */
    char reasons[512];         /* one line in the guide's terms */
} coh_plan_result;

/* Price one configuration: estimator first (COH_ERR_INVALID for an inconsistent config), then
 * the simulated step. The config's nodes / gpus_per_node, when given, must agree with hw.
 * Errors: COH_ERR_INVALID naming the value; COH_ERR_NOMEM. */
coh_status coh_plan_config(const coh_model_desc *m, const coh_parallel_config *c,
                           const coh_hw *hw, coh_plan_result *out);

/* The simulated step as Perfetto / Chrome trace events (the format of `cohort train --trace`:
 * {"traceEvents": [...]}, one pid per pipeline stage, tid 0 compute, 1 gradient comm,
 * 2 parameter comm, times in microseconds). Errors: those of coh_plan_config, COH_ERR_IO. */
coh_status coh_plan_trace(const coh_model_desc *m, const coh_parallel_config *c,
                          const coh_hw *hw, const char *path);

/* ---- the search ----------------------------------------------------------------------------- */

/* What the planner prices on one pipeline stage of a configuration (`cohort plan --explain
 * --json`), for checking against the trainer's dry run: the stage's blocks and parameters (the
 * trainer's split), its memory, the bytes of each message, and whether the link priced for
 * each axis crosses nodes (-1: no such axis or peer, 0: inside a node, 1: between nodes). */
typedef struct coh_plan_stage_view {
    int blocks;
    int64_t params;
    uint64_t memory_bytes;
    double pipe_send_bytes, tp_allreduce_bytes, dp_reduce_bytes, zero_gather_bytes,
        embed_allreduce_bytes;
    int next_stage_inter, dp_inter, tp_inter;
    int dp_buckets;                            /* gradient buckets over dp, in issue order */
    double dp_bucket_values[COH_BUCKETS_LISTED]; /* the first ones' values */
} coh_plan_stage_view;

/* out[c->pp]. Errors as coh_plan_config. */
coh_status coh_plan_stage_views(const coh_model_desc *m, const coh_parallel_config *c,
                                const coh_hw *hw, coh_plan_stage_view *out);

typedef struct coh_plan_request {
    int64_t global_batch;      /* sequences per optimizer step */
    int64_t seq;               /* 0: the model's context */
    int devices;               /* all devices to use: nodes x gpus_per_node */
    coh_precision precision;
    int runnable_only;         /* 1: only what cohort's trainer runs today */
    int fixed_tp, fixed_pp;    /* > 0: only this degree (published checks) */
    int fixed_strategy;        /* 1: only `strategy` below */
    coh_strategy strategy;
    int fixed_recompute;       /* 1: only `recompute` below */
    coh_recompute recompute;
    int interleave_divisible;  /* 1: interleaving only where pp x v divides the blocks
                                  (Megatron-LM's rule: a published stack's) */
    int fixed_sequence_parallel; /* 1: only `sequence_parallel` below (a published run's: none
                                  before Korthikanti et al. 2022) */
    int sequence_parallel;
    int64_t max_micro_batch;   /* 0: 64 */
    int64_t fixed_micro_batch; /* > 0: only this micro-batch (a published run's) */
    int dropout;               /* 1: the run keeps dropout (its masks priced in every candidate,
                                  memory and time: a published run's) */
    int grad_sync_after_backward; /* 1: dp gradients reduced after the whole backward in every
                                  candidate (a published stack's: Megatron-LM's local DDP);
                                  ZeRO-2/3 then excluded */
    size_t bucket_bytes;       /* every candidate's gradient bucket; 0: 25 MiB */
    int grad_reduce_bf16;      /* 1: every candidate's dp gradients travel as bf16 */
} coh_plan_request;

typedef struct coh_plan_stats {
    long considered;   /* configurations enumerated */
    long invalid;      /* refused by coh_parallel_config_check */
    long too_big;      /* the estimator says they do not fit */
    long simulated;    /* priced with the simulator */
    long pruned;       /* skipped: their lower bound was above the K-th best */
    long splits_searched; /* pipeline splits chosen by the trainer's split search */
    long splits_reused;   /* pipeline splits found already chosen for the same shape */
} coh_plan_stats;

/* The best `cap` configurations, fastest first (ties broken by less memory, then fewer
 * devices per stage, then the enumeration order: deterministic). *count may be 0 when nothing
 * fits: then COH_ERR_INVALID saying so, with *count 0 and the request's smallest configuration
 * left for the caller's remedies. */
coh_status coh_plan_search(const coh_model_desc *m, const coh_plan_request *req,
                           const coh_hw *hw, coh_plan_result *out, int cap, int *count,
                           coh_plan_stats *stats);

#ifdef __cplusplus
}
#endif
#endif
