/* cli_config.c: the shared training-run options of `cohort train`, `estimate` and `plan`: one
 * table of spellings (with the older ones kept as aliases), one limit and one message per
 * concept, the options loop over it and the model its shape options describe. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "cli_config.h"
#include "cohort/json_writer.h"

enum {
    C_MODEL = CLI_CONFIG_FIRST, C_LAYERS, C_HEADS, C_DIM, C_VOCAB, C_SEQ, C_FFN, C_DP, C_TP, C_PP,
    C_STRATEGY, C_ZERO, C_MICRO_BATCH, C_BATCH, C_GRAD_ACCUM, C_ACCUM, C_MICROBATCHES, C_SCHEDULE,
    C_VIRTUAL, C_PRECISION, C_RECOMPUTE, C_SEQ_PARALLEL, C_DROPOUT, C_NO_DROPOUT, C_OFFLOAD,
    C_BUCKET, C_NODES, C_GPN, C_THREADS, C_GRAD_DTYPE, C_GRAD_SYNC, C_END
};

static const struct option SHARED[] = {
    {"model", 1, 0, C_MODEL},
    {"layers", 1, 0, C_LAYERS},
    {"heads", 1, 0, C_HEADS},
    {"dim", 1, 0, C_DIM},
    {"vocab", 1, 0, C_VOCAB},
    {"seq", 1, 0, C_SEQ},
    {"ffn", 1, 0, C_FFN},
    {"dp", 1, 0, C_DP},
    {"tp", 1, 0, C_TP},
    {"pp", 1, 0, C_PP},
    {"strategy", 1, 0, C_STRATEGY},
    {"zero", 1, 0, C_ZERO},
    {"micro-batch", 1, 0, C_MICRO_BATCH},
    {"batch", 1, 0, C_BATCH},               /* alias of --micro-batch */
    {"grad-accum", 1, 0, C_GRAD_ACCUM},
    {"accum", 1, 0, C_ACCUM},               /* alias of --grad-accum */
    {"microbatches", 1, 0, C_MICROBATCHES}, /* a pipeline's word for the same count */
    {"schedule", 1, 0, C_SCHEDULE},
    {"virtual-stages", 1, 0, C_VIRTUAL},
    {"precision", 1, 0, C_PRECISION},
    {"recompute", 1, 0, C_RECOMPUTE},
    {"sequence-parallel", 0, 0, C_SEQ_PARALLEL},
    {"dropout", 0, 0, C_DROPOUT},
    {"no-dropout", 0, 0, C_NO_DROPOUT},
    {"offload", 1, 0, C_OFFLOAD},
    {"bucket-mb", 1, 0, C_BUCKET},
    {"grad-reduce-dtype", 1, 0, C_GRAD_DTYPE},
    {"grad-sync", 1, 0, C_GRAD_SYNC},
    {"nodes", 1, 0, C_NODES},
    {"gpus-per-node", 1, 0, C_GPN},
    {"threads", 1, 0, C_THREADS},
};

#define NSHARED (sizeof SHARED / sizeof SHARED[0])

/* The one limit of each number, by option. */
static const struct limit {
    int code;
    const char *name;
    long lo, hi;
} LIMITS[] = {
    {C_LAYERS, "--layers", 1, 100000},     {C_HEADS, "--heads", 1, 1 << 16},
    {C_DIM, "--dim", 1, 1 << 20},          {C_VOCAB, "--vocab", 2, 1 << 30},
    {C_SEQ, "--seq", 1, 1 << 24},          {C_FFN, "--ffn", 1, 1 << 24},
    {C_DP, "--dp", 1, 1 << 20},            {C_TP, "--tp", 1, 1 << 16},
    {C_PP, "--pp", 1, 1 << 16},            {C_MICRO_BATCH, "--micro-batch", 1, 1 << 20},
    {C_BATCH, "--batch", 1, 1 << 20},      {C_GRAD_ACCUM, "--grad-accum", 1, 1 << 20},
    {C_ACCUM, "--accum", 1, 1 << 20},      {C_MICROBATCHES, "--microbatches", 1, 1 << 20},
    {C_VIRTUAL, "--virtual-stages", 1, 1024}, {C_NODES, "--nodes", 1, 1 << 16},
    {C_GPN, "--gpus-per-node", 1, 1 << 16}, {C_THREADS, "--threads", 1, 4096},
    {C_ZERO, "--zero", 0, 3},
};

void cli_config_init(cli_config *c)
{
    memset(c, 0, sizeof *c);
    coh_parallel_config_init(&c->par);
    c->zero = -1;
}

int cli_config_options(const struct option *own, struct option *out, size_t cap)
{
    size_t n = 0;
    while (own[n].name)
        n++;
    if (n + NSHARED + 1 > cap)
        return 0;
    memcpy(out, own, n * sizeof *own);
    memcpy(out + n, SHARED, sizeof SHARED);
    memset(out + n + NSHARED, 0, sizeof *out);
    return 1;
}

int cli_config_parse(const char *cmd, int argc, char **argv, const struct option *own,
                     cli_option_fn take, void *ctx)
{
    struct option options[96];
    if (!cli_config_options(own, options, sizeof options / sizeof options[0]))
        return cli_usage_error(cmd, "internal: option table too small");
    return cli_parse_options(cmd, argc, argv, options, take, ctx);
}

int cli_config_shape_given(const cli_config *c)
{
    return c->layers || c->dim || c->heads || c->vocab || c->ffn;
}

int cli_config_model(const char *cmd, const cli_config *c, coh_model_desc *m)
{
    coh_model_desc base = {0};
    if (c->preset) {
        coh_status st = coh_model_preset(c->preset, &base);
        if (st != COH_OK)
            return cli_fail(cmd, st);
    }
    int64_t layers = c->layers ? c->layers : base.layers, dim = c->dim ? c->dim : base.dim,
            heads = c->heads ? c->heads : base.heads, vocab = c->vocab ? c->vocab : base.vocab,
            seq = c->seq ? c->seq : base.positions, ffn = c->ffn ? c->ffn : c->dim ? 0 : base.ffn;
    const char *missing = !layers ? "--layers" : !dim ? "--dim" : !heads ? "--heads"
                        : !vocab ? "--vocab" : !seq ? "--seq" : NULL;
    if (missing)
        return cli_usage_error(cmd, "a custom model needs %s (and --layers, --dim, --heads, "
                                    "--vocab, --seq)", missing);
    coh_status st = coh_model_gpt(layers, dim, heads, vocab, seq, ffn, m);
    return st == COH_OK ? CLI_OK : cli_fail(cmd, st);
}

/* A choice through the library's one name table: 0 after a usage error. */
static int choice(const char *cmd, const char *opt, coh_status st)
{
    if (st == COH_OK)
        return 1;
    /* "invalid schedule 'x': valid are ..." -> "invalid --schedule 'x': valid are ..." */
    const char *msg = coh_last_error(), *sp = strchr(msg, ' '), *q = strchr(msg, '\'');
    if (sp && q)
        cli_usage_error(cmd, "invalid %s %s", opt, q);
    else
        cli_usage_error(cmd, "%s", msg);
    return 0;
}

/* --grad-accum, --accum and --microbatches name one count: two spellings must agree (one
 * spelling given twice: the last wins, as with every option). */
static int set_microbatches(const char *cmd, cli_config *c, const char *opt, long v)
{
    if (c->accum_flag && strcmp(c->accum_flag, opt) && c->par.microbatches != v)
        return cli_usage_error(cmd, "%s %lld and %s %ld disagree (a pipeline's microbatches are "
                               "its gradient accumulation steps)", c->accum_flag,
                               (long long)c->par.microbatches, opt, v), 0;
    c->accum_flag = opt;
    c->par.microbatches = v;
    return 1;
}

static int number(const char *cmd, int code, const char *arg, cli_config *c)
{
    const struct limit *l = NULL;
    for (size_t i = 0; i < sizeof LIMITS / sizeof LIMITS[0]; i++)
        if (LIMITS[i].code == code)
            l = &LIMITS[i];
    long v;
    if (!cli_parse_long(cmd, l->name, arg, l->lo, l->hi, &v))
        return 0;
    coh_parallel_config *p = &c->par;
    switch (code) {
    case C_LAYERS: c->layers = v; break;
    case C_HEADS: c->heads = v; break;
    case C_DIM: c->dim = v; break;
    case C_VOCAB: c->vocab = v; break;
    case C_SEQ: c->seq = v; break;
    case C_FFN: c->ffn = v; break;
    case C_DP: p->dp = (int)v; c->dp_given = 1; break;
    case C_TP: p->tp = (int)v; break;
    case C_PP: p->pp = (int)v; break;
    case C_ZERO: c->zero = (int)v; break;
    case C_MICRO_BATCH:
    case C_BATCH: p->micro_batch = v; break;
    case C_GRAD_ACCUM:
    case C_ACCUM:
    case C_MICROBATCHES: return set_microbatches(cmd, c, l->name, v);
    case C_VIRTUAL: p->virtual_stages = (int)v; break;
    case C_NODES: p->nodes = (int)v; break;
    case C_GPN: p->gpus_per_node = (int)v; break;
    case C_THREADS: c->threads = v; break;
    }
    return 1;
}

int cli_config_option(const char *cmd, int code, const char *arg, cli_config *c)
{
    coh_parallel_config *p = &c->par;
    switch (code) {
    case C_MODEL: c->preset = arg; return 1;
    case C_STRATEGY:
        c->strategy_given = 1;
        return choice(cmd, "--strategy", coh_strategy_parse(arg, &p->strategy));
    case C_SCHEDULE:
        c->schedule_given = 1;
        return choice(cmd, "--schedule", coh_schedule_parse(arg, &p->schedule));
    case C_PRECISION:
        c->precision_given = 1;
        return choice(cmd, "--precision", coh_precision_parse(arg, &p->precision));
    case C_RECOMPUTE: return choice(cmd, "--recompute", coh_recompute_parse(arg, &p->recompute));
    case C_OFFLOAD: return choice(cmd, "--offload", coh_offload_parse(arg, &p->offload));
    case C_SEQ_PARALLEL: p->sequence_parallel = 1; return 1;
    case C_DROPOUT: p->dropout = 1; return 1;
    case C_NO_DROPOUT: p->dropout = 0; return 1;
    case C_GRAD_DTYPE:
        if (strcmp(arg, "bf16") && strcmp(arg, "fp32")) {
            cli_usage_error(cmd, "invalid --grad-reduce-dtype '%s': valid are fp32, bf16", arg);
            return 0;
        }
        p->grad_reduce_bf16 = !strcmp(arg, "bf16");
        return 1;
    case C_GRAD_SYNC:
        if (strcmp(arg, "overlap") && strcmp(arg, "after-backward")) {
            cli_usage_error(cmd, "invalid --grad-sync '%s': valid are overlap, after-backward",
                            arg);
            return 0;
        }
        p->grad_sync_after_backward = !strcmp(arg, "after-backward");
        return 1;
    case C_BUCKET: {
        double mb;
        if (!cli_parse_double(cmd, "--bucket-mb", arg, 1e-3, 1 << 20, &mb))
            return 0;
        p->bucket_bytes = (size_t)((double)(float)mb * (1 << 20));
        return 1;
    }
    }
    if (code < CLI_CONFIG_FIRST || code >= C_END)
        return -1;
    return number(cmd, code, arg, c);
}

/* --zero and --strategy name the same thing: settle it, or say where they disagree. With
 * neither, a running job keeps 'single' (the trainer refuses it on several ranks rather than
 * guess), and an estimate over dp > 1 prices replicas (ddp). */
static int settle_strategy(const char *cmd, cli_config *c, int many, int running)
{
    coh_parallel_config *p = &c->par;
    if (c->zero < 0) {
        if (!c->strategy_given && many && !running)
            p->strategy = COH_STRATEGY_DDP;
        return CLI_OK;
    }
    coh_strategy z = c->zero == 0 && !many ? COH_STRATEGY_SINGLE : coh_strategy_of_zero(c->zero);
    if (c->strategy_given && coh_strategy_zero_stage(p->strategy) != c->zero)
        return cli_usage_error(cmd, "--strategy %s and --zero %d disagree (%s is ZeRO stage %d)",
                               coh_strategy_name(p->strategy), c->zero,
                               coh_strategy_name(p->strategy),
                               coh_strategy_zero_stage(p->strategy));
    if (!c->strategy_given)
        p->strategy = z;
    return CLI_OK;
}

int cli_config_finish(const char *cmd, cli_config *c, int world)
{
    coh_parallel_config *p = &c->par;
    long long mp = (long long)p->tp * p->pp;
    if (world > 0 && p->strategy != COH_STRATEGY_DP && world % mp == 0 && !c->dp_given)
        p->dp = (int)(world / mp); /* a given --dp stays, for cli_config_place to check */
    else if (world == 0 && !c->dp_given && p->gpus_per_node) {
        long long devices = (long long)(p->nodes ? p->nodes : 1) * p->gpus_per_node;
        if (devices % mp)
            return cli_usage_error(cmd, "tp %d x pp %d = %lld does not divide the %lld devices "
                                   "(nodes x gpus per node)", p->tp, p->pp, mp, devices);
        p->dp = (int)(devices / mp);
    }
    return settle_strategy(cmd, c, world > 1 || (world == 0 && p->dp > 1), world > 0);
}

int cli_config_place(const char *cmd, const cli_config *c, int world)
{
    const coh_parallel_config *p = &c->par;
    long long mp = (long long)p->tp * p->pp;
    if (p->strategy == COH_STRATEGY_DP)
        return CLI_OK;
    if (world % mp)
        return cli_usage_error(cmd, "tp %d x pp %d = %lld does not divide the %d ranks of this "
                               "job: start a multiple of %lld ranks, or change --tp/--pp",
                               p->tp, p->pp, mp, world, mp);
    if (p->dp != world / mp)
        return cli_usage_error(cmd, "invalid --dp '%d': this job has %d ranks, so dp = %d / (tp "
                               "%d x pp %d) = %lld", p->dp, world, world, p->tp, p->pp,
                               world / mp);
    return CLI_OK;
}

void cli_config_help(FILE *f)
{
    fputs("model (shared with 'cohort estimate' and 'cohort train'):\n"
          "  --model NAME          preset: gpt2, gpt2-medium, gpt2-large, gpt2-xl\n"
          "  --layers N --heads N --dim N --vocab N --seq N [--ffn N]   a custom GPT-2 shape\n"
          "parallel configuration (docs/parallel.md; the same flags in estimate and train):\n"
          "  --strategy S          single, dp, ddp, zero1, zero2, zero3 (what the dp axis does)\n"
          "  --zero 0|1|2|3        ZeRO stage, the same choice by number (0: ddp)\n"
          "  --dp N --tp N --pp N  data, tensor, pipeline parallel sizes (train: dp = ranks /\n"
          "                        (tp x pp), and with --strategy dp the device count)\n"
          "  --micro-batch N       sequences per micro-batch on one dp rank (alias --batch)\n"
          "  --grad-accum N        micro-batches per optimizer step (aliases --accum,\n"
          "                        --microbatches, a pipeline's word for the same count)\n"
          "  --schedule S          pipeline schedule: 1f1b, gpipe, interleaved, naive\n"
          "  --virtual-stages V    model chunks per rank for --schedule interleaved\n"
          "  --precision P         fp32 (cohort train's), bf16-mixed, fp16-mixed\n"
          "  --recompute R         none, selective, full\n"
          "  --sequence-parallel   shard LayerNorm and dropout activations over tp\n"
          "  --dropout, --no-dropout   whether dropout masks are stored (cohort's GPT has none)\n"
          "  --offload O           none, optimizer, optimizer+params\n"
          "  --bucket-mb X         gradient bucket size in MiB (25)\n"
          "  --grad-reduce-dtype D fp32 (default) or bf16: the type DDP/ZeRO gradients travel\n"
          "                        in (bf16: summed in fp32, rounded once; half the traffic)\n"
          "  --grad-sync S         overlap (default: each gradient bucket reduced as backward\n"
          "                        finishes it) or after-backward (all of them after the\n"
          "                        whole backward, as Megatron-LM without\n"
          "                        --overlap-grad-reduce; planned, not trained)\n"
          "  --nodes N --gpus-per-node N   the device count dp x tp x pp must match\n"
          "  --threads N           threads per rank (default OMP_NUM_THREADS, else the cpus\n"
          "                        this process may run on, shared among a launcher's ranks\n"
          "                        on the same cpus)\n",
          f);
}

void cli_config_json(coh_jw *w, const coh_parallel_config *p, int64_t seq, int64_t microbatches)
{
    coh_jw_key(w, "strategy");
    coh_jw_object_begin(w);
    coh_jw_key(w, "name"); coh_jw_string(w, coh_strategy_name(p->strategy));
    const struct { const char *k; int64_t v; } ints[] = {
        {"dp", p->dp}, {"tp", p->tp}, {"pp", p->pp}, {"zero", coh_strategy_zero_stage(p->strategy)},
        {"micro_batch", p->micro_batch}, {"seq", seq}, {"microbatches", microbatches},
        {"virtual_stages", p->virtual_stages}, {"bucket_bytes", (int64_t)p->bucket_bytes},
        {"nodes", p->nodes}, {"gpus_per_node", p->gpus_per_node}};
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++)
        coh_jw_field_int(w, ints[i].k, ints[i].v);
    coh_jw_key(w, "schedule"); coh_jw_string(w, coh_schedule_name(p->schedule));
    coh_jw_key(w, "precision"); coh_jw_string(w, coh_precision_name(p->precision));
    coh_jw_key(w, "recompute"); coh_jw_string(w, coh_recompute_name(p->recompute));
    coh_jw_key(w, "sequence_parallel"); coh_jw_bool(w, p->sequence_parallel);
    coh_jw_key(w, "dropout"); coh_jw_bool(w, p->dropout);
    coh_jw_key(w, "offload"); coh_jw_string(w, coh_offload_name(p->offload));
    coh_jw_key(w, "grad_reduce_dtype"); coh_jw_string(w, p->grad_reduce_bf16 ? "bf16" : "fp32");
    coh_jw_key(w, "grad_sync");
    coh_jw_string(w, p->grad_sync_after_backward ? "after-backward" : "overlap");
    coh_jw_object_end(w);
}
