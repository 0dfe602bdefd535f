/* cmd_estimate.c: `cohort estimate`: memory per device for a model and a training strategy,
 * whether it fits, and what would make it fit. */
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "cli_estimate.h"
#include "cohort/size.h"

const char cmd_estimate_summary[] = "estimate memory per device for a model and strategy";

static const char *cmd = "estimate";

static void usage(FILE *f)
{
    fprintf(f,
            "usage: cohort estimate MODEL [STRATEGY] [--device-memory SIZE | --inventory FILE]\n"
            "                       [--view cohort|accelerate|deepspeed] [--json] [--si]\n\n"
            "Memory per device (parameters, gradients, optimizer state, activations) before\n"
            "anything is allocated, from published formulas (docs/estimate.md).\n\n"
            "model (one of):\n"
            "  --model NAME            gpt2, gpt2-medium, gpt2-large, gpt2-xl\n"
            "  --config FILE           a Hugging Face config.json (GPT-2, Llama, Mistral)\n"
            "  --layers N --dim N --heads N --vocab N --seq N [--ffn N]   custom GPT-2 shape\n"
            "  --params N [--largest-layer N]   only counts (7.5e9, 124M, 2851e6)\n"
            "strategy:\n"
            "  --dp N --tp N --pp N    data, tensor, pipeline parallel sizes (1)\n"
            "  --zero 0|1|2|3          ZeRO stage (0)\n"
            "  --micro-batch N         sequences per microbatch (1)\n"
            "  --seq N                 sequence length (the model's context)\n"
            "  --grad-accum N          gradient accumulation steps (1)\n"
            "  --microbatches N        microbatches per step for pipelines (grad-accum, or pp)\n"
            "  --schedule gpipe|1f1b|interleaved  --virtual-stages V   pipeline schedule (1f1b)\n"
            "  --precision fp32|bf16-mixed|fp16-mixed   (bf16-mixed)\n"
            "  --recompute none|selective|full   activation recomputation (none)\n"
            "  --sequence-parallel     shard LayerNorm/dropout activations over tp\n"
            "  --no-dropout            no dropout masks are stored\n"
            "  --offload none|optimizer|optimizer+params   (none)\n"
            "  --nodes N --gpus-per-node N   device count that dp x tp x pp must match\n"
            "                          (dp defaults to it divided by tp x pp)\n"
            "fit and output:\n"
            "  --device-memory SIZE    memory of one device (80GiB, 16G, 40GB)\n"
            "  --inventory FILE        take it from a device inventory (first GPU)\n"
            "  --view accelerate       accelerate estimate-memory's table\n"
            "  --view deepspeed        DeepSpeed's ZeRO-2/ZeRO-3 estimator tables\n"
            "  --json                  machine-readable output\n"
            "  --si                    decimal units (GB = 10^9 bytes) instead of GiB\n"
            "  --engine cohort         what cohort's own trainer holds per rank (fp32): one\n"
            "                          device, or --dp N --zero 0|1|2|3 (ddp = zero 0), as\n"
            "                          'cohort train --strategy single|ddp|zero1|zero2|zero3'\n"
            "  --threads N             threads the engine runs (per-thread attention scratch)\n"
            "  --bucket-mb N           the trainer's gradient bucket size (25)\n");
}

enum {
    O_MODEL = 256, O_CONFIG, O_LAYERS, O_DIM, O_HEADS, O_VOCAB, O_SEQ, O_FFN, O_PARAMS,
    O_LARGEST, O_DP, O_TP, O_PP, O_ZERO, O_MB, O_ACCUM, O_MBS, O_SCHED, O_VIRT, O_PREC, O_RECOMP,
    O_SP, O_NODROP, O_OFFLOAD, O_NODES, O_GPN, O_DEVMEM, O_INVENTORY, O_VIEW, O_JSON, O_SI,
    O_ENGINE, O_THREADS, O_BUCKET, O_HELP
};

static const struct option options[] = {
    {"model", required_argument, 0, O_MODEL},
    {"config", required_argument, 0, O_CONFIG},
    {"layers", required_argument, 0, O_LAYERS},
    {"dim", required_argument, 0, O_DIM},
    {"heads", required_argument, 0, O_HEADS},
    {"vocab", required_argument, 0, O_VOCAB},
    {"seq", required_argument, 0, O_SEQ},
    {"ffn", required_argument, 0, O_FFN},
    {"params", required_argument, 0, O_PARAMS},
    {"largest-layer", required_argument, 0, O_LARGEST},
    {"dp", required_argument, 0, O_DP},
    {"tp", required_argument, 0, O_TP},
    {"pp", required_argument, 0, O_PP},
    {"zero", required_argument, 0, O_ZERO},
    {"micro-batch", required_argument, 0, O_MB},
    {"grad-accum", required_argument, 0, O_ACCUM},
    {"microbatches", required_argument, 0, O_MBS},
    {"schedule", required_argument, 0, O_SCHED},
    {"virtual-stages", required_argument, 0, O_VIRT},
    {"precision", required_argument, 0, O_PREC},
    {"recompute", required_argument, 0, O_RECOMP},
    {"sequence-parallel", no_argument, 0, O_SP},
    {"no-dropout", no_argument, 0, O_NODROP},
    {"offload", required_argument, 0, O_OFFLOAD},
    {"nodes", required_argument, 0, O_NODES},
    {"gpus-per-node", required_argument, 0, O_GPN},
    {"device-memory", required_argument, 0, O_DEVMEM},
    {"inventory", required_argument, 0, O_INVENTORY},
    {"view", required_argument, 0, O_VIEW},
    {"json", no_argument, 0, O_JSON},
    {"si", no_argument, 0, O_SI},
    {"engine", required_argument, 0, O_ENGINE},
    {"threads", required_argument, 0, O_THREADS},
    {"bucket-mb", required_argument, 0, O_BUCKET},
    {"help", no_argument, 0, O_HELP},
    {0, 0, 0, 0},
};

/* What the options said before they are turned into a model and a strategy. */
typedef struct parsed {
    const char *preset, *config, *params, *largest, *devmem, *inventory;
    int64_t layers, dim, heads, vocab, seq, ffn, grad_accum;
    int custom;   /* some custom dimension was given */
    int dp_given; /* else dp fills the device count, when one is given */
    int precision_given;
} parsed;

/* A positive integer option; 0 on error (message printed). */
static int64_t int_arg(const char *opt, const char *text, int64_t max)
{
    char *end;
    long long v = strtoll(text, &end, 10);
    if (*text == '\0' || *end != '\0' || v < 1 || v > max) {
        cli_usage_error(cmd, "invalid --%s '%s': expected a whole number from 1 to %lld", opt, text,
                        (long long)max);
        return 0;
    }
    return v;
}

/* --bucket-mb as `cohort train` takes it: MiB, fractions allowed. */
static int bucket_arg(const char *text, uint64_t *bytes)
{
    char *end;
    double mb = strtod(text, &end);
    if (*text == '\0' || *end != '\0' || !(mb >= 1e-3 && mb <= (double)(1 << 20))) {
        cli_usage_error(cmd, "invalid --bucket-mb '%s': expected MiB from 0.001 to 1048576", text);
        return 0;
    }
    *bytes = (uint64_t)((double)(float)mb * (1 << 20)); /* rounded as train rounds it */
    return 1;
}

/* Index of text in names[], or -1 with a message. */
static int choice(const char *opt, const char *text, const char *const *names, int n)
{
    for (int i = 0; i < n; i++)
        if (strcmp(text, names[i]) == 0)
            return i;
    char valid[160] = "";
    for (int i = 0; i < n; i++)
        snprintf(valid + strlen(valid), sizeof valid - strlen(valid), "%s%s", i ? ", " : "", names[i]);
    cli_usage_error(cmd, "invalid --%s '%s': expected one of %s", opt, text, valid);
    return -1;
}

static int parse_enum_option(int c, const char *arg, coh_strategy *s, est_request *r)
{
    static const char *const views[] = {"cohort", "accelerate", "deepspeed"};
    int v;
    switch (c) {
    case O_SCHED: v = choice("schedule", arg, est_sched_names, 3); if (v >= 0) s->schedule = (coh_schedule)v; break;
    case O_PREC: v = choice("precision", arg, est_prec_names, 3); if (v >= 0) s->precision = (coh_precision)v; break;
    case O_RECOMP: v = choice("recompute", arg, est_recomp_names, 3); if (v >= 0) s->recompute = (coh_recompute)v; break;
    case O_OFFLOAD: v = choice("offload", arg, est_offload_names, 3); if (v >= 0) s->offload = (coh_offload)v; break;
    default: v = choice("view", arg, views, 3); if (v >= 0) r->view = (est_view)v; break;
    }
    return v >= 0;
}

/* Handle one option; returns 0 after printing a usage error. */
static int parse_option(int c, const char *arg, parsed *p, est_request *r)
{
    coh_strategy *s = &r->strategy;
    int64_t v = 1;
    switch (c) {
    case O_MODEL: p->preset = arg; break;
    case O_CONFIG: p->config = arg; break;
    case O_PARAMS: p->params = arg; break;
    case O_LARGEST: p->largest = arg; break;
    case O_DEVMEM: p->devmem = arg; break;
    case O_INVENTORY: p->inventory = arg; break;
    case O_LAYERS: v = p->layers = int_arg("layers", arg, 100000); p->custom = 1; break;
    case O_DIM: v = p->dim = int_arg("dim", arg, 1 << 20); p->custom = 1; break;
    case O_HEADS: v = p->heads = int_arg("heads", arg, 1 << 16); p->custom = 1; break;
    case O_VOCAB: v = p->vocab = int_arg("vocab", arg, 1 << 30); p->custom = 1; break;
    case O_FFN: v = p->ffn = int_arg("ffn", arg, 1 << 24); p->custom = 1; break;
    case O_SEQ: v = p->seq = int_arg("seq", arg, 1 << 24); break;
    case O_DP: v = s->dp = (int)int_arg("dp", arg, 1 << 20); p->dp_given = 1; break;
    case O_TP: v = s->tp = (int)int_arg("tp", arg, 1 << 16); break;
    case O_PP: v = s->pp = (int)int_arg("pp", arg, 1 << 16); break;
    case O_ZERO:
        if (strlen(arg) != 1 || arg[0] < '0' || arg[0] > '3')
            return cli_usage_error(cmd, "invalid --zero '%s': expected 0, 1, 2 or 3", arg), 0;
        s->zero = arg[0] - '0';
        break;
    case O_MB: v = s->micro_batch = int_arg("micro-batch", arg, 1 << 20); break;
    case O_ACCUM: v = p->grad_accum = int_arg("grad-accum", arg, 1 << 20); break;
    case O_MBS: v = s->microbatches = int_arg("microbatches", arg, 1 << 20); break;
    case O_VIRT: v = s->virtual_stages = (int)int_arg("virtual-stages", arg, 1024); break;
    case O_NODES: v = s->nodes = (int)int_arg("nodes", arg, 1 << 16); break;
    case O_GPN: v = s->gpus_per_node = (int)int_arg("gpus-per-node", arg, 1 << 16); break;
    case O_SP: s->sequence_parallel = 1; break;
    case O_NODROP: s->dropout = 0; break;
    case O_JSON: r->json = 1; break;
    case O_SI: r->si = 1; break;
    case O_THREADS: v = r->threads = (int)int_arg("threads", arg, 4096); break;
    case O_BUCKET: v = bucket_arg(arg, &r->bucket_bytes); break;
    case O_ENGINE:
        if (strcmp(arg, "cohort") != 0)
            return cli_usage_error(cmd, "invalid --engine '%s': expected cohort", arg), 0;
        r->engine = 1;
        break;
    case O_PREC:
        p->precision_given = 1;
        return parse_enum_option(c, arg, s, r);
    default: return parse_enum_option(c, arg, s, r);
    }
    return v != 0;
}

static int custom_model(const parsed *p, coh_model_desc *m)
{
    const char *missing = !p->layers ? "--layers" : !p->dim ? "--dim" : !p->heads ? "--heads"
                        : !p->vocab ? "--vocab" : !p->seq ? "--seq" : NULL;
    if (missing)
        return cli_usage_error(cmd, "a custom model needs %s (and --layers, --dim, --heads, "
                                    "--vocab, --seq)", missing);
    coh_status st = coh_model_gpt(p->layers, p->dim, p->heads, p->vocab, p->seq, p->ffn, m);
    return st == COH_OK ? CLI_OK : cli_fail(cmd, st);
}

static int build_model(const parsed *p, est_request *r)
{
    int sources = !!p->preset + !!p->config + !!p->params + p->custom;
    if (sources != 1)
        return cli_usage_error(cmd, sources ? "give only one model: --model, --config, custom "
                                              "dimensions or --params"
                                            : "no model: give --model NAME, --config FILE, "
                                              "custom dimensions or --params N");
    if (p->largest && !p->params)
        return cli_usage_error(cmd, "--largest-layer goes with --params (other models have "
                                    "their largest layer counted)");
    coh_status st = COH_OK;
    if (p->custom)
        return custom_model(p, &r->model);
    if (p->preset)
        st = coh_model_preset(p->preset, &r->model);
    else if (p->config)
        st = coh_model_from_hf_file(p->config, &r->model);
    else {
        int64_t n, largest = 0;
        st = coh_count_parse(p->params, &n);
        if (st == COH_OK && p->largest)
            st = coh_count_parse(p->largest, &largest);
        if (st == COH_OK)
            st = coh_model_counts(n, largest, &r->model);
    }
    if (st != COH_OK)
        return cli_fail(cmd, st);
    if (!p->custom && p->seq)
        r->strategy.seq = p->seq;
    return CLI_OK;
}

static int build_rest(const parsed *p, est_request *r)
{
    if (p->grad_accum && r->strategy.microbatches && p->grad_accum != r->strategy.microbatches)
        return cli_usage_error(cmd, "--grad-accum %lld and --microbatches %lld disagree (a "
                                    "pipeline's microbatches are its accumulation steps)",
                               (long long)p->grad_accum, (long long)r->strategy.microbatches);
    if (p->grad_accum)
        r->strategy.microbatches = p->grad_accum;
    coh_strategy *s = &r->strategy;
    if (!p->dp_given && s->gpus_per_node) {
        int64_t devices = (int64_t)(s->nodes ? s->nodes : 1) * s->gpus_per_node;
        if (devices % ((int64_t)s->tp * s->pp) != 0)
            return cli_usage_error(cmd, "tp %d x pp %d = %lld does not divide the %lld devices "
                                        "(nodes x gpus per node)",
                                   s->tp, s->pp, (long long)s->tp * s->pp, (long long)devices);
        s->dp = (int)(devices / ((int64_t)s->tp * s->pp));
    }
    if (p->devmem && p->inventory)
        return cli_usage_error(cmd, "give --device-memory or --inventory, not both");
    coh_status st = COH_OK;
    if (p->devmem) {
        st = coh_size_parse(p->devmem, &r->device_bytes);
        r->device_from = "--device-memory";
        if (st == COH_OK && r->device_bytes == 0)
            return cli_usage_error(cmd, "invalid --device-memory '%s': must be more than 0",
                                   p->devmem);
    } else if (p->inventory) {
        st = coh_plan_inventory_memory(p->inventory, &r->device_bytes);
        r->device_from = p->inventory;
    }
    return st == COH_OK ? CLI_OK : cli_fail(cmd, st);
}

int cmd_estimate(int argc, char **argv)
{
    est_request r;
    memset(&r, 0, sizeof r);
    coh_strategy_init(&r.strategy);
    parsed p;
    memset(&p, 0, sizeof p);
    optind = 1;
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, "h", options, NULL)) != -1) {
        if (c == 'h' || c == O_HELP) {
            usage(stdout);
            return CLI_OK;
        }
        if (c == '?')
            return cli_usage_error(cmd, "unknown or incomplete option '%s' (see 'cohort estimate "
                                        "--help')",
                                   argv[optind - 1]);
        if (!parse_option(c, optarg, &p, &r))
            return CLI_USAGE;
    }
    if (optind < argc)
        return cli_usage_error(cmd, "unexpected argument '%s' (see 'cohort estimate --help')",
                               argv[optind]);
    int rc = build_model(&p, &r);
    if (rc == CLI_OK)
        rc = build_rest(&p, &r);
    if (rc != CLI_OK)
        return rc;
    if (r.engine) {
        if (p.precision_given && r.strategy.precision != COH_PREC_FP32)
            return cli_usage_error(cmd, "--engine cohort trains in fp32 (got --precision %s)",
                                   r.strategy.precision == COH_PREC_FP16_MIXED ? "fp16-mixed"
                                                                              : "bf16-mixed");
        if (r.view != VIEW_COHORT)
            return cli_usage_error(cmd, "--engine cohort and --view do not combine");
        r.strategy.precision = COH_PREC_FP32;
        r.strategy.dropout = 0;
    }
    coh_status st = coh_strategy_check(&r.model, &r.strategy);
    if (st != COH_OK)
        return cli_fail(cmd, st);
    return r.engine ? est_print_engine(&r) : est_print(&r);
}
