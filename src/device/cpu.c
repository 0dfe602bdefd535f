/* cpu.c: the CPU inventory: cores online and NUMA nodes from /sys, the affinity mask, and the
 * cgroup v2 / v1 CPU quota, which together say how many cores this process can really use. */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "device/device_int.h"
#include "util/cgroup.h"

static int read_text(const char *root, const char *path, char *buf, size_t cap)
{
    char full[1024];
    snprintf(full, sizeof full, "%s%s", root, path);
    FILE *f = fopen(full, "r");
    if (!f)
        return -1;
    size_t n = fread(buf, 1, cap - 1, f);
    fclose(f);
    buf[n] = '\0';
    return 0;
}

/* The smallest cpu.max limit from this process's cgroup v2 directory up to the root. */
static double cgroup_v2_limit(const char *root, const char *cg)
{
    char dir[512], buf[128];
    double best = 0;
    snprintf(dir, sizeof dir, "%s", cg);
    for (;;) {
        char path[600];
        snprintf(path, sizeof path, "/sys/fs/cgroup%s%scpu.max", dir,
                 dir[strlen(dir) - 1] == '/' ? "" : "/");
        if (read_text(root, path, buf, sizeof buf) == 0) {
            double l = coh_parse_cpu_max(buf);
            if (l > 0 && (best == 0 || l < best))
                best = l;
        }
        char *slash = strrchr(dir, '/');
        if (!slash || slash == dir)
            break;
        *slash = '\0';
    }
    return best;
}

static double cgroup_v1_limit(const char *root, const char *mount, const char *cg)
{
    char path[700], buf[64];
    long long quota, period;
    snprintf(path, sizeof path, "/sys/fs/cgroup/%s%s/cpu.cfs_quota_us", mount, cg);
    if (read_text(root, path, buf, sizeof buf) != 0 || sscanf(buf, "%lld", &quota) != 1 ||
        quota <= 0)
        return 0;
    snprintf(path, sizeof path, "/sys/fs/cgroup/%s%s/cpu.cfs_period_us", mount, cg);
    if (read_text(root, path, buf, sizeof buf) != 0 || sscanf(buf, "%lld", &period) != 1 ||
        period <= 0)
        return 0;
    return (double)quota / (double)period;
}

/* Walk /proc/self/cgroup: "0::/path" is v2; "N:cpu,cpuacct:/path" is v1. */
static double cgroup_limit(const char *root)
{
    char text[4096];
    if (read_text(root, "/proc/self/cgroup", text, sizeof text) != 0)
        return 0;
    double limit = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2)
            continue;
        *c1 = *c2 = '\0';
        const char *ctrl = c1 + 1, *cg = c2 + 1;
        double l = 0;
        if (!*ctrl)
            l = cgroup_v2_limit(root, *cg ? cg : "/");
        else if (strstr(ctrl, "cpu") && (strstr(ctrl, "cpu,") || !strcmp(ctrl, "cpu") ||
                                         strstr(ctrl, ",cpu")))
            l = cgroup_v1_limit(root, ctrl, cg);
        if (l > 0 && (limit == 0 || l < limit))
            limit = l;
    }
    return limit;
}

static int count_numa_nodes(const char *root)
{
    char buf[256];
    if (read_text(root, "/sys/devices/system/node/online", buf, sizeof buf) == 0) {
        int n = coh_parse_cpu_list(buf);
        if (n > 0)
            return n;
    }
    return 1;
}

coh_status cpu_probe_root(const char *root, coh_cpu_info *out)
{
    memset(out, 0, sizeof *out);
    char buf[1024];
    int online = -1;
    if (read_text(root, "/sys/devices/system/cpu/online", buf, sizeof buf) == 0)
        online = coh_parse_cpu_list(buf);
    if (online <= 0)
        online = (int)sysconf(_SC_NPROCESSORS_ONLN);
    out->cores_online = online > 0 ? online : 1;
    out->numa_nodes = count_numa_nodes(root);
    cpu_set_t set;
    CPU_ZERO(&set);
    out->affinity_cores = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set)
                                                                       : out->cores_online;
    out->cgroup_limit = cgroup_limit(root);
    int avail = out->affinity_cores;
    if (out->cgroup_limit > 0 && (int)ceil(out->cgroup_limit) < avail)
        avail = (int)ceil(out->cgroup_limit);
    out->cores_available = avail > 0 ? avail : 1;
    return COH_OK;
}

coh_status coh_cpu_probe(coh_cpu_info *out)
{
    return cpu_probe_root("", out);
}
