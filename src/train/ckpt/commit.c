/* commit.c: the commit of a checkpoint as a whole (step-suffixed names, cleanup of the other
 * steps' files after the commit) and the fault-injection points of a save. */
#include "train/ckpt/commit.h"

#include <ctype.h>
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cohort/train_ckpt.h"

coh_status ckpt_state_name(char *buf, size_t cap, const char *path, long step)
{
    if ((size_t)snprintf(buf, cap, "%s.state%ld", path, step) >= cap)
        return coh_errf(COH_ERR_INVALID, "checkpoint path '%s' is too long", path);
    return COH_OK;
}

void ckpt_state_suffix(char *buf, size_t cap, long step)
{
    snprintf(buf, cap, ".state%ld", step);
}

coh_status ckpt_drop_uncommitted(coh_status st, const char *path, const char *state)
{
    char why[1024], named[4200];
    snprintf(why, sizeof why, "%s", coh_last_error());
    if (coh_ckpt_state_path(path, named, sizeof named) || strcmp(named, state))
        unlink(state); /* else committed: the failure came after the rename of the weights */
    return coh_errf(st, "%s", why);
}

/* The length of a run of digits at s (0: none). */
static size_t digits(const char *s)
{
    size_t n = 0;
    while (isdigit((unsigned char)s[n]))
        n++;
    return n;
}

/* 1 when `s` is ".tmp.<digits>", the name atomic_file gives a file being written. */
static int tmp_suffix(const char *s)
{
    return !strncmp(s, ".tmp.", 5) && digits(s + 5) && !s[5 + digits(s + 5)];
}

/* The step of `s` = "<digits><rest>" and *rest; -1 when it does not start with digits. */
static long step_of(const char *s, const char **rest)
{
    if (!digits(s))
        return -1;
    char *end;
    long step = strtol(s, &end, 10);
    *rest = end;
    return step;
}

int ckpt_other_file(const char *s, long keep)
{
    const char *rest;
    long step;
    int r, n, used = 0;
    if (tmp_suffix(s) || !strcmp(s, ".state"))
        return 1; /* the weights' temporary file; the older layout's unsuffixed state */
    if (!strncmp(s, ".state", 6) && (step = step_of(s + 6, &rest)) >= 0)
        return tmp_suffix(rest) || (!*rest && step != keep);
    /* ".shard<step>-<r>-of-<n>": the sharded layout; ".zero...": the older ZeRO layout's */
    int shard = !strncmp(s, ".shard", 6), skip = shard ? 6 : 5;
    if ((!shard && strncmp(s, ".zero", 5)) || (step = step_of(s + skip, &rest)) < 0)
        return 0;
    if (!shard && !strncmp(rest, ".index", 6))
        used = 6;
    else if (sscanf(rest, "-%d-of-%d%n", &r, &n, &used) != 2)
        return 0;
    return tmp_suffix(rest + used) || (!rest[used] && step != keep);
}

int coh_ckpt_file_of(const char *path, const char *name)
{
    const char *slash = strrchr(path, '/'), *base = slash ? slash + 1 : path;
    size_t bl = strlen(base);
    return *base && !strncmp(name, base, bl) && (!name[bl] || ckpt_other_file(name + bl, -1));
}

void ckpt_remove_others(const char *path, long keep)
{
    const char *slash = strrchr(path, '/'), *base = slash ? slash + 1 : path;
    size_t bl = strlen(base);
    char dir[4200], name[8400];
    if (!slash)
        snprintf(dir, sizeof dir, ".");
    else
        snprintf(dir, sizeof dir, "%.*s", slash == path ? 1 : (int)(slash - path), path);
    DIR *d = opendir(dir);
    if (!d)
        return;
    for (struct dirent *e; (e = readdir(d));) {
        if (!strncmp(e->d_name, base, bl) && ckpt_other_file(e->d_name + bl, keep)) {
            snprintf(name, sizeof name, "%s/%s", dir, e->d_name);
            unlink(name);
        }
    }
    closedir(d);
}

/* The fault plan of this process: kill at point `point` of save `save` (0: none). */
static struct {
    int parsed, rank, save, point;
    int saves, points, active;
} fault;

static coh_status parse_fault(void)
{
    const char *v = getenv("COHORT_CKPT_KILL"), *restart = getenv("COHORT_RESTART_COUNT");
    fault.parsed = 1;
    if (!v || !*v || (restart && atoi(restart) > 0))
        return COH_OK;
    int r, s, p, used = 0;
    if (sscanf(v, "%d:%d:%d%n", &r, &s, &p, &used) != 3 || v[used] || r < 0 || s < 1 || p < 1)
        return coh_errf(COH_ERR_INVALID, "COHORT_CKPT_KILL '%s': expected RANK:SAVE:POINT (a "
                        "rank from 0, a save and a point of it from 1)", v);
    const char *me = getenv("RANK");
    if ((me ? atoi(me) : 0) == r) {
        fault.save = s;
        fault.point = p;
    }
    return COH_OK;
}

coh_status ckpt_fault_begin(void)
{
    coh_status st = fault.parsed ? COH_OK : parse_fault();
    fault.saves++;
    fault.points = 0;
    fault.active = fault.save == fault.saves;
    if (!st)
        ckpt_fault_point("save begins", "");
    return st;
}

void ckpt_fault_point(const char *what, const char *file)
{
    if (!fault.active || ++fault.points != fault.point)
        return;
    fprintf(stderr, "checkpoint fault: killed at save %d, point %d (%s %s)\n", fault.saves,
            fault.points, what, file);
    fflush(stderr);
    raise(SIGKILL);
}

void ckpt_fault_end(void)
{
    fault.active = 0;
}
