/* launch_int.h: the launcher's internals shared between the files of src/launch. */
#ifndef COHORT_LAUNCH_INT_H
#define COHORT_LAUNCH_INT_H

#include <stddef.h>
#include <sys/types.h>

#include "cohort/launch.h"

#define LAUNCH_TAIL_LINES 8   /* stderr lines kept per worker for the failure summary */
#define LAUNCH_TAIL_WIDTH 240 /* characters kept per such line */
#define LAUNCH_LINE_MAX 65536 /* a longer line is cut into pieces, each prefixed */
#define LAUNCH_ERROR_LINES 4  /* lines of a worker's error file shown in the failure summary */

/* ---- small parsers (options.c) ---- */

/* Render a prefix template (already checked). */
void launch_render_prefix(const char *tmpl, char *buf, size_t n, int rank, int local_rank,
                          int node_rank, const char *role, const char *host, long pid,
                          int attempt, const char *stream_name);
/* Parse a Linux cpulist ("0-3,8,10-11") into cpus[] (at most cap entries); returns the count
 * or -1 when malformed. */
int launch_parse_cpulist(const char *s, int *cpus, int cap);
/* The tcp transport's port (COHORT_COMM_PORT): master port + 2, + 3 when + 2 is the control
 * port (control_port -1: the default, master port + 1); 0 when it would pass 65535. */
int launch_comm_port(int master_port, int control_port);
/* A fresh job id: "cohort-" and 16 hex digits of randomness. */
void launch_new_run_id(char *buf, size_t n);

/* ---- networking (net.c) ---- */

/* A free TCP port on this machine (bind to port 0, read it, close). */
coh_status net_free_port(int *port);
/* COH_ERR_BUSY when something already listens on the port. */
coh_status net_check_port(int port, const char *what);
/* Listening socket (CLOEXEC) on host's address when it is one of this machine's, else on
 * every interface (host not local: a name for node 0 that only the others resolve). */
coh_status net_listen(const char *host, int port, int *fd);
/* "address:port" of the other end of a connected socket. */
void net_peer_name(int fd, char *buf, size_t n);
/* Connect to host:port, retrying until the deadline (monotonic seconds); no connect outlives
 * it. A signal other than SIGCHLD on sigfd (-1: none watched) ends the wait: COH_ERR_SYSTEM
 * naming it, *sig its number (else 0). */
coh_status net_connect_retry(const char *host, int port, double deadline, int sigfd, int *sig, int *fd);
/* Keepalive and TCP_USER_TIMEOUT so that a silent other end ends the connection (ETIMEDOUT)
 * within timeout_s + 1 s (net.c says how). */
coh_status net_keepalive(int fd, double timeout_s);
/* Send one whole line (adds nothing; s must end in '\n'). 0 or -1. */
int net_send_line(int fd, const char *s);

/* ---- cpu binding and the worker environment (worker_env.c) ---- */

typedef struct cpu_plan {
    int nranks;
    int *cpus;    /* (nranks, per_rank_cap) cpu ids per rank */
    int *ncpus;   /* (nranks) count per rank; 0 = no affinity */
    int cap;
    int threads;  /* OMP/OpenBLAS threads per rank */
    char note[512];
} cpu_plan;

coh_status cpu_plan_make(coh_cpu_bind mode, int nranks, cpu_plan *p);
void cpu_plan_free(cpu_plan *p);

/* What one worker needs to know (values for the env contract). */
typedef struct worker_ids {
    int rank, local_rank, world, local_world, node_rank, nnodes, attempt, max_restarts;
    int master_port;
    int comm_port;        /* where the tcp transport's rank 0 listens (COHORT_COMM_PORT) */
    const char *comm_key; /* the attempt's key of data connections, hex (COHORT_COMM_KEY) */
    const char *master_addr, *run_id, *role;
    long launcher_pid;
    int threads; /* 0: leave OMP/OpenBLAS alone */
    int stderr_cols; /* the worker's stderr is shown on the launcher's terminal: the columns
                        left after its prefix (0: width unknown); -1 when it is not */
    const char *error_file; /* TORCHELASTIC_ERROR_FILE, this worker's own; NULL: none */
} worker_ids;

/* NULL-terminated environment for one worker: the launcher's own, minus what cohort sets,
 * plus the contract and the extra settings; the first *owned strings are owned. */
char **worker_env_build(const worker_ids *id, char *const *extra, char *const *local_extra,
                        int *owned);
void worker_env_free(char **env, int owned);

/* ---- processes (spawn.c) ---- */

/* The guard: a helper process that SIGKILLs every worker process group if the launcher dies
 * without saying goodbye (SIGKILL of the launcher), so even grandchildren never outlive it. It
 * knows only the groups of workers not reaped yet (guard_add, guard_drop). */
typedef struct guard {
    pid_t pid;
    int fd;
} guard;
/* cleanup_dir: a folder of the launcher's ("" for none) the guard removes, with what is in it,
 * when the launcher dies without saying goodbye, and the shared memory its ranks of launch_key
 * (coh_comm_launch_key) left. */
coh_status guard_start(guard *g, const char *cleanup_dir, const char *launch_key);
void guard_add(guard *g, pid_t pgid);
/* pgid's worker was reaped and its group killed: the guard forgets it, since once the group is
 * gone the system may give that id to an unrelated process, which the guard must never kill. */
void guard_drop(guard *g, pid_t pgid);
/* 1 (and the guard reaped, *status its wait status) when the guard has died; else 0. */
int guard_lost(guard *g, int *status);
void guard_stop(guard *g); /* goodbye; reaps the guard */

/* Fork one worker in its own process group, stdout/stderr to the given pipe ends, dying with
 * the launcher; it execs on its own. *exec_fd then reports the exec: spawn_confirm reads it
 * (after all workers are forked, so that they start in parallel). */
coh_status spawn_worker(const char *path, char *const *argv, char **env, int out_fd,
                        int err_fd, const int *cpus, int ncpus, pid_t *pid, int *exec_fd);
/* Wait until the worker has exec'd; on exec failure reap it (*pid = -1) and fail. */
coh_status spawn_confirm(const char *path, pid_t *pid, int *exec_fd);

/* rm -r: dir and everything in it, symbolic links not followed; "" or NULL: nothing. */
void remove_tree(const char *dir);
/* Resolve a program name through PATH like execvp. COH_ERR_NOT_FOUND when absent. */
coh_status find_program(const char *name, char *path, size_t n);

/* ---- output (output.c) ---- */

typedef struct stream {
    int fd;       /* read end of the worker's pipe; -1 at EOF */
    int console;  /* 1: stdout, 2: stderr, 0: not shown */
    int log_fd;   /* -1 without --log-dir */
    char *buf;    /* partial line (LAUNCH_LINE_MAX) */
    size_t len;
    char prefix[256];
    /* stderr only: ring of the last lines for the failure summary */
    char (*tail)[LAUNCH_TAIL_WIDTH];
    int tail_next, tail_count;
} stream;

coh_status stream_init(stream *s, int fd, int console, int log_fd, const char *prefix,
                       int keep_tail);
/* Read what is available; returns 0 while open, 1 at EOF (fd closed), -1 on error. */
int stream_pump(stream *s);
/* Flush a final partial line and close everything. */
void stream_close(stream *s);
void stream_free(stream *s);
/* Copy the tail lines in order into out (count returned). */
int stream_tail(const stream *s, char (*out)[LAUNCH_TAIL_WIDTH], int cap);
/* mkdir -p. */
coh_status make_dirs(const char *path);

#endif
