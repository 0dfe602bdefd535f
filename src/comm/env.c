/* env.c: reads a rank's place in the job (launcher or mpirun variables) and the deadline. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm/comm_int.h"

double coh_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Integer variable in [lo, hi]; *out untouched and 0 returned when unset. */
static coh_status env_int(const char *name, long lo, long hi, int *out, int *found)
{
    const char *s = getenv(name);
    *found = s != NULL;
    if (!s)
        return COH_OK;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (!*s || *end || errno || v < lo || v > hi)
        return coh_errf(COH_ERR_INVALID, "invalid %s '%s': expected an integer from %ld to %ld",
                        name, s, lo, hi);
    *out = (int)v;
    return COH_OK;
}

static coh_status env_place(coh_comm_env *env)
{
    int found;
    coh_status st;
    const int big = 1 << 20;
    if (getenv("OMPI_COMM_WORLD_RANK")) {
        if ((st = env_int("OMPI_COMM_WORLD_RANK", 0, big, &env->rank, &found)) ||
            (st = env_int("OMPI_COMM_WORLD_SIZE", 1, big, &env->size, &found)) ||
            (st = env_int("OMPI_COMM_WORLD_LOCAL_RANK", 0, big, &env->local_rank, &found)) ||
            (st = env_int("OMPI_COMM_WORLD_LOCAL_SIZE", 1, big, &env->local_size, &found)))
            return st;
        env->nnodes = env->size == env->local_size ? 1 : 2;
        return COH_OK;
    }
    int have_rank, have_size;
    env->rank = 0; /* neither set: a single process */
    env->size = 1;
    if ((st = env_int("RANK", 0, big, &env->rank, &have_rank)) ||
        (st = env_int("WORLD_SIZE", 1, big, &env->size, &have_size)))
        return st;
    if (have_rank != have_size)
        return coh_errf(COH_ERR_INVALID, "%s is set but %s is not: set both (as 'cohort run' does)",
                        have_rank ? "RANK" : "WORLD_SIZE", have_rank ? "WORLD_SIZE" : "RANK");
    env->local_rank = env->rank;
    env->local_size = env->size;
    env->nnodes = 1;
    if ((st = env_int("LOCAL_RANK", 0, big, &env->local_rank, &found)) ||
        (st = env_int("LOCAL_WORLD_SIZE", 1, big, &env->local_size, &found)) ||
        (st = env_int("COHORT_NNODES", 1, big, &env->nnodes, &found)))
        return st;
    if (env->rank >= env->size)
        return coh_errf(COH_ERR_INVALID, "invalid RANK '%d': must be below WORLD_SIZE %d",
                        env->rank, env->size);
    return COH_OK;
}

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

/* The shared-memory name must be equal on all ranks and differ between jobs and restarts. */
static coh_status env_job(coh_comm_env *env)
{
    const char *job = getenv("COHORT_JOB_ID");
    int restart = 0, found;
    coh_status st = env_int("COHORT_RESTART_COUNT", 0, 1 << 30, &restart, &found);
    if (st)
        return st;
    if (!job && getenv("OMPI_COMM_WORLD_RANK"))
        job = getenv("OMPI_MCA_ess_base_jobid");
    if (!job) {
        if (env->size == 1)
            job = "single";
        else
            return coh_errf(COH_ERR_INVALID,
                            "COHORT_JOB_ID is not set: start the ranks with 'cohort run'");
    }
    for (const char *p = job; *p; p++)
        if (!(*p >= 'a' && *p <= 'z') && !(*p >= 'A' && *p <= 'Z') && !(*p >= '0' && *p <= '9') &&
            *p != '-' && *p != '_' && *p != '.')
            return coh_errf(COH_ERR_INVALID,
                            "invalid COHORT_JOB_ID '%s': expected letters, digits, '-', '_', '.'",
                            job);
    int n = snprintf(env->job, sizeof env->job, "%s-r%d", job, restart);
    if (n < 0 || (size_t)n >= sizeof env->job)
        return coh_errf(COH_ERR_INVALID, "invalid COHORT_JOB_ID '%s': longer than 100 bytes",
                        job);
    return COH_OK;
}

coh_status coh_comm_env_read(coh_comm_env *env)
{
    memset(env, 0, sizeof *env);
    coh_status st;
    if ((st = env_place(env)) || (st = env_timeout(env)) || (st = env_job(env)))
        return st;
    return COH_OK;
}
