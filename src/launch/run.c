/* run.c: coh_launch_run: check, set up (signals, guard, cpu plan, other nodes), then run
 * attempts until success, a final failure, or an interruption. */
#define _GNU_SOURCE /* accept4, pipe2, sigabbrev_np, sched_setaffinity */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cohort/log.h"
#include "comm/comm_int.h"
#include "launch/agent.h"

static const int handled[] = {SIGCHLD, SIGINT, SIGTERM, SIGHUP, SIGQUIT};

typedef struct saved {
    sigset_t mask;
    struct sigaction pipe, chld;
} saved;

static coh_status signals_take(agent *a, saved *sv)
{
    sigset_t set;
    sigemptyset(&set);
    /* A signal inherited as ignored (nohup's SIGHUP, SIGINT and SIGQUIT of a background job of
     * a non-interactive shell) stays ignored, as the user asked: it is not watched, since Linux
     * queues a blocked signal even when its disposition is SIG_IGN, and the workers inherit it
     * ignored (spawn.c resets only the others). */
    for (size_t i = 0; i < sizeof handled / sizeof handled[0]; i++) {
        struct sigaction cur;
        if (handled[i] != SIGCHLD && sigaction(handled[i], NULL, &cur) == 0 &&
            cur.sa_handler == SIG_IGN)
            continue;
        sigaddset(&set, handled[i]);
    }
    sigprocmask(SIG_BLOCK, &set, &sv->mask);
    struct sigaction ign = {.sa_handler = SIG_IGN};
    sigaction(SIGPIPE, &ign, &sv->pipe); /* a closed console must not kill the launcher */
    /* An ignored SIGCHLD would reap workers behind our back. */
    struct sigaction dfl = {.sa_handler = SIG_DFL};
    sigaction(SIGCHLD, &dfl, &sv->chld);
    a->sigfd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
    if (a->sigfd < 0) {
        sigprocmask(SIG_SETMASK, &sv->mask, NULL);
        sigaction(SIGPIPE, &sv->pipe, NULL);
        sigaction(SIGCHLD, &sv->chld, NULL);
        return coh_errf(COH_ERR_SYSTEM, "cannot watch signals: signalfd failed");
    }
    return COH_OK;
}

static void signals_give_back(agent *a, saved *sv)
{
    close(a->sigfd);
    a->sigfd = -1;
    sigprocmask(SIG_SETMASK, &sv->mask, NULL);
    sigaction(SIGPIPE, &sv->pipe, NULL);
    sigaction(SIGCHLD, &sv->chld, NULL);
}

static void describe_job(agent *a)
{
    const coh_launch_opts *o = a->o;
    char threads[160];
    if (getenv("OMP_NUM_THREADS"))
        snprintf(threads, sizeof threads, "OMP_NUM_THREADS=%s kept from the environment", getenv("OMP_NUM_THREADS"));
    else
        snprintf(threads, sizeof threads, "OMP_NUM_THREADS=%d", a->plan.threads);
    if (getenv("OPENBLAS_NUM_THREADS"))
        snprintf(threads + strlen(threads), sizeof threads - strlen(threads), ", OPENBLAS_NUM_THREADS=%s kept", getenv("OPENBLAS_NUM_THREADS"));
    else
        snprintf(threads + strlen(threads), sizeof threads - strlen(threads), ", OPENBLAS_NUM_THREADS=%d", a->plan.threads);
    coh_info("%s; %s per rank", a->plan.note, threads);
    coh_info("job %s: ranks %d..%d of %d on node %d of %d, master %s:%d%s%s", a->run_id, a->base,
             a->base + a->nproc - 1, a->world, a->node_rank, a->nnodes, o->master_addr,
             a->master_port, o->extra_note ? "; " : "", o->extra_note ? o->extra_note : "");
}

/* Without --log-dir the workers' error files go to a private folder of this launcher. None
 * (a warning) only means that a failure summary shows no error file. */
static void error_dir_make(agent *a)
{
    const char *tmp = getenv("TMPDIR");
    snprintf(a->error_dir, sizeof a->error_dir, "%s/cohort-run-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(a->error_dir)) {
        coh_warn("cannot create a folder for the workers' error files in '%s' (%s): "
                 "TORCHELASTIC_ERROR_FILE is not set", tmp && *tmp ? tmp : "/tmp", strerror(errno));
        a->error_dir[0] = '\0';
    }
}

/* --log-dir with a --run-id whose folder an earlier run left: a fresh folder beside it, named
 * as torchrun names every run's (<run id>_ and 6 random characters), so that no earlier log is
 * overwritten. Decided before the launchers join, while no worker of this run has written. */
static coh_status log_root_choose(agent *a, const char *run_id)
{
    const char *dir = a->o->log_dir;
    int n = snprintf(a->log_root, sizeof a->log_root, "%s/%s", dir, run_id);
    if (n < 0 || (size_t)n + 8 >= sizeof a->log_root)
        return coh_errf(COH_ERR_INVALID, "invalid log directory '%.60s...': path too long", dir);
    struct stat sb;
    if (lstat(a->log_root, &sb) != 0)
        return COH_OK; /* a run id new to this log directory */
    strcat(a->log_root, "_XXXXXX");
    if (!mkdtemp(a->log_root))
        return coh_errf(COH_ERR_IO, "cannot create a log directory for run id '%s' in '%s': %s", run_id, dir, strerror(errno));
    coh_warn("log directory '%s/%s' holds an earlier run of this run id: this run logs to '%s'", dir, run_id, a->log_root);
    return COH_OK;
}

static coh_status setup(agent *a, const coh_launch_opts *o)
{
    a->o = o;
    coh_comm_launch_key((long)getpid(), a->launch_key, sizeof a->launch_key);
    /* A scheduler's or an outer agent's TORCHELASTIC_ERROR_FILE is where the job's report goes;
     * each worker still gets a file of its own (worker_env.c drops this one). */
    const char *report = getenv("TORCHELASTIC_ERROR_FILE");
    if (report && strlen(report) >= sizeof a->report_file)
        coh_warn("TORCHELASTIC_ERROR_FILE '%.60s...' is too long a path: no error report is "
                 "written there", report);
    else if (report)
        snprintf(a->report_file, sizeof a->report_file, "%s", report);
    a->nproc = o->nproc_per_node;
    a->nnodes = o->nnodes;
    a->node_rank = o->node_rank;
    a->master_port = o->master_port;
    a->sigfd = -1;
    a->g.fd = -1;
    a->g.pid = -1;
    a->lfd = -1;
    if (gethostname(a->host, sizeof a->host - 1) != 0)
        snprintf(a->host, sizeof a->host, "localhost");
    coh_status st = find_program(o->argv[0], a->path, sizeof a->path);
    if (st)
        return st;
    /* --master-port 0: a free port that is not --control-port and leaves room for the tcp
     * transport's (master port + 2), as a given one must (options.c) */
    for (int tries = 0; o->master_port == 0 && tries < 16 &&
                        (a->master_port == 0 || a->master_port == o->control_port ||
                         launch_comm_port(a->master_port, o->control_port) == 0);
         tries++)
        if ((st = net_free_port(&a->master_port)))
            return st;
    if (launch_comm_port(a->master_port, o->control_port) == 0 || a->master_port == o->control_port)
        return coh_errf(COH_ERR_SYSTEM, "cannot find a free master port below 65534");
    if (o->ranks_filter) {
        a->show = calloc((size_t)a->nproc, 1);
        if (!a->show)
            return coh_errf(COH_ERR_NOMEM, "out of memory");
        if ((st = coh_launch_parse_ranks(o->ranks_filter, a->nproc, a->show)))
            return st;
    }
    if ((st = cpu_plan_make(o->cpu_bind, a->nproc, &a->plan)))
        return st;
    if (!o->log_dir)
        error_dir_make(a);
    else if (o->run_id && (st = log_root_choose(a, o->run_id)))
        return st;
    a->w = calloc((size_t)a->nproc, sizeof *a->w);
    if (!a->w)
        return coh_errf(COH_ERR_NOMEM, "out of memory");
    return COH_OK;
}

static void teardown(agent *a)
{
    remove_tree(a->error_dir);
    guard_stop(&a->g);
    ctl_close(a);
    cpu_plan_free(&a->plan);
    free(a->w);
    free(a->show);
}

/* Node 0 (or a node that lost it) prints the root cause; another node prints its own worker's
 * failure as the root cause only when node 0's EXIT names this node (at a restart node 0 says
 * nothing of the cause), else node 0's word first and its own failure as a later one: a worker
 * of this node may fail of another node's failure before node 0's STOP arrives. */
static void report(agent *a, int restart, int exit_code)
{
    int master_side = a->npeers == 0 || a->node_rank == 0;
    int mine = a->fail.valid && a->fail.node_rank == a->node_rank && a->fail.rank >= 0;
    int named = restart || a->exit_root_node == a->node_rank;
    if (master_side || a->master_lost || (mine && named)) {
        if (a->fail.valid)
            agent_print_summary(a, restart ? "job failed, restarting it" : "job failed", 1);
    } else if (exit_code != 0) {
        /* the job's exit code; an interrupted launcher's own is 128 + its signal */
        char own[64] = "";
        if (exit_code != a->exit_from_master)
            snprintf(own, sizeof own, "; this launcher exits %d", exit_code);
        fprintf(stderr, "cohort run: job failed on node %d: %s (exit code %d%s)\n",
                a->exit_root_node, a->exit_desc, a->exit_from_master, own);
        if (mine)
            agent_print_summary(a, "a worker of this node failed after that", 0);
        else if (a->interrupted && a->fail.valid && !strstr(a->exit_desc, a->fail.what))
            fprintf(stderr, "  and then:   %s\n", a->fail.what); /* node 0 did not say it */
    }
    if (restart)
        coh_info("restart %d of %d", a->attempt, a->o->max_restarts);
}

static coh_status run_attempts(agent *a, int *exit_code)
{
    for (;;) {
        coh_status st = agent_attempt(a);
        if (st)
            return st;
        int restart = 0;
        if ((st = ctl_after_attempt(a, &restart, exit_code)))
            return st;
        report(a, restart, *exit_code);
        if (!restart && *exit_code != 0)
            agent_write_report(a, NULL);
        if (!restart)
            return COH_OK;
    }
}

/* The launcher failed with st: its error report says so, and the error stays st's. */
static void launcher_failed(agent *a, coh_status st)
{
    char why[1024];
    snprintf(why, sizeof why, "%s", coh_last_error());
    agent_write_report(a, why);
    coh_errf(st, "%s", why);
}

coh_status coh_launch_run(const coh_launch_opts *o, int *exit_code)
{
    *exit_code = 1;
    coh_status st = coh_launch_check(o);
    if (st)
        return st;
    agent a;
    memset(&a, 0, sizeof a);
    saved sv;
    if ((st = setup(&a, o)) || (st = guard_start(&a.g, a.error_dir, a.launch_key)) ||
        (st = signals_take(&a, &sv))) {
        launcher_failed(&a, st);
        teardown(&a);
        return st;
    }
    if ((st = ctl_join(&a)) == COH_OK && a.next_cmd == 2) {
        /* an elastic job that ended while this node waited for its next round: no worker ran
         * here, and this launcher exits with the job's code, as every node does */
        *exit_code = a.exit_from_master;
        report(&a, 0, *exit_code);
        if (*exit_code != 0)
            agent_write_report(&a, NULL);
    } else if (st == COH_OK) {
        if (o->log_dir && !a.log_root[0]) /* a fresh run id: no earlier run used it */
            snprintf(a.log_root, sizeof a.log_root, "%s/%s", o->log_dir, a.run_id);
        describe_job(&a);
        st = run_attempts(&a, exit_code);
    }
    if (st != COH_OK)
        launcher_failed(&a, st);
    if (st != COH_OK && a.interrupted) {
        /* a signal ended a wait outside an attempt (joining the other launchers, or waiting for
         * node 0's word): 128 + it, as for an interrupted job, not a launcher's failure */
        fprintf(stderr, "cohort run: %s\n", coh_last_error());
        *exit_code = 128 + a.interrupted;
        st = COH_OK;
    }
    signals_give_back(&a, &sv);
    teardown(&a);
    return st;
}
