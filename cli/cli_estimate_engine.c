/* cli_estimate_engine.c: `cohort estimate --engine cohort`: what cohort's own trainer holds per
 * rank for the configuration (single, ddp, ZeRO 1-3: the trainer's own prediction, from the
 * same bucket plan and shards it allocates), beside the published model for the same run. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "cli_config.h"
#include "cli_estimate.h"
#include "cohort/parallel.h"
#include "cohort/json_writer.h"
#include "cohort/train.h"

static const char *cmd = "estimate";

/* The trainer runs GPT-2 shapes in fp32 without dropout: refuse what it cannot run, naming the
 * value, and describe the run as the trainer takes it. */
static int engine_config(const est_request *r, coh_par_config *pc)
{
    const coh_model_desc *m = &r->model;
    const coh_parallel_config *s = &r->par;
    char why[160];
    if (!coh_model_trainable(m, why, sizeof why))
        return cli_usage_error(cmd, "--engine cohort needs a GPT-2 model shape (--model, "
                                    "dimensions or a GPT-2 config): %s", why);
    if (!coh_parallel_config_runnable(s, why, sizeof why))
        return cli_usage_error(cmd, "--engine cohort prices what cohort train runs: %s", why);
    if (s->strategy == COH_STRATEGY_DP)
        return cli_usage_error(cmd, "--engine cohort: strategy 'dp' has no per-rank memory "
                                    "model; use single, ddp or zero1..3");
    if (m->layers > 1 << 20 || m->dim > 1 << 20 || m->vocab > 1 << 30 || m->positions > 1 << 30)
        return cli_usage_error(cmd, "--engine cohort: model too large for the engine");
    memset(pc, 0, sizeof *pc);
    pc->train.model = (coh_gpt_config){(int)m->layers, (int)m->heads, (int)m->dim, (int)m->vocab,
                                       (int)m->positions, 0, 0};
    pc->par = *s;
    pc->train.saves = r->save;
    coh_par_config_apply(pc);
    return CLI_OK;
}

/* The published model for the same run: fp32 states 4 + 4 + 8, no dropout. */
static uint64_t formula_total(const est_request *r, coh_estimate *e)
{
    coh_parallel_config s = r->par;
    s.precision = COH_PREC_FP32;
    s.dropout = 0;
    return coh_estimate_memory(&r->model, &s, e) == COH_OK ? e->per_device.total_bytes : 0;
}

/* Pipelines: every stage's blocks, model state and total, for the text and JSON outputs. */
static void stages_text(const est_request *r, const coh_par_config *pc)
{
    char a[32], b[32];
    printf("\npipeline stages (%s, %lld microbatches):\n", coh_schedule_name(pc->par.schedule),
           (long long)pc->train.accum);
    for (int s = 0; s < pc->par.pp; s++) {
        coh_pipe_stage st;
        coh_par_memory m;
        if (coh_par_pipe_stage(pc, s, &st) || coh_par_memory_estimate_stage(pc, s, &m))
            return;
        char blocks[128];
        coh_pipe_stage_blocks(&st, blocks, sizeof blocks);
        printf("  stage %-3d blocks %-12s model state %12s, in all %12s (%d activation slots)\n",
               s, blocks, est_fmt(m.state.params + m.state.grads + m.state.optim, r->si, a, sizeof a),
               est_fmt(m.total, r->si, b, sizeof b), m.activation_slots);
    }
}

static void stages_json(coh_jw *w, const coh_par_config *pc)
{
    coh_jw_key(w, "stages");
    coh_jw_array_begin(w);
    for (int s = 0; s < pc->par.pp; s++) {
        coh_pipe_stage st;
        coh_par_memory m;
        if (coh_par_pipe_stage(pc, s, &st) || coh_par_memory_estimate_stage(pc, s, &m))
            break;
        coh_jw_object_begin(w);
        coh_jw_field_int(w, "stage", s);
        int first = -1, last = -1; /* of the blocks held: a chunk may hold none */
        for (int k = 0; k < st.chunks; k++)
            if (st.lo[k] < st.hi[k]) {
                first = first < 0 ? st.lo[k] : first;
                last = st.hi[k] - 1;
            }
        char blocks[512];
        coh_jw_field_int(w, "first_block", first);
        coh_jw_field_int(w, "last_block", last);
        coh_jw_field_string(w, "blocks", coh_pipe_stage_blocks(&st, blocks, sizeof blocks));
        coh_jw_field_uint(w, "parameters", st.params);
        coh_jw_field_uint(w, "model_state_bytes", m.state.params + m.state.grads + m.state.optim);
        coh_jw_field_uint(w, "activation_slots", (uint64_t)m.activation_slots);
        coh_jw_field_uint(w, "total_bytes", m.total);
        coh_jw_object_end(w);
    }
    coh_jw_array_end(w);
}

typedef struct engine_view {
    const char *strategy;
    coh_train_memory tm; /* the engine's own buffers (one model replica's worth) */
    coh_par_memory pm;   /* what the rank holding the most holds */
    int rank;            /* that rank */
    int threads;
} engine_view;

static void kv(coh_jw *w, const char *k, uint64_t v)
{
    coh_jw_field_uint(w, k, v);
}

static void engine_json(const est_request *r, const engine_view *v, const coh_par_config *pc,
                        uint64_t formula, int64_t params)
{
    const coh_train_memory *tm = &v->tm;
    const coh_par_memory *pb = &v->pm;
    coh_jw w;
    coh_jw_init(&w, stdout, 1);
    coh_jw_object_begin(&w);
    coh_jw_key(&w, "parameters"); coh_jw_int(&w, params);
    cli_config_json(&w, &pc->par, pc->train.seq, pc->train.accum);
    coh_jw_key(&w, "rank"); coh_jw_int(&w, v->rank); /* the rank holding the most */
    coh_jw_key(&w, "engine");
    coh_jw_object_begin(&w);
    kv(&w, "params", tm->params); kv(&w, "grads", tm->grads); kv(&w, "adam_m", tm->adam_m);
    kv(&w, "adam_v", tm->adam_v); kv(&w, "activations", tm->activations);
    kv(&w, "act_grads", tm->act_grads); kv(&w, "logits", tm->logits);
    kv(&w, "attention_per_thread", tm->attention); kv(&w, "threads", (uint64_t)v->threads);
    kv(&w, "total", tm->total);
    coh_jw_object_end(&w);
    coh_jw_key(&w, "per_device");
    coh_jw_object_begin(&w);
    kv(&w, "params_bytes", pb->state.params); kv(&w, "grads_bytes", pb->state.grads);
    kv(&w, "optimizer_bytes", pb->state.optim); kv(&w, "activations_bytes", tm->activations);
    kv(&w, "temp_bytes", pb->engine - tm->activations + pb->gathered + pb->grad_buckets);
    kv(&w, "comm_bytes", pb->comm);
    kv(&w, "model_state_bytes", pb->state.params + pb->state.grads + pb->state.optim);
    kv(&w, "gathered_params_bytes", pb->gathered);
    kv(&w, "grad_buckets_bytes", pb->grad_buckets);
    kv(&w, "save_bytes", pb->save);
    kv(&w, "total_bytes", pb->total);
    coh_jw_object_end(&w);
    kv(&w, "formula_total_bytes", formula);
    if (pc->par.pp > 1)
        stages_json(&w, pc);
    if (r->device_bytes) {
        kv(&w, "device_memory_bytes", r->device_bytes);
        coh_jw_key(&w, "fits"); coh_jw_bool(&w, pb->total <= r->device_bytes);
    }
    coh_jw_object_end(&w);
    coh_jw_finish(&w);
}

/* engine - listed, 0 where the listed rows exceed it (a stage against the whole model's rows) */
static uint64_t less_or_zero(uint64_t engine, uint64_t listed)
{
    return engine > listed ? engine - listed : 0;
}

static void engine_text(const est_request *r, const engine_view *v, const coh_par_config *pc,
                        uint64_t formula, const coh_estimate *e)
{
    const coh_train_memory *tm = &v->tm;
    const coh_par_memory *pb = &v->pm;
    char a[32], b[32];
    printf("model        %s: %lld layers, hidden %lld, %lld heads, vocab %lld, context %lld\n",
           r->model.name, (long long)r->model.layers, (long long)r->model.dim,
           (long long)r->model.heads, (long long)r->model.vocab, (long long)r->model.positions);
    printf("engine       cohort: %s over %d rank%s", v->strategy, pc->par.dp,
           pc->par.dp > 1 ? "s" : "");
    if (pc->par.pp > 1 || pc->par.tp > 1)
        printf(" x pp %d x tp %d (mesh %dx%dx%d)", pc->par.pp, pc->par.tp, pc->par.dp, pc->par.pp,
               pc->par.tp);
    printf(", fp32, no dropout, micro batch %d x seq %d, accumulation %d, %d threads\n\n",
           pc->train.batch, pc->train.seq, pc->train.accum, v->threads);
    if (pc->par.tp > 1)
        printf("one tensor-parallel shard (1 of %d): its heads, MLP columns and vocabulary rows, "
               "the replicated LayerNorms, position embedding and row-parallel biases\n",
               pc->par.tp);
    printf("what %s %d holds at its peak:\n", pc->par.pp > 1 ? "pipeline stage" : "rank", v->rank);
    const struct { const char *name; uint64_t v; } rows[] = {
        {"parameters", pb->state.params}, {"gradients", pb->state.grads}, {"AdamW m and v", pb->state.optim},
        {"activations", tm->activations}, {"activation grads", tm->act_grads},
        {"logits chunk", tm->logits}, {"attention", tm->attention * (uint64_t)v->threads},
        {"token buffers", less_or_zero(pb->engine, tm->total - 4 * tm->params)},
        {"gathered layers", pb->gathered}, {"gradient buckets", pb->grad_buckets},
        {"communication", pb->comm}, {"checkpoint save", pb->save}, {"total", pb->total}};
    /* A pipeline stage's engine buffers are its own chunks' (the breakdown above is the whole
     * model's), so a stage shows them as one row. */
    int stage = pc->par.pp > 1;
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        if (stage && i >= 3 && i <= 7) {
            if (i == 3)
                printf("  %-18s %14s\n", "engine buffers", est_fmt(pb->engine, r->si, a, sizeof a));
            continue;
        }
        if (rows[i].v || strcmp(rows[i].name, "checkpoint save")) /* with --save only */
            printf("  %-18s %14s\n", rows[i].name, est_fmt(rows[i].v, r->si, a, sizeof a));
    }
    printf("\npublished model for the same run (fp32, no dropout): %s total, activations %s\n",
           est_fmt(formula, r->si, a, sizeof a),
           est_fmt(e->per_device.activations_bytes, r->si, b, sizeof b));
    if (r->device_bytes)
        printf("device memory %s (%s): %s\n", est_fmt(r->device_bytes, r->si, a, sizeof a),
               r->device_from, pb->total <= r->device_bytes ? "fits" : "does not fit");
}

/* The rank holding the most (ranks differ only by the last one's shard tails; pipeline stages
 * by their blocks, the first and last also by the embeddings and the head). */
static coh_status predict(const coh_par_config *pc, engine_view *v)
{
    int dp = pc->par.dp, pp = pc->par.pp;
    coh_par_memory m;
    coh_status st = COH_OK;
    for (int s = 0; pp > 1 && !st && s < pp; s++) {
        if (!(st = coh_par_memory_estimate_stage(pc, s, &m)) && (s == 0 || m.total > v->pm.total)) {
            v->pm = m;
            v->rank = s; /* the stage */
        }
    }
    if (pp > 1)
        return st;
    st = coh_par_memory_estimate(pc, dp, 0, &v->pm);
    if (!st)
        st = coh_par_memory_estimate(pc, dp, dp - 1, &m);
    if (!st && m.total > v->pm.total) {
        v->pm = m;
        v->rank = dp - 1;
    }
    return st;
}

int est_print_engine(const est_request *r)
{
    coh_par_config pc;
    int rc = engine_config(r, &pc);
    if (rc != CLI_OK)
        return rc;
    if (r->threads > 0)
        coh_set_threads(r->threads);
    engine_view v = {.threads = coh_get_threads(), .strategy = coh_strategy_name(pc.par.strategy)};
    coh_status st = coh_train_memory_estimate(&pc.train.model, pc.train.batch, pc.train.seq, &v.tm);
    if (st == COH_OK)
        st = predict(&pc, &v);
    if (st != COH_OK)
        return cli_fail(cmd, st);
    coh_estimate e;
    uint64_t formula = formula_total(r, &e);
    if (r->json)
        engine_json(r, &v, &pc, formula, e.counts.total);
    else
        engine_text(r, &v, &pc, formula, &e);
    if (!r->json && pc.par.pp > 1)
        stages_text(r, &pc);
    return CLI_OK;
}
