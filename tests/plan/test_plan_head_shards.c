/* test_plan_head_shards.c: the planner prices the pipeline split the trainer runs, LM head shards
 * included: its chunks are the trainer's split (par_pipe_split_chain, or --stage-layers naming
 * shards), every shard is priced once, splitting the head moves its work between stages without
 * adding any (but the recomputed logits), a stage keeps one copy of the tied embedding however
 * many head units it holds, the shards' stages join the tied embedding's sum, the split the
 * trainer takes predicts a shorter step than the head whole, and shards are refused by name
 * where the trainer refuses them or cannot run them. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "cohort/planner.h"
#include "cohort/train.h"
#include "plan/planner_int.h"
#include "plan_test_calibration.h"
#include "train/parallel/par_trainer_int.h"

enum { L = 4, DIM = 128, HEADS = 4, VOCAB = 50257, SEQ = 128 };

/* pp 2, interleaved v 2, m 2 x micro-batch 2: a GPT-2 vocabulary's head outweighs a block */
static coh_parallel_config interleaved(const char *stage_layers, coh_recompute recompute)
{
    coh_parallel_config c;
    coh_parallel_config_init(&c);
    c.pp = 2;
    c.schedule = COH_SCHED_INTERLEAVED;
    c.virtual_stages = 2;
    c.micro_batch = 2;
    c.microbatches = 2;
    c.seq = SEQ;
    c.recompute = recompute;
    c.stage_layers = stage_layers;
    return c;
}

static int chunks_of(const coh_model_desc *m, const coh_parallel_config *c, const coh_hw *hw,
                     plan_chunk *ch)
{
    plan_dev d;
    coh_status st = plan_dev_for(hw, c, &d);
    CHECK_OK(st);
    if (!st)
        st = plan_chunk_costs(m, c, &d, SEQ, ch);
    CHECK_OK(st);
    return st == COH_OK;
}

static double sum_compute(const plan_chunk *ch, int u)
{
    double t = 0;
    for (int k = 0; k < u; k++)
        t += ch[k].fwd + ch[k].bwd;
    return t;
}

static coh_model_desc model;
static coh_hw rates;

static void test_trainer_split(void)
{
    const coh_model_desc *m = &model;
    const coh_hw *hw = &rates;
    /* what the trainer runs: each stage's chunks and head shards from its runtime layout
     * (coh_par_pipe_stage, which pipe_exec.c executes), not from the split function the planner
     * calls */
    coh_parallel_config c = interleaved(NULL, COH_RECOMPUTE_NONE);
    coh_par_config pc;
    memset(&pc, 0, sizeof pc);
    coh_trainer_config_defaults(&pc.train);
    pc.train.model = (coh_gpt_config){L, HEADS, DIM, VOCAB, SEQ, 0, 0};
    pc.par = c;
    coh_par_config_apply(&pc);
    coh_pipe_stage lay[2];
    for (int s = 0; s < 2; s++)
        CHECK_OK(coh_par_pipe_stage(&pc, s, &lay[s]));
    int shards = lay[0].head_shards;
    printf("trainer's layout: stage 0 %d-%d, %d-%d; stage 1 %d-%d, %d-%d; %d head shards\n",
           lay[0].lo[0], lay[0].hi[0], lay[0].lo[1], lay[0].hi[1], lay[1].lo[0], lay[1].hi[0],
           lay[1].lo[1], lay[1].hi[1], shards);
    CHECK(shards > 1); /* the premise: the trainer shards this head */
    CHECK_INT(lay[1].head_shards, shards);
    plan_chunk ch[4];
    if (!chunks_of(m, &c, hw, ch))
        return;
    int next = 0, holders = 0;
    for (int k = 0; k < 4; k++) {
        const coh_pipe_stage *st = &lay[k % 2];
        int j = k / 2; /* virtual stage k is chunk k / p of stage k mod p */
        CHECK_INT(ch[k].lo, st->lo[j]);
        CHECK_INT(ch[k].hi, st->hi[j]);
        CHECK_INT(ch[k].head_lo, st->head_lo[j]);
        CHECK_INT(ch[k].head_hi, st->head_hi[j]);
        if (ch[k].head_hi > ch[k].head_lo) { /* the shards in order, each once */
            CHECK_INT(ch[k].head_lo, next);
            next = ch[k].head_hi;
            holders++;
            CHECK(ch[k].last);
        } else {
            CHECK(!ch[k].last);
        }
    }
    CHECK_INT(next, shards);
    CHECK(holders >= 2);

    /* the trainer's split spelt out: priced as chosen */
    char named[96];
    int n = 0;
    for (int k = 0; k < 4; k++) {
        n += snprintf(named + n, sizeof named - (size_t)n, "%s", k ? "," : "");
        if (ch[k].hi > ch[k].lo)
            n += snprintf(named + n, sizeof named - (size_t)n, "%d-%d%s", ch[k].lo, ch[k].hi - 1,
                          ch[k].last ? "+" : "");
        for (int s = ch[k].head_lo; s < ch[k].head_hi; s++)
            n += snprintf(named + n, sizeof named - (size_t)n, "%shead:%d/%d",
                          s > ch[k].head_lo ? "+" : "", s, shards);
    }
    printf("the trainer's split named: %s\n", named);
    coh_parallel_config cn = interleaved(named, COH_RECOMPUTE_NONE);
    plan_chunk chn[4];
    if (!chunks_of(m, &cn, hw, chn))
        return;
    CHECK(!memcmp(chn, ch, sizeof ch));

    /* the same blocks on every chunk, the head whole on the last or in 2 shards on the last
     * two: its work moves between the chunks and adds up to the same, and each stage keeps one
     * copy of the tied embedding (stage 0 shares its own with the shard it holds) */
    coh_parallel_config cw = interleaved("0-1,2,3,head", COH_RECOMPUTE_NONE);
    coh_parallel_config c2 = interleaved("0-1,2,3+head:0/2,head:1/2", COH_RECOMPUTE_NONE);
    plan_chunk chw[4], ch2[4];
    if (!chunks_of(m, &cw, hw, chw) || !chunks_of(m, &c2, hw, ch2))
        return;
    CHECK(chw[3].last && chw[3].head_lo == 0 && chw[3].head_hi == 1 && !chw[2].last);
    CHECK(ch2[2].last && ch2[2].head_lo == 0 && ch2[2].head_hi == 1);
    CHECK(ch2[3].last && ch2[3].head_lo == 1 && ch2[3].head_hi == 2);
    CHECK(ch2[2].fwd > chw[2].fwd && ch2[3].fwd < chw[3].fwd);
    CHECK_NEAR(sum_compute(ch2, 4), sum_compute(chw, 4), 1e-9 * sum_compute(chw, 4));
    int64_t p2 = 0, pw = 0;
    for (int k = 0; k < 4; k++) {
        p2 += ch2[k].params;
        pw += chw[k].params;
    }
    CHECK(p2 == pw);

    /* recomputed logits: the shard before the last computes its logits product again */
    coh_parallel_config c2r = interleaved("0-1,2,3+head:0/2,head:1/2", COH_RECOMPUTE_FULL);
    coh_parallel_config cwr = interleaved("0-1,2,3,head", COH_RECOMPUTE_FULL);
    plan_chunk ch2r[4], chwr[4];
    if (!chunks_of(m, &c2r, hw, ch2r) || !chunks_of(m, &cwr, hw, chwr))
        return;
    CHECK(sum_compute(ch2r, 4) > sum_compute(chwr, 4) * (1 + 1e-6));

    /* the best split with the head whole (the trainer's search without shards) */
    int wb[5];
    char whole[64];
    coh_gpt_config g = {L, HEADS, DIM, VOCAB, SEQ, 1, 0};
    coh_pipe_shape shape = {COH_SCHED_INTERLEAVED, 2, 2, 2};
    par_pipe_split(&g, SEQ, &shape, wb);
    n = 0;
    for (int k = 0; k < 4; k++) {
        n += snprintf(whole + n, sizeof whole - (size_t)n, "%s", k ? "," : "");
        if (wb[k + 1] > wb[k])
            n += snprintf(whole + n, sizeof whole - (size_t)n, "%d-%d", wb[k], wb[k + 1] - 1);
        else
            n += snprintf(whole + n, sizeof whole - (size_t)n, k ? "head" : "embeddings");
    }
    printf("the best split with the head whole: %s\n", whole);
    cw = interleaved(whole, COH_RECOMPUTE_NONE);

    /* the step: shorter with the shards, as the trainer's own simulation found */
    coh_plan_result rs, rw;
    CHECK_OK(coh_plan_config(m, &c, hw, &rs));
    CHECK_OK(coh_plan_config(m, &cw, hw, &rw));
    printf("predicted step: %.2f ms with %d shards, %.2f ms with the head whole\n",
           rs.step_s * 1e3, shards, rw.step_s * 1e3);
    CHECK(rs.step_s < rw.step_s);
}

static void test_refused(void)
{
    const coh_model_desc *m = &model;
    const coh_hw *hw = &rates;
    plan_dev d;
    plan_chunk ch[4];
    /* tensor parallelism splits the vocabulary already: the trainer refuses shards with it */
    coh_parallel_config c = interleaved("0-1,2,3+head:0/2,head:1/2", COH_RECOMPUTE_NONE);
    c.tp = 2;
    CHECK_OK(plan_dev_for(hw, &c, &d));
    CHECK_FAILS(plan_chunk_costs(m, &c, &d, SEQ, ch), COH_ERR_INVALID,
                "'0-1,2,3+head:0/2,head:1/2'");
    /* more shards than rows */
    coh_model_desc tiny;
    CHECK_OK(coh_model_gpt(L, DIM, HEADS, 2, SEQ, 0, &tiny));
    c = interleaved("0-2,3+head:0/3,head:1/3,head:2/3", COH_RECOMPUTE_NONE);
    CHECK_OK(plan_dev_for(hw, &c, &d));
    CHECK_FAILS(plan_chunk_costs(&tiny, &c, &d, SEQ, ch), COH_ERR_INVALID, "3 head shards");
    /* a GPU preset: no trainer of cohort's runs there, so the head stays whole */
    coh_hw gpu;
    CHECK_OK(coh_hw_preset("a100-80gb", &gpu));
    c = interleaved("0-1,2,3+head:0/2,head:1/2", COH_RECOMPUTE_NONE);
    CHECK_OK(plan_dev_for(&gpu, &c, &d));
    CHECK_FAILS(plan_chunk_costs(m, &c, &d, SEQ, ch), COH_ERR_INVALID, "head shards");
    c.stage_layers = NULL;
    CHECK_OK(plan_chunk_costs(m, &c, &d, SEQ, ch));
    CHECK(ch[3].last && ch[3].head_lo == 0 && ch[3].head_hi == 1);
    for (int k = 0; k < 3; k++)
        CHECK(!ch[k].last);
}

int main(void)
{
    CHECK_OK(coh_model_gpt(L, DIM, HEADS, VOCAB, SEQ, 0, &model));
    if (!load_cal(&rates))
        return CHECK_REPORT();
    RUN(test_trainer_split);
    RUN(test_refused);
    return CHECK_REPORT();
}
