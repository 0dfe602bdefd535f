/* hf_config.c: reads a Hugging Face config.json of a GPT-2 or Llama/Mistral-family model into a
 * model description, refusing keys that would change the parameter count in ways not modelled. */
#include <stdio.h>
#include <string.h>

#include "plan/plan_int.h"
#include "util/json.h"

/* An integer key. `meaning` names it in messages; missing (or null) gives dflt when dflt > 0,
 * an error otherwise. */
static coh_status get_int(const json_value *root, const char *key, const char *meaning,
                          int64_t dflt, int64_t *out)
{
    const json_value *v = json_get(root, key);
    if (!v || v->type == JSON_NULL) {
        if (dflt > 0) {
            *out = dflt;
            return COH_OK;
        }
        return coh_errf(COH_ERR_INVALID, "config has no '%s' (the %s)", key, meaning);
    }
    if (v->type != JSON_NUMBER || !v->u.num.is_integer || v->u.num.integer < 1)
        return coh_errf(COH_ERR_INVALID,
                        "config key '%s' (the %s) at line %d must be a positive integer, got %s",
                        key, meaning, v->line, json_type_name(v->type));
    *out = v->u.num.integer;
    return COH_OK;
}

static coh_status get_bool(const json_value *root, const char *key, int dflt, int *out)
{
    const json_value *v = json_get(root, key);
    if (!v || v->type == JSON_NULL) {
        *out = dflt;
        return COH_OK;
    }
    if (v->type != JSON_BOOL)
        return coh_errf(COH_ERR_INVALID, "config key '%s' at line %d must be true or false, got %s",
                        key, v->line, json_type_name(v->type));
    *out = v->u.boolean;
    return COH_OK;
}

/* Mixture-of-experts and encoder-decoder features change the count; refuse them by name. */
static coh_status refuse_unmodelled(const json_value *root)
{
    static const char *moe_keys[] = {"num_local_experts", "num_experts", "n_routed_experts"};
    for (size_t i = 0; i < sizeof moe_keys / sizeof moe_keys[0]; i++) {
        const json_value *v = json_get(root, moe_keys[i]);
        if (v && v->type == JSON_NUMBER && v->u.num.value > 1)
            return coh_errf(COH_ERR_INVALID,
                            "config key '%s' = %g: mixture-of-experts models are not supported "
                            "(dense GPT-2 and Llama/Mistral models are)",
                            moe_keys[i], v->u.num.value);
    }
    const json_value *x = json_get(root, "add_cross_attention");
    if (x && x->type == JSON_BOOL && x->u.boolean)
        return coh_errf(COH_ERR_INVALID, "config key 'add_cross_attention' = true: cross-attention "
                                         "is not supported (decoder-only models are)");
    return COH_OK;
}

static coh_status read_gpt2(const json_value *root, coh_model_desc *m)
{
    coh_status st;
    int64_t layers = 0, dim = 0, heads = 0, vocab = 0, positions = 0, ffn = 0;
    int64_t ctx = 0;
    const json_value *nctx = json_get(root, "n_ctx");
    if (nctx && nctx->type == JSON_NUMBER && nctx->u.num.is_integer && nctx->u.num.integer > 0)
        ctx = nctx->u.num.integer; /* older configs name the context n_ctx */
    if ((st = get_int(root, "n_layer", "layer count", 0, &layers)) != COH_OK ||
        (st = get_int(root, "n_embd", "hidden size", 0, &dim)) != COH_OK ||
        (st = get_int(root, "n_head", "head count", 0, &heads)) != COH_OK ||
        (st = get_int(root, "vocab_size", "vocabulary size", 0, &vocab)) != COH_OK ||
        (st = get_int(root, "n_positions", "context length", ctx, &positions)) != COH_OK)
        return st;
    if (dim > ((int64_t)1 << 40) ||
        (st = get_int(root, "n_inner", "mlp size", 4 * dim, &ffn)) != COH_OK)
        return st != COH_OK ? st : coh_errf(COH_ERR_INVALID, "config key 'n_embd' is too large");
    if ((st = coh_model_gpt(layers, dim, heads, vocab, positions, ffn, m)) != COH_OK)
        return st;
    return get_bool(root, "tie_word_embeddings", 1, &m->tied);
}

static coh_status read_llama(const json_value *root, coh_model_desc *m)
{
    coh_status st;
    memset(m, 0, sizeof *m);
    m->arch = COH_ARCH_LLAMA;
    if ((st = get_int(root, "num_hidden_layers", "layer count", 0, &m->layers)) != COH_OK ||
        (st = get_int(root, "hidden_size", "hidden size", 0, &m->dim)) != COH_OK ||
        (st = get_int(root, "num_attention_heads", "head count", 0, &m->heads)) != COH_OK ||
        (st = get_int(root, "num_key_value_heads", "key/value head count", m->heads,
                      &m->kv_heads)) != COH_OK ||
        (st = get_int(root, "intermediate_size", "mlp size", 0, &m->ffn)) != COH_OK ||
        (st = get_int(root, "vocab_size", "vocabulary size", 0, &m->vocab)) != COH_OK ||
        (st = get_int(root, "max_position_embeddings", "context length", 0, &m->positions)) !=
            COH_OK)
        return st;
    if (m->dim % m->heads != 0 && !json_get(root, "head_dim"))
        return coh_errf(COH_ERR_INVALID,
                        "config 'hidden_size' %lld is not divisible by 'num_attention_heads' %lld "
                        "and there is no 'head_dim'",
                        (long long)m->dim, (long long)m->heads);
    if ((st = get_int(root, "head_dim", "head size", m->dim / m->heads, &m->head_dim)) != COH_OK ||
        (st = get_bool(root, "tie_word_embeddings", 0, &m->tied)) != COH_OK ||
        (st = get_bool(root, "attention_bias", 0, &m->attn_bias)) != COH_OK ||
        (st = get_bool(root, "mlp_bias", 0, &m->mlp_bias)) != COH_OK)
        return st;
    return coh_model_validate(m);
}

static coh_status read_root(const json_value *root, coh_model_desc *m)
{
    if (root->type != JSON_OBJECT)
        return coh_errf(COH_ERR_INVALID, "config must be a JSON object, got %s",
                        json_type_name(root->type));
    coh_status st = refuse_unmodelled(root);
    if (st != COH_OK)
        return st;
    const json_value *type = json_get(root, "model_type");
    const char *family = NULL;
    if (type && type->type == JSON_STRING) {
        if (strcmp(type->u.str.chars, "gpt2") == 0)
            family = "gpt2";
        else if (strcmp(type->u.str.chars, "llama") == 0 || strcmp(type->u.str.chars, "mistral") == 0)
            family = "llama";
        else
            return coh_errf(COH_ERR_INVALID,
                            "unsupported model_type '%.64s' (supported: gpt2, llama, mistral)",
                            type->u.str.chars);
    } else if (type && type->type != JSON_NULL) {
        return coh_errf(COH_ERR_INVALID, "config key 'model_type' must be a string, got %s",
                        json_type_name(type->type));
    } else if (json_get(root, "n_layer")) {
        family = "gpt2";
    } else if (json_get(root, "num_hidden_layers")) {
        family = "llama";
    } else {
        return coh_errf(COH_ERR_INVALID, "config has no layer count ('n_layer' for GPT-2 or "
                                         "'num_hidden_layers' for Llama/Mistral) and no "
                                         "'model_type'");
    }
    st = strcmp(family, "gpt2") == 0 ? read_gpt2(root, m) : read_llama(root, m);
    if (st == COH_OK) {
        const char *t = type && type->type == JSON_STRING ? type->u.str.chars : family;
        snprintf(m->name, sizeof m->name, "%.40s (config.json)", t);
    }
    return st;
}

coh_status coh_model_from_hf_json(const char *text, size_t len, coh_model_desc *out)
{
    json_doc *doc;
    coh_status st = json_parse(text, len, &doc);
    if (st != COH_OK)
        return coh_err_prefix(st, "malformed config");
    st = read_root(json_root(doc), out);
    json_free(doc);
    return st;
}

coh_status coh_model_from_hf_file(const char *path, coh_model_desc *out)
{
    json_doc *doc;
    coh_status st = json_parse_file(path, &doc);
    if (st != COH_OK)
        return st == COH_ERR_INVALID ? coh_err_prefix(st, "malformed config") : st;
    st = read_root(json_root(doc), out);
    json_free(doc);
    if (st != COH_OK)
        return coh_err_prefix(st, "config '%s'", path);
    return COH_OK;
}
