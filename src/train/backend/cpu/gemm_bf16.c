/* gemm_bf16.c: bf16 matrix products with fp32 accumulation for bf16-mixed training, through
 * oneDNN's matmul primitive (each shape's primitive created once per thread and kept), and the
 * fp32 -> bf16 rounding of their operands. Where oneDNN cannot run them (no AVX-512, or built
 * without oneDNN) the products are widened to fp32 for OpenBLAS (gemm_bf16_widened.c). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cohort/clock.h"
#include "cohort/train.h"
#include "train/backend/cpu/cpu_ops.h"

#ifdef COHORT_HAVE_DNNL
#include <oneapi/dnnl/dnnl.h>
#include <sys/mman.h>
#endif

/* Round to nearest even on the upper 16 bits; a NaN keeps a mantissa bit so it stays NaN. */
GPT_CLONES static void to_bf16_run(gpt_bf16 *dst, const float *src, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &src[i], sizeof u);
        uint32_t r = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
        dst[i] = (u & 0x7FFFFFFFu) > 0x7F800000u ? (gpt_bf16)((u >> 16) | 0x40u) : (gpt_bf16)r;
    }
}

void gpt_to_bf16_serial(gpt_bf16 *dst, const float *src, size_t n) { to_bf16_run(dst, src, n); }

void gpt_to_bf16(gpt_bf16 *dst, const float *src, size_t n)
{
    if (n < 65536) {
        to_bf16_run(dst, src, n);
        return;
    }
    long blocks = (long)((n + 4095) / 4096);
#pragma omp parallel for schedule(static)
    for (long b = 0; b < blocks; b++) {
        size_t i0 = (size_t)b * 4096, k = n - i0 < 4096 ? n - i0 : 4096;
        to_bf16_run(dst + i0, src + i0, k);
    }
}

/* Row by row, 64 values at a time through a local buffer: block j0's bf16 land on bytes
 * 2 j0 .. 2 j0 + 127 of the row, floats j0 / 2 .. j0 / 2 + 31, all read by then (this block or
 * an earlier one), and memcpy keeps the stores out of the aliasing rules. */
void gpt_to_bf16_row_inplace(float *row, size_t cols)
{
    unsigned char *out = (unsigned char *)row;
    gpt_bf16 tmp[64];
    for (size_t j0 = 0; j0 < cols; j0 += 64) {
        size_t k = cols - j0 < 64 ? cols - j0 : 64;
        to_bf16_run(tmp, row + j0, k);
        memcpy(out + 2 * j0, tmp, k * sizeof *tmp);
    }
}

void gpt_to_bf16_rows_inplace(float *x, size_t rows, size_t cols, size_t ld)
{
#pragma omp parallel for schedule(static)
    for (long r = 0; r < (long)rows; r++)
        gpt_to_bf16_row_inplace(x + (size_t)r * ld, cols);
}

/* Last value first: float j covers bf16 2j and 2j+1, both read by then. */
void gpt_bf16_rows_widen_inplace(float *x, size_t rows, size_t cols, size_t ld)
{
    for (size_t r = 0; r < rows; r++) {
        unsigned char *row = (unsigned char *)(x + r * ld);
        for (size_t j = cols; j-- > 0;) {
            gpt_bf16 h;
            memcpy(&h, row + 2 * j, sizeof h);
            uint32_t u = (uint32_t)h << 16;
            memcpy(row + 4 * j, &u, sizeof u);
        }
    }
}

float gpt_bf16_to_float(gpt_bf16 h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

#ifdef COHORT_HAVE_DNNL

static dnnl_engine_t engine;
static dnnl_status_t engine_status = dnnl_runtime_error;

static void engine_create(void) { engine_status = dnnl_engine_create(&engine, dnnl_cpu, 0); }

/* One thread's primitives, by shape (a trainer runs a handful: 4 block products x 3 and the
 * head's 3, per micro-batch shape), and the one scratchpad they share (user-managed, so its
 * size is known: gpt_gemm_bf16_scratch); freed when the thread ends. */
enum { CACHE_MAX = 64 };
typedef struct mm_key {
    int ta, tb, M, N, K, accumulate;
    size_t lda, ldb, ldc;
} mm_key;
typedef struct mm_cache {
    dnnl_stream_t stream;
    int n;
    mm_key key[CACHE_MAX];
    dnnl_primitive_t prim[CACHE_MAX];
    dnnl_memory_desc_t scratch_md[CACHE_MAX];
    void *scratch;
    size_t scratch_bytes;
} mm_cache;

static pthread_key_t cache_key;
static pthread_once_t cache_once = PTHREAD_ONCE_INIT;

static void cache_clear(mm_cache *c)
{
    for (int i = 0; i < c->n; i++)
        dnnl_primitive_destroy(c->prim[i]);
    c->n = 0;
}

static void cache_free(void *p)
{
    mm_cache *c = p;
    cache_clear(c);
    free(c->scratch);
    if (c->stream)
        dnnl_stream_destroy(c->stream);
    free(c);
}

static void cache_key_create(void) { pthread_key_create(&cache_key, cache_free); }

static mm_cache *thread_cache(void)
{
    pthread_once(&cache_once, cache_key_create);
    mm_cache *c = pthread_getspecific(cache_key);
    if (c)
        return c;
    if (!(c = calloc(1, sizeof *c)))
        return NULL;
    if (dnnl_stream_create(&c->stream, engine, dnnl_stream_default_flags) != dnnl_success ||
        pthread_setspecific(cache_key, c)) {
        if (c->stream)
            dnnl_stream_destroy(c->stream);
        free(c);
        return NULL;
    }
    return c;
}

/* rows x cols row-major at stride ld, or (trans) the transpose of a cols x rows matrix. */
static dnnl_status_t md_2d(dnnl_memory_desc_t *md, long rows, long cols, int trans, size_t ld,
                           dnnl_data_type_t dt)
{
    dnnl_dims_t dims = {rows, cols}, strides = {trans ? 1 : (long)ld, trans ? (long)ld : 1};
    return dnnl_memory_desc_init_by_strides(md, 2, dims, dt, strides);
}

/* The primitive of shape k (out NULL: only its descriptor), and its scratchpad. */
static dnnl_status_t make_primitive(const mm_key *k, dnnl_primitive_t *out,
                                    dnnl_memory_desc_t *scratch_md)
{
    dnnl_memory_desc_t a, b, c;
    dnnl_matmul_desc_t d;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t po = NULL;
    dnnl_primitive_desc_t pd = NULL;
    dnnl_status_t s = md_2d(&a, k->M, k->K, k->ta, k->lda, dnnl_bf16);
    if (s == dnnl_success)
        s = md_2d(&b, k->K, k->N, k->tb, k->ldb, dnnl_bf16);
    if (s == dnnl_success)
        s = md_2d(&c, k->M, k->N, 0, k->ldc, dnnl_f32);
    if (s == dnnl_success)
        s = dnnl_matmul_desc_init(&d, &a, &b, NULL, &c);
    if (s == dnnl_success)
        s = dnnl_primitive_attr_create(&attr);
    if (s == dnnl_success)
        s = dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user);
    if (s == dnnl_success && k->accumulate) { /* C += A B: the sum post-op reads C first */
        s = dnnl_post_ops_create(&po);
        if (s == dnnl_success)
            s = dnnl_post_ops_append_sum(po, 1.0f);
        if (s == dnnl_success)
            s = dnnl_primitive_attr_set_post_ops(attr, po);
    }
    if (s == dnnl_success)
        s = dnnl_primitive_desc_create(&pd, &d, attr, engine, NULL);
    if (s == dnnl_success) {
        const dnnl_memory_desc_t *md = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md,
                                                                    0);
        if (md)
            *scratch_md = *md;
        else
            s = dnnl_runtime_error;
    }
    if (s == dnnl_success && out)
        s = dnnl_primitive_create(out, pd);
    if (pd)
        dnnl_primitive_desc_destroy(pd);
    if (po)
        dnnl_post_ops_destroy(po);
    if (attr)
        dnnl_primitive_attr_destroy(attr);
    return s;
}

/* Entry *at of c for shape k, the primitive created (its kernels generated) when it is new. */
static coh_status lookup(mm_cache *c, const mm_key *k, int *at)
{
    int i = 0;
    while (i < c->n && memcmp(&c->key[i], k, sizeof *k))
        i++;
    if (i == c->n) {
        if (c->n == CACHE_MAX)
            cache_clear(c), i = 0;
        dnnl_status_t s = make_primitive(k, &c->prim[i], &c->scratch_md[i]);
        if (s != dnnl_success)
            return coh_errf(COH_ERR_UNSUPPORTED, "bf16 gemm %dx%dx%d: oneDNN refused it "
                            "(status %d)", k->M, k->N, k->K, (int)s);
        c->key[i] = *k;
        c->n = i + 1;
    }
    *at = i;
    return COH_OK;
}

static const char *isa_name(dnnl_cpu_isa_t isa)
{
    if ((isa & dnnl_cpu_isa_avx512_core_amx) == dnnl_cpu_isa_avx512_core_amx)
        return "AMX-BF16";
    if ((isa & dnnl_cpu_isa_avx512_core_bf16) == dnnl_cpu_isa_avx512_core_bf16)
        return "AVX512-BF16";
    if ((isa & dnnl_cpu_isa_avx512_core) == dnnl_cpu_isa_avx512_core)
        return "AVX-512 (bf16 emulated)";
    return NULL;
}

/* The ISA oneDNN runs bf16 products on here, or NULL where it cannot (no AVX-512, or no engine):
 * then the widened products run them (gemm_bf16_widened.c). Decided once, with the engine
 * (oneDNN fixes its ISA at first use), not at every product. */
static const char *engine_isa;
static void engine_decide(void)
{
    engine_create();
    engine_isa = engine_status == dnnl_success ? isa_name(dnnl_get_effective_cpu_isa()) : NULL;
}
static pthread_once_t isa_once = PTHREAD_ONCE_INIT;

static const char *onednn_isa(void)
{
    pthread_once(&isa_once, engine_decide);
    return engine_isa;
}

static void onednn_release_thread(void)
{
    pthread_once(&cache_once, cache_key_create);
    mm_cache *c = pthread_getspecific(cache_key);
    if (c) {
        free(c->scratch);
        c->scratch = NULL;
        c->scratch_bytes = 0;
    }
}

static coh_status onednn_gemm(const gpt_mm *mm, int ta, int tb, int M, int N, int K,
                              const gpt_bf16 *A, size_t lda, const gpt_bf16 *B, size_t ldb,
                              float beta, float *C, size_t ldc)
{
    mm_cache *c = thread_cache();
    if (!c)
        return coh_errf(COH_ERR_NOMEM, "bf16 gemm: out of memory for the thread's primitives");
    mm_key k = {ta != 0, tb != 0, M, N, K, beta != 0.0f, lda, ldb, ldc};
    int i;
    coh_status st = lookup(c, &k, &i);
    if (st)
        return st;
    size_t need = dnnl_memory_desc_get_size(&c->scratch_md[i]);
    void *scratch = mm && mm->scratch_bytes >= need ? mm->scratch : NULL;
    if (!scratch && need > c->scratch_bytes) {
        free(c->scratch);
        c->scratch_bytes = 0;
        if (!(c->scratch = gpt_bf16_alloc(need)))
            return coh_errf(COH_ERR_NOMEM, "bf16 gemm: out of memory for a %zu-byte scratchpad",
                            need);
        c->scratch_bytes = need;
    }
    if (!scratch)
        scratch = c->scratch;
    dnnl_memory_desc_t ma, mb, mc;
    dnnl_memory_t mem[4] = {NULL, NULL, NULL, NULL};
    dnnl_status_t s = md_2d(&ma, M, K, k.ta, lda, dnnl_bf16);
    if (s == dnnl_success)
        s = md_2d(&mb, K, N, k.tb, ldb, dnnl_bf16);
    if (s == dnnl_success)
        s = md_2d(&mc, M, N, 0, ldc, dnnl_f32);
    if (s == dnnl_success)
        s = dnnl_memory_create(&mem[0], &ma, engine, (void *)A);
    if (s == dnnl_success)
        s = dnnl_memory_create(&mem[1], &mb, engine, (void *)B);
    if (s == dnnl_success)
        s = dnnl_memory_create(&mem[2], &mc, engine, C);
    if (s == dnnl_success)
        s = dnnl_memory_create(&mem[3], &c->scratch_md[i], engine, scratch);
    if (s == dnnl_success) {
        dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, mem[0]}, {DNNL_ARG_WEIGHTS, mem[1]},
                                   {DNNL_ARG_DST, mem[2]}, {DNNL_ARG_SCRATCHPAD, mem[3]}};
        s = dnnl_primitive_execute(c->prim[i], c->stream, 4, args);
        if (s == dnnl_success)
            s = dnnl_stream_wait(c->stream);
    }
    for (int j = 0; j < 4; j++)
        if (mem[j])
            dnnl_memory_destroy(mem[j]);
    if (s != dnnl_success)
        return coh_errf(COH_ERR_UNSUPPORTED, "bf16 gemm %dx%dx%d failed in oneDNN (status %d)",
                        M, N, K, (int)s);
    return COH_OK;
}

static void *map_zeros(size_t n)
{
    void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

static void unmap(void *p, size_t n)
{
    if (p)
        munmap(p, n);
}

static size_t onednn_scratch(int ta, int tb, int M, int N, int K, size_t lda, size_t ldb,
                             size_t ldc, int accumulate, int prepare)
{
    mm_key k = {ta != 0, tb != 0, M, N, K, accumulate != 0, lda, ldb, ldc};
    dnnl_memory_desc_t md;
    mm_cache *c = prepare ? thread_cache() : NULL;
    int i;
    if (c && lookup(c, &k, &i))
        return 0;
    if (c) { /* run it once on zeros: the code its runs execute is loaded now, not in training */
        size_t bytes = dnnl_memory_desc_get_size(&c->scratch_md[i]);
        /* mapped, not malloc'd: returned whole, and malloc's heap (and its mmap threshold,
         * which a large free raises) left as the trainer will find it */
        size_t na = (size_t)(ta ? K : M) * lda * 2, nb = (size_t)(tb ? N : K) * ldb * 2,
               nc = (size_t)M * ldc * 4, ns = bytes ? bytes : 1;
        void *A = map_zeros(na), *B = map_zeros(nb), *C = map_zeros(nc), *S = map_zeros(ns);
        if (A && B && C && S) {
            gpt_mm tmp = {.scratch = S, .scratch_bytes = ns};
            onednn_gemm(&tmp, ta, tb, M, N, K, A, lda, B, ldb, accumulate ? 1.0f : 0.0f, C, ldc);
        }
        unmap(A, na), unmap(B, nb), unmap(C, nc), unmap(S, ns);
        return bytes;
    }
    return make_primitive(&k, NULL, &md) == dnnl_success ? dnnl_memory_desc_get_size(&md) : 0;
}

#else /* no oneDNN: every bf16 product is a widened one */

static const char *onednn_isa(void) { return NULL; }
static void onednn_release_thread(void) {}
static coh_status onednn_gemm(const gpt_mm *mm, int ta, int tb, int M, int N, int K,
                              const gpt_bf16 *A, size_t lda, const gpt_bf16 *B, size_t ldb,
                              float beta, float *C, size_t ldc)
{
    return coh_errf(COH_ERR_UNSUPPORTED, "bf16 gemm: this build has no oneDNN");
}
static size_t onednn_scratch(int ta, int tb, int M, int N, int K, size_t lda, size_t ldb,
                             size_t ldc, int accumulate, int prepare)
{
    return 0;
}

#endif

void *gpt_bf16_alloc(size_t bytes)
{
    size_t n = (bytes + 63) / 64 * 64;
    return aligned_alloc(64, n ? n : 64);
}

void gpt_bf16_release_thread_scratch(void)
{
    onednn_release_thread();
    gpt_gemm_bf16_widened_release_thread();
}

/* Every CPU runs bf16 products: through oneDNN where it can, widened to fp32 elsewhere. */
coh_status gpt_bf16_check(void) { return COH_OK; }

coh_status gpt_gemm_bf16(const gpt_mm *mm, int ta, int tb, int M, int N, int K,
                         const gpt_bf16 *A, size_t lda, const gpt_bf16 *B, size_t ldb,
                         float beta, float *C, size_t ldc)
{
    if (beta != 0.0f && beta != 1.0f)
        return coh_errf(COH_ERR_INVALID, "bf16 gemm: beta '%g' (0 or 1 only)", beta);
    if (onednn_isa())
        return onednn_gemm(mm, ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc);
    return gpt_gemm_bf16_widened(mm ? mm->scratch : NULL, mm ? mm->scratch_bytes : 0, ta, tb, M,
                                 N, K, A, lda, B, ldb, beta, C, ldc);
}

size_t gpt_gemm_bf16_scratch(int ta, int tb, int M, int N, int K, size_t lda, size_t ldb,
                             size_t ldc, int accumulate, int prepare)
{
    if (onednn_isa())
        return onednn_scratch(ta, tb, M, N, K, lda, ldb, ldc, accumulate, prepare);
    return gpt_gemm_bf16_widened_scratch(M, N, K);
}

/* A small product of each kind the engine runs (A B, A B^T, A^T B accumulating), checked
 * against the exact result (small integers are exact in bf16 and fp32): proves the products work
 * here, and loads the code they run before a trainer measures its own memory. */
static coh_status self_test(void)
{
    enum { n = 48 };
    static const int kinds[3][3] = {{0, 0, 0}, {0, 1, 0}, {1, 0, 1}};
    gpt_bf16 a[n * n], b[n * n];
    float x[n * n], y[n * n], out[n * n];
    for (int i = 0; i < n * n; i++)
        x[i] = (float)(i % 7 - 3), y[i] = (float)(i % 5 - 2);
    gpt_to_bf16(a, x, n * n);
    gpt_to_bf16(b, y, n * n);
    for (int k = 0; k < 3; k++) {
        int ta = kinds[k][0], tb = kinds[k][1], acc = kinds[k][2];
        for (int i = 0; i < n * n; i++)
            out[i] = acc ? 1.0f : 0.0f;
        coh_status st = gpt_gemm_bf16(NULL, ta, tb, n, n, n, a, n, b, n, acc ? 1.0f : 0.0f, out, n);
        if (st)
            return st;
        for (int i = 0; i < n; i++)
            for (int j = 0; j < n; j++) {
                float want = acc ? 1.0f : 0.0f;
                for (int l = 0; l < n; l++)
                    want += x[ta ? l * n + i : i * n + l] * y[tb ? j * n + l : l * n + j];
                if (out[i * n + j] != want)
                    return coh_errf(COH_ERR_UNSUPPORTED, "bf16-mixed: the bf16 product gave %g "
                                    "for %g (ta %d tb %d at %d,%d)", out[i * n + j], want, ta,
                                    tb, i, j);
            }
    }
    gpt_bf16_release_thread_scratch();
    return COH_OK;
}

coh_bf16_level coh_bf16_support(char *why, size_t cap)
{
    coh_status st = self_test();
    const char *isa = onednn_isa();
    coh_bf16_level lv = st                                       ? COH_BF16_UNAVAILABLE
                        : !isa || strstr(isa, "emulated") != NULL ? COH_BF16_EMULATED
                                                                  : COH_BF16_NATIVE;
    if (why && cap)
        snprintf(why, cap, "%s", st    ? coh_last_error()
                                 : isa ? isa
                                       : "no AVX-512: operands widened to fp32 for "
                                         "OpenBLAS");
    return lv;
}

double coh_measure_bf16_gemm_flops(int n)
{
    if (n < 1 || gpt_bf16_check())
        return 0.0;
    size_t nn = (size_t)n * n;
    gpt_bf16 *a = malloc(nn * sizeof *a), *b = malloc(nn * sizeof *b);
    float *c = malloc(nn * sizeof *c);
    double best = 0.0;
    if (a && b && c) {
        for (size_t i = 0; i < nn; i++) {
            float x = (float)(i % 7) * 0.1f, y = (float)(i % 5) * 0.1f;
            gpt_to_bf16(&a[i], &x, 1);
            gpt_to_bf16(&b[i], &y, 1);
        }
        for (int r = 0; r < 6; r++) { /* the first run also creates the primitive */
            uint64_t t0 = coh_now_ns();
            if (gpt_gemm_bf16(NULL, 0, 0, n, n, n, a, (size_t)n, b, (size_t)n, 0.0f, c, (size_t)n))
                break;
            double s = (double)(coh_now_ns() - t0) * 1e-9;
            double f = 2.0 * n * (double)n * n / (s > 0 ? s : 1e-9);
            best = f > best ? f : best;
        }
    }
    free(a);
    free(b);
    free(c);
    gpt_bf16_release_thread_scratch();
    return best;
}
