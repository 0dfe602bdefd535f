/* bench_gemm_bf16.c: the engine's matrix products (N = B x T rows against C, 3C, 4C, and the LM
 * head's 256-row chunk against the vocabulary V) timed as OpenBLAS sgemm and as oneDNN's bf16
 * matmul (bf16 inputs, fp32 accumulation and output, the layouts ops_matmul.c uses), best of
 * REPS runs each (env, default 30), on OMP_NUM_THREADS threads (default 2); one line per
 * product with both rates and their ratio. Built only when oneDNN is found.
 * usage: OMP_NUM_THREADS=2 bench_gemm_bf16 [N C V] (default 2048 384 50257) */
#include <cblas.h>
#include <oneapi/dnnl/dnnl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static dnnl_engine_t engine;
static dnnl_stream_t stream;

#define CHECK(x)                                                                               \
    do {                                                                                       \
        dnnl_status_t s_ = (x);                                                                \
        if (s_ != dnnl_success) {                                                              \
            fprintf(stderr, "%s: oneDNN status %d\n", #x, (int)s_);                            \
            exit(1);                                                                           \
        }                                                                                      \
    } while (0)

/* rows x cols at row stride ld, or (trans) the transpose of a stored cols x rows matrix */
static void md_2d(dnnl_memory_desc_t *md, long rows, long cols, int trans, long ld,
                  dnnl_data_type_t dt)
{
    dnnl_dims_t dims = {rows, cols}, strides = {trans ? 1 : ld, trans ? ld : 1};
    CHECK(dnnl_memory_desc_init_by_strides(md, 2, dims, dt, strides));
}

static uint16_t to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

/* C (M,N) = op(A) (M,K) op(B) (K,N) + beta C in bf16 through oneDNN: best GFLOP/s of reps */
static double bf16_rate(int ta, int tb, long M, long N, long K, float beta, int reps)
{
    uint16_t *A = malloc((size_t)(M * K) * 2), *B = malloc((size_t)(K * N) * 2);
    float *C = calloc((size_t)(M * N), 4);
    for (long i = 0; i < M * K; i++)
        A[i] = to_bf16((float)(i % 7) * 0.1f);
    for (long i = 0; i < K * N; i++)
        B[i] = to_bf16((float)(i % 5) * 0.1f);
    dnnl_memory_desc_t a, b, c;
    md_2d(&a, M, K, ta, ta ? M : K, dnnl_bf16);
    md_2d(&b, K, N, tb, tb ? K : N, dnnl_bf16);
    md_2d(&c, M, N, 0, N, dnnl_f32);
    dnnl_matmul_desc_t d;
    CHECK(dnnl_matmul_desc_init(&d, &a, &b, NULL, &c));
    dnnl_primitive_attr_t attr;
    dnnl_post_ops_t po = NULL;
    CHECK(dnnl_primitive_attr_create(&attr));
    if (beta != 0.0f) {
        CHECK(dnnl_post_ops_create(&po));
        CHECK(dnnl_post_ops_append_sum(po, beta));
        CHECK(dnnl_primitive_attr_set_post_ops(attr, po));
    }
    dnnl_primitive_desc_t pd;
    dnnl_primitive_t p;
    CHECK(dnnl_primitive_desc_create(&pd, &d, attr, engine, NULL));
    CHECK(dnnl_primitive_create(&p, pd));
    dnnl_memory_t ma, mb, mc;
    CHECK(dnnl_memory_create(&ma, &a, engine, A));
    CHECK(dnnl_memory_create(&mb, &b, engine, B));
    CHECK(dnnl_memory_create(&mc, &c, engine, C));
    dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mc}};
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        double t = now();
        CHECK(dnnl_primitive_execute(p, stream, 3, args));
        CHECK(dnnl_stream_wait(stream));
        t = now() - t;
        best = t < best ? t : best;
    }
    dnnl_memory_destroy(ma), dnnl_memory_destroy(mb), dnnl_memory_destroy(mc);
    dnnl_primitive_destroy(p), dnnl_primitive_desc_destroy(pd);
    dnnl_primitive_attr_destroy(attr);
    if (po)
        dnnl_post_ops_destroy(po);
    free(A), free(B), free(C);
    return 2.0 * (double)M * (double)N * (double)K / best * 1e-9;
}

static double sgemm_rate(int ta, int tb, long M, long N, long K, float beta, int reps)
{
    float *A = malloc((size_t)(M * K) * 4), *B = malloc((size_t)(K * N) * 4);
    float *C = calloc((size_t)(M * N), 4);
    for (long i = 0; i < M * K; i++)
        A[i] = (float)(i % 7) * 0.1f;
    for (long i = 0; i < K * N; i++)
        B[i] = (float)(i % 5) * 0.1f;
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        double t = now();
        cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                    (int)M, (int)N, (int)K, 1.0f, A, (int)(ta ? M : K), B, (int)(tb ? K : N), beta,
                    C, (int)N);
        t = now() - t;
        best = t < best ? t : best;
    }
    free(A), free(B), free(C);
    return 2.0 * (double)M * (double)N * (double)K / best * 1e-9;
}

int main(int argc, char **argv)
{
    long Nr = argc > 1 ? atol(argv[1]) : 2048, C = argc > 2 ? atol(argv[2]) : 384,
         V = argc > 3 ? atol(argv[3]) : 50257;
    const char *e = getenv("OMP_NUM_THREADS"), *r = getenv("REPS");
    int threads = e && atoi(e) > 0 ? atoi(e) : 2, reps = r && atoi(r) > 0 ? atoi(r) : 30;
    if (Nr < 1 || C < 1 || V < 1)
        return fprintf(stderr, "usage: bench_gemm_bf16 [N C V]\n"), 2;
    openblas_set_num_threads(threads);
    CHECK(dnnl_engine_create(&engine, dnnl_cpu, 0));
    CHECK(dnnl_stream_create(&stream, engine, dnnl_stream_default_flags));
    /* forward A B (+ bias: beta 1), input gradient A B^T, weight gradient A^T B + C */
    const struct {
        const char *what;
        int ta, tb;
        long M, N, K;
        float beta;
    } s[] = {
        {"square 2048^3", 0, 0, 2048, 2048, 2048, 0},
        {"qkv forward", 0, 0, Nr, 3 * C, C, 1},
        {"attention proj forward", 0, 0, Nr, C, C, 1},
        {"fc forward", 0, 0, Nr, 4 * C, C, 1},
        {"mlp proj forward", 0, 0, Nr, C, 4 * C, 1},
        {"qkv dinp", 0, 1, Nr, C, 3 * C, 0},
        {"qkv dw", 1, 0, C, 3 * C, Nr, 1},
        {"fc dinp", 0, 1, Nr, C, 4 * C, 0},
        {"fc dw", 1, 0, C, 4 * C, Nr, 1},
        {"mlp proj dinp", 0, 1, Nr, 4 * C, C, 0},
        {"mlp proj dw", 1, 0, 4 * C, C, Nr, 1},
        {"head logits (chunk 256)", 0, 1, 256, V, C, 0},
        {"head dx (chunk 256)", 0, 0, 256, C, V, 0},
        {"head dwte (chunk 256)", 1, 0, V, C, 256, 1},
    };
    printf("%d threads, best of %d runs; GFLOP/s\n", threads, reps);
    printf("%-26s %-22s %9s %9s %7s\n", "product", "M x N x K", "sgemm", "bf16", "ratio");
    for (size_t i = 0; i < sizeof s / sizeof s[0]; i++) {
        double f32 = sgemm_rate(s[i].ta, s[i].tb, s[i].M, s[i].N, s[i].K, s[i].beta, reps);
        double b16 = bf16_rate(s[i].ta, s[i].tb, s[i].M, s[i].N, s[i].K, s[i].beta, reps);
        char shape[48];
        snprintf(shape, sizeof shape, "%ld x %ld x %ld", s[i].M, s[i].N, s[i].K);
        printf("%-26s %-22s %9.1f %9.1f %6.2fx\n", s[i].what, shape, f32, b16, b16 / f32);
    }
    dnnl_stream_destroy(stream);
    dnnl_engine_destroy(engine);
    return 0;
}
