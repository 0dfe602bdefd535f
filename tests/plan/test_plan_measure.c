/* test_plan_measure.c: the planner's measured costs (coh_hw_measure_engine): the engine runs at
 * a configuration's shapes (tp shards without their group, ZeRO-3's page movement, several ranks
 * at once), each shape once (a second pricing reuses it exactly), the process's thread count is
 * left as it was, a model the engine cannot run is priced from the rates as before, and GPU
 * hardware is refused by name. No timing is asserted: only what the measurement must do. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "cohort/planner.h"
#include "cohort/train.h"

static int load_cal(coh_hw *hw)
{
    char path[512];
    const char *src = getenv("COHORT_SOURCE_DIR");
    snprintf(path, sizeof path, "%s/tests/fuzz/corpus/calibration/measured.json",
             src ? src : "..");
    coh_status st = coh_calibration_load(path, hw);
    CHECK_OK(st);
    return st == COH_OK;
}

static coh_parallel_config config(int dp, int tp, int pp, coh_strategy s, int mb, int m)
{
    coh_parallel_config c;
    coh_parallel_config_init(&c);
    c.dp = dp;
    c.tp = tp;
    c.pp = pp;
    c.strategy = s;
    c.micro_batch = mb;
    c.microbatches = m;
    c.seq = 32;
    return c;
}

static void test_measured_shapes(void)
{
    coh_model_desc m;
    CHECK_OK(coh_model_gpt(2, 64, 4, 128, 32, 0, &m));
    coh_hw rates, hw;
    if (!load_cal(&rates))
        return;
    hw = rates;
    hw.cores = 2;
    CHECK_OK(coh_hw_measure_engine(&hw));
    CHECK(hw.engine != NULL);
    coh_set_threads(1);
    int before = coh_get_threads();
    const coh_parallel_config cs[] = {
        config(1, 1, 1, COH_STRATEGY_SINGLE, 4, 1), config(2, 1, 1, COH_STRATEGY_DDP, 2, 1),
        config(2, 1, 1, COH_STRATEGY_ZERO3, 2, 1), config(1, 2, 1, COH_STRATEGY_SINGLE, 4, 1),
        config(1, 1, 2, COH_STRATEGY_SINGLE, 1, 4), config(4, 1, 1, COH_STRATEGY_DDP, 1, 1),
    };
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
        coh_plan_result a, b, r;
        coh_status st = coh_plan_config(&m, &cs[i], &hw, &a);
        CHECK_OK(st);
        if (st)
            continue;
        CHECK(isfinite(a.step_s) && a.step_s > 0 && a.compute_s > 0);
        /* the shape is measured once: pricing it again gives the same figure to the bit */
        CHECK_OK(coh_plan_config(&m, &cs[i], &hw, &b));
        CHECK(a.step_s == b.step_s);
        /* the measurement is what prices it: the rates alone give another figure */
        CHECK_OK(coh_plan_config(&m, &cs[i], &rates, &r));
        CHECK(r.step_s != a.step_s);
        printf("dp %d tp %d pp %d %s: measured %.3f ms, from the rates %.3f ms\n", cs[i].dp,
               cs[i].tp, cs[i].pp, coh_strategy_name(cs[i].strategy), a.step_s * 1e3,
               r.step_s * 1e3);
    }
    CHECK_INT(coh_get_threads(), before);
    /* sequence parallelism is priced on the measured shard (its rows are not split there) */
    coh_parallel_config sp = config(1, 2, 1, COH_STRATEGY_SINGLE, 4, 1);
    sp.sequence_parallel = 1;
    coh_plan_result r;
    CHECK_OK(coh_plan_config(&m, &sp, &hw, &r));
    coh_hw_free_measurements(&hw);
    CHECK(hw.engine == NULL);
    coh_hw_free_measurements(&hw); /* twice is harmless */
}

static void test_unmeasurable_model_uses_rates(void)
{
    coh_model_desc m; /* an MLP of 3h: not the engine's block */
    CHECK_OK(coh_model_gpt(2, 64, 4, 128, 32, 192, &m));
    coh_hw rates, hw;
    if (!load_cal(&rates))
        return;
    hw = rates;
    CHECK_OK(coh_hw_measure_engine(&hw));
    coh_parallel_config c = config(1, 1, 1, COH_STRATEGY_SINGLE, 4, 1);
    coh_plan_result a, b;
    CHECK_OK(coh_plan_config(&m, &c, &hw, &a));
    CHECK_OK(coh_plan_config(&m, &c, &rates, &b));
    CHECK(a.step_s == b.step_s);
    coh_hw_free_measurements(&hw);
}

static void test_gpu_refused(void)
{
    coh_hw hw;
    CHECK_OK(coh_hw_preset("a100-80gb", &hw));
    CHECK_FAILS(coh_hw_measure_engine(&hw), COH_ERR_INVALID, "a100-80gb");
    CHECK(hw.engine == NULL);
}

int main(void)
{
    RUN(test_measured_shapes);
    RUN(test_unmeasurable_model_uses_rates);
    RUN(test_gpu_refused);
    return CHECK_REPORT();
}
