/* pipeline.h: pipeline-parallel schedules as data: each stage's ordered list of actions (forward,
 * backward, send, receive) as a pure function of the schedule and its sizes, a simulator that
 * runs the lists against each other to count the bubble, and an ASCII drawing of the timeline.
 * docs/pipeline.md shows the four schedules drawn from these lists. Every function here is pure
 * (no state but the calling thread's error message) and thread-safe. */
#ifndef COHORT_PIPELINE_H
#define COHORT_PIPELINE_H

#include "cohort/parallel_config.h" /* coh_schedule */
#include "cohort/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- the shape of a pipeline ---------------------------------------------------------------- */

#define COH_PIPE_MAX_STAGES 1024
#define COH_PIPE_MAX_MICROBATCHES 65536
#define COH_PIPE_MAX_VIRTUAL 64

/* A schedule and its sizes, the same on every stage. Plain data.
 *   COH_SCHED_NAIVE        one microbatch at a time: forward through every stage, backward
 *                          back, and only then the next microbatch (one in flight).
 *   COH_SCHED_GPIPE        every forward, then every backward, both in microbatch order
 *                          (Huang et al. 2019; the order of Narayanan et al. 2021, fig. 3).
 *   COH_SCHED_1F1B         PipeDream-Flush (Narayanan et al. 2021, fig. 4 top): stage s runs
 *                          min(p - s - 1, m) warm-up forwards, then one forward and one backward
 *                          in turn, then the remaining backwards.
 *   COH_SCHED_INTERLEAVED  Megatron-LM's interleaved 1F1B (fig. 4 bottom): v model chunks per
 *                          stage, chunk c of stage s being virtual stage c * p + s of p * v;
 *                          microbatches go in groups of p through chunk 0, 1, ..., v - 1
 *                          (backwards: v - 1, ..., 0); warm-up min((p - s - 1) * 2 + (v - 1) * p,
 *                          m * v) chunk forwards, as Megatron counts it.
 * Valid shapes: 1 <= stages <= COH_PIPE_MAX_STAGES, 1 <= microbatches <=
 * COH_PIPE_MAX_MICROBATCHES, 1 <= virtual_stages <= COH_PIPE_MAX_VIRTUAL; virtual_stages > 1
 * only for COH_SCHED_INTERLEAVED, which also needs stages >= 2 and microbatches a multiple of
 * stages. */
typedef struct coh_pipe_shape {
    coh_schedule kind;
    int stages;         /* p: pipeline stages (devices) */
    int microbatches;   /* m: per optimizer step */
    int virtual_stages; /* v: model chunks per stage; 1 unless interleaved */
} coh_pipe_shape;

/* Check a shape. COH_ERR_INVALID naming the bad value and what would be valid. */
coh_status coh_pipeline_check(const coh_pipe_shape *shape);

/* The schedules' names: coh_schedule_name and coh_schedule_parse (cohort/parallel_config.h). */

/* ---- the action lists ----------------------------------------------------------------------- */

typedef enum coh_pipe_op {
    COH_PIPE_FORWARD,   /* run chunk's forward on microbatch mb */
    COH_PIPE_BACKWARD,  /* run chunk's backward on microbatch mb */
    COH_PIPE_SEND_ACT,  /* send chunk's output activation of mb to stage peer */
    COH_PIPE_RECV_ACT,  /* receive chunk's input activation of mb from stage peer */
    COH_PIPE_SEND_GRAD, /* send the gradient of chunk's input of mb to stage peer */
    COH_PIPE_RECV_GRAD  /* receive the gradient of chunk's output of mb from stage peer */
} coh_pipe_op;

/* One step of a stage's list. `chunk` is always this stage's own model chunk (0 unless
 * interleaved): the one computing, the one whose output is sent, or the one whose input is
 * received. A message is identified by (activation or gradient, mb, boundary between two
 * consecutive virtual stages): SEND_ACT of chunk c on stage s (virtual stage u = c * p + s)
 * matches RECV_ACT of virtual stage u + 1; SEND_GRAD of u matches RECV_GRAD of u - 1. */
typedef struct coh_pipe_action {
    coh_pipe_op op;
    int mb;    /* microbatch, 0 .. m - 1 */
    int chunk; /* model chunk on this stage, 0 .. v - 1 */
    int peer;  /* sends and receives: the other stage; -1 for FORWARD and BACKWARD */
} coh_pipe_action;

/* The ordered actions of `stage` (0 .. p - 1). Each receive comes right before the compute that
 * needs it and each send right after the compute that produced it, so an executor may post
 * receives early and complete sends asynchronously; the list assumes sends never block.
 * Stage 0's chunk 0 reads the batch, and the last virtual stage computes the loss: neither
 * receives.
 * Ownership: *out is a new array of *count actions; the caller frees it with free().
 * Errors: COH_ERR_INVALID (the shape, named; a stage outside 0 .. p - 1), COH_ERR_NOMEM. */
coh_status coh_pipeline_schedule(const coh_pipe_shape *shape, int stage, coh_pipe_action **out,
                                 int *count);

/* Most (microbatch, chunk) activations `stage` holds at once: forwarded and not yet backwarded,
 * counted by walking its list (the forward in progress counts). 1 for naive, m for GPipe,
 * min(p - s, m) for 1F1B, min(warm-up + 1, m * v) for interleaved.
 * Errors: those of coh_pipeline_schedule. */
coh_status coh_pipeline_peak_in_flight(const coh_pipe_shape *shape, int stage, int *out);

/* Short name of an action kind: "forward", "backward", "send_act", "recv_act", "send_grad",
 * "recv_grad"; "unknown" otherwise. */
const char *coh_pipe_op_name(coh_pipe_op op);

/* ---- simulation ----------------------------------------------------------------------------- */

/* Largest stages x microbatches x virtual stages coh_pipeline_simulate and coh_pipeline_draw
 * take (every stage's list is held at once). */
#define COH_PIPE_MAX_SIMULATED (1 << 20)

/* One stage in a simulated step. */
typedef struct coh_pipe_stage_stats {
    double busy;        /* compute time in its list: m * (t_fwd + t_bwd) */
    double finish;      /* when its last compute ends */
    double idle;        /* makespan - busy: waiting, at the start, in between and at the end */
    int peak_in_flight; /* as coh_pipeline_peak_in_flight */
} coh_pipe_stage_stats;

/* A simulated step, every number counted from the lists. */
typedef struct coh_pipe_sim {
    double makespan;    /* when the last stage's last compute ends (the step starts at 0) */
    double ideal;       /* the busiest stage's compute time: the step with no bubble */
    double bubble;      /* (makespan - ideal) / ideal: a stage's idle time over its compute
                           time, Narayanan et al.'s bubble fraction: (p - 1) / m for GPipe and
                           1F1B, (p - 1) / (v * m) for interleaved, p - 1 for naive, whatever
                           t_fwd and t_bwd */
    int peak_in_flight; /* the largest over stages */
} coh_pipe_sim;

/* Run every stage's list at once: each stage does its actions in order; a compute takes t_fwd
 * or t_bwd per microbatch for the whole stage (t / v per chunk when interleaved); a send costs
 * nothing and never blocks (buffering is unbounded); a receive waits until the matching send
 * has happened. `stages` may be NULL or hold p entries to fill.
 * Errors: COH_ERR_INVALID (the shape; t_fwd or t_bwd not finite and > 0; p * m * v over
 * COH_PIPE_MAX_SIMULATED), COH_ERR_NOMEM, COH_ERR_INTERNAL when the lists deadlock or a send
 * and a receive do not match (a bug; the message names the stage, action and message). */
coh_status coh_pipeline_simulate(const coh_pipe_shape *shape, double t_fwd, double t_bwd,
                                 coh_pipe_sim *out, coh_pipe_stage_stats *stages);

/* ---- drawing -------------------------------------------------------------------------------- */

/* The simulated timeline as text, one line per stage, "stage S: " then one cell per time unit
 * joined by spaces: a compute's label in its first cell ("F3" forward of microbatch 3, "B3"
 * backward; interleaved adds the chunk as a letter, "F3a" chunk 0, "F3b" chunk 1), '-' in the
 * cells it goes on for, '.' where the stage is idle; cells are as wide as the widest label.
 * A chunk's forward takes fwd_cells cells and its backward bwd_cells (1 .. 16 each); trailing
 * blanks are trimmed and each line ends with '\n'.
 * Ownership: *out is a new NUL-terminated string; the caller frees it with free().
 * Errors: those of coh_pipeline_simulate; COH_ERR_INVALID for cells outside 1 .. 16, more than
 * 26 chunks, or a drawing over 16 MiB. */
coh_status coh_pipeline_draw(const coh_pipe_shape *shape, int fwd_cells, int bwd_cells, char **out);

/* ---- the split of the blocks ------------------------------------------------------------------ */

/* `--stage-layers` as users write it, "0-2,3-7" (a lone "5" is block 5): the blocks of each of
 * the `parts` virtual stages, contiguous, in order, covering 0..layers-1 once; the word
 * "embeddings" as the first entry or "head" as the last names a virtual stage holding no block
 * (the embeddings, or the final LayerNorm and LM head, alone), e.g. "0,1,2-11,head".
 * bounds[0..parts] receives the first block of each and `layers` (an empty first stage has
 * bounds[1] == 0, an empty last one bounds[parts - 1] == layers). COH_ERR_INVALID naming the
 * text and what is wrong (a gap, an overlap, the stage count, a word elsewhere). */
coh_status coh_pipe_parse_layers(const char *text, int layers, int parts, int *bounds);

/* Most shards the LM head may be split into along a pipeline. */
#define COH_PIPE_MAX_HEAD_SHARDS 16

/* The first vocabulary row of head shard k of `shards` (k == shards: vocab): V k / shards. */
int coh_pipe_head_shard_row(int vocab, int k, int shards);

/* coh_pipe_parse_layers that also reads head shards: "head:K/N" (shard K of N) or "head:K-J/N"
 * (shards K..J) as an entry of its own, or after the last blocks, "10-11+head:0/2", e.g.
 * "0-5,6-11,head:0/2,head:1/2". The split is then of the chain of `layers` blocks followed by
 * the N shards, in order, each once: bounds[0..parts] in chain units (shard K is unit
 * layers + K), bounds[parts] == layers + N, and *shards = N; with no shard named the head is
 * one unit (N = 1) that the last entry holds after its blocks, or "head" alone. Every entry but
 * an "embeddings" first holds at least one unit. coh_pipe_parse_layers returns these bounds
 * capped at `layers` (a chunk of head shards alone has no block). COH_ERR_INVALID as
 * coh_pipe_parse_layers, also for a shard out of order, a count outside 2..
 * COH_PIPE_MAX_HEAD_SHARDS or differing between entries, or shards before the last block. */
coh_status coh_pipe_parse_split(const char *text, int layers, int parts, int *bounds,
                                int *shards);

#ifdef __cplusplus
}
#endif
#endif
