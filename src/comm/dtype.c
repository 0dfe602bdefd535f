/* dtype.c: element types and reductions by name, bf16/f16 conversions, op fingerprints. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "comm/comm_int.h"
#include "comm/reduce.h"
#include "util/strutil.h"

static const char *const dtype_names[COH_DTYPE_COUNT] = {"f32", "f64", "bf16", "f16",
                                                          "i32", "i64", "u8"};
static const size_t dtype_sizes[COH_DTYPE_COUNT] = {4, 8, 2, 2, 4, 8, 1};
static const char *const redop_names[COH_REDOP_COUNT] = {"sum", "avg", "min", "max", "prod"};

size_t coh_dtype_size(coh_dtype t)
{
    return (unsigned)t < COH_DTYPE_COUNT ? dtype_sizes[t] : 0;
}

const char *coh_dtype_name(coh_dtype t)
{
    return (unsigned)t < COH_DTYPE_COUNT ? dtype_names[t] : "?";
}

const char *coh_redop_name(coh_redop op)
{
    return (unsigned)op < COH_REDOP_COUNT ? redop_names[op] : "?";
}

coh_status coh_dtype_parse(const char *s, coh_dtype *out)
{
    for (int i = 0; i < COH_DTYPE_COUNT; i++)
        if (s && !strcmp(s, dtype_names[i])) {
            *out = (coh_dtype)i;
            return COH_OK;
        }
    return coh_errf(COH_ERR_INVALID,
                    "invalid type '%s': expected f32, f64, bf16, f16, i32, i64 or u8",
                    s ? s : "");
}

coh_status coh_redop_parse(const char *s, coh_redop *out)
{
    for (int i = 0; i < COH_REDOP_COUNT; i++)
        if (s && !strcmp(s, redop_names[i])) {
            *out = (coh_redop)i;
            return COH_OK;
        }
    return coh_errf(COH_ERR_INVALID,
                    "invalid reduction '%s': expected sum, avg, min, max or prod", s ? s : "");
}

float coh_bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

uint16_t coh_f32_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40); /* quiet the NaN, keep its sign */
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

float coh_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
    uint32_t u;
    if (exp == 0x1f) /* a NaN comes out quiet, as the cpu's conversion makes it */
        u = sign | 0x7f800000u | (man << 13) | (man ? 0x00400000u : 0);
    else if (exp)
        u = sign | ((exp + 112) << 23) | (man << 13);
    else if (!man)
        u = sign;
    else { /* subnormal: exact as a float */
        float f = ldexpf((float)man, -24);
        memcpy(&u, &f, 4);
        u |= sign;
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

uint16_t coh_f32_to_f16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u)
        return (uint16_t)(sign | 0x7e00 | ((a >> 13) & 0x3ff)); /* quiet NaN */
    if (a >= 0x477ff000u) /* rounds to >= 65536: infinity */
        return (uint16_t)(sign | 0x7c00);
    if (a < 0x38800000u) { /* below the smallest normal: round to a multiple of 2^-24 */
        float x;
        memcpy(&x, &a, 4);
        return (uint16_t)(sign | (uint16_t)nearbyintf(x * 16777216.0f));
    }
    uint32_t r = a + 0xfffu + ((a >> 13) & 1u);
    return (uint16_t)(sign | ((r - 0x38000000u) >> 13));
}

void coh_to_f32(float *dst, const void *src, size_t count, coh_dtype t)
{
    const uint16_t *h = src;
    for (size_t i = 0; i < count; i++)
        dst[i] = t == COH_BF16 ? coh_bf16_to_f32(h[i]) : coh_f16_to_f32(h[i]);
}

void coh_from_f32(void *dst, const float *src, size_t count, coh_dtype t)
{
    uint16_t *h = dst;
    for (size_t i = 0; i < count; i++)
        h[i] = t == COH_BF16 ? coh_f32_to_bf16(src[i]) : coh_f32_to_f16(src[i]);
}

double coh_dtype_get(const void *p, size_t i, coh_dtype t)
{
    switch (t) {
    case COH_F32: return ((const float *)p)[i];
    case COH_F64: return ((const double *)p)[i];
    case COH_BF16: return coh_bf16_to_f32(((const uint16_t *)p)[i]);
    case COH_F16: return coh_f16_to_f32(((const uint16_t *)p)[i]);
    case COH_I32: return ((const int32_t *)p)[i];
    case COH_I64: return (double)((const int64_t *)p)[i];
    case COH_U8: return ((const uint8_t *)p)[i];
    default: return 0;
    }
}

void coh_dtype_set(void *p, size_t i, coh_dtype t, double v)
{
    switch (t) {
    case COH_F32: ((float *)p)[i] = (float)v; break;
    case COH_F64: ((double *)p)[i] = v; break;
    case COH_BF16: ((uint16_t *)p)[i] = coh_f32_to_bf16((float)v); break;
    case COH_F16: ((uint16_t *)p)[i] = coh_f32_to_f16((float)v); break;
    case COH_I32: ((int32_t *)p)[i] = (int32_t)v; break;
    case COH_I64: ((int64_t *)p)[i] = (int64_t)v; break;
    case COH_U8: ((uint8_t *)p)[i] = (uint8_t)v; break;
    default: break;
    }
}

const char *coh_opkind_name(coh_opkind k)
{
    switch (k) {
    case COH_OP_ALLREDUCE: return "allreduce";
    case COH_OP_REDUCE: return "reduce";
    case COH_OP_BROADCAST: return "broadcast";
    case COH_OP_ALLGATHER: return "allgather";
    case COH_OP_REDUCE_SCATTER: return "reduce_scatter";
    case COH_OP_ALLTOALL: return "alltoall";
    case COH_OP_BARRIER: return "barrier";
    case COH_OP_SEND: return "send";
    case COH_OP_RECV: return "recv";
    }
    return "?";
}

void coh_fp_of(const coh_op *op, coh_fp *fp)
{
    memset(fp, 0, sizeof *fp);
    fp->seq = op->seq;
    fp->kind = op->kind;
    fp->count = op->count;
    fp->dtype = op->dtype;
    int reduces = op->kind == COH_OP_ALLREDUCE || op->kind == COH_OP_REDUCE ||
                  op->kind == COH_OP_REDUCE_SCATTER;
    fp->redop = reduces ? (int32_t)op->redop : -1;
    fp->root = op->kind == COH_OP_REDUCE || op->kind == COH_OP_BROADCAST ? op->root : -1;
}

int coh_fp_equal(const coh_fp *a, const coh_fp *b)
{
    return a->seq == b->seq && a->kind == b->kind && a->count == b->count &&
           a->dtype == b->dtype && a->redop == b->redop && a->root == b->root;
}

void coh_fp_describe(const coh_fp *fp, char *buf, size_t n)
{
    size_t k = 0;
    coh_str_append(buf, n, &k, "%s(count=%llu, %s", coh_opkind_name((coh_opkind)fp->kind),
                   (unsigned long long)fp->count, coh_dtype_name((coh_dtype)fp->dtype));
    if (fp->redop >= 0)
        coh_str_append(buf, n, &k, ", %s", coh_redop_name((coh_redop)fp->redop));
    if (fp->root >= 0)
        coh_str_append(buf, n, &k, ", root=%d", fp->root);
    coh_str_append(buf, n, &k, ") #%llu", (unsigned long long)fp->seq);
}

coh_status coh_fp_mismatch(const coh_fp *fps, int n)
{
    for (int r = 1; r < n; r++) {
        if (coh_fp_equal(&fps[0], &fps[r]))
            continue;
        char a[160], b[160];
        coh_fp_describe(&fps[0], a, sizeof a);
        coh_fp_describe(&fps[r], b, sizeof b);
        return coh_errf(COH_ERR_MISMATCH,
                        "collective mismatch: rank 0 called %s but rank %d called %s", a, r, b);
    }
    return COH_OK;
}
