/* gpt.c: the GPT-2 model: arenas carved into views, initialisation, and one training step
 * (forward, fused loss, backward) over the layer-major parameter and gradient arenas. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cohort/log.h"
#include "cohort/pipeline.h"
#include "cohort/size.h"
#include "cohort/train.h"
#include "train/model/gpt_int.h"

/* Buffers of a model (device memory, counted by the backend's allocator). */
#define DEV_ALLOC(g, n) coh_dev_alloc((g)->be, (n))
#define DEV_FREE(g, p) coh_dev_free((g)->be, (p))

static void arena_views(const coh_gpt_config *c, float *arena, gpt_weights *w, gpt_block *blk)
{
    size_t C = (size_t)c->dim, b, e;
    coh_tensor_info t;
    coh_gpt_tensor(c, 0, &t);
    w->wte = arena + t.offset; /* (Vs, C): this shard's vocabulary rows */
    coh_gpt_tensor(c, 1, &t);
    w->wpe = arena + t.offset; /* (maxT, C) */
    for (int l = 0; l < c->layers; l++) {
        gpt_block *bl = &blk[l];
        float **slot[GPT_BLOCK_TENSORS] = {&bl->ln1w, &bl->ln1b, &bl->qkvw, &bl->qkvb,
                                           &bl->attprojw, &bl->attprojb, &bl->ln2w, &bl->ln2b,
                                           &bl->fcw, &bl->fcb, &bl->fcprojw, &bl->fcprojb};
        for (int k = 0; k < GPT_BLOCK_TENSORS; k++) {
            coh_gpt_tensor(c, 2 + l * GPT_BLOCK_TENSORS + k, &t);
            *slot[k] = arena + t.offset;
        }
    }
    coh_gpt_layer_range(c, c->layers, &b, &e);
    w->lnfw = arena + b; /* (C) */
    w->lnfb = arena + b + C;
}

/* Carve one slot's saved activations from p in the order gpt_act_sizes counts them. */
/* What a pipeline stage's slot keeps: of each layer `keep`: 0 nothing, 1 its output only (the
 * input of a chunk starting after it, or a block's output under full recomputation), 2 all it
 * saves; the embeddings' output (also where a chunk starting at block 0 gets its input); the
 * token copy; the head's LayerNorm, statistics, losses and dL/dlnf. NULL: the whole model's
 * slot (no dL/dlnf). */
typedef struct gpt_slot_plan {
    int chunks;
    const int *lo, *hi;   /* (chunks) each chunk's blocks lo..hi-1 */
    int outputs_only;     /* full recomputation: a block keeps its output alone */
    int encoded, tokens, head;
} gpt_slot_plan;

/* What plan's slot keeps of layer l (the `keep` above; computed, no table). */
static int plan_keep(const gpt_slot_plan *plan, int l)
{
    int keep = 0;
    for (int k = 0; k < plan->chunks; k++) {
        if (l >= plan->lo[k] && l < plan->hi[k])
            return plan->outputs_only ? 1 : 2;
        if (l + 1 == plan->lo[k]) /* a chunk's input lands where block lo - 1 leaves it */
            keep = 1;
    }
    return keep;
}

/* Carves slot sl's views from p (sl NULL: only counts); returns the floats they take. */
static size_t slot_carve(coh_gpt *g, gpt_slot *sl, float *p, const gpt_slot_plan *plan)
{
    size_t BT = (size_t)g->maxB * g->maxT, C = (size_t)g->cfg.dim, NH = (size_t)g->NHs;
    size_t Ca = (size_t)g->Ca, F = (size_t)g->F, at = 0;
    gpt_act_sizes_t s;
    gpt_act_sizes(&g->cfg, g->maxB, g->maxT, &s);
    size_t R = s.rows; /* the residual stream's rows this rank keeps */
    int enc = !plan || plan->encoded, tok = !plan || plan->tokens, head = !plan || plan->head;
#define TAKE(dst, n) (sl ? (void)((dst) = p + at) : (void)0, at += (n))
    if (enc)
        TAKE(sl->encoded, R * C);
    if (head) {
        TAKE(sl->lnf, BT * C);
        TAKE(sl->lnf_mean, R);
        TAKE(sl->lnf_rstd, R);
        TAKE(sl->losses, BT);
        if (sl) /* the targets' device copy, (B, T) int32 (float-sized): the head reads it */
            sl->targets = (int32_t *)(p + at);
        at += BT;
    }
    for (int l = 0; l < g->cfg.layers; l++) {
        gpt_layer_acts *a = sl ? &sl->la[l] : NULL;
        int keep = plan ? plan_keep(plan, l) : 2;
        if (keep == 2) {
            TAKE(a->ln1, R * C);
            TAKE(a->ln1_mean, R);
            TAKE(a->ln1_rstd, R);
            TAKE(a->qkv, BT * 3 * Ca);
            TAKE(a->atty, BT * Ca);
            TAKE(a->att_lse, BT * NH);
            TAKE(a->res2, R * C);
            TAKE(a->ln2, R * C);
            TAKE(a->ln2_mean, R);
            TAKE(a->ln2_rstd, R);
            TAKE(a->fch, BT * F);
            TAKE(a->fch_gelu, BT * F);
        }
        if (keep)
            TAKE(a->res3, R * C);
    }
    if (tok) { /* (B, T), int32 is float-sized */
        if (sl)
            sl->tokens = (int32_t *)(p + at);
        at += BT;
    }
    if (plan && head)
        TAKE(sl->dlnf, BT * C);
#undef TAKE
    return at;
}

static void slot_views(coh_gpt *g, gpt_slot *sl, float *p)
{
    (void)slot_carve(g, sl, p, NULL);
}

static void scratch_views(coh_gpt *g, int B, int T)
{
    gpt_act_sizes_t s;
    gpt_act_sizes(&g->cfg, B, T, &s);
    size_t C = (size_t)g->cfg.dim, BTC = (size_t)B * T * C;
    size_t W = (size_t)(g->F > 3 * g->Ca ? g->F : 3 * g->Ca);
    g->dres = g->dscratch;          /* (R,C) */
    g->dtmp = g->dres + s.rows * C; /* (B,T,C) */
    g->dwide = g->dtmp + BTC;       /* (B,T,W) */
    g->gbuf = g->sp ? g->dwide + (size_t)B * T * W : NULL; /* (B,T,C) */
    g->lngrad = g->sp ? g->gbuf + BTC : NULL;                /* (2C) */
}

/* whole: the whole model's slot 0 now; else none until coh_gpt_set_stage_slots */
static coh_status create(const coh_gpt_config *c, int B, int T, int whole, coh_gpt **out)
{
    *out = NULL;
    coh_train_memory mem;
    coh_status st = coh_train_memory_estimate(c, B, T, &mem);
    if (st)
        return st;
    coh_gpt *g = calloc(1, sizeof *g);
    if (!g)
        return coh_errf(COH_ERR_NOMEM, "out of memory allocating the model");
    g->cfg = *c;
    g->be = coh_backend_current();
    g->head_shards = 1;
    gpt_tp_place(g, 0);
    g->maxB = B;
    g->maxT = T;
    g->nparams = coh_gpt_param_count(c);
    gpt_act_sizes_t s;
    gpt_act_sizes(c, B, T, &s);
    g->chunk_rows = s.chunk_rows;
    g->params = DEV_ALLOC(g, g->nparams * sizeof(float));
    g->grads = DEV_ALLOC(g, g->nparams * sizeof(float));
    g->blk = calloc((size_t)c->layers, sizeof *g->blk);
    g->gblk = calloc((size_t)c->layers, sizeof *g->gblk);
    g->nslots = 1;
    g->slot = calloc(1, sizeof *g->slot);
    if (g->slot)
        g->slot[0].la = calloc((size_t)c->layers, sizeof *g->slot[0].la);
    g->acts = whole ? DEV_ALLOC(g, s.saved * sizeof(float)) : NULL;
    g->dscratch = DEV_ALLOC(g, s.grads * sizeof(float));
    g->logits = DEV_ALLOC(g, s.logits * sizeof(float));
    if (!g->params || !g->grads || !g->blk || !g->gblk || !g->slot || !g->slot[0].la || (whole && !g->acts) ||
        !g->dscratch ||
        !g->logits) {
        coh_gpt_destroy(g);
        char buf[32];
        coh_size_format(mem.total, buf, sizeof buf);
        return coh_errf(COH_ERR_NOMEM, "out of memory allocating the model (%s needed)", buf);
    }
    arena_views(c, g->params, &g->w, g->blk);
    arena_views(c, g->grads, &g->gw, g->gblk);
    if (whole)
        slot_views(g, &g->slot[0], g->acts);
    scratch_views(g, B, T);
    *out = g;
    return COH_OK;
}

coh_status coh_gpt_create(const coh_gpt_config *c, int B, int T, coh_gpt **out)
{
    return create(c, B, T, 1, out);
}

coh_status coh_gpt_create_stage(const coh_gpt_config *c, int B, int T, coh_gpt **out)
{
    return create(c, B, T, 0, out);
}

/* The bf16 operand buffers and scratchpad, if any, back to the backend. */
static void mm_free(coh_gpt *g)
{
    DEV_FREE(g, g->mm.a);
    DEV_FREE(g, g->mm.b);
    DEV_FREE(g, g->mm.w);
    DEV_FREE(g, g->mm.wte);
    DEV_FREE(g, g->mm.dl);
    DEV_FREE(g, g->mm.scratch);
    g->mm = (gpt_mm){0};
}

void coh_gpt_destroy(coh_gpt *g)
{
    if (!g)
        return;
    DEV_FREE(g, g->params);
    if (!g->grads_borrowed)
        DEV_FREE(g, g->grads);
    free(g->blk);
    free(g->gblk);
    for (int i = 0; g->slot && i < g->nslots; i++)
        free(g->slot[i].la);
    free(g->slot);
    DEV_FREE(g, g->slot_acts);
    DEV_FREE(g, g->head_mem);
    DEV_FREE(g, g->head_dwte);
    DEV_FREE(g, g->rscratch);
    DEV_FREE(g, g->acts);
    DEV_FREE(g, g->dscratch);
    DEV_FREE(g, g->logits);
    mm_free(g);
    free(g);
}

const coh_gpt_config *coh_gpt_get_config(const coh_gpt *g) { return &g->cfg; }

coh_status coh_gpt_set_recompute(coh_gpt *g, int full)
{
    if (!full && g->outputs_only)
        return coh_errf(COH_ERR_INVALID, "recomputation cannot be turned off: the stage's slots "
                        "keep only block outputs");
    if (full && !g->rscratch) {
        gpt_act_sizes_t s;
        gpt_act_sizes(&g->cfg, g->maxB, g->maxT, &s);
        if (!(g->rscratch = DEV_ALLOC(g, s.per_layer * sizeof(float))))
            return coh_errf(COH_ERR_NOMEM, "out of memory for recomputation");
    }
    g->recompute = full != 0;
    return COH_OK;
}

coh_status coh_gpt_set_bf16_mixed(coh_gpt *g, int on)
{
    if (on && !g->mm.a) {
        coh_status st = g->be->bf16_check();
        if (st)
            return st;
        gpt_act_sizes_t s;
        gpt_act_sizes(&g->cfg, g->maxB, g->maxT, &s);
        g->mm.a = DEV_ALLOC(g, s.mm_a * sizeof(gpt_bf16));
        g->mm.b = DEV_ALLOC(g, s.mm_b * sizeof(gpt_bf16));
        g->mm.w = DEV_ALLOC(g, s.mm_w * sizeof(gpt_bf16));
        g->mm.wte = DEV_ALLOC(g, s.mm_wte * sizeof(gpt_bf16));
        g->mm.dl = s.mm_dl ? DEV_ALLOC(g, s.mm_dl * sizeof(gpt_bf16)) : NULL;
        g->mm.dl_rows = s.dl_rows;
        g->mm.scratch_bytes = gpt_bf16_scratch_bytes(&g->cfg, g->maxB, g->maxT);
        g->mm.scratch = DEV_ALLOC(g, g->mm.scratch_bytes);
        if (!g->mm.a || !g->mm.b || !g->mm.w || !g->mm.wte || (s.mm_dl && !g->mm.dl) ||
            !g->mm.scratch) {
            mm_free(g);
            return coh_errf(COH_ERR_NOMEM, "out of memory for the bf16 operand buffers");
        }
    }
    g->mm.bf16 = on != 0;
    return COH_OK;
}

/* `slots` slots, each with its per-layer views, over one zeroed device block of `floats`;
 * COH_ERR_NOMEM (nothing left held) when any allocation fails. */
static coh_status slots_alloc(coh_gpt *g, int slots, size_t floats, gpt_slot **sl_out,
                              float **acts_out)
{
    gpt_slot *sl = calloc((size_t)slots, sizeof *sl);
    /* zeroed device memory: on the CPU, untouched pages (layers of other stages, slots never
     * used) stay unresident */
    float *acts = DEV_ALLOC(g, floats * sizeof(float));
    int ok = sl && acts;
    for (int i = 0; ok && i < slots; i++)
        ok = (sl[i].la = calloc((size_t)g->cfg.layers, sizeof *sl[i].la)) != NULL;
    if (!ok) {
        for (int i = 0; sl && i < slots; i++)
            free(sl[i].la);
        free(sl);
        DEV_FREE(g, acts);
        return coh_errf(COH_ERR_NOMEM, "out of memory for %d activation slots", slots);
    }
    *sl_out = sl;
    *acts_out = acts;
    return COH_OK;
}

/* Replaces the model's slots by sl (slots of them) over acts. */
static void slots_install(coh_gpt *g, gpt_slot *sl, int slots, float *acts)
{
    free(g->slot[0].la);
    free(g->slot);
    g->slot = sl;
    g->nslots = slots;
    g->slot_acts = acts;
}

coh_status coh_gpt_set_slots(coh_gpt *g, int slots)
{
    if (slots < 1 || slots > 4096)
        return coh_errf(COH_ERR_INVALID, "invalid slot count '%d': must be 1..4096", slots);
    if (g->slot_acts)
        return coh_errf(COH_ERR_INVALID, "the model's slots are already set");
    if (!g->acts)
        return coh_errf(COH_ERR_INVALID, "a stage's model sizes its slots with "
                        "coh_gpt_set_stage_slots");
    gpt_act_sizes_t s;
    gpt_act_sizes(&g->cfg, g->maxB, g->maxT, &s);
    size_t BTC = (size_t)g->maxB * g->maxT * (size_t)g->cfg.dim;
    size_t nacts = (size_t)(slots - 1) * s.saved + (size_t)slots * BTC;
    gpt_slot *sl;
    float *acts;
    coh_status st = slots_alloc(g, slots, nacts, &sl, &acts);
    if (st)
        return st;
    float *p = acts;
    for (int i = 0; i < slots; i++) {
        slot_views(g, &sl[i], i ? p : g->acts);
        if (i)
            p += s.saved;
        sl[i].dlnf = p;
        p += BTC;
    }
    slots_install(g, sl, slots, acts);
    return COH_OK;
}

/* COH_ERR_INVALID for a chunk outside the model. */
static coh_status check_chunks(const coh_gpt *g, int chunks, const int *lo, const int *hi)
{
    int L = g->cfg.layers;
    if (chunks < 1 || chunks > L + 2)
        return coh_errf(COH_ERR_INVALID, "invalid chunk count '%d': must be 1..%d", chunks, L + 2);
    for (int k = 0; k < chunks; k++)
        if (lo[k] < 0 || hi[k] > L || lo[k] > hi[k])
            return coh_errf(COH_ERR_INVALID, "invalid layer range %d..%d: the model has layers "
                            "0..%d", lo[k], hi[k] - 1, L - 1);
    return COH_OK;
}

coh_status coh_gpt_set_stage_slots(coh_gpt *g, int slots, int chunks, const int *lo,
                                   const int *hi, int embeddings, int head)
{
    if (slots < 1 || slots > 4096)
        return coh_errf(COH_ERR_INVALID, "invalid slot count '%d': must be 1..4096", slots);
    if (g->slot_acts || g->acts)
        return coh_errf(COH_ERR_INVALID, "stage slots need a model from coh_gpt_create_stage, "
                        "once");
    coh_status st = check_chunks(g, chunks, lo, hi);
    if (st)
        return st;
    int at0 = embeddings != 0; /* a chunk starting at block 0 gets its input where the
                                  embeddings leave theirs */
    for (int k = 0; k < chunks; k++)
        at0 |= lo[k] == 0;
    gpt_slot_plan plan = {chunks, lo, hi, g->recompute, at0, embeddings != 0, head != 0};
    size_t per = slot_carve(g, NULL, NULL, &plan);
    gpt_slot *sl;
    float *acts;
    if ((st = slots_alloc(g, slots, (size_t)slots * per, &sl, &acts)))
        return st;
    for (int i = 0; i < slots; i++)
        slot_carve(g, &sl[i], acts + (size_t)i * per, &plan);
    slots_install(g, sl, slots, acts);
    g->outputs_only = g->recompute;
    return COH_OK;
}

/* Whether a stage's slot keeps what layers lo..hi-1 and the ends save (a stage's slots keep
 * only its own; the whole model's keep everything). */
int gpt_slot_keeps(const coh_gpt *g, const gpt_slot *sl, int lo, int hi, int ends)
{
    if ((ends & COH_GPT_EMBEDDINGS) && (!sl->encoded || !sl->tokens))
        return 0;
    if ((ends & COH_GPT_HEAD) && !sl->lnf)
        return 0;
    if (lo > 0 ? !sl->la[lo - 1].res3 : !sl->encoded) /* where the chunk's input lands */
        return 0;
    for (int l = lo; l < hi; l++)
        if (!sl->la[l].res3 || (!g->recompute && !sl->la[l].ln1))
            return 0;
    return 1;
}

coh_status coh_gpt_keep_head_grad_apart(coh_gpt *g)
{
    if (g->head_dwte)
        return coh_errf(COH_ERR_INVALID, "the head's wte gradient is already kept apart");
    size_t n = (size_t)g->Vs * (size_t)g->cfg.dim;
    if (!(g->head_dwte = DEV_ALLOC(g, n * sizeof(float))))
        return coh_errf(COH_ERR_NOMEM, "out of memory for the head's wte gradient (%zu floats)",
                        n);
    return COH_OK;
}

float *coh_gpt_head_grad(coh_gpt *g, size_t *n)
{
    if (n)
        *n = g->head_dwte ? (size_t)g->Vs * (size_t)g->cfg.dim : 0;
    return g->head_dwte;
}

coh_status coh_gpt_set_head_shards(coh_gpt *g, int shards, const int *held, int keep_logits)
{
    int V = g->cfg.vocab;
    if (shards < 2 || shards > GPT_MAX_HEAD_SHARDS || shards > V)
        return coh_errf(COH_ERR_INVALID, "invalid head shard count '%d': 2..%d", shards,
                        GPT_MAX_HEAD_SHARDS < V ? GPT_MAX_HEAD_SHARDS : V);
    if (!g->slot_acts || g->head_mem)
        return coh_errf(COH_ERR_INVALID, "head shards need the model's slots set, once");
    if (g->tp > 1)
        return coh_errf(COH_ERR_UNSUPPORTED, "head shards along a pipeline with tensor "
                        "parallelism: the vocabulary is already split");
    size_t N = (size_t)g->maxB * g->maxT, keep = 0;
    for (int k = 0; k < shards; k++) {
        g->hkeep_off[k] = -1;
        if (keep_logits && held && held[k] && k < shards - 1) {
            g->hkeep_off[k] = (long)keep;
            keep += N * (size_t)(coh_pipe_head_shard_row(V, k + 1, shards) -
                                 coh_pipe_head_shard_row(V, k, shards));
        }
    }
    /* per slot: targets, statistics, kept logits; then the running statistics and losses.
     * zeroed device memory: slots never used stay unresident on the CPU */
    size_t per = N + 3 * N + keep, total = (size_t)g->nslots * per + 3 * N + N;
    float *mem = DEV_ALLOC(g, total * sizeof(float));
    if (!mem)
        return coh_errf(COH_ERR_NOMEM, "out of memory for the head shards' %zu floats", total);
    for (int i = 0; i < g->nslots; i++) {
        float *p = mem + (size_t)i * per;
        g->slot[i].targets = (int32_t *)(void *)p;
        g->slot[i].hstat = p + N;
        g->slot[i].hkeep = keep ? p + 4 * N : NULL;
    }
    g->hrun = mem + (size_t)g->nslots * per;
    g->hloss = g->hrun + 3 * N;
    g->head_mem = mem;
    g->head_shards = shards;
    return COH_OK;
}

float *coh_gpt_params(coh_gpt *g, size_t *count)
{
    if (count)
        *count = g->nparams;
    return g->params;
}

float *coh_gpt_grads(coh_gpt *g, size_t *count)
{
    if (count)
        *count = g->nparams;
    return g->grads;
}

void coh_gpt_set_grad_hook(coh_gpt *g, coh_grad_ready_fn fn, void *ctx)
{
    g->hook = fn;
    g->hook_ctx = ctx;
}

void coh_gpt_set_grad_arena(coh_gpt *g, float *buf)
{
    g->be->copy(buf, g->grads, g->nparams * sizeof *buf, COH_COPY_D2D);
    if (!g->grads_borrowed)
        DEV_FREE(g, g->grads);
    g->grads = buf;
    g->grads_borrowed = 1;
    arena_views(&g->cfg, buf, &g->gw, g->gblk);
}

void gpt_point_grads(coh_gpt *g, float *buf)
{
    g->grads = buf;
    arena_views(&g->cfg, buf, &g->gw, g->gblk);
}

void coh_gpt_set_param_hook(coh_gpt *g, coh_param_hook_fn fn, void *ctx)
{
    g->phook = fn;
    g->phook_ctx = ctx;
}

void coh_gpt_zero_grad(coh_gpt *g) { g->be->set(g->grads, 0, g->nparams * sizeof(float)); }

/* splitmix64, used sequentially, keeps the initialisation independent of thread counts. */
static double rng_uniform(uint64_t *s) { return ((coh_splitmix64(s) >> 11) + 0.5) * (1.0 / 9007199254740992.0); }

static void fill_normal(float *x, size_t n, double std, uint64_t *s)
{
    for (size_t i = 0; i < n; i += 2) {
        double u1 = rng_uniform(s), u2 = rng_uniform(s);
        double r = sqrt(-2.0 * log(u1)) * std;
        x[i] = (float)(r * cos(2.0 * M_PI * u2));
        if (i + 1 < n)
            x[i + 1] = (float)(r * sin(2.0 * M_PI * u2));
    }
}

/* Draw a full tensor of `numel` values (normal with std, or the constant v) from the stream in
 * order, keeping the elements shard sh holds: the stream advances as for the whole tensor. */
static void fill_shard(float *local, const coh_tensor_shard *sh, size_t numel, double std,
                       float v, uint64_t *s)
{
    enum { BLOCK = 4096 }; /* even: the normal pairs never straddle two blocks */
    float buf[BLOCK];
    size_t lcols = (size_t)sh->nseg * sh->seg;
    for (size_t k0 = 0; k0 < numel; k0 += BLOCK) {
        size_t n = numel - k0 < BLOCK ? numel - k0 : BLOCK;
        if (std > 0.0)
            fill_normal(buf, n, std, s);
        for (size_t j = 0; j < n; j++) {
            size_t row = (k0 + j) / sh->full_cols, col = (k0 + j) % sh->full_cols;
            if (row < sh->row0 || row >= sh->row0 + sh->rows)
                continue;
            for (int q = 0; q < sh->nseg; q++)
                if (col >= sh->col0[q] && col < sh->col0[q] + sh->seg)
                    local[(row - sh->row0) * lcols + (size_t)q * sh->seg + col - sh->col0[q]] =
                        std > 0.0 ? buf[j] : v;
        }
    }
}

/* Where tensor t's initial values are drawn: its place in the arena when the device's memory is
 * the host's (cpu), else a host buffer that init_done sends over (NULL: out of memory). */
static float *init_dest(coh_gpt *g, const coh_tensor_info *t)
{
    if (!strcmp(g->be->name, "cpu"))
        return g->params + t->offset;
    return malloc((t->numel ? t->numel : 1) * sizeof(float));
}

static void init_done(coh_gpt *g, const coh_tensor_info *t, float *p)
{
    if (p == g->params + t->offset)
        return;
    g->be->copy(g->params + t->offset, p, t->numel * sizeof *p, COH_COPY_H2D);
    free(p);
}

void coh_gpt_init_weights(coh_gpt *g, uint64_t seed)
{
    uint64_t s = seed;
    coh_gpt_config whole = g->cfg;
    whole.tp = 1;
    double resid = 0.02 / sqrt(2.0 * g->cfg.layers);
    int n = coh_gpt_tensor_count(&g->cfg);
    for (int i = 0; i < n; i++) {
        coh_tensor_info t, ft;
        coh_tensor_shard sh;
        coh_gpt_tensor(&g->cfg, i, &t);
        coh_gpt_tensor(&whole, i, &ft);
        coh_gpt_tensor_shard(&g->cfg, i, g->tp_rank, &sh);
        float *p = init_dest(g, &t);
        if (!p) { /* said, not silent: the draws of the tensors after it shift too */
            coh_warn("initial weights of '%s' stay zero: out of host memory", t.name);
            continue;
        }
        double std = 0.0;
        float v = strstr(t.name, ".weight") ? 1.0f : 0.0f; /* LayerNorm gains, zero biases */
        if (t.ndim == 2)
            std = strstr(t.name, "c_proj.weight") ? resid : 0.02;
        if (!sh.replicated)
            fill_shard(p, &sh, ft.numel, std, v, &s);
        else if (std > 0.0)
            fill_normal(p, t.numel, std, &s);
        else
            for (size_t k = 0; k < t.numel; k++)
                p[k] = v;
        init_done(g, &t, p);
    }
}
