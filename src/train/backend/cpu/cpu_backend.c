/* cpu_backend.c: the CPU backend's table: host memory (large buffers mapped, so that pages never
 * written are never resident, and given back with madvise), today's kernels (cpu_ops.h), and
 * the small elementwise, reduction and AdamW loops the model and the optimizer need. */
#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "train/backend/cpu/cpu_ops.h"

/* Buffers from here up are mapped whole: zero pages until written, returned whole on free. */
#define MAP_FROM ((size_t)64 << 10)

static size_t page_size(void)
{
    static size_t pg;
    if (!pg) {
        long v = sysconf(_SC_PAGESIZE);
        pg = v > 0 ? (size_t)v : 4096;
    }
    return pg;
}

static size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

static void *cpu_alloc(size_t bytes)
{
    if (bytes >= MAP_FROM) {
        void *p = mmap(NULL, round_up(bytes, page_size()), PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        return p == MAP_FAILED ? NULL : p;
    }
    void *p = aligned_alloc(64, round_up(bytes, 64));
    if (p)
        memset(p, 0, round_up(bytes, 64));
    return p;
}

static void cpu_free(void *p, size_t bytes)
{
    if (bytes >= MAP_FROM)
        munmap(p, round_up(bytes, page_size()));
    else
        free(p);
}

/* Whole pages inside [p, p + bytes) back to the system (anonymous private pages read back as
 * zeros and hold no memory until written); the partial pages at the ends, which hold someone
 * else's bytes too, are zeroed in place. */
static void cpu_release(void *p, size_t bytes)
{
    size_t pg = page_size();
    uintptr_t a = (uintptr_t)p, z = a + bytes;
    uintptr_t lo = round_up(a, pg), hi = z / pg * pg;
    if (lo >= hi) {
        memset(p, 0, bytes);
        return;
    }
    memset(p, 0, lo - a);
    memset((void *)hi, 0, z - hi);
    if (madvise((void *)lo, hi - lo, MADV_DONTNEED))
        memset((void *)lo, 0, hi - lo);
}

static void cpu_copy(void *dst, const void *src, size_t bytes, coh_copy_kind kind)
{
    (void)kind; /* host and device are one memory */
    if (dst != src && bytes)
        memmove(dst, src, bytes);
}

static void cpu_set(void *dst, int byte, size_t bytes)
{
    if (bytes)
        memset(dst, byte, bytes);
}

static coh_status cpu_sync(void) { return COH_OK; } /* every op returns when done */

static void cpu_add(float *y, const float *x, size_t n)
{
#pragma omp parallel for simd schedule(static) if (n >= 65536)
    for (size_t i = 0; i < n; i++)
        y[i] += x[i];
}

static void cpu_scale(float *x, size_t n, float f)
{
#pragma omp parallel for simd schedule(static) if (n >= 65536)
    for (size_t i = 0; i < n; i++)
        x[i] *= f;
}

static void cpu_fill(float *x, size_t n, size_t stride, float value)
{
    for (size_t i = 0; i < n; i++)
        x[i * stride] = value;
}

static double cpu_sum(const float *x, size_t n)
{
    double s = 0.0;
    for (size_t i = 0; i < n; i++)
        s += x[i];
    return s;
}

/* Sum of squares in double over 8 lanes (element i into lane i % 8), the lanes added in a fixed
 * order: a vector loop whose result does not depend on the thread count or the ISA. */
GPT_CLONES static double sumsq_block(const float *g, size_t n)
{
    double lane[8] = {0};
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++)
            lane[j] += (double)g[i + j] * g[i + j];
    for (; i < n; i++)
        lane[i % 8] += (double)g[i] * g[i];
    return ((lane[0] + lane[1]) + (lane[2] + lane[3])) +
           ((lane[4] + lane[5]) + (lane[6] + lane[7]));
}

/* Fixed blocks summed in order: the same figure for any thread count. */
static double cpu_sumsq(const float *x, size_t n)
{
    enum { BLK = 65536 };
    size_t nb = (n + BLK - 1) / BLK;
    double part_small[64], *part = nb <= 64 ? part_small : malloc(nb * sizeof *part);
    double sum = 0.0;
    if (!part) {
        for (size_t k = 0; k < nb; k++) {
            size_t e = (k + 1) * BLK < n ? (k + 1) * BLK : n;
            sum += sumsq_block(x + k * BLK, e - k * BLK);
        }
        return sum;
    }
#pragma omp parallel for schedule(static)
    for (long k = 0; k < (long)nb; k++) {
        size_t e = ((size_t)k + 1) * BLK < n ? ((size_t)k + 1) * BLK : n;
        part[k] = sumsq_block(x + (size_t)k * BLK, e - (size_t)k * BLK);
    }
    for (size_t k = 0; k < nb; k++)
        sum += part[k];
    if (part != part_small)
        free(part);
    return sum;
}

GPT_CLONES static void adamw_span(float *p, const float *g, float *m, float *v, size_t n,
                                  float b1, float b2, float eps, float keep, float step_size,
                                  float rbc2)
{
#pragma omp simd
    for (size_t i = 0; i < n; i++) {
        m[i] = b1 * m[i] + (1.0f - b1) * g[i];
        v[i] = b2 * v[i] + (1.0f - b2) * g[i] * g[i];
        float denom = sqrtf(v[i]) * rbc2 + eps;
        p[i] = p[i] * keep - step_size * m[i] / denom;
    }
}

#define SPAN 8192

static void cpu_adamw(float *p, const float *g, float *m, float *v, size_t n, float b1,
                      float b2, float eps, float keep, float step_size, float rbc2)
{
#pragma omp parallel for schedule(static)
    for (long s = 0; s < (long)((n + SPAN - 1) / SPAN); s++) {
        size_t a0 = (size_t)s * SPAN, len = n - a0 < SPAN ? n - a0 : SPAN;
        adamw_span(p + a0, g + a0, m + a0, v + a0, len, b1, b2, eps, keep, step_size, rbc2);
    }
}

static void cpu_from_bf16(float *dst, const gpt_bf16 *src, size_t n)
{
#pragma omp parallel for schedule(static) if (n > 65536)
    for (size_t i = 0; i < n; i++)
        dst[i] = gpt_bf16_to_float(src[i]);
}

/* pages of [p, p + bytes) resident now (mincore), the partial pages at the ends in part */
static uint64_t cpu_resident(const void *p, size_t bytes)
{
    if (!bytes)
        return 0;
    uintptr_t ps = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t lo = (uintptr_t)p, hi = lo + bytes, p0 = lo / ps * ps;
    size_t np = (hi - p0 + ps - 1) / ps;
    unsigned char *vec = malloc(np);
    if (!vec || mincore((void *)p0, hi - p0, vec)) {
        free(vec);
        return bytes; /* unknown: count it all */
    }
    uint64_t held = 0;
    for (size_t i = 0; i < np; i++) {
        if (!(vec[i] & 1))
            continue;
        uintptr_t a = p0 + i * ps, z = a + ps;
        held += (z < hi ? z : hi) - (a > lo ? a : lo);
    }
    free(vec);
    return held;
}

static coh_status cpu_gemm(int bf16, int ta, int tb, int M, int N, int K, const void *A,
                           size_t lda, const void *B, size_t ldb, float beta, float *C, size_t ldc)
{
    if (bf16)
        return gpt_gemm_bf16(NULL, ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc);
    if (M > 0 && N > 0)
        cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                    M, N, K, 1.0f, A, (int)lda, B, (int)ldb, beta, C, (int)ldc);
    return COH_OK;
}

static const coh_backend cpu = {
    .name = "cpu",
    .alloc = cpu_alloc,
    .free = cpu_free,
    .release = cpu_release,
    .copy = cpu_copy,
    .set = cpu_set,
    .sync = cpu_sync,
    .resident = cpu_resident,
    .encoder_forward = op_encoder_forward,
    .encoder_backward = op_encoder_backward,
    .layernorm_forward = op_layernorm_forward,
    .layernorm_forward_bf16 = op_layernorm_forward_bf16,
    .layernorm_backward = op_layernorm_backward,
    .matmul_forward = op_matmul_forward,
    .matmul_backward = op_matmul_backward,
    .matmul_forward_h = op_matmul_forward_h,
    .matmul_backward_h = op_matmul_backward_h,
    .qkv_bias_backward = op_qkv_bias_backward,
    .attention_forward = op_attention_forward,
    .attention_backward = op_attention_backward,
    .gelu_forward = op_gelu_forward,
    .gelu_forward_bf16 = op_gelu_forward_bf16,
    .gelu_backward = op_gelu_backward,
    .residual_forward = op_residual_forward,
    .head_loss = op_head_loss,
    .head_logits = op_head_logits,
    .add = cpu_add,
    .scale = cpu_scale,
    .fill = cpu_fill,
    .sum = cpu_sum,
    .sumsq = cpu_sumsq,
    .to_bf16 = gpt_to_bf16,
    .from_bf16 = cpu_from_bf16,
    .adamw = cpu_adamw,
    .bf16_check = gpt_bf16_check,
    .gemm_scratch = gpt_gemm_bf16_scratch,
    .gemm = cpu_gemm,
};

const coh_backend *coh_backend_cpu(void) { return &cpu; }
