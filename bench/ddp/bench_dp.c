/* bench_dp.c: training throughput of one strategy (single, dp, ddp, zero1..3: the parallel
 * trainer `cohort train` uses) on one GPT config, global tokens/s of steady-state optimizer
 * steps; rank 0 prints one JSON line for bench/ddp/run.sh. Multi-process strategies run under
 * `cohort run`. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cohort/clock.h"
#include "cohort/comm.h"
#include "cohort/parallel.h"
#include "cohort/train.h"

typedef struct opts {
    int L, C, NH, T, B, V, steps, threads, devices;
    const char *strategy;
    coh_precision precision;
    int grad_bf16;
} opts;

typedef struct tokens {
    int rows, T, V;
    unsigned s;
} tokens;

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
    *o = (opts){6, 384, 6, 256, 8, 50257, 10, 0, 2, "single", COH_PREC_FP32, 0};
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *k = argv[i], *v = argv[i + 1];
        int n = atoi(v);
        if (!strcmp(k, "--strategy")) o->strategy = v;
        else if (!strcmp(k, "--precision")) {
            if (coh_precision_parse(v, &o->precision))
                return fprintf(stderr, "bench_dp: %s\n", coh_last_error()), 0;
        } else if (!strcmp(k, "--grad-reduce-dtype")) {
            if (strcmp(v, "bf16") && strcmp(v, "fp32"))
                return fprintf(stderr, "bench_dp: invalid --grad-reduce-dtype '%s'\n", v), 0;
            o->grad_bf16 = !strcmp(v, "bf16");
        }
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
    return 1;
}

typedef struct bench {
    coh_comm *world;
    coh_mesh *mesh;
    coh_par_trainer *t;
} bench;

static coh_status setup(const opts *o, coh_strategy s, int ndev, bench *b)
{
    coh_par_config pc = {0};
    coh_parallel_config_init(&pc.par);
    pc.par.strategy = s;
    pc.par.dp = ndev;
    coh_trainer_config_defaults(&pc.train);
    pc.train.model = (coh_gpt_config){o->L, o->NH, o->C, o->V, o->T, 0, 0};
    pc.par.micro_batch = o->B;
    pc.par.precision = o->precision;
    pc.par.grad_reduce_bf16 = o->grad_bf16;
    pc.par.seq = o->T;
    pc.train.steps = o->steps + 1;
    coh_status st = coh_strategy_is_multiprocess(s) ? coh_comm_create(COH_COMM_AUTO, &b->world)
                                                    : coh_comm_create_self(&b->world);
    if (!st && s != COH_STRATEGY_DP)
        pc.par.dp = coh_comm_size(b->world);
    if (!st)
        st = coh_mesh_create(b->world, coh_comm_size(b->world), 1, 1, &b->mesh);
    if (!st)
        st = coh_par_trainer_create(&pc, b->mesh, &b->t);
    return st;
}

int main(int argc, char **argv)
{
    opts o;
    coh_strategy s;
    if (!parse(argc, argv, &o))
        return 2;
    if (coh_strategy_parse(o.strategy, &s))
        return fprintf(stderr, "bench_dp: %s\n", coh_last_error()), 2;
    coh_engine_ensure_environment();
    coh_set_threads(o.threads);
    int ndev = s == COH_STRATEGY_DP ? o.devices : 1;
    bench b = {0};
    if (setup(&o, s, ndev, &b))
        return fprintf(stderr, "bench_dp: %s\n", coh_last_error()), 1;
    int ranks = coh_comm_size(b.world);
    tokens k = {o.B * ndev, o.T, o.V, 1u + 7919u * (unsigned)coh_comm_rank(b.world)};
    double total = 0, first = 0;
    coh_step_stats st = {0};
    for (int i = 0; i <= o.steps; i++) {
        double t0 = coh_now_s();
        if (coh_par_trainer_step(b.t, next_batch, &k, &st))
            return fprintf(stderr, "bench_dp: %s\n", coh_last_error()), 1;
        if (i > 0) /* the first step warms caches and thread pools */
            total += coh_now_s() - t0;
        else
            first = st.loss;
    }
    double tps = (double)o.B * ndev * ranks * o.T * o.steps / total;
    if (coh_comm_rank(b.world) == 0)
        printf("{\"impl\": \"cohort\", \"strategy\": \"%s\", \"precision\": \"%s\", "
               "\"grad_reduce_dtype\": \"%s\", \"kernel\": \"%s\", \"ranks\": %d, "
               "\"devices\": %d, \"threads\": %d, \"tokens_per_s\": %.1f, \"step_s\": %.4f, "
               "\"first_loss\": %.4f, \"loss\": %.4f}\n", o.strategy,
               coh_precision_name(o.precision), o.grad_bf16 ? "bf16" : "fp32", coh_blas_kernel(),
               ranks, ndev, ndev > 1 ? 1 : coh_get_threads(), tps, total / o.steps, first, st.loss);
    coh_par_trainer_destroy(b.t);
    coh_mesh_destroy(b.mesh);
    coh_comm_destroy(b.world);
    return 0;
}
