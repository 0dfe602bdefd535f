/* threads.c: the default thread count of a training process (see threads.h): its affinity
 * mask and cgroup quota, shared among the launcher's local ranks when they share the CPUs. */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cohort/launch.h"
#include "train/threads.h"

#define CGROUP_ROOT "/sys/fs/cgroup"

int coh_threads_for_budget(const coh_cpu_budget *b, char *why, size_t cap)
{
    char tmp[8];
    if (!why)
        why = tmp, cap = sizeof tmp;
    int mask = b->mask_cpus > 0 ? b->mask_cpus : b->node_cpus > 0 ? b->node_cpus : 1;
    int n = mask;
    size_t k = (size_t)snprintf(why, cap, "%d cpu%s in the affinity mask", mask,
                                mask == 1 ? "" : "s");
    if (b->quota_cpus > 0 && b->quota_cpus < n) {
        n = b->quota_cpus >= 1 ? (int)b->quota_cpus : 1;
        if (k < cap)
            k += (size_t)snprintf(why + k, cap - k, ", cgroup cpu.max quota %.2f cpus",
                                  b->quota_cpus);
    }
    int bound = b->node_cpus > 0 && mask < b->node_cpus;
    if (b->local_ranks <= 1)
        return n;
    const char *who = b->launcher ? b->launcher : "launcher";
    if (!bound) /* each rank bound to cpus of its own keeps them: dividing would idle them */
        n = n / b->local_ranks > 0 ? n / b->local_ranks : 1;
    if (k < cap)
        snprintf(why + k, cap - k, bound ? "; %d local ranks (%s), each bound to its own cpus"
                                         : ", shared by %d local ranks (%s)",
                 b->local_ranks, who);
    return n;
}

/* The first line of FILE into buf; 0 when read. */
static int read_line(const char *file, char *buf, size_t cap)
{
    FILE *f = fopen(file, "r");
    if (!f)
        return -1;
    int ok = fgets(buf, (int)cap, f) != NULL;
    fclose(f);
    return ok ? 0 : -1;
}

/* This process's cgroup v2 directory ("/sys/fs/cgroup/user.slice/..."); 0 when found. */
static int cgroup_dir(char *dir, size_t cap)
{
    FILE *f = fopen("/proc/self/cgroup", "r");
    char line[4096];
    int found = -1;
    while (f && found && fgets(line, sizeof line, f))
        if (!strncmp(line, "0::", 3)) {
            line[strcspn(line, "\n")] = 0;
            snprintf(dir, cap, "%s%s", CGROUP_ROOT, strcmp(line + 3, "/") ? line + 3 : "");
            found = 0;
        }
    if (f)
        fclose(f);
    return found;
}

/* The cgroup's CPUs and the tightest cpu.max from it up to the root. */
static void read_cgroup(coh_cpu_budget *b)
{
    char dir[4200], file[4300], line[256];
    if (cgroup_dir(dir, sizeof dir))
        return;
    snprintf(file, sizeof file, "%s/cpuset.cpus.effective", dir);
    int cpus = read_line(file, line, sizeof line) ? -1 : coh_parse_cpu_list(line);
    if (cpus > 0)
        b->node_cpus = cpus;
    for (;;) {
        snprintf(file, sizeof file, "%s/cpu.max", dir);
        double q = read_line(file, line, sizeof line) ? 0 : coh_parse_cpu_max(line);
        if (q > 0 && (b->quota_cpus <= 0 || q < b->quota_cpus))
            b->quota_cpus = q;
        char *slash = strrchr(dir, '/');
        if (!slash || (size_t)(slash - dir) < strlen(CGROUP_ROOT))
            break;
        *slash = 0;
    }
}

void coh_cpu_budget_read(coh_cpu_budget *b)
{
    memset(b, 0, sizeof *b);
    cpu_set_t set;
    if (!sched_getaffinity(0, sizeof set, &set))
        b->mask_cpus = CPU_COUNT(&set);
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    b->node_cpus = online > 0 ? (int)online : 0;
    read_cgroup(b);
    coh_launch_env env;
    if (!coh_launch_env_read(&env) && env.launcher != COH_LAUNCHER_NONE) {
        b->local_ranks = env.local_world_size;
        b->launcher = coh_launcher_name(env.launcher);
    }
}
