/* memory.c: checks a strategy against a model and adds up what each device holds: model states
 * after Rajbhandari et al. 2020 (ZeRO) with tp/pp sharding, activations (activations.c), the
 * ZeRO-3 gathered layer and offloaded state. */
#include <stdio.h>
#include <string.h>

#include "plan/plan_int.h"

static coh_status check_degree(const char *what, int64_t v, int64_t max)
{
    if (v < 1 || v > max)
        return coh_errf(COH_ERR_INVALID, "invalid %s '%lld': must be between 1 and %lld", what,
                        (long long)v, (long long)max);
    return COH_OK;
}

/* The tensor-parallel sizes that split m into whole heads and MLP columns, "1, 2, 4". */
static void valid_tp(const coh_model_desc *m, char *buf, size_t cap)
{
    size_t n = 0;
    buf[0] = '\0';
    for (long long t = 1; t <= m->heads && n < cap; t++)
        if (m->heads % t == 0 && m->kv_heads % t == 0 && m->ffn % t == 0)
            n += (size_t)snprintf(buf + n, cap - n, "%s%lld", n ? ", " : "", t);
}

static coh_status check_tp(const coh_model_desc *m, const coh_parallel_config *s)
{
    if (m->arch == COH_ARCH_COUNTS || s->tp == 1)
        return COH_OK;
    char ok[160];
    valid_tp(m, ok, sizeof ok);
    if (m->heads % s->tp != 0)
        return coh_errf(COH_ERR_INVALID, "tensor parallel size %d does not divide the %lld "
                        "attention heads (valid: %s)", s->tp, (long long)m->heads, ok);
    if (m->kv_heads % s->tp != 0)
        return coh_errf(COH_ERR_INVALID, "tensor parallel size %d does not divide the %lld "
                        "key/value heads (valid: %s)", s->tp, (long long)m->kv_heads, ok);
    if (m->ffn % s->tp != 0)
        return coh_errf(COH_ERR_INVALID, "tensor parallel size %d does not divide the mlp size "
                        "%lld (valid: %s)", s->tp, (long long)m->ffn, ok);
    if (s->sequence_parallel && plan_seq(m, s) % s->tp != 0)
        return coh_errf(COH_ERR_INVALID,
                        "sequence parallelism needs the sequence length %lld to be divisible by "
                        "the tensor parallel size %d",
                        (long long)plan_seq(m, s), s->tp);
    return COH_OK;
}

static coh_status check_pipeline(const coh_model_desc *m, const coh_parallel_config *s)
{
    if (m->arch != COH_ARCH_COUNTS && s->pp > m->layers)
        return coh_errf(COH_ERR_INVALID, "pipeline parallel size %d is larger than the %lld layers",
                        s->pp, (long long)m->layers);
    if (s->schedule != COH_SCHED_INTERLEAVED) {
        if (s->virtual_stages != 1)
            return coh_errf(COH_ERR_INVALID,
                            "virtual stages %d need the interleaved schedule (--schedule "
                            "interleaved)",
                            s->virtual_stages);
        return COH_OK;
    }
    int64_t v = s->virtual_stages, mb = plan_microbatches(s);
    if (s->pp < 2 || v < 2)
        return coh_errf(COH_ERR_INVALID,
                        "the interleaved schedule needs pp >= 2 and virtual stages >= 2 (got pp %d, "
                        "virtual stages %lld)",
                        s->pp, (long long)v);
    /* a block in every chunk; any count of them (Llama 3 405B's 126 blocks on 16 stages): the
     * trainer's split balances uneven chunks, as for the other schedules */
    if (m->arch != COH_ARCH_COUNTS && m->layers < (int64_t)s->pp * v)
        return coh_errf(COH_ERR_INVALID,
                        "the interleaved schedule needs a block in each of its pp %d x virtual "
                        "stages %lld = %lld chunks: the model has %lld layers",
                        s->pp, (long long)v, (long long)(s->pp * v), (long long)m->layers);
    if (mb % s->pp != 0)
        return coh_errf(COH_ERR_INVALID,
                        "the interleaved schedule needs the %lld microbatches to be a multiple of "
                        "pp %d",
                        (long long)mb, s->pp);
    return COH_OK;
}

static coh_status check_devices(const coh_parallel_config *s)
{
    if (!s->nodes && !s->gpus_per_node)
        return COH_OK;
    if (!s->gpus_per_node)
        return coh_errf(COH_ERR_INVALID, "--nodes %d needs --gpus-per-node", s->nodes);
    int64_t nodes = s->nodes ? s->nodes : 1, devices = nodes * s->gpus_per_node;
    int64_t used = (int64_t)s->dp * s->tp * s->pp;
    if (used != devices)
        return coh_errf(COH_ERR_INVALID,
                        "dp %d x tp %d x pp %d = %lld devices does not match %lld node(s) x %d "
                        "GPUs per node = %lld",
                        s->dp, s->tp, s->pp, (long long)used, (long long)nodes, s->gpus_per_node,
                        (long long)devices);
    return COH_OK;
}

static coh_status check_options(const coh_model_desc *m, const coh_parallel_config *s)
{
    if ((unsigned)s->strategy >= COH_STRATEGY_COUNT)
        return coh_errf(COH_ERR_INVALID, "invalid strategy '%d'", (int)s->strategy);
    int zero = coh_strategy_zero_stage(s->strategy);
    if (s->offload == COH_OFFLOAD_OPTIMIZER && zero < 1)
        return coh_errf(COH_ERR_INVALID, "optimizer offload needs ZeRO stage 1, 2 or 3 (got "
                                         "stage 0)");
    if (s->offload == COH_OFFLOAD_OPTIMIZER_PARAMS && zero != 3)
        return coh_errf(COH_ERR_INVALID, "parameter offload needs ZeRO stage 3 (got stage %d)",
                        zero);
    if (s->grad_sync_after_backward && zero >= 2)
        return coh_errf(COH_ERR_INVALID, "gradient sync after backward with ZeRO stage %d: its "
                        "reduce-scatters free each micro-batch's gradients as backward makes "
                        "them (ddp or zero1)", zero);
    if (m->arch == COH_ARCH_GPT2 && s->seq > m->positions)
        return coh_errf(COH_ERR_INVALID,
                        "sequence length %lld exceeds the model's %lld learned positions",
                        (long long)s->seq, (long long)m->positions);
    return COH_OK;
}

coh_status coh_parallel_config_check(const coh_model_desc *m, const coh_parallel_config *s)
{
    coh_status st;
    if ((st = coh_model_validate(m)) != COH_OK ||
        (st = check_degree("data parallel size", s->dp, 1 << 20)) != COH_OK ||
        (st = check_degree("tensor parallel size", s->tp, 1 << 16)) != COH_OK ||
        (st = check_degree("pipeline parallel size", s->pp, 1 << 16)) != COH_OK ||
        (st = check_degree("micro batch size", s->micro_batch, 1 << 20)) != COH_OK ||
        (st = check_degree("virtual stage count", s->virtual_stages, 1 << 10)) != COH_OK ||
        (s->seq && (st = check_degree("sequence length", s->seq, 1 << 24)) != COH_OK) ||
        (s->microbatches &&
         (st = check_degree("microbatch count", s->microbatches, 1 << 20)) != COH_OK) ||
        (st = check_options(m, s)) != COH_OK || (st = check_tp(m, s)) != COH_OK ||
        (st = check_pipeline(m, s)) != COH_OK || (st = check_devices(s)) != COH_OK)
        return st;
    if (m->arch != COH_ARCH_COUNTS && plan_seq(m, s) > (1 << 24))
        return coh_errf(COH_ERR_INVALID,
                        "sequence length %lld (the model's context) is too large; give --seq",
                        (long long)plan_seq(m, s));
    return COH_OK;
}

static uint64_t times(uint64_t a, int64_t b)
{
    if (b <= 0)
        return 0;
    return a > UINT64_MAX / (uint64_t)b ? UINT64_MAX : a * (uint64_t)b;
}

static uint64_t plus(uint64_t a, uint64_t b)
{
    return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

/* Model states of one device: 2+2+12 bytes per parameter in mixed precision (fp16/bf16
 * parameters and gradients; fp32 master copy, Adam m and v), 4+4+8 in fp32; ZeRO stage k
 * partitions the first k of (optimizer, gradients, parameters) over the dp ranks. */
static void model_states(const coh_model_desc *m, const coh_parallel_config *s, int64_t psi,
                         coh_device_mem *d)
{
    int mixed = s->precision != COH_PREC_FP32, zero = coh_strategy_zero_stage(s->strategy);
    uint64_t P = mixed ? 2 : 4, G = mixed ? 2 : 4, K = mixed ? 12 : 8;
    int64_t part = plan_ceil_div(psi, s->dp); /* equal partitions, the last one padded */
    d->params_bytes = times(P, zero >= 3 ? part : psi);
    d->grads_bytes = times(G, zero >= 2 ? part : psi);
    d->optimizer_bytes = times(K, zero >= 1 ? part : psi);
    if (s->offload != COH_OFFLOAD_NONE) {
        /* ZeRO-Offload: the optimizer step runs on the host over fp32 gradients; with stage
         * 2 and 3 the 16-bit gradients stream there as they are reduced. */
        d->host_bytes = plus(d->optimizer_bytes, mixed ? times(4, part) : 0);
        d->optimizer_bytes = 0;
        if (zero >= 2) {
            if (!mixed)
                d->host_bytes = plus(d->host_bytes, d->grads_bytes);
            d->grads_bytes = 0;
        }
    }
    if (s->offload == COH_OFFLOAD_OPTIMIZER_PARAMS) {
        d->host_bytes = plus(d->host_bytes, d->params_bytes);
        d->params_bytes = 0;
    }
    if (zero == 3) /* the layer being computed is gathered whole, with its gradient */
        d->temp_bytes = times(P + G, plan_largest_layer_local(m, s->tp));
}

static coh_status estimate_stage(const coh_model_desc *m, const coh_parallel_config *s,
                                 const int64_t *layers, int stage, coh_device_mem *out)
{
    memset(out, 0, sizeof *out);
    coh_status st = coh_parallel_config_check(m, s);
    if (st != COH_OK)
        return st;
    if (stage < 0 || stage >= s->pp)
        return coh_errf(COH_ERR_INVALID, "invalid pipeline stage '%d': must be 0 to %d", stage,
                        s->pp - 1);
    out->local_params = plan_stage_params(m, s, layers, stage);
    out->layers = plan_stage_layers(m, s, layers, stage);
    model_states(m, s, out->local_params, out);
    uint64_t recompute_temp;
    out->activations_bytes = plan_stage_activations(m, s, layers, stage, &out->in_flight,
                                                    &recompute_temp);
    out->temp_bytes = plus(out->temp_bytes, recompute_temp);
    out->total_bytes = plus(plus(plus(out->params_bytes, out->grads_bytes),
                                 plus(out->optimizer_bytes, out->activations_bytes)),
                            out->temp_bytes);
    return COH_OK;
}

coh_status plan_estimate_stage_layers(const coh_model_desc *m, const coh_parallel_config *s,
                                      const int64_t *layers, int stage, coh_device_mem *out)
{
    return estimate_stage(m, s, layers, stage, out);
}

coh_status coh_estimate_stage(const coh_model_desc *m, const coh_parallel_config *s, int stage,
                              coh_device_mem *out)
{
    return estimate_stage(m, s, NULL, stage, out);
}

coh_status plan_estimate_memory_layers(const coh_model_desc *m, const coh_parallel_config *s,
                                       const int64_t *layers, coh_estimate *out)
{
    memset(out, 0, sizeof *out);
    coh_status st = coh_model_count(m, &out->counts);
    if (st != COH_OK || (st = coh_parallel_config_check(m, s)) != COH_OK)
        return st;
    out->seq = plan_seq(m, s);
    out->microbatches = plan_microbatches(s);
    out->activations_known = m->arch != COH_ARCH_COUNTS;
    /* Stages differ (embedding first, head last, more microbatches early): report the one
     * that needs the most, since every device must fit. */
    for (int i = 0; i < s->pp; i++) {
        coh_device_mem d;
        if ((st = estimate_stage(m, s, layers, i, &d)) != COH_OK)
            return st;
        if (i == 0 || d.total_bytes > out->per_device.total_bytes) {
            out->per_device = d;
            out->worst_stage = i;
        }
    }
    /* every sum saturates at 2^64 - 1 rather than wrap: a saturated total is out of range, not
     * a size */
    if (out->per_device.total_bytes == UINT64_MAX)
        return coh_errf(COH_ERR_INVALID, "estimate out of range: %s per device are more than "
                        "2^64 bytes (--seq %lld, --micro-batch %lld)",
                        out->per_device.activations_bytes == UINT64_MAX ? "the activations"
                                                                        : "the bytes",
                        (long long)out->seq, (long long)s->micro_batch);
    return COH_OK;
}

coh_status coh_estimate_memory(const coh_model_desc *m, const coh_parallel_config *s, coh_estimate *out)
{
    return plan_estimate_memory_layers(m, s, NULL, out);
}
