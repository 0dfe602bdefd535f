/* fuzz_comm_env.c: libFuzzer target for the variables a communicator is made from (torchrun's
 * RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, then COHORT_COMM_TIMEOUT, COHORT_JOB_ID,
 * COHORT_RESTART_COUNT, then Slurm's and PMI's, one per input line) and the type and reduction
 * names: parse or fail with a message, and whatever parses is consistent. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cohort/comm.h"
#include "comm/comm_int.h"

static const char *const vars[] = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
                                   "COHORT_COMM_TIMEOUT", "COHORT_JOB_ID", "COHORT_RESTART_COUNT",
                                   "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID",
                                   "SLURM_NODEID", "SLURM_TASKS_PER_NODE", "SLURM_JOB_ID",
                                   "PMI_RANK", "PMI_SIZE", "PMI_JOBID"};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char text[512];
    if (size >= sizeof text || memchr(data, 0, size))
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    unsetenv("OMPI_COMM_WORLD_RANK");
    unsetenv("COHORT_RANK");
    char *line = text;
    for (size_t i = 0; i < sizeof vars / sizeof *vars; i++) {
        char *nl = line ? strchr(line, '\n') : NULL;
        if (nl)
            *nl = '\0';
        if (line && *line != '-')
            setenv(vars[i], line, 1);
        else
            unsetenv(vars[i]); /* a line starting with '-' leaves the variable unset */
        line = nl ? nl + 1 : NULL;
    }
    coh_comm_env env;
    coh_err_clear();
    coh_status st = coh_comm_env_read(&env);
    if (st == COH_OK) {
        if (env.rank < 0 || env.size < 1 || env.rank >= env.size || !(env.timeout_s > 0) ||
            env.local_rank < 0 || env.local_rank >= env.local_size || env.local_size > env.size ||
            (env.size == 1 && !env.job[0]) || strchr(env.job, '/'))
            abort();
        if (!env.job[0] && coh_comm_env_no_job(&env) != COH_ERR_INVALID)
            abort();
    } else if (!coh_last_error()[0]) {
        abort(); /* every failure explains itself */
    }
    coh_dtype t;
    coh_redop op;
    const char *first = getenv("RANK");
    if (first && coh_dtype_parse(first, &t) == COH_OK && strcmp(coh_dtype_name(t), first))
        abort();
    if (first && coh_redop_parse(first, &op) == COH_OK && strcmp(coh_redop_name(op), first))
        abort();
    return 0;
}
