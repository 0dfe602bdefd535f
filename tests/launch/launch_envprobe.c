/* launch_envprobe.c: a cohort worker that prints its place in the job as seen through
 * coh_launch_env_read, one line: "launcher rank world local_rank local_world node nnodes
 * restart job_id". */
#include <stdio.h>

#include "cohort/launch.h"

int main(void)
{
    coh_launch_env e;
    coh_status s = coh_launch_env_read(&e);
    if (s != COH_OK) {
        fprintf(stderr, "envprobe: %s\n", coh_last_error());
        return 2;
    }
    printf("%s %d %d %d %d %d %d %d %s\n", coh_launcher_name(e.launcher), e.rank, e.world_size,
           e.local_rank, e.local_world_size, e.node_rank, e.nnodes, e.restart_count, e.job_id);
    return 0;
}
