/* cpu_ops.h: the CPU backend's kernels (OpenBLAS, oneDNN, vectorised loops), reached by the
 * engine only through the backend table (cpu_backend.c); tests call them directly. Products take
 * the model's precision mm explicitly (NULL or mm->bf16 0: fp32). */
#ifndef COHORT_CPU_OPS_H
#define COHORT_CPU_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "train/backend/backend.h"
#include "train/backend/cpu/gemm_bf16.h"

/* ---- the kernels (ops_*.c); N = B*T rows ---- */
/* out (B,T,C) = wte[tok - v0] (for ids v0..v0+vn-1, the rows this shard holds; 0 for the
 * others) + wpe[t] when add_wpe: summed over the shards, the whole model's embedding. */
void op_encoder_forward(float *out, const int32_t *tok, const float *wte, const float *wpe, int B,
                        int T, int C, int v0, int vn, int add_wpe);
/* dwte rows of ids v0..v0+vn-1 and dwpe += dout, each summed in a fixed order. */
void op_encoder_backward(float *dwte, float *dwpe, const float *dout, const int32_t *tok, int B,
                         int T, int C, int v0, int vn);
void op_layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *w,
                          const float *b, size_t N, int C);
/* The same output rounded to bf16 (nearest even), N x C packed: what bf16-mixed keeps of a
 * LayerNorm that only feeds a product. */
void op_layernorm_forward_bf16(gpt_bf16 *out, float *mean, float *rstd, const float *inp,
                               const float *w, const float *b, size_t N, int C);
/* Adds the input gradient into dinp; adds dw, db. */
void op_layernorm_backward(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                           const float *w, const float *mean, const float *rstd, size_t N, int C);
/* out (N,OC) = inp (N,IC) @ w (IC,OC) + b (b may be NULL) */
void op_matmul_forward(const gpt_mm *mm, float *out, const float *inp, const float *w,
                       const float *b, size_t N, int IC, int OC);
/* dinp = dout @ w^T (overwritten, or added when accumulate), dw += inp^T @ dout, db += sum dout */
void op_matmul_backward(const gpt_mm *mm, float *dinp, float *dw, float *db, const float *dout,
                        const float *inp, const float *w, size_t N, int IC, int OC,
                        int accumulate);
/* bf16-mixed with the input kept as bf16 (N x IC packed, what op_layernorm_forward_bf16 and
 * op_gelu_forward_bf16 write): op_matmul_forward and op_matmul_backward on it, no rounding pass
 * of their own. mm must be bf16-mixed. */
void op_matmul_forward_h(const gpt_mm *mm, float *out, const gpt_bf16 *inp, const float *w,
                         const float *b, size_t N, int IC, int OC);
void op_matmul_backward_h(const gpt_mm *mm, float *dinp, float *dw, float *db, const float *dout,
                          const gpt_bf16 *inp, const float *w, size_t N, int IC, int OC,
                          int accumulate);
/* db (3C) += column sums of dqkv (N,3C) for the query and value thirds; the key third is set
 * to its exact gradient, 0 (see ops_matmul.c) */
void op_qkv_bias_backward(float *db, const float *dqkv, size_t N, int C);
/* -1 when its per-thread scratch (T*T floats) could not be allocated */
int op_attention_forward(float *out, float *lse, const float *qkv, int B, int T, int C, int NH);
/* dqkv overwritten; -1 when its per-thread scratch (2 T*T floats) could not be allocated */
int op_attention_backward(float *dqkv, const float *dout, const float *qkv, const float *lse,
                          int B, int T, int C, int NH);
void op_gelu_forward(float *out, const float *inp, size_t n);
/* The same output rounded to bf16 (nearest even). */
void op_gelu_forward_bf16(gpt_bf16 *out, const float *inp, size_t n);
/* dinp = gelu'(inp) * dout (dinp may alias dout) */
void op_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n);
void op_residual_forward(float *out, const float *a, const float *b, size_t n);

/* Fused LM head + softmax + cross-entropy over rows chunk by chunk (Megatron's parallel
 * cross-entropy when the vocabulary is split: only (chunk, vn) logits exist; with part->kept
 * all (N, vn) of them, kept there, and read back instead of recomputed with part->kept_ready).
 * part->reduce sees each chunk's row maxima, then its (sum, target logit) pairs, R rows at a
 * time in row order: the tensor-parallel sum over the shards, or a pipeline head shard's
 * running statistics. losses (N) per
 * row. When dlnf != NULL: dlnf (N,C) = this part's dloss/dlnf (to be summed over the parts),
 * dwte += dloss/dwte with dloss = grad_scale/N per row. part NULL: the whole vocabulary V. */
coh_status op_head_loss(const gpt_mm *mm, float *losses, float *dlnf, float *dwte,
                        float *logits, size_t chunk, const float *lnf, const float *wte,
                        const int32_t *targets, size_t N, int C, int V, float grad_scale,
                        const gpt_vocab_part *part);

/* logits (V) = x (C) @ wte^T */
void op_head_logits(const gpt_mm *mm, float *logits, const float *x, const float *wte, int C,
                    int V);

/* C (M x N) = A (M x K) times B (N x K) transposed, row-major, as every product of the engine
 * runs (the OpenMP team splitting C, each thread calling single-threaded OpenBLAS): for the
 * planner's rate probe. */
void gpt_sgemm_nt(int M, int N, int K, const float *A, const float *B, float *C);

/* exp(x) for x <= 0 region-safe, written so loops over it vectorise; rel error < 2e-7. */
static inline float gpt_expf(float x)
{
    x = x < -87.0f ? -87.0f : x;
    x = x > 88.0f ? 88.0f : x;
    /* k = nearest integer to x / ln 2 by adding 1.5 * 2^23: no branch, no libm, vectorises */
    float t = x * 1.44269504088896341f + 12582912.0f;
    float k = t - 12582912.0f;
    int32_t ki;
    __builtin_memcpy(&ki, &t, sizeof ki);
    ki -= 0x4B400000;
    float r = x - k * 0.693145751953125f - k * 1.428606765330187045e-06f;
    float p = 1.9875691500E-4f;
    p = p * r + 1.3981999507E-3f;
    p = p * r + 8.3334519073E-3f;
    p = p * r + 4.1665795894E-2f;
    p = p * r + 1.6666665459E-1f;
    p = p * r + 5.0000001201E-1f;
    p = p * r * r + r + 1.0f;
    int32_t bits = (ki + 127) * (1 << 23);
    float scale;
    __builtin_memcpy(&scale, &bits, sizeof scale);
    return p * scale;
}

/* Vectorised variants of hot loops are compiled for several ISAs and picked at load time, so
 * the build stays portable (no -march=native). Not under the sanitizers: an instrumented
 * resolver runs at relocation, before the sanitizer's runtime (ThreadSanitizer crashes there). */
#if defined(__x86_64__) && defined(__has_attribute)
#if __has_attribute(target_clones) && !defined(__SANITIZE_ADDRESS__) && \
    !defined(__SANITIZE_THREAD__)
/* Feature names, not arch= (which dispatches on the CPU model and misses AMD's AVX-512). */
#define GPT_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#endif
#endif
#ifndef GPT_CLONES
#define GPT_CLONES
#endif

#endif
