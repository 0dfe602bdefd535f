/* guard_backend.c: the CPU backend with device memory the host cannot touch (`--device
 * cpu-guarded`), a test device for what a GPU forbids: every buffer is its own mapping, readable
 * and writable only while a backend call runs, so host code that reads or writes device memory
 * directly faults at once instead of working by luck on the CPU; and every op checks that the
 * pointers it is given are device memory (a host buffer handed to an op aborts, naming both).
 * Results are the CPU backend's, bit for bit: each op is the CPU's own, between the guards. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "train/backend/backend.h"

typedef struct guard_region {
    uintptr_t base;
    size_t bytes, mapped;
} guard_region;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static guard_region *regions;
static size_t nregions, capregions;
static int active; /* backend calls in flight (several threads may call at once) */

static size_t page_size(void)
{
    long v = sysconf(_SC_PAGESIZE);
    return v > 0 ? (size_t)v : 4096;
}

static void protect_all_locked(int prot)
{
    for (size_t i = 0; i < nregions; i++)
        if (mprotect((void *)regions[i].base, regions[i].mapped, prot)) {
            perror("cpu-guarded: mprotect");
            abort();
        }
}

/* Device memory opens on the first call in flight and closes when the last one returns. */
static void open_device(void)
{
    pthread_mutex_lock(&lock);
    if (active++ == 0)
        protect_all_locked(PROT_READ | PROT_WRITE);
    pthread_mutex_unlock(&lock);
}

static void close_device(void)
{
    pthread_mutex_lock(&lock);
    if (--active == 0)
        protect_all_locked(PROT_NONE);
    pthread_mutex_unlock(&lock);
}

static int is_device(const void *p, size_t bytes)
{
    uintptr_t a = (uintptr_t)p;
    int found = 0;
    pthread_mutex_lock(&lock);
    for (size_t i = 0; i < nregions && !found; i++)
        found = a >= regions[i].base && a - regions[i].base <= regions[i].bytes &&
                bytes <= regions[i].bytes - (a - regions[i].base);
    pthread_mutex_unlock(&lock);
    return found;
}

/* A pointer an op reads or writes must be device memory (NULL: the op does not use it). */
static void need(const char *op, const char *arg, const void *p, size_t bytes)
{
    if (p && !is_device(p, bytes)) {
        fprintf(stderr,
                "cpu-guarded: %s given %s = %p (%zu bytes), which is not device memory: a GPU "
                "backend would fault here\n",
                op, arg, p, bytes);
        abort();
    }
}

/* A host pointer where the table says host: device memory there is a bug too. */
static void need_host(const char *op, const char *arg, const void *p)
{
    if (p && is_device(p, 1)) {
        fprintf(stderr, "cpu-guarded: %s given device memory %p as its host %s\n", op, p, arg);
        abort();
    }
}

static void need_mm(const char *op, const gpt_mm *mm)
{
    if (!mm)
        return;
    need(op, "mm.a", mm->a, 1);
    need(op, "mm.b", mm->b, 1);
    need(op, "mm.w", mm->w, 1);
    need(op, "mm.wte", mm->wte, 1);
    need(op, "mm.dl", mm->dl, 1);
    need(op, "mm.scratch", mm->scratch, mm->scratch_bytes ? mm->scratch_bytes : 1);
}

static const coh_backend *cpu(void) { return coh_backend_cpu(); }

/* ---- memory ---- */
static void *g_alloc(size_t bytes)
{
    size_t pg = page_size(), mapped = (bytes + pg - 1) / pg * pg;
    void *p = mmap(NULL, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return NULL;
    pthread_mutex_lock(&lock);
    if (nregions == capregions) {
        size_t cap = capregions ? 2 * capregions : 64;
        guard_region *nr = realloc(regions, cap * sizeof *nr);
        if (!nr) {
            pthread_mutex_unlock(&lock);
            munmap(p, mapped);
            return NULL;
        }
        regions = nr;
        capregions = cap;
    }
    regions[nregions++] = (guard_region){(uintptr_t)p, bytes, mapped};
    if (!active && mprotect(p, mapped, PROT_NONE)) {
        perror("cpu-guarded: mprotect");
        abort();
    }
    pthread_mutex_unlock(&lock);
    return p;
}

static void g_free(void *p, size_t bytes)
{
    (void)bytes;
    size_t mapped = 0;
    pthread_mutex_lock(&lock);
    for (size_t i = 0; i < nregions; i++)
        if (regions[i].base == (uintptr_t)p) {
            mapped = regions[i].mapped;
            regions[i] = regions[--nregions];
            break;
        }
    pthread_mutex_unlock(&lock);
    if (!mapped) {
        fprintf(stderr, "cpu-guarded: free of %p, which this backend did not allocate\n", p);
        abort();
    }
    munmap(p, mapped);
}

static void g_release(void *p, size_t bytes)
{
    need("release", "p", p, bytes);
    open_device();
    cpu()->release(p, bytes);
    close_device();
}

static void g_copy(void *dst, const void *src, size_t bytes, coh_copy_kind kind)
{
    if (!bytes)
        return;
    if (kind != COH_COPY_H2D)
        need("copy", "src", src, bytes);
    else
        need_host("copy H2D", "src", src);
    if (kind != COH_COPY_D2H)
        need("copy", "dst", dst, bytes);
    else
        need_host("copy D2H", "dst", dst);
    open_device();
    cpu()->copy(dst, src, bytes, kind);
    close_device();
}

static void g_set(void *dst, int byte, size_t bytes)
{
    need("set", "dst", dst, bytes);
    open_device();
    cpu()->set(dst, byte, bytes);
    close_device();
}

static coh_status g_sync(void) { return cpu()->sync(); }

/* ---- ops: check the pointers, open, the CPU's op, close ---- */

static void g_encoder_forward(float *out, const int32_t *tok, const float *wte, const float *wpe,
                              int B, int T, int C, int v0, int vn, int add_wpe)
{
    const char *op = "encoder_forward";
    need(op, "out", out, 1), need(op, "tok", tok, 1), need(op, "wte", wte, 1);
    need(op, "wpe", wpe, 1);
    open_device();
    cpu()->encoder_forward(out, tok, wte, wpe, B, T, C, v0, vn, add_wpe);
    close_device();
}

static void g_encoder_backward(float *dwte, float *dwpe, const float *dout, const int32_t *tok,
                               int B, int T, int C, int v0, int vn)
{
    const char *op = "encoder_backward";
    need(op, "dwte", dwte, 1), need(op, "dwpe", dwpe, 1), need(op, "dout", dout, 1);
    need(op, "tok", tok, 1);
    open_device();
    cpu()->encoder_backward(dwte, dwpe, dout, tok, B, T, C, v0, vn);
    close_device();
}

static void g_layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                                const float *w, const float *b, size_t N, int C)
{
    const char *op = "layernorm_forward";
    need(op, "out", out, 1), need(op, "mean", mean, 1), need(op, "rstd", rstd, 1);
    need(op, "inp", inp, 1), need(op, "w", w, 1), need(op, "b", b, 1);
    open_device();
    cpu()->layernorm_forward(out, mean, rstd, inp, w, b, N, C);
    close_device();
}

static void g_layernorm_forward_bf16(gpt_bf16 *out, float *mean, float *rstd, const float *inp,
                                     const float *w, const float *b, size_t N, int C)
{
    const char *op = "layernorm_forward_bf16";
    need(op, "out", out, 1), need(op, "mean", mean, 1), need(op, "rstd", rstd, 1);
    need(op, "inp", inp, 1), need(op, "w", w, 1), need(op, "b", b, 1);
    open_device();
    cpu()->layernorm_forward_bf16(out, mean, rstd, inp, w, b, N, C);
    close_device();
}

static void g_layernorm_backward(float *dinp, float *dw, float *db, const float *dout,
                                 const float *inp, const float *w, const float *mean,
                                 const float *rstd, size_t N, int C)
{
    const char *op = "layernorm_backward";
    need(op, "dinp", dinp, 1), need(op, "dw", dw, 1), need(op, "db", db, 1);
    need(op, "dout", dout, 1), need(op, "inp", inp, 1), need(op, "w", w, 1);
    need(op, "mean", mean, 1), need(op, "rstd", rstd, 1);
    open_device();
    cpu()->layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, N, C);
    close_device();
}

static void g_matmul_forward(const gpt_mm *mm, float *out, const float *inp, const float *w,
                             const float *b, size_t N, int IC, int OC)
{
    const char *op = "matmul_forward";
    need_mm(op, mm);
    need(op, "out", out, 1), need(op, "inp", inp, 1), need(op, "w", w, 1), need(op, "b", b, 1);
    open_device();
    cpu()->matmul_forward(mm, out, inp, w, b, N, IC, OC);
    close_device();
}

static void g_matmul_backward(const gpt_mm *mm, float *dinp, float *dw, float *db,
                              const float *dout, const float *inp, const float *w, size_t N,
                              int IC, int OC, int accumulate)
{
    const char *op = "matmul_backward";
    need_mm(op, mm);
    need(op, "dinp", dinp, 1), need(op, "dw", dw, 1), need(op, "db", db, 1);
    need(op, "dout", dout, 1), need(op, "inp", inp, 1), need(op, "w", w, 1);
    open_device();
    cpu()->matmul_backward(mm, dinp, dw, db, dout, inp, w, N, IC, OC, accumulate);
    close_device();
}

static void g_matmul_forward_h(const gpt_mm *mm, float *out, const gpt_bf16 *inp, const float *w,
                               const float *b, size_t N, int IC, int OC)
{
    const char *op = "matmul_forward_h";
    need_mm(op, mm);
    need(op, "out", out, 1), need(op, "inp", inp, 1), need(op, "w", w, 1), need(op, "b", b, 1);
    open_device();
    cpu()->matmul_forward_h(mm, out, inp, w, b, N, IC, OC);
    close_device();
}

static void g_matmul_backward_h(const gpt_mm *mm, float *dinp, float *dw, float *db,
                                const float *dout, const gpt_bf16 *inp, const float *w, size_t N,
                                int IC, int OC, int accumulate)
{
    const char *op = "matmul_backward_h";
    need_mm(op, mm);
    need(op, "dinp", dinp, 1), need(op, "dw", dw, 1), need(op, "db", db, 1);
    need(op, "dout", dout, 1), need(op, "inp", inp, 1), need(op, "w", w, 1);
    open_device();
    cpu()->matmul_backward_h(mm, dinp, dw, db, dout, inp, w, N, IC, OC, accumulate);
    close_device();
}

static void g_qkv_bias_backward(float *db, const float *dqkv, size_t N, int C)
{
    need("qkv_bias_backward", "db", db, 1), need("qkv_bias_backward", "dqkv", dqkv, 1);
    open_device();
    cpu()->qkv_bias_backward(db, dqkv, N, C);
    close_device();
}

static int g_attention_forward(float *out, float *lse, const float *qkv, int B, int T, int C,
                               int NH)
{
    const char *op = "attention_forward";
    need(op, "out", out, 1), need(op, "lse", lse, 1), need(op, "qkv", qkv, 1);
    open_device();
    int r = cpu()->attention_forward(out, lse, qkv, B, T, C, NH);
    close_device();
    return r;
}

static int g_attention_backward(float *dqkv, const float *dout, const float *qkv,
                                const float *lse, int B, int T, int C, int NH)
{
    const char *op = "attention_backward";
    need(op, "dqkv", dqkv, 1), need(op, "dout", dout, 1), need(op, "qkv", qkv, 1);
    need(op, "lse", lse, 1);
    open_device();
    int r = cpu()->attention_backward(dqkv, dout, qkv, lse, B, T, C, NH);
    close_device();
    return r;
}

static void g_gelu_forward(float *out, const float *inp, size_t n)
{
    need("gelu_forward", "out", out, n * sizeof *out), need("gelu_forward", "inp", inp, 1);
    open_device();
    cpu()->gelu_forward(out, inp, n);
    close_device();
}

static void g_gelu_forward_bf16(gpt_bf16 *out, const float *inp, size_t n)
{
    need("gelu_forward_bf16", "out", out, n * sizeof *out);
    need("gelu_forward_bf16", "inp", inp, n * sizeof *inp);
    open_device();
    cpu()->gelu_forward_bf16(out, inp, n);
    close_device();
}

static void g_gelu_backward(float *dinp, const float *inp, const float *dout, size_t n)
{
    const char *op = "gelu_backward";
    need(op, "dinp", dinp, n * sizeof *dinp), need(op, "inp", inp, n * sizeof *inp);
    need(op, "dout", dout, n * sizeof *dout);
    open_device();
    cpu()->gelu_backward(dinp, inp, dout, n);
    close_device();
}

static void g_residual_forward(float *out, const float *a, const float *b, size_t n)
{
    const char *op = "residual_forward";
    need(op, "out", out, n * sizeof *out), need(op, "a", a, n * sizeof *a);
    need(op, "b", b, n * sizeof *b);
    open_device();
    cpu()->residual_forward(out, a, b, n);
    close_device();
}

static coh_status g_head_loss(const gpt_mm *mm, float *losses, float *dlnf, float *dwte,
                              float *logits, size_t chunk, const float *lnf, const float *wte,
                              const int32_t *targets, size_t N, int C, int V, float grad_scale,
                              const gpt_vocab_part *part)
{
    const char *op = "head_loss";
    need_mm(op, mm);
    need(op, "losses", losses, 1), need(op, "dlnf", dlnf, 1), need(op, "dwte", dwte, 1);
    need(op, "logits", logits, 1), need(op, "lnf", lnf, 1), need(op, "wte", wte, 1);
    need(op, "targets", targets, 1);
    if (part)
        need(op, "part.kept", part->kept, 1);
    open_device();
    coh_status st = cpu()->head_loss(mm, losses, dlnf, dwte, logits, chunk, lnf, wte, targets,
                                     N, C, V, grad_scale, part);
    close_device();
    return st;
}

static void g_head_logits(const gpt_mm *mm, float *logits, const float *x, const float *wte,
                          int C, int V)
{
    const char *op = "head_logits";
    need_mm(op, mm);
    need_host(op, "logits", logits);
    need(op, "x", x, 1), need(op, "wte", wte, 1);
    open_device();
    cpu()->head_logits(mm, logits, x, wte, C, V);
    close_device();
}

static void g_add(float *y, const float *x, size_t n)
{
    need("add", "y", y, n * sizeof *y), need("add", "x", x, n * sizeof *x);
    open_device();
    cpu()->add(y, x, n);
    close_device();
}

static void g_scale(float *x, size_t n, float f)
{
    need("scale", "x", x, n * sizeof *x);
    open_device();
    cpu()->scale(x, n, f);
    close_device();
}

static void g_fill(float *x, size_t n, size_t stride, float value)
{
    need("fill", "x", x, n ? ((n - 1) * stride + 1) * sizeof *x : 0);
    open_device();
    cpu()->fill(x, n, stride, value);
    close_device();
}

static double g_sum(const float *x, size_t n)
{
    need("sum", "x", x, n * sizeof *x);
    open_device();
    double s = cpu()->sum(x, n);
    close_device();
    return s;
}

static double g_sumsq(const float *x, size_t n)
{
    need("sumsq", "x", x, n * sizeof *x);
    open_device();
    double s = cpu()->sumsq(x, n);
    close_device();
    return s;
}

static void g_to_bf16(gpt_bf16 *dst, const float *src, size_t n)
{
    need("to_bf16", "dst", dst, n * sizeof *dst), need("to_bf16", "src", src, n * sizeof *src);
    open_device();
    cpu()->to_bf16(dst, src, n);
    close_device();
}

static void g_from_bf16(float *dst, const gpt_bf16 *src, size_t n)
{
    need("from_bf16", "dst", dst, n * sizeof *dst), need("from_bf16", "src", src, n * sizeof *src);
    open_device();
    cpu()->from_bf16(dst, src, n);
    close_device();
}

static void g_adamw(float *p, const float *g, float *m, float *v, size_t n, float b1, float b2,
                    float eps, float keep, float step_size, float rbc2)
{
    size_t bytes = n * sizeof *p;
    need("adamw", "p", p, bytes), need("adamw", "g", g, bytes);
    need("adamw", "m", m, bytes), need("adamw", "v", v, bytes);
    open_device();
    cpu()->adamw(p, g, m, v, n, b1, b2, eps, keep, step_size, rbc2);
    close_device();
}

static coh_status g_bf16_check(void) { return cpu()->bf16_check(); }

static size_t g_gemm_scratch(int ta, int tb, int M, int N, int K, size_t lda, size_t ldb,
                             size_t ldc, int accumulate, int prepare)
{
    return cpu()->gemm_scratch(ta, tb, M, N, K, lda, ldb, ldc, accumulate, prepare);
}

static uint64_t g_resident(const void *p, size_t bytes)
{
    need("resident", "p", p, bytes);
    return cpu()->resident(p, bytes); /* mincore reads no memory: no need to open it */
}

/* bytes a row-major operand of `rows` rows of `cols` values spans with row stride ld */
static size_t span_bytes(size_t rows, size_t cols, size_t ld, size_t elem)
{
    return rows && cols ? ((rows - 1) * ld + cols) * elem : 0;
}

static coh_status g_gemm(int bf16, int ta, int tb, int M, int N, int K, const void *A,
                         size_t lda, const void *B, size_t ldb, float beta, float *C, size_t ldc)
{
    size_t e = bf16 ? sizeof(gpt_bf16) : sizeof(float);
    need("gemm", "A", A, span_bytes(ta ? K : M, ta ? M : K, lda, e));
    need("gemm", "B", B, span_bytes(tb ? N : K, tb ? K : N, ldb, e));
    need("gemm", "C", C, span_bytes(M, N, ldc, sizeof(float)));
    open_device();
    coh_status st = cpu()->gemm(bf16, ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc);
    close_device();
    return st;
}

static const coh_backend guarded = {
    .name = "cpu-guarded",
    .alloc = g_alloc,
    .free = g_free,
    .release = g_release,
    .copy = g_copy,
    .set = g_set,
    .sync = g_sync,
    .resident = g_resident,
    .encoder_forward = g_encoder_forward,
    .encoder_backward = g_encoder_backward,
    .layernorm_forward = g_layernorm_forward,
    .layernorm_forward_bf16 = g_layernorm_forward_bf16,
    .layernorm_backward = g_layernorm_backward,
    .matmul_forward = g_matmul_forward,
    .matmul_backward = g_matmul_backward,
    .matmul_forward_h = g_matmul_forward_h,
    .matmul_backward_h = g_matmul_backward_h,
    .qkv_bias_backward = g_qkv_bias_backward,
    .attention_forward = g_attention_forward,
    .attention_backward = g_attention_backward,
    .gelu_forward = g_gelu_forward,
    .gelu_forward_bf16 = g_gelu_forward_bf16,
    .gelu_backward = g_gelu_backward,
    .residual_forward = g_residual_forward,
    .head_loss = g_head_loss,
    .head_logits = g_head_logits,
    .add = g_add,
    .scale = g_scale,
    .fill = g_fill,
    .sum = g_sum,
    .sumsq = g_sumsq,
    .to_bf16 = g_to_bf16,
    .from_bf16 = g_from_bf16,
    .adamw = g_adamw,
    .bf16_check = g_bf16_check,
    .gemm_scratch = g_gemm_scratch,
    .gemm = g_gemm,
};

const coh_backend *coh_backend_guarded(void) { return &guarded; }
