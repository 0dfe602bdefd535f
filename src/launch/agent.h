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
    char error_file[PATH_MAX]; /* its TORCHELASTIC_ERROR_FILE; "" when none */
    long started_pid; /* its pid, kept once reaped */
    double reaped_at; /* wall clock when it was reaped (status valid); 0 before */
    int stop_sent;    /* the teardown signalled it while it ran: however it ends, not a
                         failure of its own */
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
    /* the first lines of the message in the worker's error file (PyTorch's @record), if any */
    char error[LAUNCH_ERROR_LINES][LAUNCH_TAIL_WIDTH];
    int nerror;
} failure;

/* The job secret: the HMAC key every launcher of the job must prove it knows (empty when none
 * was given: anyone can compute that one, and a warning says so). */
typedef struct ctl_key {
    unsigned char k[4096];
    size_t len;
    int given;
} ctl_key;

#define CTL_NONCE_HEX 32 /* 128-bit nonces, in hex */
#define CTL_MAC_HEX 64   /* HMAC-SHA256, in hex */

/* A peer launcher as seen by node 0 (or node 0 as seen by the others). */
typedef struct peer {
    int fd;
    int node_rank, nproc;
    char host[128];
    char addr[64];           /* its address:port, for the log */
    unsigned char skey[32];  /* session key of this connection (from both nonces) */
    unsigned long send_seq, recv_seq; /* per direction: each line's MAC covers its number */
    char buf[4096];
    size_t len;
    int ended; /* sent END for the current attempt */
    int lost_errno; /* why the connection ended (ETIMEDOUT: the other end stopped answering) */
    int send_lost;  /* a send to it failed and closed it: lost, not taken as such yet (a closed
                       connection is no longer polled, so ctl_handle takes it) */
    int active; /* node 0: in the current round (elastic: a node that joined during a round
                   waits, 0, until the next restart) */
    char tail[LAUNCH_TAIL_LINES][LAUNCH_TAIL_WIDTH];
    int ntail;
    /* node 0: the first lines of the error report of the node's failed worker (REPORT lines) */
    char error[LAUNCH_ERROR_LINES][LAUNCH_TAIL_WIDTH];
    int nerror;
} peer;

#define CTL_PENDING_MAX 64    /* connections in their handshake at once; more are closed */
#define CTL_HANDSHAKE_LINE 512 /* a longer line before the handshake is not a launcher's */

/* Node 0: a connection to its control port that has not proven the job secret yet. */
typedef struct pending {
    int fd;
    char addr[64];
    char nonce[CTL_NONCE_HEX + 1];
    char buf[CTL_HANDSHAKE_LINE];
    size_t len;
    double deadline;
} pending;

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
    /* without --log-dir: the launcher's private folder of the workers' error files (removed at
     * exit); "" with --log-dir (they go beside the logs) or when it could not be made */
    char launch_key[96]; /* what the shared memory of this launch's ranks records (coh_comm_launch_key) */
    char error_dir[PATH_MAX];
    /* with --log-dir: this run's folder, <log dir>/<run id> (or, when an earlier run of that run
     * id left one, a fresh <log dir>/<run id>_XXXXXX) */
    char log_root[PATH_MAX];
    /* the current attempt */
    int stopping, killed;
    unsigned long long stop_sigs; /* the signals the teardown sent the workers (bit per number) */
    double started_real; /* wall clock at the attempt's start */
    double kill_at, fail_mono, down_mono;
    double settle_by; /* node 0 after a failure: when silent nodes count as lost */
    int interrupts;
    int first_interrupt; /* the signal of the first interruption, for the second's warning */
    int interrupted;     /* the signal that interrupted this launcher in this attempt, 0 none: it
                            then exits 128 + that signal, whatever the job's root cause */
    /* What ends the job although it came after the attempt's root cause (an interruption of this
     * launcher or another node's, a lost node of a static job): the job is not restarted, the
     * root cause stays the one named, and the summary says this too; "" when nothing did. */
    char final_why[200];
    /* the child of the first SIGCHLD since the last reap (SIGCHLDs pending together are one,
     * with the first one's sender): reaped first, so that the root cause is the first to die */
    long first_exit;
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
    char cmd_line[512]; /* others: node 0's START or EXIT, kept for ctl_after_attempt */
    ctl_key key;
    char comm_key[CTL_MAC_HEX + 1]; /* this attempt's key of the tcp transport (auth_comm_key) */
    int elastic;        /* --nnodes MIN:MAX */
    int lfd;            /* node 0, elastic: the control port stays open for late nodes */
    pending *pend;      /* node 0, elastic: connections in their handshake during a round */
    int npend;
    int refused;        /* node 0: connections that failed to prove the job secret */
    char refused_desc[160];
    double ctl_timeout_s; /* COHORT_CONTROL_TIMEOUT: a launcher silent this long is lost */
    /* the TORCHELASTIC_ERROR_FILE cohort run itself was given (a scheduler's or an outer
     * agent's): where the job's error report goes when it fails; "" when none */
    char report_file[PATH_MAX];
} agent;

/* The tcp transport's port: MASTER_PORT + 2 (+1 is the control channel's), never the control
 * port itself. */
int agent_comm_port(const agent *a);
/* This attempt's key of the workers' data connections: HMAC of the job secret over the run id
 * and attempt; with no secret a random one when this launcher starts every rank (one node),
 * else the HMAC under the empty key (anyone can compute it: trusted networks, as the control
 * channel). */
coh_status auth_comm_key(agent *a);

/* agent.c */
coh_status agent_attempt(agent *a);         /* run one attempt to its end */
void agent_stop(agent *a, int sig);         /* begin teardown with this signal */
void agent_fail_other(agent *a, int exit_code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Something that ends the job whatever came before it (an interruption, a lost node of a static
 * job): the attempt's failure when it has none yet (1 returned; not restartable), else the
 * attempt keeps its root cause and this is why the job ends without a restart (a->final_why; 0
 * returned). */
int agent_fail_final(agent *a, int exit_code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The failure's summary on stderr; root_cause 0: a failure of this node that came after the
 * job's root cause (another node's, named before it). */
void agent_print_summary(const agent *a, const char *head, int root_cause);
/* The job failed: its error report to a->report_file (when one was given), as torchrun's
 * @record writes it (agent.c says what it holds); launcher_error: the launcher's own error, when
 * it failed before or between attempts, else NULL. */
void agent_write_report(const agent *a, const char *launcher_error);

/* control.c */
/* connect all launchers; agree on ids. next_cmd 2 on COH_OK: the job ended (EXIT) while this
 * node waited for an elastic job's next round */
coh_status ctl_join(agent *a);
int ctl_fill(agent *a, struct pollfd *p);    /* add control fds; returns how many */
void ctl_handle(agent *a, struct pollfd *p, int n);
void ctl_local_failure(agent *a);            /* tell the others a local failure happened */
/* This launcher ends the job after the attempt's failure (what: its interruption; exit_code: what
 * it exits with): node 0 must not restart it. */
void ctl_local_final(agent *a, int exit_code, const char *what);
int ctl_settled(agent *a, int local_done);   /* may the attempt end now? */
/* After an attempt: restart (a->attempt is then the next attempt) or the job's exit code. */
coh_status ctl_after_attempt(agent *a, int *restart, int *exit_code);
void ctl_close(agent *a);
double ctl_deadline(const agent *a); /* the next handshake deadline during a round, or 0 */

/* ctl_msg.c: strict parsers of control lines (1 when the line has the form, else 0) */
typedef struct ctl_hello {
    int node_rank, nnodes, nproc;
    char host[128];
    char nonce[CTL_NONCE_HEX + 1];
    char mac[CTL_MAC_HEX + 1];
    size_t body_len; /* the line's length without " MAC": what the MAC covers */
} ctl_hello;
int ctl_parse_chal(const char *line, char nonce[CTL_NONCE_HEX + 1]);
int ctl_parse_welcome(const char *line, char mac[CTL_MAC_HEX + 1]);
int ctl_parse_hello(const char *line, ctl_hello *h);
/* "PAYLOAD MAC": cuts line at its last space; *mac is then the MAC (64 hex digits). */
int ctl_split_mac(char *line, const char **mac);
/* START ATTEMPT WORLD BASE JOB-ID NODE-RANK NNODES */
int ctl_parse_start(const char *line, int *attempt, int *world, int *base, char *id, size_t n,
                    int *node_rank, int *nnodes);
int ctl_parse_exit(const char *line, int *code, int *root, const char **desc);
/* "KIND TEXT" (TAIL, REPORT): TEXT into out, cut to n - 1 bytes (what the receiver keeps). */
int ctl_parse_text(const char *line, const char *kind, char *out, size_t n);
int ctl_parse_fail(const char *line, failure *f);

/* error_report.c: reports in PyTorch's TORCHELASTIC_ERROR_FILE form */
struct json_value;
/* The whole seconds since the epoch at which a worker's report (PyTorch's @record) says it
 * failed: message.extraInfo.timestamp, or timestamp beside a message that is a string, written
 * as digits or an integer; -1 when it gives none. */
double error_report_time(const struct json_value *root);
/* A worker's report (text, len) as its launcher's, what PyTorch's ErrorHandler.dump_error_file
 * writes: the same document, with message.errorCode = code when message is an object and code is
 * not 0 (a worker killed by a signal cannot write its code). NULL when text is not a JSON object
 * (no report) or memory ran out; *out_len is the length of the malloc'd text. */
char *error_report_rewrite(const char *text, size_t len, int code, size_t *out_len);
/* The launcher's own failure as PyTorch's record_exception writes one: the message and a
 * timestamp (whole seconds of when). */
char *error_report_own(const char *message, double when, size_t *out_len);
/* text to path, atomically: a temporary file in its folder, renamed over it. */
coh_status error_report_write(const char *path, const char *text, size_t len);

/* auth.c */
/* The secret from file (owner-only, else refused by name) or env_value (COHORT_JOB_TOKEN); with
 * neither, an empty key (k->given 0). */
coh_status auth_load_key(const char *file, const char *env_value, ctl_key *k);
coh_status auth_nonce(char hex[CTL_NONCE_HEX + 1]);
/* HMAC-SHA256 under key of "label|a|b". */
void auth_mac(const unsigned char *key, size_t klen, const char *label, const char *a,
              const char *b, unsigned char out[32]);
void auth_mac_hex(const unsigned char *key, size_t klen, const char *label, const char *a,
                  const char *b, char out[CTL_MAC_HEX + 1]);
int auth_mac_equal(const char *x, const char *y); /* constant time; 1 when equal */

#endif
