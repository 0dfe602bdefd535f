/* worker_env.c: what each worker is given: torchrun's environment contract plus cohort's own
 * variables, and the cpu binding plan (cpu sets and thread counts per local rank). */
#define _GNU_SOURCE /* accept4, pipe2, sigabbrev_np, sched_setaffinity */
#include <dirent.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "launch/launch_int.h"

extern char **environ;

#define MAX_CPUS 4096

static int allowed_cpus(int *cpus)
{
    cpu_set_t set;
    int n = 0;
    if (sched_getaffinity(0, sizeof set, &set) != 0)
        return 0;
    for (int c = 0; c < CPU_SETSIZE && n < MAX_CPUS; c++)
        if (CPU_ISSET(c, &set))
            cpus[n++] = c;
    return n;
}

static int contains(const int *v, int n, int x)
{
    for (int i = 0; i < n; i++)
        if (v[i] == x)
            return 1;
    return 0;
}

/* cpus of NUMA node `node` that we may use; -1 when the node does not exist. */
static int numa_node_cpus(int node, const int *allowed, int nallowed, int *out)
{
    char path[96], text[4096];
    snprintf(path, sizeof path, "/sys/devices/system/node/node%d/cpulist", node);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    size_t len = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[len] = '\0';
    static int list[MAX_CPUS];
    int n = launch_parse_cpulist(text, list, MAX_CPUS), k = 0;
    for (int i = 0; i < n; i++)
        if (contains(allowed, nallowed, list[i]))
            out[k++] = list[i];
    return n < 0 ? -1 : k;
}

static void plan_cores(cpu_plan *p, const int *cpus, int ncpu)
{
    int r = p->nranks;
    if (r <= ncpu) {
        for (int i = 0; i < r; i++) {
            int lo = i * ncpu / r, hi = (i + 1) * ncpu / r;
            p->ncpus[i] = hi - lo;
            memcpy(p->cpus + (size_t)i * p->cap, cpus + lo, sizeof(int) * (size_t)(hi - lo));
        }
        p->threads = ncpu / r;
        snprintf(p->note, sizeof p->note, "cpu-bind cores: %d rank(s) on %d cpu(s), %d disjoint cpu(s) each", r, ncpu, ncpu / r);
        return;
    }
    for (int i = 0; i < r; i++) {
        p->ncpus[i] = 1;
        p->cpus[(size_t)i * p->cap] = cpus[i % ncpu];
    }
    p->threads = 1;
    snprintf(p->note, sizeof p->note, "cpu-bind cores: %d rank(s) on %d cpu(s): more ranks than cpus, so up to %d ranks share each cpu", r, ncpu, (r + ncpu - 1) / ncpu);
}

static void plan_numa(cpu_plan *p, const int *cpus, int ncpu)
{
    static int node_cpus[64][MAX_CPUS / 16];
    int nn = 0, counts[64];
    for (int node = 0; node < 1024 && nn < 64; node++) {
        static int tmp[MAX_CPUS];
        int k = numa_node_cpus(node, cpus, ncpu, tmp);
        if (k < 0 && node > 0 && nn > 0)
            break;
        if (k <= 0)
            continue;
        counts[nn] = k < MAX_CPUS / 16 ? k : MAX_CPUS / 16;
        memcpy(node_cpus[nn], tmp, sizeof(int) * (size_t)counts[nn]);
        nn++;
    }
    if (nn == 0) { /* no NUMA information: one node holding every allowed cpu */
        counts[0] = ncpu < MAX_CPUS / 16 ? ncpu : MAX_CPUS / 16;
        memcpy(node_cpus[0], cpus, sizeof(int) * (size_t)counts[0]);
        nn = 1;
    }
    int per_node = (p->nranks + nn - 1) / nn, minthreads = 1 << 30;
    for (int i = 0; i < p->nranks; i++) {
        int node = i % nn, sharing = p->nranks / nn + (node < p->nranks % nn);
        p->ncpus[i] = counts[node];
        memcpy(p->cpus + (size_t)i * p->cap, node_cpus[node], sizeof(int) * (size_t)counts[node]);
        int t = counts[node] / sharing;
        if (t < minthreads)
            minthreads = t;
    }
    p->threads = minthreads > 0 ? minthreads : 1;
    snprintf(p->note, sizeof p->note, "cpu-bind numa: %d rank(s) over %d NUMA node(s), up to %d rank(s) sharing a node's cpus", p->nranks, nn, per_node);
}

coh_status cpu_plan_make(coh_cpu_bind mode, int nranks, cpu_plan *p)
{
    static int cpus[MAX_CPUS];
    memset(p, 0, sizeof *p);
    int ncpu = allowed_cpus(cpus);
    if (ncpu <= 0)
        return coh_errf(COH_ERR_SYSTEM, "cannot read this process's cpu affinity");
    p->nranks = nranks;
    p->cap = ncpu;
    p->cpus = calloc((size_t)nranks * (size_t)ncpu, sizeof(int));
    p->ncpus = calloc((size_t)nranks, sizeof(int));
    if (!p->cpus || !p->ncpus) {
        cpu_plan_free(p);
        return coh_errf(COH_ERR_NOMEM, "out of memory planning cpu binding");
    }
    if (mode == COH_CPU_BIND_CORES)
        plan_cores(p, cpus, ncpu);
    else if (mode == COH_CPU_BIND_NUMA)
        plan_numa(p, cpus, ncpu);
    else {
        p->threads = ncpu / nranks > 0 ? ncpu / nranks : 1;
        snprintf(p->note, sizeof p->note, "cpu-bind none: %d rank(s) on %d cpu(s)", nranks, ncpu);
    }
    return COH_OK;
}

void cpu_plan_free(cpu_plan *p)
{
    free(p->cpus);
    free(p->ncpus);
    p->cpus = p->ncpus = NULL;
}

/* Names cohort sets; an inherited value of any of them is dropped. */
static const char *const contract[] = {
    "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
    "ROLE_RANK", "ROLE_NAME", "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
    "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_RUN_ID",
    "TORCHELASTIC_USE_AGENT_STORE", "TORCHELASTIC_ERROR_FILE", "COHORT_JOB_ID", "COHORT_RESTART_COUNT", "COHORT_RANK",
    "COHORT_WORLD_SIZE", "COHORT_LOCAL_RANK", "COHORT_LOCAL_WORLD_SIZE", "COHORT_NODE_RANK",
    "COHORT_NNODES", "COHORT_LAUNCHER_PID", "COHORT_STDERR_TTY", "COHORT_STDERR_COLUMNS",
    "COHORT_COMM_PORT", "COHORT_COMM_KEY",
    "COHORT_JOB_TOKEN" /* the job secret is the launchers': workers need not see it */, NULL};

static int name_is(const char *entry, const char *name)
{
    size_t n = strlen(name);
    return !strncmp(entry, name, n) && entry[n] == '=';
}

static int overridden(const char *entry, char *const *extra, char *const *local_extra)
{
    for (int i = 0; contract[i]; i++)
        if (name_is(entry, contract[i]))
            return 1;
    char *const *lists[2] = {extra, local_extra};
    for (int l = 0; l < 2; l++)
        for (char *const *e = lists[l]; e && *e; e++) {
            const char *eq = strchr(*e, '=');
            if (eq && !strncmp(entry, *e, (size_t)(eq - *e) + 1))
                return 1;
        }
    return 0;
}

static char *fmt_var(const char *name, const char *value)
{
    size_t n = strlen(name) + strlen(value) + 2;
    char *s = malloc(n);
    if (s)
        snprintf(s, n, "%s=%s", name, value);
    return s;
}

static char *fmt_int(const char *name, long v)
{
    char b[32];
    snprintf(b, sizeof b, "%ld", v);
    return fmt_var(name, b);
}

/* The variables cohort sets for this worker (owned strings, NULL-terminated). */
static int contract_vars(const worker_ids *id, char **v)
{
    int k = 0;
    v[k++] = fmt_int("RANK", id->rank);
    v[k++] = fmt_int("LOCAL_RANK", id->local_rank);
    v[k++] = fmt_int("WORLD_SIZE", id->world);
    v[k++] = fmt_int("LOCAL_WORLD_SIZE", id->local_world);
    v[k++] = fmt_int("GROUP_RANK", id->node_rank);
    v[k++] = fmt_int("GROUP_WORLD_SIZE", id->nnodes);
    v[k++] = fmt_int("ROLE_RANK", id->rank); /* one role: role ranks are global ranks */
    v[k++] = fmt_var("ROLE_NAME", id->role);
    v[k++] = fmt_int("ROLE_WORLD_SIZE", id->world);
    v[k++] = fmt_var("MASTER_ADDR", id->master_addr);
    v[k++] = fmt_int("MASTER_PORT", id->master_port);
    v[k++] = fmt_int("TORCHELASTIC_RESTART_COUNT", id->attempt);
    v[k++] = fmt_int("TORCHELASTIC_MAX_RESTARTS", id->max_restarts);
    v[k++] = fmt_var("TORCHELASTIC_RUN_ID", id->run_id);
    v[k++] = fmt_var("TORCHELASTIC_USE_AGENT_STORE", "False"); /* rank 0 hosts the store */
    if (id->error_file) /* where PyTorch's @record writes the worker's error report */
        v[k++] = fmt_var("TORCHELASTIC_ERROR_FILE", id->error_file);
    v[k++] = fmt_var("COHORT_JOB_ID", id->run_id);
    v[k++] = fmt_int("COHORT_RESTART_COUNT", id->attempt);
    v[k++] = fmt_int("COHORT_RANK", id->rank);
    v[k++] = fmt_int("COHORT_WORLD_SIZE", id->world);
    v[k++] = fmt_int("COHORT_LOCAL_RANK", id->local_rank);
    v[k++] = fmt_int("COHORT_LOCAL_WORLD_SIZE", id->local_world);
    v[k++] = fmt_int("COHORT_NODE_RANK", id->node_rank);
    v[k++] = fmt_int("COHORT_NNODES", id->nnodes);
    v[k++] = fmt_int("COHORT_LAUNCHER_PID", id->launcher_pid);
    v[k++] = fmt_int("COHORT_COMM_PORT", id->comm_port);
    if (id->comm_key) /* readable by this user only (/proc/PID/environ), as shm segments */
        v[k++] = fmt_var("COHORT_COMM_KEY", id->comm_key);
    /* what the worker writes to stderr reaches a terminal (a progress line may be drawn: the
     * launcher passes lines ended by '\r' on as they come) */
    if (id->stderr_cols >= 0)
        v[k++] = fmt_var("COHORT_STDERR_TTY", "1");
    if (id->stderr_cols > 0) /* the terminal's width left after the line prefix */
        v[k++] = fmt_int("COHORT_STDERR_COLUMNS", id->stderr_cols);
    /* torchrun's default: NCCL reports errors instead of hanging (unless the user chose) */
    if (!getenv("NCCL_ASYNC_ERROR_HANDLING"))
        v[k++] = fmt_var("NCCL_ASYNC_ERROR_HANDLING", "1");
    if (id->threads > 0 && !getenv("OMP_NUM_THREADS"))
        v[k++] = fmt_int("OMP_NUM_THREADS", id->threads);
    if (id->threads > 0 && !getenv("OPENBLAS_NUM_THREADS"))
        v[k++] = fmt_int("OPENBLAS_NUM_THREADS", id->threads);
    return k;
}

char **worker_env_build(const worker_ids *id, char *const *extra, char *const *local_extra,
                        int *owned)
{
    size_t n = 0, ne = 0, nl = 0;
    while (environ[n])
        n++;
    while (extra && extra[ne])
        ne++;
    while (local_extra && local_extra[nl])
        nl++;
    /* Ours come first and are owned; the inherited ones after them are borrowed. */
    char **env = calloc(n + ne + nl + 40, sizeof *env);
    if (!env)
        return NULL;
    int k = contract_vars(id, env);
    for (size_t i = 0; i < ne; i++)
        env[k++] = strdup(extra[i]);
    for (size_t i = 0; i < nl; i++)
        env[k++] = strdup(local_extra[i]);
    *owned = k;
    for (int i = 0; i < k; i++)
        if (!env[i]) {
            worker_env_free(env, k);
            return NULL;
        }
    for (size_t i = 0; i < n; i++)
        if (!overridden(environ[i], extra, local_extra))
            env[k++] = environ[i];
    env[k] = NULL;
    return env;
}

void worker_env_free(char **env, int owned)
{
    if (!env)
        return;
    for (int i = 0; i < owned; i++)
        free(env[i]);
    free(env);
}
