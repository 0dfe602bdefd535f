/* cgroup.h: parsers of the cgroup v2 files that say how much CPU a process may use, shared by
 * the device inventory (what the machine offers) and the trainer's default thread count. */
#ifndef COHORT_UTIL_CGROUP_H
#define COHORT_UTIL_CGROUP_H

/* A cgroup v2 cpu.max ("150000 100000", "max 100000") in CPUs: 0 for no quota ("max"), -1 when
 * the text is not that form. */
double coh_parse_cpu_max(const char *text);

/* The CPUs of a Linux cpu list ("0-3,8,10-11\n": cpuset.cpus.effective, cpu/online, node/online);
 * -1 when malformed or empty. */
int coh_parse_cpu_list(const char *text);

#endif
