/* comm_spawn.c: a minimal stand-in for `cohort run` on one node: forks N copies of a command
 * with the launcher's worker environment, reaps them as they exit, and exits non-zero when
 * any rank failed or the time limit passed.
 * usage: comm_spawn [--job ID] [--limit SECONDS] N command [args...] */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void setenv_int(const char *name, long v)
{
    char buf[32];
    snprintf(buf, sizeof buf, "%ld", v);
    setenv(name, buf, 1);
}

static void worker_env(int rank, int n, const char *job)
{
    setenv_int("RANK", rank);
    setenv_int("WORLD_SIZE", n);
    setenv_int("LOCAL_RANK", rank);
    setenv_int("LOCAL_WORLD_SIZE", n);
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    setenv("MASTER_PORT", "29500", 1);
    setenv("COHORT_JOB_ID", job, 1);
    setenv("COHORT_RESTART_COUNT", "0", 1);
    setenv_int("COHORT_RANK", rank);
    setenv_int("COHORT_WORLD_SIZE", n);
    setenv_int("COHORT_LOCAL_RANK", rank);
    setenv_int("COHORT_LOCAL_WORLD_SIZE", n);
    setenv("COHORT_NODE_RANK", "0", 1);
    setenv("COHORT_NNODES", "1", 1);
    setenv_int("COHORT_LAUNCHER_PID", (long)getppid());
}

int main(int argc, char **argv)
{
    char job[64];
    snprintf(job, sizeof job, "spawn%ld-%ld", (long)getpid(), (long)time(NULL));
    double limit = 120;
    int i = 1;
    for (; i + 1 < argc && argv[i][0] == '-'; i += 2) {
        if (!strcmp(argv[i], "--job"))
            snprintf(job, sizeof job, "%s", argv[i + 1]);
        else if (!strcmp(argv[i], "--limit"))
            limit = atof(argv[i + 1]);
        else
            break;
    }
    int n = i < argc ? atoi(argv[i]) : 0;
    if (n < 1 || i + 1 >= argc) {
        fprintf(stderr, "usage: comm_spawn [--job ID] [--limit SECONDS] N command [args...]\n");
        return 2;
    }
    char **cmd = argv + i + 1;
    pid_t *pids = calloc((size_t)n, sizeof *pids);
    for (int r = 0; r < n; r++) {
        pids[r] = fork();
        if (pids[r] == 0) {
            worker_env(r, n, job);
            execvp(cmd[0], cmd);
            fprintf(stderr, "comm_spawn: cannot run '%s': %s\n", cmd[0], strerror(errno));
            _exit(127);
        }
    }
    int failed = 0, left = n;
    struct timespec t0, now;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    while (left > 0) {
        int status;
        pid_t p = waitpid(-1, &status, WNOHANG);
        if (p > 0) {
            left--;
            if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
                for (int r = 0; r < n; r++)
                    if (pids[r] == p)
                        fprintf(stderr, "comm_spawn: rank %d %s %d\n", r,
                                WIFEXITED(status) ? "exited with" : "killed by signal",
                                WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
                failed = 1;
            }
            continue;
        }
        clock_gettime(CLOCK_MONOTONIC, &now);
        if ((double)(now.tv_sec - t0.tv_sec) > limit) {
            fprintf(stderr, "comm_spawn: time limit %g s passed: killing the ranks\n", limit);
            for (int r = 0; r < n; r++)
                kill(pids[r], SIGKILL);
            limit = 1e9;
            failed = 1;
        }
        nanosleep(&(struct timespec){0, 2000000}, NULL);
    }
    free(pids);
    return failed;
}
