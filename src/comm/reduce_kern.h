/* reduce_kern.h: the reduction kernels, written once with GCC vector types and compiled by
 * reduce.c once per instruction set (KERN_ATTR selects the target, KERN() suffixes names,
 * KERN_F16 picks the f16 conversion). Vectors are 64 bytes; narrower ISAs split them. */

#define KERN_SEL(T, M, a, b) ((T)(((M) & (b)) | (~(M) & (a))))

/* op(a, b) for one vector, op a compile-time constant after inlining. */
#define KERN_COMB(VT, MT, a, b, op)                                                            \
    ((op) == COH_MIN   ? KERN_SEL(VT, (MT)((b) < (a)), (MT)(a), (MT)(b))                       \
     : (op) == COH_MAX ? KERN_SEL(VT, (MT)((b) > (a)), (MT)(a), (MT)(b))                       \
     : (op) == COH_PROD ? (a) * (b)                                                            \
                        : (a) + (b))

#define KERN_LOOP(VT, MT, ET, NAME)                                                            \
    static KERN_ATTR inline __attribute__((always_inline)) size_t KERN(NAME##_body)(           \
        ET *dst, const ET *const *src, int n, size_t count, int op, int div)                   \
    {                                                                                          \
        const size_t w = sizeof(VT) / sizeof(ET);                                              \
        size_t i = 0;                                                                          \
        for (; i + w <= count; i += w) {                                                       \
            VT acc, x;                                                                         \
            __builtin_memcpy(&acc, src[0] + i, sizeof acc);                                    \
            for (int j = 1; j < n; j++) {                                                      \
                __builtin_memcpy(&x, src[j] + i, sizeof x);                                    \
                acc = KERN_COMB(VT, MT, acc, x, op);                                           \
            }                                                                                  \
            if (div > 0)                                                                       \
                acc = acc / (ET)div;                                                           \
            __builtin_memcpy(dst + i, &acc, sizeof acc);                                       \
        }                                                                                      \
        return i;                                                                              \
    }                                                                                          \
    static KERN_ATTR size_t KERN(NAME)(void *dst, const void *const *src, int n, size_t count, \
                                       int op, int div)                                        \
    {                                                                                          \
        const ET *const *s = (const ET *const *)src;                                           \
        switch (op) {                                                                          \
        case COH_MIN: return KERN(NAME##_body)(dst, s, n, count, COH_MIN, 0);                  \
        case COH_MAX: return KERN(NAME##_body)(dst, s, n, count, COH_MAX, 0);                  \
        case COH_PROD: return KERN(NAME##_body)(dst, s, n, count, COH_PROD, 0);                \
        case COH_AVG: return KERN(NAME##_body)(dst, s, n, count, COH_SUM, div);                \
        default: return KERN(NAME##_body)(dst, s, n, count, COH_SUM, 0);                       \
        }                                                                                      \
    }

KERN_LOOP(kv_f32, kv_i32, float, f32)
KERN_LOOP(kv_f64, kv_i64, double, f64)
KERN_LOOP(kv_i32, kv_i32, int32_t, i32)
KERN_LOOP(kv_i64, kv_i64, int64_t, i64)
KERN_LOOP(kv_u8, kv_s8, uint8_t, u8)

/* 16 half-width values <-> 16 floats. */
static KERN_ATTR inline __attribute__((always_inline)) kv_f32 KERN(load16)(const uint16_t *p,
                                                                            int bf16)
{
    kv_u16 h;
    __builtin_memcpy(&h, p, sizeof h);
    if (bf16) {
        kv_u32 u = __builtin_convertvector(h, kv_u32) << 16;
        return (kv_f32)u;
    }
    return KERN_F16_LOAD(h);
}

static KERN_ATTR inline __attribute__((always_inline)) void KERN(store16)(uint16_t *p, kv_f32 f,
                                                                           int bf16)
{
    kv_u16 h;
    if (bf16) {
        kv_u32 u = (kv_u32)f;
        kv_u32 r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
        kv_u32 q = (u >> 16) | 0x40u;
        kv_i32 nan = (kv_i32)((u & 0x7fffffffu) > 0x7f800000u);
        r = KERN_SEL(kv_u32, (kv_u32)nan, r, q);
        h = __builtin_convertvector(r, kv_u16);
    } else {
        h = KERN_F16_STORE(f);
    }
    __builtin_memcpy(p, &h, sizeof h);
}

static KERN_ATTR inline __attribute__((always_inline)) size_t KERN(half_body)(
    uint16_t *dst, const uint16_t *const *src, int n, size_t count, int op, int div, int bf16)
{
    size_t i = 0;
    for (; i + 16 <= count; i += 16) {
        kv_f32 acc = KERN(load16)(src[0] + i, bf16);
        for (int j = 1; j < n; j++) {
            kv_f32 x = KERN(load16)(src[j] + i, bf16);
            acc = KERN_COMB(kv_f32, kv_i32, acc, x, op);
        }
        if (div > 0)
            acc = acc / (float)div;
        KERN(store16)(dst + i, acc, bf16);
    }
    return i;
}

static KERN_ATTR size_t KERN(half)(void *dst, const void *const *src, int n, size_t count,
                                   int op, int div, int bf16)
{
    const uint16_t *const *s = (const uint16_t *const *)src;
    if (bf16) {
        switch (op) {
        case COH_MIN: return KERN(half_body)(dst, s, n, count, COH_MIN, 0, 1);
        case COH_MAX: return KERN(half_body)(dst, s, n, count, COH_MAX, 0, 1);
        case COH_PROD: return KERN(half_body)(dst, s, n, count, COH_PROD, 0, 1);
        case COH_AVG: return KERN(half_body)(dst, s, n, count, COH_SUM, div, 1);
        default: return KERN(half_body)(dst, s, n, count, COH_SUM, 0, 1);
        }
    }
    switch (op) {
    case COH_MIN: return KERN(half_body)(dst, s, n, count, COH_MIN, 0, 0);
    case COH_MAX: return KERN(half_body)(dst, s, n, count, COH_MAX, 0, 0);
    case COH_PROD: return KERN(half_body)(dst, s, n, count, COH_PROD, 0, 0);
    case COH_AVG: return KERN(half_body)(dst, s, n, count, COH_SUM, div, 0);
    default: return KERN(half_body)(dst, s, n, count, COH_SUM, 0, 0);
    }
}

/* Vectorised prefix of the reduction; returns how many elements it did (the caller finishes
 * the tail in scalar code). */
static KERN_ATTR size_t KERN(reduce)(void *dst, const void *const *src, int n, size_t count,
                                     coh_dtype t, int op, int div)
{
    switch (t) {
    case COH_F32: return KERN(f32)(dst, src, n, count, op, div);
    case COH_F64: return KERN(f64)(dst, src, n, count, op, div);
    case COH_I32: return KERN(i32)(dst, src, n, count, op, div);
    case COH_I64: return KERN(i64)(dst, src, n, count, op, div);
    case COH_U8: return KERN(u8)(dst, src, n, count, op, div);
    case COH_BF16: return KERN(half)(dst, src, n, count, op, div, 1);
    case COH_F16: return KERN(half)(dst, src, n, count, op, div, 0);
    default: return 0;
    }
}
