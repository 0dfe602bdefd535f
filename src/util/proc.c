/* proc.c: whether a process is dead as other processes can tell, when it started, and a
 * thread's state (see proc.h). */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "util/proc.h"

char coh_proc_stat_state(const char *stat_path)
{
    char buf[512];
    FILE *f = fopen(stat_path, "r");
    if (!f)
        return 0;
    size_t k = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[k] = 0;
    const char *p = strrchr(buf, ')'); /* the command name may hold anything, ')' too */
    return p && p[1] == ' ' ? p[2] : 0;
}

int coh_pid_dead(pid_t pid)
{
    if (pid <= 0)
        return 0;
    if (kill(pid, 0) == -1 && errno == ESRCH)
        return 1;
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    char state = coh_proc_stat_state(path);
    return state == 'Z' || state == 'X';
}

unsigned long long coh_proc_start_time(pid_t pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    size_t k = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[k] = 0;
    const char *p = strrchr(buf, ')'); /* then field 3 (the state) ... field 22 (starttime) */
    unsigned long long start = 0;
    if (!p || sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d "
                     "%*d %*d %*d %llu", &start) != 1)
        return 0;
    return start;
}
