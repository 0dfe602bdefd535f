/* ops_attention.c: causal multi-head attention that keeps only one log-sum-exp per query row
 * (never the (B, NH, T, T) matrix); backward recomputes the scores, flash-attention style. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "train/model/gpt_int.h"

GPT_CLONES static float dot(const float *a, const float *b, int n)
{
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int i = 0; i < n; i++)
        s += a[i] * b[i];
    return s;
}

GPT_CLONES static void axpy(float *y, float a, const float *x, int n)
{
    for (int i = 0; i < n; i++)
        y[i] += a * x[i];
}

/* One query row: scores against keys 0..t, softmax, weighted sum of values. */
static void attn_row(float *o, float *lse, float *sc, const float *q, const float *kv0, int t,
                     int C3, int C, int hs, float scale)
{
    float m = -INFINITY;
    for (int j = 0; j <= t; j++) {
        sc[j] = dot(q, kv0 + (size_t)j * C3, hs) * scale;
        m = sc[j] > m ? sc[j] : m;
    }
    float s = 0.0f;
    for (int j = 0; j <= t; j++) {
        sc[j] = gpt_expf(sc[j] - m);
        s += sc[j];
    }
    memset(o, 0, (size_t)hs * sizeof *o);
    for (int j = 0; j <= t; j++)
        axpy(o, sc[j] / s, kv0 + (size_t)j * C3 + C, hs);
    *lse = m + logf(s);
}

int op_attention_forward(float *out, float *lse, const float *qkv, int B, int T, int C, int NH)
{
    int hs = C / NH, C3 = 3 * C, failed = 0;
    float scale = 1.0f / sqrtf((float)hs);
#pragma omp parallel reduction(| : failed)
    {
        float *sc = malloc((size_t)T * sizeof *sc);
        failed |= !sc;
#pragma omp for schedule(static)
        for (long bh = 0; bh < (long)B * NH; bh++) {
            int b = (int)(bh / NH), h = (int)(bh % NH);
            const float *base = qkv + (size_t)b * T * C3;
            for (int t = 0; t < T && sc; t++)
                attn_row(out + ((size_t)b * T + t) * C + h * hs, lse + (size_t)bh * T + t, sc,
                         base + (size_t)t * C3 + h * hs, base + C + h * hs, t, C3, C, hs, scale);
        }
        free(sc);
    }
    return failed ? -1 : 0;
}

/* Backward of one query row; adds into dq, and into the dk, dv rows of keys 0..t. */
static void attn_row_back(float *dqkv0, const float *qkv0, const float *dout, const float *o,
                          float lse, int t, int C3, int C, int hs, int h, float scale)
{
    const float *q = qkv0 + (size_t)t * C3 + h * hs;
    float *dq = dqkv0 + (size_t)t * C3 + h * hs;
    float D = dot(dout, o, hs);
    for (int j = 0; j <= t; j++) {
        const float *k = qkv0 + (size_t)j * C3 + C + h * hs, *v = k + C;
        float p = gpt_expf(dot(q, k, hs) * scale - lse);
        float ds = p * (dot(dout, v, hs) - D) * scale;
        float *dk = dqkv0 + (size_t)j * C3 + C + h * hs, *dv = dk + C;
        axpy(dq, ds, k, hs);
        axpy(dk, ds, q, hs);
        axpy(dv, p, dout, hs);
    }
}

void op_attention_backward(float *dqkv, const float *dout, const float *qkv, const float *out,
                           const float *lse, int B, int T, int C, int NH)
{
    int hs = C / NH, C3 = 3 * C;
    float scale = 1.0f / sqrtf((float)hs);
    /* One task per (batch, head): it owns that head's q, k, v gradient slices, no races. */
#pragma omp parallel for schedule(static)
    for (long bh = 0; bh < (long)B * NH; bh++) {
        int b = (int)(bh / NH), h = (int)(bh % NH);
        float *d0 = dqkv + (size_t)b * T * C3;
        const float *q0 = qkv + (size_t)b * T * C3;
        for (int t = 0; t < T; t++)
            for (int part = 0; part < 3; part++)
                memset(d0 + (size_t)t * C3 + part * C + h * hs, 0, (size_t)hs * sizeof(float));
        for (int t = 0; t < T; t++) {
            size_t r = (size_t)b * T + t;
            attn_row_back(d0, q0, dout + r * C + h * hs, out + r * C + h * hs,
                          lse[(size_t)bh * T + t], t, C3, C, hs, h, scale);
        }
    }
}
