/* agent.h: the launcher's supervising agent: one worker group per attempt, its event loop,
 * teardown, and the control link between the launchers of a multi-node job. */
#ifndef COHORT_LAUNCH_AGENT_H
#define COHORT_LAUNCH_AGENT_H

#include <limits.h>
#include <poll.h>
#include <sys/types.h>

#include "launch/launch_int.h"

typedef struct worker {
    int local_rank, rank;
    pid_t pid;  /* -1 once reaped */
    int status; /* wait status, valid once reaped */
    int exec_fd; /* until the exec is confirmed */
    stream out, err;
} worker;

/* Why an attempt failed: a worker (exit code or signal) or something else (what[]). */
typedef struct failure {
    int valid;
    int rank, local_rank, node_rank;
    char host[256];
    long pid;
    int code, sig;   /* exit code, or signal number (code then -1) */
    double when;     /* wall clock, seconds since the epoch */
    char what[200];  /* non-worker causes: "interrupted by SIGINT", "node 1's launcher lost" */
    int exit_code;   /* what the launcher exits with */
    int restartable; /* a worker failure (restarts apply); not interruptions */
    char tail[LAUNCH_TAIL_LINES][LAUNCH_TAIL_WIDTH];
    int ntail;
} failure;

/* A peer launcher as seen by node 0 (or node 0 as seen by the others). */
typedef struct peer {
    int fd;
    int node_rank, nproc;
    char host[128];
    char buf[4096];
    size_t len;
    int ended; /* sent END for the current attempt */
    char tail[LAUNCH_TAIL_LINES][LAUNCH_TAIL_WIDTH];
    int ntail;
} peer;

typedef struct agent {
    const coh_launch_opts *o;
    char path[PATH_MAX];
    char host[256];
    char run_id[128];
    int nproc, world, base, nnodes, node_rank, master_port, attempt;
    unsigned char *show; /* console filter by local rank */
    cpu_plan plan;
    worker *w;
    int sigfd;
    guard g;
    /* the current attempt */
    int stopping, killed;
    double kill_at, fail_mono, down_mono;
    double settle_by; /* node 0 after a failure: when silent nodes count as lost */
    int interrupts;
    failure fail;
    /* multi-node control: node 0 has nnodes-1 peers, the others one (node 0) */
    peer *peers;
    int npeers;
    int remote_stop;   /* node 0 told us to stop (others) */
    int next_cmd;      /* others: 0 none yet, 1 START, 2 EXIT */
    int exit_from_master, exit_root_node;
    int end_sent;    /* others: END sent for this attempt */
    int master_lost; /* others: node 0's launcher went away */
    char exit_desc[300];
} agent;

/* agent.c */
coh_status agent_attempt(agent *a);         /* run one attempt to its end */
void agent_stop(agent *a, int sig);         /* begin teardown with this signal */
void agent_fail_other(agent *a, int exit_code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void agent_print_summary(const agent *a, const char *head);

/* control.c */
coh_status ctl_join(agent *a);               /* connect all launchers; agree on ids */
int ctl_fill(agent *a, struct pollfd *p);    /* add control fds; returns how many */
void ctl_handle(agent *a, struct pollfd *p, int n);
void ctl_local_failure(agent *a);            /* tell the others a local failure happened */
int ctl_settled(agent *a, int local_done);   /* may the attempt end now? */
/* After an attempt: restart (a->attempt is then the next attempt) or the job's exit code. */
coh_status ctl_after_attempt(agent *a, int *restart, int *exit_code);
void ctl_close(agent *a);

#endif
