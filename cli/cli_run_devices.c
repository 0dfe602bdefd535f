/* cli_run_devices.c: `cohort run`'s device selection, through the device layer: which devices
 * the job sees (the whole job, or one per rank with --bind-devices) and how many processes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "cli_device.h"
#include "cli_run_devices.h"

static int needs_devices(const run_devices *d)
{
    return d->accel_text || d->spec || d->pick || d->bind ||
           (d->nproc_text && (!strcmp(d->nproc_text, "auto") || !strcmp(d->nproc_text, "gpu")));
}

static char *var_entry(const char *var, const char *value)
{
    size_t n = strlen(var) + strlen(value) + 2;
    char *s = malloc(n);
    if (s)
        snprintf(s, n, "%s=%s", var, value);
    return s;
}

/* The accelerator asked for, from --accelerator and the --nproc-per-node word. */
static int choose_accel(const run_devices *d, coh_accel *a)
{
    *a = COH_ACCEL_AUTO;
    if (d->accel_text && coh_accel_parse(d->accel_text, a) != COH_OK)
        return cli_fail("run", COH_ERR_INVALID);
    const char *np = d->nproc_text;
    if (np && !strcmp(np, "gpu")) {
        if (*a == COH_ACCEL_CPU)
            return cli_usage_error("run", "invalid --nproc-per-node 'gpu' with --accelerator cpu: "
                                   "'gpu' counts GPUs; use -n cpu, or an accelerator such as "
                                   "--accelerator cuda");
        if (*a == COH_ACCEL_AUTO)
            *a = COH_ACCEL_CUDA; /* torchrun's meaning: the CUDA devices */
    }
    if (np && !strcmp(np, "cpu") && *a != COH_ACCEL_AUTO && *a != COH_ACCEL_CPU)
        return cli_usage_error("run", "invalid --nproc-per-node 'cpu' with --accelerator %s: 'cpu' "
                               "starts one process per cpu core; drop --accelerator, or use -n "
                               "gpu or a number", d->accel_text);
    if (np && !strcmp(np, "cpu"))
        *a = COH_ACCEL_CPU;
    return CLI_OK;
}

/* --pick N: the N best free devices, locked for the job's lifetime. */
static int pick_devices(run_devices *d, coh_accel accel, const coh_vis_env *env, coh_visible *vis,
                        int *logical, int *n)
{
    if (d->spec)
        return cli_usage_error("run", "invalid options '--pick' and '--devices' together: both choose the devices; give one");
    coh_status st = coh_visible_compute(d->inv, accel, env, vis);
    if (st)
        return cli_fail("run", st);
    int rc = cli_device_check("run", vis);
    if (rc)
        return rc;
    if (vis->accel == COH_ACCEL_CPU || vis->count == 0)
        return cli_fail("run", coh_errf(COH_ERR_NOT_FOUND, "--pick %d: no accelerator is "
                                        "visible, so none is free ('cohort devices' lists what "
                                        "this machine has)", d->pick));
    coh_pick_opts po;
    coh_pick_opts_init(&po);
    po.n = d->pick;
    coh_pick_result res;
    st = coh_pick_reserve(d->inv, vis, &po, NULL, &res, &d->reservation);
    if (st == COH_OK) {
        *n = res.npicked;
        memcpy(logical, res.picked, sizeof(int) * (size_t)res.npicked);
    }
    coh_pick_result_release(&res);
    return st ? cli_fail("run", st) : CLI_OK;
}

/* One rank's variable: its own device, as device 0. Gaudi is the exception: Habana's runtime
 * gives local rank N the N-th module of HABANA_VISIBLE_MODULES and wants the same value in
 * every process, so each rank gets the whole list and its LOCAL_RANK picks its module. */
static coh_status rank_value(run_devices *d, const coh_visible *vis, const coh_vis_env *env,
                             const int *logical, int n, int r, const char **var, char *value,
                             size_t cap)
{
    if (vis->accel == COH_ACCEL_HPU)
        return coh_child_env(d->inv, vis, env, logical, n, COH_ID_INDEX, var, value, cap);
    return coh_child_env(d->inv, vis, env, &logical[r], 1, COH_ID_INDEX, var, value, cap);
}

static int bind_each(run_devices *d, const coh_visible *vis, const coh_vis_env *env,
                     const int *logical, int n)
{
    d->rank_env = calloc((size_t)n, sizeof *d->rank_env);
    if (!d->rank_env)
        return cli_fail("run", COH_ERR_NOMEM);
    d->nrank_env = n;
    /* Gaudi's ranks get the whole list: room for every device as a uuid and a comma. */
    size_t cap = (size_t)n * (COH_DEV_UUID_MAX + 1) + 1;
    char *value = malloc(cap);
    if (!value)
        return cli_fail("run", COH_ERR_NOMEM);
    int rc = CLI_OK;
    for (int r = 0; r < n && rc == CLI_OK; r++) {
        const char *var;
        coh_status st = rank_value(d, vis, env, logical, n, r, &var, value, cap);
        if (st) {
            rc = cli_fail("run", st);
            break;
        }
        d->rank_env[r] = calloc(2, sizeof(char *));
        if (!d->rank_env[r] || (var && !(d->rank_env[r][0] = var_entry(var, value))))
            rc = cli_fail("run", COH_ERR_NOMEM);
    }
    free(value);
    return rc;
}

/* Processes without a device selection: --nproc-per-node N, or cpu (one per core); 1 else. */
static int plain_nproc(const run_devices *d)
{
    if (d->nproc)
        return d->nproc;
    if (d->nproc_text && !strcmp(d->nproc_text, "cpu")) {
        long c = sysconf(_SC_NPROCESSORS_ONLN);
        return c > 0 ? (int)c : 1;
    }
    return 1;
}

/* Processes: an explicit number wins; else one per selected device (or cpu core). */
static int settle_nproc(run_devices *d, coh_accel accel, int ndev, coh_launch_opts *o)
{
    o->nproc_per_node = d->nproc ? d->nproc : ndev;
    /* Habana: "the number of elements in the list must be equal to the number of devices
     * used", one process per module, local rank N on the N-th. */
    if (d->nproc && accel == COH_ACCEL_HPU && d->nproc != ndev)
        return cli_usage_error("run", "invalid --nproc-per-node '%s' with --accelerator hpu: %d "
                               "module(s) selected and Gaudi runs one process per module; drop "
                               "-n, give -n %d, or select %s modules with --devices",
                               d->nproc_text, ndev, ndev, d->nproc_text);
    if (d->nproc && d->bind && d->nproc != ndev)
        return cli_usage_error("run", "invalid --nproc-per-node '%s' with --bind-devices: %d "
                               "device(s) selected, one process each; drop -n or give -n %d",
                               d->nproc_text, ndev, ndev);
    return CLI_OK;
}

static int resolve_devices(run_devices *d, coh_launch_opts *o, coh_accel accel)
{
    coh_vis_env env;
    coh_vis_env_from_process(&env);
    env.one_device_per_worker = d->bind; /* each rank gets its own device */
    coh_selection sel;
    memset(&sel, 0, sizeof sel);
    int rc;
    if (d->pick) {
        /* coh_pick picks at most 64 devices; sel owns the buffers, as coh_devices_select's. */
        size_t vcap = 64 * (COH_DEV_UUID_MAX + 1) + 1;
        sel.logical = calloc(64, sizeof *sel.logical);
        sel.value = calloc(vcap, 1);
        rc = !sel.logical || !sel.value ? cli_fail("run", COH_ERR_NOMEM)
                                        : pick_devices(d, accel, &env, &sel.vis, sel.logical, &sel.n);
        sel.accel = sel.vis.accel;
        coh_status st = rc ? COH_OK : coh_child_env(d->inv, &sel.vis, &env, sel.logical, sel.n, COH_ID_INDEX, &sel.var, sel.value, vcap);
        if (st)
            rc = cli_fail("run", st);
    } else {
        coh_status st = coh_devices_select(d->inv, &env, accel, d->spec, &sel);
        int gpu_word = d->nproc_text && !strcmp(d->nproc_text, "gpu");
        if (st != COH_OK && st != COH_ERR_NOMEM && gpu_word && !d->spec)
            rc = cli_fail("run", coh_errf(st, "--nproc-per-node gpu: no %s device is visible (see 'cohort devices')", coh_accel_name(accel)));
        else
            rc = st ? cli_fail("run", st) : accel == COH_ACCEL_CPU ? CLI_OK : cli_device_check("run", &sel.vis);
    }
    int n = sel.n;
    const int *logical = sel.logical;
    const char *var = sel.var, *value = sel.value ? sel.value : "";
    if (rc == CLI_OK && d->bind && sel.accel == COH_ACCEL_CPU)
        rc = cli_usage_error("run", "invalid option '--bind-devices': no accelerator selected "
                             "(cpu); bind devices of an accelerator that 'cohort devices' "
                             "lists (--accelerator cuda, hpu, ...) or drop --bind-devices");
    if (rc == CLI_OK)
        rc = settle_nproc(d, sel.accel, n, o);
    if (rc == CLI_OK && var && !(d->job_env[0] = var_entry(var, value)))
        rc = cli_fail("run", COH_ERR_NOMEM);
    if (rc == CLI_OK && d->bind)
        rc = bind_each(d, &sel.vis, &env, logical, n);
    if (rc == CLI_OK) {
        int w = snprintf(d->note, sizeof d->note, "devices: %s x%d", coh_accel_name(sel.accel), n);
        if (var && w > 0 && (size_t)w < sizeof d->note)
            snprintf(d->note + w, sizeof d->note - (size_t)w, ", %s=%.600s%s", var, value,
                     !d->bind ? "" : sel.accel == COH_ACCEL_HPU
                                 ? ", local rank N uses the N-th module" : ", one device per rank");
    }
    coh_selection_release(&sel);
    return rc;
}

int run_devices_resolve(run_devices *d, coh_launch_opts *o)
{
    if (!needs_devices(d)) {
        o->nproc_per_node = plain_nproc(d);
        return CLI_OK;
    }
    coh_accel accel;
    int rc = choose_accel(d, &accel);
    if (rc)
        return rc;
    if ((rc = cli_device_open("run", d->inventory, &d->inv)))
        return rc;
    if ((rc = resolve_devices(d, o, accel)))
        return rc;
    o->extra_env = d->job_env[0] ? d->job_env : NULL;
    o->local_rank_env = d->rank_env ? (char *const *const *)d->rank_env : NULL;
    o->extra_note = d->note;
    return CLI_OK;
}

void run_devices_release(run_devices *d)
{
    coh_reservation_destroy(d->reservation);
    coh_inventory_destroy(d->inv);
    free(d->job_env[0]);
    for (int r = 0; r < d->nrank_env; r++) {
        if (d->rank_env[r])
            free(d->rank_env[r][0]);
        free(d->rank_env[r]);
    }
    free(d->rank_env);
    memset(d, 0, sizeof *d);
}
