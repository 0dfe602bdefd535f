/* test_device_cpu.c: the CPU inventory: cpu lists, cgroup v2 cpu.max and v1 cfs quotas read
 * from a fake /sys + /proc tree, the smallest limit up the cgroup path, and the real probe's
 * agreement with the affinity mask. */
#define _GNU_SOURCE
#include <sched.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "test_files.h"
#include "device/device_int.h"
#include "util/cgroup.h"

static char root[128];

static void put(const char *rel, const char *text)
{
    char path[512], dir[512];
    snprintf(path, sizeof path, "%s%s", root, rel);
    snprintf(dir, sizeof dir, "%s", path);
    for (char *p = dir + strlen(root) + 1; (p = strchr(p, '/')); p++) {
        *p = '\0';
        mkdir(dir, 0755);
        *p = '/';
    }
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

static void cpu_lists(void)
{
    CHECK_INT(coh_parse_cpu_list("0-3\n"), 4);
    CHECK_INT(coh_parse_cpu_list("0-3,8,10-11\n"), 7);
    CHECK_INT(coh_parse_cpu_list("5"), 1);
    CHECK_INT(coh_parse_cpu_list(""), -1);
    CHECK_INT(coh_parse_cpu_list("3-1"), -1);
    CHECK_INT(coh_parse_cpu_list("a"), -1);
    CHECK_INT(coh_parse_cpu_list("1,,2"), -1);
}

static void cpu_max(void)
{
    CHECK_NEAR(coh_parse_cpu_max("max 100000\n"), 0, 0);
    CHECK_NEAR(coh_parse_cpu_max("150000 100000\n"), 1.5, 1e-12);
    CHECK_NEAR(coh_parse_cpu_max("50000 100000"), 0.5, 1e-12);
    CHECK_NEAR(coh_parse_cpu_max("garbage"), -1, 0);
    CHECK_NEAR(coh_parse_cpu_max("100 0"), -1, 0);
}

static void cgroup_v2_tree(void)
{
    put("/sys/devices/system/cpu/online", "0-63\n");
    put("/sys/devices/system/node/online", "0-1\n");
    put("/proc/self/cgroup", "0::/job/step\n");
    put("/sys/fs/cgroup/job/cpu.max", "300000 100000\n"); /* 3 cpus for the job */
    put("/sys/fs/cgroup/job/step/cpu.max", "max 100000\n");
    coh_cpu_info c;
    CHECK_OK(cpu_probe_root(root, &c));
    CHECK_INT(c.cores_online, 64);
    CHECK_INT(c.numa_nodes, 2);
    CHECK_NEAR(c.cgroup_limit, 3.0, 1e-12);
    CHECK_INT(c.cores_available, c.affinity_cores < 3 ? c.affinity_cores : 3);
    put("/sys/fs/cgroup/job/step/cpu.max", "50000 100000\n"); /* half a cpu: rounds up to 1 */
    CHECK_OK(cpu_probe_root(root, &c));
    CHECK_NEAR(c.cgroup_limit, 0.5, 1e-12);
    CHECK_INT(c.cores_available, 1);
}

static void cgroup_v1_tree(void)
{
    put("/proc/self/cgroup", "4:memory:/x\n3:cpu,cpuacct:/slurm/job7\n");
    put("/sys/fs/cgroup/cpu,cpuacct/slurm/job7/cpu.cfs_quota_us", "100000\n");
    put("/sys/fs/cgroup/cpu,cpuacct/slurm/job7/cpu.cfs_period_us", "100000\n");
    coh_cpu_info c;
    CHECK_OK(cpu_probe_root(root, &c));
    CHECK_NEAR(c.cgroup_limit, 1.0, 1e-12);
    CHECK_INT(c.cores_available, 1);
    put("/sys/fs/cgroup/cpu,cpuacct/slurm/job7/cpu.cfs_quota_us", "-1\n"); /* unlimited */
    CHECK_OK(cpu_probe_root(root, &c));
    CHECK_NEAR(c.cgroup_limit, 0, 0);
    CHECK_INT(c.cores_available, c.affinity_cores);
}

/* The real probe: the affinity count is what sched_getaffinity says, and it bounds what is
 * available. */
static void real_probe(void)
{
    coh_cpu_info c;
    CHECK_OK(coh_cpu_probe(&c));
    cpu_set_t set;
    CHECK(sched_getaffinity(0, sizeof set, &set) == 0);
    CHECK_INT(c.affinity_cores, CPU_COUNT(&set));
    CHECK(c.cores_available >= 1 && c.cores_available <= c.affinity_cores);
    CHECK(c.cores_online >= c.affinity_cores);
    CHECK(c.numa_nodes >= 1);
}

int main(void)
{
    snprintf(root, sizeof root, "/tmp/cohort-cpu-test-%d", (int)getpid());
    mkdir(root, 0755);
    RUN(cpu_lists);
    RUN(cpu_max);
    RUN(cgroup_v2_tree);
    RUN(cgroup_v1_tree);
    RUN(real_probe);
    test_rmtree(root);
    return CHECK_REPORT();
}
