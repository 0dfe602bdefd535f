/* proc.c: whether a process is dead as other processes can tell, when it started, and a
 * thread's state (see proc.h). */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "util/proc.h"

/* The fields of a /proc stat file after the command name (from the space before the state),
 * read into buf; NULL when it cannot be read. */
static const char *stat_fields(const char *stat_path, char *buf, size_t n)
{
    FILE *f = fopen(stat_path, "r");
    if (!f)
        return NULL;
    size_t k = fread(buf, 1, n - 1, f);
    fclose(f);
    buf[k] = 0;
    const char *p = strrchr(buf, ')'); /* the command name may hold anything, ')' too */
    return p && p[1] == ' ' ? p + 1 : NULL;
}

char coh_proc_stat_state(const char *stat_path)
{
    char buf[512];
    const char *p = stat_fields(stat_path, buf, sizeof buf);
    return p ? p[1] : 0;
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
    const char *p = stat_fields(path, buf, sizeof buf); /* field 3 (the state) ... 22 (starttime) */
    unsigned long long start = 0;
    if (!p || sscanf(p, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d "
                     "%*d %*d %*d %llu", &start) != 1)
        return 0;
    return start;
}
