/* gemm_bf16_widened.c: bf16 products where oneDNN cannot run them (a CPU without AVX-512, or a
 * build without oneDNN): the bf16 operands are widened to fp32 one tile at a time and multiplied
 * by the fp32 BLAS. A bf16 value widens to fp32 exactly and the product of two bf16 values (8
 * significant bits each) is exact in fp32 (24), so this is the arithmetic of a bf16 GEMM with
 * fp32 accumulation, as native kernels run it: only the order of the fp32 sums differs, as it
 * differs between oneDNN's AMX and AVX512-BF16 kernels. Slower than fp32 (the widening). */
#include <cblas.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#include "train/backend/cpu/gemm_bf16.h"

/* Tiles: a 512 x 256 piece of op(A) and a 256 x 512 piece of op(B) in fp32 (1 MiB together), so
 * each value is widened once per 512 outputs it feeds: under 1% of the product's work. */
enum { TILE_M = 512, TILE_N = 512, TILE_K = 256 };

/* The tiles of a thread whose caller gave no scratch large enough, freed when the thread ends. */
typedef struct widened_tiles {
    float *tiles;
    size_t bytes;
} widened_tiles;
static pthread_key_t tiles_key;
static pthread_once_t tiles_once = PTHREAD_ONCE_INIT;

static void tiles_free(void *p)
{
    widened_tiles *t = p;
    free(t->tiles);
    free(t);
}

static void tiles_key_create(void) { pthread_key_create(&tiles_key, tiles_free); }

/* The calling thread's tiles of at least `need` bytes, or NULL when out of memory. */
static float *thread_tiles(size_t need)
{
    pthread_once(&tiles_once, tiles_key_create);
    widened_tiles *t = pthread_getspecific(tiles_key);
    if (!t) {
        if (!(t = calloc(1, sizeof *t)))
            return NULL;
        if (pthread_setspecific(tiles_key, t)) {
            free(t);
            return NULL;
        }
    }
    if (t->bytes < need) {
        free(t->tiles);
        t->bytes = 0;
        if (!(t->tiles = malloc(need)))
            return NULL;
        t->bytes = need;
    }
    return t->tiles;
}

static size_t min_size(size_t a, size_t b) { return a < b ? a : b; }

size_t gpt_gemm_bf16_widened_scratch(int M, int N, int K)
{
    if (M < 1 || N < 1 || K < 1)
        return 0;
    size_t mb = min_size((size_t)M, TILE_M), nb = min_size((size_t)N, TILE_N),
           kb = min_size((size_t)K, TILE_K);
    return (mb * kb + kb * nb) * sizeof(float);
}

void gpt_gemm_bf16_widened_release_thread(void)
{
    pthread_once(&tiles_once, tiles_key_create);
    widened_tiles *t = pthread_getspecific(tiles_key);
    if (t) {
        free(t->tiles);
        t->tiles = NULL;
        t->bytes = 0;
    }
}

/* rows x cols of the stored matrix src (row stride ld) from (r0, c0), widened into dst
 * (row stride cols). */
static void widen_tile(float *dst, const gpt_bf16 *src, size_t ld, size_t r0, size_t c0,
                       size_t rows, size_t cols)
{
    for (size_t r = 0; r < rows; r++) {
        const gpt_bf16 *s = src + (r0 + r) * ld + c0;
        float *d = dst + r * cols;
        for (size_t c = 0; c < cols; c++) {
            union { uint32_t u; float f; } v = {.u = (uint32_t)s[c] << 16};
            d[c] = v.f;
        }
    }
}

coh_status gpt_gemm_bf16_widened(void *scratch, size_t scratch_bytes, int ta, int tb, int M,
                                 int N, int K, const gpt_bf16 *A, size_t lda, const gpt_bf16 *B,
                                 size_t ldb, float beta, float *C, size_t ldc)
{
    if (M < 1 || N < 1)
        return COH_OK;
    if (K < 1) { /* an empty sum: C = beta C */
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++)
                C[(size_t)i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[(size_t)i * ldc + j];
        return COH_OK;
    }
    size_t need = gpt_gemm_bf16_widened_scratch(M, N, K);
    float *tiles = scratch_bytes >= need ? scratch : NULL;
    if (!tiles && !(tiles = thread_tiles(need)))
        return coh_errf(COH_ERR_NOMEM, "bf16 gemm: out of memory for %zu bytes of widened tiles",
                        need);
    size_t mb_max = min_size((size_t)M, TILE_M), kb_max = min_size((size_t)K, TILE_K);
    float *ta_tile = tiles, *tb_tile = tiles + mb_max * kb_max;
    for (size_t i0 = 0; i0 < (size_t)M; i0 += TILE_M) {
        size_t mb = min_size((size_t)M - i0, TILE_M);
        for (size_t j0 = 0; j0 < (size_t)N; j0 += TILE_N) {
            size_t nb = min_size((size_t)N - j0, TILE_N);
            for (size_t k0 = 0; k0 < (size_t)K; k0 += TILE_K) {
                size_t kb = min_size((size_t)K - k0, TILE_K);
                /* op(A)'s mb x kb piece as stored: rows i0.. of A, or rows k0.. of A^T */
                if (ta)
                    widen_tile(ta_tile, A, lda, k0, i0, kb, mb);
                else
                    widen_tile(ta_tile, A, lda, i0, k0, mb, kb);
                if (tb)
                    widen_tile(tb_tile, B, ldb, j0, k0, nb, kb);
                else
                    widen_tile(tb_tile, B, ldb, k0, j0, kb, nb);
                cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans,
                            tb ? CblasTrans : CblasNoTrans, (int)mb, (int)nb, (int)kb, 1.0f,
                            ta_tile, (int)(ta ? mb : kb), tb_tile, (int)(tb ? kb : nb),
                            k0 ? 1.0f : beta, C + i0 * ldc + j0, (int)ldc);
            }
        }
    }
    return COH_OK;
}
