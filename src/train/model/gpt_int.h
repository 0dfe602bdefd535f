/* gpt_int.h: private parts of the GPT engine: the model struct, activation layout, and ops. */
#ifndef COHORT_GPT_INT_H
#define COHORT_GPT_INT_H

#include <stddef.h>
#include <stdint.h>

#include "cohort/train.h"
#include "train/backend/backend.h"

#define GPT_BLOCK_TENSORS 12
/* Most vocabulary shards a pipeline splits the LM head into (COH_PIPE_MAX_HEAD_SHARDS). */
#define GPT_MAX_HEAD_SHARDS 16
/* bf16-mixed, whole vocabulary: rows whose bf16 dL/dlogits the head keeps (gpt_mm.dl) before
 * its dL/dx and dL/dwte products run over all of them at once. */
#define GPT_HEAD_DL_ROWS 2048

typedef struct gpt_act_sizes_t {
    size_t rows;       /* rows of the residual stream a rank keeps (B*T, or its share with sp) */
    size_t per_layer;  /* floats saved per block */
    size_t saved;      /* floats of all saved activations (token copy included) */
    size_t grads;      /* floats of the backward scratch */
    size_t chunk_rows; /* rows of the LM head chunk */
    size_t logits;     /* floats of the LM head chunk */
    size_t mm_a, mm_b, mm_w, mm_wte, mm_dl; /* bf16-mixed: bf16 elements of each gpt_mm
                                               buffer (dl: 0 on a tensor-parallel shard) */
    size_t dl_rows;    /* bf16-mixed: rows of gpt_mm.dl */
} gpt_act_sizes_t;

void gpt_act_sizes(const coh_gpt_config *c, int B, int T, gpt_act_sizes_t *s);
/* bf16-mixed: bytes of the largest oneDNN scratchpad of the model's products for B x T rows. */
size_t gpt_bf16_scratch_bytes(const coh_gpt_config *c, int B, int T);

/* Tensor-parallel shards of c: 1 for the whole model. */
static inline int gpt_tp(const coh_gpt_config *c) { return c->tp > 1 ? c->tp : 1; }
/* Sequence parallelism is on (it needs tp > 1). */
static inline int gpt_sp(const coh_gpt_config *c) { return c->sp && c->tp > 1; }

/* Views of one block's parameters (or gradients) in the arena. Matrices are [in, out]. */
typedef struct gpt_block {
    float *ln1w, *ln1b;     /* (C) */
    float *qkvw, *qkvb;     /* (C, 3C), (3C) */
    float *attprojw, *attprojb; /* (C, C), (C) */
    float *ln2w, *ln2b;     /* (C) */
    float *fcw, *fcb;       /* (C, 4C), (4C) */
    float *fcprojw, *fcprojb; /* (4C, C), (C) */
} gpt_block;

typedef struct gpt_weights {
    float *wte;  /* (V, C) token embedding, also the LM head */
    float *wpe;  /* (maxT, C) */
    float *lnfw, *lnfb; /* (C) */
} gpt_weights;

/* Saved activations of one block, views into the activation allocation. */
typedef struct gpt_layer_acts {
    float *ln1, *ln1_mean, *ln1_rstd; /* (B,T,C), (B,T), (B,T) */
    float *qkv;                       /* (B,T,3C) */
    float *atty;                      /* (B,T,C) attention output before projection */
    float *att_lse;                   /* (B,NH,T) softmax log-sum-exp per query row */
    float *res2;                      /* (B,T,C) residual after attention */
    float *ln2, *ln2_mean, *ln2_rstd; /* (B,T,C), (B,T), (B,T) */
    float *fch, *fch_gelu;            /* (B,T,4C) */
    float *res3;                      /* (B,T,C) block output */
} gpt_layer_acts;

/* What one micro-batch keeps from its forward pass for its backward pass. A pipeline stage
 * holds one slot per micro-batch in flight; the whole model on one device uses slot 0. A
 * stage's slots (coh_gpt_set_stage_slots) have views only for what it runs: the others are
 * NULL. */
typedef struct gpt_slot {
    float *encoded;        /* (B,T,C) */
    float *lnf, *lnf_mean, *lnf_rstd; /* (B,T,C), (B,T), (B,T) */
    float *losses;         /* (B,T) */
    int32_t *tokens;       /* (B,T) copy for the embedding backward */
    int32_t *targets;      /* (B,T) device copy the head reads (with head shards > 1: theirs) */
    float *hstat;          /* (B,T,3) head shards: the last shard's max and sum of exp per row */
    float *hkeep;          /* the logits of the head shards before the last this rank runs */
    float hscale;          /* the gradient's scale of the forward */
    gpt_layer_acts *la;    /* (L) */
    float *dlnf;           /* (B,T,C) the fused head's dL/dlnf until backward (stages only) */
} gpt_slot;

/* Whether slot sl keeps what layers lo..hi-1 and the ends (COH_GPT_*) save: a stage's slots
 * (coh_gpt_set_stage_slots) keep only its own; the whole model's keep everything. */
int gpt_slot_keeps(const coh_gpt *g, const gpt_slot *sl, int lo, int hi, int ends);
/* Points the model's gradient views at buf (an arena of its layout, the caller's) without
 * copying: the executor's micro-batches summed apart (coh_trainer_config.grad_accum_apart). */
void gpt_point_grads(coh_gpt *g, float *buf);

struct coh_gpt {
    coh_gpt_config cfg;
    const coh_backend *be; /* every op and buffer of the model (backend.h) */
    int maxB, maxT;
    size_t nparams;
    float *params, *grads;
    int grads_borrowed;    /* grads is the caller's (coh_gpt_set_grad_arena) */
    gpt_weights w, gw;
    float *head_dwte;      /* (Vs, C) the head's part of dwte, accumulated apart from the
                              embedding's (coh_gpt_keep_head_grad_apart); NULL: both in gw.wte */
    gpt_block *blk, *gblk; /* (L) views into params and grads */
    float *acts;           /* saved activations of slot 0 */
    gpt_slot *slot;        /* (nslots) */
    int nslots;
    float *slot_acts;      /* saved activations of slots 1.. and every slot's dlnf */
    int recompute;         /* keep only block outputs; rebuild a block's activations in backward */
    int outputs_only;      /* the stage's slots keep only block outputs: recompute stays on */
    float *rscratch;       /* (per_layer) the one block's activations being rebuilt */
    float *dscratch;       /* backward scratch, carved into the three below */
    float *dres;           /* (R,C) dL/d(residual stream) over this rank's R rows */
    float *dtmp;           /* (B,T,C) a product's output (forward) or input gradient */
    float *dwide;          /* (B,T,max(F, 3Ca)) the widest gradients: MLP hidden, qkv */
    float *gbuf;           /* (B,T,C) rows gathered from the tp ranks (sequence parallelism) */
    float *lngrad;         /* (2C) a LayerNorm's gradients over this rank's rows (sequence
                              parallelism), summed over the tp ranks into the arena */
    float *logits;         /* (chunk, V) */
    size_t chunk_rows;
    coh_grad_ready_fn hook;
    void *hook_ctx;
    coh_param_hook_fn phook;
    void *phook_ctx;
    /* tensor parallelism (gpt_tp.c): this shard's place and its group. The short names are
     * the dimensions the kernels take, so they read as in Megatron's paper: */
    int tp, tp_rank;       /* tp: shards of every matrix (1: the whole model); this one */
    int Ca;                /* attention columns held: C / tp (the q, k and v of NHs heads) */
    int F;                 /* MLP hidden columns held: 4C / tp */
    int NHs;               /* attention heads held: heads / tp */
    int Vs;                /* vocabulary rows in this shard's wte (coh_gpt_vocab_per_shard) */
    int v0;                /* token id of wte row 0 of this shard: tp_rank * Vs */
    int Vv;                /* rows of Vs that are real tokens (the last shard's padding not) */
    int sp;                /* sequence parallelism: this rank keeps 1/tp of the rows */
    coh_comm *tp_comm;     /* the tp group's communicator, borrowed; NULL with tp 1 */
    double tp_comm_s;      /* seconds spent in tensor-parallel collectives (the step's share) */
    /* the planner times a shard alone (gpt_tp_skip_collectives): tp_skip set, each collective
     * returns at once, after calling tp_sync(tp_sync_ctx) when set (the copies' meeting) */
    int tp_skip;
    coh_status (*tp_sync)(void *);
    void *tp_sync_ctx;
    coh_comm_span_fn span; /* trace: told of each tp collective's start and end */
    void *span_ctx;
    gpt_mm mm;             /* the products' precision, passed to each (backend.h) */
    /* the LM head split by vocabulary along a pipeline (coh_gpt_set_head_shards) */
    int head_shards;       /* 1: the head whole */
    long hkeep_off[GPT_MAX_HEAD_SHARDS]; /* each shard's logits in a slot's hkeep, -1: none */
    float *hrun;           /* (B,T,3) the running max, sum of exp and target logit */
    float *hloss;          /* (B,T) losses a shard before the last computes and drops */
    void *head_mem;        /* every slot's head shard buffers */
};

/* ---- tensor parallelism (gpt_tp.c): with tp 1 every call returns at once ---- */
/* Set the shard's sizes for shard tp_rank of gpt_tp(&g->cfg). */
void gpt_tp_place(coh_gpt *g, int tp_rank);

/* Run a shard without its group, the collectives skipped: its compute is the shard's, its values
 * are not the whole model's. Only for timing a shard (the planner's measured costs); not with
 * sequence parallelism (its rows are split). With sync, each skipped collective calls it (its
 * error ends the step): the planner's copies of a group meet there as the shards would, so the
 * wait for the slowest is timed while no data moves. */
coh_status gpt_tp_skip_collectives(coh_gpt *g, coh_status (*sync)(void *), void *ctx);
/* Sum x (n floats) over the shards, in place: Megatron's g in forward after a row-parallel
 * matrix, f's conjugate in backward before a column-parallel one. */
coh_status gpt_tp_allreduce(coh_gpt *g, float *x, size_t n, const char *what);
/* The rows of a row-parallel product's partial sums x (N rows of C) summed over the shards: all
 * of them (all-reduce), or with sequence parallelism this rank's share (reduce-scatter); either
 * way the result starts at x. */
coh_status gpt_tp_reduce_rows(coh_gpt *g, float *x, size_t N, const char *what);
/* All N rows of `local` (this rank's share with sequence parallelism): `local` itself, or the
 * shares all-gathered into g->gbuf. NULL on a failed gather (st set). */
const float *gpt_tp_all_rows(coh_gpt *g, const float *local, size_t N, const char *what,
                             coh_status *st);
/* bf16-mixed keeps ln_1, the attention output, ln_2 and the GELU output as bf16 (gpt_step.c). */
static inline int gpt_bf16_acts(const coh_gpt *g) { return g->mm.bf16 && !g->sp; }
/* The rows this rank keeps of N: N, or N / tp with sequence parallelism. */
static inline size_t gpt_rows(const coh_gpt *g, size_t N) { return g->sp ? N / (size_t)g->tp : N; }
/* The vocabulary part this shard's LM head holds, reduced over g's tensor-parallel group. */
gpt_vocab_part gpt_tp_vocab(coh_gpt *g);

#endif
