/* reserve.c: advisory per-device locks (flock on a file per device in a runtime directory) so
 * that jobs started at the same moment never pick the same device. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "device/device_int.h"

struct coh_reservation {
    int nfd;
    int fd[128]; /* up to two per device: its own file and its parent's */
};

char *coh_lock_dir(char *buf, size_t cap)
{
    const char *env = getenv("COHORT_LOCK_DIR"), *xdg = getenv("XDG_RUNTIME_DIR");
    if (env && *env)
        snprintf(buf, cap, "%s", env);
    else if (xdg && *xdg)
        snprintf(buf, cap, "%s/cohort-locks", xdg);
    else
        snprintf(buf, cap, "/tmp/cohort-locks-%u", (unsigned)getuid());
    return buf;
}

static coh_status ensure_dir(const char *dir, int private_dir)
{
    struct stat sb;
    if (mkdir(dir, 0700) != 0 && errno != EEXIST)
        return coh_errf(COH_ERR_SYSTEM, "cannot create lock directory '%s': %m", dir);
    if (lstat(dir, &sb) != 0)
        return coh_errf(COH_ERR_SYSTEM, "cannot use lock directory '%s': %m", dir);
    if (!S_ISDIR(sb.st_mode))
        return coh_errf(COH_ERR_SYSTEM, "lock directory '%s' is not a directory", dir);
    /* A per-user directory in /tmp that someone else created could be used to block us. */
    if (private_dir && sb.st_uid != getuid())
        return coh_errf(COH_ERR_SYSTEM, "lock directory '%s' belongs to uid %u, not to this "
                        "user (set COHORT_LOCK_DIR)", dir, (unsigned)sb.st_uid);
    return COH_OK;
}

/* dir/<id>.lock with characters unsafe in a file name replaced. */
static void lock_path(const char *dir, const char *id, const char *suffix, char *buf, size_t cap)
{
    char safe[COH_DEV_UUID_MAX + 16];
    size_t i = 0;
    for (; id[i] && i + 1 < sizeof safe; i++) {
        char ch = id[i];
        int ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                 (ch >= '0' && ch <= '9') || ch == '-' || ch == '.' || ch == '_';
        safe[i] = ok ? ch : '_';
    }
    safe[i] = '\0';
    snprintf(buf, cap, "%s/%s%s.lock", dir, safe, suffix);
}

/* Try to lock path; returns the fd, or -1 with holder[] naming who holds it (or the error). */
static int try_lock(const char *path, int exclusive, char *holder, size_t cap)
{
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) {
        snprintf(holder, cap, "cannot open lock file '%s': %s", path, strerror(errno));
        return -1;
    }
    if (flock(fd, (exclusive ? LOCK_EX : LOCK_SH) | LOCK_NB) == 0) {
        if (exclusive) {
            char pid[32];
            int n = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
            if (ftruncate(fd, 0) != 0 || pwrite(fd, pid, (size_t)n, 0) != n) {
                /* The pid is only for messages; the lock itself is held. */
            }
        }
        return fd;
    }
    int err = errno;
    char pid[32] = "";
    ssize_t got = pread(fd, pid, sizeof pid - 1, 0);
    close(fd);
    if (err != EWOULDBLOCK) {
        snprintf(holder, cap, "cannot lock '%s': %s", path, strerror(err));
        return -1;
    }
    pid[got > 0 ? got : 0] = '\0';
    pid[strcspn(pid, "\n")] = '\0';
    snprintf(holder, cap, "reserved by another process%s%s%s", *pid ? " (pid " : "", pid,
             *pid ? ")" : "");
    return -1;
}

/* The lock files of one visible device: its own (the GPU, its MIG instance or its tile) and its
 * GPU's, which a MIG instance or tile also holds shared. Returns 1 when it is such a part. */
static int device_lock_paths(const coh_inventory *inv, const coh_visible_device *d,
                             const char *dir, char own[1024], char parent[1024])
{
    const coh_gpu *g = &inv->gpus[d->gpu];
    char tile[16];
    snprintf(tile, sizeof tile, ".tile%d", d->tile);
    lock_path(dir, g->uuid, "", parent, 1024);
    if (d->mig >= 0)
        lock_path(dir, g->mig[d->mig].uuid, "", own, 1024);
    else
        lock_path(dir, g->uuid, d->tile >= 0 ? tile : "", own, 1024);
    return d->mig >= 0 || d->tile >= 0;
}

/* Lock one visible device: its own file exclusively, and its parent's shared for a MIG
 * instance or tile. Returns 0 and appends fds to r, or -1 with why[]. */
static int lock_device(const coh_inventory *inv, const coh_visible_device *d, const char *dir,
                       coh_reservation *r, char *why, size_t cap)
{
    char own[1024], parent[1024];
    int part = device_lock_paths(inv, d, dir, own, parent);
    int pfd = -1;
    if (part && (pfd = try_lock(parent, 0, why, cap)) < 0)
        return -1;
    int fd = try_lock(own, 1, why, cap);
    if (fd < 0) {
        if (pfd >= 0)
            close(pfd);
        return -1;
    }
    if (pfd >= 0)
        r->fd[r->nfd++] = pfd;
    r->fd[r->nfd++] = fd;
    return 0;
}

/* Whether another process holds path's lock (exclusively, or at all when `any`); holder[]
 * then says who. This process's parent's reservation ('cohort pick --reserve -- CMD') is the
 * job's own. Creates nothing: a missing file is a free device. */
static int held(const char *path, int any, char *holder, size_t cap)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC); /* flock needs no write access: another
                                                  user's file in a shared lock dir is read */
    if (fd < 0)
        return 0;
    if (flock(fd, (any ? LOCK_EX : LOCK_SH) | LOCK_NB) == 0) {
        close(fd); /* closing releases the probe's lock */
        return 0;
    }
    char pid[32] = "";
    ssize_t got = pread(fd, pid, sizeof pid - 1, 0);
    close(fd);
    pid[got > 0 ? got : 0] = '\0';
    long who = strtol(pid, NULL, 10);
    if (who && (who == (long)getpid() || who == (long)getppid()))
        return 0;
    if (who)
        snprintf(holder, cap, "reserved by another process (pid %ld)", who);
    else
        snprintf(holder, cap, "reserved by another process");
    return 1;
}

int pick_skip_reserved(const coh_inventory *inv, const coh_visible *vis, coh_pick_result *res,
                       int *rank, int nr)
{
    char dirbuf[900], own[1024], parent[1024];
    const char *dir = coh_lock_dir(dirbuf, sizeof dirbuf);
    int kept = 0;
    for (int i = 0; i < nr; i++) {
        coh_pick_candidate *c = &res->cand[rank[i]];
        int part = device_lock_paths(inv, &vis->dev[rank[i]], dir, own, parent);
        if (held(own, 1, c->reason, sizeof c->reason) ||
            (part && held(parent, 0, c->reason, sizeof c->reason)))
            c->usable = 0;
        else
            rank[kept++] = rank[i];
    }
    return kept;
}

coh_status coh_pick_reserve(const coh_inventory *inv, const coh_visible *vis,
                            const coh_pick_opts *o, const char *lock_dir, coh_pick_result *res,
                            coh_reservation **out)
{
    *out = NULL;
    coh_status st = pick_prepare(vis, o, res);
    if (st != COH_OK)
        return st;
    char dirbuf[900];
    const char *dir = lock_dir ? lock_dir : coh_lock_dir(dirbuf, sizeof dirbuf);
    if ((st = ensure_dir(dir, !lock_dir && !getenv("COHORT_LOCK_DIR"))) != COH_OK)
        return st;
    int *rank = calloc((size_t)vis->count + 1, sizeof *rank);
    coh_reservation *r = calloc(1, sizeof *r);
    if (!rank || !r) {
        free(rank);
        free(r);
        return coh_errf(COH_ERR_NOMEM, "out of memory");
    }
    int nr = pick_rank(inv, vis, o, res, rank);
    for (int i = 0; i < nr && res->npicked < o->n; i++) {
        coh_pick_candidate *c = &res->cand[rank[i]];
        if (lock_device(inv, &vis->dev[rank[i]], dir, r, c->reason, sizeof c->reason) == 0)
            res->picked[res->npicked++] = rank[i];
        else
            c->usable = 0;
    }
    free(rank);
    if (res->npicked == o->n) {
        *out = r;
        return COH_OK;
    }
    coh_reservation_destroy(r);
    char why[900];
    pick_rejections(inv, vis, res, why, sizeof why);
    int got = res->npicked; /* kept: the caller's message counts what was free */
    return coh_errf(nr >= o->n ? COH_ERR_BUSY : COH_ERR_NOT_FOUND,
                    "%d %s device%s requested but %d %s usable and free of reservations%s%s",
                    o->n, coh_accel_name(vis->accel), o->n == 1 ? "" : "s", got,
                    got == 1 ? "is" : "are", *why ? ": " : "", why);
}

void coh_reservation_destroy(coh_reservation *r)
{
    if (!r)
        return;
    for (int i = 0; i < r->nfd; i++)
        close(r->fd[i]); /* closing the last descriptor releases the flock */
    free(r);
}
