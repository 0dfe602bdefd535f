/* test_launch_env.c: the worker side (rank, world, job id from each launcher's variables) and
 * the launcher's small parsers (ranks filters, prefix templates, cpulists, cpu-bind modes). */
#include <stdlib.h>

#include "check.h"
#include "cohort/launch.h"
#include "launch/launch_int.h"

static coh_launch_env env_of(const char *const *vars, coh_status want)
{
    coh_launch_env e;
    coh_status s = coh_launch_env_read_from(vars, &e);
    CHECK_INT(s, want);
    return e;
}

/* rank, world size, local rank, local world size, node rank, node count */
#define check_place(e, r, w, lr, lw, nr, nn)                                                     \
    do {                                                                                       \
        CHECK_INT((e)->rank, r);                                                               \
        CHECK_INT((e)->world_size, w);                                                         \
        CHECK_INT((e)->local_rank, lr);                                                        \
        CHECK_INT((e)->local_world_size, lw);                                                  \
        CHECK_INT((e)->node_rank, nr);                                                         \
        CHECK_INT((e)->nnodes, nn);                                                            \
    } while (0)

static void test_cohort(void)
{
    const char *v[] = {"PATH=/bin", "COHORT_RANK=5", "COHORT_WORLD_SIZE=8", "COHORT_LOCAL_RANK=1",
                       "COHORT_LOCAL_WORLD_SIZE=4", "COHORT_NODE_RANK=1", "COHORT_NNODES=2",
                       "COHORT_RESTART_COUNT=2", "COHORT_JOB_ID=cohort-abc",
                       "COHORT_LAUNCHER_PID=4242", "RANK=0", "WORLD_SIZE=1",
                       "OMPI_COMM_WORLD_RANK=3", "OMPI_COMM_WORLD_SIZE=9", NULL};
    coh_launch_env e = env_of(v, COH_OK);
    CHECK_INT(e.launcher, COH_LAUNCHER_COHORT);
    CHECK_STR(coh_launcher_name(e.launcher), "cohort");
    check_place(&e, 5, 8, 1, 4, 1, 2);
    CHECK_INT(e.restart_count, 2);
    CHECK_INT(e.launcher_pid, 4242);
    CHECK_STR(e.job_id, "cohort-abc");
}

static void test_torchrun(void)
{
    const char *v[] = {"RANK=3", "WORLD_SIZE=4", "LOCAL_RANK=1", "LOCAL_WORLD_SIZE=2",
                       "GROUP_RANK=1", "GROUP_WORLD_SIZE=2", "TORCHELASTIC_RESTART_COUNT=1",
                       "TORCHELASTIC_RUN_ID=xyz", NULL};
    coh_launch_env e = env_of(v, COH_OK);
    CHECK_INT(e.launcher, COH_LAUNCHER_TORCHRUN);
    check_place(&e, 3, 4, 1, 2, 1, 2);
    CHECK_INT(e.restart_count, 1);
    CHECK_STR(e.job_id, "xyz");
    CHECK_INT(e.launcher_pid, 0);
}

static void test_openmpi(void)
{
    const char *v[] = {"OMPI_COMM_WORLD_RANK=2", "OMPI_COMM_WORLD_SIZE=4",
                       "OMPI_COMM_WORLD_LOCAL_RANK=0", "OMPI_COMM_WORLD_LOCAL_SIZE=2",
                       "OMPI_MCA_ess_base_jobid=1259995137", "SLURM_PROCID=0", "SLURM_NTASKS=1",
                       NULL};
    coh_launch_env e = env_of(v, COH_OK);
    CHECK_INT(e.launcher, COH_LAUNCHER_OPENMPI);
    check_place(&e, 2, 4, 0, 2, -1, -1); /* Open MPI does not number nodes */
    CHECK_STR(e.job_id, "ompi-1259995137");
    /* One node holding the whole job: node 0 of 1 is known. */
    const char *one[] = {"OMPI_COMM_WORLD_RANK=1", "OMPI_COMM_WORLD_SIZE=2",
                         "OMPI_COMM_WORLD_LOCAL_RANK=1", "OMPI_COMM_WORLD_LOCAL_SIZE=2", NULL};
    e = env_of(one, COH_OK);
    CHECK_INT(e.node_rank, 0);
    CHECK_INT(e.nnodes, 1);
    CHECK_STR(e.job_id, "");
}

static void test_pmi(void)
{
    const char *v[] = {"PMI_RANK=6", "PMI_SIZE=8", "MPI_LOCALRANKID=2", "MPI_LOCALNRANKS=4",
                       "PMI_JOBID=77", NULL};
    coh_launch_env e = env_of(v, COH_OK);
    CHECK_INT(e.launcher, COH_LAUNCHER_PMI);
    CHECK_INT(e.rank, 6);
    CHECK_INT(e.world_size, 8);
    CHECK_INT(e.local_rank, 2);
    CHECK_INT(e.local_world_size, 4);
    CHECK_STR(e.job_id, "pmi-77");
}

static void test_slurm(void)
{
    const char *v[] = {"SLURM_PROCID=5", "SLURM_NTASKS=7", "SLURM_LOCALID=1", "SLURM_NODEID=2",
                       "SLURM_NNODES=3", "SLURM_TASKS_PER_NODE=3,2(x2)", "SLURM_JOB_ID=991",
                       "SLURM_STEP_ID=4", NULL};
    coh_launch_env e = env_of(v, COH_OK);
    CHECK_INT(e.launcher, COH_LAUNCHER_SLURM);
    check_place(&e, 5, 7, 1, 2, 2, 3); /* node 2 is the second of the "2(x2)" nodes */
    CHECK_STR(e.job_id, "slurm-991.4");
    CHECK_STR(coh_launcher_job_var(e.launcher), "SLURM_JOB_ID");
    CHECK_STR(coh_launcher_job_var(COH_LAUNCHER_NONE), "COHORT_JOB_ID");
    /* SLURM_NNODES without SLURM_NODEID: the node is unknown, not inconsistent. */
    const char *half[] = {"SLURM_PROCID=0", "SLURM_NTASKS=2", "SLURM_NNODES=2",
                          "SLURM_STEP_ID=0", NULL};
    e = env_of(half, COH_OK);
    CHECK_INT(e.node_rank, -1);
    CHECK_INT(e.nnodes, -1);
    CHECK_STR(coh_launcher_world_var(COH_LAUNCHER_SLURM), "SLURM_NTASKS");
    CHECK_STR(coh_launcher_world_var(COH_LAUNCHER_PMI), "PMI_SIZE");
}

/* The batch script of `sbatch -n 2` (as Slurm 22.05 sets it: SLURM_PROCID=0, the allocation's
 * SLURM_NTASKS, no SLURM_STEP_ID) is one process, not rank 0 of 2; `salloc`'s shell too. */
static void test_slurm_batch(void)
{
    const char *batch[] = {"SLURM_JOB_ID=4", "SLURM_LOCALID=0", "SLURM_NNODES=1",
                           "SLURM_NODEID=0", "SLURM_NPROCS=2", "SLURM_NTASKS=2", "SLURM_PROCID=0",
                           "SLURM_TASKS_PER_NODE=2", NULL};
    coh_launch_env e = env_of(batch, COH_OK);
    CHECK_INT(e.launcher, COH_LAUNCHER_NONE);
    check_place(&e, 0, 1, 0, 1, 0, 1);
    const char *salloc[] = {"SLURM_JOB_ID=5", "SLURM_NTASKS=2", NULL};
    e = env_of(salloc, COH_OK);
    CHECK_INT(e.launcher, COH_LAUNCHER_NONE);
    /* a step id that is not a number (the "batch" or "extern" step) is not an srun step */
    const char *named[] = {"SLURM_PROCID=0", "SLURM_NTASKS=2", "SLURM_STEP_ID=batch", NULL};
    e = env_of(named, COH_OK);
    CHECK_INT(e.launcher, COH_LAUNCHER_NONE);
    /* cohort run inside the batch script: its own variables rule */
    const char *inner[] = {"SLURM_PROCID=0", "SLURM_NTASKS=1", "SLURM_JOB_ID=4",
                           "COHORT_RANK=1", "COHORT_WORLD_SIZE=2", "COHORT_LOCAL_RANK=1",
                           "COHORT_LOCAL_WORLD_SIZE=2", "COHORT_JOB_ID=j", NULL};
    e = env_of(inner, COH_OK);
    CHECK_INT(e.launcher, COH_LAUNCHER_COHORT);
    check_place(&e, 1, 2, 1, 2, 0, 1);
}

/* srun --mpi=pmi2 (variables as Slurm 22.05 sets them): PMI rules (the comm layer picks MPI
 * for it) with Slurm's local rank and nodes; PMI and Slurm disagreeing is an error naming both. */
static void test_slurm_pmi(void)
{
    const char *v[] = {"PMI_FD=11", "PMI_JOBID=2.0", "PMI_RANK=3", "PMI_SIZE=4",
                       "SLURM_JOB_ID=2", "SLURM_STEP_ID=0", "SLURM_PROCID=3", "SLURM_NTASKS=4",
                       "SLURM_LOCALID=1", "SLURM_NODEID=1", "SLURM_NNODES=2",
                       "SLURM_TASKS_PER_NODE=2(x2)", NULL};
    coh_launch_env e = env_of(v, COH_OK);
    CHECK_INT(e.launcher, COH_LAUNCHER_PMI);
    check_place(&e, 3, 4, 1, 2, 1, 2);
    CHECK_STR(e.job_id, "pmi-2.0");
    const char *bad[] = {"PMI_JOBID=2.0", "PMI_RANK=1", "PMI_SIZE=4", "SLURM_JOB_ID=2",
                         "SLURM_STEP_ID=0", "SLURM_PROCID=1", "SLURM_NTASKS=2",
                         "SLURM_TASKS_PER_NODE=2", NULL};
    CHECK_FAILS(coh_launch_env_read_from(bad, &e), COH_ERR_INVALID,
                "PMI_SIZE '4' and SLURM_NTASKS '2' (PMI_RANK '1', SLURM_PROCID '1') disagree");
    CHECK_INT(e.world_size, 0);
    const char *rank[] = {"PMI_JOBID=2.0", "PMI_RANK=0", "PMI_SIZE=2", "SLURM_JOB_ID=2",
                          "SLURM_STEP_ID=0", "SLURM_PROCID=1", "SLURM_NTASKS=2", NULL};
    CHECK_FAILS(coh_launch_env_read_from(rank, &e), COH_ERR_INVALID, "SLURM_PROCID '1') disagree");
    /* Hydra inside an allocation: its proxies are srun tasks (one per node), its ranks are
     * PMI's; PMI_JOBID is not the step, so the counts differ legitimately */
    const char *hydra[] = {"PMI_RANK=3", "PMI_SIZE=4", "MPI_LOCALRANKID=1", "MPI_LOCALNRANKS=2",
                           "SLURM_JOB_ID=2", "SLURM_STEP_ID=1", "SLURM_PROCID=1",
                           "SLURM_NTASKS=2", NULL};
    e = env_of(hydra, COH_OK);
    CHECK_INT(e.launcher, COH_LAUNCHER_PMI);
    CHECK_INT(e.world_size, 4);
    CHECK_INT(e.local_world_size, 2);
}

static void test_none(void)
{
    const char *v[] = {"HOME=/root", NULL};
    coh_launch_env e = env_of(v, COH_OK);
    CHECK_INT(e.launcher, COH_LAUNCHER_NONE);
    CHECK_INT(e.rank, 0);
    CHECK_INT(e.world_size, 1);
    CHECK_INT(e.local_world_size, 1);
    CHECK(!strncmp(e.job_id, "single-", 7));
    coh_launch_env real;
    CHECK_OK(coh_launch_env_read(&real)); /* this test runs without a launcher */
    CHECK_INT(real.world_size >= 1, 1);
}

static void test_env_errors(void)
{
    coh_launch_env e;
    const char *a[] = {"RANK=4", "WORLD_SIZE=4", NULL};
    CHECK_FAILS(coh_launch_env_read_from(a, &e), COH_ERR_INVALID, "invalid RANK '4': must be below WORLD_SIZE (4)");
    CHECK_INT(e.world_size, 0); /* zeroed on error */
    const char *b[] = {"RANK=1x", "WORLD_SIZE=4", NULL};
    CHECK_FAILS(coh_launch_env_read_from(b, &e), COH_ERR_INVALID, "invalid RANK '1x'");
    const char *c[] = {"RANK=1", NULL};
    CHECK_FAILS(coh_launch_env_read_from(c, &e), COH_ERR_INVALID, "RANK is set but WORLD_SIZE is not");
    const char *d[] = {"COHORT_RANK=0", "COHORT_WORLD_SIZE=0", NULL};
    CHECK_FAILS(coh_launch_env_read_from(d, &e), COH_ERR_INVALID, "invalid COHORT_WORLD_SIZE '0'");
    const char *f[] = {"RANK=1", "WORLD_SIZE=4", "LOCAL_RANK=2", "LOCAL_WORLD_SIZE=2", NULL};
    CHECK_FAILS(coh_launch_env_read_from(f, &e), COH_ERR_INVALID, "invalid local rank '2'");
    const char *g[] = {"RANK=-1", "WORLD_SIZE=4", NULL};
    CHECK_FAILS(coh_launch_env_read_from(g, &e), COH_ERR_INVALID, "launcher environment (torchrun): invalid RANK '-1'");
}

static void test_ranks_filter(void)
{
    unsigned char m[8];
    CHECK_OK(coh_launch_parse_ranks("0,3", 4, m));
    CHECK(m[0] && !m[1] && !m[2] && m[3]);
    CHECK_OK(coh_launch_parse_ranks("1-3,5", 8, m));
    CHECK(!m[0] && m[1] && m[2] && m[3] && !m[4] && m[5]);
    CHECK_FAILS(coh_launch_parse_ranks("0,,3", 4, m), COH_ERR_INVALID, "invalid ranks filter '0,,3': empty entry at position 2");
    CHECK_FAILS(coh_launch_parse_ranks("4", 4, m), COH_ERR_INVALID, "local rank 4 does not exist (ranks are 0..3)");
    CHECK_FAILS(coh_launch_parse_ranks("3-1", 4, m), COH_ERR_INVALID, "reversed");
    CHECK_FAILS(coh_launch_parse_ranks("a", 4, m), COH_ERR_INVALID, "entry 1 is not a rank");
    CHECK_FAILS(coh_launch_parse_ranks("", 4, m), COH_ERR_INVALID, "invalid ranks filter ''");
}

static void test_prefix(void)
{
    char buf[128];
    CHECK_OK(coh_launch_check_prefix("[rank{rank}]: "));
    launch_render_prefix("[rank{rank}]: ", buf, sizeof buf, 3, 1, 0, "default", "h", 99, 0, "stdout");
    CHECK_STR(buf, "[rank3]: ");
    CHECK_OK(coh_launch_check_prefix("{{{host}:{local_rank}/{node_rank} {role} {pid} {attempt} {stream}}} "));
    launch_render_prefix("{{{host}:{local_rank}/{node_rank} {role} {pid} {attempt} {stream}}} ", buf,
                         sizeof buf, 3, 1, 2, "trainer", "h", 99, 4, "stderr");
    CHECK_STR(buf, "{h:1/2 trainer 99 4 stderr} ");
    CHECK_FAILS(coh_launch_check_prefix("[{rnak}]"), COH_ERR_INVALID, "unknown field at position 2");
    CHECK_FAILS(coh_launch_check_prefix("[{rank]"), COH_ERR_INVALID, "unknown field");
    CHECK_FAILS(coh_launch_check_prefix("a}b"), COH_ERR_INVALID, "unmatched '}' at position 2");
    launch_render_prefix("{rank}{rank}{rank}", buf, 4, 123, 0, 0, "r", "h", 1, 0, "stdout");
    CHECK_STR(buf, "123"); /* truncated safely */
}

static void test_cpulist(void)
{
    int c[16];
    CHECK_INT(launch_parse_cpulist("0-3,8,10-11\n", c, 16), 7);
    CHECK_INT(c[4], 8);
    CHECK_INT(c[6], 11);
    CHECK_INT(launch_parse_cpulist("", c, 16), 0);
    CHECK_INT(launch_parse_cpulist("3-1", c, 16), -1);
    CHECK_INT(launch_parse_cpulist("0-99", c, 16), -1); /* more than fits */
    CHECK_INT(launch_parse_cpulist("1,x", c, 16), -1);
}

static void test_cpu_bind(void)
{
    coh_cpu_bind b;
    CHECK_OK(coh_cpu_bind_parse("cores", &b));
    CHECK_INT(b, COH_CPU_BIND_CORES);
    CHECK_FAILS(coh_cpu_bind_parse("sockets", &b), COH_ERR_INVALID, "invalid cpu binding 'sockets': expected none, cores or numa");
    cpu_plan p;
    CHECK_OK(cpu_plan_make(COH_CPU_BIND_CORES, 2, &p));
    CHECK(p.threads >= 1);
    CHECK(p.ncpus[0] >= 1 && p.ncpus[1] >= 1);
    if (p.ncpus[0] >= 1 && p.ncpus[1] >= 1 && p.cap >= 2)
        CHECK(p.cpus[0] != p.cpus[p.cap]); /* disjoint when there are 2 cpus or more */
    cpu_plan_free(&p);
    CHECK_OK(cpu_plan_make(COH_CPU_BIND_NUMA, 3, &p));
    CHECK(p.ncpus[2] >= 1);
    cpu_plan_free(&p);
}

int main(void)
{
    RUN(test_cohort);
    RUN(test_torchrun);
    RUN(test_openmpi);
    RUN(test_pmi);
    RUN(test_slurm);
    RUN(test_slurm_batch);
    RUN(test_slurm_pmi);
    RUN(test_none);
    RUN(test_env_errors);
    RUN(test_ranks_filter);
    RUN(test_prefix);
    RUN(test_cpulist);
    RUN(test_cpu_bind);
    return CHECK_REPORT();
}
