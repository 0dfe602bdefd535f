/* backend.h: the device interface the GPT engine computes through: a table of memory functions
 * on one ordered queue and every op the model and the optimizer run, one table per device kind
 * (the CPU's in cpu/). The model, the optimizer and the trainer call only this table, so a GPU
 * backend is one new table over device memory, not a rewrite of the model. */
#ifndef COHORT_TRAIN_BACKEND_H
#define COHORT_TRAIN_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "cohort/backend.h"
#include "cohort/status.h"

typedef uint16_t gpt_bf16; /* the upper half of an IEEE float */

/* Rows of the fused LM head computed at once: (GPT_HEAD_CHUNK, V) logits are all it keeps. */
#define GPT_HEAD_CHUNK 256

/* The precision of a model's products, passed to every product explicitly: where a bf16-mixed
 * model keeps the bf16 copies of a GEMM's operands (gpt_act_sizes counts them): a (rows x an
 * input width), b (rows x an output width), w (one block matrix), wte (the head's vocabulary
 * rows), dl (the head's bf16 dL/dlogits for up to dl_rows rows, so that its two backward
 * products run once over all of them instead of once per chunk; NULL: per chunk).
 * NULL, or bf16 0: every product runs fp32. */
typedef struct gpt_mm {
    int bf16;
    gpt_bf16 *a, *b, *w, *wte, *dl;
    size_t dl_rows;
    void *scratch;        /* the backend's GEMM scratchpad for the model's products */
    size_t scratch_bytes;
} gpt_mm;

/* The part of the vocabulary an LM head holds: ids v0..v0+vn-1 in its wte rows 0..vn-1, and
 * how its row statistics are summed (maxed) over the other parts; reduce NULL: the whole
 * vocabulary is here. */
typedef struct gpt_vocab_part {
    int v0, vn;
    coh_status (*reduce)(void *ctx, float *x, size_t n, int max); /* in place over the parts */
    void *ctx;
    float *kept;     /* NULL, or (N, vn): the logits live here instead of the chunk buffer */
    int kept_ready;  /* kept already holds them (from a forward): no product recomputes them */
} gpt_vocab_part;

/* Directions of a copy: host and device may be one memory (the CPU), never assumed so. */
typedef enum coh_copy_kind { COH_COPY_H2D, COH_COPY_D2H, COH_COPY_D2D } coh_copy_kind;

/* Every pointer an op takes is device memory from `alloc` (or a view into it) unless it says
 * host. Ops run in call order on the backend's one queue; `sync` waits for all of them. N = B*T
 * rows. The semantics of each op are those of the CPU kernels it names (cpu/cpu_ops.h). */
struct coh_backend {
    const char *name;
    /* ---- memory: use through coh_dev_* (backend.c), which count what a rank holds ---- */
    void *(*alloc)(size_t bytes);             /* zeroed, 64-byte aligned; NULL when out */
    void (*free)(void *p, size_t bytes);
    /* [p, p + bytes) is not needed until written again and reads as zeros: its memory goes back
     * to the system where it can (no alignment needed: on the CPU whole pages inside go back,
     * the partial ones at the ends are zeroed in place) */
    void (*release)(void *p, size_t bytes);
    void (*copy)(void *dst, const void *src, size_t bytes, coh_copy_kind kind);
    void (*set)(void *dst, int byte, size_t bytes);
    coh_status (*sync)(void);
    /* bytes of [p, p + bytes) the device holds now: on the CPU the pages resident (pages never
     * written or given back are not); a GPU holds its allocations whole, given back or not */
    uint64_t (*resident)(const void *p, size_t bytes);

    /* ---- the model's ops ---- */
    void (*encoder_forward)(float *out, const int32_t *tok, const float *wte, const float *wpe,
                            int B, int T, int C, int v0, int vn, int add_wpe);
    void (*encoder_backward)(float *dwte, float *dwpe, const float *dout, const int32_t *tok,
                             int B, int T, int C, int v0, int vn);
    void (*layernorm_forward)(float *out, float *mean, float *rstd, const float *inp,
                              const float *w, const float *b, size_t N, int C);
    void (*layernorm_forward_bf16)(gpt_bf16 *out, float *mean, float *rstd, const float *inp,
                                   const float *w, const float *b, size_t N, int C);
    void (*layernorm_backward)(float *dinp, float *dw, float *db, const float *dout,
                               const float *inp, const float *w, const float *mean,
                               const float *rstd, size_t N, int C);
    /* products in mm's precision (fp32, or bf16 operands with fp32 accumulation), with their
     * fused epilogues: the bias add, dinp accumulate, the bias gradient */
    void (*matmul_forward)(const gpt_mm *mm, float *out, const float *inp, const float *w,
                           const float *b, size_t N, int IC, int OC);
    void (*matmul_backward)(const gpt_mm *mm, float *dinp, float *dw, float *db,
                            const float *dout, const float *inp, const float *w, size_t N,
                            int IC, int OC, int accumulate);
    void (*matmul_forward_h)(const gpt_mm *mm, float *out, const gpt_bf16 *inp, const float *w,
                             const float *b, size_t N, int IC, int OC);
    void (*matmul_backward_h)(const gpt_mm *mm, float *dinp, float *dw, float *db,
                              const float *dout, const gpt_bf16 *inp, const float *w, size_t N,
                              int IC, int OC, int accumulate);
    void (*qkv_bias_backward)(float *db, const float *dqkv, size_t N, int C);
    /* attention keeping only the softmax's log-sum-exp (B,NH,T); -1 when out of memory */
    int (*attention_forward)(float *out, float *lse, const float *qkv, int B, int T, int C,
                             int NH);
    int (*attention_backward)(float *dqkv, const float *dout, const float *qkv, const float *lse,
                              int B, int T, int C, int NH);
    void (*gelu_forward)(float *out, const float *inp, size_t n);
    void (*gelu_forward_bf16)(gpt_bf16 *out, const float *inp, size_t n);
    void (*gelu_backward)(float *dinp, const float *inp, const float *dout, size_t n);
    void (*residual_forward)(float *out, const float *a, const float *b, size_t n);
    /* the fused LM head + cross-entropy over the vocabulary chunk by chunk (cpu_ops.h) */
    coh_status (*head_loss)(const gpt_mm *mm, float *losses, float *dlnf, float *dwte,
                            float *logits, size_t chunk, const float *lnf, const float *wte,
                            const int32_t *targets, size_t N, int C, int V, float grad_scale,
                            const gpt_vocab_part *part);
    /* logits (V, host) = x (C) @ wte^T */
    void (*head_logits)(const gpt_mm *mm, float *logits, const float *x, const float *wte, int C,
                        int V);

    /* ---- elementwise and reductions ---- */
    void (*add)(float *y, const float *x, size_t n);      /* y += x */
    void (*scale)(float *x, size_t n, float f);           /* x *= f */
    /* x[i * stride] = value for i < n */
    void (*fill)(float *x, size_t n, size_t stride, float value);
    double (*sum)(const float *x, size_t n);              /* in row order, in double */
    /* sum of squares in double, in an order fixed by n alone (not threads, not the ISA) */
    double (*sumsq)(const float *x, size_t n);
    void (*to_bf16)(gpt_bf16 *dst, const float *src, size_t n); /* nearest even */
    void (*from_bf16)(float *dst, const gpt_bf16 *src, size_t n); /* exact */

    /* ---- the optimizer: AdamW over one flat range ---- */
    void (*adamw)(float *p, const float *g, float *m, float *v, size_t n, float b1, float b2,
                  float eps, float keep, float step_size, float rbc2);

    /* ---- bf16 products: whether they run here, and the scratchpad they need ---- */
    coh_status (*bf16_check)(void);
    /* bytes of the scratchpad of one product of that shape; prepare: build its kernel now */
    size_t (*gemm_scratch)(int ta, int tb, int M, int N, int K, size_t lda, size_t ldb,
                           size_t ldc, int accumulate, int prepare);
    /* The bare product the linear layers fuse their epilogues around: C (M x N, fp32, row stride
     * ldc) = beta C + op(A) op(B), op(A) M x K, op(B) K x N, A and B row-major with row strides
     * lda, ldb (ta/tb: the stored matrix is the transpose); bf16: A and B are gpt_bf16 with fp32
     * accumulation and beta 0 or 1 (the CPU's bf16 products take no other), else float. What
     * `cohort bench gemm --device` times. An error of a queued product may surface at sync. */
    coh_status (*gemm)(int bf16, int ta, int tb, int M, int N, int K, const void *A, size_t lda,
                       const void *B, size_t ldb, float beta, float *C, size_t ldc);
};

/* The CPU backend (cpu/cpu_backend.c). */
const coh_backend *coh_backend_cpu(void);
/* The CPU backend with device memory the host cannot touch outside backend calls, and every
 * op's pointers checked to be device memory (guard/guard_backend.c): a test device that finds
 * host code a GPU would fault on. */
const coh_backend *coh_backend_guarded(void);
/* The CUDA backend (cuda_load.c): the plug-in opened on the rank's device (LOCAL_RANK), or
 * COH_ERR_UNSUPPORTED naming what is missing (no plug-in in this build, a library, a GPU). */
coh_status coh_backend_cuda(const char *name, const coh_backend **out);
/* "NVIDIA H100 ... (sm_90, 79.1 GiB, device 0)" once opened; "" before or without CUDA. */
const char *coh_backend_cuda_desc(void);

/* ---- device memory, counted (backend.c): every buffer of a rank comes from here ---- */
/* bytes zeroed from be; NULL when out of memory (nothing counted) */
void *coh_dev_alloc(const coh_backend *be, size_t bytes);
/* p from coh_dev_alloc (NULL: nothing); its bytes no longer held */
void coh_dev_free(const coh_backend *be, void *p);
/* Memory of a rank that another layer allocated (a transport's shared arena the trainer keeps
 * its gradients in) counted as held until untracked. */
void coh_dev_track(const coh_backend *be, void *p, size_t bytes);
void coh_dev_untrack(const coh_backend *be, void *p);
/* [p, p + bytes) of an allocation given back (ZeRO, pipeline stages): its memory returns to the
 * system where the device can (reads give zeros) and it no longer counts as held. The caller
 * keeps the state: one give-back per range, until coh_dev_retake. */
void coh_dev_release(const coh_backend *be, void *p, size_t bytes);
/* Zeroes [p, p + bytes) and returns what the device can of it, counting nothing (a range
 * already given back, or one the caller counts with coh_dev_release's twin below). */
void coh_dev_zero_release(const coh_backend *be, void *p, size_t bytes);
/* `bytes` given back before are about to be written: held again. */
void coh_dev_retake(const coh_backend *be, size_t bytes);
/* `bytes` given back by coh_dev_zero_release: no longer held. */
void coh_dev_forget(const coh_backend *be, size_t bytes);

#endif
