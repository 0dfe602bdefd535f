/* test_comm_env.c: a communicator's place in the job read through the launcher API for every
 * launcher (cohort run, torchrun, Open MPI, PMI/Hydra, Slurm srun): rank, world, node, the job
 * name of its shared memory (equal on the ranks of a job, different between jobs and
 * restarts), the deadline, and the errors that say what to set. */
#include <unistd.h>

#include "check.h"
#include "cohort/comm.h"
#include "cohort/launch.h"
#include "comm/comm_int.h"
#include "comm_env_clear.h"

static void set_all(const char *const *vars)
{
    clear_env();
    for (; *vars; vars++) {
        char name[64];
        const char *eq = strchr(*vars, '=');
        snprintf(name, sizeof name, "%.*s", (int)(eq - *vars), *vars);
        setenv(name, eq + 1, 1);
    }
}

static coh_comm_env read_env(const char *const *vars)
{
    coh_comm_env e;
    set_all(vars);
    CHECK_OK(coh_comm_env_read(&e));
    return e;
}

static void test_slurm(void)
{
    const char *one_node[] = {"SLURM_PROCID=1", "SLURM_NTASKS=2", "SLURM_LOCALID=1",
                              "SLURM_NODEID=0", "SLURM_NNODES=1", "SLURM_TASKS_PER_NODE=2",
                              "SLURM_JOB_ID=77", "SLURM_STEP_ID=3", NULL};
    coh_comm_env e = read_env(one_node);
    CHECK_INT(e.launcher, COH_LAUNCHER_SLURM);
    CHECK_INT(e.rank, 1);
    CHECK_INT(e.size, 2);
    CHECK_INT(e.local_rank, 1);
    CHECK_INT(e.local_size, 2);
    CHECK_INT(e.nnodes, 1);
    CHECK_STR(e.job, "slurm-77.3-r0");
    CHECK(e.timeout_s == 300);
    const char *restarted[] = {"SLURM_PROCID=0", "SLURM_NTASKS=2", "SLURM_LOCALID=0",
                               "SLURM_NODEID=0", "SLURM_NNODES=1", "SLURM_TASKS_PER_NODE=2",
                               "SLURM_JOB_ID=77", "SLURM_STEP_ID=3", "SLURM_RESTART_COUNT=2",
                               NULL};
    e = read_env(restarted);
    CHECK_STR(e.job, "slurm-77.3-r2"); /* a restart gets new segment names */
    const char *two_nodes[] = {"SLURM_PROCID=3", "SLURM_NTASKS=4", "SLURM_LOCALID=1",
                               "SLURM_NODEID=1", "SLURM_NNODES=2", "SLURM_TASKS_PER_NODE=2(x2)",
                               "SLURM_JOB_ID=78", "SLURM_STEP_ID=0", NULL};
    e = read_env(two_nodes);
    CHECK_INT(e.rank, 3);
    CHECK_INT(e.local_rank, 1);
    CHECK_INT(e.local_size, 2);
    CHECK_INT(e.nnodes, 2);
    CHECK_STR(e.job, "slurm-78.0-r0");
    coh_comm *c = NULL;
    CHECK_FAILS(coh_comm_create(COH_COMM_SHM, &c), COH_ERR_UNSUPPORTED,
                "the job spans 2 nodes but shared memory reaches one node");
    /* srun across nodes picks MPI; without srun's MPI plug-in MPI could not start */
    CHECK_FAILS(coh_comm_create(COH_COMM_AUTO, &c), COH_ERR_UNSUPPORTED,
                "srun started 4 ranks on several nodes without an MPI plug-in (no PMIX_RANK or "
                "PMI_FD): start them with 'srun --mpi=pmix' (Open MPI) or 'srun --mpi=pmi2'");
    const char *bad[] = {"SLURM_PROCID=x", "SLURM_NTASKS=2", "SLURM_STEP_ID=0", NULL};
    set_all(bad);
    CHECK_FAILS(coh_comm_env_read(&e), COH_ERR_INVALID, "invalid SLURM_PROCID 'x'");
    CHECK(c == NULL);
}

static void test_pmi(void)
{
    const char *hydra[] = {"PMI_RANK=2", "PMI_SIZE=3", "MPI_LOCALRANKID=2", "MPI_LOCALNRANKS=3",
                           NULL};
    coh_comm_env e = read_env(hydra);
    CHECK_INT(e.launcher, COH_LAUNCHER_PMI);
    CHECK_INT(e.rank, 2);
    CHECK_INT(e.size, 3);
    CHECK_INT(e.local_size, 3);
    CHECK_STR(e.job, ""); /* Hydra gives no job id */
    coh_comm *c = NULL;
    CHECK_FAILS(coh_comm_create(COH_COMM_SHM, &c), COH_ERR_INVALID,
                "the launcher (pmi) gives no job id (PMI_JOBID is not set), and shared memory "
                "needs one: set COHORT_JOB_ID on every rank");
    setenv("COHORT_JOB_ID", "train-42", 1);
    CHECK_OK(coh_comm_env_read(&e));
    CHECK_STR(e.job, "train-42-r0");
    setenv("COHORT_JOB_ID", "train 42", 1);
    CHECK_FAILS(coh_comm_env_read(&e), COH_ERR_INVALID,
                "invalid COHORT_JOB_ID 'train 42': expected letters, digits, '-', '_', '.'");
    const char *intel[] = {"PMI_RANK=0", "PMI_SIZE=2", "PMI_JOBID=kvs_9", NULL};
    e = read_env(intel);
    CHECK_STR(e.job, "pmi-kvs_9-r0");
    CHECK(c == NULL);
}

static void test_torchrun(void)
{
    const char *v[] = {"RANK=2", "WORLD_SIZE=4", "LOCAL_RANK=0", "LOCAL_WORLD_SIZE=2",
                       "GROUP_RANK=1", "GROUP_WORLD_SIZE=2", "TORCHELASTIC_RUN_ID=abc",
                       "TORCHELASTIC_RESTART_COUNT=2", NULL};
    coh_comm_env e = read_env(v);
    CHECK_INT(e.launcher, COH_LAUNCHER_TORCHRUN);
    CHECK_INT(e.rank, 2);
    CHECK_INT(e.size, 4);
    CHECK_INT(e.local_size, 2);
    CHECK_INT(e.nnodes, 2);
    CHECK_STR(e.job, "abc-r2");
    const char *slash[] = {"RANK=0", "WORLD_SIZE=2", "TORCHELASTIC_RUN_ID=a/b", NULL};
    set_all(slash);
    CHECK_FAILS(coh_comm_env_read(&e), COH_ERR_INVALID, "invalid TORCHELASTIC_RUN_ID 'a/b'");
}

static void test_openmpi_and_cohort(void)
{
    const char *ompi[] = {"OMPI_COMM_WORLD_RANK=1", "OMPI_COMM_WORLD_SIZE=4",
                          "OMPI_COMM_WORLD_LOCAL_RANK=1", "OMPI_COMM_WORLD_LOCAL_SIZE=2",
                          "OMPI_MCA_ess_base_jobid=123", NULL};
    coh_comm_env e = read_env(ompi);
    CHECK_INT(e.launcher, COH_LAUNCHER_OPENMPI);
    CHECK_INT(e.local_size, 2);
    CHECK_INT(e.nnodes, -1); /* Open MPI does not count nodes */
    CHECK_STR(e.job, "ompi-123-r0");
    /* cohort run sets its own variables and torchrun's: its own win */
    const char *cohort[] = {"COHORT_RANK=1", "COHORT_WORLD_SIZE=2", "COHORT_LOCAL_RANK=1",
                            "COHORT_LOCAL_WORLD_SIZE=2", "COHORT_NODE_RANK=0", "COHORT_NNODES=1",
                            "COHORT_JOB_ID=run-x", "COHORT_RESTART_COUNT=1", "RANK=1",
                            "WORLD_SIZE=2", "TORCHELASTIC_RUN_ID=other", "COHORT_COMM_TIMEOUT=2.5",
                            NULL};
    e = read_env(cohort);
    CHECK_INT(e.launcher, COH_LAUNCHER_COHORT);
    CHECK_STR(e.job, "run-x-r1");
    CHECK(e.timeout_s == 2.5);
    setenv("COHORT_COMM_TIMEOUT", "-1", 1);
    CHECK_FAILS(coh_comm_env_read(&e), COH_ERR_INVALID,
                "invalid COHORT_COMM_TIMEOUT '-1': expected seconds greater than 0");
    clear_env();
    e = read_env((const char *const[]){NULL});
    CHECK_INT(e.launcher, COH_LAUNCHER_NONE);
    CHECK_INT(e.size, 1);
    char want[64];
    snprintf(want, sizeof want, "single-%d-r0", (int)getpid());
    CHECK_STR(e.job, want);
}

int main(void)
{
    RUN(test_slurm);
    RUN(test_pmi);
    RUN(test_torchrun);
    RUN(test_openmpi_and_cohort);
    return CHECK_REPORT();
}
