/* cuda_ops.cu: the CUDA backend's embedding, LayerNorm and GELU kernels, forward and backward,
 * with the CPU kernels' arithmetic (cpu/ops_basic.c). Every reduction over rows runs in a fixed
 * order (no atomics), so a result depends on the shape alone. Correct first: one warp per row;
 * sums over rows in two fixed stages. */
#include "train/backend/cuda/cuda_int.h"

#define T256 256u

__device__ __forceinline__ gpt_bf16 bf16_round_o(float f)
{
    uint32_t u = __float_as_uint(f);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u)
        return (gpt_bf16)((u >> 16) | 0x40u);
    return (gpt_bf16)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

__device__ __forceinline__ float warp_sum(float v)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* ---- encoder ---- */
__global__ void k_encoder_fwd(float *out, const int32_t *tok, const float *wte, const float *wpe,
                              size_t N, int T, int C, int v0, int vn, int add_wpe)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < N * C;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t row = i / C;
        int c = (int)(i % C), v = tok[row] - v0;
        float e = v >= 0 && v < vn ? wte[(size_t)v * C + c] : 0.0f;
        out[i] = add_wpe ? e + wpe[(row % T) * C + c] : e;
    }
}

void cu_encoder_forward(float *out, const int32_t *tok, const float *wte, const float *wpe, int B,
                        int T, int C, int v0, int vn, int add_wpe)
{
    size_t n = (size_t)B * T * C;
    if (!n)
        return;
    k_encoder_fwd<<<cu_blocks(n, T256), T256, 0, cu_stream>>>(out, tok, wte, wpe, (size_t)B * T,
                                                               T, C, v0, vn, add_wpe);
    CU_LAUNCHED(k_encoder_fwd);
}

/* One thread per column: rows in order, so two rows of one token never race and the order is
 * the CPU's. dwpe's row t gets rows t, T + t, ... in order too. */
__global__ void k_encoder_bwd(float *dwte, float *dwpe, const float *dout, const int32_t *tok,
                              size_t N, int T, int C, int v0, int vn)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C)
        return;
    for (size_t i = 0; i < N; i++) {
        float d = dout[i * C + c];
        int v = tok[i] - v0;
        if (v >= 0 && v < vn)
            dwte[(size_t)v * C + c] += d;
        dwpe[(i % T) * C + c] += d;
    }
}

void cu_encoder_backward(float *dwte, float *dwpe, const float *dout, const int32_t *tok, int B,
                         int T, int C, int v0, int vn)
{
    if (!B || !T || !C)
        return;
    k_encoder_bwd<<<(C + 63) / 64, 64, 0, cu_stream>>>(dwte, dwpe, dout, tok, (size_t)B * T, T,
                                                      C, v0, vn);
    CU_LAUNCHED(k_encoder_bwd);
}

/* ---- LayerNorm: one warp per row ---- */
__device__ void ln_stats(const float *x, int C, float *mean, float *rstd)
{
    float m = 0.0f, v = 0.0f;
    for (int c = threadIdx.x % 32; c < C; c += 32)
        m += x[c];
    m = warp_sum(m) / (float)C;
    for (int c = threadIdx.x % 32; c < C; c += 32)
        v += (x[c] - m) * (x[c] - m);
    v = warp_sum(v) / (float)C;
    *mean = m;
    *rstd = 1.0f / sqrtf(v + 1e-5f);
}

template <typename O>
__global__ void k_ln_fwd(O *out, float *mean, float *rstd, const float *inp, const float *w,
                         const float *b, size_t N, int C)
{
    size_t row = blockIdx.x * (size_t)(blockDim.x / 32) + threadIdx.x / 32;
    if (row >= N)
        return;
    const float *x = inp + row * C;
    float m, s;
    ln_stats(x, C, &m, &s);
    if (threadIdx.x % 32 == 0) {
        mean[row] = m;
        rstd[row] = s;
    }
    for (int c = threadIdx.x % 32; c < C; c += 32) {
        float y = (x[c] - m) * s * w[c] + b[c];
        if constexpr (sizeof(O) == 2)
            out[row * C + c] = bf16_round_o(y);
        else
            out[row * C + c] = y;
    }
}

void cu_layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *w,
                          const float *b, size_t N, int C)
{
    if (!N)
        return;
    k_ln_fwd<float><<<(unsigned)((N + 7) / 8), T256, 0, cu_stream>>>(out, mean, rstd, inp, w, b,
                                                                     N, C);
    CU_LAUNCHED(k_ln_fwd);
}

void cu_layernorm_forward_bf16(gpt_bf16 *out, float *mean, float *rstd, const float *inp,
                               const float *w, const float *b, size_t N, int C)
{
    if (!N)
        return;
    k_ln_fwd<gpt_bf16><<<(unsigned)((N + 7) / 8), T256, 0, cu_stream>>>(out, mean, rstd, inp, w,
                                                                        b, N, C);
    CU_LAUNCHED(k_ln_fwd_bf16);
}

__global__ void k_ln_bwd_rows(float *dinp, const float *dout, const float *inp, const float *w,
                              const float *mean, const float *rstd, size_t N, int C)
{
    size_t row = blockIdx.x * (size_t)(blockDim.x / 32) + threadIdx.x / 32;
    if (row >= N)
        return;
    const float *dy = dout + row * C, *x = inp + row * C;
    float m = mean[row], s = rstd[row], a = 0.0f, bs = 0.0f;
    for (int c = threadIdx.x % 32; c < C; c += 32) {
        float dn = dy[c] * w[c];
        a += dn;
        bs += dn * (x[c] - m) * s;
    }
    a = warp_sum(a) / (float)C;
    bs = warp_sum(bs) / (float)C;
    for (int c = threadIdx.x % 32; c < C; c += 32) {
        float xh = (x[c] - m) * s;
        dinp[row * C + c] += s * (dy[c] * w[c] - a - xh * bs);
    }
}

/* ---- sums over rows, in two fixed stages (rows in groups of GROUP, each group's sum by one
 * thread in row order, then the groups' sums in order): a fixed order that depends on the shape
 * alone, with rows / GROUP times the parallelism of one thread per column ---- */
#define GROUP 256

/* What row i contributes to column c: a plain column, or LayerNorm's dw / db terms. */
enum { SUM_PLAIN, SUM_LN_DW, SUM_LN_DB };

struct sum_src {
    const float *x, *inp, *mean, *rstd;
    size_t ld;
};

template <int KIND>
__device__ __forceinline__ float term(const sum_src &s, size_t i, int c)
{
    float v = s.x[i * s.ld + c];
    if constexpr (KIND == SUM_LN_DW)
        return v * (s.inp[i * s.ld + c] - s.mean[i]) * s.rstd[i];
    return v;
}

template <int KIND>
__global__ void k_sum_groups(float *part, sum_src s, size_t rows, int cols)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    size_t g = blockIdx.y, r0 = g * GROUP, r1 = r0 + GROUP < rows ? r0 + GROUP : rows;
    if (c >= cols)
        return;
    float acc = 0.0f;
    for (size_t i = r0; i < r1; i++)
        acc += term<KIND>(s, i, c);
    part[g * cols + c] = acc;
}

__global__ void k_sum_finish(float *out, const float *part, size_t groups, int cols)
{
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= cols)
        return;
    float acc = 0.0f;
    for (size_t g = 0; g < groups; g++)
        acc += part[g * cols + c];
    out[c] += acc;
}

template <int KIND>
static void sum_rows(float *out, const sum_src &s, size_t rows, int cols)
{
    if (!rows || !cols)
        return;
    size_t groups = (rows + GROUP - 1) / GROUP;
    float *part = (float *)cu_scratch(CU_SCR_COLSUM, groups * (size_t)cols * sizeof(float));
    if (!part)
        return;
    dim3 grid((unsigned)((cols + 63) / 64), (unsigned)groups);
    k_sum_groups<KIND><<<grid, 64, 0, cu_stream>>>(part, s, rows, cols);
    CU_LAUNCHED(k_sum_groups);
    k_sum_finish<<<(cols + 63) / 64, 64, 0, cu_stream>>>(out, part, groups, cols);
    CU_LAUNCHED(k_sum_finish);
}

void cu_layernorm_backward(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                           const float *w, const float *mean, const float *rstd, size_t N, int C)
{
    if (!N)
        return;
    k_ln_bwd_rows<<<(unsigned)((N + 7) / 8), T256, 0, cu_stream>>>(dinp, dout, inp, w, mean,
                                                                    rstd, N, C);
    CU_LAUNCHED(k_ln_bwd_rows);
    sum_src src = {dout, inp, mean, rstd, (size_t)C};
    sum_rows<SUM_LN_DW>(dw, src, N, C);
    sum_rows<SUM_LN_DB>(db, src, N, C);
}

/* ---- GELU (tanh form) ---- */
#define GELU_S 0.7978845608028654f

template <typename O>
__global__ void k_gelu_fwd(O *out, const float *x, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float v = x[i], u = GELU_S * (v + 0.044715f * v * v * v);
        float y = 0.5f * v * (1.0f + tanhf(u));
        if constexpr (sizeof(O) == 2)
            out[i] = bf16_round_o(y);
        else
            out[i] = y;
    }
}

__global__ void k_gelu_bwd(float *dx, const float *x, const float *dy, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        float v = x[i], u = GELU_S * (v + 0.044715f * v * v * v), t = tanhf(u);
        float g = 0.5f * (1.0f + t) +
                  0.5f * v * (1.0f - t * t) * GELU_S * (1.0f + 3.0f * 0.044715f * v * v);
        dx[i] = g * dy[i];
    }
}

void cu_gelu_forward(float *out, const float *inp, size_t n)
{
    if (!n)
        return;
    k_gelu_fwd<float><<<cu_blocks(n, T256), T256, 0, cu_stream>>>(out, inp, n);
    CU_LAUNCHED(k_gelu_fwd);
}

void cu_gelu_forward_bf16(gpt_bf16 *out, const float *inp, size_t n)
{
    if (!n)
        return;
    k_gelu_fwd<gpt_bf16><<<cu_blocks(n, T256), T256, 0, cu_stream>>>(out, inp, n);
    CU_LAUNCHED(k_gelu_fwd_bf16);
}

void cu_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n)
{
    if (!n)
        return;
    k_gelu_bwd<<<cu_blocks(n, T256), T256, 0, cu_stream>>>(dinp, inp, dout, n);
    CU_LAUNCHED(k_gelu_bwd);
}

/* ---- column sums (bias gradients) ---- */
void cu_colsum_add(float *out, const float *x, size_t rows, int cols, size_t ld)
{
    sum_src src = {x, NULL, NULL, NULL, ld};
    sum_rows<SUM_PLAIN>(out, src, rows, cols);
}
