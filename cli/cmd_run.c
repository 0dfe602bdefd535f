/* cmd_run.c: `cohort run [options] PROGRAM [ARGS...]`: start one worker per process slot with
 * torchrun's environment contract and supervise them (see docs/launcher.md). */
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "cli_run_devices.h"
#include "cohort/launch.h"

const char cmd_run_summary[] = "launch a job: one worker per device, torchrun's environment";

static void usage(FILE *f)
{
    fprintf(f,
        "usage: cohort run [options] PROGRAM [ARGS...]\n"
        "       cohort run [options] -- PROGRAM [ARGS...]\n\n"
        "Starts the workers of a job with torchrun's environment (RANK, WORLD_SIZE, ...) and\n"
        "supervises them: the first failure stops the whole job. Options end at PROGRAM.\n\n"
        "processes and devices:\n"
        "  -n, --nproc-per-node N|auto|cpu|gpu\n"
        "                              workers on this node: N; one per visible accelerator\n"
        "                              (auto: else one per cpu core); one per cpu core; one\n"
        "                              per visible GPU (default 1)\n"
        "      --accelerator A         auto, cpu, cuda, gpu (mps on a Mac, else cuda), mps,\n"
        "                              hpu, xpu or rocm\n"
        "      --devices SPEC          Lightning device spec over the visible devices ('2',\n"
        "                              '0,3', '-1'); the job sees only those\n"
        "      --pick N                the N free devices 'cohort pick' would choose, locked\n"
        "                              for the job's lifetime\n"
        "      --bind-devices          each local rank sees only its own device (as device 0;\n"
        "                              hpu: every rank gets the module list, the runtime\n"
        "                              gives local rank N the N-th module)\n"
        "      --inventory FILE        devices from an inventory file (also COHORT_INVENTORY)\n"
        "      --cpu-bind MODE         none (default), cores or numa: cpu sets per rank\n"
        "nodes:\n"
        "      --nnodes N|MIN:MAX      nodes in the job (default 1); MIN:MAX elastic: start\n"
        "                              with MIN..MAX nodes, go on with those that remain\n"
        "      --node-rank K           this node's rank, 0..N-1 (default 0)\n"
        "      --master-addr HOST      node 0's address (default 127.0.0.1)\n"
        "      --master-port P         MASTER_PORT (default 29500; 0 = a free port)\n"
        "      --control-port P        node 0 launcher's port (default master port + 1)\n"
        "      --standalone            one node, a free master port\n"
        "      --join-timeout SECONDS  wait for the other nodes' launchers (default 300)\n"
        "      --job-token FILE        the job secret every node's launcher must prove (a file\n"
        "                              only its owner may read; also COHORT_JOB_TOKEN)\n"
        "failures:\n"
        "      --grace SECONDS         SIGTERM to SIGKILL delay at teardown (default 5)\n"
        "      --max-restarts N        restart the job up to N times after a failure\n"
        "      --run-id ID             job id (default: a fresh unique id)\n"
        "      --role NAME             ROLE_NAME (default 'default')\n"
        "output:\n"
        "      --log-dir DIR           per-rank logs DIR/<run-id>/attempt_<n>/<rank>/{stdout,stderr}.log\n"
        "      --tee                   with --log-dir: also show output on the console\n"
        "      --prefix TEMPLATE       line prefix (default '[rank{rank}]: '; fields {rank},\n"
        "                              {local_rank}, {node_rank}, {role}, {host}, {pid},\n"
        "                              {attempt}, {stream}; '' for none)\n"
        "      --local-ranks-filter L  show only these local ranks ('0,3', '0-2')\n"
        "  -h, --help                  this help\n\n"
        "torchrun spellings with underscores (--nproc_per_node, --master_port, ...) work too.\n");
}

enum {
    OPT_NNODES = 256, OPT_NODE_RANK, OPT_MASTER_ADDR, OPT_MASTER_PORT, OPT_CONTROL_PORT,
    OPT_STANDALONE, OPT_JOIN_TIMEOUT, OPT_GRACE, OPT_MAX_RESTARTS, OPT_RUN_ID, OPT_ROLE,
    OPT_LOG_DIR, OPT_TEE, OPT_PREFIX, OPT_FILTER, OPT_CPU_BIND, OPT_ACCEL, OPT_DEVICES, OPT_PICK,
    OPT_BIND, OPT_INVENTORY, OPT_JOB_TOKEN
};

static const struct option options[] = {
    {"nproc-per-node", required_argument, NULL, 'n'},
    {"nproc_per_node", required_argument, NULL, 'n'},
    {"nnodes", required_argument, NULL, OPT_NNODES},
    {"node-rank", required_argument, NULL, OPT_NODE_RANK},
    {"node_rank", required_argument, NULL, OPT_NODE_RANK},
    {"master-addr", required_argument, NULL, OPT_MASTER_ADDR},
    {"master_addr", required_argument, NULL, OPT_MASTER_ADDR},
    {"master-port", required_argument, NULL, OPT_MASTER_PORT},
    {"master_port", required_argument, NULL, OPT_MASTER_PORT},
    {"control-port", required_argument, NULL, OPT_CONTROL_PORT},
    {"standalone", no_argument, NULL, OPT_STANDALONE},
    {"join-timeout", required_argument, NULL, OPT_JOIN_TIMEOUT},
    {"grace", required_argument, NULL, OPT_GRACE},
    {"max-restarts", required_argument, NULL, OPT_MAX_RESTARTS},
    {"max_restarts", required_argument, NULL, OPT_MAX_RESTARTS},
    {"run-id", required_argument, NULL, OPT_RUN_ID},
    {"rdzv_id", required_argument, NULL, OPT_RUN_ID},
    {"rdzv-id", required_argument, NULL, OPT_RUN_ID},
    {"role", required_argument, NULL, OPT_ROLE},
    {"log-dir", required_argument, NULL, OPT_LOG_DIR},
    {"log_dir", required_argument, NULL, OPT_LOG_DIR},
    {"tee", no_argument, NULL, OPT_TEE},
    {"prefix", required_argument, NULL, OPT_PREFIX},
    {"local-ranks-filter", required_argument, NULL, OPT_FILTER},
    {"local_ranks_filter", required_argument, NULL, OPT_FILTER},
    {"cpu-bind", required_argument, NULL, OPT_CPU_BIND},
    {"accelerator", required_argument, NULL, OPT_ACCEL},
    {"devices", required_argument, NULL, OPT_DEVICES},
    {"pick", required_argument, NULL, OPT_PICK},
    {"bind-devices", no_argument, NULL, OPT_BIND},
    {"inventory", required_argument, NULL, OPT_INVENTORY},
    {"job-token", required_argument, NULL, OPT_JOB_TOKEN},
    {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0}};

/* The option parsers below return 0 or the exit code of a usage error, as apply() does. */
static int int_arg(const char *opt, const char *v, int lo, int hi, int *out)
{
    return cli_parse_int("run", opt, v, lo, hi, out) ? 0 : CLI_USAGE;
}

static int seconds_arg(const char *opt, const char *v, double *out)
{
    return cli_parse_double("run", opt, v, 0, 86400, out) ? 0 : CLI_USAGE;
}

/* N, or one of the words auto, cpu and gpu, which run_devices_resolve turns into a number. */
static int nproc_arg(const char *v, run_devices *d)
{
    d->nproc_text = v;
    d->nproc = 0;
    if (!strcmp(v, "auto") || !strcmp(v, "cpu") || !strcmp(v, "gpu"))
        return 0;
    if (!*v || !strchr("+-0123456789", *v))
        return cli_usage_error("run", "invalid --nproc-per-node '%s': must be auto, cpu, gpu or "
                               "an integer from 1 to 4096", v);
    return int_arg("--nproc-per-node", v, 1, 4096, &d->nproc);
}

/* One side of MIN:MAX: 1..4096 in plain digits; 0 when it is not. */
static int node_count(const char *s, size_t len)
{
    int v = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9' || (v = v * 10 + (s[i] - '0')) > 4096)
            return 0;
    }
    return v;
}

/* N, or MIN:MAX (elastic, as torchrun's). An error names the whole value as typed. */
static int nnodes_arg(const char *v, coh_launch_opts *o)
{
    const char *colon = strchr(v, ':');
    if (!colon)
        return int_arg("--nnodes", v, 1, 4096, &o->nnodes);
    o->nnodes_min = node_count(v, (size_t)(colon - v));
    o->nnodes = node_count(colon + 1, strlen(colon + 1));
    if (o->nnodes_min < 1 || o->nnodes < 1)
        return cli_usage_error("run", "invalid --nnodes '%s': expected N or MIN:MAX, each an integer from 1 to 4096", v);
    if (o->nnodes_min > o->nnodes)
        return cli_usage_error("run", "invalid --nnodes '%s': MIN is above MAX", v);
    return 0;
}

/* One option into o; returns 0, or the exit code of a usage error. */
static int apply(coh_launch_opts *o, run_devices *d, int c, const char *v, int *standalone)
{
    switch (c) {
    case 'n': return nproc_arg(v, d);
    case OPT_ACCEL: d->accel_text = v; return 0;
    case OPT_DEVICES: d->spec = v; return 0;
    case OPT_PICK: return int_arg("--pick", v, 1, 64, &d->pick);
    case OPT_BIND: d->bind = 1; return 0;
    case OPT_INVENTORY: d->inventory = v; return 0;
    case OPT_NNODES: return nnodes_arg(v, o);
    case OPT_NODE_RANK: return int_arg("--node-rank", v, 0, 4095, &o->node_rank);
    case OPT_MASTER_ADDR: o->master_addr = v; return 0;
    case OPT_MASTER_PORT: return int_arg("--master-port", v, 0, 65535, &o->master_port);
    case OPT_CONTROL_PORT: return int_arg("--control-port", v, 1, 65535, &o->control_port);
    case OPT_STANDALONE: *standalone = 1; return 0;
    case OPT_JOIN_TIMEOUT: return seconds_arg("--join-timeout", v, &o->join_timeout_s);
    case OPT_GRACE: return seconds_arg("--grace", v, &o->grace_s);
    case OPT_MAX_RESTARTS: return int_arg("--max-restarts", v, 0, 1000000, &o->max_restarts);
    case OPT_RUN_ID: o->run_id = v; return 0;
    case OPT_JOB_TOKEN: o->job_token = v; return 0;
    case OPT_ROLE: o->role = v; return 0;
    case OPT_LOG_DIR: o->log_dir = v; return 0;
    case OPT_TEE: o->tee = 1; return 0;
    case OPT_PREFIX: o->prefix = v; return 0;
    case OPT_FILTER: o->ranks_filter = v; return 0;
    case OPT_CPU_BIND:
        return coh_cpu_bind_parse(v, &o->cpu_bind) ? cli_fail("run", COH_ERR_INVALID) : 0;
    }
    return cli_usage_error("run", "unknown option (see 'cohort run --help')");
}

int cmd_run(int argc, char **argv)
{
    coh_launch_opts o;
    coh_launch_opts_init(&o);
    run_devices d;
    memset(&d, 0, sizeof d);
    int standalone = 0, c, rc;
    opterr = 0;
    optind = 1;
    /* '+': options end at the first non-option (PROGRAM), so its own flags reach it intact. */
    while ((c = getopt_long(argc, argv, "+:n:h", options, NULL)) != -1) {
        if (c == 'h') {
            usage(stdout);
            return CLI_OK;
        }
        if (c == '?')
            return cli_usage_error("run", "unknown option '%s' (see 'cohort run --help')", argv[optind - 1]);
        if (c == ':')
            return cli_usage_error("run", "option '%s' needs a value", argv[optind - 1]);
        if ((rc = apply(&o, &d, c, optarg, &standalone)))
            return rc;
    }
    if (standalone) {
        if (o.nnodes > 1)
            return cli_usage_error("run", "invalid option '--standalone' with --nnodes %d: standalone is one node", o.nnodes);
        o.master_port = 0;
        o.master_addr = "127.0.0.1";
    }
    if (optind >= argc)
        return cli_usage_error("run", "no program to run: give PROGRAM [ARGS...] after the options");
    o.argv = argv + optind;
    if ((rc = run_devices_resolve(&d, &o))) {
        run_devices_release(&d);
        return rc;
    }
    int exit_code = 1;
    coh_status st = coh_launch_run(&o, &exit_code);
    run_devices_release(&d);
    if (st == COH_OK)
        return exit_code;
    const char *msg = coh_last_error();
    fprintf(stderr, "cohort run: error: %s\n", *msg ? msg : coh_status_name(st));
    /* Everything found before a worker starts is a usage error: exit 2. */
    return st == COH_ERR_INVALID || st == COH_ERR_NOT_FOUND || st == COH_ERR_BUSY ? CLI_USAGE : CLI_FAILED;
}
