/* cuda_attention.cu: causal multi-head attention keeping only the log-sum-exp of each query
 * row, as the CPU path does (cpu/ops_attention.c), in straightforward kernels: one block per
 * query row forward; backward one block per query row (dq and the row's D = sum P dP) then one
 * per key row (dk, dv summed over the queries in order), so no atomics and a fixed order. Our own
 * kernel rather than cuDNN's fused attention: it has the CPU path's exact contract (lse layout
 * (B, NH, T), fp32), so the op test compares like with like; a faster one can replace it behind
 * the same op. */
#include <math.h>

#include "train/backend/cuda/cuda_int.h"

#define ATT_THREADS 128

/* Sum (or max) of v over the block; every thread gets it. red: 32 floats of shared memory. */
__device__ float block_reduce(float v, float *red, int is_max)
{
    for (int o = 16; o > 0; o >>= 1) {
        float w = __shfl_xor_sync(0xffffffffu, v, o);
        v = is_max ? fmaxf(v, w) : v + w;
    }
    int lane = threadIdx.x % 32, wid = threadIdx.x / 32, nw = blockDim.x / 32;
    __syncthreads();
    if (!lane)
        red[wid] = v;
    __syncthreads();
    float r = red[0];
    for (int i = 1; i < nw; i++)
        r = is_max ? fmaxf(r, red[i]) : r + red[i];
    return r;
}

__device__ float dot(const float *a, const float *b, int n)
{
    float s = 0.0f;
    for (int d = 0; d < n; d++)
        s += a[d] * b[d];
    return s;
}

/* Block (b, h, t): lse and out of query row t. Shared: scores (T), q (hs). */
__global__ void k_attn_fwd(float *out, float *lse, const float *qkv, int T, int C, int NH)
{
    extern __shared__ float sh[];
    __shared__ float red[32];
    int hs = C / NH, C3 = 3 * C, t = blockIdx.x % T, bh = blockIdx.x / T;
    int b = bh / NH, h = bh % NH;
    float *s = sh, *q = sh + T, scale = rsqrtf((float)hs);
    const float *base = qkv + (size_t)b * T * C3 + h * hs;
    for (int d = threadIdx.x; d < hs; d += blockDim.x)
        q[d] = base[(size_t)t * C3 + d];
    __syncthreads();
    float m = -INFINITY;
    for (int j = threadIdx.x; j <= t; j += blockDim.x) {
        s[j] = dot(q, base + (size_t)j * C3 + C, hs) * scale;
        m = fmaxf(m, s[j]);
    }
    m = block_reduce(m, red, 1);
    float sum = 0.0f;
    for (int j = threadIdx.x; j <= t; j += blockDim.x)
        sum += expf(s[j] - m);
    sum = block_reduce(sum, red, 0);
    float l = m + logf(sum);
    for (int j = threadIdx.x; j <= t; j += blockDim.x)
        s[j] = expf(s[j] - l);
    __syncthreads();
    if (!threadIdx.x)
        lse[(size_t)bh * T + t] = l;
    for (int d = threadIdx.x; d < hs; d += blockDim.x) {
        float acc = 0.0f;
        for (int j = 0; j <= t; j++)
            acc += s[j] * base[(size_t)j * C3 + 2 * C + d];
        out[((size_t)b * T + t) * C + h * hs + d] = acc;
    }
}

static size_t fits(int T, int hs, int arrays)
{
    size_t bytes = ((size_t)arrays * T + 2 * (size_t)hs) * sizeof(float);
    return bytes <= 48 * 1024 ? bytes : 0;
}

int cu_attention_forward(float *out, float *lse, const float *qkv, int B, int T, int C, int NH)
{
    size_t shm = fits(T, C / NH, 1);
    if (!shm) {
        cu_fail("attention_forward", "T too long for this kernel's shared memory");
        return -1;
    }
    if (!B || !T)
        return 0;
    k_attn_fwd<<<(unsigned)((size_t)B * NH * T), ATT_THREADS, shm, cu_stream>>>(out, lse, qkv, T,
                                                                                C, NH);
    CU_LAUNCHED(k_attn_fwd);
    return 0;
}

/* Block (b, h, t): P and dP of query row t rebuilt from lse, D = sum P dP kept for the key
 * pass, dS = P (dP - D) scale, dq = dS k. Shared: P (T), dS (T), q (hs), dout row (hs). */
__global__ void k_attn_bwd_q(float *dqkv, float *Dbuf, const float *dout, const float *qkv,
                             const float *lse, int T, int C, int NH)
{
    extern __shared__ float sh[];
    __shared__ float red[32];
    int hs = C / NH, C3 = 3 * C, t = blockIdx.x % T, bh = blockIdx.x / T;
    int b = bh / NH, h = bh % NH;
    float *P = sh, *dS = sh + T, *q = sh + 2 * T, *dy = q + hs, scale = rsqrtf((float)hs);
    const float *base = qkv + (size_t)b * T * C3 + h * hs;
    const float *dyg = dout + ((size_t)b * T + t) * C + h * hs;
    for (int d = threadIdx.x; d < hs; d += blockDim.x) {
        q[d] = base[(size_t)t * C3 + d];
        dy[d] = dyg[d];
    }
    __syncthreads();
    float l = lse[(size_t)bh * T + t], part = 0.0f;
    for (int j = threadIdx.x; j <= t; j += blockDim.x) {
        const float *kj = base + (size_t)j * C3 + C;
        P[j] = expf(dot(q, kj, hs) * scale - l);
        dS[j] = dot(dy, kj + C, hs);
        part += P[j] * dS[j];
    }
    float D = block_reduce(part, red, 0);
    for (int j = threadIdx.x; j <= t; j += blockDim.x)
        dS[j] = P[j] * (dS[j] - D) * scale;
    __syncthreads();
    if (!threadIdx.x)
        Dbuf[(size_t)bh * T + t] = D;
    float *dq = dqkv + (size_t)b * T * C3 + (size_t)t * C3 + h * hs;
    for (int d = threadIdx.x; d < hs; d += blockDim.x) {
        float acc = 0.0f;
        for (int j = 0; j <= t; j++)
            acc += dS[j] * base[(size_t)j * C3 + C + d];
        dq[d] = acc;
    }
}

/* Block (b, h, j): key row j's dk = sum_t dS[t][j] q_t and dv = sum_t P[t][j] dout_t over the
 * queries t >= j, in order. Shared: P, dS (T - j each), k_j, v_j (hs each). */
__global__ void k_attn_bwd_kv(float *dqkv, const float *Dbuf, const float *dout, const float *qkv,
                              const float *lse, int T, int C, int NH)
{
    extern __shared__ float sh[];
    int hs = C / NH, C3 = 3 * C, j = blockIdx.x % T, bh = blockIdx.x / T;
    int b = bh / NH, h = bh % NH;
    float *P = sh, *dS = sh + T, *k = sh + 2 * T, *v = k + hs, scale = rsqrtf((float)hs);
    const float *base = qkv + (size_t)b * T * C3 + h * hs;
    const float *dyb = dout + (size_t)b * T * C + h * hs;
    for (int d = threadIdx.x; d < hs; d += blockDim.x) {
        k[d] = base[(size_t)j * C3 + C + d];
        v[d] = base[(size_t)j * C3 + 2 * C + d];
    }
    __syncthreads();
    for (int t = j + threadIdx.x; t < T; t += blockDim.x) {
        float p = expf(dot(base + (size_t)t * C3, k, hs) * scale - lse[(size_t)bh * T + t]);
        float dp = dot(dyb + (size_t)t * C, v, hs);
        P[t - j] = p;
        dS[t - j] = p * (dp - Dbuf[(size_t)bh * T + t]) * scale;
    }
    __syncthreads();
    float *dk = dqkv + (size_t)b * T * C3 + (size_t)j * C3 + C + h * hs, *dv = dk + C;
    for (int d = threadIdx.x; d < hs; d += blockDim.x) {
        float ak = 0.0f, av = 0.0f;
        for (int t = j; t < T; t++) {
            ak += dS[t - j] * base[(size_t)t * C3 + d];
            av += P[t - j] * dyb[(size_t)t * C + d];
        }
        dk[d] = ak;
        dv[d] = av;
    }
}

int cu_attention_backward(float *dqkv, const float *dout, const float *qkv, const float *lse,
                          int B, int T, int C, int NH)
{
    size_t shm = fits(T, C / NH, 2);
    if (!shm) {
        cu_fail("attention_backward", "T too long for this kernel's shared memory");
        return -1;
    }
    if (!B || !T)
        return 0;
    size_t rows = (size_t)B * NH * T;
    float *D = (float *)cu_scratch(CU_SCR_ATTN, rows * sizeof(float));
    if (!D)
        return -1;
    k_attn_bwd_q<<<(unsigned)rows, ATT_THREADS, shm, cu_stream>>>(dqkv, D, dout, qkv, lse, T, C,
                                                                  NH);
    CU_LAUNCHED(k_attn_bwd_q);
    k_attn_bwd_kv<<<(unsigned)rows, ATT_THREADS, shm, cu_stream>>>(dqkv, D, dout, qkv, lse, T, C,
                                                                   NH);
    CU_LAUNCHED(k_attn_bwd_kv);
    return 0;
}
