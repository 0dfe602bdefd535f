/* model.c: model descriptions (presets, custom GPT dimensions, bare counts) and their exact
 * parameter counts, whole and per tensor-parallel / pipeline shard. */
#include <stdio.h>
#include <string.h>

#include "plan/plan_int.h"

int64_t plan_mul(int64_t a, int64_t b)
{
    if (a <= 0 || b <= 0)
        return 0;
    if (a > INT64_MAX / b)
        return INT64_MAX;
    return a * b;
}

int64_t plan_add(int64_t a, int64_t b)
{
    return a > INT64_MAX - b ? INT64_MAX : a + b;
}

int64_t plan_ceil_div(int64_t a, int64_t b)
{
    return a / b + (a % b != 0);
}

static const struct {
    const char *name;
    int64_t layers, dim, heads;
} presets[] = {
    {"gpt2", 12, 768, 12},
    {"gpt2-medium", 24, 1024, 16},
    {"gpt2-large", 36, 1280, 20},
    {"gpt2-xl", 48, 1600, 25},
};

coh_status coh_model_preset(const char *name, coh_model_desc *out)
{
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++) {
        if (name && strcmp(name, presets[i].name) == 0) {
            coh_status st = coh_model_gpt(presets[i].layers, presets[i].dim, presets[i].heads,
                                          50257, 1024, 0, out);
            snprintf(out->name, sizeof out->name, "%s", presets[i].name);
            return st;
        }
    }
    return coh_errf(COH_ERR_INVALID,
                    "unknown model preset '%s': valid are gpt2, gpt2-medium, gpt2-large, gpt2-xl",
                    name ? name : "");
}

coh_status coh_model_gpt(int64_t layers, int64_t dim, int64_t heads, int64_t vocab,
                         int64_t positions, int64_t ffn, coh_model_desc *out)
{
    memset(out, 0, sizeof *out);
    out->arch = COH_ARCH_GPT2;
    snprintf(out->name, sizeof out->name, "gpt (custom)");
    out->layers = layers;
    out->dim = dim;
    out->heads = heads;
    out->kv_heads = heads;
    out->head_dim = heads > 0 ? dim / heads : 0;
    out->ffn = ffn ? ffn : plan_mul(4, dim);
    out->vocab = vocab;
    out->positions = positions;
    out->tied = 1;
    return coh_model_validate(out);
}

coh_status coh_model_counts(int64_t params, int64_t largest_layer, coh_model_desc *out)
{
    memset(out, 0, sizeof *out);
    out->arch = COH_ARCH_COUNTS;
    snprintf(out->name, sizeof out->name, "parameter count");
    out->count_params = params;
    out->count_largest = largest_layer;
    return coh_model_validate(out);
}

/* Bounds generous enough for any published model, tight enough that products of a few of them
 * stay far from int64 overflow. */
static coh_status check_range(const char *what, int64_t v, int64_t max)
{
    if (v < 1 || v > max)
        return coh_errf(COH_ERR_INVALID, "invalid %s '%lld': must be between 1 and %lld", what,
                        (long long)v, (long long)max);
    return COH_OK;
}

static coh_status validate_counts(const coh_model_desc *m)
{
    coh_status st = check_range("parameter count", m->count_params, (int64_t)1 << 50);
    if (st != COH_OK)
        return st;
    if (m->count_largest < 0 || m->count_largest > m->count_params)
        return coh_errf(COH_ERR_INVALID,
                        "invalid largest layer '%lld': must be between 1 and the parameter count "
                        "%lld",
                        (long long)m->count_largest, (long long)m->count_params);
    return COH_OK;
}

int coh_model_trainable(const coh_model_desc *m, char *why, size_t cap)
{
    char buf[320] = "";
    if (m->arch == COH_ARCH_COUNTS)
        snprintf(buf, sizeof buf, "a bare parameter count: cohort train needs a GPT-2 shape "
                 "(--model or --layers/--dim/--heads/--vocab)");
    else if (m->arch != COH_ARCH_GPT2)
        snprintf(buf, sizeof buf, "'%s' is a Llama-family model: cohort train trains GPT-2 only",
                 m->name);
    else if (!m->tied || m->ffn != 4 * m->dim || m->kv_heads != m->heads ||
             m->head_dim * m->heads != m->dim)
        snprintf(buf, sizeof buf, "cohort train's GPT-2 has tied embeddings and an mlp of 4 x dim "
                 "= %lld (this model: mlp %lld, %s embeddings)", (long long)(4 * m->dim),
                 (long long)m->ffn, m->tied ? "tied" : "untied");
    if (why && cap)
        snprintf(why, cap, "%s", buf);
    return buf[0] == '\0';
}

static coh_status check_total(const coh_model_desc *m);

coh_status coh_model_validate(const coh_model_desc *m)
{
    if (m->arch == COH_ARCH_COUNTS)
        return validate_counts(m);
    coh_status st;
    if ((st = check_range("layer count", m->layers, 100000)) != COH_OK ||
        (st = check_range("hidden size", m->dim, (int64_t)1 << 20)) != COH_OK ||
        (st = check_range("head count", m->heads, (int64_t)1 << 16)) != COH_OK ||
        (st = check_range("key/value head count", m->kv_heads, (int64_t)1 << 16)) != COH_OK ||
        (st = check_range("head size", m->head_dim, (int64_t)1 << 16)) != COH_OK ||
        (st = check_range("mlp size", m->ffn, (int64_t)1 << 24)) != COH_OK ||
        (st = check_range("vocabulary size", m->vocab, (int64_t)1 << 30)) != COH_OK ||
        (st = check_range("context length", m->positions, (int64_t)1 << 30)) != COH_OK)
        return st;
    if (m->arch == COH_ARCH_GPT2 && m->dim % m->heads != 0)
        return coh_errf(COH_ERR_INVALID,
                        "hidden size %lld is not divisible by the head count %lld",
                        (long long)m->dim, (long long)m->heads);
    if (m->heads % m->kv_heads != 0)
        return coh_errf(COH_ERR_INVALID,
                        "head count %lld is not divisible by the key/value head count %lld",
                        (long long)m->heads, (long long)m->kv_heads);
    return check_total(m);
}

/* One block's parameters split by how tensor parallelism treats them: `sharded` is divided
 * among the tp ranks (Megatron's column/row split), `replicated` is held by every rank. */
static void layer_parts(const coh_model_desc *m, int64_t *sharded, int64_t *replicated)
{
    int64_t h = m->dim, f = m->ffn;
    if (m->arch == COH_ARCH_GPT2) {
        /* c_attn (h x 3h + 3h), attn c_proj (h x h), c_fc (h x f + f), mlp c_proj (f x h) are
         * split; the row-parallel biases (2 x h) and both LayerNorms (2 x 2h) are not. */
        *sharded = 4 * h * h + 3 * h + 2 * h * f + f;
        *replicated = 2 * h + 4 * h;
        return;
    }
    int64_t qd = m->heads * m->head_dim, kvd = m->kv_heads * m->head_dim;
    *sharded = h * qd + 2 * h * kvd + qd * h + 3 * h * f;
    *replicated = 2 * h; /* two RMSNorm weights */
    if (m->attn_bias) {
        *sharded += qd + 2 * kvd;
        *replicated += h; /* o_proj bias, row-parallel */
    }
    if (m->mlp_bias) {
        *sharded += 2 * f;
        *replicated += h; /* down_proj bias */
    }
}

int64_t plan_layer_params_local(const coh_model_desc *m, int tp)
{
    if (m->arch == COH_ARCH_COUNTS)
        return 0;
    int64_t sharded, replicated;
    layer_parts(m, &sharded, &replicated);
    return plan_ceil_div(sharded, tp) + replicated;
}

/* The single module with the most parameters of its own, as DeepSpeed's model_to_params finds
 * it: the embedding, an untied head, or the largest linear of a block. */
static int64_t largest_module(const coh_model_desc *m)
{
    int64_t h = m->dim, f = m->ffn, best = m->vocab * h;
    if (m->arch == COH_ARCH_GPT2) {
        int64_t cand[] = {m->positions * h, 3 * h * h + 3 * h, h * f + f, f * h + h};
        for (size_t i = 0; i < sizeof cand / sizeof cand[0]; i++)
            best = cand[i] > best ? cand[i] : best;
        return best;
    }
    int64_t qd = m->heads * m->head_dim;
    int64_t cand[] = {h * qd + (m->attn_bias ? qd : 0), h * f + (m->mlp_bias ? f : 0),
                      f * h + (m->mlp_bias ? h : 0)};
    for (size_t i = 0; i < sizeof cand / sizeof cand[0]; i++)
        best = cand[i] > best ? cand[i] : best;
    return best;
}

/* The counts of a shape whose dimensions are in range (not COH_ARCH_COUNTS). */
static void count_shape(const coh_model_desc *m, coh_param_count *out)
{
    int64_t h = m->dim, sharded, replicated;
    layer_parts(m, &sharded, &replicated);
    out->embedding = m->vocab * h;
    out->positions = m->arch == COH_ARCH_GPT2 ? m->positions * h : 0;
    out->per_layer = sharded + replicated;
    out->final_norm = m->arch == COH_ARCH_GPT2 ? 2 * h : h;
    out->lm_head = m->tied ? 0 : m->vocab * h;
    out->total = plan_add(plan_add(out->embedding, out->positions),
                          plan_add(plan_mul(m->layers, out->per_layer),
                                   out->final_norm + out->lm_head));
    out->largest_layer = out->embedding > out->per_layer ? out->embedding : out->per_layer;
    out->largest_module = largest_module(m);
}

/* Dimensions each in range can still multiply past what --params takes, and the bytes of
 * their states past 64 bits: refuse them as --params would. */
static coh_status check_total(const coh_model_desc *m)
{
    coh_param_count c;
    count_shape(m, &c);
    if (c.total <= (int64_t)1 << 50)
        return COH_OK;
    return coh_errf(COH_ERR_INVALID, "model out of range: %.3g parameters (%lld layers, dim "
                    "%lld, vocabulary %lld) are more than 2^50, the most --params takes",
                    (double)m->layers * (double)c.per_layer +
                        (double)c.embedding * (m->tied ? 1 : 2) + (double)c.positions,
                    (long long)m->layers, (long long)m->dim, (long long)m->vocab);
}

coh_status coh_model_count(const coh_model_desc *m, coh_param_count *out)
{
    memset(out, 0, sizeof *out);
    coh_status st = coh_model_validate(m);
    if (st != COH_OK)
        return st;
    if (m->arch == COH_ARCH_COUNTS) {
        out->total = m->count_params;
        out->largest_layer = m->count_largest;
        out->largest_module = m->count_largest;
        return COH_OK;
    }
    count_shape(m, out);
    return COH_OK;
}

int64_t plan_largest_layer_local(const coh_model_desc *m, int tp)
{
    if (m->arch == COH_ARCH_COUNTS)
        return plan_ceil_div(m->count_largest, tp);
    int64_t emb = plan_ceil_div(m->vocab, tp) * m->dim;
    int64_t layer = plan_layer_params_local(m, tp);
    return emb > layer ? emb : layer;
}

int64_t plan_stage_layers(const coh_model_desc *m, const coh_parallel_config *s,
                          const int64_t *layers, int stage)
{
    if (m->arch == COH_ARCH_COUNTS)
        return 0;
    if (layers)
        return layers[stage];
    /* Uneven splits give the first (layers mod pp) stages one block more. */
    int64_t base = m->layers / s->pp, extra = m->layers % s->pp;
    return base + (stage < extra ? 1 : 0);
}

int64_t plan_stage_params(const coh_model_desc *m, const coh_parallel_config *s,
                          const int64_t *layers, int stage)
{
    if (m->arch == COH_ARCH_COUNTS) /* no structure: an even split is all we can say */
        return plan_ceil_div(m->count_params, (int64_t)s->tp * s->pp);
    int64_t h = m->dim, n = plan_mul(plan_stage_layers(m, s, layers, stage),
                                          plan_layer_params_local(m, s->tp));
    int64_t vocab_shard = plan_ceil_div(m->vocab, s->tp) * h; /* vocab-parallel embedding */
    if (stage == 0) {
        n = plan_add(n, vocab_shard);
        if (m->arch == COH_ARCH_GPT2)
            n = plan_add(n, m->positions * h); /* replicated */
    }
    if (stage == s->pp - 1) {
        n = plan_add(n, m->arch == COH_ARCH_GPT2 ? 2 * h : h);
        /* An untied head lives here; a tied one needs its own copy when the embedding is on
         * another stage (Megatron keeps both and sums their gradients). */
        if (!m->tied || s->pp > 1)
            n = plan_add(n, vocab_shard);
    }
    return n;
}
