/* gpt_step.c: one forward pass with the fused loss, and the backward pass that follows it,
 * block by block in reverse, reporting each block's finished gradients to the hook. */
#include <math.h>
#include <string.h>

#include "cohort/train.h"
#include "train/model/gpt_int.h"

static coh_status block_forward(coh_gpt *g, int l, const float *x, int B, int T)
{
    int C = g->cfg.dim, NH = g->cfg.heads;
    size_t N = (size_t)B * T;
    const gpt_block *w = &g->blk[l];
    gpt_layer_acts *a = &g->la[l];
    op_layernorm_forward(a->ln1, a->ln1_mean, a->ln1_rstd, x, w->ln1w, w->ln1b, N, C);
    op_matmul_forward(a->qkv, a->ln1, w->qkvw, w->qkvb, N, C, 3 * C);
    if (op_attention_forward(a->atty, a->att_lse, a->qkv, B, T, C, NH))
        return coh_errf(COH_ERR_NOMEM, "out of memory in attention");
    /* the attention-output projection writes into dtmp, free during forward */
    op_matmul_forward(g->dtmp, a->atty, w->attprojw, w->attprojb, N, C, C);
    op_residual_forward(a->res2, x, g->dtmp, N * C);
    op_layernorm_forward(a->ln2, a->ln2_mean, a->ln2_rstd, a->res2, w->ln2w, w->ln2b, N, C);
    op_matmul_forward(a->fch, a->ln2, w->fcw, w->fcb, N, C, 4 * C);
    op_gelu_forward(a->fch_gelu, a->fch, N * 4 * C);
    op_matmul_forward(g->dtmp, a->fch_gelu, w->fcprojw, w->fcprojb, N, 4 * C, C);
    op_residual_forward(a->res3, a->res2, g->dtmp, N * C);
    return COH_OK;
}

/* dres holds dL/d(block output) on entry and dL/d(block input) on return. */
static coh_status block_backward(coh_gpt *g, int l, const float *x, int B, int T)
{
    int C = g->cfg.dim, NH = g->cfg.heads;
    size_t N = (size_t)B * T;
    const gpt_block *w = &g->blk[l];
    gpt_block *gw = &g->gblk[l];
    gpt_layer_acts *a = &g->la[l];
    float *dres = g->dres, *dtmp = g->dtmp, *dwide = g->dwide;
    op_matmul_backward(dwide, gw->fcprojw, gw->fcprojb, dres, a->fch_gelu, w->fcprojw, N, 4 * C,
                       C, 0);
    op_gelu_backward(dwide, a->fch, dwide, N * 4 * C);
    op_matmul_backward(dtmp, gw->fcw, gw->fcb, dwide, a->ln2, w->fcw, N, C, 4 * C, 0);
    op_layernorm_backward(dres, gw->ln2w, gw->ln2b, dtmp, a->res2, w->ln2w, a->ln2_mean,
                          a->ln2_rstd, N, C);
    op_matmul_backward(dtmp, gw->attprojw, gw->attprojb, dres, a->atty, w->attprojw, N, C, C, 0);
    if (op_attention_backward(dwide, dtmp, a->qkv, a->att_lse, B, T, C, NH))
        return coh_errf(COH_ERR_NOMEM, "out of memory in attention backward");
    op_matmul_backward(dtmp, gw->qkvw, NULL, dwide, a->ln1, w->qkvw, N, C, 3 * C, 0);
    op_qkv_bias_backward(gw->qkvb, dwide, N, C);
    op_layernorm_backward(dres, gw->ln1w, gw->ln1b, dtmp, x, w->ln1w, a->ln1_mean, a->ln1_rstd,
                          N, C);
    return COH_OK;
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

static coh_status check_batch(const coh_gpt *g, const int32_t *tok, const int32_t *tgt, int B,
                              int T)
{
    if (B < 1 || B > g->maxB)
        return coh_errf(COH_ERR_INVALID, "invalid batch '%d': the model was created for 1..%d",
                        B, g->maxB);
    if (T < 1 || T > g->maxT)
        return coh_errf(COH_ERR_INVALID,
                        "invalid sequence length '%d': the model was created for 1..%d", T,
                        g->maxT);
    for (size_t i = 0; i < (size_t)B * T; i++) {
        if (tok[i] < 0 || tok[i] >= g->cfg.vocab)
            return coh_errf(COH_ERR_INVALID, "invalid token id '%d' at %zu: vocab is 0..%d",
                            tok[i], i, g->cfg.vocab - 1);
        if (tgt && (tgt[i] < 0 || tgt[i] >= g->cfg.vocab))
            return coh_errf(COH_ERR_INVALID, "invalid target id '%d' at %zu: vocab is 0..%d",
                            tgt[i], i, g->cfg.vocab - 1);
    }
    return COH_OK;
}

/* Forward through the final LayerNorm; leaves g->lnf (B,T,C). */
static coh_status forward_trunk(coh_gpt *g, const int32_t *tok, int B, int T)
{
    int C = g->cfg.dim, L = g->cfg.layers;
    size_t N = (size_t)B * T;
    memcpy(g->tokens, tok, N * sizeof *tok);
    params(g, -1, COH_PARAM_NEED_FORWARD);
    op_encoder_forward(g->encoded, tok, g->w.wte, g->w.wpe, B, T, C);
    params(g, -1, COH_PARAM_DONE);
    for (int l = 0; l < L; l++) {
        params(g, l, COH_PARAM_NEED_FORWARD);
        coh_status st = block_forward(g, l, l ? g->la[l - 1].res3 : g->encoded, B, T);
        params(g, l, COH_PARAM_DONE);
        if (st)
            return st;
    }
    params(g, L, COH_PARAM_NEED_FORWARD);
    op_layernorm_forward(g->lnf, g->lnf_mean, g->lnf_rstd, g->la[L - 1].res3, g->w.lnfw,
                         g->w.lnfb, N, C);
    return COH_OK;
}

coh_status coh_gpt_step(coh_gpt *g, const int32_t *tokens, const int32_t *targets, int B, int T,
                        float grad_scale, float *loss)
{
    coh_status st = check_batch(g, tokens, targets, B, T);
    if (st)
        return st;
    if (!targets)
        return coh_errf(COH_ERR_INVALID, "targets are required for a training or eval step");
    int C = g->cfg.dim, L = g->cfg.layers;
    size_t N = (size_t)B * T;
    if ((st = forward_trunk(g, tokens, B, T)))
        return st;
    int train = grad_scale > 0.0f;
    params(g, -1, COH_PARAM_NEED_FORWARD);
    /* the fused head writes dL/dlnf into dtmp and adds the LM-head part of dwte */
    op_head_loss(g->losses, train ? g->dtmp : NULL, g->gw.wte, g->logits, g->chunk_rows, g->lnf,
                 g->w.wte, targets, N, C, g->cfg.vocab, grad_scale);
    params(g, -1, COH_PARAM_DONE);
    double sum = 0.0;
    for (size_t i = 0; i < N; i++)
        sum += g->losses[i];
    *loss = (float)(sum / (double)N);
    if (!train) {
        params(g, L, COH_PARAM_DONE);
        return COH_OK;
    }
    memset(g->dres, 0, N * C * sizeof(float));
    op_layernorm_backward(g->dres, g->gw.lnfw, g->gw.lnfb, g->dtmp, g->la[L - 1].res3, g->w.lnfw,
                          g->lnf_mean, g->lnf_rstd, N, C);
    params(g, L, COH_PARAM_DONE);
    report(g, L);
    for (int l = L - 1; l >= 0; l--) {
        params(g, l, COH_PARAM_NEED_BACKWARD);
        st = block_backward(g, l, l ? g->la[l - 1].res3 : g->encoded, B, T);
        params(g, l, COH_PARAM_DONE);
        if (st)
            return st;
        report(g, l);
    }
    op_encoder_backward(g->gw.wte, g->gw.wpe, g->dres, g->tokens, B, T, C);
    report(g, -1);
    return COH_OK;
}

coh_status coh_gpt_next_logits(coh_gpt *g, const int32_t *tokens, int T, float *logits)
{
    coh_status st = check_batch(g, tokens, NULL, 1, T);
    if (st)
        return st;
    if ((st = forward_trunk(g, tokens, 1, T)))
        return st;
    params(g, -1, COH_PARAM_NEED_FORWARD);
    op_head_logits(logits, g->lnf + (size_t)(T - 1) * g->cfg.dim, g->w.wte, g->cfg.dim,
                   g->cfg.vocab);
    params(g, -1, COH_PARAM_DONE);
    params(g, g->cfg.layers, COH_PARAM_DONE);
    return COH_OK;
}
