/* threads.h: the default thread count of a training process: the CPUs it may run on, shared
 * among the ranks a launcher started on the same CPUs. Pure decision plus its inputs' readers. */
#ifndef COHORT_TRAIN_THREADS_H
#define COHORT_TRAIN_THREADS_H

#include <stddef.h>

typedef struct coh_cpu_budget {
    int mask_cpus;          /* CPUs in this process's affinity mask (0: unknown) */
    int node_cpus;          /* CPUs the node offers the job: the cgroup's cpuset, else online */
    double quota_cpus;      /* cgroup v2 cpu.max quota / period (0: no quota) */
    int local_ranks;        /* ranks the launcher started on this node (0 or 1: this one) */
    const char *launcher;   /* the launcher that said so ("openmpi", "pmi", "slurm", ...) */
} coh_cpu_budget;

/* Threads for a budget, >= 1, and in WHY (may be NULL) where the count came from. A mask
 * narrower than the node's CPUs is a binding (the launcher's or taskset's): the rank keeps
 * its own CPUs. A mask of all of them is shared with the other local ranks: it is divided
 * among them. A quota caps the count at its whole CPUs (at least 1). */
int coh_threads_for_budget(const coh_cpu_budget *b, char *why, size_t cap);

/* This process's budget: sched_getaffinity, its cgroup v2 cpuset.cpus.effective and the
 * smallest cpu.max on the way to the cgroup root, and the launcher's local rank count. */
void coh_cpu_budget_read(coh_cpu_budget *b);

/* coh_parse_cpu_max and coh_parse_cpu_list, the readers of cpu.max and cpu lists, live in
 * util/cgroup.h (the inventory reads them too) */
#include "util/cgroup.h"


#endif
