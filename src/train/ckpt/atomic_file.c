/* atomic_file.c: atomic replacement of a file (temporary file, fsync, rename, fsync folder). */
#include "train/ckpt/atomic_file.h"
#include "train/ckpt/ckpt_int.h"
#include "train/ckpt/commit.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define ATOMIC_BUF_SIZE CKPT_ATOMIC_BUF

coh_status (*atomic_file_before_rename)(const char *tmp, const char *path);

static void release(atomic_file *a)
{
    if (a->fd >= 0)
        close(a->fd);
    a->fd = -1;
    free(a->path);
    free(a->tmp);
    free(a->buf);
    a->path = a->tmp = a->buf = NULL;
    a->used = 0;
}

coh_status atomic_file_open(atomic_file *a, const char *path)
{
    memset(a, 0, sizeof *a);
    a->fd = -1;
    size_t n = strlen(path);
    a->path = strdup(path);
    a->tmp = malloc(n + 32);
    a->buf = malloc(ATOMIC_BUF_SIZE);
    if (!a->path || !a->tmp || !a->buf) {
        release(a);
        return coh_errf(COH_ERR_NOMEM, "out of memory saving '%s'", path);
    }
    /* Same folder as the target, so the rename cannot cross file systems. */
    snprintf(a->tmp, n + 32, "%s.tmp.%ld", path, (long)getpid());
    a->fd = open(a->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (a->fd < 0) {
        int e = errno;
        release(a);
        return coh_errf(e == ENOENT ? COH_ERR_NOT_FOUND : COH_ERR_IO,
                        "cannot create '%s.tmp.%ld': %s", path, (long)getpid(), strerror(e));
    }
    return COH_OK;
}

static coh_status write_all(atomic_file *a, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(a->fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return coh_errf(COH_ERR_IO, "cannot write '%s': %s", a->tmp,
                            w < 0 ? strerror(errno) : "no space written");
        p += w;
        n -= (size_t)w;
    }
    return COH_OK;
}

static coh_status flush(atomic_file *a)
{
    coh_status st = write_all(a, a->buf, a->used);
    a->used = 0;
    return st;
}

coh_status atomic_file_write(atomic_file *a, const void *data, size_t n)
{
    if (a->used + n <= ATOMIC_BUF_SIZE) {
        memcpy(a->buf + a->used, data, n);
        a->used += n;
        return COH_OK;
    }
    coh_status st = flush(a);
    if (st != COH_OK)
        return st;
    if (n >= ATOMIC_BUF_SIZE)
        return write_all(a, data, n);
    memcpy(a->buf, data, n);
    a->used = n;
    return COH_OK;
}

static coh_status sync_folder(const char *path)
{
    char *copy = strdup(path);
    if (!copy)
        return coh_errf(COH_ERR_NOMEM, "out of memory");
    int fd = open(dirname(copy), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    coh_status st = COH_OK;
    if (fd < 0 || fsync(fd) != 0)
        st = coh_errf(COH_ERR_IO, "cannot sync the folder of '%s': %s", path, strerror(errno));
    if (fd >= 0)
        close(fd);
    free(copy);
    return st;
}

coh_status atomic_file_commit(atomic_file *a)
{
    coh_status st = flush(a);
    if (st == COH_OK && fsync(a->fd) != 0)
        st = coh_errf(COH_ERR_IO, "cannot sync '%s': %s", a->tmp, strerror(errno));
    if (st == COH_OK && close(a->fd) != 0)
        st = coh_errf(COH_ERR_IO, "cannot close '%s': %s", a->tmp, strerror(errno));
    a->fd = -1;
    if (st == COH_OK && atomic_file_before_rename)
        st = atomic_file_before_rename(a->tmp, a->path);
    if (st == COH_OK)
        ckpt_fault_point("written, not renamed", a->path);
    if (st == COH_OK && rename(a->tmp, a->path) != 0)
        st = coh_errf(COH_ERR_IO, "cannot rename '%s' to '%s': %s", a->tmp, a->path,
                      strerror(errno));
    if (st != COH_OK) {
        atomic_file_abort(a);
        return st;
    }
    st = sync_folder(a->path);
    if (st == COH_OK)
        ckpt_fault_point("renamed", a->path);
    release(a);
    return st;
}

void atomic_file_abort(atomic_file *a)
{
    if (a->tmp)
        unlink(a->tmp);
    release(a);
}
