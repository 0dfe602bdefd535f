/* gpt_config.c: GPT-2 presets, the layer-major arena layout, and the memory estimator. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "cohort/plan.h"
#include "cohort/train.h"
#include "train/model/gpt_int.h"

/* The presets are the estimator's (one table of GPT-2 sizes). */
coh_status coh_gpt_preset(const char *name, coh_gpt_config *out)
{
    coh_model_desc m;
    coh_status st = coh_model_preset(name, &m);
    if (st)
        return st;
    *out = (coh_gpt_config){(int)m.layers, (int)m.heads, (int)m.dim, (int)m.vocab,
                            (int)m.positions};
    return COH_OK;
}

coh_status coh_gpt_config_check(const coh_gpt_config *c)
{
    static const int cap = 1 << 20;
    const struct { const char *name; int v; } f[] = {
        {"layers", c->layers}, {"heads", c->heads}, {"dim", c->dim},
        {"vocab", c->vocab},   {"seq", c->seq},
    };
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++)
        if (f[i].v < 1 || f[i].v > cap)
            return coh_errf(COH_ERR_INVALID, "invalid %s '%d': must be between 1 and %d",
                            f[i].name, f[i].v, cap);
    if (c->dim % c->heads)
        return coh_errf(COH_ERR_INVALID,
                        "invalid dim '%d': must be a multiple of heads (%d)", c->dim, c->heads);
    double p = (double)coh_gpt_param_count(c);
    if (p * 4.0 * 4.0 > (double)SIZE_MAX / 2 || p > 1e12)
        return coh_errf(COH_ERR_INVALID, "model too large: %.3g parameters", p);
    return COH_OK;
}

/* Per-block tensor table: name suffix, rows, cols (cols 0 = vector), decay, scaled init. */
static const struct {
    const char *suffix;
    int rows, cols; /* in units of C; 0 cols means 1-D */
    int decay;
} block[GPT_BLOCK_TENSORS] = {
    {"ln_1.weight", 1, 0, 0},      {"ln_1.bias", 1, 0, 0},
    {"attn.c_attn.weight", 1, 3, 1}, {"attn.c_attn.bias", 3, 0, 0},
    {"attn.c_proj.weight", 1, 1, 1}, {"attn.c_proj.bias", 1, 0, 0},
    {"ln_2.weight", 1, 0, 0},      {"ln_2.bias", 1, 0, 0},
    {"mlp.c_fc.weight", 1, 4, 1},  {"mlp.c_fc.bias", 4, 0, 0},
    {"mlp.c_proj.weight", 4, 1, 1}, {"mlp.c_proj.bias", 1, 0, 0},
};

static size_t block_size(size_t C) { return 12 * C * C + 13 * C; }

size_t coh_gpt_param_count(const coh_gpt_config *c)
{
    size_t C = (size_t)c->dim;
    return (size_t)c->vocab * C + (size_t)c->seq * C + (size_t)c->layers * block_size(C) + 2 * C;
}

int coh_gpt_tensor_count(const coh_gpt_config *c) { return 4 + GPT_BLOCK_TENSORS * c->layers; }

void coh_gpt_layer_range(const coh_gpt_config *c, int layer, size_t *begin, size_t *end)
{
    size_t C = (size_t)c->dim, emb = ((size_t)c->vocab + (size_t)c->seq) * C;
    if (layer < 0) {
        *begin = 0;
        *end = emb;
    } else if (layer >= c->layers) {
        *begin = emb + (size_t)c->layers * block_size(C);
        *end = *begin + 2 * C;
    } else {
        *begin = emb + (size_t)layer * block_size(C);
        *end = *begin + block_size(C);
    }
}

static void set_info(coh_tensor_info *t, const char *name, size_t r, size_t cols, size_t off,
                     int layer, int decay)
{
    snprintf(t->name, sizeof t->name, "%s", name);
    t->ndim = cols ? 2 : 1;
    t->shape[0] = r;
    t->shape[1] = cols ? cols : 1;
    t->numel = r * (cols ? cols : 1);
    t->offset = off;
    t->layer = layer;
    t->decay = decay;
}

coh_status coh_gpt_tensor(const coh_gpt_config *c, int i, coh_tensor_info *out)
{
    size_t C = (size_t)c->dim, V = (size_t)c->vocab, T = (size_t)c->seq;
    int n = coh_gpt_tensor_count(c);
    if (i < 0 || i >= n)
        return coh_errf(COH_ERR_INVALID, "invalid tensor index '%d': must be 0..%d", i, n - 1);
    size_t b, e;
    if (i == 0) {
        set_info(out, "transformer.wte.weight", V, C, 0, -1, 1);
    } else if (i == 1) {
        set_info(out, "transformer.wpe.weight", T, C, V * C, -1, 1);
    } else if (i >= n - 2) {
        coh_gpt_layer_range(c, c->layers, &b, &e);
        set_info(out, i == n - 2 ? "transformer.ln_f.weight" : "transformer.ln_f.bias", C, 0,
                 b + (size_t)(i - (n - 2)) * C, -1, 0);
    } else {
        int l = (i - 2) / GPT_BLOCK_TENSORS, k = (i - 2) % GPT_BLOCK_TENSORS;
        coh_gpt_layer_range(c, l, &b, &e);
        size_t off = b;
        for (int j = 0; j < k; j++)
            off += (size_t)block[j].rows * C * (block[j].cols ? (size_t)block[j].cols * C : 1);
        char name[64];
        snprintf(name, sizeof name, "transformer.h.%d.%s", l, block[k].suffix);
        set_info(out, name, (size_t)block[k].rows * C, (size_t)block[k].cols * C, off, l,
                 block[k].decay);
    }
    return COH_OK;
}

double coh_gpt_flops_per_token(const coh_gpt_config *c, int T)
{
    double C = c->dim, L = c->layers;
    double matmul = L * 12.0 * C * C + (double)c->vocab * C;
    return 6.0 * matmul + 12.0 * L * (double)T * C;
}

/* Sizes in floats of every activation buffer; gpt.c carves its allocation from the same table,
 * so the estimate is the allocation. */
void gpt_act_sizes(const coh_gpt_config *c, int B, int T, gpt_act_sizes_t *s)
{
    size_t BT = (size_t)B * T, C = (size_t)c->dim, L = (size_t)c->layers;
    size_t NH = (size_t)c->heads;
    s->per_layer = 16 * BT * C + 4 * BT + BT * NH;
    s->saved = 2 * BT * C + 3 * BT + L * s->per_layer + BT /* token copy, int32 */;
    s->grads = 6 * BT * C;
    s->chunk_rows = BT < GPT_HEAD_CHUNK ? BT : GPT_HEAD_CHUNK;
    s->logits = s->chunk_rows * (size_t)c->vocab;
}

coh_status coh_train_memory_estimate(const coh_gpt_config *c, int B, int T, coh_train_memory *out)
{
    coh_status st = coh_gpt_config_check(c);
    if (st)
        return st;
    if (B < 1)
        return coh_errf(COH_ERR_INVALID, "invalid batch '%d': must be at least 1", B);
    if (T < 1 || T > c->seq)
        return coh_errf(COH_ERR_INVALID, "invalid sequence length '%d': must be 1..%d", T,
                        c->seq);
    gpt_act_sizes_t s;
    gpt_act_sizes(c, B, T, &s);
    size_t P = coh_gpt_param_count(c) * sizeof(float);
    memset(out, 0, sizeof *out);
    out->params = out->grads = out->adam_m = out->adam_v = P;
    out->activations = s.saved * sizeof(float);
    out->act_grads = s.grads * sizeof(float);
    out->logits = s.logits * sizeof(float);
    out->attention = 2 * (size_t)T * T * sizeof(float);
    out->total = 4 * P + out->activations + out->act_grads + out->logits +
                 out->attention * (size_t)coh_get_threads();
    return COH_OK;
}
