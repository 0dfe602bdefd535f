/* test_plan_activations.c: activation memory against Korthikanti et al. 2022 ("Reducing
 * Activation Recomputation in Large Transformer Models"): Table 2's per-layer formulas on the
 * paper's GPT-3 175B configuration, the first pipeline stage's total for 1F1B, GPipe and the
 * interleaved schedule, the embedding and output terms, and the paper's "5x" claim. */
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "cohort/plan.h"

/* The published formulas' setting (Megatron's GPT): bf16 mixed precision, dropout masks
 * stored; cohort's own default is what its trainer runs (fp32, no dropout). */
static void paper_config(coh_parallel_config *s)
{
    coh_parallel_config_init(s);
    s->precision = COH_PREC_BF16_MIXED;
    s->dropout = 1;
}

/* GPT-3 175B as configured in the paper's Table 3: a = 96, h = 12288, L = 96, s = 2048,
 * v = 51200, t = 8, p = 8. */
static coh_model_desc gpt3_175b(void)
{
    coh_model_desc m;
    CHECK_OK(coh_model_gpt(96, 12288, 96, 51200, 2048, 0, &m));
    return m;
}

static coh_parallel_config base(int tp, int sp, coh_recompute r)
{
    coh_parallel_config s;
    paper_config(&s);
    s.tp = tp;
    s.sequence_parallel = sp;
    s.recompute = r;
    return s;
}

/* Table 2, per layer, in units of sbh bytes, with 5as/h = 80 for this model. */
static void test_table2_per_layer(void)
{
    coh_model_desc m = gpt3_175b();
    double sbh = 2048.0 * 1 * 12288, t = 8, k = 5.0 * 96 * 2048 / 12288;
    CHECK_NEAR(k, 80, 0);
    const struct {
        coh_parallel_config s;
        double expect;
    } rows[] = {
        {base(1, 0, COH_RECOMPUTE_NONE), sbh * (34 + k)},
        {base(8, 0, COH_RECOMPUTE_NONE), sbh * (10 + 24 / t + k / t)},
        {base(8, 1, COH_RECOMPUTE_NONE), sbh * (34 / t + k / t)},
        {base(8, 0, COH_RECOMPUTE_SELECTIVE), sbh * (10 + 24 / t)},
        {base(8, 1, COH_RECOMPUTE_SELECTIVE), sbh * (34 / t)},
        {base(8, 1, COH_RECOMPUTE_FULL), sbh * 2},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
        CHECK_INT(coh_activations_per_layer(&m, &rows[i].s), (long long)rows[i].expect);
}

/* Sec. 4.2.3 / 4.3: with 1F1B the first stage holds p microbatches of L/p layers, i.e. L layers'
 * worth, plus the embedding dropout mask sbhp/t; the output layer's 4sbh/t (1 + v/h) lives on
 * the last stage. With p = 1 both extra terms are on the one device. */
static void test_first_stage_totals(void)
{
    coh_model_desc m = gpt3_175b();
    double sbh = 2048.0 * 12288, L = 96, t = 8, p = 8, v = 51200, h = 12288, k = 80;
    coh_parallel_config s = base(8, 1, COH_RECOMPUTE_NONE);
    s.pp = 8;
    s.microbatches = 64;
    coh_device_mem d;
    CHECK_OK(coh_estimate_stage(&m, &s, 0, &d));
    CHECK_INT(d.in_flight, 8);
    CHECK_INT(d.activations_bytes, (long long)(sbh * L / t * (34 + k) + sbh * p / t));
    /* interleaved with v = 2: multiplied by 1 + (p - 1) / (p v) */
    s.schedule = COH_SCHED_INTERLEAVED;
    s.virtual_stages = 2;
    CHECK_OK(coh_estimate_stage(&m, &s, 0, &d));
    CHECK_INT(d.activations_bytes,
              (long long)(sbh * L / t * (34 + k) * (1 + (p - 1) / (p * 2)) + sbh * p / t));
    /* a block count p v does not divide (94 blocks, p 8, v 4: stage 6 holds 11 in chunks of
     * 3, 3, 3, 2): each chunk-microbatch held covers up to ceil(11 / 4) = 3 blocks, and the
     * stage holds Megatron's warm-up (p - s - 1) 2 + (v - 1) p + 1 = 27 of them */
    coh_model_desc m94;
    CHECK_OK(coh_model_gpt(94, 12288, 96, 51200, 2048, 0, &m94));
    s.virtual_stages = 4;
    CHECK_OK(coh_estimate_stage(&m94, &s, 6, &d));
    CHECK_INT(d.in_flight, 27);
    CHECK_INT(d.activations_bytes, 27LL * 3 * (long long)coh_activations_per_layer(&m94, &s));
    /* GPipe holds all m microbatches of its L/p layers */
    s.schedule = COH_SCHED_GPIPE;
    s.virtual_stages = 1;
    CHECK_OK(coh_estimate_stage(&m, &s, 0, &d));
    CHECK_INT(d.activations_bytes, (long long)(64 * sbh * (L / p) / t * (34 + k) + 64 * sbh / t));
    /* p = 1: sbhL/t (34 + 5as/h) + sbhL/t (p/L + 4/L (1 + v/h)) */
    s = base(8, 1, COH_RECOMPUTE_NONE);
    CHECK_OK(coh_estimate_stage(&m, &s, 0, &d));
    CHECK_INT(d.activations_bytes,
              (long long)(sbh * L / t * (34 + k) + sbh * L / t * (1 / L + 4 / L * (1 + v / h))));
}

/* The paper's headline: sequence parallelism with selective recompute needs about 5x less
 * activation memory than tensor parallelism alone, for its 22B, 175B, 530B and 1T models. */
static void test_five_times_claim(void)
{
    static const struct {
        long long a, h, L;
    } models[] = {{64, 6144, 48}, {96, 12288, 96}, {128, 20480, 105}, {160, 25600, 128}};
    for (size_t i = 0; i < sizeof models / sizeof models[0]; i++) {
        coh_model_desc m;
        CHECK_OK(coh_model_gpt(models[i].L, models[i].h, models[i].a, 51200, 2048, 0, &m));
        coh_parallel_config tp_only = base(8, 0, COH_RECOMPUTE_NONE);
        coh_parallel_config best = base(8, 1, COH_RECOMPUTE_SELECTIVE);
        double ratio = (double)coh_activations_per_layer(&m, &tp_only) /
                       (double)coh_activations_per_layer(&m, &best);
        printf("  a=%lld h=%lld: tp-only / (sp + selective) = %.2f\n", models[i].a, models[i].h, ratio);
        CHECK(ratio > 4.5 && ratio < 6.5);
    }
}

/* Without dropout the two sbh masks, the softmax mask and the softmax-dropout output go:
 * sbh(32 + 2as/h); in fp32 the 16 two-byte tensors double: sbh(66 + 9as/h). */
static void test_dropout_and_fp32(void)
{
    coh_model_desc m;
    CHECK_OK(coh_model_preset("gpt2", &m));
    double sbh = 1024.0 * 768, k = 12.0 * 1024 / 768;
    coh_parallel_config s = base(1, 0, COH_RECOMPUTE_NONE);
    CHECK_INT(coh_activations_per_layer(&m, &s), (long long)(sbh * (34 + 5 * k)));
    s.dropout = 0;
    CHECK_INT(coh_activations_per_layer(&m, &s), (long long)(sbh * (32 + 2 * k)));
    s.dropout = 1;
    s.precision = COH_PREC_FP32;
    CHECK_INT(coh_activations_per_layer(&m, &s), (long long)(sbh * (66 + 9 * k)));
    s.micro_batch = 4;
    CHECK_INT(coh_activations_per_layer(&m, &s), (long long)(4 * sbh * (66 + 9 * k)));
}

/* Llama blocks by the same accounting: SwiGLU keeps gate, up and their product (6sbf), GQA
 * shrinks K and V to kv_heads x head_dim. */
static void test_llama_blocks(void)
{
    coh_model_desc m;
    const char *cfg = "{\"model_type\":\"llama\",\"hidden_size\":2048,\"intermediate_size\":8192,"
                      "\"max_position_embeddings\":4096,\"num_attention_heads\":32,"
                      "\"num_hidden_layers\":16,\"num_key_value_heads\":8,\"vocab_size\":128256}";
    CHECK_OK(coh_model_from_hf_json(cfg, strlen(cfg), &m));
    coh_parallel_config s = base(1, 0, COH_RECOMPUTE_NONE);
    s.seq = 1024;
    double sb = 1024, h = 2048, f = 8192, kv = 8 * 64, a = 32;
    double expect = sb * h * 10 + sb * (2 * h + 4 * kv + 2 * h) + 6 * sb * f + 5 * a * 1024 * sb;
    CHECK_INT(coh_activations_per_layer(&m, &s), (long long)expect);
}

/* Recompute needs one layer rebuilt at a time: that working set is reported as temporary. */
static void test_recompute_working_set(void)
{
    coh_model_desc m;
    CHECK_OK(coh_model_preset("gpt2", &m));
    coh_parallel_config none = base(1, 0, COH_RECOMPUTE_NONE), full = base(1, 0, COH_RECOMPUTE_FULL);
    coh_device_mem d;
    CHECK_OK(coh_estimate_stage(&m, &full, 0, &d));
    CHECK_INT(d.temp_bytes, coh_activations_per_layer(&m, &none));
    /* held: 2sbh per layer, the embedding dropout mask sbh, and the output layer's
     * 4sbh (1 + v/h) = 4sbh + 4sbv */
    CHECK_INT(d.activations_bytes, (12 * 2 + 1 + 4) * 1024LL * 768 + 4LL * 1024 * 50257);
    coh_parallel_config sel = base(1, 0, COH_RECOMPUTE_SELECTIVE);
    CHECK_OK(coh_estimate_stage(&m, &sel, 0, &d));
    CHECK_INT(d.temp_bytes, 5LL * 12 * 1024 * 1024);
}

int main(void)
{
    RUN(test_table2_per_layer);
    RUN(test_first_stage_totals);
    RUN(test_five_times_claim);
    RUN(test_dropout_and_fp32);
    RUN(test_llama_blocks);
    RUN(test_recompute_working_set);
    return CHECK_REPORT();
}
