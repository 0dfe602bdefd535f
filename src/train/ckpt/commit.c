/* commit.c: the commit of a checkpoint as a whole (names tagged by step, and by a second set for
 * a save of the committed step; cleanup of the other tags' files after the commit) and the
 * fault-injection points of a save. */
#include "train/ckpt/commit.h"

#include <ctype.h>
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cohort/train_ckpt.h"
#include "train/ckpt/ckpt_int.h"
#include "util/json.h"

/* The tag at s = "<digits>[.1]<rest>" and *rest; 0 when s does not start with digits. */
static int tag_at(const char *s, ckpt_tag *t, const char **rest);

void ckpt_state_suffix(char *buf, size_t cap, ckpt_tag t)
{
    snprintf(buf, cap, ".state%ld%s", t.step, t.gen ? ".1" : "");
}

coh_status ckpt_state_name(char *buf, size_t cap, const char *path, ckpt_tag t)
{
    char sfx[48];
    ckpt_state_suffix(sfx, sizeof sfx, t);
    if ((size_t)snprintf(buf, cap, "%s%s", path, sfx) >= cap)
        return coh_errf(COH_ERR_INVALID, "checkpoint path '%s' is too long", path);
    return COH_OK;
}

/* The tag of suffix `sfx` (NULL: the older layout, gen 0 of `ms`) and step text `ms`. */
static coh_status tag_from(const char *sfx, const char *ms, const char *path, ckpt_tag *out)
{
    const char *rest = "";
    char *end;
    long step = ms && *ms ? strtol(ms, &end, 10) : -1;
    if (step >= 0 && *end)
        step = -1;
    if (!sfx) {
        *out = (ckpt_tag){step, 0};
        return COH_OK;
    }
    if (strncmp(sfx, ".state", 6) || !tag_at(sfx + 6, out, &rest) || *rest)
        return coh_errf(COH_ERR_INVALID, "checkpoint '%s': invalid state_suffix '%s' (expected "
                        "'.state', a step and, for a second save of a step, '.1')", path, sfx);
    if (out->step != step)
        return coh_errf(COH_ERR_INVALID, "checkpoint '%s': its state_suffix '%s' names another "
                        "step than its step '%s'", path, sfx, ms ? ms : "");
    return COH_OK;
}

coh_status ckpt_tag_of(const coh_st_file *f, const char *path, ckpt_tag *out)
{
    return tag_from(coh_st_meta_get(f, "state_suffix"), coh_st_meta_get(f, "step"), path, out);
}

/* The string value of `key` in the "__metadata__" of a safetensors header (NULL: none). */
static const char *meta_string(const json_value *root, const char *key)
{
    const json_value *m = json_get(root, "__metadata__"), *v = m ? json_get(m, key) : NULL;
    return v && v->type == JSON_STRING ? v->u.str.chars : NULL;
}

/* The tag that the commit at `path` names, read from its header alone: its tensors (the whole
 * model's weights in the single-file layout) are neither read nor mapped, so that a save holds
 * no more than it did. 0 when no readable commit is there. */
static int committed_tag(const char *path, ckpt_tag *out)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY), found = 0;
    struct stat sb;
    unsigned char len[8];
    uint64_t hlen = 0;
    if (fd < 0)
        return 0;
    if (fstat(fd, &sb) || !S_ISREG(sb.st_mode) || pread(fd, len, 8, 0) != 8) {
        close(fd);
        return 0;
    }
    for (int i = 7; i >= 0; i--)
        hlen = hlen << 8 | len[i];
    char *text = hlen >= 2 && hlen <= ST_MAX_HEADER && hlen <= (uint64_t)sb.st_size - 8
                     ? malloc((size_t)hlen)
                     : NULL;
    json_doc *doc = NULL;
    if (text && pread(fd, text, (size_t)hlen, 8) == (ssize_t)hlen &&
        json_parse(text, (size_t)hlen, &doc) == COH_OK) {
        const char *sfx = meta_string(json_root(doc), "state_suffix");
        found = sfx && tag_from(sfx, meta_string(json_root(doc), "step"), path, out) == COH_OK;
    }
    json_free(doc);
    free(text);
    close(fd);
    return found;
}

ckpt_tag ckpt_tag_for(const char *path, long step)
{
    ckpt_tag now;
    int named = committed_tag(path, &now);
    coh_err_clear();
    return (ckpt_tag){step, named && now.step == step && now.gen == 0};
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

static int tag_at(const char *s, ckpt_tag *t, const char **rest)
{
    if (!digits(s))
        return 0;
    char *end;
    t->step = strtol(s, &end, 10);
    t->gen = end[0] == '.' && end[1] == '1' && (!end[2] || end[2] == '-' || end[2] == '.');
    *rest = end + 2 * t->gen;
    return 1;
}

static int same_tag(ckpt_tag a, const ckpt_tag *keep)
{
    return keep && a.step == keep->step && a.gen == keep->gen;
}

int ckpt_other_file(const char *s, const ckpt_tag *keep)
{
    const char *rest;
    ckpt_tag t;
    int r, n, used = 0;
    if (tmp_suffix(s) || !strcmp(s, ".state"))
        return 1; /* the weights' temporary file; the older layout's unsuffixed state */
    if (!strncmp(s, ".state", 6) && tag_at(s + 6, &t, &rest))
        return tmp_suffix(rest) || (!*rest && !same_tag(t, keep));
    /* ".shard<tag>-<r>-of-<n>": the sharded layout; ".zero...": the older ZeRO layout's */
    int shard = !strncmp(s, ".shard", 6), skip = shard ? 6 : 5;
    if ((!shard && strncmp(s, ".zero", 5)) || !tag_at(s + skip, &t, &rest))
        return 0;
    if (!shard && !strncmp(rest, ".index", 6))
        used = 6;
    else if (sscanf(rest, "-%d-of-%d%n", &r, &n, &used) != 2)
        return 0;
    return tmp_suffix(rest + used) || (!rest[used] && !same_tag(t, keep));
}

int coh_ckpt_file_of(const char *path, const char *name)
{
    const char *slash = strrchr(path, '/'), *base = slash ? slash + 1 : path;
    size_t bl = strlen(base);
    return *base && !strncmp(name, base, bl) && (!name[bl] || ckpt_other_file(name + bl, NULL));
}

void ckpt_remove_others(const char *path, ckpt_tag keep)
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
        if (!strncmp(e->d_name, base, bl) && ckpt_other_file(e->d_name + bl, &keep)) {
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
