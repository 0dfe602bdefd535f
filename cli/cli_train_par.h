/* cli_train_par.h: the parallel side of `cohort train` (world, mesh, memory lines, dumps). */
#ifndef COHORT_CLI_TRAIN_PAR_H
#define COHORT_CLI_TRAIN_PAR_H

#include "cli_train.h"
#include "cohort/comm.h"
#include "cohort/json_writer.h"
#include "cohort/parallel.h"

typedef struct cli_par {
    coh_comm *world;
    coh_mesh *mesh;
    int rank, world_size;
    uint64_t base_rss; /* resident bytes just before the model was created */
    char trace_path[4096]; /* "" when no trace */
    coh_par_memory predicted; /* this rank's predicted memory (cli_par_predict), made once */
    int has_prediction;
} cli_par;

/* World communicator (from the launcher's environment for multi-process strategies, else a
 * one-rank communicator) and the mesh (world, 1, 1). */
coh_status cli_par_open(const train_opts *o, cli_par *p);
void cli_par_close(cli_par *p);
/* Rank 0 logs the strategy, the global batch and the model state expected vs held. */
void cli_par_print_start(const train_opts *o, const cli_par *p, coh_par_trainer *t);
void cli_par_print_peak(const cli_par *p, coh_par_trainer *t, const train_opts *o);
/* Per-rank values of the metrics' "memory" array, in this order. */
enum { CLI_MEM_PARAMS, CLI_MEM_GRADS, CLI_MEM_OPTIM, CLI_MEM_PEAK_RSS, CLI_MEM_BASE_RSS,
       CLI_MEM_PREDICTED, CLI_MEM_BUSY_US, CLI_MEM_IDLE_US, CLI_MEM_TP_COMM_US,
       CLI_MEM_ALLOC_PEAK, CLI_MEM_N };
/* This rank's prediction (coh_par_memory_estimate for its rank, or _stage for its pipeline
 * stage), made once by cli_par_open; returns 0 and zeroes *out when none can be made (the
 * threaded dp strategy has no prediction). */
int cli_par_predict(const train_opts *o, const cli_par *p, coh_par_memory *out);
/* all (CLI_MEM_N * world values) <- every rank's peak params, grads, optimizer bytes, peak RSS,
 * (pipelines: the last step's compute and waiting time in microseconds,)
 * RSS before the model, and predicted peak growth. Collective. */
coh_status cli_par_memory(const cli_par *p, coh_par_trainer *t, const train_opts *o,
                          uint64_t rss, uint64_t *all);
/* What a pipeline stage holds, as its start-up and dry-run lines say it: "blocks 0-2 +
 * embeddings", "blocks 3-5 + final LayerNorm and LM head", "final LayerNorm and LM head" (a
 * stage of the head alone). Returns buf. */
char *cli_stage_parts(const coh_pipe_stage *st, char *buf, size_t cap);
/* Strategy dp: a "devices" array of what each device held at the optimizer step. */
void cli_par_write_devices(coh_jw *w, coh_par_trainer *t);
/* Gather the parameters and write them (rank 0) to o->dump_params. Collective. */
coh_status cli_par_dump(const train_opts *o, const cli_par *p, coh_par_trainer *t);

#endif
