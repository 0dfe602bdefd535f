/* proc.h: whether a process is dead as other processes can tell (gone, or a zombie), when it
 * started, and a thread's scheduler state. Internal to libcohort (the shared-memory transport's liveness checks,
 * the launcher's root cause, the engine's check of its cpus at start). */
#ifndef COHORT_UTIL_PROC_H
#define COHORT_UTIL_PROC_H

#include <sys/types.h>

/* The state letter of a /proc stat file (/proc/PID/stat, /proc/PID/task/TID/stat): 'R', 'S',
 * 'Z', ...; 0 when it cannot be read. */
char coh_proc_stat_state(const char *stat_path);

/* 1 when pid no longer exists, or when its main thread has exited (state Z or X in
 * /proc/PID/stat): then the process is dead or dying, though its parent may not be able to
 * reap it yet (other threads still ending); 0 otherwise, and for pid <= 0. */
int coh_pid_dead(pid_t pid);

/* When pid started, in clock ticks since boot (/proc/PID/stat's starttime): with the pid it
 * names one process, a reused pid giving another value; 0 when it cannot be read. */
unsigned long long coh_proc_start_time(pid_t pid);

#endif
