/* pipeline_int.h: what the pipeline schedule files and their tests share: every stage's list at
 * once, the warm-up count and the list simulator. */
#ifndef COHORT_PIPELINE_INT_H
#define COHORT_PIPELINE_INT_H

#include "cohort/pipeline.h"

/* Every stage's list of one shape. */
typedef struct pipe_lists {
    int stages;
    coh_pipe_action **list; /* [stages], each from coh_pipeline_schedule */
    int *count;             /* [stages] */
} pipe_lists;

/* Build all lists (the shape is checked). Release with pipe_lists_release, also on failure. */
coh_status pipe_lists_build(const coh_pipe_shape *shape, pipe_lists *out);
void pipe_lists_release(pipe_lists *l);

/* Forwards `stage` runs before its first backward (chunk forwards when interleaved); the shape
 * must be valid. */
int pipe_warmup(const coh_pipe_shape *shape, int stage);

/* Any lists for `stages` stages of `chunks` model chunks over `microbatches` microbatches, as
 * coh_pipeline_simulate runs them; costs are per chunk action. */
typedef struct pipe_sim_in {
    int stages, microbatches, chunks;
    coh_pipe_action *const *list; /* [stages] */
    const int *count;             /* [stages] */
    double fwd, bwd;              /* time of one chunk's forward, backward */
    double *const *start;         /* NULL, or [stages][count[s]]: filled with each start time */
    const double *fwd_u, *bwd_u;  /* NULL, or [stages * chunks]: the forward and backward time
                                     of each virtual stage u = chunk * stages + stage, in place
                                     of fwd and bwd (a pipeline whose chunks differ) */
    const double *hop_s;          /* NULL (sends arrive at once), or [stages]: a message between
                                     stage s and s + 1 (mod stages: interleaving's wrap) arrives
                                     this long after it is sent (the planner's link cost) */
} pipe_sim_in;

/* The one pipeline event simulator: the trainer's split choice and schedule checks, and the
 * planner's step (which adds hop_s and reads start) run it.
 * COH_ERR_INVALID naming the stage, the action and the message when the lists deadlock, a send
 * or receive names the wrong peer or no neighbour, a message is sent or received twice or never
 * received, a backward comes before its forward, or a field is out of range. */
coh_status pipe_simulate(const pipe_sim_in *in, coh_pipe_sim *out, coh_pipe_stage_stats *stages);

#endif
