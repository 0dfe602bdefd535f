/* test_plan_par_memory.c: the per-rank prediction of the parallel trainer (the one behind
 * `cohort estimate --engine cohort`): shards over the ranks add up to the whole model, each
 * stage holds what the ZeRO paper says up to the last rank's tails, the transient terms appear
 * only where the strategy has them, and bad requests are refused. Measured against real runs by
 * test_plan_engine_parallel.sh. */
#include <string.h>

#include "check.h"
#include "cohort/parallel.h"

static const coh_gpt_config model = {4, 4, 256, 512, 64, 0, 0}; /* layers, heads, dim, vocab, seq */

static coh_par_config config(coh_strategy s)
{
    coh_par_config c;
    memset(&c, 0, sizeof c);
    c.train.model = model;
    coh_parallel_config_init(&c.par);
    c.par.micro_batch = 2;
    c.par.seq = 64;
    c.par.strategy = s;
    return c;
}

/* Over all ranks the sharded parts add up to exactly one model's worth. */
static void test_shards_add_up(void)
{
    coh_set_threads(1);
    size_t P = coh_gpt_param_count(&model);
    const coh_strategy st[3] = {COH_STRATEGY_ZERO1, COH_STRATEGY_ZERO2, COH_STRATEGY_ZERO3};
    for (int dp = 2; dp <= 5; dp++)
        for (int i = 0; i < 3; i++) {
            coh_par_config c = config(st[i]);
            uint64_t optim = 0, grads = 0, params = 0;
            for (int r = 0; r < dp; r++) {
                coh_par_memory m;
                CHECK_OK(coh_par_memory_estimate(&c, dp, r, &m));
                optim += m.state.optim;
                grads += m.state.grads;
                params += m.state.params;
            }
            CHECK_INT(optim, 8 * P * (uint64_t)1);
            CHECK_INT(grads, (i >= 1 ? 4 * P : 4 * P * (uint64_t)dp));
            CHECK_INT(params, (i == 2 ? 4 * P : 4 * P * (uint64_t)dp));
        }
}

static void test_stages(void)
{
    size_t P = coh_gpt_param_count(&model);
    coh_par_memory one, ddp, z1, z2, z3;
    coh_par_config c = config(COH_STRATEGY_SINGLE);
    CHECK_OK(coh_par_memory_estimate(&c, 1, 0, &one));
    c.par.strategy = COH_STRATEGY_DDP;
    CHECK_OK(coh_par_memory_estimate(&c, 4, 0, &ddp));
    c.par.strategy = COH_STRATEGY_ZERO1;
    CHECK_OK(coh_par_memory_estimate(&c, 4, 0, &z1));
    c.par.strategy = COH_STRATEGY_ZERO2;
    CHECK_OK(coh_par_memory_estimate(&c, 4, 0, &z2));
    c.par.strategy = COH_STRATEGY_ZERO3;
    CHECK_OK(coh_par_memory_estimate(&c, 4, 0, &z3));
    CHECK_INT(one.state.params + one.state.grads + one.state.optim, 16 * P);
    CHECK_INT(one.comm + one.gathered + one.grad_buckets, 0);
    CHECK_INT(ddp.state.optim, 8 * P);
    CHECK_NEAR(z1.state.optim, 8.0 * P / 4, 0.001);
    CHECK_NEAR(z2.state.grads, 4.0 * P / 4, 0.001);
    CHECK_NEAR(z3.state.params, 4.0 * P / 4, 0.001);
    /* in-place all-reduce maps its own block of each of 3 peers (one bucket: 25 MiB > 13 MB) */
    CHECK(ddp.comm > 3 * 4 * (P / 4) && ddp.comm < 3 * 4 * (P / 4 + 64) + (4 << 20));
    CHECK_INT(z2.gathered, 0);
    CHECK(z3.gathered > 0 && z2.grad_buckets > 0 && z3.grad_buckets > 0);
    CHECK(z1.grad_buckets == 0 && z2.comm < ddp.comm);
    CHECK_INT(one.engine, ddp.engine);
    CHECK(one.total < ddp.total && z1.total < ddp.total && z3.total < z2.total);
    /* accumulation adds the ZeRO-2/3 accumulator of the own chunks */
    c.par.microbatches = 2;
    coh_par_memory z3a;
    CHECK_OK(coh_par_memory_estimate(&c, 4, 0, &z3a));
    CHECK_INT(z3a.state.grads, 2 * z3.state.grads);
}

static void test_refused(void)
{
    coh_par_memory m;
    coh_par_config c = config(COH_STRATEGY_DDP);
    CHECK_FAILS(coh_par_memory_estimate(&c, 2, 2, &m), COH_ERR_INVALID, "invalid rank '2'");
    CHECK_FAILS(coh_par_memory_estimate(&c, 0, 0, &m), COH_ERR_INVALID, "size '0'");
    c.par.strategy = COH_STRATEGY_DP;
    CHECK_FAILS(coh_par_memory_estimate(&c, 2, 0, &m), COH_ERR_UNSUPPORTED, "strategy 'dp'");
    c = config(COH_STRATEGY_ZERO3);
    c.par.seq = 65;
    CHECK_FAILS(coh_par_memory_estimate(&c, 2, 0, &m), COH_ERR_INVALID, "sequence length '65'");
}

int main(void)
{
    RUN(test_shards_add_up);
    RUN(test_stages);
    RUN(test_refused);
    return CHECK_REPORT();
}
