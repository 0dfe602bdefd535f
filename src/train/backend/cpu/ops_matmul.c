/* ops_matmul.c: linear layers ([in, out] weights) through CBLAS sgemm, and the pieces of the
 * LM head with its softmax cross-entropy, run a chunk of rows at a time (gpt_tp.c). A model in
 * bf16-mixed (its gpt_mm passed to each product) runs every product here on bf16 copies of its
 * operands,
 * rounded just before, with fp32 accumulation and fp32 results (gemm_bf16.c): the fp32 inputs,
 * weights, gradients and everything between the products stay as they are. */
#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cohort/log.h"
#include "train/backend/cpu/cpu_ops.h"
#include "train/backend/cpu/par.h"

/* The model's bf16 buffers, or NULL: its products run fp32. */
static const gpt_mm *mm_bf16(const gpt_mm *m) { return m && m->bf16 ? m : NULL; }

/* A bf16 product oneDNN refused after the model's creation checked it could run (out of
 * memory): said once, and the product is redone in fp32 so the step stays correct. */
static int bf16_failed(coh_status st)
{
    static int said;
    if (st && !__atomic_exchange_n(&said, 1, __ATOMIC_RELAXED))
        coh_warn("%s; the products that fail run fp32 instead", coh_last_error());
    return st != COH_OK;
}

/* sgemm with the OpenMP team splitting C into fixed slices (rows when M >= N, else columns),
 * each thread calling single-threaded OpenBLAS: one thread pool instead of two fighting over
 * the cores, and a partition (so a result) that depends only on the thread count. */
static void par_sgemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int M, int N, int K, const float *A,
                      int lda, const float *B, int ldb, float beta, float *C, int ldc)
{
    int split_rows = M >= N;
#pragma omp parallel
    {
        int k = 1, t = 0;
#ifdef _OPENMP
        k = omp_get_num_threads();
        t = omp_get_thread_num();
#endif
        long len = split_rows ? M : N, unit = 16;
        long blocks = (len + unit - 1) / unit;
        long b0 = blocks * t / k * unit, b1 = blocks * (t + 1) / k * unit;
        b1 = b1 < len ? b1 : len;
        if (b1 > b0 && split_rows)
            cblas_sgemm(CblasRowMajor, ta, tb, (int)(b1 - b0), N, K, 1.0f,
                        A + (ta == CblasNoTrans ? b0 * lda : b0), lda, B, ldb, beta,
                        C + b0 * ldc, ldc);
        else if (b1 > b0)
            cblas_sgemm(CblasRowMajor, ta, tb, M, (int)(b1 - b0), K, 1.0f, A, lda,
                        B + (tb == CblasNoTrans ? b0 : b0 * ldb), ldb, beta, C + b0, ldc);
    }
}

/* An operand kept as bf16 (n values) widened into a fresh fp32 buffer, for the fp32 products a
 * refused bf16 product falls back to; NULL when out of memory. */
static float *widened(const gpt_bf16 *x, size_t n)
{
    float *f = malloc((n ? n : 1) * sizeof *f);
    if (f) {
#pragma omp parallel for schedule(static)
        for (long i = 0; i < (long)n; i++)
            f[i] = gpt_bf16_to_float(x[i]);
    }
    return f;
}

/* out (N x OC) = beta out + A W without any buffer, A (N x IC) bf16: the last resort of a refused
 * product whose fp32 operand could not be had either. */
static void naive_bf16_a(float *out, const gpt_bf16 *A, const float *W, size_t N, int IC,
                         int OC, float beta)
{
#pragma omp parallel for schedule(static)
    for (long i = 0; i < (long)N; i++)
        for (int j = 0; j < OC; j++) {
            float acc = beta != 0.0f ? out[(size_t)i * OC + j] : 0.0f;
            for (int k = 0; k < IC; k++)
                acc += gpt_bf16_to_float(A[(size_t)i * IC + k]) * W[(size_t)k * OC + j];
            out[(size_t)i * OC + j] = acc;
        }
}

/* The forward product on inp (fp32, rounded here in bf16-mixed) or inp_h (bf16 already). */
static void matmul_forward(const gpt_mm *prec, float *out, const float *inp,
                           const gpt_bf16 *inp_h, const float *w,
                           const float *b, size_t N, int IC, int OC)
{
    if (b) {
#pragma omp parallel for schedule(static)
        for (long i = 0; i < (long)N; i++)
            memcpy(out + (size_t)i * OC, b, (size_t)OC * sizeof *b);
    }
    float beta = b ? 1.0f : 0.0f;
    const gpt_mm *mm = mm_bf16(prec);
    if (mm) {
        if (!inp_h)
            gpt_to_bf16(mm->a, inp, N * (size_t)IC);
        gpt_to_bf16(mm->w, w, (size_t)IC * OC);
        if (!bf16_failed(gpt_gemm_bf16(mm, 0, 0, (int)N, OC, IC, inp_h ? inp_h : mm->a, (size_t)IC,
                                       mm->w, (size_t)OC, beta, out, (size_t)OC)))
            return;
    }
    float *tmp = inp_h ? widened(inp_h, N * (size_t)IC) : NULL;
    if (inp_h && !tmp) {
        naive_bf16_a(out, inp_h, w, N, IC, OC, beta);
        return;
    }
    par_sgemm(CblasNoTrans, CblasNoTrans, (int)N, OC, IC, tmp ? tmp : inp, IC, w, OC, beta, out,
              OC);
    free(tmp);
}

void op_matmul_forward(const gpt_mm *mm, float *out, const float *inp, const float *w,
                       const float *b, size_t N, int IC, int OC)
{
    matmul_forward(mm, out, inp, NULL, w, b, N, IC, OC);
}

void op_matmul_forward_h(const gpt_mm *mm, float *out, const gpt_bf16 *inp, const float *w,
                         const float *b, size_t N, int IC, int OC)
{
    matmul_forward(mm, out, NULL, inp, w, b, N, IC, OC);
}

/* Column sums of dout (N rows of stride ld) into db (OC), each column by one thread in row
 * order; with out16, dout rounded to bf16 there (N x OC packed) in the same visit. */
static void bias_backward_to(float *db, const float *dout, size_t N, int OC, int ld,
                             gpt_bf16 *out16)
{
#pragma omp parallel
    {
        int c0, c1;
        par_range(OC, &c0, &c1);
        for (size_t i = 0; i < N; i++) {
            const float *d = dout + i * ld;
            for (int c = c0; c < c1; c++)
                db[c] += d[c];
            if (out16 && c1 > c0)
                gpt_to_bf16_serial(out16 + i * OC + c0, d + c0, (size_t)(c1 - c0));
        }
    }
}

static void bias_backward(float *db, const float *dout, size_t N, int OC, int ld)
{
    bias_backward_to(db, dout, N, OC, ld, NULL);
}

static void matmul_backward(const gpt_mm *prec, float *dinp, float *dw, float *db,
                            const float *dout,
                            const float *inp, const gpt_bf16 *inp_h, const float *w, size_t N,
                            int IC, int OC, int accumulate)
{
    const gpt_mm *mm = mm_bf16(prec);
    float beta = accumulate ? 1.0f : 0.0f;
    if (mm) { /* dout rounded as its column sums are taken (db), or on its own */
        if (db)
            bias_backward_to(db, dout, N, OC, OC, mm->b);
        else
            gpt_to_bf16(mm->b, dout, N * (size_t)OC);
        gpt_to_bf16(mm->w, w, (size_t)IC * OC);
        if (!inp_h)
            gpt_to_bf16(mm->a, inp, N * (size_t)IC);
    }
    const gpt_bf16 *a16 = inp_h ? inp_h : mm ? mm->a : NULL;
    /* dinp = dout @ w^T; dw += inp^T @ dout (a refused product leaves its output untouched) */
    if (!mm || bf16_failed(gpt_gemm_bf16(mm, 0, 1, (int)N, IC, OC, mm->b, (size_t)OC, mm->w,
                                         (size_t)OC, beta, dinp, (size_t)IC)))
        par_sgemm(CblasNoTrans, CblasTrans, (int)N, IC, OC, dout, OC, w, OC, beta, dinp, IC);
    if (!mm || bf16_failed(gpt_gemm_bf16(mm, 1, 0, IC, OC, (int)N, a16, (size_t)IC, mm->b,
                                         (size_t)OC, 1.0f, dw, (size_t)OC))) {
        float *tmp = inp_h ? widened(inp_h, N * (size_t)IC) : NULL;
        if (!inp_h || tmp) {
            par_sgemm(CblasTrans, CblasNoTrans, IC, OC, (int)N, tmp ? tmp : inp, IC, dout, OC,
                      1.0f, dw, OC);
        } else { /* dw += inp^T dout, element by element */
#pragma omp parallel for schedule(static)
            for (long k = 0; k < (long)IC; k++)
                for (size_t i = 0; i < N; i++)
                    for (int j = 0; j < OC; j++)
                        dw[(size_t)k * OC + j] += gpt_bf16_to_float(inp_h[i * IC + (size_t)k]) *
                                                  dout[i * OC + (size_t)j];
        }
        free(tmp);
    }
    if (db && !mm)
        bias_backward(db, dout, N, OC, OC);
}

void op_matmul_backward(const gpt_mm *mm, float *dinp, float *dw, float *db, const float *dout,
                        const float *inp, const float *w, size_t N, int IC, int OC,
                        int accumulate)
{
    matmul_backward(mm, dinp, dw, db, dout, inp, NULL, w, N, IC, OC, accumulate);
}

void op_matmul_backward_h(const gpt_mm *mm, float *dinp, float *dw, float *db,
                          const float *dout, const gpt_bf16 *inp, const float *w, size_t N,
                          int IC, int OC, int accumulate)
{
    matmul_backward(mm, dinp, dw, db, dout, NULL, inp, w, N, IC, OC, accumulate);
}

/* The key third of the bias gets its exact gradient, zero, instead of the sum of dk: adding b_k
 * to every key adds the same q_i . b_k to every score of query row i, and softmax is invariant
 * to a constant added to a row (the causal mask drops whole entries, so it stays a constant).
 * Summed in float, dk gives rounding noise (~1e-10) that AdamW's m / sqrt(v) would turn into
 * lr-sized steps, different for every summation order: every way of splitting a batch would then
 * end with different key biases. */
void op_qkv_bias_backward(float *db, const float *dqkv, size_t N, int C)
{
    bias_backward(db, dqkv, N, C, 3 * C);
    memset(db + C, 0, (size_t)C * sizeof *db);
    bias_backward(db + 2 * C, dqkv + 2 * C, N, C, 3 * C);
}

/* bf16-mixed: x's bf16 copy goes to mm->a, for the backward products of the same chunk; wte's
 * is mm->wte, made once per call of op_head_loss. */
static void op_head_chunk_logits(const gpt_mm *mm, float *logits, const float *x, const float *wte,
                                 size_t R, int C, int V)
{
    if (mm) {
        gpt_to_bf16(mm->a, x, R * (size_t)C);
        if (!bf16_failed(gpt_gemm_bf16(mm, 0, 1, (int)R, V, C, mm->a, (size_t)C, mm->wte, (size_t)C,
                                       0.0f, logits, (size_t)V)))
            return;
    }
    par_sgemm(CblasNoTrans, CblasTrans, (int)R, V, C, x, C, wte, C, 0.0f, logits, V);
}

GPT_CLONES static float row_max(const float *l, int V)
{
    float m = -INFINITY;
#pragma omp simd reduction(max : m)
    for (int j = 0; j < V; j++)
        m = l[j] > m ? l[j] : m;
    return m;
}

static void op_head_row_max(float *max, const float *logits, size_t R, int V)
{
#pragma omp parallel for schedule(static)
    for (long r = 0; r < (long)R; r++)
        max[r] = row_max(logits + (size_t)r * V, V);
}

GPT_CLONES static float row_sum(float *l, int V, float m, int keep)
{
    float s = 0.0f;
    if (!keep) {
#pragma omp simd reduction(+ : s)
        for (int j = 0; j < V; j++)
            s += gpt_expf(l[j] - m);
        return s;
    }
#pragma omp simd reduction(+ : s)
    for (int j = 0; j < V; j++) {
        l[j] = gpt_expf(l[j] - m);
        s += l[j];
    }
    return s;
}

/* row_sum keeping the exponentials, written to e instead of over the logits. */
GPT_CLONES static float row_exp_to(float *e, const float *l, int V, float m)
{
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int j = 0; j < V; j++) {
        e[j] = gpt_expf(l[j] - m);
        s += e[j];
    }
    return s;
}

static void op_head_row_sums(float *sum_tgt, float *logits, const float *max, const int32_t *target,
                      int v0, size_t R, int V, int keep)
{
#pragma omp parallel for schedule(static)
    for (long r = 0; r < (long)R; r++) {
        float *l = logits + (size_t)r * V;
        int t = target[r] - v0;
        sum_tgt[2 * r + 1] = t >= 0 && t < V ? l[t] : 0.0f;
        sum_tgt[2 * r] = row_sum(l, V, max[r], keep);
    }
}

/* dlogits of one row in place: softmax (the exponentials, over their sum) minus the target. */
static void row_grad(float *l, int V, float sum, int t, float dscale)
{
    float f = dscale / sum;
    for (int j = 0; j < V; j++)
        l[j] *= f;
    if (t >= 0 && t < V)
        l[t] -= dscale;
}

static void op_head_row_grad(float *logits, const float *sum_tgt, const int32_t *target, int v0,
                      size_t R, int V, float dscale)
{
#pragma omp parallel for schedule(static)
    for (long r = 0; r < (long)R; r++)
        row_grad(logits + (size_t)r * V, V, sum_tgt[2 * r], target[r] - v0, dscale);
}

/* dlogits of one row: the exponentials (already in e), their sum's share, minus the target,
 * rounded to bf16 into out. The arithmetic of row_grad then the rounding, so the same bits. */
GPT_CLONES static void row_grad_to_bf16(gpt_bf16 *out, float *e, int V, float sum, int t,
                                        float dscale)
{
    float f = dscale / sum;
#pragma omp simd
    for (int j = 0; j < V; j++)
        e[j] *= f;
    if (t >= 0 && t < V)
        e[t] -= dscale;
    gpt_to_bf16_serial(out, e, (size_t)V);
}

/* bf16-mixed with the whole vocabulary here and gradients wanted: each row's max, exponentials
 * and their sum, gradient and rounding to bf16 in one visit while the row is in cache, instead
 * of five passes over the chunk. With dl (row stride ldl) the bf16 rows go there and the
 * exponentials to a row of the thread's own (the logits are only read); without, everything
 * happens in place (gpt_to_bf16_rows_inplace's layout). The arithmetic is the separate passes'
 * own, so the bits are too. */
static void op_head_rows_fused_bf16(float *max, float *sum_tgt, float *logits, gpt_bf16 *dl,
                                    size_t ldl, const int32_t *target, int v0, size_t R, int V,
                                    float dscale)
{
#pragma omp parallel
    {
        float *e = dl ? gpt_bf16_alloc((size_t)V * sizeof *e) : NULL;
#pragma omp for schedule(static)
        for (long r = 0; r < (long)R; r++) {
            float *l = logits + (size_t)r * V;
            int t = target[r] - v0;
            max[r] = row_max(l, V);
            sum_tgt[2 * r + 1] = t >= 0 && t < V ? l[t] : 0.0f;
            if (e) {
                sum_tgt[2 * r] = row_exp_to(e, l, V, max[r]);
                row_grad_to_bf16(dl + (size_t)r * ldl, e, V, sum_tgt[2 * r], t, dscale);
            } else { /* in place (also when the row buffer could not be had) */
                sum_tgt[2 * r] = row_sum(l, V, max[r], 1);
                row_grad(l, V, sum_tgt[2 * r], t, dscale);
                gpt_to_bf16_row_inplace(l, (size_t)V);
                if (dl)
                    memcpy(dl + (size_t)r * ldl, l, (size_t)V * sizeof *dl);
            }
        }
        free(e);
    }
}

/* bf16 rows written over the first half of their floats (gpt_to_bf16_rows_inplace) widened back
 * to fp32 in place, over the OpenMP team. */
static void rows_widen_inplace(float *x, size_t rows, size_t cols, size_t ld)
{
#pragma omp parallel for schedule(static)
    for (long r = 0; r < (long)rows; r++)
        gpt_bf16_rows_widen_inplace(x + (size_t)r * ld, 1, cols, ld);
}

/* bf16-mixed: dlogits become bf16 in place (row stride 2V in bf16 units; already when rounded),
 * then dx = dlogits @ wte and dwte += dlogits^T @ x on the bf16 copies. */
static void op_head_chunk_backward(const gpt_mm *mm, float *dx, float *dwte, float *dlogits,
                                   const float *x, const float *wte, size_t R, int C, int V,
                                   int rounded)
{
    if (mm) {
        if (!rounded)
            gpt_to_bf16_rows_inplace(dlogits, R, (size_t)V, (size_t)V);
        const gpt_bf16 *dl = (const gpt_bf16 *)(void *)dlogits;
        size_t ld = 2 * (size_t)V;
        int dx_ok = !bf16_failed(gpt_gemm_bf16(mm, 0, 0, (int)R, C, V, dl, ld, mm->wte, (size_t)C,
                                               0.0f, dx, (size_t)C));
        int dw_ok = !bf16_failed(gpt_gemm_bf16(mm, 1, 0, V, C, (int)R, dl, ld, mm->a, (size_t)C,
                                               1.0f, dwte, (size_t)C));
        if (dx_ok && dw_ok)
            return;
        rows_widen_inplace(dlogits, R, (size_t)V, (size_t)V);
        if (!dx_ok)
            par_sgemm(CblasNoTrans, CblasNoTrans, (int)R, C, V, dlogits, V, wte, C, 0.0f, dx, C);
        if (!dw_ok)
            par_sgemm(CblasTrans, CblasNoTrans, V, C, (int)R, dlogits, V, x, C, 1.0f, dwte, C);
        return;
    }
    par_sgemm(CblasNoTrans, CblasNoTrans, (int)R, C, V, dlogits, V, wte, C, 0.0f, dx, C);
    par_sgemm(CblasTrans, CblasNoTrans, V, C, (int)R, dlogits, V, x, C, 1.0f, dwte, C);
}

/* The products a group's bf16 dL/dlogits (dl, n rows of V) ends in, dx = dl wte and
 * dwte += dl^T x, each once over the whole group; one that oneDNN refuses is redone in fp32
 * chunk by chunk, its rows widened into the logits chunk. */
static void op_head_group_backward(const gpt_mm *mm, float *dx, float *dwte, float *logits,
                                   size_t chunk, const float *x, const float *wte, size_t n,
                                   int C, int V)
{
    int dx_ok = !bf16_failed(gpt_gemm_bf16(mm, 0, 0, (int)n, C, V, mm->dl, (size_t)V, mm->wte,
                                           (size_t)C, 0.0f, dx, (size_t)C));
    int dw_ok = !bf16_failed(gpt_gemm_bf16(mm, 1, 0, V, C, (int)n, mm->dl, (size_t)V, mm->a,
                                           (size_t)C, 1.0f, dwte, (size_t)C));
    for (size_t r0 = 0; !(dx_ok && dw_ok) && r0 < n; r0 += chunk) {
        size_t R = n - r0 < chunk ? n - r0 : chunk;
#pragma omp parallel for schedule(static)
        for (long i = 0; i < (long)(R * (size_t)V); i++)
            logits[i] = gpt_bf16_to_float(mm->dl[r0 * (size_t)V + (size_t)i]);
        if (!dx_ok)
            par_sgemm(CblasNoTrans, CblasNoTrans, (int)R, C, V, logits, V, wte, C, 0.0f,
                      dx + r0 * C, C);
        if (!dw_ok)
            par_sgemm(CblasTrans, CblasNoTrans, V, C, (int)R, logits, V, x + r0 * C, C, 1.0f,
                      dwte, C);
    }
}

/* bf16-mixed, the whole vocabulary, gradients wanted, and room for the dL/dlogits of a group of
 * rows (gpt_mm.dl): per chunk the logits product and the fused row pass into dl, then per group
 * the two backward products over all its rows: the fp32 dL/dwte is read and written once a
 * group, not once a chunk, and each product runs on its largest shape. */
static void op_head_grouped(const gpt_mm *mm, float *losses, float *dlnf, float *dwte,
                            float *logits, size_t chunk, const float *lnf, const float *wte,
                            const int32_t *targets, size_t N, int C, int V, float dscale)
{
    float stats[3 * GPT_HEAD_CHUNK], *max = stats, *sum_tgt = stats + GPT_HEAD_CHUNK;
    for (size_t g0 = 0; g0 < N; g0 += mm->dl_rows) {
        size_t n = N - g0 < mm->dl_rows ? N - g0 : mm->dl_rows;
        gpt_to_bf16(mm->a, lnf + g0 * C, n * (size_t)C);
        for (size_t r0 = 0; r0 < n; r0 += chunk) {
            size_t R = n - r0 < chunk ? n - r0 : chunk;
            const gpt_bf16 *xa = mm->a + r0 * C;
            if (bf16_failed(gpt_gemm_bf16(mm, 0, 1, (int)R, V, C, xa, (size_t)C, mm->wte, (size_t)C,
                                          0.0f, logits, (size_t)V)))
                par_sgemm(CblasNoTrans, CblasTrans, (int)R, V, C, lnf + (g0 + r0) * C, C, wte,
                          C, 0.0f, logits, V);
            op_head_rows_fused_bf16(max, sum_tgt, logits, mm->dl + r0 * (size_t)V, (size_t)V,
                                    targets + g0 + r0, 0, R, V, dscale);
            for (size_t r = 0; r < R; r++)
                losses[g0 + r0 + r] = max[r] + logf(sum_tgt[2 * r]) - sum_tgt[2 * r + 1];
        }
        op_head_group_backward(mm, dlnf + g0 * C, dwte, logits, chunk, lnf + g0 * C, wte, n, C,
                               V);
    }
}

coh_status op_head_loss(const gpt_mm *prec, float *losses, float *dlnf, float *dwte,
                        float *logits, size_t chunk,
                        const float *lnf, const float *wte, const int32_t *targets, size_t N,
                        int C, int V, float grad_scale, const gpt_vocab_part *part)
{
    int v0 = part ? part->v0 : 0, vn = part ? part->vn : V;
    float dscale = dlnf ? grad_scale / (float)N : 0.0f;
    float stats[3 * GPT_HEAD_CHUNK], *max = stats, *sum_tgt = stats + GPT_HEAD_CHUNK;
    coh_status st = COH_OK;
    const gpt_mm *mm = mm_bf16(prec);
    if (mm && vn > 0)
        gpt_to_bf16(mm->wte, wte, (size_t)vn * C);
    int fused = mm && dlnf && vn > 0 && !(part && part->reduce);
    chunk = chunk < GPT_HEAD_CHUNK ? chunk : GPT_HEAD_CHUNK;
    if (fused && mm->dl && mm->dl_rows >= chunk) {
        op_head_grouped(mm, losses, dlnf, dwte, logits, chunk, lnf, wte, targets, N, C, vn,
                        dscale);
        return COH_OK;
    }
    for (size_t r0 = 0; !st && r0 < N; r0 += chunk) {
        size_t R = N - r0 < chunk ? N - r0 : chunk;
        const float *x = lnf + r0 * C;
        const int32_t *tg = targets + r0;
        /* the kept logits of these rows, or the chunk buffer */
        float *lg = part && part->kept ? part->kept + r0 * (size_t)vn : logits;
        if (fused) {
            op_head_chunk_logits(mm, logits, x, wte, R, C, vn);
            op_head_rows_fused_bf16(max, sum_tgt, logits, NULL, 0, tg, v0, R, vn, dscale);
            for (size_t r = 0; r < R; r++)
                losses[r0 + r] = max[r] + logf(sum_tgt[2 * r]) - sum_tgt[2 * r + 1];
            op_head_chunk_backward(mm, dlnf + r0 * C, dwte, logits, x, wte, R, C, vn, 1);
            continue;
        }
        if (vn > 0) {
            if (!(part && part->kept_ready))
                op_head_chunk_logits(mm, lg, x, wte, R, C, vn);
            else if (mm) /* the backward products read the rows' bf16 copy */
                gpt_to_bf16(mm->a, x, R * (size_t)C);
            op_head_row_max(max, lg, R, vn);
        } else {
            for (size_t r = 0; r < R; r++)
                max[r] = -INFINITY;
        }
        if (part && part->reduce && (st = part->reduce(part->ctx, max, R, 1)))
            break;
        if (vn > 0) {
            op_head_row_sums(sum_tgt, lg, max, tg, v0, R, vn, dscale != 0.0f);
        } else {
            memset(sum_tgt, 0, 2 * R * sizeof *sum_tgt);
        }
        if (part && part->reduce && (st = part->reduce(part->ctx, sum_tgt, 2 * R, 0)))
            break;
        for (size_t r = 0; r < R; r++)
            losses[r0 + r] = max[r] + logf(sum_tgt[2 * r]) - sum_tgt[2 * r + 1];
        if (!dlnf)
            continue;
        if (vn > 0) {
            op_head_row_grad(lg, sum_tgt, tg, v0, R, vn, dscale);
            op_head_chunk_backward(mm, dlnf + r0 * C, dwte, lg, x, wte, R, C, vn, 0);
        } else {
            memset(dlnf + r0 * C, 0, R * (size_t)C * sizeof *dlnf);
        }
    }
    return st;
}

void op_head_logits(const gpt_mm *mm, float *logits, const float *x, const float *wte, int C,
                    int V)
{
    (void)mm; /* one row: fp32 in every precision, as the model samples */
    cblas_sgemv(CblasRowMajor, CblasNoTrans, V, C, 1.0f, wte, C, x, 1, 0.0f, logits, 1);
}

void gpt_sgemm_nt(int M, int N, int K, const float *A, const float *B, float *C)
{
    par_sgemm(CblasNoTrans, CblasTrans, M, N, K, A, K, B, K, 0.0f, C, N);
}
