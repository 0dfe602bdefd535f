/* pipe_draw.c: prints a pipeline schedule's timeline, drawn from its action lists, with its
 * simulated bubble; docs/pipeline.md's pictures are its output.
 * usage: pipe_draw SCHEDULE STAGES MICROBATCHES [VIRTUAL_STAGES [FWD_CELLS BWD_CELLS]] */
#include <stdio.h>
#include <stdlib.h>

#include "cohort/pipeline.h"

static int usage(void)
{
    fprintf(stderr, "usage: pipe_draw naive|gpipe|1f1b|interleaved STAGES MICROBATCHES "
                    "[VIRTUAL_STAGES [FWD_CELLS BWD_CELLS]]\n");
    return 2;
}

int main(int argc, char **argv)
{
    if (argc != 4 && argc != 5 && argc != 7)
        return usage();
    coh_pipe_shape s = {COH_SCHED_1F1B, atoi(argv[2]), atoi(argv[3]), argc > 4 ? atoi(argv[4]) : 1};
    int fwd = argc > 5 ? atoi(argv[5]) : 1, bwd = argc > 5 ? atoi(argv[6]) : 2;
    coh_pipe_sim sim;
    char *text = NULL;
    coh_status st = coh_schedule_parse(argv[1], &s.kind);
    if (!st)
        st = coh_pipeline_simulate(&s, fwd, bwd, &sim, NULL);
    if (!st)
        st = coh_pipeline_draw(&s, fwd, bwd, &text);
    if (st) {
        fprintf(stderr, "pipe_draw: %s\n", coh_last_error());
        return st == COH_ERR_INVALID ? 2 : 1;
    }
    printf("%s", text);
    printf("bubble %.4f (idle over compute per stage), peak in flight %d\n", sim.bubble,
           sim.peak_in_flight);
    free(text);
    return 0;
}
