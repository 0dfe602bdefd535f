/* cuda_gemm.cu: the CUDA backend's products through cuBLAS (fp32 with fp32 compute and TF32
 * off; bf16-mixed: operands rounded to bf16 as the CPU rounds them, fp32 accumulation and
 * output), the linear layers with their bias and gradient epilogues as separate kernels, and the
 * fused LM head + cross-entropy a chunk of rows at a time (cpu/ops_matmul.c's contract). */
#include <math.h>
#include <stdlib.h>

#include "train/backend/cuda/cuda_int.h"

#define T256 256u

/* Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: the operands swap. */
void cu_gemm(int bf16, int ta, int tb, int M, int N, int K, const void *A, size_t lda,
             const void *B, size_t ldb, float beta, float *C, size_t ldc)
{
    if (!M || !N || cu_failed())
        return;
    const float one = 1.0f;
    cudaDataType_t t = bf16 ? CUDA_R_16BF : CUDA_R_32F;
    cublasStatus_t s = cublasGemmEx(cu_blas, tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                                    ta ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K, &one, B, t, (int)ldb,
                                    A, t, (int)lda, &beta, C, CUDA_R_32F, (int)ldc,
                                    CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    if (s != CUBLAS_STATUS_SUCCESS)
        cu_fail("cublasGemmEx", cublasGetStatusString(s));
}

static const gpt_mm *mm_bf16(const gpt_mm *m) { return m && m->bf16 ? m : NULL; }

__global__ void k_bias_rows(float *out, const float *b, size_t N, int OC)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < N * OC;
         i += (size_t)gridDim.x * blockDim.x)
        out[i] = b[i % OC];
}

__global__ void k_widen(float *d, const gpt_bf16 *s, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        d[i] = __uint_as_float((uint32_t)s[i] << 16);
}

/* A bf16 operand widened into scratch, for an fp32 product (a model that is not bf16-mixed
 * handed a bf16 input: the table's contract forbids it, kept safe anyway). */
static const float *widened(const gpt_bf16 *x, size_t n)
{
    float *f = (float *)cu_scratch(CU_SCR_HEAD, n * sizeof(float));
    if (f) {
        k_widen<<<cu_blocks(n, T256), T256, 0, cu_stream>>>(f, x, n);
        CU_LAUNCHED(k_widen);
    }
    return f;
}

static void matmul_forward(const gpt_mm *prec, float *out, const float *inp,
                           const gpt_bf16 *inp_h, const float *w, const float *b, size_t N,
                           int IC, int OC)
{
    if (!N)
        return;
    if (b) {
        k_bias_rows<<<cu_blocks(N * OC, T256), T256, 0, cu_stream>>>(out, b, N, OC);
        CU_LAUNCHED(k_bias_rows);
    }
    float beta = b ? 1.0f : 0.0f;
    const gpt_mm *mm = mm_bf16(prec);
    if (mm) {
        if (!inp_h)
            cu_to_bf16(mm->a, inp, N * (size_t)IC);
        cu_to_bf16(mm->w, w, (size_t)IC * OC);
        cu_gemm(1, 0, 0, (int)N, OC, IC, inp_h ? inp_h : mm->a, IC, mm->w, OC, beta, out, OC);
        return;
    }
    const float *a = inp_h ? widened(inp_h, N * (size_t)IC) : inp;
    if (a)
        cu_gemm(0, 0, 0, (int)N, OC, IC, a, IC, w, OC, beta, out, OC);
}

void cu_matmul_forward(const gpt_mm *mm, float *out, const float *inp, const float *w,
                       const float *b, size_t N, int IC, int OC)
{
    matmul_forward(mm, out, inp, NULL, w, b, N, IC, OC);
}

void cu_matmul_forward_h(const gpt_mm *mm, float *out, const gpt_bf16 *inp, const float *w,
                         const float *b, size_t N, int IC, int OC)
{
    matmul_forward(mm, out, NULL, inp, w, b, N, IC, OC);
}

/* dinp = dout w^T (overwritten, or added when accumulate), dw += inp^T dout, db += sum dout */
static void matmul_backward(const gpt_mm *prec, float *dinp, float *dw, float *db,
                            const float *dout, const float *inp, const gpt_bf16 *inp_h,
                            const float *w, size_t N, int IC, int OC, int accumulate)
{
    if (!N)
        return;
    float beta = accumulate ? 1.0f : 0.0f;
    if (db)
        cu_colsum_add(db, dout, N, OC, OC);
    const gpt_mm *mm = mm_bf16(prec);
    if (mm) {
        cu_to_bf16(mm->b, dout, N * (size_t)OC);
        cu_to_bf16(mm->w, w, (size_t)IC * OC);
        if (!inp_h)
            cu_to_bf16(mm->a, inp, N * (size_t)IC);
        const gpt_bf16 *a16 = inp_h ? inp_h : mm->a;
        cu_gemm(1, 0, 1, (int)N, IC, OC, mm->b, OC, mm->w, OC, beta, dinp, IC);
        cu_gemm(1, 1, 0, IC, OC, (int)N, a16, IC, mm->b, OC, 1.0f, dw, OC);
        return;
    }
    cu_gemm(0, 0, 1, (int)N, IC, OC, dout, OC, w, OC, beta, dinp, IC);
    const float *a = inp_h ? widened(inp_h, N * (size_t)IC) : inp;
    if (a)
        cu_gemm(0, 1, 0, IC, OC, (int)N, a, IC, dout, OC, 1.0f, dw, OC);
}

void cu_matmul_backward(const gpt_mm *mm, float *dinp, float *dw, float *db, const float *dout,
                        const float *inp, const float *w, size_t N, int IC, int OC,
                        int accumulate)
{
    matmul_backward(mm, dinp, dw, db, dout, inp, NULL, w, N, IC, OC, accumulate);
}

void cu_matmul_backward_h(const gpt_mm *mm, float *dinp, float *dw, float *db, const float *dout,
                          const gpt_bf16 *inp, const float *w, size_t N, int IC, int OC,
                          int accumulate)
{
    matmul_backward(mm, dinp, dw, db, dout, NULL, inp, w, N, IC, OC, accumulate);
}

/* The key third's exact gradient is zero (see cpu/ops_matmul.c for why). */
void cu_qkv_bias_backward(float *db, const float *dqkv, size_t N, int C)
{
    cu_colsum_add(db, dqkv, N, C, 3 * (size_t)C);
    CU_CHECK(cudaMemsetAsync(db + C, 0, (size_t)C * sizeof(float), cu_stream));
    cu_colsum_add(db + 2 * C, dqkv + 2 * C, N, C, 3 * (size_t)C);
}

/* ---- the LM head: one block per row for the row statistics ---- */
__device__ float blk_reduce(float v, float *red, int is_max)
{
    for (int o = 16; o > 0; o >>= 1) {
        float w = __shfl_xor_sync(0xffffffffu, v, o);
        v = is_max ? fmaxf(v, w) : v + w;
    }
    __syncthreads();
    if (threadIdx.x % 32 == 0)
        red[threadIdx.x / 32] = v;
    __syncthreads();
    float r = red[0];
    for (int i = 1; i < (int)blockDim.x / 32; i++)
        r = is_max ? fmaxf(r, red[i]) : r + red[i];
    return r;
}

__global__ void k_row_max(float *max, const float *lg, int V)
{
    __shared__ float red[32];
    const float *l = lg + (size_t)blockIdx.x * V;
    float m = -INFINITY;
    for (int j = threadIdx.x; j < V; j += blockDim.x)
        m = fmaxf(m, l[j]);
    m = blk_reduce(m, red, 1);
    if (!threadIdx.x)
        max[blockIdx.x] = m;
}

/* sum_tgt[2r] = sum exp(l - max) (the exponentials kept in place when keep), [2r+1] = the
 * target's logit when this part holds it, else 0. */
__global__ void k_row_sums(float *sum_tgt, float *lg, const float *max, const int32_t *target,
                           int v0, int V, int keep)
{
    __shared__ float red[32];
    float *l = lg + (size_t)blockIdx.x * V, m = max[blockIdx.x], s = 0.0f;
    int t = target[blockIdx.x] - v0;
    float tl = t >= 0 && t < V ? l[t] : 0.0f;
    __syncthreads(); /* every thread read l[t] before it is overwritten */
    for (int j = threadIdx.x; j < V; j += blockDim.x) {
        float e = expf(l[j] - m);
        s += e;
        if (keep)
            l[j] = e;
    }
    s = blk_reduce(s, red, 0);
    if (!threadIdx.x) {
        sum_tgt[2 * blockIdx.x] = s;
        sum_tgt[2 * blockIdx.x + 1] = tl;
    }
}

__global__ void k_losses(float *losses, const float *max, const float *sum_tgt, size_t R)
{
    size_t r = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (r < R)
        losses[r] = max[r] + logf(sum_tgt[2 * r]) - sum_tgt[2 * r + 1];
}

/* dlogits in place: the exponentials over their sum, times dscale, minus dscale at the target */
__global__ void k_row_grad(float *lg, const float *sum_tgt, const int32_t *target, int v0, int V,
                           float dscale)
{
    float *l = lg + (size_t)blockIdx.x * V, f = dscale / sum_tgt[2 * blockIdx.x];
    int t = target[blockIdx.x] - v0;
    for (int j = threadIdx.x; j < V; j += blockDim.x)
        l[j] = l[j] * f - (j == t ? dscale : 0.0f);
}

/* A chunk's statistics through the host for part->reduce (the tensor-parallel sum, or a
 * pipeline head shard's running figures), back on the device after. */
static coh_status reduce_on_host(const gpt_vocab_part *part, float *dev, size_t n, int max)
{
    static float host[2 * GPT_HEAD_CHUNK];
    CU_CHECK(cudaMemcpyAsync(host, dev, n * sizeof(float), cudaMemcpyDeviceToHost, cu_stream));
    CU_CHECK(cudaStreamSynchronize(cu_stream));
    coh_status st = part->reduce(part->ctx, host, n, max);
    if (!st)
        CU_CHECK(cudaMemcpyAsync(dev, host, n * sizeof(float), cudaMemcpyHostToDevice, cu_stream));
    return st;
}

__global__ void k_neg_inf(float *x, size_t n)
{
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < n)
        x[i] = -INFINITY;
}

/* A part holding no vocabulary: its row maxima are -inf before the reduction. */
static void k_fill_neg_inf(float *x, size_t n)
{
    k_neg_inf<<<cu_blocks(n, T256), T256, 0, cu_stream>>>(x, n);
    CU_LAUNCHED(k_neg_inf);
}

typedef struct head_ctx {
    const gpt_mm *mm; /* bf16-mixed, or NULL */
    const void *wte;  /* mm ? mm->wte (rounded) : wte */
    int C, vn;
} head_ctx;

static void chunk_logits(const head_ctx *h, float *lg, const float *x, size_t R)
{
    if (h->mm) {
        cu_to_bf16(h->mm->a, x, R * (size_t)h->C);
        cu_gemm(1, 0, 1, (int)R, h->vn, h->C, h->mm->a, h->C, h->wte, h->C, 0.0f, lg, h->vn);
    } else {
        cu_gemm(0, 0, 1, (int)R, h->vn, h->C, x, h->C, h->wte, h->C, 0.0f, lg, h->vn);
    }
}

/* dx = dlogits wte, dwte += dlogits^T x (bf16-mixed: on the bf16 copies) */
static void chunk_backward(const head_ctx *h, float *dx, float *dwte, const float *dl,
                           const float *x, size_t R)
{
    int C = h->C, vn = h->vn;
    if (!h->mm) {
        cu_gemm(0, 0, 0, (int)R, C, vn, dl, vn, h->wte, C, 0.0f, dx, C);
        cu_gemm(0, 1, 0, vn, C, (int)R, dl, vn, x, C, 1.0f, dwte, C);
        return;
    }
    gpt_bf16 *d16 = (gpt_bf16 *)cu_scratch(CU_SCR_HEAD16, R * (size_t)vn * sizeof(gpt_bf16));
    if (!d16)
        return;
    cu_to_bf16(d16, dl, R * (size_t)vn);
    cu_gemm(1, 0, 0, (int)R, C, vn, d16, vn, h->wte, C, 0.0f, dx, C);
    cu_gemm(1, 1, 0, vn, C, (int)R, d16, vn, h->mm->a, C, 1.0f, dwte, C);
}

static coh_status head_chunk(const head_ctx *h, const gpt_vocab_part *part, float *stats,
                             float *losses, float *dlnf, float *dwte, float *lg, const float *x,
                             const int32_t *tg, size_t R, float dscale)
{
    float *max = stats, *sum_tgt = stats + GPT_HEAD_CHUNK;
    int vn = h->vn, v0 = part ? part->v0 : 0, red = part && part->reduce;
    coh_status st;
    if (vn > 0) {
        if (!(part && part->kept_ready))
            chunk_logits(h, lg, x, R);
        else if (h->mm)
            cu_to_bf16(h->mm->a, x, R * (size_t)h->C); /* the backward products read it */
        k_row_max<<<(unsigned)R, T256, 0, cu_stream>>>(max, lg, vn);
        CU_LAUNCHED(k_row_max);
    } else {
        k_fill_neg_inf(max, R);
    }
    if (red && (st = reduce_on_host(part, max, R, 1)))
        return st;
    if (vn > 0) {
        k_row_sums<<<(unsigned)R, T256, 0, cu_stream>>>(sum_tgt, lg, max, tg, v0, vn,
                                                        dscale != 0.0f);
        CU_LAUNCHED(k_row_sums);
    } else {
        CU_CHECK(cudaMemsetAsync(sum_tgt, 0, 2 * R * sizeof(float), cu_stream));
    }
    if (red && (st = reduce_on_host(part, sum_tgt, 2 * R, 0)))
        return st;
    k_losses<<<cu_blocks(R, T256), T256, 0, cu_stream>>>(losses, max, sum_tgt, R);
    CU_LAUNCHED(k_losses);
    if (!dlnf)
        return COH_OK;
    if (vn <= 0) {
        CU_CHECK(cudaMemsetAsync(dlnf, 0, R * (size_t)h->C * sizeof(float), cu_stream));
        return COH_OK;
    }
    k_row_grad<<<(unsigned)R, T256, 0, cu_stream>>>(lg, sum_tgt, tg, v0, vn, dscale);
    CU_LAUNCHED(k_row_grad);
    chunk_backward(h, dlnf, dwte, lg, x, R);
    return COH_OK;
}

coh_status cu_head_loss(const gpt_mm *prec, float *losses, float *dlnf, float *dwte,
                        float *logits, size_t chunk, const float *lnf, const float *wte,
                        const int32_t *targets, size_t N, int C, int V, float grad_scale,
                        const gpt_vocab_part *part)
{
    int vn = part ? part->vn : V;
    float dscale = dlnf ? grad_scale / (float)N : 0.0f;
    head_ctx h = {mm_bf16(prec), wte, C, vn};
    float *stats = (float *)cu_scratch(CU_SCR_STATS, 3 * GPT_HEAD_CHUNK * sizeof(float));
    if (!stats)
        return cu_host->errf(COH_ERR_NOMEM, "cuda head_loss: out of device memory");
    if (h.mm && vn > 0) {
        cu_to_bf16(h.mm->wte, wte, (size_t)vn * C);
        h.wte = h.mm->wte;
    }
    chunk = chunk < GPT_HEAD_CHUNK ? chunk : GPT_HEAD_CHUNK;
    coh_status st = COH_OK;
    for (size_t r0 = 0; !st && r0 < N; r0 += chunk) {
        size_t R = N - r0 < chunk ? N - r0 : chunk;
        float *lg = part && part->kept ? part->kept + r0 * (size_t)vn : logits;
        st = head_chunk(&h, part, stats, losses + r0, dlnf ? dlnf + r0 * C : NULL, dwte, lg,
                        lnf + r0 * C, targets + r0, R, dscale);
    }
    return st;
}

/* logits (V, host) = x (C) wte^T, fp32 in every precision as the CPU samples. */
void cu_head_logits(const gpt_mm *mm, float *logits, const float *x, const float *wte, int C,
                    int V)
{
    float *d = (float *)cu_scratch(CU_SCR_HOST1, (size_t)V * sizeof(float));
    if (!d)
        return;
    cu_gemm(0, 0, 1, 1, V, C, x, C, wte, C, 0.0f, d, V);
    CU_CHECK(cudaMemcpyAsync(logits, d, (size_t)V * sizeof(float), cudaMemcpyDeviceToHost,
                             cu_stream));
    CU_CHECK(cudaStreamSynchronize(cu_stream));
}
