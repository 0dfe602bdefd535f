/* test_plan_calibration_links.c: the calibration file's links: a file with "inter_node" (the
 * link to another node, from `cohort bench link --calibration`) round-trips through the writer
 * and the reader with every other figure kept, and writing what was read gives the same bytes;
 * a file without it reads as no link; bad inter_node values are refused naming key and value;
 * and over 2 nodes of this machine the planner prices collectives with the α-β formulas of
 * docs/plan.md on that link and shares each node's cores among that node's ranks only. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "plan/planner_int.h"
#include "test_files.h"

static void sample_hw(coh_hw *hw)
{
    memset(hw, 0, sizeof *hw);
    snprintf(hw->name, sizeof hw->name, "test machine");
    hw->cores = 2;
    hw->memory_bytes = 25276063744ULL;
    hw->peak_flops = 3.4e11;
    hw->nrates = 2;
    for (int r = 0; r < 2; r++) {
        coh_device_rates *d = &hw->rates[r];
        d->threads = r + 1;
        d->elementwise_bytes_per_s = (23.9 - 11 * r) * 1e9;
        d->op_overhead_s = (0.22 + r * 0.6) * 1e-6;
        d->gemm.n = 3;
        for (int k = 0; k < 3; k++) {
            d->gemm.work[k] = 16384.0 * pow(8, k);
            d->gemm.flops[k] = (6.4e10 + 3e10 * k) * (1 + 0.1 * r);
        }
    }
    hw->intra = (coh_link){10e-6, 7.98324e9};
    hw->inter = (coh_link){61.5e-6, 0.1187e9};
}

static char dir[256];

static void round_trip(void)
{
    coh_hw a, b, c;
    sample_hw(&a);
    char p1[400], p2[400];
    snprintf(p1, sizeof p1, "%s/one.json", dir);
    snprintf(p2, sizeof p2, "%s/two.json", dir);
    CHECK_OK(coh_calibration_write(&a, p1));
    CHECK_OK(coh_calibration_load(p1, &b));
    CHECK_NEAR(b.inter.alpha_s, a.inter.alpha_s, 1e-5);
    CHECK_NEAR(b.inter.bytes_per_s, a.inter.bytes_per_s, 1e-5);
    CHECK_NEAR(b.intra.alpha_s, a.intra.alpha_s, 1e-5);
    CHECK_NEAR(b.intra.bytes_per_s, a.intra.bytes_per_s, 1e-5);
    CHECK_STR(b.name, a.name);
    CHECK_INT(b.cores, a.cores);
    CHECK(b.memory_bytes == a.memory_bytes);
    CHECK_NEAR(b.peak_flops, a.peak_flops, 1e-5);
    CHECK_INT(b.nrates, a.nrates);
    for (int r = 0; r < a.nrates && r < b.nrates; r++) {
        CHECK_INT(b.rates[r].threads, a.rates[r].threads);
        CHECK_NEAR(b.rates[r].elementwise_bytes_per_s, a.rates[r].elementwise_bytes_per_s, 1e-5);
        CHECK_NEAR(b.rates[r].op_overhead_s, a.rates[r].op_overhead_s, 1e-5);
        CHECK_INT(b.rates[r].gemm.n, a.rates[r].gemm.n);
        for (int k = 0; k < a.rates[r].gemm.n; k++) {
            CHECK_NEAR(b.rates[r].gemm.work[k], a.rates[r].gemm.work[k], 1e-5);
            CHECK_NEAR(b.rates[r].gemm.flops[k], a.rates[r].gemm.flops[k], 1e-5);
        }
    }
    /* what was read, written again: the same file (a merge keeps everything) */
    CHECK_OK(coh_calibration_write(&b, p2));
    size_t n1 = 0, n2 = 0;
    char *t1 = test_slurp(p1, &n1), *t2 = test_slurp(p2, &n2);
    CHECK(t1 && t2 && n1 == n2 && !memcmp(t1, t2, n1));
    const char *inter = t1 ? strstr(t1, "\"inter_node\": {") : NULL;
    CHECK(inter && strstr(inter, "\"latency_us\": 61.5,") &&
          strstr(inter, "\"gbytes_per_s\": 0.1187\n"));
    free(t1);
    free(t2);
    /* no inter-node link: none written, none read */
    a.inter = (coh_link){0, 0};
    CHECK_OK(coh_calibration_write(&a, p1));
    t1 = test_slurp(p1, &n1);
    CHECK(t1 && !strstr(t1, "inter_node"));
    free(t1);
    CHECK_OK(coh_calibration_load(p1, &c));
    CHECK(c.inter.bytes_per_s == 0 && c.inter.alpha_s == 0);
    CHECK_INT(c.nodes, 1);
}

/* A valid file whose inter_node is `link` (JSON text). */
static coh_status parse_with(const char *link)
{
    char text[1024];
    snprintf(text, sizeof text,
             "{\"cohort_calibration\": 1, \"cores\": 2, \"rates\": [{\"threads\": 1, \"gemm\": "
             "[[1000, 1e9]], \"elementwise_gbytes_per_s\": 1}], \"link\": {\"latency_us\": 5, "
             "\"gbytes_per_s\": 2}, \"inter_node\": %s}", link);
    coh_hw hw;
    return coh_calibration_parse(text, strlen(text), "cal.json", &hw);
}

static void bad_values(void)
{
    CHECK_OK(parse_with("{\"latency_us\": 0, \"gbytes_per_s\": 1e-6}"));
    CHECK_FAILS(parse_with("{\"latency_us\": 5, \"gbytes_per_s\": -1}"), COH_ERR_INVALID,
                "cal.json: inter_node.gbytes_per_s: -1 is not a number from 1e-06 to 1e+06");
    CHECK_FAILS(parse_with("{\"latency_us\": 5, \"gbytes_per_s\": 0}"), COH_ERR_INVALID,
                "inter_node.gbytes_per_s: 0 is not a number");
    CHECK_FAILS(parse_with("{\"latency_us\": 5, \"gbytes_per_s\": \"fast\"}"), COH_ERR_INVALID,
                "inter_node.gbytes_per_s: string");
    CHECK_FAILS(parse_with("{\"latency_us\": -3, \"gbytes_per_s\": 1}"), COH_ERR_INVALID,
                "inter_node.latency_us: -3 is not a number from 0 to 1e+07");
    CHECK_FAILS(parse_with("{\"latency_us\": 1e9, \"gbytes_per_s\": 1}"), COH_ERR_INVALID,
                "inter_node.latency_us: 1e+09");
    CHECK_FAILS(parse_with("{\"gbytes_per_s\": 1}"), COH_ERR_INVALID,
                "inter_node: missing 'latency_us'");
    CHECK_FAILS(parse_with("{\"latency_us\": 5, \"gbytes_per_s\": 1, \"mtu\": 1500}"),
                COH_ERR_INVALID, "inter_node: unknown key 'mtu'");
    CHECK_FAILS(parse_with("0.12"), COH_ERR_INVALID, "inter_node is not an object");
}

/* Ring steps of docs/plan.md: passes x (n - 1) x (alpha + bytes / n / beta). */
static double ring(int n, double passes, const coh_link *l, double bytes)
{
    return n <= 1 ? 0 : passes * (n - 1) * (l->alpha_s + bytes / n / l->bytes_per_s);
}

static void two_nodes_price_the_link(void)
{
    coh_hw hw;
    sample_hw(&hw);
    double bytes = 12e6;
    /* one node (as before): every collective on the link between its ranks */
    hw.nodes = 1;
    CHECK_NEAR(plan_allreduce_s(&hw, 4, 1, bytes), ring(4, 2, &hw.intra, bytes), 1e-12);
    CHECK(plan_link(&hw, 0, 3) == &hw.intra);
    /* 2 nodes of 2 ranks: the cheaper of a flat ring on the inter-node link (one flow each
     * way crosses it) and the hierarchy (reduce-scatter and all-gather inside the node, an
     * all-reduce of 1/2 across by both ranks of a node at once: they share its link) */
    hw.nodes = 2;
    hw.gpus_per_node = 2;
    coh_link shared = {hw.inter.alpha_s, hw.inter.bytes_per_s / 2};
    double flat = ring(4, 2, &hw.inter, bytes);
    double hier = 2 * ring(2, 1, &hw.intra, bytes) + ring(2, 2, &shared, bytes / 2);
    CHECK_NEAR(plan_allreduce_s(&hw, 4, 1, bytes), fmin(flat, hier), 1e-12);
    CHECK(hier < flat); /* the hierarchy is the one priced here */
    CHECK_NEAR(plan_allgather_s(&hw, 4, 1, bytes),
               fmin(ring(4, 1, &hw.inter, bytes), ring(2, 1, &hw.intra, bytes) +
                                                      ring(2, 1, &shared, bytes / 2)), 1e-12);
    CHECK(plan_link(&hw, 0, 1) == &hw.intra);
    CHECK(plan_link(&hw, 1, 2) == &hw.inter);
    /* a node's 2 ranks share its 2 cores, not the 4 ranks of the job */
    coh_parallel_config c;
    coh_parallel_config_init(&c);
    c.dp = 4;
    c.strategy = COH_STRATEGY_DDP;
    plan_dev d;
    CHECK_OK(plan_dev_for(&hw, &c, &d));
    CHECK_INT(d.threads, 1);
    CHECK_NEAR(d.share, 1.0, 1e-12);
    CHECK_INT(plan_node_size(&hw, &c), 2);
    hw.nodes = 1;
    CHECK_OK(plan_dev_for(&hw, &c, &d));
    CHECK_NEAR(d.share, 0.5, 1e-12);
    CHECK_INT(plan_node_size(&hw, &c), 4);
    /* the whole step: a slower link between the nodes costs more communication */
    hw.nodes = 2;
    coh_model_desc m;
    CHECK_OK(coh_model_gpt(2, 64, 4, 256, 32, 0, &m));
    c.microbatches = 1;
    c.micro_batch = 2;
    c.seq = 32;
    coh_plan_result fast, slow;
    CHECK_OK(coh_plan_config(&m, &c, &hw, &fast));
    hw.inter.bytes_per_s /= 10;
    CHECK_OK(coh_plan_config(&m, &c, &hw, &slow));
    CHECK(slow.comm_s > fast.comm_s && slow.step_s >= fast.step_s);
    /* and none at all is refused naming the way to give it */
    hw.inter = (coh_link){0, 0};
    CHECK_FAILS(coh_plan_config(&m, &c, &hw, &slow), COH_ERR_INVALID, "no link between nodes");
}

int main(void)
{
    if (test_tmpdir(dir, sizeof dir, "cohort-cal-links"))
        return 1;
    RUN(round_trip);
    RUN(bad_values);
    RUN(two_nodes_price_the_link);
    test_rmtree(dir);
    return CHECK_REPORT();
}
