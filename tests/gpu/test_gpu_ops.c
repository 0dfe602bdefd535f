/* test_gpu_ops.c: every op of the CUDA backend against the CPU backend on the same random
 * inputs, the largest error of each printed and bounded: fp32 1e-5 of the largest value (TF32
 * off); bf16 products 1e-4 (both backends round the operands alike and accumulate in fp32:
 * only the summation order differs); results rounded to bf16 2^-7 (one bf16 step where the two
 * fp32 values straddle a rounding boundary). Skipped by name without a GPU. */
#define TEST_RAND_SEED 27
#include "gpu_cmp.h"
#include "test_rand.h"

#define B32 1e-5
#define B16P 1e-4
#define B16R 7.9e-3

enum { B = 2, T = 33, C = 64, NH = 4, V = 301, N = B * T, C4 = 4 * C };

static const coh_backend *cpu;

static float *dup_dev(const float *h, size_t n) { return dput(h, n * sizeof *h); }

static int32_t *tokens(int vocab)
{
    int32_t *t = malloc(N * sizeof *t);
    for (int i = 0; i < N; i++)
        t[i] = (int32_t)((urand() + 1.0f) * 0.5f * vocab) % vocab;
    t[3] = t[5]; /* two rows of one token: their gradients add up */
    return t;
}

static void case_encoder(void)
{
    float *wte = rnd((size_t)V * C, 1), *wpe = rnd((size_t)T * C, 1);
    int32_t *tok = tokens(V);
    float *dwte = rnd((size_t)V * C, 1), *dwpe = rnd((size_t)T * C, 1), *dout = rnd(N * C, 1);
    float *out = malloc(N * C * sizeof *out);
    float *d_wte = dup_dev(wte, V * C), *d_wpe = dup_dev(wpe, T * C), *d_out = dalloc(N * C * 4);
    int32_t *d_tok = dput(tok, N * sizeof *tok);
    for (int shard = 0; shard < 2; shard++) { /* whole vocabulary with wpe; a shard without */
        int v0 = shard ? 100 : 0, vn = shard ? 120 : V;
        cpu->encoder_forward(out, tok, wte, wpe, B, T, C, v0, vn, !shard);
        dev->encoder_forward(d_out, d_tok, d_wte, d_wpe, B, T, C, v0, vn, !shard);
        cmp_dev(shard ? "encoder_forward (shard)" : "encoder_forward", out, d_out, N * C, B32);
    }
    float *d_dwte = dup_dev(dwte, V * C), *d_dwpe = dup_dev(dwpe, T * C);
    float *d_dout = dup_dev(dout, N * C);
    cpu->encoder_backward(dwte, dwpe, dout, tok, B, T, C, 0, V);
    dev->encoder_backward(d_dwte, d_dwpe, d_dout, d_tok, B, T, C, 0, V);
    cmp_dev("encoder_backward dwte", dwte, d_dwte, V * C, B32);
    cmp_dev("encoder_backward dwpe", dwpe, d_dwpe, T * C, B32);
    CHECK_OK(dev->sync());
    dfree(d_wte, V * C * 4), dfree(d_wpe, T * C * 4), dfree(d_out, N * C * 4);
    dfree(d_tok, N * 4), dfree(d_dwte, V * C * 4), dfree(d_dwpe, T * C * 4);
    dfree(d_dout, N * C * 4);
    free(wte), free(wpe), free(tok), free(dwte), free(dwpe), free(dout), free(out);
}

static void case_layernorm(void)
{
    float *x = rnd(N * C, 2), *w = rnd(C, 1), *b = rnd(C, 1), *dy = rnd(N * C, 1);
    float *out = malloc(N * C * 4), *mean = malloc(N * 4), *rstd = malloc(N * 4);
    float *dx = rnd(N * C, 1), *dw = rnd(C, 1), *db = rnd(C, 1);
    float *d_x = dup_dev(x, N * C), *d_w = dup_dev(w, C), *d_b = dup_dev(b, C);
    float *d_out = dalloc(N * C * 4), *d_mean = dalloc(N * 4), *d_rstd = dalloc(N * 4);
    float *d_dy = dup_dev(dy, N * C), *d_dx = dup_dev(dx, N * C), *d_dw = dup_dev(dw, C);
    float *d_db = dup_dev(db, C);
    cpu->layernorm_forward(out, mean, rstd, x, w, b, N, C);
    dev->layernorm_forward(d_out, d_mean, d_rstd, d_x, d_w, d_b, N, C);
    cmp_dev("layernorm_forward out", out, d_out, N * C, B32);
    cmp_dev("layernorm_forward mean", mean, d_mean, N, B32);
    cmp_dev("layernorm_forward rstd", rstd, d_rstd, N, B32);
    cpu->layernorm_backward(dx, dw, db, dy, x, w, mean, rstd, N, C);
    dev->layernorm_backward(d_dx, d_dw, d_db, d_dy, d_x, d_w, d_mean, d_rstd, N, C);
    cmp_dev("layernorm_backward dinp", dx, d_dx, N * C, B32);
    cmp_dev("layernorm_backward dw", dw, d_dw, C, B32);
    cmp_dev("layernorm_backward db", db, d_db, C, B32);
    gpt_bf16 *h16 = malloc(N * C * 2), *d16 = dalloc(N * C * 2);
    float *w16 = malloc(N * C * 4);
    cpu->layernorm_forward_bf16(h16, mean, rstd, x, w, b, N, C);
    cpu->from_bf16(out, h16, N * C);
    dev->layernorm_forward_bf16(d16, d_mean, d_rstd, d_x, d_w, d_b, N, C);
    dev->from_bf16(d_out, d16, N * C);
    cmp_dev("layernorm_forward_bf16", out, d_out, N * C, B16R);
    CHECK_OK(dev->sync());
    dfree(d_x, 0), dfree(d_w, 0), dfree(d_b, 0), dfree(d_out, 0), dfree(d_mean, 0);
    dfree(d_rstd, 0), dfree(d_dy, 0), dfree(d_dx, 0), dfree(d_dw, 0), dfree(d_db, 0);
    dfree(d16, 0);
    free(x), free(w), free(b), free(dy), free(out), free(mean), free(rstd), free(dx), free(dw);
    free(db), free(h16), free(w16);
}

static void case_gelu_residual(void)
{
    size_t n = N * C4;
    float *x = rnd(n, 4), *dy = rnd(n, 1), *y = malloc(n * 4), *z = rnd(n, 1);
    float *d_x = dup_dev(x, n), *d_dy = dup_dev(dy, n), *d_y = dalloc(n * 4);
    float *d_z = dup_dev(z, n);
    cpu->gelu_forward(y, x, n);
    dev->gelu_forward(d_y, d_x, n);
    cmp_dev("gelu_forward", y, d_y, n, B32);
    gpt_bf16 *h16 = malloc(n * 2), *d16 = dalloc(n * 2);
    cpu->gelu_forward_bf16(h16, x, n);
    cpu->from_bf16(y, h16, n);
    dev->gelu_forward_bf16(d16, d_x, n);
    dev->from_bf16(d_y, d16, n);
    cmp_dev("gelu_forward_bf16", y, d_y, n, B16R);
    cpu->gelu_backward(y, x, dy, n);
    dev->gelu_backward(d_y, d_x, d_dy, n);
    cmp_dev("gelu_backward", y, d_y, n, B32);
    cpu->residual_forward(y, x, z, n);
    dev->residual_forward(d_y, d_x, d_z, n);
    cmp_dev("residual_forward", y, d_y, n, 0);
    CHECK_OK(dev->sync());
    dfree(d_x, 0), dfree(d_dy, 0), dfree(d_y, 0), dfree(d_z, 0), dfree(d16, 0);
    free(x), free(dy), free(y), free(z), free(h16);
}

/* Both backends' bf16 buffers for products up to (N x 4C) inputs and a (V x C) head. */
typedef struct mm_pair {
    gpt_mm h, d;
} mm_pair;

static void mm_make(mm_pair *m, int bf16)
{
    size_t act = (size_t)N * C4 > (size_t)GPT_HEAD_CHUNK * V ? (size_t)N * C4
                                                             : (size_t)GPT_HEAD_CHUNK * V;
    size_t sz[4] = {act, act, (size_t)C4 * C4, (size_t)V * C};
    gpt_bf16 **hp[4] = {&m->h.a, &m->h.b, &m->h.w, &m->h.wte};
    gpt_bf16 **dp[4] = {&m->d.a, &m->d.b, &m->d.w, &m->d.wte};
    memset(m, 0, sizeof *m);
    m->h.bf16 = m->d.bf16 = bf16;
    for (int i = 0; i < 4; i++) {
        *hp[i] = calloc(sz[i], 2);
        *dp[i] = dalloc(sz[i] * 2);
    }
}

static void mm_drop(mm_pair *m)
{
    gpt_bf16 *h[4] = {m->h.a, m->h.b, m->h.w, m->h.wte}, *d[4] = {m->d.a, m->d.b, m->d.w, m->d.wte};
    for (int i = 0; i < 4; i++)
        free(h[i]), dfree(d[i], 0);
}

static int bf16_here(void)
{
    return cpu->bf16_check() == COH_OK && dev->bf16_check() == COH_OK;
}

/* forward with bias, backward (accumulating dinp, with db), and the _h variants in bf16 */
static void matmul_case(int bf16, double bound)
{
    int IC = C, OC = C4;
    mm_pair m;
    mm_make(&m, bf16);
    float *x = rnd(N * IC, 1), *w = rnd(IC * OC, 0.2f), *b = rnd(OC, 1), *dy = rnd(N * OC, 1);
    float *y = malloc(N * OC * 4), *dx = rnd(N * IC, 1), *dw = rnd(IC * OC, 1), *db = rnd(OC, 1);
    float *d_x = dup_dev(x, N * IC), *d_w = dup_dev(w, IC * OC), *d_b = dup_dev(b, OC);
    float *d_dy = dup_dev(dy, N * OC), *d_y = dalloc(N * OC * 4), *d_dx = dup_dev(dx, N * IC);
    float *d_dw = dup_dev(dw, IC * OC), *d_db = dup_dev(db, OC);
    cpu->matmul_forward(&m.h, y, x, w, b, N, IC, OC);
    dev->matmul_forward(&m.d, d_y, d_x, d_w, d_b, N, IC, OC);
    cmp_dev(bf16 ? "matmul_forward bf16" : "matmul_forward", y, d_y, N * OC, bound);
    cpu->matmul_backward(&m.h, dx, dw, db, dy, x, w, N, IC, OC, 1);
    dev->matmul_backward(&m.d, d_dx, d_dw, d_db, d_dy, d_x, d_w, N, IC, OC, 1);
    cmp_dev(bf16 ? "matmul_backward bf16 dinp" : "matmul_backward dinp", dx, d_dx, N * IC, bound);
    cmp_dev(bf16 ? "matmul_backward bf16 dw" : "matmul_backward dw", dw, d_dw, IC * OC, bound);
    cmp_dev(bf16 ? "matmul_backward bf16 db" : "matmul_backward db", db, d_db, OC, B32);
    if (bf16) { /* the input kept as bf16 */
        gpt_bf16 *h16 = malloc(N * IC * 2), *d16 = dalloc(N * IC * 2);
        cpu->to_bf16(h16, x, N * IC);
        dev->to_bf16(d16, d_x, N * IC);
        cpu->matmul_forward_h(&m.h, y, h16, w, NULL, N, IC, OC);
        dev->matmul_forward_h(&m.d, d_y, d16, d_w, NULL, N, IC, OC);
        cmp_dev("matmul_forward_h", y, d_y, N * OC, bound);
        cpu->matmul_backward_h(&m.h, dx, dw, NULL, dy, h16, w, N, IC, OC, 0);
        dev->matmul_backward_h(&m.d, d_dx, d_dw, NULL, d_dy, d16, d_w, N, IC, OC, 0);
        cmp_dev("matmul_backward_h dinp", dx, d_dx, N * IC, bound);
        cmp_dev("matmul_backward_h dw", dw, d_dw, IC * OC, bound);
        free(h16), dfree(d16, 0);
    }
    float *dq = rnd(N * 3 * C, 1), *qb = rnd(3 * C, 1);
    float *d_dq = dup_dev(dq, N * 3 * C), *d_qb = dup_dev(qb, 3 * C);
    cpu->qkv_bias_backward(qb, dq, N, C);
    dev->qkv_bias_backward(d_qb, d_dq, N, C);
    cmp_dev("qkv_bias_backward", qb, d_qb, 3 * C, B32);
    CHECK_OK(dev->sync());
    dfree(d_x, 0), dfree(d_w, 0), dfree(d_b, 0), dfree(d_dy, 0), dfree(d_y, 0), dfree(d_dx, 0);
    dfree(d_dw, 0), dfree(d_db, 0), dfree(d_dq, 0), dfree(d_qb, 0);
    free(x), free(w), free(b), free(dy), free(y), free(dx), free(dw), free(db), free(dq);
    free(qb);
    mm_drop(&m);
}

static void case_matmul_fp32(void) { matmul_case(0, B32); }

static void case_matmul_bf16(void)
{
    if (!bf16_here())
        SKIP_CASE("bf16 products cannot run on both backends here: %s", coh_last_error());
    matmul_case(1, B16P);
}

/* the bare product of the table, every transpose, strided rows and beta, fp32 and bf16 */
static void gemm_case(int bf16, double bound)
{
    enum { M = 37, NN = 70, K = 45, LD = 80 };
    size_t e = bf16 ? 2 : 4, nab = (size_t)LD * LD;
    float *a = rnd(nab, 1), *b = rnd(nab, 1), *c = rnd((size_t)M * LD, 1);
    gpt_bf16 *a16 = malloc(nab * 2), *b16 = malloc(nab * 2);
    cpu->to_bf16(a16, a, nab), cpu->to_bf16(b16, b, nab);
    const void *ha = bf16 ? (const void *)a16 : a, *hb = bf16 ? (const void *)b16 : b;
    void *da = dput(ha, nab * e), *db = dput(hb, nab * e);
    float *want = malloc((size_t)M * LD * 4), *dc = dalloc((size_t)M * LD * 4);
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            char name[40];
            snprintf(name, sizeof name, "gemm%s ta %d tb %d", bf16 ? " bf16" : "", ta, tb);
            memcpy(want, c, (size_t)M * LD * 4);
            dev->copy(dc, c, (size_t)M * LD * 4, COH_COPY_H2D);
            float beta = bf16 ? 1.0f : 0.5f; /* the table's bf16 products take 0 or 1 */
            CHECK_OK(cpu->gemm(bf16, ta, tb, M, NN, K, ha, LD, hb, LD, beta, want, LD));
            CHECK_OK(dev->gemm(bf16, ta, tb, M, NN, K, da, LD, db, LD, beta, dc, LD));
            cmp_dev(name, want, dc, (size_t)M * LD, bound);
        }
    CHECK_OK(dev->sync());
    dfree(da, 0), dfree(db, 0), dfree(dc, 0);
    free(a), free(b), free(c), free(a16), free(b16), free(want);
}

static void case_gemm_fp32(void) { gemm_case(0, B32); }

static void case_gemm_bf16(void)
{
    if (!bf16_here())
        SKIP_CASE("bf16 products cannot run on both backends here: %s", coh_last_error());
    gemm_case(1, B16P);
}

static void case_attention(void)
{
    size_t nq = (size_t)N * 3 * C, no = (size_t)N * C, nl = (size_t)B * NH * T;
    float *qkv = rnd(nq, 1.5f), *dy = rnd(no, 1), *out = malloc(no * 4), *lse = malloc(nl * 4);
    float *dqkv = malloc(nq * 4);
    float *d_qkv = dup_dev(qkv, nq), *d_dy = dup_dev(dy, no), *d_out = dalloc(no * 4);
    float *d_lse = dalloc(nl * 4), *d_dqkv = dalloc(nq * 4);
    CHECK_INT(cpu->attention_forward(out, lse, qkv, B, T, C, NH), 0);
    CHECK_INT(dev->attention_forward(d_out, d_lse, d_qkv, B, T, C, NH), 0);
    cmp_dev("attention_forward out", out, d_out, no, B32);
    cmp_dev("attention_forward lse", lse, d_lse, nl, B32);
    CHECK_INT(cpu->attention_backward(dqkv, dy, qkv, lse, B, T, C, NH), 0);
    CHECK_INT(dev->attention_backward(d_dqkv, d_dy, d_qkv, d_lse, B, T, C, NH), 0);
    cmp_dev("attention_backward dqkv", dqkv, d_dqkv, nq, B32);
    CHECK_OK(dev->sync());
    dfree(d_qkv, 0), dfree(d_dy, 0), dfree(d_out, 0), dfree(d_lse, 0), dfree(d_dqkv, 0);
    free(qkv), free(dy), free(out), free(lse), free(dqkv);
}

/* A vocabulary part whose "other parts" add nothing: the host round trip of the statistics. */
static coh_status reduce_alone(void *ctx, float *x, size_t n, int max)
{
    (*(int *)ctx)++;
    return COH_OK;
}

static void head_case(int bf16, int with_part, double bound)
{
    mm_pair m;
    mm_make(&m, bf16);
    float *lnf = rnd(N * C, 1), *wte = rnd(V * C, 0.5f), *dwte = rnd(V * C, 0.1f);
    int32_t *tg = tokens(V);
    float *losses = malloc(N * 4), *dlnf = malloc(N * C * 4);
    float *logits = malloc((size_t)GPT_HEAD_CHUNK * V * 4);
    float *d_lnf = dup_dev(lnf, N * C), *d_wte = dup_dev(wte, V * C);
    float *d_dwte = dup_dev(dwte, V * C), *d_losses = dalloc(N * 4), *d_dlnf = dalloc(N * C * 4);
    float *d_logits = dalloc((size_t)GPT_HEAD_CHUNK * V * 4);
    int32_t *d_tg = dput(tg, N * 4);
    int calls_h = 0, calls_d = 0;
    gpt_vocab_part ph = {0, V, reduce_alone, &calls_h, NULL, 0}, pd = ph;
    pd.ctx = &calls_d;
    size_t chunk = 32; /* several chunks, the last one short */
    CHECK_OK(cpu->head_loss(&m.h, losses, dlnf, dwte, logits, chunk, lnf, wte, tg, N, C, V, 1.0f,
                            with_part ? &ph : NULL));
    CHECK_OK(dev->head_loss(&m.d, d_losses, d_dlnf, d_dwte, d_logits, chunk, d_lnf, d_wte, d_tg,
                            N, C, V, 1.0f, with_part ? &pd : NULL));
    cmp_dev("head_loss losses", losses, d_losses, N, bf16 ? B16P : B32);
    cmp_dev("head_loss dlnf", dlnf, d_dlnf, N * C, bound);
    cmp_dev("head_loss dwte", dwte, d_dwte, V * C, bound);
    if (with_part)
        CHECK_INT(calls_d, calls_h);
    if (!bf16 && !with_part) { /* one row's logits to the host, as sampling asks */
        float *l1 = malloc(V * 4), *l2 = malloc(V * 4);
        cpu->head_logits(NULL, l1, lnf + 5 * C, wte, C, V);
        dev->head_logits(NULL, l2, d_lnf + 5 * C, d_wte, C, V);
        cmp_f32("head_logits", l1, l2, V, B32);
        free(l1), free(l2);
    }
    CHECK_OK(dev->sync());
    dfree(d_lnf, 0), dfree(d_wte, 0), dfree(d_dwte, 0), dfree(d_losses, 0), dfree(d_dlnf, 0);
    dfree(d_logits, 0), dfree(d_tg, 0);
    free(lnf), free(wte), free(dwte), free(tg), free(losses), free(dlnf), free(logits);
    mm_drop(&m);
}

static void case_head_fp32(void) { head_case(0, 0, B32); }
static void case_head_part(void) { head_case(0, 1, B32); }

/* dlogits rounded to bf16 feed both backward products: a rounding step can differ */
static void case_head_bf16(void)
{
    if (!bf16_here())
        SKIP_CASE("bf16 products cannot run on both backends here: %s", coh_last_error());
    head_case(1, 0, B16R);
}

static void case_elementwise(void)
{
    size_t n = 200003; /* several reduction blocks, the last one short */
    float *x = rnd(n, 3), *y = rnd(n, 1), *g = rnd(n, 1), *m = rnd(n, 0.1f), *v = rnd(n, 0.1f);
    for (size_t i = 0; i < n; i++)
        v[i] = fabsf(v[i]);
    float *d_x = dup_dev(x, n), *d_y = dup_dev(y, n), *d_g = dup_dev(g, n);
    float *d_m = dup_dev(m, n), *d_v = dup_dev(v, n);
    cpu->add(y, x, n), dev->add(d_y, d_x, n);
    cmp_dev("add", y, d_y, n, 0);
    cpu->scale(y, n, 0.37f), dev->scale(d_y, n, 0.37f);
    cmp_dev("scale", y, d_y, n, 0);
    cpu->fill(y + 1, n / 7, 7, -2.5f), dev->fill(d_y + 1, n / 7, 7, -2.5f);
    cmp_dev("fill (stride 7)", y, d_y, n, 0);
    double s1 = cpu->sum(x, n), s2 = dev->sum(d_x, n);
    double q1 = cpu->sumsq(x, n), q2 = dev->sumsq(d_x, n);
    printf("  %-34s %.17g vs %.17g\n  %-34s %.17g vs %.17g\n", "sum", s1, s2, "sumsq", q1, q2);
    CHECK_NEAR(s1, s2, 1e-10); /* double sums in two orders */
    CHECK_NEAR(q1, q2, 1e-12);
    gpt_bf16 *h16 = malloc(n * 2), *d16 = dalloc(n * 2), *back;
    x[7] = NAN, x[8] = INFINITY, x[9] = -0.0f; /* rounding keeps them */
    dev->copy(d_x, x, n * 4, COH_COPY_H2D);
    cpu->to_bf16(h16, x, n), dev->to_bf16(d16, d_x, n);
    back = hget(d16, n * 2);
    size_t diff = 0;
    for (size_t i = 0; i < n; i++)
        diff += h16[i] != back[i];
    printf("  %-34s %zu of %zu values differ (bound 0)\n", "to_bf16", diff, n);
    CHECK_INT(diff, 0);
    cpu->from_bf16(y, h16, n), dev->from_bf16(d_y, d16, n);
    cmp_dev("from_bf16", y, d_y, n, 0);
    cpu->adamw(x, g, m, v, n, 0.9f, 0.95f, 1e-8f, 0.999f, 1e-3f, 1.1f);
    dev->adamw(d_x, d_g, d_m, d_v, n, 0.9f, 0.95f, 1e-8f, 0.999f, 1e-3f, 1.1f);
    cmp_dev("adamw p", x, d_x, n, B32);
    cmp_dev("adamw m", m, d_m, n, B32);
    cmp_dev("adamw v", v, d_v, n, B32);
    CHECK_OK(dev->sync());
    dfree(d_x, 0), dfree(d_y, 0), dfree(d_g, 0), dfree(d_m, 0), dfree(d_v, 0), dfree(d16, 0);
    free(x), free(y), free(g), free(m), free(v), free(h16), free(back);
}

int main(void)
{
    cpu = coh_backend_cpu();
    if (!(dev = gpu_open("test_gpu_ops")))
        return check_failures ? 1 : 77;
    RUN(case_encoder);
    RUN(case_layernorm);
    RUN(case_gelu_residual);
    RUN(case_matmul_fp32);
    RUN(case_matmul_bf16);
    RUN(case_gemm_fp32);
    RUN(case_gemm_bf16);
    RUN(case_attention);
    RUN(case_head_fp32);
    RUN(case_head_part);
    RUN(case_head_bf16);
    RUN(case_elementwise);
    return CHECK_REPORT();
}
