/* env_read.c: a worker learns its rank, world, local rank and job id from whichever launcher
 * started it (cohort run, torchrun, Open MPI, PMI, Slurm). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cohort/launch.h"
#include "launch/launch_int.h"
#include "util/strutil.h"

extern char **environ;

const char *coh_launcher_name(coh_launcher_kind k)
{
    switch (k) {
    case COH_LAUNCHER_NONE: return "none";
    case COH_LAUNCHER_COHORT: return "cohort";
    case COH_LAUNCHER_TORCHRUN: return "torchrun";
    case COH_LAUNCHER_OPENMPI: return "openmpi";
    case COH_LAUNCHER_PMI: return "pmi";
    case COH_LAUNCHER_SLURM: return "slurm";
    }
    return "unknown";
}

static const char *env_get(const char *const *envp, const char *name)
{
    size_t n = strlen(name);
    for (; envp && *envp; envp++)
        if (!strncmp(*envp, name, n) && (*envp)[n] == '=')
            return *envp + n + 1;
    return NULL;
}

/* One launcher's variable names for each field; NULL = the launcher does not set it. */
typedef struct scheme {
    coh_launcher_kind kind;
    const char *rank, *world, *local_rank, *local_world, *node_rank, *nnodes, *restart, *job;
} scheme;

static const scheme schemes[] = {
    {COH_LAUNCHER_COHORT, "COHORT_RANK", "COHORT_WORLD_SIZE", "COHORT_LOCAL_RANK",
     "COHORT_LOCAL_WORLD_SIZE", "COHORT_NODE_RANK", "COHORT_NNODES", "COHORT_RESTART_COUNT",
     "COHORT_JOB_ID"},
    {COH_LAUNCHER_TORCHRUN, "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
     "GROUP_RANK", "GROUP_WORLD_SIZE", "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_RUN_ID"},
    {COH_LAUNCHER_OPENMPI, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
     "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE", NULL, NULL, NULL,
     "OMPI_MCA_ess_base_jobid"},
    {COH_LAUNCHER_PMI, "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS", NULL, NULL,
     NULL, "PMI_JOBID"},
    {COH_LAUNCHER_SLURM, "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", NULL, "SLURM_NODEID",
     "SLURM_NNODES", "SLURM_RESTART_COUNT", "SLURM_JOB_ID"},
};

const char *coh_launcher_job_var(coh_launcher_kind k)
{
    for (size_t i = 0; i < sizeof schemes / sizeof schemes[0]; i++)
        if (schemes[i].kind == k)
            return schemes[i].job;
    return "COHORT_JOB_ID";
}

const char *coh_launcher_world_var(coh_launcher_kind k)
{
    for (size_t i = 0; i < sizeof schemes / sizeof schemes[0]; i++)
        if (schemes[i].kind == k)
            return schemes[i].world;
    return "WORLD_SIZE";
}

/* Read an integer variable; absent leaves *out as is. */
static coh_status get_int(const char *const *envp, const char *name, long max, int *out)
{
    if (!name)
        return COH_OK;
    const char *v = env_get(envp, name);
    if (!v)
        return COH_OK;
    long x;
    if (!coh_str_uint(v, max, &x))
        return coh_errf(COH_ERR_INVALID,
                        "invalid %s '%s': expected a non-negative integer below %ld", name, v,
                        max + 1);
    *out = (int)x;
    return COH_OK;
}

/* Slurm gives the tasks on this node only as a per-node list ("2(x3),1"); the count of tasks
 * on this node is the entry for SLURM_NODEID. */
static int slurm_local_size(const char *const *envp, int node)
{
    const char *v = env_get(envp, "SLURM_TASKS_PER_NODE");
    if (!v || node < 0)
        return -1;
    int idx = 0;
    while (*v) {
        char *end;
        long n = strtol(v, &end, 10);
        long rep = 1;
        if (end == v || n <= 0)
            return -1;
        if (*end == '(' && end[1] == 'x') {
            rep = strtol(end + 2, &end, 10);
            if (rep <= 0 || *end != ')')
                return -1;
            end++;
        }
        if (node < idx + rep)
            return (int)n;
        idx += (int)rep;
        if (*end == ',')
            end++;
        else if (*end)
            return -1;
        v = end;
    }
    return -1;
}

static coh_status check_consistent(const scheme *s, const coh_launch_env *e)
{
    if (e->world_size < 1)
        return coh_errf(COH_ERR_INVALID, "invalid %s '%d': the world has at least 1 rank",
                        s->world, e->world_size);
    if (e->rank >= e->world_size)
        return coh_errf(COH_ERR_INVALID, "invalid %s '%d': must be below %s (%d)", s->rank,
                        e->rank, s->world, e->world_size);
    if (e->local_world_size < 1 || e->local_world_size > e->world_size)
        return coh_errf(COH_ERR_INVALID, "invalid local world size '%d': must be 1..%d",
                        e->local_world_size, e->world_size);
    if (e->local_rank >= e->local_world_size)
        return coh_errf(COH_ERR_INVALID, "invalid local rank '%d': must be below %d",
                        e->local_rank, e->local_world_size);
    if (e->nnodes >= 1 && e->node_rank >= e->nnodes)
        return coh_errf(COH_ERR_INVALID, "invalid node rank '%d': must be below %d",
                        e->node_rank, e->nnodes);
    return COH_OK;
}

static coh_status read_scheme(const char *const *envp, const scheme *s, coh_launch_env *e)
{
    const int big = 1 << 24;
    if (!env_get(envp, s->world))
        return coh_errf(COH_ERR_INVALID, "%s is set but %s is not", s->rank, s->world);
    e->rank = e->world_size = -1;
    e->local_rank = 0;
    e->local_world_size = -1;
    coh_status st;
    if ((st = get_int(envp, s->rank, big, &e->rank)) || (st = get_int(envp, s->world, big, &e->world_size)) ||
        (st = get_int(envp, s->local_rank, big, &e->local_rank)) ||
        (st = get_int(envp, s->local_world, big, &e->local_world_size)) ||
        (st = get_int(envp, s->node_rank, big, &e->node_rank)) ||
        (st = get_int(envp, s->nnodes, big, &e->nnodes)) ||
        (st = get_int(envp, s->restart, big, &e->restart_count)))
        return st;
    if (s->kind == COH_LAUNCHER_SLURM)
        e->local_world_size = slurm_local_size(envp, e->node_rank);
    if (e->local_world_size < 0) /* no local size: assume the node holds the whole job */
        e->local_world_size = e->world_size;
    if ((e->node_rank < 0) != (e->nnodes < 0)) { /* half of the node pair: not usable */
        int one_node = e->nnodes == 1;
        e->node_rank = one_node ? 0 : -1;
        e->nnodes = one_node ? 1 : -1;
    }
    if ((st = check_consistent(s, e)))
        return st;
    const char *job = env_get(envp, s->job);
    if (s->kind == COH_LAUNCHER_SLURM && job) {
        const char *step = env_get(envp, "SLURM_STEP_ID");
        snprintf(e->job_id, sizeof e->job_id, "slurm-%s.%s", job, step ? step : "0");
    } else if (job && s->kind == COH_LAUNCHER_OPENMPI) {
        snprintf(e->job_id, sizeof e->job_id, "ompi-%s", job);
    } else if (job && s->kind == COH_LAUNCHER_PMI) {
        snprintf(e->job_id, sizeof e->job_id, "pmi-%s", job);
    } else if (job) {
        if (strlen(job) >= sizeof e->job_id)
            return coh_errf(COH_ERR_INVALID, "invalid %s '%.40s...': longer than %zu characters",
                            s->job, job, sizeof e->job_id - 1);
        snprintf(e->job_id, sizeof e->job_id, "%s", job);
    }
    if (s->kind == COH_LAUNCHER_COHORT) {
        int pid = 0;
        if ((st = get_int(envp, "COHORT_LAUNCHER_PID", 1L << 30, &pid)))
            return st;
        e->launcher_pid = pid;
    }
    return COH_OK;
}

/* srun sets SLURM_STEP_ID (a number) in every task of a job step; the batch script of sbatch
 * has SLURM_PROCID=0 and the allocation's SLURM_NTASKS but no step: it is one process, not a
 * rank of SLURM_NTASKS, whatever it starts itself. */
static int slurm_in_step(const char *const *envp)
{
    const char *step = env_get(envp, "SLURM_STEP_ID");
    long x;
    return step && coh_str_uint(step, 1L << 30, &x);
}

/* srun --mpi=pmi2 serves PMI itself: PMI_JOBID is "<SLURM_JOB_ID>.<SLURM_STEP_ID>". */
static int pmi_from_slurm(const char *const *envp)
{
    const char *pmi = env_get(envp, "PMI_JOBID"), *job = env_get(envp, "SLURM_JOB_ID"),
               *step = env_get(envp, "SLURM_STEP_ID");
    char both[160];
    if (!pmi || !job || !step || !slurm_in_step(envp))
        return 0;
    snprintf(both, sizeof both, "%s.%s", job, step);
    return !strcmp(pmi, both);
}

/* PMI served by srun: its rank and world must be Slurm's (else the environment was changed
 * after srun started the task); PMI says nothing of nodes, so Slurm's local rank and node
 * fill them in. */
static coh_status merge_slurm_pmi(const char *const *envp, coh_launch_env *e)
{
    coh_launch_env sl;
    memset(&sl, 0, sizeof sl);
    sl.node_rank = sl.nnodes = -1;
    const scheme *s = schemes;
    while (s->kind != COH_LAUNCHER_SLURM)
        s++;
    coh_status st = read_scheme(envp, s, &sl);
    if (st)
        return coh_err_prefix(st, "srun's PMI");
    if (sl.world_size != e->world_size || sl.rank != e->rank)
        return coh_errf(COH_ERR_INVALID,
                        "PMI_SIZE '%d' and SLURM_NTASKS '%d' (PMI_RANK '%d', SLURM_PROCID '%d') "
                        "disagree, though srun serves this PMI (PMI_JOBID is the Slurm step): "
                        "the variables were changed after srun started the task; start the "
                        "program directly under 'srun --mpi=pmi2' without overriding them",
                        e->world_size, sl.world_size, e->rank, sl.rank);
    e->local_rank = sl.local_rank;
    e->local_world_size = sl.local_world_size;
    e->node_rank = sl.node_rank;
    e->nnodes = sl.nnodes;
    return COH_OK;
}

coh_status coh_launch_env_read_from(const char *const *envp, coh_launch_env *out)
{
    memset(out, 0, sizeof *out);
    out->node_rank = out->nnodes = -1;
    for (size_t i = 0; i < sizeof schemes / sizeof schemes[0]; i++) {
        const scheme *s = &schemes[i];
        if (!env_get(envp, s->rank) || (s->kind == COH_LAUNCHER_SLURM && !slurm_in_step(envp)))
            continue;
        out->launcher = s->kind;
        coh_status st = read_scheme(envp, s, out);
        if (!st && s->kind == COH_LAUNCHER_PMI && pmi_from_slurm(envp))
            st = merge_slurm_pmi(envp, out);
        if (st != COH_OK) {
            memset(out, 0, sizeof *out);
            return coh_err_prefix(st, "launcher environment (%s)", coh_launcher_name(s->kind));
        }
        int nodes_said = s->nnodes && env_get(envp, s->nnodes);
        if (out->nnodes < 0 && !nodes_said && out->world_size == out->local_world_size)
            out->node_rank = 0, out->nnodes = 1; /* the whole job is on this node */
        return COH_OK;
    }
    out->world_size = out->local_world_size = 1;
    out->node_rank = 0;
    out->nnodes = 1;
    snprintf(out->job_id, sizeof out->job_id, "single-%ld", (long)getpid());
    return COH_OK;
}

coh_status coh_launch_env_read(coh_launch_env *out)
{
    return coh_launch_env_read_from((const char *const *)environ, out);
}
