/* activations.c: activation memory after Korthikanti et al. 2022, "Reducing Activation
 * Recomputation in Large Transformer Models", Sec. 4 (per layer, tensor and sequence
 * parallelism, selective and full recompute, pipeline microbatches in flight, embedding and
 * output layers), counted tensor by tensor so that GQA and SwiGLU blocks follow the same rules. */
#include "plan/plan_int.h"

typedef unsigned __int128 u128;

static uint64_t sat(u128 v)
{
    return v > (u128)UINT64_MAX ? UINT64_MAX : (uint64_t)v;
}

int64_t plan_seq(const coh_model_desc *m, const coh_parallel_config *s)
{
    if (s->seq > 0)
        return s->seq;
    return m->arch == COH_ARCH_COUNTS ? 0 : m->positions;
}

int64_t plan_microbatches(const coh_parallel_config *s)
{
    return s->microbatches > 0 ? s->microbatches : s->pp;
}

/* Bytes of one stored activation element: the paper's 2 at 16-bit, 4 in fp32 training. */
static u128 elem_bytes(const coh_parallel_config *s)
{
    return s->precision == COH_PREC_FP32 ? 4 : 2;
}

/* One layer, one microbatch, split the way tensor and sequence parallelism split it:
 *   repl: LayerNorm inputs (2), inputs of the QKV and first MLP linears (2) and the two dropout
 *         masks (1 byte each): the paper's 10sbh, kept whole by tp, divided by t with sp;
 *   shard: Q, K, V, the attention projection's input and the MLP's inner tensors: 24sbh for
 *          GPT (f = 4h), divided by t;
 *   core: softmax output, its dropout mask and output: 5as^2b, divided by t. */
struct layer_terms {
    u128 repl, shard, core;
};

static struct layer_terms layer_terms(const coh_model_desc *m, const coh_parallel_config *s)
{
    u128 E = elem_bytes(s), M = s->dropout ? 1 : 0;
    u128 T = (u128)s->micro_batch * (u128)plan_seq(m, s), h = (u128)m->dim;
    u128 qd = (u128)m->heads * (u128)m->head_dim, kvd = (u128)m->kv_heads * (u128)m->head_dim;
    u128 f = (u128)m->ffn;
    struct layer_terms t;
    t.repl = T * h * (4 * E + 2 * M);
    u128 mlp = (m->arch == COH_ARCH_LLAMA ? 3 : 2) * T * f * E; /* gate, up, down input | gelu in, fc2 in */
    t.shard = T * (qd + 2 * kvd + qd) * E + mlp;
    /* Without dropout the softmax output feeds the value product directly: one tensor. */
    t.core = (u128)m->heads * (u128)plan_seq(m, s) * T * (s->dropout ? 2 * E + M : E);
    return t;
}

/* Stored bytes of one layer for one microbatch with no recompute. */
static u128 layer_stored(const struct layer_terms *lt, const coh_parallel_config *s)
{
    u128 t = (u128)s->tp;
    u128 repl = s->sequence_parallel ? lt->repl / t : lt->repl;
    return repl + lt->shard / t + lt->core / t;
}

uint64_t coh_activations_per_layer(const coh_model_desc *m, const coh_parallel_config *s)
{
    if (m->arch == COH_ARCH_COUNTS)
        return 0;
    struct layer_terms lt = layer_terms(m, s);
    u128 t = (u128)s->tp;
    switch (s->recompute) {
    case COH_RECOMPUTE_FULL: /* only each layer's input is kept: 2sbh */
        return sat((u128)s->micro_batch * (u128)plan_seq(m, s) * (u128)m->dim * elem_bytes(s));
    case COH_RECOMPUTE_SELECTIVE: /* the attention core is recomputed: sbh(10 + 24/t) or 34sbh/t */
        return sat((s->sequence_parallel ? lt.repl / t : lt.repl) + lt.shard / t);
    default:
        return sat(layer_stored(&lt, s));
    }
}

/* Microbatches whose activations a stage holds at its peak (for the interleaved schedule:
 * model-chunk microbatches, each covering one of the stage's v chunks, at most ceil(stage
 * layers / v) blocks). The naive schedule holds one; GPipe runs every forward first; 1F1B holds
 * pp - stage (Narayanan et al. 2021); the interleaved warm-up is Megatron's
 * (pp - stage - 1) * 2 + (v - 1) * pp, plus the one in progress. */
static int64_t in_flight(const coh_parallel_config *s, int stage)
{
    int64_t m = plan_microbatches(s), p = s->pp;
    if (p == 1 || s->schedule == COH_SCHED_NAIVE)
        return 1;
    if (s->schedule == COH_SCHED_GPIPE)
        return m;
    if (s->schedule == COH_SCHED_1F1B)
        return p - stage < m ? p - stage : m;
    int64_t v = s->virtual_stages, total = m * v;
    int64_t held = (p - stage - 1) * 2 + (v - 1) * p + 1;
    return held < total ? held : total;
}

uint64_t plan_stage_activations(const coh_model_desc *m, const coh_parallel_config *s,
                                const int64_t *stage_layers, int stage, int64_t *in_flight_out,
                                uint64_t *recompute_temp)
{
    *in_flight_out = in_flight(s, stage);
    *recompute_temp = 0;
    if (m->arch == COH_ARCH_COUNTS)
        return 0;
    u128 per_layer = coh_activations_per_layer(m, s);
    u128 layers = (u128)plan_stage_layers(m, s, stage_layers, stage);
    u128 held = (u128)*in_flight_out;
    u128 total = s->schedule == COH_SCHED_INTERLEAVED && s->pp > 1
                     ? held * ((layers + (u128)s->virtual_stages - 1) / (u128)s->virtual_stages) *
                           per_layer
                     : held * layers * per_layer;
    u128 t = (u128)s->tp, T = (u128)s->micro_batch * (u128)plan_seq(m, s), h = (u128)m->dim;
    u128 E = elem_bytes(s);
    if (stage == 0 && s->dropout) { /* embedding dropout mask, sbh (sbh/t with sp) per microbatch */
        u128 mb = s->schedule == COH_SCHED_INTERLEAVED ? (u128)(s->pp < plan_microbatches(s) ? s->pp : plan_microbatches(s)) : held;
        total += mb * (s->sequence_parallel ? T * h / t : T * h);
    }
    if (stage == s->pp - 1) { /* final norm and head inputs, fp32 logits: 4sbh/t (1 + v/h) */
        u128 mb = s->schedule == COH_SCHED_GPIPE ? held : 1;
        u128 norm_and_head = 2 * T * h * E;
        if (s->sequence_parallel)
            norm_and_head /= t;
        u128 logits = 4 * T * (u128)plan_ceil_div(m->vocab, s->tp);
        total += mb * (norm_and_head + logits);
    }
    struct layer_terms lt = layer_terms(m, s);
    if (s->recompute == COH_RECOMPUTE_FULL) /* backward rebuilds one layer's activations */
        *recompute_temp = sat(layer_stored(&lt, s));
    else if (s->recompute == COH_RECOMPUTE_SELECTIVE)
        *recompute_temp = sat(lt.core / t);
    return sat(total);
}
