/* gemm_bf16.h: the bf16-mixed engine's matrix products: bf16 inputs, fp32 accumulation and fp32
 * outputs through oneDNN's matmul (or widened to fp32 for OpenBLAS where oneDNN cannot), and
 * fp32 -> bf16 rounding (to nearest even). */
#ifndef COHORT_GEMM_BF16_H
#define COHORT_GEMM_BF16_H

#include <stddef.h>
#include <stdint.h>

#include "cohort/status.h"
#include "train/backend/backend.h"

/* bytes (rounded up to 64) aligned to 64, as oneDNN's kernels read their scratchpad; free()
 * releases it. */
void *gpt_bf16_alloc(size_t bytes);

/* Frees the scratchpad the calling thread keeps for products no model's scratchpad fits. */
void gpt_bf16_release_thread_scratch(void);

/* COH_OK: every CPU runs bf16 products (oneDNN's where it can, widened ones elsewhere); the
 * backend table's check, which a GPU backend may refuse. */
coh_status gpt_bf16_check(void);

/* dst[i] = src[i] rounded to nearest even (NaN stays NaN), over the OpenMP team. */
void gpt_to_bf16(gpt_bf16 *dst, const float *src, size_t n);
/* The same by the calling thread alone (inside a parallel loop). */
void gpt_to_bf16_serial(gpt_bf16 *dst, const float *src, size_t n);
/* The same for `rows` rows of `cols` floats at stride ld floats, each row's bf16 written over
 * the first half of its own floats (stride 2 ld in bf16 units): in place, no second buffer. */
void gpt_to_bf16_rows_inplace(float *x, size_t rows, size_t cols, size_t ld);
/* Undoes it: each row's bf16 (first half of its floats) widened back to fp32 in place. */
void gpt_bf16_rows_widen_inplace(float *x, size_t rows, size_t cols, size_t ld);
/* One such row (by the calling thread). */
void gpt_to_bf16_row_inplace(float *row, size_t cols);
float gpt_bf16_to_float(gpt_bf16 h);

/* C (M x N, fp32, row stride ldc) = beta C + op(A) op(B), op(A) M x K, op(B) K x N; A and B
 * row-major bf16 with row strides lda, ldb (ta/tb: the stored matrix is the transpose). The
 * scratchpad is mm's when it is large enough (mm may be NULL), else one the thread keeps.
 * Through oneDNN where it runs bf16 (AVX-512 and up), else gpt_gemm_bf16_widened.
 * COH_ERR_UNSUPPORTED when oneDNN refuses the shape; COH_ERR_INVALID for beta not 0 or 1. */
coh_status gpt_gemm_bf16(const gpt_mm *mm, int ta, int tb, int M, int N, int K,
                         const gpt_bf16 *A, size_t lda, const gpt_bf16 *B, size_t ldb,
                         float beta, float *C, size_t ldc);

/* Bytes of the scratchpad the product of that shape uses (accumulate: beta 1), shared by all
 * products of a thread (the largest counts); 0 when bf16 is unavailable. prepare: also create
 * the product's primitive for the calling thread now (its kernels generated), not at first use,
 * and run it once on zeros (its code loaded). */
size_t gpt_gemm_bf16_scratch(int ta, int tb, int M, int N, int K, size_t lda, size_t ldb,
                             size_t ldc, int accumulate, int prepare);

/* The same product with op(A) and op(B) widened to fp32 a tile at a time and multiplied by
 * OpenBLAS (exact bf16 products, fp32 sums in another order than oneDNN's); its tiles in scratch
 * when scratch_bytes reach gpt_gemm_bf16_widened_scratch, else in a buffer the thread keeps. */
coh_status gpt_gemm_bf16_widened(void *scratch, size_t scratch_bytes, int ta, int tb, int M,
                                 int N, int K, const gpt_bf16 *A, size_t lda, const gpt_bf16 *B,
                                 size_t ldb, float beta, float *C, size_t ldc);
size_t gpt_gemm_bf16_widened_scratch(int M, int N, int K);
void gpt_gemm_bf16_widened_release_thread(void);

#endif
