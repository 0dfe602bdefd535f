/* cmd_pick.c: `cohort pick N`: choose N devices that are free right now, print the value a
 * child needs (CUDA_VISIBLE_DEVICES=$(cohort pick 2) ...), optionally reserve them for the
 * lifetime of a command. */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"
#include "cli_device.h"
#include "cohort/json_writer.h"

const char cmd_pick_summary[] = "choose devices that are free right now (and reserve them)";

static void usage(FILE *f)
{
    fprintf(f,
            "usage: cohort pick N [options] [--reserve] [-- COMMAND [ARGS...]]\n"
            "\n"
            "Chooses N usable devices among those visible here and prints the value of\n"
            "CUDA_VISIBLE_DEVICES (ZE_AFFINITY_MASK, HIP_VISIBLE_DEVICES,\n"
            "HABANA_VISIBLE_MODULES) a child needs:\n"
            "  CUDA_VISIBLE_DEVICES=$(cohort pick 2) python train.py\n"
            "A device is usable when it is not prohibited, not exclusive_process with a\n"
            "process on it, has no compute process (unless --allow-shared), and meets the\n"
            "limits below. Most free memory first, then least utilization, then lower index.\n"
            "\n"
            "  --inventory FILE         describe the machine from FILE (also COHORT_INVENTORY)\n"
            "  --accelerator A          cuda (default), gpu, hpu, mps, xpu or rocm\n"
            "  --min-free-memory SIZE   e.g. 16GiB\n"
            "  --max-utilization PCT    0 to 100\n"
            "  --allow-shared           accept devices other processes compute on\n"
            "  --format index|uuid      how devices are written (MIG always as uuid; uuid\n"
            "                           for cuda and rocm only)\n"
            "  --reserve                lock the devices (advisory, per device) while COMMAND\n"
            "                           runs, so concurrent picks never get the same device;\n"
            "                           needs '-- COMMAND'\n"
            "  -q, --quiet              no table on stderr\n"
            "  --json                   one JSON document on stdout\n");
}

typedef struct opts {
    const char *inventory, *accel_text;
    coh_pick_opts pick;
    coh_id_format fmt;
    int json, quiet, reserve;
    char **cmd; /* after "--", NULL-terminated; NULL when absent */
} opts;

/* --max-utilization PCT: 0 to 100, with or without a '%' after the number. */
static int parse_utilization(const char *s, int *out)
{
    char num[32];
    size_t n = strlen(s);
    if (n > 1 && n < sizeof num && s[n - 1] == '%') {
        memcpy(num, s, n - 1);
        num[n - 1] = '\0';
        s = num;
    }
    return cli_parse_int("pick", "--max-utilization", s, 0, 100, out) ? CLI_OK : CLI_USAGE;
}

static int parse_option(int c, opts *o)
{
    uint64_t bytes;
    switch (c) {
    case 'i': o->inventory = optarg; return CLI_OK;
    case 'a': o->accel_text = optarg; return CLI_OK;
    case 'm':
        if (!cli_parse_size("pick", "--min-free-memory", optarg, 0, &bytes))
            return CLI_USAGE;
        /* whole MiB, rounded up; 16EiB must not wrap around to 0 */
        o->pick.min_free_mib = (bytes >> 20) + ((bytes & ((1u << 20) - 1)) != 0);
        return CLI_OK;
    case 'u': return parse_utilization(optarg, &o->pick.max_utilization_pct);
    case 's': o->pick.allow_shared = 1; return CLI_OK;
    case 'f':
        if (!strcmp(optarg, "index"))
            o->fmt = COH_ID_INDEX;
        else if (!strcmp(optarg, "uuid"))
            o->fmt = COH_ID_UUID;
        else
            return cli_usage_error("pick", "invalid --format '%s': expected index or uuid",
                                   optarg);
        return CLI_OK;
    case 'r': o->reserve = 1; return CLI_OK;
    case 'q': o->quiet = 1; return CLI_OK;
    case 'j': o->json = 1; return CLI_OK;
    default: return CLI_USAGE;
    }
}

static int parse_args(int argc, char **argv, opts *o)
{
    static const struct option longs[] = {
        {"inventory", required_argument, 0, 'i'}, {"accelerator", required_argument, 0, 'a'},
        {"min-free-memory", required_argument, 0, 'm'},
        {"max-utilization", required_argument, 0, 'u'}, {"allow-shared", no_argument, 0, 's'},
        {"format", required_argument, 0, 'f'},    {"reserve", no_argument, 0, 'r'},
        {"quiet", no_argument, 0, 'q'},           {"json", no_argument, 0, 'j'},
        {"help", no_argument, 0, 'h'},            {0, 0, 0, 0}};
    int nopt = argc, c;
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--")) {
            nopt = i;
            o->cmd = argv + i + 1;
            break;
        }
    opterr = 0;
    optind = 1;
    while ((c = getopt_long(nopt, argv, ":hq", longs, NULL)) != -1) {
        if (c == 'h') {
            usage(stdout);
            return -1;
        }
        if (c == ':')
            return cli_usage_error("pick", "option '%s' needs a value", argv[optind - 1]);
        if (c == '?')
            return cli_usage_error("pick", "unknown option '%s' (see --help)", argv[optind - 1]);
        int rc = parse_option(c, o);
        if (rc != CLI_OK)
            return rc;
    }
    if (optind >= nopt)
        return cli_usage_error("pick", "missing the number of devices: give N, as in 'cohort "
                               "pick 2' (see --help)");
    if (optind + 1 < nopt)
        return cli_usage_error("pick", "unexpected argument '%s' (see --help)", argv[optind + 1]);
    if (o->cmd && !o->cmd[0])
        return cli_usage_error("pick", "'--' must be followed by a command");
    if (o->reserve && !o->cmd)
        return cli_usage_error("pick", "--reserve holds the devices only while a command runs: "
                               "add '-- COMMAND [ARGS...]'");
    return cli_parse_int("pick", "device count", argv[optind], 1, 64, &o->pick.n) ? CLI_OK
                                                                                  : CLI_USAGE;
}

static void print_table(const coh_inventory *inv, const coh_visible *v, const coh_pick_result *r)
{
    fprintf(stderr, "picked:\n");
    cli_device_table(inv, v, r->picked, r->npicked, stderr);
}

static void print_rejections(const coh_inventory *inv, const coh_visible *v,
                             const coh_pick_result *r)
{
    for (int i = 0; i < r->ncand; i++) {
        const coh_pick_candidate *c = &r->cand[i];
        if (c->usable)
            continue;
        const coh_visible_device *d = &v->dev[c->logical];
        const coh_gpu *g = &inv->gpus[d->gpu];
        fprintf(stderr, "  %s:%d (%s): %s\n", coh_accel_name(v->accel), c->logical,
                d->mig >= 0 ? g->mig[d->mig].uuid : g->uuid, c->reason);
    }
}

static void print_json(const coh_inventory *inv, const coh_visible *v, const coh_pick_result *r,
                       const char *var, const char *value)
{
    coh_jw w;
    coh_jw_init(&w, stdout, 1);
    coh_jw_object_begin(&w);
    coh_jw_field_string(&w, "accelerator", coh_accel_name(v->accel));
    coh_jw_field_string(&w, "variable", var);
    coh_jw_field_string(&w, "value", value);
    coh_jw_key(&w, "picked");
    coh_jw_array_begin(&w);
    for (int i = 0; i < r->npicked; i++)
        cli_device_json(&w, inv, v, r->picked[i]);
    coh_jw_array_end(&w);
    coh_jw_key(&w, "rejected");
    coh_jw_array_begin(&w);
    for (int i = 0; i < r->ncand; i++) {
        if (r->cand[i].usable)
            continue;
        char label[32];
        cli_device_label(v, r->cand[i].logical, label, sizeof label);
        coh_jw_object_begin(&w);
        coh_jw_field_string(&w, "device", label);
        coh_jw_field_string(&w, "reason", r->cand[i].reason);
        coh_jw_object_end(&w);
    }
    coh_jw_array_end(&w);
    coh_jw_object_end(&w);
    coh_jw_finish(&w);
}

static pid_t child_pid;

static void forward(int sig)
{
    if (child_pid > 0)
        kill(child_pid, sig);
}

/* Run cmd with var=value, wait, and return its exit status (128+signal when killed). */
static int run_command(char **cmd, const char *var, const char *value)
{
    fflush(stdout);
    child_pid = fork();
    if (child_pid < 0) {
        fprintf(stderr, "%s pick: error: cannot fork: %s\n", cli_progname, strerror(errno));
        return CLI_FAILED;
    }
    if (child_pid == 0) {
        if (var) /* mps has no variable */
            setenv(var, value, 1);
        execvp(cmd[0], cmd);
        fprintf(stderr, "%s pick: error: cannot run '%s': %s\n", cli_progname, cmd[0],
                strerror(errno));
        _exit(127);
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = forward;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    /* Ctrl-C already reaches the command through the terminal's process group: as system()
     * does, the waiting parent ignores it instead of delivering it a second time. */
    sa.sa_handler = SIG_IGN;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGQUIT, &sa, NULL);
    int status;
    while (waitpid(child_pid, &status, 0) < 0)
        if (errno != EINTR)
            return CLI_FAILED;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static int pick_and_report(const opts *o, const coh_inventory *inv, const coh_visible *vis,
                           const coh_vis_env *env)
{
    coh_pick_result res;
    coh_reservation *resv = NULL;
    coh_status st = o->reserve ? coh_pick_reserve(inv, vis, &o->pick, NULL, &res, &resv)
                               : coh_pick(inv, vis, &o->pick, &res);
    if ((st == COH_ERR_NOT_FOUND || st == COH_ERR_BUSY) && vis->count == 0) {
        fprintf(stderr, "%s pick: error: %d %s device%s requested but none is visible (%s)\n",
                cli_progname, o->pick.n, coh_accel_name(vis->accel), o->pick.n == 1 ? "" : "s",
                vis->accel == COH_ACCEL_MPS ? "Apple MPS exists only on macOS on Apple silicon"
                                            : "'cohort devices' lists what there is; "
                                              "--accelerator picks another kind");
        coh_pick_result_release(&res);
        return CLI_FAILED;
    }
    if (st == COH_ERR_NOT_FOUND && !o->reserve && res.npicked == vis->count) {
        fprintf(stderr, "%s pick: error: %d %s devices requested but only %d %s visible, all "
                "usable; ask for at most %d\n", cli_progname, o->pick.n,
                coh_accel_name(vis->accel), vis->count, vis->count == 1 ? "is" : "are",
                vis->count);
        coh_pick_result_release(&res);
        return CLI_FAILED;
    }
    if (st == COH_ERR_NOT_FOUND || st == COH_ERR_BUSY) {
        fprintf(stderr, "%s pick: error: %d %s device%s requested, %d usable and free of "
                "reservations; rejected:\n", cli_progname, o->pick.n, coh_accel_name(vis->accel),
                o->pick.n == 1 ? "" : "s", res.npicked);
        print_rejections(inv, vis, &res);
        coh_pick_result_release(&res);
        return CLI_FAILED;
    }
    if (st != COH_OK) {
        int rc = cli_fail("pick", st);
        coh_pick_result_release(&res);
        return rc;
    }
    const char *var;
    char value[1024];
    st = coh_child_env(inv, vis, env, res.picked, res.npicked, o->fmt, &var, value,
                       sizeof value);
    int rc = CLI_OK;
    if (st != COH_OK) {
        rc = cli_fail("pick", st);
    } else {
        if (o->json)
            print_json(inv, vis, &res, var, value);
        else if (!o->cmd)
            printf("%s\n", value);
        if (!o->quiet && !o->json)
            print_table(inv, vis, &res);
        int nmig = 0;
        for (int i = 0; i < res.npicked; i++)
            nmig += vis->dev[res.picked[i]].mig >= 0;
        if (nmig > 1 && !o->quiet)
            fprintf(stderr, "%s pick: note: %d MIG instances picked; a CUDA process uses only "
                    "the first MIG instance it is given, so give each worker one of them\n",
                    cli_progname, nmig);
        if (o->cmd) {
            if (!o->quiet)
                fprintf(stderr, "%s pick: running %s %s%s%s%s%s\n", cli_progname, o->cmd[0],
                        var ? "with " : "(mps needs no variable)", var ? var : "",
                        var ? "=" : "", value,
                        o->reserve ? " (devices reserved until it exits)" : "");
            rc = run_command(o->cmd, var, value);
        }
    }
    coh_reservation_destroy(resv);
    coh_pick_result_release(&res);
    return rc;
}

/* Refuse what the variable cannot say: uuids where it takes indices or module ids, and a
 * value for mps, which has one device and no variable (an empty line would read as "no GPU"
 * to CUDA_VISIBLE_DEVICES=$(cohort pick ...)). */
static int check_output(const opts *o, const coh_visible *vis)
{
    if (o->fmt == COH_ID_UUID && (vis->accel == COH_ACCEL_XPU || vis->accel == COH_ACCEL_HPU))
        return cli_usage_error("pick", "invalid --format 'uuid' for accelerator %s: %s takes %s, "
                               "not uuids; use --format index", coh_accel_name(vis->accel),
                               vis->accel == COH_ACCEL_XPU ? "ZE_AFFINITY_MASK"
                                                           : "HABANA_VISIBLE_MODULES",
                               vis->accel == COH_ACCEL_XPU ? "device indices (0, 0.1)"
                                                           : "module ids");
    if (vis->accel == COH_ACCEL_MPS && vis->count > 0 && !o->cmd && !o->json)
        return cli_usage_error("pick", "nothing to print for accelerator mps: it has one device "
                               "and no visibility variable; run the job as it is, or use "
                               "'cohort pick 1 --accelerator mps -- COMMAND' to run it only when "
                               "the device is free");
    return CLI_OK;
}

int cmd_pick(int argc, char **argv)
{
    opts o;
    memset(&o, 0, sizeof o);
    coh_pick_opts_init(&o.pick);
    int rc = parse_args(argc, argv, &o);
    if (rc != CLI_OK)
        return rc < 0 ? CLI_OK : rc;
    coh_accel accel = COH_ACCEL_CUDA;
    if (o.accel_text && coh_accel_parse(o.accel_text, &accel) != COH_OK)
        return cli_fail("pick", COH_ERR_INVALID);
    if (accel == COH_ACCEL_CPU || accel == COH_ACCEL_AUTO)
        return cli_usage_error("pick", "invalid --accelerator '%s' for pick: expected cuda, gpu, "
                               "hpu, mps, xpu or rocm", o.accel_text);
    coh_inventory *inv = NULL;
    if ((rc = cli_device_open("pick", o.inventory, &inv)) != CLI_OK)
        return rc;
    coh_vis_env env;
    coh_vis_env_from_process(&env);
    env.one_device_per_worker = 1; /* the picked devices go one to each worker */
    coh_visible vis;
    coh_status st = coh_visible_compute(inv, accel, &env, &vis);
    if (st != COH_OK)
        rc = cli_fail("pick", st);
    else if ((rc = check_output(&o, &vis)) == CLI_OK &&
             (rc = cli_device_check("pick", &vis)) == CLI_OK) {
        if (inv->note[0] && !o.quiet)
            fprintf(stderr, "%s pick: note: %s\n", cli_progname, inv->note);
        rc = pick_and_report(&o, inv, &vis, &env);
    }
    coh_visible_release(&vis);
    coh_inventory_destroy(inv);
    return rc;
}
