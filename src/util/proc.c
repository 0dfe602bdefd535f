/* proc.c: whether a process is dead as other processes can tell (see proc.h). */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "util/proc.h"

int coh_pid_dead(pid_t pid)
{
    if (pid <= 0)
        return 0;
    if (kill(pid, 0) == -1 && errno == ESRCH)
        return 1;
    char path[64], buf[256];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    size_t k = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[k] = 0;
    const char *p = strrchr(buf, ')'); /* the command name may hold anything, ')' too */
    return p && p[1] == ' ' && (p[2] == 'Z' || p[2] == 'X');
}
