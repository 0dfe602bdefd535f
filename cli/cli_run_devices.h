/* cli_run_devices.h: device selection for `cohort run`: --nproc-per-node auto|gpu,
 * --accelerator, --devices, --pick and --bind-devices, turned into the workers' visibility
 * variables (CUDA_VISIBLE_DEVICES, ZE_AFFINITY_MASK, HIP_VISIBLE_DEVICES). */
#ifndef COHORT_CLI_RUN_DEVICES_H
#define COHORT_CLI_RUN_DEVICES_H

#include "cohort/device.h"
#include "cohort/launch.h"

typedef struct run_devices {
    /* what the user asked (NULL / 0 when not given) */
    const char *nproc_text, *accel_text, *spec, *inventory;
    int nproc; /* --nproc-per-node N, checked (1..4096); 0 for the words auto, cpu and gpu */
    int pick, bind;
    /* what was chosen; owned, freed by run_devices_release */
    coh_inventory *inv;
    coh_reservation *reservation; /* --pick: held until the job ends */
    char *job_env[2];             /* "VAR=value" for every worker, NULL-terminated */
    char ***rank_env;             /* --bind-devices: per local rank {"VAR=value", NULL} */
    int nrank_env;
    char note[768];
} run_devices;

/* Decide the number of processes and the device variables; fills o->nproc_per_node,
 * o->extra_env, o->local_rank_env and o->extra_note. Returns CLI_OK or the exit code after
 * printing the error (2 for bad options and specs). */
int run_devices_resolve(run_devices *d, coh_launch_opts *o);
void run_devices_release(run_devices *d);

#endif
