/* agent.c: one attempt of the job: start the local workers, pump their output, reap them,
 * and on the first failure (or a signal, or word from another node) tear the group down:
 * SIGTERM to every process group, SIGKILL after the grace period. */
#define _GNU_SOURCE /* accept4, pipe2, sigabbrev_np, sched_setaffinity */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cohort/clock.h"
#include "cohort/log.h"
#include "comm/comm_int.h"
#include "launch/agent.h"
#include "util/json.h"
#include "util/proc.h"
#include "util/strutil.h"

#define DRAIN_S 0.5 /* after the last worker is reaped, how long strays may hold its pipes */

static double now_real(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static const char *sig_name(int sig, char *buf, size_t n)
{
    const char *abbr = sigabbrev_np(sig);
    if (abbr)
        snprintf(buf, n, "SIG%s", abbr);
    else
        snprintf(buf, n, "signal %d", sig);
    return buf;
}

void agent_stop(agent *a, int sig)
{
    if (!a->stopping) {
        a->stopping = 1;
        a->kill_at = coh_now_s() + a->o->grace_s;
    }
    for (int i = 0; i < a->nproc; i++) {
        worker *w = &a->w[i];
        if (w->pid <= 0)
            continue;
        /* one that had ended (not reaped yet, or its main thread a zombie while its others
         * end) failed, if it did, before this signal */
        if (w->reaped_at == 0 && !coh_pid_dead(w->pid))
            w->stop_sent = 1;
        kill(-w->pid, sig);
    }
    if (sig > 0 && sig < 64) /* one it ends, even before this reached it, did not fail */
        a->stop_sigs |= 1ULL << sig;
    if (sig == SIGKILL)
        a->killed = 1;
}

static void fail_other(agent *a, int exit_code, const char *fmt, va_list ap)
{
    memset(&a->fail, 0, sizeof a->fail);
    a->fail.valid = 1;
    a->fail.rank = -1;
    a->fail.exit_code = exit_code;
    a->fail.when = now_real();
    a->fail_mono = coh_now_s();
    vsnprintf(a->fail.what, sizeof a->fail.what, fmt, ap);
}

void agent_fail_other(agent *a, int exit_code, const char *fmt, ...)
{
    if (a->fail.valid)
        return;
    va_list ap;
    va_start(ap, fmt);
    fail_other(a, exit_code, fmt, ap);
    va_end(ap);
}

int agent_fail_final(agent *a, int exit_code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int first = !a->fail.valid;
    if (first)
        fail_other(a, exit_code, fmt, ap);
    else if (!a->final_why[0]) /* the first such event is the one that ended the job */
        vsnprintf(a->final_why, sizeof a->final_why, fmt, ap);
    va_end(ap);
    return first;
}

static void record_worker_failure(agent *a, worker *w)
{
    failure *f = &a->fail;
    memset(f, 0, sizeof *f);
    f->valid = 1;
    f->restartable = 1;
    f->rank = w->rank;
    f->local_rank = w->local_rank;
    f->node_rank = a->node_rank;
    snprintf(f->host, sizeof f->host, "%s", a->host);
    f->pid = (long)w->pid;
    f->when = now_real();
    a->fail_mono = coh_now_s();
    if (WIFSIGNALED(w->status)) {
        f->sig = WTERMSIG(w->status);
        f->code = -1;
        f->exit_code = 128 + f->sig;
    } else {
        f->code = WEXITSTATUS(w->status);
        f->exit_code = f->code;
    }
}

/* The guard died (it is our child: SIGCHLD woke us): say so, and start a new one that knows
 * every worker group alive now, so that the "no orphans" promise holds again. */
static void watch_guard(agent *a)
{
    int st = 0;
    long old = (long)a->g.pid;
    if (!guard_lost(&a->g, &st))
        return;
    char how[64], name[32];
    if (WIFSIGNALED(st))
        snprintf(how, sizeof how, "(pid %ld) was killed by %s", old, sig_name(WTERMSIG(st), name, sizeof name));
    else
        snprintf(how, sizeof how, "(pid %ld) exited with code %d", old, WEXITSTATUS(st));
    int groups = 0;
    if (guard_start(&a->g, a->error_dir, a->launch_key) != COH_OK) {
        coh_warn("the launcher's guard process %s and could not be started again (%s): workers "
                 "may outlive a SIGKILL of this launcher", how, coh_last_error());
        return;
    }
    for (int i = 0; i < a->nproc; i++)
        if (a->w && a->w[i].pid > 0) {
            guard_add(&a->g, a->w[i].pid);
            groups++;
        }
    coh_warn("the launcher's guard process %s: started a new guard (pid %ld) watching %d worker "
             "process group(s)", how, (long)a->g.pid, groups);
}

#define ERROR_FILE_MAX (16 << 20) /* a larger error file is a runaway writer's, not a report */

/* The text of w's error file when it is a regular file of at most ERROR_FILE_MAX bytes (torchrun
 * too reads only a regular file): a FIFO or a device in its place, which the worker or a stray
 * of its group may have made, must not block the launcher or feed it without end. NULL when
 * there is none. */
static char *error_file_text(const worker *w, size_t *len)
{
    struct stat sb;
    int fd = w->error_file[0] ? open(w->error_file, O_RDONLY | O_NONBLOCK | O_CLOEXEC) : -1;
    if (fd < 0)
        return NULL;
    char *text = NULL;
    if (fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode) && sb.st_size <= ERROR_FILE_MAX)
        text = malloc((size_t)sb.st_size + 1);
    size_t n = 0, cap = text ? (size_t)sb.st_size : 0; /* what it held then, if it grows */
    ssize_t r = 1;
    while (n < cap && r > 0)
        if ((r = read(fd, text + n, cap - n)) > 0)
            n += (size_t)r;
    close(fd);
    if (r < 0) {
        free(text);
        text = NULL;
    }
    *len = n;
    return text;
}

/* When a worker's failure happened, as torchrun's ProcessFailure takes it: the second its error
 * report gives (reported, -1 for none), else when the launcher saw it end (seen). The report's
 * second is taken only when it is earlier than seen's (within seen's second, seen is the finer)
 * and not before the attempt began (a copied or made-up report's). */
static double failure_time(const agent *a, double reported, double seen)
{
    if (reported >= floor(a->started_real) && reported < floor(seen))
        return reported;
    return seen;
}

/* The first lines of the message of w's error file, as PyTorch's @record writes it:
 * {"message": {"message": "...", "extraInfo": {...}}}, or {"message": "..."}, and the failure
 * time it gives. Nothing when the worker wrote none (the stderr tail then says what there is). */
static void read_error_file(const agent *a, const worker *w, failure *f)
{
    json_doc *doc = NULL;
    size_t size = 0;
    char *text = error_file_text(w, &size);
    coh_status st = text ? json_parse(text, size, &doc) : COH_ERR_IO;
    free(text);
    if (st != COH_OK)
        return;
    const json_value *m = json_get(json_root(doc), "message");
    if (m && m->type == JSON_OBJECT)
        m = json_get(m, "message");
    const char *p = m && m->type == JSON_STRING ? m->u.str.chars : "";
    while (*p && f->nerror < LAUNCH_ERROR_LINES) {
        size_t len = strcspn(p, "\n");
        if (len > 0 || p[len] == '\0')
            snprintf(f->error[f->nerror++], LAUNCH_TAIL_WIDTH, "%.*s", (int)len, p);
        p += len + (p[len] == '\n');
    }
    f->when = failure_time(a, error_report_time(json_root(doc)), f->when);
    json_free(doc);
}

/* w failed: record it as the attempt's failure, with its last words, and start the teardown. */
static void fail_worker(agent *a, worker *w)
{
    /* Its last words may still sit in the pipe: read what is there now. */
    for (int k = 0; k < 64 && w->err.fd >= 0; k++) { /* bounded: strays may write on */
        struct pollfd p = {.fd = w->err.fd, .events = POLLIN};
        if (poll(&p, 1, 0) <= 0 || stream_pump(&w->err) != 0)
            break;
    }
    record_worker_failure(a, w);
    a->fail.ntail = stream_tail(&w->err, a->fail.tail, LAUNCH_TAIL_LINES);
    read_error_file(a, w, &a->fail);
    pid_t pg = w->pid;
    w->pid = -1;
    kill(-pg, SIGKILL); /* its own children go with it */
    guard_drop(&a->g, pg);
    agent_stop(a, SIGTERM);
    ctl_local_failure(a);
}

/* A worker other than w that died before w exited with an error code, killed by a signal: the
 * root cause, w's exit its consequence (w found its peer dead). Its main thread is already a
 * zombie while its other threads may still be ending (a large process takes a while): then
 * waitpid cannot see it yet though its peers can, so wait for its end, at most DYING_S. A
 * worker reaped here that ended otherwise is only set aside (w stays the root cause). */
#define DYING_S 2.0
static worker *killed_first(agent *a, const worker *w)
{
    for (int i = 0; i < a->nproc; i++) {
        worker *v = &a->w[i];
        if (v == w || v->pid <= 0 || !coh_pid_dead(v->pid))
            continue;
        int st = 0;
        pid_t got = 0;
        for (double until = coh_now_s() + DYING_S; coh_now_s() < until;) {
            if ((got = waitpid(v->pid, &st, WNOHANG)) != 0)
                break;
            struct timespec ts = {0, 5 * 1000 * 1000};
            nanosleep(&ts, NULL);
        }
        if (got != v->pid)
            continue; /* still ending (or not ours): w stays the root cause */
        v->status = st;
        v->reaped_at = now_real();
        if (WIFSIGNALED(st))
            return v;
        kill(-v->pid, SIGKILL); /* strays left in its group */
        guard_drop(&a->g, v->pid);
        v->pid = -1;
    }
    return NULL;
}

/* Reap worker w if it has exited; the first bad exit starts the teardown. */
static void reap_worker(agent *a, worker *w)
{
    int st;
    if (w->pid <= 0 || waitpid(w->pid, &st, WNOHANG) != w->pid)
        return;
    w->status = st;
    w->reaped_at = now_real();
    int bad = !(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    if (bad && !a->stopping && !a->fail.valid) {
        worker *root = WIFSIGNALED(st) ? NULL : killed_first(a, w);
        fail_worker(a, root ? root : w);
        if (!root)
            return;
    }
    kill(-w->pid, SIGKILL); /* strays left in the group of an exited worker */
    guard_drop(&a->g, w->pid); /* its id may serve an unrelated process once the group is gone */
    w->pid = -1;
}

/* Reap whichever workers have exited, the first to die first: when a worker's death makes
 * another fail before this wakes (a loaded machine), the root cause is still the first. */
static void reap(agent *a)
{
    watch_guard(a);
    for (int i = 0; i < a->nproc && a->first_exit > 0; i++)
        if (a->w[i].pid == (pid_t)a->first_exit)
            reap_worker(a, &a->w[i]);
    a->first_exit = 0;
    for (int i = 0; i < a->nproc; i++)
        reap_worker(a, &a->w[i]);
}

static void on_signal(agent *a)
{
    struct signalfd_siginfo si;
    while (read(a->sigfd, &si, sizeof si) == (ssize_t)sizeof si) {
        int sig = (int)si.ssi_signo;
        if (sig == SIGCHLD) { /* reap() runs after every wakeup */
            if (a->first_exit == 0)
                a->first_exit = (long)si.ssi_pid;
            continue;
        }
        char name[32];
        sig_name(sig, name, sizeof name);
        if (a->interrupts++ > 0) {
            if (sig == a->first_interrupt)
                coh_warn("%s again: killing every worker now", name);
            else {
                char first[32];
                coh_warn("%s after %s: killing every worker now", name,
                         sig_name(a->first_interrupt, first, sizeof first));
            }
            agent_stop(a, SIGKILL);
            continue;
        }
        a->first_interrupt = sig;
        a->interrupted = sig;
        coh_info("%s received: forwarding it to every worker", name);
        /* An interruption is never restarted, not even one during a failed attempt's teardown:
         * the worker failure stays the root cause, and this is why the job ends. */
        char what[200];
        snprintf(what, sizeof what, "the launcher on %.64s (node %d) was interrupted by %s", a->host, a->node_rank, name);
        int first = agent_fail_final(a, 128 + sig, "%s", what);
        agent_stop(a, sig);
        if (first)
            ctl_local_failure(a);
        else
            ctl_local_final(a, 128 + sig, what);
    }
}

static coh_status open_logs(agent *a, int rank, int *out_fd, int *err_fd)
{
    *out_fd = *err_fd = -1;
    if (!a->o->log_dir)
        return COH_OK;
    char dir[4096], file[4200];
    int n = snprintf(dir, sizeof dir, "%s/attempt_%d/%d", a->log_root, a->attempt, rank);
    if (n < 0 || (size_t)n >= sizeof dir)
        return coh_errf(COH_ERR_INVALID, "invalid log directory '%.60s...': path too long", a->log_root);
    coh_status st = make_dirs(dir);
    if (st)
        return st;
    const char *names[2] = {"stdout.log", "stderr.log"};
    int *fds[2] = {out_fd, err_fd};
    for (int k = 0; k < 2; k++) {
        snprintf(file, sizeof file, "%s/%s", dir, names[k]);
        *fds[k] = open(file, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
        if (*fds[k] < 0) {
            int e = errno;
            if (k == 1)
                close(*out_fd);
            *out_fd = -1;
            return coh_errf(COH_ERR_IO, "cannot create log file '%s': %s", file, strerror(e));
        }
    }
    return COH_OK;
}

/* Where w's PyTorch @record writes its error report (TORCHELASTIC_ERROR_FILE): beside its logs
 * with --log-dir, else in the launcher's private folder; a file of its own per rank and attempt,
 * as under torchrun, never one inherited and shared by every rank. */
static coh_status error_file_path(agent *a, worker *w)
{
    char *f = w->error_file;
    size_t cap = sizeof w->error_file;
    int n;
    if (a->o->log_dir)
        n = snprintf(f, cap, "%s/attempt_%d/%d/error.json", a->log_root, a->attempt, w->rank);
    else if (a->error_dir[0])
        n = snprintf(f, cap, "%s/attempt_%d/%d/error.json", a->error_dir, a->attempt, w->rank);
    else
        n = snprintf(f, cap, "%s", "");
    if (n < 0 || (size_t)n >= cap) {
        f[0] = '\0';
        return coh_errf(COH_ERR_INVALID, "invalid log directory '%.60s...': path too long", a->o->log_dir ? a->o->log_dir : a->error_dir);
    }
    if (!f[0])
        return COH_OK;
    char *slash = strrchr(f, '/');
    *slash = '\0';
    coh_status st = make_dirs(f);
    *slash = '/';
    if (st)
        f[0] = '\0';
    else
        unlink(f); /* one left by an earlier run of this run id is not this worker's */
    return st;
}

/* Pipes, log files and the process of one worker. */
/* The columns a worker's stderr lines have on the launcher's terminal after their prefix (the
 * worker's pid, unknown yet, rendered as the launcher's: as many digits, near enough); 0 when
 * the width is unknown, -1 when stderr is not a terminal. */
static int stderr_columns(const agent *a, const worker *w)
{
    struct winsize ws;
    if (!isatty(STDERR_FILENO))
        return -1;
    if (ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) != 0 || ws.ws_col == 0)
        return 0;
    char prefix[256];
    launch_render_prefix(a->o->prefix ? a->o->prefix : "[rank{rank}]: ", prefix, sizeof prefix,
                         w->rank, w->local_rank, a->node_rank,
                         a->o->role ? a->o->role : "default", a->host, (long)getpid(),
                         a->attempt, "stderr");
    int cols = ws.ws_col - (int)strlen(prefix);
    return cols > 1 ? cols : 1;
}

static coh_status start_worker(agent *a, worker *w)
{
    int po[2], pe[2], lo, le;
    coh_status st = error_file_path(a, w);
    if (st || (st = open_logs(a, w->rank, &lo, &le)))
        return st;
    int pipes_ok = pipe2(po, O_CLOEXEC) == 0;
    if (pipes_ok && pipe2(pe, O_CLOEXEC) < 0) {
        close(po[0]);
        close(po[1]);
        pipes_ok = 0;
    }
    if (!pipes_ok) {
        int e = errno;
        if (lo >= 0)
            close(lo);
        if (le >= 0)
            close(le);
        return coh_errf(COH_ERR_SYSTEM, "cannot create a pipe: %s", strerror(e));
    }
    int shown = !(a->o->log_dir && !a->o->tee) && (!a->show || a->show[w->local_rank]);
    if ((st = stream_init(&w->out, po[0], shown ? 1 : 0, lo, "", 0)) ||
        (st = stream_init(&w->err, pe[0], shown ? 2 : 0, le, "", 1)))
        return st;
    worker_ids id = {w->rank, w->local_rank, a->world, a->nproc, a->node_rank, a->nnodes,
                     a->attempt, a->o->max_restarts, a->master_port, agent_comm_port(a),
                     a->comm_key[0] ? a->comm_key : NULL, a->o->master_addr,
                     a->run_id, a->o->role ? a->o->role : "default", (long)getpid(),
                     a->plan.threads, shown ? stderr_columns(a, w) : -1,
                     w->error_file[0] ? w->error_file : NULL};
    int owned = 0;
    char **env = worker_env_build(&id, a->o->extra_env,
                                  a->o->local_rank_env ? a->o->local_rank_env[w->local_rank] : NULL,
                                  &owned);
    if (!env)
        return coh_errf(COH_ERR_NOMEM, "out of memory building the worker environment");
    st = spawn_worker(a->path, a->o->argv, env, po[1], pe[1],
                      a->plan.cpus + (size_t)w->local_rank * (size_t)a->plan.cap,
                      a->plan.ncpus[w->local_rank], &w->pid, &w->exec_fd);
    worker_env_free(env, owned);
    close(po[1]);
    close(pe[1]);
    if (st)
        return st;
    w->started_pid = (long)w->pid;
    guard_add(&a->g, w->pid);
    const char *tmpl = a->o->prefix ? a->o->prefix : "[rank{rank}]: ";
    launch_render_prefix(tmpl, w->out.prefix, sizeof w->out.prefix, w->rank, w->local_rank,
                         a->node_rank, id.role, a->host, (long)w->pid, a->attempt, "stdout");
    launch_render_prefix(tmpl, w->err.prefix, sizeof w->err.prefix, w->rank, w->local_rank,
                         a->node_rank, id.role, a->host, (long)w->pid, a->attempt, "stderr");
    return COH_OK;
}

static int live_workers(const agent *a)
{
    int n = 0;
    for (int i = 0; i < a->nproc; i++)
        n += a->w[i].pid > 0;
    return n;
}

static int open_streams(const agent *a)
{
    int n = 0;
    for (int i = 0; i < a->nproc; i++)
        n += (a->w[i].out.fd >= 0) + (a->w[i].err.fd >= 0);
    return n;
}

/* Milliseconds poll may sleep: until the SIGKILL deadline or the drain deadline. */
static int wait_ms(const agent *a, double drain_until)
{
    double t = 1e9, now = coh_now_s();
    if (a->stopping && !a->killed)
        t = a->kill_at - now;
    if (drain_until > 0 && drain_until - now < t)
        t = drain_until - now;
    if (a->settle_by > 0 && a->settle_by - now < t)
        t = a->settle_by - now;
    double hs = ctl_deadline(a); /* a stranger's handshake deadline (elastic node 0) */
    if (hs > 0 && hs - now < t)
        t = hs - now;
    if (t >= 1e9)
        return -1;
    return t <= 0 ? 0 : (int)(t * 1000) + 1;
}

static void loop_once(agent *a, double drain_until, struct pollfd *p, int **map)
{
    int n = 0;
    p[n++] = (struct pollfd){.fd = a->sigfd, .events = POLLIN};
    for (int i = 0; i < a->nproc; i++) {
        stream *s[2] = {&a->w[i].out, &a->w[i].err};
        for (int k = 0; k < 2; k++)
            if (s[k]->fd >= 0) {
                map[0][n] = i;
                map[1][n] = k;
                p[n++] = (struct pollfd){.fd = s[k]->fd, .events = POLLIN};
            }
    }
    int nctl = ctl_fill(a, p + n);
    int rc = poll(p, (nfds_t)(n + nctl), wait_ms(a, drain_until));
    if (rc < 0 && errno != EINTR)
        coh_warn("poll failed: %s", strerror(errno));
    if (rc > 0) {
        if (p[0].revents)
            on_signal(a);
        for (int j = 1; j < n; j++)
            if (p[j].revents) {
                worker *w = &a->w[map[0][j]];
                stream_pump(map[1][j] ? &w->err : &w->out);
            }
        ctl_handle(a, p + n, nctl);
    } else if (rc == 0) {
        ctl_handle(a, p + n, nctl); /* a handshake deadline passed (elastic node 0) */
    }
    reap(a);
    if (a->remote_stop && !a->stopping)
        agent_stop(a, SIGTERM);
    if (a->stopping && !a->killed && coh_now_s() >= a->kill_at && live_workers(a) > 0) {
        coh_warn("grace period of %g s over: killing the remaining workers", a->o->grace_s);
        agent_stop(a, SIGKILL);
    }
}

static void free_workers(agent *a)
{
    for (int i = 0; i < a->nproc; i++) {
        stream_free(&a->w[i].out);
        stream_free(&a->w[i].err);
    }
}

int agent_comm_port(const agent *a)
{
    return launch_comm_port(a->master_port, a->o->control_port);
}

/* Ranks killed while they waited for the others to join shared memory (the teardown after one
 * failed early) leave the segment under the job's name: with every rank of this node down, the
 * segments of this launch are garbage. */
static void remove_left_segments(const agent *a)
{
    int n = coh_shm_remove_launch(a->launch_key);
    if (n > 0)
        coh_info("removed %d shared-memory segment(s) that this node's stopped ranks left", n);
}

coh_status agent_attempt(agent *a)
{
    a->stopping = a->killed = a->remote_stop = a->end_sent = 0;
    a->settle_by = 0;
    a->interrupts = a->interrupted = 0;
    a->first_exit = 0; /* a SIGCHLD read at the last attempt's end names none of this one's */
    a->final_why[0] = '\0';
    a->stop_sigs = 0;
    a->started_real = now_real();
    memset(&a->fail, 0, sizeof a->fail);
    a->down_mono = 0;
    for (int i = 0; i < a->nproc; i++) {
        worker *w = &a->w[i];
        memset(w, 0, sizeof *w);
        w->local_rank = i;
        w->rank = a->base + i;
        w->pid = -1;
        w->out.fd = w->err.fd = w->out.log_fd = w->err.log_fd = w->exec_fd = -1;
    }
    char why[512] = "";
    coh_status st = auth_comm_key(a);
    for (int i = 0; i < a->nproc && st == COH_OK; i++)
        if ((st = start_worker(a, &a->w[i])))
            snprintf(why, sizeof why, "rank %d: %s", a->w[i].rank, coh_last_error());
    for (int i = 0; i < a->nproc; i++) {
        worker *w = &a->w[i];
        coh_status cs = w->exec_fd >= 0 ? spawn_confirm(a->path, &w->pid, &w->exec_fd) : COH_OK;
        if (cs != COH_OK) /* reaped: it never ran the program, its group is gone */
            guard_drop(&a->g, (pid_t)w->started_pid);
        if (cs != COH_OK && st == COH_OK) {
            st = cs;
            snprintf(why, sizeof why, "rank %d: %s", w->rank, coh_last_error());
        }
    }
    if (st != COH_OK) { /* 126: found but not executable, as shells report it */
        agent_fail_other(a, 126, "a worker could not be started on host %s: %s", a->host, why);
        agent_stop(a, SIGKILL);
        ctl_local_failure(a);
    }
    size_t cap = 1 + 2 * (size_t)a->nproc + (size_t)a->npeers + 2 + 1 + CTL_PENDING_MAX;
    struct pollfd *p = calloc(cap, sizeof *p);
    int *m0 = calloc(cap, sizeof *m0), *m1 = calloc(cap, sizeof *m1), *map[2] = {m0, m1};
    if (!p || !m0 || !m1) {
        free(p), free(m0), free(m1);
        agent_stop(a, SIGKILL);
        return coh_errf(COH_ERR_NOMEM, "out of memory in the launcher loop");
    }
    double drain_until = 0;
    for (;;) {
        int live = live_workers(a);
        if (live == 0 && drain_until == 0) {
            a->down_mono = coh_now_s();
            drain_until = a->down_mono + DRAIN_S;
        }
        int local_done = live == 0 && (open_streams(a) == 0 || coh_now_s() >= drain_until);
        /* A signal that came as the last worker ended (one that worker sent its launcher, say)
         * is taken before this node reports its workers down: node 0 must hear of it before it
         * decides a restart. */
        if (local_done)
            on_signal(a);
        if (local_done && ctl_settled(a, 1))
            break;
        loop_once(a, local_done ? 0 : drain_until, p, map);
    }
    free(p), free(m0), free(m1);
    free_workers(a);
    remove_left_segments(a);
    return COH_OK;
}

static void fmt_time(double t, char *buf, size_t n)
{
    time_t s = (time_t)t;
    struct tm tm;
    gmtime_r(&s, &tm);
    char b[32];
    strftime(b, sizeof b, "%Y-%m-%d %H:%M:%S", &tm);
    snprintf(buf, n, "%s.%03d UTC", b, (int)((t - (double)s) * 1000));
}

/* w, a worker of this node, failed of itself: it ended badly before the teardown signalled it
 * (torchrun too lists only the workers that had failed when it stopped the rest). Not one that
 * a signal of the teardown ended (a SIGTERM forwarded from outside may reach it first), nor one
 * that exited badly once signalled (a handler's exit code). */
static int failed_itself(const agent *a, const worker *w)
{
    int st = w->status;
    if (w->reaped_at == 0 || (WIFEXITED(st) && WEXITSTATUS(st) == 0) || w->stop_sent)
        return 0;
    return !(WIFSIGNALED(st) && WTERMSIG(st) < 64 && (a->stop_sigs >> WTERMSIG(st) & 1));
}

/* w's failure is the one the summary names first (the root cause, or this node's later one). */
static int is_named_failure(const agent *a, const worker *w)
{
    const failure *f = &a->fail;
    return f->valid && f->rank == w->rank && f->node_rank == a->node_rank;
}

/* When w's failure happened: the second its error report gives, else when it was reaped. */
static double worker_failure_time(const agent *a, const worker *w)
{
    size_t size = 0;
    json_doc *doc = NULL;
    char *text = error_file_text(w, &size);
    double reported = text && json_parse(text, size, &doc) == COH_OK ? error_report_time(json_root(doc)) : -1;
    json_free(doc);
    free(text);
    return failure_time(a, reported, w->reaped_at);
}

#define OTHER_FAILURES_SHOWN 8 /* other failed workers listed in the summary; the rest counted */

/* The local workers that failed of themselves besides the one named, as torchrun's "Other
 * Failures": the first OTHER_FAILURES_SHOWN by rank, then how many more. */
static void add_other_failures(const agent *a, char *out, size_t cap, size_t *o)
{
    int n = 0, shown = 0;
    for (int i = 0; i < a->nproc; i++)
        n += failed_itself(a, &a->w[i]) && !is_named_failure(a, &a->w[i]);
    if (n > 0)
        coh_str_append(out, cap, o, "  other failures on host %s (%d):\n", a->host, n);
    for (int i = 0; i < a->nproc && shown < OTHER_FAILURES_SHOWN; i++) {
        const worker *w = &a->w[i];
        if (!failed_itself(a, w) || is_named_failure(a, w))
            continue;
        char how[64], when[64], sig[32];
        if (WIFSIGNALED(w->status))
            snprintf(how, sizeof how, "killed by %s", sig_name(WTERMSIG(w->status), sig, sizeof sig));
        else
            snprintf(how, sizeof how, "exit code %d", WEXITSTATUS(w->status));
        fmt_time(worker_failure_time(a, w), when, sizeof when);
        coh_str_append(out, cap, o, "    rank %d (local rank %d, pid %ld): %s at %s\n", w->rank,
                       w->local_rank, w->started_pid, how, when);
        shown++;
    }
    if (n > shown)
        coh_str_append(out, cap, o, "    and %d more\n", n - shown);
}

void agent_print_summary(const agent *a, const char *head, int root_cause)
{
    const failure *f = &a->fail;
    char out[8192], when[64], sig[32];
    size_t o = 0;
#define ADD(...) coh_str_append(out, sizeof out, &o, __VA_ARGS__)
    fmt_time(f->when, when, sizeof when);
    if (f->rank < 0) {
        ADD("cohort run: %s: %s (exit code %d)\n", head, f->what, f->exit_code);
    } else {
        if (f->sig > 0)
            ADD("cohort run: %s: rank %d was killed by %s (exit code %d)\n", head, f->rank, sig_name(f->sig, sig, sizeof sig), f->exit_code);
        else
            ADD("cohort run: %s: rank %d exited with code %d\n", head, f->rank, f->code);
        ADD("  %s rank %d (local rank %d, node %d) on host %s, pid %ld\n",
            root_cause ? "root cause:" : "failure:   ", f->rank, f->local_rank, f->node_rank,
            f->host, f->pid);
        if (f->sig > 0)
            ADD("  signal:     %s (%d)\n", sig, f->sig);
        else
            ADD("  exit code:  %d\n", f->code);
        ADD("  time:       %s\n", when);
        if (f->nerror > 0)
            ADD("  error file of rank %d (TORCHELASTIC_ERROR_FILE):\n", f->rank);
        for (int i = 0; i < f->nerror; i++)
            ADD("    | %s\n", f->error[i]);
        if (f->ntail == 0)
            ADD("  stderr:     (nothing)\n");
        else
            ADD("  last %d stderr line(s) of rank %d:\n", f->ntail, f->rank);
        for (int i = 0; i < f->ntail && o < sizeof out - 300; i++)
            ADD("    | %s\n", f->tail[i]);
    }
    add_other_failures(a, out, sizeof out, &o);
    if (a->down_mono > 0 && a->fail_mono > 0)
        ADD("  teardown:   local workers down %.3f s after the failure (grace %g s)\n", a->down_mono - a->fail_mono, a->o->grace_s);
    if (a->final_why[0] && a->interrupted) /* its exit code is not the root cause's */
        ADD("  ended by:   %s (the job is not restarted; this launcher exits %d)\n", a->final_why, 128 + a->interrupted);
    else if (a->final_why[0])
        ADD("  ended by:   %s (the job is not restarted)\n", a->final_why);
#undef ADD
    ssize_t w = write(2, out, o);
    (void)w;
}

/* The job failed: the report that the TORCHELASTIC_ERROR_FILE cohort run was given asks for, as
 * torchrun's @record writes it. When a worker of this node failed, the report of the first one
 * (the root cause, else this node's earliest), rewritten with its errorCode: the exit code, or
 * minus the signal number (torchrun's exitcode); nothing when that worker wrote no report, as
 * torchrun writes nothing then. Otherwise the launcher's own: what ended the job (an
 * interruption, a lost launcher, a worker that could not start, another node's failure), or
 * launcher_error when that is not NULL (the launcher failed before or between attempts). */
void agent_write_report(const agent *a, const char *launcher_error)
{
    if (!a->report_file[0])
        return;
    const failure *f = &a->fail;
    const worker *first = NULL;
    for (int i = 0; i < a->nproc && a->w && !launcher_error; i++) {
        const worker *w = &a->w[i];
        if (is_named_failure(a, w)) {
            first = w;
            break;
        }
        if (failed_itself(a, w) && (!first || w->reaped_at < first->reaped_at))
            first = w;
    }
    char *text = NULL, what[400];
    size_t len = 0;
    if (first) {
        int st = first->status;
        int code = WIFSIGNALED(st) ? -WTERMSIG(st) : WEXITSTATUS(st);
        size_t size = 0;
        char *child = error_file_text(first, &size);
        if (!child) /* what torchrun's @record does: it has nothing to pass on */
            return;
        text = error_report_rewrite(child, size, code, &len);
        free(child);
        if (!text) {
            coh_warn("rank %d's error file '%s' is not a JSON object: nothing written to '%s'",
                     first->rank, first->error_file, a->report_file);
            return;
        }
    } else {
        char sig[32];
        if (launcher_error)
            snprintf(what, sizeof what, "%s", launcher_error);
        else if (!f->valid)
            snprintf(what, sizeof what, "job failed on node %d: %s", a->exit_root_node,
                     a->exit_desc);
        else if (f->rank < 0)
            snprintf(what, sizeof what, "%s", f->what);
        else if (f->sig > 0)
            snprintf(what, sizeof what, "rank %d (node %d, host %s, pid %ld) was killed by %s",
                     f->rank, f->node_rank, f->host, f->pid, sig_name(f->sig, sig, sizeof sig));
        else
            snprintf(what, sizeof what, "rank %d (node %d, host %s, pid %ld) exited with code %d",
                     f->rank, f->node_rank, f->host, f->pid, f->code);
        text = error_report_own(what, f->valid && !launcher_error ? f->when : now_real(), &len);
    }
    if (!text || error_report_write(a->report_file, text, len) != COH_OK)
        coh_warn("cannot write the job's error report to TORCHELASTIC_ERROR_FILE '%s': %s",
                 a->report_file, text ? coh_last_error() : "out of memory");
    free(text);
}
