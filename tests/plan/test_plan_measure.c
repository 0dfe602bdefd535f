/* test_plan_measure.c: the planner's measured costs (coh_hw_measure_engine): the engine runs at
 * a configuration's shapes (tp shards without their group, ZeRO-3's page movement, several ranks
 * at once), each shape once (a second pricing reuses it exactly), again once per round of
 * measuring again (each time only ever falling), a search's leaders measured again and its list
 * in the order of their final prices, a tp shard's group meeting at each of its collectives, the
 * process's thread count left as it was, a model the engine cannot run priced from the rates as
 * before, and GPU hardware refused by name. No timing is asserted: only what the measurement
 * must do. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "cohort/planner.h"
#include "cohort/train.h"
#include "plan/planner_int.h"
#include "plan_test_calibration.h"
#include "train/model/gpt_int.h"

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

/* Every chunk of c priced from hw's measurement: blocks x the measured block, plus the measured
 * embeddings on the first and head on the last (no tp all-reduce, no ZeRO-3 stall in c). */
static void check_measured_chunks(const coh_model_desc *m, const coh_parallel_config *c,
                                  const coh_hw *hw)
{
    plan_dev d;
    const plan_engine_cost *e = NULL;
    plan_chunk ch[8];
    CHECK_OK(plan_dev_for(hw, c, &d));
    CHECK_OK(plan_engine_lookup(&d, m, (int)c->micro_batch, 32, c->tp, 0, &e));
    CHECK(e != NULL && c->pp <= 8);
    if (!e || c->pp > 8 || plan_chunk_costs(m, c, &d, 32, ch))
        return;
    double fwd = 0, bwd = 0, want_f = (double)m->layers * e->block_fwd_s + e->emb_fwd_s +
                                      e->head_fwd_s;
    double want_b = (double)m->layers * e->block_bwd_s + e->emb_bwd_s + e->head_bwd_s;
    for (int k = 0; k < c->pp; k++) {
        fwd += ch[k].fwd;
        bwd += ch[k].bwd;
    }
    CHECK_NEAR(fwd, want_f, 1e-9);
    CHECK_NEAR(bwd, want_b, 1e-9);
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
        /* the measurement is what prices it: each chunk's compute is the measured block,
         * embeddings and head, summed as the trainer's chunk cost sums them */
        CHECK_OK(coh_plan_config(&m, &cs[i], &rates, &r));
        if (cs[i].tp == 1 && cs[i].strategy != COH_STRATEGY_ZERO3)
            check_measured_chunks(&m, &cs[i], &hw);
        printf("dp %d tp %d pp %d %s: measured %.3f ms, from the rates %.3f ms\n", cs[i].dp,
               cs[i].tp, cs[i].pp, coh_strategy_name(cs[i].strategy), a.step_s * 1e3,
               r.step_s * 1e3);
    }
    CHECK_INT(coh_get_threads(), before);
    /* sequence parallelism is priced on the measured shard (its rows are not split there) */
    coh_parallel_config sp = config(1, 2, 1, COH_STRATEGY_SINGLE, 4, 1);
    sp.sequence_parallel = 1;
    coh_plan_result r, whole;
    CHECK_OK(coh_plan_config(&m, &sp, &hw, &r));
    sp.sequence_parallel = 0;
    CHECK_OK(coh_plan_config(&m, &sp, &hw, &whole));
    /* the same measured shard, and sp's reduce-scatter + all-gather move what the all-reduce
     * moved: the same step */
    CHECK_NEAR(r.step_s, whole.step_s, 1e-12);
    coh_hw_free_measurements(&hw);
    CHECK(hw.engine == NULL);
    coh_hw_free_measurements(&hw); /* twice is harmless */
}

/* A 2-block model and this machine's calibration with the engine measured; 0 when not loaded. */
static int measuring(coh_model_desc *m, coh_hw *hw)
{
    CHECK_OK(coh_model_gpt(2, 64, 4, 128, 32, 0, m));
    if (!load_cal(hw))
        return 0;
    hw->cores = 2;
    CHECK_OK(coh_hw_measure_engine(hw));
    return 1;
}

/* A round of measuring again measures a shape once more, within the round only once, and each
 * time is the median of its measurements. */
static void test_rounds_measure_again(void)
{
    coh_model_desc m;
    coh_hw hw;
    if (!measuring(&m, &hw))
        return;
    plan_dev d = {.hw = &hw, .threads = 1, .ranks = 2};
    const plan_engine_cost *a, *b;
    CHECK_OK(plan_engine_lookup(&d, &m, 2, 32, 1, 0, &a));
    CHECK(a != NULL);
    if (!a)
        return;
    plan_engine_cost first = *a;
    CHECK_INT(first.round, 0);
    CHECK_INT(first.nsamples, 1);
    for (int j = 0; j < 7; j++)
        CHECK(first.timed[j] == first.samples[j][0]);
    CHECK_OK(plan_engine_lookup(&d, &m, 2, 32, 1, 0, &b)); /* no round: not measured again */
    CHECK(b == a && memcmp(b, &first, sizeof first) == 0);
    for (int round = 1; round <= 2; round++) {
        plan_engine_next_round(&hw);
        plan_engine_cost before = *a;
        CHECK_OK(plan_engine_lookup(&d, &m, 2, 32, 1, 0, &b));
        CHECK(b == a);
        CHECK_INT(b->round, round);
        CHECK_INT(b->nsamples, round + 1);
        for (int j = 0; j < 7; j++) {
            CHECK(b->samples[j][round] > 0);
            CHECK(!memcmp(b->samples[j], before.samples[j], sizeof(double) * (size_t)round));
            double x[3];
            memcpy(x, b->samples[j], sizeof(double) * (size_t)(round + 1));
            if (round == 1) { /* two: their mean */
                CHECK_NEAR(b->timed[j], (x[0] + x[1]) / 2, 1e-15);
            } else { /* three: the middle one */
                double lo = fmin(x[0], fmin(x[1], x[2])), hi = fmax(x[0], fmax(x[1], x[2]));
                CHECK_NEAR(b->timed[j], x[0] + x[1] + x[2] - lo - hi, 1e-15);
            }
        }
        plan_engine_cost after = *b; /* within the round, once */
        CHECK_OK(plan_engine_lookup(&d, &m, 2, 32, 1, 0, &b));
        CHECK(memcmp(b, &after, sizeof after) == 0);
    }
    plan_engine_stop_rounds(&hw);
    plan_engine_cost done = *a;
    CHECK_OK(plan_engine_lookup(&d, &m, 2, 32, 1, 0, &b));
    CHECK(memcmp(b, &done, sizeof done) == 0);
    coh_hw_free_measurements(&hw);
}

/* A search with measured costs returns its list in the order of the prices it reports, and each
 * reported price is the one the refined measurements give now. */
static void test_search_ranks_refined_prices(void)
{
    coh_model_desc m;
    coh_hw hw;
    if (!measuring(&m, &hw))
        return;
    coh_plan_request req;
    memset(&req, 0, sizeof req);
    req.devices = 2;
    req.global_batch = 8;
    req.seq = 32;
    req.runnable_only = 1;
    coh_plan_result top[3];
    int n = 0;
    CHECK_OK(coh_plan_search(&m, &req, &hw, top, 3, &n, NULL));
    CHECK(n == 3);
    for (int i = 0; i < n; i++) {
        coh_plan_result again;
        CHECK_OK(coh_plan_config(&m, &top[i].config, &hw, &again));
        CHECK(again.step_s == top[i].step_s);
        if (i)
            CHECK(top[i - 1].step_s <= top[i].step_s);
    }
    coh_hw_free_measurements(&hw);
}

static coh_status count_meeting(void *ctx)
{
    (*(int *)ctx)++;
    return COH_OK;
}

static coh_status refuse_meeting(void *ctx)
{
    (void)ctx;
    return coh_errf(COH_ERR_PEER_LOST, "the group stopped");
}

/* A shard timed without its group meets it (the hook) at every collective the shard would
 * make: the vocabulary-parallel embedding's sum, 2 all-reduces per block forward and 2 per
 * backward, 2 of the head's statistics per row chunk, and the head input's gradient; and the
 * hook's error ends the step. */
static void test_tp_shard_meets_its_group(void)
{
    coh_gpt_config g = {2, 4, 64, 128, 32, 2, 0};
    coh_gpt *model = NULL;
    CHECK_OK(coh_gpt_create(&g, 2, 32, &model));
    if (!model)
        return;
    int met = 0;
    CHECK_OK(gpt_tp_skip_collectives(model, count_meeting, &met));
    coh_gpt_init_weights(model, 7);
    int32_t tok[2 * 32 * 2];
    for (int i = 0; i < 2 * 32 * 2; i++)
        tok[i] = (i * 37) % 128;
    float loss = 0;
    CHECK_OK(coh_gpt_step(model, tok, tok + 64, 2, 32, 1.0f, &loss));
    CHECK(isfinite(loss));
    size_t rows = model->chunk_rows < GPT_HEAD_CHUNK ? model->chunk_rows : GPT_HEAD_CHUNK;
    int chunks = (int)((64 + rows - 1) / rows);
    CHECK_INT(met, 1 + 2 * 2 * 2 + 2 * chunks + 1);
    printf("a tp 2 shard of 2 blocks met its group %d times in a step\n", met);
    int again = met;
    met = 0;
    CHECK_OK(coh_gpt_step(model, tok, tok + 64, 2, 32, 1.0f, &loss));
    CHECK_INT(met, again);
    CHECK_OK(gpt_tp_skip_collectives(model, refuse_meeting, NULL));
    CHECK_FAILS(coh_gpt_step(model, tok, tok + 64, 2, 32, 1.0f, &loss), COH_ERR_PEER_LOST,
                "group stopped");
    coh_gpt_destroy(model);
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
    RUN(test_rounds_measure_again);
    RUN(test_search_ranks_refined_prices);
    RUN(test_tp_shard_meets_its_group);
    RUN(test_unmeasurable_model_uses_rates);
    RUN(test_gpu_refused);
    return CHECK_REPORT();
}
