/* test_plan_search.c: the planner against the guide's rules (Megatron-LM's published tables are
 * test_plan_megatron.c): GPT-2 XL on 8 NVLink
 * GPUs plans DDP or ZeRO; a model that does not fit one GPU plans ZeRO-3 or tp inside the node;
 * over a slow link between nodes pp goes between the nodes; the search is deterministic and
 * accounts for every configuration it considered; bad input is refused by name. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "cohort/parallel.h"
#include "cohort/planner.h"

/* Load an inventory, or fail a check and return from the test when it cannot be read. */
#define LOAD_INV(name, nodes, hw)                                                              \
    do {                                                                                       \
        char p_[512];                                                                          \
        coh_status l_ = coh_hw_from_inventory(inv(name, p_, sizeof p_), nodes, hw);            \
        CHECK_OK(l_);                                                                          \
        if (l_ != COH_OK)                                                                      \
            return;                                                                            \
    } while (0)

static const char *inv(const char *name, char *buf, size_t cap)
{
    const char *src = getenv("COHORT_SOURCE_DIR");
    snprintf(buf, cap, "%s/tests/plan/inventories/%s", src ? src : "..", name);
    return buf;
}

/* Megatron's GPT: V = 51200, s = 2048, ffn 4h, untied head counted as in the paper. */
static void megatron_model(int layers, int dim, int heads, coh_model_desc *m)
{
    CHECK_OK(coh_model_gpt(layers, dim, heads, 51200, 2048, 0, m));
}

static int search(const coh_model_desc *m, const coh_hw *hw, int devices, int64_t batch,
                  coh_plan_result *r, int cap, coh_plan_stats *stats)
{
    coh_plan_request q;
    memset(&q, 0, sizeof q);
    q.global_batch = batch;
    q.devices = devices;
    q.precision = hw->precision;
    int n = 0;
    CHECK_OK(coh_plan_search(m, &q, hw, r, cap, &n, stats));
    return n;
}

/* Single node, model fits: data parallelism (DDP or a ZeRO stage), no tp, no pp. */
static void test_rule_fits_one_gpu(void)
{
    coh_hw hw;
    LOAD_INV("a100x8_nvlink.json", 1, &hw);
    coh_model_desc m;
    CHECK_OK(coh_model_preset("gpt2-xl", &m));
    coh_plan_result r[3];
    coh_plan_stats st;
    int n = search(&m, &hw, 8, 512, r, 3, &st);
    CHECK(n >= 1);
    if (n < 1)
        return;
    printf("gpt2-xl on 8 A100: dp %d tp %d pp %d %s\n", r[0].config.dp, r[0].config.tp,
           r[0].config.pp, coh_strategy_name(r[0].config.strategy));
    CHECK_INT(r[0].config.dp, 8);
    /* DDP or a ZeRO stage: ranks of their own, not single nor the threaded DataParallel */
    CHECK(r[0].config.strategy == COH_STRATEGY_DDP ||
          coh_strategy_zero_stage(r[0].config.strategy) >= 1);
    CHECK(r[0].config.tp == 1 && r[0].config.pp == 1);
    /* every considered configuration is accounted for */
    CHECK_INT(st.considered, st.invalid + st.too_big + st.simulated + st.pruned);
}

/* A model whose states do not fit one 80 GB GPU (13 B parameters: 16 bytes each in mixed
 * precision): ZeRO-3 over the node, or tp inside the node. */
static void test_rule_does_not_fit(void)
{
    coh_hw hw;
    LOAD_INV("a100x8_nvlink.json", 1, &hw);
    coh_model_desc m;
    CHECK_OK(coh_model_gpt(40, 5120, 40, 50257, 2048, 0, &m));
    coh_parallel_config one;
    coh_parallel_config_init(&one);
    one.precision = COH_PREC_BF16_MIXED;
    coh_estimate e;
    CHECK_OK(coh_estimate_memory(&m, &one, &e));
    CHECK(e.per_device.total_bytes > hw.memory_bytes);
    coh_plan_result r[3];
    coh_plan_stats st;
    int n = search(&m, &hw, 8, 256, r, 3, &st);
    CHECK(n >= 1);
    if (n < 1)
        return;
    const coh_parallel_config *c = &r[0].config;
    printf("13B on 8 A100: dp %d tp %d pp %d %s\n", c->dp, c->tp, c->pp,
           coh_strategy_name(c->strategy));
    CHECK(c->pp == 1);
    CHECK((c->strategy == COH_STRATEGY_ZERO3 && c->dp == 8) || (c->tp > 1 && c->tp <= 8));
    CHECK(st.too_big > 0); /* the search did meet configurations that do not fit */
}

/* 1 when every rank's tp and dp peers sit on its node of `gpn` ranks, placed as the trainer
 * places them (coh_mesh_rank). */
static int same_node_groups(const coh_parallel_config *c, int gpn)
{
    for (int p = 0; p < c->pp; p++)
        for (int d = 0; d < c->dp; d++)
            for (int t = 0; t < c->tp; t++) {
                long r = coh_mesh_rank(c->dp, c->pp, c->tp, d, p, t);
                long tp0 = coh_mesh_rank(c->dp, c->pp, c->tp, d, p, 0);
                long dp0 = coh_mesh_rank(c->dp, c->pp, c->tp, 0, p, t);
                if (r / gpn != tp0 / gpn || r / gpn != dp0 / gpn)
                    return 0;
            }
    return 1;
}

/* Four nodes over a slow link (one 10 Gb/s Ethernet port a node: 0.156 GB/s a GPU): the step keeps the heavy traffic (tp's
 * all-reduces, ZeRO's gathers, the gradient all-reduce) inside the nodes and crosses
 * between them with pipeline stages. */
static void test_rule_slow_link(void)
{
    coh_hw hw;
    LOAD_INV("a100x8_slow.json", 4, &hw);
    coh_model_desc m;
    CHECK_OK(coh_model_gpt(40, 5120, 40, 50257, 2048, 0, &m));
    coh_plan_result r[3];
    coh_plan_stats st;
    int n = search(&m, &hw, 32, 256, r, 3, &st);
    CHECK(n >= 1);
    if (n < 1)
        return;
    const coh_parallel_config *c = &r[0].config;
    printf("13B on 4 x 8 A100 over 10 Gb/s a node: dp %d tp %d pp %d %s, %s\n", c->dp, c->tp, c->pp,
           coh_strategy_name(c->strategy), r[0].reasons);
    /* pp spans the nodes and only pp: in the trainer's mesh (coh_mesh_rank: tp fastest, then
     * dp, then pp) every tp group and every dp group lies inside one node of 8 */
    CHECK(c->pp >= 4);
    CHECK_INT(same_node_groups(c, 8), 1);
    /* and the same model over the fast link is not forced into that */
    LOAD_INV("a100x8_nvlink.json", 4, &hw);
    coh_plan_result f[1];
    n = search(&m, &hw, 32, 256, f, 1, &st);
    CHECK(n == 1 && f[0].step_s < r[0].step_s);
}

/* Deterministic, and a large device count is searched (the count is printed, no timing). */
static void test_search_deterministic_and_large(void)
{
    coh_hw hw;
    CHECK_OK(coh_hw_preset("a100-80gb", &hw));
    hw.nodes = 384;
    hw.inter = (coh_link){5e-6, 25e9};
    coh_model_desc m;
    megatron_model(128, 25600, 160, &m);
    coh_plan_result a[5], b[5];
    coh_plan_stats sa, sb;
    int na = search(&m, &hw, 3072, 3072, a, 5, &sa);
    int nb = search(&m, &hw, 3072, 3072, b, 5, &sb);
    CHECK_INT(na, nb);
    CHECK(na >= 1);
    CHECK_INT(sa.considered, sb.considered);
    CHECK_INT(sa.simulated, sb.simulated);
    CHECK_INT(sa.considered, sa.invalid + sa.too_big + sa.simulated + sa.pruned);
    for (int i = 0; i < na && i < nb; i++) {
        CHECK(a[i].step_s == b[i].step_s);
        CHECK(!memcmp(&a[i].config, &b[i].config, sizeof a[i].config));
        if (i)
            CHECK(a[i - 1].step_s <= a[i].step_s);
    }
    printf("3072 devices, 1T model: %ld considered, %ld simulated, %ld pruned; top dp %d tp %d "
           "pp %d\n", sa.considered, sa.simulated, sa.pruned, a[0].config.dp, a[0].config.tp,
           a[0].config.pp);
}

/* The pipeline's bubble comes out of the schedule: with equal stages and free links, 1F1B's
 * idle share is (p - 1) / m of the compute, interleaving divides it by v. */
static void test_bubble_from_schedule(void)
{
    coh_hw hw;
    CHECK_OK(coh_hw_preset("a100-80gb", &hw));
    hw.intra = (coh_link){0, 1e30};
    coh_model_desc m;
    CHECK_OK(coh_model_gpt(32, 1024, 16, 128, 1024, 0, &m)); /* a light head */
    coh_parallel_config c;
    coh_parallel_config_init(&c);
    c.precision = COH_PREC_BF16_MIXED;
    c.strategy = COH_STRATEGY_DDP;
    c.pp = 4;
    c.microbatches = 8;
    c.stage_layers = "0-7,8-15,16-23,24-31";
    coh_plan_result r;
    CHECK_OK(coh_plan_config(&m, &c, &hw, &r));
    /* over free links the step is the last stage's compute (the optimizer included) plus the
     * bubble, up to the stages' imbalance (the embeddings against the light head: under 1%):
     * nothing else adds to it */
    double busy = r.compute_s;
    printf("1f1b p 4 m 8: step %.6f s = compute %.6f s + bubble %.6f s + %.6f s\n", r.step_s,
           busy, r.bubble_s, r.step_s - busy - r.bubble_s);
    CHECK(r.step_s - (busy + r.bubble_s) >= -1e-9 * r.step_s);
    CHECK(r.step_s - (busy + r.bubble_s) <= 0.01 * r.step_s);
    /* bubble / (makespan - bubble) = (p - 1) / m up to the embedding and head's share */
    double ratio = r.bubble_s / (r.step_s - r.bubble_s);
    printf("1f1b p 4 m 8: bubble ratio %.3f (formula 0.375)\n", ratio);
    CHECK(fabs(ratio - 0.375) < 0.05);
    c.schedule = COH_SCHED_INTERLEAVED;
    c.virtual_stages = 2;
    c.stage_layers = "0-3,4-7,8-11,12-15,16-19,20-23,24-27,28-31";
    CHECK_OK(coh_plan_config(&m, &c, &hw, &r));
    ratio = r.bubble_s / (r.step_s - r.bubble_s);
    printf("interleaved p 4 m 8 v 2: bubble ratio %.3f (formula 0.1875)\n", ratio);
    CHECK(fabs(ratio - 0.1875) < 0.05);
}

static void test_bad_input(void)
{
    char path[512];
    coh_hw hw;
    CHECK_FAILS(coh_hw_from_inventory(inv("a100x8_nolinks.json", path, sizeof path), 2, &hw),
                COH_ERR_INVALID, "links");
    LOAD_INV("a100x8_nvlink.json", 1, &hw);
    coh_model_desc m;
    CHECK_OK(coh_model_preset("gpt2-xl", &m));
    coh_plan_request q;
    memset(&q, 0, sizeof q);
    q.global_batch = 64;
    q.precision = COH_PREC_BF16_MIXED;
    coh_plan_result r[2];
    int n;
    q.devices = 12; /* more than one node of 8 and not whole nodes */
    CHECK_FAILS(coh_plan_search(&m, &q, &hw, r, 2, &n, NULL), COH_ERR_INVALID, "'12'");
    q.devices = 0;
    CHECK_FAILS(coh_plan_search(&m, &q, &hw, r, 2, &n, NULL), COH_ERR_INVALID, "'0'");
    /* a model nothing fits: 1 T parameters on 8 GPUs */
    coh_model_desc huge;
    megatron_model(128, 25600, 160, &huge);
    q.devices = 8;
    CHECK_FAILS(coh_plan_search(&huge, &q, &hw, r, 2, &n, NULL), COH_ERR_INVALID, "fits");
    CHECK_INT(n, 0);
    CHECK_FAILS(coh_hw_preset("tpu-v9", &hw), COH_ERR_INVALID, "tpu-v9");
    coh_model_desc counts;
    CHECK_OK(coh_model_counts(1000000000LL, 0, &counts));
    q.devices = 8;
    CHECK_FAILS(coh_plan_search(&counts, &q, &hw, r, 2, &n, NULL), COH_ERR_INVALID, "shape");
}

int main(void)
{
    RUN(test_rule_fits_one_gpu);
    RUN(test_rule_does_not_fit);
    RUN(test_rule_slow_link);
    RUN(test_search_deterministic_and_large);
    RUN(test_bubble_from_schedule);
    RUN(test_bad_input);
    return CHECK_REPORT();
}
