/* launch.h: cohort's launcher (`cohort run`: start one worker per device, supervise, tear down,
 * restart) and the worker side (learn rank and world from whichever launcher started us). */
#ifndef COHORT_LAUNCH_H
#define COHORT_LAUNCH_H

#include "cohort/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- worker side -------------------------------------------------------------------------- */

/* Which launcher started this process, by the variables it left. */
typedef enum coh_launcher_kind {
    COH_LAUNCHER_NONE = 0, /* no launcher: a single process, rank 0 of 1 */
    COH_LAUNCHER_COHORT,   /* cohort run: COHORT_* */
    COH_LAUNCHER_TORCHRUN, /* torchrun (or anything setting RANK/WORLD_SIZE/LOCAL_RANK) */
    COH_LAUNCHER_OPENMPI,  /* mpirun of Open MPI: OMPI_COMM_WORLD_* */
    COH_LAUNCHER_PMI,      /* MPICH/Hydra and Intel MPI: PMI_RANK, PMI_SIZE, MPI_LOCALRANKID */
    COH_LAUNCHER_SLURM     /* srun: SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_NODEID */
} coh_launcher_kind;

/* A worker's place in its job. */
typedef struct coh_launch_env {
    coh_launcher_kind launcher;
    int rank, world_size;             /* 0 <= rank < world_size */
    int local_rank, local_world_size; /* on this node; 0 <= local_rank < local_world_size */
    int node_rank, nnodes;            /* -1 when the launcher does not say (Open MPI, PMI) */
    int restart_count;                /* 0 when the launcher has no restarts */
    long launcher_pid;                /* cohort run's pid; 0 when unknown */
    char job_id[128]; /* same on every rank of one job, different between jobs; "" when the
                         launcher gives no job id (PMI without PMI_JOBID) */
} coh_launch_env;

/* Name of a launcher kind ("cohort", "torchrun", "openmpi", "pmi", "slurm", "none"). */
const char *coh_launcher_name(coh_launcher_kind k);

/* The variable a launcher's job id comes from ("SLURM_JOB_ID"; "COHORT_JOB_ID" for none). */
const char *coh_launcher_job_var(coh_launcher_kind k);

/* The variable a launcher's world size comes from ("SLURM_NTASKS"; "WORLD_SIZE" for none). */
const char *coh_launcher_world_var(coh_launcher_kind k);

/* Fill *out from this process's environment. The first launcher whose variables are present
 * wins, in the order cohort, torchrun, Open MPI, PMI, Slurm (the innermost launcher is the one
 * that set the most specific variables); with none, a single process (rank 0 of 1, job id
 * "single-<pid>"). Slurm counts only inside a job step (SLURM_STEP_ID, set by srun): the batch
 * script of sbatch is one process. PMI served by srun (--mpi=pmi2: PMI_JOBID is the step) must
 * agree with Slurm's rank and task count, and takes its local rank and node from Slurm.
 * Errors: COH_ERR_INVALID when a variable is malformed or inconsistent, or two launchers'
 * variables disagree (message names the variables and values); *out is then zeroed.
 * Thread-safe if nobody modifies the environment concurrently. */
coh_status coh_launch_env_read(coh_launch_env *out);

/* Same, from a NULL-terminated "NAME=VALUE" array instead of the process environment. */
coh_status coh_launch_env_read_from(const char *const *envp, coh_launch_env *out);

/* ---- launcher side ------------------------------------------------------------------------ */

typedef enum coh_cpu_bind {
    COH_CPU_BIND_NONE = 0, /* no affinity; thread counts = cpus / ranks */
    COH_CPU_BIND_CORES,    /* each local rank gets a disjoint, contiguous slice of the cpus */
    COH_CPU_BIND_NUMA      /* each local rank gets the cpus of one NUMA node, round-robin */
} coh_cpu_bind;

/* Parse "none" | "cores" | "numa". COH_ERR_INVALID names the bad value. */
coh_status coh_cpu_bind_parse(const char *s, coh_cpu_bind *out);

/* What `cohort run` is asked to do. Strings are borrowed for the duration of coh_launch_run. */
typedef struct coh_launch_opts {
    char *const *argv;       /* program and its arguments, NULL-terminated; argv[0] via PATH */
    int nproc_per_node;      /* workers on this node, >= 1 */
    int nnodes, node_rank;   /* static multi-node: global rank = node base + local rank */
    int nnodes_min;          /* elastic (--nnodes MIN:MAX, nnodes is MAX): start with MIN or
                                more nodes, restart on those that remain; 0 = static */
    const char *master_addr; /* MASTER_ADDR for the workers; other nodes reach node 0 here */
    int master_port;         /* MASTER_PORT; 0 picks a free port (single node only) */
    int control_port;        /* node 0 launcher's port for the other launchers; -1: port + 1 */
    double grace_s;          /* SIGTERM .. SIGKILL delay at teardown */
    double join_timeout_s;   /* how long launchers wait for each other at start */
    int max_restarts;        /* restarts of the whole job after a failure */
    const char *run_id;      /* job id; NULL generates a unique one (node 0's wins) */
    const char *role;        /* ROLE_NAME; NULL = "default" */
    const char *log_dir;     /* per-rank log files under DIR/<run-id>/attempt_<n>/<rank>/ */
    int tee;                 /* with log_dir: also show the output on the console */
    const char *prefix;      /* line prefix template; NULL = "[rank{rank}]: ", "" = none */
    const char *ranks_filter; /* local ranks shown on the console ("0,3", "0-2"); NULL = all */
    coh_cpu_bind cpu_bind;
    /* Extra "NAME=VALUE" settings: for every worker (NULL-terminated), and for each local rank
     * (nproc_per_node entries, each a NULL-terminated list, or NULL). Device visibility. */
    char *const *extra_env;
    char *const *const *local_rank_env;
    const char *job_token;  /* file holding the job secret (owner-only), or NULL: then
                               COHORT_JOB_TOKEN, else no secret (a warning for multi-node) */
    const char *extra_note; /* appended to the launcher's one-line job description, or NULL */
} coh_launch_opts;

/* A job secret for `cohort run --job-token` (cohort token): 32 random bytes from OpenSSL as
 * 64 lower-case hex digits, then '\n' and '\0'. */
#define COH_JOB_TOKEN_HEX 64
coh_status coh_launch_new_token(char out[COH_JOB_TOKEN_HEX + 2]);
/* Write a new secret to path, created owner-only (0600); an existing path (a link included) is
 * never touched: COH_ERR_INVALID naming it. COH_ERR_IO when it cannot be written. */
coh_status coh_launch_write_token(const char *path);

/* Defaults: 1 process, 1 node, 127.0.0.1:29500, grace 5 s, join timeout 300 s, no restarts,
 * no cpu binding, prefix "[rank{rank}]: ". */
void coh_launch_opts_init(coh_launch_opts *o);

/* Check everything that can be checked before starting a worker: option values and their
 * combinations, the program (found and executable), the master and control ports (free on
 * node 0). Errors: COH_ERR_INVALID (bad option; message names it), COH_ERR_NOT_FOUND (program),
 * COH_ERR_BUSY (port in use). */
coh_status coh_launch_check(const coh_launch_opts *o);

/* Run the job to its end: coh_launch_check, then start, supervise and (on failure) tear down
 * and restart the workers. On COH_OK, *exit_code is the job's result: 0 when every worker
 * exited 0; otherwise the root-cause worker's exit code, or 128 + signal number when it was
 * killed by a signal or the launcher was interrupted (also before any worker started: while
 * the launchers joined); a summary is printed on stderr.
 * Other statuses mean no job ran to a result (check failed, the other launchers never came,
 * a system call failed). Installs signal handling for SIGINT, SIGTERM, SIGHUP, SIGQUIT and
 * SIGCHLD for its duration; call from a single-threaded process. */
coh_status coh_launch_run(const coh_launch_opts *o, int *exit_code);

/* Validate a ranks filter ("0,3", "1-3,5") against n local ranks; mask (n bytes, may be NULL)
 * gets 1 for each rank listed. COH_ERR_INVALID names the bad entry. */
coh_status coh_launch_parse_ranks(const char *s, int n, unsigned char *mask);

/* Validate a prefix template: text with fields {rank}, {local_rank}, {node_rank}, {role},
 * {host}, {pid}, {attempt}, {stream}; "{{" and "}}" are literal braces. */
coh_status coh_launch_check_prefix(const char *tmpl);

#ifdef __cplusplus
}
#endif
#endif
