/* test_plan_split_memo.c: the search's remembered pipeline splits (split_memo.c) change nothing
 * but the time: the memo gives back exactly what was put under a key and nothing under any other
 * key; every configuration of a grid (schedules, micro-batch counts, virtual stages, tp, sequence
 * parallelism, recompute, on a CPU and on GPUs) is priced identically with one memo shared by the
 * whole grid and without it; and a search's plans, priced again one by one without a memo, come
 * out bit-identical, while the search reused splits it had chosen. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "cohort/parallel.h"
#include "cohort/planner.h"
#include "plan/planner_int.h"
#include "plan_test_calibration.h"
#define TEST_RAND_SEED 12345
#include "test_rand.h"

/* Many keys (the table grows several times), each with its own split, all found again exact;
 * a key one field off misses. */
static void test_memo_exact(void)
{
    enum { N = 3000, MAXU = 40 };
    plan_split_memo *memo = plan_split_memo_new();
    CHECK(memo != NULL);
    if (!memo)
        return;
    static int keys[N][PLAN_SPLIT_KEY], splits[N][MAXU + 1], us[N];
    for (int i = 0; i < N; i++) {
        for (int k = 0; k < PLAN_SPLIT_KEY; k++)
            keys[i][k] = (int)((urand() + 1.0f) * 3.5f) % 7; /* many keys alike but for one field */
        keys[i][0] = i;                                /* distinct */
        us[i] = 2 + (int)((urand() + 1.0f) * 0.5f * (MAXU - 2));
        for (int k = 0; k <= us[i]; k++)
            splits[i][k] = (int)((urand() + 1.0f) * 500.0f);
        int b[MAXU + 1], s;
        CHECK_INT(plan_split_memo_get(memo, keys[i], us[i], b, &s), 0);
        plan_split_memo_put(memo, keys[i], us[i], splits[i], 1 + i % 4);
    }
    int wrong = 0;
    for (int i = 0; i < N; i++) {
        int b[MAXU + 1], s = 0;
        if (!plan_split_memo_get(memo, keys[i], us[i], b, &s) ||
            memcmp(b, splits[i], sizeof(int) * (size_t)(us[i] + 1)) || s != 1 + i % 4)
            wrong++;
        int other[PLAN_SPLIT_KEY];
        memcpy(other, keys[i], sizeof other);
        other[1 + i % (PLAN_SPLIT_KEY - 1)] += 7; /* a value no key has in that field */
        if (plan_split_memo_get(memo, other, us[i], b, &s))
            wrong++;
    }
    CHECK_INT(wrong, 0);
    long searched, reused;
    plan_split_memo_counts(memo, &searched, &reused);
    CHECK_INT(searched, 2 * N); /* the first lookups and the keys one field off */
    CHECK_INT(reused, N);
    plan_split_memo_free(memo);
}

static int same_chunks(const plan_chunk *a, const plan_chunk *b, int u)
{
    for (int k = 0; k < u; k++)
        if (a[k].lo != b[k].lo || a[k].hi != b[k].hi || a[k].head_lo != b[k].head_lo ||
            a[k].head_hi != b[k].head_hi || a[k].fwd != b[k].fwd || a[k].bwd != b[k].bwd ||
            a[k].params != b[k].params)
            return 0;
    return 1;
}

/* The grid: configurations that differ in one field of the split's key only (schedule, stages,
 * virtual stages, micro-batch count, tp, sequence parallelism, recompute). Their number. */
static int grid_configs(const coh_model_desc *m, int precision, int whole,
                        coh_parallel_config *out, int cap)
{
    static const coh_schedule SCH[] = {COH_SCHED_1F1B, COH_SCHED_GPIPE, COH_SCHED_INTERLEAVED};
    int n = 0;
    for (int k = 0; k < 3; k++)
        for (int pp = 2; pp <= 4; pp += 2)
            for (int v = SCH[k] == COH_SCHED_INTERLEAVED ? 2 : 1;
                 v <= (SCH[k] == COH_SCHED_INTERLEAVED ? 3 : 1); v++)
                for (int mbs = 4; mbs <= 8; mbs += 4)
                    for (int tp = 1; tp <= 2; tp++)
                        for (int sp = 0; sp <= (tp > 1); sp++)
                            for (int rc = 0; rc <= 1; rc++) {
                                if (pp * v > m->layers || (v > 1 && mbs % pp) || n == cap)
                                    continue;
                                if (!whole && (k == 1 || mbs == 4 || tp > 1 || rc))
                                    continue;
                                coh_parallel_config *c = &out[n++];
                                coh_parallel_config_init(c);
                                c->pp = pp;
                                c->tp = tp;
                                c->schedule = SCH[k];
                                c->virtual_stages = v;
                                c->micro_batch = 1;
                                c->microbatches = mbs;
                                c->sequence_parallel = sp;
                                c->recompute = rc ? COH_RECOMPUTE_FULL : COH_RECOMPUTE_NONE;
                                c->precision = precision;
                                c->seq = m->positions;
                            }
    return n;
}

static void chunks(const coh_model_desc *m, const coh_parallel_config *c, const coh_hw *hw,
                   plan_split_memo *memo, plan_chunk *out)
{
    plan_dev d;
    memset(out, 0, sizeof(plan_chunk) * (size_t)(c->pp * c->virtual_stages));
    CHECK_OK(plan_dev_for(hw, c, &d));
    d.splits = memo;
    CHECK_OK(plan_chunk_costs(m, c, &d, c->seq, out));
}

/* Every configuration of the grid priced without a memo, then twice with the memo (shared by
 * every grid of the test): the first time each split is searched or found under its key, the
 * second time every one is found. A field left out of the key prices one configuration with
 * another's split. The number priced. */
static int grid(const char *what, const coh_model_desc *m, const coh_hw *hw, int precision,
                int whole, plan_split_memo *memo)
{
    enum { CAP = 128, U = 12 };
    static coh_parallel_config cfg[CAP];
    static plan_chunk alone[CAP][U];
    int n = grid_configs(m, precision, whole, cfg, CAP), differ = 0;
    for (int i = 0; i < n; i++)
        chunks(m, &cfg[i], hw, NULL, alone[i]);
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < n; i++) {
            const coh_parallel_config *c = &cfg[i];
            plan_chunk b[U];
            chunks(m, c, hw, memo, b);
            if (!same_chunks(alone[i], b, c->pp * c->virtual_stages)) {
                if (!differ)
                    printf("%s: %s pp %d v %d m %ld tp %d sp %d recompute %d priced otherwise "
                           "with the memo\n", what, coh_schedule_name(c->schedule), c->pp,
                           c->virtual_stages, (long)c->microbatches, c->tp,
                           c->sequence_parallel, c->recompute == COH_RECOMPUTE_FULL);
                differ++;
            }
        }
    printf("%s: %d configurations priced alike with and without the memo: %d differ\n", what,
           n, differ);
    CHECK_INT(differ, 0);
    CHECK(whole ? n > 40 && n < CAP : n >= 4);
    return 2 * n;
}

/* The whole grid on a model, and a part of it (1F1B and interleaved) on each of its variants one
 * field apart (blocks, width, heads, vocabulary, sequence), all sharing one memo. */
static void grids(const char *what, const coh_hw *hw, int precision, const int64_t base[5])
{
    plan_split_memo *memo = plan_split_memo_new();
    CHECK(memo != NULL);
    if (!memo)
        return;
    int priced = 0;
    for (int f = -1; f < 5; f++) {
        int64_t x[5];
        memcpy(x, base, sizeof x);
        if (f >= 0)
            x[f] = f == 0 ? x[f] + 4 : f == 2 ? x[f] * 2 : x[f] / 2; /* heads: twice as many */
        coh_model_desc m; /* layers, dim, heads, vocab, positions */
        CHECK_OK(coh_model_gpt(x[0], x[1], x[2], x[3], x[4], 0, &m));
        char name[64];
        snprintf(name, sizeof name, "%s %lld x %lld, %lld heads, V %lld, s %lld", what,
                 (long long)x[0], (long long)x[1], (long long)x[2], (long long)x[3],
                 (long long)x[4]);
        priced += grid(name, &m, hw, precision, f < 0, memo);
    }
    long searched, reused;
    plan_split_memo_counts(memo, &searched, &reused);
    printf("%s: %d priced, %ld splits searched, %ld reused\n", what, priced, searched, reused);
    CHECK(searched > 0 && reused >= priced / 2); /* every second pass at least */
    plan_split_memo_free(memo);
}

static void test_grid_cpu(void)
{
    coh_hw hw;
    if (!load_cal(&hw))
        return;
    /* GPT-2's tied head: the CPU trainer's head shards are in the split */
    static const int64_t base[5] = {8, 128, 4, 50257, 128};
    grids("cpu", &hw, COH_PREC_FP32, base);
}

static void test_grid_gpu(void)
{
    coh_hw hw;
    CHECK_OK(coh_hw_preset("a100-80gb", &hw));
    hw.nodes = 2;
    hw.inter = (coh_link){5e-6, 25e9};
    static const int64_t base[5] = {12, 2048, 16, 51200, 2048};
    grids("a100", &hw, COH_PREC_BF16_MIXED, base);
}

/* The search with its memo against each of its plans priced alone. */
static void test_search_alike(void)
{
    coh_hw hw;
    char path[512];
    const char *src = getenv("COHORT_SOURCE_DIR");
    snprintf(path, sizeof path, "%s/tests/plan/inventories/a100x8_slow.json", src ? src : "..");
    CHECK_OK(coh_hw_from_inventory(path, 2, &hw));
    coh_model_desc m;
    CHECK_OK(coh_model_gpt(40, 5120, 40, 50257, 2048, 0, &m));
    coh_plan_request q;
    memset(&q, 0, sizeof q);
    q.global_batch = 64;
    q.devices = 16;
    q.precision = hw.precision;
    enum { K = 24 };
    coh_plan_result r[K];
    coh_plan_stats st;
    int n = 0;
    CHECK_OK(coh_plan_search(&m, &q, &hw, r, K, &n, &st));
    printf("16 A100 over a slow link: %ld simulated, %ld splits searched, %ld reused\n",
           st.simulated, st.splits_searched, st.splits_reused);
    CHECK(n == K);
    CHECK(st.splits_searched > 0 && st.splits_reused > 0);
    int pipelined = 0, differ = 0;
    for (int i = 0; i < n; i++) {
        coh_plan_result x;
        CHECK_OK(coh_plan_config(&m, &r[i].config, &hw, &x));
        pipelined += r[i].config.pp > 1;
        if (x.step_s != r[i].step_s || x.memory_bytes != r[i].memory_bytes)
            differ++;
    }
    printf("%d plans (%d of them pipelined) priced alone: %d differ\n", n, pipelined, differ);
    CHECK(pipelined > 0);
    CHECK_INT(differ, 0);
}

int main(void)
{
    RUN(test_memo_exact);
    RUN(test_grid_cpu);
    RUN(test_grid_gpu);
    RUN(test_search_alike);
    return CHECK_REPORT();
}
