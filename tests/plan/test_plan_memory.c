/* test_plan_memory.c: model states per device: the ZeRO paper's worked example, fp32 training,
 * tensor/pipeline sharding of GPT-2, offload against DeepSpeed's offload formulas, and the
 * refusal of inconsistent strategies with the conflicting numbers named. */
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

static coh_estimate estimate(const coh_model_desc *m, const coh_parallel_config *s)
{
    coh_estimate e;
    CHECK_OK(coh_estimate_memory(m, s, &e));
    return e;
}

/* Rajbhandari et al. 2020, Sec. 5 / Figure 1: Psi = 7.5B, N_d = 64, K = 12: baseline 120 GB,
 * P_os 31.4 GB, P_os+g 16.6 GB, P_os+g+p 1.9 GB. The paper's GB are 10^9 bytes (16 x 7.5e9 is
 * exactly 120e9; in GiB it would read 111.8). */
static void test_zero_paper_example(void)
{
    coh_model_desc m;
    CHECK_OK(coh_model_counts(7500000000LL, 0, &m));
    coh_parallel_config s;
    paper_config(&s);
    s.dp = 64;
    const unsigned long long bytes[4] = {120000000000ULL, 31406250000ULL, 16640625000ULL,
                                         1875000000ULL};
    const char *paper[4] = {"120.0", "31.4", "16.6", "1.9"};
    for (int z = 0; z <= 3; z++) {
        s.strategy = coh_strategy_of_zero(z);
        coh_estimate e = estimate(&m, &s);
        CHECK_INT(e.per_device.total_bytes, bytes[z]);
        char printed[32];
        snprintf(printed, sizeof printed, "%.1f", (double)e.per_device.total_bytes / 1e9);
        CHECK_STR(printed, paper[z]);
    }
    /* stage 1 = 4 Psi + 12 Psi / N, split as the paper does */
    s.strategy = coh_strategy_of_zero(1);
    coh_estimate e = estimate(&m, &s);
    CHECK_INT(e.per_device.params_bytes, 2 * 7500000000LL);
    CHECK_INT(e.per_device.grads_bytes, 2 * 7500000000LL);
    CHECK_INT(e.per_device.optimizer_bytes, 12 * 117187500LL);
}

/* fp32 training: 4 + 4 + 8 bytes per parameter (weights, gradients, Adam m and v). */
static void test_fp32(void)
{
    coh_model_desc m;
    CHECK_OK(coh_model_counts(1000000, 0, &m));
    coh_parallel_config s;
    paper_config(&s);
    s.precision = COH_PREC_FP32;
    coh_estimate e = estimate(&m, &s);
    CHECK_INT(e.per_device.params_bytes, 4000000);
    CHECK_INT(e.per_device.grads_bytes, 4000000);
    CHECK_INT(e.per_device.optimizer_bytes, 8000000);
    s.dp = 4;
    s.strategy = coh_strategy_of_zero(3);
    e = estimate(&m, &s);
    CHECK_INT(e.per_device.total_bytes, 16 * 250000);
    /* an odd count pads the last partition: each rank holds ceil(Psi / N) */
    CHECK_OK(coh_model_counts(1000001, 0, &m));
    e = estimate(&m, &s);
    CHECK_INT(e.per_device.total_bytes, 16 * 250001);
}

/* Megatron's split of GPT-2: with tp = 2 a rank holds half of every matrix, half of the
 * column-parallel biases and of the vocab, and all LayerNorms, row-parallel biases and the
 * position table. */
static void test_tensor_parallel_shards(void)
{
    coh_model_desc m;
    CHECK_OK(coh_model_preset("gpt2", &m));
    coh_parallel_config s;
    paper_config(&s);
    s.tp = 2;
    coh_estimate e = estimate(&m, &s);
    long long h = 768, layer = (4 * h * h + 3 * h + 2 * h * 4 * h + 4 * h) / 2 + 6 * h;
    long long expect = 12 * layer + (50257 + 1) / 2 * h + 1024 * h + 2 * h;
    CHECK_INT(e.per_device.local_params, expect);
    CHECK_INT(e.per_device.params_bytes, 2 * expect);
}

/* Pipeline stages hold their blocks; the first the embeddings, the last the final norm and a
 * copy of the tied head, so the stages add up to the model plus that copy. */
static void test_pipeline_shards(void)
{
    coh_model_desc m;
    coh_param_count c;
    CHECK_OK(coh_model_preset("gpt2-medium", &m));
    CHECK_OK(coh_model_count(&m, &c));
    coh_parallel_config s;
    paper_config(&s);
    s.pp = 5; /* 24 layers: stages of 5, 5, 5, 5, 4 */
    long long sum = 0;
    for (int i = 0; i < 5; i++) {
        coh_device_mem d;
        CHECK_OK(coh_estimate_stage(&m, &s, i, &d));
        CHECK_INT(d.layers, i < 4 ? 5 : 4);
        sum += d.local_params;
    }
    CHECK_INT(sum, c.total + c.embedding);
    coh_estimate e = estimate(&m, &s);
    coh_device_mem d0;
    CHECK_OK(coh_estimate_stage(&m, &s, e.worst_stage, &d0));
    CHECK_INT(e.per_device.total_bytes, d0.total_bytes);
    for (int i = 0; i < 5; i++) { /* the reported stage is the largest */
        coh_device_mem d;
        CHECK_OK(coh_estimate_stage(&m, &s, i, &d));
        CHECK(d.total_bytes <= e.per_device.total_bytes);
    }
}

/* With only counts the device states follow DeepSpeed's GPU formulas where both model the same
 * thing: ZeRO-2 with the optimizer offloaded keeps 2 Psi; ZeRO-3 with the optimizer offloaded
 * keeps 2 Psi / N plus the gathered largest layer (4 bytes per parameter); with parameters
 * offloaded too, only that layer. */
static void test_offload_matches_deepspeed(void)
{
    coh_model_desc m;
    double psi = 2851e6, largest = 32e6;
    CHECK_OK(coh_model_counts((int64_t)psi, (int64_t)largest, &m));
    coh_parallel_config s;
    paper_config(&s);
    s.dp = 8;
    s.strategy = coh_strategy_of_zero(2);
    s.offload = COH_OFFLOAD_OPTIMIZER;
    uint64_t cpu, gpu;
    coh_ds_zero2_mem(psi, 8, 1, 1, 1.5, &cpu, &gpu);
    CHECK_INT(estimate(&m, &s).per_device.total_bytes, gpu);
    s.strategy = coh_strategy_of_zero(3);
    coh_ds_zero3_mem(psi, largest, 8, 1, 1, 0, 1, 1.5, &cpu, &gpu);
    CHECK_INT(estimate(&m, &s).per_device.total_bytes, gpu);
    s.offload = COH_OFFLOAD_OPTIMIZER_PARAMS;
    coh_ds_zero3_mem(psi, largest, 8, 1, 1, 1, 1, 1.5, &cpu, &gpu);
    coh_estimate e = estimate(&m, &s);
    CHECK_INT(e.per_device.total_bytes, gpu);
    /* host: 12 Psi/N optimizer + 4 Psi/N fp32 gradients + 2 Psi/N parameters */
    CHECK_INT(e.per_device.host_bytes, 18 * 356375000LL);
}

static void test_strategy_refusals(void)
{
    coh_model_desc m;
    CHECK_OK(coh_model_preset("gpt2", &m));
    coh_parallel_config s;
    coh_estimate e;
    paper_config(&s);
    s.tp = 5;
    CHECK_FAILS(coh_estimate_memory(&m, &s, &e), COH_ERR_INVALID,
                "tensor parallel size 5 does not divide the 12 attention heads");
    paper_config(&s);
    s.pp = 13;
    CHECK_FAILS(coh_estimate_memory(&m, &s, &e), COH_ERR_INVALID,
                "pipeline parallel size 13 is larger than the 12 layers");
    paper_config(&s);
    s.dp = 2;
    s.tp = 2;
    s.nodes = 2;
    s.gpus_per_node = 8;
    CHECK_FAILS(coh_estimate_memory(&m, &s, &e), COH_ERR_INVALID,
                "dp 2 x tp 2 x pp 1 = 4 devices does not match 2 node(s) x 8 GPUs per node = 16");
    paper_config(&s);
    s.pp = 2;
    s.schedule = COH_SCHED_INTERLEAVED;
    s.virtual_stages = 8;
    CHECK_FAILS(coh_estimate_memory(&m, &s, &e), COH_ERR_INVALID,
                "needs a block in each of its pp 2 x virtual stages 8 = 16 chunks: the model has "
                "12 layers");
    s.virtual_stages = 4; /* 8 chunks of 12 blocks, uneven: valid */
    s.microbatches = 4;
    CHECK_OK(coh_estimate_memory(&m, &s, &e));
    paper_config(&s);
    s.offload = COH_OFFLOAD_OPTIMIZER;
    CHECK_FAILS(coh_estimate_memory(&m, &s, &e), COH_ERR_INVALID, "optimizer offload needs ZeRO");
    paper_config(&s);
    s.strategy = coh_strategy_of_zero(2);
    s.offload = COH_OFFLOAD_OPTIMIZER_PARAMS;
    CHECK_FAILS(coh_estimate_memory(&m, &s, &e), COH_ERR_INVALID,
                "parameter offload needs ZeRO stage 3 (got stage 2)");
    paper_config(&s);
    s.seq = 2048;
    CHECK_FAILS(coh_estimate_memory(&m, &s, &e), COH_ERR_INVALID,
                "sequence length 2048 exceeds the model's 1024 learned positions");
    paper_config(&s);
    s.tp = 4;
    s.seq = 1022;
    s.sequence_parallel = 1;
    CHECK_FAILS(coh_estimate_memory(&m, &s, &e), COH_ERR_INVALID,
                "sequence length 1022 to be divisible by the tensor parallel size 4");
}

/* Every remedy offered fits and is what the estimate says; ZeRO comes first when dp allows. */
static void test_remedies(void)
{
    coh_model_desc m;
    CHECK_OK(coh_model_preset("gpt2-xl", &m));
    coh_parallel_config s;
    paper_config(&s);
    s.dp = 4;
    uint64_t limit = (uint64_t)16 << 30;
    coh_remedy r[8];
    int n;
    CHECK_OK(coh_plan_remedies(&m, &s, limit, 0, r, 8, &n));
    CHECK(n >= 2);
    CHECK_STR(r[0].what, "--zero 3"); /* stage 1 and 2 still leave 30 GiB and 22 GiB */
    for (int i = 0; i < n; i++) {
        coh_estimate e;
        CHECK_OK(coh_estimate_memory(&m, &r[i].strategy, &e));
        CHECK_INT(e.per_device.total_bytes, r[i].total_bytes);
        CHECK(r[i].total_bytes <= limit);
    }
    s.strategy = coh_strategy_of_zero(2);
    CHECK_OK(coh_plan_remedies(&m, &s, limit, 0, r, 8, &n));
    CHECK_STR(r[0].what, "--zero 3");
}

/* Llama-2-7B on two 24 GiB devices: no single knob is enough, one combination is offered, it
 * fits, and it keeps nothing it does not need (tp went back to 1 after the search tried it). */
static void test_combined_remedy(void)
{
    coh_model_desc m;
    const char *cfg = "{\"model_type\":\"llama\",\"hidden_size\":4096,\"intermediate_size\":11008,"
                      "\"num_attention_heads\":32,\"num_hidden_layers\":32,\"vocab_size\":32000,"
                      "\"max_position_embeddings\":4096}";
    CHECK_OK(coh_model_from_hf_json(cfg, strlen(cfg), &m));
    coh_parallel_config s;
    paper_config(&s);
    s.dp = 2;
    s.nodes = 1;
    s.gpus_per_node = 2;
    uint64_t limit = (uint64_t)24 << 30;
    coh_remedy r[8];
    int n;
    CHECK_OK(coh_plan_remedies(&m, &s, limit, 0, r, 8, &n));
    CHECK_INT(n, 1);
    CHECK(r[0].total_bytes <= limit);
    CHECK_STR(r[0].what, "--zero 3 --recompute full --offload optimizer");
    CHECK_INT(r[0].strategy.tp, 1);
    CHECK_INT(r[0].strategy.dp, 2);
    coh_estimate e;
    CHECK_OK(coh_estimate_memory(&m, &r[0].strategy, &e));
    CHECK_INT(e.per_device.total_bytes, r[0].total_bytes);
    /* nothing fits a 1 MiB device */
    CHECK_OK(coh_plan_remedies(&m, &s, 1 << 20, 0, r, 8, &n));
    CHECK_INT(n, 0);
}

int main(void)
{
    RUN(test_zero_paper_example);
    RUN(test_fp32);
    RUN(test_tensor_parallel_shards);
    RUN(test_pipeline_shards);
    RUN(test_offload_matches_deepspeed);
    RUN(test_strategy_refusals);
    RUN(test_remedies);
    RUN(test_combined_remedy);
    return CHECK_REPORT();
}
