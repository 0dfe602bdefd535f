/* test_train_bf16.c: the bf16-mixed ops against their fp32 versions and against exact products,
 * within bounds derived from bf16 rounding: the rounding itself (nearest even), the matmul
 * forward and backward, what bf16-mixed keeps of a LayerNorm and a GELU and the products on it,
 * the fused LM head, and a whole model's step; the widened product (bf16 without AVX-512)
 * against exact products.
 *
 * The bounds. Rounding a float to bf16 (8 significant bits) changes it by at most u = 2^-9 of
 * itself, so a product a b of two rounded operands is off by at most (2u + u^2) |a b| < 2^-8
 * |a b|, and a sum of K such products, accumulated in fp32, by at most
 *     2^-8 S + K 2^-24 S (1 + 2^-8) with S = sum_k |a_k b_k|
 * from the exact product of the unrounded operands: each element is checked against that,
 * computed per element, and separately against the exact (double) product of the operands as
 * rounded, which leaves only the fp32 accumulation, K 2^-24 S. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#define TEST_RAND_SEED 4242ull /* urand(), rnd() */
#include "test_rand.h"
#include "cohort/train.h"
#include "train/backend/cpu/cpu_ops.h"
#include "train/model/gpt_int.h"

static float *copy(const float *x, size_t n)
{
    float *y = malloc(n * sizeof *y);
    memcpy(y, x, n * sizeof *y);
    return y;
}

/* x rounded to bf16 and back: the test's own definition, from the value (not the bits). */
static double round_bf16(float x)
{
    if (x == 0.0f || !isfinite(x))
        return x;
    int e;
    frexp(x, &e);                 /* |x| in [2^(e-1), 2^e) */
    double ulp = ldexp(1.0, e - 8); /* 8 significant bits */
    double q = x / ulp, lo = floor(q), r = q - lo;
    double k = r > 0.5 ? lo + 1 : r < 0.5 ? lo : (fmod(lo, 2.0) == 0 ? lo : lo + 1);
    return k * ulp;
}

static int skip_reason(char *why, size_t cap)
{
    return coh_bf16_support(why, cap) == COH_BF16_UNAVAILABLE;
}

static const double U8 = 1.0 / 256.0, E32 = 1.0 / 16777216.0;

/* ---- rounding: nearest even, against the definition by value; NaN and infinities kept ---- */
static void test_rounding(void)
{
    enum { n = 20000 };
    float *x = malloc(n * sizeof *x);
    gpt_bf16 *h = malloc(n * sizeof *h);
    for (int i = 0; i < n; i++) {
        float m = urand();
        x[i] = ldexpf(m, (i % 60) - 30);
    }
    /* exact ties: 1 + 2^-8 (even below: 1), 1 + 3 2^-8 (even above: 1 + 2^-6) */
    x[0] = 1.0f + 1.0f / 256.0f;
    x[1] = 1.0f + 3.0f / 256.0f;
    x[2] = INFINITY;
    x[3] = -INFINITY;
    x[4] = NAN;
    x[5] = FLT_MAX; /* above the largest bf16 by more than half its ulp: infinity */
    gpt_to_bf16(h, x, n);
    int wrong = 0;
    for (int i = 6; i < n; i++)
        wrong += gpt_bf16_to_float(h[i]) != round_bf16(x[i]);
    CHECK_INT(wrong, 0);
    CHECK(gpt_bf16_to_float(h[0]) == 1.0f);
    CHECK(gpt_bf16_to_float(h[1]) == 1.0f + 4.0f / 256.0f);
    CHECK(gpt_bf16_to_float(h[2]) == INFINITY);
    CHECK(gpt_bf16_to_float(h[3]) == -INFINITY);
    CHECK(isnan(gpt_bf16_to_float(h[4])));
    CHECK(gpt_bf16_to_float(h[5]) == INFINITY);
    /* in place, row by row (stride 2 ld in bf16 units), equals the separate conversion */
    size_t rows = 7, cols = 333, ld = 333;
    float *y = rnd(rows * ld, 5.0f), *y0 = copy(y, rows * ld);
    gpt_bf16 *ref = malloc(rows * cols * sizeof *ref);
    gpt_to_bf16(ref, y0, rows * cols);
    gpt_to_bf16_rows_inplace(y, rows, cols, ld);
    const gpt_bf16 *in = (const gpt_bf16 *)(void *)y;
    wrong = 0;
    for (size_t r = 0; r < rows; r++)
        wrong += memcmp(in + r * 2 * ld, ref + r * cols, cols * sizeof *ref) != 0;
    CHECK_INT(wrong, 0);
    free(x), free(h), free(y), free(y0), free(ref);
}

/* C (M,N) = op(A) op(B) with A (M,K) or its transpose stored, checked element by element:
 * against double on the unrounded operands within 2^-8 S + K 2^-24 S (1 + 2^-8), and against
 * double on the rounded operands within K 2^-24 S. Returns the largest |C - fp32 C| over S, so
 * the caller can see the bf16 path really ran (it is not 0). */
static double check_product(const float *C, const float *C32, const float *A, const float *B,
                            int M, int N, int K, int ta, int tb, const float *C0)
{
    int bad_bound = 0, bad_rounded = 0;
    double most = 0;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double exact = C0 ? C0[i * N + j] : 0, rounded = exact, S = C0 ? fabs(exact) : 0;
            for (int k = 0; k < K; k++) {
                float a = ta ? A[k * M + i] : A[i * K + k], b = tb ? B[j * K + k] : B[k * N + j];
                exact += (double)a * b;
                rounded += round_bf16(a) * round_bf16(b);
                S += fabs((double)a * b);
            }
            double c = C[i * N + j];
            if (!(fabs(c - exact) <= U8 * S + K * E32 * S * (1 + U8) + 1e-30))
                bad_bound++;
            if (!(fabs(c - rounded) <= (K + 1) * E32 * S * (1 + U8) + 1e-30))
                bad_rounded++;
            double d = fabs(c - C32[i * N + j]) / (S > 0 ? S : 1);
            most = d > most ? d : most;
        }
    CHECK_INT(bad_bound, 0);
    CHECK_INT(bad_rounded, 0);
    return most;
}

static void mm_alloc(gpt_mm *mm, size_t a, size_t b, size_t w, size_t wte)
{
    *mm = (gpt_mm){0}; /* no scratchpad of its own: the thread's is used */
    mm->bf16 = 1;
    mm->a = malloc(a * sizeof(gpt_bf16));
    mm->b = malloc(b * sizeof(gpt_bf16));
    mm->w = malloc(w * sizeof(gpt_bf16));
    mm->wte = malloc(wte * sizeof(gpt_bf16));
}

static void mm_free(gpt_mm *mm)
{
    free(mm->a), free(mm->b), free(mm->w), free(mm->wte);
}

/* ---- linear layer forward (bias first, then the product accumulated) and backward ---- */
static void test_matmul(void)
{
    char why[200];
    if (skip_reason(why, sizeof why))
        SKIP_CASE("%s", why);
    size_t N = 96;
    int IC = 72, OC = 136;
    float *inp = rnd(N * IC, 1.0f), *w = rnd((size_t)IC * OC, 0.5f), *b = rnd(OC, 0.3f);
    float *out = malloc(N * OC * 4), *out32 = malloc(N * OC * 4);
    float *dout = rnd(N * OC, 1.0f);
    float *dinp = malloc(N * IC * 4), *dinp32 = malloc(N * IC * 4);
    float *dw0 = rnd((size_t)IC * OC, 0.2f), *dw = copy(dw0, (size_t)IC * OC),
          *dw32 = copy(dw0, (size_t)IC * OC);
    float *db = calloc(OC, 4), *db32 = calloc(OC, 4);
    gpt_mm mm;
    mm_alloc(&mm, N * IC, N * OC, (size_t)IC * OC, 1);

    op_matmul_forward(NULL, out32, inp, w, b, N, IC, OC);
    op_matmul_backward(NULL, dinp32, dw32, db32, dout, inp, w, N, IC, OC, 0);
    op_matmul_forward(&mm, out, inp, w, b, N, IC, OC);
    op_matmul_backward(&mm, dinp, dw, db, dout, inp, w, N, IC, OC, 0);

    /* forward: the bias rows are the initial C of the product */
    float *bias_rows = malloc(N * OC * 4);
    for (size_t i = 0; i < N; i++)
        memcpy(bias_rows + i * OC, b, OC * 4);
    double d1 = check_product(out, out32, inp, w, (int)N, OC, IC, 0, 0, bias_rows);
    /* dinp = dout w^T: B = w stored (IC, OC), transposed */
    double d2 = check_product(dinp, dinp32, dout, w, (int)N, IC, OC, 0, 1, NULL);
    /* dw = dw0 + inp^T dout: A = inp stored (N, IC), transposed */
    double d3 = check_product(dw, dw32, inp, dout, IC, OC, (int)N, 1, 0, dw0);
    printf("  largest |bf16 - fp32| / S: forward %.2e, dinp %.2e, dw %.2e (bound 2^-8 = %.2e)\n",
           d1, d2, d3, U8);
    CHECK(d1 > 1e-4 && d2 > 1e-4 && d3 > 1e-4); /* the bf16 path ran: fp32 is far closer */
    /* the bias gradient is summed in fp32 from the fp32 dout: the same bits */
    CHECK(memcmp(db, db32, OC * 4) == 0);
    /* accumulate: dinp += dout w^T on top of what is there */
    float *acc = copy(dinp, N * IC);
    op_matmul_backward(&mm, acc, dw, db, dout, inp, w, N, IC, OC, 1);
    int bad = 0;
    for (size_t i = 0; i < N * IC; i++)
        bad += fabsf(acc[i] - 2.0f * dinp[i]) > 1e-5f * (1.0f + fabsf(dinp[i]));
    CHECK_INT(bad, 0);
    mm_free(&mm);
    free(inp), free(w), free(b), free(out), free(out32), free(dout), free(dinp), free(dinp32);
    free(dw0), free(dw), free(dw32), free(db), free(db32), free(bias_rows), free(acc);
}

/* ---- what bf16-mixed keeps of a LayerNorm and a GELU (their outputs rounded to bf16, packed),
 * and the products on such a kept input: each kept value is the fp32 op's output rounded to
 * nearest even (within one bf16 rounding of it: the fp32 op may contract differently), and the
 * products equal op_matmul_forward/backward's on the same fp32 input bit for bit (the same
 * bf16 operands, the same product). ---- */
static void test_kept_bf16(void)
{
    char why[200];
    if (skip_reason(why, sizeof why))
        SKIP_CASE("%s", why);
    size_t N = 64;
    int C = 96, OC = 80;
    float *x = rnd(N * C, 2.0f), *w = rnd(C, 1.0f), *b = rnd(C, 0.5f);
    float *y = malloc(N * C * 4), *mean = malloc(N * 4), *rstd = malloc(N * 4);
    float *mean2 = malloc(N * 4), *rstd2 = malloc(N * 4);
    gpt_bf16 *h = malloc(N * C * sizeof *h), *g = malloc(N * C * sizeof *g);
    op_layernorm_forward(y, mean, rstd, x, w, b, N, C);
    op_layernorm_forward_bf16(h, mean2, rstd2, x, w, b, N, C);
    int bad = 0, same = 0;
    for (size_t i = 0; i < N * C; i++) {
        double r = round_bf16(y[i]), v = gpt_bf16_to_float(h[i]);
        same += v == r;
        bad += !(fabs(v - y[i]) <= U8 * fabs(y[i]));
    }
    CHECK_INT(bad, 0);
    CHECK(same >= (int)(N * C) * 99 / 100);
    CHECK(memcmp(mean, mean2, N * 4) == 0 && memcmp(rstd, rstd2, N * 4) == 0);
    op_gelu_forward(y, x, N * C);
    op_gelu_forward_bf16(g, x, N * C);
    bad = 0;
    for (size_t i = 0; i < N * C; i++)
        bad += !(fabs(gpt_bf16_to_float(g[i]) - y[i]) <= U8 * fabs(y[i]));
    CHECK_INT(bad, 0);
    /* products on the kept GELU output against the same products on its fp32 widening */
    float *yw = malloc(N * C * 4), *W = rnd((size_t)C * OC, 0.5f), *bo = rnd(OC, 0.2f);
    for (size_t i = 0; i < N * C; i++)
        yw[i] = gpt_bf16_to_float(g[i]);
    float *o1 = malloc(N * OC * 4), *o2 = malloc(N * OC * 4), *dout = rnd(N * OC, 1.0f);
    float *di1 = malloc(N * C * 4), *di2 = malloc(N * C * 4);
    float *dw1 = calloc((size_t)C * OC, 4), *dw2 = calloc((size_t)C * OC, 4);
    float *db1 = calloc(OC, 4), *db2 = calloc(OC, 4);
    gpt_mm mm;
    mm_alloc(&mm, N * C, N * OC, (size_t)C * OC, 1);
    op_matmul_forward(&mm, o1, yw, W, bo, N, C, OC);
    op_matmul_forward_h(&mm, o2, g, W, bo, N, C, OC);
    op_matmul_backward(&mm, di1, dw1, db1, dout, yw, W, N, C, OC, 0);
    op_matmul_backward_h(&mm, di2, dw2, db2, dout, g, W, N, C, OC, 0);
    CHECK(memcmp(o1, o2, N * OC * 4) == 0);
    CHECK(memcmp(di1, di2, N * C * 4) == 0);
    CHECK(memcmp(dw1, dw2, (size_t)C * OC * 4) == 0 && memcmp(db1, db2, OC * 4) == 0);
    mm_free(&mm);
    free(x), free(w), free(b), free(y), free(mean), free(rstd), free(mean2), free(rstd2);
    free(h), free(g), free(yw), free(W), free(bo), free(o1), free(o2), free(dout), free(di1);
    free(di2), free(dw1), free(dw2), free(db1), free(db2);
}

/* ---- the fused head: losses, dlnf and dwte, chunk smaller than the rows (a partial last
 * chunk), against an fp64 reference on the unrounded operands. With z = x w^T off by at most
 * delta_r = 2^-8 max_j S_rj (+ fp32) per row, the loss (log-sum-exp minus the target's logit)
 * is off by at most 2 delta_r; each probability by at most p (e^(2 delta_r) - 1); the gradient
 * g = dscale (p - onehot), rounded to bf16, and wte's rounding add 2^-8 of each term of the two
 * backward products. Those bounds are computed per element below. Twice: the chunk's dL/dlogits
 * rounded in place and its backward products per chunk, and kept for a group of rows (gpt_mm.dl,
 * 32 rows: groups of 32 and 13) with the backward products once a group, whose losses are the
 * same bits (the same row pass). ---- */
typedef struct head_case {
    size_t N, chunk;
    int C, V;
    float *lnf, *wte, gs;
    int32_t *tgt;
    double *p, *delta; /* the fp64 probabilities and each row's logit bound */
} head_case;

/* Elements of losses, dlnf and dwte beyond their bounds (out[0..2]). */
static void head_check(const head_case *h, const float *losses, const float *dlnf,
                       const float *dwte, int out[3])
{
    size_t N = h->N;
    int C = h->C, V = h->V;
    double dscale = h->gs / (double)N;
    out[0] = out[1] = out[2] = 0;
    for (size_t r = 0; r < N; r++) {
        double zmax = -1e300, d = 0, *pr = h->p + r * V;
        for (int j = 0; j < V; j++) {
            double z = 0, S = 0;
            for (int k = 0; k < C; k++) {
                z += (double)h->lnf[r * C + k] * h->wte[(size_t)j * C + k];
                S += fabs((double)h->lnf[r * C + k] * h->wte[(size_t)j * C + k]);
            }
            pr[j] = z;
            zmax = z > zmax ? z : zmax;
            double dj = U8 * S + C * E32 * S * (1 + U8);
            d = dj > d ? dj : d;
        }
        h->delta[r] = d;
        double sum = 0;
        for (int j = 0; j < V; j++)
            sum += exp(pr[j] - zmax);
        double loss = zmax + log(sum) - pr[h->tgt[r]];
        for (int j = 0; j < V; j++)
            pr[j] = exp(pr[j] - zmax) / sum;
        /* + the fp32 softmax's own error (log and exp, sums of V terms: well below 1e-5) */
        if (!(fabs(losses[r] - loss) <= 2 * d + 1e-5 * (1 + fabs(loss))))
            out[0]++;
    }
    for (size_t r = 0; r < N; r++) {
        double grow = exp(2 * h->delta[r]) - 1;
        for (int c = 0; c < C; c++) {
            double exact = 0, bound = 0;
            for (int j = 0; j < V; j++) {
                double g = dscale * (h->p[r * V + j] - (j == h->tgt[r]));
                double wj = h->wte[(size_t)j * C + c], dp = dscale * h->p[r * V + j] * grow;
                exact += g * wj;
                bound += ((fabs(g) + dp) * U8 + dp) * fabs(wj) + (fabs(g) + dp) * fabs(wj) * V * E32;
            }
            if (!(fabs(dlnf[r * C + c] - exact) <= bound * 1.01 + 1e-6 * dscale))
                out[1]++;
        }
    }
    for (int j = 0; j < V; j++)
        for (int c = 0; c < C; c++) {
            double exact = 0, bound = 0;
            for (size_t r = 0; r < N; r++) {
                double g = dscale * (h->p[r * V + j] - (j == h->tgt[r])), x = h->lnf[r * C + c];
                double dp = dscale * h->p[r * V + j] * (exp(2 * h->delta[r]) - 1);
                exact += g * x;
                bound += ((fabs(g) + dp) * U8 + dp) * fabs(x) + (fabs(g) + dp) * fabs(x) * N * E32;
            }
            if (!(fabs(dwte[(size_t)j * C + c] - exact) <= bound * 1.01 + 1e-6 * dscale))
                out[2]++;
        }
}

static void test_head(void)
{
    char why[200];
    if (skip_reason(why, sizeof why))
        SKIP_CASE("%s", why);
    head_case h = {.N = 45, .chunk = 16, .C = 40, .V = 301, .gs = 1.5f};
    size_t N = h.N, chunk = h.chunk;
    int C = h.C, V = h.V;
    h.lnf = rnd(N * C, 1.0f);
    h.wte = rnd((size_t)V * C, 0.5f);
    h.tgt = malloc(N * sizeof *h.tgt);
    for (size_t i = 0; i < N; i++)
        h.tgt[i] = (int32_t)((i * 37 + 11) % (size_t)V);
    h.p = malloc(N * V * sizeof *h.p);
    h.delta = malloc(N * sizeof *h.delta);
    float *logits = malloc(chunk * V * 4), *losses32 = malloc(N * 4);
    float *dlnf32 = calloc(N * C, 4), *dwte32 = calloc((size_t)V * C, 4);
    gpt_mm mm;
    mm_alloc(&mm, N * C, 1, 1, (size_t)V * C);
    CHECK_OK(op_head_loss(NULL, losses32, dlnf32, dwte32, logits, chunk, h.lnf, h.wte, h.tgt, N,
                          C, V, h.gs, NULL));
    float *first = NULL;
    for (int grouped = 0; grouped < 2; grouped++) {
        float *losses = malloc(N * 4), *dlnf = calloc(N * C, 4), *dwte = calloc((size_t)V * C, 4);
        mm.dl_rows = grouped ? 32 : 0;
        mm.dl = grouped ? malloc(mm.dl_rows * V * sizeof *mm.dl) : NULL;
        CHECK_OK(op_head_loss(&mm, losses, dlnf, dwte, logits, chunk, h.lnf, h.wte, h.tgt, N, C, V,
                              h.gs, NULL));
        int bad[3];
        head_check(&h, losses, dlnf, dwte, bad);
        double most = 0;
        for (size_t r = 0; r < N; r++) {
            double dl = fabs(losses[r] - losses32[r]);
            most = dl > most ? dl : most;
        }
        printf("  head (%s): largest |loss bf16 - loss fp32| %.2e\n",
               grouped ? "dL/dlogits kept for groups of 32 rows" : "per chunk", most);
        CHECK_INT(bad[0], 0);
        CHECK_INT(bad[1], 0);
        CHECK_INT(bad[2], 0);
        CHECK(most > 1e-6); /* the bf16 path ran */
        if (grouped)
            CHECK(memcmp(first, losses, N * sizeof *losses) == 0);
        free(mm.dl), free(dlnf), free(dwte);
        if (grouped)
            free(losses);
        else
            first = losses;
    }
    mm_free(&mm);
    free(h.lnf), free(h.wte), free(h.tgt), free(logits), free(first), free(losses32);
    free(dlnf32), free(dwte32), free(h.p), free(h.delta);
}

/* ---- a whole model: coh_gpt_set_bf16_mixed changes the products only. The loss and the
 * gradient of a bf16-mixed step stay within a few bf16 roundings of fp32's (relative L2 of the
 * whole gradient below 2^-5: each of the ~10 products a gradient passes through adds at most
 * 2^-8 relative, plus what LayerNorm's 1/sigma amplifies), and differ from them (the flag did
 * something); turning it off gives fp32's bits again. ---- */
static void test_model(void)
{
    char why[200];
    if (skip_reason(why, sizeof why))
        SKIP_CASE("%s", why);
    coh_gpt_config cfg = {2, 4, 64, 97, 16, 0, 0};
    int B = 3, T = 16;
    coh_gpt *g;
    CHECK_OK(coh_gpt_create(&cfg, B, T, &g));
    if (!g)
        return;
    coh_gpt_init_weights(g, 3);
    size_t n;
    float *gr = coh_gpt_grads(g, &n);
    int32_t tok[48], tgt[48];
    for (int i = 0; i < 48; i++)
        tok[i] = (i * 13 + 5) % 97, tgt[i] = (i * 29 + 1) % 97;
    float l32, l16, lback;
    coh_gpt_zero_grad(g);
    CHECK_OK(coh_gpt_step(g, tok, tgt, B, T, 1.0f, &l32));
    float *g32 = copy(gr, n);
    CHECK_OK(coh_gpt_set_bf16_mixed(g, 1));
    coh_gpt_zero_grad(g);
    CHECK_OK(coh_gpt_step(g, tok, tgt, B, T, 1.0f, &l16));
    double d2 = 0, n2 = 0;
    for (size_t i = 0; i < n; i++)
        d2 += ((double)gr[i] - g32[i]) * ((double)gr[i] - g32[i]), n2 += (double)g32[i] * g32[i];
    double rel = sqrt(d2 / n2);
    printf("  model: loss fp32 %.6f bf16 %.6f, gradient relative L2 %.2e\n", l32, l16, rel);
    CHECK_NEAR(l16, l32, 1e-2);
    CHECK(l16 != l32);
    CHECK(rel < 1.0 / 32 && rel > 1e-5);
    CHECK_OK(coh_gpt_set_bf16_mixed(g, 0));
    coh_gpt_zero_grad(g);
    CHECK_OK(coh_gpt_step(g, tok, tgt, B, T, 1.0f, &lback));
    CHECK(lback == l32 && memcmp(gr, g32, n * sizeof *gr) == 0);
    free(g32);
    coh_gpt_destroy(g);
}

/* ---- the widened product (CPUs oneDNN cannot run bf16 on), on every CPU ----
 * Small integers are exact in bf16 and their sums of products exact in fp32 (|sum| < 2^24), so
 * every element must equal the double product bit for bit, whatever the order of the sums: at
 * shapes that cross every tile edge (512 x 512 x 256), each transpose, beta 0 and 1, row strides
 * past the columns, and the padding beyond each row of C untouched. With the scratch given too
 * small it takes the thread's own; the scratch size covers one tile of each operand. */
static void test_widened(void)
{
    enum { M = 600, N = 530, K = 300, PAD = 3 };
    size_t lda_n = K + PAD, lda_t = M + PAD, ldb_n = N + PAD, ldb_t = K + PAD, ldc = N + PAD;
    gpt_bf16 *A = malloc((size_t)M * lda_t * 2 > (size_t)K * lda_t * 2 ? (size_t)M * lda_t * 2
                                                                        : (size_t)K * lda_t * 2);
    gpt_bf16 *B = malloc((size_t)(N + K) * (N + K + PAD) * 2);
    float *x = malloc((size_t)(M + K) * (M + K + PAD) * sizeof *x);
    float *C = malloc((size_t)M * ldc * sizeof *C);
    double *want = malloc((size_t)M * N * sizeof *want);
    CHECK(gpt_gemm_bf16_widened_scratch(M, N, K) == (512 * 256 + 256 * 512) * sizeof(float));
    CHECK(gpt_gemm_bf16_widened_scratch(5, 7, 3) == (5 * 3 + 3 * 7) * sizeof(float));
    size_t tiles = gpt_gemm_bf16_widened_scratch(M, N, K);
    void *scratch = malloc(tiles);
    for (int kind = 0; kind < 8; kind++) {
        int ta = kind & 1, tb = (kind >> 1) & 1, acc = (kind >> 2) & 1;
        size_t lda = ta ? lda_t : lda_n, ldb = tb ? ldb_t : ldb_n;
        size_t arows = ta ? K : M, brows = tb ? N : K;
        for (size_t i = 0; i < arows * lda; i++)
            x[i] = (float)((int)(urand() * 7.0f) % 7 - 3);
        gpt_to_bf16(A, x, arows * lda);
        for (size_t i = 0; i < brows * ldb; i++)
            x[i] = (float)((int)(urand() * 5.0f) % 5 - 2);
        gpt_to_bf16(B, x, brows * ldb);
        for (size_t i = 0; i < (size_t)M * ldc; i++)
            C[i] = (float)((int)(i % 11) - 5);
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) {
                double w = acc ? C[(size_t)i * ldc + j] : 0.0;
                for (int l = 0; l < K; l++) {
                    size_t ia = ta ? (size_t)l * lda + i : (size_t)i * lda + l,
                           ib = tb ? (size_t)j * ldb + l : (size_t)l * ldb + j;
                    w += (double)gpt_bf16_to_float(A[ia]) * gpt_bf16_to_float(B[ib]);
                }
                want[(size_t)i * N + j] = w;
            }
        /* odd kinds with the model's scratch, even ones with one too small (the thread's) */
        CHECK_OK(gpt_gemm_bf16_widened(scratch, kind & 1 ? tiles : tiles - 4, ta, tb, M, N, K, A,
                                       lda, B, ldb, acc ? 1.0f : 0.0f, C, ldc));
        size_t wrong = 0, pad = 0;
        for (int i = 0; i < M; i++) {
            for (int j = 0; j < N; j++)
                wrong += C[(size_t)i * ldc + j] != want[(size_t)i * N + j];
            for (int j = N; j < (int)ldc; j++)
                pad += C[(size_t)i * ldc + j] != (float)((int)(((size_t)i * ldc + j) % 11) - 5);
        }
        if (wrong || pad)
            fprintf(stderr, "widened ta %d tb %d beta %d: %zu of %d elements wrong, %zu padding "
                    "values written\n", ta, tb, acc, wrong, M * N, pad);
        CHECK(wrong == 0 && pad == 0);
    }
    gpt_gemm_bf16_widened_release_thread();
    free(scratch);
    free(A);
    free(B);
    free(x);
    free(C);
    free(want);
}

/* ---- the kernels prepared ahead and the memory the flag adds ---- */
static void test_prepare(void)
{
    char why[200];
    if (skip_reason(why, sizeof why))
        SKIP_CASE("%s", why);
    coh_gpt_config cfg = {2, 4, 64, 97, 16, 0, 0};
    CHECK_OK(coh_bf16_prepare(&cfg, 3, 16));
    CHECK_FAILS(coh_bf16_prepare(&cfg, 3, 17), COH_ERR_INVALID, "invalid batch 3 x 17");
    /* operands: a, b (48 rows x 256), w (64 x 256), wte (97 x 64), bf16; + a scratchpad */
    size_t operands = (48 * 256 * 2 + 64 * 256 + 97 * 64) * 2;
    size_t got = coh_train_memory_bf16(&cfg, 3, 16);
    CHECK(got >= operands);
    CHECK(coh_train_memory_bf16(&cfg, 3, 17) == 0);
}

int main(void)
{
    char why[200];
    coh_bf16_level lv = coh_bf16_support(why, sizeof why);
    printf("bf16 here: %s (%s)\n", lv == COH_BF16_NATIVE ? "native" : lv == COH_BF16_EMULATED
                                                              ? "emulated" : "unavailable", why);
    RUN(test_rounding);
    RUN(test_matmul);
    RUN(test_widened);
    RUN(test_kept_bf16);
    RUN(test_head);
    RUN(test_model);
    RUN(test_prepare);
    return CHECK_REPORT();
}
