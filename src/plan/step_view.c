/* step_view.c: what the planner prices on each pipeline stage (blocks, parameters, memory, the
 * bytes of every message and which links they cross), for `cohort plan --explain --json` and
 * the check that it agrees with `cohort train --dry-run --json`. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cohort/parallel.h"
#include "plan/plan_int.h"
#include "plan/planner_int.h"

/* -1 without a peer, else whether the link priced between ranks a and b crosses nodes. */
static int crosses(const coh_hw *hw, int peers, long a, long b)
{
    return peers ? plan_link(hw, a, b) == &hw->inter : -1;
}

/* The messages stage s's rank prices, as cost.c and step_sim.c price them. */
static void messages(const coh_model_desc *m, const coh_parallel_config *c, const plan_dev *d,
                     const plan_chunk *chunk, int s, coh_plan_stage_view *v)
{
    int p = c->pp, u = p * c->virtual_stages, shards = 0, head = 0;
    for (int k = 0; k < u; k++) {
        shards = chunk[k].head_hi > shards ? chunk[k].head_hi : shards;
        head |= k % p == s && chunk[k].last;
    }
    double wire = plan_wire_bytes(d), N = (double)c->micro_batch * (double)c->seq;
    int zero = coh_strategy_zero_stage(c->strategy);
    if (p > 1)
        v->pipe_send_bytes = plan_p2p_values(m, c, c->seq, shards) * wire;
    if (c->tp > 1)
        v->tp_allreduce_bytes = N * (double)m->dim * wire;
    if (c->dp > 1) {
        v->dp_buckets = plan_stage_buckets(c, chunk, s, v->dp_bucket_values,
                                           COH_BUCKETS_LISTED);
        v->dp_reduce_bytes = (double)v->params * plan_grad_bytes(c);
        if (zero >= 1)
            v->zero_gather_bytes = (double)v->params * (zero == 3 ? wire : 4.0);
    }
    if (p > 1 && m->tied && (s == 0 || head))
        v->embed_allreduce_bytes = ceil((double)m->vocab / c->tp) * (double)m->dim * 4.0;
}

/* The split the chunks hold, as --stage-layers spells it ("0-5,6-10+head:0/2,head:1/2"), so the
 * trainer's prediction reads it instead of choosing it again; 0 when it does not fit buf. */
static int split_string(const plan_chunk *ch, int u, char *buf, size_t cap)
{
    int shards = 0;
    size_t n = 0;
    for (int k = 0; k < u; k++)
        shards = ch[k].head_hi > shards ? ch[k].head_hi : shards;
    for (int k = 0; k < u && n < cap; k++) {
        const char *sep = "";
        n += (size_t)snprintf(buf + n, cap - n, "%s", k ? "," : "");
        if (ch[k].hi > ch[k].lo && n < cap) {
            n += (size_t)snprintf(buf + n, cap - n, "%d-%d", ch[k].lo, ch[k].hi - 1);
            sep = "+";
        }
        for (int h = ch[k].head_lo; h < ch[k].head_hi && shards > 1 && n < cap; h++, sep = "+")
            n += (size_t)snprintf(buf + n, cap - n, "%shead:%d/%d", sep, h, shards);
        if (ch[k].hi == ch[k].lo && shards <= 1 && n < cap)
            n += (size_t)snprintf(buf + n, cap - n, "%s", k ? "head" : "embeddings");
    }
    return n < cap;
}

int plan_trainer_memory(const coh_model_desc *m, const coh_parallel_config *c, const coh_hw *hw,
                        const plan_chunk *chunk, int stage, uint64_t *bytes)
{
    char split[1024];
    if (hw->gpu || !m->tied || !plan_engine_measurable(m) ||
        !coh_parallel_config_runnable(c, NULL, 0) || c->strategy == COH_STRATEGY_DP)
        return 0;
    coh_par_config pc;
    memset(&pc, 0, sizeof pc);
    coh_trainer_config_defaults(&pc.train);
    pc.train.model = (coh_gpt_config){(int)m->layers, (int)m->heads, (int)m->dim, (int)m->vocab,
                                      (int)m->positions, 0, 0};
    pc.par = *c;
    if (chunk && c->pp > 1 && !c->stage_layers &&
        split_string(chunk, c->pp * c->virtual_stages, split, sizeof split))
        pc.par.stage_layers = split; /* the split priced, not chosen again */
    coh_par_config_apply(&pc);
    coh_par_memory mem;
    coh_status st = c->pp > 1 ? coh_par_memory_estimate_stage(&pc, stage, &mem)
                              : coh_par_memory_estimate(&pc, c->dp, 0, &mem);
    if (st) {
        coh_err_clear();
        return 0;
    }
    *bytes = mem.total;
    return 1;
}

static coh_status views(const coh_model_desc *m, const coh_parallel_config *c, const coh_hw *hw,
                        const plan_chunk *chunk, const plan_dev *d, coh_plan_stage_view *out)
{
    int p = c->pp, u = p * c->virtual_stages;
    int64_t *layers = calloc((size_t)p, sizeof *layers);
    if (!layers)
        return coh_errf(COH_ERR_NOMEM, "out of memory describing %d stages", p);
    for (int k = 0; k < u; k++) {
        layers[k % p] += chunk[k].hi - chunk[k].lo;
        out[k % p].params += chunk[k].params;
    }
    coh_status st = COH_OK;
    for (int s = 0; s < p && !st; s++) {
        coh_plan_stage_view *v = &out[s];
        coh_device_mem mem;
        v->blocks = (int)layers[s];
        st = plan_estimate_stage_layers(m, c, p > 1 ? layers : NULL, s, &mem);
        v->memory_bytes = mem.total_bytes;
        plan_trainer_memory(m, c, hw, chunk, s, &v->memory_bytes);
        messages(m, c, d, chunk, s, v);
        long r0 = coh_mesh_rank(c->dp, p, c->tp, 0, s, 0);
        v->next_stage_inter = s + 1 < p ? plan_stage_link(hw, c, s) == &hw->inter : -1;
        /* a dp group: dp ranks plan_dp_stride apart, from the stage's first */
        v->dp_inter = crosses(hw, c->dp > 1, r0, r0 + (long)(c->dp - 1) * plan_dp_stride(c));
        v->tp_inter = crosses(hw, c->tp > 1, r0, coh_mesh_rank(c->dp, p, c->tp, 0, s, c->tp - 1));
    }
    free(layers);
    return st;
}

coh_status coh_plan_stage_views(const coh_model_desc *m, const coh_parallel_config *cin,
                                const coh_hw *hw, coh_plan_stage_view *out)
{
    coh_plan_result r;
    coh_status st = coh_plan_config(m, cin, hw, &r); /* checks it, resolves seq and m */
    if (st)
        return st;
    const coh_parallel_config *c = &r.config;
    memset(out, 0, (size_t)c->pp * sizeof *out);
    plan_dev d;
    if ((st = plan_dev_for(hw, c, &d)))
        return st;
    int u = c->pp * c->virtual_stages;
    plan_chunk *chunk = calloc((size_t)u, sizeof *chunk);
    if (!chunk)
        return coh_errf(COH_ERR_NOMEM, "out of memory pricing %d virtual stages", u);
    st = plan_chunk_costs(m, c, &d, c->seq, chunk);
    if (!st)
        st = views(m, c, hw, chunk, &d, out);
    free(chunk);
    return st;
}
