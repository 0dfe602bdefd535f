/* plan_int.h: internals of the memory model shared by the files of src/plan. */
#ifndef COHORT_PLAN_INT_H
#define COHORT_PLAN_INT_H

#include "cohort/device.h"
#include "cohort/plan.h"

/* coh_plan_inventory_gpus on a parsed inventory (hw.c prices its GPUs and links too). */
coh_status plan_inventory_scan(const coh_inventory *inv, const char *path,
                               coh_inventory_memory *out);

/* Parameters of one transformer block held by one tensor-parallel rank. */
int64_t plan_layer_params_local(const coh_model_desc *m, int tp);

/* Transformer blocks on pipeline stage `stage` (all model chunks of the stage): layers[stage]
 * where the caller knows the split (the trainer's, as the planner prices it), else the even
 * split (layers NULL: the published estimators' figure). */
int64_t plan_stage_layers(const coh_model_desc *m, const coh_parallel_config *s,
                          const int64_t *layers, int stage);

/* Parameters one rank of pipeline stage `stage` holds (its tp shard), before ZeRO. */
int64_t plan_stage_params(const coh_model_desc *m, const coh_parallel_config *s,
                          const int64_t *layers, int stage);

/* Largest layer held whole by one tp rank (what ZeRO-3 gathers at once). */
int64_t plan_largest_layer_local(const coh_model_desc *m, int tp);

/* Activation bytes of pipeline stage `stage` (all microbatches in flight) and the transient
 * working set of recomputing one layer; *in_flight gets the microbatches held. */
uint64_t plan_stage_activations(const coh_model_desc *m, const coh_parallel_config *s,
                                const int64_t *layers, int stage, int64_t *in_flight,
                                uint64_t *recompute_temp);

/* coh_estimate_stage with the blocks of each stage given (layers[pp], NULL: even). */
coh_status plan_estimate_stage_layers(const coh_model_desc *m, const coh_parallel_config *s,
                                      const int64_t *layers, int stage, coh_device_mem *out);

/* coh_estimate_memory with the blocks of each stage given (layers[pp]): the split the trainer
 * runs, as the planner prices it. */
coh_status plan_estimate_memory_layers(const coh_model_desc *m, const coh_parallel_config *s,
                                       const int64_t *layers, coh_estimate *out);

/* The sequence length and microbatch count the strategy resolves to. */
int64_t plan_seq(const coh_model_desc *m, const coh_parallel_config *s);
int64_t plan_microbatches(const coh_parallel_config *s);

/* a * b, saturating at INT64_MAX so hostile configs cannot overflow. */
int64_t plan_mul(int64_t a, int64_t b);
int64_t plan_add(int64_t a, int64_t b);
int64_t plan_ceil_div(int64_t a, int64_t b);

#endif
