/* plan.h: cohort's memory model: exact parameter counts of a decoder-only transformer and the
 * bytes each device holds for a training strategy (dp x tp x pp, ZeRO, recompute, offload),
 * computed from published formulas before anything is allocated. docs/estimate.md gives every
 * formula with its source. */
#ifndef COHORT_PLAN_H
#define COHORT_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "cohort/parallel_config.h"
#include "cohort/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- the model ------------------------------------------------------------------------------ */

typedef enum coh_arch {
    COH_ARCH_GPT2,   /* learned positions, LayerNorm with bias, GELU MLP, biases everywhere */
    COH_ARCH_LLAMA,  /* RMSNorm, SwiGLU MLP (3 matrices), grouped-query attention, rotary */
    COH_ARCH_COUNTS  /* only a parameter count is known (--params): no activations */
} coh_arch;

/* A decoder-only model. Plain data; fill it with one of the constructors below. */
typedef struct coh_model_desc {
    coh_arch arch;
    char name[64];
    int64_t layers;    /* transformer blocks */
    int64_t dim;       /* hidden size h */
    int64_t heads;     /* attention heads a */
    int64_t kv_heads;  /* key/value heads (== heads without GQA) */
    int64_t head_dim;  /* per head; dim / heads unless a config says otherwise */
    int64_t ffn;       /* MLP inner size */
    int64_t vocab;     /* vocabulary v */
    int64_t positions; /* context length (learned position table for GPT-2) */
    int tied;          /* LM head shares the token embedding */
    int attn_bias;     /* Llama family: q/k/v/o projections have biases */
    int mlp_bias;      /* Llama family: gate/up/down projections have biases */
    int64_t count_params;  /* COH_ARCH_COUNTS only */
    int64_t count_largest; /* COH_ARCH_COUNTS only; 0 when unknown */
} coh_model_desc;

/* Built-in GPT-2 sizes: "gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl".
 * Errors: COH_ERR_INVALID naming the unknown preset and the known ones. */
coh_status coh_model_preset(const char *name, coh_model_desc *out);

/* A GPT-2-style model of the given dimensions; ffn 0 means 4 * dim. Validated. */
coh_status coh_model_gpt(int64_t layers, int64_t dim, int64_t heads, int64_t vocab,
                         int64_t positions, int64_t ffn, coh_model_desc *out);

/* Only counts: total parameters and (0 = unknown) the largest layer. */
coh_status coh_model_counts(int64_t params, int64_t largest_layer, coh_model_desc *out);

/* A Hugging Face config.json of a GPT-2 or Llama/Mistral-family model (text or file).
 * Errors: COH_ERR_INVALID for malformed JSON, a missing or invalid key that matters (named), or
 * a feature that changes the parameter count and is not modelled (named); COH_ERR_IO/NOT_FOUND
 * for the file. */
coh_status coh_model_from_hf_json(const char *text, size_t len, coh_model_desc *out);
coh_status coh_model_from_hf_file(const char *path, coh_model_desc *out);

/* Whether `cohort train` trains this model: its engine is GPT-2 with tied embeddings and an
 * MLP of 4 x dim, given by shape. Else 0, with `why` (when not NULL) naming what the model has
 * that the trainer lacks. The one check behind estimate's remedies, `--engine cohort` and the
 * planner's runnable configurations. */
int coh_model_trainable(const coh_model_desc *m, char *why, size_t cap);

/* Check the dimensions agree (positive, heads divide dim, kv_heads divide heads, ...). */
coh_status coh_model_validate(const coh_model_desc *m);

/* Exact parameter counts; tied embeddings counted once. */
typedef struct coh_param_count {
    int64_t total;
    int64_t embedding;      /* token embedding */
    int64_t positions;      /* learned position embedding (GPT-2) */
    int64_t per_layer;      /* one transformer block */
    int64_t final_norm;
    int64_t lm_head;        /* 0 when tied */
    int64_t largest_layer;  /* largest of: token embedding, one block, untied LM head */
    int64_t largest_module; /* largest single module's own parameters (DeepSpeed's "layer") */
} coh_param_count;

coh_status coh_model_count(const coh_model_desc *m, coh_param_count *out);

/* ---- the configuration against the model --------------------------------------------------- */

/* Refuse a configuration inconsistent with the model (or with itself), with a message naming
 * the conflicting numbers: sizes out of range, tp not dividing the heads, pp larger than the
 * layers, interleaving constraints, offload without ZeRO, devices not matching nodes x GPUs.
 * Errors: COH_ERR_INVALID. */
coh_status coh_parallel_config_check(const coh_model_desc *m, const coh_parallel_config *s);

/* ---- the estimate --------------------------------------------------------------------------- */

/* What one device holds. */
typedef struct coh_device_mem {
    uint64_t params_bytes;
    uint64_t grads_bytes;
    uint64_t optimizer_bytes;
    uint64_t activations_bytes;
    uint64_t temp_bytes;    /* ZeRO-3 gathered layer, recompute working set of one layer */
    uint64_t total_bytes;   /* sum of the above */
    uint64_t host_bytes;    /* offloaded state kept in host memory for this device */
    int64_t local_params;   /* parameters this device owns before ZeRO partitioning */
    int64_t layers;         /* transformer blocks on this device */
    int64_t in_flight;      /* microbatches (interleaved: model-chunk microbatches) held */
} coh_device_mem;

typedef struct coh_estimate {
    coh_param_count counts;
    int64_t seq;              /* sequence length used */
    int64_t microbatches;     /* microbatches per step used */
    int activations_known;    /* 0 for COH_ARCH_COUNTS */
    int worst_stage;          /* pipeline stage whose device needs the most memory */
    coh_device_mem per_device; /* that device */
} coh_estimate;

/* Estimate the memory per device. Checks the strategy first (coh_parallel_config_check).
 * Errors: COH_ERR_INVALID (inconsistent model or strategy). */
coh_status coh_estimate_memory(const coh_model_desc *m, const coh_parallel_config *s, coh_estimate *out);

/* The same for one pipeline stage (0 <= stage < pp). */
coh_status coh_estimate_stage(const coh_model_desc *m, const coh_parallel_config *s, int stage,
                              coh_device_mem *out);

/* Activation bytes of one transformer layer for one microbatch (Korthikanti et al. 2022,
 * generalised to GQA and SwiGLU), for the strategy's tp, sequence parallelism, recompute,
 * dropout and precision. */
uint64_t coh_activations_per_layer(const coh_model_desc *m, const coh_parallel_config *s);

/* ---- when it does not fit ------------------------------------------------------------------- */

/* A change to the strategy that makes it fit. */
typedef struct coh_remedy {
    char what[160];       /* "--zero 2", "--tp 4 (dp 2 x tp 4 x pp 1 = 8 devices)", ... */
    coh_parallel_config strategy;
    uint64_t total_bytes; /* per device with that change */
    int runnable;         /* cohort's own trainer runs it today (coh_model_trainable and
                             coh_parallel_config_runnable) */
    char missing[160];    /* else what it lacks, named by option */
} coh_remedy;

/* The changes that make the estimate fit device_bytes, cheapest knob first (ZeRO stage,
 * selective recompute, tp, pp, full recompute, offload), each at its smallest setting that fits;
 * when no single knob is enough, one combination that turns them up in that order. tp stays
 * within a node: at most gpus_per_node (0: s->gpus_per_node when given, else unbounded); pp and
 * ZeRO do the rest. Fills up to cap entries; *count is how many (0: nothing considered fits). */
coh_status coh_plan_remedies(const coh_model_desc *m, const coh_parallel_config *s, uint64_t device_bytes,
                             int gpus_per_node, coh_remedy *out, int cap, int *count);

/* The GPUs of a device inventory file (docs/inventory.md, read by coh_inventory_load as
 * `cohort devices` reads it) as the estimator and the planner price them: a configuration must
 * fit on every device, so at the smallest memory. */
typedef struct coh_inventory_memory {
    int gpus;                    /* GPUs listed */
    int smallest, largest;       /* index in "gpus" of the first GPU with the least / most
                                    memory */
    uint64_t smallest_mib, largest_mib;
    char name[96];               /* the smallest's name */
    int other;                   /* the first GPU named otherwise, or -1 */
    char other_name[96];
} coh_inventory_memory;
/* Errors: as coh_inventory_load (COH_ERR_INVALID naming the file, JSON path and value;
 * COH_ERR_NOT_FOUND / COH_ERR_IO for the file), and COH_ERR_INVALID when it lists no GPUs. */
coh_status coh_plan_inventory_gpus(const char *path, coh_inventory_memory *out);
/* The smallest memory of the GPUs listed in a device inventory file, in bytes. */
coh_status coh_plan_inventory_memory(const char *path, uint64_t *bytes);
/* A warning for the user naming the GPUs when they differ in memory (or, with `rates`, for the
 * planner, which prices the slowest GPU's rates, in name), else "". */
void coh_plan_inventory_note(const coh_inventory_memory *m, const char *path, int rates,
                             char *buf, size_t cap);

/* ---- compatibility views -------------------------------------------------------------------- */

/* DeepSpeed's estimate_zero2_model_states_mem_needs (current formula). */
void coh_ds_zero2_mem(double total_params, int gpus_per_node, int nodes, int cpu_offload,
                      double buffer_factor, uint64_t *cpu_bytes, uint64_t *gpu_bytes);

/* DeepSpeed's estimate_zero3_model_states_mem_needs (current formula). */
void coh_ds_zero3_mem(double total_params, double largest_layer_params, int gpus_per_node,
                      int nodes, int offload_optimizer, int offload_params, int zero_init,
                      double buffer_factor, uint64_t *cpu_bytes, uint64_t *gpu_bytes);

/* Hugging Face accelerate's estimate-memory, for one dtype ("float32", "float16", "int8",
 * "int4"): largest layer, total size, and peak training with Adam (0 when not applicable). */
typedef struct coh_accel_row {
    const char *dtype;
    uint64_t largest_layer_bytes;
    uint64_t total_bytes;
    uint64_t training_bytes;
} coh_accel_row;

void coh_accel_rows(int64_t params, int64_t largest_layer, coh_accel_row rows[4]);

/* Parse a parameter count as users write it: "124439808", "7.5e9", "7.5B", "350M", "2851e6".
 * Errors: COH_ERR_INVALID naming the text. */
coh_status coh_count_parse(const char *text, int64_t *out);

#ifdef __cplusplus
}
#endif
#endif
