/* gpt_step.c: forward and backward over a range of layers (a pipeline stage: from tokens or an
 * incoming activation, to an outgoing activation or the fused loss), and the whole model's
 * step as the one stage that holds every layer, reporting each block's finished gradients to
 * the hook. */
#include <math.h>

#include "cohort/pipeline.h"
#include "cohort/size.h"
#include "cohort/train.h"
#include "train/model/gpt_int.h"

/* Every op, copy and loop over a tensor goes through the model's backend (backend.h): this file
 * holds the model's logic only, and reads no tensor on the host. */
#define BE (g->be)
#define F4 sizeof(float)

/* bf16-mixed keeps the four activations that only feed products (ln_1, the attention output,
 * ln_2, the GELU output) as their bf16 copies, packed at the start of their fp32 places: the
 * rest of those places is never written, so never resident. Not with sequence parallelism,
 * whose LayerNorm rows are gathered as fp32. */
#define H(p) ((gpt_bf16 *)(void *)(p))

/* Where block l's activations go: the slot's, or with recomputation one scratch shared by all
 * blocks, except the output, which the next block (and the recomputation) reads. */
static gpt_layer_acts acts_of(coh_gpt *g, gpt_slot *sl, int l, int B, int T)
{
    if (!g->recompute)
        return sl->la[l];
    size_t BT = (size_t)B * T, C = (size_t)g->cfg.dim, NH = (size_t)g->NHs;
    size_t Ca = (size_t)g->Ca, F = (size_t)g->F, R = gpt_rows(g, BT);
    gpt_layer_acts a;
    float *p = g->rscratch;
#define TAKE(dst, n) (dst = p, p += (n))
    TAKE(a.ln1, R * C);
    TAKE(a.ln1_mean, R);
    TAKE(a.ln1_rstd, R);
    TAKE(a.qkv, BT * 3 * Ca);
    TAKE(a.atty, BT * Ca);
    TAKE(a.att_lse, BT * NH);
    TAKE(a.res2, R * C);
    TAKE(a.ln2, R * C);
    TAKE(a.ln2_mean, R);
    TAKE(a.ln2_rstd, R);
    TAKE(a.fch, BT * F);
    TAKE(a.fch_gelu, BT * F);
#undef TAKE
    a.res3 = sl->la[l].res3;
    return a;
}

/* A block's product from the input its forward keeps: the bf16 copy when the block keeps its
 * activations in bf16 (gpt_bf16_acts), else the fp32 rows; with `gather` (naming them) those are
 * this rank's rows under sequence parallelism, all gathered first. */
static coh_status linear_forward(coh_gpt *g, float *out, const float *kept, const char *gather,
                                 const float *w, const float *b, size_t N, int IC, int OC)
{
    if (gpt_bf16_acts(g)) {
        BE->matmul_forward_h(&g->mm, out, H(kept), w, b, N, IC, OC);
        return COH_OK;
    }
    coh_status st = COH_OK;
    const float *in = gather ? gpt_tp_all_rows(g, kept, N, gather, &st) : kept;
    if (!in)
        return st;
    BE->matmul_forward(&g->mm, out, in, w, b, N, IC, OC);
    return COH_OK;
}

/* Its backward, from the same kept input. */
static coh_status linear_backward(coh_gpt *g, float *dinp, float *dw, float *db,
                                  const float *dout, const float *kept, const char *gather,
                                  const float *w, size_t N, int IC, int OC)
{
    if (gpt_bf16_acts(g)) {
        BE->matmul_backward_h(&g->mm, dinp, dw, db, dout, H(kept), w, N, IC, OC, 0);
        return COH_OK;
    }
    coh_status st = COH_OK;
    const float *in = gather ? gpt_tp_all_rows(g, kept, N, gather, &st) : kept;
    if (!in)
        return st;
    BE->matmul_backward(&g->mm, dinp, dw, db, dout, in, w, N, IC, OC, 0);
    return COH_OK;
}

/* Attention holds a T x T score matrix per thread: at a long sequence that is what fails. */
static coh_status attention_oom(int T, const char *part)
{
    char size[32];
    coh_size_format((uint64_t)T * (uint64_t)T * sizeof(float), size, sizeof size);
    return coh_errf(COH_ERR_NOMEM, "out of memory in attention%s: sequence length %d needs a %d x "
                    "%d score matrix (%s) per thread; shorten the sequence (--seq)", part, T, T, T,
                    size);
}

/* One block, Megatron's split when the model is a tensor-parallel shard: QKV column-parallel by
 * heads and the attention projection row-parallel, the MLP's first matrix column-parallel and
 * its second row-parallel; each row-parallel product is a partial sum (its bias added by shard
 * 0 only), summed over the shards (g) before it joins the residual. LayerNorms run on every
 * shard: on all rows, or with sequence parallelism on this rank's rows, all-gathered before the
 * column-parallel matrix and reduce-scattered after the row-parallel one. x: this rank's rows. */
static coh_status block_forward(coh_gpt *g, gpt_slot *sl, int l, const float *x, int B, int T)
{
    int C = g->cfg.dim, Ca = g->Ca, F = g->F;
    size_t N = (size_t)B * T, R = gpt_rows(g, N);
    const gpt_block *w = &g->blk[l];
    int first = g->tp_rank == 0; /* adds the row-parallel biases */
    gpt_layer_acts act = acts_of(g, sl, l, B, T), *a = &act;
    coh_status st = COH_OK;
    int h = gpt_bf16_acts(g);
    if (h)
        BE->layernorm_forward_bf16(H(a->ln1), a->ln1_mean, a->ln1_rstd, x, w->ln1w, w->ln1b, R, C);
    else
        BE->layernorm_forward(a->ln1, a->ln1_mean, a->ln1_rstd, x, w->ln1w, w->ln1b, R, C);
    if ((st = linear_forward(g, a->qkv, a->ln1, "ln_1 rows", w->qkvw, w->qkvb, N, C, 3 * Ca)))
        return st;
    /* bf16 kept: attention writes fp32 into dwide (free until backward), rounded into atty */
    if (BE->attention_forward(h ? g->dwide : a->atty, a->att_lse, a->qkv, B, T, Ca, g->NHs))
        return attention_oom(T, "");
    if (h)
        BE->to_bf16(H(a->atty), g->dwide, N * (size_t)Ca);
    /* the attention-output projection writes into dtmp, free during forward */
    if ((st = linear_forward(g, g->dtmp, a->atty, NULL, w->attprojw, first ? w->attprojb : NULL,
                             N, Ca, C)))
        return st;
    if ((st = gpt_tp_reduce_rows(g, g->dtmp, N, "attention output")))
        return st;
    BE->residual_forward(a->res2, x, g->dtmp, R * C);
    if (h)
        BE->layernorm_forward_bf16(H(a->ln2), a->ln2_mean, a->ln2_rstd, a->res2, w->ln2w, w->ln2b,
                                  R, C);
    else
        BE->layernorm_forward(a->ln2, a->ln2_mean, a->ln2_rstd, a->res2, w->ln2w, w->ln2b, R, C);
    if ((st = linear_forward(g, a->fch, a->ln2, "ln_2 rows", w->fcw, w->fcb, N, C, F)))
        return st;
    if (h)
        BE->gelu_forward_bf16(H(a->fch_gelu), a->fch, N * F);
    else
        BE->gelu_forward(a->fch_gelu, a->fch, N * F);
    if ((st = linear_forward(g, g->dtmp, a->fch_gelu, NULL, w->fcprojw,
                             first ? w->fcprojb : NULL, N, F, C)))
        return st;
    if ((st = gpt_tp_reduce_rows(g, g->dtmp, N, "mlp output")))
        return st;
    BE->residual_forward(a->res3, a->res2, g->dtmp, R * C);
    return COH_OK;
}

/* Where a LayerNorm's weight and bias gradients (wb: 2C in the arena) are accumulated: the
 * arena itself, or with sequence parallelism a zeroed scratch, since each rank's rows give only
 * part of this micro-batch's gradient; ln_grads_done sums the parts over the tp ranks (the same
 * on every rank) and adds them to the arena. */
static float *ln_grads(coh_gpt *g, float *wb)
{
    if (!g->sp)
        return wb;
    BE->set(g->lngrad, 0, 2 * (size_t)g->cfg.dim * F4);
    return g->lngrad;
}

static coh_status ln_grads_done(coh_gpt *g, float *wb, const char *what)
{
    if (!g->sp)
        return COH_OK;
    size_t n = 2 * (size_t)g->cfg.dim;
    coh_status st = gpt_tp_allreduce(g, g->lngrad, n, what);
    if (!st)
        BE->add(wb, g->lngrad, n);
    return st;
}

/* dres holds dL/d(block output) on entry and dL/d(block input) on return (this rank's rows).
 * Each column-parallel matrix's input gradient is a partial sum over the shards, summed (f's
 * conjugate; reduce-scattered with sequence parallelism) before the LayerNorm backward; the
 * replicated parameters' gradients come out identical on every shard. */
static coh_status block_backward(coh_gpt *g, gpt_slot *sl, int l, const float *x, int B, int T)
{
    int C = g->cfg.dim, Ca = g->Ca, F = g->F;
    size_t N = (size_t)B * T, R = gpt_rows(g, N);
    const gpt_block *w = &g->blk[l];
    gpt_block *gw = &g->gblk[l];
    coh_status st = COH_OK;
    /* recomputation rebuilds the block from its kept input: the same ops on the same bits, so
     * the same activations (dtmp, its scratch, is free until the backward below writes it) */
    if (g->recompute && (st = block_forward(g, sl, l, x, B, T)))
        return st;
    gpt_layer_acts act = acts_of(g, sl, l, B, T), *a = &act;
    float *dres = g->dres, *dtmp = g->dtmp, *dwide = g->dwide;
    const float *all;
    if (!(all = gpt_tp_all_rows(g, dres, N, "block output gradient rows", &st)))
        return st;
    if ((st = linear_backward(g, dwide, gw->fcprojw, gw->fcprojb, all, a->fch_gelu, NULL,
                              w->fcprojw, N, F, C)))
        return st;
    BE->gelu_backward(dwide, a->fch, dwide, N * F);
    if ((st = linear_backward(g, dtmp, gw->fcw, gw->fcb, dwide, a->ln2, "ln_2 rows", w->fcw, N, C,
                              F)))
        return st;
    if ((st = gpt_tp_reduce_rows(g, dtmp, N, "mlp input gradient")))
        return st;
    float *dln = ln_grads(g, gw->ln2w); /* ln_2.weight, then ln_2.bias */
    BE->layernorm_backward(dres, dln, dln + C, dtmp, a->res2, w->ln2w, a->ln2_mean, a->ln2_rstd,
                          R, C);
    if ((st = ln_grads_done(g, gw->ln2w, "ln_2 gradients")))
        return st;
    if (!(all = gpt_tp_all_rows(g, dres, N, "attention output gradient rows", &st)))
        return st;
    if ((st = linear_backward(g, dtmp, gw->attprojw, gw->attprojb, all, a->atty, NULL,
                              w->attprojw, N, Ca, C)))
        return st;
    if (BE->attention_backward(dwide, dtmp, a->qkv, a->att_lse, B, T, Ca, g->NHs))
        return attention_oom(T, " backward");
    if ((st = linear_backward(g, dtmp, gw->qkvw, NULL, dwide, a->ln1, "ln_1 rows", w->qkvw, N, C,
                              3 * Ca)))
        return st;
    BE->qkv_bias_backward(gw->qkvb, dwide, N, Ca);
    if ((st = gpt_tp_reduce_rows(g, dtmp, N, "attention input gradient")))
        return st;
    dln = ln_grads(g, gw->ln1w);
    BE->layernorm_backward(dres, dln, dln + C, dtmp, x, w->ln1w, a->ln1_mean, a->ln1_rstd, R, C);
    return ln_grads_done(g, gw->ln1w, "ln_1 gradients");
}

/* The token and position embeddings into out (this rank's rows): each shard adds its
 * vocabulary rows (shard 0 the positions), summed over the shards; exact, since every sum has
 * one term per element that is not zero. */
static coh_status embed(coh_gpt *g, float *out, const int32_t *tokens, int B, int T)
{
    size_t N = (size_t)B * T, C = (size_t)g->cfg.dim;
    float *part = g->sp ? g->dtmp : out; /* all rows before the reduce-scatter */
    BE->encoder_forward(part, tokens, g->w.wte, g->w.wpe, B, T, (int)C, g->v0, g->Vv,
                       g->tp_rank == 0);
    coh_status st = gpt_tp_reduce_rows(g, part, N, "embedding");
    if (!st && part != out)
        BE->copy(out, part, gpt_rows(g, N) * C * F4, COH_COPY_D2D);
    return st;
}

static void report(coh_gpt *g, int layer)
{
    if (!g->hook)
        return;
    size_t b, e;
    coh_gpt_layer_range(&g->cfg, layer, &b, &e);
    g->hook(g->hook_ctx, layer, b, e);
}

static void params(coh_gpt *g, int layer, coh_param_event ev)
{
    if (!g->phook)
        return;
    size_t b, e;
    coh_gpt_layer_range(&g->cfg, layer, &b, &e);
    g->phook(g->phook_ctx, layer, ev, b, e);
}

static coh_status check_ids(const coh_gpt *g, const int32_t *ids, size_t n, const char *what)
{
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= g->cfg.vocab)
            return coh_errf(COH_ERR_INVALID, "invalid %s id '%d' at %zu: vocab is 0..%d", what,
                            ids[i], i, g->cfg.vocab - 1);
    return COH_OK;
}

static coh_status check_stage(const coh_gpt *g, int slot, int lo, int hi, int ends, int B,
                              int T)
{
    int L = g->cfg.layers;
    if (slot < 0 || slot >= g->nslots)
        return coh_errf(COH_ERR_INVALID, "invalid slot '%d': the model has 0..%d", slot,
                        g->nslots - 1);
    if (lo < 0 || hi > L || lo > hi || (lo == hi && !ends))
        return coh_errf(COH_ERR_INVALID, "invalid layer range %d..%d: the model has layers "
                        "0..%d", lo, hi - 1, L - 1);
    if (ends & ~(COH_GPT_EMBEDDINGS | COH_GPT_HEAD))
        return coh_errf(COH_ERR_INVALID, "invalid chunk ends '%d'", ends);
    if (((ends & COH_GPT_EMBEDDINGS) && lo != 0) || ((ends & COH_GPT_HEAD) && hi != L))
        return coh_errf(COH_ERR_INVALID, "layer range %d..%d: the embeddings come before block "
                        "0 and the head after block %d", lo, hi - 1, L - 1);
    if ((lo > 0 || hi < L || ends != (COH_GPT_EMBEDDINGS | COH_GPT_HEAD)) && !g->slot_acts)
        return coh_errf(COH_ERR_INVALID, "layer range %d..%d: a stage needs coh_gpt_set_slots",
                        lo, hi - 1);
    if (!gpt_slot_keeps(g, &g->slot[slot], lo, hi, ends))
        return coh_errf(COH_ERR_INVALID, "layer range %d..%d: slot %d keeps no activations for "
                        "it (the stage's slots were sized for other layers)", lo, hi - 1, slot);
    if (B < 1 || B > g->maxB)
        return coh_errf(COH_ERR_INVALID, "invalid batch '%d': the model was created for 1..%d",
                        B, g->maxB);
    if (T < 1 || T > g->maxT)
        return coh_errf(COH_ERR_INVALID,
                        "invalid sequence length '%d': the model was created for 1..%d", T,
                        g->maxT);
    if (g->sp && ((size_t)B * T) % (size_t)g->tp)
        return coh_errf(COH_ERR_INVALID, "sequence parallelism splits the %d x %d rows of a "
                        "micro-batch over %d tp ranks: make B x T a multiple of %d", B, T, g->tp,
                        g->tp);
    return COH_OK;
}

/* Where the head adds its part of dL/dwte: the tied matrix's gradient, or the buffer that keeps
 * it apart until the step's end. */
static float *head_dwte(coh_gpt *g) { return g->head_dwte ? g->head_dwte : g->gw.wte; }

/* The final LayerNorm and the fused head (vocabulary-parallel on a shard): the mean loss, and
 * with grad_scale > 0 dL/dlnf into dlnf (summed over the shards) and the head's part of dwte. */
static coh_status head_forward(coh_gpt *g, gpt_slot *sl, const int32_t *targets, int B, int T,
                               float grad_scale, float *dlnf, float *loss)
{
    int C = g->cfg.dim, L = g->cfg.layers;
    size_t N = (size_t)B * T, R = gpt_rows(g, N);
    coh_status st = COH_OK;
    params(g, L, COH_PARAM_NEED_FORWARD);
    /* this rank's rows of the final LayerNorm; the head reads all of them */
    float *own = g->sp ? g->dtmp : sl->lnf;
    BE->layernorm_forward(own, sl->lnf_mean, sl->lnf_rstd, sl->la[L - 1].res3, g->w.lnfw,
                         g->w.lnfb, R, C);
    const float *lnf = gpt_tp_all_rows(g, own, N, "ln_f rows", &st);
    if (lnf && lnf != sl->lnf)
        BE->copy(sl->lnf, lnf, N * (size_t)C * F4, COH_COPY_D2D);
    if (st)
        return st;
    params(g, -1, COH_PARAM_NEED_FORWARD);
    gpt_vocab_part part = gpt_tp_vocab(g);
    float *d = grad_scale > 0.0f ? dlnf : NULL;
    BE->copy(sl->targets, targets, N * sizeof *targets, COH_COPY_H2D);
    st = BE->head_loss(&g->mm, sl->losses, d, head_dwte(g), g->logits, g->chunk_rows, sl->lnf,
                       g->w.wte, sl->targets, N, C, g->cfg.vocab, grad_scale, &part);
    params(g, -1, COH_PARAM_DONE);
    if (!st && d) /* this rank's rows of dL/dlnf, at the start of dlnf */
        st = gpt_tp_reduce_rows(g, d, N, "head input gradient");
    if (st)
        return st;
    *loss = (float)(BE->sum(sl->losses, N) / (double)N);
    if (grad_scale <= 0.0f)
        params(g, L, COH_PARAM_DONE);
    return COH_OK;
}

/* ---- the head split by vocabulary along a pipeline (head_shards > 1) -------------------------
 * Shard k holds rows coh_pipe_head_shard_row(V, k..k+1, n) of the tied wte and runs after shard
 * k - 1. Between shards travel the final LayerNorm's output h (N rows of C) and, per row, the
 * running statistics of the softmax over the rows before: max, sum of exp relative to it, and
 * the target's logit (0 until the target's shard): an online log-sum-exp. The last shard has
 * them all, so it computes the loss and its own gradients in its forward, as the whole head
 * does; going back, each shard receives dL/dh summed over the shards after it and the final max
 * and sum per row, adds its own dL/dh and dL/dwte rows from its logits (kept from the forward,
 * or recomputed), and shard 0 runs the final LayerNorm's backward. The statistics are combined
 * by op_head_loss's reduce step, where tensor parallelism sums them over its shards. */

typedef struct shard_run {
    float *stat;         /* (N, 3) forward: the running statistics, read then updated */
    const float *final;  /* (N, 3) backward: the final max and sum of every row, or NULL */
    size_t r0;           /* rows done */
    float max[GPT_HEAD_CHUNK]; /* the chunk's combined maxima, between the two calls */
} shard_run;

/* op_head_loss's reduce step for one shard: the chunk's row maxima (max = 1), then its (sum of
 * exp relative to the combined max, target logit) pairs (max = 0). */
static coh_status shard_combine(void *ctx, float *x, size_t n, int max)
{
    shard_run *r = ctx;
    if (max) {
        for (size_t i = 0; i < n; i++) {
            const float *f = r->final ? r->final : r->stat;
            float m = f[3 * (r->r0 + i)];
            x[i] = r->final || m > x[i] ? m : x[i];
            r->max[i] = x[i];
        }
        return COH_OK;
    }
    for (size_t i = 0; i < n / 2; i++) {
        size_t row = r->r0 + i;
        if (r->final) {
            x[2 * i] = r->final[3 * row + 1];
            continue;
        }
        float *s = r->stat + 3 * row, m = s[0];
        /* the rows before, rescaled to the combined max (none before shard 0: m = -inf) */
        if (m > -INFINITY)
            x[2 * i] += s[1] * expf(m - r->max[i]);
        x[2 * i + 1] += s[2];
        s[0] = r->max[i];
        s[1] = x[2 * i];
        s[2] = x[2 * i + 1];
    }
    r->r0 += n / 2;
    return COH_OK;
}

/* The vocabulary rows of shard k. */
static void shard_rows(const coh_gpt *g, int k, int *v0, int *vn)
{
    *v0 = coh_pipe_head_shard_row(g->cfg.vocab, k, g->head_shards);
    *vn = coh_pipe_head_shard_row(g->cfg.vocab, k + 1, g->head_shards) - *v0;
}

/* Shard k's forward on the slot's h and g->hrun; the last shard also writes the losses, the
 * final statistics (sl->hstat) and, with grad_scale > 0, its dL/dh into sl->dlnf. */
static coh_status shard_forward(coh_gpt *g, gpt_slot *sl, int k, size_t N, float grad_scale)
{
    int C = g->cfg.dim, v0, vn, last = k == g->head_shards - 1;
    shard_rows(g, k, &v0, &vn);
    shard_run run = {.stat = g->hrun};
    gpt_vocab_part part = {v0, vn, shard_combine, &run, NULL, 0};
    if (!last && g->hkeep_off[k] >= 0)
        part.kept = sl->hkeep + g->hkeep_off[k];
    float *d = last && grad_scale > 0.0f ? sl->dlnf : NULL;
    params(g, -1, COH_PARAM_NEED_FORWARD);
    coh_status st = BE->head_loss(&g->mm, last ? sl->losses : g->hloss, d,
                                  head_dwte(g) + (size_t)v0 * C,
                                 g->logits, g->chunk_rows, sl->lnf, g->w.wte + (size_t)v0 * C,
                                 sl->targets, N, C, vn, grad_scale, &part);
    params(g, -1, COH_PARAM_DONE);
    if (!st && last)
        BE->copy(sl->hstat, g->hrun, 3 * N * F4, COH_COPY_D2D);
    return st;
}

/* Shard k's backward (k before the last): adds its dL/dh into sl->dlnf and its rows' dL/dwte,
 * from the final statistics `final` (N, 3). */
static coh_status shard_backward(coh_gpt *g, gpt_slot *sl, int k, size_t N, const float *final)
{
    int C = g->cfg.dim, v0, vn;
    shard_rows(g, k, &v0, &vn);
    shard_run run = {.final = final};
    gpt_vocab_part part = {v0, vn, shard_combine, &run, NULL, 0};
    if (g->hkeep_off[k] >= 0) {
        part.kept = sl->hkeep + g->hkeep_off[k];
        part.kept_ready = 1;
    }
    params(g, -1, COH_PARAM_NEED_BACKWARD);
    coh_status st = BE->head_loss(&g->mm, g->hloss, g->dtmp, head_dwte(g) + (size_t)v0 * C,
                                 g->logits, g->chunk_rows, sl->lnf, g->w.wte + (size_t)v0 * C, sl->targets,
                                 N, C, vn, sl->hscale, &part);
    params(g, -1, COH_PARAM_DONE);
    if (st)
        return st;
    BE->add(sl->dlnf, g->dtmp, N * (size_t)C);
    return COH_OK;
}

/* Where block l's input is kept: the previous block's output, or the embeddings' (l = 0). */
static float *block_input(gpt_slot *sl, int l) { return l ? sl->la[l - 1].res3 : sl->encoded; }

static int stage_ends(const coh_gpt *g, int lo, int hi)
{
    return (lo == 0 ? COH_GPT_EMBEDDINGS : 0) | (hi == g->cfg.layers ? COH_GPT_HEAD : 0);
}

coh_status coh_gpt_stage_forward(coh_gpt *g, int slot, int lo, int hi, const int32_t *tokens,
                                 const float *x_in, const int32_t *targets, int B, int T,
                                 float grad_scale, float *x_out, float *loss)
{
    if (lo >= hi)
        return coh_errf(COH_ERR_INVALID, "invalid layer range %d..%d: the model has layers "
                        "0..%d", lo, hi - 1, g->cfg.layers - 1);
    return coh_gpt_chunk_forward(g, slot, lo, hi, stage_ends(g, lo, hi), tokens, x_in, targets,
                                 B, T, grad_scale, x_out, loss);
}

coh_status coh_gpt_stage_backward(coh_gpt *g, int slot, int lo, int hi, const float *dout, int B,
                                  int T, float *dx_in)
{
    if (lo >= hi)
        return coh_errf(COH_ERR_INVALID, "invalid layer range %d..%d: the model has layers "
                        "0..%d", lo, hi - 1, g->cfg.layers - 1);
    return coh_gpt_chunk_backward(g, slot, lo, hi, stage_ends(g, lo, hi), dout, B, T, dx_in);
}

/* Shards hlo..hhi-1 of the head split in g->head_shards (hlo == hhi: none; with one shard,
 * 0..1 is COH_GPT_HEAD). */
static coh_status check_shards(const coh_gpt *g, int lo, int hi, int ends, int hlo, int hhi)
{
    int L = g->cfg.layers, n = g->head_shards;
    if (hlo < 0 || hhi > n || hlo > hhi)
        return coh_errf(COH_ERR_INVALID, "invalid head shards %d..%d: the head has shards "
                        "0..%d", hlo, hhi - 1, n - 1);
    if (hhi > hlo && hi != L)
        return coh_errf(COH_ERR_INVALID, "head shards %d..%d after block %d: the head comes "
                        "after block %d", hlo, hhi - 1, hi - 1, L - 1);
    if (hlo > 0 && (lo < hi || (ends & COH_GPT_EMBEDDINGS)))
        return coh_errf(COH_ERR_INVALID, "head shard %d after blocks: a chunk holding blocks "
                        "goes on to the head from shard 0", hlo);
    return COH_OK;
}

static coh_status chunk_forward(coh_gpt *g, int slot, int lo, int hi, int ends, int hlo, int hhi,
                                const int32_t *tokens, const float *x_in,
                                const int32_t *targets, int B, int T, float grad_scale,
                                float *x_out, float *loss)
{
    coh_status st = check_stage(g, slot, lo, hi, ends | (hhi > hlo ? COH_GPT_HEAD : 0), B, T);
    int C = g->cfg.dim, L = g->cfg.layers, first = ends & COH_GPT_EMBEDDINGS;
    int n = g->head_shards, head = hhi > hlo, last = hhi == n && head;
    size_t N = (size_t)B * T, R = gpt_rows(g, N);
    if (!st)
        st = check_shards(g, lo, hi, ends, hlo, hhi);
    if (st)
        return st;
    gpt_slot *sl = &g->slot[slot];
    if (first && !tokens)
        st = coh_errf(COH_ERR_INVALID, "the first stage needs tokens");
    if (!st && !first && !x_in)
        st = coh_errf(COH_ERR_INVALID, "a stage after the first needs its input activation");
    if (!st && head && !targets)
        st = coh_errf(COH_ERR_INVALID, "targets are required for a training or eval step");
    if (!st && !last && !x_out)
        st = coh_errf(COH_ERR_INVALID, "a stage before the last needs a buffer for its output");
    if (!st && first)
        st = check_ids(g, tokens, N, "token");
    if (!st && head)
        st = check_ids(g, targets, N, "target");
    if (st)
        return st;
    if (first) {
        BE->copy(sl->tokens, tokens, N * sizeof *tokens, COH_COPY_H2D);
        params(g, -1, COH_PARAM_NEED_FORWARD);
        st = embed(g, sl->encoded, sl->tokens, B, T);
        params(g, -1, COH_PARAM_DONE);
        if (st)
            return st;
    } else if (hlo > 0) { /* h and the running statistics from the shard before */
        BE->copy(sl->lnf, x_in, N * C * F4, COH_COPY_D2D);
        BE->copy(g->hrun, x_in + N * C, 3 * N * F4, COH_COPY_D2D);
    } else {
        /* the input lands where the whole model keeps block lo - 1's output (the embeddings'
         * for lo = 0; another stage's, so its place in this slot is free), and block lo's
         * backward (or the head's LayerNorm) reads it there; each model chunk of a rank keeps
         * its own input */
        BE->copy(block_input(sl, lo), x_in, R * C * F4, COH_COPY_D2D);
    }
    for (int l = lo; l < hi; l++) {
        params(g, l, COH_PARAM_NEED_FORWARD);
        st = block_forward(g, sl, l, block_input(sl, l), B, T);
        params(g, l, COH_PARAM_DONE);
        if (st)
            return st;
    }
    if (!head) {
        BE->copy(x_out, block_input(sl, hi), R * C * F4, COH_COPY_D2D);
        return COH_OK;
    }
    if (n == 1) /* the whole model on one device keeps dL/dlnf in dtmp until the backward */
        return head_forward(g, sl, targets, B, T, grad_scale, g->slot_acts ? sl->dlnf : g->dtmp,
                            loss);
    if (hlo == 0) { /* shard 0: the final LayerNorm, and no statistics yet */
        params(g, L, COH_PARAM_NEED_FORWARD);
        BE->layernorm_forward(sl->lnf, sl->lnf_mean, sl->lnf_rstd, sl->la[L - 1].res3,
                              g->w.lnfw, g->w.lnfb, N, C);
        /* no statistics yet: max -inf, sum of exp and target logit 0 */
        BE->set(g->hrun, 0, 3 * N * F4);
        BE->fill(g->hrun, N, 3, -INFINITY);
    }
    BE->copy(sl->targets, targets, N * sizeof *targets, COH_COPY_H2D);
    sl->hscale = grad_scale;
    for (int k = hlo; !st && k < hhi; k++)
        st = shard_forward(g, sl, k, N, grad_scale);
    if (st)
        return st;
    if (hlo == 0 && grad_scale <= 0.0f) /* no backward to end the LayerNorm's use */
        params(g, L, COH_PARAM_DONE);
    if (!last) {
        BE->copy(x_out, sl->lnf, N * C * F4, COH_COPY_D2D);
        BE->copy(x_out + N * C, g->hrun, 3 * N * F4, COH_COPY_D2D);
        return COH_OK;
    }
    *loss = (float)(BE->sum(sl->losses, N) / (double)N);
    return COH_OK;
}

coh_status coh_gpt_chunk_forward(coh_gpt *g, int slot, int lo, int hi, int ends,
                                 const int32_t *tokens, const float *x_in, const int32_t *targets,
                                 int B, int T, float grad_scale, float *x_out, float *loss)
{
    int h = ends & COH_GPT_HEAD ? g->head_shards : 0;
    return chunk_forward(g, slot, lo, hi, ends & ~COH_GPT_HEAD, 0, h, tokens, x_in, targets, B,
                         T, grad_scale, x_out, loss);
}

coh_status coh_gpt_shards_forward(coh_gpt *g, int slot, int lo, int hi, int ends, int head_lo,
                                  int head_hi, const int32_t *tokens, const float *x_in,
                                  const int32_t *targets, int B, int T, float grad_scale,
                                  float *x_out, float *loss)
{
    return chunk_forward(g, slot, lo, hi, ends & ~COH_GPT_HEAD, head_lo, head_hi, tokens, x_in,
                         targets, B, T, grad_scale, x_out, loss);
}

static coh_status chunk_backward(coh_gpt *g, int slot, int lo, int hi, int ends, int hlo,
                                 int hhi, const float *dout, int B, int T, float *dx_in)
{
    coh_status st = check_stage(g, slot, lo, hi, ends | (hhi > hlo ? COH_GPT_HEAD : 0), B, T);
    int C = g->cfg.dim, L = g->cfg.layers, first = ends & COH_GPT_EMBEDDINGS;
    int n = g->head_shards, head = hhi > hlo, last = hhi == n && head;
    size_t N = (size_t)B * T, R = gpt_rows(g, N);
    if (!st)
        st = check_shards(g, lo, hi, ends, hlo, hhi);
    if (!st && !last && !dout)
        st = coh_errf(COH_ERR_INVALID, "a stage before the last needs its output's gradient");
    if (!st && !first && !dx_in)
        st = coh_errf(COH_ERR_INVALID, "a stage after the first needs a buffer for its input's "
                      "gradient");
    if (st)
        return st;
    gpt_slot *sl = &g->slot[slot];
    if (head && n > 1) { /* dL/dh of the shards after, then this chunk's shards' own */
        const float *final = last ? sl->hstat : dout + N * C;
        if (!last)
            BE->copy(sl->dlnf, dout, N * C * F4, COH_COPY_D2D);
        for (int k = (last ? n - 1 : hhi) - 1; !st && k >= hlo; k--)
            st = shard_backward(g, sl, k, N, final);
        if (st)
            return st;
        if (hlo > 0) { /* dL/dh and the final statistics on to the shard before */
            BE->copy(dx_in, sl->dlnf, N * C * F4, COH_COPY_D2D);
            BE->copy(dx_in + N * C, final, 3 * N * F4, COH_COPY_D2D); /* may overlap */
            return COH_OK;
        }
    }
    if (head) {
        BE->set(g->dres, 0, R * C * F4);
        float *dln = ln_grads(g, g->gw.lnfw);
        BE->layernorm_backward(g->dres, dln, dln + C, g->slot_acts ? sl->dlnf : g->dtmp,
                              sl->la[L - 1].res3, g->w.lnfw, sl->lnf_mean, sl->lnf_rstd, R, C);
        if ((st = ln_grads_done(g, g->gw.lnfw, "ln_f gradients")))
            return st;
        params(g, L, COH_PARAM_DONE);
        report(g, L);
    } else {
        BE->copy(g->dres, dout, R * C * F4, COH_COPY_D2D);
    }
    for (int l = hi - 1; l >= lo; l--) {
        params(g, l, COH_PARAM_NEED_BACKWARD);
        st = block_backward(g, sl, l, block_input(sl, l), B, T);
        params(g, l, COH_PARAM_DONE);
        if (st)
            return st;
        report(g, l);
    }
    if (first) { /* every row's gradient reaches this shard's vocabulary rows */
        const float *all = gpt_tp_all_rows(g, g->dres, N, "embedding gradient rows", &st);
        if (!all)
            return st;
        BE->encoder_backward(g->gw.wte, g->gw.wpe, all, sl->tokens, B, T, C, g->v0, g->Vv);
        report(g, -1);
    } else {
        BE->copy(dx_in, g->dres, R * C * F4, COH_COPY_D2D);
    }
    return COH_OK;
}

coh_status coh_gpt_chunk_backward(coh_gpt *g, int slot, int lo, int hi, int ends,
                                  const float *dout, int B, int T, float *dx_in)
{
    int h = ends & COH_GPT_HEAD ? g->head_shards : 0;
    return chunk_backward(g, slot, lo, hi, ends & ~COH_GPT_HEAD, 0, h, dout, B, T, dx_in);
}

coh_status coh_gpt_shards_backward(coh_gpt *g, int slot, int lo, int hi, int ends, int head_lo,
                                   int head_hi, const float *dout, int B, int T, float *dx_in)
{
    return chunk_backward(g, slot, lo, hi, ends & ~COH_GPT_HEAD, head_lo, head_hi, dout, B, T,
                          dx_in);
}

size_t coh_gpt_chunk_message(const coh_gpt *g, int B, int T)
{
    size_t N = (size_t)B * T;
    return gpt_rows(g, N) * (size_t)g->cfg.dim + (g->head_shards > 1 ? 3 * N : 0);
}

coh_status coh_gpt_step(coh_gpt *g, const int32_t *tokens, const int32_t *targets, int B, int T,
                        float grad_scale, float *loss)
{
    int L = g->cfg.layers;
    coh_status st = coh_gpt_stage_forward(g, 0, 0, L, tokens, NULL, targets, B, T, grad_scale,
                                          NULL, loss);
    if (st || grad_scale <= 0.0f)
        return st;
    return coh_gpt_stage_backward(g, 0, 0, L, NULL, B, T, NULL);
}

coh_status coh_gpt_next_logits(coh_gpt *g, const int32_t *tokens, int T, float *logits)
{
    int C = g->cfg.dim, L = g->cfg.layers;
    coh_status st = check_stage(g, 0, 0, L, COH_GPT_EMBEDDINGS | COH_GPT_HEAD, 1, T);
    if (!st && g->tp > 1)
        st = coh_errf(COH_ERR_UNSUPPORTED, "sampling from a tensor-parallel shard: load the "
                      "checkpoint (whole tensors) into one model");
    if (!st)
        st = check_ids(g, tokens, (size_t)T, "token");
    if (st)
        return st;
    gpt_slot *sl = &g->slot[0];
    BE->copy(sl->tokens, tokens, (size_t)T * sizeof *tokens, COH_COPY_H2D);
    params(g, -1, COH_PARAM_NEED_FORWARD);
    st = embed(g, sl->encoded, sl->tokens, 1, T);
    params(g, -1, COH_PARAM_DONE);
    if (st)
        return st;
    for (int l = 0; l < L; l++) {
        params(g, l, COH_PARAM_NEED_FORWARD);
        st = block_forward(g, sl, l, l ? sl->la[l - 1].res3 : sl->encoded, 1, T);
        params(g, l, COH_PARAM_DONE);
        if (st)
            return st;
    }
    params(g, L, COH_PARAM_NEED_FORWARD);
    BE->layernorm_forward(sl->lnf, sl->lnf_mean, sl->lnf_rstd, sl->la[L - 1].res3, g->w.lnfw,
                         g->w.lnfb, (size_t)T, C);
    params(g, -1, COH_PARAM_NEED_FORWARD);
    BE->head_logits(&g->mm, logits, sl->lnf + (size_t)(T - 1) * C, g->w.wte, C, g->cfg.vocab);
    params(g, -1, COH_PARAM_DONE);
    params(g, L, COH_PARAM_DONE);
    return COH_OK;
}
