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
                            (int)m.positions, 0, 0};
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
    if (c->tp < 0 || c->tp > c->heads)
        return coh_errf(COH_ERR_INVALID, "invalid tp '%d': tensor parallelism splits the %d "
                        "heads, so tp must be 1..%d", c->tp, c->heads, c->heads);
    if (c->sp && c->tp < 2)
        return coh_errf(COH_ERR_INVALID, "sequence parallelism splits rows over the tp ranks: "
                        "it needs tp 2 or more (tp %d)", c->tp);
    if (c->tp > 1 && c->heads % c->tp)
        return coh_errf(COH_ERR_INVALID, "invalid tp '%d': it must divide the heads (%d) so "
                        "every rank holds whole heads", c->tp, c->heads);
    double p = (double)coh_gpt_param_count(c);
    if (p * 4.0 * 4.0 > (double)SIZE_MAX / 2 || p > 1e12)
        return coh_errf(COH_ERR_INVALID, "model too large: %.3g parameters", p);
    return COH_OK;
}

/* Shard widths: attention columns Ca = C/tp (its heads), MLP columns F = 4C/tp, vocabulary rows
 * Vs = ceil(V/tp); with tp 1 the whole model. */
typedef struct gpt_dims {
    size_t C, Ca, F, Vs, T;
    int tp;
} gpt_dims;

static gpt_dims dims_of(const coh_gpt_config *c)
{
    gpt_dims d;
    d.tp = gpt_tp(c);
    d.C = (size_t)c->dim;
    d.Ca = d.C / (size_t)d.tp;
    d.F = 4 * d.C / (size_t)d.tp;
    d.Vs = ((size_t)c->vocab + (size_t)d.tp - 1) / (size_t)d.tp;
    d.T = (size_t)c->seq;
    return d;
}

int coh_gpt_vocab_per_shard(const coh_gpt_config *c) { return (int)dims_of(c).Vs; }

/* Per-block tensors in arena order: name suffix, decay, and how tensor parallelism splits it. */
enum { SPLIT_NONE, SPLIT_QKV, SPLIT_COLS, SPLIT_ROWS };
static const struct {
    const char *suffix;
    int decay, split;
} block[GPT_BLOCK_TENSORS] = {
    {"ln_1.weight", 0, SPLIT_NONE},       {"ln_1.bias", 0, SPLIT_NONE},
    {"attn.c_attn.weight", 1, SPLIT_QKV}, {"attn.c_attn.bias", 0, SPLIT_QKV},
    {"attn.c_proj.weight", 1, SPLIT_ROWS}, {"attn.c_proj.bias", 0, SPLIT_NONE},
    {"ln_2.weight", 0, SPLIT_NONE},       {"ln_2.bias", 0, SPLIT_NONE},
    {"mlp.c_fc.weight", 1, SPLIT_COLS},   {"mlp.c_fc.bias", 0, SPLIT_COLS},
    {"mlp.c_proj.weight", 1, SPLIT_ROWS}, {"mlp.c_proj.bias", 0, SPLIT_NONE},
};

/* Full (rows, cols) of block tensor k (cols 0: a vector of `rows`) and its shard's. */
static void block_shape(const gpt_dims *d, int k, size_t *rows, size_t *cols, size_t *lrows,
                        size_t *lcols)
{
    size_t C = d->C;
    static const int full[GPT_BLOCK_TENSORS][2] = {{1, 0}, {1, 0}, {1, 3}, {3, 0}, {1, 1}, {1, 0},
                                                   {1, 0}, {1, 0}, {1, 4}, {4, 0}, {4, 1}, {1, 0}};
    *rows = (size_t)full[k][0] * C;
    *cols = (size_t)full[k][1] * C;
    *lrows = *rows;
    *lcols = *cols;
    size_t tp = (size_t)d->tp;
    switch (block[k].split) {
    case SPLIT_QKV:
    case SPLIT_COLS:
        if (*cols)
            *lcols /= tp;
        else
            *lrows /= tp;
        break;
    case SPLIT_ROWS:
        *lrows /= tp;
        break;
    }
}

static size_t block_size(const gpt_dims *d)
{
    size_t n = 0, r, c, lr, lc;
    for (int k = 0; k < GPT_BLOCK_TENSORS; k++) {
        block_shape(d, k, &r, &c, &lr, &lc);
        n += lr * (lc ? lc : 1);
    }
    return n;
}

size_t coh_gpt_param_count(const coh_gpt_config *c)
{
    gpt_dims d = dims_of(c);
    return d.Vs * d.C + d.T * d.C + (size_t)c->layers * block_size(&d) + 2 * d.C;
}

int coh_gpt_tensor_count(const coh_gpt_config *c) { return 4 + GPT_BLOCK_TENSORS * c->layers; }

void coh_gpt_layer_range(const coh_gpt_config *c, int layer, size_t *begin, size_t *end)
{
    gpt_dims d = dims_of(c);
    size_t emb = (d.Vs + d.T) * d.C, bs = block_size(&d);
    if (layer < 0) {
        *begin = 0;
        *end = emb;
    } else if (layer >= c->layers) {
        *begin = emb + (size_t)c->layers * bs;
        *end = *begin + 2 * d.C;
    } else {
        *begin = emb + (size_t)layer * bs;
        *end = *begin + bs;
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
    gpt_dims d = dims_of(c);
    int n = coh_gpt_tensor_count(c);
    if (i < 0 || i >= n)
        return coh_errf(COH_ERR_INVALID, "invalid tensor index '%d': must be 0..%d", i, n - 1);
    size_t b, e, r, cols, lr, lc;
    if (i == 0) {
        set_info(out, "transformer.wte.weight", d.Vs, d.C, 0, -1, 1);
    } else if (i == 1) {
        set_info(out, "transformer.wpe.weight", d.T, d.C, d.Vs * d.C, -1, 1);
    } else if (i >= n - 2) {
        coh_gpt_layer_range(c, c->layers, &b, &e);
        set_info(out, i == n - 2 ? "transformer.ln_f.weight" : "transformer.ln_f.bias", d.C, 0,
                 b + (size_t)(i - (n - 2)) * d.C, -1, 0);
    } else {
        int l = (i - 2) / GPT_BLOCK_TENSORS, k = (i - 2) % GPT_BLOCK_TENSORS;
        coh_gpt_layer_range(c, l, &b, &e);
        size_t off = b;
        for (int j = 0; j < k; j++) {
            block_shape(&d, j, &r, &cols, &lr, &lc);
            off += lr * (lc ? lc : 1);
        }
        block_shape(&d, k, &r, &cols, &lr, &lc);
        char name[64];
        snprintf(name, sizeof name, "transformer.h.%d.%s", l, block[k].suffix);
        set_info(out, name, lr, lc, off, l, block[k].decay);
    }
    return COH_OK;
}

coh_status coh_gpt_tensor_shard(const coh_gpt_config *c, int i, int tp_rank,
                                coh_tensor_shard *out)
{
    gpt_dims d = dims_of(c);
    int n = coh_gpt_tensor_count(c);
    if (i < 0 || i >= n)
        return coh_errf(COH_ERR_INVALID, "invalid tensor index '%d': must be 0..%d", i, n - 1);
    if (tp_rank < 0 || tp_rank >= d.tp)
        return coh_errf(COH_ERR_INVALID, "invalid tensor-parallel rank '%d': must be 0..%d",
                        tp_rank, d.tp - 1);
    size_t t = (size_t)tp_rank, rows, cols, lr, lc;
    int split = SPLIT_NONE;
    if (i == 0) { /* wte: the vocabulary's rows */
        rows = (size_t)c->vocab;
        cols = d.C;
        lr = d.Vs;
        lc = d.C;
        split = d.tp > 1 ? SPLIT_ROWS : SPLIT_NONE;
    } else if (i == 1 || i >= n - 2) {
        rows = i == 1 ? d.T : d.C;
        cols = i == 1 ? d.C : 0;
        lr = rows;
        lc = cols;
    } else {
        int k = (i - 2) % GPT_BLOCK_TENSORS;
        block_shape(&d, k, &rows, &cols, &lr, &lc);
        split = d.tp > 1 ? block[k].split : SPLIT_NONE;
    }
    /* vectors are one row of `rows` columns */
    if (!cols) {
        cols = rows;
        lc = lr;
        rows = lr = 1;
    }
    *out = (coh_tensor_shard){.rows = lr, .row0 = 0, .nseg = 1, .seg = lc, .full_cols = cols,
                              .replicated = split == SPLIT_NONE};
    if (split == SPLIT_ROWS) {
        out->row0 = t * lr;
        out->rows = out->row0 >= rows ? 0 : (rows - out->row0 < lr ? rows - out->row0 : lr);
    } else if (split == SPLIT_COLS) {
        out->col0[0] = t * lc;
    } else if (split == SPLIT_QKV) { /* [q | k | v], each of C columns: this shard's heads */
        out->nseg = 3;
        out->seg = lc / 3;
        for (int s = 0; s < 3; s++)
            out->col0[s] = (size_t)s * (cols / 3) + t * out->seg;
    }
    return COH_OK;
}

void coh_tensor_shard_gather(const coh_tensor_shard *s, const float *local, float *full)
{
    size_t lcols = (size_t)s->nseg * s->seg;
    for (size_t r = 0; r < s->rows; r++)
        for (int k = 0; k < s->nseg; k++)
            memcpy(full + (s->row0 + r) * s->full_cols + s->col0[k],
                   local + r * lcols + (size_t)k * s->seg, s->seg * sizeof *full);
}

void coh_tensor_shard_scatter(const coh_tensor_shard *s, const float *full, float *local)
{
    size_t lcols = (size_t)s->nseg * s->seg;
    for (size_t r = 0; r < s->rows; r++)
        for (int k = 0; k < s->nseg; k++)
            memcpy(local + r * lcols + (size_t)k * s->seg,
                   full + (s->row0 + r) * s->full_cols + s->col0[k], s->seg * sizeof *full);
}

/* Shard and full tensor i of the two layouts, then one copy each way. */
static void arena_copy(const coh_gpt_config *c, int tp_rank, float *local, float *full,
                       int to_full)
{
    coh_gpt_config whole = *c;
    whole.tp = 1;
    int n = coh_gpt_tensor_count(c);
    for (int i = 0; i < n; i++) {
        coh_tensor_info lt, ft;
        coh_tensor_shard s;
        coh_gpt_tensor(c, i, &lt);
        coh_gpt_tensor(&whole, i, &ft);
        coh_gpt_tensor_shard(c, i, tp_rank, &s);
        if (to_full && s.replicated && tp_rank != 0)
            continue;
        if (to_full)
            coh_tensor_shard_gather(&s, local + lt.offset, full + ft.offset);
        else
            coh_tensor_shard_scatter(&s, full + ft.offset, local + lt.offset);
    }
}

void coh_gpt_arena_gather(const coh_gpt_config *c, int tp_rank, const float *local, float *full)
{
    arena_copy(c, tp_rank, (float *)local, full, 1);
}

void coh_gpt_arena_scatter(const coh_gpt_config *c, int tp_rank, const float *full, float *local)
{
    arena_copy(c, tp_rank, local, (float *)full, 0);
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
    gpt_dims d = dims_of(c);
    size_t BT = (size_t)B * T, C = d.C, L = (size_t)c->layers;
    size_t NH = (size_t)c->heads / (size_t)d.tp;
    /* the rows of the residual stream and the LayerNorms a rank keeps: its share of B*T with
     * sequence parallelism (rounded up; a step checks that tp divides B*T), else all */
    size_t R = gpt_sp(c) ? (BT + (size_t)d.tp - 1) / (size_t)d.tp : BT;
    s->rows = R;
    /* ln1, res2, ln2, res3 (R,C) with their statistics; the shard's: qkv 3Ca, atty Ca, fch and
     * fch_gelu F each, over every row */
    s->per_layer = 4 * R * C + 4 * R + 4 * BT * d.Ca + 2 * BT * d.F + BT * NH;
    /* encoded (R,C), lnf (B,T,C) gathered for the head, its statistics (R), the losses (B*T),
     * the targets' and the tokens' device copies (B*T int32 each) */
    s->saved = R * C + BT * C + 2 * R + BT + BT + L * s->per_layer + BT;
    /* dres (R,C), dtmp (B,T,C), dwide (B,T,max(F, 3Ca)), and with sequence parallelism the
     * gathered rows (B,T,C) and one LayerNorm's gradients over this rank's rows (2C) */
    s->grads = R * C + BT * C + BT * (d.F > 3 * d.Ca ? d.F : 3 * d.Ca) +
               (gpt_sp(c) ? BT * C + 2 * C : 0);
    s->chunk_rows = BT < GPT_HEAD_CHUNK ? BT : GPT_HEAD_CHUNK;
    s->logits = s->chunk_rows * d.Vs;
    /* bf16-mixed (ops_matmul.c): a product's input rows (widest: C, Ca or F; the head's chunk of
     * lnf rows), its output-gradient rows (3Ca, C or F), one block matrix, and the head's
     * vocabulary rows; the head's dlogits go bf16 in place in the logits chunk */
    size_t in = d.F > d.C ? d.F : d.C, out = d.F > 3 * d.Ca ? d.F : 3 * d.Ca;
    out = out > d.C ? out : d.C;
    s->mm_a = BT * in;
    s->mm_b = BT * out;
    s->mm_w = d.C * (d.F > 3 * d.Ca ? d.F : 3 * d.Ca);
    s->mm_wte = d.Vs * d.C;
    /* the head's bf16 dL/dlogits of up to GPT_HEAD_DL_ROWS rows (the whole vocabulary only: a
     * tensor-parallel shard reduces its row statistics chunk by chunk) */
    s->dl_rows = d.tp > 1 ? 0 : BT < GPT_HEAD_DL_ROWS ? BT : GPT_HEAD_DL_ROWS;
    s->mm_dl = s->dl_rows * d.Vs;
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

/* The largest scratchpad of the bf16 products ops_matmul.c runs for B x T rows, with the same
 * shapes and strides: each linear layer (IC, OC) forward with and without bias, its two backward
 * products, and the head's three on full chunks and on the last, shorter one (its backward pair
 * over the dl rows, G of them at once, when it keeps them). */
static size_t bf16_scratch(const coh_gpt_config *c, size_t BT, size_t R, size_t G, int prep)
{
    gpt_dims d = dims_of(c);
    int N = (int)BT, C = (int)d.C, V = (int)d.Vs;
    int lin[4][2] = {{C, 3 * (int)d.Ca}, {(int)d.Ca, C}, {C, (int)d.F}, {(int)d.F, C}};
    size_t most = 0, s;
    const coh_backend *be = coh_backend_current();
#define TAKE(x) (s = (x), most = s > most ? s : most)
    for (int i = 0; i < 4; i++) {
        int IC = lin[i][0], OC = lin[i][1];
        for (int bias = 0; bias < 2; bias++)
            TAKE(be->gemm_scratch(0, 0, N, OC, IC, IC, OC, OC, bias, prep));
        TAKE(be->gemm_scratch(0, 1, N, IC, OC, OC, OC, IC, 0, prep));
        TAKE(be->gemm_scratch(1, 0, IC, OC, N, IC, OC, OC, 1, prep));
    }
    size_t rows[2] = {R, BT % R}, groups[2] = {G, G ? BT % G : 0};
    for (int i = 0; i < 2 && rows[i]; i++) {
        int r = (int)rows[i];
        TAKE(be->gemm_scratch(0, 1, r, V, C, C, C, V, 0, prep));
        if (G)
            continue;
        TAKE(be->gemm_scratch(0, 0, r, C, V, 2 * (size_t)V, C, C, 0, prep));
        TAKE(be->gemm_scratch(1, 0, V, C, r, 2 * (size_t)V, C, C, 1, prep));
    }
    for (int i = 0; i < 2 && groups[i]; i++) {
        int r = (int)groups[i];
        TAKE(be->gemm_scratch(0, 0, r, C, V, V, C, C, 0, prep));
        TAKE(be->gemm_scratch(1, 0, V, C, r, V, C, C, 1, prep));
    }
#undef TAKE
    return most;
}

size_t gpt_bf16_scratch_bytes(const coh_gpt_config *c, int B, int T)
{
    gpt_act_sizes_t s;
    gpt_act_sizes(c, B, T, &s);
    return bf16_scratch(c, (size_t)B * T, s.chunk_rows, s.dl_rows, 0);
}

size_t coh_train_memory_bf16(const coh_gpt_config *c, int B, int T)
{
    if (coh_gpt_config_check(c) || B < 1 || T < 1 || T > c->seq)
        return 0;
    gpt_act_sizes_t s;
    gpt_act_sizes(c, B, T, &s);
    return (s.mm_a + s.mm_b + s.mm_w + s.mm_wte + s.mm_dl) * sizeof(gpt_bf16) +
           bf16_scratch(c, (size_t)B * T, s.chunk_rows, s.dl_rows, 0);
}

size_t coh_train_memory_bf16_acts_saved(const coh_gpt_config *c, int B, int T)
{
    if (coh_gpt_config_check(c) || B < 1 || T < 1 || T > c->seq || gpt_sp(c))
        return 0;
    gpt_dims d = dims_of(c);
    size_t BT = (size_t)B * T;
    /* ln_1 and ln_2 (BT x C), the attention output (BT x Ca), the GELU output (BT x F): the
     * second half of each fp32 place (gpt_step.c) */
    return (2 * BT * d.C + BT * d.Ca + BT * d.F) * sizeof(gpt_bf16);
}

coh_status coh_bf16_prepare(const coh_gpt_config *c, int B, int T)
{
    coh_status st = coh_gpt_config_check(c);
    if (!st && (B < 1 || T < 1 || T > c->seq))
        st = coh_errf(COH_ERR_INVALID, "invalid batch %d x %d for bf16 kernels", B, T);
    if (!st)
        st = coh_backend_current()->bf16_check();
    if (st)
        return st;
    gpt_act_sizes_t s;
    gpt_act_sizes(c, B, T, &s);
    bf16_scratch(c, (size_t)B * T, s.chunk_rows, s.dl_rows, 1);
    return COH_OK;
}
