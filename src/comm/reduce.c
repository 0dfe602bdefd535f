/* reduce.c: element-wise reductions for the collectives: AVX-512, AVX2 and scalar variants of
 * one kernel source (reduce_kern.h), the best chosen at run time from the CPU's features. */
#include "comm/reduce.h"

#include <stdlib.h>
#include <string.h>

#include <immintrin.h>

#include "cohort/status.h"

/* 64-byte vectors pass between always-inlined helpers only: the ABI note does not apply. */
#pragma GCC diagnostic ignored "-Wpsabi"

#define KERN_ATTR __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,f16c,fma")))
#define KERN(name) name##_avx512
#define KERN_VBYTES 64
#define KERN_F16_LOAD(h) ((kv_f32_avx512)_mm512_cvtph_ps((__m256i)(h)))
#define KERN_F16_STORE(f)                                                                      \
    ((kv_u16_avx512)_mm512_cvtps_ph((__m512)(f), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC))
#include "comm/reduce_kern.h"
#undef KERN_ATTR
#undef KERN
#undef KERN_VBYTES
#undef KERN_F16_LOAD
#undef KERN_F16_STORE

#define KERN_ATTR __attribute__((target("avx2,f16c,fma")))
#define KERN(name) name##_avx2
#define KERN_VBYTES 32
#define KERN_F16_LOAD(h) ((kv_f32_avx2)_mm256_cvtph_ps((__m128i)(h)))
#define KERN_F16_STORE(f)                                                                      \
    ((kv_u16_avx2)_mm256_cvtps_ph((__m256)(f), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC))
#include "comm/reduce_kern.h"
#undef KERN_ATTR
#undef KERN
#undef KERN_VBYTES
#undef KERN_F16_LOAD
#undef KERN_F16_STORE

/* The baseline (SSE2 on x86-64): generic vectors, f16 converted one value at a time. */
typedef float kv_f32_base __attribute__((vector_size(16)));
typedef uint16_t kv_u16_base __attribute__((vector_size(8)));
static inline kv_f32_base f16_load_base(kv_u16_base h)
{
    return (kv_f32_base){coh_f16_to_f32(h[0]), coh_f16_to_f32(h[1]), coh_f16_to_f32(h[2]),
                         coh_f16_to_f32(h[3])};
}
static inline kv_u16_base f16_store_base(kv_f32_base f)
{
    return (kv_u16_base){coh_f32_to_f16(f[0]), coh_f32_to_f16(f[1]), coh_f32_to_f16(f[2]),
                         coh_f32_to_f16(f[3])};
}
#define KERN_ATTR
#define KERN(name) name##_base
#define KERN_VBYTES 16
#define KERN_F16_LOAD(h) f16_load_base(h)
#define KERN_F16_STORE(f) f16_store_base(f)
#include "comm/reduce_kern.h"
#undef KERN_ATTR
#undef KERN
#undef KERN_VBYTES
#undef KERN_F16_LOAD
#undef KERN_F16_STORE


/* ---- scalar: the tail of every variant ------------------------------------------------------ */

static double get(const void *p, size_t i, coh_dtype t)
{
    switch (t) {
    case COH_F32: return ((const float *)p)[i];
    case COH_F64: return ((const double *)p)[i];
    case COH_BF16: return coh_bf16_to_f32(((const uint16_t *)p)[i]);
    case COH_F16: return coh_f16_to_f32(((const uint16_t *)p)[i]);
    default: return 0;
    }
}

static void scalar_float(void *dst, const void *const *src, int n, size_t from, size_t count,
                         coh_dtype t, coh_redop op, int div)
{
    for (size_t i = from; i < count; i++) {
        /* f32, bf16 and f16 accumulate in float exactly like the vector code */
        double acc = get(src[0], i, t);
        float accf = (float)acc;
        for (int j = 1; j < n; j++) {
            double x = get(src[j], i, t);
            if (t == COH_F64) {
                acc = op == COH_MIN ? (x < acc ? x : acc) : op == COH_MAX ? (x > acc ? x : acc)
                      : op == COH_PROD ? acc * x : acc + x;
            } else {
                float xf = (float)x;
                accf = op == COH_MIN ? (xf < accf ? xf : accf) : op == COH_MAX ? (xf > accf ? xf : accf)
                       : op == COH_PROD ? accf * xf : accf + xf;
            }
        }
        if (div > 0) {
            acc /= div;
            accf /= (float)div;
        }
        switch (t) {
        case COH_F32: ((float *)dst)[i] = accf; break;
        case COH_F64: ((double *)dst)[i] = acc; break;
        case COH_BF16: ((uint16_t *)dst)[i] = coh_f32_to_bf16(accf); break;
        default: ((uint16_t *)dst)[i] = coh_f32_to_f16(accf); break;
        }
    }
}

/* Integers wrap like the vector code (unsigned arithmetic: no undefined overflow). */
#define SCALAR_INT(ET, UT)                                                                     \
    for (size_t i = from; i < count; i++) {                                                    \
        ET acc = ((const ET *)src[0])[i];                                                      \
        for (int j = 1; j < n; j++) {                                                          \
            ET x = ((const ET *)src[j])[i];                                                    \
            acc = op == COH_MIN ? (x < acc ? x : acc) : op == COH_MAX ? (x > acc ? x : acc)    \
                  : op == COH_PROD ? (ET)((UT)acc * (UT)x) : (ET)((UT)acc + (UT)x);          \
        }                                                                                      \
        ((ET *)dst)[i] = div > 0 ? (ET)(acc / (ET)div) : acc;                                  \
    }

static void scalar(void *dst, const void *const *src, int n, size_t from, size_t count,
                   coh_dtype t, coh_redop op, int div)
{
    switch (t) {
    case COH_I32: SCALAR_INT(int32_t, uint32_t) break;
    case COH_I64: SCALAR_INT(int64_t, uint64_t) break;
    case COH_U8: SCALAR_INT(uint8_t, unsigned) break;
    default: scalar_float(dst, src, n, from, count, t, op, div); break;
    }
}

/* ---- dispatch -------------------------------------------------------------------------------- */

static int isa_chosen = -1;

static coh_isa isa_best(void)
{
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"))
        return COH_ISA_AVX512;
    /* every AVX2 cpu also has F16C (clang cannot test for it by name) */
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        return COH_ISA_AVX2;
    return COH_ISA_SCALAR;
}

const char *coh_isa_name(coh_isa isa)
{
    return isa == COH_ISA_AVX512 ? "avx512" : isa == COH_ISA_AVX2 ? "avx2" : "scalar";
}

coh_status coh_reduce_isa_set(coh_isa isa)
{
    if (isa > isa_best())
        return coh_errf(COH_ERR_UNSUPPORTED, "this cpu lacks '%s' (best: '%s')",
                        coh_isa_name(isa), coh_isa_name(isa_best()));
    __atomic_store_n(&isa_chosen, (int)isa, __ATOMIC_RELAXED);
    return COH_OK;
}

coh_status coh_reduce_isa_env_check(void)
{
    const char *want = getenv("COHORT_COMM_ISA");
    for (int i = COH_ISA_SCALAR; want && i <= COH_ISA_AVX512; i++)
        if (!strcmp(want, coh_isa_name((coh_isa)i)))
            return COH_OK;
    if (!want)
        return COH_OK;
    return coh_errf(COH_ERR_INVALID, "invalid COHORT_COMM_ISA '%s': expected scalar, avx2 or "
                    "avx512", want);
}

coh_isa coh_reduce_isa(void)
{
    int isa = __atomic_load_n(&isa_chosen, __ATOMIC_RELAXED);
    if (isa >= 0)
        return (coh_isa)isa;
    coh_isa best = isa_best();
    const char *want = getenv("COHORT_COMM_ISA");
    for (int i = 0; want && i <= (int)best; i++)
        if (!strcmp(want, coh_isa_name((coh_isa)i)))
            best = (coh_isa)i;
    __atomic_store_n(&isa_chosen, (int)best, __ATOMIC_RELAXED);
    return best;
}

void coh_reduce_n(void *dst, const void *const *src, int nsrc, size_t count, coh_dtype t,
                  coh_redop op, int avg_div)
{
    size_t done = 0;
    int div = op == COH_AVG ? avg_div : 0;
    switch (coh_reduce_isa()) {
    case COH_ISA_AVX512: done = reduce_avx512(dst, src, nsrc, count, t, (int)op, div); break;
    case COH_ISA_AVX2: done = reduce_avx2(dst, src, nsrc, count, t, (int)op, div); break;
    default: done = reduce_base(dst, src, nsrc, count, t, (int)op, div); break;
    }
    scalar(dst, src, nsrc, done, count, t, op == COH_AVG ? COH_SUM : op, div);
}
