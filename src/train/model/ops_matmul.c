/* ops_matmul.c: linear layers ([in, out] weights) through CBLAS sgemm, and the fused LM head
 * with softmax and cross-entropy computed a chunk of rows at a time. */
#include <cblas.h>
#include <math.h>
#include <string.h>

#include "train/model/gpt_int.h"
#include "train/model/par.h"

/* sgemm with the OpenMP team splitting C into fixed slices (rows when M >= N, else columns),
 * each thread calling single-threaded OpenBLAS: one thread pool instead of two fighting over
 * the cores, and a partition (so a result) that depends only on the thread count. */
static void par_sgemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int M, int N, int K, const float *A,
                      int lda, const float *B, int ldb, float beta, float *C, int ldc)
{
    int split_rows = M >= N;
#pragma omp parallel
    {
        int k = 1, t = 0;
#ifdef _OPENMP
        k = omp_get_num_threads();
        t = omp_get_thread_num();
#endif
        long len = split_rows ? M : N, unit = 16;
        long blocks = (len + unit - 1) / unit;
        long b0 = blocks * t / k * unit, b1 = blocks * (t + 1) / k * unit;
        b1 = b1 < len ? b1 : len;
        if (b1 > b0 && split_rows)
            cblas_sgemm(CblasRowMajor, ta, tb, (int)(b1 - b0), N, K, 1.0f,
                        A + (ta == CblasNoTrans ? b0 * lda : b0), lda, B, ldb, beta,
                        C + b0 * ldc, ldc);
        else if (b1 > b0)
            cblas_sgemm(CblasRowMajor, ta, tb, M, (int)(b1 - b0), K, 1.0f, A, lda,
                        B + (tb == CblasNoTrans ? b0 : b0 * ldb), ldb, beta, C + b0, ldc);
    }
}

void op_matmul_forward(float *out, const float *inp, const float *w, const float *b, size_t N,
                       int IC, int OC)
{
    if (b) {
#pragma omp parallel for schedule(static)
        for (long i = 0; i < (long)N; i++)
            memcpy(out + (size_t)i * OC, b, (size_t)OC * sizeof *b);
    }
    par_sgemm(CblasNoTrans, CblasNoTrans, (int)N, OC, IC, inp, IC, w, OC, b ? 1.0f : 0.0f, out,
              OC);
}

/* Column sums of dout (N rows of stride ld) into db (OC), each column by one thread in row
 * order. */
static void bias_backward(float *db, const float *dout, size_t N, int OC, int ld)
{
#pragma omp parallel
    {
        int c0, c1;
        par_range(OC, &c0, &c1);
        for (size_t i = 0; i < N; i++) {
            const float *d = dout + i * ld;
            for (int c = c0; c < c1; c++)
                db[c] += d[c];
        }
    }
}

void op_matmul_backward(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                        const float *w, size_t N, int IC, int OC, int accumulate)
{
    par_sgemm(CblasNoTrans, CblasTrans, (int)N, IC, OC, dout, OC, w, OC, accumulate ? 1.0f : 0.0f,
              dinp, IC);
    par_sgemm(CblasTrans, CblasNoTrans, IC, OC, (int)N, inp, IC, dout, OC, 1.0f, dw, OC);
    if (db)
        bias_backward(db, dout, N, OC, OC);
}

/* The key third of the bias gets its exact gradient, zero, instead of the sum of dk: adding b_k
 * to every key adds the same q_i . b_k to every score of query row i, and softmax is invariant
 * to a constant added to a row (the causal mask drops whole entries, so it stays a constant).
 * Summed in float, dk gives rounding noise (~1e-10) that AdamW's m / sqrt(v) would turn into
 * lr-sized steps, different for every summation order: every way of splitting a batch would then
 * end with different key biases. */
void op_qkv_bias_backward(float *db, const float *dqkv, size_t N, int C)
{
    bias_backward(db, dqkv, N, C, 3 * C);
    memset(db + C, 0, (size_t)C * sizeof *db);
    bias_backward(db + 2 * C, dqkv + 2 * C, N, C, 3 * C);
}

/* Softmax cross-entropy of one row of logits; with dscale != 0 the row becomes its gradient
 * (softmax - onehot) * dscale. Returns the loss. */
GPT_CLONES static float xent_row(float *l, int V, int target, float dscale)
{
    float m = -INFINITY;
#pragma omp simd reduction(max : m)
    for (int j = 0; j < V; j++)
        m = l[j] > m ? l[j] : m;
    float s = 0.0f, lt = l[target];
    if (dscale == 0.0f) {
#pragma omp simd reduction(+ : s)
        for (int j = 0; j < V; j++)
            s += gpt_expf(l[j] - m);
        return m + logf(s) - lt;
    }
#pragma omp simd reduction(+ : s)
    for (int j = 0; j < V; j++) {
        l[j] = gpt_expf(l[j] - m);
        s += l[j];
    }
    float f = dscale / s;
    for (int j = 0; j < V; j++)
        l[j] *= f;
    l[target] -= dscale;
    return m + logf(s) - lt;
}

void op_head_loss(float *losses, float *dlnf, float *dwte, float *logits, size_t chunk,
                  const float *lnf, const float *wte, const int32_t *targets, size_t N, int C,
                  int V, float grad_scale)
{
    float dscale = dlnf ? grad_scale / (float)N : 0.0f;
    for (size_t r0 = 0; r0 < N; r0 += chunk) {
        size_t R = N - r0 < chunk ? N - r0 : chunk;
        const float *x = lnf + r0 * C;
        par_sgemm(CblasNoTrans, CblasTrans, (int)R, V, C, x, C, wte, C, 0.0f, logits, V);
#pragma omp parallel for schedule(static)
        for (long r = 0; r < (long)R; r++)
            losses[r0 + r] = xent_row(logits + (size_t)r * V, V, targets[r0 + r], dscale);
        if (!dlnf)
            continue;
        par_sgemm(CblasNoTrans, CblasNoTrans, (int)R, C, V, logits, V, wte, C, 0.0f, dlnf + r0 * C,
                  C);
        par_sgemm(CblasTrans, CblasNoTrans, V, C, (int)R, logits, V, x, C, 1.0f, dwte, C);
    }
}

void op_head_logits(float *logits, const float *x, const float *wte, int C, int V)
{
    cblas_sgemv(CblasRowMajor, CblasNoTrans, V, C, 1.0f, wte, C, x, 1, 0.0f, logits, 1);
}
