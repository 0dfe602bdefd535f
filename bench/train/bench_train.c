/* bench_train.c: measures the machine's sgemm peak (and with --precision bf16-mixed its bf16 GEMM
 * peak) and cohort's training throughput (tokens/s, MFU against the peak of the precision) on
 * one GPT config; prints one JSON line for bench/train/run.sh. */
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cohort/clock.h"
#include "cohort/train.h"

/* Best of several square sgemm runs, in FLOP/s. */
static double sgemm_peak(int n, int reps)
{
    float *a = malloc((size_t)n * n * 4), *b = malloc((size_t)n * n * 4),
          *c = malloc((size_t)n * n * 4);
    for (size_t i = 0; i < (size_t)n * n; i++)
        a[i] = (float)(i % 7) * 0.1f, b[i] = (float)(i % 5) * 0.1f;
    double best = 0;
    for (int r = 0; r < reps; r++) {
        double t = coh_now_s();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1, a, n, b, n, 0, c, n);
        t = coh_now_s() - t;
        double f = 2.0 * n * n * (double)n / t;
        best = f > best ? f : best;
    }
    free(a), free(b), free(c);
    return best;
}

int main(int argc, char **argv)
{
    int L = 6, C = 384, NH = 6, T = 256, B = 8, V = 50257, steps = 10, threads = 0, bf16 = 0;
    for (int i = 1; i + 1 < argc; i += 2) {
        int v = atoi(argv[i + 1]);
        if (!strcmp(argv[i], "--precision") && (!strcmp(argv[i + 1], "fp32") ||
                                                !strcmp(argv[i + 1], "bf16-mixed")))
            bf16 = !strcmp(argv[i + 1], "bf16-mixed");
        else if (!strcmp(argv[i], "--precision"))
            return fprintf(stderr, "unknown precision '%s': fp32 or bf16-mixed\n", argv[i + 1]), 2;
        else if (!strcmp(argv[i], "--layers")) L = v;
        else if (!strcmp(argv[i], "--dim")) C = v;
        else if (!strcmp(argv[i], "--heads")) NH = v;
        else if (!strcmp(argv[i], "--seq")) T = v;
        else if (!strcmp(argv[i], "--batch")) B = v;
        else if (!strcmp(argv[i], "--vocab")) V = v;
        else if (!strcmp(argv[i], "--steps")) steps = v;
        else if (!strcmp(argv[i], "--threads")) threads = v;
        else return fprintf(stderr, "unknown option '%s'\n", argv[i]), 2;
    }
    coh_engine_ensure_environment();
    coh_set_threads(threads);
    /* the peak is OpenBLAS's own threaded sgemm; the engine then splits matmuls itself */
    openblas_set_num_threads(coh_get_threads());
    double peak = sgemm_peak(2048, 5);
    coh_set_threads(threads);
    double bf16_peak = bf16 ? coh_measure_bf16_gemm_flops(2048) : 0.0;
    coh_gpt_config cfg = {L, NH, C, V, T, 0, 0};
    coh_gpt *g;
    coh_adamw *o;
    if (coh_gpt_create(&cfg, B, T, &g) || coh_adamw_create(&cfg, &o) ||
        (bf16 && coh_gpt_set_bf16_mixed(g, 1)))
        return fprintf(stderr, "%s\n", coh_last_error()), 1;
    coh_gpt_init_weights(g, 1);
    size_t n;
    float *p = coh_gpt_params(g, &n), *gr = coh_gpt_grads(g, NULL);
    int32_t *tok = malloc((size_t)B * (T + 1) * sizeof *tok), *in = malloc((size_t)B * T * 4),
            *tg = malloc((size_t)B * T * 4);
    unsigned s = 1;
    for (int i = 0; i < B * (T + 1); i++)
        s = s * 1103515245u + 12345u, tok[i] = (int32_t)((s >> 8) % (unsigned)V);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            in[b * T + t] = tok[b * (T + 1) + t], tg[b * T + t] = tok[b * (T + 1) + t + 1];
    coh_adamw_params ap = {3e-4f, 0.9f, 0.95f, 1e-8f, 0.1f};
    double total = 0;
    float loss = 0;
    for (int k = 0; k <= steps; k++) {
        double t = coh_now_s();
        coh_gpt_zero_grad(g);
        coh_gpt_step(g, in, tg, B, T, 1.0f, &loss);
        coh_clip_grad_norm(gr, n, 1.0);
        coh_adamw_update(o, p, gr, &ap, k + 1);
        if (k > 0) /* the first step warms caches and thread pools */
            total += coh_now_s() - t;
    }
    double tps = (double)B * T * steps / total;
    double mfu = tps * coh_gpt_flops_per_token(&cfg, T) / (bf16 ? bf16_peak : peak);
    printf("{\"impl\": \"cohort\", \"precision\": \"%s\", \"kernel\": \"%s\", \"threads\": %d, "
           "\"sgemm_gflops\": %.1f, \"bf16_gemm_gflops\": %.1f, \"tokens_per_s\": %.1f, "
           "\"mfu\": %.4f, \"step_s\": %.4f, \"loss\": %.4f, \"flops_per_token\": %.0f, "
           "\"openmp_spin\": \"%s\"}\n",
           bf16 ? "bf16-mixed" : "fp32", coh_blas_kernel(), coh_get_threads(), peak * 1e-9,
           bf16_peak * 1e-9, tps, mfu, total / steps, loss, coh_gpt_flops_per_token(&cfg, T),
           coh_openmp_spin_text());
    free(tok), free(in), free(tg);
    coh_adamw_destroy(o);
    coh_gpt_destroy(g);
    return 0;
}
