/* cuda_backend.cu: the CUDA backend's table (libcohort_cuda.so): device memory from cudaMalloc
 * on the rank's one stream (never managed memory), copies, the elementwise, reduction, AdamW and
 * bf16 conversion kernels, and the plug-in's entry point. Ops are queued on the stream and
 * return at once; the first CUDA error is kept and reported by sync. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train/backend/cuda/cuda_int.h"

const coh_cuda_host *cu_host;
cudaStream_t cu_stream;
cublasHandle_t cu_blas;

static char fail_msg[512];
static int fail_set;

void cu_fail(const char *where, const char *why)
{
    if (__atomic_exchange_n(&fail_set, 1, __ATOMIC_ACQ_REL))
        return;
    snprintf(fail_msg, sizeof fail_msg, "%s: %s", where, why);
}

int cu_failed(void) { return __atomic_load_n(&fail_set, __ATOMIC_ACQUIRE); }

static struct { void *p; size_t bytes; } scr[CU_SCR_N];

void *cu_scratch(int slot, size_t bytes)
{
    if (scr[slot].bytes >= bytes)
        return scr[slot].p;
    if (scr[slot].p)
        CU_CHECK(cudaFreeAsync(scr[slot].p, cu_stream));
    scr[slot].p = NULL;
    scr[slot].bytes = 0;
    void *p = NULL;
    if (cudaMallocAsync(&p, bytes, cu_stream) != cudaSuccess) {
        cudaGetLastError(); /* an out-of-memory is not sticky: clear it, record it */
        cu_fail("scratch", "out of device memory");
        return NULL;
    }
    scr[slot].p = p;
    scr[slot].bytes = bytes;
    return p;
}

/* ---- memory ---- */
static void *cu_alloc(size_t bytes)
{
    void *p = NULL;
    if (cudaMallocAsync(&p, bytes, cu_stream) != cudaSuccess) {
        cudaGetLastError();
        return NULL;
    }
    CU_CHECK(cudaMemsetAsync(p, 0, bytes, cu_stream)); /* the table promises zeroed memory */
    return p;
}

static void cu_free(void *p, size_t bytes)
{
    (void)bytes;
    if (p)
        CU_CHECK(cudaFreeAsync(p, cu_stream));
}

/* Device memory cannot give back part of an allocation: the range only reads as zeros. */
static void cu_release(void *p, size_t bytes)
{
    if (bytes)
        CU_CHECK(cudaMemsetAsync(p, 0, bytes, cu_stream));
}

/* A copy to the host returns when the bytes are there (the engine reads them next); others are
 * queued (a pageable source is staged before cudaMemcpyAsync returns, so it may be reused). */
static void cu_copy(void *dst, const void *src, size_t bytes, coh_copy_kind kind)
{
    if (!bytes || dst == src)
        return;
    cudaMemcpyKind k = kind == COH_COPY_H2D   ? cudaMemcpyHostToDevice
                       : kind == COH_COPY_D2H ? cudaMemcpyDeviceToHost
                                              : cudaMemcpyDeviceToDevice;
    CU_CHECK(cudaMemcpyAsync(dst, src, bytes, k, cu_stream));
    if (kind == COH_COPY_D2H)
        CU_CHECK(cudaStreamSynchronize(cu_stream));
}

static void cu_set(void *dst, int byte, size_t bytes)
{
    if (bytes)
        CU_CHECK(cudaMemsetAsync(dst, byte, bytes, cu_stream));
}

static coh_status cu_sync(void)
{
    CU_CHECK(cudaStreamSynchronize(cu_stream));
    if (cu_failed())
        return cu_host->errf(COH_ERR_SYSTEM, "cuda backend: %s", fail_msg);
    return COH_OK;
}

/* ---- elementwise ---- */
#define GRID_STRIDE(i, n) for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (n); \
                               i += (size_t)gridDim.x * blockDim.x)

__global__ void k_add(float *y, const float *x, size_t n) { GRID_STRIDE(i, n) y[i] += x[i]; }
__global__ void k_scale(float *x, size_t n, float f) { GRID_STRIDE(i, n) x[i] *= f; }
__global__ void k_fill(float *x, size_t n, size_t stride, float v)
{
    GRID_STRIDE(i, n) x[i * stride] = v;
}
__global__ void k_residual(float *out, const float *a, const float *b, size_t n)
{
    GRID_STRIDE(i, n) out[i] = a[i] + b[i];
}

/* The CPU's rounding bit for bit: nearest even on the upper half, a NaN kept a NaN. */
__device__ __forceinline__ gpt_bf16 bf16_round(float f)
{
    uint32_t u = __float_as_uint(f);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u)
        return (gpt_bf16)((u >> 16) | 0x40u);
    return (gpt_bf16)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

__global__ void k_to_bf16(gpt_bf16 *d, const float *s, size_t n) { GRID_STRIDE(i, n) d[i] = bf16_round(s[i]); }
__global__ void k_from_bf16(float *d, const gpt_bf16 *s, size_t n)
{
    GRID_STRIDE(i, n) d[i] = __uint_as_float((uint32_t)s[i] << 16);
}

#define T256 256u

static void cu_add(float *y, const float *x, size_t n)
{
    if (!n)
        return;
    k_add<<<cu_blocks(n, T256), T256, 0, cu_stream>>>(y, x, n);
    CU_LAUNCHED(k_add);
}

static void cu_scale(float *x, size_t n, float f)
{
    if (!n)
        return;
    k_scale<<<cu_blocks(n, T256), T256, 0, cu_stream>>>(x, n, f);
    CU_LAUNCHED(k_scale);
}

static void cu_fill(float *x, size_t n, size_t stride, float v)
{
    if (!n)
        return;
    k_fill<<<cu_blocks(n, T256), T256, 0, cu_stream>>>(x, n, stride, v);
    CU_LAUNCHED(k_fill);
}

static void cu_residual(float *out, const float *a, const float *b, size_t n)
{
    if (!n)
        return;
    k_residual<<<cu_blocks(n, T256), T256, 0, cu_stream>>>(out, a, b, n);
    CU_LAUNCHED(k_residual);
}

void cu_to_bf16(gpt_bf16 *dst, const float *src, size_t n)
{
    if (!n)
        return;
    k_to_bf16<<<cu_blocks(n, T256), T256, 0, cu_stream>>>(dst, src, n);
    CU_LAUNCHED(k_to_bf16);
}

static void cu_from_bf16(float *dst, const gpt_bf16 *src, size_t n)
{
    if (!n)
        return;
    k_from_bf16<<<cu_blocks(n, T256), T256, 0, cu_stream>>>(dst, src, n);
    CU_LAUNCHED(k_from_bf16);
}

/* ---- reductions in double: fixed blocks of RED_BLK elements, each summed by one block in a
 * fixed tree, the partials added on the host in order: the figure depends on n alone ---- */
#define RED_BLK 65536

__global__ void k_sum_blocks(double *part, const float *x, size_t n, int sq)
{
    __shared__ double sh[T256];
    size_t base = (size_t)blockIdx.x * RED_BLK, end = base + RED_BLK < n ? base + RED_BLK : n;
    double acc = 0.0;
    for (size_t i = base + threadIdx.x; i < end; i += blockDim.x)
        acc += sq ? (double)x[i] * x[i] : (double)x[i];
    sh[threadIdx.x] = acc;
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s)
            sh[threadIdx.x] += sh[threadIdx.x + s];
        __syncthreads();
    }
    if (!threadIdx.x)
        part[blockIdx.x] = sh[0];
}

static double reduce(const float *x, size_t n, int sq)
{
    if (!n || cu_failed())
        return 0.0;
    size_t nb = (n + RED_BLK - 1) / RED_BLK;
    double *part = (double *)cu_scratch(CU_SCR_PARTIAL, nb * sizeof(double));
    double host_small[256], *host = nb <= 256 ? host_small : (double *)malloc(nb * sizeof *host);
    if (!part || !host) {
        if (!host)
            cu_fail("sum", "out of host memory");
        else if (host != host_small)
            free(host);
        return 0.0;
    }
    k_sum_blocks<<<(unsigned)nb, T256, 0, cu_stream>>>(part, x, n, sq);
    CU_LAUNCHED(k_sum_blocks);
    CU_CHECK(cudaMemcpyAsync(host, part, nb * sizeof(double), cudaMemcpyDeviceToHost, cu_stream));
    CU_CHECK(cudaStreamSynchronize(cu_stream));
    double s = 0.0;
    for (size_t k = 0; k < nb; k++)
        s += host[k];
    if (host != host_small)
        free(host);
    return s;
}

static double cu_sum(const float *x, size_t n) { return reduce(x, n, 0); }
static double cu_sumsq(const float *x, size_t n) { return reduce(x, n, 1); }

/* ---- AdamW over one flat range: the CPU loop's arithmetic, one element per thread ---- */
__global__ void k_adamw(float *p, const float *g, float *m, float *v, size_t n, float b1,
                        float b2, float eps, float keep, float step_size, float rbc2)
{
    GRID_STRIDE(i, n)
    {
        float gi = g[i];
        float mi = b1 * m[i] + (1.0f - b1) * gi;
        float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        float denom = sqrtf(vi) * rbc2 + eps;
        p[i] = p[i] * keep - step_size * mi / denom;
    }
}

static void cu_adamw(float *p, const float *g, float *m, float *v, size_t n, float b1, float b2,
                     float eps, float keep, float step_size, float rbc2)
{
    if (!n)
        return;
    k_adamw<<<cu_blocks(n, T256), T256, 0, cu_stream>>>(p, g, m, v, n, b1, b2, eps, keep,
                                                         step_size, rbc2);
    CU_LAUNCHED(k_adamw);
}

/* ---- bf16 products: cuBLAS runs them on sm_80 and later ---- */
static int cc_major;

static coh_status cu_bf16_check(void)
{
    if (cc_major >= 8)
        return COH_OK;
    return cu_host->errf(COH_ERR_UNSUPPORTED, "bf16-mixed on cuda needs compute capability 8.0 "
                         "or later (this GPU has %d.x)", cc_major);
}

/* cuBLAS keeps its own workspace: the engine's scratchpad is not used. */
static size_t cu_gemm_scratch(int ta, int tb, int M, int N, int K, size_t lda, size_t ldb,
                              size_t ldc, int accumulate, int prepare)
{
    return 0;
}

/* device memory is held from cudaMalloc to cudaFree: release only zeroes it */
static uint64_t cu_resident(const void *p, size_t bytes) { return bytes; }

static coh_status cu_gemm_op(int bf16, int ta, int tb, int M, int N, int K, const void *A,
                             size_t lda, const void *B, size_t ldb, float beta, float *C,
                             size_t ldc)
{
    cu_gemm(bf16, ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc);
    return COH_OK; /* a cuBLAS error is recorded and reported by sync */
}

static coh_backend table;

static void fill_table(void)
{
    table.name = "cuda";
    table.alloc = cu_alloc;
    table.free = cu_free;
    table.release = cu_release;
    table.copy = cu_copy;
    table.set = cu_set;
    table.sync = cu_sync;
    table.resident = cu_resident;
    table.encoder_forward = cu_encoder_forward;
    table.encoder_backward = cu_encoder_backward;
    table.layernorm_forward = cu_layernorm_forward;
    table.layernorm_forward_bf16 = cu_layernorm_forward_bf16;
    table.layernorm_backward = cu_layernorm_backward;
    table.matmul_forward = cu_matmul_forward;
    table.matmul_backward = cu_matmul_backward;
    table.matmul_forward_h = cu_matmul_forward_h;
    table.matmul_backward_h = cu_matmul_backward_h;
    table.qkv_bias_backward = cu_qkv_bias_backward;
    table.attention_forward = cu_attention_forward;
    table.attention_backward = cu_attention_backward;
    table.gelu_forward = cu_gelu_forward;
    table.gelu_forward_bf16 = cu_gelu_forward_bf16;
    table.gelu_backward = cu_gelu_backward;
    table.residual_forward = cu_residual;
    table.head_loss = cu_head_loss;
    table.head_logits = cu_head_logits;
    table.add = cu_add;
    table.scale = cu_scale;
    table.fill = cu_fill;
    table.sum = cu_sum;
    table.sumsq = cu_sumsq;
    table.to_bf16 = cu_to_bf16;
    table.from_bf16 = cu_from_bf16;
    table.adamw = cu_adamw;
    table.bf16_check = cu_bf16_check;
    table.gemm_scratch = cu_gemm_scratch;
    table.gemm = cu_gemm_op;
}

static coh_status open_device(int device, char *desc, size_t n)
{
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess)
        return cu_host->errf(COH_ERR_UNSUPPORTED, "no CUDA device: %s", cudaGetErrorString(e));
    if (device < 0 || device >= count)
        return cu_host->errf(COH_ERR_UNSUPPORTED, "CUDA device %d does not exist (this rank "
                             "sees %d: valid 0..%d)", device, count, count - 1);
    cudaDeviceProp prop;
    if ((e = cudaSetDevice(device)) != cudaSuccess ||
        (e = cudaGetDeviceProperties(&prop, device)) != cudaSuccess ||
        (e = cudaStreamCreateWithFlags(&cu_stream, cudaStreamNonBlocking)) != cudaSuccess)
        return cu_host->errf(COH_ERR_SYSTEM, "CUDA device %d: %s", device, cudaGetErrorString(e));
    cublasStatus_t bs = cublasCreate(&cu_blas);
    if (bs != CUBLAS_STATUS_SUCCESS)
        return cu_host->errf(COH_ERR_SYSTEM, "cuBLAS: %s", cublasGetStatusString(bs));
    cublasSetStream(cu_blas, cu_stream);
    /* default math: fp32 products (CUBLAS_COMPUTE_32F) never use TF32 unless asked */
    cublasSetMathMode(cu_blas, CUBLAS_DEFAULT_MATH);
    cc_major = prop.major;
    if (desc && n)
        snprintf(desc, n, "%s (sm_%d%d, %.1f GiB, device %d)", prop.name, prop.major, prop.minor,
                 (double)prop.totalGlobalMem / (1u << 30), device);
    return COH_OK;
}

extern "C" __attribute__((visibility("default"))) coh_status
cohort_cuda_backend_open(const coh_cuda_host *host, int device, const coh_backend **out,
                         char *desc, size_t n)
{
    static int opened;
    cu_host = host;
    *out = NULL;
    if (!opened) {
        coh_status st = open_device(device, desc, n);
        if (st)
            return st;
        fill_table();
        opened = 1;
    }
    *out = &table;
    return COH_OK;
}
