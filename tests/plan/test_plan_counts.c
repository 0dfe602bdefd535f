/* test_plan_counts.c: exact parameter counts (GPT-2 family against an independent closed form and
 * the published sizes; Llama-family configs read from config.json) and the config reader's
 * refusals. */
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "cohort/plan.h"

/* GPT-2 as published by OpenAI/Hugging Face, counted independently of src/plan: each block
 * 12h^2 + 13h, token and position tables, final LayerNorm 2h, LM head tied. */
static long long gpt2_closed_form(long long L, long long h)
{
    return L * (12 * h * h + 13 * h) + 50257 * h + 1024 * h + 2 * h;
}

static void test_gpt2_family(void)
{
    static const struct {
        const char *name;
        long long layers, dim, published;
    } cases[] = {
        {"gpt2", 12, 768, 124439808},
        {"gpt2-medium", 24, 1024, 354823168},
        {"gpt2-large", 36, 1280, 774030080},
        {"gpt2-xl", 48, 1600, 1557611200},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        coh_model_desc m;
        coh_param_count c;
        CHECK_OK(coh_model_preset(cases[i].name, &m));
        CHECK_OK(coh_model_count(&m, &c));
        CHECK_INT(c.total, cases[i].published);
        CHECK_INT(c.total, gpt2_closed_form(cases[i].layers, cases[i].dim));
        /* the token table (50257 x h) outweighs one block (12h^2 + 13h) at these sizes */
        CHECK_INT(c.largest_layer, 50257 * cases[i].dim);
        CHECK_INT(c.per_layer, 12 * cases[i].dim * cases[i].dim + 13 * cases[i].dim);
    }
}

static void test_custom_gpt(void)
{
    coh_model_desc m;
    coh_param_count c;
    /* ffn given explicitly: block = 4h^2 + 2hf + 9h + f */
    CHECK_OK(coh_model_gpt(2, 64, 4, 1000, 128, 100, &m));
    CHECK_OK(coh_model_count(&m, &c));
    CHECK_INT(c.per_layer, 4 * 64 * 64 + 2 * 64 * 100 + 9 * 64 + 100);
    CHECK_INT(c.total, 2 * c.per_layer + 1000 * 64 + 128 * 64 + 2 * 64);
    CHECK_FAILS(coh_model_gpt(2, 64, 5, 1000, 128, 0, &m), COH_ERR_INVALID,
                "hidden size 64 is not divisible by the head count 5");
    CHECK_FAILS(coh_model_gpt(0, 64, 4, 1000, 128, 0, &m), COH_ERR_INVALID,
                "invalid layer count '0'");
    CHECK_FAILS(coh_model_preset("gpt3", &m), COH_ERR_INVALID, "unknown model preset 'gpt3'");
}

static coh_status from_text(const char *json, coh_model_desc *m)
{
    return coh_model_from_hf_json(json, strlen(json), m);
}

/* meta-llama/Llama-2-7b-hf's config.json (the keys that matter). */
static const char llama2_7b[] =
    "{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\", \"hidden_size\": 4096,"
    " \"intermediate_size\": 11008, \"max_position_embeddings\": 4096, \"num_attention_heads\": 32,"
    " \"num_hidden_layers\": 32, \"num_key_value_heads\": 32, \"rms_norm_eps\": 1e-05,"
    " \"tie_word_embeddings\": false, \"torch_dtype\": \"float16\", \"vocab_size\": 32000}";

/* meta-llama/Llama-3.2-1B: GQA (8 kv heads), explicit head_dim, tied embeddings. */
static const char llama32_1b[] =
    "{\"model_type\": \"llama\", \"hidden_size\": 2048, \"intermediate_size\": 8192,"
    " \"max_position_embeddings\": 131072, \"num_attention_heads\": 32, \"head_dim\": 64,"
    " \"num_hidden_layers\": 16, \"num_key_value_heads\": 8, \"tie_word_embeddings\": true,"
    " \"vocab_size\": 128256, \"rope_scaling\": {\"factor\": 32.0}}";

static void test_llama_configs(void)
{
    coh_model_desc m;
    coh_param_count c;
    CHECK_OK(from_text(llama2_7b, &m));
    CHECK_OK(coh_model_count(&m, &c));
    CHECK_INT(c.total, 6738415616LL); /* published size of Llama-2-7B */
    /* block: 4 h^2 attention + 3 h f SwiGLU + 2 h RMSNorm */
    CHECK_INT(c.per_layer, 4LL * 4096 * 4096 + 3LL * 4096 * 11008 + 2 * 4096);
    CHECK_INT(c.largest_layer, c.per_layer);
    CHECK_INT(c.largest_module, 32000LL * 4096); /* embedding == untied head */
    CHECK_INT(m.positions, 4096);
    CHECK(!m.tied);

    CHECK_OK(from_text(llama32_1b, &m));
    CHECK_OK(coh_model_count(&m, &c));
    CHECK_INT(c.total, 1235814400LL); /* published size of Llama-3.2-1B */
    CHECK_INT(m.kv_heads, 8);
    CHECK(m.tied);
}

static void test_llama_biases_and_mistral(void)
{
    coh_model_desc m;
    coh_param_count base, biased;
    const char *plain = "{\"model_type\":\"mistral\",\"hidden_size\":64,\"intermediate_size\":96,"
                        "\"max_position_embeddings\":256,\"num_attention_heads\":4,"
                        "\"num_hidden_layers\":3,\"num_key_value_heads\":2,\"vocab_size\":500,"
                        "\"sliding_window\":128}";
    CHECK_OK(from_text(plain, &m));
    CHECK_OK(coh_model_count(&m, &base));
    /* q 64x64, k and v 64x32, o 64x64, 3 x 64x96, 2 norms of 64 */
    CHECK_INT(base.per_layer, 64 * 64 * 2 + 2 * 64 * 32 + 3 * 64 * 96 + 2 * 64);
    CHECK_INT(base.total, 3 * base.per_layer + 2 * 500 * 64 + 64);
    const char *bias = "{\"model_type\":\"llama\",\"hidden_size\":64,\"intermediate_size\":96,"
                       "\"max_position_embeddings\":256,\"num_attention_heads\":4,"
                       "\"num_hidden_layers\":3,\"num_key_value_heads\":2,\"vocab_size\":500,"
                       "\"attention_bias\":true,\"mlp_bias\":true}";
    CHECK_OK(from_text(bias, &m));
    CHECK_OK(coh_model_count(&m, &biased));
    /* q, k, v, o biases (64 + 32 + 32 + 64) and gate, up, down biases (96 + 96 + 64) */
    CHECK_INT(biased.per_layer - base.per_layer, 64 + 32 + 32 + 64 + 96 + 96 + 64);
}

static void test_gpt2_config(void)
{
    coh_model_desc m;
    coh_param_count c;
    CHECK_OK(from_text("{\"model_type\":\"gpt2\",\"n_layer\":12,\"n_embd\":768,\"n_head\":12,"
                       "\"n_positions\":1024,\"vocab_size\":50257,\"n_inner\":null}",
                       &m));
    CHECK_OK(coh_model_count(&m, &c));
    CHECK_INT(c.total, 124439808);
    /* no model_type: the keys tell; n_ctx is the older name of the context */
    CHECK_OK(from_text("{\"n_layer\":2,\"n_embd\":64,\"n_head\":4,\"n_ctx\":32,\"vocab_size\":100,"
                       "\"n_inner\":128}",
                       &m));
    CHECK_INT(m.positions, 32);
    CHECK_INT(m.ffn, 128);
}

static void test_config_errors(void)
{
    coh_model_desc m;
    CHECK_FAILS(from_text("{\"n_layer\": 2,", &m), COH_ERR_INVALID, "malformed config");
    CHECK_FAILS(from_text("[1,2]", &m), COH_ERR_INVALID, "config must be a JSON object");
    CHECK_FAILS(from_text("{\"hidden_size\": 64}", &m), COH_ERR_INVALID, "config has no layer count");
    CHECK_FAILS(from_text("{\"model_type\":\"llama\",\"num_hidden_layers\":2}", &m), COH_ERR_INVALID,
                "config has no 'hidden_size'");
    CHECK_FAILS(from_text("{\"model_type\":\"t5\",\"num_layers\":2}", &m), COH_ERR_INVALID,
                "unsupported model_type 't5'");
    CHECK_FAILS(from_text("{\"n_layer\":2,\"n_embd\":64,\"n_head\":\"4\",\"n_positions\":32,"
                          "\"vocab_size\":100}",
                          &m),
                COH_ERR_INVALID, "config key 'n_head' (the head count) at line 1 must be a positive integer");
    CHECK_FAILS(from_text("{\"model_type\":\"mistral\",\"num_local_experts\":8,"
                          "\"num_hidden_layers\":2}",
                          &m),
                COH_ERR_INVALID, "'num_local_experts' = 8: mixture-of-experts");
    CHECK_FAILS(from_text("{\"n_layer\":2,\"n_embd\":64,\"n_head\":4,\"n_positions\":32,"
                          "\"vocab_size\":100,\"tie_word_embeddings\":1}",
                          &m),
                COH_ERR_INVALID, "'tie_word_embeddings' at line 1 must be true or false");
    CHECK_FAILS(from_text("{\"n_layer\":2,\"n_embd\":64,\"n_head\":4,\"n_positions\":32,"
                          "\"vocab_size\":100,\"add_cross_attention\":true}",
                          &m),
                COH_ERR_INVALID, "cross-attention");
    CHECK_FAILS(from_text("{\"model_type\":\"llama\",\"num_hidden_layers\":2,\"hidden_size\":64,"
                          "\"num_attention_heads\":4,\"num_key_value_heads\":3,"
                          "\"intermediate_size\":96,\"vocab_size\":10,"
                          "\"max_position_embeddings\":16}",
                          &m),
                COH_ERR_INVALID, "head count 4 is not divisible by the key/value head count 3");
    CHECK_FAILS(coh_model_from_hf_file("/nonexistent/config.json", &m), COH_ERR_IO,
                "cannot open '/nonexistent/config.json'");
}

static void test_count_parse(void)
{
    int64_t n;
    CHECK_OK(coh_count_parse("7.5e9", &n));
    CHECK_INT(n, 7500000000LL);
    CHECK_OK(coh_count_parse("2851e6", &n));
    CHECK_INT(n, 2851000000LL);
    CHECK_OK(coh_count_parse("350M", &n));
    CHECK_INT(n, 350000000);
    CHECK_OK(coh_count_parse("7.5B", &n));
    CHECK_INT(n, 7500000000LL);
    /* decimals that binary floating point misses by a hair are still whole counts */
    CHECK_OK(coh_count_parse("8.2B", &n));
    CHECK_INT(n, 8200000000LL);
    CHECK_OK(coh_count_parse("4.1B", &n));
    CHECK_INT(n, 4100000000LL);
    CHECK_OK(coh_count_parse("16.1M", &n));
    CHECK_INT(n, 16100000);
    CHECK_OK(coh_count_parse("1125.899906842624T", &n));
    CHECK_INT(n, 1125899906842624LL);
    CHECK_FAILS(coh_count_parse("1125899906842625", &n), COH_ERR_INVALID, "up to 2^50");
    CHECK_FAILS(coh_count_parse("0x10", &n), COH_ERR_INVALID, "invalid parameter count '0x10'");
    CHECK_FAILS(coh_count_parse("-5", &n), COH_ERR_INVALID, "invalid parameter count '-5'");
    CHECK_FAILS(coh_count_parse("1.5", &n), COH_ERR_INVALID, "positive whole number");
    CHECK_FAILS(coh_count_parse("12x", &n), COH_ERR_INVALID, "invalid parameter count '12x'");
    CHECK_FAILS(coh_count_parse("1e300", &n), COH_ERR_INVALID, "up to 2^50");
}

int main(void)
{
    RUN(test_gpt2_family);
    RUN(test_custom_gpt);
    RUN(test_llama_configs);
    RUN(test_llama_biases_and_mistral);
    RUN(test_gpt2_config);
    RUN(test_config_errors);
    RUN(test_count_parse);
    return CHECK_REPORT();
}
