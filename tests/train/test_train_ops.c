/* test_train_ops.c: each op's backward against central finite differences of its forward. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#define TEST_RAND_SEED 12345ull /* urand(), rnd() */
#include "test_rand.h"
#include "cohort/train.h"
#include "train/backend/cpu/cpu_ops.h"
#include "train/model/gpt_int.h"

/* A scalar probe loss: sum(out * probe), accumulated in double. */
static double dotd(const float *a, const float *b, size_t n)
{
    double s = 0;
    for (size_t i = 0; i < n; i++)
        s += (double)a[i] * b[i];
    return s;
}

typedef double (*loss_fn)(void *ctx);

/* Relative error ||analytic - numeric|| / ||numeric|| over every element of x. */
static double fd_error(loss_fn f, void *ctx, float *x, size_t n, const float *analytic, float h)
{
    double num2 = 0, diff2 = 0;
    for (size_t i = 0; i < n; i++) {
        float keep = x[i];
        x[i] = keep + h;
        double lp = f(ctx);
        x[i] = keep - h;
        double lm = f(ctx);
        x[i] = keep;
        double g = (lp - lm) / (2.0 * h);
        num2 += g * g;
        diff2 += (g - analytic[i]) * (g - analytic[i]);
    }
    return sqrt(diff2 / (num2 > 0 ? num2 : 1e-30));
}

#define TOL 2e-3

/* ---- layernorm ---- */
struct ln_ctx { float *x, *w, *b, *out, *mean, *rstd, *probe; size_t N; int C; };
static double ln_loss(void *p)
{
    struct ln_ctx *c = p;
    op_layernorm_forward(c->out, c->mean, c->rstd, c->x, c->w, c->b, c->N, c->C);
    return dotd(c->out, c->probe, c->N * c->C);
}

static void test_layernorm(void)
{
    size_t N = 6;
    int C = 20;
    struct ln_ctx c = {rnd(N * C, 1), rnd(C, 1), rnd(C, 1), rnd(N * C, 0), rnd(N, 0), rnd(N, 0),
                       rnd(N * C, 1), N, C};
    float *dx = calloc(N * C, 4), *dw = calloc(C, 4), *db = calloc(C, 4);
    ln_loss(&c);
    op_layernorm_backward(dx, dw, db, c.probe, c.x, c.w, c.mean, c.rstd, N, C);
    CHECK(fd_error(ln_loss, &c, c.x, N * C, dx, 1e-2f) < TOL);
    CHECK(fd_error(ln_loss, &c, c.w, C, dw, 1e-2f) < TOL);
    CHECK(fd_error(ln_loss, &c, c.b, C, db, 1e-2f) < TOL);
    /* a broken gradient must be caught: the check can fail */
    dw[3] += 0.5f;
    CHECK(fd_error(ln_loss, &c, c.w, C, dw, 1e-2f) > TOL);
    free(c.x), free(c.w), free(c.b), free(c.out), free(c.mean), free(c.rstd), free(c.probe);
    free(dx), free(dw), free(db);
}

/* ---- matmul ---- */
struct mm_ctx { float *x, *w, *b, *out, *probe; size_t N; int IC, OC; };
static double mm_loss(void *p)
{
    struct mm_ctx *c = p;
    op_matmul_forward(NULL, c->out, c->x, c->w, c->b, c->N, c->IC, c->OC);
    return dotd(c->out, c->probe, c->N * c->OC);
}

static void test_matmul(void)
{
    size_t N = 5;
    int IC = 7, OC = 9;
    struct mm_ctx c = {rnd(N * IC, 1), rnd(IC * OC, 1), rnd(OC, 1), rnd(N * OC, 0),
                       rnd(N * OC, 1), N, IC, OC};
    float *dx = rnd(N * IC, 1), *dw = calloc(IC * OC, 4), *db = calloc(OC, 4);
    op_matmul_backward(NULL, dx, dw, db, c.probe, c.x, c.w, N, IC, OC, 0);
    CHECK(fd_error(mm_loss, &c, c.x, N * IC, dx, 1e-2f) < TOL);
    CHECK(fd_error(mm_loss, &c, c.w, IC * OC, dw, 1e-2f) < TOL);
    CHECK(fd_error(mm_loss, &c, c.b, OC, db, 1e-2f) < TOL);
    free(c.x), free(c.w), free(c.b), free(c.out), free(c.probe), free(dx), free(dw), free(db);
}

/* ---- attention ---- */
struct at_ctx { float *qkv, *out, *lse, *probe; int B, T, C, NH; };
static double at_loss(void *p)
{
    struct at_ctx *c = p;
    op_attention_forward(c->out, c->lse, c->qkv, c->B, c->T, c->C, c->NH);
    return dotd(c->out, c->probe, (size_t)c->B * c->T * c->C);
}

static void test_attention(void)
{
    int B = 2, T = 5, C = 8, NH = 2;
    size_t n = (size_t)B * T * C;
    struct at_ctx c = {rnd(3 * n, 1), rnd(n, 0), rnd((size_t)B * NH * T, 0), rnd(n, 1), B, T, C,
                       NH};
    float *dqkv = rnd(3 * n, 1);
    at_loss(&c);
    CHECK_INT(op_attention_backward(dqkv, c.probe, c.qkv, c.lse, B, T, C, NH), 0);
    CHECK(fd_error(at_loss, &c, c.qkv, 3 * n, dqkv, 1e-2f) < TOL);
    /* causality: the first query's output depends on the first key/value only */
    float before = c.out[0];
    c.qkv[3 * C * 2 + C] += 1.0f; /* key of position 2, batch 0 */
    at_loss(&c);
    CHECK(c.out[0] == before);
    free(c.qkv), free(c.out), free(c.lse), free(c.probe), free(dqkv);
}

/* ---- gelu ---- */
struct ge_ctx { float *x, *out, *probe; size_t n; };
static double ge_loss(void *p)
{
    struct ge_ctx *c = p;
    op_gelu_forward(c->out, c->x, c->n);
    return dotd(c->out, c->probe, c->n);
}

static void test_gelu(void)
{
    size_t n = 64;
    struct ge_ctx c = {rnd(n, 3), rnd(n, 0), rnd(n, 1), n};
    float *dx = calloc(n, 4);
    op_gelu_backward(dx, c.x, c.probe, n);
    CHECK(fd_error(ge_loss, &c, c.x, n, dx, 1e-2f) < TOL);
    /* against the closed form at a point */
    float x = 1.3f, y;
    op_gelu_forward(&y, &x, 1);
    CHECK_NEAR(y, 0.5 * 1.3 * (1 + tanh(0.7978845608 * (1.3 + 0.044715 * 1.3 * 1.3 * 1.3))), 1e-6);
    free(c.x), free(c.out), free(c.probe), free(dx);
}

/* ---- encoder ---- */
struct en_ctx { float *wte, *wpe, *out, *probe; int32_t *tok; int B, T, C; };
static double en_loss(void *p)
{
    struct en_ctx *c = p;
    op_encoder_forward(c->out, c->tok, c->wte, c->wpe, c->B, c->T, c->C, 0, 5, 1);
    return dotd(c->out, c->probe, (size_t)c->B * c->T * c->C);
}

static void test_encoder(void)
{
    int B = 2, T = 3, C = 4, V = 5;
    int32_t tok[6] = {1, 4, 1, 0, 1, 3}; /* repeated ids accumulate */
    struct en_ctx c = {rnd(V * C, 1), rnd(T * C, 1), rnd(B * T * C, 0), rnd(B * T * C, 1), tok,
                       B, T, C};
    float *dwte = calloc(V * C, 4), *dwpe = calloc(T * C, 4);
    op_encoder_backward(dwte, dwpe, c.probe, tok, B, T, C, 0, V);
    CHECK(fd_error(en_loss, &c, c.wte, V * C, dwte, 1e-2f) < TOL);
    CHECK(fd_error(en_loss, &c, c.wpe, T * C, dwpe, 1e-2f) < TOL);
    /* split by vocabulary as tensor parallelism splits it (ids 0..2 and 3..4, the first part
     * adding the positions): the parts sum to the whole exactly, and so do their gradients */
    float *a = calloc(B * T * C, 4), *b = calloc(B * T * C, 4), *whole = calloc(B * T * C, 4);
    op_encoder_forward(whole, tok, c.wte, c.wpe, B, T, C, 0, V, 1);
    op_encoder_forward(a, tok, c.wte, c.wpe, B, T, C, 0, 3, 1);
    op_encoder_forward(b, tok, c.wte + 3 * C, c.wpe, B, T, C, 3, 2, 0);
    int same = 1;
    for (int i = 0; i < B * T * C; i++)
        same &= a[i] + b[i] == whole[i];
    CHECK(same);
    float *dw2 = calloc(V * C, 4), *dp2 = calloc(T * C, 4), *dp3 = calloc(T * C, 4);
    op_encoder_backward(dw2, dp2, c.probe, tok, B, T, C, 0, 3);
    op_encoder_backward(dw2 + 3 * C, dp3, c.probe, tok, B, T, C, 3, 2);
    CHECK(memcmp(dw2, dwte, V * C * 4) == 0);
    CHECK(memcmp(dp2, dwpe, T * C * 4) == 0 && memcmp(dp3, dwpe, T * C * 4) == 0);
    free(a), free(b), free(whole), free(dw2), free(dp2), free(dp3);
    free(c.wte), free(c.wpe), free(c.out), free(c.probe), free(dwte), free(dwpe);
}

/* ---- fused LM head + cross-entropy, with a chunk smaller than the rows ---- */
struct hd_ctx { float *lnf, *wte, *logits, *losses; int32_t *tgt; size_t N; int C, V; };
static double hd_loss(void *p)
{
    struct hd_ctx *c = p;
    op_head_loss(NULL, c->losses, NULL, NULL, c->logits, 3, c->lnf, c->wte, c->tgt, c->N, c->C,
                 c->V, 0, NULL);
    double s = 0;
    for (size_t i = 0; i < c->N; i++)
        s += c->losses[i];
    return 2.0 * s / (double)c->N; /* grad_scale 2 below */
}

static void test_head(void)
{
    size_t N = 7;
    int C = 6, V = 11;
    int32_t tgt[7] = {0, 3, 10, 5, 5, 1, 9};
    struct hd_ctx c = {rnd(N * C, 1), rnd(V * C, 1), rnd(3 * V, 0), rnd(N, 0), tgt, N, C, V};
    float *dlnf = calloc(N * C, 4), *dwte = calloc(V * C, 4);
    CHECK_OK(op_head_loss(NULL, c.losses, dlnf, dwte, c.logits, 3, c.lnf, c.wte, tgt, N, C, V,
                          2.0f, NULL));
    CHECK(fd_error(hd_loss, &c, c.lnf, N * C, dlnf, 1e-2f) < TOL);
    CHECK(fd_error(hd_loss, &c, c.wte, V * C, dwte, 1e-2f) < TOL);
    /* loss of uniform logits is log(V) */
    memset(c.wte, 0, V * C * 4);
    CHECK_NEAR(hd_loss(&c) / 2.0, log(V), 1e-6);
    free(c.lnf), free(c.wte), free(c.logits), free(c.losses), free(dlnf), free(dwte);
}

/* ---- the whole model: analytic gradient vs finite differences on sampled parameters ---- */
static void test_model(void)
{
    coh_gpt_config cfg = {2, 2, 8, 13, 6, 0, 0};
    coh_gpt *g;
    CHECK_OK(coh_gpt_create(&cfg, 2, 5, &g));
    if (!g)
        return;
    coh_gpt_init_weights(g, 7);
    size_t n;
    float *p = coh_gpt_params(g, &n), *gr = coh_gpt_grads(g, &n);
    for (size_t i = 0; i < n; i++) /* larger weights make every path matter */
        p[i] += urand() * 0.3f;
    int32_t tok[10] = {1, 5, 7, 12, 0, 3, 3, 9, 2, 11}, tgt[10] = {5, 7, 12, 0, 3, 3, 9, 2, 11, 4};
    float loss;
    coh_gpt_zero_grad(g);
    CHECK_OK(coh_gpt_step(g, tok, tgt, 2, 5, 1.0f, &loss));
    float *ana = malloc(n * sizeof *ana);
    memcpy(ana, gr, n * sizeof *ana);
    double num2 = 0, diff2 = 0;
    for (size_t i = 0; i < n; i += 7) {
        float keep = p[i], lp, lm;
        p[i] = keep + 1e-2f;
        coh_gpt_step(g, tok, tgt, 2, 5, 0.0f, &lp);
        p[i] = keep - 1e-2f;
        coh_gpt_step(g, tok, tgt, 2, 5, 0.0f, &lm);
        p[i] = keep;
        double num = ((double)lp - lm) / 2e-2;
        num2 += num * num;
        diff2 += (num - ana[i]) * (num - ana[i]);
    }
    CHECK(sqrt(diff2 / num2) < 1e-2);
    free(ana);
    coh_gpt_destroy(g);
}

/* Offset of the first layer's QKV bias (3C: query, key, value thirds) in the arena. */
static size_t qkv_bias_offset(const coh_gpt_config *cfg)
{
    coh_tensor_info ti;
    for (int i = 0; i < coh_gpt_tensor_count(cfg); i++)
        if (!coh_gpt_tensor(cfg, i, &ti) && !strcmp(ti.name, "transformer.h.0.attn.c_attn.bias"))
            return ti.offset;
    CHECK(0);
    return 0;
}

/* The key bias moves every score of a query row by the same q . b_k, which softmax ignores: the
 * loss stays put (finite differences of any size give 0) and the engine's gradient is exactly 0,
 * while moving the query or value bias as much does change the loss. */
static void test_key_bias(void)
{
    coh_gpt_config cfg = {2, 2, 8, 13, 6, 0, 0};
    coh_gpt *g;
    CHECK_OK(coh_gpt_create(&cfg, 2, 5, &g));
    if (!g)
        return;
    coh_gpt_init_weights(g, 11);
    size_t n, C = 8, kb = qkv_bias_offset(&cfg);
    float *p = coh_gpt_params(g, &n), *gr = coh_gpt_grads(g, &n);
    for (size_t i = 0; i < n; i++)
        p[i] += urand() * 0.3f;
    int32_t tok[10] = {1, 5, 7, 12, 0, 3, 3, 9, 2, 11}, tgt[10] = {5, 7, 12, 0, 3, 3, 9, 2, 11, 4};
    float base, moved;
    coh_gpt_zero_grad(g);
    CHECK_OK(coh_gpt_step(g, tok, tgt, 2, 5, 1.0f, &base));
    for (size_t j = C; j < 2 * C; j++)
        CHECK(gr[kb + j] == 0.0f);
    double worst_key = 0, least_other = INFINITY;
    for (size_t j = 0; j < 3 * C; j++) {
        float keep = p[kb + j];
        for (int s = -1; s <= 1; s += 2) {
            p[kb + j] = keep + 0.5f * (float)s;
            CHECK_OK(coh_gpt_step(g, tok, tgt, 2, 5, 0.0f, &moved));
            double d = fabs((double)moved - base);
            if (j >= C && j < 2 * C)
                worst_key = fmax(worst_key, d);
            else
                least_other = fmin(least_other, d);
        }
        p[kb + j] = keep;
    }
    fprintf(stderr, "key bias: loss %.7f, largest change from moving a key bias by 0.5: %.3g; "
            "smallest from a query or value bias: %.3g\n", base, worst_key, least_other);
    /* float rounding of a loss near 3 is ~3e-7; the other biases move it by orders more */
    CHECK(worst_key <= 2e-6 * base);
    CHECK(least_other > 1e-4 * base);
    coh_gpt_destroy(g);
}

int main(void)
{
    RUN(test_layernorm);
    RUN(test_matmul);
    RUN(test_attention);
    RUN(test_gelu);
    RUN(test_encoder);
    RUN(test_head);
    RUN(test_model);
    RUN(test_key_bias);
    return CHECK_REPORT();
}
