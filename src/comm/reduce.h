/* reduce.h: element-wise reduction of several buffers (vectorised, chosen at run time), and
 * the scalar bf16/f16 conversions the kernels and the transports share. */
#ifndef COHORT_COMM_REDUCE_H
#define COHORT_COMM_REDUCE_H

#include <stddef.h>
#include <stdint.h>

#include "cohort/comm.h"

/* dst[i] = src[0][i] op src[1][i] op ... op src[nsrc-1][i], folded in source order; with
 * avg_div > 0 the result is divided by avg_div (op must be SUM then). bf16/f16 accumulate in
 * f32 and round once. dst may alias any source (element-wise). */
void coh_reduce_n(void *dst, const void *const *src, int nsrc, size_t count, coh_dtype t,
                  coh_redop op, int avg_div);

/* Instruction sets of the kernels; coh_reduce_isa_set returns COH_ERR_UNSUPPORTED when this
 * CPU lacks the requested one. The default is the best the CPU has (COHORT_COMM_ISA may force
 * "scalar", "avx2" or "avx512"). */
typedef enum coh_isa { COH_ISA_SCALAR = 0, COH_ISA_AVX2, COH_ISA_AVX512 } coh_isa;
coh_status coh_reduce_isa_set(coh_isa isa);
coh_isa coh_reduce_isa(void);
/* COHORT_COMM_ISA unset or one of the names above; else COH_ERR_INVALID naming the value and
 * the valid ones. A name this CPU lacks is not an error: the best it has is used instead.
 * Communicators are refused on an unknown name (a typo would otherwise pick the best kernels
 * without a word); coh_reduce_isa itself cannot fail and ignores one. */
coh_status coh_reduce_isa_env_check(void);
const char *coh_isa_name(coh_isa isa);

/* memcpy with non-temporal stores, for copies much larger than the caches; dst and src must
 * not overlap. */
void coh_copy_stream(void *dst, const void *src, size_t bytes);

float coh_bf16_to_f32(uint16_t h);
uint16_t coh_f32_to_bf16(float f);
float coh_f16_to_f32(uint16_t h);
uint16_t coh_f32_to_f16(float f);
void coh_to_f32(float *dst, const void *src, size_t count, coh_dtype t);
void coh_from_f32(void *dst, const float *src, size_t count, coh_dtype t);

#endif
