/* ops_basic.c: embedding, LayerNorm, GELU and residual ops, forward and backward. Reductions
 * over rows run column-parallel in row order, so results never depend on the thread count. */
#include <math.h>
#include <string.h>

#include "train/backend/cpu/cpu_ops.h"
#include "train/backend/cpu/par.h"

void op_encoder_forward(float *out, const int32_t *tok, const float *wte, const float *wpe, int B,
                        int T, int C, int v0, int vn, int add_wpe)
{
#pragma omp parallel for schedule(static)
    for (long i = 0; i < (long)B * T; i++) {
        const float *p = wpe + (size_t)(i % T) * C;
        float *o = out + (size_t)i * C;
        int v = tok[i] - v0;
        if (v >= 0 && v < vn) {
            const float *e = wte + (size_t)v * C;
            if (add_wpe)
                for (int c = 0; c < C; c++)
                    o[c] = e[c] + p[c];
            else
                memcpy(o, e, (size_t)C * sizeof *o);
        } else if (add_wpe) {
            memcpy(o, p, (size_t)C * sizeof *o);
        } else {
            memset(o, 0, (size_t)C * sizeof *o);
        }
    }
}

void op_encoder_backward(float *dwte, float *dwpe, const float *dout, const int32_t *tok, int B,
                         int T, int C, int v0, int vn)
{
    /* Columns split over threads: two rows with the same token never race, order is fixed. */
#pragma omp parallel
    {
        int c0, c1;
        par_range(C, &c0, &c1);
        for (long i = 0; i < (long)B * T; i++) {
            const float *d = dout + (size_t)i * C;
            float *p = dwpe + (size_t)(i % T) * C;
            int v = tok[i] - v0;
            if (v >= 0 && v < vn) {
                float *e = dwte + (size_t)v * C;
                for (int c = c0; c < c1; c++)
                    e[c] += d[c];
            }
            for (int c = c0; c < c1; c++)
                p[c] += d[c];
        }
    }
}

/* A row's mean and 1 / standard deviation. */
GPT_CLONES static void ln_stats(const float *x, int C, float *mean, float *rstd)
{
    float m = 0.0f, v = 0.0f;
#pragma omp simd reduction(+ : m)
    for (int c = 0; c < C; c++)
        m += x[c];
    m /= (float)C;
#pragma omp simd reduction(+ : v)
    for (int c = 0; c < C; c++)
        v += (x[c] - m) * (x[c] - m);
    *mean = m;
    *rstd = 1.0f / sqrtf(v / (float)C + 1e-5f);
}

GPT_CLONES static void ln_row(float *o, float *mean, float *rstd, const float *x, const float *w,
                              const float *b, int C)
{
    ln_stats(x, C, mean, rstd);
    float m = *mean, s = *rstd;
    for (int c = 0; c < C; c++)
        o[c] = (x[c] - m) * s * w[c] + b[c];
}

void op_layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *w,
                          const float *b, size_t N, int C)
{
#pragma omp parallel for schedule(static)
    for (long i = 0; i < (long)N; i++)
        ln_row(out + (size_t)i * C, mean + i, rstd + i, inp + (size_t)i * C, w, b, C);
}

/* ln_row's statistics, then its output 64 values at a time through a buffer, rounded. */
GPT_CLONES static void ln_row_bf16(gpt_bf16 *o, float *mean, float *rstd, const float *x,
                                   const float *w, const float *b, int C)
{
    float tmp[64];
    ln_stats(x, C, mean, rstd);
    float m = *mean, s = *rstd;
    for (int c0 = 0; c0 < C; c0 += 64) {
        int k = C - c0 < 64 ? C - c0 : 64;
        for (int c = 0; c < k; c++)
            tmp[c] = (x[c0 + c] - m) * s * w[c0 + c] + b[c0 + c];
        gpt_to_bf16_serial(o + c0, tmp, (size_t)k);
    }
}

void op_layernorm_forward_bf16(gpt_bf16 *out, float *mean, float *rstd, const float *inp,
                               const float *w, const float *b, size_t N, int C)
{
#pragma omp parallel for schedule(static)
    for (long i = 0; i < (long)N; i++)
        ln_row_bf16(out + (size_t)i * C, mean + i, rstd + i, inp + (size_t)i * C, w, b, C);
}

GPT_CLONES static void ln_back_row(float *dx, const float *dy, const float *x, const float *w,
                                   float m, float s, int C)
{
    float a = 0.0f, bsum = 0.0f;
#pragma omp simd reduction(+ : a, bsum)
    for (int c = 0; c < C; c++) {
        float dn = dy[c] * w[c];
        a += dn;
        bsum += dn * (x[c] - m) * s;
    }
    a /= (float)C;
    bsum /= (float)C;
    for (int c = 0; c < C; c++) {
        float xh = (x[c] - m) * s;
        dx[c] += s * (dy[c] * w[c] - a - xh * bsum);
    }
}

GPT_CLONES static void ln_back_params(float *dw, float *db, const float *dy, const float *x,
                                      float m, float s, int c0, int c1)
{
    for (int c = c0; c < c1; c++) {
        dw[c] += dy[c] * (x[c] - m) * s;
        db[c] += dy[c];
    }
}

void op_layernorm_backward(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                           const float *w, const float *mean, const float *rstd, size_t N, int C)
{
#pragma omp parallel for schedule(static)
    for (long i = 0; i < (long)N; i++)
        ln_back_row(dinp + (size_t)i * C, dout + (size_t)i * C, inp + (size_t)i * C, w, mean[i],
                    rstd[i], C);
#pragma omp parallel
    {
        int c0, c1;
        par_range(C, &c0, &c1);
        for (size_t i = 0; i < N; i++)
            ln_back_params(dw, db, dout + i * C, inp + i * C, mean[i], rstd[i], c0, c1);
    }
}

#define GELU_S 0.7978845608028654f /* sqrt(2/pi) */

static inline float tanh_fast(float u)
{
    return 1.0f - 2.0f / (gpt_expf(2.0f * u) + 1.0f);
}

GPT_CLONES static void gelu_span(float *out, const float *x, size_t n)
{
#pragma omp simd
    for (size_t i = 0; i < n; i++) {
        float u = GELU_S * (x[i] + 0.044715f * x[i] * x[i] * x[i]);
        out[i] = 0.5f * x[i] * (1.0f + tanh_fast(u));
    }
}

GPT_CLONES static void gelu_back_span(float *dx, const float *x, const float *dy, size_t n)
{
#pragma omp simd
    for (size_t i = 0; i < n; i++) {
        float v = x[i];
        float u = GELU_S * (v + 0.044715f * v * v * v);
        float t = tanh_fast(u);
        float sech2 = 1.0f - t * t;
        float g = 0.5f * (1.0f + t) + 0.5f * v * sech2 * GELU_S * (1.0f + 3.0f * 0.044715f * v * v);
        dx[i] = g * dy[i];
    }
}

#define SPAN 4096

void op_gelu_forward(float *out, const float *inp, size_t n)
{
#pragma omp parallel for schedule(static)
    for (long s = 0; s < (long)((n + SPAN - 1) / SPAN); s++) {
        size_t a = (size_t)s * SPAN, len = n - a < SPAN ? n - a : SPAN;
        gelu_span(out + a, inp + a, len);
    }
}

void op_gelu_forward_bf16(gpt_bf16 *out, const float *inp, size_t n)
{
#pragma omp parallel for schedule(static)
    for (long s = 0; s < (long)((n + SPAN - 1) / SPAN); s++) {
        size_t a = (size_t)s * SPAN, len = n - a < SPAN ? n - a : SPAN;
        float tmp[256];
        for (size_t k = 0; k < len; k += 256) {
            size_t m = len - k < 256 ? len - k : 256;
            gelu_span(tmp, inp + a + k, m);
            gpt_to_bf16_serial(out + a + k, tmp, m);
        }
    }
}

void op_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n)
{
#pragma omp parallel for schedule(static)
    for (long s = 0; s < (long)((n + SPAN - 1) / SPAN); s++) {
        size_t a = (size_t)s * SPAN, len = n - a < SPAN ? n - a : SPAN;
        gelu_back_span(dinp + a, inp + a, dout + a, len);
    }
}

void op_residual_forward(float *out, const float *a, const float *b, size_t n)
{
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++)
        out[i] = a[i] + b[i];
}
