/* env.c: a rank's place in the job for the comm layer: rank, world and node from the launcher
 * API (coh_launch_env_read: cohort run, torchrun, Open MPI, PMI, Slurm), the deadline, and the
 * job name that shared-memory segments are called after. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cohort/launch.h"
#include "comm/comm_int.h"
#include "util/proc.h"

static coh_status env_timeout(coh_comm_env *env)
{
    env->timeout_s = 300;
    const char *s = getenv("COHORT_COMM_TIMEOUT");
    if (!s)
        return COH_OK;
    char *end;
    double v = strtod(s, &end);
    if (!*s || *end || !(v > 0) || v > 1e9)
        return coh_errf(COH_ERR_INVALID,
                        "invalid COHORT_COMM_TIMEOUT '%s': expected seconds greater than 0", s);
    env->timeout_s = v;
    return COH_OK;
}

/* The shared-memory name must be equal on all ranks of a node and differ between jobs and
 * restarts: the launcher's job id plus its restart count. COHORT_JOB_ID, when set, names the
 * job for launchers that give no id (PMI without PMI_JOBID, torchrun without a run id). */
static coh_status env_job(coh_comm_env *env, const coh_launch_env *le)
{
    const char *job = getenv("COHORT_JOB_ID"), *var = "COHORT_JOB_ID";
    if (!job || !*job) {
        job = le->job_id;
        var = coh_launcher_job_var(le->launcher);
    }
    if (!*job && env->size == 1)
        job = "single";
    if (!*job)
        return COH_OK; /* only shared memory needs one: coh_comm_env_no_job says so */
    for (const char *p = job; *p; p++)
        if (!(*p >= 'a' && *p <= 'z') && !(*p >= 'A' && *p <= 'Z') && !(*p >= '0' && *p <= '9') &&
            *p != '-' && *p != '_' && *p != '.')
            return coh_errf(COH_ERR_INVALID,
                            "invalid %s '%s': expected letters, digits, '-', '_', '.'", var, job);
    int n = snprintf(env->job, sizeof env->job, "%s-r%d", job, le->restart_count);
    if (n < 0 || (size_t)n >= sizeof env->job)
        return coh_errf(COH_ERR_INVALID, "invalid %s '%.40s...': longer than 100 bytes", var,
                        job);
    return COH_OK;
}

void coh_comm_launch_key(long launcher_pid, char *buf, size_t n)
{
    snprintf(buf, n, "cohort-%ld-%llu", launcher_pid,
             coh_proc_start_time((pid_t)launcher_pid));
}

/* What tells this launch from another one given the same job id: the job id may be chosen by
 * the user (COHORT_JOB_ID, cohort run --run-id, torchrun's run id), but cohort run's process is
 * the one that started this node's ranks, and the other launchers number their jobs
 * themselves. */
static void env_launch(coh_comm_env *env, const coh_launch_env *le)
{
    if (le->launcher == COH_LAUNCHER_COHORT && le->launcher_pid > 0)
        coh_comm_launch_key(le->launcher_pid, env->launch, sizeof env->launch);
    else if (le->launcher != COH_LAUNCHER_COHORT && le->launcher != COH_LAUNCHER_TORCHRUN)
        snprintf(env->launch, sizeof env->launch, "%.95s", le->job_id);
}

coh_status coh_comm_env_read(coh_comm_env *env)
{
    memset(env, 0, sizeof *env);
    coh_launch_env le;
    coh_status st = coh_launch_env_read(&le);
    if (st)
        return st;
    env->launcher = (int)le.launcher;
    env->rank = le.rank;
    env->size = le.world_size;
    env->local_rank = le.local_rank;
    env->local_size = le.local_world_size;
    env->nnodes = le.nnodes;
    if ((st = env_timeout(env)) || (st = env_job(env, &le)))
        return st;
    env_launch(env, &le);
    return COH_OK;
}

coh_status coh_comm_env_no_job(const coh_comm_env *env)
{
    coh_launcher_kind k = (coh_launcher_kind)env->launcher;
    return coh_errf(COH_ERR_INVALID,
                    "the launcher (%s) gives no job id (%s is not set), and shared memory "
                    "needs one: set COHORT_JOB_ID on every rank to a name unique to this job "
                    "(for example 'export COHORT_JOB_ID=train-$(date +%%s)' before starting), "
                    "or start the ranks with 'cohort run'",
                    coh_launcher_name(k), coh_launcher_job_var(k));
}
