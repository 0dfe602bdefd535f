/* train.h: the GPT-2 model and training engine: config, flat arenas, forward/backward, AdamW. */
#ifndef COHORT_TRAIN_H
#define COHORT_TRAIN_H

#include <stddef.h>
#include <stdint.h>

#include "cohort/comm.h"
#include "cohort/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- configuration ------------------------------------------------------------------------ */

/* A GPT-2 shaped model. `seq` is the longest context (rows of the position embedding). */
typedef struct coh_gpt_config {
    int layers; /* L */
    int heads;  /* NH; dim must be a multiple of heads */
    int dim;    /* C */
    int vocab;  /* V */
    int seq;    /* maxT */
    int tp;     /* tensor-parallel shards the arenas are split into (Megatron); 0 or 1: the
                   whole model. With tp > 1 every arena function below (parameter count, layer
                   ranges, tensor shapes) describes one shard: its heads, its MLP columns and
                   rows, its slice of the vocabulary (padded to a multiple of tp), and the
                   replicated LayerNorms, position embedding and row-parallel biases. */
    int sp;     /* sequence parallelism (Korthikanti et al. 2022), with tp > 1: the LayerNorms'
                   and the residual stream's activations are split by rows of (B*T) over the tp
                   ranks, all-gathered before each column-parallel matrix and reduce-scattered
                   after each row-parallel one. Changes the activations, not the arenas. */
} coh_gpt_config;

/* Fill `out` with a named preset: "gpt2" (124M), "gpt2-medium", "gpt2-large", "gpt2-xl".
 * COH_ERR_INVALID naming the valid presets when the name is unknown. */
coh_status coh_gpt_preset(const char *name, coh_gpt_config *out);

/* COH_ERR_INVALID with a message naming the bad field unless every field is positive, dim is a
 * multiple of heads, tp (when > 1) divides heads, and the parameter count fits in memory
 * addressing. */
coh_status coh_gpt_config_check(const coh_gpt_config *c);

/* Number of parameters (wpe included, the tied LM head counted once); of one shard when
 * c->tp > 1. */
size_t coh_gpt_param_count(const coh_gpt_config *c);

/* ---- memory estimator (pure: no allocation) ------------------------------------------------ */

/* Bytes each buffer of the engine allocates for a model trained with micro-batch B x T. */
typedef struct coh_train_memory {
    size_t params;      /* parameter arena, f32 */
    size_t grads;       /* gradient arena, f32 */
    size_t adam_m;      /* AdamW first moment, f32 */
    size_t adam_v;      /* AdamW second moment, f32 */
    size_t activations; /* saved forward activations for backward */
    size_t act_grads;   /* reusable gradient scratch for one layer */
    size_t logits;      /* one row-chunk of the fused LM head (not B*T*V) */
    size_t attention;   /* per-thread (T, T) score scratch during attention, per thread */
    size_t total;       /* sum of the above, attention counted once per thread */
} coh_train_memory;

/* Exactly what coh_gpt_create (params, grads, activations, act_grads, logits) and
 * coh_adamw_create (adam_m, adam_v) allocate for this config and batch, plus the attention
 * scratch each thread holds while attention runs (total uses coh_get_threads()). Pure apart
 * from reading the thread count. COH_ERR_INVALID for a bad config, B < 1, or T outside 1..seq. */
coh_status coh_train_memory_estimate(const coh_gpt_config *c, int B, int T, coh_train_memory *out);

/* Bytes coh_gpt_set_bf16_mixed adds to a model of this config and batch: the bf16 copies of its
 * products' operands (0 for a bad config). */
size_t coh_train_memory_bf16(const coh_gpt_config *c, int B, int T);
/* Bytes of one block's saved activations that a bf16-mixed model never touches, so never holds:
 * it keeps the four that only feed products (ln_1, the attention output, ln_2, the GELU output)
 * as bf16 in the first half of their fp32 places. 0 with sequence parallelism (fp32 kept there)
 * or a bad config. */
size_t coh_train_memory_bf16_acts_saved(const coh_gpt_config *c, int B, int T);

/* ---- parameter tensors (views into the flat arena) ----------------------------------------- */

/* One named tensor of the arena. Linear weights are stored [in, out] like Hugging Face's Conv1D,
 * so the names and shapes equal GPT2LMHeadModel's and a checkpoint is a plain copy. */
typedef struct coh_tensor_info {
    char name[64];  /* "transformer.h.3.attn.c_attn.weight" */
    int ndim;       /* 1 or 2 */
    size_t shape[2];
    size_t offset;  /* in floats from the arena start */
    size_t numel;
    int layer;      /* block index, -1 for embeddings and the final LayerNorm */
    int decay;      /* 1 when AdamW applies weight decay (matrices and embeddings) */
} coh_tensor_info;

/* Number of tensors: 2 embeddings + 12 per layer + 2 final LayerNorm. */
int coh_gpt_tensor_count(const coh_gpt_config *c);

/* Tensor `i` (0 <= i < count) in arena order: wte, wpe, then each block's ln_1.weight, ln_1.bias,
 * attn.c_attn.weight, attn.c_attn.bias, attn.c_proj.weight, attn.c_proj.bias, ln_2.weight,
 * ln_2.bias, mlp.c_fc.weight, mlp.c_fc.bias, mlp.c_proj.weight, mlp.c_proj.bias, then
 * transformer.ln_f.weight and .bias. COH_ERR_INVALID for i out of range. */
coh_status coh_gpt_tensor(const coh_gpt_config *c, int i, coh_tensor_info *out);

/* Arena range [begin, end) of block `layer` (layer -1: embeddings, layer L: final LayerNorm).
 * A pipeline stage or a DDP bucket is such a contiguous range. */
void coh_gpt_layer_range(const coh_gpt_config *c, int layer, size_t *begin, size_t *end);

/* ---- tensor-parallel shards ------------------------------------------------------------------ */

/* The vocabulary rows each shard holds: ceil(V / tp). The last shards' rows past V are padding:
 * zero, never trained, never saved, never sampled. */
int coh_gpt_vocab_per_shard(const coh_gpt_config *c);

/* Where tensor i of shard `tp_rank` (of c->tp) lies in the full tensor. The shard is `rows`
 * rows of `nseg` segments of `seg` elements each; local row r, segment s, element j is full
 * element (row0 + r, col0[s] + j) of a full tensor with `full_cols` columns (vectors are one
 * row). Column-parallel tensors (attn.c_attn: 3 segments, one per q, k, v; mlp.c_fc) take
 * columns, row-parallel ones (attn.c_proj.weight, mlp.c_proj.weight, wte by vocabulary) rows;
 * the rest is replicated (whole on every shard). `rows` excludes the vocabulary's padding. */
typedef struct coh_tensor_shard {
    size_t rows, row0;
    int nseg;
    size_t seg, col0[3];
    size_t full_cols;
    int replicated;   /* every shard holds the whole tensor (identical on all of them) */
} coh_tensor_shard;

/* COH_ERR_INVALID for i or tp_rank out of range. Without tensor parallelism every tensor is
 * one replicated segment. */
coh_status coh_gpt_tensor_shard(const coh_gpt_config *c, int i, int tp_rank,
                                coh_tensor_shard *out);

/* Copy shard elements between the shard's tensor (local, the arena's layout) and the full
 * tensor (full, row-major with full_cols columns): gather writes local into its place in full,
 * scatter reads it back. */
void coh_tensor_shard_gather(const coh_tensor_shard *s, const float *local, float *full);
void coh_tensor_shard_scatter(const coh_tensor_shard *s, const float *full, float *local);

/* The whole arena of shard tp_rank of c (c->tp shards) into its places in the whole-model arena
 * `full` (of c with tp 1), the replicated tensors only by shard 0 (the padding never): buffers
 * zeroed, filled by every shard and summed over the shards hold the whole model exactly. Scatter
 * reads the shard's part of a whole-model arena back, replicated tensors included. */
void coh_gpt_arena_gather(const coh_gpt_config *c, int tp_rank, const float *local, float *full);
void coh_gpt_arena_scatter(const coh_gpt_config *c, int tp_rank, const float *full, float *local);

/* ---- the model ------------------------------------------------------------------------------ */

typedef struct coh_gpt coh_gpt;

/* Called by backward when the gradients of block `layer` (and for layer -1 the embeddings, for
 * layer L the final LayerNorm) are complete. Lets DDP/ZeRO start communication per layer. */
typedef void (*coh_grad_ready_fn)(void *ctx, int layer, size_t begin, size_t end);

/* Allocate a model for micro-batches of at most B x T tokens. Weights are zero until
 * coh_gpt_init_weights or a copy into coh_gpt_params. COH_ERR_INVALID for a bad config or
 * batch, COH_ERR_NOMEM. The caller owns *out (coh_gpt_destroy). */
coh_status coh_gpt_create(const coh_gpt_config *c, int B, int T, coh_gpt **out);
void coh_gpt_destroy(coh_gpt *g); /* NULL-safe */

const coh_gpt_config *coh_gpt_get_config(const coh_gpt *g);

/* GPT-2 initialisation from `seed` (same seed, same weights, on any thread count): N(0, 0.02)
 * for matrices and embeddings, residual projections (attn.c_proj, mlp.c_proj) N(0,
 * 0.02/sqrt(2L)), biases 0, LayerNorm weights 1. A tensor-parallel shard draws every full
 * tensor and keeps its part, so its weights are exactly the whole model's. */
void coh_gpt_init_weights(coh_gpt *g, uint64_t seed);

/* The tensor-parallel group of a shard model (c->tp > 1): `tp` (borrowed; its size must be
 * c->tp, its rank is the shard) carries the model's all-reduces: after each row-parallel matrix
 * in forward and before each column-parallel one in backward (2 + 2 per block, Megatron's f and
 * g), the vocabulary-parallel embedding's, and the parallel cross-entropy's (no rank builds the
 * full logits). Call before coh_gpt_init_weights. COH_ERR_INVALID for a size mismatch. With
 * tp <= 1 the same calls are made and return at once. */
coh_status coh_gpt_set_tp(coh_gpt *g, coh_comm *tp);
/* Seconds this model has spent in its tensor-parallel collectives since creation. */
double coh_gpt_tp_comm_seconds(const coh_gpt *g);
/* Called around each tensor-parallel collective (times from coh_now_s), for traces. */
typedef void (*coh_comm_span_fn)(void *ctx, const char *name, double t0, double t1);
void coh_gpt_set_comm_span(coh_gpt *g, coh_comm_span_fn fn, void *ctx);

/* The flat arenas (count floats each), in coh_gpt_tensor order. Owned by the model. */
float *coh_gpt_params(coh_gpt *g, size_t *count);
float *coh_gpt_grads(coh_gpt *g, size_t *count);

void coh_gpt_set_grad_hook(coh_gpt *g, coh_grad_ready_fn fn, void *ctx);

/* Use `buf` (count floats of coh_gpt_grads, e.g. the transport's shared arena, where collectives
 * need no copy-in) as the gradient arena from now on; the current gradients are copied into it.
 * The caller keeps ownership and keeps it alive until coh_gpt_destroy. */
void coh_gpt_set_grad_arena(coh_gpt *g, float *buf);

/* What coh_gpt_step is about to do with block `layer`'s parameters (layer -1: embeddings,
 * layer L: final LayerNorm), so ZeRO-3 can gather them just before use and free them after. */
typedef enum coh_param_event {
    COH_PARAM_NEED_FORWARD = 0,  /* about to be read by the forward pass */
    COH_PARAM_NEED_BACKWARD = 1, /* about to be read by the backward pass */
    COH_PARAM_DONE = 2           /* not read again until the next NEED */
} coh_param_event;

/* Called with the arena range [begin, end) of `layer`. Per step the NEED order is: -1, 0..L-1,
 * L, -1 (LM head), then with gradients L-1..0; each NEED is followed by a DONE of the same layer
 * (L stays needed through the final LayerNorm's backward). Without a hook the arena is assumed
 * whole (single device, DDP, ZeRO-1/2). */
typedef void (*coh_param_hook_fn)(void *ctx, int layer, coh_param_event ev, size_t begin,
                                  size_t end);
void coh_gpt_set_param_hook(coh_gpt *g, coh_param_hook_fn fn, void *ctx);

/* Forward pass over tokens (B, T) (ids in 0..V-1) and targets (B, T). Writes the mean
 * cross-entropy loss. With `grad_scale` > 0 it also computes gradients of grad_scale * loss and
 * ADDS them to the gradient arena (call coh_gpt_zero_grad first; accumulation across
 * micro-batches is repeated calls with grad_scale = 1/steps). grad_scale = 0: evaluation only.
 * COH_ERR_INVALID for B, T beyond the sizes given at create or a token id out of range. */
coh_status coh_gpt_step(coh_gpt *g, const int32_t *tokens, const int32_t *targets, int B, int T,
                        float grad_scale, float *loss);

/* ---- pipeline stages: a range of layers, one micro-batch slot each ---- */

/* Give the model `slots` sets of saved activations, one per micro-batch a pipeline stage keeps
 * in flight, and make it able to run layer ranges (coh_gpt_stage_*). Only the layers a stage
 * runs are written, so other layers' activations (and parameters, gradients) never become
 * resident. Call once, before the first stage call. COH_ERR_INVALID for slots outside 1..4096
 * or a second call; COH_ERR_NOMEM. */
coh_status coh_gpt_set_slots(coh_gpt *g, int slots);

/* A pipeline stage's model: as coh_gpt_create, but with no activations until
 * coh_gpt_set_stage_slots sizes them for the layers the stage runs (so the whole model's are
 * never allocated). No step runs before that. */
coh_status coh_gpt_create_stage(const coh_gpt_config *c, int B, int T, coh_gpt **out);

/* `slots` sets of saved activations for a stage running `chunks` chunks of blocks
 * lo[k]..hi[k]-1 (lo == hi: none), the embeddings with `embeddings`, (part of) the head with
 * `head`: each slot keeps what those save and nothing else (a chunk's input in the place of
 * block lo - 1's output; only block outputs with recomputation on, which then stays on). Call
 * once, after coh_gpt_set_recompute, on a model from coh_gpt_create_stage; a range the slots
 * were not sized for is refused by the stage calls. COH_ERR_INVALID, COH_ERR_NOMEM. */
coh_status coh_gpt_set_stage_slots(coh_gpt *g, int slots, int chunks, const int *lo,
                                   const int *hi, int embeddings, int head);

/* Full activation recomputation (on: full != 0): the forward keeps only each block's output
 * (the next block's input) and the backward rebuilds a block's activations from its input just
 * before its gradients, in one scratch shared by all blocks. The same ops on the same inputs:
 * gradients are bit-identical to a run that keeps everything. COH_ERR_NOMEM. */
coh_status coh_gpt_set_recompute(coh_gpt *g, int full);

/* bf16-mixed precision (on != 0) or fp32 (0, the default): every matrix product (the blocks'
 * linear layers and the LM head) rounds its operands to bf16 and accumulates and outputs fp32;
 * the parameters (the fp32 master weights), gradients, LayerNorm, attention softmax, loss and
 * the optimizer stay fp32. Turning it on allocates the bf16 operand buffers
 * (coh_train_memory_bf16). COH_ERR_UNSUPPORTED when bf16 cannot run here (coh_bf16_support),
 * COH_ERR_NOMEM. */
coh_status coh_gpt_set_bf16_mixed(coh_gpt *g, int on);

/* Forward of blocks lo..hi-1 for the micro-batch in `slot`. The first stage (lo == 0) reads
 * tokens (B, T) and runs the embeddings; a later one reads x_in (B, T, C), the previous stage's
 * output. A stage before the last writes its output to x_out (B, T, C); the last (hi == L) runs
 * the final LayerNorm and the fused head against targets, writes the mean loss, and with
 * grad_scale > 0 keeps dL/dlnf for the backward and ADDS the head's part of the wte gradient.
 * Hooks fire as in coh_gpt_step for the layers run. COH_ERR_INVALID for a bad range, slot,
 * batch, id, or a missing buffer. */
coh_status coh_gpt_stage_forward(coh_gpt *g, int slot, int lo, int hi, const int32_t *tokens,
                                 const float *x_in, const int32_t *targets, int B, int T,
                                 float grad_scale, float *x_out, float *loss);

/* Backward of the same slot and range, after its forward with grad_scale > 0. A stage before
 * the last reads dout (B, T, C), the gradient of its output (already scaled); the last starts
 * from its loss. Gradients are ADDED to the arena and each finished layer is reported to the
 * hook; a stage after the first writes the gradient of its input to dx_in (B, T, C). */
coh_status coh_gpt_stage_backward(coh_gpt *g, int slot, int lo, int hi, const float *dout, int B,
                                  int T, float *dx_in);

/* What a model chunk holds besides its blocks (coh_gpt_chunk_forward's `ends`). */
enum { COH_GPT_EMBEDDINGS = 1, COH_GPT_HEAD = 2 };

/* coh_gpt_stage_forward and _backward with the ends named: `ends` holds COH_GPT_EMBEDDINGS
 * (needs lo == 0: run the embeddings on tokens instead of reading x_in) and COH_GPT_HEAD (needs
 * hi == L: the final LayerNorm and head instead of x_out), so a pipeline chunk may start at
 * block 0 yet read its input, end at block L yet send its output, or hold no block at all:
 * lo == hi with the embeddings alone (its output is the embedding's) or the head alone (its
 * input is the last block's output). A chunk holds a block or an end. coh_gpt_stage_forward is
 * this with ends (lo == 0 ? EMBEDDINGS : 0) | (hi == L ? HEAD : 0) and lo < hi. */
coh_status coh_gpt_chunk_forward(coh_gpt *g, int slot, int lo, int hi, int ends,
                                 const int32_t *tokens, const float *x_in, const int32_t *targets,
                                 int B, int T, float grad_scale, float *x_out, float *loss);
coh_status coh_gpt_chunk_backward(coh_gpt *g, int slot, int lo, int hi, int ends,
                                  const float *dout, int B, int T, float *dx_in);

/* The tied wte's two gradients accumulated apart over a step: the head's part into a buffer of
 * its own (this shard's wte rows x dim floats, zeroed), the embedding's in the gradient arena,
 * as a pipeline accumulates them on its last and first stage. The caller zeroes the buffer with
 * the gradients and adds it into wte's gradient after the step's last backward: then one device
 * sums them in the pipeline's order and reproduces a pipeline run bit for bit. Once;
 * COH_ERR_INVALID for a second call, COH_ERR_NOMEM. */
coh_status coh_gpt_keep_head_grad_apart(coh_gpt *g);
/* That buffer and its float count in *n (NULL-able); NULL and 0 when not kept apart. */
float *coh_gpt_head_grad(coh_gpt *g, size_t *n);

/* Split the LM head by vocabulary into `shards` pipeline units (2..16, shard k holding rows
 * coh_pipe_head_shard_row(V, k, shards) .. (V, k + 1, shards) of the tied wte), after
 * coh_gpt_set_slots, once; not with tensor parallelism. held[k] (shards flags) names the shards
 * this rank runs: those before the last keep their logits per slot for the backward
 * (B * T floats per vocabulary row) unless keep_logits is 0 (recomputed then). */
coh_status coh_gpt_set_head_shards(coh_gpt *g, int shards, const int *held, int keep_logits);

/* coh_gpt_chunk_forward and _backward for a chunk holding head shards head_lo..head_hi-1 (of
 * coh_gpt_set_head_shards's; none when equal; with the head whole, 0..1 is COH_GPT_HEAD) after
 * blocks lo..hi-1 (hi == L when it holds shards; only a chunk starting at shard 0 holds blocks).
 * A chunk starting past shard 0 reads h, the final LayerNorm's output, and the softmax's running
 * statistics (B*T*C then 3*B*T floats) from x_in; one ending before the last shard writes them
 * to x_out; the last computes the loss. Backward, a chunk ending before the last shard reads
 * dL/dh and the final statistics from dout, and one starting past shard 0 writes them to dx_in
 * (the same layout). Messages are coh_gpt_chunk_message floats. */
coh_status coh_gpt_shards_forward(coh_gpt *g, int slot, int lo, int hi, int ends, int head_lo,
                                  int head_hi, const int32_t *tokens, const float *x_in,
                                  const int32_t *targets, int B, int T, float grad_scale,
                                  float *x_out, float *loss);
coh_status coh_gpt_shards_backward(coh_gpt *g, int slot, int lo, int hi, int ends, int head_lo,
                                   int head_hi, const float *dout, int B, int T, float *dx_in);
/* Floats of a message between two chunks of a micro-batch of B x T: this rank's rows of the
 * activation, and with head shards 3 statistics per row. */
size_t coh_gpt_chunk_message(const coh_gpt *g, int B, int T);

/* Logits (V floats) of the next token after tokens[0..T-1] (one sequence, T <= seq). */
coh_status coh_gpt_next_logits(coh_gpt *g, const int32_t *tokens, int T, float *logits);

void coh_gpt_zero_grad(coh_gpt *g);

/* Training FLOPs per token (6 * matmul params + 12 * L * T * C for attention), for MFU. */
double coh_gpt_flops_per_token(const coh_gpt_config *c, int T);

/* ---- optimizer and schedule ------------------------------------------------------------------ */

typedef struct coh_adamw_params {
    float lr, beta1, beta2, eps, weight_decay;
} coh_adamw_params;

/* AdamW state (m, v) over a flat range of `count` floats, with a decay mask per element from the
 * tensor table (decoupled weight decay on matrices and embeddings only, like GPT-2 recipes). */
typedef struct coh_adamw coh_adamw;

coh_status coh_adamw_create(const coh_gpt_config *c, coh_adamw **out);

/* AdamW state for only the arena ranges [begin[i], end[i]) (ZeRO: this rank's shard). m and v
 * hold the ranges' elements back to back (coh_adamw_m's count is their total); updates still
 * take the full-size arenas and touch only these ranges. Ranges must be sorted and disjoint.
 * COH_ERR_INVALID for unsorted or out-of-arena ranges, COH_ERR_NOMEM. */
coh_status coh_adamw_create_ranges(const coh_gpt_config *c, const size_t *begin,
                                   const size_t *end, int nranges, coh_adamw **out);
void coh_adamw_destroy(coh_adamw *o); /* NULL-safe */

/* One update (t is the 1-based step number for bias correction). Deterministic; threads split
 * the arena into fixed slices. */
void coh_adamw_update(coh_adamw *o, float *params, const float *grads, const coh_adamw_params *p,
                      long t);

/* The moments, for checkpoints (count floats each). */
float *coh_adamw_m(coh_adamw *o, size_t *count);
float *coh_adamw_v(coh_adamw *o, size_t *count);

/* Global L2 norm of grads (summed in double, fixed order); if above max_norm > 0, scales grads
 * down to max_norm. Returns the norm before clipping. */
double coh_clip_grad_norm(float *grads, size_t count, double max_norm);

/* Learning rate at 0-based `step`: linear warmup from lr/warmup to lr over `warmup` steps, then
 * cosine decay to lr * min_frac at `total` steps. */
float coh_lr_schedule(long step, long warmup, long total, float lr, float min_frac);

/* ---- the training loop (single device = the mesh (1, 1, 1)) ---------------------------------- */

typedef struct coh_trainer_config {
    coh_gpt_config model;
    int batch, seq;          /* micro-batch B x T */
    int accum;               /* micro-batches per optimizer step (gradient accumulation) */
    long steps;              /* total optimizer steps (for the schedule) */
    long warmup;             /* warmup steps */
    float lr, min_lr_frac;   /* peak learning rate; final = lr * min_lr_frac */
    float beta1, beta2, eps, weight_decay;
    float grad_clip;         /* global-norm clip; 0 = off */
    uint64_t seed;           /* weight init */
    int save_bf16;           /* checkpoints write the weights in bf16 (an export for inference,
                                not resumable); 0: fp32, the master weights */
    int saves;               /* checkpoints are written: the memory prediction adds a save's
                                buffers (its stream buffer and slice lists) */
    int tied_grad_apart;     /* pp 1: sum the tied wte's head and embedding gradients in a
                                pipeline's order (coh_gpt_keep_head_grad_apart), one wte more;
                                one data-parallel replica only */
    int grad_accum_apart;    /* one rank: each micro-batch's gradient (its forward's head part
                                and its backward) summed from zero in a buffer of its own, then
                                added to the step's, as 2 data-parallel ranks' all-reduce adds
                                theirs; one gradient arena more */
} coh_trainer_config;

/* Defaults: accum 1, warmup 0, lr 3e-4, min_lr_frac 0.1, betas 0.9/0.95, eps 1e-8, wd 0.1,
 * clip 1.0, seed 1337 (model, batch, seq, steps left zero). */
void coh_trainer_config_defaults(coh_trainer_config *c);

/* Fills B x T inputs and targets. */
typedef coh_status (*coh_batch_fn)(void *ctx, int32_t *inputs, int32_t *targets);

typedef struct coh_step_stats {
    long step;         /* optimizer steps done after this one */
    float loss;        /* mean over the micro-batches */
    float lr;
    double grad_norm;  /* before clipping */
} coh_step_stats;

typedef struct coh_trainer coh_trainer;

/* Model (initialised from seed) + AdamW + batch buffers. COH_ERR_INVALID naming a bad field. */
coh_status coh_trainer_create(const coh_trainer_config *c, coh_trainer **out);

/* A trainer over a model and optimizer the caller made (the parallel strategies pass a sharded
 * optimizer); takes ownership of both, even on error. Weights are not re-initialised. */
coh_status coh_trainer_create_from(const coh_trainer_config *c, coh_gpt *model, coh_adamw *opt,
                                   coh_trainer **out);
void coh_trainer_destroy(coh_trainer *t); /* NULL-safe */

/* One optimizer step: accum micro-batches from next(), clip, schedule, AdamW. */
coh_status coh_trainer_step(coh_trainer *t, coh_batch_fn next, void *ctx, coh_step_stats *out);

/* Mean loss over n batches from next() (no gradients). */
coh_status coh_trainer_eval(coh_trainer *t, coh_batch_fn next, void *ctx, long n, double *loss);

coh_gpt *coh_trainer_model(coh_trainer *t);
coh_adamw *coh_trainer_optimizer(coh_trainer *t);
long coh_trainer_get_step(const coh_trainer *t);
const coh_trainer_config *coh_trainer_get_config(const coh_trainer *t);
void coh_trainer_set_step(coh_trainer *t, long step); /* after restoring a checkpoint */

/* ---- BLAS and threads ------------------------------------------------------------------------ */

/* Name of the sgemm kernel OpenBLAS uses ("SkylakeX", "Haswell", "Prescott"...). */
const char *coh_blas_kernel(void);

/* Set what the engine's libraries read only at load, by re-executing this program once (call
 * first thing in a command, before any thread or MPI starts): OPENBLAS_CORETYPE when OpenBLAS
 * picked a kernel weaker than this CPU supports (not with COHORT_BLAS_KEEP=1), and
 * GOMP_SPINCOUNT=1000 when libgomp runs the OpenMP threads, the user set neither GOMP_SPINCOUNT
 * nor OMP_WAIT_POLICY, and this process's cpus are contended: other work runnable on them at
 * start, or the launcher's local ranks sharing them with more threads (coh_get_threads() each)
 * than cpus (COHORT_SPIN_BOUND=1 bounds, =0 never). libgomp's 300000 turns would stall every
 * barrier whose partner thread the other work keeps off a cpu. Not under valgrind, whose tool would not follow the exec. Returns
 * normally when nothing needs setting or the re-exec failed (with a warning for the kernel); in
 * the restarted process it logs the one line that says what changed in the kernel. */
void coh_engine_ensure_environment(void);

/* What the start-up line says of OpenMP's barrier spin and why: "OpenMP barriers spin 1000 turns
 * (2 runnable threads of other work on these cpus at start; ...)", "OpenMP GOMP_SPINCOUNT=5000
 * (yours)", ...; "" without libgomp or before coh_engine_ensure_environment. */
const char *coh_openmp_spin_text(void);

/* Best of a few n x n sgemm runs using every thread, in FLOP/s: the peak MFU is measured against. */
double coh_measure_sgemm_flops(int n);

/* MFU as shown to the user: "12.3%" (returns 1), or "n/a" (returns 0) when it is not a number
 * in (0, 100%]: above 100% the peak measured at start was low (other work on the machine
 * during the probe), and the figure would be false. */
int coh_mfu_text(double mfu, char *buf, size_t cap);

/* Whether bf16-mixed training can run here: UNAVAILABLE (no oneDNN in this build, or a CPU
 * without AVX-512), EMULATED (AVX-512 without bf16 instructions: correct but slower than fp32),
 * NATIVE (AVX512-BF16 or AMX). why (may be NULL) gets the instruction set used or the reason. */
typedef enum coh_bf16_level {
    COH_BF16_UNAVAILABLE,
    COH_BF16_EMULATED,
    COH_BF16_NATIVE
} coh_bf16_level;
coh_bf16_level coh_bf16_support(char *why, size_t cap);

/* Generate, on the calling thread, the bf16 kernels a bf16-mixed model of this config trains
 * micro-batches of B x T with (otherwise made at first use): code, not training memory, so a
 * trainer that measures what training holds makes them first. COH_ERR_INVALID for a bad config
 * or batch, COH_ERR_UNSUPPORTED when bf16 cannot run here. */
coh_status coh_bf16_prepare(const coh_gpt_config *c, int B, int T);

/* Best of a few n x n bf16 GEMM runs (fp32 accumulation, oneDNN) using every thread, in
 * FLOP/s: the peak bf16-mixed MFU is measured against; 0 when bf16 is unavailable. */
double coh_measure_bf16_gemm_flops(int n);

/* Threads for OpenMP and OpenBLAS (n < 1: OMP_NUM_THREADS when it is a positive number, as
 * `cohort run` sets it per rank, else the CPUs of this process's affinity mask capped by its
 * cgroup's cpu.max quota, divided among the launcher's local ranks when they share those
 * CPUs; at least 1). */
void coh_set_threads(int n);
int coh_get_threads(void);
/* Where the last default (n < 1) of coh_set_threads came from, for the start-up line:
 * "OMP_NUM_THREADS", "2 cpus in the affinity mask, shared by 2 local ranks (openmpi)"... */
const char *coh_threads_origin(void);

/* splitmix64: the next number of the generator whose state is *state (weight initialisation,
 * sampling and the data order all draw from it). */
static inline uint64_t coh_splitmix64(uint64_t *state)
{
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

#ifdef __cplusplus
}
#endif
#endif
