/* ops_attention.c: causal multi-head attention. Only one log-sum-exp per query row is kept for
 * backward (never the (B, NH, T, T) probabilities): each (batch, head) task builds its (T, T)
 * scores in a per-thread scratch with sgemm, and backward rebuilds them from the saved lse. */
#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "train/backend/cpu/cpu_ops.h"

/* Row t of causal probabilities in place: exp(s - lse) for j <= t, 0 after. When lse is not
 * yet known (forward) it is computed and stored first. */
GPT_CLONES static void softmax_row(float *s, int t, int T, float *lse, int have_lse)
{
    if (!have_lse) {
        float m = -INFINITY, sum = 0.0f;
        for (int j = 0; j <= t; j++)
            m = s[j] > m ? s[j] : m;
#pragma omp simd reduction(+ : sum)
        for (int j = 0; j <= t; j++)
            sum += gpt_expf(s[j] - m);
        *lse = m + logf(sum);
    }
    float l = *lse;
#pragma omp simd
    for (int j = 0; j <= t; j++)
        s[j] = gpt_expf(s[j] - l);
    for (int j = t + 1; j < T; j++)
        s[j] = 0.0f;
}

/* P (T, T) = causal softmax(Q K^T * scale) of one head; q, k point at its first row. */
static void head_probs(float *P, float *lse, const float *q, const float *k, int T, int hs,
                       int ld, int have_lse)
{
    float scale = 1.0f / sqrtf((float)hs);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, hs, scale, q, ld, k, ld, 0.0f, P,
                T);
    for (int t = 0; t < T; t++)
        softmax_row(P + (size_t)t * T, t, T, lse + t, have_lse);
}

int op_attention_forward(float *out, float *lse, const float *qkv, int B, int T, int C, int NH)
{
    int hs = C / NH, C3 = 3 * C, failed = 0;
#pragma omp parallel reduction(| : failed)
    {
        float *P = malloc((size_t)T * T * sizeof *P);
        failed |= !P;
#pragma omp for schedule(static)
        for (long bh = 0; bh < (long)B * NH; bh++) {
            int b = (int)(bh / NH), h = (int)(bh % NH);
            const float *q = qkv + (size_t)b * T * C3 + h * hs;
            if (!P)
                continue;
            head_probs(P, lse + (size_t)bh * T, q, q + C, T, hs, C3, 0);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, hs, T, 1.0f, P, T,
                        q + 2 * C, C3, 0.0f, out + (size_t)b * T * C + h * hs, C);
        }
        free(P);
    }
    return failed ? -1 : 0;
}

/* dS = P * (dP - rowsum(P * dP)) * scale, in place in dP. */
GPT_CLONES static void dsoftmax(float *dP, const float *P, int T, float scale)
{
    for (int t = 0; t < T; t++) {
        float *d = dP + (size_t)t * T;
        const float *p = P + (size_t)t * T;
        float D = 0.0f;
#pragma omp simd reduction(+ : D)
        for (int j = 0; j <= t; j++)
            D += p[j] * d[j];
        for (int j = 0; j < T; j++)
            d[j] = p[j] * (d[j] - D) * scale;
    }
}

int op_attention_backward(float *dqkv, const float *dout, const float *qkv, const float *lse,
                          int B, int T, int C, int NH)
{
    int hs = C / NH, C3 = 3 * C, failed = 0;
    float scale = 1.0f / sqrtf((float)hs);
    /* one task per (batch, head): it owns that head's q, k, v gradient slices, no races */
#pragma omp parallel reduction(| : failed)
    {
        float *P = malloc(2 * (size_t)T * T * sizeof *P), *dP = P ? P + (size_t)T * T : NULL;
        failed |= !P;
#pragma omp for schedule(static)
        for (long bh = 0; bh < (long)B * NH; bh++) {
            int b = (int)(bh / NH), h = (int)(bh % NH);
            size_t qo = (size_t)b * T * C3 + h * hs;
            const float *q = qkv + qo, *k = q + C, *v = q + 2 * C;
            const float *dy = dout + (size_t)b * T * C + h * hs;
            float *dq = dqkv + qo, *dk = dq + C, *dv = dq + 2 * C;
            if (!P)
                continue;
            head_probs(P, (float *)lse + (size_t)bh * T, q, k, T, hs, C3, 1);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, hs, 1.0f, dy, C, v, C3,
                        0.0f, dP, T);
            dsoftmax(dP, P, T, scale);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, hs, T, 1.0f, dP, T, k, C3,
                        0.0f, dq, C3);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, hs, T, 1.0f, dP, T, q, C3,
                        0.0f, dk, C3);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, hs, T, 1.0f, P, T, dy, C,
                        0.0f, dv, C3);
        }
        free(P);
    }
    return failed ? -1 : 0;
}
