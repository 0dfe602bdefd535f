/* cmd_estimate.c: `cohort estimate`: memory per device for a model and a training strategy,
 * whether it fits, and what would make it fit. */
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "cli_device.h"
#include "cli_config.h"
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
            "anything is allocated, from published formulas (docs/estimate.md). The model and\n"
            "strategy flags are those of 'cohort train', so one command line moves between them;\n"
            "the precision defaults to what cohort train runs (fp32).\n\n"
            "other models:\n"
            "  --config FILE           a Hugging Face config.json (GPT-2, Llama, Mistral)\n"
            "  --params N [--largest-layer N]   only counts (7.5e9, 124M, 2851e6)\n");
    cli_config_help(f);
    fprintf(f,
            "fit and output:\n"
            "  --device-memory SIZE    memory of one device (80GiB, 16G, 40GB)\n"
            "  --inventory FILE        take it from a device inventory (its smallest GPU)\n"
            "  --view accelerate       accelerate estimate-memory's table\n"
            "  --view deepspeed        DeepSpeed's ZeRO-2/ZeRO-3 estimator tables\n"
            "  --json                  machine-readable output\n"
            "  --si                    decimal units (GB = 10^9 bytes) instead of GiB\n"
            "  --engine cohort         what cohort's own trainer holds per rank, from the\n"
            "                          trainer's own bucket plan and shards\n"
            "  --save                  with --engine cohort: the run saves checkpoints (adds\n"
            "                          a save's buffers to the prediction)\n");
}

enum { O_CONFIG = 256, O_PARAMS, O_LARGEST, O_DEVMEM, O_INVENTORY, O_VIEW, O_JSON, O_SI, O_ENGINE, O_SAVE,
       O_HELP };

static const struct option own_options[] = {
    {"config", required_argument, 0, O_CONFIG},
    {"params", required_argument, 0, O_PARAMS},
    {"largest-layer", required_argument, 0, O_LARGEST},
    {"device-memory", required_argument, 0, O_DEVMEM},
    {"inventory", required_argument, 0, O_INVENTORY},
    {"view", required_argument, 0, O_VIEW},
    {"json", no_argument, 0, O_JSON},
    {"si", no_argument, 0, O_SI},
    {"engine", required_argument, 0, O_ENGINE},
    {"save", no_argument, 0, O_SAVE},
    {"help", no_argument, 0, O_HELP},
    {0, 0, 0, 0},
};

/* What the options said before they are turned into a model and a strategy. */
typedef struct parsed {
    cli_config cfg;
    const char *config, *params, *largest, *devmem, *inventory;
    est_request *request; /* where --json, --si, --view and --engine go */
} parsed;

/* Handle one option (a cli_option_fn). */
static int parse_option(void *ctx, int c, const char *name, const char *arg)
{
    static const char *const views[] = {"cohort", "accelerate", "deepspeed"};
    parsed *p = ctx;
    est_request *r = p->request;
    (void)name;
    int shared = cli_config_option(cmd, c, arg, &p->cfg);
    if (shared >= 0)
        return shared;
    switch (c) {
    case 'h':
    case O_HELP: usage(stdout); return -1;
    case O_CONFIG: p->config = arg; break;
    case O_PARAMS: p->params = arg; break;
    case O_LARGEST: p->largest = arg; break;
    case O_DEVMEM: p->devmem = arg; break;
    case O_INVENTORY: p->inventory = arg; break;
    case O_JSON: r->json = 1; break;
    case O_SI: r->si = 1; break;
    case O_SAVE: r->save = 1; break;
    case O_VIEW:
        for (int i = 0; i < 3; i++)
            if (!strcmp(arg, views[i])) {
                r->view = (est_view)i;
                return 1;
            }
        return cli_usage_error(cmd, "invalid --view '%s': valid are cohort, accelerate, "
                                    "deepspeed", arg), 0;
    case O_ENGINE:
        if (strcmp(arg, "cohort") != 0)
            return cli_usage_error(cmd, "invalid --engine '%s': valid are cohort", arg), 0;
        r->engine = 1;
        break;
    }
    return 1;
}

static int build_model(const parsed *p, est_request *r)
{
    const cli_config *c = &p->cfg;
    int custom = cli_config_shape_given(c);
    int sources = !!(c->preset || custom) + !!p->config + !!p->params;
    if (sources != 1)
        return cli_usage_error(cmd, sources ? "give only one model: --model, --config, custom "
                                              "dimensions or --params"
                                            : "no model: give --model NAME, --config FILE, "
                                              "custom dimensions or --params N");
    if (p->largest && !p->params)
        return cli_usage_error(cmd, "--largest-layer goes with --params (other models have "
                                    "their largest layer counted)");
    coh_status st = COH_OK;
    if (custom)
        return cli_config_model(cmd, c, &r->model);
    if (c->preset)
        st = coh_model_preset(c->preset, &r->model);
    else if (p->config && cli_check_input(cmd, "--config", p->config) != CLI_OK)
        return CLI_USAGE;
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
    return st == COH_OK ? CLI_OK : cli_fail(cmd, st);
}

static int build_rest(parsed *p, est_request *r)
{
    int rc = cli_config_finish(cmd, &p->cfg, 0);
    if (rc != CLI_OK)
        return rc;
    r->par = p->cfg.par;
    r->par.seq = p->cfg.seq;
    r->threads = (int)p->cfg.threads;
    r->precision_given = p->cfg.precision_given;
    if (p->devmem && p->inventory)
        return cli_usage_error(cmd, "give --device-memory or --inventory, not both");
    const char *env_inventory = getenv("COHORT_INVENTORY"), *prefix = NULL;
    if (!p->devmem && !p->inventory && env_inventory && *env_inventory) {
        p->inventory = env_inventory; /* the default device, as cohort devices takes it */
        prefix = "COHORT_INVENTORY";
    }
    coh_status st = COH_OK;
    if (p->devmem) {
        if (!cli_parse_memory(cmd, "--device-memory", p->devmem, &r->device_bytes))
            return CLI_USAGE;
        r->device_from = "--device-memory";
    } else if (p->inventory) {
        coh_inventory_memory m;
        st = coh_plan_inventory_gpus(p->inventory, &m);
        r->device_bytes = m.smallest_mib << 20;
        r->device_from = p->inventory;
        char note[512] = "";
        if (st == COH_OK) /* a configuration must fit on every device: say which is priced */
            coh_plan_inventory_note(&m, p->inventory, 0, note, sizeof note);
        if (note[0])
            fprintf(stderr, "%s %s: warning: %s\n", cli_progname, cmd, note);
    }
    if (st != COH_OK && prefix)
        st = coh_err_prefix(st, "%s", prefix);
    return st == COH_OK ? CLI_OK : cli_inventory_fail(cmd, st);
}

int cmd_estimate(int argc, char **argv)
{
    est_request r;
    memset(&r, 0, sizeof r);
    parsed p;
    memset(&p, 0, sizeof p);
    cli_config_init(&p.cfg);
    p.request = &r;
    int rc = cli_config_parse(cmd, argc, argv, own_options, parse_option, &p);
    if (rc != CLI_OK)
        return rc < 0 ? CLI_OK : rc;
    rc = build_model(&p, &r);
    if (rc == CLI_OK)
        rc = build_rest(&p, &r);
    if (rc != CLI_OK)
        return rc;
    if (r.engine && r.view != VIEW_COHORT)
        return cli_usage_error(cmd, "--engine cohort and --view do not combine");
    if (r.save && !r.engine) /* the published model has no save buffers: it would do nothing */
        return cli_usage_error(cmd, "--save goes with --engine cohort (it adds cohort train's "
                                    "save buffers to the trainer's prediction)");
    coh_status st = coh_parallel_config_check(&r.model, &r.par);
    if (st != COH_OK)
        return cli_fail(cmd, st);
    return r.engine ? est_print_engine(&r) : est_print(&r);
}
