/* cmd_plan.c: `cohort plan`: the fastest parallel configurations of a model on a machine (this
 * one, measured, or GPUs from an inventory or preset), ranked by simulated step time, with the
 * reasons and the command line of the top pick; `--explain` prices the one the flags describe. */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "cli_device.h"
#include "cli_mesh.h"
#include "cli_config.h"
#include "cohort/json_writer.h"
#include "cohort/planner.h"
#include "cohort/size.h"
#include "cohort/train.h" /* coh_engine_ensure_environment */

const char cmd_plan_summary[] = "choose the fastest parallel configuration by simulation";

static const char *cmd = "plan";

static void usage(FILE *f)
{
    fprintf(f,
            "usage: cohort plan MODEL --global-batch N [--devices N | --nodes N --gpus-per-node G]\n"
            "                   [--inventory FILE | --hw PRESET | --calibration FILE]\n"
            "                   [--top K] [--json] [--explain] [--trace FILE.json]\n\n"
            "Searches every (dp, tp, pp) split of the devices (tp inside a node), ZeRO stage,\n"
            "micro-batch, schedule, virtual stages and recompute that fits memory (the\n"
            "estimator's figures), and ranks them by a simulated step: per-op costs of the\n"
            "engine's GEMMs, attention and elementwise ops from a rate table, α-β costs of the\n"
            "collectives, and the pipeline schedule's own action lists (docs/plan.md).\n\n"
            "model: --model NAME, --config FILE, or --layers --dim --heads --vocab --seq\n"
            "hardware:\n"
            "  --calibration FILE      this machine's rates from 'cohort bench gemm' (default:\n"
            "                          a quick probe of this machine); with --nodes N, N such\n"
            "                          machines joined by its \"inter_node\" link ('cohort\n"
            "                          bench link'), --gpus-per-node ranks on each\n"
            "  --inventory FILE        GPUs of an inventory (docs/inventory.md) with its \"links\"\n"
            "  --hw PRESET             a100-80gb, a100-40gb, h100-sxm, v100-32gb (8 per node)\n"
            "  --link-intra GB/S[:US]  link inside a node (GB/s one way, latency in us)\n"
            "  --link-inter GB/S[:US]  link between nodes, per device\n"
            "  --device-memory SIZE    memory per device (default: the hardware's)\n"
            "  --measure               time cohort's own engine on this machine at each\n"
            "                          configuration's shapes (a second or so per shape)\n"
            "                          instead of composing compute from the rates\n"
            "search and output:\n"
            "  --global-batch N        sequences per optimizer step (required)\n"
            "  --devices N             devices to use (default: nodes x gpus per node; this\n"
            "                          machine: its cores)\n"
            "  --top K                 configurations to list (default 5)\n"
            "  --runnable-only         only what 'cohort train' runs today\n"
            "  --explain               price only the configuration the flags describe\n"
            "  --stage-layers SPLIT    with --explain: the pipeline split 'cohort train\n"
            "                          --stage-layers' takes, head shards included (default:\n"
            "                          the one cohort train chooses)\n"
            "  --trace FILE            the simulated step of the top pick (or --explain's) as\n"
            "                          Perfetto events, like 'cohort train --trace'\n"
            "  --json                  machine-readable output\n"
            "The --tp and --pp flags fix those degrees in the search; with --explain every\n"
            "training flag of 'cohort train' is taken as given.\n");
    cli_config_help(f);
}

enum { O_CONFIG = 256, O_GB, O_DEVICES, O_INVENTORY, O_HW, O_CAL, O_LINK_INTRA, O_LINK_INTER,
       O_DEVMEM, O_MEASURE, O_TOP, O_RUNNABLE, O_EXPLAIN, O_STAGELAYERS, O_TRACE, O_JSON,
       O_HELP };

static const struct option own_options[] = {
    {"config", required_argument, 0, O_CONFIG},
    {"global-batch", required_argument, 0, O_GB},
    {"devices", required_argument, 0, O_DEVICES},
    {"inventory", required_argument, 0, O_INVENTORY},
    {"hw", required_argument, 0, O_HW},
    {"calibration", required_argument, 0, O_CAL},
    {"link-intra", required_argument, 0, O_LINK_INTRA},
    {"link-inter", required_argument, 0, O_LINK_INTER},
    {"device-memory", required_argument, 0, O_DEVMEM},
    {"measure", no_argument, 0, O_MEASURE},
    {"top", required_argument, 0, O_TOP},
    {"runnable-only", no_argument, 0, O_RUNNABLE},
    {"explain", no_argument, 0, O_EXPLAIN},
    {"stage-layers", required_argument, 0, O_STAGELAYERS},
    {"trace", required_argument, 0, O_TRACE},
    {"json", no_argument, 0, O_JSON},
    {"help", no_argument, 0, O_HELP},
    {0, 0, 0, 0},
};

typedef struct opts {
    cli_config cfg;
    const char *config, *inventory, *hw, *cal, *link_intra, *link_inter, *devmem, *trace;
    long global_batch, devices, top;
    int inventory_env; /* the inventory is COHORT_INVENTORY's: no machine was named */
    int runnable, explain, json, measure, tp_given, pp_given, recompute_given, strategy_given;
    int micro_batch_given;
    char chosen_by_search[64]; /* the first flag given that the search chooses itself, as
                                  typed: "--schedule 'gpipe'", "--sequence-parallel" */
} opts;

/* Shared flags that fix what the search chooses and that it cannot be told to hold: given
 * without --explain they are refused, not ignored. (--tp, --pp, --recompute, --strategy,
 * --zero, --precision and --micro-batch it holds; --dropout, --grad-sync, --bucket-mb and
 * --grad-reduce-dtype it applies to every candidate.) */
static const char *const SEARCH_CHOOSES[] = {
    "dp", "grad-accum", "accum", "microbatches", "schedule", "virtual-stages",
    "sequence-parallel", "offload", "threads",
};

/* Handle one option (a cli_option_fn); notes which of the search's degrees the flags fix. */
static int parse_option(void *ctx, int c, const char *name, const char *arg)
{
    opts *o = ctx;
    if (c >= CLI_CONFIG_FIRST) {
        o->tp_given |= !strcmp(name, "tp");
        o->pp_given |= !strcmp(name, "pp");
        o->recompute_given |= !strcmp(name, "recompute");
        o->strategy_given |= !strcmp(name, "strategy") || !strcmp(name, "zero");
        o->micro_batch_given |= !strcmp(name, "micro-batch") || !strcmp(name, "batch");
        for (size_t i = 0; i < sizeof SEARCH_CHOOSES / sizeof *SEARCH_CHOOSES; i++)
            if (!o->chosen_by_search[0] && !strcmp(name, SEARCH_CHOOSES[i])) {
                if (arg)
                    snprintf(o->chosen_by_search, sizeof o->chosen_by_search, "--%s '%s'", name,
                             arg);
                else
                    snprintf(o->chosen_by_search, sizeof o->chosen_by_search, "--%s", name);
            }
    }
    int shared = cli_config_option(cmd, c, arg, &o->cfg);
    if (shared >= 0)
        return shared;
    switch (c) {
    case 'h':
    case O_HELP: usage(stdout); return -1;
    case O_CONFIG: o->config = arg; break;
    case O_GB: return cli_parse_long(cmd, "--global-batch", arg, 1, 1L << 30, &o->global_batch);
    case O_DEVICES: return cli_parse_long(cmd, "--devices", arg, 1, 1L << 20, &o->devices);
    case O_INVENTORY: o->inventory = arg; break;
    case O_HW: o->hw = arg; break;
    case O_CAL: o->cal = arg; break;
    case O_LINK_INTRA: o->link_intra = arg; break;
    case O_LINK_INTER: o->link_inter = arg; break;
    case O_DEVMEM: o->devmem = arg; break;
    case O_TOP: return cli_parse_long(cmd, "--top", arg, 1, 1000, &o->top);
    case O_MEASURE: o->measure = 1; break;
    case O_RUNNABLE: o->runnable = 1; break;
    case O_EXPLAIN: o->explain = 1; break;
    case O_STAGELAYERS: o->cfg.par.stage_layers = arg; break;
    case O_TRACE: o->trace = arg; break;
    case O_JSON: o->json = 1; break;
    }
    return 1;
}

static int build_model(const opts *o, coh_model_desc *m)
{
    const cli_config *c = &o->cfg;
    int custom = cli_config_shape_given(c);
    int sources = !!(c->preset || custom) + !!o->config;
    if (sources != 1)
        return cli_usage_error(cmd, sources ? "give only one model: --model, --config or custom "
                                              "dimensions"
                                            : "no model: give --model NAME, --config FILE or "
                                              "--layers/--dim/--heads/--vocab/--seq");
    coh_status st;
    if (o->config && cli_check_input(cmd, "--config", o->config) != CLI_OK)
        return CLI_USAGE;
    if (o->config)
        st = coh_model_from_hf_file(o->config, m);
    else if (!custom)
        st = coh_model_preset(c->preset, m);
    else
        return cli_config_model(cmd, c, m);
    return st == COH_OK ? CLI_OK : cli_fail(cmd, st);
}

static int build_hw(opts *o, coh_hw *hw)
{
    int sources = !!o->inventory + !!o->hw + !!o->cal;
    if (sources > 1)
        return cli_usage_error(cmd, "give one of --inventory, --hw and --calibration");
    coh_parallel_config *p = &o->cfg.par;
    coh_status st;
    if (o->cal && cli_check_input(cmd, "--calibration", o->cal) != CLI_OK)
        return CLI_USAGE;
    if (o->inventory) /* a flag overrides the file: --link-inter gives the missing link */
        st = coh_hw_from_inventory(o->inventory, o->link_inter ? 1 : p->nodes ? p->nodes : 1, hw);
    else if (o->hw)
        st = coh_hw_preset(o->hw, hw);
    else if (o->cal)
        st = coh_calibration_load(o->cal, hw);
    else
        st = coh_calibration_measure(1, 0, hw);
    if (st != COH_OK && o->inventory)
        return cli_inventory_fail(cmd, o->inventory_env ? coh_err_prefix(st, "COHORT_INVENTORY")
                                                        : st);
    if (st != COH_OK)
        return cli_fail(cmd, st);
    if (hw->note[0]) /* an inventory's GPUs differ: every device is priced as the smallest */
        fprintf(stderr, "%s %s: warning: %s\n", cli_progname, cmd, hw->note);
    if (hw->gpu) {
        if (p->gpus_per_node)
            hw->gpus_per_node = p->gpus_per_node;
        hw->nodes = p->nodes ? p->nodes : 1;
    }
    if (o->link_intra && !cli_parse_link(cmd, "--link-intra", o->link_intra, &hw->intra))
        return CLI_USAGE;
    if (o->link_inter && !cli_parse_link(cmd, "--link-inter", o->link_inter, &hw->inter))
        return CLI_USAGE;
    if (!hw->gpu && o->cfg.threads)
        hw->threads = (int)o->cfg.threads;
    if (o->devmem && !cli_parse_memory(cmd, "--device-memory", o->devmem, &hw->memory_bytes))
        return CLI_USAGE;
    if (hw->gpu && hw->nodes > 1 && hw->inter.bytes_per_s <= 0)
        return cli_fail(cmd, coh_errf(COH_ERR_INVALID, "--nodes %d needs the link between nodes: "
                                      "an inventory with \"links\": {\"inter_node\": ...} or "
                                      "--link-inter GB/S[:US]", hw->nodes));
    if (!hw->gpu && p->nodes > 1) { /* several nodes like this one, its ranks per node */
        if (hw->inter.bytes_per_s <= 0)
            return cli_fail(cmd, coh_errf(COH_ERR_INVALID, "--nodes %d needs the link between "
                            "nodes: a calibration file with \"inter_node\" ('cohort bench link "
                            "--calibration FILE' with one rank on each of two nodes) or "
                            "--link-inter GB/S[:US]", p->nodes));
        if (o->devices && o->devices % p->nodes)
            return cli_usage_error(cmd, "invalid --devices '%ld': --nodes %d run the same "
                                   "number of ranks each", o->devices, p->nodes);
        hw->nodes = p->nodes;
        hw->gpus_per_node = p->gpus_per_node ? p->gpus_per_node
                            : o->devices     ? (int)(o->devices / p->nodes)
                                             : 0; /* 0: searched, 1 to cores per node */
    }
    if (o->measure && (st = coh_hw_measure_engine(hw)) != COH_OK)
        return cli_fail(cmd, st);
    return CLI_OK;
}

/* ---- output --------------------------------------------------------------------------------- */

/* The model as cohort train takes it: a preset by name, anything else (a GPT-2 config.json
 * too: train has no --config) by its dimensions. */
static void model_flags(const opts *o, const coh_model_desc *m, char *b, size_t cap)
{
    if (o->cfg.preset && !(o->cfg.layers || o->cfg.dim || o->cfg.heads || o->cfg.vocab))
        snprintf(b, cap, "--model %s", o->cfg.preset);
    else
        snprintf(b, cap, "--layers %lld --dim %lld --heads %lld --vocab %lld", (long long)m->layers,
                 (long long)m->dim, (long long)m->heads, (long long)m->vocab);
}

/* Open MPI's host list for NODES nodes of PER ranks each ("--host HOST1:4,HOST2:4"), or a
 * host file past a few nodes. */
static size_t mpirun_hosts(char *b, size_t cap, int nodes, int per)
{
    if (nodes > 4)
        return (size_t)snprintf(b, cap, "--hostfile HOSTFILE --npernode %d", per);
    size_t k = (size_t)snprintf(b, cap, "--host ");
    for (int i = 0; i < nodes && k < cap; i++)
        k += (size_t)snprintf(b + k, cap - k, "%sHOST%d:%d", i ? "," : "", i + 1, per);
    return k;
}

/* The exact launch line of a configuration, runnable once the user puts in the placeholders
 * (HOST..., SHARDS, N). Over several nodes cohort train's ranks reach each other only through
 * MPI (docs/cluster.md): the line is Open MPI's mpirun with COHORT_COMM=mpi, never
 * `cohort run --nnodes`, whose ranks talk through one node's shared memory. Empty for a model
 * cohort train cannot train: no line of it would parse. */
static void command_line(const opts *o, const coh_model_desc *m, const coh_hw *hw,
                         const coh_plan_result *r, char *b, size_t cap)
{
    const coh_parallel_config *c = &r->config;
    int n = c->dp * c->tp * c->pp;
    size_t k = 0;
    b[0] = '\0';
    if (!coh_model_trainable(m, NULL, 0))
        return;
#define ADD(...) k += (size_t)snprintf(b + (k < cap ? k : cap), k < cap ? cap - k : 0, __VA_ARGS__)
    if (n > 1) {
        int per = hw->gpu ? (n < hw->gpus_per_node ? n : hw->gpus_per_node)
                  : hw->nodes > 1 ? (n + hw->nodes - 1) / hw->nodes : n;
        int nodes = (n + per - 1) / per;
        if (nodes > 1) {
            char hosts[128];
            mpirun_hosts(hosts, sizeof hosts, nodes, per);
            ADD("mpirun -np %d %s -x COHORT_COMM=mpi ", n, hosts);
        } else
            ADD("cohort run --nproc-per-node %d --standalone ", per);
    }
    ADD("cohort train");
    if (r->threads)
        ADD(" --threads %d", r->threads);
    if (c->tp > 1)
        ADD(" --tp %d", c->tp);
    if (c->pp > 1)
        ADD(" --pp %d --schedule %s", c->pp, coh_schedule_name(c->schedule));
    if (c->virtual_stages > 1)
        ADD(" --virtual-stages %d", c->virtual_stages);
    if (n > 1)
        ADD(" --strategy %s", coh_strategy_name(c->strategy));
    ADD(" --micro-batch %lld --grad-accum %lld", (long long)c->micro_batch,
        (long long)c->microbatches);
    if (c->recompute != COH_RECOMPUTE_NONE)
        ADD(" --recompute %s", coh_recompute_name(c->recompute));
    if (c->sequence_parallel)
        ADD(" --sequence-parallel");
    if (c->dropout)
        ADD(" --dropout");
    if (c->grad_sync_after_backward)
        ADD(" --grad-sync after-backward");
    if (c->bucket_bytes)
        ADD(" --bucket-mb %g", (double)c->bucket_bytes / (1 << 20));
    if (c->grad_reduce_bf16)
        ADD(" --grad-reduce-dtype bf16");
    if (c->stage_layers)
        ADD(" --stage-layers %s", c->stage_layers);
    if (c->precision != COH_PREC_FP32)
        ADD(" --precision %s", coh_precision_name(c->precision));
    char mf[160];
    model_flags(o, m, mf, sizeof mf);
    ADD(" %s --seq %lld --data SHARDS --steps N", mf, (long long)c->seq);
#undef ADD
}

static void fmt_time(double s, char *b, size_t cap)
{
    if (s >= 1)
        snprintf(b, cap, "%.3f s", s);
    else if (s >= 1e-3)
        snprintf(b, cap, "%.2f ms", s * 1e3);
    else
        snprintf(b, cap, "%.1f us", s * 1e6);
}

static void print_row(int i, const coh_plan_result *r)
{
    const coh_parallel_config *c = &r->config;
    char t[32], mem[32], sched[24];
    fmt_time(r->step_s, t, sizeof t);
    coh_size_format(r->memory_bytes, mem, sizeof mem);
    if (c->pp > 1 && c->virtual_stages > 1)
        snprintf(sched, sizeof sched, "%s v%d", coh_schedule_name(c->schedule), c->virtual_stages);
    else
        snprintf(sched, sizeof sched, "%s", c->pp > 1 ? coh_schedule_name(c->schedule) : "-");
    printf("%3d %5d %3d %3d  %-7s %4lld %5lld  %-15s %-9s %-3s %11s %12.0f %5.1f%% %10s %6.1f%% "
           "%5.1f%% %6.1f%%\n",
           i, c->dp, c->tp, c->pp, coh_strategy_name(c->strategy), (long long)c->micro_batch,
           (long long)c->microbatches, sched, coh_recompute_name(c->recompute),
           c->sequence_parallel ? "sp" : "-", t, r->tokens_per_s, 100 * r->mfu, mem,
           100 * r->bubble_s / r->step_s, 100 * r->comm_s / r->step_s,
           100 * r->exposed_comm_s / r->step_s);
}

static void print_header(void)
{
    printf("  # %5s %3s %3s  %-7s %4s %5s  %-15s %-9s %-3s %11s %12s %6s %10s %7s %6s %7s\n", "dp",
           "tp", "pp", "zero", "mb", "m", "schedule", "recompute", "sp", "step", "tokens/s",
           "MFU", "memory", "bubble", "comm", "exposed");
}

/* The fields of one priced configuration, into the open object. */
static void json_fields(coh_jw *w, const coh_plan_result *r, const char *command)
{
    cli_config_json(w, &r->config, r->config.seq, r->config.microbatches);
    coh_jw_field_double(w, "step_s", r->step_s);
    coh_jw_field_double(w, "compute_s", r->compute_s);
    coh_jw_field_double(w, "bubble_s", r->bubble_s);
    coh_jw_field_double(w, "comm_s", r->comm_s);
    coh_jw_field_double(w, "exposed_comm_s", r->exposed_comm_s);
    coh_jw_field_double(w, "tokens_per_s", r->tokens_per_s);
    coh_jw_field_double(w, "mfu", r->mfu);
    coh_jw_field_double(w, "model_flops", r->model_flops);
    coh_jw_field_uint(w, "memory_bytes", r->memory_bytes);
    coh_jw_field_bool(w, "fits", r->fits);
    coh_jw_field_int(w, "threads", r->threads);
    coh_jw_field_bool(w, "runnable", r->runnable);
    coh_jw_field_string(w, "missing", r->runnable ? NULL : r->missing);
    coh_jw_field_string(w, "reasons", r->reasons);
    coh_jw_field_string(w, "command", command[0] ? command : NULL);
}

static void json_result(coh_jw *w, const coh_plan_result *r, const char *command)
{
    coh_jw_object_begin(w);
    json_fields(w, r, command);
    coh_jw_object_end(w);
}

static void print_hw(const coh_hw *hw, int devices)
{
    char mem[32];
    coh_size_format(hw->memory_bytes, mem, sizeof mem);
    if (hw->gpu)
        printf("hardware: %s, %s, %d per node, intra-node %.0f GB/s, %s", hw->name, mem,
               hw->gpus_per_node, hw->intra.bytes_per_s / 1e9,
               hw->inter.bytes_per_s > 0 ? "" : "no inter-node link\n");
    else
        printf("hardware: %s, %d cores, %s, ranks linked at %.2f GB/s (%.0f us)\n", hw->name,
               hw->cores, mem, hw->intra.bytes_per_s / 1e9, hw->intra.alpha_s * 1e6);
    if (!hw->gpu && hw->nodes > 1)
        printf("nodes: %d like it, inter-node link %.4g GB/s (%.4g us)\n", hw->nodes,
               hw->inter.bytes_per_s / 1e9, hw->inter.alpha_s * 1e6);
    if (hw->gpu && hw->inter.bytes_per_s > 0)
        printf("inter-node %.1f GB/s per device, %d node%s\n", hw->inter.bytes_per_s / 1e9,
               hw->nodes, hw->nodes == 1 ? "" : "s");
    printf("rates: %s%s; %d device%s\n", hw->source,
           hw->engine ? ", compute measured on the engine itself" : "", devices,
           devices == 1 ? "" : "s");
}

static int no_fit(const opts *o, const coh_model_desc *m, const coh_hw *hw, int devices)
{
    if (devices < 1)
        devices = hw->cores > 0 ? hw->cores : 1;
    fprintf(stderr, "cohort plan: error: %s\n", coh_last_error());
    coh_parallel_config c;
    coh_parallel_config_init(&c);
    c.dp = devices;
    c.strategy = devices > 1 ? COH_STRATEGY_DDP : COH_STRATEGY_SINGLE;
    c.seq = o->cfg.seq;
    c.precision = o->cfg.par.precision;
    c.microbatches = o->global_batch / devices > 0 ? o->global_batch / devices : 1;
    coh_remedy rem[8];
    int n = 0, node = hw->gpu || hw->nodes > 1 ? hw->gpus_per_node : 0; /* tp within a node */
    if (hw->memory_bytes &&
        coh_plan_remedies(m, &c, hw->memory_bytes, node, rem, 8, &n) == COH_OK && n > 0) {
        fprintf(stderr, "the estimator's remedies for dp %d, micro-batch 1:\n", devices);
        for (int i = 0; i < n; i++) {
            char b[32];
            coh_size_format(rem[i].total_bytes, b, sizeof b);
            fprintf(stderr, "  %s: %s per device%s%s\n", rem[i].what, b,
                    rem[i].runnable ? "" : " (not in cohort's trainer: ",
                    rem[i].runnable ? "" : rem[i].missing);
        }
    } else {
        fprintf(stderr, "the estimator finds no single change that fits: more devices, or a "
                        "smaller model or sequence\n");
    }
    return CLI_FAILED;
}

/* --explain --json: the priced configuration, and the mesh as the planner priced it (every
 * rank's stage and peers, each stage's messages, links and memory), in the dry run's format. */
static int explain_json(const coh_model_desc *m, const coh_hw *hw, const coh_plan_result *r,
                        const char *line)
{
    const coh_parallel_config *c = &r->config;
    coh_plan_stage_view *v = calloc((size_t)c->pp, sizeof *v);
    coh_status st = v ? coh_plan_stage_views(m, c, hw, v) : coh_errf(COH_ERR_NOMEM, "out of memory");
    if (st) {
        free(v);
        return cli_fail(cmd, st);
    }
    coh_jw w;
    coh_jw_init(&w, stdout, 0);
    coh_jw_object_begin(&w);
    json_fields(&w, r, line);
    int per_node = hw->gpu || hw->nodes > 1 ? hw->gpus_per_node : c->dp * c->pp * c->tp;
    cli_mesh_json(&w, c->dp, c->pp, c->tp, per_node, v);
    coh_jw_object_end(&w);
    coh_jw_finish(&w);
    printf("\n");
    free(v);
    return CLI_OK;
}

static int explain(opts *o, const coh_model_desc *m, const coh_hw *hw)
{
    coh_parallel_config c = o->cfg.par;
    c.seq = o->cfg.seq;
    coh_plan_result r;
    coh_status st = coh_plan_config(m, &c, hw, &r);
    if (st != COH_OK)
        return cli_fail(cmd, st);
    char line[1024];
    command_line(o, m, hw, &r, line, sizeof line);
    if (o->trace && (st = coh_plan_trace(m, &c, hw, o->trace)) != COH_OK)
        return cli_fail(cmd, st);
    if (o->json)
        return explain_json(m, hw, &r, line);
    print_hw(hw, c.dp * c.tp * c.pp);
    print_header();
    print_row(1, &r);
    char t[32];
    fmt_time(r.compute_s, t, sizeof t);
    printf("    compute %s; reasons: %s\n", t, r.reasons);
    if (!r.fits) {
        char a[32], b[32];
        coh_size_format(r.memory_bytes, a, sizeof a);
        coh_size_format(hw->memory_bytes, b, sizeof b);
        printf("    does not fit: %s per device against %s\n", a, b);
    }
    if (r.runnable)
        printf("run it: %s\n", line);
    else
        printf("not runnable by cohort train yet: %s\n", r.missing);
    return CLI_OK;
}

/* This machine without --devices: one process with every core up to one rank per core, merged
 * by step time. More ranks than cores are not searched: the model does not price the
 * scheduler's turns at every synchronisation, and they measured from 0.9x to 6.2x its
 * prediction (docs/BENCHMARKS.md, plan); --devices N prices them. */
static coh_status search_rank_counts(const coh_model_desc *m, coh_plan_request *q,
                                     const coh_hw *hw, coh_plan_result *res, int top, int *n,
                                     coh_plan_stats *stats)
{
    coh_plan_result *part = calloc((size_t)top, sizeof *part);
    if (!part)
        return coh_errf(COH_ERR_NOMEM, "out of memory");
    memset(stats, 0, sizeof *stats);
    *n = 0;
    coh_status last = COH_OK;
    int found = 0, nodes = hw->nodes > 1 ? hw->nodes : 1;
    coh_hw node_hw = *hw; /* over several nodes: `ranks` on each */
    for (int ranks = 1; ranks <= hw->cores; ranks++) {
        q->devices = ranks * nodes;
        if (nodes > 1)
            node_hw.gpus_per_node = ranks;
        coh_plan_stats s;
        int k = 0;
        coh_status st = coh_plan_search(m, q, &node_hw, part, top, &k, &s);
        stats->considered += s.considered;
        stats->invalid += s.invalid;
        stats->too_big += s.too_big;
        stats->simulated += s.simulated;
        stats->pruned += s.pruned;
        stats->splits_searched += s.splits_searched;
        stats->splits_reused += s.splits_reused;
        if (st != COH_OK) {
            last = st;
            continue;
        }
        found = 1;
        for (int i = 0; i < k; i++) { /* merge: stable, fewer ranks first on ties */
            int at = *n;
            while (at > 0 && part[i].step_s < res[at - 1].step_s)
                at--;
            if (at >= top)
                continue;
            int end = *n < top ? *n : top - 1;
            memmove(&res[at + 1], &res[at], (size_t)(end - at) * sizeof *res);
            res[at] = part[i];
            if (*n < top)
                (*n)++;
        }
    }
    free(part);
    q->devices = 0;
    return found ? COH_OK : last;
}

static int search(opts *o, const coh_model_desc *m, const coh_hw *hw)
{
    coh_plan_request q;
    memset(&q, 0, sizeof q);
    q.global_batch = o->global_batch;
    q.seq = o->cfg.seq;
    int devices = (int)o->devices;
    if (!devices && (hw->gpu || (hw->nodes > 1 && hw->gpus_per_node > 0)))
        devices = hw->nodes * hw->gpus_per_node;
    q.devices = devices;
    q.precision = o->cfg.precision_given ? o->cfg.par.precision : hw->precision;
    o->cfg.par.precision = q.precision;
    q.runnable_only = o->runnable;
    q.fixed_tp = o->tp_given ? o->cfg.par.tp : 0;
    q.fixed_pp = o->pp_given ? o->cfg.par.pp : 0;
    q.fixed_recompute = o->recompute_given;
    q.recompute = o->cfg.par.recompute;
    q.fixed_strategy = o->strategy_given;
    q.strategy = o->cfg.par.strategy;
    q.fixed_micro_batch = o->micro_batch_given ? o->cfg.par.micro_batch : 0;
    q.dropout = o->cfg.par.dropout;
    q.grad_sync_after_backward = o->cfg.par.grad_sync_after_backward;
    q.bucket_bytes = o->cfg.par.bucket_bytes;
    q.grad_reduce_bf16 = o->cfg.par.grad_reduce_bf16;
    int top = o->top ? (int)o->top : 5;
    coh_plan_result *res = calloc((size_t)top, sizeof *res);
    if (!res)
        return cli_fail(cmd, coh_errf(COH_ERR_NOMEM, "out of memory"));
    coh_plan_stats stats;
    int n = 0;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    coh_status st;
    if (hw->gpu || devices)
        st = coh_plan_search(m, &q, hw, res, top, &n, &stats);
    else
        st = search_rank_counts(m, &q, hw, res, top, &n, &stats);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double secs = (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) * 1e-9;
    if (st != COH_OK && stats.considered > 0 && n == 0 && stats.too_big > 0) {
        free(res);
        return no_fit(o, m, hw, devices);
    }
    if (st != COH_OK) {
        free(res);
        return cli_fail(cmd, st);
    }
    char line[1024] = "";
    command_line(o, m, hw, &res[0], line, sizeof line);
    if (o->trace && (st = coh_plan_trace(m, &res[0].config, hw, o->trace)) != COH_OK) {
        free(res);
        return cli_fail(cmd, st);
    }
    if (o->json) {
        coh_jw w;
        coh_jw_init(&w, stdout, 0);
        coh_jw_object_begin(&w);
        coh_jw_field_string(&w, "model", m->name);
        coh_jw_field_int(&w, "devices", devices);
        coh_jw_field_string(&w, "hardware", hw->name);
        coh_jw_field_string(&w, "rates", hw->source);
        coh_jw_field_int(&w, "nodes", hw->nodes > 1 ? hw->nodes : 1);
        if (hw->nodes > 1) {
            coh_jw_key(&w, "inter_node");
            coh_jw_object_begin(&w);
            coh_jw_field_double(&w, "gbytes_per_s", hw->inter.bytes_per_s / 1e9);
            coh_jw_field_double(&w, "latency_us", hw->inter.alpha_s * 1e6);
            coh_jw_object_end(&w);
        }
        coh_jw_field_int(&w, "global_batch", q.global_batch);
        coh_jw_key(&w, "search");
        coh_jw_object_begin(&w);
        coh_jw_field_int(&w, "considered", stats.considered);
        coh_jw_field_int(&w, "invalid", stats.invalid);
        coh_jw_field_int(&w, "too_big", stats.too_big);
        coh_jw_field_int(&w, "simulated", stats.simulated);
        coh_jw_field_int(&w, "pruned", stats.pruned);
        coh_jw_field_int(&w, "splits_searched", stats.splits_searched);
        coh_jw_field_int(&w, "splits_reused", stats.splits_reused);
        coh_jw_field_double(&w, "seconds", secs);
        coh_jw_object_end(&w);
        coh_jw_key(&w, "configurations");
        coh_jw_array_begin(&w);
        for (int i = 0; i < n; i++) {
            char l[1024];
            command_line(o, m, hw, &res[i], l, sizeof l);
            json_result(&w, &res[i], l);
        }
        coh_jw_array_end(&w);
        coh_jw_object_end(&w);
        coh_jw_finish(&w);
        printf("\n");
        free(res);
        return CLI_OK;
    }
    if (devices)
        print_hw(hw, devices);
    else {
        print_hw(hw, hw->cores * (hw->nodes > 1 ? hw->nodes : 1));
        if (hw->nodes > 1)
            printf("searched 1 to %d ranks per node on %d nodes (one per core at most)\n",
                   hw->cores, hw->nodes);
        else
            printf("searched 1 to %d ranks (one per core at most)\n", hw->cores);
    }
    printf("model: %s, global batch %lld x %lld tokens, %s; searched %ld configurations in %.2f s: "
           "%ld invalid, %ld do not fit, %ld simulated, %ld skipped by their lower bound\n",
           m->name, (long long)q.global_batch, (long long)res[0].config.seq,
           coh_precision_name(q.precision), stats.considered, secs, stats.invalid,
           stats.too_big, stats.simulated, stats.pruned);
    print_header();
    for (int i = 0; i < n; i++) {
        print_row(i + 1, &res[i]);
        printf("    %s\n", res[i].reasons);
    }
    if (res[0].runnable)
        printf("top pick: %s\n", line);
    else {
        printf("top pick is not runnable by cohort train yet: %s\n", res[0].missing);
        int i = 1;
        while (i < n && !res[i].runnable)
            i++;
        if (i < n) {
            command_line(o, m, hw, &res[i], line, sizeof line);
            printf("best runnable (#%d): %s\n", i + 1, line);
        } else if (coh_model_trainable(m, NULL, 0)) {
            printf("none of the %d listed is runnable by cohort train: --runnable-only "
                   "searches only what it runs\n", n);
        }
    }
    free(res);
    return CLI_OK;
}

/* One rule for --nodes with and without --explain: the devices a node holds come from
 * --gpus-per-node, else the hardware (a GPU node's count, --devices over the nodes), else the
 * mesh the flags give over the nodes. */
static void node_size(cli_config *cfg, int explain, coh_hw *hw)
{
    coh_parallel_config *p = &cfg->par;
    if (!p->nodes || p->gpus_per_node)
        return;
    long mesh = (long)p->dp * p->tp * p->pp;
    if (hw->gpus_per_node > 0 && (hw->gpu || hw->nodes > 1))
        p->gpus_per_node = hw->gpus_per_node;
    else if (explain && mesh % p->nodes == 0)
        p->gpus_per_node = (int)(mesh / p->nodes);
    if (explain && !hw->gpu && hw->nodes > 1 && !hw->gpus_per_node) /* CPU nodes: its ranks */
        hw->gpus_per_node = p->gpus_per_node;
}

int cmd_plan(int argc, char **argv)
{
    opts o;
    memset(&o, 0, sizeof o);
    cli_config_init(&o.cfg);
    int rc = cli_config_parse(cmd, argc, argv, own_options, parse_option, &o);
    if (rc != CLI_OK)
        return rc < 0 ? CLI_OK : rc;
    coh_model_desc m;
    rc = build_model(&o, &m);
    if (rc != CLI_OK)
        return rc;
    if (!o.explain && !o.global_batch)
        return cli_usage_error(cmd, "--global-batch N is required (sequences per step)");
    if (!o.explain && o.chosen_by_search[0])
        return cli_usage_error(cmd, "%s fixes what the search chooses: give the whole "
                               "configuration with --explain to price it, or leave it out",
                               o.chosen_by_search);
    if (!o.explain && o.cfg.par.stage_layers)
        return cli_usage_error(cmd, "--stage-layers '%s' fixes one configuration's split: use "
                               "it with --explain", o.cfg.par.stage_layers);
    if (o.cfg.par.stage_layers && o.cfg.par.pp < 2)
        return cli_usage_error(cmd, "--stage-layers '%s' needs a pipeline (--pp 2 or more)",
                               o.cfg.par.stage_layers);
    const char *env_inventory = getenv("COHORT_INVENTORY");
    if (!o.inventory && !o.hw && !o.cal && !o.measure && env_inventory && *env_inventory) {
        o.inventory = env_inventory; /* the default machine, as cohort devices takes it */
        o.inventory_env = 1;
    }
    coh_hw hw;
    if (!o.inventory && !o.hw && (!o.cal || o.measure)) /* measures this machine: with the */
        coh_engine_ensure_environment();                 /* kernel and spin train runs with */
    if ((rc = build_hw(&o, &hw)) != CLI_OK)
        return rc;
    node_size(&o.cfg, o.explain, &hw);
    if (((o.explain || o.strategy_given) && (rc = cli_config_finish(cmd, &o.cfg, 0)) != CLI_OK)) {
        coh_hw_free_measurements(&hw);
        return rc;
    }
    if (o.explain) {
        rc = explain(&o, &m, &hw);
    } else if (o.devices && (hw.gpu || hw.nodes > 1) && o.cfg.par.nodes &&
               o.devices != (long)o.cfg.par.nodes * hw.gpus_per_node) {
        rc = cli_usage_error(cmd, "invalid --devices '%ld': --nodes %d x %d per node is %ld",
                             o.devices, o.cfg.par.nodes, hw.gpus_per_node,
                             (long)o.cfg.par.nodes * hw.gpus_per_node);
    } else {
        rc = search(&o, &m, &hw);
    }
    coh_hw_free_measurements(&hw);
    return rc;
}
