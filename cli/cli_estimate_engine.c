/* cli_estimate_engine.c: `cohort estimate --engine cohort`: what cohort's own training engine
 * allocates for the configuration (its arenas and activation buffers, from the engine's pure
 * estimator), beside the published model for the same run. */
#include <stdio.h>

#include "cli.h"
#include "cli_estimate.h"
#include "cohort/json_writer.h"
#include "cohort/train.h"

static const char *cmd = "estimate";

/* The engine trains GPT-2 shapes on one device in fp32, without dropout: refuse what it cannot
 * run, naming the value. */
static int engine_config(const est_request *r, coh_gpt_config *c, int *B, int *T)
{
    const coh_model_desc *m = &r->model;
    const coh_strategy *s = &r->strategy;
    if (m->arch != COH_ARCH_GPT2)
        return cli_usage_error(cmd, "--engine cohort needs a GPT-2 model shape (--model, "
                                    "dimensions or a GPT-2 config), got '%s'", m->name);
    if (!m->tied || m->ffn != 4 * m->dim)
        return cli_usage_error(cmd, "--engine cohort models GPT-2 with tied embeddings and an "
                                    "mlp of 4 x dim = %lld (got mlp %lld, %s embeddings)",
                               (long long)(4 * m->dim), (long long)m->ffn,
                               m->tied ? "tied" : "untied");
    const char *what = s->dp > 1 ? "--dp" : s->tp > 1 ? "--tp" : s->pp > 1 ? "--pp"
                     : s->zero ? "--zero" : s->offload ? "--offload"
                     : s->recompute ? "--recompute" : s->sequence_parallel ? "--sequence-parallel"
                                                                           : NULL;
    if (what)
        return cli_usage_error(cmd, "--engine cohort: the engine in this build trains on one "
                                    "device without recompute or offload; '%s' is not available",
                               what);
    if (m->layers > 1 << 20 || m->dim > 1 << 20 || m->vocab > 1 << 30 || m->positions > 1 << 30)
        return cli_usage_error(cmd, "--engine cohort: model too large for the engine");
    *c = (coh_gpt_config){(int)m->layers, (int)m->heads, (int)m->dim, (int)m->vocab,
                          (int)m->positions};
    *B = (int)s->micro_batch;
    *T = (int)(s->seq ? s->seq : m->positions);
    return CLI_OK;
}

/* The published model for the same run: fp32 states 4 + 4 + 8, no dropout. */
static uint64_t formula_total(const est_request *r, coh_estimate *e)
{
    coh_strategy s = r->strategy;
    s.precision = COH_PREC_FP32;
    s.dropout = 0;
    return coh_estimate_memory(&r->model, &s, e) == COH_OK ? e->per_device.total_bytes : 0;
}

static void engine_json(const est_request *r, const coh_train_memory *tm, int threads,
                        uint64_t formula, int64_t params)
{
    coh_jw w;
    coh_jw_init(&w, stdout, 1);
    coh_jw_object_begin(&w);
    coh_jw_key(&w, "parameters"); coh_jw_int(&w, params);
    coh_jw_key(&w, "engine");
    coh_jw_object_begin(&w);
    const struct { const char *k; uint64_t v; } rows[] = {
        {"params", tm->params}, {"grads", tm->grads}, {"adam_m", tm->adam_m},
        {"adam_v", tm->adam_v}, {"activations", tm->activations}, {"act_grads", tm->act_grads},
        {"logits", tm->logits}, {"attention_per_thread", tm->attention}, {"threads", (uint64_t)threads},
        {"total", tm->total}};
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        coh_jw_key(&w, rows[i].k);
        coh_jw_uint(&w, rows[i].v);
    }
    coh_jw_object_end(&w);
    coh_jw_key(&w, "per_device");
    coh_jw_object_begin(&w);
    uint64_t temp = tm->act_grads + tm->logits + tm->attention * (uint64_t)threads;
    const struct { const char *k; uint64_t v; } dev[] = {
        {"params_bytes", tm->params}, {"grads_bytes", tm->grads},
        {"optimizer_bytes", tm->adam_m + tm->adam_v}, {"activations_bytes", tm->activations},
        {"temp_bytes", temp}, {"total_bytes", tm->total}};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++) {
        coh_jw_key(&w, dev[i].k);
        coh_jw_uint(&w, dev[i].v);
    }
    coh_jw_object_end(&w);
    coh_jw_key(&w, "formula_total_bytes"); coh_jw_uint(&w, formula);
    if (r->device_bytes) {
        coh_jw_key(&w, "device_memory_bytes"); coh_jw_uint(&w, r->device_bytes);
        coh_jw_key(&w, "fits"); coh_jw_bool(&w, tm->total <= r->device_bytes);
    }
    coh_jw_object_end(&w);
    coh_jw_finish(&w);
}

static void engine_text(const est_request *r, const coh_train_memory *tm, int threads, int B,
                        int T, uint64_t formula, const coh_estimate *e)
{
    char a[32], b[32];
    printf("model        %s: %lld layers, hidden %lld, %lld heads, vocab %lld, context %lld\n",
           r->model.name, (long long)r->model.layers, (long long)r->model.dim,
           (long long)r->model.heads, (long long)r->model.vocab, (long long)r->model.positions);
    printf("engine       cohort: one device, fp32, no dropout, micro batch %d x seq %d, %d "
           "threads\n\nwhat the engine allocates:\n", B, T, threads);
    const struct { const char *name; uint64_t v; } rows[] = {
        {"parameters", tm->params}, {"gradients", tm->grads},
        {"AdamW m and v", tm->adam_m + tm->adam_v}, {"activations", tm->activations},
        {"activation grads", tm->act_grads}, {"logits chunk", tm->logits},
        {"attention", tm->attention * (uint64_t)threads}, {"total", tm->total}};
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
        printf("  %-18s %14s\n", rows[i].name, est_fmt(rows[i].v, r->si, a, sizeof a));
    printf("\npublished model for the same run (fp32, no dropout): %s total, activations %s\n",
           est_fmt(formula, r->si, a, sizeof a),
           est_fmt(e->per_device.activations_bytes, r->si, b, sizeof b));
    if (r->device_bytes)
        printf("device memory %s (%s): %s\n", est_fmt(r->device_bytes, r->si, a, sizeof a),
               r->device_from, tm->total <= r->device_bytes ? "fits" : "does not fit");
}

int est_print_engine(const est_request *r)
{
    coh_gpt_config c;
    int B = 0, T = 0;
    int rc = engine_config(r, &c, &B, &T);
    if (rc != CLI_OK)
        return rc;
    if (r->threads > 0)
        coh_set_threads(r->threads);
    coh_train_memory tm;
    coh_status st = coh_train_memory_estimate(&c, B, T, &tm);
    if (st != COH_OK)
        return cli_fail(cmd, st);
    coh_estimate e;
    uint64_t formula = formula_total(r, &e);
    int threads = coh_get_threads();
    if (r->json)
        engine_json(r, &tm, threads, formula, e.counts.total);
    else
        engine_text(r, &tm, threads, B, T, formula, &e);
    return CLI_OK;
}
