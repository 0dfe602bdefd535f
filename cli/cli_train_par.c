/* cli_train_par.c: the parallel side of `cohort train`: world and mesh from the launcher's
 * environment, the start-up summary (global batch, expected vs held model state), per-rank
 * memory in the metrics, trace file names, and the final parameter dump. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_train_par.h"
#include "cohort/backend.h"
#include "cohort/log.h"
#include "cohort/pipeline.h"
#include "cohort/size.h"

/* The prediction of this rank (its pipeline stage's, or its dp rank's), made once. */
static void predict(const train_opts *o, cli_par *p)
{
    coh_par_config pc = {.train = o->tc, .par = o->cfg.par};
    coh_status st = o->cfg.par.pp > 1
                        ? coh_par_memory_estimate_stage(&pc, p->mesh->pp_rank, &p->predicted)
                        : coh_par_memory_estimate(&pc, p->mesh->dp, p->mesh->dp_rank, &p->predicted);
    p->has_prediction = st == COH_OK;
    if (st) {
        coh_err_clear();
        memset(&p->predicted, 0, sizeof p->predicted);
    }
}

coh_status cli_par_open(const train_opts *o, cli_par *p)
{
    memset(p, 0, sizeof *p);
    coh_status st;
    /* cmd_train.c checked the strategy against the launcher's environment */
    if (coh_strategy_is_multiprocess(o->cfg.par.strategy) || o->world > 1) {
        st = coh_comm_create(COH_COMM_AUTO, &p->world);
    } else {
        st = coh_comm_create_self(&p->world);
    }
    if (!st)
        st = coh_mesh_create(p->world, coh_comm_size(p->world) / (o->cfg.par.pp * o->cfg.par.tp),
                             o->cfg.par.pp, o->cfg.par.tp, &p->mesh);
    if (st)
        return st;
    p->rank = coh_comm_rank(p->world);
    p->world_size = coh_comm_size(p->world);
    predict(o, p);
    if (o->trace && p->world_size > 1) {
        const char *dot = strrchr(o->trace, '.');
        int stem = dot && !strchr(dot, '/') ? (int)(dot - o->trace) : (int)strlen(o->trace);
        snprintf(p->trace_path, sizeof p->trace_path, "%.*s.rank%d%s", stem, o->trace, p->rank,
                 o->trace + stem);
    } else if (o->trace) {
        snprintf(p->trace_path, sizeof p->trace_path, "%s", o->trace);
    }
    return COH_OK;
}

void cli_par_close(cli_par *p)
{
    coh_mesh_destroy(p->mesh);
    coh_comm_destroy(p->world);
}

static void fmt3(const coh_model_state_bytes *m, char *out, size_t cap)
{
    char a[24], b[24], c[24], t[24];
    snprintf(out, cap, "%s (params %s, grads %s, optimizer %s)",
             coh_size_format(m->params + m->grads + m->optim, t, sizeof t),
             coh_size_format(m->params, a, sizeof a), coh_size_format(m->grads, b, sizeof b),
             coh_size_format(m->optim, c, sizeof c));
}

static void add3(coh_model_state_bytes *sum, const coh_model_state_bytes *m)
{
    sum->params += m->params;
    sum->grads += m->grads;
    sum->optim += m->optim;
}

/* Strategy dp: every device's model state (now, or at its peak) next to DataParallel's, and the
 * totals, which are what the process holds. */
static void print_devices(coh_par_trainer *t, const train_opts *o, int peak)
{
    size_t np = coh_gpt_param_count(&o->tc.model);
    coh_model_state_bytes e, h, te = {0}, th = {0};
    char eb[128], hb[128];
    const char *when = peak ? "at the optimizer step" : "at start";
    int n = coh_par_trainer_devices(t);
    for (int d = 0; d < n; d++) {
        coh_dp_expected_bytes(np, d, &e);
        if (peak)
            coh_par_trainer_device_memory_peak(t, d, &h);
        else
            coh_par_trainer_device_memory(t, d, &h);
        add3(&te, &e);
        add3(&th, &h);
        fmt3(&e, eb, sizeof eb);
        fmt3(&h, hb, sizeof hb);
        coh_info("model state of dp device %d %s: expected %s; held %s", d, when, eb, hb);
    }
    fmt3(&te, eb, sizeof eb);
    fmt3(&th, hb, sizeof hb);
    coh_info("model state of all %d dp devices %s: expected %s; held %s", n, when, eb, hb);
}

void cli_par_write_devices(coh_jw *w, coh_par_trainer *t)
{
    coh_jw_key(w, "devices");
    coh_jw_array_begin(w);
    for (int d = 0; d < coh_par_trainer_devices(t); d++) {
        coh_model_state_bytes m;
        coh_par_trainer_device_memory_peak(t, d, &m);
        coh_jw_object_begin(w);
        coh_jw_key(w, "device");
        coh_jw_int(w, d);
        coh_jw_key(w, "params_bytes");
        coh_jw_uint(w, m.params);
        coh_jw_key(w, "grads_bytes");
        coh_jw_uint(w, m.grads);
        coh_jw_key(w, "optim_bytes");
        coh_jw_uint(w, m.optim);
        coh_jw_object_end(w);
    }
    coh_jw_array_end(w);
}

int cli_par_predict(const train_opts *o, const cli_par *p, coh_par_memory *out)
{
    (void)o;
    *out = p->predicted;
    return p->has_prediction;
}

/* The pipeline at start: its schedule and bubble (simulated from the action lists with a
 * backward twice a forward), and what each stage holds. */
static void print_pipeline(const train_opts *o, coh_par_trainer *t)
{
    const coh_parallel_config *par = &o->cfg.par;
    coh_par_config pc = {.train = o->tc, .par = *par};
    coh_par_config_apply(&pc); /* a stage of a tensor-parallel shard */
    int v = par->schedule == COH_SCHED_INTERLEAVED ? par->virtual_stages : 1;
    coh_pipe_shape shape = {par->schedule, par->pp, o->tc.accum, v};
    coh_pipe_sim sim = {0};
    if (coh_pipeline_simulate(&shape, 1.0, 2.0, &sim, NULL))
        coh_err_clear();
    coh_info("pipeline: %d stages x %d replicas, schedule %s%s, %d microbatches per step; "
             "bubble %.1f%% of the ideal step (simulated from the schedule's lists)", par->pp,
             coh_par_trainer_mesh(t)->dp, coh_schedule_name(par->schedule),
             v > 1 ? " (2+ chunks per stage)" : "", o->tc.accum, 100.0 * sim.bubble);
    for (int s = 0; s < par->pp; s++) {
        coh_pipe_stage st;
        if (coh_par_pipe_stage(&pc, s, &st))
            return;
        char layers[320], state[24];
        cli_stage_parts(&st, layers, sizeof layers);
        coh_par_memory pm;
        char total[24] = "?";
        if (!coh_par_memory_estimate_stage(&pc, s, &pm))
            coh_size_format(pm.total, total, sizeof total);
        coh_info("stage %d: %s; %.2fM parameters, model state %s (fp32 params, "
                 "grads, AdamW m and v); predicted %s in all with %d activation slot%s", s,
                 layers, st.params / 1e6, coh_size_format(16 * (uint64_t)st.params, state, sizeof state),
                 total, pm.activation_slots, pm.activation_slots == 1 ? "" : "s");
    }
}

/* Append to buf (cap bytes) at *len, cut short when it does not fit. */
static void put(char *buf, size_t cap, size_t *len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int w = *len < cap ? vsnprintf(buf + *len, cap - *len, fmt, ap) : 0;
    va_end(ap);
    *len += w > 0 ? (size_t)w : 0;
    *len = *len < cap ? *len : cap;
}

/* Chunk k's blocks and head shards as --stage-layers spells them ("2-3", "0-0+head:0/2",
 * "head:1-2/3"), "" for a chunk of the embeddings or the whole head alone. */
static void chunk_text(const coh_pipe_stage *st, int k, char *buf, size_t cap)
{
    int n = 0, lo = st->head_lo[k], hi = st->head_shards > 1 ? st->head_hi[k] : lo;
    buf[0] = '\0';
    if (st->lo[k] < st->hi[k])
        n = snprintf(buf, cap, "%d-%d%s", st->lo[k], st->hi[k] - 1, hi > lo ? "+" : "");
    if (hi > lo && n >= 0 && (size_t)n < cap)
        snprintf(buf + n, cap - (size_t)n, hi - lo == 1 ? "head:%d/%d" : "head:%d-%d/%d", lo,
                 hi - lo == 1 ? st->head_shards : hi - 1, st->head_shards);
}

char *cli_stage_parts(const coh_pipe_stage *st, char *buf, size_t cap)
{
    char spelled[256] = "", one[64];
    size_t n = 0;
    int blocks = 0, shards = 0;
    for (int k = 0; k < st->chunks; k++) {
        blocks += st->hi[k] > st->lo[k];
        shards += st->head_shards > 1 ? st->head_hi[k] - st->head_lo[k] : 0;
        chunk_text(st, k, one, sizeof one);
        if (*one)
            put(spelled, sizeof spelled, &n, "%s%s", n ? "," : "", one);
    }
    const char *what = blocks ? "blocks " : shards == 1 ? "LM head shard " : "LM head shards ";
    size_t m = 0;
    buf[0] = '\0';
    if (*spelled)
        put(buf, cap, &m, "%s%s", what, spelled);
    if (st->first)
        put(buf, cap, &m, "%sembeddings", m ? " + " : "");
    if (st->last && st->head_shards == 1)
        put(buf, cap, &m, "%sfinal LayerNorm and LM head", m ? " + " : "");
    return buf;
}

/* Every rank's place on the mesh, Megatron's order (tp fastest, then dp, then pp), a line of
 * up to 8 ranks each. */
static void print_mesh(const coh_mesh *m)
{
    int n = m->dp * m->pp * m->tp;
    char line[512];
    size_t k = 0;
    for (int r = 0; r < n; r++) {
        int tp = r % m->tp, dp = (r / m->tp) % m->dp, pp = r / (m->tp * m->dp);
        k += (size_t)snprintf(line + k, sizeof line - k, "%srank %d (dp %d, pp %d, tp %d)",
                              r % 8 ? ", " : "", r, dp, pp, tp);
        if (r % 8 == 7 || r == n - 1) {
            coh_info("mesh: %s", line);
            k = 0;
        }
    }
}

void cli_par_print_start(const train_opts *o, const cli_par *p, coh_par_trainer *t)
{
    if (p->rank != 0)
        return;
    const coh_mesh *mesh = coh_par_trainer_mesh(t);
    if (mesh->pp > 1 || mesh->tp > 1)
        print_mesh(mesh);
    if (mesh->tp > 1) {
        const coh_gpt_config *c = &o->tc.model;
        int vs = (c->vocab + mesh->tp - 1) / mesh->tp;
        coh_info("tensor parallelism: tp %d; each tp rank holds %d of %d heads, %d of %d MLP "
                 "columns and %d vocabulary rows (%d padding the last); 4 all-reduces of "
                 "(B, T, C) a block per micro-batch", mesh->tp, c->heads / mesh->tp, c->heads,
                 4 * c->dim / mesh->tp, 4 * c->dim, vs, vs * mesh->tp - c->vocab);
    }
    if (o->cfg.par.pp > 1) {
        const coh_mesh *m = coh_par_trainer_mesh(t);
        coh_info("strategy %s on mesh %dx%dx%d (dp x pp x tp); global batch %ld sequences = "
                 "micro-batch %d x microbatches %d x data-parallel %d",
                 coh_strategy_name(o->cfg.par.strategy), m->dp, m->pp, m->tp,
                 (long)o->tc.batch * o->tc.accum * m->dp, o->tc.batch, o->tc.accum, m->dp);
        print_pipeline(o, t);
        return;
    }
    const coh_trainer_config *c = &o->tc;
    int dp = coh_par_trainer_mesh(t)->dp, width = dp * (o->devices > 0 ? (int)o->devices : 1);
    if (o->devices > 0)
        coh_info("strategy dp: %ld devices in this process, a thread each; device 0 scatters, "
                 "replicates, gathers the loss, reduces the gradients and updates", o->devices);
    coh_info("strategy %s on mesh %dx1x%d (dp x pp x tp); global batch %ld sequences = "
             "micro-batch %d x accumulation %d x data-parallel %d", coh_strategy_name(o->cfg.par.strategy),
             dp, mesh->tp, (long)c->batch * c->accum * width, c->batch, c->accum, width);
    if (c->tied_grad_apart)
        coh_info("tied embedding: the head's and the embedding's wte gradients are each summed "
                 "over the step, then added (a pipeline's order: --tied-grad-order pipeline)");
    if (c->grad_accum_apart)
        coh_info("gradients: each micro-batch's summed from zero in a buffer of its own, then "
                 "added (2 data-parallel ranks' order: --grad-accum-order apart)");
    coh_par_memory pm;
    char tot[24], eng[24], tr[24], base[24], st[128];
    if (!cli_par_predict(o, p, &pm))
        coh_info("model %.2fM parameters; no memory prediction for strategy %s",
                 coh_gpt_param_count(&c->model) / 1e6, coh_strategy_name(o->cfg.par.strategy));
    else
        fmt3(&pm.state, st, sizeof st);
    if (pm.total)
        coh_info("model %.2fM parameters; memory predicted per rank %s over the %s resident before "
             "the model: model state %s, engine buffers %s, gathered layers, gradient buckets and "
             "communication %s", coh_gpt_param_count(&c->model) / 1e6,
             coh_size_format(pm.total, tot, sizeof tot),
             coh_size_format(p->base_rss, base, sizeof base), st,
             coh_size_format(pm.engine, eng, sizeof eng),
             coh_size_format(pm.gathered + pm.grad_buckets + pm.comm, tr, sizeof tr));
    if (o->devices > 0) {
        print_devices(t, o, 0);
        return;
    }
    coh_model_state_bytes e, h;
    char eb[128], hb[128];
    coh_zero_expected_bytes(o->cfg.par.strategy, coh_gpt_param_count(&c->model), dp, &e);
    coh_par_trainer_memory(t, &h);
    fmt3(&e, eb, sizeof eb);
    fmt3(&h, hb, sizeof hb);
    coh_info("model state per rank: expected %s; held at start %s", eb, hb);
}

void cli_par_print_peak(const cli_par *p, coh_par_trainer *t, const train_opts *o)
{
    if (p->rank != 0)
        return;
    if (o->cfg.par.pp > 1) {
        coh_model_state_bytes h;
        char hb[128];
        coh_par_trainer_memory_peak(t, &h);
        fmt3(&h, hb, sizeof hb);
        coh_info("model state of stage 0 at the optimizer step: held %s", hb);
        return;
    }
    if (o->devices > 0) {
        print_devices(t, o, 1);
        return;
    }
    coh_model_state_bytes e, h;
    coh_par_memory pm;
    char eb[128], hb[128], pb[128];
    coh_zero_expected_bytes(o->cfg.par.strategy, coh_gpt_param_count(&o->tc.model),
                            coh_par_trainer_mesh(t)->dp, &e);
    coh_par_trainer_memory_peak(t, &h);
    int predicted = cli_par_predict(o, p, &pm);
    fmt3(&e, eb, sizeof eb);
    fmt3(&h, hb, sizeof hb);
    if (predicted)
        fmt3(&pm.state, pb, sizeof pb);
    else
        snprintf(pb, sizeof pb, "none for this strategy");
    coh_info("model state per rank at the optimizer step: expected %s; predicted %s; held %s",
             eb, pb, hb);
}

coh_status cli_par_memory(const cli_par *p, coh_par_trainer *t, const train_opts *o,
                          uint64_t rss, uint64_t *all)
{
    uint64_t mine[CLI_MEM_N];
    coh_model_state_bytes m;
    coh_par_memory pm;
    coh_par_trainer_memory_peak(t, &m);
    cli_par_predict(o, p, &pm);
    mine[CLI_MEM_PARAMS] = m.params;
    mine[CLI_MEM_GRADS] = m.grads;
    mine[CLI_MEM_OPTIM] = m.optim;
    mine[CLI_MEM_PEAK_RSS] = rss;
    mine[CLI_MEM_BASE_RSS] = p->base_rss;
    mine[CLI_MEM_PREDICTED] = pm.total;
    double busy = 0.0, idle = 0.0;
    if (coh_par_trainer_pipeline_times(t, &busy, &idle))
        coh_err_clear();
    mine[CLI_MEM_BUSY_US] = (uint64_t)(busy * 1e6);
    mine[CLI_MEM_IDLE_US] = (uint64_t)(idle * 1e6);
    mine[CLI_MEM_TP_COMM_US] = (uint64_t)(coh_par_trainer_tp_comm_seconds(t) * 1e6);
    coh_dev_memory dm;
    coh_dev_memory_get(&dm);
    mine[CLI_MEM_ALLOC_PEAK] = dm.peak;
    return coh_allgather(p->world, mine, all, CLI_MEM_N, COH_I64);
}

coh_status cli_par_dump(const train_opts *o, const cli_par *p, coh_par_trainer *t)
{
    size_t n = coh_gpt_param_count(&o->tc.model);
    float *buf = malloc(n * sizeof *buf);
    if (!buf)
        return coh_errf(COH_ERR_NOMEM, "out of memory gathering parameters");
    coh_status st = coh_par_trainer_gather_params(t, buf);
    if (!st && p->rank == 0) {
        FILE *f = fopen(o->dump_params, "wb");
        if (!f || fwrite(buf, sizeof *buf, n, f) != n)
            st = coh_errf(COH_ERR_IO, "cannot write parameters to '%s'", o->dump_params);
        if (f && fclose(f) && !st)
            st = coh_errf(COH_ERR_IO, "cannot write parameters to '%s'", o->dump_params);
    }
    free(buf);
    return st;
}
