/* spawn.c: starting workers (own process group, death signal tied to the launcher, pipes,
 * cpu affinity) and the guard process that kills them all if the launcher is SIGKILLed and
 * removes what they leave. */
#define _GNU_SOURCE /* accept4, pipe2, sigabbrev_np, sched_setaffinity */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cohort/clock.h"
#include "comm/comm_int.h"
#include "launch/launch_int.h"

static int is_executable(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode) && access(path, X_OK) == 0;
}

/* A script given where a program goes: torchrun runs python on it, cohort runs what it is
 * given, so say how. */
static const char *script_hint(const char *name)
{
    size_t n = strlen(name);
    return n > 3 && !strcmp(name + n - 3, ".py")
               ? " (a Python script: give the interpreter, e.g. 'cohort run ... python3 SCRIPT')"
               : "";
}

coh_status find_program(const char *name, char *path, size_t n)
{
    if (strchr(name, '/')) {
        if (!is_executable(name))
            return coh_errf(COH_ERR_NOT_FOUND, "program '%s' not found or not executable%s", name,
                            script_hint(name));
        snprintf(path, n, "%s", name);
        return COH_OK;
    }
    const char *p = getenv("PATH");
    if (!p || !*p)
        p = "/usr/local/bin:/usr/bin:/bin";
    while (*p) {
        const char *colon = strchr(p, ':');
        size_t len = colon ? (size_t)(colon - p) : strlen(p);
        int w = snprintf(path, n, "%.*s%s%s", (int)len, p, len ? "/" : "", name);
        if (w > 0 && (size_t)w < n && is_executable(path))
            return COH_OK;
        p += len + (colon ? 1 : 0);
    }
    return coh_errf(COH_ERR_NOT_FOUND, "program '%s' not found in PATH%s", name,
                    script_hint(name));
}

/* ---- the guard ---- */

static int remove_entry(const char *path, const struct stat *sb, int type, struct FTW *ftw)
{
    (void)sb, (void)type, (void)ftw;
    remove(path);
    return 0;
}

void remove_tree(const char *dir)
{
    if (dir && *dir)
        nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* Wait until the killed process groups are gone, at most 2 s in all (their members turn into
 * zombies that the launcher, now dead, no longer reaps: init does, or, in a container whose
 * init does not reap, no one). */
static void wait_groups_gone(const pid_t *groups, size_t n)
{
    double until = coh_now_s() + 2.0;
    for (size_t i = 0; groups && i < n; i++)
        while (kill(-groups[i], 0) == 0 && coh_now_s() < until)
            nanosleep(&(struct timespec){0, 10000000}, NULL);
}

static void guard_main(int fd, const char *cleanup_dir, const char *launch_key)
{
    /* Terminal signals are for the launcher; the guard only acts when the launcher is gone. */
    signal(SIGINT, SIG_IGN);
    signal(SIGTERM, SIG_IGN);
    signal(SIGHUP, SIG_IGN);
    signal(SIGQUIT, SIG_IGN);
    int devnull = open("/dev/null", O_RDWR);
    if (devnull >= 0) {
        dup2(devnull, 0);
        dup2(devnull, 1);
        dup2(devnull, 2);
    }
    size_t cap = 64, n = 0;
    pid_t *groups = malloc(cap * sizeof *groups);
    for (;;) {
        int32_t v;
        ssize_t r = read(fd, &v, sizeof v);
        if (r < 0 && errno == EINTR)
            continue;
        if (r == (ssize_t)sizeof v && v == 0)
            _exit(0); /* the launcher said goodbye: it reaped its workers itself */
        if (r == (ssize_t)sizeof v && v < 0) { /* a reaped worker's group: forget it */
            for (size_t i = 0; groups && i < n; i++)
                if (groups[i] == (pid_t)-v) {
                    groups[i] = groups[--n];
                    break;
                }
            continue;
        }
        if (r == (ssize_t)sizeof v && v > 0) {
            if (n == cap && groups) {
                pid_t *g = realloc(groups, 2 * cap * sizeof *groups);
                if (g)
                    groups = g, cap *= 2;
            }
            if (groups && n < cap)
                groups[n++] = (pid_t)v;
            continue;
        }
        break; /* EOF: the launcher died without saying goodbye */
    }
    for (size_t i = 0; groups && i < n; i++)
        kill(-groups[i], SIGKILL);
    remove_tree(cleanup_dir); /* the workers' error files: the launcher cannot remove them now */
    wait_groups_gone(groups, n);
    coh_shm_remove_launch(launch_key); /* shared memory that ranks killed before joining left */
    _exit(0);
}

/* Write to the guard's pipe without ever dying of SIGPIPE, whatever the caller's SIGPIPE
 * disposition: a dead guard's pipe answers EPIPE, and the signal that goes with it is taken
 * back before the mask is restored. Returns 0 or -1. */
static int guard_write(int fd, int32_t v)
{
    sigset_t pipe_set, old;
    sigemptyset(&pipe_set);
    sigaddset(&pipe_set, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_set, &old);
    ssize_t w;
    while ((w = write(fd, &v, sizeof v)) < 0 && errno == EINTR)
        ;
    int e = errno;
    if (w < 0 && e == EPIPE && !sigismember(&old, SIGPIPE)) {
        struct timespec zero = {0, 0};
        while (sigtimedwait(&pipe_set, NULL, &zero) < 0 && errno == EINTR)
            ;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    errno = e;
    return w == (ssize_t)sizeof v ? 0 : -1;
}

coh_status guard_start(guard *g, const char *cleanup_dir, const char *launch_key)
{
    int p[2];
    g->pid = -1;
    g->fd = -1;
    if (pipe2(p, O_CLOEXEC) < 0)
        return coh_errf(COH_ERR_SYSTEM, "cannot create the guard's pipe: %s", strerror(errno));
    pid_t pid = fork();
    if (pid < 0) {
        int e = errno;
        close(p[0]);
        close(p[1]);
        return coh_errf(COH_ERR_SYSTEM, "cannot start the guard process: %s", strerror(e));
    }
    if (pid == 0) {
        close(p[1]);
        /* A guard restarted mid-job would otherwise hold the control sockets and pipes of the
         * launcher open past its death. */
        if (p[0] > 3)
            close_range(3, (unsigned)p[0] - 1, 0);
        close_range((unsigned)p[0] + 1, ~0U, 0);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        guard_main(p[0], cleanup_dir, launch_key);
    }
    close(p[0]);
    g->pid = pid;
    g->fd = p[1];
    return COH_OK;
}

void guard_add(guard *g, pid_t pgid)
{
    if (g->fd >= 0)
        guard_write(g->fd, (int32_t)pgid); /* a dead guard is noticed by guard_lost */
}

void guard_drop(guard *g, pid_t pgid)
{
    if (g->fd >= 0 && pgid > 0)
        guard_write(g->fd, -(int32_t)pgid);
}

int guard_lost(guard *g, int *status)
{
    if (g->pid <= 0 || waitpid(g->pid, status, WNOHANG) != g->pid)
        return 0;
    g->pid = -1;
    if (g->fd >= 0)
        close(g->fd);
    g->fd = -1;
    return 1;
}

void guard_stop(guard *g)
{
    if (g->fd >= 0) {
        guard_write(g->fd, 0);
        close(g->fd);
        g->fd = -1;
    }
    if (g->pid > 0) {
        while (waitpid(g->pid, NULL, 0) < 0 && errno == EINTR)
            ;
        g->pid = -1;
    }
}

/* ---- workers ---- */

/* In the child, between fork and exec: only plain system calls. */
static void child_setup(pid_t launcher, int out_fd, int err_fd, const int *cpus, int ncpus,
                        int status_fd)
{
    setpgid(0, 0);
    /* Die with the launcher; if it already died between fork and prctl, our parent is
     * someone else now and nobody would ever send the signal. */
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != launcher)
        _exit(127);
    if (dup2(out_fd, 1) < 0 || dup2(err_fd, 2) < 0)
        _exit(127);
    if (ncpus > 0) {
        cpu_set_t set;
        CPU_ZERO(&set);
        for (int i = 0; i < ncpus; i++)
            CPU_SET(cpus[i], &set);
        if (sched_setaffinity(0, sizeof set, &set) < 0) {
            int e = errno;
            ssize_t w = write(status_fd, &e, sizeof e);
            (void)w;
            _exit(127);
        }
    }
    signal(SIGPIPE, SIG_DFL);
    /* A terminal signal the launcher inherited as ignored (nohup) stays ignored in the worker;
     * the others are reset, so that a handler of the launcher's caller never runs here. */
    static const int terminal[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};
    for (size_t i = 0; i < sizeof terminal / sizeof terminal[0]; i++) {
        struct sigaction cur;
        if (sigaction(terminal[i], NULL, &cur) == 0 && cur.sa_handler != SIG_IGN)
            signal(terminal[i], SIG_DFL);
    }
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
}

coh_status spawn_worker(const char *path, char *const *argv, char **env, int out_fd,
                        int err_fd, const int *cpus, int ncpus, pid_t *out, int *exec_fd)
{
    int st[2];
    *exec_fd = -1;
    if (pipe2(st, O_CLOEXEC) < 0)
        return coh_errf(COH_ERR_SYSTEM, "cannot create a pipe: %s", strerror(errno));
    pid_t launcher = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        int e = errno;
        close(st[0]);
        close(st[1]);
        return coh_errf(COH_ERR_SYSTEM, "cannot fork a worker: %s", strerror(e));
    }
    if (pid == 0) {
        close(st[0]);
        child_setup(launcher, out_fd, err_fd, cpus, ncpus, st[1]);
        execve(path, argv, env);
        int e = errno;
        ssize_t w = write(st[1], &e, sizeof e);
        (void)w;
        _exit(127);
    }
    close(st[1]);
    setpgid(pid, pid); /* also here, so the group exists before we might signal it */
    *out = pid;
    *exec_fd = st[0];
    return COH_OK;
}

coh_status spawn_confirm(const char *path, pid_t *pid, int *exec_fd)
{
    int child_errno = 0;
    ssize_t r;
    while ((r = read(*exec_fd, &child_errno, sizeof child_errno)) < 0 && errno == EINTR)
        ;
    close(*exec_fd);
    *exec_fd = -1;
    if (r != (ssize_t)sizeof child_errno)
        return COH_OK; /* closed by a successful exec */
    while (waitpid(*pid, NULL, 0) < 0 && errno == EINTR)
        ;
    *pid = -1;
    return coh_errf(COH_ERR_SYSTEM, "cannot start '%s': %s", path, strerror(child_errno));
}
