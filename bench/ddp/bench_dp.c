/* bench_dp.c: training throughput of one strategy (single, dp) on one GPT config, global
 * tokens/s of steady-state optimizer steps; prints one JSON line for bench/ddp/run.sh. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cohort/train.h"
#include "cohort/train_dp.h"

typedef struct opts {
    int L, C, NH, T, B, V, steps, threads, devices;
    const char *strategy;
} opts;

typedef struct tokens {
    int rows, T, V;
    unsigned s;
} tokens;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Random tokens: throughput does not depend on their values. */
static coh_status next_batch(void *ctx, int32_t *in, int32_t *tg)
{
    tokens *k = ctx;
    for (int i = 0; i < k->rows * k->T; i++) {
        k->s = k->s * 1103515245u + 12345u;
        in[i] = (int32_t)((k->s >> 8) % (unsigned)k->V);
        k->s = k->s * 1103515245u + 12345u;
        tg[i] = (int32_t)((k->s >> 8) % (unsigned)k->V);
    }
    return COH_OK;
}

static int parse(int argc, char **argv, opts *o)
{
    *o = (opts){6, 384, 6, 256, 8, 50257, 10, 0, 2, "single"};
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *k = argv[i], *v = argv[i + 1];
        int n = atoi(v);
        if (!strcmp(k, "--strategy")) o->strategy = v;
        else if (!strcmp(k, "--layers")) o->L = n;
        else if (!strcmp(k, "--dim")) o->C = n;
        else if (!strcmp(k, "--heads")) o->NH = n;
        else if (!strcmp(k, "--seq")) o->T = n;
        else if (!strcmp(k, "--batch")) o->B = n;
        else if (!strcmp(k, "--vocab")) o->V = n;
        else if (!strcmp(k, "--steps")) o->steps = n;
        else if (!strcmp(k, "--threads")) o->threads = n;
        else if (!strcmp(k, "--devices")) o->devices = n;
        else return fprintf(stderr, "bench_dp: unknown option '%s'\n", k), 0;
    }
    if (strcmp(o->strategy, "single") && strcmp(o->strategy, "dp"))
        return fprintf(stderr, "bench_dp: invalid strategy '%s': single or dp\n", o->strategy), 0;
    return 1;
}

int main(int argc, char **argv)
{
    opts o;
    if (!parse(argc, argv, &o))
        return 2;
    coh_blas_ensure_best_kernel();
    coh_set_threads(o.threads);
    int dp = !strcmp(o.strategy, "dp"), ndev = dp ? o.devices : 1;
    coh_trainer_config c;
    coh_trainer_config_defaults(&c);
    c.model = (coh_gpt_config){o.L, o.NH, o.C, o.V, o.T};
    c.batch = o.B;
    c.seq = o.T;
    c.steps = o.steps + 1;
    coh_trainer *t = NULL;
    coh_dp *d = NULL;
    if (dp ? coh_dp_create(&c, ndev, &d) : coh_trainer_create(&c, &t))
        return fprintf(stderr, "bench_dp: %s\n", coh_last_error()), 1;
    tokens k = {o.B * ndev, o.T, o.V, 1};
    double total = 0;
    coh_step_stats s = {0};
    for (int i = 0; i <= o.steps; i++) {
        double t0 = now();
        coh_status st = dp ? coh_dp_step(d, next_batch, &k, &s) : coh_trainer_step(t, next_batch, &k, &s);
        if (st)
            return fprintf(stderr, "bench_dp: %s\n", coh_last_error()), 1;
        if (i > 0) /* the first step warms caches and thread pools */
            total += now() - t0;
    }
    double tps = (double)o.B * ndev * o.T * o.steps / total;
    printf("{\"impl\": \"cohort\", \"strategy\": \"%s\", \"kernel\": \"%s\", \"devices\": %d, "
           "\"threads\": %d, \"tokens_per_s\": %.1f, \"step_s\": %.4f, \"loss\": %.4f}\n",
           o.strategy, coh_blas_kernel(), ndev, dp ? coh_dp_device_threads(d, 0) : coh_get_threads(),
           tps, total / o.steps, s.loss);
    coh_dp_destroy(d);
    coh_trainer_destroy(t);
    return 0;
}
