/* cuda_int.h: what the CUDA backend's files share: the rank's stream and cuBLAS handle, the
 * first CUDA error (ops return nothing; sync reports it), scratch buffers the backend keeps for
 * itself, and the kernels' launch helpers. */
#ifndef COHORT_CUDA_INT_H
#define COHORT_CUDA_INT_H

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

extern "C" {
#include "train/backend/cuda/cuda_plugin.h"
}

extern const coh_cuda_host *cu_host;
extern cudaStream_t cu_stream;
extern cublasHandle_t cu_blas;

/* Records the first failure (where and why) for sync to report; later ones are dropped. */
void cu_fail(const char *where, const char *why);
#define CU_CHECK(call)                                                                       \
    do {                                                                                     \
        cudaError_t e_ = (call);                                                             \
        if (e_ != cudaSuccess)                                                               \
            cu_fail(#call, cudaGetErrorString(e_));                                          \
    } while (0)
#define CU_LAUNCHED(name) CU_CHECK(cudaGetLastError())
/* Nonzero once something failed: ops that would read garbage return early. */
int cu_failed(void);

/* Device scratch the backend keeps per purpose (grown, never shrunk; not in the rank's count:
 * the engine's buffers are). NULL (failure recorded) when out of memory. */
enum { CU_SCR_PARTIAL, CU_SCR_COLSUM, CU_SCR_ATTN, CU_SCR_HEAD, CU_SCR_HEAD16, CU_SCR_STATS, CU_SCR_HOST1,
       CU_SCR_N };
void *cu_scratch(int slot, size_t bytes);

static inline unsigned cu_blocks(size_t n, unsigned threads)
{
    size_t b = (n + threads - 1) / threads;
    return (unsigned)(b > 65535u * 16u ? 65535u * 16u : (b ? b : 1));
}

/* ---- GEMM (cuda_gemm.cu): row-major C (M x N, ldc) = beta C + op(A) op(B), fp32 out ---- */
/* bf16: A and B are __nv_bfloat16; otherwise float (fp32 compute, TF32 off) */
void cu_gemm(int bf16, int ta, int tb, int M, int N, int K, const void *A, size_t lda,
             const void *B, size_t ldb, float beta, float *C, size_t ldc);
void cu_to_bf16(gpt_bf16 *dst, const float *src, size_t n);
/* out (cols) += column sums of x (rows x cols, row stride ld), summed in a fixed order */
void cu_colsum_add(float *out, const float *x, size_t rows, int cols, size_t ld);

/* ---- ops (cuda_ops.cu, cuda_attention.cu, cuda_gemm.cu) with the table's signatures ---- */
void cu_encoder_forward(float *out, const int32_t *tok, const float *wte, const float *wpe, int B,
                        int T, int C, int v0, int vn, int add_wpe);
void cu_encoder_backward(float *dwte, float *dwpe, const float *dout, const int32_t *tok, int B,
                         int T, int C, int v0, int vn);
void cu_layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *w,
                          const float *b, size_t N, int C);
void cu_layernorm_forward_bf16(gpt_bf16 *out, float *mean, float *rstd, const float *inp,
                               const float *w, const float *b, size_t N, int C);
void cu_layernorm_backward(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                           const float *w, const float *mean, const float *rstd, size_t N, int C);
void cu_gelu_forward(float *out, const float *inp, size_t n);
void cu_gelu_forward_bf16(gpt_bf16 *out, const float *inp, size_t n);
void cu_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n);
int cu_attention_forward(float *out, float *lse, const float *qkv, int B, int T, int C, int NH);
int cu_attention_backward(float *dqkv, const float *dout, const float *qkv, const float *lse,
                          int B, int T, int C, int NH);
void cu_matmul_forward(const gpt_mm *mm, float *out, const float *inp, const float *w,
                       const float *b, size_t N, int IC, int OC);
void cu_matmul_backward(const gpt_mm *mm, float *dinp, float *dw, float *db, const float *dout,
                        const float *inp, const float *w, size_t N, int IC, int OC,
                        int accumulate);
void cu_matmul_forward_h(const gpt_mm *mm, float *out, const gpt_bf16 *inp, const float *w,
                         const float *b, size_t N, int IC, int OC);
void cu_matmul_backward_h(const gpt_mm *mm, float *dinp, float *dw, float *db, const float *dout,
                          const gpt_bf16 *inp, const float *w, size_t N, int IC, int OC,
                          int accumulate);
void cu_qkv_bias_backward(float *db, const float *dqkv, size_t N, int C);
coh_status cu_head_loss(const gpt_mm *mm, float *losses, float *dlnf, float *dwte, float *logits,
                        size_t chunk, const float *lnf, const float *wte, const int32_t *targets,
                        size_t N, int C, int V, float grad_scale, const gpt_vocab_part *part);
void cu_head_logits(const gpt_mm *mm, float *logits, const float *x, const float *wte, int C,
                    int V);

#endif
